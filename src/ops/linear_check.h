/* Checks shared by linear attention's forward and backward entry points
 * (src/ops/linear.c, src/ops/linear_backward.c). */
#ifndef LA_OPS_LINEAR_CHECK_H
#define LA_OPS_LINEAR_CHECK_H
#include "core/internal.h"

/* The params, and q, k, v of a linear-attention call named `op` in the
 * messages: q and k [B,N,H,D], v [B,N,H,Dv] on q's device, head dims within
 * the limit; with check_out, also out's view (dtype, rank, device; checked
 * before the shapes, as the forward always did). */
la_status la_linear_check_views(const char *op, const la_linear_params *p, const la_tensor *q,
                                const la_tensor *k, const la_tensor *v, const la_tensor *out,
                                bool check_out);
/* A state view: f32, rank 3 or 4, extents {B,H,D[,Dv]}. */
la_status la_linear_check_state(const la_tensor *t, const char *name, la_device dev, int ndim,
                                const int64_t *want);
#endif
