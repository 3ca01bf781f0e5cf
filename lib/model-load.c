/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-load.c - devcache_model_load() and devcache_model_release(): a hit, by the files' identity or by the parsed model, or a miss made room for, placed and committed. */
#include "model-cache.h"
#include "model-file.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/*
 * A load takes the cache's lock for the quick steps and leaves it for the
 * slow ones.  Locked, lookup() finds a ready entry (a hit, locked for the
 * caller) or waits while another thread loads it: first by the identity
 * of the files the path names, without parsing them, then, the model
 * parsed unlocked, by the parsed files.  On a miss insert() makes room
 * within the budget and lists a charged entry in the loading state.
 * Unlocked, place() reads and uploads its bytes.  Locked again, commit()
 * makes the entry ready, or takes out all that a failed load left, and
 * wakes the loads waiting for it.
 */

double mc_now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
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
	mc_peaks(c);
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
		m->hits++;
		m->last_use = mc_now();
		c->stats.ram_copy_reloads++;
		c->stats.ram_copies--;
		c->stats.locked_models++;
		c->stats.bytes_uploaded += m->bytes;
		mc_lru_unlink(c, m);
		mc_lru_push_front(c, m);
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

/* align ANY_ALIGN: a model loaded with any alignment (the model manager's
 * key is the file and the device). */
#define ANY_ALIGN UINT32_MAX

static struct devcache_model *find(struct model_cache *c, const devcache_model_file_t *mf,
				   devcache_device_t *dev, bool writable, uint32_t align)
{
	for (struct devcache_model *m = c->head; m; m = m->next)
		if (m->dev == dev && m->writable == writable &&
		    (align == ANY_ALIGN || m->align == align) &&
		    same_files(m->mf, mf) &&
		    !guard_changed(m))
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
					   devcache_device_t *dev, bool writable, uint32_t align)
{
	for (struct devcache_model *m = c->head; m; m = m->next) {
		bool same = m->dev == dev && m->writable == writable &&
			    (align == ANY_ALIGN || m->align == align) && is_file(m->mf, st);

		for (size_t i = 0; same && i < mf_part_count(m->mf); i++) {
			const devcache_model_file_t *x = mf_part(m->mf, i);
			const struct stat *xs = st; /* a single file is its own part */
			struct stat pst;

			if (x != m->mf)
				xs = stat(x->path, &pst) == 0 ? &pst : NULL;
			same = xs && is_file(x, xs) && x->size == (uint64_t)xs->st_size;
		}
		if (same && !guard_changed(m))
			return m;
	}
	return NULL;
}

/* What a model takes where it is placed. */
static uint64_t footprint(const devcache_model_file_t *mf, const devcache_device_t *dev,
			  uint32_t align)
{
	return mc_is_host(dev) ? mf->size + mc_unaligned_bytes(mf, align, NULL)
			       : device_layout(mf, NULL);
}

/* Find mf on dev (mf NULL: the model path names, by identity alone,
 * find_by_path), waiting while another thread loads it.  A hit is locked
 * for the caller (a RAM copy is first copied back); a miss returns 0 with
 * *m_p NULL.  Called and returns with the cache locked. */
static int lookup(struct model_cache *c, const devcache_model_file_t *mf, const char *path,
		  const struct stat *st, devcache_device_t *dev, bool writable, uint32_t align,
		  const devcache_load_args_t *args, struct devcache_model **m_p,
		  devcache_load_result_t *res)
{
	struct devcache_model *m;
	int rc;

	*m_p = NULL;
	for (;;) {
		m = mf ? find(c, mf, dev, writable, align) : find_by_path(c, st, dev, writable, align);
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
		m->hits++;
		m->last_use = mc_now();
		c->stats.hits++;
		c->stats.locked_models += m->locks == 1;
		mc_lru_unlink(c, m);
		mc_lru_push_front(c, m);
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
		  bool writable, uint32_t align, uint64_t cap, struct devcache_model **m_p)
{
	uint64_t need = footprint(mf, dev, align);
	struct devcache_model *m;
	int rc;

	bool partial = false, capped = !mc_is_host(dev) && need > cap;

	c->stats.misses++;
	if (capped) {
		mc_evict_for(c, dev, cap, 0);
		partial = true;
	} else if (!mc_is_host(dev) && tun_get(&c->ctx->tun, partial_loading)) {
		mc_evict_for(c, dev, need, 0);
		/* Also where a tensor is larger than the device's largest
		 * single allocation: it stays on the host, the rest goes. */
		partial = *mc_used_of(c, dev) + need > mc_budget_of(c, dev) ||
			  largest_tensor(mf) > alloc_max_request(dev);
	}
	if (!partial && (rc = make_room(c, dev, need, mf->path)))
		return rc;
	if (!(m = calloc(1, sizeof *m))) {
		c->stats.failed_loads++;
		return err_oom();
	}
	*m = (struct devcache_model){.cache = c, .dev = dev, .writable = writable, .align = align,
				     .mf = mf,
				     .bytes = need, .locks = 1, .state = ENTRY_LOADING,
				     .loader = pthread_self(), .last_use = mc_now()};
	if (partial) {
		uint64_t used = *mc_used_of(c, dev), budget = mc_budget_of(c, dev);
		uint64_t avail = used < budget ? budget - used : 0;

		/* Its host part counts against RAM's budget (partial_plan). */
		rc = partial_plan(c, m, capped && cap < avail ? cap : avail, capped);
		c->stats.failed_loads += rc != 0;
		/* and the aligned copies it makes of every unaligned tensor */
		if (!rc)
			m->host_charge += mc_unaligned_bytes(mf, align, NULL);
		if (rc || (rc = make_room(c, host_device(c), m->host_charge, mf->path))) {
			free(m->dev_ptr);
			free(m->stamp);
			free(m);
			return rc;
		}
	}
	mc_charge(c, m);
	mc_lru_push_front(c, m);
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
	bool log_use = tun_get(&ctx->tun, log_memory_usage);
	int rc;

	if (log_use) {
		pthread_mutex_lock(&c->lock);
		mc_mem_use(c, NULL, &before);
		pthread_mutex_unlock(&c->lock);
	}
	double t0 = mc_now_seconds();
	for (size_t i = 0; tun_get(&ctx->tun, fadvise_sequential) && i < mf_part_count(m->mf); i++)
		posix_fadvise(mf_part(m->mf, i)->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	rc = mc_is_host(m->dev) ? mc_place_on_host(m, args)
	     : m->partial     ? partial_place(m, args)
			      : mc_place_on_device(m, args);
	pthread_mutex_lock(&c->lock);
	if (log_use && rc == 0)
		mc_log_mem_use(c, _("loaded"), m->mf->path, NULL, &before);
	c->stats.load_seconds += mc_now_seconds() - t0;
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
		mc_lru_unlink(c, m);
		mc_uncharge(c, m);
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
		mc_entry_free(m);
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
	if (a->align & (a->align - 1) || a->align > MF_ALIGN_MAX)
		return err_set(DEVCACHE_EINVAL,
			       _("devcache_model_load: align %zu is not a power of two up to %u"),
			       a->align, MF_ALIGN_MAX);
	return 0;
}

/* Where the host bytes are: the files' mappings (zero copy), or copies. */
static void load_placement(const struct devcache_model *m, devcache_load_result_t *res)
{
	uint64_t count = 0, bytes = 0;

	for (size_t i = 0; m->aligned && i < m->mf->n_tensors; i++)
		if (m->aligned[i]) {
			count++;
			bytes += m->mf->tensors[i].size;
		}
	res->aligned_copies = count;
	res->aligned_bytes = bytes;
	if (m->maps && tun_get(&m->dev->ctx->tun, mmap) && res->host_bytes >= bytes)
		res->mapped_bytes = res->host_bytes - bytes;
}

/* A load; cap: at most so many bytes on the device (UINT64_MAX: none),
 * the largest prefix of the tensors that fits. */
static int load(devcache_ctx_t *ctx, const char *path, devcache_device_t *dev, uint64_t cap,
		const devcache_load_args_t *args_in, devcache_model_t **model_p)
{
	double t0 = mc_now_seconds();
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
	uint32_t align = (uint32_t)args.align > 1 ? (uint32_t)args.align : 0;

	/* A device's tensors are laid out at TENSOR_ALIGN: only a partial
	 * load's host side can need copies, and only then is align a key. */
	if (!mc_is_host(dev) && align > TENSOR_ALIGN)
		return err_set(DEVCACHE_EINVAL,
			       _("devcache_model_load: align %u is more than the %u bytes %s's "
				 "tensors are aligned to"),
			       align, (unsigned)TENSOR_ALIGN, dev->id);
	if (!mc_is_host(dev) && !tun_get(&ctx->tun, partial_loading))
		align = 0;
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
		rc = lookup(c, NULL, named, &st, dev, writable, align, &args, &m, &res);
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
	rc = lookup(c, mf, path, NULL, dev, writable, align, &args, &m, &res);
	if (rc || m) {
		pthread_mutex_unlock(&c->lock);
		devcache_model_file_close(mf);
	} else {
		rc = insert(c, mf, dev, writable, align, cap, &m);
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
		res.seconds = mc_now_seconds() - t0;
		res.device_bytes = info.device_bytes;
		res.host_bytes = info.host_bytes;
		load_placement(m, &res);
		*args.result = res;
	}
	*model_p = m;
	return 0;
}

int devcache_model_load(devcache_ctx_t *ctx, const char *path, devcache_device_t *dev,
			const devcache_load_args_t *args, devcache_model_t **model_p)
{
	return load(ctx, path, dev, UINT64_MAX, args, model_p);
}

int devcache_model_load_partial(devcache_ctx_t *ctx, const char *path, devcache_device_t *dev,
				uint64_t device_bytes, const devcache_load_args_t *args,
				devcache_model_t **model_p)
{
	return load(ctx, path, dev, device_bytes, args, model_p);
}

/* The cached model path names on dev (either flag), ready, or NULL; by
 * the files' identity first, then parsed.  Called with the cache locked;
 * it is left to parse the file.  DEVCACHE_EBUSY while it is loading. */
int mc_find_key(struct model_cache *c, const char *path, devcache_device_t *dev,
		struct devcache_model **m_p)
{
	devcache_model_file_t *mf = NULL;
	char *resolved = NULL;
	struct stat st;
	int rc = 0;

	*m_p = NULL;
	bool found = stat(path, &st) == 0;
	if (found && S_ISDIR(st.st_mode))
		found = mf_resolve_folder(path, &resolved) == 0 && stat(resolved, &st) == 0;
	for (int w = 0; found && S_ISREG(st.st_mode) && w < 2 && !*m_p; w++)
		*m_p = find_by_path(c, &st, dev, w, ANY_ALIGN);
	free(resolved);
	if (!*m_p) {
		pthread_mutex_unlock(&c->lock);
		rc = devcache_model_file_open(path, &mf);
		pthread_mutex_lock(&c->lock);
		if (rc)
			return rc;
		for (int w = 0; w < 2 && !*m_p; w++)
			*m_p = find(c, mf, dev, w, ANY_ALIGN);
		devcache_model_file_close(mf);
	}
	if (!*m_p)
		return err_set(DEVCACHE_ENOENT, _("%s: not in the model cache for %s"), path, dev->id);
	if ((*m_p)->state != ENTRY_READY) {
		*m_p = NULL;
		return err_set(DEVCACHE_EBUSY, _("%s: being loaded on %s; try again once it is"), path,
			       dev->id);
	}
	return 0;
}

void devcache_model_release(devcache_model_t *m)
{
	if (!m)
		return;
	struct model_cache *c = m->cache;

	pthread_mutex_lock(&c->lock);
	/* The latest lock's working memory goes back with it. */
	if (m->locks > 0 && m->n_working) {
		uint64_t w = m->working[--m->n_working];

		*mc_used_of(c, m->dev) -= w;
		m->working_total -= w;
	}
	if (m->locks > 0 && --m->locks == 0) {
		if (m->forgotten) {
			mc_free_forgotten(c, m);
		} else {
			c->stats.locked_models--;
			/* Its file changed under it: it can never be a hit again. */
			if (guard_changed(m)) {
				c->stats.evictions++;
				mc_drop(c, m);
			}
		}
	}
	pthread_mutex_unlock(&c->lock);
}
