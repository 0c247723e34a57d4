/* CPU focused linear attention backward (TRAINING.md §1, SPEC §4).
 *
 * Per batch element, the forward's quantities are rebuilt over all tokens
 * (O(N·H·D) memory, as the forward): q̃, k̃ (flatten: f_p over all C = H·d
 * channels of a token; blog: relu1(q·d^-1/2) and K̂ = focus·DWConv(relu1(k))),
 * the per-head summaries S, z (flatten: their means S/N, z/N). Then, per
 * head, with den = q̃·z̄ + eps:
 *     g = dO/den, dden = −(dO·o_lin)/den,  dq̃ = S̄ g + dden z̄,
 *     dS̄ = Σ q̃ gᵀ, dz̄ = Σ dden q̃   (flatten: dS = dS̄/N, dz = dz̄/N)
 *     dk̃ = V dSᵀ + dz,  dv = K̃ dS
 * flatten: dv, d_conv, d_conv_bias also through o += DWC(v) + bias; dq, dk
 * through f_p (x' = (relu(x)+1e-6)/softplus(s), f = ‖x'‖·ŷ with ŷ = x'^p/‖x'^p‖):
 *     dx'_c = (df·f)/‖x'‖² · x'_c + ‖x'‖·p·u_c^{p−1}/(max x'·‖u^p‖) · (df_c − (df·ŷ) ŷ_c)
 * (u = x'/max x'), dx = dx'/softplus(s) where x > 0, and the softplus scale
 * collects Σ dx'·(relu(x)+1e-6) over q and k of every token, times
 * d(1/softplus(s))/ds = −sigmoid(s)/softplus(s)².
 * blog: d_focus[h] = Σ dK̂∘DWConv(φK), dφK = DWConvᵀ(focus·dK̂), d_conv.
 * Every reduction is owned by one task and runs in a fixed order (tokens in
 * order, batch elements in order, float64): deterministic. */
#include "cpu/backward_cpu.h"
#include "cpu/focused_cpu.h"

#include "cpu/bwd_gemm.h"

#include <math.h>
#include <stdlib.h>

#define FB_TILE 64

/* Backward of la_flatten_focus_row_f32: dx = dL/dx (may be x itself); df = dL/df_p
 * becomes, in place, the softplus contribution dL/d(1/softplus) per channel;
 * t is 2·C floats of scratch. */
LA_VEC512 static void focus_row_bwd_f32(const float *x, const float *isp, int64_t C, int ip, float p,
                                        float *dx, float *df, float *t) {
    float *xp = t, *um = t + C; /* x', u^(p-1) */
    float nx2 = 0.f, mx = 0.f;
#pragma omp simd reduction(+ : nx2) reduction(max : mx)
    for (int64_t c = 0; c < C; c++) {
        const float v = ((x[c] > 0.f ? x[c] : 0.f) + 1e-6f) * isp[c];
        xp[c] = v;
        nx2 += v * v;
        mx = v > mx ? v : mx;
    }
    const float imx = 1.f / mx;
    float nu2 = 0.f, sdf = 0.f; /* ‖u^p‖², Σ df·u^p */
    if (ip == 3) {
#pragma omp simd reduction(+ : nu2, sdf)
        for (int64_t c = 0; c < C; c++) {
            const float u = xp[c] * imx, u2 = u * u, up = u2 * u;
            um[c] = u2;
            nu2 += up * up;
            sdf += df[c] * up;
        }
    } else {
        for (int64_t c = 0; c < C; c++) {
            const float u = xp[c] * imx;
            float u1 = 1.f;
            if (ip)
                for (int e = 1; e < ip; e++) u1 *= u;
            else
                u1 = powf(u, p - 1.f);
            const float up = u1 * u;
            um[c] = u1;
            nu2 += up * up;
            sdf += df[c] * up;
        }
    }
    const float nx = sqrtf(nx2), nu = sqrtf(nu2), inu = 1.f / nu;
    const float s2 = sdf * inu;            /* df·ŷ */
    const float a1 = nx * s2 / nx2;        /* (df·f)/‖x'‖² */
    const float k2 = nx * p / (mx * nu);
    const float s2n = s2 * inu * imx;      /* ŷ_c = u_c^(p-1)·x'_c/(mx·nu) */
#pragma omp simd
    for (int64_t c = 0; c < C; c++) {
        const float s2y = um[c] * xp[c] * s2n; /* (df·ŷ)·ŷ_c */
        const float dxp = a1 * xp[c] + k2 * um[c] * (df[c] - s2y);
        const float xr = x[c] > 0.f ? x[c] : 0.f;
        dx[c] = x[c] > 0.f ? dxp * isp[c] : 0.f;
        df[c] = dxp * (xr + 1e-6f);
    }
}

/* Batch element b of a [B, N, H, W] tensor as dense f32 rows of H·W
 * (the layout the passes below work in): its own memory, read, or for a
 * gradient written, in place. NULL (gather / scatter instead) otherwise. */
static float *dense_rows(const la_tensor *t, int64_t b) {
    if (!t || t->dtype != LA_F32 || t->nb[3] != 1 || t->nb[2] != t->ne[3] || t->nb[1] != t->ne[2] * t->ne[3])
        return NULL;
    return (float *)t->data + b * t->nb[0];
}

/* Depthwise-conv gradient rows (flatten; per-head stride ld = H·Dv, Dv = D).
 * AVX-512 with D a multiple of 16 up to 128 keeps the D sums in registers
 * (the plain loop reloads and stores them for every term); elsewhere plain
 * loops. Both add the terms in the same order. */

/* af[0..D) = Σ_{x<cnt} Σ_h g[x·ld + h·D + j] · v[x·ld + h·D + j] (v = NULL: 1) */
LA_VEC512 static void conv_tap_row(const float *g, const float *v, int64_t cnt, int64_t H,
                                   int64_t D, int64_t ld, float *af) {
#if defined(__AVX512F__)
    if (D % 16 == 0 && D <= 128) {
        const int nv = (int)(D / 16);
        __m512 acc[8];
        _Pragma("GCC unroll 8") for (int u = 0; u < 8; u++) acc[u] = _mm512_setzero_ps();
        for (int64_t x = 0; x < cnt; x++)
            for (int64_t h = 0; h < H; h++) {
                const float *gp = g + x * ld + h * D, *vp = v ? v + x * ld + h * D : NULL;
                _Pragma("GCC unroll 8") for (int u = 0; u < 8; u++) if (u < nv) {
                    const __m512 gv = _mm512_loadu_ps(gp + 16 * u);
                    acc[u] = vp ? _mm512_fmadd_ps(gv, _mm512_loadu_ps(vp + 16 * u), acc[u])
                                : _mm512_add_ps(gv, acc[u]);
                }
            }
        _Pragma("GCC unroll 8") for (int u = 0; u < 8; u++) if (u < nv) _mm512_storeu_ps(af + 16 * u, acc[u]);
        return;
    }
#endif
    for (int64_t j = 0; j < D; j++) af[j] = 0.f;
    for (int64_t x = 0; x < cnt; x++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t j = 0; j < D; j++)
                af[j] += g[x * ld + h * D + j] * (v ? v[x * ld + h * D + j] : 1.f);
}

/* dv row of token (y, x) += DWCᵀ(dO): Σ over taps (a, b) of W[a,b] ∘ dO[(y−a+r, x−b+r)] */
LA_VEC512 static void conv_t_row(float *dvr, const float *G, const float *Wc, int64_t y, int64_t x,
                                 int64_t Hm, int64_t Wm, int64_t ks, int64_t H, int64_t D,
                                 int64_t ld) {
    const int64_t r = ks / 2;
#if defined(__AVX512F__)
    if (D % 16 == 0 && D <= 128) {
        const int nv = (int)(D / 16);
        for (int64_t h = 0; h < H; h++) {
            __m512 acc[8];
            float *o = dvr + h * D;
            _Pragma("GCC unroll 8") for (int u = 0; u < 8; u++)
                acc[u] = u < nv ? _mm512_loadu_ps(o + 16 * u) : _mm512_setzero_ps();
            for (int64_t a = 0; a < ks; a++) {
                const int64_t yy = y - a + r;
                if (yy < 0 || yy >= Hm) continue;
                for (int64_t bb = 0; bb < ks; bb++) {
                    const int64_t xx = x - bb + r;
                    if (xx < 0 || xx >= Wm) continue;
                    const float *w = Wc + (a * ks + bb) * D, *src = G + (yy * Wm + xx) * ld + h * D;
                    _Pragma("GCC unroll 8") for (int u = 0; u < 8; u++) if (u < nv)
                        acc[u] = _mm512_fmadd_ps(_mm512_loadu_ps(w + 16 * u), _mm512_loadu_ps(src + 16 * u), acc[u]);
                }
            }
            _Pragma("GCC unroll 8") for (int u = 0; u < 8; u++) if (u < nv) _mm512_storeu_ps(o + 16 * u, acc[u]);
        }
        return;
    }
#endif
    for (int64_t a = 0; a < ks; a++) {
        const int64_t yy = y - a + r;
        if (yy < 0 || yy >= Hm) continue;
        for (int64_t bb = 0; bb < ks; bb++) {
            const int64_t xx = x - bb + r;
            if (xx < 0 || xx >= Wm) continue;
            const float *w = Wc + (a * ks + bb) * D, *src = G + (yy * Wm + xx) * ld;
            for (int64_t h = 0; h < H; h++)
                for (int64_t j = 0; j < D; j++) dvr[h * D + j] += w[j] * src[h * D + j];
        }
    }
}

la_status la_focused_backward_cpu(const la_focused_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *v, const la_tensor *conv,
                                  const la_tensor *conv_bias, const la_tensor *softplus_param,
                                  const la_tensor *focus, const la_tensor *d_out, la_tensor *dq,
                                  la_tensor *dk, la_tensor *dv, la_tensor *d_conv,
                                  la_tensor *d_conv_bias, la_tensor *d_softplus_param,
                                  la_tensor *d_focus, la_context *ctx) {
    const int64_t B = q->ne[0], N = q->ne[1], H = q->ne[2], D = q->ne[3], Dv = v->ne[3];
    const int64_t C = H * D, Wm = p->map_w, Hm = p->map_h, HDv = H * Dv;
    const int blog = p->variant == LA_FOCUSED_BLOG;
    const int64_t ks = conv ? conv->ne[1] : 1, r = ks / 2, Cc = blog ? C : D;
    const int64_t sz = D * Dv + D;
    const int nt = la_ctx_threads(ctx);
    const double pf = p->p;
    const int ip = (pf == floor(pf) && pf >= 1 && pf <= 8) ? (int)pf : 0;
    const float eps = p->eps;

    size_t nc, nv, tot, bytes, dbl, dbytes;
    LA_TRY(la_mul_size((size_t)N, (size_t)C, &nc, "focused backward: N*H*D"));
    LA_TRY(la_mul_size((size_t)N, (size_t)HDv, &nv, "focused backward: N*H*Dv"));
    LA_TRY(la_mul_size(nc, 4, &tot, "focused backward: feature workspace"));
    size_t nrs; /* flatten conv: per map row, per tap (and the bias), D sums */
    LA_TRY(la_mul_size((size_t)Hm * (size_t)(ks * ks + 1), (size_t)D, &nrs, "focused backward: conv row sums"));
    size_t rest = 3 * nv + 3 * (size_t)H * (size_t)sz + (size_t)(ks * ks * Cc) + (size_t)D +
                  (size_t)H + (size_t)C + nrs + (size_t)nt * (size_t)FB_TILE * (size_t)(2 * Dv + 1);
    if (tot + rest < tot) return la_err(LA_ERR_OVERFLOW, "focused backward: workspace overflows");
    LA_TRY(la_mul_size(tot + rest, sizeof(float), &bytes, "focused backward workspace"));
    LA_TRY(la_mul_size((size_t)C * 2 + (size_t)(ks * ks * Cc) + (size_t)D + (size_t)H,
                       1, &dbl, "focused backward accumulators"));
    size_t rows;
    LA_TRY(la_mul_size((size_t)nt * 6, (size_t)C, &rows, "focused backward rows"));
    LA_TRY(la_mul_size(dbl + rows, sizeof(double), &dbytes, "focused backward accumulators"));
    float *ws = la_ws_alloc(ctx, bytes);
    if (!ws) return LA_ERR_NOMEM;
    double *dw = la_ws_alloc(ctx, dbytes);
    if (!dw) {
        la_ws_free(ctx, ws);
        return LA_ERR_NOMEM;
    }
    /* dq̃ overwrites q̃ tile by tile once it is read; flatten's dk̃ overwrites
     * k̃ once dv is formed (blog reads k̃ after: its own panel, and Pk) */
    float *Qt = ws, *Kt = Qt + nc, *Pk = Kt + nc, *DQ = Qt, *DK = blog ? Pk + nc : Kt;
    /* flatten: q, k as read, then dq, dk; v, dO, dv: each used only where its
     * tensor is not dense f32 (those are read and written in place) */
    float *Xq0 = Kt + nc, *Xk0 = Xq0 + nc;
    float *V0 = Qt + 4 * nc, *G0 = V0 + nv, *DV0 = G0 + nv, *Sz = DV0 + nv, *dSz = Sz + H * sz;
    float *STs = dSz + H * sz; /* Sᵀ per head, for the tile products */
    float *Wc = STs + H * sz, *bias = Wc + ks * ks * Cc, *foc = bias + D, *isp = foc + H, *RS = isp + C, *TW = RS + nrs;
    double *inv_sp = dw, *dsp = inv_sp + C, *dconv = dsp + C, *dbias = dconv + ks * ks * Cc;
    double *dfoc = dbias + D, *RW = dfoc + H;
    memset(dsp, 0, (size_t)(C + ks * ks * Cc + D + H) * sizeof(double));
    if (conv)
        for (int64_t c = 0; c < Cc; c++)
            for (int64_t a = 0; a < ks; a++)
                for (int64_t bb = 0; bb < ks; bb++)
                    Wc[(a * ks + bb) * Cc + c] = la_load_f32(conv, la_off3(conv, c, a, bb));
    for (int64_t j = 0; j < D; j++) bias[j] = conv_bias ? la_load_f32(conv_bias, conv_bias->nb[0] * j) : 0.f;
    for (int64_t c = 0; c < C; c++) {
        const double s = softplus_param ? la_load_f32(softplus_param, softplus_param->nb[0] * c) : 0.0;
        inv_sp[c] = 1.0 / la_softplus(s);
        isp[c] = (float)inv_sp[c];
    }
    for (int64_t h = 0; h < H; h++) foc[h] = focus ? la_load_f32(focus, focus->nb[0] * h) : 2.0f;
    const double qscale = 1.0 / sqrt((double)D);

    for (int64_t b = 0; b < B; b++) {
        const float *V = dense_rows(v, b), *G = dense_rows(d_out, b);
        const float *Xq = blog ? NULL : dense_rows(q, b), *Xk = blog ? NULL : dense_rows(k, b);
        float *DV = dense_rows(dv, b), *dQo = dense_rows(dq, b), *dKo = dense_rows(dk, b);
        const int gv = !V, gg = !G, gq = !blog && !Xq, gk = !blog && !Xk;
        const int sdv = dv && !DV, sdq = dq && !dQo, sdk = dk && !dKo; /* scattered at the end */
        V = V ? V : V0, G = G ? G : G0, Xq = Xq ? Xq : Xq0, Xk = Xk ? Xk : Xk0, DV = DV ? DV : DV0;
        dQo = dQo ? dQo : Xq0, dKo = dKo ? dKo : Xk0;
        if (gv || gg || gq || gk)
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t h = 0; h < H; h++) {
                if (gv) la_gather_bnhd_rows(v, b, h, 0, N, V0 + h * Dv, HDv);
                if (gg) la_gather_bnhd_rows(d_out, b, h, 0, N, G0 + h * Dv, HDv);
                if (gq) la_gather_bnhd_rows(q, b, h, 0, N, Xq0 + h * D, C);
                if (gk) la_gather_bnhd_rows(k, b, h, 0, N, Xk0 + h * D, C);
            }
        /* features */
        if (!blog)
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t n = 0; n < N; n++) {
                la_flatten_focus_row_f32(Xq + n * C, isp, C, ip, (float)pf, Qt + n * C);
                la_flatten_focus_row_f32(Xk + n * C, isp, C, ip, (float)pf, Kt + n * C);
            }
        else
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t n = 0; n < N; n++) {
            double *x = RW + (size_t)la_thread_id() * 6 * C;
            for (int w = 0; w < 2; w++) {
                const la_tensor *t = w ? k : q;
                float *dst = (w ? Pk : Qt) + n * C;
                for (int64_t h = 0; h < H; h++)
                    for (int64_t j = 0; j < D; j++) x[h * D + j] = la_load_f32(t, la_off4(t, b, n, h, j));
                for (int64_t c = 0; c < C; c++) {
                    const float xv = w ? (float)x[c] : (float)(x[c] * qscale);
                    dst[c] = (xv > 0.f ? xv : 0.f) + 1.f;
                }
            }
        }
        if (blog) /* Kt = DWConv(φK), before the focus factor */
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t n = 0; n < N; n++) {
                const int64_t y = n / Wm, x = n % Wm;
                float *dst = Kt + n * C;
                if (!conv) memcpy(dst, Pk + n * C, sizeof(float) * (size_t)C);
                else la_dwconv_row(dst, Pk, Wc, y, x, Hm, Wm, ks, C);
            }
        /* per head: summaries, then dq̃, dS̄, dz̄, then dk̃, dv (linear part) */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
        for (int64_t h = 0; h < H; h++) {
            float *S = Sz + h * sz, *z = S + D * Dv, *dS = dSz + h * sz, *dz = dS + D * Dv;
            const float *kt = Kt + h * D, *qt = Qt + h * D, *vt = V + h * Dv, *gt = G + h * Dv;
            const float fsc = blog ? foc[h] : (float)(1.0 / (double)N);
            la_sgemm(true, false, D, Dv, N, fsc, kt, C, vt, HDv, 0.f, S, Dv);
            float *St = STs + h * sz;
            for (int64_t j = 0; j < D; j++)
                for (int64_t e = 0; e < Dv; e++) St[e * D + j] = S[j * Dv + e];
            double *dzd = RW + (size_t)la_thread_id() * 6 * C, ddsum = 0; /* z, then dz, Σ dden in float64 */
            float *dzt = (float *)(dzd + D);                                 /* dz of one tile */
            for (int64_t j = 0; j < D; j++) dzd[j] = 0;
            for (int64_t n0 = 0; n0 < N; n0 += FB_TILE) { /* rows in order: float tiles, then float64 */
                const int64_t n1 = N - n0 < FB_TILE ? N : n0 + FB_TILE;
                for (int64_t j = 0; j < D; j++) dzt[j] = 0.f;
                for (int64_t n = n0; n < n1; n++)
                    for (int64_t j = 0; j < D; j++) dzt[j] += kt[n * C + j];
                for (int64_t j = 0; j < D; j++) dzd[j] += dzt[j];
            }
            for (int64_t j = 0; j < D; j++) {
                z[j] = (float)(dzd[j] * fsc);
                dzd[j] = 0;
            }
            memset(dS, 0, (size_t)sz * sizeof(float));
            float *ot = TW + (size_t)la_thread_id() * FB_TILE * (2 * Dv + 1), *g = ot + FB_TILE * Dv;
            float *dd = g + FB_TILE * Dv; /* dden of the tile's tokens */
            for (int64_t n0 = 0; n0 < N; n0 += FB_TILE) {
                const int64_t len = N - n0 < FB_TILE ? N - n0 : FB_TILE;
                la_bwd_acc(len, Dv, D, 1.f, qt + n0 * C, C, 1, S, Dv, ot, Dv, 0.f);
                for (int64_t j = 0; j < D; j++) dzt[j] = 0.f;
                for (int64_t i = 0; i < len; i++) {
                    const float *qr = qt + (n0 + i) * C;
                    float den = 0.f; /* non-negative terms: float is exact enough */
#pragma omp simd reduction(+ : den)
                    for (int64_t j = 0; j < D; j++) den += qr[j] * z[j];
                    const float inv = 1.f / (den + eps);
                    float go = 0.f;
#pragma omp simd reduction(+ : go)
                    for (int64_t e = 0; e < Dv; e++) {
                        go += gt[(n0 + i) * HDv + e] * ot[i * Dv + e];
                        g[i * Dv + e] = gt[(n0 + i) * HDv + e] * inv;
                    }
                    const float dden = -go * inv * inv;
                    dd[i] = dden;
                    ddsum += dden;
                    for (int64_t j = 0; j < D; j++) dzt[j] += dden * qr[j];
                }
                for (int64_t j = 0; j < D; j++) dzd[j] += dzt[j];
                la_bwd_acc(D, Dv, len, 1.f, qt + n0 * C, 1, C, g, Dv, dS, Dv, 1.f);
                /* the q̃ tile is read: dq̃ = dden z + g Sᵀ over it */
                for (int64_t i = 0; i < len; i++) {
                    float *dqr = DQ + (n0 + i) * C + h * D;
                    for (int64_t j = 0; j < D; j++) dqr[j] = dd[i] * z[j];
                }
                la_bwd_acc(len, D, Dv, 1.f, g, Dv, 1, St, D, DQ + n0 * C + h * D, C, 1.f);
            }
            for (int64_t j = 0; j < D; j++) dz[j] = (float)dzd[j];
            /* dK̃ (blog: dK̂) = V dSᵀ + dz; the summaries were scaled by fsc
             * (flatten 1/N, blog focus[h]), so dk̃ and dv carry fsc */
            la_sgemm(false, false, N, Dv, D, fsc, kt, C, dS, Dv, 0.f, DV + h * Dv, HDv);
            la_sgemm(false, true, N, D, Dv, 1.f, vt, HDv, dS, Dv, 0.f, DK + h * D, C); /* flatten: over k̃ */
            if (blog) {
                /* d_focus[h] = Σ dK̂∘DWConv(φK). focus scales numerator and
                 * denominator alike, so that sum cancels down to its eps part;
                 * formed directly: ∂o/∂f = num·eps/(f·den²), i.e. −(eps/f)·Σ dden
                 * (the plain sum only when f = 0). */
                if (fsc != 0.f) {
                    dfoc[h] += -(double)eps / fsc * ddsum;
                } else {
                    double a = 0;
                    for (int64_t n = 0; n < N; n++)
                        for (int64_t j = 0; j < D; j++)
                            a += ((double)DK[n * C + h * D + j] + dz[j]) * kt[n * C + j];
                    dfoc[h] += a;
                }
            }
            for (int64_t n = 0; n < N; n++) /* + dz, times fsc, in one pass */
                for (int64_t j = 0; j < D; j++) DK[n * C + h * D + j] = (DK[n * C + h * D + j] + dz[j]) * fsc;
        }
        if (!blog && conv) {
            /* dv += DWCᵀ(dO); d_conv_bias, d_conv per channel j */
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t n = 0; n < N; n++)
                conv_t_row(DV + n * HDv, G, Wc, n / Wm, n % Wm, Hm, Wm, ks, H, D, HDv);
            /* d_conv_bias[j] = Σ dO[.,.,j]; d_conv[a,b][j] = Σ_n Σ_h dO[n,h,j] v[n+(a,b)-r, h, j]:
             * one task per map row (its dO row and the ks rows of v it meets stay in cache),
             * every tap's row sum in float into a slot of its own; then the rows in order,
             * in float64 */
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t y = 0; y < Hm; y++)
                for (int64_t tap = 0; tap <= ks * ks; tap++) {
                    float *af = RS + (y * (ks * ks + 1) + tap) * D;
                    const int64_t a = tap / ks, bb = tap % ks, yy = y + a - r;
                    int64_t x0 = r - bb, x1 = Wm + r - bb; /* xx = x + bb - r in [0, Wm) */
                    if (tap == ks * ks || x0 < 0) x0 = 0;
                    if (tap == ks * ks || x1 > Wm) x1 = Wm;
                    if ((tap < ks * ks && (yy < 0 || yy >= Hm)) || x1 <= x0) {
                        for (int64_t j = 0; j < D; j++) af[j] = 0.f;
                        continue;
                    }
                    conv_tap_row(G + (y * Wm + x0) * HDv,
                                 tap == ks * ks ? NULL : V + (yy * Wm + x0 + bb - r) * HDv, x1 - x0, H, D,
                                 HDv, af);
                }
            for (int64_t y = 0; y < Hm; y++)
                for (int64_t tap = 0; tap <= ks * ks; tap++) {
                    const float *af = RS + (y * (ks * ks + 1) + tap) * D;
                    double *acc = tap == ks * ks ? dbias : dconv + tap * D;
                    for (int64_t j = 0; j < D; j++) acc[j] += af[j];
                }
        }
        if (blog) {
            /* d_conv[c] = Σ dKc[n,c] φK[n',c]; dφK = DWConvᵀ(dKc) (into Kt, read no more) */
            if (conv && d_conv) /* one task per kernel tap, channels innermost */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
                for (int64_t tap = 0; tap < ks * ks; tap++) {
                    double *acc = dconv + tap * C; /* owned by this task */
                    const int64_t a = tap / ks, bb = tap % ks;
                    for (int64_t n = 0; n < N; n++) {
                        const int64_t yy = n / Wm + a - r, xx = n % Wm + bb - r;
                        if (yy < 0 || yy >= Hm || xx < 0 || xx >= Wm) continue;
                        const float *dr = DK + n * C, *pr = Pk + (yy * Wm + xx) * C;
                        for (int64_t c = 0; c < C; c++) acc[c] += (double)dr[c] * pr[c];
                    }
                }
            if (dk)
#pragma omp parallel for num_threads(nt) schedule(static)
                for (int64_t n = 0; n < N; n++) {
                    const int64_t y = n / Wm, x = n % Wm;
                    float *dst = Kt + n * C; /* Kt is no longer needed */
                    if (!conv) {
                        memcpy(dst, DK + n * C, sizeof(float) * (size_t)C);
                    } else { /* per-channel weights: conv_t_row with one "head" of C */
                        for (int64_t c = 0; c < C; c++) dst[c] = 0.f;
                        conv_t_row(dst, DK, Wc, y, x, Hm, Wm, ks, 1, C, C);
                    }
                    for (int64_t c = 0; c < C; c++)
                        if (!(Pk[n * C + c] > 1.f)) dst[c] = 0.f; /* relu1: k > 0 */
                }
        }
        /* dq, dk (flatten through f_p; blog through relu1), softplus sums */
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t n = 0; n < N; n++) {
            for (int w = 0; w < 2; w++) {
                la_tensor *gt = w ? dk : dq;
                if (!gt && (blog || !d_softplus_param)) continue;
                float *src = (w ? DK : DQ) + n * C;
                if (blog) {
                    if (w) { /* dk from dφK in Kt */
                        for (int64_t h = 0; h < H; h++)
                            for (int64_t j = 0; j < D; j++)
                                la_store_f32(gt, la_off4(gt, b, n, h, j), Kt[n * C + h * D + j]);
                    } else {
                        for (int64_t h = 0; h < H; h++)
                            for (int64_t j = 0; j < D; j++) {
                                const double xv = la_load_f32(q, la_off4(q, b, n, h, j)) * qscale;
                                const float gq = xv > 0 ? (float)(src[h * D + j] * qscale) : 0.f;
                                la_store_f32(gt, la_off4(gt, b, n, h, j), gq);
                            }
                    }
                    continue;
                }
                /* dq/dk rows (dense outputs, else Xq0/Xk0); DQ/DK rows become the softplus terms */
                focus_row_bwd_f32((w ? Xk : Xq) + n * C, isp, C, ip, (float)pf, (w ? dKo : dQo) + n * C, src,
                                  (float *)(RW + (size_t)la_thread_id() * 6 * C));
            }
        }
        if (!blog && (sdq || sdk))
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t h = 0; h < H; h++) {
                if (sdq) la_scatter_bnhd_rows(dq, b, h, 0, N, Xq0 + h * D, C);
                if (sdk) la_scatter_bnhd_rows(dk, b, h, 0, N, Xk0 + h * D, C);
            }
        if (!blog && d_softplus_param) /* channel blocks, tokens in order, rows read contiguously */
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t c0 = 0; c0 < C; c0 += 64) {
                const int64_t cn = C - c0 < 64 ? C - c0 : 64;
                double a[64] = {0};
                for (int64_t n0 = 0; n0 < N; n0 += FB_TILE) { /* float inside a tile */
                    const int64_t n1 = N - n0 < FB_TILE ? N : n0 + FB_TILE;
                    float af[64] = {0};
                    for (int64_t n = n0; n < n1; n++) {
                        const float *dqr = DQ + n * C + c0, *dkr = DK + n * C + c0;
                        for (int64_t c = 0; c < cn; c++) af[c] += dqr[c] + dkr[c];
                    }
                    for (int64_t c = 0; c < cn; c++) a[c] += af[c];
                }
                for (int64_t c = 0; c < cn; c++) dsp[c0 + c] += a[c];
            }
        if (sdv)
            for (int64_t h = 0; h < H; h++) la_scatter_bnhd_rows(dv, b, h, 0, N, DV0 + h * Dv, HDv);
    }
    if (d_conv)
        for (int64_t c = 0; c < Cc; c++)
            for (int64_t a = 0; a < ks; a++)
                for (int64_t bb = 0; bb < ks; bb++) {
                    la_store_f32(d_conv, la_off3(d_conv, c, a, bb), (float)dconv[(a * ks + bb) * Cc + c]);
                }
    if (d_conv_bias)
        for (int64_t j = 0; j < D; j++) la_store_f32(d_conv_bias, d_conv_bias->nb[0] * j, (float)dbias[j]);
    if (d_softplus_param)
        for (int64_t c = 0; c < C; c++) {
            const double s = la_load_f32(softplus_param, softplus_param->nb[0] * c);
            const double sp = la_softplus(s), sig = 1.0 / (1.0 + exp(-s));
            la_store_f32(d_softplus_param, d_softplus_param->nb[0] * c, (float)(-dsp[c] * sig / (sp * sp)));
        }
    if (d_focus)
        for (int64_t h = 0; h < H; h++) la_store_f32(d_focus, d_focus->nb[0] * h, (float)dfoc[h]);
    la_ws_free(ctx, dw);
    la_ws_free(ctx, ws);
    return LA_OK;
}
