/* Causal linear attention (SPEC §3) on bf16 tensor cores: D = Dv = 128, bf16
 * rows with unit inner stride (linear_causal_tc.cu). linear.cu asks
 * lct_supported() and hands the call over; everything else keeps the portable
 * linfam.cu path. Internal; included by the CUDA sources only. */
#ifndef LA_CUDA_LINEAR_CAUSAL_TC_CUH
#define LA_CUDA_LINEAR_CAUSAL_TC_CUH

#include "common.cuh"

/* Whether the tensor-core causal path takes these views (and is not switched
 * off by LA_CUDA_CAUSAL_PATH=old). */
bool lct_supported(const la_linear_params *p, const la_tensor *q, const la_tensor *k,
                   const la_tensor *v, const la_tensor *out);

la_status lct_run(const la_linear_params *p, const la_tensor *q, const la_tensor *k,
                  const la_tensor *v, la_tensor *out, const la_tensor *S_in,
                  const la_tensor *z_in, la_tensor *S_out, la_tensor *z_out, cudaStream_t st);

#endif
