/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* minmem.c - bench/replay's "minimum memory to run": the least memory a trace replays in without an allocation failure, found by bisection on memory_fraction, for libdevcache and for the PyTorch model. */
#include <config.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "replay.h"

/* How it works.  A runner replays one whole trace as one allocator would,
 * on a device of device_total bytes whose allocator may reserve at most
 * `memory` bytes (memory_fraction = memory / device_total), and says
 * whether every allocation succeeded.  The device is benchdev:0
 * (bench/modules/benchdev.c), whose size is fixed (16 GiB), so the figures
 * do not depend on the machine's memory as the host device's would, and
 * which can map memory, so expandable segments are what they would be on
 * a GPU.  The search, per trace, mode and runner:
 *
 *   1. a run with the whole device gives the peak allocated bytes P and
 *      the peak reserved bytes R;
 *   2. below P no allocator can run (reserved memory holds every
 *      allocated byte), so P - 1 is the first known failure;
 *   3. R is tried next: an allocator that never has to free its cache
 *      runs there exactly as with the whole device;
 *   4. bisection between the last failure and the last success, until
 *      they are at most `resolution` x P apart.
 *
 * The figure is the last success.  The search assumes that a trace that
 * runs in M bytes runs in more, which a caching allocator does not
 * promise (a larger cap can leave a different cache behind): it is the
 * least memory the bisection found, to its resolution. */

struct mm_mode {
	const char *label;
	bool expandable;
};

static const struct mm_mode modes[] = {
	{ "default", false },
	{ "expandable_segments:True", true },
};
#define N_MODES (sizeof modes / sizeof modes[0])

struct mm_run {
	uint64_t peak_allocated, peak_reserved;
	char why[512]; /* when the runner could not run */
};

/* 1: every allocation succeeded; 0: one failed for want of memory; -1:
 * another failure (r->why).  memory == device_total: no cap. */
typedef int (*mm_runner_fn)(const struct trace *t, const struct mm_mode *mode, uint64_t memory,
			    struct mm_run *r);

struct mm_runner {
	const char *name;
	mm_runner_fn run; /* NULL: not measured, for the reason in why */
	char why[512];
};

enum { R_DEVCACHE, R_PYTORCH, N_RUNNERS };

#define MINMEM_DEVICE "benchdev:0"
/* benchdev's granularity of mapped memory (BENCHDEV_VM_GRANULARITY, as
 * CUDA's): expandable segments grow by whole pages of it, so no trace runs
 * with them in less than its peak allocated bytes rounded up to it. */
#define MINMEM_PAGE ((uint64_t)2 << 20)

static struct mm_runner runners[N_RUNNERS] = {
	[R_DEVCACHE] = { .name = "libdevcache" },
	[R_PYTORCH] = { .name = "PyTorch model" },
};
static uint64_t device_total;
static double resolution = 0.0025;
static char base_options[4200];

/* ---- the runners ----------------------------------------------------------- */

/* libdevcache through bench/replay's own replay: a fresh context each run. */
static int run_devcache(const struct trace *t, const struct mm_mode *mode, uint64_t memory,
			struct mm_run *r)
{
	char opts[sizeof base_options + 128];
	struct outcome o;

	snprintf(opts, sizeof opts, "%s%s,memory_fraction:%.17g", base_options,
		 mode->expandable ? ",expandable_segments:True" : "",
		 (double)memory / (double)device_total);
	replay(t, MINMEM_DEVICE, opts, 0, &o);
	r->peak_allocated = (uint64_t)o.stats.allocated_bytes[DEVCACHE_POOL_ALL].peak;
	r->peak_reserved = (uint64_t)o.stats.reserved_bytes[DEVCACHE_POOL_ALL].peak;
	if (!o.failed)
		return 1;
	if (o.oom)
		return 0;
	snprintf(r->why, sizeof r->why, "%s", o.error);
	return -1;
}

static void init_devcache(const char *module_dir)
{
	struct mm_runner *rn = &runners[R_DEVCACHE];
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	devcache_device_info_t info;
	int err;

	/* Only the bench module besides the built-in host backend. */
	snprintf(base_options, sizeof base_options, "backend_path:%s,backends:benchdev",
		 module_dir);
	if ((err = bench_open(&ctx, base_options)) != 0) {
		snprintf(rn->why, sizeof rn->why, "%.200s: %s (%.200s)", base_options,
			 devcache_strerror(err), devcache_last_error());
		return;
	}
	if ((err = devcache_device_get(ctx, MINMEM_DEVICE, &dev)) != 0 ||
	    (err = devcache_device_info(dev, &info)) != 0) {
		snprintf(rn->why, sizeof rn->why, "no %s in %s: %s (%s)", MINMEM_DEVICE, module_dir,
			 devcache_strerror(err), devcache_last_error());
	} else {
		device_total = info.total_memory;
		rn->run = run_devcache;
	}
	devcache_close(ctx);
}

#ifdef HAVE_PYTORCH_MODEL
#include "pytorch-model.h"

/* The independent model of PyTorch's allocator (tests/pytorch-model.c)
 * with PyTorch's defaults: no max_split_size, max_non_split_rounding 20
 * MiB, no roundup_power2_divisions, no garbage collection; the cap as
 * torch.cuda.set_per_process_memory_fraction(memory / device_total). */
static int run_pytorch(const struct trace *t, const struct mm_mode *mode, uint64_t memory,
		       struct mm_run *r)
{
	struct ptm_config c = { 0 };
	uint64_t *addrs = calloc(t->allocs ? t->allocs : 1, sizeof *addrs);
	struct ptm_stats s;
	struct ptm *m = NULL;
	size_t a = 0;
	int ok = 1;

	c.device_total = device_total;
	c.address_base = (uint64_t)1 << 40; /* any base: addresses only order blocks */
	c.max_split_size = SIZE_MAX;
	c.max_non_split_rounding = 20 * MIB;
	c.fraction_set = memory < device_total;
	c.memory_fraction = (double)memory / (double)device_total;
	c.expandable = mode->expandable;
	if (!addrs || !(m = ptm_new(&c))) {
		free(addrs);
		snprintf(r->why, sizeof r->why, "PyTorch model: out of memory");
		return -1;
	}
	for (size_t i = 0; i < t->n && ok; i++) {
		const struct event *e = &t->ev[i];

		if (e->kind == EV_ALLOC)
			ok = ptm_alloc(m, e->size, e->stream, &addrs[a++]) == 0;
		else if (e->kind == EV_FREE)
			ptm_free(m, addrs[e->size]);
	}
	ptm_stats(m, &s);
	r->peak_allocated = (uint64_t)s.allocated_peak;
	r->peak_reserved = (uint64_t)s.reserved_peak;
	ptm_delete(m);
	free(addrs);
	return ok;
}

static void init_pytorch(void)
{
	runners[R_PYTORCH].run = run_pytorch;
}
#else
static void init_pytorch(void)
{
	snprintf(runners[R_PYTORCH].why, sizeof runners[R_PYTORCH].why,
		 "bench/replay is built without tests/pytorch-model.c (bench/README says how)");
}
#endif

void minmem_init(const char *module_dir, double res)
{
	resolution = res;
	init_devcache(module_dir);
	init_pytorch();
	/* The model simulates a device of the same size as benchdev's. */
	if (runners[R_PYTORCH].run && !runners[R_DEVCACHE].run) {
		runners[R_PYTORCH].run = NULL;
		snprintf(runners[R_PYTORCH].why, sizeof runners[R_PYTORCH].why,
			 "no device size to simulate (%.400s)", runners[R_DEVCACHE].why);
	}
}

/* ---- the search -------------------------------------------------------------- */

struct mm_found {
	int status; /* 1: found; -1: not measured or failed (why) */
	bool error; /* a failure other than memory */
	uint64_t memory, peak_allocated;
	unsigned runs;
	double seconds;
	char why[512];
};

/* One run at memory: moves *lo_p or *hi_p; false on an error. */
static bool probe(const struct mm_runner *rn, const struct trace *t, const struct mm_mode *mode,
		  uint64_t memory, uint64_t *lo_p, uint64_t *hi_p, struct mm_found *f)
{
	struct mm_run r = { 0 };
	int ok = rn->run(t, mode, memory, &r);

	f->runs++;
	if (ok < 0) {
		f->error = true;
		snprintf(f->why, sizeof f->why, "%s", r.why);
		return false;
	}
	if (ok)
		*hi_p = memory;
	else
		*lo_p = memory;
	return true;
}

static void find_min(const struct mm_runner *rn, const struct trace *t, const struct mm_mode *mode,
		     struct mm_found *f)
{
	struct mm_run r = { 0 };
	uint64_t lo, hi, step;
	double t0 = now_seconds();
	int ok;

	memset(f, 0, sizeof *f);
	f->status = -1;
	if (!rn->run) {
		snprintf(f->why, sizeof f->why, "%s", rn->why);
		return;
	}
	ok = rn->run(t, mode, device_total, &r);
	f->runs++;
	if (ok <= 0) {
		f->error = true;
		snprintf(f->why, sizeof f->why, "%s", ok ? r.why : "out of memory on the whole device");
		return;
	}
	f->peak_allocated = r.peak_allocated;
	lo = r.peak_allocated ? r.peak_allocated - 1 : 0;
	hi = device_total;
	step = (uint64_t)(resolution * (double)r.peak_allocated);
	if (step < 1)
		step = 1;
	if (r.peak_reserved < hi && !probe(rn, t, mode, r.peak_reserved, &lo, &hi, f))
		return;
	while (hi - lo > step)
		if (!probe(rn, t, mode, lo + (hi - lo) / 2, &lo, &hi, f))
			return;
	f->memory = hi;
	f->status = 1;
	f->seconds = now_seconds() - t0;
}

/* ---- the report ------------------------------------------------------------------ */

/* The least memory in which any allocator that keeps PyTorch's pools
 * apart can run t with expandable segments, as a count of pages: each
 * stream's small pool and large pool maps whole pages of its own, so at
 * every moment the memory mapped is at least the sum, over those pools,
 * of their live bytes (each request as the policy rounds it, a multiple
 * of 512; at most 1 MiB: the small pool) rounded up to whole pages.  The
 * floor is the largest such sum; 0 where memory is short or the trace
 * frees what it did not allocate. */
static uint64_t pools_floor_pages(const struct trace *t)
{
	size_t n_pools = ((size_t)t->max_stream + 1) * 2, a = 0;
	uint64_t *live = calloc(n_pools, sizeof *live);
	uint64_t *bytes = malloc((t->allocs ? t->allocs : 1) * sizeof *bytes);
	uint32_t *pool = malloc((t->allocs ? t->allocs : 1) * sizeof *pool);
	uint64_t pages = 0, most = 0;

	for (size_t i = 0; live && bytes && pool && i < t->n; i++) {
		const struct event *e = &t->ev[i];
		uint64_t before, r;
		uint32_t k;

		if (e->kind == EV_ALLOC && a < t->allocs) {
			r = e->size == 0 ? 0 : e->size < 512 ? 512 : (e->size + 511) / 512 * 512;
			k = e->stream * 2 + (r <= ((uint64_t)1 << 20));
			bytes[a] = r;
			pool[a++] = k;
			before = (live[k] + MINMEM_PAGE - 1) / MINMEM_PAGE;
			live[k] += r;
		} else if (e->kind == EV_FREE && e->size < a && bytes[e->size] != UINT64_MAX) {
			k = pool[e->size];
			before = (live[k] + MINMEM_PAGE - 1) / MINMEM_PAGE;
			live[k] -= bytes[e->size];
			bytes[e->size] = UINT64_MAX;
		} else if (e->kind == EV_FREE) {
			most = 0;
			break;
		} else {
			continue;
		}
		pages = pages - before + (live[k] + MINMEM_PAGE - 1) / MINMEM_PAGE;
		if (pages > most)
			most = pages;
	}
	if (!live || !bytes || !pool)
		most = 0;
	free(live);
	free(bytes);
	free(pool);
	return most;
}

static void print_cell(const struct mm_found *f, bool last)
{
	if (f->status < 0)
		printf("   %-*s", last ? 0 : 29, f->error ? "FAILED" : "not measured");
	else
		printf("  %9.1f %6.3f %7u %6.1f", (double)f->memory / (double)MIB,
		       (double)f->memory / (double)f->peak_allocated, f->runs, f->seconds);
}

int minmem_report(const struct trace *t, const char *kind, double target)
{
	struct mm_found found[N_MODES][N_RUNNERS];
	char id[96];
	int rc = 0;

	printf("minimum memory to run: the least memory_fraction of %s (%.0f MiB) in which the "
	       "whole trace\nreplays without an allocation failure, by bisection to %.2f%% of "
	       "the peak allocated bytes\n", MINMEM_DEVICE, (double)device_total / (double)MIB,
	       resolution * 100);
	fflush(stdout);
	for (size_t m = 0; m < N_MODES; m++)
		for (int k = 0; k < N_RUNNERS; k++)
			find_min(&runners[k], t, &modes[m], &found[m][k]);
	printf("%-24s %32s %32s\n", "", runners[R_DEVCACHE].name, runners[R_PYTORCH].name);
	printf("%-24s  %9s %6s %7s %6s  %9s %6s %7s %6s\n", "mode", "MiB", "ratio", "replays", "s",
	       "MiB", "ratio", "replays", "s");
	for (size_t m = 0; m < N_MODES; m++) {
		printf("%-24s", modes[m].label);
		for (int k = 0; k < N_RUNNERS; k++)
			print_cell(&found[m][k], k == N_RUNNERS - 1);
		putchar('\n');
	}
	printf("(ratio: that memory over the run's own peak allocated bytes; s: the search's time)\n");
	for (int k = 0; k < N_RUNNERS; k++)
		for (size_t m = 0; m < N_MODES; m++) {
			const struct mm_found *f = &found[m][k];

			if (f->status < 0 && f->error) {
				printf("%s [%s]: FAILED: %s\n", runners[k].name, modes[m].label, f->why);
				rc = -1;
			} else if (f->status < 0 && m == 0) {
				printf("%s: not measured: %s\n", runners[k].name, f->why);
			}
		}

	/* The target: libdevcache with expandable segments. */
	const struct mm_found *f = &found[1][R_DEVCACHE], *p = &found[1][R_PYTORCH];

	snprintf(id, sizeof id, "replay/%s/min-memory [%s]", kind, modes[1].label);
	if (f->status < 0) {
		printf("TARGET %-44s SKIP  not measured (target: at most %.2f x peak allocated)\n", id,
		       target);
		return rc;
	}
	double ratio = (double)f->memory / (double)f->peak_allocated;
	bool pass = ratio <= target;

	printf("TARGET %-44s %s  %.1f MiB = %.3f x peak allocated %.1f MiB (target <= %.2f)", id,
	       pass ? "PASS" : "MISS", (double)f->memory / (double)MIB, ratio,
	       (double)f->peak_allocated / (double)MIB, target);
	if (p->status > 0)
		printf("; PyTorch model %.3f", (double)p->memory / (double)p->peak_allocated);
	printf("; whole %.0f MiB pages: at least %.3f", (double)MINMEM_PAGE / (double)MIB,
	       (double)((f->peak_allocated + MINMEM_PAGE - 1) / MINMEM_PAGE * MINMEM_PAGE) /
		       (double)f->peak_allocated);
	uint64_t floor_pages = pools_floor_pages(t);
	if (floor_pages)
		printf(", %.3f with each pool on pages of its own",
		       (double)(floor_pages * MINMEM_PAGE) / (double)f->peak_allocated);
	putchar('\n');
	return rc < 0 ? rc : !pass;
}
