# SPDX-License-Identifier: LGPL-2.1-or-later
"""devcache._weights - a model's tensors as torch tensors or numpy arrays: safe_open and the loads of devcache.torch.

Where the bytes come from, and why nothing done to a tensor can crash the
process or change what a later load returns:

- On the host, the model is loaded writable: its files mapped private and
  copy-on-write.  The tensors are writable views of that mapping; an
  in-place op copies only the pages it touches, in this process, and the
  file never changes.  The load claims the mapping (_devcache._cow_claim,
  pycow.c) only when no other load holds it, discarding whatever an
  earlier load wrote, so its tensors show the file as it is; when the last
  tensor goes, the pages written are discarded again.  When another
  load's tensors still hold the mapping (or the mmap tunable is false), the
  tensors are copies, made from the read-only mapping.
- On a device, the tensors are the cache's one copy of the model, shared
  by every load of it; copy=True makes tensors of their own (one
  device-to-device copy).
- Every tensor holds its model locked while it lives (a torch tensor holds
  the numpy array or the CUDA array interface object that holds the
  devcache.Tensor view).

torch and numpy are imported when first needed: `import devcache` needs
neither.
"""
import collections
import functools
import traceback

from . import _devcache

# The file's type names and torch's dtypes, by attribute name: a dtype the
# installed torch lacks (float8 before 2.1, uint16 before 2.3) is refused
# by name.  GGUF's quantized types have no torch dtype and are refused.
_TORCH_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
    "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8", "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
}

# The types whose numpy array torch.from_numpy takes as the same type.
_NUMPY_AND_TORCH = {"F64", "F32", "F16", "I64", "I32", "I16", "I8", "U8", "BOOL"}

_FRAMEWORKS = {"pt": "pt", "torch": "pt", "pytorch": "pt", "np": "np", "numpy": "np"}


def _unlocking(fn):
    """fn, whose exceptions hold no tensor: a traceback keeps the locals of
    its frames alive, and with them the views that keep a model locked for
    as long as the caller keeps the exception."""
    @functools.wraps(fn)
    def call(*args, **kw):
        try:
            return fn(*args, **kw)
        except BaseException as e:
            traceback.clear_frames(e.__traceback__)
            raise
    return call


def _import_torch(what):
    try:
        import torch
    except ImportError as e:
        raise RuntimeError("%s needs PyTorch (import torch failed: %s)" % (what, e)) from e
    return torch


def torch_dtype(torch, name, dtype):
    """torch's dtype for the file's type dtype of tensor name; TypeError
    naming both when this torch has none."""
    attr = _TORCH_DTYPES.get(dtype)
    if attr is None:
        raise TypeError(
            "devcache: tensor %r is %s, a type torch has no dtype for (a quantized GGUF "
            "type): read its bytes through devcache.open().load()" % (name, dtype))
    found = getattr(torch, attr, None)
    if found is None:
        raise TypeError("devcache: tensor %r is %s, and torch %s has no torch.%s"
                        % (name, dtype, torch.__version__, attr))
    return found


class _DeviceBytes:
    """A device tensor's bytes for torch.as_tensor, as one uint8 row: torch
    (1.13 too) reads no bfloat16, bool or float8 from the CUDA array
    interface, so the bytes come as uint8 and are viewed as the dtype."""

    def __init__(self, view):
        iface = view.__cuda_array_interface__
        self.view = view   # holds the model locked while torch holds this
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (view.nbytes,), "typestr": "|u1", "data": iface["data"],
            "strides": None, "stream": None}


def _index(device):
    """torch's CUDA device index in safetensors' device argument ("cpu",
    "cuda", "cuda:N", N, a torch.device); None for the host."""
    if isinstance(device, bool):
        raise TypeError("devcache: a device is \"cpu\", \"cuda:N\", an index or a "
                        "torch.device, not %r" % (device,))
    index = None
    if device is None or device == "cpu":
        pass
    elif isinstance(device, int):
        index = device
    elif isinstance(device, str):
        if device == "cuda":
            index = 0
        elif device.startswith("cuda:") and device[5:].isdigit():
            index = int(device[5:])
        else:
            raise ValueError("devcache: unknown device %r (\"cpu\", \"cuda\", \"cuda:N\" or "
                             "an index)" % (device,))
    else:
        kind = getattr(device, "type", None)   # a torch.device
        if kind == "cpu":
            pass
        elif kind == "cuda":
            index = device.index if device.index is not None else 0
        else:
            raise ValueError("devcache: unknown device %r" % (device,))
    if index is not None and index < 0:
        raise ValueError("devcache: device index %d is negative" % index)
    return index


def _where(device, framework, ctx):
    """(devcache device id, torch.device or None) for the device argument.
    torch's CUDA device N is the process-wide context's (hip:N on a ROCm
    build), or in a context of the caller's, its device of that name."""
    index = _index(device)
    if index is None:
        return "host", None
    if framework != "pt":
        raise ValueError("devcache: numpy arrays live on the host: device must be \"cpu\", "
                         "not %r" % (device,))
    torch = _import_torch("devcache.safe_open(framework=\"pt\")")
    if ctx is None:
        name = _devcache._torch_device(index)
    else:
        name = ("hip:%d" if getattr(torch.version, "hip", None) else "cuda:%d") % index
    return name, torch.device("cuda", index)


class _Open:
    """A model opened for its tensors: the Model handle, and how its tensors
    are made (views of the claimed private mapping, the device copy, or
    copies)."""

    def __init__(self, path, framework, device, copy, ctx):
        fw = _FRAMEWORKS.get(framework) if isinstance(framework, str) else None
        if fw is None:
            raise ValueError("devcache: framework %r is not one devcache makes tensors for "
                             "(\"pt\" or \"np\")" % (framework,))
        self.framework = fw
        self.torch = _import_torch("devcache.safe_open(framework=\"pt\")") if fw == "pt" else None
        import numpy
        self.numpy = numpy
        self.device_id, self.torch_device = _where(device, fw, ctx)
        self.ctx = ctx if ctx is not None else _devcache._torch_context()
        self.host = self.device_id == "host"
        self.copy = bool(copy)
        self.dtypes = {}
        self.model = None
        if self.host and not self.copy:
            model = self.ctx.load(path, writable=True)
            try:
                private = _devcache._cow_claim(model)
            except BaseException:
                model.release()
                raise
            if private:
                self.model = model
            else:
                model.release()
                self.copy = True
        if self.model is None:
            self.model = self.ctx.load(path, device=self.device_id)
        self.path = self.model.path

    def close(self):
        if self.model is not None:
            self.model.release()   # the tensors made keep it locked
            self.model = None

    def _usable(self):
        if self.model is None:
            raise ValueError("devcache: %s is closed" % (self.path,))
        return self.model

    def view(self, name):
        model = self._usable()
        try:
            return model[name]
        except KeyError:
            pass
        raise KeyError("devcache: %s holds no tensor %r" % (self.path, name))

    def tensor(self, name):
        view = self.view(name)
        if self.framework == "np":
            return self._array(view)
        return self._torch(view)

    def tensors(self, names):
        """{name: tensor} for names, in that order."""
        make = self._array if self.framework == "np" else self._torch
        view = self.view
        return {name: make(view(name)) for name in names}

    def _bytes(self, view):
        """The view's bytes as one uint8 row on the host: the view itself, or
        a copy of it."""
        row = self.numpy.frombuffer(view, dtype=self.numpy.uint8)
        return row.copy() if self.copy else row

    def _array(self, view):
        if view.dtype not in _TORCH_DTYPES:
            raise TypeError(
                "devcache: tensor %r is %s, a quantized GGUF type numpy has no dtype for: read "
                "its bytes through devcache.open().load()" % (view.name, view.dtype))
        a = self.numpy.frombuffer(view, dtype=view.typestr)
        return (a.copy() if self.copy else a).reshape(view.shape)

    def _torch(self, view):
        torch = self.torch
        dtype = self.dtypes.get(view.dtype)
        if dtype is None:
            dtype = self.dtypes[view.dtype] = torch_dtype(torch, view.name, view.dtype)
        if self.host and view.dtype in _NUMPY_AND_TORCH:
            return torch.from_numpy(self._array(view))   # the common case, in fewer steps
        if self.host:
            t = torch.from_numpy(self._bytes(view))
        else:
            if view.device.split(":")[0] not in ("cuda", "hip"):
                raise ValueError("devcache: tensor %r is on %s, which torch cannot take"
                                 % (view.name, view.device))
            t = torch.as_tensor(_DeviceBytes(view), device=self.torch_device)
        if dtype != torch.uint8:
            t = t.view(dtype)
        t = t.reshape(view.shape)
        if self.copy and not self.host:
            t = t.clone()
        return t

    def info(self, name):
        view = self.view(name)
        return view.dtype, list(view.shape)


class SafeSlice:
    """safe_open(...).get_slice(name): the tensor's shape and type, and
    [...] for a part of it (basic indexing: ints, slices, Ellipsis)."""

    def __init__(self, opened, name):
        self._opened = opened
        self._name = name
        self._dtype, self._shape = opened.info(name)

    def get_shape(self):
        """The whole tensor's shape, a list."""
        return list(self._shape)

    def get_dtype(self):
        """The file's type name: "F32", "BF16" ..."""
        return self._dtype

    @_unlocking
    def __getitem__(self, key):
        return self._opened.tensor(self._name)[key]

    def __repr__(self):
        return "<devcache.SafeSlice %r %s %r>" % (self._name, self._dtype, self._shape)


class safe_open:   # noqa: N801 - the name of Hugging Face's class, which this replaces
    """safe_open(path, framework="pt", device="cpu", *, copy=False, ctx=None)

    Hugging Face's safetensors.safe_open, for every model devcache reads (a
    safetensors file, an index with its shards, a GGUF file or split, a
    folder): `from devcache import safe_open` in place of `from safetensors
    import safe_open`.  framework "pt" (torch tensors) or "np" (numpy
    arrays); device "cpu", "cuda", "cuda:N", an index or a torch.device.
    A context manager; keys(), offset_keys(), metadata(), get_tensor(name),
    get_slice(name).  See devcache-python(3), "Loading a model".
    """

    def __init__(self, path, framework="pt", device="cpu", *, copy=False, ctx=None):
        if _FRAMEWORKS.get(framework) == "pt" and _index(device) is not None:
            # Before the model goes to the device; and torch (1.13) keeps a
            # reference to what it failed to take, which would stay locked.
            torch = _import_torch("devcache.safe_open(framework=\"pt\")")
            if not torch.cuda.is_available():
                raise RuntimeError("devcache: torch %s cannot use device %r (torch.cuda."
                                   "is_available() is False)" % (torch.__version__, device))
        self._opened = _Open(path, framework, device, copy, ctx)

    def __enter__(self):
        self._opened._usable()
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Unlock the model; the tensors already made keep it locked."""
        self._opened.close()

    def keys(self):
        """The tensor names, sorted (as safetensors lists them)."""
        return sorted(self._opened._usable().keys())

    def offset_keys(self):
        """The tensor names in file order (shard order, then file order)."""
        return list(self._opened._usable().keys())

    def metadata(self):
        """The file's metadata (safetensors' __metadata__, GGUF's key-value
        pairs), or None when it has none."""
        return self._opened._usable().metadata or None

    @_unlocking
    def get_tensor(self, name):
        """The tensor name, as a torch tensor or numpy array (no copy unless
        copy=True or another load holds the host mapping)."""
        return self._opened.tensor(name)

    def get_slice(self, name):
        """A SafeSlice of tensor name: get_shape(), get_dtype(), [...]."""
        return SafeSlice(self._opened, name)

    def __repr__(self):
        return "<devcache.safe_open %r>" % (self._opened.path,)


@_unlocking
def load_file(path, device="cpu", *, framework="pt", copy=False, ctx=None):
    """Every tensor of the model at path, {name: tensor}, in keys() order."""
    with safe_open(path, framework, device, copy=copy, ctx=ctx) as f:
        return f._opened.tensors(f.keys())


IncompatibleKeys = collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _module_device(module):
    for t in list(module.parameters()) + list(module.buffers()):
        if t.device.type != "meta":
            return t.device
    return "cpu"


@_unlocking
def load_state_dict(module, path, device=None, *, strict=True, copy=False, ctx=None):
    """The model at path as module's parameters and buffers, without a copy."""
    torch = _import_torch("devcache.torch.load_state_dict")
    expected = module.state_dict(keep_vars=True)
    if device is None:
        device = _module_device(module)
    with safe_open(path, "pt", device, copy=copy, ctx=ctx) as f:
        present = set(f.offset_keys())
        missing = [k for k in expected if k not in present]
        unexpected = [k for k in f.offset_keys() if k not in expected]
        errors = []
        if strict and missing:
            errors.append("missing key(s) in %s: %s" % (f._opened.path, ", ".join(missing)))
        if strict and unexpected:
            errors.append("unexpected key(s) in %s: %s"
                          % (f._opened.path, ", ".join(unexpected)))
        names = [k for k in expected if k in present]
        for name in names:
            dtype_name, shape = f._opened.info(name)
            target = expected[name]
            try:
                dtype = torch_dtype(torch, name, dtype_name)
            except TypeError as e:
                errors.append(str(e))
                continue
            if list(target.shape) != shape:
                errors.append("tensor %r: the file has shape %s, the module %s"
                              % (name, shape, list(target.shape)))
            elif target.dtype != dtype:
                errors.append("tensor %r: the file has %s (%s), the module %s; devcache does "
                              "not cast" % (name, dtype_name, dtype, target.dtype))
        if errors:
            raise RuntimeError("devcache: error(s) loading %s into %s:\n\t%s"
                               % (f._opened.path, type(module).__name__, "\n\t".join(errors)))
        tensors = f._opened.tensors(names)
    for name, t in tensors.items():
        owner_name, _, leaf = name.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        old = expected[name]
        if leaf in owner._parameters:
            owner._parameters[leaf] = torch.nn.Parameter(t, requires_grad=old.requires_grad)
        else:
            owner._buffers[leaf] = t
    return IncompatibleKeys(missing, unexpected)
