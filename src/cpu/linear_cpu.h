/* CPU linear attention (SPEC §3): non-causal and chunkwise causal forms. */
#ifndef LA_LINEAR_CPU_H
#define LA_LINEAR_CPU_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Token rows per block in the summary sums and in the non-causal apply. */
#define LA_LINEAR_BLOCK 256
/* Largest causal chunk accepted (the intra-chunk matrix is chunk² floats
 * per thread). */
#define LA_LINEAR_MAX_CHUNK 4096

/* Views validated by la_linear_attention (src/ops/linear.c): q,k [B,N,H,D],
 * v [B,N,H,Dv], out [B,N,H,Dv] (any float dtype and strides); S_in/S_out
 * [B,H,D,Dv] and z_in/z_out [B,H,D] f32 or NULL (causal only; in and out
 * may be the same view). Parameters already checked. */
la_status la_linear_cpu(const la_linear_params *p, const la_tensor *q, const la_tensor *k,
                        const la_tensor *v, la_tensor *out, const la_tensor *S_in,
                        const la_tensor *z_in, la_tensor *S_out, la_tensor *z_out,
                        la_context *ctx);

#ifdef __cplusplus
}
#endif
#endif
