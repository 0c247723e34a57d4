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
