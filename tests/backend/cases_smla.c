/* Case table of sparse MLA attention (SPEC §8) on CUDA, from the former
 * tests/cuda/test_cuda_smla.c: every CUDA path, the library's choice and
 * each variant of family "sparse_attn" forced in turn -- wgmma (wgmma for
 * S = QK^T and P.V) and portable (the exact fp32 kernel) -- against one
 * float64 reference on the same bf16-rounded inputs (the former test also
 * ran the v1 and v2 kernels, removed from src/). Cases: odd Tq, Hq = 16, 80 (partial head
 * group), 64, 128, k = 1, 7, 65, 130, 2048, invalid indices (-1, >= L), a row
 * with all indices invalid, large logits (online-softmax rescaling). */
#include "bo_staging.h"

/* NULL: the library's choice; then each variant of family "sparse_attn"
 * forced in turn */
static const char *paths[] = {NULL, "wgmma", "portable"};
#define PATH_NAME(s) ((s) ? (s) : "default")

typedef struct smla_args {
    int64_t T, Hq, L, K;
    double qscale;
    la_dtype odt;
} smla_args;

static void test_case(const void *arg) {
    const smla_args *A = arg;
    const int64_t T = A->T, Hq = A->Hq, L = A->L, K = A->K;
    const double qscale = A->qscale;
    const la_dtype odt = A->odt;
    const int64_t Dqk = 576, Dv = 512;
    float *q = malloc((size_t)(T * Hq * Dqk) * 4), *kv = malloc((size_t)(L * Dqk) * 4);
    la_fill_normal(&bo_rng, q, T * Hq * Dqk, qscale);
    la_fill_normal(&bo_rng, kv, L * Dqk, 1.0);
    int32_t *ix = malloc((size_t)(T * K) * 4);
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++) {
            double u = la_rng_uniform(&bo_rng);
            int32_t v = (int32_t)(la_rng_uniform(&bo_rng) * L);
            if (u < 0.05) v = -1;
            else if (u < 0.08) v = (int32_t)(L + 3); /* >= L: skipped */
            if (t == T - 1 && T > 1) v = (j & 1) ? -1 : (int32_t)L; /* all invalid */
            if (t == 0 && K > 64 && j >= 64) v = -1; /* only the first tile valid */
            ix[t * K + j] = v;
        }
    dbuf dq = dput(q, T * Hq * Dqk, LA_BF16), dkv = dput(kv, L * Dqk, LA_BF16);
    dbuf di = dput_i32(ix, T * K);
    const size_t oes = la_dtype_size(odt);
    dbuf dout = dalloc((size_t)(T * Hq * Dv) * oes), dl = dalloc((size_t)(T * Hq) * 4);

    /* float64 reference */
    double *oref = malloc((size_t)(T * Hq * Dv) * 8), *lref = malloc((size_t)(T * Hq) * 8);
    double *sc = malloc((size_t)K * 8);
    const double scale = 1.0 / sqrt((double)Dqk);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hq; h++) {
            double mx = -INFINITY;
            for (int64_t j = 0; j < K; j++) {
                int32_t s = ix[t * K + j];
                sc[j] = -INFINITY;
                if (s < 0 || s >= L) continue;
                double dot = 0;
                for (int64_t d = 0; d < Dqk; d++) dot += (double)q[(t * Hq + h) * Dqk + d] * kv[s * Dqk + d];
                sc[j] = dot * scale;
                if (sc[j] > mx) mx = sc[j];
            }
            double l = 0, *o = oref + (t * Hq + h) * Dv;
            for (int64_t d = 0; d < Dv; d++) o[d] = 0;
            for (int64_t j = 0; j < K; j++) {
                if (isinf(sc[j])) continue;
                double pj = exp(sc[j] - mx);
                l += pj;
                int32_t s = ix[t * K + j];
                for (int64_t d = 0; d < Dv; d++) o[d] += pj * kv[s * Dqk + d];
            }
            for (int64_t d = 0; d < Dv; d++) o[d] = l > 0 ? o[d] / l : 0.0;
            lref[t * Hq + h] = l > 0 ? mx + log(l) : -INFINITY;
        }

    float *og = malloc((size_t)(T * Hq * Dv) * 4), *lg = malloc((size_t)(T * Hq) * 4);
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        if (paths[pi] && !bo_use_variant("sparse_attn", paths[pi])) continue;
        la_dev_memset(dout.d, 0xff, dout.bytes); /* NaN: unwritten outputs show */
        la_dev_memset(dl.d, 0xff, dl.bytes);
        la_tensor tq, tkv, ti, to, tl;
        tset(&tq, dq.d, LA_BF16, LA_DEVICE_CUDA, 3, T, Hq, Dqk);
        tset(&tkv, dkv.d, LA_BF16, LA_DEVICE_CUDA, 2, L, Dqk, 0);
        tset(&ti, di.d, LA_I32, LA_DEVICE_CUDA, 2, T, K, 0);
        tset(&to, dout.d, odt, LA_DEVICE_CUDA, 3, T, Hq, Dv);
        tset(&tl, dl.d, LA_F32, LA_DEVICE_CUDA, 2, T, Hq, 0);
        la_sparse_attn_params p;
        la_sparse_attn_params_init(&p);
        p.dv = Dv;
        if (!CHECK_DEV(la_sparse_attention(&p, &tq, &tkv, &ti, &to, &tl, bo_ctx()))) continue;
        dget_f32(og, &dout, T * Hq * Dv, odt);
        dget_f32(lg, &dl, T * Hq, LA_F32);
        bool finite = true;
        for (int64_t i = 0; i < T * Hq * Dv; i++) finite &= isfinite(og[i]) != 0;
        double eo = finite ? la_rel_err(og, oref, T * Hq * Dv) : INFINITY;
        double el = 0;
        bool lse_ok = true;
        for (int64_t i = 0; i < T * Hq; i++) {
            if (isinf(lref[i])) {
                lse_ok &= isinf(lg[i]) && lg[i] < 0;
                continue;
            }
            if (!isfinite(lg[i])) lse_ok = false;
            else if (fabs(lg[i] - lref[i]) > el) el = fabs(lg[i] - lref[i]);
        }
        bool zero = true;
        if (T > 1)
            for (int64_t i = (T - 1) * Hq * Dv; i < T * Hq * Dv; i++) zero &= og[i] == 0.f;
        const double tol = paths[pi] && !strcmp(paths[pi], "portable") && odt == LA_F32 ? 1e-4 : 1e-2;
        CHECK(eo <= tol && lse_ok && el <= 1e-3 && zero,
              "smla %-5s T=%lld Hq=%lld L=%lld k=%lld qs=%.0f %s: out rel %.3g lse %.3g ok=%d zero=%d",
              PATH_NAME(paths[pi]), (long long)T, (long long)Hq, (long long)L, (long long)K, qscale,
              la_dtype_name(odt), eo, el, (int)lse_ok, (int)zero);
        printf("  smla %-5s T=%lld Hq=%lld L=%lld k=%lld qs=%.0f %s: out rel %.2e lse %.2e\n", PATH_NAME(paths[pi]),
               (long long)T, (long long)Hq, (long long)L, (long long)K, qscale, la_dtype_name(odt), eo, el);
    }
    bo_use_variant("sparse_attn", NULL);
    dfree(&dq); dfree(&dkv); dfree(&di); dfree(&dout); dfree(&dl);
    free(q); free(kv); free(ix); free(og); free(lg); free(oref); free(lref); free(sc);
}


/* The smallest call through the family's kernel choice. */
static la_status probe(la_context *ctx) {
    const int64_t T = 1, Hq = 16, L = 4, K = 4, Dqk = 576, Dv = 512;
    dbuf dq = dalloc((size_t)(T * Hq * Dqk) * 2), dkv = dalloc((size_t)(L * Dqk) * 2);
    int32_t ix[4] = {0, 1, 2, 3};
    dbuf di = dput_i32(ix, T * K);
    dbuf dout = dalloc((size_t)(T * Hq * Dv) * 2);
    la_dev_memset(dq.d, 0, dq.bytes);
    la_dev_memset(dkv.d, 0, dkv.bytes);
    la_tensor tq, tkv, ti, to;
    tset(&tq, dq.d, LA_BF16, LA_DEVICE_CUDA, 3, T, Hq, Dqk);
    tset(&tkv, dkv.d, LA_BF16, LA_DEVICE_CUDA, 2, L, Dqk, 0);
    tset(&ti, di.d, LA_I32, LA_DEVICE_CUDA, 2, T, K, 0);
    tset(&to, dout.d, LA_BF16, LA_DEVICE_CUDA, 3, T, Hq, Dv);
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    p.dv = Dv;
    const la_status s = la_sparse_attention(&p, &tq, &tkv, &ti, &to, NULL, ctx);
    la_dev_synchronize();
    dfree(&dq); dfree(&dkv); dfree(&di); dfree(&dout);
    return s;
}

#define SMLA(SMALL, ...)                                                                        \
    do {                                                                                        \
        const smla_args a_ = {__VA_ARGS__};                                                     \
        const bo_opts o_ = {"sparse_attn", BO_CUDA, (SMALL), NULL, NULL, NULL};                 \
        bo_add(L, &o_, test_case, &a_, sizeof a_, "smla(" #__VA_ARGS__ ")");                     \
    } while (0)

void cases_smla(bo_list *L) {
    bo_add_probe(L, "sparse_attn", probe);
    /* small, T, Hq, L, k, q scale, out dtype */
    SMLA(1, 1, 64, 300, 1, 1.0, LA_BF16);
    SMLA(1, 3, 16, 50, 1, 1.0, LA_BF16);
    SMLA(1, 7, 16, 50, 7, 1.0, LA_BF16);
    SMLA(1, 3, 64, 300, 100, 1.0, LA_BF16);
    SMLA(1, 5, 80, 1000, 65, 1.0, LA_BF16);   /* partial head group, tile of 1 */
    SMLA(1, 9, 128, 1000, 130, 4.0, LA_F32);  /* large logits, f32 out */
    SMLA(1, 3, 64, 300, 100, 1.0, LA_F16);    /* f16 out: the portable kernel */
    SMLA(1, 4, 128, 3000, 64, 1.0, LA_BF16);
    SMLA(0, 5, 128, 5000, 2048, 1.0, LA_BF16);
    SMLA(0, 3, 64, 70000, 2048, 3.0, LA_BF16);
}
