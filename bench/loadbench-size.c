/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* loadbench-size.c - bench/loadbench's figures for one model file (1G, 4G): every loader against cat, and their targets. */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "loadbench.h"

void measure_size(const struct model *m, struct size_result *r)
{
	memset(r, 0, sizeof *r);
	printf("\n-- %s: %s, %llu bytes (%.2f GiB), %zu tensors\n", m->l->label, m->l->file,
	       (unsigned long long)m->size, gib(m->size), m->n);
	if (!warm_beside_copy(m, r->why, sizeof r->why))
		return;
	r->measured = true;
	/* The runs of each loader are interleaved with the others'. */
	for (int i = 0; i < reps; i++) {
		if (!r->cat.skipped)
			run_cat(m, &r->cat);
		run_naive(m, &r->naive);
		if (!run_zero_copy(m->path, &r->zc, &r->touch) ||
		    !run_staged(m->path, &r->cold, &r->warm))
			exit(2);
	}
	print_head("file");
	print_row("cat FILE > /dev/null (page-cache read limit)", &r->cat, m->size, NULL);
	print_row("naive: malloc(size) + read() into it", &r->naive, m->size, NULL);
	print_row("zero-copy host load (devcache_model_load)", &r->zc, m->size, NULL);
	print_row("  then reading 1 byte per page (separately)", &r->touch, m->size,
		  "  (file pages mapped)");
	print_row("staged load onto benchdev:0, fresh memory", &r->cold, m->size, NULL);
	print_row("staged load onto benchdev:0, memory cached", &r->warm, m->size, NULL);
	printf("staged loads: peak RSS less the model's device bytes (%.1f MiB, counted in RSS on "
	       "benchdev): %.1f MiB into fresh memory, %.1f MiB into cached memory\n",
	       mib(r->cold.dev_bytes), mib(r->cold.over), mib(r->warm.over));
}

void size_targets(const struct model *m, const struct size_result *r, uint64_t ring)
{
	char id[64];
	const char *l = m->l->label;

	snprintf(id, sizeof id, "load/staging-bandwidth-%s", l);
	if (!r->measured || r->cat.skipped) {
		print_target(id, "SKIP", "%s", r->measured ? r->cat.why : r->why);
	} else {
		double cat = (double)m->size / median(&r->cat) / 1e9;
		double st = (double)m->size / median(&r->warm) / 1e9;
		double cold = (double)m->size / median(&r->cold) / 1e9;

		print_target(id, st >= 0.9 * cat ? "PASS" : "MISS",
			     "staged %.2f GB/s (device memory cached; %.2f into fresh) = %.0f%% of "
			     "cat's %.2f GB/s (target >= 90%%)", st, cold, 100 * st / cat, cat);
	}
	snprintf(id, sizeof id, "load/staging-rss-%s", l);
	if (!r->measured) {
		print_target(id, "SKIP", "%s", r->why);
	} else {
		uint64_t over = r->cold.over > r->warm.over ? r->cold.over : r->warm.over;
		uint64_t limit = ring + 32 * MIB;

		print_target(id, over <= limit ? "PASS" : "MISS",
			     "peak RSS %.1f MiB - model on device %.1f MiB = %.1f MiB (target <= "
			     "ring %.0f MiB + 32 MiB = %.0f MiB)",
			     mib(r->cold.peak > r->warm.peak ? r->cold.peak : r->warm.peak),
			     mib(r->cold.dev_bytes), mib(over), mib(ring), mib(limit));
	}
}
