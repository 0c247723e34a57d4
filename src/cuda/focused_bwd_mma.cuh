/* The focused flatten backward's fast path (focused_bwd_mma.cu), called by
 * la_focused_backward_cuda (focused_bwd.cu) as the family "focused_bwd"'s
 * variant "mma". */
#ifndef LA_CUDA_FOCUSED_BWD_MMA_CUH
#define LA_CUDA_FOCUSED_BWD_MMA_CUH

#include "cuda/bwd_common.cuh"

/* What the fast path takes: flatten; bf16 q, k, v, d_out and dq, dk, dv
 * (NULL = skipped) with unit inner stride, strides multiple of 8 and 16-byte
 * aligned data; D = Dv in {64, 128}; H·D <= 4096; B·H <= 65535; N >= 64;
 * no conv or an odd conv of k <= 9. */
#define FB_MMA_NEEDS                                                                   \
    "flatten, bf16 q/k/v/d_out/dq/dk/dv with unit inner stride and 16-byte aligned " \
    "rows, D = Dv in {64, 128}, H*D <= 4096, N >= 64, conv k odd <= 9"
int fb_mma_eligible(const la_focused_params *p, const la_tensor *q, const la_tensor *k,
                    const la_tensor *v, const la_tensor *conv, const la_tensor *d_out,
                    const la_tensor *dq, const la_tensor *dk, const la_tensor *dv);
/* The gradients of TRAINING.md §1 (flatten; NULL ones skipped), on stream s. */
la_status fb_mma_backward(const la_focused_params *p, const la_tensor *q, const la_tensor *k,
                          const la_tensor *v, const la_tensor *conv, const la_tensor *softplus_param,
                          const la_tensor *d_out, la_tensor *dq, la_tensor *dk, la_tensor *dv,
                          la_tensor *d_conv, la_tensor *d_conv_bias, la_tensor *d_softplus_param,
                          cudaStream_t s);

#endif
