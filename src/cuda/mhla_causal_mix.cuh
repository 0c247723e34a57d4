/* The mixing of causal MHLA's chunk states (SPEC §5.4), shared by the
 * forward (linear_causal_tc.cu through mhla_causal_tc.cu) and the backward
 * (linear_causal_bwd_tc.cu through mhla_causal_bwd_tc.cu): one 64-token
 * chunk per block, H_i = Σ_{b<i} W[i,b] S_b over the flattened states
 * [S | z] as batched tensor-core GEMMs (mhla_causal_bwd_tc.cu), the block's
 * own part scaled by W[i,i]. Internal; included by the CUDA sources only. */
#ifndef LA_CUDA_MHLA_CAUSAL_MIX_CUH
#define LA_CUDA_MHLA_CAUSAL_MIX_CUH

#include "cuda/common.cuh"

struct lcb_mixing {
    const float *W;  /* packed fp32 [Hw][WM][WM] */
    const float *Ws; /* its strict lower triangle, [Hw][M][M] (M = chunks) */
    int64_t Hw, WM;
    float *dWd;      /* [B·H][M]: dW[i,i] per batch and head (NULL = skip) */
    float *dWp;      /* [B·H·splits][M][M]: dW[i,b] partials over state pieces */
    int64_t splits;  /* of the D·Dv + D state elements for dWp */
};
/* mixing [WM,WM] or [H,WM,WM] (any dtype and strides, WM >= M) packed to W
 * ([Hw][WM][WM] fp32) and its strict lower triangle to Ws ([Hw][M][M]);
 * fills m->W, Ws, Hw, WM and zeroes the rest (stream ordered) */
la_status mcb_mixing_prepare(const la_tensor *mixing, int64_t M, float *W, float *Ws,
                             lcb_mixing *m, cudaStream_t s);
/* H = W_strict·S, dS = W_strictᵀ·G and the dW partials ⟨G_i, S_b⟩ over the
 * flattened states [B·H][M][SE] (mhla_causal_bwd_tc.cu, batched GEMMs) */
la_status mcb_combine(const lcb_mixing *m, const float *S, float *Hs, int64_t BH, int64_t H,
                      int64_t M, int64_t SE, cudaStream_t s);
la_status mcb_combine_bwd(const lcb_mixing *m, const float *G, const float *S, float *dS,
                          int64_t BH, int64_t H, int64_t M, int64_t SE, cudaStream_t s);

#endif
