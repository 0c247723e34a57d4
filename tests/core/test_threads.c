/* Several contexts used from plain pthreads at once (include/longattn.h:
 * "contexts may be used from distinct threads concurrently"): softmax,
 * causal linear and MHLA forward, each thread with its own context, its own
 * inputs and its own output, computed concurrently and compared with the
 * same calls made one at a time (bit-identical: no shared state may leak
 * between calls). Every context runs one OpenMP thread, so the test is
 * about the library's own state (errors, workspaces, the la_sgemm thread
 * hand-over); `make test-tsan` runs it under ThreadSanitizer. */
#include <pthread.h>

#include "test_util.h"

#define NTHREADS 4
#define ROUNDS 3

typedef struct job {
    int64_t N, H, D, Dv;
    float *q, *k, *v, *w;
    float *out[3], *want[3];
    int failed;
    char msg[256];
} job;

static la_status run_ops(job *j, float **dst) {
    la_context *ctx;
    la_status s = la_context_create(&ctx);
    if (s != LA_OK) return s;
    la_context_set_threads(ctx, 1);
    int64_t ne[4] = {1, j->N, j->H, j->D}, nev[4] = {1, j->N, j->H, j->Dv}, nem[2] = {4, 4};
    la_tensor q, k, v, w, o;
    la_tensor_init(&q, j->q, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&k, j->k, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&v, j->v, LA_F32, LA_DEVICE_CPU, 4, nev);
    la_tensor_init(&w, j->w, LA_F32, LA_DEVICE_CPU, 2, nem);
    la_softmax_params sp;
    la_softmax_params_init(&sp);
    sp.causal = 1;
    la_tensor_init(&o, dst[0], LA_F32, LA_DEVICE_CPU, 4, nev);
    s = la_softmax_attention(&sp, &q, &k, &v, &o, NULL, ctx);
    la_linear_params lp;
    la_linear_params_init(&lp);
    lp.causal = 1;
    lp.chunk = 16;
    la_tensor_init(&o, dst[1], LA_F32, LA_DEVICE_CPU, 4, nev);
    if (s == LA_OK) s = la_linear_attention(&lp, &q, &k, &v, &o, NULL, NULL, NULL, NULL, ctx);
    la_mhla_params mp;
    la_mhla_params_init(&mp);
    mp.blocks[0] = 4;
    la_tensor_init(&o, dst[2], LA_F32, LA_DEVICE_CPU, 4, nev);
    if (s == LA_OK) s = la_mhla_forward(&mp, &q, &k, &v, &w, &o, ctx);
    la_context_destroy(ctx);
    return s;
}

static void *worker(void *arg) {
    job *j = (job *)arg;
    for (int r = 0; r < ROUNDS && !j->failed; r++) {
        for (int i = 0; i < 3; i++) la_fill_nan(j->out[i], j->N * j->H * j->Dv);
        la_status s = run_ops(j, j->out);
        if (s != LA_OK) {
            j->failed = 1;
            snprintf(j->msg, sizeof j->msg, "round %d: %s: %s", r, la_status_string(s), la_last_error());
            break;
        }
        for (int i = 0; i < 3; i++)
            if (memcmp(j->out[i], j->want[i], sizeof(float) * (size_t)(j->N * j->H * j->Dv)) != 0) {
                j->failed = 1;
                snprintf(j->msg, sizeof j->msg, "round %d: op %d differs from the serial result", r, i);
            }
    }
    return NULL;
}

int main(void) {
    la_rng rng = la_test_rng("test_threads");
    job jobs[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) {
        job *j = &jobs[t];
        memset(j, 0, sizeof *j);
        j->N = 63 + 34 * t, j->H = 2, j->D = 16 + 16 * (t % 2), j->Dv = 24;
        const int64_t nq = j->N * j->H * j->D, nv = j->N * j->H * j->Dv;
        j->q = malloc(sizeof(float) * nq), j->k = malloc(sizeof(float) * nq), j->v = malloc(sizeof(float) * nv);
        j->w = malloc(sizeof(float) * 16);
        la_fill_normal(&rng, j->q, nq, 1.0);
        la_fill_normal(&rng, j->k, nq, 1.0);
        la_fill_normal(&rng, j->v, nv, 1.0);
        for (int i = 0; i < 16; i++) j->w[i] = (float)(0.25 + 0.5 * la_rng_uniform(&rng));
        for (int i = 0; i < 3; i++) {
            j->out[i] = malloc(sizeof(float) * nv);
            j->want[i] = malloc(sizeof(float) * nv);
            la_fill_nan(j->want[i], nv);
        }
        CHECK_OK(run_ops(j, j->want)); /* serial reference of the same calls */
        int finite = 1;
        for (int i = 0; i < 3; i++)
            for (int64_t e = 0; e < nv; e++) finite &= isfinite(j->want[i][e]) != 0;
        CHECK(finite, "job %d: serial outputs fully written", t);
    }
    pthread_t th[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) pthread_create(&th[t], NULL, worker, &jobs[t]);
    for (int t = 0; t < NTHREADS; t++) {
        pthread_join(th[t], NULL);
        CHECK(!jobs[t].failed, "thread %d: %s", t, jobs[t].msg);
    }
    for (int t = 0; t < NTHREADS; t++) {
        free(jobs[t].q), free(jobs[t].k), free(jobs[t].v), free(jobs[t].w);
        for (int i = 0; i < 3; i++) free(jobs[t].out[i]), free(jobs[t].want[i]);
    }
    return la_test_finish();
}
