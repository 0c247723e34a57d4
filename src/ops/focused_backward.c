/* Focused linear attention backward (TRAINING.md §1): public entry point.
 * Validates the forward's arguments (as la_focused_attention does), d_out
 * and the gradient buffers (a gradient of an absent or ignored input must be
 * NULL), then dispatches to the backend of the tensors' device. */
#include "core/internal.h"
#include "cpu/backward_cpu.h"
#include "ops/backward_check.h"
#ifdef LA_WITH_CUDA
#include "cuda/cuda_bwd.h"
#endif

static la_status check_vec(const la_tensor *t, const char *name, int64_t n, la_device dev,
                           const char *why) {
    LA_TRY(la_check_tensor(t, name, 1, LA_DT_FLOAT, dev, false));
    return la_check_dim(t, name, 0, n, why);
}

/* A gradient g of parameter x (x may be absent): NULL unless x is given. */
static la_status check_param_grad(const la_tensor *g, const char *gname, const la_tensor *x,
                                  const char *xname, const char *why_absent) {
    if (!g) return LA_OK;
    if (!x)
        return la_err(LA_ERR_ARG, "%s: given, but %s is %s (the gradient of an absent input must be NULL)",
                      gname, xname, why_absent);
    return la_bwd_check_grad(g, gname, x, xname);
}

la_status la_focused_backward(const la_focused_params *p, const la_tensor *q, const la_tensor *k,
                              const la_tensor *v, const la_tensor *conv,
                              const la_tensor *conv_bias, const la_tensor *softplus_param,
                              const la_tensor *focus, const la_tensor *out,
                              const la_tensor *d_out, la_tensor *dq, la_tensor *dk,
                              la_tensor *dv, la_tensor *d_conv, la_tensor *d_conv_bias,
                              la_tensor *d_softplus_param, la_tensor *d_focus, la_context *ctx) {
    char s1[96], s2[96];
    if (!p) return la_err(LA_ERR_ARG, "focused backward: params is NULL");
    if (!q || !k || !v)
        return la_err(LA_ERR_ARG, "focused backward: %s is NULL", !q ? "q" : !k ? "k" : "v");
    if (p->variant != LA_FOCUSED_FLATTEN && p->variant != LA_FOCUSED_BLOG)
        return la_err(LA_ERR_ARG, "focused: variant %d is not flatten (0) or blog (1)", (int)p->variant);
    const int blog = p->variant == LA_FOCUSED_BLOG;
    const la_device dev = q->device;
    if (dev != LA_DEVICE_CPU && dev != LA_DEVICE_CUDA)
        return la_err(LA_ERR_DEVICE, "q: unknown device %d", (int)dev);
    LA_TRY(la_check_tensor(q, "q", 4, LA_DT_FLOAT, dev, false));
    LA_TRY(la_check_tensor(k, "k", 4, LA_DT_FLOAT, dev, false));
    LA_TRY(la_check_tensor(v, "v", 4, LA_DT_FLOAT, dev, false));
    const int64_t N = q->ne[1], H = q->ne[2], D = q->ne[3], Dv = v->ne[3];
    for (int a = 0; a < 4; a++)
        if (k->ne[a] != q->ne[a])
            return la_err(LA_ERR_SHAPE, "focused: k is %s but q is %s (must match)",
                          la_shape_str(k, s1, sizeof s1), la_shape_str(q, s2, sizeof s2));
    for (int a = 0; a < 3; a++)
        if (v->ne[a] != q->ne[a])
            return la_err(LA_ERR_SHAPE, "focused: v is %s but q is %s (B,N,H must match)",
                          la_shape_str(v, s1, sizeof s1), la_shape_str(q, s2, sizeof s2));
    if (out) LA_TRY(la_bwd_check_like(out, "out", v, "v (out is [B,N,H,Dv])", LA_DT_FLOAT));
    LA_TRY(la_bwd_check_like(d_out, "d_out", v, "v (d_out has out's shape [B,N,H,Dv])", LA_DT_FLOAT));
    if (p->map_h <= 0 || p->map_w <= 0)
        return la_err(LA_ERR_ARG, "focused: map %lldx%lld must be positive (set map_h, map_w)",
                      (long long)p->map_h, (long long)p->map_w);
    if (p->map_h > INT64_MAX / p->map_w || p->map_h * p->map_w != N)
        return la_err(LA_ERR_SHAPE, "focused: map %lldx%lld does not hold the N=%lld tokens of q",
                      (long long)p->map_h, (long long)p->map_w, (long long)N);
    if (!(p->eps >= 0.f) || isinf(p->eps))
        return la_err(LA_ERR_ARG, "focused: eps=%g must be finite and >= 0", (double)p->eps);
    if (!blog && (!(p->p > 0.f) || isinf(p->p)))
        return la_err(LA_ERR_ARG, "focused: focusing factor p=%g must be finite and > 0", (double)p->p);
    if (H > INT64_MAX / D) return la_err(LA_ERR_OVERFLOW, "focused: H*D overflows");
    const int64_t C = H * D;
    if (conv) {
        LA_TRY(la_check_tensor(conv, "conv", 3, LA_DT_FLOAT, dev, false));
        const int64_t ks = conv->ne[1];
        if (conv->ne[2] != ks || ks % 2 == 0 || ks > p->map_h || ks > p->map_w)
            return la_err(LA_ERR_SHAPE, "conv: %s must be [channels,k,k] with odd k no larger than "
                          "the %lldx%lld map", la_shape_str(conv, s1, sizeof s1),
                          (long long)p->map_h, (long long)p->map_w);
        if (blog) LA_TRY(la_check_dim(conv, "conv", 0, C, "blog: one k x k kernel per channel H*D"));
        else {
            LA_TRY(la_check_dim(conv, "conv", 0, D, "flatten: one [D,k,k] kernel shared by heads"));
            if (Dv != D)
                return la_err(LA_ERR_SHAPE, "focused: v has Dv=%lld but the flatten conv needs Dv == D=%lld",
                              (long long)Dv, (long long)D);
        }
    }
    const la_tensor *cb = blog ? NULL : conv_bias, *sp = blog ? NULL : softplus_param;
    const la_tensor *fo = blog ? focus : NULL;
    if (cb) {
        if (!conv) return la_err(LA_ERR_ARG, "conv_bias: given without conv");
        LA_TRY(check_vec(cb, "conv_bias", D, dev, "flatten: one bias per channel of v"));
    }
    if (sp) LA_TRY(check_vec(sp, "softplus_param", C, dev, "flatten: one scale per channel H*D"));
    if (fo) LA_TRY(check_vec(fo, "focus", H, dev, "blog: one coefficient per head"));
    if (dq) LA_TRY(la_bwd_check_grad(dq, "dq", q, "q"));
    if (dk) LA_TRY(la_bwd_check_grad(dk, "dk", k, "k"));
    if (dv) LA_TRY(la_bwd_check_grad(dv, "dv", v, "v"));
    LA_TRY(check_param_grad(d_conv, "d_conv", conv, "conv", "NULL"));
    LA_TRY(check_param_grad(d_conv_bias, "d_conv_bias", cb, "conv_bias",
                            blog ? "ignored by the blog variant" : "NULL"));
    LA_TRY(check_param_grad(d_softplus_param, "d_softplus_param", sp, "softplus_param",
                            blog ? "ignored by the blog variant" : "NULL (the default zeros are a constant)"));
    LA_TRY(check_param_grad(d_focus, "d_focus", fo, "focus",
                            blog ? "NULL (the default 2.0 is a constant)" : "ignored by the flatten variant"));
    const la_tensor *outs[7] = {dq, dk, dv, d_conv, d_conv_bias, d_softplus_param, d_focus};
    const char *on[7] = {"dq", "dk", "dv", "d_conv", "d_conv_bias", "d_softplus_param", "d_focus"};
    const la_tensor *ins[9] = {q, k, v, conv, conv_bias, softplus_param, focus, out, d_out};
    const char *in[9] = {"q", "k", "v", "conv", "conv_bias", "softplus_param", "focus", "out", "d_out"};
    LA_TRY(la_bwd_check_overlaps(outs, on, 7, ins, in, 9));

    if (dev == LA_DEVICE_CUDA) {
#ifdef LA_WITH_CUDA
        la_status s = la_focused_backward_cuda(p, q, k, v, conv, cb, sp, fo, out, d_out, dq, dk,
                                               dv, d_conv, d_conv_bias, d_softplus_param,
                                               d_focus, ctx);
        if (s == LA_OK) la_err_clear();
        return s;
#else
        return la_err(LA_ERR_UNSUPPORTED, "focused backward: no CUDA implementation in this build (q is on cuda)");
#endif
    }
    la_status s = la_focused_backward_cpu(p, q, k, v, conv, cb, sp, fo, d_out, dq, dk, dv, d_conv,
                                          d_conv_bias, d_softplus_param, d_focus, ctx);
    if (s == LA_OK) la_err_clear();
    return s;
}
