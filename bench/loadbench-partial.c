/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* loadbench-partial.c - bench/loadbench's partial-load figures: the 4G model onto the bench device with a budget of half its size. */
#include <config.h>

#include <string.h>

#include "loadbench.h"

/* One partial load onto benchdev:0: peak RSS over it, less the device
 * bytes the load says it placed (benchdev's memory is host memory). */
static bool partial_load(devcache_ctx_t *ctx, devcache_device_t *dev, const struct model *m,
			 struct partial_result *r, struct figure *f)
{
	devcache_load_args_t args = { 0 };
	devcache_model_t *model;
	uint64_t peak;
	double t0;
	bool ok;

	args.struct_size = sizeof args;
	args.result = &r->res;
	peak_start();
	t0 = now_seconds();
	ok = try_load(ctx, m->path, dev, &args, &model);
	double t = now_seconds() - t0;

	peak = peak_end();
	if (!ok)
		return false;
	record(f, t, peak);
	f->dev_bytes = r->res.device_bytes;
	if (peak > r->res.device_bytes && peak - r->res.device_bytes > f->over)
		f->over = peak - r->res.device_bytes;
	if (devcache_model_info(model, &r->info))
		ok = fault("devcache_model_info(%s) failed: %s", m->path, devcache_last_error());
	else if (r->res.hit || !r->info.partial || !r->res.device_bytes || !r->res.host_bytes ||
		 r->res.device_bytes > r->budget)
		ok = fault("the load of %s with partial_loading:true and max_cache_vram:%llu is not "
			   "a partial miss within the budget: hit %d, partial %d, device bytes %llu, "
			   "host bytes %llu", m->path, (unsigned long long)r->budget, r->res.hit,
			   r->info.partial, (unsigned long long)r->res.device_bytes,
			   (unsigned long long)r->res.host_bytes);
	else if (!staged_matches(model))
		ok = fault("the partially loaded copy of %s differs from the file", m->path);
	devcache_model_release(model);
	return ok;
}

/* The whole model onto benchdev:0 with a budget of half its size, in a
 * fresh context each run: into fresh device memory, then after evicting
 * it into the tensors' blocks the allocator kept cached. */
void measure_partial(const struct model *m, struct partial_result *r)
{
	double t0 = now_seconds();
	char opts[128];

	memset(r, 0, sizeof *r);
	r->budget = m->size / 2;
	snprintf(opts, sizeof opts, "partial_loading:true,max_cache_vram:%llu",
		 (unsigned long long)r->budget);
	printf("\n-- partial %s: %s onto benchdev:0 with %s (half the file, %.1f MiB)\n",
	       m->l->label, m->file, opts, mib(r->budget));
	if (!warm_beside_copy(m, r->why, sizeof r->why))
		return;
	for (int i = 0; i < reps; i++) {
		devcache_ctx_t *ctx = open_ctx(opts);
		devcache_device_t *dev = device(ctx, "benchdev:0");
		bool ok = partial_load(ctx, dev, m, r, &r->cold);

		if (ok && devcache_cache_evict_all(ctx) != 1)
			ok = fault("%s (partial) was not evicted", m->path);
		ok = ok && partial_load(ctx, dev, m, r, &r->warm);
		devcache_close(ctx);
		if (!ok) {
			snprintf(r->why, sizeof r->why, "%s", load_error);
			printf("FAILED  %s\n", r->why);
			return;
		}
	}
	r->measured = true;
	print_head("upload");
	print_row("partial load onto benchdev:0, fresh memory", &r->cold, r->res.device_bytes, NULL);
	print_row("partial load onto benchdev:0, memory cached", &r->warm, r->res.device_bytes, NULL);
	printf("placed: device bytes %.1f MiB (%zu of %zu tensors, each its own allocation), host "
	       "bytes %.1f MiB (the file's mapping); read %.1f MiB, uploaded %.1f MiB\n",
	       mib(r->res.device_bytes), r->info.device_tensors, r->info.tensors,
	       mib(r->res.host_bytes), mib(r->res.bytes_read), mib(r->res.bytes_uploaded));
	printf("partial loads: peak RSS less the device bytes (counted in RSS on benchdev): "
	       "%.1f MiB into fresh memory, %.1f MiB into cached memory\n", mib(r->cold.over),
	       mib(r->warm.over));
	printf("(these figures took %.0f s)\n", now_seconds() - t0);
}

void partial_targets(const struct model *m, const struct partial_result *r, uint64_t ring)
{
	char id[64];

	snprintf(id, sizeof id, "load/partial-rss-%s", m->l->label);
	if (!r->measured) {
		print_target(id, "SKIP", "%s", r->why);
		return;
	}
	uint64_t over = r->cold.over > r->warm.over ? r->cold.over : r->warm.over;
	uint64_t limit = ring + 32 * MIB;

	print_target(id, over <= limit ? "PASS" : "MISS",
		     "peak RSS %.1f MiB - device bytes %.1f MiB = %.1f MiB (target <= ring %.0f MiB "
		     "+ 32 MiB = %.0f MiB, as for a whole model)",
		     mib(r->cold.peak > r->warm.peak ? r->cold.peak : r->warm.peak),
		     mib(r->cold.dev_bytes), mib(over), mib(ring), mib(limit));
}
