/* la_topk: row-wise top-k against a plain sort (tests/cpu/sparse_ref.h).
 * Rows: random, heavy ties, masked (−inf) with NaN (ranked first), ±0, +inf, sorted ascending
 * and descending (the sampled threshold's worst cases), constant; L from 1 to
 * 70000, k below and above the valid count; f32 / f64 / bf16 and strided
 * views; outputs poisoned and checked fully written; bad inputs. */
#include "sparse_ref.h"

enum { ROW_NORMAL, ROW_TIES, ROW_MASKED, ROW_MOSTLY_MASKED, ROW_ASC, ROW_DESC, ROW_CONST,
       ROW_ZEROS, ROW_INF, ROW_RELU, ROW_FOOL_SAMPLE, NROWKINDS };
static const char *kind_name[] = {"normal", "ties", "masked", "mostly_masked", "ascending",
                                  "descending", "constant", "signed_zeros", "with_inf", "relu_sums",
                                  "fool_sample"};

/* Whether position i lies in one of the even-numbered sampled runs of
 * topk_cpu.c (128 runs of 16 at (j·(L−16))/127): high values only there make
 * the sampled threshold too high, forcing the full-row fallback. */
static int in_even_sample_run(int64_t i, int64_t L) {
    for (int64_t j = 0; j < 128; j += 2) {
        const int64_t at = (j * (L - 16)) / 127;
        if (i >= at && i < at + 16) return 1;
    }
    return 0;
}

static float row_value(la_rng *r, int kind, int64_t i, int64_t L) {
    switch (kind) {
    case ROW_NORMAL: return (float)la_rng_normal(r);
    case ROW_TIES: return (float)(int)(la_rng_uniform(r) * 5) - 2.f;
    case ROW_MASKED: {
        double u = la_rng_uniform(r);
        return u < 0.3 ? -INFINITY : (u < 0.35 ? NAN : (float)la_rng_normal(r));
    }
    case ROW_MOSTLY_MASKED: return la_rng_uniform(r) < 0.995 ? -INFINITY : (float)la_rng_normal(r);
    case ROW_ASC: return (float)i / (float)L;
    case ROW_DESC: return -(float)i;
    case ROW_CONST: return 3.5f;
    case ROW_ZEROS: return la_rng_uniform(r) < 0.5 ? -0.f : 0.f;
    case ROW_INF: {
        double u = la_rng_uniform(r);
        return u < 0.01 ? INFINITY : (float)la_rng_normal(r);
    }
    case ROW_RELU: { /* like indexer scores: a sum of a few ReLUs, many exact zeros */
        double a = 0;
        for (int h = 0; h < 3; h++) {
            double d = la_rng_normal(r) - 1.0;
            a += d > 0 ? d : 0;
        }
        return (float)a;
    }
    case ROW_FOOL_SAMPLE:
        return in_even_sample_run(i, L) ? 2.f + (float)la_rng_uniform(r) : (float)(0.1 * la_rng_normal(r));
    }
    return 0.f;
}

static void check_case(la_rng *rng, int64_t R, int64_t L, int64_t k, int kind, la_dtype dt,
                       int transposed, la_context *ctx) {
    /* scores stored [R,L] or, transposed, as an [L,R] buffer viewed as [R,L] */
    float *vals = malloc(sizeof(float) * (size_t)(R * L));
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < L; i++) vals[r * L + i] = row_value(rng, kind, i, L);
    if (dt == LA_BF16) /* round to bf16 first so the reference sees the same values */
        for (int64_t i = 0; i < R * L; i++) {
            uint32_t u;
            float f = vals[i];
            memcpy(&u, &f, 4);
            if (!isnan(f)) {
                u += 0x7fffu + ((u >> 16) & 1u);
                u &= 0xffff0000u;
                memcpy(&f, &u, 4);
            }
            vals[i] = f;
        }
    const size_t es = la_dtype_size(dt);
    void *buf = malloc(es * (size_t)(R * L));
    int64_t ne[2] = {R, L}, nb[2];
    if (transposed) {
        nb[0] = 1;
        nb[1] = R;
    } else {
        nb[0] = L;
        nb[1] = 1;
    }
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < L; i++) {
            const int64_t off = r * nb[0] + i * nb[1];
            const float f = vals[r * L + i];
            if (dt == LA_F32) ((float *)buf)[off] = f;
            else if (dt == LA_F64) ((double *)buf)[off] = f;
            else {
                uint32_t u;
                memcpy(&u, &f, 4);
                ((uint16_t *)buf)[off] = (uint16_t)(u >> 16);
            }
        }
    la_tensor sc, ix;
    la_tensor_init_strided(&sc, buf, dt, LA_DEVICE_CPU, 2, ne, nb);
    /* idx rows with stride k + 3 (padding poisoned and checked untouched) */
    const int64_t ldo = k + 3;
    int32_t *out = malloc(sizeof(int32_t) * (size_t)(R * ldo));
    for (int64_t i = 0; i < R * ldo; i++) out[i] = -7;
    int64_t ine[2] = {R, k}, inb[2] = {ldo, 1};
    la_tensor_init_strided(&ix, out, LA_I32, LA_DEVICE_CPU, 2, ine, inb);
    CHECK_OK(la_topk(&sc, &ix, ctx));

    double *row = malloc(sizeof(double) * (size_t)L);
    int32_t *ref = malloc(sizeof(int32_t) * (size_t)k);
    int bad = 0;
    for (int64_t r = 0; r < R && !bad; r++) {
        for (int64_t i = 0; i < L; i++) row[i] = vals[r * L + i];
        ref_topk(row, NULL, L, k, ref);
        for (int64_t j = 0; j < k; j++)
            if (out[r * ldo + j] != ref[j]) {
                CHECK(0, "topk R=%lld L=%lld k=%lld %s %s%s: row %lld pos %lld got %d want %d", (long long)R,
                      (long long)L, (long long)k, kind_name[kind], la_dtype_name(dt), transposed ? " strided" : "",
                      (long long)r, (long long)j, out[r * ldo + j], ref[j]);
                bad = 1;
                break;
            }
        for (int64_t j = k; j < ldo; j++)
            if (out[r * ldo + j] != -7) {
                CHECK(0, "topk wrote past the row (stride padding) at row %lld", (long long)r);
                bad = 1;
            }
    }
    if (!bad) CHECK(1, "ok");
    free(vals);
    free(buf);
    free(out);
    free(row);
    free(ref);
}

static void bad_inputs(la_context *ctx) {
    float s[12] = {0};
    int32_t o[8];
    la_tensor sc, ix;
    int64_t ne[2] = {3, 4}, ie[2] = {3, 2};
    la_tensor_init(&sc, s, LA_F32, LA_DEVICE_CPU, 2, ne);
    la_tensor_init(&ix, o, LA_I32, LA_DEVICE_CPU, 2, ie);
    CHECK_STATUS(la_topk(NULL, &ix, ctx), LA_ERR_ARG);
    CHECK_STATUS(la_topk(&sc, NULL, ctx), LA_ERR_ARG);
    la_tensor ix2 = ix;
    ix2.ne[0] = 2; /* rows disagree */
    CHECK_STATUS(la_topk(&sc, &ix2, ctx), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "idx") != NULL, "message names idx: %s", la_last_error());
    la_tensor ix3 = ix;
    ix3.dtype = LA_F32; /* indices must be int32 */
    CHECK_STATUS(la_topk(&sc, &ix3, ctx), LA_ERR_DTYPE);
    la_tensor sc2 = sc;
    sc2.ndim = 3;
    sc2.ne[2] = 1;
    sc2.nb[2] = 1;
    CHECK_STATUS(la_topk(&sc2, &ix, ctx), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "scores") != NULL, "message names scores: %s", la_last_error());
    la_tensor ix4 = ix;
    ix4.ne[1] = 0; /* k = 0 */
    CHECK_STATUS(la_topk(&sc, &ix4, ctx), LA_ERR_SHAPE);
    la_tensor sc3 = sc;
    sc3.device = LA_DEVICE_CUDA;
    CHECK_MIXED_DEVICE(la_topk(&sc3, &ix, ctx));
    la_tensor ix5 = ix;
    ix5.data = s; /* output aliases the input */
    CHECK_STATUS(la_topk(&sc, &ix5, ctx), LA_ERR_ARG);
}

int main(void) {
    la_rng rng = la_test_rng("test_topk");
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, 2);

    const int64_t Ls[] = {1, 63, 129, 1000, 9000, 70000};
    const int64_t ks[] = {1, 7, 64, 2048};
    for (size_t li = 0; li < sizeof Ls / sizeof *Ls; li++)
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
            for (int kind = 0; kind < NROWKINDS; kind++) {
                const int64_t L = Ls[li], k = ks[ki];
                const int64_t R = L >= 70000 ? 2 : (L >= 9000 ? 3 : 5);
                check_case(&rng, R, L, k, kind, LA_F32, 0, ctx);
            }
    /* k larger than the row, dtypes, strided (transposed) views */
    check_case(&rng, 3, 50, 80, ROW_MASKED, LA_F32, 0, ctx);
    check_case(&rng, 4, 1000, 100, ROW_NORMAL, LA_F64, 0, ctx);
    check_case(&rng, 4, 1000, 100, ROW_NORMAL, LA_BF16, 0, ctx);
    check_case(&rng, 4, 20000, 300, ROW_NORMAL, LA_F32, 1, ctx);
    check_case(&rng, 4, 20000, 300, ROW_TIES, LA_BF16, 1, ctx);
    /* single thread gives the same */
    la_context_set_threads(ctx, 1);
    check_case(&rng, 3, 70000, 2048, ROW_NORMAL, LA_F32, 0, ctx);
    bad_inputs(ctx);
    la_context_destroy(ctx);
    return la_test_finish();
}
