"""longattn.sparse_attention_paged: sparse MLA decode over a paged latent cache.

Bit-equal to sparse_attention on the gathered keys (the same C kernel on the
same rows) for float32 and bfloat16, numpy and torch, with shuffled pages,
-1 slots and k above the valid count; close to a float64 numpy reference;
the block_table form (positions mapped to slots) equal to the slot form;
slots from dsa_topk_paged(return_slots=True) fed straight in; bad input
raises ValueError naming the argument."""
import numpy as np
import pytest
import torch

from test_py_common import ROOT  # noqa: F401 (puts python/ on the path)
import longattn


def paged_batch(rng, lens, page_size, D, spare=2):
    """Shuffled pages for sequences of `lens` tokens: (cache [P, S, D] with
    unused pages NaN, block_table [nseq, max_pages], per-sequence keys)."""
    need = [(n + page_size - 1) // page_size for n in lens]
    P = sum(need) + spare
    perm = rng.permutation(P).astype(np.int32)
    table = np.zeros((len(lens), max(need) + 1), np.int32)
    cache = np.full((P, page_size, D), np.nan, np.float32)
    keys, at = [], 0
    for s, n in enumerate(lens):
        table[s, :need[s]] = perm[at:at + need[s]]
        at += need[s]
        k = rng.standard_normal((n, D)).astype(np.float32)
        for p in range(n):
            cache[table[s, p // page_size], p % page_size] = k[p]
        keys.append(k)
    return cache, table, keys


def slots_of(table, seq, pos, page_size):
    pos = np.asarray(pos)
    slot = table[seq, np.maximum(pos, 0) // page_size] * page_size + np.maximum(pos, 0) % page_size
    return np.where(pos >= 0, slot, -1).astype(np.int32)


def reference(q, keys, pos, dv, scale):
    T, Hq, _ = q.shape
    out, lse = np.zeros((T, Hq, dv)), np.full((T, Hq), -np.inf)
    for t in range(T):
        rows = [p for p in pos[t] if p >= 0]
        if not rows:
            continue
        kv = keys[t][rows].astype(np.float64)
        s = q[t].astype(np.float64) @ kv.T * scale
        m = s.max(axis=1, keepdims=True)
        e = np.exp(s - m)
        out[t] = e @ kv[:, :dv] / e.sum(axis=1, keepdims=True)
        lse[t] = (m[:, 0] + np.log(e.sum(axis=1)))
    return out, lse


@pytest.mark.parametrize("T,Hq,D,dv,S,L,K,frac", [
    (1, 1, 16, 16, 1, 1, 1, 0.0),
    (3, 4, 63, 40, 64, 300, 7, 0.2),
    (7, 3, 32, 32, 16, 63, 200, 0.6),   # k above the valid count
    (65, 2, 64, 63, 8, 129, 65, 0.3),
])
@pytest.mark.parametrize("kind", ["numpy", "torch_f32", "torch_bf16"])
def test_equals_dense_on_gathered_keys(T, Hq, D, dv, S, L, K, frac, kind):
    rng = np.random.default_rng(T * 1000 + D)
    cache, table, keys = paged_batch(rng, [L], S, D)
    q = rng.standard_normal((T, Hq, D)).astype(np.float32)
    pos = rng.integers(0, L, (T, K)).astype(np.int32)
    pos[rng.random((T, K)) < frac] = -1
    if T > 1:
        pos[-1] = -1  # an all-skip row: out 0, lse -inf
    slots = slots_of(table, np.zeros(T, np.int64)[:, None], pos, S)
    if kind == "numpy":
        qq, cc, kk = q, cache, keys[0]
        sl, po = slots, pos
    else:
        dt = torch.float32 if kind == "torch_f32" else torch.bfloat16
        qq, cc, kk = (torch.from_numpy(x).to(dt) for x in (q, cache, keys[0]))
        sl, po = torch.from_numpy(slots), torch.from_numpy(pos)
        qq = qq.transpose(0, 1).contiguous().transpose(0, 1)  # a permuted view
    o1, l1 = longattn.sparse_attention_paged(qq, cc, sl, dv=dv)
    o2, l2 = longattn.sparse_attention(qq, kk, po, dv=dv)
    if kind == "numpy":
        assert np.array_equal(o1, o2) and np.array_equal(l1, l2)
        o, lse = o1.astype(np.float64), l1.astype(np.float64)
        qr, kr = q, keys
    else:
        assert torch.equal(o1, o2) and torch.equal(l1, l2)
        assert o1.dtype == qq.dtype and l1.dtype == torch.float32
        o, lse = o1.double().numpy(), l1.double().numpy()
        qr, kr = qq.float().numpy(), [kk.float().numpy()]
    assert not np.isnan(o).any()
    ro, rl = reference(qr, kr * T, pos, dv, D ** -0.5)
    tol = 1e-5 if kind != "torch_bf16" else 1e-2
    assert np.linalg.norm(o - ro) <= tol * max(np.linalg.norm(ro), 1e-30) + (0 if ro.any() else tol)
    fin = np.isfinite(rl)
    assert np.array_equal(np.isfinite(lse), fin)
    assert np.allclose(lse[fin], rl[fin], rtol=tol, atol=tol)


@pytest.mark.parametrize("torch_in", [False, True])
def test_block_table_form_equals_slots(torch_in):
    rng = np.random.default_rng(7)
    S, D, dv, lens = 16, 48, 32, [100, 5, 33]
    cache, table, keys = paged_batch(rng, lens, S, D)
    q_seq = np.array([2, 0, 0, 1, 2], np.int32)
    T, K = len(q_seq), 20
    q = rng.standard_normal((T, 3, D)).astype(np.float32)
    pos = np.stack([rng.integers(0, lens[s], K) for s in q_seq]).astype(np.int32)
    pos[:, ::5] = -1
    slots = slots_of(table, q_seq[:, None], pos, S)
    args = (q, cache, pos, table, q_seq)
    if torch_in:
        args = tuple(torch.from_numpy(a) for a in args)
    o1, l1 = longattn.sparse_attention_paged(args[0], args[1], args[2], dv=dv, block_table=args[3],
                                             q_seq=args[4])
    o2, l2 = longattn.sparse_attention_paged(q, cache, slots, dv=dv)
    o1 = o1.numpy() if torch_in else o1
    l1 = l1.numpy() if torch_in else l1
    assert np.array_equal(o1, o2) and np.array_equal(l1, l2)
    # q_seq None: row t is sequence t
    p3 = np.stack([rng.integers(-1, n, K) for n in lens]).astype(np.int32)
    o3, _ = longattn.sparse_attention_paged(q[:3], cache, p3, dv=dv, block_table=table)
    o4, _ = longattn.sparse_attention_paged(q[:3], cache, slots_of(table, np.arange(3)[:, None],
                                                                   p3, S), dv=dv)
    assert not np.isnan(o3).any() and np.array_equal(o3, o4)


def test_slots_from_the_paged_indexer():
    """dsa_topk_paged(return_slots=True) over an index cache whose pages
    mirror the latent cache's gives slots the attention takes directly."""
    rng = np.random.default_rng(11)
    S, dI, D, lens = 64, 32, 40, [200, 70]
    cache, table, keys = paged_batch(rng, lens, S, D)
    icache = longattn.PagedIndexCache(num_pages=cache.shape[0], page_size=S, head_dim=dI, dtype="f32")
    for s, n in enumerate(lens):
        ik = rng.standard_normal((n, dI)).astype(np.float32)
        icache.append(ik, slots_of(table, np.full((n, 1), s), np.arange(n)[:, None], S)[:, 0])
    ctx = np.array(lens, np.int32)
    qi = rng.standard_normal((2, 4, dI)).astype(np.float32)
    w = rng.random((2, 4)).astype(np.float32)
    slots = longattn.dsa_topk_paged(qi, w, icache, table, ctx, topk=96, return_slots=True)
    pos = longattn.dsa_topk_paged(qi, w, icache, table, ctx, topk=96)
    q = rng.standard_normal((2, 8, D)).astype(np.float32)
    o1, l1 = longattn.sparse_attention_paged(q, cache, slots, dv=D)
    for t in range(2):
        o2, l2 = longattn.sparse_attention(q[t:t + 1], keys[t], pos[t:t + 1], dv=D)
        assert np.array_equal(o1[t:t + 1], o2) and np.array_equal(l1[t:t + 1], l2)
    assert (pos[1] == -1).sum() == 96 - 70  # k above the context: -1 padding skipped


def test_bad_input():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 3, 8)).astype(np.float32)
    cache = rng.standard_normal((4, 2, 8)).astype(np.float32)
    idx = np.array([[0, 7, -1], [3, 5, 6]], np.int32)
    longattn.sparse_attention_paged(q, cache, idx, dv=6)
    for bad in (8, -2, 2 ** 31 - 1):
        i2 = idx.copy()
        i2[1, 1] = bad
        with pytest.raises(ValueError, match=r"idx_slots\[1\]\[1\] = %d" % bad):
            longattn.sparse_attention_paged(q, cache, i2, dv=6)
    with pytest.raises(ValueError, match="kv_cache"):
        longattn.sparse_attention_paged(q, cache.reshape(8, 8), idx, dv=6)
    with pytest.raises(ValueError, match="kv_cache"):
        longattn.sparse_attention_paged(q, cache[:, :, :7], idx, dv=6)
    with pytest.raises(ValueError, match="kv_cache"):
        longattn.sparse_attention_paged(q, cache.astype(np.float64), idx, dv=6)
    with pytest.raises(ValueError, match="kv_cache"):  # pages not contiguous
        longattn.sparse_attention_paged(q, cache[::2], idx, dv=6)
    with pytest.raises(ValueError, match="idx_slots"):
        longattn.sparse_attention_paged(q, cache, idx.astype(np.float32), dv=6)
    with pytest.raises(ValueError, match="dv"):
        longattn.sparse_attention_paged(q, cache, idx, dv=9)
    table = np.array([[1, 0], [3, 2]], np.int32)
    with pytest.raises(ValueError, match="idx_slots"):  # position past the table
        longattn.sparse_attention_paged(q, cache, np.array([[0, 4, 1], [0, 0, 0]], np.int32),
                                        dv=6, block_table=table)
    with pytest.raises(ValueError, match="block_table"):
        longattn.sparse_attention_paged(q, cache, idx % 4, dv=6,
                                        block_table=np.array([[1, 9], [3, 2]], np.int32))
    with pytest.raises(ValueError, match="q_seq"):
        longattn.sparse_attention_paged(q, cache, idx % 4, dv=6, block_table=table,
                                        q_seq=np.array([0, 2], np.int32))
    with pytest.raises(ValueError, match="q_seq"):
        longattn.sparse_attention_paged(q, cache, idx, dv=6, q_seq=np.array([0, 1], np.int32))
    tq = torch.from_numpy(q).requires_grad_()
    with pytest.raises(ValueError, match="grad"):
        longattn.sparse_attention_paged(tq, torch.from_numpy(cache), torch.from_numpy(idx), dv=6)
    with torch.no_grad():
        longattn.sparse_attention_paged(tq, torch.from_numpy(cache), torch.from_numpy(idx), dv=6)


@pytest.mark.skipif(not longattn.cuda_available(), reason="no CUDA device")
def test_cuda_equals_cpu():
    rng = np.random.default_rng(5)
    S, D, dv, L = 64, 576, 512, 500
    cache, table, keys = paged_batch(rng, [L], S, D)
    q = torch.from_numpy(rng.standard_normal((4, 16, D)).astype(np.float32)).bfloat16()
    pos = rng.integers(0, L, (4, 256)).astype(np.int32)
    pos[:, ::7] = -1
    slots = torch.from_numpy(slots_of(table, np.zeros((4, 1), np.int64), pos, S))
    c = torch.from_numpy(cache).bfloat16()
    o1, l1 = longattn.sparse_attention_paged(q.cuda(), c.cuda(), slots.cuda(), dv=dv)
    o2, l2 = longattn.sparse_attention(q.cuda(), torch.from_numpy(keys[0]).bfloat16().cuda(),
                                       torch.from_numpy(pos).cuda(), dv=dv)
    assert torch.equal(o1, o2) and torch.equal(l1, l2)
    o3, l3 = longattn.sparse_attention_paged(q, c, slots, dv=dv)
    err = (o1.float().cpu() - o3.float()).norm() / o3.float().norm()
    assert err <= 1e-2 and torch.allclose(l1.cpu(), l3, atol=1e-3)
    bad = slots.clone()
    bad[0, 0] = cache.shape[0] * S
    with pytest.raises(ValueError, match=r"idx_slots\[0\]\[0\]"):
        longattn.sparse_attention_paged(q.cuda(), c.cuda(), bad.cuda(), dv=dv)
