/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pytorch-model-expand.c - the PyTorch model's expandable segments: address space reserved once, pages mapped and unmapped as blocks need them. */
#include "pytorch-model-internal.h"

#include <assert.h>
#include <stdlib.h>

/* ---- expandable segments ------------------------------------------------------------ */

static size_t page_of(const struct blk *b)
{
	return b->es->page;
}

/* ExpandableSegment::map and map_block: physical pages for [to_map, +size)
 * rounded out to pages, all or none; the block becomes mapped and free,
 * merged with its free neighbours. */
static bool map_block(struct ptm *m, struct blk *to_map, size_t size)
{
	struct es *es = to_map->es;
	struct pool *pool = pool_of(m, to_map);
	size_t page = page_of(to_map);
	uint64_t begin = (to_map->addr - es->base) / page;
	uint64_t end = (to_map->addr + size - es->base + page - 1) / page;
	uint64_t bytes = (end - begin) * page;

	assert(!to_map->mapped && size <= to_map->size);
	if (begin == end || m->device_used + bytes > m->cfg.device_total)
		return false;
	for (uint64_t i = begin; i < end; i++) {
		assert(!es->page_mapped[i]);
		es->page_mapped[i] = 1;
	}
	m->device_used += bytes;

	set_erase(&pool->unmapped, by_stream_addr, to_map);
	to_map->mapped = true;
	if (bytes < to_map->size) {
		struct blk *rest = blk_new(m, to_map->addr + bytes, to_map->size - bytes,
					   to_map->stream, to_map->small, es, false);

		splice(rest, to_map, to_map->next);
		set_insert(m, &pool->unmapped, by_stream_addr, rest);
		to_map->size = bytes;
	}
	try_merge_blocks(m, to_map, to_map->prev);
	try_merge_blocks(m, to_map, to_map->next);
	insert_into_blocks(m, pool, to_map);

	reserved_change(m, (int64_t)bytes);
	m->st.num_device_alloc++;
	return true;
}

/* ExpandableSegment::unmap and unmap_block: give back the whole pages in
 * free block b; the pieces of pages at either end stay free blocks. */
void unmap_block(struct ptm *m, struct blk *b)
{
	struct es *es = b->es;
	struct pool *pool = pool_of(m, b);
	size_t page = page_of(b);
	uint64_t begin = (b->addr - es->base + page - 1) / page;
	uint64_t end = (b->addr + b->size - es->base) / page;

	if (begin >= end)
		return;
	uint64_t lo = es->base + begin * page, bytes = (end - begin) * page;
	for (uint64_t i = begin; i < end; i++) {
		assert(es->page_mapped[i]);
		es->page_mapped[i] = 0;
	}
	m->device_used -= bytes;

	set_erase(&pool->blocks, by_size, b);
	size_t before = (size_t)(lo - b->addr), after = b->size - before - (size_t)bytes;
	if (before > 0) {
		struct blk *f = blk_new(m, b->addr, before, b->stream, b->small, es, true);

		splice(f, b->prev, b);
		insert_into_blocks(m, pool, f);
	}
	if (after > 0) {
		struct blk *f = blk_new(m, lo + bytes, after, b->stream, b->small, es, true);

		splice(f, b, b->next);
		insert_into_blocks(m, pool, f);
	}
	b->addr = lo;
	b->size = (size_t)bytes;
	b->mapped = false;
	try_merge_blocks(m, b, b->prev);
	try_merge_blocks(m, b, b->next);
	set_insert(m, &pool->unmapped, by_stream_addr, b);

	reserved_change(m, -(int64_t)bytes);
	m->st.num_device_free++;
}

/* The segment is all unmapped: give its address space back. */
void release_expandable_segment(struct ptm *m, struct blk *b)
{
	struct es *es = b->es;

	assert(!b->mapped && b->addr == es->base && b->size == es->size);
	set_erase(&pool_of(m, b)->unmapped, by_stream_addr, b);
	driver_free(m, es->base, es->size);
	for (struct es **l = &m->segments; *l; l = &(*l)->next)
		if (*l == es) {
			*l = es->next;
			break;
		}
	free(es->page_mapped);
	free(es);
	blk_delete(m, b);
}

static bool allocatable(const struct blk *b)
{
	return b && !b->allocated;
}

static bool has_available_address_space(const struct blk *b, size_t size)
{
	size_t bytes = 0;

	while (bytes < size && allocatable(b)) {
		bytes += b->size;
		b = b->next;
	}
	return bytes >= size;
}

/* The lowest address, in the stream's segments of the pool, where free and
 * unmapped blocks together hold size bytes; else a new segment. */
static struct blk *find_expandable_block(struct ptm *m, unsigned stream, struct pool *pool,
					 size_t size)
{
	struct blk key = {.stream = stream, .addr = 0};

	for (size_t i = lower_bound(&pool->unmapped, by_stream_addr, &key);
	     i < pool->unmapped.n && pool->unmapped.v[i]->stream == stream; i++) {
		struct blk *c = pool->unmapped.v[i];

		if (allocatable(c->prev))
			c = c->prev;
		if (has_available_address_space(c, size))
			return c;
	}
	size_t page = pool->small ? K_SMALL_BUFFER : K_LARGE_BUFFER;
	uint64_t total = m->cfg.device_total;
	uint64_t n_pages = (total + total / 8 + page - 1) / page, offset;
	struct es *es = calloc(1, sizeof *es);
	unsigned char *pages = calloc(n_pages, 1);
	int rc;

	if (!es || !pages) {
		free(es);
		free(pages);
		no_host_memory(m);
	}
	rc = ff_alloc(&m->space, n_pages * page, &offset);
	if (rc) {
		free(es);
		free(pages);
		if (rc == -2)
			no_host_memory(m);
		/* cuMemAddressReserve failing is a CUDA error in PyTorch, not an
		 * out-of-memory; the model's address space is made so large
		 * that it does not happen. */
		return NULL;
	}
	*es = (struct es){.base = m->cfg.address_base + offset, .size = n_pages * page,
			  .page = page, .page_mapped = pages, .next = m->segments};
	m->segments = es;
	struct blk *c = blk_new(m, es->base, (size_t)es->size, stream, pool->small, es, false);
	set_insert(m, &pool->unmapped, by_stream_addr, c);
	return c;
}

/* Map enough of the chain at the candidate for size bytes; the result is
 * one free mapped block, taken out of the free set. */
struct blk *try_allocate_expandable_block(struct ptm *m, unsigned stream, struct pool *pool,
					  size_t size)
{
	struct blk *c = find_expandable_block(m, stream, pool, size);

	if (!c)
		return NULL;
	if (!c->mapped && !map_block(m, c, c->size < size ? c->size : size))
		return NULL;
	while (c->size < size) {
		size_t remaining = size - c->size;
		struct blk *next = c->next;

		if (!map_block(m, next, remaining < next->size ? remaining : next->size))
			return NULL;
		c = next; /* map_block merged c into it */
	}
	set_erase(&pool->blocks, by_size, c);
	return c;
}
