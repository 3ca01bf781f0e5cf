/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-place.c - a new model's bytes where they go: its files mapped or copied into host memory, or its tensors uploaded to a device through the staging ring. */
#include "model-cache.h"
#include "model-file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

/* Zero-copy.  Pages come from the page cache as they are touched; should
 * another process shrink the file meanwhile, a page past its new end
 * raises SIGBUS, which the guard (model-guard.c) answers with zeros,
 * marking the model changed.  Its size is checked here, once the mapping
 * is guarded. */
static int map_file(struct devcache_model *m, size_t part, bool writable)
{
	const devcache_model_file_t *f = mf_part(m->mf, part);
	struct host_map *hm = &m->maps[part];
	int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ, rc;
	struct stat st;
	void *p;

	hm->len = f->size ? (size_t)f->size : 1;
	p = mmap(NULL, hm->len, prot, writable ? MAP_PRIVATE : MAP_SHARED, f->fd, 0);
	if (p == MAP_FAILED)
		return err_set(DEVCACHE_EIO, _("%s: cannot map: %s"), f->path, strerror(errno));
	hm->p = p;
	hm->mapped = true;
	if ((rc = guard_add(f, hm, prot)))
		return rc;
	if (fstat(f->fd, &st) != 0 || (uint64_t)st.st_size != f->size)
		return mf_error(f, _("the file changed size while it was being opened"));
	return 0;
}

/* ---- host placement: aligned copies ---------------------------------------------- */

/*
 * A mapping starts on a page, so a tensor's address there is aligned as
 * its file offset is: a safetensors header of 62 bytes leaves every tensor
 * 2-byte aligned.  With devcache_load_args_t.align, the tensors whose
 * offset is not a multiple of it are read (pread, not through the
 * mapping) into one anonymous block, each at a multiple of it; the others
 * stay zero-copy.  The block is charged to RAM with the mapping.
 */

uint64_t mc_unaligned_bytes(const devcache_model_file_t *mf, uint32_t align, uint64_t *count_p)
{
	uint64_t bytes = 0, count = 0;

	for (size_t i = 0; align > 1 && i < mf->n_tensors; i++)
		if (mf->tensors[i].offset % align) {
			bytes += mf->tensors[i].size;
			count++;
		}
	if (count_p)
		*count_p = count;
	return bytes;
}

void *mc_host_tensor(const struct devcache_model *m, size_t i)
{
	const struct mf_tensor *t = &m->mf->tensors[i];

	if (m->aligned && m->aligned[i])
		return m->aligned[i];
	return (char *)m->maps[t->part].p + t->offset;
}

void mc_aligned_free(struct devcache_model *m)
{
	if (m->aligned_block)
		munmap(m->aligned_block, m->aligned_len);
	free(m->aligned);
	m->aligned = NULL;
	m->aligned_block = NULL;
}

static int copy_unaligned(struct devcache_model *m)
{
	const devcache_model_file_t *mf = m->mf;
	uint64_t len = 0;
	char *p;
	int rc;

	for (size_t i = 0; i < mf->n_tensors; i++)
		if (mf->tensors[i].offset % m->align)
			len += (mf->tensors[i].size + m->align - 1) / m->align * m->align;
	if (!len)
		return 0;
	if (!(m->aligned = calloc(mf->n_tensors, sizeof *m->aligned)))
		return err_oom();
	p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return err_set(DEVCACHE_ENOMEM, _("%s: cannot allocate %llu bytes for aligned copies: %s"),
			       mf->path, (unsigned long long)len, strerror(errno));
	m->aligned_block = p;
	m->aligned_len = (size_t)len;
	for (size_t i = 0; i < mf->n_tensors; i++) {
		const struct mf_tensor *t = &mf->tensors[i];

		if (t->offset % m->align == 0)
			continue;
		if (t->size && (rc = mf_read(mf_part(mf, t->part), p, (size_t)t->size, t->offset,
					     _("tensor data"))))
			return rc;
		m->aligned[i] = p;
		m->read += t->size;
		p += (t->size + m->align - 1) / m->align * m->align;
	}
	if (!m->writable)
		mprotect(m->aligned_block, m->aligned_len, PROT_READ);
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
		return err_oom();
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = tun_get(&ctx->tun, mmap) ? map_file(m, i, args->flags & DEVCACHE_LOAD_WRITABLE)
					      : copy_file(m, i, args, &done, total);
	if (rc == 0 && m->align > 1)
		rc = copy_unaligned(m);
	if (rc == 0 && tun_get(&ctx->tun, mmap) && args->progress &&
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

int mc_place_on_device(struct devcache_model *m, const devcache_load_args_t *args)
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
		rc = err_oom();
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
		for (size_t i = 0; tun_get(&ctx->tun, evict_page_cache) && i < n_files; i++)
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
