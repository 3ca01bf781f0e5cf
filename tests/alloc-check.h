/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-check.h - the allocator's invariants: what its statistics say at any moment, and its whole structure when no thread uses it. */
#ifndef DEVCACHE_TEST_ALLOC_CHECK_H
#define DEVCACHE_TEST_ALLOC_CHECK_H

#include "alloc-fixture.h"

/* A block a test holds: the pointer devcache_alloc() gave and the size asked. */
struct held {
	void *ptr;
	size_t size;
};

/* ---- what holds at any moment: one devcache_stats() is one locked copy ---- */

static inline const char *check_stat(const devcache_stat_t *s)
{
	if (s->allocated - s->freed != s->current)
		return "allocated - freed != current";
	if (s->current < 0)
		return "current < 0";
	if (s->peak < s->current)
		return "peak < current";
	return NULL;
}

/* NULL when the statistics agree with each other, else what does not.
 * Threads call it too: it asserts nothing.  With peaks false, the
 * relations between the peaks of different figures are left out: those
 * hold only where one thread at a time made calls (libdevcache(3), Thread
 * safety: while several do, each thread's calls count in the peaks as if
 * they came after the others'), so a test whose threads call at once
 * checks the current figures alone, and each peak against its own. */
static inline const char *check_stats_peaks(const devcache_stats_t *s, bool peaks)
{
	const devcache_stat_t *arrays[] = {s->allocation,      s->segment,
					   s->active,          s->inactive_split,
					   s->allocated_bytes, s->reserved_bytes,
					   s->active_bytes,    s->inactive_split_bytes,
					   s->requested_bytes};
	const devcache_stat_t *all, *small, *large;
	const char *why;

	for (size_t k = 0; k < sizeof arrays / sizeof *arrays; k++) {
		all = &arrays[k][DEVCACHE_POOL_ALL];
		small = &arrays[k][DEVCACHE_POOL_SMALL];
		large = &arrays[k][DEVCACHE_POOL_LARGE];
		for (int p = 0; p < DEVCACHE_POOL_COUNT; p++)
			if ((why = check_stat(&arrays[k][p])))
				return why;
		if (small->current + large->current != all->current)
			return "small + large != all";
		if (peaks && (all->peak > small->peak + large->peak || all->peak < small->peak ||
			      all->peak < large->peak))
			return "the peak of all is not within the pools' peaks";
	}
	if ((why = check_stat(&s->oversize_allocations)) ||
	    (why = check_stat(&s->oversize_segments)))
		return why;
	/* Allocated blocks are active, and so are freed ones waiting on
	 * events, whose requested bytes still count, as PyTorch's; active
	 * blocks and free split ones lie in reserved memory.  True at every
	 * moment, so of the peaks too. */
	for (int p = 0; p < DEVCACHE_POOL_COUNT; p++) {
		if (s->allocation[p].current > s->active[p].current ||
		    (peaks && s->allocation[p].peak > s->active[p].peak))
			return "more blocks allocated than active";
		if (s->requested_bytes[p].current > s->active_bytes[p].current ||
		    (peaks && s->requested_bytes[p].peak > s->active_bytes[p].peak))
			return "more bytes requested than active";
		if (s->allocated_bytes[p].current > s->active_bytes[p].current ||
		    (peaks && s->allocated_bytes[p].peak > s->active_bytes[p].peak))
			return "more bytes allocated than active";
		if (s->active_bytes[p].current + s->inactive_split_bytes[p].current >
			    s->reserved_bytes[p].current ||
		    (peaks && s->active_bytes[p].peak > s->reserved_bytes[p].peak))
			return "more bytes active or free in split segments than reserved";
	}
	/* No num_device_free <= num_device_alloc: expandable segments count
	 * operations, and one mapping may be unmapped in several (stitching
	 * unmaps free granules block by block).  check_counted() checks the
	 * ordinary segments' figures exactly. */
	if ((int64_t)s->largest_free_block > s->reserved_bytes[DEVCACHE_POOL_ALL].current)
		return "largest free block > reserved";
	if (s->fragmentation < 0 || s->fragmentation > 1)
		return "fragmentation outside [0, 1]";
	return NULL;
}

static inline const char *check_stats(const devcache_stats_t *s)
{
	return check_stats_peaks(s, true);
}

/* ---- the structure, read when no thread uses the allocator ---------------- */

struct check_blocks {
	struct block **v;
	size_t n, cap;
};

static inline void check_push(struct check_blocks *l, struct block *b)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 256;
		l->v = realloc(l->v, l->cap * sizeof *l->v);
		assert_non_null(l->v);
	}
	l->v[l->n++] = b;
}

static inline int check_by_address(const void *x, const void *y)
{
	uintptr_t a = (uintptr_t)*(void *const *)x, b = (uintptr_t)*(void *const *)y;

	return a < b ? -1 : a > b;
}

/* Both lists are the same set of blocks, and neither names one twice;
 * frees both. */
static inline void check_same_blocks(struct check_blocks *x, struct check_blocks *y,
				     const char *what)
{
	if (x->n)
		qsort(x->v, x->n, sizeof *x->v, check_by_address);
	if (y->n)
		qsort(y->v, y->n, sizeof *y->v, check_by_address);
	if (x->n != y->n)
		fail_msg("%s: %zu blocks and %zu", what, x->n, y->n);
	for (size_t i = 0; i < x->n; i++) {
		if (x->v[i] != y->v[i])
			fail_msg("%s: not the same blocks", what);
		if (i && x->v[i] == x->v[i - 1])
			fail_msg("%s: %p twice", what, (void *)x->v[i]);
	}
	free(x->v);
	free(y->v);
}

/* The subtree at b of a free index, in order: every block free and of
 * the index's pool, ordered by size then address, parents right, no red
 * node under a red one; returns its black height. */
static inline int check_subtree(const struct stream_pool *pool, bool small, struct block *b,
				const struct block *parent, struct check_blocks *out)
{
	int left, right;

	if (!b)
		return 1;
	assert_ptr_equal(b->tp, parent);
	assert_true(b->is_free && !b->allocated && !b->unmapped);
	assert_true(b->seg->pool == pool && b->seg->small == small);
	assert_false(b->red && parent && parent->red);
	left = check_subtree(pool, small, b->tl, b, out);
	if (out->n) {
		const struct block *p = out->v[out->n - 1];

		assert_true(p->size < b->size || (p->size == b->size && p->addr < b->addr));
	}
	check_push(out, b);
	right = check_subtree(pool, small, b->tr, b, out);
	assert_int_equal(left, right);
	return left + !b->red;
}

/* One free index: a list, both ways, of its pool's free blocks, every
 * one free and of the pool, ordered by size then address, as many as it
 * counts; and a red-black tree over the same blocks in the same order
 * when it has one, which it has above INDEX_LIST_MAX blocks and not
 * under INDEX_LIST_MIN. */
static inline void check_index(const struct free_index *ix, const struct stream_pool *pool,
			       bool small, struct check_blocks *out)
{
	struct check_blocks in_order = {0};
	size_t n = 0;

	const struct block *prev = &ix->end;

	assert_false(ix->end.is_free);
	for (const struct block *b = ix->end.fnext; b != &ix->end; prev = b, b = b->fnext, n++) {
		assert_ptr_equal(b->fprev, prev);
		assert_true(b->is_free && !b->allocated && !b->unmapped);
		assert_true(b->seg->pool == pool && b->seg->small == small);
		if (prev != &ix->end)
			assert_true(prev->size < b->size ||
				    (prev->size == b->size && prev->addr < b->addr));
		check_push(out, (struct block *)b);
	}
	assert_ptr_equal(ix->end.fprev, prev);
	assert_int_equal(n, ix->count);
	if (n > INDEX_LIST_MAX)
		assert_non_null(ix->root);
	if (n < INDEX_LIST_MIN)
		assert_null(ix->root);
	if (!ix->root)
		return;
	assert_false(ix->root->red);
	check_subtree(pool, small, ix->root, NULL, &in_order);
	assert_int_equal(in_order.n, n);
	const struct block *b = ix->end.fnext;

	for (size_t i = 0; i < in_order.n; i++, b = b->fnext)
		assert_ptr_equal(in_order.v[i], b);
	free(in_order.v);
}

/* What a walk of the segments counts, for one pool. */
struct check_tally {
	int64_t allocated, allocated_bytes, requested_bytes, pending, pending_bytes;
	int64_t inactive_split, inactive_split_bytes, reserved_bytes, segments;
};

/* What the walk saw besides the tallies. */
struct check_walk {
	struct check_tally t[2]; /* [0] small, [1] large */
	struct check_blocks free_blocks, allocated;
	int64_t device_allocs, oversize_allocs, oversize_segs, idle, events;
	size_t largest;
};

static inline void check_block(struct check_walk *w, const struct allocator *a,
			       struct segment *seg, struct block *b)
{
	struct check_tally *p = &w->t[!seg->small];

	assert_ptr_equal(b->seg, seg);
	assert_true(!b->next || (b->next->prev == b && b->next->addr == b->addr + b->size));
	assert_true(b->size > 0);
	assert_true(b->allocated + b->is_free + b->unmapped <= 1);
	/* Merged: never two free blocks side by side. */
	assert_false(b->is_free && b->next && b->next->is_free);
	/* Memory, used or not, lies on mapped granules. */
	if (!b->unmapped && seg->expandable)
		for (uintptr_t g = (b->addr - seg->base) / seg->gran;
		     g * seg->gran < b->addr + b->size - seg->base; g++)
			assert_non_null(seg->pages[g]);
	if (b->unmapped) {
		assert_true(seg->expandable);
		assert_false(b->next && b->next->unmapped);
		assert_int_equal((b->addr - seg->base) % seg->gran, 0);
		assert_int_equal(b->size % seg->gran, 0);
		for (size_t i = 0; i < b->size / seg->gran; i++)
			assert_null(seg->pages[(b->addr - seg->base) / seg->gran + i]);
	} else if (b->is_free) {
		check_push(&w->free_blocks, b);
		w->largest = b->size > w->largest ? b->size : w->largest;
		/* A whole segment is idle; the free blocks of split ones are
		 * inactive_split, as PyTorch, but not an expandable segment's,
		 * whose free pages can always be released. */
		if (!b->prev && !b->next && !seg->expandable) {
			w->idle++;
		} else if (!seg->expandable) {
			p->inactive_split++;
			p->inactive_split_bytes += (int64_t)b->size;
		}
	} else if (b->allocated) {
		check_push(&w->allocated, b);
		p->allocated++;
		p->allocated_bytes += (int64_t)b->size;
		p->requested_bytes += (int64_t)b->requested;
		w->oversize_allocs += b->size >= a->max_split_size;
	} else {
		/* Freed, waiting for another stream's work. */
		assert_true(b->pending_events > 0);
		w->events += b->pending_events;
		p->pending++;
		p->pending_bytes += (int64_t)b->size;
		p->requested_bytes += (int64_t)b->requested;
	}
}

/* Its blocks tile the segment exactly; an expandable one's mapped pages
 * and holes agree with its blocks. */
static inline void check_segment(struct check_walk *w, const struct allocator *a,
				 struct segment *seg)
{
	struct check_tally *p = &w->t[!seg->small];
	size_t pages = 0, holes = 0;

	assert_true(!seg->snext || seg->snext->sprev == seg);
	assert_true(seg->sprev || a->segments == seg);
	assert_int_equal(seg->first->addr, seg->base);
	assert_ptr_equal(seg->first->prev, NULL);
	for (struct block *b = seg->first; b; b = b->next) {
		check_block(w, a, seg, b);
		holes += b->unmapped;
		if (!b->next)
			assert_int_equal(b->addr + b->size, seg->base + seg->size);
	}
	if (!seg->expandable) {
		w->device_allocs++;
		p->reserved_bytes += (int64_t)seg->size;
		p->segments++;
		w->oversize_segs += seg->size >= a->max_split_size;
		return;
	}
	assert_int_equal(seg->page % seg->gran, 0);
	for (size_t i = 0; i < seg->size / seg->gran; i++)
		pages += seg->pages[i] != NULL;
	assert_int_equal(pages * seg->gran, seg->mapped);
	for (struct block *h = seg->holes; h; h = h->inext) {
		assert_true(h->unmapped && h->seg == seg);
		assert_true(holes-- > 0);
	}
	assert_int_equal(holes, 0);
	p->reserved_bytes += (int64_t)seg->mapped;
	p->segments += seg->mapped > 0;
}

/* Where the pool paths run (thread caches), block_take() gives a split's
 * new block out as it is on the spares (alloc.c): each must be as
 * calloc() made it, for every field a reader reads before writing. */
static inline void check_spares(const struct allocator *a)
{
	if (!a->tkey_ok)
		return;
	for (size_t i = 0; i < a->n_pools; i++)
		for (struct block *b = a->pools[i]->spares.head; b; b = b->hnext) {
			assert_null(b->uses);
			assert_null(b->tc);
			assert_int_equal(b->pending_events, 0);
			assert_false(b->allocated || b->is_free || b->unmapped);
			assert_int_equal(b->trace_id, 0);
		}
}

/* The lists beside the segments: each pool's idle segments oldest first,
 * pending events, each pool's address table of its allocated blocks. */
static inline void check_lists(struct check_walk *w, const struct allocator *a)
{
	struct check_blocks in_table = {0}, allocated = {0};
	int64_t idle = 0, events = 0;

	for (size_t i = 0; i < a->n_pools; i++) {
		const struct stream_pool *p = a->pools[i];

		for (struct block *b = p->idle_head; b; b = b->inext, idle++) {
			assert_true(b->is_free && !b->prev && !b->next && !b->seg->expandable);
			assert_true(b->seg->pool == p);
			assert_true(b->inext ? b->inext->iprev == b && b->inext->gc_base >= b->gc_base
					     : p->idle_tail == b);
		}
	}
	assert_int_equal(idle, w->idle);
	for (struct pending_event *pe = a->events_head; pe; pe = pe->next, events++) {
		assert_true(!pe->block->allocated && !pe->block->is_free);
		assert_true(pe->next || a->events_tail == pe);
	}
	assert_int_equal(events, w->events);
	for (size_t i = 0; i < a->n_pools; i++) {
		const struct stream_pool *p = a->pools[i];
		size_t used = 0;

		for (size_t k = 0; k < table_slots(p); k++)
			if (p->table[k]) {
				assert_true(p->table[k]->seg->pool == p);
				check_push(&in_table, p->table[k]);
				used++;
			}
		assert_int_equal(used, table_count(p));
	}
	for (size_t i = 0; i < w->allocated.n; i++)
		check_push(&allocated, w->allocated.v[i]);
	check_same_blocks(&in_table, &allocated, "the address table and the allocated blocks");
	check_spares(a);
}

/* The most memory the allocator may reserve: memory_fraction's cap.  With
 * expandable segments PyTorch checks the cap against the segment the
 * request would have had, before it maps pages, which may take up to one
 * large-pool page more. */
static inline uint64_t check_cap(const struct allocator *a)
{
	if (!a->expandable)
		return a->cap;
	return a->cap + round_up(a->large_segment_size, a->vm_granularity);
}

/* Each statistic, pool by pool, is what the walk counted. */
static inline void check_counted(const struct check_walk *w, const struct allocator *a,
				 const devcache_stats_t *s)
{
	for (int k = 0; k < 2; k++) {
		const struct check_tally *t = &w->t[k];
		int p = k ? DEVCACHE_POOL_LARGE : DEVCACHE_POOL_SMALL;

		assert_int_equal(s->allocation[p].current, t->allocated);
		assert_int_equal(s->allocated_bytes[p].current, t->allocated_bytes);
		assert_int_equal(s->requested_bytes[p].current, t->requested_bytes);
		assert_int_equal(s->active[p].current, t->allocated + t->pending);
		assert_int_equal(s->active_bytes[p].current, t->allocated_bytes + t->pending_bytes);
		assert_int_equal(s->inactive_split[p].current, t->inactive_split);
		assert_int_equal(s->inactive_split_bytes[p].current, t->inactive_split_bytes);
		assert_int_equal(s->reserved_bytes[p].current, t->reserved_bytes);
		assert_int_equal(s->segment[p].current, t->segments);
	}
	assert_int_equal(s->oversize_allocations.current, w->oversize_allocs);
	assert_int_equal(s->oversize_segments.current, w->oversize_segs);
	/* Expandable segments count map and unmap operations, as PyTorch,
	 * not pages: check_device_calls() checks those. */
	if (!a->expandable)
		assert_int_equal(s->num_device_alloc - s->num_device_free, w->device_allocs);
	assert_int_equal(s->largest_free_block, w->largest);
	assert_int_equal(a->reserved_total, s->reserved_bytes[DEVCACHE_POOL_ALL].current);
	assert_true(a->reserved_total <= check_cap(a));
}

/* The allocator's structure is whole, every statistic is what a walk of
 * it counts, and held[0..n) are exactly the blocks it has handed out. */
static inline void check_allocator_peaks(struct fx *f, const struct held *held, size_t n, bool peaks)
{
	struct allocator *a = f->a;
	/* A snapshot makes a free that this thread's cache holds real, and
	 * the statistics free the blocks of threads that have ended: the
	 * blocks walked are then those the statistics count. */
	FILE *devnull = fopen("/dev/null", "w");
	assert_non_null(devnull);
	assert_int_equal(devcache_snapshot(f->dev, devnull), 0);
	fclose(devnull);
	devcache_stats_t s = fx_stats(f);
	struct check_walk w = {0};
	struct check_blocks in_index = {0}, holders = {0};
	const char *why = check_stats_peaks(&s, peaks);

	if (why)
		fail_msg("statistics: %s", why);
	for (struct segment *seg = a->segments; seg; seg = seg->snext)
		check_segment(&w, a, seg);
	/* Every free block is in its pool's index, which holds no other. */
	for (size_t i = 0; i < a->n_pools; i++) {
		check_index(&a->pools[i]->small, a->pools[i], true, &in_index);
		check_index(&a->pools[i]->large, a->pools[i], false, &in_index);
	}
	check_same_blocks(&w.free_blocks, &in_index, "the free blocks and the index");
	check_lists(&w, a);
	check_counted(&w, a, &s);
	for (size_t i = 0; i < n; i++) {
		struct block *b = NULL;

		for (size_t k = 0; k < w.allocated.n && !b; k++)
			if (w.allocated.v[k]->addr == (uintptr_t)held[i].ptr)
				b = w.allocated.v[k];
		if (!b)
			fail_msg("%p, which the test holds, is not allocated", held[i].ptr);
		assert_int_equal(b->requested, held[i].size);
		assert_true(b->size >= alloc_round_size(a, held[i].size));
		check_push(&holders, b);
	}
	check_same_blocks(&holders, &w.allocated, "the test's blocks and the allocated ones");
}

/* The same, every peak included: where one thread at a time made calls. */
static inline void check_allocator(struct fx *f, const struct held *held, size_t n)
{
	check_allocator_peaks(f, held, n, true);
}

/* The driver calls are what the statistics counted: a segment each, or
 * for expandable segments a map or unmap operation of whole pages each. */
static inline void check_device_calls(struct fx *f, const devcache_stats_t *s)
{
	const devcache_stat_t *small = &s->reserved_bytes[DEVCACHE_POOL_SMALL];
	const devcache_stat_t *large = &s->reserved_bytes[DEVCACHE_POOL_LARGE];

	if (!f->a->expandable) {
		assert_int_equal(s->segment[DEVCACHE_POOL_ALL].allocated, s->num_device_alloc);
		assert_int_equal(s->segment[DEVCACHE_POOL_ALL].freed, s->num_device_free);
		return;
	}
	int64_t sp = (int64_t)round_up(ALLOC_SMALL_BUFFER, f->a->vm_granularity);
	int64_t lp = (int64_t)round_up(f->a->large_segment_size, f->a->vm_granularity);

	/* Once stitching has run, the large pool maps and unmaps granules. */
	if (f->a->stitched)
		lp = sp;

	assert_int_equal(small->allocated % sp, 0);
	assert_int_equal(large->allocated % lp, 0);
	assert_int_equal(small->freed % sp, 0);
	assert_int_equal(large->freed % lp, 0);
	assert_true((int64_t)s->num_device_alloc <= small->allocated / sp + large->allocated / lp);
	assert_true((int64_t)s->num_device_free <= small->freed / sp + large->freed / lp);
	assert_true(s->num_device_alloc > 0 || small->allocated + large->allocated == 0);
}

#endif
