/* Argument checks shared by the la_*_backward entry points (src/ops/<op>_backward.c):
 * a gradient has the shape, dtype and device of the tensor it belongs to,
 * and no gradient may overlap an input or another gradient. */
#ifndef LA_BACKWARD_CHECK_H
#define LA_BACKWARD_CHECK_H

#include "core/internal.h"

/* g: the gradient (or d_out) called `name`, which must have the extents of
 * `like` (called like_name), a dtype in `dtype_mask` and like's device. */
static inline la_status la_bwd_check_like(const la_tensor *g, const char *name,
                                          const la_tensor *like, const char *like_name,
                                          unsigned dtype_mask) {
    char sg[96], sl[96];
    if (!g) return la_err(LA_ERR_ARG, "%s: tensor is NULL", name);
    if (g->ndim != like->ndim)
        return la_err(LA_ERR_SHAPE, "%s: rank %d %s, but %s is %s (same shape required)", name,
                      g->ndim, g->ndim >= 1 && g->ndim <= LA_MAX_DIMS ? la_shape_str(g, sg, sizeof sg) : "",
                      like_name, la_shape_str(like, sl, sizeof sl));
    LA_TRY(la_check_tensor(g, name, like->ndim, dtype_mask, like->device, false));
    for (int i = 0; i < like->ndim; i++)
        if (g->ne[i] != like->ne[i])
            return la_err(LA_ERR_SHAPE, "%s: %s, but %s is %s (same shape required)", name,
                          la_shape_str(g, sg, sizeof sg), like_name,
                          la_shape_str(like, sl, sizeof sl));
    return LA_OK;
}

/* A gradient: like's shape, exactly like's dtype (TRAINING.md §1). */
static inline la_status la_bwd_check_grad(const la_tensor *g, const char *name,
                                          const la_tensor *like, const char *like_name) {
    if (g && g->dtype != like->dtype && (unsigned)g->dtype < 32)
        return la_err(LA_ERR_DTYPE, "%s: dtype %s, but %s is %s (a gradient has its input's dtype)",
                      name, la_dtype_name(g->dtype), like_name, la_dtype_name(like->dtype));
    return la_bwd_check_like(g, name, like, like_name, LA_DT(like->dtype));
}

/* A gradient of given extents and dtype f32 (state and mixing gradients). */
static inline la_status la_bwd_check_f32(const la_tensor *g, const char *name, int ndim,
                                         const int64_t *want, la_device dev) {
    char sg[96];
    LA_TRY(la_check_tensor(g, name, ndim, LA_DT(LA_F32), dev, false));
    for (int i = 0; i < ndim; i++)
        if (g->ne[i] != want[i])
            return la_err(LA_ERR_SHAPE, "%s: %s, dim %d expected %lld", name,
                          la_shape_str(g, sg, sizeof sg), i, (long long)want[i]);
    return LA_OK;
}

/* Every non-NULL output (gradient) must not overlap any non-NULL input
 * nor an earlier output. */
static inline la_status la_bwd_check_overlaps(const la_tensor *const *outs,
                                              const char *const *out_names, int n_out,
                                              const la_tensor *const *ins,
                                              const char *const *in_names, int n_in) {
    for (int o = 0; o < n_out; o++) {
        if (!outs[o]) continue;
        for (int i = 0; i < n_in; i++)
            if (ins[i] && la_tensors_overlap(outs[o], ins[i]))
                return la_err(LA_ERR_ARG, "%s: overlaps input %s in memory (gradients must not alias inputs)",
                              out_names[o], in_names[i]);
        for (int o2 = 0; o2 < o; o2++)
            if (outs[o2] && la_tensors_overlap(outs[o], outs[o2]))
                return la_err(LA_ERR_ARG, "%s: overlaps %s in memory", out_names[o], out_names[o2]);
    }
    return LA_OK;
}

/* The views of the MHLA backward entry points (src/ops/mhla_backward.c):
 * q, k, v, mixing, out (optional), d_out and the gradients; sets *M. */
la_status la_mhla_bwd_check_views(const char *op, const la_tensor *q, const la_tensor *k,
                                  const la_tensor *v, const la_tensor *mixing,
                                  const la_tensor *out, const la_tensor *d_out,
                                  const la_tensor *dq, const la_tensor *dk, const la_tensor *dv,
                                  const la_tensor *d_mixing, int64_t *M);

#endif
