/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-model-copy.c - devcache_model_tensor_copy: a tensor's bytes from wherever they are; a mapped file truncated meanwhile is an error, not SIGBUS. */
#include "tap.h"
#include "model-writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <devcache.h>

TEST_TMPDIR_FIXTURE("model-copy");

/* Three tensors; the last two lie past the first 64 KiB of the file. */
static const struct mw_tensor tensors[] = {
	{"head", 4096, 0}, {"body", 96 * 1024, 0}, {"tail", 70000, 0},
};
#define N_TENSORS (sizeof tensors / sizeof tensors[0])

static void write_model(char *path, size_t size, unsigned seed)
{
	snprintf(path, size, "%s/m.safetensors", dir);
	mw_safetensors(path, tensors, N_TENSORS, seed, NULL);
}

/* Every tensor copied whole and right, on the device the context names. */
static void copy_all(devcache_model_t *m, unsigned seed)
{
	for (size_t i = 0; i < N_TENSORS; i++) {
		unsigned char *buf = malloc(tensors[i].size);

		assert_non_null(buf);
		if (devcache_model_tensor_copy(m, tensors[i].name, buf, tensors[i].size))
			fail_msg("%s: %s", tensors[i].name, devcache_last_error());
		mw_check(tensors[i].name, buf, tensors[i].size, seed);
		free(buf);
	}
}

static void copies_from_everywhere(void **state)
{
	const char *places[][2] = {{"host", NULL}, {"host", "mmap:false"}, {"good:0", NULL}};
	char path[512];

	(void)state;
	write_model(path, sizeof path, 3);
	for (size_t k = 0; k < sizeof places / sizeof places[0]; k++) {
		devcache_ctx_t *ctx = mw_open_ctx(places[k][1]);
		devcache_model_t *m;

		assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, places[k][0]), NULL, &m),
				 0);
		copy_all(m, 3);
		devcache_model_release(m);
		devcache_close(ctx);
	}
}

static void bad_arguments(void **state)
{
	char path[512], buf[16];
	devcache_model_t *m;

	(void)state;
	write_model(path, sizeof path, 4);
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "host"), NULL, &m), 0);
	assert_int_equal(devcache_model_tensor_copy(NULL, "head", buf, 16), DEVCACHE_EINVAL);
	assert_int_equal(devcache_model_tensor_copy(m, NULL, buf, 16), DEVCACHE_EINVAL);
	assert_int_equal(devcache_model_tensor_copy(m, "head", NULL, 4096), DEVCACHE_EINVAL);
	assert_int_equal(devcache_model_tensor_copy(m, "nope", buf, 16), DEVCACHE_ENOENT);
	assert_int_equal(devcache_model_tensor_copy(m, "head", buf, 16), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "'head' is 4096 bytes, not 16");
	devcache_model_release(m);
	devcache_close(ctx);
}

/* The file cut to 64 KiB under a mapped model (test-model-guard covers
 * the mapping itself): every copy is then an error naming the file, of
 * what is left as of the rest, read-only or writable alike. */
static void truncated_under_the_mapping(void **state)
{
	unsigned flags[] = {0, DEVCACHE_LOAD_WRITABLE};

	(void)state;
	for (size_t k = 0; k < 2; k++) {
		devcache_load_args_t args = {.struct_size = sizeof args, .flags = flags[k]};
		char path[512];
		devcache_model_t *m;

		write_model(path, sizeof path, 5);
		devcache_ctx_t *ctx = mw_open_ctx(NULL);
		assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "host"), &args, &m),
				 0);
		assert_int_equal(truncate(path, 64 * 1024), 0);
		/* Room for the largest tensor, should a copy succeed after all. */
		unsigned char *buf = malloc(tensors[1].size);
		assert_non_null(buf);
		for (size_t i = 0; i < N_TENSORS; i++) {
			assert_int_equal(devcache_model_tensor_copy(m, tensors[i].name, buf,
								    tensors[i].size),
					 DEVCACHE_EIO);
			assert_contains(devcache_last_error(), path);
			assert_contains(devcache_last_error(), "changed while it was mapped");
		}
		free(buf);
		devcache_model_release(m);
		devcache_close(ctx);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TMPDIR_TEST(copies_from_everywhere),
		TMPDIR_TEST(bad_arguments),
		TMPDIR_TEST(truncated_under_the_mapping),
	};

	return RUN_TAP(tests);
}
