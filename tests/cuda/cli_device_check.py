"""`longattn run OP --device cuda` against `--device cpu` on the same .npy
inputs, for every OP with a CUDA kernel (run on the GPU machine):
    python3 tests/cuda/cli_device_check.py BUILD_DIR
Prints one line per case and a closing "N passed, N failed"."""
import os
import subprocess
import sys
import tempfile

import numpy as np

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
EXE = os.path.join(BUILD, "longattn")
rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
passed = failed = 0


def save(d, name, a):
    p = os.path.join(d, name + ".npy")
    np.save(p, a)
    return p


def run(args):
    r = subprocess.run([EXE, "run", *args], capture_output=True, text=True, timeout=300)
    return r.returncode, r.stderr.strip()


def case(title, op, inputs, opts, outs, tol, exact=()):
    global passed, failed
    with tempfile.TemporaryDirectory() as d:
        args = [op]
        for k, v in inputs.items():
            args += ["--" + k, save(d, k, v)]
        args += opts
        res = {}
        for dev in ("cpu", "cuda"):
            a = list(args)
            for o in outs:
                a += ["--" + o, os.path.join(d, f"{o}_{dev}.npy")]
            rc, err = run(a + ["--device", dev])
            if rc != 0:
                print(f"FAIL {title}: --device {dev} exit {rc}: {err}")
                failed += 1
                return
            res[dev] = {o: np.load(os.path.join(d, f"{o}_{dev}.npy")) for o in outs}
        worst = 0.0
        ok = True
        for o in outs:
            c, g = res["cpu"][o], res["cuda"][o]
            if o in exact:
                same = np.array_equal(c, g)
                ok &= same
                worst = max(worst, 0.0 if same else 1.0)
                continue
            if not np.all(np.isfinite(g) == np.isfinite(c)):
                ok = False
                worst = float("inf")
                continue
            m = np.isfinite(c)
            e = np.max(np.abs(g[m] - c[m])) / max(np.max(np.abs(c[m])), 1e-30) if m.any() else 0.0
            worst = max(worst, float(e))
            ok &= e <= tol
        print(f"{'ok  ' if ok else 'FAIL'} {title}: max rel diff cuda vs cpu {worst:.2e} (tol {tol:g})")
        passed += ok
        failed += not ok


f32 = np.float32
B, N, H, D = 2, 1000, 3, 64
q, k, v = (rng.standard_normal((B, N, H, D)).astype(f32) for _ in range(3))
v2 = rng.standard_normal((B, N, H, 48)).astype(f32)
case("softmax non-causal", "softmax", dict(q=q, k=k, v=v2), [], ["out", "lse"], 1e-5)
case("softmax causal Nq<Nk", "softmax", dict(q=q[:, :300], k=k, v=v2), ["--causal"], ["out", "lse"], 1e-5)
case("linear non-causal", "linear", dict(q=q, k=k, v=v2), [], ["out"], 1e-5)
case("linear causal elu1", "linear", dict(q=q, k=k, v=v2), ["--causal", "--feature", "elu1"], ["out"], 1e-5)
g = (25, 40)
qi, ki, vi = (rng.standard_normal((1, g[0] * g[1], 4, 32)).astype(f32) for _ in range(3))
with tempfile.TemporaryDirectory() as d:
    w = os.path.join(d, "w.npy")
    subprocess.run([EXE, "run", "mhla-init", "--blocks", "5x4", "--out", w], check=True)
    W = np.load(w)
case("mhla 2-D 25x40 blocks 5x4", "mhla", dict(q=qi, k=ki, v=vi, mixing=W), ["--grid", "25x40", "--blocks", "5x4"], ["out"], 1e-5)
Wc = np.tril(rng.uniform(0.1, 1, (16, 16))).astype(f32)
case("mhla causal C=64", "mhla", dict(q=q, k=k, v=v2, mixing=Wc), ["--causal"], ["out"], 1e-5)
case("focused flatten 25x40", "focused", dict(q=qi, k=ki, v=vi, conv=rng.standard_normal((32, 5, 5)).astype(f32) * 0.1),
     ["--map", "25x40"], ["out"], 1e-5)
T, HI, dI, L = 64, 16, 64, 3000
iq = rng.standard_normal((T, HI, dI)).astype(f32)
ik = rng.standard_normal((L, dI)).astype(f32)
iw = rng.standard_normal((T, HI)).astype(f32)
case("dsa topk 256", "dsa", dict(q=iq, k=ik, w=iw), ["--topk", "256"], ["out", "scores"], 1e-5, exact=("out",))
case("hisa B=64 m=8", "hisa", dict(q=iq, k=ik, w=iw), ["--topk", "256", "--block", "64", "--block-topk", "8"], ["out"], 0, exact=("out",))
case("blocksparse B=64", "blocksparse", dict(q=iq, k=ik, w=iw), ["--topk", "256", "--block", "64"], ["out"], 0, exact=("out",))
Tq, Hq, Dqk, Lk = 32, 16, 576, 2000
idx = rng.integers(-1, Lk + 5, (Tq, 300)).astype(np.int32)
case("sparse-attn 576/512", "sparse-attn", dict(q=rng.standard_normal((Tq, Hq, Dqk)).astype(f32),
     kv=rng.standard_normal((Lk, Dqk)).astype(f32), idx=idx), [], ["out", "lse"], 1e-5)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
