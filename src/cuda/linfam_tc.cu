/* The tensor-core path of the linear-family engine: non-causal, bf16 or
 * fp16 rows contiguous, head dims of lf_tc_dims (D, Dv ∈ {32, 64, 128}: linear
 * attention, MHLA, focused flatten on materialized φ). The kernels are
 * templates on the 16-bit type T (tc16.cuh) and (D, Dv): the tiles keep about
 * the bytes of the D = 128 ones
 * (more tokens per tile for smaller heads), and in the summary the warps
 * that a small S leaves over split the tokens of a tile (reduced in shared
 * memory at the end). The passes of linfam.cuh with the two products on tensor
 * cores (ldmatrix + mma.sync bf16 / f16, fp32 accumulation): φ(K)ᵀV per segment
 * and φ(Q)·S̃ per token tile; the mix of M ≥ 2 blocks a tf32 GEMM over
 * expanded weights. φ is applied in fp32 at load time and rounded to T
 * for the product (the inputs are T already); summaries, mixing and
 * denominators stay fp32. fp16 (largest finite value 65504): S̃ and z̃ are
 * kept in fp32 by the mix and scaled per block by one power of two into
 * fp16's range in the output pass (z̃ as an fp16 hi + lo pair for the
 * denominators' MMA), undone in fp32; the fp16 output rounds a result past
 * 65504 to Inf, as torch does. */
#include "cta_reduce.cuh"
#include "linfam_engine.cuh"
#include "ptx.cuh"
#include "tc16.cuh"
#include "linfam_tc_phi.cuh"

#include <algorithm>

namespace {

/* ==== pipelined passes ======================================================
 *   summary: K and V tiles land in shared memory by cp.async, TS stages deep
 *            (two tiles in flight while the tensor cores work on the third);
 *            each thread applies φ to the K chunks it copied itself (rows
 *            past the segment end become 0), z = φ(K)ᵀ·1 is one more MMA;
 *   mix:     float4 rows of the partials, 4 loads in flight per thread, the
 *            weights of 32 summaries at a time in shared memory; writes S̃ in
 *            bf16 (the precision the output product uses) and z̃ in fp32;
 *            M ≥ 2: a tf32 GEMM over expanded weights instead;
 *   output:  S̃ (bf16) and the Q tiles by cp.async, TS stages; each warp
 *            computes its own rows' denominators (2 lanes per row, the lanes
 *            that later write that row) and writes O from a 1 KB per-warp
 *            staging tile with 16-byte stores.
 * (Loading each tile through registers and waiting for it before the product
 * was latency-bound; WMMA fragments compiled to plain LDS, ~5x
 * more instructions per MMA: both removed, docs/CUDA.md.) */
constexpr int TS = 3; /* pipeline stages */

/* Raw tensor-core fragments: ldmatrix from rows padded by 8 bf16 (D + 8 =
 * 136, 72, 40 bf16 = 68, 36, 20 words: the 8 row addresses of one 8×8 matrix
 * fall on 8 distinct 4-bank groups, no conflicts) and mma.sync m16n8k16.
 * Helpers: ptx.cuh. */

/* Sum over C neighbouring lanes (C = 4, 8, 16): the threads that share one
 * row of a token tile in the output kernel (chunk tid % C of row tid / C). */
template <int C> __device__ __forceinline__ float lf_sumc(float x) {
#pragma unroll
    for (int o = C / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* released_vision: this thread's part (blocks b ≡ tid mod C) of
 * Σ_b W[blk, b]·(q̃ at in-box position wpos of block b)·z_b; 0 past the box. */
template <int C>
__device__ __forceinline__ float lf_rv_part(const lf_args &a, int64_t bh, int64_t h, int64_t blk,
                                            int64_t wpos, int64_t wend, int tid) {
    float sacc = 0.f;
    if (wpos < wend) {
        const float *rr = a.r + (size_t)bh * a.M * a.maxcnt + wpos;
        for (int64_t bb = tid & (C - 1); bb < a.M; bb += C)
            sacc = fmaf(lf_w(a.P.W, h, blk, bb), rr[bb * a.maxcnt], sacc);
    }
    return sacc;
}

/* Token of in-box position w, with 32-bit divisions (positions < 2^31). */
struct lf_boxi {
    int64_t base;    /* token of position 0        */
    int64_t s0, s1;  /* token strides of axes 0, 1 */
    unsigned c1, c2; /* box extents of axes 1, 2   */
    bool flat;       /* one row: consecutive tokens */
};
__device__ __forceinline__ lf_boxi lf_boxi_of(const lf_geom &G, const int64_t lo[3],
                                              const int64_t cnt[3]) {
    lf_boxi x;
    x.s1 = G.n[2];
    x.s0 = G.n[1] * G.n[2];
    x.base = lo[0] * x.s0 + lo[1] * x.s1 + lo[2];
    x.c1 = (unsigned)cnt[1];
    x.c2 = (unsigned)cnt[2];
    x.flat = cnt[0] * cnt[1] == 1;
    return x;
}
__device__ __forceinline__ int64_t lf_tok(const lf_boxi &x, unsigned w) {
    if (x.flat) return x.base + w;
    const unsigned i2 = w % x.c2, r = w / x.c2, i1 = r % x.c1, i0 = r / x.c1;
    return x.base + i0 * x.s0 + i1 * x.s1 + i2;
}

/* ---- geometry of the two passes for (DK, DV) = (D, Dv) -------------------
 * summary: tiles of FT tokens (64 at a head dim of 128, else 128); S (DK×DV)
 *   is cut into WR × WC warp tiles of 32 rows × 8·NJ columns (2×NJ
 *   fragments), and the WK = 8/(WR·WC) warps of one warp tile take every
 *   WK-th 16-token step of a tile; their partial sums meet in shared memory.
 * output: tiles of FO tokens (64, 128, 256 for DK = 128, 64, 32: the same
 *   bytes of Q per tile); warps WRO × WCO of 32 rows × CW columns. */
template <int DK, int DV> struct lf_tcg {
    static constexpr int FT = (DK > DV ? DK : DV) == 128 ? 64 : 128;
    static constexpr int LK = DK + 8, LV = DV + 8;  /* smem row strides (bf16) */
    static constexpr int WR = DK / 32, WC = DV == 128 ? 2 : 1, WK = 8 / (WR * WC);
    static constexpr int NJ = DV / (8 * WC);
    static constexpr int CK = DK / 8, CV = DV / 8;  /* 16-B chunks per row */
    static constexpr int UK = FT * CK / NT, UV = FT * CV / NT;
    static constexpr int STAGE = FT * (LK + LV);    /* bf16 of one stage (K, V) */
    static constexpr int L = DK * DV + DK;          /* floats of one partial   */
    static constexpr size_t PIPE = sizeof(__nv_bfloat16) * TS * STAGE;
    static constexpr size_t RED = WK > 1 ? sizeof(float) * WK * L : 0;
    static constexpr size_t SUM_SMEM = PIPE > RED ? PIPE : RED;
    static_assert(WK == 1 || RED + sizeof(float) * NT / 32 <= SUM_SMEM, "fp16 summaries: the maxima after RED");

    static constexpr int FO = DK == 128 ? 64 : DK == 64 ? 128 : 256;
    static constexpr int WRO = FO / 32, WCO = 8 / WRO, CW = DV / WCO, NJO = CW / 8;
    static constexpr int UQ = FO * CK / NT;
    static constexpr int SLD = CW + 8; /* staging rows: conflict-free bf16x2 writes, 16-B aligned */
    static constexpr int STG = 16 * SLD;
    static constexpr size_t OUT_SMEM = sizeof(__nv_bfloat16) * (DK * LV + TS * FO * LK + 8 * STG) +
                                       sizeof(float) * TS * FO + sizeof(__nv_bfloat16) * DK * 8 + 16;
    static_assert(WR * WC * WK == 8 && NJ % 2 == 0 && NJO % 2 == 0 && FT / 16 >= WK, "geometry");
    static_assert(UK * NT == FT * CK && UV * NT == FT * CV && UQ * NT == FO * CK, "copy split");
};

/* grid (K, BH), 256 threads, 2 CTAs per SM: warp (wr, wc, wk) owns rows
 * d ∈ 32wr + [0, 32) and columns 8·NJ·wc + [0, 8·NJ) of the segment's S
 * (2×NJ fragments) for the 16-token steps ≡ wk mod WK, and the z rows of its
 * fragments i ≡ wc mod WC (every column of the z product = z; NZ
 * accumulators: one per fragment, or at WK = 1, WC = 2 one for fragment wc).
 * A thread copies chunk tid % CK of K rows tid/CK + (NT/CK)·u (and likewise
 * of V) of each tile, and applies φ to its own K chunks. At D = Dv = 128
 * (WK = 1) this is the kernel of one warp tile per warp, written straight
 * from registers; the branches on WK = 1 keep that case in the form it was
 * validated and measured in (the same PTX, scripts/check_ptx.sh; the general
 * form was slower at the Wan shape: docs/PERF.md), the other head dims keep
 * the general form they were measured in. */
/* BF (variant tc_bf16s, linfam_tc_bf16s.cu): the partial S in bf16 at
 * (bf16 *)a.sum [BH][K][DK·DV] (the rows of the mixing GEMM's B operand) and
 * z in fp32 at a.mix [BH][K][DK]; BF = false writes the fp32 partials
 * [BH][K][L] of the tf32 mix (the same code as before the flag). BF on fp16
 * inputs: S in fp16 at (half *)a.sum, scaled by the power of two that puts
 * the partial's largest |S| in [2^14, 2^15) (a sum over up to a segment of
 * tokens can pass 65504), its inverse at a.ssc [BH][K]; z in fp32 as for bf16. */
template <typename T, int DK, int DV, bool BF = false>
__global__ void __launch_bounds__(NT, 2) lf_tc_summary_kernel(lf_args a) {
    using G = lf_tcg<DK, DV>;
    using X = la_t16<T>;
    using T2 = typename X::T2;
    constexpr int FT = G::FT, LK = G::LK, LV = G::LV, WK = G::WK, NZ = WK == 1 && G::WC == 2 ? 1 : 2;
    const lf_problem &P = a.P;
    extern __shared__ __align__(128) unsigned char lf_tc_sm[];
    T *sm = (T *)lf_tc_sm;
    const int64_t bh = blockIdx.y, b = bh / P.H, h = bh % P.H;
    const int64_t kseg = blockIdx.x, blk = kseg / a.segs, s = kseg % a.segs;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    int64_t lo[3], cnt[3];
    lf_box(a.G, blk, lo, cnt);
    const lf_boxi bx = lf_boxi_of(a.G, lo, cnt);
    const int64_t total = cnt[0] * cnt[1] * cnt[2];
    const int64_t w0 = min(total, s * a.seg), w1 = min(total, w0 + a.seg);
    const int nt = (int)((w1 - w0 + FT - 1) / FT);
    const int ck = (tid % G::CK) * 8, rk = tid / G::CK;
    const int cv = (tid % G::CV) * 8, rv = tid / G::CV;
    const T *kb = (const T *)P.k.data + b * P.k.nb[0] + h * P.k.nb[2] + ck;
    const T *vb = (const T *)P.v.data + b * P.v.nb[0] + h * P.v.nb[2] + cv;

    /* row r of tile t: its token in tk, false past the segment (tk = 0) */
    auto token = [&](int t, int r, int64_t &tk) {
        const int64_t w = w0 + (int64_t)t * FT + r;
        const bool ok = w < w1;
        tk = ok ? lf_tok(bx, (unsigned)w) : 0;
        return ok;
    };
    auto issue = [&](int t) { /* tile t into stage t % TS; always one group */
        if (t < nt) {
            T *Ks = sm + (t % TS) * G::STAGE, *Vs = Ks + FT * LK;
            int64_t tk;
            if constexpr (WK == 1) { /* D = Dv = 128: one token lookup for a K and a V row */
#pragma unroll
                for (int u = 0; u < G::UK; u++) {
                    const int r = rk + (NT / G::CK) * u;
                    const bool ok = token(t, r, tk);
                    la_cp16z(&Ks[r * LK + ck], kb + tk * P.k.nb[1], ok);
                    la_cp16z(&Vs[r * LV + ck], vb + tk * P.v.nb[1], ok);
                }
            } else {
#pragma unroll
                for (int u = 0; u < G::UK; u++) {
                    const int r = rk + (NT / G::CK) * u;
                    const bool ok = token(t, r, tk);
                    la_cp16z(&Ks[r * LK + ck], kb + tk * P.k.nb[1], ok);
                }
#pragma unroll
                for (int u = 0; u < G::UV; u++) {
                    const int r = rv + (NT / G::CV) * u;
                    const bool ok = token(t, r, tk);
                    la_cp16z(&Vs[r * LV + cv], vb + tk * P.v.nb[1], ok);
                }
            }
        }
        la_cp_commit();
    };
#pragma unroll
    for (int t = 0; t < TS - 1; t++) issue(t);

    /* WK = 1: the warps are exactly the WR × WC warp tiles (no modulo) */
    const int wr = warp % G::WR, wc = WK == 1 ? warp / G::WR : (warp / G::WR) % G::WC;
    const int wk = WK == 1 ? 0 : warp / (G::WR * G::WC);
    const int rb = 32 * wr, cb = 8 * G::NJ * wc;
    float racc[2][G::NJ][4], raccz[NZ][4]; /* rows rb + 16i + {g, g+8}, columns cb + 8j + 2t + {0,1} */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < G::NJ; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) racc[i][j][e] = 0.f;
#pragma unroll
    for (int i = 0; i < NZ; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) raccz[i][e] = 0.f;

    /* ldmatrix: lane l gives the address of row l % 8 of matrix l / 8 */
    const int lr = lane % 8, lm = lane / 8;
    const uint32_t ONES2 = X::ONES2; /* two 1.0 of T: the B operand of z = φ(K)ᵀ·1 */
    const bool phi_id = P.fk.kind == LA_FEATURE_IDENTITY && P.fk.pre == 1.f && P.fk.post == 1.f;
    const lf_phimap phk = lf_phi_of(P.fk);
    /* `true &&`: the form the validated kernel was compiled from (a plain
     * call gives the same logic in another block layout) */
    const bool phk_bf16 = true && lf_phi_bf16_ok(phk);

    for (int t = 0; t < nt; t++) {
        la_cp_wait<TS - 2>(); /* this thread's copies of tile t have landed */
        T *Ks = sm + (t % TS) * G::STAGE, *Vs = Ks + FT * LK;
#pragma unroll
        for (int u = 0; u < G::UK; u++) {
            const int r = rk + (NT / G::CK) * u;
            T *p = &Ks[r * LK + ck];
            if (w0 + (int64_t)t * FT + r >= w1) *(uint4 *)p = make_uint4(0, 0, 0, 0);
            else if (phk_bf16) lf_phi8_bf16(p, phk);
            else if (!phi_id) lf_phi8_inplace<T>(p, phk);
        }
        __syncthreads(); /* tile t complete; every warp is done with tile t-1 */
        issue(t + TS - 1); /* into the stage of tile t-1 */
#pragma unroll
        for (int kk = 16 * wk; kk < FT; kk += 16 * WK) {
            /* A = φ(K)ᵀ (m = d, k = token) from [token][d] rows: .trans; matrices
             * (m+0,k+0) (m+8,k+0) (m+0,k+8) (m+8,k+8) = a0..a3 */
            uint32_t af[2][4];
#pragma unroll
            for (int i = 0; i < 2; i++)
                la_ldsm4t(af[i], &Ks[(kk + lr + 8 * (lm >> 1)) * LK + rb + 16 * i + 8 * (lm & 1)]);
            if (G::WC == 1) {
                X::mma(raccz[0], af[0], ONES2, ONES2);
                X::mma(raccz[NZ - 1], af[1], ONES2, ONES2);
            } else if (wc == 0) {
                X::mma(raccz[0], af[0], ONES2, ONES2);
            } else {
                X::mma(raccz[NZ - 1], af[1], ONES2, ONES2);
            }
#pragma unroll
            for (int jp = 0; jp < G::NJ / 2; jp++) {
                /* B = V (k = token, n = dv), [token][dv] rows: .trans; matrices
                 * (k+0,n+0) (k+8,n+0) (k+0,n+8) (k+8,n+8) = b0,b1 of n-tiles 2jp, 2jp+1 */
                uint32_t bf[4];
                la_ldsm4t(bf, &Vs[(kk + lr + 8 * (lm & 1)) * LV + cb + 16 * jp + 8 * (lm >> 1)]);
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    X::mma(racc[i][2 * jp], af[i], bf[0], bf[1]);
                    X::mma(racc[i][2 * jp + 1], af[i], bf[2], bf[3]);
                }
            }
        }
    }
    if constexpr (BF && WK == 1) { /* straight from registers: S in 16 bits (fp16: scaled), z in fp32 */
        float sc = 1.f;
        if constexpr (X::is_f16) {
            float mx = 0.f;
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < G::NJ; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) mx = fmaxf(mx, fabsf(racc[i][j][e]));
            la_cp_wait<0>();
            __syncthreads(); /* the tiles are consumed: shared memory takes the maxima */
            mx = la_cta_max<NT / 32>(mx, (float *)lf_tc_sm, tid);
            const int sh = la_exp16(mx, -126, 126);
            sc = la_pow2f(sh);
            /* an all-zero partial (an empty segment) gets 0: its weight would
             * otherwise take the row scale of lfb_wprep16_kernel from the others */
            if (tid == 0) a.ssc[(size_t)bh * a.K + kseg] = mx > 0.f ? la_pow2f(-sh) : 0.f;
        }
        T *sb = (T *)a.sum + ((size_t)bh * a.K + kseg) * (DK * DV);
        float *zd = a.mix + ((size_t)bh * a.K + kseg) * DK;
        const int g = lane / 4, t2 = 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < G::NJ; j++) {
                T *d0 = sb + (rb + 16 * i + g) * DV + cb + 8 * j + t2;
                *(T2 *)d0 = X::pack2(racc[i][j][0] * sc, racc[i][j][1] * sc);
                *(T2 *)(d0 + 8 * DV) = X::pack2(racc[i][j][2] * sc, racc[i][j][3] * sc);
            }
        if (lane % 4 == 0)
#pragma unroll
            for (int i = 0; i < NZ; i++)
                if (NZ == 1 || G::WC == 1 || i == wc) {
                    const int zi = NZ == 1 ? wc : i;
                    zd[rb + 16 * zi + g] = raccz[i][0];
                    zd[rb + 16 * zi + g + 8] = raccz[i][2];
                }
        if constexpr (!X::is_f16) la_cp_wait<0>();
        return;
    }
    float *dst = a.sum + ((size_t)bh * a.K + kseg) * a.L;
    float *red = dst; /* WK = 1: straight to the partial */
    if constexpr (WK > 1) { /* every warp's sums into its slice [wk][L] of shared memory */
        la_cp_wait<0>();
        __syncthreads(); /* the last tiles are consumed */
        red = (float *)lf_tc_sm + wk * G::L;
    }
    const int g = lane / 4, t2 = 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < G::NJ; j++) {
            float *d0 = red + (rb + 16 * i + g) * DV + cb + 8 * j + t2;
            *(float2 *)d0 = make_float2(racc[i][j][0], racc[i][j][1]);
            *(float2 *)(d0 + 8 * DV) = make_float2(racc[i][j][2], racc[i][j][3]);
        }
    /* every column of the z product holds z: column 0 (t = 0) is written;
     * accumulator i holds fragment i's z rows (NZ = 2) or fragment wc's */
    if (lane % 4 == 0)
#pragma unroll
        for (int i = 0; i < NZ; i++)
            if (NZ == 1 || G::WC == 1 || i == wc) {
                const int zi = NZ == 1 ? wc : i; /* the fragment */
                red[DK * DV + rb + 16 * zi + g] = raccz[i][0];
                red[DK * DV + rb + 16 * zi + g + 8] = raccz[i][2];
            }
    if constexpr (WK == 1) {
        la_cp_wait<0>(); /* the trailing (empty) copy groups */
    } else {
        __syncthreads();
        const float4 *r4 = (const float4 *)lf_tc_sm;
        float sc = 1.f; /* fp16 summaries: the partial's scale (below) */
        if constexpr (BF && X::is_f16) { /* the sums into slice 0 first, and their largest |S| */
            float4 *w4 = (float4 *)lf_tc_sm;
            float mx = 0.f;
            for (int e = tid; e < G::L / 4; e += NT) {
                float4 acc = r4[e];
#pragma unroll
                for (int k = 1; k < WK; k++) {
                    const float4 x = r4[k * (G::L / 4) + e];
                    acc.x += x.x;
                    acc.y += x.y;
                    acc.z += x.z;
                    acc.w += x.w;
                }
                w4[e] = acc; /* read back below by this thread only */
                if (4 * e < DK * DV) mx = fmaxf(mx, fmaxf(fmaxf(fabsf(acc.x), fabsf(acc.y)), fmaxf(fabsf(acc.z), fabsf(acc.w))));
            }
            mx = la_cta_max<NT / 32>(mx, (float *)(lf_tc_sm + G::RED), tid);
            const int sh = la_exp16(mx, -126, 126);
            sc = la_pow2f(sh);
            if (tid == 0) a.ssc[(size_t)bh * a.K + kseg] = mx > 0.f ? la_pow2f(-sh) : 0.f; /* as above */
        }
        for (int e = tid; e < G::L / 4; e += NT) {
            float4 acc = r4[e];
            if constexpr (!(BF && X::is_f16)) /* fp16 summaries: summed above */
#pragma unroll
                for (int k = 1; k < WK; k++) {
                    const float4 x = r4[k * (G::L / 4) + e];
                    acc.x += x.x;
                    acc.y += x.y;
                    acc.z += x.z;
                    acc.w += x.w;
                }
            if constexpr (BF && X::is_f16) { /* S in fp16 (4 scaled values), z in fp32 */
                if (4 * e < DK * DV) {
                    uint2 u;
                    *(T2 *)&u.x = X::pack2(acc.x * sc, acc.y * sc);
                    *(T2 *)&u.y = X::pack2(acc.z * sc, acc.w * sc);
                    *(uint2 *)((T *)a.sum + ((size_t)bh * a.K + kseg) * (DK * DV) + 4 * e) = u;
                } else {
                    *(float4 *)(a.mix + ((size_t)bh * a.K + kseg) * DK + (4 * e - DK * DV)) = acc;
                }
            } else if constexpr (BF) { /* S in bf16 (4 values), z in fp32 */
                if (4 * e < DK * DV) {
                    uint2 u;
                    *(__nv_bfloat162 *)&u.x = __floats2bfloat162_rn(acc.x, acc.y);
                    *(__nv_bfloat162 *)&u.y = __floats2bfloat162_rn(acc.z, acc.w);
                    *(uint2 *)((__nv_bfloat16 *)a.sum + ((size_t)bh * a.K + kseg) * (DK * DV) + 4 * e) = u;
                } else {
                    *(float4 *)(a.mix + ((size_t)bh * a.K + kseg) * DK + (4 * e - DK * DV)) = acc;
                }
            } else {
                ((float4 *)dst)[e] = acc;
            }
        }
    }
}

#include "linfam_tc_out.cuh"

/* The summary and output launches of one instantiation (the host code below
 * sizes the segments and tiles with G's FT, FO). */
template <typename T, int DK, int DV, bool BF = false>
la_status lf_tc_summary(const lf_args &a, cudaStream_t st) {
    using G = lf_tcg<DK, DV>;
    LA_CU(cudaFuncSetAttribute(lf_tc_summary_kernel<T, DK, DV, BF>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)G::SUM_SMEM));
    lf_tc_summary_kernel<T, DK, DV, BF><<<dim3((unsigned)a.K, (unsigned)(a.P.B * a.P.H)), NT, G::SUM_SMEM, st>>>(a);
    LA_CU_LAUNCH("lf_tc_summary_kernel");
    return LA_OK;
}
template <typename T, int DK, int DV, bool S16 = false>
la_status lf_tc_output(const lf_args &a, const void *Pb, const float *Pz, int64_t groups,
                       int64_t tpc, cudaStream_t st) {
    using G = lf_tcg<DK, DV>;
    LA_CU(cudaFuncSetAttribute(lf_tc_output_kernel<T, DK, DV, S16>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)G::OUT_SMEM));
    lf_tc_output_kernel<T, DK, DV, S16><<<dim3((unsigned)(a.M * groups), (unsigned)(a.P.B * a.P.H)), NT,
                                       G::OUT_SMEM, st>>>(a, (const typename lf_pbt<T, S16>::type *)Pb, Pz,
                                                          groups, tpc);
    LA_CU_LAUNCH("lf_tc_output_kernel");
    return LA_OK;
}

/* The instantiations of lf_tc_dims: summary / output tile lengths, launches
 * for bf16 and (h) for fp16 inputs (Pb: S̃ in bf16, in fp32 for fp16). */
struct lf_tc_inst {
    int DK, DV, ft, fo;
    la_status (*summary)(const lf_args &, cudaStream_t);
    la_status (*output)(const lf_args &, const void *, const float *, int64_t, int64_t, cudaStream_t);
    la_status (*summary_h)(const lf_args &, cudaStream_t);
    la_status (*output_h)(const lf_args &, const void *, const float *, int64_t, int64_t, cudaStream_t);
};
#define LF_TC_INST(dk, dv)                                                                          \
    {dk, dv, lf_tcg<dk, dv>::FT, lf_tcg<dk, dv>::FO, lf_tc_summary<__nv_bfloat16, dk, dv>,            \
     lf_tc_output<__nv_bfloat16, dk, dv>, lf_tc_summary<__half, dk, dv>, lf_tc_output<__half, dk, dv>}
const lf_tc_inst lf_tc_insts[] = {LF_TC_INST(128, 128), LF_TC_INST(64, 64), LF_TC_INST(32, 32),
                                  LF_TC_INST(64, 128), LF_TC_INST(128, 64)};
#undef LF_TC_INST

const lf_tc_inst *lf_tc_inst_of(int64_t D, int64_t Dv) {
    for (const lf_tc_inst &x : lf_tc_insts)
        if (x.DK == D && x.DV == Dv) return &x;
    return nullptr;
}

}  // namespace

/* The pieces variant tc_bf16s (linfam_tc_bf16s.cu) runs of this path. */
void lf_tc_tiles(int64_t D, int64_t Dv, int *ft, int *fo) {
    const lf_tc_inst *in = lf_tc_inst_of(D, Dv);
    *ft = in ? in->ft : 64;
    *fo = in ? in->fo : 64;
}
la_status lf_tc_summary_bf16(const lf_args &a, cudaStream_t st) {
    if (a.P.D == 128 && a.P.Dv == 128) return lf_tc_summary<__nv_bfloat16, 128, 128, true>(a, st);
    if (a.P.D == 64 && a.P.Dv == 64) return lf_tc_summary<__nv_bfloat16, 64, 64, true>(a, st);
    return la_err(LA_ERR_UNSUPPORTED, "CUDA linear family: no bf16 summaries for D = %lld, Dv = %lld",
                  (long long)a.P.D, (long long)a.P.Dv);
}
la_status lf_tc_summary_f16s(const lf_args &a, cudaStream_t st) {
    if (a.P.D == 128 && a.P.Dv == 128) return lf_tc_summary<__half, 128, 128, true>(a, st);
    if (a.P.D == 64 && a.P.Dv == 64) return lf_tc_summary<__half, 64, 64, true>(a, st);
    return la_err(LA_ERR_UNSUPPORTED, "CUDA linear family: no fp16 summaries for D = %lld, Dv = %lld",
                  (long long)a.P.D, (long long)a.P.Dv);
}
la_status lf_tc_output_f16s(const lf_args &a, const __half *Pb, const float *Pz, int64_t groups, int64_t tpc,
                            cudaStream_t st) {
    if (a.P.D == 128 && a.P.Dv == 128) return lf_tc_output<__half, 128, 128, true>(a, Pb, Pz, groups, tpc, st);
    if (a.P.D == 64 && a.P.Dv == 64) return lf_tc_output<__half, 64, 64, true>(a, Pb, Pz, groups, tpc, st);
    return la_err(LA_ERR_UNSUPPORTED, "CUDA linear family: no fp16 summaries for D = %lld, Dv = %lld",
                  (long long)a.P.D, (long long)a.P.Dv);
}
la_status lf_tc_output_run(const lf_args &a, const __nv_bfloat16 *Pb, const float *Pz, int64_t groups,
                           int64_t tpc, cudaStream_t st) {
    const lf_tc_inst *in = lf_tc_inst_of(a.P.D, a.P.Dv);
    if (!in)
        return la_err(LA_ERR_UNSUPPORTED, "CUDA linear family: no tensor-core path for D = %lld, Dv = %lld",
                      (long long)a.P.D, (long long)a.P.Dv);
    return in->output(a, Pb, Pz, groups, tpc, st);
}

/* Host side: workspace = partials [BH][K][L] fp32, S̃ [BH][M][D·Dv] bf16
 * (fp32 for fp16 inputs: lf_tc_output_kernel scales it into fp16),
 * z̃ [BH][M][D] fp32, released_vision r [BH][M][maxcnt] fp32, the expanded
 * weights of the mix GEMM (M ≥ 2). */
la_status lf_run_tc(lf_args &a, cudaStream_t st) {
    const lf_problem &P = a.P;
    const lf_tc_inst *in = nullptr;
    for (const lf_tc_inst &x : lf_tc_insts)
        if (x.DK == P.D && x.DV == P.Dv) in = &x;
    if (!in) /* lf_select keeps this from happening */
        return la_err(LA_ERR_UNSUPPORTED, "CUDA linear family: no tensor-core path for D = %lld, Dv = %lld",
                      (long long)P.D, (long long)P.Dv);
    const int64_t BH = P.B * P.H;
    int dev = 0, nsm = 132;
    LA_CU(cudaGetDevice(&dev));
    LA_CU(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
    const int64_t slots = 2 * (int64_t)nsm; /* 2 CTAs per SM */
    /* summary: about two waves of CTAs, segments of a multiple of the tile, ≥ 256 tokens */
    {
        const int64_t segs = std::max<int64_t>(1, la_cu_cdiv(2 * slots, a.M * BH));
        a.seg = std::max<int64_t>(256, la_cu_cdiv(la_cu_cdiv(a.maxcnt, segs), in->ft) * in->ft);
        a.segs = la_cu_cdiv(a.maxcnt, a.seg);
    }
    a.K = a.M * a.segs;
    a.L = P.D * P.Dv + P.D;
    const int64_t tpb = la_cu_cdiv(a.maxcnt, in->fo);
    const int64_t tpc = std::min<int64_t>(tpb, std::min<int64_t>(16, std::max<int64_t>(
                                                       2, la_cu_cdiv(tpb * a.M * BH, 2 * slots))));
    const int64_t groups = la_cu_cdiv(tpb, tpc);
    constexpr int GM = LF_GM, GK = LF_GK;
    /* grid limits of every launch below, checked before allocating: y and z
     * extents ≤ 65535 (B·H; M for lf_rv_kernel), x ≤ 2^31-1 (partials, output
     * tiles, the expanded-weight fill of at most M·K entries padded) */
    if (BH > 65535 || a.K > INT32_MAX || a.M * groups > INT32_MAX ||
        (P.norm == LF_NORM_RELEASED_VISION && a.M > 65535) ||
        la_cu_cdiv(la_cu_cdiv(a.M, GM) * GM * (la_cu_cdiv(a.K, GK) * GK), NT) > INT32_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "CUDA linear family: grid too large (B*H = %lld, M = %lld)",
                      (long long)BH, (long long)a.M);
    size_t nsum, nP, nz, nr, bytes;
    LA_TRY(la_mul_size((size_t)BH, (size_t)a.K, &nsum, "CUDA summaries"));
    LA_TRY(la_mul_size(nsum, (size_t)a.L, &nsum, "CUDA summaries"));
    LA_TRY(la_mul_size((size_t)BH * a.M, (size_t)(P.D * P.Dv), &nP, "CUDA mixed summaries"));
    LA_TRY(la_mul_size((size_t)BH * a.M, (size_t)P.D, &nz, "CUDA mixed summaries"));
    nr = 0;
    if (P.norm == LF_NORM_RELEASED_VISION)
        LA_TRY(la_mul_size((size_t)BH * a.M, (size_t)a.maxcnt, &nr, "CUDA released_vision"));
    nr = (nr + 3) / 4 * 4;
    /* fp32 units; S̃ takes nP/2 of them (nP is even: D·Dv ≥ 1024), nP for fp16 */
    const bool f16 = P.q.dt == LA_F16;
    const size_t nPw = f16 ? nP : nP / 2;
    /* M >= 2: the mix runs as a GEMM over expanded weights Wx [hw][Mp][Kp] */
    const bool mix_mma = a.M >= 2;
    const int64_t Mp = la_cu_cdiv(a.M, GM) * GM, Kp = la_cu_cdiv(a.K, GK) * GK;
    const int64_t hw = (P.use_w && P.W.nb[0] != 0) ? P.H : 1;
    size_t nwx = 0;
    if (mix_mma) {
        LA_TRY(la_mul_size((size_t)hw * Mp, (size_t)Kp, &nwx, "CUDA expanded weights"));
        if (hw > 65535) return la_err(LA_ERR_UNSUPPORTED, "CUDA MHLA: H = %lld exceeds 65535", (long long)hw);
    }
    LA_TRY(la_mul_size(nsum + nPw + nz + nr + nwx, sizeof(float), &bytes, "CUDA workspace"));
    la_cu_ws ws;
    LA_TRY(la_cu_ws_alloc(&ws, bytes, st, "linear-family summaries"));
    a.sum = (float *)ws.p;
    void *Pb = a.sum + nsum;
    float *Pz = a.sum + nsum + nPw;
    a.mix = nullptr;
    a.r = nr ? Pz + nz : nullptr;
    float *Wx = Pz + nz + nr; /* nwx floats (mix_mma only); nr is rounded to 4: 16-B aligned */
    LA_TRY((f16 ? in->summary_h : in->summary)(a, st));
    LA_TRY(lf_tc_mix(a, Pb, f16, Pz, Wx, Mp, Kp, hw, st));
    if (nr) LA_TRY(lf_launch_rv(a, st));
    return (f16 ? in->output_h : in->output)(a, Pb, Pz, groups, tpc, st);
}
