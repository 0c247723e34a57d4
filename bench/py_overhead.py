"""Python call overhead of the longattn operators (shared/TRAINING.md §3:
at most 15 µs per call above the kernels' own time).

    PYTHONPATH=python python3 bench/py_overhead.py                 # CPU
    PYTHONPATH=python python3 bench/py_overhead.py --device cuda   # GPU machine

CPU: the time of one call through the Python API (torch tensors, no grad,
one thread; the best of 25 runs of --calls calls), minus the time of the
same C call measured in C (also the best of 25 runs) by
bench/py_overhead_c.c (compiled here against $LA_BUILD/liblongattn.so) at
the same sizes (B 1, N 64, H 2, D 16; indexers T 16, L 256). Since that
difference is noisy on a loaded machine, a second estimate is measured in
one process, alternating blocks: the Python call against the bare ctypes
call of the same C function with the same prepared arguments (a lower
bound: the ctypes call's own argument conversion, about 1 µs, is overhead
too).
CUDA: over --calls back-to-back calls, CUDA-event time minus the kernels'
time reported by torch.profiler (the host-bound part of the wall time),
divided by the number of calls; sizes as on the CPU unless --n is given.
Every op's event and host times are taken before the first profiler
session (the kernel times in a second pass), and the host time of the
issuing loop is printed too ("host µs"; it shows the host cost also where
the GPU time hides it in the event time).
--alternations N: the timed paths alternate N times per op (the best
counts), against the device host's slow spells. --breakdown (CUDA): also
the host time of each piece of one call (the whole call, the extension on
fixed views, the outputs' new_empty, the bare ctypes call).
Both call paths of the package are timed: the default one (the compiled
extension longattn._fastcall where `make pyext` built it) and ctypes
("ctypes path" / "ovh ct" columns, longattn._tensor.use_fastcall(False)).
CPU times are the calling thread's CPU time (time.thread_time,
CLOCK_THREAD_CPUTIME_ID), not wall time, so that other processes on a
loaded machine do not count. Prints a table (and --json).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402

import longattn  # noqa: E402
from longattn import _tensor  # noqa: E402,F401  (longattn._tensor: the call paths)

# The default call path: the compiled extension where it is built.
FASTCALL = _tensor.fastcall_module() is not None

BUILD = os.environ.get("LA_BUILD", "build")
N, H, D, T, L = 64, 2, 16, 16, 256


def make_calls(device, n=N):
    g = torch.Generator().manual_seed(0)

    def r(*s):
        return torch.randn(*s, generator=g).to(device)
    q, k, v = r(1, n, H, D), r(1, n, H, D), r(1, n, H, D)
    W = (torch.rand(4, 4, generator=g) + 0.5).to(device)
    Wc = (torch.rand(64, 64, generator=g) + 0.5).to(device)
    sc = r(T, L)
    kv, qs = r(L, 24), r(T, H, 24)
    idx = (torch.arange(T * 64, dtype=torch.int32) % L).reshape(T, 64).to(device)
    qi, ki, w = r(T, H, 16), r(L, 16), r(T, H).abs()
    return {
        "softmax": lambda: longattn.softmax_attention(q, k, v),
        "linear": lambda: longattn.linear_attention(q, k, v),
        "linear_causal": lambda: longattn.linear_attention(q, k, v, causal=True),
        "mhla": lambda: longattn.mhla(q, k, v, W, blocks=4),
        "mhla_causal": lambda: longattn.mhla_causal(q, k, v, Wc, chunk=16),
        "topk": lambda: longattn.topk(sc, 64),
        "sparse": lambda: longattn.sparse_attention(qs, kv, idx, dv=16),
        "dsa": lambda: longattn.dsa_topk(qi, ki, w, topk=64),
    }


def _selected(calls, ops):
    """The calls named in the comma-separated `ops` (all when empty)."""
    if not ops:
        return calls
    names = ops.split(",")
    unknown = [x for x in names if x not in calls]
    if unknown:
        raise SystemExit("--ops: unknown %s (known: %s)" % (", ".join(unknown), ", ".join(calls)))
    return {x: calls[x] for x in names}


def time_python(fn, calls, repeats=25):
    for _ in range(calls // 10 + 1):
        fn()
    best = []
    for _ in range(repeats):
        t0 = time.thread_time()
        for _ in range(calls):
            fn()
        best.append((time.thread_time() - t0) / calls * 1e6)
    return min(best)


def c_harness():
    exe = os.path.join(tempfile.mkdtemp(prefix="la_pyovh_"), "py_overhead_c")
    lib = os.path.join(ROOT, BUILD)
    subprocess.run(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "include"),
                    os.path.join(ROOT, "bench", "py_overhead_c.c"), "-o", exe, "-L" + lib,
                    "-llongattn", "-Wl,-rpath," + lib], check=True)
    return exe


def time_c(exe, op, calls, repeats=25):
    out = []
    for _ in range(repeats):
        r = subprocess.run([exe, op, str(calls)], capture_output=True, text=True, check=True)
        out.append(float(r.stdout.split()[1]))
    return min(out)


def capture_direct(fn):
    """The C call that fn makes, as a zero-argument callable with the very
    same prepared arguments (the views, params and context of one real
    call), plus fn's result kept alive (its outputs are written again)."""
    from longattn import _tensor
    seen = []
    orig = _tensor.Call.run

    def spy(self, name, *args):
        seen.append((name, args + (self.ctx.handle,)))
        return orig(self, name, *args)
    _tensor.Call.run = spy
    was_on = _tensor.fastcall_module() is not None
    _tensor.use_fastcall(False)  # the ctypes path, whose run() sees the views
    try:
        keep = fn()
    finally:
        _tensor.Call.run = orig
        _tensor.use_fastcall(was_on)
    name, args = seen[-1]
    own = own_views(args)
    cfn = getattr(longattn._lib.lib, name)
    return (lambda: cfn(*own)), keep


def own_views(args):
    """A C call's arguments with each la_tensor view replaced by a copy of
    its own: the views live in per-thread slots that the next Python call
    rewrites."""
    import ctypes
    L = longattn._lib
    own = []
    for x in args:
        obj = getattr(x, "_obj", None)
        if isinstance(obj, L.la_tensor):
            x = ctypes.byref(L.la_tensor.from_buffer_copy(obj))
        own.append(x)
    return own


def _path(fastcall):
    """Select the package's call path for the next block: True the compiled
    extension (where built), False ctypes, None leave as is."""
    if fastcall is not None:
        longattn._tensor.use_fastcall(fastcall)


def time_interleaved(fns, calls, repeats=40, paths=None):
    """Best per-call time of each callable, timed in alternating blocks so
    that load from other processes hits all of them alike; paths[i] is the
    call path of fns[i]'s blocks (see _path)."""
    paths = paths or [None] * len(fns)
    best = [float("inf")] * len(fns)
    for f, p in zip(fns, paths):
        _path(p)
        for _ in range(calls // 10 + 1):
            f()
    for _ in range(repeats):
        for i, f in enumerate(fns):
            _path(paths[i])
            t0 = time.thread_time()
            for _ in range(calls):
                f()
            best[i] = min(best[i], (time.thread_time() - t0) / calls * 1e6)
    return best


def bench_cpu(a):
    torch.set_num_threads(1)
    longattn.set_num_threads(1)
    exe = None if a.pair_only else c_harness()
    rows = []
    with torch.no_grad():
        for op, fn in _selected(make_calls("cpu"), a.ops).items():
            direct, keep = capture_direct(fn)
            py, pc, dc = time_interleaved([fn, fn, direct], a.calls, a.repeats,
                                          [FASTCALL, False, None])
            _path(FASTCALL)
            c = float("nan") if exe is None else time_c(exe, op, a.calls)
            rows.append(dict(op=op, python_us=py, c_us=c, overhead_us=py - c, direct_us=dc,
                             overhead_vs_direct_us=py - dc, ctypes_path_us=pc,
                             ctypes_path_vs_direct_us=pc - dc))
            del keep
    return rows


def _event_us(fn, calls, rounds=3):
    """Median over rounds of the CUDA-event time of `calls` back-to-back
    fn() calls, per call (µs), and the median host time of the issuing loop
    alone (perf_counter before the synchronize: what the host spends per
    call, whether or not the GPU keeps up)."""
    ev, host = [], []
    for _ in range(rounds):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        s.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        e.record()
        torch.cuda.synchronize()
        ev.append(s.elapsed_time(e) * 1e3 / calls)
        host.append((t1 - t0) * 1e6 / calls)
    return statistics.median(ev), statistics.median(host)


def _kernel_us(fn, calls):
    """The GPU time of the kernels (and memsets/copies) of `calls` fn() calls
    from torch.profiler, per call (µs): the sum of their self device time."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    tot = 0.0
    for x in prof.key_averages():
        t = getattr(x, "self_device_time_total", None)
        tot += getattr(x, "self_cuda_time_total", 0.0) if t is None else t
    return tot / calls


def capture_launch(fn):
    """fn's Call.launch arguments, as a zero-argument call of
    longattn._fastcall with them (the extension alone, on fixed views and
    outputs), plus the shapes and dtypes of fn's outputs; None when the
    extension is not in use."""
    fc = _tensor.fastcall_module()
    if fc is None:
        return None, []
    seen = []
    orig = _tensor.Call.launch

    def spy(self, fn_name, lead, names, *xs):
        seen.append((self, fn_name, lead, names, xs))
        return orig(self, fn_name, lead, names, *xs)
    _tensor.Call.launch = spy
    try:
        out = fn()
    finally:
        _tensor.Call.launch = orig
    c, fn_name, lead, names, xs = seen[-1]
    addr, nparams = _tensor._address(fn_name)
    ctx = c.ctx
    dev = c.like_index if c.cuda else -1
    codes = _tensor._TORCH_CODES
    outs = out if isinstance(out, tuple) else (out,)
    outs = [o for o in outs if isinstance(o, torch.Tensor)]
    return (lambda: fc.call(addr, nparams, ctx.addr, dev, codes, names, lead, *xs)), outs


def _host_us(fn, calls, rounds=3):
    """Best over rounds of the host time per call of `calls` fn() calls
    (perf_counter; a synchronize after each round), µs."""
    best = float("inf")
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) * 1e6 / calls)
        torch.cuda.synchronize()
    return best


def breakdown_cuda(a):
    """Host time per call of the pieces of each op's Python call: the whole
    call, the extension's call alone (fixed views), the new_empty of its
    outputs, the bare ctypes call; the wrapper's own Python is the rest."""
    rows = []
    with torch.no_grad():
        for op, fn in _selected(make_calls("cuda", a.n), a.ops).items():
            fn()
            ext, outs = capture_launch(fn)
            direct, keep = capture_direct(fn)
            like = outs[0] if outs else None

            def empties():
                for o in outs:
                    like.new_empty(o.shape, dtype=o.dtype)
            full = _host_us(fn, a.calls)
            e = _host_us(ext, a.calls) if ext else float("nan")
            alloc = _host_us(empties, a.calls)
            bare = _host_us(direct, a.calls)
            rows.append(dict(op=op, api_host_us=full, ext_host_us=e, alloc_host_us=alloc,
                             bare_ctypes_host_us=bare, wrapper_us=full - e - alloc))
            del keep
    return rows


def bench_cuda(a, emit=lambda row: None):
    """Per op: CUDA-event time of --calls calls through the Python API, minus
    the kernels' time (the issue's definition of the overhead); the same for
    the bare ctypes call of the same C function with the same prepared
    arguments (the C library's own host time per call: launches, argument
    checks); their difference is what the Python layer adds. Also the host
    time of each issuing loop ("host µs"): where the GPU is the bottleneck
    (kernels longer than the host work) the event difference hides the host
    cost, the host time does not.

    Every op's event and host times are measured first, before the first
    torch.profiler session: a profiler session (CUPTI) can leave the process
    slower afterwards, which would charge later ops' Python calls (torch
    ops) but not their bare C calls. The kernel times come in a second pass."""
    rows = []
    keep_all = []
    with torch.no_grad():
        calls = _selected(make_calls("cuda", a.n), a.ops)
        for op, fn in calls.items():
            for _ in range(50):
                fn()
            torch.cuda.synchronize()
            direct, keep = capture_direct(fn)
            st = direct()
            if st != 0:
                raise RuntimeError("%s: the bare C call returned status %s" % (op, st))
            for _ in range(50):
                direct()
            torch.cuda.synchronize()
            # alternate the three, --alternations times, against drift and the
            # device host's slow spells (they last a fraction of a second and
            # hit whatever is being timed, C and Python alike): the Python API
            # on its default path, the Python API through ctypes, the bare C
            # call; each the best of its alternations
            w, p, d = [], [], []
            for _ in range(a.alternations):
                w.append(_event_us(fn, a.calls))
                _path(False)
                p.append(_event_us(fn, a.calls))
                _path(FASTCALL)
                d.append(_event_us(direct, a.calls))
            rows.append(dict(op=op, event_us=min(x[0] for x in w), host_us=min(x[1] for x in w),
                             ctypes_path_event_us=min(x[0] for x in p),
                             ctypes_path_host_us=min(x[1] for x in p),
                             ctypes_event_us=min(x[0] for x in d),
                             ctypes_host_us=min(x[1] for x in d)))
            keep_all.append((fn, keep))
        for r, (fn, keep) in zip(rows, keep_all):
            kern_us = _kernel_us(fn, a.calls)
            wall, dwall = r["event_us"], r["ctypes_event_us"]
            r.update(kernel_us=kern_us, overhead_us=max(wall - kern_us, 0.0),
                     ctypes_path_overhead_us=max(r["ctypes_path_event_us"] - kern_us, 0.0),
                     c_overhead_us=max(dwall - kern_us, 0.0),
                     python_minus_ctypes_us=wall - dwall,
                     host_python_minus_ctypes_us=r["host_us"] - r["ctypes_host_us"])
            emit(r)
    del keep_all
    return rows


def _print_cuda_row(r):
    print("%-14s %8.2f %8.2f %9.2f %9.2f %8.2f %8.2f %8.2f %8.2f"
          % (r["op"], r["event_us"], r["kernel_us"], r["overhead_us"],
             r["ctypes_path_overhead_us"], r["c_overhead_us"], r["host_us"],
             r["ctypes_path_host_us"], r["ctypes_host_us"]), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--n", type=int, default=N, help="tokens (CUDA mode)")
    ap.add_argument("--ops", default="",
                    help="comma-separated subset of the ops (default: all)")
    ap.add_argument("--alternations", type=int, default=2,
                    help="CUDA: alternations of the three timed paths per op (best of them)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--breakdown", action="store_true",
                    help="CUDA: also the host time of each piece of the Python call")
    ap.add_argument("--pair-only", action="store_true",
                    help="CPU: only the in-process Python / bare ctypes pair (no C harness)")
    ap.add_argument("--repeats", type=int, default=40,
                    help="CPU: interleaved blocks of the in-process pair")
    a = ap.parse_args()
    if a.device == "cuda":
        # rows are printed after the second pass (kernel times), one per op
        if not a.json:
            print("torch %s, python %s, cuda (%s), %d calls per measurement; path: %s"
                  % (torch.__version__, sys.version.split()[0], torch.cuda.get_device_name(),
                     a.calls, longattn._tensor.fastcall_status()))
            print("overhead = event - kernel time: ovh (default path), ovh ct (the Python API "
                  "through ctypes), C ovh (the bare C call); host = the issuing loop's time")
            print("%-14s %8s %8s %9s %9s %8s %8s %8s %8s" % (
                "op", "event", "kernel", "ovh", "ovh ct", "C ovh", "host", "host ct",
                "host C"), flush=True)
        rows = bench_cuda(a, emit=(lambda r: None) if a.json else _print_cuda_row)
        if a.json:
            print(json.dumps(rows, indent=1))
        if a.breakdown:
            print("host µs per call: api = the whole call; ext = longattn._fastcall alone on "
                  "fixed views; alloc = new_empty of the outputs; ctypes = the bare ctypes "
                  "call; wrapper = api - ext - alloc")
            print("%-14s %8s %8s %8s %8s %8s" % ("op", "api", "ext", "alloc", "ctypes",
                                                "wrapper"))
            for r in breakdown_cuda(a):
                print("%-14s %8.2f %8.2f %8.2f %8.2f %8.2f"
                      % (r["op"], r["api_host_us"], r["ext_host_us"], r["alloc_host_us"],
                         r["bare_ctypes_host_us"], r["wrapper_us"]), flush=True)
        return
    rows = bench_cpu(a)
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print("torch %s, %s, %d calls per measurement; path: %s"
          % (torch.__version__, a.device, a.calls, longattn._tensor.fastcall_status()))
    print("%-14s %10s %10s %12s %14s %14s %16s" % ("op", "python µs", "C µs", "overhead µs",
                                                   "ctypes call µs", "py - ctypes µs",
                                                   "ctypes path - c"))
    for r in rows:
        print("%-14s %10.2f %10.2f %12.2f %14.2f %14.2f %16.2f"
              % (r["op"], r["python_us"], r["c_us"], r["overhead_us"], r["direct_us"],
                 r["overhead_vs_direct_us"], r["ctypes_path_vs_direct_us"]))


if __name__ == "__main__":
    main()
