# SPDX-License-Identifier: LGPL-2.1-or-later
"""Tests of the devcache package's surface: the module, its errors, contexts, devices and the allocator.

Run: python3 tests/python/taprun.py tests/python/test_package.py, with
PYTHONPATH naming the folder that holds the devcache package.  TEST_TOOL
(the devcache program) is what the version, the tunables and the summary
table are checked against; TEST_FAKES and TEST_BACKENDS lead to the fake
CUDA driver.  Without them those tests skip, saying why.
"""
import json
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

import devcache
import modelfiles as mf

TOOL = os.environ.get("TEST_TOOL")
MIB = 1 << 20

# torch.cuda.memory_stats()' keys, as PyTorch 2 names them.
TORCH_STAT_KEYS = (
    "active.all.allocated", "active.all.current", "active.all.freed", "active.all.peak",
    "active.large_pool.allocated", "active.large_pool.current", "active.large_pool.freed",
    "active.large_pool.peak", "active.small_pool.allocated", "active.small_pool.current",
    "active.small_pool.freed", "active.small_pool.peak",
    "active_bytes.all.allocated", "active_bytes.all.current", "active_bytes.all.freed",
    "active_bytes.all.peak", "active_bytes.large_pool.allocated",
    "active_bytes.large_pool.current", "active_bytes.large_pool.freed",
    "active_bytes.large_pool.peak", "active_bytes.small_pool.allocated",
    "active_bytes.small_pool.current", "active_bytes.small_pool.freed",
    "active_bytes.small_pool.peak",
    "allocated_bytes.all.allocated", "allocated_bytes.all.current",
    "allocated_bytes.all.freed", "allocated_bytes.all.peak",
    "allocated_bytes.large_pool.allocated", "allocated_bytes.large_pool.current",
    "allocated_bytes.large_pool.freed", "allocated_bytes.large_pool.peak",
    "allocated_bytes.small_pool.allocated", "allocated_bytes.small_pool.current",
    "allocated_bytes.small_pool.freed", "allocated_bytes.small_pool.peak",
    "allocation.all.allocated", "allocation.all.current", "allocation.all.freed",
    "allocation.all.peak", "allocation.large_pool.allocated", "allocation.large_pool.current",
    "allocation.large_pool.freed", "allocation.large_pool.peak",
    "allocation.small_pool.allocated", "allocation.small_pool.current",
    "allocation.small_pool.freed", "allocation.small_pool.peak",
    "inactive_split.all.allocated", "inactive_split.all.current", "inactive_split.all.freed",
    "inactive_split.all.peak", "inactive_split.large_pool.allocated",
    "inactive_split.large_pool.current", "inactive_split.large_pool.freed",
    "inactive_split.large_pool.peak", "inactive_split.small_pool.allocated",
    "inactive_split.small_pool.current", "inactive_split.small_pool.freed",
    "inactive_split.small_pool.peak",
    "inactive_split_bytes.all.allocated", "inactive_split_bytes.all.current",
    "inactive_split_bytes.all.freed", "inactive_split_bytes.all.peak",
    "inactive_split_bytes.large_pool.allocated", "inactive_split_bytes.large_pool.current",
    "inactive_split_bytes.large_pool.freed", "inactive_split_bytes.large_pool.peak",
    "inactive_split_bytes.small_pool.allocated", "inactive_split_bytes.small_pool.current",
    "inactive_split_bytes.small_pool.freed", "inactive_split_bytes.small_pool.peak",
    "requested_bytes.all.allocated", "requested_bytes.all.current",
    "requested_bytes.all.freed", "requested_bytes.all.peak",
    "requested_bytes.large_pool.allocated", "requested_bytes.large_pool.current",
    "requested_bytes.large_pool.freed", "requested_bytes.large_pool.peak",
    "requested_bytes.small_pool.allocated", "requested_bytes.small_pool.current",
    "requested_bytes.small_pool.freed", "requested_bytes.small_pool.peak",
    "reserved_bytes.all.allocated", "reserved_bytes.all.current", "reserved_bytes.all.freed",
    "reserved_bytes.all.peak", "reserved_bytes.large_pool.allocated",
    "reserved_bytes.large_pool.current", "reserved_bytes.large_pool.freed",
    "reserved_bytes.large_pool.peak", "reserved_bytes.small_pool.allocated",
    "reserved_bytes.small_pool.current", "reserved_bytes.small_pool.freed",
    "reserved_bytes.small_pool.peak",
    "segment.all.allocated", "segment.all.current", "segment.all.freed", "segment.all.peak",
    "segment.large_pool.allocated", "segment.large_pool.current", "segment.large_pool.freed",
    "segment.large_pool.peak", "segment.small_pool.allocated", "segment.small_pool.current",
    "segment.small_pool.freed", "segment.small_pool.peak",
    "oversize_allocations.allocated", "oversize_allocations.current",
    "oversize_allocations.freed", "oversize_allocations.peak",
    "oversize_segments.allocated", "oversize_segments.current", "oversize_segments.freed",
    "oversize_segments.peak",
    "num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
    "num_device_free", "max_split_size",
)

# Every error class: its code and the built-in class it also is.
ERRORS = {
    "InvalidArgumentError": (-1, ValueError),
    "OutOfMemoryError": (-2, MemoryError),
    "ConfigError": (-3, None),
    "NoDeviceError": (-4, None),
    "BackendError": (-5, None),
    "ABIError": (-6, None),
    "InputOutputError": (-7, OSError),
    "FormatError": (-8, None),
    "NotSupportedError": (-9, None),
    "BusyError": (-10, None),
    "CanceledError": (-11, None),
    "NotFoundError": (-12, FileNotFoundError),
    "NotReadyError": (-13, None),
}


def open_ctx(options=None):
    return devcache.open(mf.isolated(options), config_files=False, environment=False)


def run_tool(*args):
    """The devcache program's standard output, reading no configuration."""
    env = dict(os.environ)
    env.pop("DEVCACHE_OPTIONS", None)
    env.pop("DEVCACHE_CONF", None)
    with tempfile.TemporaryDirectory() as home:
        env["XDG_CONFIG_HOME"] = home
        r = subprocess.run([TOOL] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=env, universal_newlines=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError("%s %s: status %d: %s" % (TOOL, " ".join(args), r.returncode,
                                                        r.stderr))
    return r.stdout


def tool_config(*options):
    """`devcache config --json`: name -> (value, origin)."""
    args = ["-o", ",".join(("log_level:error",) + options), "config", "--json"]
    return {t["name"]: (t["value"], t["origin"]) for t in json.loads(run_tool(*args))}


class Module(unittest.TestCase):
    @unittest.skipUnless(TOOL, "TEST_TOOL is not set")
    def test_version_is_the_tools(self):
        out = run_tool("--version")
        self.assertEqual(out.split()[-1], devcache.version, out)
        self.assertEqual(devcache.__version__, devcache.version)

    def test_version_number(self):
        major, minor, micro = (int(x) for x in devcache.version.split(".")[:3])
        self.assertEqual(devcache.version_number, major << 16 | minor << 8 | micro)

    def test_errors(self):
        self.assertTrue(issubclass(devcache.Error, Exception))
        for name, (code, base) in ERRORS.items():
            cls = getattr(devcache, name)
            self.assertTrue(issubclass(cls, devcache.Error), name)
            self.assertEqual(cls.__module__, "devcache")
            if base is not None:
                self.assertTrue(issubclass(cls, base), cls.__mro__)
            self.assertIn(name, devcache.__all__)
            self.assertTrue(devcache.strerror(code), code)
            self.assertNotEqual(devcache.strerror(code), devcache.strerror(0), code)
        self.assertTrue(issubclass(devcache.NotFoundError, OSError))
        e = devcache.Error("x")
        self.assertIsNone(e.code)
        self.assertIsNone(e.detail)

    def test_errors_raised_and_pickled(self):
        with open_ctx() as ctx:
            host = ctx.device("host")
            for fn, name in ((lambda: ctx.load("/nonexistent/x"), "NotFoundError"),
                             (lambda: ctx.device("x:0"), "NoDeviceError"),
                             (lambda: host.free(16), "InvalidArgumentError"),
                             (lambda: host.alloc(1 << 62), "OutOfMemoryError")):
                with self.assertRaises(devcache.Error) as cm:
                    fn()
                e = cm.exception
                self.assertIs(type(e), getattr(devcache, name))
                self.assertEqual(e.code, ERRORS[name][0])
                self.assertEqual(e.args, (e.detail,))
                again = pickle.loads(pickle.dumps(e))
                self.assertIs(type(again), type(e))
                self.assertEqual((again.code, again.detail), (e.code, e.detail))

    def test_every_code_has_its_own_class(self):
        classes = {getattr(devcache, n) for n in ERRORS}
        self.assertEqual(len(classes), len(ERRORS))

    def test_strerror(self):
        self.assertEqual(devcache.strerror(0), "Success")
        self.assertEqual(devcache.strerror(-1), "Invalid argument")
        self.assertEqual(devcache.strerror(-999), devcache.strerror(-1000))
        texts = {devcache.strerror(c) for c, _ in ERRORS.values()}
        self.assertEqual(len(texts), len(ERRORS))
        self.assertRaises(TypeError, devcache.strerror, "x")

    def test_strerror_does_not_truncate_the_code(self):
        # 2**32 - 1 is no error code: it must not read as -1 ("Invalid
        # argument"), nor 2**32 as 0.  OverflowError is a fair answer too.
        for code, not_this in (((1 << 32) - 1, -1), (1 << 32, 0), (-(1 << 32) - 2, -2)):
            try:
                text = devcache.strerror(code)
            except OverflowError:
                continue
            self.assertNotEqual(text, devcache.strerror(not_this), code)

    def test_all_names_exist(self):
        for name in devcache.__all__:
            self.assertTrue(hasattr(devcache, name), name)

    def test_types_are_not_made_directly(self):
        for cls in (devcache.Model, devcache.Tensor, devcache.Device):
            self.assertRaises(TypeError, cls)

    def test_pydoc(self):
        r = subprocess.run([sys.executable, "-m", "pydoc", "devcache"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=60,
                           env=dict(os.environ, PAGER="cat", TERM="dumb"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Context", r.stdout)
        self.assertIn("load(", r.stdout)
        self.assertNotIn("problem in devcache", r.stdout)


class Contexts(unittest.TestCase):
    def test_open_and_close(self):
        ctx = open_ctx()
        self.assertIsInstance(ctx, devcache.Context)
        self.assertFalse(ctx.closed)
        self.assertIn("open", repr(ctx))
        ctx.close()
        self.assertTrue(ctx.closed)
        self.assertIn("closed", repr(ctx))
        ctx.close()  # harmless

    def test_context_manager(self):
        with open_ctx() as ctx:
            self.assertFalse(ctx.closed)
            host = ctx.device("host")
        self.assertTrue(ctx.closed)
        self.assertRaises(ValueError, host.stats)
        self.assertRaises(ValueError, ctx.__enter__)

    def test_context_manager_closes_on_error(self):
        with self.assertRaises(KeyError):
            with open_ctx() as ctx:
                raise KeyError("x")
        self.assertTrue(ctx.closed)

    def test_class_directly(self):
        with devcache.Context(mf.isolated(), config_files=False, environment=False) as ctx:
            self.assertEqual(ctx.device("host").id, "host")
            self.assertRaises(RuntimeError, ctx.__init__, None)

    def test_devices(self):
        with open_ctx() as ctx:
            devs = ctx.devices
            self.assertIsInstance(devs, tuple)
            self.assertIn("host", [d.id for d in devs])
            self.assertIn(ctx.device("host"), devs)
            for d in devs:
                self.assertIsInstance(d, devcache.Device)
                self.assertIs(d.context, ctx)

    def test_device_equality(self):
        with open_ctx() as ctx:
            a, b = ctx.device("host"), ctx.device("host")
            self.assertIsNot(a, b)
            self.assertEqual(a, b)
            self.assertFalse(a != b)
            self.assertEqual(hash(a), hash(b))
            self.assertEqual(len({a, b}), 1)
            self.assertNotEqual(a, "host")
            self.assertIn("host", repr(a))

    def test_device_info(self):
        with open_ctx() as ctx:
            host = ctx.device("host")
            info = host.info
            types = {"id": str, "name": str, "backend": str, "pci_bus_id": str, "ordinal": int,
                     "total_memory": int, "free_memory": int, "capabilities": list}
            self.assertEqual(set(info), set(types))
            for k, t in types.items():
                self.assertIsInstance(info[k], t, k)
            self.assertEqual(info["id"], "host")
            self.assertEqual(info["backend"], "host")
            self.assertEqual(host.id, "host")
            self.assertEqual(host.name, info["name"])
            self.assertIn("host_memory", info["capabilities"])
            for c in info["capabilities"]:
                self.assertIn(c, ("vmm", "ipc", "host_memory", "async_copy"))
            self.assertGreater(info["total_memory"], 0)
            self.assertLessEqual(info["free_memory"], info["total_memory"])

    def test_no_such_device(self):
        with open_ctx() as ctx:
            with self.assertRaises(devcache.NoDeviceError) as cm:
                ctx.device("nonesuch:0")
            self.assertEqual(cm.exception.code, -4)
            self.assertIn("nonesuch", cm.exception.detail)
            self.assertEqual(str(cm.exception), cm.exception.detail)
            self.assertRaises(TypeError, ctx.device, 0)

    def test_device_of_another_context(self):
        with open_ctx() as a, open_ctx() as b:
            self.assertNotEqual(a.device("host"), b.device("host"))
            self.assertRaises(ValueError, b.load, "/nonexistent", device=a.device("host"))

    def test_backends(self):
        with open_ctx() as ctx:
            backends = ctx.backends
            self.assertIsInstance(backends, list)
            host = [b for b in backends if b["name"] == "host"]
            self.assertEqual(len(host), 1)
            self.assertEqual(host[0]["status"], "loaded")
            for b in backends:
                self.assertEqual(set(b), {"name", "path", "status", "reason", "devices"})


class Config(unittest.TestCase):
    def test_every_tunable(self):
        with open_ctx("max_split_size_mb:512,load_workers:3") as ctx:
            conf = ctx.config()
        for name, (value, origin) in conf.items():
            self.assertIsInstance(value, str, name)
            self.assertIsInstance(origin, str, name)
        self.assertEqual(conf["max_split_size_mb"], ("512M", "devcache_open"))
        self.assertEqual(conf["load_workers"], ("3", "devcache_open"))
        self.assertEqual(conf["log_level"], ("error", "devcache_open"))
        self.assertEqual(conf["caching"], ("true", "default"))
        self.assertEqual(conf["max_cache_ram"], ("auto", "default"))

    @unittest.skipUnless(TOOL, "TEST_TOOL is not set")
    def test_the_tools_tunables(self):
        opts = ("max_split_size_mb:512", "load_workers:3")
        tool = tool_config(*opts)
        with open_ctx(",".join(opts)) as ctx:
            conf = ctx.config()
        self.assertEqual(sorted(conf), sorted(tool))
        for name, (value, origin) in tool.items():
            if origin in ("default", "devcache_open"):
                self.assertEqual(conf[name], (value, origin), name)

    def test_unknown_tunable(self):
        with self.assertRaises(devcache.ConfigError) as cm:
            open_ctx("no_such_tunable:1")
        self.assertIn("no_such_tunable", str(cm.exception))
        self.assertEqual(cm.exception.code, -3)

    def test_bad_value(self):
        with self.assertRaises(devcache.ConfigError) as cm:
            open_ctx("memory_fraction:5")
        self.assertIn("memory_fraction", str(cm.exception))

    def test_options_type(self):
        self.assertRaises(TypeError, devcache.Context, 5)
        self.assertRaises(TypeError, devcache.open, mf.isolated(), config_files=False,
                          environment=False, bogus=1)


class Allocator(unittest.TestCase):
    def setUp(self):
        self.ctx = open_ctx()
        self.addCleanup(self.ctx.close)
        self.host = self.ctx.device("host")

    def test_stats_have_torchs_keys(self):
        s = self.host.stats()
        self.assertEqual(len(TORCH_STAT_KEYS), 122)
        missing = [k for k in TORCH_STAT_KEYS if k not in s]
        self.assertEqual(missing, [])
        for k in TORCH_STAT_KEYS:
            self.assertIsInstance(s[k], int, k)
        self.assertEqual(set(s) - set(TORCH_STAT_KEYS),
                         {"largest_free_block", "fragmentation", "num_stitches"})
        self.assertIsInstance(s["num_stitches"], int)
        self.assertIsInstance(s["fragmentation"], float)
        self.assertEqual(set(self.host.host_stats()), set(s))

    def test_alloc_and_free(self):
        before = self.host.stats()
        p = self.host.alloc(MIB + 1)
        self.assertIsInstance(p, int)
        self.assertNotEqual(p, 0)
        s = self.host.stats()
        self.assertEqual(s["allocated_bytes.all.current"] - before["allocated_bytes.all.current"],
                         MIB + 512)  # rounded to 512 bytes, as PyTorch rounds
        self.assertEqual(s["requested_bytes.all.current"], MIB + 1)
        self.assertEqual(s["allocated_bytes.large_pool.current"], MIB + 512)
        self.assertEqual(s["allocated_bytes.small_pool.current"], 0)
        self.assertEqual(s["allocation.all.current"], 1)
        self.assertEqual(s["segment.all.current"], 1)
        self.assertGreaterEqual(s["reserved_bytes.all.current"], MIB + 512)
        self.assertEqual(s["num_device_alloc"], 1)
        self.host.free(p)
        s = self.host.stats()
        self.assertEqual(s["allocated_bytes.all.current"], 0)
        self.assertEqual(s["allocated_bytes.all.peak"], MIB + 512)
        self.assertEqual(s["allocated_bytes.all.freed"], MIB + 512)
        self.assertEqual(s["requested_bytes.all.current"], 0)
        self.assertGreater(s["reserved_bytes.all.current"], 0)  # cached
        self.host.reset_peak()
        self.assertEqual(self.host.stats()["allocated_bytes.all.peak"], 0)
        self.host.reset_accumulated()
        s = self.host.stats()
        self.assertEqual(s["allocated_bytes.all.allocated"], 0)
        self.assertEqual(s["allocated_bytes.all.freed"], 0)
        self.host.empty_cache()
        s = self.host.stats()
        self.assertEqual(s["reserved_bytes.all.current"], 0)
        self.assertEqual(s["segment.all.current"], 0)

    def test_reuse_from_cache(self):
        p = self.host.alloc(4096)
        self.host.free(p)
        q = self.host.alloc(4096)
        self.assertEqual(p, q)
        self.assertEqual(self.host.stats()["num_device_alloc"], 1)
        self.host.free(q)

    def test_small_pool(self):
        p = self.host.alloc(1000)
        s = self.host.stats()
        self.assertEqual(s["allocated_bytes.small_pool.current"], 1024)
        self.assertEqual(s["requested_bytes.small_pool.current"], 1000)
        self.host.free(p)

    def test_max_split_size(self):
        self.assertEqual(self.host.stats()["max_split_size"], -1)
        with open_ctx("max_split_size_mb:512") as ctx:
            self.assertEqual(ctx.device("host").stats()["max_split_size"], 512 * MIB)
        with open_ctx("max_split_size_mb:21000K") as ctx:
            self.assertEqual(ctx.device("host").stats()["max_split_size"], 21000 * 1024)

    def test_summary(self):
        p = self.host.alloc(MIB + 1)
        self.host.free(p)
        text = self.host.summary()
        self.assertIsInstance(text, str)
        for label in ("memory summary, device ID host", "Allocated memory", "Active memory",
                      "Requested memory", "GPU reserved memory", "Non-releasable memory",
                      "Allocations", "Active allocs", "GPU reserved segments", "Oversize allocations",
                      "from large pool", "from small pool", "Cur Usage", "Peak Usage"):
            self.assertIn(label, text)
        if TOOL:
            # The same history replayed by the tool gives the same table.
            with tempfile.TemporaryDirectory() as d:
                trace = mf.write_bytes(os.path.join(d, "t.trace"),
                                       b"+ 1 %d\n- 1\n" % (MIB + 1))
                out = run_tool("-o", "log_level:error", "replay", "--summary", trace)
            table = out[out.index("|="):]
            self.assertEqual(text[text.index("|="):].rstrip("\n"), table.rstrip("\n"))

    def test_snapshot(self):
        p = self.host.alloc(4096)
        snap = self.host.snapshot()
        self.assertIsInstance(snap, dict)
        self.assertEqual(snap["device"], "host")
        blocks = [b for s in snap["segments"] for b in s["blocks"]]
        mine = [b for b in blocks if b["address"] == p]
        self.assertEqual(len(mine), 1)
        self.assertEqual(mine[0]["requested_size"], 4096)
        self.host.free(p)

    def test_out_of_memory(self):
        with self.assertRaises(devcache.OutOfMemoryError) as cm:
            self.host.alloc(1 << 62)
        e = cm.exception
        self.assertIsInstance(e, MemoryError)
        self.assertEqual(e.code, -2)
        self.assertIn("out of memory", e.detail)
        self.assertEqual(self.host.stats()["num_ooms"], 1)

    def test_memory_fraction(self):
        with open_ctx("memory_fraction:0.0001") as ctx:
            host = ctx.device("host")
            if host.info["total_memory"] * 0.0001 > 256 * MIB:
                self.skipTest("the host has too much memory for this fraction")
            with self.assertRaises(devcache.OutOfMemoryError) as cm:
                host.alloc(512 * MIB)
            self.assertIn("memory_fraction", cm.exception.detail)

    def test_bad_arguments(self):
        self.assertRaises(ValueError, self.host.alloc, -1)
        self.assertRaises(TypeError, self.host.alloc, "x")
        self.assertRaises(TypeError, self.host.alloc, 10, "stream")
        self.assertRaises(TypeError, self.host.alloc, 10, 1.5)
        self.assertRaises(TypeError, self.host.alloc, 10, stream=[])
        self.assertRaises(TypeError, self.host.free, "x")
        self.assertRaises(OverflowError, self.host.alloc, 1 << 64)
        with self.assertRaises(devcache.InvalidArgumentError) as cm:
            self.host.free(0x1000)
        self.assertIn("0x1000", cm.exception.detail)

    def test_streams_on_host(self):
        p = self.host.alloc(100, None)
        q = self.host.alloc(100, stream=7)
        self.assertNotEqual(p, q)
        self.host.free(p)
        self.host.free(q)


class FakeCuda(unittest.TestCase):
    def setUp(self):
        opts, why = mf.fake_cuda_options()
        if not opts:
            self.skipTest(why)
        self.ctx = devcache.open(opts, config_files=False, environment=False)
        self.addCleanup(self.ctx.close)

    def test_devices(self):
        ids = [d.id for d in self.ctx.devices]
        self.assertEqual(ids[0], "host")
        self.assertIn("cuda:0", ids)
        dev = self.ctx.device("cuda:0")
        self.assertEqual(self.ctx.device("cuda"), dev)
        self.assertNotEqual(self.ctx.device("cuda:1"), dev)
        info = dev.info
        self.assertEqual(info["backend"], "cuda")
        self.assertEqual(info["ordinal"], 0)
        self.assertNotIn("host_memory", info["capabilities"])
        cuda = [b for b in self.ctx.backends if b["name"] == "cuda"][0]
        self.assertEqual(cuda["status"], "loaded")
        self.assertEqual(cuda["devices"], 2)

    def test_alloc_on_two_streams(self):
        dev = self.ctx.device("cuda:0")
        # The default stream (None) and CUDA's per-thread default stream (2):
        # blocks are cached per stream, so the second does not reuse the first.
        a = dev.alloc(4096)
        dev.free(a)
        b = dev.alloc(4096, 2)
        self.assertNotEqual(a, b)
        s = dev.stats()
        self.assertEqual(s["segment.all.current"], 2)
        self.assertEqual(s["allocation.all.current"], 1)
        self.assertEqual(len(dev.snapshot()["segments"]), 2)
        dev.free(b)
        dev.empty_cache()
        s = dev.stats()
        self.assertEqual(s["reserved_bytes.all.current"], 0)
        self.assertEqual(s["num_device_free"], 2)
        self.assertEqual(dev.info["free_memory"], dev.info["total_memory"])

    def test_oom_on_device(self):
        dev = self.ctx.device("cuda:0")
        with self.assertRaises(devcache.OutOfMemoryError) as cm:
            dev.alloc(dev.info["total_memory"] * 2)
        self.assertIn("cuda:0", cm.exception.detail)
        self.assertEqual(dev.stats()["num_ooms"], 1)


if __name__ == "__main__":
    unittest.main()
