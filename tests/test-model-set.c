/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-model-set.c - models of several files: Hugging Face shards with an index, opened as one model, and each way an index and its shards can disagree. */
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <devcache.h>

#include "model-set-fixture.h"

/* ---- Hugging Face shards --------------------------------------------------------- */

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

/* json-c cuts a key at U+0000 and a C string ends there: "a\u0000b"
 * passed for "a". */
static void a_nul_in_a_weight_map_key_or_file_is_refused(void **state)
{
	static const struct mw_tensor t[] = {{"a", 10, 0}};
	char idx[512];

	(void)state;
	mw_sharded(dir, "m", t, 1, 1, 3, 0, NULL, 0);
	path_of(idx, sizeof idx, "m.safetensors.index.json");
	mw_text(idx, "{\"weight_map\": {\"a\\u0000b\": \"m-00001-of-00001.safetensors\"}}");
	refused(idx, DEVCACHE_EFORMAT, idx, "the key at byte 16 holds a NUL character (\\u0000)", NULL);
	mw_text(idx, "{\"weight_map\": {\"a\": \"m-00001-of-00001.safetensors\\u0000x\"}}");
	refused(idx, DEVCACHE_EFORMAT, idx,
		"weight_map: tensor 'a' is mapped to a file name that holds a NUL character", NULL);
	/* The same escape in a value elsewhere is text like any other. */
	mw_text(idx, "{\"metadata\": {\"note\": \"x\\u0000y\"}, "
		     "\"weight_map\": {\"a\": \"m-00001-of-00001.safetensors\"}}");
	devcache_model_file_close(opened(idx));
}

/* json-c clamps an integer past 2^64 - 1: the message said 18446744073709551615. */
static void a_total_size_past_2_64_is_refused_with_its_digits(void **state)
{
	static const struct mw_tensor t[] = {{"a", 10, 0}};
	char idx[512];

	(void)state;
	mw_sharded(dir, "m", t, 1, 1, 3, 0, NULL, 0);
	path_of(idx, sizeof idx, "m.safetensors.index.json");
	mw_text(idx, "{\"metadata\": {\"total_size\": 18446744073709551620}, "
		     "\"weight_map\": {\"a\": \"m-00001-of-00001.safetensors\"}}");
	refused(idx, DEVCACHE_EFORMAT, idx,
		"the number 18446744073709551620 at byte 28 is larger than 2^64 - 1", NULL);
	/* An exponent is not an integer's digits. */
	mw_text(idx, "{\"metadata\": {\"total_size\": 1e999999999999999999999}, "
		     "\"weight_map\": {\"a\": \"m-00001-of-00001.safetensors\"}}");
	refused(idx, DEVCACHE_EFORMAT, idx, "metadata.total_size is", NULL);
	mw_text(idx, "{\"metadata\": [10], "
		     "\"weight_map\": {\"a\": \"m-00001-of-00001.safetensors\"}}");
	refused(idx, DEVCACHE_EFORMAT, idx, "the index's \"metadata\" is not an object", NULL);
}

/* json-c's tree of 10 MB of "{}" took 2.6 GB; the bound is 64 MiB and 8
 * bytes a byte of the index. */
static void a_ten_mb_index_of_empty_objects_is_refused_in_proportion(void **state)
{
	const size_t n = 10 << 20;
	char idx[512], msg[1024];
	char *text = malloc(n + 64);
	size_t len = 0;
	uint64_t extra;

	(void)state;
	assert_non_null(text);
	len += (size_t)sprintf(text, "{\"weight_map\": {");
	for (unsigned i = 0; len < n; i++)
		len += (size_t)sprintf(text + len, "%s\"%u\":{}", i ? "," : "", i);
	len += (size_t)sprintf(text + len, "}}");
	path_of(idx, sizeof idx, "big.safetensors.index.json");
	mw_text(idx, text);
	free(text);
	int rc = mw_open_in_child(idx, 0, &extra, msg, sizeof msg);
	/* Unbounded under ThreadSanitizer, whose shadow memory it would count. */
	if (rc != DEVCACHE_EFORMAT || (!TEST_TSAN && extra > ((uint64_t)64 << 20) + 8 * (uint64_t)len))
		fail_msg("%d, %llu MiB beyond the start: %s", rc, (unsigned long long)(extra >> 20), msg);
	assert_contains(msg, idx);
	assert_contains(msg, "objects, ");
	assert_contains(msg, "the reader allows a file of this size");
}

/* Each shard holds a descriptor while the model is open: past the limit
 * the message names the index and the limit, and the shards are found by
 * a search, not one by one (15,000 shards took 22 s). */
static void many_shards_and_the_descriptor_limit(void **state)
{
	enum { N = 300 };
	static char names[N][32];
	static struct mw_tensor t[N];
	char idx[512], msg[1024];
	devcache_tensor_info_t info;
	uint64_t extra;

	(void)state;
	for (unsigned i = 0; i < N; i++) {
		snprintf(names[i], sizeof names[i], "w%u", i);
		/* The map names the shards in reverse order. */
		t[i] = (struct mw_tensor){names[i], 1 + i % 7, N - 1 - i};
	}
	mw_sharded(dir, "m", t, N, N, 5, 0, idx, sizeof idx);
	devcache_model_file_t *mf = opened(idx);
	assert_int_equal(devcache_model_file_shard_count(mf), N);
	assert_int_equal(devcache_model_file_find(mf, "w0", &info), 0);
	assert_int_equal(info.shard, N - 1);
	devcache_model_file_close(mf);
	int rc = mw_open_in_child(idx, 64, &extra, msg, sizeof msg);
	if (rc != DEVCACHE_EIO)
		fail_msg("%d: %s", rc, msg);
	assert_contains(msg, idx);
	assert_contains(msg, "of 300");
	assert_contains(msg, "this process may hold 64 (RLIMIT_NOFILE");
	assert_contains(msg, strerror(EMFILE));
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
		T(an_index_over_its_size_limit_is_refused),
		T(a_nul_in_a_weight_map_key_or_file_is_refused),
		T(a_total_size_past_2_64_is_refused_with_its_digits),
		T(a_ten_mb_index_of_empty_objects_is_refused_in_proportion),
		T(many_shards_and_the_descriptor_limit),
	};

	return RUN_TAP(tests);
}
