/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-thread.c - thread caches: a block freed and asked for again by its thread, undone and redone without the lock. */

/*
 * Why this is exact.  The policy is deterministic: the same state and the
 * same request give the same block.  When a thread's allocation A was a
 * hit (it took part or all of a free block M and made no segment), freeing
 * A merges it back into M and leaves the allocator exactly as it was before
 * A, since M's neighbours were not free; allocating the same size again on
 * the same stream then takes A again, and leaves it exactly as after A.
 * So while nothing else has touched that pool's free blocks since A (the
 * version of its index, raised by every change to it, is the one recorded
 * after A), a free of A and the same request again need not be done at
 * all: the thread's cache marks A freed (TC_CACHED) and allocated again
 * (TC_LIVE), and counts the statistics that the free and the redo would
 * have moved.  Every other call of the thread takes the lock and first
 * makes a cached free real (tcache_flush_own), so on one thread every
 * result, address and statistic is what PyTorch's policy gives, as the
 * differential test checks.  Nothing else decides a hit: garbage
 * collection, traces, pending events and expandable segments, which do,
 * leave the cache off.  A hit is recorded only when the thread's last
 * free with the lock was of the same size, so that calls that do not
 * repeat (most of a decoding trace) pay for no record; and where such
 * records go unused, TC_WASTED in a row (calls that repeat their size but
 * not the pool), only one in TC_SKIP + 1 is made until a redo.  Which
 * calls are redone changes no result: a redo is what the call gives.
 *
 * With several threads a cached free of one thread is done, for the
 * others, at that thread's next call that takes the lock, or after its
 * exit at the next release, statistics read or new cache (tcache_reap):
 * every result is what the policy gives for an order of the calls that
 * keeps each thread's own order, which is what any order of threads taking
 * one lock gives; only the order is not always the order in time.  The
 * statistics read with no call in flight are exact (tcache_extra adds what
 * the caches hold, each cached free counted as it would be made then,
 * beside the blocks that are there now); peaks are exact on one thread,
 * and with several may count a block another thread's cache holds as
 * freed.  Only small-pool blocks are cached, so a thread holds at most
 * 1 MiB that the others do not see.
 *
 * The same struct carries the thread's home pool, whose lock alone its
 * hits take (alloc.c, The locks), and the differences those hits make in
 * the statistics (st), folded into the allocator's by
 * tcache_stats_fold() under world_lock: by the thread at each of its
 * calls that takes it, by a read of the statistics for every thread, and
 * for a thread that has ended at tcache_reap.  The cached block is always in the home pool: the home
 * changes only under world_lock, after the cache is flushed.
 *
 * The redo takes no lock and writes nothing that another thread
 * writes: the thread's struct tcache, found through tcache_last (or
 * pthread_getspecific() when the thread used another allocator last), on
 * cache lines of its own, and a load of the pool's version, which other
 * threads write only when they change that pool.  Another thread writes a cache only under the lock,
 * to take back a block that it frees or names a stream for (TC_NONE); a
 * reset of the peaks raises every version, so that every redo after it
 * takes the lock and counts in the new peaks.
 */
#include "alloc.h"

#include <stdlib.h>
#include <string.h>

/* A cache's life, for the thread's exit and the allocator's end, which may
 * come in either order: whichever comes second frees the struct. */
enum { TC_ALIVE, TC_EXITED, TC_ORPHAN };

static devcache_stat_t *ts_stat(devcache_stats_t *s, int i)
{
	switch (i) {
	case TS_ALLOCATION:
		return &s->allocation[DEVCACHE_POOL_SMALL];
	case TS_ALLOCATED_BYTES:
		return &s->allocated_bytes[DEVCACHE_POOL_SMALL];
	case TS_ACTIVE:
		return &s->active[DEVCACHE_POOL_SMALL];
	case TS_ACTIVE_BYTES:
		return &s->active_bytes[DEVCACHE_POOL_SMALL];
	case TS_REQUESTED_BYTES:
		return &s->requested_bytes[DEVCACHE_POOL_SMALL];
	case TS_INACTIVE_SPLIT:
		return &s->inactive_split[DEVCACHE_POOL_SMALL];
	default:
		return &s->inactive_split_bytes[DEVCACHE_POOL_SMALL];
	}
}

/* Its home stream is no caller's either (alloc.h). */
struct tcache tcache_none = { .home_stream = &tcache_none };
__thread struct tcache *tcache_last = &tcache_none;

/* The thread's exit: the allocator, if it is still there, takes the
 * cache's block back at its next registration or at its end.  A later
 * call of the thread (another key's destructor) looks its cache up again,
 * and makes a new one. */
static void tcache_exit(void *p)
{
	struct tcache *tc = p;

	if (tcache_last == tc)
		tcache_last = &tcache_none;
	if (__atomic_exchange_n(&tc->life, TC_EXITED, __ATOMIC_ACQ_REL) == TC_ORPHAN)
		free(tc);
}

void tcache_init(struct allocator *a)
{
	/* Where a free or the allocation does more than the undoing says
	 * (garbage collection ages blocks, a trace records each call,
	 * expandable segments map pages), every call is done, and no thread
	 * has a cache to look for. */
	if (!a->caching || a->gc_active || a->trace || a->expandable)
		return;
	a->tkey_ok = pthread_key_create(&a->tkey, tcache_exit) == 0;
}

/* A net change's part in the accumulated figures: the inactive-split
 * figures move by the net change of a free or an allocation, as PyTorch's
 * (alloc.c), so only a rise adds to them. */
static int64_t rise(int64_t change)
{
	return change > 0 ? change : 0;
}

/* What the statistics of the small pool move, in the order of TS_*: adj
 * in current when the block is freed (the pool as before its allocation),
 * fcum in the accumulated figures by that free, cum by a free and a redo. */
static void tcache_figures(const struct tcache *tc, int64_t adj[TS_N], int64_t fcum[TS_N],
			   int64_t cum[TS_N])
{
	int64_t size = (int64_t)tc->size, req = (int64_t)tc->req;
	int64_t m = (int64_t)tc->merged, rest = m - size;
	/* The free block taken: an inactive split block unless it was a
	 * whole segment; its rest after the cut, if any, is one. */
	int64_t was = tc->whole ? 0 : 1, split = rest > 0 ? 1 : 0;
	int64_t ecum[TS_N] = {1, size, 1, size, req, 0, 0};

	for (int i = 0; i < TS_N; i++)
		adj[i] = fcum[i] = 0;
	adj[TS_ALLOCATION] = adj[TS_ACTIVE] = -1;
	adj[TS_ALLOCATED_BYTES] = adj[TS_ACTIVE_BYTES] = -size;
	adj[TS_REQUESTED_BYTES] = -req;
	adj[TS_INACTIVE_SPLIT] = was - split;
	adj[TS_INACTIVE_SPLIT_BYTES] = was * m - split * rest;
	for (int i = TS_INACTIVE_SPLIT; i <= TS_INACTIVE_SPLIT_BYTES; i++) {
		fcum[i] = rise(adj[i]);
		ecum[i] = rise(-adj[i]);
	}
	for (int i = 0; i < TS_N; i++)
		cum[i] = fcum[i] + ecum[i];
}

/* Fold the redone pairs into the kept statistics and make a cached free
 * real; the cache then holds nothing.  Under the lock, by the owner or for
 * a thread that is gone. */
void tcache_fold(struct allocator *a, struct tcache *tc)
{
	uint64_t word = __atomic_load_n(&tc->word, __ATOMIC_RELAXED), pairs = word / TC_PAIR;
	int state = (int)(word & TC_STATE);

	if (pairs) {
		int64_t adj[TS_N], fcum[TS_N], cum[TS_N];

		tcache_figures(tc, adj, fcum, cum);
		for (int i = 0; i < TS_N; i++)
			ts_stat(&tc->st, i)->allocated += (int64_t)pairs * cum[i];
		__atomic_store_n(&tc->word, (uint64_t)state, __ATOMIC_RELAXED);
		tc->wasted = 0;
	}
	if (state != TC_NONE) {
		struct block *b = tc->b;

		tcache_detach(tc);
		if (state == TC_CACHED) {
			table_take(b->seg->pool, b->addr);
			alloc_release(a, &tc->st, b);
		}
	}
}

/* The arrays of TS_RUN_*, in that order. */
#define EACH_RUN_ARRAY(X)                                                                      \
	X(TS_RUN_ALLOCATION, allocation) X(TS_RUN_ALLOCATED_BYTES, allocated_bytes)           \
	X(TS_RUN_REQUESTED_BYTES, requested_bytes) X(TS_RUN_INACTIVE_SPLIT, inactive_split)   \
	X(TS_RUN_INACTIVE_SPLIT_BYTES, inactive_split_bytes)

void tcache_run_start(struct tcache *tc)
{
#define RUN_START(i, name)                                                                     \
	tc->run_peak[i] = tc->st.name[DEVCACHE_POOL_SMALL].peak;                               \
	tc->st.name[DEVCACHE_POOL_SMALL].peak = tc->st.name[DEVCACHE_POOL_SMALL].current;
	EACH_RUN_ARRAY(RUN_START)
#undef RUN_START
	tc->small_run = true;
}

void tcache_run_end(struct tcache *tc)
{
#define RUN_END(i, name)                                                                       \
	{                                                                                      \
		devcache_stat_t *array = tc->st.name;                                          \
		int64_t all = array[DEVCACHE_POOL_SMALL].peak + array[DEVCACHE_POOL_LARGE].current; \
                                                                                               \
		if (all > array[DEVCACHE_POOL_ALL].peak)                                       \
			array[DEVCACHE_POOL_ALL].peak = all;                                   \
		if (tc->run_peak[i] > array[DEVCACHE_POOL_SMALL].peak)                         \
			array[DEVCACHE_POOL_SMALL].peak = tc->run_peak[i];                     \
	}
	EACH_RUN_ARRAY(RUN_END)
#undef RUN_END
	tc->small_run = false;
}

void tcache_flush_own(struct allocator *a)
{
	struct tcache *tc = tcache_own(a);

	if (tc) {
		tcache_flush(a, tc);
		tcache_stats_fold(a, tc);
	}
}

void tcache_fold_all(struct allocator *a)
{
	for (struct tcache *tc = a->tcaches; tc; tc = tc->next)
		tcache_stats_fold(a, tc);
}

void tcache_reap(struct allocator *a)
{
	struct tcache *tc, **link = &a->tcaches;

	while ((tc = *link))
		if (__atomic_load_n(&tc->life, __ATOMIC_ACQUIRE) == TC_EXITED) {
			tcache_flush(a, tc);
			tcache_stats_fold(a, tc);
			*link = tc->next;
			free(tc);
		} else {
			link = &tc->next;
		}
}

/* A new cache for this thread, on the allocator's list; the caches of
 * threads that have exited are emptied and freed meanwhile. */
struct tcache *tcache_new(struct allocator *a)
{
	struct tcache *tc;

	if (!a->tkey_ok)
		return NULL;
	tcache_reap(a);
	/* Cache lines of its own: the owner writes it on every redo, and
	 * another thread's cache beside it would share those writes. */
	size_t size = round_up(sizeof *tc, 64);
	if (!(tc = aligned_alloc(64, size)))
		return NULL;
	memset(tc, 0, size);
	if (pthread_setspecific(a->tkey, tc)) {
		free(tc);
		return NULL;
	}
	tc->a = a;
	tc->home_stream = tc;
	tc->next = a->tcaches;
	a->tcaches = tc;
	tcache_last = tc;
	return tc;
}

void tcache_record(struct allocator *a, struct tcache *tc, const struct hit *hit,
		   devcache_stream_t stream)
{
	struct block *b = hit->block;

	/* Pending events may complete, and free blocks, at any call. */
	if (!hit->hit || events_pending(a) || !b->seg->small || b->size >= a->max_split_size)
		return;
	tc->size = b->size;
	tc->merged = hit->size;
	tc->whole = hit->whole;
	tc->b = b;
	__atomic_store_n(&tc->ptr, b->addr, __ATOMIC_RELAXED);
	tc->req = b->requested;
	tc->stream = stream;
	tc->ix = &b->seg->pool->small;
	tc->base = tc->ix->version;
	b->tc = tc;
	tcache_set_state(tc, TC_LIVE);
}

struct block *tcache_claim(struct block *b, bool take)
{
	if (tcache_state(b->tc) == TC_CACHED) {
		/* Allocated still, for the allocator. */
		if (take)
			table_insert(b->seg->pool, b);
		return NULL;
	}
	/* Freed, or used on another stream, by another thread than its
	 * own: its cache lets it go, and its free is done with the lock. */
	tcache_detach(b->tc);
	return b;
}

void tcache_stop_all(struct allocator *a)
{
	for (size_t i = 0; i < a->n_pools; i++)
		index_moved(&a->pools[i]->small);
}

/* The bytes of the free blocks beside b on one side, with the cached
 * frees of done[0..n) made: those blocks are free too. */
static int64_t free_beside(const struct block *b, bool before, struct block *const *done, size_t n)
{
	int64_t bytes = 0;

	for (const struct block *x = before ? b->prev : b->next; x; x = before ? x->prev : x->next) {
		bool is_free = x->is_free;

		for (size_t k = 0; !is_free && k < n; k++)
			is_free = done[k] == x;
		if (!is_free)
			break;
		bytes += (int64_t)x->size;
	}
	return bytes;
}

/* What a cached free, made after those of done[0..n), changes in the
 * inactive-split figures of adj and fcum: its block merges with the free
 * blocks beside it as alloc_release() would merge it.  tcache_figures()
 * says the same while the pool is as the allocation left it; once another
 * thread has changed the pool (taken the rest of the block the allocation
 * cut, say), only the blocks beside it now tell.  Returns the merged size. */
static int64_t cached_free_figures(const struct tcache *tc, struct block *const *done, size_t n,
				   int64_t adj[TS_N], int64_t fcum[TS_N])
{
	const struct block *b = tc->b;
	int64_t before = free_beside(b, true, done, n), after = free_beside(b, false, done, n);
	int64_t m = before + (int64_t)b->size + after, was = (uint64_t)m == b->seg->size ? 0 : 1;

	adj[TS_INACTIVE_SPLIT] = was - (before > 0) - (after > 0);
	adj[TS_INACTIVE_SPLIT_BYTES] = was * m - before - after;
	fcum[TS_INACTIVE_SPLIT] = rise(adj[TS_INACTIVE_SPLIT]);
	fcum[TS_INACTIVE_SPLIT_BYTES] = rise(adj[TS_INACTIVE_SPLIT_BYTES]);
	return m;
}

void tcache_extra(struct allocator *a, devcache_stats_t *extra)
{
	size_t n_tc = 0, n_done = 0;

	memset(extra, 0, sizeof *extra);
	for (struct tcache *tc = a->tcaches; tc; tc = tc->next)
		n_tc++;
	/* The cached frees are counted as made one after another, in the
	 * list's order: two beside each other merge.  Without memory for
	 * the list, each is counted as the pool was when it was recorded. */
	struct block **done = calloc(n_tc ? n_tc : 1, sizeof *done);
	for (struct tcache *tc = a->tcaches; tc; tc = tc->next) {
		uint64_t word = __atomic_load_n(&tc->word, __ATOMIC_RELAXED);
		int64_t pairs = (int64_t)(word / TC_PAIR);
		bool cached = (word & TC_STATE) == TC_CACHED;
		int64_t adj[TS_N], fcum[TS_N], cum[TS_N], merged = (int64_t)tc->merged;

		if (!pairs && !cached)
			continue;
		tcache_figures(tc, adj, fcum, cum);
		if (cached && done) {
			merged = cached_free_figures(tc, done, n_done, adj, fcum);
			done[n_done++] = tc->b;
		}
		for (int i = 0; i < TS_N; i++) {
			devcache_stat_t *s = ts_stat(extra, i);

			s->allocated += pairs * cum[i];
			if (cached) {
				s->allocated += fcum[i];
				s->current += adj[i];
			}
		}
		if (cached && (uint64_t)merged > extra->largest_free_block)
			extra->largest_free_block = (uint64_t)merged;
	}
	free(done);
}

void tcache_fini(struct allocator *a)
{
	struct tcache *own = a->tkey_ok ? pthread_getspecific(a->tkey) : NULL;

	for (struct tcache *tc = a->tcaches; tc; tc = tc->next) {
		tcache_flush(a, tc);
		tcache_stats_fold(a, tc);
	}
	if (a->tkey_ok)
		pthread_key_delete(a->tkey);
	while (a->tcaches) {
		struct tcache *tc = a->tcaches;

		a->tcaches = tc->next;
		/* A thread still running keeps its struct, which belongs
		 * to no allocator now, should another be made where a was.
		 * Its exit frees it if it is under way now; a later one,
		 * with the key gone, cannot, so a program that closes the
		 * context before its threads end loses one small struct per
		 * such thread.  This thread's own is freed here. */
		if (tc == own) {
			if (tcache_last == tc)
				tcache_last = &tcache_none;
			free(tc);
		} else if (tc->a = NULL,
			   __atomic_exchange_n(&tc->life, TC_ORPHAN, __ATOMIC_ACQ_REL) == TC_EXITED) {
			free(tc);
		}
	}
}
