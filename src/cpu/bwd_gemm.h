/* Accumulating tile product of the CPU backward passes, read in place:
 *
 *     C[i][0..n) = beta·C[i][0..n) + alpha · Σ_k A(i, k) · B[k][0..n),
 *     A(i, k) = A[i·ars + k·acs],   beta ∈ {0, 1}
 *
 * A is addressed through two strides, so a row-major tile and its transpose
 * are both read where they lie (dV = Pᵀ·dO reads P by columns, dQ = dS·K by
 * rows) without BLAS's packing copies, which cost as much as a tenth of the
 * FlashAttention-2 backward's time on 256-wide tiles. With AVX-512 and
 * n ∈ {32, 64, 128} the rows of C are register-blocked (24 accumulators of
 * 16 floats each, B's row loaded once per k for 6 or 12 rows, the last rows
 * in blocks of 3 or 4, 2 and 1; n = 128 as two halves); any other n, or a
 * build without AVX-512, goes through la_sgemm. The sum over k runs in
 * order, in float, then is added to C: the result does not depend on the
 * threads. */
#ifndef LA_BWD_GEMM_H
#define LA_BWD_GEMM_H

#include "core/internal.h"

/* LA_VEC512: lets GCC vectorize a function's loops with 512-bit vectors
 * (it prefers 256 by default on these CPUs); empty elsewhere. */
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#define LA_VEC512 __attribute__((target("prefer-vector-width=512")))
#else
#define LA_VEC512
#endif

#if defined(__AVX512F__)
#include <immintrin.h>

/* MR rows of C, NV·16 columns. */
#define LA_BWD_ACC_KERNEL(NV, MR)                                                                  \
    static inline void la_bwd_acc_##NV##_##MR(int64_t kdim, float alpha, const float *A,           \
                                              int64_t ars, int64_t acs, const float *B,            \
                                              int64_t ldb, float *C, int64_t ldc, int add) {       \
        __m512 c[MR][NV];                                                                          \
        _Pragma("GCC unroll 16") for (int t = 0; t < MR; t++)                                      \
            _Pragma("GCC unroll 8") for (int u = 0; u < NV; u++) c[t][u] = _mm512_setzero_ps();   \
        for (int64_t k = 0; k < kdim; k++) {                                                       \
            const float *b = B + k * ldb, *a = A + k * acs;                                        \
            __m512 bv[NV];                                                                         \
            _Pragma("GCC unroll 8") for (int u = 0; u < NV; u++) bv[u] = _mm512_loadu_ps(b + 16 * u); \
            _Pragma("GCC unroll 16") for (int t = 0; t < MR; t++) {                                \
                const __m512 av = _mm512_set1_ps(a[t * ars]);                                      \
                _Pragma("GCC unroll 8") for (int u = 0; u < NV; u++)                              \
                    c[t][u] = _mm512_fmadd_ps(av, bv[u], c[t][u]);                                 \
            }                                                                                      \
        }                                                                                          \
        const __m512 al = _mm512_set1_ps(alpha);                                                   \
        _Pragma("GCC unroll 16") for (int t = 0; t < MR; t++)                                      \
            _Pragma("GCC unroll 8") for (int u = 0; u < NV; u++) {                                \
                float *cp = C + t * ldc + 16 * u;                                                  \
                _mm512_storeu_ps(cp, add ? _mm512_fmadd_ps(c[t][u], al, _mm512_loadu_ps(cp))       \
                                         : _mm512_mul_ps(c[t][u], al));                            \
            }                                                                                      \
    }

LA_BWD_ACC_KERNEL(2, 12)
LA_BWD_ACC_KERNEL(2, 4)
LA_BWD_ACC_KERNEL(2, 1)
LA_BWD_ACC_KERNEL(4, 6)
LA_BWD_ACC_KERNEL(4, 3)
LA_BWD_ACC_KERNEL(4, 2)
LA_BWD_ACC_KERNEL(4, 1)
#undef LA_BWD_ACC_KERNEL

/* The rows of C in blocks of MR, then the remainder in blocks of MR2 and of
 * one row (each row's sum is the same k-ordered chain in every block size). */
#define LA_BWD_ACC_ROWS(NV, MR, MR2)                                                               \
    do {                                                                                           \
        int64_t i = 0;                                                                             \
        for (; i + MR <= m; i += MR)                                                               \
            la_bwd_acc_##NV##_##MR(kdim, alpha, A + i * ars, ars, acs, B, ldb, C + i * ldc, ldc,   \
                                   beta != 0.f);                                                   \
        for (; i + MR2 <= m; i += MR2)                                                             \
            la_bwd_acc_##NV##_##MR2(kdim, alpha, A + i * ars, ars, acs, B, ldb, C + i * ldc, ldc,  \
                                    beta != 0.f);                                                  \
        if (NV == 4 && i + 2 <= m) {                                                               \
            la_bwd_acc_4_2(kdim, alpha, A + i * ars, ars, acs, B, ldb, C + i * ldc, ldc,           \
                           beta != 0.f);                                                           \
            i += 2;                                                                                \
        }                                                                                          \
        for (; i < m; i++)                                                                         \
            la_bwd_acc_##NV##_1(kdim, alpha, A + i * ars, ars, acs, B, ldb, C + i * ldc, ldc,      \
                                 beta != 0.f);                                                     \
    } while (0)
#endif

static inline void la_bwd_acc(int64_t m, int64_t n, int64_t kdim, float alpha, const float *A,
                              int64_t ars, int64_t acs, const float *B, int64_t ldb, float *C,
                              int64_t ldc, float beta) {
    if (m <= 0 || n <= 0) return;
    if (kdim <= 0) {
        if (beta == 0.f)
            for (int64_t i = 0; i < m; i++) memset(C + i * ldc, 0, (size_t)n * sizeof(float));
        return;
    }
#if defined(__AVX512F__)
    switch (n) {
    case 32: LA_BWD_ACC_ROWS(2, 12, 4); return;
    case 64: LA_BWD_ACC_ROWS(4, 6, 3); return;
    case 128: /* two 64-column halves: 6 rows × 4 vectors load less per FMA than 3 × 8 */
        LA_BWD_ACC_ROWS(4, 6, 3);
        B += 64, C += 64;
        LA_BWD_ACC_ROWS(4, 6, 3);
        return;
    default: break;
    }
#endif
    /* A(i, k) = A[i·ars + k·acs]: row-major A when acs = 1 (BLAS wants its
     * row stride >= kdim: any stride when m = 1), its transpose stored
     * row-major when ars = 1 (column stride >= m: any when kdim = 1); both
     * strides 1 with m, kdim > 1 (or neither 1) is not a BLAS layout: plain
     * loops. */
    if (acs == 1 && (m == 1 || ars >= kdim)) {
        la_sgemm(false, false, m, n, kdim, alpha, A, m == 1 ? kdim : ars, B, ldb, beta, C, ldc);
    } else if (ars == 1 && (kdim == 1 || acs >= m)) {
        la_sgemm(true, false, m, n, kdim, alpha, A, kdim == 1 ? m : acs, B, ldb, beta, C, ldc);
    } else {
        for (int64_t i = 0; i < m; i++) {
            float *c = C + i * ldc;
            if (beta == 0.f) memset(c, 0, (size_t)n * sizeof(float));
            for (int64_t k = 0; k < kdim; k++) {
                const float a = alpha * A[i * ars + k * acs];
                const float *b = B + k * ldb;
                for (int64_t x = 0; x < n; x++) c[x] += a * b[x];
            }
        }
    }
}

#endif
