"""Shared helpers of the longattn Python tests (imported by the other
test_py_*.py files) plus tests of the package plumbing: library loading,
status -> exception mapping, lazy symbols.

The package is imported from <repo>/python; the library is
$LA_BUILD/liblongattn.so (default build/), relative to the repository root.
"""
import os
import sys
import time
import warnings

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
if os.path.join(ROOT, "python") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "python"))
BUILD = os.environ.get("LA_BUILD", "build")
os.environ.setdefault("LONGATTN_LIB", os.path.join(ROOT, BUILD, "liblongattn.so"))
LIB = os.environ["LONGATTN_LIB"]
os.environ.setdefault("LONGATTN_POISON", "1")  # outputs start as NaN: checks full writes

import torch  # noqa: E402

import longattn  # noqa: E402
from longattn import _lib  # noqa: E402

# One seed per test process, printed (pytest shows it with -s or on failure
# through the captured output), replayable with LA_TEST_SEED.
SEED = int(os.environ.get("LA_TEST_SEED", "0")) or (time.time_ns() % (2**31))
print("# test_py: LA_TEST_SEED=%d" % SEED)


def lib_loads():
    try:
        longattn.library_path()
        return True
    except OSError:
        return False


def needs(*ops):
    """Skip unless the library implements every Python function in ops."""
    if not lib_loads():
        return pytest.mark.skip(reason="liblongattn.so not found at %s" % LIB)
    missing = [s for op in ops for s in longattn.OPS[op] if not _lib.lib.has(s)]
    return pytest.mark.skipif(bool(missing), reason="C symbols not in %s yet: %s"
                              % (LIB, ", ".join(missing)))


# The `cuda` mark (select with `pytest -m cuda` on the GPU machine). It is not
# registered in an ini file, so silence pytest's unknown-mark warning here.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
    cuda = pytest.mark.cuda
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch.cuda unavailable")


def fastcall_or_skip():
    """Skip unless longattn._fastcall is the call path in use."""
    from longattn import _tensor
    if _tensor.fastcall_module() is None:
        pytest.skip("longattn._fastcall is not in use: %s" % _tensor.fastcall_status())


def use_path(path):
    """Take the call path "fastcall" (skipping where the extension is not in
    use) or "ctypes"."""
    from longattn import _tensor
    if path == "fastcall":
        _tensor.use_fastcall(True)
        fastcall_or_skip()
    else:
        _tensor.use_fastcall(False)


def ctypes_calls(monkeypatch):
    """The names of the C functions called through the ctypes path
    (Call.run) from now on, in a list that fills as they are called."""
    from longattn import _tensor
    seen = []
    orig = _tensor.Call.run

    def trap(self, fn_name, *args):
        seen.append(fn_name)
        return orig(self, fn_name, *args)
    monkeypatch.setattr(_tensor.Call, "run", trap)
    return seen


def run_beside_unloadable_extension(tmp_path, code, content=b"not an ELF file", timeout=120):
    """Run `python -c code` in a fresh process whose library is a copy of LIB
    in tmp_path with an extension file beside it that does not load (bytes
    `content`). Returns (the CompletedProcess, the extension's path)."""
    import shutil
    import subprocess
    import sysconfig
    lib = tmp_path / "liblongattn.so"
    shutil.copy(LIB, lib)
    bad = tmp_path / ("_fastcall" + sysconfig.get_config_var("EXT_SUFFIX"))
    bad.write_bytes(content)
    env = dict(os.environ, LONGATTN_LIB=str(lib), LA_TEST_SEED=str(SEED),
               PYTHONPATH=os.path.join(ROOT, "python"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=timeout)
    return r, bad


def gen(salt=0):
    """A torch.Generator seeded from SEED and a per-test salt."""
    g = torch.Generator()
    g.manual_seed(SEED * 1000003 + salt)
    return g


def randn(g, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def rel_err(a, ref):
    """max |a - ref| / max |ref| (as tests/test_util.h la_rel_err); NaN in a
    where ref is finite gives inf."""
    a = torch.as_tensor(np.asarray(a) if isinstance(a, np.ndarray) else a).double().cpu()
    ref = torch.as_tensor(ref).double().cpu()
    assert a.shape == ref.shape, (a.shape, ref.shape)
    fin = torch.isfinite(ref)
    if torch.isnan(a[fin]).any():
        return float("inf")
    # non-finite reference entries (e.g. -inf lse) must match exactly
    if not torch.equal(a[~fin], ref[~fin]):
        return float("inf")
    if fin.sum() == 0:
        return 0.0
    d = (a[fin] - ref[fin]).abs().max().item()
    m = ref[fin].abs().max().item()
    return d / max(m, 1e-30)


def bhnd(x):
    """The same values as x [B,N,H,D] but stored as a [B,H,N,D] buffer and
    returned as a permuted (non-contiguous) [B,N,H,D] view."""
    v = x.transpose(1, 2).contiguous().transpose(1, 2)
    assert not v.is_contiguous() or x.shape[1] == 1 or x.shape[2] == 1
    assert torch.equal(v, x)
    return v


def rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


# ---------------------------------------------------------------------------
# plumbing tests
# ---------------------------------------------------------------------------
pytestmark_lib = pytest.mark.skipif(not lib_loads(), reason="liblongattn.so not found")


@pytestmark_lib
def test_library_loads_from_build_tree():
    assert os.path.samefile(longattn.library_path(), LIB)
    info = longattn.build_info()
    assert info.startswith(longattn.__version__), info
    assert isinstance(longattn.cuda_available(), bool)


@pytestmark_lib
def test_status_strings_and_exception_mapping():
    from longattn._errors import error_from_status
    for code, name in _lib.STATUS_NAMES.items():
        assert _lib.lib.la_status_string(code).decode() == name
    # a real failing call: rank 5 is refused by la_tensor_init with a message
    t = _lib.la_tensor()
    ne = (_lib.ctypes.c_int64 * 5)(1, 2, 3, 4, 5)
    s = _lib.lib.la_tensor_init(_lib.ctypes.byref(t), None, 0, 0, 5, ne)
    assert s != 0
    e = error_from_status("la_tensor_init", s)
    assert isinstance(e, ValueError) and isinstance(e, longattn.LongattnError)
    assert e.message and e.message in str(e)
    assert isinstance(error_from_status("x", _lib.LA_ERR_NOMEM), RuntimeError)
    assert isinstance(error_from_status("x", _lib.LA_ERR_DEVICE), RuntimeError)
    assert not isinstance(error_from_status("x", _lib.LA_ERR_DEVICE), ValueError)
    u = error_from_status("x", _lib.LA_ERR_UNSUPPORTED)
    assert isinstance(u, RuntimeError) and isinstance(u, NotImplementedError)
    for code in (_lib.LA_ERR_ARG, _lib.LA_ERR_SHAPE, _lib.LA_ERR_DTYPE, _lib.LA_ERR_OVERFLOW):
        assert isinstance(error_from_status("x", code), ValueError)


@pytestmark_lib
def test_missing_symbol_is_not_implemented_at_call_time():
    lib = _lib.Library()  # a fresh loader: nothing resolved yet
    assert lib.has("la_build_info")
    assert not lib.has("la_no_such_operator")
    with pytest.raises(NotImplementedError, match="la_no_such_operator"):
        lib.la_no_such_operator


def test_explicit_bad_library_path_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("LONGATTN_LIB", "/nonexistent/liblongattn.so")
    lib = _lib.Library()
    with pytest.raises(OSError, match="LONGATTN_LIB"):
        lib.dll


@pytestmark_lib
def test_threads_setting_roundtrip():
    old = longattn.get_num_threads()
    try:
        longattn.set_num_threads(1)
        ctx = longattn._tensor.thread_context()
        ctx.prepare(None)
        n = _lib.ctypes.c_int(-1)
        assert _lib.lib.la_context_get_threads(ctx.handle, _lib.ctypes.byref(n)) == 0
        assert n.value == 1
        with pytest.raises(ValueError):
            longattn.set_num_threads(-1)
    finally:
        longattn.set_num_threads(old)


def test_every_function_has_a_docstring_with_shapes_and_example():
    for name in longattn.OPS:
        obj = getattr(longattn, name)
        doc = obj.__doc__ or ""
        assert "Example" in doc, name
        assert "[" in doc, name  # shapes are written [..]


@pytestmark_lib
def test_views_refuse_unexpressible_strides_instead_of_copying():
    from longattn._tensor import view
    raw = np.zeros(64, dtype=np.uint8)
    x = np.ndarray(shape=(3,), dtype=np.float32, buffer=raw.data, offset=0, strides=(6,))
    with pytest.raises(ValueError, match="multiples of the item size"):
        view(x, "q")
    with pytest.raises(ValueError, match="at most 4 dims"):
        view(np.zeros((1, 1, 1, 1, 1), np.float32), "q")
    with pytest.raises(TypeError, match="numpy.ndarray or torch.Tensor"):
        view([1.0, 2.0], "q")
    with pytest.raises(ValueError, match="not supported"):
        view(np.zeros(3, np.int64), "q")
    # a strided view keeps its pointer and element strides
    a = np.zeros((4, 6), np.float32)
    t = view(a[:, 1::2], "a")
    assert t.data == a.__array_interface__["data"][0] + 4
    assert list(t.nb[:2]) == [6, 2] and list(t.ne[:2]) == [4, 3]
    tt = torch.zeros(2, 3, 4, 5).transpose(1, 2)
    t = view(tt, "t")
    assert list(t.nb) == [60, 5, 20, 1] and t.data == tt.data_ptr()
    assert t.dtype == _lib.LA_F32
    assert view(torch.zeros(2, dtype=torch.bfloat16), "b").dtype == _lib.LA_BF16
    assert view(torch.zeros(2, dtype=torch.int32), "i").dtype == _lib.LA_I32
    assert view(np.zeros(2, np.float64), "d").dtype == _lib.LA_F64
