"""PyTorch SDPA on the shapes dev/cuda/softmax.cu times: B = 1, 12x128 channels
(D 128 H 12, D 64 H 24, D 32 H 48), bf16 and f16, causal and not, forward and
backward (autograd.grad of q, k, v). CUDA events, median of the timed calls
after warm-ups. Lines "sdpa-fwd ..." / "sdpa-bwd ..." in the driver's format,
with the backend and the layout last.

    python3 dev/cuda/softmax_sdpa.py [--backends flash,default,cudnn] [--layouts bhnd,bnhd]
                                     [--ns 8192,32768] [--dtypes bf16,f16] [--dims 128,64,32]
                                     [--passes fwd,bwd]
backends: flash (SDPBackend.FLASH_ATTENTION forced), cudnn (CUDNN_ATTENTION forced),
default (PyTorch's own choice). layouts: bhnd = contiguous [B,H,N,D]; bnhd = a
[B,N,H,D] buffer (the library's layout) seen as [B,H,N,D] through transpose(1, 2).
The defaults are the first call's set (flash, bhnd, both N, every dtype and dim).
"""
import argparse
import contextlib
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from benchlib import cuda_median_ms  # noqa: E402


def median_ms(fn, reps, warm=3):
    return cuda_median_ms(fn, reps=reps, warm=warm)


BACKENDS = {"flash": [SDPBackend.FLASH_ATTENTION], "cudnn": [SDPBackend.CUDNN_ATTENTION], "default": None}


def run(bw, dt, D, N, causal, backend, layout):
    C = 12 * 128
    H = C // D
    g = torch.Generator(device="cuda").manual_seed(1)
    if layout == "bnhd":
        q, k, v, do = ((torch.rand(1, N, H, D, device="cuda", dtype=dt, generator=g) * 2 - 1).transpose(1, 2)
                       for _ in range(4))
    else:
        q, k, v, do = (torch.rand(1, H, N, D, device="cuda", dtype=dt, generator=g) * 2 - 1 for _ in range(4))
    be = BACKENDS[backend]
    ctx = sdpa_kernel(be) if be else contextlib.nullcontext()
    with ctx:
        if not bw:
            ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)),
                           10 if N > 8192 else 20)
        else:
            qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
            o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=bool(causal))
            ms = median_ms(lambda: torch.autograd.grad(o, (qq, kk, vv), do, retain_graph=True),
                           5 if N > 8192 else 10, 2)
    fl = 4.0 * N * N * H * D * (0.5 if causal else 1.0) * (2.5 if bw else 1.0)
    name = "bf16" if dt == torch.bfloat16 else "f16 "
    print("sdpa-%s %s D=%d H=%d N=%d causal=%d %9.3f ms %6.1f TFLOP/s %s %s" %
          ("bwd" if bw else "fwd", name, D, H, N, causal, ms, fl / (ms * 1e-3) / 1e12, backend, layout),
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backends", default="flash")
    ap.add_argument("--layouts", default="bhnd")
    ap.add_argument("--ns", default="8192,32768")
    ap.add_argument("--dtypes", default="bf16,f16")
    ap.add_argument("--dims", default="128,64,32")
    ap.add_argument("--passes", default="fwd,bwd")
    a = ap.parse_args()
    print("# torch", torch.__version__, torch.cuda.get_device_name(0), flush=True)
    dts = {"bf16": torch.bfloat16, "f16": torch.float16}
    for bw in [p == "bwd" for p in a.passes.split(",")]:
        for dn in a.dtypes.split(","):
            for D in [int(x) for x in a.dims.split(",")]:
                for N in [int(x) for x in a.ns.split(",")]:
                    if bw and dn == "f16" and N == 8192 and a.ns == "8192,32768":
                        continue
                    for causal in (0, 1):
                        for backend in a.backends.split(","):
                            for layout in a.layouts.split(","):
                                try:
                                    run(bw, dts[dn], D, N, causal, backend, layout)
                                except Exception as e:  # a backend that refuses the shape
                                    print("sdpa-%s %s D=%d N=%d causal=%d %s %s: %s" %
                                          ("bwd" if bw else "fwd", dn, D, N, causal, backend, layout,
                                           str(e).splitlines()[0][:120]), flush=True)


if __name__ == "__main__":
    main()
