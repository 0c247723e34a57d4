/* Core: status strings, thread-local errors, tensor checks (ranks, extents,
 * strides, overflow, devices), overlap detection, gather/scatter of strided
 * [B,N,H,D] views, bf16 conversion, context, la_sgemm against float64. */
#include <pthread.h>

#include "test_util.h"
#include "core/internal.h"

static void *thread_err(void *arg) {
    int id = (int)(intptr_t)arg;
    for (int i = 0; i < 1000; i++) {
        la_err(LA_ERR_SHAPE, "thread %d iteration %d", id, i);
        char want[64];
        snprintf(want, sizeof want, "thread %d iteration %d", id, i);
        if (strcmp(la_last_error(), want) != 0) return (void *)1;
    }
    return NULL;
}

static void my_free(void *p, void *u) { (void)u; free(p); }

int main(void) {
    la_rng rng = la_test_rng("test_core");
    for (int s = 0; s <= LA_ERR_INTERNAL; s++)
        CHECK(strncmp(la_status_string((la_status)s), "LA_", 3) == 0, "status string %d", s);
    CHECK(strstr(la_build_info(), "blas=") != NULL, "build info");

    /* thread-local messages do not interfere */
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, thread_err, (void *)(intptr_t)i);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(th[i], &r);
        CHECK(r == NULL, "thread %d saw another thread's message", i);
    }

    /* tensor init and checks */
    float buf[2 * 3 * 4 * 5];
    int64_t ne[4] = {2, 3, 4, 5};
    la_tensor t;
    CHECK_OK(la_tensor_init(&t, buf, LA_F32, LA_DEVICE_CPU, 4, ne));
    CHECK(t.nb[0] == 60 && t.nb[1] == 20 && t.nb[2] == 5 && t.nb[3] == 1, "contiguous strides");
    CHECK_OK(la_check_tensor(&t, "q", 4, LA_DT_FLOAT, LA_DEVICE_CPU, false));
    CHECK_STATUS(la_check_tensor(&t, "q", 3, LA_DT_FLOAT, LA_DEVICE_CPU, false), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "q") && strstr(la_last_error(), "[2, 3, 4, 5]"), "message names arg and shape: %s", la_last_error());
    CHECK_STATUS(la_check_tensor(&t, "q", 4, LA_DT(LA_I32), LA_DEVICE_CPU, false), LA_ERR_DTYPE);
    CHECK_STATUS(la_check_tensor(&t, "q", 4, LA_DT_FLOAT, LA_DEVICE_CUDA, false), LA_ERR_DEVICE);
    CHECK_STATUS(la_check_tensor(NULL, "q", 4, LA_DT_FLOAT, LA_DEVICE_CPU, false), LA_ERR_ARG);
    la_tensor z = t;
    z.ne[1] = 0;
    CHECK_STATUS(la_check_tensor(&z, "k", 4, LA_DT_FLOAT, LA_DEVICE_CPU, false), LA_ERR_SHAPE);
    CHECK_OK(la_check_tensor(&z, "k", 4, LA_DT_FLOAT, LA_DEVICE_CPU, true));
    la_tensor huge = t;
    huge.ne[0] = huge.ne[1] = huge.ne[2] = (int64_t)1 << 40;
    huge.nb[0] = huge.nb[1] = huge.nb[2] = (int64_t)1 << 40;
    CHECK_STATUS(la_check_tensor(&huge, "v", 4, LA_DT_FLOAT, LA_DEVICE_CPU, false), LA_ERR_OVERFLOW);
    la_tensor nul = t;
    nul.data = NULL;
    CHECK_STATUS(la_check_tensor(&nul, "v", 4, LA_DT_FLOAT, LA_DEVICE_CPU, false), LA_ERR_ARG);
    la_tensor neg = t;
    neg.nb[2] = -1;
    CHECK_STATUS(la_check_tensor(&neg, "v", 4, LA_DT_FLOAT, LA_DEVICE_CPU, false), LA_ERR_SHAPE);
    CHECK_STATUS(la_check_dim(&t, "v", 3, 7, "(Dv)"), LA_ERR_SHAPE);
    int64_t bad[2] = {3, -1};
    CHECK_STATUS(la_tensor_init(&z, buf, LA_F32, LA_DEVICE_CPU, 2, bad), LA_ERR_SHAPE);
    CHECK_STATUS(la_tensor_init(&z, buf, LA_F32, LA_DEVICE_CPU, 5, ne), LA_ERR_SHAPE);
    size_t prod;
    CHECK_STATUS(la_mul_size(SIZE_MAX / 2, 3, &prod, "ws"), LA_ERR_OVERFLOW);
    CHECK_OK(la_mul_size(1000, 1000, &prod, "ws"));
    CHECK(prod == 1000000, "mul_size");

    /* overlap */
    la_tensor a, b;
    int64_t ne1[1] = {10};
    la_tensor_init(&a, buf, LA_F32, LA_DEVICE_CPU, 1, ne1);
    la_tensor_init(&b, buf + 9, LA_F32, LA_DEVICE_CPU, 1, ne1);
    CHECK(la_tensors_overlap(&a, &b), "overlap by one element");
    la_tensor_init(&b, buf + 10, LA_F32, LA_DEVICE_CPU, 1, ne1);
    CHECK(!la_tensors_overlap(&a, &b), "adjacent is not overlap");

    /* gather/scatter through a permuted [B,H,N,D] buffer viewed as [B,N,H,D] */
    {
        const int64_t B = 2, H = 3, N = 5, D = 4;
        float bhnd[2 * 3 * 5 * 4], back[2 * 3 * 5 * 4];
        for (int i = 0; i < 120; i++) bhnd[i] = (float)la_rng_normal(&rng);
        int64_t vne[4] = {B, N, H, D}, vnb[4] = {H * N * D, D, N * D, 1};
        la_tensor v, w;
        CHECK_OK(la_tensor_init_strided(&v, bhnd, LA_F32, LA_DEVICE_CPU, 4, vne, vnb));
        CHECK_OK(la_tensor_init_strided(&w, back, LA_F32, LA_DEVICE_CPU, 4, vne, vnb));
        la_fill_nan(back, 120);
        int ok = 1;
        for (int64_t bb = 0; bb < B; bb++)
            for (int64_t h = 0; h < H; h++) {
                float panel[5 * 6];
                la_gather_bnhd(&v, bb, h, panel, 6);
                for (int64_t n = 0; n < N; n++)
                    for (int64_t d = 0; d < D; d++)
                        ok &= panel[n * 6 + d] == bhnd[((bb * H + h) * N + n) * D + d];
                la_scatter_bnhd(&w, bb, h, panel, 6);
            }
        CHECK(ok, "gather of permuted view");
        CHECK(memcmp(back, bhnd, sizeof back) == 0, "scatter of permuted view");
    }
    /* bf16 round to nearest even, NaN kept */
    CHECK(la_bf16_to_f32(la_f32_to_bf16(1.0f)) == 1.0f, "bf16 1");
    CHECK(fabsf(la_bf16_to_f32(la_f32_to_bf16(3.14159f)) - 3.14159f) < 0.02f, "bf16 pi");
    CHECK(isnan(la_bf16_to_f32(la_f32_to_bf16(NAN))), "bf16 nan");
    CHECK(isinf(la_bf16_to_f32(la_f32_to_bf16(INFINITY))), "bf16 inf");

    /* features */
    la_feature f;
    CHECK_OK(la_feature_from_name("elu1", &f));
    CHECK(f == LA_FEATURE_ELU1, "elu1");
    CHECK_STATUS(la_feature_from_name("gelu", &f), LA_ERR_ARG);
    CHECK(la_feature_apply(LA_FEATURE_ELU1, -8.f) > 0.f, "elu1 stays positive at -8");
    CHECK(la_feature_apply(LA_FEATURE_RELU_EPS, -1.f) == 1e-6f, "relu_eps");

    /* context */
    la_context *ctx;
    CHECK_OK(la_context_create(&ctx));
    CHECK_STATUS(la_context_set_threads(ctx, -1), LA_ERR_ARG);
    CHECK_OK(la_context_set_threads(ctx, 3));
    int th3;
    CHECK_OK(la_context_get_threads(ctx, &th3));
    /* more threads than cores are clamped to the cores (include/longattn.h) */
    const int cores = la_ctx_threads(NULL);
    CHECK(th3 == (cores < 3 ? cores : 3), "threads %d, expected min(3, %d cores)", th3, cores);
    CHECK_STATUS(la_context_set_allocator(ctx, NULL, my_free, NULL), LA_ERR_ARG);
    CHECK_OK(la_context_destroy(ctx));
    int avail = -1;
    CHECK_OK(la_cuda_available(&avail));
    CHECK(avail == 0 || avail == 1, "cuda_available");

    /* sgemm vs float64, all transposes, odd sizes */
    for (int trial = 0; trial < 8; trial++) {
        int ta = trial & 1, tb = (trial >> 1) & 1;
        int64_t M = 1 + la_rng_next(&rng) % 70, N = 1 + la_rng_next(&rng) % 70, K = 1 + la_rng_next(&rng) % 300;
        int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
        float *A = malloc(sizeof(float) * (ta ? K : M) * lda), *B = malloc(sizeof(float) * (tb ? N : K) * ldb);
        float *C = malloc(sizeof(float) * M * ldc);
        double *R = malloc(sizeof(double) * M * N);
        float *Cc = malloc(sizeof(float) * M * N);
        la_fill_normal(&rng, A, (ta ? K : M) * lda, 1);
        la_fill_normal(&rng, B, (tb ? N : K) * ldb, 1);
        la_fill_nan(C, M * ldc);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += (double)(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
                R[i * N + j] = 0.5 * s;
            }
        la_sgemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 0.f, C, ldc);
        for (int64_t i = 0; i < M; i++) for (int64_t j = 0; j < N; j++) Cc[i * N + j] = C[i * ldc + j];
        double e = la_rel_err(Cc, R, M * N);
        CHECK(e <= 1e-5, "sgemm ta=%d tb=%d M=%lld N=%lld K=%lld rel err %.3g", ta, tb, (long long)M, (long long)N, (long long)K, e);
        free(A); free(B); free(C); free(R); free(Cc);
    }
    return la_test_finish();
}
