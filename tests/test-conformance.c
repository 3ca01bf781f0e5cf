/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-conformance.c - one suite, every backend with a device: host, the test module, each vendor backend on its fake runtime, and the real runtimes where installed. */
#include "tap.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <devcache.h>

#include "model-writer.h"

struct target {
	const char *label;
	const char *device;
	enum { T_HOST, T_MODULE, T_FAKE, T_REAL } kind;
	bool enforced;       /* the device's capacity is enforced by its driver */
	const char *backend; /* T_FAKE, T_REAL: "cuda", "hip", "ze" */
	const char *fake;    /* T_FAKE: the fake runtime, in TEST_FAKES */
	const char *library; /* T_REAL: the variable naming the library, if not the default */
};

static const struct target targets[] = {
	{"host", "host", T_HOST, false, NULL, NULL, NULL},
	{"test module", "good:0", T_MODULE, true, NULL, NULL, NULL},
	{"CUDA on the fake driver", "cuda:0", T_FAKE, true, "cuda", "libfake-cuda.so", NULL},
	{"CUDA on the real driver", "cuda:0", T_REAL, false, "cuda", NULL, NULL},
	{"HIP on the fake runtime", "hip:0", T_FAKE, true, "hip", "libfake-hip.so", NULL},
	{"HIP on the fake ROCm 6 runtime", "hip:0", T_FAKE, true, "hip", "libfake-hip6.so", NULL},
	{"HIP on the real runtime", "hip:0", T_REAL, false, "hip", NULL, NULL},
	{"Level Zero on the fake loader", "ze:0", T_FAKE, true, "ze", "libfake-ze.so", NULL},
	{"Level Zero on the real loader", "ze:0", T_REAL, false, "ze", NULL, NULL},
	/* Last, after every check on the real driver: the stub's soname is
	 * libcuda.so.1, so once it is loaded, dlopen("libcuda.so.1") finds
	 * it instead of looking for the driver. */
	{"CUDA on the toolkit's stub driver", "cuda:0", T_REAL, false, "cuda", NULL, "TEST_CUDA_STUB"},
};

/* The backend modules are in the directories of TEST_BACKENDS. */
static bool backend_built(const char *name)
{
	char *dirs = strdup(test_env("TEST_BACKENDS")), *save = NULL, path[4096];
	bool found = false;

	assert_non_null(dirs);
	for (char *d = strtok_r(dirs, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
		snprintf(path, sizeof path, "%s/%s.so", d, name);
		found = access(path, R_OK) == 0;
	}
	free(dirs);
	return found;
}

TEST_TMPDIR_FIXTURE("conformance");

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
	case T_FAKE:
	case T_REAL:
		if (!backend_built(t->backend))
			skip_because("the %s backend is not built (configure found no headers for it)",
				     t->backend);
		/* The runtime library: the fake's, one a variable names, or the
		 * backend's default ("" in the options). */
		const char *lib = "";
		if (t->kind == T_FAKE) {
			snprintf(path, sizeof path, "%s/%s", test_env("TEST_FAKES"), t->fake);
			if (!file_exists(path))
				skip_because("the fake runtime %s is not built", t->fake);
			lib = path;
		} else if (t->library) {
			lib = getenv(t->library);
			if (!lib || !*lib)
				skip_because("%s: configure found no such library", t->label);
		}
		snprintf(opts, sizeof opts, "log_level:error,backend_path:%s,backends:%s%s%s%s%s%s%s",
			 test_env("TEST_BACKENDS"), t->backend, *lib ? "," : "", *lib ? t->backend : "",
			 *lib ? "_library:" : "", lib, *m ? "," : "", m);
		break;
	}
	if (devcache_open_ex(&ctx, &args))
		fail_msg("devcache_open_ex(%s): %s", opts, devcache_last_error());
	if (devcache_device_get(ctx, t->device, dev_p)) {
		/* A backend without a device says why in the vendor's words. */
		char why[1024] = "";
		for (size_t i = 0; i < devcache_backend_count(ctx); i++) {
			devcache_backend_info_t b;

			if (devcache_backend_info(ctx, i, &b) == 0 && t->backend &&
			    strcmp(b.name, t->backend) == 0)
				snprintf(why, sizeof why, "%s", b.reason);
		}
		devcache_close(ctx);
		/* A fake always has devices: none is a failure, not a reason. */
		if (t->kind == T_FAKE)
			fail_msg("%s: no device %s: %s", t->label, t->device, why);
		skip_because("%s: no device %s: %s", t->label, t->device, why);
	}
	return ctx;
}

/* The fake runtime's controls (fake_hip_fail, fake_ze_live, ...), found
 * in the copy the backend loaded. */
struct fake {
	void *lib;
	void (*inject)(const char *, unsigned, int);
	size_t (*live)(void);
};

static bool fake_controls(const struct target *t, struct fake *f)
{
	char path[4096], name[64];

	snprintf(path, sizeof path, "%s/%s", test_env("TEST_FAKES"), t->fake);
	if (!(f->lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD)))
		return false;
	snprintf(name, sizeof name, "fake_%s_fail", t->backend);
	*(void **)&f->inject = dlsym(f->lib, name);
	snprintf(name, sizeof name, "fake_%s_live", t->backend);
	*(void **)&f->live = dlsym(f->lib, name);
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

/* Work queued on another stream holds a freed block back: with the
 * driver's events held pending, the block is not handed out again; once
 * they complete, it is.  Needs a driver that can hold its events. */
static void record_stream_waits_for_the_other_stream(void **state)
{
	const struct target *t = *state;
	char path[4096], name[64];
	void (*hold)(int) = NULL;
	void *lib = NULL;

	if (t->kind == T_HOST)
		skip_because("events of the host complete at once");
	if (t->kind == T_REAL)
		skip_because("%s: holding events pending needs a fake driver", t->label);
	devcache_device_t *dev;
	devcache_ctx_t *ctx = open_target(t, NULL, &dev);
	if (t->kind == T_MODULE) {
		snprintf(path, sizeof path, "%s/good.so", test_env("TEST_MODULES"));
		snprintf(name, sizeof name, "fake_hold_events");
	} else {
		snprintf(path, sizeof path, "%s/%s", test_env("TEST_FAKES"), t->fake);
		snprintf(name, sizeof name, "fake_%s_hold_events", t->backend);
	}
	assert_non_null(lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD));
	assert_non_null(*(void **)&hold = dlsym(lib, name));

	devcache_stream_t s1, s2;
	void *p, *q, *r;
	assert_int_equal(devcache_stream_create(dev, &s1), 0);
	assert_int_equal(devcache_stream_create(dev, &s2), 0);
	assert_int_equal(devcache_alloc(dev, 4 << 20, s1, &p), 0);
	assert_int_equal(devcache_record_stream(dev, p, s2), 0);
	hold(1);
	assert_int_equal(devcache_free(dev, p), 0);
	assert_int_equal(devcache_alloc(dev, 4 << 20, s1, &q), 0);
	assert_ptr_not_equal(q, p); /* s2 may still be using p */
	hold(0);
	assert_int_equal(devcache_free(dev, q), 0);
	assert_int_equal(devcache_alloc(dev, 4 << 20, s1, &r), 0);
	assert_true(r == p || r == q); /* both are free again */
	assert_int_equal(devcache_free(dev, r), 0);
	devcache_stats_t st;
	devcache_stats(dev, &st);
	assert_int_equal(st.allocation[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(devcache_empty_cache(dev), 0);
	devcache_stats(dev, &st);
	assert_int_equal(st.reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(devcache_stream_destroy(dev, s1), 0);
	assert_int_equal(devcache_stream_destroy(dev, s2), 0);
	devcache_close(ctx);
	dlclose(lib);
}

/* Expandable segments, where the device can map memory: growth in place,
 * bytes intact, everything unmapped by empty_cache. */
static void expandable_segments_where_the_device_maps(void **state)
{
	const struct target *t = *state;
	devcache_device_t *dev;
	devcache_ctx_t *ctx = open_target(t, "expandable_segments:True", &dev);
	devcache_device_info_t info;
	enum { A = 30 << 20, B = 50 << 20 };
	unsigned char *in = malloc(B), *out = malloc(B);
	void *p, *q;

	assert_int_equal(devcache_device_info(dev, &info), 0);
	if (!(info.caps & DEVCACHE_CAP_VMM)) {
		free(in);
		free(out);
		devcache_close(ctx);
		/* Every fake maps memory: one that does not is a failure. */
		if (t->kind == T_FAKE)
			fail_msg("%s: the device cannot map memory", t->label);
		skip_because("%s: the device cannot map memory", t->label);
	}
	assert_true(in && out);
	fill(in, B, 9);
	assert_int_equal(devcache_alloc(dev, A, NULL, &p), 0);
	assert_int_equal(devcache_free(dev, p), 0);
	assert_int_equal(devcache_alloc(dev, B, NULL, &q), 0);
	assert_ptr_equal(q, p); /* the mapping grew under the freed block */
	assert_int_equal(devcache_copy_to_device(dev, q, in, B, NULL), 0);
	assert_int_equal(devcache_copy_to_host(dev, out, q, B, NULL), 0);
	assert_memory_equal(in, out, B);
	assert_int_equal(devcache_free(dev, q), 0);
	assert_int_equal(devcache_empty_cache(dev), 0);
	devcache_stats_t s;
	devcache_stats(dev, &s);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	/* Two map operations, one unmap of the one free block: PyTorch's counts. */
	assert_int_equal(s.num_device_alloc, 2);
	assert_int_equal(s.num_device_free, 1);
	free(in);
	free(out);
	devcache_close(ctx);
}

/* Stitching, where the device can map: under a 200 MiB cap, with every
 * other 8 MiB block freed, a 100 MiB request is more than PyTorch's policy
 * serves (140 MiB mapped in 20 MiB pages, and a segment's 100 more) but
 * not more than the free pages; it gets them, and every byte stays put. */
static void stitching_where_the_device_maps(void **state)
{
	const struct target *t = *state;
	devcache_device_t *dev;
	devcache_device_info_t info;
	devcache_ctx_t *ctx = open_target(t, "expandable_segments:True", &dev);
	enum { N = 16, BLOCK = 8 << 20, BIG = 100 << 20 };
	unsigned char *in = malloc(BIG), *out = malloc(BIG);
	void *p[N], *q;
	char opts[256];

	assert_true(in && out);
	assert_int_equal(devcache_device_info(dev, &info), 0);
	devcache_close(ctx);
	if (!(info.caps & DEVCACHE_CAP_VMM) || info.total_memory < 1u << 30) {
		free(in);
		free(out);
		if (t->kind == T_FAKE && !(info.caps & DEVCACHE_CAP_VMM))
			fail_msg("%s: the device cannot map memory", t->label);
		skip_because("%s: the device cannot map memory, or has less than 1 GiB",
			     t->label);
	}
	snprintf(opts, sizeof opts, "expandable_segments:True,memory_fraction:%.17g",
		 (double)(200 << 20) / (double)info.total_memory);
	ctx = open_target(t, opts, &dev);
	for (int i = 0; i < N; i++) {
		fill(in, BLOCK, (unsigned)i);
		assert_int_equal(devcache_alloc(dev, BLOCK, NULL, &p[i]), 0);
		assert_int_equal(devcache_copy_to_device(dev, p[i], in, BLOCK, NULL), 0);
	}
	for (int i = 0; i < N; i += 2)
		assert_int_equal(devcache_free(dev, p[i]), 0);
	fill(in, BIG, 99);
	assert_int_equal(devcache_alloc(dev, BIG, NULL, &q), 0);
	assert_int_equal(devcache_copy_to_device(dev, q, in, BIG, NULL), 0);
	assert_int_equal(devcache_copy_to_host(dev, out, q, BIG, NULL), 0);
	assert_memory_equal(in, out, BIG);
	for (int i = 1; i < N; i += 2) {
		fill(in, BLOCK, (unsigned)i);
		assert_int_equal(devcache_copy_to_host(dev, out, p[i], BLOCK, NULL), 0);
		assert_memory_equal(in, out, BLOCK);
		assert_int_equal(devcache_free(dev, p[i]), 0);
	}
	devcache_stats_t s;
	devcache_stats(dev, &s);
	assert_int_equal(s.num_stitches, 1);
	assert_int_equal(s.num_ooms, 0);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 164 << 20);
	assert_int_equal(devcache_free(dev, q), 0);
	assert_int_equal(devcache_empty_cache(dev), 0);
	devcache_stats(dev, &s);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	free(in);
	free(out);
	devcache_close(ctx);
}

/* A safetensors file of U8 tensors, and the check of a loaded model. */
static void write_model(const char *path)
{
	static const struct mw_tensor t[] = {{"t0", 70000, 0}, {"t1", 1, 0}, {"t2", 4096, 0},
					     {"t3", 300000, 0}, {"t4", 3, 0}};
	const struct mw_opts o = {.seed = 5, .metadata_json = "{\"format\":\"pt\"}",
				  .flags = MW_NO_PAD};

	mw_safetensors_opts(path, t, sizeof t / sizeof *t, &o);
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

/* A set of several files loaded as one model: every tensor, in whichever
 * shard, byte-exact on the device (the staging ring's chunks cut across
 * tensors and shards). */
static void check_set(devcache_device_t *dev, devcache_model_t *m, size_t n, unsigned seed)
{
	const devcache_model_file_t *mf = devcache_model_file(m);

	assert_int_equal(devcache_model_file_tensor_count(mf), n);
	assert_int_equal(devcache_model_file_shard_count(mf), 3);
	for (size_t i = 0; i < n; i++) {
		devcache_tensor_info_t info;
		void *data;
		unsigned char *got;

		assert_int_equal(devcache_model_tensor_at(m, i, &info, &data), 0);
		assert_non_null(got = malloc(info.size ? info.size : 1));
		memset(got, 0, info.size);
		if (info.size)
			assert_int_equal(devcache_copy_to_host(dev, got, data, info.size, NULL), 0);
		mw_check(info.name, got, info.size, seed);
		free(got);
	}
}

static void a_model_set_uploads_byte_exact(void **state)
{
	/* Three shards, the third holding one tensor. */
	static const struct mw_tensor shards[] = {
		{"model.embed_tokens.weight", 70000, 0}, {"model.layers.0.attn.q", 4097, 0},
		{"model.layers.0.mlp.up", 200003, 1},    {"model.layers.0.mlp.down", 1, 1},
		{"model.layers.1.attn.q", 65536, 1},     {"lm_head.weight", 100001, 2},
	};
	/* gguf-split --no-tensor-first-split: the first shard holds metadata only. */
	static const struct mw_tensor split[] = {
		{"token_embd.weight", 70000, 1}, {"blk.0.attn_q.weight", 4097, 1},
		{"blk.0.ffn_up.weight", 100000, 2}, {"blk.0.ffn_down.weight", 1, 2},
		{"output.weight", 33333, 2},
	};
	const struct target *t = *state;
	devcache_device_t *dev;
	devcache_ctx_t *ctx = open_target(t, "staging_buffer_size:64K,load_workers:3", &dev);
	char idx[512], first[512];
	devcache_model_t *m;

	mw_sharded(dir, "model", shards, sizeof shards / sizeof *shards, 3, 31, 0, idx, sizeof idx);
	mw_gguf_split(dir, "split", split, sizeof split / sizeof *split, 3, 32, 0, first,
		      sizeof first);
	if (devcache_model_load(ctx, idx, dev, NULL, &m))
		fail_msg("%s: %s", idx, devcache_last_error());
	check_set(dev, m, sizeof shards / sizeof *shards, 31);
	devcache_model_release(m);
	if (devcache_model_load(ctx, first, dev, NULL, &m))
		fail_msg("%s: %s", first, devcache_last_error());
	check_set(dev, m, sizeof split / sizeof *split, 32);
	devcache_model_release(m);
	devcache_close(ctx);
}

/* The driver's free memory on dev. */
static uint64_t driver_free(devcache_device_t *dev)
{
	devcache_device_info_t info;

	assert_int_equal(devcache_device_info(dev, &info), 0);
	return info.free_memory;
}

/* Three models of 12 MiB (each in a segment of its own) loaded within a
 * budget of two, which evicts one to RAM, then evict_all: the driver has
 * its memory back, within one segment (2 MiB), with keep_freed_vram
 * false (the default), also from expandable segments, and only after
 * devcache_empty_cache() with it true. */
static void evicted_models_give_memory_back(void **state)
{
	const struct target *t = *state;
	static const char *const opts[] = {"max_cache_vram:25M", "max_cache_vram:25M,keep_freed_vram:true",
					   "max_cache_vram:25M,expandable_segments:True"};
	char path[3][512];

	if (t->kind == T_HOST)
		skip_because("host placements are mappings of the files, not device memory");
	for (int i = 0; i < 3; i++) {
		struct mw_tensor tt = {"w", 12u << 20, 0};
		struct mw_opts o = {.seed = 40 + (unsigned)i, .flags = MW_NO_PAD};

		snprintf(path[i], sizeof path[i], "%s/give-back-%d.safetensors", dir, i);
		mw_safetensors_opts(path[i], &tt, 1, &o);
	}
	for (int run = 0; run < 3; run++) {
		bool keep = run == 1;
		/* An expandable segment maps large blocks in PyTorch's 20 MiB unit. */
		const uint64_t seg = run == 2 ? 20u << 20 : 2u << 20;
		devcache_device_t *dev;
		devcache_ctx_t *ctx = open_target(t, opts[run], &dev);
		uint64_t before = driver_free(dev);
		devcache_model_t *m;

		for (int i = 0; i < 3; i++) {
			assert_int_equal(devcache_model_load(ctx, path[i], dev, NULL, &m), 0);
			devcache_model_release(m);
		}
		uint64_t used, budget;
		assert_int_equal(devcache_cache_device_usage(ctx, dev, &used, &budget), 0);
		assert_true(used <= budget);
		/* One model evicted to RAM: 12 MiB back already. */
		if (!keep)
			assert_true(driver_free(dev) + 2 * (12u << 20) + seg >= before);
		assert_int_equal(devcache_cache_evict_all(ctx), 3);
		if (keep) {
			assert_true(driver_free(dev) + (24u << 20) <= before);
			assert_int_equal(devcache_empty_cache(dev), 0);
		}
		assert_true(driver_free(dev) + seg >= before);
		devcache_close(ctx);
	}
}

static void check_budget(devcache_ctx_t *ctx, devcache_device_t *dev)
{
	devcache_cache_device_stats_t s;

	assert_int_equal(devcache_cache_device_stats(ctx, dev, &s), 0);
	if (s.used > s.budget || s.peak_used > s.budget)
		fail_msg("the cache holds %llu bytes (peak %llu), over its budget of %llu",
			 (unsigned long long)s.used, (unsigned long long)s.peak_used,
			 (unsigned long long)s.budget);
}

/* A model manager's loop over three models larger together than the
 * budget: make room for the next with its working memory, load it, lock
 * it with that headroom, offload another; the budget holds after every
 * step, and after evict_all the driver has its memory back. */
static void a_manager_loop_keeps_the_budget(void **state)
{
	const struct target *t = *state;
	static const size_t sizes[] = {1u << 20, 3u << 19, 2u << 20};
	const uint64_t working = 512u << 10, seg = 2u << 20;
	char path[3][512];
	devcache_device_t *dev;
	devcache_ctx_t *ctx = open_target(t, "max_cache_vram:3M,max_cache_ram:4M", &dev);
	bool host = t->kind == T_HOST;
	uint64_t before = driver_free(dev);

	for (int i = 0; i < 3; i++) {
		struct mw_tensor tt = {"w", sizes[i], 0};
		struct mw_opts o = {.seed = 60 + (unsigned)i, .flags = MW_NO_PAD};

		snprintf(path[i], sizeof path[i], "%s/manager-%d.safetensors", dir, i);
		mw_safetensors_opts(path[i], &tt, 1, &o);
	}
	for (int step = 0; step < 9; step++) {
		int k = step % 3;
		devcache_model_t *m;

		assert_int_equal(devcache_cache_make_room(ctx, dev, sizes[k] + working, NULL), 0);
		check_budget(ctx, dev);
		assert_int_equal(devcache_model_load(ctx, path[k], dev, NULL, &m), 0);
		check_budget(ctx, dev);
		assert_int_equal(devcache_model_lock(m, working), 0);
		check_budget(ctx, dev);
		devcache_model_release(m);
		devcache_model_release(m);
		if (!host) {
			int rc = devcache_cache_offload(ctx, path[(k + 2) % 3], dev);

			assert_true(rc == 0 || rc == DEVCACHE_ENOENT);
			check_budget(ctx, dev);
		}
	}
	devcache_cache_stats_t s;
	assert_int_equal(devcache_cache_stats(ctx, &s), 0);
	assert_true(s.ram_peak <= s.ram_budget);
	assert_true(devcache_cache_evict_all(ctx) >= 1);
	if (!host)
		assert_true(driver_free(dev) + seg >= before);
	devcache_close(ctx);
}

/* devcache_model_file_read_tensors(): the staging ring into device memory
 * the caller allocated, byte-exact, with no cache entry. */
static void tensors_stream_into_caller_memory(void **state)
{
	const struct target *t = *state;
	devcache_device_t *dev;
	devcache_ctx_t *ctx = open_target(t, "staging_buffer_size:64K,load_workers:3", &dev);
	devcache_model_file_t *mf;
	devcache_tensor_dest_t d[8];
	devcache_cache_stats_t st;
	char path[512];
	size_t n;

	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	write_model(path);
	assert_int_equal(devcache_model_file_open(path, &mf), 0);
	n = devcache_model_file_tensor_count(mf);
	assert_true(n <= sizeof d / sizeof *d);
	for (size_t i = 0; i < n; i++) {
		devcache_tensor_info_t info;

		assert_int_equal(devcache_model_file_tensor(mf, i, &info), 0);
		d[i] = (devcache_tensor_dest_t){.name = info.name, .size = info.size};
		assert_int_equal(devcache_alloc(dev, info.size, NULL, &d[i].dst), 0);
	}
	if (devcache_model_file_read_tensors(mf, dev, d, n, NULL))
		fail_msg("%s: %s", t->label, devcache_last_error());
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	for (size_t i = 0; i < n; i++) {
		devcache_tensor_info_t info;
		unsigned char *want = malloc(1 << 20), *got = malloc(1 << 20);

		assert_int_equal(devcache_model_file_find(mf, d[i].name, &info), 0);
		assert_int_equal(pread(fd, want, info.size, (off_t)info.offset), (ssize_t)info.size);
		assert_int_equal(devcache_copy_to_host(dev, got, d[i].dst, info.size, NULL), 0);
		assert_memory_equal(want, got, info.size);
		free(want);
		free(got);
		devcache_free(dev, d[i].dst);
	}
	close(fd);
	assert_int_equal(devcache_cache_stats(ctx, &st), 0);
	assert_int_equal(st.models, 0);
	devcache_model_file_close(mf);
	devcache_close(ctx);
}

/* Every injected driver failure: a clean error, nothing left behind, and
 * a context that works after. */
static void injected_faults_leave_nothing(void **state)
{
	const struct target *t = *state;
	/* Each runtime's out-of-memory code, and the calls a load makes. */
	static const struct {
		const char *backend, *function;
		unsigned nth;
		int error;
	} faults[] = {
		{"cuda", "cuMemAlloc_v2", 1 | 0x80000000u, 2},
		{"cuda", "cuMemcpyHtoDAsync_v2", 2, 2},
		{"cuda", "cuMemHostAlloc", 1 | 0x80000000u, 2},
		{"cuda", "cuEventCreate", 1, 2},
		{"cuda", "cuEventRecord", 2, 2},
		{"cuda", "cuStreamSynchronize", 1, 2},
		{"hip", "hipMalloc", 1 | 0x80000000u, 2},
		{"hip", "hipMemcpyAsync", 2, 2},
		{"hip", "hipHostMalloc", 1 | 0x80000000u, 2},
		{"hip", "hipEventCreateWithFlags", 1, 2},
		{"hip", "hipEventRecord", 2, 2},
		{"hip", "hipStreamSynchronize", 1, 2},
		{"ze", "zeMemAllocDevice", 1 | 0x80000000u, 0x70000003},
		{"ze", "zeCommandListAppendMemoryCopy", 2, 0x70000003},
		{"ze", "zeMemAllocHost", 1 | 0x80000000u, 0x70000002},
		{"ze", "zeEventCreate", 1, 0x70000002},
		{"ze", "zeCommandListAppendBarrier", 3, 0x70000002},
		{"ze", "zeEventHostSynchronize", 1, 0x70000002},
	};
	struct fake f = {0};
	devcache_device_t *dev;
	char path[512];

	if (t->kind != T_FAKE)
		skip_because("fault injection needs a fake runtime");
	devcache_ctx_t *ctx = open_target(t, "staging_buffer_size:64K", &dev);
	assert_true(fake_controls(t, &f));
	snprintf(path, sizeof path, "%s/faults.safetensors", dir);
	write_model(path);
	/* One load first: what a backend keeps for reuse (Level Zero's event
	 * pools) is then in the baseline. */
	devcache_model_t *warm;
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &warm), 0);
	devcache_model_release(warm);
	assert_int_equal(devcache_cache_evict_all(ctx), 1);
	assert_int_equal(devcache_empty_cache(dev), 0);
	assert_int_equal(devcache_host_empty_cache(dev), 0);
	size_t baseline = f.live();
	for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) {
		devcache_model_t *m = NULL;

		if (strcmp(faults[i].backend, t->backend) != 0)
			continue;
		assert_int_equal(devcache_empty_cache(dev), 0);
		assert_int_equal(devcache_host_empty_cache(dev), 0);
		f.inject(faults[i].function, faults[i].nth, faults[i].error);
		int rc = devcache_model_load(ctx, path, dev, NULL, &m);
		f.inject(faults[i].function, 0, 0);
		if (rc == 0)
			fail_msg("%s: the load succeeded", faults[i].function);
		assert_null(m);
		/* The file, then "out of memory", "out of device memory", "out of host memory" */
		assert_contains(devcache_last_error(), path);
		assert_contains(devcache_last_error(), "out of");
		assert_contains(devcache_last_error(), "memory");
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

/* A runtime that fails while the backend starts: the backend says why,
 * in the runtime's words, and keeps nothing of the runtime's.  (Under
 * AddressSanitizer the CI build also sees that it keeps none of its own.) */
static void a_failing_start_leaves_nothing(void **state)
{
	const struct target *t = *state;
	static const struct {
		const char *backend, *function;
		int error;
		bool loads; /* with no device, rather than refused */
	} faults[] = {
		{"cuda", "cuInit", 100, true},                 /* CUDA_ERROR_NO_DEVICE */
		{"hip", "hipGetDeviceCount", 100, true},       /* hipErrorNoDevice */
		{"ze", "zeContextCreate", 0x70000002, false},  /* out of host memory */
	};
	struct fake f = {0};
	devcache_device_t *dev;

	if (t->kind != T_FAKE)
		skip_because("fault injection needs a fake runtime");
	/* A first context loads the fake runtime, which stays loaded. */
	devcache_ctx_t *ctx = open_target(t, NULL, &dev);
	assert_true(fake_controls(t, &f));
	devcache_close(ctx);
	for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) {
		char opts[8192];
		devcache_open_args_t args = {.struct_size = sizeof args,
					     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
					     .options = opts};
		devcache_backend_info_t b = {0};

		if (strcmp(faults[i].backend, t->backend) != 0)
			continue;
		snprintf(opts, sizeof opts, "log_level:error,backend_path:%s,backends:%s,%s_library:%s/%s",
			 test_env("TEST_BACKENDS"), t->backend, t->backend, test_env("TEST_FAKES"),
			 t->fake);
		f.inject(faults[i].function, 1, faults[i].error);
		assert_int_equal(devcache_open_ex(&ctx, &args), 0);
		f.inject(faults[i].function, 0, 0);
		for (size_t k = 0; k < devcache_backend_count(ctx); k++)
			if (devcache_backend_info(ctx, k, &b) == 0 && strcmp(b.name, t->backend) == 0)
				break;
		assert_string_equal(b.name, t->backend);
		assert_int_equal(b.status, faults[i].loads ? DEVCACHE_BACKEND_LOADED
							   : DEVCACHE_BACKEND_UNAVAILABLE);
		assert_int_equal(b.device_count, 0);
		assert_contains(b.reason, faults[i].function);
		devcache_close(ctx);
		if (f.live() != 0)
			fail_msg("%s: %zu runtime objects left", faults[i].function, f.live());
	}
	dlclose(f.lib);
}

/* What the library logged, for the test that reads it. */
struct logged {
	char text[4096];
	size_t len;
};

static void log_to(void *user, enum devcache_log_level level, const char *message)
{
	struct logged *l = user;
	int n;

	(void)level;
	n = snprintf(l->text + l->len, sizeof l->text - l->len, "%s\n", message);
	if (n > 0)
		l->len += (size_t)n < sizeof l->text - l->len ? (size_t)n : sizeof l->text - l->len - 1;
}

/* The HIP backend's entry, as devcache info shows it. */
static void hip_backend(devcache_ctx_t *ctx, devcache_backend_info_t *b)
{
	for (size_t i = 0; i < devcache_backend_count(ctx); i++)
		if (devcache_backend_info(ctx, i, b) == 0 && strcmp(b->name, "hip") == 0)
			return;
	fail_msg("no hip backend");
}

/* A HIP runtime whose devices cannot map memory (hipErrorNotSupported from
 * ROCm 5.2's calls, the attribute 0 from ROCm 6): the backend says so, in
 * the runtime's words, where devcache info shows it; expandable_segments
 * falls back to ordinary segments, saying so; once the runtime maps again,
 * the note is gone. */
static void hip_without_virtual_memory_falls_back(void **state)
{
	const struct target *t = *state;
	struct logged log = {.len = 0};
	char opts[8192];
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .options = opts,
				     .log_fn = log_to,
				     .log_user = &log};
	devcache_backend_info_t b;
	devcache_device_info_t info;
	devcache_device_t *dev;
	devcache_stats_t s;
	struct fake f = {0};
	void (*vmm)(int);
	unsigned long (*calls)(const char *);
	void *p;

	/* A first context loads the fake runtime, which stays loaded. */
	devcache_ctx_t *ctx = open_target(t, NULL, &dev);
	assert_true(fake_controls(t, &f));
	hip_backend(ctx, &b);
	assert_string_equal(b.reason, "");
	devcache_close(ctx);
	*(void **)&vmm = dlsym(f.lib, "fake_hip_vmm");
	*(void **)&calls = dlsym(f.lib, "fake_hip_calls");
	assert_true(vmm && calls);
	vmm(0);
	snprintf(opts, sizeof opts,
		 "log_level:warning,backend_path:%s,backends:hip,hip_library:%s/%s,"
		 "expandable_segments:True",
		 test_env("TEST_BACKENDS"), test_env("TEST_FAKES"), t->fake);
	assert_int_equal(devcache_open_ex(&ctx, &args), 0);
	hip_backend(ctx, &b);
	assert_int_equal(b.status, DEVCACHE_BACKEND_LOADED);
	assert_int_equal(b.device_count, 2);
	/* The two devices give one reason, said once for both. */
	assert_contains(b.reason, "hip:0, hip:1: no expandable segments: ");
	assert_null(strstr(b.reason, "; "));
	assert_contains(b.reason, strcmp(t->fake, "libfake-hip6.so") == 0
					  ? "hipDeviceAttributeVirtualMemoryManagementSupported: 0"
					  : "hipMemGetAllocationGranularity: operation not supported "
					    "(hipErrorNotSupported)");
	assert_int_equal(devcache_device_get(ctx, "hip:0", &dev), 0);
	assert_int_equal(devcache_device_info(dev, &info), 0);
	assert_false(info.caps & DEVCACHE_CAP_VMM);
	unsigned long mallocs = calls("hipMalloc"), creates = calls("hipMemCreate");
	assert_int_equal(devcache_alloc(dev, 30 << 20, NULL, &p), 0);
	assert_int_equal(devcache_free(dev, p), 0);
	assert_int_equal(devcache_empty_cache(dev), 0);
	assert_int_equal(devcache_stats(dev, &s), 0);
	assert_int_equal(s.num_device_alloc, 1);
	assert_int_equal(calls("hipMalloc"), mallocs + 1);
	assert_int_equal(calls("hipMemCreate"), creates);
	assert_contains(log.text, "hip:0: expandable_segments is set, but the device cannot map "
				  "memory; it gets ordinary segments");
	devcache_close(ctx);
	vmm(1);
	/* Mapping again: no note, and the same request maps. */
	ctx = open_target(t, "expandable_segments:True", &dev);
	hip_backend(ctx, &b);
	assert_string_equal(b.reason, "");
	assert_int_equal(devcache_alloc(dev, 30 << 20, NULL, &p), 0);
	assert_int_equal(devcache_free(dev, p), 0);
	assert_true(calls("hipMemCreate") > creates); /* a page at a time */
	devcache_close(ctx);
	assert_int_equal(f.live(), 0);
	dlclose(f.lib);
}

#define ON(test, i) cmocka_unit_test_prestate_setup_teardown(test, tmpdir_setup, tmpdir_teardown, (void *)&targets[i])
#define FOR_EACH_TARGET(test)                                                                      \
	ON(test, 0), ON(test, 1), ON(test, 2), ON(test, 3), ON(test, 4), ON(test, 5), ON(test, 6), \
		ON(test, 7), ON(test, 8)
#define ON_THE_STUB(test) ON(test, 9)

int main(void)
{
	const struct CMUnitTest tests[] = {
		FOR_EACH_TARGET(round_trips_are_byte_exact),
		FOR_EACH_TARGET(streams_keep_their_order),
		FOR_EACH_TARGET(record_stream_waits_for_the_other_stream),
		FOR_EACH_TARGET(out_of_memory_is_a_clean_error),
		FOR_EACH_TARGET(a_model_uploads_byte_exact),
		FOR_EACH_TARGET(a_model_set_uploads_byte_exact),
		FOR_EACH_TARGET(tensors_stream_into_caller_memory),
		FOR_EACH_TARGET(expandable_segments_where_the_device_maps),
		FOR_EACH_TARGET(stitching_where_the_device_maps),
		FOR_EACH_TARGET(injected_faults_leave_nothing),
		FOR_EACH_TARGET(evicted_models_give_memory_back),
		FOR_EACH_TARGET(a_manager_loop_keeps_the_budget),
		/* On the fakes only: the faults are injected in them. */
		ON(a_failing_start_leaves_nothing, 2),
		ON(a_failing_start_leaves_nothing, 4),
		ON(a_failing_start_leaves_nothing, 5),
		ON(a_failing_start_leaves_nothing, 7),
		/* HIP as ROCm 5.2 and as ROCm 6. */
		ON(hip_without_virtual_memory_falls_back, 4),
		ON(hip_without_virtual_memory_falls_back, 5),
		ON_THE_STUB(round_trips_are_byte_exact),
		ON_THE_STUB(streams_keep_their_order),
		ON_THE_STUB(record_stream_waits_for_the_other_stream),
		ON_THE_STUB(out_of_memory_is_a_clean_error),
		ON_THE_STUB(a_model_uploads_byte_exact),
		ON_THE_STUB(a_model_set_uploads_byte_exact),
		ON_THE_STUB(tensors_stream_into_caller_memory),
		ON_THE_STUB(expandable_segments_where_the_device_maps),
		ON_THE_STUB(stitching_where_the_device_maps),
		ON_THE_STUB(injected_faults_leave_nothing),
		ON_THE_STUB(evicted_models_give_memory_back),
		ON_THE_STUB(a_manager_loop_keeps_the_budget),
	};

	/* TEST_CONFORMANCE_ONLY=real (make check-gpu: the real runtimes, not
	 * the toolkit's stub) or =fake: only those rows. */
	const char *only = getenv("TEST_CONFORMANCE_ONLY");
	struct CMUnitTest chosen[sizeof tests / sizeof *tests];
	size_t n = 0;

	for (size_t i = 0; i < sizeof tests / sizeof *tests; i++) {
		const struct target *t = tests[i].initial_state;
		bool real = t->kind == T_REAL && !t->library;

		if (!only || !*only || (strcmp(only, "real") == 0 && real) ||
		    (strcmp(only, "fake") == 0 && t->kind == T_FAKE))
			chosen[n++] = tests[i];
	}
	if (n == 0) {
		fprintf(stderr, "TEST_CONFORMANCE_ONLY=%s: not real or fake\n", only);
		return 2;
	}
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return _cmocka_run_group_tests("conformance", chosen, n, NULL, NULL);
}
