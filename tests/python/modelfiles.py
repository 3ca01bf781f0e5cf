# SPDX-License-Identifier: LGPL-2.1-or-later
"""modelfiles.py - small safetensors and GGUF files, and shard sets, with known contents, for the Python tests.

Pure Python (struct and json), so that the tests that only write and load
files run where numpy is missing.  The layouts follow tests/model-writer.c:
the safetensors header is padded with spaces to a multiple of 8 bytes and
__metadata__ comes first; a GGUF file is version 3, its data section starts
at the alignment (32, or general.alignment), and each tensor's data is
followed by zero bytes up to the next multiple of it (the last one's too).

A tensor is given as name -> (dtype, shape, data): tensors is a dict or a
list of (name, (dtype, shape, data)) pairs, written in that order.  For
safetensors, dtype is the file's name ("F32", "BF16", "F8_E4M3" ...) and
shape is outermost first; for GGUF, dtype is a ggml type name or number
("F32", "Q4_0", 8 ...) and shape is ne, innermost first, as the file
holds it.

Also the few things every test module needs beside files: where a file is
mapped in this process, and the options of an isolated context (on the
fake vendor runtimes of tests/fakes, for the device tests).
"""
import json
import os
import struct

# ---- contents ------------------------------------------------------------------


def name_hash(name):
    """FNV-1a, 32 bits, of the UTF-8 name (model-writer.c's name_hash)."""
    h = 2166136261
    for c in name.encode("utf-8"):
        h ^= c
        h = (h * 16777619) & 0xFFFFFFFF
    return h


def pattern(name, size, seed=0):
    """size bytes for the tensor name: byte j is (h * 31 + j * 7 + seed) & 0xff,
    as mw_byte() makes them, so a C test and a Python test agree."""
    h = name_hash(name) * 31 + seed
    return bytes((h + j * 7) & 0xFF for j in range(size))


def packed(fmt, values):
    """Little-endian values of one struct code: packed("f", [1.0, 2.5])."""
    values = list(values)
    return struct.pack("<%d%s" % (len(values), fmt), *values)


def f32(values):
    return packed("f", values)


def f16(values):
    return packed("e", values)


def count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def ramp(fmt, shape, start=0, step=1):
    """The values start, start + step, ... filling shape, packed with fmt:
    distinct and exact in every type they fit."""
    return packed(fmt, (start + i * step for i in range(count(shape))))


def _items(tensors):
    if tensors is None:
        return []
    if isinstance(tensors, dict):
        return list(tensors.items())
    return list(tensors)


# ---- safetensors -----------------------------------------------------------------


def safetensors_bytes(tensors, metadata=None):
    """The bytes of a safetensors file holding tensors, packed with no gaps."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = dict(metadata)
    data = []
    off = 0
    for name, (dtype, shape, raw) in _items(tensors):
        raw = bytes(raw)
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [off, off + len(raw)]}
        data.append(raw)
        off += len(raw)
    return raw_safetensors(header, b"".join(data))


def raw_safetensors(header, data=b"", pad=True):
    """A safetensors file from a header (a dict, or JSON text or bytes taken
    as they are) and its data: for files the rules refuse."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"))
    if isinstance(header, str):
        header = header.encode("utf-8")
    if pad:
        header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + bytes(data)


def write_safetensors(path, tensors, metadata=None):
    """Write a safetensors file; returns path."""
    return write_bytes(path, safetensors_bytes(tensors, metadata))


def shard_name(stem, k, n, ext="safetensors"):
    """The name of shard k (0-based) of n, as transformers names them."""
    return "%s-%05d-of-%05d.%s" % (stem, k + 1, n, ext)


def write_safetensors_set(directory, shards, stem="model", metadata=None, total_size=None):
    """Hugging Face sharded safetensors in directory: shards is a list, one
    tensors argument per shard; STEM-0000K-of-0000N.safetensors each with
    __metadata__ {"format": "pt"} (or metadata), and
    STEM.safetensors.index.json = {"metadata": {"total_size": N},
    "weight_map": {name: file}} in the order given.  total_size: None for
    the true sum.  Returns the index's path."""
    n = len(shards)
    weight_map = {}
    total = 0
    for k, tensors in enumerate(shards):
        name = shard_name(stem, k, n)
        items = _items(tensors)
        write_safetensors(os.path.join(directory, name), items,
                          {"format": "pt"} if metadata is None else metadata)
        for tname, (_dtype, _shape, raw) in items:
            weight_map[tname] = name
            total += len(raw)
    index = {"metadata": {"total_size": total if total_size is None else total_size},
             "weight_map": weight_map}
    path = os.path.join(directory, "%s.safetensors.index.json" % stem)
    with open(path, "w") as f:
        json.dump(index, f, indent=2)
    return path


# ---- GGUF ---------------------------------------------------------------------------

# ggml's types that the tests use: number, elements per block, bytes per block
# (lib/gguf-tensors.c's table).
GGML_TYPES = {
    "F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20),
    "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q8_1": (9, 32, 36),
    "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110), "Q4_K": (12, 256, 144),
    "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210), "Q8_K": (15, 256, 292),
    "I8": (24, 1, 1), "I16": (25, 1, 2), "I32": (26, 1, 4), "I64": (27, 1, 8),
    "F64": (28, 1, 8), "BF16": (30, 1, 2),
}

# GGUF's metadata value types.
GGUF_VTYPES = {
    "u8": (0, "B"), "i8": (1, "b"), "u16": (2, "H"), "i16": (3, "h"), "u32": (4, "I"),
    "i32": (5, "i"), "f32": (6, "f"), "bool": (7, "?"), "str": (8, None), "array": (9, None),
    "u64": (10, "Q"), "i64": (11, "q"), "f64": (12, "d"),
}


def gguf_tensor_size(ggml_type, ne):
    """Bytes of a tensor of ggml_type (a name or number) and shape ne, as
    ggml_nbytes counts them: whole blocks along ne[0]."""
    _num, blck, size = _ggml_type(ggml_type)
    if ne[0] % blck:
        raise ValueError("ne[0] %d is not a multiple of the block size %d" % (ne[0], blck))
    n = ne[0] // blck * size
    for d in ne[1:]:
        n *= d
    return n


def _ggml_type(t):
    if isinstance(t, int):
        for v in GGML_TYPES.values():
            if v[0] == t:
                return v
        return (t, 1, 1)
    return GGML_TYPES[t]


def _gguf_str(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _kind_of(value):
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "u32" if 0 <= value < 1 << 32 else "i64"
    if isinstance(value, float):
        return "f32"
    if isinstance(value, (str, bytes)):
        return "str"
    if isinstance(value, (list, tuple)):
        return "array"
    raise TypeError("no GGUF type for %r" % (value,))


def _gguf_value(kind, value):
    """kind's type number and the value's bytes."""
    num, code = GGUF_VTYPES[kind]
    if kind == "str":
        return num, _gguf_str(value)
    if kind == "array":
        items = list(value)
        inner = _kind_of(items[0]) if items else "u32"
        if items and all(isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str)
                         for v in items):
            inner = items[0][0]
            items = [v[1] for v in items]
        inner_num = GGUF_VTYPES[inner][0]
        body = b"".join(_gguf_value(inner, v)[1] for v in items)
        return num, struct.pack("<IQ", inner_num, len(items)) + body
    return num, struct.pack("<" + code, value)


def gguf_kv(key, value):
    """One metadata entry: value's type from Python's (str, bool, int as
    u32 (i64 when negative or large), float as f32, a list as an array of
    its first item's type), or forced with a (kind, value) tuple such as
    ("u16", 3), ("f64", 0.5), ("array", [("i32", 1), ("i32", -2)])."""
    if isinstance(value, tuple) and len(value) == 2 and value[0] in GGUF_VTYPES:
        kind, value = value
    else:
        kind = _kind_of(value)
    num, body = _gguf_value(kind, value)
    return _gguf_str(key) + struct.pack("<I", num) + body


def gguf_bytes(tensors, metadata=None, alignment=32):
    """The bytes of a GGUF v3 file.  metadata: a dict or list of (key, value)
    pairs (see gguf_kv); general.alignment is added when alignment is not 32
    and metadata does not give it."""
    kvs = _items(metadata)
    if alignment != 32 and not any(k == "general.alignment" for k, _ in kvs):
        kvs.append(("general.alignment", ("u32", alignment)))
    items = _items(tensors)
    head = [b"GGUF", struct.pack("<IQQ", 3, len(items), len(kvs))]
    head += [gguf_kv(k, v) for k, v in kvs]
    data = []
    off = 0
    for name, (ggml_type, ne, raw) in items:
        raw = bytes(raw)
        num = _ggml_type(ggml_type)[0]
        head.append(_gguf_str(name) + struct.pack("<I", len(ne)) +
                    struct.pack("<%dQ" % len(ne), *ne) + struct.pack("<IQ", num, off))
        pad = b"\0" * (-len(raw) % alignment)
        data.append(raw + pad)
        off += len(raw) + len(pad)
    head = b"".join(head)
    head += b"\0" * (-len(head) % alignment)
    return head + b"".join(data)


def write_gguf(path, tensors, metadata=None, alignment=32):
    """Write a GGUF v3 file; returns path."""
    return write_bytes(path, gguf_bytes(tensors, metadata, alignment))


def write_gguf_split(directory, shards, prefix="model"):
    """A GGUF split as llama.cpp's gguf-split writes it (model-writer.c's
    mw_gguf_split): PREFIX-0000K-of-0000N.gguf, shard k holding shards[k]
    (a tensors argument); shard 0 carries general.architecture "llama" and
    general.name PREFIX, every shard split.no (u16), split.count (u16) and
    split.tensors.count (i32).  Returns the paths, shard 0's first."""
    n = len(shards)
    total = sum(len(_items(t)) for t in shards)
    paths = []
    for k, tensors in enumerate(shards):
        kv = [("general.architecture", "llama"), ("general.name", prefix)] if k == 0 else []
        kv += [("split.no", ("u16", k)), ("split.count", ("u16", n)),
               ("split.tensors.count", ("i32", total))]
        paths.append(write_gguf(os.path.join(directory, shard_name(prefix, k, n, "gguf")),
                                tensors, kv))
    return paths


# ---- files ----------------------------------------------------------------------------


def write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return path


def read_bytes(path, offset=0, size=None):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read() if size is None else f.read(size)


def mapping_of(address):
    """(path, permissions) of the mapping that holds address in this
    process, from /proc/self/maps ("" for an anonymous one); (None, None)
    when none does."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(None, 5)
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi:
                return (fields[5].strip() if len(fields) > 5 else ""), fields[1]
    return None, None


def mapped(path):
    """Whether the file path is mapped in this process."""
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        return any(line.rstrip("\n").endswith(" " + real) for line in f)


# ---- the test environment ----------------------------------------------------------


def isolated(options=None):
    """The options every test context starts from, with options appended:
    errors only in the log (no config file or environment is read: the
    tests pass config_files=False, environment=False)."""
    return "log_level:error" + ("," + options if options else "")


def fake_options(backend="cuda", options=None):
    """(options, None) for a context whose backend ("cuda", "hip" or "ze")
    runs on its fake vendor runtime, tests/fakes/libfake-BACKEND.so (two
    1 GiB devices), with options appended; or (None, why) when TEST_FAKES
    or TEST_BACKENDS does not lead to it."""
    fakes = os.environ.get("TEST_FAKES")
    backends = os.environ.get("TEST_BACKENDS")
    if not fakes or not backends:
        return None, "TEST_FAKES and TEST_BACKENDS are not set (run through make check)"
    lib = os.path.join(fakes, "libfake-%s.so" % backend)
    if not os.path.exists(lib):
        return None, "no fake %s runtime at %s" % (backend, lib)
    module = backend + ".so"
    if not any(os.path.exists(os.path.join(d, module)) for d in backends.split(":")):
        return None, "no %s backend module in %s" % (backend, backends)
    opts = "backend_path:%s,backends:host,%s,%s_library:%s" % (backends, backend, backend, lib)
    return isolated(opts + ("," + options if options else "")), None


def fake_cuda_options(options=None):
    """fake_options("cuda", options): the fake CUDA driver."""
    return fake_options("cuda", options)
