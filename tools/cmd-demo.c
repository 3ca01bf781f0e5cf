/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmd-demo.c - `devcache demo`: writes a small Llama-like model and walks it through inspection, loading, a cache hit and a check. */
#include "tool.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A tiny Llama: the names and shapes of the real thing, a few MiB of BF16,
 * so that the demo runs in well under a second anywhere. */
#define HIDDEN 256
#define INTERMEDIATE 688
#define LAYERS 4
#define VOCAB 1024
#define HEADS 4
#define KV_HEADS 2
#define KV_DIM (HIDDEN / HEADS * KV_HEADS)
#define N_TENSORS (3 + 9 * LAYERS)
#define CHECKED_TENSOR "model.layers.0.self_attn.q_proj.weight"

struct demo_tensor {
	char name[64];
	uint64_t rows, cols; /* cols 0: a vector (the norms) */
	uint64_t begin, end; /* data_offsets */
};

struct demo {
	bool keep;
	const char *device;
	char *dir, *path;
	struct demo_tensor tensors[N_TENSORS];
	size_t n;
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	devcache_device_info_t info;
	bool host;
};

static void help(void)
{
	printf(_("Usage: devcache demo [--device D] [--keep]\n"));
	fputs(_("Show what the model cache does: write a small Llama-like model in the\n"
		"safetensors format to a temporary directory, inspect it, load it twice\n"
		"(the second load is a cache hit), check a tensor against the file, and\n"
		"remove the directory.\n"),
	      stdout);
	fputs("\n", stdout);
	fputs(_("  -d, --device=D               load onto device D (default: host)\n"
		"  -k, --keep                   keep the temporary directory and print its\n"
		"                               name\n"),
	      stdout);
	tool_print_common_options();
}

/* Returns -1 to go on, or the exit status. */
static int parse_args(struct tool *t, struct demo *d, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"device", required_argument, NULL, 'd'},
		{"keep", no_argument, NULL, 'k'},
		TOOL_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	int c, status;

	while ((c = getopt_long(argc, argv, "d:k" TOOL_SHORTOPTS, longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			d->device = optarg;
			break;
		case 'k':
			d->keep = true;
			break;
		case 'h':
			help();
			return EXIT_OK;
		default:
			if ((status = tool_common_option(t, c, optarg)) >= 0)
				return status;
		}
	}
	if ((status = tool_no_operands(argc, argv)))
		return status;
	return -1;
}

/* ---- the model --------------------------------------------------------------- */

/* layer < 0: a tensor outside the layers, named name. */
static void add_tensor(struct demo *d, uint64_t rows, uint64_t cols, int layer, const char *name)
{
	struct demo_tensor *t = &d->tensors[d->n++];
	uint64_t offset = d->n > 1 ? t[-1].end : 0;

	if (layer < 0)
		snprintf(t->name, sizeof t->name, "%s", name);
	else
		snprintf(t->name, sizeof t->name, "model.layers.%d.%s", layer, name);
	t->rows = rows;
	t->cols = cols;
	t->begin = offset;
	t->end = offset + rows * (cols ? cols : 1) * 2;
}

/* In the order of the data: embeddings, the layers, the final norm, the head. */
static void plan_model(struct demo *d)
{
	add_tensor(d, VOCAB, HIDDEN, -1, "model.embed_tokens.weight");
	for (int l = 0; l < LAYERS; l++) {
		add_tensor(d, HIDDEN, 0, l, "input_layernorm.weight");
		add_tensor(d, HIDDEN, HIDDEN, l, "self_attn.q_proj.weight");
		add_tensor(d, KV_DIM, HIDDEN, l, "self_attn.k_proj.weight");
		add_tensor(d, KV_DIM, HIDDEN, l, "self_attn.v_proj.weight");
		add_tensor(d, HIDDEN, HIDDEN, l, "self_attn.o_proj.weight");
		add_tensor(d, HIDDEN, 0, l, "post_attention_layernorm.weight");
		add_tensor(d, INTERMEDIATE, HIDDEN, l, "mlp.gate_proj.weight");
		add_tensor(d, INTERMEDIATE, HIDDEN, l, "mlp.up_proj.weight");
		add_tensor(d, HIDDEN, INTERMEDIATE, l, "mlp.down_proj.weight");
	}
	add_tensor(d, HIDDEN, 0, -1, "model.norm.weight");
	add_tensor(d, VOCAB, HIDDEN, -1, "lm_head.weight");
}

/* The JSON header, built with json-c (objects keep their keys' order),
 * padded with spaces to 8 bytes as the reference writer does. */
static char *make_header(const struct demo *d, size_t *len_p)
{
	struct json_object *root = json_object_new_object(), *meta = json_object_new_object();
	bool ok = root && meta;
	char *text = NULL;

	if (ok) {
		json_object_object_add(meta, "format", json_object_new_string("pt"));
		json_object_object_add(root, "__metadata__", meta);
		meta = NULL;
	}
	for (size_t i = 0; ok && i < d->n; i++) {
		const struct demo_tensor *t = &d->tensors[i];
		struct json_object *o = json_object_new_object(), *shape = json_object_new_array(),
				   *offsets = json_object_new_array();

		if (!(ok = o && shape && offsets)) {
			json_object_put(o), json_object_put(shape), json_object_put(offsets);
			break;
		}
		json_object_array_add(shape, json_object_new_uint64(t->rows));
		if (t->cols)
			json_object_array_add(shape, json_object_new_uint64(t->cols));
		json_object_array_add(offsets, json_object_new_uint64(t->begin));
		json_object_array_add(offsets, json_object_new_uint64(t->end));
		json_object_object_add(o, "dtype", json_object_new_string("BF16"));
		json_object_object_add(o, "shape", shape);
		json_object_object_add(o, "data_offsets", offsets);
		json_object_object_add(root, t->name, o);
	}
	if (ok) {
		const char *json = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
							     JSON_C_TO_STRING_NOSLASHESCAPE);
		size_t len = strlen(json), padded = (len + 7) / 8 * 8;

		if ((text = malloc(padded + 1))) {
			memcpy(text, json, len);
			memset(text + len, ' ', padded - len);
			text[padded] = '\0';
			*len_p = padded;
		}
	}
	json_object_put(meta);
	json_object_put(root);
	return text;
}

/* xorshift64*: the same bytes on every machine. */
static uint64_t next_random(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

/* float to bfloat16, rounding to nearest even. */
static uint16_t to_bf16(float v)
{
	uint32_t bits;

	memcpy(&bits, &v, sizeof bits);
	return (uint16_t)((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

/* Weights uniform in [-0.05, 0.05), as after a small init; norms at 1. */
static void fill_tensor(const struct demo_tensor *t, size_t index, unsigned char *buf)
{
	uint64_t s = 0x9e3779b97f4a7c15ull * (index + 1);
	size_t n = (size_t)(t->end - t->begin) / 2;

	for (size_t i = 0; i < n; i++) {
		float v = t->cols ? (float)((double)(next_random(&s) >> 11) / 9007199254740992.0 *
					    0.1 - 0.05)
				  : 1.0f;
		uint16_t h = to_bf16(v);

		buf[2 * i] = (unsigned char)h;
		buf[2 * i + 1] = (unsigned char)(h >> 8);
	}
}

static int write_model(struct demo *d)
{
	size_t header_len = 0, max = 0;
	char *header = make_header(d, &header_len);
	unsigned char len_le[8], *buf;
	FILE *f;
	bool ok;

	for (size_t i = 0; i < d->n; i++)
		if (d->tensors[i].end - d->tensors[i].begin > max)
			max = (size_t)(d->tensors[i].end - d->tensors[i].begin);
	buf = malloc(max);
	if (!header || !buf) {
		free(header);
		free(buf);
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	for (int i = 0; i < 8; i++)
		len_le[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
	f = fopen(d->path, "wbx");
	ok = f && fwrite(len_le, 1, 8, f) == 8 && fwrite(header, 1, header_len, f) == header_len;
	for (size_t i = 0; ok && i < d->n; i++) {
		size_t size = (size_t)(d->tensors[i].end - d->tensors[i].begin);

		fill_tensor(&d->tensors[i], i, buf);
		ok = fwrite(buf, 1, size, f) == size;
	}
	if (f && fclose(f) != 0)
		ok = false;
	free(header);
	free(buf);
	if (!ok) {
		tool_error(_("cannot write %s: %s"), d->path, strerror(errno));
		return EXIT_RUNTIME;
	}
	return EXIT_OK;
}

/* ---- the walk-through ------------------------------------------------------- */

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static int inspect(const struct demo *d)
{
	devcache_model_file_t *mf;
	uint64_t bytes = 0;
	char size[32];

	if (devcache_model_file_open(d->path, &mf)) {
		tool_error("%s", devcache_last_error());
		return EXIT_RUNTIME;
	}
	for (size_t i = 0; i < devcache_model_file_tensor_count(mf); i++) {
		devcache_tensor_info_t t;

		if (devcache_model_file_tensor(mf, i, &t) == 0)
			bytes += t.size;
	}
	format_bytes(bytes, size, sizeof size);
	printf(_("Inspected it: %s, %zu tensors, %s of tensor data from byte %llu.\n"),
	       devcache_model_file_format(mf, NULL) == DEVCACHE_FORMAT_GGUF ? "GGUF"
									    : "safetensors",
	       devcache_model_file_tensor_count(mf), size,
	       (unsigned long long)devcache_model_file_data_offset(mf));
	devcache_model_file_close(mf);
	return EXIT_OK;
}

/* One load, timed; *ns_p gets the time and *r what the load did. */
static int load(struct demo *d, devcache_model_t **model_p, int64_t *ns_p,
		devcache_load_result_t *r)
{
	devcache_load_args_t args = {.struct_size = sizeof args, .result = r};
	int64_t t0 = now_ns();

	if (devcache_model_load(d->ctx, d->path, d->dev, &args, model_p)) {
		tool_error("%s", devcache_last_error());
		return EXIT_RUNTIME;
	}
	*ns_p = now_ns() - t0;
	return EXIT_OK;
}

static int first_load(struct demo *d, int64_t *ns_p)
{
	devcache_load_result_t delta;
	devcache_model_t *model;
	char a[32], b[32];

	if (load(d, &model, ns_p, &delta))
		return EXIT_RUNTIME;
	devcache_model_release(model);
	printf(_("First load on %s: %.3f ms (%s).\n"), d->info.id, (double)*ns_p / 1e6,
	       delta.hit ? _("hit") : _("miss"));
	if (d->host) {
		printf("%s", _("  The file is mapped in place: no copy, nothing read until used.\n"));
	} else {
		format_bytes(delta.bytes_read, a, sizeof a);
		format_bytes(delta.bytes_uploaded, b, sizeof b);
		printf(_("  Read %s from the file through the ring of pinned staging buffers,\n"
			 "  uploaded %s into one allocation from the caching allocator.\n"),
		       a, b);
	}
	printf("%s", _("  Released: the model stays cached, unlocked, until room is needed.\n"));
	return EXIT_OK;
}

static int second_load(struct demo *d, int64_t first_ns, devcache_model_t **model_p)
{
	devcache_load_result_t r;
	int64_t ns;

	if (load(d, model_p, &ns, &r))
		return EXIT_RUNTIME;
	printf(_("Second load on %s: %.3f ms (%s).\n"), d->info.id, (double)ns / 1e6,
	       r.hit ? _("hit") : _("miss"));
	if (r.hit)
		printf(_("  The cache still held it: %.3f ms instead of %.3f ms, nothing read again.\n"),
		       (double)ns / 1e6, (double)first_ns / 1e6);
	return EXIT_OK;
}

/* All of len bytes at offset, or -1. */
static int read_at(int fd, unsigned char *buf, size_t len, uint64_t offset)
{
	while (len > 0) {
		ssize_t n = pread(fd, buf, len, (off_t)offset);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = EIO; /* shorter than its header said */
			return -1;
		}
		buf += n;
		len -= (size_t)n;
		offset += (uint64_t)n;
	}
	return 0;
}

/* The tensor as the device holds it, copied back, against the file's bytes. */
static int check_tensor(const struct demo *d, const devcache_model_t *model)
{
	unsigned char *mem = NULL, *file = NULL;
	devcache_tensor_info_t info;
	int status = EXIT_RUNTIME, fd = -1;
	char size[32];
	void *data;

	if (devcache_model_tensor(model, CHECKED_TENSOR, &info, &data)) {
		tool_error("%s", devcache_last_error());
		return EXIT_RUNTIME;
	}
	mem = malloc((size_t)info.size);
	file = malloc((size_t)info.size);
	if (!mem || !file) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		goto out;
	}
	if (devcache_copy_to_host(d->dev, mem, data, (size_t)info.size, NULL)) {
		tool_error(_("%s: cannot copy it from the device: %s"), CHECKED_TENSOR,
			   devcache_last_error());
		goto out;
	}
	if ((fd = open(d->path, O_RDONLY | O_CLOEXEC)) < 0 ||
	    read_at(fd, file, (size_t)info.size, info.offset) != 0) {
		tool_error(_("cannot read %s: %s"), d->path, strerror(errno));
		goto out;
	}
	if (memcmp(mem, file, (size_t)info.size) != 0) {
		tool_error(_("%s on %s differs from the file"), CHECKED_TENSOR, d->info.id);
		goto out;
	}
	format_bytes(info.size, size, sizeof size);
	printf(_("Checked %s (%s):\n"
		 "  copied back from %s and compared with the file at byte %llu: identical.\n"),
	       CHECKED_TENSOR, size, d->info.id, (unsigned long long)info.offset);
	status = EXIT_OK;
out:
	if (fd >= 0)
		close(fd);
	free(mem);
	free(file);
	return status;
}

/* Open the context and find the device before writing anything. */
static int open_device(struct demo *d, const struct tool *t)
{
	int status;

	if ((status = tool_open(t, &d->ctx)))
		return status;
	if ((status = tool_device(d->ctx, d->device, &d->dev)))
		return status;
	if (devcache_device_info(d->dev, &d->info)) {
		tool_error("%s", devcache_last_error());
		return EXIT_RUNTIME;
	}
	d->host = d->info.caps & DEVCACHE_CAP_HOST_MEMORY;
	return EXIT_OK;
}

static int make_dir(struct demo *d)
{
	const char *tmp = getenv("TMPDIR");

	if (!tmp || !*tmp)
		tmp = "/tmp";
	if (asprintf(&d->dir, "%s/devcache-demo-XXXXXX", tmp) < 0) {
		d->dir = NULL;
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	if (!mkdtemp(d->dir)) {
		tool_error(_("cannot create a directory in %s: %s"), tmp, strerror(errno));
		free(d->dir);
		d->dir = NULL;
		return EXIT_RUNTIME;
	}
	if (asprintf(&d->path, "%s/model.safetensors", d->dir) < 0) {
		d->path = NULL;
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	return EXIT_OK;
}

static int remove_dir(const struct demo *d)
{
	if ((unlink(d->path) != 0 && errno != ENOENT) || rmdir(d->dir) != 0) {
		tool_error(_("cannot remove %s: %s"), d->dir, strerror(errno));
		return EXIT_RUNTIME;
	}
	return EXIT_OK;
}

static int walk(struct demo *d)
{
	devcache_model_t *model = NULL;
	int64_t first_ns = 0;
	char size[32];
	int status;

	printf(_("This demo writes a small Llama-like model (%d layers, hidden size %d, BF16)\n"
		 "in the safetensors format, then loads it through the model cache onto %s\n"
		 "as a program serving it would: the first load places it, the second finds\n"
		 "it cached. Last it checks a tensor's bytes against the file.\n"),
	       LAYERS, HIDDEN, d->info.id);
	putchar('\n');
	plan_model(d);
	if ((status = write_model(d)))
		return status;
	format_bytes(d->tensors[d->n - 1].end, size, sizeof size);
	printf(_("Wrote %s: %zu tensors, %s.\n"), d->path, d->n, size);
	if ((status = inspect(d)) || (status = first_load(d, &first_ns)) ||
	    (status = second_load(d, first_ns, &model)))
		return status;
	status = check_tensor(d, model);
	if (status == EXIT_OK) {
		putchar('\n');
		if (devcache_cache_summary(d->ctx, stdout)) {
			tool_error(_("cannot print the cache summary: %s"),
				   devcache_last_error());
			status = EXIT_RUNTIME;
		}
		putchar('\n');
	}
	devcache_model_release(model);
	return status;
}

int cmd_demo(struct tool *t, int argc, char **argv)
{
	struct demo *d = calloc(1, sizeof *d);
	int status;

	if (!d) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	d->device = "host";
	if ((status = parse_args(t, d, argc, argv)) >= 0)
		goto out;
	if ((status = open_device(d, t)) || (status = make_dir(d)))
		goto out;
	status = walk(d);
	/* The context first: on the host the model is the file, mapped. */
	devcache_close(d->ctx);
	d->ctx = NULL;
	if (d->keep) {
		printf(_("Kept %s.\n"), d->dir);
	} else if (remove_dir(d) != EXIT_OK) {
		status = EXIT_RUNTIME;
	} else if (status == EXIT_OK) {
		printf(_("Released the model and removed %s.\n"), d->dir);
	}
out:
	/* A failure before the model was written leaves an empty directory. */
	if (d->dir && d->ctx && !d->keep)
		rmdir(d->dir);
	if (d->ctx)
		devcache_close(d->ctx);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		tool_error("%s", _("write error on standard output"));
		status = EXIT_RUNTIME;
	}
	free(d->dir);
	free(d->path);
	free(d);
	return status;
}
