"""CLI behaviour common to every command: --help everywhere, exit status 2
with a one-line message and no output file on bad input, malformed .npy
files rejected, install + pkg-config + the README's C example."""
import os
import subprocess
import tempfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("LA_BUILD", "build"))
EXE = os.path.join(BUILD, "longattn")

OPS = ["softmax", "linear", "mhla", "mhla-init", "focused", "dsa", "hisa",
       "blocksparse", "sparse-attn", "attn-map"]


def run(*args, **kw):
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=300, **kw)


def test_top_level_help_and_version():
    r = run("--help")
    assert r.returncode == 0 and "run OP" in r.stdout
    r = run("version")
    assert r.returncode == 0 and "blas=" in r.stdout
    r = run()
    assert r.returncode == 2
    r = run("frobnicate")
    assert r.returncode == 2 and "unknown command" in r.stderr


@pytest.mark.parametrize("cmd", ["demo", "bench", "collapse", "eval-index"])
def test_command_help(cmd):
    r = run(cmd, "--help")
    assert r.returncode == 0, r.stderr
    assert "usage" in r.stdout.lower()


@pytest.mark.parametrize("op", OPS)
def test_op_help_lists_options_with_defaults(op):
    r = run("run", op, "--help")
    assert r.returncode == 0, r.stderr
    assert "--device" in r.stdout and "--threads" in r.stdout
    assert "default" in r.stdout


def test_run_unknown_op_and_option():
    r = run("run", "nonsense")
    assert r.returncode == 2 and "nonsense" in r.stderr
    r = run("run", "softmax", "--bogus", "1")
    assert r.returncode == 2 and "--bogus" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def _write_bad(path, kind):
    good = np.ones((1, 4, 1, 2), np.float32)
    np.save(path, good)
    raw = open(path, "rb").read()
    if kind == "truncated":
        raw = raw[:-3]
    elif kind == "magic":
        raw = b"XXNUMPY" + raw[7:]
    elif kind == "fortran":
        np.save(path, np.asfortranarray(np.ones((1, 4, 3, 2), np.float32)))
        raw = open(path, "rb").read()
    elif kind == "bigendian":
        np.save(path, good.astype(">f4"))
        raw = open(path, "rb").read()
    elif kind == "int8":
        np.save(path, good.astype(np.int8))
        raw = open(path, "rb").read()
    elif kind == "empty":
        raw = b""
    open(path, "wb").write(raw)


@pytest.mark.parametrize("kind", ["truncated", "magic", "fortran", "bigendian", "int8", "empty"])
def test_malformed_npy_exit2_no_output(kind):
    with tempfile.TemporaryDirectory() as d:
        good = os.path.join(d, "good.npy")
        np.save(good, np.random.randn(1, 4, 1, 2).astype(np.float32))
        bad = os.path.join(d, "bad.npy")
        _write_bad(bad, kind)
        out = os.path.join(d, "o.npy")
        r = run("run", "softmax", "--q", bad, "--k", good, "--v", good, "--out", out)
        assert r.returncode == 2, (r.returncode, r.stderr)
        assert "bad.npy" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        assert os.listdir(d) == sorted(os.listdir(d)) and not os.path.exists(out)
        assert not any(".tmp." in f for f in os.listdir(d))


def test_missing_input_file():
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "o.npy")
        r = run("run", "softmax", "--q", os.path.join(d, "nope.npy"), "--k", "x", "--v", "y", "--out", out)
        assert r.returncode == 2 and "nope.npy" in r.stderr
        assert not os.path.exists(out)


def test_no_partial_output_when_second_output_fails():
    """--out is writable but --lse points into a missing folder: neither file remains."""
    with tempfile.TemporaryDirectory() as d:
        x = os.path.join(d, "x.npy")
        np.save(x, np.random.randn(1, 8, 2, 4).astype(np.float32))
        out = os.path.join(d, "o.npy")
        r = run("run", "softmax", "--q", x, "--k", x, "--v", x, "--out", out,
                "--lse", os.path.join(d, "missing", "lse.npy"))
        assert r.returncode == 2, r.stderr
        assert not os.path.exists(out)
        assert not any(".tmp." in f for f in os.listdir(d))


def test_cuda_without_gpu_is_a_clear_error():
    import ctypes
    lib = ctypes.CDLL(os.path.join(BUILD, "liblongattn.so"))
    avail = ctypes.c_int(0)
    lib.la_cuda_available(ctypes.byref(avail))
    if avail.value:
        pytest.skip("a GPU is present")
    with tempfile.TemporaryDirectory() as d:
        x = os.path.join(d, "x.npy")
        np.save(x, np.random.randn(1, 8, 2, 4).astype(np.float32))
        out = os.path.join(d, "o.npy")
        r = run("run", "softmax", "--q", x, "--k", x, "--v", x, "--out", out, "--device", "cuda")
        assert r.returncode == 2 and "cuda" in r.stderr.lower()
        assert not os.path.exists(out)


def test_install_pkgconfig_and_c_example():
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "prefix")
        r = subprocess.run(["make", "-s", "SKIP_DEPS=1", "BUILD=" + os.path.relpath(BUILD, ROOT),
                            "install", "PREFIX=" + prefix], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        for f in ["include/longattn.h", "lib/liblongattn.a", "lib/liblongattn.so", "bin/longattn",
                  "lib/pkgconfig/longattn.pc"]:
            assert os.path.exists(os.path.join(prefix, f)), f
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib/pkgconfig"))
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "--static", "longattn"], env=env,
                               capture_output=True, text=True)
        if flags.returncode != 0:
            pytest.skip("pkg-config not installed")
        exe = os.path.join(d, "example")
        lib_a = os.path.join(prefix, "lib", "liblongattn.a")
        cflags = [f for f in flags.stdout.split() if f.startswith("-I")]
        libs = [f for f in flags.stdout.split() if not f.startswith("-I") and f != "-llongattn"]
        r = subprocess.run(["cc", "-std=c11", os.path.join(ROOT, "examples", "softmax_example.c"), *cflags,
                            lib_a, *libs, "-o", exe], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        r = subprocess.run([exe], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout + r.stderr
        assert "v" in r.stdout  # the shape error names the argument
