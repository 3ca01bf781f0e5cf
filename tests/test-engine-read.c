/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-engine-read.c - devcache_model_file_read_tensors(): tensors streamed into the caller's host and device memory, byte-exact, with per-tensor errors, progress and cancellation, and no cache entry. */
#include "tap.h"
#include "model-writer.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <devcache.h>

TEST_TMPDIR_FIXTURE("engine-read");

static const struct mw_tensor tensors[] = {
	{"embed", 200003, 0}, {"one", 1, 0}, {"empty", 0, 0}, {"mid", 65536, 0}, {"last", 4097, 0},
};
#define N_TENSORS (sizeof tensors / sizeof *tensors)

struct progress {
	uint64_t calls, last, total, cancel_after;
	bool rising;
};

static int on_progress(void *user, uint64_t done, uint64_t total)
{
	struct progress *p = user;

	p->rising = p->rising && done >= p->last && done <= total;
	p->last = done;
	p->total = total;
	p->calls++;
	return p->cancel_after && p->calls >= p->cancel_after;
}

static devcache_model_file_t *write_and_open(char *path, size_t size)
{
	devcache_model_file_t *mf;

	snprintf(path, size, "%s/m.safetensors", dir);
	mw_safetensors(path, tensors, N_TENSORS, 7, NULL);
	if (devcache_model_file_open(path, &mf))
		fail_msg("%s", devcache_last_error());
	return mf;
}

/* Every tensor, in reverse order, into the caller's buffers on the host:
 * byte-exact, several workers, small staging buffers, and no model in
 * the cache afterwards. */
static void into_host_memory(void **state)
{
	devcache_ctx_t *ctx = mw_open_ctx("staging_buffer_size:64K,load_workers:3");
	devcache_device_t *host = mw_device(ctx, "host");
	devcache_tensor_dest_t d[N_TENSORS];
	unsigned char *buf[N_TENSORS];
	devcache_load_result_t r;
	struct progress p = {.rising = true};
	devcache_read_args_t args = {.struct_size = sizeof args, .progress = on_progress,
				     .progress_user = &p, .result = &r};
	devcache_cache_stats_t st;
	devcache_model_file_t *mf;
	char path[512];
	uint64_t want = 0;

	(void)state;
	mf = write_and_open(path, sizeof path);
	for (size_t i = 0; i < N_TENSORS; i++) {
		size_t k = N_TENSORS - 1 - i;

		assert_non_null(buf[k] = malloc(tensors[k].size + 1));
		memset(buf[k], 0xee, tensors[k].size + 1);
		d[i] = (devcache_tensor_dest_t){.name = tensors[k].name, .dst = buf[k],
						.size = tensors[k].size + 1};
		want += tensors[k].size;
	}
	assert_int_equal(devcache_model_file_read_tensors(mf, host, d, N_TENSORS, &args), 0);
	for (size_t k = 0; k < N_TENSORS; k++) {
		mw_check(tensors[k].name, buf[k], tensors[k].size, 7);
		assert_int_equal(buf[k][tensors[k].size], 0xee); /* not a byte more */
		assert_int_equal(d[k].status, 0);
		free(buf[k]);
	}
	assert_int_equal(r.bytes_uploaded, want);
	assert_true(r.bytes_read >= want);
	assert_int_equal(r.hit, 0);
	assert_true(p.calls >= 1); /* several workers may finish between two reports */
	assert_true(p.rising);
	assert_int_equal(p.last, p.total);
	/* The cache neither holds nor counts any of it. */
	assert_int_equal(devcache_cache_stats(ctx, &st), 0);
	assert_int_equal(st.models, 0);
	assert_int_equal(st.ram_used, 0);
	assert_int_equal(st.bytes_read, 0);
	devcache_model_file_close(mf);
	devcache_close(ctx);
}

/* A list of some, into device memory the caller allocated on the test
 * module's device, read back byte-exact; direct I/O asked for. */
static void into_device_memory(void **state)
{
	devcache_ctx_t *ctx = mw_open_ctx("staging_buffer_size:64K,load_workers:2,direct_io:true");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	devcache_tensor_dest_t d[2];
	void *ptr[2];
	const size_t pick[2] = {3, 0};
	devcache_model_file_t *mf;
	devcache_stats_t before, after;
	char path[512];

	(void)state;
	mf = write_and_open(path, sizeof path);
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(devcache_alloc(dev, tensors[pick[i]].size, NULL, &ptr[i]), 0);
		d[i] = (devcache_tensor_dest_t){.name = tensors[pick[i]].name, .dst = ptr[i],
						.size = tensors[pick[i]].size};
	}
	assert_int_equal(devcache_stats(dev, &before), 0);
	assert_int_equal(devcache_model_file_read_tensors(mf, dev, d, 2, NULL), 0);
	assert_int_equal(devcache_stats(dev, &after), 0);
	/* Nothing allocated on the device for it. */
	assert_int_equal(after.allocated_bytes[DEVCACHE_POOL_ALL].current,
			 before.allocated_bytes[DEVCACHE_POOL_ALL].current);
	for (size_t i = 0; i < 2; i++) {
		unsigned char *got = malloc(tensors[pick[i]].size);

		assert_non_null(got);
		assert_int_equal(devcache_copy_to_host(dev, got, ptr[i], tensors[pick[i]].size, NULL),
				 0);
		mw_check(tensors[pick[i]].name, got, tensors[pick[i]].size, 7);
		free(got);
		devcache_free(dev, ptr[i]);
	}
	devcache_model_file_close(mf);
	devcache_close(ctx);
}

/* A GGUF split: tensors of three files, through one call. */
static void from_a_set(void **state)
{
	static const struct mw_tensor split[] = {
		{"token_embd.weight", 70000, 0}, {"blk.0.attn_q.weight", 4097, 1},
		{"blk.0.ffn_up.weight", 100000, 2}, {"output.weight", 33333, 2},
	};
	devcache_ctx_t *ctx = mw_open_ctx("staging_buffer_size:64K,load_workers:3");
	devcache_tensor_dest_t d[4];
	unsigned char *buf[4];
	devcache_model_file_t *mf;
	char first[512];

	(void)state;
	mw_gguf_split(dir, "split", split, 4, 3, 9, 0, first, sizeof first);
	assert_int_equal(devcache_model_file_open(first, &mf), 0);
	for (size_t i = 0; i < 4; i++) {
		assert_non_null(buf[i] = malloc(split[i].size));
		d[i] = (devcache_tensor_dest_t){.name = split[i].name, .dst = buf[i],
						.size = split[i].size};
	}
	assert_int_equal(devcache_model_file_read_tensors(mf, mw_device(ctx, "host"), d, 4, NULL), 0);
	for (size_t i = 0; i < 4; i++) {
		mw_check(split[i].name, buf[i], split[i].size, 9);
		free(buf[i]);
	}
	devcache_model_file_close(mf);
	devcache_close(ctx);
}

/* Each bad destination gets its own status; the call fails naming the
 * first, and nothing is written. */
static void per_tensor_errors(void **state)
{
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	devcache_device_t *host = mw_device(ctx, "host");
	static unsigned char a[200003], b[10];
	devcache_tensor_dest_t d[] = {
		{.name = "embed", .dst = a, .size = sizeof a},
		{.name = "nope", .dst = b, .size = sizeof b},
		{.name = "mid", .dst = b, .size = sizeof b},
		{.name = "last", .dst = NULL, .size = 4097},
		{.name = "embed", .dst = a, .size = sizeof a},
		{.name = NULL, .dst = a, .size = 1},
		{.name = "empty", .dst = NULL, .size = 0},
	};
	devcache_model_file_t *mf;
	char path[512];

	(void)state;
	mf = write_and_open(path, sizeof path);
	memset(a, 0xee, sizeof a);
	assert_int_equal(devcache_model_file_read_tensors(mf, host, d, sizeof d / sizeof *d, NULL),
			 DEVCACHE_ENOENT);
	assert_contains(devcache_last_error(), "m.safetensors: no tensor named 'nope'");
	assert_int_equal(d[0].status, 0);
	assert_int_equal(d[1].status, DEVCACHE_ENOENT);
	assert_int_equal(d[2].status, DEVCACHE_EINVAL);
	assert_int_equal(d[3].status, DEVCACHE_EINVAL);
	assert_int_equal(d[4].status, DEVCACHE_EINVAL);
	assert_int_equal(d[5].status, DEVCACHE_EINVAL);
	assert_int_equal(d[6].status, 0); /* no bytes: no destination needed */
	for (size_t i = 0; i < sizeof a; i++)
		if (a[i] != 0xee)
			fail_msg("byte %zu was written", i);
	/* Each fault's own message, when it is the first. */
	assert_int_equal(devcache_model_file_read_tensors(mf, host, &d[2], 1, NULL), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(),
			"m.safetensors: tensor 'mid' is 65536 bytes, its destination only 10");
	assert_int_equal(devcache_model_file_read_tensors(mf, host, &d[3], 1, NULL), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "tensor 'last' has no destination");
	assert_int_equal(devcache_model_file_read_tensors(mf, host, &d[4], 1, NULL), 0);
	devcache_tensor_dest_t twice[] = {d[0], d[0]};
	assert_int_equal(devcache_model_file_read_tensors(mf, host, twice, 2, NULL), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "tensor 'embed' is named twice");
	assert_int_equal(devcache_model_file_read_tensors(mf, host, &d[5], 1, NULL), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "a destination names no tensor");

	/* Arguments. */
	devcache_read_args_t args = {.struct_size = 3};
	assert_int_equal(devcache_model_file_read_tensors(mf, host, d, 1, &args), DEVCACHE_EINVAL);
	args = (devcache_read_args_t){.struct_size = sizeof args, .flags = 4};
	assert_int_equal(devcache_model_file_read_tensors(mf, host, d, 1, &args), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "unknown flags 0x4");
	assert_int_equal(devcache_model_file_read_tensors(NULL, host, d, 1, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_model_file_read_tensors(mf, NULL, d, 1, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_model_file_read_tensors(mf, host, NULL, 1, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_model_file_read_tensors(mf, host, NULL, 0, NULL), 0);
	devcache_model_file_close(mf);
	devcache_close(ctx);
}

/* The progress callback cancels. */
static void cancelled(void **state)
{
	devcache_ctx_t *ctx = mw_open_ctx("staging_buffer_size:64K,load_workers:1");
	static unsigned char a[200003];
	devcache_tensor_dest_t d = {.name = "embed", .dst = a, .size = sizeof a};
	struct progress p = {.rising = true, .cancel_after = 1};
	devcache_read_args_t args = {.struct_size = sizeof args, .progress = on_progress,
				     .progress_user = &p};
	devcache_model_file_t *mf;
	char path[512];

	(void)state;
	mf = write_and_open(path, sizeof path);
	assert_int_equal(devcache_model_file_read_tensors(mf, mw_device(ctx, "host"), &d, 1, &args),
			 DEVCACHE_ECANCELED);
	assert_int_equal(p.calls, 1);
	devcache_model_file_close(mf);
	devcache_close(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TMPDIR_TEST(into_host_memory),
		TMPDIR_TEST(into_device_memory),
		TMPDIR_TEST(from_a_set),
		TMPDIR_TEST(per_tensor_errors),
		TMPDIR_TEST(cancelled),
	};

	return RUN_TAP(tests);
}
