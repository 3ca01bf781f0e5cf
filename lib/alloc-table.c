/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-table.c - the allocated blocks by address: open addressing with linear probing, for devcache_free. */
#include "alloc.h"

#include <stdlib.h>

int table_grow(struct stream_pool *p)
{
	size_t old_cap = p->table_mask ? p->table_mask + 1 : 0, cap = old_cap ? old_cap * 2 : 1024;
	struct block **old = p->table, **t = calloc(cap, sizeof *t);

	if (!t)
		return DEVCACHE_ENOMEM;
	p->table = t;
	p->table_room += cap / 2 - old_cap / 2;
	p->table_mask = cap - 1;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i]) {
			size_t s = table_home(p, old[i]->addr);

			while (t[s])
				s = (s + 1) & (cap - 1);
			t[s] = old[i];
		}
	free(old);
	return 0;
}

struct block *table_find(const struct stream_pool *p, uintptr_t addr)
{
	return p->table_mask ? p->table[table_slot(p, addr)] : NULL;
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
