/* MHLA backward (TRAINING.md §1): public entry point of the non-causal
 * backward. Validates parameters, grid and block grid (as la_mhla_forward
 * does), the forward's views, d_out and the gradient buffers, then
 * dispatches to the backend of the tensors' device. */
#include "core/internal.h"
#include "cpu/backward_cpu.h"
#include "ops/backward_check.h"
#ifdef LA_WITH_CUDA
#include "cuda/cuda_bwd.h"
#endif

/* q,k [B,N,H,D], v [B,N,H,Dv] on one device; out (optional) and d_out
 * [B,N,H,Dv]; dq/dk/dv like q/k/v; mixing [M,M] or [H,M,M] and d_mixing
 * (f32, its shape). Sets *M. Shared by the causal entry point. */
la_status la_mhla_bwd_check_views(const char *op, const la_tensor *q, const la_tensor *k,
                                  const la_tensor *v, const la_tensor *mixing,
                                  const la_tensor *out, const la_tensor *d_out,
                                  const la_tensor *dq, const la_tensor *dk, const la_tensor *dv,
                                  const la_tensor *d_mixing, int64_t *M) {
    char s1[96], s2[96];
    if (!q || !k || !v || !mixing)
        return la_err(LA_ERR_ARG, "%s: %s is NULL", op, !q ? "q" : !k ? "k" : !v ? "v" : "mixing");
    const la_device dev = q->device;
    if (dev != LA_DEVICE_CPU && dev != LA_DEVICE_CUDA)
        return la_err(LA_ERR_DEVICE, "%s: q has an unknown device %d", op, (int)dev);
    LA_TRY(la_check_tensor(q, "q", 4, LA_DT_FLOAT, dev, false));
    LA_TRY(la_check_tensor(k, "k", 4, LA_DT_FLOAT, dev, false));
    LA_TRY(la_check_tensor(v, "v", 4, LA_DT_FLOAT, dev, false));
    for (int a = 0; a < 4; a++)
        if (k->ne[a] != q->ne[a])
            return la_err(LA_ERR_SHAPE, "%s: k is %s but q [B,N,H,D] is %s (dim %d differs)", op,
                          la_shape_str(k, s1, sizeof s1), la_shape_str(q, s2, sizeof s2), a);
    for (int a = 0; a < 3; a++)
        if (v->ne[a] != q->ne[a])
            return la_err(LA_ERR_SHAPE, "%s: v [B,N,H,Dv] is %s but q is %s (dim %d differs)", op,
                          la_shape_str(v, s1, sizeof s1), la_shape_str(q, s2, sizeof s2), a);
    if (out) LA_TRY(la_bwd_check_like(out, "out", v, "v", LA_DT_FLOAT));
    LA_TRY(la_bwd_check_like(d_out, "d_out", v, "v (d_out has out's shape [B,N,H,Dv])", LA_DT_FLOAT));
    if (mixing->ndim != 2 && mixing->ndim != 3)
        return la_err(LA_ERR_SHAPE, "%s: mixing must be [M,M] or [H,M,M], got rank %d", op,
                      mixing->ndim);
    LA_TRY(la_check_tensor(mixing, "mixing", mixing->ndim, LA_DT_FLOAT, dev, false));
    const int64_t m0 = mixing->ne[mixing->ndim - 2], m1 = mixing->ne[mixing->ndim - 1];
    if (m0 != m1)
        return la_err(LA_ERR_SHAPE, "%s: mixing %s is not square in its last two dims", op,
                      la_shape_str(mixing, s1, sizeof s1));
    if (mixing->ndim == 3 && mixing->ne[0] != q->ne[2])
        return la_err(LA_ERR_SHAPE, "%s: per-head mixing %s must be [H,M,M] with H = %lld", op,
                      la_shape_str(mixing, s1, sizeof s1), (long long)q->ne[2]);
    *M = m0;
    if (dq) LA_TRY(la_bwd_check_grad(dq, "dq", q, "q"));
    if (dk) LA_TRY(la_bwd_check_grad(dk, "dk", k, "k"));
    if (dv) LA_TRY(la_bwd_check_grad(dv, "dv", v, "v"));
    if (d_mixing) LA_TRY(la_bwd_check_like(d_mixing, "d_mixing", mixing, "mixing", LA_DT(LA_F32)));
    const la_tensor *outs[4] = {dq, dk, dv, d_mixing};
    const char *out_names[4] = {"dq", "dk", "dv", "d_mixing"};
    const la_tensor *ins[6] = {q, k, v, mixing, out, d_out};
    const char *in_names[6] = {"q", "k", "v", "mixing", "out", "d_out"};
    return la_bwd_check_overlaps(outs, out_names, 4, ins, in_names, 6);
}

la_status la_mhla_backward(const la_mhla_params *p, const la_tensor *q, const la_tensor *k,
                           const la_tensor *v, const la_tensor *mixing, const la_tensor *out,
                           const la_tensor *d_out, la_tensor *dq, la_tensor *dk, la_tensor *dv,
                           la_tensor *d_mixing, la_context *ctx) {
    static const char *op = "la_mhla_backward";
    char s1[96];
    if (!p) return la_err(LA_ERR_ARG, "%s: params p is NULL", op);
    int64_t M = 0;
    LA_TRY(la_mhla_bwd_check_views(op, q, k, v, mixing, out, d_out, dq, dk, dv, d_mixing, &M));
    LA_TRY(la_check_feature(p->feature, "feature"));
    if (!isfinite(p->eps) || p->eps < 0.0f)
        return la_err(LA_ERR_ARG, "%s: eps = %g must be finite and >= 0", op, (double)p->eps);
    if (!isfinite(p->scale_q))
        return la_err(LA_ERR_ARG, "%s: scale_q = %g must be finite", op, (double)p->scale_q);
    if (p->normalize != LA_MHLA_NORM_PER_QUERY && p->normalize != LA_MHLA_NORM_NONE &&
        p->normalize != LA_MHLA_NORM_RELEASED_VISION)
        return la_err(LA_ERR_ARG, "%s: normalize = %d is not per_query (0), none (1) or "
                      "released_vision (2)", op, (int)p->normalize);
    const int64_t N = q->ne[1];
    const int nd = p->grid_ndim;
    if (nd < 1 || nd > 3) return la_err(LA_ERR_ARG, "%s: grid_ndim = %d, expected 1, 2 or 3", op, nd);
    int64_t grid[3], blocks[3], prod = 1, Mg = 1;
    for (int a = 0; a < nd; a++) {
        grid[a] = (nd == 1 && p->grid[0] == 0) ? N : p->grid[a];
        blocks[a] = p->blocks[a];
        if (grid[a] <= 0)
            return la_err(LA_ERR_SHAPE, "%s: grid[%d] = %lld must be > 0", op, a, (long long)grid[a]);
        if (prod > N / grid[a] + 1) prod = N + 1;
        else prod *= grid[a];
    }
    if (prod != N)
        return la_err(LA_ERR_SHAPE, "%s: the token grid (rank %d) does not have N = %lld tokens of q %s",
                      op, nd, (long long)N, la_shape_str(q, s1, sizeof s1));
    for (int a = 0; a < nd; a++) {
        if (blocks[a] <= 0)
            return la_err(LA_ERR_ARG, "%s: blocks[%d] = %lld must be >= 1", op, a, (long long)blocks[a]);
        if (blocks[a] > ((int64_t)1 << 31) || Mg > ((int64_t)1 << 31) / blocks[a])
            return la_err(LA_ERR_OVERFLOW, "%s: the block grid has more than 2^31 blocks", op);
        Mg *= blocks[a];
    }
    if (Mg != M)
        return la_err(LA_ERR_SHAPE, "%s: mixing %s has M = %lld but the block grid has %lld blocks",
                      op, la_shape_str(mixing, s1, sizeof s1), (long long)M, (long long)Mg);
    la_mhla_geom geom;
    la_mhla_geom_init(&geom, nd, grid, blocks);
    if (p->normalize == LA_MHLA_NORM_RELEASED_VISION && !geom.equal_blocks)
        return la_err(LA_ERR_SHAPE, "%s: normalize released_vision needs equal block sizes "
                      "(every grid extent divisible by its block count)", op);
    if (q->device == LA_DEVICE_CUDA) {
#ifdef LA_WITH_CUDA
        la_mhla_params pc = *p;
        for (int a = 0; a < nd; a++) pc.grid[a] = grid[a];
        la_status s = la_mhla_backward_cuda(&pc, q, k, v, mixing, out, d_out, dq, dk, dv,
                                            d_mixing, ctx);
        if (s == LA_OK) la_err_clear();
        return s;
#else
        return la_err(LA_ERR_UNSUPPORTED, "%s: no CUDA implementation in this build (q is on cuda)", op);
#endif
    }
    la_status s = la_mhla_backward_cpu(p, &geom, q, k, v, mixing, out, d_out, dq, dk, dv, d_mixing,
                                       ctx);
    if (s == LA_OK) la_err_clear();
    return s;
}

la_status la_mhla_causal_backward(const la_mhla_causal_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *v,
                                  const la_tensor *mixing, const la_tensor *out,
                                  const la_tensor *d_out, la_tensor *dq, la_tensor *dk,
                                  la_tensor *dv, la_tensor *d_mixing, la_context *ctx) {
    static const char *op = "la_mhla_causal_backward";
    char s1[96];
    if (!p) return la_err(LA_ERR_ARG, "%s: params p is NULL", op);
    if (p->chunk < 1)
        return la_err(LA_ERR_ARG, "%s: chunk = %lld must be >= 1", op, (long long)p->chunk);
    if (p->normalize != LA_MHLA_NORM_NONE && p->normalize != LA_MHLA_NORM_PER_QUERY)
        return la_err(LA_ERR_ARG, "%s: normalize = %d is not defined for causal MHLA "
                      "(none or per_query)", op, (int)p->normalize);
    LA_TRY(la_check_feature(p->feature, "feature"));
    if (!isfinite(p->eps) || p->eps < 0.0f)
        return la_err(LA_ERR_ARG, "%s: eps = %g must be finite and >= 0", op, (double)p->eps);
    if (!isfinite(p->scale_q))
        return la_err(LA_ERR_ARG, "%s: scale_q = %g must be finite", op, (double)p->scale_q);
    int64_t M = 0;
    LA_TRY(la_mhla_bwd_check_views(op, q, k, v, mixing, out, d_out, dq, dk, dv, d_mixing, &M));
    const int64_t N = q->ne[1], D = q->ne[3];
    const int64_t nc = N / p->chunk + (N % p->chunk != 0);
    if (M < nc)
        return la_err(LA_ERR_SHAPE, "%s: mixing %s is too small: N = %lld tokens in chunks of "
                      "%lld need at least %lld x %lld", op, la_shape_str(mixing, s1, sizeof s1),
                      (long long)N, (long long)p->chunk, (long long)nc, (long long)nc);
    if (p->chunk > 4096)
        return la_err(LA_ERR_ARG, "%s: chunk = %lld exceeds 4096 (the C×C chunk products)", op, (long long)p->chunk);
    if (q->device == LA_DEVICE_CUDA) {
#ifdef LA_WITH_CUDA
        la_status s = la_mhla_causal_backward_cuda(p, q, k, v, mixing, out, d_out, dq, dk, dv,
                                                   d_mixing, ctx);
        if (s == LA_OK) la_err_clear();
        return s;
#else
        return la_err(LA_ERR_UNSUPPORTED, "%s: no CUDA implementation in this build (q is on cuda)", op);
#endif
    }
    la_mhla_causal_params pr = *p;
    pr.scale_q = p->scale_q != 0.0f ? p->scale_q : 1.0f / sqrtf((float)D);
    la_status s = la_mhla_causal_backward_cpu(&pr, q, k, v, mixing, d_out, dq, dk, dv, d_mixing, ctx);
    if (s == LA_OK) la_err_clear();
    return s;
}
