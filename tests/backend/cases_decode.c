/* Case table of the causal MHLA decoding state on CUDA (la_mhla_state_* with
 * a CUDA mixing tensor, src/cuda/mhla_decode.cu), from the former
 * tests/cuda/test_cuda_decode.c.
 *
 * Each case draws q, k, v (the CPU sees the very same rounded values),
 * creates one state on the CPU and one on the device from the same mixing,
 * appends the same pieces to both (1 token at a time, or pieces of varying
 * sizes), and compares the device output, poisoned with NaN before, in full
 * against the CPU state's output and against la_mhla_causal_forward on the
 * CPU: rel = max|gpu - cpu| / max|cpu| <= 1e-4 (f32) or 1e-2 (bf16), and no
 * NaN left anywhere. Mixings: random (the general inter-block reduction) or
 * uniform-causal rows (the constant-row path, mix = W[i,0] T). The error
 * case checks refused calls (devices, shapes, capacity) write nothing. */
#include "bo_staging.h"

/* Tokens [r0, r0+n) of a [B,N,H,X] view. */
static la_tensor rows(const la_tensor *t, int64_t r0, int64_t n) {
    la_tensor s;
    int64_t ne[4] = {t->ne[0], n, t->ne[2], t->ne[3]};
    char *base = (char *)t->data + (size_t)(r0 * t->nb[1]) * la_dtype_size(t->dtype);
    la_tensor_init_strided(&s, base, t->dtype, t->device, 4, ne, t->nb);
    return s;
}
/* kind 0: random positive entries; 1: uniform-causal rows (W[i,j] = 1/(i+1)
 * for j ≤ i) with garbage above the diagonal (must be ignored). */
static tb make_mixing(int64_t M, int64_t H, int per_head, int kind) {
    int64_t nw[3] = {H, M, M};
    int64_t Hw = per_head ? H : 1, n = Hw * M * M;
    float *w = malloc(sizeof(float) * (size_t)n);
    for (int64_t h = 0; h < Hw; h++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < M; j++) {
                float x = (float)(0.05 + la_rng_uniform(&bo_rng));
                if (kind == 1 && j <= i) x = (float)((1.0 + 0.5 * (double)h) / (double)(i + 1));
                w[(h * M + i) * M + j] = x;
            }
    tb t;
    tb_make(&t, per_head ? 3 : 2, per_head ? nw : nw + 1, LA_F32, 0, w);
    free(w);
    return t;
}
static const char *normn(la_mhla_normalize n) { return n == LA_MHLA_NORM_NONE ? "none" : "pq"; }

static void cmp(const float *g, const float *c, int64_t n, const char *what, const char *vs,
                double tol) {
    double *ref = malloc(sizeof(double) * (size_t)n);
    int64_t cnan = 0, gnan = 0;
    for (int64_t i = 0; i < n; i++) {
        ref[i] = c[i];
        cnan += !isfinite(c[i]);
        gnan += !isfinite(g[i]);
    }
    double rel = la_rel_err(g, ref, n);
    CHECK(cnan == 0, "%s: %s has %lld non-finite values", what, vs, (long long)cnan);
    CHECK(gnan == 0, "%s: GPU output has %lld non-finite values (unwritten?)", what, (long long)gnan);
    CHECK(rel <= tol, "%s vs %s: rel err %.3g > %.1g", what, vs, rel, tol);
    printf("  %-70s vs %-8s rel %.2e %s\n", what, vs, rel, rel <= tol && gnan == 0 ? "ok" : "FAIL");
    free(ref);
}

/* piece: 1 = token by token; otherwise pieces cycle through piece, 1, 2·piece+1. */
static void t_decode(int64_t B, int64_t N, int64_t H, int64_t D, int64_t Dv, int64_t C,
                     la_mhla_normalize norm, la_feature feat, int per_head, int wkind,
                     int64_t piece, la_dtype dt, int perm) {
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv};
    int64_t M = (N + C - 1) / C + 1; /* one spare block */
    tb q = tb_rand(4, nq, dt, perm, 1.0), k = tb_rand(4, nq, dt, perm, 1.0),
       v = tb_rand(4, nv, dt, perm, 1.0), o = tb_poison(4, nv, dt, perm),
       of = tb_poison(4, nv, dt, perm);
    tb W = make_mixing(M, H, per_head, wkind);
    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    p.chunk = C;
    p.normalize = norm;
    p.feature = feat;
    char what[200];
    snprintf(what, sizeof what, "decode %s B%lld N%lld H%lld D%lld Dv%lld C%lld %s f%d ph%d w%d pc%lld p%d",
             dtn(dt), (long long)B, (long long)N, (long long)H, (long long)D, (long long)Dv,
             (long long)C, normn(norm), (int)feat, per_head, wkind, (long long)piece, perm);
    la_mhla_state *sc = NULL, *sg = NULL;
    la_status s1 = la_mhla_state_create(&p, B, H, D, Dv, &W.host, &sc);
    la_status s2 = la_mhla_state_create(&p, B, H, D, Dv, &W.dev, &sg);
    CHECK(s1 == LA_OK && s2 == LA_OK, "%s: create cpu %s gpu %s: %s", what,
          la_status_string(s1), la_status_string(s2), la_last_error());
    if (s1 != LA_OK || s2 != LA_OK) goto done;
    {
        const int64_t cyc[3] = {piece, 1, 2 * piece + 1};
        int64_t r = 0, ci = 0;
        bool ok = true;
        while (r < N && ok) {
            int64_t n = piece == 1 ? 1 : cyc[ci++ % 3];
            if (n > N - r) n = N - r;
            la_tensor qh = rows(&q.host, r, n), kh = rows(&k.host, r, n), vh = rows(&v.host, r, n),
                      oh = rows(&o.host, r, n);
            la_tensor qd = rows(&q.dev, r, n), kd = rows(&k.dev, r, n), vd = rows(&v.dev, r, n),
                      od = rows(&o.dev, r, n);
            la_status a1 = la_mhla_state_append(sc, &qh, &kh, &vh, &oh, bo_ctx());
            la_status a2 = la_mhla_state_append(sg, &qd, &kd, &vd, &od, bo_ctx());
            if (a1 != LA_OK || a2 != LA_OK) {
                CHECK(0, "%s: append at %lld (+%lld): cpu %s gpu %s: %s", what, (long long)r,
                      (long long)n, la_status_string(a1), la_status_string(a2), la_last_error());
                ok = false;
            }
            r += n;
        }
        int64_t len = -1;
        la_mhla_state_length(sg, &len);
        CHECK(len == N, "%s: state length %lld, want %lld", what, (long long)len, (long long)N);
        CHECK_OK(la_mhla_causal_forward(&p, &q.host, &k.host, &v.host, &W.host, &of.host, bo_ctx()));
        CHECK_OK(la_dev_synchronize());
        const double tol = dt == LA_BF16 ? 1e-2 : dt == LA_F16 ? tol_of(LA_F16, N) : 1e-4;
        int64_t n = tb_numel(&o);
        float *g = tb_read(&o, true), *c = tb_read(&o, false), *f = tb_read(&of, false);
        cmp(g, c, n, what, "cpu-dec", tol);
        cmp(g, f, n, what, "cpu-fwd", tol);
        free(g);
        free(c);
        free(f);
    }
done:
    la_mhla_state_destroy(sc);
    la_mhla_state_destroy(sg);
    tb_free(&q); tb_free(&k); tb_free(&v); tb_free(&o); tb_free(&of); tb_free(&W);
}

static bool all_nan(const tb *t) {
    float *g = tb_read(t, true);
    bool ok = true;
    for (int64_t i = 0; i < tb_numel(t); i++) ok &= isnan(g[i]);
    free(g);
    return ok;
}
static bool mentions(const char *w) { return strstr(la_last_error(), w) != NULL; }

static void t_errors(const void *arg) {
    (void)arg;
    int64_t nq[4] = {2, 4, 3, 8}, nv[4] = {2, 4, 3, 5}, nq2[4] = {2, 4, 3, 9};
    tb q = tb_rand(4, nq, LA_F32, 0, 1.0), k = tb_rand(4, nq, LA_F32, 0, 1.0),
       v = tb_rand(4, nv, LA_F32, 0, 1.0), o = tb_poison(4, nv, LA_F32, 0),
       q2 = tb_rand(4, nq2, LA_F32, 0, 1.0);
    tb W = make_mixing(2, 3, 0, 0); /* M = 2: capacity 2·C = 8 tokens with C = 4 */
    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    p.chunk = 4;
    la_mhla_state *sg = NULL, *sc = NULL;
    CHECK_OK(la_mhla_state_create(&p, 2, 3, 8, 5, &W.dev, &sg));
    CHECK_OK(la_mhla_state_create(&p, 2, 3, 8, 5, &W.host, &sc));
    if (!sg || !sc) goto done;
    /* CPU tensors given to a CUDA state */
    CHECK_STATUS(la_mhla_state_append(sg, &q.host, &k.host, &v.host, &o.host, NULL), LA_ERR_DEVICE);
    CHECK(mentions("CUDA") && mentions("q"), "message: %s", la_last_error());
    printf("  %s\n", la_last_error());
    /* mixed devices */
    CHECK_STATUS(la_mhla_state_append(sg, &q.dev, &k.host, &v.dev, &o.dev, NULL), LA_ERR_DEVICE);
    CHECK(mentions("k"), "message: %s", la_last_error());
    CHECK_STATUS(la_mhla_state_append(sg, &q.dev, &k.dev, &v.dev, &o.host, NULL), LA_ERR_DEVICE);
    CHECK(mentions("out"), "message: %s", la_last_error());
    /* CUDA tensors given to a CPU state */
    CHECK_STATUS(la_mhla_state_append(sc, &q.dev, &k.dev, &v.dev, &o.dev, NULL), LA_ERR_DEVICE);
    printf("  %s\n", la_last_error());
    /* shapes: D differs from the state's */
    {
        int64_t nk2[4] = {2, 4, 3, 9};
        tb k2 = tb_rand(4, nk2, LA_F32, 0, 1.0);
        CHECK_STATUS(la_mhla_state_append(sg, &q2.dev, &k2.dev, &v.dev, &o.dev, NULL), LA_ERR_SHAPE);
        tb_free(&k2);
    }
    CHECK(all_nan(&o), "a refused call wrote to out");
    /* capacity: 4 + 4 fit, then nothing more */
    CHECK_OK(la_mhla_state_append(sg, &q.dev, &k.dev, &v.dev, &o.dev, NULL));
    CHECK_OK(la_mhla_state_append(sg, &q.dev, &k.dev, &v.dev, &o.dev, NULL));
    {
        la_tensor q1 = rows(&q.dev, 0, 1), k1 = rows(&k.dev, 0, 1), v1 = rows(&v.dev, 0, 1),
                  o1 = rows(&o.dev, 0, 1);
        CHECK_STATUS(la_mhla_state_append(sg, &q1, &k1, &v1, &o1, NULL), LA_ERR_SHAPE);
        CHECK(mentions("capacity"), "message: %s", la_last_error());
    }
    /* a mixing marked CUDA whose data is host memory */
    {
        la_tensor wf = W.host;
        wf.device = LA_DEVICE_CUDA;
        la_mhla_state *sx = NULL;
        CHECK_STATUS(la_mhla_state_create(&p, 2, 3, 8, 5, &wf, &sx), LA_ERR_DEVICE);
        CHECK(sx == NULL, "a failed create returned a state");
        printf("  %s\n", la_last_error());
    }
    /* absurd sizes: overflow or out of device memory, cleanly (not in the
     * --small run, for compute-sanitizer: it reports the deliberate failed
     * cudaMalloc as an API error) */
    if (!bo_small()) {
        la_mhla_state *sx = NULL;
        la_status s = la_mhla_state_create(&p, (int64_t)1 << 16, 1 << 10, 64, 64, &W.dev, &sx);
        CHECK((s == LA_ERR_NOMEM || s == LA_ERR_OVERFLOW) && sx == NULL,
              "huge state -> %s: %s", la_status_string(s), la_last_error());
        printf("  %s\n", la_last_error());
        s = la_mhla_state_create(&p, (int64_t)1 << 40, (int64_t)1 << 20, 64, 64, &W.dev, &sx);
        CHECK((s == LA_ERR_NOMEM || s == LA_ERR_OVERFLOW || s == LA_ERR_SHAPE) && sx == NULL,
              "overflowing state -> %s: %s", la_status_string(s), la_last_error());
        printf("  %s\n", la_last_error());
        s = la_mhla_state_create(&p, 1, 1, 8192, 8192, &W.dev, &sx);
        CHECK(s != LA_OK && sx == NULL, "D = Dv = 8192 -> %s", la_status_string(s));
        printf("  %s\n", la_last_error());
    }
done:
    CHECK_OK(la_mhla_state_destroy(sg));
    CHECK_OK(la_mhla_state_destroy(sc));
    tb_free(&q); tb_free(&k); tb_free(&v); tb_free(&o); tb_free(&q2); tb_free(&W);
}

typedef struct decode_args {
    int64_t B, N, H, D, Dv, C; la_mhla_normalize norm; la_feature feat; int per_head, wkind;
    int64_t piece; int perm; la_dtype dt;
} decode_args;

static void run_decode(const void *p) {
    const decode_args *a = p;
    t_decode(a->B, a->N, a->H, a->D, a->Dv, a->C, a->norm, a->feat, a->per_head, a->wkind,
             a->piece, a->dt, a->perm);
}

/* DECODE(small, B, N, H, D, Dv, C, norm, feat, per_head, mixing kind, piece, perm):
 * the case in f32, bf16 and f16 */
#define DECODE_DT(SMALL, ...)                                                                   \
    BO_ADD(L, ((bo_opts){"mhla_decode", BO_CUDA, (SMALL), NULL, NULL, NULL}), run_decode,          \
           decode_args, __VA_ARGS__)
#define DECODE(SMALL, ...)                                                                      \
    do {                                                                                        \
        DECODE_DT(SMALL, __VA_ARGS__, LA_F32);                                                  \
        DECODE_DT(SMALL, __VA_ARGS__, LA_BF16);                                                 \
        DECODE_DT(SMALL, __VA_ARGS__, LA_F16);                                                  \
    } while (0)

void cases_decode(bo_list *L) {
    const la_mhla_normalize NO = LA_MHLA_NORM_NONE, PQ = LA_MHLA_NORM_PER_QUERY;
    const la_feature RE = LA_FEATURE_RELU, RP = LA_FEATURE_RELU_EPS, EL = LA_FEATURE_ELU1;
    /*  small B  N    H  D    Dv   C   norm feat ph w  piece perm */
    DECODE(1, 2, 1, 3, 16, 17, 64, NO, RE, 0, 0, 1, 0);
    DECODE(1, 2, 63, 3, 16, 24, 64, PQ, RP, 1, 0, 1, 1);
    DECODE(1, 2, 65, 3, 64, 48, 64, NO, RE, 0, 1, 1, 0);
    DECODE(1, 2, 65, 3, 64, 48, 64, PQ, RP, 1, 0, 5, 0);
    DECODE(1, 2, 200, 3, 16, 8, 7, PQ, RP, 0, 0, 1, 0);
    DECODE(1, 2, 200, 3, 64, 32, 7, NO, RE, 1, 1, 9, 1);
    DECODE(1, 2, 200, 3, 128, 96, 64, NO, RE, 0, 0, 1, 1);
    DECODE(1, 2, 200, 3, 128, 128, 64, PQ, RP, 1, 0, 17, 0);
    DECODE(1, 2, 65, 3, 128, 64, 7, PQ, EL, 0, 1, 1, 0);
    DECODE(1, 2, 200, 3, 16, 40, 7, NO, RE, 1, 0, 70, 0);
    DECODE(0, 2, 1000, 3, 64, 64, 7, NO, RE, 0, 0, 1, 0);    /* M = 144 blocks */
    DECODE(0, 2, 1000, 3, 128, 128, 7, PQ, RP, 1, 1, 33, 1);
    DECODE(0, 1, 2000, 3, 128, 130, 64, PQ, RP, 0, 0, 64, 0);
    const bo_opts o = {"mhla_decode", BO_CUDA, 1, NULL, NULL, NULL};
    bo_add(L, &o, t_errors, NULL, 0,
           "decode errors: devices, shapes, capacity, absurd sizes; refused calls write nothing");
}
