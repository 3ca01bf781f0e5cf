/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* loadbench-switch.c - bench/loadbench's switching figures: two models alternated on the host under a RAM budget that fits one, and RSS along the way. */
#include <config.h>

#include <stdlib.h>

#include "loadbench.h"

#define SWITCH_BUDGET "768M" /* max_cache_ram: one model fits, two do not */

static devcache_model_t *load(devcache_ctx_t *ctx, const char *path, devcache_device_t *dev)
{
	devcache_model_t *model;
	int err = devcache_model_load(ctx, path, dev, NULL, &model);

	if (err)
		bench_fail(path, err);
	return model;
}

static bool is_mark(int i)
{
	return i == 1 || i == 2 || i == 5 || i == 10 || i == 25 || i == 50 || i == n_switches;
}

static void run_switching(const struct model *a, const struct model *b, const char *mmap_opt)
{
	char opts[128], id[64], line[512] = "";
	devcache_ctx_t *ctx;
	devcache_device_t *host;
	devcache_cache_stats_t cs;
	double *t = xcalloc((size_t)n_switches, sizeof *t);
	uint64_t first = 0, last = 0;
	size_t len = 0;

	snprintf(opts, sizeof opts, "max_cache_ram:%s,%s", SWITCH_BUDGET, mmap_opt);
	ctx = open_ctx(opts);
	host = device(ctx, "host");
	for (int i = 1; i <= n_switches; i++) {
		double t0 = now_seconds();
		devcache_model_t *model = load(ctx, (i % 2 ? a : b)->path, host);

		touch(model);
		devcache_model_release(model);
		t[i - 1] = now_seconds() - t0;
		last = status_bytes("VmRSS:");
		if (i == 1)
			first = last;
		if (is_mark(i) && len < sizeof line)
			len += (size_t)snprintf(line + len, sizeof line - len, " %d:%.1f", i, mib(last));
	}
	devcache_cache_stats(ctx, &cs);
	devcache_close(ctx);
	qsort(t, (size_t)n_switches, sizeof *t, bench_cmp_double);
	printf("%-11s RSS MiB after switch%s\n", mmap_opt, line);
	printf("%-11s %.1f ms per switch (load + touch, median), %llu misses, %llu hits, "
	       "%llu evictions, %.2f GiB read\n", "", t[n_switches / 2] * 1e3,
	       (unsigned long long)cs.misses, (unsigned long long)cs.hits,
	       (unsigned long long)cs.evictions, gib(cs.bytes_read));
	free(t);
	double change = first ? ((double)last - (double)first) / (double)first : 0;

	snprintf(id, sizeof id, "load/switch-rss [%s]", mmap_opt);
	print_target(id, change <= 0.05 && change >= -0.05 ? "PASS" : "MISS",
		     "RSS after %d switches %.1f MiB, after the first %.1f MiB: %+.1f%% (target "
		     "within 5%%)", n_switches, mib(last), mib(first), 100 * change);
}

void switching(const struct model *a, const struct model *b)
{
	printf("\n-- Model switching: %s and %s (%.1f MiB each) alternated %d times on the host, "
	       "max_cache_ram:%s (fits one: each load evicts the other); each switch loads, "
	       "reads 1 byte per page and releases\n", a->l->file, b->l->file, mib(a->size),
	       n_switches, SWITCH_BUDGET);
	printf("mmap:false: the model is read into anonymous memory, which RSS counts; "
	       "mmap:true (the default): the file is mapped, and RSS counts the pages read\n");
	if (!a->ready || !b->ready) {
		const char *why = !a->ready ? a->why : b->why;

		print_target("load/switch-rss [mmap:false]", "SKIP", "%s", why);
		print_target("load/switch-rss [mmap:true]", "SKIP", "%s", why);
		return;
	}
	warm(a);
	warm(b);
	run_switching(a, b, "mmap:false");
	run_switching(a, b, "mmap:true");
}
