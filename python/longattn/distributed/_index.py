"""DSA and HISA indexers with the keys sharded by position (SPEC §6, §7).

Queries, head weights and the valid ranges [start_t, end_t) (global key
positions) are the same on every rank; rank r holds keys [off_r, off_r+L_r).

DSA: each rank scores its keys with the library (longattn.dsa_topk on its
slice, the range clipped to it, with the score rows) and keeps its top-k as
(score, global index) lists; one all_gather of the lists and a merge (a
stable sort by descending score over the lists in rank order, i.e. in index
order among equal scores) gives exactly the single-process result: the
global top-k lies inside the union of the local ones, and scores are the same
bits because the kernel scores every key the same way whatever the slice.

HISA: the pooled block means need every token of a block, and blocks may
straddle ranks. A block belongs to the rank holding its first token; every
rank sends the head of its slice that belongs to an earlier rank's block
(fewer than B tokens; one all_gather, skipped when every slice starts on a
block boundary), and the owner sums each block in token order in fp32, as the
library does. Stage 2: each rank scores its blocks (the library's kernel on
the pooled keys), forces the first and last block of each query's range
(+inf), keeps its top m; an all_gather and the same merge give the global
kept blocks. Stage 3: each rank scores its keys inside the kept blocks (each
(query, block) pair B keys, by the library's kernel over windows of whole
blocks), keeps its top-k, and a last all_gather and merge give the result. No backward:
the outputs are indices.
"""
import torch

from . import _comm


def _ranges(start, end, T, L, device):
    if (start is None) != (end is None):
        raise ValueError("start and end must be given together")
    if start is None:  # causal bottom-right: end = L - T + t + 1
        t = torch.arange(T, dtype=torch.int64, device=device)
        return torch.zeros(T, dtype=torch.int64, device=device), (L - T + t + 1).clamp(0, L)
    start, end = start.to(torch.int64), end.to(torch.int64)
    if start.shape != (T,) or end.shape != (T,):
        raise ValueError("start %s and end %s must be [%d]"
                         % (tuple(start.shape), tuple(end.shape), T))
    return start.clamp(0, L), end.clamp(0, L)


def _local_lists(scores, k, base):
    """Top-k of score rows [T, n] (−inf masked) as (scores, global idx) [T, k]."""
    import longattn
    T = scores.shape[0]
    if scores.shape[1] == 0:
        return (scores.new_full((T, k), float("-inf")),
                torch.full((T, k), -1, dtype=torch.int32, device=scores.device))
    idx = longattn.topk(scores.contiguous(), k)
    li = idx.to(torch.int64)
    val = torch.gather(scores, 1, li.clamp(min=0))
    val = val.masked_fill(li < 0, float("-inf"))
    gi = torch.where(li >= 0, li + base, torch.full_like(li, -1)).to(torch.int32)
    return val, gi


def _merge(val, gi, k, group, log, tag):
    """Global top-k from every rank's sorted (score, index) lists [T, k]."""
    P, _ = _comm.world(group)
    T = val.shape[0]
    # [2, T, k] int32: the scores' raw bits beside the indices (copied, never computed on)
    packed = torch.stack([val.float().contiguous().view(torch.int32), gi.to(torch.int32)])
    G = _comm.all_gather_plain(packed, group, log, tag)  # [P, 2, T, k]
    sc = G[:, 0].contiguous().view(torch.float32).permute(1, 0, 2).reshape(T, P * k)
    ix = G[:, 1].permute(1, 0, 2).reshape(T, P * k)
    sv, order = torch.sort(sc, dim=1, descending=True, stable=True)
    top = torch.gather(ix, 1, order[:, :k])
    return torch.where(sv[:, :k] == float("-inf"), torch.full_like(top, -1), top), sv[:, :k]


def _token_scores(q, k, w, s_l, e_l):
    """Score rows of the local keys [T, L_r] (−inf outside [s_l, e_l))."""
    import longattn
    T = q.shape[0]
    if k.shape[0] == 0:
        return torch.empty(T, 0, dtype=torch.float32, device=q.device)
    _, sc = longattn.dsa_topk(q, k, w, topk=1, start=s_l.to(torch.int32).contiguous(),
                              end=e_l.to(torch.int32).contiguous(), return_scores=True)
    return sc


def _check(q, k, w, what):
    if q.dim() != 3 or k.dim() != 2 or w.dim() != 2 or k.shape[1] != q.shape[2] or \
            tuple(w.shape) != tuple(q.shape[:2]):
        raise ValueError("%s: q %s, k %s, w %s must be [T, HI, dI], [L_r, dI], [T, HI]"
                         % (what, tuple(q.shape), tuple(k.shape), tuple(w.shape)))


def dsa_topk(q, k, w, topk=2048, start=None, end=None, group=None, comm_log=None):
    """DSA indexer (SPEC §6) with keys sharded by position.

    q [T, HI, dI], w [T, HI], start/end int [T] (global positions; None =
    causal bottom-right over the global L) the same on every rank; k [L_r, dI]
    this rank's contiguous slice of the keys (rank order = position order).
    Returns idx int32 [T, topk] (global positions, descending score, ties to
    the lower index, -1 padding) on every rank, equal to longattn.dsa_topk on
    the whole key sequence. Communication: one all_gather of T·topk (score,
    index) pairs, 8 bytes each.
    """
    P, rank = _comm.world(group)
    _check(q, k, w, "dsa_topk")
    T, Lr = q.shape[0], k.shape[0]
    lengths = _comm.local_lengths(Lr, group, q.device, comm_log)
    L, off = sum(lengths), sum(lengths[:rank])
    start, end = _ranges(start, end, T, L, q.device)
    s_l = (start - off).clamp(0, Lr)
    e_l = torch.maximum((end - off).clamp(0, Lr), s_l)
    val, gi = _local_lists(_token_scores(q, k, w, s_l, e_l), int(topk), off)
    return _merge(val, gi, int(topk), group, comm_log, "topk_lists")[0]


def _pooled_means(k, off, Lr, lengths, rank, B, group, log):
    """Block means of the blocks this rank owns (first token here), summed in
    token order in fp32. Returns (first owned block, kbar [n_own, dI])."""
    P = len(lengths)
    offs = [sum(lengths[:r]) for r in range(P)]
    L = sum(lengths)
    dI = k.shape[1]
    # head of each slice that continues an earlier rank's block
    heads = [min(((o + B - 1) // B) * B, o + m) - o for o, m in zip(offs, lengths)]
    F = max(heads)
    frags = None
    if F > 0:
        h = heads[rank]
        buf = torch.cat([k[:h].float(), k.new_zeros(F - h, dI, dtype=torch.float32)], 0)
        frags = _comm.all_gather_plain(buf, group, log, "block_heads")  # [P, F, dI]
    b0 = (off + B - 1) // B
    b1 = (off + Lr + B - 1) // B
    n_own = max(0, b1 - b0)
    if n_own == 0:
        return b0, k.new_zeros(0, dI)
    local = k[b0 * B - off:].float()
    last_end = min(b1 * B, L)  # end of the last owned block
    tail = [local]
    have = off + Lr
    r = rank + 1
    while have < last_end and r < P:  # the rest of the last block lies on later ranks
        take = min(heads[r], last_end - have)
        tail.append(frags[r, :take])
        have += take
        r += 1
    toks = torch.cat(tail, 0)
    count = toks.shape[0]
    toks = torch.cat([toks, toks.new_zeros(n_own * B - count, dI)], 0).view(n_own, B, dI)
    sums = torch.zeros(n_own, dI, dtype=torch.float32, device=k.device)
    for j in range(B):  # token order, one rounding per add (as la_idx_pool_blocks)
        sums = sums + toks[:, j]
    first = torch.arange(b0, b1, device=k.device) * B  # the owned blocks' first tokens
    cnt = torch.clamp(L - first, max=B).to(torch.float32)
    # the library rounds bf16 keys' means to bf16 once (CUDA hs_pool*_kernel); fp32 stays fp32
    return b0, (sums / cnt.unsqueeze(1)).to(k.dtype)


# stage 3: keys per scoring call (a run of whole blocks; CPU, CUDA) and the most
# bytes of one call's score rows (its (query, block) pairs are batched to fit)
_WINDOW_KEYS = {False: 4096, True: 32768}
_ROWS_BYTES = 1 << 30


def _kept_block_lists(q, k, w, kept, start, end, off, B, topk):
    """Local top-k lists of HISA's token stage: the scores of the rank's keys
    inside each query's kept blocks ∩ [start, end), by the library's kernel.

    Every (query, kept block on this rank) pair is a row of one dsa_topk call
    per window of whole blocks (rows batched to bound the score rows' memory),
    its range that block, so each pair costs B keys (not the whole slice).
    The candidates of query t lie in a row of mk·B slots, its local kept
    blocks in ascending order, so candidate order is token order and the row
    top-k's tie rule (lower position) is the token tie rule."""
    T, mk = kept.shape
    Lr = k.shape[0]
    dev = q.device
    lb0, lb1 = off // B, (off + Lr + B - 1) // B  # blocks meeting the slice
    kb = kept.to(torch.int64)
    local = (kb >= lb0) & (kb < lb1)
    kb_sorted = torch.sort(torch.where(local, kb, torch.full_like(kb, lb1)), dim=1)[0]
    t_idx, j_idx = torch.nonzero(kb_sorted < lb1, as_tuple=True)  # pairs, slot j of query t
    blk = kb_sorted[t_idx, j_idx]
    cand = torch.full((T, mk * B), float("-inf"), dtype=torch.float32, device=dev)
    G = max(1, _WINDOW_KEYS[q.is_cuda] // B)
    win = (blk - lb0) // G  # window of each pair
    order = torch.sort(win, stable=True)[1]
    t_idx, j_idx, blk, win = t_idx[order], j_idx[order], blk[order], win[order]
    bounds = torch.searchsorted(win, torch.arange(0, (lb1 - lb0 + G - 1) // G + 1, device=dev))
    ar = torch.arange(B, device=dev)
    for wi, (p0, p1) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
        if p1 <= p0:
            continue
        w0 = max((lb0 + wi * G) * B, off)  # the window's keys, inside the slice
        w1 = min((lb0 + (wi + 1) * G) * B, off + Lr)
        step = max(1, _ROWS_BYTES // (4 * max(1, w1 - w0)))
        for a in range(p0, p1, step):
            e = min(p1, a + step)
            t, b = t_idx[a:e], blk[a:e]
            s0 = torch.maximum(b * B, start[t].to(torch.int64)).clamp(w0, w1) - w0
            s1 = torch.minimum((b + 1) * B, end[t].to(torch.int64)).clamp(w0, w1) - w0
            s1 = torch.maximum(s1, s0)
            sc = _token_scores(q[t].contiguous(), k[w0 - off:w1 - off], w[t].contiguous(),
                               s0, s1)
            col = b.unsqueeze(1) * B - w0 + ar  # the block's B keys in the window
            inside = (col >= 0) & (col < w1 - w0)
            vals = torch.gather(sc, 1, col.clamp(0, max(0, w1 - w0 - 1)))
            vals = vals.masked_fill(~inside, float("-inf"))
            cand[t.unsqueeze(1), j_idx[a:e].unsqueeze(1) * B + ar] = vals
    val, pos = _local_lists(cand, topk, 0)
    p = pos.to(torch.int64)
    gblk = torch.gather(kb_sorted, 1, (p.clamp(min=0) // B).clamp(max=mk - 1))
    gi = torch.where(p >= 0, gblk * B + p % B, torch.full_like(p, -1)).to(torch.int32)
    return val, gi


def hisa_topk(q, k, w, topk=2048, block=128, block_topk=64, start=None, end=None, group=None,
              comm_log=None):
    """HISA indexer (SPEC §7) with keys sharded by position.

    Arguments as dsa_topk, plus block (B) and block_topk (m). Returns idx
    int32 [T, topk] on every rank, equal to longattn.hisa_topk on the whole
    key sequence. Communication: one all_gather of the block heads (F·dI
    fp32, F < B the longest slice head inside an earlier rank's block; none
    when every slice starts on a block boundary), one of T·m (score, block)
    pairs and one of T·topk (score, index) pairs.
    """
    P, rank = _comm.world(group)
    _check(q, k, w, "hisa_topk")
    B, m, topk = int(block), int(block_topk), int(topk)
    if B < 1 or m < 1 or topk < 1:
        raise ValueError("hisa_topk: block %d, block_topk %d and topk %d must be >= 1"
                         % (B, m, topk))
    T, Lr = q.shape[0], k.shape[0]
    lengths = _comm.local_lengths(Lr, group, q.device, comm_log)
    L, off = sum(lengths), sum(lengths[:rank])
    start, end = _ranges(start, end, T, L, q.device)
    nb = (L + B - 1) // B
    mk = min(m, nb) if nb > 0 else 1
    # stage 1: pooled keys of the owned blocks
    b0, kbar = _pooled_means(k, off, Lr, lengths, rank, B, group, comm_log)
    n_own = kbar.shape[0]
    # stage 2: block scores over the blocks meeting each range, forced ends
    valid = start < end
    br0 = torch.where(valid, start // B, torch.zeros_like(start))
    br1 = torch.where(valid, (end + B - 1) // B, torch.zeros_like(end))
    s_b = (br0 - b0).clamp(0, n_own)
    e_b = torch.maximum((br1 - b0).clamp(0, n_own), s_b)
    bsc = _token_scores(q, kbar.to(q.device), w, s_b, e_b).clone()
    if n_own:
        rows = torch.arange(T, device=q.device)
        for pos in (br0, br1 - 1):
            own = valid & (pos >= b0) & (pos < b0 + n_own)
            bsc[rows[own], (pos - b0)[own]] = float("inf")
    val, gb = _local_lists(bsc, mk, b0)
    kept, _ = _merge(val, gb, mk, group, comm_log, "block_lists")  # [T, mk] global blocks
    # stage 3: token scores inside the kept blocks that meet this rank's slice
    val, gi = _kept_block_lists(q, k, w, kept, start, end, off, B, topk)
    return _merge(val, gi, topk, group, comm_log, "topk_lists")[0]
