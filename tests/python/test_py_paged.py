"""PagedIndexCache, dsa_topk_paged, hisa_topk_paged from Python.

The fp8 page bytes are decoded here in float64 numpy (e4m3 + per-token fp32
scale, DeepGEMM's layout) and compared with the key inputs; paged results
equal the dense indexers (dsa_topk / hisa_topk) on the gathered keys, and
the DSA selection is checked against float64 torch scores; pooled means
equal a float32 position-order recomputation; bad input raises ValueError
naming the argument and leaves the cache unchanged."""
import numpy as np
import pytest
import torch

from test_py_common import ROOT  # noqa: F401 (puts python/ on the path)
import longattn

PS = 64


def e4m3_table():
    b = np.arange(256)
    e, m = (b >> 3) & 15, b & 7
    v = np.where(e == 0, m * 2.0 ** -9, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return np.where(b & 0x80, -v, v)


def make_batch(rng, lens, dI, spare=2):
    pages = sum((n + PS - 1) // PS for n in lens) + spare
    perm = rng.permutation(pages).astype(np.int32)
    maxp = max((n + PS - 1) // PS for n in lens) + 1
    table = np.zeros((len(lens), maxp), np.int32)
    at = 0
    for s, n in enumerate(lens):
        np_ = (n + PS - 1) // PS
        table[s, :np_] = perm[at:at + np_]
        at += np_
    keys = [rng.standard_normal((n, dI)).astype(np.float32) for n in lens]
    return pages, table, keys


def slots_of(table, s, pos):
    pos = np.asarray(pos)
    return (table[s, pos // PS].astype(np.int64) * PS + pos % PS).astype(np.int32)


def fill(cache, table, keys, rng):
    """Decode-style appends: interleaved chunks across the sequences."""
    done = [0] * len(keys)
    while True:
        ks, sl, sq, ps = [], [], [], []
        for s, k in enumerate(keys):
            n = min(len(k) - done[s], int(rng.integers(1, 200)))
            if n <= 0:
                continue
            pos = np.arange(done[s], done[s] + n)
            ks.append(k[pos])
            sl.append(slots_of(table, s, pos))
            sq.append(np.full(n, s, np.int32))
            ps.append(pos.astype(np.int32))
            done[s] += n
        if not ks:
            break
        cache.append(np.concatenate(ks), np.concatenate(sl), np.concatenate(sq),
                     np.concatenate(ps))


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "bf16"])
@pytest.mark.parametrize("next_n", [1, 2, 4])
def test_paged_equals_dense(dtype, next_n):
    rng = np.random.default_rng(18 + next_n)
    lens, dI, HI, topk = [1, 65, 300, 1000], 32, 4, 48
    pages, table, keys = make_batch(rng, lens, dI)
    cache = longattn.PagedIndexCache(pages, head_dim=dI, dtype=dtype, max_seqs=len(lens))
    fill(cache, table, keys, rng)
    if dtype == "fp8_e4m3":
        raw = cache.pages()
        assert raw.shape == (pages, PS * (dI + 4))
        tab = e4m3_table()
        for s, k in enumerate(keys):
            sl = slots_of(table, s, np.arange(len(k)))
            pg, off = sl // PS, sl % PS
            vals = tab[raw[pg[:, None], off[:, None] * dI + np.arange(dI)[None, :]]]
            scale = raw[pg[:, None], PS * dI + off[:, None] * 4 + np.arange(4)[None, :]]
            scale = np.ascontiguousarray(scale).view(np.float32)[:, 0]
            amax = np.abs(k).max(1)
            np.testing.assert_array_equal(scale, (amax / np.float32(448)).astype(np.float32))
            deq = vals * scale[:, None]
            # e4m3 has 3 mantissa bits: relative error at most 2^-4 of amax per element
            assert np.all(np.abs(deq - k) <= np.abs(k) * 2.0 ** -4 + amax[:, None] * 2.0 ** -10)
            np.testing.assert_array_equal(cache.gather(table, s, len(k)), deq.astype(np.float32))
    T = len(lens) * next_n
    q = torch.randn(T, HI, dI)
    w = torch.rand(T, HI) + 0.1
    cl = np.array(lens, np.int32)
    for hisa in (0, 1):
        if hisa:
            idx = longattn.hisa_topk_paged(q, w, cache, table, cl, next_n=next_n, topk=topk,
                                           block_topk=3)
            slots = longattn.hisa_topk_paged(q, w, cache, table, cl, next_n=next_n, topk=topk,
                                             block_topk=3, return_slots=True)
        else:
            idx = longattn.dsa_topk_paged(q, w, cache, table, cl, next_n=next_n, topk=topk)
            slots = longattn.dsa_topk_paged(q, w, cache, table, cl, next_n=next_n, topk=topk,
                                            return_slots=True)
        assert idx.dtype == torch.int32 and idx.shape == (T, topk)
        for s, n in enumerate(lens):
            kg = torch.from_numpy(cache.gather(table, s, n))
            rows = slice(s * next_n, (s + 1) * next_n)
            if hisa:
                ref = longattn.hisa_topk(q[rows], kg, w[rows], topk=topk, block_topk=3)
            else:
                ref = longattn.dsa_topk(q[rows], kg, w[rows], topk=topk)
                # float64: the kept keys score at least as high as any dropped one
                sc = torch.einsum("th,ths->ts", w[rows].double(),
                                  torch.einsum("thd,sd->ths", q[rows].double(), kg.double()).clamp_min(0))
                for j in range(next_n):
                    end = max(n - next_n + j + 1, 0)
                    sel = ref[j][ref[j] >= 0].long()
                    assert len(sel) == min(end, topk) and len(set(sel.tolist())) == len(sel)
                    if 0 < len(sel) < end:
                        rest = torch.ones(end, dtype=torch.bool)
                        rest[sel] = False
                        assert sc[j, sel].min() >= sc[j, :end][rest].max() - 1e-5 * sc[j, :end].abs().max()
            assert torch.equal(idx[rows], ref), (hisa, s)
            exp = torch.where(ref >= 0, torch.from_numpy(slots_of(table, s, ref.clamp_min(0).numpy())), -1)
            assert torch.equal(slots[rows], exp.int())
        # pooled means == position-order float32 recomputation
    for s, n in enumerate(lens):
        kg = cache.gather(table, s, n)
        pm = cache.pooled(s, n)
        for b in range(pm.shape[0]):
            acc = np.zeros(dI, np.float32)
            blk = kg[b * 128:(b + 1) * 128]
            for r in blk:
                acc = acc + r
            np.testing.assert_array_equal(pm[b], acc / np.float32(len(blk)))


def test_q_seq_order_and_errors():
    rng = np.random.default_rng(7)
    lens, dI = [100, 10], 16
    pages, table, keys = make_batch(rng, lens, dI)
    cache = longattn.PagedIndexCache(pages, head_dim=dI, dtype="bf16", max_seqs=2)
    fill(cache, table, keys, rng)
    q, w = np.random.default_rng(1).standard_normal((4, 2, dI)).astype(np.float32), np.ones((4, 2), np.float32)
    cl = np.array(lens, np.int32)
    a = longattn.dsa_topk_paged(q, w, cache, table, cl, next_n=2, topk=8)
    perm = np.array([2, 0, 3, 1])  # rows of sequence 0 at 1 and 3, of sequence 1 at 0 and 2
    qs = np.array([1, 0, 1, 0], np.int32)
    b = longattn.dsa_topk_paged(q[perm],
                                w, cache, table, cl, q_seq=qs, topk=8)
    np.testing.assert_array_equal(b[[1, 3, 0, 2]], a)
    before = cache.pages()
    with pytest.raises(ValueError, match="slot_mapping"):
        cache.append(np.ones((2, dI), np.float32), np.array([0, pages * PS], np.int32))
    with pytest.raises(ValueError, match="not finite"):
        cache.append(np.full((1, dI), np.nan, np.float32), np.array([0], np.int32))
    np.testing.assert_array_equal(cache.pages(), before)
    bad = table.copy()
    bad[0, 1] = pages
    with pytest.raises(ValueError, match="block_table"):
        longattn.dsa_topk_paged(q, w, cache, bad, cl, next_n=2, topk=8)
    with pytest.raises(ValueError, match="context_lens"):
        longattn.dsa_topk_paged(q, w, cache, table, np.array([table.shape[1] * PS + 1, 1], np.int32),
                                next_n=2, topk=8)
    assert cache.check() is cache  # CPU caches check every value before the call
    with pytest.raises(ValueError, match="dtype"):
        longattn.PagedIndexCache(4, dtype="fp16")


def _torch_batch():
    rng = np.random.default_rng(11)
    lens, dI = [1, 130, 700], 32
    pages, table, keys = make_batch(rng, lens, dI)
    cache = longattn.PagedIndexCache(pages, head_dim=dI, dtype="bf16", max_seqs=len(lens))
    fill(cache, table, keys, rng)
    g = torch.Generator().manual_seed(3)
    T = 2 * len(lens)
    q = torch.randn(T, 4, dI, generator=g)
    w = torch.rand(T, 4, generator=g)
    qs = torch.tensor([2, 0, 1, 1, 0, 2], dtype=torch.int32)
    return cache, torch.from_numpy(table), torch.tensor(lens, dtype=torch.int32), q, w, qs


def _paged_calls(cache, table, cl, q, w, qs):
    return [
        lambda: longattn.dsa_topk_paged(q, w, cache, table, cl, next_n=2, topk=40),
        lambda: longattn.dsa_topk_paged(q, w, cache, table, cl, q_seq=qs, topk=40, return_slots=True),
        lambda: longattn.hisa_topk_paged(q, w, cache, table, cl, next_n=2, topk=40, block_topk=2),
        lambda: longattn.hisa_topk_paged(q, w, cache, table, cl, q_seq=qs, topk=40, block_topk=2,
                                         return_slots=True),
    ]


def test_paged_fast_path_equals_ctypes(monkeypatch):
    """torch inputs take longattn._fastcall (its "*" / "@K:" arguments: the
    cache handle, la_paged_query's views), the first call with some options
    and every later one: the same indices as the ctypes path, which is not
    called."""
    from test_py_common import ctypes_calls, use_path
    from longattn import _tensor
    cache, table, cl, q, w, qs = _torch_batch()
    calls = _paged_calls(cache, table, cl, q, w, qs)
    try:
        use_path("ctypes")
        ref = [f() for f in calls]
        use_path("fastcall")
        if not getattr(_tensor.fastcall_module(), "FIELDS", 0):
            pytest.skip("longattn._fastcall predates struct fields (rebuild: make pyext)")
        seen = ctypes_calls(monkeypatch)
        for _ in range(3):  # the first call records the options, later ones skip their checks
            for f, r in zip(calls, ref):
                assert torch.equal(f(), r)
        assert not [n for n in seen if "paged" in n], seen
    finally:
        _tensor.use_fastcall(True)


@pytest.mark.parametrize("path", ["fastcall", "ctypes"])
def test_paged_errors_after_a_call(path):
    """Once a call with some options went through, bad arguments with the
    same options still raise what they raised before, with the same
    messages on both call paths; the cache is unchanged."""
    from test_py_common import use_path
    from longattn import _tensor
    cache, table, cl, q, w, qs = _torch_batch()
    try:
        use_path(path)
        before = cache.pages()
        for f in (longattn.dsa_topk_paged, longattn.hisa_topk_paged):
            f(q, w, cache, table, cl, next_n=2, topk=40)
            bad = [
                ((q, w, cache, None, cl), TypeError, "block_table is required"),
                ((q, w, cache, table, cl.float()), ValueError, "context_lens"),
                ((q, w, cache, table, torch.tensor([1, -1, 5], dtype=torch.int32)), ValueError,
                 r"context_lens\[1\] = -1 is negative"),
                ((q, w[:, :3], cache, table, cl), ValueError, "w: shape"),
                ((q, w, cache, table[:2], cl), ValueError, "context_lens"),
                ((q, w, cache, table.t(), cl), ValueError, "block_table"),
                ((q[..., :16], w, cache, table, cl), ValueError, "keys of dI=32"),
            ]
            for args, exc, msg in bad:
                with pytest.raises(exc, match=msg):
                    f(*args, next_n=2, topk=40)
            # a numpy w beside torch q: the extension declines, ctypes calls
            ref = f(q, w, cache, table, cl, next_n=2, topk=40)
            assert torch.equal(f(q, w.numpy(), cache, table, cl, next_n=2, topk=40), ref)
            with pytest.raises(ValueError, match="topk"):
                f(q, w, cache, table, cl, next_n=2, topk=0)
            with pytest.raises(ValueError, match="next_n"):
                f(q, w, cache, table, cl, next_n=0, topk=40)
        np.testing.assert_array_equal(cache.pages(), before)
        cache.close()
        with pytest.raises(ValueError, match="closed"):
            longattn.dsa_topk_paged(q, w, cache, table, cl, next_n=2, topk=40)
    finally:
        _tensor.use_fastcall(True)


def test_fastcall_field_entries_are_checked():
    """A malformed "@K:name" entry, or one without a struct holding a
    pointer at K before it, raises TypeError and calls nothing."""
    from test_py_common import fastcall_or_skip
    from longattn import _tensor, _lib
    fastcall_or_skip()
    fc = _tensor.fastcall_module()
    if not getattr(fc, "FIELDS", 0):
        pytest.skip("longattn._fastcall predates struct fields (rebuild: make pyext)")
    fn, n = _tensor._address("la_dsa_topk_paged")
    ctx = _tensor.thread_context()
    p, pq = _lib.la_index_params(), _lib.la_paged_query()
    x = torch.zeros(2, 2)
    codes = _tensor._torch_codes()
    for names in [("q", "w", "*c", "*pq", "@x:bt", "idx"), ("q", "w", "*c", "@0:bt", "*pq", "idx"),
                  ("q", "w", "*c", "*pq", "@4:bt", "idx"), ("q", "w", "*c", "*pq", "@40:bt", "idx")]:
        with pytest.raises(TypeError, match="field entry"):
            fc.call(fn, n, ctx.addr, -1, codes, names, p, x, x, 0, pq, x, x)


def test_serve_sim_cli(tmp_path):
    import json
    import os
    import subprocess
    from test_py_common import BUILD
    exe = os.path.join(ROOT, BUILD, "longattn")
    out = tmp_path / "ss.json"
    r = subprocess.run([exe, "serve-sim", "--batch", "2", "--ctx-start", "300", "--ctx-end", "1200",
                        "--points", "3", "--hi", "4", "--di", "32", "--topk", "64", "--block-topk",
                        "2", "--reps", "1", "--json-out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert [s["context"] for s in res["steps"]] == [300, 600, 1200]
    assert all(s["dsa_ms"] > 0 and s["hisa_ms"] > 0 and 0 <= s["overlap"] <= 1 for s in res["steps"])
    r = subprocess.run([exe, "serve-sim", "--dtype", "fp16"], capture_output=True, text=True)
    assert r.returncode == 2 and "--dtype" in r.stderr
    assert not list(tmp_path.glob("*.tmp.*"))
