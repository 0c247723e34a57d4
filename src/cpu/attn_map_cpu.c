/* Explicit N x N attention maps (SPEC §9) and their numerical rank and mean
 * row entropy. Analysis only: everything is float64, the map is
 * materialized, and the rank comes from LAPACK's dgesdd (singular values
 * only), so N is meant to stay at a few thousand. */
#include "cpu/attn_map_cpu.h"

#include <limits.h>

#include "cpu/focused_cpu.h"


#ifdef LA_HAVE_LAPACK
/* Fortran LAPACK, declared here (no lapacke.h needed). The trailing size_t
 * is gfortran's hidden length of the CHARACTER argument jobz. */
extern void dgesdd_(const char *jobz, const int *m, const int *n, double *a, const int *lda,
                    double *s, double *u, const int *ldu, double *vt, const int *ldvt,
                    double *work, const int *lwork, int *iwork, int *info, size_t jobz_len);
#endif

#ifdef LA_BLAS_OPENBLAS
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
int openblas_get_num_procs(void);
#endif

static inline double feat(la_feature f, double x) {
    switch (f) {
    case LA_FEATURE_IDENTITY: return x;
    case LA_FEATURE_RELU: return la_relu_f64(x);
    case LA_FEATURE_RELU_EPS: return la_relu_f64(x) + 1e-6;
    case LA_FEATURE_RELU1: return la_relu_f64(x) + 1.0;
    case LA_FEATURE_ELU1: return x >= 0 ? x + 1.0 : exp(x);
    }
    return x;
}

static inline void store_f64(la_tensor *t, int64_t off, double x) {
    if (t->dtype == LA_F64) ((double *)t->data)[off] = x;
    else la_store_f32(t, off, (float)x);
}

la_status la_attn_map_cpu(const la_attn_map_params *p, const la_tensor *q, const la_tensor *k,
                          const int64_t *blk, const la_tensor *mixing,
                          const la_tensor *softplus_param, la_tensor *out, la_context *ctx) {
    const int64_t N = q->ne[0], D = q->ne[1];
    const int nt = la_ctx_threads(ctx);
    const la_map_variant var = p->variant;

    /* Q~ [N,D] row-major and K~^T [D,N] (so a row of scores is D axpys over
     * contiguous memory), per-thread score row [N], W [M,M], 1/softplus [D] */
    const int64_t M = mixing ? mixing->ne[0] : 0;
    size_t nd, tot, bytes;
    LA_TRY(la_mul_size((size_t)N, (size_t)D, &nd, "attn_map: N*D"));
    size_t rows, mm;
    LA_TRY(la_mul_size((size_t)nt, (size_t)N, &rows, "attn_map: thread rows"));
    LA_TRY(la_mul_size((size_t)M, (size_t)M, &mm, "attn_map: M*M"));
    tot = 2 * nd + rows + mm + (size_t)D + 3 * (size_t)D;
    if (tot < nd) return la_err(LA_ERR_OVERFLOW, "attn_map: workspace size overflows");
    LA_TRY(la_mul_size(tot, sizeof(double), &bytes, "attn_map: workspace bytes"));
    double *ws = (double *)la_ws_alloc(ctx, bytes);
    if (!ws) return LA_ERR_NOMEM;
    double *Qt = ws, *KT = Qt + nd, *R = KT + nd, *W = R + rows, *isp = W + mm, *tmp = isp + D;

    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < M; j++) W[i * M + j] = la_load_f32(mixing, la_off2(mixing, i, j));
    for (int64_t j = 0; j < D; j++) {
        double s = softplus_param ? la_load_f32(softplus_param, softplus_param->nb[0] * j) : 0.0;
        isp[j] = 1.0 / la_softplus(s);
    }

    /* feature maps, per variant */
    double scale_q = 1.0;
    if (var == LA_MAP_SOFTMAX) scale_q = p->scale > 0 ? p->scale : 1.0 / sqrt((double)D);
    else if (var == LA_MAP_LINEAR || var == LA_MAP_MHLA) scale_q = p->scale > 0 ? p->scale : 1.0;
    const double inv_sqrt_d = 1.0 / sqrt((double)D);
    for (int64_t n = 0; n < N; n++) {
        double *qr = Qt + n * D, *kr = tmp, *kf = tmp + D;
        for (int64_t j = 0; j < D; j++) {
            qr[j] = la_load_f32(q, la_off2(q, n, j));
            kr[j] = la_load_f32(k, la_off2(k, n, j));
        }
        switch (var) {
        case LA_MAP_SOFTMAX:
            for (int64_t j = 0; j < D; j++) { qr[j] *= scale_q; kf[j] = kr[j]; }
            break;
        case LA_MAP_LINEAR:
        case LA_MAP_MHLA:
            for (int64_t j = 0; j < D; j++) {
                qr[j] = scale_q * feat(p->feature, qr[j]);
                kf[j] = feat(p->feature, kr[j]);
            }
            break;
        case LA_MAP_FOCUSED_FLATTEN: {
            /* f_p over the row in place: copy q first */
            double *qc = tmp + 2 * D;
            for (int64_t j = 0; j < D; j++) qc[j] = qr[j];
            la_flatten_focus_row(qc, isp, D, p->focused.p, qr);
            la_flatten_focus_row(kr, isp, D, p->focused.p, kf);
            break;
        }
        case LA_MAP_FOCUSED_BLOG:
            /* relu1(q d^-1/2), relu1(k); the conv on K and focus[h] are left out
             * (§9: DWC terms excluded; focus cancels) */
            for (int64_t j = 0; j < D; j++) {
                double x = qr[j] * inv_sqrt_d;
                qr[j] = la_relu_f64(x) + 1.0;
                kf[j] = la_relu_f64(kr[j]) + 1.0;
            }
            break;
        }
        for (int64_t j = 0; j < D; j++) KT[j * N + n] = kf[j];
    }

    #pragma omp parallel for num_threads(nt) schedule(dynamic, 16)
    for (int64_t t = 0; t < N; t++) {
        double *row = R + (size_t)la_thread_id() * N;
        const double *qr = Qt + t * D;
        for (int64_t s = 0; s < N; s++) row[s] = 0.0;
        for (int64_t j = 0; j < D; j++) {
            const double a = qr[j], *kc = KT + j * N;
            for (int64_t s = 0; s < N; s++) row[s] += a * kc[s];
        }
        double sum = 0.0;
        if (var == LA_MAP_SOFTMAX) {
            double mx = -INFINITY;
            for (int64_t s = 0; s < N; s++) mx = row[s] > mx ? row[s] : mx;
            for (int64_t s = 0; s < N; s++) { row[s] = exp(row[s] - mx); sum += row[s]; }
        } else {
            if (var == LA_MAP_MHLA) {
                const double *w = W + blk[t] * M;
                for (int64_t s = 0; s < N; s++) row[s] *= w[blk[s]];
            }
            for (int64_t s = 0; s < N; s++) sum += row[s];
        }
        /* a row whose weights are all zero (relu features that miss each
         * other) has no distribution: it stays zero (the op gives o = 0) */
        const double inv = sum != 0.0 ? 1.0 / sum : 0.0;
        for (int64_t s = 0; s < N; s++) store_f64(out, la_off2(out, t, s), row[s] * inv);
    }
    la_ws_free(ctx, ws);
    return LA_OK;
}

la_status la_map_rank_entropy_cpu(const la_tensor *map, double rtol, int64_t *rank,
                                  double *entropy) {
    const int64_t R = map->ne[0], C = map->ne[1];

    if (entropy) {
        /* mean over rows of -sum p ln p, p = row / row sum, 0 ln 0 = 0; a row
         * of zeros counts as entropy 0, a negative weight makes it NaN */
        double acc = 0.0;
        for (int64_t i = 0; i < R; i++) {
            double sum = 0.0, neg = 0.0, h = 0.0;
            for (int64_t j = 0; j < C; j++) {
                double a = map->dtype == LA_F64 ? ((const double *)map->data)[la_off2(map, i, j)]
                                                : la_load_f32(map, la_off2(map, i, j));
                sum += a;
                if (a < 0) neg = 1;
            }
            if (neg) { acc = NAN; continue; }
            if (sum == 0.0) continue;
            for (int64_t j = 0; j < C; j++) {
                double a = map->dtype == LA_F64 ? ((const double *)map->data)[la_off2(map, i, j)]
                                                : la_load_f32(map, la_off2(map, i, j));
                if (a > 0) {
                    double pr = a / sum;
                    h -= pr * log(pr);
                }
            }
            acc += h;
        }
        *entropy = acc / (double)R;
    }
    if (!rank) return LA_OK;

#ifndef LA_HAVE_LAPACK
    *rank = -1;
    (void)rtol;
    return la_err(LA_ERR_UNSUPPORTED, "map rank: this build has no LAPACK (dgesdd); install "
                  "liblapack-dev and rebuild (the entropy was computed)");
#else
    if (R > INT_MAX || C > INT_MAX)
        return la_err(LA_ERR_OVERFLOW, "map: [%lld, %lld] is too large for LAPACK's int sizes",
                      (long long)R, (long long)C);
    const int m = (int)C, n = (int)R, mn = m < n ? m : n;
    size_t cnt, bytes, ib;
    LA_TRY(la_mul_size((size_t)R, (size_t)C, &cnt, "map: R*C"));
    LA_TRY(la_mul_size(cnt + (size_t)mn, sizeof(double), &bytes, "map: SVD copy bytes"));
    LA_TRY(la_mul_size((size_t)mn, 8 * sizeof(int), &ib, "map: SVD iwork bytes"));
    double *A = (double *)la_ws_alloc(NULL, bytes);
    int *iwork = (int *)la_ws_alloc(NULL, ib);
    if (!A || !iwork) {
        la_ws_free(NULL, A);
        la_ws_free(NULL, iwork);
        return LA_ERR_NOMEM;
    }
    double *sv = A + cnt;
    /* row-major [R,C] read as column-major is the transpose [C,R]: same
     * singular values, no transposition needed */
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++)
            A[i * C + j] = map->dtype == LA_F64 ? ((const double *)map->data)[la_off2(map, i, j)]
                                                : la_load_f32(map, la_off2(map, i, j));
#ifdef LA_BLAS_OPENBLAS
    /* la_context_create pins OpenBLAS to one thread (our kernels call it from
     * inside OpenMP regions). dgesdd is called from outside any region and
     * its bidiagonalization is memory-bound BLAS-2, so let it use every core
     * for this call and put the setting back afterwards. (The setting is
     * process-wide: a concurrent la_* call on another thread may see BLAS
     * threads meanwhile; that costs speed, never correctness.) */
    const int blas_threads_before = openblas_get_num_threads();
    openblas_set_num_threads(openblas_get_num_procs());
#endif
    int info = 0, lwork = -1, one = 1;
    double wq = 0.0, dummy = 0.0;
    dgesdd_("N", &m, &n, A, &m, sv, &dummy, &one, &dummy, &one, &wq, &lwork, iwork, &info, 1);
    la_status st = LA_OK;
    if (info != 0) {
        st = la_err(LA_ERR_INTERNAL, "map rank: dgesdd workspace query failed (info=%d)", info);
    } else {
        lwork = wq > (double)INT_MAX ? INT_MAX : (int)wq + 1;
        double *work = (double *)la_ws_alloc(NULL, (size_t)lwork * sizeof(double));
        if (!work) {
            st = LA_ERR_NOMEM;
        } else {
            dgesdd_("N", &m, &n, A, &m, sv, &dummy, &one, &dummy, &one, work, &lwork, iwork,
                    &info, 1);
            la_ws_free(NULL, work);
            if (info != 0)
                st = la_err(LA_ERR_INTERNAL, "map rank: dgesdd failed (info=%d%s)", info,
                            info > 0 ? ": no convergence" : "");
        }
    }
#ifdef LA_BLAS_OPENBLAS
    openblas_set_num_threads(blas_threads_before);
#endif
    if (st == LA_OK) {
        /* singular values come sorted, largest first */
        int64_t r = 0;
        const double thr = rtol * sv[0];
        if (sv[0] > 0)
            for (int i = 0; i < mn; i++) r += sv[i] > thr;
        *rank = r;
    }
    la_ws_free(NULL, A);
    la_ws_free(NULL, iwork);
    return st;
#endif
}
