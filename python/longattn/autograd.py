"""torch.autograd.Function wrappers of the attention operators.

The C library has forward passes only (for now). These Functions give the
outputs a grad_fn, so that a training graph that reaches them fails loudly
in backward instead of silently treating the operator as a constant. A
backward pass plugs in by filling `backward` of the class concerned (the
forward saves nothing yet; save what the backward needs in `forward`).

Used automatically by longattn.softmax_attention & co. when torch grad
mode is on and an input requires grad.
"""
import torch


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


class SoftmaxAttentionFunction(_ForwardOnly):
    op = "softmax_attention"

    @staticmethod
    def backward(ctx, *grads):
        SoftmaxAttentionFunction._no_backward()


class LinearAttentionFunction(_ForwardOnly):
    op = "linear_attention"

    @staticmethod
    def backward(ctx, *grads):
        LinearAttentionFunction._no_backward()


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
