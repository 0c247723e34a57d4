"""Tables (mean ± std over seeds, best learning rate of the grid) and plots
from run_study.py's results.json.

    python3 studies/train/report.py RESULTS.json --md OUT.md --plots DIR
"""
import argparse
import collections
import json
import os
import statistics


def key_of(r):
    setting = "x".join(str(s) for s in r["setting"])
    return (r["task"], setting, r["dim"], r["variant"], "x".join(map(str, r["blocks"] or [])))


def best_of_grid(runs):
    """{key: (lr, [runs of that lr])}, the lr with the best mean accuracy."""
    by = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in runs:
        by[key_of(r)][r["lr"]].append(r)
    out = {}
    for k, lrs in by.items():
        lr = max(lrs, key=lambda x: statistics.fmean(r["acc"] for r in lrs[x]))
        out[k] = (lr, lrs[lr])
    return out


def ms(xs):
    m = statistics.fmean(xs)
    s = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return m, s


def table(best):
    lines = ["| task | setting | dim | attention | blocks | best lr | held-out accuracy "
             "(mean ± std) | seeds | ms/step | peak MiB | attn params |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for k in sorted(best):
        lr, rs = best[k]
        m, s = ms([r["acc"] for r in rs])
        lines.append("| %s | %s | %d | %s | %s | %.0e | %.3f ± %.3f | %d | %.1f | %.0f | %d |" % (
            k[0], k[1], k[2], k[3], k[4] or "—", lr, m, s, len(rs),
            statistics.median(r["ms_per_step"] for r in rs),
            max(r["peak_mib"] for r in rs), rs[0]["attn_params"]))
    return "\n".join(lines)


def plots(best, folder):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(folder, exist_ok=True)
    made = []
    settings = sorted({k[1] for k in best if k[0] == "mqar"}, key=lambda s: int(s.split("x")[0]))
    if settings:
        fig, axes = plt.subplots(1, len(settings), figsize=(4 * len(settings), 3.2), squeeze=False)
        for ax, st in zip(axes[0], settings):
            for var in sorted({k[3] for k in best if k[0] == "mqar"}):
                ks = sorted(k for k in best if k[0] == "mqar" and k[1] == st and k[3] == var)
                if not ks:
                    continue
                dims = [k[2] for k in ks]
                mm = [ms([r["acc"] for r in best[k][1]]) for k in ks]
                ax.errorbar(dims, [a for a, _ in mm], yerr=[b for _, b in mm], marker="o",
                            label=var, capsize=3)
            ax.set_xscale("log", base=2)
            ax.set_title("MQAR len x pairs = %s" % st)
            ax.set_xlabel("model dim")
            ax.set_ylabel("held-out accuracy")
            ax.set_ylim(-0.02, 1.02)
        axes[0][0].legend()
        fig.tight_layout()
        p = os.path.join(folder, "study_mqar_accuracy.png")
        fig.savefig(p, dpi=110)
        made.append(p)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, task in zip(axes, ("mqar", "nearest")):
        ks = [k for k in best if k[0] == task]
        if not ks:
            continue
        dim = sorted({k[2] for k in ks})[len({k[2] for k in ks}) // 2]
        st = sorted({k[1] for k in ks})[-1]
        for k in sorted(k for k in ks if k[2] == dim and k[1] == st):
            curve = best[k][1][0]["curve"]
            ax.plot(curve, label=k[3] + (" " + k[4] if k[4] else ""))
        ax.set_title("%s %s, dim %d (seed %d)" % (task, st, dim, best[ks[0]][1][0]["seed"]))
        ax.set_xlabel("step (x %d)" % max(1, best[ks[0]][1][0]["steps"] // 100))
        ax.set_ylabel("training loss")
        ax.legend(fontsize=7)
    fig.tight_layout()
    p = os.path.join(folder, "study_curves.png")
    fig.savefig(p, dpi=110)
    made.append(p)
    return made


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--md", default=None)
    ap.add_argument("--plots", default=None)
    a = ap.parse_args()
    with open(a.results) as f:
        res = json.load(f)
    best = best_of_grid(res["runs"])
    t = table(best)
    print(t)
    if a.md:
        with open(a.md, "w") as f:
            f.write(t + "\n")
    if a.plots:
        for p in plots(best, a.plots):
            print("wrote", p)


if __name__ == "__main__":
    main()
