/* cmd-inspect.c - `devcache inspect`: a model file's format, metadata and tensors, without reading its data. */
#include "tool.h"

#include <getopt.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Metadata values longer than this are cut in the table (tokenizer
 * vocabularies run to megabytes); --json and --full print them whole. */
#define VALUE_WIDTH 120

static void help(void)
{
	printf(_("Usage: devcache inspect [--json] [--full] FILE...\n"));
	fputs(_("List the format, metadata and tensors (name, dtype, shape, offset, size) of\n"
		"safetensors and GGUF files, checking every rule of the format, without\n"
		"reading the tensors' data.\n"),
	      stdout);
	fputs("\n", stdout);
	fputs(_("      --json   print one JSON object per file\n"
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
	tool_format_bytes(devcache_model_file_size(mf), size, sizeof size);
	printf("%s: %s, %s\n", path, format_name(mf, fmt, sizeof fmt), size);
	printf(_("  %zu metadata entries, %zu tensors, data from byte %llu\n"), nm, nt,
	       (unsigned long long)devcache_model_file_data_offset(mf));
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
		printf("  %-*s  %-*s  %-*s  %12s  %12s\n", name_w, _("name"), dtype_w, _("dtype"),
		       shape_w, _("shape"), _("offset"), _("bytes"));
		for (size_t i = 0; i < nt; i++) {
			devcache_tensor_info_t t;

			devcache_model_file_tensor(mf, i, &t);
			format_shape(&t, shape, sizeof shape);
			printf("  %-*s  %-*s  %-*s  %12llu  %12llu\n", name_w, t.name, dtype_w, t.dtype,
			       shape_w, shape, (unsigned long long)t.offset, (unsigned long long)t.size);
		}
	}
	tool_format_bytes(bytes, size, sizeof size);
	printf(_("  %zu tensors, %s of data\n"), nt, size);
}

/* Builds the object with json-c; metadata values are already JSON text. */
static int print_json(const char *path, const devcache_model_file_t *mf)
{
	struct json_object *root = json_object_new_object(), *meta = json_object_new_object(),
			   *tensors = json_object_new_array();
	unsigned version = 0;
	int format = devcache_model_file_format(mf, &version);
	bool ok = root && meta && tensors;

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
		json_object_array_add(tensors, o);
	}
	if (ok) {
		json_object_object_add(root, "metadata", meta);
		json_object_object_add(root, "tensors", tensors);
		meta = tensors = NULL;
		puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
								  JSON_C_TO_STRING_NOSLASHESCAPE));
	}
	json_object_put(meta);
	json_object_put(tensors);
	json_object_put(root);
	if (!ok)
		tool_error("%s: %s", path, devcache_strerror(DEVCACHE_ENOMEM));
	return ok ? EXIT_OK : EXIT_RUNTIME;
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
	for (int i = optind; i < argc; i++) {
		devcache_model_file_t *mf;
		int rc = devcache_model_file_open(argv[i], &mf);

		if (rc) {
			/* The message names the file and the fault. */
			tool_error("%s", devcache_last_error());
			status = EXIT_RUNTIME;
			continue;
		}
		if (json) {
			if (print_json(argv[i], mf) != EXIT_OK)
				status = EXIT_RUNTIME;
		} else {
			if (i > optind)
				putchar('\n');
			print_table(argv[i], mf, full);
		}
		devcache_model_file_close(mf);
	}
	if (fflush(stdout) != 0 || ferror(stdout)) {
		tool_error("%s", _("inspect: write error"));
		status = EXIT_RUNTIME;
	}
	return status;
}
