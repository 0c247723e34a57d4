"""Plot `longattn serve-sim --json-out FILE`: per-step time of HISA paged and
DSA paged against the context. Usage: plot_serve_sim.py RESULTS.json OUT.png"""
import json
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot_serve_sim.py RESULTS.json OUT.png")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_serve_sim.py: matplotlib is not installed (the JSON has the numbers)")
    r = json.load(open(sys.argv[1]))
    ctx = [s["context"] for s in r["steps"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(ctx, [s["dsa_ms"] for s in r["steps"]], "o-", label="DSA paged")
    ax.plot(ctx, [s["hisa_ms"] for s in r["steps"]], "s-",
            label="HISA paged (B=%d, m=%d)" % (r["block"], r["block_topk"]))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context per sequence (tokens)")
    ax.set_ylabel("ms per decode step")
    ax.set_title("serve-sim: batch %d, next_n %d, HI %d, topk %d, %s cache (%s)"
                 % (r["batch"], r["next_n"], r["HI"], r["topk"], r["dtype"], r["device"]), fontsize=8)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)
    print("wrote %s" % sys.argv[2])


if __name__ == "__main__":
    main()
