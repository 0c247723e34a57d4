/* la_sgemm: row-major single-precision GEMM through cblas when available,
 * else a cache-blocked loop (correct everywhere, fast where BLAS is). */
#include "internal.h"

#ifdef LA_HAVE_CBLAS
#include <cblas.h>
#endif
#ifdef LA_BLAS_OPENBLAS
#include <pthread.h>
/* Kernels parallelize over batch x heads x tiles with OpenMP and call
 * la_sgemm on single tiles from inside those regions: a multi-threaded
 * OpenBLAS there would oversubscribe the cores, so every call runs
 * OpenBLAS single-threaded. OpenBLAS (0.3.21, pthreads) has no per-call
 * thread count, only a process-wide one that is read when a call starts.
 * The first of any number of concurrent la_sgemm calls saves that count
 * and sets 1, the last one to finish puts the saved count back: outside
 * la_sgemm the process's OpenBLAS setting (numpy's, the program's) is what
 * it was. The counter and mutex below only serialize that hand-over; they
 * hold no state of the library or of any result. */
static pthread_mutex_t la_blas_lock = PTHREAD_MUTEX_INITIALIZER;
static int la_blas_active;   /* la_sgemm calls in flight (under la_blas_lock) */
static int la_blas_saved;    /* OpenBLAS threads before the first of them */

static void blas_enter(void) {
    pthread_mutex_lock(&la_blas_lock);
    if (la_blas_active++ == 0) {
        la_blas_saved = openblas_get_num_threads();
        if (la_blas_saved != 1) openblas_set_num_threads(1);
    }
    pthread_mutex_unlock(&la_blas_lock);
}

static void blas_leave(void) {
    pthread_mutex_lock(&la_blas_lock);
    if (--la_blas_active == 0 && la_blas_saved != 1) openblas_set_num_threads(la_blas_saved);
    pthread_mutex_unlock(&la_blas_lock);
}
#endif

const char *la_blas_name(void) {
#ifdef LA_BLAS_NAME
    return LA_BLAS_NAME;
#else
    return "builtin";
#endif
}

#ifndef LA_HAVE_CBLAS
static inline float at(const float *X, int64_t ld, bool tr, int64_t r, int64_t c) {
    return tr ? X[c * ld + r] : X[r * ld + c];
}
#endif

void la_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
              int64_t ldc) {
    if (M <= 0 || N <= 0) return;
#ifdef LA_HAVE_CBLAS
    if (K <= 0) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
        return;
    }
#ifdef LA_BLAS_OPENBLAS
    blas_enter();
#endif
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
#ifdef LA_BLAS_OPENBLAS
    blas_leave();
#endif
#else
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
    /* i-k-j order so the inner loop streams rows of B and C when B is not
     * transposed; blocked over k to keep the B panel in cache. */
    const int64_t KB = 256;
    for (int64_t k0 = 0; k0 < K; k0 += KB) {
        int64_t k1 = k0 + KB < K ? k0 + KB : K;
        for (int64_t i = 0; i < M; i++) {
            float *c = C + i * ldc;
            for (int64_t k = k0; k < k1; k++) {
                float a = alpha * at(A, lda, trans_a, i, k);
                if (!trans_b) {
                    const float *b = B + k * ldb;
                    for (int64_t j = 0; j < N; j++) c[j] += a * b[j];
                } else {
                    for (int64_t j = 0; j < N; j++) c[j] += a * B[j * ldb + k];
                }
            }
        }
    }
#endif
}
