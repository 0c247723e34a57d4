/* Linear attention backward on CUDA (TRAINING.md §1): bf16 with D = Dv in
 * {64, 128} on the tensor-core paths (variant "mma"): non-causal in
 * linblock_bwd_tc.cu, causal in linear_causal_bwd_tc.cu (chunk states
 * recomputed, a reverse sweep for the state gradient, dq / dk / dv per
 * chunk); otherwise the portable engine of linblock_bwd.cu with one block
 * over all tokens (non-causal) or chunks
 * of 64 tokens with the forward / reverse sweeps over chunks (causal, with
 * the initial-state and final-state gradients). The chunk size of the
 * params only shapes the forward's arithmetic; the gradient is that of the
 * token recurrence, which every chunk size computes. */
#include "cuda/bwd_common.cuh"
#include "cuda/linear_causal_bwd_tc.cuh"

#define LIN_BWD_CHUNK 64

/* [S (D×Dv) | z (D)] per (b,h) from the state views; a NULL part is zero */
static __global__ void lin_state_pack_kernel(int64_t total, bwd_view S, bwd_view z, int64_t H,
                                             int64_t D, int64_t Dv, float *dst) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t SE = D * Dv + D, e = i % SE, bh = i / SE, b = bh / H, h = bh % H;
    float x = 0.f;
    if (e < D * Dv) {
        if (S.data) x = bwd_ld(S, b, h, e / Dv, e % Dv);
    } else if (z.data) {
        x = bwd_ld(z, b, h, e - D * Dv, 0);
    }
    dst[i] = x;
}
static __global__ void lin_state_unpack_kernel(int64_t total, bwd_view S, bwd_view z, int64_t H,
                                               int64_t D, int64_t Dv, const float *src) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t SE = D * Dv + D, e = i % SE, bh = i / SE, b = bh / H, h = bh % H;
    if (e < D * Dv) {
        if (S.data) bwd_st(S, b, h, e / Dv, e % Dv, src[i]);
    } else if (z.data) {
        bwd_st(z, b, h, e - D * Dv, 0, src[i]);
    }
}
/* z [B,H,D] as a view indexed (b, h, d, 0) */
static bwd_view lin_zview(const la_tensor *z) { return bwd_view_rows(z); }

/* The causal tensor-core path: the states packed as the portable engine
 * packs them, lcb_backward, d_S_in / d_z_in unpacked. */
static la_status lin_causal_tc(const la_linear_params *p, const la_tensor *q, const la_tensor *k,
                               const la_tensor *v, const la_tensor *S_in, const la_tensor *z_in,
                               const la_tensor *d_out, const la_tensor *d_S_out,
                               const la_tensor *d_z_out, la_tensor *dq, la_tensor *dk,
                               la_tensor *dv, la_tensor *d_S_in, la_tensor *d_z_in,
                               const la_context *ctx, cudaStream_t s) {
    const int64_t H = q->ne[2], D = q->ne[3], Dv = v->ne[3], BH = q->ne[0] * H, SE = D * Dv + D;
    const bool want_state_in = S_in || z_in, want_dS_out = d_S_out || d_z_out,
               want_dS_in = d_S_in || d_z_in;
    bwd_ws ws;
    float *Sin = nullptr, *dSo = nullptr, *dSi = nullptr;
    if (want_state_in) ws.want(&Sin, BH, SE);
    if (want_dS_out) ws.want(&dSo, BH, SE);
    if (want_dS_in) ws.want(&dSi, BH, SE);
    /* no state tensors (the common case): no allocation, no free */
    if (want_state_in || want_dS_out || want_dS_in)
        LA_TRY(ws.alloc(s, "causal linear backward states"));
    if (want_state_in)
        BWD_LAUNCH(lin_state_pack_kernel, BH * SE, s, bwd_view4(S_in), lin_zview(z_in), H, D, Dv,
                   Sin);
    if (want_dS_out)
        BWD_LAUNCH(lin_state_pack_kernel, BH * SE, s, bwd_view4(d_S_out), lin_zview(d_z_out), H,
                   D, Dv, dSo);
    lcb_problem P;
    memset(&P, 0, sizeof P);
    P.q = q, P.k = k, P.v = v, P.d_out = d_out, P.dq = dq, P.dk = dk, P.dv = dv;
    P.S_in = Sin, P.dS_out = dSo, P.dS_in = dSi;
    P.feature = (int)p->feature, P.normalize = p->normalize;
    P.scale_q = p->scale_q, P.eps = p->eps;
    LA_TRY(lcb_backward(&P, ctx, s));
    if (want_dS_in)
        BWD_LAUNCH(lin_state_unpack_kernel, BH * SE, s, bwd_view4(d_S_in), lin_zview(d_z_in), H,
                   D, Dv, dSi);
    return LA_OK;
}

extern "C" la_status la_linear_backward_cuda(const la_linear_params *p, const la_tensor *q,
                                             const la_tensor *k, const la_tensor *v,
                                             const la_tensor *out, const la_tensor *S_in,
                                             const la_tensor *z_in, const la_tensor *d_out,
                                             const la_tensor *d_S_out, const la_tensor *d_z_out,
                                             la_tensor *dq, la_tensor *dk, la_tensor *dv,
                                             la_tensor *d_S_in, la_tensor *d_z_in,
                                             la_context *ctx) {
    (void)out;
    const int64_t B = q->ne[0], N = q->ne[1], H = q->ne[2], D = q->ne[3], Dv = v->ne[3];
    const int causal = p->causal != 0;
    const int64_t BH = B * H, SE = D * Dv + D;
    cudaStream_t s = bwd_stream(ctx);
    /* non-causal: the tensor-core path (one block, no mixing) where it applies */
    lbt_problem tp;
    memset(&tp, 0, sizeof tp);
    tp.q = q, tp.k = k, tp.v = v, tp.d_out = d_out, tp.dq = dq, tp.dk = dk, tp.dv = dv;
    tp.n[0] = tp.n[1] = 1, tp.n[2] = N;
    tp.g[0] = tp.g[1] = tp.g[2] = 1;
    tp.M = 1;
    tp.feature = (int)p->feature;
    tp.norm = p->normalize ? LA_MHLA_NORM_PER_QUERY : LA_MHLA_NORM_NONE;
    tp.scale_q = p->scale_q;
    tp.eps = p->eps;
    const bool want_state_in = causal && (S_in || z_in);
    const bool want_dS_out = causal && (d_S_out || d_z_out);
    const bool want_dS_in = causal && (d_S_in || d_z_in);
    int fast = 0;
    if (causal) {
        if (la_context_variant_is(ctx, "linear_bwd", "mma2"))
            return la_cu_variant_unsupported("linear_bwd", "mma2", "non-causal only");
        LA_TRY(bwd_variant_pick(ctx, "linear_bwd",
                                lcb_eligible(p, q, k, v, d_out, dq, dk, dv, want_dS_in), LCB_NEEDS,
                                &fast));
        if (fast)
            return lin_causal_tc(p, q, k, v, S_in, z_in, d_out, d_S_out, d_z_out, dq, dk, dv,
                                 d_S_in, d_z_in, ctx, s);
    } else {
        LA_TRY(bwd_variant_pick_lbt(ctx, "linear_bwd", lbt_eligible(&tp),
                                    "non-causal bf16 views with D = Dv in {64, 128}, unit inner "
                                    "stride and 16-byte aligned rows", &fast));
        tp.variant = fast;
        if (fast) return lbt_backward(&tp, s);
    }

    bwd_ws ws;
    float *qt, *kt, *vt, *go, *dqt, *dkt, *dvt, *Sin = nullptr, *dSo = nullptr, *dSi = nullptr;
    ws.want(&qt, BH, N, D);
    ws.want(&kt, BH, N, D);
    ws.want(&vt, BH, N, Dv);
    ws.want(&go, BH, N, Dv);
    ws.want(&dqt, BH, N, D);
    ws.want(&dkt, BH, N, D);
    ws.want(&dvt, BH, N, Dv);
    if (want_state_in) ws.want(&Sin, BH, SE);
    if (want_dS_out) ws.want(&dSo, BH, SE);
    if (want_dS_in) ws.want(&dSi, BH, SE);
    LA_TRY(ws.alloc(s, "linear backward"));

    const int f = (int)p->feature;
    LA_TRY(bwd_gather(s, bwd_view4(q), qt, B, N, H, D, f, 1.f, p->scale_q));
    LA_TRY(bwd_gather(s, bwd_view4(k), kt, B, N, H, D, f, 1.f, 1.f));
    LA_TRY(bwd_gather(s, bwd_view4(v), vt, B, N, H, Dv, BWD_NO_FEATURE, 1.f, 1.f));
    LA_TRY(bwd_gather(s, bwd_view4(d_out), go, B, N, H, Dv, BWD_NO_FEATURE, 1.f, 1.f));
    if (want_state_in)
        BWD_LAUNCH(lin_state_pack_kernel, BH * SE, s, bwd_view4(S_in), lin_zview(z_in), H, D, Dv,
                   Sin);
    if (want_dS_out)
        BWD_LAUNCH(lin_state_pack_kernel, BH * SE, s, bwd_view4(d_S_out), lin_zview(d_z_out), H,
                   D, Dv, dSo);

    lbk_problem P;
    memset(&P, 0, sizeof P);
    P.B = B;
    P.H = H;
    P.N = N;
    P.D = D;
    P.Dv = Dv;
    P.causal = causal;
    if (causal) {
        P.chunk = LIN_BWD_CHUNK;
        P.M = la_cu_cdiv(N, LIN_BWD_CHUNK);
    } else {
        P.chunk = 0;
        P.n[0] = P.n[1] = 1;
        P.n[2] = N;
        P.g[0] = P.g[1] = P.g[2] = 1;
        P.M = 1;
    }
    P.W = nullptr;
    P.norm = p->normalize ? LA_MHLA_NORM_PER_QUERY : LA_MHLA_NORM_NONE;
    P.eps = p->eps;
    P.S_in = Sin;
    P.dS_out = dSo;
    P.qt = qt;
    P.kt = kt;
    P.v = vt;
    P.dO = go;
    lbk_grads G;
    memset(&G, 0, sizeof G);
    G.dqt = dqt;
    G.dkt = dkt;
    G.dv = dvt;
    G.dS_in = dSi;
    LA_TRY(lbk_backward(&P, &G, s));

    if (dq) LA_TRY(bwd_scatter(s, bwd_view4(dq), dqt, bwd_view4(q), B, N, H, D, f, 1.f, p->scale_q));
    if (dk) LA_TRY(bwd_scatter(s, bwd_view4(dk), dkt, bwd_view4(k), B, N, H, D, f, 1.f, 1.f));
    if (dv)
        LA_TRY(bwd_scatter(s, bwd_view4(dv), dvt, bwd_view4(v), B, N, H, Dv, BWD_NO_FEATURE, 1.f,
                           1.f));
    if (want_dS_in)
        BWD_LAUNCH(lin_state_unpack_kernel, BH * SE, s, bwd_view4(d_S_in), lin_zview(d_z_in), H,
                   D, Dv, dSi);
    return LA_OK;
}
