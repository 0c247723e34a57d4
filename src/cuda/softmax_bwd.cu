/* Softmax attention backward on CUDA (TRAINING.md §1), the portable engine:
 * P recomputed from the forward's lse, D_t = rowsum(dO ∘ O), then
 *   dq_t = scale Σ_s P_ts (dO_t·v_s − D_t) k_s           (one thread per query row)
 *   dv_s = Σ_t P_ts dO_t,  dk_s = scale Σ_t dS_ts q_t    (one thread per key row,
 *          summing the query heads of its GQA group in order, then the queries)
 * Causal is bottom-right aligned: query t sees keys s <= t + (Nk − Nq). A row
 * with lse = −inf (no visible key) contributes nothing. Deterministic: every
 * sum runs in a fixed order and each thread writes only its own row. */
#include <math.h>
#include <stdio.h>

#include "cuda/bwd_common.cuh"

namespace {

struct sm_dev {
    int64_t B, H, Hk, Nq, Nk, D, Dv;
    int causal;
    float scale;
    const float *q, *k, *v, *dO, *lse, *Dd; /* [B,H,Nq,D] [B,Hk,Nk,D] [B,Hk,Nk,Dv] [B,H,Nq,Dv] [B*H*Nq] */
};

/* D_t = Σ dO·O; lse gathered as [B,H,Nq] */
__global__ void sm_rowstat_kernel(int64_t total, sm_dev P, const float *O, bwd_view lse_v,
                                  float *lse, float *Dd) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t t = i % P.Nq, bh = i / P.Nq, b = bh / P.H, h = bh % P.H;
    const float *g = P.dO + i * P.Dv, *o = O + i * P.Dv;
    float acc = 0.f;
    for (int64_t c = 0; c < P.Dv; c++) acc += g[c] * o[c];
    Dd[i] = acc;
    lse[i] = bwd_ld(lse_v, b, t, h, 0);
}

BWD_DEV inline float sm_dot(const float *a, const float *b, int64_t n) {
    float acc = 0.f;
    for (int64_t i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

__global__ void sm_dq_kernel(int64_t total, sm_dev P, float *dq) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t t = i % P.Nq, bh = i / P.Nq, b = bh / P.H, h = bh % P.H;
    const int64_t hk = h / (P.H / P.Hk);
    const float *q = P.q + i * P.D, *g = P.dO + i * P.Dv;
    const float *K = P.k + (b * P.Hk + hk) * P.Nk * P.D, *V = P.v + (b * P.Hk + hk) * P.Nk * P.Dv;
    float *out = dq + i * P.D;
    for (int64_t d = 0; d < P.D; d++) out[d] = 0.f;
    const float l = P.lse[i], Dt = P.Dd[i];
    if (isinf(l) && l < 0) return;
    int64_t s1 = P.Nk;
    if (P.causal) {
        const int64_t last = t + (P.Nk - P.Nq);
        s1 = last + 1 < P.Nk ? last + 1 : P.Nk;
    }
    for (int64_t s = 0; s < s1; s++) {
        const float *ks = K + s * P.D;
        const float p = expf(P.scale * sm_dot(q, ks, P.D) - l);
        const float ds = p * (sm_dot(g, V + s * P.Dv, P.Dv) - Dt) * P.scale;
        for (int64_t d = 0; d < P.D; d++) out[d] += ds * ks[d];
    }
}

__global__ void sm_dkv_kernel(int64_t total, sm_dev P, float *dk, float *dv) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t s = i % P.Nk, bhk = i / P.Nk, b = bhk / P.Hk, hk = bhk % P.Hk;
    const int64_t rep = P.H / P.Hk;
    const float *ks = P.k + i * P.D, *vs = P.v + i * P.Dv;
    float *gk = dk + i * P.D, *gv = dv + i * P.Dv;
    for (int64_t d = 0; d < P.D; d++) gk[d] = 0.f;
    for (int64_t c = 0; c < P.Dv; c++) gv[c] = 0.f;
    int64_t t0 = 0;
    if (P.causal) {
        t0 = s - (P.Nk - P.Nq);
        if (t0 < 0) t0 = 0;
    }
    for (int64_t h = hk * rep; h < (hk + 1) * rep; h++) {
        const int64_t bh = b * P.H + h;
        for (int64_t t = t0; t < P.Nq; t++) {
            const int64_t r = bh * P.Nq + t;
            const float l = P.lse[r];
            if (isinf(l) && l < 0) continue;
            const float *q = P.q + r * P.D, *g = P.dO + r * P.Dv;
            const float p = expf(P.scale * sm_dot(q, ks, P.D) - l);
            const float ds = p * (sm_dot(g, vs, P.Dv) - P.Dd[r]) * P.scale;
            for (int64_t c = 0; c < P.Dv; c++) gv[c] += p * g[c];
            for (int64_t d = 0; d < P.D; d++) gk[d] += ds * q[d];
        }
    }
}

} // namespace

extern "C" la_status la_softmax_backward_cuda(const la_softmax_params *p, const la_tensor *q,
                                              const la_tensor *k, const la_tensor *v,
                                              const la_tensor *out, const la_tensor *lse,
                                              const la_tensor *d_out, la_tensor *dq,
                                              la_tensor *dk, la_tensor *dv, la_context *ctx) {
    if (!out || !lse)
        return la_err(LA_ERR_ARG, "softmax backward: out and lse of the forward are required");
    if (q->ne[2] < 1 || k->ne[2] < 1 || q->ne[2] % k->ne[2])
        return la_err(LA_ERR_SHAPE, "k: %lld heads do not divide q's %lld heads",
                      (long long)k->ne[2], (long long)q->ne[2]);
    /* kernel choice: the tensor-core path where eligible, else portable */
    int fast;
    LA_TRY(bwd_variant_pick(ctx, "softmax_bwd", la_softmax_bwd_tc_eligible(q, k, v, d_out, dq, dk, dv),
                            "bf16 or f16 views (one dtype) with D = Dv in {32, 64, 128}, unit inner "
                            "stride and 16-byte aligned rows",
                            &fast));
    if (fast) return la_softmax_bwd_tc(p, q, k, v, out, lse, d_out, dq, dk, dv, ctx);
    sm_dev P;
    P.B = q->ne[0];
    P.Nq = q->ne[1];
    P.H = q->ne[2];
    P.D = q->ne[3];
    P.Nk = k->ne[1];
    P.Hk = k->ne[2];
    P.Dv = v->ne[3];
    P.causal = p->causal != 0;
    P.scale = p->scale != 0.f ? p->scale : (float)(1.0 / sqrt((double)P.D));
    if (P.Hk < 1 || P.H % P.Hk)
        return la_err(LA_ERR_SHAPE, "k: %lld heads do not divide q's %lld heads",
                      (long long)P.Hk, (long long)P.H);
    const int64_t BH = P.B * P.H, BHk = P.B * P.Hk;
    cudaStream_t s = bwd_stream(ctx);
    bwd_ws ws;
    float *q32, *k32, *v32, *o32, *g32, *l32, *D32, *dq32, *dk32, *dv32;
    ws.want(&q32, BH, P.Nq, P.D);
    ws.want(&k32, BHk, P.Nk, P.D);
    ws.want(&v32, BHk, P.Nk, P.Dv);
    ws.want(&o32, BH, P.Nq, P.Dv);
    ws.want(&g32, BH, P.Nq, P.Dv);
    ws.want(&l32, BH, P.Nq);
    ws.want(&D32, BH, P.Nq);
    ws.want(&dq32, BH, P.Nq, P.D);
    ws.want(&dk32, BHk, P.Nk, P.D);
    ws.want(&dv32, BHk, P.Nk, P.Dv);
    LA_TRY(ws.alloc(s, "softmax backward"));
    LA_TRY(bwd_gather(s, bwd_view4(q), q32, P.B, P.Nq, P.H, P.D, BWD_NO_FEATURE, 1.f, 1.f));
    LA_TRY(bwd_gather(s, bwd_view4(k), k32, P.B, P.Nk, P.Hk, P.D, BWD_NO_FEATURE, 1.f, 1.f));
    LA_TRY(bwd_gather(s, bwd_view4(v), v32, P.B, P.Nk, P.Hk, P.Dv, BWD_NO_FEATURE, 1.f, 1.f));
    LA_TRY(bwd_gather(s, bwd_view4(out), o32, P.B, P.Nq, P.H, P.Dv, BWD_NO_FEATURE, 1.f, 1.f));
    LA_TRY(bwd_gather(s, bwd_view4(d_out), g32, P.B, P.Nq, P.H, P.Dv, BWD_NO_FEATURE, 1.f, 1.f));
    P.q = q32;
    P.k = k32;
    P.v = v32;
    P.dO = g32;
    P.lse = l32;
    P.Dd = D32;
    const bwd_view lv = bwd_view_rows(lse); /* lse [B,Nq,H] read as (b, n, h, 0) */
    BWD_LAUNCH(sm_rowstat_kernel, BH * P.Nq, s, P, o32, lv, l32, D32);
    if (dq) {
        BWD_LAUNCH(sm_dq_kernel, BH * P.Nq, s, P, dq32);
        LA_TRY(bwd_scatter(s, bwd_view4(dq), dq32, bwd_view4(q), P.B, P.Nq, P.H, P.D,
                           BWD_NO_FEATURE, 1.f, 1.f));
    }
    if (dk || dv) {
        BWD_LAUNCH(sm_dkv_kernel, BHk * P.Nk, s, P, dk32, dv32);
        if (dk)
            LA_TRY(bwd_scatter(s, bwd_view4(dk), dk32, bwd_view4(k), P.B, P.Nk, P.Hk, P.D,
                               BWD_NO_FEATURE, 1.f, 1.f));
        if (dv)
            LA_TRY(bwd_scatter(s, bwd_view4(dv), dv32, bwd_view4(v), P.B, P.Nk, P.Hk, P.Dv,
                               BWD_NO_FEATURE, 1.f, 1.f));
    }
    return LA_OK;
}
