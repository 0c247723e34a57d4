#!/usr/bin/env python3
"""Backward passes on the GPU, ours beside the peers, in one run (issue 14).

Ours: build-gpu/gpu_backward_driver (bench/gpu_backward_driver.cu) times the
library's forward and the CUDA backward entry points with CUDA events
(medians; the C-level time) and reports the backward's peak workspace from
the library's pool; peer "ours_py" times the same through the longattn
package's autograd (forward + torch.autograd.grad), as users call it.
Peers, each in its own process under a timeout: PyTorch SDPA backward,
plain-PyTorch autograd (bf16 einsum formulations, eager and torch.compile)
of linear causal attention, MHLA and FLatten, and fla's chunk_linear_attn
when `import fla` works (else a printed reason).

    python3 bench/gpu_backward.py [--driver build-gpu/gpu_backward_driver]
                                  [--peers sdpa,linear,mhla,focused,fla] [--no-compile]
"""
import argparse
import json
import os
import subprocess
import sys

from benchlib import cuda_median_ms

OURS = ["softmax8k", "softmax8k_causal", "softmax32k", "softmax32k_causal", "linear_causal32k", "linear_causal32k_norm", "mhla_causal32k", "mhla_wan", "mhla_1d64k",
        "focused128", "sparse256", "sparse4k", "sparse4k_atomic", "sparse4k_portable"]


def run_ours(driver, reps, which):
    rows = []
    for w in which:
        try:
            r = subprocess.run([driver, w, str(reps)], capture_output=True, text=True, timeout=120)
            line = [l for l in r.stdout.splitlines() if l.startswith("{")]
            rows.append(json.loads(line[-1]) if line else {"name": w, "status": "no output",
                                                           "error": r.stderr[-300:]})
        except subprocess.TimeoutExpired:
            rows.append({"name": w, "status": "timeout (120 s)"})
        print("ours", json.dumps(rows[-1]), flush=True)
    return rows


# ---------------------------------------------------------------- peers (subprocess)
timeit = cuda_median_ms


def peer_sdpa():
    import torch
    import torch.nn.functional as F
    for n in (8192, 32768):
        for causal in (False, True):
            q, k, v = (torch.randn(1, 12, n, 128, device="cuda", dtype=torch.bfloat16,
                                   requires_grad=True) for _ in range(3))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            g = torch.randn_like(o)
            ms = timeit(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))
            fl = 2.5 * 4 * 12 * n * n * 128 * (0.5 if causal else 1)
            print(f"peer sdpa_bwd N={n} causal={int(causal)}: {ms:.3f} ms "
                  f"{fl / ms / 1e9:.0f} TFLOP/s", flush=True)


def lin_causal_torch(q, k, v, C=64):
    """chunkwise causal linear attention (no normalizer), q k v [B,H,N,D] bf16"""
    import torch
    B, H, N, D = q.shape
    q = q * D ** -0.5
    qc, kc, vc = (x.view(B, H, N // C, C, -1) for x in (q, k, v))
    kv = torch.einsum("bhncd,bhnce->bhnde", kc, vc)
    S = torch.cumsum(kv.float(), dim=2) - kv.float()
    inter = torch.einsum("bhncd,bhnde->bhnce", qc, S.to(q.dtype))
    a = torch.einsum("bhncd,bhnsd->bhncs", qc, kc)
    mask = torch.ones(C, C, device=q.device, dtype=torch.bool).tril()
    intra = torch.einsum("bhncs,bhnse->bhnce", a.masked_fill(~mask, 0), vc)
    return (inter + intra).view(B, H, N, -1)


def peer_linear(compile_too):
    import torch
    n = 32768
    q, k, v = (torch.randn(1, 12, n, 128, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    g = torch.randn(1, 12, n, 128, device="cuda", dtype=torch.bfloat16)
    fns = [("eager", lin_causal_torch)]
    if compile_too:
        fns.append(("compiled", torch.compile(lin_causal_torch)))
    for name, f in fns:
        def step():
            o = f(q, k, v)
            torch.autograd.grad(o, (q, k, v), g)
        print(f"peer linear_causal_torch_{name} N={n} fwd+bwd: {timeit(step):.3f} ms", flush=True)


def peer_fla():
    try:
        import torch
        from fla.ops.linear_attn import chunk_linear_attn
    except Exception as e:  # noqa: BLE001
        print(f"peer fla: skipped ({type(e).__name__}: {e})", flush=True)
        return
    n = 32768
    q, k, v = (torch.randn(1, n, 12, 128, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    g = torch.randn(1, n, 12, 128, device="cuda", dtype=torch.bfloat16)

    def step():
        o = chunk_linear_attn(q, k, v, normalize=False)
        o = o[0] if isinstance(o, tuple) else o
        torch.autograd.grad(o, (q, k, v), g)
    print(f"peer fla_chunk_linear_attn N={n} fwd+bwd: {timeit(step):.3f} ms", flush=True)


def mhla_torch(q, k, v, W, grid, blocks):
    """plain MHLA (normalize none, relu_eps), q k v [B,H,N,D], raster order in and out"""
    import torch
    B, H, N, D = q.shape
    sh = []
    for n_, g_ in zip(grid, blocks):
        sh += [g_, n_ // g_]
    perm_in = [0, 1] + [2 + 2 * i for i in range(len(grid))] + [3 + 2 * i for i in range(len(grid))] + [2 + 2 * len(grid)]

    def blk(x):
        x = x.view(B, H, *sh, x.shape[-1]).permute(*perm_in)
        return x.reshape(B, H, len(W), -1, x.shape[-1])
    qf, kf = torch.relu(q) + 1e-6, torch.relu(k) + 1e-6
    qb, kb, vb = blk(qf), blk(kf), blk(v)
    S = torch.einsum("bhmtd,bhmte->bhmde", kb, vb)
    St = torch.einsum("im,bhmde->bhide", W.to(S.dtype), S)
    o = torch.einsum("bhitd,bhide->bhite", qb, St)
    inv = [0] * len(perm_in)
    for i, p in enumerate(perm_in):
        inv[p] = i
    o = o.reshape(B, H, *[blocks[i] for i in range(len(grid))], *[grid[i] // blocks[i] for i in range(len(grid))], -1)
    return o.permute(*inv).reshape(B, H, N, -1)


def peer_mhla(compile_too):
    import torch
    for name, grid, blocks in (("wan", (21, 30, 50), (3, 5, 10)), ("1d64k", (65536,), (16,))):
        n = 1
        for x in grid:
            n *= x
        M = 1
        for x in blocks:
            M *= x
        q, k, v = (torch.randn(1, 12, n, 128, device="cuda", dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        W = torch.rand(M, M, device="cuda", requires_grad=True)
        g = torch.randn(1, 12, n, 128, device="cuda", dtype=torch.bfloat16)
        fns = [("eager", mhla_torch)]
        if compile_too:
            fns.append(("compiled", torch.compile(mhla_torch)))
        for fname, f in fns:
            def step():
                o = f(q, k, v, W, grid, blocks)
                torch.autograd.grad(o, (q, k, v, W), g)
            print(f"peer mhla_torch_{fname} {name} fwd+bwd: {timeit(step):.3f} ms", flush=True)


def flatten_torch(q, k, v, sp, conv_w, conv_b, hm, wm, p=3.0):
    """FLatten core, q k v [B,N,C] bf16 (C = H*D), H = 12"""
    import torch
    import torch.nn.functional as F
    B, N, C = q.shape
    H = 12
    D = C // H
    s = F.softplus(sp)
    q = (F.relu(q) + 1e-6) / s
    k = (F.relu(k) + 1e-6) / s
    qn, kn = q.norm(dim=-1, keepdim=True), k.norm(dim=-1, keepdim=True)
    q, k = q ** p, k ** p
    q = q / q.norm(dim=-1, keepdim=True) * qn
    k = k / k.norm(dim=-1, keepdim=True) * kn
    q, k, v = (x.reshape(B, N, H, D).transpose(1, 2) for x in (q, k, v))
    z = 1 / (torch.einsum("bhnd,bhd->bhn", q, k.sum(dim=2) / N) + 1e-6)
    kv = torch.einsum("bhnd,bhne->bhde", k, v) / N
    o = torch.einsum("bhnd,bhde->bhne", q, kv) * z[..., None]
    vv = v.reshape(B * H, hm, wm, D).permute(0, 3, 1, 2)
    o = o + F.conv2d(vv, conv_w, conv_b, padding=conv_w.shape[-1] // 2, groups=D).reshape(B, H, D, N).transpose(2, 3)
    return o.transpose(1, 2).reshape(B, N, C)


def peer_focused(compile_too):
    import torch
    hm = wm = 128
    n, C = hm * wm, 12 * 128
    q, k, v = (torch.randn(1, n, C, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    sp = torch.zeros(C, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    cw = (0.2 * torch.randn(128, 1, 5, 5, device="cuda")).to(torch.bfloat16).requires_grad_()
    cb = torch.zeros(128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(1, n, C, device="cuda", dtype=torch.bfloat16)
    fns = [("eager", flatten_torch)]
    if compile_too:
        fns.append(("compiled", torch.compile(flatten_torch)))
    for fname, f in fns:
        def step():
            o = f(q, k, v, sp, cw, cb, hm, wm)
            torch.autograd.grad(o, (q, k, v, sp, cw, cb), g)
        print(f"peer flatten_torch_{fname} 128x128 fwd+bwd: {timeit(step):.3f} ms", flush=True)


def kernel_ms(fn):
    """The CUDA kernels' time of one fn() call from torch.profiler (the sum of
    every kernel's, memset's and memcpy's self device time), in ms."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    tot = 0.0
    for ev in prof.key_averages():
        t = getattr(ev, "self_device_time_total", None)
        if t is None:
            t = getattr(ev, "self_cuda_time_total", 0.0)
        tot += t
    return tot / 1e3


def host_ms(fn, reps=5):
    """Median host time of one fn() call in ms: from its start until it
    returns, the GPU idle before each (synchronized). For a training step
    that is the host's critical path: the forward's Python and launches,
    then torch.autograd.grad until autograd's device thread has run the
    backward's Python and launches (the kernels are not waited for)."""
    import time
    import torch
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    ts.sort()
    return ts[len(ts) // 2]


def timeline(fn, tag, top=12):
    """Where one fn() call's time goes (torch.profiler, CPU and CUDA): every
    kernel / memset / memcpy in launch order with its device time and the
    idle gap before it, the span from the first to the last, and the CUDA
    runtime calls by total host time; lines start with `tag`."""
    import json
    import tempfile
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        ev = json.load(open(f.name))
    timeline_report(ev["traceEvents"] if isinstance(ev, dict) else ev, tag, top)


def timeline_report(ev, tag, top=12):
    """timeline's printout from a chrome trace's event list"""
    dev = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memset",
                                                                          "gpu_memcpy")),
                 key=lambda e: e["ts"])
    if not dev:
        print(f"{tag} no device events")
        return
    t0, end, busy, gaps = dev[0]["ts"], dev[0]["ts"], 0.0, 0.0
    for e in dev:
        gap = max(0.0, e["ts"] - end)
        gaps += gap
        busy += e["dur"]
        end = max(end, e["ts"] + e["dur"])
        name = e["name"].replace("(anonymous namespace)::", "").split("(")[0][-58:]
        print(f"{tag} +{e['ts'] - t0:8.1f} us gap {gap:7.1f} dur {e['dur']:7.1f}  {name}")
    print(f"{tag} span {end - t0:.1f} us: device busy {busy:.1f}, idle gaps {gaps:.1f} "
          f"({len(dev)} device events)")
    rt = {}
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver"):
            n, c = rt.get(e["name"], (0.0, 0))
            rt[e["name"]] = (n + e["dur"], c + 1)
    for n, (d, c) in sorted(rt.items(), key=lambda x: -x[1][0])[:top]:
        print(f"{tag} host {n}: {c} calls, {d:.1f} us")
    cpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "python_function")]
    if cpu:
        c0 = min(e["ts"] for e in cpu)
        print(f"{tag} host: {t0 - c0:.1f} us from the first host op to the first device event")


def ours_py_cases(dev="cuda", small=False):
    """(name, differentiable inputs, forward) of the driver's workloads, as a
    user calls them through the longattn package (bf16, B1 H12 D128; the
    parameters of focused attention and the mixing in float32, as the
    driver). small=True: tiny sizes of the same calls (a CPU smoke test)."""
    import torch
    import longattn
    bf = torch.bfloat16
    H, D = (2, 16) if small else (12, 128)

    def t(*shape, dtype=bf):
        return torch.randn(*shape, device=dev, dtype=dtype, requires_grad=True)
    for n, causal in ((8192, False), (8192, True), (32768, False), (32768, True)):
        n = n // 256 if small else n
        q, k, v = t(1, n, H, D), t(1, n, H, D), t(1, n, H, D)
        yield (f"softmax N={n} causal={int(causal)}", (q, k, v),
               lambda q=q, k=k, v=v, c=causal: longattn.softmax_attention(q, k, v, causal=c))
        del q, k, v
    n = 128 if small else 32768
    q, k, v = t(1, n, H, D), t(1, n, H, D), t(1, n, H, D)
    yield (f"linear causal N={n}", (q, k, v),
           lambda: longattn.linear_attention(q, k, v, feature="identity", causal=True,
                                             normalize=False, scale=D ** -0.5))
    q, k, v = t(1, n, H, D), t(1, n, H, D), t(1, n, H, D)
    Wc = (torch.rand(n // 64, n // 64, device=dev) / (n // 64)).tril().requires_grad_()
    yield (f"mhla causal N={n} C=64", (q, k, v, Wc),
           lambda: longattn.mhla_causal(q, k, v, Wc, chunk=64, feature="relu", normalize="none"))
    shapes = ((("wan 21x30x50/3x5x10", (21, 30, 50), (3, 5, 10)),
               ("1-D N=65536 M=16", (65536,), (16,))) if not small else
              (("3-D 3x4x6/1x2x3", (3, 4, 6), (1, 2, 3)), ("1-D N=128 M=4", (128,), (4,))))
    for name, grid, blocks in shapes:
        n = 1
        for x in grid:
            n *= x
        M = 1
        for x in blocks:
            M *= x
        q, k, v = t(1, n, H, D), t(1, n, H, D), t(1, n, H, D)
        W = torch.rand(M, M, device=dev, requires_grad=True)
        yield (f"mhla {name}", (q, k, v, W),
               lambda q=q, k=k, v=v, W=W, g=grid, b=blocks: longattn.mhla(
                   q, k, v, W, grid=g, blocks=b, normalize="none"))
    hm = wm = 8 if small else 128
    q, k, v = t(1, hm * wm, H, D), t(1, hm * wm, H, D), t(1, hm * wm, H, D)
    conv = (0.2 * torch.randn(D, 5, 5, device=dev)).requires_grad_()
    cb = (0.2 * torch.randn(D, device=dev)).requires_grad_()
    sp = (0.5 * torch.randn(H * D, device=dev)).requires_grad_()
    yield (f"focused flatten {hm}x{wm}", (q, k, v, conv, cb, sp),
           lambda: longattn.focused_attention(q, k, v, map=(hm, wm), conv=conv, conv_bias=cb,
                                              softplus_param=sp))
    # blog: its backward is the portable engine (no fast path)
    convb = (0.05 + 0.3 * torch.rand(H * D, 5, 5, device=dev)).requires_grad_()
    yield (f"focused blog {hm}x{wm}", (q, k, v, convb),
           lambda: longattn.focused_attention(q, k, v, variant="blog", map=(hm, wm), conv=convb))
    T, Hq, L, K = (8, 4, 64, 16) if small else (4096, 128, 4096, 2048)
    Dqk, Dv = (24, 16) if small else (576, 512)
    qm = t(T, Hq, Dqk)
    kv = t(L, Dqk)
    idx = torch.stack([torch.randperm(L, device=dev)[:K] for _ in range(T)]).int()
    yield (f"sparse MLA T={T} Hq={Hq} k={K}", (qm, kv),
           lambda: longattn.sparse_attention(qm, kv, idx, dv=Dv))


def peer_ours_py():
    """ours as users call it: the longattn package's autograd on CUDA tensors
    (forward + torch.autograd.grad; CUDA events around both), and beside it
    the time of the CUDA kernels of one such step from torch.profiler (the
    C-level kernel time), their difference (package - kernels: the GPU idle
    while the host works, i.e. host overhead and launch gaps) and the host
    time of one step (host_ms). bench/py_backward.py --device cuda splits
    the host time per step at small sizes (C calls, the package, torch's
    own autograd floor)."""
    import torch
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "python"))
    try:
        import longattn  # noqa: F401
    except Exception as e:  # noqa: BLE001
        print(f"ours_py: skipped ({type(e).__name__}: {e})", flush=True)
        return
    only = os.environ.get("LA_OURS_PY", "")
    for name, ins, fwd in ours_py_cases():
        if only and not any(w in name for w in only.split(",")):
            continue
        try:
            o = fwd()
            o = o[0] if isinstance(o, tuple) else o
            g = torch.randn_like(o)
            del o

            def step():
                out = fwd()
                out = out[0] if isinstance(out, tuple) else out
                torch.autograd.grad(out, ins, g)
            ms = timeit(step, reps=3, warm=1)
            hms = host_ms(step)
            kms = kernel_ms(step)
            if os.environ.get("LA_TIMELINE", "") and any(
                    w in name for w in os.environ["LA_TIMELINE"].split(",")):
                timeline(step, "timeline")
            peak = torch.cuda.max_memory_allocated() / 2**20
            print(f"ours_py {name} fwd+bwd: {ms:.3f} ms (kernels {kms:.3f} ms, "
                  f"package - kernels {ms - kms:.3f} ms, host {hms:.3f} ms per step, "
                  f"torch peak {peak:.0f} MiB)", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"ours_py {name}: failed ({type(e).__name__}: {str(e)[:200]})", flush=True)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", default="build-gpu/gpu_backward_driver")
    ap.add_argument("--peers", default="ours_py,sdpa,linear,fla,mhla,focused")
    ap.add_argument("--peer", help=argparse.SUPPRESS)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ours", default=",".join(OURS))
    ap.add_argument("--timeout", type=int, default=150)
    a = ap.parse_args()
    if a.peer:
        c = not a.no_compile
        {"ours_py": peer_ours_py, "sdpa": peer_sdpa, "linear": lambda: peer_linear(c), "fla": peer_fla,
         "mhla": lambda: peer_mhla(c), "focused": lambda: peer_focused(c)}[a.peer]()
        return
    if os.path.exists(a.driver):
        run_ours(a.driver, a.reps, [w for w in a.ours.split(",") if w])
    else:
        print(f"ours: skipped (no driver at {a.driver})")
    for p in a.peers.split(","):
        if not p:
            continue
        cmd = [sys.executable, __file__, "--peer", p] + (["--no-compile"] if a.no_compile else [])
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            out = r.stdout + (("\n" + r.stderr[-600:]) if r.returncode else "")
            print(out.strip(), flush=True)
        except subprocess.TimeoutExpired as e:
            print(f"peer {p}: timeout ({a.timeout} s) {(e.stdout or b'')[-300:]!r}", flush=True)


if __name__ == "__main__":
    main()
