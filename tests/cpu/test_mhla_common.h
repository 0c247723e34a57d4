/* Helpers shared by the MHLA tests: [B,N,H,D] test tensors in several
 * layouts and dtypes, mixing matrices, the feature maps in float64. */
#ifndef TEST_MHLA_COMMON_H
#define TEST_MHLA_COMMON_H

#include "test_util.h"

/* A [B,N,H,D] view over a buffer. layout 0: contiguous [B,N,H,D];
 * 1: a [B,H,N,D] buffer viewed as [B,N,H,D]; 2: a [B,N,D,H] buffer (so the
 * last stride is H, not 1). */
typedef struct tview {
    int64_t B, N, H, D;
    la_dtype dt;
    void *buf;
    float *f32; /* = buf when dt == LA_F32 */
    la_tensor t;
} tview;

static inline void tv_set_raw(tview *x, int64_t off, double val) {
    switch (x->dt) {
    case LA_F32: ((float *)x->buf)[off] = (float)val; break;
    case LA_F64: ((double *)x->buf)[off] = val; break;
    case LA_BF16: {
        float f = (float)val;
        uint32_t u;
        memcpy(&u, &f, 4);
        if (f != f) { ((uint16_t *)x->buf)[off] = 0x7fc0; break; }
        u += 0x7fffu + ((u >> 16) & 1u);
        ((uint16_t *)x->buf)[off] = (uint16_t)(u >> 16);
        break;
    }
    default: break;
    }
}

static inline double tv_get_raw(const tview *x, int64_t off) {
    switch (x->dt) {
    case LA_F32: return ((const float *)x->buf)[off];
    case LA_F64: return ((const double *)x->buf)[off];
    case LA_BF16: {
        uint32_t u = (uint32_t)((const uint16_t *)x->buf)[off] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    default: return NAN;
    }
}

static inline int64_t tv_off(const tview *x, int64_t b, int64_t n, int64_t h, int64_t d) {
    return b * x->t.nb[0] + n * x->t.nb[1] + h * x->t.nb[2] + d * x->t.nb[3];
}

static inline double tv_get(const tview *x, int64_t b, int64_t n, int64_t h, int64_t d) {
    return tv_get_raw(x, tv_off(x, b, n, h, d));
}

/* rng NULL: poison with NaN. */
static inline void tv_make(tview *x, int64_t B, int64_t N, int64_t H, int64_t D, la_dtype dt,
                           int layout, la_rng *rng, double scale) {
    x->B = B, x->N = N, x->H = H, x->D = D, x->dt = dt;
    int64_t n = B * N * H * D;
    x->buf = malloc((size_t)n * la_dtype_size(dt));
    x->f32 = dt == LA_F32 ? (float *)x->buf : NULL;
    int64_t ne[4] = {B, N, H, D}, nb[4];
    if (layout == 1) {
        nb[0] = H * N * D, nb[1] = D, nb[2] = N * D, nb[3] = 1;
    } else if (layout == 2) {
        nb[0] = N * D * H, nb[1] = D * H, nb[2] = 1, nb[3] = H;
    } else {
        nb[0] = N * H * D, nb[1] = H * D, nb[2] = D, nb[3] = 1;
    }
    la_tensor_init_strided(&x->t, x->buf, dt, LA_DEVICE_CPU, 4, ne, nb);
    for (int64_t i = 0; i < n; i++) tv_set_raw(x, i, rng ? la_rng_normal(rng) * scale : NAN);
}

/* Logical [B,N,H,D] order into f32 (la_rel_err input). */
static inline void tv_read(const tview *x, float *dst) {
    for (int64_t b = 0; b < x->B; b++)
        for (int64_t n = 0; n < x->N; n++)
            for (int64_t h = 0; h < x->H; h++)
                for (int64_t d = 0; d < x->D; d++)
                    *dst++ = (float)tv_get(x, b, n, h, d);
}

static inline void tv_free(tview *x) { free(x->buf); }

/* Mixing [M,M] (rank 2) or [Hw,M,M] (rank 3), f32, with a float64 copy.
 * kind 0: uniform in [0.05, 1] (rng) or zeros (rng NULL); 1: all ones;
 * 2: identity. */
typedef struct mixing_t {
    float *f;
    double *d;
    int64_t Hw, M;
    la_tensor t;
} mixing_t;

static inline void mix_sync(mixing_t *w) {
    for (int64_t i = 0; i < w->Hw * w->M * w->M; i++) w->d[i] = w->f[i];
}

static inline void mix_make(mixing_t *w, int64_t Hw, int64_t M, int rank, la_rng *rng, int kind) {
    w->Hw = Hw, w->M = M;
    w->f = (float *)malloc(sizeof(float) * (size_t)(Hw * M * M));
    w->d = (double *)malloc(sizeof(double) * (size_t)(Hw * M * M));
    for (int64_t h = 0; h < Hw; h++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < M; j++) {
                float x = 0;
                if (kind == 0) x = rng ? (float)(0.05 + 0.95 * la_rng_uniform(rng)) : 0.0f;
                if (kind == 1) x = 1.0f;
                if (kind == 2) x = i == j ? 1.0f : 0.0f;
                w->f[(h * M + i) * M + j] = x;
            }
    mix_sync(w);
    int64_t ne3[3] = {Hw, M, M}, ne2[2] = {M, M};
    if (rank == 3)
        la_tensor_init(&w->t, w->f, LA_F32, LA_DEVICE_CPU, 3, ne3);
    else
        la_tensor_init(&w->t, w->f, LA_F32, LA_DEVICE_CPU, 2, ne2);
}

static inline void mix_free(mixing_t *w) { free(w->f), free(w->d); }

static inline const char *dims_str(int nd, const int64_t *d, char *buf, size_t n) {
    int o = 0;
    for (int a = 0; a < nd && o < (int)n; a++)
        o += snprintf(buf + o, n - (size_t)o, "%s%lld", a ? "x" : "", (long long)d[a]);
    return buf;
}

/* Whether the last error message mentions `what`. */
static inline int err_mentions(const char *what) { return strstr(la_last_error(), what) != NULL; }

#endif
