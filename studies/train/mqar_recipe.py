"""CPU search for an MQAR recipe that leaves the plateau in few steps
(docs/TRAINING_STUDY.md, "MQAR recipe"): trains the study's TinyLM with a
softmax attention (torch SDPA by default, no library needed) and reports the
first step at which held-out accuracy passes a threshold.

    /usr/bin/python3 studies/train/mqar_recipe.py --steps 800 --warmup 50
    /usr/bin/python3 studies/train/mqar_recipe.py --batch 64 --pos normal --out-std 0

Every option is one knob; the defaults are the study's MQAR recipe (suite
"full"), the second line the older init (random-normal positions, PyTorch's
init of the output projections) at batch 64.
"""
import argparse
import math
import os
import sys
import time
import types

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import longattn  # noqa: F401  (only variant "softmax"/"linear"/"mhla" need it)
except Exception:  # noqa: BLE001  (SDPA runs without the library)
    sys.modules["longattn"] = types.ModuleType("longattn")
    sys.modules["longattn.nn"] = types.ModuleType("longattn.nn")
    sys.modules["longattn.nn"].MHLA = type("MHLA", (), {})   # isinstance() is never true
import tasks  # noqa: E402
from models import TinyLM  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", default="sdpa")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--filler", default="random", choices=("random", "pad"))
    ap.add_argument("--pos", default="sinusoidal", choices=("normal", "sinusoidal"))
    ap.add_argument("--emb-std", type=float, default=0.02)
    ap.add_argument("--out-std", type=float, default=0.01,
                    help="init std of the blocks' output projections (0: PyTorch's default)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100, help="warm-up steps")
    ap.add_argument("--schedule", default="cosine", choices=("cosine", "constant"))
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--chunk", type=int, default=16)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval", type=int, default=256, help="held-out sequences")
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = TinyLM(a.vocab, a.vocab, a.dim, a.heads, 2, a.variant, True, a.seq,
                   chunk=a.chunk, tie=True, pos_init=a.pos, emb_std=a.emb_std,
                   out_std=a.out_std or None)
    import run_study
    opt = torch.optim.AdamW(model.param_groups(a.wd), lr=a.lr, betas=(0.9, 0.98))
    total = a.steps

    def lr_at(s):
        w = min(1.0, (s + 1) / max(1, a.warmup))
        if a.schedule == "constant":
            return w
        return w * 0.5 * (1 + math.cos(math.pi * min(max(s - a.warmup, 0), total)
                                       / max(1, total - a.warmup)))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    g, eg = torch.Generator(), torch.Generator()
    g.manual_seed(a.seed)
    eg.manual_seed(10_000 + a.seed)
    held = [tasks.mqar_batch(eg, 64, a.seq, a.pairs, a.vocab, a.filler)
            for _ in range(max(1, a.eval // 64))]
    t0 = time.time()
    hit, acc, loss = None, 0.0, float("nan")
    for step in range(1, a.steps + 1):
        x, y = tasks.mqar_batch(g, a.batch, a.seq, a.pairs, a.vocab, a.filler)
        loss = float(run_study.train_step(model, opt, sched, x, y, "none"))
        if step % a.eval_every == 0:
            model.eval()
            c = n = 0
            with torch.no_grad():
                for x, y in held:
                    s = y != tasks.IGNORE
                    c += int((model(x, s).argmax(-1) == y[s]).sum())
                    n += int(s.sum())
            model.train()
            acc = c / n
            print("step %5d loss %.3f acc %.3f (%.0f s)" % (step, loss, acc, time.time() - t0),
                  flush=True)
            if acc > a.target:
                hit = step
                break
    print("RESULT %s steps_to_%.0f%%=%s final_acc=%.3f loss=%.3f wall=%.0fs" % (
        " ".join(argv if argv is not None else sys.argv[1:]), 100 * a.target, hit, acc, loss,
        time.time() - t0), flush=True)


if __name__ == "__main__":
    main()
