/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pytensor.c - the devcache Python extension's tensor views: buffer protocol, array interfaces, DLPack.
 *
 * A Tensor is a view of one tensor of a locked model: it holds the Model
 * (which then keeps its handle, and so the memory, until the last view is
 * gone).  On the host it exports the buffer protocol and
 * __array_interface__; on a CUDA or HIP device __cuda_array_interface__;
 * and __dlpack__ on both.  A read-only host view (a model not loaded
 * writable: its pages are mapped PROT_READ) is never exported as writable,
 * so no consumer can write through it and fault.  Device tensors are
 * exported writable: a write cannot fault there, and it changes the
 * cache's copy, which later loads of the model share.
 */
#include "pydevcache.h"

#include <stdarg.h>

#include <stdlib.h>
#include <string.h>

/* DLPack's ABI (dlpack.h, v0.8 and v1.0), declared here: it is a stable
 * interchange layout, and no distribution ships the header for C. */
enum { DL_CPU = 1, DL_CUDA = 2, DL_ROCM = 10, DL_ONEAPI = 14 };
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_BOOL = 6 };

typedef struct {
	int32_t device_type;
	int32_t device_id;
} DLDevice;

typedef struct {
	uint8_t code;
	uint8_t bits;
	uint16_t lanes;
} DLDataType;

typedef struct {
	void *data;
	DLDevice device;
	int32_t ndim;
	DLDataType dtype;
	int64_t *shape;
	int64_t *strides;
	uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
	DLTensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
	uint32_t major;
	uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
	DLPackVersion version;
	void *manager_ctx;
	void (*deleter)(struct DLManagedTensorVersioned *self);
	uint64_t flags;
	DLTensor dl_tensor;
} DLManagedTensorVersioned;

#define DLPACK_FLAG_READ_ONLY (1ULL << 0)

/* How a file's dtype is viewed: numpy's typestr, the struct module's
 * format, the item size, and DLPack's type.  A dtype numpy has no type for
 * (BF16, F8, GGUF's quantized blocks) is a raw unsigned view. */
static const struct dtype_view {
	const char *name, *typestr, *format;
	int itemsize;
	uint8_t dl_code;
	int raw;
} dtype_views[] = {
	{"F64", "<f8", "d", 8, DL_FLOAT, 0},  {"F32", "<f4", "f", 4, DL_FLOAT, 0},
	{"F16", "<f2", "e", 2, DL_FLOAT, 0},  {"BF16", "<u2", "H", 2, DL_BFLOAT, 1},
	{"I64", "<i8", "q", 8, DL_INT, 0},    {"I32", "<i4", "i", 4, DL_INT, 0},
	{"I16", "<i2", "h", 2, DL_INT, 0},    {"I8", "|i1", "b", 1, DL_INT, 0},
	{"U64", "<u8", "Q", 8, DL_UINT, 0},   {"U32", "<u4", "I", 4, DL_UINT, 0},
	{"U16", "<u2", "H", 2, DL_UINT, 0},   {"U8", "|u1", "B", 1, DL_UINT, 0},
	{"BOOL", "|b1", "?", 1, DL_BOOL, 0},  {"F8_E4M3", "|u1", "B", 1, DL_UINT, 1},
	{"F8_E5M2", "|u1", "B", 1, DL_UINT, 1}, {"F8_E8M0", "|u1", "B", 1, DL_UINT, 1},
};

static const struct dtype_view raw_bytes = {"", "|u1", "B", 1, DL_UINT, 1};

typedef struct {
	PyObject_HEAD
	ModelObject *model;
	devcache_tensor_info_t info;
	void *data;
	int host;        /* addressable by the CPU */
	int readonly;
	int dl_device;   /* DL_CPU, DL_CUDA ... */
	const struct dtype_view *dt;
	int ndim;        /* of the array view */
	Py_ssize_t shape[DEVCACHE_MAX_DIMS];
	Py_ssize_t strides[DEVCACHE_MAX_DIMS];
	int64_t dl_shape[DEVCACHE_MAX_DIMS];
	PyObject *logical_shape;
} TensorObject;

static const struct dtype_view *find_dtype(const char *name)
{
	for (size_t i = 0; i < sizeof dtype_views / sizeof *dtype_views; i++)
		if (strcmp(dtype_views[i].name, name) == 0)
			return &dtype_views[i];
	return NULL;
}

/* The array view: the logical shape when the bytes are exactly that many
 * items, else one dimension of raw bytes (GGUF's quantized blocks). */
static void set_layout(TensorObject *t)
{
	const struct dtype_view *dt = find_dtype(t->info.dtype);
	Py_ssize_t n = PyTuple_GET_SIZE(t->logical_shape);
	unsigned long long items = 1;
	int ok = dt != NULL && n <= DEVCACHE_MAX_DIMS;

	for (Py_ssize_t i = 0; ok && i < n; i++) {
		unsigned long long d = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t->logical_shape, i));

		if (d > (unsigned long long)PY_SSIZE_T_MAX ||
		    (d && items > (unsigned long long)PY_SSIZE_T_MAX / d))
			ok = 0;
		else
			items *= d;
		t->shape[i] = (Py_ssize_t)d;
	}
	PyErr_Clear();
	if (ok && items * (unsigned long long)dt->itemsize == t->info.size) {
		t->dt = dt;
		t->ndim = (int)n;
	} else {
		t->dt = &raw_bytes;
		t->ndim = 1;
		t->shape[0] = (Py_ssize_t)t->info.size;
	}
	Py_ssize_t stride = t->dt->itemsize;
	for (int i = t->ndim - 1; i >= 0; i--) {
		t->strides[i] = stride;
		t->dl_shape[i] = t->shape[i];
		stride *= t->shape[i];
	}
}

PyObject *pdc_tensor_new(ModelObject *model, const char *name)
{
	TensorObject *t;
	devcache_tensor_info_t info;
	void *data = NULL;
	int rc;

	/* Pinned from here: the view owns the pin once it exists. */
	pdc_model_pin(model);
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_model_tensor(model->model, name, &info, &data);
	Py_END_ALLOW_THREADS
	if (rc)
		pdc_model_unpin(model);
	if (rc == DEVCACHE_ENOENT) {
		PyObject *key = PyUnicode_FromString(name);

		if (key) {
			PyErr_SetObject(PyExc_KeyError, key);
			Py_DECREF(key);
		}
		return NULL;
	}
	if (rc)
		return pdc_raise(rc);
	if (!(t = PyObject_New(TensorObject, &Tensor_Type))) {
		pdc_model_unpin(model);
		return NULL;
	}
	t->model = (ModelObject *)Py_NewRef(model);
	t->info = info;
	t->data = data;
	t->host = model->host || info.place == DEVCACHE_PLACE_HOST;
	/* Host pages of a model not loaded writable are mapped read-only (a
	 * partial model's host tensors always are): a write would fault.  Device
	 * memory cannot fault, and consumers (torch.as_tensor) refuse read-only
	 * device arrays, so device tensors are writable: the cache's one copy. */
	t->readonly = t->host ? !(model->writable && model->host) : 0;
	/* The backend module says what its pointers are (ABI minor 2). */
	t->dl_device = t->host ? DL_CPU : model->device->info.dlpack_device_type;
	if (pdc_tensor_layout(model->file, &info, &t->logical_shape) < 0) {
		t->logical_shape = NULL;
		Py_DECREF(t);
		return NULL;
	}
	set_layout(t);
	return (PyObject *)t;
}

static void tensor_dealloc(TensorObject *self)
{
	ModelObject *m = self->model;

	Py_CLEAR(self->logical_shape);
	PyObject_Free(self);
	pdc_model_unpin(m);
	Py_DECREF(m);
}

static const char *where(TensorObject *self)
{
	return self->host ? "host" : self->model->device->info.id;
}

/* Raise type with a message about this tensor, its name shown escaped: a
 * name comes from the file, and a traceback prints the message raw. */
static void tensor_error(PyObject *type, const char *fmt, ...)
{
	va_list ap;
	PyObject *msg;

	va_start(ap, fmt);
	msg = PyUnicode_FromFormatV(fmt, ap);
	va_end(ap);
	if (msg && (msg = pdc_shown(msg))) {
		PyErr_SetObject(type, msg);
		Py_DECREF(msg);
	}
}

/* ---- the buffer protocol -------------------------------------------------------- */

static int tensor_getbuffer(TensorObject *self, Py_buffer *view, int flags)
{
	if (!self->host) {
		tensor_error(PyExc_BufferError,
			     "devcache: tensor '%s' is on %s, not in host memory: use "
			     "__cuda_array_interface__, __dlpack__ or tobytes()",
			     self->info.name, where(self));
		return -1;
	}
	if ((flags & PyBUF_WRITABLE) && self->readonly) {
		tensor_error(PyExc_BufferError,
			     "devcache: tensor '%s' is read-only: load the model with "
			     "writable=True to change it",
			     self->info.name);
		return -1;
	}
	view->buf = self->data;
	view->obj = Py_NewRef(self);
	view->len = (Py_ssize_t)self->info.size;
	view->readonly = self->readonly;
	view->internal = NULL;
	view->suboffsets = NULL;
	if (flags & PyBUF_ND) {
		view->itemsize = self->dt->itemsize;
		view->format = (flags & PyBUF_FORMAT) ? (char *)self->dt->format : NULL;
		view->ndim = self->ndim;
		view->shape = self->shape;
		view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->strides : NULL;
	} else {
		view->itemsize = 1;
		view->format = (flags & PyBUF_FORMAT) ? "B" : NULL;
		view->ndim = 1;
		view->shape = NULL;
		view->strides = NULL;
	}
	return 0;
}

static PyBufferProcs tensor_as_buffer = {
	.bf_getbuffer = (getbufferproc)tensor_getbuffer,
};

/* ---- array interfaces ------------------------------------------------------------ */

static PyObject *view_shape(TensorObject *self)
{
	PyObject *shape = PyTuple_New(self->ndim);

	for (int i = 0; shape && i < self->ndim; i++) {
		PyObject *d = PyLong_FromSsize_t(self->shape[i]);

		if (!d) {
			Py_CLEAR(shape);
			break;
		}
		PyTuple_SET_ITEM(shape, i, d);
	}
	return shape;
}

static PyObject *interface(TensorObject *self, int cuda)
{
	PyObject *shape = view_shape(self);

	if (!shape)
		return NULL;
	if (cuda)
		return Py_BuildValue("{s:i,s:N,s:s,s:(NO),s:O,s:O}", "version", 3, "shape", shape,
				     "typestr", self->dt->typestr, "data",
				     PyLong_FromVoidPtr(self->data),
				     self->readonly ? Py_True : Py_False, "strides", Py_None,
				     "stream", Py_None);
	return Py_BuildValue("{s:i,s:N,s:s,s:(NO),s:O,s:[(ss)]}", "version", 3, "shape", shape,
			     "typestr", self->dt->typestr, "data", PyLong_FromVoidPtr(self->data),
			     self->readonly ? Py_True : Py_False, "strides", Py_None, "descr", "",
			     self->dt->typestr);
}

static PyObject *tensor_array_interface(TensorObject *self, void *Py_UNUSED(closure))
{
	if (!self->host) {
		tensor_error(PyExc_AttributeError,
			     "devcache: tensor '%s' is on %s: it has no __array_interface__",
			     self->info.name, where(self));
		return NULL;
	}
	return interface(self, 0);
}

static PyObject *tensor_cuda_array_interface(TensorObject *self, void *Py_UNUSED(closure))
{
	if (self->host || (self->dl_device != DL_CUDA && self->dl_device != DL_ROCM)) {
		tensor_error(PyExc_AttributeError,
			     "devcache: tensor '%s' is on %s: it has no __cuda_array_interface__",
			     self->info.name, where(self));
		return NULL;
	}
	return interface(self, 1);
}

/* numpy calls __array__ last, when neither the buffer nor the interface
 * is there: a device tensor.  Say why instead of making an object array. */
static PyObject *tensor_array(TensorObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = {"dtype", "copy", NULL};
	PyObject *dtype = Py_None, *copy = Py_None, *np, *mv, *arr;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:__array__", names, &dtype, &copy))
		return NULL;
	if (!self->host) {
		tensor_error(PyExc_TypeError,
			     "devcache: tensor '%s' is on %s: copy it with tobytes(), or hand it to "
			     "a GPU library (torch.as_tensor, cupy.asarray)",
			     self->info.name, where(self));
		return NULL;
	}
	if (!(np = PyImport_ImportModule("numpy")))
		return NULL;
	if (!(mv = PyMemoryView_FromObject((PyObject *)self))) {
		Py_DECREF(np);
		return NULL;
	}
	arr = dtype == Py_None ? PyObject_CallMethod(np, "asarray", "O", mv)
			       : PyObject_CallMethod(np, "asarray", "OO", mv, dtype);
	Py_DECREF(mv);
	Py_DECREF(np);
	return arr;
}

/* ---- DLPack ------------------------------------------------------------------------ */

struct dl_owner {
	PyObject *tensor;
	int versioned;
	union {
		DLManagedTensor legacy;
		DLManagedTensorVersioned v1;
	} m;
};

static void dl_release(struct dl_owner *o)
{
	PyGILState_STATE g = PyGILState_Ensure();

	Py_DECREF(o->tensor);
	PyMem_RawFree(o);
	PyGILState_Release(g);
}

static void dl_delete_legacy(DLManagedTensor *m)
{
	dl_release(m->manager_ctx);
}

static void dl_delete_v1(DLManagedTensorVersioned *m)
{
	dl_release(m->manager_ctx);
}

/* An unconsumed capsule still owns its tensor. */
static void dl_capsule_free(PyObject *capsule)
{
	PyObject *type, *value, *tb;

	/* A capsule may die while an exception is on its way: keep it. */
	PyErr_Fetch(&type, &value, &tb);
	if (PyCapsule_IsValid(capsule, "dltensor")) {
		DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");

		m->deleter(m);
	} else if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
		DLManagedTensorVersioned *m = PyCapsule_GetPointer(capsule, "dltensor_versioned");

		m->deleter(m);
	}
	PyErr_Restore(type, value, tb);
}

static PyObject *tensor_dlpack(TensorObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = {"stream", "max_version", "dl_device", "copy", NULL};
	PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
	int versioned = 0;
	struct dl_owner *o;
	DLTensor *t;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO:__dlpack__", names, &stream,
					 &max_version, &dl_device, &copy))
		return NULL;
	if (copy == Py_True) {
		PyErr_SetString(PyExc_BufferError, "devcache: __dlpack__ exports views, not copies");
		return NULL;
	}
	if (!self->dl_device) {
		tensor_error(PyExc_BufferError, "devcache: tensor '%s' is on %s, which DLPack cannot name",
			     self->info.name, where(self));
		return NULL;
	}
	if (max_version != Py_None) {
		long major;

		if (!PyTuple_Check(max_version) || PyTuple_GET_SIZE(max_version) < 1) {
			PyErr_SetString(PyExc_TypeError, "devcache: max_version is a tuple (major, minor)");
			return NULL;
		}
		major = PyLong_AsLong(PyTuple_GET_ITEM(max_version, 0));
		if (major == -1 && PyErr_Occurred())
			return NULL;
		versioned = major >= 1;
	}
	/* The unversioned layout has no read-only flag: a consumer would be
	 * free to write into pages mapped read-only, and the process would die. */
	if (!versioned && self->readonly && self->host) {
		tensor_error(PyExc_BufferError,
			     "devcache: tensor '%s' is read-only and the consumer asked for DLPack "
			     "without a read-only flag (before 1.0): use numpy.asarray(), or load "
			     "the model with writable=True",
			     self->info.name);
		return NULL;
	}
	if (!(o = PyMem_RawCalloc(1, sizeof *o)))
		return PyErr_NoMemory();
	o->tensor = Py_NewRef(self);
	o->versioned = versioned;
	if (versioned) {
		o->m.v1.version.major = 1;
		o->m.v1.version.minor = 0;
		o->m.v1.manager_ctx = o;
		o->m.v1.deleter = dl_delete_v1;
		o->m.v1.flags = self->readonly ? DLPACK_FLAG_READ_ONLY : 0;
		t = &o->m.v1.dl_tensor;
	} else {
		o->m.legacy.manager_ctx = o;
		o->m.legacy.deleter = dl_delete_legacy;
		t = &o->m.legacy.dl_tensor;
	}
	t->data = self->data;
	t->device.device_type = self->dl_device;
	t->device.device_id = self->host ? 0 : self->model->device->info.ordinal;
	t->ndim = self->ndim;
	t->dtype.code = self->dt->dl_code;
	t->dtype.bits = (uint8_t)(self->dt->itemsize * 8);
	t->dtype.lanes = 1;
	t->shape = self->dl_shape;
	t->strides = NULL; /* compact, row-major */
	t->byte_offset = 0;
	PyObject *cap = versioned ? PyCapsule_New(&o->m.v1, "dltensor_versioned", dl_capsule_free)
				  : PyCapsule_New(&o->m.legacy, "dltensor", dl_capsule_free);
	if (!cap) {
		Py_DECREF(self);
		PyMem_RawFree(o);
	}
	return cap;
}

static PyObject *tensor_dlpack_device(TensorObject *self, PyObject *Py_UNUSED(ignored))
{
	if (!self->dl_device) {
		tensor_error(PyExc_BufferError, "devcache: tensor '%s' is on %s, which DLPack cannot name",
			     self->info.name, where(self));
		return NULL;
	}
	return Py_BuildValue("(ii)", self->dl_device,
			     self->host ? 0 : self->model->device->info.ordinal);
}

/* ---- copies and attributes ----------------------------------------------------------- */

static PyObject *tensor_tobytes(TensorObject *self, PyObject *Py_UNUSED(ignored))
{
	PyObject *b;
	int rc = 0;

	if (self->info.size > (uint64_t)PY_SSIZE_T_MAX)
		return PyErr_NoMemory();
	if (!(b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)self->info.size)))
		return NULL;
	char *dst = PyBytes_AS_STRING(b);
	/* Through the library, which checks the mapping before and after: a
	 * file truncated meanwhile raises devcache.Error, not SIGBUS. */
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_model_tensor_copy(self->model->model, self->info.name, dst,
					(size_t)self->info.size);
	Py_END_ALLOW_THREADS
	if (rc) {
		Py_DECREF(b);
		return pdc_raise(rc);
	}
	return b;
}

static PyObject *tensor_repr(TensorObject *self)
{
	return pdc_shown(PyUnicode_FromFormat("<devcache.Tensor '%s' %s %R on %s%s>",
					      self->info.name, self->info.dtype,
					      self->logical_shape, where(self),
					      self->readonly ? ", read-only" : ""));
}

static PyObject *tensor_name(TensorObject *self, void *Py_UNUSED(c))
{
	return PyUnicode_FromString(self->info.name);
}

static PyObject *tensor_dtype(TensorObject *self, void *Py_UNUSED(c))
{
	return PyUnicode_FromString(self->info.dtype);
}

static PyObject *tensor_shape(TensorObject *self, void *Py_UNUSED(c))
{
	return Py_NewRef(self->logical_shape);
}

static PyObject *tensor_nbytes(TensorObject *self, void *Py_UNUSED(c))
{
	return PyLong_FromUnsignedLongLong(self->info.size);
}

static PyObject *tensor_data_ptr(TensorObject *self, void *Py_UNUSED(c))
{
	return PyLong_FromVoidPtr(self->data);
}

static PyObject *tensor_readonly(TensorObject *self, void *Py_UNUSED(c))
{
	return PyBool_FromLong(self->readonly);
}

static PyObject *tensor_raw(TensorObject *self, void *Py_UNUSED(c))
{
	return PyBool_FromLong(self->dt->raw);
}

static PyObject *tensor_device(TensorObject *self, void *Py_UNUSED(c))
{
	return PyUnicode_FromString(where(self));
}

static PyObject *tensor_model(TensorObject *self, void *Py_UNUSED(c))
{
	return Py_NewRef(self->model);
}

static PyObject *tensor_typestr(TensorObject *self, void *Py_UNUSED(c))
{
	return PyUnicode_FromString(self->dt->typestr);
}

static PyMethodDef tensor_methods[] = {
	{"tobytes", (PyCFunction)tensor_tobytes, METH_NOARGS,
	 "tobytes() -> bytes\n\nA copy of the tensor's bytes, from the host or the device."},
	{"__array__", (PyCFunction)(void (*)(void))tensor_array, METH_VARARGS | METH_KEYWORDS,
	 NULL},
	{"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_VARARGS | METH_KEYWORDS,
	 "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n\n"
	 "A DLPack capsule of the tensor (no copy).  A read-only host tensor is\n"
	 "exported only to consumers that ask for DLPack 1.0 (max_version), whose\n"
	 "read-only flag they must honour."},
	{"__dlpack_device__", (PyCFunction)tensor_dlpack_device, METH_NOARGS,
	 "(device_type, device_id) as DLPack numbers them."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef tensor_getset[] = {
	{"name", (getter)tensor_name, NULL, "The tensor's name.", NULL},
	{"dtype", (getter)tensor_dtype, NULL,
	 "The file's type name: \"F32\", \"BF16\", \"F8_E4M3\", \"Q4_K\" ...", NULL},
	{"shape", (getter)tensor_shape, NULL,
	 "The shape, outermost first (GGUF's ne reversed, as numpy and PyTorch\nhave it).", NULL},
	{"nbytes", (getter)tensor_nbytes, NULL, "Its size in bytes.", NULL},
	{"data_ptr", (getter)tensor_data_ptr, NULL, "The address of its first byte.", NULL},
	{"readonly", (getter)tensor_readonly, NULL,
	 "True for a host tensor of a model not loaded writable (its pages are\nmapped read-only)."
	 "  Device tensors are writable: writing one changes\nthe cache's copy, which later loads "
	 "of the model share.",
	 NULL},
	{"raw", (getter)tensor_raw, NULL,
	 "True when the array view is raw unsigned integers (BF16 as uint16;\nF8 and quantized "
	 "types as bytes), not the tensor's own type.",
	 NULL},
	{"typestr", (getter)tensor_typestr, NULL, "The array view's numpy type string.", NULL},
	{"device", (getter)tensor_device, NULL, "Where its bytes are: \"host\", \"cuda:0\" ...",
	 NULL},
	{"model", (getter)tensor_model, NULL, "The Model it belongs to.", NULL},
	{"__array_interface__", (getter)tensor_array_interface, NULL,
	 "numpy's array interface (version 3), for a tensor in host memory.", NULL},
	{"__cuda_array_interface__", (getter)tensor_cuda_array_interface, NULL,
	 "The CUDA array interface (version 3), for a tensor on a CUDA or HIP\ndevice: "
	 "torch.as_tensor, CuPy and Numba take it without a copy.",
	 NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject Tensor_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "devcache.Tensor",
	.tp_basicsize = sizeof(TensorObject),
	.tp_dealloc = (destructor)tensor_dealloc,
	.tp_repr = (reprfunc)tensor_repr,
	.tp_as_buffer = &tensor_as_buffer,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A view of one tensor of a loaded model (model[name]), without a copy.\n\n"
		  "numpy.asarray(t) is a zero-copy array of a host tensor, with its\n"
		  "dtype and shape (BF16 as uint16, F8 and quantized types as uint8,\n"
		  "t.dtype naming the real type).  The view keeps its model locked.",
	.tp_methods = tensor_methods,
	.tp_getset = tensor_getset,
};
