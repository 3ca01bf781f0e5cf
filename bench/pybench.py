# SPDX-License-Identifier: LGPL-2.1-or-later
"""pybench.py - `make bench`: every tensor of a 1 GiB and a 4 GiB model into numpy arrays through the devcache package, against numpy.fromfile and torch.load.

Design.  The parent writes the model files (or reuses them), then runs each
measurement as a fresh Python process (this file again, with --child), so
that each figure's peak RSS is that process's own (VmHWM) and nothing of
one figure is left in memory or in the interpreter for the next.  Before a
cold run every file of the size is dropped from the page cache
(POSIX_FADV_DONTNEED; mincore() checks it); before a warm run the method's
own file is read once and mincore() checks that it is resident.  A figure
is the wall time of the load and of the first touch of every page of every
array, the touch being the same code for all methods (one byte per 4096,
summed: the sums must agree, which also proves that every method read the
same bytes).  The runs of the methods are interleaved and rotated, the time
is the best of the runs, the peak RSS the highest.

Usage: pybench.py [-d DIR] [-r RUNS] [-s 1G|4G]... [-m METHOD]...
Methods: devcache, fromfile, torch (the default three), and for the
analysis of bench/README: devcache+fadvise_sequential (the tunable),
devcache+mmap_false (the tunable), devcache+madv_sequential,
devcache+madv_willneed, devcache+madv_populate_read (madvise() of the
mapping after the load, inside the timed load), devcache+fadv_willneed
(posix_fadvise WILLNEED on the file before the load, timed).
Environment: BENCH_RUNS (runs per figure; default 3 for 1G, 2 for 4G),
BENCH_STRICT=yes (exit 1 when a target is missed).  Exit status 0 when
everything ran or was skipped with a reason, 1 (BENCH_STRICT) for a missed
target, 2 when a measurement failed.
"""
import ctypes
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import time

PAGE = 4096
MIB = 1 << 20
GIB = 1 << 30
CHUNK = 64 * MIB
GENERATOR = "libdevcache bench/pybench.py 1"

# The shapes of bench/loadbench's models (Llama-like, Hugging Face's names),
# stored as a float16 checkpoint keeps them: the matrices F16, the RMS
# norms F32.
SIZES = {
    "1G": dict(file="pybench-1g", like="TinyLlama-like", hidden=2048, inter=5632, kv=512,
               layers=9, vocab=32000, seed=1, runs=3),
    "4G": dict(file="pybench-4g", like="Llama-3-8B-like", hidden=4096, inter=14336, kv=1024,
               layers=5, vocab=128256, seed=4, runs=2),
}
DEFAULT_METHODS = ["devcache", "fromfile", "torch"]
LABEL = {"devcache": "devcache", "fromfile": "numpy.fromfile", "torch": "torch.load"}
DTYPES = {"F16": ("<f2", 2), "F32": ("<f4", 4)}
MADV = {"madv_sequential": 2, "madv_willneed": 3, "madv_populate_read": 22}


def label(method):
    return LABEL.get(method, method)


# ---- memory and page-cache figures --------------------------------------------------

def status_kib(field, path="/proc/self/status"):
    with open(path) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def meminfo_bytes(field):
    return status_kib(field, "/proc/meminfo") * 1024


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def resident(path):
    """The fraction of the file's pages in the page cache (mincore)."""
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        p = _libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        if p in (None, ctypes.c_void_p(-1).value):
            return -1.0
        pages = (size + PAGE - 1) // PAGE
        vec = ctypes.create_string_buffer(pages)
        rc = _libc.mincore(p, size, vec)
        _libc.munmap(p, size)
        if rc != 0:
            return -1.0
        return sum(b & 1 for b in vec.raw) / pages
    finally:
        os.close(fd)


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_through(path):
    buf = bytearray(16 * MIB)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


# ---- the measured work, in a fresh process ------------------------------------------

def touch(arrays):
    """Reads one byte of every 4096 of every array: the first touch of each
    page, the same code whatever made the arrays."""
    import numpy
    s = 0
    for a in arrays:
        s += int(a.reshape(-1).view(numpy.uint8)[::PAGE].sum())
    return s


def load_devcache(path, variant):
    import numpy
    import devcache
    opts = "log_level:error"
    if variant == "fadvise_sequential":
        opts += ",fadvise_sequential:true"
    elif variant == "mmap_false":
        opts += ",mmap:false"
    if variant == "fadv_willneed":
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        os.close(fd)
    ctx = devcache.open(opts, config_files=False, environment=False)
    m = ctx.load(path)
    arrays = [numpy.asarray(m[k]) for k in m.keys()]
    if variant in MADV:
        # The span of the tensors in the file's mapping, as the library
        # could advise it when it maps the file.
        lo = min(a.__array_interface__["data"][0] for a in arrays)
        hi = max(a.__array_interface__["data"][0] + a.nbytes for a in arrays)
        lo -= lo % PAGE
        if _libc.madvise(lo, hi - lo, MADV[variant]) != 0:
            raise OSError(ctypes.get_errno(), "madvise %s" % variant)
    return arrays, (ctx, m)


def load_fromfile(path):
    import numpy
    arrays = []
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        for name, t in header.items():
            if name == "__metadata__":
                continue
            dt, size = DTYPES[t["dtype"]]
            begin, end = t["data_offsets"]
            f.seek(base + begin)
            a = numpy.fromfile(f, dtype=dt, count=(end - begin) // size)
            arrays.append(a.reshape(t["shape"]))
    return arrays, None


def load_torch(path):
    import torch
    sd = torch.load(path)
    return [t.numpy() for t in sd.values()], sd


def child(method, path):
    import numpy  # noqa: F401  (imported before the clock starts, for every method)
    base, _, variant = method.partition("+")
    if base == "devcache":
        import devcache  # noqa: F401
    elif base == "torch":
        import torch  # noqa: F401
    rss_start = status_kib("VmRSS")
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    if base == "devcache":
        arrays, keep = load_devcache(path, variant)
    elif base == "fromfile":
        arrays, keep = load_fromfile(path)
    else:
        arrays, keep = load_torch(path)
    t1 = time.perf_counter()
    s = touch(arrays)
    t2 = time.perf_counter()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    out = dict(load=t1 - t0, touch=t2 - t1, sum=s, n=len(arrays),
               bytes=sum(a.nbytes for a in arrays),
               hwm_kib=status_kib("VmHWM"), maxrss_kib=ru1.ru_maxrss,
               rss_start_kib=rss_start, anon_kib=status_kib("RssAnon"),
               file_kib=status_kib("RssFile"),
               majflt=ru1.ru_majflt - ru0.ru_majflt, minflt=ru1.ru_minflt - ru0.ru_minflt)
    print("PYBENCH " + json.dumps(out))
    sys.stdout.flush()
    del keep
    return 0


# ---- the model files ----------------------------------------------------------------

def tensor_list(L):
    t = [("model.embed_tokens.weight", "F16", [L["vocab"], L["hidden"]])]
    h, i, kv = L["hidden"], L["inter"], L["kv"]
    proj = [("self_attn.q_proj", h, h), ("self_attn.k_proj", kv, h),
            ("self_attn.v_proj", kv, h), ("self_attn.o_proj", h, h),
            ("mlp.gate_proj", i, h), ("mlp.up_proj", i, h), ("mlp.down_proj", h, i)]
    for n in range(L["layers"]):
        t.append(("model.layers.%d.input_layernorm.weight" % n, "F32", [h]))
        for k, (p, r, c) in enumerate(proj):
            t.append(("model.layers.%d.%s.weight" % (n, p), "F16", [r, c]))
            if k == 3:
                t.append(("model.layers.%d.post_attention_layernorm.weight" % n, "F32", [h]))
    t.append(("model.norm.weight", "F32", [h]))
    t.append(("lm_head.weight", "F16", [L["vocab"], L["hidden"]]))
    return t


def nbytes(dtype, shape):
    n = DTYPES[dtype][1]
    for d in shape:
        n *= d
    return n


def build_header(L):
    """The header as the file holds it: its length, then the JSON with
    __metadata__ first, padded with spaces to a multiple of 8."""
    tensors = tensor_list(L)
    h = {"__metadata__": {"format": "pt", "generator": GENERATOR, "like": L["like"]}}
    off = 0
    for name, dtype, shape in tensors:
        b = nbytes(dtype, shape)
        h[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + b]}
        off += b
    js = json.dumps(h, separators=(",", ":")).encode()
    js += b" " * ((8 - len(js) % 8) % 8)
    return struct.pack("<Q", len(js)) + js, tensors, len(js) + 8 + off


def write_tensors(f, L, tensors):
    """Deterministic weights: F16 of random sign and mantissa with
    magnitudes 2^-7 to 2^-4 (as loadbench's BF16), norms 1.0."""
    import numpy
    for i, (name, dtype, shape) in enumerate(tensors):
        left = nbytes(dtype, shape)
        if dtype == "F32":
            f.write(numpy.ones(left // 4, "<f4").tobytes())
            continue
        rng = numpy.random.Generator(numpy.random.PCG64(L["seed"] * 1000003 + i))
        while left:
            take = min(left, CHUNK)
            r = numpy.frombuffer(rng.bytes(take), "<u2")
            v = (r & 0x83FF) | ((8 + ((r >> 10) & 3)) << 10)
            f.write(v.astype("<u2").tobytes())
            left -= take


def same_header(path, header, size):
    try:
        if os.path.getsize(path) != size:
            return False
        with open(path, "rb") as f:
            return f.read(len(header)) == header
    except OSError:
        return False


def free_disk(d):
    return shutil.disk_usage(d).free


def make_safetensors(path, L):
    header, tensors, size = build_header(L)
    if same_header(path, header, size):
        return "reused", size, tensors
    if free_disk(os.path.dirname(path) or ".") < size + 256 * MIB:
        return None, size, tensors
    t0 = time.time()
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(header)
            write_tensors(f, L, tensors)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        return "FAILED: cannot write %s: %s" % (tmp, e.strerror), size, tensors
    return "written in %.1f s" % (time.time() - t0), size, tensors


def make_torch_child(src, dst):
    """torch.save of the safetensors file's tensors as a dict, each tensor a
    view of a copy-on-write mapping of the file: no tensor is copied into
    memory, so 4 GiB are never held twice."""
    import numpy
    import torch
    mm = numpy.memmap(src, numpy.uint8, mode="c")
    n = struct.unpack("<Q", bytes(mm[:8]))[0]
    header = json.loads(bytes(mm[8:8 + n]))
    base = 8 + n
    sd = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        a = mm[base + begin:base + end].view(DTYPES[t["dtype"]][0]).reshape(t["shape"])
        sd[name] = torch.from_numpy(a)
    tmp = dst + ".tmp"
    torch.save(sd, tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.rename(tmp, dst)
    return 0


def make_torch(src, dst, size):
    """Reused when newer than its safetensors file (written under a
    temporary name and renamed once complete)."""
    if os.path.exists(dst) and os.path.getmtime(dst) >= os.path.getmtime(src):
        return "reused"
    if free_disk(os.path.dirname(dst) or ".") < size + 256 * MIB:
        return None
    t0 = time.time()
    rc = subprocess.call([sys.executable, __file__, "--make-torch", src, dst])
    if rc != 0:
        return "FAILED"
    return "written in %.1f s" % (time.time() - t0)


# ---- the parent ---------------------------------------------------------------------

def measure(method, path):
    p = subprocess.run([sys.executable, __file__, "--child", method, path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("PYBENCH "):
            return json.loads(line[8:]), None
    return None, "%s on %s: exit status %d: %s" % (label(method), path, p.returncode,
                                                   p.stderr.strip()[-800:])


def gib(b):
    return b / GIB


def run_size(key, d, methods, runs, have_torch):
    """Returns (failed, missed) for this size."""
    L = SIZES[key]
    st = os.path.join(d, L["file"] + ".safetensors")
    pt = os.path.join(d, L["file"] + ".pt")
    print("\n-- %s: %s" % (key, L["like"]))
    header, tensors, size = build_header(L)
    avail = meminfo_bytes("MemAvailable")
    need = 2 * size + GIB
    if avail < need:
        print("SKIP %s: MemAvailable %.2f GiB, %.2f GiB needed (torch.load's copy beside the "
              "file in the page cache, and 1 GiB)" % (key, gib(avail), gib(need)))
        return False, False
    how, size, tensors = make_safetensors(st, L)
    if how is None:
        print("SKIP %s: not enough disk space for %s: %.2f GiB free in %s, %.2f GiB needed "
              "(and 256 MiB to spare)" % (key, st, gib(free_disk(d)), d, gib(size)))
        return False, False
    if how.startswith("FAILED"):
        print("SKIP %s: %s" % (key, how[8:]))
        return True, False
    n16 = sum(1 for t in tensors if t[1] == "F16")
    print("%-28s %6.2f GiB  %s, %d tensors (%d F16, %d F32)"
          % (os.path.basename(st), gib(size), how, len(tensors), n16, len(tensors) - n16))
    files = {"devcache": st, "fromfile": st}
    if "torch" in methods:
        if not have_torch:
            print("torch.load: SKIP, torch is not importable (%s)" % have_torch_why)
            methods = [m for m in methods if m != "torch"]
        else:
            how = make_torch(st, pt, size)
            if how in (None, "FAILED"):
                why = ("not enough disk space: %.2f GiB free in %s" % (gib(free_disk(d)), d)
                       if how is None else "torch.save failed")
                print("torch.load: SKIP, cannot write %s: %s" % (pt, why))
                methods = [m for m in methods if m != "torch"]
            else:
                print("%-28s %6.2f GiB  %s, torch.save of the same tensors (a dict)"
                      % (os.path.basename(pt), gib(os.path.getsize(pt)), how))
                files["torch"] = pt

    def file_of(m):
        return files[m.partition("+")[0]]

    all_files = sorted(set(files.values()))
    res = {m: {"cold": [], "warm": []} for m in methods}
    cold_res, warm_res = [], []
    failed = False
    for r in range(runs):
        order = methods[r % len(methods):] + methods[:r % len(methods)]
        for mode in ("cold", "warm"):
            for m in order:
                for f in all_files:
                    evict(f)
                if mode == "warm":
                    read_through(file_of(m))
                    warm_res.append(resident(file_of(m)))
                else:
                    cold_res.append(max(resident(f) for f in all_files))
                out, err = measure(m, file_of(m))
                if err:
                    print("FAILED " + err)
                    failed = True
                    continue
                res[m][mode].append(out)
    for f in all_files:
        evict(f)
    print("page cache before the runs: cold at most %.1f%% of any file resident after "
          "POSIX_FADV_DONTNEED; warm at least %.1f%% of the method's file (mincore)"
          % (100 * max(cold_res or [0]), 100 * min(warm_res or [0])))
    sums = {o["sum"] for m in methods for mode in ("cold", "warm") for o in res[m][mode]}
    if len(sums) > 1:
        print("FAILED the touches disagree: sums %s" % sorted(sums))
        failed = True
    report(methods, runs, res)
    return failed, missed_of(key, methods, res)


def best(lst):
    return min(lst, key=lambda o: o["load"] + o["touch"]) if lst else None


def report(methods, runs, res):
    print("%d run(s) per figure; time: load + first touch of every page, best run, in "
          "seconds;\npeak RSS: VmHWM, highest run; at start: VmRSS after the imports, when the "
          "clock starts;\nRssAnon and RssFile at the end of that run" % runs)
    w0 = max(len(label(m)) for m in methods)
    print("%-*s %22s %22s %9s %9s %9s %17s %s" % (w0, "", "cold", "warm", "peak RSS", "at start",
                                                 "peak -", "at the end MiB", "faults (cold)"))
    print("%-*s %6s (%5s + %6s) %6s (%5s + %6s) %9s %9s %9s %8s %8s %s"
          % (w0, "method", "s", "load", "touch", "s", "load", "touch", "MiB", "MiB", "start MiB",
             "RssAnon", "RssFile", "major/minor"))
    for m in methods:
        c, w = best(res[m]["cold"]), best(res[m]["warm"])
        outs = res[m]["cold"] + res[m]["warm"]
        if not c or not w:
            print("%-*s not measured" % (w0, label(m)))
            continue
        peak = max(o["hwm_kib"] for o in outs) / 1024
        hi = max(outs, key=lambda o: o["hwm_kib"])
        print("%-*s %6.3f (%5.3f + %6.3f) %6.3f (%5.3f + %6.3f) %9.1f %9.1f %9.1f %8.1f %8.1f %d/%d"
              % (w0, label(m), c["load"] + c["touch"], c["load"], c["touch"],
                 w["load"] + w["touch"], w["load"], w["touch"], peak,
                 hi["rss_start_kib"] / 1024, (hi["hwm_kib"] - hi["rss_start_kib"]) / 1024,
                 hi["anon_kib"] / 1024, hi["file_kib"] / 1024, c["majflt"], c["minflt"]))


def missed_of(key, methods, res):
    """Prints the targets; True if one is missed."""
    if "devcache" not in methods:
        return False
    others = [m for m in methods if "+" not in m and m != "devcache"
              and res[m]["cold"] and res[m]["warm"]]
    dc = res["devcache"]
    if not others or not dc["cold"] or not dc["warm"]:
        print("target: SKIP %s, nothing to compare with" % key)
        return False
    missed = False
    for mode in ("cold", "warm"):
        t = {m: (lambda o: o["load"] + o["touch"])(best(res[m][mode])) for m in others}
        fast = min(t, key=t.get)
        mine = (lambda o: o["load"] + o["touch"])(best(dc[mode]))
        ok = mine <= t[fast]
        missed |= not ok
        print("target: devcache load+touch <= fastest other (%s %.3f s) [%s %s]: %s "
              "(devcache %.3f s, %.2fx)" % (label(fast), t[fast], key, mode,
                                           "met" if ok else "MISSED", mine, mine / t[fast]))
    peak = {m: max(o["hwm_kib"] for o in res[m]["cold"] + res[m]["warm"]) / 1024 for m in others}
    low = min(peak, key=peak.get)
    mine = max(o["hwm_kib"] for o in dc["cold"] + dc["warm"]) / 1024
    ok = mine <= peak[low]
    missed |= not ok
    own = {m: max(o["hwm_kib"] - o["rss_start_kib"] for o in res[m]["cold"] + res[m]["warm"]) / 1024
           for m in others + ["devcache"]}
    print("target: devcache peak RSS <= lowest other (%s %.1f MiB) [%s]: %s "
          "(devcache %.1f MiB, %+.1f MiB)" % (label(low), peak[low], key,
                                               "met" if ok else "MISSED", mine, mine - peak[low]))
    print("(info) peak RSS less RSS at start [%s]: devcache %.1f MiB, %s" % (
        key, own["devcache"], ", ".join("%s %.1f MiB" % (label(m), own[m]) for m in others)))
    return missed


have_torch_why = ""


def probe(code):
    """(True, what it printed) or (False, its last line of error)."""
    p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode == 0:
        return True, p.stdout.strip()
    return False, (p.stderr.strip().splitlines() or ["exit status %d" % p.returncode])[-1]


def arguments(argv, usage):
    """-d DIR, -r RUNS, -s SIZE..., -m METHOD... as (dir, runs, sizes,
    methods), runs from BENCH_RUNS where -r is not given; None, after
    printing usage, for anything else.  torchbench.py takes the same."""
    d, runs, sizes, methods = ".", None, [], []
    args = list(argv)
    while args:
        a = args.pop(0)
        if a in ("-d", "-r", "-s", "-m") and args:
            v = args.pop(0)
            if a == "-d":
                d = v
            elif a == "-r":
                runs = int(v)
            elif a == "-s":
                sizes.append(v.upper())
            else:
                methods.append(v)
        else:
            print(usage, file=sys.stderr)
            return None
    if runs is None and os.environ.get("BENCH_RUNS"):
        runs = int(os.environ["BENCH_RUNS"])
    return d, runs, sizes, methods


def main(argv):
    global have_torch_why
    if argv[:1] == ["--child"]:
        return child(argv[1], argv[2])
    if argv[:1] == ["--make-torch"]:
        return make_torch_child(argv[1], argv[2])
    parsed = arguments(argv, __doc__.split("\n\n")[2])
    if parsed is None:
        return 2
    d, runs, sizes, methods = parsed
    if any(s not in SIZES for s in sizes):
        print("pybench: -s takes 1G or 4G", file=sys.stderr)
        return 2
    methods = methods or DEFAULT_METHODS
    print("== Python package: every tensor into numpy arrays (bench/pybench.py)")
    print("python:     %s" % sys.version.split()[0])
    try:
        import numpy
    except ImportError as e:
        print("SKIP everything: numpy is not importable (%s)" % e)
        return 0
    print("numpy:      %s" % numpy.__version__)
    # devcache and torch are imported only by the measuring processes: this
    # one runs for minutes, and a rebuild of the package meanwhile would
    # change the files it has mapped.
    ok, what = probe("import devcache, os; print(devcache.version, "
                     "os.path.dirname(devcache.__file__))")
    if not ok:
        print("FAILED: the devcache package is not importable (%s)" % what)
        return 2
    print("devcache:   %s" % what)
    have_torch, what = probe("import torch; print(torch.__version__)")
    if have_torch:
        print("torch:      %s" % what)
    else:
        have_torch_why = what
        print("torch:      not importable (%s): torch.load is not measured" % have_torch_why)
    print("memory:     MemAvailable %.1f GiB; disk: %.1f GiB free in %s"
          % (gib(meminfo_bytes("MemAvailable")), gib(free_disk(d)), d))
    failed = missed = False
    for key in sizes or list(SIZES):
        f, m = run_size(key, d, methods, runs or SIZES[key]["runs"], have_torch)
        failed |= f
        missed |= m
    if failed:
        return 2
    if missed and os.environ.get("BENCH_STRICT") == "yes":
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
