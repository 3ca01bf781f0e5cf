/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* soak-check.c - bench/soak's invariants of the model cache and the allocators, while running and at the end, and its report. */
#define _GNU_SOURCE /* open_memstream */
#include "soak.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char *const pool_names[DEVCACHE_POOL_COUNT] = {"all", "small", "large"};

/* ---- the allocator's statistics ------------------------------------------------------ */

/* Every statistic of every pool: current is what was added less what was
 * taken, at most its peak, never negative; the "all" pool is the sum of
 * the other two.  what: "device", "pinned". */
static bool pools_agree(struct soak *s, int c, const devcache_stats_t *st, const char *what,
			const char *when)
{
	static const struct {
		const char *name;
		size_t offset;
	} metrics[] = {
#define M(f) {#f, offsetof(devcache_stats_t, f)}
		M(allocation), M(segment), M(active), M(inactive_split), M(allocated_bytes),
		M(reserved_bytes), M(active_bytes), M(inactive_split_bytes), M(requested_bytes),
#undef M
	};

	for (size_t k = 0; k < sizeof metrics / sizeof *metrics; k++) {
		const devcache_stat_t *v = (const void *)((const char *)st + metrics[k].offset);

		for (int p = 0; p < DEVCACHE_POOL_COUNT; p++)
			if (v[p].current < 0 || v[p].current > v[p].peak ||
			    v[p].current != v[p].allocated - v[p].freed) {
				soak_fail(s,
					  "context %d, %s %s: %s[%s] is %" PRId64 " (peak %" PRId64
					  ", added %" PRId64 ", taken %" PRId64 ")",
					  c, what, when, metrics[k].name, pool_names[p], v[p].current,
					  v[p].peak, v[p].allocated, v[p].freed);
				return false;
			}
		if (v[0].current != v[1].current + v[2].current) {
			soak_fail(s, "context %d, %s %s: %s is %" PRId64 " in all, %" PRId64
				  " small + %" PRId64 " large",
				  c, what, when, metrics[k].name, v[0].current, v[1].current, v[2].current);
			return false;
		}
	}
	for (int p = 0; p < DEVCACHE_POOL_COUNT; p++)
		if (st->allocated_bytes[p].current > st->reserved_bytes[p].current ||
		    st->active_bytes[p].current > st->reserved_bytes[p].current) {
			soak_fail(s,
				  "context %d, %s %s: %" PRId64 " bytes allocated and %" PRId64
				  " active, but %" PRId64 " reserved (%s pool)",
				  c, what, when, st->allocated_bytes[p].current, st->active_bytes[p].current,
				  st->reserved_bytes[p].current, pool_names[p]);
			return false;
		}
	return true;
}

/* The model cache within its budgets. */
static bool within_budgets(struct soak *s, int c, devcache_cache_stats_t *cs, const char *when)
{
	uint64_t used, budget;

	if (!soak_ok(s, devcache_cache_stats(s->ctx[c], cs), NULL, "devcache_cache_stats", when) ||
	    !soak_ok(s, devcache_cache_device_usage(s->ctx[c], s->dev[c], &used, &budget), NULL,
		     "devcache_cache_device_usage", when))
		return false;
	if (cs->ram_used > cs->ram_budget || used > budget || cs->locked_models > cs->models) {
		soak_fail(s,
			  "context %d %s: the model cache uses %" PRIu64 " of %" PRIu64
			  " bytes of RAM and %" PRIu64 " of %" PRIu64 " on %s; %" PRIu64
			  " of %" PRIu64 " models locked",
			  c, when, cs->ram_used, cs->ram_budget, used, budget, s->device, cs->locked_models,
			  cs->models);
		return false;
	}
	return true;
}

void soak_check_running(struct soak *s, int c)
{
	devcache_cache_stats_t cs;
	devcache_stats_t st;

	if (soak_ok(s, devcache_stats(s->dev[c], &st), NULL, "devcache_stats", "while running"))
		pools_agree(s, c, &st, "device memory", "while running");
	if (soak_ok(s, devcache_host_stats(s->dev[c], &st), NULL, "devcache_host_stats",
		    "while running"))
		pools_agree(s, c, &st, "pinned memory", "while running");
	within_budgets(s, c, &cs, "while running");
	/* The tables and the snapshot, written while the others change them. */
	soak_ok(s, devcache_cache_summary(s->ctx[c], s->devnull), NULL, "devcache_cache_summary",
		"while running");
	soak_ok(s, devcache_summary(s->dev[c], s->devnull), NULL, "devcache_summary",
		"while running");
	soak_ok(s, devcache_snapshot(s->dev[c], s->devnull), NULL, "devcache_snapshot",
		"while running");
}

/* ---- the memory summary ------------------------------------------------------------- */

/* The "Cur Usage" cell of a row of the summary, as the value it stands for
 * within the rounding of its unit: *lo <= value < *hi. */
static bool summary_cell(const char *text, const char *row, int64_t *lo, int64_t *hi)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	static const char prefixes[] = "KMGT";
	char key[64], unit[8] = "";
	const char *p;
	long long v;
	int64_t mult = 1;

	snprintf(key, sizeof key, "| %s ", row);
	if (!(p = strstr(text, key)) || !(p = strchr(p + 1, '|')))
		return false;
	int n = sscanf(p + 1, "%lld %7[A-Za-z]", &v, unit);
	if (n < 1)
		return false;
	if (n == 2) {
		size_t u = 0;

		for (; u < sizeof units / sizeof *units && strcmp(unit, units[u]); u++)
			mult *= 1024;
		if (u == sizeof units / sizeof *units) { /* a count's prefix */
			const char *q = strlen(unit) == 1 ? strchr(prefixes, unit[0]) : NULL;

			if (!q)
				return false;
			mult = 1;
			for (const char *r = prefixes; r <= q; r++)
				mult *= 1000;
		}
	}
	*lo = (int64_t)v * mult;
	*hi = *lo + mult;
	return true;
}

/* The summary of dev shows what its statistics say. */
static void check_summary(struct soak *s, int c, const devcache_stats_t *st)
{
	const struct {
		const char *row;
		int64_t value;
	} rows[] = {
		{"Allocated memory", st->allocated_bytes[0].current},
		{"GPU reserved memory", st->reserved_bytes[0].current},
		{"Allocations", st->allocation[0].current},
		{"GPU reserved segments", st->segment[0].current},
	};
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int rc;

	if (!f) {
		soak_fail(s, "open_memstream failed");
		return;
	}
	rc = devcache_summary(s->dev[c], f);
	fclose(f);
	if (soak_ok(s, rc, NULL, "devcache_summary", s->device))
		for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
			int64_t lo, hi;

			if (!summary_cell(text, rows[i].row, &lo, &hi)) {
				soak_fail(s, "context %d: the memory summary has no row \"%s\":\n%s", c,
					  rows[i].row, text);
				break;
			}
			if (rows[i].value < lo || rows[i].value >= hi) {
				soak_fail(s, "context %d: the memory summary's %s is %" PRId64
					  "..%" PRId64 ", the statistics say %" PRId64 ":\n%s",
					  c, rows[i].row, lo, hi - 1, rows[i].value, text);
				break;
			}
		}
	free(text);
}

/* ---- at the end --------------------------------------------------------------------- */

/* Nothing handed out: every block was freed, every model evicted.  (A
 * block freed after devcache_record_stream stays active until the
 * allocator next looks at its streams' events: check_empty sees to it.) */
static void check_idle(struct soak *s, int c, const devcache_stats_t *st, const char *what)
{
	for (int p = 0; p < DEVCACHE_POOL_COUNT; p++)
		if (st->allocation[p].current || st->allocated_bytes[p].current) {
			soak_fail(s,
				  "context %d, %s at the end: %" PRId64 " blocks, %" PRId64
				  " bytes allocated (%s pool)",
				  c, what, st->allocation[p].current, st->allocated_bytes[p].current,
				  pool_names[p]);
			return;
		}
}

/* Emptied: nothing reserved or active, and (without expandable segments,
 * whose counts are of map operations) as many driver frees as
 * allocations. */
static void check_empty(struct soak *s, int c, const devcache_stats_t *st, const char *what,
			bool expandable)
{
	if (st->reserved_bytes[0].current || st->segment[0].current || st->active[0].current ||
	    st->active_bytes[0].current || st->requested_bytes[0].current ||
	    st->inactive_split[0].current ||
	    (!expandable && st->num_device_alloc != st->num_device_free)) {
		soak_fail(s,
			  "context %d, %s after emptying the cache: %" PRId64 " bytes in %" PRId64
			  " segments reserved, %" PRId64 " blocks of %" PRId64 " bytes active (%" PRId64
			  " requested), %" PRId64 " split blocks; %" PRIu64 " driver allocations, %"
			  PRIu64 " frees",
			  c, what, st->reserved_bytes[0].current, st->segment[0].current,
			  st->active[0].current, st->active_bytes[0].current,
			  st->requested_bytes[0].current, st->inactive_split[0].current,
			  st->num_device_alloc, st->num_device_free);
	}
}

static void check_cache(struct soak *s, int c, devcache_cache_stats_t *cs)
{
	const struct soak_counts *n = &s->total;
	uint64_t tried = n->loads[c] + n->load_enomem[c] + n->cancelled[c];

	if (!within_budgets(s, c, cs, "at the end"))
		return;
	/* A hit is counted when it succeeds; a miss when it is tried, a
	 * failed or cancelled RAM-copy reload neither: every failure was an
	 * ENOMEM, every cancellation the soak's. */
	if (cs->locked_models || cs->hits != n->hits[c] || cs->failed_loads != n->load_enomem[c] ||
	    cs->cancelled_loads != n->cancelled[c] || cs->misses < n->loads[c] - n->hits[c] ||
	    cs->hits + cs->misses > tried)
		soak_fail(s,
			  "context %d: the model cache counts %" PRIu64 " hits, %" PRIu64
			  " misses, %" PRIu64 " failed, %" PRIu64 " cancelled, %" PRIu64
			  " locked; the threads saw %" PRIu64 " loads, %" PRIu64 " hits, %" PRIu64
			  " out of memory, %" PRIu64 " cancelled",
			  c, cs->hits, cs->misses, cs->failed_loads, cs->cancelled_loads,
			  cs->locked_models, n->loads[c], n->hits[c], n->load_enomem[c],
			  n->cancelled[c]);
}

void soak_check_invariants(struct soak *s, bool verbose)
{
	for (int c = 0; c < SOAK_CONTEXTS; c++) {
		devcache_device_t *dev = s->dev[c];
		devcache_cache_stats_t cs;
		devcache_stats_t st;
		uint64_t used, budget;

		check_cache(s, c, &cs);
		s->evictions[c] = cs.evictions;
		s->misses[c] = cs.misses;
		if (verbose) {
			devcache_cache_summary(s->ctx[c], stdout);
			devcache_summary(dev, stdout);
		}
		devcache_cache_evict_all(s->ctx[c]);
		if (soak_ok(s, devcache_cache_stats(s->ctx[c], &cs), NULL, "devcache_cache_stats",
			    "after evict_all") &&
		    soak_ok(s, devcache_cache_device_usage(s->ctx[c], dev, &used, &budget), NULL,
			    "devcache_cache_device_usage", "after evict_all") &&
		    (cs.models || cs.ram_used || cs.ram_copies || used))
			soak_fail(s,
				  "context %d after evict_all: %" PRIu64 " models, %" PRIu64
				  " RAM copies, %" PRIu64 " bytes of RAM and %" PRIu64 " on %s",
				  c, cs.models, cs.ram_copies, cs.ram_used, used, s->device);
		if (soak_ok(s, devcache_stats(dev, &st), NULL, "devcache_stats", "at the end") &&
		    pools_agree(s, c, &st, "device memory", "at the end")) {
			check_idle(s, c, &st, "device memory");
			check_summary(s, c, &st);
		}
		if (soak_ok(s, devcache_host_stats(dev, &st), NULL, "devcache_host_stats",
			    "at the end") &&
		    pools_agree(s, c, &st, "pinned memory", "at the end"))
			check_idle(s, c, &st, "pinned memory");
		soak_ok(s, devcache_empty_cache(dev), NULL, "devcache_empty_cache", "at the end");
		soak_ok(s, devcache_host_empty_cache(dev), NULL, "devcache_host_empty_cache",
			"at the end");
		if (soak_ok(s, devcache_stats(dev, &st), NULL, "devcache_stats", "emptied"))
			check_empty(s, c, &st, "device memory", s->expandable[c]);
		if (soak_ok(s, devcache_host_stats(dev, &st), NULL, "devcache_host_stats", "emptied"))
			check_empty(s, c, &st, "pinned memory", false);
	}
}

/* ---- the report --------------------------------------------------------------------- */

void soak_add_counts(struct soak *s, const struct soak_worker *w, int n)
{
	uint64_t *sum = (uint64_t *)&s->total;

	memset(&s->total, 0, sizeof s->total);
	for (int i = 0; i < n; i++) {
		const uint64_t *v = (const uint64_t *)&w[i].n;

		for (size_t k = 0; k < sizeof s->total / sizeof *sum; k++)
			sum[k] += v[k];
	}
}

static double mib(uint64_t bytes)
{
	return (double)bytes / (double)MIB;
}

void soak_print_setup(const struct soak *s, FILE *out)
{
	fprintf(out, "models:      ");
	for (size_t k = 0; k < s->ms->n; k++)
		fprintf(out, "%s%s %.1f MiB", k ? ", " : "", s->ms->m[k].label, mib(s->ms->m[k].bytes));
	fprintf(out,
		"\nbudgets:     max_cache_vram %d MiB, max_cache_ram %d MiB a context; each allocator "
		"capped at %d MiB (memory_fraction %.6f)\n"
		"contexts:    0: partial_loading; 1: mmap false, garbage_collection_threshold "
		"0.8%s\n",
		SOAK_VRAM_MIB, SOAK_RAM_MIB, SOAK_DEVICE_MIB, s->fraction,
		s->expandable[1] ? ", expandable_segments" : "");
}

void soak_print_report(const struct soak *s, FILE *out)
{
	const struct soak_counts *n = &s->total;
	uint64_t loads = n->loads[0] + n->loads[1], hits = n->hits[0] + n->hits[1];
	uint64_t load_enomem = n->load_enomem[0] + n->load_enomem[1];
	double t = s->elapsed > 0 ? s->elapsed : 1;

	fprintf(out,
		"loads:       %" PRIu64 " (%.0f/s): %" PRIu64 " hits (%" PRIu64
		" from RAM copies), %" PRIu64 " misses; %" PRIu64 " partial; %" PRIu64
		" cancelled on purpose\n",
		loads, (double)loads / t, hits, n->from_ram, loads - hits, n->partial,
		n->cancelled[0] + n->cancelled[1]);
	fprintf(out,
		"evictions:   %" PRIu64 " (cache statistics; %" PRIu64 " calls of evict_all took %" PRIu64
		")\n",
		s->evictions[0] + s->evictions[1], n->evict_all, n->evicted);
	fprintf(out, "verified:    %" PRIu64 " tensors, %.1f MiB\n", n->verified,
		mib(n->verified_bytes));
	fprintf(out, "partial:     %" PRIu64 " make_resident, %" PRIu64 " move_to_host\n",
		n->resident, n->to_host);
	fprintf(out,
		"allocator:   %" PRIu64 " allocations (%.0f/s), %" PRIu64 " frees, %" PRIu64
		" recorded on another stream, %" PRIu64 " pinned, %" PRIu64 " empty_cache, %" PRIu64
		" synchronize, %" PRIu64 " statistics checks\n",
		n->allocs, (double)n->allocs / t, n->frees, n->records, n->pinned, n->empties, n->syncs,
		n->stat_reads);
	fprintf(out,
		"expected:    %" PRIu64 " out of memory: %" PRIu64 " loads, %" PRIu64
		" allocations, %" PRIu64 " pinned, %" PRIu64 " make_resident\n",
		load_enomem + n->alloc_enomem + n->pinned_enomem + n->resident_enomem, load_enomem,
		n->alloc_enomem, n->pinned_enomem, n->resident_enomem);
	fprintf(out, "warnings:    %lu logged; %.1f s\n", s->warnings, s->elapsed);
}
