"""The graph loop against the plain loop on the GPU (docs/TRAINING_STUDY.md,
"Graph loop"): equal losses, equal data, and step rates.

    python3 studies/train/graph_check.py --equality 64x4:64,1024x64:256 --steps 50 \\
            --bench "64x4:64@1,4,8,16;1024x64:256/64@8" --bench-steps 100 --out DIR

--equality SETTING:DIM,...  for each variant (--variants), seed 0, lr 3e-3 and
    the suite's schedule (2000 steps, 100 warm-up): the plain loop's first
    --steps losses (run_study.train_step), the graph loop's with data
    "captured" (where torch has it) and "eager", and a second plain run (the
    plain loop's own run-to-run spread: atomics in backward passes). Printed:
    the largest relative loss difference over the steps, at the first step,
    and whether the captured batches equal the plain loop's (token sums).
--bench "SETTING:DIM[/BATCH]@C1,C2;...": aggregate steps/s of C runs in one process
    (the variants in turn), each on its stream and graph; C = 1 is the step
    time alone. Beside it the plain loop alone (ms/step over --steps steps).
Writes DIR/graph_check.json. MQAR of suite "full" (batch 256, bf16 autocast).
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import graph_loop  # noqa: E402
import run_study  # noqa: E402


DEVICE = "cuda"


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def mqar_job(setting, dim, variant, seed=0, lr=3e-3, batch=None):
    cfg = dict(run_study.SUITES["full"]["mqar"])
    if batch:
        cfg["batch"] = batch
    return dict(task="mqar", cfg=cfg, variant=variant, dim=dim, setting=tuple(setting),
                blocks=None, device=DEVICE, amp="bf16", lr=lr, seed=seed)


def parse_setting(text):
    """SETTING:DIM[/BATCH] -> ((N, pairs), dim, batch or None)"""
    setting, dim = text.split(":")
    dim, _, batch = dim.partition("/")
    return tuple(int(v) for v in setting.split("x")), int(dim), int(batch) if batch else None


def plain_losses(job, steps):
    """The plain loop's first `steps` losses, token sums and ms/step."""
    torch.manual_seed(job["seed"])
    dev = torch.device(DEVICE)
    model, gen = run_study.build(job["task"], job["cfg"], job["variant"], job["dim"],
                                 job["setting"], job["blocks"], dev)
    g = run_study.generator(dev, job["seed"])
    opt, sched = run_study.make_optimizer(model, job["lr"], job["cfg"]["steps"])
    losses, sums = [], []
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        x, y = gen(g, job["cfg"]["batch"])
        sums.append(x.sum())
        losses.append(run_study.train_step(model, opt, sched, x, y, job["amp"]).detach())
    sync()
    ms = 1e3 * (time.perf_counter() - t0) / steps
    return torch.stack(losses).float().cpu(), torch.stack(sums).cpu(), ms


def graph_losses(job, steps, data):
    run = graph_loop.GraphRun(job, data, record_data=True)
    for _ in range(steps):
        run.step()
    sync()
    out = run.losses().float().cpu(), run.data_hist[:steps].cpu(), run.graph is not None
    run.release()
    return out


def rel(a, b):
    return float(((a - b).abs() / b.abs().clamp_min(1e-12)).max())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--equality", default="64x4:64,1024x64:256")
    ap.add_argument("--variants", default="softmax,linear,mhla")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--bench", default="64x4:64@1,4,8,16")
    ap.add_argument("--bench-steps", type=int, default=100)
    ap.add_argument("--out", default=None)
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds: no new item after")
    ap.add_argument("--no-repeat", dest="repeat", action="store_false",
                    help="no second plain run (its run-to-run spread)")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the script (no graphs)")
    a = ap.parse_args(argv)
    global DEVICE
    DEVICE = a.device
    run_study.worker_init(torch.get_num_threads())
    t_start = time.time()
    variants = a.variants.split(",")
    out = {"device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
           "torch": torch.__version__, "argv": sys.argv[1:],
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "captured_data": graph_loop.can_capture_data(), "equality": [], "bench": []}

    def save():
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            with open(os.path.join(a.out, "graph_check.json"), "w") as f:
                json.dump(out, f, indent=1)

    modes = [m for m in graph_loop.DATA_MODES if m != "captured" or graph_loop.can_capture_data()]
    for item in filter(None, a.equality.split(",")):
        setting, dim, batch = parse_setting(item)
        for v in variants:
            if time.time() - t_start > a.deadline:
                print("equality: deadline", flush=True)
                break
            job = mqar_job(setting, dim, v, batch=batch)
            row = {"setting": list(setting), "dim": dim, "variant": v, "steps": a.steps,
                   "batch": job["cfg"]["batch"]}
            try:
                p, psum, row["plain_ms"] = plain_losses(job, a.steps)
                if a.repeat:
                    p2, _, _ = plain_losses(job, a.steps)
                    row["plain_repeat_rel"] = rel(p2, p)
                row["loss_first"], row["loss_last"] = float(p[0]), float(p[-1])
                for m in modes:
                    gl, gsum, captured = graph_losses(job, a.steps, m)
                    row[m] = {"rel_max": rel(gl, p), "rel_first": rel(gl[:1], p[:1]),
                              "graph": captured, "data_equal": bool(torch.equal(gsum, psum))}
            except Exception as e:  # noqa: BLE001
                row["error"] = "%s: %s" % (type(e).__name__, e)
            out["equality"].append(row)
            save()
            print("equal %-8s %-5s dim %3d: loss %.3f -> %.3f, plain %.2f ms/step, "
                  "plain vs plain %.1e | %s" % (
                      "x".join(map(str, setting)), v, dim, row.get("loss_first", 0),
                      row.get("loss_last", 0), row.get("plain_ms", 0),
                      row.get("plain_repeat_rel", -1),
                      row.get("error") or " | ".join(
                          "%s: max %.1e first %.1e data %s graph %s" % (
                              m, row[m]["rel_max"], row[m]["rel_first"],
                              "=" if row[m]["data_equal"] else "DIFFERS",
                              "yes" if row[m]["graph"] else "NO") for m in modes)),
                  flush=True)
    for item in filter(None, a.bench.split(";")):
        spec, counts = item.split("@")
        setting, dim, batch = parse_setting(spec)
        tokens = setting[0] * (batch or 256)
        steps = a.bench_steps if tokens <= 65536 else max(10, a.bench_steps // 4)
        # one run alone: each variant; more: the variants in turn
        cs = [int(x) for x in counts.split(",")]
        groups = ([(1, [v]) for v in variants] if 1 in cs else []) + [
            (c, [variants[i % len(variants)] for i in range(c)]) for c in cs if c > 1]
        for c, vs in groups:
            if time.time() - t_start > a.deadline:
                print("bench: deadline", flush=True)
                break
            jobs = [mqar_job(setting, dim, v, seed=i, batch=batch) for i, v in enumerate(vs)]
            row = {"setting": list(setting), "dim": dim, "runs": c, "steps": steps,
                   "batch": jobs[0]["cfg"]["batch"],
                   "variants": [j["variant"] for j in jobs]}
            try:
                rate, peak = graph_loop.time_graph(jobs, steps,
                                                   "eager" if DEVICE == "cpu" else None)
                row.update(steps_per_s=rate, peak_mib=peak, ms_per_round=1e3 * c / rate)
            except Exception as e:  # noqa: BLE001
                row["error"] = "%s: %s" % (type(e).__name__, e)
            out["bench"].append(row)
            save()
            print("bench %-8s dim %3d batch %3d, %2d runs%s: %s" % (
                "x".join(map(str, setting)), dim, row["batch"], c,
                " (%s)" % vs[0] if c == 1 else "",
                row.get("error") or
                "%.0f steps/s in all (%.2f ms per step of each run), peak %.0f MiB" % (
                    row["steps_per_s"], row["ms_per_round"], row["peak_mib"])), flush=True)
    out["elapsed_s"] = time.time() - t_start
    save()
    print("graph_check: %.0f s" % out["elapsed_s"], flush=True)


if __name__ == "__main__":
    main()
