/* The portable backward engine of every linear-attention family (linear
 * non-causal and causal, MHLA non-causal and causal, focused): see
 * lbk_problem in bwd_common.cuh for what it computes.
 *
 * Per (batch, head), with q̃, k̃, v, dO gathered into fp32 [B,H,N,·]:
 *   1. block summaries S_b, z_b (one thread per summary element);
 *   2. the mixed summaries A_i that block i's queries read;
 *   3. per token: the forward recomputed (num, den), dnum = dO/den,
 *      dden = -(dO·num)/den², dq̃ (inter part + masked intra part), and the
 *      per-token term of dW[i,i] (causal);
 *   4. dA_i = Σ_{t∈i} q̃_t dnum_tᵀ (and the z part);
 *   5. dS_b = Σ_i W[i,b] dA_i (transposed mixing, or the reverse sweep);
 *   6. dW[i,b] = ⟨dA_i, S_b⟩ summed over batch (and heads when shared);
 *   7. per token: dk̃, dv from dS_b plus the masked intra part.
 * Every sum runs in a fixed order; each thread writes only its own item. */
#include "cuda/bwd_common.cuh"

namespace {

/* 1. S_b / z_b: Sb[(bh*M + b)*SE + e] */
__global__ void lbk_blocksum_kernel(int64_t total, lbk_geo G, int64_t M, int64_t D, int64_t Dv,
                                    const float *kt, const float *v, float *Sb) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t SE = D * Dv + D;
    const int64_t e = i % SE, b = (i / SE) % M, bh = i / (SE * M);
    const lbk_box x = geo_box(G, b);
    const float *K = kt + bh * G.N * D, *V = v + bh * G.N * Dv;
    float acc = 0.f;
    if (e < D * Dv) {
        const int64_t d = e / Dv, c = e % Dv;
        for (int64_t w = 0; w < x.size; w++) {
            const int64_t t = geo_tok(G, x, w);
            acc += K[t * D + d] * V[t * Dv + c];
        }
    } else {
        const int64_t d = e - D * Dv;
        for (int64_t w = 0; w < x.size; w++) acc += K[geo_tok(G, x, w) * D + d];
    }
    Sb[i] = acc;
}

/* 2a. A_i = Σ_b W[i,b] S_b (b < i when causal) */
__global__ void lbk_mix_kernel(int64_t total, int64_t M, int64_t H, int64_t SE, int causal,
                               const float *W, int64_t W_hs, int64_t W_ld, const float *Sb,
                               float *A) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t e = i % SE, ib = (i / SE) % M, bh = i / (SE * M), h = bh % H;
    const float *w = W + h * W_hs + ib * W_ld;
    const float *S = Sb + bh * M * SE + e;
    const int64_t nb = causal ? ib : M;
    float acc = 0.f;
    for (int64_t b = 0; b < nb; b++) acc += w[b] * S[b * SE];
    A[i] = acc;
}
/* 2b. ones: causal A_i = S_in + Σ_{b<i} S_b (a forward sweep); else Σ_b S_b */
__global__ void lbk_prefix_kernel(int64_t total, int64_t M, int64_t SE, int causal,
                                  const float *S_in, const float *Sb, float *A) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t e = i % SE, bh = i / SE;
    const float *S = Sb + bh * M * SE + e;
    float *out = A + bh * M * SE + e;
    if (causal) {
        float run = S_in ? S_in[i] : 0.f;
        for (int64_t b = 0; b < M; b++) {
            out[b * SE] = run;
            run += S[b * SE];
        }
    } else {
        float tot = 0.f;
        for (int64_t b = 0; b < M; b++) tot += S[b * SE];
        for (int64_t b = 0; b < M; b++) out[b * SE] = tot;
    }
}

struct lbk_dev {
    lbk_geo G;
    int64_t M, H, D, Dv;
    int causal, norm;
    float eps;
    const float *W;
    int64_t W_hs, W_ld;
    const float *qt, *kt, *v, *dO;
};
BWD_DEV inline float lbk_wii(const lbk_dev &P, int64_t h, int64_t i) {
    if (!P.causal) return 0.f;
    return P.W ? P.W[h * P.W_hs + i * P.W_ld + i] : 1.f;
}

/* 3. per token: forward recomputed, dnum (in dnum), dden, dq̃, cdot */
__global__ void lbk_token_fwd_kernel(int64_t total, lbk_dev P, const float *A, const float *Sb,
                                     float *dnum, float *dden, float *cdot, float *dqt) {
    const int64_t it = bwd_gid();
    if (it >= total) return;
    const int64_t N = P.G.N, D = P.D, Dv = P.Dv, SE = D * Dv + D;
    const int64_t t = it % N, bh = it / N, h = bh % P.H;
    int64_t w;
    lbk_box x;
    const int64_t i = geo_block(P.G, t, &w, &x);
    const float *q = P.qt + it * D;
    const float *Ai = A + (bh * P.M + i) * SE;
    const float *K = P.kt + bh * N * D, *V = P.v + bh * N * Dv;
    const float *g = P.dO + it * Dv;
    float *num = dnum + it * Dv;
    float *dq = dqt + it * D;
    const float wii = lbk_wii(P, h, i);
    const int64_t t0 = x.lo[2]; /* causal: chunk mode, tokens t0..t of the chunk */
    for (int64_t c = 0; c < Dv; c++) {
        float acc = 0.f;
        for (int64_t d = 0; d < D; d++) acc += q[d] * Ai[d * Dv + c];
        num[c] = acc;
    }
    float den = 0.f;
    for (int64_t d = 0; d < D; d++) den += q[d] * Ai[D * Dv + d];
    if (P.causal) {
        float den_in = 0.f;
        for (int64_t j = t0; j <= t; j++) {
            float a = 0.f;
            for (int64_t d = 0; d < D; d++) a += q[d] * K[j * D + d];
            for (int64_t c = 0; c < Dv; c++) num[c] += wii * a * V[j * Dv + c];
            den_in += a;
        }
        den += wii * den_in;
    }
    const int normed = P.norm != LA_MHLA_NORM_NONE;
    if (P.norm == LA_MHLA_NORM_RELEASED_VISION) {
        /* Σ_b W[i,b] (q̃_{b,w}·z_b) */
        const float *wr = P.W + h * P.W_hs + i * P.W_ld;
        den = 0.f;
        for (int64_t b = 0; b < P.M; b++) {
            const lbk_box xb = geo_box(P.G, b);
            const float *qb = P.qt + (bh * N + geo_tok(P.G, xb, w)) * D;
            const float *zb = Sb + (bh * P.M + b) * SE + D * Dv;
            float r = 0.f;
            for (int64_t d = 0; d < D; d++) r += qb[d] * zb[d];
            den += wr[b] * r;
        }
    }
    float dd = 0.f;
    if (normed) {
        den += P.eps;
        float gn = 0.f;
        for (int64_t c = 0; c < Dv; c++) gn += g[c] * num[c];
        const float inv = 1.f / den;
        dd = -gn * inv * inv;
        for (int64_t c = 0; c < Dv; c++) num[c] = g[c] * inv;
    } else {
        for (int64_t c = 0; c < Dv; c++) num[c] = g[c];
    }
    dden[it] = dd;
    /* dq̃ = A_i dnum + z̃_i dden (+ masked intra part) */
    const float ddz = P.norm == LA_MHLA_NORM_PER_QUERY ? dd : 0.f;
    for (int64_t d = 0; d < D; d++) {
        float acc = 0.f;
        for (int64_t c = 0; c < Dv; c++) acc += Ai[d * Dv + c] * num[c];
        dq[d] = acc + Ai[D * Dv + d] * ddz;
    }
    float ct = 0.f;
    if (P.causal) {
        for (int64_t j = t0; j <= t; j++) {
            float u = ddz, a = 0.f;
            for (int64_t c = 0; c < Dv; c++) u += num[c] * V[j * Dv + c];
            for (int64_t d = 0; d < D; d++) {
                a += q[d] * K[j * D + d];
                dq[d] += wii * u * K[j * D + d];
            }
            ct += a * u;
        }
    }
    cdot[it] = ct;
}

/* 3b. released_vision: E[b,w] = Σ_i W[i,b] dden[tok(i,w)]; dq̃ += E z_b */
__global__ void lbk_rv_kernel(int64_t total, lbk_dev P, const float *Sb, const float *dden,
                              float *E, float *dqt) {
    const int64_t it = bwd_gid();
    if (it >= total) return;
    const int64_t N = P.G.N, D = P.D, SE = D * P.Dv + D;
    const int64_t t = it % N, bh = it / N, h = bh % P.H;
    int64_t w;
    lbk_box x;
    const int64_t b = geo_block(P.G, t, &w, &x);
    float e = 0.f;
    for (int64_t i = 0; i < P.M; i++) {
        const lbk_box xi = geo_box(P.G, i);
        e += P.W[h * P.W_hs + i * P.W_ld + b] * dden[bh * N + geo_tok(P.G, xi, w)];
    }
    E[it] = e;
    const float *zb = Sb + (bh * P.M + b) * SE + D * P.Dv;
    for (int64_t d = 0; d < D; d++) dqt[it * D + d] += e * zb[d];
}

/* 4. dA_i = Σ_{t∈i} q̃_t dnum_tᵀ; z part: q̃_t dden_t (per_query), q̃_t E_t
 * (released_vision: the direct dz_b), 0 (none) */
__global__ void lbk_dsum_kernel(int64_t total, lbk_dev P, const float *dnum, const float *dden,
                                const float *E, float *dA) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t N = P.G.N, D = P.D, Dv = P.Dv, SE = D * Dv + D;
    const int64_t e = i % SE, ib = (i / SE) % P.M, bh = i / (SE * P.M);
    const lbk_box x = geo_box(P.G, ib);
    const float *Q = P.qt + bh * N * D;
    float acc = 0.f;
    if (e < D * Dv) {
        const int64_t d = e / Dv, c = e % Dv;
        for (int64_t w = 0; w < x.size; w++) {
            const int64_t t = geo_tok(P.G, x, w);
            acc += Q[t * D + d] * dnum[(bh * N + t) * Dv + c];
        }
    } else if (P.norm != LA_MHLA_NORM_NONE) {
        const int64_t d = e - D * Dv;
        const float *s = P.norm == LA_MHLA_NORM_RELEASED_VISION ? E : dden;
        for (int64_t w = 0; w < x.size; w++) {
            const int64_t t = geo_tok(P.G, x, w);
            acc += Q[t * D + d] * s[bh * N + t];
        }
    }
    dA[i] = acc;
}

/* 5a. dS_b = Σ_i W[i,b] dA_i (i > b when causal); released_vision's z part
 * is direct */
__global__ void lbk_dmix_kernel(int64_t total, lbk_dev P, const float *dA, float *dS) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t SE = P.D * P.Dv + P.D, M = P.M;
    const int64_t e = i % SE, b = (i / SE) % M, bh = i / (SE * M), h = bh % P.H;
    const float *src = dA + bh * M * SE + e;
    if (P.norm == LA_MHLA_NORM_RELEASED_VISION && e >= P.D * P.Dv) {
        dS[i] = src[b * SE];
        return;
    }
    const float *w = P.W + h * P.W_hs + b;
    float acc = 0.f;
    for (int64_t r = P.causal ? b + 1 : 0; r < M; r++) acc += w[r * P.W_ld] * src[r * SE];
    dS[i] = acc;
}
/* 5b. ones: causal dS_b = dS_out + Σ_{i>b} dA_i (a reverse sweep; what is
 * left is the initial state's gradient); else Σ_i dA_i */
__global__ void lbk_suffix_kernel(int64_t total, int64_t M, int64_t SE, int causal,
                                  const float *dS_out, const float *dA, float *dS,
                                  float *dS_in) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t e = i % SE, bh = i / SE;
    const float *src = dA + bh * M * SE + e;
    float *out = dS + bh * M * SE + e;
    if (causal) {
        float run = dS_out ? dS_out[i] : 0.f;
        for (int64_t b = M - 1; b >= 0; b--) {
            out[b * SE] = run;
            run += src[b * SE];
        }
        if (dS_in) dS_in[i] = run;
    } else {
        float tot = 0.f;
        for (int64_t b = 0; b < M; b++) tot += src[b * SE];
        for (int64_t b = 0; b < M; b++) out[b * SE] = tot;
    }
}

/* 6. dW[hw][i][b], summed over batch (and heads when shared) in order */
__global__ void lbk_dw_kernel(int64_t total, lbk_dev P, int64_t B, int64_t WM, int64_t dW_heads,
                              const float *dA, const float *Sb, const float *dden,
                              const float *cdot, float *dW) {
    const int64_t id = bwd_gid();
    if (id >= total) return;
    const int64_t b = id % WM, i = (id / WM) % WM, hw = id / (WM * WM);
    const int64_t N = P.G.N, D = P.D, Dv = P.Dv, SE = D * Dv + D, M = P.M;
    float acc = 0.f;
    if (i < M && b < M && !(P.causal && b > i)) {
        const int64_t h0 = dW_heads == 1 ? 0 : hw, h1 = dW_heads == 1 ? P.H : hw + 1;
        const lbk_box xi = geo_box(P.G, i), xb = geo_box(P.G, b);
        for (int64_t bb = 0; bb < B; bb++)
            for (int64_t h = h0; h < h1; h++) {
                const int64_t bh = bb * P.H + h;
                if (P.causal && b == i) {
                    for (int64_t w = 0; w < xi.size; w++) acc += cdot[bh * N + geo_tok(P.G, xi, w)];
                    continue;
                }
                const float *x = dA + (bh * M + i) * SE, *y = Sb + (bh * M + b) * SE;
                const int64_t ne = P.norm == LA_MHLA_NORM_PER_QUERY ? SE : D * Dv;
                float s = 0.f;
                for (int64_t e = 0; e < ne; e++) s += x[e] * y[e];
                if (P.norm == LA_MHLA_NORM_RELEASED_VISION) {
                    for (int64_t w = 0; w < xi.size; w++) {
                        const float *qb = P.qt + (bh * N + geo_tok(P.G, xb, w)) * D;
                        float r = 0.f;
                        for (int64_t d = 0; d < D; d++) r += qb[d] * y[D * Dv + d];
                        s += dden[bh * N + geo_tok(P.G, xi, w)] * r;
                    }
                }
                acc += s;
            }
    }
    dW[id] = acc;
}

/* 7. per token: dk̃ = dS_b v + dz_b, dv = dS_bᵀ k̃ (+ masked intra part) */
__global__ void lbk_token_bwd_kernel(int64_t total, lbk_dev P, const float *dS,
                                     const float *dnum, const float *dden, float *dkt,
                                     float *dvo) {
    const int64_t it = bwd_gid();
    if (it >= total) return;
    const int64_t N = P.G.N, D = P.D, Dv = P.Dv, SE = D * Dv + D;
    const int64_t j = it % N, bh = it / N, h = bh % P.H;
    int64_t w;
    lbk_box x;
    const int64_t b = geo_block(P.G, j, &w, &x);
    const float *Gb = dS + (bh * P.M + b) * SE;
    const float *k = P.kt + it * D, *vj = P.v + it * Dv;
    const float *Q = P.qt + bh * N * D;
    float *dk = dkt + it * D, *dv = dvo + it * Dv;
    for (int64_t d = 0; d < D; d++) {
        float acc = 0.f;
        for (int64_t c = 0; c < Dv; c++) acc += Gb[d * Dv + c] * vj[c];
        dk[d] = acc + Gb[D * Dv + d];
    }
    for (int64_t c = 0; c < Dv; c++) {
        float acc = 0.f;
        for (int64_t d = 0; d < D; d++) acc += Gb[d * Dv + c] * k[d];
        dv[c] = acc;
    }
    if (P.causal) {
        const float wbb = lbk_wii(P, h, b);
        const float ddz_on = P.norm == LA_MHLA_NORM_PER_QUERY ? 1.f : 0.f;
        const int64_t t1 = x.lo[2] + x.len[2];
        for (int64_t t = j; t < t1; t++) {
            const float *qt = Q + t * D, *gn = dnum + (bh * N + t) * Dv;
            float a = 0.f, u = ddz_on * dden[bh * N + t];
            for (int64_t d = 0; d < D; d++) a += qt[d] * k[d];
            for (int64_t c = 0; c < Dv; c++) u += gn[c] * vj[c];
            for (int64_t d = 0; d < D; d++) dk[d] += wbb * u * qt[d];
            for (int64_t c = 0; c < Dv; c++) dv[c] += wbb * a * gn[c];
        }
    }
}

/* ---- the per-token steps one thread per element ----------------------------
 * Steps 3 and 7 above as one thread per (token, column) instead of one per
 * token, with the causal intra-chunk products first formed as per-pair
 * scalars a_tj = q̃_t·k̃_j and u_tj = dnum_t·v_j + dden_t (chunks of at most
 * LBK_PAIR_MAX tokens): the same sums in the same order as a plain
 * loop, written so that neighbouring threads read neighbouring columns. */
#define LBK_PAIR_MAX 256

/* a[t][jj] = q̃_t·k̃_{t0+jj} for t0+jj <= t (else 0), t0 = t's chunk start */
__global__ void lbk_pair_a_kernel(int64_t total, lbk_dev P, float *aT) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t C = P.G.chunk, N = P.G.N, D = P.D;
    const int64_t jj = i % C, it = i / C, t = it % N, bh = it / N;
    const int64_t j = t - t % C + jj;
    float a = 0.f;
    if (j <= t) {
        const float *q = P.qt + it * D, *k = P.kt + (bh * N + j) * D;
        for (int64_t d = 0; d < D; d++) a += q[d] * k[d];
    }
    aT[i] = a;
}
/* num[t][c] = Σ_d q̃[d] A_i[d][c] + W_ii Σ_jj a[t][jj] v_j[c] */
__global__ void lbk_num_kernel(int64_t total, lbk_dev P, const float *A, const float *aT,
                               float *num) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t N = P.G.N, D = P.D, Dv = P.Dv, SE = D * Dv + D;
    const int64_t c = i % Dv, it = i / Dv, t = it % N, bh = it / N, h = bh % P.H;
    int64_t w;
    lbk_box x;
    const int64_t ib = geo_block(P.G, t, &w, &x);
    const float *q = P.qt + it * D, *Ai = A + (bh * P.M + ib) * SE;
    float acc = 0.f;
    for (int64_t d = 0; d < D; d++) acc += q[d] * Ai[d * Dv + c];
    if (P.causal) {
        const float wii = lbk_wii(P, h, ib);
        const int64_t C = P.G.chunk, t0 = t - t % C;
        const float *a = aT + it * C, *V = P.v + (bh * N + t0) * Dv + c;
        float in = 0.f;
        for (int64_t jj = 0; jj <= t - t0; jj++) in += a[jj] * V[jj * Dv];
        acc += wii * in;
    }
    num[i] = acc;
}
/* den, dden and 1/den per token (num from lbk_num_kernel) */
__global__ void lbk_den_kernel(int64_t total, lbk_dev P, const float *A, const float *Sb,
                               const float *aT, const float *num, float *dden, float *inv) {
    const int64_t it = bwd_gid();
    if (it >= total) return;
    const int64_t N = P.G.N, D = P.D, Dv = P.Dv, SE = D * Dv + D;
    const int64_t t = it % N, bh = it / N, h = bh % P.H;
    if (P.norm == LA_MHLA_NORM_NONE) {
        dden[it] = 0.f;
        inv[it] = 1.f;
        return;
    }
    int64_t w;
    lbk_box x;
    const int64_t ib = geo_block(P.G, t, &w, &x);
    const float *q = P.qt + it * D;
    float den = 0.f;
    if (P.norm == LA_MHLA_NORM_RELEASED_VISION) {
        const float *wr = P.W + h * P.W_hs + ib * P.W_ld;
        for (int64_t b = 0; b < P.M; b++) {
            const lbk_box xb = geo_box(P.G, b);
            const float *qb = P.qt + (bh * N + geo_tok(P.G, xb, w)) * D;
            const float *zb = Sb + (bh * P.M + b) * SE + D * Dv;
            float r = 0.f;
            for (int64_t d = 0; d < D; d++) r += qb[d] * zb[d];
            den += wr[b] * r;
        }
    } else {
        const float *zi = A + (bh * P.M + ib) * SE + D * Dv;
        for (int64_t d = 0; d < D; d++) den += q[d] * zi[d];
        if (P.causal) {
            const int64_t C = P.G.chunk, t0 = t - t % C;
            const float *a = aT + it * C;
            float in = 0.f;
            for (int64_t jj = 0; jj <= t - t0; jj++) in += a[jj];
            den += lbk_wii(P, h, ib) * in;
        }
    }
    den += P.eps;
    const float *g = P.dO + it * Dv, *nm = num + it * Dv;
    float gn = 0.f;
    for (int64_t c = 0; c < Dv; c++) gn += g[c] * nm[c];
    const float iv = 1.f / den;
    dden[it] = -gn * iv * iv;
    inv[it] = iv;
}
__global__ void lbk_dnum_kernel(int64_t total, lbk_dev P, const float *inv, float *dnum) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    dnum[i] = P.dO[i] * inv[i / P.Dv];
}
/* u[t][jj] = dnum_t·v_j + dden_t (per_query) for j <= t, else 0 */
__global__ void lbk_pair_u_kernel(int64_t total, lbk_dev P, const float *dnum,
                                  const float *dden, float *uT) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t C = P.G.chunk, N = P.G.N, Dv = P.Dv;
    const int64_t jj = i % C, it = i / C, t = it % N, bh = it / N;
    const int64_t j = t - t % C + jj;
    float u = 0.f;
    if (j <= t) {
        u = P.norm == LA_MHLA_NORM_PER_QUERY ? dden[it] : 0.f;
        const float *g = dnum + it * Dv, *v = P.v + (bh * N + j) * Dv;
        for (int64_t c = 0; c < Dv; c++) u += g[c] * v[c];
    }
    uT[i] = u;
}
/* dq̃[t][d] = Σ_c A_i[d][c] dnum[c] + z̃_i[d] dden + W_ii Σ_jj u[t][jj] k̃_j[d] */
__global__ void lbk_dq_kernel(int64_t total, lbk_dev P, const float *A, const float *dnum,
                              const float *dden, const float *uT, float *dqt) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t N = P.G.N, D = P.D, Dv = P.Dv, SE = D * Dv + D;
    const int64_t d = i % D, it = i / D, t = it % N, bh = it / N, h = bh % P.H;
    int64_t w;
    lbk_box x;
    const int64_t ib = geo_block(P.G, t, &w, &x);
    const float *Ai = A + (bh * P.M + ib) * SE + d * Dv, *g = dnum + it * Dv;
    float acc = 0.f;
    for (int64_t c = 0; c < Dv; c++) acc += Ai[c] * g[c];
    if (P.norm == LA_MHLA_NORM_PER_QUERY) acc += A[(bh * P.M + ib) * SE + D * Dv + d] * dden[it];
    if (P.causal) {
        const int64_t C = P.G.chunk, t0 = t - t % C;
        const float *u = uT + it * C, *K = P.kt + (bh * N + t0) * D + d;
        float in = 0.f;
        for (int64_t jj = 0; jj <= t - t0; jj++) in += u[jj] * K[jj * D];
        acc += lbk_wii(P, h, ib) * in;
    }
    dqt[i] = acc;
}
/* cdot[t] = Σ_jj a[t][jj] u[t][jj] (the per-token term of dW[i][i]) */
__global__ void lbk_cdot_kernel(int64_t total, int64_t C, const float *aT, const float *uT,
                                float *cdot) {
    const int64_t it = bwd_gid();
    if (it >= total) return;
    float s = 0.f;
    for (int64_t jj = 0; jj < C; jj++) s += aT[it * C + jj] * uT[it * C + jj];
    cdot[it] = s;
}
/* dk̃[j][d] = Σ_c dS_b[d][c] v_j[c] + dz_b[d] + W_bb Σ_{t>=j} u[t][j−t0] q̃_t[d] */
__global__ void lbk_dk_kernel(int64_t total, lbk_dev P, const float *dS, const float *uT,
                              float *dkt) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t N = P.G.N, D = P.D, Dv = P.Dv, SE = D * Dv + D;
    const int64_t d = i % D, it = i / D, j = it % N, bh = it / N, h = bh % P.H;
    int64_t w;
    lbk_box x;
    const int64_t b = geo_block(P.G, j, &w, &x);
    const float *Gb = dS + (bh * P.M + b) * SE, *vj = P.v + it * Dv;
    float acc = 0.f;
    for (int64_t c = 0; c < Dv; c++) acc += Gb[d * Dv + c] * vj[c];
    acc += Gb[D * Dv + d];
    if (P.causal) {
        const int64_t C = P.G.chunk, t0 = j - j % C, t1 = x.lo[2] + x.len[2];
        float in = 0.f;
        for (int64_t t = j; t < t1; t++)
            in += uT[(bh * N + t) * C + (j - t0)] * P.qt[(bh * N + t) * D + d];
        acc += lbk_wii(P, h, b) * in;
    }
    dkt[i] = acc;
}
/* dv[j][c] = Σ_d dS_b[d][c] k̃_j[d] + W_bb Σ_{t>=j} a[t][j−t0] dnum_t[c] */
__global__ void lbk_dv_kernel(int64_t total, lbk_dev P, const float *dS, const float *aT,
                              const float *dnum, float *dvo) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t N = P.G.N, D = P.D, Dv = P.Dv, SE = D * Dv + D;
    const int64_t c = i % Dv, it = i / Dv, j = it % N, bh = it / N, h = bh % P.H;
    int64_t w;
    lbk_box x;
    const int64_t b = geo_block(P.G, j, &w, &x);
    const float *Gb = dS + (bh * P.M + b) * SE + c, *k = P.kt + it * D;
    float acc = 0.f;
    for (int64_t d = 0; d < D; d++) acc += Gb[d * Dv] * k[d];
    if (P.causal) {
        const int64_t C = P.G.chunk, t0 = j - j % C, t1 = x.lo[2] + x.len[2];
        float in = 0.f;
        for (int64_t t = j; t < t1; t++)
            in += aT[(bh * N + t) * C + (j - t0)] * dnum[(bh * N + t) * Dv + c];
        acc += lbk_wii(P, h, b) * in;
    }
    dvo[i] = acc;
}

} // namespace

la_status lbk_backward(const lbk_problem *p, const lbk_grads *gr, cudaStream_t s) {
    const int64_t BH = p->B * p->H, N = p->N, D = p->D, Dv = p->Dv, M = p->M;
    const int64_t SE = D * Dv + D;
    bwd_ws ws;
    float *Sb, *A, *dA, *dnum, *dden, *cdot, *E;
    ws.want(&Sb, BH, M, SE);
    ws.want(&A, BH, M, SE); /* the mixed summaries, then dS_b */
    ws.want(&dA, BH, M, SE);
    ws.want(&dnum, BH, N, Dv);
    ws.want(&dden, BH, N);
    ws.want(&cdot, BH, N);
    ws.want(&E, BH, N);
    /* one thread per element (causal chunks up to LBK_PAIR_MAX: the pair
     * scalars take BH·N·chunk floats), else one thread per token */
    const int elem = !p->causal || (p->chunk > 0 && p->chunk <= LBK_PAIR_MAX);
    const int64_t C = p->causal ? p->chunk : 1;
    float *inv, *aT = nullptr, *uT = nullptr;
    ws.want(&inv, BH, N);
    if (elem && p->causal) {
        ws.want(&aT, BH, N, C);
        ws.want(&uT, BH, N, C);
    }
    LA_TRY(ws.alloc(s, "linear-family backward"));

    lbk_dev P;
    P.G.chunk = p->chunk;
    P.G.N = N;
    for (int a = 0; a < 3; a++) P.G.n[a] = p->n[a], P.G.g[a] = p->g[a];
    P.M = M;
    P.H = p->H;
    P.D = D;
    P.Dv = Dv;
    P.causal = p->causal;
    P.norm = p->norm;
    P.eps = p->eps;
    P.W = p->W;
    P.W_hs = p->W_hs;
    P.W_ld = p->W_ld;
    P.qt = p->qt;
    P.kt = p->kt;
    P.v = p->v;
    P.dO = p->dO;

    BWD_LAUNCH(lbk_blocksum_kernel, BH * M * SE, s, P.G, M, D, Dv, p->kt, p->v, Sb);
    if (p->W)
        BWD_LAUNCH(lbk_mix_kernel, BH * M * SE, s, M, p->H, SE, p->causal, p->W, p->W_hs,
                   p->W_ld, Sb, A);
    else
        BWD_LAUNCH(lbk_prefix_kernel, BH * SE, s, M, SE, p->causal, p->S_in, Sb, A);
    if (elem) {
        if (p->causal) BWD_LAUNCH(lbk_pair_a_kernel, BH * N * C, s, P, aT);
        BWD_LAUNCH(lbk_num_kernel, BH * N * Dv, s, P, A, aT, dnum);
        BWD_LAUNCH(lbk_den_kernel, BH * N, s, P, A, Sb, aT, dnum, dden, inv);
        BWD_LAUNCH(lbk_dnum_kernel, BH * N * Dv, s, P, inv, dnum);
        if (p->causal) {
            BWD_LAUNCH(lbk_pair_u_kernel, BH * N * C, s, P, dnum, dden, uT);
            BWD_LAUNCH(lbk_cdot_kernel, BH * N, s, C, aT, uT, cdot);
        }
        BWD_LAUNCH(lbk_dq_kernel, BH * N * D, s, P, A, dnum, dden, uT, gr->dqt);
    } else {
        BWD_LAUNCH(lbk_token_fwd_kernel, BH * N, s, P, A, Sb, dnum, dden, cdot, gr->dqt);
    }
    if (p->norm == LA_MHLA_NORM_RELEASED_VISION)
        BWD_LAUNCH(lbk_rv_kernel, BH * N, s, P, Sb, dden, E, gr->dqt);
    BWD_LAUNCH(lbk_dsum_kernel, BH * M * SE, s, P, dnum, dden, E, dA);
    float *dS = A; /* the mixed summaries are dead after step 3 */
    if (p->W)
        BWD_LAUNCH(lbk_dmix_kernel, BH * M * SE, s, P, dA, dS);
    else
        BWD_LAUNCH(lbk_suffix_kernel, BH * SE, s, M, SE, p->causal, p->dS_out, dA, dS,
                   gr->dS_in);
    if (p->W && gr->dW)
        BWD_LAUNCH(lbk_dw_kernel, gr->dW_heads * p->W_M * p->W_M, s, P, p->B, p->W_M,
                   gr->dW_heads, dA, Sb, dden, cdot, gr->dW);
    if (elem) {
        BWD_LAUNCH(lbk_dk_kernel, BH * N * D, s, P, dS, uT, gr->dkt);
        BWD_LAUNCH(lbk_dv_kernel, BH * N * Dv, s, P, dS, aT, dnum, gr->dv);
    } else {
        BWD_LAUNCH(lbk_token_bwd_kernel, BH * N, s, P, dS, dnum, dden, gr->dkt, gr->dv);
    }
    /* the workspace goes back to the pool stream-ordered: no sync needed */
    return LA_OK;
}
