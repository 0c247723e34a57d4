"""Backward passes of the operators (shared/TRAINING.md §1) as plain functions.

Each takes the forward's inputs (and, where the C backward reads them, its
outputs: softmax's out and lse), the gradient of the output, and the forward's
options with the keyword names and defaults of longattn.ops; it returns the
gradients of the differentiable inputs as a tuple, None where not requested.
`needs` (optional, a tuple of bools in the order of the returned tuple) skips
gradients nobody wants. Inputs are numpy arrays or torch tensors (CPU or CUDA:
the C library runs the backward of the tensors' device); gradients are new
arrays of their input's dtype and device (state gradients: float32).

Used by longattn.autograd (torch.autograd.Function) and by the torch.library
registrations (register_autograd).
"""
import ctypes

import numpy as np

from . import _lib as L
from ._errors import call
from ._tensor import Call, is_torch, _torch, _POISON

__all__ = ["softmax_attention_backward", "linear_attention_backward", "mhla_backward",
           "mhla_causal_backward", "focused_attention_backward", "sparse_attention_backward"]


def _new_like(x, dtype=None):
    """Uninitialized array shaped like x on x's device (dtype: x's, or a name)."""
    if is_torch(x):
        torch = _torch()
        dt = x.dtype if dtype is None else getattr(torch, dtype)
        a = torch.empty(tuple(x.shape), dtype=dt, device=x.device)
        if _POISON:
            a.fill_(float("nan"))
        return a
    a = np.empty(x.shape, dtype=x.dtype if dtype is None else np.dtype(dtype))
    if _POISON:
        a.fill(np.nan)
    return a


def _grads(c, pairs, needs):
    """For each (input, name) wanted: a new gradient and its view; else None."""
    arrs, views = [], []
    for i, (x, name) in enumerate(pairs):
        want = x is not None and (needs is None or bool(needs[i]))
        a = _new_like(x) if want else None
        arrs.append(a)
        views.append(c.view(a, name) if want else None)
    return arrs, views


def _feature(name):
    f = ctypes.c_int(0)
    call("la_feature_from_name", str(name).encode(), ctypes.byref(f))
    return f.value


def softmax_attention_backward(q, k, v, out, lse, d_out, causal=False, scale=None, needs=None):
    """(dq, dk, dv) of longattn.softmax_attention; out and lse [B, Nq, H]
    (float32) are the forward's outputs (softmax_attention(..., return_lse=True))."""
    p = L.la_softmax_params()
    call("la_softmax_params_init", ctypes.byref(p))
    p.causal = int(bool(causal))
    p.scale = 0.0 if scale is None else float(scale)
    c = Call("softmax_attention_backward", q)
    (dq, dk, dv), (vq, vk, vv) = _grads(c, ((q, "dq"), (k, "dk"), (v, "dv")), needs)
    c.run("la_softmax_backward", ctypes.byref(p), c.view(q, "q"), c.view(k, "k"),
          c.view(v, "v"), c.view(out, "out"), c.view(lse, "lse"), c.view(d_out, "d_out"),
          vq, vk, vv)
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
    p = L.la_linear_params()
    call("la_linear_params_init", ctypes.byref(p))
    p.feature = _feature(feature)
    p.causal = int(bool(causal))
    p.normalize = int(bool(normalize))
    p.eps = float(eps)
    p.scale_q = float(scale)
    p.chunk = int(chunk)
    S0, z0 = (None, None) if initial_state is None else tuple(initial_state)
    dS1, dz1 = (None, None) if d_final_state is None else tuple(d_final_state)
    c = Call("linear_attention_backward", q)
    (dq, dk, dv), (vq, vk, vv) = _grads(c, ((q, "dq"), (k, "dk"), (v, "dv")),
                                        None if needs is None else needs[:3])
    want_S = S0 is not None and (needs is None or needs[3])
    want_z = S0 is not None and (needs is None or needs[4])
    B, H, D, Dv = q.shape[0], q.shape[2], q.shape[3], v.shape[3]
    dS0 = vS = dz0 = vz = None
    if want_S:
        dS0, vS = c.out((B, H, D, Dv), "d_S_in", "float32")
    if want_z:
        dz0, vz = c.out((B, H, D), "d_z_in", "float32")
    c.run("la_linear_backward", ctypes.byref(p), c.view(q, "q"), c.view(k, "k"),
          c.view(v, "v"), c.view(out, "out", True), c.view(S0, "S_in", True), c.view(z0, "z_in", True),
          c.view(d_out, "d_out"), c.view(dS1, "d_S_out", True), c.view(dz1, "d_z_out", True),
          vq, vk, vv, vS, vz)
    return dq, dk, dv, dS0, dz0


def _f32_like(c, x, name, want):
    """A float32 gradient shaped like x (on the call's device), or (None, None)."""
    if x is None or not want:
        return None, None
    return c.out(tuple(x.shape), name, "float32")


def _want(needs, i):
    return needs is None or bool(needs[i])


def mhla_backward(q, k, v, mixing, d_out, grid=None, blocks=None, feature="relu_eps",
                  normalize="per_query", eps=1e-6, scale=1.0, needs=None, out=None):
    """(dq, dk, dv, d_mixing) of longattn.mhla; d_mixing is float32 with
    mixing's shape ([M, M] or [H, M, M]). out (optional): the forward's
    output, read instead of recomputed."""
    from .ops import _mhla_params
    p = _mhla_params(grid, blocks, mixing, feature, normalize, eps, scale, "mhla_backward")
    c = Call("mhla_backward", q)
    (dq, dk, dv), (vq, vk, vv) = _grads(c, ((q, "dq"), (k, "dk"), (v, "dv")),
                                        None if needs is None else needs[:3])
    dW, vW = _f32_like(c, mixing, "d_mixing", _want(needs, 3))
    c.run("la_mhla_backward", ctypes.byref(p), c.view(q, "q"), c.view(k, "k"), c.view(v, "v"),
          c.view(mixing, "mixing"), c.view(out, "out", True), c.view(d_out, "d_out"), vq, vk,
          vv, vW)
    return dq, dk, dv, dW


def mhla_causal_backward(q, k, v, mixing, d_out, chunk=64, feature="relu", normalize="none",
                         eps=1e-6, scale=None, needs=None):
    """(dq, dk, dv, d_mixing) of longattn.mhla_causal; d_mixing is float32
    with mixing's shape, zero above the diagonal and past the last chunk."""
    from .ops import _mhla_causal_params
    p = _mhla_causal_params(chunk, feature, normalize, eps, scale)
    c = Call("mhla_causal_backward", q)
    (dq, dk, dv), (vq, vk, vv) = _grads(c, ((q, "dq"), (k, "dk"), (v, "dv")),
                                        None if needs is None else needs[:3])
    dW, vW = _f32_like(c, mixing, "d_mixing", _want(needs, 3))
    c.run("la_mhla_causal_backward", ctypes.byref(p), c.view(q, "q"), c.view(k, "k"),
          c.view(v, "v"), c.view(mixing, "mixing"), None, c.view(d_out, "d_out"), vq, vk, vv, vW)
    return dq, dk, dv, dW


def focused_attention_backward(q, k, v, d_out, variant="flatten", map=None, conv=None,
                               conv_bias=None, softplus_param=None, p=3.0, focus=None, eps=1e-6,
                               needs=None):
    """(dq, dk, dv, d_conv, d_conv_bias, d_softplus_param, d_focus) of
    longattn.focused_attention. Gradients of inputs that are None, or that
    the variant ignores (flatten: focus; blog: conv_bias, softplus_param),
    are None. Each has its input's dtype."""
    from .ops import _dims, _choice
    hw = (0, 0) if map is None else _dims(map, "focused_attention_backward: map")
    if len(hw) != 2:
        raise ValueError("focused_attention_backward: map %r must be (Hm, Wm)" % (map,))
    prm = L.la_focused_params()
    call("la_focused_params_init", ctypes.byref(prm))
    prm.variant = _choice(variant, L.FOCUSED_VARIANTS, "focused_attention_backward: variant")
    prm.map_h, prm.map_w = hw
    prm.p = float(p)
    prm.eps = float(eps)
    blog = prm.variant == L.FOCUSED_VARIANTS["blog"]
    c = Call("focused_attention_backward", q)
    params = (conv, None if blog else conv_bias, None if blog else softplus_param,
              focus if blog else None)
    pairs = ((q, "dq"), (k, "dk"), (v, "dv"), (params[0], "d_conv"), (params[1], "d_conv_bias"),
             (params[2], "d_softplus_param"), (params[3], "d_focus"))
    grads, views = _grads(c, pairs, needs)
    c.run("la_focused_backward", ctypes.byref(prm), c.view(q, "q"), c.view(k, "k"),
          c.view(v, "v"), c.view(conv, "conv", True), c.view(conv_bias, "conv_bias", True),
          c.view(softplus_param, "softplus_param", True), c.view(focus, "focus", True), None,
          c.view(d_out, "d_out"), *views)
    return tuple(grads)


def sparse_attention_backward(q, kv, idx, out, lse, d_out, dv=512, scale=None, needs=None):
    """(dq, dkv) of longattn.sparse_attention; out and lse are its outputs.
    Keys selected by several queries sum their contributions in a fixed
    order (deterministic)."""
    prm = L.la_sparse_attn_params()
    call("la_sparse_attn_params_init", ctypes.byref(prm))
    prm.dv = int(dv)
    prm.scale = 0.0 if scale is None else float(scale)
    c = Call("sparse_attention_backward", q)
    (dq, dkv), (vq, vkv) = _grads(c, ((q, "dq"), (kv, "dkv")), needs)
    c.run("la_sparse_attention_backward", ctypes.byref(prm), c.view(q, "q"), c.view(kv, "kv"),
          c.view(idx, "idx"), c.view(out, "out"), c.view(lse, "lse"), c.view(d_out, "d_out"),
          vq, vkv)
    return dq, dkv
