/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-model-set.c - models of several files: Hugging Face shards with an index, GGUF splits, folders holding one model, diffusers pipelines, and loading sets. */
#include "tap.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <devcache.h>

#include "model-writer.h"

TEST_TMPDIR_FIXTURE("model-set");

/* ---- helpers ------------------------------------------------------------------- */

/* buf = folder/name, failing the test when it does not fit. */
static void file_in(char *buf, size_t size, const char *folder, const char *name)
{
	int len = snprintf(buf, size, "%s/%s", folder, name);

	if (len < 0 || (size_t)len >= size)
		fail_msg("%s/%s does not fit in %zu bytes", folder, name, size);
}

static void path_of(char *buf, size_t size, const char *name)
{
	file_in(buf, size, dir, name);
}

/* A fresh folder dir/name, its path in buf. */
static void make_dir(char *buf, size_t size, const char *name)
{
	path_of(buf, size, name);
	if (mkdir(buf, 0755) != 0)
		fail_msg("cannot create %s", buf);
}

/* The path of shard k of n of STEM in folder. */
static void shard_path(char *buf, size_t size, const char *folder, const char *stem, unsigned k,
		       unsigned n, const char *ext)
{
	char name[256];

	mw_shard_name(name, sizeof name, stem, k, n, ext);
	file_in(buf, size, folder, name);
}

static uint64_t file_size(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0)
		fail_msg("cannot stat %s", path);
	return (uint64_t)st.st_size;
}

static void copy_file(const char *from, const char *to)
{
	char *text = test_slurp_must(from);

	mw_bytes(to, text, (size_t)file_size(from));
	free(text);
}

/* Opening path fails with rc, and the message holds each of the strings
 * (NULL-terminated). */
static void refused(const char *path, int rc, ...)
{
	devcache_model_file_t *mf = (devcache_model_file_t *)1;
	const char *s;
	va_list ap;
	int got = devcache_model_file_open(path, &mf);

	if (got == 0)
		devcache_model_file_close(mf);
	if (got != rc)
		fail_msg("%s: %d, not %d (%s)", path, got, rc, got ? devcache_last_error() : "opened");
	assert_null(mf);
	va_start(ap, rc);
	while ((s = va_arg(ap, const char *)))
		assert_contains(devcache_last_error(), s);
	va_end(ap);
}

static devcache_model_file_t *opened(const char *path)
{
	devcache_model_file_t *mf;

	if (devcache_model_file_open(path, &mf))
		fail_msg("%s: %s", path, devcache_last_error());
	return mf;
}

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The set's tensors are t's in shard order, then in the order given
 * (which is each shard's file order), each with its shard and size. */
static void expect_order(const devcache_model_file_t *mf, const struct mw_tensor *t, size_t n,
			 unsigned n_shards)
{
	size_t i = 0;

	assert_int_equal(devcache_model_file_tensor_count(mf), n);
	for (unsigned k = 0; k < n_shards; k++)
		for (size_t j = 0; j < n; j++) {
			devcache_tensor_info_t info;

			if (t[j].shard != k)
				continue;
			assert_int_equal(devcache_model_file_tensor(mf, i, &info), 0);
			if (strcmp(info.name, t[j].name) != 0)
				fail_msg("tensor %zu is '%s', not '%s'", i, info.name, t[j].name);
			assert_int_equal(info.shard, k);
			assert_int_equal(info.size, t[j].size);
			i++;
		}
	assert_int_equal(i, n);
}

/* Every tensor's bytes where its info says: in its own shard file, at
 * its offset there. */
static void expect_bytes_in_shards(const devcache_model_file_t *mf, unsigned seed)
{
	for (size_t i = 0; i < devcache_model_file_tensor_count(mf); i++) {
		devcache_tensor_info_t info;
		const char *path;
		uint64_t size;

		assert_int_equal(devcache_model_file_tensor(mf, i, &info), 0);
		assert_int_equal(devcache_model_file_shard(mf, info.shard, &path, &size), 0);
		assert_true(info.offset + info.size <= size);
		unsigned char *buf = malloc(info.size ? info.size : 1);
		int fd = open(path, O_RDONLY);

		assert_non_null(buf);
		assert_true(fd >= 0);
		assert_int_equal(pread(fd, buf, info.size, (off_t)info.offset), (ssize_t)info.size);
		close(fd);
		mw_check(info.name, buf, info.size, seed);
		free(buf);
	}
}

/* The set's shards are these files, with their sizes on disk, and its
 * size their sum. */
static void expect_shards(const devcache_model_file_t *mf, const char *const *paths, size_t n)
{
	uint64_t sum = 0;

	assert_int_equal(devcache_model_file_shard_count(mf), n);
	for (size_t k = 0; k < n; k++) {
		const char *path;
		uint64_t size;

		assert_int_equal(devcache_model_file_shard(mf, k, &path, &size), 0);
		assert_string_equal(path, paths[k]);
		assert_int_equal(size, file_size(paths[k]));
		sum += size;
	}
	assert_int_equal(devcache_model_file_size(mf), sum);
}

static void expect_meta(const devcache_model_file_t *mf, size_t i, const char *key,
			const char *value_json)
{
	const char *k, *v;

	assert_int_equal(devcache_model_file_metadata(mf, i, &k, &v), 0);
	assert_string_equal(k, key);
	assert_string_equal(v, value_json);
}

static uint64_t sum_sizes(const struct mw_tensor *t, size_t n)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += t[i].size;
	return sum;
}

/* A set of three shards, spread unevenly: the third holds one tensor, and
 * the weight map names it first; each shard's file order is not its name
 * order; a tensor of no bytes. */
static const struct mw_tensor set3[] = {
	{"lm_head.weight", 100003, 2},
	{"model.layers.1.mlp.down", 65536, 1},
	{"model.embed_tokens.weight", 70000, 0},
	{"model.layers.0.attn.v", 1, 0},
	{"model.layers.1.attn.q", 12345, 1},
	{"model.layers.0.attn.k", 4096, 0},
	{"model.norm.bias", 0, 1},
	{"model.layers.0.mlp.up", 200000, 0},
	{"model.layers.1.attn.k", 3, 1},
};

/* Shard paths of STEM's n safetensors shards in folder. */
static void st_shards(char paths[][512], const char *folder, const char *stem, unsigned n)
{
	for (unsigned k = 0; k < n; k++)
		shard_path(paths[k], 512, folder, stem, k, n, "safetensors");
}

/* Write an index for t (as mw_sharded writes it) in a scratch folder and
 * move it over dir/STEM.safetensors.index.json, leaving the shards as
 * they are: an index that disagrees with its shards. */
static void index_only(const char *stem, const struct mw_tensor *t, size_t n, unsigned n_shards,
		       unsigned seed, char *idx, size_t idx_size)
{
	char scratch[512], tmp[512];

	make_dir(scratch, sizeof scratch, "index-scratch");
	mw_sharded(scratch, stem, t, n, n_shards, seed, 0, tmp, sizeof tmp);
	snprintf(idx, idx_size, "%s/%s.safetensors.index.json", dir, stem);
	assert_int_equal(rename(tmp, idx), 0);
	test_tmpdir_remove(scratch);
}

/* The tensors of t in shard k, for rewriting one shard alone. */
static size_t of_shard(const struct mw_tensor *t, size_t n, unsigned k, struct mw_tensor *out)
{
	size_t m = 0;

	for (size_t i = 0; i < n; i++)
		if (t[i].shard == k)
			out[m++] = t[i];
	return m;
}

/* A GGUF split whose shards all hold tensors. */
static const struct mw_tensor split3[] = {
	{"token_embd.weight", 70000, 0},
	{"blk.0.attn_q.weight", 4097, 0},
	{"blk.0.ffn_up.weight", 100000, 1},
	{"blk.1.attn_q.weight", 1, 1},
	{"blk.1.ffn_up.weight", 65536, 1},
	{"output.weight", 33333, 2},
};

/* gguf-split --no-tensor-first-split: the first shard holds metadata only. */
static const struct mw_tensor split_nofirst[] = {
	{"token_embd.weight", 70000, 1},
	{"blk.0.attn_q.weight", 4097, 1},
	{"blk.0.ffn_up.weight", 100000, 2},
	{"blk.1.attn_q.weight", 1, 2},
	{"output.weight", 33333, 2},
};

static void gguf_shards(char paths[][512], const char *folder, const char *prefix, unsigned n)
{
	for (unsigned k = 0; k < n; k++)
		shard_path(paths[k], 512, folder, prefix, k, n, "gguf");
}

/* Whether p lies in a mapping of the file at path, at offset off of it. */
static bool mapped_at(const void *p, const char *path, uint64_t off)
{
	char real[4096], line[8192], file[4096];
	bool yes = false;
	FILE *f;

	assert_non_null(realpath(path, real));
	assert_non_null(f = fopen("/proc/self/maps", "r"));
	while (!yes && fgets(line, sizeof line, f)) {
		unsigned long long lo, hi, moff;

		if (sscanf(line, "%llx-%llx %*s %llx %*s %*s %4095s", &lo, &hi, &moff, file) == 4 &&
		    strcmp(file, real) == 0 && (uintptr_t)p >= lo && (uintptr_t)p < hi)
			yes = (uintptr_t)p - lo + moff == off;
	}
	fclose(f);
	return yes;
}

/* A model loaded on a device: every tensor copied back is the writer's. */
static void expect_device_bytes(devcache_device_t *dev, devcache_model_t *m, unsigned seed)
{
	const devcache_model_file_t *mf = devcache_model_file(m);

	for (size_t i = 0; i < devcache_model_file_tensor_count(mf); i++) {
		devcache_tensor_info_t info;
		void *data;
		unsigned char *buf;

		assert_int_equal(devcache_model_tensor_at(m, i, &info, &data), 0);
		assert_int_equal(info.place, DEVCACHE_PLACE_DEVICE);
		assert_non_null(buf = malloc(info.size ? info.size : 1));
		if (info.size)
			assert_int_equal(devcache_copy_to_host(dev, buf, data, info.size, NULL), 0);
		mw_check(info.name, buf, info.size, seed);
		free(buf);
	}
}

/* ---- Hugging Face shards --------------------------------------------------------- */

static void an_index_opens_its_shards_as_one_model(void **state)
{
	char idx[512], paths[3][512];
	const char *shards[3] = {paths[0], paths[1], paths[2]};
	devcache_tensor_info_t info;
	unsigned version = 99;

	(void)state;
	mw_sharded(dir, "model", set3, COUNT(set3), 3, 1, 0, idx, sizeof idx);
	st_shards(paths, dir, "model", 3);
	devcache_model_file_t *mf = opened(idx);
	assert_int_equal(devcache_model_file_format(mf, &version), DEVCACHE_FORMAT_SAFETENSORS);
	assert_int_equal(version, 0);
	/* Shard order is the shard names sorted, though the map names the
	 * third first; then each shard's file order. */
	expect_order(mf, set3, COUNT(set3), 3);
	expect_shards(mf, shards, 3);
	expect_bytes_in_shards(mf, 1);
	/* Found by name in whichever shard holds it; offsets are within it. */
	assert_int_equal(devcache_model_file_find(mf, "lm_head.weight", &info), 0);
	assert_int_equal(info.shard, 2);
	assert_int_equal(info.size, 100003);
	assert_int_equal(info.offset, file_size(paths[2]) - 100003); /* the only one there */
	assert_int_equal(devcache_model_file_find(mf, "model.layers.1.attn.q", &info), 0);
	assert_int_equal(info.shard, 1);
	assert_int_equal(devcache_model_file_find(mf, "model.layers.0.attn.v", &info), 0);
	assert_int_equal(info.shard, 0);
	assert_int_equal(devcache_model_file_find(mf, "nope", &info), DEVCACHE_ENOENT);
	assert_contains(devcache_last_error(), "model.safetensors.index.json: no tensor named 'nope'");
	/* Past the last shard. */
	const char *p;
	uint64_t size;
	assert_int_equal(devcache_model_file_shard(mf, 3, &p, &size), DEVCACHE_ENOENT);
	assert_contains(devcache_last_error(), "no shard 3 (the model has 3)");
	devcache_model_file_close(mf);
}

static void an_index_gives_its_metadata_then_the_first_shards(void **state)
{
	char idx[512];

	(void)state;
	mw_sharded(dir, "model", set3, COUNT(set3), 3, 1, 0, idx, sizeof idx);
	devcache_model_file_t *mf = opened(idx);
	char total[32];
	snprintf(total, sizeof total, "%llu", (unsigned long long)sum_sizes(set3, COUNT(set3)));
	assert_int_equal(devcache_model_file_metadata_count(mf), 2);
	expect_meta(mf, 0, "total_size", total);
	expect_meta(mf, 1, "format", "\"pt\"");
	devcache_model_file_close(mf);
}

/* A key of the index is not repeated from the first shard; the second
 * shard's __metadata__ is not the set's; strings read as the shards'. */
static void an_index_key_is_not_repeated_from_the_first_shard(void **state)
{
	static const struct mw_tensor t[] = {{"a", 10, 0}, {"b", 20, 1}};
	char idx[512], s0[512], s1[512];

	(void)state;
	mw_sharded(dir, "m", t, 2, 2, 3, 0, NULL, 0);
	shard_path(s0, sizeof s0, dir, "m", 0, 2, "safetensors");
	shard_path(s1, sizeof s1, dir, "m", 1, 2, "safetensors");
	mw_safetensors(s0, t, 1, 3, "{\"format\":\"pt\",\"from_first\":\"org/model\"}");
	mw_safetensors(s1, t + 1, 1, 3, "{\"format\":\"pt\",\"from_second\":\"x\"}");
	path_of(idx, sizeof idx, "m.safetensors.index.json");
	mw_text(idx, "{\"metadata\": {\"format\": \"np\", \"source\": \"org/model\", "
		     "\"total_size\": 30},\n"
		     " \"weight_map\": {\"a\": \"m-00001-of-00002.safetensors\",\n"
		     "                \"b\": \"m-00002-of-00002.safetensors\"}}\n");
	devcache_model_file_t *mf = opened(idx);
	assert_int_equal(devcache_model_file_metadata_count(mf), 4);
	expect_meta(mf, 0, "format", "\"np\"");
	expect_meta(mf, 1, "source", "\"org/model\"");
	expect_meta(mf, 2, "total_size", "30");
	expect_meta(mf, 3, "from_first", "\"org/model\"");
	expect_bytes_in_shards(mf, 3);
	devcache_model_file_close(mf);
}

static void a_missing_shard_is_named(void **state)
{
	char idx[512], paths[3][512];

	(void)state;
	mw_sharded(dir, "model", set3, COUNT(set3), 3, 1, 0, idx, sizeof idx);
	st_shards(paths, dir, "model", 3);
	assert_int_equal(unlink(paths[1]), 0);
	refused(idx, DEVCACHE_ENOENT, idx, "shard model-00002-of-00003.safetensors is missing",
		paths[1], "cannot open", NULL);
}

static void a_shard_that_is_not_safetensors_is_refused(void **state)
{
	static const struct mw_tensor g[] = {{"x", 16, 0}};
	char idx[512], paths[3][512];

	(void)state;
	mw_sharded(dir, "model", set3, COUNT(set3), 3, 1, 0, idx, sizeof idx);
	st_shards(paths, dir, "model", 3);
	/* A GGUF file renamed. */
	mw_gguf(paths[2], NULL, 0, g, 1, 1);
	refused(idx, DEVCACHE_EFORMAT, paths[2], "named as a shard by", idx,
		"but it is not a safetensors file", NULL);
	/* Garbage. */
	mw_text(paths[1], "this is no model at all\n");
	refused(idx, DEVCACHE_EFORMAT, paths[1], "neither a safetensors nor a GGUF file", NULL);
}

static void a_mapped_tensor_absent_from_its_shard_is_refused(void **state)
{
	char idx[512], paths[3][512];
	struct mw_tensor fewer[COUNT(set3)];
	size_t n = 0;

	(void)state;
	/* The shards without model.layers.1.attn.q; the index with it. */
	for (size_t i = 0; i < COUNT(set3); i++)
		if (strcmp(set3[i].name, "model.layers.1.attn.q") != 0)
			fewer[n++] = set3[i];
	mw_sharded(dir, "model", fewer, n, 3, 1, 0, NULL, 0);
	index_only("model", set3, COUNT(set3), 3, 1, idx, sizeof idx);
	st_shards(paths, dir, "model", 3);
	refused(idx, DEVCACHE_EFORMAT, idx, "tensor 'model.layers.1.attn.q' is not in", paths[1],
		"where the weight_map puts it", NULL);
}

static void a_tensor_in_another_shard_than_mapped_is_refused(void **state)
{
	char idx[512], paths[3][512], name[256];
	struct mw_tensor moved[COUNT(set3)];

	(void)state;
	/* The shards hold model.layers.0.attn.k in the first; the index puts
	 * it in the second. */
	memcpy(moved, set3, sizeof set3);
	for (size_t i = 0; i < COUNT(set3); i++)
		if (strcmp(moved[i].name, "model.layers.0.attn.k") == 0)
			moved[i].shard = 1;
	mw_sharded(dir, "model", set3, COUNT(set3), 3, 1, 0, NULL, 0);
	index_only("model", moved, COUNT(set3), 3, 1, idx, sizeof idx);
	st_shards(paths, dir, "model", 3);
	mw_shard_name(name, sizeof name, "model", 1, 3, "safetensors");
	refused(idx, DEVCACHE_EFORMAT, paths[0], "holds tensor 'model.layers.0.attn.k'", idx,
		"puts in", name, NULL);
}

static void a_tensor_the_map_omits_is_refused(void **state)
{
	char idx[512], paths[3][512];
	struct mw_tensor fewer[COUNT(set3)];
	size_t n = 0;

	(void)state;
	for (size_t i = 0; i < COUNT(set3); i++)
		if (strcmp(set3[i].name, "model.layers.1.mlp.down") != 0)
			fewer[n++] = set3[i];
	mw_sharded(dir, "model", set3, COUNT(set3), 3, 1, 0, NULL, 0);
	index_only("model", fewer, n, 3, 1, idx, sizeof idx);
	st_shards(paths, dir, "model", 3);
	refused(idx, DEVCACHE_EFORMAT, paths[1], "holds tensor 'model.layers.1.mlp.down'",
		"which the weight_map of", idx, "does not name", NULL);
}

static void a_tensor_in_two_shards_is_refused(void **state)
{
	static const struct mw_tensor twice[] = {
		{"a", 100, 0}, {"shared", 10, 0}, {"b", 200, 1}, {"shared", 10, 1}, {"c", 5, 2},
	};
	char idx[512], paths[3][512];

	(void)state;
	mw_sharded(dir, "model", twice, COUNT(twice), 3, 1, 0, idx, sizeof idx);
	st_shards(paths, dir, "model", 3);
	refused(idx, DEVCACHE_EFORMAT, idx, "tensor 'shared' is in two shards", paths[0], paths[1],
		NULL);
}

static void a_wrong_total_size_is_refused(void **state)
{
	char idx[512], msg[256];

	(void)state;
	mw_sharded(dir, "model", set3, COUNT(set3), 3, 1, MW_TOTAL_SIZE_WRONG, idx, sizeof idx);
	unsigned long long sum = sum_sizes(set3, COUNT(set3));
	snprintf(msg, sizeof msg, "metadata.total_size is %llu, but the shards' tensors hold %llu bytes",
		 sum + 1, sum);
	refused(idx, DEVCACHE_EFORMAT, idx, msg, NULL);
	/* Not a number. */
	mw_text(idx, "{\"metadata\": {\"total_size\": \"452984\"}, \"weight_map\": {"
		     "\"lm_head.weight\": \"model-00003-of-00003.safetensors\"}}");
	refused(idx, DEVCACHE_EFORMAT, idx, "metadata.total_size is not a number", NULL);
}

static void an_index_without_total_size_is_fine(void **state)
{
	char idx[512];

	(void)state;
	mw_sharded(dir, "model", set3, COUNT(set3), 3, 1, MW_NO_TOTAL_SIZE, idx, sizeof idx);
	devcache_model_file_t *mf = opened(idx);
	expect_order(mf, set3, COUNT(set3), 3);
	/* The first shard's metadata only. */
	assert_int_equal(devcache_model_file_metadata_count(mf), 1);
	expect_meta(mf, 0, "format", "\"pt\"");
	devcache_model_file_close(mf);
}

static void an_index_without_a_weight_map_object_is_refused(void **state)
{
	static const char *const texts[] = {
		"{\"metadata\": {\"total_size\": 10}}",
		"{\"metadata\": {}, \"weight_map\": [\"model-00001-of-00001.safetensors\"]}",
		"{\"weight_map\": \"model-00001-of-00001.safetensors\"}",
	};
	char idx[512];

	(void)state;
	path_of(idx, sizeof idx, "model.safetensors.index.json");
	for (size_t i = 0; i < COUNT(texts); i++) {
		mw_text(idx, texts[i]);
		refused(idx, DEVCACHE_EFORMAT, idx,
			"not a safetensors index: it has no \"weight_map\" object", NULL);
	}
	/* A map of something else than file names. */
	mw_text(idx, "{\"weight_map\": {\"a\": 3}}");
	refused(idx, DEVCACHE_EFORMAT, idx, "weight_map: tensor 'a' is not mapped to a file name",
		NULL);
	/* An empty one. */
	mw_text(idx, "{\"weight_map\": {}}");
	refused(idx, DEVCACHE_EFORMAT, idx, "the weight_map names no tensor", NULL);
}

static void a_weight_map_outside_the_folder_is_refused(void **state)
{
	static const char *const files[] = {"../model-00001-of-00001.safetensors", "..",
					    "/etc/passwd", "sub/model.safetensors", "."};
	char sub[512], idx[600], text[512], want[256], outside[512];

	(void)state;
	/* A real shard in the folder above the index's, which must not be read. */
	path_of(outside, sizeof outside, "model-00001-of-00001.safetensors");
	mw_safetensors(outside, set3, 1, 1, NULL);
	make_dir(sub, sizeof sub, "sub");
	file_in(idx, sizeof idx, sub, "model.safetensors.index.json");
	for (size_t i = 0; i < COUNT(files); i++) {
		snprintf(text, sizeof text, "{\"weight_map\": {\"lm_head.weight\": \"%s\"}}", files[i]);
		mw_text(idx, text);
		snprintf(want, sizeof want, "tensor 'lm_head.weight' is mapped to '%s', which is not a "
					    "file in the index's folder", files[i]);
		refused(idx, DEVCACHE_EFORMAT, idx, want, NULL);
	}
}

static void a_json_file_that_is_not_json_is_refused(void **state)
{
	static const char *const texts[] = {
		"this is not JSON",
		"{\"weight_map\": {\"a\": \"m.safetensors\"", /* cut short */
		"{\"weight_map\": {\"a\": \"m.safetensors\"}} trailing",
		"[1, 2, 3]",
		"",
	};
	static const char *const why[] = {
		"neither a safetensors nor a GGUF file, nor a safetensors index (JSON: ",
		"nor a safetensors index (JSON: unexpected end of data)",
		"nor a safetensors index (JSON: unexpected character)",
		"a safetensors index is a JSON object",
		"nor a safetensors index (JSON: unexpected end of data)",
	};
	char idx[512];

	(void)state;
	path_of(idx, sizeof idx, "model.safetensors.index.json");
	for (size_t i = 0; i < COUNT(texts); i++) {
		mw_text(idx, texts[i]);
		refused(idx, DEVCACHE_EFORMAT, idx, why[i], NULL);
	}
	/* Any .json is read as an index. */
	path_of(idx, sizeof idx, "config.json");
	mw_text(idx, "{\"architectures\": [\"LlamaForCausalLM\"]}");
	refused(idx, DEVCACHE_EFORMAT, idx, "no \"weight_map\" object", NULL);
}

/* ---- GGUF splits ---------------------------------------------------------------- */

static void expect_same_set(const devcache_model_file_t *a, const devcache_model_file_t *b)
{
	assert_int_equal(devcache_model_file_shard_count(a), devcache_model_file_shard_count(b));
	for (size_t k = 0; k < devcache_model_file_shard_count(a); k++) {
		const char *pa, *pb;
		uint64_t sa, sb;

		assert_int_equal(devcache_model_file_shard(a, k, &pa, &sa), 0);
		assert_int_equal(devcache_model_file_shard(b, k, &pb, &sb), 0);
		assert_string_equal(pa, pb);
		assert_int_equal(sa, sb);
	}
	assert_int_equal(devcache_model_file_size(a), devcache_model_file_size(b));
	assert_int_equal(devcache_model_file_data_offset(a), devcache_model_file_data_offset(b));
	assert_int_equal(devcache_model_file_tensor_count(a), devcache_model_file_tensor_count(b));
	for (size_t i = 0; i < devcache_model_file_tensor_count(a); i++) {
		devcache_tensor_info_t x, y;

		assert_int_equal(devcache_model_file_tensor(a, i, &x), 0);
		assert_int_equal(devcache_model_file_tensor(b, i, &y), 0);
		assert_string_equal(x.name, y.name);
		assert_string_equal(x.dtype, y.dtype);
		assert_int_equal(x.shard, y.shard);
		assert_int_equal(x.offset, y.offset);
		assert_int_equal(x.size, y.size);
	}
	assert_int_equal(devcache_model_file_metadata_count(a), devcache_model_file_metadata_count(b));
	for (size_t i = 0; i < devcache_model_file_metadata_count(a); i++) {
		const char *ka, *va, *kb, *vb;

		assert_int_equal(devcache_model_file_metadata(a, i, &ka, &va), 0);
		assert_int_equal(devcache_model_file_metadata(b, i, &kb, &vb), 0);
		assert_string_equal(ka, kb);
		assert_string_equal(va, vb);
	}
}

static void a_gguf_split_opens_the_same_by_any_shard(void **state)
{
	char first[512], paths[3][512];
	const char *shards[3] = {paths[0], paths[1], paths[2]};
	unsigned version = 0;

	(void)state;
	mw_gguf_split(dir, "llama", split3, COUNT(split3), 3, 5, 0, first, sizeof first);
	gguf_shards(paths, dir, "llama", 3);
	assert_string_equal(first, paths[0]);
	devcache_model_file_t *a = opened(paths[0]), *b = opened(paths[2]), *c = opened(paths[1]);
	assert_int_equal(devcache_model_file_format(a, &version), DEVCACHE_FORMAT_GGUF);
	assert_int_equal(version, 3);
	expect_order(a, split3, COUNT(split3), 3);
	expect_shards(a, shards, 3);
	expect_bytes_in_shards(a, 5);
	expect_same_set(a, b);
	expect_same_set(a, c);
	devcache_tensor_info_t info;
	assert_int_equal(devcache_model_file_find(b, "output.weight", &info), 0);
	assert_int_equal(info.shard, 2);
	assert_string_equal(info.dtype, "I8");
	devcache_model_file_close(a);
	devcache_model_file_close(b);
	devcache_model_file_close(c);
}

static void a_gguf_split_may_hold_only_metadata_in_its_first_shard(void **state)
{
	char first[512], paths[3][512];
	const char *shards[3] = {paths[0], paths[1], paths[2]};

	(void)state;
	mw_gguf_split(dir, "nofirst", split_nofirst, COUNT(split_nofirst), 3, 6, 0, first,
		      sizeof first);
	gguf_shards(paths, dir, "nofirst", 3);
	devcache_model_file_t *a = opened(first), *b = opened(paths[2]);
	expect_order(a, split_nofirst, COUNT(split_nofirst), 3);
	expect_shards(a, shards, 3);
	expect_bytes_in_shards(a, 6);
	expect_same_set(a, b);
	devcache_tensor_info_t info;
	assert_int_equal(devcache_model_file_tensor(a, 0, &info), 0);
	assert_int_equal(info.shard, 1);
	devcache_model_file_close(a);
	devcache_model_file_close(b);
}

static void a_gguf_split_has_its_first_shards_metadata(void **state)
{
	char first[512], paths[3][512], n[16];

	(void)state;
	mw_gguf_split(dir, "llama", split3, COUNT(split3), 3, 5, 0, first, sizeof first);
	gguf_shards(paths, dir, "llama", 3);
	snprintf(n, sizeof n, "%zu", COUNT(split3));
	for (int k = 0; k < 3; k++) {
		devcache_model_file_t *mf = opened(paths[k]);

		assert_int_equal(devcache_model_file_metadata_count(mf), 5);
		expect_meta(mf, 0, "general.architecture", "\"llama\"");
		expect_meta(mf, 1, "general.name", "\"llama\"");
		expect_meta(mf, 2, "split.no", "0");
		expect_meta(mf, 3, "split.count", "3");
		expect_meta(mf, 4, "split.tensors.count", n);
		devcache_model_file_close(mf);
	}
}

static void a_gguf_of_one_is_a_single_file(void **state)
{
	static const struct mw_kv one[] = {
		{"general.architecture", MW_STRING, 0, "llama"},
		{"split.no", MW_U16, 0, NULL},
		{"split.count", MW_U16, 1, NULL},
		{"split.tensors.count", MW_I32, 3, NULL},
	};
	char path[512];
	const char *p;
	uint64_t size;

	(void)state;
	/* Named as the only shard of one, with and without the keys. */
	path_of(path, sizeof path, "solo-00001-of-00001.gguf");
	for (int keys = 0; keys < 2; keys++) {
		mw_gguf(path, one, keys ? COUNT(one) : 1, split3, 3, 7);
		devcache_model_file_t *mf = opened(path);
		assert_int_equal(devcache_model_file_shard_count(mf), 1);
		assert_int_equal(devcache_model_file_shard(mf, 0, &p, &size), 0);
		assert_string_equal(p, path);
		assert_int_equal(size, file_size(path));
		assert_int_equal(devcache_model_file_size(mf), size);
		assert_int_equal(devcache_model_file_tensor_count(mf), 3);
		expect_bytes_in_shards(mf, 7);
		devcache_model_file_close(mf);
	}
	/* A plain GGUF without split keys. */
	path_of(path, sizeof path, "plain.gguf");
	mw_gguf(path, one, 1, split3, COUNT(split3), 8);
	devcache_model_file_t *mf = opened(path);
	assert_int_equal(devcache_model_file_shard_count(mf), 1);
	assert_int_equal(devcache_model_file_size(mf), file_size(path));
	struct mw_tensor all[COUNT(split3)];
	memcpy(all, split3, sizeof split3);
	for (size_t i = 0; i < COUNT(all); i++)
		all[i].shard = 0;
	expect_order(mf, all, COUNT(all), 1);
	expect_bytes_in_shards(mf, 8);
	devcache_model_file_close(mf);
}

static void a_missing_split_shard_is_named(void **state)
{
	char paths[3][512];

	(void)state;
	mw_gguf_split(dir, "llama", split3, COUNT(split3), 3, 5, 0, NULL, 0);
	gguf_shards(paths, dir, "llama", 3);
	assert_int_equal(unlink(paths[1]), 0);
	refused(paths[0], DEVCACHE_ENOENT, paths[0], "shard 2 of 3 of the GGUF split is missing",
		paths[1], "cannot open", NULL);
	refused(paths[2], DEVCACHE_ENOENT, paths[2], "shard 2 of 3 of the GGUF split is missing",
		paths[1], NULL);
}

/* A shard that is a FIFO or a directory is refused at once, named: the
 * open must not wait for a writer (the alarm turns a hang into a failure). */
static void shards_that_are_not_regular_files_are_refused(void **state)
{
	char idx[512], st[3][512], gg[3][512];

	(void)state;
	mw_sharded(dir, "odd", set3, COUNT(set3), 3, 1, 0, idx, sizeof idx);
	st_shards(st, dir, "odd", 3);
	mw_gguf_split(dir, "oddg", split3, COUNT(split3), 3, 5, 0, NULL, 0);
	gguf_shards(gg, dir, "oddg", 3);
	for (int kind = 0; kind < 2; kind++) {
		assert_int_equal(unlink(st[1]), 0);
		assert_int_equal(unlink(gg[2]), 0);
		assert_int_equal(kind ? mkdir(st[1], 0700) : mkfifo(st[1], 0600), 0);
		assert_int_equal(kind ? mkdir(gg[2], 0700) : mkfifo(gg[2], 0600), 0);
		alarm(10);
		refused(idx, DEVCACHE_EINVAL, st[1], "not a regular file", NULL);
		refused(gg[0], DEVCACHE_EINVAL, gg[2], "not a regular file", NULL);
		alarm(0);
		assert_int_equal(kind ? rmdir(st[1]) : unlink(st[1]), 0);
		assert_int_equal(kind ? rmdir(gg[2]) : unlink(gg[2]), 0);
		copy_file(st[0], st[1]); /* any regular file, for the next unlink */
		copy_file(gg[0], gg[2]);
	}
}

/* An index larger than its limit (64 MiB) is refused before it is read,
 * and the message names the limit. */
static void an_index_over_its_size_limit_is_refused(void **state)
{
	char idx[512];
	int fd;

	(void)state;
	path_of(idx, sizeof idx, "huge.safetensors.index.json");
	assert_true((fd = open(idx, O_WRONLY | O_CREAT | O_TRUNC, 0600)) >= 0);
	assert_int_equal(ftruncate(fd, (64 << 20) + 1), 0); /* sparse: no disk */
	assert_int_equal(close(fd), 0);
	refused(idx, DEVCACHE_EFORMAT, idx,
		"67108865 bytes is larger than the limit of 67108864 bytes for a safetensors index",
		NULL);
}

static void a_split_shard_without_split_keys_is_refused(void **state)
{
	char paths[3][512];

	(void)state;
	mw_gguf_split(dir, "llama", split3, COUNT(split3), 3, 5, MW_SPLIT_NO_KEYS_IN_LAST, NULL, 0);
	gguf_shards(paths, dir, "llama", 3);
	refused(paths[0], DEVCACHE_EFORMAT, paths[2],
		"shard 3 of 3 of a GGUF split lacks split.no, split.count or split.tensors.count",
		NULL);
	/* Opened by that shard itself, its name claims what its keys do not. */
	refused(paths[2], DEVCACHE_EFORMAT, paths[2],
		"its name says shard 3 of 3 of a GGUF split, but it has no split.count", NULL);
}

static void a_wrong_split_no_is_refused(void **state)
{
	char paths[3][512];

	(void)state;
	mw_gguf_split(dir, "llama", split3, COUNT(split3), 3, 5, MW_SPLIT_WRONG_NO_IN_LAST, NULL, 0);
	gguf_shards(paths, dir, "llama", 3);
	for (int k = 0; k < 3; k++)
		refused(paths[k], DEVCACHE_EFORMAT, paths[2],
			"split.no is 0, but its name makes it shard 3 (split.no 2)", NULL);
}

static void a_wrong_split_tensor_count_is_refused(void **state)
{
	char paths[3][512], msg[256];

	(void)state;
	mw_gguf_split(dir, "llama", split3, COUNT(split3), 3, 5, MW_SPLIT_WRONG_TENSOR_COUNT, NULL,
		      0);
	gguf_shards(paths, dir, "llama", 3);
	snprintf(msg, sizeof msg, "split.tensors.count is %zu, but the 3 shards hold %zu tensors",
		 COUNT(split3) + 1, COUNT(split3));
	refused(paths[0], DEVCACHE_EFORMAT, paths[0], msg, NULL);
	refused(paths[2], DEVCACHE_EFORMAT, paths[2], msg, NULL);
}

static void a_differing_split_count_is_refused(void **state)
{
	char paths[3][512], msg[1200];

	(void)state;
	mw_gguf_split(dir, "llama", split3, COUNT(split3), 3, 5, MW_SPLIT_WRONG_COUNT_IN_LAST, NULL,
		      0);
	gguf_shards(paths, dir, "llama", 3);
	snprintf(msg, sizeof msg, "%s: split.count is 4, but %s says 3: is it a shard of another "
				  "model?", paths[2], paths[0]);
	refused(paths[0], DEVCACHE_EFORMAT, msg, NULL);
	/* Opened by it: its count against its name. */
	refused(paths[2], DEVCACHE_EFORMAT, paths[2], "split.count is 4, but the name says shard 3 of 3",
		NULL);
}

static void a_tensor_in_two_split_shards_is_refused(void **state)
{
	static const struct mw_tensor twice[] = {
		{"a", 100, 0}, {"dup", 10, 1}, {"b", 20, 1}, {"dup", 10, 2},
	};
	char paths[3][512];

	(void)state;
	mw_gguf_split(dir, "llama", twice, COUNT(twice), 3, 5, 0, NULL, 0);
	gguf_shards(paths, dir, "llama", 3);
	refused(paths[0], DEVCACHE_EFORMAT, paths[0], "tensor 'dup' is in two shards", paths[1],
		paths[2], NULL);
}

static void a_shard_of_another_split_is_refused(void **state)
{
	char a[3][512], b[2][512], msg[1200];

	(void)state;
	mw_gguf_split(dir, "alpha", split3, COUNT(split3), 3, 5, 0, NULL, 0);
	mw_gguf_split(dir, "beta", split3, 4, 2, 9, 0, NULL, 0);
	gguf_shards(a, dir, "alpha", 3);
	gguf_shards(b, dir, "beta", 2);
	/* beta's second shard in the place of alpha's second. */
	copy_file(b[1], a[1]);
	snprintf(msg, sizeof msg, "%s: split.count is 2, but %s says 3: is it a shard of another "
				  "model?", a[1], a[0]);
	refused(a[0], DEVCACHE_EFORMAT, msg, NULL);
	/* beta's first in the place of alpha's first, alpha opened by its
	 * last shard: the count to match is the last shard's. */
	mw_gguf_split(dir, "alpha", split3, COUNT(split3), 3, 5, 0, NULL, 0);
	copy_file(b[0], a[0]);
	snprintf(msg, sizeof msg, "%s: split.count is 2, but %s says 3: is it a shard of another "
				  "model?", a[0], a[2]);
	refused(a[2], DEVCACHE_EFORMAT, msg, NULL);
}

static void a_split_name_without_split_keys_is_refused(void **state)
{
	static const struct mw_kv kv[] = {{"general.architecture", MW_STRING, 0, "llama"}};
	char path[512];

	(void)state;
	path_of(path, sizeof path, "lonely-00001-of-00003.gguf");
	mw_gguf(path, kv, 1, split3, 2, 5);
	refused(path, DEVCACHE_EFORMAT, path,
		"its name says shard 1 of 3 of a GGUF split, but it has no split.count", NULL);
}

/* A name that says 3 shards and a split.count of 1: one of them is wrong. */
static void a_split_name_that_disagrees_with_split_count_is_refused(void **state)
{
	static const struct mw_kv kv[] = {
		{"general.architecture", MW_STRING, 0, "llama"},
		{"split.no", MW_U16, 0, NULL},
		{"split.count", MW_U16, 1, NULL},
		{"split.tensors.count", MW_I32, 2, NULL},
	};
	char path[512];

	(void)state;
	path_of(path, sizeof path, "odd-00001-of-00003.gguf");
	mw_gguf(path, kv, COUNT(kv), split3, 2, 5);
	refused(path, DEVCACHE_EFORMAT, path,
		"its name says shard 1 of 3 of a GGUF split, but its split.count is 1", NULL);
}

static void split_keys_in_a_name_without_the_pattern_are_refused(void **state)
{
	static const struct mw_kv kv[] = {
		{"general.architecture", MW_STRING, 0, "llama"},
		{"split.no", MW_U16, 0, NULL},
		{"split.count", MW_U16, 3, NULL},
		{"split.tensors.count", MW_I32, 6, NULL},
	};
	static const char *const names[] = {"renamed.gguf", "model-1-of-3.gguf",
					    "model-00001-of-00003.bin.gguf"};
	char path[512];

	(void)state;
	for (size_t i = 0; i < COUNT(names); i++) {
		path_of(path, sizeof path, names[i]);
		mw_gguf(path, kv, COUNT(kv), split3, 2, 5);
		refused(path, DEVCACHE_EFORMAT, path,
			"split.count is 3, but the name does not follow PREFIX-NNNNN-of-MMMMM.gguf",
			NULL);
	}
	/* Following it, but another count. */
	path_of(path, sizeof path, "model-00001-of-00002.gguf");
	mw_gguf(path, kv, COUNT(kv), split3, 2, 5);
	refused(path, DEVCACHE_EFORMAT, path, "split.count is 3, but the name says shard 1 of 2", NULL);
}

/* ---- folders -------------------------------------------------------------------- */

static void a_folder_of_one_safetensors_file_opens_it(void **state)
{
	char folder[512], path[512];

	(void)state;
	make_dir(folder, sizeof folder, "one");
	file_in(path, sizeof path, folder, "model.safetensors");
	mw_safetensors(path, set3, COUNT(set3), 2, "{\"format\":\"pt\"}");
	file_in(path, sizeof path, folder, "config.json");
	mw_text(path, "{\"a\": 1}");
	file_in(path, sizeof path, folder, "README.md");
	mw_text(path, "# a model\n");
	devcache_model_file_t *mf = opened(folder);
	const char *p;
	uint64_t size;
	assert_int_equal(devcache_model_file_shard_count(mf), 1);
	assert_int_equal(devcache_model_file_shard(mf, 0, &p, &size), 0);
	file_in(path, sizeof path, folder, "model.safetensors");
	assert_string_equal(p, path);
	assert_int_equal(devcache_model_file_tensor_count(mf), COUNT(set3));
	expect_bytes_in_shards(mf, 2);
	devcache_model_file_close(mf);
	/* A trailing slash is the same folder. */
	char slash[520];
	snprintf(slash, sizeof slash, "%s/", folder);
	mf = opened(slash);
	assert_int_equal(devcache_model_file_tensor_count(mf), COUNT(set3));
	devcache_model_file_close(mf);
}

static void a_folder_of_an_index_and_its_shards_is_one_model(void **state)
{
	char folder[512], paths[3][512];
	const char *shards[3] = {paths[0], paths[1], paths[2]};

	(void)state;
	make_dir(folder, sizeof folder, "sharded");
	mw_sharded(folder, "model", set3, COUNT(set3), 3, 1, 0, NULL, 0);
	st_shards(paths, folder, "model", 3);
	devcache_model_file_t *mf = opened(folder);
	expect_order(mf, set3, COUNT(set3), 3);
	expect_shards(mf, shards, 3);
	expect_bytes_in_shards(mf, 1);
	devcache_model_file_close(mf);
}

static void a_folder_of_a_gguf_split_is_one_model(void **state)
{
	char folder[512], paths[3][512];
	const char *shards[3] = {paths[0], paths[1], paths[2]};

	(void)state;
	make_dir(folder, sizeof folder, "split");
	mw_gguf_split(folder, "llama", split3, COUNT(split3), 3, 5, 0, NULL, 0);
	gguf_shards(paths, folder, "llama", 3);
	devcache_model_file_t *mf = opened(folder);
	expect_order(mf, split3, COUNT(split3), 3);
	expect_shards(mf, shards, 3);
	expect_bytes_in_shards(mf, 5);
	devcache_model_file_close(mf);
}

static void a_folder_of_two_models_is_refused(void **state)
{
	static const struct mw_tensor one[] = {{"x", 10, 0}};
	char folder[512], path[512];

	(void)state;
	make_dir(folder, sizeof folder, "two");
	mw_sharded(folder, "model", set3, COUNT(set3), 3, 1, 0, NULL, 0);
	file_in(path, sizeof path, folder, "extra.gguf");
	mw_gguf(path, NULL, 0, one, 1, 1);
	refused(folder, DEVCACHE_EINVAL, folder, "holds 2 models", "extra.gguf",
		"model.safetensors.index.json", "name one", NULL);
	/* The shards are the index's, not models of their own. */
	assert_null(strstr(devcache_last_error(), "model-00001-of-00003"));
	/* A GGUF split counts once, by its first shard. */
	assert_int_equal(unlink(path), 0);
	mw_gguf_split(folder, "llama", split3, COUNT(split3), 3, 5, 0, NULL, 0);
	refused(folder, DEVCACHE_EINVAL, folder, "holds 2 models", "llama-00001-of-00003.gguf",
		"model.safetensors.index.json", NULL);
	assert_null(strstr(devcache_last_error(), "llama-00002"));
}

static void an_empty_folder_is_refused(void **state)
{
	char folder[512], path[512];

	(void)state;
	make_dir(folder, sizeof folder, "empty");
	refused(folder, DEVCACHE_ENOENT, folder, "holds no safetensors or GGUF model", NULL);
	/* Nor does one of other files. */
	file_in(path, sizeof path, folder, "config.json");
	mw_text(path, "{}");
	file_in(path, sizeof path, folder, "model.bin");
	mw_text(path, "pickle");
	refused(folder, DEVCACHE_ENOENT, folder, "holds no safetensors or GGUF model", NULL);
}

/* ---- diffusers pipelines --------------------------------------------------------- */

static const char model_index[] =
	"{\"_class_name\":\"StableDiffusionPipeline\",\"_diffusers_version\":\"0.30.0\","
	"\"unet\":[\"diffusers\",\"UNet2DConditionModel\"],"
	"\"vae\":[\"diffusers\",\"AutoencoderKL\"],"
	"\"scheduler\":[\"diffusers\",\"PNDMScheduler\"],"
	"\"text_encoder\":[\"transformers\",\"CLIPTextModel\"]}";

static const struct mw_tensor unet[] = {
	{"conv_in.weight", 5000, 0},   {"down.0.weight", 70000, 1}, {"mid.weight", 3, 1},
	{"up.0.weight", 100000, 2},    {"conv_out.weight", 77, 3},
};
static const struct mw_tensor vae[] = {{"encoder.weight", 4000, 0}, {"decoder.weight", 6000, 0}};
static const struct mw_tensor clip[] = {{"text_model.embeddings", 9000, 0}};

/* dir/pipe as diffusers saves a pipeline; its path in buf. */
static void make_pipeline(char *pipe, size_t size)
{
	char sub[600], path[700];

	make_dir(pipe, size, "pipe");
	file_in(path, sizeof path, pipe, "model_index.json");
	mw_text(path, model_index);
	file_in(sub, sizeof sub, pipe, "unet");
	assert_int_equal(mkdir(sub, 0755), 0);
	mw_sharded(sub, "diffusion_pytorch_model", unet, COUNT(unet), 4, 21, 0, NULL, 0);
	file_in(path, sizeof path, sub, "config.json");
	mw_text(path, "{\"_class_name\": \"UNet2DConditionModel\"}");
	file_in(sub, sizeof sub, pipe, "vae");
	assert_int_equal(mkdir(sub, 0755), 0);
	file_in(path, sizeof path, sub, "diffusion_pytorch_model.safetensors");
	mw_safetensors(path, vae, COUNT(vae), 22, NULL);
	file_in(sub, sizeof sub, pipe, "text_encoder");
	assert_int_equal(mkdir(sub, 0755), 0);
	file_in(path, sizeof path, sub, "model.safetensors");
	mw_safetensors(path, clip, COUNT(clip), 23, NULL);
	file_in(sub, sizeof sub, pipe, "scheduler");
	assert_int_equal(mkdir(sub, 0755), 0);
	file_in(path, sizeof path, sub, "scheduler_config.json");
	mw_text(path, "{\"_class_name\": \"PNDMScheduler\"}");
}

static void a_pipeline_folder_is_refused_naming_its_components(void **state)
{
	char pipe[512];
	devcache_model_t *m = (devcache_model_t *)1;

	(void)state;
	make_pipeline(pipe, sizeof pipe);
	refused(pipe, DEVCACHE_EINVAL, pipe,
		"a diffusers pipeline, not one model: load one of: unet, vae, text_encoder", NULL);
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	assert_int_equal(devcache_model_load(ctx, pipe, mw_device(ctx, "host"), NULL, &m),
			 DEVCACHE_EINVAL);
	assert_null(m);
	assert_contains(devcache_last_error(), pipe);
	assert_contains(devcache_last_error(),
			"a diffusers pipeline, not one model: load one of: unet, vae, text_encoder");
	devcache_close(ctx);
}

/* A component named ".." or "a/b" would lead out of the pipeline's folder. */
static void a_pipeline_component_outside_its_folder_is_refused(void **state)
{
	static const char *const bad[] = {"..", ".", "unet/../..", "/etc"};
	char path[512], text[256];
	devcache_pipeline_t *pl;

	(void)state;
	path_of(path, sizeof path, "model_index.json");
	for (size_t i = 0; i < COUNT(bad); i++) {
		snprintf(text, sizeof text, "{\"%s\":[\"diffusers\",\"UNet2DConditionModel\"]}",
			 bad[i]);
		mw_text(path, text);
		assert_int_equal(devcache_pipeline_open(dir, &pl), DEVCACHE_EFORMAT);
		assert_null(pl);
		assert_contains(devcache_last_error(), "model_index.json: component '");
		assert_contains(devcache_last_error(), "is not the name of a folder in the pipeline's");
	}
}

static void a_pipeline_lists_its_components(void **state)
{
	static const struct {
		const char *name, *library, *class_name;
		size_t shards;
	} want[] = {
		{"unet", "diffusers", "UNet2DConditionModel", 4},
		{"vae", "diffusers", "AutoencoderKL", 1},
		{"scheduler", "diffusers", "PNDMScheduler", 0},
		{"text_encoder", "transformers", "CLIPTextModel", 1},
	};
	char pipe[512], path[700], sub[600];
	devcache_pipeline_t *pl;
	devcache_component_t comp;
	uint64_t sizes[4] = {0, 0, 0, 0};

	(void)state;
	make_pipeline(pipe, sizeof pipe);
	/* The weight files' sizes, as the disk has them. */
	file_in(sub, sizeof sub, pipe, "unet");
	for (unsigned k = 0; k < 4; k++) {
		shard_path(path, sizeof path, sub, "diffusion_pytorch_model", k, 4, "safetensors");
		sizes[0] += file_size(path);
	}
	snprintf(path, sizeof path, "%s/vae/diffusion_pytorch_model.safetensors", pipe);
	sizes[1] = file_size(path);
	snprintf(path, sizeof path, "%s/text_encoder/model.safetensors", pipe);
	sizes[3] = file_size(path);

	assert_int_equal(devcache_pipeline_open(pipe, &pl), 0);
	assert_int_equal(devcache_pipeline_component_count(pl), 4);
	for (size_t i = 0; i < 4; i++) {
		memset(&comp, 0xa5, sizeof comp);
		assert_int_equal(devcache_pipeline_component(pl, i, &comp), 0);
		assert_string_equal(comp.name, want[i].name);
		file_in(path, sizeof path, pipe, want[i].name);
		assert_string_equal(comp.path, path);
		assert_string_equal(comp.library, want[i].library);
		assert_string_equal(comp.class_name, want[i].class_name);
		assert_int_equal(comp.shards, want[i].shards);
		assert_int_equal(comp.size, sizes[i]);
	}
	assert_int_equal(devcache_pipeline_component(pl, 4, &comp), DEVCACHE_ENOENT);
	assert_contains(devcache_last_error(), "no component 4 (the pipeline has 4)");
	devcache_pipeline_close(pl);
	/* Not a pipeline: no model_index.json. */
	file_in(path, sizeof path, pipe, "vae");
	assert_int_equal(devcache_pipeline_open(path, &pl), DEVCACHE_ENOENT);
	assert_contains(devcache_last_error(), "vae/model_index.json: cannot open");
	/* A model_index.json that is not JSON. */
	file_in(path, sizeof path, pipe, "model_index.json");
	mw_text(path, "not json");
	assert_int_equal(devcache_pipeline_open(pipe, &pl), DEVCACHE_EFORMAT);
	assert_contains(devcache_last_error(), path);
	assert_contains(devcache_last_error(), "not a diffusers model_index.json");
}

static void a_pipeline_component_folder_loads_as_one_model(void **state)
{
	char pipe[512], sub[600];
	devcache_model_t *m;

	(void)state;
	make_pipeline(pipe, sizeof pipe);
	file_in(sub, sizeof sub, pipe, "unet");
	devcache_model_file_t *mf = opened(sub);
	expect_order(mf, unet, COUNT(unet), 4);
	assert_int_equal(devcache_model_file_shard_count(mf), 4);
	devcache_model_file_close(mf);
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	assert_int_equal(devcache_model_load(ctx, sub, mw_device(ctx, "host"), NULL, &m), 0);
	mf = (devcache_model_file_t *)devcache_model_file(m);
	assert_int_equal(devcache_model_file_tensor_count(mf), COUNT(unet));
	for (size_t i = 0; i < COUNT(unet); i++) {
		devcache_tensor_info_t info;
		void *data;

		assert_int_equal(devcache_model_tensor_at(m, i, &info, &data), 0);
		mw_check(info.name, data, info.size, 21);
	}
	devcache_model_release(m);
	devcache_close(ctx);
}

/* ---- loading sets ----------------------------------------------------------------- */

static void a_set_loads_on_the_host_in_place(void **state)
{
	char idx[512], paths[3][512];
	devcache_model_t *m, *again;

	(void)state;
	mw_sharded(dir, "model", set3, COUNT(set3), 3, 1, 0, idx, sizeof idx);
	st_shards(paths, dir, "model", 3);
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	devcache_device_t *host = mw_device(ctx, "host");
	assert_int_equal(devcache_model_load(ctx, idx, host, NULL, &m), 0);
	const devcache_model_file_t *mf = devcache_model_file(m);
	expect_order(mf, set3, COUNT(set3), 3);
	for (size_t i = 0; i < COUNT(set3); i++) {
		devcache_tensor_info_t info;
		void *data;

		assert_int_equal(devcache_model_tensor_at(m, i, &info, &data), 0);
		assert_int_equal(info.place, DEVCACHE_PLACE_HOST);
		mw_check(info.name, data, info.size, 1);
		/* The bytes are its shard's, where that file is mapped. */
		if (info.size && !mapped_at(data, paths[info.shard], info.offset))
			fail_msg("tensor '%s' at %p is not byte %llu of %s as mapped", info.name, data,
				 (unsigned long long)info.offset, paths[info.shard]);
	}
	/* By name too. */
	devcache_tensor_info_t info;
	void *data;
	assert_int_equal(devcache_model_tensor(m, "lm_head.weight", &info, &data), 0);
	assert_true(mapped_at(data, paths[2], info.offset));
	/* Again: a hit, the same model. */
	assert_int_equal(devcache_model_load(ctx, idx, host, NULL, &again), 0);
	assert_ptr_equal(again, m);
	devcache_cache_stats_t s;
	assert_int_equal(devcache_cache_stats(ctx, &s), 0);
	assert_int_equal(s.misses, 1);
	assert_int_equal(s.hits, 1);
	assert_int_equal(s.models, 1);
	assert_int_equal(s.ram_used, file_size(paths[0]) + file_size(paths[1]) + file_size(paths[2]));
	devcache_model_release(again);
	devcache_model_release(m);
	devcache_close(ctx);
}

static void a_set_streams_to_the_device_byte_exact(void **state)
{
	char idx[512], first[512];
	devcache_model_t *m;
	devcache_load_result_t r;
	devcache_load_args_t args = {.struct_size = sizeof args, .result = &r};

	(void)state;
	mw_sharded(dir, "model", set3, COUNT(set3), 3, 1, 0, idx, sizeof idx);
	mw_gguf_split(dir, "nofirst", split_nofirst, COUNT(split_nofirst), 3, 6, 0, first,
		      sizeof first);
	/* Chunks of 64 KiB cut across tensors and shards. */
	devcache_ctx_t *ctx = mw_open_ctx("staging_buffer_size:64K,staging_buffers:3,load_workers:3");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, idx, dev, &args, &m), 0);
	expect_order(devcache_model_file(m), set3, COUNT(set3), 3);
	expect_device_bytes(dev, m, 1);
	assert_int_equal(r.bytes_uploaded, sum_sizes(set3, COUNT(set3)));
	assert_int_equal(r.device_bytes, sum_sizes(set3, COUNT(set3)));
	devcache_model_release(m);
	assert_int_equal(devcache_model_load(ctx, first, dev, &args, &m), 0);
	expect_order(devcache_model_file(m), split_nofirst, COUNT(split_nofirst), 3);
	expect_device_bytes(dev, m, 6);
	/* The tensors' bytes are uploaded; what is read counts the alignment
	 * padding between the tensors of a shard too (31 bytes at most after
	 * each). */
	assert_int_equal(r.device_bytes, sum_sizes(split_nofirst, COUNT(split_nofirst)));
	assert_int_equal(r.bytes_uploaded, sum_sizes(split_nofirst, COUNT(split_nofirst)));
	assert_true(r.bytes_read >= sum_sizes(split_nofirst, COUNT(split_nofirst)) &&
		    r.bytes_read < sum_sizes(split_nofirst, COUNT(split_nofirst)) +
				       31 * COUNT(split_nofirst));
	devcache_model_release(m);
	devcache_close(ctx);
	/* One worker: the loading thread alone. */
	ctx = mw_open_ctx("staging_buffer_size:64K,load_workers:1");
	dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, idx, dev, NULL, &m), 0);
	expect_device_bytes(dev, m, 1);
	devcache_model_release(m);
	devcache_close(ctx);
}

static void replacing_a_shard_makes_the_next_load_a_miss(void **state)
{
	char idx[512], paths[3][512], tmp[512];
	struct mw_tensor second[COUNT(set3)];
	devcache_model_t *m, *m2;

	(void)state;
	mw_sharded(dir, "model", set3, COUNT(set3), 3, 1, 0, idx, sizeof idx);
	st_shards(paths, dir, "model", 3);
	devcache_ctx_t *ctx = mw_open_ctx("staging_buffer_size:64K");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, idx, dev, NULL, &m), 0);
	devcache_model_release(m);
	/* The second shard rewritten with other bytes, moved into place. */
	size_t n = of_shard(set3, COUNT(set3), 1, second);
	path_of(tmp, sizeof tmp, "new-shard.tmp");
	mw_safetensors(tmp, second, n, 2, "{\"format\":\"pt\"}");
	assert_int_equal(rename(tmp, paths[1]), 0);
	assert_int_equal(devcache_model_load(ctx, idx, dev, NULL, &m2), 0);
	assert_ptr_not_equal(m2, m);
	devcache_cache_stats_t s;
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.misses, 2);
	assert_int_equal(s.hits, 0);
	/* The new entry holds the new shard's bytes, and the others'. */
	const devcache_model_file_t *mf = devcache_model_file(m2);
	for (size_t i = 0; i < devcache_model_file_tensor_count(mf); i++) {
		devcache_tensor_info_t info;
		void *data;
		unsigned char *buf;

		assert_int_equal(devcache_model_tensor_at(m2, i, &info, &data), 0);
		assert_non_null(buf = malloc(info.size ? info.size : 1));
		if (info.size)
			assert_int_equal(devcache_copy_to_host(dev, buf, data, info.size, NULL), 0);
		mw_check(info.name, buf, info.size, info.shard == 1 ? 2 : 1);
		free(buf);
	}
	/* And loading it again is a hit on the new one. */
	assert_int_equal(devcache_model_load(ctx, idx, dev, NULL, &m), 0);
	assert_ptr_equal(m, m2);
	devcache_model_release(m);
	devcache_model_release(m2);
	/* The index is the set's own file: a new one (its metadata changed,
	 * the shards not) makes a new entry too. */
	char *text = test_slurp_must(idx);
	char *brace = strchr(text, '{');
	assert_non_null(brace);
	path_of(tmp, sizeof tmp, "new-index.tmp");
	char *again = malloc(strlen(text) + 64);
	assert_non_null(again);
	sprintf(again, "{\"metadata\":{\"note\":\"re-exported\"},%s", strchr(brace + 1, '"'));
	mw_text(tmp, again);
	free(again);
	free(text);
	assert_int_equal(rename(tmp, idx), 0);
	assert_int_equal(devcache_model_load(ctx, idx, dev, NULL, &m), 0);
	assert_ptr_not_equal(m, m2);
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.misses, 3);
	devcache_model_release(m);
	devcache_close(ctx);
}

struct loader {
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	const char *path;
	pthread_barrier_t *go;
	devcache_model_t *got;
	int rc;
};

static void *load_once(void *arg)
{
	struct loader *l = arg;

	pthread_barrier_wait(l->go);
	l->rc = devcache_model_load(l->ctx, l->path, l->dev, NULL, &l->got);
	return NULL;
}

static void threads_loading_one_set_share_one_model(void **state)
{
	char idx[512];
	struct loader l[2];
	pthread_t t[2];
	pthread_barrier_t go;

	(void)state;
	mw_sharded(dir, "model", set3, COUNT(set3), 3, 1, 0, idx, sizeof idx);
	devcache_ctx_t *ctx = mw_open_ctx("staging_buffer_size:64K,load_workers:2");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(pthread_barrier_init(&go, NULL, 2), 0);
	for (int i = 0; i < 2; i++) {
		l[i] = (struct loader){ctx, dev, idx, &go, NULL, -1};
		assert_int_equal(pthread_create(&t[i], NULL, load_once, &l[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		if (l[i].rc)
			fail_msg("thread %d: %d", i, l[i].rc);
	}
	pthread_barrier_destroy(&go);
	assert_non_null(l[0].got);
	assert_ptr_equal(l[0].got, l[1].got);
	devcache_cache_stats_t s;
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.misses, 1);
	assert_int_equal(s.hits, 1);
	assert_int_equal(s.models, 1);
	assert_int_equal(s.locked_models, 1);
	expect_device_bytes(dev, l[0].got, 1);
	devcache_model_release(l[0].got);
	devcache_model_release(l[1].got);
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.locked_models, 0);
	devcache_close(ctx);
}

/* ---- arguments -------------------------------------------------------------------- */

static void null_arguments_fail_cleanly(void **state)
{
	char idx[512];
	devcache_model_file_t *mf;
	devcache_pipeline_t *pl;
	devcache_component_t comp;
	const char *p;
	uint64_t size;

	(void)state;
	mw_sharded(dir, "model", set3, COUNT(set3), 3, 1, 0, idx, sizeof idx);
	assert_int_equal(devcache_model_file_open(NULL, &mf), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_model_file_open: NULL argument");
	assert_int_equal(devcache_model_file_open(idx, NULL), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_model_file_open: NULL argument");
	mf = opened(idx);
	assert_int_equal(devcache_model_file_shard_count(NULL), 0);
	assert_int_equal(devcache_model_file_shard(NULL, 0, &p, &size), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_model_file_shard: NULL argument");
	assert_int_equal(devcache_model_file_shard(mf, 0, NULL, &size), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_model_file_shard: NULL argument");
	assert_int_equal(devcache_model_file_shard(mf, 0, &p, NULL), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_model_file_shard: NULL argument");
	devcache_model_file_close(mf);
	assert_int_equal(devcache_pipeline_open(NULL, &pl), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_pipeline_open: NULL argument");
	assert_int_equal(devcache_pipeline_open(dir, NULL), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_pipeline_open: NULL argument");
	assert_int_equal(devcache_pipeline_component_count(NULL), 0);
	assert_int_equal(devcache_pipeline_component(NULL, 0, &comp), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_pipeline_component: NULL argument");
	char pipe[512];
	make_pipeline(pipe, sizeof pipe);
	assert_int_equal(devcache_pipeline_open(pipe, &pl), 0);
	assert_int_equal(devcache_pipeline_component(pl, 0, NULL), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_pipeline_component: NULL argument");
	devcache_pipeline_close(pl);
	devcache_pipeline_close(NULL);
	devcache_model_file_close(NULL);
}

#define T(f) TMPDIR_TEST(f)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(an_index_opens_its_shards_as_one_model),
		T(an_index_gives_its_metadata_then_the_first_shards),
		T(an_index_key_is_not_repeated_from_the_first_shard),
		T(a_missing_shard_is_named),
		T(a_shard_that_is_not_safetensors_is_refused),
		T(a_mapped_tensor_absent_from_its_shard_is_refused),
		T(a_tensor_in_another_shard_than_mapped_is_refused),
		T(a_tensor_the_map_omits_is_refused),
		T(a_tensor_in_two_shards_is_refused),
		T(a_wrong_total_size_is_refused),
		T(an_index_without_total_size_is_fine),
		T(an_index_without_a_weight_map_object_is_refused),
		T(a_weight_map_outside_the_folder_is_refused),
		T(a_json_file_that_is_not_json_is_refused),
		T(a_gguf_split_opens_the_same_by_any_shard),
		T(a_gguf_split_may_hold_only_metadata_in_its_first_shard),
		T(a_gguf_split_has_its_first_shards_metadata),
		T(a_gguf_of_one_is_a_single_file),
		T(shards_that_are_not_regular_files_are_refused),
		T(an_index_over_its_size_limit_is_refused),
		T(a_missing_split_shard_is_named),
		T(a_split_shard_without_split_keys_is_refused),
		T(a_wrong_split_no_is_refused),
		T(a_wrong_split_tensor_count_is_refused),
		T(a_differing_split_count_is_refused),
		T(a_tensor_in_two_split_shards_is_refused),
		T(a_shard_of_another_split_is_refused),
		T(a_split_name_without_split_keys_is_refused),
		T(a_split_name_that_disagrees_with_split_count_is_refused),
		T(split_keys_in_a_name_without_the_pattern_are_refused),
		T(a_folder_of_one_safetensors_file_opens_it),
		T(a_folder_of_an_index_and_its_shards_is_one_model),
		T(a_folder_of_a_gguf_split_is_one_model),
		T(a_folder_of_two_models_is_refused),
		T(an_empty_folder_is_refused),
		T(a_pipeline_folder_is_refused_naming_its_components),
		T(a_pipeline_component_outside_its_folder_is_refused),
		T(a_pipeline_lists_its_components),
		T(a_pipeline_component_folder_loads_as_one_model),
		T(a_set_loads_on_the_host_in_place),
		T(a_set_streams_to_the_device_byte_exact),
		T(replacing_a_shard_makes_the_next_load_a_miss),
		T(threads_loading_one_set_share_one_model),
		T(null_arguments_fail_cleanly),
	};

	return RUN_TAP(tests);
}
