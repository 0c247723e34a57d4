"""longattn.focused_attention against direct float64 torch formulations of
SPEC §4: the FLatten module (focusing function over all H·D channels,
mean-form normalization, depthwise conv of v by torch conv2d) and the blog
variant (relu1, depthwise conv of φ(K), per-head focus)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from test_py_common import bhnd, gen, needs, randn, rel_err
import longattn

pytestmark = needs("focused_attention")


def dwconv(x, w, bias, Hm, Wm):
    """x [B, N, Ch] over an Hm×Wm map, depthwise weight w [Ch, k, k] (torch
    conv2d: cross-correlation), zero padding k//2."""
    B, N, Ch = x.shape
    img = x.permute(0, 2, 1).reshape(B, Ch, Hm, Wm)
    ks = w.shape[-1]
    y = F.conv2d(img, w[:, None], bias, padding=ks // 2, groups=Ch)
    return y.reshape(B, Ch, N).permute(0, 2, 1)


def ref_flatten(q, k, v, Hm, Wm, conv=None, conv_bias=None, softplus_param=None, p=3.0,
                eps=1e-6):
    q, k, v = (torch.as_tensor(x).double() for x in (q, k, v))
    B, N, H, D = q.shape
    C = H * D
    s = torch.zeros(C, dtype=torch.float64) if softplus_param is None else \
        torch.as_tensor(softplus_param).double()
    sp = F.softplus(s)

    def focus(x):
        x = (x.reshape(B, N, C).clamp_min(0) + 1e-6) / sp
        xp = x ** p
        return (x.norm(dim=-1, keepdim=True) * xp / xp.norm(dim=-1, keepdim=True)).reshape(
            B, N, H, D)

    qt, kt = focus(q), focus(k)
    S = torch.einsum("bnhd,bnhe->bhde", kt, v) / N
    z = kt.sum(1) / N
    o = torch.einsum("bnhd,bhde->bnhe", qt, S) / (
        torch.einsum("bnhd,bhd->bnh", qt, z)[..., None] + eps)
    if conv is not None:
        w = torch.as_tensor(conv).double()
        b = None if conv_bias is None else torch.as_tensor(conv_bias).double()
        Dv = v.shape[-1]
        vh = v.permute(0, 2, 1, 3).reshape(B * H, N, Dv)  # each head's map
        o = o + dwconv(vh, w, b, Hm, Wm).reshape(B, H, N, Dv).permute(0, 2, 1, 3)
    return o


def ref_blog(q, k, v, Hm, Wm, conv=None, focus=None, eps=1e-6):
    q, k, v = (torch.as_tensor(x).double() for x in (q, k, v))
    B, N, H, D = q.shape
    qt = (q * D ** -0.5).clamp_min(0) + 1
    kt = k.clamp_min(0) + 1
    if conv is not None:
        kt = dwconv(kt.reshape(B, N, H * D), torch.as_tensor(conv).double(), None, Hm,
                    Wm).reshape(B, N, H, D)
    f = torch.full((H,), 2.0, dtype=torch.float64) if focus is None else \
        torch.as_tensor(focus).double()
    kt = kt * f[None, None, :, None]
    S = torch.einsum("bnhd,bnhe->bhde", kt, v)
    z = kt.sum(1)
    return torch.einsum("bnhd,bhde->bnhe", qt, S) / (
        torch.einsum("bnhd,bhd->bnh", qt, z)[..., None] + eps)


CASES = [  # B, Hm, Wm, H, D, ks
    (1, 1, 1, 1, 1, 1),
    (2, 7, 9, 2, 16, 5),
    (1, 5, 13, 3, 63, 3),
    (1, 14, 14, 2, 64, 5),
    (1, 25, 40, 1, 16, 7),
]


@pytest.mark.parametrize("B,Hm,Wm,H,D,ks", CASES)
def test_flatten_matches_reference(B, Hm, Wm, H, D, ks):
    g = gen(Hm * Wm + D)
    N = Hm * Wm
    q, k, v = randn(g, B, N, H, D), randn(g, B, N, H, D), randn(g, B, N, H, D)
    w, bias, s = randn(g, D, ks, ks) * 0.2, randn(g, D), randn(g, H * D) * 0.5
    o = longattn.focused_attention(q, k, v, map=(Hm, Wm), conv=w, conv_bias=bias,
                                   softplus_param=s)
    assert o.shape == (B, N, H, D) and o.dtype == torch.float32
    assert rel_err(o, ref_flatten(q, k, v, Hm, Wm, w, bias, s)) <= 1e-5
    # defaults: no conv, zero softplus parameters, p = 3; and another p
    o = longattn.focused_attention(q, k, v, map=(Hm, Wm))
    assert rel_err(o, ref_flatten(q, k, v, Hm, Wm)) <= 1e-5
    o = longattn.focused_attention(q, k, v, map="%dx%d" % (Hm, Wm), p=2.0, eps=1e-3)
    assert rel_err(o, ref_flatten(q, k, v, Hm, Wm, p=2.0, eps=1e-3)) <= 1e-5


@pytest.mark.parametrize("B,Hm,Wm,H,D,ks", CASES)
def test_blog_matches_reference(B, Hm, Wm, H, D, ks):
    g = gen(Hm * Wm + D + 1)
    N = Hm * Wm
    q, k, v = randn(g, B, N, H, D), randn(g, B, N, H, D), randn(g, B, N, H, D)
    # positive conv weights: with signed ones Σ_n q̃·K̂_n can cancel to ~1e-4 of its
    # terms for some rows, and fp32 then cannot meet 1e-5 whatever the code does
    w, focus = randn(g, H * D, ks, ks).abs() * 0.2, randn(g, H).abs() + 0.5
    o = longattn.focused_attention(q, k, v, variant="blog", map=(Hm, Wm), conv=w, focus=focus)
    assert rel_err(o, ref_blog(q, k, v, Hm, Wm, w, focus)) <= 1e-5
    o = longattn.focused_attention(q, k, v, variant="blog", map=(Hm, Wm))
    assert rel_err(o, ref_blog(q, k, v, Hm, Wm)) <= 1e-5


def test_flatten_value_dim_without_conv_strided_numpy_bf16():
    g = gen(41)
    Hm, Wm, H, D, Dv = 6, 8, 2, 16, 5
    N = Hm * Wm
    q, k, v = randn(g, 2, N, H, D), randn(g, 2, N, H, D), randn(g, 2, N, H, Dv)
    o = longattn.focused_attention(q, k, v, map=(Hm, Wm))
    assert o.shape == (2, N, H, Dv)
    assert rel_err(o, ref_flatten(q, k, v, Hm, Wm)) <= 1e-5
    assert rel_err(longattn.focused_attention(bhnd(q), bhnd(k), bhnd(v), map=(Hm, Wm)),
                   o) <= 1e-6
    on = longattn.focused_attention(q.numpy(), k.numpy(), v.numpy(), map=(Hm, Wm))
    assert isinstance(on, np.ndarray) and rel_err(on, o) <= 1e-6
    qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()
    ob = longattn.focused_attention(qb, kb, vb, map=(Hm, Wm))
    assert ob.dtype == torch.bfloat16
    assert rel_err(ob, ref_flatten(qb, kb, vb, Hm, Wm)) <= 1e-2


def test_blog_focus_cancels_except_against_eps():
    # SPEC §4 fact (iii): focus multiplies numerator and denominator alike
    g = gen(42)
    q, k, v = randn(g, 1, 36, 2, 8), randn(g, 1, 36, 2, 8), randn(g, 1, 36, 2, 8)
    o1 = longattn.focused_attention(q, k, v, variant="blog", map=(6, 6),
                                    focus=torch.tensor([1.0, 1.0]))
    o2 = longattn.focused_attention(q, k, v, variant="blog", map=(6, 6),
                                    focus=torch.tensor([5.0, 0.3]))
    assert rel_err(o2, o1) <= 1e-5


def test_bad_arguments():
    g = gen(43)
    q = randn(g, 1, 12, 2, 8)
    with pytest.raises(ValueError) as e:
        longattn.focused_attention(q, q, q, map=(3, 5))
    assert "map" in e.value.message and "12" in e.value.message
    with pytest.raises(ValueError) as e:
        longattn.focused_attention(q, q, q)
    assert "map" in e.value.message
    with pytest.raises(ValueError) as e:  # even kernel
        longattn.focused_attention(q, q, q, map=(3, 4), conv=torch.zeros(8, 4, 4))
    assert "conv" in e.value.message
    with pytest.raises(ValueError) as e:  # softplus_param of the wrong length
        longattn.focused_attention(q, q, q, map=(3, 4), softplus_param=torch.zeros(8))
    assert "softplus" in e.value.message
    with pytest.raises(ValueError, match="variant"):
        longattn.focused_attention(q, q, q, map=(3, 4), variant="paper")
