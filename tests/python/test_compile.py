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


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_compile_fullgraph_two_block_model_equals_eager(name, device):
    torch.manual_seed(3)
    m = TwoBlocks(LAYERS[name], 32).to(device)
    x = torch.randn(2, 24, 32, device=device)
    torch._dynamo.reset()
    cm = torch.compile(m, fullgraph=True)     # any graph break raises
    with torch.no_grad():
        assert rel_err(cm(x), m(x)) < 1e-5
    if not _has_bwd(LAYER_OPS[name]):
        return
    xe = x.clone().requires_grad_(True)
    xc = x.clone().requires_grad_(True)
    m(xe).square().sum().backward()
    ge = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    cm(xc).square().sum().backward()
    assert rel_err(xc.grad, xe.grad) < 1e-4
    for p, g in zip(m.parameters(), ge):
        assert rel_err(p.grad, g) < 1e-4


@pytest.mark.parametrize("device", DEVICES)
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


@needs_gpu
@pytest.mark.parametrize("name", OPS)
def test_cuda_graph_replay_equals_eager(name):
    build, _ = _samples("cuda")[name]
    args = build()
    op = getattr(torch.ops.longattn, name)
    eager = op(*args)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        op(*args)   # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = op(*args)
    graph.replay()
    torch.cuda.synchronize()
    eager = eager if isinstance(eager, tuple) else (eager,)
    captured = captured if isinstance(captured, tuple) else (captured,)
    for a, b in zip(eager, captured):
        assert torch.equal(a, b), name


@needs_gpu
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_compile_reduce_overhead_cuda_graphs_equals_eager(name):
    torch.manual_seed(4)
    m = TwoBlocks(LAYERS[name], 32).cuda()
    x = torch.randn(2, 24, 32, device="cuda")
    torch._dynamo.reset()
    cm = torch.compile(m, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        ref = m(x)
        for _ in range(3):   # record, then replay
            out = cm(x)
        assert rel_err(out, ref) < 1e-5


def test_environment_report():
    print("# test_compile: torch %s, devices %s, LA_BUILD=%s"
          % (torch.__version__, DEVICES, os.environ.get("LA_BUILD", "build")))
