/* HISA's block-major wgmma kernel (hisa_stage2.cu): the candidate scores of
 * stage 2 (bucketing of the (query, kept block) pairs, then hb2_kernel) and
 * stage 1's dense block scores on the same kernel. Used by hisa.cu.
 * Internal; included by src/cuda/*.cu only. */
#ifndef LA_CUDA_HISA_CUH
#define LA_CUDA_HISA_CUH

#include "sparse_common.cuh"

/* Whether hb2_kernel takes these gather-mode views: bf16 (hb_ok) or e4m3
 * (hb8_ok) q/k, HI = 64, dI = 128, rows contiguous and 16-byte aligned, the
 * list sizes within the grid. */
bool hb_ok(const la_sp_score_args &a);
bool hb8_ok(const la_sp_score_args &a);
/* The candidate scores of a.blocks' kept blocks into a.out (bf16; fp8: e4m3
 * with a.w = w·q_scale and ks = k_scale). */
la_status hb_launch(const la_sp_score_args &a, cudaStream_t s, bool fp8, const float *ks,
                    int64_t ks_nb);
/* Whether hb2_kernel<2, true> takes the dense block-score views, and the
 * launch (a.k: the nb block means). */
bool hb2_dense_ok(const la_sp_score_args &a);
la_status hb2_dense_launch(la_sp_score_args a, cudaStream_t s);

#endif
