/* Explicit attention maps and their rank / entropy (SPEC §9) on the CPU. */
#ifndef LA_ATTN_MAP_CPU_H
#define LA_ATTN_MAP_CPU_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Validated by la_attention_map: q,k [N,D] host views, out [N,N] f32/f64,
 * blk[N] = MHLA block id of each token (mhla only, else NULL), mixing [M,M]
 * (mhla only), softplus_param [D] or NULL (focused-flatten). Computed in
 * float64. */
la_status la_attn_map_cpu(const la_attn_map_params *p, const la_tensor *q, const la_tensor *k,
                          const int64_t *blk, const la_tensor *mixing,
                          const la_tensor *softplus_param, la_tensor *out, la_context *ctx);

/* Validated by la_map_rank_entropy: map [R,C] host view. rank may be NULL
 * (no SVD). Returns LA_ERR_UNSUPPORTED when the build has no LAPACK (the
 * entropy is still computed). */
la_status la_map_rank_entropy_cpu(const la_tensor *map, double rtol, int64_t *rank,
                                  double *entropy);

#ifdef __cplusplus
}
#endif
#endif
