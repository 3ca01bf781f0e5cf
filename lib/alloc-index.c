/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-index.c - the free-block index: O(1) segregated size classes with bitmaps, and the oversize list. */
#include "alloc.h"

/* The class of a size: fl is the power of two below it, sl the next
 * INDEX_SL_BITS bits.  Sizes are multiples of 512, so fl >= 9 > INDEX_SL_BITS. */
static void size_class(size_t size, unsigned *fl, unsigned *sl)
{
	unsigned f = 63u - (unsigned)__builtin_clzll(size);

	*fl = f;
	*sl = (unsigned)(size >> (f - INDEX_SL_BITS)) & (INDEX_SL - 1);
}

static void oversize_insert(struct free_index *ix, struct block *b)
{
	struct block **link = &ix->oversize, *prev = NULL;

	/* Ascending by size, then by address, so the first fit is the best. */
	while (*link && ((*link)->size < b->size ||
			 ((*link)->size == b->size && (*link)->addr < b->addr))) {
		prev = *link;
		link = &(*link)->fnext;
	}
	b->fnext = *link;
	b->fprev = prev;
	if (*link)
		(*link)->fprev = b;
	*link = b;
	b->oversize = true;
}

void index_insert(struct free_index *ix, struct block *b, size_t max_split)
{
	unsigned fl, sl;

	b->is_free = true;
	ix->count++;
	if (b->size >= max_split) {
		oversize_insert(ix, b);
		return;
	}
	size_class(b->size, &fl, &sl);
	b->fl = (uint8_t)fl;
	b->sl = (uint8_t)sl;
	b->oversize = false;
	b->fprev = NULL;
	b->fnext = ix->heads[fl][sl];
	if (b->fnext)
		b->fnext->fprev = b;
	ix->heads[fl][sl] = b;
	ix->sl_bitmap[fl] |= 1u << sl;
	ix->fl_bitmap |= 1ull << fl;
}

void index_remove(struct free_index *ix, struct block *b)
{
	ix->count--;
	b->is_free = false;
	if (b->fnext)
		b->fnext->fprev = b->fprev;
	if (b->oversize) {
		if (b->fprev)
			b->fprev->fnext = b->fnext;
		else
			ix->oversize = b->fnext;
		b->oversize = false;
	} else if (b->fprev) {
		b->fprev->fnext = b->fnext;
	} else {
		ix->heads[b->fl][b->sl] = b->fnext;
		if (!b->fnext) {
			ix->sl_bitmap[b->fl] &= ~(1u << b->sl);
			if (!ix->sl_bitmap[b->fl])
				ix->fl_bitmap &= ~(1ull << b->fl);
		}
	}
	b->fprev = b->fnext = NULL;
}

/* The smallest class at or above (fl, sl) with a block, or NULL. */
static struct block *first_at_or_above(struct free_index *ix, unsigned fl, unsigned sl)
{
	uint32_t sl_map = sl < INDEX_SL ? ix->sl_bitmap[fl] & (~0u << sl) : 0;

	if (!sl_map) {
		uint64_t fl_map = fl + 1 < INDEX_FL ? ix->fl_bitmap & (~0ull << (fl + 1)) : 0;

		if (!fl_map)
			return NULL;
		fl = (unsigned)__builtin_ctzll(fl_map);
		sl_map = ix->sl_bitmap[fl];
	}
	return ix->heads[fl][__builtin_ctz(sl_map)];
}

/* A block of at least size below max_split.  Every block in a class above
 * the request's own fits, so only the request's own class needs a look at
 * its members; that look is bounded, so the search stays O(1). */
struct block *index_find(struct free_index *ix, size_t size)
{
	unsigned fl, sl;
	int budget = 8;

	size_class(size, &fl, &sl);
	for (struct block *b = ix->heads[fl][sl]; b && budget-- > 0; b = b->fnext)
		if (b->size >= size)
			return b;
	return first_at_or_above(ix, fl, sl + 1);
}

/* The smallest oversize block of at least size. */
struct block *index_find_oversize(struct free_index *ix, size_t size)
{
	struct block *b = ix->oversize;

	while (b && b->size < size)
		b = b->fnext;
	return b;
}

struct block *index_largest_oversize(struct free_index *ix)
{
	struct block *b = ix->oversize;

	while (b && b->fnext)
		b = b->fnext;
	return b;
}

/* The size of the largest free block, for the fragmentation figure. */
size_t index_largest(const struct free_index *ix)
{
	size_t best = 0;

	for (const struct block *b = ix->oversize; b; b = b->fnext)
		best = b->size > best ? b->size : best;
	if (ix->fl_bitmap) {
		unsigned fl = 63u - (unsigned)__builtin_clzll(ix->fl_bitmap);
		unsigned sl = 31u - (unsigned)__builtin_clz(ix->sl_bitmap[fl]);

		for (const struct block *b = ix->heads[fl][sl]; b; b = b->fnext)
			best = b->size > best ? b->size : best;
	}
	return best;
}
