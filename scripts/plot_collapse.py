#!/usr/bin/python3
"""Plot the output of `longattn collapse` (docs/COLLAPSE.md).

usage: plot_collapse.py COLLAPSE.json OUT.png

Two panels against N (log2 axis): numerical rank of the attention map (with
the rank bounds d and sum_b min(n_b, d) dashed) and mean row entropy (with
ln N, the uniform distribution). Exit 3 when matplotlib is missing, 2 on a
bad JSON file."""
import json
import math
import os
import sys


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_collapse.py: matplotlib is not installed", file=sys.stderr)
        return 3
    try:
        with open(argv[1]) as f:
            data = json.load(f)
        rows = data["results"]
    except (OSError, ValueError, KeyError) as e:
        print(f"plot_collapse.py: {argv[1]}: {e}", file=sys.stderr)
        return 2

    variants = []
    for r in rows:
        if r["variant"] not in variants:
            variants.append(r["variant"])
    style = {"softmax": ("k", "o"), "linear": ("tab:red", "s"),
             "focused-flatten": ("tab:orange", "D"), "mhla-4": ("tab:cyan", "^"),
             "mhla-16": ("tab:blue", "v"), "mhla-64": ("tab:purple", "P")}

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    for v in variants:
        rs = sorted((r for r in rows if r["variant"] == v), key=lambda r: r["N"])
        Ns = [r["N"] for r in rs]
        color, marker = style.get(v, (None, "x"))
        # softmax is drawn wide and underneath: it is full rank, and MHLA with
        # many blocks lies on top of it
        wide = dict(lw=4, alpha=0.35, zorder=1) if v == "softmax" else dict(zorder=3)
        ax1.plot(Ns, [r["rank"] for r in rs], marker=marker, color=color, label=v, **wide)
        if v == "linear" or v.startswith("mhla"):
            ax1.plot(Ns, [r["rank_bound"] for r in rs], ls="--", lw=0.8, color=color, alpha=0.6)
        ax2.plot(Ns, [r["entropy"] for r in rs], marker=marker, color=color, label=v)
    Ns = sorted({r["N"] for r in rows})
    ax1.plot(Ns, Ns, ls=":", color="gray", lw=0.8, label="N (full rank)")
    ax2.plot(Ns, [math.log(n) for n in Ns], ls=":", color="gray", lw=0.8, label="ln N (uniform)")
    d = data.get("d")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
        ax.grid(True, alpha=0.3)
    ax1.set_yscale("log", base=2)
    ax1.set_ylabel(f"numerical rank (rtol {data.get('rtol', 1e-6):g})")
    ax1.set_title(f"rank of the attention map (d = {d}; dashed: bounds)")
    ax2.set_ylabel("mean row entropy (nats)")
    ax2.set_title("entropy of the attention rows")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    g = data.get("generator", {})
    fig.suptitle("Global context collapse: %s (clusters=%s, noise=%s, gauss_frac=%s, seed=%s)"
                 % (g.get("kind", "?"), g.get("clusters"), g.get("noise"), g.get("gauss_frac"),
                    g.get("seed")), fontsize=10)
    fig.tight_layout()
    tmp = argv[2] + ".tmp.%d.png" % os.getpid()
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, argv[2])
    except OSError as e:
        print(f"plot_collapse.py: {argv[2]}: {e}", file=sys.stderr)
        if os.path.exists(tmp):
            os.unlink(tmp)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
