/* Focused linear attention (SPEC §4) on the CPU, and the per-token feature
 * maps that the analysis tools (src/ops/attn_map.c) share with it. */
#ifndef LA_FOCUSED_CPU_H
#define LA_FOCUSED_CPU_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Arguments already validated by la_focused_attention (src/ops/focused.c):
 * q,k [B,N,H,D], v [B,N,H,Dv], out [B,N,H,Dv] on the host, N = map_h*map_w,
 * conv [Cc,k,k] (odd k, Cc = D for flatten, H*D for blog) or NULL,
 * conv_bias [D] or NULL, softplus_param [H*D] or NULL, focus [H] or NULL. */
la_status la_focused_cpu(const la_focused_params *p, const la_tensor *q, const la_tensor *k,
                         const la_tensor *v, const la_tensor *conv, const la_tensor *conv_bias,
                         const la_tensor *softplus_param, const la_tensor *focus, la_tensor *out,
                         la_context *ctx);

/* softplus(s) = ln(1 + e^s), written so that it neither overflows for large s
 * nor loses everything for very negative s. */
static inline double la_softplus(double s) {
    return s > 0 ? s + log1p(exp(-s)) : log1p(exp(s));
}

/* The FLatten focusing function for one token over all C channels:
 *   x' = (ReLU(x) + 1e-6) * inv_sp      (inv_sp = 1/softplus(s), NULL = 1/ln 2)
 *   f_p(x') = ||x'|| * x'^p / ||x'^p||
 * x'^p / ||x'^p|| does not change when x' is scaled, so it is formed from
 * x'/max(x') to keep x'^p finite for any p. Every x' is >= 1e-6*inv_sp > 0. */
void la_flatten_focus_row(const double *x, const double *inv_sp, int64_t C, double p,
                          double *out);

/* dst[0..C) += Σ over taps (a, b) of Wc[a·ks + b][c] · src row (y + a − ks/2,
 * x + b − ks/2) of the Hm × Wm map (row stride ld; zero padding: taps off the
 * map are skipped), taps in raster order. Flatten's o += DWC(v) row and the
 * blog variant's K̂ = DWConv(φ(K)) row (la_dwconv_row). */
static inline void la_dwconv_acc(float *restrict dst, const float *restrict src, int64_t ld,
                                 const float *restrict Wc, int64_t y, int64_t x, int64_t Hm,
                                 int64_t Wm, int64_t ks, int64_t C) {
    const int64_t r = ks / 2;
    for (int64_t a = 0; a < ks; a++) {
        const int64_t yy = y + a - r;
        if (yy < 0 || yy >= Hm) continue;
        for (int64_t bb = 0; bb < ks; bb++) {
            const int64_t xx = x + bb - r;
            if (xx < 0 || xx >= Wm) continue;
            const float *restrict s = src + (yy * Wm + xx) * ld, *restrict w = Wc + (a * ks + bb) * C;
            for (int64_t c = 0; c < C; c++) dst[c] += w[c] * s[c];
        }
    }
}

/* the same into a zeroed row of C channels (source row stride C): the blog
 * variant's K̂ row, forward and backward */
static inline void la_dwconv_row(float *dst, const float *src, const float *Wc, int64_t y,
                                 int64_t x, int64_t Hm, int64_t Wm, int64_t ks, int64_t C) {
    for (int64_t c = 0; c < C; c++) dst[c] = 0.f;
    la_dwconv_acc(dst, src, C, Wc, y, x, Hm, Wm, ks, C);
}

/* The same in float (the CPU forward's and backward's rows): isp = 1/softplus
 * per channel, ip in 1..8 an integer power p (by multiplication), else 0
 * (powf); x and y do not overlap. */
void la_flatten_focus_row_f32(const float *x, const float *isp, int64_t C, int ip, float p,
                              float *y);

#ifdef __cplusplus
}
#endif
#endif
