/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* replay.c - benchmark: replays allocation traces through the allocator under several tunable settings and reports memory efficiency. */
#include <config.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include "bench.h"
#include "mallocs.h"
#include "replay.h"
#include "trace-read.h"

/* ---- reading ------------------------------------------------------------- */

static bool warm_only; /* -W: the warm in-process replays alone (replay-warm.c) */

static int push(struct trace *t, struct event e)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 65536;
		struct event *v = realloc(t->ev, cap * sizeof *v);

		if (!v)
			return -1;
		t->ev = v;
		t->cap = cap;
	}
	t->ev[t->n++] = e;
	return 0;
}

/* One batch of the reader's events onto the trace.  ord maps each of the
 * reader's slots to the ordinal of the allocation it holds.  The frees the
 * reader adds at the end of the file are left out: the replay leaves what
 * the trace did not free allocated until its summary is taken.  The warm
 * replays (-W) keep them: each of their passes frees what it allocated. */
static int add_batch(struct trace *t, const struct trace_set *set, size_t **ord, size_t *n_ord)
{
	if (set->n_slots > *n_ord) {
		size_t *v = realloc(*ord, set->n_slots * sizeof *v);

		if (!v)
			return -1;
		*ord = v;
		*n_ord = set->n_slots;
	}
	for (size_t i = 0; i < set->n_events; i++) {
		const struct trace_event *ev = &set->events[i];
		struct event e = { 0 };

		switch (ev->op) {
		case TRACE_OP_ALLOC:
			(*ord)[ev->slot] = t->allocs++;
			e.kind = EV_ALLOC;
			e.size = ev->size;
			e.stream = ev->stream;
			break;
		case TRACE_OP_FREE:
			if (ev->implicit && !warm_only)
				continue;
			e.kind = EV_FREE;
			e.size = (*ord)[ev->slot];
			t->frees++;
			break;
		case TRACE_OP_WARMUP_END:
			e.kind = EV_WARMUP_END;
			t->has_warmup = true;
			break;
		case TRACE_OP_STEP:
			e.kind = EV_STEP;
			break;
		default:
			continue;
		}
		if (push(t, e) != 0)
			return -1;
	}
	return 0;
}

/* The whole trace, read once by the tool's reader (tools/trace-read.c) with
 * its marks: every replay runs it again from memory. */
static int load_trace(struct trace *t, const char *path)
{
	struct trace_set set;
	char err[512];
	size_t *ord = NULL, n_ord = 0;
	int rc;

	trace_set_init(&set);
	set.marks = true;
	rc = trace_set_open(&set, path, err, sizeof err);
	while (!rc && !(rc = trace_set_next(&set, err, sizeof err)) && set.n_events)
		if (add_batch(t, &set, &ord, &n_ord) != 0) {
			snprintf(err, sizeof err, "%s: out of memory", path);
			rc = -1;
		}
	if (rc)
		fprintf(stderr, "replay: %s\n", err);
	else
		t->max_stream = set.max_stream;
	trace_set_destroy(&set);
	free(ord);
	return rc ? -1 : 0;
}

/* ---- replay ---------------------------------------------------------------- */

static FILE *snapshot_out; /* -S: a JSON snapshot after each replay */
static bool print_summary;  /* -v: the summary table after each replay */
static bool empty_each_step; /* -E: devcache_empty_cache() at each step mark */

int replay(const struct trace *t, const char *device, const char *options, unsigned flags,
	   struct outcome *o)
{
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	devcache_stream_t *streams = calloc(t->max_stream + 1, sizeof *streams);
	void **ptrs = calloc(t->allocs ? t->allocs : 1, sizeof *ptrs);
	uint64_t *req = calloc(t->allocs ? t->allocs : 1, sizeof *req);
	uint64_t warm_base = 0, live = 0;
	size_t live_count = 0;
	bool warm = false;
	int err;

	memset(o, 0, sizeof *o);
	if (!streams || !ptrs || !req) {
		fprintf(stderr, "replay: out of memory\n");
		exit(2);
	}
	err = bench_open(&ctx, options);
	if (err)
		bench_fail(options ? options : "devcache_open", err);
	err = devcache_device_get(ctx, device, &dev);
	if (err)
		bench_fail(device, err);
	for (unsigned i = 1; i <= t->max_stream; i++)
		if ((err = devcache_stream_create(dev, &streams[i])) != 0)
			bench_fail("devcache_stream_create", err);

	size_t a = 0;
	double t0 = now_seconds();

	for (size_t i = 0; i < t->n && !o->failed; i++) {
		const struct event *e = &t->ev[i];
		devcache_stats_t s;

		switch (e->kind) {
		case EV_ALLOC:
			err = devcache_alloc(dev, e->size, streams[e->stream], &ptrs[a]);
			if (err) {
				o->failed = true;
				o->oom = err == DEVCACHE_ENOMEM;
				snprintf(o->error, sizeof o->error, "allocation %zu of %llu bytes: %s (%s)",
					 a + 1, (unsigned long long)e->size, devcache_strerror(err),
					 devcache_last_error());
				break;
			}
			req[a] = e->size;
			live += e->size;
			live_count++;
			if (live > o->peak_requested)
				o->peak_requested = live;
			a++;
			o->ops++;
			break;
		case EV_FREE:
			err = devcache_free(dev, ptrs[e->size]);
			if (err) {
				o->failed = true;
				snprintf(o->error, sizeof o->error, "free of allocation %llu: %s (%s)",
					 (unsigned long long)e->size + 1, devcache_strerror(err),
					 devcache_last_error());
				break;
			}
			ptrs[e->size] = NULL;
			live -= req[e->size];
			live_count--;
			o->ops++;
			break;
		case EV_WARMUP_END:
			devcache_stats(dev, &s);
			warm_base = s.num_device_alloc;
			warm = true;
			break;
		case EV_STEP:
			o->steps_after_warmup += warm;
			if (flags & REPLAY_EMPTY_STEPS)
				devcache_empty_cache(dev);
			break;
		}
	}
	o->seconds = now_seconds() - t0;
	devcache_stats(dev, &o->stats);
	if (warm)
		o->dev_allocs_after_warmup = o->stats.num_device_alloc - warm_base;
	/* The allocator's own books must agree with the trace. */
	if (!o->failed && (uint64_t)o->stats.allocation[DEVCACHE_POOL_ALL].current != live_count) {
		o->failed = true;
		snprintf(o->error, sizeof o->error,
			 "stats say %lld blocks allocated, the trace leaves %zu live",
			 (long long)o->stats.allocation[DEVCACHE_POOL_ALL].current, live_count);
	}
	if (!o->failed &&
	    (uint64_t)o->stats.requested_bytes[DEVCACHE_POOL_ALL].peak != o->peak_requested) {
		o->failed = true;
		snprintf(o->error, sizeof o->error,
			 "stats say peak requested %lld bytes, the trace's peak is %llu",
			 (long long)o->stats.requested_bytes[DEVCACHE_POOL_ALL].peak,
			 (unsigned long long)o->peak_requested);
	}
	if ((flags & REPLAY_SUMMARY) && print_summary) {
		printf("summary of %s with %s, the trace's leftovers still allocated:\n", t->name,
		       options ? options : "default tunables");
		devcache_summary(dev, stdout);
	}
	if ((flags & REPLAY_SUMMARY) && snapshot_out) {
		/* The snapshot streams itself: only its frame is written here,
		 * the strings through json-c as the library's own JSON. */
		struct json_object *name = json_object_new_string(t->name),
				   *opts = json_object_new_string(options ? options : "");
		int flags_json = JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE;

		fprintf(snapshot_out, "{\"trace\": %s, \"options\": %s, \"snapshot\":\n",
			name ? json_object_to_json_string_ext(name, flags_json) : "null",
			opts ? json_object_to_json_string_ext(opts, flags_json) : "null");
		json_object_put(name);
		json_object_put(opts);
		devcache_snapshot(dev, snapshot_out);
		fputs("}\n", snapshot_out);
	}
	for (size_t i = 0; i < a; i++)
		if (ptrs[i])
			devcache_free(dev, ptrs[i]);
	for (unsigned i = 1; i <= t->max_stream; i++)
		devcache_stream_destroy(dev, streams[i]);
	devcache_close(ctx);
	free(streams);
	free(ptrs);
	free(req);
	return o->failed ? -1 : 0;
}

/* ---- the same trace through the reference mallocs ------------------------- */

static struct ref_malloc mallocs[N_REF_MALLOCS];

/* Replays the trace's allocations and frees through one malloc (the
 * streams mean nothing to it), in the same order as devcache gets them;
 * ptrs has room for every allocation.  Returns the seconds taken, or -1
 * when malloc returned NULL.  The memory is not touched, as devcache's
 * is not. */
static double replay_malloc(const struct trace *t, const struct ref_malloc *r, void **ptrs,
			    size_t *ops_p)
{
	malloc_fn m = ref_malloc_fn(r);
	free_fn f = ref_free_fn(r);
	size_t a = 0, ops = 0;
	bool failed = false;
	double t0 = now_seconds(), t1;

	for (size_t i = 0; i < t->n; i++) {
		const struct event *e = &t->ev[i];

		if (e->kind == EV_ALLOC) {
			if (!(ptrs[a++] = m(e->size))) {
				failed = true;
				break;
			}
			ops++;
		} else if (e->kind == EV_FREE) {
			f(ptrs[e->size]);
			ptrs[e->size] = NULL;
			ops++;
		}
	}
	t1 = now_seconds();
	for (size_t i = 0; i < a; i++)
		if (ptrs[i]) {
			f(ptrs[i]);
			ptrs[i] = NULL;
		}
	*ops_p = ops;
	return failed ? -1 : t1 - t0;
}

/* ns/op of one replay through a malloc that starts empty, as devcache's
 * context does: in a child process forked from this one, which never
 * calls the reference mallocs itself (glibc's has only the parsing
 * behind it).  -1 when malloc returned NULL; exits 2 when the child
 * cannot be had. */
static double replay_malloc_fresh(const struct trace *t, const struct ref_malloc *r, void **ptrs)
{
	int fd[2], status;
	double ns = -1;
	pid_t pid;

	fflush(NULL);
	if (pipe(fd) != 0 || (pid = fork()) < 0) {
		fprintf(stderr, "replay: %s: %s\n", r->name, strerror(errno));
		exit(2);
	}
	if (pid == 0) {
		size_t ops = 0;
		double sec = replay_malloc(t, r, ptrs, &ops);

		ns = sec < 0 || ops == 0 ? -1 : sec * 1e9 / (double)ops;
		_exit(write(fd[1], &ns, sizeof ns) == (ssize_t)sizeof ns ? 0 : 2);
	}
	close(fd[1]);
	if (read(fd[0], &ns, sizeof ns) != (ssize_t)sizeof ns)
		ns = -2;
	close(fd[0]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) || ns < -1) {
		fprintf(stderr, "replay: the %s replay failed\n", r->name);
		exit(2);
	}
	return ns;
}

/* ---- report ------------------------------------------------------------------ */

static const char *mib(char *buf, size_t n, int64_t bytes)
{
	snprintf(buf, n, "%.1f", (double)bytes / (double)MIB);
	return buf;
}

static const char *fmt_ns(char *buf, size_t n, double ns)
{
	snprintf(buf, n, ns < 100 ? "%.1f" : "%.0f", ns);
	return buf;
}

struct config {
	const char *label;
	const char *options; /* NULL: the defaults */
	bool caching;
};

#define MAX_CONFIGS 16
static struct config configs[MAX_CONFIGS] = {
	{ "default", NULL, true },
	{ "max_split_size_mb:128", "max_split_size_mb:128", true },
	{ "max_split_size_mb:512", "max_split_size_mb:512", true },
	{ "expandable_segments:True", "expandable_segments:True", true },
	{ "caching:false", "caching:false", false },
};
static size_t n_configs = 5;

#define MAX_REPS 15
static int reps = 5;           /* -r: replays per ns/op figure, the median is shown */
static bool no_minmem;         /* -M: no minimum-memory runs */
static struct warm_options warm_opt = { .run_seconds = 0.05 }; /* -W, -a, -s, -T */

/* The least memory with expandable segments, over the peak allocated
 * bytes: the generated traces' target, and the recorded traces' (-W). */
#define MINMEM_TARGET 1.03
#define MINMEM_TARGET_RECORDED 1.01

/* The trace's name in the target lines: its file name less ".gz" and
 * ".trace". */
static void trace_kind(const char *path, char *buf, size_t n)
{
	const char *base = strrchr(path, '/');
	size_t len;

	base = base ? base + 1 : path;
	len = strlen(base);
	if (len > 3 && strcmp(base + len - 3, ".gz") == 0)
		len -= 3;
	if (len > 6 && strncmp(base + len - 6, ".trace", 6) == 0)
		len -= 6;
	snprintf(buf, n, "%.*s", (int)len, base);
}

/* The figures of one trace: devcache's under each setting, then the
 * mallocs'.  Repetitions interleave them all, so that a slow moment of the
 * machine does not land on one; caching:false runs once (its time is the
 * driver's, and long), and so does a malloc more than MALLOC_FAR times
 * slower than the fastest one on the first replay: it cannot be the
 * fastest, and glibc's and mimalloc's replays, which go to the kernel for
 * their large blocks, would otherwise take most of the time. */
#define MALLOC_FAR 4.0

struct figures {
	struct outcome o[MAX_CONFIGS];
	double ns[MAX_CONFIGS][MAX_REPS];
	int n[MAX_CONFIGS];
	double mns[N_REF_MALLOCS][MAX_REPS];
	int mn[N_REF_MALLOCS];
	bool mfailed[N_REF_MALLOCS], mdone[N_REF_MALLOCS];
};

/* After the first replays: the mallocs far slower than the fastest are
 * not replayed again. */
static void leave_out_slow(struct figures *fg)
{
	double best = -1;

	for (int m = 0; m < N_REF_MALLOCS; m++)
		if (fg->mn[m] && (best < 0 || fg->mns[m][0] < best))
			best = fg->mns[m][0];
	for (int m = 0; m < N_REF_MALLOCS; m++)
		fg->mdone[m] = fg->mn[m] && fg->mns[m][0] > MALLOC_FAR * best;
}

static void measure(const struct trace *t, struct figures *fg)
{
	void **ptrs = calloc(t->allocs ? t->allocs : 1, sizeof *ptrs);

	if (!ptrs) {
		fprintf(stderr, "replay: out of memory\n");
		exit(2);
	}
	memset(fg, 0, sizeof *fg);
	for (int r = 0; r < reps; r++) {
		for (size_t c = 0; c < n_configs; c++) {
			struct outcome o;

			if ((r > 0 && !configs[c].caching) || (r > 0 && fg->o[c].failed))
				continue;
			replay(t, "host", configs[c].options,
			       (r == 0 ? REPLAY_SUMMARY : 0) | (empty_each_step ? REPLAY_EMPTY_STEPS : 0),
			       &o);
			if (r == 0 || !o.failed)
				fg->o[c] = o;
			if (!o.failed && o.ops)
				fg->ns[c][fg->n[c]++] = o.seconds * 1e9 / (double)o.ops;
		}
		for (int m = 0; m < N_REF_MALLOCS; m++) {
			double ns;

			if (!mallocs[m].available || fg->mfailed[m] || fg->mdone[m])
				continue;
			ns = replay_malloc_fresh(t, &mallocs[m], ptrs);
			fg->mfailed[m] = ns < 0;
			if (ns >= 0)
				fg->mns[m][fg->mn[m]++] = ns;
		}
		if (r == 0)
			leave_out_slow(fg);
	}
	free(ptrs);
}

/* The malloc with the lowest median ns/op, -1 when none was measured;
 * *n_p: how many were. */
static int fastest_malloc(const double mmed[N_REF_MALLOCS], int *n_p)
{
	int best = -1;

	*n_p = 0;
	for (int m = 0; m < N_REF_MALLOCS; m++) {
		if (mmed[m] < 0)
			continue;
		++*n_p;
		if (best < 0 || mmed[m] < mmed[best])
			best = m;
	}
	return best;
}

int print_vs_malloc(const char *id, const char *unit, double ns, const char *best, double best_ns,
		    int n_mallocs)
{
	char b1[32], b2[32];
	bool pass = best && ns <= best_ns;

	if (!best) {
		printf("TARGET %-44s SKIP  no malloc measured (target: at most the %s of the fastest "
		       "malloc)\n", id, unit);
		return 0;
	}
	printf("TARGET %-44s %s  devcache %s %s %s %s %s %s, the fastest of %d malloc%s (%.2fx; "
	       "target: at most the %s of the fastest malloc)\n", id, pass ? "PASS" : "MISS",
	       fmt_ns(b1, sizeof b1, ns), unit, pass ? "<=" : ">", best,
	       fmt_ns(b2, sizeof b2, best_ns), unit, n_mallocs, n_mallocs > 1 ? "s" : "",
	       ns / best_ns, unit);
	return !pass;
}

static int print_targets(const struct figures *fg, const double med[MAX_CONFIGS],
			 const double mmed[N_REF_MALLOCS], const char *kind, double ratio_target)
{
	bool fixed = strstr(kind, "train-fixed") != NULL, var = strstr(kind, "train-var") != NULL;
	int n_mallocs, best = fastest_malloc(mmed, &n_mallocs);
	char b1[32], b2[32], id[96];
	int rc = 0;

	for (size_t c = 0; c < n_configs; c++) {
		const devcache_stats_t *s = &fg->o[c].stats;

		if (fg->o[c].failed || !configs[c].caching)
			continue;
		snprintf(id, sizeof id, "replay/%s/vs-malloc [%s]", kind, configs[c].label);
		rc |= print_vs_malloc(id, "ns/op", med[c], best < 0 ? NULL : mallocs[best].name,
				      best < 0 ? 0 : mmed[best], n_mallocs);
		if (fixed) {
			bool pass = fg->o[c].dev_allocs_after_warmup == 0;

			snprintf(id, sizeof id, "replay/train-fixed/steady [%s]", configs[c].label);
			printf("TARGET %-44s %s  %llu device allocations in %u steps after warm-up "
			       "(target 0)\n", id, pass ? "PASS" : "MISS",
			       (unsigned long long)fg->o[c].dev_allocs_after_warmup,
			       fg->o[c].steps_after_warmup);
			rc |= !pass;
		}
		if (var) {
			double ratio = (double)s->reserved_bytes[DEVCACHE_POOL_ALL].peak /
				       (double)s->allocated_bytes[DEVCACHE_POOL_ALL].peak;
			bool pass = ratio <= ratio_target;

			snprintf(id, sizeof id, "replay/train-var/reserved-ratio [%s]",
				 configs[c].label);
			printf("TARGET %-44s %s  peak reserved %s MiB / peak allocated %s MiB = %.3f "
			       "(target <= %.2f)\n", id, pass ? "PASS" : "MISS",
			       mib(b1, sizeof b1, s->reserved_bytes[DEVCACHE_POOL_ALL].peak),
			       mib(b2, sizeof b2, s->allocated_bytes[DEVCACHE_POOL_ALL].peak), ratio,
			       ratio_target);
			rc |= !pass;
		}
	}
	return rc;
}

/* -W: the warm replays of one trace, then (unless -M) its least memory. */
static int report_warm(const char *path)
{
	struct trace t = { 0 };
	char kind[64];
	int rc, r;

	t.name = path;
	if (load_trace(&t, path) != 0)
		return -1;
	trace_kind(path, kind, sizeof kind);
	warm_opt.runs = reps;
	rc = warm_report(&t, kind, mallocs, &warm_opt);
	if (rc >= 0 && !no_minmem) {
		r = minmem_report(&t, kind, MINMEM_TARGET_RECORDED);
		rc = r < 0 ? r : rc | r;
	}
	fflush(stdout);
	free(t.ev);
	return rc;
}

static int report_trace(const char *path, double ratio_target)
{
	struct trace t = { 0 };
	struct figures *fg = malloc(sizeof *fg);
	double med[MAX_CONFIGS], mmed[N_REF_MALLOCS];
	char b1[32], b2[32], b3[32], b4[32], kind[64];
	int rc = 0, w = 24;

	if (warm_only) {
		free(fg);
		return report_warm(path);
	}
	t.name = path;
	if (!fg || load_trace(&t, path) != 0) {
		free(fg);
		return -1;
	}
	trace_kind(path, kind, sizeof kind);
	printf("\n-- %s: %zu allocations, %zu frees\n", path, t.allocs, t.frees);
	fflush(stdout);
	measure(&t, fg);
	for (size_t c = 0; c < n_configs; c++)
		if ((int)strlen(configs[c].label) > w)
			w = (int)strlen(configs[c].label);
	printf("%-*s %8s %11s %11s %11s %6s %9s %10s %9s\n", w, "options", "ns/op", "peak req",
	       "peak alloc", "peak resvd", "resvd/", "device", "after", "device");
	printf("%-*s %8s %11s %11s %11s %6s %9s %10s %9s\n", w, "", "", "MiB", "MiB", "MiB",
	       "alloc", "allocs", "warm-up", "frees");
	for (size_t c = 0; c < n_configs; c++) {
		const struct outcome *o = &fg->o[c];
		const devcache_stats_t *s = &o->stats;

		med[c] = fg->n[c] ? bench_median(fg->ns[c], fg->n[c]) : -1;
		if (o->failed && o->ops == 0) {
			printf("%-*s FAILED: %s\n", w, configs[c].label, o->error);
			rc = -1;
			continue;
		}
		double ratio = (double)s->reserved_bytes[DEVCACHE_POOL_ALL].peak /
			       (double)s->allocated_bytes[DEVCACHE_POOL_ALL].peak;

		printf("%-*s %8s %11s %11s %11s %6.3f %9llu %10llu %9llu\n", w, configs[c].label,
		       med[c] < 0 ? "-" : fmt_ns(b4, sizeof b4, med[c]),
		       mib(b1, sizeof b1, (int64_t)o->peak_requested),
		       mib(b2, sizeof b2, s->allocated_bytes[DEVCACHE_POOL_ALL].peak),
		       mib(b3, sizeof b3, s->reserved_bytes[DEVCACHE_POOL_ALL].peak), ratio,
		       (unsigned long long)s->num_device_alloc,
		       (unsigned long long)o->dev_allocs_after_warmup,
		       (unsigned long long)s->num_device_free);
		if (o->failed) {
			printf("%-*s FAILED: %s\n", w, "", o->error);
			rc = -1;
		}
	}
	for (int m = 0; m < N_REF_MALLOCS; m++) {
		char name[96];

		mmed[m] = -1;
		snprintf(name, sizeof name, "%s %s", mallocs[m].name, mallocs[m].version);
		if (!mallocs[m].available)
			printf("%-*s %8s  (not measured: %s)\n", w, mallocs[m].name, "-",
			       mallocs[m].why);
		else if (fg->mfailed[m])
			printf("%-*s %8s  (malloc returned NULL)\n", w, name, "-");
		else if (fg->mn[m] == 1 && reps > 1)
			printf("%-*s %8s  (malloc and free; 1 replay: over %gx the fastest malloc's)\n",
			       w, name, fmt_ns(b1, sizeof b1, mmed[m] = fg->mns[m][0]), MALLOC_FAR);
		else
			printf("%-*s %8s  (malloc and free)\n", w, name,
			       fmt_ns(b1, sizeof b1, mmed[m] = bench_median(fg->mns[m], fg->mn[m])));
	}
	if (t.has_warmup)
		printf("(\"after warm-up\": device allocations in the %u steps after the trace's "
		       "warm-up mark)\n", fg->o[0].steps_after_warmup);
	int r = print_targets(fg, med, mmed, kind, ratio_target);

	rc = rc < 0 ? rc : r;
	if (rc >= 0 && !no_minmem) {
		r = minmem_report(&t, kind, MINMEM_TARGET);
		rc = r < 0 ? r : rc | r;
	}
	free(t.ev);
	free(fg);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: replay [-o OPTIONS]... [-r REPS] [-m MODULEDIR] [-M] [-v] [-E] [-S FILE] TRACE...\n"
		   "       replay -W [-r RUNS] [-s SECONDS] [-a ALLOCATOR] [-T] [-m MODULEDIR] [-M] TRACE...\n"
		   "  Replays each trace on the host device with default tunables,\n"
		   "  max_split_size_mb:128, max_split_size_mb:512, expandable_segments:True\n"
		   "  and caching:false, and through glibc's malloc, jemalloc, mimalloc and\n"
		   "  tcmalloc; then finds the least memory each trace runs in on benchdev:0.\n"
		   "  -o OPTIONS    replay with these tunables (\"key:value,...\") instead;\n"
		   "                repeat for more settings, \"\" for the defaults\n"
		   "  -r REPS       replays per ns/op figure, the median is shown (default 5,\n"
		   "                at most %d; caching:false runs once)\n"
		   "  -m MODULEDIR  where benchdev.so is (default bench/modules/.libs)\n"
		   "  -M            no minimum-memory runs\n"
		   "  -v            print the memory summary after each replay\n"
		   "  -E            call devcache_empty_cache() at each step (for comparison)\n"
		   "  -S FILE       append a JSON snapshot after each replay to FILE\n"
		   "  -W            replay each trace warm, in this process, through devcache\n"
		   "                (host device, default tunables) and each malloc: ns/event,\n"
		   "                median of -r runs (at most %d), and the ratio to the fastest\n"
		   "                malloc; then the least memory it runs in (not with -M)\n"
		   "  -s SECONDS    -W: least time of a run's whole passes (default 0.05; 0: one\n"
		   "                pass a run)\n"
		   "  -a ALLOCATOR  -W: only devcache, glibc, jemalloc, mimalloc or tcmalloc\n"
		   "  -T            -W: also devcache in two threads at once, each on streams of\n"
		   "                its own: their events per second over one thread's\n",
		MAX_REPS, MAX_REPS);
}

int main(int argc, char **argv)
{
	const char *module_dir = "bench/modules/.libs";
	int opt, rc = 0;
	size_t n_opts = 0;

	ref_mallocs_load(mallocs, argv);
	while ((opt = getopt(argc, argv, "o:r:m:MvES:Ws:a:Th")) != -1) {
		char *end;

		switch (opt) {
		case 'o':
			if (n_opts == MAX_CONFIGS) {
				fprintf(stderr, "replay: at most %d -o options\n", MAX_CONFIGS);
				return 2;
			}
			configs[n_opts].label = *optarg ? optarg : "default";
			configs[n_opts].options = *optarg ? optarg : NULL;
			configs[n_opts].caching = !strstr(optarg, "caching:false") &&
						  !strstr(optarg, "caching:0");
			n_configs = ++n_opts;
			break;
		case 'r':
			reps = atoi(optarg);
			break;
		case 'm':
			module_dir = optarg;
			break;
		case 'M':
			no_minmem = true;
			break;
		case 'v':
			print_summary = true;
			break;
		case 'E':
			empty_each_step = true;
			break;
		case 'S':
			snapshot_out = fopen(optarg, "w");
			if (!snapshot_out) {
				fprintf(stderr, "replay: %s: %s\n", optarg, strerror(errno));
				return 2;
			}
			break;
		case 'W':
			warm_only = true;
			break;
		case 's':
			warm_opt.run_seconds = strtod(optarg, &end);
			if (end == optarg || *end || !(warm_opt.run_seconds >= 0 &&
						       warm_opt.run_seconds <= 60)) {
				fprintf(stderr, "replay: -s %s: not a number of seconds from 0 to 60\n",
					optarg);
				return 2;
			}
			break;
		case 'a':
			warm_opt.only = optarg;
			break;
		case 'T':
			warm_opt.two_threads = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind == argc || reps < 1 || reps > MAX_REPS) {
		usage(stderr);
		return 2;
	}
	if (warm_opt.two_threads && !warm_only) {
		fprintf(stderr, "replay: -T is an option of -W\n");
		return 2;
	}
	if (warm_only) {
		printf("== Recorded traces replayed warm, in one process: ns per event (allocation "
		       "or free)\n");
		printf("median (min, max) of %d run%s of whole passes (at least %g s a run) after "
		       "one warm-up pass;\ndevcache (host device, default tunables, one context) "
		       "and the mallocs take turns, the same loop\n", reps, reps == 1 ? "" : "s",
		       warm_opt.run_seconds);
	} else {
		printf("== Trace replay: host device, one context per run, each trace parsed once%s\n",
		       empty_each_step ? "; empty_cache at each step" : "");
		printf("ns/op: median of %d replays (caching:false: 1), devcache and the mallocs "
		       "interleaved\n", reps);
	}
	fflush(stdout);
	if (!no_minmem)
		minmem_init(module_dir, 0.0025);
	for (int i = optind; i < argc; i++) {
		int r = report_trace(argv[i], 1.10);

		if (r < 0)
			return 2;
		rc |= r;
	}
	if (snapshot_out && fclose(snapshot_out) != 0) {
		fprintf(stderr, "replay: snapshot: %s\n", strerror(errno));
		return 2;
	}
	return rc ? 1 : 0;
}
