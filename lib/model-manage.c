/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-manage.c - the model cache driven model by model: what it holds, evict, offload, make room, locks with working memory, the cache's share of a device. */
#include "model-cache.h"
#include "model-file.h"

#include <stdlib.h>
#include <string.h>

/*
 * What a model manager (InvokeAI's ModelCache, say) needs beside loads.
 * Every call takes the cache's lock, so each is atomic with respect to
 * loads, releases and the others; the slow parts (a RAM copy, mapping a
 * model's files) run as evictions and loads run them.  A model is named
 * by its handle (the caller holds it) or by its key, the path a load
 * would find it by and the device: an unlocked model has no handle the
 * caller may use.
 */

/* ---- what the cache holds ------------------------------------------------------- */

static uint64_t tensor_bytes(const devcache_model_file_t *mf)
{
	uint64_t n = 0;

	for (size_t i = 0; i < mf->n_tensors; i++)
		n += mf->tensors[i].size;
	return n;
}

static void describe(const struct devcache_model *m, devcache_cached_model_t *d)
{
	uint64_t all = tensor_bytes(m->mf);
	size_t n;

	d->device = m->dev;
	d->writable = m->writable;
	d->locks = m->locks;
	d->loading = m->state == ENTRY_LOADING;
	d->size = m->mf->size;
	d->working_mem = m->working_total;
	d->hits = m->hits;
	d->last_use = m->last_use;
	if (m->partial) {
		d->where = DEVCACHE_RESIDENCE_PARTIAL;
		/* dev_ptr is published when the load commits. */
		d->device_bytes = m->state == ENTRY_READY ? partial_device_bytes(m, &n) : 0;
		d->charged_device = m->bytes;
		d->charged_ram = m->host_charge;
	} else if (m->ram_copy) {
		d->where = DEVCACHE_RESIDENCE_RAM_COPY;
		d->charged_ram = m->bytes;
	} else if (mc_is_host(m->dev)) {
		d->where = DEVCACHE_RESIDENCE_HOST;
		d->charged_ram = m->bytes;
	} else {
		d->where = DEVCACHE_RESIDENCE_DEVICE;
		d->device_bytes = all;
		d->charged_device = m->bytes;
	}
	d->host_bytes = all - d->device_bytes;
}

int devcache_cache_models(devcache_ctx_t *ctx, devcache_cached_model_t **models_p, size_t *n_p)
{
	struct model_cache *c;
	devcache_cached_model_t *list = NULL;
	size_t n = 0, k = 0;
	int rc;

	if (!ctx || !models_p || !n_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_cache_models: NULL argument"));
	*models_p = NULL;
	*n_p = 0;
	if ((rc = mc_get_cache(ctx, &c)))
		return rc;
	pthread_mutex_lock(&c->lock);
	for (struct devcache_model *m = c->head; m; m = m->next)
		n++;
	if (!(list = calloc(n ? n : 1, sizeof *list)))
		rc = err_oom();
	for (struct devcache_model *m = c->head; rc == 0 && m; m = m->next, k++) {
		describe(m, &list[k]);
		if (!(list[k].path = strdup(m->mf->path)))
			rc = err_oom();
	}
	pthread_mutex_unlock(&c->lock);
	if (rc) {
		devcache_cache_models_free(list, k);
		return rc;
	}
	*models_p = list;
	*n_p = n;
	return 0;
}

void devcache_cache_models_free(devcache_cached_model_t *models, size_t n)
{
	for (size_t i = 0; models && i < n; i++)
		free((char *)models[i].path);
	free(models);
}

/* ---- the cache's share of a device ------------------------------------------------ */

/* The device allocations of the cache's models on dev, in a new array. */
static int device_blocks(struct model_cache *c, const devcache_device_t *dev, void ***ptrs_p,
			 size_t *n_p)
{
	size_t n = 0, k = 0;
	void **ptrs;

	for (struct devcache_model *m = c->head; m; m = m->next)
		if (m->dev == dev)
			n += m->partial ? m->mf->n_tensors : m->n_chunks;
	if (!(ptrs = calloc(n ? n : 1, sizeof *ptrs)))
		return err_oom();
	for (struct devcache_model *m = c->head; m; m = m->next) {
		if (m->dev != dev || m->state != ENTRY_READY)
			continue;
		for (size_t i = 0; m->partial && i < m->mf->n_tensors; i++)
			if (m->dev_ptr[i])
				ptrs[k++] = m->dev_ptr[i];
		for (size_t i = 0; !m->partial && i < m->n_chunks; i++)
			if ((ptrs[k] = chunks_base(m, i)))
				k++;
	}
	*ptrs_p = ptrs;
	*n_p = k;
	return 0;
}

int devcache_cache_device_stats(devcache_ctx_t *ctx, devcache_device_t *dev,
				devcache_cache_device_stats_t *stats)
{
	struct model_cache *c;
	int rc;

	if (!ctx || !dev || !stats)
		return err_set(DEVCACHE_EINVAL, _("devcache_cache_device_stats: NULL argument"));
	if (dev->ctx != ctx)
		return err_set(DEVCACHE_EINVAL,
			       _("devcache_cache_device_stats: %s belongs to another context"), dev->id);
	if ((rc = mc_get_cache(ctx, &c)))
		return rc;
	memset(stats, 0, sizeof *stats);
	pthread_mutex_lock(&c->lock);
	stats->used = *mc_used_of(c, dev);
	stats->budget = mc_budget_of(c, dev);
	stats->peak_used = mc_is_host(dev) ? c->stats.ram_peak : c->vram_peak[mc_dev_index(c, dev)];
	for (struct devcache_model *m = c->head; m; m = m->next)
		if (m->dev == dev)
			stats->working_mem += m->working_total;
	for (struct devcache_model *m = c->gone_head; m; m = m->next)
		if (m->dev == dev)
			stats->working_mem += m->working_total;
	if (!mc_is_host(dev)) {
		void **ptrs = NULL;
		size_t n = 0;

		if ((rc = device_blocks(c, dev, &ptrs, &n)) == 0)
			rc = alloc_share(dev, ptrs, n, &stats->allocated_bytes, &stats->reserved_bytes);
		free(ptrs);
	}
	pthread_mutex_unlock(&c->lock);
	if (rc == 0 && !mc_is_host(dev)) {
		devcache_stats_t all;

		devcache_stats(dev, &all);
		stats->device_allocated_bytes = all.allocated_bytes[DEVCACHE_POOL_ALL].current;
		stats->device_reserved_bytes = all.reserved_bytes[DEVCACHE_POOL_ALL].current;
	}
	return rc;
}

/* ---- evict, offload ----------------------------------------------------------------- */

static int key_args(devcache_ctx_t *ctx, const char *path, devcache_device_t *dev, const char *fn,
		    struct model_cache **c_p)
{
	if (!ctx || !path || !dev)
		return err_set(DEVCACHE_EINVAL, _("%s: NULL argument"), fn);
	if (dev->ctx != ctx)
		return err_set(DEVCACHE_EINVAL, _("%s: %s belongs to another context"), fn, dev->id);
	return mc_get_cache(ctx, c_p);
}

/* Evict m: dropped now if unlocked, forgotten (freed at its last
 * release) otherwise.  Called with the cache locked. */
static void evict_one(struct model_cache *c, struct devcache_model *m)
{
	if (m->forgotten)
		return;
	if (m->locks) {
		mc_forget(c, m);
	} else {
		c->stats.evictions++;
		mc_drop(c, m);
	}
}

int devcache_cache_evict(devcache_ctx_t *ctx, const char *path, devcache_device_t *dev)
{
	struct model_cache *c;
	struct devcache_model *m;
	int rc;

	if ((rc = key_args(ctx, path, dev, "devcache_cache_evict", &c)))
		return rc;
	pthread_mutex_lock(&c->lock);
	if ((rc = mc_find_key(c, path, dev, &m)) == 0)
		evict_one(c, m);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int devcache_model_evict(devcache_model_t *m)
{
	if (!m)
		return err_set(DEVCACHE_EINVAL, _("devcache_model_evict: NULL argument"));
	struct model_cache *c = m->cache;
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	/* Another thread that holds it may be moving its tensors. */
	while (m->state != ENTRY_READY)
		pthread_cond_wait(&c->ready, &c->lock);
	if (m->locks == 0)
		rc = err_set(DEVCACHE_EINVAL, _("devcache_model_evict: %s is not locked: load it first"),
			     m->mf->path);
	else
		evict_one(c, m);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* Offload a ready, unlocked m from its device.  Called with the cache
 * locked. */
static int offload(struct model_cache *c, struct devcache_model *m)
{
	char need_s[32], budget_s[32];
	int rc;

	if (mc_is_host(m->dev))
		return err_set(DEVCACHE_EINVAL,
			       _("devcache_cache_offload: %s is placed on the host: there is "
				 "nothing to offload (devcache_cache_evict() drops it)"),
			       m->mf->path);
	if (m->ram_copy)
		return 0;
	if (m->partial) {
		partial_offload(c, m);
		return 0;
	}
	/* Its files' mapping instead of a copy, as keep_ram_copy says. */
	if (!tun_get(&c->ctx->tun, keep_ram_copy))
		return partial_from_whole(c, m);
	/* Room in RAM first, as a load makes it. */
	for (size_t i = 0; i < c->ctx->n_devices; i++)
		if (mc_is_host(&c->ctx->devices[i]))
			mc_evict_for(c, &c->ctx->devices[i], m->bytes, 0);
	if ((rc = mc_keep_in_ram(c, m)) != DEVCACHE_ENOMEM || c->ram_used + m->bytes <= c->ram_budget)
		return rc;
	format_bytes(m->bytes, need_s, sizeof need_s);
	format_bytes(c->ram_budget, budget_s, sizeof budget_s);
	return err_set(DEVCACHE_ENOMEM,
		       _("%s: a RAM copy needs %s, more than the cache's budget there "
			 "(max_cache_ram, %s) has free"),
		       m->mf->path, need_s, budget_s);
}

int devcache_cache_offload(devcache_ctx_t *ctx, const char *path, devcache_device_t *dev)
{
	struct model_cache *c;
	struct devcache_model *m;
	int rc;

	if ((rc = key_args(ctx, path, dev, "devcache_cache_offload", &c)))
		return rc;
	pthread_mutex_lock(&c->lock);
	if ((rc = mc_find_key(c, path, dev, &m)) == 0) {
		if (m->locks)
			rc = err_set(DEVCACHE_EBUSY,
				     P_("%s: locked on %s (%d lock): its tensors are in use, so "
					"it stays where it is",
					"%s: locked on %s (%d locks): its tensors are in use, so "
					"it stays where it is",
					(unsigned long)m->locks),
				     path, dev->id, m->locks);
		else
			rc = offload(c, m);
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* ---- make room -------------------------------------------------------------------- */

/* Free memory on dev as the model cache sees it: the driver's, and with
 * keep_freed_vram the allocator's cached free bytes too. */
static uint64_t device_free(devcache_device_t *dev)
{
	devcache_device_info_t info;
	uint64_t free_bytes;

	if (devcache_device_info(dev, &info)) {
		log_msg(&dev->ctx->log, DEVCACHE_LOG_WARNING,
			_("devcache_cache_make_room: %s; the cache's budget alone counts"),
			devcache_last_error());
		return UINT64_MAX;
	}
	free_bytes = info.free_memory;
	if (tun_get(&dev->ctx->tun, keep_freed_vram)) {
		devcache_stats_t s;

		devcache_stats(dev, &s);
		free_bytes += s.reserved_bytes[DEVCACHE_POOL_ALL].current -
			      s.allocated_bytes[DEVCACHE_POOL_ALL].current;
	}
	return free_bytes;
}

int devcache_cache_make_room(devcache_ctx_t *ctx, devcache_device_t *dev, uint64_t bytes,
			     uint64_t *freed_p)
{
	struct model_cache *c;
	uint64_t freed = 0;
	int rc;

	if (freed_p)
		*freed_p = 0;
	if ((rc = key_args(ctx, "", dev, "devcache_cache_make_room", &c)))
		return rc;
	pthread_mutex_lock(&c->lock);
	uint64_t used = *mc_used_of(c, dev), budget = mc_budget_of(c, dev);
	uint64_t in_budget = used < budget ? budget - used : 0;
	uint64_t want = bytes > in_budget ? bytes - in_budget : 0;

	if (!mc_is_host(dev)) {
		uint64_t on_device = device_free(dev);

		if (bytes > on_device && bytes - on_device > want)
			want = bytes - on_device;
	}
	uint64_t can = mc_evictable(c, dev);
	if (bytes > budget || want > can) {
		char bytes_s[32], can_s[32], budget_s[32];

		format_bytes(bytes, bytes_s, sizeof bytes_s);
		format_bytes(can, can_s, sizeof can_s);
		format_bytes(budget, budget_s, sizeof budget_s);
		rc = err_set(DEVCACHE_ENOMEM,
			     _("devcache_cache_make_room: %s on %s cannot be made free: the "
			       "cache's budget there (%s) is %s, and the unlocked models "
			       "hold %s; nothing was moved"),
			     bytes_s, dev->id, mc_is_host(dev) ? "max_cache_ram" : "max_cache_vram",
			     budget_s, can_s);
	} else if (want) {
		freed = mc_evict_for(c, dev, 0, want);
	}
	pthread_mutex_unlock(&c->lock);
	if (freed_p)
		*freed_p = freed;
	return rc;
}

/* ---- locks with working memory ------------------------------------------------------ */

int devcache_model_lock(devcache_model_t *m, uint64_t working_mem)
{
	if (!m)
		return err_set(DEVCACHE_EINVAL, _("devcache_model_lock: NULL argument"));
	struct model_cache *c = m->cache;
	uint64_t *used = mc_used_of(c, m->dev), budget = mc_budget_of(c, m->dev);
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	if (m->locks == 0 || m->forgotten) {
		rc = err_set(DEVCACHE_EINVAL,
			     _("devcache_model_lock: %s is not held: load it first"), m->mf->path);
		goto out;
	}
	if (working_mem) {
		mc_evict_for(c, m->dev, working_mem, 0);
		if (*used + working_mem > budget || *used + working_mem < working_mem) {
			char need_s[32], budget_s[32];

			format_bytes(working_mem, need_s, sizeof need_s);
			format_bytes(budget, budget_s, sizeof budget_s);
			c->stats.failed_loads++;
			rc = err_set(DEVCACHE_ENOMEM,
				     _("%s: working memory of %s on %s does not fit the cache's "
				       "budget there (%s, %s) beside locked models, which hold "
				       "%llu bytes of it"),
				     m->mf->path, need_s, m->dev->id,
				     mc_is_host(m->dev) ? "max_cache_ram" : "max_cache_vram", budget_s,
				     (unsigned long long)*used);
			goto out;
		}
		if (m->n_working == m->working_cap) {
			size_t cap = m->working_cap ? 2 * m->working_cap : 4;
			uint64_t *grown = realloc(m->working, cap * sizeof *grown);

			if (!grown) {
				rc = err_oom();
				goto out;
			}
			m->working = grown;
			m->working_cap = cap;
		}
		m->working[m->n_working++] = working_mem;
		m->working_total += working_mem;
		*used += working_mem;
		mc_peaks(c);
	}
	m->locks++;
	m->last_use = mc_now();
out:
	pthread_mutex_unlock(&c->lock);
	return rc;
}
