/* NaN in the sparse family on the CPU (SPEC §6–§8):
 *   - top-k ranks NaN first (above +inf, as torch.topk), NaN among NaN and
 *     equal values to the lower index, −inf never selected;
 *   - the indexers' ReLU(q·k) propagates NaN: a NaN key s scores NaN for every
 *     query whose range holds it, so s is selected first (DSA, HISA,
 *     block-sparse, the decode cache); a NaN query scores NaN everywhere;
 *   - an infinite key coordinate gives the score of the float64 formula
 *     (+inf or finite), never a NaN from the padded heads of the kernel;
 *   - sparse attention: a NaN in q[t,h] or in a selected kv row gives NaN out
 *     and NaN lse, other rows stay finite, and a row with no valid index
 *     still gives o = 0 and lse = −inf. */
#include "sparse_ref.h"

/* ---- top-k ------------------------------------------------------------------ */
static void topk_small(la_context *ctx) {
    const float nan = NAN, inf = INFINITY;
    /* NaN (either sign), +inf, ties, −inf */
    float row[10] = {1.f, nan, inf, 1.f, -nan, -inf, 3.f, nan, 2.f, inf};
    const int32_t want[10] = {1, 4, 7, 2, 9, 6, 8, 0, 3, -1};
    for (int dti = 0; dti < 3; dti++) {
        const la_dtype dt = dti == 0 ? LA_F32 : dti == 1 ? LA_F64 : LA_BF16;
        double d64[10];
        uint16_t b16[10];
        for (int i = 0; i < 10; i++) {
            d64[i] = row[i];
            uint32_t u;
            memcpy(&u, &row[i], 4);
            b16[i] = (uint16_t)(u >> 16);
        }
        void *data = dt == LA_F32 ? (void *)row : dt == LA_F64 ? (void *)d64 : (void *)b16;
        for (int64_t k = 1; k <= 10; k++) {
            int32_t out[10];
            for (int i = 0; i < 10; i++) out[i] = -7;
            la_tensor ts, ti;
            la_tensor_init(&ts, data, dt, LA_DEVICE_CPU, 2, (int64_t[]){1, 10});
            la_tensor_init(&ti, out, LA_I32, LA_DEVICE_CPU, 2, (int64_t[]){1, k});
            CHECK_OK(la_topk(&ts, &ti, ctx));
            int ok = 1;
            for (int64_t j = 0; j < k; j++) ok &= out[j] == want[j];
            for (int64_t j = k; j < 10; j++) ok &= out[j] == -7;
            CHECK(ok, "topk %s k=%lld: got %d %d %d %d ..., want %d %d %d %d ...", la_dtype_name(dt),
                  (long long)k, out[0], out[1], out[2], out[3], want[0], want[1], want[2], want[3]);
        }
    }
}

/* Long rows (the sampled-threshold path): a few NaN, +inf, many NaN, all NaN,
 * NaN and −inf only; against the plain sort of sparse_ref.h. */
static void topk_long(la_rng *r, la_context *ctx) {
    const int64_t L = 20000, K = 300;
    float *x = malloc(sizeof(float) * (size_t)L);
    double *xd = malloc(sizeof(double) * (size_t)L);
    int32_t *out = malloc(sizeof(int32_t) * (size_t)K), *ref = malloc(sizeof(int32_t) * (size_t)K);
    for (int kind = 0; kind < 4; kind++) {
        for (int64_t i = 0; i < L; i++) {
            const double u = la_rng_uniform(r);
            if (kind == 0) x[i] = i == 123 || i == 5000 || i == L - 1 ? NAN : i == 77 ? INFINITY : (float)la_rng_normal(r);
            if (kind == 1) x[i] = u < 0.01 ? NAN : (u < 0.02 ? INFINITY : (float)la_rng_normal(r));
            if (kind == 2) x[i] = NAN;
            if (kind == 3) x[i] = u < 0.5 ? -INFINITY : (u < 0.505 ? NAN : -INFINITY);
            xd[i] = x[i];
        }
        la_tensor ts, ti;
        la_tensor_init(&ts, x, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){1, L});
        la_tensor_init(&ti, out, LA_I32, LA_DEVICE_CPU, 2, (int64_t[]){1, K});
        CHECK_OK(la_topk(&ts, &ti, ctx));
        ref_topk(xd, NULL, L, K, ref);
        int64_t bad = -1;
        for (int64_t j = 0; j < K && bad < 0; j++)
            if (out[j] != ref[j]) bad = j;
        CHECK(bad < 0, "topk long row kind %d: position %lld got %d want %d", kind, (long long)bad,
              bad < 0 ? 0 : out[bad], bad < 0 ? 0 : ref[bad]);
    }
    free(x);
    free(xd);
    free(out);
    free(ref);
}

/* ---- indexers ---------------------------------------------------------------- */
#define IT 6
#define IHI 3 /* not a multiple of the kernel's head group: padded heads */
#define IDI 16
#define IL 100
#define IK 8
#define S_NAN 50
#define S_INF 60

typedef struct idx_case {
    float q[IT * IHI * IDI], k[IL * IDI], w[IT * IHI];
    la_tensor tq, tk, tw;
} idx_case;

static void idx_setup(idx_case *c, la_rng *r, int nan_q) {
    la_fill_normal(r, c->q, IT * IHI * IDI, 1.0);
    la_fill_normal(r, c->k, IL * IDI, 1.0);
    for (int64_t i = 0; i < IT * IHI; i++) c->w[i] = 0.1f + (float)la_rng_uniform(r); /* > 0 */
    c->k[S_NAN * IDI + 4] = NAN;
    c->k[S_INF * IDI + 2] = INFINITY; /* one coordinate: q·k = ±inf per head */
    for (int64_t t = 0; t < IT; t++) /* head 0 sees +inf: the score is +inf */
        c->q[(t * IHI + 0) * IDI + 2] = 0.5f + fabsf(c->q[(t * IHI + 0) * IDI + 2]);
    if (nan_q) c->q[(2 * IHI + 1) * IDI + 5] = NAN; /* query 2, head 1 */
    la_tensor_init(&c->tq, c->q, LA_F32, LA_DEVICE_CPU, 3, (int64_t[]){IT, IHI, IDI});
    la_tensor_init(&c->tk, c->k, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){IL, IDI});
    la_tensor_init(&c->tw, c->w, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){IT, IHI});
}

/* The float64 score of §6 with NaN propagated (ref_score of sparse_ref.h). */
static double idx_ref(const idx_case *c, int64_t t, int64_t s) {
    const ref_idx_in in = {IT, IHI, IDI, IL, c->q, c->k, c->w};
    return ref_score(&in, t, s);
}

static void dsa_nan(la_rng *r, la_context *ctx) {
    for (int nan_q = 0; nan_q < 2; nan_q++) {
        idx_case *c = malloc(sizeof *c);
        idx_setup(c, r, nan_q);
        int32_t idx[IT * IK];
        float sc[IT * IL];
        la_tensor ti, tsc;
        la_tensor_init(&ti, idx, LA_I32, LA_DEVICE_CPU, 2, (int64_t[]){IT, IK});
        la_tensor_init(&tsc, sc, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){IT, IL});
        la_index_params p;
        la_index_params_init(&p);
        p.topk = IK;
        CHECK_OK(la_dsa_indexer(&p, &c->tq, &c->tk, &c->tw, NULL, NULL, &ti, &tsc, ctx));
        int64_t bad = -1;
        for (int64_t t = 0; t < IT && bad < 0; t++) {
            const int64_t end = IL - IT + t + 1;
            for (int64_t s = 0; s < end && bad < 0; s++) {
                const double ref = idx_ref(c, t, s);
                const float got = sc[t * IL + s];
                if (isnan(ref) != isnan(got) || (isinf(ref) && got != ref) ||
                    (isfinite(ref) && fabs(got - ref) > 1e-4 * (1 + fabs(ref))))
                    bad = t * IL + s;
            }
        }
        CHECK(bad < 0, "dsa scores (NaN q: %d): score [%lld,%lld] is %g, reference %g", nan_q,
              (long long)(bad / IL), (long long)(bad % IL), bad < 0 ? 0.0 : (double)sc[bad],
              bad < 0 ? 0.0 : idx_ref(c, bad / IL, bad % IL));
        CHECK(idx_ref(c, 0, S_INF) == INFINITY && sc[S_INF] == INFINITY,
              "dsa: the +inf key scores %g (reference %g)", (double)sc[S_INF], idx_ref(c, 0, S_INF));
        for (int64_t t = 0; t < IT; t++) {
            if (nan_q && t == 2) { /* every score NaN: the range in index order */
                int ok = 1;
                for (int64_t j = 0; j < IK; j++) ok &= idx[t * IK + j] == j;
                CHECK(ok, "dsa NaN query: idx row %d %d %d ..., want 0 1 2 ...", idx[t * IK], idx[t * IK + 1],
                      idx[t * IK + 2]);
            } else {
                CHECK(idx[t * IK] == S_NAN, "dsa: query %lld first index %d, want the NaN key %d", (long long)t,
                      idx[t * IK], S_NAN);
            }
        }
        free(c);
    }
}

/* Whether idx row t (n entries) holds s. */
static int row_has(const int32_t *row, int64_t n, int32_t s) {
    for (int64_t j = 0; j < n; j++)
        if (row[j] == s) return 1;
    return 0;
}

static void hisa_nan(la_rng *r, la_context *ctx) {
    for (int nan_q = 0; nan_q < 2; nan_q++)
        for (int mode = 0; mode < 3; mode++) { /* hisa, block-sparse, decode cache */
            idx_case *c = malloc(sizeof *c);
            idx_setup(c, r, nan_q);
            la_index_params p;
            la_index_params_init(&p);
            p.block = 16, p.block_topk = 3, p.topk = mode == 1 ? 32 : IK;
            int32_t idx[IT * 32];
            for (int64_t i = 0; i < IT * 32; i++) idx[i] = -7;
            la_tensor ti;
            la_tensor_init(&ti, idx, LA_I32, LA_DEVICE_CPU, 2, (int64_t[]){IT, p.topk});
            if (mode == 0) CHECK_OK(la_hisa_indexer(&p, &c->tq, &c->tk, &c->tw, NULL, NULL, &ti, ctx));
            if (mode == 1) CHECK_OK(la_blocksparse_indexer(&p, &c->tq, &c->tk, &c->tw, NULL, NULL, &ti, ctx));
            if (mode == 2) {
                la_index_cache *cache = NULL;
                CHECK_OK(la_index_cache_create(IDI, p.block, IL, &cache));
                CHECK_OK(la_index_cache_append(cache, &c->tk));
                CHECK_OK(la_index_cache_hisa(cache, &p, &c->tq, &c->tw, NULL, NULL, &ti, ctx));
                la_index_cache_destroy(cache);
            }
            const char *name = mode == 0 ? "hisa" : mode == 1 ? "blocksparse" : "index cache";
            for (int64_t t = 0; t < IT; t++) {
                const int32_t *row = idx + t * p.topk;
                int valid = 1;
                for (int64_t j = 0; j < p.topk; j++) valid &= row[j] >= 0 && row[j] < IL;
                CHECK(valid, "%s (NaN q: %d): query %lld has an index outside [0, L) or unwritten", name, nan_q,
                      (long long)t);
                if (nan_q && t == 2) continue; /* every score NaN: any block order */
                if (mode == 1)
                    CHECK(row_has(row, p.topk, S_NAN), "%s: query %lld does not keep the NaN key's block", name,
                          (long long)t);
                else
                    CHECK(row[0] == S_NAN, "%s: query %lld first index %d, want the NaN key %d", name,
                          (long long)t, row[0], S_NAN);
            }
            free(c);
        }
}

/* ---- sparse attention ---------------------------------------------------------- */
static void sparse_attn_nan(la_rng *r, la_context *ctx) {
    enum { T = 5, HQ = 2, DQK = 32, DV = 16, L = 20, KS = 4 };
    float q[T * HQ * DQK], kv[L * DQK], out[T * HQ * DV], lse[T * HQ];
    int32_t idx[T * KS] = {0, 3, 5, 9,  /* t=0 */
                           1, 2, 4, 6,  /* t=1: NaN in q[1,0] */
                           7, 8, 11, 2, /* t=2: selects the NaN row 7 */
                           -1, -1, 25, -1, /* t=3: no valid index */
                           10, 12, 13, 14};
    la_fill_normal(r, q, T * HQ * DQK, 1.0);
    la_fill_normal(r, kv, L * DQK, 1.0);
    q[(1 * HQ + 0) * DQK + 9] = NAN;
    kv[7 * DQK + 20] = NAN; /* a key column past dv: reaches out through the scores */
    la_fill_nan(out, T * HQ * DV);
    la_fill_nan(lse, T * HQ);
    la_tensor tq, tkv, ti, to, tl;
    la_tensor_init(&tq, q, LA_F32, LA_DEVICE_CPU, 3, (int64_t[]){T, HQ, DQK});
    la_tensor_init(&tkv, kv, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){L, DQK});
    la_tensor_init(&ti, idx, LA_I32, LA_DEVICE_CPU, 2, (int64_t[]){T, KS});
    la_tensor_init(&to, out, LA_F32, LA_DEVICE_CPU, 3, (int64_t[]){T, HQ, DV});
    la_tensor_init(&tl, lse, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){T, HQ});
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    p.dv = DV;
    CHECK_OK(la_sparse_attention(&p, &tq, &tkv, &ti, &to, &tl, ctx));
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < HQ; h++) {
            const int want_nan = (t == 1 && h == 0) || t == 2;
            int ok = 1;
            for (int64_t d = 0; d < DV; d++) {
                const float o = out[(t * HQ + h) * DV + d];
                if (t == 3) ok &= o == 0.f;
                else ok &= want_nan ? isnan(o) : isfinite(o);
            }
            const float l = lse[t * HQ + h];
            if (t == 3) ok &= l == -INFINITY;
            else ok &= want_nan ? isnan(l) : isfinite(l);
            CHECK(ok, "sparse-attn row (%lld,%lld): want %s, got out[0] %g lse %g", (long long)t, (long long)h,
                  t == 3 ? "o = 0, lse = -inf" : want_nan ? "NaN" : "finite", (double)out[(t * HQ + h) * DV],
                  (double)l);
        }
}

int main(void) {
    la_rng r = la_test_rng("test_nan_sparse");
    la_context *ctx = NULL;
    CHECK_OK(la_context_create(&ctx));
    CHECK_OK(la_context_set_threads(ctx, 2));
    topk_small(ctx);
    topk_long(&r, ctx);
    dsa_nan(&r, ctx);
    hisa_nan(&r, ctx);
    sparse_attn_nan(&r, ctx);
    la_context_destroy(ctx);
    return la_test_finish();
}
