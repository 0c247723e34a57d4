/* Case table of the short-row top-k (variant "short" of family "topk",
 * src/cuda/topk_short.cu: one 1024-thread CTA per row of at most 16384
 * columns; the default for at most two rows per SM): la_topk on CUDA
 * against the CPU path on the same inputs, bit for bit (SPEC §6 order: the
 * indices are fully determined), and against the forced "sample" kernel
 * (t3_kernel). Cases force "short" or leave the choice to the library (the
 * default picks "short" for these shapes, "sample" past two rows per SM).
 * Odd lengths, rows at every 4-byte alignment (odd row stride: unaligned
 * head and tail columns), a column stride of 3, k 1 .. 2048 and k > L,
 * heavy ties, all equal, NaN / +-inf / +-0, all -inf rows, fewer valid
 * columns than k, far outliers. Gather mode (HISA's token blocks) is
 * covered by the hisa / paged tables and dev/emu_topk_short.sh. Outputs
 * poisoned before each call. */
#include "bo_staging.h"

typedef struct ts_args {
    int64_t R, L, k;
    int kind; /* 0 normal, 1 seven values, 2 all equal, 3 NaN/+-inf/-inf/+-0, 4 all -inf,
               * 5 mostly -inf (fewer valid than k), 6 far outliers, 7 rounded (small ties),
               * 8 distinct scores in one bin of the first radix pass, 9 in one bin of the second,
               * 10 the last 30% of the row -1e30 (masked by a large negative), 11 a few +-3e38
               * (a score range past FLT_MAX) */
    int layout; /* 0 contiguous, 1 odd row stride (every alignment), 2 column stride 3 */
} ts_args;

static float ts_value(int kind, int64_t c, int64_t col, int64_t L) {
    const double u = la_rng_normal(&bo_rng), w = la_rng_uniform(&bo_rng);
    if (kind == 10) return col >= L * 7 / 10 ? -1e30f : (float)u;
    if (kind == 11) return w < 3e-3 ? (w < 1.5e-3 ? 3e38f : -3e38f) : (float)u;
    if (kind == 8 || kind == 9) { /* 1.0 plus a column's distinct (8: < 2^21, 9: < 2^10 ulps) */
        const uint32_t b = 0x3F800000u + (uint32_t)((c * 40503) & (kind == 8 ? 0x1FFFFF : 0x3FF));
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    switch (kind) {
    case 1: return (float)(floor(w * 7) * 0.5 - 1.0);
    case 2: return 1.5f;
    case 3: return w < 0.02 ? NAN : w < 0.03 ? INFINITY : w < 0.13 ? -INFINITY : w < 0.14 ? 0.f
                 : w < 0.15 ? -0.f : (float)u;
    case 4: return -INFINITY;
    case 5: return w < 0.985 ? -INFINITY : (float)u;
    case 6: return w < 1e-3 ? (float)(1e30 * (1.0 + w * 1e3)) : (float)u;
    case 7: return (float)(floor(u * 256) / 256);
    default: return (float)u;
    }
}

static void run_topk_short(const void *arg) {
    const ts_args *A = arg;
    const int64_t R = A->R, L = A->L, k = A->k;
    const int64_t cs = A->layout == 2 ? 3 : 1, ld = A->layout == 1 ? L + 1 : L * cs;
    const int64_t n = (R - 1) * ld + (L - 1) * cs + 1;
    float *x = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = NAN; /* the gaps: never read */
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < L; c++) x[r * ld + c * cs] = ts_value(A->kind, c + 977 * r, c, L);
    dbuf ds = dput(x, n, LA_F32);
    dbuf di = dalloc((size_t)(R * k) * 4);
    la_tensor ts, ti, hs, hi;
    int64_t ne[2] = {R, L}, nb[2] = {ld, cs};
    la_tensor_init_strided(&ts, ds.d, LA_F32, LA_DEVICE_CUDA, 2, ne, nb);
    la_tensor_init_strided(&hs, x, LA_F32, LA_DEVICE_CPU, 2, ne, nb);
    tset(&ti, di.d, LA_I32, LA_DEVICE_CUDA, 2, R, k, 0);
    int32_t *ig = malloc((size_t)(R * k) * 4), *ic = malloc((size_t)(R * k) * 4);
    tset(&hi, ic, LA_I32, LA_DEVICE_CPU, 2, R, k, 0);
    la_dev_memset(di.d, 0x7f, di.bytes); /* poisoned: out of range */
    const int ran = CHECK_DEV(la_topk(&ts, &ti, bo_ctx()));
    CHECK_OK(la_topk(&hs, &hi, bo_ctx()));
    if (ran) {
        la_dev_download(ig, di.d, di.bytes);
        int64_t d = 0, rows = 0;
        for (int64_t r = 0; r < R; r++) {
            int64_t dr = 0;
            for (int64_t i = 0; i < k; i++) dr += ig[r * k + i] != ic[r * k + i];
            d += dr;
            rows += dr != 0;
        }
        CHECK(d == 0, "topk R=%lld L=%lld k=%lld kind=%d layout=%d: %lld entries (%lld rows) differ from the CPU",
              (long long)R, (long long)L, (long long)k, A->kind, A->layout, (long long)d, (long long)rows);
        /* t3_kernel on the same inputs: the same indices */
        if (bo_use_variant("topk", "sample")) {
            int32_t *i3 = malloc((size_t)(R * k) * 4);
            la_dev_memset(di.d, 0xff, di.bytes);
            const int ran3 = CHECK_DEV(la_topk(&ts, &ti, bo_ctx()));
            bo_use_variant("topk", NULL);
            if (ran3) {
                la_dev_download(i3, di.d, di.bytes);
                int64_t d3 = 0;
                for (int64_t i = 0; i < R * k; i++) d3 += i3[i] != ig[i];
                CHECK(d3 == 0, "topk R=%lld L=%lld k=%lld kind=%d layout=%d: %lld entries differ from variant sample",
                      (long long)R, (long long)L, (long long)k, A->kind, A->layout, (long long)d3);
            }
            free(i3);
        }
        printf("  topk R=%lld L=%lld k=%lld kind=%d layout=%d: %lld entries differ from the CPU %s\n",
               (long long)R, (long long)L, (long long)k, A->kind, A->layout, (long long)d, d ? "FAIL" : "ok");
    }
    dfree(&ds);
    dfree(&di);
    free(x);
    free(ig);
    free(ic);
}

/* name "topk_short(...)": -o topk selects these cases */
#define TS_CASE(SMALL, VARIANT, ...)                                                            \
    do {                                                                                        \
        const ts_args a_ = {__VA_ARGS__};                                                       \
        const bo_opts o_ = {"topk", BO_CUDA, (SMALL), (VARIANT) ? "topk" : NULL, (VARIANT), NULL}; \
        bo_add(L, &o_, run_topk_short, &a_, sizeof a_,                                          \
               (VARIANT) ? "topk_short[short](" #__VA_ARGS__ ")" : "topk_short[default](" #__VA_ARGS__ ")"); \
    } while (0)

void cases_topk_short(bo_list *L) {
    const char *sh = "short", *def = NULL;
    /* {R, L, k, kind, layout}: forced "short" */
    TS_CASE(1, sh, 3, 1, 1, 0, 0);
    TS_CASE(1, sh, 5, 63, 16, 0, 1);
    TS_CASE(1, sh, 7, 65, 100, 1, 0);     /* k > L, ties */
    TS_CASE(1, sh, 4, 1000, 64, 3, 1);    /* NaN / +-inf / +-0, unaligned rows */
    TS_CASE(1, sh, 3, 2048, 2048, 0, 0);  /* k = L */
    TS_CASE(1, sh, 3, 2047, 2048, 7, 2);  /* k > L, strided */
    TS_CASE(1, sh, 4, 8192, 2048, 0, 0);  /* HISA's candidate rows */
    TS_CASE(1, sh, 4, 8193, 2048, 0, 1);  /* odd length, unaligned */
    TS_CASE(1, sh, 3, 16384, 2048, 0, 0); /* the longest row */
    TS_CASE(1, sh, 3, 16384, 1, 0, 1);    /* the longest unaligned row (+ head and tail), k 1 */
    TS_CASE(0, sh, 3, 16384, 64, 1, 2);   /* heavy ties, strided */
    TS_CASE(0, sh, 3, 8192, 2048, 1, 0);  /* heavy ties: the radix passes go down to the tokens */
    TS_CASE(0, sh, 3, 8192, 2048, 2, 1);  /* all equal */
    TS_CASE(0, sh, 3, 8192, 2048, 3, 0);  /* NaN / +-inf */
    TS_CASE(0, sh, 3, 8192, 2048, 4, 1);  /* all -inf: -1 rows */
    TS_CASE(0, sh, 3, 16384, 2048, 5, 0); /* ~250 valid < k */
    TS_CASE(0, sh, 3, 8192, 2048, 6, 1);  /* far outliers */
    TS_CASE(0, sh, 3, 8192, 777, 7, 2);   /* small ties, strided */
    TS_CASE(0, sh, 3, 16384, 2048, 8, 0); /* one bin of pass 1: pass 2 resolves */
    TS_CASE(0, sh, 3, 8192, 2048, 9, 1);  /* one bin of pass 2: pass 3 resolves (8 ties per score) */
    TS_CASE(0, sh, 64, 8192, 2048, 0, 0); /* the HISA decode shape */
    TS_CASE(0, sh, 2, 1, 2048, 4, 0);     /* one -inf column */
    /* the direct order's edges: its bound from a lane's 1st or 2nd largest
     * key, a range across the sign, low outliers, a range past FLT_MAX */
    TS_CASE(0, sh, 3, 8192, 1024, 0, 0);
    TS_CASE(0, sh, 3, 8192, 1025, 0, 1);
    TS_CASE(0, sh, 3, 4096, 2048, 0, 2);
    TS_CASE(0, sh, 3, 8192, 2048, 10, 0);
    TS_CASE(0, sh, 3, 16384, 2048, 11, 1);
    /* the library's choice: "short" up to two rows per SM, "sample" past it */
    TS_CASE(1, def, 5, 8192, 2048, 0, 0);
    TS_CASE(1, def, 3, 4100, 300, 3, 1);
    TS_CASE(0, def, 64, 8192, 2048, 0, 1);
    TS_CASE(0, def, 128, 16384, 2048, 7, 0);
    TS_CASE(0, def, 264, 4096, 512, 0, 1);  /* two rows per SM of 132: "short" */
    TS_CASE(0, def, 300, 8192, 2048, 0, 0); /* past two rows per SM of 132: "sample" */
    TS_CASE(0, def, 4, 16385, 2048, 0, 0);  /* past 16384 columns: "sample" */
}
