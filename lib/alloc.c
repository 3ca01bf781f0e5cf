/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc.c - the caching allocator: PyTorch's policy over the backend vtable, for every device. */

/*
 * The policy, which is PyTorch's CUDA caching allocator's (2.4) unless a
 * point below says otherwise, so that a PyTorch user's settings mean the
 * same here and `devcache replay` answers questions about PyTorch:
 *
 * - A request is rounded up to a multiple of 512 bytes, or with
 *   roundup_power2_divisions to the next of N steps between two powers of
 *   two.  Without caching it is not rounded: it goes to the driver as is.
 * - Requests up to 1 MiB are the small pool, served from 2 MiB segments;
 *   larger ones the large pool: under 10 MiB from large_segment_size_mb
 *   (20 MiB) segments, else a segment of their own, rounded to 2 MiB.
 *   Each stream has its own pair of pools: a freed block is reused only on
 *   the stream it was allocated on.
 * - A request takes the best fit of its pool (alloc-index.c): the smallest
 *   free block that fits, the lowest address among equals; never a block
 *   of max_split_size_mb or more for a smaller request, and such a block
 *   for a larger one only within max_non_split_rounding_mb.  What is left
 *   is split off when it is at least 512 bytes (small pool, or expandable
 *   segments) or more than 1 MiB (large pool, requests under
 *   max_split_size_mb).
 * - A freed block merges with its free neighbours.  A block used on other
 *   streams (devcache_record_stream) is free only once events recorded on
 *   them at the free have completed.
 * - On a miss: garbage collection if memory_fraction is set and
 *   garbage_collection_threshold too (PyTorch's age rule: whole large-pool
 *   segments unused for at least the average number of large-pool lookups
 *   go, pass after pass); then a new segment, unless memory_fraction's cap
 *   or the driver refuses; then releasing cached oversize segments toward
 *   max(request, max_split_size) and trying again; then waiting for every
 *   pending event, releasing every whole cached segment and every free
 *   page of the expandable ones and retrying (the one attempt counted in
 *   num_alloc_retries); then, and here libdevcache adds to PyTorch,
 *   stitching with expandable segments (below) and the context's pressure
 *   callbacks (the model cache evicts); then DEVCACHE_ENOMEM with
 *   PyTorch's message and only the advice that fits.
 * - With expandable_segments (alloc-expand.c), each pool maps pages into
 *   one reserved range instead of making segments: 2 MiB pages for the
 *   small pool, large_segment_size_mb for the large one.  A miss maps
 *   pages at the lowest hole that, with the free block before it and the
 *   free or unmapped space after it, can hold the request; best fit counts
 *   a block with the unmapped space after it and walks on to larger
 *   blocks while that figure falls, as PyTorch's does.
 * - Better than PyTorch, with expandable_stitching: where PyTorch's policy
 *   has failed a request, every free granule of the device is unmapped
 *   and its physical page mapped again where the request needs it; from
 *   then on the large pool maps in granules and memory_fraction counts
 *   what is mapped (alloc-expand.c says why).
 *
 * The files: alloc.c the policy's hit and free and the public calls,
 * alloc-miss.c the rest of the allocation path (a stream's first pool, the
 * steps of a miss, segments from the driver and given back, garbage
 * collection, devcache_empty_cache), alloc-index.c the free blocks' tree,
 * alloc-table.c the allocated blocks by address, alloc-expand.c
 * expandable segments and stitching, alloc-events.c blocks used on other
 * streams, alloc-oom.c the out-of-memory message and the pressure
 * callbacks, alloc-life.c creating and destroying an allocator,
 * alloc-stats.c the statistics and the snapshot, alloc-thread.c the
 * thread caches; lock.h is the mutex every lock below is.
 *
 * The locks.  Everything a cache hit changes belongs to one stream's pool:
 * its free-block index, its address table, its idle segments, its spare
 * block structs; and the statistics the hit moves are kept as differences
 * in the calling thread's struct tcache.  So with thread caches on, a
 * thread's hit on the stream it allocated on last (its home pool), and its
 * free of a block of that stream, take that pool's mutex alone
 * (alloc_in_pool, free_in_pool).  Every other call takes world_lock: the
 * allocator's mutex, then every pool's in order, so that no hit is under
 * way; it folds the caller's differences into the allocator's statistics
 * first, which keeps every figure, peaks included, exact on one thread.
 * A hit that finds more to decide (no free block fits, pending events, a
 * block of another stream) has changed nothing and goes on under
 * world_lock.  The pressure callbacks run with world_lock released, and a
 * thread cache's redo of a block freed and asked for again (devcache_alloc
 * and devcache_free) takes no lock at all, as alloc-thread.c shows it may.
 * Without thread caches (thread_cache:false, garbage collection, a trace,
 * expandable segments), world_lock is the allocator's one mutex.
 */
#include "alloc.h"
#include "trace.h"

#include <inttypes.h>
#include <stdlib.h>

/* ---- block structs: a slab, so the hot path never calls malloc ----------- */

/* More block structs on the spare list: false when out of memory. */
static bool slab_add(struct spares *sp)
{
	enum { PER_SLAB = 256 };
	void **slabs = realloc(sp->slabs, (sp->n_slabs + 1) * sizeof *slabs);
	struct block *slab = slabs ? calloc(PER_SLAB, sizeof *slab) : NULL;

	if (slabs)
		sp->slabs = slabs;
	if (!slab)
		return false;
	sp->slabs[sp->n_slabs++] = slab;
	for (int i = 0; i < PER_SLAB; i++) {
		slab[i].hnext = sp->head;
		sp->head = &slab[i];
	}
	return true;
}

/* A pool's own spares: a hit takes and gives back structs under its
 * stream's lock alone.  Every field the allocator reads before writing
 * is set, and no more.  With lean, for use_block()'s front on a pool path,
 * none: that caller writes prev, next, requested and allocated itself;
 * iprev and inext are read only on the idle list, whose push writes both
 * first; and in an allocator with thread caches, where the pool paths
 * run, a spare struct is as calloc() made it or as block_delete() left
 * it, which only deletes blocks that are neither allocated nor free nor
 * waiting for events, with no stream uses and no thread cache (a free
 * block taken out of the index, a merged neighbour, a struct never handed
 * out), and no block there is unmapped (no expandable segments) or has a
 * trace_id (no trace).  alloc-check.h's check_spares() checks it. */
ALLOC_INLINE struct block *block_take(struct stream_pool *pool, bool lean)
{
	struct spares *sp = &pool->spares;

	if (!sp->head && !slab_add(sp))
		return NULL;
	struct block *b = sp->head;
	sp->head = b->hnext;
	if (lean)
		return b;
	b->uses = NULL;
	b->tc = NULL;
	b->pending_events = 0;
	b->is_free = false;
	b->prev = b->next = b->iprev = b->inext = NULL;
	b->allocated = b->unmapped = false;
	b->requested = 0;
	b->trace_id = 0;
	return b;
}

struct block *block_new(struct stream_pool *pool)
{
	return block_take(pool, false);
}

ALLOC_INLINE void block_put(struct stream_pool *pool, struct block *b)
{
	b->hnext = pool->spares.head;
	pool->spares.head = b;
}

void block_delete(struct stream_pool *pool, struct block *b)
{
	while (b->uses) {
		struct stream_use *u = b->uses;

		b->uses = u->next;
		free(u);
	}
	block_put(pool, b);
}

/* ---- the locks --------------------------------------------------------------- */

void world_lock(struct allocator *a)
{
	dc_lock(&a->lock);
	if (a->tkey_ok)
		for (size_t i = 0; i < a->n_pools; i++)
			dc_lock(&a->pools[i]->lock);
	a->world_locks++;
}

void world_unlock(struct allocator *a)
{
	if (a->tkey_ok)
		for (size_t i = a->n_pools; i-- > 0;)
			dc_unlock(&a->pools[i]->lock);
	dc_unlock(&a->lock);
}

/* ---- policy: sizes and pools ---------------------------------------------- */

/* PyTorch's roundup_power2_divisions: round up to the next of N equal steps
 * between the powers of two around size. */
static size_t round_divisions(size_t size, unsigned divisions)
{
	size_t floor2 = (size_t)1 << (63 - __builtin_clzll(size));
	size_t step = floor2 >> (31 - __builtin_clz(divisions));

	if (size == floor2)
		return size;
	if (step == 0)
		return floor2 << 1;
	size_t down = size & ~(step - 1);
	return down == size ? size : down + step;
}

size_t alloc_round_size(const struct allocator *a, size_t size)
{
	/* Without caching every request is its own driver allocation, of
	 * the size asked for, as PyTorch's PYTORCH_NO_CUDA_MEMORY_CACHING. */
	if (!a->caching)
		return size;
	if (size < ALLOC_ROUND)
		return ALLOC_ROUND;
	int idx = 63 - __builtin_clzll(size) - 20;
	unsigned div = a->divisions[idx < 0 ? 0 : idx >= DIVISION_INTERVALS ? DIVISION_INTERVALS - 1 : idx];

	if (div > 1 && size > ALLOC_ROUND * div)
		return round_divisions(size, div);
	return round_up(size, ALLOC_ROUND);
}

static struct free_index *index_of(struct segment *seg)
{
	return seg->small ? &seg->pool->small : &seg->pool->large;
}

/* ---- the paths a helper is inlined into ------------------------------------ */

/* The helpers below are inlined into the allocator-wide path (PATH_ANY:
 * anything may hold) and into the pool paths (alloc_in_pool, free_in_pool),
 * once for each pool of a stream.  A pool path runs only with thread
 * caches, which tcache_init() turns on only with caching and without
 * garbage collection, a trace or expandable segments, and its statistics
 * are a thread's differences, which leave the active figures out
 * (keeps_active); so there those checks fold away, and so does the
 * choice of a pool's statistics and free-block index.  No small-pool
 * block is oversize, max_split_size_mb being above 20 MiB (tunables.def). */
enum path { PATH_ANY, PATH_SMALL, PATH_LARGE };

ALLOC_INLINE bool pool_path(enum path path)
{
	return path != PATH_ANY;
}

ALLOC_INLINE bool seg_small(enum path path, const struct segment *seg)
{
	return path == PATH_ANY ? seg->small : path == PATH_SMALL;
}

/* stats_add(), on a path: the small one leaves the ALL peak to the end
 * of its run (struct tcache's small_run). */
ALLOC_INLINE void path_stats_add(enum path path, devcache_stat_t *array, bool small, uint64_t n)
{
	if (path == PATH_SMALL)
		stat_add(&array[DEVCACHE_POOL_SMALL], n);
	else
		stats_add(array, small, n);
}

ALLOC_INLINE bool seg_expandable(enum path path, const struct segment *seg)
{
	return !pool_path(path) && seg->expandable;
}

/* The free-block index of a pool: the block's segment's pool, passed
 * down by the callers that have it, which saves loading it again. */
ALLOC_INLINE struct free_index *pool_index(struct stream_pool *pool, bool small)
{
	return small ? &pool->small : &pool->large;
}

/* whole_segment(), on a path. */
ALLOC_INLINE bool is_whole(enum path path, const struct block *b)
{
	return !b->prev && !b->next && !seg_expandable(path, b->seg);
}

/* A block's age for garbage collection starts now, as PyTorch's; without
 * garbage collection, as on a pool path, it is never read. */
ALLOC_INLINE void gc_age_start(struct allocator *a, enum path path, struct block *b)
{
	if (!pool_path(path))
		b->gc_base = a->large_lookups;
}

/* ---- free blocks and idle segments ---------------------------------------- */

ALLOC_INLINE void idle_remove(struct stream_pool *pool, struct block *b)
{
	DLQ_REMOVE(pool->idle_head, pool->idle_tail, b, iprev, inext);
}

/* A whole free segment joins its pool's idle list, the newest last. */
ALLOC_INLINE void idle_push(struct stream_pool *pool, struct block *b)
{
	DLQ_PUSH_BACK(pool->idle_head, pool->idle_tail, b, iprev, inext);
}

/* The bookkeeping of a block entering the free set, apart from the index;
 * st: the statistics the call keeps (the allocator's, or its thread's,
 * alloc-thread.c); whole: b is a whole segment, and size: b's size,
 * which a caller that has read them knows. */
ALLOC_INLINE void note_free_as(struct allocator *a, devcache_stats_t *st, struct stream_pool *pool,
			      struct block *b, enum path path, bool whole, uint64_t size)
{
	gc_age_start(a, path, b);
	if (whole && !seg_expandable(path, b->seg)) {
		idle_push(pool, b);
	} else if (!seg_expandable(path, b->seg)) {
		/* As PyTorch, inactive_split leaves expandable segments out:
		 * their free pages can always be released. */
		path_stats_add(path, st->inactive_split, seg_small(path, b->seg), 1);
		path_stats_add(path, st->inactive_split_bytes, seg_small(path, b->seg), size);
	}
}

ALLOC_INLINE void note_free(struct allocator *a, devcache_stats_t *st, struct stream_pool *pool,
			   struct block *b, enum path path)
{
	note_free_as(a, st, pool, b, path, !b->prev && !b->next, b->size);
}

/* And of one leaving it, before its neighbours or size change. */
ALLOC_INLINE void note_taken(devcache_stats_t *st, struct block *b)
{
	if (whole_segment(b)) {
		idle_remove(b->seg->pool, b);
	} else if (!b->seg->expandable) {
		stats_sub(st->inactive_split, b->seg->small, 1);
		stats_sub(st->inactive_split_bytes, b->seg->small, b->size);
	}
}

void make_free(struct allocator *a, struct block *b)
{
	index_insert(index_of(b->seg), b);
	note_free(a, &a->stats, b->seg->pool, b, PATH_ANY);
}

void take_free(struct allocator *a, struct block *b)
{
	index_remove(index_of(b->seg), b);
	note_taken(&a->stats, b);
}

/* A merged block's struct back to the spares: on a pool path it has no
 * stream uses to free (free_in_pool() leaves such a block to the locked
 * path, and a free block has none: defer_free() took them). */
ALLOC_INLINE void block_retire(struct stream_pool *pool, struct block *b, enum path path)
{
	if (pool_path(path))
		block_put(pool, b);
	else
		block_delete(pool, b);
}

/* merge_into_neighbour()'s end, for each of its cases: s has absorbed b
 * and merged - 1 more free neighbours, of absorbed bytes before (size:
 * b's), and is a whole segment now or not. */
ALLOC_INLINE struct block *merged_into(struct allocator *a, devcache_stats_t *st,
				       struct stream_pool *pool, struct free_index *ix,
				       struct block *s, struct block *b, bool whole, unsigned merged,
				       uint64_t absorbed, uint64_t size, enum path path)
{
	block_retire(pool, b, path);
	index_key_rose(ix, s);
	gc_age_start(a, path, s);
	if (seg_expandable(path, s->seg))
		return s;
	bool small = seg_small(path, s->seg);

	if (whole) {
		idle_push(pool, s);
		stats_sub(st->inactive_split, small, merged);
		stats_sub(st->inactive_split_bytes, small, absorbed);
	} else {
		if (merged == 2)
			stats_sub(st->inactive_split, small, 1);
		path_stats_add(path, st->inactive_split_bytes, small, size);
	}
	return s;
}

/* A free's merge: the first free neighbour (the one before, else the one
 * after) absorbs b and the other one, and stays in the index, its key
 * larger, which mostly leaves it where it is; it is returned, and b's
 * struct goes back to the spares.  Without a free neighbour b goes into
 * the index as it is.
 *
 * The inactive-split figures move by the merge's net change, as
 * PyTorch's free_block() moves them: each free neighbour absorbed is one
 * split block and its bytes fewer, and the result, unless it is a whole
 * segment now, one more with its bytes; so a block freed between free
 * neighbours adds its own bytes and nothing else to the accumulated
 * figures.  (The neighbours of a block are never whole segments.)
 *
 * b's neighbours are read once, and each case relinks the address list
 * itself: the one that absorbs b knows which links change, and whether
 * the result is a whole segment follows from the neighbours it saw.  The
 * structs given back keep their stale links, which block_take() or its
 * lean caller writes before anything reads them. */
ALLOC_INLINE struct block *merge_into_neighbour(struct allocator *a, devcache_stats_t *st,
					       struct stream_pool *pool,
					       struct block *b, enum path path)
{
	struct segment *seg = b->seg;
	struct free_index *ix = pool_index(pool, seg_small(path, seg));
	struct block *bp = b->prev, *bn = b->next;
	bool pf = bp && bp->is_free, nf = bn && bn->is_free;
	uint64_t size = b->size;

	if (!pf && !nf) {
		/* A free block's request is never read: use_block() writes
		 * it when the block is handed out again. */
		index_insert(ix, b);
		note_free_as(a, st, pool, b, path, !bp && !bn, size);
		return b;
	}
	if (pf && nf) {
		struct block *before = bp->prev, *after = bn->next;
		uint64_t absorbed = bp->size + bn->size;

		index_remove(ix, bn);
		bp->size = absorbed + size;
		bp->next = after;
		if (after)
			after->prev = bp;
		block_retire(pool, bn, path);
		return merged_into(a, st, pool, ix, bp, b, !before && !after, 2, absorbed, size, path);
	}
	if (pf) {
		struct block *before = bp->prev;
		uint64_t absorbed = bp->size;

		bp->size = absorbed + size;
		bp->next = bn;
		if (bn)
			bn->prev = bp;
		return merged_into(a, st, pool, ix, bp, b, !before && !bn, 1, absorbed, size, path);
	}
	struct block *after = bn->next;
	uint64_t absorbed = bn->size;

	bn->addr = b->addr;
	bn->size = absorbed + size;
	bn->prev = bp;
	if (bp)
		bp->next = bn;
	else
		seg->first = bn;
	return merged_into(a, st, pool, ix, bn, b, !bp && !after, 1, absorbed, size, path);
}

struct block *free_merged(struct allocator *a, struct block *b)
{
	return merge_into_neighbour(a, &a->stats, b->seg->pool, b, PATH_ANY);
}

/* Whether st keeps the active figures.  A thread's differences (struct
 * tcache's st) do not: the calls that move them (its hits, its frees
 * under its pool's lock, its cached frees made real) move active and
 * active_bytes exactly as allocation and allocated_bytes, as no block
 * they free waits for events (free_in_pool leaves those to the locked
 * path, and a block a thread's cache holds as freed is never named for
 * another stream); stats_fold() copies them.  Two statistics fewer to
 * update in every hit and free. */
ALLOC_INLINE bool keeps_active(const struct allocator *a, const devcache_stats_t *st)
{
	return st == &a->stats;
}

/* Return a freed block to its pool, merging it with free neighbours. */
ALLOC_INLINE void free_block(struct allocator *a, devcache_stats_t *st, struct stream_pool *pool,
			    struct block *b, enum path path)
{
	bool small = seg_small(path, b->seg);

	/* Requested bytes go with active ones, when the block is free at
	 * last, as PyTorch counts them. */
	if (!pool_path(path) && keeps_active(a, st)) {
		stats_sub(st->active, small, 1);
		stats_sub(st->active_bytes, small, b->size);
	}
	stats_sub(st->requested_bytes, small, b->requested);
	b = merge_into_neighbour(a, st, pool, b, path);
	/* Pass-through (caching off): straight back to the driver. */
	if (!pool_path(path) && !a->caching && whole_segment(b))
		release_segment(a, b);
}

/* free_block() for the files off the hot path. */
void pool_return(struct allocator *a, struct block *b)
{
	free_block(a, &a->stats, b->seg->pool, b, PATH_ANY);
}

/* ---- finding a block ------------------------------------------------------- */

static size_t expandable_size(const struct block *b)
{
	return b->size + (b->next && b->next->unmapped ? b->next->size : 0);
}

/* PyTorch's get_free_block: the best fit, unless it is an oversize block
 * for a request that is not, or more than max_non_split_rounding_mb larger
 * than an oversize request. */
ALLOC_INLINE struct block *find_cached(struct allocator *a, struct stream_pool *pool, bool small,
				       size_t rsize, enum path path)
{
	struct free_index *ix = small ? &pool->small : &pool->large;
	struct block *b;

	if (!pool_path(path) && a->gc_active && !small)
		a->large_lookups++;
	if ((!pool_path(path) && !a->caching) || !(b = index_lower_bound(ix, rsize)))
		return NULL;
	/* In an expandable segment a block counts, for the best fit, with the
	 * unmapped space after it that it could grow into: PyTorch walks on
	 * to larger blocks while that makes the figure smaller. */
	if (seg_expandable(path, b->seg))
		for (struct block *n; (n = index_next(b)) && expandable_size(n) < expandable_size(b);)
			b = n;
	if (path == PATH_SMALL)
		return b;
	if (rsize < a->max_split_size)
		return b->size < a->max_split_size ? b : NULL;
	return b->size < rsize + a->max_non_split_rounding ? b : NULL;
}

ALLOC_INLINE bool should_split(const struct allocator *a, const struct block *b, size_t rsize,
				enum path path)
{
	size_t rest = b->size - rsize;

	if (!pool_path(path) && !a->caching)
		return false;
	if (seg_small(path, b->seg) || seg_expandable(path, b->seg))
		return rest >= ALLOC_ROUND;
	return rsize < a->max_split_size && rest > ALLOC_SMALL_SIZE;
}

/* use_block()'s split: the allocation is the front of b, in the new
 * block struct front; the free one stays in the index with what is left,
 * its key smaller, which mostly leaves it where it is.  whole: b was a
 * whole segment, a constant in each of use_block()'s calls, so that each
 * is laid out without testing it again. */
ALLOC_INLINE void cut_front(struct allocator *a, devcache_stats_t *st, struct stream_pool *pool,
			    struct block *b, struct block *front, size_t rsize, bool small,
			    bool whole, enum path path)
{
	if (whole)
		idle_remove(pool, b);
	link_before(front, b, b->addr, rsize);
	b->addr += rsize;
	b->size -= rsize;
	index_key_fell(pool_index(pool, small), b);
	gc_age_start(a, path, b);
	if (whole) {
		path_stats_add(path, st->inactive_split, small, 1);
		path_stats_add(path, st->inactive_split_bytes, small, b->size);
	} else if (!seg_expandable(path, b->seg)) {
		stats_sub(st->inactive_split_bytes, small, rsize);
	}
}

/* Take the block from its free list and split off what is not needed.
 * Metadata is made ready first, so a failure leaves the cache as it was. */
ALLOC_INLINE int use_block(struct allocator *a, devcache_stats_t *st, struct stream_pool *pool,
			   struct block **b_p, size_t rsize, size_t requested, enum path path)
{
	struct block *b = *b_p, *front = NULL;

	if (table_reserve(pool) ||
	    (should_split(a, b, rsize, path) && !(front = block_take(pool, pool_path(path)))))
		return err_set(DEVCACHE_ENOMEM, _("out of host memory for allocator metadata"));
	bool small = seg_small(path, b->seg), whole = is_whole(path, b);

	/* The inactive-split figures move as PyTorch's alloc_found_block()
	 * moves them, by the net change: a split block that is cut is its
	 * rsize bytes less; a whole segment cut makes one; a split block
	 * taken whole is one fewer. */
	if (front) {
		if (__builtin_expect(whole, 0))
			cut_front(a, st, pool, b, front, rsize, small, true, path);
		else
			cut_front(a, st, pool, b, front, rsize, small, false, path);
		*b_p = b = front;
	} else if (__builtin_expect(whole, 0)) {
		idle_remove(pool, b);
		index_remove(pool_index(pool, small), b);
	} else {
		index_remove(pool_index(pool, small), b);
		if (!seg_expandable(path, b->seg)) {
			stats_sub(st->inactive_split, small, 1);
			stats_sub(st->inactive_split_bytes, small, b->size);
		}
	}
	table_insert(pool, b);
	b->allocated = true;
	b->requested = requested;
	path_stats_add(path, st->allocation, small, 1);
	path_stats_add(path, st->allocated_bytes, small, b->size);
	if (!pool_path(path) && keeps_active(a, st)) {
		stats_add(st->active, small, 1);
		stats_add(st->active_bytes, small, b->size);
	}
	path_stats_add(path, st->requested_bytes, small, requested);
	if (path != PATH_SMALL && b->size >= a->max_split_size)
		stat_add(&st->oversize_allocations, 1);
	return 0;
}

/* What follows finding a block, on a hit or a miss: take it, trace it,
 * hand it out. */
ALLOC_INLINE int hand_out(struct allocator *a, devcache_stats_t *st, struct stream_pool *pool,
			  struct block *b, size_t rsize, size_t size, struct hit *hit,
			  void **ptr_p, enum path path)
{
	int rc = use_block(a, st, pool, &b, rsize, size, path);

	if (rc)
		return rc;
	if (!pool_path(path) && a->trace) {
		b->trace_id = __atomic_add_fetch(&a->dev->ctx->trace_ids, 1, __ATOMIC_RELAXED);
		trace_alloc(a->trace, b->trace_id, size, pool->index);
	}
	hit->block = b;
	*ptr_p = (void *)b->addr;
	return 0;
}

/* find_cached() and hand_out() for allocate(), off the hot path
 * (alloc-miss.c). */
struct block *find_free(struct allocator *a, struct stream_pool *pool, bool small, size_t rsize)
{
	return find_cached(a, pool, small, rsize, PATH_ANY);
}

int block_hand_out(struct allocator *a, devcache_stats_t *st, struct stream_pool *pool,
		   struct block *b, size_t rsize, size_t size, struct hit *hit, void **ptr_p)
{
	return hand_out(a, st, pool, b, rsize, size, hit, ptr_p, PATH_ANY);
}

/* A cache hit in the common case, taken as allocate() would take it but
 * without its frame: the stream's pool given, no pending events, and no
 * garbage collection (whose lookups count), the statistics kept in st.
 * ALLOC_MISSED, having changed nothing, where allocate() must decide. */
#define ALLOC_MISSED 1

/* The hit of rsize bytes on a path: of the pool path's own pool, or of
 * either (PATH_ANY). */
ALLOC_INLINE int hit_on(struct allocator *a, devcache_stats_t *st, struct stream_pool *pool,
			size_t rsize, size_t size, struct hit *hit, void **ptr_p, enum path path)
{
	struct block *b = find_cached(a, pool, rsize <= ALLOC_SMALL_SIZE, rsize, path);

	if (!b)
		return ALLOC_MISSED;
	note_hit_as(hit, b, is_whole(path, b));
	return hand_out(a, st, pool, b, rsize, size, hit, ptr_p, path);
}

ALLOC_INLINE int allocate_hit(struct allocator *a, devcache_stats_t *st, struct stream_pool *pool,
			      size_t size, struct hit *hit, void **ptr_p)
{
	return hit_on(a, st, pool, hit_round(a, size), size, hit, ptr_p, PATH_ANY);
}

/* ---- the public API ---------------------------------------------------------- */

int alloc_check_dev(devcache_device_t *dev, const char *fn)
{
	if (!dev)
		return err_set(DEVCACHE_EINVAL, _("%s: NULL device"), fn);
	return 0;
}

static __attribute__((noinline)) int alloc_locked(struct allocator *a, size_t size,
						  devcache_stream_t stream, void **ptr_p,
						  bool tried);

/* A hit on the thread's own stream under that stream's lock alone, its
 * statistics kept in the thread's cache; where the rest of the allocation
 * path must decide (having changed nothing but made the thread's cached
 * free real), alloc_locked(), with tried.  A call of its own, and
 * do_alloc's last: the hit saves no register it does not use. */
static __attribute__((noinline)) int alloc_in_pool(struct allocator *a, size_t size,
						   devcache_stream_t stream, void **ptr_p,
						   struct tcache *tc)
{
	struct stream_pool *pool = tc->home;
	struct hit hit; /* read only after a hit, which sets it all */
	int rc = ALLOC_MISSED;

	dc_lock(&pool->lock);
	tcache_flush(a, tc);
	if (!events_pending(a)) {
		size_t rsize = hit_round(a, size);

		if (rsize <= ALLOC_SMALL_SIZE) {
			if (!tc->small_run)
				tcache_run_start(tc);
			rc = hit_on(a, &tc->st, pool, rsize, size, &hit, ptr_p, PATH_SMALL);
		} else {
			if (tc->small_run)
				tcache_run_end(tc);
			rc = hit_on(a, &tc->st, pool, rsize, size, &hit, ptr_p, PATH_LARGE);
		}
		if (rc == 0 && tc->freed_req == size && tcache_may_record(tc))
			tcache_record(a, tc, &hit, pool->stream);
	}
	dc_unlock(&pool->lock);
	if (__builtin_expect(rc == ALLOC_MISSED, 0))
		return alloc_locked(a, size, stream, ptr_p, true);
	return rc;
}

/* A request alloc_in_pool() may take: neither 0 bytes nor absurd. */
ALLOC_INLINE bool plain_request(size_t size)
{
	return size - 1 < SIZE_MAX / 2;
}

/* The allocation path with the allocator-wide lock: everything but a
 * redo or a hit on the thread's own stream; tried: do_alloc() has tried
 * that hit. */
static __attribute__((noinline)) int alloc_locked(struct allocator *a, size_t size,
						  devcache_stream_t stream, void **ptr_p,
						  bool tried)
{
	struct tcache *tc = tcache_own(a);
	struct hit hit = { 0 };
	int rc;

	if (size == 0) {
		*ptr_p = NULL;
		return 0;
	}
	if (size > SIZE_MAX / 2)
		return err_set(DEVCACHE_ENOMEM, _("%s: cannot allocate %zu bytes"), a->dev->id, size);
	if (!tried && tc && tc->home_stream == stream)
		return alloc_in_pool(a, size, stream, ptr_p, tc);
	world_lock(a);
	if (tc || (tc = tcache_new(a))) {
		tcache_flush(a, tc);
		tcache_stats_fold(a, tc);
	}
	struct stream_pool *pool = a->last_pool;
	rc = ALLOC_MISSED;
	if (!a->gc_active && !a->events_head && pool && pool->stream == stream)
		rc = allocate_hit(a, &a->stats, pool, size, &hit, ptr_p);
	if (rc == ALLOC_MISSED)
		rc = allocate(a, size, stream, &hit, ptr_p);
	if (rc == 0 && tc) {
		/* The thread's hits take this stream's lock from now on. */
		tc->home = hit.block->seg->pool;
		tc->home_stream = tc->home->stream;
		if (tc->freed_req == size && tcache_may_record(tc))
			tcache_record(a, tc, &hit, stream);
	}
	world_unlock(a);
	return rc;
}

/* The thread's block, freed by it and asked for again, with its pool as
 * it was: redone without the lock (alloc-thread.c).  A request of 0 bytes
 * never matches, the block's request being at least 1.  Else a hit on
 * the thread's own stream, and only then the rest: each path a call of
 * its own, so that the common ones save no registers they do not use. */
ALLOC_INLINE int do_alloc(struct allocator *a, size_t size, devcache_stream_t stream, void **ptr_p)
{
	struct tcache *tc = tcache_last;
	uint64_t word;

	/* Only tcache_last on the hit path: with no call on it, the compiler
	 * saves no register there (tcache_own() may call).  TC_CACHED is the
	 * state's one odd value; TC_LIVE and a pair more is one store. */
	if (tc->a == a) {
		if (((word = __atomic_load_n(&tc->word, __ATOMIC_RELAXED)) & TC_CACHED) &&
		    tc->req == size && tc->stream == stream &&
		    __atomic_load_n(&tc->ix->version, __ATOMIC_ACQUIRE) == tc->base) {
			__atomic_store_n(&tc->word, word + TC_PAIR + TC_LIVE - TC_CACHED,
					 __ATOMIC_RELAXED);
			*ptr_p = (void *)tc->ptr;
			return 0;
		}
		if (tc->home_stream == stream && plain_request(size))
			return alloc_in_pool(a, size, stream, ptr_p, tc);
	}
	return alloc_locked(a, size, stream, ptr_p, false);
}

/* b, allocated, freed; on a pool path it is used on no other stream. */
ALLOC_INLINE int release_block(struct allocator *a, devcache_stats_t *st, struct stream_pool *pool,
			       struct block *b, enum path path)
{
	bool small = seg_small(path, b->seg);

	b->allocated = false;
	stats_sub(st->allocation, small, 1);
	stats_sub(st->allocated_bytes, small, b->size);
	if (path != PATH_SMALL && b->size >= a->max_split_size)
		stat_sub(&st->oversize_allocations, 1);
	if (!pool_path(path)) {
		if (a->trace)
			trace_free(a->trace, b->trace_id);
		if (b->uses)
			return defer_free(a, b);
	}
	free_block(a, st, pool, b, path);
	return 0;
}

int alloc_release(struct allocator *a, devcache_stats_t *st, struct block *b)
{
	return release_block(a, st, b->seg->pool, b, PATH_ANY);
}

static __attribute__((noinline)) int free_locked(struct allocator *a, void *ptr, bool tried);

/* A free of a block of the thread's own stream, under that stream's lock
 * alone; where the allocator-wide lock is needed (a block of another
 * stream, used on other streams, or not allocated), having changed
 * nothing but made the thread's cached free real, free_locked(), with
 * tried. */
static __attribute__((noinline)) int free_in_pool(struct allocator *a, void *ptr,
						  struct tcache *tc)
{
	uintptr_t addr = (uintptr_t)ptr;
	struct stream_pool *pool = tc->home;
	int rc = ALLOC_MISSED;

	dc_lock(&pool->lock);
	tcache_flush(a, tc);
	struct block *b = table_take(pool, addr);
	if (b && b->uses) {
		table_insert(pool, b);
	} else if (b && (!b->tc || (b = tcache_claim(b, true)))) {
		tc->freed_req = b->requested;
		if (b->seg->small) {
			if (!tc->small_run)
				tcache_run_start(tc);
			rc = release_block(a, &tc->st, pool, b, PATH_SMALL);
		} else {
			if (tc->small_run)
				tcache_run_end(tc);
			rc = release_block(a, &tc->st, pool, b, PATH_LARGE);
		}
	}
	dc_unlock(&pool->lock);
	if (__builtin_expect(rc == ALLOC_MISSED, 0))
		return free_locked(a, ptr, true);
	return rc;
}

/* The free path with the allocator-wide lock; tried: do_free() has tried
 * free_in_pool(). */
static __attribute__((noinline)) int free_locked(struct allocator *a, void *ptr, bool tried)
{
	/* The call that makes a's blocks, for the message: kept off the
	 * hot path's argument lists. */
	const char *what = a->kind == ALLOC_PINNED ? "devcache_host_alloc" : "devcache_alloc";
	struct tcache *tc = tcache_own(a);
	int rc;

	if (!ptr)
		return 0;
	if (!tried && tc && tc->home)
		return free_in_pool(a, ptr, tc);
	world_lock(a);
	if (tc) {
		tcache_flush(a, tc);
		tcache_stats_fold(a, tc);
	}
	struct block *b = tcache_lookup(a, (uintptr_t)ptr, true);
	if (!b) {
		rc = err_set(DEVCACHE_EINVAL,
			     _("%s: %p was not allocated by %s on this device, or was freed already"),
			     a->dev->id, ptr, what);
	} else {
		if (tc || (tc = tcache_new(a)))
			tc->freed_req = b->requested;
		rc = release_block(a, &a->stats, b->seg->pool, b, PATH_ANY);
	}
	world_unlock(a);
	return rc;
}

/* The thread's own last block, its pool as it was: undone; else a free
 * on the thread's own stream, else the rest. */
ALLOC_INLINE int do_free(struct allocator *a, void *ptr)
{
	struct tcache *tc = tcache_last;
	uint64_t word;

	if (tc->a == a) {
		if (__atomic_load_n(&tc->ptr, __ATOMIC_RELAXED) == (uintptr_t)ptr &&
		    ((word = __atomic_load_n(&tc->word, __ATOMIC_RELAXED)) & TC_LIVE) &&
		    __atomic_load_n(&tc->ix->version, __ATOMIC_ACQUIRE) == tc->base) {
			__atomic_store_n(&tc->word, word - (TC_LIVE - TC_CACHED), __ATOMIC_RELAXED);
			return 0;
		}
		if (tc->home && ptr)
			return free_in_pool(a, ptr, tc);
	}
	return free_locked(a, ptr, false);
}

static __attribute__((noinline, cold)) int alloc_bad_args(devcache_device_t *dev)
{
	alloc_check_dev(dev, "devcache_alloc");
	return err_set(DEVCACHE_EINVAL, _("devcache_alloc: NULL argument"));
}

int devcache_alloc(devcache_device_t *dev, size_t size, devcache_stream_t stream, void **ptr_p)
{
	if (__builtin_expect(!dev || !ptr_p, 0))
		return alloc_bad_args(dev);
	return do_alloc(dev->alloc, size, stream, ptr_p);
}

int devcache_free(devcache_device_t *dev, void *ptr)
{
	if (__builtin_expect(!dev, 0))
		return alloc_check_dev(dev, "devcache_free");
	return do_free(dev->alloc, ptr);
}

int devcache_host_alloc(devcache_device_t *dev, size_t size, void **ptr_p)
{
	if (alloc_check_dev(dev, "devcache_host_alloc") || !ptr_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_host_alloc: NULL argument"));
	return do_alloc(dev->pinned, size, NULL, ptr_p);
}

int devcache_host_free(devcache_device_t *dev, void *ptr)
{
	int rc = alloc_check_dev(dev, "devcache_host_free");

	return rc ? rc : do_free(dev->pinned, ptr);
}
