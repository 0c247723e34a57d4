/* Internal entry points of the CUDA backward passes. Each has the signature
 * of the public la_<op>_backward it implements (include/longattn.h); the
 * ops layer (src/ops/) calls it after validating every view, when the
 * tensors are on CUDA. Implemented in the src/cuda files named <op>_bwd.cu. */
#ifndef LA_CUDA_BWD_H
#define LA_CUDA_BWD_H
#include "longattn.h"
#ifdef __cplusplus
extern "C" {
#endif
la_status la_softmax_backward_cuda(const la_softmax_params *p, const la_tensor *q,
                                   const la_tensor *k, const la_tensor *v, const la_tensor *out,
                                   const la_tensor *lse, const la_tensor *d_out, la_tensor *dq,
                                   la_tensor *dk, la_tensor *dv, la_context *ctx);
la_status la_linear_backward_cuda(const la_linear_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *v, const la_tensor *out,
                                  const la_tensor *S_in, const la_tensor *z_in,
                                  const la_tensor *d_out, const la_tensor *d_S_out,
                                  const la_tensor *d_z_out, la_tensor *dq, la_tensor *dk,
                                  la_tensor *dv, la_tensor *d_S_in, la_tensor *d_z_in,
                                  la_context *ctx);
la_status la_mhla_backward_cuda(const la_mhla_params *p, const la_tensor *q, const la_tensor *k,
                                const la_tensor *v, const la_tensor *mixing,
                                const la_tensor *out, const la_tensor *d_out, la_tensor *dq,
                                la_tensor *dk, la_tensor *dv, la_tensor *d_mixing,
                                la_context *ctx);
la_status la_mhla_causal_backward_cuda(const la_mhla_causal_params *p, const la_tensor *q,
                                       const la_tensor *k, const la_tensor *v,
                                       const la_tensor *mixing, const la_tensor *out,
                                       const la_tensor *d_out, la_tensor *dq, la_tensor *dk,
                                       la_tensor *dv, la_tensor *d_mixing, la_context *ctx);
la_status la_focused_backward_cuda(const la_focused_params *p, const la_tensor *q,
                                   const la_tensor *k, const la_tensor *v,
                                   const la_tensor *conv, const la_tensor *conv_bias,
                                   const la_tensor *softplus_param, const la_tensor *focus,
                                   const la_tensor *out, const la_tensor *d_out, la_tensor *dq,
                                   la_tensor *dk, la_tensor *dv, la_tensor *d_conv,
                                   la_tensor *d_conv_bias, la_tensor *d_softplus_param,
                                   la_tensor *d_focus, la_context *ctx);
la_status la_sparse_attention_backward_cuda(const la_sparse_attn_params *p, const la_tensor *q,
                                            const la_tensor *kv, const la_tensor *idx,
                                            const la_tensor *out, const la_tensor *lse,
                                            const la_tensor *d_out, la_tensor *dq,
                                            la_tensor *dkv, la_context *ctx);
#ifdef __cplusplus
}
#endif
#endif
