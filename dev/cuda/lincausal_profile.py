#!/usr/bin/env python3
"""Where the time of causal linear attention fwd+bwd through the package goes
(issue 14; GPU machine). bf16 B1 H12 N32K D128, identity, no normalize,
scale 1/sqrt(D) (the issue's row).

Three ways of making the same call, each timed with CUDA events around the
step (medians of --reps after warm-ups) and by host wall time per step:
  autograd  longattn.linear_attention + torch.autograd.grad (what users call;
            on torch >= 2.4 the torch.library custom ops)
  function  longattn.autograd.LinearAttentionFunction directly (no custom op)
  direct    the forward without grad + longattn._backward's
            linear_attention_backward on the calling thread (no autograd)
then, for each, torch.profiler (CPU + CUDA) over one step: the kernels'
device times and the step's timeline (host calls of 20 us or more, every
kernel with its start relative to the step), so that a gap between kernels
is named by the host call that was running.

    PYTHONPATH=python python3 dev/cuda/lincausal_profile.py [--reps 20] [--fla | --only-fla]
"""
import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import longattn
from longattn import _backward, autograd, ops


def median_ms(fn, reps, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ev, host = [], []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t = time.perf_counter()
        a.record()
        fn()
        b.record()
        host.append((time.perf_counter() - t) * 1e3)
        b.synchronize()
        ev.append(a.elapsed_time(b))
    ev.sort()
    host.sort()
    return ev[len(ev) // 2], host[len(host) // 2]


def timeline(fn, label, top=45):
    """kernel sums and the step's timeline from torch.profiler"""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("step"):
            fn()
        torch.cuda.synchronize()
    evs = prof.events()
    step = [e for e in evs if e.name == "step"]
    t0 = step[0].time_range.start if step else min(e.time_range.start for e in evs)
    kern, rows = {}, []
    for e in evs:
        dev = str(getattr(e, "device_type", "")).endswith("CUDA")
        d = e.time_range.end - e.time_range.start
        if dev:
            k = kern.setdefault(e.name[:60], [0, 0.0])
            k[0] += 1
            k[1] += d
            rows.append((e.time_range.start - t0, d, "gpu", e.name[:70]))
        elif d >= 20 or e.name.startswith("cuda") and d >= 5:
            rows.append((e.time_range.start - t0, d, "cpu", e.name[:70]))
    tot = sum(v[1] for v in kern.values())
    print(f"[{label}] kernels {tot / 1e3:.3f} ms:", flush=True)
    for n, (c, t) in sorted(kern.items(), key=lambda x: -x[1][1]):
        print(f"   {t / 1e3:8.3f} ms  x{c}  {n}")
    rows = sorted(r for r in rows if r[0] >= 0)
    print(f"[{label}] timeline (us from the step's start; cpu calls >= 20 us, cuda* >= 5 us):")
    for st, d, kind, n in rows[:top]:
        print(f"   {st:9.1f} {d:8.1f} {kind} {n}")
    if len(rows) > top:
        print(f"   ... {len(rows) - top} more; last ends at "
              f"{max(r[0] + r[1] for r in rows):.1f} us")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--fla", action="store_true")
    ap.add_argument("--only-fla", action="store_true", help="fla's row alone")
    a = ap.parse_args()
    H, D, n = 12, 128, a.n
    bf = torch.bfloat16
    q, k, v = (torch.randn(1, n, H, D, device="cuda", dtype=bf, requires_grad=True)
               for _ in range(3))
    g = torch.randn(1, n, H, D, device="cuda", dtype=bf)
    opts = dict(feature="identity", causal=True, normalize=False, eps=1e-6, scale=D ** -0.5,
                chunk=64, output_final_state=False)
    bopts = {x: opts[x] for x in ("feature", "causal", "normalize", "eps", "scale", "chunk")}

    def step_autograd():
        o = longattn.linear_attention(q, k, v, feature="identity", causal=True,
                                      normalize=False, scale=D ** -0.5)
        return torch.autograd.grad(o, (q, k, v), g)

    def step_function():
        o = autograd.apply("linear_attention", ops._linear_attention, opts, q, k, v, None, None)
        return torch.autograd.grad(o, (q, k, v), g)

    def step_direct():
        with torch.no_grad():
            o = ops._linear_attention(q, k, v, None, None, **opts)
            return _backward.linear_attention_backward(q, k, v, g, out=o, **bopts)[:3]

    def fwd_only():
        with torch.no_grad():
            return ops._linear_attention(q, k, v, None, None, **opts)

    if a.only_fla:
        a.fla = True
    ref = None if a.only_fla else step_autograd()
    for name, f in (("function", step_function), ("direct", step_direct)):
        if ref is None:
            break
        r = f()
        same = all(torch.equal(x, y) for x, y in zip(ref, r))
        print(f"{name}: gradients {'bit-identical to' if same else 'DIFFER from'} autograd's")
    for name, f in (() if a.only_fla else (("fwd only", fwd_only), ("autograd", step_autograd),
                    ("function", step_function), ("direct", step_direct))):
        ms, host = median_ms(f, a.reps)
        print(f"{name}: {ms:.3f} ms (CUDA events, median of {a.reps}); host {host:.3f} ms/step",
              flush=True)
    for name, f in (() if a.only_fla else (("autograd", step_autograd), ("direct", step_direct))):
        timeline(f, name)
    if a.fla:
        try:
            from fla.ops.linear_attn import chunk_linear_attn
        except Exception as e:  # noqa: BLE001
            print(f"fla: skipped ({type(e).__name__}: {e})")
            return

        def step_fla():
            o = chunk_linear_attn(q, k, v, normalize=False)
            o = o[0] if isinstance(o, tuple) else o
            return torch.autograd.grad(o, (q, k, v), g)
        ms, host = median_ms(step_fla, a.reps)
        print(f"fla chunk_linear_attn fwd+bwd: {ms:.3f} ms (CUDA events, median of {a.reps}); "
              f"host {host:.3f} ms/step", flush=True)
        timeline(step_fla, "fla", top=0)


if __name__ == "__main__":
    main()
