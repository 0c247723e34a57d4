"""longattn.nn layers against plain-PyTorch reference modules with the same
parameters (the reference loads the layer's state_dict): forward, and the
gradients of every parameter and of the input once the backward passes are
in the build. The references are written from SPEC §3-§5 / the released
modules, in float64."""
import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from test_py_common import cuda, gen, needs, needs_cuda, rel_err  # noqa: I001 (sys.path first)
import longattn
import longattn.nn as lnn

pytestmark = needs("mhla", "mhla_causal", "focused_attention", "linear_attention")


@pytest.fixture(autouse=True)
def _keep_global_torch_rng():
    """These tests seed torch's global generator (layer initialization, the
    example's training); they leave it as they found it, so that the random
    inputs of later test files do not depend on which tests ran before."""
    with torch.random.fork_rng(devices=[]):
        yield


# ---------------------------------------------------------------------------
# plain-PyTorch references (same parameter names as the layers)
# ---------------------------------------------------------------------------
def _phi(x, feature):
    if feature == "relu":
        return torch.relu(x)
    if feature == "relu_eps":
        return torch.relu(x) + 1e-6
    if feature == "elu1":
        return torch.where(x >= 0, x + 1, torch.exp(torch.clamp(x, max=0)))
    if feature == "identity":
        return x
    raise ValueError(feature)


def _block_ids(grid, blocks):
    """block id of every token (SPEC §5.1), raster order."""
    coords = torch.meshgrid(*[torch.arange(n) for n in grid], indexing="ij")
    bid = torch.zeros(grid, dtype=torch.long)
    for c, n, g in zip(coords, grid, blocks):
        bid = bid * g + (c * g) // n
    return bid.reshape(-1)


class RefMHLA(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.__dict__["l"] = layer  # config only: not a submodule
        self.qkv = nn.Linear(layer.dim, 3 * layer.dim, bias=layer.qkv.bias is not None)
        self.mixing = nn.Parameter(torch.empty_like(layer.mixing))
        self.lepe = None if layer.lepe is None else type(layer.lepe)(
            layer.dim, layer.dim, layer.lepe.kernel_size, padding=layer.lepe.padding,
            groups=layer.dim)
        self.proj = nn.Linear(layer.dim, layer.dim)
        self.load_state_dict(layer.state_dict())

    def forward(self, x, grid=None):
        l = self.l
        B, N, C = x.shape
        H, D = l.num_heads, l.head_dim
        q, k, v = self.qkv(x).view(B, N, 3, H, D).unbind(2)
        W = self.mixing if self.mixing.dim() == 3 else self.mixing.expand(H, -1, -1)
        if l.causal:
            fq, fk = _phi(q, l.feature) * D ** -0.5, _phi(k, l.feature)
            c = torch.arange(N) // l.chunk
            same = c[:, None] == c[None, :]
            causal = torch.arange(N)[:, None] >= torch.arange(N)[None, :]
            Wt = torch.tril(W)[:, c][:, :, c]              # [H, N, N] W[c_t, c_s]
            mask = (same & causal) | (c[:, None] > c[None, :])
            A = torch.einsum("bthd,bshd->bhts", fq, fk) * (Wt * mask)[None]
            o = torch.einsum("bhts,bshe->bthe", A, v)
        else:
            g = grid or l.grid or (N,)
            bid = _block_ids(tuple(g), l.blocks)
            M = l.num_blocks
            P = F.one_hot(bid, M).to(x.dtype)                 # [N, M]
            fq, fk = _phi(q, l.feature), _phi(k, l.feature)
            S = torch.einsum("nm,bnhd,bnhe->bhmde", P, fk, v)
            z = torch.einsum("nm,bnhd->bhmd", P, fk)
            St = torch.einsum("hij,bhjde->bhide", W, S)[:, :, bid]   # [B, H, N, D, Dv]
            zt = torch.einsum("hij,bhjd->bhid", W, z)[:, :, bid]
            num = torch.einsum("bnhd,bhnde->bnhe", fq, St)
            den = torch.einsum("bnhd,bhnd->bnh", fq, zt)[..., None] + 1e-6
            o = num / den
        o = o.reshape(B, N, C)
        if self.lepe is not None:
            g = grid or l.grid or (N,)
            vm = v.reshape(B, N, C).transpose(1, 2).reshape(B, C, *g)
            o = o + self.lepe(vm).reshape(B, C, N).transpose(1, 2)
        return self.proj(o)


class RefFocused(nn.Module):
    """The released FLatten FocusedLinearAttention forward, written plainly."""

    def __init__(self, layer):
        super().__init__()
        self.__dict__["l"] = layer  # config only: not a submodule
        C, D, kk = layer.dim, layer.head_dim, layer.kernel_size
        self.qkv = nn.Linear(C, 3 * C, bias=layer.qkv.bias is not None)
        self.scale = nn.Parameter(torch.zeros(1, 1, C))
        self.positional_encoding = nn.Parameter(torch.zeros_like(layer.positional_encoding))
        self.dwc = nn.Conv2d(D, D, kk, padding=kk // 2, groups=D)
        self.proj = nn.Linear(C, C)
        self.load_state_dict(layer.state_dict())

    def forward(self, x):
        l = self.l
        B, N, C = x.shape
        H, D = l.num_heads, l.head_dim
        q, k, v = self.qkv(x).reshape(B, N, 3, C).unbind(2)
        k = k + self.positional_encoding
        s = F.softplus(self.scale)
        q = (torch.relu(q) + 1e-6) / s
        k = (torch.relu(k) + 1e-6) / s
        p = l.focusing_factor
        qn, kn = q.norm(dim=-1, keepdim=True), k.norm(dim=-1, keepdim=True)
        q, k = q ** p, k ** p
        q = q / q.norm(dim=-1, keepdim=True) * qn
        k = k / k.norm(dim=-1, keepdim=True) * kn
        q, k, v = (t.reshape(B, N, H, D).transpose(1, 2) for t in (q, k, v))  # [B,H,N,D]
        z = 1 / (q @ k.mean(dim=-2, keepdim=True).transpose(-2, -1) + 1e-6)
        kv = (k.transpose(-2, -1) * N ** -0.5) @ (v * N ** -0.5)
        o = q @ kv * z                                                    # [B,H,N,D]
        Hm, Wm = l.map
        fm = v.reshape(B * H, Hm, Wm, D).permute(0, 3, 1, 2)
        o = o + self.dwc(fm).permute(0, 2, 3, 1).reshape(B, H, N, D)
        return self.proj(o.transpose(1, 2).reshape(B, N, C))


class RefLinear(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.__dict__["l"] = layer  # config only: not a submodule
        C = layer.dim
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(self, n, nn.Linear(C, C, bias=False))
        self.load_state_dict(layer.state_dict())

    def forward(self, x):
        l = self.l
        B, N, C = x.shape
        H, D = l.num_heads, l.head_dim
        q = _phi(self.q_proj(x).view(B, N, H, D), l.feature)
        k = _phi(self.k_proj(x).view(B, N, H, D), l.feature)
        v = self.v_proj(x).view(B, N, H, D)
        A = torch.einsum("bthd,bshd->bhts", q, k)
        if l.causal:
            A = A * torch.ones(N, N).tril()
        o = torch.einsum("bhts,bshe->bthe", A, v)
        if l.normalize:
            o = o / (A.sum(-1).transpose(1, 2)[..., None] + 1e-6)
        return self.o_proj(o.reshape(B, N, C))


def _init_params(layer, g):
    """Random, non-trivial values for every parameter (zeros-initialized ones
    too), in range for each."""
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name == "mixing":
                p.copy_(torch.rand(p.shape, generator=g) * 0.9 + 0.05)
            elif name == "scale":
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (0.3 / math.sqrt(max(p.shape[-1], 1))
                                                            if p.dim() > 1 else 0.1))


CASES = {
    "mhla_1d": lambda: lnn.MHLA(32, 4, blocks=5),
    "mhla_2d_lepe": lambda: lnn.MHLA(32, 2, blocks=(3, 2), grid=(7, 9), lepe_kernel=3),
    "mhla_2d_perhead": lambda: lnn.MHLA(24, 3, blocks="2x2", grid=(6, 5),
                                        per_head_mixing=True, qkv_bias=False),
    "mhla_3d": lambda: lnn.MHLA(16, 2, blocks=(2, 2, 2), grid=(3, 4, 5), lepe_kernel=3),
    "mhla_causal": lambda: lnn.MHLA(32, 4, blocks=8, causal=True, chunk=8, feature="relu"),
    "focused": lambda: lnn.FocusedLinearAttention(32, 2, map=(7, 9), kernel_size=5),
    "focused_k3_nobias": lambda: lnn.FocusedLinearAttention(48, 4, map=(5, 6), kernel_size=3,
                                                            focusing_factor=2, qkv_bias=False),
    "linear": lambda: lnn.LinearAttention(32, 4),
    "linear_causal_relu": lambda: lnn.LinearAttention(32, 2, feature="relu", causal=True),
    "linear_unnorm": lambda: lnn.LinearAttention(16, 2, normalize=False),
}
REF = {"mhla": RefMHLA, "focused": RefFocused, "linear": RefLinear}


def _make(name, salt):
    torch.manual_seed(1234 + salt)
    layer = CASES[name]()
    _init_params(layer, gen(salt))
    ref = REF[name.split("_")[0]](layer).double()
    N = {"mhla_1d": 37, "mhla_2d_lepe": 63, "mhla_2d_perhead": 30, "mhla_3d": 60,
         "mhla_causal": 61, "focused": 63, "focused_k3_nobias": 30}.get(name, 65)
    x = torch.randn(2, N, layer.dim, generator=gen(salt + 1))
    return layer, ref, x


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_forward_equals_reference_module(name):
    layer, ref, x = _make(name, 10 + sorted(CASES).index(name))
    with torch.no_grad():
        y = layer(x)
        r = ref(x.double())
    assert y.shape == x.shape and y.dtype == x.dtype
    assert rel_err(y, r) < 1e-5, name


def test_state_dict_keys_are_the_documented_ones():
    def keys(m):
        return sorted(m.state_dict())
    assert keys(lnn.MHLA(32, 2, blocks=(2, 2), grid=(4, 4), lepe_kernel=3)) == sorted([
        "qkv.weight", "qkv.bias", "mixing", "lepe.weight", "lepe.bias", "proj.weight",
        "proj.bias"])
    assert keys(lnn.MHLA(32, 2, blocks=4, causal=True, qkv_bias=False)) == sorted([
        "qkv.weight", "mixing", "proj.weight", "proj.bias"])
    assert keys(lnn.FocusedLinearAttention(32, 2, map=(4, 4))) == sorted([
        "scale", "positional_encoding", "qkv.weight", "qkv.bias", "dwc.weight", "dwc.bias",
        "proj.weight", "proj.bias"])
    assert keys(lnn.LinearAttention(32, 2)) == sorted([
        "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"])
    for name, shape in (("mixing", (16, 16)), ("lepe.weight", (32, 1, 3, 3))):
        assert tuple(lnn.MHLA(32, 2, blocks=(4, 4), grid=(8, 8), lepe_kernel=3)
                     .state_dict()[name].shape) == shape
    assert tuple(lnn.MHLA(32, 2, blocks=4, per_head_mixing=True).mixing.shape) == (2, 4, 4)


def test_mixing_initializers_and_projection():
    l = lnn.MHLA(16, 2, blocks=(2, 3), grid=(4, 6))
    assert torch.allclose(l.mixing, torch.from_numpy(longattn.mhla_init((2, 3))))
    c = lnn.MHLA(16, 2, blocks=6, causal=True)
    assert torch.allclose(c.mixing, torch.from_numpy(longattn.mhla_init(6, "uniform_causal")))
    with torch.no_grad():
        c.mixing.fill_(3.0)
    c.project_mixing_()
    assert torch.equal(c.mixing, torch.ones(6, 6).tril())
    with pytest.raises(ValueError, match="lepe_kernel"):
        lnn.MHLA(16, 2, blocks=4, causal=True, lepe_kernel=3)
    with pytest.raises(ValueError, match="multiple"):
        lnn.LinearAttention(30, 4)


def test_mhla_grid_per_call():
    l = lnn.MHLA(16, 2, blocks=(2, 2), lepe_kernel=3)
    _init_params(l, gen(3))
    ref = RefMHLA(l).double()
    for grid in ((4, 6), (5, 5)):
        x = torch.randn(1, grid[0] * grid[1], 16, generator=gen(grid[1]))
        with torch.no_grad():
            assert rel_err(l(x, grid=grid), ref(x.double(), grid=grid)) < 1e-5


@pytest.mark.parametrize("name", ["mhla_2d_lepe", "focused", "linear_causal_relu"])
def test_layer_bfloat16_close_to_reference(name):
    layer, ref, x = _make(name, 40)
    with torch.no_grad():
        y = layer.to(torch.bfloat16)(x.to(torch.bfloat16))
        r = ref(x.double())
    assert y.dtype == torch.bfloat16
    assert rel_err(y.float(), r) < 5e-2


def test_focused_layer_keeps_k_in_the_input_dtype(monkeypatch):
    """bf16 activations with fp32 parameters (autocast's case): the fp32
    positional encoding must not promote k, or the call leaves the bf16 path"""
    layer, _, x = _make("focused", 40)
    seen = {}
    real = longattn.ops.focused_attention

    def spy(q, k, v, **kw):
        seen.update(q=q.dtype, k=k.dtype, v=v.dtype)
        return real(q, k, v, **kw)

    monkeypatch.setattr(longattn.ops, "focused_attention", spy)
    layer.qkv.to(torch.bfloat16)
    layer.proj.to(torch.bfloat16)
    with torch.no_grad():
        layer(x.to(torch.bfloat16))
    assert seen == dict(q=torch.bfloat16, k=torch.bfloat16, v=torch.bfloat16)


# ---------------------------------------------------------------------------
# backward: every parameter and the input
# ---------------------------------------------------------------------------
def _has_backward(layer, x):
    try:
        layer(x[:, :].clone().requires_grad_(True)).sum().backward()
        layer.zero_grad()
        return True
    except NotImplementedError:
        layer.zero_grad()
        return False


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_gradients_equal_reference_module(name):
    layer, ref, x = _make(name, 70 + sorted(CASES).index(name))
    if not _has_backward(layer, x):
        pytest.skip("the backward of this layer's operator is not in the build yet")
    xa = x.clone().requires_grad_(True)
    xr = x.double().clone().requires_grad_(True)
    dy = torch.randn(x.shape, generator=gen(5), dtype=torch.float64)
    layer(xa).backward(dy.float())
    ref(xr).backward(dy)
    # The bound is 1e-4, or twice the error of the same reference module run
    # in float32 where that is larger: a fresh random draw can put a
    # normalizer near zero (relu_eps features, per-query normalization), and
    # then no float32 computation reaches 1e-4 (the reference's own float32
    # run measures how ill-conditioned the draw is).
    ref32 = copy.deepcopy(ref).float()
    xf = x.clone().requires_grad_(True)
    ref32(xf).backward(dy.float())
    bound = max(1e-4, 2 * float(rel_err(xf.grad, xr.grad)))
    assert rel_err(xa.grad, xr.grad) < bound, "input"
    rp, rp32 = dict(ref.named_parameters()), dict(ref32.named_parameters())
    for pname, p in layer.named_parameters():
        gr, g32 = rp[pname].grad, rp32[pname].grad.double()
        assert p.grad is not None, pname
        if name == "mhla_causal" and pname == "mixing":
            gr, g32 = torch.tril(gr), torch.tril(g32)   # the operator ignores the upper triangle
        def err(g):
            return float((g - gr).norm() / max(gr.norm().item(), 1e-30))
        assert err(p.grad.double()) < max(1e-4, 2 * err(g32)), (name, pname, err(p.grad.double()))


def _cuda_library():
    if not longattn.cuda_available():
        pytest.skip("liblongattn built without CUDA (%s)" % longattn.build_info())


@pytest.fixture
def _no_tf32():
    """fp32 on CUDA means fp32: no TF32 in torch's matmuls and convolutions
    (the layers' projections and LePE conv) while comparing with float64."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@cuda
@needs_cuda
@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_on_cuda_equals_reference_module(name, _no_tf32):
    """The layer on CUDA (fp32, the CUDA kernels forward and backward) against
    the float64 reference on the CPU: output, input gradient, every
    parameter's gradient."""
    _cuda_library()
    layer, ref, x = _make(name, 90 + sorted(CASES).index(name))
    layer = layer.cuda()
    xa = x.cuda().requires_grad_(True)
    xr = x.double().clone().requires_grad_(True)
    dy = torch.randn(x.shape, generator=gen(6), dtype=torch.float64)
    y = layer(xa)
    assert y.is_cuda and y.dtype == torch.float32
    r = ref(xr)
    assert rel_err(y.detach().cpu(), r.detach()) < 1e-5, name
    y.backward(dy.float().cuda())
    r.backward(dy)
    assert rel_err(xa.grad.cpu(), xr.grad) < 1e-4, "input"
    rp = dict(ref.named_parameters())
    for pname, p in layer.named_parameters():
        gr = rp[pname].grad
        assert p.grad is not None and p.grad.is_cuda, pname
        if name == "mhla_causal" and pname == "mixing":
            gr = torch.tril(gr)
        err = (p.grad.double().cpu() - gr).norm() / max(gr.norm().item(), 1e-30)
        assert err < 1e-4, (name, pname, float(err))


# ---------------------------------------------------------------------------
# examples/vit_swap.py: a training step per layer
# ---------------------------------------------------------------------------
def _vit_swap():
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "vit_swap.py")
    spec = importlib.util.spec_from_file_location("vit_swap", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("kind", ["mhla", "focused", "linear"])
def test_vit_swap_forward_builds_for_every_layer(kind):
    vit = _vit_swap()
    m = vit.build_vit(kind, use_timm=False)
    with torch.no_grad():
        assert m(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    n = sum(isinstance(x, (lnn.MHLA, lnn.FocusedLinearAttention, lnn.LinearAttention))
            for x in m.modules())
    assert n == 2


@pytest.mark.parametrize("kind", ["mhla", "focused", "linear"])
def test_vit_swap_training_steps_lower_the_loss(kind):
    vit = _vit_swap()
    layer = vit.make_attention(kind, 16, 2, 4)
    if not _has_backward(layer, torch.randn(1, 16, 16)):
        pytest.skip("the backward of longattn.nn.%s's operator is not in the build yet" % kind)
    losses = vit.train(kind, "cpu", steps=4, log=lambda s: None)
    assert losses[-1] < losses[0], losses


@cuda
@needs_cuda
@pytest.mark.parametrize("kind", ["mhla", "focused", "linear"])
def test_vit_swap_training_steps_on_cuda(kind):
    """examples/vit_swap.py's training on CUDA (timm's ViT where installed):
    the loss goes down and every parameter stays on the GPU."""
    _cuda_library()
    vit = _vit_swap()
    losses = vit.train(kind, "cuda", steps=4, log=lambda s: None)
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0], losses
