/* Strided test views shared by the dense-op tests (test_softmax.c,
 * test_linear.c): a logical [B,N,H,D] (or 3-D) array laid out contiguously,
 * as a permuted [B,H,N,D] buffer, or with gaps (inner stride 2, NaN in the
 * gaps, so reading a gap shows up as NaN in the result). */
#ifndef LA_DENSE_VIEWS_H
#define LA_DENSE_VIEWS_H

#include <stdlib.h>

#include "test_util.h"
#include "core/internal.h"

/* Layouts of a logical [B,N,H,D] tensor:
 *   0  contiguous [B,N,H,D]
 *   1  a [B,H,N,D] buffer passed as a permuted [B,N,H,D] view
 *   2  [B,N,H,2D+1] storage with inner stride 2 (gaps hold NaN: reading
 *      one would show up as NaN in the result) */
enum { L_CONTIG = 0, L_BHND = 1, L_GAPS = 2 };
static const char *layout_name[3] = {"contig", "bhnd", "gaps"};

typedef struct hview {
    void *buf;
    la_tensor t;
} hview;

static void store_elem(la_dtype dt, void *buf, int64_t off, double x) {
    switch (dt) {
    case LA_F32: ((float *)buf)[off] = (float)x; break;
    case LA_F64: ((double *)buf)[off] = x; break;
    case LA_BF16: ((uint16_t *)buf)[off] = la_f32_to_bf16((float)x); break;
    case LA_F16: ((uint16_t *)buf)[off] = la_f32_to_f16((float)x); break;
    default: break;
    }
}

/* x: logical C-order values (NULL = all NaN). ndim 3 or 4. */
static hview make_view(const float *x, int ndim, const int64_t *ne, la_dtype dt, int layout) {
    hview h;
    int64_t nb[4], storage;
    if (ndim == 4 && layout == L_BHND) {
        nb[3] = 1;
        nb[1] = ne[3];
        nb[2] = ne[1] * ne[3];
        nb[0] = ne[2] * ne[1] * ne[3];
        storage = ne[0] * nb[0];
    } else if (ndim == 4 && layout == L_GAPS) {
        int64_t row = 2 * ne[3] + 1;
        nb[3] = 2;
        nb[2] = row;
        nb[1] = ne[2] * row;
        nb[0] = ne[1] * nb[1];
        storage = ne[0] * nb[0];
    } else {
        int64_t s = 1;
        for (int i = ndim - 1; i >= 0; i--) {
            nb[i] = s;
            s *= ne[i];
        }
        storage = s;
    }
    h.buf = malloc((size_t)storage * la_dtype_size(dt));
    for (int64_t i = 0; i < storage; i++) store_elem(dt, h.buf, i, NAN);
    la_tensor_init_strided(&h.t, h.buf, dt, LA_DEVICE_CPU, ndim, ne, nb);
    if (x) {
        int64_t n = 0;
        int64_t d3 = ndim == 4 ? ne[3] : 1;
        for (int64_t a = 0; a < ne[0]; a++)
            for (int64_t b = 0; b < ne[1]; b++)
                for (int64_t c = 0; c < ne[2]; c++)
                    for (int64_t d = 0; d < d3; d++) {
                        int64_t off = a * nb[0] + b * nb[1] + c * nb[2] + (ndim == 4 ? d * nb[3] : 0);
                        store_elem(dt, h.buf, off, x[n++]);
                    }
    }
    return h;
}

/* Logical C-order values of a view (as the op sees them). */
static void read_view(const hview *h, float *x) {
    const la_tensor *t = &h->t;
    int64_t n = 0, d3 = t->ndim == 4 ? t->ne[3] : 1;
    for (int64_t a = 0; a < t->ne[0]; a++)
        for (int64_t b = 0; b < t->ne[1]; b++)
            for (int64_t c = 0; c < t->ne[2]; c++)
                for (int64_t d = 0; d < d3; d++) {
                    int64_t off = a * t->nb[0] + b * t->nb[1] + c * t->nb[2] + (t->ndim == 4 ? d * t->nb[3] : 0);
                    x[n++] = la_load_f32(t, off);
                }
}

#endif
