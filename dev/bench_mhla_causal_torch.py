"""Plain-PyTorch peers of the causal MHLA forward (SPEC §5.4), written from the
formula (not the released code): B1, bf16 [B,H,N,D] inputs, φ = relu, scale
D^-1/2, chunk 64, normalize none, a lower-triangular W [M,M].

  loop:  the chunk loop of the MHLA language models: block states
         S_b = k̃_bᵀ v_b, then per chunk i (a Python loop, one compiled step
         of fixed shapes): H_i = Σ_{b<i} W[i,b] S_b (the masked row of W over
         every state), o_i = q̃_i H_i + W[i,i] tril(q̃_i k̃_iᵀ) v_i;
  batched: the same with the mixing as one einsum over the strict triangle
         (H = tril(W, -1) S) and the intra-block part batched over blocks.
Both under torch.compile (eager with --eager). Prints the median of CUDA-event
timed calls, and the max rel difference between the two at the first N.
  python3 dev/bench_mhla_causal_torch.py [--ns 32768] [--h 12] [--d 128] [--reps 5]

--official PATH: instead, the official MHLA NLP code's chunk loop,
`naive_chunk_simple_mhla_fixed` of DAGroup-PKU/MHLA
(mhla_nlp/fla/ops/mhla/naive.py: fp32 inside, q·D^-1/2, two Python loops over
the chunks of 64, the mixing as a masked sum over every earlier block state),
loaded from that file (never part of this repository: a clone or an archive
of that one folder in the ignored peers/ or .wt/peers/, carried to the GPU
machine). Its own @torch.compile decorator is what --official compiles with;
--eager runs the undecorated function. Inputs φ(q), φ(k) (relu) and v in its
[B,T,H,D] layout, bf16, W lower triangular [M,M,1,1,1,1]. Lines
"official-loop MODE H.. D.. N=.. M=..: X ms (first call Y s)".
"""
import argparse
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "bench"))
from benchlib import cuda_median_ms  # noqa: E402


def feats(q, k, D):
    return torch.relu(q) * D ** -0.5, torch.relu(k)


def block_states(kc, vc):  # [B,H,M,C,D] -> [B,H,M,D,Dv]
    return torch.einsum("bhmcd,bhmce->bhmde", kc, vc)


def step(qi, ki, vi, S, wrow, wii, mask):
    """one chunk: qi, ki, vi [B,H,C,D]; S [B,H,M,D,Dv]; wrow [M] (zero from i on)"""
    Hi = torch.einsum("m,bhmde->bhde", wrow, S)
    A = (qi @ ki.transpose(-1, -2)) * mask
    return qi @ Hi + wii * (A @ vi)


def mhla_loop(q, k, v, W, stepf, C=64):
    B, H, N, D = q.shape
    M = N // C
    q, k = feats(q, k, D)
    qc, kc, vc = (x.view(B, H, M, C, -1) for x in (q, k, v))
    S = block_states(kc, vc)
    mask = torch.tril(torch.ones(C, C, device=q.device, dtype=q.dtype))
    Ws = torch.tril(W, -1).to(q.dtype)
    outs = [stepf(qc[:, :, i], kc[:, :, i], vc[:, :, i], S, Ws[i], W[i, i].to(q.dtype), mask) for i in range(M)]
    return torch.stack(outs, 2).reshape(B, H, N, -1)


def mhla_batched(q, k, v, W, C=64):
    B, H, N, D = q.shape
    M = N // C
    q, k = feats(q, k, D)
    qc, kc, vc = (x.view(B, H, M, C, -1) for x in (q, k, v))
    S = block_states(kc, vc)
    Hm = torch.einsum("ij,bhjde->bhide", torch.tril(W, -1).to(q.dtype), S)
    mask = torch.tril(torch.ones(C, C, device=q.device, dtype=q.dtype))
    A = (qc @ kc.transpose(-1, -2)) * mask * torch.diagonal(W).to(q.dtype).view(1, 1, M, 1, 1)
    return (qc @ Hm + A @ vc).reshape(B, H, N, -1)


def timed(f, reps):
    return cuda_median_ms(f, reps, warm=1)


def load_official(path, compiled):
    """naive_chunk_simple_mhla_fixed from the official file at `path`, its
    module executed with torch.compile as the identity (so that importing it
    compiles nothing), then compiled with the decorator's own (default)
    options unless eager."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("mhla_official_naive", path)
    mod = importlib.util.module_from_spec(spec)
    real = getattr(torch, "compile", None)
    torch.compile = lambda f=None, **kw: f if f is not None else (lambda g: g)
    try:
        spec.loader.exec_module(mod)
    finally:
        if real is None:
            del torch.compile
        else:
            torch.compile = real
    f = mod.naive_chunk_simple_mhla_fixed
    return torch.compile(f) if compiled else f


def run_official(a):
    f = load_official(a.official, not a.eager)
    mode = "eager" if a.eager else "torch.compile"
    for N in (int(x) for x in a.ns.split(",")):
        g = torch.Generator(device="cuda").manual_seed(N)
        q, k, v = (torch.rand(1, N, a.h, a.d, device="cuda", generator=g).mul_(2).sub_(1).bfloat16()
                   for _ in range(3))
        q, k = torch.relu(q), torch.relu(k)
        M = N // 64
        W = torch.tril(torch.rand(M, M, device="cuda", generator=g) + 0.05) / torch.arange(1, M + 1, device="cuda").view(M, 1)
        W6 = W.view(M, M, 1, 1, 1, 1)
        t0 = time.time()
        f(q, k, v, W6)
        torch.cuda.synchronize()
        first = time.time() - t0
        print(f"official-loop {mode} first call N={N}: {first:.1f} s", flush=True)
        ms = timed(lambda: f(q, k, v, W6), max(2, a.reps // 2))
        print(f"official-loop {mode} H{a.h} D{a.d} N={N} M={M}: {ms:.3f} ms (first call {first:.1f} s)", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ns", default="32768")
    ap.add_argument("--h", type=int, default=12)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--no-loop", action="store_true")
    ap.add_argument("--official", metavar="PATH", help="the official naive.py: time its chunk loop instead")
    a = ap.parse_args()
    dev = "cuda"
    if a.official:
        print(f"# torch {torch.__version__}, official chunk loop from {a.official}", flush=True)
        run_official(a)
        return
    comp = (lambda f: f) if a.eager else (lambda f: torch.compile(f, dynamic=False))
    stepc = comp(step)
    batc = comp(mhla_batched)
    print(f"# torch {torch.__version__}, {'eager' if a.eager else 'torch.compile'}")
    for i, N in enumerate(int(x) for x in a.ns.split(",")):
        g = torch.Generator(device=dev).manual_seed(N)
        q, k, v = (torch.rand(1, a.h, N, a.d, device=dev, generator=g).mul_(2).sub_(1).bfloat16() for _ in range(3))
        M = N // 64
        W = torch.tril(torch.rand(M, M, device=dev, generator=g) + 0.05) / torch.arange(1, M + 1, device=dev).view(M, 1)
        t0 = time.time()
        ob = batc(q, k, v, W)
        torch.cuda.synchronize()
        print(f"batched N={N} M={M}: first call {time.time() - t0:.1f} s", flush=True)
        tb = timed(lambda: batc(q, k, v, W), a.reps)
        print(f"torch-batched  H{a.h} D{a.d} N={N} M={M}: {tb:.3f} ms", flush=True)
        if not a.no_loop and i == 0:
            t0 = time.time()
            ol = mhla_loop(q, k, v, W, stepc)
            torch.cuda.synchronize()
            print(f"loop N={N}: first call {time.time() - t0:.1f} s", flush=True)
            tl = timed(lambda: mhla_loop(q, k, v, W, stepc), max(2, a.reps // 2))
            rel = ((ol.float() - ob.float()).abs().max() / ob.float().abs().max()).item()
            print(f"torch-loop     H{a.h} D{a.d} N={N} M={M}: {tl:.3f} ms  (loop vs batched max rel {rel:.2e})", flush=True)


if __name__ == "__main__":
    main()
