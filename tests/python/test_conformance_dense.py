"""Black-box conformance of `longattn run` for the dense operators, written only
from /work/shared/CLI.md and /work/shared/SPEC.md (not from the implementation).

Ops: softmax, linear, mhla (non-causal and --causal), mhla-init, focused
(flatten, blog), attn-map. Every reference is float64 numpy written from the
SPEC formulas; the CLI is called exactly as CLI.md writes it, relying on its
defaults wherever a default is documented. Also: output dtype float32 / C
order / shape, float64 inputs, odd sizes, uneven block grids, per-head mixing,
and bad input (exit 2, one stderr line naming the culprit, no file left).

Run: /usr/bin/python3 -m pytest tests/python/test_conformance_dense.py
(CLI: $LA_BUILD/longattn relative to the repository root, default build/).
Seed: LA_TEST_SEED (random when unset; printed).
"""
import os
import pathlib
import subprocess
import zlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = ROOT / os.environ.get("LA_BUILD", "build") / "longattn"
pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} not built")

SEED = int(os.environ.get("LA_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")
print(f"# test_conformance_dense: LA_TEST_SEED={SEED}")


def rng(tag):
    return np.random.default_rng([SEED, zlib.crc32(repr(tag).encode())])


# ----------------------------------------------------------------- helpers

def cli(*args, expect=0):
    r = subprocess.run([str(BIN), "run", *map(str, args)], capture_output=True, text=True, timeout=120)
    assert r.returncode == expect, (f"seed={SEED} args={args}\nrc={r.returncode} (want {expect})\n"
                                    f"stdout: {r.stdout}\nstderr: {r.stderr}")
    return r


def save(tmp, name, a):
    p = tmp / f"{name}.npy"
    np.save(p, a)
    return p


def load(path, shape, dtype=np.float32):
    a = np.load(path)
    assert a.dtype == dtype, f"{path}: dtype {a.dtype}, want {dtype}"
    assert a.shape == tuple(shape), f"{path}: shape {a.shape}, want {tuple(shape)}"
    assert a.flags.c_contiguous
    return a


def close(got, ref, tol=2e-5, what=""):
    got = np.asarray(got, np.float64)
    assert got.shape == ref.shape
    fin = np.isfinite(ref)
    assert np.array_equal(np.isfinite(got), fin), f"{what}: non-finite pattern differs (seed {SEED})"
    if not fin.any():
        return
    scale = max(np.max(np.abs(ref[fin])), 1e-30)
    err = np.max(np.abs(got[fin] - ref[fin])) / scale
    assert err <= tol, f"{what}: rel err {err:.3g} > {tol} (seed {SEED})"


def phi(x, name):
    if name == "identity":
        return x
    if name == "relu":
        return np.maximum(x, 0)
    if name == "relu_eps":
        return np.maximum(x, 0) + 1e-6
    if name == "relu1":
        return np.maximum(x, 0) + 1
    if name == "elu1":
        return np.where(x >= 0, x + 1, np.exp(np.minimum(x, 0)))
    raise ValueError(name)


def f32(a):
    """The values the CLI sees (it computes in float32)."""
    return np.asarray(a, np.float32).astype(np.float64)


# ----------------------------------------------------------------- softmax (§1)

def ref_softmax(q, k, v, scale, causal):
    B, Nq, H, D = q.shape
    Nk = k.shape[1]
    s = np.einsum("bthd,bshd->bhts", q, k) * scale
    if causal:
        t = np.arange(Nq)[:, None]
        j = np.arange(Nk)[None, :]
        s = np.where(j <= t + (Nk - Nq), s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0)
    e = np.exp(s - m_safe)
    den = e.sum(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        o = np.einsum("bhts,bshe->bthe", np.where(den > 0, e / np.where(den > 0, den, 1), 0), v)
        lse = np.log(den[..., 0]) + m_safe[..., 0]
    return o, np.transpose(lse, (0, 2, 1))


@pytest.mark.parametrize("B,Nq,Nk,H,D,Dv,causal,dt", [
    (1, 1, 1, 1, 1, 1, False, np.float32),
    (2, 63, 63, 3, 16, 5, False, np.float64),
    (1, 65, 65, 2, 8, 8, True, np.float32),
    (1, 5, 9, 2, 4, 3, True, np.float64),   # bottom-right alignment, Nk > Nq
    (1, 9, 130, 1, 7, 2, True, np.float32),
    (1, 33, 7, 2, 3, 3, False, np.float32),
])
def test_softmax(tmp_path, B, Nq, Nk, H, D, Dv, causal, dt):
    r = rng(("sm", B, Nq, Nk, H, D, Dv, causal))
    q = r.standard_normal((B, Nq, H, D)).astype(dt)
    k = r.standard_normal((B, Nk, H, D)).astype(dt)
    v = r.standard_normal((B, Nk, H, Dv)).astype(dt)
    args = ["softmax", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k),
            "--v", save(tmp_path, "v", v), "--out", tmp_path / "o.npy", "--lse", tmp_path / "l.npy"]
    if causal:
        args.append("--causal")
    cli(*args)
    o_ref, l_ref = ref_softmax(f32(q), f32(k), f32(v), D ** -0.5, causal)
    close(load(tmp_path / "o.npy", (B, Nq, H, Dv)), o_ref, what="softmax out")
    close(load(tmp_path / "l.npy", (B, Nq, H)), l_ref, what="softmax lse")


def test_softmax_scale_and_no_lse(tmp_path):
    r = rng("sm-scale")
    q, k, v = (r.standard_normal((1, 12, 2, 6)) for _ in range(3))
    cli("softmax", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k),
        "--v", save(tmp_path, "v", v), "--scale", "0.37", "--out", tmp_path / "o.npy")
    close(load(tmp_path / "o.npy", (1, 12, 2, 6)), ref_softmax(f32(q), f32(k), f32(v), 0.37, False)[0],
          what="softmax --scale")
    assert not (tmp_path / "l.npy").exists()


def test_softmax_causal_fully_masked_rows(tmp_path):
    # Nq > Nk with --causal: the first Nq-Nk rows see no key -> o = 0, lse = -inf (no NaN)
    r = rng("sm-masked")
    q = r.standard_normal((1, 6, 1, 4))
    k = r.standard_normal((1, 3, 1, 4))
    v = r.standard_normal((1, 3, 1, 4))
    cli("softmax", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k), "--v", save(tmp_path, "v", v),
        "--causal", "--out", tmp_path / "o.npy", "--lse", tmp_path / "l.npy")
    o = load(tmp_path / "o.npy", (1, 6, 1, 4))
    lse = load(tmp_path / "l.npy", (1, 6, 1))
    o_ref, l_ref = ref_softmax(f32(q), f32(k), f32(v), 0.5, True)
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    close(o, o_ref, what="masked out")
    close(lse, l_ref, what="masked lse")


# ----------------------------------------------------------------- linear (§3)

def ref_linear(q, k, v, feature="relu", causal=False, normalize=True, eps=1e-6, scale=1.0,
               S0=None, z0=None):
    qt = scale * phi(q, feature)
    kt = phi(k, feature)
    B, N, H, D = q.shape
    Dv = v.shape[-1]
    if not causal:
        S = np.einsum("bnhd,bnhe->bhde", kt, v)
        z = kt.sum(1)  # [B,H,D]
        num = np.einsum("bthd,bhde->bthe", qt, S)
        den = np.einsum("bthd,bhd->bth", qt, z)
        return (num / (den[..., None] + eps) if normalize else num), None, None
    S = np.zeros((B, H, D, Dv)) if S0 is None else S0.copy()
    z = np.zeros((B, H, D)) if z0 is None else z0.copy()
    o = np.zeros((B, N, H, Dv))
    for t in range(N):  # token-by-token recurrence
        S += np.einsum("bhd,bhe->bhde", kt[:, t], v[:, t])
        z += kt[:, t]
        num = np.einsum("bhd,bhde->bhe", qt[:, t], S)
        if normalize:
            num = num / (np.einsum("bhd,bhd->bh", qt[:, t], z)[..., None] + eps)
        o[:, t] = num
    return o, S, z


@pytest.mark.parametrize("B,N,H,D,Dv,feature,causal,normalize,extra", [
    (1, 1, 1, 1, 1, None, False, True, []),
    (2, 63, 2, 16, 5, None, False, True, []),
    (1, 65, 3, 8, 8, None, True, True, []),
    (1, 65, 1, 4, 7, "elu1", True, False, []),
    (1, 63, 2, 5, 3, "relu1", True, True, ["--chunk", "7"]),
    (1, 130, 1, 3, 2, "relu_eps", True, True, ["--chunk", "1"]),
    (2, 40, 2, 6, 4, "identity", False, False, ["--scale", "0.3"]),
    (1, 50, 2, 6, 4, "elu1", False, True, ["--scale", "0.3", "--eps", "0.5"]),
])
def test_linear(tmp_path, B, N, H, D, Dv, feature, causal, normalize, extra):
    r = rng(("lin", B, N, H, D, Dv, feature, causal, normalize, tuple(extra)))
    q = r.standard_normal((B, N, H, D))
    k = r.standard_normal((B, N, H, D)).astype(np.float32)
    v = r.standard_normal((B, N, H, Dv))
    args = ["linear", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k),
            "--v", save(tmp_path, "v", v), "--out", tmp_path / "o.npy", *extra]
    if feature:
        args += ["--feature", feature]
    if causal:
        args.append("--causal")
    if not normalize:
        args.append("--no-normalize")
    cli(*args)
    kw = dict(feature=feature or "relu", causal=causal, normalize=normalize)
    if "--scale" in extra:
        kw["scale"] = float(extra[extra.index("--scale") + 1])
    if "--eps" in extra:
        kw["eps"] = float(extra[extra.index("--eps") + 1])
    o_ref = ref_linear(f32(q), f32(k), f32(v), **kw)[0]
    close(load(tmp_path / "o.npy", (B, N, H, Dv)), o_ref, what="linear")


def test_linear_default_eps_is_1e6(tmp_path):
    # q~.z tiny (~1e-6): the result depends visibly on eps, so the default must be 1e-6
    q = np.zeros((1, 2, 1, 2))
    q[0, :, 0, 0] = 1e-6
    k = np.zeros((1, 2, 1, 2))
    k[0, :, 0, 0] = 0.5
    v = np.ones((1, 2, 1, 1))
    cli("linear", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k), "--v", save(tmp_path, "v", v),
        "--out", tmp_path / "o.npy")
    close(load(tmp_path / "o.npy", (1, 2, 1, 1)), ref_linear(f32(q), f32(k), f32(v))[0], tol=1e-4,
          what="linear eps default")


def test_linear_state_split(tmp_path):
    r = rng("lin-state")
    B, N, H, D, Dv, n1 = 2, 97, 2, 5, 3, 41
    q, k = r.standard_normal((2, B, N, H, D))
    v = r.standard_normal((B, N, H, Dv))
    o_ref, S_ref, z_ref = ref_linear(f32(q), f32(k), f32(v), causal=True)
    _, S1, z1 = ref_linear(f32(q[:, :n1]), f32(k[:, :n1]), f32(v[:, :n1]), causal=True)
    cli("linear", "--causal", "--q", save(tmp_path, "q1", q[:, :n1]), "--k", save(tmp_path, "k1", k[:, :n1]),
        "--v", save(tmp_path, "v1", v[:, :n1]), "--out", tmp_path / "o1.npy", "--state-out", tmp_path / "st")
    close(load(tmp_path / "st.S.npy", (B, H, D, Dv)), S1, what="state S")
    close(load(tmp_path / "st.z.npy", (B, H, D)), z1, what="state z")
    cli("linear", "--causal", "--q", save(tmp_path, "q2", q[:, n1:]), "--k", save(tmp_path, "k2", k[:, n1:]),
        "--v", save(tmp_path, "v2", v[:, n1:]), "--out", tmp_path / "o2.npy",
        "--state-in", tmp_path / "st", "--state-out", tmp_path / "st2")
    o = np.concatenate([load(tmp_path / "o1.npy", (B, n1, H, Dv)),
                        load(tmp_path / "o2.npy", (B, N - n1, H, Dv))], axis=1)
    close(o, o_ref, what="split outputs")
    close(load(tmp_path / "st2.S.npy", (B, H, D, Dv)), S_ref, what="final S")
    close(load(tmp_path / "st2.z.npy", (B, H, D)), z_ref, what="final z")
    # an arbitrary (float64) state in, relu1 features, chunk 16
    S0 = np.abs(r.standard_normal((B, H, D, Dv)))
    z0 = np.abs(r.standard_normal((B, H, D)))
    np.save(tmp_path / "in.S.npy", S0)
    np.save(tmp_path / "in.z.npy", z0)
    cli("linear", "--causal", "--feature", "relu1", "--chunk", "16", "--q", tmp_path / "q2.npy",
        "--k", tmp_path / "k2.npy", "--v", tmp_path / "v2.npy", "--out", tmp_path / "o3.npy",
        "--state-in", tmp_path / "in")
    o3_ref = ref_linear(f32(q[:, n1:]), f32(k[:, n1:]), f32(v[:, n1:]), feature="relu1", causal=True,
                        S0=f32(S0), z0=f32(z0))[0]
    close(load(tmp_path / "o3.npy", (B, N - n1, H, Dv)), o3_ref, what="state-in output")


# ----------------------------------------------------------------- mhla (§5)

def block_ids(grid, blocks):
    """§5.1: block coordinate floor(c*g/n) per axis, raster block id; tokens raster, time slowest.
    Also returns each token's position inside its block (local coordinate tuple)."""
    coords = np.stack(np.meshgrid(*[np.arange(n) for n in grid], indexing="ij"), -1).reshape(-1, len(grid))
    bc = np.stack([coords[:, a] * blocks[a] // grid[a] for a in range(len(grid))], -1)
    bid = np.ravel_multi_index(tuple(bc.T), blocks)
    start = np.array([[next(c for c in range(grid[a]) if c * blocks[a] // grid[a] == bc_a)
                       for a, bc_a in enumerate(row)] for row in bc])
    local = [tuple(x) for x in coords - start]
    return bid, local


def ref_mhla(q, k, v, W, grid, blocks, feature="relu_eps", normalize="per_query", eps=1e-6, scale=1.0):
    B, N, H, D = q.shape
    M = int(np.prod(blocks))
    bid, local = block_ids(grid, blocks)
    qt = scale * phi(q, feature)
    kt = phi(k, feature)
    Wh = np.broadcast_to(W, (H, M, M)) if W.ndim == 2 else W
    onehot = np.zeros((N, M))
    onehot[np.arange(N), bid] = 1
    S = np.einsum("nm,bnhd,bnhe->bhmde", onehot, kt, v)
    z = np.einsum("nm,bnhd->bhmd", onehot, kt)
    St = np.einsum("hib,Bhbde->Bhide", Wh, S)
    zt = np.einsum("hib,Bhbd->Bhid", Wh, z)
    St_t = St[:, :, bid]           # [B,H,N,D,Dv]
    zt_t = zt[:, :, bid]           # [B,H,N,D]
    num = np.einsum("bnhd,bhnde->bnhe", qt, St_t)
    if normalize == "none":
        return num
    if normalize == "per_query":
        den = np.einsum("bnhd,bhnd->bnh", qt, zt_t)
        return num / (den[..., None] + eps)
    assert normalize == "released_vision"
    pos = {(b, w): t for t, (b, w) in enumerate(zip(bid, local))}
    den = np.zeros((B, N, H))
    for t in range(N):
        i, w = bid[t], local[t]
        for b in range(M):
            tb = pos[(b, w)]
            den[:, t, :] += Wh[:, i, b][None, :] * np.einsum("Bhd,Bhd->Bh", qt[:, tb], z[:, :, b])
    return num / (den[..., None] + eps)


def dims(s):
    return [int(x) for x in s.split("x")]


@pytest.mark.parametrize("B,H,D,Dv,grid,blocks,per_head,normalize,feature,extra", [
    (1, 1, 1, 1, "1", "1", False, None, None, []),
    (2, 2, 8, 5, "63", "4", False, None, None, []),
    (1, 3, 4, 4, "65", "5", True, None, None, []),
    (1, 2, 5, 3, "7x9", "2x3", False, None, None, []),
    (1, 2, 3, 6, "7x9", "2x3", True, "none", "relu1", ["--scale", "0.5"]),
    (1, 1, 4, 3, "6x10x10", "3x5x2", False, None, None, []),
    (1, 2, 4, 2, "6x10x10", "3x5x2", True, "none", "elu1", []),
    (1, 2, 4, 4, "16x16", "4x4", False, None, None, []),
    (2, 2, 3, 5, "8x12", "4x4", True, "released_vision", None, []),
    (1, 1, 4, 3, "4x6x6", "2x3x3", False, "released_vision", "relu", ["--eps", "0.01"]),
    (1, 2, 3, 2, "12", "12", False, "per_query", "identity", ["--eps", "0.25", "--scale", "2"]),
    # more blocks than tokens on an axis: §5.1's floor(c*g/n) leaves some blocks empty (S_b = 0)
    (1, 2, 4, 3, "1", "4", False, None, None, []),
    (2, 1, 3, 2, "3", "5", True, "none", None, []),
    (1, 2, 4, 4, "2x3", "4x2", False, None, None, []),
    (1, 1, 3, 3, "2x1x3", "3x2x2", True, None, "relu", []),
    (1, 2, 3, 2, "5", "7", False, "per_query", "elu1", []),          # the GEMM path
])
def test_mhla(tmp_path, B, H, D, Dv, grid, blocks, per_head, normalize, feature, extra):
    g, bl = dims(grid), dims(blocks)
    N, M = int(np.prod(g)), int(np.prod(bl))
    r = rng(("mhla", B, H, D, Dv, grid, blocks, per_head, normalize, feature, tuple(extra)))
    q = r.standard_normal((B, N, H, D))
    k = r.standard_normal((B, N, H, D)).astype(np.float32)
    v = r.standard_normal((B, N, H, Dv))
    W = r.uniform(0.05, 1.0, (H, M, M) if per_head else (M, M))
    if feature == "identity":  # keep denominators away from 0
        q, k = np.abs(q), np.abs(k)
    args = ["mhla", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k), "--v", save(tmp_path, "v", v),
            "--mixing", save(tmp_path, "W", W), "--out", tmp_path / "o.npy"]
    if len(g) > 1 or grid != str(N):
        args += ["--grid", grid]
    if len(g) > 1 or M > 1:
        args += ["--blocks", blocks]
    if normalize:
        args += ["--normalize", normalize]
    if feature:
        args += ["--feature", feature]
    args += extra
    cli(*args)
    kw = dict(feature=feature or "relu_eps", normalize=normalize or "per_query")
    if "--scale" in extra:
        kw["scale"] = float(extra[extra.index("--scale") + 1])
    if "--eps" in extra:
        kw["eps"] = float(extra[extra.index("--eps") + 1])
    o_ref = ref_mhla(f32(q), f32(k), f32(v), f32(W), g, bl, **kw)
    close(load(tmp_path / "o.npy", (B, N, H, Dv)), o_ref, what="mhla")


def test_mhla_grid_default_is_1d(tmp_path):
    # no --grid: 1-D grid of N tokens; --blocks 3 on N=10 -> blocks {0..3},{4..6},{7..9}
    r = rng("mhla-1d")
    q, k = r.standard_normal((2, 1, 10, 2, 3))
    v = r.standard_normal((1, 10, 2, 2))
    W = r.uniform(0.1, 1, (3, 3))
    cli("mhla", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k), "--v", save(tmp_path, "v", v),
        "--mixing", save(tmp_path, "W", W), "--blocks", "3", "--out", tmp_path / "o.npy")
    close(load(tmp_path / "o.npy", (1, 10, 2, 2)), ref_mhla(f32(q), f32(k), f32(v), f32(W), [10], [3]),
          what="mhla 1-D")
    assert list(block_ids([10], [3])[0]) == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_mhla_released_vision_uneven_blocks_is_error(tmp_path):
    r = rng("mhla-rv-err")
    q, k, v = r.standard_normal((3, 1, 63, 1, 2))
    W = np.ones((6, 6))
    out = tmp_path / "o.npy"
    e = cli("mhla", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k), "--v", save(tmp_path, "v", v),
            "--mixing", save(tmp_path, "W", W), "--grid", "7x9", "--blocks", "2x3", "--normalize",
            "released_vision", "--out", out, expect=2)
    assert len(e.stderr.strip().splitlines()) == 1 and not out.exists()


# causal (§5.4)
def ref_mhla_causal(q, k, v, W, C, feature="relu", normalize="none", eps=1e-6, scale=None):
    B, N, H, D = q.shape
    scale = D ** -0.5 if scale is None else scale
    qt = scale * phi(q, feature)
    kt = phi(k, feature)
    Mn = -(-N // C)
    Wh = np.broadcast_to(W, (H,) + W.shape[-2:]) if W.ndim == 2 else W
    o = np.zeros(v.shape)
    Sb = [np.einsum("bnhd,bnhe->bhde", kt[:, i * C:(i + 1) * C], v[:, i * C:(i + 1) * C]) for i in range(Mn)]
    zb = [kt[:, i * C:(i + 1) * C].sum(1) for i in range(Mn)]
    for t in range(N):
        i = t // C
        S = sum(Wh[None, :, i, b, None, None] * Sb[b] for b in range(i)) if i else 0
        z = sum(Wh[None, :, i, b, None] * zb[b] for b in range(i)) if i else 0
        S = S + Wh[None, :, i, i, None, None] * np.einsum("bnhd,bnhe->bhde", kt[:, i * C:t + 1], v[:, i * C:t + 1])
        z = z + Wh[None, :, i, i, None] * kt[:, i * C:t + 1].sum(1)
        num = np.einsum("bhd,bhde->bhe", qt[:, t], S)
        if normalize == "per_query":
            num = num / (np.einsum("bhd,bhd->bh", qt[:, t], z)[..., None] + eps)
        o[:, t] = num
    return o


@pytest.mark.parametrize("B,N,H,D,Dv,chunk,Mextra,per_head,normalize,feature,extra", [
    (1, 1, 1, 1, 1, None, 0, False, None, None, []),
    (1, 63, 2, 8, 5, None, 0, False, None, None, []),
    (2, 65, 2, 4, 4, None, 1, True, None, None, []),      # 2 chunks, last of 1 token, W larger than needed
    (1, 150, 3, 5, 3, None, 0, True, "per_query", None, []),
    (1, 50, 2, 3, 2, "7", 0, False, "per_query", "elu1", ["--scale", "1"]),
    (1, 31, 1, 6, 7, "4", 2, True, "none", "relu1", ["--scale", "0.25"]),
])
def test_mhla_causal(tmp_path, B, N, H, D, Dv, chunk, Mextra, per_head, normalize, feature, extra):
    C = int(chunk or 64)
    M = -(-N // C) + Mextra
    r = rng(("mhla-c", B, N, H, D, Dv, chunk, Mextra, per_head, normalize, feature))
    q = r.standard_normal((B, N, H, D))
    k = r.standard_normal((B, N, H, D))
    v = r.standard_normal((B, N, H, Dv)).astype(np.float32)
    W = r.uniform(0.05, 1.0, (H, M, M) if per_head else (M, M))
    W_upper_garbage = W.copy()
    iu = np.triu_indices(M, 1)
    if per_head:
        W_upper_garbage[:, iu[0], iu[1]] = 1e3
        W[:, iu[0], iu[1]] = 0
    else:
        W_upper_garbage[iu] = 1e3
        W[iu] = 0
    args = ["mhla", "--causal", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k),
            "--v", save(tmp_path, "v", v), "--mixing", save(tmp_path, "W", W_upper_garbage), "--out",
            tmp_path / "o.npy", *extra]
    if chunk:
        args += ["--chunk", chunk]
    if normalize:
        args += ["--normalize", normalize]
    if feature:
        args += ["--feature", feature]
    cli(*args)
    kw = dict(feature=feature or "relu", normalize=normalize or "none")
    if "--scale" in extra:
        kw["scale"] = float(extra[extra.index("--scale") + 1])
    o_ref = ref_mhla_causal(f32(q), f32(k), f32(v), f32(W), C, **kw)
    close(load(tmp_path / "o.npy", (B, N, H, Dv)), o_ref, what="mhla causal")


def test_mhla_causal_mixing_too_small(tmp_path):
    r = rng("mhla-c-small")
    q, k, v = r.standard_normal((3, 1, 65, 1, 2))
    out = tmp_path / "o.npy"
    e = cli("mhla", "--causal", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k),
            "--v", save(tmp_path, "v", v), "--mixing", save(tmp_path, "W", np.ones((1, 1))), "--out", out, expect=2)
    assert len(e.stderr.strip().splitlines()) == 1 and not out.exists()


# ----------------------------------------------------------------- mhla-init (§5.3)

def ref_init(blocks, init):
    bl = dims(blocks)
    M = int(np.prod(bl))
    if init == "uniform_causal":
        i = np.arange(M)[:, None]
        j = np.arange(M)[None, :]
        return np.where(j <= i, 1.0 / (i + 1), 0.0)
    c = np.stack(np.meshgrid(*[np.arange(n) for n in bl], indexing="ij"), -1).reshape(M, -1) + 0.5
    dist = np.sqrt(((c[:, None, :] - c[None, :, :]) ** 2).sum(-1))
    if init == "locality":
        W = 1 - dist / dist.max(axis=1, keepdims=True)
        return W / W.sum(1, keepdims=True)
    W = 1 - dist / dist.max()
    return W / W.sum(0, keepdims=True)


@pytest.mark.parametrize("blocks,init", [
    ("3x5x10", "locality"), ("3x5x10", "locality_global"), ("4x4", "locality"), ("2x3", "locality_global"),
    ("7", "locality"), ("32", "uniform_causal"), ("1", "uniform_causal"), ("4x4", None),
])
def test_mhla_init(tmp_path, blocks, init):
    args = ["mhla-init", "--blocks", blocks, "--out", tmp_path / "W.npy"]
    if init:
        args += ["--init", init]
    cli(*args)
    M = int(np.prod(dims(blocks)))
    W = load(tmp_path / "W.npy", (M, M))
    ref = ref_init(blocks, init or "locality")
    close(W, ref, tol=1e-6, what=f"mhla-init {init}")
    if init == "locality_global":
        assert np.allclose(W.sum(0), 1, atol=1e-5)
    elif init in (None, "locality", "uniform_causal"):
        assert np.allclose(W.sum(1), 1, atol=1e-5)


def test_mhla_init_roundtrip(tmp_path):
    # mhla-init output fed to mhla on a 21x30x50-like (shrunk) grid
    cli("mhla-init", "--blocks", "2x3x2", "--out", tmp_path / "W.npy")
    r = rng("init-rt")
    q, k = r.standard_normal((2, 1, 5 * 7 * 4, 1, 3))
    v = r.standard_normal((1, 140, 1, 2))
    cli("mhla", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k), "--v", save(tmp_path, "v", v),
        "--mixing", tmp_path / "W.npy", "--grid", "5x7x4", "--blocks", "2x3x2", "--out", tmp_path / "o.npy")
    close(load(tmp_path / "o.npy", (1, 140, 1, 2)),
          ref_mhla(f32(q), f32(k), f32(v), ref_init("2x3x2", "locality"), [5, 7, 4], [2, 3, 2]), what="init+mhla")


# ----------------------------------------------------------------- focused (§4)

def dwconv(x, w, bias=None):
    """x [N=Hm*Wm map, channels] as [Hm,Wm,c]; w [c,k,k]; zero padding k//2; cross-correlation (PyTorch)."""
    Hm, Wm, c = x.shape
    kk = w.shape[-1]
    p = kk // 2
    xp = np.zeros((Hm + 2 * p, Wm + 2 * p, c))
    xp[p:p + Hm, p:p + Wm] = x
    out = np.zeros_like(x)
    for dy in range(kk):
        for dx in range(kk):
            out += xp[dy:dy + Hm, dx:dx + Wm] * w[:, dy, dx]
    return out + (0 if bias is None else bias)


def flatten_features(x, s, p):
    """x [..., C] (C = H*d, all heads), s [C]: x' = (ReLU(x)+1e-6)/softplus(s); f_p over all C."""
    xp = (np.maximum(x, 0) + 1e-6) / np.log1p(np.exp(s))
    xpp = xp ** p
    return np.linalg.norm(xp, axis=-1, keepdims=True) * xpp / np.linalg.norm(xpp, axis=-1, keepdims=True)


def ref_flatten(q, k, v, Hm, Wm, s=None, p=3.0, eps=1e-6, conv=None, bias=None):
    B, N, H, D = q.shape
    C = H * D
    s = np.zeros(C) if s is None else s
    qt = flatten_features(q.reshape(B, N, C), s, p).reshape(B, N, H, D)
    kt = flatten_features(k.reshape(B, N, C), s, p).reshape(B, N, H, D)
    S = np.einsum("bnhd,bnhe->bhde", kt, v)
    z = kt.sum(1)
    o = (np.einsum("bnhd,bhde->bnhe", qt, S) / N) / (np.einsum("bnhd,bhd->bnh", qt, z)[..., None] / N + eps)
    if conv is not None:
        for b in range(B):
            for h in range(H):
                o[b, :, h] += dwconv(v[b, :, h].reshape(Hm, Wm, -1), conv, bias).reshape(N, -1)
    elif bias is not None:
        o += bias
    return o


def ref_blog(q, k, v, Hm, Wm, conv=None, focus=None, eps=1e-6):
    B, N, H, D = q.shape
    C = H * D
    qt = phi(q * D ** -0.5, "relu1")
    kp = phi(k, "relu1").reshape(B, Hm, Wm, C)
    if conv is not None:
        kh = np.stack([dwconv(kp[b], conv) for b in range(B)]).reshape(B, N, H, D)
    else:
        kh = kp.reshape(B, N, H, D)
    focus = np.full(H, 2.0) if focus is None else np.broadcast_to(focus, (H,))
    kh = kh * focus[None, None, :, None]
    S = np.einsum("bnhd,bnhe->bhde", kh, v)
    z = kh.sum(1)
    return np.einsum("bnhd,bhde->bnhe", qt, S) / (np.einsum("bnhd,bhd->bnh", qt, z)[..., None] + eps)


@pytest.mark.parametrize("B,H,D,Dv,Hm,Wm,kk,sp,bias,p,extra", [
    (1, 1, 1, 1, 1, 1, 0, False, False, None, []),
    (2, 2, 4, 4, 7, 9, 5, True, True, None, []),        # full module: DWC 5x5 + bias, learned s
    (1, 3, 5, 5, 8, 8, 3, False, True, "2", []),
    (1, 2, 4, 3, 5, 13, 0, True, False, "4", ["--eps", "0.01"]),  # no conv: Dv != D allowed
    (1, 2, 3, 3, 3, 65, 3, False, False, None, []),      # kernel as tall as the map
    (1, 2, 2, 2, 1, 1, 1, True, True, None, []),         # 1x1 map, 1x1 kernel
    (1, 1, 3, 3, 5, 4, 3, False, True, None, []),
])
def test_focused_flatten(tmp_path, B, H, D, Dv, Hm, Wm, kk, sp, bias, p, extra):
    N = Hm * Wm
    r = rng(("ff", B, H, D, Dv, Hm, Wm, kk, sp, bias, p))
    q = r.standard_normal((B, N, H, D))
    k = r.standard_normal((B, N, H, D)).astype(np.float32)
    v = r.standard_normal((B, N, H, Dv))
    args = ["focused", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k), "--v", save(tmp_path, "v", v),
            "--map", f"{Hm}x{Wm}", "--out", tmp_path / "o.npy", *extra]
    kw = {}
    if kk:
        conv = r.standard_normal((D, kk, kk)) * 0.3   # asymmetric: detects a flipped kernel
        args += ["--conv", save(tmp_path, "conv", conv)]
        kw["conv"] = f32(conv)
        if bias:
            b = r.standard_normal(D)
            args += ["--conv-bias", save(tmp_path, "bias", b)]
            kw["bias"] = f32(b)
    if sp:
        s = r.standard_normal(H * D)
        args += ["--softplus-param", save(tmp_path, "s", s)]
        kw["s"] = f32(s)
    if p:
        args += ["--p", p]
        kw["p"] = float(p)
    if "--eps" in extra:
        kw["eps"] = float(extra[extra.index("--eps") + 1])
    if B == 2:
        args += ["--variant", "flatten"]
    cli(*args)
    o_ref = ref_flatten(f32(q), f32(k), f32(v), Hm, Wm, **kw)
    close(load(tmp_path / "o.npy", (B, N, H, Dv)), o_ref, tol=5e-5, what="focused flatten")


def test_focused_flatten_norm_spans_heads(tmp_path):
    # head 1's magnitude changes head 0's q~ through the shared norms over C: a per-head f_p gives other numbers
    r = rng("ff-heads")
    q = r.standard_normal((1, 16, 2, 3))
    q[..., 1, :] *= 10
    k = r.standard_normal((1, 16, 2, 3))
    v = r.standard_normal((1, 16, 2, 3))
    cli("focused", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k), "--v", save(tmp_path, "v", v),
        "--map", "4x4", "--out", tmp_path / "o.npy")
    o = load(tmp_path / "o.npy", (1, 16, 2, 3))
    close(o, ref_flatten(f32(q), f32(k), f32(v), 4, 4), tol=5e-5, what="flatten all-C norms")


@pytest.mark.parametrize("B,H,D,Dv,Hm,Wm,kk,focus", [
    (1, 1, 1, 1, 1, 1, 0, None),
    (2, 2, 4, 3, 7, 9, 3, None),
    (1, 3, 5, 5, 6, 6, 5, "arr"),
    (1, 2, 3, 2, 3, 63, 3, "num"),
    (1, 2, 4, 4, 5, 5, 0, "arr"),
    (1, 1, 2, 2, 1, 1, 1, None),
    (1, 2, 2, 3, 5, 5, 5, "num"),
])
def test_focused_blog(tmp_path, B, H, D, Dv, Hm, Wm, kk, focus):
    N = Hm * Wm
    r = rng(("fb", B, H, D, Dv, Hm, Wm, kk, focus))
    q = r.standard_normal((B, N, H, D))
    k = r.standard_normal((B, N, H, D))
    v = r.standard_normal((B, N, H, Dv)).astype(np.float32)
    args = ["focused", "--variant", "blog", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k),
            "--v", save(tmp_path, "v", v), "--map", f"{Hm}x{Wm}", "--out", tmp_path / "o.npy"]
    kw = {}
    if kk:
        conv = r.uniform(0.05, 1.0, (H * D, kk, kk))   # positive: well-conditioned denominator
        args += ["--conv", save(tmp_path, "conv", conv)]
        kw["conv"] = f32(conv)
    if focus == "arr":
        f = r.uniform(0.5, 3.0, H)
        args += ["--focus", save(tmp_path, "focus", f)]
        kw["focus"] = f32(f)
    elif focus == "num":
        args += ["--focus", "1.5"]
        kw["focus"] = 1.5
    cli(*args)
    o_ref = ref_blog(f32(q), f32(k), f32(v), Hm, Wm, **kw)
    close(load(tmp_path / "o.npy", (B, N, H, Dv)), o_ref, tol=5e-5, what="focused blog")


# ----------------------------------------------------------------- attn-map (§9)

def map_stats(A, rtol=1e-6):
    A = A / A.sum(1, keepdims=True)
    sv = np.linalg.svd(A, compute_uv=False)
    rank = int((sv > rtol * sv[0]).sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(A > 0, A * np.log(np.where(A > 0, A, 1)), 0).sum(1).mean()
    return rank, ent, sv


def parse_stats(stdout):
    line = [l for l in stdout.splitlines() if l.startswith("rank=")]
    assert len(line) == 1, stdout
    parts = dict(kv.split("=") for kv in line[0].split())
    return int(parts["rank"]), float(parts["entropy"])


def kernel_map(qt, kt, Wtok=None):
    A = qt @ kt.T
    if Wtok is not None:
        A = A * Wtok
    return A / A.sum(1, keepdims=True)


@pytest.mark.parametrize("variant,N,D,extra", [
    ("softmax", 40, 8, []),
    ("softmax", 1, 1, []),
    ("softmax", 30, 4, ["--scale", "2.0"]),
    ("linear", 50, 4, []),
    ("linear", 33, 5, ["--feature", "elu1"]),
    ("mhla", 48, 3, ["--grid", "6x8", "--blocks", "2x3"]),
    ("mhla", 35, 4, ["--blocks", "5", "--feature", "relu1"]),
    ("mhla", 63, 3, ["--grid", "7x9", "--blocks", "2x3"]),
    ("mhla", 60, 3, ["--grid", "3x4x5", "--blocks", "2x2x3", "--feature", "elu1"]),
    ("focused-flatten", 36, 4, ["--map", "6x6"]),
    ("focused-flatten", 35, 3, ["--map", "5x7", "--p", "2", "--softplus-param", "S"]),
    ("focused-blog", 30, 4, ["--map", "5x6"]),
    ("linear", 40, 6, ["--rtol", "0.05"]),
])
def test_attn_map(tmp_path, variant, N, D, extra):
    r = rng(("map", variant, N, D, tuple(extra)))
    q = r.standard_normal((N, D))
    k = r.standard_normal((N, D))
    if variant == "linear" and "--feature" not in extra:
        q, k = np.abs(q) + 0.01, np.abs(k) + 0.01   # default relu: keep every row sum positive
    extra = list(extra)
    args = ["attn-map", "--variant", variant, "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k),
            "--out", tmp_path / "A.npy"]
    qf, kf = f32(q), f32(k)
    opt = {extra[i]: extra[i + 1] for i in range(0, len(extra), 2)}
    if variant == "softmax":
        sc = float(opt.get("--scale", D ** -0.5))
        s = qf @ kf.T * sc
        A = np.exp(s - s.max(1, keepdims=True))
    elif variant == "linear":
        f = opt.get("--feature", "relu")
        A = phi(qf, f) @ phi(kf, f).T
    elif variant == "mhla":
        f = opt.get("--feature", "relu_eps")
        g = dims(opt.get("--grid", str(N)))
        bl = dims(opt["--blocks"])
        M = int(np.prod(bl))
        W = r.uniform(0.05, 1, (M, M))
        args += ["--mixing", save(tmp_path, "W", W)]
        bid, _ = block_ids(g, bl)
        A = (phi(qf, f) @ phi(kf, f).T) * f32(W)[bid][:, bid]
    elif variant == "focused-flatten":
        s = np.zeros(D)
        if opt.get("--softplus-param") == "S":
            s = r.standard_normal(D)
            extra[extra.index("S")] = save(tmp_path, "s", s)
        p = float(opt.get("--p", 3))
        A = flatten_features(qf, f32(s), p) @ flatten_features(kf, f32(s), p).T
    else:  # focused-blog: relu1(q d^-1/2), relu1(k) (identity conv; focus cancels)
        A = phi(qf * D ** -0.5, "relu1") @ phi(kf, "relu1").T
    A = A / A.sum(1, keepdims=True)
    res = cli(*args, *extra)
    got = load(tmp_path / "A.npy", (N, N))
    close(got, A, tol=2e-5, what=f"attn-map {variant}")
    assert np.allclose(got.sum(1), 1, atol=1e-5)
    rtol = float(opt.get("--rtol", 1e-6))
    rank, ent, sv = map_stats(A, rtol)
    R, E = parse_stats(res.stdout)
    # rank: compare only when no singular value sits near the threshold (fp32 map noise)
    near = np.any((sv > rtol * sv[0] / 30) & (sv < rtol * sv[0] * 30))
    if not near:
        assert R == rank, f"rank {R} != {rank} (seed {SEED}); sv/sv1 = {sv / sv[0]}"
    assert abs(E - ent) <= 1e-4 * abs(ent) + 1e-6, f"entropy {E} != {ent} (seed {SEED})"
    if variant == "linear" and "--feature" not in extra:
        assert R <= D


def test_attn_map_low_rank_exact(tmp_path):
    # linear map of D=3 features: rank exactly 3 at the default rtol; entropy of uniform rows = ln N
    r = rng("map-rank")
    q = np.abs(r.standard_normal((64, 3))) + 0.1
    k = np.abs(r.standard_normal((64, 3))) + 0.1
    res = cli("attn-map", "--variant", "linear", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k))
    R, _ = parse_stats(res.stdout)
    assert R == 3
    z = np.zeros((20, 4))
    res = cli("attn-map", "--variant", "softmax", "--q", save(tmp_path, "zq", z), "--k", save(tmp_path, "zk", z))
    R, E = parse_stats(res.stdout)
    assert R == 1 and abs(E - np.log(20)) < 1e-5


# ----------------------------------------------------------------- bad input (CLI.md general rules)

def _bad(tmp_path, args, culprit):
    before = set(os.listdir(tmp_path))
    e = cli(*args, expect=2)
    lines = e.stderr.strip().splitlines()
    assert len(lines) == 1, f"want one stderr line, got: {e.stderr!r}"
    msg = lines[0].lower().replace(" ", "")
    assert any(c.lower().replace(" ", "") in msg for c in culprit), f"{lines[0]!r} does not name any of {culprit}"
    after = set(os.listdir(tmp_path))
    assert after == before, f"files left behind: {after - before}"


def test_bad_inputs(tmp_path):
    r = rng("bad")
    q = save(tmp_path, "q", r.standard_normal((1, 8, 2, 4)))
    k = save(tmp_path, "k", r.standard_normal((1, 8, 2, 4)))
    v = save(tmp_path, "v", r.standard_normal((1, 8, 2, 3)))
    kd = save(tmp_path, "kd", r.standard_normal((1, 8, 2, 5)))
    k3 = save(tmp_path, "k3", r.standard_normal((8, 2, 4)))
    vn = save(tmp_path, "vn", r.standard_normal((1, 7, 2, 3)))
    W4 = save(tmp_path, "W4", np.ones((4, 4)))
    W3h = save(tmp_path, "W3h", np.ones((3, 4, 4)))
    qi = save(tmp_path, "qi", np.ones((1, 8, 2, 4), np.int16))
    txt = tmp_path / "junk.npy"
    txt.write_text("not an npy file\n")
    o = tmp_path / "out.npy"
    cases = [
        (["softmax", "--q", tmp_path / "missing.npy", "--k", k, "--v", v, "--out", o], ["missing.npy", "--q"]),
        (["softmax", "--q", q, "--k", kd, "--v", v, "--out", o], ["kd.npy", "--k", "shape", "[1,8,2,5]"]),
        (["softmax", "--q", q, "--k", k3, "--v", v, "--out", o], ["k3.npy", "--k", "[8, 2, 4]"]),
        (["softmax", "--q", txt, "--k", k, "--v", v, "--out", o], ["junk.npy", "--q"]),
        (["softmax", "--q", qi, "--k", k, "--v", v, "--out", o], ["qi.npy", "--q", "dtype"]),
        (["linear", "--q", q, "--k", k, "--v", vn, "--out", o], ["vn.npy", "--v", "[1, 7, 2, 3]"]),
        (["linear", "--q", q, "--k", k, "--v", v, "--feature", "sigmoid", "--out", o], ["--feature", "sigmoid"]),
        (["linear", "--q", q, "--k", k, "--v", v, "--causal", "--state-in", tmp_path / "nostate", "--out", o],
         ["nostate", "--state-in"]),
        (["linear", "--q", q, "--k", k, "--v", v, "--bogus-option", "--out", o], ["--bogus-option"]),
        (["mhla", "--q", q, "--k", k, "--v", v, "--mixing", W4, "--grid", "3x3", "--blocks", "2x2", "--out", o],
         ["--grid", "3x3"]),
        (["mhla", "--q", q, "--k", k, "--v", v, "--mixing", W4, "--grid", "2x4", "--blocks", "1x3", "--out", o],
         ["--mixing", "--blocks", "W4.npy", "[4, 4]"]),
        (["mhla", "--q", q, "--k", k, "--v", v, "--mixing", W3h, "--blocks", "4", "--out", o],
         ["--mixing", "W3h.npy", "[3, 4, 4]"]),
        (["mhla", "--q", q, "--k", k, "--v", v, "--mixing", W4, "--grid", "2x4", "--blocks", "2", "--out", o],
         ["--blocks", "--grid"]),
        (["mhla", "--q", q, "--k", k, "--v", v, "--mixing", W4, "--blocks", "4", "--normalize", "sum", "--out", o],
         ["--normalize", "sum"]),
        (["mhla-init", "--blocks", "3x5x10", "--init", "gaussian", "--out", o], ["--init", "gaussian"]),
        (["mhla-init", "--blocks", "3xx5", "--out", o], ["--blocks", "3xx5"]),
        (["focused", "--q", q, "--k", k, "--v", v, "--out", o], ["--map"]),
        (["focused", "--q", q, "--k", k, "--v", v, "--map", "3x3", "--out", o], ["--map", "3x3"]),
        (["focused", "--q", q, "--k", k, "--v", v, "--map", "2x4", "--variant", "fancy", "--out", o],
         ["--variant", "fancy"]),
        (["focused", "--q", q, "--k", k, "--v", v, "--map", "2x4", "--conv", W3h, "--out", o], ["--conv", "W3h.npy", "[3, 4, 4]"]),
        # issue 3: an even-sized kernel, or one larger than the map, is bad input
        (["focused", "--q", q, "--k", k, "--v", v, "--map", "2x4",
          "--conv", save(tmp_path, "c3", np.ones((4, 3, 3))), "--out", o], ["--conv", "c3.npy"]),
        (["focused", "--q", q, "--k", k, "--v", v, "--map", "2x4",
          "--conv", save(tmp_path, "c2", np.ones((4, 2, 2))), "--out", o], ["--conv", "c2.npy"]),
        (["focused", "--q", q, "--k", k, "--v", v, "--map", "2x4", "--softplus-param", W4, "--out", o],
         ["--softplus-param", "W4.npy", "[4, 4]"]),
        (["attn-map", "--variant", "softmax", "--q", q, "--k", k, "--out", o], ["q.npy", "--q", "[1, 8, 2, 4]"]),
        (["attn-map", "--variant", "mhla", "--q", save(tmp_path, "q2", np.ones((8, 4))),
          "--k", save(tmp_path, "k2", np.ones((8, 4))), "--out", o], ["--mixing"]),
    ]
    for args, culprit in cases:
        _bad(tmp_path, args, culprit)
    assert not o.exists()


def test_help_lists_options():
    want = {
        "softmax": ["--q", "--k", "--v", "--causal", "--scale", "--out", "--lse"],
        "linear": ["--feature", "--causal", "--normalize", "--no-normalize", "--eps", "--scale", "--chunk",
                   "--state-in", "--state-out", "--out"],
        "mhla": ["--mixing", "--grid", "--blocks", "--feature", "--normalize", "--eps", "--scale", "--causal",
                 "--chunk", "--out"],
        "mhla-init": ["--blocks", "--init", "--out"],
        "focused": ["--variant", "--map", "--conv", "--conv-bias", "--softplus-param", "--p", "--focus", "--eps"],
        "attn-map": ["--q", "--k", "--variant", "--feature", "--rtol", "--mixing", "--grid", "--blocks", "--map"],
    }
    for op, opts in want.items():
        r = subprocess.run([str(BIN), "run", op, "--help"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, (op, r.stderr)
        txt = r.stdout + r.stderr
        for o in opts:
            assert o in txt, f"{op} --help lacks {o}"


# ----------------------------------------------------------------- more edges

@pytest.mark.parametrize("feature,kval", [("identity", 1.0), ("relu", 1.0), ("relu_eps", 1.0 - 1e-6),
                                          ("relu1", 0.0), ("elu1", 0.0)])
def test_feature_values_exact(tmp_path, feature, kval):
    # N=1, D=1, one head per probe value: o = phi(q)*phi(k)*v with phi(k) = 1, v = 1 -> phi(q) itself
    xs = np.array([-20.0, -8.0, -1.0, -1e-3, 0.0, 1e-7, 0.5, 3.0])
    H = len(xs)
    q = xs.reshape(1, 1, H, 1)
    k = np.full((1, 1, H, 1), kval)
    v = np.ones((1, 1, H, 1))
    cli("linear", "--feature", feature, "--no-normalize", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k),
        "--v", save(tmp_path, "v", v), "--out", tmp_path / "o.npy")
    got = load(tmp_path / "o.npy", (1, 1, H, 1)).ravel().astype(np.float64)
    want = phi(f32(xs), feature) * phi(f32(np.array([kval])), feature)[0]
    assert np.allclose(got, want, rtol=1e-5, atol=0), f"{feature}: {got} vs {want}"
    if feature == "elu1":
        assert got[0] > 0   # exp(-20), not 0


def test_long_sequences(tmp_path):
    # N = 1000: chunkwise linear / causal MHLA over many chunks, softmax over many key tiles
    r = rng("long")
    N, H, D, Dv = 1000, 2, 8, 4
    q, k = r.standard_normal((2, 1, N, H, D))
    v = r.standard_normal((1, N, H, Dv))
    qp, kp, vp = save(tmp_path, "q", q), save(tmp_path, "k", k), save(tmp_path, "v", v)
    cli("linear", "--causal", "--q", qp, "--k", kp, "--v", vp, "--out", tmp_path / "ol.npy")
    close(load(tmp_path / "ol.npy", (1, N, H, Dv)), ref_linear(f32(q), f32(k), f32(v), causal=True)[0],
          tol=1e-4, what="linear causal N=1000")
    W = np.tril(r.uniform(0.05, 1, (16, 16)))
    cli("mhla", "--causal", "--normalize", "per_query", "--q", qp, "--k", kp, "--v", vp,
        "--mixing", save(tmp_path, "W", W), "--out", tmp_path / "om.npy")
    close(load(tmp_path / "om.npy", (1, N, H, Dv)),
          ref_mhla_causal(f32(q), f32(k), f32(v), f32(W), 64, normalize="per_query"), tol=1e-4,
          what="mhla causal N=1000")
    cli("softmax", "--causal", "--q", qp, "--k", kp, "--v", vp, "--out", tmp_path / "os.npy",
        "--lse", tmp_path / "ls.npy", "--threads", "1")
    o_ref, l_ref = ref_softmax(f32(q), f32(k), f32(v), D ** -0.5, True)
    close(load(tmp_path / "os.npy", (1, N, H, Dv)), o_ref, tol=1e-4, what="softmax N=1000")
    close(load(tmp_path / "ls.npy", (1, N, H)), l_ref, tol=1e-5, what="lse N=1000")


def test_mhla_causal_decode_equals_forward(tmp_path):
    r = rng("mhla-dec")
    N, H, D, Dv, C = 45, 2, 4, 3, 8
    q, k = r.standard_normal((2, 1, N, H, D))
    v = r.standard_normal((1, N, H, Dv))
    W = np.tril(r.uniform(0.05, 1, (H, 6, 6)), 0)
    common = ["--causal", "--chunk", C, "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k),
              "--v", save(tmp_path, "v", v), "--mixing", save(tmp_path, "W", W)]
    ref = ref_mhla_causal(f32(q), f32(k), f32(v), f32(W), C)
    cli("mhla", *common, "--out", tmp_path / "a.npy")
    cli("mhla", *common, "--decode", "--prefill", "13", "--out", tmp_path / "b.npy")
    close(load(tmp_path / "a.npy", (1, N, H, Dv)), ref, what="causal fwd")
    close(load(tmp_path / "b.npy", (1, N, H, Dv)), ref, what="causal decode")


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_versions(tmp_path, version):
    r = rng(("npyver", version))
    q, k, v = r.standard_normal((3, 1, 9, 2, 3))
    paths = []
    for name, a in (("q", q), ("k", k), ("v", v)):
        p = tmp_path / f"{name}.npy"
        with open(p, "wb") as f:
            np.lib.format.write_array(f, a.astype(np.float32), version=version)
        paths.append(p)
    cli("softmax", "--q", paths[0], "--k", paths[1], "--v", paths[2], "--out", tmp_path / "o.npy")
    close(load(tmp_path / "o.npy", (1, 9, 2, 3)), ref_softmax(f32(q), f32(k), f32(v), 3 ** -0.5, False)[0],
          what=f"npy {version}")


@pytest.mark.parametrize("kind", ["fortran", "bigendian"])
def test_unusual_npy_is_read_right_or_refused(tmp_path, kind):
    # CLI.md promises C order little-endian; anything else must be either read correctly or refused (exit 2)
    r = rng(("npykind", kind))
    q, k, v = r.standard_normal((3, 1, 9, 2, 3))
    qq = np.asfortranarray(q.astype(np.float32)) if kind == "fortran" else q.astype(">f4")
    out = tmp_path / "o.npy"
    res = subprocess.run([str(BIN), "run", "softmax", "--q", str(save(tmp_path, "q", qq)),
                          "--k", str(save(tmp_path, "k", k)), "--v", str(save(tmp_path, "v", v)),
                          "--out", str(out)], capture_output=True, text=True, timeout=60)
    if res.returncode == 0:
        close(load(out, (1, 9, 2, 3)), ref_softmax(f32(q), f32(k), f32(v), 3 ** -0.5, False)[0], what=kind)
    else:
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and not out.exists()


def test_error_keeps_existing_output(tmp_path):
    # the output is written under a temporary name: a failing run leaves an existing --out untouched
    out = tmp_path / "o.npy"
    np.save(out, np.arange(5, dtype=np.float32))
    q = save(tmp_path, "q", np.ones((1, 4, 1, 2)))
    v = save(tmp_path, "v", np.ones((1, 3, 1, 2)))
    cli("linear", "--q", q, "--k", q, "--v", v, "--out", out, expect=2)
    assert np.array_equal(np.load(out), np.arange(5, dtype=np.float32))
    assert sorted(os.listdir(tmp_path)) == ["o.npy", "q.npy", "v.npy"]


def test_mhla_init_single_block(tmp_path):
    # M = 1: one block, W must be finite (no 0/0)
    for init in ("locality", "locality_global", "uniform_causal"):
        res = subprocess.run([str(BIN), "run", "mhla-init", "--blocks", "1", "--init", init, "--out",
                              str(tmp_path / f"{init}.npy")], capture_output=True, text=True, timeout=30)
        if res.returncode == 0:
            W = load(tmp_path / f"{init}.npy", (1, 1))
            assert np.isfinite(W).all(), (init, W)
        else:
            assert res.returncode == 2, res.stderr


# defaults that only show on crafted inputs (relu vs relu_eps, eps, focus, eps beside the mean)

def test_default_features_visible(tmp_path):
    r = rng("deffeat")
    N, H, D, Dv = 12, 2, 3, 2
    q = -np.abs(r.standard_normal((1, N, H, D))) - 0.1   # all negative: relu -> 0, relu_eps -> 1e-6
    k = -np.abs(r.standard_normal((1, N, H, D))) - 0.1
    v = r.standard_normal((1, N, H, Dv))
    qp, kp, vp = save(tmp_path, "q", q), save(tmp_path, "k", k), save(tmp_path, "v", v)
    # linear default relu: exactly 0
    cli("linear", "--q", qp, "--k", kp, "--v", vp, "--out", tmp_path / "a.npy")
    assert not load(tmp_path / "a.npy", (1, N, H, Dv)).any()
    # mhla non-causal default relu_eps, per_query, eps 1e-6: q~ z~ ~ 1e-12 << eps
    W = r.uniform(0.1, 1, (3, 3))
    Wp = save(tmp_path, "W", W)
    cli("mhla", "--q", qp, "--k", kp, "--v", vp, "--mixing", Wp, "--blocks", "3", "--out", tmp_path / "b.npy")
    ref = ref_mhla(f32(q), f32(k), f32(v), f32(W), [N], [3])
    assert np.abs(ref).max() > 0
    close(load(tmp_path / "b.npy", (1, N, H, Dv)), ref, tol=1e-4, what="mhla relu_eps default")
    # causal mhla default relu: exactly 0
    cli("mhla", "--causal", "--q", qp, "--k", kp, "--v", vp, "--mixing", save(tmp_path, "W1", np.ones((1, 1))),
        "--out", tmp_path / "c.npy")
    assert not load(tmp_path / "c.npy", (1, N, H, Dv)).any()


def test_flatten_eps_beside_mean(tmp_path):
    # q, k mostly negative: q~.z/N ~ 1e-12 is far below eps, so (q~S/N)/(q~z/N+eps) != (q~S)/(q~z+eps)
    r = rng("ff-eps")
    N, H, D = 16, 2, 3
    q = -np.abs(r.standard_normal((1, N, H, D))) - 0.1
    k = -np.abs(r.standard_normal((1, N, H, D))) - 0.1
    q[0, ::3, 0, 0] = 0.7
    v = r.standard_normal((1, N, H, D))
    cli("focused", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k), "--v", save(tmp_path, "v", v),
        "--map", "4x4", "--out", tmp_path / "o.npy")
    ref = ref_flatten(f32(q), f32(k), f32(v), 4, 4)
    qt = flatten_features(f32(q).reshape(1, N, H * D), np.zeros(H * D), 3).reshape(1, N, H, D)
    kt = flatten_features(f32(k).reshape(1, N, H * D), np.zeros(H * D), 3).reshape(1, N, H, D)
    S = np.einsum("bnhd,bnhe->bhde", kt, f32(v))
    wrong = np.einsum("bnhd,bhde->bnhe", qt, S) / (np.einsum("bnhd,bhd->bnh", qt, kt.sum(1))[..., None] + 1e-6)
    assert np.abs(wrong - ref).max() > 1e-2 * np.abs(ref).max()   # the check can tell them apart
    close(load(tmp_path / "o.npy", (1, N, H, D)), ref, tol=1e-4, what="flatten eps beside mean")


def test_blog_default_focus_and_eps(tmp_path):
    # tiny conv weights make q~.z ~ eps, where focus (default 2.0) and eps (1e-6) show
    r = rng("blog-focus")
    N, H, D = 6, 2, 2
    q, k, v = r.standard_normal((3, 1, N, H, D))
    conv = np.full((H * D, 1, 1), 2e-8)
    args = ["focused", "--variant", "blog", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k),
            "--v", save(tmp_path, "v", v), "--map", "2x3", "--conv", save(tmp_path, "c", conv)]
    cli(*args, "--out", tmp_path / "o.npy")
    ref = ref_blog(f32(q), f32(k), f32(v), 2, 3, conv=f32(conv))
    ref1 = ref_blog(f32(q), f32(k), f32(v), 2, 3, conv=f32(conv), focus=1.0)
    assert np.abs(ref - ref1).max() > 1e-2 * np.abs(ref).max()
    close(load(tmp_path / "o.npy", (1, N, H, D)), ref, tol=1e-4, what="blog default focus")
    cli(*args, "--eps", "1e-7", "--out", tmp_path / "o2.npy")
    close(load(tmp_path / "o2.npy", (1, N, H, D)), ref_blog(f32(q), f32(k), f32(v), 2, 3, conv=f32(conv), eps=1e-7),
          tol=1e-4, what="blog eps")


def test_linear_state_in_place_and_explicit_normalize(tmp_path):
    r = rng("lin-inplace")
    N, H, D, Dv = 20, 1, 3, 2
    q, k = r.standard_normal((2, 1, N, H, D))
    v = r.standard_normal((1, N, H, Dv))
    st = tmp_path / "st"
    for a, b in ((0, 7), (7, 8), (8, 20)):
        cli("linear", "--causal", "--normalize", "--q", save(tmp_path, "q", q[:, a:b]),
            "--k", save(tmp_path, "k", k[:, a:b]), "--v", save(tmp_path, "v", v[:, a:b]),
            "--out", tmp_path / f"o{a}.npy", *(["--state-in", st] if a else []), "--state-out", st)
    o = np.concatenate([np.load(tmp_path / f"o{a}.npy") for a in (0, 7, 8)], axis=1)
    o_ref, S_ref, z_ref = ref_linear(f32(q), f32(k), f32(v), causal=True)
    close(o, o_ref, what="in-place state chain")
    close(load(tmp_path / "st.S.npy", (1, H, D, Dv)), S_ref, what="chained S")
    close(load(tmp_path / "st.z.npy", (1, H, D)), z_ref, what="chained z")
