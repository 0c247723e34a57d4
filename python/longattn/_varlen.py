"""Packed variable-length batches (shared/TRAINING.md §4): `cu_seqlens`.

B = 1 and the tokens of all sequences are packed along N; cu_seqlens is an
int32 [nseq + 1] vector of prefix sums (0, n0, n0 + n1, ..., N), as in
flash-attn's varlen functions and fla's `cu_seqlens`. Each sequence is
computed as if alone.

First implementation: a loop over the sequences, one C call per sequence
on the [1, n_i, H, D] slice (a view, no copy of the inputs), the outputs
concatenated along N. The sequence bounds are read on the host, so a CUDA
cu_seqlens costs one device-to-host copy (a synchronization: such calls
cannot be captured in a CUDA graph; pass cu_seqlens on the CPU to avoid
it). Zero-length sequences are allowed (no call; a causal linear-attention
final state is then the initial state).
"""
from ._tensor import is_numpy, is_torch, _torch

import numpy as np


def bounds(cu_seqlens, q, op):
    """[(start, end), ...] of the sequences, validated against q [1, N, ...]."""
    if not (is_numpy(cu_seqlens) or is_torch(cu_seqlens)):
        raise TypeError("%s: cu_seqlens: expected an int32 numpy.ndarray or torch.Tensor, got %s"
                        % (op, type(cu_seqlens).__name__))
    if str(cu_seqlens.dtype).replace("torch.", "") != "int32":
        raise ValueError("%s: cu_seqlens: dtype %s, expected int32" % (op, cu_seqlens.dtype))
    if cu_seqlens.ndim != 1 or tuple(cu_seqlens.shape)[0] < 2:
        raise ValueError("%s: cu_seqlens: shape %s, expected [nseq + 1] with nseq >= 1"
                         % (op, tuple(cu_seqlens.shape)))
    shape = tuple(getattr(q, "shape", ()))
    if len(shape) != 4 or shape[0] != 1:
        raise ValueError("%s: with cu_seqlens, q must be [1, N, H, D] (sequences packed along "
                         "N), got %s" % (op, shape))
    cu = [int(x) for x in cu_seqlens.tolist()]
    N = shape[1]
    if cu[0] != 0 or cu[-1] != N or any(b < a for a, b in zip(cu, cu[1:])):
        raise ValueError("%s: cu_seqlens %s must start at 0, never decrease and end at N = %d"
                         % (op, cu if len(cu) <= 12 else cu[:6] + ["..."] + cu[-6:], N))
    return list(zip(cu[:-1], cu[1:]))


def _cat(parts, like, shape_tail, dtype=None):
    """Concatenate along axis 1 ([1, n_i, ...] parts); an empty list gives a
    [1, 0, ...] array like `like`."""
    if is_torch(like):
        torch = _torch()
        if not parts:
            return like.new_empty((1, 0) + tuple(shape_tail), dtype=dtype)
        return torch.cat(parts, dim=1)
    if not parts:
        return np.empty((1, 0) + tuple(shape_tail), dtype=dtype or like.dtype)
    return np.concatenate(parts, axis=1)


def _stack(parts, like):
    if is_torch(like):
        return _torch().cat(parts, dim=0)
    return np.concatenate(parts, axis=0)


def softmax(fn, q, k, v, cu_seqlens, causal, scale, return_lse):
    """fn(q_i, k_i, v_i, causal=, scale=, return_lse=True) per sequence."""
    seqs = bounds(cu_seqlens, q, "softmax_attention")
    if tuple(k.shape)[:2] != tuple(q.shape)[:2] or tuple(v.shape)[:2] != tuple(q.shape)[:2]:
        raise ValueError("softmax_attention: with cu_seqlens, q, k and v are packed alike: "
                         "[1, N] leading dims, got q %s, k %s, v %s"
                         % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    outs, lses = [], []
    for s, e in seqs:
        if e > s:
            o, lse = fn(q[:, s:e], k[:, s:e], v[:, s:e], causal=causal, scale=scale,
                        return_lse=True)
            outs.append(o)
            lses.append(lse)
    H, Dv = q.shape[2], v.shape[3]
    out = _cat(outs, q, (H, Dv))
    if not return_lse:
        return out
    f32 = _torch().float32 if is_torch(q) else np.float32
    return out, _cat(lses, q, (H,), f32)


def linear(fn, q, k, v, S0, z0, cu_seqlens, opts):
    """fn(q_i, k_i, v_i, S0_i, z0_i, **opts) per sequence (causal only);
    initial / final states are [nseq, H, D, Dv] and [nseq, H, D]."""
    if not opts.get("causal"):
        raise ValueError("linear_attention: cu_seqlens needs causal=True (a non-causal pass "
                         "over packed sequences is one call per sequence of the same kind)")
    seqs = bounds(cu_seqlens, q, "linear_attention")
    nseq = len(seqs)
    for name, st in (("initial_state[0] (S)", S0), ("initial_state[1] (z)", z0)):
        if st is not None and tuple(st.shape)[:1] != (nseq,):
            raise ValueError("linear_attention: %s has shape %s, expected [nseq = %d, ...] "
                             "with cu_seqlens" % (name, tuple(st.shape), nseq))
    want_state = opts.get("output_final_state", False)
    outs, Ss, zs = [], [], []
    H, D, Dv = q.shape[2], q.shape[3], v.shape[3]
    for i, (s, e) in enumerate(seqs):
        S0i = None if S0 is None else S0[i:i + 1]
        z0i = None if z0 is None else z0[i:i + 1]
        if e == s:
            if want_state:
                Ss.append(_zeros_like_state(q, (1, H, D, Dv)) if S0i is None else S0i)
                zs.append(_zeros_like_state(q, (1, H, D)) if z0i is None else z0i)
            continue
        r = fn(q[:, s:e], k[:, s:e], v[:, s:e], S0i, z0i, **opts)
        if want_state:
            o, (S1, z1) = r
            Ss.append(S1)
            zs.append(z1)
        else:
            o = r
        outs.append(o)
    out = _cat(outs, q, (H, Dv))
    if want_state:
        return out, (_stack(Ss, q), _stack(zs, q))
    return out


def _zeros_like_state(like, shape):
    if is_torch(like):
        return _torch().zeros(shape, dtype=_torch().float32, device=like.device)
    return np.zeros(shape, dtype=np.float32)


def mhla_causal(fn, q, k, v, mixing, cu_seqlens, opts):
    """fn(q_i, k_i, v_i, mixing, **opts) per sequence."""
    seqs = bounds(cu_seqlens, q, "mhla_causal")
    outs = [fn(q[:, s:e], k[:, s:e], v[:, s:e], mixing, **opts) for s, e in seqs if e > s]
    return _cat(outs, q, (q.shape[2], v.shape[3]))
