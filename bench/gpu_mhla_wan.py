"""MHLA forward at the Wan-2.1 video shape through the longattn package, beside
plain PyTorch (the same formula in bf16: eager, and torch.compile unless
--no-compile), on the GPU machine. Grid 21x30x50 (N = 31500) in blocks of
3x5x10 (M = 150), B 1, H 12, D = Dv = 128, bf16, shared W [M, M] fp32,
relu_eps features, per_query. Medians of CUDA-event-timed calls (benchlib).

    python3 bench/gpu_mhla_wan.py [--reps 50] [--no-compile]
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import longattn  # noqa: E402
from benchlib import cuda_median_ms  # noqa: E402

B, H, D = 1, 12, 128
GRID, BLOCKS = (21, 30, 50), (3, 5, 10)
BW = 4.2e12


def blocked(x):
    """[B, N, H, D] on GRID -> [B, M, tokens per block, H, D]"""
    (T, Hm, Wm), (gt, gh, gw) = GRID, BLOCKS
    x = x.view(B, gt, T // gt, gh, Hm // gh, gw, Wm // gw, H, D)
    return x.permute(0, 1, 3, 5, 2, 4, 6, 7, 8).reshape(B, gt * gh * gw, -1, H, D)


def unblocked(o):
    (T, Hm, Wm), (gt, gh, gw) = GRID, BLOCKS
    o = o.view(B, gt, gh, gw, T // gt, Hm // gh, Wm // gw, H, D)
    return o.permute(0, 1, 4, 2, 5, 3, 6, 7, 8).reshape(B, T * Hm * Wm, H, D)


def plain(q, k, v, W, eps=1e-6):
    qb, kb, vb = blocked(q), blocked(k), blocked(v)
    qb, kb = F.relu(qb) + 1e-6, F.relu(kb) + 1e-6
    S = torch.einsum("bmnhd,bmnhe->bmhde", kb, vb)
    z = kb.sum(2)
    S = torch.einsum("im,bmhde->bihde", W, S)
    z = torch.einsum("im,bmhd->bihd", W, z)
    num = torch.einsum("binhd,bihde->binhe", qb, S)
    den = torch.einsum("binhd,bihd->binh", qb, z).unsqueeze(-1) + eps
    return unblocked(num / den)


def main():
    reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 50
    dev = "cuda"
    N = GRID[0] * GRID[1] * GRID[2]
    M = BLOCKS[0] * BLOCKS[1] * BLOCKS[2]
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, N, H, D, device=dev, dtype=torch.bfloat16) for _ in range(3))
    W = torch.rand(M, M, device=dev) / M
    ours = lambda: longattn.mhla(q, k, v, W, grid=GRID, blocks=BLOCKS)  # noqa: E731
    o = ours()
    ref = plain(q.double(), k.double(), v.double(), W.double())
    pt = plain(q, k, v, W.to(torch.bfloat16))
    err = lambda x: ((x.double() - ref).abs().max() / ref.abs().max()).item()  # noqa: E731
    floor = (4 * B * N * H * D * 2 + 4 * 2 * B * H * M * (D * D + D)) / BW * 1e3
    print(f"# accuracy vs float64: longattn {err(o):.3e}, plain PyTorch bf16 {err(pt):.3e}", flush=True)
    ms = cuda_median_ms(ours, reps=reps, warm=5)
    print(f"longattn.mhla wan (package, default variant): {ms:.4f} ms per call; floor {floor:.4f} ms "
          f"(x{ms / floor:.2f})", flush=True)
    Wb = W.to(torch.bfloat16)
    eager = lambda: plain(q, k, v, Wb)  # noqa: E731
    print(f"plain PyTorch eager bf16: {cuda_median_ms(eager, reps=reps, warm=3):.4f} ms", flush=True)
    if "--no-compile" not in sys.argv:
        comp = torch.compile(plain)
        print(f"plain PyTorch torch.compile bf16: {cuda_median_ms(lambda: comp(q, k, v, Wb), reps=reps, warm=3):.4f} ms",
              flush=True)


if __name__ == "__main__":
    main()
