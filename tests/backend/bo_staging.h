/* Staging helpers of the backend harness's case tables (header-only, every
 * function static inline so that a table that does not use one gets no
 * warning). On top of tests/test_util.h (CHECK macros, la_rng, la_rel_err):
 *
 *   tb     a tensor staged on the host and the device with the same layout:
 *          tb_make / tb_rand / tb_poison / tb_read / tb_free, tb_compare
 *          (device copy vs host copy, in full), tol_of, dtn;
 *   dbuf   a bare device buffer: dalloc / dfree / dput / dput_raw / dput_i32 /
 *          dget_f32, and tset (a contiguous la_tensor over a pointer);
 *   ranges_of / score_err / overlap / check_own_topk / e4m3_enc, e4m3_dec:
 *   the indexer checks shared by the sparse, dsa_fp8 and dsa_epi tables.
 *
 * Random values come from bo_rng, the current case's generator. Poison is
 * 0xFF bytes: NaN in f32, bf16 and f16. */
#ifndef LA_BO_STAGING_H
#define LA_BO_STAGING_H

#include "backend_ops.h"

#include <stdbool.h>

#include "core/devmem.h"
#include "core/internal.h"


static inline const char *dtn(la_dtype dt) {
    return dt == LA_BF16 ? "bf16" : dt == LA_F16 ? "f16" : "f32";
}

/* ---- tensors staged on host and device ----------------------------------- */
typedef struct tb {
    la_tensor host, dev;     /* same layout                                */
    int64_t lne[4];          /* logical extents                            */
    int ndim;
    int perm;                /* rank 4: buffer is [B,H,N,D], view [B,N,H,D] */
    size_t bytes;            /* of the buffer (padding included)           */
} tb;

/* tb_make layouts (rank 4 only; lower ranks are always contiguous):
 *   0          [B,N,H,D] contiguous;
 *   TB_PADDED  [B,N,H,D] with every D row padded by one element (rows not
 *              16-byte aligned);
 *   any other nonzero value (1): buffer [B,H,N,D] viewed as [B,N,H,D]. */
#define TB_PADDED 2

static inline void set_elem(void *p, la_dtype dt, int64_t off, float x) {
    if (dt == LA_F32) ((float *)p)[off] = x;
    else if (dt == LA_BF16) ((uint16_t *)p)[off] = la_f32_to_bf16(x);
    else if (dt == LA_F16) ((uint16_t *)p)[off] = la_f32_to_f16(x);
}
static inline float get_elem(const void *p, la_dtype dt, int64_t off) {
    if (dt == LA_F32) return ((const float *)p)[off];
    if (dt == LA_F16) return la_f16_to_f32(((const uint16_t *)p)[off]);
    return la_bf16_to_f32(((const uint16_t *)p)[off]);
}

static inline int64_t phys_off(const tb *t, const int64_t *i) {
    int64_t o = 0;
    for (int a = 0; a < t->ndim; a++) o += i[a] * t->host.nb[a];
    return o;
}
static inline void unravel(const tb *t, int64_t e, int64_t *i) {
    for (int a = t->ndim - 1; a >= 0; a--) {
        i[a] = e % t->lne[a];
        e /= t->lne[a];
    }
}
static inline int64_t tb_numel(const tb *t) {
    int64_t n = 1;
    for (int a = 0; a < t->ndim; a++) n *= t->lne[a];
    return n;
}

/* vals: logical row-major values (NULL: poison with 0xFF bytes). */
static inline void tb_make(tb *t, int ndim, const int64_t *ne, la_dtype dt, int layout,
                           const float *vals) {
    memset(t, 0, sizeof *t);
    t->ndim = ndim;
    t->perm = layout && layout != TB_PADDED && ndim == 4;
    for (int a = 0; a < ndim; a++) t->lne[a] = ne[a];
    int64_t nb[4], span = 1;
    if (t->perm) { /* buffer [B,H,N,D] */
        nb[3] = 1;
        nb[1] = ne[3];           /* N stride */
        nb[2] = ne[1] * ne[3];   /* H stride */
        nb[0] = ne[2] * ne[1] * ne[3];
        span = ne[0] * nb[0];
    } else if (ndim == 4 && layout == TB_PADDED) { /* padded rows */
        nb[3] = 1;
        nb[2] = ne[3] + 1;
        nb[1] = ne[2] * nb[2];
        nb[0] = ne[1] * nb[1];
        span = ne[0] * nb[0];
    } else {
        for (int a = ndim - 1; a >= 0; a--) {
            nb[a] = span;
            span *= ne[a];
        }
    }
    t->bytes = (size_t)span * la_dtype_size(dt);
    void *h = malloc(t->bytes);
    la_tensor_init_strided(&t->host, h, dt, LA_DEVICE_CPU, ndim, ne, nb);
    memset(h, 0xff, t->bytes); /* padding and poison */
    if (vals) {
        int64_t idx[4], n = tb_numel(t);
        for (int64_t e = 0; e < n; e++) {
            unravel(t, e, idx);
            set_elem(h, dt, phys_off(t, idx), vals[e]);
        }
    }
    void *d = NULL;
    if (la_dev_malloc(&d, t->bytes) != LA_OK) {
        fprintf(stderr, "device alloc failed: %s\n", la_last_error());
        exit(1);
    }
    la_dev_upload(d, h, t->bytes);
    la_tensor_init_strided(&t->dev, d, dt, LA_DEVICE_CUDA, ndim, ne, nb);
}
static inline void tb_free(tb *t) {
    free(t->host.data);
    la_dev_free(t->dev.data);
}
/* Logical values of the host (cpu) or device copy. */
static inline float *tb_read(const tb *t, bool device) {
    int64_t n = tb_numel(t);
    void *h = malloc(t->bytes);
    if (device) la_dev_download(h, t->dev.data, t->bytes);
    else memcpy(h, t->host.data, t->bytes);
    float *out = malloc(sizeof(float) * (size_t)n);
    int64_t idx[4];
    for (int64_t e = 0; e < n; e++) {
        unravel(t, e, idx);
        out[e] = get_elem(h, t->host.dtype, phys_off(t, idx));
    }
    free(h);
    return out;
}
/* n normal draws of standard deviation scale from rng. */
static inline float *randv(int64_t n, double scale) {
    float *x = malloc(sizeof(float) * (size_t)n);
    la_fill_normal(&bo_rng, x, n, scale);
    return x;
}
static inline tb tb_rand(int ndim, const int64_t *ne, la_dtype dt, int layout, double scale) {
    int64_t n = 1;
    for (int a = 0; a < ndim; a++) n *= ne[a];
    float *v = randv(n, scale);
    tb t;
    tb_make(&t, ndim, ne, dt, layout, v);
    free(v);
    return t;
}
static inline tb tb_poison(int ndim, const int64_t *ne, la_dtype dt, int layout) {
    tb t;
    tb_make(&t, ndim, ne, dt, layout, NULL);
    return t;
}

/* Compare the device result of t with its host (CPU) result, in full:
 * rel = la_rel_err ≤ tol, no NaN on the CPU, nothing non-finite on the GPU.
 * Prints one "ok" / "FAIL" line; returns rel. */
static inline double tb_compare(const tb *t, const char *what, double tol) {
    la_dev_synchronize();
    int64_t n = tb_numel(t);
    float *g = tb_read(t, true), *c = tb_read(t, false);
    double *ref = malloc(sizeof(double) * (size_t)n);
    int cpu_nan = 0;
    for (int64_t i = 0; i < n; i++) {
        ref[i] = c[i];
        if (isnan(c[i])) cpu_nan++;
    }
    double rel = la_rel_err(g, ref, n);
    int64_t gnan = 0;
    for (int64_t i = 0; i < n; i++) gnan += !isfinite(g[i]);
    CHECK(cpu_nan == 0, "%s: CPU output has %d NaN", what, cpu_nan);
    CHECK(gnan == 0, "%s: GPU output has %lld non-finite values (unwritten?)", what, (long long)gnan);
    CHECK(rel <= tol, "%s: rel err %.3g > %.1g", what, rel, tol);
    printf("  %-72s rel %.2e %s\n", what, rel, rel <= tol && gnan == 0 ? "ok" : "FAIL");
    free(g);
    free(c);
    free(ref);
    return rel;
}
/* 1e-2 for bf16; 2e-3 for f16 (GPU and CPU both compute in fp32 from the
 * same f16 inputs and round the output once: they differ by about one f16
 * ulp, 2^-11 of the largest output, well inside twice the error of the same
 * formula computed in fp16); 1e-5 for f32 (1e-4 past N = 20000) */
static inline double tol_of(la_dtype dt, int64_t N) {
    return dt == LA_BF16 ? 1e-2 : dt == LA_F16 ? 2e-3 : (N > 20000 ? 1e-4 : 1e-5);
}

/* ---- bare device buffers ---------------------------------------------------- */
typedef struct dbuf {
    void *d;
    size_t bytes;
} dbuf;

static inline dbuf dalloc(size_t bytes) {
    dbuf b = {NULL, bytes};
    if (la_dev_malloc(&b.d, bytes ? bytes : 4) != LA_OK) {
        fprintf(stderr, "device alloc failed: %s\n", la_last_error());
        exit(2);
    }
    return b;
}
static inline void dfree(dbuf *b) {
    if (b->d) la_dev_free(b->d);
    b->d = NULL;
}
static inline dbuf dput_raw(const void *h, size_t bytes) {
    dbuf b = dalloc(bytes);
    la_dev_upload(b.d, h, bytes);
    return b;
}
/* Upload n floats as dtype dt (f32, bf16 or f16); 16-bit `vals` are rounded in place
 * to what the device sees (so a reference sees the same inputs). */
static inline dbuf dput(float *vals, int64_t n, la_dtype dt) {
    size_t es = la_dtype_size(dt);
    void *h = malloc((size_t)n * es + 4);
    for (int64_t i = 0; i < n; i++) {
        if (dt == LA_F32) ((float *)h)[i] = vals[i];
        else if (dt == LA_F16) {
            uint16_t b = la_f32_to_f16(vals[i]);
            ((uint16_t *)h)[i] = b;
            vals[i] = la_f16_to_f32(b);
        } else {
            uint16_t b = la_f32_to_bf16(vals[i]);
            ((uint16_t *)h)[i] = b;
            vals[i] = la_bf16_to_f32(b);
        }
    }
    dbuf b = dput_raw(h, (size_t)n * es);
    free(h);
    return b;
}
static inline dbuf dput_i32(const int32_t *v, int64_t n) { return dput_raw(v, (size_t)n * 4); }
/* Download n values of dtype dt (f32, bf16 or f16) as floats. */
static inline void dget_f32(float *dst, const dbuf *b, int64_t n, la_dtype dt) {
    if (dt == LA_F32) {
        la_dev_download(dst, b->d, (size_t)n * 4);
        return;
    }
    uint16_t *h = malloc((size_t)n * 2 + 2);
    la_dev_download(h, b->d, (size_t)n * 2);
    for (int64_t i = 0; i < n; i++) dst[i] = dt == LA_F16 ? la_f16_to_f32(h[i]) : la_bf16_to_f32(h[i]);
    free(h);
}
/* Contiguous tensor of rank nd (extents a, b, c; the first nd used). */
static inline void tset(la_tensor *t, void *data, la_dtype dt, la_device dev, int nd, int64_t a,
                        int64_t b, int64_t c) {
    int64_t ne[3] = {a, b, c};
    la_tensor_init(t, data, dt, dev, nd, ne);
}

/* ---- indexer checks (DSA / HISA / block-sparse) ----------------------------- */
/* Valid key range [lo, hi) of query row t: [start, end) when given, else
 * causal bottom-right aligned (L - T + t + 1 keys); clamped to [0, L]. */
static inline void ranges_of(int64_t T, int64_t L, const int32_t *st, const int32_t *en, int64_t t,
                             int64_t *lo, int64_t *hi) {
    int64_t s = st ? st[t] : 0, e = en ? en[t] : L - T + t + 1;
    if (e < 0) e = 0;
    if (e > L) e = L;
    if (s > e) s = e;
    *lo = s;
    *hi = e;
}
/* max over finite ref entries of |a-b| / max(max |ref|, mag[i]); -inf must
 * match exactly, a NaN or an infinity in a where ref is finite gives INFINITY.
 * mag (may be NULL): per entry, the sum of the absolute head terms
 * sum_h |w_h| relu(q_h.k). A score is a signed head sum, so one that cancels
 * to near 0 (e.g. the single score of L = 1) is only as accurate as its
 * terms are large; without mag such a row would test rounding noise. */
static inline double score_err_mag(const float *a, const double *ref, const double *mag, int64_t n) {
    double mr = 0;
    for (int64_t i = 0; i < n; i++)
        if (!isinf(ref[i]) && fabs(ref[i]) > mr) mr = fabs(ref[i]);
    if (mr < 1e-30) mr = 1e-30;
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isinf(ref[i])) {
            if (!(isinf(a[i]) && a[i] < 0)) return INFINITY;
            continue;
        }
        if (isnan(a[i]) || isinf(a[i])) return INFINITY;
        const double den = mag && mag[i] > mr ? mag[i] : mr;
        const double d = fabs(a[i] - ref[i]) / den;
        if (d > e) e = d;
    }
    return e;
}
static inline double score_err(const float *a, const double *ref, int64_t n) {
    return score_err_mag(a, ref, NULL, n);
}
/* fraction of b's valid entries present in a's row set (per row, averaged over
 * all valid entries); exact equality <=> 1 and same counts. tot_out (may be
 * NULL): the number of b's valid entries. */
static inline double overlap(const int32_t *a, const int32_t *b, int64_t T, int64_t k, int64_t L,
                             int64_t *tot_out) {
    int64_t hit = 0, tot = 0;
    char *mark = calloc((size_t)L + 1, 1);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t j = 0; j < k; j++)
            if (a[t * k + j] >= 0 && a[t * k + j] < L) mark[a[t * k + j]] = 1;
        for (int64_t j = 0; j < k; j++)
            if (b[t * k + j] >= 0) {
                tot++;
                hit += b[t * k + j] < L && mark[b[t * k + j]];
            }
        for (int64_t j = 0; j < k; j++)
            if (a[t * k + j] >= 0 && a[t * k + j] < L) mark[a[t * k + j]] = 0;
    }
    free(mark);
    if (tot_out) *tot_out = tot;
    return tot ? (double)hit / (double)tot : 1.0;
}

/* ---- fp8 e4m3 (fn: no inf, max 448, NaN = S.1111.111) on the host ---------- */
static inline float e4m3_dec(uint8_t b) {
    const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 15 && m == 7) return NAN;
    if (e == 0) v = ldexpf((float)m, -9);
    else v = ldexpf(1.f + m / 8.f, e - 7);
    return s ? -v : v;
}
/* nearest e4m3 (ties to even), saturating at +-448: binary search over the
 * 127 non-negative codes (their values increase with the code) */
static inline uint8_t e4m3_enc(float x) {
    if (isnan(x)) return 0x7f;
    const uint8_t s = x < 0 ? 0x80 : 0;
    const double a = fabs((double)x);
    if (a >= 448.0) return s | 0x7e;
    int lo = 0, hi = 0x7e; /* largest code with value <= a */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if ((double)e4m3_dec((uint8_t)mid) <= a) lo = mid;
        else hi = mid - 1;
    }
    int c = lo;
    if (c < 0x7e) {
        const double d0 = a - e4m3_dec((uint8_t)c), d1 = e4m3_dec((uint8_t)(c + 1)) - a;
        if (d1 < d0 || (d1 == d0 && ((c + 1) & 1) == 0)) c++;
    }
    return s | (uint8_t)c;
}

/* (score desc, index asc) order */
static inline int before(float sa, int64_t a, float sb, int64_t b) { return sa > sb || (sa == sb && a < b); }

/* idx vs the device's own score rows: exact top-n, ordered, -1 padded.
 * Returns the number of bad rows (first one described in msg). */
static inline int64_t check_own_topk(const int32_t *ix, const float *sg, int64_t T, int64_t L, int64_t K,
                              const int32_t *st, const int32_t *en, char *msg, size_t mlen) {
    int64_t bad = 0;
    char *mark = calloc((size_t)L + 1, 1);
    for (int64_t t = 0; t < T; t++) {
        int64_t lo, hi;
        ranges_of(T, L, st, en, t, &lo, &hi);
        const int64_t n = hi - lo < K ? hi - lo : K;
        const int32_t *r = ix + t * K;
        const float *sr = sg + t * L;
        const char *why = NULL;
        for (int64_t j = 0; j < K && !why; j++) {
            if (j >= n) {
                if (r[j] != -1) why = "padding is not -1";
                continue;
            }
            if (r[j] < lo || r[j] >= hi) why = "index outside the valid range";
            else if (mark[r[j]]) why = "duplicate index";
            else {
                mark[r[j]] = 1;
                if (j > 0 && !before(sr[r[j - 1]], r[j - 1], sr[r[j]], r[j])) why = "not in (score desc, index asc) order";
            }
        }
        if (!why && n > 0) { /* every unselected key ranks after the last selected */
            const int64_t last = r[n - 1];
            for (int64_t s = lo; s < hi; s++)
                if (!mark[s] && before(sr[s], s, sr[last], last)) {
                    why = "an unselected key outranks a selected one";
                    break;
                }
        }
        for (int64_t j = 0; j < n; j++)
            if (r[j] >= 0 && r[j] < L) mark[r[j]] = 0;
        if (why) {
            if (!bad) snprintf(msg, mlen, "row %lld: %s", (long long)t, why);
            bad++;
        }
    }
    free(mark);
    return bad;
}

#endif
