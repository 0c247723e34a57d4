/* Causal linear attention (SPEC §3) on 16-bit tensor cores (mma.sync
 * m16n8k16, fp32 accumulation) for D = Dv ∈ {32, 64, 128} (templates on D,
 * lct_g: the text below gives the D = 128 sizes) and bf16 or fp16 [B,N,H,D]
 * rows (passes 1 and 3 are templates on the element type E, tc16.cuh; the
 * text says bf16 for either).
 *
 * With q̃ = scale_q·φ(q), k̃ = φ(k), a head's tokens are cut into state chunks
 * of L tokens (L a multiple of 64, chosen for about three waves of CTAs; it is
 * internal: the user's `chunk` only changes rounding, SPEC §3):
 *
 *   1. lct_state_mma_kernel, grid (chunks, B·H): ΔS_c = K̃_cᵀV_c (128×128, fp32)
 *      and Δz_c = Σ k̃ (fp32 sums of the fp32 φ values). K and V tiles of 64
 *      tokens arrive by cp.async, 3 stages. When S_out is asked for and φ(k)
 *      is not exact in bf16 (relu_eps, relu1, elu1), k̃ = hi + lo with two
 *      bf16 halves and two products, so that the returned state keeps fp32
 *      accuracy (rel ~1e-6 instead of 2^-9).
 *   2. lct_scan_wide_kernel (lct_scan_kernel: the walking one), per entry
 *      of (S, z) over the chunks: the exclusive prefix P_c = S_in +
 *      Σ_{c'<c} ΔS_c' in place of ΔS_c (fp32), and the final state into
 *      S_out / z_out.
 *   3. lct_output_mma_kernel, grid (chunks, B·H), one CTA per SM: the
 *      running state S starts as P_c in fp32 accumulators and a bf16 copy
 *      S̃ in shared memory; for each tile of 64
 *      tokens (Q, K, V by cp.async, double-buffered):
 *          A   = tril(Q̃ K̃ᵀ)               (64×64, fp32 → masked → bf16)
 *          num = Q̃ S̃ + A V,   den = q̃·z + rowsum(A)     (fp32)
 *          S  += K̃ᵀ V,        z  += Σ k̃,   S̃ = bf16(S)
 *      which is the CPU path's chunkwise form (src/cpu/linear_cpu.c) with
 *      chunk 64 inside a state chunk of L.
 * Causal MHLA (lct_mixing, mhla_causal_tc.cu) runs the same passes with L =
 * 64 (a chunk is a block), the mixing of the chunk states in place of pass 2
 * and W[c,c] on the block's own part in pass 3 (lct_mixing.combine_bf16: the
 * states in bf16 from pass 1 to pass 3, the kernels' BS instantiations;
 * combine_f16s: the same in fp16, each block state scaled by its own power
 * of two, sexp from pass 1 and hexp into pass 3).
 *
 * Passes 1 and 3 use raw ldmatrix + mma.sync m16n8k16 fragments: A =
 * tril(Q̃K̃ᵀ) stays in registers as the A operand of A·V, row sums and S̃
 * come straight from the accumulator fragments, φ is instantiated per mode.
 * Pass 2 is the wide scan (linear_causal_scan.cu: every load up front, one
 * barrier) up to 255 chunk states, else the walking one; pass 3 has its
 * causal blocks unrolled per row block (no predicated ldmatrix/mma pairs).
 * (WMMA versions of passes 1 and 3, the predicated pass 3 and pass 1 on
 * sub-chunks were slower or no faster: removed, docs/CUDA.md.)
 *
 * Rounding: the products take φ(q), φ(k), V, A and S̃ in bf16 (the inputs are
 * bf16 already); states, denominators and all sums are fp32. Bytes: Q, K, V
 * read + O written once, K, V once more in pass 1, and the chunk states
 * (66 KB each) written and read about twice.
 *
 * fp16 (largest finite value 65504, 11 significant bits): the same passes;
 * the states, z, the denominators and every sum stay fp32, and the two
 * 16-bit copies of sums that enter an mma in pass 3 are scaled by powers of
 * two (exact; undone in fp32):
 *   S̃ = fp16(S·2^s), s putting max |S| over the CTA's state in [2^14, 2^15)
 *       (each warp's max meets in shared memory before the barrier that
 *       precedes the copy: one extra barrier per CTA, and per tile 64 max
 *       and 64 multiplies per thread at D = 128); the state grows with N
 *       (past 65504 at N = 256K, inputs ×10), so s is taken for every tile;
 *   A  = fp16(tril(Q̃K̃ᵀ)·2^a) per query row, max |A| of the row in
 *       [2^14, 2^15) (a ≤ 24): |A| reaches D·65504² in fp16; the Q̃S̃ part
 *       of the numerator is brought to the same 2^a in its fp32 accumulators
 *       (Q̃S̃·2^{a-s}) before A·V is added, and 2^-a joins the row's output
 *       factor.
 * Pass 1 needs no scale (its fp32 accumulators are the state). The hi/lo
 * split of k̃ stays for the returned state: fp16 rounding of φ(k) errs by
 * 2^-12 per element, ~1e-4 in S_out against the fp32 1e-5 it is held to;
 * hi + lo keeps ~22 bits. The fp16 output rounds a true value past 65504 to
 * Inf (as torch does; docs/DTYPES.md). */
#include "linear_causal_tc.cuh"
#include "ptx.cuh"
#include "select.cuh"
#include "tc16.cuh"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "linear_causal_args.cuh"

namespace {

/* Raw tensor-core fragments (the default path): ldmatrix from the padded rows
 * (LD = 136 bf16 = 68 words: the 8 row addresses of one 8×8 matrix fall on 8
 * distinct 4-bank groups) and mma.sync m16n8k16; the cp.async / ldmatrix /
 * mma helpers and the fragment layouts are in ptx.cuh. */

template <typename E> __device__ __forceinline__ void unpack8(const E *p, float x[8]) {
    using X = la_t16<E>;
    const uint4 u = *(const uint4 *)p;
    const typename X::T2 *h2 = (const typename X::T2 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = X::unpack2(h2[i]);
        x[2 * i] = f.x;
        x[2 * i + 1] = f.y;
    }
}
template <typename E> __device__ __forceinline__ uint4 pack8(const float x[8]) {
    using X = la_t16<E>;
    uint4 u;
    typename X::T2 *h2 = (typename X::T2 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) h2[i] = X::pack2(x[2 * i], x[2 * i + 1]);
    return u;
}

constexpr int TS1 = 3; /* pass 1: stages of K, V tiles */

/* Geometry per head dim D = Dv ∈ {32, 64, 128} (the kernels are templates on
 * it). A thread copies 16-byte chunk tid % CK of rows tid/CK + RPT·u (u < UR)
 * of every 64-row tile. State (ΔS in pass 1, the running S in pass 3): warps
 * w < SWN own rows SR·(w % SWR) + [0, SR) and columns SC·(w / SWR) + [0, SC)
 * (MIS × NJS fragments; at D = 32 four warps, the other four skip the state
 * products). Pass 3 outputs: warp w takes columns CWO·(w / 4) + [0, CWO). */
template <int D> struct lct_g {
    static constexpr int LD = D + 8;      /* bf16 smem row stride of Q/K/V/S̃ tiles */
    static constexpr int TILE = T * LD;   /* bf16 elements of one 64-row tile      */
    static constexpr int LS = D * D + D;  /* floats of one chunk state             */
    static constexpr int CK = D / 8, RPT = NT / CK, UR = T / RPT;
    static constexpr int SR = D == 128 ? 32 : 16, SC = D == 128 ? 64 : D == 64 ? 32 : 16;
    static constexpr int MIS = SR / 16, NJS = SC / 8, SWR = D / SR, SWN = SWR * (D / SC);
    static constexpr int CWO = D / 2, NJO = CWO / 8, KK = D / 16;
    static constexpr int OLD = CWO + 8;   /* bf16 row stride of a warp's 16-row output staging tile */
    static_assert(SWN <= 8 && NJS % 2 == 0 && NJO % 2 == 0 && UR * RPT == T, "causal tc geometry");
};

/* ==== passes 1 and 3: ldmatrix + mma.sync fragments ==================== */

/* The five feature maps in one branch-light form: x ≥ 0: x + c; x < 0: x
 * (identity), c (relu, relu_eps, relu1), e^x (elu1); the mode is uniform, so
 * one branch per 8 values instead of la_cu_feature's switch per value (same
 * results: max(x, 0) + c with NaN propagated, x ≥ 0 ? x + 1 : e^x). */
struct lct_phi {
    int mode; /* 0 identity, 1 relu family, 2 elu1 */
    float c;
};
__device__ __forceinline__ lct_phi lct_phi_of(int feat) {
    lct_phi r;
    r.mode = feat == LA_FEATURE_IDENTITY ? 0 : feat == LA_FEATURE_ELU1 ? 2 : 1; /* = lct_mode_of */
    r.c = feat == LA_FEATURE_RELU_EPS ? 1e-6f : feat == LA_FEATURE_RELU1 ? 1.f : 0.f;
    return r;
}
template <int MODE> /* the kernels are instantiated per mode: no branch at all */
__device__ __forceinline__ void lct_phi8(float *x, const lct_phi &f) {
    if (MODE == 1) {
#pragma unroll
        for (int i = 0; i < 8; i++) x[i] = la_relu_nan(x[i]) + f.c;
    } else if (MODE == 2) {
#pragma unroll
        for (int i = 0; i < 8; i++) x[i] = x[i] >= 0.f ? x[i] + 1.f : expf(x[i]);
    }
}
template <typename E> __device__ __forceinline__ E lct_to16(float x) { /* round to nearest even */
    if constexpr (la_t16<E>::is_f16) return __float2half_rn(x);
    else return __float2bfloat16_rn(x);
}
template <typename E = __nv_bfloat16> __device__ __forceinline__ uint32_t lct_pack2(float lo, float hi) {
    const typename la_t16<E>::T2 h = la_t16<E>::pack2(lo, hi);
    return *(const uint32_t *)&h;
}

/* ---- pass 1 (mma): chunk states. grid (chunks with a state to compute,
 * B·H), 256 threads. Thread tid copies 16-byte piece (tid % 16) of rows
 * tid/16 + 16u (u < 4) of every tile (cp.async, TS1 stages) and applies φ to
 * exactly those pieces, so a cp.async.wait_group of its own copies is all it
 * needs before that. Warp w owns rows 32(w%4) + [0, 32) and columns
 * 64(w/4) + [0, 64) of ΔS: per 16 tokens 2 (4 with hi/lo) ldmatrix.trans of
 * K̃ᵀ, 4 of V, 16 (32) mma. */
/* E: bf16 or fp16; BS: 16-bit states into a.wsh (bf16 as they are; fp16
 * scaled: below); SMX (fp16 causal MHLA, variant mma): the block's max
 * |[S_b | z_b]| into a.smax[bh] */
/* max |x| over a warp's state fragments (0 in warps that hold none: sw
 * false), then over the warp's lanes: fp16's state scales, passes 1 and 3 */
template <int MI, int NJ>
__device__ __forceinline__ float lct_warp_absmax(const float (&acc)[MI][NJ][4], bool sw) {
    float m = 0.f;
    if (sw)
#pragma unroll
        for (int i = 0; i < MI; i++)
#pragma unroll
            for (int j = 0; j < NJ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) m = fmaxf(m, fabsf(acc[i][j][e]));
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    return m;
}

template <typename E, int D, int MODE, bool SPLIT, bool BS = false, bool SMX = false>
__global__ void __launch_bounds__(NT, 2) lct_state_mma_kernel(lct_args a) {
    using G = lct_g<D>;
    using X = la_t16<E>;
    static_assert(!BS || !SPLIT, "16-bit block states: causal MHLA only (no returned state)");
    static_assert(!SMX || (X::is_f16 && !SPLIT && !BS), "state maxima: fp16 causal MHLA only");
    /* fp16 block states (variant mma_f16s): S'_b = fp16([S_b | z_b]·2^σ), σ =
     * la_exp16 of the block's own max |[S_b | z_b]| (over the CTA: it holds
     * the whole block), so |S'_b| <= 2^15 < 65504 (the max in [2^14, 2^15),
     * fp16 rounding at most to 2^15); σ into a.sexp. Elements below 2^-14
     * (2^28 under the max) become subnormals: their absolute error 2^-25 is
     * 2^-39 of the block's max, far below the 2^-11 relative rounding of the
     * elements near it. σ <= 126 (la_exp16's clamp) only leaves blocks under
     * 2^-112 short of 2^14 (no overflow either way). */
    constexpr bool FS = BS && X::is_f16;
    constexpr int LD = G::LD, TILE = G::TILE, LS = G::LS, CK = G::CK, RPT = G::RPT;
    extern __shared__ __align__(128) unsigned char lct_sm2[];
    E *sm = (E *)lct_sm2;
    const int nmat = SPLIT ? 3 : 2;
    const int64_t bh = blockIdx.y, b = bh / a.H, h = bh % a.H, c = blockIdx.x;
    const int64_t t0 = c * a.L, t1 = min(a.N, t0 + a.L);
    const int nt = (int)((t1 - t0 + T - 1) / T);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, cq = lane % 4, li = lane % 8, lj = lane / 8;
    const int c8 = (tid & (CK - 1)) * 8, r0 = tid / CK;
    const lct_phi ph = lct_phi_of(a.feat);
    const E *kb = (const E *)a.k + b * a.ks[0] + h * a.ks[2] + c8;
    const E *vb = (const E *)a.v + b * a.vs[0] + h * a.vs[2] + c8;

    auto issue = [&](int t) {
        if (t < nt) {
            E *Ks = sm + (t % TS1) * nmat * TILE, *Vs = Ks + TILE;
#pragma unroll
            for (int u = 0; u < G::UR; u++) {
                const int r = r0 + RPT * u;
                const int64_t tok = t0 + (int64_t)t * T + r;
                const bool ok = tok < t1;
                const int64_t tk = ok ? tok : 0;
                la_cp16z(&Ks[r * LD + c8], kb + tk * a.ks[1], ok);
                la_cp16z(&Vs[r * LD + c8], vb + tk * a.vs[1], ok);
            }
        }
        la_cp_commit();
    };
#pragma unroll
    for (int t = 0; t < TS1 - 1; t++) issue(t);

    const int rb = G::SR * (warp % G::SWR), cb = G::SC * (warp / G::SWR);
    const bool sw = G::SWN == 8 || warp < G::SWN; /* a state warp */
    float acc[G::MIS][G::NJS][4];
#pragma unroll
    for (int i = 0; i < G::MIS; i++)
#pragma unroll
        for (int j = 0; j < G::NJS; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;
    float zp[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};

    for (int t = 0; t < nt; t++) {
        la_cp_wait<TS1 - 2>();
        E *Ks = sm + (t % TS1) * nmat * TILE, *Vs = Ks + TILE, *Kl = Vs + TILE;
#pragma unroll
        for (int u = 0; u < G::UR; u++) {
            const int r = r0 + RPT * u;
            E *p = &Ks[r * LD + c8];
            float x[8], lo[8];
            if (t0 + (int64_t)t * T + r < t1) {
                unpack8<E>(p, x);
                lct_phi8<MODE>(x, ph);
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    zp[i] += x[i];
                    lo[i] = x[i] - X::round(x[i]);
                }
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) x[i] = lo[i] = 0.f;
            }
            /* rows past the end: zero-filled by cp.async (k̃ = 0, φ(0) need not be 0) */
            if (MODE != 0 && t0 + (int64_t)t * T + r < t1) *(uint4 *)p = pack8<E>(x);
            if (SPLIT) *(uint4 *)&Kl[r * LD + c8] = pack8<E>(lo);
        }
        __syncthreads();
        issue(t + TS1 - 1);
        if (sw) {
#pragma unroll
            for (int kk = 0; kk < T; kk += 16) {
                uint32_t ka[G::MIS][4], kl[G::MIS][4];
#pragma unroll
                for (int i = 0; i < G::MIS; i++)
                    la_ldsm4t(ka[i], &Ks[(kk + 8 * (lj >> 1) + li) * LD + rb + 16 * i + 8 * (lj & 1)]);
                if (SPLIT)
#pragma unroll
                    for (int i = 0; i < G::MIS; i++)
                        la_ldsm4t(kl[i], &Kl[(kk + 8 * (lj >> 1) + li) * LD + rb + 16 * i + 8 * (lj & 1)]);
#pragma unroll
                for (int jp = 0; jp < G::NJS / 2; jp++) {
                    uint32_t bv[4];
                    la_ldsm4t(bv, &Vs[(kk + 8 * (lj & 1) + li) * LD + cb + 16 * jp + 8 * (lj >> 1)]);
#pragma unroll
                    for (int i = 0; i < G::MIS; i++) {
                        X::mma(acc[i][2 * jp], ka[i], bv[0], bv[1]);
                        X::mma(acc[i][2 * jp + 1], ka[i], bv[2], bv[3]);
                    }
                    if (SPLIT)
#pragma unroll
                        for (int i = 0; i < G::MIS; i++) {
                            X::mma(acc[i][2 * jp], kl[i], bv[0], bv[1]);
                            X::mma(acc[i][2 * jp + 1], kl[i], bv[2], bv[3]);
                        }
                }
            }
        }
    }
    float *dst = a.ws + ((size_t)bh * a.nch + c) * LS;
    E *dsh = (E *)a.wsh + ((size_t)bh * a.nch + c) * LS;
    if (!FS && sw)
#pragma unroll
        for (int i = 0; i < G::MIS; i++)
#pragma unroll
            for (int j = 0; j < G::NJS; j++) {
                const int row = rb + 16 * i + g, col = cb + 8 * j + 2 * cq;
                if (BS) {
                    *(uint32_t *)&dsh[row * D + col] = lct_pack2(acc[i][j][0], acc[i][j][1]);
                    *(uint32_t *)&dsh[(row + 8) * D + col] = lct_pack2(acc[i][j][2], acc[i][j][3]);
                } else {
                    *(float2 *)&dst[row * D + col] = make_float2(acc[i][j][0], acc[i][j][1]);
                    *(float2 *)&dst[(row + 8) * D + col] = make_float2(acc[i][j][2], acc[i][j][3]);
                }
            }
    float smw = 0.f; /* SMX, FS: the warp's max |S_b| */
    if constexpr (SMX || FS) smw = lct_warp_absmax(acc, sw);
    la_cp_wait<0>();
    __syncthreads();
    float *zbuf = (float *)lct_sm2; /* [NT][8], then fp16: [8] warp maxima, FS: [4] of |z| */
#pragma unroll
    for (int i = 0; i < 8; i++) zbuf[tid * 8 + i] = zp[i];
    if constexpr (SMX || FS)
        if (lane == 0) zbuf[NT * 8 + warp] = smw;
    __syncthreads();
    if constexpr (SMX)
        if (tid == 0) { /* the block's max |S_b| into its head's (one atomic per CTA) */
            float m = zbuf[NT * 8];
            for (int w = 1; w < NT / 32; w++) m = fmaxf(m, zbuf[NT * 8 + w]);
            if (m > 0.f) atomicMax((int *)&a.smax[bh], __float_as_int(m));
        }
    if constexpr (FS) { /* the block's max over S and z, then S'_b, z'_b and σ */
        float z = 0.f;
        if (tid < D) {
            for (int m = 0; m < RPT; m++) z += zbuf[((tid / 8) + CK * m) * 8 + tid % 8];
            float mz = fabsf(z); /* tid < D: whole warps */
#pragma unroll
            for (int o = 16; o >= 1; o >>= 1) mz = fmaxf(mz, __shfl_xor_sync(0xffffffffu, mz, o));
            if (lane == 0) zbuf[NT * 8 + 8 + warp] = mz;
        }
        __syncthreads();
        float m = zbuf[NT * 8];
#pragma unroll
        for (int w = 1; w < NT / 32; w++) m = fmaxf(m, zbuf[NT * 8 + w]);
#pragma unroll
        for (int w = 0; w < D / 32; w++) m = fmaxf(m, zbuf[NT * 8 + 8 + w]);
        const int sg = la_exp16(m, -126, 126);
        const float sc = la_pow2f(sg);
        if (sw)
#pragma unroll
            for (int i = 0; i < G::MIS; i++)
#pragma unroll
                for (int j = 0; j < G::NJS; j++) {
                    const int row = rb + 16 * i + g, col = cb + 8 * j + 2 * cq;
                    *(uint32_t *)&dsh[row * D + col] = lct_pack2<E>(acc[i][j][0] * sc, acc[i][j][1] * sc);
                    *(uint32_t *)&dsh[(row + 8) * D + col] = lct_pack2<E>(acc[i][j][2] * sc, acc[i][j][3] * sc);
                }
        if (tid < D) dsh[D * D + tid] = lct_to16<E>(z * sc);
        if (tid == 0) a.sexp[(size_t)bh * a.nch + c] = sg;
        return;
    }
    if (tid < D) {
        float z = 0.f;
        for (int m = 0; m < RPT; m++) z += zbuf[((tid / 8) + CK * m) * 8 + tid % 8];
        if (BS) dsh[D * D + tid] = lct_to16<E>(z);
        else dst[D * D + tid] = z;
        if constexpr (SMX) { /* and max |z_b| (tid < D: whole warps) */
            float m = fabsf(z);
#pragma unroll
            for (int o = 16; o >= 1; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            if (lane == 0 && m > 0.f) atomicMax((int *)&a.smax[bh], __float_as_int(m));
        }
    }
}

#include "linear_causal_tc_out.cuh" /* pass 3: lct_output_mma_kernel */

/* the instantiation for a φ mode (lct_phi_of: 0 identity, 1 relu family, 2 elu1) */
typedef void (*lct_kernel_fn)(lct_args);
template <typename E, int D, bool BS> lct_kernel_fn lct_state_mma_fn_d(int mode, bool split, bool smx = false) {
    if constexpr (la_t16<E>::is_f16 && !BS)
        if (smx)
            return mode == 0 ? lct_state_mma_kernel<E, D, 0, false, false, true>
                   : mode == 1 ? lct_state_mma_kernel<E, D, 1, false, false, true>
                               : lct_state_mma_kernel<E, D, 2, false, false, true>;
    if (split && !BS)
        return mode == 0 ? lct_state_mma_kernel<E, D, 0, true>
               : mode == 1 ? lct_state_mma_kernel<E, D, 1, true> : lct_state_mma_kernel<E, D, 2, true>;
    return mode == 0 ? lct_state_mma_kernel<E, D, 0, false, BS>
           : mode == 1 ? lct_state_mma_kernel<E, D, 1, false, BS> : lct_state_mma_kernel<E, D, 2, false, BS>;
}
template <typename E, int D, bool BS> lct_kernel_fn lct_output_mma_fn_d(int mode) {
    return mode == 0 ? lct_output_mma_kernel<E, D, 0, BS>
           : mode == 1 ? lct_output_mma_kernel<E, D, 1, BS> : lct_output_mma_kernel<E, D, 2, BS>;
}
template <typename E> lct_kernel_fn lct_state_mma_fn_e(int64_t D, int mode, bool split, bool smx) {
    return D == 32 ? lct_state_mma_fn_d<E, 32, false>(mode, split, smx)
           : D == 64 ? lct_state_mma_fn_d<E, 64, false>(mode, split, smx)
                     : lct_state_mma_fn_d<E, 128, false>(mode, split, smx);
}
template <typename E> lct_kernel_fn lct_output_mma_fn_e(int64_t D, int mode) {
    return D == 32 ? lct_output_mma_fn_d<E, 32, false>(mode) : D == 64 ? lct_output_mma_fn_d<E, 64, false>(mode)
                                                                        : lct_output_mma_fn_d<E, 128, false>(mode);
}
/* the instantiations for head dim D (lct_dims) and the element type (f16:
 * fp16, else bf16); bs: 16-bit states (causal MHLA's mma_bf16s on bf16,
 * mma_f16s on fp16: scaled; never with split); smx: fp16 causal MHLA's
 * state maxima (variant mma; never with split) */
template <typename E> lct_kernel_fn lct_state_bs_fn(int64_t D, int mode) {
    return D == 32 ? lct_state_mma_fn_d<E, 32, true>(mode, false)
           : D == 64 ? lct_state_mma_fn_d<E, 64, true>(mode, false) : lct_state_mma_fn_d<E, 128, true>(mode, false);
}
template <typename E> lct_kernel_fn lct_output_bs_fn(int64_t D, int mode) {
    return D == 32 ? lct_output_mma_fn_d<E, 32, true>(mode) : D == 64 ? lct_output_mma_fn_d<E, 64, true>(mode)
                                                                      : lct_output_mma_fn_d<E, 128, true>(mode);
}
lct_kernel_fn lct_state_mma_fn(int64_t D, int mode, bool split, bool bs = false, bool f16 = false,
                               bool smx = false) {
    using B16 = __nv_bfloat16;
    if (bs) return f16 ? lct_state_bs_fn<__half>(D, mode) : lct_state_bs_fn<B16>(D, mode);
    return f16 ? lct_state_mma_fn_e<__half>(D, mode, split, smx) : lct_state_mma_fn_e<B16>(D, mode, split, false);
}
lct_kernel_fn lct_output_mma_fn(int64_t D, int mode, bool bs = false, bool f16 = false) {
    using B16 = __nv_bfloat16;
    if (bs) return f16 ? lct_output_bs_fn<__half>(D, mode) : lct_output_bs_fn<B16>(D, mode);
    return f16 ? lct_output_mma_fn_e<__half>(D, mode) : lct_output_mma_fn_e<B16>(D, mode);
}
size_t lct_out_smem(int64_t D, bool f16 = false) {
    if (f16) return D == 32 ? lct_smem4<32, true>::TOTAL : D == 64 ? lct_smem4<64, true>::TOTAL : lct_smem4<128, true>::TOTAL;
    return D == 32 ? lct_smem4<32>::TOTAL : D == 64 ? lct_smem4<64>::TOTAL : lct_smem4<128>::TOTAL;
}
/* bf16 elements of one pass-1 tile (64 rows of D + 8) */
size_t lct_tile(int64_t D) { return (size_t)T * (D + 8); }
bool lct_dims(int64_t D) { return D == 32 || D == 64 || D == 128; }
int lct_mode_of(int feat) {
    return feat == LA_FEATURE_IDENTITY ? 0 : feat == LA_FEATURE_ELU1 ? 2 : 1;
}

/* fp16 rows on the tensor-core path; false sends them to the portable
 * engine. On since the device harness's fp16 causal rows passed (the host
 * emulator dev/emu_causal_tc.sh has the same cases). */
constexpr bool lct_f16_tc = true;
/* the 16-bit element type the path takes: bf16, fp16 (while lct_f16_tc) */
bool lct_dtype_ok(la_dtype dt) { return dt == LA_BF16 || (lct_f16_tc && dt == LA_F16); }

bool view_ok(const la_tensor *t, int64_t D, la_dtype dt) {
    return t->dtype == dt && t->ndim == 4 && t->ne[3] == D && t->nb[3] == 1 &&
           t->nb[0] % 8 == 0 && t->nb[1] % 8 == 0 && t->nb[2] % 8 == 0 &&
           ((uintptr_t)t->data % 16) == 0;
}

/* Once per device (the answers do not change): the SM count, and the shared
 * memory limits of the two large kernels raised to what they may use (K1 at
 * most its hi/lo size). Racing first calls only repeat the same settings. */
constexpr int LCT_MAXDEV = 64;
std::atomic<int> lct_nsm[LCT_MAXDEV];
la_status lct_prepare_device(int dev, int *nsm) {
    if (dev >= 0 && dev < LCT_MAXDEV && lct_nsm[dev].load() > 0) {
        *nsm = lct_nsm[dev].load();
        return LA_OK;
    }
    LA_CU(cudaDeviceGetAttribute(nsm, cudaDevAttrMultiProcessorCount, dev));
    for (int64_t D : {32, 64, 128})
        for (int m = 0; m < 3; m++)
            for (bool f16 : {false, true}) {
                LA_CU(cudaFuncSetAttribute(lct_state_mma_fn(D, m, true, false, f16),
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)(sizeof(__nv_bfloat16) * TS1 * 3 * lct_tile(D))));
                for (bool bs : {false, true}) {
                    LA_CU(cudaFuncSetAttribute(lct_output_mma_fn(D, m, bs, f16),
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)lct_out_smem(D, f16)));
                    LA_CU(cudaFuncSetAttribute(lct_state_mma_fn(D, m, false, bs, f16),
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)(sizeof(__nv_bfloat16) * TS1 * 2 * lct_tile(D))));
                }
                if (f16)
                    LA_CU(cudaFuncSetAttribute(lct_state_mma_fn(D, m, false, false, true, true),
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)(sizeof(__nv_bfloat16) * TS1 * 2 * lct_tile(D))));
            }
    if (dev >= 0 && dev < LCT_MAXDEV) lct_nsm[dev].store(*nsm);
    return LA_OK;
}

}  // namespace

static const char *const lct_names[] = {"tc", "portable", "walk"};

la_status lct_select(const la_linear_params *p, const la_tensor *q, const la_tensor *k,
                     const la_tensor *v, const la_tensor *out, const char *forced,
                     lct_choice *c) {
    const int64_t D = q->ne[3];
    const la_dtype dt = q->dtype;
    const bool tc = p->causal && q->ne[1] >= 1 && q->ne[0] * q->ne[2] <= 65535 && lct_dims(D) &&
                    lct_dtype_ok(dt) && view_ok(q, D, dt) && view_ok(k, D, dt) && view_ok(v, D, dt) &&
                    view_ok(out, D, dt);
    c->kernel = tc ? LCT_TC : LCT_PORTABLE;
    c->walk = false;
    c->L = 0;
    if (!forced) return LA_OK;
    long n = 0;
    int i = la_cu_variant_index(forced, lct_names, 3);
    if (i < 0 && la_cu_variant_number(forced, "chunk", T, (long)1 << 30, &n) && n % T == 0) {
        i = LCT_TC;
        c->L = n;
    }
    if (i < 0) return la_cu_unknown_variant("linear_causal", forced, "tc, walk, chunk<N>, portable");
    if (i == LCT_PORTABLE) {
        c->kernel = LCT_PORTABLE;
        return LA_OK;
    }
    if (!tc)
        return la_cu_variant_unsupported("linear_causal", forced,
                                         lct_f16_tc ? "bf16 or f16, D = Dv in {32, 64, 128}, rows contiguous, B*H <= 65535"
                                                    : "bf16, D = Dv in {32, 64, 128}, rows contiguous, B*H <= 65535");
    c->walk = i == 2;
    return LA_OK;
}
la_status lct_run(const lct_choice &c, const la_linear_params *p, const la_tensor *q,
                  const la_tensor *k, const la_tensor *v, la_tensor *out, const la_tensor *S_in,
                  const la_tensor *z_in, la_tensor *S_out, la_tensor *z_out, const la_context *ctx,
                  cudaStream_t st, const lct_mixing *mix) {
    lct_args a;
    memset(&a, 0, sizeof a);
    a.q = q->data;
    a.k = k->data;
    a.v = v->data;
    a.o = out->data;
    const bool f16 = q->dtype == LA_F16;
    const la_tensor *ts[4] = {q, k, v, out};
    int64_t *ss[4] = {a.qs, a.ks, a.vs, a.os};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) ss[i][j] = ts[i]->nb[j];
    const int64_t B = q->ne[0], N = q->ne[1], H = q->ne[2], BH = B * H;
    a.N = N;
    a.H = H;
    a.D = q->ne[3];
    a.LS = a.D * a.D + a.D;
    a.feat = (int)p->feature;
    a.normalize = p->normalize;
    a.scale_q = p->scale_q;
    a.eps = p->eps;
    a.S_in = la_cu_view_of(S_in);
    a.z_in = la_cu_view_of(z_in);
    a.S_out = la_cu_view_of(S_out);
    a.z_out = la_cu_view_of(z_out);
    /* hi/lo k̃ only where it matters: the returned fp32 state, φ inexact in bf16 */
    a.split = S_out && (p->feature == LA_FEATURE_RELU_EPS || p->feature == LA_FEATURE_RELU1 ||
                        p->feature == LA_FEATURE_ELU1);

    /* State chunk L (multiple of 64): about 3 CTAs of the output pass per SM
     * (one resident per SM), as few chunk states as that allows. */
    int dev = 0, nsm = 132;
    LA_CU(cudaGetDevice(&dev));
    LA_TRY(lct_prepare_device(dev, &nsm));
    const int64_t tiles = la_cu_cdiv(N, T);
    const int64_t per_head = std::max<int64_t>(1, la_cu_cdiv(3 * (int64_t)nsm, BH));
    a.L = T * la_cu_cdiv(tiles, per_head);
    if (c.L > 0) a.L = c.L;
    if (mix) a.L = T; /* causal MHLA: a chunk is a block */
    a.nch = la_cu_cdiv(N, a.L);
    if (a.nch > INT32_MAX || a.L > INT32_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "CUDA causal linear: N = %lld too large", (long long)N);
    /* chunks with a ΔS (with the mixing all: the GEMM reads every state) */
    const int64_t nd = (S_out || z_out || mix) ? a.nch : a.nch - 1;
    /* The wide scan takes nd ≤ 255 chunk states (≤ 32 groups of SW); beyond
     * that (B·H ≤ 2 and long N) the walking scan. */
    const bool wide = !c.walk && nd <= 255;

    size_t nf, bytes;
    LA_TRY(la_mul_size((size_t)BH, (size_t)a.nch, &nf, "CUDA causal states"));
    LA_TRY(la_mul_size(nf, (size_t)a.LS, &nf, "CUDA causal states"));
    /* 16-bit block states (a.wsh): bf16 (mma_bf16s) or scaled fp16 (mma_f16s) */
    const bool bs = mix && (f16 ? mix->combine_f16s != nullptr : mix->combine_bf16 != nullptr);
    a.smax = mix && f16 && !bs ? mix->smax : nullptr;
    if (bs && f16) {
        a.sexp = mix->sexp;
        a.hexp = mix->hexp;
    }
    LA_TRY(la_mul_size(nf, bs ? sizeof(__nv_bfloat16) : sizeof(float), &bytes, "CUDA causal states"));
    la_cu_ws ws, wsm;
    LA_TRY(la_cu_ws_alloc(&ws, bytes, st, "causal linear chunk states"));
    a.ws = bs ? nullptr : (float *)ws.p; /* pass 1's states, then P_c for pass 3, in place: [B·H][nch][LS] */
    a.wsh = bs ? ws.p : nullptr;
    if (mix) { /* the mixed states H_c: a second buffer (the GEMM is not in place) */
        LA_TRY(la_cu_ws_alloc(&wsm, bytes, st, "causal mhla mixed states"));
        a.mixw = mix->W;
        a.mix_hs = mix->hs;
        a.mix_ld = mix->ld;
    } else {
        la_cu_report(ctx, "linear_causal", c.walk ? "walk" : "tc",
                     "%s B*H=%lld N=%lld L=%lld chunks=%lld split=%d scan=%s", f16 ? "f16" : "bf16",
                     (long long)BH, (long long)N, (long long)a.L, (long long)a.nch, a.split,
                     wide ? "wide" : "walk");
    }

    if (nd > 0) {
        const size_t sm1 = sizeof(__nv_bfloat16) * TS1 * (a.split ? 3 : 2) * lct_tile(a.D);
        lct_state_mma_fn(a.D, lct_mode_of(a.feat), a.split != 0, bs, f16, a.smax != nullptr)<<<dim3((unsigned)nd, (unsigned)BH), NT, sm1, st>>>(a);
        LA_CU_LAUNCH("lct_state_mma_kernel");
    }
    if (mix) { /* pass 2: H_c = Σ_{b<c} W[c,b] S_b over [S | z] in place of the prefix sums */
        if (bs && f16) LA_TRY(mix->combine_f16s(mix->ctx, (const __half *)a.wsh, (__half *)wsm.p, BH, H, a.nch, a.LS, st));
        else if (bs) LA_TRY(mix->combine_bf16(mix->ctx, (const __nv_bfloat16 *)a.wsh, (__nv_bfloat16 *)wsm.p, BH, H, a.nch, a.LS, st));
        else LA_TRY(mix->combine(mix->ctx, a.ws, (float *)wsm.p, BH, H, a.nch, a.LS, st));
        if (bs) a.wsh = wsm.p;
        else a.ws = (float *)wsm.p;
    } else {
        LA_TRY(lct_launch_scan(a, BH, nd, wide, st));
    }
    lct_output_mma_fn(a.D, lct_mode_of(a.feat), bs, f16)<<<dim3((unsigned)a.nch, (unsigned)BH), NT,
                                                       lct_out_smem(a.D, f16), st>>>(a);
    LA_CU_LAUNCH("lct_output_mma_kernel");
    return LA_OK;
}
