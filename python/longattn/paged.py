"""Paged serving: the paged indexer key cache and the batched paged indexers
(wraps la_paged_index_cache and la_{dsa,hisa}_topk_paged; docs/SPARSE.md
"Paged serving").

    >>> cache = longattn.PagedIndexCache(num_pages=64, head_dim=128, max_seqs=4)
    >>> cache.append(k, slot_mapping, seq_ids, positions)   # k [n, 128]
    >>> idx = longattn.hisa_topk_paged(q, w, cache, block_table, context_lens,
    ...                                next_n=1, topk=2048)
    >>> slots = longattn.dsa_topk_paged(..., return_slots=True)
    >>> out, lse = longattn.sparse_attention_paged(q_mla, kv_cache, slots, dv=512)
"""
import ctypes

import numpy as np

from . import _lib as L
from . import _tensor as TT
from ._errors import call, error_from_status
from ._tensor import Call, is_torch, view
from .index_ops import _index_params
from .ops import _CHandle

__all__ = ["PagedIndexCache", "dsa_topk_paged", "hisa_topk_paged", "sparse_attention_paged"]

_DTYPES = {"fp8_e4m3": L.LA_FP8_E4M3, "bf16": L.LA_BF16, "bfloat16": L.LA_BF16,
           "f32": L.LA_F32, "float32": L.LA_F32}
_DEVICES = {"cpu": L.LA_DEVICE_CPU, "cuda": L.LA_DEVICE_CUDA}


class PagedIndexCache(_CHandle):
    """Indexer keys in pages of `page_size` tokens (slot = page·page_size +
    offset). dtype "fp8_e4m3" stores e4m3 values plus a per-token fp32
    scale amax/448 in DeepGEMM's layout (dI + 4 bytes per token); "bf16"
    and "f32" store the values. With max_seqs > 0 the cache also keeps HISA's
    pooled block sums per (sequence, block), fed by appends that name each
    token's sequence and position."""

    _closed_message = "PagedIndexCache: the cache has been closed"

    def __init__(self, num_pages, page_size=64, head_dim=128, dtype="fp8_e4m3", block=128,
                 max_seqs=0, max_seq_len=0, device="cpu"):
        self._handle = None
        self._destroy = L.lib.la_paged_index_cache_destroy
        if dtype not in _DTYPES:
            raise ValueError("PagedIndexCache: dtype %r, expected one of %s"
                             % (dtype, ", ".join(sorted(_DTYPES))))
        dev = str(device).split(":")[0]
        if dev not in _DEVICES:
            raise ValueError("PagedIndexCache: device %r, expected cpu or cuda" % (device,))
        p = L.la_paged_cache_params()
        call("la_paged_cache_params_init", ctypes.byref(p))
        p.num_pages, p.page_size, p.head_dim = int(num_pages), int(page_size), int(head_dim)
        p.dtype, p.block, p.max_seqs = _DTYPES[dtype], int(block), int(max_seqs)
        p.max_seq_len, p.device = int(max_seq_len), _DEVICES[dev]
        h = ctypes.c_void_p()
        call("la_paged_index_cache_create", ctypes.byref(p), ctypes.byref(h))
        self._handle = h
        call("la_paged_index_cache_get_params", h, ctypes.byref(p))
        self.num_pages, self.page_size, self.head_dim = p.num_pages, p.page_size, p.head_dim
        self.dtype, self.block, self.max_seqs = dtype, p.block, p.max_seqs
        self.max_seq_len = p.max_seq_len
        self.device = dev

    def _empty(self, shape):
        if self.device == "cuda":
            import torch
            return torch.empty(shape, dtype=torch.float32, device="cuda")
        return np.empty(shape, dtype=np.float32)

    def append(self, k, slot_mapping, seq_ids=None, positions=None):
        """Write keys k [n, dI] to slot_mapping int32 [n] (-1 skips a token).
        seq_ids and positions int32 [n] (both or neither) feed the pooled
        block sums. A rejected append leaves the cache unchanged."""
        c = Call("PagedIndexCache.append", k)
        c.run("la_paged_index_cache_append", self._live(), c.view(k, "k"),
              c.view(slot_mapping, "slot_mapping"), c.view(seq_ids, "seq_ids", True),
              c.view(positions, "positions", True))
        return self

    def gather(self, block_table, row, length):
        """Dequantized keys float32 [length, dI] of positions [0, length) of
        block_table row `row` (numpy; a torch CUDA tensor for a CUDA cache)."""
        out = self._empty((int(length), self.head_dim))
        bt, o = view(block_table, "block_table"), view(out, "out")
        call("la_paged_index_cache_gather", self._live(), ctypes.byref(bt), int(row), int(length),
             ctypes.byref(o))
        return out

    def pooled(self, seq, length):
        """Pooled block means float32 [ceil(length/block), dI] of sequence
        `seq` over its first `length` positions (numpy; torch CUDA for a CUDA
        cache)."""
        nb = (int(length) + self.block - 1) // self.block
        out = self._empty((nb, self.head_dim))
        o = view(out, "out")
        call("la_paged_index_cache_pooled", self._live(), int(seq), int(length), ctypes.byref(o))
        return out

    def check(self):
        """Raise (LongattnError naming the argument) if a paged indexer call on
        this CUDA cache found a bad block_table / context_lens / q_seq value on
        the device since the last check (waits for the device; clears it). The
        paged calls check those values on the device without a host round
        trip, and a later call raises once the device has finished a bad one
        (docs/SPARSE.md "Paged serving"). Returns the cache; a no-op on the CPU,
        where every value is checked before the call."""
        call("la_paged_index_cache_check", self._live(), None)
        return self

    def pages(self):
        """A copy of the raw page memory, uint8 [num_pages, page_bytes] (CPU caches)."""
        if self.device != "cpu":
            raise ValueError("PagedIndexCache.pages: the pages of a %s cache are device memory "
                             "(use gather())" % self.device)
        data, pb = ctypes.c_void_p(), ctypes.c_size_t(0)
        call("la_paged_index_cache_storage", self._live(), ctypes.byref(data), ctypes.byref(pb))
        n = self.num_pages * pb.value
        buf = (ctypes.c_uint8 * n).from_address(data.value)
        return np.frombuffer(buf, dtype=np.uint8).reshape(self.num_pages, pb.value).copy()


# The paged indexers' C arguments after the params struct, for
# longattn._fastcall (its "*" and "@K:" names): q, w, the cache handle, the
# la_paged_query (a cached template holding next_n and return_slots, copied
# by the extension with the three views written into its fields), idx.
_QUERY = L.la_paged_query
_PAGED_NAMES = ("q", "w", "*cache", "*query", "@%d:block_table" % _QUERY.block_table.offset,
                "@%d:context_lens" % _QUERY.context_lens.offset, "@%d:q_seq?" % _QUERY.q_seq.offset, "idx")
# A call's options (the C function, topk, block, block_topk, next_n with
# their types, return_slots) -> (its la_index_params, its la_paged_query
# template, topk), recorded by a call that passed the full path: a later
# call with the same options skips the option checks, the Call and the
# output's dtype lookup (the per-call host time ahead of the kernels).
_FAST_ARGS = {}


class _Like:
    """What _tensor._cuda_handle reads of a Call."""
    __slots__ = ("op", "torch", "like_index")


def _query_template(next_n, return_slots):
    pq = L.la_paged_query()
    call("la_paged_query_init", ctypes.byref(pq))
    pq.next_n, pq.return_slots = next_n, return_slots
    return pq


def _fast_call(fc, fn, ctx, device, p, q, w, cache, pq, block_table, context_lens, q_seq, idx):
    """One call through longattn._fastcall: True when made (an error status
    raised), False when an argument is not its common case (the caller then
    takes the ctypes path, which raises the argument errors with their
    messages). The C side writes nothing before it accepts the arguments."""
    address, nparams = TT._ADDRESSES.get(fn) or TT._address(fn)
    status = fc.call(address, nparams, ctx.addr, device, TT._TORCH_CODES or TT._torch_codes(),
                     _PAGED_NAMES, p, q, w, cache._live().value, pq, block_table, context_lens, q_seq,
                     idx)
    if status is None:
        return False
    if status:
        raise error_from_status(fn, status)
    return True


def _paged(fn, op, q, w, cache, block_table, context_lens, q_seq, next_n, topk, return_slots,
           block=None, block_topk=None):
    if not isinstance(cache, PagedIndexCache):
        raise TypeError("%s: cache must be a PagedIndexCache" % op)
    key = (fn, type(topk), topk, type(block), block, type(block_topk), block_topk, type(next_n),
           next_n, bool(return_slots))
    try:
        args = _FAST_ARGS.get(key)
    except TypeError:  # an unhashable option: the full path (it raises)
        args = None
    torch = TT._torch()
    fc = TT._FASTCALL[0] if TT._FASTCALL else None
    if args is not None and fc is not None and type(q) is torch.Tensor and getattr(fc, "FIELDS", 0):
        # the common case: a plain torch q and options seen before
        p, pq, k = args
        ctx = TT.thread_context()
        if q.is_cuda:
            like = _Like()
            like.op, like.torch, like.like_index = op, torch, q.get_device()
            device, handle = like.like_index, TT._cuda_handle(like, ctx)
        else:
            device, handle = -1, ctx.prepare(None)
        if handle is not None:  # else another device than the current one: the full path
            idx = q.new_empty((q.shape[0], k), dtype=torch.int32)
            if TT._POISON:
                idx.fill_(-7)
            if _fast_call(fc, fn, ctx, device, p, q, w, cache, pq, block_table, context_lens, q_seq,
                          idx):
                return idx
    c = Call(op, q)
    try:
        p = _index_params(c, topk, block, block_topk)
        pq = _query_template(int(next_n), 1 if return_slots else 0)
        T = q.shape[0]
        idx = c.empty((T, p.topk), "int32")
        fc = TT._FASTCALL[0] if TT._FASTCALL else TT.fastcall_module()
        if fc is not None and c.is_torch and getattr(fc, "FIELDS", 0):
            ctx = c.ctx
            if c.cuda:
                device, handle = c.like_index, TT._cuda_handle(c, ctx)
            else:
                device, handle = -1, ctx.prepare(None)
            if handle is not None and _fast_call(fc, fn, ctx, device, p, q, w, cache, pq, block_table,
                                                 context_lens, q_seq, idx):
                c._release()
                _remember(key, p, pq)
                return idx
    except BaseException:
        c._release()  # a traceback keeps this Call alive: free the slots now
        raise
    pq.block_table = c.view_field(block_table, "block_table")
    pq.context_lens = c.view_field(context_lens, "context_lens")
    pq.q_seq = c.view_field(q_seq, "q_seq", True)
    vi = c.view(idx, "idx")
    c.run(fn, ctypes.byref(p), c.view(q, "q"), c.view(w, "w"), cache._live(), ctypes.byref(pq), vi)
    return idx


def _remember(key, p, pq):
    """Record a call's options for the fast path (topk > 0: its output
    shape then needs no clamping)."""
    if p.topk > 0:
        if len(_FAST_ARGS) >= 256:
            _FAST_ARGS.clear()
        try:
            _FAST_ARGS[key] = (p, pq, p.topk)
        except TypeError:
            pass


def dsa_topk_paged(q, w, cache, block_table, context_lens, q_seq=None, next_n=1, topk=2048,
                   return_slots=False):
    """Batched DSA indexer over a PagedIndexCache.

    q [T, HI, dI], w [T, HI]; block_table int32 [nseq, max_pages] (row s =
    sequence s), context_lens int32 [nseq]; q_seq int32 [T] (each row's
    sequence) or next_n consecutive rows per sequence. Query j of a
    sequence with n query rows sees positions < context_len - n + j + 1.
    Returns idx int32 [T, topk]: positions in the sequence (or cache slots
    page·page_size + offset with return_slots=True), -1 padding; equal to
    dsa_topk on the sequence's gathered keys."""
    return _paged("la_dsa_topk_paged", "dsa_topk_paged", q, w, cache, block_table, context_lens,
                  q_seq, next_n, topk, return_slots)


def hisa_topk_paged(q, w, cache, block_table, context_lens, q_seq=None, next_n=1, topk=2048,
                    block=128, block_topk=64, return_slots=False):
    """Batched HISA indexer over a PagedIndexCache (arguments as
    dsa_topk_paged; block/block_topk as hisa_topk). Uses the cache's pooled
    block sums when it keeps them; equal to hisa_topk on the gathered keys."""
    return _paged("la_hisa_topk_paged", "hisa_topk_paged", q, w, cache, block_table, context_lens,
                  q_seq, next_n, topk, return_slots, block, block_topk)


def _positions_to_slots(op, idx, kv_cache, block_table, q_seq):
    """Slots block_table[q_seq[t], p // page_size]·page_size + p % page_size
    of the positions idx[t, j] (-1 stays -1), as numpy or torch like idx."""
    page_size = int(kv_cache.shape[1])
    if is_torch(idx):
        import torch
        lib, pos = torch, idx.long()
        bt = torch.as_tensor(block_table, device=idx.device).long()
        seq = None if q_seq is None else torch.as_tensor(q_seq, device=idx.device).long()
    else:
        lib, pos = np, np.asarray(idx).astype(np.int64)
        bt = np.asarray(block_table).astype(np.int64)
        seq = None if q_seq is None else np.asarray(q_seq).astype(np.int64)
    if pos.ndim != 2:
        raise ValueError("%s: idx_slots: positions [T, k] expected, got shape %s"
                         % (op, tuple(pos.shape)))
    if bt.ndim != 2:
        raise ValueError("%s: block_table: int32 [nseq, max_pages] expected, got shape %s"
                         % (op, tuple(bt.shape)))
    T, nseq, max_pages = pos.shape[0], bt.shape[0], bt.shape[1]
    if seq is None:
        if nseq != T:
            raise ValueError("%s: q_seq: None maps query row t to sequence t, but block_table "
                             "has %d rows for %d query rows" % (op, nseq, T))
        seq = lib.arange(T) if lib is np else torch.arange(T, device=idx.device)
    if tuple(seq.shape) != (T,):
        raise ValueError("%s: q_seq: shape %s, expected [T] = [%d]" % (op, tuple(seq.shape), T))
    if bool((seq < 0).any()) or bool((seq >= nseq).any()):
        raise ValueError("%s: q_seq: a sequence outside the block table's rows 0..%d"
                         % (op, nseq - 1))
    if bool(((pos < -1) | (pos >= max_pages * page_size)).any()):
        raise ValueError("%s: idx_slots: a position outside -1..%d (block_table [%d, %d] of "
                         "%d-token pages)" % (op, max_pages * page_size - 1, nseq, max_pages,
                                              page_size))
    valid = pos >= 0
    p = lib.where(valid, pos, lib.zeros_like(pos))
    page = bt[seq[:, None], p // page_size]
    num_pages = int(kv_cache.shape[0])
    if bool((valid & ((page < 0) | (page >= num_pages))).any()):
        raise ValueError("%s: block_table: an entry named by a position is outside the cache's "
                         "pages 0..%d" % (op, num_pages - 1))
    slot = lib.where(valid, page * page_size + p % page_size, -lib.ones_like(pos))
    return slot.int() if lib is not np else slot.astype(np.int32)


def sparse_attention_paged(q, kv_cache, idx_slots, dv=512, scale=None, block_table=None,
                           q_seq=None):
    """Sparse MLA decode over a paged latent cache (la_sparse_attention_paged).

    q [T, Hq, Dqk]; kv_cache [num_pages, page_size, Dqk] (one latent kv head,
    float32 or bfloat16 as q, pages contiguous); idx_slots int32 [T, k]:
    cache slots page·page_size + offset, -1 skips (what dsa_topk_paged /
    hisa_topk_paged return with return_slots=True). Returns (out
    [T, Hq, dv] (q's dtype), lse [T, Hq] float32), equal bit for bit to
    sparse_attention on the cache viewed as [num_pages·page_size, Dqk].

    With block_table int32 [nseq, max_pages], idx_slots holds token
    positions instead (-1 skips), mapped to slots here through row
    q_seq[t] of the table (q_seq int32 [T]; None = row t is sequence t).

    Decode only: no autograd (inputs that require grad under autograd are
    refused; use sparse_attention on gathered keys to train)."""
    op = "sparse_attention_paged"
    if is_torch(q):
        import torch
        if torch.is_grad_enabled() and any(is_torch(x) and x.requires_grad for x in (q, kv_cache)):
            raise ValueError("%s: q / kv_cache require grad, but the paged decode has no "
                             "backward (call it under torch.no_grad(), or train with "
                             "sparse_attention)" % op)
    if block_table is not None:
        if not hasattr(kv_cache, "shape") or len(kv_cache.shape) != 3:
            raise ValueError("%s: kv_cache: [num_pages, page_size, Dqk] expected" % op)
        idx_slots = _positions_to_slots(op, idx_slots, kv_cache, block_table, q_seq)
    elif q_seq is not None:
        raise ValueError("%s: q_seq is given without block_table (slots need no mapping)" % op)
    p = L.la_sparse_attn_params()
    call("la_sparse_attn_params_init", ctypes.byref(p))
    p.dv = int(dv)
    p.scale = 0.0 if scale is None else float(scale)
    c = Call(op, q)
    shp = tuple(int(n) for n in getattr(q, "shape", ()))
    T, Hq = shp[:2] if len(shp) == 3 else (1, 1)  # a bad rank is the C call's error
    out, vo = c.out((T, Hq, p.dv), "out")
    lse, vl = c.out((T, Hq), "lse", "float32")
    c.run("la_sparse_attention_paged", ctypes.byref(p), c.view(q, "q"),
          c.view(kv_cache, "kv_cache"), c.view(idx_slots, "idx_slots"), vo, vl)
    return out, lse
