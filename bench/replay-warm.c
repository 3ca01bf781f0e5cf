/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* replay-warm.c - bench/replay -W: each trace replayed warm in one process through devcache's host device and each malloc with the same loop, alternating; ns/event and the ratio to the fastest malloc; with -T, devcache in two threads against one. */
#include <config.h>

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "mallocs.h"
#include "replay.h"

/*
 * What bench/replay's first part measures is a replay from a fresh start:
 * a new context, a malloc in a forked child that never allocated.  A
 * program's allocator is warm: this part opens one context and keeps it,
 * replays the trace once through each allocator untimed (its caches then
 * hold what the trace needs), and times whole passes after that.  A pass
 * is every event of the trace, the frees of the blocks it leaves live
 * included (so each pass leaves the allocator as it found it): events =
 * allocations + frees.  The same loop runs for every allocator, written
 * once below and instantiated twice (devcache's calls, a malloc's calls
 * through its pointers), and the allocators take turns, in an order
 * shuffled each round (bench/hotpath says why), so a slow moment of the
 * machine does not land on one of them.
 */

enum { W_DEVCACHE, W_MALLOCS, N_WARM = W_MALLOCS + N_REF_MALLOCS };

#define WARM_RUNS_MAX 15

struct warm {
	const struct trace *t;
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	devcache_stream_t *streams;
	void **ptrs;
	malloc_fn m;
	free_fn f;
};

/* One pass of the trace; -1 when an allocation failed.  The loop of both
 * kinds: ALLOC(size, stream, ptr_p) is 0 on success. */
#define WARM_PASS(ALLOC, RELEASE)                                                               \
	do {                                                                                    \
		const struct event *e = w->t->ev, *end = e + w->t->n;                           \
		void **ptrs = w->ptrs;                                                          \
		size_t a = 0;                                                                   \
                                                                                                \
		for (; e < end; e++) {                                                          \
			if (e->kind == EV_ALLOC) {                                              \
				if (ALLOC(e->size, e->stream, &ptrs[a]) != 0)                   \
					return -1;                                              \
				a++;                                                            \
			} else if (e->kind == EV_FREE) {                                        \
				RELEASE(ptrs[e->size]);                                         \
			}                                                                       \
		}                                                                               \
		return 0;                                                                       \
	} while (0)

#define DC_ALLOC(size, stream, p) devcache_alloc(w->dev, (size), w->streams[stream], (p))
#define DC_FREE(p) devcache_free(w->dev, (p))
#define M_ALLOC(size, stream, p) ((*(p) = w->m(size)) ? 0 : -1)
#define M_FREE(p) w->f(p)

static __attribute__((noinline)) int pass_devcache(struct warm *w)
{
	WARM_PASS(DC_ALLOC, DC_FREE);
}

static __attribute__((noinline)) int pass_malloc(struct warm *w)
{
	WARM_PASS(M_ALLOC, M_FREE);
}

static int pass(struct warm *w, int impl)
{
	return impl == W_DEVCACHE ? pass_devcache(w) : pass_malloc(w);
}

/* The timed passes of one run: callgrind's --toggle-collect=warm_timed_run
 * counts the instructions of these and of nothing else (bench/callgrind.sh). */
__attribute__((noinline)) double warm_timed_run(struct warm *w, int impl, size_t passes);

__attribute__((noinline)) double warm_timed_run(struct warm *w, int impl, size_t passes)
{
	double t0 = now_seconds();

	for (size_t p = 0; p < passes; p++)
		if (pass(w, impl) != 0)
			return -1;
	return now_seconds() - t0;
}

static void *warm_calloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (!p) {
		fprintf(stderr, "replay: out of memory\n");
		exit(2);
	}
	return p;
}

/* The streams of w's trace, from `first` on (0: the trace's stream 0 too,
 * which is otherwise the device's default stream). */
static void create_streams(struct warm *w, unsigned first)
{
	int err;

	w->streams = warm_calloc(w->t->max_stream + 1, sizeof *w->streams);
	for (unsigned i = first; i <= w->t->max_stream; i++)
		if ((err = devcache_stream_create(w->dev, &w->streams[i])) != 0)
			bench_fail("devcache_stream_create", err);
}

static void destroy_streams(struct warm *w)
{
	for (unsigned i = 0; i <= w->t->max_stream; i++)
		if (w->streams[i])
			devcache_stream_destroy(w->dev, w->streams[i]);
	free(w->streams);
}

static void open_devcache(struct warm *w)
{
	int err = bench_open(&w->ctx, NULL);

	if (err)
		bench_fail("devcache_open", err);
	if ((err = devcache_device_get(w->ctx, "host", &w->dev)) != 0)
		bench_fail("host", err);
	create_streams(w, 1);
}

static void close_devcache(struct warm *w)
{
	destroy_streams(w);
	devcache_close(w->ctx);
}

static void select_impl(struct warm *w, const struct ref_malloc *mallocs, int impl)
{
	if (impl != W_DEVCACHE) {
		w->m = ref_malloc_fn(&mallocs[impl - W_MALLOCS]);
		w->f = ref_free_fn(&mallocs[impl - W_MALLOCS]);
	}
}

static const char *fmt_ns(char *buf, size_t n, double ns)
{
	snprintf(buf, n, ns < 100 ? "%.1f" : "%.0f", ns);
	return buf;
}

/* The figures of one allocator. */
struct warm_fig {
	const char *name;
	char label[96];
	bool on, failed;
	bool not_asked; /* left out by -a: no row */
	size_t passes;
	double ns[WARM_RUNS_MAX];
	int n;
	double med, min, max;
};

static void print_rows(struct warm_fig fig[N_WARM], const struct ref_malloc *mallocs)
{
	int best = -1;
	char b1[32], b2[32], b3[32];

	for (int i = W_MALLOCS; i < N_WARM; i++)
		if (fig[i].on && !fig[i].failed && (best < 0 || fig[i].med < fig[best].med))
			best = i;
	printf("%-22s %9s %8s %8s %7s  %s\n", "allocator", "ns/event", "min", "max", "passes",
	       "ratio to the fastest malloc");
	for (int i = 0; i < N_WARM; i++) {
		if (fig[i].not_asked)
			continue;
		if (!fig[i].on) {
			printf("%-22s %9s  (not measured: %s)\n", fig[i].name, "-",
			       mallocs[i - W_MALLOCS].why);
			continue;
		}
		if (fig[i].failed) {
			printf("%-22s %9s  (an allocation failed)\n", fig[i].label, "-");
			continue;
		}
		printf("%-22s %9s %8s %8s %7zu  ", fig[i].label, fmt_ns(b1, sizeof b1, fig[i].med),
		       fmt_ns(b2, sizeof b2, fig[i].min), fmt_ns(b3, sizeof b3, fig[i].max),
		       fig[i].passes);
		if (best < 0)
			printf("(no malloc measured)\n");
		else if (i == best)
			printf("1.00x (the fastest)\n");
		else
			printf("%.2fx %s\n", fig[i].med / fig[best].med, mallocs[best - W_MALLOCS].name);
	}
}

/* The target line: devcache's median at most the fastest malloc's.  None
 * when devcache was not asked for (-a). */
static int print_target(const struct warm_fig fig[N_WARM], const struct ref_malloc *mallocs,
			const char *kind)
{
	int best = -1, n = 0;
	char id[96];

	if (!fig[W_DEVCACHE].on || fig[W_DEVCACHE].failed)
		return 0;
	for (int i = W_MALLOCS; i < N_WARM; i++)
		if (fig[i].on && !fig[i].failed) {
			n++;
			if (best < 0 || fig[i].med < fig[best].med)
				best = i;
		}
	snprintf(id, sizeof id, "replay-warm/%s/vs-malloc", kind);
	return print_vs_malloc(id, "ns/event", fig[W_DEVCACHE].med,
			       best < 0 ? NULL : mallocs[best - W_MALLOCS].name,
			       best < 0 ? 0 : fig[best].med, n);
}

/* ---- two threads (-T) ---------------------------------------------------- */

/*
 * Two threads each replay the whole trace on streams of their own (the
 * trace's stream 0 included), created on the same host device as the
 * one-thread figures', each with its own array of blocks: what one thread
 * costs the other is what they share, the device's pools, its address
 * table and its statistics.  Both are workers kept from run to run, so
 * their per-thread state stays warm, and they start together at a
 * barrier; a time is from the first start to the last end.  A round
 * times the same passes in thread 0 alone and in both at once, in turn
 * first, and its figure is the events per second of both over those of
 * one: 2 x t(one) / t(two).  The median of the rounds is the target's,
 * their min and max say how noisy it is (other programs on the CPUs move
 * it either way: they take time from one figure or the other).
 */

#define PAIR_TARGET 1.8

struct pair {
	struct warm w[2];
	pthread_t th[2];
	pthread_barrier_t start, done;
	size_t passes;
	int active; /* the threads that run this go: 1 or 2; 0: they return */
	double t0[2], t1[2];
	bool failed[2];
};

struct pair_slot {
	struct pair *p;
	int k;
};

static void *pair_thread(void *arg)
{
	const struct pair_slot *slot = arg;
	struct pair *p = slot->p;
	int k = slot->k;

	for (;;) {
		pthread_barrier_wait(&p->start);
		if (p->active == 0)
			return NULL;
		if (k < p->active) {
			p->t0[k] = now_seconds();
			p->failed[k] = warm_timed_run(&p->w[k], W_DEVCACHE, p->passes) < 0;
			p->t1[k] = now_seconds();
		}
		pthread_barrier_wait(&p->done);
	}
}

/* The seconds of `passes` passes in each of `threads` threads at once;
 * -1 when an allocation failed. */
static double pair_go(struct pair *p, int threads, size_t passes)
{
	double t0, t1;

	p->active = threads;
	p->passes = passes;
	pthread_barrier_wait(&p->start);
	pthread_barrier_wait(&p->done);
	t0 = p->t0[0];
	t1 = p->t1[0];
	for (int k = 0; k < threads; k++) {
		if (p->failed[k])
			return -1;
		t0 = p->t0[k] < t0 ? p->t0[k] : t0;
		t1 = p->t1[k] > t1 ? p->t1[k] : t1;
	}
	return t1 - t0;
}

static void pair_start(struct pair *p, const struct warm *base, struct pair_slot slot[2])
{
	memset(p, 0, sizeof *p);
	if (pthread_barrier_init(&p->start, NULL, 3) != 0 ||
	    pthread_barrier_init(&p->done, NULL, 3) != 0) {
		fprintf(stderr, "replay: pthread_barrier_init failed\n");
		exit(2);
	}
	for (int k = 0; k < 2; k++) {
		p->w[k].t = base->t;
		p->w[k].ctx = base->ctx;
		p->w[k].dev = base->dev;
		create_streams(&p->w[k], 0);
		p->w[k].ptrs = warm_calloc(base->t->allocs, sizeof *p->w[k].ptrs);
		slot[k].p = p;
		slot[k].k = k;
		if (pthread_create(&p->th[k], NULL, pair_thread, &slot[k]) != 0) {
			fprintf(stderr, "replay: pthread_create failed\n");
			exit(2);
		}
	}
}

static void pair_stop(struct pair *p)
{
	p->active = 0;
	pthread_barrier_wait(&p->start);
	for (int k = 0; k < 2; k++) {
		pthread_join(p->th[k], NULL);
		destroy_streams(&p->w[k]);
		free(p->w[k].ptrs);
	}
	pthread_barrier_destroy(&p->start);
	pthread_barrier_destroy(&p->done);
}

/* The CPUs this process may run on, as nproc counts them. */
static int cpus_online(void)
{
	cpu_set_t set;
	long n;

	if (sched_getaffinity(0, sizeof set, &set) == 0)
		return CPU_COUNT(&set);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

/* Runs the rounds; ratio[] gets their figures.  false when an allocation
 * failed. */
static bool pair_rounds(const struct warm *base, size_t passes, int runs, double *ratio,
			double *one_ns, double *two_ns)
{
	double events = (double)passes * (double)(base->t->allocs + base->t->frees);
	struct pair_slot slot[2];
	struct pair p;
	bool ok;

	pair_start(&p, base, slot);
	ok = pair_go(&p, 2, 1) >= 0; /* the warm-up pass of each thread's streams */
	for (int r = 0; r < runs && ok; r++) {
		double one, two;

		if (r % 2) {
			two = pair_go(&p, 2, passes);
			one = pair_go(&p, 1, passes);
		} else {
			one = pair_go(&p, 1, passes);
			two = pair_go(&p, 2, passes);
		}
		ok = one > 0 && two > 0;
		ratio[r] = 2 * one / two;
		one_ns[r] = one * 1e9 / events;
		two_ns[r] = two * 1e9 / (2 * events);
	}
	pair_stop(&p);
	return ok;
}

static int pair_report(const struct warm *base, const char *kind, size_t passes, int runs)
{
	double ratio[WARM_RUNS_MAX], one_ns[WARM_RUNS_MAX], two_ns[WARM_RUNS_MAX], load = -1;
	int cpus = cpus_online();
	char id[96], b1[32], b2[32];
	bool pass;

	snprintf(id, sizeof id, "replay-warm/%s/two-threads", kind);
	printf("devcache in two threads at once, each on streams of its own, against one thread:\n");
	if (cpus < 2) {
		printf("  not measured: %d CPU online (nproc < 2)\n", cpus);
		printf("TARGET %-44s SKIP  %d CPU online, two threads need 2 (target: at least "
		       "%.2fx one thread's events per second)\n", id, cpus, PAIR_TARGET);
		return 0;
	}
	if (!pair_rounds(base, passes, runs, ratio, one_ns, two_ns)) {
		printf("  FAILED: an allocation failed\n");
		return -1;
	}
	getloadavg(&load, 1);
	printf("  %s ns/event in one thread, %s in two (medians; two: their time over both "
	       "threads' events);\n  %d run%s of %zu pass%s a thread, load %.2f on %d CPUs\n",
	       fmt_ns(b1, sizeof b1, bench_median(one_ns, runs)),
	       fmt_ns(b2, sizeof b2, bench_median(two_ns, runs)), runs, runs == 1 ? "" : "s",
	       passes, passes == 1 ? "" : "es", load, cpus);
	if (load > cpus - 1.5)
		printf("  (a load above %.1f: other programs share the CPUs with the threads, in "
		       "either figure;\n  the ratio can be off either way)\n", cpus - 1.5);
	double med = bench_median(ratio, runs); /* sorts them */

	pass = med >= PAIR_TARGET;
	printf("TARGET %-44s %s  two threads %.2fx one thread's events per second, median of %d "
	       "(min %.2fx, max %.2fx; target: at least %.2fx)\n", id, pass ? "PASS" : "MISS", med,
	       runs, ratio[0], ratio[runs - 1], PAIR_TARGET);
	return !pass;
}

/* ---- the report ------------------------------------------------------------ */

static void init_figs(struct warm_fig fig[N_WARM], const struct ref_malloc *mallocs,
		      const char *only)
{
	memset(fig, 0, N_WARM * sizeof *fig);
	fig[W_DEVCACHE].name = "devcache";
	snprintf(fig[W_DEVCACHE].label, sizeof fig[W_DEVCACHE].label, "devcache %s",
		 devcache_version_string());
	fig[W_DEVCACHE].on = true;
	for (int m = 0; m < N_REF_MALLOCS; m++) {
		fig[W_MALLOCS + m].name = mallocs[m].name;
		snprintf(fig[W_MALLOCS + m].label, sizeof fig[0].label, "%s %s", mallocs[m].name,
			 mallocs[m].version);
		fig[W_MALLOCS + m].on = mallocs[m].available;
	}
	for (int i = 0; only && i < N_WARM; i++)
		if (strncmp(fig[i].name, only, strlen(only)) != 0) {
			fig[i].not_asked = true;
			fig[i].on = false;
		}
}

/* The warm-up pass, which also says how many passes make a run. */
static void warm_up(struct warm *w, struct warm_fig fig[N_WARM], const struct ref_malloc *mallocs,
		    double run_seconds)
{
	for (int i = 0; i < N_WARM; i++) {
		double t0, sec;

		if (!fig[i].on)
			continue;
		select_impl(w, mallocs, i);
		t0 = now_seconds();
		fig[i].failed = pass(w, i) != 0;
		sec = now_seconds() - t0;
		fig[i].passes = run_seconds <= 0 ? 1
			      : sec <= 0	       ? 1000
						       : (size_t)(run_seconds / sec) + 1;
		if (fig[i].passes > 1000)
			fig[i].passes = 1000;
	}
}

/* The timed runs, the allocators in turn, in an order shuffled each round. */
static void timed_runs(struct warm *w, struct warm_fig fig[N_WARM],
		       const struct ref_malloc *mallocs, int runs)
{
	double events = (double)(w->t->allocs + w->t->frees);
	struct rng order_rng;

	rng_seed(&order_rng, 11);
	for (int r = 0; r < runs; r++) {
		int order[N_WARM];

		rng_order(&order_rng, order, N_WARM);
		for (int k = 0; k < N_WARM; k++) {
			int i = order[k];
			double sec;

			if (!fig[i].on || fig[i].failed)
				continue;
			select_impl(w, mallocs, i);
			sec = warm_timed_run(w, i, fig[i].passes);
			if (sec < 0)
				fig[i].failed = true;
			else
				fig[i].ns[fig[i].n++] = sec * 1e9 / ((double)fig[i].passes * events);
		}
	}
	for (int i = 0; i < N_WARM; i++) {
		if (!fig[i].on || fig[i].failed)
			continue;
		fig[i].med = bench_median(fig[i].ns, fig[i].n); /* sorts them */
		fig[i].min = fig[i].ns[0];
		fig[i].max = fig[i].ns[fig[i].n - 1];
	}
}

int warm_report(const struct trace *t, const char *kind, const struct ref_malloc *mallocs,
		const struct warm_options *opt)
{
	struct warm w = { .t = t };
	struct warm_fig fig[N_WARM];
	size_t events = t->allocs + t->frees;
	bool dc = false;
	int rc = 0, r;

	if (opt->runs < 1 || opt->runs > WARM_RUNS_MAX || events == 0)
		return -1;
	w.ptrs = warm_calloc(t->allocs, sizeof *w.ptrs);
	init_figs(fig, mallocs, opt->only);
	open_devcache(&w);
	printf("\n-- %s: %zu allocations, %zu frees (%zu events a pass)\n", t->name, t->allocs,
	       t->frees, events);
	warm_up(&w, fig, mallocs, opt->run_seconds);
	timed_runs(&w, fig, mallocs, opt->runs);
	print_rows(fig, mallocs);
	rc = print_target(fig, mallocs, kind);
	dc = fig[W_DEVCACHE].on && !fig[W_DEVCACHE].failed;
	if (dc && opt->two_threads) {
		fflush(stdout);
		r = pair_report(&w, kind, fig[W_DEVCACHE].passes, opt->runs);
		rc = r < 0 ? r : rc | r;
	}
	if (dc) {
		devcache_stats_t s;

		/* Every pass frees what it allocated: the books must say so. */
		devcache_stats(w.dev, &s);
		if (s.allocation[DEVCACHE_POOL_ALL].current != 0) {
			printf("FAILED: devcache's statistics say %lld blocks allocated after the "
			       "passes, none should be\n",
			       (long long)s.allocation[DEVCACHE_POOL_ALL].current);
			rc = -1;
		}
	}
	for (int i = 0; i < N_WARM; i++)
		if (fig[i].on && fig[i].failed)
			rc = -1;
	close_devcache(&w);
	free(w.ptrs);
	return rc;
}
