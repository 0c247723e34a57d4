"""Paged serving benchmark on the GPU (issue 18), run by tests/cuda/gpu_paged.sh.

  decode : 64 sequences, contexts spread over 32K-128K, next_n = 1, HI = 64,
           dI = 128, topk = 2048, fp8 e4m3 paged cache (132 B per token):
           la_dsa_topk_paged vs its byte floor (every cached token read once
           at the measured copy bandwidth), la_hisa_topk_paged vs DSA, and a
           plain-PyTorch gather-and-score peer (block-table gather of bf16
           pages, einsum, ReLU, weighted head sum, torch.topk).
  decode128: the same with every context at 128K (HISA vs DSA at 128K).
  prefill: one sequence, a chunk of 4096 queries at 128K context: HISA paged;
           DSA paged measured on the last 128 queries of the chunk and scaled
           by 4096/128 (labelled as such: the simple fp32 kernel would take
           most of the device call on the full chunk).
Times: medians of CUDA-event timings (each paged call includes its host-side
validation: the block table and lengths are copied to the host).
Usage: python3 bench/gpu_paged.py [--json OUT.json] [--quick]
"""
import json
import sys

import numpy as np
import torch

import longattn
from benchlib import cuda_median_ms

PS, DI, HI, TOPK = 64, 128, 64, 2048


def med(fn, warm=1, iters=5):
    return cuda_median_ms(fn, reps=iters, warm=warm)


def copy_bandwidth():
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = med(lambda: y.copy_(x), warm=2, iters=10)
    return 2 * x.numel() / (ms * 1e-3)  # bytes/s (read + write)


def build(lens, dtype="fp8_e4m3", seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    nseq = len(lens)
    pages_per = [(n + PS - 1) // PS for n in lens]
    num_pages = sum(pages_per) + 1
    perm = torch.randperm(num_pages, generator=torch.Generator().manual_seed(seed)).int()
    maxp = max(pages_per)
    table = torch.zeros(nseq, maxp, dtype=torch.int32)
    at = 0
    for s, n in enumerate(pages_per):
        table[s, :n] = perm[at:at + n]
        at += n
    cache = longattn.PagedIndexCache(num_pages, page_size=PS, head_dim=DI, dtype=dtype,
                                     max_seqs=nseq, max_seq_len=max(lens), device="cuda")
    # the same keys in bf16 pages for the PyTorch peer
    peer_pages = torch.zeros(num_pages, PS, DI, dtype=torch.bfloat16, device="cuda")
    for s, n in enumerate(lens):
        k = torch.randn(n, DI, device="cuda", generator=g)
        pos = torch.arange(n, dtype=torch.int32)
        slots = (table[s, pos // PS].long() * PS + (pos % PS)).int()
        cache.append(k, slots.cuda(), torch.full((n,), s, dtype=torch.int32, device="cuda"), pos.cuda())
        peer_pages.view(-1, DI)[slots.cuda().long()] = k.bfloat16()
        del k
    return cache, table.cuda(), torch.tensor(lens, dtype=torch.int32, device="cuda"), peer_pages


def torch_peer(q, w, pages, table, lens, topk):
    """Per sequence: gather its pages, score in bf16 -> fp32, ReLU, weighted head sum, topk."""
    out = []
    for s in range(table.shape[0]):
        n = int(lens[s])
        np_ = (n + PS - 1) // PS
        k = pages[table[s, :np_].long()].reshape(-1, DI)[:n]
        sc = torch.einsum("hd,sd->hs", q[s].bfloat16(), k).float().relu_()
        sc = (sc * w[s][:, None]).sum(0)
        out.append(torch.topk(sc, min(topk, n)).indices)
    return out


def main():
    quick = "--quick" in sys.argv
    jpath = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    res = {"device": torch.cuda.get_device_name(), "HI": HI, "dI": DI, "topk": TOPK, "page": PS}
    bw = copy_bandwidth()
    res["copy_bandwidth_GBps"] = bw / 1e9
    print("copy bandwidth %.0f GB/s (read+write of a 1 GiB tensor)" % (bw / 1e9))
    nseq = 8 if quick else 64
    for name, lens in (("decode", [int(x) for x in np.linspace(32768, 131072, nseq)]),
                       ("decode128", [131072] * nseq)):
        cache, table, cl, peer = build(lens)
        q = torch.randn(nseq, HI, DI, device="cuda")
        w = torch.rand(nseq, HI, device="cuda") / (HI * DI) ** 0.5
        t_dsa = med(lambda: longattn.dsa_topk_paged(q, w, cache, table, cl, topk=TOPK), iters=1)
        t_hisa = med(lambda: longattn.hisa_topk_paged(q, w, cache, table, cl, topk=TOPK))
        t_peer = med(lambda: torch_peer(q, w, peer, table, cl, TOPK), iters=3)
        tokens = sum(lens)
        floor_ms = tokens * (DI + 4) / bw * 1e3 * 2  # copy bw counts read+write: a read-only pass moves half
        r = {"contexts": [lens[0], lens[-1]], "tokens": tokens, "dsa_ms": t_dsa, "hisa_ms": t_hisa,
             "torch_peer_ms": t_peer, "byte_floor_ms": floor_ms, "dsa_over_floor": t_dsa / floor_ms,
             "hisa_speedup_vs_dsa": t_dsa / t_hisa}
        res[name] = r
        print("%-9s %d seqs, ctx %d..%d: DSA paged %.3f ms (%.1fx the %.3f ms byte floor), "
              "HISA paged %.3f ms (%.2fx faster than DSA), PyTorch gather+score %.3f ms"
              % (name, nseq, lens[0], lens[-1], t_dsa, t_dsa / floor_ms, floor_ms, t_hisa,
                 t_dsa / t_hisa, t_peer))
        del cache, peer
        torch.cuda.empty_cache()
    # prefill: one sequence, 4096 queries at 128K
    L, Tq, Tdsa = 131072, (512 if quick else 4096), 128
    cache, table, cl, peer = build([L], seed=1)
    q = torch.randn(Tq, HI, DI, device="cuda")
    w = torch.rand(Tq, HI, device="cuda") / (HI * DI) ** 0.5
    t_hisa = med(lambda: longattn.hisa_topk_paged(q, w, cache, table, cl, next_n=Tq, topk=TOPK),
                 warm=0, iters=1)
    # DSA on the chunk's last Tdsa queries: a context of L with next_n = Tdsa sees the same ranges
    qd, wd = q[-Tdsa:].contiguous(), w[-Tdsa:].contiguous()
    t_dsa_part = med(lambda: longattn.dsa_topk_paged(qd, wd, cache, table, cl, next_n=Tdsa, topk=TOPK),
                     warm=0, iters=1)
    t_dsa = t_dsa_part * Tq / Tdsa
    res["prefill"] = {"L": L, "queries": Tq, "hisa_ms": t_hisa, "dsa_ms_scaled": t_dsa,
                      "dsa_measured_queries": Tdsa, "dsa_measured_ms": t_dsa_part,
                      "hisa_speedup_vs_dsa": t_dsa / t_hisa}
    print("prefill   %d queries at %d: HISA paged %.2f ms; DSA paged %.2f ms on %d queries, x%d = %.1f ms "
          "(scaled); HISA %.1fx faster" % (Tq, L, t_hisa, t_dsa_part, Tdsa, Tq // Tdsa, t_dsa, t_dsa / t_hisa))
    if jpath:
        with open(jpath, "w") as f:
            json.dump(res, f, indent=1)
        print("wrote %s" % jpath)


if __name__ == "__main__":
    main()
