"""Linear attention over a sequence sharded by position (SPEC §3).

Non-causal: every rank sums k̃ [v, 1]ᵀ over its tokens; one all_reduce of
the D×(Dv+1) state per head gives every rank S and z.

Causal (LASP-2, arXiv 2502.07563): every rank sums its state, one all_gather
of the per-rank states, and rank r's prefix state is the sum of the states of
ranks < r (plus the initial state); rank r then runs the chunkwise causal
form over its own tokens from that prefix.

The value vectors carry an appended ones column throughout ("v1"), so the
same product yields the numerator (first Dv columns) and the normalizer z
(last column).
"""
import torch

from . import _comm


def phi(x, feature):
    """Feature map φ of SPEC §2, differentiable."""
    if feature == "identity":
        return x
    if feature == "relu":
        return torch.relu(x)
    if feature == "relu_eps":
        return torch.relu(x) + 1e-6
    if feature == "relu1":
        return torch.relu(x) + 1
    if feature == "elu1":  # exp of the clamped input: no inf in the unused branch's gradient
        return torch.where(x >= 0, x + 1, torch.exp(torch.clamp(x, max=0)))
    raise ValueError("feature: %r is not one of elu1, identity, relu, relu1, relu_eps" % (feature,))


def with_ones(v):
    """v [..., Dv] -> [..., Dv+1] with a last column of ones."""
    return torch.cat([v, torch.ones_like(v[..., :1])], -1)


def finish(out1, normalize, eps):
    """Split num | den of a v1 product and normalize."""
    num, den = out1[..., :-1], out1[..., -1:]
    return num / (den + eps) if normalize else num


def causal_chunks(qt, kt, v1, S0, chunk):
    """Chunkwise causal linear attention from a prefix state.

    qt, kt [B, n, H, D] (features applied), v1 [B, n, H, E], S0 [B, H, D, E]
    (state of every earlier token) -> out1 [B, n, H, E] with
    out1_t = q̃_tᵀ (S0 + Σ_{j<=t} k̃_j v1_jᵀ)."""
    B, n, H, D = qt.shape
    E = v1.shape[-1]
    C = int(chunk)
    nc = (n + C - 1) // C
    pad = nc * C - n
    if pad:
        qt = torch.cat([qt, qt.new_zeros(B, pad, H, D)], 1)
        kt = torch.cat([kt, kt.new_zeros(B, pad, H, D)], 1)
        v1 = torch.cat([v1, v1.new_zeros(B, pad, H, E)], 1)
    Q = qt.reshape(B, nc, C, H, D)
    K = kt.reshape(B, nc, C, H, D)
    V = v1.reshape(B, nc, C, H, E)
    Sc = torch.einsum("zcthd,zcthe->zchde", K, V)
    excl = torch.cumsum(torch.cat([S0.unsqueeze(1), Sc[:, :-1]], 1), 1)
    inter = torch.einsum("zcthd,zchde->zcthe", Q, excl)
    A = torch.einsum("zcthd,zcshd->zchts", Q, K)
    A = A * torch.ones(C, C, dtype=A.dtype, device=A.device).tril()
    intra = torch.einsum("zchts,zcshe->zcthe", A, V)
    return (inter + intra).reshape(B, nc * C, H, E)[:, :n]


def library_has_backward(op):
    """Whether longattn.<op> is differentiable: it has an autograd Function
    whose backward is its own (not torch.autograd.Function's, which raises)."""
    from longattn import autograd
    fn = getattr(autograd, "FUNCTIONS", {}).get(op)
    return fn is not None and getattr(fn, "backward", None) is not torch.autograd.Function.backward


def library_ok(impl, op, *xs, need_backward=True):
    """Run the local part through the C library (impl auto: fp32 inputs, or
    bf16 on CUDA; when a gradient is needed and need_backward, only if the
    library's op has a backward)."""
    if impl == "torch":
        return False
    if impl == "library":
        return True
    if impl != "auto":
        raise ValueError("impl: %r is not one of auto, library, torch" % (impl,))
    xs = [x for x in xs if x is not None]
    if not all(x.dtype == torch.float32 or (x.dtype == torch.bfloat16 and x.is_cuda) for x in xs):
        return False
    grad = torch.is_grad_enabled() and any(x.requires_grad for x in xs)
    return not (grad and need_backward) or library_has_backward(op)


def linear_attention(q, k, v, group=None, causal=True, feature="relu", normalize=True, eps=1e-6,
                     scale=1.0, chunk=64, initial_state=None, output_final_state=False,
                     impl="auto", comm_log=None):
    """Linear attention (SPEC §3) over tokens sharded by position.

    Each rank passes its contiguous slice q, k [B, n_r, H, D], v [B, n_r, H,
    Dv] (rank order = token order; n_r may differ) and gets out [B, n_r, H,
    Dv]. causal=True: LASP-2, one all_gather of the per-rank states
    [B, H, D, Dv+1] (fp32 or the input dtype) in forward and one
    reduce_scatter of their gradients in backward. causal=False: one
    all_reduce of the state. initial_state = (S [B, H, D, Dv], z [B, H, D])
    before the first token of the whole sequence (causal; the same on every
    rank); output_final_state=True also returns the state after the last
    token, on every rank.

    impl: "auto" runs the local causal part through longattn.linear_attention
    (the C/CUDA kernels, forward and, where the library has it, backward, the
    prefix state entering as its differentiable initial_state) for fp32 (and
    CUDA bf16) inputs, else through the torch chunkwise form; "library"
    always, "torch" never. comm_log: a CommLog to
    record the collectives in.
    """
    P, rank = _comm.world(group)
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError("linear_attention: q %s, k %s, v %s must be [B, n, H, D], [B, n, H, D], "
                         "[B, n, H, Dv]" % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    B, n, H, D = q.shape
    Dv = v.shape[-1]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    kt = phi(k.to(acc), feature)
    v1 = with_ones(v.to(acc))
    S_loc = torch.einsum("znhd,znhe->zhde", kt, v1)
    S0 = None
    if initial_state is not None:
        Si, zi = initial_state
        if tuple(Si.shape) != (B, H, D, Dv) or tuple(zi.shape) != (B, H, D):
            raise ValueError("linear_attention: initial_state (S %s, z %s) must be "
                             "[%d, %d, %d, %d] and [%d, %d, %d]"
                             % (tuple(Si.shape), tuple(zi.shape), B, H, D, Dv, B, H, D))
        S0 = _comm.replicate(torch.cat([Si.to(acc), zi.to(acc).unsqueeze(-1)], -1), group,
                             comm_log, "initial_state")
    if not causal:
        if S0 is not None:
            raise ValueError("linear_attention: initial_state needs causal=True")
        S = _comm.all_reduce(S_loc, group, comm_log, "state")
        qt = phi(q.to(acc), feature) * scale
        out = finish(torch.einsum("znhd,zhde->znhe", qt, S), normalize, eps).to(q.dtype)
        return (out, (S[..., :-1], S[..., -1])) if output_final_state else out
    G = _comm.all_gather(S_loc, group, comm_log, "states")  # [P, B, H, D, E]
    # Σ_{r' < rank} as a masked sum: G stays in every rank's graph, so that every
    # rank runs the adjoint reduce_scatter in backward (autograd skips a Function
    # whose outputs receive no gradient, which would leave the other ranks waiting)
    below = (torch.arange(P, device=G.device) < rank).to(G.dtype)
    prefix = torch.einsum("p,pzhde->zhde", below, G)
    if S0 is not None:
        prefix = prefix + S0
    if library_ok(impl, "linear_attention", q, k, v):
        import longattn
        st = (prefix[..., :-1].float().contiguous(), prefix[..., -1].float().contiguous())
        out = longattn.linear_attention(q, k, v, feature=feature, causal=True,
                                        normalize=normalize, eps=eps, scale=scale, chunk=chunk,
                                        initial_state=st)
    else:
        qt = phi(q.to(acc), feature) * scale
        out = finish(causal_chunks(qt, kt, v1, prefix, chunk), normalize, eps).to(q.dtype)
    if not output_final_state:
        return out
    final = G.sum(0) + (S0 if S0 is not None else 0)
    return out, (final[..., :-1], final[..., -1])
