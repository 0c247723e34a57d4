/* Causal linear attention backward on bf16 tensor cores (variant "mma" of
 * family "linear_bwd", linear_causal_bwd_tc.cu). linear_bwd.cu asks
 * lcb_eligible() and hands the call over; everything else keeps the portable
 * engine (linblock_bwd.cu). Internal; included by the CUDA sources only. */
#ifndef LA_CUDA_LINEAR_CAUSAL_BWD_TC_CUH
#define LA_CUDA_LINEAR_CAUSAL_BWD_TC_CUH

#include "cuda/bwd_common.cuh"

/* causal MHLA: the mixing of the chunk states (lcb_problem.mix) */
#include "cuda/mhla_causal_mix.cuh"

struct lcb_problem {
    const la_tensor *q, *k, *v, *d_out;
    la_tensor *dq, *dk, *dv;    /* NULL = skip */
    const float *S_in, *dS_out; /* packed [B·H][D·Dv + D] (S, then z) fp32; NULL = zero */
    float *dS_in;               /* packed as S_in; NULL = skip */
    int feature, normalize;
    float scale_q, eps;
    const lcb_mixing *mix; /* NULL: causal linear attention */
};

/* What the tensor-core path takes (the text of the portable fallback's
 * verbose line says the same). want_dS_in: d_S_in or d_z_in asked for. */
#define LCB_NEEDS                                                                              \
    "causal: bf16 views with D = Dv in {64, 128}, unit inner stride, 16-byte aligned rows, "  \
    "N >= 64, B*H <= 65535; with normalize: no identity feature and no d_S_in / d_z_in"
int lcb_eligible(const la_linear_params *p, const la_tensor *q, const la_tensor *k,
                 const la_tensor *v, const la_tensor *d_out, const la_tensor *dq,
                 const la_tensor *dk, const la_tensor *dv, int want_dS_in);
la_status lcb_backward(const lcb_problem *p, const la_context *ctx, cudaStream_t s);

#endif
