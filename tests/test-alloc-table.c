/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-alloc-table.c - the allocated blocks' address table: its hash, insert and take with probe chains that collide or overflow, growth. */
#include "config.h"

#include "tap.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"

/* The home slot as it was first written: bits 20 and up of the address
 * over 512 times the multiplier.  table_home() saves a shift and must
 * give the same slots for every block address (a multiple of 512). */
static size_t old_home(size_t cap, uintptr_t addr)
{
	return (size_t)(((uint64_t)addr >> 9) * TABLE_HASH >> 20) & (cap - 1);
}

static void home_is_the_old_hash(void **state)
{
	struct stream_pool p;
	unsigned seed = 1;

	(void)state;
	memset(&p, 0, sizeof p);
	for (size_t cap = 1024; cap <= (size_t)1 << 30; cap *= 2) {
		p.table_mask = cap - 1;
		for (int i = 0; i < 10000; i++) {
			uint64_t r = (uint64_t)rand_r(&seed) << 31 ^ (uint64_t)rand_r(&seed) << 9;
			uintptr_t addr = (uintptr_t)(r & (((uint64_t)1 << 57) - 512));

			assert_int_equal(table_home(&p, addr), old_home(cap, addr));
		}
	}
}

/* Blocks whose home slots collide, inserted and taken in a shuffled
 * order: each is found until taken, never after. */
/* Take b[0..n) from p in an order shuffled by seed, each taken block
 * gone and every block still in found after each take. */
static void take_all_shuffled(struct stream_pool *p, struct block *b, int *order, int n,
			      unsigned seed)
{
	for (int i = 0; i < n; i++)
		order[i] = i;
	for (int i = n - 1; i > 0; i--) {
		int j = rand_r(&seed) % (i + 1), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (int k = 0; k < n; k++) {
		assert_ptr_equal(table_take(p, b[order[k]].addr), &b[order[k]]);
		assert_null(table_find(p, b[order[k]].addr));
		for (int m = k + 1; m < n; m++)
			assert_ptr_equal(table_find(p, b[order[m]].addr), &b[order[m]]);
	}
}

static void take_keeps_chains_whole(void **state)
{
	enum { N = 400 };
	struct stream_pool p;
	static struct block b[N];
	int order[N];

	(void)state;
	memset(&p, 0, sizeof p);
	for (int i = 0; i < N; i++) {
		/* Two in three in a few home slots' chains. */
		b[i].addr = (uintptr_t)(i % 3 ? (i % 7) << 24 : i) * 512 + ((uintptr_t)i << 40);
		assert_int_equal(table_reserve(&p), 0);
		table_insert(&p, &b[i]);
	}
	take_all_shuffled(&p, b, order, N, 3);
	assert_int_equal(table_count(&p), 0);
	free(p.table);
}

/* Past half full the table doubles, twice here: table_reserve() grows
 * it exactly when the next insert would pass one half, every block is
 * found after each growth, and table_count() follows the inserts. */
static void grows_at_half_load(void **state)
{
	enum { N = 2100 };
	struct stream_pool p;
	static struct block b[N];

	(void)state;
	memset(&p, 0, sizeof p);
	assert_null(table_find(&p, 512));
	assert_null(table_take(&p, 512));
	for (int i = 0; i < N; i++) {
		size_t cap = p.table_mask ? p.table_mask + 1 : 0;

		b[i].addr = (uintptr_t)(i + 1) * 512 * 3;
		assert_int_equal(table_reserve(&p), 0);
		assert_int_equal(p.table_mask + 1, 2 * (size_t)i + 2 > cap ? (cap ? 2 * cap : 1024) : cap);
		table_insert(&p, &b[i]);
		assert_int_equal(table_count(&p), i + 1);
	}
	assert_int_equal(p.table_mask + 1, 8192);
	for (int i = 0; i < N; i++)
		assert_ptr_equal(table_find(&p, b[i].addr), &b[i]);
	for (int i = 0; i < N; i += 2)
		assert_ptr_equal(table_take(&p, b[i].addr), &b[i]);
	assert_int_equal(table_count(&p), N / 2);
	for (int i = 0; i < N; i++)
		assert_ptr_equal(table_find(&p, b[i].addr), i % 2 ? &b[i] : NULL);
	free(p.table);
}

/* Chains from the last home slots run past them into the overflow: a
 * table half full of blocks whose homes are its last few slots, whose
 * chains reach the table's last slots, finds and takes them all. */
static void chains_past_the_last_home(void **state)
{
	enum { N = 512 };
	struct stream_pool p;
	static struct block b[N];
	int order[N], n = 0;

	(void)state;
	memset(&p, 0, sizeof p);
	assert_int_equal(table_reserve(&p), 0);
	assert_int_equal(p.table_mask, 1023);
	for (uintptr_t addr = 512; n < N; addr += 512)
		if (table_home(&p, addr) >= 1020)
			b[n++].addr = addr;
	for (int i = 0; i < N; i++) {
		assert_int_equal(table_reserve(&p), 0);
		table_insert(&p, &b[i]);
	}
	assert_int_equal(p.table_mask, 1023);
	assert_int_equal(table_slots(&p), 1536);
	assert_non_null(p.table[1020 + N - 1]);
	take_all_shuffled(&p, b, order, N, 5);
	for (size_t s = 0; s < table_slots(&p); s++)
		assert_null(p.table[s]);
	free(p.table);
}

/* The blocks of a segment, 512 bytes or a multiple apart, spread over
 * the homes: half as many as there are homes, in a table of each size up
 * to 2^16 homes, take few probe steps past their homes. */
static void blocks_spread(void **state)
{
	static const uintptr_t bases[] = { 0x200000, 0x7f0000000000, 0x7f1234200000 };
	struct stream_pool p;

	(void)state;
	memset(&p, 0, sizeof p);
	for (size_t homes = 1024; homes <= 65536; homes *= 4)
		for (size_t k = 0; k < sizeof bases / sizeof *bases; k++)
			for (uintptr_t stride = 512; stride <= 512 * 64; stride *= 4) {
				char *used = calloc(homes + homes / 2, 1);
				size_t steps = 0;

				assert_non_null(used);
				p.table_mask = homes - 1;
				for (size_t i = 0; i < homes / 2; i++) {
					size_t s = table_home(&p, bases[k] + i * stride);

					for (; used[s]; s++)
						steps++;
					used[s] = 1;
				}
				/* Random homes would take about one half. */
				assert_true(steps < homes / 2 * 2 / 5);
				free(used);
			}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(home_is_the_old_hash),
		cmocka_unit_test(blocks_spread),
		cmocka_unit_test(take_keeps_chains_whole),
		cmocka_unit_test(grows_at_half_load),
		cmocka_unit_test(chains_past_the_last_home),
	};

	return RUN_TAP(tests);
}
