/* Focused linear attention backward on CUDA (TRAINING.md §1), portable:
 *   flatten: x' = (ReLU(x) + 1e-6)/softplus(s), q̃ = f_p(q'), k̃ = f_p(k') over
 *            all C = H·D channels of a token; o = (q̃ᵀS/N)/(q̃ᵀz/N + eps) per
 *            head + DWC(v) + bias. Gradients through the linear engine
 *            (k̃/N as its keys), then f_p, the ReLU, the softplus scale (a
 *            per-token contribution, reduced over tokens in order) and the
 *            depthwise conv (dv, d_conv, d_conv_bias).
 *   blog:    q̃ = relu1(q·D^-1/2), K̂ = focus[h]·DWConv(relu1(K)); o the
 *            normalized linear attention of (q̃, K̂, v); d_conv, d_focus.
 * Family "focused_bwd": "mma" (focused_bwd_mma.cu: flatten on bf16 views,
 * the default where it applies) and "portable" (this file: everything). */
#include <math.h>

#include "cuda/bwd_common.cuh"
#include "cuda/focused_bwd_mma.cuh"

namespace {

struct fo_geo {
    int64_t B, H, N, D, Hm, Wm, ks;
};

BWD_DEV inline float fo_softplus(float s) { return s > 0.f ? s + log1pf(expf(-s)) : log1pf(expf(s)); }

/* flatten: one thread per token (b, n); x [B,N,H,D] view; writes
 * post·f_p(x') into dst [B,H,N,D] */
__global__ void fo_fp_kernel(int64_t total, fo_geo G, bwd_view x, const float *sp, float p,
                             float post, float *dst) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t n = i % G.N, b = i / G.N, C = G.H * G.D;
    float n1 = 0.f, mx = 0.f;
    for (int64_t c = 0; c < C; c++) {
        const float xp = (fmaxf(bwd_ld(x, b, n, c / G.D, c % G.D), 0.f) + 1e-6f) / sp[c];
        n1 += xp * xp;
        mx = fmaxf(mx, xp);
    }
    n1 = sqrtf(n1);
    const int ip = (p == floorf(p) && p >= 1.f && p <= 8.f) ? (int)p : 0;
    float nu = 0.f;
    for (int64_t c = 0; c < C; c++) {
        const float u = (fmaxf(bwd_ld(x, b, n, c / G.D, c % G.D), 0.f) + 1e-6f) / sp[c] / mx;
        float up = u;
        if (ip)
            for (int e = 1; e < ip; e++) up *= u;
        else
            up = powf(u, p);
        nu += up * up;
    }
    nu = sqrtf(nu);
    for (int64_t c = 0; c < C; c++) {
        const int64_t h = c / G.D, d = c % G.D;
        const float u = (fmaxf(bwd_ld(x, b, n, h, d), 0.f) + 1e-6f) / sp[c] / mx;
        float up = u;
        if (ip)
            for (int e = 1; e < ip; e++) up *= u;
        else
            up = powf(u, p);
        dst[((b * G.H + h) * G.N + n) * G.D + d] = post * n1 * up / nu;
    }
}
/* flatten backward through f_p, ReLU and the softplus scale, per token:
 * g = post·grad [B,H,N,D] of f_p(x'); writes dx into dx [B,H,N,D] and
 * accumulates (add != 0) or writes dx'·x' per channel into tmp [B*N][C] */
__global__ void fo_fp_bwd_kernel(int64_t total, fo_geo G, bwd_view x, const float *sp,
                                 float p, const float *grad, float post, float *dx, float *tmp,
                                 int add) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t n = i % G.N, b = i / G.N, C = G.H * G.D;
    const int ip = (p == floorf(p) && p >= 1.f && p <= 8.f) ? (int)p : 0;
#define FO_XP(c) ((fmaxf(bwd_ld(x, b, n, (c) / G.D, (c) % G.D), 0.f) + 1e-6f) / sp[c])
#define FO_G(c) (post * grad[((b * G.H + (c) / G.D) * G.N + n) * G.D + (c) % G.D])
    float n1 = 0.f, mx = 0.f;
    for (int64_t c = 0; c < C; c++) {
        const float xp = FO_XP(c);
        n1 += xp * xp;
        mx = fmaxf(mx, xp);
    }
    n1 = sqrtf(n1);
    float nu = 0.f;
    for (int64_t c = 0; c < C; c++) {
        const float u = FO_XP(c) / mx;
        float up = u;
        if (ip)
            for (int e = 1; e < ip; e++) up *= u;
        else
            up = powf(u, p);
        nu += up * up;
    }
    nu = sqrtf(nu);
    /* gu = g·û with û = u^p/nu */
    float gu = 0.f;
    for (int64_t c = 0; c < C; c++) {
        const float u = FO_XP(c) / mx;
        float up = u;
        if (ip)
            for (int e = 1; e < ip; e++) up *= u;
        else
            up = powf(u, p);
        gu += FO_G(c) * up / nu;
    }
    /* dx' = gu·x'/n1 + (p·n1/(mx·nu))·u^(p−1)·(g − gu·û) */
    const float k2 = p * n1 / (mx * nu);
    for (int64_t c = 0; c < C; c++) {
        const int64_t h = c / G.D, d = c % G.D;
        const float xr = bwd_ld(x, b, n, h, d);
        const float xp = (fmaxf(xr, 0.f) + 1e-6f) / sp[c], u = xp / mx;
        float um1 = 1.f;
        if (ip)
            for (int e = 1; e < ip; e++) um1 *= u;
        else
            um1 = powf(u, p - 1.f);
        const float uh = um1 * u / nu;
        const float dxp = gu * xp / n1 + k2 * um1 * (FO_G(c) - gu * uh);
        dx[((b * G.H + h) * G.N + n) * G.D + d] = xr > 0.f ? dxp / sp[c] : 0.f;
        float *tp = tmp + i * C + c;
        *tp = (add ? *tp : 0.f) + dxp * xp;
    }
#undef FO_XP
#undef FO_G
}
/* d softplus_param[c] = −σ(s_c)/softplus(s_c) · Σ_tokens tmp[token][c] */
__global__ void fo_dsp_kernel(int64_t total, int64_t ntok, const float *s_raw, const float *sp,
                              const float *tmp, float *out) {
    const int64_t c = bwd_gid();
    if (c >= total) return;
    float acc = 0.f;
    for (int64_t t = 0; t < ntok; t++) acc += tmp[t * total + c];
    const float s = s_raw ? s_raw[c] : 0.f;
    out[c] = -acc * (1.f / (1.f + expf(-s))) / sp[c];
}
__global__ void fo_sp_kernel(int64_t total, const float *s_raw, float *sp) {
    const int64_t c = bwd_gid();
    if (c >= total) return;
    sp[c] = fo_softplus(s_raw ? s_raw[c] : 0.f);
}

/* depthwise conv over the Hm×Wm map of [B,H,N,D] buffers, channel weight
 * w[(per_head ? h*D : 0) + d][ks][ks]; transposed: the adjoint. dst = (add ?
 * dst : 0) + fh · Σ w · src, fh = focus[h] (NULL: 1). */
__global__ void fo_dwc_kernel(int64_t total, fo_geo G, const float *src, const float *w,
                              int per_head, int transposed, const float *focus, int add,
                              float *dst) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t d = i % G.D, n = (i / G.D) % G.N, bh = i / (G.D * G.N), h = bh % G.H;
    const int64_t y = n / G.Wm, x = n % G.Wm, r = G.ks / 2;
    const float *wc = w + ((per_head ? h * G.D : 0) + d) * G.ks * G.ks;
    const float *S = src + bh * G.N * G.D + d;
    float acc = 0.f;
    for (int64_t a = 0; a < G.ks; a++) {
        const int64_t yy = transposed ? y - a + r : y + a - r;
        if (yy < 0 || yy >= G.Hm) continue;
        for (int64_t c = 0; c < G.ks; c++) {
            const int64_t xx = transposed ? x - c + r : x + c - r;
            if (xx < 0 || xx >= G.Wm) continue;
            acc += wc[a * G.ks + c] * S[(yy * G.Wm + xx) * G.D];
        }
    }
    if (focus) acc *= focus[h];
    dst[i] = (add ? dst[i] : 0.f) + acc;
}
__global__ void fo_fill_kernel(int64_t total, float val, float *dst) {
    const int64_t i = bwd_gid();
    if (i < total) dst[i] = val;
}
__global__ void fo_scale_kernel(int64_t total, fo_geo G, const float *src, const float *f,
                                float *dst) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    dst[i] = src[i] * f[(i / (G.D * G.N)) % G.H];
}
/* dconv[ch][a][c] = Σ_{b, h, n} A[b,h,n,d]·X[b,h,n shifted by (a,c),d] over
 * the heads of channel ch (all heads when shared) */
__global__ void fo_dconv_kernel(int64_t total, fo_geo G, const float *A, const float *X,
                                int per_head, float *dconv) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t kk = G.ks * G.ks, ch = i / kk, a = (i % kk) / G.ks, c = i % G.ks;
    const int64_t r = G.ks / 2, d = ch % G.D;
    const int64_t h0 = per_head ? ch / G.D : 0, h1 = per_head ? h0 + 1 : G.H;
    float acc = 0.f;
    for (int64_t b = 0; b < G.B; b++)
        for (int64_t h = h0; h < h1; h++) {
            const float *Ab = A + (b * G.H + h) * G.N * G.D + d;
            const float *Xb = X + (b * G.H + h) * G.N * G.D + d;
            for (int64_t n = 0; n < G.N; n++) {
                const int64_t yy = n / G.Wm + a - r, xx = n % G.Wm + c - r;
                if (yy < 0 || yy >= G.Hm || xx < 0 || xx >= G.Wm) continue;
                acc += Ab[n * G.D] * Xb[(yy * G.Wm + xx) * G.D];
            }
        }
    dconv[i] = acc;
}
/* per channel d (shared: summed over heads) or per head h (over d): Σ A·X
 * (X NULL: Σ A) over b, n and the rest */
__global__ void fo_sum_kernel(int64_t total, fo_geo G, const float *A, const float *X,
                              int per_head_sum, float *out) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    float acc = 0.f;
    for (int64_t b = 0; b < G.B; b++)
        for (int64_t h = 0; h < G.H; h++) {
            if (per_head_sum && h != i) continue;
            const int64_t base = (b * G.H + h) * G.N * G.D;
            for (int64_t n = 0; n < G.N; n++)
                for (int64_t d = 0; d < G.D; d++) {
                    if (!per_head_sum && d != i) continue;
                    const int64_t o = base + n * G.D + d;
                    acc += X ? A[o] * X[o] : A[o];
                }
        }
    out[i] = acc;
}

} // namespace

extern "C" la_status la_focused_backward_cuda(const la_focused_params *p, const la_tensor *q,
                                              const la_tensor *k, const la_tensor *v,
                                              const la_tensor *conv, const la_tensor *conv_bias,
                                              const la_tensor *softplus_param,
                                              const la_tensor *focus, const la_tensor *out,
                                              const la_tensor *d_out, la_tensor *dq,
                                              la_tensor *dk, la_tensor *dv, la_tensor *d_conv,
                                              la_tensor *d_conv_bias,
                                              la_tensor *d_softplus_param, la_tensor *d_focus,
                                              la_context *ctx) {
    (void)out;
    int fast = 0;
    LA_TRY(bwd_variant_pick(ctx, "focused_bwd",
                            fb_mma_eligible(p, q, k, v, conv, d_out, dq, dk, dv), FB_MMA_NEEDS,
                            &fast));
    if (fast)
        return fb_mma_backward(p, q, k, v, conv, softplus_param, d_out, dq, dk, dv, d_conv,
                               d_conv_bias, d_softplus_param, bwd_stream(ctx));
    const int blog = p->variant == LA_FOCUSED_BLOG;
    fo_geo G;
    G.B = q->ne[0];
    G.N = q->ne[1];
    G.H = q->ne[2];
    G.D = q->ne[3];
    G.Hm = p->map_h;
    G.Wm = p->map_w;
    G.ks = conv ? conv->ne[1] : 1;
    const int64_t B = G.B, N = G.N, H = G.H, D = G.D, Dv = v->ne[3], C = H * D, BH = B * H;
    if (G.Hm * G.Wm != N)
        return la_err(LA_ERR_SHAPE, "focused backward: map %lldx%lld for N = %lld",
                      (long long)G.Hm, (long long)G.Wm, (long long)N);
    if (conv && !blog && Dv != D)
        return la_err(LA_ERR_SHAPE, "v: Dv = %lld, the conv needs Dv == D = %lld",
                      (long long)Dv, (long long)D);
    cudaStream_t s = bwd_stream(ctx);
    bwd_ws ws;
    float *qt, *kt, *vt, *go, *dqt, *dkt, *dvt, *w = nullptr, *dw = nullptr, *aux = nullptr;
    float *aux2 = nullptr, *spv = nullptr, *sraw = nullptr, *tmp = nullptr, *small = nullptr;
    ws.want(&qt, BH, N, D);
    ws.want(&kt, BH, N, D);
    ws.want(&vt, BH, N, Dv);
    ws.want(&go, BH, N, Dv);
    ws.want(&dqt, BH, N, D);
    ws.want(&dkt, BH, N, D);
    ws.want(&dvt, BH, N, Dv);
    ws.want(&aux, BH, N, D); /* flatten: dq / dk out of f_p; blog: φ(K) */
    ws.want(&aux2, BH, N, D); /* blog: DWConv(φ(K)) */
    if (conv) {
        ws.want(&w, conv->ne[0], G.ks, G.ks);
        ws.want(&dw, conv->ne[0], G.ks, G.ks);
    }
    ws.want(&small, C + 2 * H + D + 16);
    if (!blog) {
        ws.want(&spv, C);
        ws.want(&sraw, C);
        ws.want(&tmp, B * N, C);
    }
    LA_TRY(ws.alloc(s, "focused backward"));
    if (conv) LA_TRY(bwd_pack(s, conv, w));
    LA_TRY(bwd_gather(s, bwd_view4(v), vt, B, N, H, Dv, BWD_NO_FEATURE, 1.f, 1.f));
    LA_TRY(bwd_gather(s, bwd_view4(d_out), go, B, N, H, Dv, BWD_NO_FEATURE, 1.f, 1.f));
    float *foc = small, *dfoc = small + H, *dbias = small + 2 * H, *dsp = small + 2 * H + D;
    if (blog) {
        const float qs = (float)(1.0 / sqrt((double)D));
        LA_TRY(bwd_gather(s, bwd_view4(q), qt, B, N, H, D, LA_FEATURE_RELU1, qs, 1.f));
        LA_TRY(bwd_gather(s, bwd_view4(k), aux, B, N, H, D, LA_FEATURE_RELU1, 1.f, 1.f));
        if (focus) {
            LA_TRY(bwd_pack(s, focus, foc));
        } else {
            BWD_LAUNCH(fo_fill_kernel, H, s, 2.0f, foc); /* default focus 2.0 */
        }
        /* K̂pre = DWConv(φ(K)) (identity without conv), K̂ = focus·K̂pre */
        if (conv) BWD_LAUNCH(fo_dwc_kernel, BH * N * D, s, G, aux, w, 1, 0, nullptr, 0, aux2);
        BWD_LAUNCH(fo_scale_kernel, BH * N * D, s, G, conv ? aux2 : aux, foc, kt);
    } else {
        if (softplus_param) LA_TRY(bwd_pack(s, softplus_param, sraw));
        BWD_LAUNCH(fo_sp_kernel, C, s, softplus_param ? sraw : nullptr, spv);
        BWD_LAUNCH(fo_fp_kernel, B * N, s, G, bwd_view4(q), spv, p->p, 1.f, qt);
        BWD_LAUNCH(fo_fp_kernel, B * N, s, G, bwd_view4(k), spv, p->p, 1.f / (float)N, kt);
    }

    lbk_problem P;
    memset(&P, 0, sizeof P);
    P.B = B;
    P.H = H;
    P.N = N;
    P.D = D;
    P.Dv = Dv;
    P.n[0] = P.n[1] = 1;
    P.n[2] = N;
    P.g[0] = P.g[1] = P.g[2] = 1;
    P.M = 1;
    P.norm = LA_MHLA_NORM_PER_QUERY;
    P.eps = p->eps;
    P.qt = qt;
    P.kt = kt;
    P.v = vt;
    P.dO = go;
    lbk_grads Gr;
    memset(&Gr, 0, sizeof Gr);
    Gr.dqt = dqt;
    Gr.dkt = dkt;
    Gr.dv = dvt;
    LA_TRY(lbk_backward(&P, &Gr, s));

    if (blog) {
        const float qs = (float)(1.0 / sqrt((double)D));
        const float *kpre = conv ? aux2 : aux;
        if (d_focus) {
            BWD_LAUNCH(fo_sum_kernel, H, s, G, dkt, kpre, 1, dfoc);
            LA_TRY(bwd_unpack(s, d_focus, dfoc));
        }
        /* dK̂pre = focus·dK̂ (in place), then through the conv to φ(K) */
        BWD_LAUNCH(fo_scale_kernel, BH * N * D, s, G, dkt, foc, dkt);
        if (conv) {
            if (d_conv) {
                BWD_LAUNCH(fo_dconv_kernel, conv->ne[0] * G.ks * G.ks, s, G, dkt, aux, 1, dw);
                LA_TRY(bwd_unpack(s, d_conv, dw));
            }
            BWD_LAUNCH(fo_dwc_kernel, BH * N * D, s, G, dkt, w, 1, 1, nullptr, 0, aux2);
        }
        const float *dphik = conv ? aux2 : dkt;
        if (dq)
            LA_TRY(bwd_scatter(s, bwd_view4(dq), dqt, bwd_view4(q), B, N, H, D, LA_FEATURE_RELU1,
                               qs, 1.f));
        if (dk)
            LA_TRY(bwd_scatter(s, bwd_view4(dk), dphik, bwd_view4(k), B, N, H, D,
                               LA_FEATURE_RELU1, 1.f, 1.f));
    } else {
        BWD_LAUNCH(fo_fp_bwd_kernel, B * N, s, G, bwd_view4(q), spv, p->p, dqt, 1.f, aux, tmp, 0);
        if (dq) LA_TRY(bwd_scatter(s, bwd_view4(dq), aux, bwd_view4(q), B, N, H, D, BWD_NO_FEATURE, 1.f, 1.f));
        BWD_LAUNCH(fo_fp_bwd_kernel, B * N, s, G, bwd_view4(k), spv, p->p, dkt, 1.f / (float)N, aux, tmp, 1);
        if (dk) LA_TRY(bwd_scatter(s, bwd_view4(dk), aux, bwd_view4(k), B, N, H, D, BWD_NO_FEATURE, 1.f, 1.f));
        if (d_softplus_param) {
            BWD_LAUNCH(fo_dsp_kernel, C, s, B * N, softplus_param ? sraw : nullptr, spv, tmp, dsp);
            LA_TRY(bwd_unpack(s, d_softplus_param, dsp));
        }
        if (conv) {
            /* o += DWC(v) + bias: dv += DWCᵀ(dO), d_conv, d_conv_bias */
            BWD_LAUNCH(fo_dwc_kernel, BH * N * D, s, G, go, w, 0, 1, nullptr, 1, dvt);
            if (d_conv) {
                BWD_LAUNCH(fo_dconv_kernel, D * G.ks * G.ks, s, G, go, vt, 0, dw);
                LA_TRY(bwd_unpack(s, d_conv, dw));
            }
            if (d_conv_bias) {
                BWD_LAUNCH(fo_sum_kernel, D, s, G, go, nullptr, 0, dbias);
                LA_TRY(bwd_unpack(s, d_conv_bias, dbias));
            }
        }
    }
    if (dv) LA_TRY(bwd_scatter(s, bwd_view4(dv), dvt, bwd_view4(v), B, N, H, Dv, BWD_NO_FEATURE, 1.f, 1.f));
    return LA_OK;
}
