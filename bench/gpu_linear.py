"""Peers of the CUDA linear family on the GPU machine (torch, Triton), same
shapes as dev/bench_gpu_linear.cu: B=1, H=12, D=Dv=128, bf16.

  python3 bench/gpu_linear.py [--quick]

Peers: SDPA (flash backend), plain-PyTorch einsum MHLA (M=16) and linear
attention, the official MHLA DiT attention core (the tensor ops of
MHLA4DiT.forward between the projections, eager), and, when their sources are
in peers/ (ignored folder; see bench/README or docs/PERF.md), flash-linear-
attention's chunk_linear_attn and flash-bidirectional-linear-attention's
linear_attention. Medians from triton.testing.do_bench.
"""
import os
import sys

import torch
import torch.nn.functional as F
import triton

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B, H, D = 1, 12, 128
BW, FL = 4.2e12, 760e12
quick = "--quick" in sys.argv
fla_only = "--fla" in sys.argv   # flash-linear-attention alone (Triton autotuning is slow)
Ns = [4096, 16384, 32768, 131072] if quick else [4096, 8192, 16384, 32768, 65536, 131072]
if fla_only:
    Ns = [8192, 32768]


def _arg(name, default=None):
    if name in sys.argv:
        i = sys.argv.index(name)
        if i + 1 < len(sys.argv):
            return sys.argv[i + 1]
    return default


# --peer NAME: one peer only (sdpa, einsum, official, fbla, video), so that a
# slow Triton compile cannot starve the others (tests/cuda/gpu_peers.sh runs
# each in its own process with its own timeout); --ns 4096,32768: the sizes.
only = _arg("--peer")
if _arg("--ns"):
    Ns = [int(x) for x in _arg("--ns").split(",")]


def want(name):
    return only is None or only == name


def bench(fn):
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


def main():
    dev = "cuda"
    if fla_only and fla_mod is None:
        print("# fla not available")
        return
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
