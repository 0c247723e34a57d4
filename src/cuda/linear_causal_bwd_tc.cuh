/* Causal linear attention backward on bf16 tensor cores (variant "mma" of
 * family "linear_bwd", linear_causal_bwd_tc.cu). linear_bwd.cu asks
 * lcb_eligible() and hands the call over; everything else keeps the portable
 * engine (linblock_bwd.cu). Internal; included by the CUDA sources only. */
#ifndef LA_CUDA_LINEAR_CAUSAL_BWD_TC_CUH
#define LA_CUDA_LINEAR_CAUSAL_BWD_TC_CUH

#include "cuda/bwd_common.cuh"

/* Causal MHLA (mhla_causal_bwd_tc.cu): the chunk states combine through
 * the mixing instead of the prefix sums, one 64-token chunk per block:
 * H_i = Σ_{b<i} W[i,b] S_b, the block's own part scaled by W[i,i]. */
struct lcb_mixing {
    const float *W;  /* packed fp32 [Hw][WM][WM] */
    const float *Ws; /* its strict lower triangle, [Hw][M][M] (M = chunks) */
    int64_t Hw, WM;
    float *dWd;      /* [B·H][M]: dW[i,i] per batch and head (NULL = skip) */
    float *dWp;      /* [B·H·splits][M][M]: dW[i,b] partials over state pieces */
    int64_t splits;  /* of the D·Dv + D state elements for dWp */
};
/* H = W_strict·S, dS = W_strictᵀ·G and the dW partials ⟨G_i, S_b⟩ over the
 * flattened states [B·H][M][SE] (mhla_causal_bwd_tc.cu, batched GEMMs) */
la_status mcb_combine(const lcb_mixing *m, const float *S, float *Hs, int64_t BH, int64_t H,
                      int64_t M, int64_t SE, cudaStream_t s);
la_status mcb_combine_bwd(const lcb_mixing *m, const float *G, const float *S, float *dS,
                          int64_t BH, int64_t H, int64_t M, int64_t SE, cudaStream_t s);

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
    "B*H <= 65535; with normalize: no identity feature and no d_S_in / d_z_in"
int lcb_eligible(const la_linear_params *p, const la_tensor *q, const la_tensor *k,
                 const la_tensor *v, const la_tensor *d_out, const la_tensor *dq,
                 const la_tensor *dk, const la_tensor *dv, int want_dS_in);
la_status lcb_backward(const lcb_problem *p, const la_context *ctx, cudaStream_t s);

#endif
