# SPDX-License-Identifier: LGPL-2.1-or-later
"""Tests of the devcache package's model cache: loads, tensor views, zero copy, locks and the fake CUDA device.

Run: python3 tests/python/taprun.py tests/python/test_models.py, with
PYTHONPATH naming the folder that holds the devcache package.  The numpy
tests skip where numpy is missing, the torch ones where torch is; the
device tests need TEST_FAKES and TEST_BACKENDS (the fake CUDA driver).
"""
import gc
import os
import subprocess
import sys
import tempfile
import unittest

import devcache
import modelfiles as mf

try:
    import numpy
except ImportError:
    numpy = None
try:
    import torch
except ImportError:
    torch = None

NEED_NUMPY = unittest.skipUnless(numpy is not None, "numpy is not installed")
NEED_TORCH = unittest.skipUnless(torch is not None and numpy is not None,
                                 "torch (and numpy) are not installed")
FAKE_OPTIONS, NO_FAKE = mf.fake_cuda_options()
NEED_FAKE = unittest.skipUnless(FAKE_OPTIONS, NO_FAKE or "")

# Every dtype a safetensors file may hold that numpy has a type for:
# name -> (file dtype, shape, struct code, numpy typestr).
PLAIN = [
    ("f32", "F32", (2, 3), "f", "<f4"),
    ("f16", "F16", (3,), "e", "<f2"),
    ("f64", "F64", (2, 2), "d", "<f8"),
    ("i64", "I64", (4,), "q", "<i8"),
    ("i32", "I32", (2, 2), "i", "<i4"),
    ("i16", "I16", (3,), "h", "<i2"),
    ("i8", "I8", (5,), "b", "|i1"),
    ("u64", "U64", (2,), "Q", "<u8"),
    ("u32", "U32", (2,), "I", "<u4"),
    ("u16", "U16", (2,), "H", "<u2"),
    ("u8", "U8", (2, 3), "B", "|u1"),
]


def plain_bytes(fmt, shape, start):
    if fmt == "?":
        return bytes(i % 2 for i in range(mf.count(shape)))
    if fmt in "bB":
        return mf.ramp(fmt, shape, start % 100)
    return mf.ramp(fmt, shape, start, -1 if fmt in "qihb" else 1)


def all_dtypes():
    """Every dtype once, with known bytes: a tensors argument of modelfiles."""
    tensors = []
    for i, (name, dtype, shape, fmt, _typestr) in enumerate(PLAIN):
        tensors.append((name, (dtype, shape, plain_bytes(fmt, shape, 10 * i))))
    tensors.append(("bool", ("BOOL", (3,), b"\x00\x01\x01")))
    tensors.append(("bf16", ("BF16", (4,), mf.packed("H", [0x3F80, 0x4000, 0xBF80, 0x7F80]))))
    tensors.append(("f8", ("F8_E4M3", (5,), bytes([0x38, 0x40, 0xB8, 0x00, 0x7E]))))
    tensors.append(("scalar", ("F32", (), mf.f32([2.5]))))
    tensors.append(("empty", ("F32", (0, 3), b"")))
    return tensors


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Base(unittest.TestCase):
    options = None

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="test-models-")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.ctx = self.open_ctx()
        self.addCleanup(self.close_ctx)

    def open_ctx(self):
        return devcache.open(mf.isolated(self.options), config_files=False, environment=False)

    def close_ctx(self):
        # Views and models hold no cycles: they are gone once unreferenced,
        # and a view a test still holds only defers the real close.
        self.ctx.close()

    def path(self, name):
        return os.path.join(self.dir, name)

    def safetensors(self, tensors, metadata=None, name="model.safetensors"):
        return mf.write_safetensors(self.path(name), tensors, metadata)

    def gguf(self, tensors, metadata=None, name="model.gguf", alignment=32):
        return mf.write_gguf(self.path(name), tensors, metadata, alignment)


class HostLoads(Base):
    def setUp(self):
        super().setUp()
        self.tensors = all_dtypes()
        self.file = self.safetensors(self.tensors, {"format": "pt", "note": "a test"})

    def test_bytes(self):
        with self.ctx.load(self.file) as m:
            for name, (dtype, shape, raw) in self.tensors:
                t = m[name]
                self.assertEqual(t.name, name)
                self.assertEqual(t.dtype, dtype, name)
                self.assertEqual(t.shape, shape, name)
                self.assertEqual(t.nbytes, len(raw), name)
                self.assertEqual(t.tobytes(), raw, name)
                self.assertEqual(memoryview(t).tobytes(), raw, name)
                self.assertEqual(t.device, "host")
                self.assertTrue(t.readonly, name)
                self.assertIs(t.model, m)
                self.assertIn(repr(name), repr(t))

    def big_file(self):
        # One tensor over many pages, no byte of it zero; and where the file
        # will be cut, in the middle of it.
        raw = bytes(1 + (i * 7) % 251 for i in range(300000))
        path = self.safetensors([("big", ("U8", (len(raw),), raw))], name="big.safetensors")
        size = os.path.getsize(path)
        return path, raw, size - 200000, 100000

    def cut_elsewhere(self, path, size):
        # Another process opens the file for writing without waiting
        # (O_NONBLOCK: EWOULDBLOCK were there a lease on it) and cuts it.
        code = ("import os, sys\n"
                "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK)\n"
                "os.ftruncate(fd, int(sys.argv[2]))\n")
        r = subprocess.run([sys.executable, "-c", code, path, str(size)],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)

    def assert_changed(self, cm, path):
        self.assertIn(path, str(cm.exception))
        self.assertIn("changed while it was mapped", str(cm.exception))

    def test_a_view_of_a_file_cut_by_another_process_reads_zeros(self):
        # The view's pages past the cut read zeros, not SIGBUS; the bytes
        # before it are the file's; the model is then an error to use.
        path, raw, cut, keep = self.big_file()
        with self.ctx.load(path) as m:
            t = m["big"]
            mv = memoryview(t)
            self.assertEqual(mv.tobytes(), raw)
            self.cut_elsewhere(path, cut)
            self.assertEqual(mv.tobytes(), raw[:keep] + bytes(len(raw) - keep))
            with self.assertRaises(devcache.InputOutputError) as cm:
                m["big"]
            self.assert_changed(cm, path)
            with self.assertRaises(devcache.Error) as cm:
                t.tobytes()
            self.assert_changed(cm, path)
            self.assertIn("file changed while mapped", self.ctx.cache_summary())
            mv.release()

    @NEED_NUMPY
    def test_a_numpy_view_of_a_file_cut_by_another_process_reads_zeros(self):
        path, raw, cut, keep = self.big_file()
        for writable in (False, True):
            self.safetensors([("big", ("U8", (len(raw),), raw))], name="big.safetensors")
            with self.ctx.load(path, writable=writable) as m:
                a = numpy.asarray(m["big"])
                self.assertEqual(a.tobytes(), raw)
                self.cut_elsewhere(path, cut)
                self.assertEqual(a[:keep].tobytes(), raw[:keep])
                self.assertFalse(a[keep:].any())
                with self.assertRaises(devcache.Error) as cm:
                    numpy.asarray(m["big"])
                self.assert_changed(cm, path)
                del a

    def test_faulthandler_enabled_before_the_load(self):
        # python -X faulthandler (as pytest) installs its SIGBUS handler
        # before devcache's: devcache's, installed at the first mapping,
        # answers the fault in its mapping and faulthandler stays quiet.
        path, raw, cut, keep = self.big_file()
        code = ("import faulthandler, os, sys, devcache\n"
                "assert faulthandler.is_enabled()\n"
                "ctx = devcache.open('log_level:error', config_files=False, environment=False)\n"
                "m = ctx.load(sys.argv[1])\n"
                "mv = memoryview(m['big'])\n"
                "os.truncate(sys.argv[1], int(sys.argv[2]))\n"
                "sys.stdout.write(mv.tobytes().hex())\n")
        r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code, path, str(cut)],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(bytes.fromhex(r.stdout), raw[:keep] + bytes(len(raw) - keep))
        self.assertNotIn("Fatal Python error", r.stderr)

    def test_memoryview(self):
        with self.ctx.load(self.file) as m:
            for name, dtype, shape, fmt, _typestr in PLAIN:
                mv = memoryview(m[name])
                self.assertEqual(mv.format, fmt, name)
                self.assertEqual(mv.shape, shape, name)
                self.assertEqual(mv.itemsize, len(mf.packed(fmt, [0])), name)
                self.assertTrue(mv.readonly, name)
                self.assertTrue(mv.c_contiguous, name)
            mv = memoryview(m["bf16"])
            self.assertEqual((mv.format, mv.itemsize, mv.shape), ("H", 2, (4,)))
            mv = memoryview(m["scalar"])
            self.assertEqual((mv.ndim, mv.shape), (0, ()))
            with self.assertRaises(TypeError):
                memoryview(m["u8"])[0, 0] = 1

    @NEED_NUMPY
    def test_numpy_dtypes(self):
        with self.ctx.load(self.file) as m:
            for (name, (dtype, shape, raw)), plain in zip(self.tensors, PLAIN):
                a = numpy.asarray(m[name])
                self.assertEqual(a.dtype, numpy.dtype(plain[4]), name)
                self.assertEqual(a.shape, shape, name)
                self.assertEqual(a.tobytes(), raw, name)
                expect = numpy.frombuffer(raw, dtype=plain[4]).reshape(shape)
                self.assertTrue(numpy.array_equal(a, expect), name)
            a = numpy.asarray(m["bool"])
            self.assertEqual(a.dtype, numpy.bool_)
            self.assertEqual(a.tolist(), [False, True, True])
            self.assertEqual(numpy.asarray(m["f32"]).tolist(), [[0, 1, 2], [3, 4, 5]])
            self.assertEqual(float(numpy.asarray(m["scalar"])), 2.5)
            self.assertEqual(numpy.asarray(m["empty"]).shape, (0, 3))

    @NEED_NUMPY
    def test_raw_dtypes(self):
        with self.ctx.load(self.file) as m:
            t = m["bf16"]
            self.assertEqual(t.dtype, "BF16")
            self.assertTrue(t.raw)
            self.assertEqual(t.typestr, "<u2")
            a = numpy.asarray(t)
            self.assertEqual(a.dtype, numpy.uint16)
            self.assertEqual(a.tolist(), [0x3F80, 0x4000, 0xBF80, 0x7F80])
            # The uint16 view widens to float32 bit for bit.
            widened = (a.astype(numpy.uint32) << 16).view(numpy.float32)
            self.assertEqual(widened.tolist(), [1.0, 2.0, -1.0, float("inf")])
            t = m["f8"]
            self.assertEqual((t.dtype, t.raw), ("F8_E4M3", True))
            a = numpy.asarray(t)
            self.assertEqual(a.dtype, numpy.uint8)
            self.assertEqual(a.tobytes(), bytes([0x38, 0x40, 0xB8, 0x00, 0x7E]))
            self.assertFalse(m["f32"].raw)

    @NEED_NUMPY
    def test_zero_copy(self):
        with self.ctx.load(self.file) as m:
            t = m["f32"]
            a, b = numpy.asarray(t), numpy.asarray(m["f32"])
            self.assertTrue(numpy.shares_memory(a, b))
            self.assertEqual(a.__array_interface__["data"][0], t.data_ptr)
            self.assertEqual(t.__array_interface__["data"], (t.data_ptr, True))
            # The bytes are the file's own mapping, at the tensor's offset.
            where, perms = mf.mapping_of(t.data_ptr)
            self.assertEqual(where, os.path.realpath(self.file))
            self.assertNotIn("w", perms)
            info = devcache.inspect(self.file)
            offset = [x["offset"] for x in info["tensors"] if x["name"] == "f32"][0]
            self.assertEqual(mf.read_bytes(self.file, offset, t.nbytes), a.tobytes())
            self.assertEqual(a.base is not None, True)

    @NEED_NUMPY
    def test_read_only(self):
        with self.ctx.load(self.file) as m:
            a = numpy.asarray(m["f32"])
            self.assertFalse(a.flags.writeable)
            with self.assertRaises(ValueError):
                a[0, 0] = 7
            with self.assertRaises(ValueError):
                a.setflags(write=True)
            with self.assertRaises((BufferError, TypeError)):
                memoryview(m["f32"]).cast("B")[0] = 1
            self.assertEqual(a[0, 0], 0)

    @NEED_NUMPY
    def test_writable(self):
        before = mf.read_bytes(self.file)
        with self.ctx.load(self.file, writable=True) as m:
            t = m["f32"]
            self.assertFalse(t.readonly)
            a = numpy.asarray(t)
            self.assertTrue(a.flags.writeable)
            a[1, 2] = 42.0
            self.assertEqual(numpy.asarray(m["f32"])[1, 2], 42.0)
            self.assertEqual(t.tobytes()[20:], mf.f32([42.0]))
            self.assertEqual(t.__array_interface__["data"], (t.data_ptr, False))
            where, perms = mf.mapping_of(t.data_ptr)
            self.assertEqual(where, os.path.realpath(self.file))
            self.assertIn("p", perms)  # private: copy on write
            mv = memoryview(t)
            self.assertFalse(mv.readonly)
            mv.cast("B")[0] = 0x7F
            self.assertEqual(a.tobytes()[0], 0x7F)
        self.assertEqual(mf.read_bytes(self.file), before)
        # A read-only load of the same file is another cache entry: the file's bytes.
        with self.ctx.load(self.file) as m:
            self.assertEqual(numpy.asarray(m["f32"])[1, 2], 5.0)

    def test_array_interface(self):
        with self.ctx.load(self.file) as m:
            ai = m["f32"].__array_interface__
            self.assertEqual(set(ai), {"version", "shape", "typestr", "data", "strides", "descr"})
            self.assertEqual(ai["version"], 3)
            self.assertEqual(ai["shape"], (2, 3))
            self.assertEqual(ai["typestr"], "<f4")
            self.assertIsNone(ai["strides"])
            self.assertEqual(ai["descr"], [("", "<f4")])
            self.assertEqual(m["f8"].__array_interface__["typestr"], "|u1")
            self.assertRaises(AttributeError, getattr, m["f32"], "__cuda_array_interface__")

    def test_dlpack_device(self):
        with self.ctx.load(self.file) as m:
            self.assertEqual(m["f32"].__dlpack_device__(), (1, 0))

    def test_dlpack_read_only(self):
        with self.ctx.load(self.file) as m:
            t = m["f32"]
            # Legacy DLPack has no read-only flag: refused.
            self.assertRaises(BufferError, t.__dlpack__)
            self.assertRaises(BufferError, t.__dlpack__, max_version=(0, 8))
            # DLPack 1.0 carries the flag.
            cap = t.__dlpack__(max_version=(1, 0))
            self.assertIn("dltensor_versioned", repr(cap))
            self.assertRaises(BufferError, t.__dlpack__, copy=True)
            self.assertRaises(TypeError, t.__dlpack__, max_version=1)
            refs = sys.getrefcount(t)
            cap2 = t.__dlpack__(max_version=(1, 0))
            self.assertEqual(sys.getrefcount(t), refs + 1)  # an unconsumed capsule holds t
            del cap, cap2
            self.assertEqual(sys.getrefcount(t), refs - 1)
            self.assertEqual(m.views, 1)

    @NEED_NUMPY
    def test_numpy_from_dlpack(self):
        with self.ctx.load(self.file, writable=True) as m:
            t = m["f32"]
            a = numpy.from_dlpack(t)
            self.assertTrue(numpy.shares_memory(a, numpy.asarray(t)))
            self.assertEqual(a.tolist(), [[0, 1, 2], [3, 4, 5]])
            self.assertEqual(numpy.from_dlpack(m["scalar"]).shape, ())
            # numpy has no bfloat16: it says so (not "error return without
            # exception set", the capsule's destructor having cleared it).
            with self.assertRaises(Exception) as cm:
                numpy.from_dlpack(m["bf16"])
            self.assertNotIsInstance(cm.exception, SystemError)
        with self.ctx.load(self.file) as m:
            self.assertRaises(BufferError, numpy.from_dlpack, m["f32"])

    @NEED_TORCH
    def test_torch(self):
        with self.ctx.load(self.file, writable=True) as m:
            t = m["f32"]
            x = torch.from_dlpack(t)
            self.assertEqual(x.dtype, torch.float32)
            self.assertEqual(tuple(x.shape), (2, 3))
            self.assertEqual(x.data_ptr(), t.data_ptr)
            y = torch.as_tensor(numpy.asarray(t))
            self.assertEqual(y.data_ptr(), t.data_ptr)
            x[0, 1] = 9.0
            self.assertEqual(numpy.asarray(t)[0, 1], 9.0)
            self.assertEqual(torch.from_dlpack(m["i64"]).tolist(),
                             list(memoryview(m["i64"]).tolist()))
            # DLPack carries BF16 as itself, where numpy's view is uint16.
            b = torch.from_dlpack(m["bf16"])
            self.assertEqual(b.dtype, torch.bfloat16)
            self.assertEqual(b.tolist(), [1.0, 2.0, -1.0, float("inf")])
            self.assertEqual(torch.from_dlpack(m["f8"]).dtype, torch.uint8)
            del x, y
        with self.ctx.load(self.file) as m:
            self.assertRaises(BufferError, torch.from_dlpack, m["f32"])


class Gguf(Base):
    def setUp(self):
        super().setUp()
        self.q4 = mf.pattern("q4", mf.gguf_tensor_size("Q4_0", (64, 2)))
        self.q8 = mf.pattern("q8", mf.gguf_tensor_size("Q8_0", (32,)))
        self.tensors = [
            ("w", ("F32", (3, 2), mf.ramp("f", (6,)))),
            ("q4", ("Q4_0", (64, 2), self.q4)),
            ("h", ("F16", (4,), mf.f16([0.5, 1, 2, 4]))),
            ("q8", ("Q8_0", (32,), self.q8)),
            ("i", ("I32", (2, 1, 2), mf.packed("i", [1, -2, 3, -4]))),
        ]
        self.metadata = [
            ("general.architecture", "llama"), ("n", 7), ("neg", ("i32", -3)), ("f", 0.5),
            ("b", True), ("names", ["x", "y"]), ("ints", [1, 2, 3]), ("big", ("u64", 1 << 40)),
        ]
        self.file = self.gguf(self.tensors, self.metadata)

    def test_shapes_and_bytes(self):
        with self.ctx.load(self.file) as m:
            self.assertEqual(m.format, "gguf")
            self.assertEqual(m.keys(), ["w", "q4", "h", "q8", "i"])
            self.assertEqual(m["w"].shape, (2, 3))
            self.assertEqual(m["q4"].shape, (2, 64))
            self.assertEqual(m["i"].shape, (2, 1, 2))
            for name, (_t, _ne, raw) in self.tensors:
                self.assertEqual(m[name].tobytes(), raw, name)
            self.assertEqual(m["q4"].dtype, "Q4_0")
            self.assertTrue(m["q4"].raw)
            self.assertEqual(memoryview(m["q4"]).shape, (len(self.q4),))
            self.assertEqual(memoryview(m["q4"]).format, "B")

    def test_metadata(self):
        with self.ctx.load(self.file) as m:
            self.assertEqual(m.metadata, {"general.architecture": "llama", "n": 7, "neg": -3,
                                          "f": 0.5, "b": True, "names": ["x", "y"],
                                          "ints": [1, 2, 3], "big": 1 << 40})
            self.assertEqual(list(m.metadata), [k for k, _ in self.metadata])

    def test_alignment(self):
        f = self.gguf(self.tensors, [("general.alignment", ("u32", 64))], name="a64.gguf",
                      alignment=64)
        info = devcache.inspect(f)
        self.assertEqual(info["data_offset"] % 64, 0)
        for t in info["tensors"]:
            self.assertEqual((t["offset"] - info["data_offset"]) % 64, 0)
        with self.ctx.load(f) as m:
            self.assertEqual(m["i"].tobytes(), self.tensors[4][1][2])

    @NEED_NUMPY
    def test_numpy(self):
        with self.ctx.load(self.file) as m:
            w = numpy.asarray(m["w"])
            self.assertEqual(w.dtype, numpy.float32)
            self.assertEqual(w.tolist(), [[0, 1, 2], [3, 4, 5]])
            self.assertEqual(numpy.asarray(m["h"]).tolist(), [0.5, 1, 2, 4])
            for name, raw in (("q4", self.q4), ("q8", self.q8)):
                a = numpy.asarray(m[name])
                self.assertEqual(a.dtype, numpy.uint8)
                self.assertEqual(a.shape, (len(raw),))
                self.assertEqual(a.tobytes(), raw)
            self.assertEqual(numpy.asarray(m["i"]).tolist(), [[[1, -2]], [[3, -4]]])
            self.assertEqual(mf.mapping_of(m["q4"].data_ptr)[0], os.path.realpath(self.file))

    def test_split(self):
        shards = [[("a", ("F32", (2,), mf.f32([1, 2])))], [],
                  [("b", ("Q8_0", (32,), self.q8)), ("c", ("I32", (1,), mf.packed("i", [-7])))]]
        paths = mf.write_gguf_split(self.dir, shards, "split")
        for start in (paths[0], paths[2]):  # any shard names the set
            with self.ctx.load(start) as m:
                self.assertEqual(m.keys(), ["a", "b", "c"])
                self.assertEqual([s["path"] for s in m.shards], paths)
                self.assertEqual(m["b"].tobytes(), self.q8)
                self.assertEqual(memoryview(m["c"]).tolist(), [-7])
                self.assertEqual(m.metadata["general.name"], "split")
        info = devcache.inspect(paths[1])
        self.assertEqual([(t["name"], t["shard"]) for t in info["tensors"]],
                         [("a", 0), ("b", 2), ("c", 2)])

    def test_inspect(self):
        info = devcache.inspect(self.file)
        self.assertEqual(info["format"], "gguf")
        self.assertEqual(info["version"], 3)
        self.assertEqual(info["size"], os.path.getsize(self.file))
        self.assertEqual(info["path"], self.file)
        self.assertEqual(info["shards"], [{"path": self.file, "size": info["size"]}])
        self.assertEqual(info["metadata"]["names"], ["x", "y"])
        by = {t["name"]: t for t in info["tensors"]}
        self.assertEqual([t["name"] for t in info["tensors"]], ["w", "q4", "h", "q8", "i"])
        self.assertEqual(by["q4"]["shape"], (2, 64))
        self.assertEqual(by["q4"]["dtype"], "Q4_0")
        self.assertEqual(by["q4"]["size"], len(self.q4))
        self.assertEqual(by["w"]["offset"], info["data_offset"])
        self.assertEqual(mf.read_bytes(self.file, by["q8"]["offset"], by["q8"]["size"]), self.q8)
        self.assertEqual({t["shard"] for t in info["tensors"]}, {0})


class ModelApi(Base):
    def setUp(self):
        super().setUp()
        self.tensors = [("zeta", ("U8", (3,), b"zzz")), ("alpha", ("U8", (2,), b"aa")),
                        ("mid.weight", ("F32", (1,), mf.f32([1.5])))]
        self.file = self.safetensors(self.tensors, {"format": "pt", "k": "v"})

    def test_mapping(self):
        with self.ctx.load(self.file) as m:
            self.assertEqual(m.keys(), ["zeta", "alpha", "mid.weight"])  # file order
            self.assertEqual(list(m), m.keys())
            self.assertEqual(len(m), 3)
            self.assertIn("alpha", m)
            self.assertNotIn("beta", m)
            self.assertNotIn(3, m)
            self.assertEqual(m.metadata, {"format": "pt", "k": "v"})
            self.assertEqual(m.format, "safetensors")
            self.assertEqual(m.path, self.file)
            self.assertEqual(m.device, self.ctx.device("host"))
            self.assertEqual(m.shards, [{"path": self.file, "size": os.path.getsize(self.file)}])
            self.assertFalse(m.released)
            self.assertIn("model.safetensors", repr(m))
            self.assertRaises(KeyError, m.__getitem__, "beta")
            self.assertRaises(TypeError, m.__getitem__, 3)
        self.assertTrue(m.released)
        self.assertIn("released", repr(m))

    def test_names_with_nul(self):
        # The C API takes NUL-terminated names: "alpha\0x" must not find "alpha".
        with self.ctx.load(self.file) as m:
            self.assertNotIn("alpha\0x", m)
            self.assertRaises((KeyError, ValueError), m.__getitem__, "alpha\0x")

    def test_info(self):
        with self.ctx.load(self.file) as m:
            info = m.info
            self.assertEqual(info, {"device": "host", "device_bytes": 0, "host_bytes": 9,
                                    "tensors": 3, "device_tensors": 0, "partial": False,
                                    "locks": 1})
            with self.ctx.load(self.file) as again:
                self.assertEqual(m.info["locks"], 2)
                self.assertEqual(again.info["locks"], 2)

    def test_result_and_cache_stats(self):
        base = self.ctx.cache_stats()
        with self.ctx.load(self.file) as m:
            r = m.result
            self.assertEqual(set(r), {"hit", "from_ram", "bytes_read", "bytes_uploaded",
                                      "seconds", "device_bytes", "host_bytes"})
            self.assertFalse(r["hit"])
            self.assertIsInstance(r["bytes_read"], int)
            self.assertEqual(r["host_bytes"], 9)
            self.assertGreaterEqual(r["seconds"], 0)
            r["hit"] = "changed"
            self.assertFalse(m.result["hit"])  # a copy
        with self.ctx.load(self.file) as m:
            self.assertTrue(m.result["hit"])
            self.assertEqual(m.result["bytes_read"], 0)
        s = self.ctx.cache_stats()
        self.assertEqual(s["hits"] - base["hits"], 1)
        self.assertEqual(s["misses"] - base["misses"], 1)
        self.assertEqual(s["models"], 1)
        self.assertEqual(s["locked_models"], 0)
        self.assertEqual(s["ram_used"], os.path.getsize(self.file))
        text = self.ctx.cache_summary()
        self.assertIsInstance(text, str)
        self.assertIn(self.file, text)
        self.assertRegex(text, r"\n  hits +1 \(")

    def test_evict(self):
        with self.ctx.load(self.file):
            self.assertEqual(self.ctx.evict_all(), 0)  # locked
        self.assertTrue(mf.mapped(self.file))
        self.assertEqual(self.ctx.evict_all(), 1)
        self.assertFalse(mf.mapped(self.file))
        s = self.ctx.cache_stats()
        self.assertEqual((s["models"], s["evictions"]), (0, 1))
        with self.ctx.load(self.file) as m:
            self.assertFalse(m.result["hit"])

    def test_sharded_set(self):
        shards = [
            [("a", ("U8", (4,), b"aaaa")), ("b", ("U8", (2,), b"bb"))],
            [("c", ("F32", (2,), mf.f32([1, 2])))],
            [("d", ("U8", (1,), b"d")), ("e", ("U8", (3,), b"eee"))],
        ]
        index = mf.write_safetensors_set(self.dir, shards)
        names = [mf.shard_name("model", k, 3) for k in range(3)]
        with self.ctx.load(index) as m:
            self.assertEqual(m.keys(), ["a", "b", "c", "d", "e"])
            self.assertEqual([os.path.basename(s["path"]) for s in m.shards], names)
            for s in m.shards:
                self.assertEqual(s["size"], os.path.getsize(s["path"]))
            for shard in shards:
                for name, (_d, _s, raw) in shard:
                    self.assertEqual(m[name].tobytes(), raw)
                    self.assertEqual(memoryview(m[name]).tobytes(), raw)
            self.assertEqual(m.format, "safetensors")
            self.assertEqual(m.metadata["format"], "pt")  # the shards'
            self.assertEqual(m.metadata["total_size"], 18)  # the index's
            self.assertEqual(mf.mapping_of(m["e"].data_ptr)[0],
                             os.path.realpath(self.path(names[2])))
        info = devcache.inspect(index)
        self.assertEqual(info["format"], "safetensors")
        self.assertEqual([os.path.basename(s["path"]) for s in info["shards"]], names)
        self.assertEqual([(t["name"], t["shard"]) for t in info["tensors"]],
                         [("a", 0), ("b", 0), ("c", 1), ("d", 2), ("e", 2)])
        c = info["tensors"][2]
        self.assertEqual((c["dtype"], c["shape"], c["size"]), ("F32", (2,), 8))
        self.assertEqual(mf.read_bytes(self.path(names[1]), c["offset"], 8), mf.f32([1, 2]))

    def test_folder(self):
        folder = self.path("one")
        os.mkdir(folder)
        f = mf.write_safetensors(os.path.join(folder, "weights.safetensors"), self.tensors)
        with self.ctx.load(folder) as m:
            self.assertEqual(m.keys(), ["zeta", "alpha", "mid.weight"])
            self.assertEqual([s["path"] for s in m.shards], [f])
            self.assertEqual(m["alpha"].tobytes(), b"aa")
        self.assertEqual(devcache.inspect(folder)["shards"][0]["path"], f)

    def test_inspect(self):
        info = devcache.inspect(self.file)
        self.assertEqual(set(info), {"path", "format", "version", "size", "data_offset",
                                     "shards", "metadata", "tensors"})
        self.assertEqual(info["format"], "safetensors")
        self.assertEqual(info["size"], os.path.getsize(self.file))
        self.assertEqual(info["metadata"], {"format": "pt", "k": "v"})
        self.assertEqual(info["data_offset"] % 8, 0)
        t = info["tensors"]
        self.assertEqual([x["name"] for x in t], ["zeta", "alpha", "mid.weight"])
        self.assertEqual(set(t[0]), {"name", "dtype", "shape", "offset", "size", "shard"})
        self.assertEqual(t[0]["offset"], info["data_offset"])
        self.assertEqual(t[1]["offset"], info["data_offset"] + 3)
        self.assertEqual((t[2]["dtype"], t[2]["shape"], t[2]["size"]), ("F32", (1,), 4))
        self.assertEqual(devcache.inspect(path=self.file.encode())["size"], info["size"])


class Progress(Base):
    def setUp(self):
        super().setUp()
        self.file = self.safetensors([("t%d" % i, ("U8", (4096,), mf.pattern("t%d" % i, 4096)))
                                      for i in range(4)])

    def test_progress(self):
        calls = []
        with self.ctx.load(self.file, progress=lambda d, t: calls.append((d, t))):
            pass
        self.assertTrue(calls)
        total = calls[-1][1]
        self.assertEqual(calls[-1][0], total)
        self.assertGreaterEqual(total, 4 * 4096)
        for (d0, t0), (d1, t1) in zip(calls, calls[1:]):
            self.assertLessEqual(d0, d1)
            self.assertEqual(t0, t1)

    def test_progress_raising_cancels(self):
        class Stop(Exception):
            pass

        def stop(done, total):
            raise Stop("stop at %d" % done)

        base = self.ctx.cache_stats()["cancelled_loads"]
        with self.assertRaises(Stop):
            self.ctx.load(self.file, progress=stop)
        s = self.ctx.cache_stats()
        self.assertEqual(s["cancelled_loads"], base + 1)
        self.assertEqual(s["models"], 0)
        self.assertEqual(s["locked_models"], 0)
        # And the next load works.
        with self.ctx.load(self.file) as m:
            self.assertEqual(m["t1"].tobytes(), mf.pattern("t1", 4096))
            self.assertFalse(m.result["hit"])

    def test_progress_calls_back_into_the_library(self):
        seen = []
        with self.ctx.load(self.file, progress=lambda d, t: seen.append(
                self.ctx.cache_stats()["misses"])):
            pass
        self.assertTrue(seen)


class Locks(Base):
    def setUp(self):
        super().setUp()
        self.raw = mf.pattern("w", 1000)
        self.file = self.safetensors([("w", ("U8", (1000,), self.raw)),
                                      ("v", ("U8", (10,), mf.pattern("v", 10)))])

    def test_view_keeps_the_model_locked(self):
        m = self.ctx.load(self.file)
        view = m["w"]
        self.assertEqual(m.views, 1)
        m.release()
        self.assertTrue(m.released)
        self.assertRaises(ValueError, getattr, m, "info")
        self.assertRaises(ValueError, m.__getitem__, "v")
        self.assertEqual(m.views, 1)
        self.assertEqual(self.ctx.cache_stats()["locked_models"], 1)
        self.assertEqual(self.ctx.evict_all(), 0)
        self.assertEqual(view.tobytes(), self.raw)
        self.assertEqual(memoryview(view).tobytes(), self.raw)
        del view
        gc.collect()
        self.assertEqual(m.views, 0)
        self.assertEqual(self.ctx.cache_stats()["locked_models"], 0)
        self.assertEqual(self.ctx.evict_all(), 1)
        self.assertFalse(mf.mapped(self.file))

    def test_views_count(self):
        with self.ctx.load(self.file) as m:
            views = [m["w"] for _ in range(5)]
            self.assertEqual(m.views, 5)
            mv = memoryview(views[0])
            del views
            self.assertEqual(m.views, 1)  # the memoryview holds its tensor
            mv.release()
            self.assertEqual(m.views, 0)

    @NEED_NUMPY
    def test_array_keeps_the_model_locked(self):
        m = self.ctx.load(self.file)
        a = numpy.asarray(m["w"])
        m.release()
        del m
        gc.collect()
        self.assertEqual(self.ctx.evict_all(), 0)
        self.assertEqual(a.tobytes(), self.raw)
        del a
        gc.collect()
        self.assertEqual(self.ctx.evict_all(), 1)

    def test_no_leak(self):
        m = self.ctx.load(self.file, writable=True)
        self.addCleanup(m.release)

        def churn(n):
            for _ in range(n):
                t = m["w"]
                memoryview(t).tobytes()
                t.__array_interface__
                t.__dlpack__()
                if numpy is not None:
                    numpy.asarray(t)
                    numpy.from_dlpack(t)

        churn(200)  # warm up: caches, the allocator's arenas
        gc.collect()
        refs = sys.getrefcount(m)
        rss = rss_kib()
        churn(10000)
        gc.collect()
        self.assertEqual(m.views, 0)
        self.assertEqual(sys.getrefcount(m), refs)
        grown = rss_kib() - rss
        self.assertLess(grown, 3 * 1024, "RSS grew by %d KiB over 10,000 views" % grown)


@NEED_FAKE
class FakeDevice(Base):
    options = None

    def open_ctx(self):
        return devcache.open(FAKE_OPTIONS + ",staging_buffer_size:64K", config_files=False,
                             environment=False)

    def setUp(self):
        super().setUp()
        self.tensors = [("t%d" % i, ("F32", (128, 128), mf.pattern("t%d" % i, 65536)))
                        for i in range(4)]
        self.file = self.safetensors(self.tensors)

    def test_load_on_device(self):
        calls = []
        with self.ctx.load(self.file, device="cuda:0",
                           progress=lambda d, t: calls.append((d, t))) as m:
            self.assertEqual(m.device.id, "cuda:0")
            self.assertEqual(m.info["device_tensors"], 4)
            self.assertEqual(m.info["device_bytes"], 4 * 65536)
            self.assertEqual(m.result["bytes_uploaded"], 4 * 65536)
            t = m["t1"]
            self.assertEqual(t.device, "cuda:0")
            self.assertFalse(t.readonly)  # device memory: writes cannot fault
            self.assertEqual(t.tobytes(), self.tensors[1][1][2])
            cai = t.__cuda_array_interface__
            self.assertEqual(cai["version"], 3)
            self.assertEqual(cai["shape"], (128, 128))
            self.assertEqual(cai["typestr"], "<f4")
            self.assertEqual(cai["data"], (t.data_ptr, False))
            self.assertIsNone(cai["strides"])
            self.assertEqual(t.__dlpack_device__(), (2, 0))
            self.assertRaises(AttributeError, getattr, t, "__array_interface__")
            self.assertRaises(BufferError, memoryview, t)
        self.assertTrue(calls)
        self.assertEqual(calls[-1], (4 * 65536, 4 * 65536))
        self.assertEqual(calls, sorted(calls))

    def test_second_device(self):
        with self.ctx.load(self.file, device=self.ctx.device("cuda:1")) as m:
            self.assertEqual(m["t0"].__dlpack_device__(), (2, 1))
            self.assertEqual(m["t3"].tobytes(), self.tensors[3][1][2])

    def test_hit_on_device(self):
        with self.ctx.load(self.file, device="cuda:0") as m:
            self.assertFalse(m.result["hit"])
        with self.ctx.load(self.file, device="cuda:0") as m:
            self.assertTrue(m.result["hit"])
            self.assertEqual(m.result["bytes_uploaded"], 0)
            self.assertEqual(m["t2"].tobytes(), self.tensors[2][1][2])

    @NEED_NUMPY
    def test_numpy_refuses_device_tensors(self):
        with self.ctx.load(self.file, device="cuda:0") as m:
            t = m["t0"]
            with self.assertRaises(TypeError) as cm:
                numpy.asarray(t)
            self.assertIn("cuda:0", str(cm.exception))
            with self.assertRaises(Exception) as cm:
                numpy.from_dlpack(t)
            # numpy says why (a CUDA DLTensor), not "error return without exception set".
            self.assertNotIsInstance(cm.exception, SystemError)

    def test_progress_raising_on_device(self):
        def stop(done, total):
            raise KeyError("stop")

        with self.assertRaises(KeyError):
            self.ctx.load(self.file, device="cuda:0", progress=stop)
        self.assertEqual(self.ctx.cache_stats()["cancelled_loads"], 1)
        self.assertEqual(self.ctx.device("cuda:0").stats()["allocated_bytes.all.current"], 0)


class OtherBackends(Base):
    """HIP and Level Zero, on their fakes: what each device exports."""

    def setUp(self):
        super().setUp()
        self.raw = mf.f32([1, 2, 3, 4])
        self.file = self.safetensors([("w", ("F32", (2, 2), self.raw))])

    def load_on(self, backend):
        opts, why = mf.fake_options(backend)
        if not opts:
            self.skipTest(why)
        ctx = devcache.open(opts, config_files=False, environment=False)
        self.addCleanup(ctx.close)
        m = ctx.load(self.file, device=backend + ":1")
        self.addCleanup(m.release)
        t = m["w"]
        self.assertEqual(t.device, backend + ":1")
        self.assertEqual(t.tobytes(), self.raw)
        self.assertRaises(BufferError, memoryview, t)
        self.assertRaises(AttributeError, getattr, t, "__array_interface__")
        return t

    def test_hip(self):
        t = self.load_on("hip")
        self.assertEqual(t.__dlpack_device__(), (10, 1))  # kDLROCM
        cai = t.__cuda_array_interface__
        self.assertEqual((cai["shape"], cai["typestr"], cai["data"]),
                         ((2, 2), "<f4", (t.data_ptr, False)))

    def test_level_zero(self):
        t = self.load_on("ze")
        self.assertEqual(t.__dlpack_device__(), (14, 1))  # kDLOneAPI
        self.assertRaises(AttributeError, getattr, t, "__cuda_array_interface__")
        self.assertIn("dltensor", repr(t.__dlpack__()))


@NEED_FAKE
class Partial(Base):
    def open_ctx(self):
        return devcache.open(FAKE_OPTIONS + ",partial_loading:true,max_cache_vram:600K",
                             config_files=False, environment=False)

    def setUp(self):
        super().setUp()
        self.tensors = [("t%d" % i, ("F32", (256, 256), mf.pattern("t%d" % i, 1 << 18)))
                        for i in range(4)]
        self.file = self.safetensors(self.tensors)
        self.m = self.ctx.load(self.file, device="cuda:0")
        self.addCleanup(self.m.release)

    def places(self):
        return [self.m[k].device for k in self.m]

    def check_bytes(self):
        for name, (_d, _s, raw) in self.tensors:
            self.assertEqual(self.m[name].tobytes(), raw, name)

    def test_split(self):
        info = self.m.info
        self.assertTrue(info["partial"])
        self.assertEqual(info["device_tensors"], 2)
        self.assertEqual(info["device_bytes"] + info["host_bytes"], 4 << 18)
        self.assertEqual(self.places(), ["cuda:0", "cuda:0", "host", "host"])
        self.check_bytes()
        t = self.m["t3"]
        self.assertEqual(t.__dlpack_device__(), (1, 0))
        self.assertEqual(t.__array_interface__["data"][0], t.data_ptr)
        self.assertTrue(t.readonly)
        self.assertEqual(memoryview(t).tobytes(), self.tensors[3][1][2])
        self.assertRaises(AttributeError, getattr, t, "__cuda_array_interface__")
        self.assertEqual(self.m["t0"].__cuda_array_interface__["shape"], (256, 256))

    def test_move(self):
        self.m.move_to_host(["t0"])
        self.assertEqual(self.places(), ["host", "cuda:0", "host", "host"])
        self.m.make_resident(["t3"])
        self.assertEqual(self.places(), ["host", "cuda:0", "host", "cuda:0"])
        self.check_bytes()
        self.m.move_to_host()
        self.assertEqual(self.places(), ["host"] * 4)
        self.assertEqual(self.m.info["device_tensors"], 0)
        self.m.make_resident(names=("t2",))
        self.assertEqual(self.places(), ["host", "host", "cuda:0", "host"])
        self.check_bytes()

    def test_busy_while_views_live(self):
        t = self.m["t0"]
        with self.assertRaises(devcache.BusyError) as cm:
            self.m.move_to_host(["t0"])
        self.assertIn("view", str(cm.exception))
        self.assertRaises(devcache.BusyError, self.m.make_resident, ["t3"])
        self.assertEqual(t.tobytes(), self.tensors[0][1][2])
        del t
        self.m.move_to_host(["t0"])

    def test_bad_names(self):
        self.assertRaises(TypeError, self.m.make_resident, "t3")
        self.assertRaises(TypeError, self.m.move_to_host, b"t3")
        self.assertRaises(TypeError, self.m.make_resident, [3])
        self.assertRaises(TypeError, self.m.make_resident, 3)
        with self.assertRaises(devcache.NotFoundError):
            self.m.make_resident(["nonesuch"])
        self.assertEqual(self.places(), ["cuda:0", "cuda:0", "host", "host"])

    def test_too_big(self):
        with self.assertRaises(devcache.OutOfMemoryError):
            self.m.make_resident()
        self.check_bytes()


if __name__ == "__main__":
    unittest.main()
