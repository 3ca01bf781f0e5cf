/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-alloc-random.c - random sequences against a reference model, and many threads at once. */
#include "tap.h"

#include <pthread.h>

#include "alloc-fixture.h"

struct live {
	char *ptr;
	size_t size;
	unsigned tag;
};

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Tensor-like sizes: mostly small, some medium, a few large. */
static size_t random_size(uint64_t *s)
{
	uint64_t r = rng(s) % 100;

	if (r < 60)
		return 1 + rng(s) % MiB;
	if (r < 95)
		return MiB + rng(s) % (31 * MiB);
	return 32 * MiB + rng(s) % (168 * MiB);
}

/* The first and last bytes carry a tag: an overlap overwrites one. */
static void stamp(struct live *l)
{
	memset(l->ptr, (int)(l->tag & 0xff), l->size < 64 ? l->size : 64);
	memset(l->ptr + l->size - (l->size < 64 ? l->size : 64), (int)(l->tag & 0xff),
	       l->size < 64 ? l->size : 64);
}

static void check_stamp(const struct live *l)
{
	size_t n = l->size < 64 ? l->size : 64;

	for (size_t i = 0; i < n; i++)
		if ((unsigned char)l->ptr[i] != (l->tag & 0xff) ||
		    (unsigned char)l->ptr[l->size - 1 - i] != (l->tag & 0xff))
			fail_msg("block %p (%zu bytes) was overwritten", (void *)l->ptr, l->size);
}

static int by_ptr(const void *x, const void *y)
{
	const struct live *a = x, *b = y;

	return a->ptr < b->ptr ? -1 : a->ptr > b->ptr;
}

static void check_stat(const devcache_stat_t *s)
{
	assert_int_equal(s->allocated - s->freed, s->current);
	assert_true(s->peak >= s->current);
	assert_true(s->current >= 0);
}

static void check_model(struct fx *f, struct live *live, size_t n)
{
	devcache_stats_t s = fx_stats(f);
	int64_t requested = 0, rounded = 0;

	for (size_t i = 0; i < n; i++) {
		requested += (int64_t)live[i].size;
		rounded += (int64_t)alloc_round_size(f->a, live[i].size);
	}
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].current, n);
	assert_int_equal(s.requested_bytes[DEVCACHE_POOL_ALL].current, requested);
	assert_true(s.allocated_bytes[DEVCACHE_POOL_ALL].current >= rounded);
	assert_true(s.allocated_bytes[DEVCACHE_POOL_ALL].current <=
		    s.reserved_bytes[DEVCACHE_POOL_ALL].current);
	devcache_stat_t *arrays[] = {s.allocation, s.segment, s.active, s.inactive_split,
				     s.allocated_bytes, s.reserved_bytes, s.active_bytes,
				     s.inactive_split_bytes, s.requested_bytes};
	for (size_t k = 0; k < sizeof arrays / sizeof *arrays; k++) {
		for (int p = 0; p < DEVCACHE_POOL_COUNT; p++)
			check_stat(&arrays[k][p]);
		assert_int_equal(arrays[k][DEVCACHE_POOL_SMALL].current +
					 arrays[k][DEVCACHE_POOL_LARGE].current,
				 arrays[k][DEVCACHE_POOL_ALL].current);
	}
	assert_int_equal(s.active[DEVCACHE_POOL_ALL].current, n);
	/* Each driver allocation is a segment; expandable segments count map
	 * operations, as PyTorch, and are checked by their pages instead. */
	int64_t live_allocs = 0, live_segments = 0, mapped = 0;
	for (struct segment *seg = f->a->segments; seg; seg = seg->snext) {
		if (!seg->expandable) {
			live_allocs++, live_segments++, mapped += (int64_t)seg->size;
			continue;
		}
		size_t pages = 0;
		for (size_t i = 0; i < seg->size / seg->gran; i++)
			pages += seg->pages[i] != NULL;
		assert_int_equal(pages * seg->gran, seg->mapped);
		live_segments += seg->mapped > 0;
		mapped += (int64_t)seg->mapped;
		/* Holes are unmapped, never free, and never next to each other. */
		for (struct block *b = seg->first; b; b = b->next) {
			assert_false(b->unmapped && (b->is_free || b->allocated));
			assert_false(b->unmapped && b->next && b->next->unmapped);
			assert_false(b->is_free && b->next && b->next->is_free);
		}
	}
	if (!f->a->expandable)
		assert_int_equal(s.num_device_alloc - s.num_device_free, live_allocs);
	assert_int_equal(s.segment[DEVCACHE_POOL_ALL].current, live_segments);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, mapped);
	/* No two live blocks overlap. */
	qsort(live, n, sizeof *live, by_ptr);
	for (size_t i = 1; i < n; i++)
		if (live[i - 1].ptr + live[i - 1].size > live[i].ptr)
			fail_msg("blocks %p+%zu and %p overlap", (void *)live[i - 1].ptr,
				 live[i - 1].size, (void *)live[i].ptr);
}

static void run_random(const char *options, uint64_t seed, int steps)
{
	struct fx f;
	struct live live[256];
	size_t n = 0;
	devcache_stream_t streams[2] = {NULL, NULL};

	fx_open(&f, "host", options);
	assert_int_equal(devcache_stream_create(f.dev, &streams[1]), 0);
	for (int step = 0; step < steps; step++) {
		bool grow = n == 0 || (n < 256 && rng(&seed) % 100 < 55);

		if (grow) {
			struct live *l = &live[n];

			l->size = random_size(&seed);
			l->tag = (unsigned)step;
			l->ptr = fx_alloc(&f, l->size, streams[rng(&seed) & 1]);
			stamp(l);
			n++;
		} else {
			size_t i = rng(&seed) % n;

			check_stamp(&live[i]);
			fx_free(&f, live[i].ptr);
			live[i] = live[--n];
		}
		if (step % 64 == 0)
			check_model(&f, live, n);
		if (step % 1000 == 999)
			devcache_empty_cache(f.dev);
	}
	check_model(&f, live, n);
	while (n)
		fx_free(&f, live[--n].ptr);
	assert_int_equal(devcache_empty_cache(f.dev), 0);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.inactive_split[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.active_bytes[DEVCACHE_POOL_ALL].current, 0);
	devcache_stream_destroy(f.dev, streams[1]);
	devcache_close(f.ctx);
}

static void random_defaults(void **state)
{
	(void)state;
	run_random(NULL, 0x1234567, 6000);
}

static void random_with_max_split_and_rounding(void **state)
{
	(void)state;
	run_random("max_split_size_mb:64,roundup_power2_divisions:4", 0xfeedface, 6000);
}

static void random_with_gc_and_cap(void **state)
{
	(void)state;
	run_random("garbage_collection_threshold:0.01,max_split_size_mb:32", 0xabcdef, 6000);
}

static void random_expandable(void **state)
{
	(void)state;
	run_random("expandable_segments:True", 0x7e57ab1e, 6000);
}

static void random_expandable_gc_max_split(void **state)
{
	(void)state;
	run_random("expandable_segments:True,garbage_collection_threshold:0.01,max_split_size_mb:32",
		   0xc0ffee, 6000);
}

static void random_caching_off(void **state)
{
	(void)state;
	run_random("caching:false", 0x55aa55, 2000);
}

struct worker {
	struct fx *f;
	uint64_t seed;
	bool own_stream;
	int failures;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	struct live live[32];
	size_t n = 0;
	devcache_stream_t stream = NULL;

	if (w->own_stream && devcache_stream_create(w->f->dev, &stream))
		return (void *)1;
	for (int step = 0; step < 4000; step++) {
		if (n == 0 || (n < 32 && rng(&w->seed) % 2)) {
			struct live *l = &live[n];

			l->size = 1 + rng(&w->seed) % (4 * MiB);
			l->tag = (unsigned)(w->seed & 0xff);
			if (devcache_alloc(w->f->dev, l->size, stream, (void **)&l->ptr)) {
				w->failures++;
				continue;
			}
			memset(l->ptr, (int)l->tag, l->size < 256 ? l->size : 256);
			n++;
		} else {
			size_t i = rng(&w->seed) % n;

			for (size_t k = 0; k < (live[i].size < 256 ? live[i].size : 256); k++)
				if ((unsigned char)live[i].ptr[k] != live[i].tag) {
					w->failures++;
					break;
				}
			if (devcache_free(w->f->dev, live[i].ptr))
				w->failures++;
			live[i] = live[--n];
		}
	}
	while (n)
		w->failures += devcache_free(w->f->dev, live[--n].ptr) != 0;
	if (stream)
		devcache_stream_destroy(w->f->dev, stream);
	return NULL;
}

static void run_threads(const char *options)
{
	struct fx f;
	pthread_t t[4];
	struct worker w[4];

	fx_open(&f, "host", options);
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){&f, 0x9e3779b9u * (unsigned)(i + 1), i % 2 == 0, 0};
		assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		void *ret;

		assert_int_equal(pthread_join(t[i], &ret), 0);
		assert_null(ret);
		assert_int_equal(w[i].failures, 0);
	}
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.active_bytes[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].allocated,
			 s.allocation[DEVCACHE_POOL_ALL].freed);
	assert_int_equal(devcache_empty_cache(f.dev), 0);
	assert_int_equal(fx_stats(&f).reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	devcache_close(f.ctx);
}

static void many_threads_one_device(void **state)
{
	(void)state;
	run_threads(NULL);
}

static void many_threads_expandable(void **state)
{
	(void)state;
	run_threads("expandable_segments:True");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(random_defaults),
		cmocka_unit_test(random_with_max_split_and_rounding),
		cmocka_unit_test(random_with_gc_and_cap),
		cmocka_unit_test(random_expandable),
		cmocka_unit_test(random_expandable_gc_max_split),
		cmocka_unit_test(random_caching_off),
		cmocka_unit_test(many_threads_one_device),
		cmocka_unit_test(many_threads_expandable),
	};
	return RUN_TAP(tests);
}
