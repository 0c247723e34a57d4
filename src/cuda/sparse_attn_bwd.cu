/* Sparse MLA attention backward on CUDA (TRAINING.md §1), the portable,
 * deterministic engine. With P recomputed from the forward's lse and
 * D = rowsum(dO ∘ O):
 *   dq[t,h]  = scale Σ_j dS_j kv[s_j],      dS_j = P_j (dO[t,h]·kv[s_j][:dv] − D[t,h])
 *   dkv[s]   = Σ over the (t, slot) pairs that picked s and the heads of its
 *              kv group: scale dS q[t,h] + P dO[t,h] (first dv columns)
 * dkv needs the transposed index: the (t, slot) entries of each key are
 * counted (integer atomics, exact), laid out by a prefix sum, and each key's
 * list sorted by entry number, so every key sums its contributions in the
 * same order on every call (no floating-point atomics). Indices < 0 or >= L
 * are skipped; a row with lse = −inf contributes nothing. One thread per
 * (t, h, slot) forms P and dS (kept for a chunk of rows, at most 2^27
 * floats), then one thread per element of dq and of dkv sums them. */
#include <math.h>

#include "cuda/sparse_attn_bwd.cuh"

namespace {

BWD_DEV inline float sp_dot(const float *a, const float *b, int64_t n) {
    float acc = 0.f;
    for (int64_t i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}
BWD_DEV inline int64_t sp_first_head(int64_t g, int64_t Hq, int64_t Hkv) {
    return (g * Hq + Hkv - 1) / Hkv;
}

/* D and lse per (t,h) */
__global__ void sp_rowstat_kernel(int64_t total, sp_dev P, const float *O, bwd_view lse_v,
                                  float *lse, float *Dd) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t h = i % P.Hq, t = i / P.Hq;
    const float *g = P.dO + (h * P.T + t) * P.dv, *o = O + (h * P.T + t) * P.dv;
    Dd[i] = sp_dot(g, o, P.dv);
    lse[i] = bwd_ld(lse_v, 0, t, h, 0);
}

/* P and dS of every (t, h, slot) of the rows [t0, t0 + Tc): one thread each,
 * PS[((t − t0)·Hq + h)·K + j] = {P, scale·dS} (0 for skipped slots) */
__global__ void sp_pds_kernel(int64_t total, sp_dev P, int64_t t0, float *PS) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t j = i % P.K, h = (i / P.K) % P.Hq, t = t0 + i / (P.K * P.Hq);
    const int s = P.idx[t * P.K + j];
    const float l = P.lse[t * P.Hq + h];
    float p = 0.f, ds = 0.f;
    if (s >= 0 && !(isinf(l) && l < 0)) {
        const int64_t g = h * P.Hkv / P.Hq;
        const float *kvs = P.kv + (g * P.L + s) * P.Dqk;
        const float *q = P.q + (h * P.T + t) * P.Dqk, *gr = P.dO + (h * P.T + t) * P.dv;
        p = expf(P.scale * sp_dot(q, kvs, P.Dqk) - l);
        ds = p * (sp_dot(gr, kvs, P.dv) - P.Dd[t * P.Hq + h]) * P.scale;
    }
    PS[2 * i] = p;
    PS[2 * i + 1] = ds;
}
/* dq[h][t][d] = Σ_j scale·dS_j kv[s_j][d], one thread per element */
__global__ void sp_dq_kernel(int64_t total, sp_dev P, int64_t t0, const float *PS, float *dq) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t d = i % P.Dqk, h = (i / P.Dqk) % P.Hq, tl = i / (P.Dqk * P.Hq), t = t0 + tl;
    const int64_t g = h * P.Hkv / P.Hq;
    const float *ps = PS + (tl * P.Hq + h) * P.K * 2;
    const float *kv = P.kv + g * P.L * P.Dqk + d;
    float acc = 0.f;
    for (int64_t j = 0; j < P.K; j++) {
        const int s = P.idx[t * P.K + j];
        if (s >= 0) acc += ps[2 * j + 1] * kv[(int64_t)s * P.Dqk];
    }
    dq[(h * P.T + t) * P.Dqk + d] = acc;
}

/* dkv[g][s][d] (+)= Σ over the chunk's entries of key s (in entry order) and
 * the heads of kv group g: scale·dS q[t,h][d] + P dO[t,h][d] (d < dv); one
 * thread per element */
__global__ void sp_dkv_kernel(int64_t total, sp_dev P, int64_t t0, int first, const int *off,
                              const int *ent, const float *PS, float *dkv) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t d = i % P.Dqk, s = (i / P.Dqk) % P.L, g = i / (P.Dqk * P.L);
    const int64_t h0 = sp_first_head(g, P.Hq, P.Hkv), h1 = sp_first_head(g + 1, P.Hq, P.Hkv);
    float acc = first ? 0.f : dkv[i];
    for (int e = off[s]; e < off[s + 1]; e++) {
        const int64_t tl = ent[e] / P.K, j = ent[e] % P.K, t = t0 + tl;
        for (int64_t h = h0; h < h1; h++) {
            const float *ps = PS + ((tl * P.Hq + h) * P.K + j) * 2;
            acc += ps[1] * P.q[(h * P.T + t) * P.Dqk + d];
            if (d < P.dv) acc += ps[0] * P.dO[(h * P.T + t) * P.dv + d];
        }
    }
    dkv[i] = acc;
}

} // namespace

extern "C" la_status la_sparse_attention_backward_cuda(const la_sparse_attn_params *p,
                                                       const la_tensor *q, const la_tensor *kv,
                                                       const la_tensor *idx,
                                                       const la_tensor *out,
                                                       const la_tensor *lse,
                                                       const la_tensor *d_out, la_tensor *dq,
                                                       la_tensor *dkv, la_context *ctx) {
    /* variants: "mma" (the tensor-core path, sparse_attn_bwd_tc.cu; the
     * default where it takes the views), "mma_atomic" (the same with dkv
     * summed by fp32 atomics: opt-in, not deterministic), "mma_rowchunk"
     * (one token per workspace chunk: bit-identical to mma, for tests),
     * "portable", and "portable_rowchunk": the portable engine one query row
     * per chunk (the same sums in the same order: tests check it bit for bit) */
    const char *var = la_context_variant(ctx, "sparse_attn_bwd");
    const int rowchunk = var && !strcmp(var, "portable_rowchunk");
    const int mode = !var ? LA_SPARSE_BWD_TC_DEFAULT
                     : !strcmp(var, "mma_atomic") ? LA_SPARSE_BWD_TC_ATOMIC
                     : !strcmp(var, "mma_rowchunk") ? LA_SPARSE_BWD_TC_ROWCHUNK
                                                    : LA_SPARSE_BWD_TC_DEFAULT;
    const int forced_mma = var && (!strcmp(var, "mma") || mode != LA_SPARSE_BWD_TC_DEFAULT);
    if (var && !rowchunk && !forced_mma && strcmp(var, "portable"))
        return la_cu_unknown_variant("sparse_attn_bwd", var,
                                     "mma, mma_atomic, mma_rowchunk, portable, portable_rowchunk");
    if (!out || !lse)
        return la_err(LA_ERR_ARG, "sparse attention backward: out and lse of the forward are required");
    static const char need[] = "bf16 q, kv, d_out and gradients, Dqk 576, dv 512, one kv head, "
                               "unit inner stride and 16-byte aligned rows, 227 KB of shared memory per CTA";
    const int eligible = la_sparse_bwd_tc_eligible(p, q, kv, d_out, dq, dkv);
    if (forced_mma && !eligible) return la_cu_variant_unsupported("sparse_attn_bwd", var, need);
    if (eligible && (!var || forced_mma)) {
        la_cu_report(ctx, "sparse_attn_bwd", var ? var : "mma", "fast path");
        return la_sparse_bwd_tc(p, q, kv, idx, out, lse, d_out, dq, dkv, mode, ctx);
    }
    la_cu_report(ctx, "sparse_attn_bwd", rowchunk ? "portable_rowchunk" : "portable", "%s",
                 var ? "forced" : need);
    sp_dev P;
    P.T = q->ne[0];
    P.Hq = q->ne[1];
    P.Dqk = q->ne[2];
    P.L = kv->ne[0];
    P.Hkv = kv->ndim == 3 ? kv->ne[1] : 1;
    P.dv = p->dv;
    P.K = idx->ne[1];
    P.scale = p->scale != 0.f ? p->scale : (float)(1.0 / sqrt((double)P.Dqk));
    if (P.dv < 1 || P.dv > P.Dqk)
        return la_err(LA_ERR_ARG, "dv: %lld, expected 1..Dqk = %lld", (long long)P.dv,
                      (long long)P.Dqk);
    if (P.T * P.K > INT32_MAX || P.L >= INT32_MAX)
        return la_err(LA_ERR_OVERFLOW, "sparse attention backward: T*k = %lld entries (int32 index)",
                      (long long)(P.T * P.K));
    cudaStream_t s = bwd_stream(ctx);
    bwd_ws ws;
    float *q32, *kv32, *o32, *g32, *l32, *D32, *dq32, *dkv32;
    float *ix, *cnt, *off, *ent; /* int32 buffers carved as floats (same size) */
    ws.want(&q32, P.Hq, P.T, P.Dqk);
    ws.want(&kv32, P.Hkv, P.L, P.Dqk);
    ws.want(&o32, P.Hq, P.T, P.dv);
    ws.want(&g32, P.Hq, P.T, P.dv);
    ws.want(&l32, P.T, P.Hq);
    ws.want(&D32, P.T, P.Hq);
    ws.want(&ix, P.T, P.K);
    const int64_t per_row = P.Hq * P.K * 2, cap = (int64_t)1 << 27;
    const int64_t Tc = (rowchunk || per_row >= cap) ? 1 : (cap / per_row < P.T ? cap / per_row : P.T);
    float *PS;
    ws.want(&PS, Tc, per_row);
    if (dq) ws.want(&dq32, P.Hq, P.T, P.Dqk);
    if (dkv) {
        ws.want(&dkv32, P.Hkv, P.L, P.Dqk);
        ws.want(&cnt, sp_cnt_size(P.L));
        ws.want(&off, P.L + 1);
        ws.want(&ent, Tc, P.K);
    }
    LA_TRY(ws.alloc(s, "sparse attention backward"));
    const bwd_view qv = bwd_view3(q), kvv = kv->ndim == 3 ? bwd_view3(kv) : bwd_view2(kv);
    /* q [T,Hq,Dqk] viewed as (0, t, h, d): gathered to [Hq,T,Dqk] */
    LA_TRY(bwd_gather(s, qv, q32, 1, P.T, P.Hq, P.Dqk, BWD_NO_FEATURE, 1.f, 1.f));
    LA_TRY(bwd_gather(s, kvv, kv32, 1, P.L, P.Hkv, P.Dqk, BWD_NO_FEATURE, 1.f, 1.f));
    LA_TRY(bwd_gather(s, bwd_view3(out), o32, 1, P.T, P.Hq, P.dv, BWD_NO_FEATURE, 1.f, 1.f));
    LA_TRY(bwd_gather(s, bwd_view3(d_out), g32, 1, P.T, P.Hq, P.dv, BWD_NO_FEATURE, 1.f, 1.f));
    P.q = q32;
    P.kv = kv32;
    P.dO = g32;
    P.lse = l32;
    P.Dd = D32;
    P.idx = (const int *)ix;
    const bwd_view lv = bwd_view_rows(lse); /* lse [T,Hq] as (0, t, h, 0) */
    BWD_LAUNCH(sp_prep_kernel, P.T * P.K, s, P, (const int *)idx->data, idx->nb[0], idx->nb[1],
               (int *)ix);
    BWD_LAUNCH(sp_rowstat_kernel, P.T * P.Hq, s, P, o32, lv, l32, D32);
    /* rows in chunks of Tc, so that the per-slot P / dS stay within PS_CAP floats */
    for (int64_t t0 = 0; t0 < P.T; t0 += Tc) {
        const int64_t tc = P.T - t0 < Tc ? P.T - t0 : Tc;
        BWD_LAUNCH(sp_pds_kernel, tc * P.Hq * P.K, s, P, t0, PS);
        if (dq) BWD_LAUNCH(sp_dq_kernel, tc * P.Hq * P.Dqk, s, P, t0, PS, dq32);
        if (dkv) {
            int *c = (int *)cnt, *o = (int *)off, *e = (int *)ent;
            LA_TRY(sp_transpose_index(s, P, t0 * P.K, tc * P.K, c, o, e));
            BWD_LAUNCH(sp_dkv_kernel, P.Hkv * P.L * P.Dqk, s, P, t0, t0 == 0 ? 1 : 0, o, e, PS, dkv32);
        }
    }
    if (dq)
        LA_TRY(bwd_scatter(s, bwd_view3(dq), dq32, qv, 1, P.T, P.Hq, P.Dqk, BWD_NO_FEATURE, 1.f,
                           1.f));
    if (dkv) {
        const bwd_view dv_ = dkv->ndim == 3 ? bwd_view3(dkv) : bwd_view2(dkv);
        LA_TRY(bwd_scatter(s, dv_, dkv32, kvv, 1, P.L, P.Hkv, P.Dqk, BWD_NO_FEATURE, 1.f, 1.f));
    }
    return LA_OK;
}
