/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-info.c - what the model cache and its models say of themselves: where a model's bytes are, its tensors, the cache's statistics and summary. */
#include "model-cache.h"
#include "model-file.h"

#include <stdio.h>
#include <string.h>

/* The tensor bytes of a model, all on its device or all on the host. */
static uint64_t tensor_bytes(const devcache_model_file_t *mf)
{
	uint64_t n = 0;

	for (size_t i = 0; i < mf->n_tensors; i++)
		n += mf->tensors[i].size;
	return n;
}

/* Where the bytes are: a partial model's split, all on the device, or all
 * on the host (the host device's too). */
static void shares(const struct devcache_model *m, uint64_t *dev_p, uint64_t *host_p,
		   size_t *dev_tensors_p)
{
	uint64_t all = tensor_bytes(m->mf);

	if (m->partial) {
		*dev_p = partial_device_bytes(m, dev_tensors_p);
	} else if (mc_is_host(m->dev) || m->ram_copy) {
		*dev_p = 0;
		*dev_tensors_p = 0;
	} else {
		*dev_p = all;
		*dev_tensors_p = m->mf->n_tensors;
	}
	*host_p = all - *dev_p;
}

int devcache_model_info(const devcache_model_t *m, devcache_model_info_t *info)
{
	if (!m || !info)
		return err_set(DEVCACHE_EINVAL, _("devcache_model_info: NULL argument"));
	struct model_cache *c = m->cache;

	memset(info, 0, sizeof *info);
	pthread_mutex_lock(&c->lock);
	info->device = m->dev;
	info->tensors = m->mf->n_tensors;
	info->partial = m->partial;
	info->locks = m->locks;
	shares(m, &info->device_bytes, &info->host_bytes, &info->device_tensors);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

const devcache_model_file_t *devcache_model_file(const devcache_model_t *m)
{
	return m ? m->mf : NULL;
}

int devcache_model_tensor_at(const devcache_model_t *m, size_t index, devcache_tensor_info_t *info,
			     void **data_p)
{
	if (!m || !info || !data_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_model_tensor_at: NULL argument"));
	if (devcache_model_file_tensor(m->mf, index, info))
		return DEVCACHE_ENOENT;
	/* Another thread that holds the model may be moving its tensors, or
	 * moving the whole model to the host. */
	pthread_mutex_lock(&m->cache->lock);
	if (m->partial) {
		*data_p = partial_tensor(m, index, &info->place);
	} else if (m->maps) {
		*data_p = mc_host_tensor(m, index);
		info->place = DEVCACHE_PLACE_HOST;
	} else {
		*data_p = chunks_tensor(m, index);
		info->place = DEVCACHE_PLACE_DEVICE;
	}
	info->align = mf_align_of((uintptr_t)*data_p);
	if (info->place == DEVCACHE_PLACE_HOST && m->maps)
		info->flags = m->aligned && m->aligned[index] ? DEVCACHE_TENSOR_ALIGNED_COPY
			      : tun_get(&m->dev->ctx->tun, mmap) ? DEVCACHE_TENSOR_MAPPED
								 : 0;
	pthread_mutex_unlock(&m->cache->lock);
	/* A host tensor is the file's mapping: no pointer into a file that
	 * changed under it. */
	if (info->place == DEVCACHE_PLACE_HOST && m->maps) {
		int rc = guard_check_part(m, info->shard);

		if (rc)
			*data_p = NULL;
		return rc;
	}
	return 0;
}

int devcache_model_tensor(const devcache_model_t *m, const char *name, devcache_tensor_info_t *info,
			  void **data_p)
{
	if (!m || !name || !info || !data_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_model_tensor: NULL argument"));
	long i = mf_index(m->mf, name);
	if (i < 0)
		return err_set(DEVCACHE_ENOENT, _("%s: no tensor named '%s'"), m->mf->path, name);
	return devcache_model_tensor_at(m, (size_t)i, info, data_p);
}

int devcache_cache_stats(devcache_ctx_t *ctx, devcache_cache_stats_t *stats)
{
	struct model_cache *c;
	int rc;

	if (!ctx || !stats)
		return err_set(DEVCACHE_EINVAL, _("devcache_cache_stats: NULL argument"));
	if ((rc = mc_get_cache(ctx, &c)))
		return rc;
	pthread_mutex_lock(&c->lock);
	*stats = c->stats;
	stats->ram_used = c->ram_used;
	stats->ram_budget = c->ram_budget;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int devcache_cache_device_usage(devcache_ctx_t *ctx, devcache_device_t *dev, uint64_t *used_p,
				uint64_t *budget_p)
{
	struct model_cache *c;
	int rc;

	if (!ctx || !dev || !used_p || !budget_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_cache_device_usage: NULL argument"));
	if ((rc = mc_get_cache(ctx, &c)))
		return rc;
	pthread_mutex_lock(&c->lock);
	*used_p = *mc_used_of(c, dev);
	*budget_p = mc_budget_of(c, dev);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* "  label" padded to the summary's first column, in characters (UTF-8),
 * so that translated labels line up too. */
static void put_label(FILE *out, const char *label)
{
	size_t width = 0;

	for (const char *p = label; *p; p++)
		width += ((unsigned char)*p & 0xc0) != 0x80;
	fprintf(out, "  %s%*s", label, width < 11 ? (int)(11 - width) : 1, "");
}

int devcache_cache_summary(devcache_ctx_t *ctx, FILE *out)
{
	struct model_cache *c;
	char a[32], b[32], d[32];
	int rc;

	if (!ctx || !out)
		return err_set(DEVCACHE_EINVAL, _("devcache_cache_summary: NULL argument"));
	if ((rc = mc_get_cache(ctx, &c)))
		return rc;
	pthread_mutex_lock(&c->lock);
	const devcache_cache_stats_t *s = &c->stats;
	/* A label and a count on each line, so that no count needs a plural
	 * and each line fits 80 columns. */
	fprintf(out, "%s\n", _("Model cache"));
	put_label(out, _("models"));
	fprintf(out, _("%llu (%llu locked, %llu kept in RAM)\n"), (unsigned long long)s->models,
		(unsigned long long)s->locked_models, (unsigned long long)s->ram_copies);
	put_label(out, _("hits"));
	fprintf(out, _("%llu (%llu from RAM)\n"), (unsigned long long)s->hits,
		(unsigned long long)s->ram_copy_reloads);
	put_label(out, _("misses"));
	fprintf(out, _("%llu (%llu failed, %llu cancelled)\n"), (unsigned long long)s->misses,
		(unsigned long long)s->failed_loads, (unsigned long long)s->cancelled_loads);
	put_label(out, _("evictions"));
	fprintf(out, "%llu\n", (unsigned long long)s->evictions);
	format_bytes(s->bytes_read, a, sizeof a);
	format_bytes(s->bytes_uploaded, b, sizeof b);
	put_label(out, _("loading"));
	fprintf(out, _("%s read from files, %s uploaded, %.3f s\n"), a, b, s->load_seconds);
	format_bytes(c->ram_used, a, sizeof a);
	format_bytes(c->ram_budget, b, sizeof b);
	put_label(out, "RAM");
	fprintf(out, _("%s of %s (max_cache_ram)\n"), a, b);
	for (size_t i = 0; i < ctx->n_devices; i++) {
		if (mc_is_host(&ctx->devices[i]))
			continue;
		format_bytes(c->vram_used[i], a, sizeof a);
		format_bytes(c->vram_budget[i], b, sizeof b);
		put_label(out, ctx->devices[i].id);
		fprintf(out, _("%s of %s (max_cache_vram)\n"), a, b);
	}
	if (c->head)
		fprintf(out, "  %-10s %10s %5s  %s\n", _("device"), _("size"), _("locks"), _("file"));
	/* Most recently used first: the last lines go first when room is needed. */
	for (struct devcache_model *m = c->head; m; m = m->next) {
		char share[128] = "", line[4352];

		format_bytes(m->bytes, d, sizeof d);
		if (m->partial) {
			uint64_t on_dev, on_host;
			size_t n;

			shares(m, &on_dev, &on_host, &n);
			format_bytes(on_dev, a, sizeof a);
			format_bytes(on_dev + on_host, b, sizeof b);
			snprintf(share, sizeof share, _(" (partial: %s of %s on %s)"), a, b, m->dev->id);
		}
		/* The path is the caller's, from input: shown as messages show it. */
		msg_format(line, sizeof line, "  %-10s %10s %5d  %s%s%s%s%s\n",
			   m->ram_copy ? "RAM" : m->dev->id, d, m->locks, m->mf->path, share,
			   m->writable ? _(" (writable)") : "",
			   m->state == ENTRY_LOADING ? _(" (loading)") : "",
			   guard_changed(m) ? _(" (file changed while mapped)") : "");
		fputs(line, out);
	}
	pthread_mutex_unlock(&c->lock);
	return ferror(out) ? err_set(DEVCACHE_EIO, _("devcache_cache_summary: write error")) : 0;
}
