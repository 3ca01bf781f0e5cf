/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-model-manage.c - the model cache driven model by model: the list of what it holds, evict, offload, make room, locks with working memory, partial residency by bytes, the cache's share of a device. */
#include "tap.h"
#include "model-writer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <devcache.h>

TEST_TMPDIR_FIXTURE("model-manage");

#define MIB (1u << 20)

/* Model name (in the test's folder) of one tensor "w" of size bytes. */
static void one_tensor(char *path, size_t len, const char *name, size_t size, unsigned seed)
{
	struct mw_tensor t = {"w", size, 0};
	struct mw_opts o = {.seed = seed, .flags = MW_NO_PAD};

	snprintf(path, len, "%s/%s", dir, name);
	mw_safetensors_opts(path, &t, 1, &o);
}

/* Four tensors of 100000 bytes (each charged 100096 on a device). */
static void four_tensors(char *path, size_t len, const char *name, unsigned seed)
{
	static const struct mw_tensor t[] = {
		{"t0", 100000, 0}, {"t1", 100000, 0}, {"t2", 100000, 0}, {"t3", 100000, 0}};
	struct mw_opts o = {.seed = seed, .flags = MW_NO_PAD};

	snprintf(path, len, "%s/%s", dir, name);
	mw_safetensors_opts(path, t, 4, &o);
}
#define CHARGE 100096u

/* Every tensor byte-exact wherever it is; a mask of those on the device. */
static unsigned check_all(devcache_model_t *m, unsigned seed)
{
	const devcache_model_file_t *mf = devcache_model_file(m);
	unsigned on_device = 0;

	for (size_t i = 0; i < devcache_model_file_tensor_count(mf); i++) {
		devcache_tensor_info_t info;
		void *data;
		unsigned char *copy = malloc(MIB);

		assert_int_equal(devcache_model_tensor_at(m, i, &info, &data), 0);
		assert_int_equal(devcache_model_tensor_copy(m, info.name, copy, info.size), 0);
		mw_check(info.name, copy, info.size, seed);
		free(copy);
		if (info.place == DEVCACHE_PLACE_DEVICE)
			on_device |= 1u << i;
	}
	return on_device;
}

static void within_budget(devcache_ctx_t *ctx, devcache_device_t *dev)
{
	uint64_t used, budget;

	assert_int_equal(devcache_cache_device_usage(ctx, dev, &used, &budget), 0);
	if (used > budget)
		fail_msg("the cache holds %llu bytes on %s, over its budget of %llu",
			 (unsigned long long)used, "the device", (unsigned long long)budget);
}

static uint64_t used_on(devcache_ctx_t *ctx, devcache_device_t *dev)
{
	uint64_t used, budget;

	assert_int_equal(devcache_cache_device_usage(ctx, dev, &used, &budget), 0);
	return used;
}

/* The listed model whose path ends in name, or NULL. */
static const devcache_cached_model_t *listed(const devcache_cached_model_t *l, size_t n,
					     const char *name)
{
	for (size_t i = 0; i < n; i++) {
		size_t a = strlen(l[i].path), b = strlen(name);

		if (a >= b && strcmp(l[i].path + a - b, name) == 0)
			return &l[i];
	}
	return NULL;
}

static void the_list_says_what_the_cache_holds(void **state)
{
	char a[512], b[512], p[512];
	devcache_model_t *ma, *mb, *mp, *again;
	devcache_cached_model_t *l;
	size_t n;

	(void)state;
	one_tensor(a, sizeof a, "a.st", MIB, 1);
	one_tensor(b, sizeof b, "b.st", 300000, 2);
	four_tensors(p, sizeof p, "p.st", 3);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:1400K,partial_loading:true");
	devcache_device_t *dev = mw_device(ctx, "good:0"), *host = mw_device(ctx, "host");
	assert_int_equal(devcache_model_load(ctx, a, dev, NULL, &ma), 0);
	assert_int_equal(devcache_model_load(ctx, a, dev, NULL, &again), 0); /* a hit */
	devcache_model_release(again);
	assert_int_equal(devcache_model_load(ctx, b, host, NULL, &mb), 0);
	assert_int_equal(devcache_model_load(ctx, p, dev, NULL, &mp), 0);
	devcache_model_release(mb);
	assert_int_equal(devcache_cache_models(ctx, &l, &n), 0);
	assert_int_equal(n, 3);
	/* Most recently used first. */
	assert_ptr_equal(listed(l, n, "p.st"), &l[0]);
	const devcache_cached_model_t *e = listed(l, n, "a.st");
	assert_non_null(e);
	assert_ptr_equal(e->device, dev);
	assert_int_equal(e->where, DEVCACHE_RESIDENCE_DEVICE);
	assert_int_equal(e->locks, 1);
	assert_int_equal(e->hits, 1);
	assert_int_equal(e->device_bytes, MIB);
	assert_int_equal(e->host_bytes, 0);
	assert_int_equal(e->charged_device, MIB);
	assert_true(e->size > MIB);
	assert_true(e->last_use > 0);
	e = listed(l, n, "b.st");
	assert_int_equal(e->where, DEVCACHE_RESIDENCE_HOST);
	assert_int_equal(e->locks, 0);
	assert_int_equal(e->charged_ram, e->size);
	assert_int_equal(e->host_bytes, 300000);
	e = listed(l, n, "p.st");
	assert_int_equal(e->where, DEVCACHE_RESIDENCE_PARTIAL);
	/* 1400K less a's 1 MiB holds three tensors of p. */
	assert_int_equal(e->device_bytes, 300000);
	assert_int_equal(e->host_bytes, 100000);
	assert_int_equal(e->charged_device, 3 * CHARGE);
	assert_int_equal(e->charged_ram, 100000);
	devcache_cache_models_free(l, n);
	devcache_model_release(ma);
	devcache_model_release(mp);
	assert_int_equal(devcache_cache_models(NULL, &l, &n), DEVCACHE_EINVAL);
	devcache_close(ctx);
}

static void one_model_is_evicted_by_key_or_handle(void **state)
{
	char a[512], b[512];
	devcache_model_t *ma, *mb, *again;
	devcache_cached_model_t *l;
	size_t n;

	(void)state;
	one_tensor(a, sizeof a, "ea.st", MIB, 4);
	one_tensor(b, sizeof b, "eb.st", MIB, 5);
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, a, dev, NULL, &ma), 0);
	assert_int_equal(devcache_model_load(ctx, b, dev, NULL, &mb), 0);
	devcache_model_release(ma);
	/* Unlocked, by key: gone now. */
	assert_int_equal(devcache_cache_evict(ctx, a, dev), 0);
	assert_int_equal(used_on(ctx, dev), MIB);
	assert_int_equal(devcache_cache_evict(ctx, a, dev), DEVCACHE_ENOENT);
	assert_contains(devcache_last_error(), "ea.st: not in the model cache for good:0");
	/* Locked, by handle: forgotten, but its memory stays, charged, until
	 * its holder lets go; a new load is a miss. */
	assert_int_equal(devcache_model_evict(mb), 0);
	assert_int_equal(devcache_cache_models(ctx, &l, &n), 0);
	assert_int_equal(n, 0);
	devcache_cache_models_free(l, n);
	assert_int_equal(used_on(ctx, dev), MIB);
	assert_int_equal(check_all(mb, 5), 1);
	devcache_load_result_t r;
	devcache_load_args_t args = {.struct_size = sizeof args, .result = &r};
	assert_int_equal(devcache_model_load(ctx, b, dev, &args, &again), 0);
	assert_int_equal(r.hit, 0);
	assert_ptr_not_equal(again, mb);
	assert_int_equal(used_on(ctx, dev), 2 * MIB);
	devcache_model_release(mb);
	assert_int_equal(used_on(ctx, dev), MIB);
	devcache_cache_stats_t s;
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.models, 1);
	assert_int_equal(s.locked_models, 1);
	assert_int_equal(s.evictions, 2);
	/* Locked by key too; the handle is not held afterwards. */
	assert_int_equal(devcache_cache_evict(ctx, b, dev), 0);
	devcache_model_release(again);
	assert_int_equal(used_on(ctx, dev), 0);
	assert_int_equal(devcache_model_evict(NULL), DEVCACHE_EINVAL);
	devcache_close(ctx);
}

static void offload_moves_a_model_off_its_device(void **state)
{
	char a[512], h[512], p[512];
	devcache_model_t *m;
	devcache_load_result_t r;
	devcache_load_args_t args = {.struct_size = sizeof args, .result = &r};
	devcache_cached_model_t *l;
	devcache_cache_stats_t s;
	size_t n;

	(void)state;
	one_tensor(a, sizeof a, "oa.st", MIB, 6);
	one_tensor(h, sizeof h, "oh.st", 1000, 7);
	four_tensors(p, sizeof p, "op.st", 8);
	for (int keep = 1; keep >= 0; keep--) {
		devcache_ctx_t *ctx = mw_open_ctx(keep ? "max_cache_vram:2M"
						       : "max_cache_vram:2M,keep_ram_copy:false");
		devcache_device_t *dev = mw_device(ctx, "good:0"), *host = mw_device(ctx, "host");

		assert_int_equal(devcache_model_load(ctx, a, dev, NULL, &m), 0);
		/* Locked: it stays. */
		assert_int_equal(devcache_cache_offload(ctx, a, dev), DEVCACHE_EBUSY);
		assert_contains(devcache_last_error(), "oa.st: locked on good:0");
		devcache_model_release(m);
		assert_int_equal(devcache_cache_offload(ctx, a, dev), 0);
		assert_int_equal(used_on(ctx, dev), 0);
		assert_int_equal(devcache_cache_models(ctx, &l, &n), 0);
		assert_int_equal(n, 1);
		/* A RAM copy, or the file's mapping without one. */
		assert_int_equal(l[0].where,
				 keep ? DEVCACHE_RESIDENCE_RAM_COPY : DEVCACHE_RESIDENCE_PARTIAL);
		assert_int_equal(l[0].device_bytes, 0);
		assert_int_equal(l[0].charged_ram, MIB);
		devcache_cache_models_free(l, n);
		devcache_cache_stats(ctx, &s);
		assert_int_equal(s.offloads, 1);
		assert_int_equal(s.ram_used, MIB);
		assert_int_equal(s.ram_peak, MIB);
		/* Back: a load (a RAM copy is copied back), and make_resident. */
		assert_int_equal(devcache_model_load(ctx, a, dev, &args, &m), 0);
		assert_int_equal(r.hit, 1);
		assert_int_equal(r.from_ram, keep);
		if (!keep) {
			assert_int_equal(check_all(m, 6), 0);
			assert_int_equal(devcache_model_make_resident(m, NULL, 0, NULL), 0);
		}
		assert_int_equal(check_all(m, 6), 1);
		assert_int_equal(used_on(ctx, dev), keep ? MIB : MIB);
		devcache_model_release(m);
		/* A partial model's device tensors go back to its host part. */
		assert_int_equal(devcache_model_load_partial(ctx, p, dev, 2 * CHARGE, NULL, &m), 0);
		devcache_model_release(m);
		assert_int_equal(devcache_cache_offload(ctx, p, dev), 0);
		assert_int_equal(devcache_model_load(ctx, p, dev, NULL, &m), 0);
		assert_int_equal(check_all(m, 8), 0);
		devcache_model_release(m);
		/* Nothing to offload on the host; nothing cached by that name. */
		assert_int_equal(devcache_model_load(ctx, h, host, NULL, &m), 0);
		devcache_model_release(m);
		assert_int_equal(devcache_cache_offload(ctx, h, host), DEVCACHE_EINVAL);
		assert_contains(devcache_last_error(), "is placed on the host");
		assert_int_equal(devcache_cache_offload(ctx, h, dev), DEVCACHE_ENOENT);
		within_budget(ctx, dev);
		devcache_close(ctx);
	}
	/* The RAM budget does not allow the copy: refused, nothing moved. */
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_ram:500K");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, a, dev, NULL, &m), 0);
	devcache_model_release(m);
	assert_int_equal(devcache_cache_offload(ctx, a, dev), DEVCACHE_ENOMEM);
	assert_contains(devcache_last_error(), "max_cache_ram");
	assert_int_equal(used_on(ctx, dev), MIB);
	devcache_close(ctx);
}

static void make_room_frees_least_recently_used_first(void **state)
{
	char path[3][512];
	devcache_model_t *m[3];
	devcache_cached_model_t *l;
	uint64_t freed = 7;
	size_t n;

	(void)state;
	for (int i = 0; i < 3; i++) {
		char name[16];

		snprintf(name, sizeof name, "r%d.st", i);
		one_tensor(path[i], sizeof path[i], name, MIB, 10 + (unsigned)i);
	}
	/* Room for three, RAM for none: an eviction drops the model. */
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:3200K,max_cache_ram:100K");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	for (int i = 0; i < 3; i++)
		assert_int_equal(devcache_model_load(ctx, path[i], dev, NULL, &m[i]), 0);
	/* All locked: refused, nothing moved. */
	assert_int_equal(devcache_cache_make_room(ctx, dev, MIB, &freed), DEVCACHE_ENOMEM);
	assert_int_equal(freed, 0);
	assert_contains(devcache_last_error(), "nothing was moved");
	assert_int_equal(used_on(ctx, dev), 3 * MIB);
	devcache_model_release(m[0]);
	devcache_model_release(m[1]);
	/* 128K free already: 1 MiB needs one model, the least recently used. */
	assert_int_equal(devcache_cache_make_room(ctx, dev, MIB, &freed), 0);
	assert_int_equal(freed, MIB);
	assert_int_equal(devcache_cache_models(ctx, &l, &n), 0);
	assert_int_equal(n, 2);
	assert_null(listed(l, n, "r0.st"));
	devcache_cache_models_free(l, n);
	/* Room there already: nothing moves. */
	assert_int_equal(devcache_cache_make_room(ctx, dev, 1000, &freed), 0);
	assert_int_equal(freed, 0);
	/* More than the unlocked models hold, or than the budget. */
	assert_int_equal(devcache_cache_make_room(ctx, dev, 3 * MIB, &freed), DEVCACHE_ENOMEM);
	assert_int_equal(devcache_cache_make_room(ctx, dev, 4 * MIB, NULL), DEVCACHE_ENOMEM);
	assert_int_equal(used_on(ctx, dev), 2 * MIB);
	assert_int_equal(devcache_cache_make_room(ctx, dev, 2 * MIB, &freed), 0);
	assert_int_equal(freed, MIB);
	devcache_cache_stats_t s;
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.evictions, 2);
	devcache_model_release(m[2]);
	assert_int_equal(devcache_cache_make_room(ctx, dev, 3 * MIB, &freed), 0);
	assert_int_equal(freed, MIB);
	assert_int_equal(used_on(ctx, dev), 0);
	devcache_close(ctx);
}

static void a_lock_reserves_working_memory(void **state)
{
	char a[512], b[512];
	devcache_model_t *ma, *mb;
	devcache_cache_device_stats_t ds;

	(void)state;
	one_tensor(a, sizeof a, "wa.st", MIB, 20);
	one_tensor(b, sizeof b, "wb.st", MIB, 21);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:3M,max_cache_ram:100K");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, a, dev, NULL, &ma), 0);
	assert_int_equal(devcache_model_load(ctx, b, dev, NULL, &mb), 0);
	devcache_model_release(mb);
	/* 1.5 MiB of working memory for a: b, unlocked, makes the room. */
	assert_int_equal(devcache_model_lock(ma, 3 * MIB / 2), 0);
	assert_int_equal(used_on(ctx, dev), MIB + 3 * MIB / 2);
	assert_int_equal(devcache_cache_device_stats(ctx, dev, &ds), 0);
	assert_int_equal(ds.working_mem, 3 * MIB / 2);
	devcache_cache_stats_t s;
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.evictions, 1);
	/* Meanwhile b does not fit. */
	assert_int_equal(devcache_model_load(ctx, b, dev, NULL, &mb), DEVCACHE_ENOMEM);
	/* More than the budget leaves: refused, no lock taken. */
	assert_int_equal(devcache_model_lock(ma, MIB), DEVCACHE_ENOMEM);
	assert_contains(devcache_last_error(), "wa.st: working memory of 1.0 MiB on good:0");
	devcache_model_info_t mi;
	assert_int_equal(devcache_model_info(ma, &mi), 0);
	assert_int_equal(mi.locks, 2);
	/* A lock without working memory; releases give it back in order. */
	assert_int_equal(devcache_model_lock(ma, 0), 0);
	devcache_model_release(ma);
	assert_int_equal(used_on(ctx, dev), MIB);
	assert_int_equal(devcache_model_load(ctx, b, dev, NULL, &mb), 0);
	devcache_model_release(mb);
	devcache_model_release(ma);
	devcache_model_release(ma);
	assert_int_equal(devcache_cache_device_stats(ctx, dev, &ds), 0);
	assert_int_equal(ds.working_mem, 0);
	assert_int_equal(ds.used, 2 * MIB);
	assert_int_equal(ds.peak_used, MIB + 3 * MIB / 2);
	/* Not held: refused. */
	assert_int_equal(devcache_model_lock(ma, 0), DEVCACHE_EINVAL);
	assert_int_equal(devcache_model_lock(NULL, 0), DEVCACHE_EINVAL);
	devcache_close(ctx);
}

static void partial_residency_by_bytes(void **state)
{
	char p[512], w[512];
	devcache_model_t *m;
	devcache_model_info_t mi;
	const char *t1[] = {"t1"};

	(void)state;
	four_tensors(p, sizeof p, "bp.st", 30);
	four_tensors(w, sizeof w, "bw.st", 31);
	/* No partial_loading needed; the budget allows all four. */
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:1M");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	/* The largest prefix within 2.5 tensors' charge: two. */
	assert_int_equal(devcache_model_load_partial(ctx, p, dev, 5 * CHARGE / 2, NULL, &m), 0);
	assert_int_equal(check_all(m, 30), 0x3);
	assert_int_equal(used_on(ctx, dev), 2 * CHARGE);
	/* Grow to three, shrink to one, empty, all. */
	assert_int_equal(devcache_model_set_device_bytes(m, 3 * CHARGE, NULL), 0);
	assert_int_equal(check_all(m, 30), 0x7);
	assert_int_equal(devcache_model_set_device_bytes(m, CHARGE + 5, NULL), 0);
	assert_int_equal(check_all(m, 30), 0x1);
	assert_int_equal(used_on(ctx, dev), CHARGE);
	assert_int_equal(devcache_model_set_device_bytes(m, 0, NULL), 0);
	assert_int_equal(check_all(m, 30), 0);
	assert_int_equal(devcache_model_set_device_bytes(m, UINT64_MAX, NULL), 0);
	assert_int_equal(check_all(m, 30), 0xf);
	within_budget(ctx, dev);
	devcache_model_release(m);
	devcache_cache_evict_all(ctx);
	/* A fully loaded model moves to the host: whole, or all but the
	 * named, and set_device_bytes works on it too. */
	assert_int_equal(devcache_model_load(ctx, w, dev, NULL, &m), 0);
	assert_int_equal(devcache_model_info(m, &mi), 0);
	assert_int_equal(mi.partial, 0);
	assert_int_equal(check_all(m, 31), 0xf);
	assert_int_equal(devcache_model_move_to_host(m, t1, 1), 0);
	assert_int_equal(check_all(m, 31), 0xd);
	assert_int_equal(devcache_model_info(m, &mi), 0);
	assert_int_equal(mi.partial, 1);
	assert_int_equal(used_on(ctx, dev), 3 * CHARGE);
	devcache_model_release(m);
	devcache_cache_evict_all(ctx);
	assert_int_equal(devcache_model_load(ctx, w, dev, NULL, &m), 0);
	assert_int_equal(devcache_model_move_to_host(m, NULL, 0), 0);
	assert_int_equal(check_all(m, 31), 0);
	assert_int_equal(used_on(ctx, dev), 0);
	devcache_model_release(m);
	devcache_cache_evict_all(ctx);
	assert_int_equal(devcache_model_load(ctx, w, dev, NULL, &m), 0);
	assert_int_equal(devcache_model_set_device_bytes(m, 2 * CHARGE, NULL), 0);
	assert_int_equal(check_all(m, 31), 0x3);
	devcache_model_release(m);
	/* Not held: refused. */
	assert_int_equal(devcache_model_set_device_bytes(m, 0, NULL), DEVCACHE_EINVAL);
	devcache_close(ctx);
}

static void the_device_share_is_the_cache_apart_from_the_program(void **state)
{
	char a[512];
	devcache_model_t *m;
	devcache_cache_device_stats_t ds;
	void *own = NULL;

	(void)state;
	one_tensor(a, sizeof a, "sa.st", 12 * MIB, 40);
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	devcache_device_t *dev = mw_device(ctx, "good:0"), *host = mw_device(ctx, "host");
	/* The model in a segment of its own (12 MiB), the program's 5 MiB
	 * in one of 20 MiB, as PyTorch's policy rounds them. */
	assert_int_equal(devcache_model_load(ctx, a, dev, NULL, &m), 0);
	assert_int_equal(devcache_alloc(dev, 5 * MIB, NULL, &own), 0);
	assert_int_equal(devcache_cache_device_stats(ctx, dev, &ds), 0);
	assert_int_equal(ds.used, 12 * MIB);
	assert_int_equal(ds.allocated_bytes, 12 * MIB);
	assert_int_equal(ds.reserved_bytes, 12 * MIB);
	assert_int_equal(ds.device_allocated_bytes, 17 * MIB);
	assert_int_equal(ds.device_reserved_bytes, 32 * MIB);
	assert_int_equal(ds.peak_used, 12 * MIB);
	devcache_model_release(m);
	/* Its segment goes back to the driver; the program's stays. */
	assert_int_equal(devcache_cache_evict_all(ctx), 1);
	assert_int_equal(devcache_cache_device_stats(ctx, dev, &ds), 0);
	assert_int_equal(ds.allocated_bytes, 0);
	assert_int_equal(ds.reserved_bytes, 0);
	assert_int_equal(ds.device_allocated_bytes, 5 * MIB);
	assert_int_equal(ds.device_reserved_bytes, 20 * MIB);
	assert_int_equal(ds.peak_used, 12 * MIB);
	/* The host's share is RAM's. */
	assert_int_equal(devcache_cache_device_stats(ctx, host, &ds), 0);
	assert_true(ds.budget > 0); /* max_cache_ram's auto value */
	assert_int_equal(ds.allocated_bytes, 0);
	devcache_cache_stats_t s;
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.ram_peak, 0); /* evict_all keeps no RAM copy */
	devcache_free(dev, own);
	assert_int_equal(devcache_cache_device_stats(ctx, NULL, &ds), DEVCACHE_EINVAL);
	devcache_close(ctx);
}

/* Two threads drive the cache at once: make_room, lock, offload, loads
 * and releases, each step checked against the budget. */
struct driver {
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	char (*paths)[512];
	int seed, errors;
};

static void *drive(void *arg)
{
	struct driver *d = arg;

	for (int i = 0; i < 60; i++) {
		int k = (i + d->seed) % 3;
		devcache_model_t *m;
		int rc = devcache_model_load(d->ctx, d->paths[k], d->dev, NULL, &m);

		if (rc == 0) {
			if (devcache_model_lock(m, (i % 2) * 200000) == 0)
				devcache_model_release(m);
			devcache_model_release(m);
		} else if (rc != DEVCACHE_ENOMEM) {
			d->errors++;
		}
		rc = devcache_cache_make_room(d->ctx, d->dev, 1500000, NULL);
		if (rc && rc != DEVCACHE_ENOMEM)
			d->errors++;
		rc = devcache_cache_offload(d->ctx, d->paths[(k + 1) % 3], d->dev);
		if (rc && rc != DEVCACHE_ENOENT && rc != DEVCACHE_EBUSY && rc != DEVCACHE_ENOMEM)
			d->errors++;
	}
	return NULL;
}

static void threads_drive_the_cache_at_once(void **state)
{
	char paths[3][512];
	pthread_t t[2];
	struct driver d[2];

	(void)state;
	for (int i = 0; i < 3; i++) {
		char name[16];

		snprintf(name, sizeof name, "t%d.st", i);
		one_tensor(paths[i], sizeof paths[i], name, MIB, 50 + (unsigned)i);
	}
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:2500K,max_cache_ram:2M");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	for (int i = 0; i < 2; i++) {
		d[i] = (struct driver){ctx, dev, paths, i, 0};
		assert_int_equal(pthread_create(&t[i], NULL, drive, &d[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(d[i].errors, 0);
	}
	within_budget(ctx, dev);
	devcache_cache_device_stats_t ds;
	assert_int_equal(devcache_cache_device_stats(ctx, dev, &ds), 0);
	assert_true(ds.peak_used <= ds.budget);
	assert_int_equal(ds.working_mem, 0);
	devcache_cache_stats_t s;
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.locked_models, 0);
	assert_true(s.ram_peak <= s.ram_budget);
	devcache_cache_evict_all(ctx);
	assert_int_equal(used_on(ctx, dev), 0);
	devcache_close(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TMPDIR_TEST(the_list_says_what_the_cache_holds),
		TMPDIR_TEST(one_model_is_evicted_by_key_or_handle),
		TMPDIR_TEST(offload_moves_a_model_off_its_device),
		TMPDIR_TEST(make_room_frees_least_recently_used_first),
		TMPDIR_TEST(a_lock_reserves_working_memory),
		TMPDIR_TEST(partial_residency_by_bytes),
		TMPDIR_TEST(the_device_share_is_the_cache_apart_from_the_program),
		TMPDIR_TEST(threads_drive_the_cache_at_once),
	};

	return RUN_TAP(tests);
}
