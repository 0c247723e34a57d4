"""Indexers (dsa_topk, hisa_topk, blocksparse_topk, topk, IndexCache)
against float64 torch: DSA scores written directly and ranked with
torch.sort/torch.topk; HISA's pooled-block filter and token refine written
per query. Near-ties are handled by comparing the selected reference
scores (a correct top-k up to rounding) and checking the tie rule where
ties are exact."""
import numpy as np
import pytest
import torch

from test_py_common import gen, needs, randn, rel_err
import longattn

NEG = float("-inf")


def default_range(T, L, start=None, end=None):
    t = torch.arange(T)
    s = torch.zeros(T, dtype=torch.long) if start is None else torch.as_tensor(start).long()
    e = (L - T + t + 1) if end is None else torch.as_tensor(end).long()
    return s, e.clamp(max=L)


def ref_scores(q, k, w, start=None, end=None):
    """I(t,s) = Σ_h w[t,h]·ReLU(q[t,h]·k[s]) in float64, -inf outside [start, end)."""
    q, k, w = (torch.as_tensor(x).double() for x in (q, k, w))
    T, L = q.shape[0], k.shape[0]
    I = torch.einsum("th,ths->ts", w, torch.einsum("thd,sd->ths", q, k).clamp_min(0))
    s0, s1 = default_range(T, L, start, end)
    pos = torch.arange(L)[None, :]
    return I.masked_fill((pos < s0[:, None]) | (pos >= s1[:, None]), NEG)


def check_topk_rows(idx, scores, k, tol=1e-5):
    """idx [T, k] is a correct top-k of scores [T, L] (float64, -inf = invalid):
    valid distinct entries first, -1 padding, the selected scores equal the
    k best up to rounding, descending, and exact ties in ascending index."""
    idx = torch.as_tensor(np.asarray(idx) if isinstance(idx, np.ndarray) else idx).long().cpu()
    assert idx.shape == (scores.shape[0], k)
    scale = scores[torch.isfinite(scores)].abs().max().item() if torch.isfinite(
        scores).any() else 1.0
    for t in range(scores.shape[0]):
        row = scores[t]
        nvalid = int(torch.isfinite(row).sum())
        m = min(k, nvalid)
        got = idx[t]
        assert (got[m:] == -1).all(), (t, got)
        sel = got[:m]
        assert (sel >= 0).all() and len(set(sel.tolist())) == m, (t, sel)
        got_sc = row[sel]
        assert torch.isfinite(got_sc).all(), (t, sel)
        best = torch.sort(row, descending=True).values[:m]
        assert (got_sc - best).abs().max().item() <= tol * scale if m else True, t
        assert (got_sc[1:] <= got_sc[:-1] + tol * scale).all(), t
        for a in range(m - 1):  # exact ties: lower index first
            if got_sc[a] == got_sc[a + 1]:
                assert sel[a] < sel[a + 1], (t, a, sel[a:a + 2])


def inputs(g, T, L, HI, dI):
    q, k = randn(g, T, HI, dI), randn(g, L, dI)
    w = torch.rand(T, HI, generator=g, dtype=torch.float64).float() * (dI * HI) ** -0.5
    return q, k, w


DSA_CASES = [  # T, L, HI, dI, topk
    (1, 1, 1, 1, 1),
    (5, 63, 4, 16, 8),
    (33, 65, 8, 63, 64),
    (17, 1000, 4, 64, 100),
    (64, 200, 2, 128, 300),  # topk > L: -1 padding
]


@needs("dsa_topk")
@pytest.mark.parametrize("T,L,HI,dI,topk", DSA_CASES)
def test_dsa_matches_direct_scores(T, L, HI, dI, topk):
    g = gen(T + L + dI)
    q, k, w = inputs(g, T, L, HI, dI)
    idx, sc = longattn.dsa_topk(q, k, w, topk=topk, return_scores=True)
    assert idx.dtype == torch.int32 and sc.dtype == torch.float32 and sc.shape == (T, L)
    ref = ref_scores(q, k, w)
    assert rel_err(sc, ref) <= 1e-5
    check_topk_rows(idx, ref, topk)
    # and exactly torch.topk's choice where the scores leave no near-tie, the
    # gap to the best key left out included (ReLU makes exact zeros common:
    # a zero tie across the cut is decided by the lower index, torch.topk's
    # choice there is arbitrary)
    kk = min(topk, L)
    tv, ti = torch.topk(ref, min(kk + 1, L), dim=1)
    for t in range(T):
        fin = torch.isfinite(tv[t])
        gaps = (tv[t][fin][:-1] - tv[t][fin][1:]).abs()
        n = min(int(fin.sum()), kk)
        if len(gaps) and gaps.min() > 1e-4 * ref[torch.isfinite(ref)].abs().max():
            assert torch.equal(idx[t][:n].long(), ti[t][:n])


@needs("dsa_topk")
def test_dsa_ranges_numpy_and_ties():
    g = gen(51)
    T, L = 20, 150
    q, k, w = inputs(g, T, L, 4, 16)
    start = torch.randint(0, 100, (T,), generator=g).int()
    end = (start + torch.randint(0, 60, (T,), generator=g)).int().clamp(max=L)
    idx = longattn.dsa_topk(q.numpy(), k.numpy(), w.numpy(), topk=32, start=start.numpy(),
                            end=end.numpy())
    assert isinstance(idx, np.ndarray) and idx.dtype == np.int32
    check_topk_rows(idx, ref_scores(q, k, w, start, end), 32)
    # all-zero scores (every q·k < 0): pure ties, lower index first
    kneg = -k.abs()
    idx = longattn.dsa_topk(q.abs(), kneg, w, topk=10)
    s0, s1 = default_range(T, L)
    for t in range(T):
        n = min(10, int(s1[t] - s0[t]))
        assert idx[t, :n].tolist() == list(range(n)) and (idx[t, n:] == -1).all()


@needs("dsa_topk")
def test_dsa_bf16_and_errors():
    g = gen(52)
    q, k, w = inputs(g, 8, 100, 4, 32)
    idx = longattn.dsa_topk(q.bfloat16(), k.bfloat16(), w, topk=16)
    check_topk_rows(idx, ref_scores(q.bfloat16(), k.bfloat16(), w), 16, tol=1e-2)
    with pytest.raises(ValueError) as e:
        longattn.dsa_topk(q, k[:, :31], w, topk=16)
    assert e.value.message
    with pytest.raises(ValueError) as e:
        longattn.dsa_topk(q, k, w[:, :3], topk=16)
    assert "w" in e.value.message
    with pytest.raises(ValueError) as e:
        longattn.dsa_topk(q, k, w, topk=0)
    assert "idx" in e.value.message or "topk" in e.value.message
    with pytest.raises(ValueError) as e:  # start/end must be int32
        longattn.dsa_topk(q, k, w, topk=4, start=torch.zeros(8), end=torch.ones(8))
    assert e.value.message


def ref_hisa(q, k, w, topk, B, m, start=None, end=None, mode="hisa"):
    """Per query: pooled block means, block scores over the blocks meeting the
    range, first and last forced, top m (ties to the lower block); then either
    token scores in the kept blocks (hisa) or all their valid tokens
    (blocksparse, m = topk // B). Returns kept blocks and token scores rows
    [T, L] (-inf outside the candidates), and the block-score margin."""
    q, k, w = (torch.as_tensor(x).double() for x in (q, k, w))
    T, L = q.shape[0], k.shape[0]
    B = min(B, L)
    nb = (L + B - 1) // B
    kbar = torch.stack([k[b * B:(b + 1) * B].mean(0) for b in range(nb)])
    blk = torch.einsum("th,thb->tb", w, torch.einsum("thd,bd->thb", q, kbar).clamp_min(0))
    full = ref_scores(q, k, w, start, end)
    s0, s1 = default_range(T, L, start, end)
    rows, kept_all, margins = [], [], []
    for t in range(T):
        row = torch.full((L,), NEG, dtype=torch.float64)
        if s1[t] <= s0[t]:
            rows.append(row), kept_all.append([]), margins.append(float("inf"))
            continue
        b0, b1 = int(s0[t]) // B, (int(s1[t]) + B - 1) // B
        cand = blk[t, b0:b1].clone()
        cand[0] = cand[-1] = float("inf")
        order = sorted(range(b1 - b0), key=lambda j: (-cand[j].item(), j))
        kept = [b0 + j for j in order[:m]]
        fin = [cand[j].item() for j in order if np.isfinite(cand[j].item())]
        nf = m - (2 if b1 - b0 > 1 else 1)  # kept among the unforced
        margins.append(abs(fin[nf - 1] - fin[nf]) if 0 < nf < len(fin) else float("inf"))
        for b in kept:
            row[b * B:(b + 1) * B] = full[t, b * B:(b + 1) * B]
        rows.append(row), kept_all.append(kept)
    return torch.stack(rows), kept_all, margins


HISA_CASES = [  # T, L, HI, dI, topk, B, m
    (1, 1, 1, 1, 1, 1, 1),
    (9, 63, 4, 16, 16, 8, 3),
    (20, 65, 2, 63, 20, 16, 2),
    (16, 1000, 4, 64, 64, 64, 4),
    (8, 300, 2, 32, 50, 128, 1),  # one block kept: the forced lower one
]


@needs("hisa_topk")
@pytest.mark.parametrize("T,L,HI,dI,topk,B,m", HISA_CASES)
def test_hisa_matches_reference(T, L, HI, dI, topk, B, m):
    g = gen(T + L + B)
    q, k, w = inputs(g, T, L, HI, dI)
    idx = longattn.hisa_topk(q, k, w, topk=topk, block=B, block_topk=m)
    assert idx.dtype == torch.int32 and idx.shape == (T, topk)
    rows, _, margins = ref_hisa(q, k, w, topk, B, m)
    scale = rows[torch.isfinite(rows)].abs().max().item() if torch.isfinite(rows).any() else 1
    ok = [t for t in range(T) if margins[t] > 1e-4 * scale]
    assert len(ok) >= T // 2, "too many near-tied block choices to test"
    check_topk_rows(idx[ok], rows[ok], topk)


@needs("hisa_topk", "dsa_topk")
def test_hisa_equals_dsa_when_all_blocks_fit():
    g = gen(53)
    T, L, B = 30, 500, 32
    q, k, w = inputs(g, T, L, 4, 32)
    m = (L + B - 1) // B
    assert torch.equal(longattn.hisa_topk(q, k, w, topk=64, block=B, block_topk=m),
                       longattn.dsa_topk(q, k, w, topk=64))


@needs("blocksparse_topk")
@pytest.mark.parametrize("T,L,topk,B", [(9, 63, 16, 8), (16, 1000, 256, 64), (4, 10, 128, 128)])
def test_blocksparse_returns_the_kept_blocks_tokens(T, L, topk, B):
    g = gen(T + L + B + 1)
    q, k, w = inputs(g, T, L, 4, 16)
    idx = longattn.blocksparse_topk(q, k, w, topk=topk, block=B)
    assert idx.shape == (T, topk) and idx.dtype == torch.int32
    rows, kept, margins = ref_hisa(q, k, w, topk, B, max(topk // min(B, L), 1))
    s0, s1 = default_range(T, L)
    Bq = min(B, L)
    checked = 0
    for t in range(T):
        if margins[t] <= 1e-4:
            continue
        want = sorted(s for b in kept[t] for s in range(b * Bq, (b + 1) * Bq)
                      if s0[t] <= s < s1[t])[:topk]
        got = idx[t][idx[t] >= 0].tolist()
        assert sorted(got) == want, t
        assert (idx[t][len(got):] == -1).all()
        checked += 1
    assert checked >= T // 2


@needs("topk")
def test_topk_rows():
    g = gen(54)
    s = randn(g, 7, 100)
    s[2, 10:] = NEG  # fewer valid than k
    s[3] = 0.0  # all tied
    idx = longattn.topk(s, 20)
    assert idx.shape == (7, 20) and idx.dtype == torch.int32
    check_topk_rows(idx, s.double(), 20)
    assert idx[3].tolist() == list(range(20))
    tv, ti = torch.topk(s[0].double(), 20)
    assert torch.equal(idx[0].long(), ti)
    assert isinstance(longattn.topk(s.numpy(), 5), np.ndarray)
    with pytest.raises(ValueError) as e:
        longattn.topk(s.double().int(), 5)
    assert e.value.message


@needs("IndexCache", "hisa_topk")
def test_index_cache_equals_hisa():
    g = gen(55)
    T, L, B = 12, 333, 32
    q, k, w = inputs(g, T, L, 4, 16)
    with longattn.IndexCache(16, capacity=512, block=B) as cache:
        for a, b in [(0, 1), (1, 40), (40, 64), (64, 333)]:
            cache.append(k[a:b])
        assert len(cache) == L
        got = cache.hisa(q, w, topk=48, block_topk=3)
    assert torch.equal(got, longattn.hisa_topk(q, k, w, topk=48, block=B, block_topk=3))
    with pytest.raises(ValueError, match="closed"):
        cache.hisa(q, w)


@needs("dsa_topk", "hisa_topk", "blocksparse_topk")
def test_strided_indexer_inputs_equal_contiguous():
    g = gen(56)
    T, L, HI, dI = 12, 260, 4, 16
    q, k, w = inputs(g, T, L, HI, dI)
    qs = q.transpose(0, 1).contiguous().transpose(0, 1)  # [HI,T,dI] buffer as [T,HI,dI]
    ks = torch.cat([k, k], dim=1)[:, :dI]  # row stride 2·dI
    ws = w.t().contiguous().t()
    assert not (qs.is_contiguous() or ks.is_contiguous() or ws.is_contiguous())
    a, sa = longattn.dsa_topk(q, k, w, topk=20, return_scores=True)
    b, sb = longattn.dsa_topk(qs, ks, ws, topk=20, return_scores=True)
    assert torch.equal(a, b) and rel_err(sb, sa) <= 1e-6
    assert torch.equal(longattn.hisa_topk(q, k, w, topk=20, block=16, block_topk=3),
                       longattn.hisa_topk(qs, ks, ws, topk=20, block=16, block_topk=3))
    assert torch.equal(longattn.blocksparse_topk(q, k, w, topk=32, block=16),
                       longattn.blocksparse_topk(qs, ks, ws, topk=32, block=16))
