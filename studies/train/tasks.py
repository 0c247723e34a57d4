"""Synthetic tasks of the training study, generated procedurally (no downloads),
as whole batches of torch tensors on the training device (no per-sequence
Python loop: the data costs next to nothing beside the model).

mqar: multi-query associative recall (Zoology, arXiv 2312.04927), causal.
    The first 2·P tokens are key-value pairs k1 v1 ... kP vP (P distinct keys
    from the first half of the vocabulary, values from the second); afterwards
    each key appears once more, at a random even offset, followed by its value,
    and the model must predict the value at the key's position. Every other
    position holds a random token of the whole vocabulary (as Zoology's
    random_non_queries) and is not scored.

nearest: a 2-D non-causal task on an S×S token grid. M markers carry a colour
    and a label; Q query cells carry a colour only. The target of a query cell is
    the label of the nearest marker of its colour (Euclidean distance, ties to the
    marker of lower raster index). It needs content-based retrieval (the colour)
    and locality (the nearest one), which is what separates global linear
    attention from MHLA's block mixing. Background cells are not scored.

Both return (tokens int64 [B, N], targets int64 [B, N] with -100 = not scored),
drawn from the torch.Generator `gen` on its device.
"""
import torch

IGNORE = -100


def _distinct(gen, batch, n, k):
    """k distinct indices in [0, n) per row, in random order: int64 [batch, k]."""
    return torch.rand(batch, n, generator=gen, device=gen.device).topk(k, dim=1).indices


def mqar_batch(gen, batch, seq_len, pairs, vocab=8192, filler="random"):
    """filler: what the unscored gaps hold, "random" tokens of the whole
    vocabulary (Zoology's random_non_queries) or "pad", token 0 (no
    distractors: the binding is still needed, the plateau is shorter)."""
    if 4 * pairs > seq_len:
        raise ValueError("mqar: %d pairs do not fit %d tokens" % (pairs, seq_len))
    dev = gen.device
    half = vocab // 2
    if filler == "random":
        tokens = torch.randint(1, vocab, (batch, seq_len), generator=gen, device=dev)
    elif filler == "pad":
        tokens = torch.zeros((batch, seq_len), dtype=torch.int64, device=dev)
    else:
        raise ValueError("mqar: filler %r is not random or pad" % (filler,))
    targets = torch.full((batch, seq_len), IGNORE, dtype=torch.int64, device=dev)
    keys = 1 + _distinct(gen, batch, half - 1, pairs)
    vals = torch.randint(half, vocab, (batch, pairs), generator=gen, device=dev)
    tokens[:, 0:2 * pairs:2] = keys
    tokens[:, 1:2 * pairs:2] = vals
    slots = (seq_len - 2 * pairs) // 2          # query slots: pairs of positions
    pos = 2 * pairs + 2 * _distinct(gen, batch, slots, pairs)   # random order of the keys
    tokens.scatter_(1, pos, keys)
    tokens.scatter_(1, pos + 1, vals)
    targets.scatter_(1, pos, vals)
    return tokens, targets


def nearest_vocab(colours, labels):
    return 1 + colours * labels + colours


def nearest_batch(gen, batch, side, colours=4, labels=8, markers_per_colour=4, queries=64):
    dev = gen.device
    n = side * side
    tokens = torch.zeros((batch, n), dtype=torch.int64, device=dev)
    targets = torch.full((batch, n), IGNORE, dtype=torch.int64, device=dev)
    m = colours * markers_per_colour
    cells = _distinct(gen, batch, n, m + queries)
    mk, qc = cells[:, :m], cells[:, m:]
    mcol = torch.arange(colours, device=dev).repeat_interleave(markers_per_colour).expand(batch, m)
    mlab = torch.randint(0, labels, (batch, m), generator=gen, device=dev)
    tokens.scatter_(1, mk, 1 + mcol * labels + mlab)
    qcol = torch.randint(0, colours, (batch, queries), generator=gen, device=dev)
    tokens.scatter_(1, qc, 1 + colours * labels + qcol)
    ys, xs = torch.div(cells, side, rounding_mode="floor"), cells % side
    dy = ys[:, m:, None] - ys[:, None, :m]
    dx = xs[:, m:, None] - xs[:, None, :m]
    d2 = dy * dy + dx * dx
    d2 = torch.where(mcol[:, None, :] == qcol[:, :, None], d2, torch.full_like(d2, 4 * n))
    key = d2 * n + mk[:, None, :]               # ties to the marker of lower raster index
    targets.scatter_(1, qc, mlab.gather(1, key.argmin(dim=2)))
    return tokens, targets
