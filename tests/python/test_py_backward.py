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
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


def away_from_zero(x, margin=0.05):
    """Entries of x pushed out of (-margin, margin): finite differences of
    the relu family must not straddle the kink."""
    with torch.no_grad():
        s = torch.where(x >= 0, torch.ones_like(x), -torch.ones_like(x))
        x.copy_(torch.where(x.abs() < margin, s * (x.abs() + 2 * margin), x))
    return x


def gradcheck(fn, inputs):
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-3, atol=1e-3, rtol=1e-2,
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
    gradcheck(fn, (q, k, v))


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
