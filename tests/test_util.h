/* Minimal test harness shared by the C tests (header-only).
 * Every test binary prints, as its last line, "N passed, N failed".
 * Reference implementations live in the test files themselves, written
 * plainly in float64, never calling the optimized code path. */
#ifndef LA_TEST_UTIL_H
#define LA_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "longattn.h"

typedef struct la_test_state {
    int passed, failed;
} la_test_state;

static la_test_state la_test_g; /* per-binary counters (tests only) */

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (cond) {                                                          \
            la_test_g.passed++;                                              \
        } else {                                                             \
            la_test_g.failed++;                                              \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);              \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
        }                                                                    \
    } while (0)

#define CHECK_OK(expr)                                                       \
    do {                                                                     \
        la_status s_ = (expr);                                               \
        CHECK(s_ == LA_OK, "%s -> %s: %s", #expr, la_status_string(s_),      \
              la_last_error());                                              \
    } while (0)

#define CHECK_STATUS(expr, want)                                             \
    do {                                                                     \
        la_status s_ = (expr);                                               \
        CHECK(s_ == (want), "%s -> %s (want %s): %s", #expr,                 \
              la_status_string(s_), la_status_string(want), la_last_error()); \
        CHECK(s_ == LA_OK || strlen(la_last_error()) > 0,                    \
              "%s: error without a message", #expr);                         \
    } while (0)

/* Calls whose tensors claim to be on CUDA while their memory is on the host.
 * A build without CUDA refuses them with LA_ERR_UNSUPPORTED. A CUDA build
 * would launch kernels on host pointers, so all-CUDA calls are made only in
 * builds without CUDA (tests/cuda covers the real thing); mixed-device calls
 * are refused before any launch: LA_ERR_DEVICE (CUDA build) or
 * LA_ERR_UNSUPPORTED (build without CUDA). */
static inline int la_test_built_with_cuda(void) { return strstr(la_build_info(), "cuda=yes") != NULL; }
#define CHECK_CUDA_REFUSED(expr)                                             \
    do {                                                                     \
        if (!la_test_built_with_cuda()) CHECK_STATUS(expr, LA_ERR_UNSUPPORTED); \
    } while (0)
#define CHECK_MIXED_DEVICE(expr)                                             \
    do {                                                                     \
        la_status s_ = (expr);                                               \
        CHECK(s_ == LA_ERR_DEVICE || s_ == LA_ERR_UNSUPPORTED,               \
              "%s -> %s (want DEVICE or UNSUPPORTED): %s", #expr,            \
              la_status_string(s_), la_last_error());                        \
        CHECK(strlen(la_last_error()) > 0, "%s: error without a message", #expr); \
    } while (0)

static inline int la_test_finish(void) {
    printf("%d passed, %d failed\n", la_test_g.passed, la_test_g.failed);
    return la_test_g.failed ? 1 : 0;
}

/* splitmix64-based RNG, seeded from time unless LA_TEST_SEED is set; the
 * seed is printed so a failure can be replayed. */
typedef struct la_rng { uint64_t s; } la_rng;
static inline uint64_t la_rng_next(la_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline double la_rng_uniform(la_rng *r) { return (la_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }
static inline double la_rng_normal(la_rng *r) {
    double u1 = la_rng_uniform(r), u2 = la_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
static inline la_rng la_test_rng(const char *name) {
    const char *e = getenv("LA_TEST_SEED");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed = e ? strtoull(e, NULL, 0) : ((uint64_t)ts.tv_sec * 1000003u) ^ (uint64_t)ts.tv_nsec;
    printf("# %s: LA_TEST_SEED=%llu\n", name, (unsigned long long)seed);
    la_rng r = {seed};
    return r;
}
/* Feature maps of SPEC §2 in float64, written out for the references (NaN
 * propagates, as through torch.relu). */
static inline double la_ref_feature(la_feature f, double x) {
    switch (f) {
    case LA_FEATURE_IDENTITY: return x;
    case LA_FEATURE_RELU: return isnan(x) ? x : (x > 0 ? x : 0);
    case LA_FEATURE_RELU_EPS: return (isnan(x) ? x : (x > 0 ? x : 0)) + 1e-6;
    case LA_FEATURE_RELU1: return (isnan(x) ? x : (x > 0 ? x : 0)) + 1;
    case LA_FEATURE_ELU1: return x >= 0 ? x + 1 : exp(x);
    }
    return NAN;
}
/* f rounded to the nearest bf16 (ties to even), kept as float: what a bf16
 * input holds. */
static inline float la_round_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}
/* f rounded to the nearest IEEE binary16 (ties to even; +-Inf from 65520 on,
 * subnormals below 2^-14), kept as float: what an f16 input holds. Written
 * independently of the library's converter (frexp / rint in double). */
static inline float la_round_f16(float f) {
    if (isnan(f) || isinf(f)) return f;
    const double a = fabs((double)f);
    if (a >= 65520.0) return copysignf(INFINITY, f);
    int e;
    frexp(a, &e);              /* a = m 2^e, m in [0.5, 1) */
    int q = e - 11;            /* ulp exponent: 10 mantissa bits below the leading one */
    if (q < -24) q = -24;      /* the subnormal ulp */
    return copysignf((float)ldexp(rint(ldexp(a, -q)), q), f);
}
/* f rounded to the storage of dt (bf16, f16; f32 and others unchanged). */
static inline float la_round_dt(float f, la_dtype dt) {
    return dt == LA_BF16 ? la_round_bf16(f) : dt == LA_F16 ? la_round_f16(f) : f;
}
static inline void la_fill_normal(la_rng *r, float *x, int64_t n, double scale) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(la_rng_normal(r) * scale);
}
static inline void la_fill_nan(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = NAN;
}
/* Relative error max|a-b| / max(max|b|, tiny) over n values; any NaN in a
 * (unwritten output) gives INFINITY. */
static inline double la_rel_err(const float *a, const double *ref, int64_t n) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) && !isnan(ref[i])) return INFINITY;
        double d = fabs((double)a[i] - ref[i]);
        if (d > md) md = d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    return md / (mr > 1e-30 ? mr : 1e-30);
}
#endif
