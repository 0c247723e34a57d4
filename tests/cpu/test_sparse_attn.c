/* la_sparse_attention (SPEC §8) against a float64 gathered softmax written
 * plainly here. MQA ([L,Dqk]) and grouped ([L,Hkv,Dqk], also Hq not a
 * multiple of Hkv), Dqk = 1..576 with dv < Dqk, k spanning several 128-key
 * chunks, invalid indices (−1, −5, L, L+100, INT32_MAX) skipped and never read
 * (the rows past L in the buffer are NaN: reading one would show), an
 * all-invalid row (o = 0, lse = −inf, no NaN), f32/f64/bf16, strided views,
 * outputs poisoned and fully written, bad inputs. */
#include <limits.h>

#include "test_util.h"

typedef struct sa_case {
    int64_t T, Hq, Hkv, Dqk, dv, L, K; /* Hkv = 0: MQA [L,Dqk] */
    double invalid;                    /* fraction of invalid indices */
    la_dtype dt;
    int strided; /* q as a permuted [Hq,T,Dqk] buffer, kv rows padded */
    float scale; /* 0 = default */
} sa_case;

static void store_val(void *buf, la_dtype dt, int64_t off, float v) {
    if (dt == LA_F32) ((float *)buf)[off] = v;
    else if (dt == LA_F64) ((double *)buf)[off] = v;
    else {
        uint32_t u;
        memcpy(&u, &v, 4);
        ((uint16_t *)buf)[off] = (uint16_t)(u >> 16);
    }
}

static void run_case(la_rng *rng, const sa_case *c, la_context *ctx) {
    const int64_t T = c->T, Hq = c->Hq, Hkv = c->Hkv ? c->Hkv : 1, D = c->Dqk, dv = c->dv, L = c->L, K = c->K;
    const int64_t Lbuf = L + 3; /* rows past L: NaN, must never be read */
    float *q = malloc(sizeof(float) * (size_t)(T * Hq * D));
    float *kv = malloc(sizeof(float) * (size_t)(Lbuf * Hkv * D));
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)(T * K));
    for (int64_t i = 0; i < T * Hq * D; i++) q[i] = (float)la_rng_normal(rng);
    for (int64_t i = 0; i < Lbuf * Hkv * D; i++) kv[i] = i < L * Hkv * D ? (float)la_rng_normal(rng) : NAN;
    if (c->dt == LA_BF16) {
        for (int64_t i = 0; i < T * Hq * D; i++) q[i] = la_round_bf16(q[i]);
        for (int64_t i = 0; i < L * Hkv * D; i++) kv[i] = la_round_bf16(kv[i]);
    }
    const int32_t bad_ix[5] = {-1, -5, (int32_t)L, (int32_t)L + 100, INT32_MAX};
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++) {
            int32_t v = (int32_t)(la_rng_uniform(rng) * (double)L);
            if (la_rng_uniform(rng) < c->invalid) v = bad_ix[(int)(la_rng_uniform(rng) * 5)];
            if (t == T - 1 && T > 1) v = bad_ix[j % 5]; /* last row: nothing valid */
            idx[t * K + j] = v;
        }
    /* views */
    const size_t es = la_dtype_size(c->dt);
    int64_t qne[3] = {T, Hq, D}, qnb[3];
    if (c->strided) { qnb[0] = D; qnb[1] = T * D; qnb[2] = 1; }
    else { qnb[0] = Hq * D; qnb[1] = D; qnb[2] = 1; }
    void *bq = malloc(es * (size_t)(T * Hq * D));
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t d = 0; d < D; d++) store_val(bq, c->dt, t * qnb[0] + h * qnb[1] + d, q[(t * Hq + h) * D + d]);
    const int64_t rowpad = c->strided ? 3 : 0;
    const int64_t ld = Hkv * D + rowpad; /* kv row stride */
    void *bkv = malloc(es * (size_t)(Lbuf * ld));
    for (int64_t s = 0; s < Lbuf; s++)
        for (int64_t e = 0; e < ld; e++)
            store_val(bkv, c->dt, s * ld + e, e < Hkv * D ? kv[s * Hkv * D + e] : NAN);
    la_tensor tq, tkv, ti, to, tl;
    la_tensor_init_strided(&tq, bq, c->dt, LA_DEVICE_CPU, 3, qne, qnb);
    if (c->Hkv) {
        int64_t ne[3] = {L, Hkv, D}, nb[3] = {ld, D, 1};
        la_tensor_init_strided(&tkv, bkv, c->dt, LA_DEVICE_CPU, 3, ne, nb);
    } else {
        int64_t ne[2] = {L, D}, nb[2] = {ld, 1};
        la_tensor_init_strided(&tkv, bkv, c->dt, LA_DEVICE_CPU, 2, ne, nb);
    }
    int64_t ine[2] = {T, K};
    la_tensor_init(&ti, idx, LA_I32, LA_DEVICE_CPU, 2, ine);
    float *out = malloc(sizeof(float) * (size_t)(T * Hq * dv));
    float *lse = malloc(sizeof(float) * (size_t)(T * Hq));
    la_fill_nan(out, T * Hq * dv);
    la_fill_nan(lse, T * Hq);
    int64_t one[3] = {T, Hq, dv}, lne[2] = {T, Hq};
    la_tensor_init(&to, out, LA_F32, LA_DEVICE_CPU, 3, one);
    la_tensor_init(&tl, lse, LA_F32, LA_DEVICE_CPU, 2, lne);
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    p.dv = dv;
    p.scale = c->scale;
    la_status st = la_sparse_attention(&p, &tq, &tkv, &ti, &to, &tl, ctx);
    CHECK(st == LA_OK, "sparse-attn: %s %s", la_status_string(st), la_last_error());

    /* float64 gathered softmax */
    const double scale = c->scale != 0.f ? c->scale : 1.0 / sqrt((double)D);
    double *ro = malloc(sizeof(double) * (size_t)(T * Hq * dv));
    double *rl = malloc(sizeof(double) * (size_t)(T * Hq));
    double *sc = malloc(sizeof(double) * (size_t)K);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t g = h * Hkv / Hq;
            double mx = -INFINITY;
            for (int64_t j = 0; j < K; j++) {
                const int32_t s = idx[t * K + j];
                sc[j] = -INFINITY;
                if (s < 0 || s >= L) continue;
                double dot = 0;
                for (int64_t d = 0; d < D; d++) dot += (double)q[(t * Hq + h) * D + d] * kv[(s * Hkv + g) * D + d];
                sc[j] = scale * dot;
                if (sc[j] > mx) mx = sc[j];
            }
            double sum = 0;
            for (int64_t d = 0; d < dv; d++) ro[(t * Hq + h) * dv + d] = 0;
            for (int64_t j = 0; j < K; j++) {
                if (sc[j] == -INFINITY) continue;
                const double e = exp(sc[j] - mx);
                sum += e;
                const int32_t s = idx[t * K + j];
                for (int64_t d = 0; d < dv; d++) ro[(t * Hq + h) * dv + d] += e * kv[(s * Hkv + g) * D + d];
            }
            for (int64_t d = 0; d < dv; d++) ro[(t * Hq + h) * dv + d] = sum > 0 ? ro[(t * Hq + h) * dv + d] / sum : 0;
            rl[t * Hq + h] = sum > 0 ? mx + log(sum) : -INFINITY;
        }
    if (st == LA_OK) {
        const double tol = c->dt == LA_BF16 ? 1e-5 : 1e-5; /* inputs rounded first: fp32 compute either way */
        const double eo = la_rel_err(out, ro, T * Hq * dv);
        int lse_ok = 1, nan_free = 1;
        double el = 0;
        for (int64_t i = 0; i < T * Hq; i++) {
            if (isnan(lse[i])) nan_free = 0;
            if (rl[i] == -INFINITY) {
                if (lse[i] != -INFINITY) lse_ok = 0;
            } else {
                const double e = fabs(lse[i] - rl[i]) / (fabs(rl[i]) > 1 ? fabs(rl[i]) : 1);
                if (e > el) el = e;
            }
        }
        for (int64_t i = 0; i < T * Hq * dv; i++)
            if (isnan(out[i])) nan_free = 0;
        CHECK(eo <= tol && el <= tol && lse_ok && nan_free,
              "sparse-attn T=%lld Hq=%lld Hkv=%lld Dqk=%lld dv=%lld L=%lld k=%lld %s%s: out err %.2g, lse err %.2g%s%s",
              (long long)T, (long long)Hq, (long long)c->Hkv, (long long)D, (long long)dv, (long long)L, (long long)K,
              la_dtype_name(c->dt), c->strided ? " strided" : "", eo, el, lse_ok ? "" : ", all-invalid lse not -inf",
              nan_free ? "" : ", NaN in output");
        if (T > 1) { /* the all-invalid row: exact zeros */
            int zeros = 1;
            for (int64_t i = (T - 1) * Hq * dv; i < T * Hq * dv; i++)
                if (out[i] != 0.f) zeros = 0;
            CHECK(zeros, "all-invalid row must give exact zeros");
        }
    }
    free(q); free(kv); free(idx); free(bq); free(bkv); free(out); free(lse); free(ro); free(rl); free(sc);
}

static void bad_inputs(la_context *ctx) {
    float q[2 * 4 * 8] = {0}, kv[5 * 8] = {0}, out[2 * 4 * 6], lse[2 * 4];
    int32_t idx[2 * 3] = {0, 1, 2, 3, 4, -1};
    la_tensor tq, tkv, ti, to, tl;
    int64_t qne[3] = {2, 4, 8}, kne[2] = {5, 8}, ine[2] = {2, 3}, one[3] = {2, 4, 6}, lne[2] = {2, 4};
    la_tensor_init(&tq, q, LA_F32, LA_DEVICE_CPU, 3, qne);
    la_tensor_init(&tkv, kv, LA_F32, LA_DEVICE_CPU, 2, kne);
    la_tensor_init(&ti, idx, LA_I32, LA_DEVICE_CPU, 2, ine);
    la_tensor_init(&to, out, LA_F32, LA_DEVICE_CPU, 3, one);
    la_tensor_init(&tl, lse, LA_F32, LA_DEVICE_CPU, 2, lne);
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    CHECK(p.dv == 512 && p.scale == 0.f, "defaults dv 512, scale 0 (Dqk^-1/2)");
    CHECK_STATUS(la_sparse_attention(&p, &tq, &tkv, &ti, &to, &tl, ctx), LA_ERR_ARG); /* dv 512 > Dqk 8 */
    CHECK(strstr(la_last_error(), "dv") != NULL, "dv message: %s", la_last_error());
    p.dv = 6;
    CHECK_OK(la_sparse_attention(&p, &tq, &tkv, &ti, &to, &tl, ctx));
    CHECK_OK(la_sparse_attention(&p, &tq, &tkv, &ti, &to, NULL, ctx));
    la_tensor k2 = tkv;
    k2.ne[1] = 7; /* Dqk mismatch */
    CHECK_STATUS(la_sparse_attention(&p, &tq, &k2, &ti, &to, &tl, ctx), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "kv") != NULL, "kv message: %s", la_last_error());
    la_tensor i2 = ti;
    i2.ne[0] = 1;
    CHECK_STATUS(la_sparse_attention(&p, &tq, &tkv, &i2, &to, &tl, ctx), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "idx") != NULL, "idx message: %s", la_last_error());
    la_tensor i3 = ti;
    i3.dtype = LA_F32;
    CHECK_STATUS(la_sparse_attention(&p, &tq, &tkv, &i3, &to, &tl, ctx), LA_ERR_DTYPE);
    la_tensor o2 = to;
    o2.ne[2] = 5;
    CHECK_STATUS(la_sparse_attention(&p, &tq, &tkv, &ti, &o2, &tl, ctx), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "out") != NULL, "out message: %s", la_last_error());
    la_tensor l2 = tl;
    l2.ne[1] = 3;
    CHECK_STATUS(la_sparse_attention(&p, &tq, &tkv, &ti, &to, &l2, ctx), LA_ERR_SHAPE);
    la_tensor k3; /* 5 kv heads > 4 query heads */
    int64_t k3ne[3] = {1, 5, 8};
    la_tensor_init(&k3, kv, LA_F32, LA_DEVICE_CPU, 3, k3ne);
    CHECK_STATUS(la_sparse_attention(&p, &tq, &k3, &ti, &to, &tl, ctx), LA_ERR_SHAPE);
    la_tensor k4 = tkv;
    k4.ndim = 4;
    k4.ne[2] = k4.ne[3] = 1;
    k4.nb[2] = k4.nb[3] = 1;
    CHECK_STATUS(la_sparse_attention(&p, &tq, &k4, &ti, &to, &tl, ctx), LA_ERR_SHAPE);
    la_tensor q3 = tq;
    q3.device = LA_DEVICE_CUDA;
    CHECK_MIXED_DEVICE(la_sparse_attention(&p, &q3, &tkv, &ti, &to, &tl, ctx));
    p.scale = NAN;
    CHECK_STATUS(la_sparse_attention(&p, &tq, &tkv, &ti, &to, &tl, ctx), LA_ERR_ARG);
    p.scale = 0.f;
    la_tensor o3 = to;
    o3.data = q; /* aliases q */
    CHECK_STATUS(la_sparse_attention(&p, &tq, &tkv, &ti, &o3, &tl, ctx), LA_ERR_ARG);
    CHECK_STATUS(la_sparse_attention(&p, &tq, &tkv, &ti, NULL, &tl, ctx), LA_ERR_ARG);
}

int main(void) {
    la_rng rng = la_test_rng("test_sparse_attn");
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, 2);
    const sa_case cases[] = {
        /* T, Hq, Hkv, Dqk, dv, L, K, invalid, dtype, strided, scale */
        {1, 1, 0, 1, 1, 1, 1, 0.0, LA_F32, 0, 0.f},
        {3, 4, 0, 16, 16, 63, 7, 0.3, LA_F32, 0, 0.f},
        {5, 16, 0, 576, 512, 1000, 300, 0.2, LA_F32, 0, 0.f}, /* the MLA shape, 3 chunks */
        {4, 4, 2, 63, 40, 129, 129, 0.1, LA_F32, 1, 0.f},     /* grouped, strided */
        {4, 5, 2, 64, 64, 65, 200, 0.5, LA_F32, 0, 0.f},      /* Hq not a multiple of Hkv */
        {3, 6, 3, 128, 100, 1000, 64, 0.0, LA_F64, 1, 0.3f},
        {3, 8, 0, 64, 32, 1000, 64, 0.1, LA_BF16, 0, 0.f},
        {2, 2, 0, 16, 8, 63, 1, 1.0, LA_F32, 0, 0.f},         /* every index invalid */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&rng, &cases[i], ctx);
    la_context_set_threads(ctx, 1);
    run_case(&rng, &cases[3], ctx);
    bad_inputs(ctx);
    la_context_destroy(ctx);
    return la_test_finish();
}
