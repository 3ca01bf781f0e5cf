/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* loadbench-sharded.c - bench/loadbench's sharded figures: the 4G model as 4 shards and an index against the single file. */
#include <config.h>

#include <string.h>

#include "loadbench.h"

void measure_sharded(const struct model *one, const struct set *s, struct sharded_result *r)
{
	uint64_t avail = meminfo_bytes("MemAvailable:");
	double in_one, in_set = 1, t0 = now_seconds();

	memset(r, 0, sizeof *r);
	printf("\n-- sharded %s: %s, %d shards and their index, %llu bytes (%.2f GiB) in all, "
	       "against the single file %s\n", one->l->label, s->index_file, N_SHARDS,
	       (unsigned long long)s->size, gib(s->size), one->file);
	for (size_t k = 0; s->ready && k < N_SHARDS; k++)
		printf("   %s: %zu tensors (%s .. %s), %.1f MiB\n", s->shard[k].file, s->shard[k].n,
		       s->shard[k].t[0].name, s->shard[k].t[s->shard[k].n - 1].name,
		       mib(s->shard[k].size));
	if (!one->ready || !s->ready) {
		snprintf(r->why, sizeof r->why, "%s", !one->ready ? one->why : s->why);
		printf("SKIP  %s\n", r->why);
		return;
	}
	/* Both in the page cache, and one copy of the model beside them. */
	if (avail < one->size + s->size + one->size + GIB) {
		snprintf(r->why, sizeof r->why,
			 "not enough memory to keep %s and its shards in the page cache beside a "
			 "copy: %.1f GiB available, %.1f GiB needed", one->file, gib(avail),
			 gib(2 * one->size + s->size + GIB));
		printf("SKIP  %s\n", r->why);
		return;
	}
	warm(one);
	for (size_t k = 0; k < N_SHARDS; k++)
		warm(&s->shard[k]);
	in_one = resident(one);
	for (size_t k = 0; k < N_SHARDS; k++) {
		double in = resident(&s->shard[k]);

		if (in < in_set)
			in_set = in;
	}
	printf("page cache: %.1f%% of the single file and at least %.1f%% of each shard resident "
	       "after one read of each (mincore)\n", in_one * 100, in_set * 100);
	if (in_one < 0.99 || in_set < 0.99) {
		snprintf(r->why, sizeof r->why, "the page cache kept only %.1f%% of %s and %.1f%% of "
			 "a shard", in_one * 100, one->file, in_set * 100);
		printf("SKIP  %s\n", r->why);
		return;
	}
	/* Interleaved, and which of the two goes first alternates. */
	for (int i = 0; i < reps; i++) {
		const char *path[2] = { one->path, s->index_path };
		bool ok = true;

		for (int j = 0; ok && j < 2; j++) {
			int w = (i + j) % 2;

			ok = run_zero_copy(path[w], &r->zc[w], &r->touch[w]);
		}
		for (int j = 0; ok && j < 2; j++) {
			int w = (i + j) % 2;

			ok = run_staged(path[w], &r->cold[w], &r->warm[w]);
		}
		if (!ok) {
			snprintf(r->why, sizeof r->why, "%s", load_error);
			printf("FAILED  %s\n", r->why);
			return;
		}
	}
	r->measured = true;
	print_head("file");
	print_row("zero-copy host load: the single file", &r->zc[0], one->size, NULL);
	print_row("zero-copy host load: 4 shards + index", &r->zc[1], one->size, NULL);
	print_row("  then 1 byte per page: the single file", &r->touch[0], one->size,
		  "  (file pages mapped)");
	print_row("  then 1 byte per page: 4 shards", &r->touch[1], one->size,
		  "  (file pages mapped)");
	print_row("staged, fresh memory: the single file", &r->cold[0], one->size, NULL);
	print_row("staged, fresh memory: 4 shards + index", &r->cold[1], one->size, NULL);
	print_row("staged, memory cached: the single file", &r->warm[0], one->size, NULL);
	print_row("staged, memory cached: 4 shards + index", &r->warm[1], one->size, NULL);
	printf("4 shards / the single file: zero-copy %.2fx, staged into fresh memory %.2fx, "
	       "staged into cached memory %.2fx\n", median(&r->zc[1]) / median(&r->zc[0]),
	       median(&r->cold[1]) / median(&r->cold[0]), median(&r->warm[1]) / median(&r->warm[0]));
	printf("(these figures took %.0f s)\n", now_seconds() - t0);
}

void sharded_targets(const struct model *one, const struct sharded_result *r)
{
	char id[64];
	const char *l = one->l->label;

	snprintf(id, sizeof id, "load/sharded-host-%s", l);
	if (!r->measured) {
		print_target(id, "SKIP", "%s", r->why);
	} else {
		double a = median(&r->zc[1]), b = median(&r->zc[0]);

		print_target(id, a <= 1.05 * b ? "PASS" : "MISS",
			     "zero-copy: 4 shards %.3f ms / single file %.3f ms = %.2fx (target <= 1.05x)",
			     a * 1e3, b * 1e3, a / b);
	}
	snprintf(id, sizeof id, "load/sharded-staged-%s", l);
	if (!r->measured) {
		print_target(id, "SKIP", "%s", r->why);
	} else {
		double a = median(&r->warm[1]), b = median(&r->warm[0]);
		double fa = median(&r->cold[1]), fb = median(&r->cold[0]);

		print_target(id, a <= 1.05 * b ? "PASS" : "MISS",
			     "staged (device memory cached): 4 shards %.1f ms / single file %.1f ms = "
			     "%.2fx; into fresh memory %.1f / %.1f ms = %.2fx (target <= 1.05x)",
			     a * 1e3, b * 1e3, a / b, fa * 1e3, fb * 1e3, fa / fb);
	}
}
