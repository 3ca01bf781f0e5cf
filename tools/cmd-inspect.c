/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmd-inspect.c - `devcache inspect`: a model file's format, metadata and tensors, without reading its data. */
#include "tool.h"

#include <getopt.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Metadata values longer than this are cut in the table (tokenizer
 * vocabularies run to megabytes); --json and --full print them whole. */
#define VALUE_WIDTH 120

static void help(void)
{
	printf(_("Usage: devcache inspect [--json] [--full] MODEL...\n"));
	fputs(_("List the format, metadata and tensors (name, dtype, shape, offset, size) of\n"
		"safetensors and GGUF models, checking every rule of the format, without\n"
		"reading the tensors' data.  A MODEL is a file, a *.safetensors.index.json\n"
		"with its shards, any shard of a GGUF split, or a folder holding one of\n"
		"these; for a diffusers pipeline folder, its components are listed.\n"),
	      stdout);
	fputs("\n", stdout);
	fputs(_("      --json   print a JSON object (an array of them for several models)\n"
		"      --full   print long metadata values whole\n"
		"  -h, --help   show this help and exit\n"),
	      stdout);
}

static void format_shape(const devcache_tensor_info_t *t, char *buf, size_t size)
{
	size_t n = (size_t)snprintf(buf, size, "[");

	for (unsigned d = 0; d < t->n_dims && n < size; d++)
		n += (size_t)snprintf(buf + n, size - n, "%s%llu", d ? ", " : "",
				      (unsigned long long)t->shape[d]);
	if (n < size)
		snprintf(buf + n, size - n, "]");
}

static const char *format_name(const devcache_model_file_t *mf, char *buf, size_t size)
{
	unsigned version = 0;

	if (devcache_model_file_format(mf, &version) == DEVCACHE_FORMAT_GGUF)
		snprintf(buf, size, "GGUF v%u", version);
	else
		snprintf(buf, size, "safetensors");
	return buf;
}

static void print_table(const char *path, const devcache_model_file_t *mf, bool full)
{
	size_t nt = devcache_model_file_tensor_count(mf), nm = devcache_model_file_metadata_count(mf);
	char fmt[32], size[32], shape[512];
	int name_w = 4, dtype_w = 5, shape_w = 5;
	uint64_t bytes = 0;

	for (size_t i = 0; i < nt; i++) {
		devcache_tensor_info_t t;

		devcache_model_file_tensor(mf, i, &t);
		format_shape(&t, shape, sizeof shape);
		if ((int)strlen(t.name) > name_w)
			name_w = (int)strlen(t.name);
		if ((int)strlen(t.dtype) > dtype_w)
			dtype_w = (int)strlen(t.dtype);
		if ((int)strlen(shape) > shape_w)
			shape_w = (int)strlen(shape);
		bytes += t.size;
	}
	if (name_w > 60)
		name_w = 60;
	size_t ns = devcache_model_file_shard_count(mf);

	tool_format_bytes(devcache_model_file_size(mf), size, sizeof size);
	printf("%s: %s, %s\n", path, format_name(mf, fmt, sizeof fmt), size);
	printf(_("  %zu metadata entries, %zu tensors, data from byte %llu\n"), nm, nt,
	       (unsigned long long)devcache_model_file_data_offset(mf));
	if (ns > 1) {
		printf(_("Shards:\n"));
		for (size_t i = 0; i < ns; i++) {
			const char *shard;
			uint64_t n;

			devcache_model_file_shard(mf, i, &shard, &n);
			tool_format_bytes(n, size, sizeof size);
			printf("  %2zu  %10s  %s\n", i, size, shard);
		}
	}
	if (nm) {
		printf(_("Metadata:\n"));
		for (size_t i = 0; i < nm; i++) {
			const char *key, *value;
			int len;

			devcache_model_file_metadata(mf, i, &key, &value);
			len = (int)strlen(value);
			if (!full && len > VALUE_WIDTH)
				printf("  %s = %.*s... (%s)\n", key, VALUE_WIDTH, value,
				       _("cut; --full prints it whole"));
			else
				printf("  %s = %s\n", key, value);
		}
	}
	if (nt) {
		printf(_("Tensors:\n"));
		printf("  %-*s  %-*s  %-*s  %12s  %12s%s\n", name_w, _("name"), dtype_w, _("dtype"),
		       shape_w, _("shape"), _("offset"), _("bytes"), ns > 1 ? _("  shard") : "");
		for (size_t i = 0; i < nt; i++) {
			devcache_tensor_info_t t;
			char shard[16] = "";

			devcache_model_file_tensor(mf, i, &t);
			format_shape(&t, shape, sizeof shape);
			if (ns > 1)
				snprintf(shard, sizeof shard, "  %5u", t.shard);
			printf("  %-*s  %-*s  %-*s  %12llu  %12llu%s\n", name_w, t.name, dtype_w,
			       t.dtype, shape_w, shape, (unsigned long long)t.offset,
			       (unsigned long long)t.size, shard);
		}
	}
	tool_format_bytes(bytes, size, sizeof size);
	printf(_("  %zu tensors, %s of data\n"), nt, size);
}

/* The model as a JSON object, built with json-c (metadata values are
 * already JSON text); NULL without memory. */
static struct json_object *model_json(const char *path, const devcache_model_file_t *mf)
{
	struct json_object *root = json_object_new_object(), *meta = json_object_new_object(),
			   *tensors = json_object_new_array(), *shards = json_object_new_array();
	unsigned version = 0;
	int format = devcache_model_file_format(mf, &version);
	bool ok = root && meta && tensors && shards;

	if (ok) {
		json_object_object_add(root, "file", json_object_new_string(path));
		json_object_object_add(root, "format", json_object_new_string(
				       format == DEVCACHE_FORMAT_GGUF ? "gguf" : "safetensors"));
		json_object_object_add(root, "version", json_object_new_int((int)version));
		json_object_object_add(root, "size",
				       json_object_new_uint64(devcache_model_file_size(mf)));
		json_object_object_add(root, "data_offset",
				       json_object_new_uint64(devcache_model_file_data_offset(mf)));
	}
	for (size_t i = 0; ok && i < devcache_model_file_shard_count(mf); i++) {
		struct json_object *o = json_object_new_object();
		const char *shard;
		uint64_t n;

		if (!(ok = o != NULL))
			break;
		devcache_model_file_shard(mf, i, &shard, &n);
		json_object_object_add(o, "file", json_object_new_string(shard));
		json_object_object_add(o, "size", json_object_new_uint64(n));
		json_object_array_add(shards, o);
	}
	for (size_t i = 0; ok && i < devcache_model_file_metadata_count(mf); i++) {
		const char *key, *value;
		struct json_object *v;

		devcache_model_file_metadata(mf, i, &key, &value);
		v = json_tokener_parse(value);
		if (!v) /* cannot happen with the library's values; keep the text */
			v = json_object_new_string(value);
		ok = v != NULL;
		if (ok)
			json_object_object_add(meta, key, v);
	}
	for (size_t i = 0; ok && i < devcache_model_file_tensor_count(mf); i++) {
		devcache_tensor_info_t t;
		struct json_object *o = json_object_new_object(), *shape = json_object_new_array();

		devcache_model_file_tensor(mf, i, &t);
		ok = o && shape;
		for (unsigned d = 0; ok && d < t.n_dims; d++)
			json_object_array_add(shape, json_object_new_uint64(t.shape[d]));
		if (!ok) {
			json_object_put(o);
			json_object_put(shape);
			break;
		}
		json_object_object_add(o, "name", json_object_new_string(t.name));
		json_object_object_add(o, "dtype", json_object_new_string(t.dtype));
		json_object_object_add(o, "shape", shape);
		json_object_object_add(o, "offset", json_object_new_uint64(t.offset));
		json_object_object_add(o, "size", json_object_new_uint64(t.size));
		json_object_object_add(o, "shard", json_object_new_uint64(t.shard));
		json_object_array_add(tensors, o);
	}
	if (ok) {
		json_object_object_add(root, "shards", shards);
		json_object_object_add(root, "metadata", meta);
		json_object_object_add(root, "tensors", tensors);
		return root;
	}
	json_object_put(shards);
	json_object_put(meta);
	json_object_put(tensors);
	json_object_put(root);
	return NULL;
}

/* ---- diffusers pipelines: their components ---------------------------------------- */

static void print_pipeline(const char *path, const devcache_pipeline_t *pl)
{
	size_t n = devcache_pipeline_component_count(pl);
	int name_w = 9, class_w = 5;
	char size[32];

	for (size_t i = 0; i < n; i++) {
		devcache_component_t c;

		devcache_pipeline_component(pl, i, &c);
		if ((int)strlen(c.name) > name_w)
			name_w = (int)strlen(c.name);
		if ((int)strlen(c.class_name) > class_w)
			class_w = (int)strlen(c.class_name);
	}
	printf(_("%s: a diffusers pipeline of %zu components; load one of those with weights\n"),
	       path, n);
	printf("  %-*s  %-*s  %10s  %6s\n", name_w, _("component"), class_w, _("class"), _("size"),
	       _("files"));
	for (size_t i = 0; i < n; i++) {
		devcache_component_t c;

		devcache_pipeline_component(pl, i, &c);
		if (c.shards)
			tool_format_bytes(c.size, size, sizeof size);
		else
			snprintf(size, sizeof size, "-");
		printf("  %-*s  %-*s  %10s  %6zu\n", name_w, c.name, class_w, c.class_name, size,
		       c.shards);
	}
}

static struct json_object *pipeline_json(const char *path, const devcache_pipeline_t *pl)
{
	struct json_object *root = json_object_new_object(), *comps = json_object_new_array();
	bool ok = root && comps;

	for (size_t i = 0; ok && i < devcache_pipeline_component_count(pl); i++) {
		struct json_object *o = json_object_new_object();
		devcache_component_t c;

		if (!(ok = o != NULL))
			break;
		devcache_pipeline_component(pl, i, &c);
		json_object_object_add(o, "name", json_object_new_string(c.name));
		json_object_object_add(o, "path", json_object_new_string(c.path));
		json_object_object_add(o, "library", json_object_new_string(c.library));
		json_object_object_add(o, "class", json_object_new_string(c.class_name));
		json_object_object_add(o, "size", json_object_new_uint64(c.size));
		json_object_object_add(o, "files", json_object_new_uint64(c.shards));
		json_object_array_add(comps, o);
	}
	if (!ok) {
		json_object_put(comps);
		json_object_put(root);
		return NULL;
	}
	json_object_object_add(root, "pipeline", json_object_new_string(path));
	json_object_object_add(root, "components", comps);
	return root;
}

static bool is_pipeline(const char *path)
{
	char index[4096];
	struct stat st;

	snprintf(index, sizeof index, "%s/model_index.json", path);
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && access(index, F_OK) == 0;
}

/* One model or pipeline: printed as a table, or added to out as JSON. */
static int inspect_one(const char *path, bool full, struct json_object *out, bool first)
{
	struct json_object *o = NULL;
	int rc;

	if (is_pipeline(path)) {
		devcache_pipeline_t *pl;

		if ((rc = devcache_pipeline_open(path, &pl)))
			goto fail;
		if (out)
			o = pipeline_json(path, pl);
		else {
			if (!first)
				putchar('\n');
			print_pipeline(path, pl);
		}
		devcache_pipeline_close(pl);
	} else {
		devcache_model_file_t *mf;

		if ((rc = devcache_model_file_open(path, &mf)))
			goto fail;
		if (out)
			o = model_json(path, mf);
		else {
			if (!first)
				putchar('\n');
			print_table(path, mf, full);
		}
		devcache_model_file_close(mf);
	}
	if (out && !o) {
		tool_error("%s: %s", path, devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	if (out)
		json_object_array_add(out, o);
	return EXIT_OK;
fail:
	/* The message names the file and the fault. */
	tool_error("%s", devcache_last_error());
	return EXIT_RUNTIME;
}

int cmd_inspect(const struct tool *t, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, 'j'},
		{"full", no_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	bool json = false, full = false;
	int c, status = EXIT_OK;

	(void)t;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'f':
			full = true;
			break;
		case 'h':
			help();
			return EXIT_OK;
		default:
			fprintf(stderr, _("Try 'devcache inspect --help' for more information.\n"));
			return EXIT_USAGE;
		}
	}
	if (optind == argc) {
		tool_error("%s", _("inspect: no file given"));
		return EXIT_USAGE;
	}
	struct json_object *all = json ? json_object_new_array() : NULL;

	if (json && !all) {
		tool_error("inspect: %s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	for (int i = optind; i < argc; i++)
		if (inspect_one(argv[i], full, all, i == optind) != EXIT_OK)
			status = EXIT_RUNTIME;
	/* One document: the object of one model, an array for several. */
	if (all && json_object_array_length(all) > 0) {
		struct json_object *doc = argc - optind == 1 ? json_object_array_get_idx(all, 0) : all;

		puts(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN |
							 JSON_C_TO_STRING_NOSLASHESCAPE));
	}
	json_object_put(all);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		tool_error("%s", _("inspect: write error"));
		status = EXIT_RUNTIME;
	}
	return status;
}
