#!/usr/bin/env python3
"""The official TileLang DSA "lightning" indexer (and HISA indexer) beside ours, one process.

Peer code: tile-ai/tilelang examples/deepseek_v32 (fp8_lighting_indexer.py) and
examples/dsa_hisa (hisa.py), copied into the ignored peers/tilelang/examples/ (see
dev/NOTES_tilelang_peer.md: commit, wheels, the two device calls). TileLang itself comes
from wheels installed into the ignored .pylib (tests/cuda/gpu_tl1.sh, gpu_tl2.sh).

Shapes (our sparse bench): HI = 64 index heads, dI = 128, Tq = 1024 queries at the end of
an L-token context, causal (query i sees keys [0, L-Tq+i+1)), topk = 2048; HISA B = 128,
m = 64. Inputs: random bf16 q, k; fp8 e4m3 copies with a per-key-row k_scale [L] and a
per-(query, head) q_scale [Tq, HI] (amax/448); random weights w [Tq, HI]. The official
kernels take k_scale and fold q_scale into the weights (w*qs), which is the same score
ks[s] * sum_h (w*qs)[t,h] * ReLU(q8.k8) as ours (scales > 0 move outside the ReLU).

Timed (torch.cuda.Event, median of --reps after --warmup runs):
  official: (a) mqa_attn_return_logits kernel alone, (a') + clean_logits_ (the example's
            interface), (b) + torch.topk(2048) = their DSA pipeline; hisa_indexer (all
            kernels + both torch.topk + index translation) at the --hisa-ls lengths
            (its kernels are specialised on the sequence lengths: one JIT compile per L);
  ours:     longattn.dsa_topk fp8 (k_scale, q_scale) and bf16, longattn.hisa_topk
            (fp8 when the build takes it, else says so) and bf16.
Overlap: |ours ∩ official| / topk per query (fp8 DSA vs official DSA; our HISA vs the
official HISA), mean and min over queries. Not expected to be 1: different rounding.

Robust by design: a failing TileLang import or compile prints one line starting with
"# OFFICIAL UNAVAILABLE" and the run goes on with our numbers; exit status 0.
  PYTHONPATH=$PWD/.pylib LA_BUILD=build-gpu python3 bench/gpu_tilelang_indexer.py --budget 150
"""
import argparse
import os
import sys
import time
import traceback

T0 = time.time()


def log(*a):
    print(*a, flush=True)


def el():
    return f"{time.time() - T0:.0f} s"


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ls", default="65536,131072,32768,16384,8192")
    ap.add_argument("--hisa-ls", default="65536,131072,32768,16384,8192",
                    help="L at which the official HISA runs (one JIT compile of 4 kernels each)")
    ap.add_argument("--tq", type=int, default=1024)
    ap.add_argument("--hi", type=int, default=64)
    ap.add_argument("--di", type=int, default=128)
    ap.add_argument("--topk", type=int, default=2048)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--block-topk", type=int, default=64)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget", type=float, default=150.0, help="seconds; no new L starts after")
    ap.add_argument("--peer-dir", default="peers/tilelang/examples")
    ap.add_argument("--no-official", action="store_true")
    ap.add_argument("--no-ours", action="store_true")
    return ap.parse_args()


def first_call_s(torch, fn):
    """Seconds of the first call (JIT compile + one run), synchronised."""
    torch.cuda.synchronize()
    t = time.time()
    r = fn()
    torch.cuda.synchronize()
    return time.time() - t, r


def short(e):
    s = f"{type(e).__name__}: {e}".replace("\n", " | ")
    return s[:400]


def overlap(torch, a, b, L):
    """Fraction of b's valid indices (>= 0) that a also holds, per row: (mean, min)."""
    a = a.long()
    b = b.long()
    m = torch.zeros(a.shape[0], L + 1, dtype=torch.bool, device=a.device)
    m.scatter_(1, torch.where(a >= 0, a, L), True)
    m[:, L] = False
    vb = b >= 0
    hit = m.gather(1, torch.where(vb, b, L)) & vb
    per = hit.sum(1).double() / vb.sum(1).clamp(min=1).double()
    return per.mean().item(), per.min().item()


def quant_fp8(torch, x, dims):
    """x float -> (fp8 e4m3 x / s, s) with s = amax over `dims` / 448 (>= 1e-8)."""
    s = x.float().abs().amax(dim=dims, keepdim=True).clamp(min=1e-8 * 448) / 448.0
    return (x.float() / s).to(torch.float8_e4m3fn), s


def main():
    args = parse()
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gpu_sparse import med  # CUDA-event median after warm-up, as bench/gpu_sparse.py times its peers

    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no cuda"
    log(f"# gpu_tilelang_indexer: torch {torch.__version__}, {dev}, python {sys.version.split()[0]}")
    log(f"# HI={args.hi} dI={args.di} Tq={args.tq} topk={args.topk} HISA B={args.block} m={args.block_topk}, "
        f"median of {args.reps} after {args.warmup} warm-up, budget {args.budget:.0f} s")
    if not torch.cuda.is_available():
        log("# NO CUDA: nothing to time")
        return 0

    # ---- the official pipeline (optional) ----
    off = None
    if not args.no_official:
        try:
            t = time.time()
            for sub in ("deepseek_v32", "dsa_hisa"):
                p = os.path.join(args.peer_dir, sub)
                if not os.path.isdir(p):
                    raise FileNotFoundError(f"{p} missing (peers/tilelang not carried?)")
                sys.path.insert(0, os.path.abspath(p))
            import tilelang

            import fp8_lighting_indexer as fli

            off = {"tilelang": tilelang, "fli": fli, "hisa": None}
            try:
                import hisa as hisa_mod

                off["hisa"] = hisa_mod
            except Exception as e:  # noqa: BLE001
                log(f"# OFFICIAL HISA UNAVAILABLE (import): {short(e)}")
            log(f"# tilelang {getattr(tilelang, '__version__', '?')} from {os.path.dirname(tilelang.__file__)}, "
                f"import {time.time() - t:.1f} s")
        except Exception as e:  # noqa: BLE001
            log(f"# OFFICIAL UNAVAILABLE (import): {short(e)}")
            traceback.print_exc(limit=3, file=sys.stdout)
            off = None

    # ---- ours (optional) ----
    la = None
    if not args.no_ours:
        try:
            sys.path.insert(0, os.path.abspath("python"))
            import longattn

            la = longattn
        except Exception as e:  # noqa: BLE001
            log(f"# OURS UNAVAILABLE (import longattn, LA_BUILD={os.environ.get('LA_BUILD')}): {short(e)}")

    H, D, T, K = args.hi, args.di, args.tq, args.topk
    ls = [int(x) for x in args.ls.split(",") if x]
    hisa_ls = [int(x) for x in args.hisa_ls.split(",") if x]
    # jobs (L, DSA?, official HISA?): the first HISA length rides with its DSA row, the
    # others (one JIT compile each) come after every DSA row
    jobs = [(L, True, bool(hisa_ls) and L == hisa_ls[0]) for L in ls]
    jobs += [(L, False, True) for L in hisa_ls[1:]]
    dsa_compiled = False
    ours_hisa_fp8_ok = True
    rows = {}
    for L, do_dsa, do_hisa in jobs:
        if time.time() - T0 > args.budget:
            log(f"# budget {args.budget:.0f} s spent at {el()}: stopping before L={L}")
            break
        torch.manual_seed(L)
        q = torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(L, D, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(T, H, device="cuda", dtype=torch.float32) * (H * D) ** -0.5).contiguous()
        q8, qs = quant_fp8(torch, q, (2,))
        k8, ks_ = quant_fp8(torch, k, (1,))
        qs = qs.reshape(T, H).contiguous()
        k_scale = ks_.reshape(L).contiguous()
        w_off = (w * qs).contiguous()  # the official kernels take no q scale: fold it into the weights
        cks = torch.zeros(T, dtype=torch.int32, device="cuda")
        cke = torch.arange(L - T + 1, L + 1, dtype=torch.int32, device="cuda")
        r = rows.setdefault(L, {"L": L})
        log(f"== L = {L}{'' if do_dsa else ' (official HISA)'} (at {el()})")

        # ours first: these numbers must come back even if the peer hangs in a compile
        if la is not None and do_dsa:
            try:
                r["our_fp8"] = med(lambda: la.dsa_topk(q8, k8, w, topk=K, k_scale=k_scale, q_scale=qs),
                                   warm=args.warmup, iters=args.reps)
                r["our_idx8"] = la.dsa_topk(q8, k8, w, topk=K, k_scale=k_scale, q_scale=qs)
                r["our_bf16"] = med(lambda: la.dsa_topk(q, k, w, topk=K), warm=args.warmup, iters=args.reps)
                log(f"  ours DSA   fp8 {r['our_fp8']:.3f} ms   bf16 {r['our_bf16']:.3f} ms")
            except Exception as e:  # noqa: BLE001
                log(f"  ours DSA failed: {short(e)}")
        if la is not None:
            if ours_hisa_fp8_ok:
                try:
                    hf = lambda: la.hisa_topk(q8, k8, w, topk=K, block=args.block, block_topk=args.block_topk,  # noqa: E731
                                              k_scale=k_scale, q_scale=qs)
                    r["our_hisa_idx8"] = hf()
                    r["our_hisa_fp8"] = med(hf, warm=args.warmup, iters=args.reps)
                except Exception as e:  # noqa: BLE001
                    ours_hisa_fp8_ok = False
                    log(f"  ours HISA fp8: not available in this build ({short(e)[:160]}); bf16 only")
            try:
                hb = lambda: la.hisa_topk(q, k, w, topk=K, block=args.block, block_topk=args.block_topk)  # noqa: E731
                r["our_hisa_bf16"] = med(hb, warm=args.warmup, iters=args.reps)
                if "our_hisa_idx8" not in r:
                    r["our_hisa_idx16"] = hb()
                log(f"  ours HISA  fp8 {r.get('our_hisa_fp8', float('nan')):.3f} ms   bf16 {r['our_hisa_bf16']:.3f} ms")
            except Exception as e:  # noqa: BLE001
                log(f"  ours HISA failed: {short(e)}")

        if off is not None and do_dsa:
            fli = off["fli"]
            try:
                raw = lambda: fli.mqa_attn_return_logits(q8.view(T * H, D), k8, k_scale, w_off, cks, cke)  # noqa: E731
                full = lambda: fli.mqa_attn_return_logits_interface(q8, k8, k_scale, w_off, cks, cke)  # noqa: E731
                if not dsa_compiled:
                    s1, _ = first_call_s(torch, raw)
                    s2, _ = first_call_s(torch, full)
                    log(f"  official DSA JIT: logits kernel {s1:.1f} s, clean_logits {s2:.1f} s (compile + first run)")
                    dsa_compiled = True
                r["off_raw"] = med(raw, warm=args.warmup, iters=args.reps)
                r["off_logits"] = med(full, warm=args.warmup, iters=args.reps)

                def pipe():
                    return torch.topk(full(), K, dim=-1).indices

                r["off_pipe"] = med(pipe, warm=args.warmup, iters=args.reps)
                r["off_idx"] = pipe()
                log(f"  official DSA fp8: logits kernel {r['off_raw']:.3f} ms, +clean {r['off_logits']:.3f} ms, "
                    f"+torch.topk {r['off_pipe']:.3f} ms")
            except Exception as e:  # noqa: BLE001
                log(f"# OFFICIAL UNAVAILABLE (DSA at L={L}): {short(e)}")
                traceback.print_exc(limit=4, file=sys.stdout)
                off = None
        if off is not None and off["hisa"] is not None and do_hisa:
            if time.time() - T0 > args.budget:
                log(f"  official HISA skipped at L={L}: budget spent ({el()})")
            else:
                try:
                    hfn = lambda: off["hisa"].hisa_indexer(q8, k8, k_scale, w_off, cks, cke, k_block_size=args.block,  # noqa: E731
                                                          block_topk=args.block_topk, topk_tokens=K)
                    s, _ = first_call_s(torch, hfn)
                    log(f"  official HISA JIT at L={L}: {s:.1f} s (4 kernels specialised on L; compile + first run)")
                    r["off_hisa"] = med(hfn, warm=args.warmup, iters=args.reps)
                    r["off_hisa_idx"] = hfn()
                    log(f"  official HISA fp8: {r['off_hisa']:.3f} ms (pooling, 2 kernels, clean, 2x torch.topk, translation)")
                except Exception as e:  # noqa: BLE001
                    log(f"# OFFICIAL HISA UNAVAILABLE at L={L}: {short(e)}")
                    traceback.print_exc(limit=4, file=sys.stdout)
                    off["hisa"] = None

        # overlaps
        if "our_idx8" in r and "off_idx" in r:
            r["ov_dsa"] = overlap(torch, r["our_idx8"], r["off_idx"], L)
            log(f"  overlap ours fp8 DSA vs official DSA top-{K}: mean {r['ov_dsa'][0]:.4f}, min {r['ov_dsa'][1]:.4f}")
        oh = r.get("our_hisa_idx8", r.get("our_hisa_idx16"))
        if oh is not None and "off_hisa_idx" in r:
            r["ov_hisa"] = overlap(torch, oh, r["off_hisa_idx"], L)
            log(f"  overlap ours HISA ({'fp8' if 'our_hisa_idx8' in r else 'bf16'}) vs official HISA: "
                f"mean {r['ov_hisa'][0]:.4f}, min {r['ov_hisa'][1]:.4f}")
        if oh is not None and "off_idx" in r:
            ov = overlap(torch, oh, r["off_idx"], L)
            log(f"  overlap ours HISA vs official DSA: mean {ov[0]:.4f}, min {ov[1]:.4f}")
        for key in [x for x in r if "idx" in x]:
            del r[key]  # free the index tensors
        torch.cuda.empty_cache()

    # summary
    def f(x):
        return f"{x:8.3f}" if isinstance(x, float) else "       -"

    def ratio(a, b):
        return f"{a / b:6.2f}x" if isinstance(a, float) and isinstance(b, float) and b > 0 else "     -"

    log("")
    log("SUMMARY (ms; ratio = official / ours, > 1: ours faster)")
    log("       L | off.logits  +clean  +topk | ours fp8  bf16 | ratio fp8 | off.HISA | ours HISA fp8  bf16 | ratio | ovl DSA ovl HISA")
    for r in sorted(rows.values(), key=lambda r: r["L"]):
        ours_h = r.get("our_hisa_fp8", r.get("our_hisa_bf16"))
        log(f"{r['L']:8d} | {f(r.get('off_raw'))}{f(r.get('off_logits'))}{f(r.get('off_pipe'))} |"
            f"{f(r.get('our_fp8'))}{f(r.get('our_bf16'))} |   {ratio(r.get('off_pipe'), r.get('our_fp8'))} |"
            f"{f(r.get('off_hisa'))} |      {f(r.get('our_hisa_fp8'))}{f(r.get('our_hisa_bf16'))} |"
            f"{ratio(r.get('off_hisa'), ours_h)} | "
            f"{r['ov_dsa'][0] if 'ov_dsa' in r else float('nan'):7.4f} {r['ov_hisa'][0] if 'ov_hisa' in r else float('nan'):7.4f}")
    log(f"# done at {el()}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001  (even a crash leaves rc 0 and one clear line)
        print(f"# BENCH ERROR: {short(e)}", flush=True)
        traceback.print_exc(limit=5, file=sys.stdout)
        sys.exit(0)
