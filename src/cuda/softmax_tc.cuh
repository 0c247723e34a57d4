/* Tensor-core softmax attention (SPEC §1), the fast path of softmax.cu:
 * bf16 q/k/v/out, D = Dv ∈ {64, 128}, rows of D contiguous and 16-byte
 * aligned. Internal; included by softmax.cu and softmax_tc.cu only. */
#ifndef LA_CUDA_SOFTMAX_TC_CUH
#define LA_CUDA_SOFTMAX_TC_CUH

#include "common.cuh"

/* Whether the tensor-core kernel takes these views (dtypes, head dims,
 * strides, alignment, grid limits). */
bool la_softmax_tc_applies(const la_tensor *q, const la_tensor *k, const la_tensor *v,
                           const la_tensor *out);

/* Launches it (the views must satisfy la_softmax_tc_applies): 4 warps × 32
 * query rows (BQ = 128), BKV = 64; D = 128: Q fragments ldmatrix'ed from
 * smem every tile (96 KB smem, 2 CTAs an SM); D = 64: Q fragments in
 * registers. */
la_status la_softmax_tc_launch(const la_tensor *q, const la_tensor *k, const la_tensor *v,
                               la_tensor *out, la_tensor *lse, float scale, int causal,
                               cudaStream_t st);

#endif
