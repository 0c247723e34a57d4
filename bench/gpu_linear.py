"""Peers of the CUDA linear family on the GPU machine (torch, Triton), same
shapes as dev/bench_gpu_linear.cu: B=1, H=12, D=Dv=128, bf16.

  python3 bench/gpu_linear.py [--quick] [--fla] [--peer NAME] [--ns 4096,32768]
  python3 bench/gpu_linear.py --peer wan [--dtypes bf16,f16] [--reps 50] [--no-compile]

Peers: SDPA (flash backend), plain-PyTorch einsum MHLA (M=16) and linear
attention, the official MHLA DiT attention core (the tensor ops of
MHLA4DiT.forward between the projections, eager), and, when their sources are
in peers/ (ignored folder; see bench/README or docs/PERF.md), flash-linear-
attention's chunk_linear_attn and flash-bidirectional-linear-attention's
linear_attention. Medians from triton.testing.do_bench.

--peer wan (issue 15): MHLA at the Wan-2.1 video shape (21x30x50 tokens,
blocks 3x5x10, M = 150, H 12, D 128) through the longattn package
(longattn.mhla on CUDA tensors, normalize none and per_query; CUDA events
around each call, median of --reps; the kernels' time of one call from
torch.profiler; the kernel variants one call takes, from a verbose context),
beside bench/gpu_backward.py's plain-PyTorch formula `mhla_torch` (normalize
none) under torch.compile and eager, bf16. --dtypes: the element types of
our rows (a dtype the package refuses prints its message).
"""
import argparse
import os
import re
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B, H, D = 1, 12, 128
BW, FL = 4.2e12, 760e12

_ap = argparse.ArgumentParser(description="peers of the CUDA linear family (see the module doc)")
_ap.add_argument("--quick", action="store_true", help="fewer sizes")
_ap.add_argument("--fla", action="store_true", help="flash-linear-attention alone (its autotuning is slow)")
# --peer NAME: one peer only (sdpa, einsum, official, fbla, video, wan), so that a
# slow Triton compile cannot starve the others (tests/cuda/gpu_peers.sh runs
# each in its own process with its own timeout); --ns 4096,32768: the sizes.
_ap.add_argument("--peer", help="sdpa, einsum, official, fbla, video or wan")
_ap.add_argument("--ns", help="comma-separated sequence lengths")
_ap.add_argument("--dtypes", default="bf16,f16", help="--peer wan: element types of our rows")
_ap.add_argument("--reps", type=int, default=50, help="--peer wan: timed calls per row")
_ap.add_argument("--no-compile", action="store_true", help="--peer wan: no torch.compile row")
ARGS = _ap.parse_args()
quick = ARGS.quick
fla_only = ARGS.fla
Ns = [4096, 16384, 32768, 131072] if quick else [4096, 8192, 16384, 32768, 65536, 131072]
if fla_only:
    Ns = [8192, 32768]
only = ARGS.peer
if ARGS.ns:
    Ns = [int(x) for x in ARGS.ns.split(",")]


def want(name):
    return only is None or only == name


def bench(fn):
    import triton
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


def report(op, shape, ms, N, flops):
    io = 2.0 * B * N * H * 4 * D
    fb, ff = io / BW * 1e3, flops / FL * 1e3
    print(f"{op:34s} {shape:24s} {ms:9.4f} ms   byte-floor {fb:7.4f}  x{ms / max(fb, ff):.2f} of floor",
          flush=True)


def try_import(path, mod):
    if not os.path.isdir(path):
        return None
    sys.path.insert(0, path)
    try:
        return __import__(mod, fromlist=["*"])
    except Exception as e:  # peers may not import on this torch/triton
        print(f"# {mod}: import failed: {e!r}")
        return None


fla_mod = try_import(os.path.join(ROOT, "peers/fla"), "fla.ops.linear_attn") if fla_only else None
fbla_mod = try_import(os.path.join(ROOT, "peers/fbla"), "flash_bla.ops.linear_attn.fused") if want("fbla") else None


def einsum_mhla(q, k, v, W, M, eps=1e-6):
    """Plain PyTorch MHLA (1-D blocks, per_query): what a user would write."""
    Bq, N, Hq, Dq = q.shape
    q = (F.relu(q) + eps).view(Bq, M, N // M, Hq, Dq)
    k = (F.relu(k) + eps).view(Bq, M, N // M, Hq, Dq)
    v = v.view(Bq, M, N // M, Hq, -1)
    S = torch.einsum("bmnhd,bmnhe->bmhde", k, v)
    z = k.sum(2)
    S = torch.einsum("im,bmhde->bihde", W, S)
    z = torch.einsum("im,bmhd->bihd", W, z)
    num = torch.einsum("binhd,bihde->binhe", q, S)
    den = torch.einsum("binhd,bihd->binh", q, z).unsqueeze(-1) + eps
    return (num / den).reshape(Bq, N, Hq, -1)


def einsum_linear(q, k, v, eps=1e-6):
    q, k = F.relu(q), F.relu(k)
    S = torch.einsum("bnhd,bnhe->bhde", k, v)
    z = k.sum(1)
    num = torch.einsum("bnhd,bhde->bnhe", q, S)
    den = torch.einsum("bnhd,bhd->bnh", q, z).unsqueeze(-1) + eps
    return num / den


def official_mhla_core(q, k, v, Wconv, eps=1e-6):
    """MHLA4DiT.forward between to_qkv and to_out (eager), inputs in the
    module's 'b n w (h d)' blocked layout; released_vision normalizer."""
    from einops import rearrange
    Bq, M, w, C = q.shape
    k = torch.relu(k) + eps
    q = torch.relu(q) + eps
    q, k, v = (rearrange(t, "b n w (h d) -> (b h) n w d", h=H, d=D) for t in (q, k, v))
    k = k.transpose(-2, -1)
    kv = torch.matmul(k, v)
    kv = F.conv2d(kv, Wconv)
    k_sum = k.sum(dim=-1, keepdim=True)
    normalizer = F.conv2d(torch.matmul(q, k_sum), Wconv) + eps
    out = torch.matmul(q, kv) / normalizer
    return rearrange(out, "(b h) n w d -> b n w (h d)", b=Bq, h=H)


def package_pick(call):
    """The kernel variants one call takes through the longattn package: the
    call runs on a fresh thread, whose la_context (the package keeps one per
    thread) is created while LA_VERBOSE=1, with file descriptor 2 caught in a
    temporary file; the selection functions' lines "la: FAMILY: VARIANT (...)"
    become "family:variant,...". The calling thread's context is not
    verbose (created before or after), so timed calls print nothing."""
    import tempfile
    import threading
    old = os.environ.get("LA_VERBOSE")
    err = []

    def run():
        try:
            call()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 (a refused dtype: its message)
            err.append(f"{type(e).__name__}: {str(e).splitlines()[0][:160]}")
    with tempfile.TemporaryFile() as f:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        os.environ["LA_VERBOSE"] = "1"
        try:
            t = threading.Thread(target=run)
            t.start()
            t.join()
        finally:
            if old is None:
                os.environ.pop("LA_VERBOSE", None)
            else:
                os.environ["LA_VERBOSE"] = old
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read().decode(errors="replace")
    picks = []
    for line in text.splitlines():
        m = re.match(r"la: ([^:]+): (\S+)", line)
        if m and f"{m.group(1)}:{m.group(2)}" not in picks:
            picks.append(f"{m.group(1)}:{m.group(2)}")
    if err:
        return "refused", err[0]
    return (",".join(picks) or "-"), None


def wan_rows():
    """--peer wan: see the module doc. Lines "wan-py WHO DTYPE normalize=MODE: X ms ..."."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from benchlib import cuda_median_ms
    from gpu_backward import kernel_ms, mhla_torch
    import longattn
    grid, blocks = (21, 30, 50), (3, 5, 10)
    N, M = 21 * 30 * 50, 3 * 5 * 10
    dts = {"bf16": torch.bfloat16, "f16": torch.float16}
    print(f"# torch {torch.__version__} {torch.cuda.get_device_name()}; longattn {longattn.library_path()}",
          flush=True)
    # the fewest bytes at bf16: q, k, v read and o written once, and the fp32 block summaries
    # [S | z] written and read back once per head (the engine's pass structure)
    floor = (4 * B * N * H * D * 2 + 4 * 2 * B * H * M * (D * D + D)) / 4.2e12 * 1e3
    print(f"# byte floor {floor:.4f} ms (4.2 TB/s)", flush=True)
    g = torch.Generator(device="cuda").manual_seed(15)
    q, k, v = (torch.rand(B, N, H, D, device="cuda", generator=g).mul_(2).sub_(1) for _ in range(3))
    W = torch.rand(M, M, device="cuda", generator=g) / M
    with torch.no_grad():
        for dn in ARGS.dtypes.split(","):
            qd, kd, vd = (x.to(dts[dn]) for x in (q, k, v))
            for nm in ("none", "per_query"):
                def ours():
                    return longattn.mhla(qd, kd, vd, W, grid=grid, blocks=blocks, normalize=nm)
                pick, err = package_pick(ours)
                if err:
                    print(f"wan-py ours {dn} normalize={nm}: refused: {err}", flush=True)
                    continue
                ms = cuda_median_ms(ours, reps=ARGS.reps, warm=5)
                kms = kernel_ms(ours)
                print(f"wan-py ours {dn} normalize={nm}: {ms:.4f} ms (kernels {kms:.4f} ms; "
                      f"x{ms / floor:.2f} the byte floor)  pick {pick}", flush=True)
        # the plain formula, [B,H,N,D] contiguous, bf16, normalize none (its only mode)
        qt, kt, vt = (x.transpose(1, 2).contiguous().bfloat16() for x in (q, k, v))
        peers = [("torch-eager", mhla_torch)]
        if not ARGS.no_compile:
            peers.append(("torch.compile", torch.compile(mhla_torch, dynamic=False)))
        for who, f in peers:
            try:
                t0 = time.time()
                f(qt, kt, vt, W, grid, blocks)
                torch.cuda.synchronize()
                first = time.time() - t0
                ms = cuda_median_ms(lambda: f(qt, kt, vt, W, grid, blocks), reps=max(5, ARGS.reps // 2), warm=3)
                kms = kernel_ms(lambda: f(qt, kt, vt, W, grid, blocks))
                print(f"wan-py {who} bf16 normalize=none: {ms:.4f} ms (kernels {kms:.4f} ms; first call "
                      f"{first:.1f} s)", flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"wan-py {who} bf16 normalize=none: failed: {type(e).__name__}: {str(e)[:160]}", flush=True)


def main():
    dev = "cuda"
    if only == "wan":
        wan_rows()
        return
    if fla_only and fla_mod is None:
        print("# fla not available")
        return
    import triton
    torch.manual_seed(0)
    print(f"# torch {torch.__version__} triton {triton.__version__} {torch.cuda.get_device_name()}")
    for N in Ns:
        q = torch.randn(B, N, H, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn_like(q)
        v = torch.randn_like(q)
        shape = f"N={N}"
        lin_fl = 4.0 * B * N * H * D * D
        if fla_only:
            for norm in (False, True):
                ms = bench(lambda: fla_mod.chunk_linear_attn(q, k, v, normalize=norm))
                report(f"fla chunk_linear_attn norm={int(norm)}", shape, ms, N, lin_fl)
            continue
        # SDPA flash, [B,H,N,D]
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            if want("sdpa") and (N <= 65536 or not quick):
                ms = bench(lambda: F.scaled_dot_product_attention(qt, kt, vt))
                report("sdpa-flash", shape, ms, N, 4.0 * B * N * N * H * D)
                ms = bench(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True))
                report("sdpa-flash causal", shape, ms, N, 2.0 * B * N * N * H * D)
        if want("einsum"):
            for M in (16,):
                W = torch.rand(M, M, device=dev, dtype=torch.bfloat16)
                ms = bench(lambda: einsum_mhla(q, k, v, W, M))
                report(f"einsum-mhla M={M}", shape, ms, N, lin_fl)
            ms = bench(lambda: einsum_linear(q, k, v))
            report("einsum-linear", shape, ms, N, lin_fl)
        if fbla_mod is not None:
            try:
                qh, kh, vh = (x.transpose(1, 2).contiguous() for x in (F.relu(q), F.relu(k), v))
                ms = bench(lambda: fbla_mod.linear_attention(qh, kh, vh))
                report("fbla linear_attention (BHND)", shape, ms, N, lin_fl)
            except Exception as e:
                print(f"# fbla failed: {e!r}")
        if fla_mod is not None:
            try:
                for norm in (False, True):
                    ms = bench(lambda: fla_mod.chunk_linear_attn(q, k, v, normalize=norm))
                    report(f"fla chunk_linear_attn norm={int(norm)}", shape, ms, N, lin_fl)
            except Exception as e:
                print(f"# fla failed: {e!r}")
        if want("official") and (N == 16384 or N == 32768):
            # official core at a square grid: N = 16384 = 128x128, blocks of 32x32 (M=16)
            side = int(N ** 0.5) if N == 16384 else None
            if side:
                M, w = 16, N // 16
                qb, kb, vb = (x.reshape(B, M, w, H * D) for x in (q, k, v))
                Wc = torch.rand(M, M, 1, 1, device=dev, dtype=torch.bfloat16)
                try:
                    ms = bench(lambda: official_mhla_core(qb, kb, vb, Wc))
                    report("official MHLA4DiT core M=16", shape, ms, N, lin_fl)
                except Exception as e:  # einops may be missing on the machine
                    print(f"# official MHLA core failed: {e!r}")
        del q, k, v, qt, kt, vt
        torch.cuda.empty_cache()
    if fla_only or not want("video"):
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel
    # video grid 21x30x50 (N = 31500): einsum MHLA over 150 blocks of 7x6x5
    N = 21 * 30 * 50
    q = torch.randn(B, N, H, D, device=dev, dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        ms = bench(lambda: F.scaled_dot_product_attention(qt, kt, vt))
        report("sdpa-flash video", "21x30x50", ms, N, 4.0 * N * N * H * D)

    def blocked(x, g):
        # [B,N,H,D] on (21,30,50) -> [B, M, 7*6*5, H, D]
        T, Hm, Wm = 21, 30, 50
        gt, gh, gw = g
        x = x.view(B, gt, T // gt, gh, Hm // gh, gw, Wm // gw, H, D)
        return x.permute(0, 1, 3, 5, 2, 4, 6, 7, 8).reshape(B, gt * gh * gw, -1, H, D)

    for g in ((3, 5, 10), (7, 3, 5)):
        M = g[0] * g[1] * g[2]
        W = torch.rand(M, M, device=dev, dtype=torch.bfloat16)

        def run():
            qb, kb, vb = (blocked(x, g) for x in (q, k, v))
            qb, kb = F.relu(qb) + 1e-6, F.relu(kb) + 1e-6
            S = torch.einsum("bmnhd,bmnhe->bmhde", kb, vb)
            z = kb.sum(2)
            S = torch.einsum("im,bmhde->bihde", W, S)
            z = torch.einsum("im,bmhd->bihd", W, z)
            num = torch.einsum("binhd,bihde->binhe", qb, S)
            den = torch.einsum("binhd,bihd->binh", qb, z).unsqueeze(-1) + 1e-6
            return num / den

        ms = bench(run)
        report(f"einsum-mhla video M={M}", "21x30x50", ms, N, 4.0 * N * H * D * D)


if __name__ == "__main__":
    main()
