/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-cache.c - loading model files onto devices (zero-copy on the host, a pinned staging ring elsewhere) and caching them within RAM and VRAM budgets. */
#include "model-cache.h"
#include "model-file.h"
#include "alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

bool mc_is_host(const devcache_device_t *dev)
{
	return dev->info.caps & DEVCACHE_CAP_HOST_MEMORY;
}

size_t mc_dev_index(const struct model_cache *c, const devcache_device_t *dev)
{
	return (size_t)(dev - c->ctx->devices);
}

static double now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- budgets ------------------------------------------------------------------ */

static uint64_t tun_size(const devcache_ctx_t *ctx, int id, uint64_t auto_value)
{
	const struct tunable_value *v = &ctx->tun.v[id];

	return v->special == TV_AUTO ? auto_value : v->u.size;
}

/* device_working_mem's auto rule: a tenth of the device, at least 512 MiB
 * and at most half of it. */
static uint64_t working_mem(const devcache_ctx_t *ctx, uint64_t total)
{
	uint64_t w = total / 10;

	if (w < (512ull << 20))
		w = 512ull << 20;
	if (w > total / 2)
		w = total / 2;
	return tun_size(ctx, TUN_device_working_mem, w);
}

static int cache_create(devcache_ctx_t *ctx, struct model_cache **c_p)
{
	struct model_cache *c = calloc(1, sizeof *c);

	if (!c || !(c->vram_used = calloc(ctx->n_devices, sizeof *c->vram_used)) ||
	    !(c->vram_budget = calloc(ctx->n_devices, sizeof *c->vram_budget))) {
		if (c)
			free(c->vram_used);
		free(c);
		return err_set(DEVCACHE_ENOMEM, _("out of memory"));
	}
	c->ctx = ctx;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->ready, NULL);
	uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	c->ram_budget = tun_size(ctx, TUN_max_cache_ram, phys / 2);
	for (size_t i = 0; i < ctx->n_devices; i++) {
		uint64_t total = ctx->devices[i].info.total_memory;

		c->vram_budget[i] = tun_size(ctx, TUN_max_cache_vram,
					     total - working_mem(ctx, total));
	}
	c->stats.ram_budget = c->ram_budget;
	*c_p = c;
	return 0;
}

/* ---- LRU and eviction ------------------------------------------------------------ */

static void lru_unlink(struct model_cache *c, struct devcache_model *m)
{
	DLQ_REMOVE(c->head, c->tail, m, prev, next);
}

static void lru_push_front(struct model_cache *c, struct devcache_model *m)
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
static void charge(struct model_cache *c, const struct devcache_model *m)
{
	*charge_of(c, m) += m->bytes;
	c->ram_used += m->host_charge;
}

static void uncharge(struct model_cache *c, const struct devcache_model *m)
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

struct mem_use {
	uint64_t rss, cached, heap;
};

/* Called with the cache locked. */
static void mem_use(struct model_cache *c, struct mem_use *u)
{
	u->rss = memdiag_rss();
	u->heap = memdiag_heap();
	u->cached = 0;
	for (struct devcache_model *m = c->head; m; m = m->next)
		for (size_t i = 0; i < mf_part_count(m->mf); i++)
			u->cached += memdiag_cached(mf_part(m->mf, i)->fd, mf_part(m->mf, i)->size);
}

static void log_mem_use(struct model_cache *c, const char *what, const char *path,
			const struct mem_use *before)
{
	struct mem_use after;
	char a[3][32], b[3][32];

	mem_use(c, &after);
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

/* Give back what an entry holds; the caller has unlinked and uncharged it. */
static void entry_free(struct devcache_model *m)
{
	lease_release(m);
	for (size_t i = 0; m->maps && i < mf_part_count(m->mf); i++)
		if (m->maps[i].p)
			munmap(m->maps[i].p, m->maps[i].len);
	free(m->maps);
	if (m->ram_copy)
		munmap(m->ram_copy, m->bytes);
	chunks_free(m);
	partial_free(m);
	devcache_model_file_close(m->mf);
	free(m);
}

/* Copy a device model into RAM and give its device memory back; false
 * when the RAM budget or the copy does not allow it. */
static bool keep_in_ram(struct model_cache *c, struct devcache_model *m)
{
	void *copy;

	if (mc_is_host(m->dev) || m->partial || !c->ctx->tun.v[TUN_keep_ram_copy].u.b ||
	    c->ram_used + m->bytes > c->ram_budget)
		return false;
	/* Anonymous memory, never the malloc heap: it goes back to the
	 * kernel when the copy is dropped. */
	copy = mmap(NULL, (size_t)m->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (copy == MAP_FAILED)
		return false;
	if (chunks_copy_out(m, copy)) {
		log_msg(&c->ctx->log, DEVCACHE_LOG_WARNING,
			_("model cache: cannot keep a RAM copy of %s: %s"), m->mf->path,
			devcache_last_error());
		munmap(copy, (size_t)m->bytes);
		return false;
	}
	chunks_release(m);
	c->vram_used[mc_dev_index(c, m->dev)] -= m->bytes;
	m->ram_copy = copy;
	c->ram_used += m->bytes;
	c->stats.ram_copies++;
	return true;
}

void mc_drop(struct model_cache *c, struct devcache_model *m)
{
	struct mem_use before;
	bool log_use = c->ctx->tun.v[TUN_log_memory_usage].u.b;
	char *path = NULL;

	if (log_use) {
		mem_use(c, &before);
		path = strdup(m->mf->path);
	}
	lru_unlink(c, m);
	uncharge(c, m);
	c->stats.models--;
	if (m->ram_copy)
		c->stats.ram_copies--;
	log_msg(&c->ctx->log, DEVCACHE_LOG_INFO, _("model cache: evicted %s from %s"), m->mf->path,
		m->ram_copy ? "RAM" : m->dev->id);
	entry_free(m);
	if (log_use)
		log_mem_use(c, _("evicted"), path ? path : "?", &before);
	free(path);
	if (c->ctx->tun.v[TUN_malloc_trim_on_evict].u.b)
		malloc_trim(0);
}

/* Evict m from where it is: a device model becomes a RAM copy when
 * keep_ram_copy and the RAM budget allow; anything else is dropped. */
static void evict(struct model_cache *c, struct devcache_model *m)
{
	c->stats.evictions++;
	if (!m->ram_copy && keep_in_ram(c, m))
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
			evict(c, m);
		}
		m = prev;
	}
	return freed;
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

/* ---- host placement: the file in place ---------------------------------------- */

/* A copy of a file in anonymous memory: it survives the file being
 * replaced.  done and total count the whole model, for progress. */
static int copy_file(struct devcache_model *m, size_t part, const devcache_load_args_t *args,
		     uint64_t *done, uint64_t total)
{
	const devcache_model_file_t *f = mf_part(m->mf, part);
	struct host_map *hm = &m->maps[part];
	void *p;

	hm->len = f->size ? (size_t)f->size : 1;
	p = mmap(NULL, hm->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return err_set(DEVCACHE_ENOMEM, _("%s: cannot allocate %zu bytes: %s"), f->path,
			       hm->len, strerror(errno));
	hm->p = p;
	for (uint64_t off = 0; off < f->size;) {
		size_t chunk = f->size - off > (64u << 20) ? (64u << 20) : (size_t)(f->size - off);
		int rc = mf_read(f, (char *)p + off, chunk, off, _("tensor data"));

		if (rc)
			return rc;
		off += chunk;
		*done += chunk;
		m->read += chunk;
		if (args->progress && args->progress(args->progress_user, *done, total))
			return err_set(DEVCACHE_ECANCELED, _("%s: load cancelled"), m->mf->path);
	}
	if (!(args->flags & DEVCACHE_LOAD_WRITABLE))
		mprotect(p, hm->len, PROT_READ);
	return 0;
}

/* Zero-copy.  Pages come from the page cache as they are touched, so the
 * file must keep its size while it is mapped: a file truncated under a
 * mapping raises SIGBUS on access (devcache.conf(5), mmap).  Its size is
 * checked here, once the mapping exists. */
static int map_file(struct devcache_model *m, size_t part, bool writable)
{
	const devcache_model_file_t *f = mf_part(m->mf, part);
	struct host_map *hm = &m->maps[part];
	struct stat st;
	void *p;

	hm->len = f->size ? (size_t)f->size : 1;
	p = writable ? mmap(NULL, hm->len, PROT_READ | PROT_WRITE, MAP_PRIVATE, f->fd, 0)
		     : mmap(NULL, hm->len, PROT_READ, MAP_SHARED, f->fd, 0);
	if (p == MAP_FAILED)
		return err_set(DEVCACHE_EIO, _("%s: cannot map: %s"), f->path, strerror(errno));
	hm->p = p;
	lease_take(m->cache, f, hm);
	if (fstat(f->fd, &st) != 0 || (uint64_t)st.st_size != f->size)
		return mf_error(f, _("the file changed size while it was being opened"));
	return 0;
}

/* Every file of the model in host memory, mapped in place or copied. */
int mc_place_on_host(struct devcache_model *m, const devcache_load_args_t *args)
{
	devcache_ctx_t *ctx = m->dev->ctx;
	size_t n = mf_part_count(m->mf);
	uint64_t done = 0, total = m->mf->size;
	int rc = 0;

	if (!(m->maps = calloc(n, sizeof *m->maps)))
		return err_set(DEVCACHE_ENOMEM, _("out of memory"));
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = ctx->tun.v[TUN_mmap].u.b
			     ? map_file(m, i, args->flags & DEVCACHE_LOAD_WRITABLE)
			     : copy_file(m, i, args, &done, total);
	if (rc == 0 && ctx->tun.v[TUN_mmap].u.b && args->progress &&
	    args->progress(args->progress_user, total, total))
		rc = err_set(DEVCACHE_ECANCELED, _("%s: load cancelled"), m->mf->path);
	return rc;
}

/* ---- device placement: the staging ring ------------------------------------------ */

struct stage_file *mc_stage_files(const devcache_model_file_t *mf)
{
	struct stage_file *files = calloc(mf_part_count(mf), sizeof *files);

	for (size_t i = 0; files && i < mf_part_count(mf); i++)
		files[i] = (struct stage_file){.path = mf_part(mf, i)->path, .fd = mf_part(mf, i)->fd};
	return files;
}

static int place_on_device(struct devcache_model *m, const devcache_load_args_t *args)
{
	devcache_ctx_t *ctx = m->dev->ctx;
	devcache_model_file_t *mf = m->mf;
	size_t n_files = mf_part_count(mf);
	struct stage_file *files = mc_stage_files(mf);
	struct stage_item *items = NULL;
	struct stage_job job = {.dev = m->dev, .files = files, .n_files = n_files,
				.n_items = mf->n_tensors, .stream = args->stream,
				.progress = args->progress, .progress_user = args->progress_user,
				.name = mf->path};
	int rc;

	items = calloc(mf->n_tensors ? mf->n_tensors : 1, sizeof *items);
	if (!files || !items) {
		rc = err_set(DEVCACHE_ENOMEM, _("out of memory"));
		goto out;
	}
	if ((rc = chunks_plan(m, alloc_max_request(m->dev))) ||
	    (rc = chunks_alloc(m, args->stream)))
		goto out;
	for (size_t i = 0; i < mf->n_tensors; i++)
		items[i] = (struct stage_item){.file = mf->tensors[i].part,
					       .offset = mf->tensors[i].offset,
					       .size = mf->tensors[i].size,
					       .dst = chunks_tensor(m, i)};
	job.items = items;
	if ((rc = stage_upload(&job)) == 0) {
		m->read = job.bytes_read;
		m->uploaded = job.bytes_uploaded;
		for (size_t i = 0; ctx->tun.v[TUN_evict_page_cache].u.b && i < n_files; i++)
			posix_fadvise(files[i].fd, 0, 0, POSIX_FADV_DONTNEED);
	}
out:
	free(items);
	free(files);
	return mc_upload_failed(m, rc);
}

int mc_upload_failed(const struct devcache_model *m, int rc)
{
	const char *path = m->mf->path;

	/* A failure of the driver or the allocator names the device, not the
	 * file being loaded: say which file it was. */
	if (rc && rc != DEVCACHE_ECANCELED &&
	    strncmp(devcache_last_error(), path, strlen(path)) != 0) {
		char why[1024];

		snprintf(why, sizeof why, "%s", devcache_last_error());
		rc = err_set(rc, _("%s: cannot upload it to %s: %s"), path, m->dev->id, why);
	}
	return rc;
}

/* ---- the public API -------------------------------------------------------------- */

/* Evict for need bytes on dev; if they still do not fit its budget, fail
 * saying so.  Called with the cache locked. */
static int make_room(struct model_cache *c, devcache_device_t *dev, uint64_t need,
		     const char *path)
{
	char need_s[32], budget_s[32];

	mc_evict_for(c, dev, need, 0);
	if (*mc_used_of(c, dev) + need <= mc_budget_of(c, dev))
		return 0;
	c->stats.failed_loads++;
	format_bytes(need, need_s, sizeof need_s);
	format_bytes(mc_budget_of(c, dev), budget_s, sizeof budget_s);
	if (!mc_is_host(dev) && need > mc_budget_of(c, dev))
		return err_set(DEVCACHE_ENOMEM,
			       _("%s: the model needs %s on %s, more than the cache's budget there "
				 "(max_cache_vram, %s); partial_loading would load what fits and "
				 "keep the rest on the host"),
			       path, need_s, dev->id, budget_s);
	return err_set(DEVCACHE_ENOMEM,
		       _("%s: the model needs %s on %s, but the cache's budget there (%s) is "
			 "%s and locked models hold %llu bytes of it%s"),
		       path, need_s, dev->id, mc_is_host(dev) ? "max_cache_ram" : "max_cache_vram",
		       budget_s, (unsigned long long)*mc_used_of(c, dev),
		       mc_is_host(dev) ? "" : _("; partial_loading would load what fits"));
}

/* A hit on a model kept in RAM after its eviction from the device: copy it
 * back, no disk read.  Called and returns with the cache locked; the copy
 * runs unlocked, with the entry in the loading state so that concurrent
 * loads of it wait. */
static int reload_from_ram(struct model_cache *c, struct devcache_model *m,
			   const devcache_load_args_t *args)
{
	devcache_device_t *dev = m->dev;
	uint64_t *vram = &c->vram_used[mc_dev_index(c, dev)];
	int rc;

	if ((rc = make_room(c, dev, m->bytes, m->mf->path)))
		return rc;
	*vram += m->bytes; /* charged to both while it is copied */
	m->state = ENTRY_LOADING;
	m->loader = pthread_self();
	m->locks = 1;
	pthread_mutex_unlock(&c->lock);
	rc = chunks_alloc(m, args->stream);
	if (rc == 0 && (rc = chunks_copy_in(m, m->ram_copy, args->stream)) == 0 && args->progress &&
	    args->progress(args->progress_user, m->bytes, m->bytes))
		rc = err_set(DEVCACHE_ECANCELED, _("%s: load cancelled"), m->mf->path);
	if (rc)
		chunks_release(m);
	pthread_mutex_lock(&c->lock);
	if (rc) {
		char why[1024];

		snprintf(why, sizeof why, "%s", devcache_last_error());
		*vram -= m->bytes;
		m->locks = 0;
		c->stats.failed_loads += rc != DEVCACHE_ECANCELED;
		c->stats.cancelled_loads += rc == DEVCACHE_ECANCELED;
		rc = err_set(rc, "%s", why);
	} else {
		munmap(m->ram_copy, (size_t)m->bytes);
		m->ram_copy = NULL;
		c->ram_used -= m->bytes;
		c->stats.hits++;
		c->stats.ram_copy_reloads++;
		c->stats.ram_copies--;
		c->stats.locked_models++;
		c->stats.bytes_uploaded += m->bytes;
		lru_unlink(c, m);
		lru_push_front(c, m);
	}
	m->state = ENTRY_READY;
	pthread_cond_broadcast(&c->ready);
	return rc;
}

static bool same_id(const devcache_model_file_t *x, const devcache_model_file_t *y)
{
	return x->ino == y->ino && x->dev == y->dev && x->mtime.tv_sec == y->mtime.tv_sec &&
	       x->mtime.tv_nsec == y->mtime.tv_nsec;
}

/* The same model: the same files, each one's device, inode, size and
 * modification time, and the same index (a set's own identity). */
static bool same_files(const devcache_model_file_t *a, const devcache_model_file_t *b)
{
	if (mf_part_count(a) != mf_part_count(b) || !same_id(a, b))
		return false;
	for (size_t i = 0; i < mf_part_count(a); i++) {
		const devcache_model_file_t *x = mf_part(a, i), *y = mf_part(b, i);

		if (x->size != y->size || !same_id(x, y))
			return false;
	}
	return true;
}

static struct devcache_model *find(struct model_cache *c, const devcache_model_file_t *mf,
				   devcache_device_t *dev, bool writable)
{
	for (struct devcache_model *m = c->head; m; m = m->next)
		if (m->dev == dev && m->writable == writable && same_files(m->mf, mf) &&
		    !lease_moved(m))
			return m;
	return NULL;
}

/* Whether st is x's file, by its identity, as same_id() compares two
 * opened files (not its contents). */
static bool is_file(const devcache_model_file_t *x, const struct stat *st)
{
	return x->dev == st->st_dev && x->ino == st->st_ino &&
	       x->mtime.tv_sec == st->st_mtim.tv_sec && x->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* The cached model whose own file st is (the stat of a path), found by identity
 * alone: path is a cached model's own file (its single file, its index,
 * the shard it was opened by) and each of the model's files is unchanged,
 * by device, inode, size and modification time, as same_files() compares
 * them.  A hit then needs no parsing: opening a GGUF file with a large
 * vocabulary to learn that it is cached took as long as the hit itself
 * should take a thousand times over.  NULL: not found this way (the
 * caller opens the file and compares). */
static struct devcache_model *find_by_path(struct model_cache *c, const struct stat *st,
					   devcache_device_t *dev, bool writable)
{
	for (struct devcache_model *m = c->head; m; m = m->next) {
		bool same = m->dev == dev && m->writable == writable && is_file(m->mf, st);

		for (size_t i = 0; same && i < mf_part_count(m->mf); i++) {
			const devcache_model_file_t *x = mf_part(m->mf, i);
			const struct stat *xs = st; /* a single file is its own part */
			struct stat pst;

			if (x != m->mf)
				xs = stat(x->path, &pst) == 0 ? &pst : NULL;
			same = xs && is_file(x, xs) && x->size == (uint64_t)xs->st_size;
		}
		if (same && !lease_moved(m))
			return m;
	}
	return NULL;
}

/* What a model takes where it is placed. */
static uint64_t footprint(const devcache_model_file_t *mf, const devcache_device_t *dev)
{
	return mc_is_host(dev) ? mf->size : device_layout(mf, NULL);
}

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

/* Find mf on dev (mf NULL: the model path names, by identity alone,
 * find_by_path), waiting while another thread loads it.  A hit is locked
 * for the caller (a RAM copy is first copied back); a miss returns 0 with
 * *m_p NULL.  Called and returns with the cache locked. */
static int lookup(struct model_cache *c, const devcache_model_file_t *mf, const char *path,
		  const struct stat *st, devcache_device_t *dev, bool writable,
		  const devcache_load_args_t *args, struct devcache_model **m_p,
		  devcache_load_result_t *res)
{
	struct devcache_model *m;
	int rc;

	*m_p = NULL;
	for (;;) {
		m = mf ? find(c, mf, dev, writable) : find_by_path(c, st, dev, writable);
		if (!m || m->state == ENTRY_READY)
			break;
		/* Waiting for ourselves would never end: a progress callback
		 * that loads the model it is reporting on. */
		if (pthread_equal(m->loader, pthread_self()))
			return err_set(DEVCACHE_EBUSY,
				       _("%s: this thread is loading it already (a progress "
					 "callback cannot load the model it reports on)"),
				       path);
		pthread_cond_wait(&c->ready, &c->lock); /* another thread is loading it */
	}
	if (!m)
		return 0;
	if (m->ram_copy) {
		if ((rc = reload_from_ram(c, m, args)))
			return rc;
		res->from_ram = 1;
		res->bytes_uploaded = m->bytes;
	} else {
		m->locks++;
		c->stats.hits++;
		c->stats.locked_models += m->locks == 1;
		lru_unlink(c, m);
		lru_push_front(c, m);
	}
	res->hit = 1;
	*m_p = m;
	return 0;
}

/* The host device: where a partial model's files are charged. */
static devcache_device_t *host_device(struct model_cache *c)
{
	for (size_t i = 0; i < c->ctx->n_devices; i++)
		if (mc_is_host(&c->ctx->devices[i]))
			return &c->ctx->devices[i];
	return NULL;
}

static uint64_t largest_tensor(const devcache_model_file_t *mf)
{
	uint64_t most = 0;

	for (size_t i = 0; i < mf->n_tensors; i++)
		if (mf->tensors[i].size > most)
			most = mf->tensors[i].size;
	return most;
}

/* A miss: make room within the budget, then list and charge a new entry in
 * the loading state, so that concurrent loads of the file wait for it.
 * Takes mf over on success.  Called with the cache locked. */
static int insert(struct model_cache *c, devcache_model_file_t *mf, devcache_device_t *dev,
		  bool writable, struct devcache_model **m_p)
{
	uint64_t need = footprint(mf, dev);
	struct devcache_model *m;
	int rc;

	bool partial = false;

	c->stats.misses++;
	if (!mc_is_host(dev) && c->ctx->tun.v[TUN_partial_loading].u.b) {
		mc_evict_for(c, dev, need, 0);
		/* Also where a tensor is larger than the device's largest
		 * single allocation: it stays on the host, the rest goes. */
		partial = *mc_used_of(c, dev) + need > mc_budget_of(c, dev) ||
			  largest_tensor(mf) > alloc_max_request(dev);
	}
	/* A partial load keeps its files on the host: RAM's budget counts them. */
	if ((rc = partial ? make_room(c, host_device(c), mf->size, mf->path)
			  : make_room(c, dev, need, mf->path)))
		return rc;
	if (!(m = calloc(1, sizeof *m))) {
		c->stats.failed_loads++;
		return err_set(DEVCACHE_ENOMEM, _("out of memory"));
	}
	*m = (struct devcache_model){.cache = c, .dev = dev, .writable = writable, .mf = mf,
				     .bytes = need, .locks = 1, .state = ENTRY_LOADING,
				     .loader = pthread_self()};
	if (partial) {
		uint64_t used = *mc_used_of(c, dev), budget = mc_budget_of(c, dev);

		m->host_charge = mf->size;
		if ((rc = partial_plan(c, m, used < budget ? budget - used : 0))) {
			c->stats.failed_loads++;
			free(m->dev_ptr);
			free(m->stamp);
			free(m);
			return rc;
		}
	}
	charge(c, m);
	lru_push_front(c, m);
	c->stats.models++;
	c->stats.locked_models++;
	*m_p = m;
	return 0;
}

/* Place a new entry's tensors, unlocked: the slow part of a miss. */
static int place(struct devcache_model *m, const devcache_load_args_t *args)
{
	struct model_cache *c = m->cache;
	devcache_ctx_t *ctx = c->ctx;
	struct mem_use before;
	bool log_use = ctx->tun.v[TUN_log_memory_usage].u.b;
	int rc;

	if (log_use) {
		pthread_mutex_lock(&c->lock);
		mem_use(c, &before);
		pthread_mutex_unlock(&c->lock);
	}
	double t0 = now_seconds();
	for (size_t i = 0; ctx->tun.v[TUN_fadvise_sequential].u.b && i < mf_part_count(m->mf); i++)
		posix_fadvise(mf_part(m->mf, i)->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	rc = mc_is_host(m->dev) ? mc_place_on_host(m, args)
	     : m->partial     ? partial_place(m, args)
			      : place_on_device(m, args);
	pthread_mutex_lock(&c->lock);
	if (log_use && rc == 0)
		log_mem_use(c, _("loaded"), m->mf->path, &before);
	c->stats.load_seconds += now_seconds() - t0;
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* Make a placed entry ready, or take a failed one out: nothing of a failed
 * load stays (memory, charge, entry).  Wakes the loads waiting for it. */
static int commit(struct devcache_model *m, int rc)
{
	struct model_cache *c = m->cache;

	pthread_mutex_lock(&c->lock);
	if (rc) {
		lru_unlink(c, m);
		uncharge(c, m);
		c->stats.models--;
		c->stats.locked_models--;
		if (rc == DEVCACHE_ECANCELED)
			c->stats.cancelled_loads++;
		else
			c->stats.failed_loads++;
	} else {
		m->state = ENTRY_READY;
		/* A zero-copy mapping reads nothing now: the page cache reads
		 * the file as its pages are first touched. */
		c->stats.bytes_read += m->read;
		c->stats.bytes_uploaded += m->uploaded;
	}
	pthread_cond_broadcast(&c->ready);
	pthread_mutex_unlock(&c->lock);
	if (rc) {
		char why[1024];

		snprintf(why, sizeof why, "%s", devcache_last_error());
		entry_free(m);
		return err_set(rc, "%s", why);
	}
	return 0;
}

/* The caller's arguments in a zeroed local: a program built against an
 * older, smaller devcache_load_args_t gets the defaults for the rest. */
static int load_args(const devcache_load_args_t *in, devcache_load_args_t *a)
{
	memset(a, 0, sizeof *a);
	a->struct_size = sizeof *a;
	if (!in)
		return 0;
	if (in->struct_size < offsetof(devcache_load_args_t, result) || in->struct_size > sizeof *a)
		return err_set(DEVCACHE_EINVAL,
			       _("devcache_model_load: struct_size %zu is not that of any known "
				 "devcache_load_args_t"),
			       in->struct_size);
	memcpy(a, in, in->struct_size);
	if (a->flags & ~DEVCACHE_LOAD_WRITABLE)
		return err_set(DEVCACHE_EINVAL, _("devcache_model_load: unknown flags 0x%x"), a->flags);
	return 0;
}

int devcache_model_load(devcache_ctx_t *ctx, const char *path, devcache_device_t *dev,
			const devcache_load_args_t *args_in, devcache_model_t **model_p)
{
	double t0 = now_seconds();
	devcache_load_result_t res = {0};
	devcache_load_args_t args;
	devcache_model_file_t *mf = NULL;
	struct model_cache *c;
	struct devcache_model *m;
	int rc;

	if (!ctx || !path || !dev || !model_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_model_load: NULL argument"));
	*model_p = NULL;
	if ((rc = load_args(args_in, &args)))
		return rc;
	if (dev->ctx != ctx)
		return err_set(DEVCACHE_EINVAL, _("devcache_model_load: %s belongs to another context"),
			       dev->id);
	if ((rc = mc_get_cache(ctx, &c)))
		return mf_name_oom(path, rc);
	bool writable = mc_is_host(dev) && (args.flags & DEVCACHE_LOAD_WRITABLE);
	char *resolved = NULL;
	const char *named = path;
	struct stat st;

	/* A hit by the files' identity first, without parsing them; a folder
	 * by the file it holds (a Hugging Face snapshot's folder, say). */
	bool found = stat(path, &st) == 0;
	if (found && S_ISDIR(st.st_mode)) {
		found = mf_resolve_folder(path, &resolved) == 0 && stat(resolved, &st) == 0;
		named = resolved;
	}
	if (found && S_ISREG(st.st_mode)) {
		pthread_mutex_lock(&c->lock);
		rc = lookup(c, NULL, named, &st, dev, writable, &args, &m, &res);
		pthread_mutex_unlock(&c->lock);
		if (rc || m) {
			free(resolved);
			goto done;
		}
	}
	free(resolved);
	if ((rc = devcache_model_file_open(path, &mf))) {
		pthread_mutex_lock(&c->lock);
		c->stats.failed_loads++;
		pthread_mutex_unlock(&c->lock);
		return rc;
	}
	pthread_mutex_lock(&c->lock);
	rc = lookup(c, mf, path, NULL, dev, writable, &args, &m, &res);
	if (rc || m) {
		pthread_mutex_unlock(&c->lock);
		devcache_model_file_close(mf);
	} else {
		rc = insert(c, mf, dev, writable, &m);
		pthread_mutex_unlock(&c->lock);
		if (rc)
			devcache_model_file_close(mf);
		else if ((rc = commit(m, place(m, &args))) == 0) {
			res.bytes_read = m->read;
			res.bytes_uploaded = m->uploaded;
		}
	}
done:
	if (rc)
		return mf_name_oom(path, rc);
	if (args.result) {
		devcache_model_info_t info;

		devcache_model_info(m, &info);
		res.seconds = now_seconds() - t0;
		res.device_bytes = info.device_bytes;
		res.host_bytes = info.host_bytes;
		*args.result = res;
	}
	*model_p = m;
	return 0;
}

void devcache_model_release(devcache_model_t *m)
{
	if (!m)
		return;
	struct model_cache *c = m->cache;

	pthread_mutex_lock(&c->lock);
	if (m->locks > 0 && --m->locks == 0) {
		c->stats.locked_models--;
		/* Its file was rewritten: it can never be a hit again. */
		if (lease_moved(m)) {
			c->stats.evictions++;
			mc_drop(c, m);
		}
	}
	pthread_mutex_unlock(&c->lock);
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
	lease_stop(c); /* first: it walks the models */
	pthread_mutex_lock(&ctx->lock);
	for (size_t i = 0; i < ctx->n_pressure; i++)
		if (ctx->pressure[i].fn == cache_pressure && ctx->pressure[i].user == c) {
			ctx->pressure[i] = ctx->pressure[--ctx->n_pressure];
			break;
		}
	pthread_mutex_unlock(&ctx->lock);
	size_t locked = 0;
	while (c->head) {
		struct devcache_model *m = c->head;

		locked += m->locks > 0;
		lru_unlink(c, m);
		entry_free(m);
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
	free(c);
	ctx->cache = NULL;
}
