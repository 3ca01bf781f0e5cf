/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pydevice.c - the devcache Python extension's Device: the caching allocator, its statistics, summary and snapshot. */
#include "pydevcache.h"

#include <stdint.h>
#include <stdio.h>

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
