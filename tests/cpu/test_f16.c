/* float16 on the CPU: the converters, every operator forward and backward
 * with f16 views, and no overflow at N = 256K with inputs of scale 10.
 *
 * 1. Conversions (core/internal.h): every f16 bit pattern loads to the value
 *    tests/test_util.h's independent la_round_f16 agrees with, and stores
 *    back to the same bits; a sweep over the float bit patterns stores to
 *    the nearest f16 (ties to even, +-Inf from 65520 on, subnormals), bit
 *    for bit equal to _Float16 where the compiler has it.
 * 2. Each operator runs twice on the same f16-rounded inputs: once with f16
 *    views (inputs and outputs), once with f32 views. The f32 run is the
 *    reference (the CPU computes in fp32 either way; the f32 path matches
 *    float64 to 1e-5, tests/backend/cases_cpu.c). The f16 outputs must be
 *    within twice the error of that result rounded to f16 (the formula
 *    computed at the output's precision: its error bounds from below the
 *    error of the same formula in plain fp16, which rounds its intermediates
 *    too), plus 2e-5 for the reference's own error:
 *        err(f16 run) <= 2 err(round_f16(f32 run)) + 2e-5,
 *    err = max|x - ref| / max|ref|, every output entry written (outputs are
 *    poisoned with NaN first). Backward passes get the same f16 `out`, lse
 *    and d_out in both runs; gradients have their input's dtype. Indexers:
 *    scores to 1e-5, index sets >= 99% equal.
 * 3. N = 256K, inputs of scale 10 (q, k, v ~ N(0, 100)): linear (causal and
 *    not), MHLA, focused flatten and softmax (16 queries) write finite f16
 *    outputs (each true output is a convex combination of v rows, so far
 *    below 65504): no fp32 sum is ever stored in f16. */
#include "test_util.h"
#include "core/internal.h"

static la_rng rng;
static la_context *ctx;

/* ---- 1. conversions -------------------------------------------------------- */
static void test_convert(void) {
    int64_t bad_ld = 0, bad_rt = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = la_f16_to_f32((uint16_t)h);
        const int nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
        if (nan) {
            bad_ld += !isnan(f);
            continue;
        }
        bad_ld += la_round_f16(f) != f;
        bad_rt += la_f32_to_f16(f) != (uint16_t)h;
    }
    CHECK(bad_ld == 0, "f16 load: %lld bit patterns load to a non-f16 value", (long long)bad_ld);
    CHECK(bad_rt == 0, "f16 store(load(h)) != h for %lld bit patterns", (long long)bad_rt);
    int64_t bad_st = 0, bad_hw = 0, n = 0;
    for (uint64_t u = 0; u < (1ull << 32); u += 251) {
        uint32_t b = (uint32_t)u;
        float f;
        memcpy(&f, &b, 4);
        const uint16_t h = la_f32_to_f16(f);
        const float g = la_f16_to_f32(h), want = la_round_f16(f);
        n++;
        if (isnan(f)) bad_st += !isnan(g);
        else bad_st += memcmp(&g, &want, 4) != 0;
#ifdef __FLT16_MAX__
        if (!isnan(f)) {
            const _Float16 x = (_Float16)f;
            uint16_t hx;
            memcpy(&hx, &x, 2);
            bad_hw += hx != h;
        }
#endif
    }
    CHECK(bad_st == 0, "f16 store: %lld of %lld floats not rounded to nearest even", (long long)bad_st,
          (long long)n);
    CHECK(bad_hw == 0, "f16 store: %lld floats differ from _Float16", (long long)bad_hw);
    /* the edges: largest finite, the overflow threshold, subnormals, ties */
    CHECK(la_f32_to_f16(65504.f) == 0x7bff, "65504 -> %#x", la_f32_to_f16(65504.f));
    CHECK(la_f32_to_f16(65519.f) == 0x7bff, "65519 -> %#x", la_f32_to_f16(65519.f));
    CHECK(la_f32_to_f16(65520.f) == 0x7c00, "65520 -> %#x (want +Inf)", la_f32_to_f16(65520.f));
    CHECK(la_f32_to_f16(-1e30f) == 0xfc00, "-1e30 -> %#x (want -Inf)", la_f32_to_f16(-1e30f));
    CHECK(la_f32_to_f16(5.9604645e-8f) == 0x0001, "2^-24 -> %#x", la_f32_to_f16(5.9604645e-8f));
    CHECK(la_f32_to_f16(2.9802322e-8f) == 0x0000, "2^-25 (tie) -> %#x (want +0)", la_f32_to_f16(2.9802322e-8f));
    CHECK(la_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00, "1 + 2^-11 (tie) -> %#x", la_f32_to_f16(1.0f + 1.0f / 2048));
    CHECK(la_f16_to_f32(0x7e00) != la_f16_to_f32(0x7e00), "0x7e00 is not NaN");
    printf("  conversions: 65536 f16 patterns, %lld floats (%s)\n", (long long)n,
#ifdef __FLT16_MAX__
           "also against _Float16"
#else
           "no _Float16 in this compiler"
#endif
    );
}

/* ---- 2. one tensor in f16 and in f32 ------------------------------------- */
typedef struct pair {
    float *f;      /* f32 storage (also the f16 values, as floats) */
    uint16_t *h;   /* f16 storage */
    la_tensor t32, t16;
    int64_t n;
} pair;

static pair pair_new(int nd, const int64_t *ne, int perm) {
    pair p;
    memset(&p, 0, sizeof p);
    p.n = 1;
    for (int i = 0; i < nd; i++) p.n *= ne[i];
    p.f = malloc(sizeof(float) * (size_t)p.n);
    p.h = malloc(sizeof(uint16_t) * (size_t)p.n);
    int64_t nb[4];
    if (perm && nd == 4) { /* buffer [B,H,N,D] viewed as [B,N,H,D] */
        nb[3] = 1;
        nb[1] = ne[3];
        nb[2] = ne[1] * ne[3];
        nb[0] = ne[2] * ne[1] * ne[3];
    } else {
        int64_t s = 1;
        for (int i = nd - 1; i >= 0; i--) {
            nb[i] = s;
            s *= ne[i];
        }
    }
    la_tensor_init_strided(&p.t32, p.f, LA_F32, LA_DEVICE_CPU, nd, ne, nb);
    la_tensor_init_strided(&p.t16, p.h, LA_F16, LA_DEVICE_CPU, nd, ne, nb);
    return p;
}
/* random f16 values (the same in both storages) */
static pair pair_in(int nd, const int64_t *ne, double scale, int perm) {
    pair p = pair_new(nd, ne, perm);
    for (int64_t i = 0; i < p.n; i++) {
        p.h[i] = la_f32_to_f16((float)(la_rng_normal(&rng) * scale));
        p.f[i] = la_f16_to_f32(p.h[i]);
    }
    return p;
}
/* an output: both storages NaN */
static pair pair_out(int nd, const int64_t *ne, int perm) {
    pair p = pair_new(nd, ne, perm);
    for (int64_t i = 0; i < p.n; i++) {
        p.f[i] = NAN;
        p.h[i] = 0x7e00;
    }
    return p;
}
/* after a run writing only t16: an input holding its f16 values in both */
static void pair_sync_from16(pair *p) {
    for (int64_t i = 0; i < p->n; i++) p->f[i] = la_f16_to_f32(p->h[i]);
}
static void pair_free(pair *p) {
    free(p->f);
    free(p->h);
}
/* f32 buffer of n, NaN */
static float *nanbuf(int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

/* The f16 output of o against its f32 output (the bound of the header). */
static void check_pair(const char *what, const pair *o) {
    double *ref = malloc(sizeof(double) * (size_t)o->n), *rr = malloc(sizeof(double) * (size_t)o->n);
    float *got = malloc(sizeof(float) * (size_t)o->n), *rounded = malloc(sizeof(float) * (size_t)o->n);
    int64_t nan_ref = 0, nonfinite = 0;
    for (int64_t i = 0; i < o->n; i++) {
        ref[i] = o->f[i];
        nan_ref += isnan(o->f[i]);
        got[i] = la_f16_to_f32(o->h[i]);
        nonfinite += !isfinite(got[i]);
        rounded[i] = la_round_f16(o->f[i]);
        rr[i] = rounded[i];
    }
    const double e = la_rel_err(got, ref, o->n), er = la_rel_err(rounded, ref, o->n);
    const double bound = 2 * er + 2e-5;
    CHECK(nan_ref == 0, "%s: the f32 run left %lld NaN", what, (long long)nan_ref);
    CHECK(nonfinite == 0, "%s: the f16 run left %lld non-finite values", what, (long long)nonfinite);
    CHECK(e <= bound, "%s: f16 rel err %.3g > bound %.3g (f32 result rounded to f16: %.3g)", what, e,
          bound, er);
    printf("  %-52s f16 rel %.2e  bound %.2e %s\n", what, e, bound, e <= bound && !nonfinite ? "ok" : "FAIL");
    free(ref);
    free(rr);
    free(got);
    free(rounded);
}
/* f32 outputs of both runs (lse, states): 1e-5 */
static void check_f32(const char *what, const float *a, const float *b, int64_t n) {
    double *ref = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) ref[i] = isinf(b[i]) ? 0 : b[i];
    float *a2 = malloc(sizeof(float) * (size_t)n);
    int64_t mism = 0;
    for (int64_t i = 0; i < n; i++) {
        a2[i] = isinf(a[i]) ? 0 : a[i];
        mism += isinf(a[i]) != isinf(b[i]);
    }
    const double e = la_rel_err(a2, ref, n);
    CHECK(mism == 0 && e <= 1e-5, "%s: rel err %.3g (%lld inf mismatches)", what, e, (long long)mism);
    free(ref);
    free(a2);
}

/* ---- softmax ----------------------------------------------------------------- */
static void test_softmax(int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t Hk, int64_t D,
                         int64_t Dv, int causal, int perm) {
    int64_t nq[4] = {B, Nq, H, D}, nk[4] = {B, Nk, Hk, D}, nv[4] = {B, Nk, Hk, Dv}, no[4] = {B, Nq, H, Dv};
    pair q = pair_in(4, nq, 1.0, perm), k = pair_in(4, nk, 1.0, perm), v = pair_in(4, nv, 1.0, perm);
    pair o = pair_out(4, no, perm);
    const int64_t nl = B * Nq * H;
    float *l16 = nanbuf(nl), *l32 = nanbuf(nl);
    la_tensor tl16, tl32;
    int64_t ne_l[3] = {B, Nq, H};
    la_tensor_init(&tl16, l16, LA_F32, LA_DEVICE_CPU, 3, ne_l);
    la_tensor_init(&tl32, l32, LA_F32, LA_DEVICE_CPU, 3, ne_l);
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = causal;
    CHECK_OK(la_softmax_attention(&p, &q.t16, &k.t16, &v.t16, &o.t16, &tl16, ctx));
    CHECK_OK(la_softmax_attention(&p, &q.t32, &k.t32, &v.t32, &o.t32, &tl32, ctx));
    char what[160];
    snprintf(what, sizeof what, "softmax B%lld Nq%lld Nk%lld H%lld/%lld D%lld Dv%lld c%d p%d", (long long)B,
             (long long)Nq, (long long)Nk, (long long)H, (long long)Hk, (long long)D, (long long)Dv,
             causal, perm);
    check_pair(what, &o);
    check_f32("softmax lse (f32, same inputs)", l16, l32, nl);
    /* backward: the f16 forward's out and lse, one d_out, in both runs */
    pair_sync_from16(&o);
    pair g = pair_in(4, no, 1.0, perm);
    pair dq = pair_out(4, nq, perm), dk = pair_out(4, nk, perm), dv = pair_out(4, nv, perm);
    CHECK_OK(la_softmax_backward(&p, &q.t16, &k.t16, &v.t16, &o.t16, &tl16, &g.t16, &dq.t16, &dk.t16,
                                 &dv.t16, ctx));
    CHECK_OK(la_softmax_backward(&p, &q.t32, &k.t32, &v.t32, &o.t32, &tl16, &g.t32, &dq.t32, &dk.t32,
                                 &dv.t32, ctx));
    char w2[200];
    snprintf(w2, sizeof w2, "%s dq", what);
    check_pair(w2, &dq);
    snprintf(w2, sizeof w2, "%s dk", what);
    check_pair(w2, &dk);
    snprintf(w2, sizeof w2, "%s dv", what);
    check_pair(w2, &dv);
    pair_free(&q); pair_free(&k); pair_free(&v); pair_free(&o); pair_free(&g);
    pair_free(&dq); pair_free(&dk); pair_free(&dv);
    free(l16);
    free(l32);
}

/* ---- linear ------------------------------------------------------------------ */
static void test_linear(int64_t B, int64_t N, int64_t H, int64_t D, int64_t Dv, la_feature f,
                        int causal, int normalize, int state, int perm) {
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv}, nS[4] = {B, H, D, Dv}, nz[3] = {B, H, D};
    pair q = pair_in(4, nq, 1.0, perm), k = pair_in(4, nq, 1.0, perm), v = pair_in(4, nv, 1.0, perm);
    pair o = pair_out(4, nv, perm);
    la_linear_params p;
    la_linear_params_init(&p);
    p.feature = f;
    p.causal = causal;
    p.normalize = normalize;
    p.chunk = 16;
    const int64_t ES = B * H * D * Dv, Ez = B * H * D;
    float *S0 = malloc(sizeof(float) * (size_t)ES), *z0 = malloc(sizeof(float) * (size_t)Ez);
    for (int64_t i = 0; i < ES; i++) S0[i] = (float)fabs(la_rng_normal(&rng));
    for (int64_t i = 0; i < Ez; i++) z0[i] = (float)fabs(la_rng_normal(&rng)) + 1.f;
    float *S16 = nanbuf(ES), *S32 = nanbuf(ES), *z16 = nanbuf(Ez), *z32 = nanbuf(Ez);
    la_tensor tS0, tz0, tS16, tS32, tz16, tz32;
    la_tensor_init(&tS0, S0, LA_F32, LA_DEVICE_CPU, 4, nS);
    la_tensor_init(&tz0, z0, LA_F32, LA_DEVICE_CPU, 3, nz);
    la_tensor_init(&tS16, S16, LA_F32, LA_DEVICE_CPU, 4, nS);
    la_tensor_init(&tS32, S32, LA_F32, LA_DEVICE_CPU, 4, nS);
    la_tensor_init(&tz16, z16, LA_F32, LA_DEVICE_CPU, 3, nz);
    la_tensor_init(&tz32, z32, LA_F32, LA_DEVICE_CPU, 3, nz);
    const int st = causal && state;
    CHECK_OK(la_linear_attention(&p, &q.t16, &k.t16, &v.t16, &o.t16, st ? &tS0 : NULL, st ? &tz0 : NULL,
                                 st ? &tS16 : NULL, st ? &tz16 : NULL, ctx));
    CHECK_OK(la_linear_attention(&p, &q.t32, &k.t32, &v.t32, &o.t32, st ? &tS0 : NULL, st ? &tz0 : NULL,
                                 st ? &tS32 : NULL, st ? &tz32 : NULL, ctx));
    char what[160];
    snprintf(what, sizeof what, "linear B%lld N%lld H%lld D%lld Dv%lld f%d c%d n%d s%d p%d", (long long)B,
             (long long)N, (long long)H, (long long)D, (long long)Dv, (int)f, causal, normalize, st, perm);
    check_pair(what, &o);
    if (st) {
        check_f32("linear S_out (f32, from f16 inputs)", S16, S32, ES);
        check_f32("linear z_out (f32, from f16 inputs)", z16, z32, Ez);
    }
    pair g = pair_in(4, nv, 1.0, perm);
    pair dq = pair_out(4, nq, perm), dk = pair_out(4, nq, perm), dv = pair_out(4, nv, perm);
    CHECK_OK(la_linear_backward(&p, &q.t16, &k.t16, &v.t16, NULL, st ? &tS0 : NULL, st ? &tz0 : NULL,
                                &g.t16, NULL, NULL, &dq.t16, &dk.t16, &dv.t16, NULL, NULL, ctx));
    CHECK_OK(la_linear_backward(&p, &q.t32, &k.t32, &v.t32, NULL, st ? &tS0 : NULL, st ? &tz0 : NULL,
                                &g.t32, NULL, NULL, &dq.t32, &dk.t32, &dv.t32, NULL, NULL, ctx));
    char w2[200];
    snprintf(w2, sizeof w2, "%s dq", what);
    check_pair(w2, &dq);
    snprintf(w2, sizeof w2, "%s dk", what);
    check_pair(w2, &dk);
    snprintf(w2, sizeof w2, "%s dv", what);
    check_pair(w2, &dv);
    pair_free(&q); pair_free(&k); pair_free(&v); pair_free(&o); pair_free(&g);
    pair_free(&dq); pair_free(&dk); pair_free(&dv);
    free(S0); free(z0); free(S16); free(S32); free(z16); free(z32);
}

/* ---- MHLA (non-causal on a 1-D grid, causal) ---------------------------------- */
static void test_mhla(int causal, int64_t B, int64_t N, int64_t H, int64_t D, int64_t Dv, int64_t nblk,
                      int perm) {
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv};
    pair q = pair_in(4, nq, 1.0, perm), k = pair_in(4, nq, 1.0, perm), v = pair_in(4, nv, 1.0, perm);
    pair o = pair_out(4, nv, perm);
    const int64_t M = nblk;
    float *W = malloc(sizeof(float) * (size_t)(M * M));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < M; j++)
            W[i * M + j] = (causal && j > i) ? 0.f : (float)(0.1 + la_rng_uniform(&rng));
    la_tensor tw;
    int64_t nw[2] = {M, M};
    la_tensor_init(&tw, W, LA_F32, LA_DEVICE_CPU, 2, nw);
    la_mhla_params p;
    la_mhla_causal_params pc;
    la_mhla_params_init(&p);
    la_mhla_causal_params_init(&pc);
    p.grid_ndim = 1;
    p.grid[0] = N;
    p.blocks[0] = nblk;
    pc.chunk = (N + nblk - 1) / nblk;
    pc.normalize = LA_MHLA_NORM_PER_QUERY;
    if (causal) {
        CHECK_OK(la_mhla_causal_forward(&pc, &q.t16, &k.t16, &v.t16, &tw, &o.t16, ctx));
        CHECK_OK(la_mhla_causal_forward(&pc, &q.t32, &k.t32, &v.t32, &tw, &o.t32, ctx));
    } else {
        CHECK_OK(la_mhla_forward(&p, &q.t16, &k.t16, &v.t16, &tw, &o.t16, ctx));
        CHECK_OK(la_mhla_forward(&p, &q.t32, &k.t32, &v.t32, &tw, &o.t32, ctx));
    }
    char what[160];
    snprintf(what, sizeof what, "mhla%s B%lld N%lld H%lld D%lld Dv%lld M%lld p%d", causal ? "_causal" : "",
             (long long)B, (long long)N, (long long)H, (long long)D, (long long)Dv, (long long)M, perm);
    check_pair(what, &o);
    pair g = pair_in(4, nv, 1.0, perm);
    pair dq = pair_out(4, nq, perm), dk = pair_out(4, nq, perm), dv = pair_out(4, nv, perm);
    float *dW16 = nanbuf(M * M), *dW32 = nanbuf(M * M);
    la_tensor tdw16, tdw32;
    la_tensor_init(&tdw16, dW16, LA_F32, LA_DEVICE_CPU, 2, nw);
    la_tensor_init(&tdw32, dW32, LA_F32, LA_DEVICE_CPU, 2, nw);
    if (causal) {
        CHECK_OK(la_mhla_causal_backward(&pc, &q.t16, &k.t16, &v.t16, &tw, NULL, &g.t16, &dq.t16, &dk.t16,
                                         &dv.t16, &tdw16, ctx));
        CHECK_OK(la_mhla_causal_backward(&pc, &q.t32, &k.t32, &v.t32, &tw, NULL, &g.t32, &dq.t32, &dk.t32,
                                         &dv.t32, &tdw32, ctx));
    } else {
        CHECK_OK(la_mhla_backward(&p, &q.t16, &k.t16, &v.t16, &tw, NULL, &g.t16, &dq.t16, &dk.t16, &dv.t16,
                                  &tdw16, ctx));
        CHECK_OK(la_mhla_backward(&p, &q.t32, &k.t32, &v.t32, &tw, NULL, &g.t32, &dq.t32, &dk.t32, &dv.t32,
                                  &tdw32, ctx));
    }
    char w2[200];
    snprintf(w2, sizeof w2, "%s dq", what);
    check_pair(w2, &dq);
    snprintf(w2, sizeof w2, "%s dk", what);
    check_pair(w2, &dk);
    snprintf(w2, sizeof w2, "%s dv", what);
    check_pair(w2, &dv);
    check_f32("mhla d_mixing (f32, from f16 inputs)", dW16, dW32, M * M);
    pair_free(&q); pair_free(&k); pair_free(&v); pair_free(&o); pair_free(&g);
    pair_free(&dq); pair_free(&dk); pair_free(&dv);
    free(W); free(dW16); free(dW32);
}

/* MHLA decoding: token pieces appended with f16 views vs f32 views */
static void test_decode(void) {
    const int64_t B = 1, N = 65, H = 2, D = 16, Dv = 17, C = 8, M = (N + C - 1) / C;
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv};
    pair q = pair_in(4, nq, 1.0, 0), k = pair_in(4, nq, 1.0, 0), v = pair_in(4, nv, 1.0, 0);
    pair o = pair_out(4, nv, 0);
    float *W = malloc(sizeof(float) * (size_t)(M * M));
    for (int64_t i = 0; i < M * M; i++) W[i] = (float)(0.1 + la_rng_uniform(&rng));
    la_tensor tw;
    int64_t nw[2] = {M, M};
    la_tensor_init(&tw, W, LA_F32, LA_DEVICE_CPU, 2, nw);
    la_mhla_causal_params pc;
    la_mhla_causal_params_init(&pc);
    pc.chunk = C;
    la_mhla_state *s16 = NULL, *s32 = NULL;
    CHECK_OK(la_mhla_state_create(&pc, B, H, D, Dv, &tw, &s16));
    CHECK_OK(la_mhla_state_create(&pc, B, H, D, Dv, &tw, &s32));
    for (int64_t r = 0; r < N && s16 && s32;) {
        const int64_t n = r % 3 == 0 ? 1 : 7 < N - r ? 7 : N - r;
        pair *ps[4] = {&q, &k, &v, &o};
        la_tensor a16[4], a32[4];
        for (int i = 0; i < 4; i++) { /* rows [r, r+n) of the view */
            a16[i] = ps[i]->t16;
            a32[i] = ps[i]->t32;
            a16[i].ne[1] = a32[i].ne[1] = n;
            a16[i].data = (uint16_t *)ps[i]->t16.data + r * ps[i]->t16.nb[1];
            a32[i].data = (float *)ps[i]->t32.data + r * ps[i]->t32.nb[1];
        }
        CHECK_OK(la_mhla_state_append(s16, &a16[0], &a16[1], &a16[2], &a16[3], ctx));
        CHECK_OK(la_mhla_state_append(s32, &a32[0], &a32[1], &a32[2], &a32[3], ctx));
        r += n;
    }
    check_pair("mhla decode (state_append) N65 C8 pieces 1/7", &o);
    la_mhla_state_destroy(s16);
    la_mhla_state_destroy(s32);
    pair_free(&q); pair_free(&k); pair_free(&v); pair_free(&o);
    free(W);
}

/* ---- focused flatten ----------------------------------------------------------- */
static void test_focused(int64_t B, int64_t Hm, int64_t Wm, int64_t H, int64_t D, int64_t ks, int perm) {
    const int64_t N = Hm * Wm;
    int64_t nq[4] = {B, N, H, D};
    pair q = pair_in(4, nq, 1.0, perm), k = pair_in(4, nq, 1.0, perm), v = pair_in(4, nq, 1.0, perm);
    pair o = pair_out(4, nq, perm);
    int64_t ncv[3] = {D, ks, ks}, nbias[1] = {D}, nsp[1] = {H * D};
    pair cv = pair_in(3, ncv, 0.3, 0), cb = pair_in(1, nbias, 0.3, 0), sp = pair_in(1, nsp, 1.0, 0);
    la_focused_params p;
    la_focused_params_init(&p);
    p.map_h = Hm;
    p.map_w = Wm;
    CHECK_OK(la_focused_attention(&p, &q.t16, &k.t16, &v.t16, &cv.t16, &cb.t16, &sp.t16, NULL, &o.t16, ctx));
    CHECK_OK(la_focused_attention(&p, &q.t32, &k.t32, &v.t32, &cv.t32, &cb.t32, &sp.t32, NULL, &o.t32, ctx));
    char what[160];
    snprintf(what, sizeof what, "focused B%lld map %lldx%lld H%lld D%lld k%lld p%d", (long long)B,
             (long long)Hm, (long long)Wm, (long long)H, (long long)D, (long long)ks, perm);
    check_pair(what, &o);
    pair g = pair_in(4, nq, 1.0, perm);
    pair dq = pair_out(4, nq, perm), dk = pair_out(4, nq, perm), dv = pair_out(4, nq, perm);
    pair dc = pair_out(3, ncv, 0), db = pair_out(1, nbias, 0), ds = pair_out(1, nsp, 0);
    CHECK_OK(la_focused_backward(&p, &q.t16, &k.t16, &v.t16, &cv.t16, &cb.t16, &sp.t16, NULL, NULL, &g.t16,
                                 &dq.t16, &dk.t16, &dv.t16, &dc.t16, &db.t16, &ds.t16, NULL, ctx));
    CHECK_OK(la_focused_backward(&p, &q.t32, &k.t32, &v.t32, &cv.t32, &cb.t32, &sp.t32, NULL, NULL, &g.t32,
                                 &dq.t32, &dk.t32, &dv.t32, &dc.t32, &db.t32, &ds.t32, NULL, ctx));
    const char *names[6] = {"dq", "dk", "dv", "d_conv", "d_conv_bias", "d_softplus_param"};
    pair *gs[6] = {&dq, &dk, &dv, &dc, &db, &ds};
    for (int i = 0; i < 6; i++) {
        char w2[200];
        snprintf(w2, sizeof w2, "%s %s", what, names[i]);
        check_pair(w2, gs[i]);
    }
    pair_free(&q); pair_free(&k); pair_free(&v); pair_free(&o); pair_free(&g);
    pair_free(&cv); pair_free(&cb); pair_free(&sp);
    for (int i = 0; i < 6; i++) pair_free(gs[i]);
}

/* ---- sparse attention ------------------------------------------------------------ */
static void test_sparse_attn(int64_t T, int64_t Hq, int64_t Dqk, int64_t Dv, int64_t L, int64_t K) {
    int64_t nq[3] = {T, Hq, Dqk}, nkv[2] = {L, Dqk}, no[3] = {T, Hq, Dv};
    pair q = pair_in(3, nq, 1.0, 0), kv = pair_in(2, nkv, 1.0, 0), o = pair_out(3, no, 0);
    int32_t *ix = malloc(sizeof(int32_t) * (size_t)(T * K));
    for (int64_t i = 0; i < T * K; i++) {
        const double u = la_rng_uniform(&rng);
        ix[i] = u < 0.1 ? -1 : (int32_t)(la_rng_uniform(&rng) * L);
    }
    la_tensor ti, tl16, tl32;
    int64_t ni[2] = {T, K}, nl[2] = {T, Hq};
    la_tensor_init(&ti, ix, LA_I32, LA_DEVICE_CPU, 2, ni);
    float *l16 = nanbuf(T * Hq), *l32 = nanbuf(T * Hq);
    la_tensor_init(&tl16, l16, LA_F32, LA_DEVICE_CPU, 2, nl);
    la_tensor_init(&tl32, l32, LA_F32, LA_DEVICE_CPU, 2, nl);
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    p.dv = Dv;
    CHECK_OK(la_sparse_attention(&p, &q.t16, &kv.t16, &ti, &o.t16, &tl16, ctx));
    CHECK_OK(la_sparse_attention(&p, &q.t32, &kv.t32, &ti, &o.t32, &tl32, ctx));
    char what[160];
    snprintf(what, sizeof what, "sparse_attn T%lld Hq%lld Dqk%lld Dv%lld L%lld k%lld", (long long)T,
             (long long)Hq, (long long)Dqk, (long long)Dv, (long long)L, (long long)K);
    check_pair(what, &o);
    check_f32("sparse_attn lse (f32, same inputs)", l16, l32, T * Hq);
    pair_sync_from16(&o);
    pair g = pair_in(3, no, 1.0, 0), dq = pair_out(3, nq, 0), dkv = pair_out(2, nkv, 0);
    CHECK_OK(la_sparse_attention_backward(&p, &q.t16, &kv.t16, &ti, &o.t16, &tl16, &g.t16, &dq.t16,
                                          &dkv.t16, ctx));
    CHECK_OK(la_sparse_attention_backward(&p, &q.t32, &kv.t32, &ti, &o.t32, &tl16, &g.t32, &dq.t32,
                                          &dkv.t32, ctx));
    char w2[200];
    snprintf(w2, sizeof w2, "%s dq", what);
    check_pair(w2, &dq);
    snprintf(w2, sizeof w2, "%s dkv", what);
    check_pair(w2, &dkv);
    pair_free(&q); pair_free(&kv); pair_free(&o); pair_free(&g); pair_free(&dq); pair_free(&dkv);
    free(ix); free(l16); free(l32);
}

/* ---- indexers: DSA (scores, indices), HISA, block-sparse ---------------------------- */
static double idx_agree(const int32_t *a, const int32_t *b, int64_t n) {
    int64_t same = 0;
    for (int64_t i = 0; i < n; i++) same += a[i] == b[i];
    return n ? (double)same / (double)n : 1.0;
}
static void test_indexers(int64_t T, int64_t HI, int64_t dI, int64_t L, int64_t K) {
    int64_t nq[3] = {T, HI, dI}, nk[2] = {L, dI};
    pair q = pair_in(3, nq, 1.0, 0), k = pair_in(2, nk, 1.0, 0);
    float *w = malloc(sizeof(float) * (size_t)(T * HI));
    for (int64_t i = 0; i < T * HI; i++) w[i] = (float)(la_rng_normal(&rng) / sqrt((double)HI));
    la_tensor tw;
    int64_t nw[2] = {T, HI};
    la_tensor_init(&tw, w, LA_F32, LA_DEVICE_CPU, 2, nw);
    int32_t *i16 = malloc(sizeof(int32_t) * (size_t)(T * K)), *i32 = malloc(sizeof(int32_t) * (size_t)(T * K));
    float *s16 = nanbuf(T * L), *s32 = nanbuf(T * L);
    la_tensor ti16, ti32, ts16, ts32;
    int64_t ni[2] = {T, K}, ns[2] = {T, L};
    la_tensor_init(&ti16, i16, LA_I32, LA_DEVICE_CPU, 2, ni);
    la_tensor_init(&ti32, i32, LA_I32, LA_DEVICE_CPU, 2, ni);
    la_tensor_init(&ts16, s16, LA_F32, LA_DEVICE_CPU, 2, ns);
    la_tensor_init(&ts32, s32, LA_F32, LA_DEVICE_CPU, 2, ns);
    la_index_params p;
    la_index_params_init(&p);
    p.topk = K;
    p.block = 16;
    p.block_topk = 4;
    CHECK_OK(la_dsa_indexer(&p, &q.t16, &k.t16, &tw, NULL, NULL, &ti16, &ts16, ctx));
    CHECK_OK(la_dsa_indexer(&p, &q.t32, &k.t32, &tw, NULL, NULL, &ti32, &ts32, ctx));
    check_f32("dsa scores (f16 q/k vs f32 q/k, same values)", s16, s32, T * L);
    double a = idx_agree(i16, i32, T * K);
    CHECK(a >= 0.99, "dsa indices f16 vs f32: %.4f equal", a);
    CHECK_OK(la_hisa_indexer(&p, &q.t16, &k.t16, &tw, NULL, NULL, &ti16, ctx));
    CHECK_OK(la_hisa_indexer(&p, &q.t32, &k.t32, &tw, NULL, NULL, &ti32, ctx));
    const double ah = idx_agree(i16, i32, T * K);
    CHECK(ah >= 0.99, "hisa indices f16 vs f32: %.4f equal", ah);
    CHECK_OK(la_blocksparse_indexer(&p, &q.t16, &k.t16, &tw, NULL, NULL, &ti16, ctx));
    CHECK_OK(la_blocksparse_indexer(&p, &q.t32, &k.t32, &tw, NULL, NULL, &ti32, ctx));
    const double ab = idx_agree(i16, i32, T * K);
    CHECK(ab >= 0.99, "blocksparse indices f16 vs f32: %.4f equal", ab);
    printf("  indexers T%lld HI%lld dI%lld L%lld k%lld: dsa %.4f hisa %.4f blocksparse %.4f equal\n",
           (long long)T, (long long)HI, (long long)dI, (long long)L, (long long)K, a, ah, ab);
    pair_free(&q); pair_free(&k);
    free(w); free(i16); free(i32); free(s16); free(s32);
}

/* ---- 3. N = 256K, inputs of scale 10 ------------------------------------------------ */
static int64_t nonfinite16(const uint16_t *h, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += (h[i] & 0x7c00) == 0x7c00;
    return bad;
}
static void test_no_overflow(void) {
    const int64_t N = 262144, H = 1, D = 32;
    int64_t nq[4] = {1, N, H, D};
    pair q = pair_in(4, nq, 10.0, 0), k = pair_in(4, nq, 10.0, 0), v = pair_in(4, nq, 10.0, 0);
    uint16_t *o = malloc(sizeof(uint16_t) * (size_t)(N * H * D));
    la_tensor to;
    la_tensor_init(&to, o, LA_F16, LA_DEVICE_CPU, 4, nq);
    const char *names[5] = {"linear", "linear causal", "mhla 1-D 64 blocks", "focused flatten 512x512",
                            "softmax 16 queries"};
    for (int c = 0; c < 5; c++) {
        for (int64_t i = 0; i < N * H * D; i++) o[i] = 0x7e00;
        la_status s;
        int64_t nout = N * H * D;
        if (c < 2) {
            la_linear_params p;
            la_linear_params_init(&p);
            p.causal = c;
            s = la_linear_attention(&p, &q.t16, &k.t16, &v.t16, &to, NULL, NULL, NULL, NULL, ctx);
        } else if (c == 2) {
            la_mhla_params p;
            la_mhla_params_init(&p);
            p.grid_ndim = 1;
            p.grid[0] = N;
            p.blocks[0] = 64;
            float *W = malloc(sizeof(float) * 64 * 64);
            for (int i = 0; i < 64 * 64; i++) W[i] = 1.f / 64;
            la_tensor tw;
            int64_t nw[2] = {64, 64};
            la_tensor_init(&tw, W, LA_F32, LA_DEVICE_CPU, 2, nw);
            s = la_mhla_forward(&p, &q.t16, &k.t16, &v.t16, &tw, &to, ctx);
            free(W);
        } else if (c == 3) {
            la_focused_params p;
            la_focused_params_init(&p);
            p.map_h = p.map_w = 512;
            s = la_focused_attention(&p, &q.t16, &k.t16, &v.t16, NULL, NULL, NULL, NULL, &to, ctx);
        } else {
            la_softmax_params p;
            la_softmax_params_init(&p);
            la_tensor q16 = q.t16, o16 = to;
            q16.ne[1] = o16.ne[1] = 16; /* 16 queries over all 256K keys */
            nout = 16 * H * D;
            s = la_softmax_attention(&p, &q16, &k.t16, &v.t16, &o16, NULL, ctx);
        }
        CHECK(s == LA_OK, "%s f16 N=256K: %s", names[c], la_last_error());
        const int64_t bad = nonfinite16(o, nout);
        CHECK(bad == 0, "%s f16 N=256K inputs x10: %lld non-finite outputs", names[c], (long long)bad);
        printf("  %-40s f16 N=256K inputs x10: %s\n", names[c], bad ? "FAIL (non-finite)" : "finite ok");
    }
    pair_free(&q); pair_free(&k); pair_free(&v);
    free(o);
}

/* ---- a dtype no path takes: LA_ERR_DTYPE naming the argument --------------------------- */
static void test_bad_dtype(void) {
    int64_t ne[4] = {1, 3, 1, 4};
    float x[12] = {0};
    la_tensor q, k, v, o;
    la_tensor_init(&q, x, LA_F16, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&k, x, LA_FP8_E4M3, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&v, x, LA_F16, LA_DEVICE_CPU, 4, ne);
    float out[12];
    for (int i = 0; i < 12; i++) out[i] = NAN;
    la_tensor_init(&o, out, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_softmax_params p;
    la_softmax_params_init(&p);
    CHECK_STATUS(la_softmax_attention(&p, &q, &k, &v, &o, NULL, ctx), LA_ERR_DTYPE);
    CHECK(strncmp(la_last_error(), "k: dtype fp8_e4m3", 17) == 0, "message names k: '%s'", la_last_error());
    la_linear_params lp;
    la_linear_params_init(&lp);
    la_tensor_init(&k, x, LA_F16, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&v, x, LA_I32, LA_DEVICE_CPU, 4, ne);
    CHECK_STATUS(la_linear_attention(&lp, &q, &k, &v, &o, NULL, NULL, NULL, NULL, ctx), LA_ERR_DTYPE);
    CHECK(strncmp(la_last_error(), "v: dtype i32", 12) == 0, "message names v: '%s'", la_last_error());
    int64_t written = 0;
    for (int i = 0; i < 12; i++) written += !isnan(out[i]);
    CHECK(written == 0, "a rejected call wrote %lld outputs", (long long)written);
}

int main(void) {
    rng = la_test_rng("test_f16");
    CHECK_OK(la_context_create(&ctx));
    test_convert();
    test_bad_dtype();
    for (int causal = 0; causal < 2; causal++) {
        test_softmax(1, 1, 1, 1, 1, 16, 16, causal, 0);
        test_softmax(2, 63, 65, 2, 1, 63, 32, causal, 1);
        test_softmax(1, 65, 63, 4, 2, 64, 128, causal, 0);
        test_linear(1, 1, 1, 16, 16, LA_FEATURE_RELU, causal, 1, 1, 0);
        test_linear(2, 63, 2, 17, 32, LA_FEATURE_ELU1, causal, 1, 1, 1);
        test_linear(1, 1000, 2, 64, 32, LA_FEATURE_RELU_EPS, causal, causal, 0, 0);
        test_mhla(causal, 1, 1, 1, 16, 16, 1, 0);
        test_mhla(causal, 2, 63, 2, 17, 32, 7, 1);
        test_mhla(causal, 1, 1000, 1, 64, 64, 16, 0);
    }
    test_decode();
    test_focused(1, 1, 1, 1, 16, 1, 0);
    test_focused(2, 7, 9, 2, 16, 3, 1);
    test_focused(1, 25, 40, 2, 32, 5, 0);
    test_sparse_attn(5, 4, 63, 32, 65, 16);
    test_sparse_attn(3, 16, 128, 64, 300, 100);
    test_indexers(17, 8, 32, 300, 64);
    test_indexers(63, 4, 16, 1000, 128);
    test_no_overflow();
    la_context_destroy(ctx);
    return la_test_finish();
}
