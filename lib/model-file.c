/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-file.c - the parsed model file: the parsers' helpers, the index by name, closing, and the public accessors. */
#include "model-file.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mf_error(const struct devcache_model_file *mf, const char *fmt, ...)
{
	char fault[1024];
	va_list ap;

	/* Bounded and shown as err_set() would, so that quoting it keeps it. */
	va_start(ap, fmt);
	err_vformat(fault, sizeof fault, fmt, ap);
	va_end(ap);
	return err_set(DEVCACHE_EFORMAT, "%s: %s", mf->path, fault);
}

int mf_name_oom(const char *path, int rc)
{
	char why[1024];

	if (rc != DEVCACHE_ENOMEM || strstr(devcache_last_error(), path))
		return rc;
	snprintf(why, sizeof why, "%s", devcache_last_error());
	return err_set(rc, "%s: %s", path, why);
}

int mf_read(const struct devcache_model_file *mf, void *buf, size_t len, uint64_t off,
	    const char *what)
{
	char *p = buf;

	if (off > mf->size || len > mf->size - off)
		return mf_error(mf, _("the file ends at byte %llu, inside %s (bytes %llu to %llu)"),
				(unsigned long long)mf->size, what, (unsigned long long)off,
				(unsigned long long)off + len);
	while (len) {
		ssize_t n = pread(mf->fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return err_set(DEVCACHE_EIO, _("%s: cannot read %s: %s"), mf->path, what,
				       strerror(errno));
		/* Shorter than when it was opened: someone is writing it. */
		if (n == 0)
			return mf_error(mf, _("the file shrank while it was being read (%s)"), what);
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

struct mf_tensor *mf_add_tensor(struct devcache_model_file *mf, char *name)
{
	if (mf->n_tensors == mf->tensors_cap) {
		size_t cap = mf->tensors_cap ? 2 * mf->tensors_cap : 64;
		struct mf_tensor *t = cap <= MF_MAX_TENSORS ? realloc(mf->tensors, cap * sizeof *t) : NULL;

		if (!t) {
			free(name);
			if (cap > MF_MAX_TENSORS)
				mf_error(mf, _("more than %u tensors"), MF_MAX_TENSORS);
			else
				err_oom();
			return NULL;
		}
		mf->tensors = t;
		mf->tensors_cap = cap;
	}
	struct mf_tensor *t = &mf->tensors[mf->n_tensors++];
	memset(t, 0, sizeof *t);
	t->name = name;
	return t;
}

int mf_add_meta(struct devcache_model_file *mf, char *key, char *value_json)
{
	if (mf->n_meta == mf->meta_cap) {
		size_t cap = mf->meta_cap ? 2 * mf->meta_cap : 32;
		struct mf_meta *m = cap <= MF_MAX_METADATA ? realloc(mf->meta, cap * sizeof *m) : NULL;

		if (!m) {
			free(key);
			free(value_json);
			if (cap > MF_MAX_METADATA)
				return mf_error(mf, _("more than %u metadata entries"), MF_MAX_METADATA);
			return err_oom();
		}
		mf->meta = m;
		mf->meta_cap = cap;
	}
	mf->meta[mf->n_meta++] = (struct mf_meta){.key = key, .value = value_json,
						  .type = DEVCACHE_META_STRING, .src = mf};
	return 0;
}

static int by_name(const void *x, const void *y)
{
	const struct mf_tensor *a = *(struct mf_tensor *const *)x, *b = *(struct mf_tensor *const *)y;

	return strcmp(a->name, b->name);
}

/* The safetensors reader may have made the index already, sorted; a set's
 * merged list (mf_merge_tensors) is sorted here.  A name twice in a set is
 * in two shards: each part has been checked alone. */
int mf_index_tensors(struct devcache_model_file *mf)
{
	if (!mf->n_tensors)
		return 0;
	bool made = mf->by_name != NULL;
	if (!made && !(mf->by_name = malloc(mf->n_tensors * sizeof *mf->by_name)))
		return err_oom();
	for (size_t i = 0; !made && i < mf->n_tensors; i++)
		mf->by_name[i] = &mf->tensors[i];
	size_t sorted = 1;
	while (sorted < mf->n_tensors && by_name(&mf->by_name[sorted - 1], &mf->by_name[sorted]) < 0)
		sorted++;
	if (sorted < mf->n_tensors)
		qsort(mf->by_name, mf->n_tensors, sizeof *mf->by_name, by_name);
	for (size_t i = 1; i < mf->n_tensors; i++) {
		const struct mf_tensor *a = mf->by_name[i - 1], *b = mf->by_name[i];

		if (strcmp(a->name, b->name) != 0)
			continue;
		if (!mf->parts)
			return mf_error(mf, _("two tensors are named '%s'"), b->name);
		if (a->part > b->part)
			a = mf->by_name[i], b = mf->by_name[i - 1];
		return mf_error(mf, _("tensor '%s' is in two shards: %s and %s"), a->name,
				mf->parts[a->part]->path, mf->parts[b->part]->path);
	}
	return 0;
}

void devcache_model_file_close(devcache_model_file_t *mf)
{
	if (!mf)
		return;
	for (size_t i = 0; !mf->parts && i < mf->n_tensors; i++)
		free(mf->tensors[i].name);
	for (size_t i = 0; i < mf->n_parts; i++)
		devcache_model_file_close(mf->parts[i]);
	free(mf->parts);
	for (size_t i = 0; i < mf->n_meta; i++) {
		free(mf->meta[i].key);
		free(mf->meta[i].value);
		free(mf->meta[i].str);
	}
	free(mf->tensors);
	free(mf->meta);
	free(mf->by_name);
	free(mf->meta_by_key);
	if (mf->fd >= 0)
		close(mf->fd);
	free(mf->path);
	free(mf);
}

int devcache_model_file_format(const devcache_model_file_t *mf, unsigned *version_p)
{
	if (!mf)
		return err_set(DEVCACHE_EINVAL, _("devcache_model_file_format: NULL argument"));
	if (version_p)
		*version_p = mf->version;
	return mf->format;
}

size_t devcache_model_file_shard_count(const devcache_model_file_t *mf)
{
	return mf ? mf_part_count(mf) : 0;
}

int devcache_model_file_shard(const devcache_model_file_t *mf, size_t index, const char **path_p,
			      uint64_t *size_p)
{
	if (!mf || !path_p || !size_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_model_file_shard: NULL argument"));
	if (index >= mf_part_count(mf))
		return err_set(DEVCACHE_ENOENT, _("%s: no shard %zu (the model has %zu)"), mf->path,
			       index, mf_part_count(mf));
	*path_p = mf_part(mf, index)->path;
	*size_p = mf_part(mf, index)->size;
	return 0;
}

uint64_t devcache_model_file_size(const devcache_model_file_t *mf)
{
	return mf ? mf->size : 0;
}

uint64_t devcache_model_file_data_offset(const devcache_model_file_t *mf)
{
	return mf ? mf->data_offset : 0;
}

size_t devcache_model_file_tensor_count(const devcache_model_file_t *mf)
{
	return mf ? mf->n_tensors : 0;
}

void mf_tensor_info(const struct mf_tensor *t, devcache_tensor_info_t *info)
{
	memset(info, 0, sizeof *info);
	info->name = t->name;
	info->dtype = t->dtype;
	info->n_dims = t->n_dims;
	memcpy(info->shape, t->shape, sizeof info->shape);
	info->offset = t->offset;
	info->size = t->size;
	info->shard = t->part;
	info->dtype_id = t->dtype_id;
	info->align = mf_align_of(t->offset);
}

int devcache_model_file_tensor(const devcache_model_file_t *mf, size_t index,
			       devcache_tensor_info_t *info)
{
	if (!mf || !info)
		return err_set(DEVCACHE_EINVAL, _("devcache_model_file_tensor: NULL argument"));
	if (index >= mf->n_tensors)
		return err_set(DEVCACHE_ENOENT, _("%s: no tensor %zu (the file has %zu)"), mf->path,
			       index, mf->n_tensors);
	mf_tensor_info(&mf->tensors[index], info);
	return 0;
}

long mf_index(const struct devcache_model_file *mf, const char *name)
{
	size_t lo = 0, hi = mf->n_tensors;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(mf->by_name[mid]->name, name);

		if (c == 0)
			return (long)(mf->by_name[mid] - mf->tensors);
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

int devcache_model_file_find(const devcache_model_file_t *mf, const char *name,
			     devcache_tensor_info_t *info)
{
	if (!mf || !name || !info)
		return err_set(DEVCACHE_EINVAL, _("devcache_model_file_find: NULL argument"));
	long i = mf_index(mf, name);
	if (i < 0)
		return err_set(DEVCACHE_ENOENT, _("%s: no tensor named '%s'"), mf->path, name);
	mf_tensor_info(&mf->tensors[i], info);
	return 0;
}

size_t devcache_model_file_metadata_count(const devcache_model_file_t *mf)
{
	return mf ? mf->n_meta : 0;
}

int devcache_model_file_metadata(const devcache_model_file_t *mf, size_t index,
				 const char **key_p, const char **value_json_p)
{
	if (!mf || !key_p || !value_json_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_model_file_metadata: NULL argument"));
	if (index >= mf->n_meta)
		return err_set(DEVCACHE_ENOENT, _("%s: no metadata entry %zu (the file has %zu)"),
			       mf->path, index, mf->n_meta);
	*key_p = mf->meta[index].key;
	*value_json_p = mf->meta[index].value;
	return 0;
}
