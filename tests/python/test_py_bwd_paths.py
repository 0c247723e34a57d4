"""The backward passes' two call paths and the eager autograd route (issue 14:
the package's host time per training step).

The C backward of every differentiable operator is called through Call.launch
(longattn._backward): the compiled extension longattn._fastcall where it is
in use, ctypes as its fallback. Both must give bit-equal gradients (odd
sizes, permuted and strided views, Dv != D, optional tensors present and
absent, float64 / bfloat16) and the same errors for a bad d_out or state
gradient (wrong shape / dtype / device: LA_ERR_SHAPE / LA_ERR_DTYPE naming
the argument; the inputs unchanged), the extension must really be taken, and
a missing or corrupt extension falls back to ctypes with the same gradients.
Eager autograd of plain tensors goes through longattn.autograd's Functions
on every torch (torch >= 2.4: not the torch.library custom ops, which stay
the route of tracers: subclasses, dispatch modes, meta tensors). Gradient
correctness against float64 is test_py_backward's; a float64 check here
guards the Function route itself.
"""
import os
import subprocess
import sys

import pytest
import torch

import test_py_common as common
from test_py_common import needs
import longattn
from longattn import _backward, _tensor

pytestmark = needs("softmax_attention", "linear_attention", "mhla", "mhla_causal",
                   "focused_attention", "sparse_attention")

PATHS = ("fastcall", "ctypes")
_VER = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
CUSTOM_OPS = _VER >= (2, 4) and hasattr(torch.library, "custom_op")


@pytest.fixture(autouse=True)
def _restore_path():
    yield
    _tensor.use_fastcall(True)


def _leaf(x):
    return x.detach().requires_grad_(True)


def _cases(device="cpu", seed=0):
    """name -> (differentiable inputs, forward returning the differentiable
    outputs as a tuple). Odd sizes, a permuted q, a strided v (Dv != D),
    grouped-query heads, float64 and bfloat16 rows."""
    g = common.gen(seed)

    def r(*s, dtype=torch.float32, scale=1.0, shift=0.0):
        return _leaf((common.randn(g, *s) * scale + shift).to(device=device, dtype=dtype))
    B, N, H, D = 2, 65, 3, 16
    q = _leaf(common.randn(g, B, H, N, D).to(device).transpose(1, 2))     # permuted view
    k = r(B, N, H, D)
    v = common.randn(g, B, N, H, 2 * 12).to(device)[..., ::2]               # strided, Dv 12
    v = _leaf(v.contiguous() if device == "cuda" else v)  # CUDA: unit last stride
    kg, vg = r(B, 63, 1, D), r(B, 63, 1, 24)                               # GQA, Nk != Nq
    q64, k64, v64 = (_leaf(x.detach().double()) for x in (q, k, v))
    qb, kb, vb = (_leaf(x.detach().to(torch.bfloat16)) for x in (q, k, v))
    S0, z0 = r(B, H, D, 12), r(B, H, D, scale=0.1, shift=1.0)
    W2 = r(H, 6, 6, scale=0.1, shift=0.5)                                  # per-head [H, M, M]
    W1 = r(5, 5, scale=0.1, shift=0.5)
    Wc = r(9, 9, scale=0.1, shift=0.5)
    qm, km, vm = r(1, 35, 2, 8), r(1, 35, 2, 8), r(1, 35, 2, 8)             # 5 x 7 map
    conv, cb, sp = r(8, 3, 3, scale=0.1), r(8, scale=0.1), r(16, scale=0.1)
    convb = r(16, 3, 3, scale=0.05, shift=0.2)
    focus = r(2, scale=0.1, shift=2.0)
    qs, kv = r(17, 4, 24), r(63, 24)
    idx = (torch.arange(17 * 9, dtype=torch.int32).reshape(17, 9) * 7 % 70 - 1).to(device)
    return {
        "softmax": ((q, kg, vg), lambda: (longattn.softmax_attention(q, kg, vg, causal=True),)),
        "softmax_f64": ((q64, k64, v64), lambda: (longattn.softmax_attention(q64, k64, v64),)),
        "softmax_bf16": ((qb, kb, vb), lambda: (longattn.softmax_attention(qb, kb, vb),)),
        "linear": ((q, k, v), lambda: (longattn.linear_attention(q, k, v, feature="elu1"),)),
        "linear_causal_state": ((q, k, v, S0, z0), lambda: _flat(longattn.linear_attention(
            q, k, v, causal=True, chunk=16, initial_state=(S0, z0), output_final_state=True))),
        "linear_causal_S_only": ((q, k, v, S0), lambda: _flat(longattn.linear_attention(
            q, k, v, causal=True, normalize=False, chunk=16, initial_state=(S0, None),
            output_final_state=True))[:2]),
        "mhla_2d_per_head": ((q, k, v, W2), lambda: (longattn.mhla(
            q, k, v, W2, grid=(5, 13), blocks=(2, 3)),)),
        "mhla_1d_blocks_from_mixing": ((q, k, v, W1), lambda: (longattn.mhla(
            q, k, v, W1, normalize="none"),)),
        "mhla_causal": ((q, k, v, Wc), lambda: (longattn.mhla_causal(q, k, v, Wc, chunk=8),)),
        "focused_flatten": ((qm, km, vm, conv, cb, sp), lambda: (longattn.focused_attention(
            qm, km, vm, map=(5, 7), conv=conv, conv_bias=cb, softplus_param=sp),)),
        "focused_flatten_no_conv": ((qm, km, vm), lambda: (longattn.focused_attention(
            qm, km, vm, map=(5, 7)),)),
        "focused_blog": ((qm, km, vm, convb, focus), lambda: (longattn.focused_attention(
            qm, km, vm, variant="blog", map=(5, 7), conv=convb, focus=focus),)),
        "sparse": ((qs, kv), lambda: (longattn.sparse_attention(qs, kv, idx, dv=16)[0],)),
    }


def _flat(r):
    out, (S1, z1) = r
    return out, S1, z1


def _grads(ins, fwd, seed=1):
    outs = fwd()
    g = common.gen(seed)
    d = [common.randn(g, *o.shape).to(device=o.device, dtype=o.dtype) for o in outs]
    return torch.autograd.grad(outs, ins, d)


def _assert_equal(a, b, what):
    assert len(a) == len(b), what
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.dtype == y.dtype and x.shape == y.shape and x.device == y.device, (what, i)
        assert not torch.isnan(x).any(), "%s: gradient %d has unwritten (NaN) entries" % (what, i)
        assert torch.equal(x, y), "%s: gradient %d differs between the call paths" % (what, i)


def _both_paths_equal(device):
    cases = _cases(device)
    got = {}
    for path in PATHS:
        common.use_path(path)
        got[path] = {name: _grads(ins, fwd) for name, (ins, fwd) in cases.items()}
    if device == "cuda":
        torch.cuda.synchronize()
    for name in cases:
        _assert_equal(got["fastcall"][name], got["ctypes"][name], name)


def test_gradients_bit_equal_on_both_paths():
    common.fastcall_or_skip()
    _both_paths_equal("cpu")


def test_backward_takes_the_extension(monkeypatch):
    """With the extension in use, no forward or backward C call of a
    training step on CPU tensors reaches Call.run (the ctypes path)."""
    common.fastcall_or_skip()
    seen = common.ctypes_calls(monkeypatch)
    for name, (ins, fwd) in _cases().items():
        _grads(ins, fwd)
    assert seen == [], "took the ctypes path: %s" % seen


@pytest.mark.parametrize("path", PATHS)
def test_function_route_against_float64(path):
    """A training step through the Function route (either path) equals
    float64 autograd of the plain formula (softmax, causal linear with state)."""
    common.use_path(path)
    c = _cases(seed=3)
    q, kg, vg = c["softmax"][0]
    ref = [_leaf(x.detach().double()) for x in (q, kg, vg)]
    s = torch.einsum("bnhd,bmhd->bhnm", ref[0], ref[1].expand(-1, -1, 3, -1)) * 16 ** -0.5
    # bottom-right causal: query t sees keys s <= t - 2; queries 0 and 1 see none (out 0)
    s = s.masked_fill(torch.ones(65, 63, dtype=torch.bool).triu(-1), -1e30)
    seen = (torch.arange(65) >= 2).double()[None, None, :, None]
    o = torch.einsum("bhnm,bmhe->bnhe", torch.softmax(s, -1) * seen,
                     ref[2].expand(-1, -1, 3, -1))
    got = _grads(*c["softmax"])
    want = torch.autograd.grad(o, ref, common.randn(common.gen(1), *o.shape))
    for a, b in zip(got, want):
        assert (a.double() - b).norm() / b.norm() < 1e-4
    q, k, v, S0, z0 = c["linear_causal_state"][0]
    x = [_leaf(t.detach().double()) for t in (q, k, v, S0, z0)]
    fq, fk = torch.relu(x[0]), torch.relu(x[1])
    kv = torch.einsum("bnhd,bnhe->bnhde", fk, x[2]).cumsum(1) + x[3][:, None]
    ks = fk.cumsum(1) + x[4][:, None]
    num = torch.einsum("bnhd,bnhde->bnhe", fq, kv)
    den = torch.einsum("bnhd,bnhd->bnh", fq, ks)[..., None] + 1e-6
    outs = (num / den, kv[:, -1], ks[:, -1])
    g = common.gen(1)
    d = [common.randn(g, *t.shape, dtype=torch.float64) for t in outs]
    want = torch.autograd.grad(outs, x, d)
    got = _grads(*c["linear_causal_state"])
    for a, b in zip(got, want):
        assert (a.double() - b).norm() / b.norm() < 1e-4


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the very exception is compared
        return type(e), str(e)
    return None


def _bad_calls():
    """(what the message must name, the call) of backward calls with a bad
    d_out or state gradient, and the inputs they must leave unchanged."""
    g = common.gen(7)
    q = common.randn(g, 1, 9, 2, 16)
    v = common.randn(g, 1, 9, 2, 8)
    o, lse = longattn.softmax_attention(q, q, v, return_lse=True)
    W = torch.rand(3, 3, generator=g) + 0.5
    S0, z0 = torch.zeros(1, 2, 16, 8), torch.ones(1, 2, 16)
    qs, kv = common.randn(g, 5, 2, 24), common.randn(g, 11, 24)
    idx = torch.zeros(5, 3, dtype=torch.int32)
    so, slse = longattn.sparse_attention(qs, kv, idx, dv=16)
    cases = [
        ("d_out", lambda: _backward.softmax_attention_backward(q, q, v, o, lse, o[..., :7])),
        ("d_out", lambda: _backward.softmax_attention_backward(q, q, v, o, lse,
                                                               o.to(torch.int32))),
        ("d_out", lambda: _backward.softmax_attention_backward(q, q, v, o, lse,
                                                               o.to(torch.int64))),
        ("d_out", lambda: _backward.softmax_attention_backward(q, q, v, o, lse, [1.0])),
        ("d_out", lambda: _backward.softmax_attention_backward(q, q, v, o, lse, None)),
        ("lse", lambda: _backward.softmax_attention_backward(q, q, v, o, lse[:, :8], o)),
        ("d_out", lambda: _backward.linear_attention_backward(q, q, v, o[:, :8])),
        ("d_S_out", lambda: _backward.linear_attention_backward(
            q, q, v, o, causal=True, initial_state=(S0, z0),
            d_final_state=(torch.zeros(1, 2, 16, 7), None))),
        ("d_z_out", lambda: _backward.linear_attention_backward(
            q, q, v, o, causal=True, initial_state=(S0, z0),
            d_final_state=(None, torch.zeros(1, 2, 15)))),
        ("d_out", lambda: _backward.mhla_backward(q, q, v, W, o.to(torch.int32), blocks=3)),
        ("d_out", lambda: _backward.mhla_causal_backward(q, q, v, W, o[:, :, :1], chunk=3)),
        ("d_out", lambda: _backward.focused_attention_backward(q, q, v, o[:, 1:], map=(3, 3))),
        ("d_out", lambda: _backward.sparse_attention_backward(qs, kv, idx, so, slse,
                                                              so.to(torch.int32), dv=16)),
    ]
    return cases, (q, v, o, lse, W, S0, z0, qs, kv, so, slse)


def test_backward_errors_equal_on_both_paths():
    """Bad d_out / state gradients: the same exception and message on both
    paths, naming the argument (the C library's LA_ERR_SHAPE / LA_ERR_DTYPE,
    or the views' TypeError / ValueError), and the inputs unchanged."""
    common.fastcall_or_skip()
    cases, inputs = _bad_calls()
    before = [x.clone() for x in inputs]
    for i, (name, fn) in enumerate(cases):
        errs = {}
        for path in PATHS:
            common.use_path(path)
            errs[path] = _error(fn)
        assert errs["fastcall"] is not None, "case %d did not raise" % i
        assert errs["fastcall"] == errs["ctypes"], (i, errs)
        kind, msg = errs["fastcall"]
        assert name in msg, (i, msg)
        if "LA_ERR" in msg:
            assert "LA_ERR_SHAPE" in msg or "LA_ERR_DTYPE" in msg, (i, msg)
    for a, b in zip(inputs, before):
        assert torch.equal(a, b), "a failed backward call changed an input"


def test_double_backward_raises():
    """The backward is once-differentiable: create_graph=True (with a d_out
    that requires grad) gives a first gradient whose own backward raises,
    as torch's once_differentiable does."""
    ins, fwd = _cases()["linear"]
    out = fwd()[0]
    d = torch.ones_like(out, requires_grad=True)
    dq, = torch.autograd.grad(out, ins[0], d, create_graph=True)
    assert dq.requires_grad
    with pytest.raises(RuntimeError, match="once_differentiable|differentiate"):
        torch.autograd.grad(dq.sum(), ins[0])


def test_unloadable_extension_falls_back_with_equal_gradients(tmp_path):
    """A corrupt extension beside the library: a training step runs through
    ctypes (fastcall_status says why) and gives the gradients of this
    process's default path bit for bit."""
    code = (
        "import sys, torch; sys.path.insert(0, %r); import test_py_bwd_paths as t; "
        "from longattn import _tensor; "
        "ins, fwd = t._cases()['linear_causal_state']; g = t._grads(ins, fwd); "
        "ins, fwd = t._cases()['mhla_2d_per_head']; g = g + t._grads(ins, fwd); "
        "torch.save(list(g), %r); print(_tensor.fastcall_status())"
        % (os.path.dirname(os.path.abspath(__file__)), str(tmp_path / "g.pt")))
    r, _ = common.run_beside_unloadable_extension(tmp_path, code, b"junk", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1].startswith("ctypes ("), r.stdout
    theirs = torch.load(str(tmp_path / "g.pt"))
    ins, fwd = _cases()["linear_causal_state"]
    ours = list(_grads(ins, fwd))
    ins, fwd = _cases()["mhla_2d_per_head"]
    ours += list(_grads(ins, fwd))
    _assert_equal(ours, theirs, "fallback")


def _grad_fn_name(out):
    return type(out.grad_fn).__name__


def test_eager_autograd_takes_the_function_route():
    """Plain tensors (and Parameters) under eager autograd: longattn.autograd's
    Functions, on every torch version."""
    for name, (ins, fwd) in _cases().items():
        out = fwd()[0]
        assert _grad_fn_name(out).endswith("FunctionBackward"), (name, _grad_fn_name(out))
    p = torch.nn.Parameter(torch.randn(1, 8, 2, 4))
    out = longattn.linear_attention(p, p, p, causal=True)
    assert _grad_fn_name(out) == "LinearAttentionFunctionBackward"


@pytest.mark.skipif(not CUSTOM_OPS, reason="torch %s has no torch.library custom ops"
                    % torch.__version__)
def test_tracers_still_see_the_custom_ops():
    """torch >= 2.4: under a dispatch mode (make_fx) and for tensor
    subclasses, autograd-recording calls go through torch.ops.longattn, so
    the tracer records the op."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(q, k, v):
        return longattn.linear_attention(q, k, v, causal=True)
    q = torch.randn(1, 8, 2, 4, requires_grad=True)
    gm = make_fx(f)(q, q, q)
    assert "longattn.linear_attention" in gm.code, gm.code

    class Tagged(torch.Tensor):
        pass
    t = torch.randn(1, 8, 2, 4).as_subclass(Tagged).requires_grad_()
    from longattn import ops
    assert ops._how(t, t, t) == ops.CUSTOM_OP
    assert ops._how(q, q, q) == ops.AUTOGRAD
    with torch.no_grad():
        assert ops._how(q, q, q) == ops.DIRECT
    assert ops._how(torch.empty(1, 8, 2, 4, device="meta"), q, q) == ops.CUSTOM_OP


# ---------------------------------------------------------------------------
# CUDA (the GPU machine; skipped here)
# ---------------------------------------------------------------------------
def _cuda_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if not _tensor.cuda_available():
        pytest.skip("liblongattn built without CUDA")


@pytest.mark.cuda
def test_gradients_bit_equal_on_both_paths_cuda():
    _cuda_or_skip()
    common.fastcall_or_skip()
    _both_paths_equal("cuda")


@pytest.mark.cuda
def test_backward_takes_the_extension_cuda(monkeypatch):
    """On CUDA the backward runs on autograd's device thread: it must take
    the extension there too, and reuse that thread's la_context from step
    to step (a new context per step would redo its kernel attributes and
    workspace)."""
    _cuda_or_skip()
    common.fastcall_or_skip()
    cases = _cases("cuda")
    for ins, fwd in cases.values():
        _grads(ins, fwd)
    made = []
    orig_init = _tensor.Context.__init__

    def count(self):
        made.append(1)
        orig_init(self)
    seen = common.ctypes_calls(monkeypatch)
    monkeypatch.setattr(_tensor.Context, "__init__", count)
    for _ in range(3):
        for ins, fwd in cases.values():
            _grads(ins, fwd)
    torch.cuda.synchronize()
    assert seen == [], "took the ctypes path: %s" % seen
    assert made == [], "%d la_contexts created after the warm-up steps" % len(made)


@pytest.mark.cuda
def test_backward_errors_equal_on_both_paths_cuda():
    """CUDA: a d_out on the CPU, of another CUDA dtype, or of the wrong
    shape raises the same error on both paths, naming d_out."""
    _cuda_or_skip()
    common.fastcall_or_skip()
    g = common.gen(9)
    q = common.randn(g, 1, 64, 2, 16).cuda()
    o, lse = longattn.softmax_attention(q, q, q, return_lse=True)
    bad = [o.cpu(), o.to(torch.int32), o[..., :8], o[:, :63]]
    for i, d in enumerate(bad):
        errs = {}
        for path in PATHS:
            common.use_path(path)
            errs[path] = _error(lambda: _backward.softmax_attention_backward(q, q, q, o, lse, d))
        assert errs["fastcall"] is not None, "case %d did not raise" % i
        assert errs["fastcall"] == errs["ctypes"], (i, errs)
        assert "d_out" in errs["fastcall"][1], (i, errs)


# ---------------------------------------------------------------------------
# the benchmarks' workloads (no timing asserted: speed lives in benchmarks)
# ---------------------------------------------------------------------------
def test_py_backward_bench_runs(tmp_path):
    """bench/py_backward.py on the CPU: one row per op asked for, each with
    the forward's and the backward's C call captured."""
    import json
    env = dict(os.environ, PYTHONPATH=os.path.join(common.ROOT, "python"))
    r = subprocess.run([sys.executable, os.path.join(common.ROOT, "bench", "py_backward.py"),
                        "--calls", "2", "--repeats", "1", "--ops", "softmax,mhla,sparse",
                        "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(r.stdout[r.stdout.index("["):])
    assert [x["op"] for x in rows] == ["softmax", "mhla", "sparse"]
    want = {"softmax": ["la_softmax_attention", "la_softmax_backward"],
            "mhla": ["la_mhla_forward", "la_mhla_backward"],
            "sparse": ["la_sparse_attention", "la_sparse_attention_backward"]}
    for x in rows:
        assert x["c_calls"] == want[x["op"]], x
        assert x["c_us"] > 0 and x["pkg_us"] > 0 and x["floor_us"] > 0, x


def test_gpu_backward_workloads_on_cpu():
    """bench/gpu_backward.py's ours_py workloads at tiny sizes on the CPU:
    a training step of each through both call paths, bit-equal gradients."""
    sys.path.insert(0, os.path.join(common.ROOT, "bench"))
    try:
        import gpu_backward
    finally:
        sys.path.pop(0)
    got = {}
    for path in PATHS:
        if path == "fastcall" and _tensor.fastcall_module() is None:
            continue
        common.use_path(path)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(common.SEED)  # the cases draw from the global generator
            for name, ins, fwd in gpu_backward.ours_py_cases("cpu", small=True):
                out = fwd()
                out = out[0] if isinstance(out, tuple) else out
                d = common.randn(common.gen(4), *out.shape).to(out.dtype)
                got.setdefault(name, []).append(torch.autograd.grad(out, ins, d))
    assert len(got) >= 9, sorted(got)
    for name, gs in got.items():
        for x in gs[0]:
            assert torch.isfinite(x.float()).all(), name
        if len(gs) == 2:
            _assert_equal(gs[0], gs[1], name)
