"""A small ViT whose attention is swapped for each longattn layer, trained for
a few steps on random data (CPU, and CUDA where present).

    PYTHONPATH=python python3 examples/vit_swap.py            # every layer, CPU (+ CUDA)
    PYTHONPATH=python python3 examples/vit_swap.py --layer mhla --steps 5 --device cpu

With timm installed the ViT is timm's VisionTransformer (no class token,
average pooling, so the tokens form the patch grid the layers need);
otherwise a self-contained tiny ViT of the same structure (pre-norm blocks:
attention, MLP). Each block's attention becomes:

    mhla     longattn.nn.MHLA(dim, heads, blocks=(2, 2), grid=(g, g), lepe_kernel=3)
    focused  longattn.nn.FocusedLinearAttention(dim, heads, map=(g, g))
    linear   longattn.nn.LinearAttention(dim, heads)

The script prints the loss of every step; the loss must go down.
"""
import argparse
import sys

import torch
from torch import nn

import longattn.nn as lnn

LAYERS = ("mhla", "focused", "linear")


def make_attention(kind, dim, heads, grid):
    if kind == "mhla":
        return lnn.MHLA(dim, heads, blocks=(2, 2), grid=(grid, grid), lepe_kernel=3)
    if kind == "focused":
        return lnn.FocusedLinearAttention(dim, heads, map=(grid, grid), kernel_size=3)
    if kind == "linear":
        return lnn.LinearAttention(dim, heads)
    raise ValueError("unknown layer %r (one of %s)" % (kind, ", ".join(LAYERS)))


class Swapped(nn.Module):
    """Adapter with the call signature of timm's Attention (extra arguments
    such as attn_mask are ignored: the layers attend over all patches)."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x, *args, **kwargs):
        return self.layer(x)


class Block(nn.Module):
    def __init__(self, dim, attn, mlp_ratio=2):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), attn
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(),
                                 nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyViT(nn.Module):
    """Patch embedding, learned positions, pre-norm blocks, mean pooling."""

    def __init__(self, kind, img=32, patch=4, dim=64, depth=2, heads=4, classes=10):
        super().__init__()
        g = img // patch
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.pos = nn.Parameter(torch.randn(1, g * g, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, make_attention(kind, dim, heads, g))
                                    for _ in range(depth))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, img):
        x = self.embed(img).flatten(2).transpose(1, 2) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x).mean(1))


def build_vit(kind, img=32, patch=4, dim=64, depth=2, heads=4, classes=10, use_timm=None):
    """timm's VisionTransformer when installed (use_timm None/True), else TinyViT."""
    if use_timm is not False:
        try:
            from timm.models.vision_transformer import VisionTransformer
        except ImportError:
            if use_timm:
                raise
        else:
            g = img // patch
            m = VisionTransformer(img_size=img, patch_size=patch, embed_dim=dim, depth=depth,
                                  num_heads=heads, num_classes=classes, class_token=False,
                                  global_pool="avg", mlp_ratio=2)
            for blk in m.blocks:
                blk.attn = Swapped(make_attention(kind, dim, heads, g))
            return m
    return TinyViT(kind, img, patch, dim, depth, heads, classes)


def train(kind, device="cpu", steps=3, batch=8, seed=0, use_timm=None, log=print):
    """A few SGD steps on one fixed random batch; returns the losses."""
    torch.manual_seed(seed)
    model = build_vit(kind, use_timm=use_timm).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    img = torch.randn(batch, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)
    losses = []
    for step in range(steps):
        loss = nn.functional.cross_entropy(model(img), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        for m in model.modules():       # keep the MHLA mixing matrices valid
            if isinstance(m, lnn.MHLA):
                m.project_mixing_()
        losses.append(loss.item())
        log("%-8s %-4s step %d  loss %.4f" % (kind, device, step, losses[-1]))
    return losses


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layer", choices=LAYERS + ("all",), default="all")
    ap.add_argument("--device", choices=("cpu", "cuda", "all"), default="all")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--no-timm", action="store_true", help="use the self-contained tiny ViT")
    a = ap.parse_args(argv)
    kinds = LAYERS if a.layer == "all" else (a.layer,)
    devices = ["cpu"] if a.device == "cpu" else ["cuda"] if a.device == "cuda" else \
        ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    ok = True
    for dev in devices:
        for kind in kinds:
            losses = train(kind, dev, a.steps, use_timm=False if a.no_timm else None)
            if a.steps > 1 and not losses[-1] < losses[0]:
                print("%s on %s: the loss did not go down" % (kind, dev))
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
