/* Tensor-core softmax attention (SPEC §1), the fast path of softmax.cu:
 * bf16 or f16 q/k/v/out (all one dtype), head dims (D, Dv) in
 * la_softmax_tc_dims, rows of D contiguous and 16-byte aligned. Internal;
 * included by softmax.cu and softmax_tc.cu only. */
#ifndef LA_CUDA_SOFTMAX_TC_CUH
#define LA_CUDA_SOFTMAX_TC_CUH

#include "common.cuh"

/* Whether the kernel has a tiling for head dims D (q, k) and Dv (v, out):
 * D = Dv in {32, 64, 128}, and (64, 128), (128, 64). */
bool la_softmax_tc_dims(int64_t D, int64_t Dv);

/* Whether the tensor-core kernel takes these views (dtypes, head dims,
 * strides, alignment, grid limits). */
bool la_softmax_tc_applies(const la_tensor *q, const la_tensor *k, const la_tensor *v,
                           const la_tensor *out);

/* Launches it (the views must satisfy la_softmax_tc_applies): 4 warps × 32
 * query rows (BQ = 128), BKV = 64; Q fragments in registers for D = Dv ≤ 64,
 * else ldmatrix'ed from smem every tile (D = 128: 96 KB smem, 2 CTAs an SM). */
la_status la_softmax_tc_launch(const la_tensor *q, const la_tensor *k, const la_tensor *v,
                               la_tensor *out, la_tensor *lse, float scale, int causal,
                               cudaStream_t st);

#endif
