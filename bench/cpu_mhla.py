#!/usr/bin/python3
"""MHLA on the CPU against its peers, side by side in one run (docs/PERF.md,
"## CPU: MHLA").

1. Non-causal MHLA (SPEC §5.2), fp32, B=1 H=4 D=64, 1-D grid with M=16
   blocks: ours (la_mhla_forward) vs the plain-PyTorch-CPU formulation
   (einsums over block views) vs our own non-causal linear attention
   (la_linear_attention, same feature map): the goals are >= 4x faster than
   PyTorch and within 1.3x of linear attention.
2. Causal MHLA (SPEC §5.4) throughput vs N (M = N/C) for C = 64 (default)
   and C = 256, with our causal linear attention beside it.
3. Decoding: time per token vs context (1K..64K) through la_mhla_state
   (`longattn bench --ops mhla-decode --json`: median token inside a block,
   median block start, amortized per token) against softmax decoding (one
   query attending to the whole KV cache: softmax(q Kᵀ/√D) V in torch on one
   thread), which grows linearly.

Rounds interleave the implementations and report medians, so a busy machine
slows all of them alike. Usage:
    /usr/bin/python3 bench/cpu_mhla.py [--threads 2] [--build build] [--quick]
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def median_times(fns, rounds, min_time):
    """fns: dict name -> callable. Interleaved rounds; returns name -> median seconds."""
    for f in fns.values():
        f()  # warm-up
    times = {k: [] for k in fns}
    start = time.perf_counter()
    r = 0
    while r < rounds or time.perf_counter() - start < min_time:
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
        r += 1
        if r >= 200:
            break
    return {k: float(np.median(v)) for k, v in times.items()}


def torch_mhla(q, k, v, W, M, eps=1e-6):
    """Plain PyTorch MHLA, 1-D grid with equal blocks: einsums over block views."""
    B, N, H, D = q.shape
    L = N // M
    qf = torch.relu(q) + 1e-6
    kf = torch.relu(k) + 1e-6
    qb, kb, vb = qf.view(B, M, L, H, D), kf.view(B, M, L, H, D), v.view(B, M, L, H, -1)
    S = torch.einsum("bmlhd,bmlhe->bhmde", kb, vb)          # block summaries
    z = kb.sum(2)                                            # [B, M, H, D]
    St = torch.einsum("ij,bhjde->bhide", W, S)               # mixing
    zt = torch.einsum("ij,bjhd->bihd", W, z)
    num = torch.einsum("bmlhd,bhmde->bmlhe", qb, St)
    den = torch.einsum("bmlhd,bmhd->bmlh", qb, zt)
    return (num / (den[..., None] + eps)).reshape(B, N, H, -1)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


def machine():
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return "%s, %d cores visible, %s" % (cpu, os.cpu_count(), platform.platform())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build", default=os.environ.get("LA_BUILD", "build"))
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer rounds")
    ap.add_argument("--min-time", type=float, default=2.0, help="seconds per comparison")
    args = ap.parse_args()
    os.environ["LA_BUILD"] = args.build
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import longattn

    th = args.threads
    torch.set_num_threads(th)
    longattn.set_num_threads(th)
    print("# MHLA CPU benchmark: %s" % machine())
    print("# %s, torch %s (%d threads), %s" % (longattn.build_info(), torch.__version__,
                                              torch.get_num_threads(), time.strftime("%Y-%m-%d")))
    print("# command: /usr/bin/python3 bench/cpu_mhla.py %s" % " ".join(sys.argv[1:]))
    try:
        print("# load average at start: %s (other processes share these cores)"
              % " ".join(open("/proc/loadavg").read().split()[:3]))
    except OSError:
        pass
    g = torch.Generator().manual_seed(0)
    B, H, D, M = 1, 4, 64, 16

    # ---- 1. non-causal ------------------------------------------------------
    print("\n### Non-causal MHLA, fp32, B=1 H=4 D=64 M=16 (1-D blocks), %d threads\n" % th)
    print("| N | ours MHLA ms | PyTorch MHLA ms | ours linear attn ms | PyTorch / ours | ours MHLA / linear | max rel diff vs PyTorch |")
    print("|---|---|---|---|---|---|---|")
    Ns = [4096, 16384] if args.quick else [4096, 16384, 65536]
    for N in Ns:
        q, k, v = [torch.randn(B, N, H, D, generator=g) for _ in range(3)]
        W = torch.from_numpy(np.asarray(longattn.mhla_init((M,)), dtype=np.float32))
        ours = longattn.mhla(q, k, v, W)
        ref = torch_mhla(q.double(), k.double(), v.double(), W.double(), M)
        err = rel(ours, ref)
        t = median_times({
            "ours": lambda: longattn.mhla(q, k, v, W),
            "torch": lambda: torch_mhla(q, k, v, W, M),
            "linear": lambda: longattn.linear_attention(q, k, v, feature="relu_eps"),
        }, rounds=5 if args.quick else 15, min_time=args.min_time / (2 if args.quick else 1))
        print("| %d | %.2f | %.2f | %.2f | %.2fx | %.2fx | %.1e |" % (
            N, t["ours"] * 1e3, t["torch"] * 1e3, t["linear"] * 1e3, t["torch"] / t["ours"],
            t["ours"] / t["linear"], err))
        sys.stdout.flush()

    # Same comparison on one thread, timed in process CPU time (time.process_time),
    # which a busy machine does not inflate: the efficiency ratio without noise.
    print("\nOne thread, process CPU time per call (insensitive to other processes):\n")
    print("| N | ours MHLA ms | PyTorch MHLA ms | ours linear attn ms | PyTorch / ours | ours MHLA / linear |")
    print("|---|---|---|---|---|---|")
    torch.set_num_threads(1)
    longattn.set_num_threads(1)
    N = 16384
    q, k, v = [torch.randn(B, N, H, D, generator=g) for _ in range(3)]
    W = torch.from_numpy(np.asarray(longattn.mhla_init((M,)), dtype=np.float32))
    fns = {"ours": lambda: longattn.mhla(q, k, v, W),
           "torch": lambda: torch_mhla(q, k, v, W, M),
           "linear": lambda: longattn.linear_attention(q, k, v, feature="relu_eps")}
    ct = {key: [] for key in fns}
    for f in fns.values():
        f()
    for _ in range(5 if args.quick else 15):
        for key, f in fns.items():
            t0 = time.process_time()
            f()
            ct[key].append(time.process_time() - t0)
    ct = {key: float(np.median(x)) for key, x in ct.items()}
    print("| %d | %.2f | %.2f | %.2f | %.2fx | %.2fx |" % (
        N, ct["ours"] * 1e3, ct["torch"] * 1e3, ct["linear"] * 1e3, ct["torch"] / ct["ours"],
        ct["ours"] / ct["linear"]))
    torch.set_num_threads(th)
    longattn.set_num_threads(th)
    sys.stdout.flush()

    # ---- 2. causal throughput vs N -----------------------------------------
    print("\n### Causal MHLA throughput vs N (M = N/C, uniform_causal W), %d threads\n" % th)
    print("| N | MHLA C=64 ms | Mtok/s | MHLA C=256 ms | Mtok/s | causal linear attn ms | Mtok/s |")
    print("|---|---|---|---|---|---|---|")
    Nc = [1024, 4096, 16384] if args.quick else [1024, 4096, 16384, 65536]
    for N in Nc:
        q, k, v = [torch.randn(B, N, H, D, generator=g) for _ in range(3)]
        Ws = {}
        for C in (64, 256):
            Mc = (N + C - 1) // C
            Ws[C] = torch.from_numpy(np.asarray(longattn.mhla_init((Mc,), kind="uniform_causal"),
                                                dtype=np.float32))
        t = median_times({
            "c64": lambda: longattn.mhla_causal(q, k, v, Ws[64], chunk=64),
            "c256": lambda: longattn.mhla_causal(q, k, v, Ws[256], chunk=256),
            "lin": lambda: longattn.linear_attention(q, k, v, causal=True),
        }, rounds=3, min_time=args.min_time / 2)
        print("| %d | %.2f | %.3f | %.2f | %.3f | %.2f | %.3f |" % (
            N, t["c64"] * 1e3, N / t["c64"] * 1e-6, t["c256"] * 1e3, N / t["c256"] * 1e-6,
            t["lin"] * 1e3, N / t["lin"] * 1e-6))
        sys.stdout.flush()

    print("\nOne thread, process CPU time per token (insensitive to other processes):\n")
    print("| N | MHLA C=64 us/token | MHLA C=256 us/token | causal linear attn us/token |")
    print("|---|---|---|---|")
    torch.set_num_threads(1)
    longattn.set_num_threads(1)
    for N in Nc:
        q, k, v = [torch.randn(B, N, H, D, generator=g) for _ in range(3)]
        Ws = {C: torch.from_numpy(np.asarray(longattn.mhla_init(((N + C - 1) // C,),
                                                                kind="uniform_causal"),
                                             dtype=np.float32)) for C in (64, 256)}
        fns = {"c64": lambda: longattn.mhla_causal(q, k, v, Ws[64], chunk=64),
               "c256": lambda: longattn.mhla_causal(q, k, v, Ws[256], chunk=256),
               "lin": lambda: longattn.linear_attention(q, k, v, causal=True)}
        ct = {key: [] for key in fns}
        for f in fns.values():
            f()
        for _ in range(3 if N >= 65536 else 7):
            for key, f in fns.items():
                t0 = time.process_time()
                f()
                ct[key].append(time.process_time() - t0)
        ct = {key: float(np.median(x)) / N * 1e6 for key, x in ct.items()}
        print("| %d | %.3f | %.3f | %.3f |" % (N, ct["c64"], ct["c256"], ct["lin"]))
        sys.stdout.flush()
    torch.set_num_threads(th)
    longattn.set_num_threads(th)

    # ---- 3. decoding --------------------------------------------------------
    print("\n### Decoding: time per token vs context, B=1 H=4 D=64, C=64, %d threads\n" % th)
    exe = os.path.join(ROOT, args.build, "longattn")
    r = subprocess.run([exe, "bench", "--ops", "mhla-decode", "--json", "--threads", str(th),
                        "--d", str(D), "--heads", str(H)], capture_output=True, text=True,
                       timeout=600)
    rows = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not rows:
        print("(longattn bench failed: %s)" % r.stderr.strip())
        return 1
    print("| context | MHLA us/token (median, inside a block) | MHLA block start us (median) | MHLA us/token amortized | softmax decode us/token (torch, 1 thread) |")
    print("|---|---|---|---|---|")
    torch.set_num_threads(1)  # one query: a thread pool only adds wake-ups
    for row in rows:
        ctx = row["context"]
        Kc = torch.randn(1, H, ctx, D, generator=g)
        Vc = torch.randn(1, H, ctx, D, generator=g)
        q1 = torch.randn(1, H, 1, D, generator=g)
        sc = D ** -0.5
        f = lambda: torch.softmax(torch.matmul(q1, Kc.transpose(-1, -2)) * sc, -1) @ Vc
        f()
        ts = []
        for _ in range(200):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        print("| %d | %.2f | %.0f | %.2f | %.1f |" % (
            ctx, row["us_per_token_median"], row["us_block_start_median"], row["us_per_token_amortized"],
            np.median(ts) * 1e6))
    first, last = rows[0], rows[-1]
    print("\nmedian token at %dK vs %dK context: %.2fx; amortized: %.2fx" % (
        last["context"] // 1024, first["context"] // 1024,
        last["us_per_token_median"] / first["us_per_token_median"],
        last["us_per_token_amortized"] / first["us_per_token_amortized"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
