/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-partial.c - models larger than the device's budget: some tensors on the device, the rest on the host, moved between them on demand. */
#include "model-cache.h"
#include "model-file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/*
 * A partial model keeps every file on the host (mapped, or copied when
 * mmap is false: the host side, charged to RAM) and gives each tensor
 * that is on the device an allocation of its own, so that tensors can
 * come and go one by one.  m->bytes is what its device tensors are
 * charged (tensor_charge of each); m->stamp[i] is the cache's clock at
 * tensor i's last use, which orders the tensors evicted to make room.
 *
 * Moving tensors in runs in three steps, as a load does: under the cache
 * lock, room is made (least recently used device tensors of partial
 * models first: of unlocked models, or of this one outside the request;
 * then whole unlocked models) and the request charged, the model marked
 * loading; unlocked, the tensors are allocated and uploaded through the
 * staging ring; locked again, the pointers are published or, on failure,
 * the charge taken back.  Nothing is moved when the request cannot fit.
 *
 * Each device tensor being an allocation of its own, a tensor larger than
 * the device's largest single allocation (Level Zero's maxMemAllocSize)
 * can never be on the device: the plan leaves it on the host, and asking
 * for it by name is an error that names it and the limit.
 */

int partial_plan(struct model_cache *c, struct devcache_model *m, uint64_t avail, bool prefix)
{
	const devcache_model_file_t *mf = m->mf;
	size_t n = mf->n_tensors ? mf->n_tensors : 1;

	m->partial = true;
	m->dev_ptr = calloc(n, sizeof *m->dev_ptr);
	m->stamp = calloc(n, sizeof *m->stamp);
	if (!m->dev_ptr || !m->stamp)
		return err_oom();
	/* Until placed, a non-zero stamp marks a tensor chosen for the device. */
	m->bytes = 0;
	m->host_mapped = tun_get(&c->ctx->tun, mmap);
	m->host_charge = m->host_mapped ? 0 : mf->size;
	bool stop = false;

	for (size_t i = 0; i < mf->n_tensors; i++) {
		uint64_t charge = tensor_charge(mf->tensors[i].size);

		if (!stop && mf->tensors[i].size <= alloc_max_request(m->dev) &&
		    charge <= avail - m->bytes) {
			m->bytes += charge;
			m->stamp[i] = ++c->clock;
		} else {
			stop = prefix;
			if (m->host_mapped)
				m->host_charge += mf->tensors[i].size;
		}
	}
	return 0;
}

/* Allocate and upload the tensors of m marked in want, their allocations
 * in ptrs (zeroed, one per tensor), which the caller publishes in
 * m->dev_ptr under the cache lock.  Unlocked; on failure the allocations
 * made are given back. */
static int upload(struct devcache_model *m, const bool *want, void **ptrs,
		  devcache_stream_t stream, devcache_progress_fn progress, void *progress_user,
		  uint64_t *read_p, uint64_t *uploaded_p)
{
	const devcache_model_file_t *mf = m->mf;
	size_t n_files = mf_part_count(mf), n = 0;
	struct stage_file *files = mc_stage_files(mf);
	struct stage_item *items = calloc(mf->n_tensors ? mf->n_tensors : 1, sizeof *items);
	int rc = 0;

	if (!files || !items) {
		rc = err_oom();
		goto out;
	}
	for (size_t i = 0; rc == 0 && i < mf->n_tensors; i++) {
		const struct mf_tensor *t = &mf->tensors[i];

		if (!want[i])
			continue;
		rc = devcache_alloc(m->dev, (size_t)(t->size ? t->size : 1), stream, &ptrs[i]);
		items[n++] = (struct stage_item){.file = t->part, .offset = t->offset,
						 .size = t->size, .dst = ptrs[i]};
	}
	if (rc == 0) {
		struct stage_job job = {.dev = m->dev, .files = files, .n_files = n_files,
					.items = items, .n_items = n, .stream = stream,
					.progress = progress, .progress_user = progress_user,
					.name = mf->path};

		rc = stage_upload(&job);
		*read_p = job.bytes_read;
		*uploaded_p = job.bytes_uploaded;
	}
	for (size_t i = 0; rc && i < mf->n_tensors; i++)
		if (ptrs[i]) {
			mc_dev_free(m, ptrs[i], mf->tensors[i].size);
			ptrs[i] = NULL;
		}
out:
	free(items);
	free(files);
	return mc_upload_failed(m, rc);
}

/* Progress over two steps, as one run from 0 to the whole. */
struct two_steps {
	const devcache_load_args_t *args;
	uint64_t base, total;
};

static int step_progress(void *user, uint64_t done, uint64_t total)
{
	struct two_steps *s = user;

	(void)total;
	return s->args->progress(s->args->progress_user, s->base + done, s->total);
}

int partial_place(struct devcache_model *m, const devcache_load_args_t *args)
{
	const devcache_model_file_t *mf = m->mf;
	bool copy = !tun_get(&m->dev->ctx->tun, mmap);
	size_t n = mf->n_tensors ? mf->n_tensors : 1;
	bool *want = calloc(n, sizeof *want);
	void **ptrs = calloc(n, sizeof *ptrs);
	uint64_t dev_total = 0, read = 0, uploaded = 0;
	int rc;

	if (!want || !ptrs) {
		free(want);
		free(ptrs);
		return err_oom();
	}
	/* The entry is loading, so no other thread moves its tensors; but
	 * devcache_cache_summary() reads every entry's dev_ptr, so the
	 * allocations go into ptrs and are published under the lock. */
	for (size_t i = 0; i < mf->n_tensors; i++)
		if ((want[i] = m->stamp[i] != 0))
			dev_total += mf->tensors[i].size;
	/* The host side first: with mmap the mapping is made, not read, and
	 * has no progress of its own. */
	struct two_steps steps = {.args = args, .total = dev_total + (copy ? mf->size : 0)};
	devcache_load_args_t host_args = *args;

	host_args.progress = copy && args->progress ? step_progress : NULL;
	host_args.progress_user = &steps;
	rc = mc_place_on_host(m, &host_args);
	steps.base = copy ? mf->size : 0;
	if (rc == 0)
		rc = upload(m, want, ptrs, args->stream, args->progress ? step_progress : NULL,
			    &steps, &read, &uploaded);
	if (rc == 0) {
		pthread_mutex_lock(&m->cache->lock);
		memcpy(m->dev_ptr, ptrs, mf->n_tensors * sizeof *ptrs);
		pthread_mutex_unlock(&m->cache->lock);
	}
	m->read += read;
	m->uploaded += uploaded;
	free(want);
	free(ptrs);
	return rc;
}

void partial_free(struct devcache_model *m)
{
	for (size_t i = 0; m->dev_ptr && i < m->mf->n_tensors; i++)
		if (m->dev_ptr[i])
			mc_dev_free(m, m->dev_ptr[i], m->mf->tensors[i].size);
	free(m->dev_ptr);
	free(m->stamp);
	m->dev_ptr = NULL;
	m->stamp = NULL;
}

void *partial_tensor(const struct devcache_model *m, size_t i, uint32_t *place_p)
{
	if (m->dev_ptr[i]) {
		*place_p = DEVCACHE_PLACE_DEVICE;
		return m->dev_ptr[i];
	}
	*place_p = DEVCACHE_PLACE_HOST;
	return mc_host_tensor(m, i);
}

uint64_t partial_device_bytes(const struct devcache_model *m, size_t *count_p)
{
	uint64_t bytes = 0;

	*count_p = 0;
	for (size_t i = 0; i < m->mf->n_tensors; i++)
		if (m->dev_ptr[i]) {
			bytes += m->mf->tensors[i].size;
			(*count_p)++;
		}
	return bytes;
}

/* ---- moving tensors ---------------------------------------------------------------- */

/* The tensors named (names NULL: all), marked in want; ENOENT for an
 * unknown name, before anything moves. */
static int mark(const struct devcache_model *m, const char *const *names, size_t n, bool *want)
{
	const devcache_model_file_t *mf = m->mf;

	if (!names) {
		for (size_t i = 0; i < mf->n_tensors; i++)
			want[i] = true;
		return 0;
	}
	for (size_t k = 0; k < n; k++) {
		long i = names[k] ? mf_index(mf, names[k]) : -1;

		if (i < 0)
			return err_set(names[k] ? DEVCACHE_ENOENT : DEVCACHE_EINVAL,
				       _("%s: no tensor named '%s'"), mf->path,
				       names[k] ? names[k] : "(null)");
		want[i] = true;
	}
	return 0;
}

/* Tensor i of e moves to the host (host true) or to the device: where
 * its host part is mapped, RAM's charge follows its bytes.  Called with
 * the cache locked. */
static void charge_host_part(struct model_cache *c, struct devcache_model *e, size_t i, bool host)
{
	uint64_t size = e->mf->tensors[i].size;

	if (!e->host_mapped)
		return;
	e->host_charge += host ? size : -size;
	c->ram_used += host ? size : -size;
}

/* Give tensor i of e's device memory back: it is on the host again. */
static void to_host(struct model_cache *c, struct devcache_model *e, size_t i)
{
	uint64_t charge = tensor_charge(e->mf->tensors[i].size);

	mc_dev_free(e, e->dev_ptr[i], e->mf->tensors[i].size);
	e->dev_ptr[i] = NULL;
	e->bytes -= charge;
	*mc_used_of(c, e->dev) -= charge;
	charge_host_part(c, e, i, true);
}

struct victim {
	struct devcache_model *e;
	size_t i;
	uint64_t stamp;
};

static int by_stamp(const void *x, const void *y)
{
	const struct victim *a = x, *b = y;

	return a->stamp < b->stamp ? -1 : a->stamp > b->stamp;
}

/* The device tensors that may go back to the host to make room for m's
 * request, least recently used first: those of unlocked partial models on
 * the device, and m's own outside the request.  Returns how many; *bytes_p
 * gets their charge.  Called with the cache locked. */
static int victims(struct model_cache *c, const struct devcache_model *m, const bool *want,
		   struct victim **v_p, size_t *n_p, uint64_t *bytes_p)
{
	size_t n = 0, cap = 0;
	struct victim *v = NULL;

	*bytes_p = 0;
	for (struct devcache_model *e = c->head; e; e = e->next) {
		if (!e->partial || e->dev != m->dev || e->state != ENTRY_READY ||
		    (e != m && e->locks > 0))
			continue;
		for (size_t i = 0; i < e->mf->n_tensors; i++) {
			if (!e->dev_ptr[i] || (e == m && want[i]))
				continue;
			if (n == cap) {
				cap = cap ? 2 * cap : 64;
				struct victim *p = realloc(v, cap * sizeof *v);
				if (!p) {
					free(v);
					return err_oom();
				}
				v = p;
			}
			v[n++] = (struct victim){e, i, e->stamp[i]};
			*bytes_p += tensor_charge(e->mf->tensors[i].size);
		}
	}
	if (n > 1)
		qsort(v, n, sizeof *v, by_stamp);
	*v_p = v;
	*n_p = n;
	return 0;
}

/* What evicting every unlocked whole model on m's device would free
 * (partial ones are counted through their tensors). */
static uint64_t unlocked_models(struct model_cache *c, const struct devcache_model *m)
{
	uint64_t bytes = 0;

	for (struct devcache_model *e = c->head; e; e = e->next)
		if (e != m && e->dev == m->dev && !e->ram_copy && !e->partial && e->locks == 0 &&
		    e->state == ENTRY_READY)
			bytes += e->bytes;
	return bytes;
}

/* Make need bytes of room on m's device, or fail having moved nothing.
 * Called with the cache locked. */
static int room_for(struct model_cache *c, struct devcache_model *m, const bool *want,
		    uint64_t need)
{
	uint64_t *used = mc_used_of(c, m->dev), budget = mc_budget_of(c, m->dev), spare;
	struct victim *v = NULL;
	size_t n = 0;
	int rc;

	if ((rc = victims(c, m, want, &v, &n, &spare)))
		return rc;
	spare += unlocked_models(c, m);
	if (*used + need > budget + spare) {
		char need_s[32], budget_s[32];

		free(v);
		format_bytes(need, need_s, sizeof need_s);
		format_bytes(budget, budget_s, sizeof budget_s);
		return err_set(DEVCACHE_ENOMEM,
			       _("%s: the tensors asked for need %s more on %s, but the cache's "
				 "budget there (max_cache_vram) is %s and what cannot be moved "
				 "holds %llu bytes of it"),
			       m->mf->path, need_s, m->dev->id, budget_s,
			       (unsigned long long)(*used - spare));
	}
	for (size_t k = 0; k < n && *used + need > budget; k++)
		to_host(c, v[k].e, v[k].i);
	free(v);
	if (*used + need > budget)
		mc_evict_for(c, m->dev, need, 0);
	return 0;
}

/* m->locks and m->partial change under the cache lock (another thread
 * loads or releases the model, or moves a whole model to the host), so
 * they are read under it.  whole: a fully loaded model is accepted too
 * (not one placed on the host). */
static int check_model(const struct devcache_model *m, const char *fn, bool whole)
{
	int locks;
	bool partial;

	if (!m)
		return err_set(DEVCACHE_EINVAL, _("%s: NULL argument"), fn);
	pthread_mutex_lock(&m->cache->lock);
	locks = m->locks;
	partial = m->partial;
	pthread_mutex_unlock(&m->cache->lock);
	if (!partial && (!whole || mc_is_host(m->dev)))
		return err_set(DEVCACHE_EINVAL, _("%s: %s was not loaded partially (partial_loading)"),
			       fn, m->mf->path);
	if (locks == 0)
		return err_set(DEVCACHE_EINVAL, _("%s: %s is not locked: load it first"), fn,
			       m->mf->path);
	return 0;
}

/* Wait while another thread moves m's tensors.  Called with the cache
 * locked. */
static void wait_ready(struct model_cache *c, const struct devcache_model *m)
{
	while (m->state != ENTRY_READY)
		pthread_cond_wait(&c->ready, &c->lock);
}

/* Make the tensors marked in want resident on the device. */
static int resident(devcache_model_t *m, const bool *want, devcache_stream_t stream)
{
	size_t count = m->mf->n_tensors ? m->mf->n_tensors : 1;
	bool *fetch = NULL;
	void **ptrs = NULL;
	uint64_t need = 0, read = 0, uploaded = 0;
	struct model_cache *c = m->cache;
	int rc = 0;

	if (!(fetch = calloc(count, sizeof *fetch)) || !(ptrs = calloc(count, sizeof *ptrs))) {
		rc = err_oom();
		goto out;
	}
	for (size_t i = 0; i < m->mf->n_tensors; i++)
		if (want[i] && m->mf->tensors[i].size > alloc_max_request(m->dev)) {
			rc = mc_tensor_too_large(m, i, alloc_max_request(m->dev));
			goto out;
		}
	pthread_mutex_lock(&c->lock);
	wait_ready(c, m);
	/* Uploads read the files, which no longer hold its tensors. */
	if ((rc = guard_check(m))) {
		pthread_mutex_unlock(&c->lock);
		goto out;
	}
	for (size_t i = 0; i < m->mf->n_tensors; i++) {
		if (want[i] && m->dev_ptr[i])
			m->stamp[i] = ++c->clock; /* there already: used now */
		else if ((fetch[i] = want[i]))
			need += tensor_charge(m->mf->tensors[i].size);
	}
	if (need == 0 || (rc = room_for(c, m, want, need))) {
		pthread_mutex_unlock(&c->lock);
		goto out;
	}
	/* Charged now, so that other loads see the room taken. */
	m->bytes += need;
	*mc_used_of(c, m->dev) += need;
	mc_peaks(c);
	m->state = ENTRY_LOADING;
	m->loader = pthread_self();
	pthread_mutex_unlock(&c->lock);
	rc = upload(m, fetch, ptrs, stream, NULL, NULL, &read, &uploaded);
	pthread_mutex_lock(&c->lock);
	if (rc) {
		m->bytes -= need;
		*mc_used_of(c, m->dev) -= need;
	} else {
		for (size_t i = 0; i < m->mf->n_tensors; i++)
			if (fetch[i]) {
				m->dev_ptr[i] = ptrs[i];
				m->stamp[i] = ++c->clock;
				charge_host_part(c, m, i, false);
			}
		c->stats.bytes_read += read;
		c->stats.bytes_uploaded += uploaded;
	}
	m->state = ENTRY_READY;
	pthread_cond_broadcast(&c->ready);
	pthread_mutex_unlock(&c->lock);
out:
	free(fetch);
	free(ptrs);
	return mf_name_oom(m->mf->path, rc);
}

int devcache_model_make_resident(devcache_model_t *m, const char *const *names, size_t n,
				 devcache_stream_t stream)
{
	bool *want;
	int rc;

	if ((rc = check_model(m, "devcache_model_make_resident", false)))
		return rc;
	if (!(want = calloc(m->mf->n_tensors ? m->mf->n_tensors : 1, sizeof *want)))
		return mf_name_oom(m->mf->path, err_oom());
	if ((rc = mark(m, names, n, want)) == 0)
		rc = resident(m, want, stream);
	free(want);
	return rc;
}

/* ---- a whole model to the host ----------------------------------------------------- */

static devcache_device_t *host_of(const struct model_cache *c)
{
	for (size_t i = 0; i < c->ctx->n_devices; i++)
		if (mc_is_host(&c->ctx->devices[i]))
			return &c->ctx->devices[i];
	return NULL;
}

/* The files' host placement made for a whole model, undone. */
static void unplace_host(struct devcache_model *m)
{
	for (size_t i = 0; m->maps && i < mf_part_count(m->mf); i++) {
		guard_remove(&m->maps[i]);
		if (m->maps[i].p)
			munmap(m->maps[i].p, m->maps[i].len);
	}
	free(m->maps);
	m->maps = NULL;
}

int partial_from_whole(struct model_cache *c, struct devcache_model *m)
{
	const devcache_model_file_t *mf = m->mf;
	size_t n = mf->n_tensors ? mf->n_tensors : 1;
	devcache_load_args_t args = {.struct_size = sizeof args};
	void **dev_ptr = NULL;
	uint64_t *stamp = NULL, charge = 0;
	bool mapped = tun_get(&c->ctx->tun, mmap);
	int rc;

	m->state = ENTRY_LOADING;
	m->loader = pthread_self();
	pthread_mutex_unlock(&c->lock);
	rc = mc_place_on_host(m, &args);
	if (rc == 0 && (!(dev_ptr = calloc(n, sizeof *dev_ptr)) || !(stamp = calloc(n, sizeof *stamp))))
		rc = err_oom();
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < mf->n_tensors; i++)
		charge += mf->tensors[i].size;
	if (!mapped)
		charge = mf->size;
	if (rc == 0) {
		devcache_device_t *host = host_of(c);

		mc_evict_for(c, host, charge, 0);
		if (c->ram_used + charge > c->ram_budget) {
			char need_s[32], budget_s[32];

			format_bytes(charge, need_s, sizeof need_s);
			format_bytes(c->ram_budget, budget_s, sizeof budget_s);
			rc = err_set(DEVCACHE_ENOMEM,
				     _("%s: its host part needs %s, but the cache's budget there "
				       "(max_cache_ram, %s) is taken by locked models"),
				     mf->path, need_s, budget_s);
		}
	}
	if (rc) {
		free(dev_ptr);
		free(stamp);
		unplace_host(m);
	} else {
		chunks_free(m);
		c->vram_used[mc_dev_index(c, m->dev)] -= m->bytes;
		m->bytes = 0;
		m->dev_ptr = dev_ptr;
		m->stamp = stamp;
		m->host_mapped = mapped;
		m->host_charge = charge;
		c->ram_used += charge;
		m->partial = true;
		c->stats.offloads++;
		mc_peaks(c);
	}
	m->state = ENTRY_READY;
	pthread_cond_broadcast(&c->ready);
	return rc;
}

/* A whole model (locked by the caller) to the host, if it is one.  Called
 * with the cache locked. */
static int whole_to_host(struct model_cache *c, struct devcache_model *m)
{
	wait_ready(c, m);
	return m->partial ? 0 : partial_from_whole(c, m);
}

int devcache_model_move_to_host(devcache_model_t *m, const char *const *names, size_t n)
{
	struct model_cache *c;
	bool *want;
	int rc;

	if ((rc = check_model(m, "devcache_model_move_to_host", true)))
		return rc;
	c = m->cache;
	if (!(want = calloc(m->mf->n_tensors ? m->mf->n_tensors : 1, sizeof *want)))
		return mf_name_oom(m->mf->path, err_oom());
	if ((rc = mark(m, names, n, want)) == 0) {
		pthread_mutex_lock(&c->lock);
		bool whole = !m->partial;
		if ((rc = whole_to_host(c, m)) == 0) {
			wait_ready(c, m);
			for (size_t i = 0; i < m->mf->n_tensors; i++)
				if (want[i] && m->dev_ptr[i])
					to_host(c, m, i);
		}
		pthread_mutex_unlock(&c->lock);
		/* A whole model goes to the host whole; the tensors not named
		 * come back, each in an allocation of its own. */
		if (rc == 0 && whole && names) {
			for (size_t i = 0; i < m->mf->n_tensors; i++)
				want[i] = !want[i];
			rc = resident(m, want, NULL);
		}
	}
	free(want);
	return mf_name_oom(m->mf->path, rc);
}

int devcache_model_set_device_bytes(devcache_model_t *m, uint64_t device_bytes,
				    devcache_stream_t stream)
{
	struct model_cache *c;
	bool *want, stop = false;
	uint64_t sum = 0;
	int rc;

	if ((rc = check_model(m, "devcache_model_set_device_bytes", true)))
		return rc;
	c = m->cache;
	if (!(want = calloc(m->mf->n_tensors ? m->mf->n_tensors : 1, sizeof *want)))
		return mf_name_oom(m->mf->path, err_oom());
	/* The largest prefix, in the model's order, within device_bytes. */
	for (size_t i = 0; i < m->mf->n_tensors && !stop; i++) {
		uint64_t charge = tensor_charge(m->mf->tensors[i].size);

		stop = m->mf->tensors[i].size > alloc_max_request(m->dev) ||
		       charge > device_bytes - sum;
		if (!stop) {
			want[i] = true;
			sum += charge;
		}
	}
	pthread_mutex_lock(&c->lock);
	if ((rc = whole_to_host(c, m)) == 0) {
		wait_ready(c, m);
		for (size_t i = 0; i < m->mf->n_tensors; i++)
			if (!want[i] && m->dev_ptr[i])
				to_host(c, m, i);
	}
	pthread_mutex_unlock(&c->lock);
	if (rc == 0)
		rc = resident(m, want, stream);
	free(want);
	return mf_name_oom(m->mf->path, rc);
}

void partial_offload(struct model_cache *c, struct devcache_model *m)
{
	for (size_t i = 0; i < m->mf->n_tensors; i++)
		if (m->dev_ptr[i])
			to_host(c, m, i);
	c->stats.offloads++;
}
