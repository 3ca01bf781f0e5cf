/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* _devcache.c - the devcache Python extension: the module, its exceptions, contexts and devices. */
#include "pydevcache.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <devcache-torch.h>

/* ---- errors ----------------------------------------------------------------- */

static PyObject *Error;
static PyObject *code_class[-DEVCACHE_ERROR_MIN + 1];

static const struct {
	int code;
	const char *name;
	PyObject **base; /* a built-in class Python users catch, or NULL */
	const char *doc;
} error_classes[] = {
	{DEVCACHE_EINVAL, "InvalidArgumentError", &PyExc_ValueError, "An invalid argument."},
	{DEVCACHE_ENOMEM, "OutOfMemoryError", &PyExc_MemoryError,
	 "Out of memory on the host or a device."},
	{DEVCACHE_ECONFIG, "ConfigError", NULL, "A configuration error (a tunable, a file)."},
	{DEVCACHE_ENODEV, "NoDeviceError", NULL, "No such device."},
	{DEVCACHE_EBACKEND, "BackendError", NULL, "A backend or driver failure."},
	{DEVCACHE_EABI, "ABIError", NULL, "A backend module of another ABI version."},
	{DEVCACHE_EIO, "InputOutputError", &PyExc_OSError, "An input/output error."},
	{DEVCACHE_EFORMAT, "FormatError", NULL, "A malformed model file."},
	{DEVCACHE_ENOTSUP, "NotSupportedError", NULL, "Not supported by this device or build."},
	{DEVCACHE_EBUSY, "BusyError", NULL, "The resource is busy (locked, or in use by views)."},
	{DEVCACHE_ECANCELED, "CanceledError", NULL, "The operation was canceled."},
	{DEVCACHE_ENOENT, "NotFoundError", &PyExc_FileNotFoundError,
	 "No such file or entry."},
	{DEVCACHE_EAGAIN, "NotReadyError", NULL, "Not ready yet."},
};

static PyObject *raise_detail(int err, PyObject *detail)
{
	PyObject *cls = Error, *exc, *code;

	if (!detail)
		return NULL;
	if (err < 0 && err >= DEVCACHE_ERROR_MIN && code_class[-err])
		cls = code_class[-err];
	exc = PyObject_CallOneArg(cls, detail);
	code = PyLong_FromLong(err);
	if (exc && code && PyObject_SetAttrString(exc, "code", code) == 0 &&
	    PyObject_SetAttrString(exc, "detail", detail) == 0)
		PyErr_SetObject(cls, exc);
	Py_XDECREF(code);
	Py_XDECREF(exc);
	Py_DECREF(detail);
	return NULL;
}

PyObject *pdc_raise(int err)
{
	const char *detail = devcache_last_error();

	if (!detail || !*detail)
		detail = devcache_strerror(err);
	return raise_detail(err, PyUnicode_DecodeUTF8(detail, (Py_ssize_t)strlen(detail),
						      "replace"));
}

PyObject *pdc_raise_msg(int err, const char *fmt, ...)
{
	va_list ap;
	PyObject *detail;

	va_start(ap, fmt);
	detail = PyUnicode_FromFormatV(fmt, ap);
	va_end(ap);
	return raise_detail(err, detail);
}

static int make_errors(PyObject *m)
{
	PyObject *dict = Py_BuildValue("{s:O,s:O}", "code", Py_None, "detail", Py_None);

	if (!dict)
		return -1;
	Error = PyErr_NewExceptionWithDoc(
		"devcache.Error",
		"The base class of every libdevcache error.\n\n"
		"code is the library's negative error code, detail its message,\n"
		"which names the file, tunable or device at fault.",
		NULL, dict);
	Py_DECREF(dict);
	if (!Error || PyModule_AddObjectRef(m, "Error", Error) < 0)
		return -1;
	for (size_t i = 0; i < sizeof error_classes / sizeof *error_classes; i++) {
		char qual[96];
		PyObject *bases, *cls;

		snprintf(qual, sizeof qual, "devcache.%s", error_classes[i].name);
		bases = error_classes[i].base ? PyTuple_Pack(2, Error, *error_classes[i].base)
					      : PyTuple_Pack(1, Error);
		if (!bases)
			return -1;
		cls = PyErr_NewExceptionWithDoc(qual, error_classes[i].doc, bases, NULL);
		Py_DECREF(bases);
		if (!cls)
			return -1;
		code_class[-error_classes[i].code] = cls;
		if (PyModule_AddObjectRef(m, error_classes[i].name, cls) < 0)
			return -1;
	}
	return 0;
}

/* ---- helpers ------------------------------------------------------------------ */

const char *pdc_name(PyObject *obj, const char *what)
{
	Py_ssize_t len;
	const char *s;

	if (!PyUnicode_Check(obj)) {
		PyErr_Format(PyExc_TypeError, "devcache: %s is a str, not %.100s", what,
			     Py_TYPE(obj)->tp_name);
		return NULL;
	}
	if (!(s = PyUnicode_AsUTF8AndSize(obj, &len)))
		return NULL;
	if ((size_t)len != strlen(s)) {
		PyErr_Format(PyExc_ValueError, "devcache: %s %R contains a NUL character", what, obj);
		return NULL;
	}
	return s;
}

PyObject *pdc_json(const char *text)
{
	PyObject *json = PyImport_ImportModule("json"), *v;

	if (!json)
		return NULL;
	v = PyObject_CallMethod(json, "loads", "s", text);
	Py_DECREF(json);
	return v;
}

PyObject *pdc_capture(int (*fn)(void *, FILE *), void *arg, int as_json)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	PyObject *v;
	int rc;

	if (!f)
		return PyErr_NoMemory();
	Py_BEGIN_ALLOW_THREADS
	rc = fn(arg, f);
	Py_END_ALLOW_THREADS
	if (fclose(f) != 0 && rc == 0) {
		free(buf);
		return PyErr_NoMemory();
	}
	if (rc) {
		free(buf);
		return pdc_raise(rc);
	}
	v = as_json ? pdc_json(buf ? buf : "") : PyUnicode_DecodeUTF8(buf ? buf : "", (Py_ssize_t)len,
								     "replace");
	free(buf);
	return v;
}

int pdc_enter(ContextObject *ctx)
{
	if (!ctx->ctx || ctx->closing) {
		PyErr_SetString(PyExc_ValueError, "devcache: the context is closed");
		return -1;
	}
	ctx->busy++;
	return 0;
}

/* The deferred close: the last call or model handle out closes the door. */
void pdc_leave(ContextObject *ctx)
{
	devcache_ctx_t *c = ctx->ctx;

	if (--ctx->busy > 0 || !ctx->closing || !c || ctx->borrowed)
		return;
	ctx->ctx = NULL;
	Py_BEGIN_ALLOW_THREADS
	devcache_close(c);
	Py_END_ALLOW_THREADS
}

/* ---- Context ---------------------------------------------------------------------- */

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
	return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:K,s:K,s:K,s:K,s:K,s:K}",
			     "hits", s.hits, "misses", s.misses, "evictions", s.evictions,
			     "failed_loads", s.failed_loads, "cancelled_loads", s.cancelled_loads,
			     "bytes_read", s.bytes_read, "bytes_uploaded", s.bytes_uploaded,
			     "load_seconds", s.load_seconds, "models", s.models, "locked_models",
			     s.locked_models, "ram_used", s.ram_used, "ram_budget", s.ram_budget,
			     "ram_copies", s.ram_copies, "ram_copy_reloads", s.ram_copy_reloads);
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
	 "load(path, device=\"host\", writable=False, progress=None) -> Model\n\n"
	 "Load a model (a safetensors or GGUF file, a shard index, any shard of a\n"
	 "GGUF split, or a folder holding one model) onto device, through the\n"
	 "model cache: loading it again is a hit.  On the host its file is mapped\n"
	 "in place; writable=True gives a private copy-on-write mapping that can\n"
	 "be patched without changing the file.  progress(done, total) is called\n"
	 "as bytes arrive; an exception it raises cancels the load and is raised\n"
	 "here.  The model stays locked (never evicted) until it is released."},
	{"cache_stats", (PyCFunction)context_cache_stats, METH_NOARGS,
	 "cache_stats() -> dict\n\nThe model cache's counters: hits, misses, evictions, "
	 "bytes_read,\nbytes_uploaded, load_seconds, models, locked_models, ram_used, ..."},
	{"cache_summary", (PyCFunction)context_cache_summary, METH_NOARGS,
	 "cache_summary() -> str\n\nThe model cache as a table, as `devcache load` prints it."},
	{"evict_all", (PyCFunction)context_evict_all, METH_NOARGS,
	 "evict_all() -> int\n\nEvict every unlocked model; returns how many."},
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

/* ---- Device ---------------------------------------------------------------------- */

static void device_dealloc(DeviceObject *self)
{
	Py_CLEAR(self->owner);
	PyObject_Free(self);
}

static PyObject *device_richcompare(PyObject *a, PyObject *b, int op)
{
	if (!PyObject_TypeCheck(b, &Device_Type) || (op != Py_EQ && op != Py_NE))
		Py_RETURN_NOTIMPLEMENTED;
	int same = ((DeviceObject *)a)->dev == ((DeviceObject *)b)->dev;

	return PyBool_FromLong(op == Py_EQ ? same : !same);
}

static Py_hash_t device_hash(DeviceObject *self)
{
	return _Py_HashPointer(self->dev);
}

static PyObject *device_repr(DeviceObject *self)
{
	return PyUnicode_FromFormat("<devcache.Device %s: %s>", self->info.id, self->info.name);
}

static int stream_arg(PyObject *obj, devcache_stream_t *stream_p)
{
	if (obj == Py_None) {
		*stream_p = NULL;
		return 0;
	}
	if (!PyLong_Check(obj)) {
		PyErr_Format(PyExc_TypeError, "devcache: a stream is an int handle or None, not %.100s",
			     Py_TYPE(obj)->tp_name);
		return -1;
	}
	*stream_p = PyLong_AsVoidPtr(obj);
	return PyErr_Occurred() ? -1 : 0;
}

static PyObject *device_alloc(DeviceObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = {"size", "stream", NULL};
	Py_ssize_t size;
	PyObject *stream_obj = Py_None;
	devcache_stream_t stream;
	void *ptr = NULL;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "n|O:alloc", names, &size, &stream_obj))
		return NULL;
	if (size < 0) {
		PyErr_SetString(PyExc_ValueError, "devcache: alloc: size must not be negative");
		return NULL;
	}
	if (stream_arg(stream_obj, &stream) < 0 || pdc_enter(self->owner) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_alloc(self->dev, (size_t)size, stream, &ptr);
	Py_END_ALLOW_THREADS
	pdc_leave(self->owner);
	if (rc)
		return pdc_raise(rc);
	return PyLong_FromVoidPtr(ptr);
}

static PyObject *device_free(DeviceObject *self, PyObject *arg)
{
	void *ptr;
	int rc;

	if (!PyLong_Check(arg)) {
		PyErr_Format(PyExc_TypeError, "devcache: free: the address is an int, not %.100s",
			     Py_TYPE(arg)->tp_name);
		return NULL;
	}
	ptr = PyLong_AsVoidPtr(arg);
	if (PyErr_Occurred() || pdc_enter(self->owner) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_free(self->dev, ptr);
	Py_END_ALLOW_THREADS
	pdc_leave(self->owner);
	if (rc)
		return pdc_raise(rc);
	Py_RETURN_NONE;
}

static int add_stat(PyObject *d, const char *name, const devcache_stat_t *s)
{
	static const char *const metric[] = {"current", "peak", "allocated", "freed"};
	const int64_t v[] = {s->current, s->peak, s->allocated, s->freed};

	for (int i = 0; i < 4; i++) {
		char key[96];
		PyObject *o = PyLong_FromLongLong(v[i]);

		snprintf(key, sizeof key, "%s.%s", name, metric[i]);
		if (!o || PyDict_SetItemString(d, key, o) < 0) {
			Py_XDECREF(o);
			return -1;
		}
		Py_DECREF(o);
	}
	return 0;
}

static int add_int(PyObject *d, const char *key, long long v)
{
	PyObject *o = PyLong_FromLongLong(v);
	int rc = o ? PyDict_SetItemString(d, key, o) : -1;

	Py_XDECREF(o);
	return rc;
}

static PyObject *stats_dict(DeviceObject *self, int host)
{
	static const char *const pool[] = {"all", "small_pool", "large_pool"};
	devcache_stats_t s;
	PyObject *d;
	int rc;

	if (pdc_enter(self->owner) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = host ? devcache_host_stats(self->dev, &s) : devcache_stats(self->dev, &s);
	Py_END_ALLOW_THREADS
	pdc_leave(self->owner);
	if (rc)
		return pdc_raise(rc);
	if (!(d = PyDict_New()))
		return NULL;
	const struct {
		const char *name;
		const devcache_stat_t *s;
	} kinds[] = {
		{"allocation", s.allocation}, {"segment", s.segment}, {"active", s.active},
		{"inactive_split", s.inactive_split}, {"allocated_bytes", s.allocated_bytes},
		{"reserved_bytes", s.reserved_bytes}, {"active_bytes", s.active_bytes},
		{"inactive_split_bytes", s.inactive_split_bytes},
		{"requested_bytes", s.requested_bytes},
	};
	for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
		for (int p = 0; p < DEVCACHE_POOL_COUNT; p++) {
			char name[64];

			snprintf(name, sizeof name, "%s.%s", kinds[k].name, pool[p]);
			if (add_stat(d, name, &kinds[k].s[p]) < 0)
				goto err;
		}
	if (add_stat(d, "oversize_allocations", &s.oversize_allocations) < 0 ||
	    add_stat(d, "oversize_segments", &s.oversize_segments) < 0 ||
	    add_int(d, "num_alloc_retries", (long long)s.num_alloc_retries) < 0 ||
	    add_int(d, "num_ooms", (long long)s.num_ooms) < 0 ||
	    add_int(d, "num_sync_all_streams", (long long)s.num_sync_all_streams) < 0 ||
	    add_int(d, "num_device_alloc", (long long)s.num_device_alloc) < 0 ||
	    add_int(d, "num_device_free", (long long)s.num_device_free) < 0 ||
	    add_int(d, "max_split_size", (long long)s.max_split_size) < 0 ||
	    add_int(d, "num_stitches", (long long)s.num_stitches) < 0 ||
	    add_int(d, "largest_free_block", (long long)s.largest_free_block) < 0)
		goto err;
	PyObject *frag = PyFloat_FromDouble(s.fragmentation);
	if (!frag || PyDict_SetItemString(d, "fragmentation", frag) < 0) {
		Py_XDECREF(frag);
		goto err;
	}
	Py_DECREF(frag);
	return d;
err:
	Py_DECREF(d);
	return NULL;
}

static PyObject *device_stats(DeviceObject *self, PyObject *Py_UNUSED(ignored))
{
	return stats_dict(self, 0);
}

static PyObject *device_host_stats(DeviceObject *self, PyObject *Py_UNUSED(ignored))
{
	return stats_dict(self, 1);
}

static int summary_fn(void *dev, FILE *f)
{
	return devcache_summary(dev, f);
}

static int snapshot_fn(void *dev, FILE *f)
{
	return devcache_snapshot(dev, f);
}

static PyObject *device_capture(DeviceObject *self, int (*fn)(void *, FILE *), int as_json)
{
	PyObject *v;

	if (pdc_enter(self->owner) < 0)
		return NULL;
	v = pdc_capture(fn, self->dev, as_json);
	pdc_leave(self->owner);
	return v;
}

static PyObject *device_summary(DeviceObject *self, PyObject *Py_UNUSED(ignored))
{
	return device_capture(self, summary_fn, 0);
}

static PyObject *device_snapshot(DeviceObject *self, PyObject *Py_UNUSED(ignored))
{
	return device_capture(self, snapshot_fn, 1);
}

static PyObject *device_call(DeviceObject *self, int (*fn)(devcache_device_t *))
{
	int rc;

	if (pdc_enter(self->owner) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = fn(self->dev);
	Py_END_ALLOW_THREADS
	pdc_leave(self->owner);
	if (rc)
		return pdc_raise(rc);
	Py_RETURN_NONE;
}

static PyObject *device_empty_cache(DeviceObject *self, PyObject *Py_UNUSED(ignored))
{
	return device_call(self, devcache_empty_cache);
}

static PyObject *device_reset_peak(DeviceObject *self, PyObject *Py_UNUSED(ignored))
{
	return device_call(self, devcache_reset_peak);
}

static PyObject *device_reset_accumulated(DeviceObject *self, PyObject *Py_UNUSED(ignored))
{
	return device_call(self, devcache_reset_accumulated);
}

static PyObject *device_info(DeviceObject *self, void *Py_UNUSED(closure))
{
	static const struct {
		uint64_t bit;
		const char *name;
	} caps[] = {{DEVCACHE_CAP_VMM, "vmm"},
		    {DEVCACHE_CAP_IPC, "ipc"},
		    {DEVCACHE_CAP_HOST_MEMORY, "host_memory"},
		    {DEVCACHE_CAP_ASYNC_COPY, "async_copy"}};
	devcache_device_info_t i;
	PyObject *names;
	int rc;

	if (pdc_enter(self->owner) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_device_info(self->dev, &i);
	Py_END_ALLOW_THREADS
	pdc_leave(self->owner);
	if (rc)
		return pdc_raise(rc);
	if (!(names = PyList_New(0)))
		return NULL;
	for (size_t k = 0; k < sizeof caps / sizeof *caps; k++) {
		PyObject *s = (i.caps & caps[k].bit) ? PyUnicode_FromString(caps[k].name) : NULL;

		if ((i.caps & caps[k].bit) && (!s || PyList_Append(names, s) < 0)) {
			Py_XDECREF(s);
			Py_DECREF(names);
			return NULL;
		}
		Py_XDECREF(s);
	}
	return Py_BuildValue("{s:s,s:s,s:s,s:s,s:i,s:K,s:K,s:N}", "id", i.id, "name", i.name,
			     "backend", i.backend, "pci_bus_id", i.pci_bus_id, "ordinal", i.ordinal,
			     "total_memory", (unsigned long long)i.total_memory, "free_memory",
			     (unsigned long long)i.free_memory, "capabilities", names);
}

static PyObject *device_id(DeviceObject *self, void *Py_UNUSED(closure))
{
	return PyUnicode_FromString(self->info.id);
}

static PyObject *device_name(DeviceObject *self, void *Py_UNUSED(closure))
{
	return PyUnicode_FromString(self->info.name);
}

static PyObject *device_context(DeviceObject *self, void *Py_UNUSED(closure))
{
	return Py_NewRef(self->owner);
}

static PyMethodDef device_methods[] = {
	{"alloc", (PyCFunction)(void (*)(void))device_alloc, METH_VARARGS | METH_KEYWORDS,
	 "alloc(size, stream=None) -> int\n\nAllocate size bytes of device memory from the "
	 "caching allocator,\non stream (the backend's own handle as an int; None: the default\n"
	 "stream).  Returns the address.  Raises OutOfMemoryError with\nPyTorch's message when "
	 "it cannot."},
	{"free", (PyCFunction)device_free, METH_O,
	 "free(address)\n\nGive back a block from alloc() to the cache.  An address alloc()\n"
	 "did not return raises InvalidArgumentError."},
	{"stats", (PyCFunction)device_stats, METH_NOARGS,
	 "stats() -> dict\n\nThe allocator's statistics with torch.cuda.memory_stats()' keys:\n"
	 "\"allocated_bytes.all.current\", \"reserved_bytes.large_pool.peak\",\n"
	 "\"num_alloc_retries\", \"num_ooms\", \"max_split_size\" (-1: unlimited) ...;\n"
	 "and two PyTorch does not have: \"largest_free_block\", \"fragmentation\"."},
	{"host_stats", (PyCFunction)device_host_stats, METH_NOARGS,
	 "host_stats() -> dict\n\nThe same statistics for the pinned host memory cache."},
	{"summary", (PyCFunction)device_summary, METH_NOARGS,
	 "summary() -> str\n\nThe memory summary table, laid out as torch.cuda.memory_summary()."},
	{"snapshot", (PyCFunction)device_snapshot, METH_NOARGS,
	 "snapshot() -> dict\n\nEvery segment and its blocks (address, size, requested size, "
	 "state,\nstream)."},
	{"empty_cache", (PyCFunction)device_empty_cache, METH_NOARGS,
	 "empty_cache()\n\nReturn every cached, unused segment to the driver."},
	{"reset_peak", (PyCFunction)device_reset_peak, METH_NOARGS,
	 "reset_peak()\n\nReset the peak values of stats() to the current ones."},
	{"reset_accumulated", (PyCFunction)device_reset_accumulated, METH_NOARGS,
	 "reset_accumulated()\n\nReset the allocated and freed totals of stats()."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef device_getset[] = {
	{"id", (getter)device_id, NULL, "\"host\", \"cuda:0\" ...", NULL},
	{"name", (getter)device_name, NULL, "The vendor's product name.", NULL},
	{"info", (getter)device_info, NULL,
	 "A dict: id, name, backend, pci_bus_id, ordinal, total_memory,\nfree_memory (bytes, now) "
	 "and capabilities (a list of \"vmm\", \"ipc\",\n\"host_memory\", \"async_copy\").",
	 NULL},
	{"context", (getter)device_context, NULL, "The Context it belongs to.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject Device_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "devcache.Device",
	.tp_basicsize = sizeof(DeviceObject),
	.tp_dealloc = (destructor)device_dealloc,
	.tp_repr = (reprfunc)device_repr,
	.tp_hash = (hashfunc)device_hash,
	.tp_richcompare = device_richcompare,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A device of a Context (ctx.devices, ctx.device(name)): its caching\n"
		  "allocator and statistics.",
	.tp_methods = device_methods,
	.tp_getset = device_getset,
};

/* ---- the module -------------------------------------------------------------------- */

static PyObject *torch_context(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(ignored))
{
	devcache_ctx_t *ctx;
	ContextObject *c;
	int rc;

	Py_BEGIN_ALLOW_THREADS
	rc = devcache_torch_context(&ctx);
	Py_END_ALLOW_THREADS
	if (rc)
		return pdc_raise(rc);
	if (!(c = PyObject_New(ContextObject, &Context_Type)))
		return NULL;
	c->ctx = ctx;
	c->closing = 0;
	c->borrowed = 1;
	c->busy = 0;
	return (PyObject *)c;
}

static PyObject *torch_device_index(PyObject *Py_UNUSED(self), PyObject *arg)
{
	int index = PyLong_AsLong(arg) < 0 ? -1 : (int)PyLong_AsLong(arg);
	devcache_device_t *dev;
	devcache_device_info_t info;
	int rc;

	if (PyErr_Occurred())
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_torch_device(index, &dev);
	if (!rc)
		rc = devcache_device_info(dev, &info);
	Py_END_ALLOW_THREADS
	if (rc)
		return pdc_raise(rc);
	return PyUnicode_FromString(info.id);
}

/* Where the library itself is, for CUDAPluggableAllocator. */
static PyObject *library_path(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(ignored))
{
	Dl_info info;

	if (!dladdr((void *)devcache_torch_malloc, &info) || !info.dli_fname) {
		PyErr_SetString(PyExc_RuntimeError, "devcache: cannot find libdevcache's file");
		return NULL;
	}
	return PyUnicode_DecodeFSDefault(info.dli_fname);
}

static PyObject *strerror_fn(PyObject *Py_UNUSED(self), PyObject *arg)
{
	long code = PyLong_AsLong(arg);

	if (code == -1 && PyErr_Occurred())
		return NULL;
	if (code < INT_MIN || code > INT_MAX) {
		PyErr_Format(PyExc_OverflowError, "devcache: %ld is not an error code", code);
		return NULL;
	}
	return PyUnicode_FromString(devcache_strerror((int)code));
}

static PyMethodDef module_methods[] = {
	{"inspect", (PyCFunction)(void (*)(void))pdc_inspect, METH_VARARGS | METH_KEYWORDS,
	 "inspect(path) -> dict\n\nRead a model's header (a file, a shard index, a GGUF split, a "
	 "folder),\nchecking every rule of its format, without reading its data.  Returns\n"
	 "{\"path\", \"format\" (\"safetensors\" or \"gguf\"), \"version\", \"size\",\n"
	 "\"shards\": [{\"path\", \"size\"}], \"metadata\": {key: value},\n"
	 "\"tensors\": [{\"name\", \"dtype\", \"shape\", \"offset\", \"size\", \"shard\"}]}.\n"
	 "Shapes are outermost first (numpy's order; GGUF's ne is reversed).\n"
	 "A malformed file raises FormatError naming the file and the fault."},
	{"strerror", (PyCFunction)strerror_fn, METH_O,
	 "strerror(code) -> str\n\nThe one-line description of a libdevcache error code."},
	{"_torch_context", (PyCFunction)torch_context, METH_NOARGS,
	 "The process-wide context that serves devcache_torch_malloc()."},
	{"_torch_device", (PyCFunction)torch_device_index, METH_O,
	 "The id of the device torch's device index N maps to."},
	{"_check_pickle", (PyCFunction)pdc_check_pickle, METH_O,
	 "_check_pickle(data) -> None or (kind, message)\n\nRefuses a pickle whose memo "
	 "indices or lengths would cost more\nthan its size; kind is \"cut\" or \"damaged\"."},
	{"_library_path", (PyCFunction)library_path, METH_NOARGS,
	 "The file of the libdevcache shared library this module uses."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "devcache._devcache",
	.m_doc = "The C extension of the devcache package; use the devcache package.",
	.m_size = -1,
	.m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__devcache(void);

PyMODINIT_FUNC PyInit__devcache(void)
{
	PyObject *m;

	if (PyType_Ready(&Context_Type) < 0 || PyType_Ready(&Device_Type) < 0 ||
	    PyType_Ready(&Model_Type) < 0 || PyType_Ready(&Tensor_Type) < 0)
		return NULL;
	if (!(m = PyModule_Create(&module_def)))
		return NULL;
	if (make_errors(m) < 0 || PyModule_AddObjectRef(m, "Context", (PyObject *)&Context_Type) < 0 ||
	    PyModule_AddObjectRef(m, "Device", (PyObject *)&Device_Type) < 0 ||
	    PyModule_AddObjectRef(m, "Model", (PyObject *)&Model_Type) < 0 ||
	    PyModule_AddObjectRef(m, "Tensor", (PyObject *)&Tensor_Type) < 0 ||
	    PyModule_AddStringConstant(m, "version", devcache_version_string()) < 0 ||
	    PyModule_AddIntConstant(m, "version_number", (long)devcache_version()) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
