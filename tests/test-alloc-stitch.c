/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-alloc-stitch.c - stitching: what PyTorch's expandable segments fail, served from free pages anywhere on the device. */
#include "tap.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <string.h>

#include "alloc-fixture.h"
#include "alloc-check.h"

/* vmm:0 has 1 GiB that it enforces and 2 MiB mapping granularity;
 * fake_allocs() counts the physical pages it was asked to make. */

struct vmm {
	void *module;
	unsigned long (*allocs)(void);
};

static void vmm_open(struct vmm *v)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/vmm.so", test_env("TEST_MODULES"));
	assert_non_null(v->module = dlopen(path, RTLD_NOW));
	*(void **)&v->allocs = dlsym(v->module, "fake_allocs");
	assert_non_null(v->allocs);
}

/* 40 blocks of 8 MiB, every other one freed: each 20 MiB page PyTorch
 * maps keeps a live block, so none can be unmapped; then 500 MiB. */
static void fragment(struct fx *f, void *p[40], void **big)
{
	for (int i = 0; i < 40; i++) {
		p[i] = fx_alloc(f, 8 * MiB, NULL);
		memset(p[i], i, 8 * MiB);
	}
	for (int i = 0; i < 40; i += 2)
		fx_free(f, p[i]);
	*big = fx_alloc(f, 500 * MiB, NULL);
}

/* The live blocks of fragment(), as check_allocator() takes them;
 * returns how many. */
static size_t held_blocks(void *p[40], struct held *held)
{
	for (int i = 0; i < 20; i++)
		held[i] = (struct held){p[2 * i + 1], 8 * MiB};
	return 20;
}

static void intact(void *p[40])
{
	for (int i = 1; i < 40; i += 2)
		for (size_t k = 0; k < 8 * MiB; k += 4093)
			if (((unsigned char *)p[i])[k] != (unsigned char)i)
				fail_msg("block %d was overwritten at %zu", i, k);
}

static void serves_what_pytorch_fails(void **state)
{
	struct fx f;
	struct vmm v;
	void *p[40], *big, *q = NULL;

	(void)state;
	vmm_open(&v);
	fx_open(&f, "vmm:0", "expandable_segments:True");
	fragment(&f, p, &big);
	/* PyTorch's policy has 820 MiB mapped and needs 300 more.  The 20
	 * free blocks hold 80 whole granules: unmapped, they leave 660 MiB,
	 * and their pages make 80 of the 150 the request needs. */
	unsigned long before = v.allocs();
	q = fx_alloc(&f, 300 * MiB, NULL);
	assert_int_equal(v.allocs() - before, 150 - 80);
	memset(q, 0xa5, 300 * MiB);
	intact(p);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.num_stitches, 1);
	assert_int_equal(s.num_ooms, 0);
	assert_int_equal(s.num_alloc_retries, 1);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 960 * MiB);
	struct held held[22];
	held_blocks(p, held);
	held[20] = (struct held){big, 500 * MiB};
	held[21] = (struct held){q, 300 * MiB};
	check_allocator(&f, held, 22);
	/* From then on, free memory goes back granule by granule: only the
	 * live blocks' stay mapped, where PyTorch keeps the 20 MiB pages. */
	fx_free(&f, q);
	assert_int_equal(devcache_empty_cache(f.dev), 0);
	s = fx_stats(&f);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 660 * MiB);
	check_allocator(&f, held, 21);
	intact(p);
	fx_free(&f, big);
	for (int i = 1; i < 40; i += 2)
		fx_free(&f, p[i]);
	assert_int_equal(devcache_empty_cache(f.dev), 0);
	check_allocator(&f, NULL, 0);
	assert_int_equal(fx_stats(&f).reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	devcache_close(f.ctx);
	dlclose(v.module);
}

/* Turned off, the allocator fails where PyTorch fails. */
static void off_fails_as_pytorch(void **state)
{
	struct fx f;
	void *p[40], *big, *q = NULL;

	(void)state;
	fx_open(&f, "vmm:0", "expandable_segments:True,expandable_stitching:false");
	fragment(&f, p, &big);
	assert_int_equal(devcache_alloc(f.dev, 300 * MiB, NULL, &q), DEVCACHE_ENOMEM);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.num_stitches, 0);
	assert_int_equal(s.num_ooms, 1);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 820 * MiB);
	fx_free(&f, big);
	for (int i = 1; i < 40; i += 2)
		fx_free(&f, p[i]);
	devcache_close(f.ctx);
}

/* Out of memory even so: a clean failure, the free granules given back,
 * and memory_fraction then counts what is mapped, not PyTorch's segment. */
static void fails_when_memory_runs_out(void **state)
{
	struct fx f;
	void *p[40], *q = NULL;

	(void)state;
	fx_open(&f, "vmm:0", "expandable_segments:True,memory_fraction:0.5");
	for (int i = 0; i < 40; i++)
		p[i] = fx_alloc(&f, 8 * MiB, NULL);
	for (int i = 0; i < 40; i += 2)
		fx_free(&f, p[i]);
	/* 160 MiB live; 160 + 400 > 512. */
	assert_int_equal(devcache_alloc(f.dev, 400 * MiB, NULL, &q), DEVCACHE_ENOMEM);
	assert_null(q);
	assert_contains(devcache_last_error(), "vmm:0: out of memory. Tried to allocate 400.00 MiB");
	assert_contains(devcache_last_error(), "memory_fraction");
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.num_ooms, 1);
	assert_int_equal(s.num_stitches, 0);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 160 * MiB);
	struct held held[20];
	check_allocator(&f, held, held_blocks(p, held));
	/* 160 + 300 <= 512: mapped in granules, with no stitch needed and no
	 * 20 MiB segment counted against the cap. */
	q = fx_alloc(&f, 300 * MiB, NULL);
	s = fx_stats(&f);
	assert_int_equal(s.num_stitches, 0);
	assert_int_equal(s.num_ooms, 1);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 460 * MiB);
	/* 2 MiB more fits in granules under the cap: PyTorch's check
	 * (460 + 20 MiB segment) would pass too, but 50 MiB would not. */
	void *r = fx_alloc(&f, 50 * MiB, NULL);
	assert_int_equal(fx_stats(&f).reserved_bytes[DEVCACHE_POOL_ALL].current, 510 * MiB);
	fx_free(&f, r);
	fx_free(&f, q);
	for (int i = 1; i < 40; i += 2)
		fx_free(&f, p[i]);
	check_allocator(&f, NULL, 0);
	devcache_close(f.ctx);
}

/* Pages cached by another stream's pool are taken too. */
static void takes_pages_from_other_streams(void **state)
{
	struct fx f;
	devcache_stream_t other;
	void *p[40], *big;

	(void)state;
	fx_open(&f, "vmm:0", "expandable_segments:True");
	assert_int_equal(devcache_stream_create(f.dev, &other), 0);
	fragment(&f, p, &big);
	/* The other stream's request maps fresh pages up to the device's
	 * 1 GiB; what is missing comes from the default stream's free
	 * granules. */
	void *q = fx_alloc(&f, 300 * MiB, other);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.num_stitches, 1);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 960 * MiB);
	memset(q, 0x5a, 300 * MiB);
	intact(p);
	fx_free(&f, q);
	fx_free(&f, big);
	for (int i = 1; i < 40; i += 2)
		fx_free(&f, p[i]);
	assert_int_equal(devcache_stream_destroy(f.dev, other), 0);
	check_allocator(&f, NULL, 0);
	devcache_close(f.ctx);
}

static uint64_t rng(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Random requests from 512 bytes to 48 MiB on two streams under a 256 MiB
 * cap: every failure is a true want of memory, every byte handed out stays
 * as written, and the allocator's structure and statistics stay whole. */
static void random_under_a_tight_cap(void **state)
{
	struct fx f;
	struct vmm v;
	devcache_stream_t streams[2] = {NULL, NULL};
	struct held held[128];
	unsigned char tag[128];
	size_t n = 0, failures = 0;
	uint64_t seed = 0x5717c4, cap = 256 * MiB, gran = 2 * MiB;

	(void)state;
	vmm_open(&v);
	fx_open(&f, "vmm:0", "expandable_segments:True,memory_fraction:0.25");
	assert_int_equal(devcache_stream_create(f.dev, &streams[1]), 0);
	for (int step = 0; step < 4000; step++) {
		if (n == 0 || (n < 128 && rng(&seed) % 100 < 55)) {
			size_t size = (size_t)512 << (rng(&seed) % 17);
			void *p = NULL;

			size += rng(&seed) % size;
			if (devcache_alloc(f.dev, size, streams[rng(&seed) & 1], &p) == 0) {
				tag[n] = (unsigned char)step;
				memset(p, tag[n], size);
				held[n++] = (struct held){p, size};
			} else {
				devcache_stats_t s = fx_stats(&f);
				uint64_t rsize = (size + 511) / 512 * 512;

				failures++;
				assert_null(p);
				/* Every free granule was unmapped, and what the
				 * request needs does not fit. */
				if ((uint64_t)s.reserved_bytes[DEVCACHE_POOL_ALL].current +
					    ((rsize + gran - 1) / gran + 1) * gran <=
				    cap)
					fail_msg("step %d: %zu bytes failed with %" PRId64
						 " bytes mapped under %" PRIu64,
						 step, size, s.reserved_bytes[DEVCACHE_POOL_ALL].current,
						 cap);
			}
		} else {
			size_t i = rng(&seed) % n;
			const unsigned char *b = held[i].ptr;

			for (size_t k = 0; k < held[i].size; k += 4093)
				if (b[k] != tag[i])
					fail_msg("step %d: a block was overwritten", step);
			fx_free(&f, held[i].ptr);
			held[i] = held[--n];
			tag[i] = tag[n];
		}
		if (step % 64 == 0)
			check_allocator(&f, held, n);
	}
	check_allocator(&f, held, n);
	devcache_stats_t s = fx_stats(&f);
	print_message("# %zu failures, %" PRIu64 " stitched\n", failures, s.num_stitches);
	assert_true(s.num_stitches > 0);
	assert_true(failures > 0);
	assert_true(s.reserved_bytes[DEVCACHE_POOL_ALL].peak <= (int64_t)cap);
	while (n)
		fx_free(&f, held[--n].ptr);
	assert_int_equal(devcache_empty_cache(f.dev), 0);
	assert_int_equal(fx_stats(&f).reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(devcache_stream_destroy(f.dev, streams[1]), 0);
	devcache_close(f.ctx);
	dlclose(v.module);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(serves_what_pytorch_fails),
		cmocka_unit_test(off_fails_as_pytorch),
		cmocka_unit_test(fails_when_memory_runs_out),
		cmocka_unit_test(takes_pages_from_other_streams),
		cmocka_unit_test(random_under_a_tight_cap),
	};

	return RUN_TAP(tests);
}
