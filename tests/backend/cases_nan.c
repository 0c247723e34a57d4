/* NaN inputs on CUDA against the CPU path (SPEC §2 "propagate, never
 * crash"; issue 21 point 5): one NaN put into q, k or v (or the indexer's q)
 * at a chosen token, the op run on both backends from the same values. The
 * outputs must be NaN at exactly the same elements, and equal elsewhere
 * within the precision's bound: a NaN must neither vanish (the ReLU-family
 * feature maps once turned it into 0) nor leak into outputs that do not
 * depend on it (earlier tokens of a causal op, through a masked product).
 * The indexers' selections must be equal index for index (NaN ranks first,
 * ties to the lower index); sparse attention gives NaN out and lse for a NaN
 * query. */
#include "backend_ops.h"
#include "bo_staging.h"

enum { NAN_LINEAR, NAN_LINEAR_CAUSAL, NAN_MHLA, NAN_MHLA_CAUSAL, NAN_FLATTEN, NAN_BLOG };

typedef struct nan_dense_args {
    int op;
    int which;      /* 0: q, 1: k, 2: v */
    int64_t token;  /* where the NaN goes (head 0, channel 0) */
    int64_t D;      /* head dim (Dv = D) */
    la_dtype dt;
} nan_dense_args;

/* Runs op on (q, k, v) of [1, N, H, D] in `dev` memory; out likewise. */
static la_status run_dense(int op, la_device dev, void *q, void *k, void *v, void *mix, void *out,
                           la_dtype dt, int64_t N, int64_t H, int64_t D, int64_t M) {
    const int64_t ne[4] = {1, N, H, D};
    la_tensor tq, tk, tv, to, tm;
    la_tensor_init(&tq, q, dt, dev, 4, ne);
    la_tensor_init(&tk, k, dt, dev, 4, ne);
    la_tensor_init(&tv, v, dt, dev, 4, ne);
    la_tensor_init(&to, out, LA_F32, dev, 4, ne);
    const int64_t nm[2] = {M, M};
    la_tensor_init(&tm, mix, LA_F32, dev, 2, nm);
    la_context *ctx = dev == LA_DEVICE_CUDA ? bo_ctx() : NULL;
    if (op == NAN_LINEAR || op == NAN_LINEAR_CAUSAL) {
        la_linear_params p;
        la_linear_params_init(&p);
        p.causal = op == NAN_LINEAR_CAUSAL;
        p.chunk = 16;
        return la_linear_attention(&p, &tq, &tk, &tv, &to, NULL, NULL, NULL, NULL, ctx);
    }
    if (op == NAN_MHLA) {
        la_mhla_params p;
        la_mhla_params_init(&p);
        p.grid_ndim = 1, p.grid[0] = N, p.blocks[0] = M;
        return la_mhla_forward(&p, &tq, &tk, &tv, &tm, &to, ctx);
    }
    if (op == NAN_MHLA_CAUSAL) {
        la_mhla_causal_params p;
        la_mhla_causal_params_init(&p);
        p.chunk = 16;
        return la_mhla_causal_forward(&p, &tq, &tk, &tv, &tm, &to, ctx);
    }
    la_focused_params p;
    la_focused_params_init(&p);
    p.variant = op == NAN_FLATTEN ? LA_FOCUSED_FLATTEN : LA_FOCUSED_BLOG;
    p.map_h = 8, p.map_w = N / 8;
    return la_focused_attention(&p, &tq, &tk, &tv, NULL, NULL, NULL, NULL, &to, ctx);
}

/* Same NaN elements; elsewhere |cpu - dev| <= tol · max|cpu|. */
static void compare_nan(const char *what, const float *cpu, const float *dev, int64_t n, double tol) {
    int64_t mask_diff = 0, first = -1;
    double mx = 0, err = 0;
    for (int64_t i = 0; i < n; i++) {
        const int a = isnan(cpu[i]), b = isnan(dev[i]);
        if (a != b) {
            if (first < 0) first = i;
            mask_diff++;
        } else if (!a) {
            mx = fmax(mx, fabs(cpu[i]));
            err = fmax(err, fabs((double)cpu[i] - dev[i]));
        }
    }
    CHECK(mask_diff == 0, "%s: %lld elements NaN on one backend only (first %lld: cpu %g cuda %g)",
          what, (long long)mask_diff, (long long)first, first >= 0 ? cpu[first] : 0.f,
          first >= 0 ? dev[first] : 0.f);
    CHECK(err <= tol * (mx > 0 ? mx : 1), "%s: finite outputs differ by %g (max %g)", what, err, mx);
}

static void run_nan_dense(const void *arg) {
    const nan_dense_args *a = arg;
    const int64_t N = 64, H = 2, D = a->D, n = N * H * D, M = a->op == NAN_MHLA ? 4 : N / 16;
    float *x[3];
    for (int i = 0; i < 3; i++) x[i] = randv(n, 1.0);
    dbuf d[3];
    for (int i = 0; i < 3; i++) d[i] = dput(x[i], n, a->dt); /* rounds x to what the device sees */
    x[a->which][a->token * H * D] = NAN;
    {
        const float nanv = NAN;
        const uint16_t nanb = a->dt == LA_F16 ? la_f32_to_f16(NAN) : la_f32_to_bf16(NAN);
        const size_t es = la_dtype_size(a->dt);
        la_dev_upload((char *)d[a->which].d + (size_t)(a->token * H * D) * es,
                      a->dt == LA_F32 ? (const void *)&nanv : (const void *)&nanb, es);
    }
    float *mix = calloc((size_t)(M * M), sizeof(float));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < M; j++)
            if (a->op != NAN_MHLA_CAUSAL || j <= i) mix[i * M + j] = 1.f / (float)(i + 1);
    dbuf dm = dput(mix, M * M, LA_F32);
    float *oc = malloc(sizeof(float) * (size_t)n), *og = malloc(sizeof(float) * (size_t)n);
    dbuf dout = dalloc(sizeof(float) * (size_t)n);
    la_dev_memset(dout.d, 0xFF, sizeof(float) * (size_t)n);
    CHECK_OK(run_dense(a->op, LA_DEVICE_CPU, x[0], x[1], x[2], mix, oc, LA_F32, N, H, D, M));
    if (CHECK_DEV(run_dense(a->op, LA_DEVICE_CUDA, d[0].d, d[1].d, d[2].d, dm.d, dout.d, a->dt, N, H,
                            D, M))) {
        la_dev_download(og, dout.d, sizeof(float) * (size_t)n);
        compare_nan("output", oc, og, n, a->dt == LA_F32 ? 1e-4 : 3e-2);
    }
    for (int i = 0; i < 3; i++) {
        dfree(&d[i]);
        free(x[i]);
    }
    dfree(&dm);
    dfree(&dout);
    free(mix);
    free(oc);
    free(og);
}

typedef struct nan_sparse_args {
    int64_t T, L, topk;
    int64_t token; /* the query row that gets a NaN */
} nan_sparse_args;

/* The flat DSA indexer and sparse attention with a NaN in one query row. */
static void run_nan_sparse(const void *arg) {
    const nan_sparse_args *a = arg;
    const int64_t T = a->T, L = a->L, HI = 4, dI = 64, K = a->topk;
    float *q = randv(T * HI * dI, 1.0), *k = randv(L * dI, 1.0), *w = randv(T * HI, 0.1);
    q[a->token * HI * dI] = NAN;
    dbuf dq = dput(q, T * HI * dI, LA_F32), dk = dput(k, L * dI, LA_F32), dw = dput(w, T * HI, LA_F32);
    int32_t *ic = malloc(sizeof(int32_t) * (size_t)(T * K)), *ig = malloc(sizeof(int32_t) * (size_t)(T * K));
    dbuf di = dalloc(sizeof(int32_t) * (size_t)(T * K));
    la_index_params p;
    la_index_params_init(&p);
    p.topk = K;
    la_tensor tq, tk, tw, ti;
    tset(&tq, q, LA_F32, LA_DEVICE_CPU, 3, T, HI, dI);
    tset(&tk, k, LA_F32, LA_DEVICE_CPU, 2, L, dI, 0);
    tset(&tw, w, LA_F32, LA_DEVICE_CPU, 2, T, HI, 0);
    tset(&ti, ic, LA_I32, LA_DEVICE_CPU, 2, T, K, 0);
    CHECK_OK(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL, NULL));
    tset(&tq, dq.d, LA_F32, LA_DEVICE_CUDA, 3, T, HI, dI);
    tset(&tk, dk.d, LA_F32, LA_DEVICE_CUDA, 2, L, dI, 0);
    tset(&tw, dw.d, LA_F32, LA_DEVICE_CUDA, 2, T, HI, 0);
    tset(&ti, di.d, LA_I32, LA_DEVICE_CUDA, 2, T, K, 0);
    if (CHECK_DEV(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL, bo_ctx()))) {
        la_dev_download(ig, di.d, sizeof(int32_t) * (size_t)(T * K));
        int64_t diff = 0;
        for (int64_t i = 0; i < T * K; i++) diff += ic[i] != ig[i];
        CHECK(diff == 0, "dsa: %lld of %lld indices differ CPU vs CUDA (NaN query row %lld)",
              (long long)diff, (long long)(T * K), (long long)a->token);
    }
    /* sparse attention over the CPU's selection: q [T, 8, dI], kv [L, dI], dv = dI */
    const int64_t Hq = 8;
    float *sq = randv(T * Hq * dI, 1.0);
    sq[a->token * Hq * dI + 3] = NAN;
    dbuf dsq = dput(sq, T * Hq * dI, LA_F32), dsi = dput_i32(ic, T * K);
    float *oc = malloc(sizeof(float) * (size_t)(T * Hq * dI)), *og = malloc(sizeof(float) * (size_t)(T * Hq * dI));
    float *lc = malloc(sizeof(float) * (size_t)(T * Hq)), *lg = malloc(sizeof(float) * (size_t)(T * Hq));
    dbuf dso = dalloc(sizeof(float) * (size_t)(T * Hq * dI)), dsl = dalloc(sizeof(float) * (size_t)(T * Hq));
    la_sparse_attn_params sp;
    la_sparse_attn_params_init(&sp);
    sp.dv = dI;
    la_tensor to, tl;
    tset(&tq, sq, LA_F32, LA_DEVICE_CPU, 3, T, Hq, dI);
    tset(&tk, k, LA_F32, LA_DEVICE_CPU, 2, L, dI, 0);
    tset(&ti, ic, LA_I32, LA_DEVICE_CPU, 2, T, K, 0);
    tset(&to, oc, LA_F32, LA_DEVICE_CPU, 3, T, Hq, dI);
    tset(&tl, lc, LA_F32, LA_DEVICE_CPU, 2, T, Hq, 0);
    CHECK_OK(la_sparse_attention(&sp, &tq, &tk, &ti, &to, &tl, NULL));
    CHECK(isnan(lc[a->token * Hq]), "sparse attention (CPU): lse of the NaN query is %g, not NaN",
          lc[a->token * Hq]);
    tset(&tq, dsq.d, LA_F32, LA_DEVICE_CUDA, 3, T, Hq, dI);
    tset(&tk, dk.d, LA_F32, LA_DEVICE_CUDA, 2, L, dI, 0);
    tset(&ti, dsi.d, LA_I32, LA_DEVICE_CUDA, 2, T, K, 0);
    tset(&to, dso.d, LA_F32, LA_DEVICE_CUDA, 3, T, Hq, dI);
    tset(&tl, dsl.d, LA_F32, LA_DEVICE_CUDA, 2, T, Hq, 0);
    if (CHECK_DEV(la_sparse_attention(&sp, &tq, &tk, &ti, &to, &tl, bo_ctx()))) {
        la_dev_download(og, dso.d, sizeof(float) * (size_t)(T * Hq * dI));
        la_dev_download(lg, dsl.d, sizeof(float) * (size_t)(T * Hq));
        compare_nan("sparse attention out", oc, og, T * Hq * dI, 1e-4);
        compare_nan("sparse attention lse", lc, lg, T * Hq, 1e-5);
    }
    dfree(&dq), dfree(&dk), dfree(&dw), dfree(&di), dfree(&dsq), dfree(&dsi), dfree(&dso), dfree(&dsl);
    free(q), free(k), free(w), free(ic), free(ig), free(sq), free(oc), free(og), free(lc), free(lg);
}

void cases_nan(bo_list *L) {
    static const int ops[] = {NAN_LINEAR, NAN_LINEAR_CAUSAL, NAN_MHLA, NAN_MHLA_CAUSAL, NAN_FLATTEN,
                              NAN_BLOG};
    static const char *names[] = {"linear", "linear", "mhla", "mhla", "focused", "focused"};
    for (int o = 0; o < 6; o++)
        for (int which = 0; which < 3; which++)
            for (int d = 0; d < 3; d++) {
                const int64_t D = d == 1 ? 128 : d == 2 ? 64 : 32;
                const la_dtype dt = d == 1 ? LA_BF16 : d == 2 ? LA_F16 : LA_F32;
                /* token 0: every output that depends on it is NaN on both backends
                 * (a later token would also test that a causal op's masked
                 * intra-chunk product does not leak it backwards) */
                const bo_opts opt = {names[o], BO_CUDA, d == 0, NULL, NULL, NULL};
                BO_ADD(L, opt, run_nan_dense, nan_dense_args, ops[o], which, 0, D, dt);
            }
    const bo_opts sp = {"dsa", BO_CUDA, 1, NULL, NULL, NULL};
    BO_ADD(L, sp, run_nan_sparse, nan_sparse_args, 16, 4096, 256, 5);
    BO_ADD(L, sp, run_nan_sparse, nan_sparse_args, 7, 300, 2048, 0);
}
