#!/usr/bin/python3
"""MHLA on the CPU against its peers, side by side in one run (docs/PERF.md,
"## CPU: MHLA").

1. Non-causal MHLA (SPEC §5.2), fp32, B=1 H=4 D=64, 1-D grid with M=16
   blocks: ours (la_mhla_forward) vs the plain-PyTorch-CPU formulation
   (einsums over block views) vs our own non-causal linear attention
   (la_linear_attention, same feature map): the goals are >= 4x faster than
   PyTorch and within 1.3x of linear attention.
2. Causal MHLA (SPEC §5.4) throughput vs N (M = N/C): uniform_causal W
   (rows constant below the diagonal, which the library mixes by running
   sums) at C = 64 (default) and C = 256, and a general W at C = 64 (the
   O(M²·d·dv) mixing GEMM), with our causal linear attention beside them.
3. Decoding: time per token vs context (1K..64K) through la_mhla_state, for
   uniform_causal and a general W (`longattn bench --ops
   mhla-decode,mhla-decode-w --json`: median token inside a block,
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

from benchlib import cpu_model, interleaved_times

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def median_times(fns, rounds, min_time):
    """fns: dict name -> callable. Interleaved rounds; returns name -> median seconds."""
    return {k: float(np.median(v)) for k, v in interleaved_times(fns, rounds, min_time).items()}


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
    return "%s, %d cores visible, %s" % (cpu_model(), os.cpu_count(), platform.platform())


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
    # uniform_causal W (rows constant below the diagonal: mixed by running
    # sums) at C = 64 and 256, a general W at C = 64 (the O(M²·d·dv) GEMM).
    def causal_w(N, C, general):
        Mc = (N + C - 1) // C
        W = np.asarray(longattn.mhla_init((Mc,), kind="uniform_causal"), dtype=np.float32)
        if general:
            i, b = np.tril_indices(Mc, -1)
            W[i, b] *= 1.0 + 0.25 * ((7 * b + i) % 4)
        return torch.from_numpy(W)

    def causal_fns(q, k, v, N):
        Ws = {"c64": causal_w(N, 64, False), "c256": causal_w(N, 256, False),
              "c64w": causal_w(N, 64, True)}
        return {"c64": lambda: longattn.mhla_causal(q, k, v, Ws["c64"], chunk=64),
                "c256": lambda: longattn.mhla_causal(q, k, v, Ws["c256"], chunk=256),
                "c64w": lambda: longattn.mhla_causal(q, k, v, Ws["c64w"], chunk=64),
                "lin": lambda: longattn.linear_attention(q, k, v, causal=True)}

    print("\n### Causal MHLA throughput vs N (M = N/C), %d threads\n" % th)
    print("W uniform_causal (constant rows: running-sum mixing) at C = 64 and 256; a general W at C = 64.\n")
    print("| N | uniform C=64 ms | Mtok/s | uniform C=256 ms | Mtok/s | general W C=64 ms | Mtok/s | causal linear attn ms | Mtok/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    Nc = [1024, 4096, 16384] if args.quick else [1024, 4096, 16384, 65536]
    for N in Nc:
        q, k, v = [torch.randn(B, N, H, D, generator=g) for _ in range(3)]
        t = median_times(causal_fns(q, k, v, N), rounds=3, min_time=args.min_time / 2)
        print("| %d | " % N + " | ".join("%.2f | %.3f" % (t[key] * 1e3, N / t[key] * 1e-6)
                                         for key in ("c64", "c256", "c64w", "lin")) + " |")
        sys.stdout.flush()

    print("\nOne thread, process CPU time per token in µs (insensitive to other processes):\n")
    print("| N | uniform C=64 | uniform C=256 | general W C=64 | causal linear attn |")
    print("|---|---|---|---|---|")
    torch.set_num_threads(1)
    longattn.set_num_threads(1)
    for N in Nc:
        q, k, v = [torch.randn(B, N, H, D, generator=g) for _ in range(3)]
        fns = causal_fns(q, k, v, N)
        ct = {key: [] for key in fns}
        for f in fns.values():
            f()
        for _ in range(3 if N >= 65536 else 7):
            for key, f in fns.items():
                t0 = time.process_time()
                f()
                ct[key].append(time.process_time() - t0)
        ct = {key: float(np.median(x)) / N * 1e6 for key, x in ct.items()}
        print("| %d | %.3f | %.3f | %.3f | %.3f |" % (N, ct["c64"], ct["c256"], ct["c64w"], ct["lin"]))
        sys.stdout.flush()
    torch.set_num_threads(th)
    longattn.set_num_threads(th)

    # ---- 3. decoding --------------------------------------------------------
    print("\n### Decoding: time per token vs context, B=1 H=4 D=64, C=64, %d threads\n" % th)
    exe = os.path.join(ROOT, args.build, "longattn")
    r = subprocess.run([exe, "bench", "--ops", "mhla-decode,mhla-decode-w", "--json", "--threads",
                        str(th), "--d", str(D), "--heads", str(H)], capture_output=True, text=True,
                       timeout=600)
    rows = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not rows:
        print("(longattn bench failed: %s)" % r.stderr.strip())
        return 1
    uni = {row["context"]: row for row in rows if row["mixing"] == "uniform_causal"}
    gen = {row["context"]: row for row in rows if row["mixing"] == "general"}
    print("Per token: median of tokens inside a block; block start: median of first tokens of a block;")
    print("amortized = (63 inside + 1 start) / 64.\n")
    print("| context | uniform W: inside µs | start µs | amortized µs | general W: inside µs | start µs | amortized µs | softmax decode µs (torch, 1 thread) |")
    print("|---|---|---|---|---|---|---|---|")
    torch.set_num_threads(1)  # one query: a thread pool only adds wake-ups
    for ctx in sorted(uni):
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
        cells = []
        for d in (uni, gen):
            row = d.get(ctx)
            cells.append("%.2f | %.0f | %.2f" % (row["us_per_token_median"], row["us_block_start_median"],
                                                 row["us_per_token_amortized"]) if row else "— | — | —")
        print("| %d | %s | %s | %.1f |" % (ctx, cells[0], cells[1], np.median(ts) * 1e6))
    lo, hi = min(uni), max(uni)
    for name, d in (("uniform W", uni), ("general W", gen)):
        if lo in d and hi in d:
            print("\n%s: at %dK vs %dK context, token inside a block %.2fx, amortized %.2fx" % (
                name, hi // 1024, lo // 1024,
                d[hi]["us_per_token_median"] / d[lo]["us_per_token_median"],
                d[hi]["us_per_token_amortized"] / d[lo]["us_per_token_amortized"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
