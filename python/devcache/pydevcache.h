/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pydevcache.h - the objects of the devcache Python extension and the rules that keep them safe.
 *
 * Lifetimes.  A Context owns a devcache_ctx_t.  Every Device, Model and
 * Tensor holds a strong reference to what it came from (Tensor -> Model ->
 * Context), so memory a view exposes can never be freed under it.  Closing
 * is deferred: Context.close() refuses new work at once, but calls
 * devcache_close() only when no call is running without the GIL and no
 * model handle is held ("busy" counts both).  Model.release() likewise
 * refuses new views at once and calls devcache_model_release() when the
 * last view dies.  Every counter is changed with the GIL held.
 *
 * The GIL is released around every library call that may block or take a
 * lock the loading thread holds while it calls back into Python (the
 * progress callback).
 *
 * Files.  _devcache.c: the module, its exceptions and the pdc_ helpers;
 * pycontext.c: Context; pydevice.c: Device; pymodel.c: load, Model and
 * inspect; pytensor.c: Tensor views; pypickle.c: the pickle check;
 * pycow.c: the private host tensors of devcache.torch and safe_open.
 * pymanage.c: the model cache driven model by model.
 */
#ifndef PYDEVCACHE_H
#define PYDEVCACHE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <devcache.h>

typedef struct {
	PyObject_HEAD
	devcache_ctx_t *ctx;   /* NULL once closed */
	int closing;           /* close() called: no new work */
	int borrowed;          /* the process-wide torch context: never closed */
	Py_ssize_t busy;       /* calls without the GIL, plus live model handles */
} ContextObject;

typedef struct {
	PyObject_HEAD
	ContextObject *owner;
	devcache_device_t *dev;
	devcache_device_info_t info;
} DeviceObject;

typedef struct {
	PyObject_HEAD
	ContextObject *owner;
	DeviceObject *device;
	devcache_model_t *model;           /* NULL once released for real */
	const devcache_model_file_t *file; /* valid while model is */
	int released;                      /* release() called */
	int writable;
	int host;                          /* the device is host memory */
	Py_ssize_t views;                  /* pins: live Tensor objects, calls without the GIL */
	int moving;                        /* make_resident/move_to_host running */
	PyObject *path;
	PyObject *metadata;                /* dict, made on first use */
	PyObject *result;                  /* dict: what the load did */
	int cow;                           /* its host pages are claimed (pycow.c) */
} ModelObject;

extern PyTypeObject Context_Type, Device_Type, Model_Type, Tensor_Type;

/* pymanage.c: the methods of Context and Model that drive the model cache
 * model by model. */
PyObject *pdc_ctx_models(ContextObject *self, PyObject *ignored);
PyObject *pdc_ctx_evict(ContextObject *self, PyObject *args, PyObject *kw);
PyObject *pdc_ctx_offload(ContextObject *self, PyObject *args, PyObject *kw);
PyObject *pdc_ctx_make_room(ContextObject *self, PyObject *args, PyObject *kw);
PyObject *pdc_ctx_device_stats(ContextObject *self, PyObject *device);
PyObject *pdc_model_lock(ModelObject *self, PyObject *args, PyObject *kw);
PyObject *pdc_model_evict(ModelObject *self, PyObject *ignored);
PyObject *pdc_model_set_device_bytes(ModelObject *self, PyObject *bytes);

/* Raise the exception class of err with the library's detail message. */
PyObject *pdc_raise(int err);
/* text as the library shows text from input: control characters and
 * bytes that are not UTF-8 as \xNN (lib/utf8.h).  Takes text over; NULL
 * with an exception set where it fails. */
PyObject *pdc_shown(PyObject *text);
/* Raise the exception class of err with a message of our own. */
PyObject *pdc_raise_msg(int err, const char *fmt, ...);
/* Enter a call on ctx (raises ValueError when it is closed); leave it. */
int pdc_enter(ContextObject *ctx);
void pdc_leave(ContextObject *ctx);
/* A Device object for dev, from the context's tuple. */
DeviceObject *pdc_device_for(ContextObject *ctx, devcache_device_t *dev);
/* The Device named by obj: a Device of ctx or a name such as "cuda:0". */
DeviceObject *pdc_device_arg(ContextObject *ctx, PyObject *obj);
/* A name as UTF-8 for the C API: NULL with ValueError when it holds a NUL
 * (C would read a shorter name) or TypeError when it is not a str. */
const char *pdc_name(PyObject *obj, const char *what);
/* JSON text to a Python object (json.loads). */
PyObject *pdc_json(const char *text);
/* Run fn(FILE *, arg) into a memory stream, without the GIL; returns str. */
PyObject *pdc_capture(int (*fn)(void *, FILE *), void *arg, int as_json);

/* A view of a model's tensor (pytensor.c). */
PyObject *pdc_tensor_new(ModelObject *model, const char *name);
/* Hold the model's handle: a view while it lives, or a call while the GIL
 * is out, so that another thread's release() cannot give it back under
 * either.  The last unpin after release() gives the handle back. */
/* 0 where the model may be used; -1 with ValueError set where it was
 * released or its context is closing. */
int pdc_model_usable(ModelObject *model);
void pdc_model_pin(ModelObject *model);
void pdc_model_unpin(ModelObject *model);

/* The model cache: ctx.load() and the Model and Tensor objects. */
PyObject *pdc_load(ContextObject *ctx, PyObject *args, PyObject *kw);
/* devcache.inspect(path) */
PyObject *pdc_inspect(PyObject *self, PyObject *args, PyObject *kw);
/* Tensor shape in numpy's order, dtype, and whether it is raw bytes. */
int pdc_tensor_layout(const devcache_model_file_t *mf, const devcache_tensor_info_t *ti,
		      PyObject **shape_p);

/* _check_pickle(data, max_depth, max_objects): what unpickling data could
 * cost, bounded (pypickle.c). */
PyObject *pdc_check_pickle(PyObject *self, PyObject *args);

/* _cow_claim(model) -> bool: make a writable host model's pages the
 * file's and hold them for this Model, when it is their only holder
 * (pycow.c).  pdc_cow_release() gives them back as its handle goes. */
PyObject *pdc_cow_claim(PyObject *self, PyObject *model);
void pdc_cow_release(ModelObject *model);

#endif /* PYDEVCACHE_H */
