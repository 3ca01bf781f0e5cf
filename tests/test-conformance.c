/* test-conformance.c - one suite, every backend with a device: host, the test module, the HIP backend on the fake runtime, and the real runtimes where installed. */
#include "tap.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <devcache.h>

struct target {
	const char *label;
	const char *device;
	enum { T_HOST, T_MODULE, T_HIP_FAKE, T_HIP_REAL } kind;
	bool enforced; /* the device's capacity is enforced by its driver */
};

static const struct target targets[] = {
	{"host", "host", T_HOST, false},
	{"test module", "good:0", T_MODULE, true},
	{"HIP on the fake runtime", "hip:0", T_HIP_FAKE, true},
	{"HIP on the real runtime", "hip:0", T_HIP_REAL, false},
};

static char dir[256];

static bool file_exists(const char *path)
{
	return access(path, R_OK) == 0;
}

/* Opens a context for the target, or skips the test saying why. */
static devcache_ctx_t *open_target(const struct target *t, const char *more, devcache_device_t **dev_p)
{
	char opts[16384], path[4096];
	devcache_ctx_t *ctx;
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .options = opts};
	const char *m = more ? more : "";

	switch (t->kind) {
	case T_HOST:
		snprintf(opts, sizeof opts, "log_level:error,backend_path:/nonexistent%s%s",
			 *m ? "," : "", m);
		break;
	case T_MODULE:
		snprintf(opts, sizeof opts, "log_level:error,backend_path:%s,backends:good%s%s",
			 test_env("TEST_MODULES"), *m ? "," : "", m);
		break;
	case T_HIP_FAKE:
	case T_HIP_REAL:
		snprintf(path, sizeof path, "%s/hip.so", test_env("TEST_BACKENDS"));
		if (!file_exists(path))
			skip_because("the HIP backend is not built (configure found no HIP headers)");
		if (t->kind == T_HIP_FAKE) {
			snprintf(path, sizeof path, "%s/libfake-hip.so", test_env("TEST_FAKES"));
			if (!file_exists(path))
				skip_because("the fake HIP runtime is not built");
			snprintf(opts, sizeof opts,
				 "log_level:error,backend_path:%s,backends:hip,hip_library:%s%s%s",
				 test_env("TEST_BACKENDS"), path, *m ? "," : "", m);
		} else {
			snprintf(opts, sizeof opts, "log_level:error,backend_path:%s,backends:hip%s%s",
				 test_env("TEST_BACKENDS"), *m ? "," : "", m);
		}
		break;
	}
	if (devcache_open_ex(&ctx, &args))
		fail_msg("devcache_open_ex(%s): %s", opts, devcache_last_error());
	if (devcache_device_get(ctx, t->device, dev_p)) {
		/* A backend without a device says why in the vendor's words. */
		char why[1024] = "";
		for (size_t i = 0; i < devcache_backend_count(ctx); i++) {
			devcache_backend_info_t b;

			if (devcache_backend_info(ctx, i, &b) == 0 && strcmp(b.name, "hip") == 0)
				snprintf(why, sizeof why, "%s", b.reason);
		}
		devcache_close(ctx);
		skip_because("%s: no device %s: %s", t->label, t->device, why);
	}
	return ctx;
}

/* The fake runtime's controls, found in the copy the backend loaded. */
struct fake_hip {
	void *lib;
	void (*inject)(const char *, unsigned, int);
	size_t (*live)(void);
};

static bool fake_hip(struct fake_hip *f)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/libfake-hip.so", test_env("TEST_FAKES"));
	if (!(f->lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD)))
		return false;
	*(void **)&f->inject = dlsym(f->lib, "fake_hip_fail");
	*(void **)&f->live = dlsym(f->lib, "fake_hip_live");
	return f->inject && f->live;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)((i * 131 + seed * 7 + (i >> 12)) & 0xff);
}

/* ---- the checks ---------------------------------------------------------------- */

static void round_trips_are_byte_exact(void **state)
{
	const struct target *t = *state;
	static const size_t sizes[] = {1, 511, 4096, (1 << 20) + 3, 20 << 20};
	devcache_device_t *dev;
	devcache_ctx_t *ctx = open_target(t, NULL, &dev);

	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
		unsigned char *in = malloc(sizes[i]), *out = malloc(sizes[i]);
		void *d = NULL;

		assert_non_null(in);
		assert_non_null(out);
		fill(in, sizes[i], (unsigned)i);
		memset(out, 0, sizes[i]);
		assert_int_equal(devcache_alloc(dev, sizes[i], NULL, &d), 0);
		assert_int_equal(devcache_copy_to_device(dev, d, in, sizes[i], NULL), 0);
		assert_int_equal(devcache_copy_to_host(dev, out, d, sizes[i], NULL), 0);
		assert_memory_equal(in, out, sizes[i]);
		assert_int_equal(devcache_free(dev, d), 0);
		free(in);
		free(out);
	}
	devcache_stats_t s;
	assert_int_equal(devcache_stats(dev, &s), 0);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].current, 0);
	devcache_close(ctx);
}

static void streams_keep_their_order(void **state)
{
	const struct target *t = *state;
	devcache_device_t *dev;
	devcache_ctx_t *ctx = open_target(t, NULL, &dev);
	devcache_stream_t s1, s2;
	enum { N = 3 << 20 };
	unsigned char *a = malloc(N), *b = malloc(N), *out = malloc(N);
	void *d, *e;

	assert_true(a && b && out);
	fill(a, N, 1);
	fill(b, N, 2);
	assert_int_equal(devcache_stream_create(dev, &s1), 0);
	assert_int_equal(devcache_stream_create(dev, &s2), 0);
	assert_int_equal(devcache_alloc(dev, N, s1, &d), 0);
	/* Two copies into one block on one stream: the second wins. */
	assert_int_equal(devcache_copy_to_device(dev, d, a, N, s1), 0);
	assert_int_equal(devcache_copy_to_device(dev, d, b, N, s1), 0);
	assert_int_equal(devcache_copy_to_host(dev, out, d, N, s1), 0);
	assert_memory_equal(out, b, N);
	/* Used on s2 too: once freed, reused only after s2's work. */
	assert_int_equal(devcache_record_stream(dev, d, s2), 0);
	assert_int_equal(devcache_free(dev, d), 0);
	assert_int_equal(devcache_stream_synchronize(dev, s2), 0);
	assert_int_equal(devcache_alloc(dev, N, s1, &e), 0);
	assert_int_equal(devcache_copy_to_device(dev, e, a, N, s1), 0);
	assert_int_equal(devcache_copy_to_host(dev, out, e, N, s1), 0);
	assert_memory_equal(out, a, N);
	assert_int_equal(devcache_free(dev, e), 0);
	assert_int_equal(devcache_stream_destroy(dev, s1), 0);
	assert_int_equal(devcache_stream_destroy(dev, s2), 0);
	free(a);
	free(b);
	free(out);
	devcache_close(ctx);
}

static void out_of_memory_is_a_clean_error(void **state)
{
	const struct target *t = *state;
	devcache_device_t *dev;
	/* A cap of a few tens of MiB makes every device run out the same way. */
	devcache_ctx_t *ctx = open_target(t, "memory_fraction:0.02", &dev);
	void *p[4096];
	size_t n = 0;
	int rc = 0;

	while (n < sizeof p / sizeof *p && (rc = devcache_alloc(dev, 1 << 20, NULL, &p[n])) == 0)
		n++;
	assert_int_equal(rc, DEVCACHE_ENOMEM);
	assert_contains(devcache_last_error(), t->device);
	assert_contains(devcache_last_error(), "out of memory");
	assert_true(n > 0);
	devcache_stats_t s;
	devcache_stats(dev, &s);
	assert_true(s.num_ooms >= 1);
	while (n)
		assert_int_equal(devcache_free(dev, p[--n]), 0);
	assert_int_equal(devcache_empty_cache(dev), 0);
	devcache_stats(dev, &s);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	/* And the device serves again. */
	assert_int_equal(devcache_alloc(dev, 1 << 20, NULL, &p[0]), 0);
	assert_int_equal(devcache_free(dev, p[0]), 0);
	devcache_close(ctx);
}

/* A safetensors file of U8 tensors, and the check of a loaded model. */
static void write_model(const char *path)
{
	static const size_t sizes[] = {70000, 1, 4096, 300000, 3};
	char header[1024], *h = header;
	uint64_t off = 0;
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	h += sprintf(h, "{\"__metadata__\":{\"format\":\"pt\"}");
	for (size_t i = 0; i < 5; i++) {
		h += sprintf(h, ",\"t%zu\":{\"dtype\":\"U8\",\"shape\":[%zu],\"data_offsets\":[%llu,%llu]}",
			     i, sizes[i], (unsigned long long)off, (unsigned long long)(off + sizes[i]));
		off += sizes[i];
	}
	h += sprintf(h, "}");
	uint64_t hl = (uint64_t)(h - header);
	for (int i = 0; i < 8; i++)
		fputc((int)((hl >> (8 * i)) & 0xff), f);
	fwrite(header, 1, hl, f);
	for (uint64_t i = 0; i < off; i++)
		fputc((int)((i * 13 + 5) & 0xff), f);
	assert_int_equal(fclose(f), 0);
}

static void check_model(devcache_device_t *dev, devcache_model_t *m, const char *path)
{
	const devcache_model_file_t *mf = devcache_model_file(m);
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	for (size_t i = 0; i < devcache_model_file_tensor_count(mf); i++) {
		devcache_tensor_info_t info;
		void *data;
		unsigned char *want = malloc(1 << 20), *got = malloc(1 << 20);

		assert_int_equal(devcache_model_tensor_at(m, i, &info, &data), 0);
		assert_true(info.size <= (1 << 20));
		assert_int_equal(pread(fd, want, info.size, (off_t)info.offset), (ssize_t)info.size);
		assert_int_equal(devcache_copy_to_host(dev, got, data, info.size, NULL), 0);
		assert_memory_equal(want, got, info.size);
		free(want);
		free(got);
	}
	close(fd);
}

static void a_model_uploads_byte_exact(void **state)
{
	const struct target *t = *state;
	devcache_device_t *dev;
	devcache_ctx_t *ctx = open_target(t, "staging_buffer_size:64K", &dev);
	char path[512];
	devcache_model_t *m;

	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	write_model(path);
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
	check_model(dev, m, path);
	devcache_model_release(m);
	devcache_close(ctx);
}

/* Every injected driver failure: a clean error, nothing left behind, and
 * a context that works after. */
static void injected_faults_leave_nothing(void **state)
{
	const struct target *t = *state;
	static const struct {
		const char *function;
		unsigned nth;
	} faults[] = {
		{"hipMalloc", 1 | 0x80000000u},   {"hipMemcpyAsync", 2},
		{"hipHostMalloc", 1 | 0x80000000u}, {"hipEventCreateWithFlags", 1},
		{"hipEventRecord", 2},             {"hipStreamSynchronize", 1},
	};
	struct fake_hip f = {0};
	devcache_device_t *dev;
	char path[512];

	if (t->kind != T_HIP_FAKE)
		skip_because("fault injection needs a fake runtime");
	devcache_ctx_t *ctx = open_target(t, "staging_buffer_size:64K", &dev);
	assert_true(fake_hip(&f));
	size_t baseline = f.live();
	snprintf(path, sizeof path, "%s/faults.safetensors", dir);
	write_model(path);
	for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) {
		devcache_model_t *m = NULL;

		assert_int_equal(devcache_empty_cache(dev), 0);
		assert_int_equal(devcache_host_empty_cache(dev), 0);
		f.inject(faults[i].function, faults[i].nth, 2 /* hipErrorOutOfMemory */);
		int rc = devcache_model_load(ctx, path, dev, NULL, &m);
		f.inject(faults[i].function, 0, 0);
		if (rc == 0)
			fail_msg("%s: the load succeeded", faults[i].function);
		assert_null(m);
		assert_contains(devcache_last_error(), "out of memory");
		assert_int_equal(devcache_empty_cache(dev), 0);
		assert_int_equal(devcache_host_empty_cache(dev), 0);
		if (f.live() != baseline)
			fail_msg("%s: %zu runtime objects live, %zu before", faults[i].function,
				 f.live(), baseline);
		assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
		check_model(dev, m, path);
		devcache_model_release(m);
		assert_int_equal(devcache_cache_evict_all(ctx), 1);
	}
	devcache_close(ctx);
	/* Closing gave everything back to the runtime. */
	assert_int_equal(f.live(), 0);
	dlclose(f.lib);
}

static int setup(void **state)
{
	(void)state;
	return test_tmpdir_make(dir, sizeof dir, "conformance");
}

static int teardown(void **state)
{
	(void)state;
	return test_tmpdir_remove(dir);
}

#define FOR_EACH_TARGET(test)                                                              \
	cmocka_unit_test_prestate_setup_teardown(test, setup, teardown, (void *)&targets[0]), \
	cmocka_unit_test_prestate_setup_teardown(test, setup, teardown, (void *)&targets[1]), \
	cmocka_unit_test_prestate_setup_teardown(test, setup, teardown, (void *)&targets[2]), \
	cmocka_unit_test_prestate_setup_teardown(test, setup, teardown, (void *)&targets[3])

int main(void)
{
	const struct CMUnitTest tests[] = {
		FOR_EACH_TARGET(round_trips_are_byte_exact),
		FOR_EACH_TARGET(streams_keep_their_order),
		FOR_EACH_TARGET(out_of_memory_is_a_clean_error),
		FOR_EACH_TARGET(a_model_uploads_byte_exact),
		FOR_EACH_TARGET(injected_faults_leave_nothing),
	};

	return RUN_TAP(tests);
}
