"""Black-box hardening of `longattn run` (issue 21): the CLI run as a
subprocess, as a user or a script would, on crafted inputs.

Covers: outputs checked before computing (directory, same file twice, same
file as an input without --force, devices and FIFOs written in place, a
missing directory), temporaries that are unpredictable and removed on
SIGTERM/SIGINT, a failure after a rename that keeps what it wrote, count
overflows (--chunk, --map), --threads above the cores, memory and
address-space limits (exit 2, fast), option-value edge cases, sparse indices
below -1, `--device cuda` without a GPU, the installed-script layout, and
the CLI's own symbol prefix / includes (issue 13).

Run: /usr/bin/python3 -m pytest tests/python/test_conformance_hardening.py
(CLI: $LA_BUILD/longattn relative to the repository root, default build/).
Seed: LA_TEST_SEED (random when unset; printed).
"""
import os
import pathlib
import re
import resource
import shutil
import signal
import stat
import subprocess
import threading
import time
import zlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("LA_BUILD", "build")
BIN = BUILD / "longattn"
pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"{BIN} not built")

SEED = int(os.environ.get("LA_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")
print(f"# test_conformance_hardening: LA_TEST_SEED={SEED}")


def rng(tag):
    return np.random.default_rng([SEED, zlib.crc32(repr(tag).encode())])


def cli(*args, expect=0, timeout=120, cwd=None, preexec_fn=None, cmd="run"):
    argv = [str(BIN), *([cmd] if cmd else []), *map(str, args)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                       preexec_fn=preexec_fn)
    assert r.returncode == expect, (f"seed={SEED} args={args}\nrc={r.returncode} (want {expect})\n"
                                    f"stdout: {r.stdout}\nstderr: {r.stderr}")
    return r


def one_line(r):
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, f"want one stderr line, got: {r.stderr!r}"
    return lines[0]


def qkv(tmp, tag, N=33, H=2, D=8, Dv=8):
    g = rng(tag)
    paths = []
    for name, d in (("q", D), ("k", D), ("v", Dv)):
        p = tmp / f"{name}.npy"
        np.save(p, g.standard_normal((1, N, H, d)).astype(np.float32))
        paths.append(p)
    return paths


def softmax_ref(q, k, v):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("bnhd,bmhd->bhnm", q, k) / np.sqrt(q.shape[-1])
    s -= s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhnm,bmhd->bnhd", p, v)


def entries(d):
    return sorted(os.listdir(d))


# ----------------------------------------------------------- output safety

def test_failed_run_keeps_existing_output(tmp_path):
    q, k, v = qkv(tmp_path, "keep")
    (tmp_path / "o.npy").write_text("OLD")
    (tmp_path / "l.npy").mkdir()
    r = cli("softmax", "--q", q, "--k", k, "--v", v, "--out", tmp_path / "o.npy",
            "--lse", tmp_path / "l.npy", expect=2)
    assert "--lse" in one_line(r) and "directory" in one_line(r)
    assert (tmp_path / "o.npy").read_text() == "OLD"
    assert entries(tmp_path) == ["k.npy", "l.npy", "o.npy", "q.npy", "v.npy"]


@pytest.mark.parametrize("second", ["./a.npy", "sub/../a.npy", "link.npy", "hard.npy"])
def test_two_spellings_of_one_output(tmp_path, second):
    q, k, v = qkv(tmp_path, "spell")
    (tmp_path / "sub").mkdir()
    if second in ("link.npy", "hard.npy"):
        (tmp_path / "a.npy").write_text("OLD")
        if second == "link.npy":
            os.symlink("a.npy", tmp_path / "link.npy")
        else:
            os.link(tmp_path / "a.npy", tmp_path / "hard.npy")
    before = entries(tmp_path)
    r = cli("softmax", "--q", q, "--k", k, "--v", v, "--out", "a.npy", "--lse", second,
            expect=2, cwd=tmp_path)
    assert "same file" in one_line(r), r.stderr
    assert entries(tmp_path) == before
    if (tmp_path / "a.npy").exists():
        assert (tmp_path / "a.npy").read_text() == "OLD"


@pytest.mark.parametrize("how", ["same", "link"])
def test_output_equal_to_input_needs_force(tmp_path, how):
    q, k, v = qkv(tmp_path, "force")
    target = q
    if how == "link":
        target = tmp_path / "qlink.npy"
        os.symlink(q, target)
    q_before = np.load(q)
    r = cli("softmax", "--q", q, "--k", k, "--v", v, "--out", target, expect=2)
    line = one_line(r)
    assert "--out" in line and "--q" in line and "--force" in line, line
    np.testing.assert_array_equal(np.load(q), q_before)
    ref = softmax_ref(q_before, np.load(k), np.load(v))
    cli("softmax", "--q", q, "--k", k, "--v", v, "--out", target, "--force")
    got = np.load(q)
    assert got.shape == ref.shape and np.abs(got - ref).max() <= 2e-5 * (1 + np.abs(ref).max())
    if how == "link":
        assert os.path.islink(target), "--force through a link replaces the file it names, not the link"


def test_output_to_character_device_and_fifo(tmp_path):
    q, k, v = qkv(tmp_path, "dev")
    cli("softmax", "--q", q, "--k", k, "--v", v, "--out", "/dev/null")
    cli("softmax", "--q", q, "--k", k, "--v", v, "--out", "/dev/null", "--lse", "/dev/null")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode), "/dev/null is still a device"
    assert entries("/dev").count("null") == 1
    fifo = tmp_path / "pipe.npy"
    os.mkfifo(fifo)
    got = {}

    def reader():
        with open(fifo, "rb") as f:
            got["data"] = f.read()

    t = threading.Thread(target=reader)
    t.start()
    cli("softmax", "--q", q, "--k", k, "--v", v, "--out", fifo)
    t.join(30)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO was not replaced"
    out = np.load(__import__("io").BytesIO(got["data"]))
    ref = softmax_ref(np.load(q), np.load(k), np.load(v))
    assert np.abs(out - ref).max() <= 2e-5 * (1 + np.abs(ref).max())
    # a pipe as /dev/stdout
    r = subprocess.run([str(BIN), "run", "softmax", "--q", q, "--k", k, "--v", v, "--out", "/dev/stdout"],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert np.load(__import__("io").BytesIO(r.stdout)).shape == ref.shape


def test_write_error_names_the_option(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    q, k, v = qkv(tmp_path, "full")
    r = cli("softmax", "--q", q, "--k", k, "--v", v, "--out", "/dev/full", expect=2)
    line = one_line(r)
    assert line.startswith("longattn: error: --out /dev/full") and "No space left" in line, line
    assert "tmp" not in line.replace(str(tmp_path), "") and "XXXXXX" not in line


@pytest.mark.parametrize("bad,want", [("nodir/o.npy", "nodir"), ("q.npy/o.npy", "not a directory"),
                                      ("o_dir/", "directory"), ("dangling.npy", "link")])
def test_bad_output_paths(tmp_path, bad, want):
    q, k, v = qkv(tmp_path, "paths")
    (tmp_path / "o_dir").mkdir()
    os.symlink("nowhere/x.npy", tmp_path / "dangling.npy")
    before = entries(tmp_path)
    r = cli("softmax", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", bad, expect=2, cwd=tmp_path)
    assert "--out" in one_line(r) and want.lower() in one_line(r).lower(), r.stderr
    assert entries(tmp_path) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in read-only directories")
def test_unwritable_directory(tmp_path):
    q, k, v = qkv(tmp_path, "ro")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        r = cli("softmax", "--q", q, "--k", k, "--v", v, "--out", ro / "o.npy", expect=2)
        assert "--out" in one_line(r)
    finally:
        ro.chmod(0o755)


def long_run_args(tmp_path, N=6144):
    g = rng("long")
    for name in "qkv":
        np.save(tmp_path / f"{name}.npy", g.standard_normal((1, N, 4, 64)).astype(np.float32))
    return ["softmax", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy"]


def wait_for_temporaries(d, names, proc, timeout=30):
    """The run's temporaries, once they exist (they are made before computing)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        tmps = [e for e in os.listdir(d) if any(e.startswith(f".{n}.") for n in names)]
        if len(tmps) == len(names):
            return tmps
        if proc.poll() is not None:
            pytest.fail(f"run ended (rc {proc.returncode}) before its temporaries were seen")
        time.sleep(0.005)
    pytest.fail("no temporaries appeared")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_removes_temporaries(tmp_path, sig):
    args = long_run_args(tmp_path)
    (tmp_path / "o.npy").write_text("OLD")
    # the child starts with the signal's default disposition: run from a
    # background job of a non-interactive shell, SIGINT arrives ignored, and
    # the CLI keeps an ignored signal ignored (as nohup asks)
    p = subprocess.Popen([str(BIN), "run", *args, "--out", "o.npy", "--lse", "l.npy"], cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    tmps = wait_for_temporaries(tmp_path, ["o.npy", "l.npy"], p)
    # unpredictable names (not NAME.tmp.PID), regular files, beside the outputs
    assert not any(t.endswith(f".tmp.{p.pid}") for t in tmps), tmps
    for t in tmps:
        assert re.fullmatch(r"\.(o|l)\.npy\.[A-Za-z0-9]{6}", t), t
        assert stat.S_ISREG(os.lstat(tmp_path / t).st_mode)
    p.send_signal(sig)
    p.communicate(timeout=60)
    assert p.returncode == -sig, f"rc {p.returncode}"
    assert entries(tmp_path) == ["k.npy", "o.npy", "q.npy", "v.npy"], entries(tmp_path)
    assert (tmp_path / "o.npy").read_text() == "OLD"


def test_failure_after_rename_keeps_written_outputs(tmp_path):
    args = long_run_args(tmp_path)
    (tmp_path / "a.npy").write_text("OLD")
    p = subprocess.Popen([str(BIN), "run", *args, "--out", "a.npy", "--lse", "b.npy"], cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_temporaries(tmp_path, ["a.npy", "b.npy"], p)
    # b.npy becomes a non-empty directory while the run computes: its rename fails
    (tmp_path / "b.npy").mkdir()
    (tmp_path / "b.npy" / "keep").write_text("mine")
    _, err = p.communicate(timeout=120)
    if p.returncode == 0:
        pytest.skip("the run finished before the directory was made")
    assert p.returncode == 1, err
    assert "--lse b.npy" in err and "written: --out a.npy" in err, err
    # a.npy is the new, complete result (not removed), b.npy/keep untouched, no temporaries
    assert np.load(tmp_path / "a.npy").shape == (1, 6144, 4, 64)
    assert (tmp_path / "b.npy" / "keep").read_text() == "mine"
    assert entries(tmp_path) == ["a.npy", "b.npy", "k.npy", "q.npy", "v.npy"]


def test_state_out_may_replace_state_in(tmp_path):
    q, k, v = qkv(tmp_path, "state")
    cli("linear", "--q", q, "--k", k, "--v", v, "--causal", "--state-out", tmp_path / "s", "--out",
        tmp_path / "o1.npy")
    S0 = np.load(tmp_path / "s.S.npy")
    cli("linear", "--q", q, "--k", k, "--v", v, "--causal", "--state-in", tmp_path / "s", "--state-out",
        tmp_path / "s", "--out", tmp_path / "o2.npy")
    assert not np.array_equal(np.load(tmp_path / "s.S.npy"), S0), "the state was continued"
    r = cli("linear", "--q", q, "--k", k, "--v", v, "--causal", "--state-in", tmp_path / "s", "--out",
            tmp_path / "s.S.npy", expect=2)
    assert "--force" in one_line(r)


# ------------------------------------------------------------ overflows

def causal_one_chunk_ref(q, k, v, w00):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    fq, fk = np.maximum(q, 0), np.maximum(k, 0)
    a = np.einsum("bnhd,bmhd->bhnm", fq, fk) / np.sqrt(q.shape[-1])
    a = np.tril(a) * w00
    return np.einsum("bhnm,bmhd->bnhd", a, v)


def test_causal_chunk_overflow(tmp_path):
    q, k, v = qkv(tmp_path, "chunk", N=65, Dv=12)
    np.save(tmp_path / "w.npy", np.full((4, 4), 0.5, np.float32))
    base = ["mhla", "--causal", "--q", q, "--k", k, "--v", v, "--mixing", tmp_path / "w.npy"]
    for c in (9223372036854775807, 9223372036854775807 - 64):
        r = cli(*base, "--chunk", c, "--out", tmp_path / "o.npy", expect=2)
        assert "chunk" in one_line(r)
        assert not (tmp_path / "o.npy").exists()
    ref = causal_one_chunk_ref(np.load(q), np.load(k), np.load(v), 0.5)
    for c in (4611686018427387904, 9223372036854775807 - 65, 65):
        cli(*base, "--chunk", c, "--out", tmp_path / "o.npy")
        got = np.load(tmp_path / "o.npy").astype(np.float64)
        assert np.isfinite(got).all(), f"chunk {c}: unwritten output"
        assert np.linalg.norm(got - ref) <= 1e-5 * np.linalg.norm(ref), f"chunk {c}"


def test_map_product_overflow(tmp_path):
    q, k, v = qkv(tmp_path, "map", N=16)
    r = cli("focused", "--q", q, "--k", k, "--v", v, "--map", "3037000500x3037000500",
            "--out", tmp_path / "o.npy", expect=2)
    assert "--map" in one_line(r) and "overflow" in one_line(r)
    np.save(tmp_path / "q2.npy", np.load(q)[0, :, 0])
    np.save(tmp_path / "k2.npy", np.load(k)[0, :, 0])
    r = cli("attn-map", "--q", tmp_path / "q2.npy", "--k", tmp_path / "k2.npy", "--variant",
            "focused-flatten", "--map", "3037000500x3037000500", expect=2)
    assert "--map" in one_line(r)
    assert not (tmp_path / "o.npy").exists()


# ------------------------------------------------------ threads, memory

def test_threads_above_cores(tmp_path):
    q, k, v = qkv(tmp_path, "threads")
    cli("softmax", "--q", q, "--k", k, "--v", v, "--threads", 4096, "--out", tmp_path / "o.npy")
    ref = softmax_ref(np.load(q), np.load(k), np.load(v))
    assert np.abs(np.load(tmp_path / "o.npy") - ref).max() <= 2e-5 * (1 + np.abs(ref).max())


def test_output_beyond_memory(tmp_path):
    # 1.5 MiB of inputs asking for a 64 GiB output... and 2^60 bytes
    np.save(tmp_path / "q.npy", np.ones((1, 131072, 1, 1), np.float32))
    np.save(tmp_path / "k.npy", np.ones((1, 1, 1, 1), np.float32))
    np.save(tmp_path / "v.npy", np.ones((1, 1, 1, 131072), np.float32))
    t0 = time.time()
    r = cli("softmax", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", expect=2,
            cwd=tmp_path, timeout=30)
    line = one_line(r)
    assert re.search(r"needs 64\.00 GiB, [0-9.]+ GiB available", line), line
    assert time.time() - t0 < 10
    assert entries(tmp_path) == ["k.npy", "q.npy", "v.npy"]


def limit_as(mib):
    """An address-space limit of `mib` MiB above the program's own image (a
    CUDA build maps tens of MiB of device code: a fixed limit would leave no
    room for OpenBLAS's threads, and the run would fail before our check)."""
    mib += os.path.getsize(BIN) >> 20
    def f():
        resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))
    return f


def test_address_space_limit_fails_fast(tmp_path):
    q, k, v = qkv(tmp_path, "ulimit")
    t0 = time.time()
    r = cli("softmax", "--q", q, "--k", k, "--v", v, "--out", tmp_path / "o.npy", expect=2, timeout=30,
            preexec_fn=limit_as(100))
    assert "address-space limit" in one_line(r)
    assert time.time() - t0 < 10, "the run crawled instead of failing"
    # room for the program but not for a 1 GiB output: refused before allocating
    np.save(tmp_path / "q.npy", np.ones((1, 16384, 1, 1), np.float32))
    np.save(tmp_path / "k.npy", np.ones((1, 1, 1, 1), np.float32))
    np.save(tmp_path / "v.npy", np.ones((1, 1, 1, 16384), np.float32))
    r = cli("softmax", "--q", q, "--k", k, "--v", v, "--out", tmp_path / "o.npy", expect=2, timeout=30,
            preexec_fn=limit_as(1024))
    assert re.search(r"needs 1\.00 GiB, [0-9.]+ GiB available", one_line(r)), r.stderr
    assert not (tmp_path / "o.npy").exists()


# ------------------------------------------------------- option values

@pytest.mark.parametrize("args,want", [
    (["--scale", "1e-50"], "--scale '1e-50': underflows"),
    (["--scale", "1e39"], "--scale '1e39': out of float32 range"),
    (["--scale", "inf"], "--scale 'inf': out of float32 range"),
    (["--scale", "nan"], "--scale 'nan': not a number"),
    (["--scale", "abc"], "--scale 'abc': expected a finite number"),
    (["--device", "cpu", "--device", "cpu"], "--device given twice"),
    (["--threads", "1", "--threads=2"], "--threads given twice"),
    (["--force", "--force"], "--force given twice"),
    (["--causal", "--causal"], "--causal given twice"),
    (["--threads", "--causal"], "--threads needs a value, got option '--causal'"),
    (["--scale="], "--scale: empty value"),
])
def test_bad_option_values(tmp_path, args, want):
    q, k, v = qkv(tmp_path, "opts")
    r = cli("softmax", "--q", q, "--k", k, "--v", v, "--out", tmp_path / "o.npy", *args, expect=2)
    assert want in one_line(r), r.stderr
    assert not (tmp_path / "o.npy").exists()


def test_missing_value_followed_by_an_option(tmp_path):
    q, k, v = qkv(tmp_path, "missing")
    r = cli("softmax", "--q", q, "--k", k, "--v", "--out", tmp_path / "o.npy", expect=2)
    assert "--v needs a value, got option '--out'" in one_line(r)
    assert not (tmp_path / "o.npy").exists() and not (tmp_path / "--out").exists()
    # a value that starts with -- is written with '='
    shutil.copy(v, tmp_path / "--weird.npy")
    cli("softmax", "--q", q, "--k", k, "--v=--weird.npy", "--out", tmp_path / "o.npy", cwd=tmp_path)


@pytest.mark.parametrize("focus,want", [("nan", "not a number"), ("1e39", "out of float32 range"),
                                        ("-inf", "out of float32 range"), ("1e-60", "underflows")])
def test_focus_numbers(tmp_path, focus, want):
    q, k, v = qkv(tmp_path, "focus", N=16)
    r = cli("focused", "--variant", "blog", "--q", q, "--k", k, "--v", v, "--map", "4x4", "--focus", focus,
            "--out", tmp_path / "o.npy", expect=2)
    assert f"--focus '{focus}'" in one_line(r) and want in one_line(r), r.stderr
    assert "cannot open" not in r.stderr


def test_negative_range_files(tmp_path):
    g = rng("range")
    T, L = 4, 32
    np.save(tmp_path / "q.npy", g.standard_normal((T, 2, 8)).astype(np.float32))
    np.save(tmp_path / "k.npy", g.standard_normal((L, 8)).astype(np.float32))
    np.save(tmp_path / "w.npy", g.standard_normal((T, 2)).astype(np.float32))
    np.save(tmp_path / "e.npy", np.array([5, -3, 7, 9], np.int32))
    np.save(tmp_path / "s.npy", np.array([0, 0, -1, 0], np.int32))
    base = ["--q", "q.npy", "--k", "k.npy", "--w", "w.npy", "--topk", 4, "--out", "i.npy"]
    for op in ("dsa", "hisa"):
        r = cli(op, *base, "--end", "e.npy", expect=2, cwd=tmp_path)
        assert "--end e.npy: end[1] = -3 is negative" in one_line(r), r.stderr
        r = cli(op, *base, "--start", "s.npy", expect=2, cwd=tmp_path)
        assert "--start s.npy: start[2] = -1 is negative" in one_line(r), r.stderr
    assert not (tmp_path / "i.npy").exists()


def test_sparse_indices_below_minus_one_skip_like_minus_one(tmp_path):
    g = rng("sparse")
    T, Hq, L, Dqk, dv, kk = 5, 2, 40, 24, 16, 6
    np.save(tmp_path / "q.npy", g.standard_normal((T, Hq, Dqk)).astype(np.float32))
    np.save(tmp_path / "kv.npy", g.standard_normal((L, Dqk)).astype(np.float32))
    idx = g.integers(0, L, (T, kk)).astype(np.int32)
    idx[:, ::2] = -1
    idx[T - 1, :] = -1
    low = idx.copy()
    low[low == -1] = np.array([-2, -7, np.iinfo(np.int32).min], np.int32)[np.arange((low == -1).sum()) % 3]
    np.save(tmp_path / "i1.npy", idx)
    np.save(tmp_path / "i2.npy", low)
    for name in ("i1", "i2"):
        cli("sparse-attn", "--q", "q.npy", "--kv", "kv.npy", "--idx", f"{name}.npy", "--dv", dv,
            "--out", f"o_{name}.npy", "--lse", f"l_{name}.npy", cwd=tmp_path)
    np.testing.assert_array_equal(np.load(tmp_path / "o_i1.npy"), np.load(tmp_path / "o_i2.npy"))
    np.testing.assert_array_equal(np.load(tmp_path / "l_i1.npy"), np.load(tmp_path / "l_i2.npy"))
    assert (np.load(tmp_path / "o_i2.npy")[T - 1] == 0).all()
    assert np.isneginf(np.load(tmp_path / "l_i2.npy")[T - 1]).all()


# -------------------------------------------------------- rough edges

def test_cuda_without_gpu_message(tmp_path):
    probe = subprocess.run(["nvidia-smi", "-L"], capture_output=True) if shutil.which("nvidia-smi") else None
    if probe is not None and probe.returncode == 0 and probe.stdout.strip():
        pytest.skip("a GPU is present")
    q, k, v = qkv(tmp_path, "cuda")
    r = cli("softmax", "--q", q, "--k", k, "--v", v, "--device", "cuda", "--out", tmp_path / "o.npy", expect=2)
    assert one_line(r).startswith("longattn: error: --device cuda: no usable CUDA device: "), r.stderr
    assert not (tmp_path / "o.npy").exists()


def test_progress_bar_erased_before_rows():
    import pty
    master, slave = pty.openpty()
    p = subprocess.Popen([str(BIN), "bench", "--ops", "softmax", "--nmin", "8192", "--nmax", "8192",
                          "--min-time", "1.5", "--heads", "2", "--d", "32"], stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=300)
    os.close(master)
    assert p.returncode == 0, out[-2000:]
    text = out.decode(errors="replace")
    assert "[#" in text or "[." in text, "no progress bar was drawn (the run took under a second?)"
    for line in text.replace("\r\n", "\n").split("\n"):
        visible = line.split("\r")[-1]
        if "GFLOP/s" in visible or "N=" in visible:
            assert "[#" not in line.split("\033[K")[-1] and "elapsed" not in visible, repr(line)
        # a row may only follow a bar on one line if the bar was erased first
        if ("GFLOP/s" in line) and ("elapsed" in line):
            assert "\033[K" in line, repr(line)


def test_install_layout_finds_the_plot_script(tmp_path):
    r = subprocess.run(["make", "-n", "-s", "SKIP_DEPS=1", "CUDA=0", f"BUILD={BUILD}",
                        f"PREFIX={tmp_path}/p", "install", "uninstall"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"{tmp_path}/p/share/longattn" in r.stdout and "plot_collapse.py" in r.stdout
    assert re.search(r"rm -f .*share/longattn/plot_collapse\.py", r.stdout), r.stdout[-3000:]
    # the installed tree: PREFIX/bin/longattn and PREFIX/share/longattn/
    prefix = tmp_path / "p"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "share" / "longattn").mkdir(parents=True)
    shutil.copy(BIN, prefix / "bin" / "longattn")
    shutil.copy(ROOT / "scripts" / "plot_collapse.py", prefix / "share" / "longattn")
    work = tmp_path / "elsewhere"
    work.mkdir()
    r = subprocess.run([str(prefix / "bin" / "longattn"), "collapse", "--nmin", "64", "--nmax", "64",
                        "--variants", "softmax", "--json-out", "c.json", "--png", "c.png"], cwd=work,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "not found" not in r.stderr, r.stderr
    assert (work / "c.json").exists()


# -------------------------------------------------- CLI code (issue 13)

def test_cli_uses_own_prefix_and_public_header():
    for f in sorted((ROOT / "cli").glob("*.[ch]")):
        text = f.read_text()
        bad = re.findall(r'#include\s+"([^"]*)"', text)
        for inc in bad:
            assert "src/" not in inc and not inc.startswith("core/") and not inc.startswith("cpu/"), \
                f"{f.name} includes internal header {inc}"
    objs = sorted((BUILD / "obj" / "cli").glob("*.o"))
    if not objs or not shutil.which("nm"):
        pytest.skip("no CLI objects or nm")
    r = subprocess.run(["nm", "-g", "--defined-only", *map(str, objs)], capture_output=True, text=True)
    names = [l.split()[-1] for l in r.stdout.splitlines() if len(l.split()) == 3]
    wrong = [n for n in names if not (n.startswith("cli_") or n == "main")]
    assert not wrong, f"CLI functions without the cli_ prefix: {wrong}"
