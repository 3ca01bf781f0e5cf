# SPDX-License-Identifier: LGPL-2.1-or-later
"""devcache - libdevcache from Python: device memory and a model cache for neural networks.

A context holds the tunables (from devcache.conf, DEVCACHE_OPTIONS and the
options given here), the backends and their devices, each device's caching
allocator (PyTorch's policy and statistics), and the model cache:

    import numpy, devcache

    with devcache.open() as ctx:
        print([d.id for d in ctx.devices])          # ['host', 'cuda:0', ...]
        with ctx.load("model.safetensors") as model:  # mapped, not copied
            w = numpy.asarray(model["lm_head.weight"])  # a zero-copy view
            print(w.dtype, w.shape, model.metadata)

        dev = ctx.device("cuda:0")
        p = dev.alloc(1 << 20)
        print(dev.stats()["allocated_bytes.all.current"])  # torch's keys
        dev.free(p)
        print(dev.summary())                        # torch.cuda.memory_summary()

Model files: safetensors, GGUF, a *.safetensors.index.json with its shards,
any shard of a GGUF split, or a folder holding one model.  A Tensor view
keeps its model locked (never evicted) while it lives; on the host it is
the buffer protocol and __array_interface__, on a CUDA or HIP device
__cuda_array_interface__, and __dlpack__ on both.

Errors are instances of devcache.Error, one subclass per error code
(FormatError, OutOfMemoryError, ConfigError ...), each carrying the
library's message in str(e) and e.detail, and its code in e.code.  Bad
arguments raise TypeError or ValueError; anything used after its context
is closed or its model released raises ValueError.

The GIL is released during loads and every call that may block.

devcache.safe_open is Hugging Face's safe_open for every model devcache
reads (framework "pt" or "np"), and devcache.torch.load_state_dict(module,
path) makes a model's tensors a torch module's weights without a copy
(devcache-python(3), "Loading a model").

See devcache-python(3), libdevcache(3) and devcache.conf(5).  devcache.torch
puts the allocator under PyTorch; devcache.trace_from_torch turns a PyTorch
memory snapshot into a trace for `devcache replay`.
"""
from ._devcache import (  # noqa: F401
    ABIError,
    BackendError,
    BusyError,
    CanceledError,
    ConfigError,
    Context,
    Device,
    Error,
    FormatError,
    InputOutputError,
    InvalidArgumentError,
    Model,
    NoDeviceError,
    NotFoundError,
    NotReadyError,
    NotSupportedError,
    OutOfMemoryError,
    Tensor,
    inspect,
    strerror,
    version,
    version_number,
)
from ._weights import safe_open  # noqa: F401

__version__ = version

__all__ = [
    "open", "inspect", "safe_open", "strerror", "version", "Context", "Device", "Model", "Tensor",
    "Error", "ABIError", "BackendError", "BusyError", "CanceledError", "ConfigError",
    "FormatError", "InputOutputError", "InvalidArgumentError", "NoDeviceError",
    "NotFoundError", "NotReadyError", "NotSupportedError", "OutOfMemoryError",
]


def open(options=None, *, config_files=True, environment=True):
    """open(options=None, *, config_files=True, environment=True) -> Context

    Open a libdevcache context.  options is a string of tunables,
    "key:value,key:value" (see devcache.conf(5)), applied over those of
    the configuration files and DEVCACHE_OPTIONS.  config_files=False
    reads no devcache.conf; environment=False reads no DEVCACHE_*
    variable.  Use it in a with statement, or call close().
    """
    return Context(options, config_files=config_files, environment=environment)
