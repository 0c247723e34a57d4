"""The training study: MHLA against linear, focused and softmax attention,
trained on tasks made to separate the mechanisms (docs/TRAINING_STUDY.md).

    python3 studies/train/run_study.py --suite smoke                    # CPU, < 2 min, CI
    python3 studies/train/run_study.py --suite grid --amp bf16 --streams 18 --out DIR  # H200

Protocol: per task and setting, every variant gets the same steps, batch,
optimizer (AdamW, linear warm-up then cosine decay, weight decay on the
matrices only), precision and learning-rate grid; the best learning rate of
the grid (by mean held-out accuracy over the seeds) is reported, as mean ± std
over the seeds. Held-out data comes from a generator seeded apart from the
training stream.

Speed: on CUDA the runs train in the graph loop (graph_loop.py): each run's
step is captured once in a CUDA graph and replayed, `--streams N` runs at once
per process on their own streams, `--jobs` such processes; the same losses as
the plain loop (docs/TRAINING_STUDY.md, "Graph loop"). `--no-graph` (and the
CPU) runs the plain loop below, `--jobs N` of them at once in worker processes
(spawned, one CPU thread each). The 8192-way head is computed at the scored
positions only (the same loss).
Matmuls use TF32 on CUDA; `--amp bf16` adds bf16 autocast for every
variant alike. Per-step time and peak memory come from a separate timing
pass (`--timing-steps`), one process alone on the GPU after the accuracy runs.
results.json is rewritten after every finished run; no run starts after
`--deadline` seconds (a cut study keeps what finished).
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks  # noqa: E402
from models import TinyLM  # noqa: E402

SUITES = {
    "smoke": {
        "mqar": {"settings": [(64, 4)], "dims": [32], "variants": ["softmax", "linear", "mhla"],
                 "steps": 60, "batch": 16, "lrs": [3e-3], "chunk": {64: 16}, "eval": 64,
                 "vocab": 256, "pos_init": "sinusoidal", "out_std": 0.01},
        "nearest": {"side": 8, "dims": [32], "blocks": [(2, 2)], "queries": 8,
                    "variants": ["softmax", "linear", "focused", "mhla"], "steps": 150,
                    "batch": 32, "lrs": [5e-3], "eval": 32},
        "seeds": [0],
    },
    # a first look on the GPU: one seed, the grid's ends
    "pilot": {
        "mqar": {"settings": [(64, 4), (256, 16), (1024, 64)], "dims": [64],
                 "variants": ["softmax", "linear", "mhla"],
                 "steps": 1000, "batch": 256, "lrs": [3e-3, 1e-2], "vocab": 8192,
                 "chunk": {64: 16, 256: 32, 1024: 64}, "eval": 512},
        "nearest": {"side": 32, "dims": [64], "blocks": [(4, 4), (8, 8)], "queries": 64,
                    "variants": ["softmax", "linear", "focused", "mhla"], "steps": 1000,
                    "batch": 64, "lrs": [3e-3], "eval": 256},
        "seeds": [0],
    },
    # MQAR: the recipe of docs/TRAINING_STUDY.md ("MQAR recipe"): batch 256, sinusoidal
    # init of the learned positions, GPT-2-style init of the blocks' output projections
    # (std 0.02 / sqrt(2 * layers) = 0.01; embeddings 0.02, tied head), lr grid {1e-3, 3e-3};
    # 64x4 and 256x16. MHLA chunk 64 at every length: the causal MHLA backward runs on
    # tensor cores only at chunk 64 (smaller chunks take the portable engine); at 64
    # tokens that is one chunk (M = 1: W is a learned scalar).
    # The 2-D task as in the first H200 run (it learns).
    "full": {
        "mqar": {"settings": [(64, 4), (256, 16)], "dims": [64, 128, 256],
                 "variants": ["softmax", "linear", "mhla"], "steps": 2000, "batch": 256,
                 "lrs": [1e-3, 3e-3], "chunk": {64: 64, 256: 64, 1024: 64}, "eval": 512,
                 "vocab": 8192, "pos_init": "sinusoidal", "out_std": 0.01},
        "nearest": {"side": 32, "dims": [64], "blocks": [(4, 4), (8, 8)], "queries": 64,
                    "variants": ["softmax", "linear", "focused", "mhla"], "steps": 300,
                    "batch": 32, "lrs": [2e-3, 5e-3], "eval": 256},
        "seeds": [0, 1, 2],
        "order": [("nearest", 64), ("mqar", 64), ("mqar", 128), ("mqar", 256)],
    },
    # The full grid on the graph loop (gpu_study.sh mqar-a, mqar-b, nearest): the
    # recipe of "full", with 1024x64 added, and a batch of 16384 tokens at every MQAR
    # setting (256, 64 and 16 sequences: 1024 scored queries a step at each); the 2-D
    # task at dims 64 and 128.
    "grid": {
        "mqar": {"settings": [(64, 4), (256, 16), (1024, 64)], "dims": [64, 128, 256],
                 "variants": ["softmax", "linear", "mhla"], "steps": 2000, "batch": 256,
                 "batch_tokens": 16384, "lrs": [1e-3, 3e-3], "chunk": {64: 64, 256: 64, 1024: 64},
                 "eval": 512, "vocab": 8192, "pos_init": "sinusoidal", "out_std": 0.01},
        "nearest": {"side": 32, "dims": [64, 128], "blocks": [(4, 4), (8, 8)], "queries": 64,
                    "variants": ["softmax", "linear", "focused", "mhla"], "steps": 300,
                    "batch": 32, "lrs": [2e-3, 5e-3], "eval": 256},
        "seeds": [0, 1, 2],
    },
}
WEIGHT_DECAY = 0.1
WARMUP = 0.05         # fraction of the steps


def heads_for(dim, task="mqar"):
    """Head dim 64 on both tasks (dim 64: 1 head, 128: 2, 256: 4): the library's
    tensor-core kernels take head dims 64 and 128, not 32."""
    return max(1, dim // 64)


def build(task, cfg, variant, dim, setting, blocks, device):
    """(model, batch generator(gen, batch))"""
    if task == "mqar":
        seq_len, pairs = setting
        vocab = cfg["vocab"]
        model = TinyLM(vocab, vocab, dim, heads_for(dim), 2, variant, True, seq_len,
                       chunk=cfg["chunk"][seq_len], tie=cfg.get("tie", True),
                       pos_init=cfg.get("pos_init", "normal"), emb_std=cfg.get("emb_std", 0.02),
                       out_std=cfg.get("out_std"))
        filler = cfg.get("filler", "random")
        gen = lambda g, b: tasks.mqar_batch(g, b, seq_len, pairs, vocab, filler)  # noqa: E731
    else:
        side = cfg["side"]
        colours, labels = 4, 8
        model = TinyLM(tasks.nearest_vocab(colours, labels), labels, dim, heads_for(dim, task), 2,
                       variant, False, side * side, grid=(side, side), blocks=blocks)
        gen = lambda g, b: tasks.nearest_batch(g, b, side, colours, labels,  # noqa: E731
                                               queries=cfg["queries"])
    return model.to(device), gen


def generator(device, seed):
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def train_step(model, opt, sched, x, y, amp):
    scored = y != tasks.IGNORE
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp == "bf16"):
        logits = model(x, scored)
    loss = F.cross_entropy(logits.float(), y[scored])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if sched is not None:
        sched.step()
    for layer in model.mhla_layers():
        layer.project_mixing_()
    return loss


def lr_factor(s, steps):
    """The schedule's factor at step s (0-based) of `steps`: linear warm-up over
    WARMUP of the steps, then cosine to 0 (LambdaLR here, a device table in the
    graph loop)."""
    warm = max(1, int(WARMUP * steps))
    return min(1.0, (s + 1) / warm) * 0.5 * (
        1 + math.cos(math.pi * min(max(s - warm, 0), steps) / max(1, steps - warm)))


def make_optimizer(model, lr, steps):
    # on CUDA one fused kernel for the whole update (the same arithmetic)
    fused = {"fused": True} if next(model.parameters()).is_cuda else {}
    opt = torch.optim.AdamW(model.param_groups(WEIGHT_DECAY), lr=lr, betas=(0.9, 0.98), **fused)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, steps))
    return opt, sched


def train_one(job):
    task, cfg, variant, dim, lr, seed = (job[k] for k in ("task", "cfg", "variant", "dim", "lr",
                                                          "seed"))
    setting, blocks, amp = job["setting"], job["blocks"], job["amp"]
    device = torch.device(job["device"])
    t_start = time.time()
    torch.manual_seed(seed)
    model, gen = build(task, cfg, variant, dim, setting, blocks, device)
    g, eg = generator(device, seed), generator(device, 10_000 + seed)
    steps = cfg["steps"]
    opt, sched = make_optimizer(model, lr, steps)
    losses = []                 # per-step losses, kept on the device (no host sync a step)
    cut = False
    for step in range(steps):
        x, y = gen(g, cfg["batch"])
        losses.append(train_step(model, opt, sched, x, y, amp).detach())
        if step % 100 == 99:
            if not math.isfinite(losses[-1].item()):
                break
            if time.time() > job["stop_at"]:     # its wall-time limit: kept, marked cut
                cut = True
                break
    return summarize(job, model, gen, eg, torch.stack(losses), cut, t_start)


def evaluate(model, gen, eg, cfg, amp, device):
    """Held-out accuracy: cfg["eval"] sequences from the generator eg."""
    model.eval()
    correct = total = 0
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp == "bf16"):
        left = cfg["eval"]
        while left > 0:
            b = min(left, cfg["batch"])
            x, y = gen(eg, b)
            scored = y != tasks.IGNORE
            pred = model(x, scored).argmax(-1)
            correct += int((pred == y[scored]).sum())
            total += int(scored.sum())
            left -= b
    return correct / max(1, total)


def summarize(job, model, gen, eg, losses, cut, t_start):
    """A finished (or cut) run's result: losses (a device tensor, one per step
    trained), the curve, held-out accuracy; the same for both training loops."""
    task, cfg, variant, dim, lr, seed = (job[k] for k in ("task", "cfg", "variant", "dim", "lr",
                                                          "seed"))
    setting, blocks, amp = job["setting"], job["blocks"], job["amp"]
    device = torch.device(job["device"])
    losses = losses.float().cpu()
    every = max(1, len(losses) // 50)
    curve = losses[: len(losses) // every * every].view(-1, every).mean(1).tolist()
    losses = losses.tolist()
    # the attention layers' own parameters got finite, non-zero gradients in
    # the last step (the embeddings and head alone could make the loss fall)
    attn = [q for blk in model.blocks for q in blk.attn.parameters()]
    attn_grad_ok = bool(attn) and all(q.grad is not None and bool(torch.isfinite(q.grad).all())
                                      for q in attn) and any(float(q.grad.abs().sum()) > 0
                                                             for q in attn)
    acc = evaluate(model, gen, eg, cfg, amp, device)
    return {
        "task": task, "setting": list(setting) if task == "mqar" else [cfg["side"]] * 2,
        "blocks": list(blocks) if blocks else None, "variant": variant, "dim": dim,
        "heads": heads_for(dim, task), "lr": lr, "seed": seed, "batch": cfg["batch"],
        "steps": len(losses), "steps_planned": cfg["steps"], "cut": cut, "amp": amp,
        "finite": math.isfinite(losses[-1]),
        "loss_first": statistics.fmean(losses[:5]), "loss_last": statistics.fmean(losses[-5:]),
        "curve": [round(c, 4) for c in curve], "curve_every": every,
        "acc": acc, "wall_s": time.time() - t_start,
        "attn_grad_ok": attn_grad_ok,
        "params": sum(p.numel() for p in model.parameters()),
        "attn_params": model.attention_params(),
    }


def time_one(job, steps):
    """ms per training step (median of `steps` after 5 warm-up) and peak MiB,
    one process alone on the device."""
    device = torch.device(job["device"])
    cuda = device.type == "cuda"
    base = 0
    if cuda:  # what earlier configurations of the pass left allocated is not this one's
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    torch.manual_seed(0)
    model, gen = build(job["task"], job["cfg"], job["variant"], job["dim"], job["setting"],
                       job["blocks"], device)
    g = generator(device, 0)
    opt, sched = make_optimizer(model, 1e-3, 1000)
    times = []
    for step in range(5 + steps):
        x, y = gen(g, job["cfg"]["batch"])
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        train_step(model, opt, sched, x, y, job["amp"])
        if cuda:
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    peak = (torch.cuda.max_memory_allocated(device) - base) / 2**20 if cuda else 0.0
    return 1e3 * statistics.median(times[5:]), peak


def jobs_of(suite, seeds, only, device, amp):
    s = SUITES[suite]
    out = []
    m = s["mqar"]
    for setting in m["settings"]:
        # batch_tokens: the batch of each setting holds that many tokens
        cfg = dict(m, batch=m["batch_tokens"] // setting[0]) if m.get("batch_tokens") else m
        for dim in m["dims"]:
            for variant in m["variants"]:
                out.append(dict(task="mqar", cfg=cfg, variant=variant, dim=dim,
                                setting=tuple(setting), blocks=None))
    n = s["nearest"]
    for dim in n["dims"]:
        for variant in n["variants"]:
            for blocks in (n["blocks"] if variant == "mhla" else [None]):
                out.append(dict(task="nearest", cfg=n, variant=variant, dim=dim, setting=None,
                                blocks=tuple(blocks) if blocks else None))
    out = [dict(j, device=device, amp=amp) for j in out if not only or j["task"] == only]
    runs = [dict(j, lr=lr, seed=seed) for j in out for lr in j["cfg"]["lrs"] for seed in seeds]
    return out, runs


def key_of_job(j):
    setting = "x".join(map(str, j["setting"] if j["task"] == "mqar" else [j["cfg"]["side"]] * 2))
    return (j["task"], setting, j["dim"], j["variant"], "x".join(map(str, j["blocks"] or [])))


def restrict_to_best_lr(runs, path):
    """Only the runs at the best learning rate of other results.json files
    (commas; per task, setting, dim, variant, blocks); configurations they
    lack are dropped."""
    import report
    done = []
    for p in path.split(","):
        with open(p) as f:
            done += json.load(f)["runs"]
    best = report.best_of_grid(done)
    return [r for r in runs if key_of_job(r) in best and best[key_of_job(r)][0] == r["lr"]]


def cost(job):
    """Rough relative cost, to start the longest runs first."""
    n = job["setting"][0] if job["task"] == "mqar" else job["cfg"]["side"] ** 2
    slow = {"focused": 16, "softmax": 1, "linear": 1, "mhla": 4 if job["task"] == "mqar" else 1}
    return job["cfg"]["steps"] * job["cfg"]["batch"] * n * (1 + job["dim"] / 64) * slow[job["variant"]]


def worker_init(threads):
    torch.set_num_threads(threads)
    # subnormal floats slow the CPU focused-attention runs 2-3x late in training
    # (the smoke test's longest run); flushing them left its loss and accuracy the same
    torch.set_flush_denormal(True)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def guarded(job):
    """train_one in a worker: None once the deadline has passed (not started)."""
    if time.time() > job["deadline"]:
        return None
    job = dict(job, stop_at=min(time.time() + job["run_limit"], job.get("end_at", math.inf)))
    try:
        return train_one(job)
    except Exception as e:  # noqa: BLE001  (a failed run is reported, the others go on)
        return {"error": "%s: %s" % (type(e).__name__, e),
                **{k: job[k] for k in ("task", "variant", "dim", "lr", "seed")}}


def describe(r):
    return "%-7s %-10s %-8s %-7s dim %3d lr %.0e seed %d: loss %.3f -> %.3f acc %.3f (%.0f s)" % (
        r["task"], "x".join(map(str, r["setting"])), r["variant"],
        "x".join(map(str, r["blocks"] or [])), r["dim"], r["lr"], r["seed"], r["loss_first"],
        r["loss_last"], r["acc"], r["wall_s"])


def save(path, meta, results, timing):
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(dict(meta, runs=results, timing=timing), f, indent=None,
                      separators=(",", ":"))
        os.replace(tmp, path)


def override(suite, a):
    """--steps / --batch / --lrs / --settings / --dims / --variants for pilots."""
    s = SUITES[suite]
    for task in ("mqar", "nearest"):
        c = s[task]
        if a.steps:
            c["steps"] = a.steps
        if a.batch:
            c["batch"] = a.batch
            c.pop("batch_tokens", None)
        if a.lrs:
            c["lrs"] = [float(x) for x in a.lrs.split(",")]
        if a.dims:
            c["dims"] = [int(x) for x in a.dims.split(",")]
        if a.variants:
            c["variants"] = [v for v in a.variants.split(",")
                             if task == "nearest" or v != "focused"]
    if a.settings:
        s["mqar"]["settings"] = [tuple(int(y) for y in x.split("x")) for x in a.settings.split(",")]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=sorted(SUITES), default="smoke")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default=None, help="folder for results.json (default: none)")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds (default: the suite's)")
    ap.add_argument("--only", default=None, help="task to run (mqar or nearest)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (training runs at once)")
    ap.add_argument("--amp", choices=("none", "bf16"), default="none")
    ap.add_argument("--deadline", type=float, default=1e9,
                    help="seconds after which no further run starts")
    ap.add_argument("--run-limit", type=float, default=1e9,
                    help="wall seconds after which a run stops training (then marked cut)")
    ap.add_argument("--end", type=float, default=math.inf,
                    help="seconds after the start at which every run still training is cut")
    ap.add_argument("--timing-only", action="store_true", help="no training runs, the timing pass")
    ap.add_argument("--cells", default=None,
                    help="only these variant@dim cells (commas), e.g. mhla@64,softmax@128")
    ap.add_argument("--lr-from", default=None,
                    help="a results.json: run only its best learning rate per configuration")
    ap.add_argument("--timing-amps", default=None,
                    help="precisions of the timing pass (commas; default: --amp)")
    ap.add_argument("--timing-steps", type=int, default=0,
                    help="after the runs: time this many steps per variant and setting alone")
    ap.add_argument("--timing-deadline", type=float, default=1e9,
                    help="seconds after the start past which the timing pass stops")
    for k in ("steps", "batch"):
        ap.add_argument("--" + k, type=int, default=None, help="override the suite's " + k)
    for k in ("lrs", "settings", "dims", "variants"):
        ap.add_argument("--" + k, default=None, help="override the suite's " + k + " (commas)")
    ap.add_argument("--no-graph", action="store_true",
                    help="the plain training loop on CUDA too (the CPU runs it by default)")
    ap.add_argument("--loop", choices=("auto", "graph", "plain"), default="auto",
                    help="auto: the graph loop on CUDA, the plain loop on the CPU; graph on the "
                         "CPU runs the graph loop's step body eagerly (tests)")
    ap.add_argument("--streams", type=int, default=8,
                    help="graph loop: runs trained at once per process, each on its own CUDA "
                         "stream and graph (--jobs processes)")
    ap.add_argument("--graph-data", choices=("auto", "captured", "eager"), default="auto",
                    help="graph loop: batches drawn inside the graph (captured) or outside and "
                         "copied in (eager); auto: captured where torch supports it")
    ap.add_argument("--check-falls", action="store_true",
                    help="exit 1 unless every run's loss fell by 3%% and its attention layers got "
                         "finite, non-zero gradients (the smoke test)")
    args = ap.parse_args(argv)
    if args.jobs < 1 or args.streams < 1:
        ap.error("--jobs and --streams must be >= 1 (got %d, %d)" % (args.jobs, args.streams))
    if args.no_graph:
        args.loop = "plain"
    graph = args.loop == "graph" or (args.loop == "auto" and args.device.startswith("cuda"))
    if graph:
        import graph_loop
        graph_data = graph_loop.default_data() if args.graph_data == "auto" else args.graph_data
        if graph_data == "captured" and not graph_loop.can_capture_data():
            ap.error("--graph-data captured: torch %s has no CUDAGraph.register_generator_state"
                     % torch.__version__)
    override(args.suite, args)
    worker_init(torch.get_num_threads() if args.jobs == 1 else 1)
    seeds = ([int(s) for s in args.seeds.split(",")] if args.seeds
             else SUITES[args.suite]["seeds"])
    t_start = time.time()
    configs, runs = jobs_of(args.suite, seeds, args.only, args.device, args.amp)
    if args.cells:
        cells = {(c.split("@")[0], int(c.split("@")[1])) for c in args.cells.split(",")}
        configs = [j for j in configs if (j["variant"], j["dim"]) in cells]
        runs = [r for r in runs if (r["variant"], r["dim"]) in cells]
    if args.lr_from:
        runs = restrict_to_best_lr(runs, args.lr_from)
    order = {c: i for i, c in enumerate(SUITES[args.suite].get("order", []))}
    # the suite's order first (a deadline cuts the last), then the longest runs first
    runs.sort(key=lambda r: (order.get((r["task"], r["dim"]), len(order)), -cost(r)))
    if graph:   # runs at once on one GPU: the variants mixed (graph_loop.interleave_variants)
        runs = graph_loop.interleave_variants(runs)
    for r in runs:
        r["deadline"] = t_start + args.deadline
        r["run_limit"] = args.run_limit
        r["end_at"] = t_start + args.end
    path = os.path.join(args.out, "results.json") if args.out else None
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    dev_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    meta = {"suite": args.suite, "device": dev_name, "seeds": seeds, "jobs": args.jobs,
            "loop": "graph" if graph else "plain",
            "streams": args.streams if graph else None, "graph_data": graph_data if graph else None,
            "amp": args.amp, "torch": torch.__version__, "lr_from": args.lr_from,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "argv": sys.argv[1:], "config": {k: v for k, v in SUITES[args.suite].items()}}
    results, errors, timing, skipped = [], [], [], 0

    def collect(r):
        nonlocal skipped
        if r is None:
            skipped += 1
        elif "error" in r:
            errors.append(r)
            print("FAILED", r, flush=True)
        else:
            results.append(r)
            print(describe(r), flush=True)
            meta["elapsed_s"] = time.time() - t_start
            save(path, meta, results, timing)

    if args.timing_only:
        runs = []
    if graph and runs:
        graph_loop.run_many(runs, args.jobs, args.streams, graph_data, collect)
    elif args.jobs > 1 and runs:
        ctx = mp.get_context("spawn")
        with ctx.Pool(args.jobs, initializer=worker_init, initargs=(1,)) as pool:
            for r in pool.imap_unordered(guarded, runs):
                collect(r)
    else:
        for job in runs:
            collect(guarded(job))
    meta["accuracy_s"] = time.time() - t_start
    steps_done = sum(r["steps"] for r in results)
    meta["steps_per_s"] = steps_done / max(meta["accuracy_s"], 1e-9)
    print("%d runs (%d steps, %.0f steps/s) in %.1f s on %s (%d jobs, %s); %d not started "
          "(deadline), %d failed" % (
        len(results), steps_done, meta["steps_per_s"], meta["accuracy_s"], dev_name, args.jobs,
        "graph loop, %d streams each, data %s" % (args.streams, graph_data) if graph
        else "plain loop", skipped, len(errors)), flush=True)
    amps = args.timing_amps.split(",") if args.timing_amps else [args.amp]
    for job in [dict(j, amp=a) for a in amps for j in configs] if args.timing_steps else []:
        if time.time() - t_start > args.timing_deadline:
            print("timing pass cut by its deadline", flush=True)
            break
        try:
            ms, peak = time_one(job, args.timing_steps)
        except Exception as e:  # noqa: BLE001
            print("timing FAILED %s %s: %s" % (job["variant"], job["dim"], e), flush=True)
            continue
        timing.append({"task": job["task"], "variant": job["variant"], "dim": job["dim"],
                       "setting": list(job["setting"]) if job["setting"] else
                       [job["cfg"]["side"]] * 2,
                       "blocks": list(job["blocks"]) if job["blocks"] else None,
                       "batch": job["cfg"]["batch"], "amp": job["amp"], "ms_per_step": ms,
                       "peak_mib": peak})
        graph_txt = ""
        if graph:   # the same step in the graph loop, one run alone
            try:
                rate, gpeak = graph_loop.time_graph([dict(job, lr=1e-3, seed=0)],
                                                    args.timing_steps, graph_data)
                timing[-1].update(graph_ms_per_step=1e3 / rate, graph_peak_mib=gpeak)
                graph_txt = "; graph loop %.2f ms/step, %.0f MiB" % (1e3 / rate, gpeak)
            except Exception as e:  # noqa: BLE001
                graph_txt = "; graph loop FAILED: %s" % e
        print("timing %-7s %-9s %-8s %-5s dim %3d %s: %.2f ms/step, %.0f MiB%s" % (
            job["task"], "x".join(map(str, timing[-1]["setting"])), job["variant"],
            "x".join(map(str, job["blocks"] or [])), job["dim"], job["amp"], ms, peak, graph_txt),
            flush=True)
        save(path, meta, results, timing)
    meta["elapsed_s"] = time.time() - t_start
    meta["errors"] = errors
    save(path, meta, results, timing)
    if args.check_falls:
        bad = [r for r in results
               if not (r["loss_last"] < 0.97 * r["loss_first"] and r["attn_grad_ok"])]
        for r in bad:
            print("loss did not fall by 3%%, or no finite attention gradient: %s %s %s dim %d "
                  "lr %g seed %d (%.3f -> %.3f, attention gradients %s)" % (
                      r["task"], r["variant"], r["blocks"], r["dim"], r["lr"], r["seed"],
                      r["loss_first"], r["loss_last"], "ok" if r["attn_grad_ok"] else "bad"))
        print("study-smoke: %d of %d runs' loss fell" % (len(results) - len(bad), len(results)))
        return 1 if bad or errors or len(results) != len(runs) else 0
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
