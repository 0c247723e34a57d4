/* Helpers shared by the backward tests (tests/cpu/test_backward_*.c):
 * relative Frobenius error against a float64 reference, and whether a view's
 * buffer was left untouched (NaN poison everywhere) by a rejected call. */
#ifndef LA_BACKWARD_UTIL_H
#define LA_BACKWARD_UTIL_H

#include "dense_views.h"

/* ‖a − ref‖_F / ‖ref‖_F; a NaN/Inf in a (unwritten gradient) gives inf. */
static double frob_rel_err(const float *a, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (den < 1e-300) return sqrt(num);
    return sqrt(num / den);
}

/* The same against a double array (finite-difference checks of the
 * references themselves). */
static double frob_rel_err_d(const double *a, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den < 1e-300 ? sqrt(num) : sqrt(num / den);
}

/* Every element of the view's storage still NaN (nothing written). */
static int view_untouched(const hview *h, int64_t storage) {
    for (int64_t i = 0; i < storage; i++)
        if (!isnan(la_load_f32(&h->t, i))) return 0;
    return 1;
}

/* Storage elements of a view made by make_view. */
static int64_t view_storage(const hview *h) {
    int64_t span = 1;
    for (int i = 0; i < h->t.ndim; i++) span += (h->t.ne[i] - 1) * h->t.nb[i];
    return span;
}

/* Byte-identical contents of two views' storage. */
static int views_identical(const hview *a, const hview *b) {
    int64_t n = view_storage(a);
    return n == view_storage(b) &&
           memcmp(a->buf, b->buf, (size_t)n * la_dtype_size(a->t.dtype)) == 0;
}

#endif
