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
	fputs(_("  -j, --json                   print a JSON object (an array of them for\n"
		"                               several models)\n"
		"  -f, --full                   print long metadata values whole\n"),
	      stdout);
	tool_print_common_options();
	fputs("\n", stdout);
	fputs(_("No tunable changes what inspect prints; those given with -o are checked.\n"),
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

static bool is_gguf(const devcache_model_file_t *mf)
{
	unsigned version;

	return devcache_model_file_format(mf, &version) == DEVCACHE_FORMAT_GGUF;
}

static int digits(uint64_t n)
{
	int d = 1;

	while (n >= 10)
		n /= 10, d++;
	return d;
}

static int max_int(int a, int b)
{
	return a > b ? a : b;
}

/* The columns of the tensor table: text left-aligned, numbers right-aligned
 * under right-aligned headers. */
struct columns {
	int name, dtype, shape, offset, bytes, shard;
};

static struct columns measure(const devcache_model_file_t *mf, const char *shape_header,
			      bool sharded)
{
	struct columns w = {
		.name = (int)tool_width(_("name")),
		.dtype = (int)tool_width(_("dtype")),
		.shape = (int)tool_width(shape_header),
		.offset = (int)tool_width(_("offset")),
		.bytes = (int)tool_width(_("bytes")),
		.shard = sharded ? (int)tool_width(_("shard")) : 0,
	};
	char shape[512];

	for (size_t i = 0; i < devcache_model_file_tensor_count(mf); i++) {
		devcache_tensor_info_t t;

		devcache_model_file_tensor(mf, i, &t);
		format_shape(&t, shape, sizeof shape);
		w.name = max_int(w.name, (int)tool_width(tool_shown(t.name)));
		w.dtype = max_int(w.dtype, (int)tool_width(tool_shown(t.dtype)));
		w.shape = max_int(w.shape, (int)tool_width(shape));
		w.offset = max_int(w.offset, digits(t.offset));
		w.bytes = max_int(w.bytes, digits(t.size));
		if (sharded)
			w.shard = max_int(w.shard, digits(t.shard));
	}
	/* A name too long for the line has one of its own, the row under it. */
	int rest = 2 + w.dtype + 2 + w.shape + 2 + w.offset + 2 + w.bytes +
		   (sharded ? 2 + w.shard : 0);
	if (2 + w.name + rest > TOOL_COLUMNS)
		w.name = max_int((int)tool_width(_("name")), TOOL_COLUMNS - 2 - rest);
	return w;
}

/* printf's %-*s counts bytes; a column counts characters. */
static void print_left(const char *s, int w)
{
	printf("%s%*s", s, max_int(0, w - (int)tool_width(s)), "");
}

static void print_right(const char *s, int w)
{
	printf("%*s%s", max_int(0, w - (int)tool_width(s)), "", s);
}

static void print_tensors(const devcache_model_file_t *mf, bool sharded)
{
	const char *shape_header = _("shape");
	struct columns w = measure(mf, shape_header, sharded);
	char shape[512], n[32];

	/* GGUF lists a tensor's dimensions innermost first (ne[0], ne[1], ...),
	 * safetensors outermost first: each is printed in its file's order. */
	if (is_gguf(mf))
		printf(_("Tensors (shapes innermost dimension first, as in GGUF):\n"));
	else
		printf(_("Tensors (shapes outermost dimension first):\n"));
	printf("  ");
	print_left(_("name"), w.name);
	printf("  ");
	print_left(_("dtype"), w.dtype);
	printf("  ");
	print_left(shape_header, w.shape);
	printf("  ");
	print_right(_("offset"), w.offset);
	printf("  ");
	print_right(_("bytes"), w.bytes);
	if (sharded) {
		printf("  ");
		print_right(_("shard"), w.shard);
	}
	putchar('\n');
	for (size_t i = 0; i < devcache_model_file_tensor_count(mf); i++) {
		devcache_tensor_info_t t;

		devcache_model_file_tensor(mf, i, &t);
		format_shape(&t, shape, sizeof shape);
		const char *name = tool_shown(t.name);

		printf("  ");
		if ((int)tool_width(name) > w.name)
			printf("%s\n  %*s", name, w.name, "");
		else
			print_left(name, w.name);
		printf("  ");
		print_left(tool_shown(t.dtype), w.dtype);
		printf("  ");
		print_left(shape, w.shape);
		printf("  %*llu  %*llu", w.offset, (unsigned long long)t.offset, w.bytes,
		       (unsigned long long)t.size);
		if (sharded) {
			snprintf(n, sizeof n, "%u", t.shard);
			printf("  ");
			print_right(n, w.shard);
		}
		putchar('\n');
	}
}

/* value shown (tool_shown), whole characters of it up to cols columns. */
static void print_shown_upto(const char *value, int cols)
{
	size_t n = strlen(value), len;
	char unit[UTF8_SHOWN_MAX + 1];

	for (size_t i = 0; i < n;) {
		size_t used = utf8_show(value + i, n - i, unit, &len);
		int w;

		unit[len] = '\0';
		w = (int)tool_width(unit);
		if (w > cols)
			return;
		fputs(unit, stdout);
		cols -= w;
		i += used;
	}
}

/* "  key = value", the value cut where the line ends unless full; keys and
 * values are the file's, shown safely. */
static bool print_metadata(const devcache_model_file_t *mf, bool full)
{
	bool cut = false;

	printf(_("Metadata:\n"));
	for (size_t i = 0; i < devcache_model_file_metadata_count(mf); i++) {
		const char *key, *value;
		int room;

		devcache_model_file_metadata(mf, i, &key, &value);
		key = tool_shown(key);
		room = TOOL_COLUMNS - 2 - (int)tool_width(key) - 3;
		if (full || (int)tool_width(tool_shown(value)) <= room) {
			printf("  %s = %s\n", key, tool_shown(value));
			continue;
		}
		/* Whole characters, three columns left for "...". */
		printf("  %s = ", key);
		print_shown_upto(value, max_int(room - 3, 0));
		printf("...\n");
		cut = true;
	}
	return cut;
}

static void print_table(const char *path, const devcache_model_file_t *mf, bool full)
{
	size_t nt = devcache_model_file_tensor_count(mf), nm = devcache_model_file_metadata_count(mf);
	size_t ns = devcache_model_file_shard_count(mf);
	char fmt[32], size[32];
	uint64_t bytes = 0;

	for (size_t i = 0; i < nt; i++) {
		devcache_tensor_info_t t;

		devcache_model_file_tensor(mf, i, &t);
		bytes += t.size;
	}
	format_bytes(devcache_model_file_size(mf), size, sizeof size);
	format_name(mf, fmt, sizeof fmt);
	/* A long path, and what it is on the line under it. */
	path = tool_shown(path);
	printf("%s:%s%s, %s\n", path,
	       tool_width(path) + 3 + strlen(fmt) + strlen(size) > TOOL_COLUMNS ? "\n  " : " ",
	       fmt, size);
	printf("  ");
	printf(P_("%zu metadata entry", "%zu metadata entries", nm), nm);
	printf(", ");
	printf(P_("%zu tensor", "%zu tensors", nt), nt);
	printf(", ");
	printf(_("data from byte %llu\n"), (unsigned long long)devcache_model_file_data_offset(mf));
	if (ns > 1) {
		int w = digits(ns - 1), sw = 0;

		printf(_("Shards:\n"));
		for (size_t i = 0; i < ns; i++) {
			uint64_t n;
			const char *shard;

			devcache_model_file_shard(mf, i, &shard, &n);
			format_bytes(n, size, sizeof size);
			sw = max_int(sw, (int)strlen(size));
		}
		for (size_t i = 0; i < ns; i++) {
			const char *shard;
			uint64_t n;

			devcache_model_file_shard(mf, i, &shard, &n);
			format_bytes(n, size, sizeof size);
			printf("  %*zu  %*s  ", w, i, sw, size);
			tool_wrap(stdout, (size_t)(2 + w + 2 + sw + 2), 4, tool_shown(shard));
		}
	}
	if (nm && print_metadata(mf, full))
		printf("  %s\n", _("(long values cut; --full prints them whole)"));
	if (nt)
		print_tensors(mf, ns > 1);
	format_bytes(bytes, size, sizeof size);
	printf("  ");
	printf(P_("%zu tensor, %s of data\n", "%zu tensors, %s of data\n", nt), nt, size);
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
		/* As the file has it: GGUF's ne[0] first, safetensors' outermost. */
		json_object_object_add(root, "shape_order", json_object_new_string(
				       format == DEVCACHE_FORMAT_GGUF ? "innermost_first"
								      : "outermost_first"));
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
	int name_w = (int)tool_width(_("component")), class_w = (int)tool_width(_("class")),
	    size_w = (int)tool_width(_("size")), files_w = (int)tool_width(_("files"));
	char size[32], files[32];

	for (size_t i = 0; i < n; i++) {
		devcache_component_t c;

		devcache_pipeline_component(pl, i, &c);
		format_bytes(c.size, size, sizeof size);
		name_w = max_int(name_w, (int)tool_width(tool_shown(c.name)));
		class_w = max_int(class_w, (int)tool_width(tool_shown(c.class_name)));
		size_w = max_int(size_w, (int)strlen(size));
		files_w = max_int(files_w, digits(c.shards));
	}
	printf(P_("%s: a diffusers pipeline of %zu component; load one with weights\n",
		  "%s: a diffusers pipeline of %zu components; load one of those with weights\n",
		  n),
	       tool_shown(path), n);
	printf("  ");
	print_left(_("component"), name_w);
	printf("  ");
	print_left(_("class"), class_w);
	printf("  ");
	print_right(_("size"), size_w);
	printf("  ");
	print_right(_("files"), files_w);
	putchar('\n');
	for (size_t i = 0; i < n; i++) {
		devcache_component_t c;

		devcache_pipeline_component(pl, i, &c);
		if (c.shards)
			format_bytes(c.size, size, sizeof size);
		else
			snprintf(size, sizeof size, "-");
		snprintf(files, sizeof files, "%zu", c.shards);
		printf("  ");
		print_left(tool_shown(c.name), name_w);
		printf("  ");
		print_left(tool_shown(c.class_name), class_w);
		printf("  ");
		print_right(size, size_w);
		printf("  ");
		print_right(files, files_w);
		putchar('\n');
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
		tool_error("%s: %s", tool_shown(path), devcache_strerror(DEVCACHE_ENOMEM));
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

int cmd_inspect(struct tool *t, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, 'j'},
		{"full", no_argument, NULL, 'f'},
		TOOL_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	bool json = false, full = false;
	int c, status = EXIT_OK;

	while ((c = getopt_long(argc, argv, "jf" TOOL_SHORTOPTS, longopts, NULL)) != -1) {
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
			if ((status = tool_common_option(t, c, optarg)) >= 0)
				return status;
		}
	}
	if (optind == argc) {
		tool_error("%s", _("no file given"));
		return tool_try_help();
	}
	/* One meaning for -o everywhere: tunables, checked here as elsewhere. */
	if (t->options) {
		devcache_ctx_t *ctx;

		if ((status = tool_open(t, &ctx)))
			return status;
		devcache_close(ctx);
	}
	struct json_object *all = json ? json_object_new_array() : NULL;

	if (json && !all) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
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
		tool_error("%s", _("write error"));
		status = EXIT_RUNTIME;
	}
	return status;
}
