/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pycow.c - the devcache Python extension's private host tensors: a writable model's copy-on-write pages given back to the file's.
 *
 * devcache.torch and devcache.safe_open hand out host tensors that are
 * writable views of a writable model: the files mapped private and
 * copy-on-write, so that an in-place op changes only the pages it
 * touches, in this process, never the file.  The cache shares that
 * mapping between every writable load of the file, so a page written
 * through one load would show in the next.  Two rules keep each load's
 * tensors the file's:
 *
 * - A load claims the mapping (_cow_claim) only while it is its only
 *   holder (the model's lock count is 1); it then discards every page
 *   written before (madvise MADV_DONTNEED: a private page of a file
 *   mapping reverts to the file's), and the Model is marked.  Otherwise
 *   (another load's tensors hold the mapping, or the model was copied
 *   into anonymous memory, mmap false, where discarding would give zeros)
 *   the claim fails and the caller copies the tensors instead.
 * - When the marked Model's last view goes, and it is still the only
 *   holder, its written pages are discarded again before its handle goes
 *   back: the memory they took returns at once, and the next claim has
 *   nothing to discard.
 *
 * Both run with the GIL held, so no Python code writes a tensor between
 * the lock count being read and the pages being discarded.
 */
#include "pydevcache.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Whether the model's host memory is the files' mappings, not a copy. */
static int model_is_mapped(ModelObject *m)
{
	char buf[16];

	if (!m->host || !m->writable)
		return 0;
	return devcache_config_get(m->owner->ctx, "mmap", buf, sizeof buf, NULL) == 0 &&
	       strcmp(buf, "true") == 0;
}

static int only_holder(devcache_model_t *model)
{
	devcache_model_info_t info;

	return devcache_model_info(model, &info) == 0 && info.locks == 1;
}

/* Give every page the model's tensors lie on back to the file: runs of
 * adjacent tensors in one call.  A run is widened to whole pages, which
 * belong to the tensors' own mapping (it maps each file from its start to
 * its end), so no other memory is touched.  Returns 0, the library's
 * error for a tensor (a file changed under its mapping), or the errno of
 * a failed madvise() as a positive number. */
static int discard_pages(devcache_model_t *model, const devcache_model_file_t *mf)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = 0, hi = 0;
	size_t n = devcache_model_file_tensor_count(mf);

	for (size_t i = 0; i <= n; i++) {
		devcache_tensor_info_t ti;
		void *data = NULL;
		uintptr_t a = 0, b = 0;

		if (i < n) {
			int rc = devcache_model_tensor_at(model, i, &ti, &data);

			if (rc)
				return rc;
			/* An aligned copy is anonymous memory: discarding
			 * it would give zeros, not the file's bytes. */
			if (!data || ti.size == 0 || (ti.flags & DEVCACHE_TENSOR_ALIGNED_COPY))
				continue;
			a = (uintptr_t)data & ~(page - 1);
			b = ((uintptr_t)data + ti.size + page - 1) & ~(page - 1);
			if (hi && a <= hi && b >= lo) {
				lo = a < lo ? a : lo;
				hi = b > hi ? b : hi;
				continue;
			}
		}
		if (hi && madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0)
			return errno;
		lo = a;
		hi = b;
	}
	return 0;
}

PyObject *pdc_cow_claim(PyObject *Py_UNUSED(self), PyObject *arg)
{
	ModelObject *m = (ModelObject *)arg;
	int rc;

	if (!PyObject_TypeCheck(arg, &Model_Type)) {
		PyErr_SetString(PyExc_TypeError, "devcache: _cow_claim takes a Model");
		return NULL;
	}
	if (m->released || !m->model) {
		PyErr_SetString(PyExc_ValueError, "devcache: the model is released");
		return NULL;
	}
	if (!model_is_mapped(m) || !only_holder(m->model))
		Py_RETURN_FALSE;
	if ((rc = discard_pages(m->model, m->file)) > 0)
		return pdc_raise_msg(DEVCACHE_EIO, "%U: cannot discard the pages written earlier: %s",
				     m->path, strerror(rc));
	if (rc < 0)
		return pdc_raise(rc);
	m->cow = 1;
	Py_RETURN_TRUE;
}

void pdc_cow_release(ModelObject *m)
{
	/* Best effort: should it fail, the next claim discards them. */
	if (m->cow && m->model && only_holder(m->model))
		(void)discard_pages(m->model, m->file);
}
