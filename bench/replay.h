/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* replay.h - bench/replay's parts: a trace read into memory, one replay of it through devcache, and the minimum memory it runs in. */
#ifndef DEVCACHE_BENCH_REPLAY_H
#define DEVCACHE_BENCH_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <devcache.h>

/* The trace is read once, by the tool's reader (tools/trace-read.h) with
 * its marks, into an array of events whose frees name the allocation they
 * release by its ordinal, so a replay itself does no parsing and no
 * hashing: what is timed is the allocator.  EV_WARMUP_END and EV_STEP are
 * the trace's "# warmup-end" and "# step N" lines (devcache-trace(5)). */
enum ev_kind { EV_ALLOC, EV_FREE, EV_WARMUP_END, EV_STEP };

struct event {
	uint64_t size; /* EV_ALLOC: bytes asked for; EV_FREE: the allocation's ordinal */
	uint32_t stream;
	uint8_t kind;
};

struct trace {
	const char *name;
	struct event *ev;
	size_t n, cap;
	size_t allocs, frees;
	unsigned max_stream;
	bool has_warmup;
};

struct outcome {
	bool failed;
	bool oom;                       /* failed: an allocation got DEVCACHE_ENOMEM */
	char error[512];
	double seconds;
	size_t ops;
	devcache_stats_t stats;         /* at the end, before the leftovers are freed */
	uint64_t dev_allocs_after_warmup;
	uint64_t peak_requested;        /* counted here, to check the allocator's own */
	unsigned steps_after_warmup;
};

#define REPLAY_SUMMARY 1u     /* -v and -S: the summary, the snapshot after it */
#define REPLAY_EMPTY_STEPS 2u /* -E: devcache_empty_cache() at each step */

/* Replays the whole trace on device ("host", "benchdev:0") of a fresh
 * context opened with options (NULL: the defaults).  0, or -1 with
 * o->failed and o->error; exits 2 when the context or the device cannot be
 * had. */
int replay(const struct trace *t, const char *device, const char *options, unsigned flags,
	   struct outcome *o);

/* ---- warm, in one process (replay-warm.c) --------------------------------- */

struct ref_malloc;

/* What -W measures, from bench/replay's options. */
struct warm_options {
	const char *only;   /* -a: those allocators whose name starts so; NULL: all */
	int runs;           /* -r */
	double run_seconds; /* -s: a run's least time of whole passes (0: one pass) */
	bool two_threads;   /* -T: devcache in two threads against one */
};

/* -W: replays t warm in this process through devcache's host device and
 * each available malloc of mallocs[] (N_REF_MALLOCS of them), opt->runs
 * times each, alternating, and prints ns/event with the ratio to the
 * fastest malloc and its target line (kind names the trace there); with
 * opt->two_threads, then the throughput of two threads against one.  The
 * trace must keep the frees of the blocks it leaves live.  0, 1 when a
 * target was missed, or -1 when an allocation failed or devcache's
 * statistics disagree with the trace. */
int warm_report(const struct trace *t, const char *kind, const struct ref_malloc *mallocs,
		const struct warm_options *opt);

/* Prints the target line "devcache's time at most the fastest malloc's"
 * (replay.c): id names it, unit is "ns/op" or "ns/event", best the
 * fastest malloc's name (NULL: none measured, SKIP) and n_mallocs how many
 * were measured.  1 when missed, 0 otherwise. */
int print_vs_malloc(const char *id, const char *unit, double ns, const char *best, double best_ns,
		    int n_mallocs);

/* ---- minimum memory to run (minmem.c) ------------------------------------ */

/* Finds, for one trace, the least memory in which it runs, per mode and
 * per allocator, and prints that part of the report.  kind names the
 * trace in the target lines; target is the most libdevcache's least
 * memory with expandable segments may be, as a multiple of its peak
 * allocated bytes.  Returns 1 when a target was missed, 0 otherwise, -1
 * when a replay failed for a reason other than memory. */
int minmem_report(const struct trace *t, const char *kind, double target);

/* Where benchdev.so is (every context of the minimum-memory runs gets
 * "backend_path:DIR"), and the bisection's resolution as a fraction of the
 * trace's peak allocated bytes.  Call before minmem_report. */
void minmem_init(const char *module_dir, double resolution);

#endif
