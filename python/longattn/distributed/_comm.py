"""Collectives as autograd Functions, the byte log, and the token layout.

Every collective an operator issues goes through `_record`, which appends one
entry to the caller's CommLog (when one is passed): what the collective is,
which pass issued it, and the payload this rank hands to it. The payload is
the logical one: an all_gather's local tensor, an all_reduce's tensor, a
reduce_scatter's full input. gloo has no reduce_scatter; there it is run as an
all_reduce of the same tensor followed by taking this rank's slice (logged as
the reduce_scatter it stands for). docs/DISTRIBUTED.md turns payloads into
bytes on the wire (ring algorithms).

The adjoint pairs: all_reduce <-> all_reduce, all_gather <-> reduce_scatter,
replicate (a tensor every rank holds the same copy of) <-> all_reduce.
"""
import torch
import torch.distributed as dist


class CommLog:
    """A list of the collectives issued, for the communication-volume model.

    entries: (kind, tag, phase, nbytes) tuples in issue order; kind is
    all_reduce | all_gather | reduce_scatter, tag names what is sent (e.g.
    "summaries"), phase is "fwd" or "bwd", nbytes the payload this rank hands
    to the collective. One CommLog per caller (no module-level state).
    """

    def __init__(self):
        self.entries = []

    def add(self, kind, tag, phase, nbytes):
        self.entries.append((kind, tag, phase, int(nbytes)))

    def clear(self):
        self.entries = []

    def bytes(self, phase=None, kind=None):
        """Sum of payloads, optionally of one phase and/or kind."""
        return sum(e[3] for e in self.entries
                   if (phase is None or e[2] == phase) and (kind is None or e[0] == kind))

    def __len__(self):
        return len(self.entries)

    def __repr__(self):
        return "CommLog(%r)" % (self.entries,)


def _nbytes(x):
    return x.numel() * x.element_size()


def _record(log, kind, tag, phase, x):
    if log is not None:
        log.add(kind, tag, phase, _nbytes(x))


def world(group):
    """(world size, rank) of `group` (None = the default group)."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("longattn.distributed: torch.distributed is not initialized "
                           "(call torch.distributed.init_process_group first)")
    return dist.get_world_size(group), dist.get_rank(group)


def _has_reduce_scatter(group):
    return dist.get_backend(group) == "nccl"


def _gloo_bf16(x, group):
    """gloo (torch 1.13) has no bfloat16: such tensors travel as float16 bits
    (gathers) or in float32 (sums)."""
    return x.dtype == torch.bfloat16 and dist.get_backend(group) == "gloo"


def _sum_inplace(x, group):
    if _gloo_bf16(x, group):
        y = x.float()
        dist.all_reduce(y, group=group)
        x.copy_(y)
    else:
        dist.all_reduce(x, group=group)


def all_gather_plain(x, group, log, tag, phase="fwd"):
    """all_gather without autograd: [*] on every rank -> [P, *]."""
    P, _ = world(group)
    x = x.contiguous()
    _record(log, "all_gather", tag, phase, x)
    bits = _gloo_bf16(x, group)
    src = x.view(torch.float16) if bits else x
    out = [torch.empty_like(src) for _ in range(P)]
    dist.all_gather(out, src, group=group)
    out = torch.stack(out)
    return out.view(torch.bfloat16) if bits else out


def _reduce_scatter(g, group, log, tag):
    """g [P, *] on every rank -> Σ_ranks g[rank] on this rank."""
    P, r = world(group)
    g = g.contiguous()
    _record(log, "reduce_scatter", tag, "bwd", g)
    if _has_reduce_scatter(group):
        out = torch.empty_like(g[0])
        dist.reduce_scatter(out, list(g.unbind(0)), group=group)
        return out
    _sum_inplace(g, group)  # gloo: no reduce_scatter
    return g[r].clone()


class _AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, log, tag):
        ctx.group, ctx.log, ctx.tag = group, log, tag
        y = x.contiguous().clone()
        _record(log, "all_reduce", tag, "fwd", y)
        _sum_inplace(y, group)
        return y

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous().clone()
        _record(ctx.log, "all_reduce", "d" + ctx.tag, "bwd", g)
        _sum_inplace(g, ctx.group)
        return g, None, None, None


class _AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, log, tag):
        ctx.group, ctx.log, ctx.tag = group, log, tag
        return all_gather_plain(x, group, log, tag)

    @staticmethod
    def backward(ctx, g):
        return _reduce_scatter(g, ctx.group, ctx.log, "d" + ctx.tag), None, None, None


class _Replicate(torch.autograd.Function):
    """Identity on a tensor every rank holds the same copy of (a parameter such
    as the mixing matrix, an initial state): its gradient is the sum of every
    rank's partial gradient."""

    @staticmethod
    def forward(ctx, x, group, log, tag):
        ctx.group, ctx.log, ctx.tag = group, log, tag
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous().clone()
        _record(ctx.log, "all_reduce", "d" + ctx.tag, "bwd", g)
        _sum_inplace(g, ctx.group)
        return g, None, None, None


def all_reduce(x, group=None, log=None, tag="x"):
    """Σ over ranks, differentiable (backward: all_reduce of the gradient)."""
    return _AllReduce.apply(x, group, log, tag)


def all_gather(x, group=None, log=None, tag="x"):
    """Stack of every rank's x ([P, *]; equal shapes), differentiable
    (backward: reduce_scatter of the gradient)."""
    return _AllGather.apply(x, group, log, tag)


def replicate(x, group=None, log=None, tag="x"):
    """x unchanged; backward sums the gradient over ranks (all_reduce)."""
    if not (torch.is_grad_enabled() and x.requires_grad):
        return x
    return _Replicate.apply(x, group, log, tag)


# ---------------------------------------------------------------------------
# token layout
# ---------------------------------------------------------------------------
def local_lengths(n_local, group, device, log, what=None):
    """Every rank's token count, in rank order (one all_gather of an int64).
    what: the op's name, to refuse (on every rank alike) a rank without tokens."""
    t = torch.tensor([int(n_local)], dtype=torch.int64, device=device)
    lengths = [int(x) for x in all_gather_plain(t, group, log, "lengths").view(-1).tolist()]
    if what is not None and min(lengths) < 1:
        raise ValueError("%s: every rank must hold at least one token; the ranks hold %s"
                         % (what, lengths))
    return lengths


def shard_bounds(n, world_size):
    """The canonical contiguous split: rank r holds tokens
    [r·n // P, (r+1)·n // P)."""
    return [(r * n // world_size, (r + 1) * n // world_size) for r in range(world_size)]


def shard(x, rank, world_size, dim=1):
    """Rank `rank`'s slice of x along `dim` under the canonical split."""
    a, b = shard_bounds(x.shape[dim], world_size)[rank]
    return x.narrow(dim, a, b - a)


def balanced_chunks(n, world_size):
    """Bounds of the 2·P chunks of the load-balanced causal layout."""
    return shard_bounds(n, 2 * world_size)


def balanced_positions(n, rank, world_size):
    """Global token positions rank `rank` holds in the balanced layout: chunk
    r, then chunk 2P-1-r (each a contiguous range), as a list of ranges."""
    ch = balanced_chunks(n, world_size)
    return [ch[rank], ch[2 * world_size - 1 - rank]]


def balanced_shard(x, rank, world_size, dim=1):
    """Rank `rank`'s tokens of x in the balanced layout (chunks r and
    2P-1-r concatenated along `dim`)."""
    parts = [x.narrow(dim, a, b - a) for a, b in balanced_positions(x.shape[dim], rank,
                                                                    world_size)]
    return torch.cat(parts, dim)


def balanced_unshard(parts, dim=1):
    """The full sequence from every rank's balanced shard (list in rank order)."""
    P = len(parts)
    n = sum(p.shape[dim] for p in parts)
    chunks = [None] * (2 * P)
    for r, p in enumerate(parts):
        (a0, a1), (b0, b1) = balanced_positions(n, r, P)
        chunks[r] = p.narrow(dim, 0, a1 - a0)
        chunks[2 * P - 1 - r] = p.narrow(dim, a1 - a0, b1 - b0)
    return torch.cat(chunks, dim)
