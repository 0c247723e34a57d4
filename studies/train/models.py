"""A 2-layer pre-norm transformer whose attention is one of longattn's layers.

Every variant has the same embedding, MLP, norms and head; only the attention
module differs (its parameter count is reported beside the results):

    softmax   SoftmaxAttention below: qkv projection, longattn.softmax_attention
              (or torch SDPA with impl="sdpa", the cross-check), output projection
    linear    longattn.nn.LinearAttention(feature="elu1")
    mhla      longattn.nn.MHLA (learned mixing; causal: chunkwise with
              uniform_causal init; 2-D: locality init over the block grid)
    focused   FocusedAttention below: longattn.nn.FocusedLinearAttention (FLatten;
              2-D maps only) with its positional encoding added in k's dtype
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import longattn
import longattn.nn as lnn


def torch_attention(q, k, v, causal):
    """Softmax attention in PyTorch ([B, H, N, D]): SDPA where torch has it
    (2.0+), else the same formula written out (torch 1.13, the CPU here)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    return s.softmax(-1) @ v


class SoftmaxAttention(nn.Module):
    def __init__(self, dim, num_heads, causal=False, impl="longattn"):
        super().__init__()
        self.h, self.causal, self.impl = num_heads, causal, impl
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.h, C // self.h).unbind(2)
        if self.impl == "sdpa":
            o = torch_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                self.causal).transpose(1, 2)
        else:
            o = longattn.softmax_attention(q, k, v, causal=self.causal)
        return self.proj(o.reshape(B, N, C))


class FocusedAttention(lnn.FocusedLinearAttention):
    """longattn.nn.FocusedLinearAttention with k + positional encoding kept in
    k's dtype. The layer's own forward adds its fp32 parameter to the bf16 k of
    autocast, which promotes k to fp32; the CUDA backward then takes the
    portable engine (the tensor-core one needs q, k, v all bf16). Same
    parameters, same arithmetic up to the bf16 rounding of k that autocast
    gives every other input."""

    def forward(self, x):
        B, N, C = x.shape
        H, D = self.num_heads, self.head_dim
        q, k, v = self.qkv(x).view(B, N, 3, H, D).unbind(2)
        k = k + self.positional_encoding.view(1, N, H, D).to(k.dtype)
        kk = self.kernel_size
        o = longattn.ops.focused_attention(q, k, v, variant="flatten", map=self.map,
                                           conv=self.dwc.weight.view(D, kk, kk),
                                           conv_bias=self.dwc.bias,
                                           softplus_param=self.scale.view(C),
                                           p=self.focusing_factor)
        return self.proj(o.reshape(B, N, C))


def make_attention(variant, dim, heads, causal, seq_len=None, grid=None, blocks=None,
                   chunk=None):
    if variant in ("softmax", "sdpa"):
        return SoftmaxAttention(dim, heads, causal=causal,
                                impl="sdpa" if variant == "sdpa" else "longattn")
    if variant == "linear":
        return lnn.LinearAttention(dim, heads, feature="elu1", causal=causal)
    if variant == "mhla":
        if causal:
            m = math.ceil(seq_len / chunk)
            return lnn.MHLA(dim, heads, blocks=(m,), causal=True, chunk=chunk)
        return lnn.MHLA(dim, heads, blocks=tuple(blocks), grid=tuple(grid))
    if variant == "focused":
        if causal:
            raise ValueError("focused attention (FLatten) is non-causal: 2-D tasks only")
        return FocusedAttention(dim, heads, map=tuple(grid))
    raise ValueError("unknown attention variant %r" % variant)


class Block(nn.Module):
    def __init__(self, dim, attn, mlp_ratio=4):
        super().__init__()
        self.n1, self.attn = nn.LayerNorm(dim), attn
        self.n2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(),
                                 nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


def sinusoidal(n, dim):
    """[n, dim] sin/cos table (Vaswani et al.), entries of variance 1/2 per
    pair: scaled by the embedding std it has the token embedding's norm."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    t = torch.zeros(n, dim)
    t[:, 0::2] = torch.sin(pos * freq)
    t[:, 1::2] = torch.cos(pos * freq)[:, : dim // 2]
    return t


class TinyLM(nn.Module):
    """Token + learned position embedding (1-D, or row + column on a 2-D grid),
    `layers` blocks, a final norm and a linear head over `classes`; with
    tie=True (classes == vocab) the head's weight is the token embedding, as
    Zoology-style language models do (the head needs no separate value table)."""

    def __init__(self, vocab, classes, dim, heads, layers, variant, causal, seq_len,
                 grid=None, blocks=None, chunk=None, tie=False, pos_init="normal",
                 emb_std=0.02, out_std=None):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        nn.init.normal_(self.emb.weight, std=emb_std)
        self.grid = grid
        if grid is None:
            if pos_init == "sinusoidal":
                self.pos = nn.Parameter(sinusoidal(seq_len, dim) * emb_std)
            elif pos_init == "normal":
                self.pos = nn.Parameter(torch.randn(seq_len, dim) * emb_std)
            else:
                raise ValueError("pos_init %r is not normal or sinusoidal" % (pos_init,))
        else:
            self.row = nn.Parameter(torch.randn(grid[0], 1, dim) * 0.02)
            self.col = nn.Parameter(torch.randn(1, grid[1], dim) * 0.02)
        self.blocks = nn.ModuleList([
            Block(dim, make_attention(variant, dim, heads, causal, seq_len=seq_len, grid=grid,
                                      blocks=blocks, chunk=chunk)) for _ in range(layers)])
        if out_std is not None:
            # GPT-2-style: the blocks' output projections (attention and MLP) start small,
            # so the residual stream keeps the embeddings at init
            for blk in self.blocks:
                for lin in (getattr(blk.attn, "proj", None) or blk.attn.o_proj, blk.mlp[2]):
                    nn.init.normal_(lin.weight, std=out_std)
                    if lin.bias is not None:
                        nn.init.zeros_(lin.bias)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes, bias=not tie)
        if tie:
            if classes != vocab:
                raise ValueError("tie=True needs classes == vocab")
            self.head.weight = self.emb.weight

    def forward(self, tokens, scored=None):
        """Logits [B, N, classes]; with `scored` only at the scored positions,
        [S, classes]: the same loss, without the head's work at the positions
        no target reads. `scored` is a bool mask [B, N], or the scored
        positions of each row in increasing order, int64 [B, P] (the mask's
        row-major order without its data-dependent shape: CUDA-graph safe)."""
        x = self.emb(tokens)
        if self.grid is None:
            x = x + self.pos[: tokens.shape[1]]
        else:
            x = x + (self.row + self.col).reshape(-1, x.shape[-1])
        for blk in self.blocks:
            x = blk(x)
        if scored is not None:
            if scored.dtype == torch.bool:
                x = x[scored]
            else:
                c = x.shape[-1]
                x = x.gather(1, scored[..., None].expand(-1, -1, c)).reshape(-1, c)
        return self.head(self.norm(x))

    def mhla_layers(self):
        return [blk.attn for blk in self.blocks if isinstance(blk.attn, lnn.MHLA)]

    def param_groups(self, weight_decay):
        """AdamW groups: decay on the matrices of the blocks and the head; none on
        embeddings, positions, norms, biases or MHLA's mixing matrix."""
        decay, rest = [], []
        seen = set()
        for name, p in self.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            matrix = p.ndim >= 2 and not name.startswith(("emb", "pos", "row", "col")) \
                and not name.endswith("mixing") and "positional_encoding" not in name
            (decay if matrix else rest).append(p)
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": rest, "weight_decay": 0.0}]

    def attention_params(self):
        return sum(p.numel() for blk in self.blocks for p in blk.attn.parameters())
