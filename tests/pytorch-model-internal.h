/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pytorch-model-internal.h - what the two halves of the PyTorch model, tests/pytorch-model.c and tests/pytorch-model-expand.c, share. */
#ifndef DEVCACHE_PYTORCH_MODEL_INTERNAL_H
#define DEVCACHE_PYTORCH_MODEL_INTERNAL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "first-fit.h"
#include "pytorch-model.h"

#define MIB ((size_t)1 << 20)
#define K_MIN_BLOCK_SIZE ((size_t)512)   /* every size is a multiple of this */
#define K_SMALL_SIZE MIB                 /* the largest request of the small pool */
#define K_SMALL_BUFFER (2 * MIB)         /* small-pool segments and pages */
#define K_LARGE_BUFFER (20 * MIB)        /* segments for 1-10 MiB; large pages */
#define K_MIN_LARGE_ALLOC (10 * MIB)
#define K_ROUND_LARGE (2 * MIB)
#define N_INTERVALS 16                   /* roundup_power2_divisions, from 1 MiB */

struct es;

struct blk {
	uint64_t addr;
	size_t size;
	size_t requested;
	unsigned stream;
	bool small;     /* its pool */
	bool allocated;
	bool mapped;    /* false: unmapped address space of an expandable segment */
	struct es *es;  /* its expandable segment, or NULL */
	struct blk *prev, *next; /* address neighbours in the segment */
	int64_t gc_count_base;   /* the pool's get_free_blocks_call_count when freed */
	struct blk *all_prev, *all_next; /* every block, for ptm_delete */
};

/* A sorted array of blocks. */
struct bset {
	struct blk **v;
	size_t n, cap;
};

typedef int (*blk_cmp)(const struct blk *, const struct blk *);

struct pool {
	struct bset blocks;   /* free, by (stream, size, address) */
	struct bset unmapped; /* by (stream, address) */
	bool small;
	int64_t get_free_blocks_call_count;
};

/* An expandable segment: address space for 1 1/8 of the device, mapped a
 * page at a time. */
struct es {
	uint64_t base, size;
	size_t page;
	unsigned char *page_mapped;
	struct es *next;
};

struct ptm {
	struct ptm_config cfg;
	uint64_t allowed_memory_maximum;
	struct pool pools[2]; /* [0] large, [1] small */
	struct bset live;     /* allocated blocks, by address */
	struct first_fit space;
	uint64_t device_used;
	uint64_t total_allocated_memory; /* reserved: segments and mapped pages */
	struct es *segments;
	struct blk *all;
	struct ptm_stats st;
	jmp_buf no_host_memory;
	bool broken;
};

/* The small helpers both files call, static inline so that none of them
 * becomes a global name (an extern splice would stand in for libc's). */
_Noreturn static inline void no_host_memory(struct ptm *m)
{
	longjmp(m->no_host_memory, 1);
}

static inline int cmp_u64(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;
}

static inline int by_size(const struct blk *a, const struct blk *b)
{
	if (a->stream != b->stream)
		return a->stream < b->stream ? -1 : 1;
	if (a->size != b->size)
		return a->size < b->size ? -1 : 1;
	return cmp_u64(a->addr, b->addr);
}

static inline int by_stream_addr(const struct blk *a, const struct blk *b)
{
	if (a->stream != b->stream)
		return a->stream < b->stream ? -1 : 1;
	return cmp_u64(a->addr, b->addr);
}

static inline int by_addr(const struct blk *a, const struct blk *b)
{
	return cmp_u64(a->addr, b->addr);
}

static inline struct pool *pool_of(struct ptm *m, const struct blk *b)
{
	return &m->pools[b->small];
}

/* Link b in between before and after. */
static inline void splice(struct blk *b, struct blk *before, struct blk *after)
{
	if (before)
		before->next = b;
	b->prev = before;
	if (after)
		after->prev = b;
	b->next = after;
}

/* tests/pytorch-model.c: blocks, sorted sets, merging, the driver. */
struct blk *blk_new(struct ptm *m, uint64_t addr, size_t size, unsigned stream, bool small,
		    struct es *es, bool mapped);
void blk_delete(struct ptm *m, struct blk *b);
size_t lower_bound(const struct bset *s, blk_cmp cmp, const struct blk *key);
void set_insert(struct ptm *m, struct bset *s, blk_cmp cmp, struct blk *b);
void set_erase(struct bset *s, blk_cmp cmp, struct blk *b);
void insert_into_blocks(struct ptm *m, struct pool *pool, struct blk *b);
size_t try_merge_blocks(struct ptm *m, struct blk *dst, struct blk *src);
void reserved_change(struct ptm *m, int64_t delta);
void driver_free(struct ptm *m, uint64_t addr, uint64_t size);

/* tests/pytorch-model-expand.c: expandable segments. */
void unmap_block(struct ptm *m, struct blk *b);
void release_expandable_segment(struct ptm *m, struct blk *b);
struct blk *try_allocate_expandable_block(struct ptm *m, unsigned stream, struct pool *pool,
					  size_t size);

#endif
