/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pytorch-model.c - an independent model of PyTorch's CUDA caching allocator policy, for the differential test and the benchmark. */

/* Design note.
 *
 * This is PyTorch 2.4's DeviceCachingAllocator (c10/cuda/
 * CUDACachingAllocator.cpp) reduced to its policy, written again from the
 * algorithm, one device, no CUDA graphs, no events (a trace frees a block
 * on the stream that allocated it).  It shares no code with lib/: the
 * differential test holds the two against each other.
 *
 * State.  Two pools, small (requests up to 1 MiB) and large, each shared by
 * every stream: the free blocks in one set ordered by (stream, size,
 * address), and, with expandable segments, the unmapped address ranges in
 * a set ordered by (stream, address).  Blocks of one segment are linked by
 * address (prev, next).  The sets are sorted arrays: lower_bound is a
 * binary search, and the few hundred entries make insertion cheap.
 *
 * malloc(size, stream):
 *   1. round the size (512 bytes, or roundup_power2_divisions), pick the
 *      pool, and the allocation size a new segment would have;
 *   2. get_free_block: the smallest free block of the stream that fits
 *      (lower_bound), unless it is oversize for a request below
 *      max_split_size, or too much larger than an oversize request;
 *   3. on a miss: garbage collection (only with memory_fraction set and a
 *      threshold), then alloc_block; else release_available_cached_blocks
 *      (oversize blocks of the stream) and alloc_block; else
 *      release_cached_blocks (every whole segment, every free page of an
 *      expandable one) and alloc_block as a retry; else out of memory;
 *   4. split the block if the rest is worth keeping, and hand it out.
 * free: merge the block with its free neighbours and put it back in its set.
 *
 * The driver is tests/first-fit.h: the lowest free address range that
 * fits, over FF_SPACE_FACTOR times the device's memory; the device refuses
 * memory (a segment, or the physical pages of an expandable segment) when
 * that would pass its total.  The arena test device does exactly the same,
 * so the model and the allocator under test see the same addresses, which
 * best fit uses to break ties.
 *
 * Where later releases differ from 2.4, the model keeps 2.4, except:
 * - the slack allowed to an oversize request is max_non_split_rounding
 *   (a tunable, max_non_split_rounding_mb, in later releases; 2.4 has the
 *   constant kLargeBuffer, 20 MiB, which is the tunable's default);
 * - release_available_cached_blocks with expandable segments returns
 *   false.  2.4 would call release_block on an expandable block there,
 *   which is an internal assertion; later releases skip expandable blocks,
 *   which, when every block is expandable as here, comes to returning false.
 * Expandable segments map 2 MiB pages in the small pool and 20 MiB pages
 * (kLargeBuffer) in the large one, as 2.4 does; every map_block counts one
 * num_device_alloc and every unmap_block one num_device_free, whatever the
 * number of pages, as 2.4 counts them; the memory_fraction check counts the
 * allocation size a segment would have, not the pages about to be mapped.
 * No free-memory callbacks are registered (PyTorch's own, for CUDA IPC,
 * frees nothing in a process that shares no tensors).
 *
 * Host memory: every allocation is checked; when one fails, the operation
 * under way jumps back to its entry point, which returns -2, and the model
 * is marked broken (its state may be half changed) until ptm_delete.
 *
 * Files.  Expandable segments (map_block, unmap_block, finding the address
 * space for a request) are in tests/pytorch-model-expand.c; the structures
 * and helpers the two files share, in tests/pytorch-model-internal.h. */
#include "pytorch-model.h"

#include <assert.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "first-fit.h"
#include "pytorch-model-internal.h"

/* The request under way: PyTorch's AllocParams. */
struct params {
	size_t size; /* rounded */
	unsigned stream;
	struct pool *pool;
	size_t alloc_size;
	struct blk *block;
};

/* ---- block structs and sorted sets ------------------------------------------ */

struct blk *blk_new(struct ptm *m, uint64_t addr, size_t size, unsigned stream, bool small,
		    struct es *es, bool mapped)
{
	struct blk *b = calloc(1, sizeof *b);

	if (!b)
		no_host_memory(m);
	*b = (struct blk){.addr = addr, .size = size, .stream = stream, .small = small, .es = es,
			  .mapped = mapped, .all_next = m->all};
	if (m->all)
		m->all->all_prev = b;
	m->all = b;
	return b;
}

void blk_delete(struct ptm *m, struct blk *b)
{
	if (b->all_prev)
		b->all_prev->all_next = b->all_next;
	else
		m->all = b->all_next;
	if (b->all_next)
		b->all_next->all_prev = b->all_prev;
	free(b);
}

/* The index of the first block not ordered before key. */
size_t lower_bound(const struct bset *s, blk_cmp cmp, const struct blk *key)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (cmp(s->v[mid], key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

void set_insert(struct ptm *m, struct bset *s, blk_cmp cmp, struct blk *b)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		struct blk **v = realloc(s->v, cap * sizeof *v);

		if (!v)
			no_host_memory(m);
		s->v = v;
		s->cap = cap;
	}
	size_t i = lower_bound(s, cmp, b);
	assert(i == s->n || cmp(s->v[i], b) != 0);
	memmove(s->v + i + 1, s->v + i, (s->n - i) * sizeof *s->v);
	s->v[i] = b;
	s->n++;
}

static void set_erase_at(struct bset *s, size_t i)
{
	memmove(s->v + i, s->v + i + 1, (s->n - i - 1) * sizeof *s->v);
	s->n--;
}

void set_erase(struct bset *s, blk_cmp cmp, struct blk *b)
{
	size_t i = lower_bound(s, cmp, b);

	assert(i < s->n && s->v[i] == b);
	set_erase_at(s, i);
}

/* PyTorch's insert_into_blocks: the block's age counts from now. */
void insert_into_blocks(struct ptm *m, struct pool *pool, struct blk *b)
{
	b->gc_count_base = pool->get_free_blocks_call_count;
	set_insert(m, &pool->blocks, by_size, b);
}

static bool is_split(const struct blk *b)
{
	return b->prev || b->next;
}

/* ---- statistics ---------------------------------------------------------------- */

static void stat_change(int64_t *current, int64_t *peak, int64_t delta)
{
	*current += delta;
	if (*current > *peak)
		*peak = *current;
}

void reserved_change(struct ptm *m, int64_t delta)
{
	m->total_allocated_memory += (uint64_t)delta;
	stat_change(&m->st.reserved, &m->st.reserved_peak, delta);
}

/* ---- sizes ------------------------------------------------------------------------ */

static unsigned floor_log2(uint64_t v)
{
	return 63u - (unsigned)__builtin_clzll(v);
}

static size_t divisions_for(const struct ptm *m, size_t size)
{
	int index = (int)floor_log2(size) - 20; /* the intervals start at 1 MiB */

	index = index < 0 ? 0 : index >= N_INTERVALS ? N_INTERVALS - 1 : index;
	return m->cfg.divisions[index];
}

/* Up to the next of `divisions` equal steps between the powers of two
 * around size; a power of two stays as it is. */
static size_t next_division(size_t size, size_t divisions)
{
	size_t floor2 = (size_t)1 << floor_log2(size);
	size_t step = floor2 >> floor_log2(divisions);

	if (size == floor2)
		return size;
	if (step == 0)
		return floor2 << 1;
	size_t down = size & ~(step - 1);
	return down == size ? size : down + step;
}

static size_t round_size(const struct ptm *m, size_t size)
{
	if (size < K_MIN_BLOCK_SIZE)
		return K_MIN_BLOCK_SIZE;
	size_t divisions = divisions_for(m, size);
	if (divisions > 1 && size > K_MIN_BLOCK_SIZE * divisions)
		return next_division(size, divisions);
	return (size + K_MIN_BLOCK_SIZE - 1) / K_MIN_BLOCK_SIZE * K_MIN_BLOCK_SIZE;
}

static size_t get_allocation_size(size_t size)
{
	if (size <= K_SMALL_SIZE)
		return K_SMALL_BUFFER;
	if (size < K_MIN_LARGE_ALLOC)
		return K_LARGE_BUFFER;
	return (size + K_ROUND_LARGE - 1) / K_ROUND_LARGE * K_ROUND_LARGE;
}

static bool should_split(const struct ptm *m, const struct blk *b, size_t size)
{
	size_t remaining = b->size - size;

	if (b->small || m->cfg.expandable)
		return remaining >= K_MIN_BLOCK_SIZE;
	return size < m->cfg.max_split_size && remaining > K_SMALL_SIZE;
}

/* ---- merging ---------------------------------------------------------------------- */

/* Merge src, a neighbour of dst, into dst if it is free and mapped as dst
 * is; returns the bytes taken over.  dst is in no set. */
size_t try_merge_blocks(struct ptm *m, struct blk *dst, struct blk *src)
{
	if (!src || src->allocated || src->mapped != dst->mapped)
		return 0;
	struct pool *pool = pool_of(m, src);
	if (src->mapped)
		set_erase(&pool->blocks, by_size, src);
	else
		set_erase(&pool->unmapped, by_stream_addr, src);
	if (dst->prev == src) {
		dst->addr = src->addr;
		dst->prev = src->prev;
		if (dst->prev)
			dst->prev->next = dst;
	} else {
		dst->next = src->next;
		if (dst->next)
			dst->next->prev = dst;
	}
	dst->size += src->size;
	size_t subsumed = src->size;
	blk_delete(m, src);
	return subsumed;
}

/* ---- segments ----------------------------------------------------------------------- */

/* cudaMalloc: the device refuses what would pass its total. */
static bool driver_malloc(struct ptm *m, size_t size, uint64_t *addr_p)
{
	uint64_t offset;
	int rc;

	if (m->device_used + size > m->cfg.device_total)
		return false;
	rc = ff_alloc(&m->space, size, &offset);
	if (rc == -2)
		no_host_memory(m);
	if (rc)
		return false;
	m->device_used += size;
	*addr_p = m->cfg.address_base + offset;
	return true;
}

void driver_free(struct ptm *m, uint64_t addr, uint64_t size)
{
	uint64_t had = ff_free(&m->space, addr - m->cfg.address_base);

	assert(had >= size);
	(void)had;
}

/* release_block: cudaFree of a whole free segment. */
static void release_block(struct ptm *m, struct blk *b)
{
	assert(!b->es && !is_split(b) && !b->allocated);
	m->st.num_device_free++;
	driver_free(m, b->addr, b->size);
	m->device_used -= b->size;
	reserved_change(m, -(int64_t)b->size);
	set_erase(&pool_of(m, b)->blocks, by_size, b);
	blk_delete(m, b);
}

/* ---- the malloc sequence ------------------------------------------------------------ */

static size_t expandable_size(const struct blk *b)
{
	return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

static bool get_free_block(struct ptm *m, struct params *p)
{
	struct pool *pool = p->pool;
	struct bset *s = &pool->blocks;
	struct blk key = {.stream = p->stream, .size = p->size, .addr = 0};

	if (m->cfg.fraction_set && m->cfg.gc_threshold > 0.0)
		pool->get_free_blocks_call_count++;
	size_t i = lower_bound(s, by_size, &key);
	if (i == s->n || s->v[i]->stream != p->stream)
		return false;
	/* A free block before unmapped space can grow: best fit counts it at
	 * the size it can reach, and moves on to larger blocks that reach
	 * less. */
	while (s->v[i]->es && i + 1 < s->n && s->v[i + 1]->stream == p->stream &&
	       expandable_size(s->v[i + 1]) < expandable_size(s->v[i]))
		i++;
	struct blk *b = s->v[i];
	size_t max_split = m->cfg.max_split_size;
	if (p->size < max_split && b->size >= max_split)
		return false;
	if (p->size >= max_split && b->size >= p->size + m->cfg.max_non_split_rounding)
		return false;
	p->block = b;
	set_erase_at(s, i);
	return true;
}

static size_t gc_count(const struct pool *pool, const struct blk *b)
{
	return (size_t)(pool->get_free_blocks_call_count - b->gc_count_base);
}

/* Release whole free segments of the large pool that have waited at least
 * the average number of get_free_block calls, again and again, until
 * reserved memory is down to the threshold's share of the allowed maximum. */
static void garbage_collect_cached_blocks(struct ptm *m)
{
	struct pool *pool = &m->pools[0];
	struct bset *s = &pool->blocks;
	uint64_t threshold = (uint64_t)(m->cfg.gc_threshold * (double)m->allowed_memory_maximum);

	if (m->total_allocated_memory <= threshold)
		return;
	uint64_t target = m->total_allocated_memory - threshold, reclaimed = 0;
	size_t total_age = 0;
	int freeable = 0;

	for (size_t i = 0; i < s->n; i++)
		if (!is_split(s->v[i])) {
			total_age += gc_count(pool, s->v[i]);
			freeable++;
		}
	if (freeable == 0)
		return;
	bool freed = true;
	while (reclaimed < target && freed && freeable > 0) {
		double age_threshold = (double)total_age / freeable;

		freed = false;
		for (size_t i = 0; i < s->n;) {
			struct blk *b = s->v[i];

			if (!is_split(b) && (double)gc_count(pool, b) >= age_threshold) {
				freed = true;
				reclaimed += b->size;
				total_age -= gc_count(pool, b);
				freeable--;
				m->st.gc_releases++;
				release_block(m, b); /* takes s->v[i] out */
			} else {
				i++;
			}
		}
	}
}

/* A new segment, or more of an expandable one.  The cap is checked against
 * the allocation size even with expandable segments, which map the
 * request rounded up to pages, less what a free block before them holds. */
static bool alloc_block(struct ptm *m, struct params *p, bool is_retry)
{
	uint64_t addr;

	if (is_retry)
		m->st.num_alloc_retries++;
	if (m->cfg.fraction_set &&
	    m->total_allocated_memory + p->alloc_size > m->allowed_memory_maximum)
		return false;
	if (m->cfg.expandable) {
		p->block = try_allocate_expandable_block(m, p->stream, p->pool, p->size);
		return p->block != NULL;
	}
	if (!driver_malloc(m, p->alloc_size, &addr))
		return false;
	reserved_change(m, (int64_t)p->alloc_size);
	m->st.num_device_alloc++;
	p->block = blk_new(m, addr, p->alloc_size, p->stream, p->pool->small, NULL, true);
	return true;
}

/* Free one cached oversize block of the stream at least as large as the
 * request (and max_split_size), or else the largest ones until as much. */
static bool release_available_cached_blocks(struct ptm *m, const struct params *p)
{
	size_t max_split = m->cfg.max_split_size;
	struct bset *s = &p->pool->blocks;

	if (max_split == SIZE_MAX || m->cfg.expandable)
		return false;
	struct blk key = {.stream = p->stream, .size = p->size < max_split ? max_split : p->size,
			  .addr = 0};
	size_t i = lower_bound(s, by_size, &key);
	if (i < s->n && s->v[i]->stream == p->stream) {
		m->st.oversize_releases++;
		release_block(m, s->v[i]);
		return true;
	}
	if (i == 0)
		return false;
	size_t released = 0;
	i--; /* the stream's largest block */
	while (released < key.size && s->v[i]->size >= max_split && s->v[i]->stream == p->stream) {
		struct blk *cur = s->v[i];

		released += cur->size;
		m->st.oversize_releases++;
		if (i == 0) {
			release_block(m, cur);
			break;
		}
		i--;
		release_block(m, cur); /* above i: i stays valid */
	}
	return released >= key.size;
}

static void release_blocks(struct ptm *m, struct pool *pool)
{
	struct bset *s = &pool->blocks;
	struct blk **to_unmap = NULL;
	size_t n_unmap = 0;

	if (s->n && !(to_unmap = malloc(s->n * sizeof *to_unmap)))
		no_host_memory(m);
	for (size_t i = 0; i < s->n;) {
		struct blk *b = s->v[i];

		if (b->es) {
			to_unmap[n_unmap++] = b;
			i++;
		} else if (!is_split(b)) {
			release_block(m, b);
		} else {
			i++;
		}
	}
	for (size_t k = 0; k < n_unmap; k++) {
		struct blk *b = to_unmap[k];

		unmap_block(m, b);
		if (!is_split(b))
			release_expandable_segment(m, b);
	}
	free(to_unmap);
}

static bool release_cached_blocks(struct ptm *m)
{
	release_blocks(m, &m->pools[0]);
	release_blocks(m, &m->pools[1]);
	return true;
}

/* Hand out p->block, split if the rest is worth keeping free. */
static struct blk *alloc_found_block(struct ptm *m, struct params *p, size_t orig_size,
				     bool split)
{
	struct blk *b = p->block;

	if (split) {
		struct blk *rest = b;

		b = blk_new(m, rest->addr, p->size, p->stream, rest->small, rest->es, true);
		splice(b, rest->prev, rest);
		rest->addr += p->size;
		rest->size -= p->size;
		insert_into_blocks(m, p->pool, rest);
	}
	b->allocated = true;
	b->requested = orig_size;
	set_insert(m, &m->live, by_addr, b);
	stat_change(&m->st.allocated, &m->st.allocated_peak, (int64_t)b->size);
	stat_change(&m->st.requested, &m->st.requested_peak, (int64_t)orig_size);
	return b;
}

static int do_alloc(struct ptm *m, size_t orig_size, unsigned stream, uint64_t *addr_p)
{
	size_t size = round_size(m, orig_size);
	struct params p = {.size = size, .stream = stream, .pool = &m->pools[size <= K_SMALL_SIZE],
			   .alloc_size = get_allocation_size(size)};
	bool found = get_free_block(m, &p);

	if (!found) {
		if (m->cfg.fraction_set && m->cfg.gc_threshold > 0.0)
			garbage_collect_cached_blocks(m);
		found = alloc_block(m, &p, false) ||
			(release_available_cached_blocks(m, &p) && alloc_block(m, &p, false)) ||
			(release_cached_blocks(m) && alloc_block(m, &p, true));
	}
	if (!found) {
		m->st.num_ooms++;
		return -1;
	}
	*addr_p = alloc_found_block(m, &p, orig_size, should_split(m, p.block, size))->addr;
	return 0;
}

/* free and free_block. */
static void do_free(struct ptm *m, uint64_t addr)
{
	struct blk key = {.addr = addr};
	size_t i = lower_bound(&m->live, by_addr, &key);

	if (i == m->live.n || m->live.v[i]->addr != addr)
		return;
	struct blk *b = m->live.v[i];
	size_t requested = b->requested;
	set_erase_at(&m->live, i);
	b->allocated = false;
	stat_change(&m->st.allocated, &m->st.allocated_peak, -(int64_t)b->size);
	try_merge_blocks(m, b, b->prev);
	try_merge_blocks(m, b, b->next);
	insert_into_blocks(m, pool_of(m, b), b);
	stat_change(&m->st.requested, &m->st.requested_peak, -(int64_t)requested);
}

/* ---- the interface ------------------------------------------------------------------ */

struct ptm *ptm_new(const struct ptm_config *config)
{
	struct ptm *m = calloc(1, sizeof *m);

	if (!m)
		return NULL;
	m->cfg = *config;
	if (m->cfg.fraction_set)
		m->allowed_memory_maximum =
			(uint64_t)(m->cfg.memory_fraction * (double)m->cfg.device_total);
	m->pools[0].small = false;
	m->pools[1].small = true;
	ff_init(&m->space, m->cfg.device_total * FF_SPACE_FACTOR, FF_UNIT);
	return m;
}

void ptm_delete(struct ptm *m)
{
	if (!m)
		return;
	while (m->all) {
		struct blk *b = m->all;

		m->all = b->all_next;
		free(b);
	}
	while (m->segments) {
		struct es *es = m->segments;

		m->segments = es->next;
		free(es->page_mapped);
		free(es);
	}
	for (int i = 0; i < 2; i++) {
		free(m->pools[i].blocks.v);
		free(m->pools[i].unmapped.v);
	}
	free(m->live.v);
	ff_fini(&m->space);
	free(m);
}

int ptm_alloc(struct ptm *m, size_t size, unsigned stream, uint64_t *addr_p)
{
	if (m->broken)
		return -2;
	if (size == 0) { /* PyTorch hands out no block for 0 bytes */
		*addr_p = 0;
		return 0;
	}
	if (setjmp(m->no_host_memory)) {
		m->broken = true;
		return -2;
	}
	return do_alloc(m, size, stream, addr_p);
}

void ptm_free(struct ptm *m, uint64_t addr)
{
	if (m->broken)
		return;
	if (setjmp(m->no_host_memory)) {
		m->broken = true;
		return;
	}
	do_free(m, addr);
}

void ptm_empty_cache(struct ptm *m)
{
	if (m->broken)
		return;
	if (setjmp(m->no_host_memory)) {
		m->broken = true;
		return;
	}
	release_cached_blocks(m);
}

void ptm_stats(const struct ptm *m, struct ptm_stats *out)
{
	*out = m->st;
}
