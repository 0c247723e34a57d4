/* Tests of the CUDA backward passes (src/cuda/..._bwd.cu) against float64
 * references written plainly here (pairwise forms, a different algorithm
 * from the kernels' chunked / block-summary ones), on fresh random inputs at
 * odd sizes, dense and permuted ([B,H,N,D] memory as a [B,N,H,D] view),
 * fp32 and bf16, gradients poisoned (NaN bytes) before the call.
 *
 * Bounds (TRAINING.md §1): fp32 gradients within 1e-4 relative Frobenius
 * of float64; bf16 gradients within twice the error of the same formula
 * evaluated with its intermediates rounded to bf16 (what a plain bf16
 * PyTorch formulation does), both against float64 on the same bf16 inputs
 * (FlashAttention's rule). Each case calls the CUDA entry point, then the
 * public la_<op>_backward on the same device views (it must give
 * bit-identical gradients: dispatch and determinism), then the public call
 * on CPU copies: the CPU backward must agree (1e-4 fp32, 1e-2 bf16).
 *
 * Built for the GPU (make cuda-tests) or, with -DLA_BWD_EMU, linked against
 * the host emulation of the same kernels (tests/cuda/emu_backward.sh): device
 * buffers are then host memory. LA_CUDA_SMALL=1 runs the small cases only
 * (for compute-sanitizer). */
#include "test_util.h"

#include "core/devmem.h"
#include "core/variant.h"
#include "cuda/cuda_bwd.h"

static int small_only;

/* ---- device buffers --------------------------------------------------------- */
static void *dmalloc(size_t n) {
#ifdef LA_BWD_EMU
    return malloc(n ? n : 16);
#else
    void *p = NULL;
    if (la_dev_malloc(&p, n ? n : 16) != LA_OK) {
        fprintf(stderr, "device malloc of %zu bytes failed: %s\n", n, la_last_error());
        exit(2);
    }
    return p;
#endif
}
static void dfree(void *p) {
#ifdef LA_BWD_EMU
    free(p);
#else
    la_dev_free(p);
#endif
}
static void dup_(void *d, const void *h, size_t n) {
#ifdef LA_BWD_EMU
    memcpy(d, h, n);
#else
    la_dev_upload(d, h, n);
#endif
}
static void ddown(void *h, const void *d, size_t n) {
#ifdef LA_BWD_EMU
    memcpy(h, d, n);
#else
    la_dev_synchronize();
    la_dev_download(h, d, n);
#endif
}

/* ---- test tensors --------------------------------------------------------------
 * h: logical values (row-major over ne), as held in the dtype; d: device
 * memory in the physical layout (perm: rank 4 stored [B,H,N,D], rank 3
 * stored [H,T,D]; otherwise rows padded by 3 elements). */
typedef struct tt {
    int ndim;
    int64_t ne[4], nb[4], n, phys;
    la_dtype dt;
    float *h;
    void *d;
    la_tensor t;
} tt;

static tt tt_new(int ndim, const int64_t *ne, la_dtype dt, int perm) {
    tt x;
    memset(&x, 0, sizeof x);
    x.ndim = ndim;
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
    x.h = (float *)calloc((size_t)x.n, sizeof(float));
    x.d = dmalloc((size_t)x.phys * la_dtype_size(dt));
    la_tensor_init_strided(&x.t, x.d, dt, LA_DEVICE_CUDA, ndim, x.ne, x.nb);
    return x;
}
static void tt_free(tt *x) {
    free(x->h);
    dfree(x->d);
}
static int64_t tt_phys(const tt *x, int64_t i) {
    int64_t off = 0;
    for (int a = x->ndim - 1; a >= 0; a--) {
        off += (i % x->ne[a]) * x->nb[a];
        i /= x->ne[a];
    }
    return off;
}
static void tt_upload(tt *x) {
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
    dup_(x->d, buf, (size_t)x->phys * es);
    free(buf);
}
static void tt_download(tt *x) {
    const size_t es = la_dtype_size(x->dt);
    unsigned char *buf = (unsigned char *)malloc((size_t)x->phys * es);
    ddown(buf, x->d, (size_t)x->phys * es);
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
static tt tt_rand(la_rng *r, int ndim, const int64_t *ne, la_dtype dt, int perm, double scale) {
    tt x = tt_new(ndim, ne, dt, perm);
    for (int64_t i = 0; i < x.n; i++) {
        float f = (float)(la_rng_normal(r) * scale);
        x.h[i] = dt == LA_BF16 ? la_round_bf16(f) : f;
    }
    tt_upload(&x);
    return x;
}
static tt tt_poison(int ndim, const int64_t *ne, la_dtype dt, int perm) {
    tt x = tt_new(ndim, ne, dt, perm);
    unsigned char *buf = (unsigned char *)malloc((size_t)x.phys * la_dtype_size(dt));
    memset(buf, 0xff, (size_t)x.phys * la_dtype_size(dt));
    dup_(x.d, buf, (size_t)x.phys * la_dtype_size(dt));
    free(buf);
    return x;
}
static void tt_repoison(tt *x) {
    unsigned char *buf = (unsigned char *)malloc((size_t)x->phys * la_dtype_size(x->dt));
    memset(buf, 0xff, (size_t)x->phys * la_dtype_size(x->dt));
    dup_(x->d, buf, (size_t)x->phys * la_dtype_size(x->dt));
    free(buf);
}

/* relative Frobenius error; NaN anywhere = infinity */
static double frob_err(const float *a, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isinf(a[i])) return INFINITY;
        const double d = (double)a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return sqrt(num) / (den > 1e-300 ? sqrt(den) : 1e-150);
}
static double frob_err_d(const double *a, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return sqrt(num) / (den > 1e-300 ? sqrt(den) : 1e-150);
}
static double rb16(double x) { return (double)la_round_bf16((float)x); }

/* One gradient checked: fp32 against 1e-4; bf16 against twice the error of
 * the bf16-rounded formula (ref_b) plus 1e-4. */
static void check_grad(const char *what, const char *gname, tt *g, const double *ref,
                       const double *ref_b) {
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
    if (g->dt != LA_F32 && ref_b) bound = 2.0 * frob_err_d(ref_b, ref, g->n) + 1e-4;
    CHECK(e <= bound, "%s %s: rel Frobenius err %.3g > %.3g", what, gname, e, bound);
    if (e > bound && getenv("LA_TEST_VERBOSE"))
        for (int64_t i = 0; i < g->n && i < 8; i++) printf("    [%lld] %g vs %g\n", (long long)i, g->h[i], ref[i]);
    if (getenv("LA_TEST_VERBOSE")) printf("  %s %s: err %.3g (bound %.3g)\n", what, gname, e, bound);
}
/* bit-identical second call */
static void check_same(const char *what, const char *gname, tt *g, const float *first) {
    tt_download(g);
    CHECK(memcmp(g->h, first, sizeof(float) * (size_t)g->n) == 0, "%s %s: second call differs",
          what, gname);
}
static float *tt_copy_host(const tt *g) {
    float *c = (float *)malloc(sizeof(float) * (size_t)g->n);
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
static ct ct_of(const tt *x, int fill_nan) {
    ct c;
    c.n = x->n;
    c.h = (float *)malloc(sizeof(float) * (size_t)(x->n ? x->n : 1));
    for (int64_t i = 0; i < x->n; i++) c.h[i] = fill_nan ? NAN : x->h[i];
    la_tensor_init(&c.t, c.h, LA_F32, LA_DEVICE_CPU, x->ndim, x->ne);
    return c;
}
static void ct_free(ct *c) { free(c->h); }
/* a CUDA gradient (host copy) against the CPU backward's: fp32 outputs within
 * 1e-4 relative Frobenius, bf16 outputs within 1e-2 */
static void check_cpu(const char *what, const char *gname, const float *cuda, const ct *cpu,
                      la_dtype dt) {
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
        const double e = frob_err(cuda, r, cpu->n), bound = dt == LA_F32 ? 1e-4 : 1e-2;
        CHECK(e <= bound, "%s %s: CUDA vs CPU backward rel Frobenius %.3g > %.3g", what, gname, e,
              bound);
        if (getenv("LA_TEST_VERBOSE")) printf("  %s %s vs CPU: %.3g\n", what, gname, e);
    }
    free(r);
}

#include "test_cuda_backward_lin.h"
#include "test_cuda_backward_attn.h"

int main(void) {
    int avail = 0;
#ifndef LA_BWD_EMU
    la_cuda_available(&avail);
    if (!avail) {
        printf("# no CUDA device: skipped\n");
        return la_test_finish();
    }
#endif
    (void)avail;
    small_only = getenv("LA_CUDA_SMALL") != NULL;
    la_rng r = la_test_rng("test_cuda_backward");
    la_context *ctx;
    la_context_create(&ctx);
    if (!getenv("LA_BWD_SOFTMAX_ONLY")) run_lin_tests(&r, ctx); /* LA_BWD_SOFTMAX_ONLY: a quick subset */
    run_attn_tests(&r, ctx);
    la_context_destroy(ctx);
    return la_test_finish();
}
