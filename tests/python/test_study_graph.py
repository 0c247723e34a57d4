"""The training study's graph loop (studies/train/graph_loop.py) and its
options in run_study.py.

On the CPU: the scored positions gathered by index equal the boolean mask
(forward and gradients), the lr table equals the plain loop's LambdaLR, the
step body run eagerly (capture=False) trains exactly as the plain loop, and
the options are checked (--no-graph, --streams, --graph-data, data modes).
With CUDA (the GPU machine; skipped here): the captured graph loop against
the plain loop, one run and several streams at once.
"""
import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "studies", "train"))
import graph_loop  # noqa: E402
import run_study  # noqa: E402
import tasks  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: the graph path needs one")


def smoke_job(task="mqar", variant="softmax", steps=12, device="cpu", seed=0, lr=3e-3):
    suite = run_study.SUITES["smoke"]
    cfg = dict(suite[task], steps=steps)
    if task == "mqar":
        setting, blocks = tuple(cfg["settings"][0]), None
    else:
        setting, blocks = None, (tuple(cfg["blocks"][0]) if variant == "mhla" else None)
    return dict(task=task, cfg=cfg, variant=variant, dim=cfg["dims"][0], setting=setting,
                blocks=blocks, device=device, amp="none", lr=lr, seed=seed)


def plain_losses(job, steps):
    """run_study.train_one's loop, its first `steps` losses."""
    torch.manual_seed(job["seed"])
    dev = torch.device(job["device"])
    model, gen = run_study.build(job["task"], job["cfg"], job["variant"], job["dim"],
                                 job["setting"], job["blocks"], dev)
    g = run_study.generator(dev, job["seed"])
    opt, sched = run_study.make_optimizer(model, job["lr"], job["cfg"]["steps"])
    out = []
    for _ in range(steps):
        x, y = gen(g, job["cfg"]["batch"])
        out.append(float(run_study.train_step(model, opt, sched, x, y, job["amp"])))
    return out, model


@pytest.mark.parametrize("task", ["mqar", "nearest"])
def test_scored_positions_equal_the_mask(task):
    job = smoke_job(task)
    g = torch.Generator().manual_seed(3)
    _, gen = run_study.build(task, job["cfg"], "softmax", 32, job["setting"], None, "cpu")
    x, y = gen(g, 5)
    mask = y != tasks.IGNORE
    idx = graph_loop.scored_positions(y, graph_loop.scored_per_row(job))
    assert torch.equal(y.gather(1, idx).reshape(-1), y[mask])
    assert bool((idx[:, 1:] > idx[:, :-1]).all())
    torch.manual_seed(1)
    model, _ = run_study.build(task, job["cfg"], "linear", 32, job["setting"], None, "cpu")
    a = model(x, mask)
    a.square().sum().backward()
    ga = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    b = model(x, idx)
    b.square().sum().backward()
    assert torch.equal(a, b)
    for p, q in zip(ga, (p.grad for p in model.parameters())):
        assert torch.allclose(p, q, rtol=1e-6, atol=1e-7)


def test_lr_table_is_the_lambda_schedule():
    job = smoke_job(steps=40)
    run = graph_loop.GraphRun(job, data="eager")
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=job["lr"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: run_study.lr_factor(s, 40))
    for s in range(40):
        assert run.lr_host[s] == opt.param_groups[0]["lr"], s
        opt.step()
        sched.step()
    assert torch.allclose(run.lr_table.double(), torch.tensor(run.lr_host, dtype=torch.float64))


@pytest.mark.parametrize("task,variant", [("mqar", "softmax"), ("mqar", "mhla"),
                                          ("nearest", "linear"), ("nearest", "mhla")])
def test_eager_graph_body_trains_as_the_plain_loop(task, variant):
    """capture=False on the CPU: the graph loop's step body (gathered scored
    positions, lr from the table, the loss record, the step counter) gives
    the plain loop's losses and parameters."""
    steps = 12
    job = smoke_job(task, variant, steps=steps)
    want, plain_model = plain_losses(job, steps)
    run = graph_loop.GraphRun(job, data="eager", capture=False)
    n = 0
    while run.step():
        n += 1
    assert n + 1 == steps and run.done == steps and run.graph is None
    got = run.losses().tolist()
    for s, (a, b) in enumerate(zip(got, want)):
        assert abs(a - b) <= 1e-6 * abs(b), (s, a, b)
    assert int(run.ctr) == steps
    for p, q in zip(run.model.parameters(), plain_model.parameters()):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6)
    r = run.finish()
    assert r["steps"] == steps and r["loop"] == "eager" and r["graph_data"] == "eager"
    assert r["attn_grad_ok"] and r["finite"] and 0 <= r["acc"] <= 1
    assert run.model is None   # released


def test_graph_run_options():
    with pytest.raises(ValueError, match="data 'bogus'|data .bogus."):
        graph_loop.GraphRun(smoke_job(), data="bogus")
    with pytest.raises(ValueError, match="steps must be >= 1"):
        graph_loop.GraphRun(smoke_job(steps=0), data="eager")
    with pytest.raises(ValueError, match="streams must be >= 1"):
        graph_loop.train_streams(lambda: None, 0, "eager", print)
    with pytest.raises(ValueError, match="jobs and streams"):
        graph_loop.run_many([], 0, 1, "eager", print)
    assert graph_loop.default_data() in graph_loop.DATA_MODES
    assert graph_loop.default_data() == ("captured" if graph_loop.can_capture_data() else "eager")


def test_train_streams_schedules_and_reports():
    """Two CPU runs interleaved (capture off on the CPU), one past its
    deadline (None), one failing at construction (an error dict)."""
    good = [dict(smoke_job(seed=s, steps=6), deadline=math.inf, run_limit=math.inf)
            for s in (0, 1)]
    late = dict(smoke_job(seed=2, steps=6), deadline=0.0)
    bad = dict(smoke_job(seed=3, steps=6), variant="nosuch", deadline=math.inf)
    jobs = iter(good + [late, bad])
    out = []
    graph_loop.train_streams(lambda: next(jobs, None), 2, "eager", out.append)
    results = [r for r in out if r and "error" not in r]
    assert sorted(r["seed"] for r in results) == [0, 1]
    assert all(r["steps"] == 6 for r in results)
    assert out.count(None) == 1
    errors = [r for r in out if r and "error" in r]
    assert len(errors) == 1 and "nosuch" in errors[0]["error"]
    # the same seed alone gives the same losses
    alone, _ = plain_losses(good[0], 6)
    assert abs(results[[r["seed"] for r in results].index(0)]["loss_first"]
               - sum(alone[:5]) / 5) < 1e-6 * abs(alone[0])


def test_run_study_options(capsys):
    with pytest.raises(SystemExit):
        run_study.main(["--suite", "smoke", "--graph-data", "bogus"])
    with pytest.raises(SystemExit):
        run_study.main(["--suite", "smoke", "--device", "cpu", "--streams", "0"])
    assert "must be >= 1" in capsys.readouterr().err
    # the CPU runs the plain loop whatever the graph options say
    assert run_study.main(["--suite", "smoke", "--device", "cpu", "--only", "mqar",
                           "--variants", "softmax", "--steps", "4", "--streams", "3",
                           "--graph-data", "eager"]) == 0
    assert "plain loop" in capsys.readouterr().out


@needs_cuda
@pytest.mark.parametrize("data", graph_loop.DATA_MODES)
@pytest.mark.parametrize("variant", ["softmax", "linear", "mhla"])
def test_cuda_graph_loop_equals_plain(variant, data):
    if data == "captured" and not graph_loop.can_capture_data():
        pytest.skip("torch %s cannot register a generator with a graph" % torch.__version__)
    steps = 20
    job = smoke_job("mqar", variant, steps=200, device="cuda")
    want, _ = plain_losses(job, steps)
    run = graph_loop.GraphRun(job, data=data)
    for _ in range(steps):
        run.step()
    assert run.graph is not None
    got = run.losses().float().cpu().tolist()
    assert abs(got[0] - want[0]) <= 1e-5 * abs(want[0])
    for s, (a, b) in enumerate(zip(got, want)):
        assert abs(a - b) <= 2e-3 * abs(b), (s, a, b)
    r = run.finish()
    assert r["loop"] == "graph" and r["steps"] == steps


@needs_cuda
def test_cuda_streams_equal_runs_alone():
    """Three runs on three streams at once give what each gives alone."""
    jobs = [dict(smoke_job("mqar", v, steps=30, device="cuda", seed=s), deadline=math.inf)
            for s, v in enumerate(["softmax", "linear", "mhla"])]
    together = []
    it = iter(jobs)
    graph_loop.train_streams(lambda: next(it, None), 3, None, together.append)
    alone = []
    for j in jobs:
        it1 = iter([j])
        graph_loop.train_streams(lambda: next(it1, None), 1, None, alone.append)
    key = lambda r: r["seed"]  # noqa: E731
    for a, b in zip(sorted(together, key=key), sorted(alone, key=key)):
        assert "error" not in a and "error" not in b, (a, b)
        assert a["loop"] == "graph" and a["steps"] == 30
        assert abs(a["loss_last"] - b["loss_last"]) <= 2e-3 * abs(b["loss_last"])


def test_run_many_in_worker_processes():
    """run_many over 2 spawned workers with 2 streams each (CPU: the eager
    body): every run reported once, as the same run alone gives."""
    jobs = [dict(smoke_job(seed=s, steps=4), deadline=math.inf, run_limit=math.inf)
            for s in range(3)]
    out = []
    graph_loop.run_many(jobs, 2, 2, "eager", out.append)
    assert sorted(r["seed"] for r in out if r and "error" not in r) == [0, 1, 2], out
    alone, _ = plain_losses(jobs[1], 4)
    r1 = [r for r in out if r["seed"] == 1][0]
    assert abs(r1["loss_first"] - sum(alone) / 4) <= 1e-6 * abs(alone[0])


def test_grid_suite_batch_holds_16384_tokens():
    configs, runs = run_study.jobs_of("grid", [0, 1, 2], "mqar", "cpu", "bf16")
    batch = {j["setting"]: j["cfg"]["batch"] for j in configs}
    assert batch == {(64, 4): 256, (256, 16): 64, (1024, 64): 16}
    assert len(configs) == 27 and len(runs) == 162
    _, near = run_study.jobs_of("grid", [0, 1, 2], "nearest", "cpu", "bf16")
    assert len(near) == 2 * 5 * 2 * 3


def test_end_at_cuts_a_run():
    """A run past its end_at (run_study --end) stops at the next check (every
    100 steps), marked cut, with the steps it trained."""
    job = dict(smoke_job(steps=400), deadline=math.inf, run_limit=math.inf, end_at=0.0)
    job["cfg"]["batch"] = 2
    out = []
    graph_loop.train_streams(iter([job, None]).__next__, 1, "eager", out.append)
    assert len(out) == 1 and out[0]["cut"] and out[0]["steps"] == 100, out


def test_interleave_variants_keeps_each_variants_order():
    runs = [{"variant": v, "i": i} for i, v in enumerate("aaabbc")]
    out = graph_loop.interleave_variants(runs)
    assert [r["variant"] for r in out] == list("abcaba")
    assert [r["i"] for r in out if r["variant"] == "a"] == [0, 1, 2]
    assert graph_loop.interleave_variants([]) == []


def test_run_study_graph_loop_path_on_the_cpu(tmp_path):
    """run_study.main through the graph loop (--loop graph: the step body
    eagerly on the CPU), its timing pass included: results written, the
    loop recorded, the losses those of the plain loop."""
    common = ["--suite", "smoke", "--device", "cpu", "--only", "mqar", "--variants",
              "softmax,mhla", "--steps", "4"]
    assert run_study.main(common + ["--loop", "graph", "--streams", "2", "--timing-steps", "2",
                                    "--out", str(tmp_path / "g")]) == 0
    assert run_study.main(common + ["--no-graph", "--out", str(tmp_path / "p")]) == 0
    import json
    g = json.loads((tmp_path / "g" / "results.json").read_text())
    p = json.loads((tmp_path / "p" / "results.json").read_text())
    assert g["loop"] == "graph" and g["graph_data"] == graph_loop.default_data()
    assert p["loop"] == "plain" and p["graph_data"] is None
    assert len(g["runs"]) == len(p["runs"]) == 2
    assert all("graph_ms_per_step" in t for t in g["timing"]) and len(g["timing"]) == 2
    by = {r["variant"]: r for r in p["runs"]}
    for r in g["runs"]:
        assert r["loop"] == "eager"
        assert abs(r["loss_first"] - by[r["variant"]]["loss_first"]) <= 1e-6 * r["loss_first"]
        assert r["acc"] == by[r["variant"]]["acc"]
