"""longattn.linear_attention against direct float64 torch formulations:
non-causal sums, causal by cumulative sums over tokens, recurrent state
in/out, every feature map, strided views, numpy/torch, dtypes."""
import numpy as np
import pytest
import torch

from test_py_common import bhnd, gen, needs, randn, rel_err
import longattn

pytestmark = needs("linear_attention")


def phi(x, feature):
    if feature == "identity":
        return x
    if feature == "relu":
        return x.clamp_min(0)
    if feature == "relu_eps":
        return x.clamp_min(0) + 1e-6
    if feature == "relu1":
        return x.clamp_min(0) + 1
    if feature == "elu1":
        return torch.where(x >= 0, x + 1, torch.exp(x.clamp_max(0)))
    raise ValueError(feature)


def ref_linear(q, k, v, feature="relu", causal=False, normalize=True, eps=1e-6, scale=1.0,
               S0=None, z0=None):
    """o_t = q̃ᵀS_t / (q̃ᵀz_t + eps); S_t, z_t = cumulative sums (causal) or
    totals, plus the initial state. Returns out and the final (S, z)."""
    q, k, v = (torch.as_tensor(x).double() for x in (q, k, v))
    qt, kt = scale * phi(q, feature), phi(k, feature)
    kv = torch.einsum("bnhd,bnhe->bnhde", kt, v)
    if causal:
        S, z = kv.cumsum(dim=1), kt.cumsum(dim=1)
    else:
        S, z = kv.sum(dim=1, keepdim=True), kt.sum(dim=1, keepdim=True)
    if S0 is not None:
        S = S + torch.as_tensor(S0).double()[:, None]
        z = z + torch.as_tensor(z0).double()[:, None]
    num = torch.einsum("bnhd,bnhde->bnhe", qt, S)
    if normalize:
        num = num / (torch.einsum("bnhd,bnhd->bnh", qt, z)[..., None] + eps)
    return num, (S[:, -1], z[:, -1])


CASES = [  # B, N, H, D, Dv
    (1, 1, 1, 1, 1),
    (2, 63, 2, 16, 16),
    (1, 65, 3, 63, 17),
    (1, 1000, 2, 64, 32),
    (1, 100, 1, 128, 8),
]


@pytest.mark.parametrize("B,N,H,D,Dv", CASES)
@pytest.mark.parametrize("causal", [False, True])
def test_matches_torch_reference(B, N, H, D, Dv, causal):
    g = gen(N * 3 + D + causal)
    q, k, v = randn(g, B, N, H, D), randn(g, B, N, H, D), randn(g, B, N, H, Dv)
    o = longattn.linear_attention(q, k, v, causal=causal)
    assert o.shape == (B, N, H, Dv) and o.dtype == torch.float32
    tol = 1e-4 if N >= 1000 else 1e-5
    assert rel_err(o, ref_linear(q, k, v, causal=causal)[0]) <= tol


@pytest.mark.parametrize("feature", ["identity", "relu", "relu_eps", "relu1", "elu1"])
@pytest.mark.parametrize("normalize", [True, False])
def test_features_and_normalize(feature, normalize):
    g = gen(11)
    q, k, v = randn(g, 1, 77, 2, 24), randn(g, 1, 77, 2, 24), randn(g, 1, 77, 2, 12)
    if feature == "identity" and normalize:
        # q̃ᵀz can be ~0 with signed features: use positive inputs there
        q, k = q.abs(), k.abs()
    for causal in (False, True):
        o = longattn.linear_attention(q, k, v, feature=feature, causal=causal,
                                      normalize=normalize, scale=0.5, eps=1e-3)
        r = ref_linear(q, k, v, feature, causal, normalize, eps=1e-3, scale=0.5)[0]
        assert rel_err(o, r) <= 1e-5, (feature, causal, normalize)


@pytest.mark.parametrize("chunk", [1, 7, 64, 200])
def test_causal_chunk_sizes_agree(chunk):
    g = gen(12)
    q, k, v = randn(g, 1, 150, 2, 16), randn(g, 1, 150, 2, 16), randn(g, 1, 150, 2, 8)
    o = longattn.linear_attention(q, k, v, causal=True, chunk=chunk)
    assert rel_err(o, ref_linear(q, k, v, causal=True)[0]) <= 1e-5


def test_state_out_and_split_sequence_equals_one_pass():
    g = gen(13)
    B, N, H, D, Dv = 2, 130, 2, 16, 8
    q, k, v = randn(g, B, N, H, D), randn(g, B, N, H, D), randn(g, B, N, H, Dv)
    full, (S, z) = longattn.linear_attention(q, k, v, causal=True, output_final_state=True)
    ro, (rS, rz) = ref_linear(q, k, v, causal=True)
    assert S.shape == (B, H, D, Dv) and z.shape == (B, H, D) and S.dtype == torch.float32
    assert rel_err(full, ro) <= 1e-5
    assert rel_err(S, rS) <= 1e-5 and rel_err(z, rz) <= 1e-5
    m = 57
    o1, st = longattn.linear_attention(q[:, :m], k[:, :m], v[:, :m], causal=True,
                                       output_final_state=True)
    o2 = longattn.linear_attention(q[:, m:], k[:, m:], v[:, m:], causal=True,
                                   initial_state=st)
    assert rel_err(torch.cat([o1, o2], dim=1), full) <= 1e-5
    # an explicit random initial state against the reference
    S0, z0 = randn(g, B, H, D, Dv).abs(), randn(g, B, H, D).abs()
    o, (S1, z1) = longattn.linear_attention(q, k, v, causal=True, initial_state=(S0, z0),
                                            output_final_state=True)
    ro, (rS, rz) = ref_linear(q, k, v, causal=True, S0=S0, z0=z0)
    assert rel_err(o, ro) <= 1e-5 and rel_err(S1, rS) <= 1e-5 and rel_err(z1, rz) <= 1e-5


def test_strided_bhnd_views_equal_contiguous():
    g = gen(14)
    q, k, v = randn(g, 2, 65, 3, 16), randn(g, 2, 65, 3, 16), randn(g, 2, 65, 3, 8)
    for causal in (False, True):
        o1 = longattn.linear_attention(q, k, v, causal=causal)
        o2 = longattn.linear_attention(bhnd(q), bhnd(k), bhnd(v), causal=causal)
        assert rel_err(o2, o1) <= 1e-6


def test_numpy_and_dtypes():
    g = gen(15)
    q, k, v = (randn(g, 1, 50, 2, 8).numpy() for _ in range(3))
    o = longattn.linear_attention(q, k, v, causal=True)
    assert isinstance(o, np.ndarray) and o.dtype == np.float32
    assert rel_err(o, ref_linear(q, k, v, causal=True)[0]) <= 1e-5
    o64 = longattn.linear_attention(q.astype(np.float64), k, v)
    assert o64.dtype == np.float64
    assert rel_err(o64, ref_linear(q, k, v)[0]) <= 1e-5
    qb, kb, vb = (torch.from_numpy(x).to(torch.bfloat16) for x in (q, k, v))
    ob = longattn.linear_attention(qb, kb, vb, causal=True)
    assert ob.dtype == torch.bfloat16
    assert rel_err(ob, ref_linear(qb, kb, vb, causal=True)[0]) <= 1e-2


def test_bad_arguments():
    g = gen(16)
    q, k, v = randn(g, 1, 8, 2, 16), randn(g, 1, 8, 2, 16), randn(g, 1, 8, 2, 4)
    with pytest.raises(ValueError) as e:
        longattn.linear_attention(q, k[:, :5], v)
    assert e.value.message and "k" in e.value.message
    with pytest.raises(ValueError) as e:
        longattn.linear_attention(q, k, v, feature="softplus")
    assert "softplus" in str(e.value)
    with pytest.raises(ValueError) as e:  # state of the wrong shape
        longattn.linear_attention(q, k, v, causal=True,
                                  initial_state=(torch.zeros(1, 2, 16, 5), torch.zeros(1, 2, 16)))
    assert e.value.message
