"""Backward passes of the operators (shared/TRAINING.md §1) as plain functions.

Each takes the forward's inputs (and, where the C backward reads them, its
outputs: softmax's out and lse), the gradient of the output, and the forward's
options with the keyword names and defaults of longattn.ops; it returns the
gradients of the differentiable inputs as a tuple, None where not requested.
`needs` (optional, a tuple of bools in the order of the returned tuple) skips
gradients nobody wants. Inputs are numpy arrays or torch tensors (CPU or CUDA:
the C library runs the backward of the tensors' device); gradients are new
arrays of their input's dtype and device (state and mixing gradients:
float32).

The C call goes through Call.launch, as the forward operators' do: the
compiled extension longattn._fastcall where it is in use and every argument
is a plain torch tensor of the call's device, else ctypes, which also raises
the argument errors with their messages (a d_out of the wrong shape or dtype:
LA_ERR_SHAPE / LA_ERR_DTYPE from the C library, naming d_out; nothing is
written). The parameter structs are the forward's cached ones (the C
functions take them as const pointers).

Used by longattn.autograd (torch.autograd.Function) and by the torch.library
registrations (register_autograd).
"""
import numpy as np

from . import _lib as L
from ._tensor import Call, _POISON
from .ops import (_cached_params, _focused_params, _linear_params, _mhla_causal_params,
                  _mhla_key, _mhla_params, _softmax_params)

__all__ = ["softmax_attention_backward", "linear_attention_backward", "mhla_backward",
           "mhla_causal_backward", "focused_attention_backward", "sparse_attention_backward"]


def _grad(c, x, want=True, dtype=None):
    """An uninitialized gradient shaped like x on x's device (x's dtype, or
    `dtype` as a name: "float32"), or None when x is None or not wanted."""
    if x is None or not want:
        return None
    t = c.torch
    if t is not None and isinstance(x, t.Tensor):
        if type(x) is t.Tensor:
            # x's device and dtype without an argument to parse (contiguous)
            a = x.new_empty(x.shape) if dtype is None else \
                x.new_empty(x.shape, dtype=getattr(t, dtype))
        else:  # a subclass (Parameter, ...): a plain tensor, not its new_empty
            a = t.empty(tuple(x.shape), dtype=x.dtype if dtype is None else getattr(t, dtype),
                        device=x.device)
        if _POISON:
            a.fill_(float("nan"))
        return a
    a = np.empty(x.shape, dtype=x.dtype if dtype is None else np.dtype(dtype))
    if _POISON:
        a.fill(np.nan)
    return a


def _wants(needs, n):
    """needs as n bools (None, or entries past its end: wanted)."""
    if needs is None:
        return (True,) * n
    if type(needs) is tuple and len(needs) == n:
        return needs  # autograd's ctx.needs_input_grad slice: n bools
    w = tuple([bool(x) for x in needs[:n]])
    return w + (True,) * (n - len(w))


# The tensor arguments of each C backward (Call.launch), '?' where None is
# passed as NULL.
_SOFTMAX_BWD = ("q", "k", "v", "out", "lse", "d_out", "dq?", "dk?", "dv?")
_LINEAR_BWD = ("q", "k", "v", "out?", "S_in?", "z_in?", "d_out", "d_S_out?", "d_z_out?",
               "dq?", "dk?", "dv?", "d_S_in?", "d_z_in?")
_MHLA_BWD = ("q", "k", "v", "mixing", "out?", "d_out", "dq?", "dk?", "dv?", "d_mixing?")
_FOCUSED_BWD = ("q", "k", "v", "conv?", "conv_bias?", "softplus_param?", "focus?", "out?",
                "d_out", "dq?", "dk?", "dv?", "d_conv?", "d_conv_bias?", "d_softplus_param?",
                "d_focus?")
_SPARSE_BWD = ("q", "kv", "idx", "out", "lse", "d_out", "dq?", "dkv?")


def softmax_attention_backward(q, k, v, out, lse, d_out, causal=False, scale=None, needs=None):
    """(dq, dk, dv) of longattn.softmax_attention; out and lse [B, Nq, H]
    (float32) are the forward's outputs (softmax_attention(..., return_lse=True))."""
    p = _cached_params(("softmax", causal, scale), lambda: _softmax_params(causal, scale))
    c = Call("softmax_attention_backward", q)
    wq, wk, wv = _wants(needs, 3)
    dq, dk, dv = _grad(c, q, wq), _grad(c, k, wk), _grad(c, v, wv)
    c.launch("la_softmax_backward", p, _SOFTMAX_BWD, q, k, v, out, lse, d_out, dq, dk, dv)
    return dq, dk, dv


def linear_attention_backward(q, k, v, d_out, feature="relu", causal=False, normalize=True,
                              eps=1e-6, scale=1.0, chunk=64, initial_state=None,
                              d_final_state=None, needs=None, out=None):
    """(dq, dk, dv, dS_in, dz_in) of longattn.linear_attention. Causal only:
    initial_state = (S [B,H,D,Dv], z [B,H,D]) float32 of the forward (None =
    zeros; z may be None when normalize is off), d_final_state = (dS, dz)
    the gradient of the returned final state (None or None parts = zero);
    dS_in, dz_in (float32) are returned when an initial state was given.
    out (optional): the forward's output, read instead of recomputed."""
    p = _cached_params(("linear", feature, causal, normalize, eps, scale, chunk),
                       lambda: _linear_params(feature, causal, normalize, eps, scale, chunk))
    S0, z0 = (None, None) if initial_state is None else tuple(initial_state)
    dS1, dz1 = (None, None) if d_final_state is None else tuple(d_final_state)
    c = Call("linear_attention_backward", q)
    wq, wk, wv, wS, wz = _wants(needs, 5)
    dq, dk, dv = _grad(c, q, wq), _grad(c, k, wk), _grad(c, v, wv)
    dS0 = dz0 = None
    if S0 is not None:
        # the state gradients are float32 [B, H, D, Dv] / [B, H, D] (whatever
        # z0 is; z0 None with normalize on reads a zero z)
        if wS:
            dS0 = c.empty((q.shape[0], q.shape[2], q.shape[3], v.shape[3]), "float32")
        if wz:
            dz0 = c.empty((q.shape[0], q.shape[2], q.shape[3]), "float32")
    c.launch("la_linear_backward", p, _LINEAR_BWD, q, k, v, out, S0, z0, d_out, dS1, dz1,
             dq, dk, dv, dS0, dz0)
    return dq, dk, dv, dS0, dz0


def mhla_backward(q, k, v, mixing, d_out, grid=None, blocks=None, feature="relu_eps",
                  normalize="per_query", eps=1e-6, scale=1.0, needs=None, out=None):
    """(dq, dk, dv, d_mixing) of longattn.mhla; d_mixing is float32 with
    mixing's shape ([M, M] or [H, M, M]). out (optional): the forward's
    output, read instead of recomputed."""
    p = _cached_params(_mhla_key(grid, blocks, mixing, feature, normalize, eps, scale),
                       lambda: _mhla_params(grid, blocks, mixing, feature, normalize, eps,
                                            scale, "mhla_backward"))
    c = Call("mhla_backward", q)
    wq, wk, wv, wW = _wants(needs, 4)
    dq, dk, dv = _grad(c, q, wq), _grad(c, k, wk), _grad(c, v, wv)
    dW = _grad(c, mixing, wW, "float32")
    c.launch("la_mhla_backward", p, _MHLA_BWD, q, k, v, mixing, out, d_out, dq, dk, dv, dW)
    return dq, dk, dv, dW


def mhla_causal_backward(q, k, v, mixing, d_out, chunk=64, feature="relu", normalize="none",
                         eps=1e-6, scale=None, needs=None):
    """(dq, dk, dv, d_mixing) of longattn.mhla_causal; d_mixing is float32
    with mixing's shape, zero above the diagonal and past the last chunk."""
    p = _cached_params(("mhla_causal", chunk, feature, normalize, eps, scale),
                       lambda: _mhla_causal_params(chunk, feature, normalize, eps, scale))
    c = Call("mhla_causal_backward", q)
    wq, wk, wv, wW = _wants(needs, 4)
    dq, dk, dv = _grad(c, q, wq), _grad(c, k, wk), _grad(c, v, wv)
    dW = _grad(c, mixing, wW, "float32")
    c.launch("la_mhla_causal_backward", p, _MHLA_BWD, q, k, v, mixing, None, d_out, dq, dk,
             dv, dW)
    return dq, dk, dv, dW


def focused_attention_backward(q, k, v, d_out, variant="flatten", map=None, conv=None,
                               conv_bias=None, softplus_param=None, p=3.0, focus=None, eps=1e-6,
                               needs=None):
    """(dq, dk, dv, d_conv, d_conv_bias, d_softplus_param, d_focus) of
    longattn.focused_attention. Gradients of inputs that are None, or that
    the variant ignores (flatten: focus; blog: conv_bias, softplus_param),
    are None. Each has its input's dtype."""
    prm = _focused_params(variant, map, p, eps, "focused_attention_backward")
    blog = prm.variant == L.FOCUSED_VARIANTS["blog"]
    c = Call("focused_attention_backward", q)
    w = _wants(needs, 7)
    dq, dk, dv = _grad(c, q, w[0]), _grad(c, k, w[1]), _grad(c, v, w[2])
    dconv = _grad(c, conv, w[3])
    if blog:
        dbias = dsp = None
        dfocus = _grad(c, focus, w[6])
    else:
        dbias, dsp = _grad(c, conv_bias, w[4]), _grad(c, softplus_param, w[5])
        dfocus = None
    c.launch("la_focused_backward", prm, _FOCUSED_BWD, q, k, v, conv, conv_bias,
             softplus_param, focus, None, d_out, dq, dk, dv, dconv, dbias, dsp, dfocus)
    return dq, dk, dv, dconv, dbias, dsp, dfocus


def sparse_attention_backward(q, kv, idx, out, lse, d_out, dv=512, scale=None, needs=None):
    """(dq, dkv) of longattn.sparse_attention; out and lse are its outputs.
    Keys selected by several queries sum their contributions in a fixed
    order (deterministic)."""
    from .index_ops import _sparse_params
    prm = _cached_params(("sparse", type(dv), dv, scale), lambda: _sparse_params(dv, scale))
    c = Call("sparse_attention_backward", q)
    wq, wkv = _wants(needs, 2)
    dq, dkv = _grad(c, q, wq), _grad(c, kv, wkv)
    c.launch("la_sparse_attention_backward", prm, _SPARSE_BWD, q, kv, idx, out, lse, d_out,
             dq, dkv)
    return dq, dkv
