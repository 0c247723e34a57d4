/* Helpers shared by the `longattn bench` families: deterministic inputs,
 * medians of repeated calls, and the machine's sgemm peak. */
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli.h"

#ifdef LA_HAVE_CBLAS
#include <cblas.h>
#endif

const char *cli_blas_name(void) {
#ifdef LA_BLAS_NAME
    return LA_BLAS_NAME;
#else
    return "builtin";
#endif
}

/* The CLI's main() sets OpenBLAS to one thread for the whole program (the
 * program's choice, cli/main.c): every call here is single-threaded. */
void cli_sgemm(int64_t M, int64_t N, int64_t K, const float *A, const float *B, float *C) {
#ifdef LA_HAVE_CBLAS
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.f, A, (int)K, B,
                (int)N, 0.f, C, (int)N);
#else
    for (int64_t i = 0; i < M; i++) {
        float *c = C + i * N;
        for (int64_t j = 0; j < N; j++) c[j] = 0.f;
        for (int64_t k = 0; k < K; k++) {
            const float a = A[i * K + k], *b = B + k * N;
            for (int64_t j = 0; j < N; j++) c[j] += a * b[j];
        }
    }
#endif
}

uint16_t cli_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

double cli_feature(la_feature f, double x) {
    switch (f) {
    case LA_FEATURE_IDENTITY: return x;
    case LA_FEATURE_RELU: return x > 0 ? x : 0;
    case LA_FEATURE_RELU_EPS: return (x > 0 ? x : 0) + 1e-6;
    case LA_FEATURE_RELU1: return (x > 0 ? x : 0) + 1;
    case LA_FEATURE_ELU1: return x >= 0 ? x + 1 : exp(x);
    }
    return x;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_bench_median(double *x, int n) {
    if (n <= 0) return 0;
    qsort(x, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

uint64_t cli_rng64_next(cli_rng64 *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double cli_rng64_uniform(cli_rng64 *r) {
    return (double)(cli_rng64_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

double cli_rng64_normal(cli_rng64 *r) {
    double u1 = cli_rng64_uniform(r), u2 = cli_rng64_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Uniform values in [-1, 1) from a splitmix64 stream: reproducible inputs
 * without touching the C library's global rand() state. */
void cli_bench_fill(float *x, size_t n, uint64_t seed) {
    cli_rng64 r = {seed};
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((cli_rng64_next(&r) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

double cli_bench_time_median(la_status (*call)(void *), void *arg, double min_time, int *reps,
                            la_status *st) {
    enum { MAXREP = 1000 };
    double t[MAXREP];
    double t0 = cli_now();
    *st = call(arg);
    const double first = cli_now() - t0;
    *reps = 1;
    /* the first call is a warm-up; a single call over 2 s is reported alone */
    if (*st != LA_OK || first > 2.0) return first;
    int n = 0;
    const double start = cli_now();
    while (n < MAXREP && (n < 3 || cli_now() - start < min_time)) {
        t0 = cli_now();
        *st = call(arg);
        t[n++] = cli_now() - t0;
        if (*st != LA_OK) return 0;
    }
    *reps = n;
    return cli_bench_median(t, n);
}

double cli_bench_sgemm_peak(int threads, double min_time) {
    const int64_t n = 1024;
    float *buf = malloc(sizeof(float) * (size_t)(3 * n * n) * (size_t)threads);
    if (!buf) return 0;
    cli_bench_fill(buf, (size_t)(3 * n * n) * (size_t)threads, 7);
    /* a peak: the fastest of at least 8 rounds (the first pays BLAS buffer
     * setup and page faults), so that a busy moment of a shared machine
     * lowers no row's "% of peak" below its truth and a lucky round of an
     * operator cannot exceed it by much */
    double best = INFINITY;
    int reps = 0;
    const double start = cli_now();
    while (reps < 200 && (reps < 8 || cli_now() - start < min_time)) {
        const double t0 = cli_now();
#pragma omp parallel num_threads(threads)
        {
            int id = 0;
#ifdef _OPENMP
            id = omp_get_thread_num();
#endif
            float *A = buf + (size_t)id * (size_t)(3 * n * n), *B = A + n * n, *C = B + n * n;
            cli_sgemm(n, n, n, A, B, C);
        }
        const double dt = cli_now() - t0;
        if (reps > 0 && dt < best) best = dt;
        reps++;
    }
    free(buf);
    return 2.0 * n * n * n * threads / best * 1e-9;
}
