/* la_dsa_indexer against a float64 reference written plainly (sparse_ref.h).
 *
 * Scores: every valid score within rel 1e-5 of the float64 score, −inf outside
 * the range. Indices: (a) exactly the top-k (descending, ties to the lower
 * index, −1 padding) of the returned fp32 scores, and (b) consistent with the
 * float64 scores up to the fp32 tolerance (ordering and the k-th boundary).
 * Exact ties: integer-valued inputs make every score an exact integer in
 * fp32, so the indices must equal the float64 reference top-k exactly.
 * Sizes L = 1, 63, 129, 1000; HI, dI odd and round; T > L (empty causal
 * rows); random and empty per-query ranges; topk > range; f32/f64/bf16;
 * strided views; outputs poisoned and checked fully written; bad inputs. */
#include "sparse_ref.h"

/* Store values[n] (logical [a,b,c] row-major) into a buffer of dtype dt with
 * strides nb (elements); returns the buffer. */
static void *store(const float *v, la_dtype dt, int ndim, const int64_t *ne, const int64_t *nb,
                   size_t span) {
    void *buf = calloc(span, la_dtype_size(dt));
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= ne[i];
    for (int64_t e = 0; e < n; e++) {
        int64_t rem = e, off = 0;
        for (int i = ndim - 1; i >= 0; i--) {
            off += (rem % ne[i]) * nb[i];
            rem /= ne[i];
        }
        if (dt == LA_F32) ((float *)buf)[off] = v[e];
        else if (dt == LA_F64) ((double *)buf)[off] = v[e];
        else {
            uint32_t u;
            memcpy(&u, &v[e], 4);
            ((uint16_t *)buf)[off] = (uint16_t)(u >> 16);
        }
    }
    return buf;
}

typedef struct dsa_case {
    int64_t T, HI, dI, L, topk;
    int ranges;      /* 0 causal default, 1 random ranges (some empty), 2 start only */
    la_dtype dt;
    int strided;     /* q as a permuted [HI,T,dI] buffer, k with padded rows, w transposed */
    int integer;     /* integer-valued inputs: exact scores and exact ties */
} dsa_case;

static void run_case(la_rng *rng, const dsa_case *c, la_context *ctx) {
    const int64_t T = c->T, HI = c->HI, dI = c->dI, L = c->L, K = c->topk;
    float *q = malloc(sizeof(float) * (size_t)(T * HI * dI));
    float *k = malloc(sizeof(float) * (size_t)(L * dI));
    float *w = malloc(sizeof(float) * (size_t)(T * HI));
    for (int64_t i = 0; i < T * HI * dI; i++)
        q[i] = c->integer ? (float)((int)(la_rng_uniform(rng) * 5) - 2) : (float)la_rng_normal(rng);
    for (int64_t i = 0; i < L * dI; i++)
        k[i] = c->integer ? (float)((int)(la_rng_uniform(rng) * 3) - 1) : (float)la_rng_normal(rng);
    for (int64_t i = 0; i < T * HI; i++)
        w[i] = c->integer ? (float)((int)(la_rng_uniform(rng) * 4) - 1) : (float)(la_rng_normal(rng) / sqrt((double)HI * dI));
    if (c->dt == LA_BF16)
        for (int64_t i = 0; i < T * HI * dI; i++) q[i] = la_round_bf16(q[i]);
    if (c->dt == LA_BF16)
        for (int64_t i = 0; i < L * dI; i++) k[i] = la_round_bf16(k[i]);
    if (c->dt == LA_BF16)
        for (int64_t i = 0; i < T * HI; i++) w[i] = la_round_bf16(w[i]);

    /* views */
    la_tensor tq, tk, tw, ts, te, ti, tsc;
    int64_t qne[3] = {T, HI, dI}, kne[2] = {L, dI}, wne[2] = {T, HI};
    int64_t qnb[3], knb[2], wnb[2];
    size_t qspan, kspan, wspan;
    if (c->strided) {
        qnb[0] = dI; qnb[1] = T * dI; qnb[2] = 1; /* buffer [HI,T,dI] */
        knb[0] = dI + 5; knb[1] = 1;
        wnb[0] = 1; wnb[1] = T; /* buffer [HI,T] */
        qspan = (size_t)(T * HI * dI);
        kspan = (size_t)(L * (dI + 5));
        wspan = (size_t)(T * HI);
    } else {
        qnb[0] = HI * dI; qnb[1] = dI; qnb[2] = 1;
        knb[0] = dI; knb[1] = 1;
        wnb[0] = HI; wnb[1] = 1;
        qspan = (size_t)(T * HI * dI);
        kspan = (size_t)(L * dI);
        wspan = (size_t)(T * HI);
    }
    void *bq = store(q, c->dt, 3, qne, qnb, qspan);
    void *bk = store(k, c->dt, 2, kne, knb, kspan);
    void *bw = store(w, c->dt, 2, wne, wnb, wspan);
    la_tensor_init_strided(&tq, bq, c->dt, LA_DEVICE_CPU, 3, qne, qnb);
    la_tensor_init_strided(&tk, bk, c->dt, LA_DEVICE_CPU, 2, kne, knb);
    la_tensor_init_strided(&tw, bw, c->dt, LA_DEVICE_CPU, 2, wne, wnb);

    int64_t *s0 = malloc(sizeof(int64_t) * (size_t)T), *s1 = malloc(sizeof(int64_t) * (size_t)T);
    int32_t *rs = malloc(sizeof(int32_t) * (size_t)T), *re = malloc(sizeof(int32_t) * (size_t)T);
    for (int64_t t = 0; t < T; t++) {
        ref_causal(T, L, t, &s0[t], &s1[t]);
        if (c->ranges == 1) {
            int64_t a = (int64_t)(la_rng_uniform(rng) * (double)(L + 1));
            int64_t b = (int64_t)(la_rng_uniform(rng) * (double)(L + 1));
            if (a > b) { int64_t x = a; a = b; b = x; }
            if (t % 5 == 0) b = a; /* empty range */
            s0[t] = a;
            s1[t] = b;
        } else if (c->ranges == 2) {
            s0[t] = s1[t] > 0 ? (int64_t)(la_rng_uniform(rng) * (double)s1[t]) : 0;
        }
        rs[t] = (int32_t)s0[t];
        re[t] = (int32_t)s1[t];
    }
    int64_t tne[1] = {T};
    la_tensor_init(&ts, rs, LA_I32, LA_DEVICE_CPU, 1, tne);
    la_tensor_init(&te, re, LA_I32, LA_DEVICE_CPU, 1, tne);

    /* idx with row stride K+2 (the 2 extra stay poisoned); scores [T,L] */
    const int64_t ldi = K + 2;
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)(T * ldi));
    for (int64_t i = 0; i < T * ldi; i++) idx[i] = -7;
    int64_t ine[2] = {T, K}, inb[2] = {ldi, 1};
    la_tensor_init_strided(&ti, idx, LA_I32, LA_DEVICE_CPU, 2, ine, inb);
    float *sc = malloc(sizeof(float) * (size_t)(T * L));
    la_fill_nan(sc, T * L);
    int64_t sne[2] = {T, L};
    la_tensor_init(&tsc, sc, LA_F32, LA_DEVICE_CPU, 2, sne);

    la_index_params p;
    la_index_params_init(&p);
    p.topk = K;
    la_status st = la_dsa_indexer(&p, &tq, &tk, &tw, c->ranges == 1 ? &ts : (c->ranges == 2 ? &ts : NULL),
                                  c->ranges == 1 ? &te : NULL, &ti, &tsc, ctx);
    CHECK(st == LA_OK, "dsa T=%lld HI=%lld dI=%lld L=%lld topk=%lld: %s %s", (long long)T, (long long)HI,
          (long long)dI, (long long)L, (long long)K, la_status_string(st), la_last_error());
    if (st != LA_OK) goto out;

    ref_idx_in in = {T, HI, dI, L, q, k, w};
    double *ref = malloc(sizeof(double) * (size_t)L);
    double *row32 = malloc(sizeof(double) * (size_t)L);
    int32_t *want = malloc(sizeof(int32_t) * (size_t)K);
    double maxerr = 0;
    int bad = 0;
    for (int64_t t = 0; t < T && !bad; t++) {
        double scale = 0;
        for (int64_t s = 0; s < L; s++) {
            const float got = sc[t * L + s];
            if (s < s0[t] || s >= s1[t]) {
                if (!(got == -INFINITY)) {
                    CHECK(0, "scores[%lld,%lld] = %g outside [%lld,%lld), want -inf", (long long)t, (long long)s,
                          (double)got, (long long)s0[t], (long long)s1[t]);
                    bad = 1;
                    break;
                }
                ref[s] = -INFINITY;
                row32[s] = -INFINITY;
                continue;
            }
            ref[s] = ref_score(&in, t, s);
            row32[s] = got;
            if (fabs(ref[s]) > scale) scale = fabs(ref[s]);
        }
        if (bad) break;
        /* fp32 sum of HI·dI products: error bound relative to the row's largest terms */
        double termscale = 0;
        for (int64_t s = s0[t]; s < s1[t]; s++) {
            double a = 0;
            for (int64_t h = 0; h < HI; h++) {
                double dd = 0;
                for (int64_t d = 0; d < dI; d++) dd += fabs((double)q[(t * HI + h) * dI + d] * k[s * dI + d]);
                a += fabs(w[t * HI + h]) * dd;
            }
            if (a > termscale) termscale = a;
        }
        const double tol = 1e-5 * (termscale > 1e-30 ? termscale : 1e-30);
        for (int64_t s = s0[t]; s < s1[t]; s++) {
            const double e = fabs(row32[s] - ref[s]);
            if (isnan(row32[s]) || e > tol) {
                CHECK(0, "scores[%lld,%lld] = %.9g, float64 %.9g (tol %.3g)", (long long)t, (long long)s, row32[s],
                      ref[s], tol);
                bad = 1;
                break;
            }
            if (e / (termscale > 1e-30 ? termscale : 1) > maxerr) maxerr = e / termscale;
        }
        if (bad) break;
        /* (a) exact top-k of the returned fp32 row */
        ref_topk(row32, NULL, L, K, want);
        for (int64_t j = 0; j < K; j++)
            if (idx[t * ldi + j] != want[j]) {
                CHECK(0, "idx[%lld,%lld] = %d, top-k of the returned scores gives %d", (long long)t, (long long)j,
                      idx[t * ldi + j], want[j]);
                bad = 1;
                break;
            }
        for (int64_t j = K; j < ldi; j++)
            if (idx[t * ldi + j] != -7) {
                CHECK(0, "idx row %lld: wrote past topk into the row stride", (long long)t);
                bad = 1;
            }
        if (bad) break;
        /* (b) consistent with float64: ordering and boundary within tol */
        const int64_t nvalid = s1[t] - s0[t];
        const int64_t nsel = nvalid < K ? nvalid : K;
        for (int64_t j = 0; j < K; j++) {
            const int32_t s = idx[t * ldi + j];
            if (j >= nsel) {
                if (s != -1) { CHECK(0, "idx[%lld,%lld] = %d, want -1 padding", (long long)t, (long long)j, s); bad = 1; }
                continue;
            }
            if (s < s0[t] || s >= s1[t]) { CHECK(0, "idx[%lld,%lld] = %d outside the range", (long long)t, (long long)j, s); bad = 1; break; }
            if (j > 0 && ref[s] > ref[idx[t * ldi + j - 1]] + 2 * tol) {
                CHECK(0, "idx row %lld not in descending float64 order at %lld", (long long)t, (long long)j);
                bad = 1;
                break;
            }
        }
        if (nsel > 0 && !bad) {
            double kth = ref[idx[t * ldi + nsel - 1]];
            char *sel = calloc((size_t)L, 1);
            for (int64_t j = 0; j < nsel; j++) sel[idx[t * ldi + j]] = 1;
            for (int64_t s = s0[t]; s < s1[t]; s++)
                if (!sel[s] && ref[s] > kth + 2 * tol) {
                    CHECK(0, "row %lld: key %lld (%.9g) beats the selected k-th (%.9g)", (long long)t, (long long)s,
                          ref[s], kth);
                    bad = 1;
                    break;
                }
            free(sel);
        }
        /* integer inputs: float64 top-k exactly, ties included */
        if (c->integer && !bad) {
            ref_topk(ref, NULL, L, K, want);
            for (int64_t j = 0; j < K; j++)
                if (idx[t * ldi + j] != want[j]) {
                    CHECK(0, "exact ties: idx[%lld,%lld] = %d, float64 reference %d", (long long)t, (long long)j,
                          idx[t * ldi + j], want[j]);
                    bad = 1;
                    break;
                }
        }
    }
    CHECK(!bad, "dsa T=%lld HI=%lld dI=%lld L=%lld topk=%lld ranges=%d %s%s%s (max rel err %.2g)", (long long)T,
          (long long)HI, (long long)dI, (long long)L, (long long)K, c->ranges, la_dtype_name(c->dt),
          c->strided ? " strided" : "", c->integer ? " integer" : "", maxerr);
    free(ref);
    free(row32);
    free(want);
out:
    free(q); free(k); free(w); free(bq); free(bk); free(bw);
    free(s0); free(s1); free(rs); free(re); free(idx); free(sc);
}

static void bad_inputs(la_context *ctx) {
    float q[2 * 3 * 4] = {0}, k[5 * 4] = {0}, w[2 * 3] = {0}, sc[2 * 5];
    int32_t idx[2 * 4], st[2] = {0, 0}, en[2] = {3, 5};
    la_tensor tq, tk, tw, ti, ts, te, tsc;
    int64_t qne[3] = {2, 3, 4}, kne[2] = {5, 4}, wne[2] = {2, 3}, ine[2] = {2, 4}, rne[1] = {2}, sne[2] = {2, 5};
    la_tensor_init(&tq, q, LA_F32, LA_DEVICE_CPU, 3, qne);
    la_tensor_init(&tk, k, LA_F32, LA_DEVICE_CPU, 2, kne);
    la_tensor_init(&tw, w, LA_F32, LA_DEVICE_CPU, 2, wne);
    la_tensor_init(&ti, idx, LA_I32, LA_DEVICE_CPU, 2, ine);
    la_tensor_init(&ts, st, LA_I32, LA_DEVICE_CPU, 1, rne);
    la_tensor_init(&te, en, LA_I32, LA_DEVICE_CPU, 1, rne);
    la_tensor_init(&tsc, sc, LA_F32, LA_DEVICE_CPU, 2, sne);
    la_index_params p;
    la_index_params_init(&p);
    p.topk = 4;
    CHECK_OK(la_dsa_indexer(&p, &tq, &tk, &tw, &ts, &te, &ti, &tsc, ctx));

    la_tensor k2 = tk; /* dI mismatch */
    k2.ne[1] = 3;
    CHECK_STATUS(la_dsa_indexer(&p, &tq, &k2, &tw, NULL, NULL, &ti, NULL, ctx), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "dI") && strstr(la_last_error(), "k"), "dI message: %s", la_last_error());
    la_tensor w2 = tw; /* HI mismatch */
    w2.ne[1] = 2;
    CHECK_STATUS(la_dsa_indexer(&p, &tq, &tk, &w2, NULL, NULL, &ti, NULL, ctx), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "w") != NULL, "w message: %s", la_last_error());
    la_tensor w3 = tw; /* T mismatch */
    w3.ne[0] = 1;
    CHECK_STATUS(la_dsa_indexer(&p, &tq, &tk, &w3, NULL, NULL, &ti, NULL, ctx), LA_ERR_SHAPE);
    st[1] = 4; en[1] = 3; /* start > end */
    CHECK_STATUS(la_dsa_indexer(&p, &tq, &tk, &tw, &ts, &te, &ti, NULL, ctx), LA_ERR_ARG);
    CHECK(strstr(la_last_error(), "start[1]") != NULL, "start>end message: %s", la_last_error());
    st[1] = 0; en[1] = 6; /* end > L */
    CHECK_STATUS(la_dsa_indexer(&p, &tq, &tk, &tw, &ts, &te, &ti, NULL, ctx), LA_ERR_ARG);
    CHECK(strstr(la_last_error(), "end[1]") != NULL, "end>L message: %s", la_last_error());
    st[1] = -1; en[1] = 3; /* start < 0 */
    CHECK_STATUS(la_dsa_indexer(&p, &tq, &tk, &tw, &ts, &te, &ti, NULL, ctx), LA_ERR_ARG);
    st[1] = 0;
    p.topk = 0;
    CHECK_STATUS(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL, ctx), LA_ERR_ARG);
    CHECK(strstr(la_last_error(), "topk") != NULL, "topk message: %s", la_last_error());
    p.topk = -3;
    CHECK_STATUS(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL, ctx), LA_ERR_ARG);
    p.topk = 3; /* idx has 4 columns */
    CHECK_STATUS(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL, ctx), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "idx") != NULL, "idx message: %s", la_last_error());
    p.topk = 4;
    la_tensor sc2 = tsc;
    sc2.ne[1] = 4;
    CHECK_STATUS(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, &sc2, ctx), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "scores") != NULL, "scores message: %s", la_last_error());
    la_tensor i2 = ti;
    i2.dtype = LA_F32;
    CHECK_STATUS(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &i2, NULL, ctx), LA_ERR_DTYPE);
    la_tensor r2 = ts;
    r2.ne[0] = 3;
    CHECK_STATUS(la_dsa_indexer(&p, &tq, &tk, &tw, &r2, NULL, &ti, NULL, ctx), LA_ERR_SHAPE);
    la_tensor q2 = tq;
    q2.ndim = 2;
    CHECK_STATUS(la_dsa_indexer(&p, &q2, &tk, &tw, NULL, NULL, &ti, NULL, ctx), LA_ERR_SHAPE);
    la_tensor q3 = tq;
    q3.device = LA_DEVICE_CUDA;
    CHECK_MIXED_DEVICE(la_dsa_indexer(&p, &q3, &tk, &tw, NULL, NULL, &ti, NULL, ctx));
    CHECK(strstr(la_last_error(), "cuda") != NULL, "cuda message: %s", la_last_error());
    CHECK_STATUS(la_dsa_indexer(&p, &tq, NULL, &tw, NULL, NULL, &ti, NULL, ctx), LA_ERR_ARG);
    CHECK_STATUS(la_dsa_indexer(NULL, &tq, &tk, &tw, NULL, NULL, &ti, NULL, ctx), LA_ERR_ARG);
    la_tensor i3 = ti;
    i3.data = q; /* output aliases an input */
    CHECK_STATUS(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &i3, NULL, ctx), LA_ERR_ARG);
    /* huge T*L is rejected before allocating: overflowed spans */
    la_tensor k4 = tk;
    k4.ne[0] = (int64_t)1 << 40;
    CHECK(la_dsa_indexer(&p, &tq, &k4, &tw, NULL, NULL, &ti, NULL, ctx) != LA_OK, "2^40 keys rejected");
}

int main(void) {
    la_rng rng = la_test_rng("test_dsa");
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, 2);

    const dsa_case cases[] = {
        {1, 1, 1, 1, 1, 0, LA_F32, 0, 0},
        {1, 4, 16, 1, 2048, 0, LA_F32, 0, 0},       /* topk > range: −1 padding */
        {5, 3, 63, 63, 7, 0, LA_F32, 0, 0},
        {63, 8, 64, 63, 16, 0, LA_F32, 0, 0},
        {17, 64, 128, 129, 32, 1, LA_F32, 0, 0},    /* random ranges, some empty */
        {200, 5, 16, 129, 40, 0, LA_F32, 0, 0},     /* T > L: empty causal rows */
        {33, 7, 63, 1000, 100, 1, LA_F32, 1, 0},    /* strided views */
        {20, 16, 128, 1000, 2048, 2, LA_F32, 0, 0}, /* start only, topk > range */
        {9, 8, 64, 1000, 64, 0, LA_F64, 0, 0},
        {9, 8, 64, 1000, 64, 1, LA_BF16, 1, 0},
        {12, 5, 7, 1000, 300, 0, LA_F32, 0, 1},     /* exact ties */
        {12, 3, 2, 129, 129, 1, LA_F32, 1, 1},      /* exact ties, many */
        {4, 64, 128, 5000, 2048, 0, LA_F32, 0, 0},  /* the kernel's full head/tile path */
        {6, 8, 64, 3000, 100, 1, LA_F32, 1, 0},     /* decode-sized batch: panels packed per work item */
        {1, 16, 32, 2000, 64, 2, LA_BF16, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&rng, &cases[i], ctx);
    la_context_set_threads(ctx, 1);
    run_case(&rng, &cases[6], ctx);
    bad_inputs(ctx);
    la_context_destroy(ctx);
    return la_test_finish();
}
