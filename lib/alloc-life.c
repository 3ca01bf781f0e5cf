/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-life.c - an allocator made from the tunables and the device, and given back whole. */
#include "alloc.h"
#include "backend-call.h"
#include "trace.h"

#include <stdlib.h>
#include <string.h>

/* ---- creating and destroying allocators -------------------------------------- */

/* What a trace's header says of the device's memory: what its allocator may
 * have, the driver's free memory before it allocates anything (a GPU's
 * context and other programs take the rest); its total where that is
 * unknown. */
static uint64_t trace_device_memory(struct devcache_device *dev)
{
	uint64_t free_mem = 0, total = 0;

	if (bk_mem_get_info(dev, &free_mem, &total) == 0 && free_mem)
		return free_mem;
	return dev->info.total_memory;
}

/* Devices whose trace names expand to one file share it: the context owns
 * every open trace, and an allocator only borrows one. */
static int open_trace(struct allocator *a)
{
	devcache_ctx_t *ctx = a->dev->ctx;
	const char *name = tun_get(&ctx->tun, trace);
	char *path = NULL;
	int rc;

	if (!name || !*name || a->kind == ALLOC_PINNED)
		return 0;
	if ((rc = trace_expand(name, a->dev->id, &path)))
		return rc;
	pthread_mutex_lock(&ctx->lock);
	for (size_t i = 0; i < ctx->n_traces && !a->trace; i++)
		if (strcmp(trace_path(ctx->traces[i]), path) == 0) {
			a->trace = ctx->traces[i];
			trace_add_device(a->trace, a->dev->id);
		}
	if (!a->trace) {
		struct trace **grown = realloc(ctx->traces, (ctx->n_traces + 1) * sizeof *grown);

		if (!grown)
			rc = err_oom();
		else if ((ctx->traces = grown,
			  rc = trace_open(&a->trace, name, a->dev->id, trace_device_memory(a->dev),
					  &ctx->log)) == 0)
			ctx->traces[ctx->n_traces++] = a->trace;
	}
	pthread_mutex_unlock(&ctx->lock);
	free(path);
	return rc;
}

int allocator_create(struct devcache_device *dev, enum alloc_kind kind, struct allocator **a_p)
{
	const struct tunable_set *t = &dev->ctx->tun;
	struct allocator *a = calloc(1, sizeof *a);
	uint64_t total;
	int rc;

	if (!a)
		return err_oom();
	dc_lock_init(&a->lock);
	a->dev = dev;
	a->kind = kind;
	a->caching = tun_get(t, caching);
	a->max_split_size = tun_unlimited(t, max_split_size_mb, SIZE_MAX);
	a->max_non_split_rounding = tun_get(t, max_non_split_rounding_mb);
	a->large_segment_size = round_up(tun_get(t, large_segment_size_mb), ALLOC_ROUND_LARGE);
	memcpy(a->divisions, tun_get(t, roundup_power2_divisions).divisions, sizeof a->divisions);
	a->plain_rounding = a->caching;
	for (int i = 0; i < DIVISION_INTERVALS; i++)
		a->plain_rounding &= a->divisions[i] <= 1;
	a->gc_threshold = tun_get(t, garbage_collection_threshold);
	/* PyTorch's set_fraction: any memory_fraction given, 1 included. */
	a->fraction_set = tunable_is_set(t, TUN_memory_fraction);
	a->gc_active = a->gc_threshold > 0 && a->fraction_set && kind == ALLOC_DEVICE;
	if (a->gc_threshold > 0 && !a->fraction_set && kind == ALLOC_DEVICE)
		log_msg(&dev->ctx->log, DEVCACHE_LOG_WARNING,
			_("%s: garbage_collection_threshold does nothing without memory_fraction, "
			  "as in PyTorch"),
			dev->id);
	/* The total the backend gave at start-up: asking the driver again
	 * (cuMemGetInfo) would make every device's context at devcache_open(),
	 * where a context costs device memory and only the devices used need one. */
	total = dev->info.total_memory;
	a->cap = kind == ALLOC_PINNED ? UINT64_MAX
				      : (uint64_t)(tun_get(t, memory_fraction) * (double)total);
	if (tun_get(t, expandable_segments) && kind == ALLOC_DEVICE && a->caching) {
		size_t g = 0;
		int grc;

		if (!(dev->info.caps & DEVCACHE_CAP_VMM)) {
			log_msg(&dev->ctx->log, DEVCACHE_LOG_WARNING,
				_("%s: expandable_segments is set, but the device cannot map memory; "
				  "it gets ordinary segments"),
				dev->id);
		} else if ((grc = bk_vm_granularity(dev, &g)) || !g || (g & (g - 1))) {
			log_msg(&dev->ctx->log, DEVCACHE_LOG_WARNING,
				_("%s: expandable_segments is set, but the driver gives no usable "
				  "mapping granularity; the device gets ordinary segments"),
				dev->id);
			/* And why, in the driver's words, where it failed. */
			if (grc)
				log_msg(&dev->ctx->log, DEVCACHE_LOG_WARNING, "%s",
					devcache_last_error());
		} else {
			a->expandable = true;
			a->stitching = tun_get(t, expandable_stitching);
			a->vm_granularity = g;
			a->vm_space = (size_t)(total + total / 8);
		}
	}
	/* Expandable segments map pages: the driver's limit on one allocation
	 * does not apply to them. */
	a->max_alloc = kind == ALLOC_PINNED || a->expandable || device_max_alloc(dev) >= total
			       ? SIZE_MAX
			       : (size_t)device_max_alloc(dev);
	if ((rc = open_trace(a))) {
		allocator_destroy(a);
		return rc;
	}
	if (tun_get(t, thread_cache))
		tcache_init(a);
	*a_p = a;
	return 0;
}

size_t alloc_max_request(const devcache_device_t *dev)
{
	return dev->alloc->max_alloc;
}

void allocator_destroy(struct allocator *a)
{
	if (!a)
		return;
	tcache_fini(a);
	if (a->events_head)
		process_events(a, true);
	size_t live = 0;
	for (size_t i = 0; i < a->n_pools; i++)
		live += table_count(a->pools[i]);
	if (live)
		log_msg(&a->dev->ctx->log, DEVCACHE_LOG_WARNING,
			P_("%s: %zu block still allocated when the context closed",
			   "%s: %zu blocks still allocated when the context closed", live),
			a->dev->id, live);
	/* Whatever is left, live blocks included, goes back to the driver. */
	while (a->segments) {
		struct segment *seg = a->segments;

		a->segments = seg->snext;
		if (seg->expandable)
			expandable_destroy(a, seg);
		else
			alloc_driver_free(a, seg->handle);
		free(seg);
	}
	for (size_t i = 0; i < a->n_pools; i++) {
		struct stream_pool *p = a->pools[i];

		for (size_t k = 0; k < p->spares.n_slabs; k++)
			free(p->spares.slabs[k]);
		free(p->spares.slabs);
		free(p->table);
		free(p);
	}
	free(a->pools);
	free(a);
}
