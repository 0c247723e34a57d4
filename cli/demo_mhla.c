/* `longattn demo` section: MHLA (SPEC §5) on a 2-D image grid and a 3-D video
 * grid at growing N, causal MHLA and decoding; every stage is checked against
 * a small float64 reference computed inline (the pairwise form of §9). */
#include <stdlib.h>

#include "cli.h"

typedef struct demo_qkv {
    float *q, *k, *v, *o;
    la_tensor tq, tk, tv, to;
} demo_qkv;

static int qkv_make(demo_qkv *x, int64_t B, int64_t N, int64_t H, int64_t D, uint64_t seed) {
    cli_rng64 rng = {seed};
    size_t n = (size_t)(B * N * H * D);
    x->q = malloc(n * 4), x->k = malloc(n * 4), x->v = malloc(n * 4), x->o = malloc(n * 4);
    if (!x->q || !x->k || !x->v || !x->o) return 0;
    for (size_t i = 0; i < n; i++) {
        x->q[i] = (float)cli_rng64_normal(&rng);
        x->k[i] = (float)cli_rng64_normal(&rng);
        x->v[i] = (float)cli_rng64_normal(&rng);
        x->o[i] = NAN;
    }
    int64_t ne[4] = {B, N, H, D};
    la_tensor_init(&x->tq, x->q, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&x->tk, x->k, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&x->tv, x->v, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&x->to, x->o, LA_F32, LA_DEVICE_CPU, 4, ne);
    return 1;
}

static void qkv_free(demo_qkv *x) { free(x->q), free(x->k), free(x->v), free(x->o); }

/* Float64 pairwise reference (B=1, per head): o_t = Σ_s W[b(t),b(s)] q̃_t·k̃_s v_s
 * / (Σ_s ... + eps), s over all tokens or s <= t (causal). Returns the
 * relative error of x->o against it. */
static double check_ref(const demo_qkv *x, int64_t N, int64_t H, int64_t D, const int64_t *blk,
                        const float *W, int64_t M, int causal, la_feature f, int normalize,
                        double scale) {
    double md = 0, mr = 0;
    double *num = malloc(sizeof(double) * (size_t)D);
    for (int64_t h = 0; h < H; h++)
        for (int64_t t = 0; t < N; t++) {
            double den = 0;
            for (int64_t e = 0; e < D; e++) num[e] = 0;
            for (int64_t s = 0; s < (causal ? t + 1 : N); s++) {
                double a = 0;
                for (int64_t d = 0; d < D; d++)
                    a += scale * cli_feature(f, x->q[(t * H + h) * D + d]) *
                         cli_feature(f, x->k[(s * H + h) * D + d]);
                a *= W[blk[t] * M + blk[s]];
                den += a;
                for (int64_t e = 0; e < D; e++) num[e] += a * x->v[(s * H + h) * D + e];
            }
            for (int64_t e = 0; e < D; e++) {
                double r = normalize ? num[e] / (den + 1e-6) : num[e];
                double g = x->o[(t * H + h) * D + e];
                md = fmax(md, isnan(g) ? INFINITY : fabs(g - r));
                mr = fmax(mr, fabs(r));
            }
        }
    free(num);
    return md / fmax(mr, 1e-30);
}

static int verdict(FILE *f, const char *what, double err, double tol) {
    fprintf(f, "   check %-44s rel err %.2e  %s\n", what, err, err <= tol ? "PASS" : "FAIL");
    return err <= tol ? 0 : 1;
}

/* Block id of each token, straight from SPEC §5.1. */
static void block_ids(int nd, const int64_t *grid, const int64_t *blocks, int64_t N, int64_t *blk) {
    for (int64_t t = 0; t < N; t++) {
        int64_t r = t, c[3], id = 0;
        for (int a = nd - 1; a >= 0; a--) c[a] = r % grid[a], r /= grid[a];
        for (int a = 0; a < nd; a++) id = id * blocks[a] + c[a] * blocks[a] / grid[a];
        blk[t] = id;
    }
}

/* One non-causal run on a grid: time it (median of a few) or check it. */
static int grid_stage(FILE *f, la_context *ctx, int nd, const int64_t *grid, const int64_t *blocks,
                      int64_t H, int64_t D, int check, uint64_t seed) {
    int64_t N = 1, M = 1;
    for (int a = 0; a < nd; a++) N *= grid[a], M *= blocks[a];
    demo_qkv x;
    float *W = malloc(sizeof(float) * (size_t)(M * M));
    int fails = 0;
    if (!W || !qkv_make(&x, 1, N, H, D, seed)) {
        fprintf(f, "   (out of memory at N=%lld)\n", (long long)N);
        free(W);
        return 1;
    }
    la_tensor tw;
    int64_t wne[2] = {M, M};
    la_tensor_init(&tw, W, LA_F32, LA_DEVICE_CPU, 2, wne);
    la_mhla_init(LA_MHLA_INIT_LOCALITY, nd, blocks, &tw);
    la_mhla_params p;
    la_mhla_params_init(&p);
    p.grid_ndim = nd;
    for (int a = 0; a < nd; a++) p.grid[a] = grid[a], p.blocks[a] = blocks[a];
    char gs[48], bs[48];
    int o = 0;
    for (int a = 0; a < nd; a++) o += snprintf(gs + o, sizeof gs - (size_t)o, "%s%lld", a ? "x" : "", (long long)grid[a]);
    o = 0;
    for (int a = 0; a < nd; a++) o += snprintf(bs + o, sizeof bs - (size_t)o, "%s%lld", a ? "x" : "", (long long)blocks[a]);
    double best = 1e30;
    for (int rep = 0; rep < (check ? 1 : 3); rep++) {
        double t0 = cli_now();
        la_status s = la_mhla_forward(&p, &x.tq, &x.tk, &x.tv, &tw, &x.to, ctx);
        double dt = cli_now() - t0;
        if (s != LA_OK) {
            fprintf(f, "   error: %s\n", la_last_error());
            fails++;
            break;
        }
        best = dt < best ? dt : best;
    }
    if (check) {
        char what[160];
        snprintf(what, sizeof what, "grid %s, blocks %s (M=%lld) vs float64", gs, bs, (long long)M);
        int64_t *blk = malloc(sizeof(int64_t) * (size_t)N);
        block_ids(nd, grid, blocks, N, blk);
        fails += verdict(f, what, check_ref(&x, N, H, D, blk, W, M, 0, p.feature, 1, 1.0), 1e-5);
        free(blk);
    } else if (!fails) {
        fprintf(f, "   grid %-10s N=%-6lld blocks %-6s M=%-3lld %8.2f ms  %6.2f Mtok/s\n", gs,
                (long long)N, bs, (long long)M, best * 1e3, N / best * 1e-6);
    }
    qkv_free(&x);
    free(W);
    return fails;
}

int cli_demo_mhla(FILE *f, int quick) {
    la_context *ctx;
    if (la_context_create(&ctx) != LA_OK) return 1;
    int fails = 0;
    const int64_t H = 4, D = 64;

    fprintf(f, "-- 2-D image grid, 4x4 blocks, locality mixing, H=%lld D=%lld (non-causal, per_query)\n",
            (long long)H, (long long)D);
    fprintf(f, "   Linear cost: doubling the side quadruples N and about quadruples the time.\n");
    {
        const int64_t g1[2] = {18, 14}, b1[2] = {4, 4}; /* uneven blocks */
        fails += grid_stage(f, ctx, 2, g1, b1, 2, 16, 1, 11);
        for (int64_t side = 32; side <= (quick ? 128 : 256); side *= 2) {
            const int64_t g[2] = {side, side}, b[2] = {4, 4};
            fails += grid_stage(f, ctx, 2, g, b, H, D, 0, 12 + (uint64_t)side);
        }
    }
    fprintf(f, "-- 3-D video grid, blocks 2x4x4 (M=32), locality mixing\n");
    {
        const int64_t g1[3] = {5, 7, 6}, b1[3] = {2, 3, 2};
        fails += grid_stage(f, ctx, 3, g1, b1, 2, 16, 1, 21);
        for (int64_t T = 4; T <= (quick ? 8 : 16); T *= 2) {
            const int64_t g[3] = {T, 32, 32}, b[3] = {2, 4, 4};
            fails += grid_stage(f, ctx, 3, g, b, H, D, 0, 22 + (uint64_t)T);
        }
    }

    fprintf(f, "-- causal MHLA, chunks of C=64, uniform_causal mixing (1/(i+1) over earlier blocks)\n");
    {
        /* check: N=200, C=16, per_query, against the float64 reference */
        const int64_t N = 200, C = 16, M = (N + C - 1) / C, h = 2, d = 16;
        demo_qkv x;
        float *W = malloc(sizeof(float) * (size_t)(M * M));
        int64_t *blk = malloc(sizeof(int64_t) * (size_t)N);
        if (W && blk && qkv_make(&x, 1, N, h, d, 31)) {
            la_tensor tw;
            int64_t wne[2] = {M, M}, bm[1] = {M};
            la_tensor_init(&tw, W, LA_F32, LA_DEVICE_CPU, 2, wne);
            la_mhla_init(LA_MHLA_INIT_UNIFORM_CAUSAL, 1, bm, &tw);
            la_mhla_causal_params p;
            la_mhla_causal_params_init(&p);
            p.chunk = C;
            p.normalize = LA_MHLA_NORM_PER_QUERY;
            la_status s = la_mhla_causal_forward(&p, &x.tq, &x.tk, &x.tv, &tw, &x.to, ctx);
            for (int64_t t = 0; t < N; t++) blk[t] = t / C;
            fails += verdict(f, "causal N=200 C=16 per_query vs float64",
                             s == LA_OK ? check_ref(&x, N, h, d, blk, W, M, 1, p.feature, 1, 1 / sqrt((double)d))
                                        : INFINITY, 1e-5);
            /* decode token by token must equal the chunkwise forward */
            float *o_chunk = malloc(sizeof(float) * (size_t)(N * h * d));
            memcpy(o_chunk, x.o, sizeof(float) * (size_t)(N * h * d));
            la_mhla_state *st = NULL;
            double e = INFINITY;
            if (la_mhla_state_create(&p, 1, h, d, d, &tw, &st) == LA_OK) {
                int ok = 1;
                for (int64_t t = 0; t < N && ok; t++) {
                    la_tensor qt = x.tq, kt = x.tk, vt = x.tv, ot = x.to;
                    qt.data = x.q + t * h * d, kt.data = x.k + t * h * d, vt.data = x.v + t * h * d;
                    ot.data = x.o + t * h * d;
                    qt.ne[1] = kt.ne[1] = vt.ne[1] = ot.ne[1] = 1;
                    ok = la_mhla_state_append(st, &qt, &kt, &vt, &ot, ctx) == LA_OK;
                }
                if (ok) {
                    double md = 0, mr = 0;
                    for (int64_t i = 0; i < N * h * d; i++)
                        md = fmax(md, fabs((double)x.o[i] - o_chunk[i])), mr = fmax(mr, fabs(o_chunk[i]));
                    e = md / mr;
                }
                la_mhla_state_destroy(st);
            }
            fails += verdict(f, "decode token by token vs chunkwise", e, 1e-5);
            free(o_chunk);
            qkv_free(&x);
        } else {
            fails++;
        }
        free(W), free(blk);
    }
    {
        const int64_t nmax = quick ? 16384 : 65536, C = 64, Mx = nmax / C;
        float *W = malloc(sizeof(float) * (size_t)(Mx * Mx));
        demo_qkv x;
        if (W && qkv_make(&x, 1, nmax, H, D, 41)) {
            la_tensor tw;
            int64_t wne[2] = {Mx, Mx}, bm[1] = {Mx};
            la_tensor_init(&tw, W, LA_F32, LA_DEVICE_CPU, 2, wne);
            la_mhla_init(LA_MHLA_INIT_UNIFORM_CAUSAL, 1, bm, &tw);
            la_mhla_causal_params p;
            la_mhla_causal_params_init(&p);
            for (int64_t N = 1024; N <= nmax; N *= 4) {
                la_tensor q = x.tq, k = x.tk, v = x.tv, o = x.to;
                q.ne[1] = k.ne[1] = v.ne[1] = o.ne[1] = N; /* first N tokens (prefix view) */
                q.nb[0] = k.nb[0] = v.nb[0] = o.nb[0] = N * H * D;
                double t0 = cli_now();
                la_status s = la_mhla_causal_forward(&p, &q, &k, &v, &tw, &o, ctx);
                double dt = cli_now() - t0;
                if (s != LA_OK) {
                    fprintf(f, "   error: %s\n", la_last_error());
                    fails++;
                    break;
                }
                fprintf(f, "   causal N=%-6lld (M=%-4lld blocks) %8.2f ms  %6.2f Mtok/s\n",
                        (long long)N, (long long)(N / C), dt * 1e3, N / dt * 1e-6);
            }
            /* decoding: per-token time at growing context */
            fprintf(f, "-- decoding with la_mhla_state: time per token vs context (state O(M d dv))\n");
            la_mhla_state *st = NULL;
            if (la_mhla_state_create(&p, 1, H, D, D, &tw, &st) == LA_OK) {
                int64_t ctxlen = 0;
                for (int64_t target = 1024; target <= nmax - 256; target *= 4) {
                    la_tensor q = x.tq, k = x.tk, v = x.tv, o = x.to;
                    int64_t n = target - ctxlen; /* prefill up to the target context */
                    q.ne[1] = k.ne[1] = v.ne[1] = o.ne[1] = n;
                    la_mhla_state_append(st, &q, &k, &v, &o, ctx);
                    ctxlen = target;
                    const int64_t steps = 128;
                    double t0 = cli_now();
                    for (int64_t i = 0; i < steps; i++) {
                        la_tensor q1 = x.tq, k1 = x.tk, v1 = x.tv, o1 = x.to;
                        q1.ne[1] = k1.ne[1] = v1.ne[1] = o1.ne[1] = 1;
                        q1.data = x.q + i * H * D, k1.data = x.k + i * H * D;
                        v1.data = x.v + i * H * D, o1.data = x.o + i * H * D;
                        la_mhla_state_append(st, &q1, &k1, &v1, &o1, ctx);
                    }
                    double dt = (cli_now() - t0) / steps;
                    ctxlen += steps;
                    fprintf(f, "   context %-6lld  %7.2f us/token (mean over %lld tokens, 2 block starts)\n",
                            (long long)target, dt * 1e6, (long long)steps);
                }
                la_mhla_state_destroy(st);
            }
            qkv_free(&x);
        } else {
            fprintf(f, "   (out of memory)\n");
            fails++;
        }
        free(W);
    }
    la_context_destroy(ctx);
    return fails;
}
