"""Context parallelism: one long sequence across the ranks of a
torch.distributed group (gloo on CPUs, NCCL on GPUs), forward and backward.

Every rank holds a contiguous slice of the tokens, [B, n_r, H, D], in rank
order (n_r may differ between ranks; softmax also takes the load-balanced
causal layout). Each function returns this rank's part of the single-process
result; gradients flow through torch autograd, the collectives being autograd
Functions whose backward is the adjoint collective (all_gather <->
reduce_scatter, all_reduce <-> all_reduce).

    mhla(q, k, v, W, grid, blocks, group=None, ...)      non-causal MHLA, one all_reduce
    mhla_causal(q, k, v, W, group=None, chunk=64, ...)   all_gather of chunk summaries
    linear_attention(q, k, v, group=None, causal=True)   LASP-2: all_gather of states
    softmax_attention(q, k, v, group=None, causal=...)   all-gather KV (balanced layout)
    dsa_topk(q, k, w, topk, group=None)                  keys sharded, merged top-k lists
    hisa_topk(q, k, w, topk, block, block_topk, ...)     the same, block stage included

Every function takes comm_log=CommLog() to record the collectives it issues
(docs/DISTRIBUTED.md has the volume model). Keep NCCL's NVLink multicast
off in launch scripts (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1); nothing here creates multicast objects.
"""
from ._comm import (CommLog, all_gather, all_reduce, balanced_chunks, balanced_positions,
                    balanced_shard, balanced_unshard, replicate, shard, shard_bounds)
from ._index import dsa_topk, hisa_topk
from ._linear import linear_attention
from ._mhla import mhla, mhla_causal
from ._softmax import softmax_attention

__all__ = ["mhla", "mhla_causal", "linear_attention", "softmax_attention", "dsa_topk",
           "hisa_topk", "CommLog", "all_gather", "all_reduce", "replicate", "shard",
           "shard_bounds", "balanced_chunks", "balanced_positions", "balanced_shard",
           "balanced_unshard"]
