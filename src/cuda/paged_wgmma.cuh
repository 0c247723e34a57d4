/* Paged DSA decode scores on wgmma, beyond paged_index_tc.cuh's variant
 * "wgmma" (paged_wgmma.cu). Internal; included by src/cuda/*.cu only. */
#ifndef LA_CUDA_PAGED_WGMMA_CUH
#define LA_CUDA_PAGED_WGMMA_CUH

#include "paged_index_tc.cuh"

/* Variant "wgmma2": la_sp_scores_paged_wgmma's scores bit for bit, with the
 * span's block-table reads done once per CTA and the key scales loaded with
 * the key tiles (no global round trip per tile); takes the args that
 * la_sp_paged_wgmma_ok accepts. Grid (ncols / 1024, T). */
la_status la_sp_scores_paged_wgmma2(const la_sp_score_args &a, const sc_pages &pg, cudaStream_t s);

#endif
