/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-alloc-policy.c - one test per rule of the allocator's policy: rounding, pools, splits, oversize, GC, cap. */
#include "tap.h"

#include <dlfcn.h>

#include <json-c/json.h>

#include "alloc-fixture.h"

static void rounding_table(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "host", NULL);
	assert_int_equal(alloc_round_size(f.a, 1), 512);
	assert_int_equal(alloc_round_size(f.a, 512), 512);
	assert_int_equal(alloc_round_size(f.a, 513), 1024);
	assert_int_equal(alloc_round_size(f.a, MiB + 1), MiB + 512);
	assert_int_equal(alloc_round_size(f.a, 1200 * MiB), 1200 * MiB);
	devcache_close(f.ctx);

	fx_open(&f, "host", "roundup_power2_divisions:4");
	assert_int_equal(alloc_round_size(f.a, 1200 * MiB), 1280 * MiB);
	assert_int_equal(alloc_round_size(f.a, 1024 * MiB), 1024 * MiB);
	assert_int_equal(alloc_round_size(f.a, 1500), 1536); /* below 512 x divisions */
	assert_int_equal(alloc_round_size(f.a, 5000), 5120); /* 4096..8192 in steps of 1024 */
	devcache_close(f.ctx);

	/* PyTorch's reading of the list: > replaces the 512 MiB interval too. */
	fx_open(&f, "host", "roundup_power2_divisions:[256:1,512:2,>:8]");
	assert_int_equal(alloc_round_size(f.a, 300 * MiB + 1), 300 * MiB + 512);
	assert_int_equal(alloc_round_size(f.a, 600 * MiB), 640 * MiB);
	assert_int_equal(alloc_round_size(f.a, 3000 * MiB), 3072 * MiB);
	devcache_close(f.ctx);
}

/* The hot paths' rounding, which has no branch on the size with plain
 * rounding, agrees with alloc_round_size() for every request they take
 * (1 byte and up), with and without roundup_power2_divisions. */
static void hit_round_is_alloc_round_size(void **state)
{
	static const char *const settings[] = {NULL, "roundup_power2_divisions:4"};
	static const size_t big[] = {MiB - 1, MiB, MiB + 1, 10 * MiB - 1, 10 * MiB + 1,
				     1200 * MiB + 3, (size_t)1 << 40};
	struct fx f;

	(void)state;
	for (size_t k = 0; k < sizeof settings / sizeof *settings; k++) {
		fx_open(&f, "host", settings[k]);
		assert_true(f.a->plain_rounding == (settings[k] == NULL));
		for (size_t size = 1; size <= 4096; size++)
			assert_int_equal(hit_round(f.a, size), alloc_round_size(f.a, size));
		for (size_t i = 0; i < sizeof big / sizeof *big; i++)
			assert_int_equal(hit_round(f.a, big[i]), alloc_round_size(f.a, big[i]));
		devcache_close(f.ctx);
	}
}

static void small_pool_packs_requests_into_2mib_segments(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "host", NULL);
	char *p = fx_alloc(&f, 1000, NULL), *q = fx_alloc(&f, 1000, NULL);
	assert_int_equal(fx_segment_size(&f, p), 2 * MiB);
	assert_int_equal(fx_block_size(&f, p), 1024);
	assert_ptr_equal(q, p + 1024); /* split from the same segment */
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.segment[DEVCACHE_POOL_SMALL].current, 1);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_SMALL].current, 2 * MiB);
	assert_int_equal(s.allocated_bytes[DEVCACHE_POOL_SMALL].current, 2048);
	assert_int_equal(s.requested_bytes[DEVCACHE_POOL_SMALL].current, 2000);
	assert_int_equal(s.inactive_split[DEVCACHE_POOL_SMALL].current, 1);
	assert_int_equal(s.inactive_split_bytes[DEVCACHE_POOL_ALL].current, 2 * MiB - 2048);
	assert_int_equal(s.segment[DEVCACHE_POOL_LARGE].current, 0);
	/* A remainder of at least 512 bytes is split off in the small pool... */
	assert_ptr_equal(fx_alloc(&f, MiB, NULL), q + 1024);
	assert_ptr_equal(fx_alloc(&f, MiB - 2560, NULL), q + 1024 + MiB);
	assert_int_equal(fx_stats(&f).inactive_split[DEVCACHE_POOL_ALL].current, 1);
	/* ...and the last 512 bytes are used whole. */
	assert_ptr_equal(fx_alloc(&f, 512, NULL), p + 2 * MiB - 512);
	s = fx_stats(&f);
	assert_int_equal(s.inactive_split[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.segment[DEVCACHE_POOL_ALL].current, 1);
	devcache_close(f.ctx);
}

/* The inactive-split figures move by each call's net change, as PyTorch's
 * alloc_found_block() and free_block() move them: their accumulated
 * figures (allocated, freed) count only the rises and the falls of those
 * changes, not a block taken out and put back. */
static void inactive_split_counts_net_changes(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "host", "thread_cache:false");
	char *p = fx_alloc(&f, 512, NULL); /* a new segment cut: +1, +rest */
	char *q = fx_alloc(&f, 512, NULL); /* the rest cut again: -512 */
	devcache_stats_t s = fx_stats(&f);
	devcache_stat_t *n = &s.inactive_split[DEVCACHE_POOL_SMALL];
	devcache_stat_t *b = &s.inactive_split_bytes[DEVCACHE_POOL_SMALL];
	assert_int_equal(n->current, 1);
	assert_int_equal(n->allocated, 1);
	assert_int_equal(n->freed, 0);
	assert_int_equal(b->current, 2 * MiB - 1024);
	assert_int_equal(b->allocated, 2 * MiB - 512);
	assert_int_equal(b->freed, 512);
	assert_int_equal(b->peak, 2 * MiB - 512);
	fx_free(&f, p); /* no free neighbour: +1, +512 */
	s = fx_stats(&f);
	assert_int_equal(n->current, 2);
	assert_int_equal(n->allocated, 2);
	assert_int_equal(b->allocated, 2 * MiB);
	assert_int_equal(b->freed, 512);
	fx_free(&f, q); /* both neighbours absorbed, a whole segment: -2 */
	s = fx_stats(&f);
	assert_int_equal(n->current, 0);
	assert_int_equal(n->allocated, 2);
	assert_int_equal(n->freed, 2);
	assert_int_equal(b->current, 0);
	assert_int_equal(b->allocated, 2 * MiB);
	assert_int_equal(b->freed, 2 * MiB);
	/* A free between a free block and an allocated one: the block
	 * before grows, nothing else. */
	p = fx_alloc(&f, 512, NULL);
	q = fx_alloc(&f, 512, NULL);
	char *r = fx_alloc(&f, 512, NULL);
	fx_free(&f, p);
	s = fx_stats(&f);
	int64_t count = n->allocated, bytes = b->allocated;
	fx_free(&f, q);
	s = fx_stats(&f);
	assert_int_equal(n->allocated, count);
	assert_int_equal(b->allocated, bytes + 512);
	assert_int_equal(n->current, 2);
	fx_free(&f, r);
	devcache_close(f.ctx);
}

static void large_pool_segment_sizes_and_split_threshold(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "host", NULL);
	void *a = fx_alloc(&f, 5 * MiB, NULL);
	assert_int_equal(fx_segment_size(&f, a), 20 * MiB);
	assert_int_equal(fx_block_size(&f, a), 5 * MiB); /* 15 MiB left: split */
	void *b = fx_alloc(&f, 14 * MiB + MiB / 2, NULL);
	/* Only 512 KiB would be left of the 15 MiB block: the large pool does not split that. */
	assert_int_equal(fx_block_size(&f, b), 15 * MiB);
	void *c = fx_alloc(&f, 12 * MiB + 1, NULL); /* 10 MiB and up: rounded to 2 MiB */
	assert_int_equal(fx_segment_size(&f, c), 14 * MiB);
	assert_int_equal(fx_block_size(&f, c), 12 * MiB + 512);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.allocated_bytes[DEVCACHE_POOL_LARGE].current, 32 * MiB + 512);
	assert_int_equal(s.requested_bytes[DEVCACHE_POOL_LARGE].current, 31 * MiB + MiB / 2 + 1);
	devcache_close(f.ctx);

	fx_open(&f, "host", "large_segment_size_mb:32");
	assert_int_equal(fx_segment_size(&f, fx_alloc(&f, 5 * MiB, NULL)), 32 * MiB);
	devcache_close(f.ctx);
}

static void free_coalesces_neighbours(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "host", NULL);
	char *a = fx_alloc(&f, 3 * MiB, NULL), *b = fx_alloc(&f, 3 * MiB, NULL),
	     *c = fx_alloc(&f, 3 * MiB, NULL);
	assert_ptr_equal(b, a + 3 * MiB);
	assert_ptr_equal(c, b + 3 * MiB);
	fx_free(&f, b);
	/* b, and the tail after c: two inactive split blocks */
	assert_int_equal(fx_stats(&f).inactive_split[DEVCACHE_POOL_ALL].current, 2);
	fx_free(&f, a);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.inactive_split[DEVCACHE_POOL_ALL].current, 2);
	assert_int_equal(s.inactive_split_bytes[DEVCACHE_POOL_ALL].current, 17 * MiB);
	/* Fragmentation is the free memory outside the largest free block:
	 * 6 MiB of the 17 lie outside the 11 MiB tail. */
	assert_int_equal(s.largest_free_block, 11 * MiB);
	assert_float_equal(s.fragmentation, 6.0 / 17.0, 1e-9);
	fx_free(&f, c);
	s = fx_stats(&f);
	assert_int_equal(s.inactive_split[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.allocated_bytes[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 20 * MiB);
	/* One free block, however large, is no fragmentation. */
	assert_float_equal(s.fragmentation, 0.0, 0.0);
	/* The whole segment is one free block again. */
	assert_ptr_equal(fx_alloc(&f, 18 * MiB, NULL), a);
	assert_int_equal(fx_stats(&f).num_device_alloc, 1);
	devcache_close(f.ctx);
}

static void oversize_blocks_are_never_split(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "host", "max_split_size_mb:64");
	void *big = fx_alloc(&f, 100 * MiB, NULL);
	fx_free(&f, big);
	assert_int_equal(fx_stats(&f).oversize_segments.current, 1);
	/* PyTorch's max_split_size key, in bytes. */
	assert_int_equal(fx_stats(&f).max_split_size, 64 * MiB);
	/* A request under max_split_size never takes an oversize block. */
	void *small = fx_alloc(&f, 30 * MiB, NULL);
	assert_ptr_not_equal(small, big);
	fx_free(&f, small);
	/* An oversize request takes it whole, within max_non_split_rounding_mb. */
	void *p = fx_alloc(&f, 90 * MiB, NULL);
	assert_ptr_equal(p, big);
	assert_int_equal(fx_block_size(&f, p), 100 * MiB);
	assert_int_equal(fx_stats(&f).oversize_allocations.current, 1);
	fx_free(&f, p);
	/* 100 MiB for 70 MiB wastes more than the default 20 MiB. */
	p = fx_alloc(&f, 70 * MiB, NULL);
	assert_ptr_not_equal(p, big);
	devcache_close(f.ctx);

	fx_open(&f, "host", "max_split_size_mb:64,max_non_split_rounding_mb:40");
	big = fx_alloc(&f, 100 * MiB, NULL);
	fx_free(&f, big);
	assert_ptr_equal(fx_alloc(&f, 70 * MiB, NULL), big);
	devcache_close(f.ctx);
}

/* Four idle 100 MiB segments whose ages, counted in large-pool lookups,
 * are 7, 4, 1 and 1 when a 150 MiB request misses the cache.  *left
 * says which of the four are still cached after it: bit i for the i-th. */
static devcache_stats_t age_four_segments_then_miss(const char *options, unsigned *left)
{
	struct fx f;
	void *s[4];

	fx_open(&f, "good:0", options);
	/* A 20 MiB segment whose free 15 MiB serve the 2 MiB lookups. */
	void *keep = fx_alloc(&f, 5 * MiB, NULL);
	for (int i = 0; i < 4; i++)
		s[i] = fx_alloc(&f, 100 * MiB, NULL);
	for (int i = 0; i < 4; i++) {
		fx_free(&f, s[i]);
		for (int k = 0; k < (i < 2 ? 3 : 0); k++)
			fx_free(&f, fx_alloc(&f, 2 * MiB, NULL));
	}
	void *big = fx_alloc(&f, 150 * MiB, NULL);
	devcache_stats_t st = fx_stats(&f);
	*left = 0;
	for (struct block *idle = f.a->pools[0]->idle_head; idle; idle = idle->inext)
		for (int i = 0; i < 4; i++)
			if (idle->addr == (uintptr_t)s[i])
				*left |= 1u << i;
	fx_free(&f, big);
	fx_free(&f, keep);
	devcache_close(f.ctx);
	return st;
}

static void garbage_collection_releases_longest_idle_first(void **state)
{
	unsigned left;

	(void)state;
	/* 420 MiB reserved is past 30% of 1 GiB by 113 MiB.  The average age
	 * is 3.25: the segments aged 7 and 4 go, both in the first pass,
	 * which does not stop at the target; the two youngest stay. */
	devcache_stats_t st = age_four_segments_then_miss(
		"memory_fraction:1,garbage_collection_threshold:0.3", &left);
	assert_int_equal(st.num_device_free, 2);
	assert_int_equal(st.reserved_bytes[DEVCACHE_POOL_ALL].current, 370 * MiB);
	assert_int_equal(left, 0xc);
	/* As in PyTorch, without memory_fraction the threshold does nothing. */
	st = age_four_segments_then_miss("garbage_collection_threshold:0.3", &left);
	assert_int_equal(st.num_device_free, 0);
	assert_int_equal(st.reserved_bytes[DEVCACHE_POOL_ALL].current, 570 * MiB);
	assert_int_equal(left, 0xf);
	/* Below the threshold nothing goes. */
	st = age_four_segments_then_miss("memory_fraction:1,garbage_collection_threshold:0.5",
					 &left);
	assert_int_equal(st.num_device_free, 0);
	assert_int_equal(left, 0xf);
}

/* PyTorch's best fit: the smallest free block that fits, the lowest
 * address among equals, whatever the order they were freed in. */
static void best_fit_smallest_then_lowest_address(void **state)
{
	struct fx f;
	char *a, *b, *c, *d;

	(void)state;
	fx_open(&f, "host", NULL);
	a = fx_alloc(&f, 14 * MiB, NULL);
	b = fx_alloc(&f, 12 * MiB, NULL);
	c = fx_alloc(&f, 16 * MiB, NULL);
	d = fx_alloc(&f, 12 * MiB, NULL);
	char *lo = b < d ? b : d, *hi = b < d ? d : b;
	/* The higher of the two 12 MiB blocks is freed last. */
	fx_free(&f, lo);
	fx_free(&f, a);
	fx_free(&f, c);
	fx_free(&f, hi);
	assert_ptr_equal(fx_alloc(&f, 11 * MiB, NULL), lo);
	assert_ptr_equal(fx_alloc(&f, 13 * MiB, NULL), a);
	assert_ptr_equal(fx_alloc(&f, 11 * MiB, NULL), hi);
	assert_ptr_equal(fx_alloc(&f, 11 * MiB, NULL), c);
	assert_int_equal(fx_stats(&f).num_device_alloc, 4);
	devcache_close(f.ctx);
}

/* ---- the free-block index against a sorted array ---------------------------- */

static int rb_check(const struct block *n, const struct block *parent)
{
	if (!n)
		return 1;
	assert_ptr_equal(n->tp, parent);
	if (n->red) {
		assert_false(n->tl && n->tl->red);
		assert_false(n->tr && n->tr->red);
	}
	if (n->tl)
		assert_true(n->tl->size < n->size || (n->tl->size == n->size && n->tl->addr < n->addr));
	if (n->tr)
		assert_true(n->size < n->tr->size || (n->size == n->tr->size && n->addr < n->tr->addr));
	int l = rb_check(n->tl, n), r = rb_check(n->tr, n);
	assert_int_equal(l, r);
	return l + !n->red;
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* The index's list, both ways, against its count; and its tree, while it
 * has one. */
static void index_check(const struct free_index *ix, size_t in)
{
	size_t n = 0;

	const struct block *prev = &ix->end;

	assert_false(ix->end.is_free);
	for (const struct block *x = ix->end.fnext; x != &ix->end; prev = x, x = x->fnext, n++) {
		assert_ptr_equal(x->fprev, prev);
		assert_true(x->is_free);
		if (prev != &ix->end)
			assert_true(prev->size < x->size || (prev->size == x->size && prev->addr < x->addr));
	}
	assert_ptr_equal(ix->end.fprev, prev);
	assert_int_equal(n, in);
	/* The tree exists above INDEX_LIST_MAX, not under INDEX_LIST_MIN. */
	if (in > INDEX_LIST_MAX)
		assert_non_null(ix->root);
	if (in < INDEX_LIST_MIN)
		assert_null(ix->root);
	if (ix->root) {
		assert_false(ix->root->red);
		rb_check(ix->root, NULL);
	}
}

/* Random insertions, removals, splits and merges, the count driven to a
 * target in turn: phases that cross INDEX_LIST_MIN and INDEX_LIST_MAX up
 * and down, slowly and at once, and one of thousands of blocks; each step
 * checked against a brute force, the structure in full as the tree comes
 * and goes. */
static void free_index_is_an_ordered_set(void **state)
{
	enum { N = 2000, OPS = 60000, PHASE = 400 };
	static const size_t targets[] = {10,  40, 14, 33, 15, 20, 35, 0,  INDEX_LIST_MAX + 1,
					 INDEX_LIST_MIN - 1, INDEX_LIST_MAX, INDEX_LIST_MIN,
					 1000, 5,  60, 2,  N / 2, 17, 31};
	struct block *blocks = calloc(N, sizeof *blocks);
	struct free_index ix;
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	size_t in = 0, builds = 0, drops = 0;
	bool had_tree = false;

	(void)state;
	assert_non_null(blocks);
	index_init(&ix);
	for (int i = 0; i < N; i++) {
		/* Few distinct sizes, so that equal sizes are common. */
		blocks[i].size = (1 + xorshift(&seed) % 64) * 512;
		blocks[i].addr = (uintptr_t)(i + 1) * 4096;
	}
	for (int op = 0; op < OPS; op++) {
		size_t target = targets[op / PHASE % (sizeof targets / sizeof *targets)];
		struct block *b;
		uint64_t version = ix.version;
		/* A free block or not: most steps move the count toward the
		 * target, the others either way. */
		bool pick_free = in && (xorshift(&seed) % 4 && in != target ? in > target
									: xorshift(&seed) % 2);

		do
			b = &blocks[xorshift(&seed) % N];
		while (b->is_free != pick_free);
		if (op % 3 == 1 && b->is_free && b->size > 512 && xorshift(&seed) % 2) {
			/* A split that leaves b, in the index, smaller. */
			b->size -= 512 * (1 + xorshift(&seed) % (b->size / 512 - 1 ? b->size / 512 - 1 : 1));
			index_key_fell(&ix, b);
			assert_true(b->is_free);
		} else if (op % 3 == 1 && b->is_free) {
			/* A merge that leaves b, in the index, larger. */
			b->size += 512 * (1 + xorshift(&seed) % 8);
			index_key_rose(&ix, b);
			assert_true(b->is_free);
		} else if (b->is_free) {
			index_remove(&ix, b);
			assert_false(b->is_free);
			in--;
		} else {
			index_insert(&ix, b);
			assert_true(b->is_free);
			in++;
		}
		assert_true(ix.version > version);
		assert_int_equal(ix.count, in);
		builds += !had_tree && ix.root;
		drops += had_tree && !ix.root;
		had_tree = ix.root;
		size_t want = (1 + xorshift(&seed) % 66) * 512;
		const struct block *best = NULL, *last = NULL;
		for (int i = 0; i < N; i++) {
			const struct block *x = &blocks[i];

			if (!x->is_free)
				continue;
			if (x->size >= want && (!best || x->size < best->size ||
						(x->size == best->size && x->addr < best->addr)))
				best = x;
			if (!last || x->size > last->size || (x->size == last->size && x->addr > last->addr))
				last = x;
		}
		assert_ptr_equal(index_lower_bound(&ix, want), best);
		assert_ptr_equal(index_last(&ix), last);
		assert_int_equal(index_largest(&ix), last ? last->size : 0);
		if (in < 3 * INDEX_LIST_MAX || op % 500 == 0) {
			index_check(&ix, in);
			/* Walking back from the largest visits every block once, in order. */
			size_t n = 0;
			for (const struct block *x = index_last(&ix), *prev; x; x = prev, n++) {
				prev = index_prev(x);
				if (prev)
					assert_ptr_equal(index_next(prev), x);
			}
			if (in)
				assert_null(index_next(index_last(&ix)));
			assert_int_equal(n, in);
		}
	}
	/* The tree came and went many times. */
	print_message("# the tree built %zu times, dropped %zu\n", builds, drops);
	assert_true(builds >= 10);
	assert_true(drops >= 10);
	free(blocks);
}

static void memory_fraction_caps_without_calling_the_driver(void **state)
{
	struct fx f;
	void *p;
	unsigned long (*calls)(void);
	char path[4096];

	(void)state;
	snprintf(path, sizeof path, "%s/good.so", test_env("TEST_MODULES"));
	void *module = dlopen(path, RTLD_NOW);
	assert_non_null(module);
	*(void **)&calls = dlsym(module, "fake_allocs");
	assert_non_null(calls);
	fx_open(&f, "good:0", "memory_fraction:0.25");
	fx_alloc(&f, 200 * MiB, NULL);
	unsigned long before = calls();
	assert_int_equal(devcache_alloc(f.dev, 100 * MiB, NULL, &p), DEVCACHE_ENOMEM);
	assert_int_equal(calls(), before);
	assert_contains(devcache_last_error(), "memory_fraction");
	assert_int_equal(fx_stats(&f).num_ooms, 1);
	devcache_close(f.ctx);
	dlclose(module);
}

static void caching_off_passes_through(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "host", "caching:false");
	assert_int_equal(fx_stats(&f).max_split_size, -1);
	for (int i = 0; i < 10; i++) {
		void *p = fx_alloc(&f, 1000, NULL);

		/* The size asked for, as the driver would be asked without libdevcache. */
		assert_int_equal(fx_segment_size(&f, p), 1000);
		fx_free(&f, p);
	}
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.num_device_alloc, 10);
	assert_int_equal(s.num_device_free, 10);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].peak, 1000);
	devcache_close(f.ctx);
}

static void empty_cache_returns_unused_segments(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "host", NULL);
	void *keep = fx_alloc(&f, 3 * MiB, NULL);
	/* 11 MiB fits the 17 MiB left of keep's segment; 30 and 50 do not. */
	fx_free(&f, fx_alloc(&f, 11 * MiB, NULL));
	fx_free(&f, fx_alloc(&f, 30 * MiB, NULL));
	fx_free(&f, fx_alloc(&f, 50 * MiB, NULL));
	fx_free(&f, fx_alloc(&f, 100, NULL));
	assert_int_equal(fx_stats(&f).segment[DEVCACHE_POOL_ALL].current, 4);
	assert_int_equal(devcache_empty_cache(f.dev), 0);
	devcache_stats_t s = fx_stats(&f);
	/* The segment holding a live block stays. */
	assert_int_equal(s.segment[DEVCACHE_POOL_ALL].current, 1);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 20 * MiB);
	assert_int_equal(s.num_device_free, s.num_device_alloc - 1);
	fx_free(&f, keep);
	devcache_empty_cache(f.dev);
	assert_int_equal(fx_stats(&f).reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	devcache_close(f.ctx);
}

static void bad_calls_fail_cleanly(void **state)
{
	struct fx f;
	void *p = (void *)1;
	int x;

	(void)state;
	fx_open(&f, "host", NULL);
	assert_int_equal(devcache_alloc(f.dev, 0, NULL, &p), 0);
	assert_null(p);
	assert_int_equal(devcache_free(f.dev, NULL), 0);
	assert_int_equal(devcache_free(f.dev, &x), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "was not allocated by devcache_alloc");
	/* The pinned allocator's message names its own call. */
	assert_int_equal(devcache_host_free(f.dev, &x), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "was not allocated by devcache_host_alloc");
	p = fx_alloc(&f, 100, NULL);
	fx_free(&f, p);
	assert_int_equal(devcache_free(f.dev, p), DEVCACHE_EINVAL); /* double free */
	assert_int_equal(devcache_record_stream(f.dev, &x, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_alloc(f.dev, SIZE_MAX, NULL, &p), DEVCACHE_ENOMEM);
	assert_int_equal(devcache_alloc(NULL, 1, NULL, &p), DEVCACHE_EINVAL);
	assert_int_equal(devcache_alloc(f.dev, 1, NULL, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_free(NULL, p), DEVCACHE_EINVAL);
	assert_int_equal(devcache_stats(f.dev, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_snapshot(f.dev, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_empty_cache(NULL), DEVCACHE_EINVAL);
	/* The host free pointer from another allocator is refused too. */
	void *h = NULL;
	assert_int_equal(devcache_host_alloc(f.dev, 100, &h), 0);
	assert_int_equal(devcache_free(f.dev, h), DEVCACHE_EINVAL);
	assert_int_equal(devcache_host_free(f.dev, h), 0);
	devcache_close(f.ctx);
}

static void stats_resets(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "host", NULL);
	void *p = fx_alloc(&f, 4 * MiB, NULL), *q = fx_alloc(&f, 4 * MiB, NULL);
	fx_free(&f, q);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.allocated_bytes[DEVCACHE_POOL_ALL].peak, 8 * MiB);
	assert_int_equal(devcache_reset_peak(f.dev), 0);
	s = fx_stats(&f);
	assert_int_equal(s.allocated_bytes[DEVCACHE_POOL_ALL].peak, 4 * MiB);
	assert_int_equal(s.allocated_bytes[DEVCACHE_POOL_ALL].allocated, 8 * MiB);
	assert_int_equal(devcache_reset_accumulated(f.dev), 0);
	s = fx_stats(&f);
	assert_int_equal(s.allocated_bytes[DEVCACHE_POOL_ALL].allocated, 0);
	assert_int_equal(s.allocated_bytes[DEVCACHE_POOL_ALL].freed, 0);
	assert_int_equal(s.allocated_bytes[DEVCACHE_POOL_ALL].current, 4 * MiB);
	assert_int_equal(s.num_device_alloc, 0);
	fx_free(&f, p);
	devcache_close(f.ctx);
}

static void pinned_host_memory_has_its_own_stats(void **state)
{
	struct fx f;
	devcache_stats_t s;
	void *h;

	(void)state;
	fx_open(&f, "host", NULL);
	assert_int_equal(devcache_host_alloc(f.dev, 3 * MiB, &h), 0);
	memset(h, 0xab, 3 * MiB);
	assert_int_equal(devcache_host_stats(f.dev, &s), 0);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].current, 1);
	assert_int_equal(s.requested_bytes[DEVCACHE_POOL_ALL].current, 3 * MiB);
	assert_int_equal(fx_stats(&f).allocation[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(devcache_host_free(f.dev, h), 0);
	assert_int_equal(devcache_host_empty_cache(f.dev), 0);
	assert_int_equal(devcache_host_stats(f.dev, &s), 0);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	devcache_close(f.ctx);
}

/* The snapshot read back by json-c: valid JSON, the device, at least
 * min_segments segments in address order, each tiled by its blocks. */
static void check_snapshot_json(const char *text, const char *device, size_t min_segments)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *root, *v, *segs;
	uint64_t last = 0;

	assert_non_null(tok);
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	root = json_tokener_parse_ex(tok, text, (int)strlen(text));
	if (!root)
		fail_msg("not JSON (%s): %s", json_tokener_error_desc(json_tokener_get_error(tok)),
			 text);
	json_tokener_free(tok);
	assert_true(json_object_object_get_ex(root, "device", &v));
	assert_string_equal(json_object_get_string(v), device);
	assert_true(json_object_object_get_ex(root, "segments", &segs));
	assert_true(json_object_is_type(segs, json_type_array));
	assert_true(json_object_array_length(segs) >= min_segments);
	for (size_t i = 0; i < json_object_array_length(segs); i++) {
		struct json_object *seg = json_object_array_get_idx(segs, i), *blocks;
		uint64_t base, size, at;

		assert_true(json_object_object_get_ex(seg, "address", &v));
		base = json_object_get_uint64(v);
		assert_true(i == 0 || base > last);
		last = base;
		assert_true(json_object_object_get_ex(seg, "size", &v));
		size = json_object_get_uint64(v);
		assert_true(json_object_object_get_ex(seg, "pool", &v));
		assert_true(json_object_is_type(v, json_type_string));
		assert_true(json_object_object_get_ex(seg, "blocks", &blocks));
		at = base;
		for (size_t j = 0; j < json_object_array_length(blocks); j++) {
			struct json_object *b = json_object_array_get_idx(blocks, j);

			assert_true(json_object_object_get_ex(b, "address", &v));
			assert_int_equal(json_object_get_uint64(v), at);
			assert_true(json_object_object_get_ex(b, "size", &v));
			at += json_object_get_uint64(v);
			assert_true(json_object_object_get_ex(b, "state", &v));
			assert_true(json_object_is_type(v, json_type_string));
		}
		assert_int_equal(at, base + size);
	}
	json_object_put(root);
}

static void snapshot_lists_segments_and_blocks(void **state)
{
	struct fx f;
	char *text = NULL;
	size_t len = 0;

	(void)state;
	fx_open(&f, "host", NULL);
	void *p = fx_alloc(&f, 5 * MiB, NULL);
	fx_alloc(&f, 1000, NULL);
	FILE *out = open_memstream(&text, &len);
	assert_int_equal(devcache_snapshot(f.dev, out), 0);
	fclose(out);
	assert_contains(text, "{\"device\":\"host\",\"segments\":[");
	assert_contains(text, "\"pool\":\"small\"");
	assert_contains(text, "\"pool\":\"large\"");
	assert_contains(text, "\"size\":5242880,\"requested_size\":5242880,\"state\":\"active_allocated\"");
	assert_contains(text, "\"requested_size\":1000,\"state\":\"active_allocated\"");
	assert_contains(text, "\"state\":\"inactive\"");
	check_snapshot_json(text, "host", 2);
	free(text);
	(void)p;
	devcache_close(f.ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rounding_table),
		cmocka_unit_test(hit_round_is_alloc_round_size),
		cmocka_unit_test(small_pool_packs_requests_into_2mib_segments),
		cmocka_unit_test(inactive_split_counts_net_changes),
		cmocka_unit_test(large_pool_segment_sizes_and_split_threshold),
		cmocka_unit_test(free_coalesces_neighbours),
		cmocka_unit_test(oversize_blocks_are_never_split),
		cmocka_unit_test(garbage_collection_releases_longest_idle_first),
		cmocka_unit_test(best_fit_smallest_then_lowest_address),
		cmocka_unit_test(free_index_is_an_ordered_set),
		cmocka_unit_test(memory_fraction_caps_without_calling_the_driver),
		cmocka_unit_test(caching_off_passes_through),
		cmocka_unit_test(empty_cache_returns_unused_segments),
		cmocka_unit_test(bad_calls_fail_cleanly),
		cmocka_unit_test(stats_resets),
		cmocka_unit_test(pinned_host_memory_has_its_own_stats),
		cmocka_unit_test(snapshot_lists_segments_and_blocks),
	};
	return RUN_TAP(tests);
}
