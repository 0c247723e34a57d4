"""The training study: MHLA against linear, focused and softmax attention,
trained on tasks made to separate the mechanisms (docs/TRAINING_STUDY.md).

    python3 studies/train/run_study.py --suite smoke            # CPU, < 2 min, CI
    python3 studies/train/run_study.py --suite full --out DIR   # the study (H200)

Protocol: per task and setting, every variant gets the same steps, batch,
optimizer (AdamW, cosine schedule with warm-up) and the same learning-rate
grid; the best learning rate of the grid (by mean held-out accuracy over the
seeds) is reported, as mean ± std over the seeds. Held-out data comes from a
generator seeded apart from the training stream.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks  # noqa: E402
from models import TinyLM  # noqa: E402

SUITES = {
    "smoke": {
        "mqar": {"settings": [(64, 4)], "dims": [32], "variants": ["softmax", "linear", "mhla"],
                 "steps": 60, "batch": 16, "lrs": [3e-3], "chunk": {64: 16}, "eval": 64,
                 "vocab": 256},
        "nearest": {"side": 8, "dims": [32], "blocks": [(2, 2)], "queries": 8,
                    "variants": ["softmax", "linear", "focused", "mhla"], "steps": 60,
                    "batch": 8, "lrs": [3e-3], "eval": 32},
        "seeds": [0],
    },
    # a first look on the GPU in a minute or two: one seed, one learning rate
    "pilot": {
        "mqar": {"settings": [(256, 16)], "dims": [64, 128], "variants": ["softmax", "linear", "mhla"],
                 "steps": 400, "batch": 64, "lrs": [3e-3], "chunk": {256: 32}, "eval": 256,
                 "vocab": 8192},
        "nearest": {"side": 32, "dims": [64], "blocks": [(4, 4), (8, 8)], "queries": 64,
                    "variants": ["softmax", "linear", "focused", "mhla"], "steps": 400,
                    "batch": 32, "lrs": [3e-3], "eval": 128},
        "seeds": [0],
    },
    "full": {
        "mqar": {"settings": [(64, 4), (256, 16), (1024, 64)], "dims": [64, 128, 256],
                 "variants": ["softmax", "linear", "mhla"], "steps": 1500, "batch": 64,
                 "lrs": [1e-3, 3e-3], "chunk": {64: 16, 256: 32, 1024: 64}, "eval": 512,
                 "vocab": 8192},
        "nearest": {"side": 32, "dims": [64, 128], "blocks": [(4, 4), (8, 8)], "queries": 64,
                    "variants": ["softmax", "linear", "focused", "mhla"], "steps": 1500,
                    "batch": 32, "lrs": [1e-3, 3e-3], "eval": 256},
        "seeds": [0, 1, 2],
    },
}


def heads_for(dim):
    return max(1, dim // 32)


def train_one(task, cfg, variant, dim, lr, seed, device, setting, blocks=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    erng = np.random.default_rng(10_000 + seed)
    if task == "mqar":
        seq_len, pairs = setting
        vocab = classes = cfg["vocab"]
        model = TinyLM(vocab, classes, dim, heads_for(dim), 2, variant, True, seq_len,
                       chunk=cfg["chunk"][seq_len])
        gen = lambda r, b: tasks.mqar_batch(r, b, seq_len, pairs, vocab)  # noqa: E731
    else:
        side = cfg["side"]
        colours, labels = 4, 8
        vocab, classes = tasks.nearest_vocab(colours, labels), labels
        model = TinyLM(vocab, classes, dim, heads_for(dim), 2, variant, False, side * side,
                       grid=(side, side), blocks=blocks)
        gen = lambda r, b: tasks.nearest_batch(r, b, side, colours, labels,  # noqa: E731
                                               queries=cfg["queries"])
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, betas=(0.9, 0.98))
    steps, warm = cfg["steps"], max(1, cfg["steps"] // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    losses, times = [], []
    for step in range(steps):
        x, y = gen(rng, cfg["batch"])
        x, y = x.to(device), y.to(device)
        t0 = time.perf_counter()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1),
                               ignore_index=tasks.IGNORE)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            break
    # the attention layers' own parameters got finite, non-zero gradients in
    # the last step (the embeddings and head alone could make the loss fall)
    attn = [q for blk in model.blocks for q in blk.attn.parameters()]
    attn_grad_ok = bool(attn) and all(q.grad is not None and bool(torch.isfinite(q.grad).all())
                                      for q in attn) and any(float(q.grad.abs().sum()) > 0
                                                             for q in attn)
    model.eval()
    correct = total = 0
    with torch.no_grad():
        left = cfg["eval"]
        while left > 0:
            b = min(left, cfg["batch"])
            x, y = gen(erng, b)
            x, y = x.to(device), y.to(device)
            pred = model(x).argmax(-1)
            m = y != tasks.IGNORE
            correct += int((pred[m] == y[m]).sum())
            total += int(m.sum())
            left -= b
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    return {
        "task": task, "setting": list(setting) if task == "mqar" else [cfg["side"]] * 2,
        "blocks": list(blocks) if blocks else None, "variant": variant, "dim": dim,
        "heads": heads_for(dim), "lr": lr, "seed": seed, "steps": len(losses),
        "loss_first": statistics.fmean(losses[:5]), "loss_last": statistics.fmean(losses[-5:]),
        "curve": losses[:: max(1, len(losses) // 100)], "acc": correct / max(1, total),
        "ms_per_step": 1e3 * statistics.median(times[len(times) // 4:]),
        "peak_mib": peak / 2**20, "attn_grad_ok": attn_grad_ok,
        "params": sum(p.numel() for p in model.parameters()),
        "attn_params": model.attention_params(),
    }


def runs(suite):
    s = SUITES[suite]
    m = s["mqar"]
    for setting in m["settings"]:
        for dim in m["dims"]:
            for variant in m["variants"]:
                yield "mqar", m, variant, dim, setting, None
    n = s["nearest"]
    for dim in n["dims"]:
        for variant in n["variants"]:
            for blocks in (n["blocks"] if variant == "mhla" else [None]):
                yield "nearest", n, variant, dim, None, blocks


def save(args, device, seeds, results, elapsed):
    """results.json, rewritten after every run (a run cut short keeps what it did)."""
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"suite": args.suite, "device": str(device), "seeds": seeds,
                   "torch": torch.__version__, "elapsed_s": elapsed, "runs": results}, f, indent=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=sorted(SUITES), default="smoke")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default=None, help="folder for results.json (default: none)")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds (default: the suite's)")
    ap.add_argument("--only", default=None, help="task to run (mqar or nearest)")
    ap.add_argument("--check-falls", action="store_true",
                    help="exit 1 unless every run's loss fell by 3%% and its attention layers got "
                         "finite, non-zero gradients (the smoke test)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    seeds = ([int(s) for s in args.seeds.split(",")] if args.seeds
             else SUITES[args.suite]["seeds"])
    results, t_start = [], time.time()
    for task, cfg, variant, dim, setting, blocks in runs(args.suite):
        if args.only and task != args.only:
            continue
        for lr in cfg["lrs"]:
            for seed in seeds:
                r = train_one(task, cfg, variant, dim, lr, seed, device, setting, blocks)
                results.append(r)
                print("%-7s %-12s %-8s %-7s dim %3d lr %.0e seed %d: loss %.3f -> %.3f acc %.3f "
                      "%.1f ms/step" % (task, r["setting"], variant, r["blocks"] or "", dim, lr,
                                        seed, r["loss_first"], r["loss_last"], r["acc"],
                                        r["ms_per_step"]), flush=True)
                if args.out:
                    save(args, device, seeds, results, time.time() - t_start)
    elapsed = time.time() - t_start
    print("%d runs in %.1f s on %s" % (len(results), elapsed, device))
    if args.out:
        save(args, device, seeds, results, elapsed)
    if args.check_falls:
        bad = [r for r in results
               if not (r["loss_last"] < 0.97 * r["loss_first"] and r["attn_grad_ok"])]
        for r in bad:
            print("loss did not fall by 3%%, or no finite attention gradient: %s %s %s dim %d "
                  "lr %g seed %d (%.3f -> %.3f, attention gradients %s)" % (
                      r["task"], r["variant"], r["blocks"], r["dim"], r["lr"], r["seed"],
                      r["loss_first"], r["loss_last"], "ok" if r["attn_grad_ok"] else "bad"))
        print("study-smoke: %d of %d runs' loss fell" % (len(results) - len(bad), len(results)))
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
