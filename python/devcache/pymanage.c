/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pymanage.c - the model cache driven model by model from Python: Context.models(), evict(), offload(), make_room(), cache_device_stats(), Model.lock(), evict() and set_device_bytes(). */
#include "pydevcache.h"

static const char *const residence[] = {"", "device", "host", "ram_copy", "partial"};

static PyObject *model_dict(const devcache_cached_model_t *d, DeviceObject *dev)
{
	PyObject *path = PyUnicode_DecodeFSDefault(d->path);
	PyObject *v;

	if (!path)
		return NULL;
	v = Py_BuildValue("{s:N,s:O,s:s,s:O,s:i,s:O,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d}", "path", path,
			  "device", (PyObject *)dev, "where",
			  d->where > 0 && d->where <= 4 ? residence[d->where] : "?", "writable",
			  d->writable ? Py_True : Py_False, "locks", d->locks, "locked",
			  d->locks ? Py_True : Py_False, "size", (unsigned long long)d->size,
			  "device_bytes", (unsigned long long)d->device_bytes, "host_bytes",
			  (unsigned long long)d->host_bytes, "charged_device",
			  (unsigned long long)d->charged_device, "charged_ram",
			  (unsigned long long)d->charged_ram, "working_mem",
			  (unsigned long long)d->working_mem, "hits", (unsigned long long)d->hits,
			  "last_use", d->last_use);
	return v;
}

PyObject *pdc_ctx_models(ContextObject *self, PyObject *Py_UNUSED(ignored))
{
	devcache_cached_model_t *l = NULL;
	PyObject *list = NULL;
	size_t n = 0;
	int rc;

	if (pdc_enter(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_cache_models(self->ctx, &l, &n);
	Py_END_ALLOW_THREADS
	if (rc) {
		pdc_leave(self);
		return pdc_raise(rc);
	}
	if (!(list = PyList_New((Py_ssize_t)n)))
		goto out;
	for (size_t i = 0; i < n; i++) {
		DeviceObject *dev = pdc_device_for(self, l[i].device);
		PyObject *d = dev ? model_dict(&l[i], dev) : NULL;

		Py_XDECREF(dev);
		if (!d) {
			Py_CLEAR(list);
			break;
		}
		PyList_SET_ITEM(list, (Py_ssize_t)i, d);
	}
out:
	devcache_cache_models_free(l, n);
	pdc_leave(self);
	return list;
}

/* The key arguments (path, device) of evict() and offload(). */
static PyObject *by_key(ContextObject *self, PyObject *args, PyObject *kw, const char *format,
			int (*fn)(devcache_ctx_t *, const char *, devcache_device_t *))
{
	static char *names[] = {"path", "device", NULL};
	PyObject *path_bytes = NULL, *device_obj = NULL;
	DeviceObject *dev = NULL;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, format, names, PyUnicode_FSConverter, &path_bytes,
					 &device_obj))
		return NULL;
	if (!(dev = pdc_device_arg(self, device_obj)) || pdc_enter(self) < 0) {
		Py_XDECREF(dev);
		Py_DECREF(path_bytes);
		return NULL;
	}
	const char *path = PyBytes_AS_STRING(path_bytes);
	Py_BEGIN_ALLOW_THREADS
	rc = fn(self->ctx, path, dev->dev);
	Py_END_ALLOW_THREADS
	pdc_leave(self);
	Py_DECREF(dev);
	Py_DECREF(path_bytes);
	if (rc)
		return pdc_raise(rc);
	Py_RETURN_NONE;
}

PyObject *pdc_ctx_evict(ContextObject *self, PyObject *args, PyObject *kw)
{
	return by_key(self, args, kw, "O&O:evict", devcache_cache_evict);
}

PyObject *pdc_ctx_offload(ContextObject *self, PyObject *args, PyObject *kw)
{
	return by_key(self, args, kw, "O&O:offload", devcache_cache_offload);
}

PyObject *pdc_ctx_make_room(ContextObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = {"device", "bytes", NULL};
	PyObject *device_obj;
	unsigned long long bytes;
	uint64_t freed = 0;
	DeviceObject *dev;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OK:make_room", names, &device_obj, &bytes))
		return NULL;
	if (!(dev = pdc_device_arg(self, device_obj)))
		return NULL;
	if (pdc_enter(self) < 0) {
		Py_DECREF(dev);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_cache_make_room(self->ctx, dev->dev, bytes, &freed);
	Py_END_ALLOW_THREADS
	pdc_leave(self);
	Py_DECREF(dev);
	if (rc)
		return pdc_raise(rc);
	return PyLong_FromUnsignedLongLong(freed);
}

PyObject *pdc_ctx_device_stats(ContextObject *self, PyObject *device_obj)
{
	devcache_cache_device_stats_t s;
	DeviceObject *dev;
	int rc;

	if (!(dev = pdc_device_arg(self, device_obj)))
		return NULL;
	if (pdc_enter(self) < 0) {
		Py_DECREF(dev);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_cache_device_stats(self->ctx, dev->dev, &s);
	Py_END_ALLOW_THREADS
	pdc_leave(self);
	Py_DECREF(dev);
	if (rc)
		return pdc_raise(rc);
	return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "used",
			     (unsigned long long)s.used, "budget", (unsigned long long)s.budget,
			     "peak_used", (unsigned long long)s.peak_used, "working_mem",
			     (unsigned long long)s.working_mem, "allocated_bytes",
			     (unsigned long long)s.allocated_bytes, "reserved_bytes",
			     (unsigned long long)s.reserved_bytes, "device_allocated_bytes",
			     (unsigned long long)s.device_allocated_bytes, "device_reserved_bytes",
			     (unsigned long long)s.device_reserved_bytes);
}

/* ---- Model ------------------------------------------------------------------------ */

PyObject *pdc_model_lock(ModelObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = {"working_mem", NULL};
	unsigned long long working = 0;
	ModelObject *m;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|K:lock", names, &working) ||
	    pdc_model_usable(self) < 0)
		return NULL;
	/* The new handle holds the context busy, as a load's does. */
	if (pdc_enter(self->owner) < 0)
		return NULL;
	pdc_model_pin(self);
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_model_lock(self->model, working);
	Py_END_ALLOW_THREADS
	if (rc || !(m = PyObject_New(ModelObject, &Model_Type))) {
		if (rc == 0) {
			Py_BEGIN_ALLOW_THREADS
			devcache_model_release(self->model);
			Py_END_ALLOW_THREADS
		}
		pdc_model_unpin(self);
		pdc_leave(self->owner);
		return rc ? pdc_raise(rc) : NULL;
	}
	m->owner = (ContextObject *)Py_NewRef(self->owner);
	m->device = (DeviceObject *)Py_NewRef(self->device);
	m->model = self->model;
	m->file = self->file;
	m->released = 0;
	m->writable = self->writable;
	m->host = self->host;
	m->views = 0;
	m->moving = 0;
	m->metadata = NULL;
	m->result = Py_NewRef(self->result);
	m->path = Py_NewRef(self->path);
	pdc_model_unpin(self);
	return (PyObject *)m;
}

PyObject *pdc_model_evict(ModelObject *self, PyObject *Py_UNUSED(ignored))
{
	int rc;

	if (pdc_model_usable(self) < 0)
		return NULL;
	pdc_model_pin(self);
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_model_evict(self->model);
	Py_END_ALLOW_THREADS
	pdc_model_unpin(self);
	if (rc)
		return pdc_raise(rc);
	Py_RETURN_NONE;
}

PyObject *pdc_model_set_device_bytes(ModelObject *self, PyObject *arg)
{
	unsigned long long bytes = PyLong_AsUnsignedLongLong(arg);
	int rc;

	if (PyErr_Occurred() || pdc_model_usable(self) < 0)
		return NULL;
	if (self->moving)
		return pdc_raise_msg(DEVCACHE_EBUSY, "%U: another thread is moving its tensors",
				     self->path);
	if (self->views > 0)
		return pdc_raise_msg(DEVCACHE_EBUSY,
				     "%U: %zd tensor view(s) are alive and a move would change "
				     "their addresses: drop them first",
				     self->path, self->views);
	pdc_model_pin(self);
	self->moving = 1;
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_model_set_device_bytes(self->model, bytes, NULL);
	Py_END_ALLOW_THREADS
	self->moving = 0;
	pdc_model_unpin(self);
	if (rc)
		return pdc_raise(rc);
	Py_RETURN_NONE;
}
