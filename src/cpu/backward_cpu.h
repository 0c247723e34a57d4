/* CPU backward passes (TRAINING.md §1). Each is called by its public entry
 * point in src/ops/<op>_backward.c after every view was validated; NULL
 * gradients are skipped, the others are written in full. */
#ifndef LA_BACKWARD_CPU_H
#define LA_BACKWARD_CPU_H

#include "core/internal.h"
#include "cpu/mhla_cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dφ/dx of a feature map at x (SPEC §2; relu family: 0 at x <= 0). */
static inline float la_feature_deriv(la_feature f, float x) {
    switch (f) {
    case LA_FEATURE_IDENTITY: return 1.f;
    case LA_FEATURE_RELU:
    case LA_FEATURE_RELU_EPS:
    case LA_FEATURE_RELU1: return x > 0.f ? 1.f : 0.f;
    case LA_FEATURE_ELU1: return x >= 0.f ? 1.f : expf(x);
    }
    return 1.f;
}

/* y[i] = scale·φ(x[i]) for n values (the map chosen outside the loop, so
 * that each loop vectorizes; y may be x). */
static inline void la_feature_map_n(la_feature f, const float *x, float *y, int64_t n, float scale) {
    switch (f) {
    case LA_FEATURE_IDENTITY:
        for (int64_t i = 0; i < n; i++) y[i] = scale * x[i];
        break;
    case LA_FEATURE_RELU:
        for (int64_t i = 0; i < n; i++) y[i] = scale * (x[i] > 0.f ? x[i] : 0.f);
        break;
    case LA_FEATURE_RELU_EPS:
        for (int64_t i = 0; i < n; i++) y[i] = scale * ((x[i] > 0.f ? x[i] : 0.f) + 1e-6f);
        break;
    case LA_FEATURE_RELU1:
        for (int64_t i = 0; i < n; i++) y[i] = scale * ((x[i] > 0.f ? x[i] : 0.f) + 1.f);
        break;
    case LA_FEATURE_ELU1:
        for (int64_t i = 0; i < n; i++) y[i] = scale * la_feature_apply(LA_FEATURE_ELU1, x[i]);
        break;
    }
}

/* g[i] *= scale·φ'(x[i]) for n values. */
static inline void la_feature_grad_n(la_feature f, const float *x, float *g, int64_t n, float scale) {
    switch (f) {
    case LA_FEATURE_IDENTITY:
        for (int64_t i = 0; i < n; i++) g[i] *= scale;
        break;
    case LA_FEATURE_RELU:
    case LA_FEATURE_RELU_EPS:
    case LA_FEATURE_RELU1:
        for (int64_t i = 0; i < n; i++) g[i] = x[i] > 0.f ? g[i] * scale : 0.f;
        break;
    case LA_FEATURE_ELU1:
        for (int64_t i = 0; i < n; i++) g[i] *= scale * la_feature_deriv(LA_FEATURE_ELU1, x[i]);
        break;
    }
}

/* Carves n consecutive blocks of len floats from the scratch w into *dst[0..n)
 * and returns the first float after them (the backward passes lay their
 * per-row blocks out this way). */
static inline float *la_carve_blocks(float *w, int64_t len, float **const *dst, int n) {
    for (int i = 0; i < n; i++) *dst[i] = w, w += len;
    return w;
}

/* q [B,Nq,H,D], k [B,Nk,Hk,D], v [B,Nk,Hk,Dv], out/d_out [B,Nq,H,Dv],
 * lse [B,Nq,H]; scale resolved. */
la_status la_softmax_backward_cpu(int causal, float scale, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *v, const la_tensor *out,
                                  const la_tensor *lse, const la_tensor *d_out, la_tensor *dq,
                                  la_tensor *dk, la_tensor *dv, la_context *ctx);

/* q,k [B,N,H,D], v/d_out [B,N,H,Dv], out (the forward's, optional); causal: S_in/d_S_out/d_S_in
 * [B,H,D,Dv], z_in/d_z_out/d_z_in [B,H,D] (each may be NULL). */
la_status la_linear_backward_cpu(const la_linear_params *p, const la_tensor *q,
                                 const la_tensor *k, const la_tensor *v, const la_tensor *out,
                                 const la_tensor *S_in,
                                 const la_tensor *z_in, const la_tensor *d_out,
                                 const la_tensor *d_S_out, const la_tensor *d_z_out,
                                 la_tensor *dq, la_tensor *dk, la_tensor *dv, la_tensor *d_S_in,
                                 la_tensor *d_z_in, la_context *ctx);

/* MHLA non-causal: views validated, geom from the resolved grid; out (the
 * forward's, optional: read instead of formed); mixing
 * [M,M] or [H,M,M], d_mixing (f32, mixing's shape) or NULL. */
la_status la_mhla_backward_cpu(const la_mhla_params *p, const la_mhla_geom *geom,
                               const la_tensor *q, const la_tensor *k, const la_tensor *v,
                               const la_tensor *mixing, const la_tensor *out,
                               const la_tensor *d_out, la_tensor *dq, la_tensor *dk,
                               la_tensor *dv, la_tensor *d_mixing, la_context *ctx);

/* Causal MHLA: views validated, p->scale_q resolved, mixing at least
 * ceil(N/chunk) square; d_mixing (f32, mixing's shape) or NULL. */
la_status la_mhla_causal_backward_cpu(const la_mhla_causal_params *p, const la_tensor *q,
                                      const la_tensor *k, const la_tensor *v,
                                      const la_tensor *mixing, const la_tensor *d_out,
                                      la_tensor *dq, la_tensor *dk, la_tensor *dv,
                                      la_tensor *d_mixing, la_context *ctx);

/* Focused attention: views validated; conv_bias / softplus_param given only
 * for flatten, focus only for blog (the others NULL). */
la_status la_focused_backward_cpu(const la_focused_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *v, const la_tensor *conv,
                                  const la_tensor *conv_bias, const la_tensor *softplus_param,
                                  const la_tensor *focus, const la_tensor *d_out, la_tensor *dq,
                                  la_tensor *dk, la_tensor *dv, la_tensor *d_conv,
                                  la_tensor *d_conv_bias, la_tensor *d_softplus_param,
                                  la_tensor *d_focus, la_context *ctx);

/* Sparse attention: views validated; scale resolved. */
la_status la_sparse_attention_backward_cpu(const la_tensor *q, const la_tensor *kv,
                                           const la_tensor *idx, const la_tensor *out,
                                           const la_tensor *lse, const la_tensor *d_out,
                                           int64_t dv, float scale, la_tensor *dq, la_tensor *dkv,
                                           la_context *ctx);

#ifdef __cplusplus
}
#endif
#endif
