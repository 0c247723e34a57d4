"""torch.autograd.Function wrappers of the attention operators.

Every differentiable operator has its backward pass: the C library's
la_*_backward through longattn._backward, on the CPU and on CUDA tensors
(shared/TRAINING.md §1). softmax's and sparse attention's lse are returned
detached; linear causal's initial_state (S, z) and the returned final state
are differentiable; mhla / mhla_causal differentiate the mixing (float32
gradient cast to the mixing's dtype); focused: conv, conv_bias,
softplus_param (flatten) or conv, focus (blog).

longattn.softmax_attention & co. use these Functions when an input requires
grad under eager autograd (every torch version; torch >= 2.4 sends tracing,
meta tensors, tensor subclasses and dispatch modes through the torch.library
custom ops of longattn._torch_ops instead). They are kept lean, because their
host time is paid on every training step (shared/TRAINING.md §3): the options
travel as one tuple (no dict per call), the forward calls the operator's
implementation directly, and the backward skips once_differentiable's no_grad
block when grad mode is already off (every backward without create_graph).
"""
import torch

from . import _backward, ops
from .index_ops import _sparse_attention

_once_differentiable = torch.autograd.function.once_differentiable
_grad_enabled = torch.is_grad_enabled
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None)


def _applier(cls):
    """cls.apply, calling torch's C-level apply directly outside functorch
    transforms: since torch 2.0 Function.apply is a Python wrapper whose
    extra work there (binding setup_context defaults: these Functions have
    none; unwrapping tensors that escaped a functorch transform) costs about
    2 µs per call. Under a functorch transform it is cls.apply itself."""
    desc = getattr(torch._C, "_FunctionBase", object).__dict__.get("apply")
    if desc is None or _functorch_active is None:
        return cls.apply
    c_apply = desc.__get__(None, cls)
    py_apply = cls.apply

    def apply(*args):
        if _functorch_active():
            return py_apply(*args)
        return c_apply(*args)
    return apply


def _once(backward):
    """backward(ctx, *grads) with once_differentiable's semantics: with
    create_graph (grad mode on inside the backward) through
    once_differentiable (no graph of the backward; a second backward raises),
    else directly (the same computation, without the no_grad block)."""
    slow = _once_differentiable(backward)

    def run(ctx, *grads):
        if _grad_enabled():
            return slow(ctx, *grads)
        return backward(ctx, *grads)
    run.__doc__ = backward.__doc__
    run.__name__ = backward.__name__
    return run


class SoftmaxAttentionFunction(torch.autograd.Function):
    """forward(ctx, opts, q, k, v) -> out, or (out, lse) when opts[2];
    opts = (causal, scale, return_lse). lse is not differentiable (as
    flash-attn)."""

    op = "softmax_attention"

    @staticmethod
    def forward(ctx, opts, q, k, v):
        causal, scale, want_lse = opts
        out, lse = ops._softmax_attention(q, k, v, causal, scale, True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.opts = opts
        ctx.mark_non_differentiable(lse)
        return (out, lse) if want_lse else out

    @staticmethod
    @_once
    def backward(ctx, d_out, *unused):
        q, k, v, out, lse = ctx.saved_tensors
        causal, scale, _ = ctx.opts
        dq, dk, dv = _backward.softmax_attention_backward(
            q, k, v, out, lse, d_out, causal, scale, ctx.needs_input_grad[1:4])
        return None, dq, dk, dv


class LinearAttentionFunction(torch.autograd.Function):
    """forward(ctx, opts, q, k, v, S0, z0) -> out, or out, S1, z1 when
    output_final_state (regrouped by linear_attention below); opts =
    (feature, causal, normalize, eps, scale, chunk, output_final_state)."""

    op = "linear_attention"

    @staticmethod
    def forward(ctx, opts, q, k, v, S0, z0):
        res = ops._linear_attention(q, k, v, S0, z0, *opts)
        ctx.opts = opts
        if opts[6]:
            out, (S1, z1) = res
            ctx.save_for_backward(q, k, v, S0, z0, out)
            return out, S1, z1
        ctx.save_for_backward(q, k, v, S0, z0, res)
        return res

    @staticmethod
    @_once
    def backward(ctx, d_out, dS1=None, dz1=None):
        q, k, v, S0, z0, out = ctx.saved_tensors
        feature, causal, normalize, eps, scale, chunk, _ = ctx.opts
        init = None if S0 is None else (S0, z0)
        d_final = None if dS1 is None and dz1 is None else (dS1, dz1)
        dq, dk, dv, dS0, dz0 = _backward.linear_attention_backward(
            q, k, v, d_out, feature, causal, normalize, eps, scale, chunk, init, d_final,
            ctx.needs_input_grad[1:6], out)
        if z0 is None:
            dz0 = None
        return None, dq, dk, dv, dS0, dz0


class FocusedAttentionFunction(torch.autograd.Function):
    """forward(ctx, opts, q, k, v, conv, conv_bias, softplus_param, focus);
    opts = (variant, map, p, eps)."""

    op = "focused_attention"

    @staticmethod
    def forward(ctx, opts, q, k, v, conv, conv_bias, softplus_param, focus):
        variant, map_, p, eps = opts
        out = ops._focused_attention(q, k, v, conv, conv_bias, softplus_param, focus, variant,
                                     map_, p, eps)
        ctx.save_for_backward(q, k, v, conv, conv_bias, softplus_param, focus)
        ctx.opts = opts
        return out

    @staticmethod
    @_once
    def backward(ctx, d_out):
        q, k, v, conv, conv_bias, softplus_param, focus = ctx.saved_tensors
        variant, map_, p, eps = ctx.opts
        grads = _backward.focused_attention_backward(
            q, k, v, d_out, variant, map_, conv, conv_bias, softplus_param, p, focus, eps,
            ctx.needs_input_grad[1:8])
        return (None,) + grads


class MHLAFunction(torch.autograd.Function):
    """forward(ctx, opts, q, k, v, mixing); opts = (grid, blocks, feature,
    normalize, eps, scale)."""

    op = "mhla"

    @staticmethod
    def forward(ctx, opts, q, k, v, mixing):
        out = ops._mhla(q, k, v, mixing, *opts)
        ctx.save_for_backward(q, k, v, mixing, out)
        ctx.opts = opts
        return out

    @staticmethod
    @_once
    def backward(ctx, d_out):
        q, k, v, mixing, out = ctx.saved_tensors
        grid, blocks, feature, normalize, eps, scale = ctx.opts
        dq, dk, dv, dW = _backward.mhla_backward(q, k, v, mixing, d_out, grid, blocks, feature,
                                                 normalize, eps, scale,
                                                 ctx.needs_input_grad[1:5], out)
        if dW is not None and dW.dtype != mixing.dtype:
            dW = dW.to(mixing.dtype)
        return None, dq, dk, dv, dW


class MHLACausalFunction(torch.autograd.Function):
    """forward(ctx, opts, q, k, v, mixing); opts = (chunk, feature,
    normalize, eps, scale). The upper triangle of mixing gets zero gradient."""

    op = "mhla_causal"

    @staticmethod
    def forward(ctx, opts, q, k, v, mixing):
        out = ops._mhla_causal(q, k, v, mixing, *opts)
        ctx.save_for_backward(q, k, v, mixing)
        ctx.opts = opts
        return out

    @staticmethod
    @_once
    def backward(ctx, d_out):
        q, k, v, mixing = ctx.saved_tensors
        chunk, feature, normalize, eps, scale = ctx.opts
        dq, dk, dv, dW = _backward.mhla_causal_backward(q, k, v, mixing, d_out, chunk, feature,
                                                        normalize, eps, scale,
                                                        ctx.needs_input_grad[1:5])
        if dW is not None and dW.dtype != mixing.dtype:
            dW = dW.to(mixing.dtype)
        return None, dq, dk, dv, dW


class SparseAttentionFunction(torch.autograd.Function):
    """forward(ctx, opts, q, kv, idx) -> (out, lse); opts = (dv, scale). lse
    and idx are not differentiable."""

    op = "sparse_attention"

    @staticmethod
    def forward(ctx, opts, q, kv, idx):
        out, lse = _sparse_attention(q, kv, idx, *opts)
        ctx.save_for_backward(q, kv, idx, out, lse)
        ctx.opts = opts
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @_once
    def backward(ctx, d_out, d_lse=None):
        q, kv, idx, out, lse = ctx.saved_tensors
        dv, scale = ctx.opts
        dq, dkv = _backward.sparse_attention_backward(q, kv, idx, out, lse, d_out, dv, scale,
                                                      ctx.needs_input_grad[1:3])
        return None, dq, dkv, None


FUNCTIONS = {
    "softmax_attention": SoftmaxAttentionFunction,
    "linear_attention": LinearAttentionFunction,
    "focused_attention": FocusedAttentionFunction,
    "mhla": MHLAFunction,
    "mhla_causal": MHLACausalFunction,
    "sparse_attention": SparseAttentionFunction,
}


# ---------------------------------------------------------------------------
# the entry points of longattn.ops / index_ops (positional options, in the
# order of each public function's keywords)
# ---------------------------------------------------------------------------
_softmax_apply = _applier(SoftmaxAttentionFunction)
_linear_apply = _applier(LinearAttentionFunction)
_focused_apply = _applier(FocusedAttentionFunction)
_mhla_apply = _applier(MHLAFunction)
_mhla_causal_apply = _applier(MHLACausalFunction)
_sparse_apply = _applier(SparseAttentionFunction)


def softmax_attention(q, k, v, causal, scale, return_lse):
    return _softmax_apply((causal, scale, bool(return_lse)), q, k, v)


def linear_attention(q, k, v, S0, z0, feature, causal, normalize, eps, scale, chunk,
                     output_final_state):
    opts = (feature, causal, normalize, eps, scale, chunk, bool(output_final_state))
    r = _linear_apply(opts, q, k, v, S0, z0)
    return (r[0], (r[1], r[2])) if opts[6] else r


def focused_attention(q, k, v, conv, conv_bias, softplus_param, focus, variant, map, p, eps):
    return _focused_apply((variant, map, p, eps), q, k, v, conv, conv_bias, softplus_param,
                          focus)


def mhla(q, k, v, mixing, grid, blocks, feature, normalize, eps, scale):
    return _mhla_apply((grid, blocks, feature, normalize, eps, scale), q, k, v, mixing)


def mhla_causal(q, k, v, mixing, chunk, feature, normalize, eps, scale):
    return _mhla_causal_apply((chunk, feature, normalize, eps, scale), q, k, v, mixing)


def sparse_attention(q, kv, idx, dv, scale):
    return _sparse_apply((dv, scale), q, kv, idx)


_ENTRY = {
    "softmax_attention": (softmax_attention, ("causal", "scale", "return_lse"),
                          (False, None, False)),
    "linear_attention": (linear_attention, ("feature", "causal", "normalize", "eps", "scale",
                                            "chunk", "output_final_state"),
                         ("relu", False, True, 1e-6, 1.0, 64, False)),
    "focused_attention": (focused_attention, ("variant", "map", "p", "eps"),
                          ("flatten", None, 3.0, 1e-6)),
    "mhla": (mhla, ("grid", "blocks", "feature", "normalize", "eps", "scale"),
             (None, None, "relu_eps", "per_query", 1e-6, 1.0)),
    "mhla_causal": (mhla_causal, ("chunk", "feature", "normalize", "eps", "scale"),
                    (64, "relu", "none", 1e-6, None)),
    "sparse_attention": (sparse_attention, ("dv", "scale"), (512, None)),
}


def apply(op, impl, options, *inputs):
    """op's Function on inputs with the keyword options of the public
    function (a dict); impl is ignored (kept for callers of the earlier
    form: each Function calls its operator's implementation itself)."""
    fn, names, defaults = _ENTRY[op]
    return fn(*inputs, *[options.get(n, d) for n, d in zip(names, defaults)])
