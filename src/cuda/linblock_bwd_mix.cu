/* The mixing products of the tensor-core linear-family backward (see
 * linblock_bwd_tc.cu): A_i = Σ_b W[i,b] S_b, dS_b = Σ_i W[i,b] dA_i and
 * dW[i,b] = ⟨dA_i, S_b⟩ as batched GEMMs on mma.sync with split operands
 * (x = hi + lo, three passes: fp32 in and out to about 16 bits), and the
 * fixed-order reduction of dW over ranges, batches and heads. */
#include "cuda/linblock_bwd_tc.cuh"

namespace {

#define LT_MG_LD (LT_MG_K + 8)
#define LT_MG_SMEM ((2 * 64 + 2 * 128) * LT_MG_LD * 2)
__global__ void __launch_bounds__(LT_THREADS) lt_mgemm_kernel(lt_gemm m) {
    LT_SMEM_DECL;
    lt_bf *sA = (lt_bf *)lt_sm, *sAl = sA + 64 * LT_MG_LD, *sB = sAl + 64 * LT_MG_LD;
    lt_bf *sBl = sB + 128 * LT_MG_LD;
    const int tid = lt_tid(), w = tid >> 5, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
    const int64_t ti = lt_bx() / m.tilesN, tj = lt_bx() % m.tilesN;
    const int64_t z = lt_by() / m.splits, sp = lt_by() % m.splits;
    const float *A = m.A + (m.aMod ? z % m.aMod : z) * m.aZ, *B = m.B + z * m.bZ;
    const int64_t i0 = ti * 64, j0 = tj * 128, kb = sp * m.kper, ke = lt_min(m.K, kb + m.kper);
    const int m0 = (w & 3) * 16, n0 = (w >> 2) * 64;
    float acc[8][4];
    lt_zero(acc);
    /* the loads of step k0 + 32 are issued before the products of step k0
     * (the contiguous direction of each operand varies fastest) */
    constexpr int IA = 64 * LT_MG_K / LT_THREADS, IB = 128 * LT_MG_K / LT_THREADS;
    float xa[IA], xb[IB];
    auto fetch = [&](int64_t k0) {
#pragma unroll
        for (int t = 0; t < IA; t++) {
            const int e = tid + t * LT_THREADS;
            const int kk = m.aK == 1 ? e % LT_MG_K : e / 64, ii = m.aK == 1 ? e / LT_MG_K : e % 64;
            const int64_t gi = i0 + ii, gk = k0 + kk;
            xa[t] = gi < m.rows && gk < ke ? A[gi * m.aI + gk * m.aK] : 0.f;
        }
#pragma unroll
        for (int t = 0; t < IB; t++) {
            const int e = tid + t * LT_THREADS;
            const int jj = m.bJ == 1 ? e % 128 : e / LT_MG_K, kk = m.bJ == 1 ? e / 128 : e % LT_MG_K;
            const int64_t gj = j0 + jj, gk = k0 + kk;
            xb[t] = gj < m.cols && gk < ke ? B[gk * m.bK + gj * m.bJ] : 0.f;
        }
    };
    if (kb < ke) fetch(kb);
    for (int64_t k0 = kb; k0 < ke; k0 += LT_MG_K) {
        lt_sync();
#pragma unroll
        for (int t = 0; t < IA; t++) {
            const int e = tid + t * LT_THREADS;
            const int kk = m.aK == 1 ? e % LT_MG_K : e / 64, ii = m.aK == 1 ? e / LT_MG_K : e % 64;
            const lt_bf hi = lt_h(xa[t]);
            sA[ii * LT_MG_LD + kk] = hi;
            sAl[ii * LT_MG_LD + kk] = lt_h(xa[t] - lt_f(hi));
        }
#pragma unroll
        for (int t = 0; t < IB; t++) {
            const int e = tid + t * LT_THREADS;
            const int jj = m.bJ == 1 ? e % 128 : e / LT_MG_K, kk = m.bJ == 1 ? e / 128 : e % LT_MG_K;
            const lt_bf hi = lt_h(xb[t]);
            sB[jj * LT_MG_LD + kk] = hi;
            sBl[jj * LT_MG_LD + kk] = lt_h(xb[t] - lt_f(hi));
        }
        lt_sync();
        if (k0 + LT_MG_K < ke) fetch(k0 + LT_MG_K);
        lt_mma3<8>(acc, sA, sAl, LT_MG_LD, sB, sBl, LT_MG_LD, m0, n0, LT_MG_K);
    }
    float *Cp = m.C + (int64_t)lt_by() * m.cZ;
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int64_t gi = i0 + m0 + g + 8 * hr;
        if (gi >= m.rows) continue;
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            const int64_t gj = j0 + n0 + nt * 8 + 2 * c4;
            if (gj < m.cols) Cp[gi * m.cI + gj] = acc[nt][2 * hr];
            if (gj + 1 < m.cols) Cp[gi * m.cI + gj + 1] = acc[nt][2 * hr + 1];
        }
    }
}

/* dW[hw][e] = Σ_batch Σ_head Σ_split part[(b·H + h)·splits + split][e], in order */
__global__ void lt_dw_reduce_kernel(int64_t total, int64_t B, int64_t H, int64_t Hw,
                                    int64_t splits, int64_t MM, const float *part, float *dW) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t hw = i / MM, e = i % MM;
    const int64_t h0 = Hw == 1 ? 0 : hw, h1 = Hw == 1 ? H : hw + 1;
    float s = 0.f;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = h0; h < h1; h++)
            for (int64_t sp = 0; sp < splits; sp++) s += part[((b * H + h) * splits + sp) * MM + e];
    dW[i] = s;
}

} // namespace

la_status lt_gemm_run(const lt_gemm &m0, int64_t batches, cudaStream_t s) {
    lt_gemm m = m0;
    if (m.kper <= 0) m.kper = lt_cdiv(m.K, LT_MG_K) * LT_MG_K;
    m.tilesN = lt_cdiv(m.cols, 128);
    LT_LAUNCH(lt_mgemm_kernel, lt_cdiv(m.rows, 64) * m.tilesN, batches * m.splits, LT_MG_SMEM, s,
              m);
    return LA_OK;
}

la_status lt_dw_reduce(int64_t B, int64_t H, int64_t Hw, int64_t splits, int64_t MM,
                       const float *part, float *dW, cudaStream_t s) {
    BWD_LAUNCH(lt_dw_reduce_kernel, Hw * MM, s, B, H, Hw, splits, MM, part, dW);
    return LA_OK;
}
