"""tests/cuda/gpu_shapes_tables.py (the tables of the device step
tests/cuda/gpu_shapes.sh) on logs written here in the drivers' own printf
formats (dev/cuda/linear_heads.cu, dev/cuda/softmax.cu,
dev/bench_gpu_mhla_causal.cu, dev/cuda/softmax_sdpa.py, bench/gpu_linear.py
--peer wan, dev/bench_mhla_causal_torch.py --official): every row is parsed,
ratios and goals come out as computed by hand, refused, missing and cut
rows give "refused" / "—" instead of a number, and the step's dry run
names every sub-step."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cuda"))
import gpu_shapes_tables as T  # noqa: E402

OPS = ["linear", "causal", "mhla M16", "mhla M150", "focused", "focused+cv"]
DIMS = [(128, 128), (64, 64), (32, 32), (64, 128), (128, 64)]


def heads_line(op, D, Dv, dt, ms, pick="linear:tc", refused=None):
    # linear_heads.cu row(): "%-10s D%-3lld Dv%-3lld H%-3lld %-4s %-9s " then the time or "refused: %s"
    head = "%-10s D%-3d Dv%-3d H%-3d %-4s %-9s " % (op, D, Dv, 1536 // D, dt, "default")
    if refused:
        return head + "refused: " + refused
    return head + "%8.4f ms  byte-floor %.4f ms  pick %s" % (ms, 0.096, pick)


def write_logs(d, f16_refused=True, cut_official=False):
    """Synthetic logs: bf16 time = base·k(D), f16 = 1.02× bf16 (or refused)."""
    base = {"linear": 0.2, "causal": 0.3, "mhla M16": 0.25, "mhla M150": 0.4, "focused": 0.35, "focused+cv": 0.7}
    k = {(128, 128): 1.0, (64, 64): 0.9, (32, 32): 1.4, (64, 128): 1.2, (128, 64): 0.8}
    hl = ["Tesla H200"]
    for dt in ("bf16", "f16"):
        for D, Dv in DIMS:
            for op in OPS:
                if D != Dv and op in ("causal", "focused", "focused+cv"):
                    continue
                t = base[op] * k[(D, Dv)] * (1.02 if dt == "f16" else 1.0)
                if dt == "f16" and f16_refused:
                    hl.append(heads_line(op, D, Dv, dt, 0, refused="q: dtype f16 not supported here"))
                else:
                    hl.append(heads_line(op, D, Dv, dt, t, pick="focused:mma,linear:tc" if "focused" in op
                                         else "linear:tc"))
    # a "portable" row the tables must ignore
    hl.append("%-10s D%-3d Dv%-3d H%-3d %-4s %-9s %8.4f ms  byte-floor %.4f ms  pick %s" %
              ("linear", 128, 128, 12, "bf16", "portable", 9.9, 0.096, "linear:portable"))
    (d / "heads.log").write_text("\n".join(hl) + "\n")
    wl = []
    for dt in ("bf16", "f16"):
        for nm in ("per_query", "none"):
            if dt == "f16" and f16_refused:
                wl.append("mhla wan   21x30x50/3x5x10 M150 H12 D128 %-4s %-9s refused: %s" % (dt, nm, "q: f16"))
            else:
                wl.append("mhla wan   21x30x50/3x5x10 M150 H12 D128 %-4s %-9s %.4f ms per call (%.4f ms back to "
                          "back); floor Q,K,V,O %.4f ms, + fp32 partials and bf16 S~ (write + read) %.4f ms  pick %s"
                          % (dt, nm, 0.434 if dt == "bf16" else 0.440, 0.430, 0.092, 0.15, "mhla:tc"))
    (d / "wan_c.log").write_text("\n".join(wl) + "\n")
    sl = ["# NVIDIA H200, 132 SMs, 16 host threads"]
    sm = {128: 20.0, 64: 21.0, 32: 28.0}
    for dt in ("bf16", "f16"):
        for D, Dv in DIMS:
            for N in (8192, 32768):
                for c in (0, 1):
                    t = sm[D] * (N / 32768) ** 2 * (0.5 if c else 1) * (1.03 if dt == "f16" else 1.0)
                    if (D, Dv) == (64, 128):
                        t *= 1.5
                    sl.append("softmax-%s %s D=%d Dv=%d H=%d N=%d causal=%d %9.3f ms %6.1f TFLOP/s  pick %s" %
                              ("fwd", "f16 " if dt == "f16" else "bf16", D, Dv, 1536 // D, N, c, t, 300.0,
                               "softmax:tc"))
    sl.append("softmax-fwd f16  D=128 Dv=64 H=12 N=8192 causal=1 refused: v: no kernel")  # overrides the timed row
    (d / "softmax.log").write_text("\n".join(sl) + "\n")
    pl = ["# torch 2.11.0 NVIDIA H200"]
    for dt in ("bf16", "f16"):
        for D in (128, 64, 32):
            for N in (32768, 8192):
                for c in (0, 1):
                    for be, f in (("default", 0.5), ("flash", 0.95)):
                        t = sm[D] * (N / 32768) ** 2 * (0.5 if c else 1) * f
                        pl.append("sdpa-%s %s D=%d H=%d N=%d causal=%d %9.3f ms %6.1f TFLOP/s %s %s" %
                                  ("fwd", "bf16" if dt == "bf16" else "f16 ", D, 1536 // D, N, c, t, 600.0, be,
                                   "bhnd"))
    (d / "sdpa.log").write_text("\n".join(pl) + "\n")
    cl = ["# check mma vs portable, bf16 H12 D128 N4097: max rel 6.600e-03, nonfinite 0 ok"]
    for N, M, lin, dflt in ((32768, 512, 0.314, 0.874), (131072, 2048, 1.083, 5.843)):
        shape = "H12 D128 N=%d M=%d" % (N, M)
        row = "%-24s %-22s %-4s %9.4f ms  byte-floor %7.4f  flop-floor %7.4f  x%.2f of floor  x%.2f of causal " \
              "linear  pick %s"
        cl.append(row % ("linear-causal nonorm", shape, "bf16", lin, 0.2, 0.1, 1.5, 1.0, "linear_causal:tc"))
        cl.append(row % ("mhla-causal default", shape, "bf16", dflt, 0.3, 0.1, 2.6, dflt / lin,
                         "mhla_causal:mma_bf16s"))
        cl.append(row % ("mhla-causal mma_bf16s", shape, "bf16", dflt, 0.3, 0.1, 2.6, dflt / lin,
                         "mhla_causal:mma_bf16s"))
        cl.append(row % ("mhla-causal mma", shape, "bf16", dflt * 1.4, 0.5, 0.1, 2.2, 1.4 * dflt / lin,
                         "mhla_causal:mma"))
    (d / "causal_bf16.log").write_text("\n".join(cl) + "\n")
    fl = []
    for N, M in ((32768, 512), (131072, 2048)):
        shape = "H12 D128 N=%d M=%d" % (N, M)
        fl.append("%-24s %-22s %-4s refused: %s" % ("linear-causal nonorm", shape, "f16", "q: dtype f16"))
        fl.append("%-24s %-22s %-4s refused: %s" % ("mhla-causal default", shape, "f16", "q: dtype f16"))
    (d / "causal_f16.log").write_text("\n".join(fl) + "\n")
    wp = ["# torch 2.11.0 NVIDIA H200; longattn build-gpu/liblongattn.so",
          "wan-py ours bf16 normalize=none: 0.6140 ms (kernels 0.4120 ms)  pick mhla:tc",
          "wan-py ours bf16 normalize=per_query: 0.6200 ms (kernels 0.4150 ms)  pick mhla:tc",
          "wan-py ours f16 normalize=none: refused: RuntimeError: LA_ERR_DTYPE: q: dtype f16 not supported here",
          "wan-py ours f16 normalize=per_query: refused: RuntimeError: LA_ERR_DTYPE: q: dtype f16",
          "wan-py torch-eager bf16 normalize=none: 1.9850 ms (kernels 1.9000 ms; first call 0.4 s)",
          "wan-py torch.compile bf16 normalize=none: 0.7280 ms (kernels 0.7000 ms; first call 21.3 s)"]
    (d / "wan_py.log").write_text("\n".join(wp) + "\n")
    (d / "official_eager.log").write_text(
        "# torch 2.11.0, official chunk loop from peers/mhla/...\n"
        "official-loop eager first call N=32768: 2.1 s\n"
        "official-loop eager H12 D128 N=32768 M=512: 150.000 ms (first call 2.1 s)\n")
    if not cut_official:
        (d / "official_compile.log").write_text(
            "official-loop torch.compile first call N=32768: 80.0 s\n"
            "official-loop torch.compile H12 D128 N=32768 M=512: 120.000 ms (first call 80.0 s)\n")


def row_of(lines, start):
    hits = [l for l in lines if l.startswith(start)]
    assert hits, f"no row starting {start!r} in:\n" + "\n".join(lines)
    return hits[0]


def test_parse_every_row(tmp_path):
    write_logs(tmp_path)
    r = T.parse(str(tmp_path))
    assert len(r["heads"]) == 2 * (6 * 3 + 3 * 2)  # D = Dv: 6 ops; Dv != D: linear, MHLA M16, M150
    assert r["heads"][("linear", 64, 64, "bf16")] == pytest.approx(0.18)
    assert r["heads"][("linear", 64, 64, "f16")] == "refused"
    assert r["pick"][("focused", 32, 32, "bf16")] == "focused:mma,linear:tc"
    assert len(r["softmax"]) == 2 * 5 * 2 * 2 and len(r["sdpa"]) == 2 * 3 * 2 * 2 * 2
    assert r["sdpa"][(64, 32768, 1, "f16", "flash")] == pytest.approx(21.0 * 0.5 * 0.95, rel=1e-4)
    assert r["causal"][("default", 131072, "bf16")] == (pytest.approx(5.843), "mhla_causal:mma_bf16s")
    assert r["causal"][("linear", 32768, "f16")][0] == "refused"
    assert r["wanpy"][("ours", "f16", "none")][0] == "refused"
    assert r["wanpy"][("torch.compile", "bf16", "none")] == (0.728, 0.7, "21.3")
    assert r["official"] == {("eager", 32768): 150.0, ("torch.compile", 32768): 120.0}
    assert r["wanc"][("bf16", "none")] == (0.434, 0.430, "mhla:tc")


def test_heads_ratios_and_goals(tmp_path):
    write_logs(tmp_path)
    out = T.heads_table(T.parse(str(tmp_path)))
    lin = row_of(out, "linear  ")
    assert "0.180 (0.90)" in lin and "0.280 (1.40)" in lin and "NOT met" in lin and "linear:tc" in lin
    assert "0.240" in lin and "0.160" in lin  # Dv != D columns
    assert "portable" not in "\n".join(out)
    foc = row_of(out, "focused + 5x5 conv")
    assert "focused:mma/linear:tc" in foc
    sm = row_of(out, "softmax 32K causal")
    assert "10.000" in sm and "(1.05)" in sm and "(1.40)" in sm and "NOT met" in sm


def test_sdpa_goal_columns(tmp_path):
    write_logs(tmp_path)
    out = T.sdpa_table(T.parse(str(tmp_path)))
    # ours 21 ms at D 64 32K, SDPA default 10.5 (0.50), flash 19.95 (0.95): met against flash only
    d64 = [l for l in out if l.split()[:2] == ["64", "0"]][0]
    assert "21.000" in d64 and "10.500" in d64 and "0.50" in d64 and "0.95" in d64 and "met vs flash only" in d64
    d128 = [l for l in out if l.split()[:2] == ["128", "1"]][0]
    assert d128.rstrip().endswith("—")
    assert len([l for l in out if l[:1].isdigit()]) == 6  # D 128 / 64 / 32, causal and not


def test_f16_table_refused_and_ratios(tmp_path):
    write_logs(tmp_path)
    out = T.f16_table(T.parse(str(tmp_path)))
    assert "NOT met (f16 refused)" in row_of(out, "linear 32K")
    sm = row_of(out, "softmax 32K ")
    assert sm.count("1.03") == 5 and "met" in sm and "NOT" not in sm
    sm = row_of(out, "softmax 8K causal")
    assert sm.count("1.03") == 4 and "refused" in sm and "NOT met" in sm
    assert "refused / refused" in row_of(out, "causal MHLA (32K / 128K)")
    write_logs(tmp_path, f16_refused=False)
    out = T.f16_table(T.parse(str(tmp_path)))
    lin = row_of(out, "linear 32K")
    assert lin.count("1.02") == 5 and "NOT" not in lin
    assert "met" in row_of(out, "focused flatten 32K")
    assert "1.01 / 1.01" in row_of(out, "MHLA Wan C (per_query / none)")


def test_wan_and_causal_tables(tmp_path):
    write_logs(tmp_path)
    r = T.parse(str(tmp_path))
    out = T.wan_table(r)
    pk = row_of(out, "package none")
    assert "0.6140" in pk and "0.4120" in pk and "NOT met" in pk and "mhla:tc" in pk
    assert "refused" in pk
    assert "0.7280" in row_of(out, "torch.compile(mhla_torch) none")
    assert "0.84x the time" in out[-1] and "1.19x" in out[-1]
    out = T.causal_table(r)
    r32 = row_of(out, "32K (512)")
    # 0.874 / 0.314 = 2.78x: NOT met; official 150 / 0.874 = 171.6x eager, 120 / 0.874 = 137.3x compiled: met
    assert "2.78" in r32 and "NOT met" in r32 and "171.62" in r32 and "137.30" in r32 and r32.endswith("met")
    r128 = row_of(out, "128K (2048)")
    assert "5.40" in r128 and r128.endswith("—")
    write_logs(tmp_path, cut_official=True)
    os.remove(tmp_path / "official_compile.log")
    out = T.causal_table(T.parse(str(tmp_path)))
    assert "under torch.compile: no time" in "\n".join(out)


def test_empty_folder_gives_dashes(tmp_path):
    r = T.parse(str(tmp_path))
    text = "\n".join(T.heads_table(r) + T.sdpa_table(r) + T.f16_table(r) + T.wan_table(r) + T.causal_table(r))
    assert "met" not in text.replace("NOT met", "")  # no verdict without numbers
    assert "NOT met" not in text
    p = subprocess.run([sys.executable, str(ROOT / "tests/cuda/gpu_shapes_tables.py"), str(tmp_path)],
                       capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.count("## ") >= 5


def test_step_dry_run(tmp_path):
    off = tmp_path / "naive.py"
    off.write_text("# stands for the official file\n")
    out = tmp_path / "out"
    env = dict(os.environ, LA_SHAPES_DRY="1", OUT=str(out), LA_MHLA_OFFICIAL=str(off))
    p = subprocess.run(["bash", "tests/cuda/gpu_shapes.sh"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    for name in ("build", "heads", "wan_c", "softmax", "causal_bf16", "causal_f16", "sdpa", "wan_py",
                 "official_eager", "official_compile", "tables"):
        assert f"[dry] {name} " in p.stdout or f"[dry] {name}:" in p.stdout, name
    assert "linear_heads time both default" in p.stdout and "softmax fwd" in p.stdout
    assert f"--official {off} --eager" in p.stdout
    assert not any(out.glob("*.log"))  # a dry run runs nothing
    env["LA_MHLA_OFFICIAL"] = str(tmp_path / "missing.py")
    p = subprocess.run(["bash", "tests/cuda/gpu_shapes.sh"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert "official MHLA chunk loop: not carried" in p.stdout and "official_eager" not in p.stdout


def test_step_on_a_mock_tree(tmp_path):
    """gpu_shapes.sh itself (not dry) on a mock tree: a stub Makefile, stub
    drivers and scripts printing the synthetic logs, the official compile
    sleeping past its cap. Every sub-step runs, the cut one is said, and the
    tables come last with the numbers of the logs."""
    logs = tmp_path / "logs"
    logs.mkdir()
    write_logs(logs)
    tree = tmp_path / "tree"
    for rel in ("tests/cuda/gpu_shapes.sh", "tests/cuda/gpu_common.sh", "tests/cuda/gpu_shapes_tables.py"):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text((ROOT / rel).read_text())
    (tree / "Makefile").write_text(".PHONY: pyext\npyext:\n\t@echo pyext stub\nbuild-gpu/%:\n\t@test -x $@\n")

    def stub(rel, body):
        p = tree / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("#!/bin/bash\n" + body + "\n")
        p.chmod(0o755)
    stub("build-gpu/dev/cuda/linear_heads",
         f'case "$1 $2" in "time both") cat {logs}/heads.log;; "wan both") cat {logs}/wan_c.log;; *) exit 2;; esac')
    stub("build-gpu/dev/cuda/softmax", f'[ "$1" = fwd ] && cat {logs}/softmax.log')
    stub("build-gpu/dev/bench_gpu_mhla_causal",
         f'case "$*" in *"--dtype f16"*) cat {logs}/causal_f16.log;; *) cat {logs}/causal_bf16.log;; esac')
    for rel, log in (("dev/cuda/softmax_sdpa.py", "sdpa.log"), ("bench/gpu_linear.py", "wan_py.log")):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(f"print(open({str(logs / log)!r}).read(), end='')\n")
    (tree / "dev/bench_mhla_causal_torch.py").write_text(
        "import sys, time\n"
        f"if '--eager' in sys.argv: print(open({str(logs / 'official_eager.log')!r}).read(), end='')\n"
        "else: print('official-loop torch.compile: compiling', flush=True); time.sleep(30)\n")
    off = tmp_path / "naive.py"
    off.write_text("# stands for the official file\n")
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), LA_MHLA_OFFICIAL=str(off), LA_SHAPES_COMPILE_S="2", LA_STEP_S="200")
    env.pop("LA_SHAPES_DRY", None)
    p = subprocess.run(["bash", "tests/cuda/gpu_shapes.sh"], cwd=tree, env=env, capture_output=True, text=True,
                       timeout=120)
    text = p.stdout
    assert p.returncode == 1, text + p.stderr  # the cut sub-step fails the step
    summary = (out / "summary.txt").read_text()
    for name in ("build", "heads", "wan_c", "softmax", "causal_bf16", "causal_f16", "sdpa", "wan_py",
                 "official_eager"):
        assert f"{name}: rc=0" in summary and f" {name}@" in text, name
    assert "official_compile: rc=124 (its 2 s cap)" in text and "official_compile@" not in text
    tables = text[text.index("## 1. "):]
    assert "0.180 (0.90)" in tables and "171.62" in tables and "under torch.compile: no time" in tables
    assert (out / "tables.txt").read_text() in text and (out / "heads.log").exists()
    assert text.rstrip().splitlines()[-1].startswith("# shapes total")


OFFICIAL = ROOT / "peers/mhla/mhla_nlp/fla/ops/mhla/naive.py"
# a stand-in for einops (not a dependency of this project): the three patterns naive.py uses
EINOPS_STANDIN = '''
def rearrange(x, pat, **kw):
    if pat == "b t h ... -> b h t ...":
        return x.transpose(1, 2)
    if pat == "b h (n c) d -> b h n c d":
        b, h, t, d = x.shape
        return x.reshape(b, h, t // kw["c"], kw["c"], d)
    if pat == "b h n c d -> b (n c) h d":
        b, h, n, c, d = x.shape
        return x.reshape(b, h, n * c, d).transpose(1, 2)
    raise NotImplementedError(pat)
'''


def test_peer_scripts_parse_their_arguments():
    for script in ("bench/gpu_linear.py", "dev/bench_mhla_causal_torch.py"):
        p = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True)
        assert p.returncode == 0 and "usage:" in p.stdout, script + p.stderr
    p = subprocess.run([sys.executable, "bench/gpu_linear.py", "--peer", "wan", "--reps", "x"], cwd=ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 2 and "--reps" in p.stderr


@pytest.mark.skipif(not OFFICIAL.exists(), reason="the official MHLA file is not carried (peers/mhla)")
def test_official_chunk_loop_is_our_causal_mhla(tmp_path, monkeypatch):
    """The peer of table 4 computes the op we time: the official chunk loop
    (loaded as gpu_shapes.sh loads it, eager) on φ(q), φ(k), v against
    longattn.mhla_causal (CPU, fp32) at N = 1000 (a padded last chunk)."""
    torch = pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(ROOT / "python"))
    longattn = pytest.importorskip("longattn")
    (tmp_path / "einops").mkdir()
    (tmp_path / "einops" / "__init__.py").write_text(EINOPS_STANDIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(ROOT / "dev"))
    import bench_mhla_causal_torch as b
    f = b.load_official(str(OFFICIAL), compiled=False)
    g = torch.Generator().manual_seed(15)
    N, H, D, Dv = 1000, 3, 32, 24
    q, k = (torch.rand(1, N, H, D, generator=g, dtype=torch.float64) * 2 - 1 for _ in range(2))
    v = torch.rand(1, N, H, Dv, generator=g, dtype=torch.float64) * 2 - 1
    M = (N + 63) // 64
    W = torch.tril(torch.rand(M, M, generator=g, dtype=torch.float64) + 0.05) / torch.arange(1, M + 1).view(M, 1)
    ref = f(torch.relu(q), torch.relu(k), v, W.float().view(M, M, 1, 1, 1, 1))  # float32 inside, as W
    ours = longattn.mhla_causal(q.float(), k.float(), v.float(), W.float(), chunk=64, feature="relu",
                                normalize="none")
    err = (ours.double() - ref.double()).norm() / ref.double().norm()
    assert ref.shape == ours.shape and err < 1e-5, float(err)
