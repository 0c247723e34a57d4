/* Paged DSA decode scores on wgmma, beyond paged_index_tc.cuh's variant
 * "wgmma" (paged_wgmma.cu). Internal; included by src/cuda/*.cu only. */
#ifndef LA_CUDA_PAGED_WGMMA_CUH
#define LA_CUDA_PAGED_WGMMA_CUH

#include "paged_index_tc.cuh"

/* Group maxima of the score rows (variant "wgmma2g", topk_groups.cuh):
 * p[t * ld + j] = the largest topk_common.cuh key (tk_fkey) of the valid
 * scores (column < end[t], not -inf) of columns [8j, 8j + 8) of row t, 0 when
 * none, written for every j < 8·ceil(min(end[t], ncols) / 64) (the row's
 * tiles); p NULL: none written. ld >= 8·ceil(ncols / 64). */
struct la_pw_gmax {
    uint32_t *p;
    int64_t ld;
};

/* Variant "wgmma2": la_sp_scores_paged_wgmma's scores bit for bit, with the
 * span's block-table reads done once per CTA and the key scales loaded with
 * the key tiles (no global round trip per tile); takes the args that
 * la_sp_paged_wgmma_ok accepts. Grid (ncols / 1024, T). With gm.p set, also
 * the group maxima (the same scores stored). */
la_status la_sp_scores_paged_wgmma2(const la_sp_score_args &a, const sc_pages &pg, cudaStream_t s,
                                     la_pw_gmax gm = la_pw_gmax{});

#endif
