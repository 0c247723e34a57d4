/* Softmax attention (SPEC §1) on the CPU against a plain float64 reference:
 * odd sizes, GQA, Nq != Nk (causal bottom-right), strided views, bf16/f64,
 * NaN-poisoned outputs, NaN/Inf inputs, and bad input. */
#include "test_util.h"

#include "core/internal.h"
#include "cpu/softmax_cpu.h"

/* ---- views over host buffers ------------------------------------------- */
#include "dense_views.h"

/* ---- float64 reference --------------------------------------------------- */
static void ref_softmax(int causal, double scale, int64_t B, int64_t Nq, int64_t Nk, int64_t H,
                        int64_t Hk, int64_t D, int64_t Dv, const float *q, const float *k,
                        const float *v, double *o, double *lse, double *o_mag, double *lse_mag) {
    double *s = malloc((size_t)Nk * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < Nq; i++)
            for (int64_t h = 0; h < H; h++) {
                const int64_t hk = h / (H / Hk);
                const int64_t last = causal ? i + Nk - Nq : Nk - 1; /* last visible key */
                double *orow = o + ((b * Nq + i) * H + h) * Dv;
                double *omag = o_mag + ((b * Nq + i) * H + h) * Dv;
                const float *qr = q + ((b * Nq + i) * H + h) * D;
                for (int64_t e = 0; e < Dv; e++) orow[e] = omag[e] = 0;
                lse_mag[(b * Nq + i) * H + h] = 0;
                if (last < 0) {
                    lse[(b * Nq + i) * H + h] = -INFINITY;
                    continue;
                }
                int64_t nvis = last + 1 < Nk ? last + 1 : Nk;
                double m = -INFINITY, smag = 0;
                for (int64_t j = 0; j < nvis; j++) {
                    const float *kr = k + ((b * Nk + j) * Hk + hk) * D;
                    double dot = 0, mag = 0;
                    for (int64_t d = 0; d < D; d++) {
                        dot += (double)qr[d] * kr[d];
                        mag += fabs((double)qr[d] * kr[d]);
                    }
                    s[j] = scale * dot;
                    if (s[j] > m) m = s[j];
                    if (fabs(scale) * mag > smag) smag = fabs(scale) * mag;
                }
                double sum = 0;
                for (int64_t j = 0; j < nvis; j++) {
                    s[j] = exp(s[j] - m);
                    sum += s[j];
                }
                for (int64_t j = 0; j < nvis; j++) {
                    const float *vr = v + ((b * Nk + j) * Hk + hk) * Dv;
                    for (int64_t e = 0; e < Dv; e++) {
                        orow[e] += s[j] / sum * vr[e];
                        omag[e] += s[j] / sum * fabs(vr[e]);
                    }
                }
                lse[(b * Nq + i) * H + h] = m + log(sum);
                /* scores are fp32 dot products: accurate to ~eps·scale·Σ|q_d k_d| */
                lse_mag[(b * Nq + i) * H + h] = fmax(fabs(lse[(b * Nq + i) * H + h]), smag);
            }
    free(s);
}

/* max|a − ref| / max(mag), where mag is the magnitude of the terms behind
 * each reference value (the same sums over |terms|; = |ref| when nothing
 * cancels): fp32 sums are accurate to about eps·Σ|terms|, so this is the
 * meaningful relative error. −inf in the reference must match exactly. */
static double rel_err_inf(const float *a, const double *ref, const double *mag, int64_t n) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isinf(ref[i])) {
            if (!(isinf(a[i]) && (a[i] < 0) == (ref[i] < 0))) return INFINITY;
            continue;
        }
        if (!isfinite(a[i])) return INFINITY;
        double d = fabs((double)a[i] - ref[i]);
        if (d > md) md = d;
        if (mag[i] > mr) mr = mag[i];
    }
    return md / (mr > 1e-30 ? mr : 1e-30);
}

typedef struct sm_case {
    int64_t B, Nq, Nk, H, Hk, D, Dv;
    int causal;
    float scale; /* 0 = default */
    la_dtype dt;
    int layout;
    int threads;
    int with_lse;
} sm_case;

static void run_case(la_rng *rng, sm_case c) {
    const int64_t nq = c.B * c.Nq * c.H * c.D, nk = c.B * c.Nk * c.Hk * c.D;
    const int64_t nv = c.B * c.Nk * c.Hk * c.Dv, no = c.B * c.Nq * c.H * c.Dv, nl = c.B * c.Nq * c.H;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4);
    la_fill_normal(rng, q, nq, 1.0);
    la_fill_normal(rng, k, nk, 1.0);
    la_fill_normal(rng, v, nv, 1.0);
    const int64_t neq[4] = {c.B, c.Nq, c.H, c.D}, nek[4] = {c.B, c.Nk, c.Hk, c.D};
    const int64_t nev[4] = {c.B, c.Nk, c.Hk, c.Dv}, neo[4] = {c.B, c.Nq, c.H, c.Dv};
    const int64_t nel[3] = {c.B, c.Nq, c.H};
    hview Q = make_view(q, 4, neq, c.dt, c.layout), K = make_view(k, 4, nek, c.dt, c.layout);
    hview V = make_view(v, 4, nev, c.dt, c.layout), O = make_view(NULL, 4, neo, c.dt, c.layout);
    hview L = make_view(NULL, 3, nel, c.dt, L_CONTIG);
    /* the reference sees exactly the stored (possibly rounded) inputs */
    read_view(&Q, q);
    read_view(&K, k);
    read_view(&V, v);

    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, c.threads);
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = c.causal;
    p.scale = c.scale;
    CHECK_OK(la_softmax_attention(&p, &Q.t, &K.t, &V.t, &O.t, c.with_lse ? &L.t : NULL, ctx));

    double *ro = malloc(no * 8), *rl = malloc(nl * 8), *rom = malloc(no * 8), *rlm = malloc(nl * 8);
    double scale = c.scale != 0.f ? c.scale : 1.0 / sqrt((double)c.D);
    ref_softmax(c.causal, scale, c.B, c.Nq, c.Nk, c.H, c.Hk, c.D, c.Dv, q, k, v, ro, rl, rom, rlm);
    float *go = malloc(no * 4), *gl = malloc(nl * 4);
    read_view(&O, go);
    read_view(&L, gl);
    const double tol = c.dt == LA_BF16 ? 1e-2 : 1e-5;
    double eo = rel_err_inf(go, ro, rom, no);
    CHECK(eo <= tol, "softmax B=%lld Nq=%lld Nk=%lld H=%lld Hk=%lld D=%lld Dv=%lld causal=%d %s %s: out rel err %.3g > %g",
          (long long)c.B, (long long)c.Nq, (long long)c.Nk, (long long)c.H, (long long)c.Hk, (long long)c.D,
          (long long)c.Dv, c.causal, la_dtype_name(c.dt), layout_name[c.layout], eo, tol);
    if (c.with_lse) {
        double el = rel_err_inf(gl, rl, rlm, nl);
        CHECK(el <= tol, "softmax Nq=%lld Nk=%lld D=%lld causal=%d %s: lse rel err %.3g > %g",
              (long long)c.Nq, (long long)c.Nk, (long long)c.D, c.causal, la_dtype_name(c.dt), el, tol);
    } else {
        int untouched = 1;
        for (int64_t i = 0; i < nl; i++) untouched &= isnan(gl[i]);
        CHECK(untouched, "lse written although not requested");
    }
    la_context_destroy(ctx);
    free(q); free(k); free(v); free(ro); free(rl); free(rom); free(rlm); free(go); free(gl);
    free(Q.buf); free(K.buf); free(V.buf); free(O.buf); free(L.buf);
}

static sm_case base_case(int64_t N, int64_t D, int64_t Dv) {
    sm_case c = {1, N, N, 1, 1, D, Dv, 0, 0.f, LA_F32, L_CONTIG, 2, 1};
    return c;
}

/* ---- the fast exp used by the kernel --------------------------------- */
static void test_expf(void) {
    double worst = 0;
    for (int i = 0; i <= 200000; i++) {
        float x = -90.f * (float)i / 200000.f;
        double want = exp((double)x), got = la_expf_nonpos(x);
        if (want > 1e-37) {
            double e = fabs(got - want) / want;
            if (e > worst) worst = e;
        }
    }
    CHECK(worst < 4e-7, "la_expf_nonpos: max rel err %.3g over [-87, 0]", worst);
    CHECK(la_expf_nonpos(0.f) == 1.f, "exp(0) must be exactly 1 (no rescale drift)");
    CHECK(la_expf_nonpos(-INFINITY) == 0.f, "exp(-inf) must be 0");
    CHECK(la_expf_nonpos(-1000.f) == 0.f, "exp(-1000) must be 0");
    CHECK(isnan(la_expf_nonpos(NAN)), "exp(NaN) must be NaN");
}

/* ---- NaN / Inf inputs ---------------------------------------------------- */
static void test_nonfinite(la_rng *rng) {
    const int64_t N = 300, D = 16;
    const int64_t ne[4] = {1, N, 2, D}, nel[3] = {1, N, 2};
    float *q = malloc(N * 2 * D * 4), *k = malloc(N * 2 * D * 4), *v = malloc(N * 2 * D * 4);
    la_fill_normal(rng, q, N * 2 * D, 1);
    la_fill_normal(rng, k, N * 2 * D, 1);
    la_fill_normal(rng, v, N * 2 * D, 1);
    q[(7 * 2 + 0) * D + 3] = NAN;   /* query row 7, head 0 */
    k[(200 * 2 + 1) * D + 0] = INFINITY; /* key 200, head 1 */
    hview Q = make_view(q, 4, ne, LA_F32, 0), K = make_view(k, 4, ne, LA_F32, 0);
    hview V = make_view(v, 4, ne, LA_F32, 0), O = make_view(NULL, 4, ne, LA_F32, 0);
    hview L = make_view(NULL, 3, nel, LA_F32, 0);
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = 1;
    CHECK_OK(la_softmax_attention(&p, &Q.t, &K.t, &V.t, &O.t, &L.t, NULL));
    const float *o = O.buf, *l = L.buf;
    CHECK(isnan(o[(7 * 2 + 0) * D]) && isnan(l[7 * 2 + 0]), "NaN in q row 7 must give NaN in that row");
    int finite_ok = 1;
    for (int64_t i = 0; i < N; i++)
        for (int h = 0; h < 2; h++) {
            if ((i == 7 && h == 0) || (h == 1 && i >= 200)) continue;
            for (int64_t d = 0; d < D; d++) finite_ok &= isfinite(o[(i * 2 + h) * D + d]);
        }
    CHECK(finite_ok, "rows not touched by the NaN/Inf must stay finite");
    /* Rows of head 1 that see the +inf key are NaN or ±inf, but no crash. */
    free(q); free(k); free(v);
    free(Q.buf); free(K.buf); free(V.buf); free(O.buf); free(L.buf);
}

/* ---- bad input ------------------------------------------------------------ */
static void test_bad_input(void) {
    static float buf[4096], obuf[4096], lbuf[256];
    la_tensor q, k, v, o, l, t;
    const int64_t ne[4] = {1, 8, 4, 16}, ne_l[3] = {1, 8, 4};
    la_tensor_init(&q, buf, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&k, buf + 512, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&v, buf + 1024, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&o, obuf, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&l, lbuf, LA_F32, LA_DEVICE_CPU, 3, ne_l);
    la_softmax_params p;
    CHECK_STATUS(la_softmax_params_init(NULL), LA_ERR_ARG);
    la_softmax_params_init(&p);
    CHECK_OK(la_softmax_attention(&p, &q, &k, &v, &o, &l, NULL));

    CHECK_STATUS(la_softmax_attention(NULL, &q, &k, &v, &o, &l, NULL), LA_ERR_ARG);
    CHECK_STATUS(la_softmax_attention(&p, NULL, &k, &v, &o, &l, NULL), LA_ERR_ARG);
    CHECK_STATUS(la_softmax_attention(&p, &q, NULL, &v, &o, &l, NULL), LA_ERR_ARG);
    CHECK_STATUS(la_softmax_attention(&p, &q, &k, &v, NULL, &l, NULL), LA_ERR_ARG);
    t = q; t.data = NULL;
    CHECK_STATUS(la_softmax_attention(&p, &t, &k, &v, &o, &l, NULL), LA_ERR_ARG);
    /* wrong rank */
    t = q; t.ndim = 3;
    CHECK_STATUS(la_softmax_attention(&p, &t, &k, &v, &o, &l, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "q") != NULL, "message names q: %s", la_last_error());
    /* D mismatch between q and k */
    const int64_t ne_k8[4] = {1, 8, 4, 8};
    la_tensor_init(&t, buf + 512, LA_F32, LA_DEVICE_CPU, 4, ne_k8);
    CHECK_STATUS(la_softmax_attention(&p, &q, &t, &v, &o, &l, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "k:") != NULL, "message names k: %s", la_last_error());
    /* v with a different number of keys */
    const int64_t ne_v7[4] = {1, 7, 4, 16};
    la_tensor_init(&t, buf + 1024, LA_F32, LA_DEVICE_CPU, 4, ne_v7);
    CHECK_STATUS(la_softmax_attention(&p, &q, &k, &t, &o, &l, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "v:") != NULL, "message names v: %s", la_last_error());
    /* batch mismatch */
    const int64_t ne_b2[4] = {2, 4, 4, 16};
    la_tensor_init(&t, buf + 512, LA_F32, LA_DEVICE_CPU, 4, ne_b2);
    CHECK_STATUS(la_softmax_attention(&p, &q, &t, &v, &o, &l, NULL), LA_ERR_SHAPE);
    /* GQA: 3 kv heads do not divide 4 */
    const int64_t ne_h3[4] = {1, 8, 3, 16};
    la_tensor k3, v3;
    la_tensor_init(&k3, buf + 512, LA_F32, LA_DEVICE_CPU, 4, ne_h3);
    la_tensor_init(&v3, buf + 1024, LA_F32, LA_DEVICE_CPU, 4, ne_h3);
    CHECK_STATUS(la_softmax_attention(&p, &q, &k3, &v3, &o, &l, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "GQA") != NULL, "message explains GQA: %s", la_last_error());
    /* out / lse with wrong extents */
    const int64_t ne_o[4] = {1, 8, 4, 15};
    la_tensor_init(&t, obuf, LA_F32, LA_DEVICE_CPU, 4, ne_o);
    CHECK_STATUS(la_softmax_attention(&p, &q, &k, &v, &t, &l, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "out") != NULL, "message names out: %s", la_last_error());
    const int64_t ne_l2[3] = {1, 8, 2};
    la_tensor_init(&t, lbuf, LA_F32, LA_DEVICE_CPU, 3, ne_l2);
    CHECK_STATUS(la_softmax_attention(&p, &q, &k, &v, &o, &t, NULL), LA_ERR_SHAPE);
    /* zero-size dims */
    const int64_t ne_z[4] = {1, 0, 4, 16};
    la_tensor_init(&t, buf, LA_F32, LA_DEVICE_CPU, 4, ne_z);
    CHECK_STATUS(la_softmax_attention(&p, &t, &k, &v, &o, &l, NULL), LA_ERR_SHAPE);
    const int64_t ne_d0[4] = {1, 8, 4, 0};
    la_tensor_init(&t, buf, LA_F32, LA_DEVICE_CPU, 4, ne_d0);
    CHECK_STATUS(la_softmax_attention(&p, &t, &k, &v, &o, &l, NULL), LA_ERR_SHAPE);
    /* huge sizes: element count / byte span overflow */
    t = q;
    t.ne[1] = (int64_t)1 << 40;
    t.ne[3] = (int64_t)1 << 30;
    t.nb[0] = 0; t.nb[1] = (int64_t)1 << 30; t.nb[2] = 0; t.nb[3] = 1;
    la_status s = la_softmax_attention(&p, &t, &k, &v, &o, &l, NULL);
    CHECK(s == LA_ERR_OVERFLOW || s == LA_ERR_SHAPE, "huge q -> %s", la_status_string(s));
    /* huge but addressable head dim: rejected before any allocation */
    t = q;
    t.ne[3] = (int64_t)1 << 24; t.nb[3] = 0;
    la_tensor k2 = k; k2.ne[3] = t.ne[3]; k2.nb[3] = 0;
    s = la_softmax_attention(&p, &t, &k2, &v, &o, &l, NULL);
    CHECK(s == LA_ERR_OVERFLOW || s == LA_ERR_SHAPE, "huge D -> %s", la_status_string(s));
    /* dtype */
    t = q; t.dtype = LA_I32;
    CHECK_STATUS(la_softmax_attention(&p, &t, &k, &v, &o, &l, NULL), LA_ERR_DTYPE);
    /* scale */
    p.scale = NAN;
    CHECK_STATUS(la_softmax_attention(&p, &q, &k, &v, &o, &l, NULL), LA_ERR_ARG);
    p.scale = INFINITY;
    CHECK_STATUS(la_softmax_attention(&p, &q, &k, &v, &o, &l, NULL), LA_ERR_ARG);
    la_softmax_params_init(&p);
    /* output overlapping an input */
    CHECK_STATUS(la_softmax_attention(&p, &q, &k, &v, &q, &l, NULL), LA_ERR_ARG);
    la_tensor_init(&t, buf + 8, LA_F32, LA_DEVICE_CPU, 3, ne_l);
    CHECK_STATUS(la_softmax_attention(&p, &q, &k, &v, &o, &t, NULL), LA_ERR_ARG);
    la_tensor_init(&t, obuf + 8, LA_F32, LA_DEVICE_CPU, 3, ne_l);
    CHECK_STATUS(la_softmax_attention(&p, &q, &k, &v, &o, &t, NULL), LA_ERR_ARG);
    /* devices */
    t = k; t.device = LA_DEVICE_CUDA;
    CHECK_STATUS(la_softmax_attention(&p, &q, &t, &v, &o, &l, NULL), LA_ERR_DEVICE);
    la_tensor cq = q, ck = k, cv = v, co = o;
    cq.device = ck.device = cv.device = co.device = LA_DEVICE_CUDA;
    CHECK_CUDA_REFUSED(la_softmax_attention(&p, &cq, &ck, &cv, &co, NULL, NULL));
    /* negative stride */
    t = q; t.nb[1] = -64; t.data = buf + 1000;
    CHECK_STATUS(la_softmax_attention(&p, &t, &k, &v, &o, &l, NULL), LA_ERR_SHAPE);
}

int main(void) {
    la_rng rng = la_test_rng("test_softmax");
    test_expf();

    /* odd sizes × head dims, causal and not, Dv != D for most */
    const int64_t Ns[4] = {1, 63, 65, 1000}, Ds[5] = {1, 16, 63, 64, 128};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 5; b++)
            for (int causal = 0; causal < 2; causal++) {
                int64_t D = Ds[b], Dv = (b % 2) ? D + 5 : (D > 16 ? D / 2 : D);
                sm_case c = base_case(Ns[a], D, Dv);
                c.causal = causal;
                if (Ns[a] == 1000 && D >= 63) c.threads = 2;
                run_case(&rng, c);
            }
    /* batch, heads, GQA, layouts, dtypes */
    for (int layout = 0; layout < 3; layout++)
        for (int causal = 0; causal < 2; causal++) {
            sm_case c = {2, 130, 130, 4, 2, 32, 24, causal, 0.f, LA_F32, layout, 2, 1};
            run_case(&rng, c);
            c.dt = LA_BF16;
            run_case(&rng, c);
            c.dt = LA_F64;
            c.H = 6;
            c.Hk = 1; /* MQA */
            run_case(&rng, c);
        }
    /* Nq != Nk, causal bottom-right (including rows that see no key) */
    const int64_t pairs[6][2] = {{63, 100}, {100, 63}, {1, 1000}, {1000, 1}, {129, 700}, {300, 257}};
    for (int i = 0; i < 6; i++)
        for (int causal = 0; causal < 2; causal++) {
            sm_case c = {2, pairs[i][0], pairs[i][1], 2, 2, 16, 20, causal, 0.f, LA_F32, L_BHND, 2, 1};
            run_case(&rng, c);
        }
    /* explicit scale, no lse, odd thread counts */
    {
        sm_case c = {1, 777, 777, 3, 3, 40, 8, 1, 0.3f, LA_F32, L_GAPS, 3, 0};
        run_case(&rng, c);
        c.threads = 1;
        c.with_lse = 1;
        c.scale = -0.2f;
        run_case(&rng, c);
    }
    test_nonfinite(&rng);
    test_bad_input();
    return la_test_finish();
}
