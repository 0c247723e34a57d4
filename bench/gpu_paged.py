"""Paged serving benchmark on the GPU (issue 18), run by tests/cuda/gpu_paged.sh.

  decode : 64 sequences, next_n = 1, HI = 64, dI = 128, topk = 2048, an fp8
           e4m3 paged cache (132 B per token) and e4m3 queries (per (query,
           head) scale amax/448 folded into w, as DeepSeek's indexer does:
           the paged tensor-core path); contexts spread over 32K-128K (the
           issue's shape), then every context at 32K, 64K and 128K.
           la_dsa_topk_paged against its byte floor (every cached key read
           once at the measured read bandwidth), la_hisa_topk_paged against
           DSA, a bf16-cache DSA row at 128K (256 B per token), and the plain
           PyTorch gather-and-score peer: block-table gather of bf16 pages,
           einsum, ReLU, weighted head sum, torch.topk (eager, per sequence;
           and torch.compile of the batched padded form, when --compile).
           Each call is timed alone (events around one call, after a
           synchronization: the issue's measure) and back to back (ten
           calls between two events, as a decode loop that does not wait
           per step issues them). "kernels" is the device time of the
           call's kernels alone (torch.profiler's CUDA kernel sum, taken
           after every row's event timings: the profiler's hooks slow the
           launches that follow it); call - kernels is the host side
           (argument checks, launches: the block table, lengths and q_seq
           stay on the device, their values checked there); "host time"
           is time.perf_counter around one call after a synchronization:
           the host's share up to the call's return (Python layers, C
           checks, allocations, launches), the kernels running on after it.
  prefill: one sequence, 4096 queries at 128K context: HISA paged vs DSA
           paged (both measured on the full chunk), HISA's kernel time.
Times: medians of CUDA-event timings through the Python package. The
variants of the "paged" family ("wgmma") are timed in C by
dev/bench_gpu_paged.cu (the context's variant is not exported to Python).
Usage: python3 bench/gpu_paged.py [--json OUT.json] [--quick] [--compile]
"""
import json
import os
import sys
import time

import numpy as np
import torch

import longattn
from benchlib import cuda_median_ms

PS, DI, HI, TOPK = 64, 128, 64, 2048
T0 = time.time()


def med(fn, warm=3, iters=20):
    return cuda_median_ms(fn, reps=iters, warm=warm)


def pipelined_ms(fn, calls=10, iters=10):
    """Median per-call time of `calls` back-to-back calls between two events
    (a decode loop that does not wait for each step: the host's launch work
    then overlaps the previous call's kernels)."""
    return cuda_median_ms(lambda: [fn() for _ in range(calls)], reps=iters, warm=1) / calls


def host_us(fn, warm=3, iters=20):
    """Median host time of one call in microseconds: time.perf_counter
    around the call after a synchronization (the Python layers, the C
    checks, allocations and launches up to its return; not the kernels,
    which run on after it returns)."""
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return float(np.median(ts)) * 1e6


def kernel_ms(fn):
    """Sum of the CUDA kernel times of one call of fn (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    tot = 0.0  # self device times: each kernel counted once
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0)
        tot += t
        rows.append((t, e.count, e.key))
    if os.environ.get("LA_PAGED_KERNELS") == "1":  # where a call's device time goes, kernel by kernel
        for t, n, key in sorted(rows, reverse=True)[:12]:
            print(f"    kernel {t / 1e3:8.4f} ms  x{n:<3d} {key[:100]}")
    return tot / 1e3


def read_bandwidth():
    """Bytes/s of a read-only pass (a sum over 2 GiB of bytes viewed as int64)."""
    x = torch.ones(1 << 28, dtype=torch.int64, device="cuda")
    ms = med(lambda: x.sum(), warm=2, iters=10)
    return x.numel() * 8 / (ms * 1e-3)


def quant_q(q):
    """e4m3 q with a per-(query, head) scale amax/448, and that scale."""
    s = (q.abs().amax(-1, keepdim=True) / 448.0).clamp_min(1e-12)
    return (q / s).to(torch.float8_e4m3fn), s.squeeze(-1)


def make_queries(T):
    """T random query rows: q [T, HI, dI], w [T, HI] and their e4m3 forms
    (q8, with its per-head scale folded into w8)."""
    q = torch.randn(T, HI, DI, device="cuda")
    w = torch.rand(T, HI, device="cuda") / (HI * DI) ** 0.5
    q8, qs = quant_q(q)
    return q, w, q8, (w * qs).contiguous()


def build(lens, dtype="fp8_e4m3", seed=0, peer=True):
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
    peer_pages = torch.zeros(num_pages, PS, DI, dtype=torch.bfloat16, device="cuda") if peer else None
    for s, n in enumerate(lens):
        k = torch.randn(n, DI, device="cuda", generator=g)
        pos = torch.arange(n, dtype=torch.int32)
        slots = (table[s, pos // PS].long() * PS + (pos % PS)).int().cuda()
        cache.append(k, slots, torch.full((n,), s, dtype=torch.int32, device="cuda"), pos.cuda())
        if peer:
            peer_pages.view(-1, DI)[slots.long()] = k.bfloat16()
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


def torch_peer_batched(q, w, pages, table, lens, topk):
    """The batched padded form (one static shape, for torch.compile)."""
    k = pages[table.long()].reshape(table.shape[0], -1, DI)  # [nseq, maxp*PS, dI]
    sc = torch.einsum("bhd,bsd->bhs", q.bfloat16(), k).float().relu_()
    sc = (sc * w[:, :, None]).sum(1)
    pos = torch.arange(k.shape[1], device=k.device)
    sc = sc.masked_fill(pos[None, :] >= lens[:, None], float("-inf"))
    return torch.topk(sc, topk, dim=-1).indices


def decode_row(name, lens, bw, res, kern, bf16_row=False):
    nseq = len(lens)
    cache, table, cl, peer = build(lens)
    q, w, q8, w8 = make_queries(nseq)
    dsa = lambda: longattn.dsa_topk_paged(q8, w8, cache, table, cl, topk=TOPK)
    hisa = lambda: longattn.hisa_topk_paged(q8, w8, cache, table, cl, topk=TOPK)
    t_dsa, t_hisa = med(dsa), med(hisa)
    p_dsa, p_hisa = pipelined_ms(dsa), pipelined_ms(hisa)
    h_dsa, h_hisa = host_us(dsa), host_us(hisa)
    # kernel sums last: torch.profiler's CUPTI hooks stay in the process and
    # slow every later launch, so no event timing may follow them (the
    # kernel sums of all rows are taken after all rows are timed: main)
    cache.check()  # the device-side checks of the metadata found nothing
    t_peer = med(lambda: torch_peer(q, w, peer, table, cl, TOPK), warm=1, iters=3)
    tokens = sum(lens)
    floor_ms = tokens * (DI + 4) / bw * 1e3
    r = {"contexts": [lens[0], lens[-1]], "tokens": tokens, "dsa_ms": t_dsa, "dsa_pipelined_ms": p_dsa,
         "hisa_ms": t_hisa, "hisa_pipelined_ms": p_hisa, "torch_peer_ms": t_peer, "byte_floor_ms": floor_ms,
         "dsa_over_floor": t_dsa / floor_ms, "hisa_speedup_vs_dsa": t_dsa / t_hisa,
         "hisa_speedup_vs_dsa_pipelined": p_dsa / p_hisa, "dsa_host_us": h_dsa, "hisa_host_us": h_hisa}
    print("%-10s %d seqs, ctx %d..%d: DSA paged %.3f ms (back to back %.3f; %.2fx / %.2fx the %.3f ms floor), "
          "HISA paged %.3f ms (back to back %.3f): %.2fx / %.2fx faster, PyTorch gather+score %.2f ms"
          % (name, nseq, lens[0], lens[-1], t_dsa, p_dsa, t_dsa / floor_ms, p_dsa / floor_ms, floor_ms,
             t_hisa, p_hisa, t_dsa / t_hisa, p_dsa / p_hisa, t_peer), flush=True)
    print("%-10s host time per call (perf_counter around one call, to its return): DSA %.1f us, HISA %.1f us"
          % (name, h_dsa, h_hisa), flush=True)
    kern.append((name, r, dsa, hisa, cache))
    res[name] = r
    del peer
    if bf16_row:
        # its own names: the fp8 row's lambdas (kern) still read cache, table, cl
        cb, tb, clb, _ = build(lens, dtype="bf16", peer=False)
        qb = q.bfloat16()
        t_b = med(lambda: longattn.dsa_topk_paged(qb, w, cb, tb, clb, topk=TOPK))
        fl = tokens * DI * 2 / bw * 1e3
        res[name + "_bf16"] = {"dsa_ms": t_b, "byte_floor_ms": fl, "dsa_over_floor": t_b / fl}
        print("%-10s bf16 cache: DSA paged %.3f ms (%.2fx the %.3f ms floor of 256 B/token)"
              % (name, t_b, t_b / fl, fl), flush=True)
        del cb
        torch.cuda.empty_cache()


def main():
    quick = "--quick" in sys.argv
    jpath = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    res = {"device": torch.cuda.get_device_name(), "HI": HI, "dI": DI, "topk": TOPK, "page": PS}
    bw = read_bandwidth()
    res["read_bandwidth_GBps"] = bw / 1e9
    print("read bandwidth %.0f GB/s (sum over 2 GiB)" % (bw / 1e9), flush=True)
    nseq = 8 if quick else 64
    mixed = [int(x) for x in np.linspace(32768, 131072, nseq)]
    kern = []  # (name, row, dsa, hisa, cache): kernel sums after every row's event timings
    decode_row("decode", mixed, bw, res, kern)
    for L in (32768, 65536, 131072):
        decode_row("decode%dk" % (L // 1024), [L] * nseq, bw, res, kern, bf16_row=L == 131072)
    # prefill: one sequence, 4096 queries at 128K
    L, Tq = 131072, (512 if quick else 4096)
    cache, table, cl, _ = build([L], seed=1, peer=False)
    _, _, q8, w8 = make_queries(Tq)
    t_hisa = med(lambda: longattn.hisa_topk_paged(q8, w8, cache, table, cl, next_n=Tq, topk=TOPK), warm=1, iters=5)
    t_dsa = med(lambda: longattn.dsa_topk_paged(q8, w8, cache, table, cl, next_n=Tq, topk=TOPK), warm=1, iters=3)
    for name, r, dsa, hisa, _ in kern:  # the profiler from here on (see decode_row)
        r["dsa_kernels_ms"], r["hisa_kernels_ms"] = kernel_ms(dsa), kernel_ms(hisa)
        r["dsa_kernels_over_floor"] = r["dsa_kernels_ms"] / r["byte_floor_ms"]
        print("%-10s kernels (torch.profiler sum): DSA %.3f ms (%.2fx the floor), HISA %.3f ms"
              % (name, r["dsa_kernels_ms"], r["dsa_kernels_over_floor"], r["hisa_kernels_ms"]), flush=True)
    del kern
    # HISA's kernels one by one with LA_PAGED_KERNELS=1 (block stage, buckets, candidates, top-k)
    k_hisa = kernel_ms(lambda: longattn.hisa_topk_paged(q8, w8, cache, table, cl, next_n=Tq, topk=TOPK))
    res["prefill"] = {"L": L, "queries": Tq, "hisa_ms": t_hisa, "hisa_kernels_ms": k_hisa, "dsa_ms": t_dsa,
                      "hisa_speedup_vs_dsa": t_dsa / t_hisa}
    print("prefill    %d queries at %d: HISA paged %.2f ms (kern %.2f), DSA paged %.2f ms: HISA %.1fx faster"
          % (Tq, L, t_hisa, k_hisa, t_dsa, t_dsa / t_hisa), flush=True)
    save(res, jpath)
    del cache
    torch.cuda.empty_cache()
    if "--compile" in sys.argv:  # last: its compile time must not cost the rows above
        compiled_peer(mixed, res["decode"])
        save(res, jpath)


def save(res, jpath):
    if jpath:
        with open(jpath, "w") as f:
            json.dump(res, f, indent=1)
        print("wrote %s" % jpath, flush=True)


def compiled_peer(lens, r):
    """torch.compile of the batched padded PyTorch form on the decode shape."""
    nseq = len(lens)
    cache, table, cl, peer = build(lens)
    del cache
    q = torch.randn(nseq, HI, DI, device="cuda")
    w = torch.rand(nseq, HI, device="cuda") / (HI * DI) ** 0.5
    try:
        r["torch_batched_eager_ms"] = med(lambda: torch_peer_batched(q, w, peer, table, cl, TOPK), iters=3)
        fn = torch.compile(torch_peer_batched, dynamic=False)
        t1 = time.time()
        fn(q, w, peer, table, cl, TOPK)
        torch.cuda.synchronize()
        r["torch_compile_s"] = time.time() - t1
        r["torch_compiled_ms"] = med(lambda: fn(q, w, peer, table, cl, TOPK), iters=3)
        print("decode     PyTorch batched padded: eager %.2f ms, torch.compile %.2f ms (compile %.0f s)"
              % (r["torch_batched_eager_ms"], r["torch_compiled_ms"], r["torch_compile_s"]), flush=True)
    except Exception as e:  # the peer is optional: report and go on
        print("decode     torch.compile peer failed: %s" % str(e).splitlines()[0][:200], flush=True)


if __name__ == "__main__":
    main()
