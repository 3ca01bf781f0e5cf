# SPDX-License-Identifier: LGPL-2.1-or-later
"""Tests of the devcache package's model cache driven model by model: models(), evict, offload, make_room, locks with working memory, partial loading by bytes, on the fake CUDA driver.

Run: python3 tests/python/taprun.py tests/python/test_manage.py, with
PYTHONPATH naming the folder that holds the devcache package; the tests
need TEST_FAKES and TEST_BACKENDS (the fake CUDA driver) and skip,
saying so, without them.
"""
import os
import tempfile
import unittest

import devcache
import modelfiles as mf

MIB = 1 << 20
FAKE_OPTIONS, NO_FAKE = mf.fake_cuda_options()
NEED_FAKE = unittest.skipUnless(FAKE_OPTIONS, NO_FAKE or "")


@NEED_FAKE
class Manager(unittest.TestCase):
    """A manager's loop as the issue tried it: budgets of 400M and 300M,
    models of 100, 150 and 200 MiB, scaled down a hundredfold."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="test-manage-")
        self.addCleanup(tmp.cleanup)
        self.ctx = devcache.open(FAKE_OPTIONS + ",max_cache_ram:4M,max_cache_vram:3M",
                                 config_files=False, environment=False)
        self.addCleanup(self.ctx.close)
        self.files = []
        for i, mib in enumerate((1, 1.5, 2)):
            n = int(mib * MIB) // 4
            path = os.path.join(tmp.name, "m%d.safetensors" % i)
            self.files.append(mf.write_safetensors(
                path, [("w", ("F32", (n,), mf.pattern("w%d" % i, 4 * n)))]))
        self.dev = self.ctx.device("cuda:0")

    def listed(self):
        return {os.path.basename(m["path"]): m for m in self.ctx.models()}

    def test_models_lists_what_the_cache_holds(self):
        with self.ctx.load(self.files[0], device=self.dev):
            with self.ctx.load(self.files[0], device=self.dev):
                pass
            models = self.ctx.models()
            self.assertEqual(len(models), 1)
            m = models[0]
            self.assertEqual(m["where"], "device")
            self.assertEqual(m["device"], self.dev)
            self.assertTrue(m["locked"])
            self.assertEqual(m["locks"], 1)
            self.assertEqual(m["hits"], 1)
            self.assertEqual(m["device_bytes"], MIB)
            self.assertEqual(m["charged_device"], MIB)
            self.assertGreater(m["last_use"], 0)
        self.assertFalse(self.listed()["m0.safetensors"]["locked"])

    def test_budgets_mean_memory(self):
        free0 = self.dev.info["free_memory"]
        for f in self.files:
            self.ctx.load(f, device=self.dev).release()
        s = self.ctx.cache_device_stats(self.dev)
        self.assertLessEqual(s["used"], s["budget"])
        self.assertLessEqual(s["peak_used"], s["budget"])
        self.assertEqual(s["allocated_bytes"], s["used"])
        self.assertEqual(self.ctx.evict_all(), 3)
        s = self.ctx.cache_device_stats(self.dev)
        self.assertEqual((s["allocated_bytes"], s["reserved_bytes"]), (0, 0))
        # Back to the driver: the device's allocator holds nothing.
        self.assertEqual(s["device_reserved_bytes"], 0)
        self.assertEqual(self.dev.info["free_memory"], free0)
        stats = self.ctx.cache_stats()
        self.assertGreaterEqual(stats["offloads"], 1)  # m0 went to a RAM copy
        self.assertLessEqual(stats["ram_peak"], stats["ram_budget"])

    def test_evict_offload_make_room(self):
        for f in self.files[:2]:
            self.ctx.load(f, device=self.dev).release()
        self.ctx.offload(self.files[0], self.dev)
        self.assertEqual(self.listed()["m0.safetensors"]["where"], "ram_copy")
        self.ctx.evict(self.files[0], self.dev)
        self.assertNotIn("m0.safetensors", self.listed())
        self.assertRaises(devcache.NotFoundError, self.ctx.evict, self.files[0], self.dev)
        with self.ctx.load(self.files[1], device=self.dev):
            self.assertRaises(devcache.BusyError, self.ctx.offload, self.files[1], self.dev)
            # m1 is locked: nothing can make 2.5 MiB, and nothing moved.
            self.assertRaises(devcache.OutOfMemoryError, self.ctx.make_room, self.dev,
                              5 * MIB // 2)
            self.assertEqual(self.listed()["m1.safetensors"]["where"], "device")
        freed = self.ctx.make_room(self.dev, 5 * MIB // 2)
        self.assertEqual(freed, 3 * MIB // 2)
        self.assertEqual(self.listed()["m1.safetensors"]["where"], "ram_copy")

    def test_lock_with_working_memory(self):
        with self.ctx.load(self.files[0], device=self.dev) as m:
            with m.lock(working_mem=MIB) as held:
                self.assertEqual(self.ctx.cache_device_stats(self.dev)["working_mem"], MIB)
                self.assertEqual(self.listed()["m0.safetensors"]["locks"], 2)
                self.assertRaises(devcache.OutOfMemoryError, self.ctx.load, self.files[2],
                                  device=self.dev)
                self.assertEqual(held.path, m.path)
            self.assertEqual(self.ctx.cache_device_stats(self.dev)["working_mem"], 0)
            with self.ctx.load(self.files[2], device=self.dev):
                pass
        self.assertRaises(ValueError, m.lock)

    def test_partial_by_bytes(self):
        tensors = [("t%d" % i, ("F32", (65536,), mf.pattern("t%d" % i, 1 << 18)))
                   for i in range(4)]
        path = mf.write_safetensors(os.path.join(os.path.dirname(self.files[0]), "p.st"),
                                    tensors)
        with self.ctx.load(path, device=self.dev, device_bytes=2 * (1 << 18) + 100) as m:
            self.assertEqual([m[k].device for k in m], ["cuda:0"] * 2 + ["host"] * 2)
            m.set_device_bytes(3 << 18)
            self.assertEqual([m[k].device for k in m], ["cuda:0"] * 3 + ["host"])
            m.set_device_bytes(0)
            self.assertEqual([m[k].device for k in m], ["host"] * 4)
            for name, (_d, _s, raw) in tensors:
                self.assertEqual(m[name].tobytes(), raw)
        self.assertEqual(self.listed()["p.st"]["where"], "partial")

    def test_evict_a_held_model(self):
        m = self.ctx.load(self.files[0], device=self.dev)
        m.evict()
        self.assertEqual(self.ctx.models(), [])
        self.assertEqual(self.ctx.cache_device_stats(self.dev)["used"], MIB)
        m.release()
        self.assertEqual(self.ctx.cache_device_stats(self.dev)["used"], 0)


if __name__ == "__main__":
    unittest.main()
