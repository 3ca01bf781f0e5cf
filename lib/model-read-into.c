/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-read-into.c - devcache_model_file_read_tensors(): a model's tensors streamed through the staging ring into memory the caller owns. */
#include "model-cache.h"
#include "model-file.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/*
 * The model cache's upload path without the cache: the destinations are
 * the caller's, so nothing is allocated on the device, charged to a
 * budget or kept.  Every destination is checked before anything is read,
 * each failure recorded in its status; then the items go to
 * stage_upload() sorted by file and offset, as it wants them (the ring,
 * load_workers, direct_io, fadvise_sequential and evict_page_cache as for
 * a load).
 */

static int read_args(const devcache_read_args_t *in, devcache_read_args_t *a)
{
	memset(a, 0, sizeof *a);
	a->struct_size = sizeof *a;
	if (!in)
		return 0;
	if (in->struct_size < offsetof(devcache_read_args_t, result) || in->struct_size > sizeof *a)
		return err_set(DEVCACHE_EINVAL,
			       _("devcache_model_file_read_tensors: struct_size %zu is not that of "
				 "any known devcache_read_args_t"),
			       in->struct_size);
	memcpy(a, in, in->struct_size);
	if (a->flags)
		return err_set(DEVCACHE_EINVAL,
			       _("devcache_model_file_read_tensors: unknown flags 0x%x"), a->flags);
	return 0;
}

/* Check d: its status, and (when no earlier one failed) the message. */
static int check_dest(const devcache_model_file_t *mf, devcache_tensor_dest_t *d, bool *seen,
		      bool first)
{
	long t = d->name ? mf_index(mf, d->name) : -1;
	uint64_t size = t >= 0 ? mf->tensors[t].size : 0;
	int rc = DEVCACHE_EINVAL;

	if (!d->name) {
		if (first)
			err_set(rc, _("%s: a destination names no tensor"), mf->path);
	} else if (t < 0) {
		rc = DEVCACHE_ENOENT;
		if (first)
			err_set(rc, _("%s: no tensor named '%s'"), mf->path, d->name);
	} else if (seen[t]) {
		if (first)
			err_set(rc, _("%s: tensor '%s' is named twice"), mf->path, d->name);
	} else if (!d->dst && size) {
		if (first)
			err_set(rc, _("%s: tensor '%s' has no destination"), mf->path, d->name);
	} else if (d->size < size) {
		if (first)
			err_set(rc, _("%s: tensor '%s' is %llu bytes, its destination only %llu"),
				mf->path, d->name, (unsigned long long)size,
				(unsigned long long)d->size);
	} else {
		rc = 0;
	}
	if (t >= 0)
		seen[t] = true;
	return d->status = rc;
}

static int by_place(const void *x, const void *y)
{
	const struct stage_item *a = x, *b = y;

	if (a->file != b->file)
		return a->file < b->file ? -1 : 1;
	return a->offset < b->offset ? -1 : a->offset > b->offset;
}

int devcache_model_file_read_tensors(const devcache_model_file_t *mf, devcache_device_t *dev,
				     devcache_tensor_dest_t *dests, size_t n,
				     const devcache_read_args_t *args_in)
{
	double t0 = mc_now_seconds();
	devcache_read_args_t args;
	struct stage_item *items = NULL;
	struct stage_file *files = NULL;
	bool *seen = NULL;
	size_t n_items = 0;
	int rc, first = 0;

	if (!mf || !dev || (n && !dests))
		return err_set(DEVCACHE_EINVAL, _("devcache_model_file_read_tensors: NULL argument"));
	if ((rc = read_args(args_in, &args)))
		return rc;
	seen = calloc(mf->n_tensors ? mf->n_tensors : 1, sizeof *seen);
	items = calloc(n ? n : 1, sizeof *items);
	files = mc_stage_files(mf);
	if (!seen || !items || !files) {
		rc = err_oom();
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		rc = check_dest(mf, &dests[i], seen, first == 0);
		first = first ? first : rc;
	}
	if ((rc = first))
		goto out;
	for (size_t i = 0; i < n; i++) {
		const struct mf_tensor *t = &mf->tensors[mf_index(mf, dests[i].name)];

		if (t->size)
			items[n_items++] = (struct stage_item){.file = t->part, .offset = t->offset,
							       .size = t->size, .dst = dests[i].dst};
	}
	qsort(items, n_items, sizeof *items, by_place);

	devcache_ctx_t *ctx = dev->ctx;
	struct stage_job job = {.dev = dev, .files = files, .n_files = mf_part_count(mf),
				.items = items, .n_items = n_items, .stream = args.stream,
				.progress = args.progress, .progress_user = args.progress_user,
				.name = mf->path};

	for (size_t i = 0; tun_get(&ctx->tun, fadvise_sequential) && i < job.n_files; i++)
		posix_fadvise(files[i].fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	rc = stage_upload(&job);
	for (size_t i = 0; rc == 0 && tun_get(&ctx->tun, evict_page_cache) && i < job.n_files; i++)
		posix_fadvise(files[i].fd, 0, 0, POSIX_FADV_DONTNEED);
	if (rc && rc != DEVCACHE_ECANCELED &&
	    strncmp(devcache_last_error(), mf->path, strlen(mf->path)) != 0) {
		char why[1024];

		err_format(why, sizeof why, "%s", devcache_last_error());
		rc = err_set(rc, _("%s: cannot copy its tensors to %s: %s"), mf->path, dev->id, why);
	}
	if (rc == 0 && args.result) {
		*args.result = (devcache_load_result_t){.bytes_read = job.bytes_read,
							.bytes_uploaded = job.bytes_uploaded,
							.seconds = mc_now_seconds() - t0};
	}
out:
	free(seen);
	free(items);
	free(files);
	return rc;
}
