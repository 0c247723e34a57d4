"""torch.library custom ops (shared/TRAINING.md §3): torch.ops.longattn.*,
their fake implementations, registered autograd, torch.compile(fullgraph=True)
of 2-block models per layer (equal to eager), CUDA graphs.

Needs torch >= 2.4 (the GPU machine's torch; a venv with a PyPI torch on a
CPU machine: scripts/torch_compile_check.sh). On older torch (Debian's 1.13)
the module is skipped with the reason printed."""
import os

import pytest
import torch

from test_py_common import gen, needs, randn, rel_err  # noqa: I001 (sys.path first)
import longattn
from longattn import ops as _ops

_VER = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
if _VER < (2, 4) or not hasattr(torch.library, "custom_op"):
    _why = ("torch %s < 2.4 has no torch.library.custom_op: longattn keeps its "
            "autograd.Function path there, and the compile tests are skipped" % torch.__version__)
    print("# test_compile: skipped: " + _why)
    pytest.skip(_why, allow_module_level=True)

import longattn.nn as lnn  # noqa: E402
from longattn import _torch_ops  # noqa: E402

pytestmark = needs("softmax_attention", "linear_attention", "mhla", "mhla_causal",
                   "focused_attention", "sparse_attention", "dsa_topk", "topk")


@pytest.fixture(autouse=True)
def _keep_global_torch_rng():
    """These tests seed torch's global generator (layer initialization, the
    example's training); they leave it as they found it, so that the random
    inputs of later test files do not depend on which tests ran before."""
    with torch.random.fork_rng(devices=[]):
        yield

OPS = ["softmax_attention", "linear_attention", "focused_attention", "mhla", "mhla_causal",
       "sparse_attention", "dsa_topk", "hisa_topk", "blocksparse_topk", "topk"]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and longattn.cuda_available()
                     else [])


def _has_bwd(name):
    from longattn import _backward
    return hasattr(_backward, name + "_backward")


def test_every_operator_is_a_custom_op_in_the_longattn_namespace():
    assert _ops.install_custom_ops() is _torch_ops
    for name in OPS:
        op = getattr(torch.ops.longattn, name)
        assert op.default._schema.name == "longattn::" + name


# ---------------------------------------------------------------------------
# sample calls of every op: (name, args builder, differentiable arg indices)
# ---------------------------------------------------------------------------
def _samples(device, dtype=torch.float32):
    g = gen(11)

    def r(*s, dt=dtype):
        return randn(g, *s, dtype=dt).to(device)
    W = torch.from_numpy(longattn.mhla_init((2, 2))).to(device)
    Wc = torch.from_numpy(longattn.mhla_init(5, "uniform_causal")).to(device)
    T, L = 6, 40
    idx = torch.randint(-1, L, (T, 8), generator=g, dtype=torch.int32).to(device)
    return {
        "softmax_attention": (lambda: (r(1, 33, 2, 16), r(1, 33, 2, 16), r(1, 33, 2, 8), True,
                                       None, None), (0, 1, 2)),
        "linear_attention": (lambda: (r(1, 33, 2, 16), r(1, 33, 2, 16), r(1, 33, 2, 8), None,
                                      None, "relu", True, True, 1e-6, 1.0, 16, True, None),
                             (0, 1, 2)),
        "focused_attention": (lambda: (r(1, 20, 2, 8), r(1, 20, 2, 8), r(1, 20, 2, 8),
                                       r(8, 3, 3) * 0.1, r(8) * 0.1, r(16) * 0.1, None,
                                       "flatten", [4, 5], 3.0, 1e-6), (0, 1, 2, 3, 4, 5)),
        "mhla": (lambda: (r(2, 16, 2, 8), r(2, 16, 2, 8), r(2, 16, 2, 8), W, [4, 4], [2, 2],
                          "relu_eps", "per_query", 1e-6, 1.0), (0, 1, 2, 3)),
        "mhla_causal": (lambda: (r(1, 37, 2, 8), r(1, 37, 2, 8), r(1, 37, 2, 8), Wc, 8, "relu",
                                 "none", 1e-6, None, None), (0, 1, 2, 3)),
        "sparse_attention": (lambda: (r(T, 2, 24), r(L, 24), idx, 16, None), (0, 1)),
        "dsa_topk": (lambda: (r(T, 2, 8), r(L, 8), r(T, 2).abs(), 8, None, None, True, None,
                              None), ()),
        "hisa_topk": (lambda: (r(T, 2, 8), r(L, 8), r(T, 2).abs(), 8, 8, 2, None, None, None,
                               None), ()),
        "blocksparse_topk": (lambda: (r(T, 2, 8), r(L, 8), r(T, 2).abs(), 16, 8, None, None,
                                      None, None), ()),
        "topk": (lambda: (r(5, 30), 7), ()),
    }


@pytest.mark.parametrize("name", OPS)
def test_fake_implementation_matches_the_real_outputs(name):
    from torch._subclasses.fake_tensor import FakeTensorMode
    build, _ = _samples("cpu")[name]
    args = build()
    op = getattr(torch.ops.longattn, name)
    real = op(*args)
    with FakeTensorMode() as mode:
        fargs = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        fake = op(*fargs)
    real = real if isinstance(real, tuple) else (real,)
    fake = fake if isinstance(fake, tuple) else (fake,)
    assert len(real) == len(fake)
    for a, b in zip(real, fake):
        assert a.shape == b.shape and a.dtype == b.dtype and a.device == b.device, name
    # meta tensors route through the custom ops from the public API too
    q = torch.empty(1, 9, 2, 4, device="meta")
    assert longattn.softmax_attention(q, q, q).shape == (1, 9, 2, 4)
    assert longattn.topk(torch.empty(3, 20, device="meta"), 5).shape == (3, 5)
    qi, ki, w = (torch.empty(*s, device="meta") for s in ((4, 2, 8), (30, 8), (4, 2)))
    assert longattn.dsa_topk(qi, ki, w, topk=6).shape == (4, 6)
    assert longattn.hisa_topk(qi, ki, w, topk=6, block=8, block_topk=2).dtype == torch.int32


@pytest.mark.parametrize("name", OPS)
def test_opcheck(name):
    """torch.library.opcheck: schema, fake tensor, autograd registration and
    (where the C backward exists) AOT dispatch with gradients."""
    build, diff = _samples("cpu")[name]
    args = list(build())
    tests = ["test_schema", "test_faketensor", "test_autograd_registration"]
    if diff and _has_bwd(name):
        for i in diff:
            args[i] = args[i].clone().requires_grad_(True)
        tests.append("test_aot_dispatch_dynamic")
    torch.library.opcheck(getattr(torch.ops.longattn, name), tuple(args), test_utils=tests)


def _ref_softmax(q, k, v, causal, scale, cu):
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(s, -1) @ v).transpose(1, 2)


def _ref_linear(q, k, v, S0, z0, feature, causal, normalize, eps, scale, chunk, ofs, cu):
    fq, fk = torch.relu(q), torch.relu(k)
    kv = torch.einsum("bnhd,bnhe->bnhde", fk, v).cumsum(1)
    num = torch.einsum("bnhd,bnhde->bnhe", fq, kv)
    den = torch.einsum("bnhd,bnhd->bnh", fq, fk.cumsum(1))[..., None] + eps
    return num / den


REFS = {"softmax_attention": _ref_softmax, "linear_attention": _ref_linear}


@pytest.mark.parametrize("name", sorted(REFS))
def test_custom_op_gradients_equal_float64_reference(name):
    """The registered autograd formula (the C backward, through the backward
    custom op) against torch autograd of a float64 reference."""
    if not _has_bwd(name):
        pytest.skip("longattn._backward.%s_backward is not in this build yet" % name)
    build, diff = _samples("cpu")[name]
    args = list(build())
    ins = [args[i].clone().requires_grad_(True) for i in diff]
    refs = [args[i].double().clone().requires_grad_(True) for i in diff]
    a, r = list(args), list(args)
    for j, i in enumerate(diff):
        a[i], r[i] = ins[j], refs[j]
    out = getattr(torch.ops.longattn, name)(*a)[0]
    ref = REFS[name](*r)
    assert rel_err(out, ref) < 1e-5
    dy = torch.randn(out.shape, generator=gen(2), dtype=torch.float64)
    ga = torch.autograd.grad(out, ins, dy.float())
    gr = torch.autograd.grad(ref, refs, dy)
    for x, y in zip(ga, gr):
        assert (x.double() - y).norm() / y.norm() < 1e-4


# ---------------------------------------------------------------------------
# torch.compile of 2-block models per layer
# ---------------------------------------------------------------------------
# Each compile costs seconds (Dynamo, AOT autograd, Inductor code generation:
# C++ on the CPU, Triton on CUDA), so every layer is compiled once per device
# and mode, as a training step (one joint forward + backward graph), and that
# one call checks the output and every gradient against eager. On a machine
# with CUDA the compile tests run on CUDA only (the CPU compile path is checked
# on the CPU machines, scripts/torch_compile_check.sh); LA_COMPILE_CPU=1 adds it.
class TwoBlocks(torch.nn.Module):
    def __init__(self, make, dim):
        super().__init__()
        self.a, self.b = make(), make()
        self.n1, self.n2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)

    def forward(self, x):
        x = x + self.a(self.n1(x))
        return x + self.b(self.n2(x))


LAYERS = {
    "mhla": lambda: lnn.MHLA(32, 2, blocks=(2, 2), grid=(4, 6), lepe_kernel=3),
    "mhla_causal": lambda: lnn.MHLA(32, 2, blocks=4, causal=True, chunk=8),
    "focused": lambda: lnn.FocusedLinearAttention(32, 2, map=(4, 6), kernel_size=3),
    "linear": lambda: lnn.LinearAttention(32, 2),
    "linear_causal": lambda: lnn.LinearAttention(32, 2, causal=True, feature="relu"),
}
LAYER_OPS = {"mhla": "mhla", "mhla_causal": "mhla_causal", "focused": "focused_attention",
             "linear": "linear_attention", "linear_causal": "linear_attention"}
COMPILE_DEVICES = (["cuda"] + (["cpu"] if os.environ.get("LA_COMPILE_CPU") == "1" else [])
                   if "cuda" in DEVICES else ["cpu"])
compile_heavy = pytest.mark.compile_heavy   # registered in conftest.py


def _eager_step(m, x):
    """Output and gradients (input first, then every parameter) of one
    training step's forward and backward."""
    m.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    out = m(x)
    out.square().sum().backward()
    return out.detach().clone(), [x.grad.clone()] + [p.grad.clone() for p in m.parameters()]


def _assert_step_equal(got, want, what):
    out, grads = got
    assert rel_err(out, want[0]) < 1e-5, what + ": output"
    for i, (a, b) in enumerate(zip(grads, want[1])):
        assert rel_err(a, b) < 1e-4, "%s: gradient %d" % (what, i)


@compile_heavy
@pytest.mark.parametrize("device", COMPILE_DEVICES)
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_compile_fullgraph_two_block_model_equals_eager(name, device):
    """torch.compile(fullgraph=True) (any graph break raises) of a 2-block
    model: a training step equals eager, output and every gradient; then the
    compiled model on a second input (no recompile) equals eager again."""
    torch.manual_seed(3)
    m = TwoBlocks(LAYERS[name], 32).to(device)
    x = torch.randn(2, 24, 32, device=device)
    torch._dynamo.reset()
    cm = torch.compile(m, fullgraph=True)
    if not _has_bwd(LAYER_OPS[name]):
        with torch.no_grad():
            assert rel_err(cm(x), m(x)) < 1e-5
        return
    _assert_step_equal(_eager_step(cm, x), _eager_step(m, x), name)
    x2 = torch.randn(2, 24, 32, device=device)
    _assert_step_equal(_eager_step(cm, x2), _eager_step(m, x2), name + " (second input)")


@compile_heavy
@pytest.mark.parametrize("device", COMPILE_DEVICES)
def test_compile_fullgraph_functional_ops_and_varlen(device):
    g = gen(5)
    q, k, v = (randn(g, 1, 40, 2, 16).to(device) for _ in range(3))
    cu = torch.tensor([0, 7, 40], dtype=torch.int32)

    def f(q, k, v):
        o = longattn.softmax_attention(q, k, v, causal=True)
        o = o + longattn.linear_attention(q, k, v, causal=True, chunk=16)
        o = o + longattn.softmax_attention(q, k, v, causal=True, cu_seqlens=cu)
        return o
    torch._dynamo.reset()
    assert rel_err(torch.compile(f, fullgraph=True)(q, k, v), f(q, k, v)) < 1e-5


# ---------------------------------------------------------------------------
# CUDA graphs (GPU machine)
# ---------------------------------------------------------------------------
needs_gpu = pytest.mark.skipif("cuda" not in DEVICES,
                               reason="no CUDA device (or a library built without CUDA)")


def _tup(x):
    return x if isinstance(x, tuple) else (x,)


def _graph_replay_equals_eager(op, args, what):
    """Capture op(*args) in a CUDA graph; replay it into poisoned outputs and
    compare with eager bit for bit; then scale every floating-point input in
    place and replay again against eager on the new inputs (the replay
    recomputes from the captured input buffers)."""
    eager = _tup(op(*args))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        op(*args)   # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _tup(op(*args))
    assert len(captured) == len(eager), what
    for round_ in ("captured inputs", "inputs scaled in place"):
        for c in captured:
            c.fill_(float("nan") if c.is_floating_point() else -7)
        graph.replay()
        torch.cuda.synchronize()
        for i, (a, b) in enumerate(zip(eager, captured)):
            assert a.shape == b.shape and a.dtype == b.dtype, (what, i)
            assert torch.equal(a, b), "%s: output %d differs after replay (%s)" % (what, i,
                                                                                 round_)
        for a in args:
            if isinstance(a, torch.Tensor) and a.is_floating_point():
                a.mul_(1.25)
        eager = _tup(op(*args))


@needs_gpu
@pytest.mark.parametrize("name", OPS)
def test_cuda_graph_replay_equals_eager(name):
    build, _ = _samples("cuda")[name]
    _graph_replay_equals_eager(getattr(torch.ops.longattn, name), build(), name)


def _backward_samples(name, device="cuda"):
    """(backward op, its arguments) built from a forward sample: the
    forward's outputs where the backward reads them, a random d_out."""
    g = gen(12)
    build, _ = _samples(device)[name]
    a = build()
    out = _tup(getattr(torch.ops.longattn, name)(*a))

    def d(x):
        return randn(g, *x.shape).to(device=device, dtype=x.dtype)
    op = getattr(torch.ops.longattn, name + "_backward")
    if name == "softmax_attention":
        q, k, v, causal, scale, cu = a
        return op, (q, k, v, out[0], out[1], d(out[0]), causal, scale, cu)
    if name == "linear_attention":
        q, k, v, S0, z0, feat, causal, norm, eps, scale, chunk, _, cu = a
        return op, (q, k, v, d(out[0]), S0, z0, d(out[1]), d(out[2]), feat, causal, norm, eps,
                    scale, chunk, cu)
    if name == "focused_attention":
        q, k, v = a[:3]
        return op, (q, k, v, d(out[0])) + tuple(a[3:])
    if name in ("mhla", "mhla_causal"):
        return op, tuple(a[:4]) + (d(out[0]),) + tuple(a[4:])
    if name == "sparse_attention":
        q, kv, idx, dv, scale = a
        return op, (q, kv, idx, out[0], out[1], d(out[0]), dv, scale)
    raise KeyError(name)


BWD_OPS = ["softmax_attention", "linear_attention", "focused_attention", "mhla",
           "mhla_causal", "sparse_attention"]


@needs_gpu
@pytest.mark.parametrize("name", BWD_OPS)
def test_cuda_graph_replay_of_backward_equals_eager(name):
    if not _has_bwd(name):
        pytest.skip("longattn._backward.%s_backward is not in this build yet" % name)
    op, args = _backward_samples(name)
    _graph_replay_equals_eager(op, args, name + "_backward")


@compile_heavy
@needs_gpu
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_compile_reduce_overhead_cuda_graphs_equals_eager(name):
    """torch.compile(mode="reduce-overhead", fullgraph=True): Inductor with
    CUDA graphs (cudagraph trees), training steps (forward and backward
    replayed from graphs): no cudagraph skipped, every step on new inputs
    equal to eager, output and gradients."""
    from torch._dynamo.utils import counters
    torch.manual_seed(4)
    m = TwoBlocks(LAYERS[name], 32).cuda()
    torch._dynamo.reset()
    counters.clear()
    cm = torch.compile(m, mode="reduce-overhead", fullgraph=True)
    train = _has_bwd(LAYER_OPS[name])
    for step in range(4):   # warm-up, record, then replays
        x = torch.randn(2, 24, 32, device="cuda")
        if train:
            _assert_step_equal(_eager_step(cm, x), _eager_step(m, x), "%s step %d" % (name, step))
        else:
            with torch.no_grad():
                assert rel_err(cm(x).clone(), m(x)) < 1e-5
    skips = dict(counters["inductor"]).get("cudagraph_skips", 0)
    assert skips == 0, "cudagraphs skipped: %s" % dict(counters["inductor"])


def test_environment_report():
    print("# test_compile: torch %s, devices %s, compile devices %s, LA_BUILD=%s"
          % (torch.__version__, DEVICES, COMPILE_DEVICES, os.environ.get("LA_BUILD", "build")))
