# SPDX-License-Identifier: LGPL-2.1-or-later
"""Tests that the devcache package survives misuse: closed contexts, released models, bad arguments and files, threads, re-entry.

Run: python3 tests/python/taprun.py tests/python/test_misuse.py, with
PYTHONPATH naming the folder that holds the devcache package.

Each scenario is a function of a scratch folder that raises
AssertionError when the package misbehaves.  It runs first in a child
interpreter (a crash or a hang there fails the test instead of killing
the runner), and then, if the child came through, in this process too.
Scenarios that hang today run in the child only.
"""
import gc
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import unittest

import devcache
import modelfiles as mf

try:
    import numpy
except ImportError:
    numpy = None

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_OPTIONS, NO_FAKE = mf.fake_cuda_options("staging_buffer_size:64K")
CHILD_TIMEOUT = 60

RAW = {"w": mf.pattern("w", 3000), "v": mf.pattern("v", 16)}


def check(cond, what="check failed"):
    """assert that also holds under python -O."""
    if not cond:
        raise AssertionError(what)


def raises(exc, fn, *args, **kw):
    """fn(*args, **kw) raises exc; returns the exception."""
    try:
        fn(*args, **kw)
    except exc as e:
        return e
    except BaseException as e:
        raise AssertionError("%s raised %r, not %s" % (getattr(fn, "__name__", fn), e,
                                                       exc)) from e
    raise AssertionError("%s did not raise %s" % (getattr(fn, "__name__", fn), exc))


def open_ctx(options=None):
    return devcache.open(mf.isolated(options), config_files=False, environment=False)


def model_file(d, name="model.safetensors"):
    return mf.write_safetensors(os.path.join(d, name),
                                [("w", ("U8", (3000,), RAW["w"])), ("v", ("U8", (16,), RAW["v"]))],
                                {"format": "pt"})


# ---- the scenarios -----------------------------------------------------------------------


def closed_context(d):
    p = model_file(d)
    ctx = open_ctx()
    host = ctx.device("host")
    ctx.close()
    check(ctx.closed)
    for fn in (lambda: ctx.devices, lambda: ctx.backends, lambda: ctx.load(p),
               lambda: ctx.device("host"), ctx.config, ctx.cache_stats, ctx.cache_summary,
               ctx.evict_all, lambda: host.alloc(10), lambda: host.free(1), host.stats,
               host.host_stats, host.summary, host.snapshot, host.empty_cache,
               host.reset_peak, host.reset_accumulated, lambda: host.info, ctx.__enter__):
        raises(ValueError, fn)
    check(host.id == "host" and host.context is ctx)
    ctx.close()  # twice: harmless


def model_outlives_close(d):
    p = model_file(d)
    ctx = open_ctx()
    m = ctx.load(p)
    view = m["w"]
    arr = numpy.asarray(m["v"]) if numpy is not None else None
    ctx.close()
    check(ctx.closed)
    # The views still read the model's bytes: the real close waits for them.
    check(view.tobytes() == RAW["w"])
    check(memoryview(view).tobytes() == RAW["w"])
    if arr is not None:
        check(arr.tobytes() == RAW["v"])
    check(mf.mapped(p), "the model was unmapped under its views")
    # The model itself refuses new work, as everything of a closed context does.
    raises(ValueError, m.__getitem__, "v")
    raises(ValueError, getattr, m, "info")
    raises(ValueError, m.keys)
    raises(ValueError, len, m)
    check(m.path == p)
    raises(ValueError, ctx.load, p)
    del m, view, arr
    gc.collect()
    check(not mf.mapped(p), "the context was not closed when its last model went")


def close_twice_and_dealloc(d):
    p = model_file(d)
    for _ in range(3):
        ctx = open_ctx()
        ctx.close()
        ctx.close()
        del ctx
    # A context never closed is closed when it goes.
    ctx = open_ctx()
    m = ctx.load(p)
    t = m["w"]
    del ctx, m
    gc.collect()
    check(t.tobytes() == RAW["w"])
    ctx = t.model.device.context
    check(not ctx.closed)
    del t, ctx
    gc.collect()
    check(not mf.mapped(p))
    # A tensor whose context, model and device were all temporaries.
    t = open_ctx().load(p)["v"]
    gc.collect()
    check(t.tobytes() == RAW["v"])
    # A context made but never initialised.
    c = devcache.Context.__new__(devcache.Context)
    check(c.closed)
    raises(ValueError, getattr, c, "devices")
    raises(ValueError, c.load, p)
    c.close()
    del c


def released_model(d):
    p = model_file(d)
    with open_ctx() as ctx:
        m = ctx.load(p)
        view = m["w"]
        m.release()
        m.release()  # twice: harmless
        check(m.released)
        for fn in (lambda: m["v"], lambda: m.info, m.keys, lambda: len(m), lambda: iter(m),
                   lambda: "v" in m, lambda: m.format, lambda: m.shards, m.make_resident,
                   m.move_to_host, m.__enter__):
            raises(ValueError, fn)
        check(view.tobytes() == RAW["w"])
        check(bytes(memoryview(view)) == RAW["w"])
        check(m.views == 1)
        check(m.path == p and m.result["hit"] is False)
        check(ctx.cache_stats()["locked_models"] == 1)
        del view
        check(ctx.cache_stats()["locked_models"] == 0)
        with ctx.load(p) as m2:
            pass
        raises(ValueError, m2.__getitem__, "w")


def bad_keys(d):
    p = model_file(d)
    with open_ctx() as ctx, ctx.load(p) as m:
        e = raises(KeyError, m.__getitem__, "missing")
        check(e.args == ("missing",), repr(e.args))
        raises(TypeError, m.__getitem__, 3)
        raises(TypeError, m.__getitem__, b"w")
        raises(TypeError, m.__getitem__, None)
        check(3 not in m and None not in m)
        # A name that cannot be UTF-8 is in no file.
        raises(KeyError, m.__getitem__, "\ud800")
        check("\ud800" not in m)
        raises(KeyError, m.__getitem__, "")
        check(m.views == 0)


def names_with_nul(d):
    # C strings end at a NUL: "w\0junk" must not be taken for "w", nor
    # "host\0junk" for the host device.
    p = model_file(d)
    with open_ctx() as ctx, ctx.load(p) as m:
        check("w\0junk" not in m, "'w\\0junk' in model")
        raises((KeyError, ValueError), m.__getitem__, "w\0junk")
        raises((devcache.NoDeviceError, ValueError), ctx.device, "host\0junk")
        raises(ValueError, ctx.load, p + "\0junk")


def fifo(d):
    # A FIFO given as a model is refused at once, not waited on for a writer.
    path = os.path.join(d, "fifo.safetensors")
    os.mkfifo(path)
    with open_ctx() as ctx:
        e = raises(devcache.InvalidArgumentError, ctx.load, path)
        check("not a regular file" in str(e) and path in str(e), str(e))
        e = raises(devcache.InvalidArgumentError, devcache.inspect, path)
        check("not a regular file" in str(e), str(e))


def bad_files(d):
    cases = {
        "short.safetensors": b"\x10\x00\x00",
        "empty.safetensors": b"",
        "long-header.safetensors": struct.pack("<Q", 1000) + b"{}      ",
        "bad-json.safetensors": mf.raw_safetensors("{not json}"),
        "array.safetensors": mf.raw_safetensors("[1,2]"),
        "past-end.safetensors": mf.raw_safetensors(
            {"a": {"dtype": "U8", "shape": [100], "data_offsets": [0, 100]}}, b"x" * 10),
        "gap.safetensors": mf.raw_safetensors(
            {"a": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}}, b"x" * 4),
        "dtype.safetensors": mf.raw_safetensors(
            {"a": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}}, b"x"),
        "shape.safetensors": mf.raw_safetensors(
            {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"xxxx"),
        "version.gguf": b"GGUF" + struct.pack("<IQQ", 7, 0, 0),
        "truncated.gguf": mf.gguf_bytes([("w", ("F32", (4,), mf.f32([1, 2, 3, 4])))],
                                        {"k": "v"})[:40],
        "type.gguf": mf.gguf_bytes([("w", (99, (4,), b"x" * 4))]),
        "block.gguf": mf.gguf_bytes([("q", (2, (16,), b"x" * 18))]),
    }
    with open_ctx() as ctx:
        for name, data in cases.items():
            p = mf.write_bytes(os.path.join(d, name), data)
            for fn in (ctx.load, devcache.inspect):
                e = raises(devcache.FormatError, fn, p)
                check(p in str(e), "%s: %s does not name the file" % (name, e))
                check(e.code == -8 and e.detail == str(e))
        check(ctx.cache_stats()["failed_loads"] == len(cases))
        check(ctx.cache_stats()["models"] == 0)
        # Nothing there, or nothing a model is.
        missing = os.path.join(d, "missing.safetensors")
        for fn in (ctx.load, devcache.inspect):
            e = raises(devcache.NotFoundError, fn, missing)
            check(isinstance(e, FileNotFoundError) and missing in str(e))
        os.mkdir(os.path.join(d, "nothing"))
        raises(devcache.NotFoundError, ctx.load, os.path.join(d, "nothing"))
        mf.write_bytes(os.path.join(d, "nothing", "notes.txt"), b"hello")
        raises(devcache.NotFoundError, ctx.load, os.path.join(d, "nothing"))
        index = os.path.join(d, "x.safetensors.index.json")
        with open(index, "w") as f:
            json.dump({"metadata": {}, "weight_map": {"a": "gone.safetensors"}}, f)
        e = raises(devcache.NotFoundError, ctx.load, index)
        check("gone.safetensors" in str(e))
        with open(index, "w") as f:
            f.write("{")
        raises(devcache.FormatError, ctx.load, index)
        # A good file still loads after all that.
        with ctx.load(model_file(d)) as m:
            check(m["v"].tobytes() == RAW["v"])


def printable(text):
    """No control character (C0, DEL, C1) in text."""
    return not any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f for c in text)


def names_escaped_in_errors(d):
    # What a file or a path names reaches str(e) only as text: an escape
    # sequence would retitle (ESC ]0;...BEL) or clear (ESC [2J) the
    # terminal that prints it.  A name of 5000 bytes leaves the reason.
    long_name = "w\x1b]0;title\x07\x1b[2J\n" + "A" * 5000
    p = mf.write_bytes(os.path.join(d, "names.safetensors"), mf.raw_safetensors(
        {long_name: {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"xxxx"))
    with open_ctx() as ctx:
        for fn in (ctx.load, devcache.inspect):
            e = raises(devcache.FormatError, fn, p)
            check(printable(str(e)), repr(str(e)))
            check("tensor 'w\\x1b]0;title\\x07\\x1b[2J\\x0aAAA" in str(e), repr(str(e)))
            check("AAA': shape [2] has 8 bytes of F32 but data_offsets [0, 4] hold 4"
                  in str(e), repr(str(e)))
            check(len(str(e)) < 1024 and e.detail == str(e))
        # A path from the caller, in the library's message ...
        gone = os.path.join(d, "gone\x1b[2J\x9b.safetensors")
        e = raises(devcache.NotFoundError, ctx.load, gone)
        check(printable(str(e)) and "gone\\x1b[2J\\xc2\\x9b.safetensors" in str(e),
              repr(str(e)))
        # ... and in one of the binding's own.
        q = model_file(d, "esc\x1b]0;title\x07.safetensors")
        with ctx.load(q) as m:
            view = m["w"]
            e = raises(devcache.BusyError, m.make_resident, ["w"])
            check(printable(str(e)) and "esc\\x1b]0;title\\x07.safetensors" in str(e),
                  repr(str(e)))
            del view
        # A tensor's name, in the binding's messages about the tensor and
        # in its repr.
        name = "t\x1b[2J\x9b"
        r = mf.write_bytes(os.path.join(d, "ctl.safetensors"), mf.raw_safetensors(
            {name: {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, b"abcd"))
        with ctx.load(r) as m:
            t = m[name]
            check(printable(repr(t)) and "t\\x1b[2J\\xc2\\x9b" in repr(t), repr(repr(t)))
            e = raises(BufferError, t.__dlpack__)  # read-only, legacy DLPack
            check(printable(str(e)) and "tensor 't\\x1b[2J\\xc2\\x9b' is read-only" in str(e),
                  repr(str(e)))
            del t


def bad_arguments(d):
    p = model_file(d)
    with open_ctx() as ctx:
        e = raises((devcache.NoDeviceError, devcache.InvalidArgumentError), ctx.load, p,
                   device="nonsense")
        check("nonsense" in str(e))
        raises((devcache.NoDeviceError, devcache.InvalidArgumentError), ctx.load, p,
               device="host:7")
        raises(TypeError, ctx.load, p, device=123)
        raises(TypeError, ctx.load, p, progress="x")
        raises(TypeError, ctx.load, None)
        raises(TypeError, ctx.load, p, bogus=1)
        raises(TypeError, ctx.load)
        host = ctx.device("host")
        raises(ValueError, host.alloc, -1)
        raises(TypeError, host.alloc, "x")
        raises(TypeError, host.alloc, None)
        raises(OverflowError, host.alloc, 1 << 80)
        raises(TypeError, host.alloc, 8, stream="s")
        e = raises(devcache.InvalidArgumentError, host.free, 0xDEAD000)
        check(isinstance(e, ValueError))
        raises(TypeError, host.free, None)
        raises((OverflowError, ValueError), host.free, -1)
        a = host.alloc(64)
        host.free(a)
        raises(devcache.InvalidArgumentError, host.free, a)  # twice
        raises(TypeError, devcache.Context, options=5)
        raises(TypeError, devcache.Context, None, True)  # the flags are keyword-only
        raises(TypeError, devcache.inspect, None)
        raises(TypeError, devcache.inspect)
        raises(TypeError, devcache.strerror, None)
        with ctx.load(p) as m:
            raises(TypeError, m.make_resident, "single string")
            raises(TypeError, m.move_to_host, "w")
            raises(TypeError, m.make_resident, 5)
            raises(TypeError, m.make_resident, ["w", 5])
            view = m["w"]
            raises(devcache.BusyError, m.make_resident, ["w"])
            check(view.tobytes() == RAW["w"])
            raises(BufferError, view.__dlpack__)  # read-only, legacy DLPack
            raises(BufferError, view.__dlpack__, copy=True)
            raises(TypeError, view.__dlpack__, max_version="1.0")
            raises(TypeError, view.__dlpack__, 1)  # keyword-only
            del view


def capsule_dropped_during_an_error(d):
    # A DLPack capsule freed while an exception is on its way out must
    # leave that exception alone.
    p = model_file(d)
    with open_ctx() as ctx, ctx.load(p) as m:
        t = m["w"]
        raises(IndexError, lambda t=t: [t.__dlpack__(max_version=(1, 0))][1])
        raises(KeyError, lambda t=t: {0: t.__dlpack__(max_version=(1, 0))}[1])
        del t


def threads(d):
    p = model_file(d)
    q = mf.write_gguf(os.path.join(d, "model.gguf"),
                      [("g", ("F32", (4, 8), mf.ramp("f", (32,))))])
    errors = []
    with open_ctx() as ctx:
        def work(k):
            try:
                for i in range(100):
                    path = p if (i + k) % 2 else q
                    with ctx.load(path, writable=bool(i % 3 == 0)) as m:
                        if path == p:
                            check(m["w"].tobytes() == RAW["w"])
                            check(memoryview(m["v"]).tobytes() == RAW["v"])
                        else:
                            check(m["g"].tobytes() == mf.ramp("f", (32,)))
                        if numpy is not None:
                            numpy.asarray(m[m.keys()[0]]).sum()
                    if i % 25 == 0:
                        ctx.evict_all()
            except Exception as e:  # noqa: B902 - reported below
                errors.append(repr(e))

        ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        host = ctx.device("host")
        while any(t.is_alive() for t in ts):
            ctx.cache_stats()
            host.stats()
            ctx.cache_summary()
        for t in ts:
            t.join()
        check(not errors, errors)
        s = ctx.cache_stats()
        check(s["locked_models"] == 0, s)
        check(s["hits"] + s["misses"] == 400, s)


def close_while_threads_load(d):
    p = model_file(d)
    ctx = open_ctx()
    outcome = []
    started = threading.Event()

    def work():
        n = 0
        try:
            while True:
                with ctx.load(p) as m:
                    check(m["w"].tobytes() == RAW["w"])
                n += 1
                started.set()
        except ValueError:
            outcome.append(n)  # the context was closed under the loop
        except Exception as e:  # noqa: B902 - reported below
            outcome.append(repr(e))
            started.set()

    ts = [threading.Thread(target=work) for _ in range(3)]
    for t in ts:
        t.start()
    started.wait(30)
    ctx.close()
    for t in ts:
        t.join(30)
    check(not any(t.is_alive() for t in ts), "a loading thread is stuck")
    check(all(isinstance(n, int) for n in outcome), outcome)
    gc.collect()
    check(not mf.mapped(p))


def progress_calls_the_library(d):
    p = model_file(d)
    q = model_file(d, "other.safetensors")
    with open_ctx() as ctx:
        seen = []

        def progress(done, total):
            seen.append(ctx.cache_stats()["misses"])
            ctx.cache_summary()
            ctx.device("host").stats()
            with ctx.load(q) as other:  # another model, loaded inside
                check(other["v"].tobytes() == RAW["v"])

        with ctx.load(p, progress=progress) as m:
            check(m["w"].tobytes() == RAW["w"])
        check(seen)

        # Closing the context from inside: the load finishes, then the
        # context refuses everything and closes when the model goes.
        ctx.evict_all()
        m = ctx.load(p, progress=lambda done, total: ctx.close())
        check(ctx.closed)
        raises(ValueError, m.__getitem__, "w")
        del m


def progress_loads_the_same_model(d):
    # The model being loaded, loaded again from its own progress callback:
    # an error, not a wait for itself.
    p = model_file(d)
    with open_ctx() as ctx:
        def progress(done, total):
            with ctx.load(p):
                pass

        try:
            ctx.load(p, progress=progress).release()
        except (devcache.Error, RuntimeError):
            pass


def fake_device(d):
    p = model_file(d)
    ctx = devcache.open(FAKE_OPTIONS, config_files=False, environment=False)
    m = ctx.load(p, device="cuda:0")
    t = m["w"]
    raises(BufferError, memoryview, t)
    raises(AttributeError, getattr, t, "__array_interface__")
    if numpy is not None:
        raises(TypeError, numpy.asarray, t)
        raises(TypeError, numpy.array, t)
    raises(BufferError, bytes, t)
    ctx.close()
    check(t.tobytes() == RAW["w"])
    check(t.__cuda_array_interface__["data"][0] == t.data_ptr)
    cap = t.__dlpack__()
    del m, t
    gc.collect()
    del cap  # the last reference to the model: the context closes now
    gc.collect()

    ctx = devcache.open(FAKE_OPTIONS, config_files=False, environment=False)

    def stop(done, total):
        raise KeyboardInterrupt

    raises(KeyboardInterrupt, ctx.load, p, device="cuda:1", progress=stop)
    check(ctx.device("cuda:1").stats()["allocated_bytes.all.current"] == 0)
    with ctx.load(p, device="cuda:1") as m:
        check(m["v"].tobytes() == RAW["v"])
    ctx.close()


def progress_on_device_calls_the_library(d):
    p = mf.write_safetensors(os.path.join(d, "big.safetensors"),
                             [("t%d" % i, ("U8", (100000,), mf.pattern("t%d" % i, 100000)))
                              for i in range(4)])
    with devcache.open(FAKE_OPTIONS, config_files=False, environment=False) as ctx:
        seen = []

        def progress(done, total):
            seen.append(done)
            ctx.cache_stats()
            ctx.device("cuda:0").stats()
            ctx.device("cuda:0").summary()

        with ctx.load(p, device="cuda:0", progress=progress) as m:
            check(m["t3"].tobytes() == mf.pattern("t3", 100000))
        check(seen and seen[-1] == 400000, seen)


def release_races_views(d):
    # One thread makes and drops views while another releases the model
    # and evicts it: no view may outlive the model's lock.
    p = model_file(d)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with open_ctx() as ctx:
            for _ in range(300):
                m = ctx.load(p)
                unlocked = []

                def reader():
                    try:
                        while True:
                            t = m["w"]
                            if ctx.cache_stats()["locked_models"] == 0:
                                unlocked.append(t.tobytes() == RAW["w"])
                                return
                            del t
                    except ValueError:
                        pass  # released

                th = threading.Thread(target=reader)
                th.start()
                m.release()
                ctx.evict_all()
                th.join()
                check(not unlocked, "a view outlived its model's lock")
    finally:
        sys.setswitchinterval(switch)


def partial_model(ctx, d):
    tensors = [("t%d" % i, ("F32", (256, 256), mf.pattern("t%d" % i, 1 << 18)))
               for i in range(4)]
    p = mf.write_safetensors(os.path.join(d, "partial.safetensors"), tensors)
    return ctx.load(p, device="cuda:0"), {n: raw for n, (_d, _s, raw) in tensors}


PARTIAL = ",partial_loading:true,max_cache_vram:600K"


def names_iterable_makes_a_view(d):
    # make_resident and move_to_host take any iterable of names: one that
    # makes a view while it is read must not get a move past the check
    # that no view is alive.
    with devcache.open(FAKE_OPTIONS + PARTIAL, config_files=False, environment=False) as ctx:
        m, raw = partial_model(ctx, d)
        other = mf.write_safetensors(os.path.join(d, "other.safetensors"),
                                     [("o", ("F32", (256, 256), b"\xee" * (1 << 18)))])
        keep = []

        def names():
            keep.append(m["t0"])  # on cuda:0
            yield "t0"

        try:
            m.move_to_host(names())
        except devcache.BusyError:
            pass
        t = keep.pop()
        # Whatever happened, the view still reads its own bytes, even once
        # another model is uploaded into the device memory a move gave back.
        with ctx.load(other, device="cuda:0"):
            check(t.tobytes() == raw["t0"], "a view of a moved tensor reads another model's bytes")
        where = m["t0"].device
        check(t.device == where, "the view says %s, the model %s" % (t.device, where))


def names_iterable_releases(d):
    # An iterable of names that releases the model: the ValueError of a
    # released model, not the library's complaint about a NULL handle.
    with devcache.open(FAKE_OPTIONS + PARTIAL, config_files=False, environment=False) as ctx:
        m, _raw = partial_model(ctx, d)

        def names():
            m.release()
            yield "t1"

        e = raises((ValueError, devcache.Error), m.make_resident, names())
        check(type(e) is ValueError, "a model released by its names argument: %r (want the "
              "ValueError of a released model)" % e)
        check(m.views == 0)


def partial_threads(d):
    # Moves on one thread, views on others: BusyError or the right bytes.
    errors = []
    with devcache.open(FAKE_OPTIONS + PARTIAL, config_files=False, environment=False) as ctx:
        m, raw = partial_model(ctx, d)
        stop = threading.Event()

        def mover():
            try:
                for i in range(200):
                    try:
                        if i % 2:
                            m.move_to_host(["t0", "t1"])
                        else:
                            m.make_resident(["t%d" % (i % 4)])
                    except (devcache.BusyError, devcache.OutOfMemoryError):
                        pass
            except Exception as e:  # noqa: B902 - reported below
                errors.append(repr(e))
            finally:
                stop.set()

        def viewer():
            try:
                while not stop.is_set():
                    for name in raw:
                        try:
                            t = m[name]
                        except devcache.BusyError:
                            continue
                        if t.tobytes() != raw[name]:
                            errors.append("%s read wrong bytes on %s" % (name, t.device))
                        del t
                    m.info
            except Exception as e:  # noqa: B902 - reported below
                errors.append(repr(e))

        ts = [threading.Thread(target=mover)] + [threading.Thread(target=viewer)
                                                for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        check(not errors, errors)
        check(m.views == 0)
        m.release()


# ---- running them ----------------------------------------------------------------------


def run_child(name, timeout=CHILD_TIMEOUT):
    """Run scenario name in a child interpreter; None when it hangs."""
    code = ("import sys, tempfile; sys.path.insert(0, %r); import test_misuse as t\n"
            "with tempfile.TemporaryDirectory(prefix='test-misuse-') as d:\n"
            "    t.%s(d)\n"
            "print('survived')\n") % (HERE, name)
    try:
        return subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


class Survives(unittest.TestCase):
    def survive(self, fn, in_process=True, timeout=CHILD_TIMEOUT):
        r = run_child(fn.__name__, timeout)
        if r is None:
            self.fail("%s: the child hung for %d s (a deadlock?)" % (fn.__name__, timeout))
        self.assertNotIn("Segmentation", r.stderr)
        self.assertNotIn("Fatal Python error", r.stderr)
        self.assertEqual(r.returncode, 0, "%s: status %d:\n%s" % (fn.__name__, r.returncode,
                                                                  r.stderr))
        self.assertEqual(r.stdout.splitlines()[-1:], ["survived"], r.stdout)
        if in_process:
            with tempfile.TemporaryDirectory(prefix="test-misuse-") as d:
                fn(d)

    def test_closed_context(self):
        self.survive(closed_context)

    def test_model_outlives_close(self):
        self.survive(model_outlives_close)

    def test_close_twice_and_dealloc(self):
        self.survive(close_twice_and_dealloc)

    def test_released_model(self):
        self.survive(released_model)

    def test_bad_keys(self):
        self.survive(bad_keys)

    def test_names_with_nul(self):
        self.survive(names_with_nul)

    def test_bad_files(self):
        self.survive(bad_files)

    def test_fifo(self):
        self.survive(fifo, in_process=False)

    def test_bad_arguments(self):
        self.survive(bad_arguments)

    def test_names_escaped_in_errors(self):
        self.survive(names_escaped_in_errors)

    def test_capsule_dropped_during_an_error(self):
        self.survive(capsule_dropped_during_an_error)

    def test_threads(self):
        self.survive(threads)

    def test_close_while_threads_load(self):
        self.survive(close_while_threads_load)

    def test_progress_calls_the_library(self):
        self.survive(progress_calls_the_library)

    def test_progress_loads_the_same_model(self):
        # In the child only: today it waits for itself forever.
        self.survive(progress_loads_the_same_model, in_process=False, timeout=6)

    def test_release_races_views(self):
        self.survive(release_races_views)

    @unittest.skipUnless(FAKE_OPTIONS, NO_FAKE or "")
    def test_names_iterable_makes_a_view(self):
        self.survive(names_iterable_makes_a_view)

    @unittest.skipUnless(FAKE_OPTIONS, NO_FAKE or "")
    def test_names_iterable_releases(self):
        self.survive(names_iterable_releases)

    @unittest.skipUnless(FAKE_OPTIONS, NO_FAKE or "")
    def test_partial_threads(self):
        self.survive(partial_threads)

    @unittest.skipUnless(FAKE_OPTIONS, NO_FAKE or "")
    def test_fake_device(self):
        self.survive(fake_device)

    @unittest.skipUnless(FAKE_OPTIONS, NO_FAKE or "")
    def test_progress_on_device_calls_the_library(self):
        self.survive(progress_on_device_calls_the_library)


if __name__ == "__main__":
    unittest.main()
