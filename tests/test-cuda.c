/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-cuda.c - what is the CUDA backend's own: the driver it loads or fails to, primary contexts, the driver's words in errors, and the capabilities it reports. */
#include "tap.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <devcache.h>

#include "spawn.h"

/* CUresult codes, as cuda.h numbers them (the test is not built against it). */
#define CUDA_ERROR_UNKNOWN 999
#define CUDA_ERROR_OUT_OF_MEMORY 2

static char fake[4096];

static void need_backend(void)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/libfake-cuda.so", test_env("TEST_FAKES"));
	if (access(path, R_OK) != 0)
		skip_because("the cuda backend is not built (configure found no cuda.h)");
	snprintf(fake, sizeof fake, "%s", path);
}

/* A context with only the cuda backend, on the driver library lib. */
static devcache_ctx_t *open_cuda(const char *lib, const char *more)
{
	char opts[16384];
	devcache_ctx_t *ctx;
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .options = opts};

	snprintf(opts, sizeof opts, "log_level:error,backend_path:%s,backends:cuda,cuda_library:%s%s%s",
		 test_env("TEST_BACKENDS"), lib, more ? "," : "", more ? more : "");
	if (devcache_open_ex(&ctx, &args))
		fail_msg("devcache_open_ex(%s): %s", opts, devcache_last_error());
	return ctx;
}

/* The cuda backend's status line: how many devices, and why none. */
static void cuda_backend(devcache_ctx_t *ctx, devcache_backend_info_t *b)
{
	for (size_t i = 0; i < devcache_backend_count(ctx); i++)
		if (devcache_backend_info(ctx, i, b) == 0 && strcmp(b->name, "cuda") == 0)
			return;
	fail_msg("no cuda backend in the context");
}

/* ---- drivers that give no device ---- */

static void a_missing_driver_gives_no_device_and_says_why(void **state)
{
	devcache_backend_info_t b;
	devcache_device_t *dev;

	(void)state;
	need_backend();
	devcache_ctx_t *ctx = open_cuda("/nonexistent/libcuda.so.1", NULL);
	cuda_backend(ctx, &b);
	assert_int_equal(b.device_count, 0);
	assert_contains(b.reason, "the CUDA driver could not be loaded");
	assert_contains(b.reason, "/nonexistent/libcuda.so.1");
	assert_int_equal(devcache_device_get(ctx, "cuda:0", &dev), DEVCACHE_ENODEV);
	devcache_close(ctx);
}

static void a_library_that_is_no_driver_is_named(void **state)
{
	devcache_backend_info_t b;

	(void)state;
	need_backend();
	/* A real shared library, but not libcuda: the fake HIP runtime, say. */
	char other[4096];
	snprintf(other, sizeof other, "%s/libfake-hip.so", test_env("TEST_FAKES"));
	if (access(other, R_OK) != 0)
		snprintf(other, sizeof other, "libm.so.6");
	devcache_ctx_t *ctx = open_cuda(other, NULL);
	cuda_backend(ctx, &b);
	assert_int_equal(b.device_count, 0);
	assert_contains(b.reason, "has no cuGetErrorString: not a CUDA driver this backend can use");
	devcache_close(ctx);
}

/* The toolkit's stub answers everything, its own error strings too, with
 * CUDA_ERROR_STUB_LIBRARY: the backend still says so in the driver's words. */
static void the_toolkit_stub_gives_no_device_in_the_drivers_words(void **state)
{
	const char *stub = getenv("TEST_CUDA_STUB");
	devcache_backend_info_t b;

	(void)state;
	need_backend();
	if (!stub || !*stub)
		skip_because("configure found no stub libcuda.so in the CUDA Toolkit");
	devcache_ctx_t *ctx = open_cuda(stub, NULL);
	cuda_backend(ctx, &b);
	assert_int_equal(b.device_count, 0);
	assert_contains(b.reason, stub);
	assert_contains(b.reason, "cuInit: CUDA driver is a stub library (CUDA_ERROR_STUB_LIBRARY)");
	devcache_close(ctx);
}

/* ---- the fake driver's controls ---- */

struct controls {
	void *lib;
	void (*inject)(const char *, unsigned, int);
	unsigned long (*calls)(const char *);
	size_t (*live)(void);
	int (*retain)(void **, int);
	int (*release)(int);
	int (*get_current)(void **);
	int (*set_current)(void *);
};

static void controls(struct controls *c)
{
	assert_non_null(c->lib = dlopen(fake, RTLD_NOW | RTLD_NOLOAD));
	assert_non_null(*(void **)&c->inject = dlsym(c->lib, "fake_cuda_fail"));
	assert_non_null(*(void **)&c->calls = dlsym(c->lib, "fake_cuda_calls"));
	assert_non_null(*(void **)&c->live = dlsym(c->lib, "fake_cuda_live"));
	assert_non_null(*(void **)&c->retain = dlsym(c->lib, "cuDevicePrimaryCtxRetain"));
	assert_non_null(*(void **)&c->release = dlsym(c->lib, "cuDevicePrimaryCtxRelease_v2"));
	assert_non_null(*(void **)&c->get_current = dlsym(c->lib, "cuCtxGetCurrent"));
	assert_non_null(*(void **)&c->set_current = dlsym(c->lib, "cuCtxSetCurrent"));
}

/* ---- on the fake driver ---- */

static void devices_report_what_the_driver_says(void **state)
{
	devcache_device_info_t info;
	devcache_device_t *dev;

	(void)state;
	need_backend();
	devcache_ctx_t *ctx = open_cuda(fake, NULL);
	assert_int_equal(devcache_device_get(ctx, "cuda:1", &dev), 0);
	assert_int_equal(devcache_device_info(dev, &info), 0);
	assert_string_equal(info.id, "cuda:1");
	assert_string_equal(info.name, "Fake CUDA device 1");
	assert_string_equal(info.pci_bus_id, "0000:02:00.0");
	assert_int_equal(info.total_memory, 1024ull << 20);
	assert_true(info.caps & DEVCACHE_CAP_ASYNC_COPY);
	assert_true(info.caps & DEVCACHE_CAP_VMM);
	assert_true(info.caps & DEVCACHE_CAP_IPC);
	assert_false(info.caps & DEVCACHE_CAP_HOST_MEMORY);
	/* "cuda" alone is the first device. */
	assert_int_equal(devcache_device_get(ctx, "cuda", &dev), 0);
	assert_int_equal(devcache_device_info(dev, &info), 0);
	assert_string_equal(info.id, "cuda:0");
	devcache_close(ctx);
}

/* A context is retained for a device at its first use only, and released
 * when the libdevcache context closes. */
static void primary_contexts_are_retained_on_first_use(void **state)
{
	struct controls c;
	devcache_device_t *d0, *d1;
	void *p;

	(void)state;
	need_backend();
	devcache_ctx_t *ctx = open_cuda(fake, NULL);
	controls(&c);
	unsigned long retained = c.calls("cuDevicePrimaryCtxRetain");
	assert_int_equal(devcache_device_get(ctx, "cuda:0", &d0), 0);
	assert_int_equal(devcache_device_get(ctx, "cuda:1", &d1), 0);
	assert_int_equal(devcache_alloc(d1, 1 << 20, NULL, &p), 0);
	assert_int_equal(c.calls("cuDevicePrimaryCtxRetain"), retained + 1);
	assert_int_equal(devcache_free(d1, p), 0);
	assert_int_equal(devcache_alloc(d1, 1 << 20, NULL, &p), 0);
	assert_int_equal(devcache_free(d1, p), 0);
	assert_int_equal(c.calls("cuDevicePrimaryCtxRetain"), retained + 1);
	unsigned long released = c.calls("cuDevicePrimaryCtxRelease_v2");
	devcache_close(ctx);
	assert_int_equal(c.calls("cuDevicePrimaryCtxRelease_v2"), released + 1);
	assert_int_equal(c.live(), 0);
	dlclose(c.lib);
}

/* The program's own current context is its own: a call on another device
 * pushes over it and pops, so the program finds it current after. */
static void the_programs_current_context_is_put_back(void **state)
{
	struct controls c;
	devcache_device_t *d0;
	void *own = NULL, *current = NULL, *p;

	(void)state;
	need_backend();
	devcache_ctx_t *ctx = open_cuda(fake, "caching:false");
	controls(&c);
	/* The program's context: device 1's primary context, which libdevcache
	 * has not used. */
	assert_int_equal(c.retain(&own, 1), 0);
	assert_int_equal(c.set_current(own), 0);
	assert_int_equal(devcache_device_get(ctx, "cuda:0", &d0), 0);
	assert_int_equal(devcache_alloc(d0, 4096, NULL, &p), 0);
	assert_int_equal(c.get_current(&current), 0);
	assert_ptr_equal(current, own);
	assert_int_equal(devcache_free(d0, p), 0);
	assert_int_equal(c.get_current(&current), 0);
	assert_ptr_equal(current, own);
	/* A thread with no context keeps the device's, as the CUDA runtime leaves it. */
	assert_int_equal(c.set_current(NULL), 0);
	assert_int_equal(devcache_alloc(d0, 4096, NULL, &p), 0);
	assert_int_equal(c.get_current(&current), 0);
	assert_non_null(current);
	assert_ptr_not_equal(current, own);
	assert_int_equal(devcache_free(d0, p), 0);
	devcache_close(ctx);
	assert_int_equal(c.set_current(NULL), 0);
	assert_int_equal(c.release(1), 0);
	assert_int_equal(c.live(), 0);
	dlclose(c.lib);
}

/* A context the driver will not give: a clean error in the driver's words,
 * not an out-of-memory, and the device works at the next call. */
static void a_context_the_driver_refuses_is_a_clean_error(void **state)
{
	struct controls c;
	devcache_device_t *dev;
	void *p = NULL;

	(void)state;
	need_backend();
	devcache_ctx_t *ctx = open_cuda(fake, NULL);
	controls(&c);
	assert_int_equal(devcache_device_get(ctx, "cuda:0", &dev), 0);
	/* Every call: the allocator tries twice before it gives up. */
	c.inject("cuDevicePrimaryCtxRetain", 1 | 0x80000000u, CUDA_ERROR_UNKNOWN);
	int rc = devcache_alloc(dev, 4096, NULL, &p);
	c.inject("cuDevicePrimaryCtxRetain", 0, 0);
	/* Not "out of memory": the driver's own failure, in its words. */
	assert_int_equal(rc, DEVCACHE_EBACKEND);
	assert_null(p);
	assert_contains(devcache_last_error(),
			"cuda:0: cannot allocate 4096 bytes: "
			"cuda:0: cuDevicePrimaryCtxRetain: unknown error (CUDA_ERROR_UNKNOWN)");
	devcache_stats_t st;
	assert_int_equal(devcache_stats(dev, &st), 0);
	assert_int_equal(st.num_ooms, 0);
	assert_int_equal(devcache_alloc(dev, 4096, NULL, &p), 0);
	assert_int_equal(devcache_free(dev, p), 0);
	devcache_close(ctx);
	assert_int_equal(c.live(), 0);
	dlclose(c.lib);
}

/* The driver's out-of-memory is the allocator's: retried after the cache is
 * emptied, then DEVCACHE_ENOMEM with the driver's words. */
static void the_drivers_out_of_memory_is_named(void **state)
{
	struct controls c;
	devcache_device_t *dev;
	void *p = NULL;

	(void)state;
	need_backend();
	devcache_ctx_t *ctx = open_cuda(fake, "caching:false");
	controls(&c);
	assert_int_equal(devcache_device_get(ctx, "cuda:0", &dev), 0);
	c.inject("cuMemAlloc_v2", 1 | 0x80000000u, CUDA_ERROR_OUT_OF_MEMORY);
	assert_int_equal(devcache_alloc(dev, 4096, NULL, &p), DEVCACHE_ENOMEM);
	c.inject("cuMemAlloc_v2", 0, 0);
	assert_contains(devcache_last_error(),
			"cuda:0: out of memory. Tried to allocate 4.00 KiB for a request of 4096 bytes");
	assert_contains(devcache_last_error(),
			" The driver said: cuda:0: cuMemAlloc: out of memory (CUDA_ERROR_OUT_OF_MEMORY)");
	assert_int_equal(devcache_alloc(dev, 4096, NULL, &p), 0);
	assert_int_equal(devcache_free(dev, p), 0);
	devcache_close(ctx);
	assert_int_equal(c.live(), 0);
	dlclose(c.lib);
}

/* A device without virtual memory management has no vmm capability, and
 * expandable segments fall back to ordinary ones there. */
static void a_device_without_vmm_says_so(void **state)
{
	char opts[8192];
	struct result *r = malloc(sizeof *r);

	(void)state;
	need_backend();
	assert_non_null(r);
	snprintf(opts, sizeof opts, "DEVCACHE_OPTIONS=backend_path:%s,backends:cuda,cuda_library:%s",
		 test_env("TEST_BACKENDS"), fake);
	const char *with[] = {"LANGUAGE=C", "LC_ALL=C", opts, "-CUDA_VISIBLE_DEVICES", NULL};
	const char *without[] = {"LANGUAGE=C", "LC_ALL=C", opts, "-CUDA_VISIBLE_DEVICES",
				 "FAKE_CUDA_VMM=0", NULL};
	const char *args[] = {"info", NULL};

	spawn_tool(r, with, args);
	assert_int_equal(r->status, 0);
	assert_contains(r->out, "capabilities: vmm ipc async-copy");
	spawn_tool(r, without, args);
	assert_int_equal(r->status, 0);
	assert_contains(r->out, "Fake CUDA device 0");
	assert_contains(r->out, "capabilities: ipc async-copy");
	free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_missing_driver_gives_no_device_and_says_why),
		cmocka_unit_test(a_library_that_is_no_driver_is_named),
		cmocka_unit_test(the_toolkit_stub_gives_no_device_in_the_drivers_words),
		cmocka_unit_test(devices_report_what_the_driver_says),
		cmocka_unit_test(primary_contexts_are_retained_on_first_use),
		cmocka_unit_test(the_programs_current_context_is_put_back),
		cmocka_unit_test(a_context_the_driver_refuses_is_a_clean_error),
		cmocka_unit_test(the_drivers_out_of_memory_is_named),
		cmocka_unit_test(a_device_without_vmm_says_so),
	};

	return RUN_TAP(tests);
}
