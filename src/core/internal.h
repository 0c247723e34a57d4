/* Internal helpers shared by every backend: errors, tensor checks, element
 * access, overflow-checked sizes, workspace, threads, BLAS. Not installed. */
#ifndef LA_INTERNAL_H
#define LA_INTERNAL_H

#include "longattn.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ------------------------------------------------------------ */
/* Record a printf-style message in the thread-local buffer and return s.
 * Use as: return la_err(LA_ERR_SHAPE, "q: expected rank 4, got %d", n); */
la_status la_err(la_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Clear the thread-local message (called on success paths of entry points). */
void la_err_clear(void);

#define LA_TRY(expr)                          \
    do {                                      \
        la_status la_try_s_ = (expr);         \
        if (la_try_s_ != LA_OK) return la_try_s_; \
    } while (0)

/* ---- context ----------------------------------------------------------- */
#define LA_CUDA_ATTR_SLOTS 32
struct la_context {
    int threads;            /* 0 = all cores */
    la_alloc_fn alloc;
    la_free_fn free_fn;
    void *alloc_user;
    void *cuda_stream;
    /* forced kernel variants (core/variant.h) */
    int n_variants;
    char variant_family[16][24];
    char variant_name[16][24];
    int verbose;            /* selection functions report their choice */
    /* The CUDA device's compute capability, read on first use by la_cu_cc
     * (src/cuda/common.cuh): ((device + 1) << 10) | (10 * major + minor),
     * 0 = not read yet. Written with relaxed atomics: every writer stores the
     * same value for a device, so concurrent first calls agree. */
    int cuda_arch_cache;
    /* Kernels whose dynamic shared-memory limit this context has raised
     * (la_cu_func_smem, src/cuda/devmem.cu), so that later calls skip the
     * driver call: the kernel's address, claimed once per slot with a
     * compare-and-swap, and ((device + 1) << 32) | bytes set, stored after
     * the attribute call succeeded (0 = not set). Atomic builtins. */
    const void *cuda_attr_fn[LA_CUDA_ATTR_SLOTS];
    long long cuda_attr_val[LA_CUDA_ATTR_SLOTS];
};
/* This thread's number inside an OpenMP parallel region (0 outside one, or
 * without OpenMP): the index of its slice of a per-thread workspace. */
static inline int la_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}
/* Threads to use for a CPU op (>= 1). ctx may be NULL (= all cores). */
int la_ctx_threads(const la_context *ctx);
/* Workspace from the context's allocator (malloc when ctx is NULL).
 * Returns NULL on failure (and sets LA_ERR_NOMEM message). */
void *la_ws_alloc(const la_context *ctx, size_t bytes);
void la_ws_free(const la_context *ctx, void *p);
/* Product of sizes with overflow check; returns LA_ERR_OVERFLOW with a
 * message naming `what` if a*b (in bytes or elements) overflows. */
la_status la_mul_size(size_t a, size_t b, size_t *out, const char *what);

/* ---- tensor checks ----------------------------------------------------- */
/* dtype mask helpers */
#define LA_DT(x) (1u << (x))
/* The float dtypes every operator takes for its q/k/v/out-like views: on the
 * CPU they are loaded to fp32 and stored back rounded to nearest even (bf16,
 * f16: la_load_f32 / la_store_f32); every sum is fp32. */
#define LA_DT_FLOAT (LA_DT(LA_F32) | LA_DT(LA_F64) | LA_DT(LA_BF16) | LA_DT(LA_F16))

/* Checks: t non-NULL, data non-NULL, rank == ndim, dtype in mask, device
 * as given, extents > 0 (unless allow_empty), strides >= 0 and the
 * addressed span computable without overflow. Message names `name`. */
la_status la_check_tensor(const la_tensor *t, const char *name, int ndim, unsigned dtype_mask,
                          la_device dev, bool allow_empty);
/* Check t->ne[axis] == want; message "name: dim AXIS is X, expected WANT (why)". */
la_status la_check_dim(const la_tensor *t, const char *name, int axis, int64_t want,
                       const char *why);
/* "[2, 3, 4]" into buf. */
const char *la_shape_str(const la_tensor *t, char *buf, size_t n);
/* Total elements (product of extents). */
int64_t la_numel(const la_tensor *t);
/* Whether an output view overlaps memory with an input view (conservative:
 * byte-range intersection). */
bool la_tensors_overlap(const la_tensor *a, const la_tensor *b);

/* ---- element access (CPU) ---------------------------------------------- */
static inline float la_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t la_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}
/* IEEE binary16 <-> f32, bit-exact with F16C / _Float16 / CUDA __half: the
 * load is exact; the store rounds to nearest even, values of magnitude
 * >= 65520 (65504 plus half an ulp) become +-Inf, NaN stays a (quiet) NaN,
 * and results below 2^-14 are subnormals. Plain C (no F16C needed), so the
 * portable build behaves the same. */
static inline float la_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t ex = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t u;
    if (ex == 0x1fu) {
        u = sign | 0x7f800000u | (man << 13); /* Inf, NaN (payload kept) */
    } else if (ex == 0) {
        const float m = (float)man * 5.9604644775390625e-8f; /* man * 2^-24: exact */
        memcpy(&u, &m, 4);
        u |= sign;
    } else {
        u = sign | ((ex + 112u) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t la_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    uint32_t o;
    if (u >= 0x47800000u) {            /* >= 2^16 (or Inf / NaN) */
        o = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
    } else if (u < 0x38800000u) {      /* below 2^-14: subnormal or zero */
        /* adding 0.5 leaves the rounded-to-nearest-even multiple of 2^-24 in
         * the low mantissa bits (the FPU does the rounding) */
        float a, magic;
        const uint32_t mu = 126u << 23;
        memcpy(&a, &u, 4);
        memcpy(&magic, &mu, 4);
        const float s = a + magic;
        uint32_t su;
        memcpy(&su, &s, 4);
        o = su - mu;
    } else {
        const uint32_t odd = (u >> 13) & 1u;
        u += 0xc8000fffu + odd;        /* rebias exponent (-112 << 23), round half even */
        o = u >> 13;                    /* a carry into exponent 31 gives Inf */
    }
    return (uint16_t)(o | sign);
}
/* Load element at flat element offset `off` of a float tensor as f32. */
static inline float la_load_f32(const la_tensor *t, int64_t off) {
    switch (t->dtype) {
    case LA_F32: return ((const float *)t->data)[off];
    case LA_F64: return (float)((const double *)t->data)[off];
    case LA_BF16: return la_bf16_to_f32(((const uint16_t *)t->data)[off]);
    case LA_F16: return la_f16_to_f32(((const uint16_t *)t->data)[off]);
    case LA_I32: return (float)((const int32_t *)t->data)[off];
    default: return NAN;
    }
}
static inline void la_store_f32(la_tensor *t, int64_t off, float x) {
    switch (t->dtype) {
    case LA_F32: ((float *)t->data)[off] = x; break;
    case LA_F64: ((double *)t->data)[off] = (double)x; break;
    case LA_BF16: ((uint16_t *)t->data)[off] = la_f32_to_bf16(x); break;
    case LA_F16: ((uint16_t *)t->data)[off] = la_f32_to_f16(x); break;
    default: break;
    }
}
static inline int64_t la_off2(const la_tensor *t, int64_t i0, int64_t i1) {
    return i0 * t->nb[0] + i1 * t->nb[1];
}
static inline int64_t la_off3(const la_tensor *t, int64_t i0, int64_t i1, int64_t i2) {
    return i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2];
}
static inline int64_t la_off4(const la_tensor *t, int64_t i0, int64_t i1, int64_t i2,
                              int64_t i3) {
    return i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}

/* Gather the [N, D] panel of (b, h) of a [B,N,H,D] view into dst (f32,
 * row stride ld >= D). Any float dtype, any strides. */
void la_gather_bnhd(const la_tensor *t, int64_t b, int64_t h, float *dst, int64_t ld);
/* Scatter an [N, D] f32 panel (row stride ld) into (b, h) of a [B,N,H,D] view. */
void la_scatter_bnhd(la_tensor *t, int64_t b, int64_t h, const float *src, int64_t ld);
/* Same for row ranges [n0, n0+n). */
void la_gather_bnhd_rows(const la_tensor *t, int64_t b, int64_t h, int64_t n0, int64_t n,
                         float *dst, int64_t ld);
void la_scatter_bnhd_rows(la_tensor *t, int64_t b, int64_t h, int64_t n0, int64_t n,
                          const float *src, int64_t ld);

/* ---- feature maps ------------------------------------------------------ */
/* max(x, 0) with NaN propagated, as torch.relu: NaN < 0 is false, so a NaN x
 * comes through (x > 0 ? x : 0 would map it to 0). Compilers emit this as
 * maxps(0, x), which returns its second operand when either is NaN. */
static inline float la_relu(float x) { return x < 0.f ? 0.f : x; }
static inline double la_relu_f64(double x) { return x < 0.0 ? 0.0 : x; }
static inline float la_feature_apply(la_feature f, float x) {
    switch (f) {
    case LA_FEATURE_IDENTITY: return x;
    case LA_FEATURE_RELU: return la_relu(x);
    case LA_FEATURE_RELU_EPS: return la_relu(x) + 1e-6f;
    case LA_FEATURE_RELU1: return la_relu(x) + 1.f;
    case LA_FEATURE_ELU1: return x >= 0.f ? x + 1.f : expf(x);
    }
    return x;
}
la_status la_check_feature(la_feature f, const char *name);

/* ---- BLAS -------------------------------------------------------------- */
/* Row-major C[M,N] = alpha * op(A)[M,K] op(B)[K,N] + beta * C.
 * Uses cblas_sgemm when the build found a BLAS, else a blocked C loop.
 * Always single-threaded inside (callers parallelize with OpenMP). */
void la_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
              int64_t ldc);
/* Name of the BLAS in use ("openblas", "cblas", "builtin"). */
const char *la_blas_name(void);

#ifdef __cplusplus
}
#endif
#endif
