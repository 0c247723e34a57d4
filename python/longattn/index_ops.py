"""The indexers, top-k, the decode-time index cache, sparse attention over
selected keys and the analysis maps of SPEC.md §6–§9 as Python functions.

Conventions as in longattn.ops: numpy arrays or torch tensors in, the same
kind out; the C library validates every shape and its message comes back in
the exception.
"""
import ctypes
from typing import Optional, Tuple, Union

from . import _lib as L
from ._errors import call
from ._tensor import Call, c_float, c_int
from .ops import Array, Dims, _CHandle, _autograd_module, _cached_params, _choice, _dim, _dims
from .ops import _feature, _mhla_params
from .ops import AUTOGRAD, CUSTOM, CUSTOM_OP, _how, install_custom_ops
from ._tensor import _torch

def _route_tracing(*xs):
    """As ops._route, for ops without gradients: only tracing / meta tensors
    go through the custom ops."""
    c = CUSTOM[0]
    if c is None:
        if _torch() is None:
            return None
        c = install_custom_ops()
    return c if c.tracing(*xs) else None


__all__ = ["dsa_topk", "hisa_topk", "blocksparse_topk", "topk", "IndexCache",
           "sparse_attention", "attention_map", "map_rank_entropy"]


# ---------------------------------------------------------------------------
# §6–§7 indexers
# ---------------------------------------------------------------------------
def _index_params(c, topk, block=None, block_topk=None, k_scale=None, q_scale=None):
    """The la_index_params of a call; without scales (no per-call views in
    the struct) one cached struct serves every call with the same options."""
    if k_scale is None and q_scale is None:
        # the types are in the key: 2.0 must still be refused after a call with 2
        key = ("index", c.op, type(topk), topk, type(block), block, type(block_topk), block_topk)
        return _cached_params(key,
                              lambda: _build_index_params(c, topk, block, block_topk))
    return _build_index_params(c, topk, block, block_topk, k_scale, q_scale)


def _build_index_params(c, topk, block=None, block_topk=None, k_scale=None, q_scale=None):
    p = L.la_index_params()
    call("la_index_params_init", ctypes.byref(p))
    p.topk = c_int(topk, c.op + ": topk")
    if block is not None:
        p.block = c_int(block, c.op + ": block")
    if block_topk is not None:
        p.block_topk = c_int(block_topk, c.op + ": block_topk")
    p.k_scale = c.view_field(k_scale, "k_scale", True)
    p.q_scale = c.view_field(q_scale, "q_scale", True)
    return p


def dsa_topk(q: Array, k: Array, w: Array, topk: int = 2048, start: Optional[Array] = None,
             end: Optional[Array] = None, return_scores: bool = False,
             k_scale: Optional[Array] = None,
             q_scale: Optional[Array] = None) -> Union[Array, Tuple[Array, Array]]:
    """DSA indexer (flat scan, SPEC §6): top-k keys per query.

    I(t, s) = Σ_h w[t,h]·ReLU(q[t,h]·k[s]) for s in [start_t, end_t); returns
    idx int32 [T, topk]: descending score, ties to the lower index, -1
    padding. Fold dI**-0.5·HI**-0.5 and quantization scales into w.

    Shapes: q [T, HI, dI], k [L, dI], w [T, HI]; start, end int32 [T]
    (None = causal bottom-right: start 0, end = L - T + t + 1).
    return_scores=True also returns scores float32 [T, L] (-inf outside the
    range). k_scale [L] / q_scale [T, HI]: fp8 e4m3 inputs only (GPU).

    Example:
        >>> q, k, w = torch.randn(64, 8, 32), torch.randn(4096, 32), torch.rand(64, 8)
        >>> idx = longattn.dsa_topk(q, k, w, topk=256)          # [64, 256] int32
    """
    r = _route_tracing(q, k, w)
    if r is not None:
        return r.call_dsa_topk(q, k, w, topk, start, end, return_scores, k_scale, q_scale)
    c = Call("dsa_topk", q)
    p = _index_params(c, topk, None, None, k_scale, q_scale)
    T = _dim(q, 0)
    idx = c.empty((T, p.topk), "int32")
    sc = c.empty((T, _dim(k, 0)), "float32") if return_scores else None
    c.launch("la_dsa_indexer", p, _DSA_ARGS, q, k, w, start, end, idx, sc)
    return (idx, sc) if return_scores else idx


# The names of the tensor arguments of each C call (Call.launch), '?' where
# None is passed as NULL.
_DSA_ARGS = ("q", "k", "w", "start?", "end?", "idx", "scores?")
_HISA_ARGS = ("q", "k", "w", "start?", "end?", "idx")


def hisa_topk(q: Array, k: Array, w: Array, topk: int = 2048, block: int = 128,
              block_topk: int = 64, start: Optional[Array] = None, end: Optional[Array] = None,
              k_scale: Optional[Array] = None, q_scale: Optional[Array] = None) -> Array:
    """HISA indexer (SPEC §7): block filter on pooled keys, then token refine.

    Keys are mean-pooled over blocks of `block` tokens; per query the
    `block_topk` best blocks meeting [start_t, end_t) are kept (the first and
    last always), then the top `topk` tokens inside them as in dsa_topk. When
    the kept blocks are all blocks meeting the range, i.e. block_topk >=
    ceil(end_t/block) - floor(start_t/block) (for block-aligned starts, as in
    causal prefill: block_topk·block >= end_t - start_t), this equals
    dsa_topk exactly (docs/SPARSE.md).

    Shapes: q [T, HI, dI], k [L, dI], w [T, HI], start/end int32 [T] ->
    idx int32 [T, topk].

    Example:
        >>> idx = longattn.hisa_topk(q, k, w, topk=256, block=64, block_topk=8)
    """
    r = _route_tracing(q, k, w)
    if r is not None:
        return r.call_hisa_topk(q, k, w, topk, block, block_topk, start, end, k_scale, q_scale)
    c = Call("hisa_topk", q)
    p = _index_params(c, topk, block, block_topk, k_scale, q_scale)
    idx = c.empty((_dim(q, 0), p.topk), "int32")
    c.launch("la_hisa_indexer", p, _HISA_ARGS, q, k, w, start, end, idx)
    return idx


def blocksparse_topk(q: Array, k: Array, w: Array, topk: int = 2048, block: int = 128,
                     start: Optional[Array] = None, end: Optional[Array] = None,
                     k_scale: Optional[Array] = None, q_scale: Optional[Array] = None) -> Array:
    """Block-sparse baseline indexer (SPEC §7): the same block scores and
    forcing as HISA, keeps the top topk/block blocks and returns all their
    valid tokens.

    Shapes: q [T, HI, dI], k [L, dI], w [T, HI], start/end int32 [T] ->
    idx int32 [T, topk].

    Example:
        >>> idx = longattn.blocksparse_topk(q, k, w, topk=256, block=64)
    """
    r = _route_tracing(q, k, w)
    if r is not None:
        return r.call_blocksparse_topk(q, k, w, topk, block, start, end, k_scale, q_scale)
    c = Call("blocksparse_topk", q)
    p = _index_params(c, topk, block, None, k_scale, q_scale)
    idx = c.empty((_dim(q, 0), p.topk), "int32")
    c.launch("la_blocksparse_indexer", p, _HISA_ARGS, q, k, w, start, end, idx)
    return idx


def topk(scores: Array, k: int) -> Array:
    """Row-wise top-k of scores [R, L] (float32; -inf = masked) -> idx int32
    [R, k]: descending score, ties to the lower index, -1 padding.

    Example:
        >>> idx = longattn.topk(torch.randn(4, 100), 10)
    """
    r = _route_tracing(scores)
    if r is not None:
        return r.call_topk(scores, k)
    c = Call("topk", scores, "scores")
    idx = c.empty((_dim(scores, 0), c_int(k, "topk: k")), "int32")
    c.launch("la_topk", None, _TOPK_ARGS, scores, idx)
    return idx


_TOPK_ARGS = ("scores", "idx")


class IndexCache(_CHandle):
    """Decode-time HISA key cache (wraps la_index_cache, SPEC §7): keeps the
    keys and their pooled block means incrementally.

    IndexCache(dim, capacity, block=128): dim = dI, capacity = most tokens.

    Example:
        >>> cache = longattn.IndexCache(32, capacity=8192, block=64)
        >>> cache.append(k)                        # k [n, 32] float32
        >>> idx = cache.hisa(q, w, topk=256, block_topk=8)   # as hisa_topk(q, k, w, ...)
    """

    _closed_message = "IndexCache: the cache has been closed"

    def __init__(self, dim, capacity, block=128):
        self._handle = None
        self._destroy = L.lib.la_index_cache_destroy
        self.dim = c_int(dim, "IndexCache: dim")
        self.capacity = c_int(capacity, "IndexCache: capacity")
        self.block = c_int(block, "IndexCache: block")
        h = ctypes.c_void_p()
        call("la_index_cache_create", self.dim, self.block, self.capacity, ctypes.byref(h))
        self._handle = h


    def append(self, k: Array) -> "IndexCache":
        """Append keys k [n, dI] (CPU) at the end."""
        from ._tensor import view
        t = view(k, "k")
        call("la_index_cache_append", self._live(), ctypes.byref(t))
        return self

    @property
    def length(self) -> int:
        n = ctypes.c_int64(0)
        call("la_index_cache_length", self._live(), ctypes.byref(n))
        return n.value

    def __len__(self):
        return self.length

    def hisa(self, q: Array, w: Array, topk: int = 2048, block_topk: int = 64,
             start: Optional[Array] = None, end: Optional[Array] = None) -> Array:
        """HISA selection over the cached keys: q [T, HI, dI], w [T, HI],
        start/end int32 [T] (None = causal bottom-right) -> idx int32
        [T, topk]; equals hisa_topk on the same keys."""
        h = self._live()
        c = Call("IndexCache.hisa", q)
        p = _index_params(c, topk, self.block, block_topk)
        idx, vi = c.out((_dim(q, 0), p.topk), "idx", "int32")
        c.run("la_index_cache_hisa", h, ctypes.byref(p), c.view(q, "q"), c.view(w, "w"),
              c.view(start, "start", True), c.view(end, "end", True), vi)
        return idx



# ---------------------------------------------------------------------------
# §8 sparse attention
# ---------------------------------------------------------------------------
def sparse_attention(q: Array, kv: Array, idx: Array, dv: int = 512,
                     scale: Optional[float] = None) -> Tuple[Array, Array]:
    """Sparse attention over selected keys (Sparse MLA, MQA mode; SPEC §8).

    o[t,h] = Σ_{s in idx[t]} softmax_s(scale·q[t,h]·kv[s])·kv[s][:dv]; indices
    -1 or >= L are skipped; a row with no valid index gives o = 0, lse = -inf.

    Shapes: q [T, Hq, Dqk], kv [L, Dqk] or [L, Hkv, Dqk] (head h uses kv
    head h·Hkv/Hq), idx int32 [T, k] -> (out [T, Hq, dv] (q's dtype),
    lse [T, Hq] float32). scale None = Dqk**-0.5.

    Example:
        >>> q, kv = torch.randn(16, 8, 576), torch.randn(4096, 576)
        >>> idx = longattn.dsa_topk(qi, ki, w, topk=256)
        >>> out, lse = longattn.sparse_attention(q, kv, idx, dv=512)
    """
    how = _how(q, kv)
    if how == CUSTOM_OP:
        return CUSTOM[0].call_sparse_attention(q, kv, idx, dv, scale)
    if how == AUTOGRAD:
        return _autograd_module().sparse_attention(q, kv, idx, dv, scale)
    return _sparse_attention(q, kv, idx, dv, scale)


def _sparse_params(dv, scale):
    p = L.la_sparse_attn_params()
    call("la_sparse_attn_params_init", ctypes.byref(p))
    p.dv = c_int(dv, "sparse_attention: dv")
    p.scale = 0.0 if scale is None else c_float(scale, "sparse_attention: scale")
    return p


def _sparse_attention(q, kv, idx, dv=512, scale=None):
    p = _cached_params(("sparse", type(dv), dv, scale), lambda: _sparse_params(dv, scale))
    c = Call("sparse_attention", q)
    T, Hq = _dim(q, 0), _dim(q, 1)
    out = c.empty((T, Hq, p.dv))
    lse = c.empty((T, Hq), "float32")
    c.launch("la_sparse_attention", p, _SPARSE_ARGS, q, kv, idx, out, lse)
    return out, lse


_SPARSE_ARGS = ("q", "kv", "idx", "out", "lse")


# ---------------------------------------------------------------------------
# §9 analysis
# ---------------------------------------------------------------------------
_MAP_DEFAULT_FEATURE = {"linear": "relu", "mhla": "relu_eps"}


def attention_map(q: Array, k: Array, variant: str = "softmax", feature: Optional[str] = None,
                  scale: Optional[float] = None, mixing: Optional[Array] = None,
                  grid: Optional[Dims] = None, blocks: Optional[Dims] = None,
                  map: Optional[Dims] = None, p: float = 3.0,
                  softplus_param: Optional[Array] = None,
                  rtol: float = 1e-6) -> Tuple[Array, int, float]:
    """Explicit N×N attention weights of one head, with rank and entropy
    (SPEC §9).

    variant: softmax | linear | mhla | focused_flatten | focused_blog
    ("focused-flatten" spelling accepted). q, k [N, D]; mixing [M, M] and
    grid/blocks for mhla; map (Hm, Wm) and p, softplus_param [D] for the
    focused variants. feature: None = the operator's default (linear relu,
    mhla relu_eps). scale: softmax None = D**-0.5; linear/mhla scale_q.
    Returns (A [N, N] (float64 if q is float64 else float32; rows sum to
    1), rank (int: #σ > rtol·σ1, float64 SVD), entropy (float: mean row
    entropy)).

    Example:
        >>> q, k = torch.randn(256, 32), torch.randn(256, 32)
        >>> A, rank, H = longattn.attention_map(q, k, variant="linear")
    """
    prm = L.la_attn_map_params()
    call("la_attn_map_params_init", ctypes.byref(prm))
    var = str(variant).replace("-", "_")
    prm.variant = _choice(var, L.MAP_VARIANTS, "attention_map: variant")
    if feature is None:
        feature = _MAP_DEFAULT_FEATURE.get(var)
    if feature is not None:
        prm.feature = _feature(feature)
    if scale is not None:
        prm.scale = c_float(scale, "attention_map: scale")
    if var == "mhla":
        prm.mhla = _mhla_params(grid, blocks, mixing, feature, None, None, scale,
                                "attention_map")
    if var.startswith("focused"):
        if map is None:
            raise ValueError("attention_map: map=(Hm, Wm) is required for %s" % variant)
        hw = _dims(map, "attention_map: map")
        if len(hw) != 2:
            raise ValueError("attention_map: map %r must be (Hm, Wm)" % (map,))
        prm.focused.map_h, prm.focused.map_w = hw
        prm.focused.p = c_float(p, "attention_map: p")
        prm.focused.variant = 0 if var == "focused_flatten" else 1
    c = Call("attention_map", q)
    N = _dim(q, 0)
    dt = "float64" if str(q.dtype).endswith("float64") else "float32"
    A, va = c.out((N, N), "out", dt)
    c.run("la_attention_map", ctypes.byref(prm), c.view(q, "q"), c.view(k, "k"),
          c.view(mixing, "mixing", True), c.view(softplus_param, "softplus_param", True), va)
    rank, ent = map_rank_entropy(A, rtol)
    return A, rank, ent


def map_rank_entropy(A: Array, rtol: float = 1e-6) -> Tuple[int, float]:
    """Numerical rank (#σ > rtol·σ1, float64 SVD) and mean row entropy of an
    attention map A [N, N] (CPU, float32/float64).

    Example:
        >>> rank, ent = longattn.map_rank_entropy(np.eye(8))   # (8, 0.0)
    """
    from ._tensor import view
    t = view(A, "map")
    r = ctypes.c_int64(0)
    e = ctypes.c_double(0)
    call("la_map_rank_entropy", ctypes.byref(t), float(rtol), ctypes.byref(r), ctypes.byref(e))
    return int(r.value), float(e.value)
