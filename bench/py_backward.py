#!/usr/bin/env python3
"""Host time of one training step (forward + backward) through the longattn
package against the bare C calls, per differentiable op (issue 14: the
package's fwd+bwd within 30 µs of the C level plus kernel time).

    PYTHONPATH=python /usr/bin/python3 bench/py_backward.py               # CPU
    PYTHONPATH=python python3 bench/py_backward.py --device cuda          # GPU machine

A step is `out = op(inputs); torch.autograd.grad(out, inputs, d_out)` at tiny
sizes (B 1, N 64, H 2, D 16, fp32; sparse T 16, L 64), so that the C work is
small and the host layers show. Columns, µs per step:
  C        the step's C calls (forward, backward) alone: the same C functions
           on the same prepared views and outputs, through ctypes (captured
           from one real step, as bench/py_overhead.py does);
  pkg      the step through the package as users call it (the default call
           path: longattn._fastcall where built);
  pkg ct   the same with longattn._tensor.use_fastcall(False) (ctypes);
  op       torch >= 2.4: the same step through torch.ops.longattn.* (the
           custom ops torch.compile traces, run eagerly);
  floor    torch's own cost of such a step: a no-op autograd.Function with
           the op's tensor inputs whose forward allocates the output and
           whose backward allocates the gradients (no C call);
  over     pkg - C: the host time the package adds to the C calls;
  ours     pkg - C - floor: what the package's Python adds beyond torch's
           autograd step.
CPU: one thread; times are the calling thread's CPU time (time.thread_time:
other processes on a loaded machine do not count; CPU autograd runs the
backward on the calling thread), the best of --repeats interleaved blocks of
--calls steps. CUDA: CUDA-event time of --calls back-to-back steps minus
their kernels' time (torch.profiler), per step, and the host time of the
issuing loop ("host"); C is then the bare calls' event time minus the same
kernel time.
"""
import argparse
import json
import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402

import longattn  # noqa: E402
from longattn import _lib as L  # noqa: E402
from longattn import _tensor  # noqa: E402
# the forward overhead bench's timers (CUDA events and host time per call, the
# profiler's kernel time per call) and its copies of a C call's views
from py_overhead import _event_us, _kernel_us, own_views  # noqa: E402

CUSTOM = longattn.ops.install_custom_ops() is not longattn.ops._Direct


def cases(device):
    """name -> (differentiable inputs, step forward through the package,
    the same through torch.ops.longattn (None without custom ops))."""
    g = torch.Generator().manual_seed(0)

    def r(*s, scale=1.0, shift=0.0):
        return (torch.randn(*s, generator=g) * scale + shift).to(device).requires_grad_()
    B, N, H, D = 1, 64, 2, 16
    q, k, v = r(B, N, H, D), r(B, N, H, D), r(B, N, H, D)
    W = (torch.rand(4, 4, generator=g) + 0.5).to(device).requires_grad_()
    Wc = (torch.rand(4, 4, generator=g) + 0.5).to(device).requires_grad_()
    conv = r(D, 3, 3, scale=0.1)
    cb, sp = r(D, scale=0.1), r(H * D, scale=0.1)
    convb = (torch.rand(H * D, 3, 3, generator=g) * 0.3 + 0.05).to(device).requires_grad_()
    focus = (torch.rand(H, generator=g) + 1.5).to(device).requires_grad_()
    qs, kv = r(16, 4, 24), r(64, 24)
    idx = (torch.arange(16 * 8, dtype=torch.int32) % 64).reshape(16, 8).to(device)
    ops = torch.ops.longattn if CUSTOM else None

    def op(fn):
        return fn if CUSTOM else None
    return {
        "softmax": ((q, k, v), lambda: longattn.softmax_attention(q, k, v),
                    op(lambda: ops.softmax_attention(q, k, v, False, None, None)[0])),
        "linear": ((q, k, v), lambda: longattn.linear_attention(q, k, v),
                   op(lambda: ops.linear_attention(q, k, v, None, None, "relu", False, True,
                                                   1e-6, 1.0, 64, False, None)[0])),
        "linear_causal": ((q, k, v), lambda: longattn.linear_attention(q, k, v, causal=True),
                          op(lambda: ops.linear_attention(q, k, v, None, None, "relu", True,
                                                          True, 1e-6, 1.0, 64, False,
                                                          None)[0])),
        "mhla": ((q, k, v, W), lambda: longattn.mhla(q, k, v, W, blocks=4),
                 op(lambda: ops.mhla(q, k, v, W, [], [4], "relu_eps", "per_query", 1e-6,
                                     1.0))),
        "mhla_causal": ((q, k, v, Wc), lambda: longattn.mhla_causal(q, k, v, Wc, chunk=16),
                        op(lambda: ops.mhla_causal(q, k, v, Wc, 16, "relu", "none", 1e-6,
                                                   None, None))),
        "focused": ((q, k, v, conv, cb, sp),
                    lambda: longattn.focused_attention(q, k, v, map=(8, 8), conv=conv,
                                                       conv_bias=cb, softplus_param=sp),
                    op(lambda: ops.focused_attention(q, k, v, conv, cb, sp, None, "flatten",
                                                     [8, 8], 3.0, 1e-6))),
        "focused_blog": ((q, k, v, convb, focus),
                         lambda: longattn.focused_attention(q, k, v, variant="blog",
                                                            map=(8, 8), conv=convb,
                                                            focus=focus),
                         op(lambda: ops.focused_attention(q, k, v, convb, None, None, focus,
                                                          "blog", [8, 8], 3.0, 1e-6))),
        "sparse": ((qs, kv), lambda: longattn.sparse_attention(qs, kv, idx, dv=16)[0],
                   op(lambda: ops.sparse_attention(qs, kv, idx, 16, None)[0])),
    }


def make_step(ins, fwd):
    o = fwd()
    d_out = torch.randn_like(o)

    def step():
        out = fwd()
        return out, torch.autograd.grad(out, ins, d_out)
    return step, o


def capture_c(step):
    """The C calls of one step through the ctypes path, as a zero-argument
    callable on copies of their views, and every tensor those views point
    into (the caller keeps them alive: the step frees some of them, e.g.
    the forward's saved lse, when its backward is done)."""
    seen, tensors = [], []
    orig_run, orig_launch = _tensor.Call.run, _tensor.Call.launch

    def spy_run(self, name, *args):
        # copies now: the views may live in the context's reused slots
        seen.append((name, own_views(args) + [self.ctx.handle]))
        return orig_run(self, name, *args)

    def spy_launch(self, name, lead, names, *xs):
        tensors.extend(xs)
        return orig_launch(self, name, lead, names, *xs)
    on = _tensor.fastcall_module() is not None
    _tensor.Call.run, _tensor.Call.launch = spy_run, spy_launch
    _tensor.use_fastcall(False)
    try:
        keep = (step(), tensors)
    finally:
        _tensor.Call.run, _tensor.Call.launch = orig_run, orig_launch
        _tensor.use_fastcall(on)
    calls = [(getattr(L.lib, name), own) for name, own in seen]

    def bare():
        for fn, args in calls:
            if fn(*args):
                raise RuntimeError("bare C call failed: %s" % L.lib.la_last_error())
    return bare, keep, [n for n, _ in seen]


class _Floor(torch.autograd.Function):
    """A no-op Function: the output and the gradients allocated, nothing run."""

    @staticmethod
    def forward(ctx, like, *xs):
        ctx.save_for_backward(*xs)
        return like.new_empty(like.shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d):
        xs = ctx.saved_tensors
        return (None,) + tuple(x.new_empty(x.shape) if n else None
                               for x, n in zip(xs, ctx.needs_input_grad[1:]))


def floor_step(ins, like):
    d_out = torch.randn_like(like)
    like = like.detach()

    def step():
        out = _Floor.apply(like, *ins)
        return out, torch.autograd.grad(out, ins, d_out)
    return step


def time_interleaved(fns, calls, repeats):
    """Best per-call thread CPU time (µs) of each (callable, fastcall on?)
    in alternating blocks."""
    best = [float("inf")] * len(fns)
    for f, fc in fns:
        _tensor.use_fastcall(fc)
        for _ in range(calls // 5 + 1):
            f()
    for _ in range(repeats):
        for i, (f, fc) in enumerate(fns):
            _tensor.use_fastcall(fc)
            t0 = time.thread_time()
            for _ in range(calls):
                f()
            best[i] = min(best[i], (time.thread_time() - t0) / calls * 1e6)
    _tensor.use_fastcall(True)
    return best


def bench_cpu(a, names):
    torch.set_num_threads(1)
    longattn.set_num_threads(1)
    fast = _tensor.fastcall_module() is not None
    rows = []
    for name, (ins, fwd, via_op) in cases("cpu").items():
        if name not in names:
            continue
        step, like = make_step(ins, fwd)
        bare, keep, cnames = capture_c(step)
        fns = [(bare, fast), (step, fast), (step, False), (floor_step(ins, like), fast)]
        if via_op is not None:
            fns.append((make_step(ins, via_op)[0], fast))
        t = time_interleaved(fns, a.calls, a.repeats)
        row = dict(op=name, c_us=t[0], pkg_us=t[1], pkg_ctypes_us=t[2], floor_us=t[3],
                   custom_op_us=t[4] if via_op is not None else None, c_calls=cnames)
        row["over_us"] = row["pkg_us"] - row["c_us"]
        row["ours_us"] = row["over_us"] - row["floor_us"]
        rows.append(row)
        del keep
    return rows


def bench_cuda(a, names):
    """Event and host times first for every op, kernel times in a second
    pass (a profiler session can slow the process afterwards)."""
    rows, keep_all = [], []
    for name, (ins, fwd, via_op) in cases("cuda").items():
        if name not in names:
            continue
        step, like = make_step(ins, fwd)
        bare, keep, cnames = capture_c(step)
        paths = [("pkg", step, True), ("pkg_ctypes", step, False), ("c", bare, True),
                 ("floor", floor_step(ins, like), True)]
        if via_op is not None:
            paths.append(("custom_op", make_step(ins, via_op)[0], True))
        row = dict(op=name, c_calls=cnames)
        for key, fn, fc in paths:
            _tensor.use_fastcall(fc)
            for _ in range(20):
                fn()
            ev, host = min((_event_us(fn, a.calls) for _ in range(a.alternations)),
                           key=lambda x: x[0])
            row[key + "_event_us"], row[key + "_host_us"] = ev, host
        _tensor.use_fastcall(True)
        rows.append(row)
        keep_all.append((step, keep))
    for row, (step, _) in zip(rows, keep_all):
        k = _kernel_us(step, a.calls)
        row["kernel_us"] = k
        row["over_us"] = row["pkg_event_us"] - row["c_event_us"]
        for key in ("pkg", "pkg_ctypes", "c", "custom_op"):
            if key + "_event_us" in row:
                row[key + "_us"] = row[key + "_event_us"] - k
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--ops", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--calls", type=int, default=200, help="steps per timed block")
    ap.add_argument("--repeats", type=int, default=15, help="CPU: interleaved blocks")
    ap.add_argument("--alternations", type=int, default=2, help="CUDA: rounds per path")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    known = list(cases("cpu"))
    names = a.ops.split(",") if a.ops else known
    bad = [n for n in names if n not in known]
    if bad:
        raise SystemExit("--ops: unknown %s (known: %s)" % (", ".join(bad), ", ".join(known)))
    print("# torch %s, python %s, %s; path: %s; custom ops: %s"
          % (torch.__version__, sys.version.split()[0], a.device, _tensor.fastcall_status(),
             "yes" if CUSTOM else "no"), flush=True)
    if a.device == "cuda":
        rows = bench_cuda(a, names)
        if not a.json:
            print("µs per step; event - kernel time (host: the issuing loop's time)")
            print("%-14s %8s %8s %8s %8s %8s %8s %8s %8s" % (
                "op", "kernels", "C", "pkg", "pkg ct", "op", "over", "host", "host C"))
            for r in rows:
                print("%-14s %8.1f %8.1f %8.1f %8.1f %8s %8.1f %8.1f %8.1f" % (
                    r["op"], r["kernel_us"], r["c_us"], r["pkg_us"], r["pkg_ctypes_us"],
                    "%.1f" % r["custom_op_us"] if "custom_op_us" in r else "-",
                    r["over_us"], r["pkg_host_us"], r["c_host_us"]))
    else:
        rows = bench_cpu(a, names)
        if not a.json:
            print("µs per step (thread CPU time, best of %d blocks of %d steps)"
                  % (a.repeats, a.calls))
            print("%-14s %8s %8s %8s %8s %8s %8s %8s" % (
                "op", "C", "pkg", "pkg ct", "op", "floor", "over", "ours"))
            for r in rows:
                print("%-14s %8.1f %8.1f %8.1f %8s %8.1f %8.1f %8.1f" % (
                    r["op"], r["c_us"], r["pkg_us"], r["pkg_ctypes_us"],
                    "-" if r["custom_op_us"] is None else "%.1f" % r["custom_op_us"],
                    r["floor_us"], r["over_us"], r["ours_us"]))
    if a.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
