/* Staging and checks of the backward case tables (cases_backward_lin.c,
 * cases_backward_attn.c, cases_backward_focused.c), from the former
 * tests/cuda/test_cuda_backward.c. Header-only, static (inline).
 *
 * Every backward case runs on one backend:
 *   BO_CUDA  the CUDA entry point (la_<op>_backward_cuda) on device views,
 *            then the public la_<op>_backward on the same views, whose
 *            gradients must be bit-identical to the direct call's (dispatch
 *            and determinism), then the public call on CPU copies: the CPU
 *            backward must agree (1e-4 relative Frobenius fp32, 1e-2 bf16);
 *   BO_CPU   the public la_<op>_backward on host views, twice: the second
 *            call bit-identical to the first;
 * and in both the first call's gradients against float64 references on
 * fresh random inputs, dense and permuted ([B,H,N,D] memory viewed as
 * [B,N,H,D]; rank 3 [H,T,D]; else rows padded by 3 elements), fp32 and
 * bf16, gradient buffers poisoned (0xFF bytes: NaN) before every call.
 *
 * Bounds (TRAINING.md §1): fp32 gradients within 1e-4 relative Frobenius of
 * float64; bf16 gradients within twice the error of the same formula with
 * its intermediates rounded to bf16 (what a plain bf16 PyTorch formulation
 * does) plus 1e-4, both against float64 on the same bf16 inputs.
 *
 * Kernel variants: each CUDA case runs once with the library's choice and
 * once per name in its family's list (BWD_VARIANTS_*) forced through the
 * context; a variant that does not take the case's views makes that case
 * SKIPPED (the backward families answer a forced variant as every family
 * does, src/cuda/select.cuh: "variant: ...", LA_ERR_ARG for an unknown name,
 * LA_ERR_UNSUPPORTED for a name that does not take the views). */
#ifndef LA_BO_BWD_H
#define LA_BO_BWD_H

#include "bo_staging.h"

#ifdef LA_WITH_CUDA
#include "cuda/cuda_bwd.h"
#endif

/* The CUDA variants of each backward family, forced in turn (besides the
 * library's own choice): a variant added to a family is tested by adding
 * its name here. */
#define BWD_VARIANTS_LINEAR {"portable", "mma", "mma2"}
#define BWD_VARIANTS_MHLA {"portable", "mma", "mma2"}
#define BWD_VARIANTS_MHLA_CAUSAL {"portable", "mma"}
#define BWD_VARIANTS_FOCUSED {"portable", "mma"}
#define BWD_VARIANTS_SOFTMAX {"portable", "mma"}
#define BWD_VARIANTS_SPARSE {"portable", "portable_rowchunk", "mma"}

/* The first call of a case: the CUDA entry point itself (BO_CUDA) or the
 * public one (BO_CPU); the second call is always the public one. */
#ifdef LA_WITH_CUDA
#define BWD_FIRST(cuda, pub, direct) ((cuda) ? (direct) : (pub))
#else
#define BWD_FIRST(cuda, pub, direct) (pub)
#endif

/* A backward call's status counted as one check: on CUDA through CHECK_DEV
 * (a forced variant that does not take the views skips), on the CPU LA_OK.
 * Returns whether the call succeeded. */
static inline int bwd_ok(int cuda, la_status st, const char *what) {
    if (cuda) return bo_check_dev(st, what);
    CHECK(st == LA_OK, "%s: %s %s", what, la_status_string(st), la_last_error());
    return st == LA_OK;
}

/* Registers one backward case: BO_CPU (small cases only: the CPU backward's
 * own tests, tests/cpu/test_backward_*.c, cover it further, and these float64
 * references are pairwise), BO_CUDA with the library's choice, and BO_CUDA
 * once per variant of `family` in `variants` (n names). The case argument's
 * first member is an int `cuda` set here. */
static inline void bwd_add(bo_list *L, const char *op, const char *family,
                           const char *const *variants, int n, int small, bo_fn fn, void *arg,
                           size_t size, const char *name) {
    int *cuda = (int *)arg;
    *cuda = 0;
    const bo_opts oc = {op, BO_CPU, small, NULL, NULL, NULL};
    if (small) bo_add(L, &oc, fn, arg, size, name);
    *cuda = 1;
    const bo_opts od = {op, BO_CUDA, small, NULL, NULL, NULL};
    bo_add(L, &od, fn, arg, size, name);
    for (int i = 0; i < n; i++) {
        const bo_opts ov = {op, BO_CUDA, small, family, variants[i], NULL};
        bo_add(L, &ov, fn, arg, size, name);
    }
}

/* ---- test tensors --------------------------------------------------------------
 * h: logical values (row-major over ne), as held in the dtype; d: the
 * buffer (device memory for a CUDA case, host memory otherwise) in the
 * physical layout (perm: rank 4 stored [B,H,N,D], rank 3 stored [H,T,D];
 * otherwise rows padded by 3 elements). */
typedef struct tt {
    int ndim, cuda;
    int64_t ne[4], nb[4], n, phys;
    la_dtype dt;
    float *h;
    void *d;
    la_tensor t;
} tt;

static inline void *bwd_alloc(int cuda, size_t n) {
    if (!cuda) return malloc(n ? n : 16);
    void *p = NULL;
    if (la_dev_malloc(&p, n ? n : 16) != LA_OK) {
        fprintf(stderr, "device malloc of %zu bytes failed: %s\n", n, la_last_error());
        exit(2);
    }
    return p;
}
static inline void bwd_free(int cuda, void *p) {
    if (cuda) la_dev_free(p);
    else free(p);
}
static inline void bwd_put(int cuda, void *d, const void *h, size_t n) {
    if (cuda) la_dev_upload(d, h, n);
    else memcpy(d, h, n);
}
static inline void bwd_get(int cuda, void *h, const void *d, size_t n) {
    if (!cuda) {
        memcpy(h, d, n);
        return;
    }
    la_dev_synchronize();
    la_dev_download(h, d, n);
}

static inline tt tt_new(int cuda, int ndim, const int64_t *ne, la_dtype dt, int perm) {
    tt x;
    memset(&x, 0, sizeof x);
    x.ndim = ndim;
    x.cuda = cuda;
    x.dt = dt;
    x.n = 1;
    for (int i = 0; i < ndim; i++) x.ne[i] = ne[i], x.n *= ne[i];
    if (perm && ndim == 4) {
        const int64_t N = ne[1], H = ne[2], D = ne[3];
        x.nb[0] = H * N * D, x.nb[1] = D, x.nb[2] = N * D, x.nb[3] = 1;
        x.phys = x.n;
    } else if (perm && ndim == 3) {
        const int64_t T = ne[0], D = ne[2];
        x.nb[0] = D, x.nb[1] = T * D, x.nb[2] = 1;
        x.phys = x.n;
    } else {
        int64_t s = 1;
        for (int i = ndim - 1; i >= 0; i--) {
            x.nb[i] = s;
            s *= (i == ndim - 1 && perm) ? ne[i] + 3 : ne[i];
        }
        x.phys = s;
    }
    x.h = (float *)calloc((size_t)(x.n ? x.n : 1), sizeof(float));
    x.d = bwd_alloc(cuda, (size_t)x.phys * la_dtype_size(dt));
    la_tensor_init_strided(&x.t, x.d, dt, cuda ? LA_DEVICE_CUDA : LA_DEVICE_CPU, ndim, x.ne, x.nb);
    return x;
}
static inline void tt_free(tt *x) {
    free(x->h);
    if (x->d) bwd_free(x->cuda, x->d);
}
static inline int64_t tt_phys(const tt *x, int64_t i) {
    int64_t off = 0;
    for (int a = x->ndim - 1; a >= 0; a--) {
        off += (i % x->ne[a]) * x->nb[a];
        i /= x->ne[a];
    }
    return off;
}
/* The logical values h into the buffer (padding: 0xFF bytes). */
static inline void tt_upload(tt *x) {
    const size_t es = la_dtype_size(x->dt);
    unsigned char *buf = (unsigned char *)malloc((size_t)x->phys * es);
    memset(buf, 0xff, (size_t)x->phys * es);
    for (int64_t i = 0; i < x->n; i++) {
        const int64_t o = tt_phys(x, i);
        if (x->dt == LA_F32) {
            memcpy(buf + o * 4, &x->h[i], 4);
        } else {
            uint32_t u;
            float f = la_round_bf16(x->h[i]);
            memcpy(&u, &f, 4);
            uint16_t s = (uint16_t)(u >> 16);
            memcpy(buf + o * 2, &s, 2);
        }
    }
    bwd_put(x->cuda, x->d, buf, (size_t)x->phys * es);
    free(buf);
}
static inline void tt_download(tt *x) {
    const size_t es = la_dtype_size(x->dt);
    unsigned char *buf = (unsigned char *)malloc((size_t)x->phys * es);
    bwd_get(x->cuda, buf, x->d, (size_t)x->phys * es);
    for (int64_t i = 0; i < x->n; i++) {
        const int64_t o = tt_phys(x, i);
        if (x->dt == LA_F32) {
            memcpy(&x->h[i], buf + o * 4, 4);
        } else {
            uint16_t s;
            memcpy(&s, buf + o * 2, 2);
            uint32_t u = (uint32_t)s << 16;
            memcpy(&x->h[i], &u, 4);
        }
    }
    free(buf);
}
static inline tt tt_rand(int cuda, la_rng *r, int ndim, const int64_t *ne, la_dtype dt, int perm,
                         double scale) {
    tt x = tt_new(cuda, ndim, ne, dt, perm);
    for (int64_t i = 0; i < x.n; i++) {
        float f = (float)(la_rng_normal(r) * scale);
        x.h[i] = dt == LA_BF16 ? la_round_bf16(f) : f;
    }
    tt_upload(&x);
    return x;
}
static inline void tt_repoison(tt *x) {
    unsigned char *buf = (unsigned char *)malloc((size_t)x->phys * la_dtype_size(x->dt));
    memset(buf, 0xff, (size_t)x->phys * la_dtype_size(x->dt));
    bwd_put(x->cuda, x->d, buf, (size_t)x->phys * la_dtype_size(x->dt));
    free(buf);
}
static inline tt tt_poison(int cuda, int ndim, const int64_t *ne, la_dtype dt, int perm) {
    tt x = tt_new(cuda, ndim, ne, dt, perm);
    tt_repoison(&x);
    return x;
}

/* relative Frobenius error; NaN anywhere = infinity */
static inline double frob_err(const float *a, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isinf(a[i])) return INFINITY;
        const double d = (double)a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return sqrt(num) / (den > 1e-300 ? sqrt(den) : 1e-150);
}
static inline double frob_err_d(const double *a, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return sqrt(num) / (den > 1e-300 ? sqrt(den) : 1e-150);
}
static inline double rb16(double x) { return (double)la_round_bf16((float)x); }

/* One gradient checked: fp32 against 1e-4; bf16 against twice the error of
 * the bf16-rounded formula (ref_b) plus 1e-4, raised to floor where that is
 * larger (check_grad_terms). */
static inline void check_grad_floor(const char *what, const char *gname, tt *g, const double *ref,
                                    const double *ref_b, double floor) {
    tt_download(g);
    double rn = 0, an = 0;
    for (int64_t i = 0; i < g->n; i++) rn += ref[i] * ref[i], an += (double)g->h[i] * g->h[i];
    if (rn == 0.0) {
        /* a gradient that vanishes exactly (softmax with one key): its RMS
         * must be at the level of fp32 residuals of O(1) terms */
        const double rms = sqrt(an / (double)g->n);
        CHECK(rms <= 1e-5, "%s %s: reference is 0, RMS %.3g > 1e-5", what, gname, rms);
        return;
    }
    const double e = frob_err(g->h, ref, g->n);
    double bound = 1e-4;
    int raised = 0;
    if (g->dt != LA_F32 && ref_b) {
        bound = 2.0 * frob_err_d(ref_b, ref, g->n) + 1e-4;
        raised = floor > bound;
        if (raised) bound = floor;
    }
    CHECK(e <= bound, "%s %s: rel Frobenius err %.3g > %.3g", what, gname, e, bound);
    if (e > bound)
        for (int64_t i = 0; i < g->n && i < 8; i++)
            printf("    [%lld] %g vs %g\n", (long long)i, g->h[i], ref[i]);
    printf("  %-8s err %.3g (bound %.3g%s) %s\n", gname, e, bound,
           raised ? ", state-form terms" : "", e <= bound ? "ok" : "FAIL");
}
static inline void check_grad(const char *what, const char *gname, tt *g, const double *ref,
                              const double *ref_b) {
    check_grad_floor(what, gname, g, ref, ref_b, 0.0);
}
/* The error floor of a bf16/fp16 gradient computed as sums whose terms are
 * kappa times its size (kappa: sqrt(sum terms^2 / sum g^2), from the case's
 * reference): each term rounded once (relative RMS u/sqrt(3), u = 2^-9 for
 * bf16, 2^-12 for fp16), plus the rounding of two operands and the result;
 * twice that, as the bounds here are twice the same-precision error. 0 for
 * fp32 or without kappa (< 0). */
static inline double bwd_terms_floor(la_dtype dt, double kappa) {
    if (dt == LA_F32 || kappa < 0) return 0.0;
    const double u = dt == LA_BF16 ? 0x1p-9 : 0x1p-12;
    return 2.0 * u / sqrt(3.0) * sqrt(kappa * kappa + 2.0);
}
/* check_grad with the bound raised to bwd_terms_floor where that is larger */
static inline void check_grad_terms(const char *what, const char *gname, tt *g, const double *ref,
                                    const double *ref_b, double kappa) {
    check_grad_floor(what, gname, g, ref, ref_b, bwd_terms_floor(g->dt, kappa));
}
/* bit-identical second call */
static inline void check_same(const char *what, const char *gname, tt *g, const float *first) {
    tt_download(g);
    CHECK(memcmp(g->h, first, sizeof(float) * (size_t)g->n) == 0, "%s %s: second call differs",
          what, gname);
}
static inline float *tt_copy_host(const tt *g) {
    float *c = (float *)malloc(sizeof(float) * (size_t)(g->n ? g->n : 1));
    memcpy(c, g->h, sizeof(float) * (size_t)g->n);
    return c;
}

/* ---- the CPU backward through the public API, on the same values ------------ */
typedef struct ct {
    la_tensor t;
    float *h;
    int64_t n;
} ct;
/* contiguous f32 CPU copy of a test tensor's logical values (fill: NaN) */
static inline ct ct_of(const tt *x, int fill_nan) {
    ct c;
    c.n = x->n;
    c.h = (float *)malloc(sizeof(float) * (size_t)(x->n ? x->n : 1));
    for (int64_t i = 0; i < x->n; i++) c.h[i] = fill_nan ? NAN : x->h[i];
    la_tensor_init(&c.t, c.h, LA_F32, LA_DEVICE_CPU, x->ndim, x->ne);
    return c;
}
static inline void ct_free(ct *c) { free(c->h); }
/* a CUDA gradient (host copy) against the CPU backward's: fp32 outputs within
 * 1e-4 relative Frobenius, bf16 outputs within 1e-2, raised to floor where
 * that is larger */
static inline void check_cpu_floor(const char *what, const char *gname, const float *cuda,
                                   const ct *cpu, la_dtype dt, double floor) {
    double rn = 0, an = 0;
    double *r = (double *)malloc(sizeof(double) * (size_t)(cpu->n ? cpu->n : 1));
    for (int64_t i = 0; i < cpu->n; i++) {
        r[i] = cpu->h[i];
        rn += r[i] * r[i];
        an += (double)cuda[i] * cuda[i];
    }
    const double rr = sqrt(rn / (double)cpu->n), ar = sqrt(an / (double)cpu->n);
    if (rr <= 1e-5 || ar <= 1e-5) {
        /* a gradient that vanishes (softmax with one key): both at the level
         * of fp32 residuals */
        CHECK(rr <= 1e-5 && ar <= 1e-5, "%s %s: RMS CPU %.3g, CUDA %.3g (one vanishes)", what,
              gname, rr, ar);
    } else {
        const double e = frob_err(cuda, r, cpu->n);
        double bound = dt == LA_F32 ? 1e-4 : 1e-2;
        if (bound < floor) bound = floor;
        CHECK(e <= bound, "%s %s: CUDA vs CPU backward rel Frobenius %.3g > %.3g", what, gname, e,
              bound);
        printf("  %-8s vs CPU %.3g (bound %.3g)\n", gname, e, bound);
    }
    free(r);
}
static inline void check_cpu(const char *what, const char *gname, const float *cuda,
                             const ct *cpu, la_dtype dt) {
    check_cpu_floor(what, gname, cuda, cpu, dt, 0.0);
}

#endif
