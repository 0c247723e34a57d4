"""Cases of the context-parallel tests (test_distributed.py), run inside each
rank of a gloo group: every longattn.distributed op against the single-process
result, forward and backward, at sizes whose rank boundaries fall inside
blocks and chunks (odd N, uneven splits); and the communication volume of
each op against the model of docs/DISTRIBUTED.md.

References: float64 formulas straight from SPEC.md written as dense token x
token weight matrices (independent of the chunked/blocked forms under test),
differentiated by torch autograd; the fp32 forwards also against the C
library on the whole sequence; the indexers against longattn.dsa_topk /
hisa_topk on the whole key sequence, exactly.
"""
import datetime
import json
import os
import sys
import traceback

import numpy as np
import torch
import torch.distributed as dist

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
if os.path.join(ROOT, "python") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("LONGATTN_LIB", os.path.join(ROOT, os.environ.get("LA_BUILD", "build"),
                                                   "liblongattn.so"))
os.environ.setdefault("LONGATTN_POISON", "1")

import longattn  # noqa: E402
import longattn.distributed as ld  # noqa: E402

F64 = torch.float64


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


# Failed checks of the running case. A check records instead of raising, so
# that every rank still issues the same collectives after a mismatch (a rank
# that left a case early would leave the others waiting).
FAILS = []


def expect(ok, msg):
    if not ok:
        FAILS.append(msg)


def close(a, b, tol, what):
    if tuple(a.shape) != tuple(b.shape):
        return expect(False, "%s: shape %s vs %s" % (what, tuple(a.shape), tuple(b.shape)))
    if not torch.isfinite(a).all():
        return expect(False, "%s: non-finite values" % what)
    e = rel(a, b)
    expect(e <= tol, "%s: relative error %.3g > %.3g" % (what, e, tol))


def split(N, P, skew):
    """Contiguous, uneven lengths summing to N (skew shifts the boundaries)."""
    b = [0] + [min(N, max(0, r * N // P + skew * ((-1) ** r) * (r % 3 + 1))) for r in range(1, P)] \
        + [N]
    b = sorted(b)
    return [b[r + 1] - b[r] for r in range(P)]


def part(x, lengths, rank, dim=1):
    off = sum(lengths[:rank])
    return x.narrow(dim, off, lengths[rank])


def leaf(x):
    return x.detach().clone().requires_grad_(True)


def phi(x, f):
    return {"relu": lambda x: x.clamp_min(0), "relu_eps": lambda x: x.clamp_min(0) + 1e-6,
            "elu1": lambda x: torch.where(x >= 0, x + 1, torch.exp(x.clamp_max(0))),
            "identity": lambda x: x, "relu1": lambda x: x.clamp_min(0) + 1}[f](x)


def dense_linear(q, k, v, Wtok, normalize, eps):
    """o = (A v) / (A 1 + eps) with A[z,h,t,s] = (q_t·k_s)·Wtok[(h,) t, s]."""
    A = torch.einsum("zthd,zshd->zhts", q, k) * Wtok
    num = torch.einsum("zhts,zshe->zthe", A, v)
    if not normalize:
        return num
    return num / (A.sum(-1).transpose(1, 2).unsqueeze(-1) + eps)


def block_of(N, grid, blocks):
    c = np.unravel_index(np.arange(N), grid)
    b = np.zeros(N, dtype=np.int64)
    for ca, na, ga in zip(c, grid, blocks):
        b = b * ga + (ca * ga) // na
    return torch.from_numpy(b)


def bhnd_view(x):
    """The same values as a non-contiguous [B, N, H, D] view of [B, H, N, D] memory."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


def run_both(fn_dist, fn_ref, inputs, lengths, rank, names, G, tol_f, tol_g, what,
             replicated=(), strided=False):
    """fn_dist(local leaves, replicated leaves) vs fn_ref(full leaves, ...):
    outputs, and gradients of sum(out·G) for every input; strided: the local
    inputs reach fn_dist as [B, H, N, D]-strided views."""
    full = [leaf(x) for x in inputs]
    reps = [leaf(x) for x in replicated]
    ref = fn_ref(*full, *reps)
    (ref * G).sum().backward()
    loc = [leaf(part(x, lengths, rank)) for x in inputs]
    lreps = [leaf(x) for x in replicated]
    out = fn_dist(*(bhnd_view(a) if strided else a for a in loc), *lreps)
    close(out, part(ref, lengths, rank), tol_f, what + " out")
    (out * part(G, lengths, rank)).sum().backward()
    for n, a, b in zip(names, loc, full):
        close(a.grad, part(b.grad, lengths, rank), tol_g, what + " d" + n)
    for i, (a, b) in enumerate(zip(lreps, reps)):
        close(a.grad, b.grad, tol_g, what + " d(replicated %d)" % i)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def randn(g, *shape, dtype=F64):
    return torch.randn(*shape, generator=g, dtype=dtype)


# ---------------------------------------------------------------------------
# MHLA non-causal
# ---------------------------------------------------------------------------
def _mhla_case(P, rank, seed, grid, blocks, per_head, normalize, skew, feature="relu_eps",
               strided=False):
    g = gen(seed)
    N = int(np.prod(grid))
    M = int(np.prod(blocks))
    B, H, D, Dv = 2, 2, 16, 8
    q, k = randn(g, B, N, H, D), randn(g, B, N, H, D)
    v = randn(g, B, N, H, Dv)
    W = torch.rand((H, M, M) if per_head else (M, M), generator=g, dtype=F64) + 0.05
    G = randn(g, B, N, H, Dv)
    lengths = split(N, P, skew)
    bid = block_of(N, grid, blocks)
    norm = normalize == "per_query"

    def ref(q, k, v, W):
        Wt = W[..., bid[:, None], bid[None, :]]
        return dense_linear(phi(q, feature), phi(k, feature), v, Wt, norm, 1e-6)

    def dis(q, k, v, W):
        return ld.mhla(q, k, v, W, grid, blocks, feature=feature, normalize=normalize)

    run_both(dis, ref, (q, k, v), lengths, rank, "qkv", G, 1e-10, 1e-10,
             "mhla %s/%s" % (grid, blocks), replicated=(W,), strided=strided)
    # fp32 forward against the C library on the whole grid
    f = lambda x: x.float()  # noqa: E731
    lib = longattn.mhla(f(q), f(k), f(v), f(W), grid=grid, blocks=blocks, feature=feature,
                        normalize=normalize)
    with torch.no_grad():
        out = ld.mhla(*(f(part(x, lengths, rank)) for x in (q, k, v)), f(W), grid, blocks,
                      feature=feature, normalize=normalize)
    close(out, part(lib, lengths, rank), 1e-5, "mhla fp32 vs library")


def case_mhla_1d(P, rank, seed):
    _mhla_case(P, rank, seed, (203,), (7,), False, "per_query", 3)


def case_mhla_2d(P, rank, seed):
    _mhla_case(P, rank, seed, (13, 17), (3, 4), True, "per_query", 5, strided=True)


def case_mhla_3d(P, rank, seed):
    _mhla_case(P, rank, seed, (5, 6, 7), (2, 3, 2), False, "none", 11)


# ---------------------------------------------------------------------------
# linear attention
# ---------------------------------------------------------------------------
def case_linear_causal(P, rank, seed):
    g = gen(seed)
    B, N, H, D, Dv = 1, 257, 2, 16, 24
    q, k = randn(g, B, N, H, D), randn(g, B, N, H, D)
    v = randn(g, B, N, H, Dv)
    S0, z0 = randn(g, B, H, D, Dv).abs(), randn(g, B, H, D).abs() + 1
    G = randn(g, B, N, H, Dv)
    lengths = split(N, P, 7)
    mask = torch.ones(N, N, dtype=F64).tril()

    def ref(q, k, v, S0, z0):
        qt, kt = phi(q, "elu1") * 0.5, phi(k, "elu1")
        A = torch.einsum("zthd,zshd->zhts", qt, kt) * mask
        num = torch.einsum("zhts,zshe->zthe", A, v) + torch.einsum("zthd,zhde->zthe", qt, S0)
        den = A.sum(-1).transpose(1, 2) + torch.einsum("zthd,zhd->zth", qt, z0)
        return num / (den.unsqueeze(-1) + 1e-6)

    def dis(q, k, v, S0, z0):
        return ld.linear_attention(q, k, v, causal=True, feature="elu1", scale=0.5, chunk=16,
                                   initial_state=(S0, z0))

    run_both(dis, ref, (q, k, v), lengths, rank, "qkv", G, 1e-10, 1e-10, "linear causal",
             replicated=(S0, z0))
    # final state (differentiable) equals the whole-sequence state
    loc = [leaf(part(x, lengths, rank)) for x in (q, k, v)]
    _, (S1, z1) = ld.linear_attention(*loc, causal=True, feature="relu", output_final_state=True)
    kt = phi(k, "relu")
    close(S1, torch.einsum("znhd,znhe->zhde", kt, v), 1e-12, "final S")
    close(z1, kt.sum(1), 1e-12, "final z")
    (S1.sum() + z1.sum()).backward()
    gk = (v.sum(-1, keepdim=True) + 1) * (k > 0) * P  # every rank's loss uses the final state
    close(loc[1].grad, part(gk, lengths, rank), 1e-12, "final state dk")
    # fp32: the library's causal kernel (impl auto: forward, and backward where the
    # library has one) and the torch chunkwise form, against the library on the
    # whole sequence (forward) and the float64 reference (gradients)
    f = lambda x: x.float()  # noqa: E731
    with torch.no_grad():
        lib = longattn.linear_attention(f(q), f(k), f(v), feature="elu1", causal=True, scale=0.5,
                                        chunk=16, initial_state=(f(S0), f(z0)))
        out = ld.linear_attention(*(f(part(x, lengths, rank)) for x in (q, k, v)), causal=True,
                                  feature="elu1", scale=0.5, chunk=16,
                                  initial_state=(f(S0), f(z0)))
    close(out, part(lib, lengths, rank), 1e-5, "linear causal fp32 no-grad vs library")
    full = [leaf(x) for x in (q, k, v, S0, z0)]
    (ref(*full) * G).sum().backward()
    for impl in ("auto", "torch"):
        loc = [leaf(f(part(x, lengths, rank))) for x in (q, k, v)]
        st = [leaf(f(S0)), leaf(f(z0))]
        out = ld.linear_attention(*loc, causal=True, feature="elu1", scale=0.5, chunk=16,
                                  initial_state=st, impl=impl)
        close(out, part(lib, lengths, rank), 1e-5, "linear causal fp32 %s vs library" % impl)
        (out * f(part(G, lengths, rank))).sum().backward()
        for n, a, b in zip("qkv", loc, full):
            close(a.grad, part(b.grad, lengths, rank), 1e-4,
                  "linear causal fp32 %s d%s" % (impl, n))
        for n, a, b in zip(("S0", "z0"), st, full[3:]):
            close(a.grad, b.grad, 1e-4, "linear causal fp32 %s d%s" % (impl, n))


def case_linear_noncausal(P, rank, seed):
    g = gen(seed)
    B, N, H, D, Dv = 2, 99, 3, 8, 5
    q, k, v = randn(g, B, N, H, D), randn(g, B, N, H, D), randn(g, B, N, H, Dv)
    G = randn(g, B, N, H, Dv)
    lengths = split(N, P, 2)

    def ref(q, k, v):
        return dense_linear(phi(q, "relu1"), phi(k, "relu1"), v, 1.0, True, 1e-6)

    def dis(q, k, v):
        return ld.linear_attention(q, k, v, causal=False, feature="relu1")

    run_both(dis, ref, (q, k, v), lengths, rank, "qkv", G, 1e-10, 1e-10, "linear non-causal",
             strided=True)


# ---------------------------------------------------------------------------
# causal MHLA
# ---------------------------------------------------------------------------
def case_mhla_causal(P, rank, seed):
    g = gen(seed)
    B, N, H, D, Dv, C = 1, 201, 2, 16, 8, 16
    M = (N + C - 1) // C + 2  # W larger than needed: only the leading ⌈N/C⌉ rows matter
    q, k, v = randn(g, B, N, H, D), randn(g, B, N, H, D), randn(g, B, N, H, Dv)
    G = randn(g, B, N, H, Dv)
    c = torch.arange(N) // C
    mask = torch.ones(N, N, dtype=F64).tril()
    # the third split puts ranks 1..P-2 inside chunk 2 (tokens 32..47): its
    # intra-chunk prefix on the last of them sums the partials of several ranks
    inside = [37] + [11 // (P - 2) + (r < 11 % (P - 2)) for r in range(P - 2)] if P > 2 else [37]
    for per_head, normalize, lengths in ((False, "none", split(N, P, 5)),
                                         (True, "per_query", split(N, P, 9)),
                                         (False, "none", inside + [N - sum(inside)])):
        W = torch.rand((H, M, M) if per_head else (M, M), generator=g, dtype=F64) + 0.05
        s = D ** -0.5

        def ref(q, k, v, W):
            Wt = W[..., c[:, None], c[None, :]] * mask
            return dense_linear(phi(q, "relu") * s, phi(k, "relu"), v, Wt,
                                normalize == "per_query", 1e-6)

        def dis(q, k, v, W):
            return ld.mhla_causal(q, k, v, W, chunk=C, normalize=normalize)

        run_both(dis, ref, (q, k, v), lengths, rank, "qkv", G, 1e-10, 1e-10,
                 "mhla_causal %s" % normalize, replicated=(W,))
        f = lambda x: x.float()  # noqa: E731
        lib = longattn.mhla_causal(f(q), f(k), f(v), f(W), chunk=C, normalize=normalize)
        with torch.no_grad():
            out = ld.mhla_causal(*(f(part(x, lengths, rank)) for x in (q, k, v)), f(W), chunk=C,
                                 normalize=normalize)
        close(out, part(lib, lengths, rank), 1e-5, "mhla_causal fp32 vs library")


# ---------------------------------------------------------------------------
# softmax
# ---------------------------------------------------------------------------
def _softmax_ref(q, k, v, causal, scale):
    rep = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
    s = torch.einsum("zqhd,zkhd->zhqk", q, k) * scale
    if causal:
        N = q.shape[1]
        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("zhqk,zkhe->zqhe", torch.softmax(s, -1), v)


def case_softmax(P, rank, seed):
    g = gen(seed)
    B, N, H, Hk, D, Dv = 1, 131, 4, 2, 16, 12
    q, k, v = randn(g, B, N, H, D), randn(g, B, N, Hk, D), randn(g, B, N, Hk, Dv)
    G = randn(g, B, N, H, Dv)
    sc = D ** -0.5
    f = lambda x: x.float()  # noqa: E731
    for causal, layout in ((False, "contiguous"), (True, "contiguous"), (True, "balanced")):
        what = "softmax causal=%s %s" % (causal, layout)
        if layout == "balanced":
            perm = torch.cat([torch.arange(a, b) for r in range(P)
                              for a, b in ld.balanced_positions(N, r, P)])
            lengths = [sum(b - a for a, b in ld.balanced_positions(N, r, P)) for r in range(P)]
        else:
            perm, lengths = torch.arange(N), split(N, P, 6)

        def ref(q, k, v):
            return _softmax_ref(q, k, v, causal, sc)[:, perm]

        def dis(q, k, v):
            return ld.softmax_attention(q, k, v, causal=causal, layout=layout)

        # local inputs are the permuted rows (balanced): compare in that order
        qp, kp, vp = (x[:, perm] for x in (q, k, v))
        full = [leaf(x) for x in (q, k, v)]
        r = ref(*full)
        (r * G[:, perm]).sum().backward()
        loc = [leaf(part(x, lengths, rank)) for x in (qp, kp, vp)]
        out = dis(*loc)
        close(out, part(r, lengths, rank), 1e-10, what + " out")
        (out * part(G[:, perm], lengths, rank)).sum().backward()
        for n, a, b in zip("qkv", loc, full):
            close(a.grad, part(b.grad[:, perm], lengths, rank), 1e-10, what + " d" + n)
        # fp32: the library (auto: its forward, and its backward where it has one)
        # and torch, against the library on the whole sequence and the float64 grads
        with torch.no_grad():
            lib, lse_lib = longattn.softmax_attention(f(q), f(k), f(v), causal=causal,
                                                      return_lse=True)
        lib, lse_lib = lib[:, perm], lse_lib[:, perm]
        for impl in ("auto", "torch", "library_forward"):
            loc = [leaf(f(part(x, lengths, rank))) for x in (qp, kp, vp)]
            out, lse = ld.softmax_attention(*loc, causal=causal, layout=layout, return_lse=True,
                                            impl=impl)
            close(out, part(lib, lengths, rank), 1e-5, what + " fp32 %s vs library" % impl)
            close(lse, part(lse_lib, lengths, rank), 1e-5, what + " fp32 %s lse" % impl)
            (out * f(part(G[:, perm], lengths, rank))).sum().backward()
            for n, a, b in zip("qkv", loc, full):
                close(a.grad, part(b.grad[:, perm], lengths, rank), 1e-4,
                      what + " fp32 %s d%s" % (impl, n))


# ---------------------------------------------------------------------------
# indexers (exact)
# ---------------------------------------------------------------------------
def _index_inputs(g, T, L, HI, dI, integer):
    if integer:  # small integers: many exactly equal scores, every sum exact
        q = torch.randint(-2, 3, (T, HI, dI), generator=g).float()
        k = torch.randint(-2, 3, (L, dI), generator=g).float()
        w = torch.randint(0, 3, (T, HI), generator=g).float()
    else:
        q, k = torch.randn(T, HI, dI, generator=g), torch.randn(L, dI, generator=g)
        w = torch.randn(T, HI, generator=g)
    start = torch.randint(0, L, (T,), generator=g)
    end = torch.minimum(start + torch.randint(0, L, (T,), generator=g), torch.tensor(L))
    start[:3], end[:3] = 0, torch.tensor([L, 1, 0])  # whole range, one key, empty
    return q, k, w, start.int(), end.int()


def case_dsa(P, rank, seed):
    g = gen(seed)
    for L, integer, skew in ((1000, False, 13), (777, True, 40)):
        q, k, w, start, end = _index_inputs(g, 37, L, 4, 16, integer)
        lengths = split(L, P, skew)
        for topk in (64, 700):
            ref = longattn.dsa_topk(q, k, w, topk=topk, start=start, end=end)
            got = ld.dsa_topk(q, part(k, lengths, rank, 0), w, topk=topk, start=start, end=end)
            expect(torch.equal(got, ref), "dsa L=%d topk=%d integer=%s: %d of %d indices differ"
                   % (L, topk, integer, int((got != ref).sum()), ref.numel()))
        ref = longattn.dsa_topk(q[:8], k, w[:8], topk=32)  # causal default ranges
        got = ld.dsa_topk(q[:8], part(k, lengths, rank, 0), w[:8], topk=32)
        expect(torch.equal(got, ref), "dsa causal default differs")


def case_hisa(P, rank, seed):
    g = gen(seed)
    # the last: several of stage 3's 4096-key scoring windows per rank
    for L, block, m, integer, skew in ((1000, 32, 5, False, 13), (777, 16, 3, True, 21),
                                       (300, 128, 1, False, 0), (300, 64, 2, True, 0),
                                       (9001, 16, 6, False, 17)):
        q, k, w, start, end = _index_inputs(g, 29, L, 4, 16, integer)
        lengths = split(L, P, skew)
        for topk in (48, 200):
            ref = longattn.hisa_topk(q, k, w, topk=topk, block=block, block_topk=m, start=start,
                                     end=end)
            got = ld.hisa_topk(q, part(k, lengths, rank, 0), w, topk=topk, block=block,
                               block_topk=m, start=start, end=end)
            expect(torch.equal(got, ref), "hisa L=%d B=%d m=%d topk=%d integer=%s: %d of %d "
                   "indices differ" % (L, block, m, topk, integer, int((got != ref).sum()),
                                       ref.numel()))


# ---------------------------------------------------------------------------
# layout helpers
# ---------------------------------------------------------------------------
def case_layout(P, rank, seed):
    x = torch.randn(2, 37, 3, generator=gen(seed))
    for n in (37, 2 * P, 2 * P + 1):
        y = x[:, :n]
        parts = [ld.balanced_shard(y, r, P) for r in range(P)]
        expect(torch.equal(ld.balanced_unshard(parts), y), "balanced_unshard n=%d" % n)
        pos = torch.cat([torch.arange(a, b) for r in range(P)
                         for a, b in ld.balanced_positions(n, r, P)])
        expect(torch.equal(torch.sort(pos)[0], torch.arange(n)), "balanced_positions n=%d" % n)
        work = [sum((a + b - 1) * (b - a) / 2 for a, b in ld.balanced_positions(n, r, P))
                for r in range(P)]  # causal work ~ Σ positions
        expect(n < 4 * P or max(work) <= 1.3 * min(work), "balanced work %s" % work)
        expect(torch.equal(torch.cat([ld.shard(y, r, P) for r in range(P)], 1), y),
               "shard n=%d" % n)


# ---------------------------------------------------------------------------
# bad input: every rank raises the same ValueError naming the argument
# ---------------------------------------------------------------------------
def case_errors(P, rank, seed):
    def raises(fn, words, what):
        try:
            fn()
        except ValueError as e:
            msg = str(e)
            expect(all(w in msg for w in words), "%s: message %r lacks %s" % (what, msg, words))
            return
        except Exception as e:  # noqa: BLE001
            return expect(False, "%s: raised %s, not ValueError" % (what, type(e).__name__))
        expect(False, "%s: no error" % what)

    x = torch.randn(1, 10, 2, 8)
    W = torch.rand(4, 4)
    raises(lambda: ld.mhla(x, x, x, W, (10 * P + 1,), (4,)), ["grid", "tokens"], "mhla grid")
    raises(lambda: ld.mhla(x, x, x, W, (10 * P,), (3,)), ["mixing"], "mhla mixing")
    raises(lambda: ld.mhla(x, x, x, W, (10 * P,), (4,), normalize="released_vision"),
           ["normalize"], "mhla normalize")
    raises(lambda: ld.mhla_causal(x, x, x, torch.rand(2, 2), chunk=4), ["mixing"],
           "mhla_causal mixing")
    y = x[:, :10 - 3 * (rank == 0)]  # lengths that are not the balanced split's
    raises(lambda: ld.softmax_attention(y, y, y, causal=True, layout="balanced"),
           ["balanced", "tokens"], "softmax balanced lengths")
    raises(lambda: ld.softmax_attention(x, x, x, layout="ring"), ["layout"], "softmax layout")
    q, k, w = torch.randn(3, 2, 8), torch.randn(20, 8), torch.rand(3, 2)
    raises(lambda: ld.hisa_topk(q, k, w, topk=4, block=0), ["block"], "hisa block")
    raises(lambda: ld.dsa_topk(q, k, w, start=torch.zeros(2, dtype=torch.int32),
                               end=torch.ones(2, dtype=torch.int32)), ["start"], "dsa start")
    raises(lambda: ld.linear_attention(x, x, x, impl="fast"), ["impl"], "linear impl")


# ---------------------------------------------------------------------------
# communication volume: logged payloads equal the model
# ---------------------------------------------------------------------------
def case_comm_volume(P, rank, seed):
    g = gen(seed)
    f4, i8 = 4, 8
    B, H, D, Dv = 2, 3, 16, 8
    lens = split(150, P, 4)
    n = lens[rank]
    x = lambda d: leaf(torch.randn(B, n, H, d, generator=g))  # noqa: E731

    def check(log, want, what):
        got = [(e[0], e[2], e[3]) for e in log.entries]
        expect(sorted(got) == sorted(want), "%s: logged %s, model %s" % (what, got, want))

    lengths_entry = ("all_gather", "fwd", i8)
    # non-causal MHLA, grid 10x15, blocks 2x5
    M = 10
    W = leaf(torch.rand(M, M, generator=g))
    log = ld.CommLog()
    qkv = (x(D), x(D), x(Dv))
    ld.mhla(*qkv, W, (10, 15), (2, 5), comm_log=log).sum().backward()
    S = B * H * M * D * (Dv + 1) * f4
    check(log, [lengths_entry, ("all_reduce", "fwd", S), ("all_reduce", "bwd", S),
                ("all_reduce", "bwd", M * M * f4)], "mhla")
    # reduce_mixing_grad=False: no dW all_reduce; the rank's partial dW sums to the full one
    W2, log = leaf(W), ld.CommLog()
    ld.mhla(*qkv, W2, (10, 15), (2, 5), reduce_mixing_grad=False, comm_log=log).sum().backward()
    check(log, [lengths_entry, ("all_reduce", "fwd", S), ("all_reduce", "bwd", S)],
          "mhla reduce_mixing_grad=False")
    part_sum = W2.grad.clone()
    dist.all_reduce(part_sum)
    close(part_sum, W.grad, 1e-5, "mhla partial dW summed over ranks")
    # causal linear (LASP-2)
    log = ld.CommLog()
    ld.linear_attention(x(D), x(D), x(Dv), comm_log=log).sum().backward()
    S = B * H * D * (Dv + 1) * f4
    check(log, [("all_gather", "fwd", S), ("reduce_scatter", "bwd", P * S)], "linear causal")
    # causal MHLA, chunk 16: Tmax = most chunks any rank touches
    C = 16
    M = (150 + C - 1) // C
    offs = [sum(lens[:r]) for r in range(P)]
    Tmax = max((o + m + C - 1) // C - o // C for o, m in zip(offs, lens))
    W = leaf(torch.rand(M, M, generator=g))
    log = ld.CommLog()
    ld.mhla_causal(x(D), x(D), x(Dv), W, chunk=C, comm_log=log).sum().backward()
    S = B * H * Tmax * D * (Dv + 1) * f4
    check(log, [lengths_entry, ("all_gather", "fwd", S), ("reduce_scatter", "bwd", P * S),
                ("all_reduce", "bwd", M * M * f4)], "mhla_causal")
    # softmax, all-gather KV (Hk = H here)
    log = ld.CommLog()
    ld.softmax_attention(x(D), x(D), x(Dv), causal=True, comm_log=log).sum().backward()
    KV = B * max(lens) * H * (D + Dv) * f4
    check(log, [lengths_entry, ("all_gather", "fwd", KV), ("reduce_scatter", "bwd", P * KV)],
          "softmax")
    # indexers: (score, index) pairs of 8 bytes
    T, topk, Lr = 5, 12, lens[rank]
    q, w, k = torch.randn(T, 2, 8, generator=g), torch.rand(T, 2, generator=g), \
        torch.randn(Lr, 8, generator=g)
    log = ld.CommLog()
    ld.dsa_topk(q, k, w, topk=topk, comm_log=log)
    check(log, [lengths_entry, ("all_gather", "fwd", T * topk * 8)], "dsa")
    blk, m = 16, 3
    heads = [min(((o + blk - 1) // blk) * blk, o + ln) - o for o, ln in zip(offs, lens)]
    log = ld.CommLog()
    ld.hisa_topk(q, k, w, topk=topk, block=blk, block_topk=m, comm_log=log)
    want = [lengths_entry, ("all_gather", "fwd", T * m * 8), ("all_gather", "fwd", T * topk * 8)]
    if max(heads):
        want.append(("all_gather", "fwd", max(heads) * 8 * f4))
    check(log, want, "hisa")


CASES = [name for name in sorted(globals()) if name.startswith("case_")]


# ---------------------------------------------------------------------------
# the rank process
# ---------------------------------------------------------------------------
def worker(rank, world, init_file, outdir, seed, cases):
    torch.set_num_threads(1)
    longattn.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    results = {}
    try:
        for i, name in enumerate(cases):
            del FAILS[:]
            try:
                globals()[name](world, rank, seed + 1000 * i)
                results[name] = "\n".join(FAILS) if FAILS else "ok"
            except Exception:
                results[name] = traceback.format_exc()
            dist.barrier()
    finally:
        with open(os.path.join(outdir, "rank%d.json" % rank), "w") as fh:
            json.dump(results, fh)
        dist.destroy_process_group()
