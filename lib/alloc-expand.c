/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-expand.c - expandable segments: address space reserved once, mapped and unmapped page by page. */
#include "alloc.h"
#include "backend-call.h"

#include <stdlib.h>
#include <string.h>

/* The holes of a segment are kept in address order: growth takes the
 * lowest one that can serve the request, as PyTorch's does. */
static void hole_add(struct segment *seg, struct block *b)
{
	struct block *prev = NULL, *next = seg->holes;

	while (next && next->addr < b->addr) {
		prev = next;
		next = next->inext;
	}
	b->unmapped = true;
	b->iprev = prev;
	b->inext = next;
	if (next)
		next->iprev = b;
	if (prev)
		prev->inext = b;
	else
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

/* Physical pages, unmapped and kept for mapping again elsewhere (stitching)
 * instead of being given back to the driver. */
struct spare_pages {
	void **h;
	size_t n, cap;
};

/* Unmap granule i of seg: its handle goes to spares when there is room,
 * else back to the driver. */
static void unmap_page(struct allocator *a, struct segment *seg, size_t i, struct spare_pages *spares)
{
	void *va = (void *)(seg->base + i * seg->gran);

	if (bk_vm_unmap(a->dev, va, seg->gran)) {
		log_msg(&a->dev->ctx->log, DEVCACHE_LOG_ERROR,
			_("%s: the driver refused to unmap %p: %s"), a->dev->id, va,
			devcache_last_error());
	} else if (spares && spares->n < spares->cap) {
		spares->h[spares->n++] = seg->pages[i];
	} else if (bk_vm_destroy(a->dev, seg->pages[i])) {
		log_msg(&a->dev->ctx->log, DEVCACHE_LOG_ERROR,
			_("%s: the driver refused to free the memory mapped at %p: %s"), a->dev->id, va,
			devcache_last_error());
	}
	seg->pages[i] = NULL;
}

/* Give a segment's mapped pages and address space back, live blocks
 * included: the allocator is closing. */
void expandable_destroy(struct allocator *a, struct segment *seg)
{
	for (size_t i = 0; i < seg->size / seg->gran; i++)
		if (seg->pages[i])
			unmap_page(a, seg, i, NULL);
	if (bk_vm_release(a->dev, seg->handle, seg->size))
		log_msg(&a->dev->ctx->log, DEVCACHE_LOG_ERROR,
			_("%s: the driver refused to release %p: %s"), a->dev->id, seg->handle,
			devcache_last_error());
	free(seg->pages);
}

/* The unit PyTorch's policy maps and unmaps in: 2 MiB for the small pool,
 * large_segment_size_mb for the large one.  Physical memory is made and
 * kept in granules, the small pool's unit, which divides the large one's;
 * only stitching maps and unmaps single granules of a large pool. */
static size_t expandable_page(const struct allocator *a, bool small)
{
	return round_up(small ? ALLOC_SMALL_BUFFER : a->large_segment_size, a->vm_granularity);
}

/* Reserve the address space of a pool's expandable segment: one unmapped
 * block, a hole as large as the device's memory and an eighth more. */

static struct segment *expandable_create(struct allocator *a, struct stream_pool *pool, bool small)
{
	size_t page = expandable_page(a, small), gran = expandable_page(a, true);
	size_t size = round_up(a->vm_space, page);
	struct segment *seg = calloc(1, sizeof *seg);
	void **pages = calloc(size / gran, sizeof *pages);
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
				.small = small, .expandable = true, .page = page, .gran = gran,
				.pages = pages};
	segment_add(a, seg, b);
	hole_add(seg, b);
	/* The pool's segments in address order too. */
	struct segment **link = &pool->expandable[small];
	while (*link && (*link)->base < seg->base)
		link = &(*link)->enext;
	seg->enext = *link;
	*link = seg;
	return seg;
}

/* Map the units that cover the first bytes of hole h, in granules, taking
 * physical pages from spares first: they become a free block, merged with
 * its free neighbours, which is returned.  All or nothing: NULL when the
 * device's memory or the driver refuses. */
static struct block *map_hole(struct allocator *a, struct block *h, size_t bytes, size_t unit,
			      struct spare_pages *spares, bool *capped)
{
	struct segment *seg = h->seg;
	size_t map = round_up(bytes, unit), first, n, i;
	uint64_t total = a->dev->info.total_memory;
	struct block *nb;

	if (map > h->size)
		map = h->size;
	/* PyTorch checks memory_fraction once, before; the device's memory
	 * is what each mapping can run into. */
	if (a->reserved_total + map > total) {
		*capped = true;
		return NULL;
	}
	nb = map < h->size ? block_new(a) : h;
	if (!nb) {
		err_set(DEVCACHE_ENOMEM, _("out of host memory for allocator metadata"));
		return NULL;
	}
	first = (h->addr - seg->base) / seg->gran;
	n = map / seg->gran;
	for (i = 0; i < n; i++) {
		void *va = (void *)(h->addr + i * seg->gran), *ph;
		bool spare = spares && spares->n;

		if (spare)
			ph = spares->h[--spares->n];
		else if (bk_vm_create(a->dev, seg->gran, &ph))
			break;
		if (bk_vm_map(a->dev, va, seg->gran, ph)) {
			if (spare)
				spares->h[spares->n++] = ph;
			else
				bk_vm_destroy(a->dev, ph);
			break;
		}
		seg->pages[first + i] = ph;
	}
	if (i < n) {
		/* The driver's reason, kept before unmapping can replace it, is
		 * the detail message. */
		driver_refused(a, DEVCACHE_ENOMEM);
		while (i--)
			unmap_page(a, seg, first + i, spares);
		if (nb != h)
			block_delete(a, nb);
		err_set(DEVCACHE_ENOMEM, "%s", a->driver_why);
		return NULL;
	}
	a->stats.num_device_alloc++; /* one map operation, as PyTorch counts */
	if (seg->mapped == 0)
		stats_change(a->stats.segment, seg->small, 1);
	seg->mapped += map;
	a->reserved_total += map;
	stats_change(a->stats.reserved_bytes, seg->small, (int64_t)map);
	if (nb == h) {
		hole_remove(seg, h);
	} else {
		/* The mapped pages become a block in front of the rest of the hole. */
		link_before(nb, h, h->addr, map);
		h->addr += map;
		h->size -= map;
	}
	free_merged(a, nb);
	return nb;
}

/* Free, or unmapped: what a request may grow over. */
static bool allocatable(const struct block *b)
{
	return b && (b->is_free || b->unmapped);
}

/* Grow the pool's expandable segments by enough pages for rsize bytes and
 * return the free block that holds them, as alloc_segment does.  This is
 * PyTorch's way: the lowest hole, with the free block just before it, that
 * is followed by enough free or unmapped space; its pages are mapped, and
 * those of the holes after it while the block is short. */
struct block *expandable_grow(struct allocator *a, struct stream_pool *pool, bool small,
			      size_t rsize, size_t seg_size, bool retry, bool *capped)
{
	struct block *c = NULL;

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
	for (struct segment *s = pool->expandable[small]; s && !c; s = s->enext)
		for (struct block *h = s->holes; h && !c; h = h->inext) {
			struct block *start = allocatable(h->prev) ? h->prev : h;
			size_t room = 0;

			for (struct block *x = start; x && room < rsize && allocatable(x); x = x->next)
				room += x->size;
			if (room >= rsize)
				c = start;
		}
	/* No hole will do (the first request, or the holes are short):
	 * reserve another range for the pool. */
	if (!c) {
		size_t page = expandable_page(a, small);
		struct segment *seg;

		if (round_up(rsize, page) > round_up(a->vm_space, page)) {
			err_set(DEVCACHE_ENOMEM, _("%s: %zu bytes are more than the device has"),
				a->dev->id, rsize);
			return NULL;
		}
		if (!(seg = expandable_create(a, pool, small)))
			return NULL;
		c = seg->holes;
	}
	if (c->unmapped && !(c = map_hole(a, c, c->size < rsize ? c->size : rsize, c->seg->page, NULL,
					   capped)))
		return NULL;
	/* Free, then a hole, then perhaps more: map until the block is large
	 * enough. */
	while (c->size < rsize) {
		struct block *h = c->next;
		size_t want = rsize - c->size;

		if (!h || !h->unmapped ||
		    !(c = map_hole(a, h, want < h->size ? want : h->size, h->seg->page, NULL, capped)))
			return NULL;
	}
	return c;
}

/* Unmap the whole units (a multiple of the granule) inside free block b
 * of an expandable segment: b becomes a hole, with the partial units at
 * either end left as free blocks.  Returns the bytes given back. */
static size_t expandable_release(struct allocator *a, struct block *b, size_t unit,
				 struct spare_pages *spares)
{
	struct segment *seg = b->seg;
	uintptr_t end = b->addr + b->size;
	uintptr_t lo = seg->base + round_up(b->addr - seg->base, unit);
	uintptr_t hi = seg->base + (end - seg->base) / unit * unit;
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
	for (size_t i = (lo - seg->base) / seg->gran; i < (hi - seg->base) / seg->gran; i++)
		unmap_page(a, seg, i, spares);
	a->stats.num_device_free++; /* one unmap operation, as PyTorch counts */
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
					expandable_release(a, b, seg->page, NULL);
}

