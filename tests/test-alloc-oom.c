/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-alloc-oom.c - each step of the out-of-memory sequence, and streams: record_stream, per-stream reuse. */
#include "tap.h"

#include <dlfcn.h>

#include "alloc-fixture.h"

/* good:0 has 1 GiB and refuses an allocation past it, as a GPU would. */

static void releases_cached_oversize_blocks_first(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "good:0", "max_split_size_mb:64");
	fx_free(&f, fx_alloc(&f, 600 * MiB, NULL));
	/* 600 MiB does not fit 500 within 20 MiB, and 424 MiB are left. */
	fx_alloc(&f, 500 * MiB, NULL);
	devcache_stats_t s = fx_stats(&f);
	/* PyTorch counts a retry only after releasing every cached block. */
	assert_int_equal(s.num_alloc_retries, 0);
	assert_int_equal(s.num_device_free, 1);
	assert_int_equal(s.num_ooms, 0);
	assert_int_equal(s.num_sync_all_streams, 0);
	devcache_close(f.ctx);
}

static void then_releases_every_idle_segment(void **state)
{
	struct fx f;
	void *p[9];

	(void)state;
	fx_open(&f, "good:0", NULL);
	for (int i = 0; i < 9; i++)
		p[i] = fx_alloc(&f, 100 * MiB, NULL);
	for (int i = 0; i < 9; i++)
		fx_free(&f, p[i]);
	fx_alloc(&f, 200 * MiB, NULL);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.num_alloc_retries, 1);
	assert_int_equal(s.num_device_free, 9);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 200 * MiB);
	devcache_close(f.ctx);
}

struct pressure {
	struct fx *f;
	void *victim;
	int calls;
	devcache_device_t *dev;
	size_t need;
};

/* Like the model cache: free something on the device and say how much. */
static size_t evict(void *user, devcache_device_t *dev, size_t need)
{
	struct pressure *p = user;

	p->calls++;
	p->dev = dev;
	p->need = need;
	if (!p->victim)
		return 0;
	devcache_free(dev, p->victim);
	p->victim = NULL;
	return 900 * MiB;
}

static void then_asks_the_pressure_callbacks(void **state)
{
	struct fx f;
	struct pressure p = {0};

	(void)state;
	fx_open(&f, "good:0", NULL);
	p.victim = fx_alloc(&f, 900 * MiB, NULL);
	assert_int_equal(devcache_pressure_register(f.ctx, evict, &p), 0);
	void *q = fx_alloc(&f, 200 * MiB, NULL);
	assert_non_null(q);
	assert_int_equal(p.calls, 1);
	assert_ptr_equal(p.dev, f.dev);
	assert_int_equal(p.need, 200 * MiB);
	assert_null(p.victim);
	assert_int_equal(fx_stats(&f).num_ooms, 0);
	assert_int_equal(devcache_pressure_unregister(f.ctx, evict, &p), 0);
	assert_int_equal(devcache_pressure_unregister(f.ctx, evict, &p), DEVCACHE_ENOENT);
	assert_int_equal(devcache_pressure_register(f.ctx, NULL, NULL), DEVCACHE_EINVAL);
	devcache_close(f.ctx);
}

static void finally_fails_saying_why(void **state)
{
	struct fx f;
	struct pressure p = {0};
	void *q = (void *)1;

	(void)state;
	fx_open(&f, "good:0", NULL);
	void *big = fx_alloc(&f, 900 * MiB, NULL);
	assert_int_equal(devcache_pressure_register(f.ctx, evict, &p), 0);
	assert_int_equal(devcache_alloc(f.dev, 200 * MiB, NULL, &q), DEVCACHE_ENOMEM);
	assert_int_equal(p.calls, 1); /* asked, released nothing */
	const char *msg = devcache_last_error();
	/* PyTorch's message, its units and its order. */
	assert_string_equal(msg, "good:0: out of memory. Tried to allocate 200.00 MiB for a request "
				 "of 209715200 bytes. The device has a total capacity of 1024.00 MiB "
				 "of which 124.00 MiB is free. This process has 900.00 MiB in use "
				 "through libdevcache. Of the allocated memory 900.00 MiB is allocated "
				 "by libdevcache, and 0 bytes is reserved by libdevcache but "
				 "unallocated.");
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.num_ooms, 1);
	assert_int_equal(s.num_alloc_retries, 1); /* the callback freed nothing: no retry */
	/* The context is still usable. */
	fx_free(&f, big);
	assert_non_null(fx_alloc(&f, 200 * MiB, NULL));
	devcache_close(f.ctx);
}

static void fragmentation_is_named_in_the_message(void **state)
{
	struct fx f;
	void *p[40], *q;

	(void)state;
	fx_open(&f, "good:0", NULL);
	/* Every other 8 MiB block of 20 MiB segments stays: the rest is cached but useless for 500 MiB. */
	for (int i = 0; i < 40; i++)
		p[i] = fx_alloc(&f, 8 * MiB, NULL);
	for (int i = 0; i < 40; i += 2)
		fx_free(&f, p[i]);
	fx_alloc(&f, 500 * MiB, NULL);
	assert_int_equal(devcache_alloc(f.dev, 300 * MiB, NULL, &q), DEVCACHE_ENOMEM);
	/* good:0 cannot map memory: no expandable_segments advice for it. */
	assert_contains(devcache_last_error(),
			"and 240.00 MiB is reserved by libdevcache but unallocated. Reserved but "
			"unallocated memory would be enough: to avoid this fragmentation, try "
			"max_split_size_mb (devcache.conf(5)).");
	devcache_close(f.ctx);
}

/* The advice follows the case: the cap only when a cap stopped a request
 * that fits under it, never when memory_fraction is 1 or the request is
 * larger than the device. */
static const char *oom_message(const char *device, const char *options, size_t hold_size,
			       size_t ask)
{
	static char msg[2048];
	struct fx f;
	void *q = NULL;

	fx_open(&f, device, options);
	void *p = hold_size ? fx_alloc(&f, hold_size, NULL) : NULL;
	assert_int_equal(devcache_alloc(f.dev, ask, NULL, &q), DEVCACHE_ENOMEM);
	assert_null(q);
	snprintf(msg, sizeof msg, "%s", devcache_last_error());
	assert_int_equal(fx_stats(&f).num_ooms, 1);
	if (p)
		fx_free(&f, p);
	devcache_close(f.ctx);
	return msg;
}

static void the_oom_message_fits_the_case(void **state)
{
	const char *m;

	(void)state;
	m = oom_message("good:0", "memory_fraction:0.25", 200 * MiB, 100 * MiB);
	assert_contains(m, "This process has 200.00 MiB in use through libdevcache. "
			   "256.00 MiB allowed (memory_fraction); Of the allocated memory");
	assert_contains(m, "The memory_fraction cap stopped it: raise memory_fraction");
	m = oom_message("good:0", "memory_fraction:0.25", 0, 300 * MiB);
	assert_contains(m, "The request is larger than the memory_fraction cap: raise");
	/* A cap of the whole device: nothing to raise. */
	m = oom_message("good:0", "memory_fraction:1", 900 * MiB, 200 * MiB);
	assert_contains(m, "1024.00 MiB allowed (memory_fraction);");
	assert_not_contains(m, "raise");
	/* Larger than the device: no setting helps. */
	m = oom_message("good:0", "memory_fraction:0.5", 0, 2048 * MiB);
	assert_contains(m, "Tried to allocate 2.00 GiB");
	assert_contains(m, "The request is larger than the device's memory.");
	assert_not_contains(m, "raise");
	/* No cap set: no "allowed". */
	m = oom_message("good:0", NULL, 900 * MiB, 200 * MiB);
	assert_not_contains(m, "allowed");
	assert_not_contains(m, "Reserved but unallocated memory would be enough");
}

/* Fragmentation on a device that can map memory: expandable_segments is
 * the advice, and once it is on, none. */
static void expandable_segments_advised_where_they_help(void **state)
{
	struct fx f;
	void *p[40], *q;

	(void)state;
	for (int expandable = 0; expandable < 2; expandable++) {
		/* Stitching would serve the request (test-alloc-expand). */
		fx_open(&f, "vmm:0",
			expandable ? "expandable_segments:true,expandable_stitching:false" : NULL);
		/* Each 20 MiB segment (or 20 MiB page) keeps one 8 MiB block. */
		for (int i = 0; i < 40; i++)
			p[i] = fx_alloc(&f, 8 * MiB, NULL);
		for (int i = 0; i < 40; i += 2)
			fx_free(&f, p[i]);
		void *big = fx_alloc(&f, 500 * MiB, NULL);
		assert_int_equal(devcache_alloc(f.dev, 300 * MiB, NULL, &q), DEVCACHE_ENOMEM);
		if (!expandable)
			assert_contains(devcache_last_error(),
					"to avoid this fragmentation, try expandable_segments:true "
					"(devcache.conf(5)).");
		else
			assert_not_contains(devcache_last_error(), "try expandable_segments");
		fx_free(&f, big);
		for (int i = 1; i < 40; i += 2)
			fx_free(&f, p[i]);
		devcache_close(f.ctx);
	}
}

/* PyTorch 2's advice comes whatever stopped the request, where reserved but
 * unallocated memory is large: here the memory_fraction cap stopped it,
 * with 120 MiB of the 200 MiB reserved unused. */
static void expandable_segments_advised_beside_the_cap(void **state)
{
	struct fx f;
	void *p[20], *q;

	(void)state;
	fx_open(&f, "vmm:0", "memory_fraction:0.5");
	for (int i = 0; i < 20; i++)
		p[i] = fx_alloc(&f, 8 * MiB, NULL);
	for (int i = 0; i < 20; i += 2)
		fx_free(&f, p[i]);
	assert_int_equal(devcache_alloc(f.dev, 400 * MiB, NULL, &q), DEVCACHE_ENOMEM);
	const char *m = devcache_last_error();
	assert_contains(m, "The memory_fraction cap stopped it: raise memory_fraction");
	assert_contains(m, "120.00 MiB is reserved by libdevcache but unallocated. The "
			   "memory_fraction cap stopped it: raise memory_fraction (devcache.conf(5)). "
			   "Reserved but unallocated memory is large: try expandable_segments:true "
			   "to avoid fragmentation.");
	for (int i = 1; i < 20; i += 2)
		fx_free(&f, p[i]);
	devcache_close(f.ctx);
	/* Little unused: no advice. */
	fx_open(&f, "vmm:0", "memory_fraction:0.5");
	p[0] = fx_alloc(&f, 200 * MiB, NULL);
	assert_int_equal(devcache_alloc(f.dev, 400 * MiB, NULL, &q), DEVCACHE_ENOMEM);
	assert_not_contains(devcache_last_error(), "expandable_segments");
	fx_free(&f, p[0]);
	devcache_close(f.ctx);
}

/* While the lock is released for the pressure callbacks, another
 * allocation's miss must not replace what the driver said to this one. */
static size_t allocate_meanwhile(void *user, devcache_device_t *dev, size_t need)
{
	void **p = user;

	(void)need;
	if (!*p && devcache_alloc(dev, MiB, NULL, p))
		*p = NULL;
	return 0;
}

static void the_drivers_words_survive_the_callbacks(void **state)
{
	struct fx other, f;
	void *q = NULL, *meanwhile = NULL;

	(void)state;
	fx_open(&other, "good:0", NULL);
	void *hog = fx_alloc(&other, 400 * MiB, NULL);
	fx_open(&f, "good:0", NULL);
	void *p = fx_alloc(&f, 300 * MiB, NULL);
	assert_int_equal(devcache_pressure_register(f.ctx, allocate_meanwhile, &meanwhile), 0);
	assert_int_equal(devcache_alloc(f.dev, 500 * MiB, NULL, &q), DEVCACHE_ENOMEM);
	assert_non_null(meanwhile); /* a miss that the driver served */
	assert_contains(devcache_last_error(), " The driver said: ");
	assert_contains(devcache_last_error(), "fake: out of memory");
	fx_free(&f, meanwhile);
	fx_free(&f, p);
	devcache_close(f.ctx);
	fx_free(&other, hog);
	devcache_close(other.ctx);
}

static void (*hold)(int);

static void *open_module(void)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/good.so", test_env("TEST_MODULES"));
	void *module = dlopen(path, RTLD_NOW);
	assert_non_null(module);
	*(void **)&hold = dlsym(module, "fake_hold_events");
	assert_non_null(hold);
	return module;
}

static void record_stream_delays_reuse_until_the_stream_is_done(void **state)
{
	struct fx f;
	devcache_stream_t s2;
	void *module = open_module();

	(void)state;
	fx_open(&f, "good:0", NULL);
	assert_int_equal(devcache_stream_create(f.dev, &s2), 0);
	void *p = fx_alloc(&f, 4 * MiB, NULL);
	assert_int_equal(devcache_record_stream(f.dev, p, s2), 0);
	assert_int_equal(devcache_record_stream(f.dev, p, s2), 0); /* twice is once */
	hold(1);
	fx_free(&f, p);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.active[DEVCACHE_POOL_ALL].current, 1); /* pending free */
	void *q = fx_alloc(&f, 4 * MiB, NULL);
	assert_ptr_not_equal(q, p);
	fx_free(&f, q);
	hold(0);
	/* The event has completed: the next allocation finds p free. */
	assert_ptr_equal(fx_alloc(&f, 4 * MiB, NULL), p);
	assert_int_equal(fx_stats(&f).active[DEVCACHE_POOL_ALL].current, 1);
	assert_int_equal(devcache_stream_destroy(f.dev, s2), 0);
	devcache_close(f.ctx);
	dlclose(module);
}

static void empty_cache_waits_for_pending_blocks(void **state)
{
	struct fx f;
	devcache_stream_t s2;
	void *module = open_module();

	(void)state;
	fx_open(&f, "good:0", NULL);
	assert_int_equal(devcache_stream_create(f.dev, &s2), 0);
	void *p = fx_alloc(&f, 4 * MiB, NULL);
	assert_int_equal(devcache_record_stream(f.dev, p, s2), 0);
	hold(1);
	fx_free(&f, p);
	assert_int_equal(devcache_empty_cache(f.dev), 0);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.num_sync_all_streams, 1);
	assert_int_equal(s.active[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	devcache_stream_destroy(f.dev, s2);
	devcache_close(f.ctx);
	dlclose(module);
}

static void freed_blocks_stay_with_their_stream(void **state)
{
	struct fx f;
	devcache_stream_t s1, s2;

	(void)state;
	fx_open(&f, "host", NULL);
	assert_int_equal(devcache_stream_create(f.dev, &s1), 0);
	assert_int_equal(devcache_stream_create(f.dev, &s2), 0);
	void *p = fx_alloc(&f, 4 * MiB, s1);
	fx_free(&f, p);
	void *q = fx_alloc(&f, 4 * MiB, s2);
	assert_ptr_not_equal(q, p);
	assert_int_equal(fx_stats(&f).num_device_alloc, 2);
	assert_ptr_equal(fx_alloc(&f, 4 * MiB, s1), p);
	assert_int_equal(devcache_stream_destroy(f.dev, s1), 0);
	assert_int_equal(devcache_stream_destroy(f.dev, s2), 0);
	devcache_close(f.ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(releases_cached_oversize_blocks_first),
		cmocka_unit_test(then_releases_every_idle_segment),
		cmocka_unit_test(then_asks_the_pressure_callbacks),
		cmocka_unit_test(finally_fails_saying_why),
		cmocka_unit_test(fragmentation_is_named_in_the_message),
		cmocka_unit_test(the_oom_message_fits_the_case),
		cmocka_unit_test(expandable_segments_advised_beside_the_cap),
		cmocka_unit_test(the_drivers_words_survive_the_callbacks),
		cmocka_unit_test(expandable_segments_advised_where_they_help),
		cmocka_unit_test(record_stream_delays_reuse_until_the_stream_is_done),
		cmocka_unit_test(empty_cache_waits_for_pending_blocks),
		cmocka_unit_test(freed_blocks_stay_with_their_stream),
	};
	return RUN_TAP(tests);
}
