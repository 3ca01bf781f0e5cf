/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-cache.c - caching loaded models within RAM and VRAM budgets: the budgets, the list of models, eviction (to a RAM copy or out) and the cache's life. */
#include "model-cache.h"
#include "model-file.h"

#include <fcntl.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/*
 * One cache a context, made on first use.  Its models are on one list,
 * most recently used first, each charged to one budget: RAM for host
 * placements and RAM copies, its device's otherwise (a partial model's
 * files to RAM as well).  Eviction takes unlocked, ready models from the
 * least recently used end; a device model becomes a RAM copy where
 * keep_ram_copy and the RAM budget allow.  c->lock guards the list, the
 * charges and the statistics; the slow parts of a load run without it.
 *
 * The files: model-cache.c the budgets, the list, eviction and the
 * cache's life, model-load.c a load from lookup to commit, model-place.c
 * a new model's bytes on the host or a device, model-chunks.c a model in
 * one device allocation or several, model-partial.c models larger than
 * their device's budget, model-guard.c mapped files that another process
 * shrinks or rewrites, model-read.c a tensor's bytes copied out, model-info.c what the cache
 * and its models say of themselves, model-manage.c the calls that drive
 * it model by model (evict, offload, make room, working memory).
 *
 * Device memory the cache frees goes back to the driver (mc_dev_free())
 * unless keep_freed_vram; a model that leaves the cache is unmapped and,
 * with evict_page_cache, its files' pages dropped (entry_unmap()).  A
 * model evicted while locked is forgotten: off the list, on the gone
 * list, still charged, until its last release frees it.
 */

bool mc_is_host(const devcache_device_t *dev)
{
	return dev->info.caps & DEVCACHE_CAP_HOST_MEMORY;
}

size_t mc_dev_index(const struct model_cache *c, const devcache_device_t *dev)
{
	return (size_t)(dev - c->ctx->devices);
}

/* ---- budgets ------------------------------------------------------------------ */

/* device_working_mem's auto rule: a tenth of the device, at least 512 MiB
 * and at most half of it. */
static uint64_t working_mem(const devcache_ctx_t *ctx, uint64_t total)
{
	uint64_t w = total / 10;

	if (w < (512ull << 20))
		w = 512ull << 20;
	if (w > total / 2)
		w = total / 2;
	return tun_auto(&ctx->tun, device_working_mem, w);
}

static int cache_create(devcache_ctx_t *ctx, struct model_cache **c_p)
{
	struct model_cache *c = calloc(1, sizeof *c);

	if (!c || !(c->vram_used = calloc(ctx->n_devices, sizeof *c->vram_used)) ||
	    !(c->vram_budget = calloc(ctx->n_devices, sizeof *c->vram_budget)) ||
	    !(c->vram_peak = calloc(ctx->n_devices, sizeof *c->vram_peak))) {
		if (c) {
			free(c->vram_used);
			free(c->vram_budget);
		}
		free(c);
		return err_oom();
	}
	c->ctx = ctx;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->ready, NULL);
	uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	c->ram_budget = tun_auto(&ctx->tun, max_cache_ram, phys / 2);
	for (size_t i = 0; i < ctx->n_devices; i++) {
		uint64_t total = ctx->devices[i].info.total_memory;

		c->vram_budget[i] =
			tun_auto(&ctx->tun, max_cache_vram, total - working_mem(ctx, total));
	}
	c->stats.ram_budget = c->ram_budget;
	*c_p = c;
	return 0;
}

/* ---- LRU and eviction ------------------------------------------------------------ */

void mc_lru_unlink(struct model_cache *c, struct devcache_model *m)
{
	DLQ_REMOVE(c->head, c->tail, m, prev, next);
}

void mc_lru_push_front(struct model_cache *c, struct devcache_model *m)
{
	DLQ_PUSH_FRONT(c->head, c->tail, m, prev, next);
}

uint64_t *mc_used_of(struct model_cache *c, const devcache_device_t *dev)
{
	return mc_is_host(dev) ? &c->ram_used : &c->vram_used[mc_dev_index(c, dev)];
}

/* What an entry is charged to: RAM for host placements and RAM copies,
 * its device's budget otherwise. */
static uint64_t *charge_of(struct model_cache *c, const struct devcache_model *m)
{
	return m->ram_copy ? &c->ram_used : mc_used_of(c, m->dev);
}

/* Charge m where it counts (a partial model: its host side to RAM too),
 * or take the charge back. */
void mc_charge(struct model_cache *c, const struct devcache_model *m)
{
	*charge_of(c, m) += m->bytes;
	c->ram_used += m->host_charge;
	mc_peaks(c);
}

void mc_peaks(struct model_cache *c)
{
	if (c->ram_used > c->stats.ram_peak)
		c->stats.ram_peak = c->ram_used;
	for (size_t i = 0; i < c->ctx->n_devices; i++)
		if (c->vram_used[i] > c->vram_peak[i])
			c->vram_peak[i] = c->vram_used[i];
}

double mc_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void mc_uncharge(struct model_cache *c, const struct devcache_model *m)
{
	*charge_of(c, m) -= m->bytes;
	c->ram_used -= m->host_charge;
}

/* Whether evicting m makes room where dev's budget counts. */
static bool charged_to(const struct devcache_model *m, const devcache_device_t *dev)
{
	if (mc_is_host(dev))
		return m->ram_copy || mc_is_host(m->dev) || m->host_charge;
	/* A partial model with nothing on the device frees nothing there. */
	return !m->ram_copy && m->dev == dev && (!m->partial || m->bytes);
}

/* ---- memory use, for log_memory_usage ---------------------------------------------- */

static uint64_t files_cached(const devcache_model_file_t *mf)
{
	uint64_t bytes = 0;

	for (size_t i = 0; i < mf_part_count(mf); i++)
		bytes += memdiag_cached(mf_part(mf, i)->fd, mf_part(mf, i)->size);
	return bytes;
}

/* Called with the cache locked. */
void mc_mem_use(struct model_cache *c, const devcache_model_file_t *also, struct mem_use *u)
{
	u->rss = memdiag_rss();
	u->heap = memdiag_heap();
	u->cached = also ? files_cached(also) : 0;
	for (struct devcache_model *m = c->head; m; m = m->next)
		if (m->mf != also)
			u->cached += files_cached(m->mf);
}

void mc_log_mem_use(struct model_cache *c, const char *what, const char *path,
		    const devcache_model_file_t *also, const struct mem_use *before)
{
	struct mem_use after;
	char a[3][32], b[3][32];

	mc_mem_use(c, also, &after);
	format_bytes(before->rss, b[0], sizeof b[0]);
	format_bytes(after.rss, a[0], sizeof a[0]);
	format_bytes(before->cached, b[1], sizeof b[1]);
	format_bytes(after.cached, a[1], sizeof a[1]);
	format_bytes(before->heap, b[2], sizeof b[2]);
	format_bytes(after.heap, a[2], sizeof a[2]);
	log_msg(&c->ctx->log, DEVCACHE_LOG_INFO,
		_("model cache: %s %s: RSS %s -> %s, cached files in the page cache %s -> %s, "
		  "malloc heap %s -> %s"),
		what, path, b[0], a[0], b[1], a[1], b[2], a[2]);
}

uint64_t mc_budget_of(struct model_cache *c, const devcache_device_t *dev)
{
	return mc_is_host(dev) ? c->ram_budget : c->vram_budget[mc_dev_index(c, dev)];
}

void mc_dev_free(const struct devcache_model *m, void *p, uint64_t size)
{
	devcache_ctx_t *ctx = m->dev->ctx;
	int rc = tun_get(&ctx->tun, keep_freed_vram) ? devcache_free(m->dev, p)
		 : alloc_free_to_driver(m->dev, p, size ? (size_t)size : 1);

	if (rc)
		log_msg(&ctx->log, DEVCACHE_LOG_ERROR, "%s", devcache_last_error());
}

static bool maps_file(const struct devcache_model *e, const devcache_model_file_t *f)
{
	for (size_t i = 0; e->maps && i < mf_part_count(e->mf); i++)
		if (e->maps[i].mapped && mf_part(e->mf, i)->dev == f->dev &&
		    mf_part(e->mf, i)->ino == f->ino)
			return true;
	return false;
}

/* Whether a model still in the cache (or forgotten, still held) maps
 * file f, by its identity. */
static bool mapped_elsewhere(struct model_cache *c, const devcache_model_file_t *f)
{
	for (struct devcache_model *e = c->head; e; e = e->next)
		if (maps_file(e, f))
			return true;
	for (struct devcache_model *e = c->gone_head; e; e = e->next)
		if (maps_file(e, f))
			return true;
	return false;
}

/* Give back the memory an entry holds, keeping its files open; with
 * drop_pages (evict_page_cache) the pages of the files it mapped leave
 * the page cache, once unmapped, where no other model maps them (the
 * kernel keeps pages that any mapping holds).  Called with the cache
 * locked where c is not NULL. */
static void entry_unmap(struct model_cache *c, struct devcache_model *m, bool drop_pages)
{
	for (size_t i = 0; m->maps && i < mf_part_count(m->mf); i++) {
		const devcache_model_file_t *f = mf_part(m->mf, i);
		bool mapped = m->maps[i].mapped;

		guard_remove(&m->maps[i]); /* first: the handler must not map over it */
		if (m->maps[i].p)
			munmap(m->maps[i].p, m->maps[i].len);
		if (drop_pages && mapped && c && !mapped_elsewhere(c, f))
			posix_fadvise(f->fd, 0, 0, POSIX_FADV_DONTNEED);
	}
	free(m->maps);
	mc_aligned_free(m);
	m->maps = NULL;
	if (m->ram_copy)
		munmap(m->ram_copy, m->bytes);
	m->ram_copy = NULL;
	chunks_free(m);
	partial_free(m);
	free(m->working);
	m->working = NULL;
}

/* Give back what an entry holds; the caller has unlinked and uncharged it. */
void mc_entry_free(struct devcache_model *m)
{
	entry_unmap(NULL, m, false);
	devcache_model_file_close(m->mf);
	free(m);
}

int mc_keep_in_ram(struct model_cache *c, struct devcache_model *m)
{
	void *copy;
	int rc;

	if (mc_is_host(m->dev) || m->partial || !tun_get(&c->ctx->tun, keep_ram_copy) ||
	    c->ram_used + m->bytes > c->ram_budget)
		return DEVCACHE_ENOMEM;
	/* Anonymous memory, never the malloc heap: it goes back to the
	 * kernel when the copy is dropped. */
	copy = mmap(NULL, (size_t)m->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (copy == MAP_FAILED)
		return err_set(DEVCACHE_ENOMEM, _("%s: cannot allocate a RAM copy of %llu bytes"),
			       m->mf->path, (unsigned long long)m->bytes);
	if ((rc = chunks_copy_out(m, copy))) {
		char why[1024];

		snprintf(why, sizeof why, "%s", devcache_last_error());
		log_msg(&c->ctx->log, DEVCACHE_LOG_WARNING,
			_("model cache: cannot keep a RAM copy of %s: %s"), m->mf->path, why);
		munmap(copy, (size_t)m->bytes);
		return err_set(rc, _("model cache: cannot keep a RAM copy of %s: %s"), m->mf->path,
			       why);
	}
	chunks_release(m);
	c->vram_used[mc_dev_index(c, m->dev)] -= m->bytes;
	m->ram_copy = copy;
	c->ram_used += m->bytes;
	c->stats.ram_copies++;
	c->stats.offloads++;
	mc_peaks(c);
	return 0;
}

void mc_drop(struct model_cache *c, struct devcache_model *m)
{
	struct mem_use before;
	bool log_use = tun_get(&c->ctx->tun, log_memory_usage);
	char *path = NULL;

	if (log_use) {
		mc_mem_use(c, NULL, &before);
		path = strdup(m->mf->path);
	}
	mc_lru_unlink(c, m);
	mc_uncharge(c, m);
	c->stats.models--;
	if (m->ram_copy)
		c->stats.ram_copies--;
	log_msg(&c->ctx->log, DEVCACHE_LOG_INFO, _("model cache: evicted %s from %s"), m->mf->path,
		m->ram_copy ? "RAM" : m->dev->id);
	entry_unmap(c, m, tun_get(&c->ctx->tun, evict_page_cache));
	/* Its files are still open: the figures after count their pages
	 * too, as those before did. */
	if (log_use)
		mc_log_mem_use(c, _("evicted"), path ? path : "?", m->mf, &before);
	mc_entry_free(m);
	free(path);
	if (tun_get(&c->ctx->tun, malloc_trim_on_evict))
		malloc_trim(0);
}

/* Evict m from where it is: a device model becomes a RAM copy when
 * keep_ram_copy and the RAM budget allow; anything else is dropped. */
void mc_evict(struct model_cache *c, struct devcache_model *m)
{
	c->stats.evictions++;
	if (!m->ram_copy && mc_keep_in_ram(c, m) == 0)
		log_msg(&c->ctx->log, DEVCACHE_LOG_INFO,
			_("model cache: evicted %s from %s, keeping a copy in RAM"), m->mf->path,
			m->dev->id);
	else
		mc_drop(c, m);
}

/* Evict unlocked models on dev, least recently used first, until need
 * bytes fit its budget or, with need 0, until want bytes are freed.
 * Called with the cache locked.  Returns the bytes freed. */
uint64_t mc_evict_for(struct model_cache *c, devcache_device_t *dev, uint64_t need,
		      uint64_t want)
{
	uint64_t *used = mc_used_of(c, dev), budget = mc_budget_of(c, dev), freed = 0;
	struct devcache_model *m = c->tail;

	while (m && (need ? *used + need > budget : freed < want)) {
		struct devcache_model *prev = m->prev;

		if (charged_to(m, dev) && m->locks == 0 && m->state == ENTRY_READY) {
			freed += mc_is_host(dev) && m->partial ? m->host_charge : m->bytes;
			mc_evict(c, m);
		}
		m = prev;
	}
	return freed;
}

uint64_t mc_evictable(struct model_cache *c, const devcache_device_t *dev)
{
	uint64_t bytes = 0;

	for (struct devcache_model *m = c->head; m; m = m->next)
		if (charged_to(m, dev) && m->locks == 0 && m->state == ENTRY_READY)
			bytes += mc_is_host(dev) && m->partial ? m->host_charge : m->bytes;
	return bytes;
}

void mc_forget(struct model_cache *c, struct devcache_model *m)
{
	mc_lru_unlink(c, m);
	DLQ_PUSH_FRONT(c->gone_head, c->gone_tail, m, prev, next);
	m->forgotten = true;
	c->stats.models--;
	c->stats.locked_models--;
	c->stats.evictions++;
}

void mc_free_forgotten(struct model_cache *c, struct devcache_model *m)
{
	DLQ_REMOVE(c->gone_head, c->gone_tail, m, prev, next);
	mc_uncharge(c, m);
	log_msg(&c->ctx->log, DEVCACHE_LOG_INFO, _("model cache: evicted %s from %s"), m->mf->path,
		m->dev->id);
	entry_unmap(c, m, tun_get(&c->ctx->tun, evict_page_cache));
	mc_entry_free(m);
}

/* The allocator is out of memory on dev: evict unlocked models there. */
static size_t cache_pressure(void *user, devcache_device_t *dev, size_t need)
{
	struct model_cache *c = user;
	uint64_t freed;

	if (mc_is_host(dev))
		return 0; /* host placements are mappings, not allocator memory */
	pthread_mutex_lock(&c->lock);
	freed = mc_evict_for(c, dev, 0, need ? need : 1);
	pthread_mutex_unlock(&c->lock);
	return (size_t)freed;
}

/* ---- the cache's life ------------------------------------------------------------ */

int mc_get_cache(devcache_ctx_t *ctx, struct model_cache **c_p)
{
	int rc = 0;

	pthread_mutex_lock(&ctx->lock);
	if (!ctx->cache && (rc = cache_create(ctx, &ctx->cache)) == 0) {
		/* Registered under ctx->lock, as devcache_pressure_register does. */
		if (ctx->n_pressure == DEVCACHE_MAX_PRESSURE)
			log_msg(&ctx->log, DEVCACHE_LOG_WARNING,
				_("model cache: no room for its pressure callback; models are evicted "
				  "only within their budgets"));
		else
			ctx->pressure[ctx->n_pressure++] = (struct pressure_cb){cache_pressure, ctx->cache};
	}
	*c_p = ctx->cache;
	pthread_mutex_unlock(&ctx->lock);
	return rc;
}

size_t devcache_cache_evict_all(devcache_ctx_t *ctx)
{
	struct model_cache *c;
	size_t n = 0;

	if (!ctx || mc_get_cache(ctx, &c))
		return 0;
	pthread_mutex_lock(&c->lock);
	for (struct devcache_model *m = c->tail, *prev; m; m = prev) {
		prev = m->prev;
		if (m->locks == 0 && m->state == ENTRY_READY) {
			/* All the way: no RAM copy is kept. */
			c->stats.evictions++;
			mc_drop(c, m);
			n++;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return n;
}

/* At devcache_close(), before the allocators go: every model is dropped,
 * locked or not (a program that closes the context is done with them). */
void model_cache_destroy(devcache_ctx_t *ctx)
{
	struct model_cache *c = ctx->cache;

	if (!c)
		return;
	pthread_mutex_lock(&ctx->lock);
	for (size_t i = 0; i < ctx->n_pressure; i++)
		if (ctx->pressure[i].fn == cache_pressure && ctx->pressure[i].user == c) {
			ctx->pressure[i] = ctx->pressure[--ctx->n_pressure];
			break;
		}
	pthread_mutex_unlock(&ctx->lock);
	size_t locked = 0;
	while (c->gone_head) {
		struct devcache_model *m = c->gone_head;

		locked++;
		DLQ_REMOVE(c->gone_head, c->gone_tail, m, prev, next);
		entry_unmap(c, m, tun_get(&ctx->tun, evict_page_cache));
		mc_entry_free(m);
	}
	while (c->head) {
		struct devcache_model *m = c->head;

		locked += m->locks > 0;
		mc_lru_unlink(c, m);
		entry_unmap(c, m, tun_get(&ctx->tun, evict_page_cache));
		mc_entry_free(m);
	}
	if (locked)
		log_msg(&ctx->log, DEVCACHE_LOG_WARNING,
			P_("model cache: %zu model still locked when the context closed",
			   "model cache: %zu models still locked when the context closed", locked),
			locked);
	pthread_cond_destroy(&c->ready);
	pthread_mutex_destroy(&c->lock);
	free(c->vram_used);
	free(c->vram_budget);
	free(c->vram_peak);
	free(c);
	ctx->cache = NULL;
}
