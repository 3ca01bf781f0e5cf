/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* _devcache.c - the devcache Python extension: the module, its exceptions, and the helpers its files share. */
#include "pydevcache.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <devcache-torch.h>

#include "../../lib/utf8.h" /* built in, as into the tool */

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

/* detail as the library shows text from input (lib/utf8.h): control
 * characters as \xNN.  The library's messages are shown so already; the
 * binding's own quote what it was given (a path), raw.  Takes detail over. */
PyObject *pdc_shown(PyObject *detail)
{
	PyObject *bytes;
	char *s, *buf, *at;
	Py_ssize_t n;
	size_t len, one;

	if (!detail)
		return NULL;
	/* A path's bytes that are not UTF-8 are surrogates here: \xNN too. */
	bytes = PyUnicode_AsEncodedString(detail, "utf-8", "surrogateescape");

	if (!bytes || PyBytes_AsStringAndSize(bytes, &s, &n) < 0) {
		PyErr_Clear(); /* lone surrogates of another kind: kept as they are */
		Py_XDECREF(bytes);
		return detail;
	}
	len = utf8_shown_len(s, (size_t)n);
	if (len == (size_t)n) {
		Py_DECREF(bytes);
		return detail;
	}
	if (!(buf = at = PyMem_Malloc(len + 1))) {
		Py_DECREF(bytes);
		Py_DECREF(detail);
		return PyErr_NoMemory();
	}
	for (size_t i = 0; i < (size_t)n; at += one)
		i += utf8_show(s + i, (size_t)n - i, at, &one);
	Py_DECREF(bytes);
	Py_DECREF(detail);
	detail = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)len, "strict");
	PyMem_Free(buf);
	return detail;
}

static PyObject *raise_detail(int err, PyObject *detail)
{
	PyObject *cls = Error, *exc, *code;

	if (!detail || !(detail = pdc_shown(detail)))
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
	{"_check_pickle", (PyCFunction)pdc_check_pickle, METH_VARARGS,
	 "_check_pickle(data, max_depth, max_objects) -> None or (kind, message)\n\nRefuses a "
	 "pickle whose memo indices or lengths would cost more\nthan its size (kind \"cut\" or "
	 "\"damaged\"), or that makes more than max_objects\nobjects (\"large\") or nests them "
	 "deeper than max_depth (\"deep\")."},
	{"_cow_claim", (PyCFunction)pdc_cow_claim, METH_O,
	 "_cow_claim(model) -> bool\n\nMake a writable host model's pages the file's again and hold "
	 "them\nfor this Model, when no other load holds them (pycow.c)."},
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
