/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pycontext.c - the devcache Python extension's Context: opening and closing, its devices, backends, tunables and model cache. */
#include "pydevcache.h"

static int context_init(ContextObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = {"options", "config_files", "environment", NULL};
	const char *options = NULL;
	int files = 1, environment = 1, rc;
	devcache_open_args_t oa = {.struct_size = sizeof oa};
	devcache_ctx_t *ctx = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|z$pp:Context", names, &options, &files,
					 &environment))
		return -1;
	if (self->ctx) {
		PyErr_SetString(PyExc_RuntimeError, "devcache: the context is already open");
		return -1;
	}
	oa.options = options;
	oa.flags = (files ? 0 : DEVCACHE_OPEN_NO_FILES) | (environment ? 0 : DEVCACHE_OPEN_NO_ENV);
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_open_ex(&ctx, &oa);
	Py_END_ALLOW_THREADS
	if (rc) {
		pdc_raise(rc);
		return -1;
	}
	self->ctx = ctx;
	return 0;
}

static void context_dealloc(ContextObject *self)
{
	/* Every child holds a reference, so nothing is busy here. */
	if (self->ctx && !self->borrowed) {
		devcache_ctx_t *c = self->ctx;

		self->ctx = NULL;
		Py_BEGIN_ALLOW_THREADS
		devcache_close(c);
		Py_END_ALLOW_THREADS
	}
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *context_close(ContextObject *self, PyObject *Py_UNUSED(ignored))
{
	/* The process-wide torch context outlives every handle on it. */
	if (self->ctx && !self->closing && !self->borrowed) {
		self->closing = 1;
		self->busy++;
		pdc_leave(self);
	}
	Py_RETURN_NONE;
}

static PyObject *context_enter(ContextObject *self, PyObject *Py_UNUSED(ignored))
{
	if (!self->ctx || self->closing) {
		PyErr_SetString(PyExc_ValueError, "devcache: the context is closed");
		return NULL;
	}
	return Py_NewRef(self);
}

static PyObject *context_exit(ContextObject *self, PyObject *Py_UNUSED(args))
{
	return context_close(self, NULL);
}

static PyObject *device_new(ContextObject *ctx, devcache_device_t *dev)
{
	DeviceObject *d = PyObject_New(DeviceObject, &Device_Type);
	int rc;

	if (!d)
		return NULL;
	d->owner = (ContextObject *)Py_NewRef(ctx);
	d->dev = dev;
	rc = devcache_device_info(dev, &d->info);
	if (rc) {
		Py_DECREF(d);
		return pdc_raise(rc);
	}
	return (PyObject *)d;
}

static PyObject *context_devices(ContextObject *self, void *Py_UNUSED(closure))
{
	PyObject *t;
	size_t n;

	if (pdc_enter(self) < 0)
		return NULL;
	n = devcache_device_count(self->ctx);
	t = PyTuple_New((Py_ssize_t)n);
	for (size_t i = 0; t && i < n; i++) {
		devcache_device_t *dev;
		int rc = devcache_device_at(self->ctx, i, &dev);
		PyObject *d = rc ? pdc_raise(rc) : device_new(self, dev);

		if (!d) {
			Py_CLEAR(t);
			break;
		}
		PyTuple_SET_ITEM(t, (Py_ssize_t)i, d);
	}
	pdc_leave(self);
	return t;
}

/* Devices are made on demand (a cached tuple would be a reference cycle);
 * two Device objects of one device compare equal. */
DeviceObject *pdc_device_for(ContextObject *ctx, devcache_device_t *dev)
{
	return (DeviceObject *)device_new(ctx, dev);
}

DeviceObject *pdc_device_arg(ContextObject *ctx, PyObject *obj)
{
	devcache_device_t *dev;
	const char *name;
	int rc;

	if (PyObject_TypeCheck(obj, &Device_Type)) {
		DeviceObject *d = (DeviceObject *)obj;

		if (d->owner != ctx) {
			PyErr_SetString(PyExc_ValueError,
					"devcache: the device belongs to another context");
			return NULL;
		}
		return (DeviceObject *)Py_NewRef(d);
	}
	if (!PyUnicode_Check(obj)) {
		PyErr_Format(PyExc_TypeError,
			     "devcache: a device is a name such as \"cuda:0\" or a Device, not %.100s",
			     Py_TYPE(obj)->tp_name);
		return NULL;
	}
	if (!(name = pdc_name(obj, "a device name")))
		return NULL;
	if (pdc_enter(ctx) < 0)
		return NULL;
	rc = devcache_device_get(ctx->ctx, name, &dev);
	pdc_leave(ctx);
	if (rc)
		return (DeviceObject *)pdc_raise(rc);
	return pdc_device_for(ctx, dev);
}

static PyObject *context_device(ContextObject *self, PyObject *name)
{
	return (PyObject *)pdc_device_arg(self, name);
}

static PyObject *context_backends(ContextObject *self, void *Py_UNUSED(closure))
{
	static const char *const status[] = {"loaded", "unavailable", "excluded", "not found"};
	PyObject *list;

	if (pdc_enter(self) < 0)
		return NULL;
	list = PyList_New(0);
	for (size_t i = 0; list && i < devcache_backend_count(self->ctx); i++) {
		devcache_backend_info_t b;
		int rc = devcache_backend_info(self->ctx, i, &b);
		PyObject *d = rc ? pdc_raise(rc)
				 : Py_BuildValue("{s:s,s:s,s:s,s:s,s:I}", "name", b.name, "path",
						 b.path, "status",
						 b.status <= 3 ? status[b.status] : "unknown",
						 "reason", b.reason, "devices", b.device_count);

		if (!d || PyList_Append(list, d) < 0)
			Py_CLEAR(list);
		Py_XDECREF(d);
	}
	pdc_leave(self);
	return list;
}

static PyObject *context_config(ContextObject *self, PyObject *Py_UNUSED(ignored))
{
	PyObject *dict;

	if (pdc_enter(self) < 0)
		return NULL;
	dict = PyDict_New();
	/* The core's tunables and those of the loaded backend modules. */
	for (size_t i = 0; dict && i < devcache_config_count(self->ctx); i++) {
		devcache_tunable_desc_t d;
		char value[4096];
		const char *origin = "";
		int rc = devcache_config_describe(self->ctx, i, &d);
		PyObject *v;

		if (!rc)
			rc = devcache_config_get(self->ctx, d.name, value, sizeof value, &origin);
		v = rc ? pdc_raise(rc) : Py_BuildValue("(ss)", value, origin);
		if (!v || PyDict_SetItemString(dict, d.name, v) < 0)
			Py_CLEAR(dict);
		Py_XDECREF(v);
	}
	pdc_leave(self);
	return dict;
}

static PyObject *context_load(ContextObject *self, PyObject *args, PyObject *kw)
{
	return pdc_load(self, args, kw);
}

static PyObject *context_cache_stats(ContextObject *self, PyObject *Py_UNUSED(ignored))
{
	devcache_cache_stats_t s;
	int rc;

	if (pdc_enter(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_cache_stats(self->ctx, &s);
	Py_END_ALLOW_THREADS
	pdc_leave(self);
	if (rc)
		return pdc_raise(rc);
	return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}",
			     "hits", s.hits, "misses", s.misses, "evictions", s.evictions,
			     "failed_loads", s.failed_loads, "cancelled_loads", s.cancelled_loads,
			     "bytes_read", s.bytes_read, "bytes_uploaded", s.bytes_uploaded,
			     "load_seconds", s.load_seconds, "models", s.models, "locked_models",
			     s.locked_models, "ram_used", s.ram_used, "ram_budget", s.ram_budget,
			     "ram_copies", s.ram_copies, "ram_copy_reloads", s.ram_copy_reloads,
			     "offloads", s.offloads, "ram_peak", s.ram_peak);
}

static int cache_summary_fn(void *arg, FILE *f)
{
	return devcache_cache_summary(arg, f);
}

static PyObject *context_cache_summary(ContextObject *self, PyObject *Py_UNUSED(ignored))
{
	PyObject *v;

	if (pdc_enter(self) < 0)
		return NULL;
	v = pdc_capture(cache_summary_fn, self->ctx, 0);
	pdc_leave(self);
	return v;
}

static PyObject *context_evict_all(ContextObject *self, PyObject *Py_UNUSED(ignored))
{
	size_t n;

	if (pdc_enter(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	n = devcache_cache_evict_all(self->ctx);
	Py_END_ALLOW_THREADS
	pdc_leave(self);
	return PyLong_FromSize_t(n);
}

static PyObject *context_closed(ContextObject *self, void *Py_UNUSED(closure))
{
	return PyBool_FromLong(!self->ctx || self->closing);
}

static PyObject *context_repr(ContextObject *self)
{
	return PyUnicode_FromFormat("<devcache.Context %s>",
				    !self->ctx || self->closing ? "closed" : "open");
}

static PyMethodDef context_methods[] = {
	{"close", (PyCFunction)context_close, METH_NOARGS,
	 "close()\n\nClose the context.  Models and tensor views still alive keep it open\n"
	 "until they are gone; no new call is accepted.  Closing twice is harmless."},
	{"__enter__", (PyCFunction)context_enter, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)context_exit, METH_VARARGS, NULL},
	{"device", (PyCFunction)context_device, METH_O,
	 "device(name) -> Device\n\nThe device named \"host\", \"cuda:0\", \"hip:1\", \"ze:0\" "
	 "(\"cuda\" is \"cuda:0\").\nRaises NoDeviceError when there is none."},
	{"config", (PyCFunction)context_config, METH_NOARGS,
	 "config() -> dict\n\nEvery tunable: name -> (value, origin), the value as it would be\n"
	 "written in devcache.conf, the origin \"default\", \"FILE:LINE\",\n"
	 "\"DEVCACHE_OPTIONS\" or \"devcache_open\" (the options given to open())."},
	{"load", (PyCFunction)(void (*)(void))context_load, METH_VARARGS | METH_KEYWORDS,
	 "load(path, device=\"host\", writable=False, progress=None, device_bytes=None) -> Model\n\n"
	 "Load a model (a safetensors or GGUF file, a shard index, any shard of a\n"
	 "GGUF split, or a folder holding one model) onto device, through the\n"
	 "model cache: loading it again is a hit.  On the host its file is mapped\n"
	 "in place; writable=True gives a private copy-on-write mapping that can\n"
	 "be patched without changing the file.  progress(done, total) is called\n"
	 "as bytes arrive; an exception it raises cancels the load and is raised\n"
	 "here.  The model stays locked (never evicted) until it is released.\n"
	 "device_bytes: at most so many bytes on the device, the largest prefix\n"
	 "of its tensors that fits; the rest stays on the host."},
	{"cache_stats", (PyCFunction)context_cache_stats, METH_NOARGS,
	 "cache_stats() -> dict\n\nThe model cache's counters: hits, misses, evictions, "
	 "bytes_read,\nbytes_uploaded, load_seconds, models, locked_models, ram_used, ..."},
	{"cache_summary", (PyCFunction)context_cache_summary, METH_NOARGS,
	 "cache_summary() -> str\n\nThe model cache as a table, as `devcache load` prints it."},
	{"evict_all", (PyCFunction)context_evict_all, METH_NOARGS,
	 "evict_all() -> int\n\nEvict every unlocked model; returns how many."},
	/* The model cache driven model by model: pymanage.c. */
	{"models", (PyCFunction)pdc_ctx_models, METH_NOARGS,
	 "models() -> list\n\nWhat the model cache holds, most recently used first: a dict a\n"
	 "model (path, device, where: \"device\", \"host\", \"ram_copy\" or \"partial\",\n"
	 "writable, locks, locked, size, device_bytes, host_bytes, charged_device,\n"
	 "charged_ram, working_mem, hits, last_use)."},
	{"evict", (PyCFunction)(void (*)(void))pdc_ctx_evict, METH_VARARGS | METH_KEYWORDS,
	 "evict(path, device)\n\nEvict the model that loading path on device would find: the\n"
	 "cache forgets it; a locked one is freed when its last handle is released.\n"
	 "Raises NotFoundError when the cache does not hold it."},
	{"offload", (PyCFunction)(void (*)(void))pdc_ctx_offload, METH_VARARGS | METH_KEYWORDS,
	 "offload(path, device)\n\nMove the unlocked model off its device: to a RAM copy "
	 "(keep_ram_copy),\nor back to its file's mapping; a load brings it back."},
	{"make_room", (PyCFunction)(void (*)(void))pdc_ctx_make_room, METH_VARARGS | METH_KEYWORDS,
	 "make_room(device, bytes) -> int\n\nOffload or evict unlocked models, least recently "
	 "used first, until\nbytes are free within the budget and on the device; returns what "
	 "was\nfreed.  Raises OutOfMemoryError, having moved nothing, when it cannot."},
	{"cache_device_stats", (PyCFunction)pdc_ctx_device_stats, METH_O,
	 "cache_device_stats(device) -> dict\n\nThe model cache's share of device: used, budget, "
	 "peak_used,\nworking_mem, allocated_bytes, reserved_bytes, and the device's\n"
	 "device_allocated_bytes and device_reserved_bytes."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef context_getset[] = {
	{"devices", (getter)context_devices, NULL, "Every device of the context, a tuple of Device.",
	 NULL},
	{"backends", (getter)context_backends, NULL,
	 "The backends: a list of dicts (name, path, status, reason, devices).", NULL},
	{"closed", (getter)context_closed, NULL, "True once close() was called.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject Context_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "devcache.Context",
	.tp_basicsize = sizeof(ContextObject),
	.tp_dealloc = (destructor)context_dealloc,
	.tp_repr = (reprfunc)context_repr,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Context(options=None, *, config_files=True, environment=True)\n\n"
		  "A libdevcache context: the tunables merged from devcache.conf, the\n"
		  "environment and options (\"key:value,key:value\"), the backends and their\n"
		  "devices, the caching allocator of each device and the model cache.\n"
		  "config_files=False reads no configuration file, environment=False no\n"
		  "DEVCACHE_* variable.  A context manager: it closes on exit.",
	.tp_methods = context_methods,
	.tp_getset = context_getset,
	.tp_init = (initproc)context_init,
	.tp_new = PyType_GenericNew,
};
