/* The mixing products of the `mma2` variant of the tensor-core linear-family
 * backward (linblock_bwd_tc.cu, lt_run with variant 2): batched GEMMs on
 * mma.sync over fp32 operands in global memory,
 *   C[y][i][j] = Σ_{k in split} A(z, i, k) B(z, k, j),  y = z·splits + split,
 * with each operand rounded to bf16 once (single pass) or split x = hi + lo
 * (16 bits of x; the products hi·hi + lo·hi + hi·lo, lo·lo dropped) as its
 * consumer's precision asks (lt2_gemm::splitA / splitB).
 *
 * Against lt_mgemm_kernel (the `mma` variant): 16-byte loads along each
 * operand's contiguous direction (both layouts: A(i,k) at A[i·lda + k] or
 * A[k·lda + i]; B(k,j) at B[k·ldb + j] or B[j·ldb + k]), bf16 tiles stored
 * in the global layout (8-byte shared stores, no transposed 16-bit stores),
 * fragments by ldmatrix (.trans where the tile's rows are the reduction),
 * two shared-memory stages (one barrier per 32-wide reduction step, the
 * next step's loads in flight during the products), the row tiles of one
 * column slab adjacent in launch order (the slab is read from L2 after the
 * first), and several CTAs per SM (≤ 62 KB of shared memory). The tile is
 * 64 × BN (BN = 128 or 64), 8 warps of 16 rows × BN/2 columns.
 *
 * Requirements (checked by lt2_gemm_run): lda, ldb multiples of 4 and the
 * operands 16-byte aligned; an operand read along k in 4-wide chunks is
 * zero (or ignored) from its K up to the next multiple of 4 (the packed
 * mixing matrices are zero-padded); kper a multiple of 32. Under LA_BWD_EMU
 * the same text runs on the host emulator (bwd_emu.cuh). */
#include "cuda/linblock_bwd_tc.cuh"

namespace {

#define L2_BK 32
#define L2_LK (L2_BK + 8) /* a row of 32 k, padded: ldmatrix conflict-free */

/* tile shapes of one operand stage (bf16 elements): A as [64][L2_LK] (k
 * contiguous) or [32][64 + 8] (rows contiguous); B as [BN][L2_LK] or
 * [32][BN + 8] */
template <int BN> struct l2_cfg {
    static constexpr int NT = BN / 16;          /* n-tiles per warp (BN/2 columns) */
    static constexpr int LA_N = 64 + 8, LB_N = BN + 8;
    static constexpr int A_EL = 64 * L2_LK > L2_BK * LA_N ? 64 * L2_LK : L2_BK * LA_N;
    static constexpr int B_EL = BN * L2_LK > L2_BK * LB_N ? BN * L2_LK : L2_BK * LB_N;
    static constexpr int STAGE = 2 * A_EL + 2 * B_EL; /* hi and lo of both */
    static constexpr int IA = 64 * L2_BK / 4 / LT_THREADS;  /* float4 per thread */
    static constexpr int IB = BN * L2_BK / 4 / LT_THREADS;
    static constexpr size_t SMEM = (size_t)2 * STAGE * 2;
};

/* chunk `e` of a 4-wide load of an R × 32 tile (k contiguous: R rows of 8
 * chunks; else 32 k-rows of R/4 chunks): its row r (of R) and k */
template <int R> BWD_DEV inline void l2_chunk(int e, bool kc, int &r, int &k) {
    if (kc) r = e / (L2_BK / 4), k = (e % (L2_BK / 4)) * 4;
    else k = e / (R / 4), r = (e % (R / 4)) * 4;
}

/* 4 fp32 → bf16 hi (and, sl set, lo = bf16(x − hi)) at sh[off..off+3]: the
 * 4 values of a chunk are contiguous in the tile's layout too */
BWD_DEV inline void l2_put4(const float4 &x, lt_bf *sh, lt_bf *sl, int off) {
    const float v[4] = {x.x, x.y, x.z, x.w};
    lt_bf h[4], l[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        h[j] = lt_h(v[j]);
        l[j] = lt_h(v[j] - lt_f(h[j]));
    }
    uint2 u;
    u.x = (uint32_t)h[0] | ((uint32_t)h[1] << 16);
    u.y = (uint32_t)h[2] | ((uint32_t)h[3] << 16);
    *reinterpret_cast<uint2 *>(sh + off) = u;
    if (sl) {
        u.x = (uint32_t)l[0] | ((uint32_t)l[1] << 16);
        u.y = (uint32_t)l[2] | ((uint32_t)l[3] << 16);
        *reinterpret_cast<uint2 *>(sl + off) = u;
    }
}

/* acc += A·B over one 32-wide step for one warp (rows m0.., columns n0..):
 * A(m,k) at sA[m·L2_LK + k] or (AT) sA[k·LA_N + m]; B(k,n) at
 * sB[n·L2_LK + k] or (BT) sB[k·LB_N + n] */
template <int BN>
BWD_DEV inline void l2_mma(float (&acc)[l2_cfg<BN>::NT][4], bool AT, bool BT, const lt_bf *sA,
                           const lt_bf *sB, int m0, int n0) {
    using C = l2_cfg<BN>;
    const int lane = lt_tid() & 31, li = lane & 7, lj = lane >> 3;
#pragma unroll
    for (int k0 = 0; k0 < L2_BK; k0 += 16) {
        uint32_t a[4];
        if (!AT) lt_ldsm4(a, sA + (m0 + 8 * (lj & 1) + li) * L2_LK + k0 + 8 * (lj >> 1));
        else lt_ldsm4t(a, sA + (k0 + 8 * (lj >> 1) + li) * C::LA_N + m0 + 8 * (lj & 1));
#pragma unroll
        for (int np = 0; np < C::NT / 2; np++) {
            uint32_t b[4];
            const int nb = n0 + 16 * np;
            if (!BT) lt_ldsm4(b, sB + (nb + 8 * (lj >> 1) + li) * L2_LK + k0 + 8 * (lj & 1));
            else lt_ldsm4t(b, sB + (k0 + 8 * (lj & 1) + li) * C::LB_N + nb + 8 * (lj >> 1));
            lt_mma(acc[2 * np], a, b[0], b[1]);
            lt_mma(acc[2 * np + 1], a, b[2], b[3]);
        }
    }
}

template <int BN> __global__ void __launch_bounds__(LT_THREADS) l2_gemm_kernel(lt2_gemm m) {
    using C = l2_cfg<BN>;
    LT_SMEM_DECL;
    lt_bf *sm = (lt_bf *)lt_sm;
    const int tid = lt_tid(), w = tid >> 5, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
    /* the row tiles of one column slab run next to each other */
    const int64_t ti = lt_bx() % m.tilesM, tj = lt_bx() / m.tilesM;
    const int64_t z = lt_by() / m.splits, sp = lt_by() % m.splits;
    const float *A = m.A + (m.aMod ? z % m.aMod : z) * m.aZ, *B = m.B + z * m.bZ;
    const int64_t i0 = ti * 64, j0 = tj * BN, kb = sp * m.kper, ke = lt_min(m.K, kb + m.kper);
    const bool akc = !m.aT, bkc = m.bT; /* whether the operand's contiguous direction is k */
    const int m0 = (w & 3) * 16, n0 = (w >> 2) * (BN / 2);
    float acc[C::NT][4];
    lt_zero(acc);
    float4 xa[C::IA], xb[C::IB];
    const float4 zero4 = make_float4(0.f, 0.f, 0.f, 0.f);
    auto fetch = [&](int64_t k0) {
#pragma unroll
        for (int t = 0; t < C::IA; t++) {
            int r, k;
            l2_chunk<64>(tid + t * LT_THREADS, akc, r, k);
            const int64_t gi = i0 + r, gk = k0 + k;
            bool ok = gk < ke && gi < m.rows;
            const float *p = akc ? A + gi * m.lda + gk : A + gk * m.lda + gi;
            xa[t] = ok ? *reinterpret_cast<const float4 *>(p) : zero4;
        }
#pragma unroll
        for (int t = 0; t < C::IB; t++) {
            int r, k;
            l2_chunk<BN>(tid + t * LT_THREADS, bkc, r, k);
            const int64_t gj = j0 + r, gk = k0 + k;
            bool ok = gk < ke && gj < m.cols;
            const float *p = bkc ? B + gj * m.ldb + gk : B + gk * m.ldb + gj;
            xb[t] = ok ? *reinterpret_cast<const float4 *>(p) : zero4;
        }
    };
    auto stage = [&](int buf) {
        lt_bf *sA = sm + buf * C::STAGE, *sAl = sA + C::A_EL, *sB = sAl + C::A_EL;
        lt_bf *sBl = sB + C::B_EL;
#pragma unroll
        for (int t = 0; t < C::IA; t++) {
            int r, k;
            l2_chunk<64>(tid + t * LT_THREADS, akc, r, k);
            l2_put4(xa[t], sA, m.splitA ? sAl : nullptr, akc ? r * L2_LK + k : k * C::LA_N + r);
        }
#pragma unroll
        for (int t = 0; t < C::IB; t++) {
            int r, k;
            l2_chunk<BN>(tid + t * LT_THREADS, bkc, r, k);
            l2_put4(xb[t], sB, m.splitB ? sBl : nullptr, bkc ? r * L2_LK + k : k * C::LB_N + r);
        }
    };
    /* A(m,k) is at sA[k·LA_N + m] when A's rows are contiguous (aT); B(k,n)
     * at sB[k·LB_N + n] when B's columns are contiguous (!bT) */
    const bool AT = m.aT, BT = !m.bT;
    int buf = 0;
    if (kb < ke) {
        fetch(kb);
        stage(0);
    }
    lt_sync();
    for (int64_t k0 = kb; k0 < ke; k0 += L2_BK) {
        const bool more = k0 + L2_BK < ke;
        if (more) fetch(k0 + L2_BK);
        const lt_bf *sA = sm + buf * C::STAGE, *sAl = sA + C::A_EL, *sB = sAl + C::A_EL;
        const lt_bf *sBl = sB + C::B_EL;
        l2_mma<BN>(acc, AT, BT, sA, sB, m0, n0);
        if (m.splitA) l2_mma<BN>(acc, AT, BT, sAl, sB, m0, n0);
        if (m.splitB) l2_mma<BN>(acc, AT, BT, sA, sBl, m0, n0);
        if (more) stage(buf ^ 1);
        lt_sync();
        buf ^= 1;
    }
    float *Cp = m.C + (int64_t)lt_by() * m.cZ;
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int64_t gi = i0 + m0 + g + 8 * hr;
        if (gi >= m.rows) continue;
#pragma unroll
        for (int nt = 0; nt < C::NT; nt++) {
            const int64_t gj = j0 + n0 + nt * 8 + 2 * c4;
            if (gj < m.cols) Cp[gi * m.ldc + gj] = acc[nt][2 * hr];
            if (gj + 1 < m.cols) Cp[gi * m.ldc + gj + 1] = acc[nt][2 * hr + 1];
        }
    }
}

/* dst[hw][i][k] = W[hw][i][k] for i, k < M, zero up to Mp */
__global__ void l2_pad_kernel(int64_t total, int64_t M, int64_t Mp, const float *W, float *dst) {
    const int64_t e = bwd_gid();
    if (e >= total) return;
    const int64_t k = e % Mp, i = (e / Mp) % Mp, hw = e / (Mp * Mp);
    dst[e] = i < M && k < M ? W[(hw * M + i) * M + k] : 0.f;
}

} // namespace

la_status lt2_gemm_run(const lt2_gemm &m0, int64_t batches, cudaStream_t s) {
    lt2_gemm m = m0;
    if (m.kper <= 0) m.kper = lt_cdiv(m.K, L2_BK) * L2_BK;
    if (m.kper % L2_BK || m.lda % 4 || m.ldb % 4 || ((uintptr_t)m.A & 15) || ((uintptr_t)m.B & 15) ||
        (m.aZ % 4) || (m.bZ % 4))
        return la_err(LA_ERR_INTERNAL, "mixing GEMM (mma2): unaligned operands (lda %lld, ldb %lld)",
                      (long long)m.lda, (long long)m.ldb);
    m.tilesM = lt_cdiv(m.rows, 64);
    if (m.cols < 256) {
        /* narrow outputs (dW: M columns): 64-wide tiles waste less */
        const int64_t tilesN = lt_cdiv(m.cols, 64);
        LT_LAUNCH(l2_gemm_kernel<64>, m.tilesM * tilesN, batches * m.splits, l2_cfg<64>::SMEM, s, m);
    } else {
        const int64_t tilesN = lt_cdiv(m.cols, 128);
        LT_LAUNCH(l2_gemm_kernel<128>, m.tilesM * tilesN, batches * m.splits, l2_cfg<128>::SMEM, s,
                  m);
    }
    return LA_OK;
}

la_status lt2_pad_mixing(int64_t Hw, int64_t M, int64_t Mp, const float *W, float *dst,
                         cudaStream_t s) {
    BWD_LAUNCH(l2_pad_kernel, Hw * Mp * Mp, s, M, Mp, W, dst);
    return LA_OK;
}
