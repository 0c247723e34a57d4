/* MHLA backward on CUDA (TRAINING.md §1), non-causal (1-/2-/3-D grids, per-head
 * or shared W, every normalize mode) and causal (chunkwise; d_mixing is zero
 * above the diagonal and past the last chunk): the portable engine of
 * linblock_bwd.cu with the mixing given; non-causal bf16 with D = Dv in
 * {64, 128} and normalize none / per_query on the tensor-core path
 * (linblock_bwd_tc.cu, variant "mma"); causal bf16 with D = Dv in {64, 128},
 * chunk 64 and normalize none / per_query on the causal linear tensor-core
 * kernels with the mixing (mhla_causal_bwd_tc.cu, variant "mma"). */
#include <math.h>

#include "cuda/bwd_common.cuh"
#include "cuda/mhla_causal_bwd_tc.cuh"

namespace {

struct mhla_io {
    int64_t B, N, H, D, Dv;
    int f;
    float scale_q;
    int64_t WM, Hw; /* mixing extent and heads (1 = shared) */
};

la_status mhla_run(const mhla_io &io, lbk_problem &P, const la_tensor *q, const la_tensor *k,
                   const la_tensor *v, const la_tensor *mixing, const la_tensor *d_out,
                   la_tensor *dq, la_tensor *dk, la_tensor *dv, la_tensor *d_mixing,
                   cudaStream_t s, const char *what) {
    const int64_t B = io.B, N = io.N, H = io.H, D = io.D, Dv = io.Dv, BH = B * H;
    bwd_ws ws;
    float *qt, *kt, *vt, *go, *dqt, *dkt, *dvt, *W, *dW = nullptr;
    ws.want(&qt, BH, N, D);
    ws.want(&kt, BH, N, D);
    ws.want(&vt, BH, N, Dv);
    ws.want(&go, BH, N, Dv);
    ws.want(&dqt, BH, N, D);
    ws.want(&dkt, BH, N, D);
    ws.want(&dvt, BH, N, Dv);
    ws.want(&W, io.Hw, io.WM, io.WM);
    if (d_mixing) ws.want(&dW, io.Hw, io.WM, io.WM);
    LA_TRY(ws.alloc(s, what));

    LA_TRY(bwd_gather(s, bwd_view4(q), qt, B, N, H, D, io.f, 1.f, io.scale_q));
    LA_TRY(bwd_gather(s, bwd_view4(k), kt, B, N, H, D, io.f, 1.f, 1.f));
    LA_TRY(bwd_gather(s, bwd_view4(v), vt, B, N, H, Dv, BWD_NO_FEATURE, 1.f, 1.f));
    LA_TRY(bwd_gather(s, bwd_view4(d_out), go, B, N, H, Dv, BWD_NO_FEATURE, 1.f, 1.f));
    LA_TRY(bwd_pack(s, mixing, W));

    P.B = B;
    P.H = H;
    P.N = N;
    P.D = D;
    P.Dv = Dv;
    P.W = W;
    P.W_hs = io.Hw == 1 ? 0 : io.WM * io.WM;
    P.W_ld = io.WM;
    P.W_M = io.WM;
    P.qt = qt;
    P.kt = kt;
    P.v = vt;
    P.dO = go;
    lbk_grads G;
    memset(&G, 0, sizeof G);
    G.dqt = dqt;
    G.dkt = dkt;
    G.dv = dvt;
    G.dW = dW;
    G.dW_heads = io.Hw;
    LA_TRY(lbk_backward(&P, &G, s));

    if (dq) LA_TRY(bwd_scatter(s, bwd_view4(dq), dqt, bwd_view4(q), B, N, H, D, io.f, 1.f, io.scale_q));
    if (dk) LA_TRY(bwd_scatter(s, bwd_view4(dk), dkt, bwd_view4(k), B, N, H, D, io.f, 1.f, 1.f));
    if (dv)
        LA_TRY(bwd_scatter(s, bwd_view4(dv), dvt, bwd_view4(v), B, N, H, Dv, BWD_NO_FEATURE, 1.f,
                           1.f));
    if (d_mixing) LA_TRY(bwd_unpack(s, d_mixing, dW));
    return LA_OK;
}

mhla_io mhla_io_of(const la_tensor *q, const la_tensor *v, const la_tensor *mixing, int f,
                   float scale_q) {
    mhla_io io;
    io.B = q->ne[0];
    io.N = q->ne[1];
    io.H = q->ne[2];
    io.D = q->ne[3];
    io.Dv = v->ne[3];
    io.f = f;
    io.scale_q = scale_q;
    io.WM = mixing->ne[mixing->ndim - 1];
    io.Hw = mixing->ndim == 3 ? mixing->ne[0] : 1;
    return io;
}

} // namespace

extern "C" la_status la_mhla_backward_cuda(const la_mhla_params *p, const la_tensor *q,
                                           const la_tensor *k, const la_tensor *v,
                                           const la_tensor *mixing, const la_tensor *out,
                                           const la_tensor *d_out, la_tensor *dq, la_tensor *dk,
                                           la_tensor *dv, la_tensor *d_mixing, la_context *ctx) {
    (void)out;
    const mhla_io io = mhla_io_of(q, v, mixing, (int)p->feature, p->scale_q);
    lbk_problem P;
    memset(&P, 0, sizeof P);
    const int nd = p->grid_ndim, off = 3 - nd;
    P.M = 1;
    int equal = 1;
    for (int a = 0; a < 3; a++) {
        P.n[a] = a < off ? 1 : p->grid[a - off];
        P.g[a] = a < off ? 1 : p->blocks[a - off];
        if (nd == 1 && a == 2 && P.n[a] == 0) P.n[a] = io.N;
        if (P.g[a] < 1 || P.g[a] > P.n[a])
            return la_err(LA_ERR_ARG, "mhla backward: blocks[%d] = %lld for a grid extent %lld",
                          a - off, (long long)P.g[a], (long long)P.n[a]);
        if (P.n[a] % P.g[a]) equal = 0;
        P.M *= P.g[a];
    }
    if (P.n[0] * P.n[1] * P.n[2] != io.N)
        return la_err(LA_ERR_SHAPE, "mhla backward: grid has %lld tokens, q has N = %lld",
                      (long long)(P.n[0] * P.n[1] * P.n[2]), (long long)io.N);
    if (io.WM != P.M)
        return la_err(LA_ERR_SHAPE, "mixing: extent %lld, expected M = %lld blocks",
                      (long long)io.WM, (long long)P.M);
    if (p->normalize == LA_MHLA_NORM_RELEASED_VISION && !equal)
        return la_err(LA_ERR_ARG, "mhla backward: normalize released_vision needs equal blocks");
    lbt_problem tp;
    memset(&tp, 0, sizeof tp);
    tp.q = q, tp.k = k, tp.v = v, tp.d_out = d_out, tp.dq = dq, tp.dk = dk, tp.dv = dv;
    tp.mixing = mixing, tp.d_mixing = d_mixing;
    for (int a = 0; a < 3; a++) tp.n[a] = P.n[a], tp.g[a] = P.g[a];
    tp.M = P.M;
    tp.feature = (int)p->feature;
    tp.norm = (int)p->normalize;
    tp.scale_q = p->scale_q;
    tp.eps = p->eps;
    int which = 0;
    LA_TRY(bwd_variant_pick_lbt(ctx, "mhla_bwd", lbt_eligible(&tp),
                                "bf16 views with D = Dv in {64, 128}, unit inner stride, 16-byte "
                                "aligned rows and normalize none or per_query", &which));
    tp.variant = which;
    if (which) return lbt_backward(&tp, bwd_stream(ctx));
    P.chunk = 0;
    P.causal = 0;
    P.norm = (int)p->normalize;
    P.eps = p->eps;
    return mhla_run(io, P, q, k, v, mixing, d_out, dq, dk, dv, d_mixing, bwd_stream(ctx),
                    "mhla backward");
}

extern "C" la_status la_mhla_causal_backward_cuda(const la_mhla_causal_params *p,
                                                  const la_tensor *q, const la_tensor *k,
                                                  const la_tensor *v, const la_tensor *mixing,
                                                  const la_tensor *out, const la_tensor *d_out,
                                                  la_tensor *dq, la_tensor *dk, la_tensor *dv,
                                                  la_tensor *d_mixing, la_context *ctx) {
    (void)out;
    const float sq = p->scale_q != 0.f ? p->scale_q : (float)(1.0 / sqrt((double)q->ne[3]));
    const mhla_io io = mhla_io_of(q, v, mixing, (int)p->feature, sq);
    if (p->chunk < 1) return la_err(LA_ERR_ARG, "chunk: %lld, expected >= 1", (long long)p->chunk);
    lbk_problem P;
    memset(&P, 0, sizeof P);
    P.chunk = p->chunk;
    P.M = la_cu_cdiv(io.N, p->chunk);
    if (io.WM < P.M)
        return la_err(LA_ERR_SHAPE, "mixing: extent %lld, expected >= ceil(N/chunk) = %lld",
                      (long long)io.WM, (long long)P.M);
    if (p->normalize == LA_MHLA_NORM_RELEASED_VISION)
        return la_err(LA_ERR_ARG, "normalize: released_vision is not a causal mode");
    int fast = 0;
    LA_TRY(bwd_variant_pick(ctx, "mhla_causal_bwd",
                            mcb_eligible(p, q, k, v, d_out, dq, dk, dv, d_mixing), MCB_NEEDS,
                            &fast));
    if (fast)
        return mcb_backward(p, sq, q, k, v, mixing, d_out, dq, dk, dv, d_mixing, ctx,
                            bwd_stream(ctx));
    P.causal = 1;
    P.norm = (int)p->normalize;
    P.eps = p->eps;
    return mhla_run(io, P, q, k, v, mixing, d_out, dq, dk, dv, d_mixing, bwd_stream(ctx),
                    "causal mhla backward");
}
