/* Sparse attention backward (TRAINING.md §1) on the CPU against a float64
 * reference (itself checked by central differences): MQA [L,Dqk] and
 * [L,Hkv,Dqk] latents, dv < Dqk, skipped (-1, >= L) and repeated indices,
 * rows without a valid key, keys picked by many queries, odd sizes, f64,
 * poisoned / NULL gradients, bit-identical repeats and bad input. */
#include "test_util.h"

#include "core/internal.h"
#include "backward_util.h"

typedef struct sp_dims {
    int64_t T, Hq, Hkv, Dqk, dv, L, K;
    int kv3;
    double scale;
} sp_dims;

static int64_t grp(const sp_dims *m, int64_t h) { return h * m->Hkv / m->Hq; }

/* Loss Σ dO∘O; with dq != NULL also the gradients (dkv summed). */
static double ref(const sp_dims *m, const double *q, const double *kv, const int32_t *idx,
                  const double *dO, double *dq, double *dkv) {
    double *P = malloc(m->K * 8), *dP = malloc(m->K * 8), loss = 0;
    const int64_t nkv = m->L * m->Hkv * m->Dqk;
    if (dkv) memset(dkv, 0, nkv * 8);
    for (int64_t t = 0; t < m->T; t++)
        for (int64_t h = 0; h < m->Hq; h++) {
            const int64_t g = grp(m, h);
            const double *qr = q + (t * m->Hq + h) * m->Dqk, *gr = dO + (t * m->Hq + h) * m->dv;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < m->K; j++) {
                const int32_t s = idx[t * m->K + j];
                P[j] = -INFINITY;
                if (s < 0 || s >= m->L) continue;
                const double *kr = kv + (s * m->Hkv + g) * m->Dqk;
                double dot = 0;
                for (int64_t d = 0; d < m->Dqk; d++) dot += qr[d] * kr[d];
                P[j] = m->scale * dot;
                if (P[j] > mx) mx = P[j];
            }
            if (dq) memset(dq + (t * m->Hq + h) * m->Dqk, 0, m->Dqk * 8);
            if (mx == -INFINITY) continue;
            for (int64_t j = 0; j < m->K; j++) sum += (P[j] = exp(P[j] - mx));
            double delta = 0;
            for (int64_t j = 0; j < m->K; j++) {
                P[j] /= sum;
                const int32_t s = idx[t * m->K + j];
                dP[j] = 0;
                if (s < 0 || s >= m->L) continue;
                const double *kr = kv + (s * m->Hkv + g) * m->Dqk;
                for (int64_t e = 0; e < m->dv; e++) {
                    loss += P[j] * kr[e] * gr[e];
                    dP[j] += gr[e] * kr[e];
                }
                delta += P[j] * dP[j];
            }
            if (!dq) continue;
            for (int64_t j = 0; j < m->K; j++) {
                const int32_t s = idx[t * m->K + j];
                if (s < 0 || s >= m->L) continue;
                const double ds = P[j] * (dP[j] - delta) * m->scale;
                const double *kr = kv + (s * m->Hkv + g) * m->Dqk;
                double *dkr = dkv + (s * m->Hkv + g) * m->Dqk;
                for (int64_t d = 0; d < m->Dqk; d++) {
                    dq[(t * m->Hq + h) * m->Dqk + d] += ds * kr[d];
                    dkr[d] += ds * qr[d];
                }
                for (int64_t e = 0; e < m->dv; e++) dkr[e] += P[j] * gr[e];
            }
        }
    free(P), free(dP);
    return loss;
}

static void fill_idx(la_rng *rng, const sp_dims *m, int32_t *idx) {
    for (int64_t t = 0; t < m->T; t++)
        for (int64_t j = 0; j < m->K; j++) {
            const double u = la_rng_uniform(rng);
            int32_t s = (int32_t)(la_rng_uniform(rng) * m->L);
            if (u < 0.08) s = -1;
            else if (u < 0.12) s = (int32_t)(m->L + 3);
            else if (u < 0.2 && j > 0) s = idx[t * m->K + j - 1]; /* repeated */
            else if (u < 0.3) s = 0;                               /* a popular key */
            idx[t * m->K + j] = s;
        }
    if (m->T > 2)
        for (int64_t j = 0; j < m->K; j++) idx[1 * m->K + j] = -1; /* a row with no valid key */
}

static void test_reference_fd(la_rng *rng) {
    sp_dims m = {3, 4, 2, 5, 3, 6, 5, 1, 0.45};
    const int64_t nq = m.T * m.Hq * m.Dqk, nk = m.L * m.Hkv * m.Dqk, no = m.T * m.Hq * m.dv;
    double *q = malloc(nq * 8), *kv = malloc(nk * 8), *dO = malloc(no * 8);
    double *dq = malloc(nq * 8), *dkv = malloc(nk * 8), *fq = malloc(nq * 8), *fk = malloc(nk * 8);
    int32_t *idx = malloc(m.T * m.K * 4);
    for (int64_t i = 0; i < nq; i++) q[i] = la_rng_normal(rng);
    for (int64_t i = 0; i < nk; i++) kv[i] = la_rng_normal(rng);
    for (int64_t i = 0; i < no; i++) dO[i] = la_rng_normal(rng);
    fill_idx(rng, &m, idx);
    ref(&m, q, kv, idx, dO, dq, dkv);
    double *xs[2] = {q, kv}, *fs[2] = {fq, fk};
    const int64_t ns[2] = {nq, nk};
    for (int a = 0; a < 2; a++)
        for (int64_t i = 0; i < ns[a]; i++) {
            const double keep = xs[a][i], hs = 1e-5;
            xs[a][i] = keep + hs;
            const double lp = ref(&m, q, kv, idx, dO, NULL, NULL);
            xs[a][i] = keep - hs;
            const double lm = ref(&m, q, kv, idx, dO, NULL, NULL);
            xs[a][i] = keep;
            fs[a][i] = (lp - lm) / (2 * hs);
        }
    const double eq = frob_rel_err_d(dq, fq, nq), ek = frob_rel_err_d(dkv, fk, nk);
    CHECK(eq < 1e-7 && ek < 1e-7, "sparse reference vs central differences: dq %.3g dkv %.3g", eq, ek);
    free(q), free(kv), free(dO), free(dq), free(dkv), free(fq), free(fk), free(idx);
}

typedef struct sp_case {
    sp_dims m;
    la_dtype dt;
    int threads;
} sp_case;

static void run_case(la_rng *rng, sp_case c) {
    const sp_dims m = c.m;
    const int64_t nq = m.T * m.Hq * m.Dqk, nk = m.L * m.Hkv * m.Dqk, no = m.T * m.Hq * m.dv;
    float *q = malloc(nq * 4), *kv = malloc(nk * 4), *g = malloc(no * 4);
    int32_t *ix = malloc(m.T * m.K * 4);
    la_fill_normal(rng, q, nq, 1.0);
    la_fill_normal(rng, kv, nk, 1.0);
    la_fill_normal(rng, g, no, 1.0);
    fill_idx(rng, &m, ix);
    const int64_t eq[3] = {m.T, m.Hq, m.Dqk}, ek3[3] = {m.L, m.Hkv, m.Dqk}, ek2[2] = {m.L, m.Dqk};
    const int64_t eo[3] = {m.T, m.Hq, m.dv}, el[2] = {m.T, m.Hq}, ei[2] = {m.T, m.K};
    hview Q = make_view(q, 3, eq, c.dt, L_CONTIG), G = make_view(g, 3, eo, c.dt, L_CONTIG);
    hview O = make_view(NULL, 3, eo, c.dt, L_CONTIG), dQ = make_view(NULL, 3, eq, c.dt, L_CONTIG);
    hview KV, dKV, dKV2, dQ2 = make_view(NULL, 3, eq, c.dt, L_CONTIG);
    if (m.kv3) {
        KV = make_view(kv, 3, ek3, c.dt, L_CONTIG);
        dKV = make_view(NULL, 3, ek3, c.dt, L_CONTIG), dKV2 = make_view(NULL, 3, ek3, c.dt, L_CONTIG);
    } else { /* rank 2: a [L,1,Dqk] buffer viewed as [L,Dqk] */
        KV = make_view(kv, 3, ek3, c.dt, L_CONTIG);
        dKV = make_view(NULL, 3, ek3, c.dt, L_CONTIG), dKV2 = make_view(NULL, 3, ek3, c.dt, L_CONTIG);
        hview *vs[3] = {&KV, &dKV, &dKV2};
        for (int i = 0; i < 3; i++) la_tensor_init(&vs[i]->t, vs[i]->buf, c.dt, LA_DEVICE_CPU, 2, ek2);
    }
    float *lsb = malloc(m.T * m.Hq * 4);
    la_tensor Ls, I;
    la_tensor_init(&Ls, lsb, LA_F32, LA_DEVICE_CPU, 2, el);
    la_tensor_init(&I, ix, LA_I32, LA_DEVICE_CPU, 2, ei);
    read_view(&Q, q), read_view(&G, g);
    for (int64_t i = 0; i < nk; i++) kv[i] = la_load_f32(&KV.t, i);
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, c.threads);
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    p.dv = m.dv, p.scale = (float)m.scale;
    CHECK_OK(la_sparse_attention(&p, &Q.t, &KV.t, &I, &O.t, &Ls, ctx));
    CHECK_OK(la_sparse_attention_backward(&p, &Q.t, &KV.t, &I, &O.t, &Ls, &G.t, &dQ.t, &dKV.t, ctx));
    double *qd = malloc(nq * 8), *kd = malloc(nk * 8), *gd = malloc(no * 8), *rq = malloc(nq * 8), *rk = malloc(nk * 8);
    for (int64_t i = 0; i < nq; i++) qd[i] = q[i];
    for (int64_t i = 0; i < nk; i++) kd[i] = kv[i];
    for (int64_t i = 0; i < no; i++) gd[i] = g[i];
    ref(&m, qd, kd, ix, gd, rq, rk);
    float *a = malloc((nq > nk ? nq : nk) * 4);
    read_view(&dQ, a);
    const double e1 = frob_rel_err(a, rq, nq);
    for (int64_t i = 0; i < nk; i++) a[i] = la_load_f32(&dKV.t, i);
    const double e2 = frob_rel_err(a, rk, nk);
    CHECK(e1 <= 1e-4 && e2 <= 1e-4, "sparse bwd T%lld Hq%lld Hkv%lld Dqk%lld dv%lld L%lld K%lld kv3=%d %s %s: dq %.3g dkv %.3g",
          (long long)m.T, (long long)m.Hq, (long long)m.Hkv, (long long)m.Dqk, (long long)m.dv,
          (long long)m.L, (long long)m.K, m.kv3, la_dtype_name(c.dt), layout_name[L_CONTIG], e1, e2);
    CHECK_OK(la_sparse_attention_backward(&p, &Q.t, &KV.t, &I, &O.t, &Ls, &G.t, &dQ2.t, NULL, ctx));
    CHECK_OK(la_sparse_attention_backward(&p, &Q.t, &KV.t, &I, &O.t, &Ls, &G.t, NULL, &dKV2.t, ctx));
    CHECK(views_identical(&dQ, &dQ2) && memcmp(dKV.buf, dKV2.buf, (size_t)nk * la_dtype_size(c.dt)) == 0,
          "sparse bwd: repeated / partial calls are not bit-identical");
    la_context_destroy(ctx);
    free(q), free(kv), free(g), free(ix), free(lsb), free(qd), free(kd), free(gd), free(rq), free(rk), free(a);
    hview *all[8] = {&Q, &G, &O, &dQ, &KV, &dKV, &dKV2, &dQ2};
    for (int i = 0; i < 8; i++) free(all[i]->buf);
}

static sp_case mk(int64_t T, int64_t Hq, int64_t Hkv, int64_t Dqk, int64_t dv, int64_t L, int64_t K) {
    sp_case c = {{T, Hq, Hkv, Dqk, dv, L, K, Hkv > 1, 1.0 / sqrt((double)Dqk)}, LA_F32, 2};
    return c;
}

static void test_bad_input(void) {
    const int64_t eq[3] = {4, 2, 8}, ek[2] = {10, 8}, eo[3] = {4, 2, 6}, el[2] = {4, 2}, ei[2] = {4, 3};
    const int64_t bad[3] = {4, 2, 5};
    float *z = calloc(400, 4);
    int32_t ix[12] = {0};
    hview dQ = make_view(NULL, 3, eq, LA_F32, L_CONTIG), dQb = make_view(NULL, 3, eq, LA_F64, L_CONTIG);
    la_tensor Q, KV, O, Ls, I, G, Gb;
    la_tensor_init(&Q, z, LA_F32, LA_DEVICE_CPU, 3, eq);
    la_tensor_init(&KV, z + 64, LA_F32, LA_DEVICE_CPU, 2, ek);
    la_tensor_init(&O, z + 160, LA_F32, LA_DEVICE_CPU, 3, eo);
    la_tensor_init(&Ls, z + 210, LA_F32, LA_DEVICE_CPU, 2, el);
    la_tensor_init(&G, z + 220, LA_F32, LA_DEVICE_CPU, 3, eo);
    la_tensor_init(&Gb, z + 220, LA_F32, LA_DEVICE_CPU, 3, bad);
    la_tensor_init(&I, ix, LA_I32, LA_DEVICE_CPU, 2, ei);
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    p.dv = 6;
    CHECK_STATUS(la_sparse_attention_backward(&p, &Q, &KV, &I, &O, NULL, &G, &dQ.t, NULL, NULL), LA_ERR_ARG);
    CHECK_STATUS(la_sparse_attention_backward(&p, &Q, &KV, &I, &O, &Ls, &Gb, &dQ.t, NULL, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "d_out") != NULL, "message names d_out: %s", la_last_error());
    CHECK_STATUS(la_sparse_attention_backward(&p, &Q, &KV, &I, &O, &Ls, &G, &dQb.t, NULL, NULL), LA_ERR_DTYPE);
    CHECK_STATUS(la_sparse_attention_backward(&p, &Q, &KV, &I, &O, &Ls, &G, &dQ.t, &dQ.t, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "dkv") != NULL, "message names dkv: %s", la_last_error());
    CHECK(view_untouched(&dQ, view_storage(&dQ)), "a rejected sparse backward wrote a gradient");
    free(z), free(dQ.buf), free(dQb.buf);
}

int main(void) {
    la_rng rng = la_test_rng("test_backward_sparse");
    test_reference_fd(&rng);
    const int64_t Ts[4] = {1, 63, 65, 300};
    for (int i = 0; i < 4; i++) {
        run_case(&rng, mk(Ts[i], 4, 1, 64, 48, 200, 33));
        run_case(&rng, mk(Ts[i], 6, 2, 63, 17, 90, 130));
    }
    run_case(&rng, mk(40, 3, 3, 16, 16, 1000, 200));
    run_case(&rng, mk(20, 8, 1, 128, 100, 50, 300)); /* K > L: many repeats */
    sp_case c = mk(30, 4, 2, 32, 20, 80, 40);
    c.dt = LA_F64, c.threads = 1;
    run_case(&rng, c);
    test_bad_input();
    return la_test_finish();
}
