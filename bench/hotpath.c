/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* hotpath.c - benchmark: ns per alloc+free pair on a cache hit, devcache against glibc malloc, jemalloc, mimalloc and tcmalloc. */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "mallocs.h"

enum { I_DEVCACHE, I_GLIBC, I_JEMALLOC, I_MIMALLOC, I_TCMALLOC, N_IMPL };

/* devcache first, then the reference mallocs in mallocs.h's order. */
static struct ref_malloc impls[N_IMPL] = { [I_DEVCACHE] = { .name = "devcache" } };

static bool is_devcache(const struct ref_malloc *impl)
{
	return impl == &impls[I_DEVCACHE];
}

/* A sequence of request sizes, and how many blocks stay live: 0 frees each
 * block right after allocating it; W > 0 keeps the last W blocks, freeing
 * the one allocated W requests earlier after each allocation. */
struct sequence {
	const char *name;
	const char *label;
	size_t *sizes;
	size_t n;
	size_t window;
	size_t passes[N_IMPL]; /* timed passes per run, set by calibrate() */
};

#define MAX_THREADS 2
#define MAX_REPS 15
/* The target: 2 threads, each on its own stream, give at least
 * this many times the throughput of one. */
#define SCALING_TARGET 1.8

static devcache_ctx_t *ctx;
static devcache_device_t *dev;
static devcache_stream_t streams[MAX_THREADS];
static int reps = 7;
static double run_seconds = 0.1; /* the least time a run's timed passes take */
static const char *only_impl, *only_seq;

/* Where one thread's figures go. */
struct thread_arg {
	const struct ref_malloc *impl;
	const struct sequence *seq;
	size_t passes;
	devcache_stream_t stream;
	size_t offset;
	pthread_barrier_t *barrier;
	devcache_stats_t *stats_before; /* thread 0 of a devcache run reads it */
	double start, end;
	size_t pairs;
	int failed;
};

/* One pass over sizes; the live window lives in ring. */
static int pass_malloc(malloc_fn m, free_fn f, const size_t *sizes, size_t n, void **ring,
		       size_t window)
{
	if (window == 0) {
		for (size_t i = 0; i < n; i++) {
			void *p = m(sizes[i]);

			if (!p)
				return -1;
			f(p);
		}
		return 0;
	}
	for (size_t i = 0, slot = 0; i < n; i++) {
		void *p = m(sizes[i]);

		if (!p)
			return -1;
		if (ring[slot])
			f(ring[slot]);
		ring[slot] = p;
		if (++slot == window)
			slot = 0;
	}
	return 0;
}

static int pass_devcache(devcache_stream_t stream, const size_t *sizes, size_t n, void **ring,
			 size_t window)
{
	int bad = 0;

	if (window == 0) {
		for (size_t i = 0; i < n; i++) {
			void *p;

			if (devcache_alloc(dev, sizes[i], stream, &p) != 0)
				return -1;
			bad |= devcache_free(dev, p);
		}
		return bad ? -1 : 0;
	}
	for (size_t i = 0, slot = 0; i < n; i++) {
		void *p;

		if (devcache_alloc(dev, sizes[i], stream, &p) != 0)
			return -1;
		if (ring[slot])
			bad |= devcache_free(dev, ring[slot]);
		ring[slot] = p;
		if (++slot == window)
			slot = 0;
	}
	return bad ? -1 : 0;
}

static int run_passes(struct thread_arg *t, const size_t *sizes, size_t passes, void **ring)
{
	const struct sequence *q = t->seq;

	if (is_devcache(t->impl)) {
		for (size_t p = 0; p < passes; p++)
			if (pass_devcache(t->stream, sizes, q->n, ring, q->window) != 0)
				return -1;
		return 0;
	}
	malloc_fn m = ref_malloc_fn(t->impl);
	free_fn f = ref_free_fn(t->impl);

	for (size_t p = 0; p < passes; p++)
		if (pass_malloc(m, f, sizes, q->n, ring, q->window) != 0)
			return -1;
	return 0;
}

static void free_ring(struct thread_arg *t, void **ring)
{
	for (size_t i = 0; i < t->seq->window; i++) {
		if (!ring[i])
			continue;
		if (is_devcache(t->impl))
			devcache_free(dev, ring[i]);
		else
			t->impl->release(ring[i]);
		ring[i] = NULL;
	}
}

/* Each thread walks its own copy of the sequence (rotated by offset, so
 * two threads do not ask for the same size at the same moment), warms up
 * with two untimed passes, then runs the timed passes. */
static void *thread_main(void *arg)
{
	struct thread_arg *t = arg;
	const struct sequence *q = t->seq;
	size_t *sizes = malloc(q->n * sizeof *sizes);
	void **ring = calloc(q->window ? q->window : 1, sizeof *ring);

	if (!sizes || !ring) {
		t->failed = 1;
		pthread_barrier_wait(t->barrier);
		pthread_barrier_wait(t->barrier);
		goto out;
	}
	for (size_t i = 0; i < q->n; i++)
		sizes[i] = q->sizes[(i + t->offset) % q->n];
	t->failed = run_passes(t, sizes, 2, ring) != 0;
	/* Between the two barriers every thread has warmed up and none has
	 * started its timed passes: the device's counters are read there. */
	pthread_barrier_wait(t->barrier);
	if (t->stats_before)
		devcache_stats(dev, t->stats_before);
	pthread_barrier_wait(t->barrier);
	t->start = now_seconds();
	if (!t->failed)
		t->failed = run_passes(t, sizes, t->passes, ring) != 0;
	t->end = now_seconds();
	t->pairs = q->n * t->passes;
	free_ring(t, ring);
out:
	free(ring);
	free(sizes);
	return NULL;
}

struct result {
	double ns_per_pair; /* mean over threads of a thread's time per pair */
	double mpairs;      /* all threads' pairs over wall time, millions a second */
	uint64_t device_allocs; /* devcache: driver allocations in the timed passes */
};

static int run_once(const struct ref_malloc *impl, const struct sequence *q, size_t passes,
		    int nthreads, struct result *r)
{
	pthread_t tid[MAX_THREADS];
	struct thread_arg args[MAX_THREADS];
	pthread_barrier_t barrier;
	devcache_stats_t before, after;
	double first = 0, last = 0, ns = 0;
	size_t pairs = 0;
	int failed = 0;

	pthread_barrier_init(&barrier, NULL, (unsigned)nthreads);
	for (int i = 0; i < nthreads; i++) {
		args[i] = (struct thread_arg){ .impl = impl, .seq = q, .passes = passes,
					       .stream = streams[i],
					       .offset = (q->n / (size_t)nthreads) * (size_t)i,
					       .barrier = &barrier };
		if (i == 0 && is_devcache(impl))
			args[i].stats_before = &before;
		if (pthread_create(&tid[i], NULL, thread_main, &args[i]) != 0) {
			fprintf(stderr, "hotpath: pthread_create: %s\n", strerror(errno));
			exit(2);
		}
	}
	for (int i = 0; i < nthreads; i++) {
		pthread_join(tid[i], NULL);
		failed |= args[i].failed;
		if (i == 0 || args[i].start < first)
			first = args[i].start;
		if (i == 0 || args[i].end > last)
			last = args[i].end;
		ns += (args[i].end - args[i].start) * 1e9 / (double)args[i].pairs;
		pairs += args[i].pairs;
	}
	pthread_barrier_destroy(&barrier);
	if (failed)
		return -1;
	r->device_allocs = 0;
	if (is_devcache(impl)) {
		devcache_stats(dev, &after);
		r->device_allocs = after.num_device_alloc - before.num_device_alloc;
	}
	r->ns_per_pair = ns / nthreads;
	r->mpairs = (double)pairs / (last - first) / 1e6;
	return 0;
}

/* ---- the allocators ------------------------------------------------------ */

static void load_devcache(void)
{
	int err = bench_open(&ctx, NULL);

	if (err)
		bench_fail("devcache_open", err);
	err = devcache_device_get(ctx, "host", &dev);
	if (err)
		bench_fail("devcache_device_get host", err);
	for (int i = 0; i < MAX_THREADS; i++) {
		err = devcache_stream_create(dev, &streams[i]);
		if (err)
			bench_fail("devcache_stream_create", err);
	}
	impls[I_DEVCACHE].available = true;
	snprintf(impls[I_DEVCACHE].version, sizeof impls[I_DEVCACHE].version, "%s",
		 devcache_version_string());
}

/* The reference mallocs, after devcache in impls[]. */
static void load_mallocs(char **argv)
{
	struct ref_malloc refs[N_REF_MALLOCS];

	ref_mallocs_load(refs, argv);
	for (int k = 0; k < N_REF_MALLOCS; k++)
		impls[I_GLIBC + k] = refs[k];
}

/* ---- the sequences --------------------------------------------------------- */

static size_t *fixed_sizes(size_t n, size_t size)
{
	size_t *v = malloc(n * sizeof *v);

	if (!v)
		exit(2);
	for (size_t i = 0; i < n; i++)
		v[i] = size;
	return v;
}

/* Tensor sizes: log-uniform element counts from 512 B to 64 MiB, a whole
 * number of 2-byte (half) or 4-byte (float) elements. */
static size_t *mix_sizes(size_t n, uint64_t seed)
{
	size_t *v = malloc(n * sizeof *v);
	struct rng r;

	if (!v)
		exit(2);
	rng_seed(&r, seed);
	for (size_t i = 0; i < n; i++) {
		size_t elt = rng_next(&r) & 1 ? 4 : 2;
		size_t bytes = (size_t)rng_log_uniform(&r, 512, 64.0 * MIB);

		v[i] = bytes / elt * elt;
	}
	return v;
}

/* Enough passes for a run to take run_seconds on one thread: slow
 * allocators get fewer pairs, fast ones enough for a steady figure.  All
 * runs of an allocator on a sequence use the same count. */
static int calibrate(struct sequence *q)
{
	for (int i = 0; i < N_IMPL; i++) {
		struct result r;
		double p;

		if (!impls[i].available)
			continue;
		if (run_once(&impls[i], q, 1, 1, &r) != 0)
			return -1;
		p = run_seconds * 1e9 / (r.ns_per_pair * (double)q->n);
		q->passes[i] = p < 1 ? 1 : p > 100000 ? 100000 : (size_t)p + 1;
	}
	return 0;
}

/* ---- the report ------------------------------------------------------------ */

static const char *fmt_ns(char *buf, size_t n, double ns)
{
	snprintf(buf, n, ns < 100 ? "%.1f" : "%.0f", ns);
	return buf;
}

static void target_line(const char *id, bool pass, const char *fmt, ...)
	DEVCACHE_PRINTF(3, 4);

static void target_line(const char *id, bool pass, const char *fmt, ...)
{
	va_list ap;

	printf("TARGET %-28s %s  ", id, pass ? "PASS" : "MISS");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

/* The malloc with the lowest ns/pair at nthreads, -1 when none was
 * measured; *n_p: how many were. */
static int fastest_malloc(struct result med[N_IMPL][MAX_THREADS + 1], int nthreads, int *n_p)
{
	int best = -1;

	*n_p = 0;
	for (int i = I_GLIBC; i < N_IMPL; i++) {
		if (!impls[i].available)
			continue;
		++*n_p;
		if (best < 0 || med[i][nthreads].ns_per_pair < med[best][nthreads].ns_per_pair)
			best = i;
	}
	return best;
}

/* The mallocs' 2-thread over 1-thread throughput, beside devcache's target. */
static void print_malloc_scaling(struct result med[N_IMPL][MAX_THREADS + 1])
{
	const char *sep = "";

	for (int i = I_GLIBC; i < N_IMPL; i++) {
		if (!impls[i].available)
			continue;
		if (!*sep)
			printf("(info) 2-thread scaling of the mallocs: ");
		printf("%s%s %.2fx", sep, impls[i].name, med[i][2].mpairs / med[i][1].mpairs);
		sep = ", ";
	}
	if (*sep)
		putchar('\n');
}

static int bench_sequence(struct sequence *q, int nthreads_max)
{
	struct result med[N_IMPL][MAX_THREADS + 1] = { 0 };
	double ns[N_IMPL][MAX_THREADS + 1][MAX_REPS], mp[N_IMPL][MAX_THREADS + 1][MAX_REPS];
	uint64_t dallocs = 0;
	char b1[32], b2[32];
	int rc = 0;

	printf("\n-- %s: %s\n", q->name, q->label);
	fflush(stdout);
	if (calibrate(q) != 0) {
		fprintf(stderr, "hotpath: calibration: an allocation failed\n");
		return -1;
	}
	/* Repetitions interleave the allocators, so a slow moment of the
	 * machine does not land on one of them; and each round takes them in
	 * another order (a fixed shuffle), since a run slows down the one
	 * right after it (seen: devcache's after tcmalloc's 1 MiB pairs,
	 * whose frees return pages to the kernel, by up to a third). */
	struct rng order_rng;
	rng_seed(&order_rng, 7);
	for (int t = 1; t <= nthreads_max; t++)
		for (int r = 0; r < reps; r++) {
			int order[N_IMPL];

			rng_order(&order_rng, order, N_IMPL);
			for (int k = 0; k < N_IMPL; k++) {
				int i = order[k];
				struct result res;

				if (!impls[i].available)
					continue;
				if (run_once(&impls[i], q, q->passes[i], t, &res) != 0) {
					fprintf(stderr, "hotpath: %s: an allocation failed (%s)\n",
						impls[i].name,
						i == I_DEVCACHE ? devcache_last_error() : "NULL");
					return -1;
				}
				ns[i][t][r] = res.ns_per_pair;
				dallocs += res.device_allocs;
				mp[i][t][r] = res.mpairs;
			}
		}
	for (int i = 0; i < N_IMPL; i++)
		for (int t = 1; t <= nthreads_max && impls[i].available; t++) {
			med[i][t].ns_per_pair = bench_median(ns[i][t], reps);
			med[i][t].mpairs = bench_median(mp[i][t], reps);
		}

	if (nthreads_max >= 2) {
		printf("%-22s %12s %10s %12s %10s %8s\n", "", "1 thread", "", "2 threads", "", "");
		printf("%-22s %12s %10s %12s %10s %8s\n", "allocator", "ns/pair", "Mpairs/s",
		       "ns/pair", "Mpairs/s", "scaling");
	} else {
		printf("%-22s %12s %10s\n", "", "1 thread", "");
		printf("%-22s %12s %10s\n", "allocator", "ns/pair", "Mpairs/s");
	}
	for (int i = 0; i < N_IMPL; i++) {
		char name[64];

		snprintf(name, sizeof name, "%s %s", impls[i].name, impls[i].version);
		if (!impls[i].available) {
			printf("%-22s (not measured: %s)\n", impls[i].name, impls[i].why);
			continue;
		}
		printf("%-22s %12s %10.2f", name, fmt_ns(b1, sizeof b1, med[i][1].ns_per_pair),
		       med[i][1].mpairs);
		if (nthreads_max >= 2)
			printf(" %12s %10.2f %7.2fx", fmt_ns(b2, sizeof b2, med[i][2].ns_per_pair),
			       med[i][2].mpairs, med[i][2].mpairs / med[i][1].mpairs);
		putchar('\n');
	}
	printf("devcache device allocations in the timed passes: %llu%s\n",
	       (unsigned long long)dallocs,
	       dallocs ? " (NOT every request was a cache hit)" : " (every request a cache hit)");

	/* Targets: devcache's pair no slower than the fastest malloc's on one
	 * thread; and devcache's throughput with 2 threads, each on its own
	 * stream, against 1. */
	if (!impls[I_DEVCACHE].available)
		return 0;
	char id[64];
	int n_mallocs = 0, best = fastest_malloc(med, 1, &n_mallocs);

	snprintf(id, sizeof id, "hotpath/%s/1-thread", q->name);
	if (best < 0) {
		printf("TARGET %-28s SKIP  no malloc measured (target: at most the ns/op of the "
		       "fastest malloc)\n", id);
	} else {
		bool pass = med[I_DEVCACHE][1].ns_per_pair <= med[best][1].ns_per_pair;

		target_line(id, pass,
			    "devcache %s ns/pair %s %s %s ns/pair, the fastest of %d malloc%s "
			    "(%.2fx; target: at most the ns/op of the fastest malloc)",
			    fmt_ns(b1, sizeof b1, med[I_DEVCACHE][1].ns_per_pair),
			    pass ? "<=" : ">", impls[best].name,
			    fmt_ns(b2, sizeof b2, med[best][1].ns_per_pair), n_mallocs,
			    n_mallocs > 1 ? "s" : "",
			    med[I_DEVCACHE][1].ns_per_pair / med[best][1].ns_per_pair);
		rc |= !pass;
	}
	if (nthreads_max >= 2) {
		double s = med[I_DEVCACHE][2].mpairs / med[I_DEVCACHE][1].mpairs;
		bool pass = s >= SCALING_TARGET;

		snprintf(id, sizeof id, "hotpath/%s/2-thread-scaling", q->name);
		target_line(id, pass,
			    "devcache 2 threads %.2f Mpairs/s = %.2fx its 1 thread %.2f (target >= %.2fx)",
			    med[I_DEVCACHE][2].mpairs, s, med[I_DEVCACHE][1].mpairs, SCALING_TARGET);
		rc |= !pass;
		print_malloc_scaling(med);
		if ((best = fastest_malloc(med, 2, &n_mallocs)) >= 0)
			printf("(info) 2 threads: devcache %s ns/pair, the fastest malloc %s %s ns/pair\n",
			       fmt_ns(b1, sizeof b1, med[I_DEVCACHE][2].ns_per_pair),
			       impls[best].name, fmt_ns(b2, sizeof b2, med[best][2].ns_per_pair));
	}
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: hotpath [-r REPS] [-s SECONDS] [-t THREADS] [-a ALLOCATOR] [-c CASE]\n"
		   "  -r REPS       runs per figure, the median is reported (default 7, at most %d)\n"
		   "  -s SECONDS    least duration of a run's timed passes (default 0.1)\n"
		   "  -t THREADS    1 or 2 (default 2: both)\n"
		   "  -a ALLOCATOR  measure only devcache, glibc, jemalloc, mimalloc or tcmalloc\n"
		   "                (for perf; the targets then compare what was measured)\n"
		   "  -c CASE       only mix, fixed-4K or fixed-1M\n",
		MAX_REPS);
}

int main(int argc, char **argv)
{
	int opt, nthreads = 2, rc = 0;

	load_mallocs(argv);
	while ((opt = getopt(argc, argv, "r:s:t:a:c:h")) != -1) {
		switch (opt) {
		case 'r':
			reps = atoi(optarg);
			break;
		case 's':
			run_seconds = atof(optarg);
			break;
		case 'a':
			only_impl = optarg;
			break;
		case 'c':
			only_seq = optarg;
			break;
		case 't':
			nthreads = atoi(optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (reps < 1 || reps > MAX_REPS || run_seconds <= 0 || nthreads < 1 ||
	    nthreads > MAX_THREADS) {
		usage(stderr);
		return 2;
	}
	load_devcache();
	for (int i = 0; only_impl && i < N_IMPL; i++)
		if (strncmp(impls[i].name, only_impl, strlen(only_impl)) != 0 && impls[i].available) {
			impls[i].available = false;
			snprintf(impls[i].why, sizeof impls[i].why, "not asked for (-a %s)", only_impl);
		}

	struct sequence seqs[] = {
		{ "mix", "tensor sizes 512 B to 64 MiB (log-uniform, seed 42), 4096 requests, 8 live",
		  mix_sizes(4096, 42), 4096, 8, { 0 } },
		{ "fixed-4K", "4 KiB every time, each block freed at once", fixed_sizes(4096, 4096),
		  4096, 0, { 0 } },
		{ "fixed-1M", "1 MiB every time, each block freed at once", fixed_sizes(4096, MIB),
		  4096, 0, { 0 } },
	};

	printf("== Hot path: ns per alloc+free pair on a cache hit\n"
	       "median of %d runs of at least %g s each, after 2 warm-up passes per thread\n",
	       reps, run_seconds);
	printf("devcache: host device, default tunables, one stream per thread\n");
	for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
		int r = only_seq && strcmp(only_seq, seqs[i].name) ? 0
								  : bench_sequence(&seqs[i], nthreads);

		if (r < 0)
			return 2;
		rc |= r;
		free(seqs[i].sizes);
	}
	for (int i = 0; i < MAX_THREADS; i++)
		devcache_stream_destroy(dev, streams[i]);
	devcache_close(ctx);
	return rc ? 1 : 0;
}
