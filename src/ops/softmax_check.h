/* Checks shared by softmax attention's forward and backward entry points
 * (src/ops/softmax.c, src/ops/softmax_backward.c). */
#ifndef LA_OPS_SOFTMAX_CHECK_H
#define LA_OPS_SOFTMAX_CHECK_H
#include "core/internal.h"

/* Head dims beyond this are rejected: tile buffers scale with them and the
 * BLAS interface takes int extents. */
#define LA_SOFTMAX_MAX_HEAD_DIM 65536

/* The extents of a softmax call named `op` in the messages, each view's
 * dtype, rank and device already checked: q [B,Nq,H,D], k [B,Nk,Hk,D] with
 * H % Hk == 0, v [B,Nk,Hk,Dv], out [B,Nq,H,Dv], lse [B,Nq,H] (may be NULL). */
static inline la_status la_softmax_check_shapes(const char *op, const la_tensor *q,
                                                const la_tensor *k, const la_tensor *v,
                                                const la_tensor *out, const la_tensor *lse) {
    char sq[96], sk[96];
    const int64_t B = q->ne[0], Nq = q->ne[1], H = q->ne[2], D = q->ne[3];
    const int64_t Nk = k->ne[1], Hk = k->ne[2], Dv = v->ne[3];
    if (k->ne[0] != B)
        return la_err(LA_ERR_SHAPE, "k: batch %lld in %s, but q %s has B=%lld",
                      (long long)k->ne[0], la_shape_str(k, sk, sizeof sk),
                      la_shape_str(q, sq, sizeof sq), (long long)B);
    if (k->ne[3] != D)
        return la_err(LA_ERR_SHAPE, "k: head dim %lld in %s, but q %s has D=%lld",
                      (long long)k->ne[3], la_shape_str(k, sk, sizeof sk),
                      la_shape_str(q, sq, sizeof sq), (long long)D);
    if (H % Hk != 0)
        return la_err(LA_ERR_SHAPE,
                      "k: %lld kv heads in %s do not divide the %lld query heads of q %s (GQA "
                      "needs H %% Hk == 0)",
                      (long long)Hk, la_shape_str(k, sk, sizeof sk), (long long)H,
                      la_shape_str(q, sq, sizeof sq));
    LA_TRY(la_check_dim(v, "v", 0, B, "(batch of q)"));
    LA_TRY(la_check_dim(v, "v", 1, Nk, "(keys of k)"));
    LA_TRY(la_check_dim(v, "v", 2, Hk, "(kv heads of k)"));
    if (D > LA_SOFTMAX_MAX_HEAD_DIM || Dv > LA_SOFTMAX_MAX_HEAD_DIM)
        return la_err(LA_ERR_SHAPE, "%s: head dims D=%lld, Dv=%lld exceed the maximum %d", op,
                      (long long)D, (long long)Dv, LA_SOFTMAX_MAX_HEAD_DIM);
    LA_TRY(la_check_dim(out, "out", 0, B, "(batch of q)"));
    LA_TRY(la_check_dim(out, "out", 1, Nq, "(queries of q)"));
    LA_TRY(la_check_dim(out, "out", 2, H, "(heads of q)"));
    LA_TRY(la_check_dim(out, "out", 3, Dv, "(head dim of v)"));
    if (lse) {
        LA_TRY(la_check_dim(lse, "lse", 0, B, "(batch of q)"));
        LA_TRY(la_check_dim(lse, "lse", 1, Nq, "(queries of q)"));
        LA_TRY(la_check_dim(lse, "lse", 2, H, "(heads of q)"));
    }
    return LA_OK;
}
#endif
