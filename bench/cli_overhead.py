"""What `longattn run mhla` costs as a process against the same work done in
one Python process (issue 21, docs/PERF.md "CLI overhead").

  process:    `longattn run mhla --q --k --v --mixing --out` (fork/exec,
              library start-up, reading 3 x 16 MiB + the mixing, the call,
              writing 16 MiB), wall time from Python's subprocess.run
  in-process: numpy.load of the four files + longattn.mhla (the package) +
              numpy.save of the output, in this process, warm
  call:       longattn.mhla alone on arrays already in memory

Medians of --reps runs after one warm-up each (files in the page cache), the
variants interleaved within each repetition.
Optionally a second CLI binary (--cli2, e.g. the previous main) side by side,
and `strace -f -c` counts of sched_yield per process run.

Run: /usr/bin/python3 bench/cli_overhead.py [--n 16384] [--reps 15] [--cli2 PATH]
"""
import argparse
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))


def interleaved(fns, reps):
    """Median and best seconds of each fn, the fns run in turn within every
    repetition (so that a busy moment of a shared machine hits them all)."""
    for fn in fns:
        fn()
    ts = [[] for _ in fns]
    for r in range(reps):
        order = list(range(len(fns)))
        order = order[r % len(order):] + order[:r % len(order)]
        for i in order:
            t0 = time.perf_counter()
            fns[i]()
            ts[i].append(time.perf_counter() - t0)
    return [(statistics.median(t), min(t)) for t in ts]


def yields(cli, args):
    if not shutil.which("strace"):
        return None
    r = subprocess.run(["strace", "-f", "-c", "-e", "trace=sched_yield", str(cli), *args],
                       capture_output=True, text=True)
    for line in r.stderr.splitlines():
        if line.strip().endswith("sched_yield"):
            return int(line.split()[3])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--m", type=int, default=64, help="1-D blocks (mixing M x M)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--cli", default=str(ROOT / os.environ.get("LA_BUILD", "build") / "longattn"))
    ap.add_argument("--cli2", default=None, help="a second CLI binary to time beside the first")
    a = ap.parse_args()
    os.environ.setdefault("LONGATTN_LIB", str(pathlib.Path(a.cli).parent / "liblongattn.so"))
    import longattn

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="la_cli_overhead_"))
    g = np.random.default_rng(0)
    shape = (1, a.n, a.heads, a.d)
    for name in "qkv":
        np.save(tmp / f"{name}.npy", g.standard_normal(shape).astype(np.float32))
    W = np.asarray(longattn.mhla_init((a.m,)), np.float32)
    np.save(tmp / "w.npy", W)
    files = [tmp / f"{n}.npy" for n in ("q", "k", "v", "w")]

    def inproc():
        q, k, v, w = (np.load(f) for f in files)
        o = longattn.mhla(q, k, v, w)
        np.save(tmp / "o_py.npy", o)

    q, k, v, w = (np.load(f) for f in files)

    def call():
        longattn.mhla(q, k, v, w)

    args = ["run", "mhla", "--q", files[0], "--k", files[1], "--v", files[2], "--mixing", files[3],
            "--out", tmp / "o_cli.npy"]
    args = [str(x) for x in args]

    def proc(cli):
        return lambda: subprocess.run([cli, *args], check=True)

    names = ["call (longattn.mhla only)", "in-process (load + call + save)", f"process {a.cli}"]
    fns = [call, inproc, proc(a.cli)]
    if a.cli2:
        names.append(f"process {a.cli2}")
        fns.append(proc(a.cli2))
    rows = list(zip(names, interleaved(fns, a.reps)))
    o1, o2 = np.load(tmp / "o_py.npy"), np.load(tmp / "o_cli.npy")
    assert np.array_equal(o1, o2), "CLI and package outputs differ"
    base = rows[1][1][0]
    print(f"# N={a.n} H={a.heads} D={a.d} M={a.m}, {os.cpu_count()} cores, medians of {a.reps} interleaved")
    for name, (med, best) in rows:
        print(f"{name:60s} {med * 1e3:8.1f} ms (best {best * 1e3:6.1f})  {med / base:5.2f}x in-process")
    for cli in [a.cli] + ([a.cli2] if a.cli2 else []):
        y = yields(cli, args)
        if y is not None:
            print(f"sched_yield calls, one run of {cli}: {y}")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
