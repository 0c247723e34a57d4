#!/usr/bin/env python3
"""The compact tables of issue 15's "Must show" lines, from the logs of
tests/cuda/gpu_shapes.sh (one folder: heads.log, wan_c.log, softmax.log,
causal_bf16.log, causal_f16.log, sdpa.log, wan_py.log, official_eager.log,
official_compile.log; any may be missing or cut short).

    python3 tests/cuda/gpu_shapes_tables.py LOG_DIR

Each table has its goal column: "met", "NOT met" or "—" (no number: the row
was not measured, refused or cut). A cell is "—" when the log has no such
row, "refused" when the library refused the call. Standard library only (it
runs on the host too, in tests/python/test_gpu_shapes_tables.py).
"""
import os
import re
import sys

DASH = "—"

# ---------------------------------------------------------------- log parsing

# linear_heads time: "linear     D128 Dv128 H12  bf16 default    0.1940 ms  byte-floor ... pick linear:tc"
HEADS = re.compile(r"^(linear|causal|mhla M16|mhla M150|focused\+cv|focused)\s+D(\d+)\s+Dv(\d+)\s+H(\d+)\s+"
                   r"(bf16|f16)\s+(\S+)\s+(?:(\S+) ms\s.*?pick (\S+)|refused: (.*))$")
# linear_heads wan: "mhla wan   21x30x50/3x5x10 M150 H12 D128 bf16 per_query 0.4340 ms per call (0.4300 ms back
# to back); ... pick mhla:tc"
WANC = re.compile(r"^mhla wan\s+\S+ M150 H12 D128 (bf16|f16)\s+(\S+)\s+(?:(\S+) ms per call \((\S+) ms back to "
                  r"back\).*pick (\S+)|refused: (.*))$")
# dev/cuda/softmax fwd: "softmax-fwd bf16 D=128 Dv=128 H=12 N=32768 causal=0    20.190 ms  327.0 TFLOP/s  pick ..."
SOFTMAX = re.compile(r"^softmax-fwd (bf16|f16)\s+D=(\d+) Dv=(\d+) H=(\d+) N=(\d+) causal=(\d)\s+"
                     r"(?:(\S+) ms\s+\S+ TFLOP/s\s+pick (\S+)|refused: (.*))")
# softmax_sdpa.py: "sdpa-fwd bf16 D=128 H=12 N=32768 causal=0    10.250 ms  644.0 TFLOP/s default bhnd"
SDPA = re.compile(r"^sdpa-fwd (bf16|f16)\s+D=(\d+) H=(\d+) N=(\d+) causal=(\d)\s+(\S+) ms\s+\S+ TFLOP/s (\S+) (\S+)")
# bench_gpu_mhla_causal: "mhla-causal default       H12 D128 N=32768 M=512   bf16    0.8740 ms ... pick mhla_causal:mma_bf16s"
CAUSAL = re.compile(r"^(linear-causal nonorm|mhla-causal \S+)\s+H(\d+) D(\d+) N=(\d+) M=(\d+)\s+(bf16|f16)\s+"
                    r"(?:(\S+) ms\s.*?pick (\S+)|refused: (.*))$")
CHECK = re.compile(r"^# check (\S+) vs portable, .*max rel (\S+), nonfinite (\d+) (\S+)")
# gpu_linear.py --peer wan: "wan-py ours bf16 normalize=none: 0.6140 ms (kernels 0.4120 ms; x2.74 the byte
# floor)  pick mhla:tc" (the floor ratio on our rows only)
WANPY = re.compile(r"^wan-py (ours|torch-eager|torch\.compile) (bf16|f16) normalize=(\S+): (?:(\S+) ms \(kernels "
                   r"(\S+) ms(?:; x\S+ the byte floor)?(?:; first call (\S+) s)?\)(?:\s+pick (\S+))?|refused: (.*)|failed: (.*))$")
# bench_mhla_causal_torch.py --official: "official-loop eager H12 D128 N=32768 M=512: 95.123 ms (first call 3.1 s)"
OFFICIAL = re.compile(r"^official-loop (eager|torch\.compile) H\d+ D\d+ N=(\d+) M=(\d+): (\S+) ms")
OFFICIAL_FIRST = re.compile(r"^official-loop (eager|torch\.compile) first call N=(\d+): (\S+) s")


def num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v else None  # nan -> None


def lines(d, name):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return []
    with open(p, errors="replace") as f:
        return [l.rstrip("\n") for l in f]


def parse(d):
    """Every measurement of the folder: a dict of tables keyed by tuples;
    a value is a float (ms), "refused" or absent."""
    r = {"heads": {}, "pick": {}, "wanc": {}, "softmax": {}, "sdpa": {}, "causal": {}, "check": [],
         "wanpy": {}, "official": {}, "official_first": {}, "notes": []}
    for l in lines(d, "heads.log"):
        m = HEADS.match(l)
        if m and m.group(6) == "default":
            op, D, Dv, _, dt = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4), m.group(5)
            key = (op, D, Dv, dt)
            r["heads"][key] = "refused" if m.group(9) is not None else num(m.group(7))
            if m.group(8):
                r["pick"][key] = m.group(8)
    for l in lines(d, "wan_c.log"):
        m = WANC.match(l)
        if m:
            key = (m.group(1), m.group(2))
            r["wanc"][key] = ("refused", None, None) if m.group(6) is not None else \
                (num(m.group(3)), num(m.group(4)), m.group(5))
    for l in lines(d, "softmax.log"):
        m = SOFTMAX.match(l)
        if m:
            dt, D, Dv, N, c = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(5)), int(m.group(6))
            r["softmax"][(D, Dv, N, c, dt)] = "refused" if m.group(9) is not None else num(m.group(7))
            if m.group(8):
                r["pick"][("softmax", D, Dv, dt, N, c)] = m.group(8)
    for l in lines(d, "sdpa.log"):
        m = SDPA.match(l)
        if m:
            dt, D, N, c, be = m.group(1), int(m.group(2)), int(m.group(4)), int(m.group(5)), m.group(7)
            r["sdpa"][(D, N, c, dt, be)] = num(m.group(6))
    for name in ("causal_bf16.log", "causal_f16.log"):
        for l in lines(d, name):
            m = CAUSAL.match(l)
            if m:
                who, N, dt = m.group(1), int(m.group(4)), m.group(6)
                who = "linear" if who.startswith("linear") else who.split()[1]
                val = "refused" if m.group(9) is not None else num(m.group(7))
                r["causal"][(who, N, dt)] = (val, m.group(8))
            m = CHECK.match(l)
            if m:
                r["check"].append(f"{m.group(1)} {m.group(2)} {m.group(4)}")
    for l in lines(d, "wan_py.log"):
        m = WANPY.match(l)
        if m:
            who, dt, nm = m.group(1), m.group(2), m.group(3)
            if m.group(8) is not None or m.group(9) is not None:
                r["wanpy"][(who, dt, nm)] = ("refused" if m.group(8) is not None else "failed", None, None)
            else:
                r["wanpy"][(who, dt, nm)] = (num(m.group(4)), num(m.group(5)), m.group(7) or m.group(6))
    for name in ("official_eager.log", "official_compile.log"):
        for l in lines(d, name):
            m = OFFICIAL.match(l)
            if m:
                r["official"][(m.group(1), int(m.group(2)))] = num(m.group(4))
            m = OFFICIAL_FIRST.match(l)
            if m:
                r["official_first"][(m.group(1), int(m.group(2)))] = num(m.group(3))
    return r


# ---------------------------------------------------------------- formatting

def ms(v, digits=3):
    if v is None:
        return DASH
    if isinstance(v, str):
        return v
    return f"{v:.{digits}f}" if v < 100 else f"{v:.1f}"


def ratio(a, b):
    """a / b, or None when either is not a time"""
    if isinstance(a, float) and isinstance(b, float) and b > 0:
        return a / b
    return None


def rx(v):
    return DASH if v is None else f"{v:.2f}"


def verdict(vals, ok):
    """'met' when every value is a number and passes ok, 'NOT met' when one
    fails, '—' when none is a number (a missing one with the rest passing:
    'met (n/m)')."""
    nums = [v for v in vals if isinstance(v, float)]
    if not nums:
        return DASH
    if not all(ok(v) for v in nums):
        return "NOT met"
    return "met" if len(nums) == len(vals) else f"met ({len(nums)}/{len(vals)})"


def table(head, rows):
    """rows of cells, left-aligned columns; returns the lines"""
    w = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    fmt = lambda r: "  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)).rstrip()  # noqa: E731
    return [fmt(head)] + [fmt(r) for r in rows]


def short(picks):
    """distinct variants of a row's picks, 'family:variant' kept once each"""
    out = []
    for p in picks:
        for one in (p or "").split(","):
            if one and one not in out and one != "-":
                out.append(one)
    return "/".join(out) or DASH


OPS = ["linear", "causal", "mhla M16", "mhla M150", "focused", "focused+cv"]
OPNAME = {"linear": "linear", "causal": "linear causal", "mhla M16": "MHLA M16", "mhla M150": "MHLA M150",
          "focused": "focused flatten", "focused+cv": "focused + 5x5 conv"}
SM_ROWS = [(32768, 0), (32768, 1), (8192, 0), (8192, 1)]


def heads_table(r, dt="bf16"):
    out = [f"## 1. Head dims at the bytes of D 128 (H*D 1536, B1, {dt}; linear family N 32K, C API): ms (x D 128); "
           "goal <= 1.3x"]
    rows = []
    for op in OPS:
        t = {dd: r["heads"].get((op, dd[0], dd[1], dt)) for dd in ((128, 128), (64, 64), (32, 32), (64, 128),
                                                                    (128, 64))}
        base = t[(128, 128)]
        r64, r32 = ratio(t[(64, 64)], base), ratio(t[(32, 32)], base)
        picks = [r["pick"].get((op, a, b, dt)) for a, b in t]
        rows.append([OPNAME[op], ms(base), f"{ms(t[(64, 64)])} ({rx(r64)})", f"{ms(t[(32, 32)])} ({rx(r32)})",
                     ms(t[(64, 128)]), ms(t[(128, 64)]), verdict([r64, r32], lambda v: v <= 1.3), short(picks)])
    for N, c in SM_ROWS:
        t = {dd: r["softmax"].get((dd[0], dd[1], N, c, dt)) for dd in ((128, 128), (64, 64), (32, 32), (64, 128),
                                                                       (128, 64))}
        base = t[(128, 128)]
        r64, r32 = ratio(t[(64, 64)], base), ratio(t[(32, 32)], base)
        picks = [r["pick"].get(("softmax", a, b, dt, N, c)) for a, b in t]
        rows.append([f"softmax {N // 1024}K{' causal' if c else ''}", ms(base), f"{ms(t[(64, 64)])} ({rx(r64)})",
                     f"{ms(t[(32, 32)])} ({rx(r32)})", ms(t[(64, 128)]), ms(t[(128, 64)]),
                     verdict([r64, r32], lambda v: v <= 1.3), short(picks)])
    return out + table(["op", "D128", "D64 (x)", "D32 (x)", "D64/Dv128", "D128/Dv64", "goal", "variant"], rows)


def sdpa_table(r, dt="bf16"):
    out = [f"## 1b. Softmax forward vs PyTorch SDPA, {dt}: our speed = SDPA time / ours; goal D 64 >= 0.90, "
           "D 32 >= 0.70 (vs the default SDPA)"]
    rows = []
    for D in (128, 64, 32):
        for c in (0, 1):
            cells, sds, sfs = [D, c], [], []
            for N in (32768, 8192):
                o = r["softmax"].get((D, D, N, c, dt))
                de, fl = r["sdpa"].get((D, N, c, dt, "default")), r["sdpa"].get((D, N, c, dt, "flash"))
                sd, sf = ratio(de, o), ratio(fl, o)
                sds.append(sd)
                sfs.append(sf)
                cells += ([ms(o), ms(de), ms(fl)] if N == 32768 else []) + [rx(sd), rx(sf)]
            goal = {64: 0.90, 32: 0.70}.get(D)
            if goal is None or all(v is None for v in sds + sfs):
                g = DASH
            elif verdict(sds, lambda v: v >= goal).startswith("met"):
                g = verdict(sds, lambda v: v >= goal)
            elif verdict(sfs, lambda v: v >= goal).startswith("met"):
                g = "met vs flash only"
            else:
                g = "NOT met"
            rows.append(cells + [g])
    return out + table(["D", "causal", "32K ours", "default", "flash", "vs default", "vs flash", "8K vs default",
                        "vs flash", "goal"], rows)


def f16_table(r):
    out = ["## 2. fp16 / bf16 time (same values and shapes); goal <= 1.05"]
    rows = []
    dims = ((128, 128), (64, 64), (32, 32), (64, 128), (128, 64))
    for op in OPS:
        rs = [ratio(r["heads"].get((op, a, b, "f16")), r["heads"].get((op, a, b, "bf16"))) for a, b in dims]
        refused = any(r["heads"].get((op, a, b, "f16")) == "refused" for a, b in dims)
        cells = [("refused" if r["heads"].get((op, a, b, "f16")) == "refused" else rx(v)) for (a, b), v in
                 zip(dims, rs)]
        have = rs[:3] + [v for v in rs[3:] if v is not None]  # causal and focused have no Dv != D rows
        g = "NOT met (f16 refused)" if refused else verdict(have, lambda v: v <= 1.05)
        rows.append([OPNAME[op] + " 32K"] + cells + [g])
    for N, c in SM_ROWS:
        f16s = [r["softmax"].get((a, b, N, c, "f16")) for a, b in dims]
        rs = [ratio(f, r["softmax"].get((a, b, N, c, "bf16"))) for f, (a, b) in zip(f16s, dims)]
        rows.append([f"softmax {N // 1024}K{' causal' if c else ''}"] +
                    ["refused" if f == "refused" else rx(v) for f, v in zip(f16s, rs)] +
                    ["NOT met (f16 refused)" if "refused" in f16s else verdict(rs, lambda v: v <= 1.05)])
    def pair(label, vals):
        """one row for two timings (f16, bf16) pairs: 'r1 / r2' in the D128 column"""
        rs = [ratio(f, b) for f, b in vals]
        cells = " / ".join("refused" if f == "refused" else rx(v) for (f, _), v in zip(vals, rs))
        refused = any(f == "refused" for f, _ in vals)
        rows.append([label, cells, "", "", "", "", "NOT met (f16 refused)" if refused else
                     verdict(rs, lambda x: x <= 1.05)])
    wc = lambda dt, nm: r["wanc"].get((dt, nm), (None,))[0]  # noqa: E731
    pair("MHLA Wan C (per_query / none)", [(wc("f16", nm), wc("bf16", nm)) for nm in ("per_query", "none")])
    wp = lambda dt, nm: r["wanpy"].get(("ours", dt, nm), (None,))[0]  # noqa: E731
    pair("MHLA Wan package (none / per_query)", [(wp("f16", nm), wp("bf16", nm)) for nm in ("none", "per_query")])
    cz = lambda who, N, dt: r["causal"].get((who, N, dt), (None,))[0]  # noqa: E731
    pair("causal MHLA (32K / 128K)", [(cz("default", N, "f16"), cz("default", N, "bf16")) for N in (32768, 131072)])
    pair("causal linear (32K / 128K)", [(cz("linear", N, "f16"), cz("linear", N, "bf16")) for N in (32768, 131072)])
    return out + table(["op", "D128", "D64", "D32", "D64/Dv128", "D128/Dv64", "goal"], rows)


def wan_table(r):
    out = ["## 3. MHLA at the Wan shape (21x30x50 / 3x5x10, M 150, H12 D128, B1): ms per call; goal <= 0.15 ms "
           "through the package"]
    rows = []
    for nm in ("none", "per_query"):
        cells = []
        for dt in ("bf16", "f16"):
            v = r["wanc"].get((dt, nm))
            cells.append(DASH if v is None else v[0] if v[0] == "refused" else f"{ms(v[0], 4)} ({ms(v[1], 4)})")
        v = r["wanc"].get(("bf16", nm))
        rows.append([f"C API {nm} (back to back)"] + cells + [DASH, DASH, v[2] if v and v[2] else DASH])
    ours = {}
    for nm in ("none", "per_query"):
        cells = []
        for dt in ("bf16", "f16"):
            v = r["wanpy"].get(("ours", dt, nm))
            cells.append(DASH if v is None else v[0] if isinstance(v[0], str) else ms(v[0], 4))
        v = r["wanpy"].get(("ours", "bf16", nm))
        ours[nm] = v[0] if v else None
        rows.append([f"package {nm}"] + cells + [ms(v[1], 4) if v else DASH,
                                                  verdict([v[0] if v else None], lambda x: x <= 0.15),
                                                  v[2] if v and v[2] else DASH])
    for who, label in (("torch.compile", "torch.compile(mhla_torch) none"), ("torch-eager", "eager mhla_torch none")):
        v = r["wanpy"].get((who, "bf16", "none"))
        rows.append([label, DASH if v is None else v[0] if isinstance(v[0], str) else ms(v[0], 4), DASH,
                     ms(v[1], 4) if v else DASH, DASH, f"first call {ms(v[2], 1)} s" if v and v[2] else DASH])
    comp = r["wanpy"].get(("torch.compile", "bf16", "none"), (None,))[0]
    out += table(["row", "bf16", "f16", "kernels", "goal", "variant"], rows)
    out.append(f"   package none / torch.compile: {rx(ratio(ours.get('none'), comp))}x the time "
               f"(speed-up {rx(ratio(comp, ours.get('none')))}x)")
    return out


def causal_table(r):
    out = ["## 4. Causal MHLA, general lower-triangular W, vs causal linear (B1 H12 D128 bf16, chunk 64):",
           "##    goals <= 1.5x (32K, C 64) / <= 2x (128K, M 2048); >= 10x the official chunk loop (torch.compile)"]
    rows = []
    for N, goal in ((32768, 1.5), (131072, 2.0)):
        lin = r["causal"].get(("linear", N, "bf16"), (None, None))[0]
        dv, dp = r["causal"].get(("default", N, "bf16"), (None, None))
        rl = ratio(dv, lin)
        cells = [f"{N // 1024}K ({N // 64})", ms(lin), f"{ms(dv)} ({(dp or DASH).replace('mhla_causal:', '')})", rx(rl),
                 verdict([rl], lambda v, g=goal: v <= g)]
        for var in ("mma_bf16s", "mma"):
            cells.append(ms(r["causal"].get((var, N, "bf16"), (None,))[0]))
        oe, oc = r["official"].get(("eager", N)), r["official"].get(("torch.compile", N))
        cells += [ms(oe, 1), ms(oc, 1), rx(ratio(oe, dv)), rx(ratio(oc, dv)),
                  verdict([ratio(oc, dv)], lambda v: v >= 10.0) if N == 32768 else DASH]
        rows.append(cells)
    out += table(["N (M)", "linear", "default (variant)", "x lin", "goal", "mma_bf16s", "mma",
                  "official eager", "compiled", "x faster", "x faster", "goal 10x"], rows)
    fc = r["official_first"].get(("torch.compile", 32768))
    if r["official"].get(("torch.compile", 32768)) is None:
        out.append("   official chunk loop under torch.compile: no time" +
                   (f" (first call took {fc:.0f} s)" if fc else " (not carried, or its compile did not finish "
                                                                 "within its cap: see official_compile.log)"))
    if r["check"]:
        out.append("   check against portable (N 4097): " + "; ".join(r["check"]))
    return out


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print("usage: gpu_shapes_tables.py LOG_DIR", file=sys.stderr)
        return 2
    r = parse(sys.argv[1])
    for part in (heads_table(r), sdpa_table(r), f16_table(r), wan_table(r), causal_table(r)):
        print("\n".join(part))
    return 0


if __name__ == "__main__":
    sys.exit(main())
