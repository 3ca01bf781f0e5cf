# SPDX-License-Identifier: LGPL-2.1-or-later
"""torchbench.py - `make bench`: bench/pybench.py's 1 GiB and 4 GiB checkpoints into a meta-device torch module, devcache.torch.load_state_dict against torch.load and numpy.fromfile.

Design.  The checkpoints are bench/pybench.py's own (the same files, made
or reused through its functions: a safetensors file and the torch.save of
the same tensors).  The module is built from the file's header on the meta
device: a stack of Linear layers (every 2-D tensor, F16, no bias) and
norms (every 1-D tensor, F32).  Each method makes it ready on the host:

  devcache          devcache.torch.load_state_dict(module, file.safetensors)
  torch.load        torch.load(file.pt), then the tensors assigned to the
                    module (load_state_dict(assign=True) on torch >= 2.1,
                    the same by hand before), no copy beyond torch.load's
  torch.load(mmap)  torch.load(file.pt, mmap=True), assigned: torch >= 2.1
  numpy.fromfile    numpy.fromfile of each tensor, torch.from_numpy, assigned

Each figure is a fresh process (this file with --child), cold or warm page
cache as bench/pybench.py makes it (cold: every file of the size dropped
with POSIX_FADV_DONTNEED, mincore() checking; warm: the method's file read
once).  The time is the load and the first touch of every page of every
parameter (one byte per 4096, the same code for every method), best run.
Added anonymous memory is RssAnon (/proc/self/status) after the load,
touch and forward pass less RssAnon before the load (not VmHWM, which
counts file pages too).  The forward pass (each Linear on a fixed input,
against 8 rows of its weight, and the norms) is hashed: every method must
give the same bytes.  The devcache process then drops the module (the
release discards the pages it wrote: none here) and times a second
devcache.torch.load_file of the same file, a cache hit.

Usage: torchbench.py [-d DIR] [-r RUNS] [-s 1G|4G]... [-m METHOD]...
Methods: devcache, torch, torch_mmap, fromfile.  Environment: BENCH_RUNS,
BENCH_STRICT=yes (exit 1 when a target is missed).  Exit status 0 when
everything ran or was skipped with a reason, 1 (BENCH_STRICT) for a missed
target, 2 when a measurement failed.
"""
import gc
import hashlib
import json
import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pybench  # noqa: E402  (its checkpoints, page-cache helpers and touch)

GIB = 1 << 30
MIB = 1 << 20
METHODS = ["devcache", "torch", "torch_mmap", "fromfile"]
LABEL = {"devcache": "devcache", "torch": "torch.load", "torch_mmap": "torch.load(mmap)",
         "fromfile": "numpy.fromfile"}
TARGET_ANON_MIB = 32
TARGET_HIT_MS_PER_GIB = 1.0


# ---- the module ----------------------------------------------------------------------

def header_of(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h, 8 + n


def build_module(torch, header):
    """The module of the checkpoint's names on the meta device."""
    class Norm(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.empty(n, dtype=torch.float32, device="meta"))

    class Stack(torch.nn.Module):
        def forward(self, x):
            out = []
            for m in self.modules():
                if isinstance(m, torch.nn.Linear):
                    w = m.weight[:8].float()
                    out.append(torch.nn.functional.linear(x[:m.in_features], w))
                elif isinstance(m, Norm):
                    out.append(m.weight[:8] * x[:8])
            return torch.cat(out)

    root = Stack()
    for name, t in header.items():
        path = name.rsplit(".", 1)[0].split(".")
        owner = root
        for part in path[:-1]:
            if not hasattr(owner, part):
                owner.add_module(part, torch.nn.Module())
            owner = getattr(owner, part)
        if len(t["shape"]) == 2:
            leaf = torch.nn.Linear(t["shape"][1], t["shape"][0], bias=False, device="meta",
                                   dtype=torch.float16)
        else:
            leaf = Norm(t["shape"][0])
        owner.add_module(path[-1], leaf)
    return root


def assign(torch, module, sd):
    """The tensors as the module's parameters, no copy (what
    load_state_dict(assign=True) does on torch >= 2.1)."""
    if "assign" in module.load_state_dict.__code__.co_varnames:
        module.load_state_dict(sd, assign=True)
        return
    for name, t in sd.items():
        owner_name, _, leaf = name.rpartition(".")
        owner = module.get_submodule(owner_name)
        old = owner._parameters[leaf]
        owner._parameters[leaf] = torch.nn.Parameter(t, requires_grad=old.requires_grad)


# ---- the measured work, in a fresh process ---------------------------------------------

def rss_anon_kib():
    return pybench.status_kib("RssAnon")


def load(method, torch, module, st, pt):
    if method == "devcache":
        import devcache.torch as dt
        dt.load_state_dict(module, st)
    elif method == "torch":
        assign(torch, module, torch.load(pt))
    elif method == "torch_mmap":
        assign(torch, module, torch.load(pt, mmap=True))
    else:
        import numpy
        header, base = header_of(st)
        sd = {}
        with open(st, "rb") as f:
            for name, t in header.items():
                dt_, size = pybench.DTYPES[t["dtype"]]
                begin, end = t["data_offsets"]
                f.seek(base + begin)
                a = numpy.fromfile(f, dtype=dt_, count=(end - begin) // size)
                sd[name] = torch.from_numpy(a.reshape(t["shape"]))
        assign(torch, module, sd)


def child(method, st, pt):
    import numpy  # noqa: F401
    import torch
    if method == "devcache":
        import devcache.torch  # noqa: F401
    header, _ = header_of(st)
    module = build_module(torch, header)
    gc.collect()
    anon0 = rss_anon_kib()
    t0 = time.perf_counter()
    load(method, torch, module, st, pt)
    t1 = time.perf_counter()
    params = [p.detach().numpy() for p in module.parameters()]
    s = pybench.touch(params)
    t2 = time.perf_counter()
    del params
    with torch.no_grad():
        x = torch.linspace(-1, 1, max(t["shape"][-1] for t in header.values()))
        y = module(x)
    digest = hashlib.sha256(y.numpy().tobytes()).hexdigest()[:16]
    out = dict(load=t1 - t0, touch=t2 - t1, sum=s, forward=digest,
               anon_kib=rss_anon_kib() - anon0,
               devices=sorted({p.device.type for p in module.parameters()}))
    if method == "devcache":
        import devcache.torch as dt
        del y, x
        t3 = time.perf_counter()
        del module   # the last tensors go: the lock, and the discard of written pages
        t4 = time.perf_counter()
        gc.collect()
        t5 = time.perf_counter()
        sd = dt.load_file(st)
        t6 = time.perf_counter()
        out.update(drop=t4 - t3, gc=t5 - t4, hit=t6 - t5, hit_tensors=len(sd))
    print("TORCHBENCH " + json.dumps(out))
    sys.stdout.flush()
    return 0


# ---- the parent ---------------------------------------------------------------------------

def measure(method, st, pt):
    p = subprocess.run([sys.executable, __file__, "--child", method, st, pt],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("TORCHBENCH "):
            return json.loads(line[11:]), None
    return None, "%s: exit status %d: %s" % (LABEL[method], p.returncode,
                                             p.stderr.strip()[-800:])


def total(o):
    return o["load"] + o["touch"]


def run_size(key, d, methods, runs):
    """Returns (failed, missed)."""
    L = pybench.SIZES[key]
    st = os.path.join(d, L["file"] + ".safetensors")
    pt = os.path.join(d, L["file"] + ".pt")
    print("\n-- %s: %s, into a meta-device module" % (key, L["like"]))
    _h, _t, size = pybench.build_header(L)
    avail = pybench.meminfo_bytes("MemAvailable")
    if avail < 2 * size + GIB:
        print("SKIP %s: MemAvailable %.2f GiB, %.2f GiB needed" % (key, avail / GIB,
                                                                   (2 * size + GIB) / GIB))
        return False, False
    how, size, _t = pybench.make_safetensors(st, L)
    if how is None or how.startswith("FAILED"):
        print("SKIP %s: cannot write %s (%s)" % (key, st, how or "not enough disk space"))
        return bool(how), False
    print("%-28s %6.2f GiB  %s" % (os.path.basename(st), size / GIB, how))
    if any(m.startswith("torch") for m in methods):
        how = pybench.make_torch(st, pt, size)
        if how in (None, "FAILED"):
            print("torch.load: SKIP, cannot write %s" % pt)
            methods = [m for m in methods if not m.startswith("torch")]
        else:
            print("%-28s %6.2f GiB  %s" % (os.path.basename(pt), os.path.getsize(pt) / GIB, how))
    files = {"devcache": st, "fromfile": st, "torch": pt, "torch_mmap": pt}
    all_files = sorted({files[m] for m in methods})
    res = {m: {"cold": [], "warm": []} for m in methods}
    cold, warm = [], []
    failed = False
    for r in range(runs):
        order = methods[r % len(methods):] + methods[:r % len(methods)]
        for mode in ("cold", "warm"):
            for m in order:
                for f in all_files:
                    pybench.evict(f)
                if mode == "warm":
                    pybench.read_through(files[m])
                    warm.append(pybench.resident(files[m]))
                else:
                    cold.append(max(pybench.resident(f) for f in all_files))
                out, err = measure(m, st, pt)
                if err:
                    print("FAILED " + err)
                    failed = True
                else:
                    res[m][mode].append(out)
    for f in all_files:
        pybench.evict(f)
    print("page cache: cold at most %.1f%% of any file resident after POSIX_FADV_DONTNEED; "
          "warm at least %.1f%% of the method's file (mincore)"
          % (100 * max(cold or [0]), 100 * min(warm or [0])))
    outs = [o for m in methods for mode in res[m] for o in res[m][mode]]
    for what in ("sum", "forward"):
        seen = {o[what] for o in outs}
        if len(seen) > 1:
            print("FAILED the %s differs between methods: %s" % (what, sorted(seen)))
            failed = True
    if outs:
        print("forward pass: the same output (sha256 %s) from every method and run; touch sums "
              "agree" % outs[0]["forward"])
    return failed, report(key, size, methods, runs, res)


def report(key, size, methods, runs, res):
    print("%d run(s) per figure; seconds to a ready module: load + first touch of every page, "
          "best run;\nRssAnon added: after load, touch and forward less before the load, "
          "highest run" % runs)
    print("%-17s %24s %24s %14s" % ("", "cold", "warm", "RssAnon added"))
    print("%-17s %7s (%6s + %6s) %7s (%6s + %6s) %14s" % ("method", "s", "load", "touch", "s",
                                                        "load", "touch", "MiB"))
    best = {}
    for m in methods:
        c = min(res[m]["cold"], key=total, default=None)
        w = min(res[m]["warm"], key=total, default=None)
        if not c or not w:
            print("%-17s not measured" % LABEL[m])
            continue
        best[m] = (c, w)
        anon = max(o["anon_kib"] for o in res[m]["cold"] + res[m]["warm"]) / 1024
        print("%-17s %7.3f (%6.3f + %6.3f) %7.3f (%6.3f + %6.3f) %14.1f"
              % (LABEL[m], total(c), c["load"], c["touch"], total(w), w["load"], w["touch"],
                 anon))
    if "devcache" not in best:
        return False
    missed = False
    for i, mode in enumerate(("cold", "warm")):
        others = {m: total(best[m][i]) for m in best if m != "devcache"}
        if not others:
            continue
        fast = min(others, key=others.get)
        mine = total(best["devcache"][i])
        ok = mine <= others[fast]
        missed |= not ok
        print("target: devcache <= fastest other (%s %.3f s) [%s %s]: %s (devcache %.3f s)"
              % (LABEL[fast], others[fast], key, mode, "met" if ok else "MISSED", mine))
    dc = res["devcache"]["cold"] + res["devcache"]["warm"]
    anon = max(o["anon_kib"] for o in dc) / 1024
    ok = anon <= TARGET_ANON_MIB
    missed |= not ok
    print("target: devcache RssAnon added <= %d MiB [%s]: %s (%.1f MiB)"
          % (TARGET_ANON_MIB, key, "met" if ok else "MISSED", anon))
    hit = min(o["hit"] for o in dc)
    per_gib = hit * 1000 / (size / GIB)
    ok = per_gib <= TARGET_HIT_MS_PER_GIB
    missed |= not ok
    print("target: second devcache.torch.load_file <= %.1f ms per GiB [%s]: %s (%.3f ms, "
          "%.3f ms/GiB, %d tensors)" % (TARGET_HIT_MS_PER_GIB, key, "met" if ok else "MISSED",
                                        hit * 1000, per_gib, dc[0]["hit_tensors"]))
    print("(info) dropping the module before it: %.1f ms (the discard of its pages "
          "included), then gc.collect() %.1f ms"
          % (min(o["drop"] for o in dc) * 1000, min(o["gc"] for o in dc) * 1000))
    return missed


def main(argv):
    if argv[:1] == ["--child"]:
        return child(argv[1], argv[2], argv[3])
    parsed = pybench.arguments(argv, __doc__.split("\n\n")[-1].strip())
    if parsed is None:
        return 2
    d, runs, sizes, methods = parsed
    if any(s not in pybench.SIZES for s in sizes) or any(m not in METHODS for m in methods):
        print("torchbench: -s takes 1G or 4G, -m one of %s" % ", ".join(METHODS),
              file=sys.stderr)
        return 2
    print("== Python package: checkpoints into a meta-device torch module (bench/torchbench.py)")
    ok, what = pybench.probe("import numpy, torch, devcache.torch; print(torch.__version__, "
                             "'mmap' in torch.load.__code__.co_varnames)")
    if not ok:
        print("SKIP everything: numpy, torch or devcache.torch is not importable (%s)" % what)
        return 0
    version, has_mmap = what.split()
    print("torch:      %s" % version)
    methods = methods or METHODS
    if has_mmap != "True" and "torch_mmap" in methods:
        print("torch.load(mmap): SKIP, torch %s has no torch.load(mmap=True) (2.1 or later)"
              % version)
        methods = [m for m in methods if m != "torch_mmap"]
    failed = missed = False
    for key in sizes or list(pybench.SIZES):
        f, m = run_size(key, d, methods, runs or pybench.SIZES[key]["runs"])
        failed |= f
        missed |= m
    if failed:
        return 2
    if missed and os.environ.get("BENCH_STRICT") == "yes":
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
