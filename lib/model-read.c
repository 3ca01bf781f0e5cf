/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-read.c - a loaded tensor's bytes copied into host memory from wherever they are, never through a mapping of a file that may have shrunk. */
#include "model-cache.h"
#include "model-file.h"

#include <string.h>
#include <sys/stat.h>

/*
 * A host-placed model is the file's mapping (the mmap tunable), and a
 * mapped page past the end of a file that was truncated raises SIGBUS when
 * it is read.  The library's own copies of such a tensor (devcache dump,
 * the Python package's tobytes()) read the file through pread() instead:
 * a read-only mapping is MAP_SHARED, so the file holds exactly what the
 * mapping shows, and a file that has shrunk is a short read, an error
 * naming it.  A writable model is a private mapping whose pages the
 * program may have written, which only the mapping holds: there the file's
 * size is checked first, which leaves the moment between the check and the
 * copy unprotected.  A mapping moved into memory when its file was opened
 * for writing (lease_signal) holds the bytes as they were loaded, and is
 * copied from.
 */
/* Whether file part's mapping was moved into memory when the file was
 * opened for writing (model-lease.c): it no longer shows the file. */
static bool moved(const devcache_model_t *m, size_t part)
{
	return __atomic_load_n(&m->maps[part].lease, __ATOMIC_ACQUIRE) == LEASE_MOVED;
}

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
	if (m->partial) {
		if ((rc = copy_partial(m, name, dst, size, &data)) <= 0)
			return rc;
	} else if (info.place == DEVCACHE_PLACE_DEVICE) {
		return devcache_copy_to_host(m->dev, dst, data, size, NULL);
	}
	/* Without mmap the host side is a copy in anonymous memory. */
	if (!m->dev->ctx->tun.v[TUN_mmap].u.b) {
		memcpy(dst, data, size);
		return 0;
	}
	const devcache_model_file_t *f = mf_part(m->mf, info.shard);
	if (!m->writable && !moved(m, info.shard)) {
		rc = mf_read(f, dst, size, info.offset, _("tensor data"));
		/* Moved meanwhile: the file may hold the writer's bytes already. */
		if (!moved(m, info.shard))
			return rc;
	}
	struct stat st;
	if (!moved(m, info.shard) &&
	    (fstat(f->fd, &st) != 0 || (uint64_t)st.st_size < info.offset + info.size))
		return mf_error(f, _("the file shrank while it was mapped: tensor '%s' is past its end"),
				info.name);
	memcpy(dst, data, size);
	return 0;
}
