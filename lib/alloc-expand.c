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
	DL_INSERT_AFTER(seg->holes, prev, b, iprev, inext);
}

static void hole_remove(struct segment *seg, struct block *b)
{
	DL_REMOVE(seg->holes, b, iprev, inext);
	b->unmapped = false;
}

/* Take b out of its segment's address list and delete it. */
static void unlink_block(struct block *b)
{
	DL_REMOVE(b->seg->first, b, prev, next);
	block_delete(b->seg->pool, b);
}

/* Put n into the address list of at's segment, just after at; n covers
 * [addr, addr + size) there. */
void link_after(struct block *n, struct block *at, uintptr_t addr, size_t size)
{
	n->addr = addr;
	n->size = size;
	n->seg = at->seg;
	DL_INSERT_AFTER(at->seg->first, at, n, prev, next);
}

/* Physical pages, unmapped and kept for mapping again elsewhere (stitching)
 * instead of being given back to the driver. */
struct spare_pages {
	void **h;
	size_t n, cap;
};

/* Unmap granule i of seg: its handle goes to spares when there is room,
 * else back to the driver.  A granule the driver would not unmap stays
 * mapped, its handle kept: mapping its hole again takes it as it is, and
 * closing tries once more. */
static void unmap_page(struct allocator *a, struct segment *seg, size_t i, struct spare_pages *spares)
{
	void *va = (void *)(seg->base + i * seg->gran);

	if (bk_vm_unmap(a->dev, va, seg->gran)) {
		log_msg(&a->dev->ctx->log, DEVCACHE_LOG_ERROR,
			_("%s: the driver refused to unmap %p: %s"), a->dev->id, va,
			devcache_last_error());
		return;
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
	bool mapped = false;

	for (size_t i = 0; i < seg->size / seg->gran; i++)
		if (seg->pages[i]) {
			unmap_page(a, seg, i, NULL);
			mapped |= seg->pages[i] != NULL;
		}
	/* Address space with memory still mapped in it cannot be given
	 * back; unmap_page() has said why. */
	if (!mapped && bk_vm_release(a->dev, seg->handle, seg->size))
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
	struct segment *seg = aligned_alloc(_Alignof(struct segment), sizeof *seg);
	void **pages = calloc(size / gran, sizeof *pages);
	struct block *b = seg && pages ? block_new(pool) : NULL;
	void *va;
	int rc;

	if (!b) {
		free(seg);
		free(pages);
		err_set(DEVCACHE_ENOMEM, _("out of host memory for allocator metadata"));
		return NULL;
	}
	if ((rc = bk_vm_reserve(a->dev, size, &va))) {
		driver_refused(a, rc);
		free(seg);
		free(pages);
		block_delete(pool, b);
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
	int rc = 0;

	if (map > h->size)
		map = h->size;
	/* PyTorch checks memory_fraction once, before, against a segment's
	 * size; the device's memory is what each mapping can run into.  Once
	 * stitching has run, memory_fraction counts what is mapped. */
	if (a->reserved_total + map > total ||
	    (a->stitched && a->fraction_set && a->reserved_total + map > a->cap)) {
		*capped = true;
		return NULL;
	}
	nb = map < h->size ? block_new(seg->pool) : h;
	if (!nb) {
		err_set(DEVCACHE_ENOMEM, _("out of host memory for allocator metadata"));
		return NULL;
	}
	first = (h->addr - seg->base) / seg->gran;
	n = map / seg->gran;
	for (i = 0; i < n; i++) {
		void *va = (void *)(h->addr + i * seg->gran), *ph;
		bool spare = spares && spares->n;

		/* Still mapped: its unmap was refused (unmap_page()). */
		if (seg->pages[first + i])
			continue;
		if (spare)
			ph = spares->h[--spares->n];
		else if ((rc = bk_vm_create(a->dev, seg->gran, &ph))) {
			driver_refused(a, rc);
			break;
		}
		if ((rc = bk_vm_map(a->dev, va, seg->gran, ph))) {
			/* The driver's reason, kept before destroying can replace it. */
			driver_refused(a, rc);
			if (spare)
				spares->h[spares->n++] = ph;
			else if (bk_vm_destroy(a->dev, ph))
				log_msg(&a->dev->ctx->log, DEVCACHE_LOG_ERROR,
					_("%s: the driver refused to free the memory mapped at %p: %s"),
					a->dev->id, va, devcache_last_error());
			break;
		}
		seg->pages[first + i] = ph;
	}
	if (i < n) {
		/* The driver's reason, kept before unmapping could replace it,
		 * is the detail message. */
		while (i--)
			unmap_page(a, seg, first + i, spares);
		if (nb != h)
			block_delete(seg->pool, nb);
		err_set(rc, "%s", a->driver_why);
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
	return free_merged(a, nb);
}

/* What the policy maps and unmaps in: PyTorch's unit, or once stitching
 * has run (the state is no longer one PyTorch would reach), granules. */
static size_t unit_of(const struct allocator *a, const struct segment *seg)
{
	return a->stitched ? seg->gran : seg->page;
}

/* Free, or unmapped: what a request may grow over. */
static bool allocatable(const struct block *b)
{
	return b && (b->is_free || b->unmapped);
}

/* Map the run of free and unmapped space that starts at c (a hole, or the
 * free block before one) until its first block holds rsize bytes: the
 * hole, then the holes after it while the block is short.  Returns that
 * free block, or NULL. */
static struct block *map_run(struct allocator *a, struct block *c, size_t rsize, size_t unit,
			     struct spare_pages *spares, bool *capped)
{
	if (c->unmapped && !(c = map_hole(a, c, c->size < rsize ? c->size : rsize, unit, spares,
					  capped)))
		return NULL;
	while (c->size < rsize) {
		struct block *h = c->next;
		size_t want = rsize - c->size;

		if (!h || !h->unmapped ||
		    !(c = map_hole(a, h, want < h->size ? want : h->size, unit, spares, capped)))
			return NULL;
	}
	return c;
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
	 * before it looks at the pages it needs (map_hole() checks those
	 * once stitching has run). */
	if (!a->stitched && a->fraction_set &&
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
	return map_run(a, c, rsize, unit_of(a, c->seg), NULL, capped);
}

/* Whether the unit of seg that holds address x, [us, us + unit), holds
 * nothing but free and unmapped space, b's neighbours included. */
static bool unit_idle(const struct block *b, uintptr_t x, size_t unit)
{
	uintptr_t us = b->seg->base + (x - b->seg->base) / unit * unit, ue = us + unit;
	const struct block *p;

	for (p = b; p && p->addr > us; p = p->prev)
		if (p->prev && p->prev->addr + p->prev->size > us && !allocatable(p->prev))
			return false;
	for (p = b; p && p->addr + p->size < ue; p = p->next)
		if (p->next && p->next->addr < ue && !allocatable(p->next))
			return false;
	return true;
}

/* Unmap the granules wholly inside free block b whose unit (a multiple of
 * the granule) holds nothing but free and unmapped space: b becomes a hole,
 * with what is left at either end as free blocks.  With PyTorch's unit,
 * where every unit is mapped whole, these are the whole units inside b, as
 * PyTorch unmaps; after stitching, a unit's granules may lie in several
 * free blocks, each of which gives back its own.  Returns the bytes given
 * back. */
static size_t expandable_release(struct allocator *a, struct block *b, size_t unit,
				 struct spare_pages *spares)
{
	struct segment *seg = b->seg;
	uintptr_t end = b->addr + b->size;
	uintptr_t lo = seg->base + round_up(b->addr - seg->base, seg->gran);
	uintptr_t hi = seg->base + (end - seg->base) / seg->gran * seg->gran;

	if (hi > lo && !unit_idle(b, lo, unit))
		lo = seg->base + round_up(lo - seg->base + 1, unit);
	if (hi > lo && !unit_idle(b, hi - 1, unit))
		hi = seg->base + (hi - 1 - seg->base) / unit * unit;
	struct block *head = NULL, *tail = NULL;
	bool small = seg->small;

	if (hi <= lo)
		return 0;
	if ((lo > b->addr && !(head = block_new(seg->pool))) ||
	    (hi < end && !(tail = block_new(seg->pool)))) {
		if (head)
			block_delete(seg->pool, head);
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
		unlink_block(p);
	}
	if (b->next && b->next->unmapped) {
		struct block *n = b->next;

		hole_remove(seg, n);
		b->size += n->size;
		unlink_block(n);
	}
	if (head)
		make_free(a, head);
	if (tail)
		make_free(a, tail);
	return hi - lo;
}

/* Unmap the free pages of every expandable segment, until reserved memory
 * is at most limit: in the policy's unit, or with granules (a unit of
 * one granule), keeping the physical pages in spares. */
static void release_free(struct allocator *a, uint64_t limit, bool granules,
			 struct spare_pages *spares)
{
	for (struct segment *seg = a->segments; seg && a->reserved_total > limit; seg = seg->snext)
		if (seg->expandable)
			for (struct block *b = seg->first; b && a->reserved_total > limit; b = b->next)
				if (b->is_free)
					expandable_release(a, b, granules ? seg->gran : unit_of(a, seg),
							   spares);
}

void expandable_release_all(struct allocator *a, uint64_t limit)
{
	release_free(a, limit, false, NULL);
}

/* ---- stitching ------------------------------------------------------------- */

/* Stitching is where expandable segments do better than PyTorch's policy,
 * and it acts only where that policy has failed a request: after the
 * cache was released and the retry refused, so that a trace PyTorch runs
 * takes the same steps here.  PyTorch then gives up for two reasons that
 * are not a want of memory: it checks memory_fraction against the segment
 * the request would have had (20 MiB for a 2 MiB request), and it maps
 * and unmaps whole 20 MiB units, so that the free parts of units that
 * hold live blocks stay mapped and unusable.  Stitching counts what the
 * request really needs: it unmaps every free granule of every pool of the
 * device, keeping the physical pages, then places the request where it
 * needs the fewest granules mapped (next to a live block whose granule it
 * can share; the lowest address among equals), and maps the kept pages
 * there before making new ones (GMLake's stitching: physical pages from
 * anywhere, made contiguous by the address space).  A request then fails
 * only when the pages it needs, beyond those that hold live blocks, are
 * more than memory_fraction or the device allows.
 *
 * Once stitching has run, the allocator's state is one PyTorch would not
 * reach, and the policy keeps PyTorch's rules but not its 20 MiB unit:
 * the large pool maps and unmaps granules, and memory_fraction counts the
 * granules mapped (map_hole()).  That keeps, in the benchmarks' traces,
 * within 3% of the peak allocated bytes where PyTorch needs up to 9%. */

/* The granules a request of rsize bytes must map when placed at the start
 * of b, the first block of a run of free or unmapped space; SIZE_MAX when
 * the run is too short. */
static size_t stitch_cost(const struct block *b, size_t rsize)
{
	size_t covered = 0, granules = 0, gran = b->seg->gran;

	for (const struct block *x = b; x && allocatable(x) && covered < rsize; x = x->next) {
		if (x->unmapped) {
			size_t want = round_up(rsize - covered, gran);

			if (want < x->size) {
				granules += want / gran;
				covered += want;
				break;
			}
			granules += x->size / gran;
		}
		covered += x->size;
	}
	return covered >= rsize ? granules : SIZE_MAX;
}

struct block *expandable_stitch(struct allocator *a, struct stream_pool *pool, bool small,
				size_t rsize, bool *capped)
{
	size_t gran = expandable_page(a, true), best = SIZE_MAX;
	struct spare_pages spares = {NULL, 0, 0};
	struct block *c = NULL;
	uint64_t need;

	/* Every free granule, kept; without room to keep them, they go back
	 * to the driver and new ones are made. */
	spares.cap = (size_t)(a->reserved_total / gran);
	if (spares.cap && !(spares.h = malloc(spares.cap * sizeof *spares.h)))
		spares.cap = 0;
	release_free(a, 0, true, &spares);
	for (struct segment *s = pool->expandable[small]; s; s = s->enext)
		for (struct block *b = s->first; b; b = b->next)
			if (allocatable(b) && !allocatable(b->prev)) {
				size_t cost = stitch_cost(b, rsize);

				if (cost < best)
					best = cost, c = b;
			}
	need = c ? (uint64_t)best * gran : round_up(rsize, gran);
	if ((a->fraction_set && a->reserved_total + need > a->cap) ||
	    a->reserved_total + need > a->dev->info.total_memory) {
		*capped = true;
		c = NULL;
	} else if (!c) {
		/* Every run is short: another range for the pool. */
		struct segment *seg = round_up(rsize, gran) <= a->vm_space
					      ? expandable_create(a, pool, small)
					      : NULL;
		c = seg ? seg->holes : NULL;
	}
	if (c)
		c = map_run(a, c, rsize, gran, &spares, capped);
	while (spares.n)
		if (bk_vm_destroy(a->dev, spares.h[--spares.n]))
			log_msg(&a->dev->ctx->log, DEVCACHE_LOG_ERROR,
				_("%s: the driver refused to free a page of memory: %s"), a->dev->id,
				devcache_last_error());
	free(spares.h);
	if (c)
		a->stats.num_stitches++;
	a->stitched = true;
	return c;
}
