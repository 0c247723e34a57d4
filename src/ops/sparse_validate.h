/* Validation of the sparse family (src/ops/sparse_validate.c), called by the
 * public entry points src/ops/{dsa,hisa,index_cache,topk,sparse_attn}.c
 * before they dispatch to a backend. Every check that reads no tensor data
 * runs on the views of any device; la_idx_resolve reads the range values and
 * so runs on CPU views only. Internal, not installed. */
#ifndef LA_SPARSE_VALIDATE_H
#define LA_SPARSE_VALIDATE_H
#include "core/internal.h"
#include "cpu/sparse_cpu.h"
#ifdef __cplusplus
extern "C" {
#endif
/* LA_ERR_UNSUPPORTED naming `name` when dev is CUDA in a build without the
 * CUDA backend. */
la_status la_sparse_check_device(const char *op, const char *name, la_device dev);

/* p, q, k, w and idx are non-NULL (messages name `op`). */
la_status la_idx_check_args(const char *op, const la_index_params *p, const la_tensor *q,
                            const la_tensor *k, const la_tensor *w, const la_tensor *idx);
/* Indexer views on device `dev`: q [T,HI,dI], k [L,dI], w [T,HI] of a float
 * dtype in `float_mask`, idx int32 [T,topk], start/end int32 [T] (optional),
 * topk > 0, index ranges, idx not aliasing an input. */
la_status la_idx_check_views(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                             const la_tensor *w, const la_tensor *start, const la_tensor *end,
                             const la_tensor *idx, la_device dev, unsigned float_mask);
/* An indexer call: the arguments, then the views on q's device (CPU:
 * f32/f64/bf16, no k_scale/q_scale; CUDA: also f16, and fp8 e4m3 q/k). */
la_status la_idx_check_call(const char *op, const la_index_params *p, const la_tensor *q,
                            const la_tensor *k, const la_tensor *w, const la_tensor *start,
                            const la_tensor *end, const la_tensor *idx);
/* CPU views checked by la_idx_check_call: reads start/end, checks
 * 0 <= start <= end <= L per query and fills P (ranges malloc'd, freed with
 * la_idx_problem_free). */
la_status la_idx_resolve(const char *op, const la_tensor *q, const la_tensor *k,
                         const la_tensor *w, const la_tensor *start, const la_tensor *end,
                         la_idx_problem *P);
void la_idx_problem_free(la_idx_problem *P);
/* block > 0 (and, need_m: block_topk > 0; else topk >= block). */
la_status la_idx_check_blocks(const char *op, const la_index_params *p, int need_m);
/* The DSA indexer's optional scores output [T,L] on q's device, aliasing no
 * input (views checked by la_idx_check_call). */
la_status la_dsa_check_scores(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                              const la_tensor *w, const la_tensor *start, const la_tensor *end,
                              const la_tensor *idx, const la_tensor *scores);

/* Row top-k: scores [R,L] float, idx int32 [R,k] on scores' device, L in the
 * int32 range, idx not aliasing scores. */
la_status la_topk_check_call(const la_tensor *scores, const la_tensor *idx);

/* Sparse attention views on device `dev` (non-NULL p, q, kv, idx, out):
 * q [T,Hq,Dqk], kv [L,Dqk] or [L,Hkv,Dqk], idx int32 [T,k], out [T,Hq,dv],
 * lse [T,Hq] (optional), dv and scale, no output aliasing an input. */
la_status la_sparse_attn_check_views(const la_sparse_attn_params *p, const la_tensor *q,
                                     const la_tensor *kv, const la_tensor *idx,
                                     const la_tensor *out, const la_tensor *lse, la_device dev,
                                     unsigned float_mask);
/* A sparse attention call: the arguments, then the views on q's device. */
la_status la_sparse_attn_check_call(const la_sparse_attn_params *p, const la_tensor *q,
                                    const la_tensor *kv, const la_tensor *idx,
                                    const la_tensor *out, const la_tensor *lse);
#ifdef __cplusplus
}
#endif
#endif
