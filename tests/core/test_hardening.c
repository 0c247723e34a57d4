/* Library-level hardening (issue 21): thread counts clamped to the cores,
 * la_sgemm leaving OpenBLAS's process-wide thread count as it found it,
 * the memory-availability check (la_memory_available, workspace refusal,
 * an address-space limit in a child process), causal MHLA chunk overflow
 * refused without writing, a huge but valid chunk computing every output,
 * and the .npy reader / writer (long headers read in pieces, no temporary
 * left behind). */
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <dirent.h>

#include "test_util.h"
#include "core/internal.h"
#include "core/memcheck.h"
#include "core/npy.h"

#ifdef LA_BLAS_OPENBLAS
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
#endif

/* float64 causal MHLA reference (SPEC §5.4), relu, no normalization, one
 * chunk holding every token: o_t = scale q~_t W[0,0] sum_{j<=t} k~_j v_j^T. */
static void ref_causal_one_chunk(const float *q, const float *k, const float *v, int64_t N, int64_t H,
                                 int64_t D, int64_t Dv, double w00, double *out) {
    const double scale = 1.0 / sqrt((double)D);
    for (int64_t h = 0; h < H; h++)
        for (int64_t t = 0; t < N; t++)
            for (int64_t e = 0; e < Dv; e++) {
                double acc = 0;
                for (int64_t j = 0; j <= t; j++) {
                    double a = 0;
                    for (int64_t d = 0; d < D; d++) {
                        double qq = q[(t * H + h) * D + d], kk = k[(j * H + h) * D + d];
                        a += (qq > 0 ? qq : 0) * (kk > 0 ? kk : 0);
                    }
                    acc += scale * w00 * a * v[(j * H + h) * Dv + e];
                }
                out[(t * H + h) * Dv + e] = acc;
            }
}

static void test_threads_clamp(la_rng *rng) {
    la_context *ctx;
    CHECK_OK(la_context_create(&ctx));
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int got = 0;
    CHECK_OK(la_context_set_threads(ctx, 1000));
    CHECK_OK(la_context_get_threads(ctx, &got));
    CHECK(got >= 1 && got <= cores, "threads 1000 -> %d, expected clamped to <= %ld cores", got, cores);
    CHECK_OK(la_context_set_threads(ctx, 1 << 30));
    CHECK_OK(la_context_get_threads(ctx, &got));
    CHECK(got >= 1 && got <= cores, "threads 2^30 -> %d", got);
    CHECK_STATUS(la_context_set_threads(ctx, -1), LA_ERR_ARG);
    CHECK(strstr(la_last_error(), "threads") != NULL, "message names threads: %s", la_last_error());
    /* an operator with the huge count runs (libgomp would abort the process
     * if asked for more threads than it can create) */
    CHECK_OK(la_context_set_threads(ctx, 100000));
    const int64_t N = 65, H = 2, D = 16;
    int64_t ne[4] = {1, N, H, D};
    float *q = malloc(sizeof(float) * N * H * D), *k = malloc(sizeof(float) * N * H * D),
          *v = malloc(sizeof(float) * N * H * D), *o = malloc(sizeof(float) * N * H * D);
    la_fill_normal(rng, q, N * H * D, 1.0);
    la_fill_normal(rng, k, N * H * D, 1.0);
    la_fill_normal(rng, v, N * H * D, 1.0);
    la_fill_nan(o, N * H * D);
    la_tensor tq, tk, tv, to;
    la_tensor_init(&tq, q, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&tk, k, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&tv, v, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&to, o, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_softmax_params p;
    la_softmax_params_init(&p);
    CHECK_OK(la_softmax_attention(&p, &tq, &tk, &tv, &to, NULL, ctx));
    int finite = 1;
    for (int64_t i = 0; i < N * H * D; i++) finite &= isfinite(o[i]) != 0;
    CHECK(finite, "softmax with threads=100000: every output written");
    free(q), free(k), free(v), free(o);
    la_context_destroy(ctx);
}

#ifdef LA_BLAS_OPENBLAS
typedef struct {
    int n;
    int ok;
} gemm_job;

static void *gemm_thread(void *arg) {
    gemm_job *j = (gemm_job *)arg;
    const int64_t n = j->n;
    float *A = malloc(sizeof(float) * n * n * 3), *B = A + n * n, *C = B + n * n;
    for (int64_t i = 0; i < n * n; i++) A[i] = B[i] = (float)((i % 7) - 3);
    j->ok = 1;
    for (int r = 0; r < 20; r++) {
        la_sgemm(false, false, n, n, n, 1.f, A, n, B, n, 0.f, C, n);
        double want = 0; /* C[0,0] = sum_k A[0,k] B[k,0] */
        for (int64_t kk = 0; kk < n; kk++) want += (double)A[kk] * B[kk * n];
        if (fabs(C[0] - want) > 1e-3 * (1 + fabs(want))) j->ok = 0;
    }
    free(A);
    return NULL;
}
#endif

static void test_blas_threads(void) {
#ifdef LA_BLAS_OPENBLAS
    /* a process (numpy, say) has chosen 2 OpenBLAS threads */
    openblas_set_num_threads(2);
    const int before = openblas_get_num_threads();
    float A[64 * 64], B[64 * 64], C[64 * 64];
    for (int i = 0; i < 64 * 64; i++) A[i] = B[i] = 0.5f;
    la_sgemm(false, false, 64, 64, 64, 1.f, A, 64, B, 64, 0.f, C, 64);
    CHECK(fabsf(C[0] - 16.f) < 1e-4f, "la_sgemm result %g", C[0]);
    CHECK(openblas_get_num_threads() == before, "OpenBLAS threads %d after la_sgemm, was %d",
          openblas_get_num_threads(), before);
    /* concurrent calls: the count is put back when the last one ends */
    pthread_t th[4];
    gemm_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i].n = 96 + 32 * i;
        pthread_create(&th[i], NULL, gemm_thread, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].ok, "concurrent la_sgemm %d result", i);
    }
    CHECK(openblas_get_num_threads() == before, "OpenBLAS threads %d after concurrent la_sgemm, was %d",
          openblas_get_num_threads(), before);
    openblas_set_num_threads(1);
    la_sgemm(false, false, 64, 64, 64, 1.f, A, 64, B, 64, 0.f, C, 64);
    CHECK(openblas_get_num_threads() == 1, "a count of 1 stays 1");
#else
    CHECK(1, "no OpenBLAS in this build");
#endif
}

static void test_memory(void) {
    size_t avail = 0;
    CHECK_OK(la_memory_available(&avail));
    CHECK(avail > ((size_t)16 << 20), "la_memory_available %zu bytes, expected a working machine's", avail);
    CHECK_STATUS(la_memory_available(NULL), LA_ERR_ARG);
    /* a workspace far beyond the machine: refused with a message, not an OOM kill */
    la_context *ctx;
    CHECK_OK(la_context_create(&ctx));
    void *p = la_ws_alloc(ctx, (size_t)1 << 60);
    CHECK(p == NULL, "workspace of 2^60 bytes refused");
    CHECK(strstr(la_last_error(), "needs") && strstr(la_last_error(), "GiB available"),
          "message: %s", la_last_error());
    la_ws_free(ctx, p);
    p = la_ws_alloc(ctx, 1000);
    CHECK(p != NULL, "a small workspace is allocated");
    la_ws_free(ctx, p);
    la_context_destroy(ctx);
    CHECK_STATUS(la_mem_check((size_t)1 << 62, "probe"), LA_ERR_NOMEM);
    CHECK(strstr(la_last_error(), "probe: needs") != NULL, "message names what: %s", la_last_error());

    /* under an address-space limit the answer follows the limit */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl;
        size_t base = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        unsigned long long pages = 0;
        if (f) { if (fscanf(f, "%llu", &pages) != 1) pages = 0; fclose(f); }
        base = (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
        rl.rlim_cur = rl.rlim_max = base + ((size_t)256 << 20);
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
        size_t a2 = 0;
        la_memory_available(&a2);
        if (a2 > ((size_t)256 << 20) || a2 < ((size_t)128 << 20)) _exit(4);
        la_context *c2;
        if (la_context_create(&c2) != LA_OK) _exit(5);
        if (la_ws_alloc(c2, (size_t)512 << 20) != NULL) _exit(6);
        if (!strstr(la_last_error(), "needs")) _exit(7);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "RLIMIT_AS child: status %d (3 setrlimit, 4 available "
          "ignores the limit, 6 workspace not refused, 7 message)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

static void test_chunk_overflow(la_rng *rng) {
    const int64_t B = 1, N = 63, H = 2, D = 16, Dv = 24, M = 4;
    int64_t ne[4] = {B, N, H, D}, nev[4] = {B, N, H, Dv}, nem[2] = {M, M};
    float *q = malloc(sizeof(float) * N * H * D), *k = malloc(sizeof(float) * N * H * D),
          *v = malloc(sizeof(float) * N * H * Dv), *o = malloc(sizeof(float) * N * H * Dv), w[16];
    double *ref = malloc(sizeof(double) * N * H * Dv);
    la_fill_normal(rng, q, N * H * D, 1.0);
    la_fill_normal(rng, k, N * H * D, 1.0);
    la_fill_normal(rng, v, N * H * Dv, 1.0);
    for (int i = 0; i < 16; i++) w[i] = (i % 5 == 0) ? 0.75f : 0.1f; /* W[0,0] = 0.75 */
    la_tensor tq, tk, tv, to, tw;
    la_tensor_init(&tq, q, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&tk, k, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&tv, v, LA_F32, LA_DEVICE_CPU, 4, nev);
    la_tensor_init(&to, o, LA_F32, LA_DEVICE_CPU, 4, nev);
    la_tensor_init(&tw, w, LA_F32, LA_DEVICE_CPU, 2, nem);
    la_context *ctx;
    CHECK_OK(la_context_create(&ctx));
    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    const int64_t bad[3] = {INT64_MAX, INT64_MAX - N + 2, INT64_MAX - 1};
    for (int i = 0; i < 3; i++) {
        p.chunk = bad[i];
        la_fill_nan(o, N * H * Dv);
        CHECK_STATUS(la_mhla_causal_forward(&p, &tq, &tk, &tv, &tw, &to, ctx), LA_ERR_ARG);
        CHECK(strstr(la_last_error(), "chunk") != NULL, "message names chunk: %s", la_last_error());
        int untouched = 1;
        for (int64_t j = 0; j < N * H * Dv; j++) untouched &= isnan(o[j]) != 0;
        CHECK(untouched, "rejected chunk %lld wrote nothing", (long long)bad[i]);
    }
    /* the largest accepted chunks, and N itself: one chunk, every output written */
    ref_causal_one_chunk(q, k, v, N, H, D, Dv, 0.75, ref);
    const int64_t good[4] = {INT64_MAX - N + 1, (int64_t)1 << 62, 1 << 20, N};
    for (int i = 0; i < 4; i++) {
        p.chunk = good[i];
        la_fill_nan(o, N * H * Dv);
        la_status s = la_mhla_causal_forward(&p, &tq, &tk, &tv, &tw, &to, ctx);
        if (s != LA_OK) {
            /* refusing is allowed (with a message), computing garbage is not */
            CHECK(strlen(la_last_error()) > 0, "chunk %lld refused without a message", (long long)good[i]);
            continue;
        }
        double err = la_rel_err(o, ref, N * H * Dv);
        CHECK(err <= 1e-5, "chunk %lld: rel err %.3g vs float64 (unwritten output reads NaN)",
              (long long)good[i], err);
    }
    la_context_destroy(ctx);
    free(q), free(k), free(v), free(o), free(ref);
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.' || (e->d_name[1] && strcmp(e->d_name, "..") != 0)) n++;
    if (d) closedir(d);
    return n;
}

static void test_npy(void) {
    char dir[] = "/tmp/la_test_hardening_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256];
    snprintf(path, sizeof path, "%s/a.npy", dir);
    /* a long header (v1, padded with spaces to 3000 bytes): the reader
     * grows its header buffer, then reads the data into its own buffer */
    int64_t sh[2] = {3, 5};
    float data[15];
    for (int i = 0; i < 15; i++) data[i] = (float)i - 7.5f;
    char hdr[3100];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }");
    while (n < 2998 + 64 - 10 - 1) hdr[n++] = ' ';
    while ((10 + n + 1) % 64) hdr[n++] = ' ';
    hdr[n++] = '\n';
    FILE *f = fopen(path, "wb");
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xff), (unsigned char)(n >> 8)};
    fwrite(pre, 1, 10, f);
    fwrite(hdr, 1, (size_t)n, f);
    fwrite(data, 4, 15, f);
    fclose(f);
    la_npy_array a;
    CHECK_OK(la_npy_read(path, &a));
    CHECK(a.ndim == 2 && a.shape[0] == 3 && a.shape[1] == 5 && a.data && memcmp(a.data, data, 60) == 0,
          "long-header file read back");
    la_npy_free(&a);
    /* a truncated data section is refused */
    CHECK(truncate(path, 10 + n + 59) == 0, "truncate");
    CHECK_STATUS(la_npy_read(path, &a), LA_ERR_FORMAT);
    /* the atomic writer leaves nothing but its file behind */
    unlink(path);
    CHECK_OK(la_npy_write(path, LA_F32, 2, sh, data));
    CHECK(count_entries(dir) == 1, "%d entries after la_npy_write, expected 1 (no temporary left)",
          count_entries(dir));
    CHECK_OK(la_npy_read(path, &a));
    CHECK(a.data && memcmp(a.data, data, 60) == 0, "written file read back");
    la_npy_free(&a);
    /* a directory in the way: an error, nothing left */
    char sub[300];
    snprintf(sub, sizeof sub, "%s/d.npy", dir);
    mkdir(sub, 0700);
    CHECK_STATUS(la_npy_write(sub, LA_F32, 2, sh, data), LA_ERR_IO);
    CHECK(count_entries(dir) == 2, "%d entries after a refused write, expected 2", count_entries(dir));
    rmdir(sub);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    la_rng rng = la_test_rng("test_hardening");
    test_threads_clamp(&rng);
    test_blas_threads();
    test_memory();
    test_chunk_overflow(&rng);
    test_npy();
    return la_test_finish();
}
