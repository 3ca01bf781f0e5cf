/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-torch.c - PyTorch's pluggable-allocator entry points: the process-wide context, PYTORCH_CUDA_ALLOC_CONF, device mapping, errors that have no return code, and threads. */
#include "config.h"

#include "tap.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <devcache.h>
#include <devcache-torch.h>

#include "internal.h"

/* The process-wide context reads the environment once, at its first use:
 * each scenario that needs a context of its own runs in a fresh process, this
 * program run again with "--scenario NAME", and the test reads what it
 * printed. */

#define MiB (1 << 20)

static char self[4096];

static const char *fake_path(const char *vendor)
{
	static char path[2][4096];
	int k = strcmp(vendor, "cuda") != 0;

	snprintf(path[k], sizeof path[k], "%s/libfake-%s.so", test_env("TEST_FAKES"), vendor);
	return path[k];
}

static void need_fake(const char *vendor)
{
	if (access(fake_path(vendor), R_OK) != 0) {
		if (strcmp(vendor, "cuda") == 0)
			skip_because("the cuda backend is not built (configure found no cuda.h)");
		skip_because("the hip backend is not built (configure found no HIP headers)");
	}
}

/* ---- in a scenario's process --------------------------------------------------- */

static devcache_device_t *torch_device(int index)
{
	devcache_device_t *dev = NULL;
	int rc = devcache_torch_device(index, &dev);

	if (rc)
		fail_msg("devcache_torch_device(%d): %s", index, devcache_last_error());
	assert_non_null(dev);
	return dev;
}

static devcache_stats_t stats_of(devcache_device_t *dev)
{
	devcache_stats_t st;

	assert_int_equal(devcache_stats(dev, &st), 0);
	return st;
}

static const char *id_of(devcache_device_t *dev)
{
	static devcache_device_info_t info;

	assert_int_equal(devcache_device_info(dev, &info), 0);
	return info.id;
}

static void expect_config(const char *name, const char *value, const char *origin)
{
	devcache_ctx_t *ctx;
	const char *from = NULL;
	char buf[256];

	assert_int_equal(devcache_torch_context(&ctx), 0);
	assert_int_equal(devcache_config_get(ctx, name, buf, sizeof buf, &from), 0);
	if (strcmp(buf, value) != 0 || !from || strcmp(from, origin) != 0)
		fail_msg("%s is %s from %s, expected %s from %s", name, buf, from ? from : "(null)",
			 value, origin);
}

/* Device 0 and device 1 of the fake driver are cuda:0 and cuda:1. */
static void sc_malloc_free(void **state)
{
	char in[4096], out[4096];
	devcache_ctx_t *ctx;
	devcache_device_t *d;

	(void)state;
	void *p0 = devcache_torch_malloc(MiB, 0, NULL);
	void *p1 = devcache_torch_malloc(MiB, 1, NULL);
	assert_non_null(p0);
	assert_non_null(p1);
	devcache_device_t *d0 = torch_device(0), *d1 = torch_device(1);
	assert_string_equal(id_of(d0), "cuda:0");
	assert_string_equal(id_of(d1), "cuda:1");
	assert_int_equal(stats_of(d0).allocation[DEVCACHE_POOL_ALL].current, 1);
	assert_int_equal(stats_of(d1).allocation[DEVCACHE_POOL_ALL].current, 1);
	assert_int_equal(stats_of(d1).allocated_bytes[DEVCACHE_POOL_ALL].current, MiB);
	/* The memory is device 1's: a copy there and back. */
	memset(in, 0x5a, sizeof in);
	assert_int_equal(devcache_copy_to_device(d1, p1, in, sizeof in, NULL), 0);
	assert_int_equal(devcache_copy_to_host(d1, out, p1, sizeof out, NULL), 0);
	assert_memory_equal(in, out, sizeof in);
	devcache_torch_free(p0, MiB, 0, NULL);
	devcache_torch_free(p1, MiB, 1, NULL);
	assert_int_equal(stats_of(d0).allocation[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(stats_of(d1).allocation[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(stats_of(d1).allocated_bytes[DEVCACHE_POOL_ALL].current, 0);
	/* The same devices every time, and the context's own. */
	assert_ptr_equal(torch_device(0), d0);
	assert_int_equal(devcache_torch_context(&ctx), 0);
	assert_int_equal(devcache_device_get(ctx, "cuda:1", &d), 0);
	assert_ptr_equal(d, d1);
}

/* A freed block is reused on its own stream, not on another. */
static void sc_streams(void **state)
{
	devcache_stream_t s1 = NULL, s2 = NULL;
	const ssize_t size = 4096;

	(void)state;
	devcache_device_t *dev = torch_device(0);
	assert_int_equal(devcache_stream_create(dev, &s1), 0);
	assert_int_equal(devcache_stream_create(dev, &s2), 0);
	assert_ptr_not_equal(s1, s2);
	void *a = devcache_torch_malloc(size, 0, s1);
	void *b = devcache_torch_malloc(size, 0, s2);
	assert_non_null(a);
	assert_non_null(b);
	assert_ptr_not_equal(a, b);
	uint64_t segments = stats_of(dev).num_device_alloc;
	devcache_torch_free(a, size, 0, s1);
	/* On s2 the block a was is not free. */
	void *c = devcache_torch_malloc(size, 0, s2);
	assert_non_null(c);
	assert_ptr_not_equal(c, a);
	/* On s1 it is, and no driver call is needed. */
	void *d = devcache_torch_malloc(size, 0, s1);
	assert_ptr_equal(d, a);
	assert_int_equal(stats_of(dev).num_device_alloc, segments);
	devcache_torch_free(b, size, 0, s2);
	devcache_torch_free(c, size, 0, s2);
	devcache_torch_free(d, size, 0, s1);
	assert_int_equal(stats_of(dev).allocation[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(devcache_stream_destroy(dev, s1), 0);
	assert_int_equal(devcache_stream_destroy(dev, s2), 0);
}

/* What devcache.torch.memory_stats reads. */
static void sc_stats(void **state)
{
	devcache_ctx_t *ctx, *again;
	void *p[4];
	const ssize_t sizes[4] = {4096, 4096, 4096, 5 * MiB};
	const int64_t total = 3 * 4096 + 5 * MiB;

	(void)state;
	assert_int_equal(devcache_torch_context(&ctx), 0);
	assert_non_null(ctx);
	assert_int_equal(devcache_torch_context(&again), 0);
	assert_ptr_equal(again, ctx);
	devcache_device_t *dev = torch_device(0);
	devcache_stats_t before = stats_of(dev);
	for (int i = 0; i < 4; i++)
		assert_non_null(p[i] = devcache_torch_malloc(sizes[i], 0, NULL));
	devcache_stats_t st = stats_of(dev);
	assert_int_equal(st.allocation[DEVCACHE_POOL_ALL].current, 4);
	assert_int_equal(st.allocation[DEVCACHE_POOL_SMALL].current, 3);
	assert_int_equal(st.allocated_bytes[DEVCACHE_POOL_ALL].current, total);
	/* A small segment and a large one. */
	assert_int_equal(st.num_device_alloc, before.num_device_alloc + 2);
	for (int i = 0; i < 4; i++)
		devcache_torch_free(p[i], sizes[i], 0, NULL);
	st = stats_of(dev);
	assert_int_equal(st.allocation[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(st.allocated_bytes[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(st.allocated_bytes[DEVCACHE_POOL_ALL].peak, total);
	/* The same again comes from the cache. */
	for (int i = 0; i < 4; i++)
		assert_non_null(p[i] = devcache_torch_malloc(sizes[i], 0, NULL));
	assert_int_equal(stats_of(dev).num_device_alloc, before.num_device_alloc + 2);
	for (int i = 0; i < 4; i++)
		devcache_torch_free(p[i], sizes[i], 0, NULL);
}

/* With PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64,garbage_collection_threshold:0.5,backend:native */
static void sc_pytorch_conf(void **state)
{
	devcache_ctx_t *plain;
	const char *from = NULL;
	char buf[256];

	(void)state;
	expect_config("max_split_size_mb", "64M", "PYTORCH_CUDA_ALLOC_CONF");
	expect_config("garbage_collection_threshold", "0.5", "PYTORCH_CUDA_ALLOC_CONF");
	expect_config("backends", "cuda", "DEVCACHE_OPTIONS");
	/* In effect, not only reported: a 64 MiB block is one never split. */
	devcache_device_t *dev = torch_device(0);
	void *p = devcache_torch_malloc(64 * MiB, 0, NULL);
	assert_non_null(p);
	assert_int_equal(stats_of(dev).oversize_allocations.current, 1);
	devcache_torch_free(p, 64 * MiB, 0, NULL);
	/* devcache_open() is not torch's: it does not read the variable. */
	assert_int_equal(devcache_open(&plain, NULL), 0);
	assert_int_equal(devcache_config_get(plain, "max_split_size_mb", buf, sizeof buf, &from), 0);
	assert_string_equal(from, "default");
	devcache_close(plain);
}

/* With PYTORCH_NO_CUDA_MEMORY_CACHING=0: set at all, as PyTorch reads it. */
static void sc_no_caching(void **state)
{
	devcache_ctx_t *plain;
	const char *from = NULL;
	char buf[256];

	(void)state;
	expect_config("caching", "false", "PYTORCH_NO_CUDA_MEMORY_CACHING");
	devcache_device_t *dev = torch_device(0);
	devcache_stats_t before = stats_of(dev);
	void *p = devcache_torch_malloc(1000, 0, NULL);
	assert_non_null(p);
	devcache_torch_free(p, 1000, 0, NULL);
	devcache_stats_t after = stats_of(dev);
	/* Straight to the driver and back, of the size asked for. */
	assert_int_equal(after.num_device_alloc, before.num_device_alloc + 1);
	assert_int_equal(after.num_device_free, before.num_device_free + 1);
	assert_int_equal(after.reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(after.reserved_bytes[DEVCACHE_POOL_ALL].peak, 1000);
	/* devcache_open() is not torch's: it does not read the variable. */
	assert_int_equal(devcache_open(&plain, NULL), 0);
	assert_int_equal(devcache_config_get(plain, "caching", buf, sizeof buf, &from), 0);
	assert_string_equal(from, "default");
	devcache_close(plain);
}

/* With PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64,garbage_collection_threshold:0.5,
 * DEVCACHE_OPTIONS=...,max_split_size_mb:128 and DEVCACHE_CONF setting
 * garbage_collection_threshold and roundup_power2_divisions. */
static void sc_precedence(void **state)
{
	char at[4200];

	(void)state;
	expect_config("max_split_size_mb", "128M", "DEVCACHE_OPTIONS");
	expect_config("garbage_collection_threshold", "0.5", "PYTORCH_CUDA_ALLOC_CONF");
	snprintf(at, sizeof at, "%s:2", getenv("DEVCACHE_CONF"));
	expect_config("roundup_power2_divisions", "8", at);
}

/* With PYTORCH_CUDA_ALLOC_CONF=nonsense:1 */
static void sc_bad_conf(void **state)
{
	devcache_ctx_t *ctx = (void *)1, *plain;
	devcache_device_t *dev = (void *)1;
	char first[1024];

	(void)state;
	/* Nothing to free: the context is not even opened. */
	devcache_torch_free(NULL, 0, 0, NULL);
	fprintf(stderr, "-- freed NULL --\n");
	/* devcache_open() does not read the variable, so it opens. */
	assert_int_equal(devcache_open(&plain, NULL), 0);
	devcache_close(plain);
	assert_null(devcache_torch_malloc(4096, 0, NULL));
	assert_contains(devcache_last_error(), "PYTORCH_CUDA_ALLOC_CONF: unknown tunable 'nonsense'");
	/* Not read again: the failure is kept. */
	unsetenv("PYTORCH_CUDA_ALLOC_CONF");
	assert_null(devcache_torch_malloc(4096, 0, NULL));
	assert_int_equal(devcache_torch_context(&ctx), DEVCACHE_ECONFIG);
	assert_null(ctx);
	snprintf(first, sizeof first, "%s", devcache_last_error());
	assert_contains(first, "PYTORCH_CUDA_ALLOC_CONF: unknown tunable 'nonsense'");
	assert_int_equal(devcache_torch_context(&ctx), DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(), first);
	assert_int_equal(devcache_torch_device(0, &dev), DEVCACHE_ECONFIG);
	assert_null(dev);
	assert_string_equal(devcache_last_error(), first);
}

/* Indices that are no device fail, and the rest go on working. */
static void sc_devices(void **state)
{
	devcache_device_t *dev = (void *)1;

	(void)state;
	assert_null(devcache_torch_malloc(4096, 2, NULL));
	assert_contains(devcache_last_error(), "torch device 2: no device 'cuda:2'");
	assert_int_equal(devcache_torch_device(2, &dev), DEVCACHE_ENODEV);
	assert_null(dev);
	/* Past the table of known indices, and past any device name. */
	assert_int_equal(devcache_torch_device(64, &dev), DEVCACHE_ENODEV);
	assert_int_equal(devcache_torch_device(1000000, &dev), DEVCACHE_ENODEV);
	assert_int_equal(devcache_torch_device(-1, &dev), DEVCACHE_EINVAL);
	assert_null(devcache_torch_malloc(4096, -1, NULL));
	assert_contains(devcache_last_error(), "torch device -1");
	assert_int_equal(devcache_torch_device(0, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_torch_context(NULL), DEVCACHE_EINVAL);
	/* Index 2 failing is not cached as index 1, nor does it break it. */
	void *p = devcache_torch_malloc(4096, 1, NULL);
	assert_non_null(p);
	assert_string_equal(id_of(torch_device(1)), "cuda:1");
	devcache_torch_free(p, 4096, 1, NULL);
}

/* free(NULL), size 0 and negative sizes. */
static void sc_sizes(void **state)
{
	int not_ours[16];

	(void)state;
	devcache_device_t *dev = torch_device(0);
	devcache_stats_t before = stats_of(dev);
	/* No device is looked at, so a bad one says nothing. */
	devcache_torch_free(NULL, 0, 0, NULL);
	devcache_torch_free(NULL, 4096, 99, NULL);
	assert_null(devcache_torch_malloc(0, 0, NULL));
	assert_null(devcache_torch_malloc(0, 99, NULL));
	devcache_stats_t after = stats_of(dev);
	assert_int_equal(after.allocation[DEVCACHE_POOL_ALL].allocated,
			 before.allocation[DEVCACHE_POOL_ALL].allocated);
	assert_int_equal(after.allocation[DEVCACHE_POOL_ALL].freed,
			 before.allocation[DEVCACHE_POOL_ALL].freed);
	assert_int_equal(after.num_device_alloc, before.num_device_alloc);
	fflush(stdout);
	fprintf(stderr, "-- errors from here --\n");
	assert_null(devcache_torch_malloc(-1, 0, NULL));
	assert_contains(devcache_last_error(), "invalid size -1");
	assert_null(devcache_torch_malloc(-4096, 0, NULL));
	/* A pointer it never gave: said, and nothing else happens. */
	devcache_torch_free(not_ours, sizeof not_ours, 0, NULL);
	after = stats_of(dev);
	assert_int_equal(after.num_ooms, before.num_ooms);
	assert_int_equal(after.allocation[DEVCACHE_POOL_ALL].freed,
			 before.allocation[DEVCACHE_POOL_ALL].freed);
}

struct capture {
	int n;
	enum devcache_log_level level[8];
	char text[8][1024];
};

static void capture_fn(void *user, enum devcache_log_level level, const char *msg)
{
	struct capture *cap = user;

	if (cap->n < 8) {
		cap->level[cap->n] = level;
		snprintf(cap->text[cap->n], sizeof cap->text[0], "%s", msg);
	}
	cap->n++;
}

/* Errors go to the context's log handler, once the program has set one. */
static void sc_log_handler(void **state)
{
	struct capture cap = {0};
	devcache_ctx_t *ctx;

	(void)state;
	assert_int_equal(devcache_torch_context(&ctx), 0);
	devcache_set_log_handler(ctx, capture_fn, &cap);
	/* The fake device has 1 GiB. */
	assert_null(devcache_torch_malloc(2048l * MiB, 0, NULL));
	assert_int_equal(cap.n, 1);
	assert_int_equal(cap.level[0], DEVCACHE_LOG_ERROR);
	assert_contains(cap.text[0], "devcache_torch_malloc: cuda:0: out of memory");
	assert_int_equal(stats_of(torch_device(0)).num_ooms, 1);
	assert_null(devcache_torch_malloc(4096, 5, NULL));
	assert_int_equal(cap.n, 2);
	assert_contains(cap.text[1], "devcache_torch_malloc: torch device 5: no device 'cuda:5'");
	devcache_set_log_handler(ctx, NULL, NULL);
}

/* ---- four threads, from the very first call ---- */

#define THREADS 4
#define ROUNDS 3000
#define SLOTS 8

struct worker {
	int index;
	pthread_barrier_t *start;
	unsigned long mallocs;
	char failure[256];
};

static void *work(void *arg)
{
	struct worker *w = arg;
	int device = w->index % 2;
	devcache_device_t *dev = NULL;
	devcache_stream_t stream = NULL;
	void *ptr[SLOTS] = {0};
	ssize_t size[SLOTS] = {0};
	uint64_t tag[SLOTS] = {0};
	unsigned seed = 12345u + (unsigned)w->index;

	pthread_barrier_wait(w->start);
	for (int r = 0; r < ROUNDS && !w->failure[0]; r++) {
		int k = rand_r(&seed) % SLOTS;
		uint64_t seen = 0;

		if (ptr[k]) {
			/* Nobody else was given this block meanwhile. */
			if (devcache_copy_to_host(dev, &seen, ptr[k], sizeof seen, stream) ||
			    seen != tag[k]) {
				snprintf(w->failure, sizeof w->failure,
					 "round %d: block %p holds %#llx, not its tag %#llx", r, ptr[k],
					 (unsigned long long)seen, (unsigned long long)tag[k]);
				break;
			}
			devcache_torch_free(ptr[k], size[k], device, stream);
			ptr[k] = NULL;
			continue;
		}
		size[k] = 8 + rand_r(&seed) % (3 * MiB);
		ptr[k] = devcache_torch_malloc(size[k], device, stream);
		if (!ptr[k]) {
			snprintf(w->failure, sizeof w->failure, "round %d: malloc(%zd): %s", r, size[k],
				 devcache_last_error());
			break;
		}
		w->mallocs++;
		if (!dev && (devcache_torch_device(device, &dev) ||
			     (w->index >= 2 && devcache_stream_create(dev, &stream)))) {
			snprintf(w->failure, sizeof w->failure, "%s", devcache_last_error());
			break;
		}
		tag[k] = (uint64_t)w->index << 32 | (uint64_t)r;
		if (devcache_copy_to_device(dev, ptr[k], &tag[k], sizeof tag[k], stream)) {
			snprintf(w->failure, sizeof w->failure, "copy: %s", devcache_last_error());
			break;
		}
	}
	for (int k = 0; k < SLOTS; k++)
		if (ptr[k])
			devcache_torch_free(ptr[k], size[k], device, stream);
	if (stream)
		devcache_stream_destroy(dev, stream);
	return NULL;
}

static void sc_threads(void **state)
{
	pthread_t tid[THREADS];
	struct worker w[THREADS];
	pthread_barrier_t start;
	unsigned long mallocs[2] = {0};

	(void)state;
	assert_int_equal(pthread_barrier_init(&start, NULL, THREADS), 0);
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker){.index = i, .start = &start};
		assert_int_equal(pthread_create(&tid[i], NULL, work, &w[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_join(tid[i], NULL), 0);
	pthread_barrier_destroy(&start);
	for (int i = 0; i < THREADS; i++) {
		if (w[i].failure[0])
			fail_msg("thread %d: %s", i, w[i].failure);
		mallocs[i % 2] += w[i].mallocs;
	}
	for (int d = 0; d < 2; d++) {
		devcache_stats_t st = stats_of(torch_device(d));

		assert_int_equal(st.allocation[DEVCACHE_POOL_ALL].current, 0);
		assert_int_equal(st.allocated_bytes[DEVCACHE_POOL_ALL].current, 0);
		assert_int_equal(st.allocation[DEVCACHE_POOL_ALL].allocated, mallocs[d]);
	}
	/* Four threads raced to the first call: the driver was set up once. */
	void *lib = dlopen(fake_path("cuda"), RTLD_NOW | RTLD_NOLOAD);
	unsigned long (*calls)(const char *);
	assert_non_null(lib);
	assert_non_null(*(void **)&calls = dlsym(lib, "fake_cuda_calls"));
	assert_int_equal(calls("cuInit"), 1);
	dlclose(lib);
}

/* With DEVCACHE_OPTIONS for the hip backend only. */
static void sc_hip(void **state)
{
	(void)state;
	void *p = devcache_torch_malloc(MiB, 1, NULL);
	assert_non_null(p);
	devcache_device_t *dev = torch_device(1);
	assert_string_equal(id_of(dev), "hip:1");
	assert_int_equal(stats_of(dev).allocation[DEVCACHE_POOL_ALL].current, 1);
	devcache_torch_free(p, MiB, 1, NULL);
	assert_int_equal(stats_of(dev).allocation[DEVCACHE_POOL_ALL].current, 0);
}

/* As torch does it: the shared library opened by name, the two functions
 * looked up by name. */
static void sc_shared(void **state)
{
	void *(*alloc)(ssize_t, int, void *);
	void (*release)(void *, ssize_t, int, void *);
	int (*context)(devcache_ctx_t **);
	int (*device)(int, devcache_device_t **);
	devcache_device_t *dev = NULL;
	devcache_ctx_t *ctx = NULL;

	(void)state;
	void *lib = dlopen(TEST_LIBDEVCACHE, RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		fail_msg("dlopen: %s", dlerror());
	assert_non_null(*(void **)&alloc = dlsym(lib, "devcache_torch_malloc"));
	assert_non_null(*(void **)&release = dlsym(lib, "devcache_torch_free"));
	assert_non_null(*(void **)&context = dlsym(lib, "devcache_torch_context"));
	assert_non_null(*(void **)&device = dlsym(lib, "devcache_torch_device"));
	void *p = alloc(4096, 0, NULL);
	assert_non_null(p);
	assert_int_equal(context(&ctx), 0);
	assert_non_null(ctx);
	assert_int_equal(device(0, &dev), 0);
	assert_non_null(dev);
	release(p, 4096, 0, NULL);
	/* The library's internals stay hidden. */
	assert_null(dlsym(lib, "context_open"));
	/* No dlclose(): the process-wide context lives until exit, and would
	 * be unreachable (a leak to LeakSanitizer) once its library is gone. */
}

static const struct CMUnitTest scenarios[] = {
	cmocka_unit_test(sc_malloc_free), cmocka_unit_test(sc_streams),
	cmocka_unit_test(sc_stats),       cmocka_unit_test(sc_pytorch_conf),
	cmocka_unit_test(sc_precedence),  cmocka_unit_test(sc_bad_conf),
	cmocka_unit_test(sc_devices),     cmocka_unit_test(sc_sizes),
	cmocka_unit_test(sc_log_handler), cmocka_unit_test(sc_threads),
	cmocka_unit_test(sc_hip),         cmocka_unit_test(sc_shared),
	cmocka_unit_test(sc_no_caching),
};

/* ---- in the test's process: run a scenario --------------------------------------- */

struct run {
	int status;
	char out[65536];
	char err[65536];
};

static void slurp_fd(int fd, char *buf, size_t size)
{
	ssize_t n = pread(fd, buf, size - 1, 0);

	buf[n > 0 ? n : 0] = '\0';
	close(fd);
}

/* The fake drivers report at exit what is still allocated and retained:
 * the process-wide context is never closed, so there is always something.
 * Those lines are dropped, and the rest of what the scenario wrote is kept. */
static void drop_unload_reports(char *text)
{
	char *out = text;

	for (char *line = text; *line;) {
		char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line + 1) : strlen(line);

		if (end)
			*end = '\0';
		int report = (strncmp(line, "fake-cuda: ", 11) == 0 ||
			      strncmp(line, "fake-hip: ", 10) == 0) &&
			     (strstr(line, "still live at unload") ||
			      strstr(line, "still retained at unload"));
		if (end)
			*end = '\n';
		if (!report) {
			memmove(out, line, len);
			out += len;
		}
		line += len;
	}
	*out = '\0';
}

static void putenv_all(const char *const *env)
{
	for (; env && *env; env++)
		if (**env == '-')
			unsetenv(*env + 1);
		else
			putenv((char *)*env);
}

/* Run scenario name in a new process whose environment has the fake CUDA
 * driver's two devices and nothing of the user's, then the entries of more
 * ("NAME=VALUE", "-NAME" to unset). */
static void run_scenario(struct run *r, const char *name, const char *const *more)
{
	char out_path[] = "/tmp/devcache-test-torch-outXXXXXX";
	char err_path[] = "/tmp/devcache-test-torch-errXXXXXX";
	static char options[16384];
	int out = mkstemp(out_path), err = mkstemp(err_path), status;
	const char *base[] = {options,
			"HOME=/nonexistent/devcache-test-home",
			"LANGUAGE=C",
			"LC_ALL=C",
			"FAKE_CUDA_DEVICES=2",
			"FAKE_HIP_DEVICES=2",
			"-DEVCACHE_CONF",
			"-DEVCACHE_BACKEND_PATH",
			"-PYTORCH_CUDA_ALLOC_CONF",
			"-PYTORCH_NO_CUDA_MEMORY_CACHING",
			"-CUDA_VISIBLE_DEVICES",
			"-HIP_VISIBLE_DEVICES",
			"-FAKE_CUDA_FAIL",
			NULL};

	snprintf(options, sizeof options,
		 "DEVCACHE_OPTIONS=log_level:error,backend_path:%s,backends:cuda,cuda_library:%s",
		 test_env("TEST_BACKENDS"), fake_path("cuda"));
	assert_true(out >= 0 && err >= 0);
	unlink(out_path);
	unlink(err_path);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		putenv_all(base);
		if (!getenv("XDG_CONFIG_HOME"))
			putenv("XDG_CONFIG_HOME=/nonexistent/devcache-test-xdg");
		putenv_all(more);
		dup2(out, 1);
		dup2(err, 2);
		execl(self, self, "--scenario", name, (char *)NULL);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	slurp_fd(out, r->out, sizeof r->out);
	slurp_fd(err, r->err, sizeof r->err);
	drop_unload_reports(r->err);
}

static void expect_pass(const struct run *r, const char *name)
{
	if (r->status != 0)
		fail_msg("scenario %s failed (exit %d):\n%s\n-- its stderr --\n%s", name, r->status,
			 r->out, r->err);
}

/* A scenario that passes and writes nothing to stderr. */
static void quiet_pass(const char *name, const char *const *more)
{
	struct run *r = malloc(sizeof *r);

	assert_non_null(r);
	run_scenario(r, name, more);
	expect_pass(r, name);
	if (r->err[0])
		fail_msg("scenario %s wrote to stderr:\n%s", name, r->err);
	free(r);
}

static size_t count(const char *haystack, const char *needle)
{
	size_t n = 0;

	for (const char *p = strstr(haystack, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* ---- the tests ---- */

/* PYTORCH_CUDA_ALLOC_CONF ranks above the files and DEVCACHE_BACKEND_PATH
 * and below DEVCACHE_OPTIONS and the program's options. */
static void sources_rank_pytorch_conf(void **state)
{
	char dir[64], path[128];
	struct tunable_set set;
	struct log_state log;
	struct config_sources src = {
		.backend_path = "/env/modules",
		.torch_options = "backend_path:/torch/modules,max_split_size_mb:64,"
				 "garbage_collection_threshold:0.5,roundup_power2_divisions:4",
		.env_options = "max_split_size_mb:128",
		.options = "roundup_power2_divisions:2",
	};
	char text[256];

	(void)state;
	assert_int_equal(test_tmpdir_make(dir, sizeof dir, "torch"), 0);
	snprintf(path, sizeof path, "%s/devcache.conf", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("garbage_collection_threshold = 0.25\nload_workers = 3\n", f);
	assert_int_equal(fclose(f), 0);
	src.conf_file = path;
	assert_int_equal(tunable_set_defaults(&set), 0);
	log_init(&log, NULL, NULL);
	log_flush(&log, DEVCACHE_LOG_ERROR);
	assert_int_equal(config_apply_sources(&set, &src, &log), 0);
	assert_string_equal(set.v[TUN_backend_path].origin, "PYTORCH_CUDA_ALLOC_CONF");
	tunable_format(TUN_backend_path, &set.v[TUN_backend_path], text, sizeof text);
	assert_string_equal(text, "/torch/modules");
	assert_string_equal(set.v[TUN_garbage_collection_threshold].origin,
			    "PYTORCH_CUDA_ALLOC_CONF");
	assert_string_equal(set.v[TUN_max_split_size_mb].origin, "DEVCACHE_OPTIONS");
	assert_string_equal(set.v[TUN_roundup_power2_divisions].origin, "devcache_open");
	snprintf(text, sizeof text, "%s:2", path);
	assert_string_equal(set.v[TUN_load_workers].origin, text);
	/* An error in it names it. */
	src.torch_options = "max_split_size_mb:tiny";
	assert_int_equal(config_apply_sources(&set, &src, &log), DEVCACHE_ECONFIG);
	assert_contains(devcache_last_error(), "PYTORCH_CUDA_ALLOC_CONF: max_split_size_mb:");
	tunable_set_free(&set);
	log_destroy(&log);
	assert_int_equal(test_tmpdir_remove(dir), 0);
}

static void malloc_and_free_on_both_devices(void **state)
{
	(void)state;
	need_fake("cuda");
	quiet_pass("sc_malloc_free", NULL);
}

static void a_freed_block_is_reused_on_its_stream(void **state)
{
	(void)state;
	need_fake("cuda");
	quiet_pass("sc_streams", NULL);
}

static void statistics_through_the_torch_context(void **state)
{
	(void)state;
	need_fake("cuda");
	quiet_pass("sc_stats", NULL);
}

static void pytorch_conf_is_read_and_named(void **state)
{
	const char *env[] = {
		"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64,garbage_collection_threshold:0.5,"
		"backend:native",
		NULL};

	(void)state;
	need_fake("cuda");
	quiet_pass("sc_pytorch_conf", env);
}

static void pytorch_no_cuda_memory_caching_turns_caching_off(void **state)
{
	const char *env[] = {"PYTORCH_NO_CUDA_MEMORY_CACHING=0", NULL};

	(void)state;
	need_fake("cuda");
	quiet_pass("sc_no_caching", env);
}

static void devcache_options_override_pytorch_conf(void **state)
{
	char dir[64], conf[128], conf_env[160], options[16384];
	const char *env[] = {
		"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64,garbage_collection_threshold:0.5",
		conf_env, options, NULL};

	(void)state;
	need_fake("cuda");
	assert_int_equal(test_tmpdir_make(dir, sizeof dir, "torch"), 0);
	snprintf(conf, sizeof conf, "%s/devcache.conf", dir);
	snprintf(conf_env, sizeof conf_env, "DEVCACHE_CONF=%s", conf);
	FILE *f = fopen(conf, "w");
	assert_non_null(f);
	fputs("garbage_collection_threshold = 0.25\nroundup_power2_divisions = 8\n", f);
	assert_int_equal(fclose(f), 0);
	snprintf(options, sizeof options,
		 "DEVCACHE_OPTIONS=log_level:error,backend_path:%s,backends:cuda,cuda_library:%s,"
		 "max_split_size_mb:128",
		 test_env("TEST_BACKENDS"), fake_path("cuda"));
	quiet_pass("sc_precedence", env);
	assert_int_equal(test_tmpdir_remove(dir), 0);
}

static void a_bad_pytorch_conf_fails_every_call_said_once(void **state)
{
	const char *env[] = {"PYTORCH_CUDA_ALLOC_CONF=nonsense:1", NULL};
	struct run *r = malloc(sizeof *r);

	(void)state;
	need_fake("cuda");
	assert_non_null(r);
	run_scenario(r, "sc_bad_conf", env);
	expect_pass(r, "sc_bad_conf");
	/* Said after the first malloc, not at free(NULL), and only once. */
	assert_true(strncmp(r->err, "-- freed NULL --\n", 17) == 0);
	assert_contains(r->err, "libdevcache: error: devcache_torch_malloc: cannot open the context "
				"for PyTorch: PYTORCH_CUDA_ALLOC_CONF: unknown tunable 'nonsense'");
	assert_int_equal(count(r->err, "libdevcache:"), 1);
	free(r);
}

static void device_indices_that_are_no_device(void **state)
{
	struct run *r = malloc(sizeof *r);

	(void)state;
	need_fake("cuda");
	assert_non_null(r);
	run_scenario(r, "sc_devices", NULL);
	expect_pass(r, "sc_devices");
	assert_contains(r->err, "libdevcache: error: devcache_torch_malloc: torch device 2: "
				"no device 'cuda:2': the cuda backend has 2 devices; no device 'hip:2'");
	assert_contains(r->err, "libdevcache: error: devcache_torch_malloc: torch device -1: "
				"a device index cannot be negative");
	assert_int_equal(count(r->err, "libdevcache:"), 2);
	free(r);
}

static void free_null_size_zero_and_negative_sizes(void **state)
{
	struct run *r = malloc(sizeof *r);

	(void)state;
	need_fake("cuda");
	assert_non_null(r);
	run_scenario(r, "sc_sizes", NULL);
	expect_pass(r, "sc_sizes");
	assert_true(strncmp(r->err, "-- errors from here --\n", 23) == 0);
	assert_contains(r->err, "libdevcache: error: devcache_torch_malloc: torch device 0: "
				"invalid size -1\n");
	assert_contains(r->err, "libdevcache: error: devcache_torch_malloc: torch device 0: "
				"invalid size -4096\n");
	assert_contains(r->err, "libdevcache: error: devcache_torch_free: cuda:0: ");
	assert_contains(r->err, "was not allocated by devcache_alloc on this device");
	assert_int_equal(count(r->err, "libdevcache:"), 3);
	free(r);
}

static void errors_go_to_the_contexts_log_handler(void **state)
{
	(void)state;
	need_fake("cuda");
	quiet_pass("sc_log_handler", NULL);
}

static void four_threads_from_the_first_call(void **state)
{
	(void)state;
	need_fake("cuda");
	quiet_pass("sc_threads", NULL);
}

static void a_rocm_torch_gets_hip_devices(void **state)
{
	char options[16384];
	const char *env[] = {options, NULL};

	(void)state;
	need_fake("hip");
	snprintf(options, sizeof options,
		 "DEVCACHE_OPTIONS=log_level:error,backend_path:%s,backends:hip,hip_library:%s",
		 test_env("TEST_BACKENDS"), fake_path("hip"));
	quiet_pass("sc_hip", env);
}

static void the_shared_library_exports_the_entry_points(void **state)
{
	(void)state;
	need_fake("cuda");
	quiet_pass("sc_shared", NULL);
}

int main(int argc, char **argv)
{
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);

	if (n <= 0) {
		perror("readlink /proc/self/exe");
		return 1;
	}
	self[n] = '\0';
	if (argc == 3 && strcmp(argv[1], "--scenario") == 0) {
		for (size_t i = 0; i < sizeof scenarios / sizeof *scenarios; i++)
			if (strcmp(scenarios[i].name, argv[2]) == 0) {
				const struct CMUnitTest one[] = {scenarios[i]};

				return RUN_TAP(one);
			}
		fprintf(stderr, "%s: no scenario %s\n", argv[0], argv[2]);
		return 2;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sources_rank_pytorch_conf),
		cmocka_unit_test(malloc_and_free_on_both_devices),
		cmocka_unit_test(a_freed_block_is_reused_on_its_stream),
		cmocka_unit_test(statistics_through_the_torch_context),
		cmocka_unit_test(pytorch_conf_is_read_and_named),
		cmocka_unit_test(pytorch_no_cuda_memory_caching_turns_caching_off),
		cmocka_unit_test(devcache_options_override_pytorch_conf),
		cmocka_unit_test(a_bad_pytorch_conf_fails_every_call_said_once),
		cmocka_unit_test(device_indices_that_are_no_device),
		cmocka_unit_test(free_null_size_zero_and_negative_sizes),
		cmocka_unit_test(errors_go_to_the_contexts_log_handler),
		cmocka_unit_test(four_threads_from_the_first_call),
		cmocka_unit_test(a_rocm_torch_gets_hip_devices),
		cmocka_unit_test(the_shared_library_exports_the_entry_points),
	};

	return RUN_TAP(tests);
}
