/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc.h - the caching allocator's internal structures: blocks, segments, free-block index, pools. */
#ifndef DEVCACHE_ALLOC_H
#define DEVCACHE_ALLOC_H

#include "internal.h"
#include "list.h"
#include "lock.h"

/* PyTorch's constants, so the policy matches its native allocator. */
#define ALLOC_ROUND ((size_t)512)           /* every request is a multiple of this */
#define ALLOC_SMALL_SIZE ((size_t)1 << 20)  /* largest request of the small pool */
#define ALLOC_SMALL_BUFFER ((size_t)2 << 20) /* small-pool segment size */
#define ALLOC_MIN_LARGE ((size_t)10 << 20)  /* requests below: a large_segment_size_mb segment */
#define ALLOC_ROUND_LARGE ((size_t)2 << 20) /* larger requests are rounded to this */

/* The free-block index of a pool: its free blocks ordered by size, then
 * by address, as a doubly linked list threaded through the blocks, and
 * while it holds more than a few blocks also a red-black tree over the
 * same blocks.  The first block at or above a size is PyTorch's best fit
 * (the smallest block that fits, the lowest address among equals): a short
 * walk of the list while it is short, else O(log n) in the tree, as
 * PyTorch finds it in its std::set.  Most pools hold a handful of free
 * blocks, where the list alone costs less than a tree's upkeep; the tree
 * is built when the count passes INDEX_LIST_MAX and dropped when it falls
 * under INDEX_LIST_MIN, so a count that goes to and fro rebuilds it at
 * most once every INDEX_LIST_MAX - INDEX_LIST_MIN changes.  Oversize
 * blocks (at or above max_split_size_mb) are at the order's end, so the
 * largest come first when they are released. */
struct block;

struct segment;
struct stream_pool;
struct tcache;

/* The fields a hit or a free reads or writes come first, up to tc; the
 * free-block tree's, the idle list's, the trace's and garbage
 * collection's after them.  Fields that one step writes together are not
 * neighbours (addr, size, prev, next and seg of a split's new block,
 * fprev and fnext of an index link, addr, size and prev of a merge):
 * GCC pairs neighbouring stores into one vector store, which takes four
 * instructions where two plain stores take two. */
struct block {
	uintptr_t addr;
	struct block *fprev;         /* free-block index: neighbours in its order */
	size_t size;                 /* after rounding */
	struct block *fnext;
	struct block *prev;          /* address neighbours in the segment */
	size_t requested;            /* as asked, while allocated */
	struct block *next;
	struct block *hnext;         /* unused slab link */
	bool allocated;
	bool is_free;                /* in a free list */
	bool unmapped;               /* address space of an expandable segment, no memory */
	bool red;                    /* free-block index: the node's colour in its tree */
	int pending_events;          /* events to complete before it is free */
	struct segment *seg;
	struct stream_use *uses;     /* streams named by devcache_record_stream */
	struct tcache *tc;           /* the thread cache that holds it, if one does */
	struct block *tl, *tr, *tp;  /* free-block index: children and parent in its tree */
	struct block *iprev, *inext; /* idle list: free whole segments, oldest first */
	uint64_t trace_id;
	uint64_t gc_base;            /* large-pool lookups when it was freed: its age's origin */
};

enum { INDEX_LIST_MIN = 16, INDEX_LIST_MAX = 32 };

struct free_index {
	struct block *root; /* the tree, NULL while the list alone serves */
	size_t count;       /* blocks in the index */
	/* Raised by every change: a thread cache undoes and redoes its
	 * block without the lock only while its pool's index has not moved
	 * since the block was allocated (alloc-thread.c). */
	uint64_t version;
	/* The list is a ring through end, a block that is never free: its
	 * fnext is the smallest block, its fprev the largest (itself when
	 * there is none), and its size, SIZE_MAX, ends every walk up the
	 * list.  Set by index_init(). */
	struct block end;
};

static inline void index_moved(struct free_index *ix)
{
	__atomic_store_n(&ix->version, ix->version + 1, __ATOMIC_RELEASE);
}

/* An ordinary segment is one driver allocation.  An expandable segment is
 * a reservation of address space as large as the device's memory, mapped
 * page by page as its pool grows and unmapped where whole pages are free;
 * its unmapped ranges are blocks too (unmapped, never free), kept on the
 * segment's list of holes, so growing looks only at the holes. */
struct segment {
	uintptr_t base;
	size_t size;  /* bytes of address space */
	void *handle; /* what the driver returned */
	struct stream_pool *pool;
	struct block *first; /* the block at base */
	bool small;
	bool expandable;
	size_t page;      /* expandable: the unit PyTorch's policy maps in */
	size_t gran;      /* expandable: the unit of physical memory, which divides page */
	size_t mapped;    /* expandable: bytes mapped */
	void **pages;     /* expandable: the physical handle of each granule, or NULL */
	struct block *holes; /* expandable: unmapped blocks, linked by inext */
	struct segment *enext; /* expandable: the pool's next one, if holes ran out */
	struct segment *sprev, *snext;
} __attribute__((aligned(64))); /* a hit writes first: no line shared with another stream's */

struct stream_use {
	devcache_stream_t stream;
	struct stream_use *next;
};

/* Spare block structs, in slabs, so that the hot path never calls malloc. */
struct spares {
	struct block *head;
	void **slabs;
	size_t n_slabs;
};

/* Freed blocks are reused only on the stream they were allocated on: each
 * stream has its pools, and with them everything a cache hit changes, so
 * that a hit takes only its stream's lock (see alloc.c). */
struct stream_pool {
	/* With thread caches: taken by a hit, and with every other pool's
	 * by the allocator-wide lock (world_lock). */
	struct dc_lock lock;
	devcache_stream_t stream;
	unsigned index; /* 0 for the default stream, then in order of first use */
	struct free_index small, large;
	struct segment *expandable[2]; /* [small]: with expandable_segments, a list */
	/* Allocated blocks by address: open addressing (alloc-table.c).
	 * table_mask is the home slots' count less one, 0 while there is
	 * no table; table_room the inserts left before it must grow (at
	 * most one block for two home slots): each is what the hot path
	 * tests, and table_count() says how many blocks it holds. */
	struct block **table;
	size_t table_mask, table_room;
	struct block *idle_head, *idle_tail; /* whole free segments, oldest first */
	struct spares spares;
} __attribute__((aligned(64))); /* cache lines of its own: each stream's hits write it */

/* A pending event: a freed block waits until work queued on another stream
 * before the free has completed. */
struct pending_event {
	devcache_event_t event;
	struct block *block;
	struct pending_event *next;
};

enum alloc_kind { ALLOC_DEVICE, ALLOC_PINNED };

/* An allocation that was a hit: the free block it took, as it was, for
 * alloc-thread.c's record of what its undoing would do, and the block
 * handed out. */
struct hit {
	bool hit;
	bool whole;
	size_t size;
	struct block *block;
};

/* A thread cache (alloc-thread.c): the block this thread allocated last,
 * while a free of it and the same allocation again would undo and redo
 * exactly what its allocation did. */
enum tcache_state { TC_NONE, TC_CACHED, TC_LIVE };
/* struct tcache's word: the state in its low bits, the pairs above, so
 * that one load says whether a flush has anything to do. */
enum { TC_STATE = 3, TC_PAIR = 4 };
/* The statistics that undoing and redoing the block move, small pool. */
enum { TS_ALLOCATION, TS_ALLOCATED_BYTES, TS_ACTIVE, TS_ACTIVE_BYTES, TS_REQUESTED_BYTES,
       TS_INACTIVE_SPLIT, TS_INACTIVE_SPLIT_BYTES, TS_N };
/* The statistic arrays whose rises the small pool's path makes. */
enum { TS_RUN_ALLOCATION, TS_RUN_ALLOCATED_BYTES, TS_RUN_REQUESTED_BYTES, TS_RUN_INACTIVE_SPLIT,
       TS_RUN_INACTIVE_SPLIT_BYTES, TS_RUN_N };

struct tcache {
	/* Written by the owning thread under the lock, read by it without. */
	uintptr_t ptr;             /* the block's address */
	size_t req;                /* the size asked for, which a redo must ask again */
	devcache_stream_t stream;
	const struct free_index *ix; /* the block's pool's */
	uint64_t base;             /* ix's version after the allocation */
	struct block *b;
	/* The owner's without the lock, atomic; others may set TC_NONE:
	 * the enum tcache_state, plus TC_PAIR times the pairs undone and
	 * redone since the last fold. */
	uint64_t word;
	/* The free block the allocation took (merged: its size, whole: a
	 * whole segment), from which tcache_figures() says what a free and
	 * a redo change in the statistics. */
	size_t size, merged;
	bool whole;
	/* The size asked for of the last block this thread freed with the
	 * lock: a hit of that size again is recorded, others are not, so
	 * that calls that do not repeat pay for no record. */
	size_t freed_req;
	/* Records of that kind that no redo used, in a row, and how many
	 * to leave out now: past TC_WASTED, all but one in TC_SKIP + 1 are
	 * left out until a redo (tcache_may_record), so that calls that
	 * repeat their size but not the pool pay for few records. */
	unsigned wasted, skip;
	int life;                  /* atomic: alloc-thread.c's TC_ALIVE... */
	const struct allocator *a; /* whose cache it is; NULL once that is gone */
	struct tcache *next;       /* the allocator's list, under the lock */
	/* The pool of the stream this thread allocated on last, where its
	 * hits take that pool's lock alone; the block above is in it. */
	struct stream_pool *home;
	/* home's stream, for the one comparison that sends an allocation
	 * to its pool path; while there is no home, the struct's own
	 * address, which is no caller's stream. */
	devcache_stream_t home_stream;
	/* What the thread's hits changed in the statistics since they were
	 * last folded into the allocator's (stats_fold; active and
	 * active_bytes are not kept, alloc.c's keeps_active): current and
	 * allocated as differences, peak the highest difference reached.
	 * Written by the owner under home's lock, folded under world_lock. */
	devcache_stats_t st;
	/* A run of the small pool's path: its calls leave the ALL peaks of
	 * st out, its SMALL peaks (of the TS_RUN_* arrays, which those
	 * calls raise) are the highest of the run, and run_peak holds what
	 * they were before it.  The large pool's current figures stay as
	 * they are meanwhile, so the ALL peak of the run is its SMALL peak
	 * plus them, made by tcache_run_end() (alloc-thread.c). */
	bool small_run;
	int64_t run_peak[TS_RUN_N];
};

struct allocator {
	struct dc_lock lock; /* with the pools' locks: world_lock() */
	uint64_t world_locks; /* times world_lock() was taken, for the tests */
	pthread_key_t tkey;   /* this thread's struct tcache */
	bool tkey_ok;         /* tkey was made: thread caches are on */
	struct tcache *tcaches; /* every thread's, under the lock */
	struct devcache_device *dev;
	enum alloc_kind kind;
	/* tunables, read once */
	bool caching;
	size_t max_split_size;
	size_t max_non_split_rounding;
	size_t large_segment_size;
	unsigned divisions[DIVISION_INTERVALS];
	bool plain_rounding;  /* caching, and no roundup_power2_divisions: multiples of 512 */
	double gc_threshold;
	uint64_t cap; /* memory_fraction of the device's memory */
	/* The largest segment the driver makes (device_max_alloc), SIZE_MAX
	 * where none is below the device's memory or pages are mapped. */
	size_t max_alloc;
	bool fraction_set;    /* memory_fraction was set: PyTorch's set_fraction */
	bool gc_active;       /* garbage collection: a threshold and fraction_set */
	bool expandable;      /* expandable_segments, on a device that can map */
	bool stitching;       /* expandable_stitching, with expandable */
	bool stitched;        /* stitching has run: granules, memory_fraction on pages */
	size_t vm_granularity;
	size_t vm_space;      /* address space an expandable segment reserves */
	uint64_t reserved_total;
	uint64_t large_lookups; /* large-pool lookups while gc_active: ages free blocks */
	/* The driver's last refusal during the allocation under way: its code
	 * and detail message, so that the error says what the driver said. */
	int driver_rc;
	char driver_why[512];

	struct stream_pool **pools;
	size_t n_pools, pools_cap;
	struct stream_pool *last_pool; /* most recently used: the common case */

	struct pending_event *events_head, *events_tail;
	struct segment *segments;

	struct trace *trace; /* borrowed from the context */
	unsigned stream_indices;
	devcache_stats_t stats;
};

/* alloc-index.c */
void index_init(struct free_index *ix);
void index_build_tree(struct free_index *ix);
void index_tree_insert(struct free_index *ix, struct block *b);
void index_tree_remove(struct free_index *ix, struct block *b);

/* Blocks are ordered as PyTorch orders its free set within a stream. */
static inline bool index_before(const struct block *x, const struct block *y)
{
	return x->size < y->size || (x->size == y->size && x->addr < y->addr);
}

/* The list's links of b, which goes before n (the end: after the largest
 * block). */
static inline void index_link(struct block *b, struct block *n)
{
	struct block *p = n->fprev;

	b->fnext = n;
	b->fprev = p;
	n->fprev = b;
	p->fnext = b;
}

/* b leaves the list. */
static inline void index_unlink(struct block *b)
{
	b->fprev->fnext = b->fnext;
	b->fnext->fprev = b->fprev;
}

/* The first block from n on that b goes before, walking up the list: by
 * size, then, seldom, by address. */
static inline struct block *index_after(struct block *n, const struct block *b)
{
	while (n->size < b->size)
		n = n->fnext;
	if (__builtin_expect(n->size == b->size, 0))
		while (n->size == b->size && n->addr < b->addr)
			n = n->fnext;
	return n;
}

/* b joins the index: in the tree if there is one, which links it in the
 * list too, else after a walk of the list, which gets its tree past
 * INDEX_LIST_MAX blocks.  Inline, as most frees insert or remove. */
static inline void index_insert(struct free_index *ix, struct block *b)
{
	index_moved(ix);
	b->is_free = true;
	ix->count++;
	if (__builtin_expect(ix->root != NULL, 0)) {
		index_tree_insert(ix, b);
		return;
	}
	index_link(b, index_after(ix->end.fnext, b));
	if (ix->count > INDEX_LIST_MAX)
		index_build_tree(ix);
}

static inline void index_remove(struct free_index *ix, struct block *b)
{
	index_moved(ix);
	b->is_free = false;
	ix->count--;
	if (__builtin_expect(ix->root != NULL, 0))
		index_tree_remove(ix, b);
	index_unlink(b);
}

/* The smallest block of at least size, the lowest address among equals:
 * inline, as every allocation looks.  Here and below the tree is the
 * unlikely case: the list's code is laid out straight. */
static inline struct block *index_lower_bound(const struct free_index *ix, size_t size)
{
	struct block *best;

	if (__builtin_expect(ix->root != NULL, 0)) {
		best = NULL;
		for (struct block *n = ix->root; n;)
			if (n->size >= size) {
				best = n;
				n = n->tl;
			} else {
				n = n->tr;
			}
		return best;
	}
	for (best = ix->end.fnext; best->size < size;)
		best = best->fnext;
	return best == &ix->end ? NULL : best;
}
/* The largest block. */
static inline struct block *index_last(const struct free_index *ix)
{
	return ix->end.fprev == &ix->end ? NULL : ix->end.fprev;
}
size_t index_largest(const struct free_index *ix);

/* The blocks before and after b in the index's order, or NULL (the
 * list's end is never free). */
static inline struct block *index_prev(const struct block *b)
{
	return b->fprev->is_free ? b->fprev : NULL;
}

static inline struct block *index_next(const struct block *b)
{
	return b->fnext->is_free ? b->fnext : NULL;
}

/* b, whose key has fallen (risen) below its predecessor (above its
 * successor), goes where it now belongs: along the list from its old
 * neighbour, or out of the tree and back in; the caller has raised the
 * version. */
void index_tree_move(struct free_index *ix, struct block *b);

static inline void index_move_down(struct free_index *ix, struct block *b)
{
	if (__builtin_expect(ix->root != NULL, 0)) {
		index_tree_move(ix, b);
		return;
	}
	/* b goes after the first block before it, counting down from its
	 * predecessor, which its caller found is not. */
	struct block *q = b->fprev->fprev;

	while (q != &ix->end && !index_before(q, b))
		q = q->fprev;
	index_unlink(b);
	index_link(b, q->fnext);
}

static inline void index_move_up(struct free_index *ix, struct block *b)
{
	if (__builtin_expect(ix->root != NULL, 0)) {
		index_tree_move(ix, b);
		return;
	}
	struct block *r = index_after(b->fnext->fnext, b);

	index_unlink(b);
	index_link(b, r);
}

/* b, in the index, has just been given a smaller key (a split left it
 * less): it moves only if it must, which is seldom; inline, as most
 * allocations split a block. */
static inline void index_key_fell(struct free_index *ix, struct block *b)
{
	index_moved(ix);
	struct block *p = b->fprev;

	if (!index_before(p, b) && p != &ix->end)
		index_move_down(ix, b);
}

/* And a larger key (a merge made it more). */
static inline void index_key_rose(struct free_index *ix, struct block *b)
{
	index_moved(ix);
	if (!index_before(b, b->fnext))
		index_move_up(ix, b);
}

/* alloc-table.c: allocated blocks by address; the calls of every
 * allocation inline.
 *
 * Linear probing that never wraps: a block's home is one of the first
 * table_mask + 1 slots, and its probe chain runs on past the last home
 * into half as many slots again.  As the table holds at most one block
 * for two home slots, a chain from any home meets an empty slot before
 * the table's end: no probe step masks its index, and a take's backward
 * shift compares homes as plain numbers. */
int table_grow(struct stream_pool *p);

/* An address's home slot; blocks are at least 512 bytes apart.  Bits 29
 * and up of addr times the golden ratio: for a multiple of 512, bits 20
 * and up of (addr >> 9) times it (up to 2^35 slots), without the shift.
 * The ratio is 2^32's, negated and sign-extended: a multiplier that fits
 * an instruction's 32-bit immediate, where 2^64's had to be loaded into
 * a register first.  (Bits 20 to 20 + n of a product depend only on the
 * multiplier's low 20 + n bits, so for the tables that are usual 2^64's
 * ratio spread no better.) */
#define TABLE_HASH 0xFFFFFFFF9E3779B1ull

static inline size_t table_home(const struct stream_pool *p, uintptr_t addr)
{
	return (size_t)((uint64_t)addr * TABLE_HASH >> 29) & p->table_mask;
}

/* The table's slots: its homes and the chains' overflow after them. */
static inline size_t table_slots(const struct stream_pool *p)
{
	size_t homes = p->table_mask ? p->table_mask + 1 : 0;

	return homes + homes / 2;
}

/* The blocks in the table. */
static inline size_t table_count(const struct stream_pool *p)
{
	return (p->table_mask + 1) / 2 - p->table_room;
}

/* Room for one more entry: 0, or DEVCACHE_ENOMEM. */
static inline int table_reserve(struct stream_pool *p)
{
	return p->table_room ? 0 : table_grow(p);
}

/* Insert b, after table_reserve() made room: it cannot fail. */
static inline void table_insert(struct stream_pool *p, struct block *b)
{
	struct block **s = p->table + table_home(p, b->addr);

	while (*s)
		s++;
	*s = b;
	p->table_room--;
}
/* The slot of addr's block, or the empty slot that ends its probe chain. */
static inline struct block **table_slot(const struct stream_pool *p, uintptr_t addr)
{
	struct block **s = p->table + table_home(p, addr);

	while (*s && (*s)->addr != addr)
		s++;
	return s;
}

struct block *table_find(const struct stream_pool *p, uintptr_t addr);

/* Remove and return the block at addr, or NULL: inline, as every free
 * takes one.  Backward-shift deletion keeps probe chains whole without
 * tombstones: each following entry moves into the hole unless its home
 * lies after the hole. */
static inline struct block *table_take(struct stream_pool *p, uintptr_t addr)
{
	if (!p->table_mask)
		return NULL;
	struct block **hole = table_slot(p, addr), *found = *hole;

	if (!found)
		return NULL;
	*hole = NULL;
	for (struct block **j = hole + 1; *j; j++) {
		if (table_home(p, (*j)->addr) > (size_t)(hole - p->table))
			continue;
		*hole = *j;
		*j = NULL;
		hole = j;
	}
	p->table_room++;
	return found;
}
/* The block at addr in any pool, and its pool in *pool_p; with take, it
 * leaves the pool's table. */
struct block *alloc_find(struct allocator *a, uintptr_t addr, bool take,
			 struct stream_pool **pool_p);

/* alloc-life.c */
int allocator_create(struct devcache_device *dev, enum alloc_kind kind, struct allocator **a_p);
void allocator_destroy(struct allocator *a);

/* alloc.c */
/* The allocator-wide lock: a->lock, and with thread caches every pool's
 * lock too, so that no hit is under way. */
void world_lock(struct allocator *a);
void world_unlock(struct allocator *a);
/* Blocks wait for events: read by a hit under its pool's lock. */
static inline bool events_pending(const struct allocator *a)
{
	return __atomic_load_n(&a->events_head, __ATOMIC_RELAXED) != NULL;
}
size_t alloc_round_size(const struct allocator *a, size_t size);
/* DEVCACHE_EINVAL, naming fn, for a NULL device. */
int alloc_check_dev(devcache_device_t *dev, const char *fn);
/* b, freed and used on no other stream now, goes back to its pool. */
void pool_return(struct allocator *a, struct block *b);
/* What alloc-expand.c and alloc-miss.c share with the rest: block
 * structs and the free lists. */
struct block *block_new(struct stream_pool *pool);
void block_delete(struct stream_pool *pool, struct block *b);
void make_free(struct allocator *a, struct block *b);
void take_free(struct allocator *a, struct block *b);
/* Merge b, in no free list, with its free neighbours, and make it free:
 * the free block that holds it is returned. */
struct block *free_merged(struct allocator *a, struct block *b);
/* A hit's best fit in pool, or NULL, and taking it (b) for the request:
 * allocate() calls them off the hot path. */
struct block *find_free(struct allocator *a, struct stream_pool *pool, bool small, size_t rsize);
int block_hand_out(struct allocator *a, devcache_stats_t *st, struct stream_pool *pool,
		   struct block *b, size_t rsize, size_t size, struct hit *hit, void **ptr_p);

/* alloc-miss.c: the allocation path past a hit, growing and shrinking */
/* The whole allocation path, for a request the hit path could not take;
 * called and returns under world_lock. */
int allocate(struct allocator *a, size_t size, devcache_stream_t stream, struct hit *hit,
	     void **ptr_p);
/* Give a whole free segment back to the driver. */
void release_segment(struct allocator *a, struct block *b);
void alloc_driver_free(struct allocator *a, void *ptr);
/* The driver's refusal kept for the error message, and the segment list. */
int driver_refused(struct allocator *a, int rc);
void segment_add(struct allocator *a, struct segment *seg, struct block *b);

/* alloc-expand.c: expandable segments */
struct block *expandable_grow(struct allocator *a, struct stream_pool *pool, bool small,
			      size_t rsize, size_t seg_size, bool retry, bool *capped);
/* Unmap free pages in the policy's unit until reserved memory is at most limit. */
void expandable_release_all(struct allocator *a, uint64_t limit);
struct block *expandable_stitch(struct allocator *a, struct stream_pool *pool, bool small,
				size_t rsize, bool *capped);
/* Make n the block after at, covering [addr, addr + size). */
void link_after(struct block *n, struct block *at, uintptr_t addr, size_t size);
void expandable_destroy(struct allocator *a, struct segment *seg);

/* alloc-events.c: blocks used on other streams */
/* Free the blocks whose events have completed; with wait, wait for all. */
void process_events(struct allocator *a, bool wait);
/* Free b now, or once the streams named by devcache_record_stream are done. */
int defer_free(struct allocator *a, struct block *b);

/* alloc-oom.c */
/* DEVCACHE_ENOMEM with PyTorch's message for a request that failed. */
int out_of_memory(struct allocator *a, size_t requested, size_t seg_size, bool capped);
/* DEVCACHE_ENOTSUP for a request above the device's largest single
 * allocation: not out of memory, nothing to retry. */
int above_limit(struct allocator *a, size_t requested);
/* Ask the context's pressure callbacks for need bytes; what they freed. */
size_t call_pressure(devcache_ctx_t *ctx, devcache_device_t *dev, size_t need);

/* alloc-stats.c */
void allocator_stats(struct allocator *a, devcache_stats_t *out);
/* Fold a thread's differences d into the allocator's statistics s (its
 * peaks as if its calls came after everything s has seen), and clear d. */
void stats_fold(devcache_stats_t *s, devcache_stats_t *d);

/* alloc.c: free a block taken from the address table, under its pool's
 * lock: its statistics (in st) and trace, then back to its pool or
 * deferred. */
int alloc_release(struct allocator *a, devcache_stats_t *st, struct block *b);

/* alloc-thread.c: the thread caches (see there) */
/* Make tkey; without it (no key left) there are no thread caches. */
void tcache_init(struct allocator *a);
/* Every thread's cache emptied and given back, at allocator_destroy(). */
void tcache_fini(struct allocator *a);
/* Under the lock, at a call's start: this thread's cache (tc, or the one
 * pthread_getspecific() gives) has its block freed if it was freed, and
 * its counts folded in; it holds nothing. */
void tcache_fold(struct allocator *a, struct tcache *tc);
/* The parts of a cache's word. */
static inline int tcache_state(const struct tcache *tc)
{
	return (int)(__atomic_load_n(&tc->word, __ATOMIC_RELAXED) & TC_STATE);
}

static inline uint64_t tcache_pairs(const struct tcache *tc)
{
	return __atomic_load_n(&tc->word, __ATOMIC_RELAXED) / TC_PAIR;
}

/* The owner, or another thread under the lock while the owner's block is
 * allocated (alloc-thread.c), sets the state and keeps the pairs. */
static inline void tcache_set_state(struct tcache *tc, int state)
{
	__atomic_store_n(&tc->word,
			 (__atomic_load_n(&tc->word, __ATOMIC_RELAXED) & ~(uint64_t)TC_STATE) |
				 (uint64_t)state,
			 __ATOMIC_RELAXED);
}

/* The cache lets its block go, which stays as it is for the allocator. */
static inline void tcache_detach(struct tcache *tc)
{
	tcache_set_state(tc, TC_NONE);
	tc->b->tc = NULL;
	tc->b = NULL;
	/* The owner reads it without the lock, in do_free(). */
	__atomic_store_n(&tc->ptr, 0, __ATOMIC_RELAXED);
}

/* A record costs a few dozen instructions and a redo saves a few
 * hundred: after TC_WASTED records in a row that no redo used, one in
 * TC_SKIP + 1 is made, so a loop that redoes its block finds it again at
 * most TC_SKIP calls late. */
#define TC_WASTED 64u
#define TC_SKIP 63u

static inline void tcache_flush(struct allocator *a, struct tcache *tc)
{
	if (!tc)
		return;
	uint64_t word = __atomic_load_n(&tc->word, __ATOMIC_RELAXED);

	/* The common cases inline: nothing held, or a block allocated and
	 * not redone, let go. */
	if (!word)
		return;
	if (word == TC_LIVE) {
		/* A record that no redo used. */
		tcache_detach(tc);
		if (++tc->wasted >= TC_WASTED) {
			tc->wasted = TC_WASTED;
			tc->skip = TC_SKIP;
		}
		return;
	}
	tcache_fold(a, tc);
}
/* A run of the small pool's path begins, or ends (tcache's small_run). */
void tcache_run_start(struct tcache *tc);
void tcache_run_end(struct tcache *tc);
/* Under world_lock: tc's differences folded into the allocator's. */
static inline void tcache_stats_fold(struct allocator *a, struct tcache *tc)
{
	if (tc->small_run)
		tcache_run_end(tc);
	stats_fold(&a->stats, &tc->st);
}
/* Under world_lock: this thread's cache flushed and its statistics
 * folded into the allocator's. */
void tcache_flush_own(struct allocator *a);
/* Under world_lock: every thread's statistics folded in. */
void tcache_fold_all(struct allocator *a);
/* Under the lock, after a hit that took the free block as hit says,
 * called when the last block the thread freed with the lock was asked
 * for with the same size: b becomes the block of this thread's cache tc,
 * which a free and the same allocation then undo and redo without the
 * lock. */
void tcache_record(struct allocator *a, struct tcache *tc, const struct hit *hit,
		   devcache_stream_t stream);
/* Whether the hit of a size the thread freed last is recorded, or left
 * out while records back off. */
static inline bool tcache_may_record(struct tcache *tc)
{
	if (!tc->skip)
		return true;
	tc->skip--;
	return false;
}

/* The cache this thread used last, of whichever allocator: a call on the
 * same allocator finds its cache without pthread_getspecific().  Only its
 * thread frees it while the thread runs, and points this at tcache_none
 * first; a cache that outlives its allocator has its a cleared
 * (alloc-thread.c).  Never NULL: tcache_none, no allocator's, stands for
 * no cache, which saves the hot paths a test. */
extern __thread struct tcache *tcache_last __attribute__((tls_model("initial-exec")));
extern struct tcache tcache_none;

/* This thread's cache of a, if it has one: the first load of a call. */
static inline struct tcache *tcache_own(const struct allocator *a)
{
	struct tcache *tc = tcache_last;

	if (tc->a == a)
		return tc;
	if (!a->tkey_ok || !(tc = pthread_getspecific(a->tkey)))
		return NULL;
	tcache_last = tc;
	return tc;
}
/* Under the lock: the block at addr, unless a thread's cache holds it as
 * freed (NULL then, as for a block freed already); a block that another
 * thread's cache holds as allocated leaves that cache. */
struct block *tcache_claim(struct block *b, bool take);
static inline struct block *tcache_lookup(struct allocator *a, uintptr_t addr, bool take)
{
	struct block *b = alloc_find(a, addr, take, NULL);

	return b && b->tc ? tcache_claim(b, take) : b;
}
/* Under the lock: a cache for this thread, which has none; NULL where
 * the thread caches are off or memory is short. */
struct tcache *tcache_new(struct allocator *a);
/* Under the lock: what the thread caches add to the kept statistics,
 * as figures to add to current and allocated, and the largest free
 * block they hold (the rest zero). */
void tcache_extra(struct allocator *a, devcache_stats_t *extra);
/* Under the lock: the caches of threads that have exited are emptied
 * and freed. */
void tcache_reap(struct allocator *a);
/* Under the lock: no cache redoes its block before taking the lock (a
 * reset of the peaks must see every allocation). */
void tcache_stop_all(struct allocator *a);

/* For the small helpers of a cache hit that the compiler would leave as
 * calls, being called from several places. */
#define ALLOC_INLINE static inline __attribute__((always_inline))

/* Put n into the address list of at's segment, just before at; n covers
 * [addr, addr + size) there. */
ALLOC_INLINE void link_before(struct block *n, struct block *at, uintptr_t addr, size_t size)
{
	n->addr = addr;
	n->size = size;
	n->seg = at->seg;
	n->prev = at->prev;
	n->next = at;
	if (at->prev)
		at->prev->next = n;
	else
		at->seg->first = n;
	at->prev = n;
}

ALLOC_INLINE bool whole_segment(const struct block *b)
{
	return !b->prev && !b->next && !b->seg->expandable;
}

/* A hit takes b: what the thread cache needs to know of it as it was. */
ALLOC_INLINE void note_hit_as(struct hit *hit, const struct block *b, bool whole)
{
	hit->hit = true;
	hit->whole = whole;
	hit->size = b->size;
}

ALLOC_INLINE void note_hit(struct hit *hit, const struct block *b)
{
	note_hit_as(hit, b, whole_segment(b));
}

static inline size_t round_up(size_t size, size_t unit)
{
	return (size + unit - 1) / unit * unit;
}

/* A request of size >= 1 bytes, rounded: with plain rounding a multiple
 * of 512, which for 1 to 511 is 512 as alloc_round_size() makes it, with
 * no branch on the size (which mispredicts as sizes alternate). */
ALLOC_INLINE size_t hit_round(const struct allocator *a, size_t size)
{
	return !a->plain_rounding ? alloc_round_size(a, size) : round_up(size, ALLOC_ROUND);
}

/* Statistics change on every allocation and free, so the figures kept are
 * those a change must write, and the rest are made when read
 * (allocator_stats):
 * - a decrease writes only current: a stat's `freed` holds, inside, what
 *   current was at the last reset of the accumulated figures (freed is
 *   allocated - current + that);
 * - an array's ALL entry keeps only its peak, raised from the sum of the
 *   SMALL and LARGE currents; its other figures are their sums. */
static inline void stat_add(devcache_stat_t *s, uint64_t n)
{
	s->current += (int64_t)n;
	s->allocated += (int64_t)n;
	if (s->current > s->peak)
		s->peak = s->current;
}

static inline void stat_sub(devcache_stat_t *s, uint64_t n)
{
	s->current -= (int64_t)n;
}

/* Every statistic is kept for all pools and for the block's own. */
static inline void stats_add(devcache_stat_t *array, bool small, uint64_t n)
{
	stat_add(&array[small ? DEVCACHE_POOL_SMALL : DEVCACHE_POOL_LARGE], n);
	int64_t all = array[DEVCACHE_POOL_SMALL].current + array[DEVCACHE_POOL_LARGE].current;
	if (all > array[DEVCACHE_POOL_ALL].peak)
		array[DEVCACHE_POOL_ALL].peak = all;
}

static inline void stats_sub(devcache_stat_t *array, bool small, uint64_t n)
{
	stat_sub(&array[small ? DEVCACHE_POOL_SMALL : DEVCACHE_POOL_LARGE], n);
}

static inline void stat_change(devcache_stat_t *s, int64_t delta)
{
	if (delta > 0)
		stat_add(s, (uint64_t)delta);
	else
		stat_sub(s, (uint64_t)-delta);
}

static inline void stats_change(devcache_stat_t *array, bool small, int64_t delta)
{
	if (delta > 0)
		stats_add(array, small, (uint64_t)delta);
	else
		stats_sub(array, small, (uint64_t)-delta);
}

/* The ALL pool's current figure, without a whole allocator_stats(). */
static inline int64_t stats_current(const devcache_stat_t *array)
{
	return array[DEVCACHE_POOL_SMALL].current + array[DEVCACHE_POOL_LARGE].current;
}

#endif
