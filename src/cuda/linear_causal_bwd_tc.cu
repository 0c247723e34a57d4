/* Causal linear attention backward on tensor cores (TRAINING.md §1; family
 * "linear_bwd", variant "mma"): bf16 [B,N,H,D] views, D = Dv in {64, 128}
 * (templates on DH), every feature map, normalize or not, initial state,
 * final-state gradient and (without normalize) initial-state gradient.
 *
 * With q̃ = s·φ(q) (s = scale_q; the kernels hold φq = φ(q) in bf16 and
 * apply s in fp32), k̃ = φ(k), S_t = S_in + Σ_{j≤t} k̃_j v_jᵀ, z_t = z_in +
 * Σ_{j≤t} k̃_j, the forward is o_t = q̃_tᵀS_t / (q̃_t·z_t + eps) (normalize)
 * or q̃_tᵀS_t. Per token the backward needs u_t = S_t g_t (g = d_out),
 * r_t = 1/den_t and the per-token weights
 *     w_t = s·r_t,  e_t = −s²·(φq_t·u_t)·r_t²      (normalize)
 *     w_t = s,      e_t = 0                          (not)
 * so that dφq_t = w_t·u_t + e_t·z_t, and with g''_t = w_t·g_t and the
 * state gradients dH_t = dS_out + Σ_{i>t} φq_i g''_iᵀ, dZ_t = dz_out +
 * Σ_{i>t} e_i φq_i (i > t: later tiles; the tile itself is the masked part):
 *     dk̃_t = Σ_{i≥t} φq_i (g''_i·v_t + e_i) + dH v_t + dZ,
 *     dv_t = Σ_{i≥t} g''_i (φq_i·k̃_t) + dHᵀ k̃_t.
 *
 * A head's tokens are cut into state chunks of L tokens (a multiple of 64,
 * about three waves of CTAs), each walked in tiles of 64 by one CTA:
 *   1. lc_sum_kernel (K̃ᵀV): ΔS_c = Σ_c k̃ vᵀ, Δz_c = Σ_c k̃ per chunk;
 *   2. lc_scan_fwd: h_c = S_in + Σ_{c'<c} ΔS_c' (fp32, in place);
 *   3. lc_dq_kernel, forward walk with the running state h (fp32 registers,
 *      bf16 copy in shared memory): P = tril(G Vᵀ), u = P K̃ + G hᵀ,
 *      z_t = z + tril(1) K̃ (normalize: den, w, e to workspace), dq;
 *   4. lc_sum_kernel (Φqᵀ G''): ΔdH_c, ΔdZ_c (= Σ e φq) per chunk;
 *   5. lc_scan_rev: dH_c = dS_out + Σ_{c'>c} ΔdH_c', d_S_in = the total;
 *   6. lc_dkv_kernel, reverse walk with the running dH: M = triu(V G''ᵀ +
 *      1eᵀ), A = triu(K̃ Φqᵀ), dk̃ = M Φq + V dHᵀ + dZ, dv = A G'' + K̃ dH.
 * Without normalize, 4 needs nothing of 3: 1 and 4 are one launch.
 * No atomics; every sum in a fixed order: bit-identical across calls.
 *
 * Products on mma.sync m16n8k16 (bf16 operands, fp32 accumulation), the
 * fragments by ldmatrix (.trans for the operands read across rows) from
 * row-major bf16 tiles: q, k, v, d_out tiles of 64 tokens arrive by
 * cp.async into two buffers (the next tile's copies overlap this tile's
 * products), φ and the g'' scaling are applied in place. Rounding: φq, k̃, v, g (inputs), P, M, A, g'' and the
 * bf16 state copies take bf16; states, den, w, e and all sums fp32. The
 * initial-state gradient (fp32, held to 1e-4) is ΔdH with unscaled g (exact
 * in bf16) and φq split as hi + lo where φ is inexact in bf16, scaled by s
 * in fp32; with normalize it depends on bf16-level u, so that case stays on
 * the portable engine. The same kernel text runs on the host emulator
 * (bwd_emu.cuh) under LA_BWD_EMU. With lcb_problem.mix (causal MHLA,
 * mhla_causal_bwd_tc.cu) a chunk is one 64-token block, steps 2 and 5 are
 * the mixing products and W[c,c] scales the block's own part. */
#include <math.h>

#include <algorithm>

#include "cuda/linear_causal_bwd_tiles.cuh"

namespace {

/* ---- 1 / 4: state sums of a chunk -------------------------------------------
 * which 0: ΔS = Σ k̃ vᵀ, Δz = Σ k̃; which 1: ΔdH = Σ φq g''ᵀ, ΔdZ = Σ e φq
 * (without normalize: g'' = s·g, taken as Σ φq gᵀ times s in fp32, e = 0).
 * The column sums are one more product against the weight row 0 of sW
 * (rows 1..15 zero). which 2 (without normalize, where the second needs
 * nothing of the dq walk): both in one launch, blocks x < nsum0 the first
 * (chunk x), the others the second (chunk c0 + x − nsum0), so that the
 * CTAs of the two fill the same waves. */
template <int DH> struct lc_sum_smem { /* byte offsets */
    using C = lc_cfg<DH>;
    /* A, B: two buffers each (buffer i at + i·RT) */
    static constexpr size_t A = 0, B = A + 2 * C::RT, W = B + 2 * C::RT, AL = W + 2 * 16 * C::LT,
                            TOTAL = AL + C::RT;
};
template <int DH>
__global__ void __launch_bounds__(LT_THREADS, 2) lc_sum_kernel(lc_args a, int which_arg) {
    using C = lc_cfg<DH>;
    using S = lc_sum_smem<DH>;
    constexpr int LD = C::LD, LT = C::LT;
    LT_SMEM_DECL;
    const int64_t bx = lt_bx();
    const int which = which_arg == 2 ? (bx < a.nsum0 ? 0 : 1) : which_arg;
    const int64_t c = which_arg == 2 ? (which ? a.c0 + bx - a.nsum0 : bx) : a.c0 + bx;
    lt_bf *sW = (lt_bf *)(lt_sm + S::W);
    lt_bf *sAl = a.split && which == 1 ? (lt_bf *)(lt_sm + S::AL) : nullptr; /* φq's remainder */
    const int tid = lt_tid(), warp = tid >> 5, lane = tid & 31, g = lane >> 2, cq = lane & 3;
    const int64_t bh = lt_by(), b = bh / a.H, h = bh % a.H;
    const int64_t t0c = c * a.L, t1c = lt_min(a.N, t0c + a.L);
    const int m0 = 16 * (warp % C::RB), n0 = C::SN * 8 * (warp / C::RB);
    const bool norm = a.norm != 0;
    lc_zero_bf(sW, 16 * LT);
    float acc[C::SN][4], zacc[2][4];
    lt_zero(acc);
    lt_zero(zacc);
    const lc_src src[2] = {{which ? a.q : a.k, which ? a.qs : a.ks, S::A},
                           {which ? a.g : a.v, which ? a.gs : a.vs, S::B}};
    lc_issue_tiles<DH>(src, b, h, t0c, t1c, 0, lt_sm);
    lc_commit();
    int cur = 0;
    for (int64_t t0 = t0c; t0 < t1c; t0 += LT_T, cur ^= 1) {
        const int nr = (int)lt_min(LT_T, t1c - t0);
        lt_bf *sA = lc_buf<DH>(lt_sm, S::A, cur), *sB = lc_buf<DH>(lt_sm, S::B, cur);
        lt_sync(); /* the previous tile is done with every buffer */
        lc_next_tile(t0 + LT_T < t1c, [&] { lc_issue_tiles<DH>(src, b, h, t0 + LT_T, t1c, cur ^ 1, lt_sm); });
        lc_map<DH>(sA, nr, a.f, 1.f, nullptr, sAl);
        if (which == 0) {
            if (tid < LT_T) sW[tid] = tid < nr ? (lt_bf)0x3f80 : (lt_bf)0; /* 1.0 */
        } else {
            lc_map<DH>(sB, nr, BWD_NO_FEATURE, 1.f, norm ? a.w + bh * a.N + t0 : nullptr);
            if (tid < LT_T) sW[tid] = lt_h(norm && tid < nr ? a.e[bh * a.N + t0 + tid] : 0.f);
        }
        lt_sync();
        lc_mma<C::SN, true, true>(acc, sA, LD, sB, LD, m0, n0, LT_T);
        if (sAl) lc_mma<C::SN, true, true>(acc, sAl, LD, sB, LD, m0, n0, LT_T);
        if (n0 == 0) lc_mma<2, true, false>(zacc, sA, LD, sW, LT, m0, 0, LT_T);
    }
    const float fs = which == 1 && !norm ? a.scale_q : 1.f;
    float *dst = (which ? a.dhs : a.hs) + (bh * a.nch + c) * C::SE;
    lc_state_store<DH>(acc, dst, fs);
    if (n0 == 0 && cq == 0) {
        dst[DH * DH + m0 + g] = zacc[0][0];
        dst[DH * DH + m0 + g + 8] = zacc[0][2];
    }
}

/* ---- 2 / 5: the scans over chunks, one thread per state element ----------
 * Each thread reads LC_SCAN_BATCH chunks' values before it writes any of
 * them, so that the loads of a batch are in flight together (one load at a
 * time, the scans were bound by the memory latency, 32 round trips per
 * thread at 32 chunks); the additions keep their order. */
#ifndef LA_BWD_EMU
#define LC_SCAN_BATCH 16
#else /* the emulator's few chunks (nch <= 6) still cross a batch boundary */
#define LC_SCAN_BATCH 4
#endif
static __global__ void lc_scan_fwd(int64_t total, float *hs, const float *S_in, int64_t nch,
                                   int64_t SE) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t bh = i / SE, e = i % SE;
    float *p = hs + bh * nch * SE + e;
    float x = S_in ? S_in[i] : 0.f;
    for (int64_t c0 = 0; c0 < nch; c0 += LC_SCAN_BATCH) {
        float d[LC_SCAN_BATCH];
#pragma unroll
        for (int j = 0; j < LC_SCAN_BATCH; j++) /* the last ΔS is not computed */
            d[j] = c0 + j + 1 < nch ? p[(c0 + j) * SE] : 0.f;
#pragma unroll
        for (int j = 0; j < LC_SCAN_BATCH; j++)
            if (c0 + j < nch) {
                p[(c0 + j) * SE] = x;
                x += d[j];
            }
    }
}
static __global__ void lc_scan_rev(int64_t total, float *dhs, const float *dS_out, float *dS_in,
                                   int64_t nch, int64_t SE, int64_t c0) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t bh = i / SE, e = i % SE;
    float *p = dhs + bh * nch * SE + e;
    float x = dS_out ? dS_out[i] : 0.f;
    for (int64_t c1 = nch - 1; c1 >= 0; c1 -= LC_SCAN_BATCH) { /* chunks c1, c1 - 1, ... */
        float d[LC_SCAN_BATCH];
#pragma unroll
        for (int j = 0; j < LC_SCAN_BATCH; j++)
            d[j] = c1 - j >= c0 ? p[(c1 - j) * SE] : 0.f;
#pragma unroll
        for (int j = 0; j < LC_SCAN_BATCH; j++)
            if (c1 - j >= 0) {
                p[(c1 - j) * SE] = x;
                x += d[j];
            }
    }
    if (dS_in) dS_in[i] = x;
}

/* ---- 3: dq, forward walk over the chunk's tiles -----------------------------
 * grid (chunks, B·H), one CTA per SM. Warp w: token rows 16(w % 4), columns
 * 32(w / 4) of the 64 × 64 products and DH/2·(w / 4) of the 64 × DH ones;
 * state rows and columns as lc_state_load. Per tile:
 *   P = tril(G Vᵀ) → bf16;  Z = tril(1) K̃ + z (normalize);
 *   u = P K̃ + G hᵀ;  h += K̃ᵀ V (not after the chunk's last tile);
 *   normalize: den = s·φq·Z + eps, w, e per row (to workspace);
 *   dq = φ'(q)·(w u + e Z) through the fp32 staging tile. */
template <int DH> struct lc_dq_smem { /* byte offsets */
    using C = lc_cfg<DH>;
    /* Q, V, G, K: two buffers each (buffer i at + i·RT) */
    static constexpr size_t Q = 0, V = Q + 2 * C::RT, G = V + 2 * C::RT, K = G + 2 * C::RT,
                            HS = K + 2 * C::RT, P = HS + C::ST, TRI = P + C::PT, STAGE = TRI + C::PT,
                            ZP = STAGE + 4 * LT_T * C::LS, PART = ZP + 4 * DH,
                            WR = PART + 4 * 2 * LT_T * 8, ER = WR + 4 * LT_T, TOTAL = ER + 4 * LT_T;
    static_assert(TOTAL <= 227 * 1024, "lc_dq_kernel shared memory");
};
template <int DH> __global__ void __launch_bounds__(LT_THREADS, 1) lc_dq_kernel(lc_args a) {
    using C = lc_cfg<DH>;
    using S = lc_dq_smem<DH>;
    constexpr int LD = C::LD, LT = C::LT;
    LT_SMEM_DECL;
    lt_bf *sH = (lt_bf *)(lt_sm + S::HS), *sP = (lt_bf *)(lt_sm + S::P), *sTri = (lt_bf *)(lt_sm + S::TRI);
    float *stage = (float *)(lt_sm + S::STAGE), *zp = (float *)(lt_sm + S::ZP);
    float *part = (float *)(lt_sm + S::PART), *wr = (float *)(lt_sm + S::WR), *er = (float *)(lt_sm + S::ER);
    const int tid = lt_tid(), warp = tid >> 5, lane = tid & 31, g = lane >> 2, cq = lane & 3;
    const int64_t bh = lt_by(), b = bh / a.H, h = bh % a.H, c = lt_bx();
    const int64_t t0c = c * a.L, t1c = lt_min(a.N, t0c + a.L);
    const bool norm = a.norm != 0;
    const float s = a.scale_q;
    const float *hsrc = a.hs + (bh * a.nch + c) * C::SE;
    const float wii = lc_wdiag(a, h, c);
    const int m0 = 16 * (warp & 3), pn0 = 32 * (warp >> 2), un0 = (DH / 2) * (warp >> 2);
    const int sm0 = 16 * (warp % C::RB), sn0 = C::SN * 8 * (warp / C::RB);
    float hacc[C::SN][4];
    lc_state_begin<DH>(hacc, hsrc, sH, zp);
    for (int i = tid; i < LT_T * LT_T; i += LT_THREADS)
        sTri[(i / LT_T) * LT + i % LT_T] = (i % LT_T) <= (i / LT_T) ? (lt_bf)0x3f80 : (lt_bf)0;
    lc_issue_qkvg<DH, S, false>(a, b, h, t0c, t1c, 0, lt_sm);
    lc_commit();
    int cur = 0;
    for (int64_t t0 = t0c; t0 < t1c; t0 += LT_T, cur ^= 1) {
        const int nr = (int)lt_min(LT_T, t1c - t0);
        const bool more = t0 + LT_T < t1c;
        lt_bf *sQ = lc_buf<DH>(lt_sm, S::Q, cur), *sV = lc_buf<DH>(lt_sm, S::V, cur);
        lt_bf *sG = lc_buf<DH>(lt_sm, S::G, cur), *sK = lc_buf<DH>(lt_sm, S::K, cur);
        lt_sync(); /* the previous tile is done with every buffer */
        if (t0 > t0c) lc_state_to_smem<DH>(hacc, sH);
        lc_next_tile(more, [&] { lc_issue_qkvg<DH, S, false>(a, b, h, t0 + LT_T, t1c, cur ^ 1, lt_sm); });
        lc_map<DH>(sQ, nr, a.f, 1.f, nullptr);
        lc_map<DH>(sK, nr, a.f, 1.f, nullptr);
        lt_sync();
        float pacc[4][4];
        lt_zero(pacc);
        lc_mma<4, false, false>(pacc, sG, LD, sV, LD, m0, pn0, DH);
        lc_store64<LT>(pacc, sP, m0, pn0, false, nullptr, wii);
        float zacc[C::TN][4];
        lt_zero(zacc);
        if (norm) {
            lc_mma<C::TN, false, true>(zacc, sTri, LT, sK, LD, m0, un0, LT_T);
#pragma unroll
            for (int nt = 0; nt < C::TN; nt++) {
                const int col = un0 + 8 * nt + 2 * cq;
                zacc[nt][0] = wii * zacc[nt][0] + zp[col];
                zacc[nt][1] = wii * zacc[nt][1] + zp[col + 1];
                zacc[nt][2] = wii * zacc[nt][2] + zp[col];
                zacc[nt][3] = wii * zacc[nt][3] + zp[col + 1];
            }
        }
        lt_sync(); /* P complete; every read of z done */
        if (norm && m0 == 48 && g == 7) /* z after the tile: row 63 of Z */
#pragma unroll
            for (int nt = 0; nt < C::TN; nt++) {
                const int col = un0 + 8 * nt + 2 * cq;
                zp[col] = zacc[nt][2], zp[col + 1] = zacc[nt][3];
            }
        float uacc[C::TN][4];
        lt_zero(uacc);
        lc_mma<C::TN, false, true>(uacc, sP, LT, sK, LD, m0, un0, LT_T);
        lc_mma<C::TN, false, false>(uacc, sG, LD, sH, LD, m0, un0, DH);
        if (more) lc_mma<C::SN, true, true>(hacc, sK, LD, sV, LD, sm0, sn0, LT_T);
        if (norm) { /* per row: φq·Z and φq·u, 8 partial sums each, summed in order */
            float pz[2] = {0.f, 0.f}, pu[2] = {0.f, 0.f};
#pragma unroll
            for (int nt = 0; nt < C::TN; nt++) {
                const int col = un0 + 8 * nt + 2 * cq;
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const int r = m0 + g + 8 * hh;
                    const float f0 = lt_f(sQ[r * LD + col]), f1 = lt_f(sQ[r * LD + col + 1]);
                    pz[hh] += f0 * zacc[nt][2 * hh] + f1 * zacc[nt][2 * hh + 1];
                    pu[hh] += f0 * uacc[nt][2 * hh] + f1 * uacc[nt][2 * hh + 1];
                }
            }
            const int slot = (warp >> 2) * 4 + cq;
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                part[(m0 + g + 8 * hh) * 8 + slot] = pz[hh];
                part[(LT_T + m0 + g + 8 * hh) * 8 + slot] = pu[hh];
            }
            lt_sync();
            if (tid < LT_T) {
                float qz = 0.f, qu = 0.f;
                for (int j = 0; j < 8; j++) qz += part[tid * 8 + j], qu += part[(LT_T + tid) * 8 + j];
                float w = 0.f, e = 0.f;
                if (tid < nr) {
                    const float r = 1.f / (s * qz + a.eps);
                    w = s * r;
                    e = -s * s * qu * r * r;
                    a.w[bh * a.N + t0 + tid] = w;
                    a.e[bh * a.N + t0 + tid] = e;
                }
                wr[tid] = w, er[tid] = e;
            }
            lt_sync();
        }
        lc_stage<DH>(stage, m0, un0, [&](int nt, int hh, int r, int) {
            const float ww = norm ? wr[r] : s, ee = norm ? er[r] : 0.f;
            return make_float2(ww * uacc[nt][2 * hh] + ee * zacc[nt][2 * hh],
                               ww * uacc[nt][2 * hh + 1] + ee * zacc[nt][2 * hh + 1]);
        });
        lt_sync();
        lc_write<DH>(stage, a.dq, a.dqs, a.q, a.qs, a.f, b, h, t0, nr);
    }
}

/* ---- 6: dk, dv, reverse walk over the chunk's tiles -------------------------
 * grid (chunks, B·H), one CTA per SM; warps as lc_dq_kernel. Per tile, last
 * to first, with the running dH (fp32 registers, a bf16 copy in shared
 * memory) and dZ (fp32, shared memory):
 *   M = triu(V G''ᵀ + 1eᵀ), A = triu(K̃ Φqᵀ) → bf16;
 *   dk = φ'(k)·(M Φq + V dHᵀ + dZ), dv = A G'' + K̃ dH;
 *   dH += Φqᵀ G'', dZ += Φqᵀ e (not after the chunk's first tile). */
template <int DH> struct lc_dkv_smem { /* byte offsets */
    using C = lc_cfg<DH>;
    /* V, K, Q, G: two buffers each (buffer i at + i·RT) */
    static constexpr size_t V = 0, K = V + 2 * C::RT, Q = K + 2 * C::RT, G = Q + 2 * C::RT,
                            DS = G + 2 * C::RT, M = DS + C::ST, A = M + C::PT, W = A + C::PT,
                            STAGE = W + 2 * 16 * C::LT, DZ = STAGE + 4 * LT_T * C::LS,
                            ER = DZ + 4 * DH, TOTAL = ER + 4 * LT_T;
    static_assert(TOTAL <= 227 * 1024, "lc_dkv_kernel shared memory");
};
template <int DH> __global__ void __launch_bounds__(LT_THREADS, 1) lc_dkv_kernel(lc_args a) {
    using C = lc_cfg<DH>;
    using S = lc_dkv_smem<DH>;
    constexpr int LD = C::LD, LT = C::LT;
    LT_SMEM_DECL;
    lt_bf *sD = (lt_bf *)(lt_sm + S::DS);
    lt_bf *sM = (lt_bf *)(lt_sm + S::M), *sA = (lt_bf *)(lt_sm + S::A), *sW = (lt_bf *)(lt_sm + S::W);
    float *stage = (float *)(lt_sm + S::STAGE), *dz = (float *)(lt_sm + S::DZ);
    float *er = (float *)(lt_sm + S::ER);
    const int tid = lt_tid(), warp = tid >> 5, lane = tid & 31, g = lane >> 2, cq = lane & 3;
    const int64_t bh = lt_by(), b = bh / a.H, h = bh % a.H, c = lt_bx();
    const int64_t t0c = c * a.L, t1c = lt_min(a.N, t0c + a.L);
    const bool norm = a.norm != 0;
    const float s = a.scale_q;
    const float *dsrc = a.dhs + (bh * a.nch + c) * C::SE;
    const float wii = lc_wdiag(a, h, c);
    float dwii = 0.f; /* this thread's part of Σ M ⊙ A (dW[c,c]), before the scaling */
    const float gpost = norm || a.gs1 ? 1.f : s, mas = a.gs1 ? wii * s : wii;
    const int m0 = 16 * (warp & 3), pn0 = 32 * (warp >> 2), un0 = (DH / 2) * (warp >> 2);
    const int sm0 = 16 * (warp % C::RB), sn0 = C::SN * 8 * (warp / C::RB);
    float hacc[C::SN][4];
    lc_state_begin<DH>(hacc, dsrc, sD, dz);
    for (int i = tid; i < 16 * LT; i += LT_THREADS) sW[i] = 0;
    const int64_t tlast = t0c + LT_T * ((t1c - t0c - 1) / LT_T);
    lc_issue_qkvg<DH, S, true>(a, b, h, tlast, t1c, 0, lt_sm);
    lc_commit();
    int cur = 0;
    for (int64_t t0 = tlast; t0 >= t0c; t0 -= LT_T, cur ^= 1) {
        const int nr = (int)lt_min(LT_T, t1c - t0);
        const bool more = t0 > t0c;
        lt_bf *sV = lc_buf<DH>(lt_sm, S::V, cur), *sK = lc_buf<DH>(lt_sm, S::K, cur);
        lt_bf *sQ = lc_buf<DH>(lt_sm, S::Q, cur), *sG = lc_buf<DH>(lt_sm, S::G, cur);
        lt_sync(); /* the previous tile is done with every buffer */
        if (t0 < tlast) lc_state_to_smem<DH>(hacc, sD);
        lc_next_tile(more, [&] { lc_issue_qkvg<DH, S, true>(a, b, h, t0 - LT_T, t1c, cur ^ 1, lt_sm); });
        lc_map<DH>(sK, nr, a.f, 1.f, nullptr);
        lc_map<DH>(sQ, nr, a.f, 1.f, nullptr);
        lc_map<DH>(sG, nr, BWD_NO_FEATURE, gpost, norm ? a.w + bh * a.N + t0 : nullptr);
        if (tid < LT_T) {
            const float e = norm && tid < nr ? a.e[bh * a.N + t0 + tid] : 0.f;
            er[tid] = e;
            sW[tid] = lt_h(e);
        }
        lt_sync();
        float macc[4][4], aacc[4][4];
        lt_zero(macc);
        lc_mma<4, false, false>(macc, sV, LD, sG, LD, m0, pn0, DH);
        lc_store64<LT>(macc, sM, m0, pn0, true, norm ? er : nullptr, mas);
        lt_zero(aacc);
        lc_mma<4, false, false>(aacc, sK, LD, sQ, LD, m0, pn0, DH);
        lc_store64<LT>(aacc, sA, m0, pn0, true, nullptr, mas);
        if (a.dwd)
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int rr = m0 + g + 8 * (e >> 1), cc = pn0 + 8 * nt + 2 * cq + (e & 1);
                    if (cc >= rr) dwii += (macc[nt][e] + (norm ? er[cc] : 0.f)) * aacc[nt][e];
                }
        lt_sync();
        float kacc[C::TN][4];
        lt_zero(kacc);
        lc_mma<C::TN, false, true>(kacc, sM, LT, sQ, LD, m0, un0, LT_T);
        lc_mma<C::TN, false, false>(kacc, sV, LD, sD, LD, m0, un0, DH);
        lc_stage<DH>(stage, m0, un0, [&](int nt, int hh, int, int col) {
            return make_float2(kacc[nt][2 * hh] + dz[col], kacc[nt][2 * hh + 1] + dz[col + 1]);
        });
        float vacc[C::TN][4];
        lt_zero(vacc);
        lc_mma<C::TN, false, true>(vacc, sA, LT, sG, LD, m0, un0, LT_T);
        lc_mma<C::TN, false, true>(vacc, sK, LD, sD, LD, m0, un0, DH);
        float zacc[2][4];
        lt_zero(zacc);
        if (more) {
            lc_mma<C::SN, true, true>(hacc, sQ, LD, sG, LD, sm0, sn0, LT_T);
            if (norm && sn0 == 0) lc_mma<2, true, false>(zacc, sQ, LD, sW, LT, sm0, 0, LT_T);
        }
        lt_sync(); /* dk staged; every read of dZ done */
        if (more && norm && sn0 == 0 && cq == 0) {
            dz[sm0 + g] += zacc[0][0];
            dz[sm0 + g + 8] += zacc[0][2];
        }
        lc_write<DH>(stage, a.dk, a.dks, a.k, a.ks, a.f, b, h, t0, nr);
        lt_sync();
        lc_stage<DH>(stage, m0, un0, [&](int nt, int hh, int, int) {
            return make_float2(vacc[nt][2 * hh], vacc[nt][2 * hh + 1]);
        });
        lt_sync();
        lc_write<DH>(stage, a.dv, a.dvs, nullptr, nullptr, BWD_NO_FEATURE, b, h, t0, nr);
    }
    if (a.dwd) { /* the threads' parts in a fixed order */
        lt_sync();
        stage[tid] = dwii;
        lt_sync();
        if (tid == 0) {
            float sum = 0.f;
            for (int i = 0; i < LT_THREADS; i++) sum += stage[i];
            a.dwd[bh * a.nch + c] = a.gs1 ? s * sum : sum;
        }
    }
}

bool lc_view_ok(const la_tensor *t, int64_t DH) {
    if (!t) return true;
    if (t->dtype != LA_BF16 || t->ndim != 4 || t->ne[3] != DH || t->nb[3] != 1) return false;
    for (int i = 0; i < 3; i++)
        if (t->nb[i] % 8) return false;
    return ((uintptr_t)t->data & 15) == 0;
}
void lc_strides(const la_tensor *t, int64_t *s) {
    for (int i = 0; i < 3; i++) s[i] = t ? t->nb[i] : 0;
}

template <int DH> la_status lc_run(const lcb_problem *p, const la_context *ctx, cudaStream_t s) {
    using C = lc_cfg<DH>;
    lc_args a;
    memset(&a, 0, sizeof a);
    a.q = (const lt_bf *)p->q->data;
    a.k = (const lt_bf *)p->k->data;
    a.v = (const lt_bf *)p->v->data;
    a.g = (const lt_bf *)p->d_out->data;
    a.dq = p->dq ? (lt_bf *)p->dq->data : nullptr;
    a.dk = p->dk ? (lt_bf *)p->dk->data : nullptr;
    a.dv = p->dv ? (lt_bf *)p->dv->data : nullptr;
    lc_strides(p->q, a.qs), lc_strides(p->k, a.ks), lc_strides(p->v, a.vs);
    lc_strides(p->d_out, a.gs), lc_strides(p->dq, a.dqs), lc_strides(p->dk, a.dks);
    lc_strides(p->dv, a.dvs);
    const int64_t B = p->q->ne[0], N = p->q->ne[1], H = p->q->ne[2], BH = B * H;
    a.N = N, a.H = H;
    a.f = p->feature, a.norm = p->normalize != 0;
    a.scale_q = p->scale_q, a.eps = p->eps;
    /* split φq where the fp32 initial-state gradient is asked for and φ is
     * not exact in bf16 */
    a.split = p->dS_in && (p->feature == LA_FEATURE_RELU_EPS || p->feature == LA_FEATURE_RELU1 ||
                           p->feature == LA_FEATURE_ELU1);
    int nsm = 2; /* the host emulator: chunks of several tiles from small N on */
#ifndef LA_BWD_EMU
    int dev = 0;
    LA_CU(cudaGetDevice(&dev));
    LA_CU(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
#endif
    /* state chunk: about three waves of the walking kernels (one CTA per SM);
     * with the mixing, one tile (the block) */
    const lcb_mixing *mix = p->mix;
    const int64_t tiles = lt_cdiv(N, LT_T);
    const int64_t per_head = std::max<int64_t>(1, lt_cdiv(3 * (int64_t)nsm, BH));
    a.L = mix ? LT_T : LT_T * lt_cdiv(tiles, per_head);
    a.nch = lt_cdiv(N, a.L);
    bwd_ws ws;
    float *mixed = nullptr, *dmixed = nullptr; /* H_c and dS_c with the mixing */
    ws.want(&a.hs, BH, a.nch, C::SE);
    ws.want(&a.dhs, BH, a.nch, C::SE);
    if (mix) {
        ws.want(&mixed, BH, a.nch, C::SE);
        ws.want(&dmixed, BH, a.nch, C::SE);
        a.mixw = mix->W, a.mix_hs = mix->Hw == 1 ? 0 : mix->WM * mix->WM, a.mix_ld = mix->WM;
        a.dwd = mix->dWd;
        a.gs1 = !a.norm;
    }
    if (a.norm) {
        ws.want(&a.w, BH, N);
        ws.want(&a.e, BH, N);
    }
    LA_TRY(ws.alloc(s, "causal linear backward chunk states"));
    la_cu_report(ctx, mix ? "mhla_causal_bwd" : "linear_bwd", "mma",
                 "causal B*H=%lld N=%lld D=%d L=%lld chunks=%lld split=%d", (long long)BH,
                 (long long)N, DH, (long long)a.L, (long long)a.nch, a.split);

    /* with the mixing every chunk's sums are needed (S_b for dW, G_i for dS) */
    const size_t sm_sum = a.split ? lc_sum_smem<DH>::TOTAL : lc_sum_smem<DH>::AL;
    a.c0 = 0;
    if (mix) {
        LT_LAUNCH(lc_sum_kernel<DH>, a.nch, BH, sm_sum, s, a, 0);
        LA_TRY(mcb_combine(mix, a.hs, mixed, BH, H, a.nch, C::SE, s));
        lc_args am = a;
        am.hs = mixed;
        LT_LAUNCH(lc_dq_kernel<DH>, a.nch, BH, lc_dq_smem<DH>::TOTAL, s, am);
        LT_LAUNCH(lc_sum_kernel<DH>, a.nch, BH, sm_sum, s, a, 1);
        LA_TRY(mcb_combine_bwd(mix, a.dhs, a.hs, dmixed, BH, H, a.nch, C::SE, s));
        am.dhs = dmixed;
        if (a.dk || a.dv || a.dwd)
            LT_LAUNCH(lc_dkv_kernel<DH>, a.nch, BH, lc_dkv_smem<DH>::TOTAL, s, am);
        return LA_OK;
    }
    /* ΔS of chunks 0..nch−2 and ΔdH of chunks c0..nch−1 (c0 = 1 unless d_S_in
     * is asked for); without normalize both in one launch */
    a.c0 = p->dS_in ? 0 : 1;
    a.nsum0 = a.nch - 1;
    if (!a.norm && a.nsum0 + a.nch - a.c0 > 0)
        LT_LAUNCH(lc_sum_kernel<DH>, a.nsum0 + a.nch - a.c0, BH, sm_sum, s, a, 2);
    if (a.norm && a.nch > 1) {
        lc_args a0 = a;
        a0.c0 = 0;
        LT_LAUNCH(lc_sum_kernel<DH>, a.nch - 1, BH, sm_sum, s, a0, 0);
    }
    BWD_LAUNCH(lc_scan_fwd, BH * C::SE, s, a.hs, p->S_in, a.nch, C::SE);
    LT_LAUNCH(lc_dq_kernel<DH>, a.nch, BH, lc_dq_smem<DH>::TOTAL, s, a);
    if (a.norm && a.nch > a.c0) LT_LAUNCH(lc_sum_kernel<DH>, a.nch - a.c0, BH, sm_sum, s, a, 1);
    BWD_LAUNCH(lc_scan_rev, BH * C::SE, s, a.dhs, p->dS_out, p->dS_in, a.nch, C::SE, a.c0);
    if (a.dk || a.dv) LT_LAUNCH(lc_dkv_kernel<DH>, a.nch, BH, lc_dkv_smem<DH>::TOTAL, s, a);
    return LA_OK;
}

} // namespace

int lcb_eligible(const la_linear_params *p, const la_tensor *q, const la_tensor *k,
                 const la_tensor *v, const la_tensor *d_out, const la_tensor *dq,
                 const la_tensor *dk, const la_tensor *dv, int want_dS_in) {
    if (!p->causal || !q || !k || !v || !d_out) return 0;
    const int64_t DH = q->ne[3];
    if ((DH != 64 && DH != 128) || v->ne[3] != DH) return 0;
    if (p->normalize && (want_dS_in || p->feature == LA_FEATURE_IDENTITY)) return 0;
    const int64_t BH = q->ne[0] * q->ne[2];
    /* at least one full chunk: below it the state form's bf16 rounding of the
     * D x Dv state is not amortized over tokens (one-token dv/dq/dk errors
     * reach twice a plain bf16 formula's), and the fp32 engine costs nothing */
    if (BH < 1 || BH > 65535 || q->ne[1] < 64) return 0;
    return lc_view_ok(q, DH) && lc_view_ok(k, DH) && lc_view_ok(v, DH) && lc_view_ok(d_out, DH) &&
           lc_view_ok(dq, DH) && lc_view_ok(dk, DH) && lc_view_ok(dv, DH);
}

la_status lcb_backward(const lcb_problem *p, const la_context *ctx, cudaStream_t s) {
    return p->q->ne[3] == 128 ? lc_run<128>(p, ctx, s) : lc_run<64>(p, ctx, s);
}
