"""One call each of paged DSA and HISA (decode at 64 x 128K and the 32K-128K
spread, prefill 4096 rows at 128K) between cudaProfilerStart / Stop, for
Nsight Compute's per-kernel view of where a call's time goes:
  ncu --clock-control none --profile-from-start off --section SpeedOfLight \
      --section Occupancy --section LaunchStats --section WarpStateStats \
      python3 dev/prof_paged.py
(LONGATTN_LIB and PYTHONPATH=python:bench as for bench/gpu_paged.py)."""
import numpy as np
import torch

import longattn
from gpu_paged import TOPK, build, make_queries


def calls(lens, nq=1, seed=0):
    cache, table, cl, _ = build(lens, seed=seed, peer=False)
    _, _, q8, w8 = make_queries(len(lens) * nq)
    dsa = lambda: longattn.dsa_topk_paged(q8, w8, cache, table, cl, next_n=nq, topk=TOPK)
    hisa = lambda: longattn.hisa_topk_paged(q8, w8, cache, table, cl, next_n=nq, topk=TOPK)
    # prefill: HISA only (DSA's 4096-row call is timed by bench/gpu_paged.py)
    return cache, ((dsa, hisa) if nq == 1 else (hisa,))


def main():
    rows = [("decode all 128K", [131072] * 64, 1),
            ("decode spread", [int(x) for x in np.linspace(32768, 131072, 64)], 1),
            ("prefill 4096 at 128K", [131072], 4096)]
    for name, lens, nq in rows:
        cache, fns = calls(lens, nq)
        for fn in fns:  # warm: workspaces, lazy module loads
            fn()
        torch.cuda.synchronize()
        print("profiling:", name, flush=True)
        torch.cuda.profiler.start()
        for fn in fns:
            fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        del cache
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
