"""Randomized bad-input sweep of `longattn run`: perturbed shapes, dtypes,
ranks, option values and missing files across every OP. The CLI must never
crash: exit 0 (valid after all) or 2 with one line on stderr and no output
file left behind. Bounded: a fixed number of invocations."""
import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXE = os.path.join(ROOT, os.environ.get("LA_BUILD", "build"), "longattn")
SEED = int(os.environ.get("LA_TEST_SEED", np.random.SeedSequence().entropy % (2**32)))

# a valid base call per OP: {option: shape} for arrays, plus scalar options
BASE = {
    "softmax": ({"q": (1, 9, 2, 4), "k": (1, 9, 2, 4), "v": (1, 9, 2, 3)}, []),
    "linear": ({"q": (1, 9, 2, 4), "k": (1, 9, 2, 4), "v": (1, 9, 2, 3)}, ["--causal"]),
    "mhla": ({"q": (1, 12, 2, 4), "k": (1, 12, 2, 4), "v": (1, 12, 2, 3), "mixing": (6, 6)},
             ["--grid", "3x4", "--blocks", "3x2"]),
    "focused": ({"q": (1, 12, 2, 4), "k": (1, 12, 2, 4), "v": (1, 12, 2, 4)}, ["--map", "3x4"]),
    "dsa": ({"q": (5, 2, 4), "k": (20, 4), "w": (5, 2)}, ["--topk", "8"]),
    "hisa": ({"q": (5, 2, 4), "k": (20, 4), "w": (5, 2)}, ["--topk", "8", "--block", "4", "--block-topk", "2"]),
    "blocksparse": ({"q": (5, 2, 4), "k": (20, 4), "w": (5, 2)}, ["--topk", "8", "--block", "4"]),
    "sparse-attn": ({"q": (3, 2, 8), "kv": (20, 8), "idx": (3, 5)}, ["--dv", "4"]),
    "attn-map": ({"q": (12, 4), "k": (12, 4)}, ["--variant", "linear"]),
}
BAD_VALUES = ["0", "-1", "nan", "inf", "1e40", "abc", "", "3x", "x3", "0x4", "99999999999999999999", "2x2x2x2"]


def mutate(r, shapes, opts):
    shapes = {k: list(v) for k, v in shapes.items()}
    opts = list(opts)
    kind = r.integers(0, 6)
    name = list(shapes)[r.integers(0, len(shapes))]
    if kind == 0:  # change one extent
        ax = r.integers(0, len(shapes[name]))
        shapes[name][ax] = int(r.choice([0, 1, shapes[name][ax] + 1, shapes[name][ax] * 3]))
    elif kind == 1:  # drop or add an axis
        shapes[name] = shapes[name][1:] if r.random() < 0.5 else [1] + shapes[name]
    elif kind == 2 and opts:  # bad option value
        idx = [i for i, o in enumerate(opts) if o.startswith("--") and i + 1 < len(opts)
               and not opts[i + 1].startswith("--")]
        if idx:
            opts[int(r.choice(idx)) + 1] = str(r.choice(BAD_VALUES))
    elif kind == 3:  # wrong dtype
        return shapes, opts, name
    elif kind == 4:  # missing input file
        return shapes, opts + ["--" + name, "/nonexistent/x.npy"], None
    else:  # unknown option
        opts = opts + ["--no-such-option", "1"]
    return shapes, opts, None


def test_random_bad_inputs_never_crash(tmp_path):
    r = np.random.default_rng(SEED)
    print(f"LA_TEST_SEED={SEED}")
    ops = list(BASE)
    codes = {}
    for trial in range(120):
        op = ops[trial % len(ops)]
        shapes, opts, wrong_dtype = mutate(r, *BASE[op])
        d = tmp_path / f"t{trial}"
        d.mkdir()
        args = [EXE, "run", op]
        for name, shp in shapes.items():
            if "--" + name in opts:
                continue
            if name == "idx":
                a = r.integers(-1, 25, shp).astype(np.int32) if min(shp, default=1) >= 0 else np.zeros(0, np.int32)
            else:
                a = r.standard_normal(shp).astype(np.float32)
            if wrong_dtype == name:
                a = a.astype(np.int64) if a.dtype != np.int64 else a.astype(np.float32)
            np.save(d / f"{name}.npy", a)
            args += ["--" + name, str(d / f"{name}.npy")]
        out = d / "out.npy"
        args += opts + ["--out", str(out)]
        p = subprocess.run(args, capture_output=True, text=True, timeout=60)
        codes[p.returncode] = codes.get(p.returncode, 0) + 1
        what = f"trial {trial} (seed {SEED}): {' '.join(args[2:])}\n{p.stderr}"
        assert p.returncode in (0, 2), what
        if p.returncode == 2:
            assert len(p.stderr.strip().splitlines()) == 1, what
            assert not out.exists(), what
        left = [f for f in os.listdir(d) if ".tmp." in f]
        assert not left, what
    print("exit codes:", codes)
    assert codes.get(0, 0) > 0 and codes.get(2, 0) > 0, codes  # both kinds of outcome were exercised
