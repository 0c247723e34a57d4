/* View checks of the sparse family shared by the CPU entry points
 * (src/ops/{dsa,sparse_attn}.c) and the CUDA backend (src/cuda/{dsa,hisa,
 * sparse_attn}.cu): one set of rules and messages for both devices. They
 * read no tensor data, so they work on device pointers too. */
#ifndef LA_SPARSE_VALIDATE_H
#define LA_SPARSE_VALIDATE_H
#include "longattn.h"
#ifdef __cplusplus
extern "C" {
#endif
/* p, q, k, w and idx are non-NULL (messages name `op`). */
la_status la_idx_check_args(const char *op, const la_index_params *p, const la_tensor *q,
                            const la_tensor *k, const la_tensor *w, const la_tensor *idx);
/* Indexer views on device `dev`: q [T,HI,dI], k [L,dI], w [T,HI] of a float
 * dtype in `float_mask`, idx int32 [T,topk], start/end int32 [T] (optional),
 * topk > 0, index ranges, idx not aliasing an input. */
la_status la_idx_check_views(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                             const la_tensor *w, const la_tensor *start, const la_tensor *end,
                             const la_tensor *idx, la_device dev, unsigned float_mask);
/* Sparse attention views on device `dev` (non-NULL p, q, kv, idx, out):
 * q [T,Hq,Dqk], kv [L,Dqk] or [L,Hkv,Dqk], idx int32 [T,k], out [T,Hq,dv],
 * lse [T,Hq] (optional), dv and scale, no output aliasing an input. */
la_status la_sparse_attn_check_views(const la_sparse_attn_params *p, const la_tensor *q,
                                     const la_tensor *kv, const la_tensor *idx,
                                     const la_tensor *out, const la_tensor *lse, la_device dev,
                                     unsigned float_mask);
#ifdef __cplusplus
}
#endif
#endif
