/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-table.c - the allocated blocks by address: open addressing with linear probing, for devcache_free. */
#include "alloc.h"

#include <stdlib.h>

int table_grow(struct allocator *a)
{
	size_t old_cap = a->table_cap, cap = old_cap ? old_cap * 2 : 1024;
	struct block **old = a->table, **t = calloc(cap, sizeof *t);

	if (!t)
		return DEVCACHE_ENOMEM;
	a->table = t;
	a->table_cap = cap;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i]) {
			size_t s = table_home(a, old[i]->addr);

			while (t[s])
				s = (s + 1) & (cap - 1);
			t[s] = old[i];
		}
	free(old);
	return 0;
}

static size_t table_slot(const struct allocator *a, uintptr_t addr)
{
	size_t mask = a->table_cap - 1, s = table_home(a, addr);

	while (a->table[s] && a->table[s]->addr != addr)
		s = (s + 1) & mask;
	return s;
}

struct block *table_find(const struct allocator *a, uintptr_t addr)
{
	return a->table_cap ? a->table[table_slot(a, addr)] : NULL;
}

/* Remove and return the block at addr.  Backward-shift deletion keeps probe
 * chains whole without tombstones: each following entry moves into the hole
 * unless its home slot lies cyclically between the hole and itself. */
struct block *table_take(struct allocator *a, uintptr_t addr)
{
	if (!a->table_cap)
		return NULL;
	size_t mask = a->table_cap - 1, hole = table_slot(a, addr);
	struct block *found = a->table[hole];

	if (!found)
		return NULL;
	a->table[hole] = NULL;
	for (size_t j = (hole + 1) & mask; a->table[j]; j = (j + 1) & mask) {
		size_t home = table_home(a, a->table[j]->addr);
		bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);

		if (stays)
			continue;
		a->table[hole] = a->table[j];
		a->table[j] = NULL;
		hole = j;
	}
	a->table_used--;
	return found;
}
