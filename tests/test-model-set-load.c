/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-model-set-load.c - loading models of several files: in place on the host, streamed to a device byte-exact, a miss once a shard changes, one model for two threads. */
#include "tap.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <devcache.h>

#include "model-set-fixture.h"

/* ---- loading sets ----------------------------------------------------------------- */

/* The tensors of t in shard k, for rewriting one shard alone. */
static size_t of_shard(const struct mw_tensor *t, size_t n, unsigned k, struct mw_tensor *out)
{
	size_t m = 0;

	for (size_t i = 0; i < n; i++)
		if (t[i].shard == k)
			out[m++] = t[i];
	return m;
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

#define T(f) TMPDIR_TEST(f)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(a_set_loads_on_the_host_in_place),
		T(a_set_streams_to_the_device_byte_exact),
		T(replacing_a_shard_makes_the_next_load_a_miss),
		T(threads_loading_one_set_share_one_model),
	};

	return RUN_TAP(tests);
}
