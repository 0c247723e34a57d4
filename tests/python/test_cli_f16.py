"""`longattn run` with float16 .npy files ('<f2'): read as float16, the
operator's output and the gradients of float16 inputs written as float16;
lse, states and d_mixing stay float32. Each run is compared with the same
run on float32 copies of the inputs (the CPU computes in fp32 either way):
within twice the error of that result rounded to float16, plus 2e-5.
The CLI is $LA_BUILD/longattn (default build/longattn)."""
import os
import pathlib
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = ROOT / os.environ.get("LA_BUILD", "build") / "longattn"

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} not built")


def run(*args, expect=0):
    r = subprocess.run([str(BIN), "run", *map(str, args)], capture_output=True, text=True, timeout=120)
    assert r.returncode == expect, f"rc={r.returncode} (want {expect})\nstderr: {r.stderr}"
    return r


def err(a, ref):
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return np.abs(a - ref).max() / max(np.abs(ref).max(), 1e-30)


def check(o16, o32, what):
    assert o16.dtype == np.float16, what
    assert np.isfinite(o16).all(), what
    bound = 2 * err(o32.astype(np.float16), o32) + 2e-5
    assert err(o16, o32) <= bound, (what, err(o16, o32), bound)


def inputs(tmp, shapes, seed):
    rng = np.random.default_rng(seed)
    paths = {}
    for name, shape in shapes.items():
        a = rng.standard_normal(shape).astype(np.float16)
        np.save(tmp / f"{name}16.npy", a)
        np.save(tmp / f"{name}32.npy", a.astype(np.float32))
        paths[name] = (tmp / f"{name}16.npy", tmp / f"{name}32.npy")
    return paths


@pytest.mark.parametrize("op", ["softmax", "linear", "focused"])
def test_forward_f16(tmp_path, op):
    sh = {"q": (1, 63, 2, 16), "k": (1, 63, 2, 16), "v": (1, 63, 2, 16)}
    p = inputs(tmp_path, sh, 1)
    extra = {"softmax": ["--causal", "--lse", "{}lse.npy"], "linear": ["--causal"],
             "focused": ["--map", "7x9"]}[op]
    outs = []
    for i, tag in enumerate(("16", "32")):
        args = ["--q", p["q"][i], "--k", p["k"][i], "--v", p["v"][i], "--out", tmp_path / f"o{tag}.npy"]
        run(op, *args, *[a.format(tmp_path / tag) if "{}" in str(a) else a for a in extra])
        outs.append(np.load(tmp_path / f"o{tag}.npy"))
    check(outs[0], outs[1], op)
    assert outs[1].dtype == np.float32
    if op == "softmax":
        l16, l32 = np.load(tmp_path / "16lse.npy"), np.load(tmp_path / "32lse.npy")
        assert l16.dtype == np.float32 and err(l16, l32) <= 1e-5


def test_softmax_backward_f16(tmp_path):
    sh = {"q": (1, 33, 2, 16), "k": (1, 40, 1, 16), "v": (1, 40, 1, 8), "g": (1, 33, 2, 8)}
    p = inputs(tmp_path, sh, 2)
    grads = []
    for i, tag in enumerate(("16", "32")):
        run("softmax", "--backward", "--q", p["q"][i], "--k", p["k"][i], "--v", p["v"][i],
            "--dout", p["g"][i], "--grad-q", tmp_path / f"dq{tag}.npy", "--grad-k",
            tmp_path / f"dk{tag}.npy", "--grad-v", tmp_path / f"dv{tag}.npy")
        grads.append([np.load(tmp_path / f"d{x}{tag}.npy") for x in "qkv"])
    # the float16 run's forward output is float16 (read by the backward), the
    # float32 run's is float32: one rounding apart, so twice the bound
    for a, b, name in zip(grads[0], grads[1], "qkv"):
        assert a.dtype == np.float16 and np.isfinite(a).all()
        assert err(a, b) <= 4 * err(b.astype(np.float16), b) + 2e-5, name


def test_f16_npy_header_and_dtype_messages(tmp_path):
    a = np.zeros((1, 4, 1, 8), np.float16)
    np.save(tmp_path / "q.npy", a)
    np.save(tmp_path / "i.npy", np.zeros((1, 4, 1, 8), np.int32))
    r = run("softmax", "--q", tmp_path / "q.npy", "--k", tmp_path / "q.npy", "--v", tmp_path / "i.npy",
            "--out", tmp_path / "o.npy", expect=2)
    assert "float16" in r.stderr and "int32" in r.stderr and "--v" in r.stderr
    assert not (tmp_path / "o.npy").exists()
    np.save(tmp_path / "c.npy", np.zeros((1, 4, 1, 8), np.complex64))
    r = run("softmax", "--q", tmp_path / "c.npy", "--k", tmp_path / "q.npy", "--v", tmp_path / "q.npy",
            "--out", tmp_path / "o.npy", expect=2)
    assert "'<f2'" in r.stderr and "not supported" in r.stderr
