/* Linear attention (SPEC §3) on the CPU against plain float64 references:
 * the non-causal sums and the token-by-token causal recurrence, every feature
 * map, normalize on/off, odd sizes, chunk sizes, strided views, bf16/f64,
 * recurrent state in/out (split == one pass, aliasing), NaN inputs and bad
 * input. */
#include "test_util.h"

#include "core/internal.h"
/* ---- views over host buffers ------------------------------------------- */
#include "dense_views.h"

/* ---- float64 references ---------------------------------------------------- */
/* q,k [B,N,H,D], v [B,N,H,Dv] logical f32 values; S0 [B,H,D,Dv], z0 [B,H,D]
 * (NULL = zero). Non-causal: sums over all tokens; causal: the token-by-token
 * recurrence S_t = S_{t-1} + k̃_t v_tᵀ. Final state into Sf, zf (if non-NULL). */
static void ref_linear(const la_linear_params *p, int64_t B, int64_t N, int64_t H, int64_t D,
                       int64_t Dv, const float *q, const float *k, const float *v,
                       const float *S0, const float *z0, double *o, double *o_abs, double *Sf,
                       double *Sf_abs, double *zf) {
    double *S = malloc((size_t)(D * Dv) * 8), *z = malloc((size_t)D * 8), *qt = malloc((size_t)D * 8);
    double *Sa = malloc((size_t)(D * Dv) * 8); /* Σ|k̃||v|: the magnitude being summed */
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            for (int64_t d = 0; d < D; d++) {
                z[d] = z0 ? z0[(b * H + h) * D + d] : 0;
                for (int64_t e = 0; e < Dv; e++) {
                    S[d * Dv + e] = S0 ? S0[((b * H + h) * D + d) * Dv + e] : 0;
                    Sa[d * Dv + e] = fabs(S[d * Dv + e]);
                }
            }
            for (int pass = 0; pass < 2; pass++) {
                if (pass == 0 && p->causal) continue;
                for (int64_t t = 0; t < N; t++) {
                    const float *kr = k + ((b * N + t) * H + h) * D, *vr = v + ((b * N + t) * H + h) * Dv;
                    const float *qr = q + ((b * N + t) * H + h) * D;
                    if (pass == 0 || p->causal)
                        for (int64_t d = 0; d < D; d++) {
                            double kd = la_ref_feature(p->feature, kr[d]);
                            z[d] += kd;
                            for (int64_t e = 0; e < Dv; e++) {
                                S[d * Dv + e] += kd * vr[e];
                                Sa[d * Dv + e] += fabs(kd * vr[e]);
                            }
                        }
                    if (pass == 1) {
                        double den = 0;
                        for (int64_t d = 0; d < D; d++) {
                            qt[d] = p->scale_q * la_ref_feature(p->feature, qr[d]);
                            den += qt[d] * z[d];
                        }
                        double *orow = o + ((b * N + t) * H + h) * Dv;
                        double *arow = o_abs + ((b * N + t) * H + h) * Dv;
                        for (int64_t e = 0; e < Dv; e++) {
                            double num = 0, mag = 0;
                            for (int64_t d = 0; d < D; d++) {
                                num += qt[d] * S[d * Dv + e];
                                mag += fabs(qt[d]) * Sa[d * Dv + e];
                            }
                            orow[e] = p->normalize ? num / (den + p->eps) : num;
                            arow[e] = p->normalize ? mag / fabs(den + p->eps) : mag;
                        }
                    }
                }
            }
            if (Sf)
                for (int64_t x = 0; x < D * Dv; x++) {
                    Sf[(b * H + h) * D * Dv + x] = S[x];
                    Sf_abs[(b * H + h) * D * Dv + x] = Sa[x];
                }
            if (zf)
                for (int64_t d = 0; d < D; d++) zf[(b * H + h) * D + d] = z[d];
        }
    free(S); free(z); free(qt); free(Sa);
}

/* Error of a sum-like result relative to the magnitude of what was summed:
 * max|a − ref| / max(mag) (mag = the same formula over |terms|; equal to
 * max|ref| when nothing cancels). An fp32 sum of N terms is only accurate to
 * about eps·Σ|terms|, so measuring against |ref| alone would fail correct
 * code whenever the terms cancel. NaN in a (unwritten output) gives inf. */
static double sum_rel_err(const float *a, const double *ref, const double *mag, int64_t n) {
    double md = 0, mm = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) && !isnan(ref[i])) return INFINITY;
        double d = fabs((double)a[i] - ref[i]);
        if (d > md) md = d;
        if (mag[i] > mm) mm = mag[i];
    }
    return md / (mm > 1e-30 ? mm : 1e-30);
}

typedef struct lin_case {
    int64_t B, N, H, D, Dv;
    la_feature feature;
    int causal, normalize;
    int64_t chunk;
    float scale_q;
    la_dtype dt;
    int layout;
    int threads;
    int with_state; /* causal: random input state, check the output state */
} lin_case;

static const char *case_str(const lin_case *c, char *buf, size_t n) {
    snprintf(buf, n, "B=%lld N=%lld H=%lld D=%lld Dv=%lld %s causal=%d norm=%d chunk=%lld %s %s thr=%d state=%d",
             (long long)c->B, (long long)c->N, (long long)c->H, (long long)c->D, (long long)c->Dv,
             la_feature_name(c->feature), c->causal, c->normalize, (long long)c->chunk,
             la_dtype_name(c->dt), layout_name[c->layout], c->threads, c->with_state);
    return buf;
}

/* Inputs: normal; with the identity map and normalization, positive values so
 * that the denominator has no cancellation (else the problem is
 * ill-conditioned and no tolerance means anything). */
static void fill_inputs(la_rng *rng, const lin_case *c, float *x, int64_t n) {
    la_fill_normal(rng, x, n, 1.0);
    if (c->feature == LA_FEATURE_IDENTITY && c->normalize)
        for (int64_t i = 0; i < n; i++) x[i] = fabsf(x[i]) + 0.1f;
}

static void run_case(la_rng *rng, lin_case c) {
    char cs[256];
    const int64_t nqk = c.B * c.N * c.H * c.D, nv = c.B * c.N * c.H * c.Dv;
    const int64_t nS = c.B * c.H * c.D * c.Dv, nz = c.B * c.H * c.D;
    float *q = malloc(nqk * 4), *k = malloc(nqk * 4), *v = malloc(nv * 4);
    float *S0 = malloc(nS * 4), *z0 = malloc(nz * 4);
    fill_inputs(rng, &c, q, nqk);
    fill_inputs(rng, &c, k, nqk);
    la_fill_normal(rng, v, nv, 1.0);
    /* a plausible state: S from a few random tokens, z positive */
    la_fill_normal(rng, S0, nS, 3.0);
    for (int64_t i = 0; i < nz; i++) z0[i] = (float)(5.0 + 5.0 * la_rng_uniform(rng));
    const int64_t neq[4] = {c.B, c.N, c.H, c.D}, nev[4] = {c.B, c.N, c.H, c.Dv};
    hview Q = make_view(q, 4, neq, c.dt, c.layout), K = make_view(k, 4, neq, c.dt, c.layout);
    hview V = make_view(v, 4, nev, c.dt, c.layout), O = make_view(NULL, 4, nev, c.dt, c.layout);
    read_view(&Q, q);
    read_view(&K, k);
    read_view(&V, v);
    const int64_t neS[4] = {c.B, c.H, c.D, c.Dv}, nez[3] = {c.B, c.H, c.D};
    hview Si = make_view(S0, 4, neS, LA_F32, L_CONTIG), zi = make_view(z0, 3, nez, LA_F32, L_CONTIG);
    hview So = make_view(NULL, 4, neS, LA_F32, L_BHND), zo = make_view(NULL, 3, nez, LA_F32, L_CONTIG);

    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, c.threads);
    la_linear_params p;
    la_linear_params_init(&p);
    p.feature = c.feature;
    p.causal = c.causal;
    p.normalize = c.normalize;
    p.chunk = c.chunk;
    p.scale_q = c.scale_q;
    CHECK_OK(la_linear_attention(&p, &Q.t, &K.t, &V.t, &O.t, c.with_state ? &Si.t : NULL,
                                 c.with_state ? &zi.t : NULL, c.causal ? &So.t : NULL,
                                 c.causal ? &zo.t : NULL, ctx));
    double *ro = malloc(nv * 8), *ra = malloc(nv * 8), *rS = malloc(nS * 8), *rSa = malloc(nS * 8);
    double *rz = malloc(nz * 8);
    ref_linear(&p, c.B, c.N, c.H, c.D, c.Dv, q, k, v, c.with_state ? S0 : NULL,
               c.with_state ? z0 : NULL, ro, ra, rS, rSa, rz);
    float *go = malloc(nv * 4), *gS = malloc(nS * 4), *gz = malloc(nz * 4);
    read_view(&O, go);
    const double tol = c.dt == LA_BF16 ? 1e-2 : 1e-5;
    double e = sum_rel_err(go, ro, ra, nv);
    CHECK(e <= tol, "linear %s: out rel err %.3g > %g", case_str(&c, cs, sizeof cs), e, tol);
    if (c.causal) {
        read_view(&So, gS);
        read_view(&zo, gz);
        double eS = sum_rel_err(gS, rS, rSa, nS), ez = la_rel_err(gz, rz, nz);
        CHECK(eS <= 1e-5 && ez <= 1e-5, "linear %s: state rel err S %.3g z %.3g",
              case_str(&c, cs, sizeof cs), eS, ez);
    }
    la_context_destroy(ctx);
    free(q); free(k); free(v); free(S0); free(z0); free(ro); free(ra); free(rS); free(rSa); free(rz);
    free(go); free(gS); free(gz);
    free(Q.buf); free(K.buf); free(V.buf); free(O.buf);
    free(Si.buf); free(zi.buf); free(So.buf); free(zo.buf);
}

static lin_case base_case(int64_t N, int64_t D, int64_t Dv) {
    lin_case c = {1, N, 1, D, Dv, LA_FEATURE_RELU, 0, 1, 64, 1.f, LA_F32, L_CONTIG, 2, 0};
    return c;
}

/* Prefill then continue (two calls carrying the state, the state buffers
 * aliased in/out) == one pass over all tokens, for several split points. */
static void test_split(la_rng *rng, int normalize) {
    const int64_t B = 2, N = 300, H = 3, D = 24, Dv = 20;
    const int64_t ne[4] = {B, N, H, D}, nev[4] = {B, N, H, Dv};
    float *q = malloc(B * N * H * D * 4), *k = malloc(B * N * H * D * 4), *v = malloc(B * N * H * Dv * 4);
    la_fill_normal(rng, q, B * N * H * D, 1);
    la_fill_normal(rng, k, B * N * H * D, 1);
    la_fill_normal(rng, v, B * N * H * Dv, 1);
    la_tensor Q, K, V, O1;
    la_tensor_init(&Q, q, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&K, k, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&V, v, LA_F32, LA_DEVICE_CPU, 4, nev);
    float *o1 = malloc(B * N * H * Dv * 4), *o2 = malloc(B * N * H * Dv * 4);
    la_fill_nan(o1, B * N * H * Dv);
    la_tensor_init(&O1, o1, LA_F32, LA_DEVICE_CPU, 4, nev);
    const int64_t neS[4] = {B, H, D, Dv}, nez[3] = {B, H, D};
    float *S1 = malloc(B * H * D * Dv * 4), *z1 = malloc(B * H * D * 4);
    float *S2 = malloc(B * H * D * Dv * 4), *z2 = malloc(B * H * D * 4);
    la_tensor tS1, tz1, tS2, tz2;
    la_tensor_init(&tS1, S1, LA_F32, LA_DEVICE_CPU, 4, neS);
    la_tensor_init(&tz1, z1, LA_F32, LA_DEVICE_CPU, 3, nez);
    la_tensor_init(&tS2, S2, LA_F32, LA_DEVICE_CPU, 4, neS);
    la_tensor_init(&tz2, z2, LA_F32, LA_DEVICE_CPU, 3, nez);
    la_linear_params p;
    la_linear_params_init(&p);
    p.causal = 1;
    p.normalize = normalize;
    p.feature = LA_FEATURE_ELU1;
    p.chunk = 16;
    CHECK_OK(la_linear_attention(&p, &Q, &K, &V, &O1, NULL, NULL, &tS1, &tz1, NULL));
    const int64_t splits[4] = {1, 17, 150, 299};
    for (int s = 0; s < 4; s++) {
        const int64_t a = splits[s];
        la_fill_nan(o2, B * N * H * Dv);
        la_fill_nan(S2, B * H * D * Dv);
        la_fill_nan(z2, B * H * D);
        /* sub-views of tokens [0,a) and [a,N) */
        la_tensor q0 = Q, k0 = K, v0 = V, q1 = Q, k1 = K, v1 = V, oa, ob;
        la_tensor_init(&oa, o2, LA_F32, LA_DEVICE_CPU, 4, nev);
        ob = oa;
        q0.ne[1] = k0.ne[1] = v0.ne[1] = oa.ne[1] = a;
        q1.ne[1] = k1.ne[1] = v1.ne[1] = ob.ne[1] = N - a;
        q1.data = q + a * H * D;
        k1.data = k + a * H * D;
        v1.data = v + a * H * Dv;
        ob.data = o2 + a * H * Dv;
        p.chunk = 16 + s; /* the chunking need not match either */
        CHECK_OK(la_linear_attention(&p, &q0, &k0, &v0, &oa, NULL, NULL, &tS2, &tz2, NULL));
        CHECK_OK(la_linear_attention(&p, &q1, &k1, &v1, &ob, &tS2, &tz2, &tS2, &tz2, NULL));
        double *r = malloc(B * N * H * Dv * 8), *rS = malloc(B * H * D * Dv * 8), *rz = malloc(B * H * D * 8);
        for (int64_t i = 0; i < B * N * H * Dv; i++) r[i] = o1[i];
        for (int64_t i = 0; i < B * H * D * Dv; i++) rS[i] = S1[i];
        for (int64_t i = 0; i < B * H * D; i++) rz[i] = z1[i];
        double e = la_rel_err(o2, r, B * N * H * Dv);
        double eS = la_rel_err(S2, rS, B * H * D * Dv), ez = la_rel_err(z2, rz, B * H * D);
        CHECK(e <= 1e-5 && eS <= 1e-5 && ez <= 1e-5,
              "split at %lld (normalize=%d): out %.3g S %.3g z %.3g vs one pass", (long long)a,
              normalize, e, eS, ez);
        free(r); free(rS); free(rz);
    }
    free(q); free(k); free(v); free(o1); free(o2); free(S1); free(z1); free(S2); free(z2);
}

static void test_nonfinite(la_rng *rng) {
    const int64_t N = 200, D = 8;
    const int64_t ne[4] = {1, N, 1, D};
    float q[N * D], k[N * D], v[N * D], o[N * D];
    la_fill_normal(rng, q, N * D, 1);
    la_fill_normal(rng, k, N * D, 1);
    la_fill_normal(rng, v, N * D, 1);
    q[50 * D + 2] = NAN;
    q[60 * D + 1] = INFINITY;
    la_tensor Q, K, V, O;
    la_tensor_init(&Q, q, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&K, k, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&V, v, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&O, o, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_linear_params p;
    la_linear_params_init(&p);
    p.feature = LA_FEATURE_ELU1;
    for (int causal = 0; causal < 2; causal++) {
        p.causal = causal;
        la_fill_nan(o, N * D);
        CHECK_OK(la_linear_attention(&p, &Q, &K, &V, &O, NULL, NULL, NULL, NULL, NULL));
        CHECK(isnan(o[50 * D]), "NaN in q row 50 must reach its output (causal=%d)", causal);
        int ok = 1;
        for (int64_t t = 0; t < N; t++)
            if (t != 50 && t != 60)
                for (int64_t d = 0; d < D; d++) ok &= isfinite(o[t * D + d]);
        CHECK(ok, "other rows stay finite (causal=%d)", causal);
    }
    /* NaN in k poisons the causal outputs from that token on, not before */
    q[50 * D + 2] = 0.5f;
    q[60 * D + 1] = 0.5f;
    k[100 * D + 3] = NAN;
    p.causal = 1;
    la_fill_nan(o, N * D);
    CHECK_OK(la_linear_attention(&p, &Q, &K, &V, &O, NULL, NULL, NULL, NULL, NULL));
    CHECK(isfinite(o[99 * D]) && isnan(o[100 * D]) && isnan(o[199 * D]),
          "NaN in k row 100 reaches rows >= 100 only");
}

static void test_bad_input(void) {
    static float buf[4096], obuf[2048], sbuf[4096], zbuf[256];
    la_tensor q, k, v, o, S, z, t;
    const int64_t ne[4] = {1, 8, 4, 16}, neS[4] = {1, 4, 16, 16}, nez[3] = {1, 4, 16};
    la_tensor_init(&q, buf, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&k, buf + 512, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&v, buf + 1024, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&o, obuf, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&S, sbuf, LA_F32, LA_DEVICE_CPU, 4, neS);
    la_tensor_init(&z, zbuf, LA_F32, LA_DEVICE_CPU, 3, nez);
    la_linear_params p;
    CHECK_STATUS(la_linear_params_init(NULL), LA_ERR_ARG);
    la_linear_params_init(&p);
    CHECK(p.feature == LA_FEATURE_RELU && p.normalize == 1 && p.causal == 0 && p.eps == 1e-6f &&
              p.scale_q == 1.f && p.chunk == 64,
          "la_linear_params_init defaults");
    CHECK_OK(la_linear_attention(&p, &q, &k, &v, &o, NULL, NULL, NULL, NULL, NULL));
    CHECK_STATUS(la_linear_attention(NULL, &q, &k, &v, &o, NULL, NULL, NULL, NULL, NULL), LA_ERR_ARG);
    CHECK_STATUS(la_linear_attention(&p, NULL, &k, &v, &o, NULL, NULL, NULL, NULL, NULL), LA_ERR_ARG);
    CHECK_STATUS(la_linear_attention(&p, &q, &k, NULL, &o, NULL, NULL, NULL, NULL, NULL), LA_ERR_ARG);
    CHECK_STATUS(la_linear_attention(&p, &q, &k, &v, NULL, NULL, NULL, NULL, NULL, NULL), LA_ERR_ARG);
    /* parameters */
    p.feature = (la_feature)99;
    CHECK_STATUS(la_linear_attention(&p, &q, &k, &v, &o, NULL, NULL, NULL, NULL, NULL), LA_ERR_ARG);
    la_linear_params_init(&p);
    const float bad_eps[3] = {-1e-6f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        p.eps = bad_eps[i];
        CHECK_STATUS(la_linear_attention(&p, &q, &k, &v, &o, NULL, NULL, NULL, NULL, NULL), LA_ERR_ARG);
        CHECK(strstr(la_last_error(), "eps") != NULL, "message names eps: %s", la_last_error());
    }
    la_linear_params_init(&p);
    p.scale_q = NAN;
    CHECK_STATUS(la_linear_attention(&p, &q, &k, &v, &o, NULL, NULL, NULL, NULL, NULL), LA_ERR_ARG);
    la_linear_params_init(&p);
    const int64_t bad_chunk[3] = {0, -5, 1 << 20};
    for (int i = 0; i < 3; i++) {
        p.chunk = bad_chunk[i];
        p.causal = 1;
        CHECK_STATUS(la_linear_attention(&p, &q, &k, &v, &o, NULL, NULL, NULL, NULL, NULL), LA_ERR_ARG);
        CHECK(strstr(la_last_error(), "chunk") != NULL, "message names chunk: %s", la_last_error());
    }
    la_linear_params_init(&p);
    /* ranks and extents */
    t = q; t.ndim = 2;
    CHECK_STATUS(la_linear_attention(&p, &t, &k, &v, &o, NULL, NULL, NULL, NULL, NULL), LA_ERR_SHAPE);
    const int64_t ne_d[4] = {1, 8, 4, 12};
    la_tensor_init(&t, buf + 512, LA_F32, LA_DEVICE_CPU, 4, ne_d);
    CHECK_STATUS(la_linear_attention(&p, &q, &t, &v, &o, NULL, NULL, NULL, NULL, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "k:") != NULL, "message names k: %s", la_last_error());
    const int64_t ne_n[4] = {1, 7, 4, 16};
    la_tensor_init(&t, buf + 1024, LA_F32, LA_DEVICE_CPU, 4, ne_n);
    CHECK_STATUS(la_linear_attention(&p, &q, &k, &t, &o, NULL, NULL, NULL, NULL, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "v:") != NULL, "message names v: %s", la_last_error());
    const int64_t ne_h[4] = {1, 8, 2, 16};
    la_tensor_init(&t, obuf, LA_F32, LA_DEVICE_CPU, 4, ne_h);
    CHECK_STATUS(la_linear_attention(&p, &q, &k, &v, &t, NULL, NULL, NULL, NULL, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "out") != NULL, "message names out: %s", la_last_error());
    const int64_t ne_0[4] = {1, 0, 4, 16};
    la_tensor_init(&t, buf, LA_F32, LA_DEVICE_CPU, 4, ne_0);
    CHECK_STATUS(la_linear_attention(&p, &t, &k, &v, &o, NULL, NULL, NULL, NULL, NULL), LA_ERR_SHAPE);
    t = q; t.ne[0] = (int64_t)1 << 62; t.nb[0] = 1 << 20;
    la_status s = la_linear_attention(&p, &t, &k, &v, &o, NULL, NULL, NULL, NULL, NULL);
    CHECK(s == LA_ERR_OVERFLOW || s == LA_ERR_SHAPE, "huge q -> %s", la_status_string(s));
    t = v; t.ne[3] = (int64_t)1 << 40; t.nb[3] = 0;
    s = la_linear_attention(&p, &q, &k, &t, &o, NULL, NULL, NULL, NULL, NULL);
    CHECK(s == LA_ERR_OVERFLOW || s == LA_ERR_SHAPE, "huge Dv -> %s", la_status_string(s));
    t = q; t.dtype = LA_FP8_E4M3;
    CHECK_STATUS(la_linear_attention(&p, &t, &k, &v, &o, NULL, NULL, NULL, NULL, NULL), LA_ERR_DTYPE);
    /* state */
    CHECK_STATUS(la_linear_attention(&p, &q, &k, &v, &o, &S, &z, NULL, NULL, NULL), LA_ERR_ARG);
    CHECK(strstr(la_last_error(), "causal") != NULL, "state without causal explained: %s", la_last_error());
    p.causal = 1;
    CHECK_OK(la_linear_attention(&p, &q, &k, &v, &o, &S, &z, &S, &z, NULL));
    CHECK_STATUS(la_linear_attention(&p, &q, &k, &v, &o, NULL, &z, NULL, NULL, NULL), LA_ERR_ARG);
    CHECK_STATUS(la_linear_attention(&p, &q, &k, &v, &o, &S, NULL, NULL, NULL, NULL), LA_ERR_ARG);
    p.normalize = 0;
    CHECK_OK(la_linear_attention(&p, &q, &k, &v, &o, &S, NULL, NULL, NULL, NULL));
    p.normalize = 1;
    const int64_t neS_bad[4] = {1, 4, 16, 15};
    la_tensor_init(&t, sbuf, LA_F32, LA_DEVICE_CPU, 4, neS_bad);
    CHECK_STATUS(la_linear_attention(&p, &q, &k, &v, &o, &t, &z, NULL, NULL, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "S_in") != NULL, "message names S_in: %s", la_last_error());
    const int64_t nez_bad[3] = {1, 3, 16};
    la_tensor_init(&t, zbuf, LA_F32, LA_DEVICE_CPU, 3, nez_bad);
    CHECK_STATUS(la_linear_attention(&p, &q, &k, &v, &o, NULL, NULL, &S, &t, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "z_out") != NULL, "message names z_out: %s", la_last_error());
    t = S; t.dtype = LA_BF16;
    CHECK_STATUS(la_linear_attention(&p, &q, &k, &v, &o, NULL, NULL, &t, NULL, NULL), LA_ERR_DTYPE);
    /* overlaps */
    CHECK_STATUS(la_linear_attention(&p, &q, &k, &v, &k, NULL, NULL, NULL, NULL, NULL), LA_ERR_ARG);
    la_tensor_init(&t, obuf, LA_F32, LA_DEVICE_CPU, 4, neS);
    CHECK_STATUS(la_linear_attention(&p, &q, &k, &v, &o, NULL, NULL, &t, NULL, NULL), LA_ERR_ARG);
    la_tensor_init(&t, sbuf + 8, LA_F32, LA_DEVICE_CPU, 3, nez);
    CHECK_STATUS(la_linear_attention(&p, &q, &k, &v, &o, NULL, NULL, &S, &t, NULL), LA_ERR_ARG);
    /* devices */
    t = v; t.device = LA_DEVICE_CUDA;
    CHECK_STATUS(la_linear_attention(&p, &q, &k, &t, &o, NULL, NULL, NULL, NULL, NULL), LA_ERR_DEVICE);
    la_tensor cq = q, ck = k, cv = v, co = o;
    cq.device = ck.device = cv.device = co.device = LA_DEVICE_CUDA;
    CHECK_CUDA_REFUSED(la_linear_attention(&p, &cq, &ck, &cv, &co, NULL, NULL, NULL, NULL, NULL));
}

int main(void) {
    la_rng rng = la_test_rng("test_linear");

    /* odd sizes × head dims, causal and not */
    const int64_t Ns[4] = {1, 63, 65, 1000}, Ds[5] = {1, 16, 63, 64, 128};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 5; b++)
            for (int causal = 0; causal < 2; causal++) {
                int64_t D = Ds[b], Dv = (b % 2) ? D + 5 : (D > 16 ? D / 2 : D);
                lin_case c = base_case(Ns[a], D, Dv);
                c.causal = causal;
                c.with_state = causal && (a + b) % 2;
                run_case(&rng, c);
            }
    /* every feature map × normalize × causal, with batch and heads */
    for (int f = 0; f < 5; f++)
        for (int norm = 0; norm < 2; norm++)
            for (int causal = 0; causal < 2; causal++) {
                lin_case c = {2, 130, 3, 16, 12, (la_feature)f, causal, norm, 32, 1.f, LA_F32, L_BHND, 2, causal};
                run_case(&rng, c);
                c.scale_q = 0.37f;
                c.N = 1000;
                c.B = 1;
                c.layout = L_GAPS;
                run_case(&rng, c);
            }
    /* chunk sizes: chunkwise == token recurrence */
    const int64_t chunks[6] = {1, 7, 63, 64, 1000, 4096};
    for (int i = 0; i < 6; i++) {
        lin_case c = base_case(301, 20, 9);
        c.causal = 1;
        c.chunk = chunks[i];
        c.with_state = i % 2;
        c.feature = LA_FEATURE_RELU1;
        run_case(&rng, c);
    }
    /* dtypes and layouts */
    for (int layout = 0; layout < 3; layout++)
        for (int causal = 0; causal < 2; causal++) {
            lin_case c = {2, 200, 2, 32, 24, LA_FEATURE_ELU1, causal, 1, 64, 1.f, LA_BF16, layout, 2, causal};
            run_case(&rng, c);
            c.dt = LA_F64;
            run_case(&rng, c);
        }
    /* long heads split into superblocks across threads (phase 1/2 paths) */
    for (int causal = 0; causal < 2; causal++)
        for (int thr = 1; thr <= 3; thr++) {
            lin_case c = base_case(5000, 16, 8);
            c.causal = causal;
            c.threads = thr;
            c.with_state = causal;
            c.chunk = 50;
            run_case(&rng, c);
        }
    test_split(&rng, 1);
    test_split(&rng, 0);
    test_nonfinite(&rng);
    test_bad_input();
    return la_test_finish();
}
