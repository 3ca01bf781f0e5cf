/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-table.c - the allocated blocks by address: open addressing with linear probing, for devcache_free. */
#include "alloc.h"

#include <stdlib.h>

int table_grow(struct stream_pool *p)
{
	size_t old_homes = p->table_mask ? p->table_mask + 1 : 0, old_slots = table_slots(p);
	size_t homes = old_homes ? old_homes * 2 : 1024;
	struct block **old = p->table, **t = calloc(homes + homes / 2, sizeof *t);

	if (!t)
		return DEVCACHE_ENOMEM;
	p->table = t;
	p->table_room += homes / 2 - old_homes / 2;
	p->table_mask = homes - 1;
	for (size_t i = 0; i < old_slots; i++)
		if (old[i]) {
			struct block **s = t + table_home(p, old[i]->addr);

			while (*s)
				s++;
			*s = old[i];
		}
	free(old);
	return 0;
}

struct block *table_find(const struct stream_pool *p, uintptr_t addr)
{
	return p->table_mask ? *table_slot(p, addr) : NULL;
}

struct block *alloc_find(struct allocator *a, uintptr_t addr, bool take,
			 struct stream_pool **pool_p)
{
	for (size_t i = 0; i < a->n_pools; i++) {
		struct stream_pool *p = a->pools[i];
		struct block *b = take ? table_take(p, addr) : table_find(p, addr);

		if (b) {
			if (pool_p)
				*pool_p = p;
			return b;
		}
	}
	return NULL;
}
