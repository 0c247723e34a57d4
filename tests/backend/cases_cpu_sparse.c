/* Case table of the sparse family's CPU path against float64 references
 * (backend BO_CPU): top-k (ties, -inf, NaN / +inf, strided rows), the DSA
 * indexer (scores, index rows, recall) and sparse attention (invalid
 * indices, a row without a valid one, GQA), f32, bf16 and f16, outputs poisoned
 * before the call; the bound as in cases_cpu.c (cpu_check.h). */
#include "cpu_check.h"

/* ---- top-k ------------------------------------------------------------------------- */
typedef struct topk_args {
    int64_t R, L, k;
    int kind;    /* 0 normal, 1 quantized ties, 2 mostly -inf (fewer than k valid), 3 NaN / +inf */
    int strided; /* rows with a column stride of 3 */
} topk_args;

static void cpu_topk(const void *arg) {
    const topk_args *a = arg;
    const int64_t R = a->R, L = a->L, K = a->k, cs = a->strided ? 3 : 1;
    float *x = malloc(4 * (size_t)(R * L * cs));
    for (int64_t i = 0; i < R * L * cs; i++) {
        const double u = la_rng_normal(&bo_rng);
        x[i] = a->kind == 1 ? (float)floor(u * 4) : (float)u;
        if (la_rng_uniform(&bo_rng) < 0.1) x[i] = -INFINITY;
        if (a->kind == 2 && la_rng_uniform(&bo_rng) < 0.98) x[i] = -INFINITY;
        if (a->kind == 3) {
            const double w = la_rng_uniform(&bo_rng);
            if (w < 0.01) x[i] = NAN;
            else if (w < 0.015) x[i] = INFINITY;
        }
    }
    int64_t ne[2] = {R, L}, nb[2] = {L * cs, cs};
    la_tensor ts, ti;
    la_tensor_init_strided(&ts, x, LA_F32, LA_DEVICE_CPU, 2, ne, nb);
    int32_t *idx = malloc(4 * (size_t)(R * K)), *want = malloc(4 * (size_t)K);
    memset(idx, 0x7f, 4 * (size_t)(R * K)); /* poisoned: out of range */
    int64_t ni[2] = {R, K};
    la_tensor_init(&ti, idx, LA_I32, LA_DEVICE_CPU, 2, ni);
    CHECK_OK(la_topk(&ts, &ti, bo_ctx()));
    double *row = malloc(8 * (size_t)L);
    int64_t bad = 0;
    for (int64_t r = 0; r < R; r++) {
        for (int64_t c = 0; c < L; c++) row[c] = x[(r * L + c) * cs];
        ref_topk(row, NULL, L, K, want);
        bad += memcmp(want, idx + r * K, 4 * (size_t)K) != 0;
    }
    CHECK(bad == 0, "topk: %lld of %lld rows differ from the float64 reference", (long long)bad,
          (long long)R);
    printf("  %-40s %lld of %lld rows differ %s\n", "idx vs the reference top-k", (long long)bad,
           (long long)R, bad ? "FAIL" : "ok");
    free(x); free(idx); free(want); free(row);
}

/* ---- DSA indexer -------------------------------------------------------------------- */
typedef struct dsa_args {
    int64_t T, HI, dI, L, K;
    la_dtype dt;
} dsa_args;

static void cpu_dsa(const void *arg) {
    const dsa_args *a = arg;
    const int64_t T = a->T, HI = a->HI, dI = a->dI, L = a->L, K = a->K;
    float *q = rand_rounded(T * HI * dI, 1.0, a->dt), *k = rand_rounded(L * dI, 1.0, a->dt),
          *w = rand_rounded(T * HI, 1.0 / sqrt((double)HI * dI), LA_F32);
    la_tensor tq, tk, tw, ti, tsc;
    hview hq = make_view(q, 3, (int64_t[]){T, HI, dI}, a->dt, 0);
    hview hk = make_view(k, 3, (int64_t[]){1, L, dI}, a->dt, 0);
    tq = hq.t;
    la_tensor_init(&tk, hk.buf, a->dt, LA_DEVICE_CPU, 2, (int64_t[]){L, dI});
    la_tensor_init(&tw, w, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){T, HI});
    int32_t *idx = malloc(4 * (size_t)(T * K));
    float *sc = malloc(4 * (size_t)(T * L));
    memset(idx, 0x7f, 4 * (size_t)(T * K));
    la_fill_nan(sc, T * L);
    la_tensor_init(&ti, idx, LA_I32, LA_DEVICE_CPU, 2, (int64_t[]){T, K});
    la_tensor_init(&tsc, sc, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){T, L});
    la_index_params p;
    la_index_params_init(&p);
    p.topk = K;
    CHECK_OK(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, &tsc, bo_ctx()));
    const ref_idx_in in = {T, HI, dI, L, q, k, w};
    double *ref = malloc(8 * (size_t)(T * L)), *mag = malloc(8 * (size_t)(T * L));
    int64_t bad_rows = 0, hits = 0, tot = 0;
    int32_t *want = malloc(4 * (size_t)K);
    for (int64_t t = 0; t < T; t++) {
        int64_t lo, hi;
        ref_causal(T, L, t, &lo, &hi);
        for (int64_t s = 0; s < L; s++) {
            ref[t * L + s] = s >= lo && s < hi ? ref_score(&in, t, s) : -INFINITY;
            double m = 0;
            if (s >= lo && s < hi)
                for (int64_t h = 0; h < HI; h++) {
                    double d = 0;
                    for (int64_t i = 0; i < dI; i++) d += (double)q[(t * HI + h) * dI + i] * k[s * dI + i];
                    m += fabs((double)w[t * HI + h]) * (d > 0 ? d : 0);
                }
            mag[t * L + s] = m;
        }
        ref_topk(ref + t * L, NULL, L, K, want);
        for (int64_t j = 0; j < K; j++) {
            if (want[j] < 0) continue;
            tot++;
            for (int64_t i = 0; i < K; i++) hits += idx[t * K + i] == want[j];
        }
    }
    const double e = score_err_mag(sc, ref, mag, T * L);
    CHECK(e <= 1e-5, "dsa scores: rel err %.3g > 1e-5", e);
    char msg[160] = "";
    bad_rows = check_own_topk(idx, sc, T, L, K, NULL, NULL, msg, sizeof msg);
    CHECK(bad_rows == 0, "dsa idx: %lld rows are not the top-k of the returned scores (%s)",
          (long long)bad_rows, msg);
    const double rc = tot ? (double)hits / (double)tot : 1.0;
    CHECK(rc >= 0.99, "dsa idx: recall %.4f vs the float64 top-k", rc);
    printf("  %-40s score rel %.2e, recall vs float64 %.4f %s\n", "scores, idx", e, rc,
           e <= 1e-5 && bad_rows == 0 && rc >= 0.99 ? "ok" : "FAIL");
    free(q); free(k); free(w); free(idx); free(sc); free(ref); free(mag); free(want);
    free(hq.buf); free(hk.buf);
}

/* ---- sparse attention ------------------------------------------------------------------ */
typedef struct sa_args {
    int64_t T, Hq, Hkv, Dqk, Dv, L, K;
    la_dtype dt;
} sa_args;

#define SPARSE_REF(TY, NAME)                                                                     \
    static void NAME(const sa_args *a, const float *q, const float *kv, const int32_t *ix,       \
                     double *o, double *lse) {                                                   \
        TY *sc = malloc(sizeof(TY) * (size_t)a->K), *acc = malloc(sizeof(TY) * (size_t)a->Dv);   \
        const TY scale = (TY)(1.0 / sqrt((double)a->Dqk));                                      \
        for (int64_t t = 0; t < a->T; t++)                                                       \
            for (int64_t h = 0; h < a->Hq; h++) {                                                \
                const int64_t hk = h * a->Hkv / a->Hq, r = t * a->Hq + h;                        \
                TY mx = -INFINITY, l = 0;                                                        \
                for (int64_t j = 0; j < a->K; j++) {                                             \
                    const int32_t s = ix[t * a->K + j];                                          \
                    sc[j] = -INFINITY;                                                           \
                    if (s < 0 || s >= a->L) continue;                                            \
                    TY dot = 0;                                                                  \
                    for (int64_t d = 0; d < a->Dqk; d++)                                         \
                        dot += (TY)q[r * a->Dqk + d] * (TY)kv[(s * a->Hkv + hk) * a->Dqk + d];   \
                    sc[j] = dot * scale;                                                         \
                    if (sc[j] > mx) mx = sc[j];                                                  \
                }                                                                                \
                for (int64_t e = 0; e < a->Dv; e++) acc[e] = 0;                                  \
                for (int64_t j = 0; j < a->K; j++) {                                             \
                    if (isinf(sc[j])) continue;                                                  \
                    const TY pj = (TY)exp((double)(sc[j] - mx));                                 \
                    const int32_t s = ix[t * a->K + j];                                          \
                    l += pj;                                                                     \
                    for (int64_t e = 0; e < a->Dv; e++)                                          \
                        acc[e] += pj * (TY)kv[(s * a->Hkv + hk) * a->Dqk + e];                   \
                }                                                                                \
                for (int64_t e = 0; e < a->Dv; e++) o[r * a->Dv + e] = l > 0 ? acc[e] / l : 0;   \
                lse[r] = l > 0 ? (double)mx + log((double)l) : -INFINITY;                        \
            }                                                                                    \
        free(sc);                                                                                \
        free(acc);                                                                               \
    }
SPARSE_REF(double, ref_sparse64)
SPARSE_REF(float, ref_sparse32)

static void cpu_sparse_attn(const void *arg) {
    const sa_args *a = arg;
    const int64_t T = a->T, Hq = a->Hq, Hkv = a->Hkv, Dqk = a->Dqk, Dv = a->Dv, L = a->L, K = a->K;
    float *q = rand_rounded(T * Hq * Dqk, 1.0, a->dt), *kv = rand_rounded(L * Hkv * Dqk, 1.0, a->dt);
    int32_t *ix = malloc(4 * (size_t)(T * K));
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++) {
            const double u = la_rng_uniform(&bo_rng);
            int32_t s = (int32_t)(la_rng_uniform(&bo_rng) * L);
            if (u < 0.05) s = -1;
            else if (u < 0.08) s = (int32_t)(L + 3); /* >= L: skipped */
            if (t == T - 1 && T > 1) s = (j & 1) ? -1 : (int32_t)L; /* a row with no valid index */
            ix[t * K + j] = s;
        }
    hview hq = make_view(q, 3, (int64_t[]){T, Hq, Dqk}, a->dt, 0);
    hview hkv = make_view(kv, 3, (int64_t[]){L, Hkv, Dqk}, a->dt, 0);
    hview ho = make_view(NULL, 3, (int64_t[]){T, Hq, Dv}, a->dt, 0);
    hview hl = make_view(NULL, 3, (int64_t[]){1, T, Hq}, LA_F32, 0);
    la_tensor tkv, ti, tl;
    if (Hkv == 1) la_tensor_init(&tkv, hkv.buf, a->dt, LA_DEVICE_CPU, 2, (int64_t[]){L, Dqk});
    else tkv = hkv.t;
    la_tensor_init(&ti, ix, LA_I32, LA_DEVICE_CPU, 2, (int64_t[]){T, K});
    la_tensor_init(&tl, hl.buf, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){T, Hq});
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    p.dv = Dv;
    CHECK_OK(la_sparse_attention(&p, &hq.t, &tkv, &ti, &ho.t, &tl, bo_ctx()));
    const int64_t Eo = T * Hq * Dv;
    double *o64 = malloc(8 * (size_t)Eo), *o32 = malloc(8 * (size_t)Eo), *l64 = malloc(8 * (size_t)(T * Hq)),
           *l32 = malloc(8 * (size_t)(T * Hq));
    ref_sparse64(a, q, kv, ix, o64, l64);
    ref_sparse32(a, q, kv, ix, o32, l32);
    float *g = malloc(4 * (size_t)Eo), *gl = malloc(4 * (size_t)(T * Hq));
    read_view(&ho, g);
    read_view(&hl, gl);
    check_out("out", g, o64, o32, Eo, a->dt);
    int64_t lbad = 0;
    double lerr = 0;
    for (int64_t i = 0; i < T * Hq; i++) {
        if (isinf(l64[i])) {
            lbad += !(isinf(gl[i]) && gl[i] < 0);
            continue;
        }
        if (!isfinite(gl[i])) lbad++;
        else lerr = fmax(lerr, fabs(gl[i] - l64[i]) / fmax(1.0, fabs(l64[i])));
    }
    CHECK(lbad == 0 && lerr <= 1e-5, "lse: %lld mismatched, max err %.3g", (long long)lbad, lerr);
    free(q); free(kv); free(ix); free(o64); free(o32); free(l64); free(l32); free(g); free(gl);
    free(hq.buf); free(hkv.buf); free(ho.buf); free(hl.buf);
}

/* ---- the table ---------------------------------------------------------------------------- */
void cases_cpu_sparse(bo_list *L) {
    /* top-k: R, L, k, kind, strided */
    CPU_CASE("topk", cpu_topk, topk_args, 3, 1, 1, 0, 0);
    CPU_CASE("topk", cpu_topk, topk_args, 5, 63, 16, 1, 0);
    CPU_CASE("topk", cpu_topk, topk_args, 7, 65, 100, 0, 1);
    CPU_CASE("topk", cpu_topk, topk_args, 4, 1000, 64, 3, 1);
    CPU_CASE("topk", cpu_topk, topk_args, 3, 9000, 300, 0, 0);
    CPU_CASE("topk", cpu_topk, topk_args, 2, 4100, 2048, 2, 0);
    /* dsa: T, HI, dI, L, k, dtype */
    CPU_CASE("dsa", cpu_dsa, dsa_args, 1, 1, 16, 1, 4, LA_F32);
    CPU_CASE("dsa", cpu_dsa, dsa_args, 63, 4, 16, 65, 16, LA_F32);
    CPU_CASE("dsa", cpu_dsa, dsa_args, 65, 3, 63, 1000, 64, LA_F32);
    CPU_CASE("dsa", cpu_dsa, dsa_args, 17, 8, 32, 300, 512, LA_BF16);
    CPU_CASE("dsa", cpu_dsa, dsa_args, 17, 8, 32, 300, 512, LA_F16);
    /* sparse attention: T, Hq, Hkv, Dqk, Dv, L, k, dtype */
    CPU_CASE("sparse_attn", cpu_sparse_attn, sa_args, 2, 3, 1, 16, 1, 10, 7, LA_F32);
    CPU_CASE("sparse_attn", cpu_sparse_attn, sa_args, 4, 4, 2, 63, 16, 65, 33, LA_F32);
    CPU_CASE("sparse_attn", cpu_sparse_attn, sa_args, 3, 16, 1, 128, 64, 300, 100, LA_BF16);
    CPU_CASE("sparse_attn", cpu_sparse_attn, sa_args, 3, 16, 1, 128, 64, 300, 100, LA_F16);
    CPU_CASE("sparse_attn", cpu_sparse_attn, sa_args, 5, 8, 1, 576, 512, 1000, 65, LA_F32);
}
