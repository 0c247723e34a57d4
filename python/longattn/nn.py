"""torch.nn layers over the longattn operators (shared/TRAINING.md §2).

Each layer maps x [B, N, dim] to [B, N, dim] on CPU or CUDA, in float32,
bfloat16 or float16, and is trainable end to end (the operators' backward
passes are the C library's). The q / k / v projections are sliced out of one
projection as strided [B, N, H, D] views: nothing is copied before the
kernel.

state_dict keys (the same names as the reference implementations they port):

  MHLA                    qkv.weight [3·dim, dim], qkv.bias [3·dim] (qkv_bias),
                          mixing [M, M] or [H, M, M] (per_head_mixing),
                          lepe.weight [dim, 1, k(, k(, k))], lepe.bias [dim]
                          (lepe_kernel), proj.weight [dim, dim], proj.bias [dim]
  FocusedLinearAttention  qkv.weight, qkv.bias, scale [1, 1, dim] (softplus
                          parameter, init 0), positional_encoding [1, N, dim]
                          (init 0, added to k), dwc.weight [D, 1, k, k],
                          dwc.bias [D], proj.weight, proj.bias
  LinearAttention         q_proj.weight, k_proj.weight, v_proj.weight,
                          o_proj.weight (all [dim, dim], no bias; fla's names)
"""
import math
from typing import Optional, Sequence, Union

import torch
from torch import nn

from . import ops

ops.install_custom_ops()  # torch.ops.longattn.* where torch >= 2.4

Dims = Union[int, str, Sequence[int]]

__all__ = ["MHLA", "FocusedLinearAttention", "LinearAttention"]


def _split_heads(t, B, N, H, D):
    """[B, N, 3·H·D] -> q, k, v [B, N, H, D] strided views (no copy)."""
    return t.view(B, N, 3, H, D).unbind(2)


def _as_dims(value):
    if isinstance(value, str):
        return tuple(int(s) for s in value.lower().split("x"))
    if isinstance(value, int):
        return (value,)
    return tuple(int(s) for s in value)


class MHLA(nn.Module):
    """Multi-head linear attention layer (SPEC §5): qkv projection, MHLA over
    token blocks with a learnable mixing matrix W, an optional depthwise
    positional conv of v over the grid (LePE), output projection.

    MHLA(dim, num_heads, blocks, grid=None, causal=False, chunk=64,
         qkv_bias=True, lepe_kernel=None, mixing_init="locality",
         per_head_mixing=False, feature="relu_eps")

    Non-causal: `blocks` is the block grid (int, tuple or "HxW"; M = Π blocks)
    and `grid` the token grid ((N), (Hm, Wm) or (T, Hm, Wm); None = 1-D), also
    settable per call with forward(x, grid=...). W is [M, M] (or [H, M, M]),
    initialized by `mixing_init` (SPEC §5.3: locality | locality_global |
    uniform_causal). normalize is the paper's per_query, scale_q = 1.
    Causal (1-D, chunkwise, SPEC §5.4): `blocks` is M, the number of chunks
    of `chunk` tokens (so N <= M·chunk), W is initialized uniform_causal
    (whatever mixing_init says unless it names another kind explicitly), the
    upper triangle is ignored by the operator, normalize "none" and
    scale_q = D**-0.5 as in the released NLP code; lepe_kernel is refused.

    Keep W valid during training with `layer.project_mixing_()` after each
    optimizer step (clamp to [1e-5, 1], causal: lower triangle).

    Example:
        >>> layer = longattn.nn.MHLA(256, 8, blocks=(4, 4), grid=(16, 16), lepe_kernel=3)
        >>> y = layer(torch.randn(2, 256, 256))        # [2, 256, 256]
    """

    def __init__(self, dim: int, num_heads: int, blocks: Dims, grid: Optional[Dims] = None,
                 causal: bool = False, chunk: int = 64, qkv_bias: bool = True,
                 lepe_kernel: Optional[int] = None, mixing_init: str = "locality",
                 per_head_mixing: bool = False, feature: str = "relu_eps"):
        super().__init__()
        if dim % num_heads:
            raise ValueError("MHLA: dim %d is not a multiple of num_heads %d" % (dim, num_heads))
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.blocks = _as_dims(blocks)
        self.grid = None if grid is None else _as_dims(grid)
        self.causal, self.chunk, self.feature = bool(causal), int(chunk), feature
        if self.causal:
            if len(self.blocks) != 1:
                raise ValueError("MHLA: causal MHLA is 1-D: blocks must be M (the number of "
                                 "chunks), got %r" % (blocks,))
            if lepe_kernel is not None:
                raise ValueError("MHLA: lepe_kernel (a non-causal conv over v) cannot be "
                                 "combined with causal=True")
            if mixing_init == "locality":
                mixing_init = "uniform_causal"
        M = math.prod(self.blocks)
        self.num_blocks = M
        self.mixing_init = mixing_init
        self.per_head_mixing = bool(per_head_mixing)
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        shape = (num_heads, M, M) if per_head_mixing else (M, M)
        self.mixing = nn.Parameter(torch.empty(shape))
        self.lepe = None
        if lepe_kernel is not None:
            if lepe_kernel % 2 == 0 or lepe_kernel < 1:
                raise ValueError("MHLA: lepe_kernel must be odd, got %d" % lepe_kernel)
            nd = len(self.blocks)  # the grid has the rank of the block grid
            conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[nd]
            self.lepe = conv(dim, dim, lepe_kernel, padding=lepe_kernel // 2, groups=dim)
        self.proj = nn.Linear(dim, dim)
        self.reset_mixing()

    def reset_mixing(self) -> None:
        """(Re)initialize W with `mixing_init` (SPEC §5.3)."""
        b = (self.num_blocks,) if self.mixing_init == "uniform_causal" else self.blocks
        W = torch.from_numpy(ops.mhla_init(b, kind=self.mixing_init))
        with torch.no_grad():
            self.mixing.copy_(W.expand_as(self.mixing))

    @torch.no_grad()
    def project_mixing_(self) -> None:
        """Training-time projection of W (SPEC §5.3): clamp to [1e-5, 1];
        causal also zeroes the upper triangle."""
        self.mixing.clamp_(1e-5, 1.0)
        if self.causal:
            self.mixing.copy_(torch.tril(self.mixing))

    def forward(self, x: torch.Tensor, grid: Optional[Dims] = None) -> torch.Tensor:
        B, N, C = x.shape
        H, D = self.num_heads, self.head_dim
        q, k, v = _split_heads(self.qkv(x), B, N, H, D)
        W = self.mixing if self.mixing.dtype == torch.float32 else self.mixing.float()
        if self.causal:
            o = ops.mhla_causal(q, k, v, W, chunk=self.chunk, feature=self.feature)
        else:
            g = self.grid if grid is None else _as_dims(grid)
            o = ops.mhla(q, k, v, W, grid=g, blocks=self.blocks, feature=self.feature)
        o = o.reshape(B, N, C)
        if self.lepe is not None:
            g = self.grid if grid is None else _as_dims(grid)
            g = (N,) if g is None else g
            vmap = v.reshape(B, N, C).transpose(1, 2).reshape(B, C, *g)
            o = o + self.lepe(vmap).reshape(B, C, N).transpose(1, 2)
        return self.proj(o)

    def extra_repr(self) -> str:
        return ("dim=%d, num_heads=%d, blocks=%s, grid=%s, causal=%s, chunk=%d, feature=%s"
                % (self.dim, self.num_heads, self.blocks, self.grid, self.causal, self.chunk,
                   self.feature))


class FocusedLinearAttention(nn.Module):
    """The FLatten Transformer's focused linear attention module (SPEC §4a)
    over an Hm×Wm token map.

    FocusedLinearAttention(dim, num_heads, map, kernel_size=5,
                           focusing_factor=3, qkv_bias=True)

    As the released module: a learnable positional encoding added to k, the
    focused map f_p((ReLU(x) + 1e-6) / softplus(scale)) on q and k with norms
    over all dim channels, the mean-form normalized linear attention per
    head, plus a depthwise kernel_size² conv of v (one [D, 1, k, k] kernel
    shared by the heads, with bias), then the output projection.

    Example:
        >>> layer = longattn.nn.FocusedLinearAttention(128, 4, map=(14, 14))
        >>> y = layer(torch.randn(2, 196, 128))          # [2, 196, 128]
    """

    def __init__(self, dim: int, num_heads: int, map: Dims, kernel_size: int = 5,
                 focusing_factor: float = 3, qkv_bias: bool = True):
        super().__init__()
        if dim % num_heads:
            raise ValueError("FocusedLinearAttention: dim %d is not a multiple of num_heads %d"
                             % (dim, num_heads))
        hw = _as_dims(map)
        if len(hw) != 2:
            raise ValueError("FocusedLinearAttention: map must be (Hm, Wm), got %r" % (map,))
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.map = hw
        self.focusing_factor = focusing_factor
        self.kernel_size = kernel_size
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.scale = nn.Parameter(torch.zeros(1, 1, dim))
        self.positional_encoding = nn.Parameter(torch.zeros(1, hw[0] * hw[1], dim))
        D = self.head_dim
        self.dwc = nn.Conv2d(D, D, kernel_size, padding=kernel_size // 2, groups=D)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        H, D = self.num_heads, self.head_dim
        q, k, v = _split_heads(self.qkv(x), B, N, H, D)
        # in k's dtype: under autocast k is bf16 and the fp32 parameter would
        # promote it, sending the call to the fp32 (portable) backward
        k = k + self.positional_encoding.view(1, N, H, D).to(k.dtype)
        kk = self.kernel_size
        o = ops.focused_attention(q, k, v, variant="flatten", map=self.map,
                                  conv=self.dwc.weight.view(D, kk, kk),
                                  conv_bias=self.dwc.bias,
                                  softplus_param=self.scale.view(C),
                                  p=self.focusing_factor)
        return self.proj(o.reshape(B, N, C))

    def extra_repr(self) -> str:
        return ("dim=%d, num_heads=%d, map=%s, kernel_size=%d, focusing_factor=%s"
                % (self.dim, self.num_heads, self.map, self.kernel_size, self.focusing_factor))


class LinearAttention(nn.Module):
    """Linear attention layer (SPEC §3), fla.layers.LinearAttention's shape:
    q/k/v projections, linear attention per head with feature map `feature`,
    output projection.

    LinearAttention(dim, num_heads, feature="elu1", causal=False,
                    normalize=True)

    scale_q = 1, eps 1e-6, chunk 64 (causal). forward(x) -> [B, N, dim].

    Example:
        >>> layer = longattn.nn.LinearAttention(256, 4, causal=True)
        >>> y = layer(torch.randn(2, 1000, 256))
    """

    def __init__(self, dim: int, num_heads: int, feature: str = "elu1", causal: bool = False,
                 normalize: bool = True):
        super().__init__()
        if dim % num_heads:
            raise ValueError("LinearAttention: dim %d is not a multiple of num_heads %d"
                             % (dim, num_heads))
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.feature, self.causal, self.normalize = feature, bool(causal), bool(normalize)
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor,
                cu_seqlens: Optional[torch.Tensor] = None) -> torch.Tensor:
        B, N, C = x.shape
        H, D = self.num_heads, self.head_dim
        q = self.q_proj(x).view(B, N, H, D)
        k = self.k_proj(x).view(B, N, H, D)
        v = self.v_proj(x).view(B, N, H, D)
        o = ops.linear_attention(q, k, v, feature=self.feature, causal=self.causal,
                                 normalize=self.normalize, cu_seqlens=cu_seqlens)
        return self.o_proj(o.reshape(B, N, C))

    def extra_repr(self) -> str:
        return ("dim=%d, num_heads=%d, feature=%s, causal=%s, normalize=%s"
                % (self.dim, self.num_heads, self.feature, self.causal, self.normalize))
