"""longattn.distributed on 2 and 4 gloo ranks (torch.multiprocessing): every
op, forward and backward, equals the single-process result at sizes whose
rank boundaries fall inside blocks and chunks; the bytes each op hands to
its collectives equal the model of docs/DISTRIBUTED.md.

One spawn per world size runs every case of dist_cases.py (a spawn costs a
few seconds of imports); each test below reports one case of one world size.
"""
import json
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from test_py_common import SEED, needs
import dist_cases

pytestmark = [needs("dsa_topk"),
              pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                 reason="torch.distributed with gloo is not available")]

WORLDS = (2, 4)


@pytest.fixture(scope="module")
def results():
    """{world size: {case: {rank: "ok" or the failure}}}, one spawn per size."""
    out = {}
    for P in WORLDS:
        with tempfile.TemporaryDirectory() as d:
            init = os.path.join(d, "init")
            mp.spawn(dist_cases.worker, args=(P, init, d, SEED, dist_cases.CASES), nprocs=P,
                     join=True)
            per = {}
            for r in range(P):
                with open(os.path.join(d, "rank%d.json" % r)) as fh:
                    for case, res in json.load(fh).items():
                        per.setdefault(case, {})[r] = res
            out[P] = per
    return out


@pytest.mark.parametrize("case", dist_cases.CASES)
@pytest.mark.parametrize("world", WORLDS)
def test_distributed(results, world, case):
    per = results[world].get(case)
    assert per is not None and len(per) == world, "case %s did not run on every rank" % case
    bad = {r: res for r, res in per.items() if res != "ok"}
    assert not bad, "\n".join("rank %d:\n%s" % (r, res) for r, res in sorted(bad.items()))


def test_single_process_group_errors():
    """Without an initialized group the ops say so (no hang, no crash)."""
    import longattn.distributed as ld
    if dist.is_initialized():
        pytest.skip("a process group is already initialized")
    q = torch.randn(1, 8, 1, 4)
    with pytest.raises(RuntimeError, match="not initialized"):
        ld.linear_attention(q, q, q)


def test_dist_scaling_cpu_smoke(tmp_path):
    """The 2-GPU script's logic (bench/dist_scaling.py) on CPU with gloo: every
    check passes and a scaling row comes out for the op timed."""
    import subprocess
    import sys
    bench = os.path.join(dist_cases.ROOT, "bench", "dist_scaling.py")
    r = subprocess.run([sys.executable, bench, "--cpu-smoke", "--out", str(tmp_path),
                        "--ops", ",".join(["mhla", "linear_causal", "mhla_causal", "softmax",
                                           "dsa", "hisa"]), "--reps", "1"],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with open(tmp_path / "dist_check.json") as fh:
        rows = json.load(fh)["check"]
    assert len(rows) == 10 and all(x["ok_all_ranks"] for x in rows), rows
    with open(tmp_path / "dist_scale.json") as fh:
        scale = json.load(fh)["scale"]
    assert {x["op"] for x in scale} == {"mhla", "linear_causal", "mhla_causal", "softmax", "dsa",
                                        "hisa"}
    assert all(isinstance(x.get("t1"), float) and isinstance(x.get("t2"), float) for x in scale)


def test_dist_model_table():
    """--model prints the table of docs/DISTRIBUTED.md: one row per op, and the
    document carries the same rows."""
    import subprocess
    import sys
    bench = os.path.join(dist_cases.ROOT, "bench", "dist_scaling.py")
    out = subprocess.run([sys.executable, bench, "--model"], capture_output=True, text=True,
                         timeout=60).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ") and "MB sent" not in line]
    assert len(rows) == 6, out
    with open(os.path.join(dist_cases.ROOT, "docs", "DISTRIBUTED.md")) as fh:
        doc = fh.read()
    for row in rows:
        assert row in doc, "docs/DISTRIBUTED.md lacks the model row %r" % row


def test_library_backward_is_seen():
    """library_ok routes a training step to the library when its op has a
    backward: every op with an autograd Function has one."""
    from longattn import autograd
    from longattn.distributed._linear import library_has_backward
    for op in autograd.FUNCTIONS:
        assert library_has_backward(op), op
    assert not library_has_backward("no_such_op")
