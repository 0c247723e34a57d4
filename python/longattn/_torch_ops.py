"""The operators as torch.library custom ops in the namespace `longattn`
(shared/TRAINING.md §3), for torch >= 2.4.

    torch.ops.longattn.softmax_attention, .linear_attention, .focused_attention,
    .mhla, .mhla_causal, .sparse_attention, .dsa_topk, .hisa_topk,
    .blocksparse_topk, .topk

Each has a fake (meta) implementation giving the output shapes and dtypes
without running, so torch.compile(fullgraph=True) traces through them; the
attention ops have a registered autograd formula calling the C backward
passes (longattn._backward) through backward custom ops of their own
(longattn._torch_bwd_ops), so that AOT autograd traces the backward too.
The real implementation is the C call of longattn.ops, on torch's current
stream (CUDA graphs capture it).

longattn.softmax_attention & co. route through these ops when a tracer
must see them: under torch.compile / export tracing, for meta tensors, and
for autograd-recording calls with tensor subclasses (FakeTensor, ...), under
a TorchDispatchMode (make_fx) or torch.jit tracing (route()). Eager calls
take the direct path (longattn.ops; with autograd, longattn.autograd's
Functions), which costs less per call. On torch < 2.4 nothing here is
registered and longattn.autograd's Functions are used.

Not custom ops: the stateful MHLADecoder / IndexCache, mhla_init /
mhla_project (parameter helpers, not graph ops) and attention_map (an
analysis returning Python numbers).
"""
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import index_ops, ops
from . import _varlen
from . import _torch_bwd_ops  # noqa: F401 (registers longattn::*_backward)

LIB = "longattn"


def supported() -> bool:
    v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return v >= (2, 4) and hasattr(torch.library, "custom_op")


_PLAIN = (Tensor, torch.nn.Parameter)
_DIRECT, _AUTOGRAD, _CUSTOM_OP = ops.DIRECT, ops.AUTOGRAD, ops.CUSTOM_OP
# the depth of the TorchDispatchMode stack (make_fx, FakeTensorMode, ...) and
# torch.jit's tracing state: raw queries, looked up once
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None) or (lambda: 0)
_jit_tracing = getattr(torch._C, "_get_tracing_state", None) or (lambda: None)


def route(*xs) -> int:
    """How a call with these tensors runs (longattn.ops.DIRECT / AUTOGRAD /
    CUSTOM_OP): through the custom ops under torch.compile / export tracing,
    for meta tensors, and, when autograd records the call, for tensor
    subclasses other than Parameter (FakeTensor, FunctionalTensor, ...),
    under a TorchDispatchMode (make_fx, FakeTensorMode) or torch.jit tracing:
    wherever a tracer must see the op. Eager autograd of plain tensors takes
    longattn.autograd's Functions (AUTOGRAD: the same C forward and backward
    with less host time per step than the custom-op layers), the rest the
    direct call."""
    if torch.compiler.is_compiling():
        return _CUSTOM_OP
    recording = False
    plain = True
    grad = torch.is_grad_enabled()
    for x in xs:
        if isinstance(x, Tensor):
            if x.is_meta:
                return _CUSTOM_OP
            if type(x) not in _PLAIN:
                plain = False
            if grad and x.requires_grad:
                recording = True
    if not recording:
        return _DIRECT
    if not plain or _dispatch_modes() > 0 or _jit_tracing() is not None:
        return _CUSTOM_OP
    return _AUTOGRAD


def active(*xs) -> bool:
    """Whether a call with these tensors goes through the custom ops (route)."""
    return route(*xs) == _CUSTOM_OP


def tracing(*xs) -> bool:
    """active() without the autograd condition (ops with integer outputs)."""
    if torch.compiler.is_compiling():
        return True
    for x in xs:
        if isinstance(x, Tensor) and x.is_meta:
            return True
    return False


def _f(x):
    return None if x is None else float(x)


def _ints(dims, what):
    return [] if dims is None else list(ops._dims(dims, what))


# Entry points used by longattn.ops / index_ops: the public keyword options
# turned into the ops' schema arguments, results shaped as the public API's.
def call_softmax_attention(q, k, v, causal, scale, return_lse, cu_seqlens):
    out, lse = torch.ops.longattn.softmax_attention(q, k, v, bool(causal), _f(scale),
                                                    cu_seqlens)
    return (out, lse) if return_lse else out


def call_linear_attention(q, k, v, S0, z0, cu_seqlens, feature="relu", causal=False,
                          normalize=True, eps=1e-6, scale=1.0, chunk=64,
                          output_final_state=False):
    out, S1, z1 = torch.ops.longattn.linear_attention(
        q, k, v, S0, z0, str(feature), bool(causal), bool(normalize), float(eps), float(scale),
        int(chunk), bool(output_final_state), cu_seqlens)
    return (out, (S1, z1)) if output_final_state else out


def call_focused_attention(q, k, v, conv, conv_bias, softplus_param, focus, variant="flatten",
                           map=None, p=3.0, eps=1e-6):
    return torch.ops.longattn.focused_attention(
        q, k, v, conv, conv_bias, softplus_param, focus, str(variant),
        _ints(map, "focused_attention: map"), float(p), float(eps))


def call_mhla(q, k, v, mixing, grid=None, blocks=None, feature="relu_eps",
              normalize="per_query", eps=1e-6, scale=1.0):
    if blocks is None:  # 1-D: M from the mixing matrix, as the direct path
        blocks = mixing.shape[-1]
    return torch.ops.longattn.mhla(q, k, v, mixing, _ints(grid, "mhla: grid"),
                                   _ints(blocks, "mhla: blocks"), str(feature), str(normalize),
                                   float(eps), float(scale))


def call_mhla_causal(q, k, v, mixing, cu_seqlens, chunk=64, feature="relu", normalize="none",
                     eps=1e-6, scale=None):
    return torch.ops.longattn.mhla_causal(q, k, v, mixing, int(chunk), str(feature),
                                          str(normalize), float(eps), _f(scale), cu_seqlens)


def call_sparse_attention(q, kv, idx, dv, scale):
    return torch.ops.longattn.sparse_attention(q, kv, idx, int(dv), _f(scale))


def call_dsa_topk(q, k, w, topk, start, end, return_scores, k_scale, q_scale):
    idx, sc = torch.ops.longattn.dsa_topk(q, k, w, int(topk), start, end, bool(return_scores),
                                          k_scale, q_scale)
    return (idx, sc) if return_scores else idx


def call_hisa_topk(q, k, w, topk, block, block_topk, start, end, k_scale, q_scale):
    return torch.ops.longattn.hisa_topk(q, k, w, int(topk), int(block), int(block_topk), start,
                                        end, k_scale, q_scale)


def call_blocksparse_topk(q, k, w, topk, block, start, end, k_scale, q_scale):
    return torch.ops.longattn.blocksparse_topk(q, k, w, int(topk), int(block), start, end,
                                               k_scale, q_scale)


def call_topk(scores, k):
    return torch.ops.longattn.topk(scores, int(k))


def _pad(ctx, *grads):
    """The gradients of the leading inputs, None for the remaining ones."""
    n = len(ctx.needs_input_grad)
    return tuple(grads) + (None,) * (n - len(grads))


def _empty(like):
    return like.new_empty((0,), dtype=torch.float32)


def _opt(x):
    """An empty tensor stands for None in an output slot."""
    return None if x is None or x.numel() == 0 else x


# ---------------------------------------------------------------------------
# softmax attention
# ---------------------------------------------------------------------------
@torch.library.custom_op(LIB + "::softmax_attention", mutates_args=())
def softmax_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: Optional[float],
                      cu_seqlens: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    if cu_seqlens is not None:
        return _varlen.softmax(ops._softmax_attention, q, k, v, cu_seqlens, causal, scale, True)
    return ops._softmax_attention(q, k, v, causal=causal, scale=scale, return_lse=True)


@softmax_attention.register_fake
def _(q, k, v, causal, scale, cu_seqlens):
    B, Nq, H, _ = q.shape
    return (q.new_empty((B, Nq, H, v.shape[3])),
            q.new_empty((B, Nq, H), dtype=torch.float32))


def _softmax_setup(ctx, inputs, output):
    q, k, v, causal, scale, cu = inputs
    ctx.save_for_backward(q, k, v, output[0], output[1], cu)
    ctx.mark_non_differentiable(output[1])   # lse: no gradient (TRAINING.md §1)
    ctx.causal, ctx.scale = causal, scale


def _softmax_backward(ctx, d_out, d_lse):
    q, k, v, out, lse, cu = ctx.saved_tensors
    dq, dk, dv = torch.ops.longattn.softmax_attention_backward(
        q, k, v, out, lse, d_out, ctx.causal, ctx.scale, cu)
    return _pad(ctx, dq, dk, dv)


softmax_attention.register_autograd(_softmax_backward, setup_context=_softmax_setup)


# ---------------------------------------------------------------------------
# linear attention
# ---------------------------------------------------------------------------
@torch.library.custom_op(LIB + "::linear_attention", mutates_args=())
def linear_attention(q: Tensor, k: Tensor, v: Tensor, S0: Optional[Tensor], z0: Optional[Tensor],
                     feature: str, causal: bool, normalize: bool, eps: float, scale: float,
                     chunk: int, output_final_state: bool,
                     cu_seqlens: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    opts = dict(feature=feature, causal=causal, normalize=normalize, eps=eps, scale=scale,
                chunk=chunk, output_final_state=output_final_state)
    if cu_seqlens is not None:
        r = _varlen.linear(ops._linear_attention, q, k, v, S0, z0, cu_seqlens, opts)
    else:
        r = ops._linear_attention(q, k, v, S0, z0, **opts)
    if output_final_state:
        return r[0], r[1][0], r[1][1]
    return r, _empty(q), _empty(q)


@linear_attention.register_fake
def _(q, k, v, S0, z0, feature, causal, normalize, eps, scale, chunk, output_final_state,
      cu_seqlens):
    B, N, H, D = q.shape
    out = q.new_empty((B, N, H, v.shape[3]))
    if not output_final_state:
        return out, _empty(q), _empty(q)
    nb = B
    if cu_seqlens is not None:
        nb = cu_seqlens.shape[0] - 1
    return (out, q.new_empty((nb, H, D, v.shape[3]), dtype=torch.float32),
            q.new_empty((nb, H, D), dtype=torch.float32))


def _linear_setup(ctx, inputs, output):
    q, k, v, S0, z0, feature, causal, normalize, eps, scale, chunk, _, cu = inputs
    ctx.save_for_backward(q, k, v, S0, z0, cu)
    ctx.opts = dict(feature=feature, causal=causal, normalize=normalize, eps=eps, scale=scale,
                    chunk=chunk)


def _linear_backward(ctx, d_out, dS1, dz1):
    q, k, v, S0, z0, cu = ctx.saved_tensors
    o = ctx.opts
    dq, dk, dv, dS0, dz0 = torch.ops.longattn.linear_attention_backward(
        q, k, v, d_out, S0, z0, dS1, dz1, o["feature"], o["causal"], o["normalize"], o["eps"],
        o["scale"], o["chunk"], cu)
    return _pad(ctx, dq, dk, dv, (None if S0 is None else dS0), (None if z0 is None else dz0))


linear_attention.register_autograd(_linear_backward, setup_context=_linear_setup)


# ---------------------------------------------------------------------------
# focused attention
# ---------------------------------------------------------------------------
@torch.library.custom_op(LIB + "::focused_attention", mutates_args=())
def focused_attention(q: Tensor, k: Tensor, v: Tensor, conv: Optional[Tensor],
                      conv_bias: Optional[Tensor], softplus_param: Optional[Tensor],
                      focus: Optional[Tensor], variant: str, map: List[int], p: float,
                      eps: float) -> Tensor:
    return ops._focused_attention(q, k, v, conv, conv_bias, softplus_param, focus,
                                  variant=variant, map=tuple(map), p=p, eps=eps)


@focused_attention.register_fake
def _(q, k, v, conv, conv_bias, softplus_param, focus, variant, map, p, eps):
    B, N, H, _ = q.shape
    return q.new_empty((B, N, H, v.shape[3]))


def _focused_setup(ctx, inputs, output):
    q, k, v, conv, conv_bias, sp, focus, variant, map, p, eps = inputs
    ctx.save_for_backward(q, k, v, conv, conv_bias, sp, focus)
    ctx.opts = dict(variant=variant, map=tuple(map), p=p, eps=eps)


def _focused_backward(ctx, d_out):
    q, k, v, conv, conv_bias, sp, focus = ctx.saved_tensors
    o = ctx.opts
    g = torch.ops.longattn.focused_attention_backward(
        q, k, v, d_out, conv, conv_bias, sp, focus, o["variant"], list(o["map"]), o["p"],
        o["eps"])
    given = (q, k, v, conv, conv_bias, sp, focus)
    return _pad(ctx, *(None if x is None else d for x, d in zip(given, g)))


focused_attention.register_autograd(_focused_backward, setup_context=_focused_setup)


# ---------------------------------------------------------------------------
# MHLA (non-causal and causal)
# ---------------------------------------------------------------------------
@torch.library.custom_op(LIB + "::mhla", mutates_args=())
def mhla(q: Tensor, k: Tensor, v: Tensor, mixing: Tensor, grid: List[int], blocks: List[int],
         feature: str, normalize: str, eps: float, scale: float) -> Tensor:
    return ops._mhla(q, k, v, mixing, grid=tuple(grid) or None, blocks=tuple(blocks),
                     feature=feature, normalize=normalize, eps=eps, scale=scale)


@mhla.register_fake
def _(q, k, v, mixing, grid, blocks, feature, normalize, eps, scale):
    B, N, H, _ = q.shape
    return q.new_empty((B, N, H, v.shape[3]))


def _mhla_setup(ctx, inputs, output):
    q, k, v, mixing, grid, blocks, feature, normalize, eps, scale = inputs
    ctx.save_for_backward(q, k, v, mixing)
    ctx.opts = dict(grid=list(grid), blocks=list(blocks), feature=feature,
                    normalize=normalize, eps=eps, scale=scale)


def _mhla_backward(ctx, d_out):
    q, k, v, mixing = ctx.saved_tensors
    o = ctx.opts
    g = torch.ops.longattn.mhla_backward(q, k, v, mixing, d_out, o["grid"], o["blocks"],
                                         o["feature"], o["normalize"], o["eps"], o["scale"])
    return _pad(ctx, *g)


mhla.register_autograd(_mhla_backward, setup_context=_mhla_setup)


@torch.library.custom_op(LIB + "::mhla_causal", mutates_args=())
def mhla_causal(q: Tensor, k: Tensor, v: Tensor, mixing: Tensor, chunk: int, feature: str,
                normalize: str, eps: float, scale: Optional[float],
                cu_seqlens: Optional[Tensor]) -> Tensor:
    opts = dict(chunk=chunk, feature=feature, normalize=normalize, eps=eps, scale=scale)
    if cu_seqlens is not None:
        return _varlen.mhla_causal(ops._mhla_causal, q, k, v, mixing, cu_seqlens, opts)
    return ops._mhla_causal(q, k, v, mixing, **opts)


@mhla_causal.register_fake
def _(q, k, v, mixing, chunk, feature, normalize, eps, scale, cu_seqlens):
    B, N, H, _ = q.shape
    return q.new_empty((B, N, H, v.shape[3]))


def _mhla_causal_setup(ctx, inputs, output):
    q, k, v, mixing, chunk, feature, normalize, eps, scale, cu = inputs
    ctx.save_for_backward(q, k, v, mixing, cu)
    ctx.opts = dict(chunk=chunk, feature=feature, normalize=normalize, eps=eps, scale=scale)


def _mhla_causal_backward(ctx, d_out):
    q, k, v, mixing, cu = ctx.saved_tensors
    o = ctx.opts
    g = torch.ops.longattn.mhla_causal_backward(q, k, v, mixing, d_out, o["chunk"],
                                                o["feature"], o["normalize"], o["eps"],
                                                o["scale"], cu)
    return _pad(ctx, *g)


mhla_causal.register_autograd(_mhla_causal_backward, setup_context=_mhla_causal_setup)


# ---------------------------------------------------------------------------
# sparse attention
# ---------------------------------------------------------------------------
@torch.library.custom_op(LIB + "::sparse_attention", mutates_args=())
def sparse_attention(q: Tensor, kv: Tensor, idx: Tensor, dv: int,
                     scale: Optional[float]) -> Tuple[Tensor, Tensor]:
    return index_ops._sparse_attention(q, kv, idx, dv=dv, scale=scale)


@sparse_attention.register_fake
def _(q, kv, idx, dv, scale):
    T, Hq = q.shape[0], q.shape[1]
    return q.new_empty((T, Hq, dv)), q.new_empty((T, Hq), dtype=torch.float32)


def _sparse_setup(ctx, inputs, output):
    q, kv, idx, dv, scale = inputs
    ctx.save_for_backward(q, kv, idx, output[0], output[1])
    ctx.mark_non_differentiable(output[1])   # lse: no gradient (TRAINING.md §1)
    ctx.dv, ctx.scale = dv, scale


def _sparse_backward(ctx, d_out, d_lse):
    q, kv, idx, out, lse = ctx.saved_tensors
    dq, dkv = torch.ops.longattn.sparse_attention_backward(q, kv, idx, out, lse, d_out, ctx.dv,
                                                           ctx.scale)
    return _pad(ctx, dq, dkv)


sparse_attention.register_autograd(_sparse_backward, setup_context=_sparse_setup)


# ---------------------------------------------------------------------------
# indexers and top-k (integer outputs: no autograd)
# ---------------------------------------------------------------------------
@torch.library.custom_op(LIB + "::dsa_topk", mutates_args=())
def dsa_topk(q: Tensor, k: Tensor, w: Tensor, topk: int, start: Optional[Tensor],
             end: Optional[Tensor], return_scores: bool, k_scale: Optional[Tensor],
             q_scale: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    r = index_ops.dsa_topk(q, k, w, topk, start, end, return_scores, k_scale, q_scale)
    return r if return_scores else (r, _empty(q))


@dsa_topk.register_fake
def _(q, k, w, topk, start, end, return_scores, k_scale, q_scale):
    T = q.shape[0]
    idx = q.new_empty((T, topk), dtype=torch.int32)
    sc = q.new_empty((T, k.shape[0]), dtype=torch.float32) if return_scores else _empty(q)
    return idx, sc


@torch.library.custom_op(LIB + "::hisa_topk", mutates_args=())
def hisa_topk(q: Tensor, k: Tensor, w: Tensor, topk: int, block: int, block_topk: int,
              start: Optional[Tensor], end: Optional[Tensor], k_scale: Optional[Tensor],
              q_scale: Optional[Tensor]) -> Tensor:
    return index_ops.hisa_topk(q, k, w, topk, block, block_topk, start, end, k_scale, q_scale)


@hisa_topk.register_fake
def _(q, k, w, topk, block, block_topk, start, end, k_scale, q_scale):
    return q.new_empty((q.shape[0], topk), dtype=torch.int32)


@torch.library.custom_op(LIB + "::blocksparse_topk", mutates_args=())
def blocksparse_topk(q: Tensor, k: Tensor, w: Tensor, topk: int, block: int,
                     start: Optional[Tensor], end: Optional[Tensor], k_scale: Optional[Tensor],
                     q_scale: Optional[Tensor]) -> Tensor:
    return index_ops.blocksparse_topk(q, k, w, topk, block, start, end, k_scale, q_scale)


@blocksparse_topk.register_fake
def _(q, k, w, topk, block, start, end, k_scale, q_scale):
    return q.new_empty((q.shape[0], topk), dtype=torch.int32)


@torch.library.custom_op(LIB + "::topk", mutates_args=())
def topk(scores: Tensor, k: int) -> Tensor:
    return index_ops.topk(scores, k)


@topk.register_fake
def _(scores, k):
    return scores.new_empty((scores.shape[0], k), dtype=torch.int32)
