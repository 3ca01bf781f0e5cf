# SPDX-License-Identifier: LGPL-2.1-or-later
"""Tests of devcache.trace_from_torch: PyTorch memory snapshots to devcache-trace(5).

Run: python3 tests/python/taprun.py tests/python/test_trace_from_torch.py, with
PYTHONPATH naming the folder that holds the devcache package.  When TEST_TOOL
names the devcache program, the traces are also replayed.
"""
import collections
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import unittest

from devcache import trace_from_torch as tft

PROG = "devcache.trace_from_torch"
# The folder that holds the package, for the converter run as a program.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(tft.__file__)))

SIDE = 0x7F3A5C000000  # a stream other than the default, as PyTorch gives it
OTHER = 0x7F3A5C000400
MIB = 1 << 20


def ev(action, addr=None, size=None, stream=0, **extra):
    """An event as _dump_snapshot() writes it."""
    e = {"action": action, "size": size, "stream": stream, "frames": [], "time_us": 0}
    if action == "oom":
        e["device_free"] = addr
    else:
        e["addr"] = addr
    e.update(extra)
    return e


def snapshot(*device_traces):
    return {"segments": [], "device_traces": list(device_traces)}


# A small history: address reuse, a second and third stream, a block used on
# another stream (its free completes later), and the allocator's own events.
SMALL = snapshot(
    [
        ev("segment_alloc", 0x1000, 2 * MIB),
        ev("alloc", 0x1000, 512),
        ev("alloc", 0x1200, 1000, SIDE),
        ev("free_requested", 0x1000, 512),
        ev("free_completed", 0x1000, 512),
        ev("alloc", 0x1000, 256),  # the same address: a new ID
        ev("free_requested", 0x1200, 1000, SIDE),  # still used on another stream
        ev("alloc", 0x1400, 4096, OTHER),
        ev("snapshot", 0, 0),
        ev("free_completed", 0x1200, 1000, SIDE),  # the free goes here
        ev("free_requested", 0x1400, 4096, OTHER),
        ev("free_completed", 0x1400, 4096, OTHER),
        ev("segment_free", 0x1000, 2 * MIB),
    ]
)
SMALL_EVENTS = [
    "+ 1 512",
    "+ 2 1000 1",
    "- 1",
    "+ 3 256",
    "+ 4 4096 2",
    "# snapshot: PyTorch took a memory snapshot here",
    "- 2",
    "- 4",
]


def events_of(text):
    """The lines after the header comments."""
    lines = text.splitlines()
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return lines


def header_of(text):
    out = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        out.append(line)
    return out


def converted(snap, **kw):
    out = io.StringIO()
    stats = tft.convert(snap, out, **kw)
    return out.getvalue(), stats


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="test-trace-from-torch-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def write_pickle(self, obj, name="snap.pickle", protocol=pickle.HIGHEST_PROTOCOL):
        p = self.path(name)
        with open(p, "wb") as f:
            pickle.dump(obj, f, protocol=protocol)
        return p

    def write_bytes(self, data, name="snap.pickle"):
        p = self.path(name)
        with open(p, "wb") as f:
            f.write(data)
        return p

    def run_tool(self, *args):
        env = dict(os.environ)
        env["PYTHONPATH"] = PACKAGE_PARENT + (
            os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
        )
        return subprocess.run(
            [sys.executable, "-m", PROG] + list(args),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=self.dir,
            universal_newlines=True, timeout=120,
        )

    def assert_fails(self, r, *fragments, case=""):
        """Status 1, nothing on standard output, one line on standard error."""
        what = "%s: %r" % (case, r.stderr)
        self.assertEqual(r.returncode, 1, what)
        self.assertEqual(r.stdout, "", what)
        self.assertNotIn("Traceback", r.stderr, what)
        self.assertTrue(r.stderr.endswith("\n"), what)
        self.assertEqual(r.stderr.count("\n"), 1, what)
        self.assertTrue(r.stderr.startswith(PROG + ": "), what)
        for f in fragments:
            self.assertIn(f, r.stderr, what)


class Convert(Base):
    def test_known_snapshot(self):
        text, stats = converted(SMALL, source="snap.pickle")
        self.assertEqual(events_of(text), SMALL_EVENTS)
        head = header_of(text)
        self.assertIn("# source: snap.pickle", head)
        self.assertIn("# device: cuda:0", head)
        self.assertIn("# stream 1: PyTorch stream %s" % hex(SIDE), head)
        self.assertIn("# stream 2: PyTorch stream %s" % hex(OTHER), head)
        self.assertTrue(any(h.startswith("# events: 13 (alloc 4, free_requested 3, "
                                         "free_completed 3, segment 2,") for h in head), head)
        self.assertEqual(stats["allocations"], 4)
        self.assertEqual(stats["frees"], 3)
        self.assertEqual(stats["live_at_end"], 1)
        self.assertEqual(stats["streams"], 3)
        self.assertEqual(stats["actions"]["alloc"], 4)
        self.assertEqual(stats["device"], 0)

    def test_free_requested_when_never_completed(self):
        # Recorded with skip_actions=["free_completed"]: the frees go where
        # they were requested, also when the address is reused before.
        snap = snapshot([
            ev("alloc", 0x10, 100),
            ev("alloc", 0x20, 200),
            ev("free_requested", 0x10, 100),
            ev("alloc", 0x30, 300),
            ev("alloc", 0x10, 400),
            ev("free_requested", 0x20, 200),
            ev("free_requested", 0x10, 400),
        ])
        text, stats = converted(snap)
        self.assertEqual(events_of(text),
                         ["+ 1 100", "+ 2 200", "- 1", "+ 3 300", "+ 4 400", "- 2", "- 4"])
        self.assertEqual(stats["frees_at_request"], 3)
        self.assertEqual(stats["live_at_end"], 1)

    def test_reused_address_without_free(self):
        snap = snapshot([ev("alloc", 0x10, 100), ev("alloc", 0x10, 200)])
        text, stats = converted(snap)
        self.assertEqual(events_of(text), ["+ 1 100", "- 1", "+ 2 200"])
        self.assertEqual(stats["frees_inferred"], 1)

    def test_frees_before_the_history(self):
        snap = snapshot([
            ev("free_requested", 0x99, 64),
            ev("free_completed", 0x99, 64),
            ev("free_completed", 0x98, 64),
            ev("alloc", 0x99, 64),
            ev("free_requested", 0x99, 64),
            ev("free_completed", 0x99, 64),
        ])
        text, stats = converted(snap)
        self.assertEqual(events_of(text), ["+ 1 64", "- 1"])
        self.assertEqual(stats["unknown_frees"], 2)

    def test_oom(self):
        snap = snapshot([
            ev("alloc", 0x10, 100),
            ev("oom", 12345, 8 * MIB, SIDE),
        ])
        text, stats = converted(snap)
        self.assertEqual(events_of(text), [
            "+ 1 100",
            "# oom: PyTorch could not allocate %d bytes; device_free=12345" % (8 * MIB),
            "+ 2 %d 1" % (8 * MIB),
            "- 2",
        ])
        self.assertEqual(stats["ooms"], 1)
        text, stats = converted(snap, oom_attempt=False)
        self.assertEqual(events_of(text)[1:], [
            "# oom: PyTorch could not allocate %d bytes; device_free=12345" % (8 * MIB),
        ])

    def test_zero_size(self):
        snap = snapshot([ev("alloc", 0, 0), ev("free_requested", 0, 0),
                         ev("free_completed", 0, 0), ev("alloc", 0x10, 8)])
        text, stats = converted(snap)
        self.assertEqual(events_of(text), ["+ 1 8"])
        self.assertEqual(stats["zero_size"], 1)
        self.assertEqual(stats["unknown_frees"], 0)

    def test_pytorch_2_0_layout(self):
        # PyTorch 2.0: no time_us, frames only when context was recorded,
        # segments with their block history.
        events = [
            {"action": "segment_alloc", "addr": 0x7F0000000000, "size": 20 * MIB, "stream": 0},
            {"action": "alloc", "addr": 0x7F0000000000, "size": 3 * MIB, "stream": 0,
             "frames": [{"filename": "x.py", "line": 3, "name": "f"}]},
            {"action": "free_requested", "addr": 0x7F0000000000, "size": 3 * MIB, "stream": 0},
            {"action": "free_completed", "addr": 0x7F0000000000, "size": 3 * MIB, "stream": 0},
        ]
        snap = {
            "segments": [{"address": 0x7F0000000000, "total_size": 20 * MIB, "stream": 0,
                          "segment_type": "large", "allocated_size": 0, "active_size": 0,
                          "blocks": [{"size": 20 * MIB, "state": "inactive", "history": []}]}],
            "device_traces": [events],
        }
        text, _ = converted(snap)
        self.assertEqual(events_of(text), ["+ 1 %d" % (3 * MIB), "- 1"])

    def test_every_protocol_loads(self):
        # (No subTest: taprun.py reports only whole tests.)
        for protocol in range(0, pickle.HIGHEST_PROTOCOL + 1):
            snap = dict(SMALL, extra=(1, 2.5, True, None, "s", -(1 << 70)))
            p = self.write_pickle(snap, "p%d.pickle" % protocol, protocol)
            self.assertEqual(tft.load_snapshot(p), snap, "protocol %d" % protocol)

    def test_devices(self):
        snap = snapshot(SMALL["device_traces"][0], [], [ev("alloc", 0x10, 7)])
        with self.assertRaises(tft.SnapshotError) as cm:
            converted(snap)
        self.assertIn("devices 0, 2 have events", str(cm.exception))
        for device in (2, "2", "cuda:2"):
            text, stats = converted(snap, device=device)
            self.assertEqual(events_of(text), ["+ 1 7"])
            self.assertIn("# device: cuda:2", header_of(text))
            self.assertEqual(stats["device"], 2)
        for device in (1, 3, "x"):
            with self.assertRaises(tft.SnapshotError):
                converted(snap, device=device)
        # a single device with events need not be named
        text, _ = converted(snapshot([], [ev("alloc", 0x10, 7)]))
        self.assertIn("# device: cuda:1", header_of(text))

    def test_nothing_written_on_error(self):
        out = io.StringIO()
        with self.assertRaises(tft.SnapshotError):
            tft.convert(snapshot([ev("alloc", 0x10, 8), ev("alloc", 0x20, -1)]), out)
        self.assertEqual(out.getvalue(), "")


class Command(Base):
    def test_matches_convert(self):
        p = self.write_pickle(SMALL)
        r = self.run_tool(p)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        expected, _ = converted(SMALL, source=p)
        self.assertEqual(r.stdout, expected)

    def test_output_file(self):
        p = self.write_pickle(SMALL)
        out = self.path("out.trace")
        r = self.run_tool("-o", out, p)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "", ""))
        with open(out) as f:
            self.assertEqual(events_of(f.read()), SMALL_EVENTS)

    def test_help(self):
        r = self.run_tool("--help")
        self.assertEqual(r.returncode, 0)
        for option in ("--device", "-o", "SNAPSHOT"):
            self.assertIn(option, r.stdout)

    def test_usage_error(self):
        r = self.run_tool()
        self.assertEqual(r.returncode, 2)
        self.assertNotIn("Traceback", r.stderr)

    def test_devices(self):
        p = self.write_pickle(snapshot([ev("alloc", 0x10, 5)], [], [ev("alloc", 0x10, 7)]))
        self.assert_fails(self.run_tool(p), p, "devices 0, 2 have events", "--device")
        r = self.run_tool("--device", "2", p)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(events_of(r.stdout), ["+ 1 7"])
        self.assert_fails(self.run_tool("--device", "1", p), p, "device 1 has no events")
        self.assert_fails(self.run_tool("--device", "9", p), p, "device 9 has no events")

    def test_no_history(self):
        for name, snap in (("empty", snapshot()), ("quiet", snapshot([], []))):
            p = self.write_pickle(snap, name + ".pickle")
            self.assert_fails(self.run_tool(p), p, "no allocation history",
                              "_record_memory_history", case=name)

    def test_unknown_frees_reported(self):
        p = self.write_pickle(snapshot([ev("free_completed", 0x10, 5), ev("alloc", 0x20, 5)]))
        r = self.run_tool(p)
        self.assertEqual(r.returncode, 0)
        self.assertEqual(events_of(r.stdout), ["+ 1 5"])
        self.assertIn("skipped 1 frees of blocks allocated before the history starts", r.stderr)

    def test_missing_file(self):
        p = self.path("absent.pickle")
        self.assert_fails(self.run_tool(p), p, "No such file or directory")
        self.assert_fails(self.run_tool(self.dir), self.dir)

    def test_not_a_regular_file(self):
        # Refused at once, without waiting for a writer or reading a device.
        fifo = self.path("snapshot.fifo")
        os.mkfifo(fifo)
        for p in (fifo, "/dev/zero", self.dir):
            self.assert_fails(self.run_tool(p), p, "not a regular file", case=p)
            with self.assertRaises(tft.SnapshotError):
                tft.load_snapshot(p)

    def test_malformed(self):
        good = ev("alloc", 0x10, 5)
        cases = {
            "text": (b"this is not a pickle\n", "not a pickle, or a damaged one"),
            "empty": (b"", "empty or cut short"),
            "truncated": (pickle.dumps(SMALL)[:-40], "not a memory snapshot"),
            "top-list-of-ints": ([1, 2, 3], "a value of type list, not a dict"),
            "top-segments": ([{"address": 1, "total_size": 2, "blocks": []}],
                             "a list of segments without an allocation history"),
            "top-int": (42, "a value of type int, not a dict"),
            "top-str": ("snap", "a value of type str, not a dict"),
            "no-traces": ({"segments": []}, "no 'device_traces' key"),
            "segments-dict": ({"segments": {}, "device_traces": [[good]]},
                              "'segments' is of type dict"),
            "no-segments": ({"device_traces": [[good]]}, "no 'segments' key"),
            "traces-dict": ({"segments": [], "device_traces": {}},
                            "'device_traces' is of type dict"),
            "trace-not-list": (snapshot(5), "device_traces[0] is of type int"),
            "event-not-dict": (snapshot([good, "alloc"]),
                               "device_traces[0][1] is of type str, not an event dict"),
            "no-action": (snapshot([{"addr": 1, "size": 2, "stream": 0}]), "no 'action' key"),
            "unknown-action": (snapshot([ev("allocate", 1, 2)]), "unknown action 'allocate'"),
            "no-size": (snapshot([{"action": "alloc", "addr": 1, "stream": 0}]), "no 'size' key"),
            "no-addr": (snapshot([{"action": "alloc", "size": 1, "stream": 0}]), "no 'addr' key"),
            "no-stream": (snapshot([{"action": "alloc", "addr": 1, "size": 1}]), "no 'stream' key"),
            "str-size": (snapshot([ev("alloc", 1, "10")]), "size '10' is not an integer"),
            "float-size": (snapshot([ev("alloc", 1, 1.5)]), "size 1.5 is not an integer"),
            "bool-size": (snapshot([ev("alloc", 1, True)]), "size True is not an integer"),
            "none-size": (snapshot([ev("alloc", 1, None)]), "size None is not an integer"),
            "negative-size": (snapshot([good, ev("alloc", 0x20, -4096)]),
                              "device_traces[0][1] (alloc): size -4096 is negative"),
            "huge-size": (snapshot([ev("alloc", 1, 1 << 64)]), "too large"),
            "free-bad-size": (snapshot([good, ev("free_completed", 0x10, -1)]), "negative"),
            "str-addr": (snapshot([ev("alloc", "0x10", 1)]), "addr '0x10' is not an integer"),
            "str-stream": (snapshot([ev("alloc", 1, 1, "s")]), "stream 's' is not an integer"),
        }
        for name, (content, fragment) in cases.items():
            if isinstance(content, bytes):
                p = self.write_bytes(content, name + ".pickle")
            else:
                p = self.write_pickle(content, name + ".pickle")
            self.assert_fails(self.run_tool(p), p, fragment, case=name)
            with self.assertRaises(tft.SnapshotError, msg=name):
                tft.convert(tft.load_snapshot(p), io.StringIO())

    def test_long_strange_name(self):
        name = "a\nb" + "x" * 150 + ".pickle"
        p = self.write_pickle(snapshot([ev("alloc", 1, 2)]), name)
        r = self.run_tool(p)
        self.assertEqual(r.returncode, 0, r.stderr)
        source = [h for h in header_of(r.stdout) if h.startswith("# source: ")]
        self.assertEqual(len(source), 1)
        self.assertIn("a?b", source[0])
        r = self.run_tool(self.write_bytes(b"junk", name))
        self.assert_fails(r, "a?b")


# A tuple nested this deep kills CPython when it is hashed (a dict key, a
# set member): tuplehash() recurses with no check.  The pickler cannot write
# one (it recurses too), so the opcodes are written here.
DEEP = 150000


def deep_tuple(n=DEEP):
    """Opcodes that push a tuple nested n deep: (((),),)..."""
    return b")" + b"\x85" * n  # EMPTY_TUPLE, then TUPLE1 n times


class Bounds(Base):
    def check_deep(self, data, name):
        p = self.write_bytes(data, name + ".pickle")
        with self.assertRaises(tft.SnapshotError, msg=name) as cm:
            tft.load_snapshot(p)
        self.assertIn(p, str(cm.exception), name)
        self.assertIn("objects nested more than %d deep" % tft.MAX_DEPTH, str(cm.exception))
        r = self.run_tool(p)
        self.assertNotEqual(r.returncode, -11, "%s: the interpreter crashed" % name)
        self.assert_fails(r, p, "nested more than %d deep" % tft.MAX_DEPTH, case=name)

    def test_deep_tuple_as_dict_key(self):
        # EMPTY_DICT, the key, BININT1 1, SETITEM; and with MARK ... SETITEMS
        self.check_deep(b"\x80\x02}" + deep_tuple() + b"K\x01s.", "setitem")
        self.check_deep(b"\x80\x02}(" + deep_tuple() + b"K\x01u.", "setitems")
        # as a key of an event of an otherwise good snapshot
        good = pickle.dumps(SMALL, protocol=2)
        self.assertEqual(good[-1:], b".")
        self.check_deep(good[:-1] + b"}" + deep_tuple() + b"Ns0.", "in-a-snapshot")

    def test_deep_tuple_as_set_member(self):
        # EMPTY_SET MARK member ADDITEMS; MARK member FROZENSET
        self.check_deep(b"\x80\x04\x8f(" + deep_tuple() + b"\x90.", "set")
        self.check_deep(b"\x80\x04(" + deep_tuple() + b"\x91.", "frozenset")

    def test_deep_tuple_through_the_memo(self):
        # each level fetched back from the memo: ((),) memoized, then used
        data = b"\x80\x02)r\x00\x00\x00\x00"
        for i in range(DEEP // 10):
            data += b"j" + i.to_bytes(4, "little") + b"\x85r" + (i + 1).to_bytes(4, "little")
        self.check_deep(data + b"\x85.", "memo")

    def test_deep_list(self):
        # EMPTY_LIST n times, then APPEND each into the one below: [[[...]]]
        self.check_deep(b"\x80\x02" + b"]" * DEEP + b"a" * (DEEP - 1) + b".", "list")
        # MARK ... LIST, as protocol 0 writes a list
        self.check_deep(b"(" * DEEP + b"l" * DEEP + b".", "list-protocol-0")
        # dicts as values, nested
        self.check_deep(b"\x80\x02" + b"}K\x01" * (DEEP - 1) + b"}" + b"s" * (DEEP - 1) + b".",
                        "dict")

    def test_as_deep_as_allowed(self):
        # a dict one deeper than its key, a tuple nested limit - 1 deep
        limit = tft.MAX_DEPTH
        p = self.write_bytes(b"\x80\x02}" + deep_tuple(limit - 2) + b"K\x01s.")
        snap = tft.load_snapshot(p)
        self.assertEqual(len(snap), 1)
        p = self.write_bytes(b"\x80\x02}" + deep_tuple(limit - 1) + b"K\x01s.")
        with self.assertRaises(tft.SnapshotError):
            tft.load_snapshot(p)
        self.assertEqual(len(tft.load_snapshot(p, max_depth=limit + 1)), 1)

    def test_too_many_objects(self):
        p = self.write_pickle(snapshot([ev("alloc", i * 512, 512) for i in range(200)]))
        # the dict, its two lists, 200 events of 5 values and a list each
        tft.load_snapshot(p, max_objects=5000)
        with self.assertRaises(tft.SnapshotError) as cm:
            tft.load_snapshot(p, max_objects=1000)
        self.assertIn(p, str(cm.exception))
        self.assertIn("more than 1000 objects", str(cm.exception))
        # a list of None, in batches of 1000 as a pickler writes it: one
        # byte an object (the default bound takes 100 MB to pass)
        batch = b"(" + b"N" * 1000 + b"e"
        p = self.write_bytes(b"\x80\x02]" + batch * 100 + b".")
        self.assertEqual(len(tft.load_snapshot(p, max_objects=100001)), 100000)
        with self.assertRaises(tft.SnapshotError) as cm:
            tft.load_snapshot(p, max_objects=100000)
        self.assertIn("more than 100000 objects", str(cm.exception))
        self.assertEqual(tft.load_snapshot.__defaults__, (tft.MAX_DEPTH, tft.MAX_OBJECTS))


class Evil:
    """Runs a shell command when unpickled by pickle.load()."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class Safety(Base):
    def check_refused(self, obj, refused):
        marker = self.path("marker")
        p = self.write_pickle(obj, "evil.pickle")
        with self.assertRaises(tft.SnapshotError) as cm:
            tft.load_snapshot(p)
        self.assertIn("refused to load " + refused, str(cm.exception))
        self.assert_fails(self.run_tool(p), p, "refused to load " + refused)
        self.assertFalse(os.path.exists(marker), "the pickle ran its command")

    def test_os_system(self):
        command = "touch " + self.path("marker")
        self.check_refused(Evil(command), os.system.__module__ + ".system")
        # hidden deep in an otherwise plain snapshot
        snap = snapshot([ev("alloc", 1, 2, frames=[{"name": Evil(command)}])])
        self.check_refused(snap, os.system.__module__ + ".system")

    def test_ordered_dict(self):
        self.check_refused(collections.OrderedDict(SMALL), "collections.OrderedDict")
        for protocol in range(0, pickle.HIGHEST_PROTOCOL + 1):
            p = self.write_pickle(collections.OrderedDict(a=1), "od.pickle", protocol)
            with self.assertRaises(tft.SnapshotError, msg="protocol %d" % protocol):
                tft.load_snapshot(p)


def tool():
    t = os.environ.get("TEST_TOOL")
    if not t:
        raise unittest.SkipTest("TEST_TOOL does not name the devcache program")
    if not os.access(t, os.X_OK):
        raise unittest.SkipTest("TEST_TOOL=%s is not an executable" % t)
    return t


class Replay(Base):
    def replay(self, trace, *options):
        r = subprocess.run(
            [tool(), "replay", "--json"] + list(options) + [trace],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
            timeout=300,
        )
        out = json.loads(r.stdout)
        # 3: the replay ran, and some allocations failed for want of memory.
        self.assertEqual(r.returncode, 3 if out["ooms"] else 0, r.stderr)
        return out

    def convert_to_file(self, snap, *args):
        p = self.write_pickle(snap)
        out = self.path("snap.trace")
        r = self.run_tool("-o", out, *args, p)
        self.assertEqual(r.returncode, 0, r.stderr)
        return out

    def test_replay_accepts_the_trace(self):
        tool()
        trace = self.convert_to_file(SMALL)
        result = self.replay(trace, "-o", "max_split_size_mb:512")
        self.assertEqual(result["events"], len(SMALL_EVENTS) - 1)  # less the comment
        self.assertEqual(result["ooms"], 0)

    def test_replay_reproduces_the_oom(self):
        tool()
        # 40 MiB reserved, 24 MiB left on the device: a 64 MiB device, which
        # the trace's header says and the replay emulates on the host.
        snap = snapshot([
            ev("segment_alloc", 0x10000000, 40 * MIB),
            ev("alloc", 0x10000000, 40 * MIB),
            ev("oom", 24 * MIB, 60 * MIB),  # 40 MiB held, 60 MiB more refused
            ev("alloc", 0x20000000, 1 * MIB),
            ev("free_requested", 0x20000000, 1 * MIB),
            ev("free_completed", 0x20000000, 1 * MIB),
        ])
        trace = self.convert_to_file(snap)
        with open(trace) as f:
            self.assertIn("\n# device_memory: %d\n" % (64 * MIB), f.read())
        result = self.replay(trace)
        self.assertEqual(result["device_memory"], 64 * MIB)
        self.assertEqual(result["ooms"], 1)
        self.assertEqual(self.replay(trace, "--memory", "1G")["ooms"], 0)
        trace = self.convert_to_file(snap, "--no-oom-attempt")
        self.assertEqual(self.replay(trace)["ooms"], 0)

    def test_device_memory_counts_segments_before_the_history(self):
        # The snapshot's segments (its end) hold 10 MiB that no event of the
        # history allocated: they were reserved before it starts.
        snap = snapshot([
            ev("segment_alloc", 0x10000000, 20 * MIB),
            ev("oom", 6 * MIB, 30 * MIB),
            ev("segment_free", 0x10000000, 20 * MIB),
        ])
        snap["segments"] = [{"device": 0, "address": 0x30000000, "total_size": 10 * MIB,
                             "stream": 0, "blocks": []}]
        text, stats = converted(snap)
        self.assertEqual(stats["device_memory"], (10 + 20 + 6) * MIB)
        self.assertIn("# device_memory: %d\n" % (36 * MIB), text)
        # No OOM: the driver's free memory is not known, nor the device's.
        text, stats = converted(snapshot([ev("alloc", 0x10, 100)]))
        self.assertNotIn("device_memory", text)
        self.assertNotIn("device_memory", stats)


if __name__ == "__main__":
    unittest.main()
