/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-alloc-expand.c - expandable segments: growth in place, unmapping free pages, the OOM sequence, the cap, devices that cannot map. */
#include "tap.h"

#include <string.h>

#include "alloc-fixture.h"

/* vmm:0 has 1 GiB that it enforces, 2 MiB mapping granularity, and checks
 * every address and size the core passes; the host maps page by page. */

static size_t free_memory(struct fx *f)
{
	devcache_device_info_t info;

	assert_int_equal(devcache_device_info(f->dev, &info), 0);
	return info.free_memory;
}

static char *snapshot(struct fx *f)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);

	assert_non_null(out);
	assert_int_equal(devcache_snapshot(f->dev, out), 0);
	fclose(out);
	return buf;
}

static void only_devices_that_map_get_them(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "vmm:0", "expandable_segments:True");
	assert_true(f.a->expandable);
	assert_false(f.dev->pinned->expandable); /* pinned host memory never */
	devcache_close(f.ctx);
	fx_open(&f, "host", "expandable_segments:True");
	assert_true(f.a->expandable);
	devcache_close(f.ctx);
	/* good:0 cannot map: ordinary segments, and it still works. */
	fx_open(&f, "good:0", "expandable_segments:True");
	assert_false(f.a->expandable);
	fx_free(&f, fx_alloc(&f, 30 * MiB, NULL));
	assert_int_equal(fx_stats(&f).reserved_bytes[DEVCACHE_POOL_ALL].current, 30 * MiB);
	devcache_close(f.ctx);
	/* Caching off: pass-through, nothing to expand. */
	fx_open(&f, "vmm:0", "expandable_segments:True,caching:false");
	assert_false(f.a->expandable);
	devcache_close(f.ctx);
}

static void grows_in_place(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "vmm:0", "expandable_segments:True");
	/* The large pool maps 20 MiB pages: 30 MiB takes two. */
	void *p = fx_alloc(&f, 30 * MiB, NULL);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 40 * MiB);
	/* One map operation, as PyTorch counts it, however many pages. */
	assert_int_equal(s.num_device_alloc, 1);
	assert_int_equal(s.segment[DEVCACHE_POOL_LARGE].current, 1);
	fx_free(&f, p);
	/* 50 MiB does not fit the 40 MiB free block, which the next page
	 * extends: the same address, one more page, no new segment. */
	void *q = fx_alloc(&f, 50 * MiB, NULL);
	assert_ptr_equal(q, p);
	s = fx_stats(&f);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 60 * MiB);
	assert_int_equal(s.num_device_alloc, 2);
	assert_int_equal(s.segment[DEVCACHE_POOL_ALL].current, 1);
	assert_int_equal(s.num_alloc_retries, 0);
	/* The tail past 50 MiB is split off and free; as PyTorch,
	 * inactive_split leaves expandable segments out. */
	assert_int_equal(fx_block_size(&f, q), 50 * MiB);
	assert_int_equal(s.inactive_split_bytes[DEVCACHE_POOL_LARGE].current, 0);
	/* Written through, end to end. */
	memset(q, 0x5a, 50 * MiB);
	fx_free(&f, q);
	assert_int_equal(free_memory(&f), (1u << 30) - 60 * MiB);
	devcache_close(f.ctx);
}

static void small_pool_maps_2_mib_pages(void **state)
{
	struct fx f;
	void *p[3];

	(void)state;
	fx_open(&f, "vmm:0", "expandable_segments:True");
	for (int i = 0; i < 3; i++)
		p[i] = fx_alloc(&f, MiB, NULL);
	devcache_stats_t s = fx_stats(&f);
	/* Two 1 MiB blocks share the first page, the third maps a second. */
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_SMALL].current, 4 * MiB);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_LARGE].current, 0);
	assert_ptr_equal((char *)p[1], (char *)p[0] + MiB);
	assert_ptr_equal((char *)p[2], (char *)p[0] + 2 * MiB);
	for (int i = 0; i < 3; i++)
		fx_free(&f, p[i]);
	devcache_close(f.ctx);
}

static void empty_cache_unmaps_whole_free_pages(void **state)
{
	struct fx f;
	void *p[6];

	(void)state;
	fx_open(&f, "vmm:0", "expandable_segments:True");
	/* Three 2 MiB pages of the small pool, 1 MiB blocks. */
	for (int i = 0; i < 6; i++)
		p[i] = fx_alloc(&f, MiB, NULL);
	for (int i = 1; i < 5; i++)
		fx_free(&f, p[i]);
	/* One free block from 1 MiB to 5 MiB: only the middle page is whole. */
	assert_int_equal(devcache_empty_cache(f.dev), 0);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 4 * MiB);
	assert_int_equal(s.num_device_free, 1);
	assert_int_equal(s.inactive_split[DEVCACHE_POOL_SMALL].current, 0);
	assert_int_equal(s.inactive_split_bytes[DEVCACHE_POOL_SMALL].current, 0);
	assert_int_equal(free_memory(&f), (1u << 30) - 4 * MiB);
	char *json = snapshot(&f);
	assert_contains(json, "\"expandable\":true,\"mapped\":4194304");
	assert_contains(json, "\"state\":\"unmapped\"");
	free(json);
	/* The partial pages' free halves serve 1 MiB requests without the driver. */
	p[1] = fx_alloc(&f, MiB, NULL);
	p[4] = fx_alloc(&f, MiB, NULL);
	assert_int_equal(fx_stats(&f).num_device_alloc, 3);
	/* A third maps the hole again. */
	p[2] = fx_alloc(&f, MiB, NULL);
	assert_ptr_equal((char *)p[2], (char *)p[0] + 2 * MiB);
	assert_int_equal(fx_stats(&f).num_device_alloc, 4);
	for (int i = 0; i < 5; i++)
		if (i != 3)
			fx_free(&f, p[i]);
	fx_free(&f, p[5]);
	assert_int_equal(devcache_empty_cache(f.dev), 0);
	s = fx_stats(&f);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.segment[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.inactive_split[DEVCACHE_POOL_ALL].current, 0);
	/* Four maps; unmapped at two calls of empty_cache, one block each. */
	assert_int_equal(s.num_device_alloc, 4);
	assert_int_equal(s.num_device_free, 2);
	assert_int_equal(free_memory(&f), 1u << 30);
	/* The whole reservation is one hole again. */
	struct segment *seg = f.a->pools[0]->expandable[1];
	assert_non_null(seg);
	assert_true(seg->first->unmapped);
	assert_null(seg->first->next);
	assert_int_equal(seg->first->size, seg->size);
	devcache_close(f.ctx);
}

static void oom_releases_other_streams_pages_and_retries(void **state)
{
	struct fx f;
	devcache_stream_t other;

	(void)state;
	fx_open(&f, "vmm:0", "expandable_segments:True");
	assert_int_equal(devcache_stream_create(f.dev, &other), 0);
	fx_free(&f, fx_alloc(&f, 600 * MiB, NULL));
	/* Cached on the default stream, so the other stream's 600 MiB does
	 * not fit until those pages are unmapped. */
	void *q = fx_alloc(&f, 600 * MiB, other);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.num_alloc_retries, 1);
	assert_int_equal(s.num_device_free, 1);
	assert_int_equal(s.num_ooms, 0);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 600 * MiB);
	assert_int_equal(s.segment[DEVCACHE_POOL_ALL].current, 1);
	fx_free(&f, q);
	devcache_stream_destroy(f.dev, other);
	devcache_close(f.ctx);
}

static void failed_growth_maps_nothing(void **state)
{
	struct fx other, f;
	void *hog, *q = NULL;

	(void)state;
	/* Another context takes 400 MiB of the device, so growth fails in
	 * the driver part way through, not at the memory_fraction cap. */
	fx_open(&other, "vmm:0", NULL);
	hog = fx_alloc(&other, 400 * MiB, NULL);
	fx_open(&f, "vmm:0", "expandable_segments:True");
	void *p = fx_alloc(&f, 300 * MiB, NULL);
	assert_int_equal(devcache_alloc(f.dev, 500 * MiB, NULL, &q), DEVCACHE_ENOMEM);
	assert_null(q);
	assert_contains(devcache_last_error(), "vmm:0: out of memory. Tried to allocate 500.00 MiB "
			"for a request of 524288000 bytes");
	assert_contains(devcache_last_error(), "of which 324.00 MiB is free");
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.num_ooms, 1);
	assert_int_equal(s.num_alloc_retries, 1);
	/* What was mapped on the way is undone. */
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 300 * MiB);
	assert_int_equal(s.num_device_alloc, 1);
	assert_int_equal(s.num_device_free, 0);
	assert_int_equal(free_memory(&f), (1u << 30) - 700 * MiB);
	/* And the segment is still whole: with room made, it grows in place. */
	fx_free(&other, hog);
	assert_int_equal(devcache_empty_cache(other.dev), 0);
	q = fx_alloc(&f, 500 * MiB, NULL);
	assert_ptr_equal((char *)q, (char *)p + 300 * MiB);
	fx_free(&f, p);
	fx_free(&f, q);
	devcache_close(f.ctx);
	devcache_close(other.ctx);
}

static size_t release_victim(void *user, devcache_device_t *dev, size_t need)
{
	void **victim = user;

	(void)need;
	if (!*victim)
		return 0;
	devcache_free(dev, *victim);
	*victim = NULL;
	return 1;
}

static void pressure_callbacks_free_room(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "vmm:0", "expandable_segments:True");
	void *victim = fx_alloc(&f, 600 * MiB, NULL);
	assert_int_equal(devcache_pressure_register(f.ctx, release_victim, &victim), 0);
	void *p = fx_alloc(&f, 500 * MiB, NULL);
	assert_null(victim);
	/* The victim's pages at the start of the segment were reused. */
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 600 * MiB);
	assert_int_equal(s.num_device_alloc, 1);
	/* One retry after release_cached; the callback made a cache hit. */
	assert_int_equal(s.num_alloc_retries, 1);
	fx_free(&f, p);
	devcache_close(f.ctx);
}

static void memory_fraction_caps_mapping(void **state)
{
	struct fx f;
	void *p = NULL;

	(void)state;
	fx_open(&f, "vmm:0", "expandable_segments:True,memory_fraction:0.5");
	void *a = fx_alloc(&f, 500 * MiB, NULL);
	devcache_stats_t before = fx_stats(&f);
	assert_int_equal(devcache_alloc(f.dev, 100 * MiB, NULL, &p), DEVCACHE_ENOMEM);
	assert_contains(devcache_last_error(), "memory_fraction");
	devcache_stats_t s = fx_stats(&f);
	/* Refused before the driver was asked. */
	assert_int_equal(s.num_device_alloc, before.num_device_alloc);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 500 * MiB);
	fx_free(&f, a);
	devcache_close(f.ctx);
}

/* Unmapping leaves holes; when none is wide enough the pool reserves
 * another range rather than fail while the device has room. */
static void a_pool_reserves_more_address_space_when_holes_run_short(void **state)
{
	struct fx f;
	void *p[5];

	(void)state;
	fx_open(&f, "vmm:0", "expandable_segments:True");
	/* The large pool's range is 1160 MiB: fill it with five blocks. */
	for (int i = 0; i < 5; i++)
		p[i] = fx_alloc(&f, 200 * MiB, NULL);
	fx_free(&f, p[1]);
	fx_free(&f, p[3]);
	assert_int_equal(devcache_empty_cache(f.dev), 0);
	fx_free(&f, p[4]);
	fx_free(&f, p[0]);
	/* p[2] alone holds 200 MiB in the middle; the holes either side are
	 * 200 and 560 MiB, too small for 600 MiB, which the device has. */
	assert_int_equal(devcache_empty_cache(f.dev), 0);
	void *q = fx_alloc(&f, 600 * MiB, NULL);
	int n = 0;
	for (struct segment *e = f.a->pools[0]->expandable[0]; e; e = e->enext)
		n++;
	assert_int_equal(n, 2);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.segment[DEVCACHE_POOL_LARGE].current, 2);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 800 * MiB);
	fx_free(&f, q);
	fx_free(&f, p[2]);
	/* More than the device: refused without reserving anything. */
	assert_int_equal(devcache_alloc(f.dev, 2u << 30, NULL, &q), DEVCACHE_ENOMEM);
	n = 0;
	for (struct segment *e = f.a->pools[0]->expandable[0]; e; e = e->enext)
		n++;
	assert_int_equal(n, 2);
	devcache_close(f.ctx);
}

static void gc_leaves_expandable_segments_alone(void **state)
{
	struct fx f;

	(void)state;
	/* 1 GiB device: the threshold is about 307 MiB. */
	fx_open(&f, "vmm:0",
		"expandable_segments:True,memory_fraction:1,garbage_collection_threshold:0.3");
	devcache_stream_t other;
	assert_int_equal(devcache_stream_create(f.dev, &other), 0);
	fx_free(&f, fx_alloc(&f, 200 * MiB, NULL));
	/* 200 MiB more on another stream passes it, but as in PyTorch garbage
	 * collection releases only whole ordinary segments: the free pages
	 * stay mapped until the memory runs out or empty_cache. */
	void *q = fx_alloc(&f, 200 * MiB, other);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 400 * MiB);
	assert_int_equal(s.num_alloc_retries, 0);
	assert_int_equal(s.num_device_free, 0);
	fx_free(&f, q);
	devcache_stream_destroy(f.dev, other);
	devcache_close(f.ctx);
}

static void blocks_left_live_are_unmapped_at_close(void **state)
{
	struct fx keep, f;

	(void)state;
	/* A second context keeps the module loaded, so its accounting of
	 * the device's memory outlives the first. */
	fx_open(&keep, "vmm:1", NULL);
	fx_open(&f, "vmm:1", "expandable_segments:True");
	fx_alloc(&f, 5 * MiB, NULL);
	fx_alloc(&f, 64 * 1024, NULL);
	assert_int_equal(free_memory(&keep), (2u << 30) - 22 * MiB);
	/* The module refuses to destroy a mapped handle, to unmap part of a
	 * mapping or to release what it did not reserve. */
	devcache_close(f.ctx);
	assert_int_equal(free_memory(&keep), 2u << 30);
	devcache_close(keep.ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(only_devices_that_map_get_them),
		cmocka_unit_test(grows_in_place),
		cmocka_unit_test(small_pool_maps_2_mib_pages),
		cmocka_unit_test(empty_cache_unmaps_whole_free_pages),
		cmocka_unit_test(oom_releases_other_streams_pages_and_retries),
		cmocka_unit_test(failed_growth_maps_nothing),
		cmocka_unit_test(pressure_callbacks_free_room),
		cmocka_unit_test(memory_fraction_caps_mapping),
		cmocka_unit_test(a_pool_reserves_more_address_space_when_holes_run_short),
		cmocka_unit_test(gc_leaves_expandable_segments_alone),
		cmocka_unit_test(blocks_left_live_are_unmapped_at_close),
	};

	return RUN_TAP(tests);
}
