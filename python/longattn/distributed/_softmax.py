"""Softmax attention over a sequence sharded by position (SPEC §1).

All-gather KV: every rank gathers every rank's keys and values (one
all_gather of [B, n_max, Hk, D+Dv], each rank's slice padded to the longest),
then attends with its own queries. Causal attention on a contiguous split
leaves the last rank P times the work of the first; the balanced layout
(Megatron's 2·P chunks) gives rank r chunks r and 2P-1-r, so every rank has
the same causal work. Each query chunk attends to the contiguous key prefix
that ends at its own last token, in one call (bottom-right causal alignment:
query t sees keys s <= t + prefix - n_q), so no log-sum-exp merging of
partial results is needed; the lse of every query is returned on request.

Backward: each rank's gradient of the gathered K, V goes back to the ranks
that own those tokens by the adjoint reduce_scatter.

The local attention is longattn.softmax_attention (the C/CUDA kernels) with
its own backward where the library has one. Otherwise, and for float64 or
impl="torch", it is the autograd Function below: forward through the
library or a query-tiled torch form, backward the FlashAttention-2 recipe in
torch tiled over queries (P recomputed from the saved lse, D =
rowsum(dO∘O)), memory O(tile·N) per head.
"""
import torch

from . import _comm
from ._linear import library_has_backward, library_ok

# score tile of one query tile against all keys (CPU, CUDA)
_TILE_BYTES = {False: 256 << 20, True: 2 << 30}


def _tile(B, H, nk, item, cuda=False):
    return max(1, _TILE_BYTES[bool(cuda)] // max(1, B * H * nk * item))


def _scores(q, k, scale, causal, i0, nq):
    """scale·q kᵀ for queries [i0, i0+q.shape[1]) of nq, bottom-right mask."""
    s = torch.einsum("zqhd,zkhd->zhqk", q, k) * scale
    if causal:
        nk = k.shape[1]
        t = torch.arange(i0, i0 + q.shape[1], device=q.device)
        keep = torch.arange(nk, device=q.device)[None, :] <= (t + nk - nq)[:, None]
        s = s.masked_fill(~keep, float("-inf"))
    return s


def _torch_forward(q, k, v, scale, causal):
    B, nq, H, D = q.shape
    nk = k.shape[1]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = q.new_empty(B, nq, H, v.shape[-1], dtype=acc)
    lse = q.new_empty(B, nq, H, dtype=acc)
    tq = _tile(B, H, nk, 8 if acc == torch.float64 else 4, q.is_cuda)
    ka, va = k.to(acc), v.to(acc)
    for i0 in range(0, nq, tq):
        s = _scores(q[:, i0:i0 + tq].to(acc), ka, scale, causal, i0, nq)
        m = torch.logsumexp(s, -1)  # [B, H, tq]
        p = torch.exp(s - m.unsqueeze(-1)).nan_to_num(0.0)
        out[:, i0:i0 + tq] = torch.einsum("zhqk,zkhe->zqhe", p, va)
        lse[:, i0:i0 + tq] = m.transpose(1, 2)
    return out.to(q.dtype), lse.float() if acc == torch.float32 else lse


class _LocalSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal, use_library):
        if use_library:
            import longattn
            out, lse = longattn.softmax_attention(q.detach(), k.detach(), v.detach(),
                                                  causal=causal, scale=scale, return_lse=True)
        else:
            out, lse = _torch_forward(q, k, v, scale, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale, ctx.causal = scale, causal
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        scale, causal = ctx.scale, ctx.causal
        B, nq, H, D = q.shape
        nk = k.shape[1]
        acc = torch.float64 if q.dtype == torch.float64 else torch.float32
        qa, ka, va, da = q.to(acc), k.to(acc), v.to(acc), dout.to(acc)
        Dl = (da * out.to(acc)).sum(-1)  # [B, nq, H]
        dq = torch.empty_like(qa)
        dk = torch.zeros_like(ka)
        dv = torch.zeros_like(va)
        tq = _tile(B, H, nk, 8 if acc == torch.float64 else 4, q.is_cuda)
        for i0 in range(0, nq, tq):
            i1 = min(nq, i0 + tq)
            s = _scores(qa[:, i0:i1], ka, scale, causal, i0, nq)
            p = torch.exp(s - lse[:, i0:i1].to(acc).transpose(1, 2).unsqueeze(-1)).nan_to_num(0.0)
            do = da[:, i0:i1]
            dv += torch.einsum("zhqk,zqhe->zkhe", p, do)
            dp = torch.einsum("zqhe,zkhe->zhqk", do, va)
            ds = p * (dp - Dl[:, i0:i1].transpose(1, 2).unsqueeze(-1)) * scale
            dq[:, i0:i1] = torch.einsum("zhqk,zkhd->zqhd", ds, ka)
            dk += torch.einsum("zhqk,zqhd->zkhd", ds, qa[:, i0:i1])
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


def softmax_attention(q, k, v, group=None, causal=False, scale=None, layout="contiguous",
                      return_lse=False, impl="auto", comm_log=None):
    """Softmax attention (SPEC §1) over a self-attention sequence sharded by
    position, all-gather KV.

    q [B, n_r, H, D], k [B, n_r, Hk, D], v [B, n_r, Hk, Dv] (H % Hk == 0) ->
    out [B, n_r, H, Dv] (and lse [B, n_r, H] with return_lse).
    layout: "contiguous" (rank r holds one contiguous slice, rank order =
    token order) or "balanced" (rank r holds chunks r and 2P-1-r of the 2·P
    equal chunks, in that order: longattn.distributed.balanced_shard).
    impl: "auto" = the library (longattn.softmax_attention: its kernels
    forward, and backward where the library has one) for fp32 (CUDA: and
    bf16) inputs, torch for the rest; "library" always, "torch" never;
    "library_forward": the library forward, the torch backward.
    Communication: one all_gather of
    B·n_max·Hk·(D+Dv) values forward, its reduce_scatter backward.
    """
    P, rank = _comm.world(group)
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or k.shape[:3] != v.shape[:3] or \
            k.shape[0] != q.shape[0] or k.shape[1] != q.shape[1] or k.shape[3] != q.shape[3] or \
            q.shape[2] % k.shape[2]:
        raise ValueError("softmax_attention: q %s, k %s, v %s must be [B, n, H, D], [B, n, Hk, D], "
                         "[B, n, Hk, Dv] with H %% Hk == 0"
                         % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    if layout not in ("contiguous", "balanced"):
        raise ValueError("softmax_attention: layout %r is not one of balanced, contiguous"
                         % (layout,))
    B, n, H, D = q.shape
    Hk, Dv = k.shape[2], v.shape[3]
    scale = D ** -0.5 if scale is None else float(scale)
    lengths = _comm.local_lengths(n, group, q.device, comm_log, "softmax_attention")
    N, nmax = sum(lengths), max(lengths)
    if layout == "balanced":
        want = [sum(b - a for a, b in _comm.balanced_positions(N, r, P)) for r in range(P)]
        if want != lengths:
            raise ValueError("softmax_attention: layout balanced needs %s tokens per rank for "
                             "N = %d, the ranks hold %s" % (want, N, lengths))
    kv = torch.cat([k, v.to(k.dtype)], -1)
    if n < nmax:
        kv = torch.cat([kv, kv.new_zeros(B, nmax - n, Hk, D + Dv)], 1)
    G = _comm.all_gather(kv, group, comm_log, "kv")  # [P, B, nmax, Hk, D+Dv]
    # global order of the gathered rows
    if layout == "contiguous":
        spans = [[(sum(lengths[:r]), sum(lengths[:r + 1]))] for r in range(P)]
    else:
        spans = [_comm.balanced_positions(N, r, P) for r in range(P)]
    src = torch.empty(N, dtype=torch.int64)
    for r in range(P):
        j = 0
        for a, b in spans[r]:
            src[a:b] = r * nmax + j + torch.arange(b - a)
            j += b - a
    flat = G.transpose(0, 1).reshape(B, P * nmax, Hk, D + Dv)
    full = flat.index_select(1, src.to(q.device))
    kf, vf = full[..., :D], full[..., D:].to(v.dtype)
    if impl == "library_forward":
        lib, lib_grad = True, False
    else:
        lib = library_ok(impl, "softmax_attention", q, k, v, need_backward=False)
        lib_grad = lib and library_has_backward("softmax_attention")
    if Hk != H and not lib_grad:  # the library takes grouped KV heads itself
        kf = kf.repeat_interleave(H // Hk, dim=2)
        vf = vf.repeat_interleave(H // Hk, dim=2)
    outs, lses = [], []
    j = 0
    for a, b in spans[rank]:
        qs = q[:, j:j + b - a]
        j += b - a
        if b == a:
            continue
        end = b if causal else N
        if lib_grad:  # the library's forward and backward (its autograd Function)
            import longattn
            o, l = longattn.softmax_attention(qs, kf[:, :end], vf[:, :end], causal=bool(causal),
                                              scale=scale, return_lse=True)
        else:
            o, l = _LocalSoftmax.apply(qs, kf[:, :end], vf[:, :end], scale, bool(causal), lib)
        outs.append(o)
        lses.append(l)
    if not outs:
        out = q.new_zeros(B, 0, H, Dv)
        lse = q.new_zeros(B, 0, H, dtype=torch.float32)
    else:
        out, lse = torch.cat(outs, 1), torch.cat(lses, 1)
    return (out, lse) if return_lse else out
