# SPDX-License-Identifier: LGPL-2.1-or-later
"""test_load_torch.py - devcache.torch.load_file, load_state_dict and devcache.safe_open: dtypes, meta-device modules, in-place writes, slices, sets, locks.

What runs where: with Debian's torch (CPU), every host path (load_file,
load_state_dict on meta-device modules, safe_open for "pt" and "np", the
copy-on-write rules, copy=True, every dtype torch has, the errors).
Device tensors cannot reach a CPU build of torch: on the fake CUDA driver
the tests check what devcache hands torch (the CUDA array interface of the
bytes, the lock it holds) and that the failed hand-over leaves no lock.
"""
import gc
import os
import struct
import subprocess
import sys
import tempfile
import textwrap
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

if torch is not None and numpy is not None:
    import devcache.torch as dt
    from devcache import _weights

NEED_TORCH = unittest.skipUnless(torch is not None and numpy is not None,
                                 "torch (and numpy) are not installed")
FAKE_OPTIONS, NO_FAKE = mf.fake_cuda_options()
NEED_FAKE = unittest.skipUnless(FAKE_OPTIONS, NO_FAKE or "")

# Every type of the file torch 1.13 has: file dtype -> (numpy dtype for the
# reference values, torch dtype name).  BF16's reference is its bit pattern.
TORCH_TYPES = {
    "F64": ("<f8", "float64"), "F32": ("<f4", "float32"), "F16": ("<f2", "float16"),
    "BF16": ("<u2", "bfloat16"), "I64": ("<i8", "int64"), "I32": ("<i4", "int32"),
    "I16": ("<i2", "int16"), "I8": ("|i1", "int8"), "U8": ("|u1", "uint8"),
    "BOOL": ("|b1", "bool"),
}
# Types torch has only in later versions: file dtype -> torch's name.
LATER_TYPES = {"U16": "uint16", "U32": "uint32", "U64": "uint64",
               "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
ITEMSIZE = {"U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}


def reference(dtype, shape, seed=1):
    """Known values of a file dtype, as a numpy array."""
    np_type = numpy.dtype(TORCH_TYPES[dtype][0])
    n = 1
    for d in shape:
        n *= d
    if dtype == "BOOL":
        values = numpy.arange(n) % 3 == seed % 3
    elif dtype == "BF16":
        values = (numpy.arange(n, dtype="<f4") * 0.5 + seed).view("<u4") >> 16
    else:
        values = numpy.arange(n) * (seed + 1) % 100 - (0 if np_type.kind in "ub" else 50)
    return values.astype(np_type).reshape(shape)


def as_torch(dtype, array):
    if dtype == "BF16":
        return torch.from_numpy(array.view("<i2").copy()).view(torch.bfloat16)
    return torch.from_numpy(array.copy())


def rss_anon():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="devcache-load-torch-")
        self.dir = self.tmp.name
        self.ctx = devcache.open(mf.isolated(), config_files=False, environment=False)

    def tearDown(self):
        gc.collect()
        self.ctx.close()
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def locked(self):
        gc.collect()
        return self.ctx.cache_stats()["locked_models"]

    def linear_file(self, name="lin.safetensors", sizes=(3, 4, 2), extra=None, metadata=None):
        """Weights of nn.Sequential(Linear(3, 4), Linear(4, 2)), known values."""
        tensors = []
        for i in range(len(sizes) - 1):
            w = (numpy.arange(sizes[i] * sizes[i + 1], dtype="<f4") / 7 + i).reshape(
                sizes[i + 1], sizes[i])
            b = numpy.arange(sizes[i + 1], dtype="<f4") - i
            tensors.append(("%d.weight" % i, ("F32", w.shape, w.tobytes())))
            tensors.append(("%d.bias" % i, ("F32", b.shape, b.tobytes())))
        tensors += list((extra or {}).items())
        return mf.write_safetensors(self.path(name), tensors, metadata)

    def meta_linear(self, sizes=(3, 4, 2)):
        layers = [torch.nn.Linear(sizes[i], sizes[i + 1], device="meta")
                  for i in range(len(sizes) - 1)]
        return torch.nn.Sequential(*layers)


@NEED_TORCH
class Dtypes(Case):
    def test_every_dtype_torch_has(self):
        tensors = {d.lower(): (d, (2, 3), reference(d, (2, 3)).tobytes()) for d in TORCH_TYPES}
        tensors["scalar"] = ("F32", (), struct.pack("<f", 2.5))
        tensors["empty"] = ("F16", (0, 4), b"")
        p = mf.write_safetensors(self.path("all.safetensors"), tensors)
        sd = dt.load_file(p, ctx=self.ctx)
        self.assertEqual(sorted(sd), sorted(tensors))
        for d, (_np, name) in TORCH_TYPES.items():
            t = sd[d.lower()]
            self.assertEqual(t.dtype, getattr(torch, name), d)
            self.assertEqual(tuple(t.shape), (2, 3), d)
            self.assertTrue(torch.equal(t, as_torch(d, reference(d, (2, 3)))), d)
        self.assertEqual(sd["scalar"].shape, ())
        self.assertEqual(sd["scalar"].item(), 2.5)
        self.assertEqual(tuple(sd["empty"].shape), (0, 4))
        self.assertEqual(sd["empty"].dtype, torch.float16)

    def test_types_torch_may_lack(self):
        for d, name in LATER_TYPES.items():
            with self.subTest(dtype=d):
                p = mf.write_safetensors(self.path(d + ".safetensors"),
                                         {"w": (d, (2,), bytes(range(2 * ITEMSIZE[d])))})
                if hasattr(torch, name):
                    t = dt.load_file(p, ctx=self.ctx)["w"]
                    self.assertEqual(t.dtype, getattr(torch, name))
                    self.assertEqual(t.view(torch.uint8).tolist(), list(range(2 * ITEMSIZE[d])))
                else:
                    with self.assertRaises(TypeError) as e:
                        dt.load_file(p, ctx=self.ctx)
                    self.assertIn("'w'", str(e.exception))
                    self.assertIn(d, str(e.exception))
                    self.assertIn("torch." + name, str(e.exception))
        self.assertEqual(self.locked(), 0)

    def test_gguf(self):
        w = numpy.arange(12, dtype="<f4")
        p = mf.write_gguf(self.path("m.gguf"), {"w": ("F32", (4, 3), w.tobytes()),
                                                "q": ("Q4_0", (32,), bytes(18))})
        with devcache.safe_open(p, "pt", ctx=self.ctx) as f:
            t = f.get_tensor("w")
            self.assertEqual(tuple(t.shape), (3, 4))   # ne reversed, as torch has it
            self.assertTrue(torch.equal(t, torch.from_numpy(w.reshape(3, 4))))
            with self.assertRaises(TypeError) as e:
                f.get_tensor("q")
            self.assertIn("'q' is Q4_0", str(e.exception))
            self.assertIn("quantized", str(e.exception))
            self.assertEqual(f.get_slice("q").get_dtype(), "Q4_0")
        del t
        with self.assertRaises(TypeError):
            dt.load_file(p, ctx=self.ctx)
        self.assertEqual(self.locked(), 0)

    def test_numpy_bf16_is_uint16(self):
        bits = reference("BF16", (4,))
        p = mf.write_safetensors(self.path("bf.safetensors"), {"b": ("BF16", (4,), bits.tobytes()),
                                                               "f": ("F8_E4M3", (3,), b"\1\2\3")})
        with devcache.safe_open(p, framework="numpy", ctx=self.ctx) as f:
            a = f.get_tensor("b")
            self.assertEqual(a.dtype, numpy.uint16)
            self.assertTrue((a == bits).all())
            self.assertEqual(f.get_tensor("f").dtype, numpy.uint8)
            self.assertEqual(f.get_tensor("f").tolist(), [1, 2, 3])


@NEED_TORCH
class StateDict(Case):
    def plain(self, p, sizes=(3, 4, 2)):
        """The module loaded the ordinary way, for comparison."""
        m = torch.nn.Sequential(*[torch.nn.Linear(sizes[i], sizes[i + 1])
                                  for i in range(len(sizes) - 1)])
        with devcache.safe_open(p, "np", ctx=self.ctx) as f:
            sd = {k: torch.tensor(f.get_tensor(k)) for k in f.keys()}
        m.load_state_dict(sd)
        return m

    def test_meta_module(self):
        p = self.linear_file()
        m = self.meta_linear()
        m[1].bias.requires_grad_(False)
        weight_param = m[0].weight
        result = dt.load_state_dict(m, p, ctx=self.ctx)
        self.assertEqual(result, ([], []))
        self.assertEqual(result.missing_keys, [])
        for name, t in m.state_dict().items():
            self.assertEqual(t.device.type, "cpu", name)
        del t
        self.assertIsInstance(m[0].weight, torch.nn.Parameter)
        self.assertIsNot(m[0].weight, weight_param)
        self.assertTrue(m[0].weight.requires_grad)
        self.assertFalse(m[1].bias.requires_grad)
        # No copy: the parameter's memory is the file's mapping.
        where, _perm = mf.mapping_of(m[0].weight.data_ptr())
        self.assertEqual(where, os.path.realpath(p))
        x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        self.assertTrue(torch.equal(m(x), self.plain(p)(x)))
        self.assertEqual(self.locked(), 1)
        del m, weight_param, result
        self.assertEqual(self.locked(), 0)

    def test_buffers_and_nested_names(self):
        mean = numpy.array([1, 2, 3], dtype="<f4")
        extra = {"2.weight": ("F32", (3,), numpy.ones(3, "<f4").tobytes()),
                 "2.bias": ("F32", (3,), numpy.zeros(3, "<f4").tobytes()),
                 "2.running_mean": ("F32", (3,), mean.tobytes()),
                 "2.running_var": ("F32", (3,), numpy.ones(3, "<f4").tobytes()),
                 "2.num_batches_tracked": ("I64", (), struct.pack("<q", 7))}
        p = self.linear_file(sizes=(3, 4, 3), extra=extra)
        m = self.meta_linear((3, 4, 3))
        m.append(torch.nn.BatchNorm1d(3, device="meta"))
        self.assertEqual(dt.load_state_dict(m, p, ctx=self.ctx), ([], []))
        self.assertTrue(torch.equal(m[2].running_mean, torch.tensor([1., 2., 3.])))
        self.assertEqual(m[2].num_batches_tracked.item(), 7)
        self.assertNotIsInstance(m[2].running_mean, torch.nn.Parameter)
        self.assertIn("running_mean", m[2]._buffers)

    def test_strict_and_not(self):
        p = self.linear_file(extra={"stray": ("F32", (1,), b"\0" * 4)})
        m = self.meta_linear((3, 4, 2, 2))
        with self.assertRaises(RuntimeError) as e:
            dt.load_state_dict(m, p, ctx=self.ctx)
        self.assertIn("missing key(s)", str(e.exception))
        self.assertIn("2.weight, 2.bias", str(e.exception))
        self.assertIn("unexpected key(s)", str(e.exception))
        self.assertIn("stray", str(e.exception))
        self.assertEqual(m[0].weight.device.type, "meta")   # nothing assigned
        self.assertEqual(self.locked(), 0)
        result = dt.load_state_dict(m, p, strict=False, ctx=self.ctx)
        self.assertEqual(result.missing_keys, ["2.weight", "2.bias"])
        self.assertEqual(result.unexpected_keys, ["stray"])
        self.assertEqual(m[0].weight.device.type, "cpu")
        self.assertEqual(m[2].weight.device.type, "meta")

    def test_mismatch_names_the_tensor(self):
        p = self.linear_file()
        m = self.meta_linear((3, 5, 2))
        with self.assertRaises(RuntimeError) as e:
            dt.load_state_dict(m, p, ctx=self.ctx)
        self.assertIn("'0.weight': the file has shape [4, 3], the module [5, 3]", str(e.exception))
        m = self.meta_linear()
        m[1].to(dtype=torch.float16)
        m[1].bias = torch.nn.Parameter(torch.empty(2, dtype=torch.float16, device="meta"))
        with self.assertRaises(RuntimeError) as e:
            dt.load_state_dict(m, p, ctx=self.ctx)
        self.assertIn("'1.bias': the file has F32", str(e.exception))
        self.assertIn("does not cast", str(e.exception))
        self.assertEqual(m[0].weight.device.type, "meta")
        self.assertEqual(self.locked(), 0)

    def test_module_on_the_host_and_copy(self):
        p = self.linear_file()
        m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
        dt.load_state_dict(m, p, copy=True, ctx=self.ctx)
        self.assertNotEqual(mf.mapping_of(m[0].weight.data_ptr())[0], os.path.realpath(p))
        self.assertEqual(self.locked(), 0)   # copies hold no lock
        x = torch.ones(1, 3)
        self.assertTrue(torch.equal(m(x), self.plain(p)(x)))


@NEED_TORCH
class InPlace(Case):
    def test_write_never_crashes_nor_reaches_the_file(self):
        p = self.linear_file()
        before = mf.read_bytes(p)
        code = textwrap.dedent("""
            import warnings, torch, devcache, devcache.torch as dt
            warnings.simplefilter("error")
            ctx = devcache.open("log_level:error", config_files=False, environment=False)
            m = torch.nn.Sequential(torch.nn.Linear(3, 4, device="meta"),
                                    torch.nn.Linear(4, 2, device="meta"))
            dt.load_state_dict(m, %r, ctx=ctx)
            with torch.no_grad():
                m[0].weight.add_(1)
                m[0].bias.zero_()
            print(m[0].bias.tolist())
        """ % p)
        r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        self.assertEqual(r.stdout.strip(), "[0.0, 0.0, 0.0, 0.0]")
        self.assertEqual(mf.read_bytes(p), before)

    def test_later_loads_see_the_file(self):
        p = self.linear_file()
        want = dt.load_file(p, copy=True, ctx=self.ctx)
        first = dt.load_file(p, ctx=self.ctx)
        first["0.weight"].add_(100)
        first["1.bias"].fill_(-1)
        # While the changed tensors live, a new load gets the file's values
        # in tensors of its own (copies), and changing them changes nothing else.
        second = dt.load_file(p, ctx=self.ctx)
        self.assertTrue(torch.equal(second["0.weight"], want["0.weight"]))
        self.assertTrue(torch.equal(second["1.bias"], want["1.bias"]))
        second["0.bias"].add_(5)
        self.assertTrue(torch.equal(first["0.bias"], want["0.bias"]))
        self.assertTrue(torch.equal(first["0.weight"], want["0.weight"] + 100))
        # Once they are gone, a load is zero-copy again and sees the file.
        del first, second
        third = dt.load_file(p, ctx=self.ctx)
        self.assertEqual(mf.mapping_of(third["0.weight"].data_ptr())[0], os.path.realpath(p))
        for k in want:
            self.assertTrue(torch.equal(third[k], want[k]), k)

    def test_writes_made_elsewhere_are_discarded(self):
        # A writable load of the caller's own, changed and released: the
        # torch load must not return those changes.
        p = self.linear_file()
        want = dt.load_file(p, copy=True, ctx=self.ctx)
        with self.ctx.load(p, writable=True) as m:
            view = m["0.weight"]
            numpy.asarray(view)[:] = 42
            del view
        got = dt.load_file(p, ctx=self.ctx)
        self.assertTrue(torch.equal(got["0.weight"], want["0.weight"]))

    def test_written_pages_go_back_with_the_last_tensor(self):
        n = 8 << 20
        p = mf.write_safetensors(self.path("big.safetensors"), {"w": ("U8", (n,), bytes(n))})
        w = dt.load_file(p, ctx=self.ctx)["w"]
        base = rss_anon()
        w[n // 2] = 1   # one page copied, the rest still the file's
        self.assertLess(rss_anon() - base, n // 8)
        self.assertEqual(w[n // 2 - 1].item(), 0)
        w.fill_(1)
        self.assertGreaterEqual(rss_anon() - base, n * 3 // 4)
        del w
        gc.collect()
        self.assertLess(rss_anon() - base, n // 4)

    def test_copy_true_and_mmap_false_give_copies(self):
        p = self.linear_file()
        t = dt.load_file(p, copy=True, ctx=self.ctx)["0.weight"]
        self.assertNotEqual(mf.mapping_of(t.data_ptr())[0], os.path.realpath(p))
        t.add_(1)
        self.assertEqual(self.locked(), 0)
        ctx = devcache.open(mf.isolated("mmap:false"), config_files=False, environment=False)
        try:
            a = dt.load_file(p, ctx=ctx)
            a["0.weight"].add_(1)
            b = dt.load_file(p, ctx=ctx)
            self.assertTrue(torch.equal(a["0.weight"], b["0.weight"] + 1))
            del a, b
        finally:
            gc.collect()
            ctx.close()


@NEED_TORCH
class SafeOpen(Case):
    def test_interface(self):
        p = self.linear_file(metadata={"format": "pt", "note": "x"})
        with devcache.safe_open(p, framework="pt", device="cpu", ctx=self.ctx) as f:
            self.assertEqual(f.keys(), ["0.bias", "0.weight", "1.bias", "1.weight"])
            self.assertEqual(f.offset_keys(), ["0.weight", "0.bias", "1.weight", "1.bias"])
            self.assertEqual(f.metadata(), {"format": "pt", "note": "x"})
            w = f.get_tensor("0.weight")
            s = f.get_slice("0.weight")
            self.assertEqual(s.get_shape(), [4, 3])
            self.assertEqual(s.get_dtype(), "F32")
            self.assertTrue(torch.equal(s[1:3], w[1:3]))
            self.assertTrue(torch.equal(s[:, ::2], w[:, ::2]))
            self.assertTrue(torch.equal(s[2], w[2]))
            self.assertTrue(torch.equal(s[..., 1], w[:, 1]))
            with self.assertRaises(KeyError) as e:
                f.get_tensor("nope")
            self.assertIn("'nope'", str(e.exception))
            self.assertRaises(KeyError, f.get_slice, "nope")
        self.assertRaises(ValueError, f.get_tensor, "0.weight")
        self.assertRaises(ValueError, f.keys)
        self.assertEqual(w.shape, (4, 3))   # the tensor outlives the with block
        self.assertEqual(self.locked(), 1)
        del w
        self.assertEqual(self.locked(), 0)

    def test_numpy(self):
        p = self.linear_file()
        with devcache.safe_open(p, framework="np", ctx=self.ctx) as f:
            a = f.get_tensor("0.weight")
            before = a.copy()
            self.assertIsInstance(a, numpy.ndarray)
            self.assertEqual(a.shape, (4, 3))
            self.assertTrue(a.flags.writeable)
            self.assertEqual(f.get_slice("0.weight")[1:, 0].tolist(), a[1:, 0].tolist())
            a += 1   # a private page: the file does not change
        with devcache.safe_open(p, framework="numpy", ctx=self.ctx) as f:
            self.assertEqual(f.get_tensor("0.weight").tolist(), before.tolist())
            self.assertEqual(a.tolist(), (before + 1).tolist())

    def test_metadata_absent_is_none(self):
        p = mf.write_safetensors(self.path("nometa.safetensors"), {"w": ("F32", (1,), b"\0" * 4)})
        with devcache.safe_open(p, ctx=self.ctx) as f:
            self.assertIsNone(f.metadata())

    def test_sharded_set_and_folder(self):
        w = [numpy.full((2, 2), i, "<f4") for i in range(3)]
        shards = [{"a": ("F32", (2, 2), w[0].tobytes())},
                  {"b": ("F32", (2, 2), w[1].tobytes()), "c": ("F32", (2, 2), w[2].tobytes())}]
        folder = self.path("model")
        os.mkdir(folder)
        index = mf.write_safetensors_set(folder, shards)
        for where in (index, folder):
            sd = dt.load_file(where, ctx=self.ctx)
            self.assertEqual(sorted(sd), ["a", "b", "c"])
            for i, k in enumerate("abc"):
                self.assertTrue(torch.equal(sd[k], torch.from_numpy(w[i])), (where, k))
            with devcache.safe_open(where, ctx=self.ctx) as f:
                self.assertEqual(f.offset_keys(), ["a", "b", "c"])
                self.assertEqual(f.get_slice("c")[0, 1].item(), 2.0)
            del sd
        m = torch.nn.Module()
        for k in "abc":
            m.register_buffer(k, torch.empty(2, 2, device="meta"))
        self.assertEqual(dt.load_state_dict(m, index, ctx=self.ctx), ([], []))
        self.assertEqual(m.c.sum().item(), 8.0)

    def test_bad_arguments(self):
        p = self.linear_file()
        with self.assertRaises(ValueError) as e:
            devcache.safe_open(p, framework="tf", ctx=self.ctx)
        self.assertIn("'tf'", str(e.exception))
        self.assertRaises(ValueError, devcache.safe_open, p, "pt", "xpu:0", ctx=self.ctx)
        self.assertRaises(ValueError, devcache.safe_open, p, "np", "cuda:0", ctx=self.ctx)
        self.assertRaises(ValueError, devcache.safe_open, p, "pt", -1, ctx=self.ctx)
        self.assertRaises(TypeError, devcache.safe_open, p, "pt", True, ctx=self.ctx)
        self.assertRaises(devcache.NotFoundError, dt.load_file, self.path("none"), ctx=self.ctx)
        self.assertEqual(self.locked(), 0)

    def test_process_wide_context(self):
        p = self.linear_file()
        sd = dt.load_file(p)
        self.assertEqual(mf.mapping_of(sd["0.weight"].data_ptr())[0], os.path.realpath(p))
        self.assertEqual(dt.context().cache_stats()["locked_models"], 1)
        del sd
        gc.collect()
        self.assertEqual(dt.context().cache_stats()["locked_models"], 0)


@NEED_TORCH
@NEED_FAKE
class OnTheFakeDevice(Case):
    """torch here is a CPU build: what reaches torch.as_tensor is checked,
    and that the hand-over failing leaves nothing locked."""

    def setUp(self):
        super().setUp()
        self.ctx.close()
        self.ctx = devcache.open(FAKE_OPTIONS, config_files=False, environment=False)

    def test_what_torch_is_given(self):
        bits = reference("BF16", (4, 8))
        p = mf.write_safetensors(self.path("d.safetensors"),
                                 {"w": ("BF16", (4, 8), bits.tobytes())})
        opened = _weights._Open(p, "pt", "cuda:0", False, self.ctx)
        try:
            self.assertEqual(opened.model.device.id, "cuda:0")
            view = opened.view("w")
            handed = _weights._DeviceBytes(view)
            cai = handed.__cuda_array_interface__
            self.assertEqual(cai["typestr"], "|u1")
            self.assertEqual(cai["shape"], (64,))
            self.assertEqual(cai["data"], (view.data_ptr, False))
            self.assertEqual(opened.torch_device, torch.device("cuda", 0))
            self.assertEqual(view.tobytes(), bits.tobytes())
            del view
            opened.close()
            self.assertEqual(self.locked(), 1)   # held by what torch would hold
            del handed
            self.assertEqual(self.locked(), 0)
        finally:
            opened.close()

    @unittest.skipIf(torch is not None and torch.backends.cuda.is_built(),
                     "this torch is built with CUDA: the fake driver is not its device")
    def test_a_cpu_torch_fails_cleanly(self):
        p = self.linear_file()
        with self.assertRaises(RuntimeError) as e:
            dt.load_file(p, device="cuda:0", ctx=self.ctx)
        self.assertIn("cannot use device 'cuda:0'", str(e.exception))
        self.assertEqual(self.ctx.cache_stats()["models"], 0)   # nothing went to the device
        m = self.meta_linear()
        with self.assertRaises(RuntimeError):
            dt.load_state_dict(m, p, device=1, ctx=self.ctx)
        self.assertEqual(m[0].weight.device.type, "meta")
        self.assertEqual(self.locked(), 0)


if __name__ == "__main__":
    unittest.main()
