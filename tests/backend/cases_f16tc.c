/* Case table of the fp16 tensor-core forward of the linear family on CUDA:
 * linear attention (non-causal), MHLA and focused flatten with f16 inputs
 * under the library's default choice, at the operators' own defaults
 * (la_*_params_init: scale_q = 1, so relu and relu_eps are applied directly
 * in 16 bits; the shape whose per-query denominators the fp16 output pass
 * once left unwritten, which the other tables' scale_q = 0.7 / 0.9 rows
 * missed). Odd N (1, 63, 65, 1000), head dims 32, 64, 128 and (64, 128),
 * (128, 64), permuted [B,H,N,D] views, the feature maps, per_query / none /
 * released_vision, inputs of scale 10 up to N = 256K (the long cases).
 * Each case: inputs rounded to f16 (the CPU path sees the same values),
 * outputs poisoned, the CUDA call against the CPU call in full (tol_of f16:
 * 2e-3, about twice the error of the same formula in fp16) with no
 * non-finite value left, then what the default picked: its output must
 * equal, bit for bit, the same call forced to the variant the default should
 * take (the path is deterministic): "tc_bf16s" for MHLA where that variant
 * takes the problem (16-bit summaries, fp16 ones under powers of two: D = Dv
 * in {64, 128}, 2 <= M <= 256, not released_vision), else "tc". Where the forced call is refused (the fp16
 * tensor-core path switched off: lf_f16_tc in src/cuda/linfam.cu, fo_f16_tc
 * in src/cuda/focused.cu) that sub-check is counted as skipped. The first
 * case of each operator runs verbose: the log shows the choice. */
#include "bo_staging.h"
#include "core/variant.h"

enum { F_LINEAR = 0, F_MHLA = 1, F_FOCUSED = 2 };
static const char *const f16_family[3] = {"linear", "mhla", "focused"};

typedef struct f16_case {
    int op;
    int64_t B, H, D, Dv;
    int nd;
    int64_t grid[3], blocks[3]; /* MHLA: the token grid and blocks; focused: map h, w */
    int feat;                   /* linear / MHLA: the feature map (-1: the default) */
    int norm;                   /* linear: normalize (1 = default); MHLA: la_mhla_normalize */
    int per_head;               /* MHLA: per-head W; focused: softplus and conv bias */
    int64_t ks;                 /* focused: conv k (0: none) */
    int perm;
    double in_scale;
    int verbose;
} f16_case;

/* The operator of c on the host or device copies (dev), output o. */
static la_status f16_call(const f16_case *c, int dev, tb *q, tb *k, tb *v, tb *o, tb *W, tb *conv,
                          tb *bias, tb *sp) {
#define T_(x) (dev ? &(x)->dev : &(x)->host)
    if (c->op == F_LINEAR) {
        la_linear_params p;
        la_linear_params_init(&p);
        if (c->feat >= 0) p.feature = (la_feature)c->feat;
        p.normalize = c->norm;
        return la_linear_attention(&p, T_(q), T_(k), T_(v), T_(o), NULL, NULL, NULL, NULL, bo_ctx());
    }
    if (c->op == F_MHLA) {
        la_mhla_params p;
        la_mhla_params_init(&p);
        if (c->feat >= 0) p.feature = (la_feature)c->feat;
        p.normalize = (la_mhla_normalize)c->norm;
        p.grid_ndim = c->nd;
        for (int a = 0; a < c->nd; a++) {
            p.grid[a] = c->grid[a];
            p.blocks[a] = c->blocks[a];
        }
        return la_mhla_forward(&p, T_(q), T_(k), T_(v), T_(W), T_(o), bo_ctx());
    }
    la_focused_params p;
    la_focused_params_init(&p);
    p.map_h = c->grid[0];
    p.map_w = c->grid[1];
    return la_focused_attention(&p, T_(q), T_(k), T_(v), c->ks ? T_(conv) : NULL,
                                c->ks && c->per_head ? T_(bias) : NULL, c->per_head ? T_(sp) : NULL,
                                NULL, T_(o), bo_ctx());
#undef T_
}

static void run_f16(const void *arg) {
    const f16_case *c = arg;
    int64_t N = 1, M = 1;
    for (int a = 0; a < (c->op == F_FOCUSED ? 2 : c->nd); a++) N *= c->grid[a];
    if (c->op == F_MHLA)
        for (int a = 0; a < c->nd; a++) M *= c->blocks[a];
    int64_t nq[4] = {c->B, N, c->H, c->D}, nv[4] = {c->B, N, c->H, c->Dv};
    tb q = tb_rand(4, nq, LA_F16, c->perm, c->in_scale), k = tb_rand(4, nq, LA_F16, c->perm, c->in_scale),
       v = tb_rand(4, nv, LA_F16, c->perm, c->in_scale);
    tb o = tb_poison(4, nv, LA_F16, c->perm), o2 = tb_poison(4, nv, LA_F16, c->perm);
    tb W = {0}, conv = {0}, bias = {0}, sp = {0};
    if (c->op == F_MHLA) {
        int64_t nw[3] = {c->H, M, M};
        const int64_t n = (c->per_head ? c->H : 1) * M * M;
        float *w = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) w[i] = (float)(0.05 + la_rng_uniform(&bo_rng));
        tb_make(&W, c->per_head ? 3 : 2, c->per_head ? nw : nw + 1, LA_F32, 0, w);
        free(w);
    }
    if (c->op == F_FOCUSED) {
        int64_t ncv[3] = {c->Dv, c->ks, c->ks}, nb1[1] = {c->Dv}, nsp[1] = {c->H * c->D};
        if (c->ks) conv = tb_rand(3, ncv, LA_F32, 0, 0.3);
        if (c->per_head) {
            bias = tb_rand(1, nb1, LA_F32, 0, 0.3);
            sp = tb_rand(1, nsp, LA_F32, 0, 1.0);
        }
    }
    char what[200];
    snprintf(what, sizeof what, "%s f16 B%lld N%lld H%lld D%lld Dv%lld M%lld feat%d norm%d ph%d k%lld p%d x%g",
             f16_family[c->op], (long long)c->B, (long long)N, (long long)c->H, (long long)c->D,
             (long long)c->Dv, (long long)M, c->feat, c->norm, c->per_head, (long long)c->ks, c->perm,
             c->in_scale);
    CHECK_OK(f16_call(c, 0, &q, &k, &v, &o, &W, &conv, &bias, &sp));
    const int was_verbose = la_context_verbose(bo_ctx());
    if (c->verbose) la_context_set_verbose(bo_ctx(), 1);
    const int ok = CHECK_DEV(f16_call(c, 1, &q, &k, &v, &o, &W, &conv, &bias, &sp));
    la_context_set_verbose(bo_ctx(), was_verbose);
    la_dev_synchronize();
    if (ok) {
        tb_compare(&o, what, tol_of(LA_F16, N));
        /* the default's choice: the forced tensor-core path gives the same bits */
        const int s16 = c->op == F_MHLA && c->D == c->Dv && (c->D == 64 || c->D == 128) && M >= 2 && M <= 256 &&
                        c->norm != LA_MHLA_NORM_RELEASED_VISION;
        const char *want = s16 ? "tc_bf16s" : "tc";
        if (bo_use_variant(f16_family[c->op], want)) {
            if (CHECK_DEV(f16_call(c, 1, &q, &k, &v, &o2, &W, &conv, &bias, &sp))) {
                la_dev_synchronize();
                float *a = tb_read(&o, true), *b = tb_read(&o2, true);
                const int64_t n = tb_numel(&o);
                int64_t diff = 0;
                for (int64_t i = 0; i < n; i++) diff += memcmp(&a[i], &b[i], sizeof(float)) != 0;
                CHECK(diff == 0, "%s: the default differs from forced \"%s\" in %lld of %lld outputs "
                      "(the default did not take that path)", what, want, (long long)diff, (long long)n);
                printf("  default = forced %-54s %s\n", s16 ? "tc_bf16s, bit for bit" : "tc, bit for bit",
                       diff ? "FAIL" : "ok");
                free(a);
                free(b);
            }
            bo_use_variant(f16_family[c->op], NULL);
        }
    }
    tb_free(&q); tb_free(&k); tb_free(&v); tb_free(&o); tb_free(&o2);
    if (c->op == F_MHLA) tb_free(&W);
    if (c->ks) tb_free(&conv);
    if (c->per_head && c->op == F_FOCUSED) { tb_free(&bias); tb_free(&sp); }
}

static void f16_add(bo_list *L, int small, f16_case c) {
    const bo_opts o = {f16_family[c.op], BO_CUDA, small, NULL, NULL, NULL};
    char name[BO_NAME_MAX];
    snprintf(name, sizeof name, "%s f16 B%lld H%lld D%lld Dv%lld grid %lldx%lldx%lld blocks %lldx%lldx%lld "
             "feat%d norm%d ph%d k%lld p%d x%g", f16_family[c.op], (long long)c.B, (long long)c.H,
             (long long)c.D, (long long)c.Dv, (long long)c.grid[0], (long long)c.grid[1],
             (long long)c.grid[2], (long long)c.blocks[0], (long long)c.blocks[1], (long long)c.blocks[2],
             c.feat, c.norm, c.per_head, (long long)c.ks, c.perm, c.in_scale);
    bo_add(L, &o, run_f16, &c, sizeof c, name);
}

void cases_f16tc(bo_list *L) {
    const int64_t dims[5][2] = {{128, 128}, {64, 64}, {32, 32}, {64, 128}, {128, 64}};
    const int64_t Ns[4] = {1, 63, 65, 1000};
    const int feats[4] = {LA_FEATURE_RELU_EPS, LA_FEATURE_RELU1, LA_FEATURE_ELU1, LA_FEATURE_RELU};
    const int PQ = LA_MHLA_NORM_PER_QUERY, NO = LA_MHLA_NORM_NONE, RV = LA_MHLA_NORM_RELEASED_VISION;
    for (int di = 0; di < 5; di++) {
        const int64_t D = dims[di][0], Dv = dims[di][1];
        /* linear attention at its defaults (relu, normalized, scale_q 1), odd N */
        for (int ni = 0; ni < 4; ni++)
            f16_add(L, 1, (f16_case){F_LINEAR, ni == 3 ? 2 : 1, ni == 1 ? 3 : 2, D, Dv, 1, {Ns[ni]}, {1},
                                     -1, 1, 0, 0, (ni + di) & 1, ni == 2 ? 10.0 : 1.0, di == 0 && ni == 3});
        /* the other feature maps at scale_q 1, and relu without normalization */
        f16_add(L, 1, (f16_case){F_LINEAR, 1, 2, D, Dv, 1, {1000}, {1}, feats[di % 4], 1, 0, 0, di & 1, 10.0, 0});
        f16_add(L, 1, (f16_case){F_LINEAR, 1, 2, D, Dv, 1, {65}, {1}, LA_FEATURE_RELU, 0, 0, 0, 1, 1.0, 0});
        /* MHLA at its defaults (relu_eps, per_query, scale_q 1): 1-D, 2-D (M = 64: the tf32 mix) */
        f16_add(L, 1, (f16_case){F_MHLA, 1, 2, D, Dv, 1, {63}, {7}, -1, PQ, 1, 0, di & 1, 10.0, di == 0});
        f16_add(L, 1, (f16_case){F_MHLA, 2, 2, D, Dv, 1, {1000}, {16}, -1, PQ, 0, 0, 1, 1.0, 0});
        f16_add(L, 1, (f16_case){F_MHLA, 1, 2, D, Dv, 2, {64, 64}, {8, 8}, -1, PQ, di & 1, 0, 0, 10.0, 0});
        f16_add(L, 1, (f16_case){F_MHLA, 1, 2, D, Dv, 1, {65}, {5}, LA_FEATURE_RELU, NO, 0, 0, 1, 1.0, 0});
        f16_add(L, 1, (f16_case){F_MHLA, 1, 2, D, Dv, 2, {16, 16}, {4, 4}, feats[di % 4], RV, 1, 0, 0, 10.0, 0});
        /* focused flatten (D = Dv) at its defaults: odd maps, conv k 3 / 5, softplus and bias */
        if (D == Dv) {
            const int64_t maps[4][2] = {{1, 1}, {7, 9}, {5, 13}, {25, 40}}, ks[4] = {0, 3, 5, 5};
            for (int ni = 0; ni < 4; ni++)
                f16_add(L, 1, (f16_case){F_FOCUSED, ni == 1 ? 2 : 1, ni == 3 ? 3 : 2, D, D, 2,
                                         {maps[ni][0], maps[ni][1]}, {1, 1}, -1, 0, ni & 1, ks[ni],
                                         (ni + di) & 1, ni == 1 ? 10.0 : 1.0, di == 0 && ni == 3});
        }
    }
    /* long: N = 32K, and the N = 256K inputs x10 shapes of cases_linear's overflow check, in full */
    f16_add(L, 0, (f16_case){F_LINEAR, 1, 3, 128, 128, 1, {32768}, {1}, -1, 1, 0, 0, 1, 10.0, 0});
    f16_add(L, 0, (f16_case){F_LINEAR, 1, 2, 64, 64, 1, {262144}, {1}, -1, 1, 0, 0, 0, 10.0, 0});
    f16_add(L, 0, (f16_case){F_MHLA, 1, 2, 128, 128, 1, {32768}, {150}, -1, PQ, 1, 0, 0, 10.0, 0});
    f16_add(L, 0, (f16_case){F_MHLA, 1, 2, 64, 64, 2, {512, 512}, {8, 8}, -1, PQ, 0, 0, 0, 10.0, 0});
    f16_add(L, 0, (f16_case){F_FOCUSED, 1, 12, 128, 128, 2, {64, 64}, {1, 1}, -1, 0, 1, 5, 0, 1.0, 0});
    f16_add(L, 0, (f16_case){F_FOCUSED, 1, 2, 64, 64, 2, {512, 512}, {1, 1}, -1, 0, 0, 0, 0, 10.0, 0});
}
