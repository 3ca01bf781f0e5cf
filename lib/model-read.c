/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-read.c - a loaded tensor's bytes copied into host memory from wherever they are, never through a mapping of a file that may have shrunk. */
#include "model-cache.h"
#include "model-file.h"

#include <string.h>

/*
 * A host-placed model is the file's mapping (the mmap tunable), or a copy
 * of it in anonymous memory.  Either is copied from directly: a page of a
 * mapping whose file another process shrank reads zeros (model-guard.c),
 * so the guard is asked before the copy, which devcache_model_tensor()
 * does, and after it, which tells a copy that took in such zeros, or bytes
 * another process wrote meanwhile, from a good one.
 */
/* A partially loaded model's tensor can go back to the host, and its
 * device memory to another allocation, in the middle of a copy, when
 * another thread that holds the model moves tensors: so its place is
 * looked up, and a device tensor copied, under the cache lock, which every
 * move takes.  Returns 0 once copied from the device; 1 with *host_p set
 * when the tensor is on the host; or an error. */
static int copy_partial(const devcache_model_t *m, const char *name, void *dst, size_t size,
			void **host_p)
{
	struct model_cache *c = m->cache;
	uint32_t place;
	int rc = 1;

	pthread_mutex_lock(&c->lock);
	void *data = partial_tensor(m, (size_t)mf_index(m->mf, name), &place);
	if (place == DEVCACHE_PLACE_DEVICE)
		rc = devcache_copy_to_host(m->dev, dst, data, size, NULL);
	else
		*host_p = data;
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int devcache_model_tensor_copy(const devcache_model_t *m, const char *name, void *dst, size_t size)
{
	devcache_tensor_info_t info;
	void *data;
	int rc;

	if (!m || !name || (!dst && size))
		return err_set(DEVCACHE_EINVAL, _("devcache_model_tensor_copy: NULL argument"));
	if ((rc = devcache_model_tensor(m, name, &info, &data)))
		return rc;
	if (size != info.size)
		return err_set(DEVCACHE_EINVAL, _("%s: tensor '%s' is %llu bytes, not %zu"),
			       m->mf->path, info.name, (unsigned long long)info.size, size);
	if (size == 0)
		return 0;
	pthread_mutex_lock(&m->cache->lock);
	bool partial = m->partial;
	pthread_mutex_unlock(&m->cache->lock);
	if (partial) {
		if ((rc = copy_partial(m, name, dst, size, &data)) <= 0)
			return rc;
	} else if (info.place == DEVCACHE_PLACE_DEVICE) {
		return devcache_copy_to_host(m->dev, dst, data, size, NULL);
	}
	memcpy(dst, data, size);
	/* The file changed during the copy: what was copied is not the model. */
	if (m->maps)
		return guard_check_part(m, info.shard);
	return 0;
}
