/* Tensor-core backward of the non-causal linear family: linear attention (one
 * block over all tokens, no mixing) and MHLA on 1-/2-/3-D grids (shared or
 * per-head mixing W), bf16 views, D = Dv in {64, 128}, normalize none or
 * per_query. The sums are those of lbk_backward (linblock_bwd.cu):
 *
 * Per (batch, head) the tokens of block b are cut into pieces of at most PT
 * tokens (a multiple of 64, chosen so that the grid fills the GPU); one CTA
 * per piece, looping over 64-token tiles:
 *   1. lt_sum:   S_b = K̃_bᵀ V_b, z_b = Σ k̃ (mma over the tokens of the tile);
 *   2. mixing:   A_i = Σ_b W[i,b] S_b (no mixing: A = S);
 *   3. lt_query: num = Q̃ A_i, den = q̃·z̃_i + eps, dnum = dO/den,
 *                dden = −(dO·num)/den², dq̃ = dnum A_iᵀ + z̃_i dden, written
 *                as dq = scale_q φ'(q) dq̃; dA_i += Q̃ᵀ dnum, dz̃_i += Q̃ᵀ dden;
 *   4. mixing:   dS_b = Σ_i W[i,b] dA_i and dW[i,b] = ⟨dA_i, S_b⟩ (the summary
 *                elements split in ranges; ranges, batches and heads summed
 *                in order);
 *   5. lt_key:   dk̃ = V dS_bᵀ + dz_b, written as dk = φ'(k) dk̃; dv = K̃ dS_b.
 * The partial sums of a block's pieces go to fp32 workspace and are summed
 * in piece order: no atomics, bit-identical results across calls.
 *
 * Products on mma.sync m16n8k16 (bf16 operands, fp32 accumulation): the
 * operands sit in shared memory as bf16 rows, contiguous along the
 * reduction, padded by 8 elements (conflict-free 32-bit fragment loads);
 * transposed operands are stored transposed when the tile is loaded. When
 * d_mixing is asked for (an fp32 gradient, held to 1e-4), the products it
 * depends on (S, u, dA) take split operands x = hi + lo (two bf16 values,
 * 16 bits of x; three mma passes, lo·lo dropped); dq, dk, dv alone are
 * bf16 gradients, with the roundings of the same formula in bf16. Each
 * of the 8 warps owns 16 rows of a product (token tiles: 4 × 2 warps of 16
 * rows × DH/2 columns; DH × DH summaries: 16 rows × all or half the
 * columns). The feature map φ and scale_q are applied while loading. Under
 * LA_BWD_EMU the same kernel text runs on the host emulator (bwd_emu.cuh).
 * The mixing products and dW (steps 2, 4) are batched GEMMs on the same
 * instructions, with split operands (fp32 in and out). Global loads of the
 * next token tile are issued before the products of the current one.
 *
 * Variant `mma2` (lbt_problem::variant 2; the kernels' V2): the same sums and
 * roundings, with the fragments by ldmatrix: the summaries and the query
 * side keep their token tiles row-major (16-byte stores) and read them
 * transposed with ldmatrix.trans, the key side reads dS transposed the same
 * way (one copy, two CTAs per SM, as the summaries); the mixing products
 * run on lt2_gemm_run (linblock_bwd_mix2.cu). */
#include <math.h>


#include "cuda/linblock_bwd_tc.cuh"

#define LT_TARGET_CTAS 264 /* pieces per launch to aim for: two per SM of an H200 */

namespace {

template <int DH> struct lt_cfg {
    static constexpr int LD = DH + 8;     /* row of DH elements, padded */
    static constexpr int LDT = LT_T + 8;  /* row of the 64 tokens of a tile, padded */
    static constexpr int TN = DH / 16;    /* token-tile products: n-tiles per warp (DH/2 columns) */
    static constexpr int WR = DH / 16 < 8 ? DH / 16 : 8; /* summary products: warps along rows */
    static constexpr int SN = DH / (8 / WR) / 8;         /* ... and n-tiles per warp */
    static constexpr int64_t SE = (int64_t)DH * DH + DH; /* summary [S | z] */
};

struct lt_args {
    const lt_bf *q, *k, *v, *g;
    lt_bf *dq, *dk, *dv;
    int64_t qs[3], ks[3], vs[3], gs[3], dqs[3], dks[3], dvs[3]; /* b, n, h strides */
    lbk_geo G;
    int64_t H, M, P, PT; /* heads, blocks, pieces per block (max), tokens per piece */
    int f, norm;
    int precise; /* split operands in the products d_mixing depends on */
    float scale_q, eps;
};

BWD_DEV inline int64_t lt_row(const int64_t *s, int64_t b, int64_t tok, int64_t h) {
    return b * s[0] + tok * s[1] + h * s[2];
}

/* This CTA's piece: batch, head, block, its box and positions [w0, w1). */
struct lt_piece {
    int64_t b, h, bh, blk, slot, w0, w1;
    lbk_box x;
};
BWD_DEV inline bool lt_piece_of(const lt_args &a, lt_piece *p) {
    p->bh = lt_by();
    p->b = p->bh / a.H;
    p->h = p->bh % a.H;
    p->blk = lt_bx() / a.P;
    const int64_t piece = lt_bx() % a.P;
    p->slot = (p->bh * a.M + p->blk) * a.P + piece;
    p->x = geo_box(a.G, p->blk);
    p->w0 = piece * a.PT;
    p->w1 = lt_min(p->w0 + a.PT, p->x.size);
    return p->w0 < p->x.size;
}

/* A 64-token tile of a [B,N,H,DH] bf16 view (unit inner stride, 16-byte
 * rows) in flight: each thread holds IT 16-byte chunks of one row. lt_fetch
 * issues the loads of positions [w0, w0 + nr) of the piece's box (so that
 * they overlap the products of the tile before), lt_stage writes them to
 * shared memory. Rows vary fastest across threads: conflict-free transposed
 * stores, and 16-byte row stores 68 words apart (conflict-free per quarter
 * warp). */
template <int DH> struct lt_tile {
    static constexpr int IT = LT_T * (DH / 8) / LT_THREADS;
    uint4 u[IT];
};
template <int DH>
BWD_DEV inline void lt_fetch(const lt_args &a, const lt_bf *src, const int64_t *st,
                             const lt_piece &p, int64_t w0, int nr, lt_tile<DH> &R) {
    const int r = lt_tid() % LT_T; /* the same row for every chunk of this thread */
    const lt_bf *row = nullptr;
    if (r < nr) row = src + lt_row(st, p.b, geo_tok(a.G, p.x, w0 + r), p.h);
#pragma unroll
    for (int it = 0; it < lt_tile<DH>::IT; it++) {
        const int ch = (lt_tid() + it * LT_THREADS) / LT_T;
        R.u[it] = row ? *reinterpret_cast<const uint4 *>(row + ch * 8) : make_uint4(0, 0, 0, 0);
    }
}
/* The tile as x = hi + lo (two bf16 rows, lo = bf16(x − hi): the pair
 * carries 16 bits of x), row-major (sm, row stride ld) and/or transposed
 * (smT, row stride ldT); NULL parts are not written. f >= 0: x =
 * post·φ(input); else x = input (exact in bf16: lo = 0). Rows nr..63 are
 * zero. */
template <int DH>
BWD_DEV inline void lt_stage(const lt_tile<DH> &R, int nr, int f, float post, lt_bf *sm,
                             lt_bf *sm_lo, int ld, lt_bf *smT, lt_bf *smT_lo, int ldT) {
    const int r = lt_tid() % LT_T;
#pragma unroll
    for (int it = 0; it < lt_tile<DH>::IT; it++) {
        const int ch = (lt_tid() + it * LT_THREADS) / LT_T;
        const uint32_t w[4] = {R.u[it].x, R.u[it].y, R.u[it].z, R.u[it].w};
        lt_bf e[8], l[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            e[j] = (lt_bf)(w[j / 2] >> (16 * (j % 2)));
            l[j] = 0;
        }
        const bool split = sm_lo || smT_lo;
        if (f >= 0 && r < nr) {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float x = post * bwd_feature(f, lt_f(e[j]));
                e[j] = lt_h(x);
                if (split) l[j] = lt_h(x - lt_f(e[j]));
            }
        }
        for (int part = 0; part < 1 + split; part++) {
            const lt_bf *x = part ? l : e;
            lt_bf *rowp = part ? sm_lo : sm, *colp = part ? smT_lo : smT;
            if (rowp) {
                uint4 u;
                u.x = (uint32_t)x[0] | ((uint32_t)x[1] << 16);
                u.y = (uint32_t)x[2] | ((uint32_t)x[3] << 16);
                u.z = (uint32_t)x[4] | ((uint32_t)x[5] << 16);
                u.w = (uint32_t)x[6] | ((uint32_t)x[7] << 16);
                *reinterpret_cast<uint4 *>(rowp + r * ld + ch * 8) = u;
            }
            if (colp) {
#pragma unroll
                for (int j = 0; j < 8; j++) colp[(ch * 8 + j) * ldT + r] = x[j];
            }
        }
    }
}
/* the tile after positions [w0, w0 + 64) of the piece: its row count (0: none) */
BWD_DEV inline int lt_next_rows(const lt_piece &p, int64_t w0) {
    const int64_t wn = w0 + LT_T;
    return wn < p.w1 ? (int)lt_min(LT_T, p.w1 - wn) : 0;
}

/* first row / column of this warp in a DH × DH summary product */
template <int DH> BWD_DEV inline int lt_sum_m0(void) {
    return ((lt_tid() >> 5) % lt_cfg<DH>::WR) * 16;
}
template <int DH> BWD_DEV inline int lt_sum_n0(void) {
    return ((lt_tid() >> 5) / lt_cfg<DH>::WR) * lt_cfg<DH>::SN * 8;
}
/* a summary accumulator into dst[d·DH + c] (fp32) */
template <int DH>
BWD_DEV inline void lt_store_sum(const float (&acc)[lt_cfg<DH>::SN][4], float *dst) {
    const int lane = lt_tid() & 31, g = lane >> 2, c = lane & 3;
    const int r = lt_sum_m0<DH>() + g, c0 = lt_sum_n0<DH>() + 2 * c;
#pragma unroll
    for (int nt = 0; nt < lt_cfg<DH>::SN; nt++) {
        const int col = c0 + nt * 8;
        dst[r * DH + col] = acc[nt][0];
        dst[r * DH + col + 1] = acc[nt][1];
        dst[(r + 8) * DH + col] = acc[nt][2];
        dst[(r + 8) * DH + col + 1] = acc[nt][3];
    }
}
/* a DH × DH fp32 summary as split bf16 rows: sm[d][c] (+ sm_lo) and, when
 * smT is given, smT[c][d] (+ smT_lo); the loads four float4 at a time */
template <int DH>
BWD_DEV inline void lt_load_sum(const float *src, lt_bf *sm, lt_bf *sm_lo, lt_bf *smT,
                                lt_bf *smT_lo) {
    constexpr int LD = lt_cfg<DH>::LD, IT = DH * DH / 4 / LT_THREADS;
    static_assert(IT % 4 == 0, "summary load batches");
    for (int b0 = 0; b0 < IT; b0 += 4) {
        float4 x4[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            x4[j] = reinterpret_cast<const float4 *>(src)[lt_tid() + (b0 + j) * LT_THREADS];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int i = 4 * (lt_tid() + (b0 + j) * LT_THREADS), d = i / DH, c0 = i % DH;
            const float xs[4] = {x4[j].x, x4[j].y, x4[j].z, x4[j].w};
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const int c = c0 + t;
                const lt_bf hi = lt_h(xs[t]), lo = lt_h(xs[t] - lt_f(hi));
                sm[d * LD + c] = hi;
                if (sm_lo) sm_lo[d * LD + c] = lo;
                if (smT) smT[c * LD + d] = hi;
                if (smT_lo) smT_lo[c * LD + d] = lo;
            }
        }
    }
}
/* z[d] = Σ over the threads t ≡ d (mod DH) of their partial sums, in
 * order, through shared memory (after every use of it) */
template <int DH> BWD_DEV inline void lt_store_z(float part, float *z) {
    float *zs = (float *)lt_smem_base();
    lt_sync();
    zs[lt_tid()] = part;
    lt_sync();
    if (lt_tid() < DH) {
        float s = 0.f;
        for (int h = 0; h < LT_THREADS / DH; h++) s += zs[h * DH + lt_tid()];
        z[lt_tid()] = s;
    }
}
/* x = hi + lo of a split shared-memory element (lo NULL: hi alone) */
BWD_DEV inline float lt_x(const lt_bf *hi, const lt_bf *lo, int i) {
    return lo ? lt_f(hi[i]) + lt_f(lo[i]) : lt_f(hi[i]);
}

/* 1. summaries of one piece: part[slot] = [Σ k̃ vᵀ | Σ k̃]. V2: the tiles
 * row-major (16-byte stores), read transposed by ldmatrix.trans; two CTAs
 * per SM. */
template <int DH, bool V2>
__global__ void __launch_bounds__(LT_THREADS, V2 ? 2 : 1) lt_sum_kernel(lt_args a, float *part) {
    using C = lt_cfg<DH>;
    LT_SMEM_DECL;
    /* !V2: [DH][LDT] transposed tiles; V2: [64][LD] row-major ones (no larger) */
    constexpr int TE = V2 ? LT_T * C::LD : DH * C::LDT;
    lt_bf *sKt = (lt_bf *)lt_sm, *sVt = sKt + TE, *sKl = sVt + TE;
    if (!a.precise) sKl = nullptr;
    lt_piece p;
    if (!lt_piece_of(a, &p)) return;
    const int tid = lt_tid();
    float acc[C::SN][4];
    lt_zero(acc);
    float zacc = 0.f;
    lt_tile<DH> Rk, Rv;
    int nrn = (int)lt_min(LT_T, p.w1 - p.w0);
    lt_fetch<DH>(a, a.k, a.ks, p, p.w0, nrn, Rk);
    lt_fetch<DH>(a, a.v, a.vs, p, p.w0, nrn, Rv);
    for (int64_t w0 = p.w0; w0 < p.w1; w0 += LT_T) {
        const int nr = nrn;
        lt_sync();
        if (V2) {
            lt_stage<DH>(Rk, nr, a.f, 1.f, sKt, sKl, C::LD, nullptr, nullptr, 0);
            lt_stage<DH>(Rv, nr, BWD_NO_FEATURE, 1.f, sVt, nullptr, C::LD, nullptr, nullptr, 0);
        } else {
            lt_stage<DH>(Rk, nr, a.f, 1.f, nullptr, nullptr, 0, sKt, sKl, C::LDT);
            lt_stage<DH>(Rv, nr, BWD_NO_FEATURE, 1.f, nullptr, nullptr, 0, sVt, nullptr, C::LDT);
        }
        lt_sync();
        nrn = lt_next_rows(p, w0);
        if (nrn) {
            lt_fetch<DH>(a, a.k, a.ks, p, w0 + LT_T, nrn, Rk);
            lt_fetch<DH>(a, a.v, a.vs, p, w0 + LT_T, nrn, Rv);
        }
        if (V2)
            lt_mma3t<C::SN, true, true>(acc, sKt, sKl, C::LD, sVt, nullptr, C::LD,
                                        lt_sum_m0<DH>(), lt_sum_n0<DH>(), LT_T);
        else
            lt_mma3<C::SN>(acc, sKt, sKl, C::LDT, sVt, nullptr, C::LDT, lt_sum_m0<DH>(),
                           lt_sum_n0<DH>(), LT_T);
        for (int r = tid / DH; r < nr; r += LT_THREADS / DH)
            zacc += lt_x(sKt, sKl, V2 ? r * C::LD + tid % DH : (tid % DH) * C::LDT + r);
    }
    float *dst = part + p.slot * C::SE;
    lt_store_sum<DH>(acc, dst);
    lt_store_z<DH>(zacc, dst + DH * DH);
}

/* 3. the query side of one piece of block i: dq, and
 * part[slot] = [Σ q̃ dnumᵀ | Σ q̃ dden]. With u = dO A_iᵀ (one product):
 * dO·num = q̃·u and dq̃ = u / den + z̃_i dden. */
template <int DH, bool V2>
__global__ void __launch_bounds__(LT_THREADS) lt_query_kernel(lt_args a, const float *Amix,
                                                              float *part) {
    using C = lt_cfg<DH>;
    LT_SMEM_DECL;
    lt_bf *sA = (lt_bf *)lt_sm, *sAl = sA + DH * C::LD, *sQt = sAl + DH * C::LD;
    lt_bf *sQl = sQt + DH * C::LDT, *sG = sQl + DH * C::LDT, *sGt = sG + LT_T * C::LD;
    lt_bf *sGl = sGt + DH * C::LDT;
    float *sZ = (float *)(sGl + DH * C::LDT), *sRed = sZ + DH, *sInv = sRed + LT_T * 8;
    float *sDd = sInv + LT_T;
    if (!a.precise) sAl = sQl = sGl = nullptr;
    lt_piece p;
    if (!lt_piece_of(a, &p)) return;
    const int tid = lt_tid(), w = tid >> 5, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
    const bool normed = a.norm == LA_MHLA_NORM_PER_QUERY;
    /* q̃ (and dnum) of token r, column d: transposed tiles, or (V2) row-major
     * ones in the same space read transposed by ldmatrix.trans */
    auto qi = [&](int d, int r) { return V2 ? r * C::LD + d : d * C::LDT + r; };
    const float *Ai = Amix + (p.bh * a.M + p.blk) * C::SE;
    lt_load_sum<DH>(Ai, sA, sAl, nullptr, nullptr);
    for (int i = tid; i < DH; i += LT_THREADS) sZ[i] = Ai[DH * DH + i];
    const int m0 = (w & 3) * 16, wn = w >> 2, n0 = wn * (DH / 2);
    float dacc[C::SN][4];
    lt_zero(dacc);
    float dz = 0.f;
    lt_tile<DH> Rq, Rg;
    int nrn = (int)lt_min(LT_T, p.w1 - p.w0);
    lt_fetch<DH>(a, a.q, a.qs, p, p.w0, nrn, Rq);
    lt_fetch<DH>(a, a.g, a.gs, p, p.w0, nrn, Rg);
    for (int64_t w0 = p.w0; w0 < p.w1; w0 += LT_T) {
        const int nr = nrn;
        lt_sync();
        if (V2)
            lt_stage<DH>(Rq, nr, a.f, a.scale_q, sQt, sQl, C::LD, nullptr, nullptr, 0);
        else
            lt_stage<DH>(Rq, nr, a.f, a.scale_q, nullptr, nullptr, 0, sQt, sQl, C::LDT);
        lt_stage<DH>(Rg, nr, BWD_NO_FEATURE, 1.f, sG, nullptr, C::LD,
                     normed || V2 ? nullptr : sGt, nullptr, C::LDT);
        lt_sync();
        nrn = lt_next_rows(p, w0);
        if (nrn) {
            lt_fetch<DH>(a, a.q, a.qs, p, w0 + LT_T, nrn, Rq);
            lt_fetch<DH>(a, a.g, a.gs, p, w0 + LT_T, nrn, Rg);
        }
        float acc[C::TN][4]; /* u = dO A_iᵀ: rows tokens, columns d */
        lt_zero(acc);
        if (normed || a.dq)
            lt_mma3v<C::TN, V2>(acc, sG, nullptr, C::LD, sA, sAl, C::LD, m0, n0, DH);
        if (normed) {
            float s0 = 0.f, s1 = 0.f;
#pragma unroll
            for (int nt = 0; nt < C::TN; nt++) {
                const int col = n0 + nt * 8 + 2 * c4, r = m0 + g;
                s0 += acc[nt][0] * lt_x(sQt, sQl, qi(col, r)) +
                      acc[nt][1] * lt_x(sQt, sQl, qi(col + 1, r));
                s1 += acc[nt][2] * lt_x(sQt, sQl, qi(col, r + 8)) +
                      acc[nt][3] * lt_x(sQt, sQl, qi(col + 1, r + 8));
            }
            sRed[(m0 + g) * 8 + wn * 4 + c4] = s0;
            sRed[(m0 + g + 8) * 8 + wn * 4 + c4] = s1;
            if (tid < LT_T) {
                float den = 0.f;
                for (int d = 0; d < DH; d++) den += lt_x(sQt, sQl, qi(d, tid)) * sZ[d];
                sInv[tid] = tid < nr ? 1.f / (den + a.eps) : 0.f;
            }
            lt_sync();
            if (tid < LT_T) {
                float gn = 0.f;
                for (int j = 0; j < 8; j++) gn += sRed[tid * 8 + j];
                const float iv = sInv[tid];
                sDd[tid] = -gn * iv * iv;
            }
            /* dnum = dO / den, transposed (V2: row-major) and split */
            for (int i = tid; i < LT_T * DH; i += LT_THREADS) {
                const int r = V2 ? i / DH : i % LT_T, c = V2 ? i % DH : i / LT_T;
                const float x = lt_f(sG[r * C::LD + c]) * sInv[r];
                const lt_bf hi = lt_h(x);
                sGt[qi(c, r)] = hi;
                if (sGl) sGl[qi(c, r)] = lt_h(x - lt_f(hi));
            }
            lt_sync();
        }
        if (a.dq) {
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                const int r = m0 + g + 8 * hr;
                if (r >= nr) continue;
                const int64_t tok = geo_tok(a.G, p.x, w0 + r);
                const float dd = normed ? sDd[r] : 0.f, iv = normed ? sInv[r] : 1.f;
                const lt_bf *qr = a.q + lt_row(a.qs, p.b, tok, p.h);
                lt_bf *dr = a.dq + lt_row(a.dqs, p.b, tok, p.h);
                uint32_t raw[C::TN]; /* every load before any store */
#pragma unroll
                for (int nt = 0; nt < C::TN; nt++) raw[nt] = lt_ld32(qr + n0 + nt * 8 + 2 * c4);
#pragma unroll
                for (int nt = 0; nt < C::TN; nt++) {
                    const int col = n0 + nt * 8 + 2 * c4;
                    float x0 = acc[nt][2 * hr] * iv + sZ[col] * dd;
                    float x1 = acc[nt][2 * hr + 1] * iv + sZ[col + 1] * dd;
                    x0 *= a.scale_q * bwd_feature_grad(a.f, lt_f((lt_bf)raw[nt]));
                    x1 *= a.scale_q * bwd_feature_grad(a.f, lt_f((lt_bf)(raw[nt] >> 16)));
                    lt_st2(dr + col, x0, x1);
                }
            }
        }
        /* dA_i += q̃ᵀ dnum, dz̃_i += q̃ᵀ dden */
        if (V2)
            lt_mma3t<C::SN, true, true>(dacc, sQt, sQl, C::LD, normed ? sGt : sG,
                                        normed ? sGl : nullptr, C::LD, lt_sum_m0<DH>(),
                                        lt_sum_n0<DH>(), LT_T);
        else
            lt_mma3<C::SN>(dacc, sQt, sQl, C::LDT, sGt, normed ? sGl : nullptr, C::LDT,
                           lt_sum_m0<DH>(), lt_sum_n0<DH>(), LT_T);
        if (normed)
            for (int r = tid / DH; r < nr; r += LT_THREADS / DH)
                dz += lt_x(sQt, sQl, qi(tid % DH, r)) * sDd[r];
    }
    float *dst = part + p.slot * C::SE;
    lt_store_sum<DH>(dacc, dst);
    lt_store_z<DH>(dz, dst + DH * DH);
}

/* 5. the key side of one piece of block b: dk, dv from dS_b = [dS | dz]
 * (bf16 operands as the same formula in bf16: no split). V2: fragments by
 * ldmatrix, dS read transposed by ldmatrix.trans (no transposed copy), two
 * CTAs per SM. */
template <int DH, bool V2>
__global__ void __launch_bounds__(LT_THREADS, V2 ? 2 : 1) lt_key_kernel(lt_args a, const float *dS) {
    using C = lt_cfg<DH>;
    LT_SMEM_DECL;
    lt_bf *sS = (lt_bf *)lt_sm, *sSt = V2 ? nullptr : sS + DH * C::LD;
    lt_bf *sK = sS + (V2 ? 1 : 2) * DH * C::LD;
    lt_bf *sV = sK + LT_T * C::LD;
    float *sDz = (float *)(sV + LT_T * C::LD);
    lt_piece p;
    if (!lt_piece_of(a, &p)) return;
    const int tid = lt_tid(), w = tid >> 5, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
    const float *Sb = dS + (p.bh * a.M + p.blk) * C::SE;
    lt_load_sum<DH>(Sb, sS, nullptr, sSt, nullptr);
    for (int i = tid; i < DH; i += LT_THREADS) sDz[i] = Sb[DH * DH + i];
    const int m0 = (w & 3) * 16, n0 = (w >> 2) * (DH / 2);
    lt_tile<DH> Rk, Rv;
    int nrn = (int)lt_min(LT_T, p.w1 - p.w0);
    lt_fetch<DH>(a, a.k, a.ks, p, p.w0, nrn, Rk);
    lt_fetch<DH>(a, a.v, a.vs, p, p.w0, nrn, Rv);
    for (int64_t w0 = p.w0; w0 < p.w1; w0 += LT_T) {
        const int nr = nrn;
        lt_sync();
        lt_stage<DH>(Rk, nr, a.f, 1.f, sK, nullptr, C::LD, nullptr, nullptr, 0);
        lt_stage<DH>(Rv, nr, BWD_NO_FEATURE, 1.f, sV, nullptr, C::LD, nullptr, nullptr, 0);
        lt_sync();
        nrn = lt_next_rows(p, w0);
        if (nrn) {
            lt_fetch<DH>(a, a.k, a.ks, p, w0 + LT_T, nrn, Rk);
            lt_fetch<DH>(a, a.v, a.vs, p, w0 + LT_T, nrn, Rv);
        }
        for (int which = 0; which < 2; which++) {
            lt_bf *out = which ? a.dv : a.dk;
            if (!out) continue;
            float acc[C::TN][4];
            lt_zero(acc);
            if (which && V2) /* dv = k̃ dS */
                lt_mma_ld<C::TN, false, true>(acc, sK, C::LD, sS, C::LD, m0, n0, DH);
            else if (which)
                lt_mma_rows<C::TN>(acc, sK, C::LD, sSt, C::LD, m0, n0, DH);
            else if (V2) /* dk̃ = v dSᵀ */
                lt_mma_ld<C::TN, false, false>(acc, sV, C::LD, sS, C::LD, m0, n0, DH);
            else
                lt_mma_rows<C::TN>(acc, sV, C::LD, sS, C::LD, m0, n0, DH);
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                const int r = m0 + g + 8 * hr;
                if (r >= nr) continue;
                const int64_t tok = geo_tok(a.G, p.x, w0 + r);
                lt_bf *dr = out + lt_row(which ? a.dvs : a.dks, p.b, tok, p.h);
                const lt_bf *kr = a.k + lt_row(a.ks, p.b, tok, p.h);
                uint32_t raw[C::TN]; /* every load before any store */
#pragma unroll
                for (int nt = 0; nt < C::TN; nt++)
                    raw[nt] = which ? 0u : lt_ld32(kr + n0 + nt * 8 + 2 * c4);
#pragma unroll
                for (int nt = 0; nt < C::TN; nt++) {
                    const int col = n0 + nt * 8 + 2 * c4;
                    float x0 = acc[nt][2 * hr], x1 = acc[nt][2 * hr + 1];
                    if (!which) {
                        x0 = (x0 + sDz[col]) * bwd_feature_grad(a.f, lt_f((lt_bf)raw[nt]));
                        x1 = (x1 + sDz[col + 1]) * bwd_feature_grad(a.f, lt_f((lt_bf)(raw[nt] >> 16)));
                    }
                    lt_st2(dr + col, x0, x1);
                }
            }
        }
    }
}

/* out[bm][e] = Σ_p part[bm][p][e] over the pieces of the block, in order */
__global__ void lt_reduce_kernel(int64_t total, lbk_geo G, int64_t M, int64_t P, int64_t PT,
                                 int64_t SE, const float *part, float *out) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t e = i % SE, bm = i / SE, blk = bm % M;
    const int64_t np = (geo_box(G, blk).size + PT - 1) / PT;
    const float *src = part + bm * P * SE + e;
    float s = 0.f;
    for (int64_t p = 0; p < np; p++) s += src[p * SE];
    out[i] = s;
}

void lt_strides(const la_tensor *t, int64_t *s) {
    for (int i = 0; i < 3; i++) s[i] = t ? t->nb[i] : 0;
}

/* mma2: the mixing products on lt2_gemm_run (linblock_bwd_mix2.cu), W
 * zero-padded to Mp = 32·⌈M/32⌉ columns, every operand split as in `mma`:
 * the harness bounds dq, dk, dv by twice the error of the formula with only
 * num, den, dnum, dden and the outputs rounded to bf16 (not S, A, dA, dS),
 * and d_mixing by 1e-4 */
la_status lt2_mix(int64_t BH, int64_t H, int64_t Hw, int64_t M, int64_t Mp, int64_t SE,
                  const float *Wp, const float *Sb, float *Amix, cudaStream_t s) {
    lt2_gemm m;
    memset(&m, 0, sizeof m);
    m.A = Wp, m.aZ = Mp * Mp, m.aMod = Hw == 1 ? 1 : H, m.lda = Mp, m.aT = 0, m.splitA = 1;
    m.B = Sb, m.bZ = M * SE, m.ldb = SE, m.bT = 0, m.splitB = 1;
    m.C = Amix, m.cZ = M * SE, m.ldc = SE;
    m.rows = M, m.cols = SE, m.K = M, m.splits = 1;
    return lt2_gemm_run(m, BH, s);
}
la_status lt2_dw(int64_t BH, int64_t M, int64_t SE, int64_t splits, int64_t kper, const float *dA,
                 const float *Sb, float *dWp, cudaStream_t s) {
    lt2_gemm m;
    memset(&m, 0, sizeof m);
    m.A = dA, m.aZ = M * SE, m.aMod = 0, m.lda = SE, m.aT = 0, m.splitA = 1;
    m.B = Sb, m.bZ = M * SE, m.ldb = SE, m.bT = 1, m.splitB = 1;
    m.C = dWp, m.cZ = M * M, m.ldc = M;
    m.rows = M, m.cols = M, m.K = SE, m.splits = splits, m.kper = kper;
    return lt2_gemm_run(m, BH, s);
}
la_status lt2_ds(int64_t BH, int64_t H, int64_t Hw, int64_t M, int64_t Mp, int64_t SE,
                 const float *Wp, const float *dA, float *dS, cudaStream_t s) {
    lt2_gemm m;
    memset(&m, 0, sizeof m);
    m.A = Wp, m.aZ = Mp * Mp, m.aMod = Hw == 1 ? 1 : H, m.lda = Mp, m.aT = 1, m.splitA = 1;
    m.B = dA, m.bZ = M * SE, m.ldb = SE, m.bT = 0, m.splitB = 1;
    m.C = dS, m.cZ = M * SE, m.ldc = SE;
    m.rows = M, m.cols = SE, m.K = M, m.splits = 1;
    return lt2_gemm_run(m, BH, s);
}

template <int DH> la_status lt_run(const lbt_problem *pr, cudaStream_t s) {
    using C = lt_cfg<DH>;
    const int64_t B = pr->q->ne[0], N = pr->q->ne[1], H = pr->q->ne[2], BH = B * H, M = pr->M;
    const int64_t SE = C::SE;
    lt_args a;
    memset(&a, 0, sizeof a);
    a.q = (const lt_bf *)pr->q->data;
    a.k = (const lt_bf *)pr->k->data;
    a.v = (const lt_bf *)pr->v->data;
    a.g = (const lt_bf *)pr->d_out->data;
    a.dq = pr->dq ? (lt_bf *)pr->dq->data : nullptr;
    a.dk = pr->dk ? (lt_bf *)pr->dk->data : nullptr;
    a.dv = pr->dv ? (lt_bf *)pr->dv->data : nullptr;
    lt_strides(pr->q, a.qs);
    lt_strides(pr->k, a.ks);
    lt_strides(pr->v, a.vs);
    lt_strides(pr->d_out, a.gs);
    lt_strides(pr->dq, a.dqs);
    lt_strides(pr->dk, a.dks);
    lt_strides(pr->dv, a.dvs);
    a.G.chunk = 0;
    a.G.N = N;
    int64_t maxsz = 1; /* no box is longer than ceil(n/g) along an axis */
    for (int x = 0; x < 3; x++) {
        a.G.n[x] = pr->n[x];
        a.G.g[x] = pr->g[x];
        maxsz *= lt_cdiv(pr->n[x], pr->g[x]);
    }
    const int64_t want = lt_cdiv(LT_TARGET_CTAS, BH * M);
    int64_t PT = lt_cdiv(lt_cdiv(maxsz, want), LT_T) * LT_T;
    const int64_t P = lt_cdiv(maxsz, PT);
    a.H = H;
    a.M = M;
    a.P = P;
    a.PT = PT;
    a.f = pr->feature;
    a.norm = pr->norm;
    a.scale_q = pr->scale_q;
    a.eps = pr->eps;
    const bool mix = pr->mixing != nullptr, want_dw = mix && pr->d_mixing;
    a.precise = want_dw;
    const bool v2 = pr->variant == 2;

    const int64_t Hw = mix && pr->mixing->ndim == 3 ? pr->mixing->ne[0] : 1;
    /* dW: the SE summary elements in `splits` ranges (enough CTAs to fill the GPU) */
    const int64_t tilesW = lt_cdiv(M, 64) * lt_cdiv(M, 64);
    int64_t splits = lt_cdiv(4 * LT_TARGET_CTAS, tilesW * BH);
    if (splits > 64) splits = 64;
    if (splits > 65535 / BH) splits = 65535 / BH;
    if (splits < 1) splits = 1;
    const int64_t kper = lt_cdiv(lt_cdiv(SE, splits), LT_MG_K) * LT_MG_K;
    splits = lt_cdiv(SE, kper);

    bwd_ws ws;
    float *part = nullptr, *Sb, *Amix = nullptr, *dA, *W = nullptr, *dWp = nullptr, *dWf = nullptr;
    float *Wp = nullptr;
    const int64_t Mp = lt_cdiv(M, 32) * 32;
    if (P > 1) ws.want(&part, BH * M * P, SE);
    ws.want(&Sb, BH * M, SE);
    if (mix) {
        ws.want(&Amix, BH * M, SE); /* the mixed summaries, then dS */
        ws.want(&W, Hw, M, M);
        if (v2) ws.want(&Wp, Hw, Mp, Mp);
    }
    ws.want(&dA, BH * M, SE);
    if (want_dw) {
        ws.want(&dWp, BH * splits, M, M);
        ws.want(&dWf, Hw, M, M);
    }
    LA_TRY(ws.alloc(s, "linear-family backward (tensor cores)"));

    const size_t sm_sum = (size_t)3 * DH * C::LDT * 2;
    const size_t sm_q = ((size_t)2 * DH * C::LD + LT_T * C::LD + 4 * DH * C::LDT) * 2 +
                        ((size_t)DH + LT_T * 8 + 2 * LT_T) * 4;
    const size_t sm_k = ((size_t)(v2 ? 1 : 2) * DH * C::LD + 2 * LT_T * C::LD) * 2 + (size_t)DH * 4;

    {
        auto sum_kernel = v2 ? lt_sum_kernel<DH, true> : lt_sum_kernel<DH, false>;
        LT_LAUNCH(sum_kernel, M * P, BH, sm_sum, s, a, P > 1 ? part : Sb);
    }
    if (P > 1) BWD_LAUNCH(lt_reduce_kernel, BH * M * SE, s, a.G, M, P, PT, SE, part, Sb);
    const float *Ause = Sb;
    lt_gemm m;
    if (mix) {
        LA_TRY(bwd_pack(s, pr->mixing, W));
        if (v2) LA_TRY(lt2_pad_mixing(Hw, M, Mp, W, Wp, s));
    }
    if (mix && v2) {
        LA_TRY(lt2_mix(BH, H, Hw, M, Mp, SE, Wp, Sb, Amix, s));
        Ause = Amix;
    } else if (mix) {
        /* A_i = Σ_b W[i,b] S_b */
        memset(&m, 0, sizeof m);
        m.A = W, m.aZ = M * M, m.aMod = Hw == 1 ? 1 : H, m.aI = M, m.aK = 1;
        m.B = Sb, m.bZ = M * SE, m.bK = SE, m.bJ = 1;
        m.C = Amix, m.cZ = M * SE, m.cI = SE;
        m.rows = M, m.cols = SE, m.K = M, m.splits = 1;
        LA_TRY(lt_gemm_run(m, BH, s));
        Ause = Amix;
    }
    {
        auto query_kernel = v2 ? lt_query_kernel<DH, true> : lt_query_kernel<DH, false>;
        LT_LAUNCH(query_kernel, M * P, BH, sm_q, s, a, Ause, P > 1 ? part : dA);
    }
    if (P > 1) BWD_LAUNCH(lt_reduce_kernel, BH * M * SE, s, a.G, M, P, PT, SE, part, dA);
    if (want_dw) {
        /* dW[i,b] = ⟨dA_i, S_b⟩ per (batch, head, range), then summed */
        if (v2) {
            LA_TRY(lt2_dw(BH, M, SE, splits, kper, dA, Sb, dWp, s));
        } else {
            memset(&m, 0, sizeof m);
            m.A = dA, m.aZ = M * SE, m.aMod = 0, m.aI = SE, m.aK = 1;
            m.B = Sb, m.bZ = M * SE, m.bK = 1, m.bJ = SE;
            m.C = dWp, m.cZ = M * M, m.cI = M;
            m.rows = M, m.cols = M, m.K = SE, m.splits = splits, m.kper = kper;
            LA_TRY(lt_gemm_run(m, BH, s));
        }
        LA_TRY(lt_dw_reduce(B, H, Hw, splits, M * M, dWp, dWf, s));
        LA_TRY(bwd_unpack(s, pr->d_mixing, dWf));
    }
    if (pr->dk || pr->dv) {
        const float *dS = dA;
        if (mix) {
            /* dS_b = Σ_i W[i,b] dA_i (into the dead mixed summaries) */
            if (v2) {
                LA_TRY(lt2_ds(BH, H, Hw, M, Mp, SE, Wp, dA, Amix, s));
            } else {
                memset(&m, 0, sizeof m);
                m.A = W, m.aZ = M * M, m.aMod = Hw == 1 ? 1 : H, m.aI = 1, m.aK = M;
                m.B = dA, m.bZ = M * SE, m.bK = SE, m.bJ = 1;
                m.C = Amix, m.cZ = M * SE, m.cI = SE;
                m.rows = M, m.cols = SE, m.K = M, m.splits = 1;
                LA_TRY(lt_gemm_run(m, BH, s));
            }
            dS = Amix;
        }
        {
            auto key_kernel = v2 ? lt_key_kernel<DH, true> : lt_key_kernel<DH, false>;
            LT_LAUNCH(key_kernel, M * P, BH, sm_k, s, a, dS);
        }
    }
    return LA_OK;
}

bool lt_view_ok(const la_tensor *t, int64_t DH) {
    if (!t) return true;
    if (t->dtype != LA_BF16 || t->ndim != 4 || t->ne[3] != DH || t->nb[3] != 1) return false;
    for (int i = 0; i < 3; i++)
        if (t->nb[i] % 8) return false;
    return ((uintptr_t)t->data & 15) == 0;
}

} // namespace

int lbt_eligible(const lbt_problem *p) {
    if (!p->q || !p->k || !p->v || !p->d_out) return 0;
    const int64_t DH = p->q->ne[3];
    if ((DH != 64 && DH != 128) || p->v->ne[3] != DH) return 0;
    if (p->norm != LA_MHLA_NORM_NONE && p->norm != LA_MHLA_NORM_PER_QUERY) return 0;
    /* identity features under per_query normalization: denominators may
     * cross zero, and d_mixing's fp32 bound needs the fp32 engine there */
    if (p->norm == LA_MHLA_NORM_PER_QUERY && p->feature == LA_FEATURE_IDENTITY) return 0;
    const int64_t BH = p->q->ne[0] * p->q->ne[2];
    if (BH < 1 || BH > 65535 || p->M < 1 || p->q->ne[1] < 1) return 0;
    return lt_view_ok(p->q, DH) && lt_view_ok(p->k, DH) && lt_view_ok(p->v, DH) &&
           lt_view_ok(p->d_out, DH) && lt_view_ok(p->dq, DH) && lt_view_ok(p->dk, DH) &&
           lt_view_ok(p->dv, DH);
}

la_status lbt_backward(const lbt_problem *p, cudaStream_t s) {
    return p->q->ne[3] == 128 ? lt_run<128>(p, s) : lt_run<64>(p, s);
}
