"""Tables (mean ± std over seeds, best learning rate of the grid), the
reproducibility check and plots from run_study.py's results.json files.

    python3 studies/train/report.py A.json [B.json] --md OUT.md --plots DIR

With two files (the same study with two seed sets) it also lists, for every
pair of variants of the same task, setting and dim whose gap in A exceeds
2 std (the larger of the two variants' seed std), whether B orders them the
same way. Runs cut by their wall-time limit are left out (they did not train
the planned steps). ms/step and peak memory come from the timing pass of either
file (one process alone on the GPU).
"""
import argparse
import collections
import itertools
import json
import os
import statistics


def key_of(r):
    setting = "x".join(str(s) for s in r["setting"])
    return (r["task"], setting, r["dim"], r["variant"], "x".join(map(str, r["blocks"] or [])))


def label(k):
    return k[3] + (" " + k[4] if k[4] else "")


def best_of_grid(runs):
    """{key: (lr, [runs of that lr])}, the lr with the best mean accuracy."""
    by = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in runs:
        if not r.get("cut"):
            by[key_of(r)][r["lr"]].append(r)
    out = {}
    for k, lrs in by.items():
        lr = max(sorted(lrs), key=lambda x: statistics.fmean(r["acc"] for r in lrs[x]))
        out[k] = (lr, lrs[lr])
    return out


def ms(xs):
    m = statistics.fmean(xs)
    s = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return m, s


def timing_of(res):
    t = {}
    for x in res.get("timing", []):
        k = (x["task"], "x".join(map(str, x["setting"])), x["dim"], x["variant"],
             "x".join(map(str, x["blocks"] or [])))
        t[k] = x
    return t


def table(best, timing, lrs_of):
    lines = ["| task | setting | dim | attention | best lr (grid) | held-out accuracy "
             "(mean ± std) | seeds | ms/step | peak MiB | attn params | params |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    def step(t):  # the plain loop's ms/step, and the graph loop's where it was timed
        if not t:
            return "—", "—"
        if t.get("graph_ms_per_step") is None:
            return "%.1f" % t["ms_per_step"], "%.0f" % t["peak_mib"]
        return ("%.1f (graph %.2f)" % (t["ms_per_step"], t["graph_ms_per_step"]),
                "%.0f (graph %.0f)" % (t["peak_mib"], t["graph_peak_mib"]))
    for k in sorted(best, key=lambda k: (k[0], k[1], k[2], k[3], k[4])):
        lr, rs = best[k]
        m, s = ms([r["acc"] for r in rs])
        t = timing.get(k)
        lines.append("| %s | %s | %d | %s | %.0e (%s) | %.3f ± %.3f | %d | %s | %s | %d | %d |" % (
            k[0], k[1], k[2], label(k), lr, ", ".join("%.0e" % x for x in lrs_of(k)), m, s,
            len(rs), *step(t), rs[0]["attn_params"], rs[0]["params"]))
    return "\n".join(lines)


def repro(best_a, best_b):
    """Pairs whose gap in A exceeds 2 std: does B order them the same way?"""
    lines = ["| task | setting | dim | pair (A's better first) | A: gap (2 std) | B: gap (2 std) | "
             "order held |", "|---|---|---|---|---|---|---|"]
    groups = collections.defaultdict(list)
    for k in best_a:
        groups[k[:3]].append(k)
    held = total = 0
    for g in sorted(groups):
        for ka, kb in itertools.combinations(sorted(groups[g]), 2):
            if ka not in best_b or kb not in best_b:
                continue
            (ma, sa), (mb, sb) = (ms([r["acc"] for r in best_a[k][1]]) for k in (ka, kb))
            if abs(ma - mb) <= 2 * max(sa, sb):
                continue
            if mb > ma:
                ka, kb, ma, mb, sa, sb = kb, ka, mb, ma, sb, sa
            (na, ta), (nb, tb) = (ms([r["acc"] for r in best_b[k][1]]) for k in (ka, kb))
            ok = na > nb
            held += ok
            total += 1
            lines.append("| %s | %s | %d | %s > %s | %.3f (%.3f) | %+.3f (%.3f) | %s |" % (
                g[0], g[1], g[2], label(ka), label(kb), ma - mb, 2 * max(sa, sb), na - nb,
                2 * max(ta, tb), "yes" if ok else "**no**"))
    return "\n".join(lines), held, total


def cut_best(runs):
    """{key: [cut runs of the lr with the best mean accuracy]}"""
    return {k: rs for k, (lr, rs) in best_of_grid([dict(r, cut=False) for r in runs
                                                   if r.get("cut")]).items()}


def plots(best, folder, other=None, cut=None, prefix="study_"):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(folder, exist_ok=True)
    made = []
    sets = [("seeds A", best, "-")] + ([("seeds B", other, "--")] if other else [])
    mq = [k for k in best if k[0] == "mqar"]
    settings = sorted({k[1] for k in mq}, key=lambda s: int(s.split("x")[0]))
    variants = sorted({k[3] for k in mq})
    colour = {v: "C%d" % i for i, v in enumerate(["softmax", "linear", "mhla", "focused"])}
    if settings:
        fig, axes = plt.subplots(1, len(settings), figsize=(4.5 * len(settings), 3.4),
                                 squeeze=False)
        for ax, st in zip(axes[0], settings):
            for (name, b, ls), var in itertools.product(sets, variants):
                ks = sorted(k for k in b if k[0] == "mqar" and k[1] == st and k[3] == var)
                if ks:
                    mm = [ms([r["acc"] for r in b[k][1]]) for k in ks]
                    ax.errorbar([k[2] for k in ks], [a for a, _ in mm], yerr=[s for _, s in mm],
                                marker="o", ls=ls, color=colour.get(var), capsize=3,
                                label="%s (%s)" % (var, name))
            ax.set_xscale("log", base=2)
            ax.set_title("MQAR, length x pairs = %s, vocab 8192" % st, fontsize=9)
            ax.set_xlabel("model dim")
            ax.set_ylabel("held-out accuracy")
            ax.set_ylim(-0.02, 1.02)
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        p = os.path.join(folder, prefix + "mqar_accuracy_vs_dim.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p)
    if len(settings) > 1:
        dims = sorted({k[2] for k in mq})  # one panel per model dim
        fig, axes = plt.subplots(1, len(dims), figsize=(4.5 * len(dims), 3.4), squeeze=False)
        for ax, dim in zip(axes[0], dims):
            for var in variants:
                ks = sorted((k for k in best if k[0] == "mqar" and k[2] == dim and k[3] == var),
                            key=lambda k: int(k[1].split("x")[0]))
                mm = [ms([r["acc"] for r in best[k][1]]) for k in ks]
                ax.errorbar([int(k[1].split("x")[0]) for k in ks], [a for a, _ in mm],
                            yerr=[s for _, s in mm], marker="o", color=colour.get(var), label=var)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sequence length")
            ax.set_ylabel("held-out accuracy")
            ax.set_title("MQAR, dim %d" % dim)
            ax.legend(fontsize=7)
        fig.tight_layout()
        p = os.path.join(folder, prefix + "mqar_accuracy_vs_length.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p)
    two_d = sorted({k[:3] for k in best if k[0] == "nearest"})
    if two_d:
        fig, axes = plt.subplots(1, len(two_d), figsize=(5 * len(two_d), 3.4), squeeze=False)
        for ax, g in zip(axes[0], two_d):
            ks = sorted(k for k in best if k[:3] == g)
            for j, (name, b, _) in enumerate(sets):
                for i, k in enumerate(ks):
                    if k not in b:
                        continue
                    accs = [r["acc"] for r in b[k][1]]
                    x = i + (j - 0.5 * (len(sets) - 1)) * 0.35
                    ax.bar(x, statistics.fmean(accs), width=0.33, color=colour.get(k[3]),
                           alpha=0.45 if j else 0.85, label=name if i == 0 else None)
                    ax.plot([x] * len(accs), accs, "k.", ms=4)
            ax.set_xticks(range(len(ks)))
            ax.set_xticklabels([label(k) for k in ks], fontsize=8)
            ax.set_ylim(0, 1.02)
            ax.set_ylabel("held-out accuracy")
            ax.set_title("2-D nearest-marker task %s, dim %d (dots: seeds; left A, right B)"
                         % (g[1], g[2]), fontsize=8)
        fig.tight_layout()
        p = os.path.join(folder, prefix + "nearest_accuracy.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p)
    cut = cut or {}
    groups = sorted({k[:3] for k in best} | {k[:3] for k in cut})
    ncol = min(3, len(groups))  # rows of at most 3 panels
    nrow = (len(groups) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.6 * ncol, 3.2 * nrow), squeeze=False)
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)
    for ax, g in zip(axes.flat, groups):
        for k in sorted(k for k in best if k[:3] == g):
            for r in best[k][1]:
                every = r.get("curve_every", 1)
                xs = [every * (i + 1) for i in range(len(r["curve"]))]
                ax.plot(xs, r["curve"], color=colour.get(k[3]), lw=1,
                        ls=":" if k[4] == "8x8" else "-",
                        label=label(k) if r is best[k][1][0] else None)
        for k in sorted(k for k in cut if k[:3] == g):
            for r in cut[k]:
                xs = [r["curve_every"] * (i + 1) for i in range(len(r["curve"]))]
                ax.plot(xs, r["curve"], color=colour.get(k[3]), lw=1, ls="--",
                        label="%s (cut at %d of %d steps)" % (label(k), r["steps"],
                                                              r["steps_planned"])
                        if r is cut[k][0] else None)
        ax.set_title("%s %s, dim %d (best lr, every seed)" % g, fontsize=8)
        ax.set_xlabel("step")
        ax.set_ylabel("training loss")
        ax.legend(fontsize=6)
    fig.tight_layout()
    p = os.path.join(folder, prefix + "curves.png")
    fig.savefig(p, dpi=100)
    plt.close(fig)
    made.append(p)
    return made


def load(paths, task=None):
    """One results.json, or several joined by commas (parts of one seed set run in
    separate calls: their runs and timing rows are concatenated, the first's
    metadata kept); with `task`, only that task's runs and timing rows."""
    parts = []
    for p in paths.split(","):
        with open(p) as f:
            parts.append(json.load(f))
    res = dict(parts[0])
    res["runs"] = [r for x in parts for r in x["runs"]]
    res["timing"] = [t for x in parts for t in x.get("timing", [])]
    res["lr_from"] = any(x.get("lr_from") for x in parts)
    if task:
        res["runs"] = [r for r in res["runs"] if r["task"] == task]
        res["timing"] = [t for t in res["timing"] if t["task"] == task]
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", help="results.json (several: joined by commas)")
    ap.add_argument("other", nargs="?", default=None,
                    help="the same study with other seeds (several files: joined by commas)")
    ap.add_argument("--md", default=None)
    ap.add_argument("--plots", default=None)
    ap.add_argument("--prefix", default="study_", help="file name prefix of the plots")
    ap.add_argument("--task", default=None, help="only this task's runs (mqar or nearest)")
    a = ap.parse_args()
    res = load(a.results, a.task)
    best = best_of_grid(res["runs"])
    grid = collections.defaultdict(set)
    for r in res["runs"]:
        grid[key_of(r)].add(r["lr"])
    timing = timing_of(res)
    res_b = other = None
    if a.other:
        res_b = load(a.other, a.task)
        other = best_of_grid(res_b["runs"])
        timing = {**timing_of(res_b), **timing}
    out = ["Seeds %s (%s, %s, amp %s):" % (res["seeds"], res["device"], res["date"], res["amp"]),
           "", table(best, timing, lambda k: sorted(grid[k]))]
    if res_b:
        out += ["", "Seeds %s (%s, %s; learning rates: %s):" % (
            res_b["seeds"], res_b["device"], res_b["date"],
            "A's best per row" if res_b.get("lr_from") else "the grid"), "",
            table(other, timing, lambda k: sorted({r["lr"] for r in res_b["runs"]
                                                           if key_of(r) == k}))]
        t, held, total = repro(best, other)
        out += ["", "Reproducibility: %d of %d orderings with a gap over 2 std held." % (
            held, total), "", t]
    cut = collections.defaultdict(list)
    for name, x in (("A", res), ("B", res_b)):
        for r in (x or {"runs": []})["runs"]:
            if r.get("cut"):
                cut[(name,) + key_of(r) + (r["lr"],)].append(r)
    if cut:
        out += ["", "Left out of the tables above: runs cut by their wall-time limit "
                "(not comparable: fewer steps, learning rate not annealed):", "",
                "| seeds | task | setting | dim | attention | lr | steps done / planned | "
                "accuracy when cut (mean ± std) | runs |", "|---|---|---|---|---|---|---|---|---|"]
        for k in sorted(cut):
            rs = cut[k]
            m, sd = ms([r["acc"] for r in rs])
            out.append("| %s | %s | %s | %d | %s | %.0e | %d / %d | %.3f ± %.3f | %d |" % (
                k[0], k[1], k[2], k[3], label(k[1:6]), k[6], min(r["steps"] for r in rs),
                rs[0]["steps_planned"], m, sd, len(rs)))
    text = "\n".join(out)
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text + "\n")
    if a.plots:
        for p in plots(best, a.plots, other, cut_best(res["runs"]), a.prefix):
            print("wrote", p)


if __name__ == "__main__":
    main()
