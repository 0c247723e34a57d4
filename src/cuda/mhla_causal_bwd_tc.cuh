/* Causal MHLA backward on bf16 tensor cores (variant "mma" of family
 * "mhla_causal_bwd", mhla_causal_bwd_tc.cu): the causal linear kernels of
 * linear_causal_bwd_tc.cu with the prefix scans replaced by the mixing.
 * mhla_bwd.cu asks mcb_eligible() and hands the call over. Internal. */
#ifndef LA_CUDA_MHLA_CAUSAL_BWD_TC_CUH
#define LA_CUDA_MHLA_CAUSAL_BWD_TC_CUH

#include "cuda/bwd_common.cuh"

#define MCB_NEEDS                                                                              \
    "bf16 views with D = Dv in {64, 128}, unit inner stride, 16-byte aligned rows, "          \
    "N >= 64, B*H <= 65535, chunk 64, normalize none or per_query (per_query: no identity "   \
    "feature); "                                                                               \
    "with d_mixing (held to fp32 accuracy): normalize none and feature relu, relu_eps or "    \
    "identity"
int mcb_eligible(const la_mhla_causal_params *p, const la_tensor *q, const la_tensor *k,
                 const la_tensor *v, const la_tensor *d_out, const la_tensor *dq,
                 const la_tensor *dk, const la_tensor *dv, const la_tensor *d_mixing);
/* scale_q resolved (not 0); mixing [WM,WM] or [H,WM,WM], WM >= ceil(N/64) */
la_status mcb_backward(const la_mhla_causal_params *p, float scale_q, const la_tensor *q,
                       const la_tensor *k, const la_tensor *v, const la_tensor *mixing,
                       const la_tensor *d_out, la_tensor *dq, la_tensor *dk, la_tensor *dv,
                       la_tensor *d_mixing, const la_context *ctx, cudaStream_t s);

#endif
