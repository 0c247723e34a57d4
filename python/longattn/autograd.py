"""torch.autograd.Function wrappers of the attention operators.

softmax_attention and linear_attention have backward passes (the C library's
la_*_backward through longattn._backward, on the CPU and on CUDA tensors;
shared/TRAINING.md §1): softmax's lse is returned detached, linear causal's
initial_state (S, z) and the returned final state are differentiable. The
other operators are still forward-only: their Functions give the outputs a
grad_fn so that a training graph that reaches them fails loudly in backward
instead of silently treating the operator as a constant.

Used automatically by longattn.softmax_attention & co. when torch grad
mode is on and an input requires grad.
"""
import torch

from . import _backward


class _ForwardOnly(torch.autograd.Function):
    """forward(ctx, op, impl, options, *inputs): outputs = impl(*inputs, **options)."""

    op = "?"

    @staticmethod
    def forward(ctx, impl, options, *inputs):
        outs = impl(*inputs, **options)
        flat = []
        for o in outs if isinstance(outs, tuple) else (outs,):
            if isinstance(o, tuple):  # linear attention's (S, z) final state
                flat.extend(o)
            else:
                flat.append(o)
        ctx.mark_non_differentiable(*[o for o in flat[1:] if o is not None])
        return tuple(flat) if len(flat) > 1 else flat[0]

    @classmethod
    def _no_backward(cls):
        raise NotImplementedError(
            "longattn.%s: backward is not implemented yet (the C library provides the "
            "forward pass only). Run it under torch.no_grad() / on detached inputs for "
            "inference, or use a PyTorch reference implementation for training." % cls.op)


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
        ctx.save_for_backward(q, k, v, S0, z0)
        ctx.opts = dict(options)
        if options.get("output_final_state"):
            out, (S1, z1) = res
            return out, S1, z1
        return res

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, dS1=None, dz1=None):
        q, k, v, S0, z0 = ctx.saved_tensors
        o = ctx.opts
        init = None if S0 is None else (S0, z0)
        d_final = None if dS1 is None and dz1 is None else (dS1, dz1)
        needs = ctx.needs_input_grad[2:7]
        dq, dk, dv, dS0, dz0 = _backward.linear_attention_backward(
            q, k, v, d_out, feature=o.get("feature", "relu"), causal=o.get("causal", False),
            normalize=o.get("normalize", True), eps=o.get("eps", 1e-6),
            scale=o.get("scale", 1.0), chunk=o.get("chunk", 64), initial_state=init,
            d_final_state=d_final, needs=needs)
        if z0 is None:
            dz0 = None
        return None, None, dq, dk, dv, dS0, dz0


class FocusedAttentionFunction(_ForwardOnly):
    op = "focused_attention"

    @staticmethod
    def backward(ctx, *grads):
        FocusedAttentionFunction._no_backward()


class MHLAFunction(_ForwardOnly):
    op = "mhla"

    @staticmethod
    def backward(ctx, *grads):
        MHLAFunction._no_backward()


class MHLACausalFunction(_ForwardOnly):
    op = "mhla_causal"

    @staticmethod
    def backward(ctx, *grads):
        MHLACausalFunction._no_backward()


class SparseAttentionFunction(_ForwardOnly):
    op = "sparse_attention"

    @staticmethod
    def backward(ctx, *grads):
        SparseAttentionFunction._no_backward()


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
