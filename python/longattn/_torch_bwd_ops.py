"""Backward passes as torch.library custom ops (torch >= 2.4), called by the
autograd formulas registered in longattn._torch_ops.

    torch.ops.longattn.softmax_attention_backward, linear_attention_backward,
    focused_attention_backward, mhla_backward, mhla_causal_backward,
    sparse_attention_backward

Being ops with fake implementations, they let AOT autograd (torch.compile of
a training step) trace the backward graph without running the C code. Their
real implementations call longattn._backward (the C backward passes), looping
over the sequences for cu_seqlens. A gradient whose input was None comes
back as an empty tensor (custom ops return tensors only).
"""
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import _varlen

LIB = "longattn"


class _Backward:
    """longattn._backward's functions; one not in this build raises
    NotImplementedError naming the operator (as longattn.autograd does)."""

    def __getattr__(self, name):
        from . import _backward
        fn = getattr(_backward, name, None)
        if fn is None:
            raise NotImplementedError(
                "longattn.%s: backward is not implemented yet (this build has no %s). Run it "
                "under torch.no_grad() / on detached inputs for inference."
                % (name[:-len("_backward")], name))
        return fn


def _bwd():
    return _Backward()


def _none(x):
    return None if x is None or x.numel() == 0 else x


def _empty(like):
    return like.new_empty((0,), dtype=torch.float32)


def _or_empty(g, like):
    return _empty(like) if g is None else g


def _like(x):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _cat_per_sequence(cu, q, fn, n):
    """Concatenate along N the gradients fn(s, e) of every sequence."""
    parts = [[] for _ in range(n)]
    for s, e in _varlen.bounds(cu, q, "backward"):
        if e > s:
            for i, g in enumerate(fn(s, e)):
                parts[i].append(g)
    return [torch.cat(p, dim=1) for p in parts]


# ---------------------------------------------------------------------------
@torch.library.custom_op(LIB + "::softmax_attention_backward", mutates_args=())
def softmax_attention_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                               d_out: Tensor, causal: bool, scale: Optional[float],
                               cu_seqlens: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    B = _bwd()
    if cu_seqlens is None:
        return B.softmax_attention_backward(q, k, v, out, lse, d_out, causal=causal,
                                            scale=scale)
    return tuple(_cat_per_sequence(cu_seqlens, q, lambda s, e: B.softmax_attention_backward(
        q[:, s:e], k[:, s:e], v[:, s:e], out[:, s:e], lse[:, s:e], d_out[:, s:e],
        causal=causal, scale=scale), 3))


@softmax_attention_backward.register_fake
def _(q, k, v, out, lse, d_out, causal, scale, cu_seqlens):
    return _like(q), _like(k), _like(v)


# ---------------------------------------------------------------------------
@torch.library.custom_op(LIB + "::linear_attention_backward", mutates_args=())
def linear_attention_backward(q: Tensor, k: Tensor, v: Tensor, d_out: Tensor,
                              S0: Optional[Tensor], z0: Optional[Tensor],
                              dS1: Optional[Tensor], dz1: Optional[Tensor], feature: str,
                              causal: bool, normalize: bool, eps: float, scale: float,
                              chunk: int, cu_seqlens: Optional[Tensor]
                              ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    B = _bwd()
    opts = dict(feature=feature, causal=causal, normalize=normalize, eps=eps, scale=scale,
                chunk=chunk)
    dS1, dz1 = _none(dS1), _none(dz1)
    if cu_seqlens is None:
        init = None if S0 is None else (S0, z0)
        d_final = None if dS1 is None and dz1 is None else (dS1, dz1)
        dq, dk, dv, dS0, dz0 = B.linear_attention_backward(
            q, k, v, d_out, initial_state=init, d_final_state=d_final, **opts)
        return dq, dk, dv, _or_empty(dS0 if S0 is not None else None, q), \
            _or_empty(dz0 if z0 is not None else None, q)
    # packed sequences: one backward per sequence, states per sequence
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    dS0 = None if S0 is None else torch.zeros_like(S0)
    dz0 = None if z0 is None else torch.zeros_like(z0)
    for i, (s, e) in enumerate(_varlen.bounds(cu_seqlens, q, "linear_attention backward")):
        row = slice(i, i + 1)
        if e == s:  # the final state is the initial state
            if dS0 is not None and dS1 is not None:
                dS0[row] = dS1[row]
            if dz0 is not None and dz1 is not None:
                dz0[row] = dz1[row]
            continue
        init = None if S0 is None else (S0[row], None if z0 is None else z0[row])
        d_final = None
        if dS1 is not None or dz1 is not None:
            d_final = (None if dS1 is None else dS1[row], None if dz1 is None else dz1[row])
        g = B.linear_attention_backward(q[:, s:e], k[:, s:e], v[:, s:e], d_out[:, s:e],
                                        initial_state=init, d_final_state=d_final, **opts)
        dq[:, s:e], dk[:, s:e], dv[:, s:e] = g[0], g[1], g[2]
        if dS0 is not None and g[3] is not None:
            dS0[row] = g[3]
        if dz0 is not None and g[4] is not None:
            dz0[row] = g[4]
    return dq, dk, dv, _or_empty(dS0, q), _or_empty(dz0, q)


@linear_attention_backward.register_fake
def _(q, k, v, d_out, S0, z0, dS1, dz1, feature, causal, normalize, eps, scale, chunk,
      cu_seqlens):
    return (_like(q), _like(k), _like(v), _empty(q) if S0 is None else _like(S0),
            _empty(q) if z0 is None else _like(z0))


# ---------------------------------------------------------------------------
@torch.library.custom_op(LIB + "::focused_attention_backward", mutates_args=())
def focused_attention_backward(q: Tensor, k: Tensor, v: Tensor, d_out: Tensor,
                               conv: Optional[Tensor], conv_bias: Optional[Tensor],
                               softplus_param: Optional[Tensor], focus: Optional[Tensor],
                               variant: str, map: List[int], p: float, eps: float
                               ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                                          Tensor]:
    g = _bwd().focused_attention_backward(q, k, v, d_out, variant=variant, map=tuple(map),
                                          conv=conv, conv_bias=conv_bias,
                                          softplus_param=softplus_param, focus=focus, p=p,
                                          eps=eps)
    return tuple(_or_empty(x, q) for x in g[:7])


@focused_attention_backward.register_fake
def _(q, k, v, d_out, conv, conv_bias, softplus_param, focus, variant, map, p, eps):
    return tuple(_empty(q) if x is None else _like(x)
                 for x in (q, k, v, conv, conv_bias, softplus_param, focus))


# ---------------------------------------------------------------------------
@torch.library.custom_op(LIB + "::mhla_backward", mutates_args=())
def mhla_backward(q: Tensor, k: Tensor, v: Tensor, mixing: Tensor, d_out: Tensor,
                  grid: List[int], blocks: List[int], feature: str, normalize: str, eps: float,
                  scale: float) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    return tuple(_bwd().mhla_backward(q, k, v, mixing, d_out, grid=tuple(grid) or None,
                                      blocks=tuple(blocks), feature=feature,
                                      normalize=normalize, eps=eps, scale=scale)[:4])


@mhla_backward.register_fake
def _(q, k, v, mixing, d_out, grid, blocks, feature, normalize, eps, scale):
    return _like(q), _like(k), _like(v), _like(mixing)


@torch.library.custom_op(LIB + "::mhla_causal_backward", mutates_args=())
def mhla_causal_backward(q: Tensor, k: Tensor, v: Tensor, mixing: Tensor, d_out: Tensor,
                         chunk: int, feature: str, normalize: str, eps: float,
                         scale: Optional[float], cu_seqlens: Optional[Tensor]
                         ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    B = _bwd()
    opts = dict(chunk=chunk, feature=feature, normalize=normalize, eps=eps, scale=scale)
    if cu_seqlens is None:
        return tuple(B.mhla_causal_backward(q, k, v, mixing, d_out, **opts)[:4])
    dW = torch.zeros_like(mixing)
    parts = [[], [], []]
    for s, e in _varlen.bounds(cu_seqlens, q, "mhla_causal backward"):
        if e > s:
            g = B.mhla_causal_backward(q[:, s:e], k[:, s:e], v[:, s:e], mixing, d_out[:, s:e],
                                       **opts)
            for i in range(3):
                parts[i].append(g[i])
            dW += g[3]
    return tuple(torch.cat(p, dim=1) for p in parts) + (dW,)


@mhla_causal_backward.register_fake
def _(q, k, v, mixing, d_out, chunk, feature, normalize, eps, scale, cu_seqlens):
    return _like(q), _like(k), _like(v), _like(mixing)


# ---------------------------------------------------------------------------
@torch.library.custom_op(LIB + "::sparse_attention_backward", mutates_args=())
def sparse_attention_backward(q: Tensor, kv: Tensor, idx: Tensor, out: Tensor, lse: Tensor,
                              d_out: Tensor, dv: int,
                              scale: Optional[float]) -> Tuple[Tensor, Tensor]:
    return tuple(_bwd().sparse_attention_backward(q, kv, idx, out, lse, d_out, dv=dv,
                                                  scale=scale)[:2])


@sparse_attention_backward.register_fake
def _(q, kv, idx, out, lse, d_out, dv, scale):
    return _like(q), _like(kv)
