/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* first-fit.h - a deterministic first-fit address allocator, the one "driver" that the PyTorch model and the arena test device share. */
#ifndef DEVCACHE_TEST_FIRST_FIT_H
#define DEVCACHE_TEST_FIRST_FIT_H

#include <stdint.h>
#include <stdlib.h>

/* PyTorch's best fit breaks ties between free blocks of one size by their
 * address, so the model and the allocator under test must be handed the
 * same addresses by their drivers: both take them from this, the lowest
 * free range that fits, over a range of offsets [0, limit).  The extents
 * in use are kept sorted by offset; there are few (one per driver
 * allocation), so a linear scan is fast enough and obviously right. */
/* What both drivers use: the unit, the granularity of device memory, and
 * an address range so many times the device's memory that it never runs
 * out (an expandable segment takes 1 1/8 of it, per pool and stream). */
#define FF_UNIT ((uint64_t)2 << 20)
#define FF_SPACE_FACTOR 16
/* The arena test device's memory (tests/modules/arena.c), which the
 * tests also give the model as its device's. */
#define ARENA_TOTAL ((uint64_t)2 << 30)

struct ff_extent {
	uint64_t offset, size;
};

struct first_fit {
	uint64_t limit; /* offsets are below this */
	uint64_t unit;  /* every extent is a multiple of this, so offsets are aligned to it */
	struct ff_extent *used; /* ascending by offset */
	size_t n, cap;
};

static inline void ff_init(struct first_fit *ff, uint64_t limit, uint64_t unit)
{
	*ff = (struct first_fit){.limit = limit / unit * unit, .unit = unit};
}

static inline void ff_fini(struct first_fit *ff)
{
	free(ff->used);
	*ff = (struct first_fit){0};
}

/* The lowest offset where size bytes (rounded up to the unit) fit: 0, or
 * -1 when no free range is that large, or -2 when out of host memory. */
static inline int ff_alloc(struct first_fit *ff, uint64_t size, uint64_t *offset_p)
{
	uint64_t want = (size + ff->unit - 1) / ff->unit * ff->unit, at = 0;
	size_t i;

	if (want == 0 || want < size)
		return -1;
	for (i = 0; i < ff->n; i++) {
		if (ff->used[i].offset - at >= want)
			break;
		at = ff->used[i].offset + ff->used[i].size;
	}
	if (i == ff->n && (at > ff->limit || ff->limit - at < want))
		return -1;
	if (ff->n == ff->cap) {
		size_t cap = ff->cap ? 2 * ff->cap : 64;
		struct ff_extent *grown = realloc(ff->used, cap * sizeof *grown);

		if (!grown)
			return -2;
		ff->used = grown;
		ff->cap = cap;
	}
	for (size_t j = ff->n; j > i; j--)
		ff->used[j] = ff->used[j - 1];
	ff->used[i] = (struct ff_extent){.offset = at, .size = want};
	ff->n++;
	*offset_p = at;
	return 0;
}

/* Give back the extent that starts at offset; returns its size, or 0 when
 * no extent starts there. */
static inline uint64_t ff_free(struct first_fit *ff, uint64_t offset)
{
	size_t lo = 0, hi = ff->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ff->used[mid].offset < offset)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == ff->n || ff->used[lo].offset != offset)
		return 0;
	uint64_t size = ff->used[lo].size;
	for (size_t j = lo; j + 1 < ff->n; j++)
		ff->used[j] = ff->used[j + 1];
	ff->n--;
	return size;
}

#endif
