/* Softmax attention backward (TRAINING.md §1) on the CPU against a plain
 * float64 reference (itself spot-checked by central finite differences):
 * odd sizes, Dv != D, GQA, Nq != Nk (causal bottom-right), strided views,
 * f64 inputs, NaN-poisoned gradient buffers, NULL gradients, determinism and
 * bad input (nothing written on a rejected call). */
#include "test_util.h"

#include "core/internal.h"
#include "backward_util.h"

typedef struct sm_dims {
    int64_t B, Nq, Nk, H, Hk, D, Dv;
    int causal;
    double scale;
} sm_dims;

/* Forward in float64: o [B,Nq,H,Dv]; returns Σ dO∘O when dO is given. */
static double ref_fwd(const sm_dims *m, const double *q, const double *k, const double *v,
                      double *o, const double *dO) {
    double *s = malloc((size_t)m->Nk * 8), loss = 0;
    for (int64_t b = 0; b < m->B; b++)
        for (int64_t i = 0; i < m->Nq; i++)
            for (int64_t h = 0; h < m->H; h++) {
                const int64_t hk = h / (m->H / m->Hk);
                int64_t nvis = m->causal ? i + m->Nk - m->Nq + 1 : m->Nk;
                if (nvis > m->Nk) nvis = m->Nk;
                double *orow = o + ((b * m->Nq + i) * m->H + h) * m->Dv;
                for (int64_t e = 0; e < m->Dv; e++) orow[e] = 0;
                if (nvis <= 0) continue;
                const double *qr = q + ((b * m->Nq + i) * m->H + h) * m->D;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < nvis; j++) {
                    const double *kr = k + ((b * m->Nk + j) * m->Hk + hk) * m->D;
                    double dot = 0;
                    for (int64_t d = 0; d < m->D; d++) dot += qr[d] * kr[d];
                    s[j] = m->scale * dot;
                    if (s[j] > mx) mx = s[j];
                }
                for (int64_t j = 0; j < nvis; j++) sum += (s[j] = exp(s[j] - mx));
                for (int64_t j = 0; j < nvis; j++) {
                    const double *vr = v + ((b * m->Nk + j) * m->Hk + hk) * m->Dv;
                    for (int64_t e = 0; e < m->Dv; e++) orow[e] += s[j] / sum * vr[e];
                }
                if (dO)
                    for (int64_t e = 0; e < m->Dv; e++)
                        loss += orow[e] * dO[((b * m->Nq + i) * m->H + h) * m->Dv + e];
            }
    free(s);
    return loss;
}

/* Gradients in float64, row by row with the explicit probability row:
 * dv_j += P_j dO_i, dP_j = dO_i·v_j, dS_j = P_j (dP_j − Σ_j' P_j' dP_j'),
 * dq_i += scale Σ_j dS_j k_j, dk_j += scale dS_j q_i. */
static void ref_bwd(const sm_dims *m, const double *q, const double *k, const double *v,
                    const double *dO, double *dq, double *dk, double *dv) {
    double *P = malloc((size_t)m->Nk * 8), *dP = malloc((size_t)m->Nk * 8);
    memset(dq, 0, (size_t)(m->B * m->Nq * m->H * m->D) * 8);
    memset(dk, 0, (size_t)(m->B * m->Nk * m->Hk * m->D) * 8);
    memset(dv, 0, (size_t)(m->B * m->Nk * m->Hk * m->Dv) * 8);
    for (int64_t b = 0; b < m->B; b++)
        for (int64_t i = 0; i < m->Nq; i++)
            for (int64_t h = 0; h < m->H; h++) {
                const int64_t hk = h / (m->H / m->Hk);
                int64_t nvis = m->causal ? i + m->Nk - m->Nq + 1 : m->Nk;
                if (nvis > m->Nk) nvis = m->Nk;
                if (nvis <= 0) continue;
                const double *qr = q + ((b * m->Nq + i) * m->H + h) * m->D;
                const double *gr = dO + ((b * m->Nq + i) * m->H + h) * m->Dv;
                double mx = -INFINITY, sum = 0, pdp = 0;
                for (int64_t j = 0; j < nvis; j++) {
                    const double *kr = k + ((b * m->Nk + j) * m->Hk + hk) * m->D;
                    double dot = 0;
                    for (int64_t d = 0; d < m->D; d++) dot += qr[d] * kr[d];
                    P[j] = m->scale * dot;
                    if (P[j] > mx) mx = P[j];
                }
                for (int64_t j = 0; j < nvis; j++) sum += (P[j] = exp(P[j] - mx));
                for (int64_t j = 0; j < nvis; j++) {
                    P[j] /= sum;
                    const double *vr = v + ((b * m->Nk + j) * m->Hk + hk) * m->Dv;
                    double *dvr = dv + ((b * m->Nk + j) * m->Hk + hk) * m->Dv;
                    dP[j] = 0;
                    for (int64_t e = 0; e < m->Dv; e++) {
                        dP[j] += gr[e] * vr[e];
                        dvr[e] += P[j] * gr[e];
                    }
                    pdp += P[j] * dP[j];
                }
                double *dqr = dq + ((b * m->Nq + i) * m->H + h) * m->D;
                for (int64_t j = 0; j < nvis; j++) {
                    const double ds = P[j] * (dP[j] - pdp) * m->scale;
                    const double *kr = k + ((b * m->Nk + j) * m->Hk + hk) * m->D;
                    double *dkr = dk + ((b * m->Nk + j) * m->Hk + hk) * m->D;
                    for (int64_t d = 0; d < m->D; d++) {
                        dqr[d] += ds * kr[d];
                        dkr[d] += ds * qr[d];
                    }
                }
            }
    free(P);
    free(dP);
}

static double *to_d(const float *x, int64_t n) {
    double *r = malloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) r[i] = x[i];
    return r;
}

/* The reference gradients against central differences of the reference
 * forward's loss Σ dO∘O, on a few entries of q, k and v. */
static void test_reference_fd(la_rng *rng, int causal) {
    sm_dims m = {1, 5, 7, 4, 2, 6, 5, causal, 0.4};
    const int64_t nq = m.B * m.Nq * m.H * m.D, nk = m.B * m.Nk * m.Hk * m.D;
    const int64_t nv = m.B * m.Nk * m.Hk * m.Dv, no = m.B * m.Nq * m.H * m.Dv;
    double *x[3], *g[3], *fd[3], *dO = malloc(no * 8), *o = malloc(no * 8);
    const int64_t n[3] = {nq, nk, nv};
    for (int a = 0; a < 3; a++) {
        x[a] = malloc(n[a] * 8), g[a] = malloc(n[a] * 8), fd[a] = malloc(n[a] * 8);
        for (int64_t i = 0; i < n[a]; i++) x[a][i] = la_rng_normal(rng);
    }
    for (int64_t i = 0; i < no; i++) dO[i] = la_rng_normal(rng);
    ref_bwd(&m, x[0], x[1], x[2], dO, g[0], g[1], g[2]);
    const double hstep = 1e-5;
    for (int a = 0; a < 3; a++) {
        for (int64_t i = 0; i < n[a]; i++) {
            const double keep = x[a][i];
            x[a][i] = keep + hstep;
            double lp = ref_fwd(&m, x[0], x[1], x[2], o, dO);
            x[a][i] = keep - hstep;
            double lm = ref_fwd(&m, x[0], x[1], x[2], o, dO);
            x[a][i] = keep;
            fd[a][i] = (lp - lm) / (2 * hstep);
        }
        double e = frob_rel_err_d(g[a], fd[a], n[a]);
        CHECK(e < 1e-7, "softmax reference causal=%d: grad %d vs finite differences %.3g", causal, a, e);
    }
    for (int a = 0; a < 3; a++) free(x[a]), free(g[a]), free(fd[a]);
    free(dO);
    free(o);
}

typedef struct sm_case {
    sm_dims m;
    la_dtype dt;
    int layout, threads;
} sm_case;

static void run_case(la_rng *rng, sm_case c) {
    const sm_dims m = c.m;
    const int64_t nq = m.B * m.Nq * m.H * m.D, nk = m.B * m.Nk * m.Hk * m.D;
    const int64_t nv = m.B * m.Nk * m.Hk * m.Dv, no = m.B * m.Nq * m.H * m.Dv;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *g = malloc(no * 4);
    la_fill_normal(rng, q, nq, 1.0);
    la_fill_normal(rng, k, nk, 1.0);
    la_fill_normal(rng, v, nv, 1.0);
    la_fill_normal(rng, g, no, 1.0);
    const int64_t eq[4] = {m.B, m.Nq, m.H, m.D}, ek[4] = {m.B, m.Nk, m.Hk, m.D};
    const int64_t ev[4] = {m.B, m.Nk, m.Hk, m.Dv}, eo[4] = {m.B, m.Nq, m.H, m.Dv};
    const int64_t el[3] = {m.B, m.Nq, m.H};
    hview Q = make_view(q, 4, eq, c.dt, c.layout), K = make_view(k, 4, ek, c.dt, c.layout);
    hview V = make_view(v, 4, ev, c.dt, c.layout), G = make_view(g, 4, eo, c.dt, c.layout);
    hview O = make_view(NULL, 4, eo, c.dt, c.layout), L = make_view(NULL, 3, el, LA_F32, L_CONTIG);
    hview dQ = make_view(NULL, 4, eq, c.dt, c.layout), dK = make_view(NULL, 4, ek, c.dt, c.layout);
    hview dV = make_view(NULL, 4, ev, c.dt, c.layout);
    read_view(&Q, q), read_view(&K, k), read_view(&V, v), read_view(&G, g);
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, c.threads);
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = m.causal;
    p.scale = (float)m.scale;
    CHECK_OK(la_softmax_attention(&p, &Q.t, &K.t, &V.t, &O.t, &L.t, ctx));
    CHECK_OK(la_softmax_backward(&p, &Q.t, &K.t, &V.t, &O.t, &L.t, &G.t, &dQ.t, &dK.t, &dV.t, ctx));

    double *dq = to_d(q, nq), *dk = to_d(k, nk), *dv = to_d(v, nv);
    double *qd = to_d(q, nq), *kd = to_d(k, nk), *vd = to_d(v, nv), *gd = to_d(g, no);
    ref_bwd(&m, qd, kd, vd, gd, dq, dk, dv);
    float *a = malloc((nq > nk ? (nq > nv ? nq : nv) : (nk > nv ? nk : nv)) * 4);
    const hview *views[3] = {&dQ, &dK, &dV};
    double *refs[3] = {dq, dk, dv};
    const int64_t ns[3] = {nq, nk, nv};
    const char *nm[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        read_view(views[i], a);
        double e = frob_rel_err(a, refs[i], ns[i]);
        CHECK(e <= 1e-4, "softmax bwd B%lld Nq%lld Nk%lld H%lld Hk%lld D%lld Dv%lld causal=%d %s %s: %s rel err %.3g",
              (long long)m.B, (long long)m.Nq, (long long)m.Nk, (long long)m.H, (long long)m.Hk,
              (long long)m.D, (long long)m.Dv, m.causal, la_dtype_name(c.dt),
              layout_name[c.layout], nm[i], e);
    }
    /* Determinism, and NULL gradients skipped (dq alone equals the full call). */
    hview dQ2 = make_view(NULL, 4, eq, c.dt, c.layout), dK2 = make_view(NULL, 4, ek, c.dt, c.layout);
    hview dV2 = make_view(NULL, 4, ev, c.dt, c.layout);
    CHECK_OK(la_softmax_backward(&p, &Q.t, &K.t, &V.t, &O.t, &L.t, &G.t, &dQ2.t, NULL, NULL, ctx));
    CHECK_OK(la_softmax_backward(&p, &Q.t, &K.t, &V.t, &O.t, &L.t, &G.t, NULL, &dK2.t, &dV2.t, ctx));
    CHECK(views_identical(&dQ, &dQ2) && views_identical(&dK, &dK2) && views_identical(&dV, &dV2),
          "softmax bwd: repeated / partial calls are not bit-identical");
    la_context_destroy(ctx);
    free(q), free(k), free(v), free(g), free(a);
    free(dq), free(dk), free(dv), free(qd), free(kd), free(vd), free(gd);
    hview *all[12] = {&Q, &K, &V, &G, &O, &L, &dQ, &dK, &dV, &dQ2, &dK2, &dV2};
    for (int i = 0; i < 12; i++) free(all[i]->buf);
}

static sm_case mk(int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t Hk, int64_t D, int64_t Dv,
                  int causal) {
    sm_case c = {{B, Nq, Nk, H, Hk, D, Dv, causal, 1.0 / sqrt((double)D)}, LA_F32, L_CONTIG, 2};
    return c;
}

/* Bad input: each rejected call names the argument and writes nothing. */
static void test_bad_input(void) {
    const int64_t eq[4] = {1, 9, 2, 8}, eo[4] = {1, 9, 2, 6}, ev[4] = {1, 9, 2, 6};
    const int64_t el[3] = {1, 9, 2}, bad[4] = {1, 9, 2, 7};
    float *zq = calloc(200, 4);
    hview Q = make_view(zq, 4, eq, LA_F32, L_CONTIG), K = make_view(zq, 4, eq, LA_F32, L_CONTIG);
    hview V = make_view(zq, 4, ev, LA_F32, L_CONTIG), O = make_view(zq, 4, eo, LA_F32, L_CONTIG);
    hview G = make_view(zq, 4, eo, LA_F32, L_CONTIG), L = make_view(zq, 3, el, LA_F32, L_CONTIG);
    hview dQ = make_view(NULL, 4, eq, LA_F32, L_CONTIG), dK = make_view(NULL, 4, eq, LA_F32, L_CONTIG);
    hview dVbad = make_view(NULL, 4, bad, LA_F32, L_CONTIG), dV = make_view(NULL, 4, ev, LA_F32, L_CONTIG);
    hview dQ64 = make_view(NULL, 4, eq, LA_F64, L_CONTIG), Gbad = make_view(zq, 4, bad, LA_F32, L_CONTIG);
    la_softmax_params p;
    la_softmax_params_init(&p);
    const int64_t sq = view_storage(&dQ), sk = view_storage(&dK);
    CHECK_STATUS(la_softmax_backward(&p, &Q.t, &K.t, &V.t, &O.t, &L.t, &G.t, &dQ.t, &dK.t, &dVbad.t, NULL),
                 LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "dv") != NULL, "message names dv: %s", la_last_error());
    CHECK_STATUS(la_softmax_backward(&p, &Q.t, &K.t, &V.t, &O.t, &L.t, &G.t, &dQ64.t, &dK.t, &dV.t, NULL),
                 LA_ERR_DTYPE);
    CHECK(strstr(la_last_error(), "dq") != NULL, "message names dq: %s", la_last_error());
    CHECK_STATUS(la_softmax_backward(&p, &Q.t, &K.t, &V.t, &O.t, &L.t, &Gbad.t, &dQ.t, &dK.t, &dV.t, NULL),
                 LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "d_out") != NULL, "message names d_out: %s", la_last_error());
    CHECK_STATUS(la_softmax_backward(&p, &Q.t, &K.t, &V.t, &O.t, NULL, &G.t, &dQ.t, &dK.t, &dV.t, NULL),
                 LA_ERR_ARG);
    CHECK_STATUS(la_softmax_backward(&p, &Q.t, &K.t, &V.t, &O.t, &L.t, &G.t, &dQ.t, &Q.t, &dV.t, NULL),
                 LA_ERR_ARG); /* dk aliases q */
    CHECK_STATUS(la_softmax_backward(&p, &Q.t, &K.t, &V.t, &O.t, &L.t, &G.t, &dQ.t, &dQ.t, &dV.t, NULL),
                 LA_ERR_ARG); /* dk aliases dq */
    la_tensor dcuda = dK.t;
    dcuda.device = LA_DEVICE_CUDA;
    CHECK_STATUS(la_softmax_backward(&p, &Q.t, &K.t, &V.t, &O.t, &L.t, &G.t, &dQ.t, &dcuda, &dV.t, NULL),
                 LA_ERR_DEVICE);
    p.scale = NAN;
    CHECK_STATUS(la_softmax_backward(&p, &Q.t, &K.t, &V.t, &O.t, &L.t, &G.t, &dQ.t, &dK.t, &dV.t, NULL),
                 LA_ERR_ARG);
    CHECK(view_untouched(&dQ, sq) && view_untouched(&dK, sk) && view_untouched(&dV, view_storage(&dV)),
          "a rejected softmax backward wrote a gradient");
    hview *all[12] = {&Q, &K, &V, &O, &G, &L, &dQ, &dK, &dVbad, &dV, &dQ64, &Gbad};
    for (int i = 0; i < 12; i++) free(all[i]->buf);
    free(zq);
}

int main(void) {
    la_rng rng = la_test_rng("test_backward_softmax");
    test_reference_fd(&rng, 0);
    test_reference_fd(&rng, 1);
    const int64_t Ns[4] = {1, 63, 65, 1000};
    const int64_t Ds[5][2] = {{16, 24}, {32, 32}, {63, 17}, {64, 48}, {128, 128}};
    for (int ni = 0; ni < 4; ni++)
        for (int di = 0; di < 5; di++) {
            if (Ns[ni] == 1000 && di != 2 && di != 4) continue;
            for (int causal = 0; causal < 2; causal++) {
                sm_case c = mk(1, Ns[ni], Ns[ni], 2, 1, Ds[di][0], Ds[di][1], causal);
                run_case(&rng, c);
            }
        }
    /* Nq != Nk both ways, GQA, batches, layouts, dtypes, threads. */
    for (int causal = 0; causal < 2; causal++) {
        run_case(&rng, mk(2, 37, 300, 4, 2, 32, 20, causal));
        run_case(&rng, mk(1, 300, 37, 3, 1, 16, 24, causal));
        run_case(&rng, mk(2, 129, 257, 6, 3, 64, 64, causal));
        for (int layout = 1; layout < 3; layout++) {
            sm_case c = mk(2, 65, 130, 4, 2, 63, 31, causal);
            c.layout = layout;
            run_case(&rng, c);
        }
        sm_case c = mk(1, 70, 90, 2, 2, 16, 8, causal);
        c.dt = LA_F64;
        run_case(&rng, c);
        c.threads = 1;
        run_case(&rng, c);
        c = mk(1, 200, 200, 2, 1, 32, 32, causal);
        c.m.scale = 0.9; /* peaked rows */
        run_case(&rng, c);
        /* 2 (batch, kv head) pairs, 9 key tiles: one pass with 4 key segments
         * (1 thread) and with 8 (2 threads, 3 of them empty), two passes with
         * 4 threads */
        for (int th = 1; th <= 4; th *= 2) {
            c = mk(1, 150, 1100, 4, 2, 32, 32, causal);
            c.threads = th;
            run_case(&rng, c);
        }
    }
    test_bad_input();
    return la_test_finish();
}
