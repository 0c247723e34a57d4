"""PyTorch SDPA (flash backend) on the shapes dev/cuda/softmax.cu times: B = 1,
12x128 channels (D 128 H 12, D 64 H 24, D 32 H 48), bf16 and f16, causal and
not, forward at N = 8K and 32K, backward (autograd.grad of q, k, v) at 8K
(bf16) and 32K. CUDA events, median of the timed calls after warm-ups. Lines
"sdpa-fwd ..." / "sdpa-bwd ..." in the driver's format.

    python3 dev/cuda/softmax_sdpa.py
"""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F


def median_ms(fn, reps, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    C = 12 * 128
    print("# torch", torch.__version__, torch.cuda.get_device_name(0), flush=True)
    for bw in (0, 1):
        for dt in (torch.bfloat16, torch.float16):
            name = "bf16" if dt == torch.bfloat16 else "f16 "
            for D in (128, 64, 32):
                H = C // D
                for N in (8192, 32768):
                    if bw and dt == torch.float16 and N == 8192:
                        continue
                    g = torch.Generator(device="cuda").manual_seed(1)
                    q, k, v, do = (torch.rand(1, H, N, D, device="cuda", dtype=dt, generator=g) * 2 - 1
                                   for _ in range(4))
                    for causal in (0, 1):
                        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                            if not bw:
                                ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)),
                                               10 if N > 8192 else 20)
                            else:
                                qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
                                o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=bool(causal))
                                ms = median_ms(lambda: torch.autograd.grad(o, (qq, kk, vv), do, retain_graph=True),
                                               5 if N > 8192 else 10, 2)
                        fl = 4.0 * N * N * H * D * (0.5 if causal else 1.0) * (2.5 if bw else 1.0)
                        print("sdpa-%s %s D=%d H=%d N=%d causal=%d %9.3f ms %6.1f TFLOP/s" %
                              ("bwd" if bw else "fwd", name, D, H, N, causal, ms, fl / (ms * 1e-3) / 1e12), flush=True)
                    del q, k, v, do


if __name__ == "__main__":
    main()
