"""The operators of SPEC.md as Python functions (flash-attn / fla style).

Inputs are numpy arrays or torch tensors in the [B, N, H, D] layout (any
strides: a [B, H, N, D] tensor passed as `x.transpose(1, 2)` works without a
copy). Outputs are new arrays of the same kind, on the same device, with the
dtype of the first input (indices int32; lse, states and scores float32).
The C library validates every shape; its message comes back in the
exception (ValueError for arguments/shapes/dtypes, RuntimeError otherwise).
"""
import ctypes

import numpy as np

from . import _lib as L
from ._errors import call
from ._tensor import Call, c_float, c_int, is_array, is_torch, _torch

__all__ = [
    "softmax_attention", "linear_attention", "mhla", "mhla_causal", "mhla_init",
    "mhla_project", "MHLADecoder", "focused_attention", "dsa_topk", "hisa_topk",
    "blocksparse_topk", "topk", "IndexCache", "sparse_attention", "attention_map",
    "map_rank_entropy",
]


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def _dim(x, axis, default=1):
    """x.shape[axis] when x has that axis, else `default` (the C library then
    reports the rank error with its own message)."""
    try:
        shape = tuple(x.shape)
    except AttributeError:
        return default
    return int(shape[axis]) if 0 <= axis < len(shape) else default


def _choice(value, table, what):
    key = str(value).replace("-", "_")
    if key not in table:
        raise ValueError("%s: %r is not one of %s" % (what, value, ", ".join(sorted(table))))
    return table[key]


def _feature(name):
    f = ctypes.c_int(0)
    call("la_feature_from_name", str(name).encode(), ctypes.byref(f))
    return f.value


def _dims(value, what):
    """4 -> (4,), "4x4" -> (4, 4), (3, 5, 10) -> (3, 5, 10)."""
    if isinstance(value, str):
        try:
            dims = tuple(int(s) for s in value.lower().split("x"))
            dims = tuple(c_int(d, what) for d in dims)
        except ValueError:
            raise ValueError("%s: %r is not of the form N, HxW or TxHxW" % (what, value)) from None
    elif isinstance(value, (int, np.integer)):
        dims = (c_int(value, what),)
    elif isinstance(value, (tuple, list)):
        dims = tuple(c_int(s, "%s[%d]" % (what, i)) for i, s in enumerate(value))
    else:
        dims = (c_int(value, what),)
    if not 1 <= len(dims) <= 3:
        raise ValueError("%s: %r must have 1, 2 or 3 dims" % (what, value))
    return dims


def _needs_autograd(*xs):
    torch = _torch()
    if torch is None or not torch.is_grad_enabled():
        return False
    return any(is_torch(x) and x.requires_grad for x in xs)


def _autograd(fn_name, impl, options, *inputs):
    from . import autograd
    return autograd.apply(fn_name, impl, options, *inputs)


# ---------------------------------------------------------------------------
# §1 softmax attention
# ---------------------------------------------------------------------------
def softmax_attention(q, k, v, causal=False, scale=None, return_lse=False):
    """Softmax attention O = softmax(scale·QKᵀ + mask)·V (SPEC §1).

    Shapes: q [B, Nq, H, D], k [B, Nk, Hk, D], v [B, Nk, Hk, Dv] with
    H % Hk == 0 (grouped-query attention). Returns out [B, Nq, H, Dv] (q's
    dtype and device) and, with return_lse=True, also lse [B, Nq, H]
    (float32, natural log).

    causal: query t sees keys s <= t + (Nk - Nq) (bottom-right aligned, as
    flash-attn). scale: None = D**-0.5.

    Example:
        >>> q = k = v = torch.randn(2, 128, 4, 64)
        >>> o = longattn.softmax_attention(q, k, v, causal=True)
        >>> o, lse = longattn.softmax_attention(q, k, v, return_lse=True)
    """
    opts = dict(causal=causal, scale=scale, return_lse=return_lse)
    if _needs_autograd(q, k, v):
        return _autograd("softmax_attention", _softmax_attention, opts, q, k, v)
    return _softmax_attention(q, k, v, **opts)


def _softmax_attention(q, k, v, causal=False, scale=None, return_lse=False):
    p = L.la_softmax_params()
    call("la_softmax_params_init", ctypes.byref(p))
    p.causal = int(bool(causal))
    p.scale = 0.0 if scale is None else c_float(scale, "softmax_attention: scale")
    c = Call("softmax_attention", q)
    B, Nq, H, Dv = _dim(q, 0), _dim(q, 1), _dim(q, 2), _dim(v, 3)
    out, vo = c.out((B, Nq, H, Dv), "out")
    lse, vl = c.out((B, Nq, H), "lse", "float32") if return_lse else (None, None)
    c.run("la_softmax_attention", ctypes.byref(p), c.view(q, "q"), c.view(k, "k"),
          c.view(v, "v"), vo, vl)
    return (out, lse) if return_lse else out


# ---------------------------------------------------------------------------
# §3 linear attention
# ---------------------------------------------------------------------------
def linear_attention(q, k, v, feature="relu", causal=False, normalize=True, eps=1e-6,
                     scale=1.0, chunk=64, initial_state=None, output_final_state=False):
    """Linear attention with feature map φ (SPEC §3).

    q̃ = scale·φ(q), k̃ = φ(k); S = Σ_j k̃_j v_jᵀ, z = Σ_j k̃_j (over j <= t when
    causal); o_t = q̃_tᵀS / (q̃_tᵀz + eps) when normalize, else q̃_tᵀS.

    Shapes: q, k [B, N, H, D], v [B, N, H, Dv] -> out [B, N, H, Dv].
    feature: identity | relu | relu_eps | relu1 | elu1. chunk: causal chunk
    size. Causal only: initial_state = (S [B, H, D, Dv], z [B, H, D]) float32
    (None = zeros); output_final_state=True returns (out, (S, z)) with the
    state after the last token, so a sequence split in two parts gives the
    same outputs as one pass.

    Example:
        >>> q, k = torch.randn(1, 1000, 8, 64), torch.randn(1, 1000, 8, 64)
        >>> v = torch.randn(1, 1000, 8, 32)
        >>> o = longattn.linear_attention(q, k, v, feature="elu1")
        >>> o1, st = longattn.linear_attention(q[:, :500], k[:, :500], v[:, :500],
        ...                                    causal=True, output_final_state=True)
        >>> o2 = longattn.linear_attention(q[:, 500:], k[:, 500:], v[:, 500:],
        ...                                causal=True, initial_state=st)
    """
    opts = dict(feature=feature, causal=causal, normalize=normalize, eps=eps, scale=scale,
                chunk=chunk, output_final_state=output_final_state)
    S0, z0 = (None, None) if initial_state is None else tuple(initial_state)
    if _needs_autograd(q, k, v, S0, z0):
        return _autograd("linear_attention", _linear_attention, opts, q, k, v, S0, z0)
    return _linear_attention(q, k, v, S0, z0, **opts)


def _linear_attention(q, k, v, S0=None, z0=None, feature="relu", causal=False,
                      normalize=True, eps=1e-6, scale=1.0, chunk=64,
                      output_final_state=False):
    p = L.la_linear_params()
    call("la_linear_params_init", ctypes.byref(p))
    p.feature = _feature(feature)
    p.causal = int(bool(causal))
    p.normalize = int(bool(normalize))
    p.eps = c_float(eps, "linear_attention: eps")
    p.scale_q = c_float(scale, "linear_attention: scale")
    p.chunk = c_int(chunk, "linear_attention: chunk")
    c = Call("linear_attention", q)
    B, N, H, D, Dv = _dim(q, 0), _dim(q, 1), _dim(q, 2), _dim(q, 3), _dim(v, 3)
    out, vo = c.out((B, N, H, Dv), "out")
    if output_final_state:
        S1, vS = c.out((B, H, D, Dv), "S_out", "float32")
        z1, vz = c.out((B, H, D), "z_out", "float32")
    else:
        S1 = z1 = vS = vz = None
    c.run("la_linear_attention", ctypes.byref(p), c.view(q, "q"), c.view(k, "k"),
          c.view(v, "v"), vo, c.view(S0, "S_in", True), c.view(z0, "z_in", True), vS, vz)
    return (out, (S1, z1)) if output_final_state else out


# ---------------------------------------------------------------------------
# §4 focused linear attention
# ---------------------------------------------------------------------------
def focused_attention(q, k, v, variant="flatten", map=None, conv=None, conv_bias=None,
                      softplus_param=None, p=3.0, focus=None, eps=1e-6):
    """Focused linear attention over an Hm×Wm token map (SPEC §4).

    Shapes: q, k, v [B, N, H, D] with N = Hm·Wm (raster order) -> out
    [B, N, H, D] (v may have Dv != D for flatten when conv is None).
    map: (Hm, Wm) or "HmxWm", required.
    variant "flatten" (FLatten Transformer): conv [D, k, k] depthwise kernel
      over v shared by heads (odd k), conv_bias [D], softplus_param [H·D]
      (default zeros), p focusing factor (default 3); focus ignored.
    variant "blog": conv [H·D, k, k] over φ(K) (odd k, no bias; None =
      identity), focus [H] (default 2.0); conv_bias/softplus_param ignored.

    Example:
        >>> q = k = v = torch.randn(2, 14 * 14, 4, 32)
        >>> w = torch.randn(32, 5, 5) * 0.1
        >>> o = longattn.focused_attention(q, k, v, map=(14, 14), conv=w)
    """
    opts = dict(variant=variant, map=map, p=p, eps=eps)
    args = (q, k, v, conv, conv_bias, softplus_param, focus)
    if _needs_autograd(*args):
        return _autograd("focused_attention", _focused_attention, opts, *args)
    return _focused_attention(*args, **opts)


def _focused_attention(q, k, v, conv=None, conv_bias=None, softplus_param=None, focus=None,
                       variant="flatten", map=None, p=3.0, eps=1e-6):
    # map None: the library answers that the map is required
    hw = (0, 0) if map is None else _dims(map, "focused_attention: map")
    if len(hw) != 2:
        raise ValueError("focused_attention: map %r must be (Hm, Wm)" % (map,))
    prm = L.la_focused_params()
    call("la_focused_params_init", ctypes.byref(prm))
    prm.variant = _choice(variant, L.FOCUSED_VARIANTS, "focused_attention: variant")
    prm.map_h, prm.map_w = hw
    prm.p = c_float(p, "focused_attention: p")
    prm.eps = c_float(eps, "focused_attention: eps")
    c = Call("focused_attention", q)
    out, vo = c.out((_dim(q, 0), _dim(q, 1), _dim(q, 2), _dim(v, 3)), "out")
    c.run("la_focused_attention", ctypes.byref(prm), c.view(q, "q"), c.view(k, "k"),
          c.view(v, "v"), c.view(conv, "conv", True), c.view(conv_bias, "conv_bias", True),
          c.view(softplus_param, "softplus_param", True), c.view(focus, "focus", True), vo)
    return out


# ---------------------------------------------------------------------------
# §5 MHLA
# ---------------------------------------------------------------------------
def _mhla_params(grid, blocks, mixing, feature, normalize, eps, scale, what):
    p = L.la_mhla_params()
    call("la_mhla_params_init", ctypes.byref(p))
    if blocks is None:
        if grid is not None and len(_dims(grid, what + ": grid")) != 1:
            raise ValueError("%s: blocks is required for a %d-D grid"
                             % (what, len(_dims(grid, what + ": grid"))))
        if mixing is None:
            raise ValueError("%s: blocks is required" % what)
        if not is_array(mixing):
            raise TypeError("%s: mixing: expected a numpy.ndarray or torch.Tensor, got %s"
                            % (what, type(mixing).__name__))
        blocks = (_dim(mixing, mixing.ndim - 1),)
    b = _dims(blocks, what + ": blocks")
    g = (0,) if grid is None else _dims(grid, what + ": grid")
    if len(g) != len(b):
        raise ValueError("%s: grid %r and blocks %r must have the same rank"
                         % (what, grid, blocks))
    p.grid_ndim = len(g)
    for i in range(3):
        p.grid[i] = g[i] if i < len(g) else 0
        p.blocks[i] = b[i] if i < len(b) else 0
    if feature is not None:
        p.feature = _feature(feature)
    if normalize is not None:
        p.normalize = _choice(normalize, L.MHLA_NORMALIZE, what + ": normalize")
    if eps is not None:
        p.eps = c_float(eps, what + ": eps")
    if scale is not None:
        p.scale_q = c_float(scale, what + ": scale")
    return p


def mhla(q, k, v, mixing, grid=None, blocks=None, feature="relu_eps", normalize="per_query",
         eps=1e-6, scale=1.0):
    """Multi-head linear attention over token blocks (SPEC §5.1–5.2).

    Tokens lie on a grid (N), (Hm, Wm) or (T, Hm, Wm) in raster order, cut
    into a block grid `blocks` of the same rank (M blocks; sizes need not
    divide). Block summaries S_b = Σ k̃ vᵀ, z_b = Σ k̃ are mixed by
    mixing W: S̃_i = Σ_b W[i,b] S_b, and token t of block i gets
    o_t = q̃_tᵀS̃_i / (q̃_tᵀz̃_i + eps) (normalize="per_query"), q̃_tᵀS̃_i
    ("none") or the released vision code's form ("released_vision").

    Shapes: q, k [B, N, H, D], v [B, N, H, Dv], mixing [M, M] or [H, M, M]
    (float32) -> out [B, N, H, Dv].
    grid: None = 1-D (N); int, tuple or "HxW" / "TxHxW". blocks: same rank
    as grid (None with a 1-D grid = M from mixing). feature: φ (default
    relu_eps); scale multiplies φ(q).

    Example:
        >>> q = k = v = torch.randn(1, 256, 4, 32)
        >>> W = longattn.mhla_init((4, 4))          # [16, 16] locality init
        >>> o = longattn.mhla(q, k, v, torch.from_numpy(W), grid=(16, 16), blocks=(4, 4))
    """
    opts = dict(grid=grid, blocks=blocks, feature=feature, normalize=normalize, eps=eps,
                scale=scale)
    if _needs_autograd(q, k, v, mixing):
        return _autograd("mhla", _mhla, opts, q, k, v, mixing)
    return _mhla(q, k, v, mixing, **opts)


def _mhla(q, k, v, mixing, grid=None, blocks=None, feature="relu_eps", normalize="per_query",
          eps=1e-6, scale=1.0):
    p = _mhla_params(grid, blocks, mixing, feature, normalize, eps, scale, "mhla")
    c = Call("mhla", q)
    out, vo = c.out((_dim(q, 0), _dim(q, 1), _dim(q, 2), _dim(v, 3)), "out")
    c.run("la_mhla_forward", ctypes.byref(p), c.view(q, "q"), c.view(k, "k"), c.view(v, "v"),
          c.view(mixing, "mixing"), vo)
    return out


def _mhla_causal_params(chunk, feature, normalize, eps, scale):
    p = L.la_mhla_causal_params()
    call("la_mhla_causal_params_init", ctypes.byref(p))
    p.chunk = c_int(chunk, "mhla_causal: chunk")
    p.feature = _feature(feature)
    p.normalize = _choice(normalize, L.MHLA_NORMALIZE, "mhla_causal: normalize")
    p.eps = c_float(eps, "mhla_causal: eps")
    p.scale_q = 0.0 if scale is None else c_float(scale, "mhla_causal: scale")
    return p


def mhla_causal(q, k, v, mixing, chunk=64, feature="relu", normalize="none", eps=1e-6,
                scale=None):
    """Causal MHLA over chunks of `chunk` tokens (SPEC §5.4).

    Token t in chunk i: o_t = q̃_tᵀ[Σ_{b<i} W[i,b] S_b + W[i,i] Σ_{j in i, j<=t}
    k̃_j v_jᵀ] (normalize="none"); "per_query" adds the same mixture of z in
    a denominator (+ eps). Entries of W above the diagonal are ignored.

    Shapes: q, k [B, N, H, D], v [B, N, H, Dv], mixing [M, M] or [H, M, M]
    (float32, M >= ceil(N / chunk)) -> out [B, N, H, Dv].
    feature default relu; scale None = D**-0.5.

    Example:
        >>> q = k = v = torch.randn(1, 1000, 4, 64)
        >>> W = torch.from_numpy(longattn.mhla_init(16, kind="uniform_causal"))
        >>> o = longattn.mhla_causal(q, k, v, W, chunk=64)
    """
    opts = dict(chunk=chunk, feature=feature, normalize=normalize, eps=eps, scale=scale)
    if _needs_autograd(q, k, v, mixing):
        return _autograd("mhla_causal", _mhla_causal, opts, q, k, v, mixing)
    return _mhla_causal(q, k, v, mixing, **opts)


def _mhla_causal(q, k, v, mixing, chunk=64, feature="relu", normalize="none", eps=1e-6,
                 scale=None):
    p = _mhla_causal_params(chunk, feature, normalize, eps, scale)
    c = Call("mhla_causal", q)
    out, vo = c.out((_dim(q, 0), _dim(q, 1), _dim(q, 2), _dim(v, 3)), "out")
    c.run("la_mhla_causal_forward", ctypes.byref(p), c.view(q, "q"), c.view(k, "k"),
          c.view(v, "v"), c.view(mixing, "mixing"), vo)
    return out


def mhla_init(blocks, kind="locality", like=None):
    """Mixing-matrix initializer W (SPEC §5.3), float32 [M, M], M = Π blocks.

    kind: "locality" (paper: rows ∝ 1 - dist/max row dist, rows sum to 1),
    "locality_global" (released code: columns sum to 1) or "uniform_causal"
    (W[i,j] = 1/(i+1) for j <= i; blocks is then M).
    blocks: int, tuple or "HxW". Returns a numpy array, or a torch tensor on
    like's device when `like` is a torch tensor.

    Example:
        >>> W = longattn.mhla_init((3, 5, 10))            # [150, 150]
        >>> Wc = longattn.mhla_init(32, "uniform_causal")  # [32, 32]
    """
    b = _dims(blocks, "mhla_init: blocks")
    k = _choice(kind, L.MHLA_INIT_KINDS, "mhla_init: kind")
    M = 1
    for d in b:
        M *= d
    c_int(M * M, "mhla_init: blocks %r gives M*M entries, which" % (b,))
    out = np.empty((M, M), dtype=np.float32)
    from ._tensor import view
    t = view(out, "out")
    arr = (ctypes.c_int64 * len(b))(*b)
    call("la_mhla_init", k, len(b), arr, ctypes.byref(t))
    if like is not None and is_torch(like):
        return _torch().from_numpy(out).to(like.device)
    return out


def mhla_project(mixing, causal=False):
    """Training-time projection of W, in place: clamp to [1e-5, 1]; causal
    also zeroes the upper triangle (j > i). mixing: float32 [M, M] or
    [H, M, M] (CPU). Returns mixing.

    Example:
        >>> W = torch.randn(16, 16)
        >>> longattn.mhla_project(W, causal=True)
    """
    from ._tensor import view
    t = view(mixing, "mixing")
    call("la_mhla_project", ctypes.byref(t), int(bool(causal)))
    return mixing


class _CHandle:
    """Owner of one C state object: close() (or the with-block, or garbage
    collection) frees it through self._destroy; _live() refuses a closed one."""

    _handle = None
    _closed_message = "the state has been closed"

    def _live(self):
        if not self._handle:
            raise ValueError(self._closed_message)
        return self._handle

    def close(self):
        """Free the C state now (also done when the object is collected)."""
        h, self._handle = self._handle, None
        if h:
            self._destroy(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class MHLADecoder(_CHandle):
    """Decoding state of causal MHLA (wraps la_mhla_state, SPEC §5.4).

    Holds every finished block's summary plus the open block; append()
    feeds tokens one after another and returns their outputs, equal to
    mhla_causal over the whole sequence.

    MHLADecoder(mixing, batch, heads, head_dim, value_dim=None, chunk=64,
                feature="relu", normalize="none", eps=1e-6, scale=None)
    mixing [M, M] or [H, M, M] float32 is copied; M blocks of `chunk` tokens
    bound the sequence length.

    Example:
        >>> W = longattn.mhla_init(16, "uniform_causal")
        >>> dec = longattn.MHLADecoder(W, batch=1, heads=4, head_dim=64)
        >>> for t in range(100):
        ...     o_t = dec.append(q[:, t:t+1], k[:, t:t+1], v[:, t:t+1])  # [1, 1, 4, 64]
        >>> len(dec)
        100
    """

    _closed_message = "MHLADecoder: the state has been closed"

    def __init__(self, mixing, batch, heads, head_dim, value_dim=None, chunk=64,
                 feature="relu", normalize="none", eps=1e-6, scale=None):
        from ._tensor import view
        self._handle = None
        self._destroy = L.lib.la_mhla_state_destroy
        p = _mhla_causal_params(chunk, feature, normalize, eps, scale)
        self.batch = c_int(batch, "MHLADecoder: batch")
        self.heads = c_int(heads, "MHLADecoder: heads")
        self.head_dim = c_int(head_dim, "MHLADecoder: head_dim")
        self.value_dim = (self.head_dim if value_dim is None
                          else c_int(value_dim, "MHLADecoder: value_dim"))
        t = view(mixing, "mixing")
        h = ctypes.c_void_p()
        call("la_mhla_state_create", ctypes.byref(p), self.batch, self.heads, self.head_dim,
             self.value_dim, ctypes.byref(t), ctypes.byref(h))
        self._handle = h


    def append(self, q, k, v):
        """Append n tokens: q, k [B, n, H, D], v [B, n, H, Dv] -> out [B, n, H, Dv]."""
        h = self._live()
        c = Call("MHLADecoder.append", q)
        out, vo = c.out((_dim(q, 0), _dim(q, 1), _dim(q, 2), _dim(v, 3)), "out")
        c.run("la_mhla_state_append", h, c.view(q, "q"), c.view(k, "k"), c.view(v, "v"), vo)
        return out

    @property
    def length(self):
        """Tokens appended so far."""
        n = ctypes.c_int64(0)
        call("la_mhla_state_length", self._live(), ctypes.byref(n))
        return n.value

    def __len__(self):
        return self.length



# ---------------------------------------------------------------------------
# §6–§7 indexers
# ---------------------------------------------------------------------------
def _index_params(c, topk, block=None, block_topk=None, k_scale=None, q_scale=None):
    p = L.la_index_params()
    call("la_index_params_init", ctypes.byref(p))
    p.topk = c_int(topk, c.op + ": topk")
    if block is not None:
        p.block = c_int(block, c.op + ": block")
    if block_topk is not None:
        p.block_topk = c_int(block_topk, c.op + ": block_topk")
    p.k_scale = c.view(k_scale, "k_scale", True)
    p.q_scale = c.view(q_scale, "q_scale", True)
    return p


def dsa_topk(q, k, w, topk=2048, start=None, end=None, return_scores=False, k_scale=None,
             q_scale=None):
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
    c = Call("dsa_topk", q)
    p = _index_params(c, topk, k_scale=k_scale, q_scale=q_scale)
    T, Lk = _dim(q, 0), _dim(k, 0)
    idx, vi = c.out((T, p.topk), "idx", "int32")
    sc, vs = c.out((T, Lk), "scores", "float32") if return_scores else (None, None)
    c.run("la_dsa_indexer", ctypes.byref(p), c.view(q, "q"), c.view(k, "k"), c.view(w, "w"),
          c.view(start, "start", True), c.view(end, "end", True), vi, vs)
    return (idx, sc) if return_scores else idx


def hisa_topk(q, k, w, topk=2048, block=128, block_topk=64, start=None, end=None,
              k_scale=None, q_scale=None):
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
    c = Call("hisa_topk", q)
    p = _index_params(c, topk, block, block_topk, k_scale, q_scale)
    idx, vi = c.out((_dim(q, 0), p.topk), "idx", "int32")
    c.run("la_hisa_indexer", ctypes.byref(p), c.view(q, "q"), c.view(k, "k"), c.view(w, "w"),
          c.view(start, "start", True), c.view(end, "end", True), vi)
    return idx


def blocksparse_topk(q, k, w, topk=2048, block=128, start=None, end=None, k_scale=None,
                     q_scale=None):
    """Block-sparse baseline indexer (SPEC §7): the same block scores and
    forcing as HISA, keeps the top topk/block blocks and returns all their
    valid tokens.

    Shapes: q [T, HI, dI], k [L, dI], w [T, HI], start/end int32 [T] ->
    idx int32 [T, topk].

    Example:
        >>> idx = longattn.blocksparse_topk(q, k, w, topk=256, block=64)
    """
    c = Call("blocksparse_topk", q)
    p = _index_params(c, topk, block, None, k_scale, q_scale)
    idx, vi = c.out((_dim(q, 0), p.topk), "idx", "int32")
    c.run("la_blocksparse_indexer", ctypes.byref(p), c.view(q, "q"), c.view(k, "k"),
          c.view(w, "w"), c.view(start, "start", True), c.view(end, "end", True), vi)
    return idx


def topk(scores, k):
    """Row-wise top-k of scores [R, L] (float32; -inf = masked) -> idx int32
    [R, k]: descending score, ties to the lower index, -1 padding.

    Example:
        >>> idx = longattn.topk(torch.randn(4, 100), 10)
    """
    c = Call("topk", scores, "scores")
    idx, vi = c.out((_dim(scores, 0), c_int(k, "topk: k")), "idx", "int32")
    c.run("la_topk", c.view(scores, "scores"), vi)
    return idx


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


    def append(self, k):
        """Append keys k [n, dI] (CPU) at the end."""
        from ._tensor import view
        t = view(k, "k")
        call("la_index_cache_append", self._live(), ctypes.byref(t))
        return self

    @property
    def length(self):
        n = ctypes.c_int64(0)
        call("la_index_cache_length", self._live(), ctypes.byref(n))
        return n.value

    def __len__(self):
        return self.length

    def hisa(self, q, w, topk=2048, block_topk=64, start=None, end=None):
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
def sparse_attention(q, kv, idx, dv=512, scale=None):
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
    opts = dict(dv=dv, scale=scale)
    if _needs_autograd(q, kv):
        return _autograd("sparse_attention", _sparse_attention, opts, q, kv, idx)
    return _sparse_attention(q, kv, idx, **opts)


def _sparse_attention(q, kv, idx, dv=512, scale=None):
    p = L.la_sparse_attn_params()
    call("la_sparse_attn_params_init", ctypes.byref(p))
    p.dv = c_int(dv, "sparse_attention: dv")
    p.scale = 0.0 if scale is None else c_float(scale, "sparse_attention: scale")
    c = Call("sparse_attention", q)
    T, Hq = _dim(q, 0), _dim(q, 1)
    out, vo = c.out((T, Hq, p.dv), "out")
    lse, vl = c.out((T, Hq), "lse", "float32")
    c.run("la_sparse_attention", ctypes.byref(p), c.view(q, "q"), c.view(kv, "kv"),
          c.view(idx, "idx"), vo, vl)
    return out, lse


# ---------------------------------------------------------------------------
# §9 analysis
# ---------------------------------------------------------------------------
_MAP_DEFAULT_FEATURE = {"linear": "relu", "mhla": "relu_eps"}


def attention_map(q, k, variant="softmax", feature=None, scale=None, mixing=None, grid=None,
                  blocks=None, map=None, p=3.0, softplus_param=None, rtol=1e-6):
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


def map_rank_entropy(A, rtol=1e-6):
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
