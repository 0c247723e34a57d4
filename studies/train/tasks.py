"""Synthetic tasks of the training study, generated procedurally (no downloads).

mqar: multi-query associative recall (Zoology, arXiv 2312.04927), causal.
    The first 2·P tokens are key-value pairs k1 v1 ... kP vP (keys from the first
    half of the vocabulary, values from the second); afterwards each key appears
    once more, at a random even offset, and the model must predict its value at
    that position. Every other position holds a random token and is not scored.

nearest: a 2-D non-causal task on an S×S token grid. M markers carry a colour
    and a label; Q query cells carry a colour only. The target of a query cell is
    the label of the nearest marker of its colour (Euclidean distance, ties to the
    marker of lower raster index). It needs content-based retrieval (the colour)
    and locality (the nearest one), which is what separates global linear
    attention from MHLA's block mixing. Background cells are not scored.

Both return (tokens int64 [B, N], targets int64 [B, N] with -100 = not scored).
"""
import numpy as np
import torch

IGNORE = -100


def mqar_batch(rng, batch, seq_len, pairs, vocab=8192):
    if 2 * pairs + 2 * pairs > seq_len:
        raise ValueError("mqar: %d pairs do not fit %d tokens" % (pairs, seq_len))
    half = vocab // 2
    tokens = rng.integers(1, vocab, size=(batch, seq_len))
    targets = np.full((batch, seq_len), IGNORE, dtype=np.int64)
    slots = (seq_len - 2 * pairs) // 2          # query slots: pairs of positions
    for b in range(batch):
        keys = rng.choice(np.arange(1, half), size=pairs, replace=False)
        vals = rng.integers(half, vocab, size=pairs)
        tokens[b, 0:2 * pairs:2] = keys
        tokens[b, 1:2 * pairs:2] = vals
        where = np.sort(rng.choice(slots, size=pairs, replace=False))
        order = rng.permutation(pairs)
        pos = 2 * pairs + 2 * where
        tokens[b, pos] = keys[order]
        tokens[b, pos + 1] = vals[order]
        targets[b, pos] = vals[order]
    return torch.from_numpy(tokens.astype(np.int64)), torch.from_numpy(targets)


def nearest_vocab(colours, labels):
    return 1 + colours * labels + colours


def nearest_batch(rng, batch, side, colours=4, labels=8, markers_per_colour=4, queries=64):
    n = side * side
    tokens = np.zeros((batch, n), dtype=np.int64)
    targets = np.full((batch, n), IGNORE, dtype=np.int64)
    ys, xs = np.divmod(np.arange(n), side)
    m = colours * markers_per_colour
    for b in range(batch):
        cells = rng.choice(n, size=m + queries, replace=False)
        mk, qc = cells[:m], cells[m:]
        mcol = np.repeat(np.arange(colours), markers_per_colour)
        mlab = rng.integers(0, labels, size=m)
        tokens[b, mk] = 1 + mcol * labels + mlab
        qcol = rng.integers(0, colours, size=queries)
        tokens[b, qc] = 1 + colours * labels + qcol
        d2 = (ys[qc, None] - ys[None, mk]) ** 2 + (xs[qc, None] - xs[None, mk]) ** 2
        d2 = np.where(mcol[None, :] == qcol[:, None], d2, np.iinfo(np.int64).max)
        # ties to the marker of lower raster index
        key = d2 * n + mk[None, :]
        targets[b, qc] = mlab[np.argmin(key, axis=1)]
    return torch.from_numpy(tokens), torch.from_numpy(targets)
