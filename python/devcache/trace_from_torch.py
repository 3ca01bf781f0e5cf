# SPDX-License-Identifier: LGPL-2.1-or-later
"""Convert a PyTorch CUDA memory snapshot into a devcache allocation trace.

Usage::

    python3 -m devcache.trace_from_torch [--device N] [-o TRACE] SNAPSHOT.pickle

The result is a trace in the devcache-trace(5) format, which
``devcache replay`` plays through the caching allocator of libdevcache with
any tunables, to answer questions such as "would max_split_size_mb:512 have
avoided my out-of-memory error?"::

    python3 -c 'import torch
    torch.cuda.memory._record_memory_history()
    ...  # the program that ran out of memory
    torch.cuda.memory._dump_snapshot("snap.pickle")'
    python3 -m devcache.trace_from_torch snap.pickle > my.trace
    devcache replay -o max_split_size_mb:512 my.trace

The snapshot
------------
``torch.cuda.memory._dump_snapshot()`` pickles a dict whose
``"device_traces"`` holds, for each CUDA device, the list of events the
caching allocator recorded while ``_record_memory_history()`` was on.  Each
event is a dict with an ``"action"``, the block's ``"addr"``, its ``"size"``
and ``"stream"`` (an integer handle, 0 for the default stream), and more keys
that are not needed here (``"frames"``, ``"time_us"``).  The same layout comes
from PyTorch 2.0 and later.  A snapshot taken without recording the history
has empty traces and cannot be converted.

How the events become a trace
-----------------------------
* ``alloc`` becomes ``+ ID SIZE [STREAM]``.  Every allocation gets a new ID,
  counting from 1, even when the allocator hands out an address again; the
  size is the one the program asked for, before rounding.  Stream handles
  become the small indexes the format wants: 0 stays 0 (the default stream),
  the others are numbered 1, 2, ... in the order they first appear, and a
  comment at the top of the trace lists them.

* ``free_completed`` becomes ``- ID``.  PyTorch records ``free_requested``
  when the program lets go of a block, and ``free_completed`` when the
  allocator can hand the block out again; the two differ when the block was
  used on another stream (``record_stream``), and the block is held until
  the work on that stream is done.  The completed free is the moment the
  memory goes back to the allocator, which is what a replay measures.  When
  an allocation has a ``free_requested`` but no ``free_completed`` (the
  history was recorded with ``skip_actions=["free_completed"]``, or ends
  while the free is pending), the free is put where it was requested.

* ``oom`` (an allocation that failed) becomes a comment with the size asked
  for and the memory the driver still reported free, followed by that
  allocation, tried again and freed at once: the replay then counts an OOM
  exactly where the program had one, unless the tunables replayed avoid it.
  ``--no-oom-attempt`` leaves the comment alone.

* ``snapshot`` becomes a comment.  Segment events (``segment_alloc``,
  ``segment_free``, ``segment_map``, ``segment_unmap``) and ``annotate``
  are what the allocator did, not what the program asked for, and are
  left out: the replay makes its own.  Any other action is an error, so that
  a new layout is noticed rather than converted wrongly.

* The history may start after some blocks were allocated (it is a ring
  buffer of ``max_entries`` events, or was turned on late): frees of
  addresses never allocated within it are skipped, and counted on standard
  error.  Blocks still allocated at the end are left so; the replay frees
  them at the end of the file.  An address allocated again with no free in
  between (events skipped when recording) gets a free just before.

The trace opens with comment lines naming the snapshot, the device and the
counts of events.

``devcache replay`` runs on the host unless given ``--device``, and the
host's memory is not the GPU's: to see whether an OOM goes away, replay on
the device the program ran on, or cap the memory with the memory_fraction
tunable.

Options
-------
``--device N``
    Convert the events of CUDA device N (also written ``cuda:N``).  The
    default is the one device with events; when several have some, the
    error lists them.
``-o FILE``, ``--output FILE``
    Write the trace to FILE rather than to standard output.
``--no-oom-attempt``
    Do not repeat the allocations that failed; only mark them.

Safety
------
A pickle can name any Python class or function to call while it is read,
so reading an untrusted pickle with ``pickle.load()`` can run any code.  A
memory snapshot holds only dicts, lists, tuples, strings, numbers, booleans
and None, so this module reads it with an unpickler that refuses every
class or function reference, and refuses the file with a message naming it.
Before that, one pass over the file's opcodes refuses a pickle whose memo
indices or lengths would make the unpickler allocate more than the file's
size (CPython's unpickler sizes its memo from the largest index a pickle
names: ten bytes could otherwise cost gigabytes), and one that makes more
than ``MAX_OBJECTS`` objects (100 million) or nests them deeper than
``MAX_DEPTH`` (1000 levels; a snapshot has a few): CPython hashes a tuple
used as a dict key by recursing into it, and a pickle of 150 KB could
crash the interpreter that way.  Values that would make a
message long, deep or slow to write (integers of thousands of digits,
lists nested thousands deep or shared many times over) are quoted cut short.

Exit status
-----------
0 on success; 1 when the snapshot cannot be read, is not a memory
snapshot, is malformed, has no allocation history or no single device to
convert, or the trace cannot be written; 2 for a bad command line.  Every
error is one line on standard error naming the file and the fault.

Python use
----------
``load_snapshot(path, max_depth=MAX_DEPTH, max_objects=MAX_OBJECTS)``
reads a snapshot safely and returns it;
``convert(snapshot, out, device=None)`` writes the trace of one device to
the text file ``out`` and returns a dict of counts.  Both raise
``SnapshotError`` (a ``ValueError``) for a malformed snapshot;
``load_snapshot`` raises ``OSError`` when the file cannot be read.

See devcache-trace(5) and devcache(1).
"""

import argparse
import io
import os
import pickle
import reprlib
import stat
import sys

from ._devcache import _check_pickle

__all__ = ["SnapshotError", "load_snapshot", "convert", "main", "MAX_DEPTH", "MAX_OBJECTS"]

PROG = "devcache.trace_from_torch"

# The bounds of load_snapshot(): objects nested at most this deep (a
# snapshot nests a few levels), and at most this many of them.
MAX_DEPTH = 1000
MAX_OBJECTS = 100000000

# The largest stream index of the trace format.
_STREAM_MAX = 65535
# A trace line is at most 1024 bytes with its newline; comments that quote
# the input are cut well short of that.
_QUOTE_MAX = 900

_ALLOC = "alloc"
_FREE_REQUESTED = "free_requested"
_FREE_COMPLETED = "free_completed"
_OOM = "oom"
_U64_MAX = 0xFFFFFFFFFFFFFFFF
_SNAPSHOT = "snapshot"
# What the allocator did on its own account, and metadata: not replayed.
_SKIPPED_ACTIONS = ("segment_alloc", "segment_free", "segment_map", "segment_unmap", "annotate")
_ACTIONS = (_ALLOC, _FREE_REQUESTED, _FREE_COMPLETED, _OOM, _SNAPSHOT) + _SKIPPED_ACTIONS


class SnapshotError(ValueError):
    """The snapshot is not one that can be converted; the message says why."""


# ---- reading ------------------------------------------------------------------


class _Refused(pickle.UnpicklingError):
    """A pickle that names a class or function, refused."""


class _PlainDataUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings, numbers, booleans and None only.

    Those need no class lookup; anything that does (a class, a function to
    call, such as os.system) is refused before it is imported.
    """

    def find_class(self, module, name):
        raise _Refused(
            "refused to load %s.%s: a memory snapshot names no class or function, "
            "and loading one could run any code" % (_clip(module, 100), _clip(name, 100))
        )

    def persistent_load(self, pid):
        raise _Refused(
            "refused a persistent ID: a memory snapshot holds plain data only"
        )


def _open_regular(path):
    """The file at path opened for reading, or SnapshotError at once when it
    is not a regular file: a FIFO is opened without waiting for a writer,
    and a device or a directory is refused before it is read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SnapshotError("%s: not a regular file" % _display_path(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def load_snapshot(path, max_depth=MAX_DEPTH, max_objects=MAX_OBJECTS):
    """Read the pickled snapshot at path, refusing any class reference.

    Returns the snapshot (normally a dict).  Raises OSError when the file
    cannot be read and SnapshotError when it is not a pickle of plain data,
    or when it makes more than max_objects objects or nests them deeper
    than max_depth; the message of SnapshotError names the file.
    """
    with _open_regular(path) as f:
        data = f.read()
    flaw = _check_pickle(data, max_depth, max_objects)
    if flaw is not None:
        kind, why = flaw
        if kind == "deep":
            raise SnapshotError(
                "%s: not a memory snapshot: %s, where a snapshot nests a few levels"
                % (_display_path(path), why)
            )
        if kind == "large":
            raise SnapshotError(
                "%s: refused: the pickle makes %s, the most this converter reads"
                % (_display_path(path), why)
            )
        if kind == "cut":
            raise SnapshotError(
                "%s: not a memory snapshot: the pickle is cut short (%s)" % (_display_path(path), why)
            )
        raise SnapshotError(
            "%s: not a memory snapshot: a damaged pickle (%s)" % (_display_path(path), why)
        )
    with io.BytesIO(data) as f:
        del data
        try:
            return _PlainDataUnpickler(f).load()
        except OSError:
            raise
        except EOFError:
            raise SnapshotError(
                "%s: not a memory snapshot: the pickle is empty or cut short"
                % _display_path(path)
            ) from None
        except _Refused as e:
            raise SnapshotError("%s: %s" % (_display_path(path), _one_line(e))) from None
        except pickle.UnpicklingError as e:
            raise SnapshotError(
                "%s: not a memory snapshot: not a pickle, or a damaged one (%s)"
                % (_display_path(path), _one_line(e))
            ) from None
        except MemoryError:
            raise SnapshotError(
                "%s: out of memory reading the pickle" % _display_path(path)
            ) from None
        except Exception as e:  # a damaged pickle can fail in many ways
            raise SnapshotError(
                "%s: not a memory snapshot: not a pickle, or a damaged one (%s: %s)"
                % (_display_path(path), type(e).__name__, _one_line(e))
            ) from None


# ---- checking -------------------------------------------------------------------


def _clip(text, limit=60):
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."


def _one_line(value, limit=200):
    """A message on one line; a foreign one (from pickle, the OS) cut short."""
    text = " ".join(str(value).split())
    return _clip(text, limit) if limit else text


class _ShortRepr(reprlib.Repr):
    """repr() that stops early: a snapshot's values may be nested thousands
    deep, shared so that a full repr would be exponentially long, or
    integers too long for str()."""

    def __init__(self):
        super().__init__()
        self.maxlevel = 3
        self.maxdict = self.maxlist = self.maxtuple = self.maxset = 4
        self.maxfrozenset = self.maxdeque = self.maxarray = 4
        self.maxstring = self.maxother = 60

    def repr_int(self, x, level):
        if x.bit_length() > 128:
            return "<a %d-bit %s integer>" % (x.bit_length(), "negative" if x < 0 else "positive")
        return repr(x)


_SHORT_REPR = _ShortRepr()


def _show(value):
    """A value of the input, fit to quote in a one-line message."""
    return _clip(_SHORT_REPR.repr(value), 60)


def _display_path(path):
    return _comment_safe(os.fsdecode(path))


def _comment_safe(text):
    """text without control characters or undecodable bytes, cut to fit a line."""
    out = "".join(
        "?" if ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) <= 0xDFFF else c for c in text
    )
    raw = out.encode("utf-8")
    if len(raw) > _QUOTE_MAX:
        out = raw[:_QUOTE_MAX].decode("utf-8", "ignore") + "..."
    return out


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _device_traces(snapshot):
    if isinstance(snapshot, list) and all(
        isinstance(seg, dict) and "blocks" in seg for seg in snapshot
    ):
        raise SnapshotError(
            "a list of segments without an allocation history (torch.cuda.memory_snapshot()); "
            "record one with torch.cuda.memory._record_memory_history() and "
            "torch.cuda.memory._dump_snapshot()"
        )
    if not isinstance(snapshot, dict):
        raise SnapshotError(
            "not a memory snapshot: the pickle holds a value of type %s, not a dict"
            % type(snapshot).__name__
        )
    for key in ("segments", "device_traces"):
        if key not in snapshot:
            raise SnapshotError("not a memory snapshot: no %r key" % key)
    if not isinstance(snapshot["segments"], list):
        raise SnapshotError(
            "'segments' is of type %s, not a list" % type(snapshot["segments"]).__name__
        )
    traces = snapshot["device_traces"]
    if not isinstance(traces, list):
        raise SnapshotError("'device_traces' is of type %s, not a list" % type(traces).__name__)
    for d, events in enumerate(traces):
        if not isinstance(events, list):
            raise SnapshotError(
                "device_traces[%d] is of type %s, not a list of events" % (d, type(events).__name__)
            )
    return traces


def _parse_device(device):
    """An int, "N" or "cuda:N" as a device index."""
    if _is_int(device):
        return device
    text = str(device)
    if text.startswith("cuda:"):
        text = text[5:]
    if text.isdigit() and text.isascii():
        return int(text)
    raise SnapshotError("invalid device %s (expected N or cuda:N)" % _show(device))


def _choose_device(traces, device):
    with_events = [d for d, events in enumerate(traces) if events]
    if not with_events:
        raise SnapshotError(
            "no allocation history: the snapshot was taken without recording it; call "
            "torch.cuda.memory._record_memory_history() before the program allocates"
        )
    if device is None:
        if len(with_events) > 1:
            raise SnapshotError(
                "devices %s have events: choose one with --device"
                % ", ".join(str(d) for d in with_events)
            )
        return with_events[0]
    d = _parse_device(device)
    if d >= len(traces) or not traces[d]:
        raise SnapshotError(
            "device %d has no events; device%s with events: %s"
            % (d, "s" if len(with_events) > 1 else "", ", ".join(str(x) for x in with_events))
        )
    return d


# ---- converting ---------------------------------------------------------------


class _Block:
    __slots__ = ("id", "request_line")

    def __init__(self, block_id):
        self.id = block_id
        self.request_line = None  # the index of the placeholder of its free_requested


class _Converter:
    """The events of one device, in order, to trace lines.

    lines holds the trace as it is built.  A free_requested puts a None
    placeholder there; it becomes the free if no free_completed comes for
    that block, and is dropped otherwise.
    """

    def __init__(self, device, events, oom_attempt):
        self.device = device
        self.events = events
        self.oom_attempt = oom_attempt
        self.lines = []
        self.live = {}  # address -> _Block
        self.orphans = set()  # addresses freed_requested with no alloc seen
        self.zero = set()  # addresses of 0-byte allocations, not traced
        self.streams = {0: 0}  # PyTorch stream handle -> index
        self.stream_order = []  # the handles other than 0, by index
        self.default_used = False
        self.next_id = 1
        # Reserved memory relative to where the history starts (segment
        # events), and at each OOM the driver's free memory with it: the
        # device's memory is the start's reserved + reserved + free there.
        self.reserved = 0
        self.oom_capacity = []  # reserved (relative) + device_free at each OOM
        self.stats = {
            "device": device,
            "events": len(events),
            "actions": dict.fromkeys(_ACTIONS, 0),
            "allocations": 0,
            "frees": 0,
            "frees_at_request": 0,
            "frees_inferred": 0,
            "unknown_frees": 0,
            "zero_size": 0,
            "live_at_end": 0,
            "ooms": 0,
            "oom_attempts": 0,
            "streams": 0,
        }

    # -- fields

    def _where(self, i, action):
        return "device_traces[%d][%d] (%s)" % (self.device, i, action)

    def _int(self, event, key, i, action, required=True):
        if key not in event:
            if required:
                raise SnapshotError("%s: no %r key" % (self._where(i, action), key))
            return None
        value = event[key]
        if not _is_int(value):
            raise SnapshotError(
                "%s: %s %s is not an integer" % (self._where(i, action), key, _show(value))
            )
        return value

    def _size(self, event, i, action, required=True):
        size = self._int(event, "size", i, action, required)
        if size is not None and size < 0:
            raise SnapshotError("%s: size %s is negative" % (self._where(i, action), _show(size)))
        if size is not None and size > 0xFFFFFFFFFFFFFFFF:
            raise SnapshotError("%s: size %s is too large" % (self._where(i, action), _show(size)))
        return size

    def _stream(self, event, i, action):
        handle = self._int(event, "stream", i, action)
        index = self.streams.get(handle)
        if index is None:
            index = len(self.stream_order) + 1
            if index > _STREAM_MAX:
                raise SnapshotError(
                    "%s: more than %d streams, the most a trace can name"
                    % (self._where(i, action), _STREAM_MAX)
                )
            self.streams[handle] = index
            self.stream_order.append(handle)
        return index

    # -- events

    def _new_block(self, size, stream):
        block = _Block(self.next_id)
        self.next_id += 1
        if stream:
            self.lines.append("+ %d %d %d" % (block.id, size, stream))
        else:
            self.lines.append("+ %d %d" % (block.id, size))
            self.default_used = True
        self.stats["allocations"] += 1
        return block

    def _free(self, block, at=None):
        if at is None:
            self.lines.append("- %d" % block.id)
        else:
            self.lines[at] = "- %d" % block.id
        self.stats["frees"] += 1

    def _alloc(self, event, i):
        addr = self._int(event, "addr", i, _ALLOC)
        size = self._size(event, i, _ALLOC)
        stream = self._stream(event, i, _ALLOC)
        self.orphans.discard(addr)
        old = self.live.pop(addr, None)
        if old is not None:
            # No free_completed came for the block that had this address.
            if old.request_line is not None:
                self._free(old, old.request_line)
                self.stats["frees_at_request"] += 1
            else:
                self._free(old)
                self.stats["frees_inferred"] += 1
        if size == 0:
            # Not an allocation to the format (nor to PyTorch, which records none).
            self.zero.add(addr)
            self.stats["zero_size"] += 1
            return
        self.zero.discard(addr)
        self.live[addr] = self._new_block(size, stream)

    def _free_requested(self, event, i):
        addr = self._int(event, "addr", i, _FREE_REQUESTED)
        self._size(event, i, _FREE_REQUESTED, required=False)
        block = self.live.get(addr)
        if block is not None:
            if block.request_line is None:
                block.request_line = len(self.lines)
                self.lines.append(None)
        elif addr in self.zero:
            pass
        elif addr not in self.orphans:
            self.orphans.add(addr)
            self.stats["unknown_frees"] += 1

    def _free_completed(self, event, i):
        addr = self._int(event, "addr", i, _FREE_COMPLETED)
        self._size(event, i, _FREE_COMPLETED, required=False)
        block = self.live.pop(addr, None)
        if block is not None:
            self._free(block)
        elif addr in self.zero:
            self.zero.discard(addr)
        elif addr in self.orphans:
            self.orphans.discard(addr)  # counted at its free_requested
        else:
            self.stats["unknown_frees"] += 1

    def _segment(self, event, i, action):
        size = event.get("size")
        if not _is_int(size) or not 0 <= size <= _U64_MAX:
            return  # not replayed: a bad size only loses the device's memory
        if action in ("segment_alloc", "segment_map"):
            self.reserved += size
        else:
            self.reserved -= size

    def device_memory(self, segments):
        """The memory the allocator of the traced device could have: at the
        first OOM, what was reserved then plus what the driver still had
        free; None where no OOM says the driver's free memory.  segments is
        the snapshot's list, the state at its end, which fixes what was
        reserved before the history starts."""
        if not self.oom_capacity:
            return None
        end = 0
        for seg in segments:
            if isinstance(seg, dict) and seg.get("device", self.device) == self.device:
                total = seg.get("total_size")
                if _is_int(total) and 0 < total <= _U64_MAX:
                    end += total
        base = max(end - self.reserved, 0)
        memory = base + self.oom_capacity[0]
        return memory if 0 < memory <= _U64_MAX else None

    def _oom(self, event, i):
        size = self._size(event, i, _OOM)
        free = event.get("device_free")
        if _is_int(free) and 0 <= free <= _U64_MAX:
            self.oom_capacity.append(self.reserved + free)
        self.stats["ooms"] += 1
        self.lines.append(
            "# oom: PyTorch could not allocate %d bytes; device_free=%s"
            % (size, _show(free) if _is_int(free) else "unknown")
        )
        if self.oom_attempt and size > 0:
            block = self._new_block(size, self._stream(event, i, _OOM))
            self._free(block)
            self.stats["oom_attempts"] += 1

    def run(self):
        for i, event in enumerate(self.events):
            if not isinstance(event, dict):
                raise SnapshotError(
                    "device_traces[%d][%d] is of type %s, not an event dict"
                    % (self.device, i, type(event).__name__)
                )
            action = event.get("action")
            if action not in _ACTIONS:
                if "action" not in event:
                    raise SnapshotError("device_traces[%d][%d]: no 'action' key" % (self.device, i))
                raise SnapshotError(
                    "device_traces[%d][%d]: unknown action %s (known: %s)"
                    % (self.device, i, _show(action), ", ".join(_ACTIONS))
                )
            self.stats["actions"][action] += 1
            if action == _ALLOC:
                self._alloc(event, i)
            elif action == _FREE_REQUESTED:
                self._free_requested(event, i)
            elif action == _FREE_COMPLETED:
                self._free_completed(event, i)
            elif action == _OOM:
                self._oom(event, i)
            elif action == _SNAPSHOT:
                self.lines.append("# snapshot: PyTorch took a memory snapshot here")
            elif action in ("segment_alloc", "segment_free", "segment_map", "segment_unmap"):
                self._segment(event, i, action)
        # Frees requested that never completed happen where requested.
        for block in self.live.values():
            if block.request_line is not None:
                self._free(block, block.request_line)
                self.stats["frees_at_request"] += 1
            else:
                self.stats["live_at_end"] += 1
        self.stats["streams"] = len(self.stream_order) + (1 if self.default_used else 0)
        return self.stats

    def header(self, source, segments=()):
        s, a = self.stats, self.stats["actions"]
        segment = sum(a[x] for x in _SKIPPED_ACTIONS if x != "annotate")
        head = ["# PyTorch memory snapshot converted by %s" % PROG]
        if source is not None:
            head.append("# source: %s" % _comment_safe(os.fsdecode(source)))
        head += [
            "# device: cuda:%d" % self.device,
        ]
        memory = self.device_memory(segments)
        if memory is not None:
            s["device_memory"] = memory
            head.append("# device_memory: %d" % memory)
            head.append(
                "# (what the allocator could have: reserved plus the driver's free memory "
                "at the first OOM)"
            )
        head += [
            "# events: %d (alloc %d, free_requested %d, free_completed %d, segment %d, "
            "oom %d, snapshot %d, annotate %d)"
            % (s["events"], a[_ALLOC], a[_FREE_REQUESTED], a[_FREE_COMPLETED], segment,
               a[_OOM], a[_SNAPSHOT], a["annotate"]),
            "# allocations: %d (%d of them failed requests tried again; "
            "%d still allocated at the end)"
            % (s["allocations"], s["oom_attempts"], s["live_at_end"]),
            "# frees: %d (%d where requested, never completed; %d inferred from a reused address)"
            % (s["frees"], s["frees_at_request"], s["frees_inferred"]),
            "# frees skipped (blocks allocated before the history starts): %d" % s["unknown_frees"],
        ]
        for index, handle in enumerate(self.stream_order, 1):
            head.append(
                "# stream %d: PyTorch stream %s"
                % (index, hex(handle) if 0 <= handle < 1 << 64 else _show(handle))
            )
        return head


def convert(snapshot, out, device=None, *, source=None, oom_attempt=True):
    """Write the trace of one device of snapshot to the text file out.

    snapshot is what load_snapshot() returns (or torch.cuda.memory._snapshot()
    gives); device is a CUDA device index (or "cuda:N"), by default the one
    device with events.  source, if given, is named in the header.  With
    oom_attempt false, a recorded OOM is only a comment, not an allocation
    tried again.

    Nothing is written unless the whole snapshot converts.  Returns a dict
    of counts: device, events, actions (per action), allocations, frees,
    frees_at_request, frees_inferred, unknown_frees, zero_size, live_at_end,
    ooms, oom_attempts, streams, lines, and device_memory where an OOM
    recorded the driver's free memory (written as "# device_memory:").  Raises SnapshotError for a malformed snapshot.
    """
    traces = _device_traces(snapshot)
    d = _choose_device(traces, device)
    conv = _Converter(d, traces[d], oom_attempt)
    stats = conv.run()
    lines = conv.header(source, snapshot.get("segments", ())) + [
        line for line in conv.lines if line is not None
    ]
    out.write("\n".join(lines) + "\n")
    stats["lines"] = len(lines)
    return stats


# ---- the command ------------------------------------------------------------------


def _arguments(argv):
    parser = argparse.ArgumentParser(
        prog="python3 -m " + PROG,
        description="Convert a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot()) "
        "into a devcache-trace(5) allocation trace for `devcache replay`.",
        epilog="Exit status: 0 success, 1 an unreadable or malformed snapshot, 2 a bad "
        "command line.  See devcache-trace(5) and `pydoc devcache.trace_from_torch`.",
    )
    parser.add_argument("snapshot", metavar="SNAPSHOT", help="the pickled memory snapshot")
    parser.add_argument(
        "--device", metavar="N",
        help="convert the events of CUDA device N (default: the one device with events)",
    )
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write the trace to FILE (default: standard output)"
    )
    parser.add_argument(
        "--no-oom-attempt", dest="oom_attempt", action="store_false",
        help="mark the allocations that failed with a comment only, without trying them again",
    )
    return parser.parse_args(argv)


def _error(path, message):
    where = "%s: " % _display_path(path) if path is not None else ""
    sys.stderr.write("%s: %s%s\n" % (PROG, where, message))


class _Lines:
    """Collects what convert() writes, so that nothing is written on error."""

    def __init__(self):
        self.parts = []

    def write(self, text):
        self.parts.append(text)


def _write(path, parts):
    if path is None:
        sys.stdout.writelines(parts)
        sys.stdout.flush()
        return
    try:
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.writelines(parts)
    except OSError:
        try:
            os.unlink(path)  # no half trace left behind
        except OSError:
            pass
        raise


def main(argv=None):
    """The command line; returns the exit status."""
    args = _arguments(argv)
    path = args.snapshot
    try:
        snapshot = load_snapshot(path)
    except OSError as e:
        _error(path, e.strerror or _one_line(e))
        return 1
    except SnapshotError as e:
        _error(None, _one_line(e, None))
        return 1
    collected = _Lines()
    try:
        stats = convert(snapshot, collected, args.device, source=path, oom_attempt=args.oom_attempt)
    except SnapshotError as e:
        _error(path, _one_line(e, None))
        return 1
    del snapshot
    try:
        _write(args.output, collected.parts)
    except BrokenPipeError:
        # The reader went away (| head): not worth a message.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 1
    except OSError as e:
        _error(args.output, e.strerror or _one_line(e))
        return 1
    if stats["unknown_frees"]:
        _error(path, "skipped %d frees of blocks allocated before the history starts"
               % stats["unknown_frees"])
    if stats["frees_inferred"]:
        _error(path, "%d blocks were allocated again with no free recorded; freed just before"
               % stats["frees_inferred"])
    if stats["zero_size"]:
        _error(path, "skipped %d allocations of 0 bytes" % stats["zero_size"])
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
