"""Packed variable-length batches (shared/TRAINING.md §4): cu_seqlens for
softmax_attention, linear_attention(causal=True) and mhla_causal. Every
sequence of a packed call equals its own unpacked call, forward and
backward; the packed result is also checked against float64 references
written here, so a packing that leaked across sequences would fail."""
import numpy as np
import pytest
import torch

from test_py_common import bhnd, gen, needs, randn, rel_err  # noqa: I001 (sys.path first)
import longattn

pytestmark = needs("softmax_attention", "linear_attention", "mhla_causal")

LENS = [(5,), (1, 63, 65), (17, 0, 40, 1), (100, 3)]


def _cu(lens, lib="torch"):
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    return torch.from_numpy(cu) if lib == "torch" else cu


def _packed(g, lens, H, D, Dv, dtype=torch.float32):
    N = sum(lens)
    return randn(g, 1, N, H, D, dtype=dtype), randn(g, 1, N, H, D, dtype=dtype), \
        randn(g, 1, N, H, Dv, dtype=dtype)


def _segments(lens):
    s = 0
    for n in lens:
        yield s, s + n
        s += n


def _ref_softmax(q, k, v, causal):
    q, k, v = (x.double().transpose(1, 2) for x in (q, k, v))
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(s, -1) @ v).transpose(1, 2), torch.logsumexp(s, -1).transpose(1, 2)


def _ref_linear_causal(q, k, v, eps=1e-6):
    fq, fk, v = torch.relu(q.double()), torch.relu(k.double()), v.double()
    kv = torch.einsum("bnhd,bnhe->bnhde", fk, v).cumsum(1)
    z = fk.cumsum(1)
    num = torch.einsum("bnhd,bnhde->bnhe", fq, kv)
    den = torch.einsum("bnhd,bnhd->bnh", fq, z)[..., None] + eps
    return num / den


@pytest.mark.parametrize("lens", LENS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lib", ["torch", "numpy"])
def test_softmax_varlen_equals_each_sequence_alone(lens, causal, lib):
    g = gen(hash((tuple(lens), causal)) % 1000)
    q, k, v = _packed(g, lens, 3, 16, 24)
    if lib == "numpy":
        q, k, v = (x.numpy() for x in (q, k, v))
    else:
        q, k, v = bhnd(q), bhnd(k), bhnd(v)
    out, lse = longattn.softmax_attention(q, k, v, causal=causal, return_lse=True,
                                          cu_seqlens=_cu(lens, lib))
    assert tuple(out.shape) == (1, sum(lens), 3, 24) and tuple(lse.shape) == (1, sum(lens), 3)
    for s, e in _segments(lens):
        if e == s:
            continue
        o1, l1 = longattn.softmax_attention(q[:, s:e], k[:, s:e], v[:, s:e], causal=causal,
                                            return_lse=True)
        assert np.array_equal(np.asarray(out[:, s:e]), np.asarray(o1))
        assert np.array_equal(np.asarray(lse[:, s:e]), np.asarray(l1))
        ro, rl = _ref_softmax(*(torch.as_tensor(np.asarray(x[:, s:e])) for x in (q, k, v)),
                              causal)
        assert rel_err(torch.as_tensor(np.asarray(out[:, s:e])), ro) < 1e-5
        assert rel_err(torch.as_tensor(np.asarray(lse[:, s:e])), rl) < 1e-5


@pytest.mark.parametrize("lens", LENS)
@pytest.mark.parametrize("with_state", [False, True])
def test_causal_linear_varlen_equals_each_sequence_alone(lens, with_state):
    g = gen(7 + len(lens))
    H, D, Dv = 2, 16, 8
    q, k, v = _packed(g, lens, H, D, Dv)
    nseq = len(lens)
    init = (torch.rand(nseq, H, D, Dv, generator=g), torch.rand(nseq, H, D, generator=g)) \
        if with_state else None
    out, (S, z) = longattn.linear_attention(q, k, v, causal=True, chunk=16, initial_state=init,
                                            output_final_state=True, cu_seqlens=_cu(lens))
    assert tuple(S.shape) == (nseq, H, D, Dv) and tuple(z.shape) == (nseq, H, D)
    for i, (s, e) in enumerate(_segments(lens)):
        st = None if init is None else (init[0][i:i + 1], init[1][i:i + 1])
        if e == s:
            want = st if st is not None else (torch.zeros(1, H, D, Dv), torch.zeros(1, H, D))
            assert torch.equal(S[i:i + 1], want[0]) and torch.equal(z[i:i + 1], want[1])
            continue
        o1, (S1, z1) = longattn.linear_attention(q[:, s:e], k[:, s:e], v[:, s:e], causal=True,
                                                 chunk=16, initial_state=st,
                                                 output_final_state=True)
        assert torch.equal(out[:, s:e], o1)
        assert torch.equal(S[i:i + 1], S1) and torch.equal(z[i:i + 1], z1)
        if init is None:
            assert rel_err(out[:, s:e], _ref_linear_causal(q[:, s:e], k[:, s:e], v[:, s:e])) < 1e-5
    o2 = longattn.linear_attention(q, k, v, causal=True, chunk=16, initial_state=init,
                                   cu_seqlens=_cu(lens))
    assert torch.equal(o2, out)


@pytest.mark.parametrize("lens", LENS)
def test_mhla_causal_varlen_equals_each_sequence_alone(lens):
    g = gen(31 + len(lens))
    q, k, v = _packed(g, lens, 2, 16, 12)
    W = torch.from_numpy(longattn.mhla_init(20, "uniform_causal"))
    out = longattn.mhla_causal(q, k, v, W, chunk=8, cu_seqlens=_cu(lens))
    for s, e in _segments(lens):
        if e > s:
            o1 = longattn.mhla_causal(q[:, s:e], k[:, s:e], v[:, s:e], W, chunk=8)
            assert torch.equal(out[:, s:e], o1)
    # the packed call differs from one unpacked pass over everything (the
    # sequences really are separated) whenever there are two non-empty ones
    if sum(1 for n in lens if n) > 1:
        assert not torch.allclose(out, longattn.mhla_causal(q, k, v, W, chunk=8))


def test_varlen_bad_cu_seqlens_are_refused():
    g = gen(99)
    q, k, v = _packed(g, [4, 4], 2, 8, 8)
    W = torch.from_numpy(longattn.mhla_init(4, "uniform_causal"))
    bad = [(torch.tensor([0, 4, 8], dtype=torch.int64), "int32"),
           (torch.tensor([1, 4, 8], dtype=torch.int32), "start at 0"),
           (torch.tensor([0, 4, 7], dtype=torch.int32), "end at N = 8"),
           (torch.tensor([0, 5, 4, 8], dtype=torch.int32), "never decrease"),
           (torch.tensor([0], dtype=torch.int32), "nseq >= 1"),
           (torch.tensor([[0, 8]], dtype=torch.int32), "nseq"),
           ([0, 4, 8], "cu_seqlens: expected")]
    for cu, msg in bad:
        for fn in (lambda c: longattn.softmax_attention(q, k, v, cu_seqlens=c),
                   lambda c: longattn.linear_attention(q, k, v, causal=True, cu_seqlens=c),
                   lambda c: longattn.mhla_causal(q, k, v, W, chunk=4, cu_seqlens=c)):
            with pytest.raises((ValueError, TypeError), match=msg):
                fn(cu)
    cu = _cu([4, 4])
    with pytest.raises(ValueError, match="causal=True"):
        longattn.linear_attention(q, k, v, cu_seqlens=cu)
    q2 = torch.cat([q, q])
    with pytest.raises(ValueError, match=r"\[1, N, H, D\]"):
        longattn.softmax_attention(q2, q2, q2, cu_seqlens=cu)
    with pytest.raises(ValueError, match="initial_state"):
        longattn.linear_attention(q, k, v, causal=True, cu_seqlens=cu,
                                  initial_state=(torch.zeros(3, 2, 8, 8), torch.zeros(3, 2, 8)))


# ---------------------------------------------------------------------------
# backward: the packed gradients equal the per-sequence ones
# ---------------------------------------------------------------------------
def _has_backward(fn):
    try:
        x = torch.randn(1, 4, 1, 8, requires_grad=True)
        fn(x).sum().backward()
        return True
    except NotImplementedError:
        return False


def _grad_check(fn_packed, fn_one, inputs, lens):
    ins = [x.clone().requires_grad_(True) for x in inputs]
    out = fn_packed(*ins)
    dout = torch.randn(out.shape, generator=gen(5), dtype=out.dtype)
    grads = torch.autograd.grad(out, ins, dout)
    for s, e in _segments(lens):
        if e == s:
            continue
        one = [x[:, s:e].detach().clone().requires_grad_(True) for x in inputs]
        o1 = fn_one(*one)
        g1 = torch.autograd.grad(o1, one, dout[:, s:e])
        for ga, gb in zip(grads, g1):
            assert rel_err(ga[:, s:e], gb) < 1e-6


BWD_CASES = {
    "softmax": (lambda cu: (lambda q, k, v: longattn.softmax_attention(q, k, v, causal=True,
                                                                       cu_seqlens=cu)),
                lambda q, k, v: longattn.softmax_attention(q, k, v, causal=True)),
    "linear": (lambda cu: (lambda q, k, v: longattn.linear_attention(q, k, v, causal=True,
                                                                     cu_seqlens=cu)),
               lambda q, k, v: longattn.linear_attention(q, k, v, causal=True)),
}


@pytest.mark.parametrize("name", sorted(BWD_CASES))
@pytest.mark.parametrize("lens", [(1, 63, 65), (9, 0, 30)])
def test_varlen_backward_equals_each_sequence_alone(name, lens):
    packed, one = BWD_CASES[name]
    if not _has_backward(lambda x: one(x, x, x)):
        pytest.skip("longattn.%s has no backward in this build yet" % name)
    q, k, v = _packed(gen(3), lens, 2, 16, 16)
    _grad_check(packed(_cu(lens)), one, (q, k, v), lens)


@pytest.mark.parametrize("lens", [(1, 63, 65), (9, 0, 30)])
def test_mhla_causal_varlen_backward_equals_each_sequence_alone(lens):
    W = torch.from_numpy(longattn.mhla_init(16, "uniform_causal"))
    one = lambda q, k, v: longattn.mhla_causal(q, k, v, W, chunk=8)  # noqa: E731
    if not _has_backward(lambda x: one(x, x, x)):
        pytest.skip("longattn.mhla_causal has no backward in this build yet")
    q, k, v = _packed(gen(4), lens, 2, 16, 16)
    cu = _cu(lens)
    _grad_check(lambda q, k, v: longattn.mhla_causal(q, k, v, W, chunk=8, cu_seqlens=cu), one,
                (q, k, v), lens)
