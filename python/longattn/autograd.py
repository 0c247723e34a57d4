"""torch.autograd.Function wrappers of the attention operators.

Every differentiable operator has its backward pass: the C library's
la_*_backward through longattn._backward, on the CPU and on CUDA tensors
(shared/TRAINING.md §1). softmax's and sparse attention's lse are returned
detached; linear causal's initial_state (S, z) and the returned final state
are differentiable; mhla / mhla_causal differentiate the mixing (float32
gradient cast to the mixing's dtype); focused: conv, conv_bias,
softplus_param (flatten) or conv, focus (blog).

Used automatically by longattn.softmax_attention & co. when torch grad
mode is on and an input requires grad.
"""
import torch

from . import _backward


class SoftmaxAttentionFunction(torch.autograd.Function):
    """forward(ctx, impl, options, q, k, v) -> out, or (out, lse) when
    options["return_lse"]; lse is not differentiable (as flash-attn)."""

    op = "softmax_attention"

    @staticmethod
    def forward(ctx, impl, options, q, k, v):
        opts = dict(options)
        want_lse = bool(opts.pop("return_lse", False))
        out, lse = impl(q, k, v, return_lse=True, **opts)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.opts = opts
        ctx.mark_non_differentiable(lse)
        return (out, lse) if want_lse else out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, *unused):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward.softmax_attention_backward(
            q, k, v, out, lse, d_out, causal=ctx.opts.get("causal", False),
            scale=ctx.opts.get("scale"), needs=ctx.needs_input_grad[2:5])
        return None, None, dq, dk, dv


class LinearAttentionFunction(torch.autograd.Function):
    """forward(ctx, impl, options, q, k, v, S0, z0) -> out, or out, S1, z1
    when options["output_final_state"] (regrouped by apply)."""

    op = "linear_attention"

    @staticmethod
    def forward(ctx, impl, options, q, k, v, S0, z0):
        res = impl(q, k, v, S0, z0, **options)
        ctx.opts = dict(options)
        if options.get("output_final_state"):
            out, (S1, z1) = res
            ctx.save_for_backward(q, k, v, S0, z0, out)
            return out, S1, z1
        ctx.save_for_backward(q, k, v, S0, z0, res)
        return res

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, dS1=None, dz1=None):
        q, k, v, S0, z0, out = ctx.saved_tensors
        o = ctx.opts
        init = None if S0 is None else (S0, z0)
        d_final = None if dS1 is None and dz1 is None else (dS1, dz1)
        needs = ctx.needs_input_grad[2:7]
        dq, dk, dv, dS0, dz0 = _backward.linear_attention_backward(
            q, k, v, d_out, feature=o.get("feature", "relu"), causal=o.get("causal", False),
            normalize=o.get("normalize", True), eps=o.get("eps", 1e-6),
            scale=o.get("scale", 1.0), chunk=o.get("chunk", 64), initial_state=init,
            d_final_state=d_final, needs=needs, out=out)
        if z0 is None:
            dz0 = None
        return None, None, dq, dk, dv, dS0, dz0


class FocusedAttentionFunction(torch.autograd.Function):
    """forward(ctx, impl, options, q, k, v, conv, conv_bias, softplus_param, focus)."""

    op = "focused_attention"

    @staticmethod
    def forward(ctx, impl, options, q, k, v, conv, conv_bias, softplus_param, focus):
        out = impl(q, k, v, conv, conv_bias, softplus_param, focus, **options)
        ctx.save_for_backward(q, k, v, conv, conv_bias, softplus_param, focus)
        ctx.opts = dict(options)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out):
        q, k, v, conv, conv_bias, softplus_param, focus = ctx.saved_tensors
        o = ctx.opts
        grads = _backward.focused_attention_backward(
            q, k, v, d_out, variant=o.get("variant", "flatten"), map=o.get("map"), conv=conv,
            conv_bias=conv_bias, softplus_param=softplus_param, p=o.get("p", 3.0), focus=focus,
            eps=o.get("eps", 1e-6), needs=ctx.needs_input_grad[2:9])
        return (None, None) + tuple(grads)


class MHLAFunction(torch.autograd.Function):
    """forward(ctx, impl, options, q, k, v, mixing)."""

    op = "mhla"

    @staticmethod
    def forward(ctx, impl, options, q, k, v, mixing):
        out = impl(q, k, v, mixing, **options)
        ctx.save_for_backward(q, k, v, mixing, out)
        ctx.opts = dict(options)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out):
        q, k, v, mixing, out = ctx.saved_tensors
        dq, dk, dv, dW = _backward.mhla_backward(q, k, v, mixing, d_out, **ctx.opts,
                                                 needs=ctx.needs_input_grad[2:6], out=out)
        if dW is not None and dW.dtype != mixing.dtype:
            dW = dW.to(mixing.dtype)
        return None, None, dq, dk, dv, dW


class MHLACausalFunction(torch.autograd.Function):
    """forward(ctx, impl, options, q, k, v, mixing); the upper triangle of
    mixing gets zero gradient."""

    op = "mhla_causal"

    @staticmethod
    def forward(ctx, impl, options, q, k, v, mixing):
        out = impl(q, k, v, mixing, **options)
        ctx.save_for_backward(q, k, v, mixing)
        ctx.opts = dict(options)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out):
        q, k, v, mixing = ctx.saved_tensors
        dq, dk, dv, dW = _backward.mhla_causal_backward(q, k, v, mixing, d_out, **ctx.opts,
                                                        needs=ctx.needs_input_grad[2:6])
        if dW is not None and dW.dtype != mixing.dtype:
            dW = dW.to(mixing.dtype)
        return None, None, dq, dk, dv, dW


class SparseAttentionFunction(torch.autograd.Function):
    """forward(ctx, impl, options, q, kv, idx) -> (out, lse); lse and idx
    are not differentiable."""

    op = "sparse_attention"

    @staticmethod
    def forward(ctx, impl, options, q, kv, idx):
        out, lse = impl(q, kv, idx, **options)
        ctx.save_for_backward(q, kv, idx, out, lse)
        ctx.opts = dict(options)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, d_lse=None):
        q, kv, idx, out, lse = ctx.saved_tensors
        dq, dkv = _backward.sparse_attention_backward(q, kv, idx, out, lse, d_out, **ctx.opts,
                                                      needs=ctx.needs_input_grad[2:4])
        return None, None, dq, dkv, None


FUNCTIONS = {
    "softmax_attention": SoftmaxAttentionFunction,
    "linear_attention": LinearAttentionFunction,
    "focused_attention": FocusedAttentionFunction,
    "mhla": MHLAFunction,
    "mhla_causal": MHLACausalFunction,
    "sparse_attention": SparseAttentionFunction,
}


def apply(op, impl, options, *inputs):
    """Run impl through the Function of `op`; rebuild the op's return shape."""
    flat = FUNCTIONS[op].apply(impl, options, *inputs)
    if not isinstance(flat, tuple):
        return flat
    # regroup like impl's result: out, (out, lse) or (out, (S, z))
    if op == "linear_attention":
        return flat[0], (flat[1], flat[2])
    return flat
