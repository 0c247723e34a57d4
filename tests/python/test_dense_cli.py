"""`longattn run softmax` and `longattn run linear` (CLI.md) against PyTorch.

softmax: torch's scaled_dot_product_attention (torch >= 2.0; the private
_scaled_dot_product_attention of 1.13 otherwise) and, for lse and the
bottom-right causal mask with Nq != Nk, an explicit float64 formulation.
linear: a direct float64 torch formulation (causal through cumsum).
Bad input: exit status 2, one line on stderr, no output file left behind.
Run with /usr/bin/python3 -m pytest; the CLI is $LA_BUILD/longattn (default
build/longattn) relative to the repository root.
"""
import os
import pathlib
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = ROOT / os.environ.get("LA_BUILD", "build") / "longattn"

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} not built")

SEED = int(os.environ.get("LA_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")
print(f"# test_dense_cli: LA_TEST_SEED={SEED}")

FEATURES = ["identity", "relu", "relu_eps", "relu1", "elu1"]


def run(*args, expect=0):
    r = subprocess.run([str(BIN), "run", *map(str, args)], capture_output=True, text=True, timeout=120)
    assert r.returncode == expect, f"rc={r.returncode} (want {expect})\nstderr: {r.stderr}"
    return r


def save(tmp, name, a):
    p = tmp / f"{name}.npy"
    np.save(p, a)
    return p


def rel_err(got, ref):
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert not np.isnan(got).any(), "NaN in output (unwritten element?)"
    return np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)


def assert_close(got, ref, tol=1e-5):
    e = rel_err(got, ref)
    assert e < tol, f"rel err {e:.3g} > {tol} (replay with LA_TEST_SEED={SEED})"


# ---------------------------------------------------------------- softmax
def torch_sdpa(q, k, v, causal):
    """q [B,H,N,D] float64 tensors -> [B,H,N,Dv] with torch's SDPA."""
    if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out, _ = torch.nn.functional._scaled_dot_product_attention(q, k, v, None, 0.0, False, causal)
    return out


def softmax_explicit(q, k, v, causal, scale):
    """Plain float64 reference, [B,N,H,D] numpy in; bottom-right causal; GQA."""
    B, Nq, H, D = q.shape
    Nk, Hk = k.shape[1], k.shape[2]
    tq = torch.from_numpy(q).double().permute(0, 2, 1, 3)
    tk = torch.from_numpy(k).double().permute(0, 2, 1, 3).repeat_interleave(H // Hk, 1)
    tv = torch.from_numpy(v).double().permute(0, 2, 1, 3).repeat_interleave(H // Hk, 1)
    s = scale * tq @ tk.transpose(-1, -2)
    if causal:
        i = torch.arange(Nq)[:, None]
        j = torch.arange(Nk)[None, :]
        s = s.masked_fill(j > i + (Nk - Nq), float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)  # rows without keys -> 0
    o = p @ tv
    return o.permute(0, 2, 1, 3).numpy(), lse.permute(0, 2, 1).numpy()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,N,H,Hk,D,Dv", [(1, 1, 1, 1, 16, 16), (2, 65, 4, 2, 32, 24), (1, 300, 2, 2, 64, 64)])
def test_softmax_vs_sdpa(tmp_path, causal, B, N, H, Hk, D, Dv):
    rng = np.random.default_rng(SEED)
    q = rng.standard_normal((B, N, H, D)).astype(np.float32)
    k = rng.standard_normal((B, N, Hk, D))  # float64 input is accepted too
    v = rng.standard_normal((B, N, Hk, Dv)).astype(np.float32)
    args = ["softmax", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k), "--v", save(tmp_path, "v", v),
            "--out", tmp_path / "o.npy", "--lse", tmp_path / "l.npy"]
    run(*args, *(["--causal"] if causal else []))
    o, lse = np.load(tmp_path / "o.npy"), np.load(tmp_path / "l.npy")
    assert o.dtype == np.float32 and o.shape == (B, N, H, Dv) and lse.shape == (B, N, H)
    tq = torch.from_numpy(q).double().permute(0, 2, 1, 3)
    tk = torch.from_numpy(k).double().permute(0, 2, 1, 3).repeat_interleave(H // Hk, 1)
    tv = torch.from_numpy(v).double().permute(0, 2, 1, 3).repeat_interleave(H // Hk, 1)
    ref = torch_sdpa(tq, tk, tv, causal).permute(0, 2, 1, 3).numpy()
    assert_close(o, ref)
    _, ref_lse = softmax_explicit(q, k, v, causal, D ** -0.5)
    assert_close(lse, ref_lse)


@pytest.mark.parametrize("Nq,Nk", [(40, 100), (100, 40), (1, 77)])
def test_softmax_causal_bottom_right(tmp_path, Nq, Nk):
    rng = np.random.default_rng(SEED + 1)
    q = rng.standard_normal((2, Nq, 3, 16)).astype(np.float32)
    k = rng.standard_normal((2, Nk, 3, 16)).astype(np.float32)
    v = rng.standard_normal((2, Nk, 3, 8)).astype(np.float32)
    run("softmax", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k), "--v", save(tmp_path, "v", v),
        "--causal", "--scale", "0.3", "--out", tmp_path / "o.npy", "--lse", tmp_path / "l.npy")
    o, lse = np.load(tmp_path / "o.npy"), np.load(tmp_path / "l.npy")
    ref_o, ref_lse = softmax_explicit(q, k, v, True, 0.3)
    assert_close(o, ref_o)
    dead = np.isneginf(ref_lse)  # rows that see no key (Nq > Nk)
    assert (np.isneginf(lse) == dead).all()
    assert (o[dead] == 0).all() if dead.any() else True
    assert_close(lse[~dead], ref_lse[~dead])


# ----------------------------------------------------------------- linear
def phi(name, x):
    if name == "identity":
        return x
    if name == "relu":
        return torch.relu(x)
    if name == "relu_eps":
        return torch.relu(x) + 1e-6
    if name == "relu1":
        return torch.relu(x) + 1
    if name == "elu1":
        return torch.where(x >= 0, x + 1, torch.exp(torch.clamp(x, max=0)))
    raise ValueError(name)


def linear_torch(q, k, v, feature, causal, normalize, eps=1e-6, scale=1.0, S0=None, z0=None):
    """Direct float64 formulation on [B,N,H,D] numpy arrays; returns o, S, z."""
    tq = scale * phi(feature, torch.from_numpy(q).double())
    tk = phi(feature, torch.from_numpy(k).double())
    tv = torch.from_numpy(v).double()
    B, N, H, D = q.shape
    Dv = v.shape[-1]
    S0 = torch.zeros(B, H, D, Dv, dtype=torch.float64) if S0 is None else torch.from_numpy(S0).double()
    z0 = torch.zeros(B, H, D, dtype=torch.float64) if z0 is None else torch.from_numpy(z0).double()
    if causal:
        kv = torch.einsum("bnhd,bnhe->bnhde", tk, tv).cumsum(1) + S0[:, None]
        z = tk.cumsum(1) + z0[:, None]
        num = torch.einsum("bnhd,bnhde->bnhe", tq, kv)
        den = torch.einsum("bnhd,bnhd->bnh", tq, z)
        S_final, z_final = kv[:, -1], z[:, -1]
    else:
        S_final = torch.einsum("bnhd,bnhe->bhde", tk, tv)
        z_final = tk.sum(1)
        num = torch.einsum("bnhd,bhde->bnhe", tq, S_final)
        den = torch.einsum("bnhd,bhd->bnh", tq, z_final)
    o = num / (den[..., None] + eps) if normalize else num
    return o.numpy(), S_final.numpy(), z_final.numpy()


def linear_inputs(seed, shape, Dv, feature, normalize):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(shape).astype(np.float32)
    k = rng.standard_normal(shape).astype(np.float32)
    if feature == "identity" and normalize:  # keep the denominator away from cancellation
        q, k = np.abs(q) + 0.1, np.abs(k) + 0.1
    v = rng.standard_normal(shape[:3] + (Dv,)).astype(np.float32)
    return q, k, v


@pytest.mark.parametrize("feature", FEATURES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("normalize", [True, False])
def test_linear_vs_torch(tmp_path, feature, causal, normalize):
    q, k, v = linear_inputs(SEED + 2, (2, 150, 3, 16), 12, feature, normalize)
    args = ["linear", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k), "--v", save(tmp_path, "v", v),
            "--feature", feature, "--scale", "0.5", "--chunk", "32", "--out", tmp_path / "o.npy"]
    args += ["--causal"] if causal else []
    args += [] if normalize else ["--no-normalize"]
    run(*args)
    ref, _, _ = linear_torch(q, k, v, feature, causal, normalize, scale=0.5)
    assert_close(np.load(tmp_path / "o.npy"), ref)


def test_linear_defaults_and_eps(tmp_path):
    q, k, v = linear_inputs(SEED + 3, (1, 64, 2, 8), 8, "relu", True)
    paths = [save(tmp_path, n, a) for n, a in (("q", q), ("k", k), ("v", v))]
    run("linear", "--q", paths[0], "--k", paths[1], "--v", paths[2], "--out", tmp_path / "o.npy")
    ref, _, _ = linear_torch(q, k, v, "relu", False, True)  # defaults: relu, normalize, eps 1e-6, scale 1
    assert_close(np.load(tmp_path / "o.npy"), ref)
    run("linear", "--q", paths[0], "--k", paths[1], "--v", paths[2], "--eps", "10", "--out", tmp_path / "o.npy")
    ref, _, _ = linear_torch(q, k, v, "relu", False, True, eps=10.0)
    assert_close(np.load(tmp_path / "o.npy"), ref)


@pytest.mark.parametrize("normalize", [True, False])
def test_linear_state_files(tmp_path, normalize):
    """prefill [0,a) writing the state, continue [a,N) from it (same PREFIX
    in and out) == one pass; the state files hold S [B,H,D,Dv] and z [B,H,D]."""
    q, k, v = linear_inputs(SEED + 4, (2, 200, 2, 12), 10, "elu1", normalize)
    a = 77
    norm = [] if normalize else ["--no-normalize"]
    P = tmp_path / "state"
    for name, sl in (("a", slice(0, a)), ("b", slice(a, None))):
        save(tmp_path, "q" + name, q[:, sl])
        save(tmp_path, "k" + name, k[:, sl])
        save(tmp_path, "v" + name, v[:, sl])
    run("linear", "--q", tmp_path / "qa.npy", "--k", tmp_path / "ka.npy", "--v", tmp_path / "va.npy",
        "--feature", "elu1", "--causal", *norm, "--state-out", P, "--out", tmp_path / "oa.npy")
    S_a, z_a = np.load(f"{P}.S.npy"), np.load(f"{P}.z.npy")
    assert S_a.shape == (2, 2, 12, 10) and z_a.shape == (2, 2, 12) and S_a.dtype == np.float32
    _, rS, rz = linear_torch(q[:, :a], k[:, :a], v[:, :a], "elu1", True, normalize)
    assert_close(S_a, rS)
    assert_close(z_a, rz)
    run("linear", "--q", tmp_path / "qb.npy", "--k", tmp_path / "kb.npy", "--v", tmp_path / "vb.npy",
        "--feature", "elu1", "--causal", *norm, "--chunk", "16", "--state-in", P, "--state-out", P,
        "--out", tmp_path / "ob.npy")
    o = np.concatenate([np.load(tmp_path / "oa.npy"), np.load(tmp_path / "ob.npy")], axis=1)
    ref, rS, rz = linear_torch(q, k, v, "elu1", True, normalize)
    assert_close(o, ref)
    assert_close(np.load(f"{P}.S.npy"), rS)
    assert_close(np.load(f"{P}.z.npy"), rz)
    # an explicit state from elsewhere (float64 files are accepted)
    rng = np.random.default_rng(SEED + 5)
    S0 = rng.standard_normal((2, 2, 12, 10))
    z0 = 5 + rng.random((2, 2, 12))
    np.save(tmp_path / "s0.S.npy", S0)
    np.save(tmp_path / "s0.z.npy", z0)
    run("linear", "--q", tmp_path / "qb.npy", "--k", tmp_path / "kb.npy", "--v", tmp_path / "vb.npy",
        "--feature", "elu1", "--causal", *norm, "--state-in", tmp_path / "s0", "--out", tmp_path / "o0.npy")
    ref, _, _ = linear_torch(q[:, a:], k[:, a:], v[:, a:], "elu1", True, normalize, S0=S0, z0=z0)
    assert_close(np.load(tmp_path / "o0.npy"), ref)


# -------------------------------------------------------------- bad input
def expect_bad(tmp_path, *args, outputs=("o.npy",)):
    before = set(os.listdir(tmp_path))
    r = run(*args, expect=2)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0], f"want one line on stderr, got {r.stderr!r}"
    after = set(os.listdir(tmp_path))
    assert after == before, f"files left behind: {after - before}"
    for o in outputs:
        assert not (tmp_path / o).exists()
    return lines[0]


def test_bad_inputs(tmp_path):
    rng = np.random.default_rng(SEED + 6)
    q = save(tmp_path, "q", rng.standard_normal((1, 8, 2, 4)).astype(np.float32))
    k = save(tmp_path, "k", rng.standard_normal((1, 8, 2, 4)).astype(np.float32))
    v = save(tmp_path, "v", rng.standard_normal((1, 8, 2, 3)).astype(np.float32))
    k5 = save(tmp_path, "k5", rng.standard_normal((1, 8, 2, 5)).astype(np.float32))
    v7 = save(tmp_path, "v7", rng.standard_normal((1, 7, 2, 3)).astype(np.float32))
    r3 = save(tmp_path, "r3", rng.standard_normal((8, 2, 4)).astype(np.float32))
    i32 = save(tmp_path, "i32", np.zeros((1, 8, 2, 4), dtype=np.int32))
    (tmp_path / "junk.npy").write_bytes(b"\x93NUMPY\x01\x00garbage that is not a header")
    (tmp_path / "trunc.npy").write_bytes(open(q, "rb").read()[:-10])
    out = tmp_path / "o.npy"
    lse = tmp_path / "l.npy"
    for op in ("softmax", "linear"):
        msg = expect_bad(tmp_path, op, "--k", k, "--v", v, "--out", out)
        assert "--q" in msg
        assert "junk.npy" in expect_bad(tmp_path, op, "--q", tmp_path / "junk.npy", "--k", k, "--v", v, "--out", out)
        expect_bad(tmp_path, op, "--q", tmp_path / "trunc.npy", "--k", k, "--v", v, "--out", out)
        expect_bad(tmp_path, op, "--q", tmp_path / "missing.npy", "--k", k, "--v", v, "--out", out)
        expect_bad(tmp_path, op, "--q", r3, "--k", k, "--v", v, "--out", out)
        expect_bad(tmp_path, op, "--q", i32, "--k", k, "--v", v, "--out", out)
        assert "k" in expect_bad(tmp_path, op, "--q", q, "--k", k5, "--v", v, "--out", out)
        assert "v" in expect_bad(tmp_path, op, "--q", q, "--k", k, "--v", v7, "--out", out)
        expect_bad(tmp_path, op, "--q", q, "--k", k, "--v", v)  # no --out
        expect_bad(tmp_path, op, "--q", q, "--k", k, "--v", v, "--out", out, "--bogus", "1")
        expect_bad(tmp_path, op, "--q", q, "--k", k, "--v", v, "--out", out, "--scale", "abc")
        expect_bad(tmp_path, op, "--q", q, "--k", k, "--v", v, "--out", out, "--device", "tpu")
    # softmax: lse must not be written either; GQA heads that do not divide
    k3 = save(tmp_path, "k3", rng.standard_normal((1, 8, 3, 4)).astype(np.float32))
    v3 = save(tmp_path, "v3", rng.standard_normal((1, 8, 3, 3)).astype(np.float32))
    assert "GQA" in expect_bad(tmp_path, "softmax", "--q", q, "--k", k3, "--v", v3, "--out", out, "--lse", lse,
                               outputs=("o.npy", "l.npy"))
    # linear options
    base = ["linear", "--q", q, "--k", k, "--v", v, "--out", out]
    assert "feature" in expect_bad(tmp_path, *base, "--feature", "gelu")
    assert "eps" in expect_bad(tmp_path, *base, "--eps", "-1")
    assert "chunk" in expect_bad(tmp_path, *base, "--causal", "--chunk", "0")
    assert "chunk" in expect_bad(tmp_path, *base, "--causal", "--chunk", "x")
    assert "causal" in expect_bad(tmp_path, *base, "--state-out", tmp_path / "st")
    assert "causal" in expect_bad(tmp_path, *base, "--state-in", tmp_path / "st")
    expect_bad(tmp_path, *base, "--causal", "--state-in", tmp_path / "nostate")
    np.save(tmp_path / "bad.S.npy", np.zeros((1, 2, 4, 4), np.float32))  # Dv should be 3
    np.save(tmp_path / "bad.z.npy", np.zeros((1, 2, 4), np.float32))
    assert "bad.S.npy" in expect_bad(tmp_path, *base, "--causal", "--state-in", tmp_path / "bad",
                                     "--state-out", tmp_path / "new")
    assert not (tmp_path / "new.S.npy").exists()


def test_help():
    for op in ("softmax", "linear"):
        r = run(op, "--help")
        assert "--out" in r.stdout and "--q" in r.stdout
    r = run("linear", "--help")
    for opt in ("--feature", "--causal", "--normalize", "--eps", "--scale", "--chunk", "--state-in", "--state-out"):
        assert opt in r.stdout
