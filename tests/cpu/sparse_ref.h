/* Plain float64 references shared by the sparse-family tests
 * (test_dsa.c, test_hisa.c, test_topk.c). Written for clarity, O(L log L)
 * sorts and triple loops; they never call the library's kernels. */
#ifndef LA_SPARSE_REF_H
#define LA_SPARSE_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "test_util.h"

typedef struct ref_pair {
    double v;
    int64_t i;
} ref_pair;

/* descending value with NaN first (above +inf, as torch.topk), then
 * ascending index */
static inline int ref_pair_cmp(const void *a, const void *b) {
    const ref_pair *x = a, *y = b;
    if (isnan(x->v) != isnan(y->v)) return isnan(x->v) ? -1 : 1;
    if (isnan(x->v)) return (x->i > y->i) - (x->i < y->i);
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* Top-k of v[0..n) (-inf is masked, NaN ranks first): out[0..k), -1 padded;
 * returns the number of valid entries selected. pos (optional) maps entry ->
 * index. */
static inline int64_t ref_topk(const double *v, const int64_t *pos, int64_t n, int64_t k, int32_t *out) {
    ref_pair *p = malloc(sizeof(ref_pair) * (size_t)(n > 0 ? n : 1));
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++)
        if (isnan(v[i]) || v[i] > -INFINITY) {
            p[c].v = v[i] == 0.0 ? 0.0 : v[i]; /* -0 and +0 tie */
            p[c].i = pos ? pos[i] : i;
            c++;
        }
    qsort(p, (size_t)c, sizeof *p, ref_pair_cmp);
    int64_t m = c < k ? c : k;
    for (int64_t j = 0; j < m; j++) out[j] = (int32_t)p[j].i;
    for (int64_t j = m; j < k; j++) out[j] = -1;
    free(p);
    return m;
}

/* Indexer inputs in one place: q [T,HI,dI], k [L,dI], w [T,HI] as float
 * values (already rounded to the dtype under test). */
typedef struct ref_idx_in {
    int64_t T, HI, dI, L;
    const float *q, *k, *w;
} ref_idx_in;

/* max(x, 0) with NaN propagated, as torch.relu. */
static inline double ref_relu(double x) { return isnan(x) ? x : (x > 0 ? x : 0); }

/* I(t,s) = Σ_h w[t,h]·ReLU(q[t,h]·k[s]) in float64. */
static inline double ref_score(const ref_idx_in *in, int64_t t, int64_t s) {
    double acc = 0;
    for (int64_t h = 0; h < in->HI; h++) {
        double dot = 0;
        for (int64_t d = 0; d < in->dI; d++)
            dot += (double)in->q[(t * in->HI + h) * in->dI + d] * (double)in->k[s * in->dI + d];
        acc += (double)in->w[t * in->HI + h] * ref_relu(dot);
    }
    return acc;
}

/* Same against an explicit key vector (pooled block means). */
static inline double ref_score_vec(const ref_idx_in *in, int64_t t, const double *kv) {
    double acc = 0;
    for (int64_t h = 0; h < in->HI; h++) {
        double dot = 0;
        for (int64_t d = 0; d < in->dI; d++) dot += (double)in->q[(t * in->HI + h) * in->dI + d] * kv[d];
        acc += (double)in->w[t * in->HI + h] * ref_relu(dot);
    }
    return acc;
}

/* Default causal range (bottom-right aligned), clamped. */
static inline void ref_causal(int64_t T, int64_t L, int64_t t, int64_t *s0, int64_t *s1) {
    int64_t e = L - T + t + 1;
    *s0 = 0;
    *s1 = e < 0 ? 0 : (e > L ? L : e);
}

#endif
