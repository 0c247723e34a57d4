#!/usr/bin/python3
"""Draw the figures of `longattn eval-index` from its JSON (--json-out).

usage: /usr/bin/python3 scripts/plot_eval_index.py RESULTS.json PREFIX

PREFIX_needles.png  needle retrieval heatmaps (rows: span / isolated needles;
                    columns: DSA, block-sparse, HISA), context length against
                    needle depth, as in the HISA paper's NIAH figure.
PREFIX_overlap.png  IoU and recall against DSA, and time per query, by L, for
                    every method (the B sweep at a fixed budget m*B included).
Synthetic-input JSON only for the heatmaps; .npy-input JSON gets the overlap
figure only. Needs python3-matplotlib (Debian)."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402


def label_L(L):
    return f"{L // 1024}K" if L >= 1024 and L % 1024 == 0 else str(L)


def needles(res, path):
    main = res["main"]
    by_name = {m["name"]: m for m in res["methods"]}
    cols = [("DSA", by_name[main["dsa"]]), ("Block-sparse", by_name[main["blocksparse"]]),
            ("HISA", by_name[main["hisa"]])]
    kinds = [("span", "needle inside an attended span"),
             ("isolated", "isolated needle in a low-scoring block")]
    Ls, depths = res["L"], res["depths"]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.4), constrained_layout=True)
    for r, (kind, title) in enumerate(kinds):
        for c, (name, m) in enumerate(cols):
            ax = axes[r][c]
            data = np.array(m[f"retrieval_{kind}"])  # [L, depth]
            im = ax.imshow(data, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto", origin="lower")
            for i in range(data.shape[0]):
                for j in range(data.shape[1]):
                    ax.text(j, i, f"{data[i, j]:.2f}".replace("1.00", "1").replace("0.00", "0"),
                            ha="center", va="center", fontsize=6.5)
            ax.set_xticks(range(len(depths)))
            ax.set_xticklabels([f"{int(round(d * 100))}" for d in depths], fontsize=7)
            ax.set_yticks(range(len(Ls)))
            ax.set_yticklabels([label_L(L) for L in Ls], fontsize=8)
            ax.set_xlabel("needle depth (%)", fontsize=8)
            if c == 0:
                ax.set_ylabel(f"{title}\ncontext length L", fontsize=8)
            ax.set_title(f"{name}: {m['name']}", fontsize=9)
    fig.colorbar(im, ax=axes, shrink=0.6, label="needle retrieval rate")
    g = res.get("generator", {})
    fig.suptitle(f"Needle retrieval (top-{res['topk']}; synthetic indexer inputs, T={g.get('T')} queries, "
                 f"HI={g.get('HI')}, dI={g.get('dI')})", fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def overlap(res, path):
    Ls = res["L"]
    x = np.arange(len(Ls))
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2), constrained_layout=True)
    for m in res["methods"]:
        style = "-o" if m["kind"] == "hisa" else ("--s" if m["kind"] == "blocksparse" else ":^")
        for ax, key in zip(axes, ("iou", "recall", "ms_per_query")):
            ax.plot(x, m[key], style, label=m["name"], markersize=4)
    for ax, title in zip(axes, ("IoU against DSA's selection", "recall of DSA's selection",
                                "time per query (ms, CPU)")):
        ax.set_xticks(x)
        ax.set_xticklabels([label_L(L) for L in Ls])
        ax.set_xlabel("context length L")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(0, 1.02)
    axes[1].set_ylim(0, 1.02)
    axes[2].set_yscale("log")
    axes[2].yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    axes[2].yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Selection overlap and cost (top-{res['topk']}, HISA budget m*B = {res['budget']}; "
                 f"{res.get('threads', '?')} threads)", fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        res = json.load(f)
    prefix = argv[2]
    made = []
    if res.get("source") == "synthetic":
        needles(res, prefix + "_needles.png")
        made.append(prefix + "_needles.png")
    overlap(res, prefix + "_overlap.png")
    made.append(prefix + "_overlap.png")
    print("wrote " + ", ".join(made))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
