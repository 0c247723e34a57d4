/* Helpers of the CPU-vs-float64 tables (cases_cpu.c, cases_cpu_sparse.c):
 * inputs rounded to the dtype under test, the error bound against a
 * same-precision formula (check_out), the guard band of strided views
 * (check_guard). Header-only, static (inline) so each table takes what it
 * uses. */
#ifndef LA_BO_CPU_CHECK_H
#define LA_BO_CPU_CHECK_H

#include "bo_staging.h"

#include "cpu/dense_views.h"
#include "cpu/sparse_ref.h"

/* ---- shared ---------------------------------------------------------------- */
static inline float *rand_rounded(int64_t n, double scale, la_dtype dt) {
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    la_fill_normal(&bo_rng, x, n, scale);
    if (dt == LA_BF16 || dt == LA_F16)
        for (int64_t i = 0; i < n; i++) x[i] = la_round_dt(x[i], dt);
    return x;
}
static inline int64_t numel(const la_tensor *t) {
    int64_t n = 1;
    for (int a = 0; a < t->ndim; a++) n *= t->ne[a];
    return n;
}
/* Elements of a view's buffer outside the view that are not NaN (written by
 * the op). storage: the buffer's element count. */
static inline int64_t written_outside(const hview *h, int64_t storage) {
    const la_tensor *t = &h->t;
    char *in = calloc((size_t)storage, 1);
    int64_t idx[4] = {0, 0, 0, 0}, n = numel(t);
    for (int64_t e = 0; e < n; e++) {
        int64_t r = e, off = 0;
        for (int a = t->ndim - 1; a >= 0; a--) {
            idx[a] = r % t->ne[a];
            r /= t->ne[a];
        }
        for (int a = 0; a < t->ndim; a++) off += idx[a] * t->nb[a];
        in[off] = 1;
    }
    int64_t bad = 0;
    for (int64_t i = 0; i < storage; i++)
        if (!in[i]) bad += !isnan(la_load_f32(t, i));
    free(in);
    return bad;
}
static inline int64_t storage_of(const la_tensor *t) {
    int64_t s = 0;
    for (int a = 0; a < t->ndim; a++) s += (t->ne[a] - 1) * t->nb[a];
    /* the strided layout keeps one gap after the last element of a row */
    return s + 1 + (t->nb[t->ndim - 1] > 1 ? t->nb[t->ndim - 1] : 0);
}
/* max|a - ref| / max|ref| in double (a: the fp32 formula) */
static inline double rel_err_d(const double *a, const double *ref, int64_t n) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isinf(ref[i]) || isinf(a[i])) continue;
        md = fmax(md, fabs(a[i] - ref[i]));
        mr = fmax(mr, fabs(ref[i]));
    }
    return md / (mr > 1e-30 ? mr : 1e-30);
}
static inline double round_to(double x, la_dtype dt) {
    if (dt == LA_BF16 || dt == LA_F16) return la_round_dt((float)x, dt);
    if (dt == LA_F32) return (float)x;
    return x;
}
/* One output checked: op values got (n, logical order), the float64
 * reference and the fp32 formula's values (rounded to dt here). */
static inline void check_out(const char *what, const float *got, const double *ref, double *sp, int64_t n,
                      la_dtype dt) {
    for (int64_t i = 0; i < n; i++) sp[i] = round_to(sp[i], dt);
    const double e = la_rel_err(got, ref, n), esp = rel_err_d(sp, ref, n);
    const double floor = dt == LA_BF16 || dt == LA_F16 ? 0.0 : 1e-5, bound = fmax(floor, 2 * esp);
    CHECK(e <= bound, "%s: rel err %.3g > bound %.3g (fp32 formula %.3g)", what, e, bound, esp);
    printf("  %-40s rel %.2e  bound %.2e (fp32 formula %.2e) %s\n", what, e, bound, esp,
           e <= bound ? "ok" : "FAIL");
}
static inline void check_guard(const char *what, const hview *h) {
    (void)layout_name;
    const int64_t bad = written_outside(h, storage_of(&h->t));
    CHECK(bad == 0, "%s: %lld entries written outside the view", what, (long long)bad);
}

/* CPU_CASE(OP, FN, T, field values...): a BO_CPU case of the --small subset
 * whose argument is the struct T; its name is FN and the values as written. */
#define CPU_CASE(OP, FN, T, ...)                                                                 \
    do {                                                                                         \
        const bo_opts o_ = {OP, BO_CPU, 1, NULL, NULL, NULL};                                    \
        const T a_ = {__VA_ARGS__};                                                              \
        bo_add(L, &o_, FN, &a_, sizeof a_, #FN "(" #__VA_ARGS__ ")");                            \
    } while (0)

#endif
