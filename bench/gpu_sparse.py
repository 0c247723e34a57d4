"""Plain-PyTorch peers for the CUDA sparse family (issue 7), timed in the same
device call as dev/bench_gpu_sparse.cu:
  - indexer: chunked einsum + ReLU + weighted head sum + torch.topk
    (HI=64, dI=128, k=2048, Tq=1024 queries at the end of an L-token context,
    causal mask), bf16 q/k, fp32 scores;
  - torch.topk alone over 1024 x 64K fp32.
Medians of CUDA-event timings.  Usage: python3 bench/gpu_sparse.py [--quick]
"""
import sys

import torch

from benchlib import cuda_median_ms

def med(fn, warm=2, iters=10):
    return cuda_median_ms(fn, reps=iters, warm=warm)


def torch_indexer(q, k, w, topk, chunk=128):
    T, HI, dI = q.shape
    L = k.shape[0]
    out = torch.empty(T, topk, dtype=torch.int64, device=q.device)
    pos = torch.arange(L, device=q.device)
    for t0 in range(0, T, chunk):
        qc = q[t0:t0 + chunk]
        s = torch.einsum("thd,sd->ths", qc, k).float().relu_()
        s = torch.einsum("ths,th->ts", s, w[t0:t0 + chunk])
        end = (L - T + torch.arange(t0, t0 + qc.shape[0], device=q.device) + 1)[:, None]
        s.masked_fill_(pos[None, :] >= end, float("-inf"))
        out[t0:t0 + chunk] = torch.topk(s, topk, dim=1).indices
    return out

def main():
    quick = "--quick" in sys.argv
    dev = "cuda"
    torch.manual_seed(0)
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    x = torch.randn(1024, 65536, device=dev)
    ms = med(lambda: torch.topk(x, 2048, dim=1))
    print(f"torch.topk 1024x65536 k=2048: {ms:.3f} ms")
    del x
    T, HI, dI, K = 1024, 64, 128, 2048
    Ls = [8192, 65536] if quick else [8192, 16384, 32768, 65536, 131072, 262144]
    for L in Ls:
        q = torch.randn(T, HI, dI, device=dev, dtype=torch.bfloat16)
        k = torch.randn(L, dI, device=dev, dtype=torch.bfloat16)
        w = torch.randn(T, HI, device=dev) / (HI * dI) ** 0.5
        ms = med(lambda: torch_indexer(q, k, w, K), warm=1, iters=5 if L >= 131072 else 10)
        print(f"torch indexer L={L}: {ms:.3f} ms")
        del q, k, w
        torch.cuda.empty_cache()

if __name__ == "__main__":
    main()
