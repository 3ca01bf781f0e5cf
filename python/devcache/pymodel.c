/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pymodel.c - the devcache Python extension's model cache: load, Model, and devcache.inspect. */
#include "pydevcache.h"

#include <string.h>

/* ---- shapes and dtypes -------------------------------------------------------- */

int pdc_tensor_layout(const devcache_model_file_t *mf, const devcache_tensor_info_t *ti,
		      PyObject **shape_p)
{
	unsigned version;
	int gguf = devcache_model_file_format(mf, &version) == DEVCACHE_FORMAT_GGUF;
	PyObject *shape = PyTuple_New(ti->n_dims);

	if (!shape)
		return -1;
	for (unsigned i = 0; i < ti->n_dims; i++) {
		uint64_t d = gguf ? ti->shape[ti->n_dims - 1 - i] : ti->shape[i];
		PyObject *v = PyLong_FromUnsignedLongLong(d);

		if (!v) {
			Py_DECREF(shape);
			return -1;
		}
		PyTuple_SET_ITEM(shape, i, v);
	}
	*shape_p = shape;
	return 0;
}

static PyObject *format_name(const devcache_model_file_t *mf)
{
	unsigned version;

	switch (devcache_model_file_format(mf, &version)) {
	case DEVCACHE_FORMAT_SAFETENSORS:
		return PyUnicode_FromString("safetensors");
	case DEVCACHE_FORMAT_GGUF:
		return PyUnicode_FromString("gguf");
	default:
		return PyUnicode_FromString("unknown");
	}
}

static PyObject *shards_list(const devcache_model_file_t *mf)
{
	size_t n = devcache_model_file_shard_count(mf);
	PyObject *list = PyList_New((Py_ssize_t)n);

	for (size_t i = 0; list && i < n; i++) {
		const char *path;
		uint64_t size;
		int rc = devcache_model_file_shard(mf, i, &path, &size);
		PyObject *d = rc ? pdc_raise(rc)
				 : Py_BuildValue("{s:N,s:K}", "path", PyUnicode_DecodeFSDefault(path),
						 "size", (unsigned long long)size);

		if (!d) {
			Py_CLEAR(list);
			break;
		}
		PyList_SET_ITEM(list, (Py_ssize_t)i, d);
	}
	return list;
}

static PyObject *metadata_dict(const devcache_model_file_t *mf)
{
	PyObject *dict = PyDict_New();

	for (size_t i = 0; dict && i < devcache_model_file_metadata_count(mf); i++) {
		const char *key, *json;
		int rc = devcache_model_file_metadata(mf, i, &key, &json);
		PyObject *v = rc ? pdc_raise(rc) : pdc_json(json);

		if (!v || PyDict_SetItemString(dict, key, v) < 0)
			Py_CLEAR(dict);
		Py_XDECREF(v);
	}
	return dict;
}

static PyObject *tensor_dict(const devcache_model_file_t *mf, const devcache_tensor_info_t *ti)
{
	PyObject *shape;

	if (pdc_tensor_layout(mf, ti, &shape) < 0)
		return NULL;
	return Py_BuildValue("{s:s,s:s,s:N,s:K,s:K,s:I}", "name", ti->name, "dtype", ti->dtype,
			     "shape", shape, "offset", (unsigned long long)ti->offset, "size",
			     (unsigned long long)ti->size, "shard", (unsigned)ti->shard);
}

PyObject *pdc_inspect(PyObject *Py_UNUSED(self), PyObject *args, PyObject *kw)
{
	static char *names[] = {"path", NULL};
	PyObject *path_bytes = NULL, *out = NULL, *tensors = NULL;
	devcache_model_file_t *mf = NULL;
	unsigned version = 0;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&:inspect", names, PyUnicode_FSConverter,
					 &path_bytes))
		return NULL;
	const char *path = PyBytes_AS_STRING(path_bytes);
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_model_file_open(path, &mf);
	Py_END_ALLOW_THREADS
	if (rc) {
		Py_DECREF(path_bytes);
		return pdc_raise(rc);
	}
	devcache_model_file_format(mf, &version);
	size_t n = devcache_model_file_tensor_count(mf);
	if (!(tensors = PyList_New((Py_ssize_t)n)))
		goto out;
	for (size_t i = 0; i < n; i++) {
		devcache_tensor_info_t ti;
		PyObject *d;

		rc = devcache_model_file_tensor(mf, i, &ti);
		if (rc || !(d = tensor_dict(mf, &ti))) {
			if (rc)
				pdc_raise(rc);
			goto out;
		}
		PyList_SET_ITEM(tensors, (Py_ssize_t)i, d);
	}
	out = Py_BuildValue("{s:N,s:N,s:I,s:K,s:K,s:N,s:N,s:O}", "path",
			    PyUnicode_DecodeFSDefault(path), "format", format_name(mf), "version",
			    version, "size", (unsigned long long)devcache_model_file_size(mf),
			    "data_offset", (unsigned long long)devcache_model_file_data_offset(mf),
			    "shards", shards_list(mf), "metadata", metadata_dict(mf), "tensors",
			    tensors);
out:
	Py_XDECREF(tensors);
	Py_DECREF(path_bytes);
	devcache_model_file_close(mf);
	return out;
}

/* ---- loading ------------------------------------------------------------------ */

struct progress {
	PyObject *fn;                  /* the caller's callable, or NULL */
	PyObject *type, *value, *tb;   /* what it raised (or KeyboardInterrupt): cancels */
};

/* Called by the library from the loading thread, without the GIL. */
static int progress_cb(void *user, uint64_t done, uint64_t total)
{
	struct progress *p = user;
	PyGILState_STATE g = PyGILState_Ensure();
	int stop = 0;

	if (p->type) {
		stop = 1;
	} else if (PyErr_CheckSignals() < 0) {
		PyErr_Fetch(&p->type, &p->value, &p->tb);
		stop = 1;
	} else if (p->fn) {
		PyObject *r = PyObject_CallFunction(p->fn, "KK", (unsigned long long)done,
						    (unsigned long long)total);

		if (!r) {
			PyErr_Fetch(&p->type, &p->value, &p->tb);
			stop = 1;
		}
		Py_XDECREF(r);
	}
	PyGILState_Release(g);
	return stop;
}

static PyObject *result_dict(const devcache_load_result_t *r)
{
	return Py_BuildValue("{s:O,s:O,s:K,s:K,s:d,s:K,s:K}", "hit", r->hit ? Py_True : Py_False,
			     "from_ram", r->from_ram ? Py_True : Py_False, "bytes_read",
			     (unsigned long long)r->bytes_read, "bytes_uploaded",
			     (unsigned long long)r->bytes_uploaded, "seconds", r->seconds,
			     "device_bytes", (unsigned long long)r->device_bytes, "host_bytes",
			     (unsigned long long)r->host_bytes);
}

PyObject *pdc_load(ContextObject *ctx, PyObject *args, PyObject *kw)
{
	static char *names[] = {"path", "device", "writable", "progress", "device_bytes", NULL};
	PyObject *path_bytes = NULL, *device_obj = NULL, *progress_obj = Py_None;
	PyObject *device_bytes = Py_None;
	unsigned long long cap = 0;
	int writable = 0, rc;
	struct progress prog = {0};
	devcache_load_result_t result = {0};
	devcache_load_args_t la = {.struct_size = sizeof la, .result = &result};
	devcache_model_t *model = NULL;
	DeviceObject *dev = NULL;
	ModelObject *m = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|OpOO:load", names, PyUnicode_FSConverter,
					 &path_bytes, &device_obj, &writable, &progress_obj,
					 &device_bytes))
		return NULL;
	if (device_bytes != Py_None) {
		cap = PyLong_AsUnsignedLongLong(device_bytes);
		if (PyErr_Occurred())
			goto out;
	}
	if (progress_obj != Py_None && !PyCallable_Check(progress_obj)) {
		PyErr_SetString(PyExc_TypeError, "devcache: load: progress must be callable");
		goto out;
	}
	if (device_obj)
		dev = pdc_device_arg(ctx, device_obj);
	else {
		PyObject *host = PyUnicode_FromString("host");

		dev = host ? pdc_device_arg(ctx, host) : NULL;
		Py_XDECREF(host);
	}
	if (!dev || pdc_enter(ctx) < 0)
		goto out;
	prog.fn = progress_obj == Py_None ? NULL : progress_obj;
	la.flags = writable ? DEVCACHE_LOAD_WRITABLE : 0;
	la.progress = progress_cb;
	la.progress_user = &prog;
	const char *path = PyBytes_AS_STRING(path_bytes);
	Py_BEGIN_ALLOW_THREADS
	rc = device_bytes != Py_None
		     ? devcache_model_load_partial(ctx->ctx, path, dev->dev, cap, &la, &model)
		     : devcache_model_load(ctx->ctx, path, dev->dev, &la, &model);
	Py_END_ALLOW_THREADS
	if (rc) {
		pdc_leave(ctx);
		if (prog.type) {
			PyErr_Restore(prog.type, prog.value, prog.tb);
			prog.type = prog.value = prog.tb = NULL;
		} else {
			pdc_raise(rc);
		}
		goto out;
	}
	/* The model handle now holds the context busy until it is released. */
	if (!(m = PyObject_New(ModelObject, &Model_Type))) {
		Py_BEGIN_ALLOW_THREADS
		devcache_model_release(model);
		Py_END_ALLOW_THREADS
		pdc_leave(ctx);
		goto out;
	}
	m->owner = (ContextObject *)Py_NewRef(ctx);
	m->device = (DeviceObject *)Py_NewRef(dev);
	m->model = model;
	m->file = devcache_model_file(model);
	m->released = 0;
	m->writable = writable;
	m->host = (dev->info.caps & DEVCACHE_CAP_HOST_MEMORY) != 0;
	m->views = 0;
	m->moving = 0;
	m->metadata = NULL;
	m->cow = 0;
	m->result = result_dict(&result);
	m->path = PyUnicode_DecodeFSDefault(path);
	if (!m->result || !m->path)
		Py_CLEAR(m);
out:
	Py_XDECREF(prog.type);
	Py_XDECREF(prog.value);
	Py_XDECREF(prog.tb);
	Py_XDECREF(dev);
	Py_XDECREF(path_bytes);
	return (PyObject *)m;
}

/* ---- Model -------------------------------------------------------------------- */

/* The handle goes back when release() was called and no view is left. */
static void model_finish(ModelObject *self)
{
	devcache_model_t *model = self->model;

	if (!self->released || self->views > 0 || !model)
		return;
	pdc_cow_release(self);
	self->model = NULL;
	self->file = NULL;
	Py_BEGIN_ALLOW_THREADS
	devcache_model_release(model);
	Py_END_ALLOW_THREADS
	pdc_leave(self->owner);
}

void pdc_model_pin(ModelObject *self)
{
	self->views++;
}

void pdc_model_unpin(ModelObject *self)
{
	self->views--;
	model_finish(self);
}

int pdc_model_usable(ModelObject *self)
{
	if (self->released || !self->model) {
		PyErr_SetString(PyExc_ValueError, "devcache: the model is released");
		return -1;
	}
	if (self->owner->closing) {
		PyErr_SetString(PyExc_ValueError, "devcache: the context is closed");
		return -1;
	}
	return 0;
}

static void model_dealloc(ModelObject *self)
{
	self->released = 1;
	model_finish(self);
	Py_CLEAR(self->device);
	Py_CLEAR(self->owner);
	Py_CLEAR(self->metadata);
	Py_CLEAR(self->result);
	Py_CLEAR(self->path);
	PyObject_Free(self);
}

static PyObject *model_release(ModelObject *self, PyObject *Py_UNUSED(ignored))
{
	self->released = 1;
	model_finish(self);
	Py_RETURN_NONE;
}

static PyObject *model_enter(ModelObject *self, PyObject *Py_UNUSED(ignored))
{
	if (pdc_model_usable(self) < 0)
		return NULL;
	return Py_NewRef(self);
}

static PyObject *model_exit(ModelObject *self, PyObject *Py_UNUSED(args))
{
	return model_release(self, NULL);
}

static PyObject *model_keys(ModelObject *self, PyObject *Py_UNUSED(ignored))
{
	size_t n;
	PyObject *list;

	if (pdc_model_usable(self) < 0)
		return NULL;
	n = devcache_model_file_tensor_count(self->file);
	if (!(list = PyList_New((Py_ssize_t)n)))
		return NULL;
	for (size_t i = 0; i < n; i++) {
		devcache_tensor_info_t ti;
		int rc = devcache_model_file_tensor(self->file, i, &ti);
		PyObject *s = rc ? pdc_raise(rc) : PyUnicode_FromString(ti.name);

		if (!s) {
			Py_DECREF(list);
			return NULL;
		}
		PyList_SET_ITEM(list, (Py_ssize_t)i, s);
	}
	return list;
}

static PyObject *model_iter(ModelObject *self)
{
	PyObject *keys = model_keys(self, NULL), *it;

	if (!keys)
		return NULL;
	it = PyObject_GetIter(keys);
	Py_DECREF(keys);
	return it;
}

static Py_ssize_t model_len(ModelObject *self)
{
	if (pdc_model_usable(self) < 0)
		return -1;
	return (Py_ssize_t)devcache_model_file_tensor_count(self->file);
}

static int model_contains(ModelObject *self, PyObject *key)
{
	devcache_tensor_info_t ti;
	const char *name;

	if (pdc_model_usable(self) < 0)
		return -1;
	if (!PyUnicode_Check(key))
		return 0;
	if (!(name = pdc_name(key, "a tensor name"))) {
		if (!PyErr_ExceptionMatches(PyExc_ValueError))
			return -1;
		PyErr_Clear(); /* a name with a NUL is in no file */
		return 0;
	}
	return devcache_model_file_find(self->file, name, &ti) == 0;
}

static PyObject *model_getitem(ModelObject *self, PyObject *key)
{
	const char *name;

	if (pdc_model_usable(self) < 0)
		return NULL;
	if (!(name = pdc_name(key, "a tensor name"))) {
		if (PyErr_ExceptionMatches(PyExc_ValueError)) {
			PyErr_Clear(); /* a name with a NUL is in no file */
			PyErr_SetObject(PyExc_KeyError, key);
		}
		return NULL;
	}
	if (self->moving)
		return pdc_raise_msg(DEVCACHE_EBUSY,
				     "%U: another thread is moving its tensors; a view now would "
				     "have a stale address",
				     self->path);
	return pdc_tensor_new(self, name);
}

static PyObject *model_get_metadata(ModelObject *self, void *Py_UNUSED(closure))
{
	if (!self->metadata) {
		if (pdc_model_usable(self) < 0)
			return NULL;
		self->metadata = metadata_dict(self->file);
	}
	return Py_XNewRef(self->metadata);
}

static PyObject *model_get_info(ModelObject *self, void *Py_UNUSED(closure))
{
	devcache_model_info_t i;
	int rc;

	if (pdc_model_usable(self) < 0)
		return NULL;
	pdc_model_pin(self);
	Py_BEGIN_ALLOW_THREADS
	rc = devcache_model_info(self->model, &i);
	Py_END_ALLOW_THREADS
	pdc_model_unpin(self);
	if (rc)
		return pdc_raise(rc);
	return Py_BuildValue("{s:s,s:K,s:K,s:n,s:n,s:O,s:i}", "device", self->device->info.id,
			     "device_bytes", (unsigned long long)i.device_bytes, "host_bytes",
			     (unsigned long long)i.host_bytes, "tensors", (Py_ssize_t)i.tensors,
			     "device_tensors", (Py_ssize_t)i.device_tensors, "partial",
			     i.partial ? Py_True : Py_False, "locks", i.locks);
}

static PyObject *model_get_format(ModelObject *self, void *Py_UNUSED(closure))
{
	if (pdc_model_usable(self) < 0)
		return NULL;
	return format_name(self->file);
}

static PyObject *model_get_shards(ModelObject *self, void *Py_UNUSED(closure))
{
	if (pdc_model_usable(self) < 0)
		return NULL;
	return shards_list(self->file);
}

static PyObject *model_get_path(ModelObject *self, void *Py_UNUSED(closure))
{
	return Py_NewRef(self->path);
}

static PyObject *model_get_device(ModelObject *self, void *Py_UNUSED(closure))
{
	return Py_NewRef(self->device);
}

static PyObject *model_get_result(ModelObject *self, void *Py_UNUSED(closure))
{
	return PyDict_Copy(self->result);
}

static PyObject *model_get_released(ModelObject *self, void *Py_UNUSED(closure))
{
	return PyBool_FromLong(self->released);
}

static PyObject *model_get_views(ModelObject *self, void *Py_UNUSED(closure))
{
	return PyLong_FromSsize_t(self->views);
}

/* names: None (every tensor) or an iterable of str, not one str. */
static int names_arg(PyObject *obj, PyObject **seq_p, const char ***names_p, size_t *n_p)
{
	PyObject *seq;
	Py_ssize_t n;

	*seq_p = NULL;
	*names_p = NULL;
	*n_p = 0;
	if (obj == Py_None)
		return 0;
	if (PyUnicode_Check(obj) || PyBytes_Check(obj)) {
		PyErr_SetString(PyExc_TypeError,
				"devcache: names is a list of tensor names (or None), not one str");
		return -1;
	}
	/* A list of our own: another thread cannot change it while the GIL
	 * is out and the names point into its strings. */
	if (!(seq = PySequence_List(obj)))
		return -1;
	n = PyList_GET_SIZE(seq);
	const char **names = PyMem_Calloc(n ? (size_t)n : 1, sizeof *names);
	if (!names) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *s = PyList_GET_ITEM(seq, i);

		if (!(names[i] = pdc_name(s, "a tensor name")))
			goto err;
	}
	*seq_p = seq;
	*names_p = names;
	*n_p = (size_t)n;
	return 0;
err:
	PyMem_Free(names);
	Py_DECREF(seq);
	return -1;
}

static PyObject *model_move(ModelObject *self, PyObject *args, PyObject *kw, int to_device)
{
	static char *names_kw[] = {"names", NULL};
	PyObject *names_obj = Py_None, *seq = NULL;
	const char **names = NULL;
	size_t n = 0;
	int rc, ok = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, to_device ? "|O:make_resident" : "|O:move_to_host",
					 names_kw, &names_obj))
		return NULL;
	/* The names first: iterating them runs Python code, which could make a
	 * view or release the model; the checks below must come after it. */
	if (names_arg(names_obj, &seq, &names, &n) < 0)
		return NULL;
	if (pdc_model_usable(self) < 0)
		goto out;
	if (self->moving) {
		pdc_raise_msg(DEVCACHE_EBUSY, "%U: another thread is moving its tensors", self->path);
		goto out;
	}
	if (self->views > 0) {
		/* A view holds an address that a move would change. */
		pdc_raise_msg(DEVCACHE_EBUSY,
			      "%U: %zd tensor view(s) are alive and a move would change "
			      "their addresses: drop them first",
			      self->path, self->views);
		goto out;
	}
	pdc_model_pin(self);
	self->moving = 1;
	Py_BEGIN_ALLOW_THREADS
	rc = to_device ? devcache_model_make_resident(self->model, names, n, NULL)
		       : devcache_model_move_to_host(self->model, names, n);
	Py_END_ALLOW_THREADS
	self->moving = 0;
	pdc_model_unpin(self);
	if (rc)
		pdc_raise(rc);
	else
		ok = 1;
out:
	PyMem_Free(names);
	Py_XDECREF(seq);
	if (!ok)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *model_make_resident(ModelObject *self, PyObject *args, PyObject *kw)
{
	return model_move(self, args, kw, 1);
}

static PyObject *model_move_to_host(ModelObject *self, PyObject *args, PyObject *kw)
{
	return model_move(self, args, kw, 0);
}

static PyObject *model_repr(ModelObject *self)
{
	return PyUnicode_FromFormat("<devcache.Model %R on %s%s>", self->path,
				    self->device->info.id, self->released ? ", released" : "");
}

static PyMethodDef model_methods[] = {
	/* The model cache driven model by model: pymanage.c. */
	{"lock", (PyCFunction)(void (*)(void))pdc_model_lock, METH_VARARGS | METH_KEYWORDS,
	 "lock(working_mem=0) -> Model\n\nAnother handle on the model, one more lock, reserving "
	 "working_mem\nbytes of its device against other loads until it is released (a\n"
	 "context manager); releases give working memory back latest first."},
	{"evict", (PyCFunction)pdc_model_evict, METH_NOARGS,
	 "evict()\n\nThe cache forgets the model; it is freed once every handle is released."},
	{"set_device_bytes", (PyCFunction)pdc_model_set_device_bytes, METH_O,
	 "set_device_bytes(n)\n\nGrow or shrink the model's device part to the largest prefix "
	 "of its\ntensors within n bytes; the rest goes to the host.  No view may be alive."},
	{"keys", (PyCFunction)model_keys, METH_NOARGS,
	 "keys() -> list\n\nThe tensor names, in file order (a set: shard order, then file order)."},
	{"release", (PyCFunction)model_release, METH_NOARGS,
	 "release()\n\nUnlock the model.  Tensor views still alive keep it locked until the\n"
	 "last one is gone; the model refuses new views at once."},
	{"make_resident", (PyCFunction)(void (*)(void))model_make_resident,
	 METH_VARARGS | METH_KEYWORDS,
	 "make_resident(names=None)\n\nA partially loaded model: bring the named tensors (None: "
	 "all) onto\nthe device, evicting the least recently used tensors of other partial\n"
	 "models, then whole unlocked models.  OutOfMemoryError when they cannot\nfit; BusyError "
	 "while tensor views of this model are alive."},
	{"move_to_host", (PyCFunction)(void (*)(void))model_move_to_host,
	 METH_VARARGS | METH_KEYWORDS,
	 "move_to_host(names=None)\n\nA partially loaded model: move the named tensors (None: all)"
	 " back to\nthe host, giving their device memory back."},
	{"__enter__", (PyCFunction)model_enter, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)model_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef model_getset[] = {
	{"metadata", (getter)model_get_metadata, NULL,
	 "The file's metadata: safetensors' __metadata__ strings, GGUF's key-value\npairs (numbers,"
	 " strings, booleans, lists).",
	 NULL},
	{"info", (getter)model_get_info, NULL,
	 "Where the model is now: device, device_bytes, host_bytes, tensors,\ndevice_tensors, "
	 "partial, locks.",
	 NULL},
	{"result", (getter)model_get_result, NULL,
	 "What the load did: hit, from_ram, bytes_read, bytes_uploaded, seconds,\ndevice_bytes, "
	 "host_bytes.",
	 NULL},
	{"format", (getter)model_get_format, NULL, "\"safetensors\" or \"gguf\".", NULL},
	{"shards", (getter)model_get_shards, NULL, "Its files: a list of {\"path\", \"size\"}.", NULL},
	{"path", (getter)model_get_path, NULL, "The path it was loaded from.", NULL},
	{"device", (getter)model_get_device, NULL, "The Device it was loaded onto.", NULL},
	{"released", (getter)model_get_released, NULL, "True once release() was called.", NULL},
	{"views", (getter)model_get_views, NULL, "How many tensor views are alive.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods model_as_sequence = {
	.sq_contains = (objobjproc)model_contains,
};

static PyMappingMethods model_as_mapping = {
	.mp_length = (lenfunc)model_len,
	.mp_subscript = (binaryfunc)model_getitem,
};

PyTypeObject Model_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "devcache.Model",
	.tp_basicsize = sizeof(ModelObject),
	.tp_dealloc = (destructor)model_dealloc,
	.tp_repr = (reprfunc)model_repr,
	.tp_as_sequence = &model_as_sequence,
	.tp_as_mapping = &model_as_mapping,
	.tp_iter = (getiterfunc)model_iter,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A model in the cache, locked while this object holds it (Context.load()).\n\n"
		  "A mapping of tensor names to Tensor views: model[name], len(model),\n"
		  "name in model, iter(model), model.keys().  A context manager: it is\n"
		  "released on exit.  Each Tensor keeps the model locked while it lives.",
	.tp_methods = model_methods,
	.tp_getset = model_getset,
};
