"""Autograd through longattn (shared/TRAINING.md §1) on the CPU path.

gradcheck in float64: the C library computes in float32 even on float64
inputs, so the numerical Jacobian is taken with eps = 1e-3 and compared with
atol 1e-3 / rtol 1e-2 (float32 rounding divided by 2·eps, plus the O(eps²)
truncation of central differences); the tight check is the float32 gradient
against plain-PyTorch float64 autograd of the same formula, within 1e-4
relative Frobenius.
"""
import math

import pytest

import torch

from test_py_common import needs
import longattn
from longattn import _backward

pytestmark = needs("softmax_attention")


def rel(a, b):
    """Relative Frobenius error; against an exactly-zero reference (softmax
    over a single key: dq = dk = 0) the largest absolute error scaled so that
    1e-6 (float32 rounding gives ~1e-8) reads as the 1e-4 bound."""
    a, b = a.double(), b.double()
    if b.norm() == 0:
        return a.abs().max().item() * 100
    return ((a - b).norm() / b.norm()).item()


def away_from_zero(x, margin=0.05):
    """Entries of x pushed out of (-margin, margin): finite differences of
    the relu family must not straddle the kink."""
    with torch.no_grad():
        s = torch.where(x >= 0, torch.ones_like(x), -torch.ones_like(x))
        x.copy_(torch.where(x.abs() < margin, s * (x.abs() + 2 * margin), x))
    return x


def gradcheck(fn, inputs, eps=1e-3):
    assert torch.autograd.gradcheck(fn, inputs, eps=eps, atol=1e-3, rtol=1e-2,
                                    check_undefined_grad=False)


# ---------------------------------------------------------------------------
# plain-PyTorch references (float64)
# ---------------------------------------------------------------------------
def ref_softmax(q, k, v, causal=False, scale=None):
    B, Nq, H, D = q.shape
    Nk, Hk = k.shape[1], k.shape[2]
    scale = D ** -0.5 if scale is None else scale
    k = k.repeat_interleave(H // Hk, dim=2)
    v = v.repeat_interleave(H // Hk, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    if causal:
        i = torch.arange(Nq).view(-1, 1)
        j = torch.arange(Nk).view(1, -1)
        s = s.masked_fill(j > i + (Nk - Nq), float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhij,bjhe->bihe", p, v)


def phi(name, x):
    if name == "identity":
        return x
    if name == "relu":
        return torch.relu(x)
    if name == "relu_eps":
        return torch.relu(x) + 1e-6
    if name == "relu1":
        return torch.relu(x) + 1
    if name == "elu1":
        return torch.where(x >= 0, x + 1, torch.exp(torch.clamp(x, max=0)))
    raise ValueError(name)


def ref_linear(q, k, v, feature="relu", causal=False, normalize=True, eps=1e-6, scale=1.0,
               S0=None, z0=None):
    qt, kt = scale * phi(feature, q), phi(feature, k)
    if not causal:
        S = torch.einsum("bnhd,bnhe->bhde", kt, v)
        z = kt.sum(1)
        num = torch.einsum("bnhd,bhde->bnhe", qt, S)
        den = torch.einsum("bnhd,bhd->bnh", qt, z)
        return num / (den[..., None] + eps) if normalize else num
    kv = torch.einsum("bnhd,bnhe->bnhde", kt, v).cumsum(1)
    ks = kt.cumsum(1)
    if S0 is not None:
        kv = kv + S0[:, None]
    if z0 is not None:
        ks = ks + z0[:, None]
    num = torch.einsum("bnhd,bnhde->bnhe", qt, kv)
    den = torch.einsum("bnhd,bnhd->bnh", qt, ks)
    out = num / (den[..., None] + eps) if normalize else num
    return out, kv[:, -1], ks[:, -1]


# ---------------------------------------------------------------------------
# softmax
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(1, 5, 7, 2, 1, 4, 3), (2, 6, 4, 4, 2, 3, 5)])
def test_softmax_gradcheck(causal, shape):
    B, Nq, Nk, H, Hk, D, Dv = shape
    q = torch.randn(B, Nq, H, D, dtype=torch.float64, requires_grad=True)
    k = torch.randn(B, Nk, Hk, D, dtype=torch.float64, requires_grad=True)
    v = torch.randn(B, Nk, Hk, Dv, dtype=torch.float64, requires_grad=True)
    gradcheck(lambda q, k, v: longattn.softmax_attention(q, k, v, causal=causal), (q, k, v))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 63, 65, 4, 2, 32, 24), (1, 65, 63, 2, 2, 63, 17),
                                   (1, 1, 1, 1, 1, 16, 16)])
def test_softmax_fp32_vs_float64_autograd(causal, shape):
    B, Nq, Nk, H, Hk, D, Dv = shape
    q = torch.randn(B, H, Nq, D).transpose(1, 2).requires_grad_()  # permuted view
    k = torch.randn(B, Nk, Hk, D, requires_grad=True)
    v = torch.randn(B, Nk, Hk, Dv, requires_grad=True)
    g = torch.randn(B, Nq, H, Dv)
    o, lse = longattn.softmax_attention(q, k, v, causal=causal, return_lse=True)
    assert not lse.requires_grad
    o.backward(g)
    xs = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref_softmax(*xs, causal=causal).backward(g.double())
    for a, r in zip((q, k, v), xs):
        assert rel(a.grad, r.grad) <= 1e-4


def test_softmax_backward_plain_function():
    q, k, v = torch.randn(1, 33, 2, 16), torch.randn(1, 40, 1, 16), torch.randn(1, 40, 1, 8)
    o, lse = longattn.softmax_attention(q, k, v, causal=True, scale=0.3, return_lse=True)
    g = torch.randn_like(o)
    dq, dk, dv = _backward.softmax_attention_backward(q, k, v, o, lse, g, causal=True, scale=0.3,
                                                      needs=(True, False, True))
    assert dk is None and dq.shape == q.shape and dv.shape == v.shape
    xs = [x.double().requires_grad_() for x in (q, k, v)]
    ref_softmax(*xs, causal=True, scale=0.3).backward(g.double())
    assert rel(dq, xs[0].grad) <= 1e-4 and rel(dv, xs[2].grad) <= 1e-4
    # numpy in, numpy out
    dqn, dkn, dvn = _backward.softmax_attention_backward(
        q.numpy(), k.numpy(), v.numpy(), o.numpy(), lse.numpy(), g.numpy(), causal=True, scale=0.3)
    assert (torch.from_numpy(dqn) == dq).all()


def test_softmax_backward_bad_grad_shape():
    q, k, v = torch.randn(1, 8, 2, 16), torch.randn(1, 8, 2, 16), torch.randn(1, 8, 2, 8)
    o, lse = longattn.softmax_attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="d_out"):
        _backward.softmax_attention_backward(q, k, v, o, lse, torch.randn(1, 8, 2, 7))


# ---------------------------------------------------------------------------
# linear
# ---------------------------------------------------------------------------
FEATURES = ["identity", "relu", "relu_eps", "relu1", "elu1"]


def lin_inputs(B, N, H, D, Dv, feature, normalize, dtype=torch.float64):
    q = away_from_zero(torch.randn(B, N, H, D, dtype=dtype))
    k = away_from_zero(torch.randn(B, N, H, D, dtype=dtype))
    if feature == "identity" and normalize:
        q, k = q.abs() + 0.2, k.abs() + 0.2
    v = torch.randn(B, N, H, Dv, dtype=dtype)
    return [x.requires_grad_() for x in (q, k, v)]


@pytest.mark.parametrize("feature", FEATURES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("normalize", [True, False])
def test_linear_gradcheck(feature, causal, normalize):
    q, k, v = lin_inputs(1, 9, 2, 3, 4, feature, normalize)
    fn = lambda q, k, v: longattn.linear_attention(q, k, v, feature=feature, causal=causal,
                                                   normalize=normalize, scale=0.7, chunk=4)
    # unnormalized outputs grow with the token count: their float32 rounding
    # over 2·eps needs the larger step (inputs stay 0.05 off the relu kink)
    gradcheck(fn, (q, k, v), eps=1e-3 if normalize else 1e-2)


@pytest.mark.filterwarnings("ignore:Input #")
@pytest.mark.parametrize("normalize", [True, False])
def test_linear_causal_state_gradcheck(normalize):
    """initial_state (S, z) and the returned final state are differentiable.
    The state is float32 in the C API, so this gradcheck runs on float32
    state inputs (same loose tolerances)."""
    q, k, v = lin_inputs(1, 6, 2, 3, 2, "elu1", normalize)
    S0 = torch.randn(1, 2, 3, 2, requires_grad=True)
    z0 = (3 + torch.rand(1, 2, 3)).requires_grad_()

    def fn(q, k, v, S0, z0):
        o, (S1, z1) = longattn.linear_attention(q, k, v, feature="elu1", causal=True,
                                                normalize=normalize, chunk=4,
                                                initial_state=(S0, z0), output_final_state=True)
        return o, S1, z1

    assert torch.autograd.gradcheck(fn, (q, k, v, S0, z0), eps=1e-2, atol=2e-2, rtol=2e-2,
                                    check_undefined_grad=False)


@pytest.mark.parametrize("feature", FEATURES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("normalize", [True, False])
def test_linear_fp32_vs_float64_autograd(feature, causal, normalize):
    B, N, H, D, Dv = 2, 65, 3, 32, 24
    q, k, v = lin_inputs(B, N, H, D, Dv, feature, normalize, torch.float32)
    g = torch.randn(B, N, H, Dv)
    kw = dict(feature=feature, causal=causal, normalize=normalize, scale=0.5)
    if causal:
        S0 = torch.randn(B, H, D, Dv, requires_grad=True)
        z0 = (5 + torch.rand(B, H, D)).requires_grad_()
        gS, gz = torch.randn(B, H, D, Dv), torch.randn(B, H, D)
        o, (S1, z1) = longattn.linear_attention(q, k, v, chunk=16, initial_state=(S0, z0),
                                                output_final_state=True, **kw)
        torch.autograd.backward((o, S1, z1), (g, gS, gz))
        xs = [x.detach().double().requires_grad_() for x in (q, k, v, S0, z0)]
        ro, rS, rz = ref_linear(*xs[:3], S0=xs[3], z0=xs[4], **kw)
        torch.autograd.backward((ro, rS, rz), (g.double(), gS.double(), gz.double()))
        pairs = zip((q, k, v, S0, z0), xs)
    else:
        longattn.linear_attention(q, k, v, **kw).backward(g)
        xs = [x.detach().double().requires_grad_() for x in (q, k, v)]
        ref_linear(*xs, **kw).backward(g.double())
        pairs = zip((q, k, v), xs)
    for a, r in pairs:
        assert rel(a.grad, r.grad) <= 1e-4, (feature, causal, normalize)


def test_linear_backward_plain_function_needs():
    q, k, v = lin_inputs(1, 20, 1, 8, 4, "relu", True, torch.float32)
    g = torch.randn(1, 20, 1, 4)
    full = _backward.linear_attention_backward(q.detach(), k.detach(), v.detach(), g)
    part = _backward.linear_attention_backward(q.detach(), k.detach(), v.detach(), g,
                                               needs=(False, True, False, False, False))
    assert part[0] is None and part[2] is None and (part[1] == full[1]).all()
    assert full[3] is None and full[4] is None  # non-causal: no state


# ---------------------------------------------------------------------------
# MHLA (non-causal and causal)
# ---------------------------------------------------------------------------
def block_ids(grid, blocks):
    """Block of each token (raster order, SPEC §5.1)."""
    coords = torch.stack(torch.meshgrid(*[torch.arange(n) for n in grid], indexing="ij"), -1)
    coords = coords.reshape(-1, len(grid))
    bid = torch.zeros(coords.shape[0], dtype=torch.long)
    for a, (n, g) in enumerate(zip(grid, blocks)):
        bid = bid * g + coords[:, a] * g // n
    return bid


def ref_mhla(q, k, v, W, grid, blocks, feature="relu_eps", normalize="per_query", eps=1e-6,
             scale=1.0):
    M = 1
    for b in blocks:
        M *= b
    bid = block_ids(grid, blocks)
    onehot = torch.nn.functional.one_hot(bid, M).to(q.dtype)
    qt, kt = scale * phi(feature, q), phi(feature, k)
    S = torch.einsum("nm,bnhd,bnhe->bhmde", onehot, kt, v)
    z = torch.einsum("nm,bnhd->bhmd", onehot, kt)
    eq = "hij,bhjde->bhide" if W.dim() == 3 else "ij,bhjde->bhide"
    St = torch.einsum(eq, W, S)[:, :, bid]            # [B,H,N,D,Dv]
    zt = torch.einsum(eq.replace("de", "d"), W, z)[:, :, bid]
    num = torch.einsum("bnhd,bhnde->bnhe", qt, St)
    if normalize == "none":
        return num
    den = torch.einsum("bnhd,bhnd->bnh", qt, zt)
    return num / (den[..., None] + eps)


def ref_mhla_causal(q, k, v, W, chunk=64, feature="relu", normalize="none", eps=1e-6,
                    scale=None):
    B, N, H, D = q.shape
    scale = D ** -0.5 if scale is None else scale
    qt, kt = scale * phi(feature, q), phi(feature, k)
    nc = (N + chunk - 1) // chunk
    cid = torch.arange(N) // chunk
    Wh = W if W.dim() == 3 else W[None].expand(H, -1, -1)
    Wl = torch.tril(Wh[:, :nc, :nc], -1)
    wd = torch.diagonal(Wh[:, :nc, :nc], dim1=1, dim2=2)       # [H, nc]
    onehot = torch.nn.functional.one_hot(cid, nc).to(q.dtype)
    kv = torch.einsum("bnhd,bnhe->bnhde", kt, v)
    S = torch.einsum("nm,bnhde->bhmde", onehot, kv)
    z = torch.einsum("nm,bnhd->bhmd", onehot, kt)
    inter = torch.einsum("hij,bhjde->bhide", Wl, S)[:, :, cid]
    interz = torch.einsum("hij,bhjd->bhid", Wl, z)[:, :, cid]
    # running sums inside each chunk
    cum = torch.cumsum(kv, 1) - torch.cumsum(kv, 1)[:, (cid * chunk - 1).clamp(min=0)] * (cid > 0).view(1, -1, 1, 1, 1).to(q.dtype)
    cumz = torch.cumsum(kt, 1) - torch.cumsum(kt, 1)[:, (cid * chunk - 1).clamp(min=0)] * (cid > 0).view(1, -1, 1, 1).to(q.dtype)
    w_t = wd[:, cid]                                             # [H, N]
    St = inter.permute(0, 2, 1, 3, 4) + w_t.t()[None, :, :, None, None] * cum
    num = torch.einsum("bnhd,bnhde->bnhe", qt, St)
    if normalize == "none":
        return num
    zt = interz.permute(0, 2, 1, 3) + w_t.t()[None, :, :, None] * cumz
    den = torch.einsum("bnhd,bnhd->bnh", qt, zt)
    return num / (den[..., None] + eps)


MHLA_CASES = [((12,), (3,), False), ((3, 4), (2, 2), True), ((2, 3, 2), (2, 1, 2), False),
              ((10,), (13,), False)]


@pytest.mark.parametrize("grid,blocks,per_head", MHLA_CASES)
@pytest.mark.parametrize("normalize", ["per_query", "none", "released_vision"])
def test_mhla_gradcheck(grid, blocks, per_head, normalize):
    N = math.prod(grid)
    M = math.prod(blocks)
    if normalize == "released_vision" and any(n % b for n, b in zip(grid, blocks)):
        pytest.skip("released_vision needs equal blocks")
    q, k, v = lin_inputs(1, N, 2, 3, 2, "relu_eps", True)
    if normalize != "none":  # relu features with D = 3 can make a denominator ~eps: keep q, k > 0
        with torch.no_grad():
            q.abs_().add_(0.2), k.abs_().add_(0.2)
    W = (0.1 + torch.rand(*((2, M, M) if per_head else (M, M)), dtype=torch.float64)).requires_grad_()
    fn = lambda q, k, v, W: longattn.mhla(q, k, v, W, grid=grid, blocks=blocks,
                                          normalize=normalize, scale=0.8)
    gradcheck(fn, (q, k, v, W))


@pytest.mark.parametrize("feature", ["relu_eps", "elu1", "identity"])
@pytest.mark.parametrize("normalize", ["per_query", "none"])
@pytest.mark.parametrize("grid,blocks,per_head", MHLA_CASES[:3])
def test_mhla_fp32_vs_float64_autograd(feature, normalize, grid, blocks, per_head):
    N, M, H = math.prod(grid) * 6, math.prod(blocks), 3
    grid = tuple(g * (6 if a == 0 else 1) for a, g in enumerate(grid))
    q, k, v = lin_inputs(2, N, H, 16, 12, feature, normalize != "none", torch.float32)
    W = (0.1 + torch.rand(*((H, M, M) if per_head else (M, M)))).requires_grad_()
    g = torch.randn(2, N, H, 12)
    kw = dict(grid=grid, blocks=blocks, feature=feature, normalize=normalize)
    longattn.mhla(q, k, v, W, **kw).backward(g)
    xs = [x.detach().double().requires_grad_() for x in (q, k, v, W)]
    ref_mhla(*xs, **kw).backward(g.double())
    for a, r in zip((q, k, v, W), xs):
        assert rel(a.grad, r.grad) <= 1e-4


@pytest.mark.parametrize("normalize", ["none", "per_query"])
@pytest.mark.parametrize("per_head", [False, True])
def test_mhla_causal_gradcheck(normalize, per_head):
    q, k, v = lin_inputs(1, 11, 2, 3, 2, "relu", normalize != "none")
    M = 4
    W = (0.1 + torch.rand(*((2, M, M) if per_head else (M, M)), dtype=torch.float64)).requires_grad_()
    fn = lambda q, k, v, W: longattn.mhla_causal(q, k, v, W, chunk=3, normalize=normalize)
    gradcheck(fn, (q, k, v, W))


@pytest.mark.parametrize("normalize", ["none", "per_query"])
@pytest.mark.parametrize("feature", ["relu", "elu1"])
@pytest.mark.parametrize("chunk", [1, 16, 64])
def test_mhla_causal_fp32_vs_float64_autograd(normalize, feature, chunk):
    B, N, H = 2, 65, 2
    nc = (N + chunk - 1) // chunk
    q, k, v = lin_inputs(B, N, H, 16, 8, feature, normalize != "none", torch.float32)
    if normalize != "none":  # the first tokens' denominators see few keys: keep them away from eps
        with torch.no_grad():
            q.abs_().add_(0.1), k.abs_().add_(0.1)
    W = (0.1 + torch.rand(H, nc + 2, nc + 2)).requires_grad_()
    g = torch.randn(B, N, H, 8)
    kw = dict(chunk=chunk, feature=feature, normalize=normalize)
    longattn.mhla_causal(q, k, v, W, **kw).backward(g)
    xs = [x.detach().double().requires_grad_() for x in (q, k, v, W)]
    ref_mhla_causal(*xs, **kw).backward(g.double())
    gW, rW = W.grad.clone().double(), xs[3].grad.clone()
    if normalize == "per_query":
        # chunk 0 sees only W[0,0], which cancels but for eps: its gradient is
        # eps-sized (float32 rounding), checked in absolute terms
        assert (gW[:, 0, 0] - rW[:, 0, 0]).abs().max() <= 1e-3 * rW.norm()
        gW[:, 0, 0] = rW[:, 0, 0] = 0
    for a, r in zip((q.grad, k.grad, v.grad, gW), (xs[0].grad, xs[1].grad, xs[2].grad, rW)):
        assert rel(a, r) <= 1e-4
    assert (torch.triu(W.grad, 1) == 0).all()


# ---------------------------------------------------------------------------
# focused
# ---------------------------------------------------------------------------
def ref_focused(q, k, v, variant="flatten", map=None, conv=None, conv_bias=None,
                softplus_param=None, p=3.0, focus=None, eps=1e-6):
    F = torch.nn.functional
    B, N, H, D = q.shape
    Hm, Wm = map
    C = H * D
    if variant == "flatten":
        s = softplus_param if softplus_param is not None else torch.zeros(C, dtype=q.dtype)

        def fp(x):
            xp = (torch.relu(x.reshape(B, N, C)) + 1e-6) / F.softplus(s)
            y = xp ** p
            return (xp.norm(dim=-1, keepdim=True) * y / y.norm(dim=-1, keepdim=True)).reshape(B, N, H, D)

        qt, kt = fp(q), fp(k)
        S = torch.einsum("bnhd,bnhe->bhde", kt, v) / N
        z = kt.sum(1) / N
        o = torch.einsum("bnhd,bhde->bnhe", qt, S) / (torch.einsum("bnhd,bhd->bnh", qt, z)[..., None] + eps)
        if conv is not None:
            vi = v.permute(0, 2, 3, 1).reshape(B * H, D, Hm, Wm)
            c = F.conv2d(vi, conv[:, None], conv_bias, padding=conv.shape[-1] // 2, groups=D)
            o = o + c.reshape(B, H, D, N).permute(0, 3, 1, 2)
        return o
    qt = torch.relu(q / math.sqrt(D)) + 1
    pk = (torch.relu(k) + 1).reshape(B, N, C).permute(0, 2, 1).reshape(B, C, Hm, Wm)
    if conv is not None:
        pk = F.conv2d(pk, conv[:, None], None, padding=conv.shape[-1] // 2, groups=C)
    f = focus if focus is not None else torch.full((H,), 2.0, dtype=q.dtype)
    kh = pk.reshape(B, C, N).permute(0, 2, 1).reshape(B, N, H, D) * f[None, None, :, None]
    S = torch.einsum("bnhd,bnhe->bhde", kh, v)
    z = kh.sum(1)
    return torch.einsum("bnhd,bhde->bnhe", qt, S) / (torch.einsum("bnhd,bhd->bnh", qt, z)[..., None] + eps)


def focused_inputs(variant, B, Hm, Wm, H, D, ks, dtype, with_conv=True):
    N = Hm * Wm
    q = away_from_zero(torch.randn(B, N, H, D, dtype=dtype))
    k = away_from_zero(torch.randn(B, N, H, D, dtype=dtype))
    v = torch.randn(B, N, H, D + (variant == "blog"), dtype=dtype)
    xs = [q, k, v]
    if variant == "flatten":
        conv = 0.3 * torch.randn(D, ks, ks, dtype=dtype) if with_conv else None
        xs += [conv, 0.3 * torch.randn(D, dtype=dtype) if with_conv else None,
               0.5 * torch.randn(H * D, dtype=dtype), None]
    else:
        conv = (0.3 * torch.randn(H * D, ks, ks, dtype=dtype)).abs() + 0.05 if with_conv else None
        xs += [conv, None, None, 1 + 0.3 * torch.rand(H, dtype=dtype)]
    return [x.requires_grad_() if x is not None else None for x in xs]


def focused_call(variant, map, p=3.0):
    def fn(q, k, v, conv, bias, sp, focus):
        return longattn.focused_attention(q, k, v, variant=variant, map=map, conv=conv,
                                          conv_bias=bias, softplus_param=sp, focus=focus, p=p)
    return fn


@pytest.mark.parametrize("variant,p,with_conv", [("flatten", 3.0, True), ("flatten", 2.5, False),
                                                 ("blog", 3.0, True), ("blog", 3.0, False)])
def test_focused_gradcheck(variant, p, with_conv):
    xs = focused_inputs(variant, 1, 3, 4, 2, 2, 3, torch.float64, with_conv)
    fn = focused_call(variant, (3, 4), p)
    args = [x for x in xs if x is not None]
    present = [x is not None for x in xs]

    def wrapped(*a):
        it = iter(a)
        return fn(*[next(it) if pr else None for pr in present])

    gradcheck(wrapped, tuple(args))


@pytest.mark.parametrize("variant", ["flatten", "blog"])
@pytest.mark.parametrize("with_conv", [True, False])
def test_focused_fp32_vs_float64_autograd(variant, with_conv):
    xs = focused_inputs(variant, 2, 7, 9, 2, 16, 3, torch.float32, with_conv)
    kw = dict(variant=variant, map=(7, 9))
    out = focused_call(variant, (7, 9))(*xs)
    g = torch.randn_like(out)
    out.backward(g)
    xd = [x.detach().double().requires_grad_() if x is not None else None for x in xs]
    names = ["q", "k", "v", "conv", "conv_bias", "softplus_param", "focus"]
    ref_focused(xd[0], xd[1], xd[2], conv=xd[3], conv_bias=xd[4], softplus_param=xd[5],
                focus=xd[6], **kw).backward(g.double())
    for name, a, r in zip(names, xs, xd):
        if a is None:
            continue
        # focus cancels but for eps: its gradient is eps-sized rounding in float32
        tol = 5e-3 if name == "focus" else 1e-4
        assert rel(a.grad, r.grad) <= tol, name


# ---------------------------------------------------------------------------
# sparse attention
# ---------------------------------------------------------------------------
def ref_sparse(q, kv, idx, dv=512, scale=None):
    T, Hq, Dqk = q.shape
    L = kv.shape[0]
    kv3 = kv if kv.dim() == 3 else kv[:, None]
    Hkv = kv3.shape[1]
    scale = Dqk ** -0.5 if scale is None else scale
    valid = (idx >= 0) & (idx < L)
    sel = kv3[idx.clamp(0, L - 1).long()]                     # [T, k, Hkv, Dqk]
    g = (torch.arange(Hq) * Hkv) // Hq
    sel = sel[:, :, g]                                          # [T, k, Hq, Dqk]
    s = torch.einsum("thd,tkhd->thk", q, sel) * scale
    s = s.masked_fill(~valid[:, None, :], float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return torch.einsum("thk,tkhe->the", p, sel[..., :dv])


def sparse_idx(T, L, K):
    idx = torch.randint(0, L, (T, K), dtype=torch.int32)
    idx[:, 1] = idx[:, 0]          # a repeated key
    idx[0, 2] = -1                 # skipped
    idx[-1, :] = -1                # a row with no valid key
    return idx


def test_sparse_gradcheck():
    q = torch.randn(4, 2, 5, dtype=torch.float64, requires_grad=True)
    kv = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    idx = sparse_idx(4, 7, 4)
    gradcheck(lambda q, kv: longattn.sparse_attention(q, kv, idx, dv=3)[0], (q, kv))


@pytest.mark.parametrize("kv3", [False, True])
def test_sparse_fp32_vs_float64_autograd(kv3):
    T, Hq, Dqk, dv, L, K = 65, 4, 64, 48, 100, 40
    q = torch.randn(T, Hq, Dqk, requires_grad=True)
    kv = torch.randn(*((L, 2, Dqk) if kv3 else (L, Dqk)), requires_grad=True)
    idx = sparse_idx(T, L, K)
    out, lse = longattn.sparse_attention(q, kv, idx, dv=dv)
    assert not lse.requires_grad
    g = torch.randn_like(out)
    out.backward(g)
    qd, kd = q.detach().double().requires_grad_(), kv.detach().double().requires_grad_()
    ref_sparse(qd, kd, idx, dv=dv).backward(g.double())
    assert rel(q.grad, qd.grad) <= 1e-4 and rel(kv.grad, kd.grad) <= 1e-4
