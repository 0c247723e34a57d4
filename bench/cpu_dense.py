#!/usr/bin/python3
"""CPU benchmark: longattn softmax / linear attention against PyTorch-CPU.

Runs `longattn bench --json` (our kernels, plus the machine's sgemm peak) and,
in the same process run, PyTorch on the same shapes (B=1, H heads, D=Dv,
float32, the same thread count):
  softmax         torch scaled_dot_product_attention (the private
                  _scaled_dot_product_attention on torch 1.13), heads one at a
                  time when the N×N scores of all heads would not fit
  linear          plain torch: S = einsum(φ(K), V), z = Σφ(K), o = φ(Q)S / (φ(Q)·z + eps)
  linear-causal   plain torch through cumsum of the per-token outer products
                  (the textbook formulation: N×D×Dv memory per head)
φ = relu, eps = 1e-6 (the library defaults). Prints a markdown table of
medians with the ratio torch/longattn and our % of the sgemm peak; with
--write-perf it replaces the section "## CPU: softmax and linear attention"
of docs/PERF.md (creating the file if needed).

    /usr/bin/python3 bench/cpu_dense.py --threads 2 --nmin 1024 --nmax 65536 --write-perf
"""
import argparse
import datetime
import json
import math
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
SECTION = "## CPU: softmax and linear attention"
OPS = ["softmax", "softmax-causal", "linear", "linear-causal"]


def timed(fn, min_time):
    """Median seconds: one warm-up call (reported alone if over 2 s), then
    at least 3 calls lasting min_time."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    if first > 2.0:
        return first, 1
    ts, start = [], time.perf_counter()
    while len(ts) < 3 or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), len(ts)


def torch_sdpa(q, k, v, causal):
    f = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if f is not None:
        return f(q, k, v, is_causal=causal)
    return torch.nn.functional._scaled_dot_product_attention(q, k, v, None, 0.0, False, causal)[0]


def torch_softmax(q, k, v, causal, mem_limit):
    """q,k,v [1,H,N,D]; all heads at once if the scores fit, else one by one."""
    H, N = q.shape[1], q.shape[2]
    per_head = 3 * N * N * 4  # scores, probabilities, mask/temporaries (float32)
    if per_head * H <= mem_limit:
        return lambda: torch_sdpa(q, k, v, causal)
    if per_head > mem_limit:
        return None
    return lambda: [torch_sdpa(q[:, h:h + 1], k[:, h:h + 1], v[:, h:h + 1], causal) for h in range(H)]


def torch_linear(q, k, v, causal, mem_limit, eps=1e-6):
    """Plain formulation with φ = relu, normalized (q,k,v [1,H,N,D])."""
    H, N, D = q.shape[1], q.shape[2], q.shape[3]
    Dv = v.shape[3]

    def noncausal():
        qf, kf = torch.relu(q), torch.relu(k)
        S = torch.einsum("bhnd,bhne->bhde", kf, v)
        z = kf.sum(2)
        return torch.einsum("bhnd,bhde->bhne", qf, S) / (torch.einsum("bhnd,bhd->bhn", qf, z)[..., None] + eps)

    def causal_heads(qh, kh, vh):
        qf, kf = torch.relu(qh), torch.relu(kh)
        kv = torch.einsum("bhnd,bhne->bhnde", kf, vh).cumsum(2)
        z = kf.cumsum(2)
        return torch.einsum("bhnd,bhnde->bhne", qf, kv) / (torch.einsum("bhnd,bhnd->bhn", qf, z)[..., None] + eps)

    if not causal:
        return noncausal
    per_head = 2 * N * D * Dv * 4  # outer products + their cumsum
    if per_head * H <= mem_limit:
        return lambda: causal_heads(q, k, v)
    if per_head > mem_limit:
        return None
    return lambda: [causal_heads(q[:, h:h + 1], k[:, h:h + 1], v[:, h:h + 1]) for h in range(H)]


def flops(op, N, H, D, C=64):
    """Same model as cli/bench_dense.c."""
    if op.startswith("softmax"):
        pairs = N * (N + 1) / 2 if op.endswith("causal") else N * N
        return 2 * H * pairs * (D + D)
    f = 4 * H * N * D * (D + 1)
    return f + H * N * C * (D + D) if op.endswith("causal") else f


def machine():
    model = "unknown"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return model


def fmt_ms(s):
    return "—" if s is None else (f"{s * 1e3:.1f}" if s >= 0.1 else f"{s * 1e3:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("LA_BUILD", "build"), help="build directory (longattn)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--nmin", type=int, default=1024)
    ap.add_argument("--nmax", type=int, default=65536)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--torch-mem-gb", type=float, default=6.0,
                    help="largest temporary PyTorch may build (N×N scores, N×D×Dv prefix sums)")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--write-perf", action="store_true", help="replace our section of docs/PERF.md")
    args = ap.parse_args()

    exe = ROOT / args.build / "longattn"
    if not exe.exists():
        sys.exit(f"{exe} not found: build first (make BUILD={args.build})")
    def ours_at(N, threads, ops):
        """One `longattn bench --json` call at a single N: its sgemm peak (measured
        right before the kernels, so both see the same machine load) and rows."""
        cmd = [str(exe), "bench", "--json", "--ops", "sgemm_peak," + ",".join(ops), "--threads", str(threads),
               "--nmin", str(N), "--nmax", str(N), "--heads", str(args.heads), "--d", str(args.d),
               "--min-time", str(args.min_time)]
        print("#", " ".join(cmd), file=sys.stderr)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"longattn bench failed ({r.returncode}): {r.stderr}")
        recs = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
        return next(x for x in recs if x["op"] == "sgemm_peak"), {x["op"]: x for x in recs if x["op"] != "sgemm_peak"}

    t_start = time.time()
    try:
        load0 = " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        load0 = "?"
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    H, D = args.heads, args.d
    mem = args.torch_mem_gb * 2**30
    ours, peaks, theirs = {}, {}, {}
    Ns = []
    N = args.nmin
    while N <= args.nmax:
        Ns.append(N)
        N *= 2
    # Per N: our kernels (and the sgemm peak), then PyTorch, back to back.
    for N in Ns:
        peak, recs = ours_at(N, args.threads, OPS)
        peaks[N] = peak
        for op, rec in recs.items():
            ours[(op, N)] = rec
        if args.skip_torch:
            continue
        q, k, v = (torch.randn(1, H, N, D) for _ in range(3))
        for op in OPS:
            causal = op.endswith("causal")
            fn = torch_softmax(q, k, v, causal, mem) if op.startswith("softmax") else \
                torch_linear(q, k, v, causal, mem)
            if fn is None:
                theirs[(op, N)] = None
                print(f"# torch {op} N={N}: skipped (temporaries over {args.torch_mem_gb} GB)", file=sys.stderr)
                continue
            with torch.no_grad():
                s, reps = timed(fn, args.min_time)
            theirs[(op, N)] = s
            print(f"# torch {op} N={N}: {s * 1e3:.2f} ms ({reps} runs)", file=sys.stderr)
        del q, k, v
    # One thread, N = 4096: the same kernels without the barrier waits that a
    # loaded machine inflicts on a multi-threaded run.
    peak1, single = ours_at(4096, 1, OPS)
    elapsed = time.time() - t_start

    peak = peaks[Ns[0]]
    lines = [f"sgemm peak: {peak['threads']} threads, each its own single-threaded 1024³ `cblas_sgemm` ({peak['blas']}), "
             f"measured in the same `longattn bench` call as each N's rows (it moves with the machine's load).", "",
             "| op | N | longattn ms | torch ms | torch / longattn | longattn GFLOP/s | sgemm peak then | % of peak |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for op in OPS:
        for N in Ns:
            o = ours.get((op, N))
            t = theirs.get((op, N))
            pk = peaks[N]["gflops"]
            ms = o["ms"] / 1e3 if o else None
            ratio = f"{t / ms:.1f}×" if (t is not None and ms) else "—"
            gf = flops(op, N, H, D) / ms * 1e-9 if ms else None
            lines.append(f"| {op} | {N} | {fmt_ms(ms)} | {fmt_ms(t)} | {ratio} | "
                         f"{'—' if gf is None else f'{gf:.1f}'} | {pk:.1f} | "
                         f"{'—' if gf is None else f'{100 * gf / pk:.0f}%'} |")
    pk1 = peak1["gflops"]
    lines += ["", f"One thread, N = 4096 (sgemm peak {pk1:.1f} GFLOP/s):", "",
              "| op | longattn ms | GFLOP/s | % of 1-thread sgemm peak |", "|---|---:|---:|---:|"]
    for op, x in single.items():
        gf = flops(op, x["N"], H, D) / (x["ms"] / 1e3) * 1e-9
        lines.append(f"| {op} | {fmt_ms(x['ms'] / 1e3)} | {gf:.1f} | {100 * gf / pk1:.0f}% |")
    table = "\n".join(lines)
    print(table)

    if args.write_perf:
        try:
            load = open("/proc/loadavg").read().split()[:3]
        except OSError:
            load = ["?"]
        date = subprocess.run(["date"], capture_output=True, text=True).stdout.strip()
        tv = torch.__version__
        body = f"""{SECTION}

- Date: {date}
- Machine: {machine()}, {os.cpu_count()} cores ({platform.machine()}); load average at the start / end of the run: {load0} / {' '.join(load)}
- Command: `/usr/bin/python3 bench/cpu_dense.py --threads {args.threads} --nmin {args.nmin} --nmax {args.nmax} --heads {H} --d {D} --min-time {args.min_time} --write-perf` ({elapsed:.0f} s)
- Shapes: B=1, H={H}, D=Dv={D}, float32, {args.threads} threads for both sides. longattn: `longattn bench --json` per N (median of
  repeats lasting ≥ {args.min_time} s; a single call when one takes over 2 s), then PyTorch {tv} (Debian) on the same N:
  softmax = scaled_dot_product_attention (math path on this version: materializes the N×N scores), linear = plain
  einsum formulations (causal through cumsum of the per-token k vᵀ); φ = relu, normalized, eps 1e-6. "—": PyTorch
  skipped because its temporaries would exceed {args.torch_mem_gb:g} GB.
- FLOP counts (exp/max/division not counted): softmax 2·H·P·(D+Dv) with P = N² (causal N(N+1)/2);
  linear 4·H·N·D·(Dv+1); linear-causal adds H·N·C·(D+Dv) (half of the C×C intra-chunk products, C = 64).
- BLAS: {peak['blas']} (Debian libopenblas0-pthread 0.3.21; it identifies this Zen 5 CPU as Haswell and
  uses AVX2 kernels. With `OPENBLAS_CORETYPE=SkylakeX` it runs AVX-512 kernels: measured on one thread in CPU time,
  sgemm 1024³ 219 vs 119 GFLOP/s, softmax N=4096 D=64 160 vs 99 GFLOP/s, i.e. 73% instead of 83% of a peak
  that is 1.8× higher.)
- The machine is shared with other developers' builds and tests: a load average above 2 on 2 cores means our
  2-thread runs wait for time slices at every OpenMP barrier (the small-N linear rows suffer most; compare the
  1-thread table, which has no barriers to wait at).

{table}
"""
        perf = ROOT / "docs" / "PERF.md"
        text = perf.read_text() if perf.exists() else "# Performance\n"
        pat = re.compile(r"^" + re.escape(SECTION) + r"\n.*?(?=^## |\Z)", re.S | re.M)
        if pat.search(text):
            text = pat.sub(lambda m: body + "\n", text)
        else:
            text = text.rstrip("\n") + "\n\n" + body
        perf.parent.mkdir(parents=True, exist_ok=True)
        perf.write_text(text)
        print(f"# wrote {perf}", file=sys.stderr)


if __name__ == "__main__":
    main()
