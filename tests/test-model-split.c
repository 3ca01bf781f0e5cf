/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-model-split.c - GGUF splits: a model in files named PREFIX-NNNNN-of-MMMMM.gguf, opened the same by any shard, and each split key or name that can be wrong. */
#include "tap.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <devcache.h>

#include "model-set-fixture.h"

/* ---- GGUF splits ---------------------------------------------------------------- */

static void copy_file(const char *from, const char *to)
{
	char *text = test_slurp_must(from);

	mw_bytes(to, text, (size_t)file_size(from));
	free(text);
}

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

/* Each shard holds a descriptor while the model is open: past the limit
 * the message names the split and the limit (it said only "Too many open
 * files" of one shard's path). */
static void a_split_past_the_descriptor_limit_names_it(void **state)
{
	enum { N = 100 };
	static char names[N][32];
	static struct mw_tensor t[N];
	char first[512], msg[1024];

	(void)state;
	for (unsigned i = 0; i < N; i++) {
		snprintf(names[i], sizeof names[i], "w%u", i);
		t[i] = (struct mw_tensor){names[i], 1 + i % 5, i};
	}
	mw_gguf_split(dir, "many", t, N, N, 5, 0, first, sizeof first);
	devcache_model_file_close(opened(first));
	uint64_t extra;
	int rc = mw_open_in_child(first, 32, &extra, msg, sizeof msg);

	if (rc != DEVCACHE_EIO)
		fail_msg("%d: %s", rc, msg);
	assert_contains(msg, first);
	assert_contains(msg, "of 100");
	assert_contains(msg, "this process may hold 32 (RLIMIT_NOFILE");
	assert_contains(msg, strerror(EMFILE));
}

#define T(f) TMPDIR_TEST(f)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(a_gguf_split_opens_the_same_by_any_shard),
		T(a_split_past_the_descriptor_limit_names_it),
		T(a_gguf_split_may_hold_only_metadata_in_its_first_shard),
		T(a_gguf_split_has_its_first_shards_metadata),
		T(a_gguf_of_one_is_a_single_file),
		T(shards_that_are_not_regular_files_are_refused),
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
	};

	return RUN_TAP(tests);
}
