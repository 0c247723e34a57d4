"""`longattn run OP --backward` (docs/CLI.md, "Backward") as a black box:
gradients written by the CLI against float64 plain-PyTorch autograd of the
same formula (the references of test_py_backward.py), for softmax, linear
(with the initial state and the final-state gradient), mhla (non-causal and
--causal), focused (flatten and blog) and sparse-attn; bad input: exit 2,
one line on stderr naming the option, no output file left behind.
"""
import os
import pathlib
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_py_backward import (ref_focused, ref_linear, ref_mhla, ref_mhla_causal,  # noqa: E402
                              ref_softmax, ref_sparse)

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = ROOT / os.environ.get("LA_BUILD", "build") / "longattn"
pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} not built")


def run(*args, expect=0):
    r = subprocess.run([str(BIN), "run", *map(str, args)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == expect, f"rc={r.returncode} (want {expect})\nstderr: {r.stderr}"
    return r


def save(tmp, name, a):
    p = tmp / f"{name}.npy"
    np.save(p, np.ascontiguousarray(a))
    return p


def frob(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert np.isfinite(got).all()
    return np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300)


def grads_of(fn, inputs, g):
    """float64 autograd gradients of fn(*inputs) against g."""
    xs = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in inputs]
    out = fn(*xs)
    outs, gs = (out, g) if isinstance(out, tuple) else ((out,), (g,))
    torch.autograd.backward(outs, [torch.tensor(x, dtype=torch.float64) for x in gs])
    return [x.grad.numpy() for x in xs]


rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))


def randn(*s):
    return rng.standard_normal(s).astype(np.float32)


def away(x):
    return np.where(np.abs(x) < 0.05, x + 0.1 * np.sign(x + 1e-9), x).astype(np.float32)


@pytest.mark.parametrize("causal", [False, True])
def test_softmax_backward(tmp_path, causal):
    q, k, v, g = randn(1, 33, 4, 16), randn(1, 40, 2, 16), randn(1, 40, 2, 8), randn(1, 33, 4, 8)
    args = ["softmax", "--backward", "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k),
            "--v", save(tmp_path, "v", v), "--dout", save(tmp_path, "g", g)]
    if causal:
        args.append("--causal")
    run(*args, "--grad-q", tmp_path / "dq.npy", "--grad-k", tmp_path / "dk.npy",
        "--grad-v", tmp_path / "dv.npy", "--out", tmp_path / "o.npy")
    ref = grads_of(lambda q, k, v: ref_softmax(q, k, v, causal=causal), (q, k, v), g)
    for name, r in zip(("dq", "dk", "dv"), ref):
        assert frob(np.load(tmp_path / f"{name}.npy"), r) <= 1e-4, name
    assert np.load(tmp_path / "o.npy").shape == (1, 33, 4, 8)


def test_linear_causal_state_backward(tmp_path):
    B, N, H, D, Dv = 1, 70, 2, 8, 5
    q, k, v, g = away(randn(B, N, H, D)), away(randn(B, N, H, D)), randn(B, N, H, Dv), randn(B, N, H, Dv)
    S0, z0 = randn(B, H, D, Dv), (5 + rng.random((B, H, D))).astype(np.float32)
    gS, gz = randn(B, H, D, Dv), randn(B, H, D)
    np.save(tmp_path / "st.S.npy", S0), np.save(tmp_path / "st.z.npy", z0)
    np.save(tmp_path / "ds.S.npy", gS), np.save(tmp_path / "ds.z.npy", gz)
    run("linear", "--backward", "--causal", "--feature", "elu1", "--chunk", "16",
        "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k), "--v", save(tmp_path, "v", v),
        "--dout", save(tmp_path, "g", g), "--state-in", tmp_path / "st", "--dstate-out",
        tmp_path / "ds", "--grad-q", tmp_path / "dq.npy", "--grad-k", tmp_path / "dk.npy",
        "--grad-v", tmp_path / "dv.npy", "--grad-state-in", tmp_path / "gs")
    fn = lambda q, k, v, S, z: ref_linear(q, k, v, feature="elu1", causal=True, S0=S, z0=z)
    ref = grads_of(fn, (q, k, v, S0, z0), (g, gS, gz))
    got = [np.load(tmp_path / f) for f in ("dq.npy", "dk.npy", "dv.npy", "gs.S.npy", "gs.z.npy")]
    for a, r in zip(got, ref):
        assert frob(a, r) <= 1e-4


@pytest.mark.parametrize("causal", [False, True])
def test_mhla_backward(tmp_path, causal):
    B, H, D, Dv = 1, 2, 8, 6
    if causal:
        N, M, extra = 50, 4, ["--causal", "--chunk", "16"]
        fn = lambda q, k, v, W: ref_mhla_causal(q, k, v, W, chunk=16)
    else:
        N, M, extra = 48, 6, ["--grid", "6x8", "--blocks", "2x3"]
        fn = lambda q, k, v, W: ref_mhla(q, k, v, W, (6, 8), (2, 3))
    q, k, v, g = away(randn(B, N, H, D)), away(randn(B, N, H, D)), randn(B, N, H, Dv), randn(B, N, H, Dv)
    W = (0.1 + rng.random((H, M, M))).astype(np.float32)
    run("mhla", "--backward", *extra, "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k),
        "--v", save(tmp_path, "v", v), "--mixing", save(tmp_path, "w", W),
        "--dout", save(tmp_path, "g", g), "--grad-q", tmp_path / "dq.npy",
        "--grad-k", tmp_path / "dk.npy", "--grad-v", tmp_path / "dv.npy",
        "--grad-mixing", tmp_path / "dw.npy")
    ref = grads_of(fn, (q, k, v, W), g)
    for name, r in zip(("dq", "dk", "dv", "dw"), ref):
        assert frob(np.load(tmp_path / f"{name}.npy"), r) <= 1e-4, name


@pytest.mark.parametrize("variant", ["flatten", "blog"])
def test_focused_backward(tmp_path, variant):
    B, Hm, Wm, H, D = 1, 5, 6, 2, 4
    N = Hm * Wm
    q, k = away(randn(B, N, H, D)), away(randn(B, N, H, D))
    Dv = D if variant == "flatten" else D + 1
    v, g = randn(B, N, H, Dv), randn(B, N, H, Dv)
    args = ["focused", "--backward", "--variant", variant, "--map", f"{Hm}x{Wm}",
            "--q", save(tmp_path, "q", q), "--k", save(tmp_path, "k", k),
            "--v", save(tmp_path, "v", v), "--dout", save(tmp_path, "g", g),
            "--grad-q", tmp_path / "dq.npy", "--grad-k", tmp_path / "dk.npy",
            "--grad-v", tmp_path / "dv.npy", "--grad-conv", tmp_path / "dc.npy"]
    if variant == "flatten":
        conv, bias, sp = 0.3 * randn(D, 3, 3), 0.3 * randn(D), 0.5 * randn(H * D)
        args += ["--conv", save(tmp_path, "c", conv), "--conv-bias", save(tmp_path, "b", bias),
                 "--softplus-param", save(tmp_path, "s", sp), "--grad-conv-bias",
                 tmp_path / "db.npy", "--grad-softplus-param", tmp_path / "ds.npy"]
        fn = lambda q, k, v, c, b, s: ref_focused(q, k, v, map=(Hm, Wm), conv=c, conv_bias=b,
                                                  softplus_param=s)
        inputs, names = (q, k, v, conv, bias, sp), ("dq", "dk", "dv", "dc", "db", "ds")
    else:
        conv = np.abs(0.3 * randn(H * D, 3, 3)) + 0.05
        focus = (1 + 0.3 * rng.random(H)).astype(np.float32)
        args += ["--conv", save(tmp_path, "c", conv), "--focus", save(tmp_path, "f", focus),
                 "--grad-focus", tmp_path / "df.npy"]
        fn = lambda q, k, v, c, f: ref_focused(q, k, v, variant="blog", map=(Hm, Wm), conv=c, focus=f)
        inputs, names = (q, k, v, conv, focus), ("dq", "dk", "dv", "dc", "df")
    run(*args)
    ref = grads_of(fn, inputs, g)
    for name, r in zip(names, ref):
        tol = 5e-3 if name == "df" else 1e-4  # focus: an eps-sized gradient
        assert frob(np.load(tmp_path / f"{name}.npy"), r) <= tol, name


def test_sparse_backward(tmp_path):
    T, Hq, Dqk, dv, L, K = 20, 4, 32, 24, 50, 12
    q, kv, g = randn(T, Hq, Dqk), randn(L, Dqk), randn(T, Hq, dv)
    idx = rng.integers(0, L, (T, K)).astype(np.int32)
    idx[0, 0], idx[1, :] = -1, -1
    run("sparse-attn", "--backward", "--dv", dv, "--q", save(tmp_path, "q", q),
        "--kv", save(tmp_path, "kv", kv), "--idx", save(tmp_path, "i", idx),
        "--dout", save(tmp_path, "g", g), "--grad-q", tmp_path / "dq.npy",
        "--grad-kv", tmp_path / "dkv.npy")
    it = torch.from_numpy(idx)
    ref = grads_of(lambda q, kv: ref_sparse(q, kv, it, dv=dv), (q, kv), g)
    assert frob(np.load(tmp_path / "dq.npy"), ref[0]) <= 1e-4
    assert frob(np.load(tmp_path / "dkv.npy"), ref[1]) <= 1e-4


def test_backward_bad_input(tmp_path):
    q, v = randn(1, 8, 2, 4), randn(1, 8, 2, 3)
    base = ["softmax", "--backward", "--q", save(tmp_path, "q", q), "--k", tmp_path / "q.npy",
            "--v", save(tmp_path, "v", v)]
    bad = save(tmp_path, "bad", randn(1, 8, 2, 5))
    r = run(*base, "--dout", bad, "--grad-q", tmp_path / "dq.npy", expect=2)
    assert "--dout" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run(*base, "--dout", save(tmp_path, "g", randn(1, 8, 2, 3)), expect=2)
    assert "gradient output" in r.stderr
    r = run("topk", "--backward", expect=2)
    assert "--backward" in r.stderr
    r = run("focused", "--backward", "--map", "2x4", "--q", tmp_path / "q.npy", "--k",
            tmp_path / "q.npy", "--v", tmp_path / "q.npy", "--dout", tmp_path / "q.npy",
            "--grad-conv", tmp_path / "dc.npy", expect=2)
    assert "--grad-conv" in r.stderr
    assert not (tmp_path / "dq.npy").exists() and not (tmp_path / "dc.npy").exists()
    assert not list(tmp_path.glob("*.tmp*"))


def test_backward_outputs_checked_before_computing(tmp_path):
    """The gradient outputs go through the same output checks as the forward's
    (docs/CLI.md): one naming an input is refused before anything is computed,
    and the input is left as it was."""
    q, v, g = randn(1, 8, 2, 4), randn(1, 8, 2, 3), randn(1, 8, 2, 3)
    qp = save(tmp_path, "q", q)
    before = qp.read_bytes()
    r = run("softmax", "--backward", "--q", qp, "--k", qp, "--v", save(tmp_path, "v", v),
            "--dout", save(tmp_path, "g", g), "--grad-q", qp, expect=2)
    assert "--grad-q" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert qp.read_bytes() == before
    r = run("softmax", "--backward", "--q", qp, "--k", qp, "--v", tmp_path / "v.npy",
            "--dout", tmp_path / "g.npy", "--grad-q", tmp_path / "d.npy", "--grad-k",
            tmp_path / "d.npy", expect=2)
    assert "--grad-k" in r.stderr or "--grad-q" in r.stderr
    assert not (tmp_path / "d.npy").exists()
