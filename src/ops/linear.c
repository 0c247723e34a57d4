/* Linear attention (SPEC §3): public entry point. Validates parameters and
 * views, then dispatches to the backend of the tensors' device. */
#include "core/internal.h"
#include "cpu/linear_cpu.h"
#include "ops/linear_check.h"
#ifdef LA_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

#define LA_LINEAR_MAX_HEAD_DIM 65536

la_status la_linear_params_init(la_linear_params *p) {
    if (!p) return la_err(LA_ERR_ARG, "la_linear_params_init: p is NULL");
    p->feature = LA_FEATURE_RELU;
    p->causal = 0;
    p->normalize = 1;
    p->eps = 1e-6f;
    p->scale_q = 1.f;
    p->chunk = 64;
    return LA_OK;
}

la_status la_linear_check_state(const la_tensor *t, const char *name, la_device dev, int ndim,
                                const int64_t *want) {
    static const char *why[4] = {"(batch of q)", "(heads of q)", "(head dim of q)", "(head dim of v)"};
    LA_TRY(la_check_tensor(t, name, ndim, LA_DT(LA_F32), dev, false));
    for (int i = 0; i < ndim; i++) LA_TRY(la_check_dim(t, name, i, want[i], why[i]));
    return LA_OK;
}

la_status la_linear_check_views(const char *op, const la_linear_params *p, const la_tensor *q,
                                const la_tensor *k, const la_tensor *v, const la_tensor *out,
                                bool check_out) {
    char sq[96], sk[96];
    if (!p) return la_err(LA_ERR_ARG, "%s: params is NULL", op);
    LA_TRY(la_check_feature(p->feature, "feature"));
    if (!isfinite(p->eps) || p->eps < 0.f)
        return la_err(LA_ERR_ARG, "eps: %g, expected a finite value >= 0", (double)p->eps);
    if (!isfinite(p->scale_q))
        return la_err(LA_ERR_ARG, "scale: %g is not finite", (double)p->scale_q);
    if (p->chunk < 1 || p->chunk > LA_LINEAR_MAX_CHUNK)
        return la_err(LA_ERR_ARG, "chunk: %lld, expected 1..%d", (long long)p->chunk,
                      LA_LINEAR_MAX_CHUNK);
    if (!q) return la_err(LA_ERR_ARG, "%s: q is NULL", op);
    const la_device dev = q->device;
    if (dev != LA_DEVICE_CPU && dev != LA_DEVICE_CUDA)
        return la_err(LA_ERR_DEVICE, "q: unknown device %d", (int)dev);
    LA_TRY(la_check_tensor(q, "q", 4, LA_DT_FLOAT, dev, false));
    LA_TRY(la_check_tensor(k, "k", 4, LA_DT_FLOAT, dev, false));
    LA_TRY(la_check_tensor(v, "v", 4, LA_DT_FLOAT, dev, false));
    if (check_out) LA_TRY(la_check_tensor(out, "out", 4, LA_DT_FLOAT, dev, false));

    const int64_t B = q->ne[0], N = q->ne[1], H = q->ne[2], D = q->ne[3], Dv = v->ne[3];
    for (int i = 0; i < 4; i++)
        if (k->ne[i] != q->ne[i])
            return la_err(LA_ERR_SHAPE, "k: %s, but q is %s (k must have q's shape [B,N,H,D])",
                          la_shape_str(k, sk, sizeof sk), la_shape_str(q, sq, sizeof sq));
    LA_TRY(la_check_dim(v, "v", 0, B, "(batch of q)"));
    LA_TRY(la_check_dim(v, "v", 1, N, "(tokens of q)"));
    LA_TRY(la_check_dim(v, "v", 2, H, "(heads of q)"));
    if (D > LA_LINEAR_MAX_HEAD_DIM || Dv > LA_LINEAR_MAX_HEAD_DIM)
        return la_err(LA_ERR_SHAPE, "%s: head dims D=%lld, Dv=%lld exceed the maximum %d", op,
                      (long long)D, (long long)Dv, LA_LINEAR_MAX_HEAD_DIM);
    return LA_OK;
}

la_status la_linear_attention(const la_linear_params *p, const la_tensor *q,
                              const la_tensor *k, const la_tensor *v, la_tensor *out,
                              const la_tensor *S_in, const la_tensor *z_in,
                              la_tensor *S_out, la_tensor *z_out, la_context *ctx) {
    LA_TRY(la_linear_check_views("linear", p, q, k, v, out, true));
    const la_device dev = q->device;
    const int64_t B = q->ne[0], N = q->ne[1], H = q->ne[2], D = q->ne[3], Dv = v->ne[3];
    LA_TRY(la_check_dim(out, "out", 0, B, "(batch of q)"));
    LA_TRY(la_check_dim(out, "out", 1, N, "(tokens of q)"));
    LA_TRY(la_check_dim(out, "out", 2, H, "(heads of q)"));
    LA_TRY(la_check_dim(out, "out", 3, Dv, "(head dim of v)"));

    /* Recurrent state: causal only; S [B,H,D,Dv], z [B,H,D], f32. */
    const bool any_state = S_in || z_in || S_out || z_out;
    if (any_state && !p->causal)
        return la_err(LA_ERR_ARG, "state: a recurrent state (S/z in or out) needs causal = 1");
    const int64_t wS[4] = {B, H, D, Dv}, wz[3] = {B, H, D};
    if (S_in) LA_TRY(la_linear_check_state(S_in, "S_in", dev, 4, wS));
    if (z_in) LA_TRY(la_linear_check_state(z_in, "z_in", dev, 3, wz));
    if (S_out) LA_TRY(la_linear_check_state(S_out, "S_out", dev, 4, wS));
    if (z_out) LA_TRY(la_linear_check_state(z_out, "z_out", dev, 3, wz));
    if (z_in && !S_in) return la_err(LA_ERR_ARG, "S_in: NULL while z_in is given (pass both or neither)");
    if (S_in && !z_in && p->normalize)
        return la_err(LA_ERR_ARG, "z_in: NULL while S_in is given and normalize is on (pass both)");

    /* Outputs must not alias inputs (the state pair in/out excepted: the
     * input state is read in full before the output state is written). */
    const la_tensor *ins[3] = {q, k, v};
    const char *in_names[3] = {"q", "k", "v"};
    const la_tensor *outs[3] = {out, S_out, z_out};
    const char *out_names[3] = {"out", "S_out", "z_out"};
    for (int o = 0; o < 3; o++) {
        if (!outs[o]) continue;
        for (int i = 0; i < 3; i++)
            if (la_tensors_overlap(outs[o], ins[i]))
                return la_err(LA_ERR_ARG, "%s: overlaps input %s in memory", out_names[o], in_names[i]);
        for (int o2 = 0; o2 < o; o2++)
            if (outs[o2] && la_tensors_overlap(outs[o], outs[o2]))
                return la_err(LA_ERR_ARG, "%s: overlaps output %s in memory", out_names[o], out_names[o2]);
    }
    if ((S_in && la_tensors_overlap(out, S_in)) || (z_in && la_tensors_overlap(out, z_in)))
        return la_err(LA_ERR_ARG, "out: overlaps the input state in memory");
    if (S_in && z_out && la_tensors_overlap(z_out, S_in))
        return la_err(LA_ERR_ARG, "z_out: overlaps S_in in memory");
    if (z_in && S_out && la_tensors_overlap(S_out, z_in))
        return la_err(LA_ERR_ARG, "S_out: overlaps z_in in memory");

    if (dev == LA_DEVICE_CUDA) {
#ifdef LA_WITH_CUDA
        la_status s = la_linear_attention_cuda(p, q, k, v, out, S_in, z_in, S_out, z_out, ctx);
        if (s == LA_OK) la_err_clear();
        return s;
#else
        return la_err(LA_ERR_UNSUPPORTED, "linear: no CUDA implementation in this build (q is on cuda)");
#endif
    }
    la_status s = la_linear_cpu(p, q, k, v, out, S_in, z_in, S_out, z_out, ctx);
    if (s == LA_OK) la_err_clear();
    return s;
}
