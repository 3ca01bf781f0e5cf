/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-oom.c - out of memory: PyTorch's message and advice, and the context's pressure callbacks. */
#include "alloc.h"
#include "backend-call.h"

#include <stdio.h>
#include <string.h>

/* ---- out of memory ------------------------------------------------------------ */

/* Sizes as PyTorch's messages write them: bytes up to 1 KiB, then KiB,
 * MiB or GiB with two decimals. */
static void format_mem(uint64_t n, char *buf, size_t size)
{
	if (n <= 1024)
		snprintf(buf, size, _("%llu bytes"), (unsigned long long)n);
	else if (n <= (uint64_t)1 << 20)
		snprintf(buf, size, "%.2f KiB", (double)n / 1024.0);
	else if (n <= (uint64_t)1 << 30)
		snprintf(buf, size, "%.2f MiB", (double)n / 1048576.0);
	else
		snprintf(buf, size, "%.2f GiB", (double)n / 1073741824.0);
}

/* PyTorch's OutOfMemoryError, in its order and units: what was asked
 * for, the device's capacity and free memory, what this process holds,
 * the cap when one is set, what is allocated and what is reserved but
 * unallocated; then only the advice that can help. */
int out_of_memory(struct allocator *a, size_t requested, size_t seg_size, bool capped)
{
	uint64_t free_mem = 0, total = a->dev->info.total_memory;
	uint64_t allocated = (uint64_t)stats_current(a->stats.allocated_bytes);
	uint64_t unused = a->reserved_total - allocated;
	char req[32], fr[32], tot[32], held[32], alloc[32], un[32], cap[160] = "", hint[512] = "";
	char said[600] = "";

	/* A driver that failed for another reason than memory (a lost
	 * device, a context it would not make) is not out of memory: its own
	 * error is the answer. */
	if (a->driver_rc && a->driver_rc != DEVCACHE_ENOMEM)
		return err_set(a->driver_rc, _("%s: cannot allocate %zu bytes: %s"), a->dev->id,
			       requested, a->driver_why);
	a->stats.num_ooms++;
	format_mem(seg_size, req, sizeof req);
	format_mem(allocated, alloc, sizeof alloc);
	format_mem(unused, un, sizeof un);
	if (a->driver_rc)
		snprintf(said, sizeof said, _(" The driver said: %s"), a->driver_why);
	if (a->kind == ALLOC_PINNED)
		return err_set(DEVCACHE_ENOMEM,
			       _("%s: out of pinned host memory. Tried to allocate %s for a request "
				 "of %zu bytes. Of the pinned memory %s is allocated by libdevcache, "
				 "and %s is cached but unallocated.%s"),
			       a->dev->id, req, requested, alloc, un, said);
	if (bk_mem_get_info(a->dev, &free_mem, &total)) {
		/* Taken as none for the advice; the message says why it is unknown. */
		size_t n = strlen(said);

		snprintf(said + n, sizeof said - n, _(" Free memory is unknown: %s"),
			 devcache_last_error());
		snprintf(fr, sizeof fr, _("an unknown amount"));
		free_mem = 0;
		total = a->dev->info.total_memory;
	} else {
		format_mem(free_mem, fr, sizeof fr);
	}
	format_mem(total, tot, sizeof tot);
	format_mem(a->reserved_total, held, sizeof held);
	if (a->fraction_set) {
		char c[32];

		format_mem(a->cap, c, sizeof c);
		snprintf(cap, sizeof cap, _(" %s allowed (memory_fraction);"), c);
	}
	if (seg_size > total)
		snprintf(hint, sizeof hint, _(" The request is larger than the device's memory."));
	else if (capped && a->cap < total && seg_size <= a->cap)
		snprintf(hint, sizeof hint,
			 _(" The memory_fraction cap stopped it: raise memory_fraction "
			   "(devcache.conf(5))."));
	else if (capped && a->cap < total)
		snprintf(hint, sizeof hint,
			 _(" The request is larger than the memory_fraction cap: raise "
			   "memory_fraction (devcache.conf(5))."));
	else if (unused > 0 && unused + free_mem >= seg_size && a->expandable)
		snprintf(hint, sizeof hint,
			 _(" Reserved but unallocated memory would be enough: it is "
			   "fragmented."));
	else if (unused > 0 && unused + free_mem >= seg_size && (a->dev->info.caps & DEVCACHE_CAP_VMM))
		snprintf(hint, sizeof hint,
			 _(" Reserved but unallocated memory would be enough: to avoid this "
			   "fragmentation, try expandable_segments:true (devcache.conf(5))."));
	else if (unused > 0 && unused + free_mem >= seg_size && a->max_split_size == SIZE_MAX)
		snprintf(hint, sizeof hint,
			 _(" Reserved but unallocated memory would be enough: to avoid this "
			   "fragmentation, try max_split_size_mb (devcache.conf(5))."));
	/* PyTorch 2's advice, in this library's words, whatever else was said:
	 * reserved but unallocated memory is large (a fifth of what the cache
	 * holds, at least) and expandable segments could have used it. */
	if (!a->expandable && (a->dev->info.caps & DEVCACHE_CAP_VMM) && unused > 0 &&
	    unused >= a->reserved_total / 5 && !strstr(hint, "expandable_segments")) {
		size_t n = strlen(hint);

		snprintf(hint + n, sizeof hint - n,
			 _(" Reserved but unallocated memory is large: try "
			   "expandable_segments:true to avoid fragmentation."));
	}
	return err_set(DEVCACHE_ENOMEM,
		       _("%s: out of memory. Tried to allocate %s for a request of %zu bytes. The "
			 "device has a total capacity of %s of which %s is free. This process has %s "
			 "in use through libdevcache.%s Of the allocated memory %s is allocated by "
			 "libdevcache, and %s is reserved by libdevcache but unallocated.%s%s"),
		       a->dev->id, req, requested, tot, fr, held, cap, alloc, un, hint, said);
}

int above_limit(struct allocator *a, size_t requested)
{
	char limit[32];

	format_mem(a->max_alloc, limit, sizeof limit);
	return err_set(DEVCACHE_ENOTSUP,
		       _("%s: cannot allocate %zu bytes: the device's largest single allocation is "
			 "%s (%llu bytes)%s"),
		       a->dev->id, requested, limit, (unsigned long long)a->max_alloc,
		       a->dev->info.caps & DEVCACHE_CAP_VMM
			       ? _("; expandable_segments:true (devcache.conf(5)) maps larger "
				   "requests in pages")
			       : "");
}

/* ---- the context's pressure callbacks -------------------------------------- */

size_t call_pressure(devcache_ctx_t *ctx, devcache_device_t *dev, size_t need)
{
	struct pressure_cb cbs[DEVCACHE_MAX_PRESSURE];
	size_t n, freed = 0;

	pthread_mutex_lock(&ctx->lock);
	n = ctx->n_pressure;
	memcpy(cbs, ctx->pressure, n * sizeof *cbs);
	pthread_mutex_unlock(&ctx->lock);
	for (size_t i = 0; i < n; i++)
		freed += cbs[i].fn(cbs[i].user, dev, need);
	return freed;
}

int devcache_pressure_register(devcache_ctx_t *ctx, devcache_pressure_fn fn, void *user)
{
	int rc = 0;

	if (!ctx || !fn)
		return err_set(DEVCACHE_EINVAL, _("devcache_pressure_register: NULL argument"));
	pthread_mutex_lock(&ctx->lock);
	if (ctx->n_pressure == DEVCACHE_MAX_PRESSURE)
		rc = err_set(DEVCACHE_EBUSY, _("devcache_pressure_register: %d callbacks already"),
			     DEVCACHE_MAX_PRESSURE);
	else
		ctx->pressure[ctx->n_pressure++] = (struct pressure_cb){fn, user};
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

int devcache_pressure_unregister(devcache_ctx_t *ctx, devcache_pressure_fn fn, void *user)
{
	int rc = DEVCACHE_ENOENT;

	if (!ctx || !fn)
		return err_set(DEVCACHE_EINVAL, _("devcache_pressure_unregister: NULL argument"));
	pthread_mutex_lock(&ctx->lock);
	for (size_t i = 0; i < ctx->n_pressure; i++)
		if (ctx->pressure[i].fn == fn && ctx->pressure[i].user == user) {
			ctx->pressure[i] = ctx->pressure[--ctx->n_pressure];
			rc = 0;
			break;
		}
	pthread_mutex_unlock(&ctx->lock);
	return rc ? err_set(rc, _("devcache_pressure_unregister: no such callback")) : 0;
}
