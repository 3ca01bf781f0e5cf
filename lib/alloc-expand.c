/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-expand.c - expandable segments: address space reserved once, mapped and unmapped page by page. */
#include "alloc.h"
#include "backend-call.h"

#include <stdlib.h>
#include <string.h>

static void hole_add(struct segment *seg, struct block *b)
{
	b->unmapped = true;
	b->iprev = NULL;
	b->inext = seg->holes;
	if (seg->holes)
		seg->holes->iprev = b;
	seg->holes = b;
}

static void hole_remove(struct segment *seg, struct block *b)
{
	if (b->iprev)
		b->iprev->inext = b->inext;
	else
		seg->holes = b->inext;
	if (b->inext)
		b->inext->iprev = b->iprev;
	b->iprev = b->inext = NULL;
	b->unmapped = false;
}

/* Take b out of its segment's address list and delete it. */
static void unlink_block(struct allocator *a, struct block *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		b->seg->first = b->next;
	if (b->next)
		b->next->prev = b->prev;
	block_delete(a, b);
}

/* Put n into the address list of at's segment, just before or after at;
 * n covers [addr, addr + size) there. */
static void link_before(struct block *n, struct block *at, uintptr_t addr, size_t size)
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

void link_after(struct block *n, struct block *at, uintptr_t addr, size_t size)
{
	n->addr = addr;
	n->size = size;
	n->seg = at->seg;
	n->prev = at;
	n->next = at->next;
	if (at->next)
		at->next->prev = n;
	at->next = n;
}

void unmap_page(struct allocator *a, struct segment *seg, size_t i)
{
	void *va = (void *)(seg->base + i * seg->page);

	if (bk_vm_unmap(a->dev, va, seg->page) ||
	    bk_vm_destroy(a->dev, seg->pages[i]))
		log_msg(&a->dev->ctx->log, DEVCACHE_LOG_ERROR,
			_("%s: the driver refused to unmap %p: %s"), a->dev->id, va,
			devcache_last_error());
	seg->pages[i] = NULL;
}

/* Reserve the address space of a pool's expandable segment: one unmapped
 * block, a hole as large as the device's memory and an eighth more. */
static size_t expandable_page(const struct allocator *a, bool small)
{
	return round_up(small ? ALLOC_SMALL_BUFFER : a->large_segment_size, a->vm_granularity);
}

static struct segment *expandable_create(struct allocator *a, struct stream_pool *pool, bool small)
{
	size_t page = expandable_page(a, small);
	size_t size = round_up(a->vm_space, page);
	struct segment *seg = calloc(1, sizeof *seg);
	void **pages = calloc(size / page, sizeof *pages);
	struct block *b = seg && pages ? block_new(a) : NULL;
	void *va;

	if (!b) {
		free(seg);
		free(pages);
		err_set(DEVCACHE_ENOMEM, _("out of host memory for allocator metadata"));
		return NULL;
	}
	if (bk_vm_reserve(a->dev, size, &va)) {
		free(seg);
		free(pages);
		block_delete(a, b);
		return NULL;
	}
	*seg = (struct segment){.base = (uintptr_t)va, .size = size, .handle = va, .pool = pool,
				.small = small, .expandable = true, .page = page, .pages = pages};
	segment_add(a, seg, b);
	hole_add(seg, b);
	seg->enext = pool->expandable[small];
	pool->expandable[small] = seg;
	return seg;
}

/* Grow the pool's expandable segment by enough pages for rsize bytes and
 * return the free block that holds them, as alloc_segment does.  Of the
 * holes, the one that needs the fewest new pages wins: a free block just
 * before a hole counts toward the request, so a growing tensor extends in
 * place instead of taking a new range. */
struct block *expandable_grow(struct allocator *a, struct stream_pool *pool, bool small,
			      size_t rsize, size_t seg_size, bool retry, bool *capped)
{
	struct segment *seg = pool->expandable[small];
	struct block *best = NULL, *nb;
	size_t map = SIZE_MAX, first, n, i;

	if (retry)
		a->stats.num_alloc_retries++;
	/* PyTorch checks a set memory_fraction against the size of the
	 * segment the request would have had without expandable segments,
	 * before it looks at the pages it needs. */
	if (a->fraction_set &&
	    (a->reserved_total + seg_size > a->cap || a->reserved_total + seg_size < seg_size)) {
		*capped = true;
		return NULL;
	}
	for (struct segment *s = seg; s; s = s->enext)
		for (struct block *h = s->holes; h; h = h->inext) {
			size_t before = h->prev && h->prev->is_free ? h->prev->size : 0;
			size_t need = rsize > before ? round_up(rsize - before, s->page) : 0;

			if (need <= h->size && (need < map || (need == map && h->addr < best->addr))) {
				best = h;
				map = need;
			}
		}
	/* No hole is wide enough (the first request, or holes scattered by
	 * unmapping): reserve another range for the pool. */
	if (!best) {
		size_t page = expandable_page(a, small);

		if (round_up(rsize, page) > round_up(a->vm_space, page)) {
			err_set(DEVCACHE_ENOMEM, _("%s: %zu bytes are more than the device has"),
				a->dev->id, rsize);
			return NULL;
		}
		if (!(seg = expandable_create(a, pool, small)))
			return NULL;
		best = seg->holes;
		map = round_up(rsize, seg->page);
	}
	seg = best->seg;
	if (map == 0)
		return best->prev;
	if (a->reserved_total + map > a->cap || a->reserved_total + map < map) {
		*capped = true;
		return NULL;
	}
	nb = map < best->size ? block_new(a) : best;
	if (!nb) {
		err_set(DEVCACHE_ENOMEM, _("out of host memory for allocator metadata"));
		return NULL;
	}
	first = (best->addr - seg->base) / seg->page;
	n = map / seg->page;
	for (i = 0; i < n; i++) {
		void *va = (void *)(best->addr + i * seg->page), *h;

		if (bk_vm_create(a->dev, seg->page, &h))
			break;
		if (bk_vm_map(a->dev, va, seg->page, h)) {
			bk_vm_destroy(a->dev, h);
			break;
		}
		seg->pages[first + i] = h;
	}
	if (i < n) {
		/* All or nothing; the driver's reason, kept before unmapping
		 * can replace it, is the detail message. */
		driver_refused(a, DEVCACHE_ENOMEM);
		while (i--)
			unmap_page(a, seg, first + i);
		if (nb != best)
			block_delete(a, nb);
		err_set(DEVCACHE_ENOMEM, "%s", a->driver_why);
		return NULL;
	}
	a->stats.num_device_alloc += n;
	if (seg->mapped == 0)
		stats_change(a->stats.segment, small, 1);
	seg->mapped += map;
	a->reserved_total += map;
	stats_change(a->stats.reserved_bytes, small, (int64_t)map);
	if (nb == best) {
		hole_remove(seg, best);
	} else {
		/* The mapped pages become a block in front of the rest of the hole. */
		link_before(nb, best, best->addr, map);
		best->addr += map;
		best->size -= map;
	}
	free_merged(a, nb);
	return nb;
}

/* Unmap the whole pages inside free block b of an expandable segment: b
 * becomes a hole, with the partial pages at either end left as free
 * blocks.  Returns the bytes given back. */
static size_t expandable_release(struct allocator *a, struct block *b)
{
	struct segment *seg = b->seg;
	uintptr_t end = b->addr + b->size;
	uintptr_t lo = seg->base + round_up(b->addr - seg->base, seg->page);
	uintptr_t hi = seg->base + (end - seg->base) / seg->page * seg->page;
	struct block *head = NULL, *tail = NULL;
	bool small = seg->small;

	if (hi <= lo)
		return 0;
	if ((lo > b->addr && !(head = block_new(a))) || (hi < end && !(tail = block_new(a)))) {
		if (head)
			block_delete(a, head);
		return 0; /* no metadata: keep the memory cached */
	}
	take_free(a, b);
	for (size_t i = (lo - seg->base) / seg->page; i < (hi - seg->base) / seg->page; i++)
		unmap_page(a, seg, i);
	a->stats.num_device_free += (hi - lo) / seg->page;
	seg->mapped -= hi - lo;
	a->reserved_total -= hi - lo;
	stats_change(a->stats.reserved_bytes, small, -(int64_t)(hi - lo));
	if (seg->mapped == 0)
		stats_change(a->stats.segment, small, -1);
	if (head)
		link_before(head, b, b->addr, lo - b->addr);
	if (tail)
		link_after(tail, b, hi, end - hi);
	b->addr = lo;
	b->size = hi - lo;
	hole_add(seg, b);
	if (b->prev && b->prev->unmapped) {
		struct block *p = b->prev;

		hole_remove(seg, p);
		b->addr = p->addr;
		b->size += p->size;
		unlink_block(a, p);
	}
	if (b->next && b->next->unmapped) {
		struct block *n = b->next;

		hole_remove(seg, n);
		b->size += n->size;
		unlink_block(a, n);
	}
	if (head)
		make_free(a, head);
	if (tail)
		make_free(a, tail);
	return hi - lo;
}

/* Unmap every whole free page of every expandable segment, until
 * reserved memory is at most limit. */
void expandable_release_all(struct allocator *a, uint64_t limit)
{
	for (struct segment *seg = a->segments; seg && a->reserved_total > limit; seg = seg->snext)
		if (seg->expandable)
			for (struct block *b = seg->first; b && a->reserved_total > limit; b = b->next)
				if (b->is_free)
					expandable_release(a, b);
}

