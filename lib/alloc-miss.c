/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-miss.c - the allocation path past a cache hit: a stream's pool, a miss's steps, the cache grown and shrunk. */

/*
 * The steps of a miss are the policy's, in its order (alloc.c's note, "On
 * a miss"): garbage collection, a new segment or more of the expandable
 * one, the oversize segments released, everything cached released and
 * one retry, stitching, the pressure callbacks, and out of memory.  A
 * step that frees memory is taken only while memory can help
 * (memory_may_help): a driver that failed for another reason has its
 * error returned at once.
 *
 * Everything here runs under world_lock (devcache_empty_cache takes it),
 * but the pressure callbacks run with it released: other threads allocate
 * meanwhile, so what the driver said is kept aside across them and the
 * stream's pool is looked up again after them.  The hit itself, the free and the block structs are
 * alloc.c's; allocate() reaches its best fit and its hand-out through
 * find_free() and block_hand_out().
 */
#include "alloc.h"
#include "backend-call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- driver calls --------------------------------------------------------- */

/* Keeps what the driver said when it refused memory, for out_of_memory(). */
int driver_refused(struct allocator *a, int rc)
{
	a->driver_rc = rc;
	snprintf(a->driver_why, sizeof a->driver_why, "%s", devcache_last_error());
	return rc;
}

static int driver_alloc(struct allocator *a, size_t size, void **ptr_p)
{
	int rc = a->kind == ALLOC_PINNED ? bk_host_alloc(a->dev, size, ptr_p)
					 : bk_mem_alloc(a->dev, size, ptr_p);

	return rc ? driver_refused(a, rc) : 0;
}

void alloc_driver_free(struct allocator *a, void *ptr)
{
	int rc = a->kind == ALLOC_PINNED ? bk_host_free(a->dev, ptr)
					 : bk_mem_free(a->dev, ptr);

	/* Nothing can be done about a driver that will not take memory back
	 * but say so: the memory is lost to this process. */
	if (rc)
		log_msg(&a->dev->ctx->log, DEVCACHE_LOG_ERROR, _("%s: the driver refused to free %p: %s"),
			a->dev->id, ptr, devcache_last_error());
}

/* ---- segment sizes and the streams' pools --------------------------------- */

static size_t segment_size(const struct allocator *a, size_t rsize)
{
	size_t seg = !a->caching ? rsize
		     : rsize <= ALLOC_SMALL_SIZE ? ALLOC_SMALL_BUFFER
		     : rsize < ALLOC_MIN_LARGE ? a->large_segment_size
					       : round_up(rsize, ALLOC_ROUND_LARGE);
	size_t limit = a->max_alloc & ~(size_t)(ALLOC_ROUND - 1);

	/* Never larger than the driver makes: allocate() has seen that the
	 * request itself is not. */
	return seg > a->max_alloc && rsize <= limit ? limit : seg;
}

static struct stream_pool *pool_find(struct allocator *a, devcache_stream_t stream)
{
	for (size_t i = 0; i < a->n_pools; i++)
		if (a->pools[i]->stream == stream)
			return a->last_pool = a->pools[i];
	if (a->n_pools == a->pools_cap) {
		size_t cap = a->pools_cap ? 2 * a->pools_cap : 4;
		struct stream_pool **p = realloc(a->pools, cap * sizeof *p);

		if (!p)
			return NULL;
		a->pools = p;
		a->pools_cap = cap;
	}
	struct stream_pool *pool = aligned_alloc(_Alignof(struct stream_pool), sizeof *pool);
	if (!pool)
		return NULL;
	memset(pool, 0, sizeof *pool);
	index_init(&pool->small);
	index_init(&pool->large);
	/* Made under world_lock, which holds every pool's lock: so is it. */
	if (a->tkey_ok)
		dc_lock(&pool->lock);
	pool->stream = stream;
	/* In traces the default stream is 0 and the others count from 1 in the
	 * order they are first used. */
	pool->index = stream ? ++a->stream_indices : 0;
	a->pools[a->n_pools++] = pool;
	return a->last_pool = pool;
}

static inline struct stream_pool *pool_for(struct allocator *a, devcache_stream_t stream)
{
	if (a->last_pool && a->last_pool->stream == stream)
		return a->last_pool;
	return pool_find(a, stream);
}

/* ---- growing and shrinking the cache -------------------------------------- */

/* Give a whole free segment back to the driver. */
void release_segment(struct allocator *a, struct block *b)
{
	struct segment *seg = b->seg;

	take_free(a, b);
	alloc_driver_free(a, seg->handle);
	a->stats.num_device_free++;
	a->reserved_total -= seg->size;
	stats_sub(a->stats.segment, seg->small, 1);
	stats_sub(a->stats.reserved_bytes, seg->small, seg->size);
	if (seg->size >= a->max_split_size)
		stat_sub(&a->stats.oversize_segments, 1);
	DL_REMOVE(a->segments, seg, sprev, snext);
	block_delete(seg->pool, b);
	free(seg);
}

/* A new segment goes on the allocator's list, with b as its one block. */
void segment_add(struct allocator *a, struct segment *seg, struct block *b)
{
	DL_PUSH_FRONT(a->segments, seg, sprev, snext);
	b->addr = seg->base;
	b->size = seg->size;
	b->seg = seg;
	seg->first = b;
}

static struct block *alloc_segment(struct allocator *a, struct stream_pool *pool, bool small,
				   size_t size, bool retry, bool *capped)
{
	void *ptr = NULL;
	struct segment *seg;
	struct block *b;

	if (retry)
		a->stats.num_alloc_retries++;
	if (a->reserved_total + size > a->cap || a->reserved_total + size < size) {
		*capped = true;
		return NULL;
	}
	if (!(seg = aligned_alloc(_Alignof(struct segment), sizeof *seg)) ||
	    !(b = block_new(pool))) {
		free(seg);
		return NULL;
	}
	if (driver_alloc(a, size, &ptr)) {
		free(seg);
		block_delete(pool, b);
		return NULL;
	}
	a->stats.num_device_alloc++;
	*seg = (struct segment){.base = (uintptr_t)ptr, .size = size, .handle = ptr,
				.pool = pool, .small = small};
	segment_add(a, seg, b);
	a->reserved_total += size;
	stats_add(a->stats.segment, small, 1);
	stats_add(a->stats.reserved_bytes, small, size);
	if (size >= a->max_split_size)
		stat_add(&a->stats.oversize_segments, 1);
	/* Accounted as a free whole segment, taken at once by the caller. */
	make_free(a, b);
	return b;
}

/* Memory for a request the cache cannot serve: a new segment, or more of
 * the expandable one.  The last attempts (retry) may stitch, where
 * PyTorch's policy has failed. */
static struct block *grow(struct allocator *a, struct stream_pool *pool, bool small, size_t rsize,
			  size_t seg_size, bool retry, bool *capped)
{
	struct block *b;

	if (!a->expandable)
		return alloc_segment(a, pool, small, seg_size, retry, capped);
	b = expandable_grow(a, pool, small, rsize, seg_size, retry, capped);
	if (!b && retry && a->stitching)
		b = expandable_stitch(a, pool, small, rsize, capped);
	return b;
}

/* Garbage collection, PyTorch's: when reserved memory is above the
 * threshold (a fraction of memory_fraction's cap), release whole cached
 * segments of the large pools, those unused for longer than the average
 * first, pass after pass, until enough is released or none is left.  A
 * block's age is the number of large-pool lookups since it was freed; a
 * pass does not stop at the target, so that collection stays rare. */
static void collect_garbage(struct allocator *a)
{
	uint64_t limit = (uint64_t)(a->gc_threshold * (double)a->cap);
	uint64_t target, reclaimed = 0, total_age = 0, n = 0;
	bool freed = true;

	if (a->reserved_total <= limit)
		return;
	target = a->reserved_total - limit;
	for (size_t i = 0; i < a->n_pools; i++)
		for (struct block *b = a->pools[i]->idle_head; b; b = b->inext)
			if (!b->seg->small) {
				total_age += a->large_lookups - b->gc_base;
				n++;
			}
	/* A pass releases every segment of at least the average age, so the
	 * order of the pools does not matter. */
	while (reclaimed < target && freed && n > 0) {
		double threshold = (double)total_age / (double)n;
		struct block *next;

		freed = false;
		for (size_t i = 0; i < a->n_pools; i++)
			for (struct block *b = a->pools[i]->idle_head; b; b = next) {
				uint64_t age = a->large_lookups - b->gc_base;

				next = b->inext;
				if (b->seg->small || (double)age < threshold)
					continue;
				freed = true;
				reclaimed += b->size;
				total_age -= age;
				n--;
				release_segment(a, b);
			}
	}
}

/* PyTorch's release_available_cached_blocks: free one cached oversize block
 * big enough for the request, or else the largest ones until enough is
 * free. Only oversize blocks exist only when max_split_size_mb is set. */
static bool release_oversize(struct allocator *a, struct stream_pool *pool, size_t rsize)
{
	if (a->max_split_size == SIZE_MAX)
		return false;
	size_t want = rsize > a->max_split_size ? rsize : a->max_split_size;
	struct block *b = index_lower_bound(&pool->large, want);

	if (b) {
		release_segment(a, b);
		return true;
	}
	/* Else the largest, while they are oversize, until want is released. */
	size_t released = 0;
	for (b = index_last(&pool->large); b && released < want && b->size >= a->max_split_size;) {
		struct block *prev = index_prev(b);

		released += b->size;
		release_segment(a, b);
		b = prev;
	}
	return released >= want;
}

/* Wait for every pending event, then give every idle segment back. */
static void release_cached(struct allocator *a)
{
	tcache_reap(a);
	if (a->events_head) {
		process_events(a, true);
		a->stats.num_sync_all_streams++;
	}
	for (size_t i = 0; i < a->n_pools; i++)
		while (a->pools[i]->idle_head)
			release_segment(a, a->pools[i]->idle_head);
	if (a->expandable)
		expandable_release_all(a, 0);
}

/* ---- the allocation path under world_lock --------------------------------- */

/* Whether freeing memory can help where the driver refused: not when it
 * failed for another reason (a lost device, an illegal address), which
 * emptying the cache and evicting models would not cure; its error is then
 * the answer at once, as PyTorch raises any error but out of memory. */
static bool memory_may_help(const struct allocator *a)
{
	return a->driver_rc == 0 || a->driver_rc == DEVCACHE_ENOMEM;
}

/* The whole allocation path; called and returns under world_lock, though
 * the pressure callbacks run with it released. */
int allocate(struct allocator *a, size_t size, devcache_stream_t stream, struct hit *hit,
	     void **ptr_p)
{
	size_t rsize = hit_round(a, size);
	bool small = rsize <= ALLOC_SMALL_SIZE, capped = false;
	struct stream_pool *pool = pool_for(a, stream);
	struct block *b;

	if (!pool)
		return err_set(DEVCACHE_ENOMEM, _("out of host memory for allocator metadata"));
	/* Rounding does not take a request past the driver's limit; beyond
	 * it, no memory freed would help. */
	if (rsize > a->max_alloc && a->caching && round_up(size, ALLOC_ROUND) <= a->max_alloc)
		rsize = round_up(size, ALLOC_ROUND);
	if (rsize > a->max_alloc)
		return above_limit(a, size);
	if (a->events_head)
		process_events(a, false);
	size_t seg = segment_size(a, rsize);
	if ((b = find_free(a, pool, small, rsize))) {
		note_hit(hit, b);
	} else {
		/* Only a miss asks the driver: only then can it refuse. */
		a->driver_rc = 0;
		a->driver_why[0] = '\0';
		if (a->gc_active)
			collect_garbage(a);
		b = grow(a, pool, small, rsize, seg, false, &capped);
		/* Expandable segments have no oversize segments: their free
		 * pages go back in the next step.  As PyTorch, only the
		 * attempt after releasing everything counts as a retry. */
		if (!b && memory_may_help(a) && !a->expandable && release_oversize(a, pool, rsize))
			b = alloc_segment(a, pool, small, seg, false, &capped);
		if (!b && memory_may_help(a)) {
			release_cached(a);
			b = grow(a, pool, small, rsize, seg, true, &capped);
		}
		if (!b && memory_may_help(a)) {
			devcache_ctx_t *ctx = a->dev->ctx;
			/* Other threads allocate while the lock is released: what
			 * the driver said to this one is kept aside meanwhile. */
			int driver_rc = a->driver_rc;
			char driver_why[sizeof a->driver_why];

			memcpy(driver_why, a->driver_why, sizeof driver_why);
			world_unlock(a);
			size_t freed = call_pressure(ctx, a->dev, seg);
			world_lock(a);
			tcache_flush_own(a);
			a->driver_rc = driver_rc;
			memcpy(a->driver_why, driver_why, sizeof driver_why);
			if (freed) {
				pool = pool_for(a, stream);
				b = pool ? find_free(a, pool, small, rsize) : NULL;
				if (!b && pool)
					b = grow(a, pool, small, rsize, seg, true, &capped);
			}
		}
	}
	if (!b)
		return out_of_memory(a, size, a->expandable ? rsize : seg,
				     capped);
	return block_hand_out(a, &a->stats, pool, b, rsize, size, hit, ptr_p);
}

/* ---- emptying the cache --------------------------------------------------- */

static int empty(struct allocator *a)
{
	world_lock(a);
	tcache_flush_own(a);
	release_cached(a);
	world_unlock(a);
	return 0;
}

/* The model cache's frees (keep_freed_vram false): the block freed, then
 * its segment released if that left it whole and free, so that the
 * program's own cached segments stay.  An expandable segment gives back
 * as many free pages as the block took. */
int alloc_free_to_driver(devcache_device_t *dev, void *ptr, size_t size)
{
	struct allocator *a = dev->alloc;
	uintptr_t addr = (uintptr_t)ptr;
	int rc = devcache_free(dev, ptr);

	if (rc || !ptr)
		return rc;
	world_lock(a);
	tcache_flush_own(a);
	for (size_t i = 0; i < a->n_pools; i++)
		for (struct block *b = a->pools[i]->idle_head; b; b = b->inext)
			if (addr >= b->seg->base && addr - b->seg->base < b->seg->size) {
				release_segment(a, b);
				goto out;
			}
	for (struct segment *s = a->segments; s; s = s->snext)
		if (s->expandable && addr >= s->base && addr - s->base < s->size) {
			size_t rsize = alloc_round_size(a, size);

			expandable_release_all(a, a->reserved_total > rsize ? a->reserved_total - rsize : 0);
			break;
		}
out:
	world_unlock(a);
	return 0;
}

int devcache_empty_cache(devcache_device_t *dev)
{
	int rc = alloc_check_dev(dev, "devcache_empty_cache");

	return rc ? rc : empty(dev->alloc);
}

int devcache_host_empty_cache(devcache_device_t *dev)
{
	int rc = alloc_check_dev(dev, "devcache_host_empty_cache");

	return rc ? rc : empty(dev->pinned);
}
