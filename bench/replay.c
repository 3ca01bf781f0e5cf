/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* replay.c - benchmark: replays allocation traces through the allocator under several tunable settings and reports memory efficiency. */
#include <config.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* The trace is parsed once into an array of events whose frees name the
 * allocation they release by its ordinal, so the replay itself does no
 * parsing and no hashing: what is timed is the allocator. */
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

/* ---- ID to ordinal, while parsing --------------------------------------- */

struct idmap {
	uint64_t *keys; /* 0: empty slot (IDs are stored plus one) */
	uint64_t *vals;
	size_t cap, used;
};

static uint64_t id_hash(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

static int idmap_grow(struct idmap *m)
{
	struct idmap n = { 0 };

	n.cap = m->cap ? m->cap * 2 : 1024;
	n.keys = calloc(n.cap, sizeof *n.keys);
	n.vals = calloc(n.cap, sizeof *n.vals);
	if (!n.keys || !n.vals)
		return -1;
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->keys[i])
			continue;
		size_t j = id_hash(m->keys[i]) & (n.cap - 1);

		while (n.keys[j])
			j = (j + 1) & (n.cap - 1);
		n.keys[j] = m->keys[i];
		n.vals[j] = m->vals[i];
		n.used++;
	}
	free(m->keys);
	free(m->vals);
	*m = n;
	return 0;
}

/* Returns the slot of id (key 0 when absent). */
static size_t idmap_slot(struct idmap *m, uint64_t id)
{
	size_t j = id_hash(id + 1) & (m->cap - 1);

	while (m->keys[j] && m->keys[j] != id + 1)
		j = (j + 1) & (m->cap - 1);
	return j;
}

/* Deletion with backward shifting keeps probe sequences intact. */
static void idmap_delete(struct idmap *m, size_t j)
{
	size_t i = j;

	m->keys[j] = 0;
	m->used--;
	for (;;) {
		i = (i + 1) & (m->cap - 1);
		if (!m->keys[i])
			return;
		size_t home = id_hash(m->keys[i]) & (m->cap - 1);

		/* move keys[i] into the hole at j if j lies on its probe path */
		if ((i > j && (home <= j || home > i)) || (i < j && home <= j && home > i)) {
			m->keys[j] = m->keys[i];
			m->vals[j] = m->vals[i];
			m->keys[i] = 0;
			j = i;
		}
	}
}

/* ---- parsing ------------------------------------------------------------- */

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

static int parse_line(struct trace *t, struct idmap *ids, char *line, const char *path,
		      unsigned long lineno)
{
	unsigned long long id, size;
	unsigned stream = 0;
	struct event e = { 0 };
	size_t slot;
	int n;

	if (line[0] == '#') {
		if (!strncmp(line, "# warmup-end", 12)) {
			e.kind = EV_WARMUP_END;
			t->has_warmup = true;
			return push(t, e);
		}
		if (!strncmp(line, "# step ", 7)) {
			e.kind = EV_STEP;
			return push(t, e);
		}
		return 0;
	}
	if (line[0] == '\n' || line[0] == 0)
		return 0;
	if (line[0] == '+' && (n = sscanf(line + 1, "%llu %llu %u", &id, &size, &stream)) >= 2) {
		if (ids->used * 2 >= ids->cap && idmap_grow(ids) != 0)
			return -1;
		slot = idmap_slot(ids, id);
		if (!ids->keys[slot])
			ids->used++;
		ids->keys[slot] = id + 1;
		ids->vals[slot] = t->allocs++;
		e.kind = EV_ALLOC;
		e.size = size;
		e.stream = stream;
		if (stream > t->max_stream)
			t->max_stream = stream;
		return push(t, e);
	}
	if (line[0] == '-' && sscanf(line + 1, "%llu", &id) == 1) {
		slot = ids->cap ? idmap_slot(ids, id) : 0;
		if (!ids->cap || !ids->keys[slot]) {
			fprintf(stderr, "replay: %s:%lu: free of unknown ID %llu\n", path, lineno, id);
			return -2;
		}
		e.kind = EV_FREE;
		e.size = ids->vals[slot];
		idmap_delete(ids, slot);
		t->frees++;
		return push(t, e);
	}
	fprintf(stderr, "replay: %s:%lu: not a trace line: %s", path, lineno, line);
	return -2;
}

static int load_trace(struct trace *t, const char *path)
{
	FILE *f = fopen(path, "r");
	struct idmap ids = { 0 };
	char *line = NULL;
	size_t len = 0;
	unsigned long lineno = 0;
	int rc = 0;

	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (rc == 0 && getline(&line, &len, f) != -1)
		rc = parse_line(t, &ids, line, path, ++lineno);
	if (rc == -1)
		fprintf(stderr, "replay: %s: out of memory\n", path);
	free(line);
	free(ids.keys);
	free(ids.vals);
	fclose(f);
	return rc ? -1 : 0;
}

/* ---- replay ---------------------------------------------------------------- */

struct outcome {
	bool failed;
	char error[512];
	double seconds;
	size_t ops;
	devcache_stats_t stats;         /* at the end, before the leftovers are freed */
	uint64_t dev_allocs_after_warmup;
	uint64_t peak_requested;        /* counted here, to check the allocator's own */
	unsigned steps_after_warmup;
};

static FILE *snapshot_out; /* -S: a JSON snapshot after each replay */
static bool print_summary;  /* -v: the summary table after each replay */
static bool empty_each_step; /* -E: devcache_empty_cache() at each step mark */

static int replay(const struct trace *t, const char *options, struct outcome *o)
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
	err = devcache_device_get(ctx, "host", &dev);
	if (err)
		bench_fail("devcache_device_get host", err);
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
			if (empty_each_step)
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
	if (print_summary) {
		printf("summary of %s with %s, the trace's leftovers still allocated:\n", t->name,
		       options ? options : "default tunables");
		devcache_summary(dev, stdout);
	}
	if (snapshot_out) {
		fprintf(snapshot_out, "{\"trace\": \"%s\", \"options\": \"%s\", \"snapshot\":\n",
			t->name, options ? options : "");
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

/* ---- report ------------------------------------------------------------------ */

static const char *mib(char *buf, size_t n, int64_t bytes)
{
	snprintf(buf, n, "%.1f", (double)bytes / (double)MIB);
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

/* A trace's kind, from its file name: the targets apply by kind. */
static bool name_has(const char *path, const char *word)
{
	const char *base = strrchr(path, '/');

	return strstr(base ? base + 1 : path, word) != NULL;
}

static int report_trace(const char *path, double ratio_target)
{
	struct trace t = { 0 };
	struct outcome o[MAX_CONFIGS];
	char b1[32], b2[32], b3[32];
	bool fixed = name_has(path, "train-fixed"), var = name_has(path, "train-var");
	int rc = 0;

	t.name = path;
	if (load_trace(&t, path) != 0)
		return -1;
	printf("\n-- %s: %zu allocations, %zu frees\n", path, t.allocs, t.frees);
	int w = 22;

	for (size_t c = 0; c < n_configs; c++)
		if ((int)strlen(configs[c].label) > w)
			w = (int)strlen(configs[c].label);
	printf("%-*s %8s %11s %11s %11s %6s %9s %10s %9s\n", w, "options", "ns/op", "peak req",
	       "peak alloc", "peak resvd", "resvd/", "device", "after", "device");
	printf("%-*s %8s %11s %11s %11s %6s %9s %10s %9s\n", w, "", "", "MiB", "MiB", "MiB",
	       "alloc", "allocs", "warm-up", "frees");
	for (size_t c = 0; c < n_configs; c++) {
		const devcache_stats_t *s = &o[c].stats;

		if (replay(&t, configs[c].options, &o[c]) != 0 && o[c].ops == 0) {
			printf("%-*s FAILED: %s\n", w, configs[c].label, o[c].error);
			rc = -1;
			continue;
		}
		double ratio = (double)s->reserved_bytes[DEVCACHE_POOL_ALL].peak /
			       (double)s->allocated_bytes[DEVCACHE_POOL_ALL].peak;

		printf("%-*s %8.0f %11s %11s %11s %6.3f %9llu %10llu %9llu\n", w, configs[c].label,
		       o[c].seconds * 1e9 / (double)o[c].ops,
		       mib(b1, sizeof b1, (int64_t)o[c].peak_requested),
		       mib(b2, sizeof b2, s->allocated_bytes[DEVCACHE_POOL_ALL].peak),
		       mib(b3, sizeof b3, s->reserved_bytes[DEVCACHE_POOL_ALL].peak), ratio,
		       (unsigned long long)s->num_device_alloc,
		       (unsigned long long)o[c].dev_allocs_after_warmup,
		       (unsigned long long)s->num_device_free);
		if (o[c].failed) {
			printf("%-*s FAILED: %s\n", w, "", o[c].error);
			rc = -1;
			continue;
		}
	}
	if (t.has_warmup)
		printf("(\"after warm-up\": device allocations in the %u steps after the trace's "
		       "warm-up mark)\n", o[0].steps_after_warmup);

	for (size_t c = 0; c < n_configs; c++) {
		const devcache_stats_t *s = &o[c].stats;
		char id[96];

		if (o[c].failed || !configs[c].caching)
			continue;
		if (fixed) {
			bool pass = o[c].dev_allocs_after_warmup == 0;

			snprintf(id, sizeof id, "replay/train-fixed/steady [%s]", configs[c].label);
			printf("TARGET %-44s %s  %llu device allocations in %u steps after warm-up "
			       "(target 0)\n", id, pass ? "PASS" : "MISS",
			       (unsigned long long)o[c].dev_allocs_after_warmup,
			       o[c].steps_after_warmup);
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
	free(t.ev);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: replay [-o OPTIONS]... [-v] [-E] [-S FILE] TRACE...\n"
		   "  Replays each trace on the host device with default tunables,\n"
		   "  max_split_size_mb:128, max_split_size_mb:512, expandable_segments:True\n"
		   "  and caching:false.\n"
		   "  -o OPTIONS  replay with these tunables (\"key:value,...\") instead;\n"
		   "              repeat for more settings, \"\" for the defaults\n"
		   "  -v          print the memory summary after each replay\n"
		   "  -E          call devcache_empty_cache() at each step (for comparison)\n"
		   "  -S FILE     append a JSON snapshot after each replay to FILE\n");
}

int main(int argc, char **argv)
{
	int opt, rc = 0;
	size_t n_opts = 0;

	while ((opt = getopt(argc, argv, "o:vES:h")) != -1) {
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
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind == argc) {
		usage(stderr);
		return 2;
	}
	printf("== Trace replay: host device, one context per run, each trace parsed once%s\n",
	       empty_each_step ? "; empty_cache at each step" : "");
	fflush(stdout);
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
