# SPDX-License-Identifier: LGPL-2.1-or-later
"""Randomised pickles for devcache.trace_from_torch: its restricted unpickler and converter.

Each case writes a pickle to a file and reads it with load_snapshot(), then
converts what it gave.  Whatever the bytes, the outcome is plain data or a
SnapshotError (an OSError only for the file itself): never another
exception, never a class looked up or a function called, and never a hang.
The pickles come from three generators: snapshot-like values with wrong
types, huge and deep values in them; valid pickles with bytes flipped, cut
or spliced in; and pickles that name classes and functions in every way the
format has (GLOBAL, STACK_GLOBAL, INST, OBJ, REDUCE, NEWOBJ, extension codes,
persistent IDs).

Run: python3 tests/python/taprun.py tests/python/test_trace_random.py, with
PYTHONPATH naming the folder that holds the devcache package.  The seed is
printed; TEST_SEED=N repeats a run, TEST_SEED=random draws a new seed (make
check uses a fixed one), TEST_RANDOM_CASES=N sets the number of cases per
generator.
"""
import io
import os
import pickle
import random
import shutil
import signal
import sys
import tempfile
import time
import unittest

from devcache import trace_from_torch as tft

# make check runs the same cases each time; TEST_SEED=random draws a seed.
SEED = os.environ.get("TEST_SEED") or "20261126"
SEED = random.SystemRandom().randrange(1 << 32) if SEED == "random" else int(SEED)
CASES = int(os.environ.get("TEST_RANDOM_CASES") or 400)
# A guard against hangs, not a measure of speed: every case takes
# milliseconds; the faults this test found took a minute, or for ever.
CASE_SECONDS = 20.0

# Set by canary() if any pickle ever reaches it: in the environment, which
# every copy of this module shares (pickle imports it again by name).
CANARY = "DEVCACHE_TEST_PICKLE_CANARY"


def canary(*args):
    os.environ[CANARY] = repr(args)
    return "called"


def called():
    return os.environ.get(CANARY)


class Canary:
    def __init__(self, *args):
        os.environ[CANARY] = repr(args)

    def __reduce__(self):
        return (canary, ("reduce",))


PLAIN = (dict, list, tuple, str, bytes, bytearray, int, float, complex, bool, type(None),
         set, frozenset)


def plain(value):
    """Whether value is built of plain data only (shared and cyclic parts allowed)."""
    seen, todo = set(), [value]
    while todo:
        v = todo.pop()
        if type(v) not in PLAIN:
            return False
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, dict):
            todo.extend(v.keys())
            todo.extend(v.values())
        elif isinstance(v, (list, tuple, set, frozenset)):
            todo.extend(v)
    return True


def ev(rng, action=None):
    """An event, mostly well formed, sometimes not."""
    actions = ["alloc", "free_requested", "free_completed", "oom", "snapshot",
               "segment_alloc", "segment_free", "annotate"]
    e = {
        "action": action or rng.choice(actions),
        "addr": rng.choice([0x1000, 0x2000, 0x3000, rng.randrange(1 << 48)]),
        "size": rng.choice([0, 512, 4096, 1 << 20, rng.randrange(1 << 40)]),
        "stream": rng.choice([0, 0, 0x7F00, 0x7F40, rng.randrange(1 << 63)]),
        "frames": [],
        "time_us": rng.randrange(1 << 40),
    }
    if e["action"] == "oom":
        e["device_free"] = rng.randrange(1 << 40)
    return e


def wrong(rng, depth=0):
    """A value of a type or size no snapshot has."""
    choices = [
        lambda: None, lambda: True, lambda: -1, lambda: 1.5, lambda: float("nan"),
        lambda: "x" * rng.randrange(1, 3000), lambda: b"\xff" * rng.randrange(1, 100),
        lambda: 1 << rng.randrange(64, 20000),       # a huge integer
        lambda: -(10 ** rng.randrange(100, 6000)),   # past str()'s digit limit
        lambda: (1, 2), lambda: {1, 2}, lambda: complex(1, 2), lambda: bytearray(b"ab"),
        lambda: {"action": "alloc"}, lambda: {(1, 2): 3},
    ]
    if depth < 3:
        choices += [lambda: [wrong(rng, depth + 1) for _ in range(rng.randrange(4))],
                    lambda: {str(i): wrong(rng, depth + 1) for i in range(rng.randrange(4))}]
    return rng.choice(choices)()


def deep(n):
    v = []
    for _ in range(n):
        v = [v]
    return v


def wide(n):
    """A value with 2**n paths through it, in n levels of shared lists."""
    v = [0]
    for _ in range(n):
        v = [v, v]
    return v


def snapshot_like(rng):
    events = [ev(rng) for _ in range(rng.randrange(1, 40))]
    for _ in range(rng.randrange(4)):
        i = rng.randrange(len(events))
        if not isinstance(events[i], dict) or not events[i]:
            continue
        how = rng.randrange(7)
        if how == 0:
            events[i] = wrong(rng)
        elif how == 1:
            events[i][rng.choice(list(events[i]))] = wrong(rng)
        elif how == 2:
            events[i].pop(rng.choice(list(events[i])))
        elif how == 3:
            events[i]["action"] = rng.choice([deep(3000), wide(100), wrong(rng)])
        elif how == 4:
            events[i][rng.choice(["size", "addr", "stream"])] = rng.choice([deep(3000), wide(100)])
        elif how == 5:
            events[i]["device_free"] = wrong(rng)
            events[i]["action"] = "oom"
        else:
            events.append(events[i])  # the same event object twice
    snap = {"segments": [], "device_traces": [events]}
    how = rng.randrange(10)
    if how == 0:
        snap = wrong(rng)
    elif how == 1:
        snap[rng.choice(["segments", "device_traces"])] = wrong(rng)
    elif how == 2:
        snap["device_traces"] = [events, [ev(rng)]]  # two devices with events
    elif how == 3:
        snap["device_traces"] = [[], wrong(rng)]
    elif how == 4:
        snap = [{"blocks": []}]  # torch.cuda.memory_snapshot()'s list of segments
    return snap


def dumps(rng, value):
    """value pickled with a random protocol; where pickle itself cannot (a
    value nested too deep for it, or an integer too long for protocols 0
    and 1, which write it in decimal), a higher protocol or a stand-in."""
    protocol = rng.randrange(pickle.HIGHEST_PROTOCOL + 1)
    for p in (protocol, max(protocol, 2)):
        try:
            return pickle.dumps(value, protocol=p)
        except (ValueError, RecursionError):
            pass
    return pickle.dumps({"segments": [], "device_traces": [[]]}, protocol=protocol)


def mutated(rng):
    data = bytearray(dumps(rng, snapshot_like(rng)))
    for _ in range(rng.randrange(1, 6)):
        how = rng.randrange(4)
        pos = rng.randrange(len(data) + 1)
        if how == 0 and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif how == 1:
            del data[pos:]
        elif how == 2:
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        else:
            # An opcode of the format, spliced in with a plausible argument.
            op = rng.choice([b"(", b")", b"]", b"}", b"0", b"1", b"2", b"a", b"e", b"s", b"u",
                             b"t", b"\x85", b"\x86", b"\x87", b"\x94", b"q\x05", b"h\x03",
                             b"j\x01\x00\x00\x00", b"g1\n", b"p1\n", b"K\x07",
                             b"J\xff\xff\xff\x7f", b"\x8a\x08" + bytes(8), b".",
                             b"X\x05\x00\x00\x00hello", b"\x95" + bytes(8)])
            data[pos:pos] = op
    return bytes(data)


def hostile(rng):
    """A pickle that names a class or function, in any of the format's ways."""
    mod, name = rng.choice([(__name__, "canary"), (__name__, "Canary"), ("os", "system"),
                            ("builtins", "eval"), ("subprocess", "Popen"),
                            ("builtins", "getattr"), ("x" * 300, "y\nz")])
    m, n = mod.encode("utf-8", "replace"), name.encode("utf-8", "replace")
    short = lambda b: b"\x8c" + bytes([len(b) % 256]) + b[:255]
    forms = [
        b"c" + m + b"\n" + n + b"\n" + b"(S'id'\ntR.",               # GLOBAL, REDUCE
        b"\x80\x04" + short(m) + short(n) + b"\x93)R.",                 # STACK_GLOBAL
        b"(S'id'\ni" + m + b"\n" + n + b"\n.",                          # INST
        b"(c" + m + b"\n" + n + b"\nS'id'\no.",                         # OBJ
        b"\x80\x02c" + m + b"\n" + n + b"\n)\x81.",                     # NEWOBJ
        b"\x80\x04" + short(m) + short(n) + b"\x93)}\x92.",             # NEWOBJ_EX
        b"\x80\x02\x82\x01.", b"\x80\x02\x83\x01\x00.", b"\x80\x02\x84\x01\x00\x00\x00.",  # EXT1/2/4
        b"Pid\n.", b"\x80\x02X\x02\x00\x00\x00idQ.",                    # PERSID, BINPERSID
        b"}(S'a'\nK\x01u" + b"c" + m + b"\n" + n + b"\nb.",             # BUILD with a class
    ]
    body = rng.choice(forms)
    if rng.randrange(2):
        # Inside a snapshot that is otherwise fine.
        good = pickle.dumps({"segments": [], "device_traces": [[ev(rng, "alloc")]]}, protocol=0)
        body = good[:-1].rstrip(b"s") + b"(S'evil'\n" + body[:-1] + b"s."
    return body


class _TookTooLong(BaseException):
    pass


def _alarm(signum, frame):
    raise _TookTooLong()


class RandomPickles(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="devcache-pickles-")
        sys.stdout.write("# seed %d (TEST_SEED=%d repeats it), %d cases per generator\n"
                         % (SEED, SEED, CASES))
        sys.stdout.flush()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def outcome(self, data, label):
        """Load and convert data: 'refused' (by load_snapshot), 'loaded' (and
        refused by convert) or 'converted'."""
        path = os.path.join(self.tmp, "case.pickle")
        with open(path, "wb") as f:
            f.write(data)
        start = time.monotonic()
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
        try:
            return self.checked(path, data, label)
        except _TookTooLong:
            self.fail("%s took more than %.0f s; input %r" % (label, CASE_SECONDS, data[:200]))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            self.assertIsNone(called(), "%s: a pickle called a function: %r" % (label, data[:200]))
            took = time.monotonic() - start
            self.assertLess(took, CASE_SECONDS, "%s took %.1f s" % (label, took))

    def checked(self, path, data, label):
        what = "refused"
        try:
            snap = tft.load_snapshot(path)
        except tft.SnapshotError as e:
            self.assertIn(path, str(e), label)
            self.assertNotIn("\n", str(e), label)
            snap = None
        except _TookTooLong:
            raise
        except Exception as e:  # the test's point: nothing else may escape
            self.fail("%s: load_snapshot raised %s: %s; input %r"
                      % (label, type(e).__name__, str(e)[:200], data[:200]))
        if snap is not None:
            self.assertTrue(plain(snap), "%s: not plain data: %r" % (label, data[:200]))
            what = "loaded"
            out = io.StringIO()
            try:
                tft.convert(snap, out, source=path)
                what = "converted"
            except tft.SnapshotError as e:
                self.assertNotIn("\n", str(e), label)
                self.assertLess(len(str(e)), 4000, label)
            except _TookTooLong:
                raise
            except Exception as e:
                self.fail("%s: convert raised %s: %s; input %r"
                          % (label, type(e).__name__, str(e)[:200], data[:200]))
        return what

    def run_generator(self, name, make):
        rng = random.Random("%d %s" % (SEED, name))
        counts = {}
        for i in range(CASES):
            data = make(rng)
            what = self.outcome(data, "%s case %d (seed %d)" % (name, i, SEED))
            counts[what] = counts.get(what, 0) + 1
        sys.stdout.write("# %s: %s\n" % (name, ", ".join(
            "%d %s" % (n, w) for w, n in sorted(counts.items()))))
        sys.stdout.flush()
        return counts

    def test_snapshot_like_values(self):
        counts = self.run_generator("values", lambda r: dumps(r, snapshot_like(r)))
        # The generator reaches both ends: some convert, some are refused.
        self.assertGreater(counts.get("converted", 0), 0)
        self.assertGreater(counts.get("loaded", 0), 0)

    def test_mutated_pickles(self):
        counts = self.run_generator("mutated", mutated)
        self.assertGreater(counts.get("refused", 0), 0)

    def test_hostile_pickles(self):
        counts = self.run_generator("hostile", hostile)
        # Every one names a class or function: none may load.
        self.assertEqual(counts, {"refused": CASES})

    def test_values_that_defeat_repr(self):
        # Found by this test: an error message quoted the value with repr(),
        # which never ended for a value shared 2**100 times, overflowed the
        # stack for one nested 3000 deep, and raised ValueError for an
        # integer of more than 4300 digits.
        cases = [
            ({"action": wide(100)}, "unknown action [["),
            ({"action": deep(3000)}, "unknown action [[[["),
            ({"action": "alloc", "addr": 1, "size": wide(100), "stream": 0}, "size [["),
            ({"action": "alloc", "addr": 1, "size": -(10 ** 5000), "stream": 0},
             "size <a 16610-bit negative integer> is negative"),
            ({"action": "alloc", "addr": 1, "size": 1 << 20000, "stream": 0},
             "size <a 20001-bit positive integer> is too large"),
        ]
        for event, message in cases:
            snap = {"segments": [], "device_traces": [[event]]}
            with self.assertRaises(tft.SnapshotError) as cm:
                tft.convert(snap, io.StringIO())
            self.assertIn(message, str(cm.exception))
        # A huge free memory figure or stream handle goes into the trace's
        # comments cut short.
        snap = {"segments": [], "device_traces": [[
            {"action": "oom", "size": 512, "device_free": 10 ** 5000, "stream": -(1 << 9000)}]]}
        out = io.StringIO()
        tft.convert(snap, out)
        self.assertIn("device_free=<a 16610-bit positive integer>", out.getvalue())
        self.assertIn("PyTorch stream <a 9001-bit negative integer>", out.getvalue())

    def test_costs_bounded_by_the_size(self):
        # Found by this test: CPython's unpickler zero-fills a memo twice the
        # largest index a PUT names (LONG_BINPUT 2**30: 16 GiB, a minute), and
        # a FRAME or a length may claim more than the file holds.
        cases = {
            "long-binput": (b"\x80\x02]r\x00\x00\x00\x40.", "a damaged pickle (byte 3: memo index 1073741824"),
            "put": (b"(lp99999999999999999999\n.", "a damaged pickle (byte 2: memo index"),
            "binput": (b"]q\x07.", "a damaged pickle (byte 1: memo index 7"),
            "frame": (b"\x80\x04\x95\xff\xff\xff\xff\x00\x00\x00\x00N.",
                      "cut short (byte 2: 4294967295 bytes announced, 2 left"),
            "binunicode8": (b"\x80\x04\x8d\x00\x00\x00\x00\x01\x00\x00\x00ab.",
                            "cut short (byte 2: 4294967296 bytes announced, 3 left"),
            "binint-cut": (b"\x80\x02J\x01\x02", "cut short (the file ends at byte 5)"),
            "line-cut": (b"(lp0", "cut short (the file ends at byte 4)"),
        }
        for name, (data, message) in cases.items():
            path = os.path.join(self.tmp, name)
            with open(path, "wb") as f:
                f.write(data)
            with self.assertRaises(tft.SnapshotError, msg=name) as cm:
                tft.load_snapshot(path)
            self.assertIn(message, str(cm.exception), name)
        # Indices a pickler writes pass: every protocol, memo in use.
        shared = [1]
        value = {"segments": [], "device_traces": [[shared, shared] * 300]}
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            path = os.path.join(self.tmp, "shared%d" % protocol)
            with open(path, "wb") as f:
                pickle.dump(value, f, protocol=protocol)
            self.assertEqual(tft.load_snapshot(path), value)

    def test_the_canary_works(self):
        # What the hostile generator writes would call the canary if loaded
        # by pickle itself: so a refusal above is the unpickler's doing.
        data = b"c" + __name__.encode() + b"\ncanary\n(S'id'\ntR."
        try:
            self.assertEqual(pickle.loads(data), "called")
            self.assertEqual(called(), "('id',)")
        finally:
            os.environ.pop(CANARY, None)


if __name__ == "__main__":
    unittest.main()
