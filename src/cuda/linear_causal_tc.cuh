/* Causal linear attention (SPEC §3) on 16-bit tensor cores: D = Dv ∈ {32, 64, 128}, bf16
 * or fp16 rows with unit inner stride (linear_causal_tc.cu; fp16 while its
 * lct_f16_tc is true). linear.cu asks
 * lct_supported() and hands the call over; everything else keeps the portable
 * linfam.cu path. Internal; included by the CUDA sources only. */
#ifndef LA_CUDA_LINEAR_CAUSAL_TC_CUH
#define LA_CUDA_LINEAR_CAUSAL_TC_CUH

#include "common.cuh"

/* The kernels for a causal linear attention call (family "linear_causal"):
 * the tensor-core path (with the wide scan where it takes the chunk count,
 * or the walking scan; L > 0: a forced state-chunk length in tokens) or the
 * portable engine (linfam). */
enum lct_kernel { LCT_TC = 0, LCT_PORTABLE = 1 };
struct lct_choice {
    lct_kernel kernel;
    bool walk;  /* the walking scan whatever the chunk count */
    int64_t L;  /* > 0: state chunk of L tokens (a multiple of 64) */
};

/* Selection (pure): `forced` is the context's "linear_causal" variant (NULL:
 * the default). LA_ERR_ARG for an unknown name, LA_ERR_UNSUPPORTED when a
 * forced tensor-core variant does not take the views. */
la_status lct_select(const la_linear_params *p, const la_tensor *q, const la_tensor *k,
                     const la_tensor *v, const la_tensor *out, const char *forced,
                     lct_choice *c);

/* Causal MHLA (mhla_causal_tc.cu): chunks of 64 tokens (a chunk is a
 * block), the prefix scan replaced by `combine` (Hs[bh][c] = Σ_{b<c} W[c,b]
 * S[bh][b] over the [B·H][M][SE] fp32 states [S | z], SE = D·Dv + D) and
 * W[c,c] at W[h·hs + c·(ld + 1)] on the block's own part. */
struct lct_mixing {
    const float *W;
    int64_t hs, ld;
    la_status (*combine)(const void *ctx, const float *S, float *Hs, int64_t BH, int64_t H,
                         int64_t M, int64_t SE, cudaStream_t s);
    const void *ctx;
    /* non-NULL: bf16 block states (pass 1 writes bf16 S, this mixes them into
     * bf16 Hs, pass 3 reads those) in place of `combine` on fp32 ones */
    la_status (*combine_bf16)(const void *ctx, const __nv_bfloat16 *S, __nv_bfloat16 *Hs,
                              int64_t BH, int64_t H, int64_t M, int64_t SE, cudaStream_t s);
    /* fp16 inputs: [B·H] floats, zeroed, that pass 1 raises to max |[S_b |
     * z_b]| per head (lct_args.smax; NULL for bf16) */
    float *smax;
    /* non-NULL (fp16 inputs, variant mma_f16s): fp16 block states scaled by
     * powers of two, pass 1 writes S_b·2^sexp[bh][b] (sexp: [B·H][M] ints),
     * this mixes them into fp16 H_c·2^hexp[bh][c] (hexp: [B·H][M], written
     * by it), pass 3 reads those, in place of `combine` */
    la_status (*combine_f16s)(const void *ctx, const __half *S, __half *Hs, int64_t BH, int64_t H,
                              int64_t M, int64_t SE, cudaStream_t s);
    int *sexp, *hexp;
};

/* Runs the tensor-core path (c.kernel == LCT_TC); with `mix` (no states in
 * or out) causal MHLA as above. */
la_status lct_run(const lct_choice &c, const la_linear_params *p, const la_tensor *q,
                  const la_tensor *k, const la_tensor *v, la_tensor *out, const la_tensor *S_in,
                  const la_tensor *z_in, la_tensor *S_out, la_tensor *z_out, const la_context *ctx,
                  cudaStream_t st, const lct_mixing *mix = nullptr);

#endif
