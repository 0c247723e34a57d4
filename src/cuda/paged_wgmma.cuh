/* Paged DSA decode scores on wgmma, beyond paged_index_tc.cuh's variant
 * "wgmma" (paged_wgmma.cu). Internal; included by src/cuda/*.cu only. */
#ifndef LA_CUDA_PAGED_WGMMA_CUH
#define LA_CUDA_PAGED_WGMMA_CUH

#include "paged_index_tc.cuh"

/* Variant "wgmma2": la_sp_scores_paged_wgmma's scores bit for bit, with the
 * span's block-table reads done once per CTA and the key scales loaded with
 * the key tiles (no global round trip per tile); takes the args that
 * la_sp_paged_wgmma_ok accepts. Grid (ncols / 1024, T). hist (NULL: none):
 * [T][TR_BINS] zeroed counts that also receive each row's valid scores by
 * topk_rows.cuh's bins. paged_index.cu passes NULL: "wgmma2r" counts them
 * in topk_rows.cuh's own pass, which costs less than these atomics slow
 * this kernel. */
la_status la_sp_scores_paged_wgmma2(const la_sp_score_args &a, const sc_pages &pg, uint32_t *hist, cudaStream_t s);

#endif
