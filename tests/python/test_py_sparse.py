"""longattn.sparse_attention (sparse MLA, MQA mode) against float64 torch:
gather the selected latent rows, softmax over them, weighted sum of their
first dv entries; lse by logsumexp; skipped indices (-1, >= L) and empty
rows (o = 0, lse = -inf)."""
import numpy as np
import pytest
import torch

from test_py_common import gen, needs, randn, rel_err
import longattn

pytestmark = needs("sparse_attention")


def ref_sparse(q, kv, idx, dv, scale=None):
    q, kv = q.double(), kv.double()
    idx = torch.as_tensor(idx).long()
    T, Hq, Dqk = q.shape
    L = kv.shape[0]
    scale = Dqk ** -0.5 if scale is None else scale
    if kv.dim() == 2:
        kv = kv[:, None]
    Hkv = kv.shape[1]
    head = torch.arange(Hq) * Hkv // Hq  # kv head of each query head
    valid = (idx >= 0) & (idx < L)  # [T, k]
    g = kv[idx.clamp(0, L - 1)][:, :, head]  # [T, k, Hq, Dqk]
    logits = torch.einsum("thd,tkhd->thk", q, g) * scale
    logits = logits.masked_fill(~valid[:, None, :], float("-inf"))
    lse = torch.logsumexp(logits, dim=-1)  # [T, Hq]
    p = torch.where(torch.isfinite(lse)[..., None], torch.exp(logits - lse[..., None]),
                    torch.zeros_like(logits))
    out = torch.einsum("thk,tkhd->thd", p, g[..., :dv])
    return out, lse


def rand_idx(g, T, L, k, holes=True):
    """Distinct indices per row, with some -1 and >= L entries."""
    idx = torch.stack([torch.randperm(L, generator=g)[:k] if k <= L else
                       torch.cat([torch.randperm(L, generator=g), torch.full((k - L,), -1)])
                       for _ in range(T)]).int()
    if holes and k > 2:
        idx[:, 0] = -1
        idx[::2, 1] = L + 5
    return idx


CASES = [  # T, L, Hq, Hkv, Dqk, dv, k
    (1, 1, 1, 0, 1, 1, 1),
    (5, 63, 4, 0, 16, 16, 8),
    (9, 65, 8, 2, 63, 40, 64),
    (16, 1000, 16, 0, 576, 512, 128),
    (3, 10, 2, 0, 64, 32, 20),   # k > L: padding
]


@pytest.mark.parametrize("T,L,Hq,Hkv,Dqk,dv,k", CASES)
def test_matches_gather_softmax_reference(T, L, Hq, Hkv, Dqk, dv, k):
    g = gen(T + L + Dqk)
    q = randn(g, T, Hq, Dqk)
    kv = randn(g, L, Dqk) if Hkv == 0 else randn(g, L, Hkv, Dqk)
    idx = rand_idx(g, T, L, k)
    out, lse = longattn.sparse_attention(q, kv, idx, dv=dv)
    assert out.shape == (T, Hq, dv) and out.dtype == torch.float32
    assert lse.shape == (T, Hq) and lse.dtype == torch.float32
    ro, rl = ref_sparse(q, kv, idx, dv)
    assert rel_err(out, ro) <= 1e-5
    assert rel_err(lse, rl) <= 1e-5


def test_empty_rows_scale_numpy_bf16():
    g = gen(71)
    T, L, H, D, dv = 6, 50, 4, 32, 16
    q, kv = randn(g, T, H, D), randn(g, L, D)
    idx = rand_idx(g, T, L, 10)
    idx[2] = -1  # no valid index: o = 0, lse = -inf, never NaN
    idx[4] = L
    out, lse = longattn.sparse_attention(q, kv, idx, dv=dv, scale=0.3)
    ro, rl = ref_sparse(q, kv, idx, dv, scale=0.3)
    assert rel_err(out, ro) <= 1e-5 and rel_err(lse, rl) <= 1e-5
    assert (out[2] == 0).all() and torch.isneginf(lse[2]).all() and torch.isneginf(lse[4]).all()
    on, ln = longattn.sparse_attention(q.numpy(), kv.numpy(), idx.numpy(), dv=dv, scale=0.3)
    assert isinstance(on, np.ndarray) and on.dtype == np.float32 and ln.dtype == np.float32
    assert rel_err(on, out) <= 1e-6
    ob, lb = longattn.sparse_attention(q.bfloat16(), kv.bfloat16(), idx, dv=dv, scale=0.3)
    assert ob.dtype == torch.bfloat16 and lb.dtype == torch.float32
    assert rel_err(ob, ref_sparse(q.bfloat16(), kv.bfloat16(), idx, dv, 0.3)[0]) <= 1e-2


def test_strided_q_and_kv():
    g = gen(72)
    T, L, H, D, dv = 8, 40, 4, 16, 8
    q, kv = randn(g, T, H, D), randn(g, L, D)
    idx = rand_idx(g, T, L, 12)
    want = longattn.sparse_attention(q, kv, idx, dv=dv)
    qs = q.transpose(0, 1).contiguous().transpose(0, 1)  # [H,T,D] buffer seen as [T,H,D]
    kvs = torch.cat([kv, kv], dim=1)[:, :D]  # row stride 2D
    assert not qs.is_contiguous() and not kvs.is_contiguous()
    got = longattn.sparse_attention(qs, kvs, idx, dv=dv)
    assert rel_err(got[0], want[0]) <= 1e-6 and rel_err(got[1], want[1]) <= 1e-6


@needs("sparse_attention", "dsa_topk")
def test_pipeline_dsa_then_sparse_attention():
    g = gen(73)
    T, L, HI, dI, H, D = 8, 300, 4, 16, 4, 64
    qi, ki = randn(g, T, HI, dI), randn(g, L, dI)
    w = torch.rand(T, HI, generator=g, dtype=torch.float64).float()
    idx = longattn.dsa_topk(qi, ki, w, topk=32)
    q, kv = randn(g, T, H, D), randn(g, L, D)
    out, lse = longattn.sparse_attention(q, kv, idx, dv=48)
    ro, rl = ref_sparse(q, kv, idx, 48)
    assert rel_err(out, ro) <= 1e-5 and rel_err(lse, rl) <= 1e-5


def test_bad_arguments():
    g = gen(74)
    q, kv = randn(g, 4, 2, 16), randn(g, 20, 16)
    idx = rand_idx(g, 4, 20, 5)
    with pytest.raises(ValueError) as e:  # dv > Dqk
        longattn.sparse_attention(q, kv, idx, dv=17)
    assert "dv" in e.value.message
    with pytest.raises(ValueError) as e:
        longattn.sparse_attention(q, kv[:, :15], idx, dv=8)
    assert e.value.message
    with pytest.raises(ValueError) as e:  # idx must be int32
        longattn.sparse_attention(q, kv, idx.float(), dv=8)
    assert "idx" in e.value.message
    with pytest.raises(ValueError) as e:  # idx rows != T
        longattn.sparse_attention(q, kv, idx[:3], dv=8)
    assert "idx" in e.value.message
