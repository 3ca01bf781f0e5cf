# SPDX-License-Identifier: LGPL-2.1-or-later
"""test_torch.py - devcache.torch: the process-wide context behind PyTorch's pluggable allocator, on the fake CUDA driver."""
import os
import subprocess
import sys
import textwrap
import unittest

FAKES = os.environ.get("TEST_FAKES", "")
BACKENDS = os.environ.get("TEST_BACKENDS", "")
FAKE_CUDA = os.path.join(FAKES, "libfake-cuda.so")
HAVE_FAKE = bool(FAKES) and os.path.exists(FAKE_CUDA)


def run(code, prelude=False, **env):
    """Run code in a fresh interpreter: the process-wide context reads the
    environment once per process."""
    e = dict(os.environ)
    e.update({k: v for k, v in env.items() if v is not None})
    for k, v in env.items():
        if v is None:
            e.pop(k, None)
    code = (PRELUDE if prelude else "") + textwrap.dedent(code)
    p = subprocess.run([sys.executable, "-c", code], env=e,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    return p


def fake_options(extra=""):
    opts = "log_level:error,backend_path:%s,backends:cuda,cuda_library:%s" % (BACKENDS, FAKE_CUDA)
    return opts + ("," + extra if extra else "")


PRELUDE = """
import ctypes, devcache, devcache.torch as dt
from devcache import _devcache
lib = ctypes.CDLL(_devcache._library_path())
lib.devcache_torch_malloc.restype = ctypes.c_void_p
lib.devcache_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
lib.devcache_torch_free.restype = None
lib.devcache_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
"""


@unittest.skipUnless(HAVE_FAKE, "the cuda backend is not built (no fake CUDA driver)")
class OnTheFakeDriver(unittest.TestCase):
    def test_stats_follow_the_entry_points(self):
        p = run("""
            a = lib.devcache_torch_malloc(1 << 20, 0, None)
            assert a, "malloc failed"
            s = dt.memory_stats(0)
            assert s["allocated_bytes.all.current"] == 1 << 20, s["allocated_bytes.all.current"]
            assert s["allocation.all.current"] == 1
            assert s["requested_bytes.all.current"] == 1 << 20
            assert dt.get_device(0).id == "cuda:0", dt.get_device(0).id
            assert dt.get_device("cuda:0") == dt.get_device(0)
            lib.devcache_torch_free(a, 1 << 20, 0, None)
            s = dt.memory_stats("cuda:0")
            assert s["allocated_bytes.all.current"] == 0
            assert s["allocated_bytes.all.peak"] == 1 << 20
            assert s["reserved_bytes.all.current"] > 0
            dt.empty_cache(0)
            assert dt.memory_stats(0)["reserved_bytes.all.current"] == 0
            assert "memory summary" in dt.memory_summary(0)
            print("ok")
        """, prelude=True, DEVCACHE_OPTIONS=fake_options(), PYTORCH_CUDA_ALLOC_CONF=None)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "ok")

    def test_the_context_is_shared_and_never_closed(self):
        p = run("""
            a = lib.devcache_torch_malloc(4096, 0, None)
            ctx = dt.context()
            ctx.close()                       # does nothing to the shared context
            dev = dt.context().device("cuda:0")
            assert dev.stats()["allocation.all.current"] == 1
            lib.devcache_torch_free(a, 4096, 0, None)
            assert dev.stats()["allocation.all.current"] == 0
            print("ok")
        """, prelude=True, DEVCACHE_OPTIONS=fake_options(), PYTORCH_CUDA_ALLOC_CONF=None)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_pytorch_alloc_conf_ranks_below_devcache_options(self):
        code = """
            cfg = dt.context().config()
            print(cfg["max_split_size_mb"][1], dt.memory_stats(0)["max_split_size"])
        """
        p = run(code, prelude=True, DEVCACHE_OPTIONS=fake_options(),
                PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:64")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.split(), ["PYTORCH_CUDA_ALLOC_CONF", str(64 << 20)])
        p = run(code, prelude=True, DEVCACHE_OPTIONS=fake_options("max_split_size_mb:128"),
                PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:64")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.split(), ["DEVCACHE_OPTIONS", str(128 << 20)])

    def test_a_bad_pytorch_alloc_conf_is_a_config_error(self):
        p = run("""
            assert not lib.devcache_torch_malloc(4096, 0, None)
            try:
                dt.context()
            except devcache.ConfigError as e:
                print("ConfigError", e)
        """, prelude=True, DEVCACHE_OPTIONS=fake_options(), PYTORCH_CUDA_ALLOC_CONF="nonsense:1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("ConfigError", p.stdout)
        self.assertIn("PYTORCH_CUDA_ALLOC_CONF", p.stdout)
        self.assertIn("PYTORCH_CUDA_ALLOC_CONF", p.stderr)

    def test_a_device_torch_does_not_have(self):
        p = run("""
            assert not lib.devcache_torch_malloc(4096, 57, None)
            for bad in (57, -1):
                try:
                    dt.get_device(bad)
                except (devcache.NoDeviceError, devcache.InvalidArgumentError, ValueError) as e:
                    print(type(e).__name__)
            try:
                dt.get_device("npu:0")
            except ValueError as e:
                print("ValueError")
        """, prelude=True, DEVCACHE_OPTIONS=fake_options(), PYTORCH_CUDA_ALLOC_CONF=None)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.split(), ["NoDeviceError", "InvalidArgumentError", "ValueError"])


def torch_status():
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means no torch
        return None, "torch is not importable (%s)" % e
    return torch, None


class WithPyTorch(unittest.TestCase):
    def setUp(self):
        self.torch, why = torch_status()
        if self.torch is None:
            self.skipTest(why)

    def test_an_old_torch_is_refused_clearly(self):
        if hasattr(self.torch.cuda.memory, "CUDAPluggableAllocator"):
            self.skipTest("torch %s has CUDAPluggableAllocator" % self.torch.__version__)
        p = run("""
            import devcache.torch as dt
            try:
                dt.use_devcache_allocator()
            except RuntimeError as e:
                print(e)
        """)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("PyTorch 2.0 or later", p.stdout)

    def test_under_pytorch_on_a_gpu(self):
        torch = self.torch
        if not hasattr(torch.cuda.memory, "CUDAPluggableAllocator"):
            self.skipTest("torch %s has no CUDAPluggableAllocator (PyTorch 2.0 or later)"
                          % torch.__version__)
        if not torch.cuda.is_available():
            self.skipTest("torch sees no GPU")
        p = run("""
            import torch, devcache.torch as dt
            dt.use_devcache_allocator()
            x = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
            s = dt.memory_stats()
            assert s["allocated_bytes.all.current"] >= 1 << 20, s["allocated_bytes.all.current"]
            del x
            torch.cuda.synchronize()
            print("ok")
        """, DEVCACHE_OPTIONS="log_level:error")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "ok")


if __name__ == "__main__":
    unittest.main()
