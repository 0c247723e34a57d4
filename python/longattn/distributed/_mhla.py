"""MHLA over a token grid sharded by position (SPEC §5).

Non-causal (§5.2): rank r holds a contiguous raster slice of the grid, which
on a 2-D/3-D grid touches whole and partial blocks. It sums the partial
summaries k̃ [v, 1]ᵀ of the blocks it touches, scatters them into an
[M, D, Dv+1] tensor per head, and one all_reduce makes every block's S_b, z_b
known everywhere; the rank then mixes the rows of W of its own blocks and
produces its own outputs. Backward: the adjoint all_reduce of dS (every rank's
query blocks contribute to every S_b) and, for W, an all_reduce of dW.

Causal (§5.4): blocks are chunks of C tokens, a rank's slice may start and end
inside a chunk. One all_gather of every rank's partial chunk summaries gives
every chunk's full summary (for the inter-chunk mixture Σ_{b<i} W[i,b] S_b)
and the part of the rank's first chunk held by lower ranks (the intra-chunk
prefix). Backward: the adjoint reduce_scatter, and an all_reduce of dW.

The local work is torch (einsum over tokens grouped by block): the C library
has no entry point for partial block summaries.
"""
import torch

from . import _comm
from ._linear import causal_chunks, finish, phi, with_ones


def _dims(x, what):
    if isinstance(x, str):
        x = tuple(int(s) for s in x.lower().split("x"))
    elif isinstance(x, int):
        x = (x,)
    x = tuple(int(s) for s in x)
    if not 1 <= len(x) <= 3 or min(x) < 1:
        raise ValueError("mhla: %s %r must be 1 to 3 positive sizes" % (what, x))
    return x


def block_ids(pos, grid, blocks):
    """Block id of each global raster position (SPEC §5.1)."""
    bid = torch.zeros_like(pos)
    rem = pos
    coords = []
    for n_a in reversed(grid):
        coords.append(rem % n_a)
        rem = rem // n_a
    coords.reverse()
    for c, n_a, g_a in zip(coords, grid, blocks):
        bid = bid * g_a + (c * g_a) // n_a
    return bid


def _mix(W_rows, S):
    """Σ_b W[i, b] S_b for the selected rows: W_rows [I, M] or [H, I, M],
    S [B, H, M, D, E] -> [B, H, I, D, E]."""
    if W_rows.dim() == 2:
        return torch.einsum("im,zhmde->zhide", W_rows, S)
    return torch.einsum("him,zhmde->zhide", W_rows, S)


def _check_qkv(q, k, v, what):
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError("%s: q %s, k %s, v %s must be [B, n, H, D], [B, n, H, D], [B, n, H, Dv]"
                         % (what, tuple(q.shape), tuple(k.shape), tuple(v.shape)))


def _check_mixing(W, M, H, what):
    ok = (W.dim() == 2 and W.shape[0] >= M and W.shape[0] == W.shape[1]) or \
         (W.dim() == 3 and W.shape[0] == H and W.shape[1] >= M and W.shape[1] == W.shape[2])
    if not ok:
        raise ValueError("%s: mixing %s must be [%d, %d] or [%d, %d, %d]"
                         % (what, tuple(W.shape), M, M, H, M, M))


def _rows(W, a, b):
    return W[a:b] if W.dim() == 2 else W[:, a:b]


def mhla(q, k, v, mixing, grid, blocks, group=None, feature="relu_eps", normalize="per_query",
         eps=1e-6, scale=1.0, reduce_mixing_grad=True, comm_log=None):
    """Non-causal MHLA (SPEC §5.2) over a grid sharded by position.

    Rank r passes its contiguous raster slice q, k [B, n_r, H, D], v [B, n_r,
    H, Dv] of the grid (rank order = raster order, Σ n_r = Π grid) and gets
    out [B, n_r, H, Dv]. mixing W [M, M] or [H, M, M], the same on every rank.
    normalize: per_query | none (released_vision needs the other blocks'
    queries and is not distributed). reduce_mixing_grad: W's gradient is
    summed over the group (the full gradient on every rank); turn it off when
    an outer data-parallel reduction over the same ranks does it.
    Communication: one all_reduce of B·H·M·D·(Dv+1) summary values forward;
    one of the same size and one of W's size backward.
    """
    P, rank = _comm.world(group)
    _check_qkv(q, k, v, "mhla")
    if normalize not in ("per_query", "none"):
        raise ValueError("mhla: normalize %r: the distributed form supports per_query and none"
                         % (normalize,))
    g, bl = _dims(grid, "grid"), _dims(blocks, "blocks")
    if len(g) != len(bl) or any(b > n for b, n in zip(bl, g)):
        raise ValueError("mhla: grid %r and blocks %r must have the same rank, blocks <= grid"
                         % (g, bl))
    B, n, H, D = q.shape
    Dv = v.shape[-1]
    M = 1
    for b in bl:
        M *= b
    _check_mixing(mixing, M, H, "mhla")
    if mixing.shape[-1] != M:
        raise ValueError("mhla: mixing %s must be %d square (blocks %r)"
                         % (tuple(mixing.shape), M, bl))
    lengths = _comm.local_lengths(n, group, q.device, comm_log, "mhla")
    N = 1
    for s in g:
        N *= s
    if sum(lengths) != N:
        raise ValueError("mhla: the ranks hold %s tokens, %d in all, but grid %r has %d"
                         % (lengths, sum(lengths), g, N))
    off = sum(lengths[:rank])
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    dev = q.device

    # local tokens grouped by block: slot of token t in a [Mt, Lmax] layout
    bid = block_ids(torch.arange(off, off + n, device=dev), g, bl)
    touched, lb = torch.unique(bid, sorted=True, return_inverse=True)
    Mt = touched.numel()
    counts = torch.bincount(lb, minlength=Mt) if n else lb.new_zeros(0)
    Lmax = int(counts.max()) if n else 0
    starts = torch.cumsum(counts, 0) - counts
    order = torch.sort(lb, stable=True)[1]
    lbs = lb[order]
    slot = torch.empty_like(lb)
    slot[order] = lbs * Lmax + torch.arange(n, device=dev) - starts[lbs]
    gather = torch.full((Mt * Lmax,), n, dtype=torch.int64, device=dev)
    gather[slot] = torch.arange(n, device=dev)

    def blocked(x):  # [B, n, H, X] -> [B, Mt, Lmax, H, X]; empty slots are exact zeros
        x = torch.cat([x, x.new_zeros(B, 1, H, x.shape[-1])], 1)
        return x.index_select(1, gather).view(B, Mt, Lmax, H, x.shape[-1])

    kt = blocked(phi(k.to(acc), feature))
    v1 = blocked(with_ones(v.to(acc)))
    S_loc = torch.einsum("zmlhd,zmlhe->zhmde", kt, v1)
    S_part = S_loc.new_zeros(B, H, M, D, Dv + 1).index_add(2, touched, S_loc)
    S = _comm.all_reduce(S_part, group, comm_log, "summaries")
    W = mixing.to(acc)
    if reduce_mixing_grad:
        W = _comm.replicate(W, group, comm_log, "mixing")
    W_rows = W.index_select(0 if W.dim() == 2 else 1, touched)
    St = _mix(W_rows, S)  # [B, H, Mt, D, E]
    qt = blocked(phi(q.to(acc), feature) * scale)
    out1 = torch.einsum("zmlhd,zhmde->zmlhe", qt, St).reshape(B, Mt * Lmax, H, Dv + 1)
    out1 = out1.index_select(1, slot)
    return finish(out1, normalize == "per_query", eps).to(q.dtype)


def mhla_causal(q, k, v, mixing, group=None, chunk=64, feature="relu", normalize="none",
                eps=1e-6, scale=None, reduce_mixing_grad=True, comm_log=None):
    """Causal chunkwise MHLA (SPEC §5.4) over a sequence sharded by position.

    Rank r passes its contiguous slice q, k [B, n_r, H, D], v [B, n_r, H, Dv]
    and gets out [B, n_r, H, Dv]; W [M, M] or [H, M, M] with M >= ⌈N/C⌉
    (entries above the diagonal ignored). normalize: none (default) |
    per_query. scale None = D**-0.5. Communication: one all_gather of the
    rank's partial chunk summaries, B·H·Tmax·D·(Dv+1) values, Tmax = the most
    chunks any rank touches; backward the reduce_scatter of their gradients
    and an all_reduce of dW (reduce_mixing_grad).
    """
    P, rank = _comm.world(group)
    _check_qkv(q, k, v, "mhla_causal")
    if normalize not in ("per_query", "none"):
        raise ValueError("mhla_causal: normalize %r is not one of none, per_query" % (normalize,))
    B, n, H, D = q.shape
    Dv = v.shape[-1]
    C = int(chunk)
    if C < 1:
        raise ValueError("mhla_causal: chunk %d must be >= 1" % C)
    scale = D ** -0.5 if scale is None else float(scale)
    lengths = _comm.local_lengths(n, group, q.device, comm_log, "mhla_causal")
    N = sum(lengths)
    M = (N + C - 1) // C
    _check_mixing(mixing, M, H, "mhla_causal")
    offs = [sum(lengths[:r]) for r in range(P)]
    rng = [(o // C, (o + m + C - 1) // C if m else o // C) for o, m in zip(offs, lengths)]
    Tmax = max(b - a for a, b in rng)
    c0, c1 = rng[rank]
    Mt = c1 - c0
    off = offs[rank]
    front = off - c0 * C
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32

    def chunked(x):  # [B, n, H, X] -> [B, Mt, C, H, X] aligned to global chunks, zero padded
        back = Mt * C - front - n
        x = torch.cat([x.new_zeros(B, front, H, x.shape[-1]), x,
                       x.new_zeros(B, back, H, x.shape[-1])], 1)
        return x.view(B, Mt, C, H, x.shape[-1])

    kt = chunked(phi(k.to(acc), feature))
    v1 = chunked(with_ones(v.to(acc)))
    S_loc = torch.einsum("zmchd,zmche->zhmde", kt, v1)  # [B, H, Mt, D, E]
    if Mt < Tmax:
        S_loc = torch.cat([S_loc, S_loc.new_zeros(B, H, Tmax - Mt, D, Dv + 1)], 2)
    G = _comm.all_gather(S_loc, group, comm_log, "chunk_summaries")  # [P, B, H, Tmax, D, E]
    S = G.new_zeros(B, H, M, D, Dv + 1)
    pre = G.new_zeros(B, H, D, Dv + 1)  # part of chunk c0 held by lower ranks
    for r in range(P):
        a, b = rng[r]
        if b > a:
            S = S.index_add(2, torch.arange(a, b, device=q.device), G[r, :, :, :b - a])
            if r < rank and a <= c0 < b:
                pre = pre + G[r, :, :, c0 - a]
    W = mixing.to(acc)
    if reduce_mixing_grad:
        W = _comm.replicate(W, group, comm_log, "mixing")
    W_rows = _rows(W, c0, c1)[..., :M]
    strict = (torch.arange(M, device=q.device)[None, :] <
              torch.arange(c0, c1, device=q.device)[:, None]).to(acc)
    A = _mix(W_rows * strict, S)  # [B, H, Mt, D, E]: Σ_{b<i} W[i,b] S_b
    idx = torch.arange(c0, c1, device=q.device)
    diag = W_rows[..., torch.arange(Mt, device=q.device), idx]  # [Mt] or [H, Mt]
    dg = diag.view(1, Mt, 1, 1, 1) if diag.dim() == 1 else diag.t().reshape(1, Mt, 1, H, 1)
    qt = chunked(phi(q.to(acc), feature) * scale)
    inter = torch.einsum("zmchd,zhmde->zmche", qt, A)
    # inside chunk i: W[i,i] times causal linear attention over the chunk, from
    # the part of the chunk held by lower ranks (first chunk) or from zero;
    # chunkwise itself (sub-chunks of 64), so a long chunk costs O(C·64), not O(C²)
    S0 = torch.cat([pre.unsqueeze(1), pre.new_zeros(B, Mt - 1, H, D, Dv + 1)], 1)
    intra = causal_chunks(qt.reshape(B * Mt, C, H, D), kt.reshape(B * Mt, C, H, D),
                          v1.reshape(B * Mt, C, H, Dv + 1), S0.reshape(B * Mt, H, D, Dv + 1),
                          min(C, 64)).reshape(B, Mt, C, H, Dv + 1)
    out1 = (inter + dg * intra).reshape(B, Mt * C, H, Dv + 1)[:, front:front + n]
    return finish(out1, normalize == "per_query", eps).to(q.dtype)
