/* NaN propagation of the dense operators on the CPU (SPEC §2: "propagate,
 * never crash"; NaN goes through every feature map as through torch.relu).
 *
 * One NaN is planted in q, k or v of head 1 and the output's NaN pattern is
 * checked element by element against what the formula implies:
 *   non-causal (linear, MHLA, focused both variants):
 *     q[t]   -> row t of head 1 NaN, everything else finite
 *     k[s]   -> every row of head 1 NaN (it enters every summary), head 0 finite
 *     (focused flatten normalizes a token's features over all heads: there
 *     q[t] and k[s] reach head 0 too)
 *     v[s,e] -> column e of head 1 NaN, everything else finite
 *   causal (linear, MHLA chunkwise, MHLA decoding), s at a chunk start:
 *     q[t]   -> row t of head 1 NaN
 *     k[s]   -> rows t >= s of head 1 NaN, rows t < s finite
 *     v[s,e] -> column e of rows t >= s of head 1 NaN, the rest finite
 *   attention map (linear): q[t] -> map row t NaN; k[s] -> every row NaN.
 * Each case runs with f32 inputs (the AVX-512 kernels where they apply) and
 * f64 inputs (the GEMM path). */
#include "test_util.h"

enum { W_FIN = 0, W_NAN = 1 };
enum { IN_Q = 0, IN_K = 1, IN_V = 2 };
static const char *in_name[] = {"q", "k", "v"};

#define NT 64 /* tokens (an 8x8 map for focused) */
#define NH 2
#define ND 16
#define NC 16 /* causal chunk */
#define T_Q 40
#define S_K 32 /* a chunk start */
#define E_V 5

typedef struct dense_case {
    float q[NT * NH * ND], k[NT * NH * ND], v[NT * NH * ND];
    double qd[NT * NH * ND], kd[NT * NH * ND], vd[NT * NH * ND];
    float out[NT * NH * ND];
    unsigned char want[NT * NH * ND];
    la_dtype dt;
    la_tensor tq, tk, tv, to;
} dense_case;

static void setup(dense_case *c, la_rng *r, int which, la_dtype dt) {
    la_fill_normal(r, c->q, NT * NH * ND, 1.0);
    la_fill_normal(r, c->k, NT * NH * ND, 1.0);
    la_fill_normal(r, c->v, NT * NH * ND, 1.0);
    const int64_t at_q = ((int64_t)T_Q * NH + 1) * ND + 3, at_k = ((int64_t)S_K * NH + 1) * ND + 7;
    const int64_t at_v = ((int64_t)S_K * NH + 1) * ND + E_V;
    if (which == IN_Q) c->q[at_q] = NAN;
    if (which == IN_K) c->k[at_k] = NAN;
    if (which == IN_V) c->v[at_v] = NAN;
    for (int64_t i = 0; i < NT * NH * ND; i++) {
        c->qd[i] = c->q[i];
        c->kd[i] = c->k[i];
        c->vd[i] = c->v[i];
    }
    la_fill_nan(c->out, NT * NH * ND); /* poisoned: every element must be written */
    const int64_t ne[4] = {1, NT, NH, ND};
    c->dt = dt;
    la_tensor_init(&c->tq, dt == LA_F32 ? (void *)c->q : (void *)c->qd, dt, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&c->tk, dt == LA_F32 ? (void *)c->k : (void *)c->kd, dt, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&c->tv, dt == LA_F32 ? (void *)c->v : (void *)c->vd, dt, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&c->to, c->out, LA_F32, LA_DEVICE_CPU, 4, ne);
}

/* The expected pattern of head 1; head 0 is finite, but with all_heads (the
 * flatten map normalizes a token's features over all heads together) a NaN
 * in q or k reaches head 0 as it reaches head 1. */
static void expect(dense_case *c, int which, int causal, int all_heads) {
    for (int64_t t = 0; t < NT; t++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t e = 0; e < ND; e++) {
                int w = W_FIN;
                if (h == 1 || (all_heads && which != IN_V)) {
                    if (which == IN_Q) w = t == T_Q ? W_NAN : W_FIN;
                    if (which == IN_K) w = (!causal || t >= S_K) ? W_NAN : W_FIN;
                    if (which == IN_V) w = e == E_V && (!causal || t >= S_K) ? W_NAN : W_FIN;
                }
                c->want[(t * NH + h) * ND + e] = (unsigned char)w;
            }
}

static void check_pattern(const char *op, const dense_case *c, int which, const float *out,
                          const unsigned char *want, int64_t n) {
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++) {
        if (want[i] == W_NAN ? !isnan(out[i]) : !isfinite(out[i])) bad = i;
    }
    CHECK(bad < 0, "%s, NaN in %s, %s inputs: element %lld is %g, want %s", op, in_name[which],
          la_dtype_name(c->dt), (long long)bad, bad < 0 ? 0.0 : (double)out[bad],
          bad >= 0 && want[bad] == W_NAN ? "NaN" : "finite");
}

static void run_linear(la_rng *r, int causal, la_feature f, la_context *ctx) {
    for (int which = 0; which < 3; which++)
        for (int di = 0; di < 2; di++) {
            dense_case *c = malloc(sizeof *c);
            setup(c, r, which, di ? LA_F64 : LA_F32);
            la_linear_params p;
            la_linear_params_init(&p);
            p.feature = f;
            p.causal = causal;
            p.chunk = NC;
            CHECK_OK(la_linear_attention(&p, &c->tq, &c->tk, &c->tv, &c->to, NULL, NULL, NULL, NULL, ctx));
            expect(c, which, causal, 0);
            check_pattern(causal ? "linear causal" : "linear", c, which, c->out, c->want, NT * NH * ND);
            free(c);
        }
}

static void run_mhla(la_rng *r, la_context *ctx) {
    float W[4 * 4];
    for (int i = 0; i < 16; i++) W[i] = 0.25f + 0.5f * (float)la_rng_uniform(r);
    la_tensor tw;
    la_tensor_init(&tw, W, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){4, 4});
    for (int grid2d = 0; grid2d < 2; grid2d++)
        for (int which = 0; which < 3; which++)
            for (int di = 0; di < 2; di++) {
                dense_case *c = malloc(sizeof *c);
                setup(c, r, which, di ? LA_F64 : LA_F32);
                la_mhla_params p;
                la_mhla_params_init(&p); /* relu_eps, per_query */
                if (grid2d) {
                    p.grid_ndim = 2, p.grid[0] = 8, p.grid[1] = 8, p.blocks[0] = 2, p.blocks[1] = 2;
                } else {
                    p.grid_ndim = 1, p.grid[0] = NT, p.blocks[0] = 4;
                }
                CHECK_OK(la_mhla_forward(&p, &c->tq, &c->tk, &c->tv, &tw, &c->to, ctx));
                expect(c, which, 0, 0);
                check_pattern(grid2d ? "mhla 2-D" : "mhla", c, which, c->out, c->want, NT * NH * ND);
                free(c);
            }
}

/* Causal MHLA with uniform_causal mixing (its rows are constant below the
 * diagonal: the mixing is a running sum) and with a general W (GEMMs over
 * row blocks, which must not multiply a later chunk's NaN summary by a zero
 * weight): in both, rows before s stay finite. */
static void run_mhla_causal(la_rng *r, la_context *ctx) {
    /* chunk 2: 32 chunks, so the mixing has row groups before the NaN's */
    const int64_t chunks[2] = {NC, 2};
    float Wu[32 * 32], Wg[32 * 32];
    for (int ci = 0; ci < 2; ci++) {
        const int64_t M = NT / chunks[ci];
        la_tensor twu, twg;
        la_tensor_init(&twu, Wu, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){M, M});
        la_tensor_init(&twg, Wg, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){M, M});
        CHECK_OK(la_mhla_init(LA_MHLA_INIT_UNIFORM_CAUSAL, 1, &M, &twu));
        for (int64_t i = 0; i < M * M; i++) Wg[i] = 0.25f + 0.5f * (float)la_rng_uniform(r);
        for (int gen = 0; gen < 2; gen++)
            for (int norm = 0; norm < 2; norm++)
                for (int which = 0; which < 3; which++)
                    for (int di = 0; di < 2; di++) {
                        dense_case *c = malloc(sizeof *c);
                        setup(c, r, which, di ? LA_F64 : LA_F32);
                        la_mhla_causal_params p;
                        la_mhla_causal_params_init(&p);
                        p.chunk = chunks[ci];
                        p.feature = LA_FEATURE_RELU_EPS;
                        p.normalize = norm ? LA_MHLA_NORM_PER_QUERY : LA_MHLA_NORM_NONE;
                        CHECK_OK(la_mhla_causal_forward(&p, &c->tq, &c->tk, &c->tv, gen ? &twg : &twu, &c->to,
                                                        ctx));
                        expect(c, which, 1, 0);
                        check_pattern(gen ? "mhla causal (general W)" : "mhla causal", c, which, c->out,
                                      c->want, NT * NH * ND);
                        free(c);
                    }
    }
}

/* Decoding: the whole sequence in one append, and token by token. */
static void run_mhla_decode(la_rng *r, la_context *ctx) {
    const int64_t M = NT / NC;
    float Wu[16];
    la_tensor twu;
    la_tensor_init(&twu, Wu, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){M, M});
    CHECK_OK(la_mhla_init(LA_MHLA_INIT_UNIFORM_CAUSAL, 1, &M, &twu));
    for (int one = 0; one < 2; one++)
        for (int which = 0; which < 3; which++) {
            dense_case *c = malloc(sizeof *c);
            setup(c, r, which, LA_F32);
            la_mhla_causal_params p;
            la_mhla_causal_params_init(&p);
            p.chunk = NC;
            p.normalize = LA_MHLA_NORM_PER_QUERY;
            la_mhla_state *st = NULL;
            CHECK_OK(la_mhla_state_create(&p, 1, NH, ND, ND, &twu, &st));
            const int64_t step = one ? 1 : NT;
            for (int64_t t0 = 0; t0 < NT && st; t0 += step) {
                const int64_t ne[4] = {1, step, NH, ND}, nb[4] = {NT * NH * ND, NH * ND, ND, 1};
                la_tensor q1, k1, v1, o1;
                la_tensor_init_strided(&q1, c->q + t0 * NH * ND, LA_F32, LA_DEVICE_CPU, 4, ne, nb);
                la_tensor_init_strided(&k1, c->k + t0 * NH * ND, LA_F32, LA_DEVICE_CPU, 4, ne, nb);
                la_tensor_init_strided(&v1, c->v + t0 * NH * ND, LA_F32, LA_DEVICE_CPU, 4, ne, nb);
                la_tensor_init_strided(&o1, c->out + t0 * NH * ND, LA_F32, LA_DEVICE_CPU, 4, ne, nb);
                CHECK_OK(la_mhla_state_append(st, &q1, &k1, &v1, &o1, ctx));
            }
            la_mhla_state_destroy(st);
            expect(c, which, 1, 0);
            check_pattern(one ? "mhla decode (token by token)" : "mhla decode", c, which, c->out, c->want,
                          NT * NH * ND);
            free(c);
        }
}

static void run_focused(la_rng *r, la_context *ctx) {
    float conv_f[ND * 9], conv_b[NH * ND * 9];
    la_fill_normal(r, conv_f, ND * 9, 0.3);
    la_fill_normal(r, conv_b, NH * ND * 9, 0.3);
    la_tensor tcf, tcb;
    la_tensor_init(&tcf, conv_f, LA_F32, LA_DEVICE_CPU, 3, (int64_t[]){ND, 3, 3});
    la_tensor_init(&tcb, conv_b, LA_F32, LA_DEVICE_CPU, 3, (int64_t[]){NH * ND, 3, 3});
    for (int blog = 0; blog < 2; blog++)
        for (int which = 0; which < 3; which++)
            for (int di = 0; di < 2; di++) {
                dense_case *c = malloc(sizeof *c);
                setup(c, r, which, di ? LA_F64 : LA_F32);
                la_focused_params p;
                la_focused_params_init(&p);
                p.variant = blog ? LA_FOCUSED_BLOG : LA_FOCUSED_FLATTEN;
                p.map_h = 8, p.map_w = 8;
                CHECK_OK(la_focused_attention(&p, &c->tq, &c->tk, &c->tv, blog ? &tcb : &tcf, NULL, NULL, NULL,
                                              &c->to, ctx));
                expect(c, which, 0, !blog);
                check_pattern(blog ? "focused blog" : "focused flatten", c, which, c->out, c->want, NT * NH * ND);
                free(c);
            }
}

static void run_attn_map(la_rng *r, la_context *ctx) {
    float q[NT * ND], k[NT * ND];
    double map[NT * NT];
    for (int which = 0; which < 2; which++) {
        la_fill_normal(r, q, NT * ND, 1.0);
        la_fill_normal(r, k, NT * ND, 1.0);
        if (which == IN_Q) q[T_Q * ND + 2] = NAN;
        if (which == IN_K) k[S_K * ND + 2] = NAN;
        for (int64_t i = 0; i < NT * NT; i++) map[i] = NAN;
        la_tensor tq, tk, tm;
        la_tensor_init(&tq, q, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){NT, ND});
        la_tensor_init(&tk, k, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){NT, ND});
        la_tensor_init(&tm, map, LA_F64, LA_DEVICE_CPU, 2, (int64_t[]){NT, NT});
        la_attn_map_params p;
        la_attn_map_params_init(&p);
        p.variant = LA_MAP_LINEAR;
        p.feature = LA_FEATURE_RELU;
        CHECK_OK(la_attention_map(&p, &tq, &tk, NULL, NULL, &tm, ctx));
        int64_t bad = -1;
        for (int64_t t = 0; t < NT && bad < 0; t++)
            for (int64_t s = 0; s < NT && bad < 0; s++) {
                const int want_nan = which == IN_K || t == T_Q;
                if (want_nan ? !isnan(map[t * NT + s]) : !isfinite(map[t * NT + s])) bad = t * NT + s;
            }
        CHECK(bad < 0, "attn-map linear, NaN in %s: entry %lld is %g", in_name[which], (long long)bad,
              bad < 0 ? 0.0 : map[bad]);
    }
}

int main(void) {
    la_rng r = la_test_rng("test_nan_dense");
    la_context *ctx = NULL;
    CHECK_OK(la_context_create(&ctx));
    CHECK_OK(la_context_set_threads(ctx, 2));
    run_linear(&r, 0, LA_FEATURE_RELU, ctx);
    run_linear(&r, 0, LA_FEATURE_RELU_EPS, ctx);
    run_linear(&r, 1, LA_FEATURE_RELU, ctx);
    run_mhla(&r, ctx);
    run_mhla_causal(&r, ctx);
    run_mhla_decode(&r, ctx);
    run_focused(&r, ctx);
    run_attn_map(&r, ctx);
    la_context_destroy(ctx);
    return la_test_finish();
}
