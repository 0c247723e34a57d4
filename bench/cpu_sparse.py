#!/usr/bin/python3
"""Sparse family on the CPU against its peers, side by side in one run
(docs/PERF.md, "## CPU: sparse family").

1. Indexers at T = 256 queries (the last 256 positions of an L-token prefix,
   bottom-right causal), HI = 64, dI = 128, topk = 2048: HISA (B = 128,
   m = 64) against our flat DSA indexer at L = 65536 and 131072. Goals:
   HISA >= 4x faster at 64K and >= 8x at 128K.
2. The DSA indexer's GFLOP/s (2·HI·dI per visible (query, key) pair) against
   the machine's sgemm peak, measured by `longattn bench --ops sgemm_peak`
   (each thread its own single-threaded 1024^3 la_sgemm through OpenBLAS).
3. Top-k of 2048 over 65536 fp32 scores per row (256 rows of N(0,1)):
   longattn.topk against torch.topk (sorted), same threads. Goal >= 5x.

Rounds interleave the implementations and report medians, so a busy machine
slows all of them alike. Results go to stdout and, unless --no-write, into
docs/PERF.md under "## CPU: sparse family" (only that section is replaced).
Usage:
    /usr/bin/python3 bench/cpu_sparse.py [--threads 2] [--build build] [--quick] [--no-write]
"""
import argparse
import ctypes
import datetime
import json
import os
import platform
import subprocess
import sys

import numpy as np
import torch

from benchlib import cpu_model, interleaved_times

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = "## CPU: sparse family"


def median_times(fns, rounds, min_time):
    """fns: dict name -> callable. Interleaved rounds after one warm-up each;
    returns name -> (median seconds, all times)."""
    return {k: (float(np.median(v)), v) for k, v in interleaved_times(fns, rounds, min_time).items()}


def machine():
    return f"{cpu_model()}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"


def openblas_core():
    for name in ("libopenblas.so.0", "libopenblas.so"):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            continue
    return "?"


def sgemm_peak(exe, threads, min_time=1.0):
    r = subprocess.run([exe, "bench", "--json", "--ops", "sgemm_peak", "--threads", str(threads),
                        "--min-time", str(min_time), "--nmin", "1024", "--nmax", "1024"],
                       capture_output=True, text=True, timeout=600)
    for line in r.stdout.splitlines():
        if line.startswith("{") and '"sgemm_peak"' in line:
            return json.loads(line)["gflops"]
    raise RuntimeError("sgemm_peak not found in `longattn bench` output:\n" + r.stdout + r.stderr)


def write_section(path, text):
    """Replace (or append) our section of docs/PERF.md, leaving the rest alone."""
    old = open(path).read() if os.path.exists(path) else "# Performance\n"
    start = old.find(SECTION + "\n")
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        nxt = old.find("\n## ", start + len(SECTION))
        tail = old[nxt + 1:] if nxt >= 0 else ""
        new = old[:start] + text.rstrip("\n") + "\n" + ("\n" + tail if tail else "")
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "w") as f:
        f.write(new if new.endswith("\n") else new + "\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build", default=os.environ.get("LA_BUILD", "build"))
    ap.add_argument("--quick", action="store_true", help="L = 65536 only, fewer rounds")
    ap.add_argument("--no-write", action="store_true", help="do not touch docs/PERF.md")
    args = ap.parse_args()

    os.environ["LA_BUILD"] = args.build
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import longattn  # noqa: E402

    exe = os.path.join(ROOT, args.build, "longattn")
    torch.set_num_threads(args.threads)
    longattn.set_num_threads(args.threads)
    load0 = os.getloadavg()
    print(f"# {machine()}\n# {longattn.build_info()}, OpenBLAS core {openblas_core()}, "
          f"torch {torch.__version__}, threads={args.threads}, load average {load0[0]:.2f}")

    # The sgemm peak is measured inside the same interleaved rounds as the
    # indexers (one short `longattn bench --ops sgemm_peak` per round), so a
    # shared machine's load weighs on both sides of the "% of peak" alike.
    peaks = []

    def peak_round():
        peaks.append(sgemm_peak(exe, args.threads, 0.3))

    g = torch.Generator().manual_seed(0)
    T, HI, dI, K, B, M = 256, 64, 128, 2048, 128, 64
    rows = []
    Ls = [65536] if args.quick else [65536, 131072]
    rounds = 3 if args.quick else 7
    for L in Ls:
        q = torch.randn(T, HI, dI, generator=g)
        k = torch.randn(L, dI, generator=g)
        w = torch.rand(T, HI, generator=g) / np.sqrt(HI * dI)
        fns = {"dsa": lambda: longattn.dsa_topk(q, k, w, topk=K),
               "hisa": lambda: longattn.hisa_topk(q, k, w, topk=K, block=B, block_topk=M),
               "sgemm": peak_round}
        first = len(peaks)
        res = median_times(fns, rounds, 0)
        ends = np.clip(L - T + np.arange(T) + 1, 0, L)
        flops = 2.0 * HI * dI * float(ends.sum())
        td, th = res["dsa"][0], res["hisa"][0]
        peak = float(np.median(peaks[first:]))  # the sgemm peak under this L's conditions
        rows.append(dict(L=L, dsa_ms=td * 1e3, hisa_ms=th * 1e3, speedup=td / th, dsa_gflops=flops / td * 1e-9,
                         peak=peak,
                         dsa_all=[round(x * 1e3, 1) for x in res["dsa"][1]],
                         hisa_all=[round(x * 1e3, 1) for x in res["hisa"][1]]))
        print(f"L={L:6d}: dsa {td * 1e3:9.1f} ms ({flops / td * 1e-9:6.1f} GFLOP/s, "
              f"{100 * flops / td * 1e-9 / peak:5.1f}% of sgemm peak)   hisa {th * 1e3:8.1f} ms   "
              f"hisa {td / th:5.2f}x faster")
        del q, k, w

    peak = float(np.median(peaks))
    print(f"sgemm peak (la_sgemm 1024^3 per thread, median of {len(peaks)} interleaved rounds): {peak:.1f} GFLOP/s")
    R, Lk = 256, 65536
    scores = torch.randn(R, Lk, generator=g)
    res = median_times({"ours": lambda: longattn.topk(scores, K),
                        "torch": lambda: torch.topk(scores, K, dim=1, largest=True, sorted=True)},
                       5 if args.quick else 10, 0)
    ours_idx = np.asarray(longattn.topk(scores, K))
    tv, ti = torch.topk(scores, K, dim=1)
    same = all(set(ours_idx[r].tolist()) == set(ti[r].tolist()) for r in range(R))
    to, tt = res["ours"][0], res["torch"][0]
    print(f"top-{K} of {Lk} fp32, {R} rows: ours {to / R * 1e6:7.2f} us/row, torch.topk {tt / R * 1e6:7.2f} us/row "
          f"-> {tt / to:5.1f}x (same sets: {same})")
    load1 = os.getloadavg()
    print(f"# load average after: {load1[0]:.2f}")

    if args.no_write:
        return 0
    goal = {65536: 4, 131072: 8}
    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    cmd = "/usr/bin/python3 bench/cpu_sparse.py --threads %d --build %s%s" % (
        args.threads, args.build, " --quick" if args.quick else "")
    lines = [SECTION, "",
             f"Measured {date} on {machine()}; {longattn.build_info()}, OpenBLAS core "
             f"`{openblas_core()}`, torch {torch.__version__}; {args.threads} threads for every "
             f"implementation; load average {load0[0]:.2f} before, {load1[0]:.2f} after "
             "(the machine is shared: other jobs slow all columns alike, as rounds interleave).",
             f"Command: `{cmd}` (medians of interleaved rounds after a warm-up).", "",
             f"Indexers: T = {T} queries (bottom-right causal: the last {T} positions of an L-token "
             f"prefix), HI = {HI}, dI = {dI}, topk = {K}; HISA B = {B}, m = {M}; random N(0,1) q, k.", "",
             "| L | DSA (ms) | DSA GFLOP/s | sgemm peak (same rounds) | DSA % of peak | HISA (ms) | HISA speedup | goal |",
             "|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ok = "met" if r["speedup"] >= goal[r["L"]] else "NOT met"
        lines.append(f"| {r['L']} | {r['dsa_ms']:.1f} | {r['dsa_gflops']:.1f} | {r['peak']:.1f} | "
                     f"{100 * r['dsa_gflops'] / r['peak']:.0f}% | {r['hisa_ms']:.1f} | {r['speedup']:.2f}x | "
                     f">= {goal[r['L']]}x: {ok} |")
    lines += ["", f"sgemm peak: median over the same interleaved rounds as each row (overall {peak:.1f} GFLOP/s; "
              f"`longattn bench --ops sgemm_peak`: each of the "
              f"{args.threads} threads runs its own single-threaded 1024^3 `la_sgemm`, OpenBLAS). The DSA "
              "indexer does not call BLAS: its fused AVX-512 kernel (src/cpu/dsa_cpu.c) keeps an 8-head x "
              "32-key block of dot products in registers and folds w·ReLU into the scores before leaving "
              "them, so it can exceed OpenBLAS's sgemm, whose Haswell (AVX2) kernels are what OpenBLAS "
              "0.3.21 picks on this CPU.", "",
              f"Top-k: {R} rows of {Lk} N(0,1) fp32 scores, k = {K}, sorted output.", "",
              "| implementation | us/row | ratio |", "|---|---:|---:|",
              f"| longattn.topk (la_topk) | {to / R * 1e6:.2f} | {tt / to:.1f}x faster |",
              f"| torch.topk (sorted) | {tt / R * 1e6:.2f} | 1 |", "",
              f"Goal >= 5x: {'met' if tt / to >= 5 else 'NOT met'}; same index sets as torch.topk on every "
              f"row: {same}.", ""]
    write_section(os.path.join(ROOT, "docs", "PERF.md"), "\n".join(lines) + "\n")
    print("wrote docs/PERF.md section", SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
