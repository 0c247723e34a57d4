#!/usr/bin/python3
"""CPU benchmark: every backward pass (TRAINING.md §1) at N = 4K, through the
Python package, against Debian torch autograd of the plain formula.

For each operator, float32, the same thread count on both sides:
  longattn fwd+bwd  loss = (op(x) * g).sum(); loss.backward() through
                    longattn's autograd (the forward, then la_*_backward)
  longattn bwd      the backward alone (longattn._backward.*)
  torch fwd+bwd     the same loss through plain-PyTorch formulas with autograd:
                    softmax = explicit softmax(QKᵀ)V per head (the N×N scores:
                    what torch 1.13's math SDPA does), linear = einsum (causal:
                    cumsum of per-token k vᵀ), MHLA = block einsums, causal MHLA
                    = cumsum inside chunks + mixed chunk sums, focused = the
                    FLatten / blog modules in tensor ops (conv2d), sparse =
                    gather of the selected latent rows.
Interleaved rounds (machine noise hits all alike), medians. Prints a markdown
table; --write-perf replaces the section "## Backward (CPU)" of docs/PERF.md.

    /usr/bin/python3 bench/cpu_backward.py --threads 2 --write-perf
"""
import argparse
import datetime
import math
import os
import pathlib
import platform
import re
import statistics
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import cpu_model  # noqa: E402

SECTION = "## Backward (CPU)"
F = torch.nn.functional


def phi(name, x):
    return {"relu": torch.relu, "relu_eps": lambda t: torch.relu(t) + 1e-6,
            "elu1": lambda t: torch.where(t >= 0, t + 1, torch.exp(t.clamp(max=0)))}[name](x)


def t_softmax(q, k, v, causal):
    B, N, H, D = q.shape
    s = torch.einsum("bihd,bjhd->bhij", q, k) * D ** -0.5
    if causal:
        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("bhij,bjhe->bihe", torch.softmax(s, -1), v)


def t_linear(q, k, v, causal):
    qt, kt = phi("relu", q), phi("relu", k)
    if not causal:
        S, z = torch.einsum("bnhd,bnhe->bhde", kt, v), kt.sum(1)
        return torch.einsum("bnhd,bhde->bnhe", qt, S) / (torch.einsum("bnhd,bhd->bnh", qt, z)[..., None] + 1e-6)
    kv = torch.einsum("bnhd,bnhe->bnhde", kt, v).cumsum(1)
    return torch.einsum("bnhd,bnhde->bnhe", qt, kv) / (torch.einsum("bnhd,bnhd->bnh", qt, kt.cumsum(1))[..., None] + 1e-6)


def t_mhla(q, k, v, W, M):
    B, N, H, D = q.shape
    L = N // M
    qb, kb = phi("relu_eps", q).view(B, M, L, H, D), phi("relu_eps", k).view(B, M, L, H, D)
    vb = v.view(B, M, L, H, -1)
    S, z = torch.einsum("bmlhd,bmlhe->bhmde", kb, vb), kb.sum(2)
    St, zt = torch.einsum("ij,bhjde->bhide", W, S), torch.einsum("ij,bjhd->bihd", W, z)
    num = torch.einsum("bmlhd,bhmde->bmlhe", qb, St)
    den = torch.einsum("bmlhd,bmhd->bmlh", qb, zt)
    return (num / (den[..., None] + 1e-6)).reshape(B, N, H, -1)


def t_mhla_causal(q, k, v, W, C):
    B, N, H, D = q.shape
    nc = N // C
    qt, kt = phi("relu", q) * D ** -0.5, phi("relu", k)
    qb, kb, vb = qt.view(B, nc, C, H, D), kt.view(B, nc, C, H, D), v.view(B, nc, C, H, -1)
    kv = torch.einsum("bnchd,bnche->bnchde", kb, vb)
    S = kv.sum(2)                                              # [B, nc, H, D, Dv]
    inter = torch.einsum("ij,bjhde->bihde", torch.tril(W[:nc, :nc], -1), S)
    intra = kv.cumsum(2) * torch.diagonal(W[:nc, :nc])[None, :, None, None, None, None]
    return torch.einsum("bnchd,bnchde->bnche", qb, inter[:, :, None] + intra).reshape(B, N, H, -1)


def t_focused(q, k, v, conv, bias, sp, Hm, Wm):
    B, N, H, D = q.shape
    C = H * D

    def fp(x):
        xp = (torch.relu(x.reshape(B, N, C)) + 1e-6) / F.softplus(sp)
        y = xp ** 3
        return (xp.norm(dim=-1, keepdim=True) * y / y.norm(dim=-1, keepdim=True)).reshape(B, N, H, D)

    qt, kt = fp(q), fp(k)
    S, z = torch.einsum("bnhd,bnhe->bhde", kt, v) / N, kt.sum(1) / N
    o = torch.einsum("bnhd,bhde->bnhe", qt, S) / (torch.einsum("bnhd,bhd->bnh", qt, z)[..., None] + 1e-6)
    vi = v.permute(0, 2, 3, 1).reshape(B * H, D, Hm, Wm)
    c = F.conv2d(vi, conv[:, None], bias, padding=conv.shape[-1] // 2, groups=D)
    return o + c.reshape(B, H, D, N).permute(0, 3, 1, 2)


def t_sparse(q, kv, idx, dv):
    T, Hq, Dqk = q.shape
    sel = kv[idx.long()]                                       # [T, K, Dqk]
    p = torch.softmax(torch.einsum("thd,tkd->thk", q, sel) * Dqk ** -0.5, -1)
    return torch.einsum("thk,tke->the", p, sel[..., :dv])


def cases(longattn, N, H, D):
    from longattn import _backward as LB
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)
    out = []
    for causal in (False, True):
        q, k, v = r(1, N, H, D), r(1, N, H, D), r(1, N, H, D)
        out.append(("softmax" + ("-causal" if causal else ""), (q, k, v),
                    lambda q, k, v, c=causal: longattn.softmax_attention(q, k, v, causal=c),
                    lambda q, k, v, c=causal: t_softmax(q, k, v, c),
                    lambda q, k, v, o, lse, d, c=causal: LB.softmax_attention_backward(q, k, v, o, lse, d, causal=c),
                    lambda q, k, v, c=causal: longattn.softmax_attention(q, k, v, causal=c, return_lse=True)))
    for causal in (False, True):
        q, k, v = r(1, N, H, D), r(1, N, H, D), r(1, N, H, D)
        out.append(("linear" + ("-causal" if causal else ""), (q, k, v),
                    lambda q, k, v, c=causal: longattn.linear_attention(q, k, v, causal=c),
                    lambda q, k, v, c=causal: t_linear(q, k, v, c),
                    lambda q, k, v, d, c=causal: LB.linear_attention_backward(q, k, v, d, causal=c), None))
    M = 16
    q, k, v = r(1, N, H, D), r(1, N, H, D), r(1, N, H, D)
    W = (0.1 + torch.rand(M, M, generator=g))
    out.append(("mhla (M=16)", (q, k, v, W), lambda q, k, v, W: longattn.mhla(q, k, v, W),
                lambda q, k, v, W: t_mhla(q, k, v, W, M),
                lambda q, k, v, W, d: LB.mhla_backward(q, k, v, W, d), None))
    C = 64
    Wc = torch.tril(0.1 + torch.rand(N // C, N // C, generator=g))
    out.append(("mhla-causal (C=64)", (q, k, v, Wc), lambda q, k, v, W: longattn.mhla_causal(q, k, v, W, chunk=C),
                lambda q, k, v, W: t_mhla_causal(q, k, v, W, C),
                lambda q, k, v, W, d: LB.mhla_causal_backward(q, k, v, W, d, chunk=C), None))
    Hm = int(math.isqrt(N))
    conv, bias, sp = 0.1 * r(D, 5, 5), 0.1 * r(D), 0.1 * r(H * D)
    out.append(("focused flatten (%dx%d, k=5)" % (Hm, N // Hm), (q, k, v, conv, bias, sp),
                lambda q, k, v, c, b, s: longattn.focused_attention(q, k, v, map=(Hm, N // Hm), conv=c, conv_bias=b, softplus_param=s),
                lambda q, k, v, c, b, s: t_focused(q, k, v, c, b, s, Hm, N // Hm),
                lambda q, k, v, c, b, s, d: LB.focused_attention_backward(q, k, v, d, map=(Hm, N // Hm), conv=c, conv_bias=b, softplus_param=s),
                None))
    Hq, Dqk, dv, K = 8, 192, 128, 128
    qs, kvs = r(N, Hq, Dqk), r(N, Dqk)
    idx = torch.randint(0, N, (N, K), generator=g, dtype=torch.int32)
    out.append(("sparse-attn (T=L=%d, k=%d, Hq=%d, Dqk=%d, dv=%d)" % (N, K, Hq, Dqk, dv), (qs, kvs),
                lambda q, kv: longattn.sparse_attention(q, kv, idx, dv=dv)[0],
                lambda q, kv: t_sparse(q, kv, idx, dv),
                lambda q, kv, o, lse, d: LB.sparse_attention_backward(q, kv, idx, o, lse, d, dv=dv),
                lambda q, kv: longattn.sparse_attention(q, kv, idx, dv=dv)))
    return out


def timed_rounds(fns, rounds, min_time, clock):
    """interleaved_times with a choice of clock (the calling thread's CPU
    time does not count the time other processes take from us)."""
    for f in fns.values():
        f()
    times = {k: [] for k in fns}
    start, r = time.perf_counter(), 0
    while r < rounds or time.perf_counter() - start < min_time:
        for k, f in fns.items():
            t0 = clock()
            f()
            times[k].append(clock() - t0)
        r += 1
        if r >= 50:
            break
    return times


def measure(longattn, args, clock):
    rows = []
    for name, xs, ours, ref, bwd, extra in cases(longattn, args.n, args.heads, args.d):
        if args.only and not any(w in name for w in args.only.split(",")):
            continue
        leaves = [x.clone().requires_grad_() for x in xs]
        with torch.no_grad():
            o = ours(*xs)
            saved = extra(*xs) if extra else None  # out, lse: what the backward reads
        g = torch.randn_like(o)

        def run_ours():
            for x in leaves:
                x.grad = None
            (ours(*leaves) * g).sum().backward()

        def run_ref():
            for x in leaves:
                x.grad = None
            (ref(*leaves) * g).sum().backward()

        fns = {"ours": run_ours, "ref": run_ref,
               "bwd": (lambda: bwd(*xs, *saved, g)) if saved else (lambda: bwd(*xs, g))}
        t = timed_rounds(fns, args.rounds, args.min_time, clock)
        med = {k: statistics.median(v) for k, v in t.items()}
        # correctness of the timed gradients against the torch ones
        run_ours()
        mine = [x.grad.clone() for x in leaves]
        run_ref()
        err = max(((a - b).norm() / b.norm()).item() for a, b in zip(mine, [x.grad for x in leaves]))
        rows.append((name, med["ours"], med.get("bwd"), med["ref"], err))
        print("%-52s ours %.1f ms (bwd %s) torch %.1f ms  %.1fx  err %.1e" % (
            name, med["ours"] * 1e3, "%.1f" % (med["bwd"] * 1e3) if "bwd" in med else "-",
            med["ref"] * 1e3, med["ref"] / med["ours"], err), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--build", default=os.environ.get("LA_BUILD", "build"))
    ap.add_argument("--write-perf", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated name filters (e.g. softmax,mhla)")
    ap.add_argument("--no-cpu-time", action="store_true", help="skip the 1-thread CPU-time table")
    args = ap.parse_args()
    os.environ.setdefault("LONGATTN_LIB", str(ROOT / args.build / "liblongattn.so"))
    sys.path.insert(0, str(ROOT / "python"))
    import longattn

    load0 = " ".join(open("/proc/loadavg").read().split()[:3])
    start = datetime.datetime.now(datetime.timezone.utc)
    tables = []
    for threads, clock, label in ((args.threads, time.perf_counter, "wall time, %d threads" % args.threads),
                                  (1, time.thread_time, "thread CPU time, 1 thread")):
        if label.startswith("thread") and args.no_cpu_time:
            continue
        torch.set_num_threads(threads)
        longattn.set_num_threads(threads)
        print("# %s" % label, flush=True)
        tables.append((label, measure(longattn, args, clock)))
    load1 = " ".join(open("/proc/loadavg").read().split()[:3])
    secs = (datetime.datetime.now(datetime.timezone.utc) - start).total_seconds()
    lines = [SECTION, "",
             "- Date: %s" % start.strftime("%a %b %d %H:%M:%S UTC %Y"),
             "- Machine: %s, %d cores visible (%s); load average at the start / end: %s / %s"
             % (cpu_model(), os.cpu_count(), platform.machine(), load0, load1),
             "- Command: `/usr/bin/python3 bench/cpu_backward.py %s` (%.0f s)" % (" ".join(sys.argv[1:]), secs),
             "- Shapes: B=1, N=%d, H=%d, D=Dv=%d, float32, %d threads for both sides (torch %s). Timed: "
             "`(op(x)*g).sum().backward()` (forward + backward, as in training) through longattn's autograd "
             "and through the plain-PyTorch formula with torch autograd; `bwd` is longattn's backward "
             "alone (`longattn._backward`, given the forward's outputs where it reads them). Medians of "
             "interleaved rounds. err: largest relative Frobenius difference of the gradients against "
             "torch's (both float32)." % (args.n, args.heads, args.d, args.threads, torch.__version__),
             "- Two tables: wall time with the threads given (what a user sees, inflated by the other "
             "processes on a shared machine), and the calling thread's CPU time with one thread (what each "
             "side costs, insensitive to the others' load; with one thread both run every op on the calling "
             "thread, and idle pool or BLAS threads spinning elsewhere do not count)."]
    for label, rows in tables:
        lines += ["", "%s:" % label, "",
                  "| op | longattn fwd+bwd ms | longattn bwd ms | torch fwd+bwd ms | torch / longattn | gradient diff |",
                  "|---|---:|---:|---:|---:|---:|"]
        for name, a, b, r, e in rows:
            lines.append("| %s | %.1f | %s | %.1f | %.1f× | %.1e |" % (
                name, a * 1e3, "%.1f" % (b * 1e3) if b else "—", r * 1e3, r / a, e))
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    if args.write_perf:
        perf = ROOT / "docs" / "PERF.md"
        cur = perf.read_text()
        pat = re.compile(r"^%s\n.*?(?=^## |\Z)" % re.escape(SECTION), re.S | re.M)
        cur = pat.sub(text + "\n", cur) if pat.search(cur) else cur.rstrip("\n") + "\n\n" + text
        perf.write_text(cur)


if __name__ == "__main__":
    main()
