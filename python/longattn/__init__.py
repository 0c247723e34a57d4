"""longattn — attention over long sequences, from NumPy and PyTorch.

A thin ctypes layer over liblongattn (the C library does all the work):
MHLA, focused linear attention, HISA/DSA sparse indexers, sparse MLA
attention, and softmax / linear attention baselines. Inputs use the
[B, N, H, D] layout of flash-attn and flash-linear-attention, with any
strides; outputs come back as the same kind of array (numpy or torch) on the
same device, with the first input's dtype.

    >>> import torch, longattn
    >>> q = k = v = torch.randn(2, 1024, 8, 64)
    >>> o = longattn.softmax_attention(q, k, v, causal=True)
    >>> o = longattn.linear_attention(q, k, v, feature="elu1", causal=True)

See docs/PYTHON.md for how the library is found and for GPU use.
"""
from . import _lib
from ._errors import (LongattnError, LongattnRuntimeError, LongattnUnsupportedError,
                      LongattnValueError)
from ._tensor import build_info, cuda_available, get_num_threads, set_num_threads
from .ops import (MHLADecoder, focused_attention, linear_attention, mhla, mhla_causal,
                  mhla_init, mhla_project, softmax_attention)
from .index_ops import (IndexCache, attention_map, blocksparse_topk, dsa_topk, hisa_topk,
                        map_rank_entropy, sparse_attention, topk)
from .paged import PagedIndexCache, dsa_topk_paged, hisa_topk_paged, sparse_attention_paged

__version__ = "0.1.0"

# torch.ops.longattn.* custom ops (torch >= 2.4) are registered now when torch
# is already imported, else on the first call that sees a torch tensor.
if "torch" in __import__("sys").modules:
    from .ops import install_custom_ops as _install
    _install()

# Python function -> the C symbols it needs (has_op() checks them).
OPS = {
    "softmax_attention": ("la_softmax_attention",),
    "linear_attention": ("la_linear_attention",),
    "focused_attention": ("la_focused_attention",),
    "mhla": ("la_mhla_forward",),
    "mhla_causal": ("la_mhla_causal_forward",),
    "mhla_init": ("la_mhla_init",),
    "mhla_project": ("la_mhla_project",),
    "MHLADecoder": ("la_mhla_state_create", "la_mhla_state_append", "la_mhla_state_length",
                    "la_mhla_state_destroy"),
    "dsa_topk": ("la_dsa_indexer",),
    "hisa_topk": ("la_hisa_indexer",),
    "blocksparse_topk": ("la_blocksparse_indexer",),
    "topk": ("la_topk",),
    "IndexCache": ("la_index_cache_create", "la_index_cache_append", "la_index_cache_length",
                   "la_index_cache_hisa", "la_index_cache_destroy"),
    "sparse_attention": ("la_sparse_attention",),
    "attention_map": ("la_attention_map", "la_map_rank_entropy"),
    "map_rank_entropy": ("la_map_rank_entropy",),
}


def __getattr__(name):
    """`longattn.nn` (the torch layers) is imported on first use, so that
    `import longattn` does not import torch."""
    if name == "nn":
        import importlib
        return importlib.import_module(".nn", __name__)
    raise AttributeError("module 'longattn' has no attribute %r" % name)


def library_path() -> str:
    """Path of the loaded liblongattn.so (loads it if needed)."""
    _lib.lib.dll
    return _lib.lib.path


def has_op(name: str) -> bool:
    """Whether the loaded library implements Python function `name`."""
    return all(_lib.lib.has(s) for s in OPS[name])


def available_ops() -> list:
    """Names of the Python functions whose C symbols are present."""
    return [n for n in OPS if has_op(n)]


__all__ = ["softmax_attention", "linear_attention", "focused_attention", "mhla",
           "mhla_causal", "mhla_init", "mhla_project", "MHLADecoder", "dsa_topk", "hisa_topk",
           "blocksparse_topk", "topk", "IndexCache", "sparse_attention", "attention_map",
           "map_rank_entropy", "build_info", "cuda_available", "set_num_threads",
           "get_num_threads", "library_path", "has_op", "available_ops", "LongattnError",
           "LongattnValueError", "LongattnRuntimeError", "LongattnUnsupportedError"]
