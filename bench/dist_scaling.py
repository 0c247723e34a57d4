#!/usr/bin/env python3
"""Context parallelism over torch.distributed: NCCL correctness of every
longattn.distributed op against the single-GPU result, and scaling (issue 20).

    python3 bench/dist_scaling.py                 # 2 GPUs, NCCL: --check, then --scale
    python3 bench/dist_scaling.py --check         # correctness only
    python3 bench/dist_scaling.py --cpu-smoke     # the same logic on CPU, gloo, tiny sizes
    python3 bench/dist_scaling.py --model         # the paper model of docs/DISTRIBUTED.md

Results go to --out (default $OUT, else /tmp/la_dist_out): dist_check.json,
dist_scale.json and summary.md (the lines for docs/PERF.md / DISTRIBUTED.md).

Correctness, per op and dtype: every rank builds the whole problem (same
seed), runs the op on its shard over the group, and runs it alone on the
whole problem in a one-rank group (the single-GPU result; also checked
against the library's own single-device forward). fp32: forward <= 1e-5,
gradients <= 1e-4 relative (Frobenius); bf16: the distributed error against
the fp32 result at most twice the single-GPU bf16 error (+1e-5); indexers:
indices identical to longattn.dsa_topk / hisa_topk on all keys.

Scaling, per op and N: time per step (forward + backward; forward for the
indexers) on 1 GPU (rank 0 alone on the whole problem) and on P GPUs (each
its shard), median of --reps after a warm-up, peak memory per rank; sizes
double until a step would not fit (predicted from the peak memory of the
sizes before) or a cap. The largest N run on 1 and on P GPUs is reported.
"""
import argparse
import datetime
import json
import math
import os
import sys
import tempfile
import time
import traceback

# NVLink multicast stays off (set before NCCL initializes; never create multicast objects)
for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("LONGATTN_LIB", os.path.join(ROOT, os.environ.get("LA_BUILD", "build"),
                                                   "liblongattn.so"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import longattn  # noqa: E402
import longattn.distributed as ld  # noqa: E402

OPS = ("mhla", "linear_causal", "mhla_causal", "softmax", "dsa", "hisa")

# problem sizes: heads, head dim; per op the check size and the scaling sizes
GPU = dict(H=12, D=128, T_index=1024, HI=64, dI=128, topk=2048, block=128, block_topk=64,
           check=dict(mhla=(16, 32, 48), linear_causal=16421, mhla_causal=16421,
                      softmax=8205, dsa=65613, hisa=131149),
           scale=dict(mhla=[(32, 64, 64), (32, 128, 128), (64, 128, 128)],
                      linear_causal=[1 << 18, 1 << 19, 1 << 20, 1 << 21],
                      mhla_causal=[1 << 18, 1 << 19, 1 << 20, 1 << 21],
                      softmax=[1 << 16, 1 << 17], dsa=[1 << 20], hisa=[1 << 20, 1 << 21]),
           mhla_blocks=(4, 8, 8), causal_chunks=256)
SMOKE = dict(H=2, D=16, T_index=16, HI=4, dI=16, topk=32, block=16, block_topk=4,
             check=dict(mhla=(3, 10, 11), linear_causal=203, mhla_causal=203, softmax=131,
                        dsa=777, hisa=777),
             scale=dict(mhla=[(8, 8, 8)], linear_causal=[256, 512], mhla_causal=[512],
                        softmax=[256], dsa=[1024], hisa=[1024]),
             mhla_blocks=(2, 2, 2), causal_chunks=8)


# ---------------------------------------------------------------------------
# problems
# ---------------------------------------------------------------------------
def tokens(op, size):
    return math.prod(size) if op == "mhla" else int(size)


def make(op, size, dtype, dev, seed, cfg):
    """The whole problem: (seq tensors sharded by position, their shard dim,
    replicated tensors, call keywords, gradient target G or None)."""
    g = torch.Generator(device=dev).manual_seed(seed)
    H, D = cfg["H"], cfg["D"]

    def rn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, device=dev) * scale).to(dtype)

    if op in ("dsa", "hisa"):
        T, HI, dI, L = cfg["T_index"], cfg["HI"], cfg["dI"], int(size)
        q, k = rn(T, HI, dI), rn(L, dI)
        w = (torch.rand(T, HI, generator=g, device=dev) * (HI * dI) ** -0.5).float()
        kw = dict(topk=cfg["topk"])
        if op == "hisa":
            kw.update(block=cfg["block"], block_topk=cfg["block_topk"])
        return [k], 0, [q, w], kw, None
    N = tokens(op, size)
    q, k, v = rn(1, N, H, D), rn(1, N, H, D), rn(1, N, H, D)
    G = torch.randn(1, N, H, D, generator=g, device=dev)
    if op == "mhla":
        M = math.prod(cfg["mhla_blocks"])
        W = torch.rand(M, M, generator=g, device=dev) + 0.05
        return [q, k, v], 1, [W], dict(grid=tuple(size), blocks=cfg["mhla_blocks"]), G
    if op == "mhla_causal":
        C = max(1, -(-N // cfg["causal_chunks"]))
        M = -(-N // C)
        W = (torch.rand(M, M, generator=g, device=dev) + 0.05).tril()
        return [q, k, v], 1, [W], dict(chunk=C), G
    if op == "softmax":
        return [q, k, v], 1, [], dict(causal=True, layout="balanced"), G
    return [q, k, v], 1, [], dict(causal=True, feature="relu", chunk=64), G


def call(op, seq, rep, kw, group, impl):
    if op == "mhla":
        return ld.mhla(*seq, rep[0], kw["grid"], kw["blocks"], group=group)
    if op == "mhla_causal":
        return ld.mhla_causal(*seq, rep[0], group=group, chunk=kw["chunk"])
    if op == "linear_causal":
        return ld.linear_attention(*seq, group=group, impl=impl, **kw)
    if op == "softmax":
        return ld.softmax_attention(*seq, group=group, impl=impl, **kw)
    if op == "dsa":
        return ld.dsa_topk(rep[0], seq[0], rep[1], group=group, **kw)
    return ld.hisa_topk(rep[0], seq[0], rep[1], group=group, **kw)


def library_single(op, seq, rep, kw):
    """The library's own single-device forward on the whole problem."""
    if op == "mhla":
        return longattn.mhla(*seq, rep[0], grid=kw["grid"], blocks=kw["blocks"])
    if op == "mhla_causal":
        return longattn.mhla_causal(*seq, rep[0], chunk=kw["chunk"])
    if op == "linear_causal":
        return longattn.linear_attention(*seq, causal=True, feature="relu", chunk=64)
    if op == "softmax":
        return longattn.softmax_attention(*seq, causal=True)
    if op == "dsa":
        return longattn.dsa_topk(rep[0], seq[0], rep[1], **kw)
    return longattn.hisa_topk(rep[0], seq[0], rep[1], **kw)


def shard_of(op, x, dim, rank, P, kw):
    if op == "softmax" and kw.get("layout") == "balanced":
        return ld.balanced_shard(x, rank, P, dim)
    return ld.shard(x, rank, P, dim)


IMPLS = {"linear_causal": ("auto", "torch"), "softmax": ("auto", "library_forward", "torch")}


def step(op, seq, rep, kw, group, G, impl):
    """One forward (+ backward) on leaves; returns (out, grads)."""
    if G is None:
        with torch.no_grad():
            return call(op, seq, rep, kw, group, impl), []
    xs = [x.detach().clone().requires_grad_(True) for x in seq]
    rs = [x.detach().clone().requires_grad_(True) for x in rep]
    out = call(op, xs, rs, kw, group, impl)
    (out.float() * G).sum().backward()
    return out.detach(), [x.grad for x in xs + rs]


def step_any_impl(op, seq, rep, kw, group, G, impls):
    """step with the first impl that runs (a library without a backward on this
    device falls through to the next); returns (out, grads, impl)."""
    err = None
    for impl in impls:
        try:
            out, grads = step(op, seq, rep, kw, group, G, impl)
            return out, grads, impl
        except (RuntimeError, NotImplementedError, ValueError) as e:
            if "out of memory" in str(e).lower():
                raise
            err = e
            if dist.get_world_size(group) > 1:
                raise  # a retry after a failed collective would desynchronize the ranks
    raise err


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


# ---------------------------------------------------------------------------
# correctness
# ---------------------------------------------------------------------------
def check(op, cfg, dev, rank, P, world_group, solo, dtypes):
    rows = []
    size = cfg["check"][op]
    for dtype in dtypes:
        name = str(dtype).replace("torch.", "")
        if op in ("dsa", "hisa") and dtype != torch.float32 and dev.type == "cpu":
            continue
        seq, sd, rep, kw, G = make(op, size, dtype, dev, 1234, cfg)
        row = dict(op=op, dtype=name, size=size, ok=True, notes=[])
        try:
            single, sgrads, impl = step_any_impl(op, seq, rep, kw, solo, G,
                                                 IMPLS.get(op, ("auto",)))
            row["impl"] = impl
            loc = [shard_of(op, x, sd, rank, P, kw) for x in seq]
            Gl = None if G is None else shard_of(op, G, 1, rank, P, kw)
            out, grads = step(op, loc, rep, kw, world_group, Gl, impl)
            want = shard_of(op, single, sd, rank, P, kw) if G is not None else single
            if G is None:  # indexers: exact, and equal to the library's single-device result
                lib = library_single(op, seq, rep, kw)
                row["mismatch"] = int((out != lib).sum())
                row["ok"] = bool(torch.equal(out, lib))
            else:
                if dev.type == "cuda" or dtype == torch.float32:  # the CPU library is fp32
                    try:
                        with torch.no_grad():
                            lib = library_single(op, seq, rep, kw)
                        row["single_vs_library"] = rel(single, lib)
                    except Exception as e:  # noqa: BLE001  (no collectives inside)
                        row["notes"].append("library single-device forward: %s" % e)
                sl = lambda x: shard_of(op, x, sd, rank, P, kw)  # noqa: E731
                errs = [rel(out, want)] + [rel(a, sl(b)) for a, b in zip(grads[:len(seq)], sgrads)]
                errs += [rel(a, b) for a, b in zip(grads[len(seq):], sgrads[len(seq):])]
                row["err_vs_single"] = errs
                if dtype == torch.float32:
                    row["ok"] = errs[0] <= 1e-5 and max(errs[1:] or [0]) <= 1e-4 and \
                        row.get("single_vs_library", 0.0) <= 1e-5
                else:  # bf16: against the fp32 single-GPU result, twice the single error
                    s32, _, r32, _, _ = make(op, size, torch.float32, dev, 1234, cfg)
                    ref, rgrads, _ = step_any_impl(op, s32, r32, kw, solo, G,
                                                   (impl,) + IMPLS.get(op, ("auto",)))
                    e_d = [rel(out, sl(ref))] + [rel(a, sl(b)) for a, b in
                                                 zip(grads[:len(seq)], rgrads)]
                    e_d += [rel(a, b) for a, b in zip(grads[len(seq):], rgrads[len(seq):])]
                    e_s = [rel(single, ref)] + [rel(a, b) for a, b in zip(sgrads, rgrads)]
                    row["err_dist_bf16"], row["err_single_bf16"] = e_d, e_s
                    row["ok"] = all(a <= 2 * b + 1e-5 for a, b in zip(e_d, e_s))
        except Exception:
            row["ok"] = False
            row["notes"].append(traceback.format_exc(limit=4))
        rows.append(row)
        dist.barrier(world_group)
    return rows


# ---------------------------------------------------------------------------
# scaling
# ---------------------------------------------------------------------------
def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn, dev, reps):
    fn()  # warm-up
    sync(dev)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(dev)
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def peak_reset(dev):
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)


def peak(dev):
    return torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else 0


def capacity(dev):
    return torch.cuda.get_device_properties(dev).total_memory if dev.type == "cuda" else 0


def run_one(op, size, dtype, dev, cfg, group, rank, P, impl, reps, whole):
    """Time of one step and the peak memory on this rank: whole=True builds
    the whole problem (1 GPU), else this rank's shard only."""
    seq, sd, rep, kw, G = make(op, size, dtype, dev, 99, cfg)
    if not whole:
        seq = [shard_of(op, x, sd, rank, P, kw).contiguous() for x in seq]
        G = None if G is None else shard_of(op, G, 1, rank, P, kw).contiguous()
    peak_reset(dev)
    base = torch.cuda.memory_allocated(dev) if dev.type == "cuda" else 0
    t = timed(lambda: step(op, seq, rep, kw, group, G, impl), dev, reps)
    return t, peak(dev), base


def scale(op, cfg, dev, rank, P, world_group, solo, dtype, reps):
    rows = []
    impl = None
    cap = capacity(dev)
    grow = {}  # world -> (tokens, peak bytes) of the last size run, to predict the next
    for size in cfg["scale"][op]:
        N = tokens(op, size)
        row = dict(op=op, size=size, N=N, dtype=str(dtype).replace("torch.", ""))
        for world, group in ((1, solo), (P, world_group)):
            key = "t%d" % world
            fits = True
            if cap and world in grow:  # predicted peak (linear in N per rank)
                n0, p0 = grow[world]
                fits = p0 * N / n0 <= 0.92 * cap
            flag = torch.tensor([1 if fits else 0], device=dev)
            dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=world_group)
            if not int(flag):
                row[key] = "does not fit (predicted)"
                continue
            res = torch.zeros(3, dtype=torch.float64, device=dev)
            if world > 1 or rank == 0:
                try:
                    if impl is None:  # the first impl that runs on this device
                        seq, rep, kw, G = small(op, cfg, dev, dtype)
                        _, _, impl = step_any_impl(op, seq, rep, kw, solo, G,
                                                   IMPLS.get(op, ("auto",)))
                    t, pk, base = run_one(op, size, dtype, dev, cfg, group, rank, P, impl, reps,
                                          world == 1)
                    res[0], res[1], res[2] = t, pk, 1
                except torch.cuda.OutOfMemoryError if dev.type == "cuda" else MemoryError:
                    res[2] = -1
            dist.all_reduce(res, op=dist.ReduceOp.MAX, group=world_group)
            if res[2] < 0:
                row[key] = "out of memory"
            else:
                row[key] = float(res[0])
                row["peak_GiB_%d" % world] = float(res[1]) / 2 ** 30
                grow[world] = (N, float(res[1]))
            peak_reset(dev)
        row["impl"] = impl
        if isinstance(row.get("t1"), float) and isinstance(row.get("t%d" % P), float):
            row["speedup"] = row["t1"] / row["t%d" % P]
        rows.append(row)
        dist.barrier(world_group)
    return rows


def small(op, cfg, dev, dtype):
    """A tiny problem to find the impl that runs (solo group, no collectives)."""
    seq, sd, rep, kw, G = make(op, SMOKE["check"][op] if op != "mhla" else (2, 4, 4),
                               dtype, dev, 5, dict(cfg, H=2, D=16, T_index=8,
                                                   mhla_blocks=(2, 2, 2), causal_chunks=4))
    return seq, rep, kw, G


# ---------------------------------------------------------------------------
# the ranks
# ---------------------------------------------------------------------------
def worker(rank, args, init_file):
    cfg = SMOKE if args.cpu_smoke else GPU
    P = args.world
    if args.cpu_smoke:
        dev, backend = torch.device("cpu"), "gloo"
        torch.set_num_threads(1)
        longattn.set_num_threads(1)
    else:
        torch.cuda.set_device(rank)
        dev, backend = torch.device("cuda", rank), "nccl"
    dist.init_process_group(backend, init_method="file://" + init_file, rank=rank, world_size=P,
                            timeout=datetime.timedelta(seconds=args.timeout))
    world_group = dist.new_group(list(range(P)))
    solos = [dist.new_group([r]) for r in range(P)]
    solo = solos[rank]
    ops = args.ops.split(",")
    dtypes = [torch.float32, torch.bfloat16]  # CPU: bf16 through the torch paths
    out = dict(device=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
               world=P, backend=backend, torch=torch.__version__,
               date=datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), check=[], scale=[])
    if args.check:
        for op in ops:
            rows = check(op, cfg, dev, rank, P, world_group, solo, dtypes)
            flags = torch.tensor([int(r["ok"]) for r in rows], device=dev)
            dist.all_reduce(flags, op=dist.ReduceOp.MIN, group=world_group)
            for r, f in zip(rows, flags.tolist()):
                r["ok_all_ranks"] = bool(f)
            out["check"] += rows
            if rank == 0:
                write(out, args.out, quiet=True)  # what is done survives a timeout
                for r in rows:
                    print("check %-14s %-9s %s %s" % (r["op"], r["dtype"],
                                                      "ok" if r["ok_all_ranks"] else "FAIL",
                                                      {k: v for k, v in r.items() if k in (
                                                          "err_vs_single", "err_dist_bf16",
                                                          "mismatch", "impl", "notes")}),
                          flush=True)
    if args.scale:
        sdt = torch.float32 if args.cpu_smoke else torch.bfloat16
        for op in ops:
            rows = scale(op, cfg, dev, rank, P, world_group, solo, sdt, args.reps)
            out["scale"] += rows
            if rank == 0:
                write(out, args.out, quiet=True)
                for r in rows:
                    print("scale %s" % json.dumps(r), flush=True)
    if rank == 0:
        write(out, args.out)
    dist.barrier(world_group)
    dist.destroy_process_group()


def write(out, d, quiet=False):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "dist_check.json"), "w") as fh:
        json.dump(dict(out, scale=None), fh, indent=1, default=str)
    with open(os.path.join(d, "dist_scale.json"), "w") as fh:
        json.dump(dict(out, check=None), fh, indent=1, default=str)
    P = out["world"]
    lines = ["# %s, %d ranks (%s), torch %s, %s" % (out["device"], P, out["backend"],
                                                      out["torch"], out["date"])]
    for r in out["check"]:
        lines.append("check %-14s %-9s %s" % (r["op"], r["dtype"],
                                               "ok" if r["ok_all_ranks"] else "FAIL"))
    lines.append("| op | N | 1 GPU s/step | %d GPUs s/step | speedup | peak GiB 1 / %d | impl |"
                 % (P, P))
    lines.append("|---|---|---|---|---|---|---|")
    for r in out["scale"]:
        f = lambda x: "%.4f" % x if isinstance(x, float) else str(x)  # noqa: E731
        lines.append("| %s | %d | %s | %s | %s | %s / %s | %s |" % (
            r["op"], r["N"], f(r.get("t1")), f(r.get("t%d" % P)),
            "%.2fx" % r["speedup"] if "speedup" in r else "-",
            f(r.get("peak_GiB_1", "-")), f(r.get("peak_GiB_%d" % P, "-")), r.get("impl")))
    with open(os.path.join(d, "summary.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    if not quiet:
        print("\n".join(lines))


# ---------------------------------------------------------------------------
# the model on paper (docs/DISTRIBUTED.md)
# ---------------------------------------------------------------------------
# H200: 989 TFLOP/s dense bf16, 4.8 TB/s HBM. Effective rates assumed for the
# local work: linear-family ops at half the HBM rate (measured here: ~2.0x the
# byte floor), matmul-bound work at 400 TFLOP/s, softmax at 300 TFLOP/s.
HBM_EFF, MM_EFF, SOFTMAX_EFF = 2.4e12, 400e12, 300e12
LINKS = (("NVLink 900 GB/s", 450e9), ("IB 400 Gb/s", 50e9))  # bytes/s sent per direction


def ring_bytes(kind, payload, P):
    """Bytes one rank sends for a collective of this payload (ring algorithms)."""
    if kind == "all_reduce":
        return 2 * (P - 1) / P * payload
    if kind == "all_gather":
        return (P - 1) * payload
    return (P - 1) / P * payload  # reduce_scatter: payload = the whole input


def model_ops(N=1 << 20, P=8, H=12, D=128, Dv=128, M=256, T=1024, HI=64, dI=128, topk=2048,
              block=128, block_topk=64):
    """Per op: (bytes sent per rank fwd+bwd, compute seconds per rank fwd+bwd,
    compute seconds on one GPU), for one sequence (B = 1), bf16 tokens, fp32
    summaries/states."""
    n = N / P
    E = Dv + 1
    tok = lambda m: m * H * (2 * D + 2 * Dv) * 2  # q, k, v, o bf16  # noqa: E731
    S = H * M * D * E * 4
    lin_c = lambda m: 3.0 * max(tok(m) / HBM_EFF, 4 * m * H * D * E / MM_EFF)  # noqa: E731
    ops = {}
    # MHLA non-causal: all_reduce of the summaries fwd, of dS and dW bwd
    b = ring_bytes("all_reduce", S, P) * 2 + ring_bytes("all_reduce", M * M * 4, P)
    mix = lambda mq: 3 * 2 * mq * M * D * E * H / MM_EFF  # noqa: E731
    ops["mhla (M=%d)" % M] = (b, lin_c(n) + mix(M / P), lin_c(N) + mix(M))
    # causal linear, LASP-2: all_gather of one state fwd, reduce_scatter bwd
    s = H * D * E * 4
    b = ring_bytes("all_gather", s, P) + ring_bytes("reduce_scatter", P * s, P)
    chunk = lambda m: lin_c(m) + 3 * 4 * m * 64 * D * H / MM_EFF  # noqa: E731
    ops["linear causal (LASP-2)"] = (b, chunk(n), chunk(N))
    # causal MHLA: all_gather of the touched chunks' summaries, reduce_scatter, dW
    tmax = M / P + 1
    b = ring_bytes("all_gather", tmax * S / M, P) \
        + ring_bytes("reduce_scatter", P * tmax * S / M, P) + ring_bytes("all_reduce", M * M * 4, P)
    ops["mhla causal (M=%d)" % M] = (b, chunk(n) + mix(M / P) / 2, chunk(N) + mix(M) / 2)
    # softmax causal, all-gather KV (balanced): 3.5x the forward FLOPs for fwd+bwd
    kv = n * H * (D + Dv) * 2
    b = ring_bytes("all_gather", kv, P) + ring_bytes("reduce_scatter", P * kv, P)
    # causal: half of the 2·(D+Dv) FLOPs per (query, key) pair of the n x N block
    f = lambda m: 3.5 * m * N * (D + Dv) * H / SOFTMAX_EFF  # noqa: E731
    ops["softmax causal (all-gather KV)"] = (b, f(n), f(N))
    # indexers, keys sharded, T queries replicated: lists of 8-byte pairs
    b = ring_bytes("all_gather", T * topk * 8, P)
    sc = lambda keys: 2 * T * keys * HI * dI / MM_EFF  # noqa: E731
    ops["DSA indexer (T=%d)" % T] = (b, sc(n), sc(N))
    b = ring_bytes("all_gather", T * (topk + block_topk) * 8 + block * dI * 4, P)
    hs = lambda keys: sc(keys / block) + sc(block_topk * block * keys / N)  # noqa: E731
    ops["HISA indexer (T=%d)" % T] = (b, hs(n), hs(N))
    return ops


def model_table(N=1 << 20, P=8):
    lines = ["N = %d tokens, P = %d H200s, one sequence, H=12, D=Dv=128 (bf16 tokens, fp32 "
             "summaries)" % (N, P),
             "| op | MB sent / rank | compute ms / rank (1 GPU) | comm ms NVLink / IB | "
             "speedup at P=%d NVLink / IB (no overlap) | P where comm = compute: NVLink / IB |"
             % P, "|---|---|---|---|---|---|"]
    for name, (b, c, c1) in model_ops(N, P).items():
        ts = [b / bw for _, bw in LINKS]
        stops = []
        for _, bw in LINKS:  # smallest P whose comm time exceeds its compute time
            stop = None
            for p in range(2, 4097):
                bp, cp, _ = model_ops(N, p)[name]
                if bp / bw >= cp:
                    stop = p
                    break
            stops.append(str(stop) if stop else "> 4096")
        lines.append("| %s | %.1f | %.3f (%.2f) | %.3f / %.3f | %.1fx / %.1fx | %s |" % (
            name, b / 1e6, c * 1e3, c1 * 1e3, ts[0] * 1e3, ts[1] * 1e3, c1 / (c + ts[0]),
            c1 / (c + ts[1]), " / ".join(stops)))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="run the same logic on CPU with gloo at tiny sizes")
    ap.add_argument("--check", action="store_true", help="correctness only (with --scale: both)")
    ap.add_argument("--scale", action="store_true", help="scaling only (with --check: both)")
    ap.add_argument("--model", action="store_true", help="print the paper model and exit")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=300, help="collective timeout, seconds")
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/la_dist_out")
    args = ap.parse_args(argv)
    if args.model:
        print(model_table())
        return 0
    if not args.check and not args.scale:
        args.check = args.scale = True
    bad = [o for o in args.ops.split(",") if o not in OPS]
    if bad:
        ap.error("--ops: %s not in %s" % (bad, ",".join(OPS)))
    if not args.cpu_smoke and torch.cuda.device_count() < args.world:
        print("dist_scaling: %d GPUs visible, --world %d needs as many (or --cpu-smoke)"
              % (torch.cuda.device_count(), args.world))
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(args, os.path.join(tmp, "init")), nprocs=args.world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
