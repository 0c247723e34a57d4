/* MHLA on the CPU, the pieces every path shares: the block geometry
 * (block extents, token indices of a block), gathering token rows with φ,
 * storing output rows, loading the mixing matrix, and the workspace plan.
 * Declared in mhla_cpu_impl.h. */
#include "cpu/mhla_cpu_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- geometry ------------------------------------------------------------ */
void la_mhla_geom_init(la_mhla_geom *geom, int ndim, const int64_t *grid,
                       const int64_t *blocks) {
    int off = 3 - ndim;
    geom->M = 1;
    geom->N = 1;
    geom->max_block = 1;
    geom->equal_blocks = 1;
    for (int a = 0; a < 3; a++) {
        geom->n[a] = a < off ? 1 : grid[a - off];
        geom->g[a] = a < off ? 1 : blocks[a - off];
        geom->M *= geom->g[a];
        geom->N *= geom->n[a];
        /* largest run along an axis: ceil(n/g) */
        geom->max_block *= (geom->n[a] + geom->g[a] - 1) / geom->g[a];
        if (geom->n[a] % geom->g[a]) geom->equal_blocks = 0;
    }
}

/* ---- gather / scatter ------------------------------------------------------ */
/* x[0..n) = scale·φ(x), one loop per map so that each vectorizes (a switch
 * inside the loop would not). Same arithmetic as la_feature_apply. */
static void feature_row(float *x, int64_t n, la_feature f, float scale) {
    switch (f) {
    case LA_FEATURE_IDENTITY: break;
    case LA_FEATURE_RELU:
        for (int64_t i = 0; i < n; i++) x[i] = la_relu(x[i]);
        break;
    case LA_FEATURE_RELU_EPS:
        for (int64_t i = 0; i < n; i++) x[i] = la_relu(x[i]) + 1e-6f;
        break;
    case LA_FEATURE_RELU1:
        for (int64_t i = 0; i < n; i++) x[i] = la_relu(x[i]) + 1.f;
        break;
    case LA_FEATURE_ELU1:
        for (int64_t i = 0; i < n; i++) x[i] = la_feature_apply(LA_FEATURE_ELU1, x[i]);
        break;
    }
    if (scale != 1.0f)
        for (int64_t i = 0; i < n; i++) x[i] *= scale;
}

/* Rows of head (b,h) of a [B,N,H,D] view into dst (row stride ld): row r is
 * token idx[r] (or n0 + r when idx is NULL). With feat, applies φ and then
 * the scale. */
void la_mhla_gather_rows(const la_tensor *t, int64_t b, int64_t h, const int64_t *idx,
                         int64_t n0, int64_t n, float *dst, int64_t ld, int feat,
                         la_feature f, float scale) {
    const int64_t D = t->ne[3];
    if (t->dtype == LA_F32 && t->nb[3] == 1 && feat && scale == 1.0f &&
        (f == LA_FEATURE_RELU || f == LA_FEATURE_RELU_EPS)) {
        /* the common case in one pass: load, φ, store */
        const float *base = (const float *)t->data + b * t->nb[0] + h * t->nb[2];
        const float add = f == LA_FEATURE_RELU_EPS ? 1e-6f : 0.0f;
        for (int64_t r = 0; r < n; r++) {
            const float *src = base + (idx ? idx[r] : n0 + r) * t->nb[1];
            float *d = dst + r * ld;
            for (int64_t j = 0; j < D; j++) d[j] = la_relu(src[j]) + add;
        }
        return;
    }
    if (t->dtype == LA_F32) {
        const float *base = (const float *)t->data + b * t->nb[0] + h * t->nb[2];
        const int64_t s1 = t->nb[1], s3 = t->nb[3];
        for (int64_t r = 0; r < n; r++) {
            const float *src = base + (idx ? idx[r] : n0 + r) * s1;
            float *d = dst + r * ld;
            if (s3 == 1)
                memcpy(d, src, (size_t)D * sizeof(float));
            else
                for (int64_t j = 0; j < D; j++) d[j] = src[j * s3];
        }
    } else {
        for (int64_t r = 0; r < n; r++) {
            int64_t tok = idx ? idx[r] : n0 + r;
            float *d = dst + r * ld;
            for (int64_t j = 0; j < D; j++) d[j] = la_load_f32(t, la_off4(t, b, tok, h, j));
        }
    }
    if (feat)
        for (int64_t r = 0; r < n; r++) feature_row(dst + r * ld, D, f, scale);
}

/* Values augmented with a column of ones: [v | 1], row stride Dv+1. */
void la_mhla_gather_values(const la_tensor *v, int64_t b, int64_t h, const int64_t *idx,
                           int64_t n0, int64_t n, float *dst) {
    const int64_t Dv = v->ne[3], E = Dv + 1;
    la_mhla_gather_rows(v, b, h, idx, n0, n, dst, E, 0, LA_FEATURE_IDENTITY, 1.0f);
    for (int64_t r = 0; r < n; r++) dst[r * E + Dv] = 1.0f;
}

/* Write output rows of head (b,h) from o (row stride ld), numerator in
 * columns [0, Dv). NORM_COLUMN divides by (o[Dv] + eps) (the augmented form
 * of the decoder, q̃·z̃ in column Dv), NORM_GIVEN by (den[r] + eps),
 * NORM_NONE writes the numerator. */
void la_mhla_store_rows(la_tensor *out, int64_t b, int64_t h, const int64_t *idx, int64_t n0,
                        int64_t n, const float *o, int64_t ld, int mode, const float *den,
                        float eps) {
    const int64_t Dv = out->ne[3];
    for (int64_t r = 0; r < n; r++) {
        const float *src = o + r * ld;
        int64_t tok = idx ? idx[r] : n0 + r;
        float inv = 1.0f;
        if (mode == NORM_COLUMN) inv = 1.0f / (src[Dv] + eps);
        if (mode == NORM_GIVEN) inv = 1.0f / (den[r] + eps);
        if (out->dtype == LA_F32) {
            float *dst = (float *)out->data + la_off4(out, b, tok, h, 0);
            const int64_t s3 = out->nb[3];
            if (s3 == 1)
                for (int64_t j = 0; j < Dv; j++) dst[j] = src[j] * inv;
            else
                for (int64_t j = 0; j < Dv; j++) dst[j * s3] = src[j] * inv;
        } else {
            for (int64_t j = 0; j < Dv; j++)
                la_store_f32(out, la_off4(out, b, tok, h, j), src[j] * inv);
        }
    }
}

/* Mixing [Hw, M, M] (any float dtype, any strides) into f32. When tril,
 * keep only the strictly lower part (b < i) of the leading m×m corner, and
 * put the diagonal in diag[Hw, m]. */
void la_mhla_load_mixing(const la_tensor *w, int64_t m, int tril, float *dst, float *diag) {
    int64_t Hw = w->ndim == 3 ? w->ne[0] : 1;
    for (int64_t hw = 0; hw < Hw; hw++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < m; j++) {
                int64_t off = w->ndim == 3 ? la_off3(w, hw, i, j) : la_off2(w, i, j);
                float x = la_load_f32(w, off);
                if (tril && j == i) diag[hw * m + i] = x;
                dst[(hw * m + i) * m + j] = (!tril || j < i) ? x : 0.0f;
            }
}

/* ---- workspace ------------------------------------------------------------- */
size_t la_mhla_ws_take(ws_plan *pl, size_t count, size_t elem, const char *what) {
    size_t bytes = 0, off;
    if (pl->st != LA_OK) return 0;
    if ((pl->st = la_mul_size(count, elem, &bytes, what)) != LA_OK) return 0;
    bytes = (bytes + 63) & ~(size_t)63;
    off = pl->total;
    if (pl->total > SIZE_MAX - bytes) {
        pl->st = la_err(LA_ERR_OVERFLOW, "mhla: workspace size overflows (%s)", what);
        return 0;
    }
    pl->total += bytes;
    return off;
}

/* count = a·b·c·d elements, overflow-checked. */
size_t la_mhla_ws_count(ws_plan *pl, int64_t a, int64_t b, int64_t c, int64_t d,
                        const char *what) {
    size_t x = 1;
    const int64_t f[4] = {a, b, c, d};
    for (int i = 0; i < 4 && pl->st == LA_OK; i++) pl->st = la_mul_size(x, (size_t)f[i], &x, what);
    return pl->st == LA_OK ? x : 0;
}
