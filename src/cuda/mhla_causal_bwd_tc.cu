/* Causal MHLA backward on tensor cores (TRAINING.md §1, SPEC §5.4; family
 * "mhla_causal_bwd", variant "mma"): bf16 [B,N,H,D] views, D = Dv in
 * {64, 128}, chunk 64, normalize none or per_query, per-head or shared W.
 *
 * Causal MHLA is causal linear attention with other chunk-state
 * combinations: block i (64 tokens) reads H_i = Σ_{b<i} W[i,b] S_b (and the
 * same mixture of z) instead of the prefix sum, and its own part
 * Σ_{j∈i, j≤t} k̃_j v_jᵀ scaled by W[i,i]. So the kernels of
 * linear_causal_bwd_tc.cu run with one tile per chunk (lcb_problem.mix):
 *   1. block sums S_b, z_b (lc_sum_kernel);
 *   2. H = W_strict·S over the flattened D·Dv + D states (mcb_combine);
 *   3. dq walk with H_i and W[i,i] (lc_dq_kernel);
 *   4. G_i = Σ_{t∈i} φq_t g''_tᵀ, Σ e φq (lc_sum_kernel: the gradient of H_i);
 *   5. dS = W_strictᵀ·G and the dW[i,b] = ⟨G_i, S_b⟩ partials (mcb_combine_bwd);
 *   6. dk/dv walk with dS_b and W[i,i] (lc_dkv_kernel), which also sums
 *      dW[i,i] = Σ_{j≤t in i} (φq_t·k̃_j)(v_j·g''_t + e_t) per block.
 * d_mixing is checked to fp32 accuracy (1e-4): with it the path takes
 * normalize none and φ = relu, relu_eps or identity, where φq, k̃, v and g are exact
 * in bf16, the products exact in fp32 and s applied in fp32 (G_i, dW[i,i]);
 * the rest falls back to the portable engine. Without d_mixing every
 * feature map and per_query are taken.
 * The mixing products are the batched split-bf16 GEMMs of the non-causal
 * mixing backward (linblock_bwd_mix.cu: fp32 in and out to about 16 bits);
 * dW is reduced over batches, heads and state pieces in a fixed order; the
 * upper triangle and the rows and columns past the last block get zero. No
 * atomics: bit-identical across calls. */
#include <algorithm>

#include "cuda/linblock_bwd_tc.cuh"
#include "cuda/linear_causal_bwd_tc.cuh"
#include "cuda/mhla_causal_bwd_tc.cuh"

namespace {

/* Ws[hw][r][c] = W[hw][r][c] for c < r, else 0 (r, c < M) */
__global__ void mcb_strict_kernel(int64_t total, const float *W, int64_t WM, int64_t M,
                                  float *Ws) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t hw = i / (M * M), r = (i / M) % M, c = i % M;
    Ws[i] = c < r ? W[(hw * WM + r) * WM + c] : 0.f;
}

/* out[hw][r][c] (WM × WM): dW[r,c] below the diagonal, the walks' dW[r,r]
 * summed over batches and heads in order on it, zero elsewhere */
__global__ void mcb_dmix_kernel(int64_t total, const float *dWr, const float *dWd, int64_t B,
                                int64_t H, int64_t Hw, int64_t M, int64_t WM, float *out) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t hw = i / (WM * WM), r = (i / WM) % WM, c = i % WM;
    float x = 0.f;
    if (r < M && c < r) x = dWr ? dWr[(hw * M + r) * M + c] : 0.f;
    if (r < M && c == r) {
        const int64_t h0 = Hw == 1 ? 0 : hw, h1 = Hw == 1 ? H : hw + 1;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = h0; h < h1; h++) x += dWd[(b * H + h) * M + r];
    }
    out[i] = x;
}

__global__ void mcb_zero_kernel(int64_t total, float *y) {
    const int64_t i = bwd_gid();
    if (i < total) y[i] = 0.f;
}

/* C[z] = Ws(z) · X[z] or Ws(z)ᵀ · X[z] over [M][SE] states */
la_status mcb_mix(const lcb_mixing *m, bool trans, const float *X, float *Y, int64_t BH,
                  int64_t H, int64_t M, int64_t SE, cudaStream_t s) {
    if (M == 1) { /* W_strict is empty: a GEMM of one zero padded to whole tiles otherwise */
        BWD_LAUNCH(mcb_zero_kernel, BH * SE, s, Y);
        return LA_OK;
    }
    lt_gemm g;
    memset(&g, 0, sizeof g);
    g.A = m->Ws;
    g.aZ = m->Hw == 1 ? 0 : M * M;
    g.aMod = m->Hw == 1 ? 0 : H;
    g.aI = trans ? 1 : M;
    g.aK = trans ? M : 1;
    g.B = X, g.bZ = M * SE, g.bK = SE, g.bJ = 1;
    g.C = Y, g.cZ = M * SE, g.cI = SE;
    g.rows = M, g.cols = SE, g.K = M, g.splits = 1;
    return lt_gemm_run(g, BH, s);
}

} // namespace

la_status mcb_mixing_prepare(const la_tensor *mixing, int64_t M, float *W, float *Ws,
                             lcb_mixing *m, cudaStream_t s) {
    memset(m, 0, sizeof *m);
    m->WM = mixing->ne[mixing->ndim - 1];
    m->Hw = mixing->ndim == 3 ? mixing->ne[0] : 1;
    LA_TRY(bwd_pack(s, mixing, W));
    BWD_LAUNCH(mcb_strict_kernel, m->Hw * M * M, s, W, m->WM, M, Ws);
    m->W = W, m->Ws = Ws;
    return LA_OK;
}

la_status mcb_combine(const lcb_mixing *m, const float *S, float *Hs, int64_t BH, int64_t H,
                      int64_t M, int64_t SE, cudaStream_t s) {
    return mcb_mix(m, false, S, Hs, BH, H, M, SE, s);
}

la_status mcb_combine_bwd(const lcb_mixing *m, const float *G, const float *S, float *dS,
                          int64_t BH, int64_t H, int64_t M, int64_t SE, cudaStream_t s) {
    LA_TRY(mcb_mix(m, true, G, dS, BH, H, M, SE, s));
    /* at M = 1 there is no dW[i,b] below the diagonal: mcb_dmix_kernel reads none */
    if (!m->dWp || M == 1) return LA_OK;
    lt_gemm g; /* dWp[z·splits + sp][i][b] = Σ_{e in piece sp} G[z][i][e] S[z][b][e] */
    memset(&g, 0, sizeof g);
    g.A = G, g.aZ = M * SE, g.aI = SE, g.aK = 1;
    g.B = S, g.bZ = M * SE, g.bK = 1, g.bJ = SE;
    g.C = m->dWp, g.cZ = M * M, g.cI = M;
    g.rows = M, g.cols = M, g.K = SE, g.splits = m->splits;
    g.kper = lt_cdiv(lt_cdiv(SE, m->splits), LT_MG_K) * LT_MG_K;
    return lt_gemm_run(g, BH, s);
}

int mcb_eligible(const la_mhla_causal_params *p, const la_tensor *q, const la_tensor *k,
                 const la_tensor *v, const la_tensor *d_out, const la_tensor *dq,
                 const la_tensor *dk, const la_tensor *dv, const la_tensor *d_mixing) {
    if (p->chunk != LT_T) return 0;
    /* d_mixing is held to 1e-4 (fp32): exact bf16 products need φ exact on
     * bf16 inputs (relu_eps: its 1e-6 is below the bf16 rounding of relu(x)
     * > 0 and kept to bf16 precision at 0, an error of about 1e-6) and no
     * bf16-level normalizer weights */
    const int exact_phi = p->feature == LA_FEATURE_RELU || p->feature == LA_FEATURE_RELU_EPS ||
                          p->feature == LA_FEATURE_IDENTITY;
    if (d_mixing && (p->normalize != LA_MHLA_NORM_NONE || !exact_phi)) return 0;
    if (p->normalize != LA_MHLA_NORM_NONE && p->normalize != LA_MHLA_NORM_PER_QUERY) return 0;
    la_linear_params lp;
    la_linear_params_init(&lp);
    lp.causal = 1;
    lp.feature = p->feature;
    lp.normalize = p->normalize == LA_MHLA_NORM_PER_QUERY;
    return lcb_eligible(&lp, q, k, v, d_out, dq, dk, dv, 0);
}

la_status mcb_backward(const la_mhla_causal_params *p, float scale_q, const la_tensor *q,
                       const la_tensor *k, const la_tensor *v, const la_tensor *mixing,
                       const la_tensor *d_out, la_tensor *dq, la_tensor *dk, la_tensor *dv,
                       la_tensor *d_mixing, const la_context *ctx, cudaStream_t s) {
    const int64_t B = q->ne[0], N = q->ne[1], H = q->ne[2], D = q->ne[3], BH = B * H;
    const int64_t M = lt_cdiv(N, LT_T), SE = D * D + D;
    const int64_t WM = mixing->ne[mixing->ndim - 1], Hw = mixing->ndim == 3 ? mixing->ne[0] : 1;
    lcb_mixing mx;
    /* the dW pieces: about 2K state elements each, B·H·splits CTA rows at most 65535 */
    const int64_t splits = std::max<int64_t>(1, std::min<int64_t>(lt_cdiv(SE, 2048), 65535 / BH));
    bwd_ws ws;
    float *W, *Ws, *dWd = nullptr, *dWp = nullptr, *dWr = nullptr, *dWo = nullptr;
    ws.want(&W, Hw, WM, WM);
    ws.want(&Ws, Hw, M, M);
    if (d_mixing) {
        ws.want(&dWd, BH, M);
        ws.want(&dWp, BH * splits, M, M);
        ws.want(&dWr, Hw, M, M);
        ws.want(&dWo, Hw, WM, WM);
    }
    LA_TRY(ws.alloc(s, "causal mhla backward mixing"));
    LA_TRY(mcb_mixing_prepare(mixing, M, W, Ws, &mx, s));
    mx.dWd = dWd, mx.dWp = dWp, mx.splits = splits;
    lcb_problem P;
    memset(&P, 0, sizeof P);
    P.q = q, P.k = k, P.v = v, P.d_out = d_out, P.dq = dq, P.dk = dk, P.dv = dv;
    P.feature = (int)p->feature, P.normalize = p->normalize == LA_MHLA_NORM_PER_QUERY;
    P.scale_q = scale_q, P.eps = p->eps;
    P.mix = &mx;
    LA_TRY(lcb_backward(&P, ctx, s));
    if (!d_mixing) return LA_OK;
    if (M > 1) LA_TRY(lt_dw_reduce(B, H, Hw, mx.splits, M * M, mx.dWp, dWr, s));
    BWD_LAUNCH(mcb_dmix_kernel, Hw * WM * WM, s, M > 1 ? dWr : nullptr, mx.dWd, B, H, Hw, M, WM, dWo);
    return bwd_unpack(s, d_mixing, dWo);
}
