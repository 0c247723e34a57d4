"""The two call paths of the operators: longattn._fastcall (the CPython
extension, python/longattn/_fastcall.c) and ctypes (its fallback).

Every operator routed through Call.launch is run through both on the same
inputs (odd sizes, strided and permuted views, Dv != D, optional tensors
present and absent, float64 / bfloat16): the outputs must be bit-equal, and
equal to a float64 reference where one is cheap. Bad arguments must raise
the same exception with the same message on both paths, and the extension
must really be taken where it applies (Call.run, the ctypes path, is
trapped). The extension tests skip, with the reason, where it is not built
(`make pyext`: it needs the interpreter's Python.h).
"""
import os
import sys
import threading

import numpy as np
import pytest

import test_py_common as common  # sets LONGATTN_LIB, imports longattn
import torch

import longattn
from longattn import _tensor

pytestmark = pytest.mark.skipif(not common.lib_loads(), reason="liblongattn.so not built")

PATHS = ("fastcall", "ctypes")


@pytest.fixture
def restore_path():
    yield
    _tensor.use_fastcall(True)


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def _bnhd(B, N, H, D, g, dtype=torch.float32, device="cpu", permuted=False):
    if permuted:  # a [B, H, N, D] tensor passed as its [B, N, H, D] view
        return torch.randn(B, H, N, D, generator=g, dtype=dtype).to(device).transpose(1, 2)
    return torch.randn(B, N, H, D, generator=g, dtype=dtype).to(device)


def _cases(device="cpu"):
    """(name, zero-argument callable returning a tensor or a tuple) per case."""
    g = _g(7)
    q = _bnhd(2, 63, 3, 16, g, device=device)
    k = _bnhd(2, 63, 3, 16, g, device=device, permuted=True)
    v = _bnhd(2, 63, 3, 24, g, device=device)[..., ::2]  # strided last dim, Dv 12
    v = v.contiguous() if device == "cuda" else v
    q64, k64, v64 = (x.double() for x in (q, k, v))
    qb = q.to(torch.bfloat16)
    W = (torch.rand(4, 4, generator=g) + 0.5).to(device)
    Wc = (torch.rand(8, 8, generator=g) + 0.5).to(device)
    S0 = torch.randn(2, 3, 16, 12, generator=g).to(device)
    z0 = torch.rand(2, 3, 16, generator=g).to(device)
    qi, ki = torch.randn(17, 2, 16, generator=g).to(device), torch.randn(65, 16, generator=g).to(device)
    w = torch.rand(17, 2, generator=g).to(device)
    start = torch.zeros(17, dtype=torch.int32).to(device)
    end = torch.full((17,), 65, dtype=torch.int32).to(device)
    sc = torch.randn(9, 65, generator=g).to(device)
    qs, kv = torch.randn(17, 4, 24, generator=g).to(device), torch.randn(65, 24, generator=g).to(device)
    idx = (torch.arange(17 * 8, dtype=torch.int32) % 65).reshape(17, 8).to(device)
    qm = torch.randn(1, 36, 2, 8, generator=g).to(device)
    conv = (torch.randn(8, 3, 3, generator=g) * 0.1).to(device)
    return [
        ("softmax", lambda: longattn.softmax_attention(q, k, v, causal=True, return_lse=True)),
        ("softmax_f64", lambda: longattn.softmax_attention(q64, k64, v64)),
        ("softmax_bf16", lambda: longattn.softmax_attention(qb, qb, qb)),
        ("linear", lambda: longattn.linear_attention(q, k, v, feature="elu1")),
        ("linear_causal_state", lambda: longattn.linear_attention(
            q, k, v, causal=True, initial_state=(S0, z0), output_final_state=True, chunk=16)),
        ("mhla", lambda: longattn.mhla(q, k, v, W, blocks=4)),
        ("mhla_causal", lambda: longattn.mhla_causal(q, k, v, Wc, chunk=8)),
        ("focused", lambda: longattn.focused_attention(qm, qm, qm, map=(6, 6), conv=conv)),
        ("dsa", lambda: longattn.dsa_topk(qi, ki, w, topk=8, return_scores=True)),
        ("dsa_range", lambda: longattn.dsa_topk(qi, ki, w, topk=8, start=start, end=end)),
        ("hisa", lambda: longattn.hisa_topk(qi, ki, w, topk=8, block=16, block_topk=2)),
        ("blocksparse", lambda: longattn.blocksparse_topk(qi, ki, w, topk=16, block=8)),
        ("topk", lambda: longattn.topk(sc, 7)),
        ("sparse", lambda: longattn.sparse_attention(qs, kv, idx, dv=16)),
    ]


def _flat(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


def _flatten_all(r):
    out = []
    for x in _flat(r):
        out.extend(_flatten_all(x) if isinstance(x, (tuple, list)) else [x])
    return out


def _run_both(cases):
    res = {}
    for path in PATHS:
        common.use_path(path)
        res[path] = [_flatten_all(fn()) for _, fn in cases]
    _tensor.use_fastcall(True)
    return res


def _assert_same(res, cases):
    for (name, _), a, b in zip(cases, res["fastcall"], res["ctypes"]):
        assert len(a) == len(b), name
        for x, y in zip(a, b):
            assert x.dtype == y.dtype and x.shape == y.shape and x.device == y.device, name
            assert torch.equal(x, y) or torch.allclose(x, y, rtol=0, atol=0, equal_nan=True), \
                "%s: the two paths differ" % name
            if x.is_floating_point():
                assert not torch.isnan(x).any(), "%s: an output element was not written" % name


def test_both_paths_bit_equal(restore_path):
    common.fastcall_or_skip()
    with torch.no_grad():
        cases = _cases()
        _assert_same(_run_both(cases), cases)


@pytest.mark.parametrize("path", PATHS)
def test_softmax_against_float64_reference(path, restore_path):
    g = _g(3)
    q, k = _bnhd(1, 65, 2, 32, g), _bnhd(1, 65, 2, 32, g, permuted=True)
    v = _bnhd(1, 65, 2, 48, g)
    s = torch.einsum("bnhd,bmhd->bhnm", q.double(), k.double()) * 32 ** -0.5
    ref = torch.einsum("bhnm,bmhd->bnhd", torch.softmax(s, -1), v.double())
    common.use_path(path)
    out = longattn.softmax_attention(q, k, v)
    err = (out.double() - ref).norm() / ref.norm()
    assert err < 1e-5, (path, float(err))


def test_extension_path_is_taken(restore_path, monkeypatch):
    """With the extension on, torch CPU tensors never reach Call.run (the
    ctypes path); numpy arrays always do."""
    common.fastcall_or_skip()
    seen = common.ctypes_calls(monkeypatch)
    with torch.no_grad():
        for name, fn in _cases():
            fn()
    assert seen == [], "took the ctypes path: %s" % seen
    a = np.random.default_rng(0).standard_normal((1, 8, 2, 4)).astype(np.float32)
    longattn.softmax_attention(a, a, a)
    assert seen == ["la_softmax_attention"]


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the very exception is compared
        return type(e), str(e)
    return None


def test_errors_equal_on_both_paths(restore_path):
    """Arguments the extension does not take (it returns to the ctypes path)
    and arguments the C library refuses: the same exception, same message."""
    common.fastcall_or_skip()
    g = _g(5)
    q = _bnhd(1, 16, 2, 8, g)
    W = torch.rand(2, 2)
    bad = [
        lambda: longattn.softmax_attention(q, q[:, :15], q),             # shape (C library)
        lambda: longattn.softmax_attention(q, q, q.to(torch.int64)),     # dtype
        lambda: longattn.softmax_attention(q, [1.0], q),                 # not a tensor
        lambda: longattn.softmax_attention(q, q, None),                  # required None
        lambda: longattn.softmax_attention(q, q, q.reshape(1, 16, 2, 2, 4)),  # rank 5
        lambda: longattn.mhla(q, q, q, W.to(torch.int32), blocks=2),     # mixing dtype
        lambda: longattn.mhla_causal(q, q, q, W, chunk=2),               # M too small
        lambda: longattn.topk(torch.randn(3, 5, 2), 2),  # scores of rank 3
        lambda: longattn.dsa_topk(q[0], q[0, :, 0], q[0, :, :, 0], topk=4,
                                  start=torch.zeros(16, dtype=torch.int64)),
        lambda: longattn.sparse_attention(q[0], q[0, :, 0], torch.zeros(16, 2), dv=4),
    ]
    for i, fn in enumerate(bad):
        errs = {}
        for path in PATHS:
            common.use_path(path)
            errs[path] = _error(fn)
        assert errs["fastcall"] is not None, "case %d did not raise" % i
        assert not errs["fastcall"][1].startswith("call:"), errs  # not the extension's own
        assert errs["fastcall"] == errs["ctypes"], (i, errs)


def test_numpy_beside_torch_falls_back(restore_path):
    """A numpy array among torch tensors is viewed by the ctypes path."""
    common.fastcall_or_skip()
    q = _bnhd(1, 16, 2, 8, _g(6))
    res = {path: (common.use_path(path), longattn.softmax_attention(q, q, q.numpy()))[1] for path in PATHS}
    assert torch.equal(res["fastcall"], res["ctypes"])


def test_parameter_and_subclass_inputs(restore_path):
    """A torch.nn.Parameter (a Tensor subclass) and a tensor with a storage
    offset go through the extension like plain tensors, with equal results."""
    common.fastcall_or_skip()
    g = _g(9)
    base = torch.randn(3, 1, 33, 2, 8, generator=g)
    q = base[1]  # storage offset
    p = torch.nn.Parameter(torch.randn(1, 33, 2, 8, generator=g), requires_grad=False)
    res = {}
    for path in PATHS:
        common.use_path(path)
        res[path] = longattn.linear_attention(q, p, q, causal=True, chunk=4)
    assert torch.equal(res["fastcall"], res["ctypes"])


@pytest.mark.parametrize("path", PATHS)
def test_mhla_decoder_append(path, restore_path):
    g = _g(11)
    q = _bnhd(1, 20, 2, 8, g)
    W = longattn.mhla_init(5, kind="uniform_causal")
    ref = longattn.mhla_causal(q, q, q, torch.from_numpy(W), chunk=4)
    common.use_path(path)
    dec = longattn.MHLADecoder(W, batch=1, heads=2, head_dim=8, chunk=4)
    out = torch.cat([dec.append(q[:, t:t + 1], q[:, t:t + 1], q[:, t:t + 1])
                     for t in range(20)], 1)
    assert len(dec) == 20
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_threads_share_nothing(restore_path):
    """Views live on the extension's stack: concurrent calls from several
    Python threads give each thread its own result."""
    common.fastcall_or_skip()
    g = _g(13)
    xs = [_bnhd(1, 40, 2, 8, g) for _ in range(4)]
    want = [longattn.softmax_attention(x, x, x) for x in xs]
    got = [None] * 4
    fails = []

    def work(i):
        try:
            for _ in range(50):
                o = longattn.softmax_attention(xs[i], xs[i], xs[i])
                if not torch.equal(o, want[i]):
                    fails.append(i)
            got[i] = o
        except Exception as e:  # noqa: BLE001
            fails.append(repr(e))
    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not fails, fails
    assert all(torch.equal(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("path", PATHS)
def test_arity_is_checked(path, restore_path):
    """A launch with the wrong number of tensors for the C signature raises
    before anything is called: TypeError from the extension; on the ctypes
    path the session check of tests/python/conftest.py (AssertionError)."""
    if path == "ctypes" and getattr(_tensor.Call.run, "__module__", "") != "conftest":
        pytest.skip("the ctypes path's count check is tests/python/conftest.py's (not active)")
    q = torch.randn(1, 4, 1, 4)
    common.use_path(path)
    c = _tensor.Call("softmax_attention", q)
    p = longattn.ops._softmax_params(False, None)
    with pytest.raises(TypeError if path == "fastcall" else AssertionError):
        c.launch("la_softmax_attention", p, ("q", "k", "v", "out"), q, q, q, q)
    c._release()


def test_unloadable_extension_falls_back_to_ctypes(tmp_path):
    """An extension file that does not load (built for another ABI, or
    corrupt) beside the library is ignored: the calls take ctypes, and
    fastcall_status() names the file and the reason."""
    code = ("import torch, longattn; from longattn import _tensor; "
            "q = torch.randn(1, 8, 2, 4); o = longattn.softmax_attention(q, q, q); "
            "print(_tensor.fastcall_status()); print(bool(torch.isfinite(o).all()))")
    r, bad = common.run_beside_unloadable_extension(tmp_path, code)
    assert r.returncode == 0, r.stderr
    status, finite = r.stdout.strip().splitlines()[-2:]
    assert status.startswith("ctypes (") and str(bad) in status, status
    assert finite == "True"


def test_status_string():
    s = _tensor.fastcall_status()
    assert s.startswith("longattn._fastcall (") or s.startswith("ctypes ("), s


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_both_paths_bit_equal_cuda(restore_path):
    common.fastcall_or_skip()
    if not _tensor.cuda_available():
        pytest.skip("liblongattn built without CUDA")
    with torch.no_grad():
        cases = _cases("cuda")
        res = _run_both(cases)
        torch.cuda.synchronize()
        _assert_same(res, cases)


def test_slots_released_after_an_extension_error(restore_path):
    """An error raised inside the extension's launch (here the arity check)
    leaves the thread context's view slots free, traceback alive or not."""
    common.fastcall_or_skip()
    q = torch.randn(1, 4, 1, 4)
    c = _tensor.Call("softmax_attention", q)
    p = longattn.ops._softmax_params(False, None)
    with pytest.raises(TypeError) as info:
        c.launch("la_softmax_attention", p, ("q", "k", "v", "out"), q, q, q, q)
    assert info.traceback is not None
    assert not _tensor.thread_context().slots_busy
    assert torch.isfinite(longattn.softmax_attention(q, q, q)).all()
