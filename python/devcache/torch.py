# SPDX-License-Identifier: LGPL-2.1-or-later
"""devcache.torch - model weights into PyTorch without a copy, and libdevcache's allocator under PyTorch.

    import torch, devcache.torch
    with torch.device("meta"):                # torch 2.0+; on 1.13: device="meta"
        model = MyModel()                     # no memory for the weights
    devcache.torch.load_state_dict(model, "model.safetensors")  # the cached tensors themselves
    sd = devcache.torch.load_file("model.safetensors", device="cuda:0")

load_file() and load_state_dict() read every model devcache reads
(safetensors, an index with shards, GGUF, a folder).  Host tensors are
writable views of a private copy-on-write mapping of the file: an
in-place op never reaches the file, and a later load returns the file's
weights.  Device tensors are the cache's one copy (copy=True: tensors of
their own).  Each tensor keeps its model locked while it lives.

The allocator:

    import torch, devcache.torch
    devcache.torch.use_devcache_allocator()   # before the first CUDA allocation
    x = torch.empty(1 << 20, device="cuda")
    print(devcache.torch.memory_stats(0)["allocated_bytes.all.current"])

use_devcache_allocator() hands PyTorch the library's entry points
devcache_torch_malloc and devcache_torch_free through
torch.cuda.memory.CUDAPluggableAllocator (PyTorch 2.0 or later).  They are
served by one process-wide context, opened on first use from the usual
configuration (devcache.conf, DEVCACHE_OPTIONS) and PYTORCH_CUDA_ALLOC_CONF,
which ranks below DEVCACHE_OPTIONS.  torch's device N is cuda:N (hip:N on a
ROCm build).  The context lives until the process exits.  See
devcache-torch(3).
"""
from . import _devcache
from . import _weights
from ._weights import IncompatibleKeys  # noqa: F401


def _torch():
    try:
        import torch
    except ImportError as e:
        raise RuntimeError("devcache.torch needs PyTorch (import torch failed: %s)" % e) from e
    return torch


def use_devcache_allocator():
    """Make libdevcache PyTorch's CUDA (or ROCm) allocator for this process.

    Call it before the first CUDA allocation: PyTorch cannot change its
    allocator after that.  Returns the CUDAPluggableAllocator.
    """
    torch = _torch()
    memory = getattr(torch.cuda, "memory", None)
    pluggable = getattr(memory, "CUDAPluggableAllocator", None)
    change = getattr(memory, "change_current_allocator", None)
    if pluggable is None or change is None:
        raise RuntimeError(
            "devcache.torch needs PyTorch 2.0 or later "
            "(torch.cuda.memory.CUDAPluggableAllocator); this is torch %s" % torch.__version__)
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "devcache.torch.use_devcache_allocator() must run before PyTorch's first CUDA "
            "allocation; CUDA is already initialised in this process")
    allocator = pluggable(_devcache._library_path(), "devcache_torch_malloc",
                          "devcache_torch_free")
    change(allocator)
    return allocator


def _index(device):
    if device is None:
        try:
            torch = _torch()
            return torch.cuda.current_device()
        except Exception:
            return 0
    if isinstance(device, bool):
        raise TypeError("devcache.torch: a device is an index, a name or a torch.device")
    if isinstance(device, int):
        return device
    if not isinstance(device, str):
        index = getattr(device, "index", None)   # a torch.device
        if isinstance(index, int):
            return index
    text = str(device)
    if text in ("cuda", "hip"):
        return 0
    for prefix in ("cuda:", "hip:"):
        if text.startswith(prefix) and text[len(prefix):].isdigit():
            return int(text[len(prefix):])
    raise ValueError("devcache.torch: %r is not a CUDA device index or name" % (device,))


def context():
    """The process-wide Context that serves PyTorch's allocations.

    It is opened on first use and never closed; close() on it does nothing.
    """
    return _devcache._torch_context()


def get_device(device=None):
    """The Device that serves torch's device (an index, "cuda:1", a torch.device;
    None: torch's current device)."""
    ctx = context()
    return ctx.device(_devcache._torch_device(_index(device)))


def memory_stats(device=None):
    """The allocator's statistics for torch's device, with the keys of
    torch.cuda.memory_stats()."""
    return get_device(device).stats()


def memory_summary(device=None):
    """The memory summary of torch's device, as torch.cuda.memory_summary()."""
    return get_device(device).summary()


def empty_cache(device=None):
    """Return the cached, unused memory of torch's device to the driver."""
    get_device(device).empty_cache()


def load_file(path, device="cpu", *, copy=False, ctx=None):
    """load_file(path, device="cpu", *, copy=False, ctx=None) -> {name: torch.Tensor}

    Every tensor of the model at path, as safetensors.torch.load_file
    returns them: device "cpu" (the host), "cuda", "cuda:N", an index or a
    torch.device.  No copy is made: host tensors are writable views of a
    private copy-on-write mapping of the file (a write changes this
    process's pages only, and a later load returns the file's weights);
    device tensors are the cache's one copy, which a write changes.
    copy=True gives tensors that own their memory.  ctx: the Context whose
    cache holds the model (default: the process-wide one,
    devcache.torch.context()).  A type torch lacks (a quantized GGUF type,
    float8 before torch 2.1) raises TypeError naming the tensor.
    """
    return _weights.load_file(path, device, framework="pt", copy=copy, ctx=ctx)


def load_state_dict(module, path, device=None, *, strict=True, copy=False, ctx=None):
    """load_state_dict(module, path, device=None, *, strict=True, copy=False, ctx=None)

    Make the tensors of the model at path module's parameters and buffers,
    by name, without a copy: for a module built on the meta device, as
    torch.load(mmap=True) + module.load_state_dict(assign=True) would, on
    torch 1.13 too.  Each Parameter keeps its requires_grad.  device: where
    the tensors go (default: where the module's tensors are, the host for a
    meta module).  Returns (missing_keys, unexpected_keys); with strict, any
    of them raises RuntimeError, and so does a shape or dtype that differs
    (never a cast), naming the tensor, before anything is assigned.
    """
    return _weights.load_state_dict(module, path, device, strict=strict, copy=copy, ctx=ctx)
