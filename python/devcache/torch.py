# SPDX-License-Identifier: LGPL-2.1-or-later
"""devcache.torch - libdevcache's allocator under PyTorch.

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
