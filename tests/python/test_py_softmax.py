"""longattn.softmax_attention against a direct float64 torch formulation
(softmax(scale·QKᵀ + mask)·V and logsumexp), at odd sizes, GQA, causal with
Nk >= Nq (bottom-right), strided views, numpy/torch, dtypes."""
import numpy as np
import pytest
import torch

from test_py_common import bhnd, gen, needs, randn, rel_err
import longattn

pytestmark = needs("softmax_attention")


def ref_softmax(q, k, v, causal=False, scale=None):
    q, k, v = (torch.as_tensor(x).double() for x in (q, k, v))
    B, Nq, H, D = q.shape
    Nk, Hk = k.shape[1], k.shape[2]
    k = k.repeat_interleave(H // Hk, dim=2)
    v = v.repeat_interleave(H // Hk, dim=2)
    scale = D ** -0.5 if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if causal:
        i = torch.arange(Nq)[:, None]
        j = torch.arange(Nk)[None, :]
        s = s.masked_fill(j > i + (Nk - Nq), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [B,H,Nq]
    o = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), v)
    return o, lse.permute(0, 2, 1)


CASES = [  # B, Nq, Nk, H, Hk, D, Dv, causal
    (1, 1, 1, 1, 1, 1, 1, False),
    (2, 63, 63, 2, 2, 16, 16, True),
    (1, 65, 65, 4, 2, 63, 17, False),
    (1, 65, 130, 4, 1, 64, 64, True),
    (2, 1, 100, 2, 2, 128, 32, True),
    (1, 1000, 1000, 2, 1, 64, 48, True),
]


@pytest.mark.parametrize("B,Nq,Nk,H,Hk,D,Dv,causal", CASES)
def test_matches_torch_reference(B, Nq, Nk, H, Hk, D, Dv, causal):
    g = gen(Nq * 7 + D)
    q, k, v = randn(g, B, Nq, H, D), randn(g, B, Nk, Hk, D), randn(g, B, Nk, Hk, Dv)
    o, lse = longattn.softmax_attention(q, k, v, causal=causal, return_lse=True)
    ro, rlse = ref_softmax(q, k, v, causal)
    assert o.shape == (B, Nq, H, Dv) and o.dtype == torch.float32
    assert lse.shape == (B, Nq, H) and lse.dtype == torch.float32
    assert rel_err(o, ro) <= 1e-5
    assert rel_err(lse, rlse) <= 1e-5


def test_scale_option():
    g = gen(1)
    q, k, v = randn(g, 1, 33, 2, 8), randn(g, 1, 33, 2, 8), randn(g, 1, 33, 2, 5)
    o = longattn.softmax_attention(q, k, v, scale=0.37)
    assert rel_err(o, ref_softmax(q, k, v, scale=0.37)[0]) <= 1e-5
    # scale changes the result (the option is actually passed)
    assert rel_err(o, ref_softmax(q, k, v)[0]) > 1e-3


def test_strided_bhnd_views_equal_contiguous():
    g = gen(2)
    q, k, v = randn(g, 2, 65, 3, 16), randn(g, 2, 70, 3, 16), randn(g, 2, 70, 3, 8)
    o1, l1 = longattn.softmax_attention(q, k, v, causal=True, return_lse=True)
    o2, l2 = longattn.softmax_attention(bhnd(q), bhnd(k), bhnd(v), causal=True,
                                        return_lse=True)
    assert rel_err(o2, o1) <= 1e-6 and rel_err(l2, l1) <= 1e-6
    assert o2.is_contiguous()


def test_numpy_in_numpy_out_and_f64():
    g = gen(3)
    q, k, v = (randn(g, 1, 40, 2, 12).numpy() for _ in range(3))
    o = longattn.softmax_attention(q, k, v)
    assert isinstance(o, np.ndarray) and o.dtype == np.float32 and o.shape == (1, 40, 2, 12)
    assert rel_err(o, ref_softmax(q, k, v)[0]) <= 1e-5
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    o64 = longattn.softmax_attention(q64, k64, v64)
    assert o64.dtype == np.float64
    assert rel_err(o64, ref_softmax(q, k, v)[0]) <= 1e-5
    # numpy strided: a [B,H,N,D] buffer seen as [B,N,H,D]
    qs = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    assert not qs.flags.c_contiguous
    assert rel_err(longattn.softmax_attention(qs, k, v), o) <= 1e-6


def test_bf16_in_bf16_out():
    g = gen(4)
    q, k, v = (randn(g, 1, 64, 2, 32, dtype=torch.bfloat16) for _ in range(3))
    o = longattn.softmax_attention(q, k, v, causal=True)
    assert o.dtype == torch.bfloat16
    assert rel_err(o, ref_softmax(q, k, v, causal=True)[0]) <= 1e-2


def test_bad_shapes_raise_value_error_with_library_message():
    g = gen(5)
    q, k, v = randn(g, 1, 8, 2, 16), randn(g, 1, 8, 2, 16), randn(g, 1, 8, 2, 4)
    with pytest.raises(ValueError) as e:
        longattn.softmax_attention(q, k[..., :15], v)
    assert e.value.status_name == "LA_ERR_SHAPE"
    assert "k" in e.value.message and "15" in e.value.message
    with pytest.raises(ValueError) as e:  # v has a different key count
        longattn.softmax_attention(q, k, v[:, :7])
    assert "v" in e.value.message
    with pytest.raises(ValueError) as e:  # rank 3 q
        longattn.softmax_attention(q[0], k, v)
    assert "q" in e.value.message
    with pytest.raises(ValueError) as e:  # H % Hk != 0
        longattn.softmax_attention(randn(g, 1, 8, 3, 16), k, v)
    assert e.value.message
    with pytest.raises(ValueError):  # int32 inputs are not attention inputs
        longattn.softmax_attention(q.to(torch.int32), k, v)
