/* Focused linear attention (SPEC §4): parameter defaults, validation of every
 * view, dispatch to the backend. */
#include "core/internal.h"
#include "cpu/focused_cpu.h"
#ifdef LA_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

la_status la_focused_params_init(la_focused_params *p) {
    if (!p) return la_err(LA_ERR_ARG, "la_focused_params_init: p is NULL");
    p->variant = LA_FOCUSED_FLATTEN;
    p->map_h = 0;
    p->map_w = 0;
    p->p = 3.0f;
    p->eps = 1e-6f;
    return LA_OK;
}

/* A 1-D parameter vector [n]. */
static la_status check_vec(const la_tensor *t, const char *name, int64_t n, la_device dev,
                           const char *why) {
    LA_TRY(la_check_tensor(t, name, 1, LA_DT_FLOAT, dev, false));
    return la_check_dim(t, name, 0, n, why);
}

la_status la_focused_attention(const la_focused_params *p, const la_tensor *q,
                               const la_tensor *k, const la_tensor *v,
                               const la_tensor *conv, const la_tensor *conv_bias,
                               const la_tensor *softplus_param, const la_tensor *focus,
                               la_tensor *out, la_context *ctx) {
    char s1[64], s2[64];
    if (!p) return la_err(LA_ERR_ARG, "focused: params is NULL");
    if (!q || !k || !v || !out)
        return la_err(LA_ERR_ARG, "focused: %s is NULL",
                      !q ? "q" : !k ? "k" : !v ? "v" : "out");
    if (p->variant != LA_FOCUSED_FLATTEN && p->variant != LA_FOCUSED_BLOG)
        return la_err(LA_ERR_ARG, "focused: variant %d is not flatten (0) or blog (1)",
                      (int)p->variant);
    const int blog = p->variant == LA_FOCUSED_BLOG;
    const la_device dev = q->device;

    LA_TRY(la_check_tensor(q, "q", 4, LA_DT_FLOAT, dev, false));
    LA_TRY(la_check_tensor(k, "k", 4, LA_DT_FLOAT, dev, false));
    LA_TRY(la_check_tensor(v, "v", 4, LA_DT_FLOAT, dev, false));
    LA_TRY(la_check_tensor(out, "out", 4, LA_DT_FLOAT, dev, false));
    const int64_t B = q->ne[0], N = q->ne[1], H = q->ne[2], D = q->ne[3], Dv = v->ne[3];
    for (int a = 0; a < 4; a++)
        if (k->ne[a] != q->ne[a])
            return la_err(LA_ERR_SHAPE, "focused: k is %s but q is %s (must match)",
                          la_shape_str(k, s1, sizeof s1), la_shape_str(q, s2, sizeof s2));
    for (int a = 0; a < 3; a++)
        if (v->ne[a] != q->ne[a])
            return la_err(LA_ERR_SHAPE, "focused: v is %s but q is %s (B,N,H must match)",
                          la_shape_str(v, s1, sizeof s1), la_shape_str(q, s2, sizeof s2));
    for (int a = 0; a < 4; a++)
        if (out->ne[a] != v->ne[a])
            return la_err(LA_ERR_SHAPE, "focused: out is %s, expected [B,N,H,Dv] = %s",
                          la_shape_str(out, s1, sizeof s1), la_shape_str(v, s2, sizeof s2));

    /* the token map */
    if (p->map_h <= 0 || p->map_w <= 0)
        return la_err(LA_ERR_ARG, "focused: map %lldx%lld must be positive (set map_h, map_w)",
                      (long long)p->map_h, (long long)p->map_w);
    if (p->map_h > INT64_MAX / p->map_w || p->map_h * p->map_w != N)
        return la_err(LA_ERR_SHAPE, "focused: map %lldx%lld does not hold the N=%lld tokens of q",
                      (long long)p->map_h, (long long)p->map_w, (long long)N);
    if (!(p->eps >= 0.f) || isinf(p->eps))
        return la_err(LA_ERR_ARG, "focused: eps=%g must be finite and >= 0", (double)p->eps);
    if (!blog && (!(p->p > 0.f) || isinf(p->p)))
        return la_err(LA_ERR_ARG, "focused: focusing factor p=%g must be finite and > 0",
                      (double)p->p);

    int64_t C;
    if (H > INT64_MAX / D) return la_err(LA_ERR_OVERFLOW, "focused: H*D overflows");
    C = H * D;

    /* depthwise conv kernel */
    if (conv) {
        LA_TRY(la_check_tensor(conv, "conv", 3, LA_DT_FLOAT, dev, false));
        const int64_t ks = conv->ne[1];
        if (conv->ne[2] != ks)
            return la_err(LA_ERR_SHAPE, "conv: %s is not square [channels,k,k]",
                          la_shape_str(conv, s1, sizeof s1));
        if (ks % 2 == 0)
            return la_err(LA_ERR_SHAPE, "conv: kernel %lldx%lld is even-sized (zero padding k//2 "
                          "keeps the map only for odd k)", (long long)ks, (long long)ks);
        if (ks > p->map_h || ks > p->map_w)
            return la_err(LA_ERR_SHAPE, "conv: kernel %lldx%lld is larger than the %lldx%lld map",
                          (long long)ks, (long long)ks, (long long)p->map_h, (long long)p->map_w);
        if (blog) {
            LA_TRY(la_check_dim(conv, "conv", 0, C, "blog: one k x k kernel per channel H*D"));
        } else {
            LA_TRY(la_check_dim(conv, "conv", 0, D, "flatten: one [D,k,k] kernel shared by heads"));
            if (Dv != D)
                return la_err(LA_ERR_SHAPE, "focused: v has Dv=%lld but the flatten conv runs "
                              "over v's channels and adds to the output, so Dv must equal D=%lld",
                              (long long)Dv, (long long)D);
        }
    }
    if (!blog && conv_bias) {
        if (!conv)
            return la_err(LA_ERR_ARG, "conv_bias: given without conv (the bias belongs to the "
                          "depthwise conv on v)");
        LA_TRY(check_vec(conv_bias, "conv_bias", D, dev, "flatten: one bias per channel of v"));
    }
    if (!blog && softplus_param)
        LA_TRY(check_vec(softplus_param, "softplus_param", C, dev,
                         "flatten: one scale per channel H*D, shared by q and k"));
    if (blog && focus) LA_TRY(check_vec(focus, "focus", H, dev, "blog: one coefficient per head"));

    if (la_tensors_overlap(out, q) || la_tensors_overlap(out, k) || la_tensors_overlap(out, v))
        return la_err(LA_ERR_ARG, "focused: out overlaps an input (q, k or v); the op reads "
                      "v after writing out");
    (void)B;

    if (dev == LA_DEVICE_CUDA) {
#ifdef LA_WITH_CUDA
        la_status s = la_focused_attention_cuda(p, q, k, v, conv, blog ? NULL : conv_bias,
                                                softplus_param, focus, out, ctx);
        if (s == LA_OK) la_err_clear();
        return s;
#else
        return la_err(LA_ERR_UNSUPPORTED, "focused: tensors are on CUDA and this build has no "
                      "CUDA kernel for focused attention yet");
#endif
    }
    la_status st = la_focused_cpu(p, q, k, v, conv, blog ? NULL : conv_bias,
                                  blog ? NULL : softplus_param, blog ? focus : NULL, out, ctx);
    if (st == LA_OK) la_err_clear();
    return st;
}
