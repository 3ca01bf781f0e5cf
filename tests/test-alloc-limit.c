/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-alloc-limit.c - a device's largest single allocation (Level Zero's maxMemAllocSize) on the fake loader: reported, relaxed, models split, requests above it refused. */
#include "tap.h"
#include "model-writer.h"
#include "spawn.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <devcache.h>

#define MIB ((size_t)1 << 20)
/* The fake's maxMemAllocSize in every test: a tenth of its 1 GiB stands
 * for Intel's 4 GiB, small enough for fast tests. */
#define LIMIT (4 * MIB)

static char dir[256];

/* The fake loader's controls, in the copy the backend loads. */
static void (*ze_limits)(size_t, int);
static unsigned long (*ze_calls)(const char *);
static unsigned long (*ze_misuses)(const char *);
static void (*ze_fail)(const char *, unsigned, int);
static char fake_path[4096];
/* The fake's count of misuses of zeMemAllocDevice as the test began. */
static unsigned long misuses;

/* The ze module is in one of the directories of TEST_BACKENDS. */
static bool ze_built(const char *backends)
{
	char *dirs = strdup(backends), *save = NULL, path[4096];
	bool found = false;

	for (char *d = dirs ? strtok_r(dirs, ":", &save) : NULL; d && !found;
	     d = strtok_r(NULL, ":", &save)) {
		snprintf(path, sizeof path, "%s/ze.so", d);
		found = access(path, R_OK) == 0;
	}
	free(dirs);
	return found;
}

static int setup(void **state)
{
	const char *fakes = getenv("TEST_FAKES"), *backends = getenv("TEST_BACKENDS");
	void *lib;

	(void)state;
	if (!fakes || !backends)
		return -1;
	snprintf(fake_path, sizeof fake_path, "%s/libfake-ze.so", fakes);
	/* Not built without the Level Zero headers: every test skips. */
	if (access(fake_path, R_OK) != 0 || !ze_built(backends) ||
	    !(lib = dlopen(fake_path, RTLD_NOW | RTLD_LOCAL)))
		return test_tmpdir_make(dir, sizeof dir, "alloc-limit");
	*(void **)&ze_limits = dlsym(lib, "fake_ze_limits");
	*(void **)&ze_calls = dlsym(lib, "fake_ze_calls");
	*(void **)&ze_misuses = dlsym(lib, "fake_ze_misuses");
	*(void **)&ze_fail = dlsym(lib, "fake_ze_fail");
	if (!ze_limits || !ze_calls || !ze_misuses || !ze_fail)
		return -1;
	return test_tmpdir_make(dir, sizeof dir, "alloc-limit");
}

static int teardown(void **state)
{
	(void)state;
	return test_tmpdir_remove(dir);
}

/* A context on ze:0 of the fake, its maxMemAllocSize LIMIT, relaxed or
 * not; options appended. */
static devcache_ctx_t *open_ze(bool relaxed, const char *more, devcache_device_t **dev_p)
{
	char opts[8192];
	devcache_ctx_t *ctx;
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .options = opts};

	if (!ze_limits)
		skip_because("the Level Zero backend or its fake loader is not built");
	ze_limits(LIMIT, relaxed);
	misuses = ze_misuses("zeMemAllocDevice");
	snprintf(opts, sizeof opts, "log_level:error,backend_path:%s,backends:ze,ze_library:%s%s%s",
		 test_env("TEST_BACKENDS"), fake_path, more ? "," : "", more ? more : "");
	if (devcache_open_ex(&ctx, &args))
		fail_msg("devcache_open_ex(%s): %s", opts, devcache_last_error());
	if (devcache_device_get(ctx, "ze:0", dev_p))
		fail_msg("no ze:0 on the fake loader: %s", devcache_last_error());
	return ctx;
}

/* Each tensor copied back from the device, byte for byte as written. */
static void check_on_device(devcache_device_t *dev, devcache_model_t *m,
			    const struct mw_tensor *t, size_t n, unsigned seed)
{
	unsigned char *host = malloc(LIMIT + MIB);

	assert_non_null(host);
	for (size_t i = 0; i < n; i++) {
		devcache_tensor_info_t info;
		void *data;

		assert_int_equal(devcache_model_tensor(m, t[i].name, &info, &data), 0);
		assert_int_equal(info.place, DEVCACHE_PLACE_DEVICE);
		assert_int_equal(info.size, t[i].size);
		assert_int_equal(devcache_copy_to_host(dev, host, data, t[i].size, NULL), 0);
		mw_check(t[i].name, host, t[i].size, seed);
	}
	free(host);
}

/* 11 MiB in all, in file order: none above LIMIT, one exactly LIMIT, and
 * odd sizes so that tensors straddle where a single allocation's 4 MiB
 * would end. */
static const struct mw_tensor model[] = {
	{"embed", 3 * MIB + 7, 0}, {"a", MIB - 1, 0}, {"b", 3, 0},     {"c", 2 * MIB + 511, 0},
	{"full", LIMIT, 0},        {"d", 100, 0},     {"e", MIB / 2, 0},
};
#define N_MODEL (sizeof model / sizeof *model)

static void device_info_reports_the_limit(void **state)
{
	devcache_device_info_t info;
	devcache_device_t *dev;
	devcache_ctx_t *ctx;

	(void)state;
	ctx = open_ze(false, NULL, &dev);
	assert_int_equal(devcache_device_info(dev, &info), 0);
	assert_int_equal(info.max_alloc_size, LIMIT);
	devcache_close(ctx);
	/* Relaxed, the device has no limit below its memory. */
	ctx = open_ze(true, NULL, &dev);
	assert_int_equal(devcache_device_info(dev, &info), 0);
	assert_int_equal(info.max_alloc_size, info.total_memory);
	devcache_close(ctx);
}

/* devcache info shows the limit, in words and in its JSON; the fake
 * loader in the tool's process takes its limit from the environment. */
static void devcache_info_shows_the_limit(void **state)
{
	static struct result r;
	char opts[8400];
	const char *env[] = {"FAKE_ZE_MAX_ALLOC_MB=4", "FAKE_ZE_RELAXED_LIMITS=0", "LANGUAGE=C",
			     "LC_ALL=C", opts, NULL};

	(void)state;
	if (!ze_limits)
		skip_because("the Level Zero backend or its fake loader is not built");
	snprintf(opts, sizeof opts, "DEVCACHE_OPTIONS=backend_path:%s,backends:ze,ze_library:%s",
		 test_env("TEST_BACKENDS"), fake_path);
	RUN_TOOL(env, "info");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "largest single allocation: 4.0 MiB"));
	RUN_TOOL(env, "info", "--json");
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "\"max_alloc_size\":4194304"));
	/* Relaxed, the device has no limit below its memory: no such line. */
	env[1] = "FAKE_ZE_RELAXED_LIMITS=1";
	RUN_TOOL(env, "info");
	assert_int_equal(r.status, 0);
	assert_null(strstr(r.out, "largest single allocation"));
}

static void a_model_above_the_limit_is_split(void **state)
{
	char path[512];
	devcache_device_t *dev;
	devcache_model_t *m;
	devcache_ctx_t *ctx;

	(void)state;
	snprintf(path, sizeof path, "%s/split.safetensors", dir);
	mw_safetensors(path, model, N_MODEL, 5, NULL);
	ctx = open_ze(false, NULL, &dev);
	unsigned long allocs = ze_calls("zeMemAllocDevice");
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
	/* Several allocations, none past maxMemAllocSize: the fake counts any
	 * as the backend's misuse. */
	assert_true(ze_calls("zeMemAllocDevice") - allocs >= 3);
	assert_int_equal(ze_misuses("zeMemAllocDevice"), misuses);
	check_on_device(dev, m, model, N_MODEL, 5);
	devcache_model_release(m);
	devcache_close(ctx);
}

static void a_relaxed_driver_takes_the_model_whole(void **state)
{
	char path[512];
	devcache_device_t *dev;
	devcache_model_t *m;
	devcache_ctx_t *ctx;

	(void)state;
	snprintf(path, sizeof path, "%s/whole.safetensors", dir);
	mw_safetensors(path, model, N_MODEL, 6, NULL);
	ctx = open_ze(true, NULL, &dev);
	unsigned long allocs = ze_calls("zeMemAllocDevice");
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
	/* One allocation past the limit: the relaxed-limits descriptor, its
	 * stype and flag checked by the fake, chained in. */
	assert_int_equal(ze_calls("zeMemAllocDevice") - allocs, 1);
	assert_int_equal(ze_misuses("zeMemAllocDevice"), misuses);
	check_on_device(dev, m, model, N_MODEL, 6);
	devcache_model_release(m);
	devcache_close(ctx);
}

static void a_tensor_above_the_limit_is_named(void **state)
{
	static const struct mw_tensor big[] = {{"small", 1000, 0}, {"huge.weight", LIMIT + 1, 0}};
	char path[512];
	devcache_device_t *dev;
	devcache_model_t *m = NULL;
	devcache_ctx_t *ctx;

	(void)state;
	snprintf(path, sizeof path, "%s/big.safetensors", dir);
	mw_safetensors(path, big, 2, 7, NULL);
	ctx = open_ze(false, NULL, &dev);
	unsigned long allocs = ze_calls("zeMemAllocDevice");
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), DEVCACHE_ENOTSUP);
	assert_null(m);
	assert_contains(devcache_last_error(), "huge.weight");
	assert_contains(devcache_last_error(), "4194305 bytes"); /* the tensor */
	assert_contains(devcache_last_error(), "4194304 bytes"); /* the limit */
	assert_contains(devcache_last_error(), "ze:0");
	assert_int_equal(ze_calls("zeMemAllocDevice"), allocs);
	devcache_close(ctx);
}

/* With partial_loading a tensor above the limit stays on the host, where
 * it can be read, and the rest goes to the device; asking for it there is
 * an error that names it, before anything is allocated. */
static void a_partial_load_leaves_a_tensor_above_the_limit_on_the_host(void **state)
{
	static const struct mw_tensor big[] = {{"small", 1000, 0}, {"huge.weight", LIMIT + 1, 0}};
	const char *huge[] = {"huge.weight"}, *small[] = {"small"};
	devcache_tensor_info_t info;
	char path[512];
	devcache_device_t *dev;
	devcache_model_t *m = NULL;
	devcache_ctx_t *ctx;
	void *data;

	(void)state;
	snprintf(path, sizeof path, "%s/partial.safetensors", dir);
	mw_safetensors(path, big, 2, 8, NULL);
	ctx = open_ze(false, "partial_loading:true", &dev);
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
	check_on_device(dev, m, big, 1, 8);
	assert_int_equal(devcache_model_tensor(m, "huge.weight", &info, &data), 0);
	assert_int_equal(info.place, DEVCACHE_PLACE_HOST);
	mw_check("huge.weight", data, LIMIT + 1, 8);

	unsigned long allocs = ze_calls("zeMemAllocDevice");
	assert_int_equal(devcache_model_make_resident(m, huge, 1, NULL), DEVCACHE_ENOTSUP);
	assert_contains(devcache_last_error(), "huge.weight");
	assert_contains(devcache_last_error(), "4194305 bytes"); /* the tensor */
	assert_contains(devcache_last_error(), "4194304 bytes"); /* the limit */
	assert_int_equal(devcache_model_make_resident(m, NULL, 0, NULL), DEVCACHE_ENOTSUP);
	assert_int_equal(ze_calls("zeMemAllocDevice"), allocs);
	assert_int_equal(devcache_model_tensor(m, "huge.weight", &info, &data), 0);
	assert_int_equal(info.place, DEVCACHE_PLACE_HOST);
	/* The other tensor still comes and goes. */
	assert_int_equal(devcache_model_move_to_host(m, small, 1), 0);
	assert_int_equal(devcache_model_make_resident(m, small, 1, NULL), 0);
	check_on_device(dev, m, big, 1, 8);
	assert_int_equal(ze_misuses("zeMemAllocDevice"), misuses);
	devcache_model_release(m);
	devcache_close(ctx);
}

static void the_allocator_refuses_above_the_limit_at_once(void **state)
{
	devcache_stats_t before, after;
	devcache_device_t *dev;
	devcache_ctx_t *ctx;
	void *p = NULL;

	(void)state;
	ctx = open_ze(false, NULL, &dev);
	/* A segment to empty, were the refusal retried. */
	assert_int_equal(devcache_alloc(dev, MIB, NULL, &p), 0);
	assert_int_equal(devcache_free(dev, p), 0);
	assert_int_equal(devcache_stats(dev, &before), 0);
	unsigned long allocs = ze_calls("zeMemAllocDevice"), frees = ze_calls("zeMemFree");
	assert_int_equal(devcache_alloc(dev, LIMIT + 1, NULL, &p), DEVCACHE_ENOTSUP);
	assert_contains(devcache_last_error(), "4194304 bytes");
	assert_contains(devcache_last_error(), "largest single allocation");
	/* The fake maps memory: the way to such a request is said. */
	assert_contains(devcache_last_error(), "expandable_segments");
	assert_int_equal(ze_calls("zeMemAllocDevice"), allocs);
	assert_int_equal(ze_calls("zeMemFree"), frees);
	assert_int_equal(devcache_stats(dev, &after), 0);
	assert_int_equal(after.num_ooms, before.num_ooms);
	assert_int_equal(after.num_alloc_retries, before.num_alloc_retries);
	/* Up to the limit, even where the segment would round past it. */
	assert_int_equal(devcache_alloc(dev, LIMIT - 100, NULL, &p), 0);
	assert_int_equal(devcache_free(dev, p), 0);
	assert_int_equal(devcache_alloc(dev, 3 * MIB, NULL, &p), 0);
	assert_int_equal(devcache_free(dev, p), 0);
	assert_int_equal(ze_misuses("zeMemAllocDevice"), misuses);
	devcache_close(ctx);
}

static void expandable_segments_pass_the_limit(void **state)
{
	devcache_device_t *dev;
	devcache_ctx_t *ctx;
	void *p = NULL;

	(void)state;
	ctx = open_ze(false, "expandable_segments:true", &dev);
	assert_int_equal(devcache_alloc(dev, 3 * LIMIT, NULL, &p), 0);
	assert_int_equal(devcache_free(dev, p), 0);
	devcache_close(ctx);
}

/* Refused by the driver itself for its size (the core did not know the
 * limit): no cache emptied, no retry, not out of memory. */
static void a_size_refusal_is_not_out_of_memory(void **state)
{
	devcache_stats_t before, after;
	devcache_device_t *dev;
	devcache_ctx_t *ctx;
	void *p = NULL;

	(void)state;
	ctx = open_ze(true, NULL, &dev);
	assert_int_equal(devcache_alloc(dev, MIB, NULL, &p), 0);
	assert_int_equal(devcache_free(dev, p), 0);
	assert_int_equal(devcache_stats(dev, &before), 0);
	unsigned long allocs = ze_calls("zeMemAllocDevice"), frees = ze_calls("zeMemFree");
	ze_fail("zeMemAllocDevice", 1, 0x78000009 /* ZE_RESULT_ERROR_UNSUPPORTED_SIZE */);
	int rc = devcache_alloc(dev, 30 * MIB, NULL, &p);
	assert_int_not_equal(rc, 0);
	assert_int_not_equal(rc, DEVCACHE_ENOMEM);
	assert_contains(devcache_last_error(), "UNSUPPORTED_SIZE");
	assert_int_equal(ze_calls("zeMemAllocDevice") - allocs, 1);
	assert_int_equal(ze_calls("zeMemFree"), frees);
	assert_int_equal(devcache_stats(dev, &after), 0);
	assert_int_equal(after.num_ooms, before.num_ooms);
	assert_int_equal(after.num_alloc_retries, before.num_alloc_retries);
	devcache_close(ctx);
}

/* Evicted to RAM (keep_ram_copy) and back: every chunk to its place. */
static void a_split_model_survives_a_ram_copy(void **state)
{
	char path[512], other[512];
	static const struct mw_tensor filler[] = {
		{"f0", 3 * MIB, 0}, {"f1", 3 * MIB, 0}, {"f2", 3 * MIB, 0}};
	devcache_device_t *dev;
	devcache_model_t *m, *f;
	devcache_ctx_t *ctx;
	devcache_cache_stats_t cs;

	(void)state;
	snprintf(path, sizeof path, "%s/ram.safetensors", dir);
	snprintf(other, sizeof other, "%s/filler.safetensors", dir);
	mw_safetensors(path, model, N_MODEL, 8, NULL);
	mw_safetensors(other, filler, 3, 9, NULL);
	ctx = open_ze(false, "keep_ram_copy:true,max_cache_vram:16M", &dev);
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
	devcache_model_release(m);
	assert_int_equal(devcache_model_load(ctx, other, dev, NULL, &f), 0);
	devcache_model_release(f);
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
	assert_int_equal(devcache_cache_stats(ctx, &cs), 0);
	assert_int_equal(cs.ram_copy_reloads, 1);
	check_on_device(dev, m, model, N_MODEL, 8);
	assert_int_equal(ze_misuses("zeMemAllocDevice"), misuses);
	devcache_model_release(m);
	devcache_close(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(device_info_reports_the_limit),
		cmocka_unit_test(devcache_info_shows_the_limit),
		cmocka_unit_test(a_model_above_the_limit_is_split),
		cmocka_unit_test(a_relaxed_driver_takes_the_model_whole),
		cmocka_unit_test(a_tensor_above_the_limit_is_named),
		cmocka_unit_test(a_partial_load_leaves_a_tensor_above_the_limit_on_the_host),
		cmocka_unit_test(the_allocator_refuses_above_the_limit_at_once),
		cmocka_unit_test(expandable_segments_pass_the_limit),
		cmocka_unit_test(a_size_refusal_is_not_out_of_memory),
		cmocka_unit_test(a_split_model_survives_a_ram_copy),
	};

	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, setup, teardown);
}
