/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bench.h - helpers shared by the benchmark programs: a seeded generator, a clock, opening a context. */
#ifndef DEVCACHE_BENCH_H
#define DEVCACHE_BENCH_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <devcache.h>

#define MIB ((size_t)1 << 20)

/* xoshiro256** seeded through splitmix64: the same sequence on every
 * machine and libc, which rand() does not promise. */
struct rng {
	uint64_t s[4];
};

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The median of n figures (sorts them). */
static inline double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static inline uint64_t rng_rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static inline void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++) {
		uint64_t z = (seed += 0x9e3779b97f4a7c15ull);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		r->s[i] = z ^ (z >> 31);
	}
}

static inline uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rng_rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rng_rotl(s[3], 45);
	return result;
}

/* Uniform in [0, 1). */
static inline double rng_unit(struct rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [lo, hi]. */
static inline uint64_t rng_range(struct rng *r, uint64_t lo, uint64_t hi)
{
	return lo + rng_next(r) % (hi - lo + 1);
}

/* order[0..n) the numbers 0 to n - 1 in a random order (Fisher-Yates):
 * the turns of the allocators a benchmark compares. */
static inline void rng_order(struct rng *r, int *order, int n)
{
	for (int k = 0; k < n; k++)
		order[k] = k;
	for (int k = n - 1; k > 0; k--) {
		int j = (int)(rng_next(r) % (uint64_t)(k + 1)), x = order[k];

		order[k] = order[j];
		order[j] = x;
	}
}

/* Log-uniform in [lo, hi]: as many tensors near 1 KiB as near 1 MiB. */
static inline double rng_log_uniform(struct rng *r, double lo, double hi)
{
	return exp(log(lo) + rng_unit(r) * (log(hi) - log(lo)));
}

static inline double now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A context that reads neither configuration files nor DEVCACHE_*
 * variables, so the machine's settings cannot change the figures. */
static inline int bench_open(devcache_ctx_t **ctx_p, const char *options)
{
	devcache_open_args_t args = { 0 };

	args.struct_size = sizeof args;
	args.options = options;
	args.flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV;
	return devcache_open_ex(ctx_p, &args);
}

static inline void bench_fail(const char *what, int err)
{
	fprintf(stderr, "bench: %s: %s (%s)\n", what, devcache_strerror(err),
		devcache_last_error());
	exit(2);
}

#endif
