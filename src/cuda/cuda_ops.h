/* Internal entry points of the CUDA backend. Each has the signature of the
 * public operator it implements; src/ops/<op>.c calls it (under
 * LA_WITH_CUDA) after validating the views, when the tensors are on CUDA. */
#ifndef LA_CUDA_OPS_H
#define LA_CUDA_OPS_H
#include "longattn.h"
#ifdef __cplusplus
extern "C" {
#endif
/* Declarations are added here as kernels land (one .cu per op). */
/* ---- linear family (cuda-linear): devmem.cu, softmax.cu, linear.cu, mhla.cu, focused.cu ---- */
la_status la_cuda_probe(int *available);
la_status la_softmax_attention_cuda(const la_softmax_params *p, const la_tensor *q,
                                    const la_tensor *k, const la_tensor *v, la_tensor *out,
                                    la_tensor *lse, la_context *ctx);
la_status la_linear_attention_cuda(const la_linear_params *p, const la_tensor *q,
                                   const la_tensor *k, const la_tensor *v, la_tensor *out,
                                   const la_tensor *S_in, const la_tensor *z_in,
                                   la_tensor *S_out, la_tensor *z_out, la_context *ctx);
la_status la_focused_attention_cuda(const la_focused_params *p, const la_tensor *q,
                                    const la_tensor *k, const la_tensor *v,
                                    const la_tensor *conv, const la_tensor *conv_bias,
                                    const la_tensor *softplus_param, const la_tensor *focus,
                                    la_tensor *out, la_context *ctx);
la_status la_mhla_forward_cuda(const la_mhla_params *p, const la_tensor *q, const la_tensor *k,
                               const la_tensor *v, const la_tensor *mixing, la_tensor *out,
                               la_context *ctx);
la_status la_mhla_causal_forward_cuda(const la_mhla_causal_params *p, const la_tensor *q,
                                      const la_tensor *k, const la_tensor *v,
                                      const la_tensor *mixing, la_tensor *out, la_context *ctx);
/* ---- end linear family ---- */
/* ---- MHLA decoding state on CUDA (mhla_decode.cu): called by src/ops/mhla.c ---- */
/* p as validated (scale_q 0 = D^-1/2); mixing a validated CUDA [M,M] / [H,M,M]
 * view. *dev_state: an opaque device state (synchronizes once, at creation). */
la_status la_mhla_state_create_cuda(const la_mhla_causal_params *p, int64_t B, int64_t H,
                                    int64_t D, int64_t Dv, const la_tensor *mixing,
                                    void **dev_state);
/* n = q->ne[1] tokens after pos0 (views validated, capacity checked); no sync. */
la_status la_mhla_state_append_cuda(void *dev_state, int64_t pos0, const la_tensor *q,
                                    const la_tensor *k, const la_tensor *v, la_tensor *out,
                                    la_context *ctx);
void la_mhla_state_destroy_cuda(void *dev_state);
/* ---- end MHLA decoding state ---- */
/* ---- sparse family (cuda-sparse): dsa.cu, topk.cu, hisa.cu, sparse_attn.cu ---- */
la_status la_dsa_indexer_cuda(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                              const la_tensor *w, const la_tensor *start, const la_tensor *end,
                              la_tensor *idx, la_tensor *scores, la_context *ctx);
la_status la_hisa_indexer_cuda(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                               const la_tensor *w, const la_tensor *start, const la_tensor *end,
                               la_tensor *idx, la_context *ctx);
la_status la_blocksparse_indexer_cuda(const la_index_params *p, const la_tensor *q,
                                      const la_tensor *k, const la_tensor *w,
                                      const la_tensor *start, const la_tensor *end,
                                      la_tensor *idx, la_context *ctx);
la_status la_topk_cuda(const la_tensor *scores, la_tensor *idx, la_context *ctx);
la_status la_sparse_attention_cuda(const la_sparse_attn_params *p, const la_tensor *q,
                                   const la_tensor *kv, const la_tensor *idx, la_tensor *out,
                                   la_tensor *lse, la_context *ctx);
/* ---- end sparse family ---- */
#ifdef __cplusplus
}
#endif
#endif
