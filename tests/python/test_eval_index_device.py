"""`longattn eval-index --device cuda` (docs/EVAL_INDEX.md, GPU section):

- without a GPU (or in a build without CUDA) it fails cleanly: exit 2, one
  line on stderr that names cuda, no JSON (nor its temporary) left behind;
- --precision is a GPU option: refused on the CPU path and for bad values;
- on a GPU (mark `cuda`, skipped elsewhere): --precision f32 (exact kernels)
  reproduces the CPU study's selections (IoU, recall, needle retrieval) up to
  fp32 near-ties at the top-k boundary; bf16 (tensor cores, the default) runs
  and gives sane numbers (DSA is its own reference: IoU 1).
Run with /usr/bin/python3 -m pytest; the CLI is $LA_BUILD/longattn."""
import ctypes
import json
import os
import subprocess
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("LA_BUILD", "build"))
EXE = os.path.join(BUILD, "longattn")

pytestmark = pytest.mark.skipif(not os.path.exists(EXE), reason=f"{EXE} not built")

# T = depths * 2 * reps = 4 queries: small enough for the CPU in a test
SMALL = ["--lmin", "2048", "--lmax", "2048", "--reps", "1", "--depths", "2", "--topk", "256",
         "--budget", "1024", "--blocks", "64,128", "--block", "64"]


def run(*args):
    return subprocess.run([EXE, "eval-index", *map(str, args)], capture_output=True, text=True,
                          timeout=600)


def gpu_present():
    so = os.path.join(BUILD, "liblongattn.so")
    if not os.path.exists(so):
        return False
    avail = ctypes.c_int(0)
    ctypes.CDLL(so).la_cuda_available(ctypes.byref(avail))
    return bool(avail.value)


def no_outputs(d):
    return not os.listdir(d)


def test_cuda_without_gpu_exit2_no_output():
    if gpu_present():
        pytest.skip("a GPU is present")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "ev.json")
        r = run(*SMALL, "--device", "cuda", "--json-out", out)
        assert r.returncode == 2, r.stderr
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        assert len(lines) == 1 and "cuda" in lines[0].lower(), r.stderr
        assert r.stdout == ""  # fails before the study starts
        assert no_outputs(d)


def test_precision_is_a_gpu_option():
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "ev.json")
        r = run(*SMALL, "--precision", "bf16", "--json-out", out)
        assert r.returncode == 2 and "--precision" in r.stderr
        assert no_outputs(d)
        if gpu_present():
            r = run(*SMALL, "--device", "cuda", "--precision", "fp16", "--json-out", out)
            assert r.returncode == 2 and "--precision" in r.stderr
            assert no_outputs(d)


def _study(d, name, *extra):
    out = os.path.join(d, name + ".json")
    r = run("--lmin", "8192", "--lmax", "16384", "--reps", "1", "--json-out", out, *extra)
    assert r.returncode == 0, r.stderr
    with open(out) as f:
        return json.load(f)


@pytest.mark.cuda
def test_gpu_study_matches_cpu_selections():
    if not gpu_present():
        pytest.skip("no CUDA device (or a build without CUDA)")
    with tempfile.TemporaryDirectory() as d:
        cpu = _study(d, "cpu")
        f32 = _study(d, "f32", "--device", "cuda", "--precision", "f32")
        bf = _study(d, "bf16", "--device", "cuda")
    assert "device" not in cpu  # the CPU study's JSON is unchanged
    assert f32["device"] == "cuda" and f32["precision"] == "f32"
    assert bf["device"] == "cuda" and bf["precision"] == "bf16"
    assert f32["L"] == cpu["L"] and bf["L"] == cpu["L"]
    T = cpu["generator"]["T"]
    for mc, mg, mb in zip(cpu["methods"], f32["methods"], bf["methods"]):
        assert mc["name"] == mg["name"] == mb["name"]
        for li in range(len(cpu["L"])):
            # fp32 scores summed in another order may swap near-ties at the
            # top-k boundary: a few tokens of a few rows at most
            assert abs(mc["iou"][li] - mg["iou"][li]) <= 0.01, (mc["name"], li)
            assert abs(mc["recall"][li] - mg["recall"][li]) <= 0.01, (mc["name"], li)
            for kind in ("retrieval_span", "retrieval_isolated"):
                # reps = 1: each flipped needle changes one cell by 1.0
                diff = sum(abs(a - b) for a, b in zip(mc[kind][li], mg[kind][li]))
                assert diff <= 2.0, (mc["name"], kind, li)
            assert mg["ms_per_query"][li] > 0 and mb["ms_per_query"][li] > 0
            assert 0.0 <= mb["iou"][li] <= 1.0 and 0.0 <= mb["recall"][li] <= 1.0
    # DSA is the reference of every IoU, so its own IoU is 1 on every device
    assert all(x == 1.0 for x in bf["methods"][0]["iou"]) and all(x == 1.0 for x in f32["methods"][0]["iou"])
    assert T > 0
