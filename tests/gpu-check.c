/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* gpu-check.c - make check-gpu's checks of one device: models of every format byte-exact, a model over 4 GiB, record_stream held by the driver, expandable segments. */
#include "tap.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <devcache.h>

#include "model-writer.h"

#ifdef GPU_CHECK_CUDA
#include <cuda.h>
#endif

/* tests/check-gpu.sh runs this once a device: GPU_CHECK_DEVICE names it
 * ("cuda:0"), GPU_CHECK_OPTIONS gives the options that reach it (the build
 * tree's modules, and on the fakes the fake runtime), GPU_CHECK_BIG=0
 * leaves out the model over 4 GiB. */

#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)
#define CHUNK (64 * MIB)

TEST_TMPDIR_FIXTURE("gpu-check");

static devcache_ctx_t *open_device(const char *more, devcache_device_t **dev_p)
{
	char opts[16384];
	const char *m = more ? more : "";
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .options = opts};
	devcache_ctx_t *ctx;

	snprintf(opts, sizeof opts, "log_level:error,%s%s%s", test_env("GPU_CHECK_OPTIONS"),
		 *m ? "," : "", m);
	if (devcache_open_ex(&ctx, &args))
		fail_msg("devcache_open_ex(%s): %s", opts, devcache_last_error());
	if (devcache_device_get(ctx, test_env("GPU_CHECK_DEVICE"), dev_p)) {
		char why[1024];

		snprintf(why, sizeof why, "%s", devcache_last_error());
		devcache_close(ctx);
		fail_msg("%s: %s", test_env("GPU_CHECK_DEVICE"), why);
	}
	return ctx;
}

/* Every tensor of m read back from the device, CHUNK at a time, and
 * compared with its bytes in the file that holds it. */
static void check_against_files(devcache_device_t *dev, const devcache_model_t *m)
{
	const devcache_model_file_t *mf = devcache_model_file(m);
	size_t n_files = devcache_model_file_shard_count(mf);
	unsigned char *want = malloc(CHUNK), *got = malloc(CHUNK);
	int fds[16];

	assert_true(want && got);
	assert_true(n_files >= 1 && n_files <= 16);
	for (size_t k = 0; k < n_files; k++) {
		const char *path;
		uint64_t size;

		assert_int_equal(devcache_model_file_shard(mf, k, &path, &size), 0);
		if ((fds[k] = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			fail_msg("cannot open %s", path);
	}
	for (size_t i = 0; i < devcache_model_file_tensor_count(mf); i++) {
		devcache_tensor_info_t info;
		void *data;

		assert_int_equal(devcache_model_tensor_at(m, i, &info, &data), 0);
		assert_true(info.shard < n_files);
		for (uint64_t off = 0; off < info.size; off += CHUNK) {
			size_t len = info.size - off < CHUNK ? (size_t)(info.size - off) : CHUNK;

			assert_int_equal(pread(fds[info.shard], want, len, (off_t)(info.offset + off)),
					 (ssize_t)len);
			memset(got, 0, len);
			assert_int_equal(devcache_copy_to_host(dev, got, (char *)data + off, len, NULL),
					 0);
			if (memcmp(want, got, len) != 0)
				fail_msg("tensor %s differs from the file between bytes %llu and %llu",
					 info.name, (unsigned long long)off,
					 (unsigned long long)(off + len));
		}
	}
	for (size_t k = 0; k < n_files; k++)
		close(fds[k]);
	free(want);
	free(got);
}

static void load_and_check(devcache_ctx_t *ctx, devcache_device_t *dev, const char *path,
			   size_t n_tensors)
{
	devcache_model_t *m;

	if (devcache_model_load(ctx, path, dev, NULL, &m))
		fail_msg("%s: %s", path, devcache_last_error());
	assert_int_equal(devcache_model_file_tensor_count(devcache_model_file(m)), n_tensors);
	check_against_files(dev, m);
	devcache_model_release(m);
}

/* safetensors, Hugging Face shards, GGUF and a GGUF split, through a small
 * staging ring so that its chunks cut across tensors and files. */
static void every_format_round_trips(void **state)
{
	static const struct mw_tensor t[] = {
		{"model.embed_tokens.weight", 3000001, 0}, {"model.layers.0.attn.q", 4097, 0},
		{"model.layers.0.mlp.up", 1200003, 1},     {"model.layers.0.mlp.down", 1, 1},
		{"model.layers.1.attn.q", 65536, 1},       {"lm_head.weight", 2100001, 2},
	};
	static const struct mw_tensor g[] = {
		{"token_embd.weight", 3000000, 1}, {"blk.0.attn_q.weight", 4097, 1},
		{"blk.0.ffn_up.weight", 1000000, 2}, {"blk.0.ffn_down.weight", 1, 2},
		{"output.weight", 333333, 2},
	};
	const size_t nt = sizeof t / sizeof *t, ng = sizeof g / sizeof *g;
	devcache_device_t *dev;
	devcache_ctx_t *ctx = open_device("staging_buffer_size:1M,load_workers:3", &dev);
	char path[512], first[512];

	(void)state;
	snprintf(path, sizeof path, "%s/one.safetensors", dir);
	mw_safetensors(path, t, nt, 41, NULL);
	load_and_check(ctx, dev, path, nt);
	mw_sharded(dir, "sharded", t, nt, 3, 42, 0, path, sizeof path);
	load_and_check(ctx, dev, path, nt);
	snprintf(path, sizeof path, "%s/one.gguf", dir);
	mw_gguf(path, NULL, 0, g, ng, 43);
	load_and_check(ctx, dev, path, ng);
	mw_gguf_split(dir, "split", g, ng, 3, 44, 0, first, sizeof first);
	load_and_check(ctx, dev, first, ng);
	devcache_close(ctx);
}

/* A model over 4 GiB, one tensor of it over 4 GiB: where the device has
 * room for it and a gigabyte more, and the disk for the file. */
static void a_model_over_4_gib_round_trips(void **state)
{
	static const struct mw_tensor t[] = {
		{"big.weight", 4 * GIB + 4099, 0},
		{"after.weight", 300 * MIB + 1, 0},
	};
	const uint64_t need = 4 * GIB + 4099 + 300 * MIB + 1;
	const char *big = getenv("GPU_CHECK_BIG");
	devcache_device_info_t info;
	devcache_device_t *dev;
	struct statvfs vfs;
	char path[512];

	(void)state;
	if (big && strcmp(big, "0") == 0)
		skip_because("not asked for (GPU_CHECK_BIG=0)");
	devcache_ctx_t *ctx = open_device(NULL, &dev);
	assert_int_equal(devcache_device_info(dev, &info), 0);
	if (info.free_memory < need + GIB || info.max_alloc_size < t[0].size) {
		devcache_close(ctx);
		skip_because("%s has %.1f GiB free and allocates at most %.1f GiB at once: "
			     "%.1f GiB free and a %.1f GiB allocation needed",
			     info.id, (double)info.free_memory / GIB,
			     (double)info.max_alloc_size / GIB, (double)(need + GIB) / GIB,
			     (double)t[0].size / GIB);
	}
	if (statvfs(dir, &vfs) != 0 || (uint64_t)vfs.f_bavail * vfs.f_frsize < need + 256 * MIB) {
		devcache_close(ctx);
		skip_because("%.1f GiB free on the disk of %s: %.1f GiB needed for the file",
			     (double)vfs.f_bavail * vfs.f_frsize / GIB, dir,
			     (double)(need + 256 * MIB) / GIB);
	}
	snprintf(path, sizeof path, "%s/big.safetensors", dir);
	mw_safetensors(path, t, 2, 45, NULL);
	load_and_check(ctx, dev, path, 2);
	devcache_close(ctx);
}

/* ---- record_stream with the driver holding the other stream ---------------------------- */

/* The runtime the backend loaded: the first name of its library list
 * ("cuda_library") that is already loaded in this process. */
static void *runtime_loaded(devcache_ctx_t *ctx, const char *tunable)
{
	char list[4096], *save = NULL;
	void *lib = NULL;

	if (devcache_config_get(ctx, tunable, list, sizeof list, NULL))
		fail_msg("%s: %s", tunable, devcache_last_error());
	for (char *n = strtok_r(list, "[], ", &save); n && !lib; n = strtok_r(NULL, "[], ", &save))
		lib = dlopen(n, RTLD_NOW | RTLD_NOLOAD);
	return lib;
}

/* A failed assertion leaves the test at once, with stream b still held:
 * the driver would then wait on it for ever in the next test's first
 * synchronisation.  The watchdog lets b go after WATCHDOG_S seconds
 * unless the check has ended; on a failure it is left running, and so is
 * its memory (and the word it writes) left allocated. */
enum { WATCHDOG_S = 20 };
struct watchdog {
	pthread_mutex_t lock;
	pthread_cond_t done;
	bool ended;
	void (*release)(void *);
	void *arg;
	pthread_t thread;
};

static void *watchdog_main(void *p)
{
	struct watchdog *w = p;
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += WATCHDOG_S;
	pthread_mutex_lock(&w->lock);
	while (!w->ended && pthread_cond_timedwait(&w->done, &w->lock, &until) == 0)
		;
	if (!w->ended)
		w->release(w->arg);
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

static struct watchdog *watchdog_start(void (*release)(void *), void *arg)
{
	struct watchdog *w = calloc(1, sizeof *w);

	assert_non_null(w);
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->done, NULL);
	w->release = release;
	w->arg = arg;
	assert_int_equal(pthread_create(&w->thread, NULL, watchdog_main, w), 0);
	return w;
}

static void watchdog_end(struct watchdog *w)
{
	pthread_mutex_lock(&w->lock);
	w->ended = true;
	pthread_cond_signal(&w->done);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->done);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

/* The allocator's side, the same on every backend: a block used on stream
 * b and freed is not handed out again while b is held, and is once b has
 * been released and synchronised.  release() lets b go. */
static void check_held_block(devcache_device_t *dev, devcache_stream_t a, devcache_stream_t b,
			     void (*release)(void *), void *arg)
{
	enum { SIZE = 4 << 20 };
	void *p, *q, *r;
	devcache_stats_t st;
	struct watchdog *w = watchdog_start(release, arg);

	assert_int_equal(devcache_alloc(dev, SIZE, a, &p), 0);
	assert_int_equal(devcache_record_stream(dev, p, b), 0);
	assert_int_equal(devcache_free(dev, p), 0);
	assert_int_equal(devcache_alloc(dev, SIZE, a, &q), 0);
	watchdog_end(w);
	release(arg);
	if (q == p)
		fail_msg("the block freed while stream b was held was handed out again");
	assert_int_equal(devcache_stream_synchronize(dev, b), 0);
	assert_int_equal(devcache_free(dev, q), 0);
	assert_int_equal(devcache_alloc(dev, SIZE, a, &r), 0);
	assert_true(r == p || r == q);
	assert_int_equal(devcache_free(dev, r), 0);
	assert_int_equal(devcache_empty_cache(dev), 0);
	assert_int_equal(devcache_stats(dev, &st), 0);
	assert_int_equal(st.allocation[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(st.reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
}

static void release_word(void *arg)
{
	__atomic_store_n((volatile uint32_t *)arg, 1, __ATOMIC_RELEASE);
}

#ifdef GPU_CHECK_CUDA
#define SYMBOL_(name) #name
#define SYMBOL(name) SYMBOL_(name)
#define CU_USED(X)                                                                                 \
	X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)                    \
	X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuMemHostAlloc) X(cuMemFreeHost)                 \
	X(cuMemHostGetDevicePointer) X(cuStreamWaitValue32) X(cuGetErrorName)

struct cu {
#define FIELD(name) __typeof__(name) *name;
	CU_USED(FIELD)
#undef FIELD
};

static const char *cu_name(const struct cu *cu, CUresult e)
{
	const char *name = NULL;

	return cu->cuGetErrorName(e, &name) == CUDA_SUCCESS && name ? name : "?";
}

#define CU(call)                                                                                   \
	do {                                                                                       \
		CUresult e_ = cu.call;                                                             \
		if (e_ != CUDA_SUCCESS)                                                            \
			fail_msg("%s: %s", #call, cu_name(&cu, e_));                              \
	} while (0)

/* Stream b waits, in the driver, until a word of pinned host memory is at
 * least 1 (cuStreamWaitValue32); the test writes 1 to let it go.  NULL, or
 * why the check cannot be made here (the caller skips, once it has closed
 * its context: a skip leaves the function). */
static const char *held_on_cuda(devcache_ctx_t *ctx, devcache_device_t *dev, int ordinal)
{
	struct cu cu;
	void *lib = runtime_loaded(ctx, "cuda_library");
	CUdevice d;
	CUcontext pctx, popped;
	CUdeviceptr dword;
	uint32_t *word;
	devcache_stream_t a, b;

	if (!lib)
		fail_msg("the CUDA driver the backend loaded is not loaded");
#define RESOLVE(name)                                                                              \
	if (!(*(void **)&cu.name = dlsym(lib, SYMBOL(name))))                                      \
		fail_msg("the CUDA driver has no %s", SYMBOL(name));
	CU_USED(RESOLVE)
#undef RESOLVE
	CU(cuDeviceGet(&d, ordinal));
	CU(cuDevicePrimaryCtxRetain(&pctx, d));
	CU(cuCtxPushCurrent(pctx));
	CU(cuMemHostAlloc((void **)&word, sizeof *word,
			  CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
	*word = 0;
	CU(cuMemHostGetDevicePointer(&dword, word, 0));
	assert_int_equal(devcache_stream_create(dev, &a), 0);
	assert_int_equal(devcache_stream_create(dev, &b), 0);
	CUresult e = cu.cuStreamWaitValue32((CUstream)b, dword, 1, CU_STREAM_WAIT_VALUE_GEQ);
	if (e == CUDA_ERROR_NOT_SUPPORTED) {
		/* Drivers before 11.7's stream memory operations v2, or with
		 * them off: nothing here can hold a stream in the driver. */
		devcache_stream_destroy(dev, a);
		devcache_stream_destroy(dev, b);
		cu.cuMemFreeHost(word);
		cu.cuCtxPopCurrent(&popped);
		cu.cuDevicePrimaryCtxRelease(d);
		dlclose(lib);
		return "the driver cannot wait on memory (cuStreamWaitValue32: "
		       "CUDA_ERROR_NOT_SUPPORTED)";
	}
	if (e != CUDA_SUCCESS)
		fail_msg("cuStreamWaitValue32: %s", cu_name(&cu, e));
	check_held_block(dev, a, b, release_word, word);
	assert_int_equal(devcache_stream_destroy(dev, a), 0);
	assert_int_equal(devcache_stream_destroy(dev, b), 0);
	CU(cuMemFreeHost(word));
	CU(cuCtxPopCurrent(&popped));
	CU(cuDevicePrimaryCtxRelease(d));
	dlclose(lib);
	return NULL;
}
#endif

/* HIP's runtime, declared here from its documented C API: the backend
 * builds without HIP's headers where the runtime is absent. */
typedef int (*hip_set_device_fn)(int);
typedef int (*hip_host_malloc_fn)(void **, size_t, unsigned);
typedef int (*hip_host_free_fn)(void *);
typedef int (*hip_wait_fn)(void *stream, void *ptr, uint32_t value, unsigned flags, uint32_t mask);
#define HIP_HOST_MALLOC_MAPPED 0x2u
#define HIP_STREAM_WAIT_VALUE_GTE 0x0u

static const char *held_on_hip(devcache_ctx_t *ctx, devcache_device_t *dev, int ordinal)
{
	void *lib = runtime_loaded(ctx, "hip_library");
	hip_set_device_fn set_device;
	hip_host_malloc_fn host_malloc;
	hip_host_free_fn host_free;
	hip_wait_fn wait;
	uint32_t *word;
	devcache_stream_t a, b;
	int e;

	if (!lib)
		fail_msg("the HIP runtime the backend loaded is not loaded");
	*(void **)&wait = dlsym(lib, "hipStreamWaitValue32");
	*(void **)&set_device = dlsym(lib, "hipSetDevice");
	*(void **)&host_malloc = dlsym(lib, "hipHostMalloc");
	*(void **)&host_free = dlsym(lib, "hipHostFree");
	if (!wait) {
		dlclose(lib);
		return "the HIP runtime has no hipStreamWaitValue32";
	}
	if (!set_device || !host_malloc || !host_free)
		fail_msg("the HIP runtime lacks hipSetDevice, hipHostMalloc or hipHostFree");
	if ((e = set_device(ordinal)) != 0)
		fail_msg("hipSetDevice(%d): error %d", ordinal, e);
	if ((e = host_malloc((void **)&word, sizeof *word, HIP_HOST_MALLOC_MAPPED)) != 0)
		fail_msg("hipHostMalloc: error %d", e);
	*word = 0;
	assert_int_equal(devcache_stream_create(dev, &a), 0);
	assert_int_equal(devcache_stream_create(dev, &b), 0);
	if ((e = wait(b, word, 1, HIP_STREAM_WAIT_VALUE_GTE, UINT32_MAX)) != 0)
		fail_msg("hipStreamWaitValue32: error %d", e);
	check_held_block(dev, a, b, release_word, word);
	assert_int_equal(devcache_stream_destroy(dev, a), 0);
	assert_int_equal(devcache_stream_destroy(dev, b), 0);
	assert_int_equal(host_free(word), 0);
	dlclose(lib);
	return NULL;
}

/* The held-back record_stream check of test-conformance, with the other
 * stream held by the driver itself rather than by a fake's switch. */
static void record_stream_is_held_by_the_driver(void **state)
{
	devcache_device_info_t info;
	devcache_device_t *dev;
	devcache_ctx_t *ctx = open_device(NULL, &dev);

	const char *skip;

	(void)state;
	assert_int_equal(devcache_device_info(dev, &info), 0);
	if (strcmp(info.backend, "cuda") == 0) {
#ifdef GPU_CHECK_CUDA
		skip = held_on_cuda(ctx, dev, info.ordinal);
#else
		skip = "built without cuda.h (configure found no CUDA headers)";
#endif
	} else if (strcmp(info.backend, "hip") == 0) {
		skip = held_on_hip(ctx, dev, info.ordinal);
	} else {
		skip = "no wait on a host word that a program can queue on the backend's "
		       "streams (Level Zero's needs the backend's own context)";
	}
	devcache_close(ctx);
	if (skip)
		skip_because("%s: %s", info.id, skip);
}

/* ---- expandable segments ------------------------------------------------------------------ */

static void expandable_segments_grow(void **state)
{
	enum { A = 30 << 20, B = 50 << 20, C = 120 << 20 };
	devcache_device_t *dev;
	devcache_ctx_t *ctx = open_device("expandable_segments:True", &dev);
	devcache_device_info_t info;
	unsigned char *in = malloc(C), *out = malloc(C);
	char *snap = NULL;
	size_t snap_len = 0;
	FILE *f;
	void *p, *q, *r;
	devcache_stats_t s;

	(void)state;
	assert_int_equal(devcache_device_info(dev, &info), 0);
	if (!(info.caps & DEVCACHE_CAP_VMM)) {
		free(in);
		free(out);
		devcache_close(ctx);
		skip_because("%s cannot map memory (no virtual memory management)", info.id);
	}
	assert_true(in && out);
	for (size_t i = 0; i < C; i++)
		in[i] = (unsigned char)(i * 7 + (i >> 13));
	assert_int_equal(devcache_alloc(dev, A, NULL, &p), 0);
	assert_int_equal(devcache_free(dev, p), 0);
	assert_int_equal(devcache_alloc(dev, B, NULL, &q), 0);
	assert_ptr_equal(q, p); /* the mapping grew under the freed block */
	assert_int_equal(devcache_alloc(dev, C, NULL, &r), 0);
	assert_int_equal(devcache_copy_to_device(dev, r, in, C, NULL), 0);
	assert_int_equal(devcache_copy_to_device(dev, q, in, B, NULL), 0);
	assert_int_equal(devcache_copy_to_host(dev, out, r, C, NULL), 0);
	assert_memory_equal(in, out, C);
	assert_int_equal(devcache_copy_to_host(dev, out, q, B, NULL), 0);
	assert_memory_equal(in, out, B);
	/* The library says the segment is expandable. */
	assert_non_null(f = open_memstream(&snap, &snap_len));
	assert_int_equal(devcache_snapshot(dev, f), 0);
	assert_int_equal(fclose(f), 0);
	assert_contains(snap, "\"expandable\"");
	free(snap);
	assert_int_equal(devcache_free(dev, q), 0);
	assert_int_equal(devcache_free(dev, r), 0);
	assert_int_equal(devcache_empty_cache(dev), 0);
	assert_int_equal(devcache_stats(dev, &s), 0);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	free(in);
	free(out);
	devcache_close(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TMPDIR_TEST(every_format_round_trips),
		TMPDIR_TEST(a_model_over_4_gib_round_trips),
		cmocka_unit_test(record_stream_is_held_by_the_driver),
		cmocka_unit_test(expandable_segments_grow),
	};

	return RUN_TAP(tests);
}
