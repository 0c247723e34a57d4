"""The operators of SPEC.md as Python functions (flash-attn / fla style).

Inputs are numpy arrays or torch tensors in the [B, N, H, D] layout (any
strides: a [B, H, N, D] tensor passed as `x.transpose(1, 2)` works without a
copy). Outputs are new arrays of the same kind, on the same device, with the
dtype of the first input (indices int32; lse, states and scores float32).
The C library validates every shape; its message comes back in the
exception (ValueError for arguments/shapes/dtypes, RuntimeError otherwise).
"""
import ctypes
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib as L
from . import _varlen
from ._errors import call
from ._tensor import Call, c_float, c_int, is_array, is_torch, _torch

# A numpy.ndarray or a torch.Tensor (torch is never imported by this module).
Array = Any
# Grid / block / map sizes: 4, (4, 4), "4x4".
Dims = Union[int, str, Sequence[int]]

__all__ = [
    "softmax_attention", "linear_attention", "mhla", "mhla_causal", "mhla_init",
    "mhla_project", "MHLADecoder", "focused_attention",
]


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def _dim(x, axis, default=1):
    """x.shape[axis] when x has that axis, else `default` (the C library then
    reports the rank error with its own message)."""
    try:
        shape = x.shape  # a tuple (numpy) or torch.Size: indexed without a copy
    except AttributeError:
        return default
    return int(shape[axis]) if 0 <= axis < len(shape) else default


def _lead3(x):
    """The first three extents of x (_dim's default 1 for missing axes)."""
    try:
        shape = x.shape
    except AttributeError:
        return 1, 1, 1
    if len(shape) >= 3:
        return int(shape[0]), int(shape[1]), int(shape[2])
    return _dim(x, 0), _dim(x, 1), _dim(x, 2)


def _choice(value, table, what):
    key = str(value).replace("-", "_")
    if key not in table:
        raise ValueError("%s: %r is not one of %s" % (what, value, ", ".join(sorted(table))))
    return table[key]


def _feature(name):
    f = ctypes.c_int(0)
    call("la_feature_from_name", str(name).encode(), ctypes.byref(f))
    return f.value


# Parameter structs by (operator, options): the C functions take them as
# const pointers, so one built struct serves every later call with the same
# options (a per-call saving of the init call and the conversions).
_PARAMS = {}


def _cached_params(key, build):
    try:
        p = _PARAMS.get(key)
    except TypeError:  # an unhashable option (e.g. a list grid): build each time
        return build()
    if p is None:
        p = build()
        if len(_PARAMS) >= 1024:
            _PARAMS.clear()
        _PARAMS[key] = p
    return p


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


# How a call runs (_how): the direct C call, longattn.autograd's Functions
# (eager autograd) or the torch.library custom ops (a tracer must see the op).
DIRECT, AUTOGRAD, CUSTOM_OP = 0, 1, 2


def _records(xs):
    """Whether autograd records a call with these inputs: grad mode on and
    a torch tensor among them that requires grad."""
    torch = _torch()
    if torch is None or not torch.is_grad_enabled():
        return False
    T = torch.Tensor
    for x in xs:
        if isinstance(x, T) and x.requires_grad:
            return True
    return False


class _Direct:
    """Stands for the custom-op module where torch.library custom ops are not
    in use (no torch, or torch < 2.4): calls take the direct path, or
    longattn.autograd's Functions when autograd records them."""

    @staticmethod
    def active(*xs):
        return False

    tracing = active

    @staticmethod
    def route(*xs):
        return AUTOGRAD if _records(xs) else DIRECT


# CUSTOM[0]: None until the first call that sees torch (then longattn._torch_ops
# when torch >= 2.4 has custom ops, else _Direct). A one-element cell: it is
# filled once per process and read on every call.
CUSTOM = [None]


def install_custom_ops():
    """Register torch.ops.longattn.* when torch >= 2.4 is importable and
    already imported; returns the module that routes calls (_Direct if not)."""
    if CUSTOM[0] is None:
        mod = _Direct
        torch = _torch()
        if torch is not None and hasattr(getattr(torch, "library", None), "custom_op"):
            from . import _torch_ops
            if _torch_ops.supported():
                mod = _torch_ops
        CUSTOM[0] = mod
    return CUSTOM[0]


def _how(*xs):
    """DIRECT, AUTOGRAD or CUSTOM_OP (then CUSTOM[0] is longattn._torch_ops)
    for a call with these inputs, in one pass over them (the routing is paid
    on every call)."""
    c = CUSTOM[0]
    if c is None:
        if _torch() is None:
            return DIRECT
        c = install_custom_ops()
    return c.route(*xs)


def _route(*xs):
    """The custom-op module when this call must go through torch.ops.longattn
    (tracing, meta tensors, subclasses / dispatch modes under autograd),
    else None."""
    return CUSTOM[0] if _how(*xs) == CUSTOM_OP else None


def _needs_autograd(*xs):
    """Whether autograd records the call (it then goes through
    longattn.autograd's Functions unless _route sends it to the custom ops)."""
    return _records(xs)


_AUTOGRAD = []  # [longattn.autograd], imported on the first call that needs it (torch)


def _autograd_module():
    if not _AUTOGRAD:
        from . import autograd
        _AUTOGRAD.append(autograd)
    return _AUTOGRAD[0]


def _autograd(fn_name, impl, options, *inputs):
    """fn_name's autograd.Function on inputs with the public keyword options
    (a dict; impl is ignored): the earlier form, kept for callers."""
    return _autograd_module().apply(fn_name, impl, options, *inputs)


# ---------------------------------------------------------------------------
# §1 softmax attention
# ---------------------------------------------------------------------------
def softmax_attention(q: Array, k: Array, v: Array, causal: bool = False,
                      scale: Optional[float] = None, return_lse: bool = False,
                      cu_seqlens: Optional[Array] = None) -> Union[Array, Tuple[Array, Array]]:
    """Softmax attention O = softmax(scale·QKᵀ + mask)·V (SPEC §1).

    Shapes: q [B, Nq, H, D], k [B, Nk, Hk, D], v [B, Nk, Hk, Dv] with
    H % Hk == 0 (grouped-query attention). Returns out [B, Nq, H, Dv] (q's
    dtype and device) and, with return_lse=True, also lse [B, Nq, H]
    (float32, natural log).

    causal: query t sees keys s <= t + (Nk - Nq) (bottom-right aligned, as
    flash-attn). scale: None = D**-0.5.
    cu_seqlens: int32 [nseq + 1] prefix sums of packed sequences (B = 1, q, k
    and v packed alike along N); each sequence attends only within itself.

    Example:
        >>> q = k = v = torch.randn(2, 128, 4, 64)
        >>> o = longattn.softmax_attention(q, k, v, causal=True)
        >>> o, lse = longattn.softmax_attention(q, k, v, return_lse=True)
    """
    how = _how(q, k, v)
    if how == CUSTOM_OP:
        return CUSTOM[0].call_softmax_attention(q, k, v, causal, scale, return_lse, cu_seqlens)
    if cu_seqlens is not None:
        return _varlen.softmax(softmax_attention, q, k, v, cu_seqlens, causal, scale,
                               return_lse)
    if how == AUTOGRAD:
        return (_AUTOGRAD[0] if _AUTOGRAD else _autograd_module()).softmax_attention(
            q, k, v, causal, scale, return_lse)
    return _softmax_attention(q, k, v, causal, scale, return_lse)


def _softmax_params(causal, scale):
    p = L.la_softmax_params()
    call("la_softmax_params_init", ctypes.byref(p))
    p.causal = int(bool(causal))
    p.scale = 0.0 if scale is None else c_float(scale, "softmax_attention: scale")
    return p


def _softmax_attention(q, k, v, causal=False, scale=None, return_lse=False):
    p = _cached_params(("softmax", causal, scale), lambda: _softmax_params(causal, scale))
    c = Call("softmax_attention", q)
    B, Nq, H = _lead3(q)
    out = c.empty((B, Nq, H, _dim(v, 3)))
    lse = c.empty((B, Nq, H), "float32") if return_lse else None
    c.launch("la_softmax_attention", p, _SOFTMAX_ARGS, q, k, v, out, lse)
    return (out, lse) if return_lse else out


# The names of the tensor arguments of each C call (Call.launch), '?' where
# None is passed as NULL.
_SOFTMAX_ARGS = ("q", "k", "v", "out", "lse?")


# ---------------------------------------------------------------------------
# §3 linear attention
# ---------------------------------------------------------------------------
def linear_attention(q: Array, k: Array, v: Array, feature: str = "relu", causal: bool = False,
                     normalize: bool = True, eps: float = 1e-6, scale: float = 1.0,
                     chunk: int = 64, initial_state: Optional[Tuple[Array, Array]] = None,
                     output_final_state: bool = False,
                     cu_seqlens: Optional[Array] = None
                     ) -> Union[Array, Tuple[Array, Tuple[Array, Array]]]:
    """Linear attention with feature map φ (SPEC §3).

    q̃ = scale·φ(q), k̃ = φ(k); S = Σ_j k̃_j v_jᵀ, z = Σ_j k̃_j (over j <= t when
    causal); o_t = q̃_tᵀS / (q̃_tᵀz + eps) when normalize, else q̃_tᵀS.

    Shapes: q, k [B, N, H, D], v [B, N, H, Dv] -> out [B, N, H, Dv].
    feature: identity | relu | relu_eps | relu1 | elu1. chunk: causal chunk
    size. Causal only: initial_state = (S [B, H, D, Dv], z [B, H, D]) float32
    (None = zeros); output_final_state=True returns (out, (S, z)) with the
    state after the last token, so a sequence split in two parts gives the
    same outputs as one pass.
    cu_seqlens (causal only): int32 [nseq + 1] prefix sums of packed
    sequences (B = 1); the states are then per sequence: initial_state
    (S [nseq, H, D, Dv], z [nseq, H, D]) and the returned final state alike.

    Example:
        >>> q, k = torch.randn(1, 1000, 8, 64), torch.randn(1, 1000, 8, 64)
        >>> v = torch.randn(1, 1000, 8, 32)
        >>> o = longattn.linear_attention(q, k, v, feature="elu1")
        >>> o1, st = longattn.linear_attention(q[:, :500], k[:, :500], v[:, :500],
        ...                                    causal=True, output_final_state=True)
        >>> o2 = longattn.linear_attention(q[:, 500:], k[:, 500:], v[:, 500:],
        ...                                causal=True, initial_state=st)
    """
    S0, z0 = (None, None) if initial_state is None else tuple(initial_state)
    how = _how(q, k, v, S0, z0)
    if how != CUSTOM_OP and cu_seqlens is None:
        if how == AUTOGRAD:
            return (_AUTOGRAD[0] if _AUTOGRAD else _autograd_module()).linear_attention(
                q, k, v, S0, z0, feature, causal, normalize, eps, scale, chunk,
                output_final_state)
        return _linear_attention(q, k, v, S0, z0, feature, causal, normalize, eps, scale, chunk,
                                 output_final_state)
    opts = dict(feature=feature, causal=causal, normalize=normalize, eps=eps, scale=scale,
                chunk=chunk, output_final_state=output_final_state)
    if how == CUSTOM_OP:
        return CUSTOM[0].call_linear_attention(q, k, v, S0, z0, cu_seqlens, **opts)
    return _varlen.linear(_linear_attention_public, q, k, v, S0, z0, cu_seqlens, opts)


def _linear_attention_public(q, k, v, S0, z0, feature="relu", causal=False, normalize=True,
                             eps=1e-6, scale=1.0, chunk=64, output_final_state=False):
    """linear_attention with the state split in two arguments (for _varlen)."""
    if _records((q, k, v, S0, z0)):
        return _autograd_module().linear_attention(q, k, v, S0, z0, feature, causal, normalize,
                                                   eps, scale, chunk, output_final_state)
    return _linear_attention(q, k, v, S0, z0, feature, causal, normalize, eps, scale, chunk,
                             output_final_state)


def _linear_params(feature, causal, normalize, eps, scale, chunk):
    p = L.la_linear_params()
    call("la_linear_params_init", ctypes.byref(p))
    p.feature = _feature(feature)
    p.causal = int(bool(causal))
    p.normalize = int(bool(normalize))
    p.eps = c_float(eps, "linear_attention: eps")
    p.scale_q = c_float(scale, "linear_attention: scale")
    p.chunk = c_int(chunk, "linear_attention: chunk")
    return p


def _linear_attention(q, k, v, S0=None, z0=None, feature="relu", causal=False,
                      normalize=True, eps=1e-6, scale=1.0, chunk=64,
                      output_final_state=False):
    p = _cached_params(("linear", feature, causal, normalize, eps, scale, chunk),
                       lambda: _linear_params(feature, causal, normalize, eps, scale, chunk))
    c = Call("linear_attention", q)
    B, N, H = _lead3(q)
    D, Dv = _dim(q, 3), _dim(v, 3)
    out = c.empty((B, N, H, Dv))
    if output_final_state:
        S1 = c.empty((B, H, D, Dv), "float32")
        z1 = c.empty((B, H, D), "float32")
    else:
        S1 = z1 = None
    c.launch("la_linear_attention", p, _LINEAR_ARGS, q, k, v, out, S0, z0, S1, z1)
    return (out, (S1, z1)) if output_final_state else out


_LINEAR_ARGS = ("q", "k", "v", "out", "S_in?", "z_in?", "S_out?", "z_out?")


# ---------------------------------------------------------------------------
# §4 focused linear attention
# ---------------------------------------------------------------------------
def focused_attention(q: Array, k: Array, v: Array, variant: str = "flatten",
                      map: Optional[Dims] = None, conv: Optional[Array] = None,
                      conv_bias: Optional[Array] = None, softplus_param: Optional[Array] = None,
                      p: float = 3.0, focus: Optional[Array] = None,
                      eps: float = 1e-6) -> Array:
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
    args = (q, k, v, conv, conv_bias, softplus_param, focus)
    how = _how(*args)
    if how == CUSTOM_OP:
        return CUSTOM[0].call_focused_attention(*args, variant=variant, map=map, p=p, eps=eps)
    if how == AUTOGRAD:
        return (_AUTOGRAD[0] if _AUTOGRAD else _autograd_module()).focused_attention(
            *args, variant, map, p, eps)
    return _focused_attention(*args, variant, map, p, eps)


def _build_focused_params(variant, map, p, eps, what):
    # map None: the library answers that the map is required
    hw = (0, 0) if map is None else _dims(map, what + ": map")
    if len(hw) != 2:
        raise ValueError("%s: map %r must be (Hm, Wm)" % (what, map))
    prm = L.la_focused_params()
    call("la_focused_params_init", ctypes.byref(prm))
    prm.variant = _choice(variant, L.FOCUSED_VARIANTS, what + ": variant")
    prm.map_h, prm.map_w = hw
    prm.p = c_float(p, what + ": p")
    prm.eps = c_float(eps, what + ": eps")
    return prm


def _focused_params(variant, map, p, eps, what="focused_attention"):
    """The cached la_focused_params of these options (errors name `what`)."""
    return _cached_params(("focused", variant, map, p, eps),
                          lambda: _build_focused_params(variant, map, p, eps, what))


def _focused_attention(q, k, v, conv=None, conv_bias=None, softplus_param=None, focus=None,
                       variant="flatten", map=None, p=3.0, eps=1e-6):
    prm = _focused_params(variant, map, p, eps)
    c = Call("focused_attention", q)
    out = c.empty(_lead3(q) + (_dim(v, 3),))
    c.launch("la_focused_attention", prm, _FOCUSED_ARGS, q, k, v, conv, conv_bias,
             softplus_param, focus, out)
    return out


_FOCUSED_ARGS = ("q", "k", "v", "conv?", "conv_bias?", "softplus_param?", "focus?", "out")


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


def _mhla_key(grid, blocks, mixing, feature, normalize, eps, scale):
    """The params-cache key of an MHLA call. With blocks None (1-D: M from
    the mixing matrix) it holds M; a mixing without a shape gets a list,
    which _cached_params does not cache (the builder raises its error)."""
    if blocks is None:
        shape = getattr(mixing, "shape", None)
        if shape is None:
            return ["uncached"]
        blocks = ("M", int(shape[-1]) if len(shape) else 1)
    return ("mhla", grid, blocks, feature, normalize, eps, scale)


def mhla(q: Array, k: Array, v: Array, mixing: Array, grid: Optional[Dims] = None,
         blocks: Optional[Dims] = None, feature: str = "relu_eps",
         normalize: str = "per_query", eps: float = 1e-6, scale: float = 1.0) -> Array:
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
    how = _how(q, k, v, mixing)
    if how == CUSTOM_OP:
        return CUSTOM[0].call_mhla(q, k, v, mixing, grid=grid, blocks=blocks, feature=feature,
                                   normalize=normalize, eps=eps, scale=scale)
    if how == AUTOGRAD:
        return (_AUTOGRAD[0] if _AUTOGRAD else _autograd_module()).mhla(
            q, k, v, mixing, grid, blocks, feature, normalize, eps, scale)
    return _mhla(q, k, v, mixing, grid, blocks, feature, normalize, eps, scale)


def _mhla(q, k, v, mixing, grid=None, blocks=None, feature="relu_eps", normalize="per_query",
          eps=1e-6, scale=1.0):
    p = _cached_params(_mhla_key(grid, blocks, mixing, feature, normalize, eps, scale),
                       lambda: _mhla_params(grid, blocks, mixing, feature, normalize, eps,
                                            scale, "mhla"))
    c = Call("mhla", q)
    out = c.empty(_lead3(q) + (_dim(v, 3),))
    c.launch("la_mhla_forward", p, _MHLA_ARGS, q, k, v, mixing, out)
    return out


_MHLA_ARGS = ("q", "k", "v", "mixing", "out")


def _mhla_causal_params(chunk, feature, normalize, eps, scale):
    p = L.la_mhla_causal_params()
    call("la_mhla_causal_params_init", ctypes.byref(p))
    p.chunk = c_int(chunk, "mhla_causal: chunk")
    p.feature = _feature(feature)
    p.normalize = _choice(normalize, L.MHLA_NORMALIZE, "mhla_causal: normalize")
    p.eps = c_float(eps, "mhla_causal: eps")
    p.scale_q = 0.0 if scale is None else c_float(scale, "mhla_causal: scale")
    return p


def mhla_causal(q: Array, k: Array, v: Array, mixing: Array, chunk: int = 64,
                feature: str = "relu", normalize: str = "none", eps: float = 1e-6,
                scale: Optional[float] = None, cu_seqlens: Optional[Array] = None) -> Array:
    """Causal MHLA over chunks of `chunk` tokens (SPEC §5.4).

    Token t in chunk i: o_t = q̃_tᵀ[Σ_{b<i} W[i,b] S_b + W[i,i] Σ_{j in i, j<=t}
    k̃_j v_jᵀ] (normalize="none"); "per_query" adds the same mixture of z in
    a denominator (+ eps). Entries of W above the diagonal are ignored.

    Shapes: q, k [B, N, H, D], v [B, N, H, Dv], mixing [M, M] or [H, M, M]
    (float32, M >= ceil(N / chunk)) -> out [B, N, H, Dv].
    feature default relu; scale None = D**-0.5.
    cu_seqlens: int32 [nseq + 1] prefix sums of packed sequences (B = 1);
    every sequence starts its own chunks at its first token and uses the
    same mixing.

    Example:
        >>> q = k = v = torch.randn(1, 1000, 4, 64)
        >>> W = torch.from_numpy(longattn.mhla_init(16, kind="uniform_causal"))
        >>> o = longattn.mhla_causal(q, k, v, W, chunk=64)
    """
    how = _how(q, k, v, mixing)
    if how != CUSTOM_OP and cu_seqlens is None:
        if how == AUTOGRAD:
            return (_AUTOGRAD[0] if _AUTOGRAD else _autograd_module()).mhla_causal(
                q, k, v, mixing, chunk, feature, normalize, eps, scale)
        return _mhla_causal(q, k, v, mixing, chunk, feature, normalize, eps, scale)
    opts = dict(chunk=chunk, feature=feature, normalize=normalize, eps=eps, scale=scale)
    if how == CUSTOM_OP:
        return CUSTOM[0].call_mhla_causal(q, k, v, mixing, cu_seqlens, **opts)
    return _varlen.mhla_causal(mhla_causal, q, k, v, mixing, cu_seqlens, opts)


def _mhla_causal(q, k, v, mixing, chunk=64, feature="relu", normalize="none", eps=1e-6,
                 scale=None):
    p = _cached_params(("mhla_causal", chunk, feature, normalize, eps, scale),
                       lambda: _mhla_causal_params(chunk, feature, normalize, eps, scale))
    c = Call("mhla_causal", q)
    out = c.empty(_lead3(q) + (_dim(v, 3),))
    c.launch("la_mhla_causal_forward", p, _MHLA_ARGS, q, k, v, mixing, out)
    return out


def mhla_init(blocks: Dims, kind: str = "locality", like: Optional[Array] = None) -> Array:
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


def mhla_project(mixing: Array, causal: bool = False) -> Array:
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


_APPEND_ARGS = ("q", "k", "v", "out")


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


    def append(self, q: Array, k: Array, v: Array) -> Array:
        """Append n tokens: q, k [B, n, H, D], v [B, n, H, Dv] -> out [B, n, H, Dv]."""
        h = self._live()
        c = Call("MHLADecoder.append", q)
        out = c.empty(_lead3(q) + (_dim(v, 3),))
        c.launch("la_mhla_state_append", h.value, _APPEND_ARGS, q, k, v, out)
        return out

    @property
    def length(self) -> int:
        """Tokens appended so far."""
        n = ctypes.c_int64(0)
        call("la_mhla_state_length", self._live(), ctypes.byref(n))
        return n.value

    def __len__(self):
        return self.length
