/* Backward case table: linear attention, MHLA (non-causal and causal)
 * against a pairwise float64 reference (a different algorithm from the
 * kernels' chunked / block-summary ones):
 *     o_t = Σ_s m_ts (q̃_t·k̃_s) v_s / (Σ_s m_ts (q̃_t·k̃_s) + eps)
 * with m_ts the mask / mixing weight of the pair, and its gradient written
 * out pair by pair. From the former tests/cuda/test_cuda_backward_lin.h;
 * staging, bounds and what each backend checks: bo_bwd.h. */
#include "bo_bwd.h"

static double ref_feature_grad(la_feature f, double x) {
    switch (f) {
    case LA_FEATURE_IDENTITY: return 1;
    case LA_FEATURE_RELU:
    case LA_FEATURE_RELU_EPS:
    case LA_FEATURE_RELU1: return x > 0 ? 1 : 0;
    case LA_FEATURE_ELU1: return x >= 0 ? 1 : exp(x);
    }
    return NAN;
}

/* One (batch, head) problem in float64, logical row-major arrays. */
typedef struct lf_ref {
    int64_t N, D, Dv;
    int causal, norm; /* LA_MHLA_NORM_* (linear: PER_QUERY / NONE) */
    double eps;
    /* blocks: blk[t], pos[t], tokof[b*maxw + w]; W [M][WM] (NULL = ones) */
    const int64_t *blk, *pos, *tokof;
    int64_t M, maxw, WM;
    const double *W;
    int rb; /* round the intermediates to bf16 */
    /* inputs */
    const double *qt, *kt, *v, *g; /* [N][D], [N][D], [N][Dv], [N][Dv] */
    const double *S_in, *z_in, *dS_out, *dz_out; /* [D][Dv], [D] or NULL */
    /* outputs (accumulated: caller zeroes) */
    double *dqt, *dkt, *dv, *dW, *dS_in, *dz_in;
    /* optional (not with released_vision): per element of dqt / dkt / dv, the
     * sum of squares of the terms of its state form (lf_state_terms) */
    double *eq2, *ek2, *ev2;
} lf_ref;

static double lf_mask(const lf_ref *R, int64_t t, int64_t s) {
    if (!R->W) return (!R->causal || s <= t) ? 1.0 : 0.0;
    const int64_t i = R->blk[t], b = R->blk[s];
    if (R->causal && (b > i || (b == i && s > t))) return 0.0;
    return R->W[i * R->WM + b];
}
#define RB(x) (R->rb ? rb16(x) : (x))
/* the state-form error floor is computed up to this many tokens (its cost
 * is O(N^2 D Dv)); one-token cases are where it matters */
#define LF_TERMS_MAX_N 64

/* The kernels compute the gradients in the state form of linear attention,
 * as plain PyTorch would: dq~_t = dnum_t S_t^T (+ dden_t z_t) with the state
 * S_t = sum_s m_ts k~_s v_s^T, and dk~_s = v_s dS_s^T (+ ...) with dS_s =
 * sum_t m_ts q~_t dnum_t^T, dv_s = k~_s dS_s (+ the same with dS_out), the
 * states rounded to bf16/fp16 for the tensor cores. Their rounding errors scale with the terms of those sums, not with
 * the result: one token with dnum.v ~ 0 makes dq tiny against its terms.
 * Per element, the sum of squares of the terms (lf_kappa turns it into the
 * ratio to the gradient). O(N^2 D Dv): the caller asks only for small N. */
static void lf_state_terms(const lf_ref *R, const double *dnum, const double *dden) {
    const int64_t N = R->N, D = R->D, Dv = R->Dv;
    const int pq = R->norm == LA_MHLA_NORM_PER_QUERY;
    for (int64_t t = 0; t < N; t++)
        for (int64_t d = 0; d < D; d++) {
            double sum = 0, z = R->z_in ? R->z_in[d] : 0;
            for (int64_t c = 0; c < Dv; c++) {
                double st = R->S_in ? R->S_in[d * Dv + c] : 0;
                for (int64_t s = 0; s < N; s++) st += lf_mask(R, t, s) * R->kt[s * D + d] * R->v[s * Dv + c];
                sum += (dnum[t * Dv + c] * st) * (dnum[t * Dv + c] * st);
            }
            if (pq) {
                for (int64_t s = 0; s < N; s++) z += lf_mask(R, t, s) * R->kt[s * D + d];
                sum += (dden[t] * z) * (dden[t] * z);
            }
            R->eq2[t * D + d] = sum;
        }
    for (int64_t e = 0; e < N * Dv; e++) R->ev2[e] = 0;
    for (int64_t s = 0; s < N; s++)
        for (int64_t d = 0; d < D; d++) {
            double sum = 0, zt = 0;
            for (int64_t c = 0; c < Dv; c++) {
                double ds = R->dS_out ? R->dS_out[d * Dv + c] : 0;
                for (int64_t t = 0; t < N; t++) ds += lf_mask(R, t, s) * R->qt[t * D + d] * dnum[t * Dv + c];
                sum += (R->v[s * Dv + c] * ds) * (R->v[s * Dv + c] * ds);
                R->ev2[s * Dv + c] += (R->kt[s * D + d] * ds) * (R->kt[s * D + d] * ds);
            }
            if (pq) {
                for (int64_t t = 0; t < N; t++) zt += lf_mask(R, t, s) * dden[t] * R->qt[t * D + d];
                sum += zt * zt;
            }
            if (R->dz_out) sum += R->dz_out[d] * R->dz_out[d];
            R->ek2[s * D + d] = sum;
        }
}

/* the state-form terms of a gradient against it: sqrt(sum terms^2 / sum g^2) */
static double lf_kappa(const double *acc) { return acc[0] > 0 ? sqrt(acc[1] / acc[0]) : 0.0; }

static void lf_reference(const lf_ref *R) {
    const int64_t N = R->N, D = R->D, Dv = R->Dv;
    double *num = (double *)calloc((size_t)Dv, sizeof(double));
    double *dnum = (double *)calloc((size_t)(N * Dv), sizeof(double));
    double *dden = (double *)calloc((size_t)N, sizeof(double));
    for (int64_t t = 0; t < N; t++) {
        const double *q = R->qt + t * D;
        for (int64_t c = 0; c < Dv; c++) num[c] = 0;
        double den = 0;
        for (int64_t s = 0; s < N; s++) {
            const double m = lf_mask(R, t, s);
            if (m == 0.0) continue;
            double a = 0;
            for (int64_t d = 0; d < D; d++) a += q[d] * R->kt[s * D + d];
            a *= m;
            for (int64_t c = 0; c < Dv; c++) num[c] += a * R->v[s * Dv + c];
            den += a;
        }
        if (R->S_in)
            for (int64_t d = 0; d < D; d++) {
                for (int64_t c = 0; c < Dv; c++) num[c] += q[d] * R->S_in[d * Dv + c];
                if (R->z_in) den += q[d] * R->z_in[d];
            }
        if (R->norm == LA_MHLA_NORM_RELEASED_VISION) {
            den = 0;
            const int64_t i = R->blk[t], w = R->pos[t];
            for (int64_t s = 0; s < N; s++) {
                const int64_t b = R->blk[s], u = R->tokof[b * R->maxw + w];
                double r = 0;
                for (int64_t d = 0; d < D; d++) r += R->qt[u * D + d] * R->kt[s * D + d];
                den += R->W[i * R->WM + b] * r;
            }
        }
        for (int64_t c = 0; c < Dv; c++) num[c] = RB(num[c]);
        if (R->norm == LA_MHLA_NORM_NONE) {
            for (int64_t c = 0; c < Dv; c++) dnum[t * Dv + c] = R->g[t * Dv + c];
            dden[t] = 0;
        } else {
            den = RB(den + R->eps);
            double gn = 0;
            for (int64_t c = 0; c < Dv; c++) gn += R->g[t * Dv + c] * num[c];
            for (int64_t c = 0; c < Dv; c++) dnum[t * Dv + c] = RB(R->g[t * Dv + c] / den);
            dden[t] = RB(-gn / (den * den));
        }
    }
    const int pq = R->norm == LA_MHLA_NORM_PER_QUERY;
    for (int64_t t = 0; t < N; t++) {
        const double *q = R->qt + t * D, *gn = dnum + t * Dv;
        for (int64_t s = 0; s < N; s++) {
            const double m = lf_mask(R, t, s);
            if (m == 0.0) continue;
            const double *k = R->kt + s * D, *vs = R->v + s * Dv;
            double a = 0, da = pq ? dden[t] : 0;
            for (int64_t d = 0; d < D; d++) a += q[d] * k[d];
            for (int64_t c = 0; c < Dv; c++) da += gn[c] * vs[c];
            for (int64_t d = 0; d < D; d++) {
                R->dqt[t * D + d] += da * m * k[d];
                R->dkt[s * D + d] += da * m * q[d];
            }
            for (int64_t c = 0; c < Dv; c++) R->dv[s * Dv + c] += m * a * gn[c];
            if (R->dW) R->dW[R->blk[t] * R->WM + R->blk[s]] += da * a;
        }
        if (R->norm == LA_MHLA_NORM_RELEASED_VISION) {
            const int64_t i = R->blk[t], w = R->pos[t];
            for (int64_t s = 0; s < N; s++) {
                const int64_t b = R->blk[s], u = R->tokof[b * R->maxw + w];
                const double Wib = R->W[i * R->WM + b];
                double r = 0;
                for (int64_t d = 0; d < D; d++) r += R->qt[u * D + d] * R->kt[s * D + d];
                if (R->dW) R->dW[i * R->WM + b] += dden[t] * r;
                for (int64_t d = 0; d < D; d++) {
                    R->dqt[u * D + d] += dden[t] * Wib * R->kt[s * D + d];
                    R->dkt[s * D + d] += dden[t] * Wib * R->qt[u * D + d];
                }
            }
        }
        if (R->S_in)
            for (int64_t d = 0; d < D; d++) {
                double acc = 0;
                for (int64_t c = 0; c < Dv; c++) acc += R->S_in[d * Dv + c] * gn[c];
                R->dqt[t * D + d] += acc + (R->z_in ? R->z_in[d] * dden[t] : 0);
            }
        if (R->dS_in)
            for (int64_t d = 0; d < D; d++) {
                for (int64_t c = 0; c < Dv; c++) R->dS_in[d * Dv + c] += q[d] * gn[c];
                R->dz_in[d] += q[d] * dden[t];
            }
    }
    for (int64_t s = 0; s < N; s++) {
        if (R->dS_out)
            for (int64_t d = 0; d < D; d++)
                for (int64_t c = 0; c < Dv; c++) {
                    R->dkt[s * D + d] += R->dS_out[d * Dv + c] * R->v[s * Dv + c];
                    R->dv[s * Dv + c] += R->dS_out[d * Dv + c] * R->kt[s * D + d];
                }
        if (R->dz_out)
            for (int64_t d = 0; d < D; d++) R->dkt[s * D + d] += R->dz_out[d];
    }
    if (R->dS_in) {
        for (int64_t e = 0; e < D * Dv; e++) R->dS_in[e] += R->dS_out ? R->dS_out[e] : 0;
        for (int64_t d = 0; d < D; d++) R->dz_in[d] += R->dz_out ? R->dz_out[d] : 0;
    }
    if (R->eq2 && R->norm != LA_MHLA_NORM_RELEASED_VISION) lf_state_terms(R, dnum, dden);
    free(num);
    free(dnum);
    free(dden);
}

/* ---- one linear-family case ----------------------------------------------------- */
/* the state tensors of a causal linear case: S_in/z_in, d_S_out/d_z_out, d_S_in/d_z_in */
#define LF_S_IN 1
#define LF_DS_OUT 2
#define LF_DS_IN 4
#define LF_ALL (LF_S_IN | LF_DS_OUT | LF_DS_IN)
typedef struct lf_case {
    int cuda; /* set by bwd_add */
    const char *name;
    int kind; /* 0 linear, 1 mhla, 2 mhla causal */
    int64_t B, N, H, D, Dv;
    int causal, norm;
    la_feature f;
    la_dtype dt;
    int perm;
    int state;          /* linear causal: LF_S_IN | LF_DS_OUT | LF_DS_IN */
    int grid_ndim;      /* mhla */
    int64_t grid[3], blocks[3];
    int64_t chunk;      /* mhla causal */
    int per_head_w;
    int no_dmix;        /* mhla causal: d_mixing not asked for */
} lf_case;

/* block of each token, its position inside the block, and the inverse */
static int64_t lf_blocks(const lf_case *c, int64_t *M, int64_t *maxw, int64_t **blk,
                         int64_t **pos, int64_t **tokof) {
    const int64_t N = c->N;
    *blk = (int64_t *)malloc(sizeof(int64_t) * (size_t)N);
    *pos = (int64_t *)malloc(sizeof(int64_t) * (size_t)N);
    if (c->kind == 2) {
        *M = (N + c->chunk - 1) / c->chunk;
        for (int64_t t = 0; t < N; t++) (*blk)[t] = t / c->chunk;
    } else if (c->kind == 1) {
        int64_t n[3] = {1, 1, 1}, g[3] = {1, 1, 1};
        const int off = 3 - c->grid_ndim;
        for (int a = 0; a < c->grid_ndim; a++) n[a + off] = c->grid[a], g[a + off] = c->blocks[a];
        if (c->grid_ndim == 1 && n[2] == 0) n[2] = N;
        *M = g[0] * g[1] * g[2];
        for (int64_t t = 0; t < N; t++) {
            const int64_t c2 = t % n[2], c1 = (t / n[2]) % n[1], c0 = t / (n[2] * n[1]);
            (*blk)[t] = ((c0 * g[0] / n[0]) * g[1] + c1 * g[1] / n[1]) * g[2] + c2 * g[2] / n[2];
        }
    } else {
        *M = 1;
        for (int64_t t = 0; t < N; t++) (*blk)[t] = 0;
    }
    int64_t *cnt = (int64_t *)calloc((size_t)*M, sizeof(int64_t));
    for (int64_t t = 0; t < N; t++) (*pos)[t] = cnt[(*blk)[t]]++;
    *maxw = 0;
    for (int64_t b = 0; b < *M; b++)
        if (cnt[b] > *maxw) *maxw = cnt[b];
    *tokof = (int64_t *)malloc(sizeof(int64_t) * (size_t)(*M * *maxw));
    for (int64_t t = 0; t < N; t++) (*tokof)[(*blk)[t] * *maxw + (*pos)[t]] = t;
    free(cnt);
    return *M;
}

static double lf_at(const tt *x, int64_t b, int64_t n, int64_t h, int64_t d) {
    return x->h[((b * x->ne[1] + n) * x->ne[2] + h) * x->ne[3] + d];
}

static void run_lin(const void *arg) {
    const lf_case *c = arg;
    const int cu = c->cuda;
    la_rng *r = &bo_rng;
    la_context *ctx = bo_ctx();
    const int64_t B = c->B, N = c->N, H = c->H, D = c->D, Dv = c->Dv;
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv};
    char what[160];
    snprintf(what, sizeof what, "%s B%lld N%lld H%lld D%lld Dv%lld %s%s", c->name, (long long)B,
             (long long)N, (long long)H, (long long)D, (long long)Dv,
             c->dt == LA_BF16 ? "bf16" : "f32", c->perm ? " perm" : "");
    tt q = tt_rand(cu, r, 4, nq, c->dt, c->perm, 1.0), k = tt_rand(cu, r, 4, nq, c->dt, c->perm, 1.0);
    tt v = tt_rand(cu, r, 4, nv, c->dt, c->perm, 1.0), go = tt_rand(cu, r, 4, nv, c->dt, c->perm, 1.0);
    tt dq = tt_poison(cu, 4, nq, c->dt, c->perm), dk = tt_poison(cu, 4, nq, c->dt, c->perm);
    tt dv = tt_poison(cu, 4, nv, c->dt, c->perm);
    int64_t M, maxw, *blk, *pos, *tokof;
    lf_blocks(c, &M, &maxw, &blk, &pos, &tokof);
    /* mixing: causal MHLA gets one spare row/column (past the last chunk) */
    const int64_t WM = c->kind == 2 ? M + 1 : M, Hw = c->per_head_w ? H : 1;
    tt W = {0}, dW = {0};
    int64_t nw[3] = {Hw, WM, WM};
    if (c->kind) {
        W = tt_new(cu, c->per_head_w ? 3 : 2, c->per_head_w ? nw : nw + 1, LA_F32, 0);
        for (int64_t i = 0; i < W.n; i++) W.h[i] = (float)(0.1 + 0.9 * la_rng_uniform(r));
        tt_upload(&W);
        dW = tt_poison(cu, W.ndim, W.ne, LA_F32, 0);
    }
    int64_t nS[4] = {B, H, D, Dv}, nz[3] = {B, H, D};
    tt Si = {0}, zi = {0}, dSo = {0}, dzo = {0}, dSi = {0}, dzi = {0};
    if (c->state) {
        Si = tt_rand(cu, r, 4, nS, LA_F32, 0, 0.3);
        zi = tt_new(cu, 3, nz, LA_F32, 0);
        for (int64_t i = 0; i < zi.n; i++) zi.h[i] = (float)(0.5 + la_rng_uniform(r));
        tt_upload(&zi);
        dSo = tt_rand(cu, r, 4, nS, LA_F32, 0, 0.3);
        dzo = tt_rand(cu, r, 3, nz, LA_F32, 0, 0.3);
        dSi = tt_poison(cu, 4, nS, LA_F32, 0);
        dzi = tt_poison(cu, 3, nz, LA_F32, 0);
    }
    const int sin = c->state & LF_S_IN, dso = c->state & LF_DS_OUT, dsi = c->state & LF_DS_IN;
    const double sq = c->kind == 2 ? 1.0 / sqrt((double)D) : (c->kind == 0 ? 0.7 : 1.3);
    const float eps = 1e-6f;
    la_status st = LA_ERR_INTERNAL;
    float *saved[4] = {NULL, NULL, NULL, NULL};
    /* [0] sum of g^2, [1] sum of the state-form terms^2 (lf_state_terms) of dq / dk / dv */
    double kq[2] = {0, 0}, kk[2] = {0, 0}, kv[2] = {0, 0}, kappa_q = -1, kappa_k = -1,
           kappa_v = -1;
    const int with_terms = N <= LF_TERMS_MAX_N && c->norm != LA_MHLA_NORM_RELEASED_VISION;
    for (int call = 0; call < 2; call++) {
        if (c->kind == 0) {
            la_linear_params p;
            la_linear_params_init(&p);
            p.feature = c->f;
            p.causal = c->causal;
            p.normalize = c->norm == LA_MHLA_NORM_PER_QUERY;
            p.scale_q = (float)sq;
            p.eps = eps;
            st = (call ? la_linear_backward : BWD_FIRST(cu, la_linear_backward, la_linear_backward_cuda))(&p, &q.t, &k.t, &v.t, NULL, sin ? &Si.t : NULL,
                                         sin ? &zi.t : NULL, &go.t,
                                         dso ? &dSo.t : NULL, dso ? &dzo.t : NULL,
                                         &dq.t, &dk.t, &dv.t, dsi ? &dSi.t : NULL,
                                         dsi ? &dzi.t : NULL, ctx);
        } else if (c->kind == 1) {
            la_mhla_params p;
            la_mhla_params_init(&p);
            p.grid_ndim = c->grid_ndim;
            for (int a = 0; a < 3; a++) p.grid[a] = c->grid[a], p.blocks[a] = c->blocks[a];
            p.feature = c->f;
            p.normalize = (la_mhla_normalize)c->norm;
            p.scale_q = (float)sq;
            p.eps = eps;
            st = (call ? la_mhla_backward : BWD_FIRST(cu, la_mhla_backward, la_mhla_backward_cuda))(&p, &q.t, &k.t, &v.t, &W.t, NULL, &go.t, &dq.t, &dk.t,
                                       &dv.t, &dW.t, ctx);
        } else {
            la_mhla_causal_params p;
            la_mhla_causal_params_init(&p);
            p.chunk = c->chunk;
            p.feature = c->f;
            p.normalize = (la_mhla_normalize)c->norm;
            p.scale_q = 0.f;
            p.eps = eps;
            st = (call ? la_mhla_causal_backward : BWD_FIRST(cu, la_mhla_causal_backward, la_mhla_causal_backward_cuda))(&p, &q.t, &k.t, &v.t, &W.t, NULL, &go.t, &dq.t,
                                              &dk.t, &dv.t, c->no_dmix ? NULL : &dW.t, ctx);
        }
        if (!bwd_ok(cu, st, what)) break;
        if (call == 0) {
            /* reference, exact and (bf16) with rounded intermediates */
            const int nref = c->dt == LA_BF16 ? 2 : 1;
            double *ref[2][5] = {{0}};
            for (int rr = 0; rr < nref; rr++) {
                ref[rr][0] = (double *)calloc((size_t)q.n, sizeof(double));
                ref[rr][1] = (double *)calloc((size_t)q.n, sizeof(double));
                ref[rr][2] = (double *)calloc((size_t)v.n, sizeof(double));
                ref[rr][3] = (double *)calloc((size_t)(c->kind ? W.n : 1), sizeof(double));
                ref[rr][4] = (double *)calloc((size_t)(B * H * (D * Dv + D)), sizeof(double));
            }
            double *qt = (double *)malloc(sizeof(double) * (size_t)(N * D));
            double *kt = (double *)malloc(sizeof(double) * (size_t)(N * D));
            double *vv = (double *)malloc(sizeof(double) * (size_t)(N * Dv));
            double *gg = (double *)malloc(sizeof(double) * (size_t)(N * Dv));
            double *dqt = (double *)malloc(sizeof(double) * (size_t)(N * D));
            double *dkt = (double *)malloc(sizeof(double) * (size_t)(N * D));
            double *dvv = (double *)malloc(sizeof(double) * (size_t)(N * Dv));
            double *eq2 = (double *)malloc(sizeof(double) * (size_t)(N * D));
            double *ek2 = (double *)malloc(sizeof(double) * (size_t)(N * D));
            double *ev2 = (double *)malloc(sizeof(double) * (size_t)(N * Dv));
            double *Wd = (double *)malloc(sizeof(double) * (size_t)(M * WM + 1));
            double *dWh = (double *)malloc(sizeof(double) * (size_t)(M * WM + 1));
            double *st4[4];
            for (int i = 0; i < 3; i++) st4[i] = (double *)malloc(sizeof(double) * (size_t)(D * Dv));
            st4[3] = (double *)malloc(sizeof(double) * (size_t)(2 * D));
            double *dzin = (double *)malloc(sizeof(double) * (size_t)D);
            for (int rr = 0; rr < nref; rr++)
                for (int64_t b = 0; b < B; b++)
                    for (int64_t h = 0; h < H; h++) {
                        lf_ref R;
                        memset(&R, 0, sizeof R);
                        R.N = N, R.D = D, R.Dv = Dv, R.causal = c->causal, R.norm = c->norm;
                        R.eps = eps, R.blk = blk, R.pos = pos, R.tokof = tokof, R.M = M;
                        R.maxw = maxw, R.WM = WM, R.rb = rr;
                        for (int64_t n = 0; n < N; n++) {
                            for (int64_t d = 0; d < D; d++) {
                                double x = sq * la_ref_feature(c->f, lf_at(&q, b, n, h, d));
                                qt[n * D + d] = rr ? rb16(x) : x;
                                x = la_ref_feature(c->f, lf_at(&k, b, n, h, d));
                                kt[n * D + d] = rr ? rb16(x) : x;
                            }
                            for (int64_t e = 0; e < Dv; e++) {
                                vv[n * Dv + e] = lf_at(&v, b, n, h, e);
                                gg[n * Dv + e] = lf_at(&go, b, n, h, e);
                            }
                        }
                        R.qt = qt, R.kt = kt, R.v = vv, R.g = gg;
                        memset(dqt, 0, sizeof(double) * (size_t)(N * D));
                        memset(dkt, 0, sizeof(double) * (size_t)(N * D));
                        memset(dvv, 0, sizeof(double) * (size_t)(N * Dv));
                        R.dqt = dqt, R.dkt = dkt, R.dv = dvv;
                        if (rr == 0 && with_terms) R.eq2 = eq2, R.ek2 = ek2, R.ev2 = ev2;
                        if (c->kind) {
                            const int64_t hw = c->per_head_w ? h : 0;
                            for (int64_t i = 0; i < M * WM; i++)
                                Wd[i] = W.h[hw * WM * WM + (i / WM) * WM + i % WM];
                            memset(dWh, 0, sizeof(double) * (size_t)(M * WM));
                            R.W = Wd, R.dW = dWh;
                        }
                        if (c->state) {
                            const int64_t so = (b * H + h) * D * Dv, zo = (b * H + h) * D;
                            for (int64_t e = 0; e < D * Dv; e++) {
                                st4[0][e] = Si.h[so + e];
                                st4[1][e] = dSo.h[so + e];
                                st4[2][e] = 0;
                            }
                            double *zz = st4[3];
                            for (int64_t d = 0; d < D; d++) {
                                zz[d] = zi.h[zo + d];
                                zz[D + d] = dzo.h[zo + d];
                                dzin[d] = 0;
                            }
                            R.S_in = sin ? st4[0] : NULL, R.z_in = sin ? zz : NULL;
                            R.dS_out = dso ? st4[1] : NULL, R.dz_out = dso ? zz + D : NULL;
                            R.dS_in = dsi ? st4[2] : NULL, R.dz_in = dsi ? dzin : NULL;
                        }
                        lf_reference(&R);
                        for (int64_t n = 0; n < N; n++) {
                            for (int64_t d = 0; d < D; d++) {
                                const int64_t o = ((b * N + n) * H + h) * D + d;
                                double gq = dqt[n * D + d] * sq *
                                            ref_feature_grad(c->f, lf_at(&q, b, n, h, d));
                                double gk = dkt[n * D + d] *
                                            ref_feature_grad(c->f, lf_at(&k, b, n, h, d));
                                ref[rr][0][o] = rr ? rb16(gq) : gq;
                                ref[rr][1][o] = rr ? rb16(gk) : gk;
                                if (rr == 0 && with_terms) {
                                    const double fq = sq * ref_feature_grad(c->f, lf_at(&q, b, n, h, d));
                                    const double fk = ref_feature_grad(c->f, lf_at(&k, b, n, h, d));
                                    kq[0] += gq * gq, kq[1] += eq2[n * D + d] * fq * fq;
                                    kk[0] += gk * gk, kk[1] += ek2[n * D + d] * fk * fk;
                                }
                            }
                            for (int64_t e = 0; e < Dv; e++) {
                                const int64_t o = ((b * N + n) * H + h) * Dv + e;
                                ref[rr][2][o] = rr ? rb16(dvv[n * Dv + e]) : dvv[n * Dv + e];
                                if (rr == 0 && with_terms)
                                    kv[0] += dvv[n * Dv + e] * dvv[n * Dv + e],
                                        kv[1] += ev2[n * Dv + e];
                            }
                        }
                        if (c->kind) {
                            const int64_t hw = c->per_head_w ? h : 0;
                            for (int64_t i = 0; i < M * WM; i++)
                                ref[rr][3][hw * WM * WM + (i / WM) * WM + i % WM] += dWh[i];
                        }
                        if (dsi) {
                            double *o = ref[rr][4] + (b * H + h) * (D * Dv + D);
                            for (int64_t e = 0; e < D * Dv; e++) o[e] = st4[2][e];
                            for (int64_t d = 0; d < D; d++) o[D * Dv + d] = dzin[d];
                        }
                    }
            kappa_q = with_terms ? lf_kappa(kq) : -1;
            kappa_k = with_terms ? lf_kappa(kk) : -1;
            kappa_v = with_terms ? lf_kappa(kv) : -1;
            check_grad_terms(what, "dq", &dq, ref[0][0], ref[1][0], kappa_q);
            check_grad_terms(what, "dk", &dk, ref[0][1], ref[1][1], kappa_k);
            check_grad_terms(what, "dv", &dv, ref[0][2], ref[1][2], kappa_v);
            if (c->kind && !c->no_dmix) check_grad(what, "d_mixing", &dW, ref[0][3], NULL);
            if (dsi) {
                double *rs = (double *)malloc(sizeof(double) * (size_t)dSi.n);
                double *rz = (double *)malloc(sizeof(double) * (size_t)dzi.n);
                for (int64_t bh = 0; bh < B * H; bh++) {
                    for (int64_t e = 0; e < D * Dv; e++)
                        rs[bh * D * Dv + e] = ref[0][4][bh * (D * Dv + D) + e];
                    for (int64_t d = 0; d < D; d++)
                        rz[bh * D + d] = ref[0][4][bh * (D * Dv + D) + D * Dv + d];
                }
                check_grad(what, "d_S_in", &dSi, rs, NULL);
                check_grad(what, "d_z_in", &dzi, rz, NULL);
                free(rs);
                free(rz);
            }
            for (int rr = 0; rr < nref; rr++)
                for (int i = 0; i < 5; i++) free(ref[rr][i]);
            free(qt), free(kt), free(vv), free(gg), free(dqt), free(dkt), free(dvv), free(eq2),
                free(ek2), free(ev2);
            free(Wd), free(dWh), free(dzin);
            for (int i = 0; i < 4; i++) free(st4[i]);
            /* second call on re-poisoned gradients: bit-identical */
            saved[0] = tt_copy_host(&dq), saved[1] = tt_copy_host(&dk);
            saved[2] = tt_copy_host(&dv);
            tt_repoison(&dq), tt_repoison(&dk), tt_repoison(&dv);
            if (c->kind && !c->no_dmix) saved[3] = tt_copy_host(&dW), tt_repoison(&dW);
        } else {
            check_same(what, "dq", &dq, saved[0]);
            check_same(what, "dk", &dk, saved[1]);
            check_same(what, "dv", &dv, saved[2]);
            if (c->kind && !c->no_dmix) check_same(what, "d_mixing", &dW, saved[3]);
        }
    }
    if (cu && saved[2] && (!c->kind || saved[3])) {
        /* CUDA: the CPU backward on the same values */
        ct cq = ct_of(&q, 0), ck = ct_of(&k, 0), cv = ct_of(&v, 0), cg = ct_of(&go, 0);
        ct cdq = ct_of(&q, 1), cdk = ct_of(&k, 1), cdv = ct_of(&v, 1);
        ct cW = {0}, cdW = {0}, cSi = {0}, czi = {0}, cSo = {0}, czo = {0}, cdSi = {0}, cdzi = {0};
        if (c->kind) cW = ct_of(&W, 0), cdW = ct_of(&W, 1);
        if (c->state) {
            cSi = ct_of(&Si, 0), czi = ct_of(&zi, 0), cSo = ct_of(&dSo, 0), czo = ct_of(&dzo, 0);
            cdSi = ct_of(&dSi, 1), cdzi = ct_of(&dzi, 1);
        }
        la_status sc = LA_ERR_INTERNAL;
        if (c->kind == 0) {
            la_linear_params p;
            la_linear_params_init(&p);
            p.feature = c->f, p.causal = c->causal, p.normalize = c->norm == LA_MHLA_NORM_PER_QUERY;
            p.scale_q = (float)sq, p.eps = eps;
            sc = la_linear_backward(&p, &cq.t, &ck.t, &cv.t, NULL, sin ? &cSi.t : NULL,
                                    sin ? &czi.t : NULL, &cg.t, dso ? &cSo.t : NULL,
                                    dso ? &czo.t : NULL, &cdq.t, &cdk.t, &cdv.t,
                                    dsi ? &cdSi.t : NULL, dsi ? &cdzi.t : NULL, NULL);
        } else if (c->kind == 1) {
            la_mhla_params p;
            la_mhla_params_init(&p);
            p.grid_ndim = c->grid_ndim;
            for (int a = 0; a < 3; a++) p.grid[a] = c->grid[a], p.blocks[a] = c->blocks[a];
            p.feature = c->f, p.normalize = (la_mhla_normalize)c->norm, p.scale_q = (float)sq;
            p.eps = eps;
            sc = la_mhla_backward(&p, &cq.t, &ck.t, &cv.t, &cW.t, NULL, &cg.t, &cdq.t, &cdk.t,
                                  &cdv.t, &cdW.t, NULL);
        } else {
            la_mhla_causal_params p;
            la_mhla_causal_params_init(&p);
            p.chunk = c->chunk, p.feature = c->f, p.normalize = (la_mhla_normalize)c->norm;
            p.scale_q = 0.f, p.eps = eps;
            sc = la_mhla_causal_backward(&p, &cq.t, &ck.t, &cv.t, &cW.t, NULL, &cg.t, &cdq.t,
                                         &cdk.t, &cdv.t, c->no_dmix ? NULL : &cdW.t, NULL);
        }
        CHECK(sc == LA_OK, "%s CPU: %s %s", what, la_status_string(sc), la_last_error());
        if (sc == LA_OK) {
            check_cpu_floor(what, "dq", saved[0], &cdq, c->dt, bwd_terms_floor(c->dt, kappa_q));
            check_cpu_floor(what, "dk", saved[1], &cdk, c->dt, bwd_terms_floor(c->dt, kappa_k));
            check_cpu_floor(what, "dv", saved[2], &cdv, c->dt, bwd_terms_floor(c->dt, kappa_v));
            if (c->kind && !c->no_dmix) check_cpu(what, "d_mixing", saved[3], &cdW, LA_F32);
        }
        ct_free(&cq), ct_free(&ck), ct_free(&cv), ct_free(&cg), ct_free(&cdq), ct_free(&cdk),
            ct_free(&cdv);
        if (c->kind) ct_free(&cW), ct_free(&cdW);
        if (c->state) {
            ct_free(&cSi), ct_free(&czi), ct_free(&cSo), ct_free(&czo), ct_free(&cdSi),
                ct_free(&cdzi);
        }
    }
    for (int i = 0; i < 4; i++) free(saved[i]);
    tt_free(&q), tt_free(&k), tt_free(&v), tt_free(&go), tt_free(&dq), tt_free(&dk), tt_free(&dv);
    if (c->kind) tt_free(&W), tt_free(&dW);
    if (c->state) {
        tt_free(&Si), tt_free(&zi), tt_free(&dSo), tt_free(&dzo), tt_free(&dSi), tt_free(&dzi);
    }
    free(blk), free(pos), free(tokof);
}

static const char *const lin_variants[] = BWD_VARIANTS_LINEAR;
static const char *const mhla_variants[] = BWD_VARIANTS_MHLA;
static const char *const causal_variants[] = BWD_VARIANTS_MHLA_CAUSAL;
#define NV(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The smallest CUDA call of each family (f32, N = 16, D = 16, zeros),
 * through the public entry point: its kernel choice under the variant
 * forced in ctx. */
static la_status probe_kind(la_context *ctx, int kind) {
    la_status s;
    int64_t ne[4] = {1, 16, 1, 16}, nw[2] = {4, 4};
    tt q = tt_new(1, 4, ne, LA_F32, 0), g = tt_new(1, 4, ne, LA_F32, 0);
    tt W = tt_new(1, 2, nw, LA_F32, 0);
    la_dev_memset(q.d, 0, (size_t)q.phys * 4);
    la_dev_memset(W.d, 0, (size_t)W.phys * 4);
    if (kind == 0) {
        la_linear_params p;
        la_linear_params_init(&p);
        s = la_linear_backward(&p, &q.t, &q.t, &q.t, NULL, NULL, NULL, &q.t, NULL, NULL, &g.t,
                               NULL, NULL, NULL, NULL, ctx);
    } else if (kind == 1) {
        la_mhla_params p;
        la_mhla_params_init(&p);
        p.grid_ndim = 1, p.grid[0] = 16, p.blocks[0] = 4;
        s = la_mhla_backward(&p, &q.t, &q.t, &q.t, &W.t, NULL, &q.t, &g.t, NULL, NULL, NULL, ctx);
    } else {
        la_mhla_causal_params p;
        la_mhla_causal_params_init(&p);
        p.chunk = 4;
        s = la_mhla_causal_backward(&p, &q.t, &q.t, &q.t, &W.t, NULL, &q.t, &g.t, NULL, NULL, NULL,
                                    ctx);
    }
    la_dev_synchronize();
    tt_free(&q), tt_free(&g), tt_free(&W);
    return s;
}
static la_status probe_linear(la_context *ctx) { return probe_kind(ctx, 0); }
static la_status probe_mhla(la_context *ctx) { return probe_kind(ctx, 1); }
static la_status probe_causal(la_context *ctx) { return probe_kind(ctx, 2); }

void cases_backward_lin(bo_list *L) {
    bo_add_probe(L, "linear_bwd", probe_linear);
    bo_add_probe(L, "mhla_bwd", probe_mhla);
    bo_add_probe(L, "mhla_causal_bwd", probe_causal);
    const int PQ = LA_MHLA_NORM_PER_QUERY, NO = LA_MHLA_NORM_NONE,
              RV = LA_MHLA_NORM_RELEASED_VISION;
    const lf_case cases[] = {
        /* cuda name kind B N H D Dv causal norm f dt perm state ndim grid blocks chunk phw no_dmix */
        /* N = 1 normalized: o = v up to eps, the gradient is eps-sized noise; tested without */
        {0, "linear", 0, 1, 1, 1, 16, 16, 0, NO, LA_FEATURE_ELU1, LA_F32, 0, 0, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 1, 1, 1, 16, 16, 1, PQ, LA_FEATURE_ELU1, LA_F32, 0, LF_ALL, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 2, 63, 2, 32, 48, 0, PQ, LA_FEATURE_RELU_EPS, LA_F32, 1, 0, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 1, 65, 2, 63, 17, 1, PQ, LA_FEATURE_ELU1, LA_F32, 0, LF_ALL, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 1, 130, 1, 16, 24, 1, NO, LA_FEATURE_IDENTITY, LA_F32, 1, LF_ALL, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 1, 200, 2, 128, 64, 1, PQ, LA_FEATURE_RELU1, LA_BF16, 1, 0, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 1, 1000, 1, 64, 32, 1, NO, LA_FEATURE_RELU, LA_BF16, 0, 0, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 1, 1000, 1, 32, 64, 0, PQ, LA_FEATURE_ELU1, LA_F32, 1, 0, 0, {0}, {0}, 0, 0, 0},
        {0, "mhla", 1, 1, 65, 2, 16, 24, 0, PQ, LA_FEATURE_RELU_EPS, LA_F32, 1, 0, 1, {65}, {4}, 0, 0, 0},
        {0, "mhla", 1, 2, 63, 2, 16, 24, 0, NO, LA_FEATURE_ELU1, LA_F32, 0, 0, 2, {9, 7}, {3, 2}, 0, 1, 0},
        {0, "mhla", 1, 1, 120, 2, 32, 16, 0, RV, LA_FEATURE_RELU_EPS, LA_F32, 1, 0, 3, {4, 6, 5}, {2, 3, 5}, 0, 0, 0},
        {0, "mhla", 1, 1, 64, 1, 63, 33, 0, RV, LA_FEATURE_ELU1, LA_BF16, 0, 0, 2, {8, 8}, {2, 4}, 0, 1, 0},
        {0, "mhla", 1, 1, 1000, 1, 64, 32, 0, PQ, LA_FEATURE_RELU_EPS, LA_BF16, 1, 0, 1, {0}, {10}, 0, 1, 0},
        {0, "mhla", 1, 1, 1, 1, 16, 16, 0, NO, LA_FEATURE_RELU_EPS, LA_F32, 0, 0, 1, {1}, {1}, 0, 0, 0},
        /* the tensor-core path (variant mma): bf16, D = Dv in {64, 128}, non-causal */
        {0, "linear", 0, 1, 1, 2, 64, 64, 0, NO, LA_FEATURE_ELU1, LA_BF16, 0, 0, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 2, 63, 2, 128, 128, 0, NO, LA_FEATURE_RELU_EPS, LA_BF16, 1, 0, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 1, 65, 3, 64, 64, 0, PQ, LA_FEATURE_ELU1, LA_BF16, 0, 0, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 1, 1000, 2, 128, 128, 0, PQ, LA_FEATURE_ELU1, LA_BF16, 1, 0, 0, {0}, {0}, 0, 0, 0},
        {0, "mhla", 1, 1, 65, 2, 64, 64, 0, PQ, LA_FEATURE_RELU_EPS, LA_BF16, 1, 0, 1, {65}, {4}, 0, 0, 0},
        {0, "mhla", 1, 1, 63, 2, 128, 128, 0, NO, LA_FEATURE_ELU1, LA_BF16, 0, 0, 2, {9, 7}, {3, 2}, 0, 1, 0},
        {0, "mhla", 1, 1, 120, 1, 64, 64, 0, PQ, LA_FEATURE_RELU_EPS, LA_BF16, 1, 0, 3, {4, 6, 5}, {2, 3, 5}, 0, 0, 0},
        {0, "mhla", 1, 1, 1000, 2, 128, 128, 0, PQ, LA_FEATURE_ELU1, LA_BF16, 0, 0, 1, {0}, {10}, 0, 1, 0},
        /* the causal tensor-core path (variant mma): bf16, D = Dv in {64, 128}; the state
         * tensors in and out each present or absent (d_S_in with normalize: portable) */
        {0, "linear", 0, 1, 1, 2, 64, 64, 1, NO, LA_FEATURE_RELU, LA_BF16, 0, LF_ALL, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 1, 63, 1, 128, 128, 1, NO, LA_FEATURE_IDENTITY, LA_BF16, 1, LF_DS_OUT, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 1, 65, 2, 64, 64, 1, PQ, LA_FEATURE_ELU1, LA_BF16, 0, LF_S_IN | LF_DS_OUT, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 2, 1000, 1, 128, 128, 1, PQ, LA_FEATURE_RELU_EPS, LA_BF16, 1, 0, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 1, 1000, 2, 64, 64, 1, NO, LA_FEATURE_ELU1, LA_BF16, 0, LF_ALL, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 1, 4097, 1, 64, 64, 1, NO, LA_FEATURE_RELU1, LA_BF16, 1, LF_S_IN | LF_DS_IN, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 1, 2100, 1, 128, 128, 1, PQ, LA_FEATURE_RELU1, LA_BF16, 0, LF_S_IN | LF_DS_OUT, 0, {0}, {0}, 0, 0, 0},
        {0, "linear", 0, 1, 200, 1, 128, 128, 1, PQ, LA_FEATURE_ELU1, LA_BF16, 0, LF_ALL, 0, {0}, {0}, 0, 0, 0},
        {0, "mhla_causal", 2, 1, 65, 2, 16, 24, 1, PQ, LA_FEATURE_ELU1, LA_F32, 1, 0, 0, {0}, {0}, 16, 1, 0},
        {0, "mhla_causal", 2, 2, 63, 1, 32, 32, 1, NO, LA_FEATURE_RELU, LA_F32, 0, 0, 0, {0}, {0}, 8, 0, 0},
        {0, "mhla_causal", 2, 1, 1, 1, 16, 16, 1, NO, LA_FEATURE_RELU, LA_F32, 0, 0, 0, {0}, {0}, 64, 0, 0},
        {0, "mhla_causal", 2, 1, 1000, 1, 128, 64, 1, NO, LA_FEATURE_RELU, LA_BF16, 1, 0, 0, {0}, {0}, 64, 0, 0},
        /* the causal MHLA tensor-core path (variant mma): bf16, D = Dv in {64, 128}, chunk
         * 64; d_mixing (always asked for here) needs normalize none and relu, relu_eps or
         * identity (per_query with d_mixing runs the portable engine, mma forced: skipped);
         * the last three without d_mixing (any feature, per_query) */
        {0, "mhla_causal", 2, 1, 1, 2, 64, 64, 1, NO, LA_FEATURE_RELU, LA_BF16, 0, 0, 0, {0}, {0}, 64, 0, 0},
        {0, "mhla_causal", 2, 1, 63, 2, 64, 64, 1, NO, LA_FEATURE_RELU, LA_BF16, 1, 0, 0, {0}, {0}, 64, 1, 0},
        {0, "mhla_causal", 2, 1, 65, 1, 128, 128, 1, NO, LA_FEATURE_RELU, LA_BF16, 0, 0, 0, {0}, {0}, 64, 0, 0},
        {0, "mhla_causal", 2, 2, 200, 2, 64, 64, 1, NO, LA_FEATURE_IDENTITY, LA_BF16, 1, 0, 0, {0}, {0}, 64, 1, 0},
        {0, "mhla_causal", 2, 1, 200, 1, 128, 128, 1, PQ, LA_FEATURE_ELU1, LA_BF16, 0, 0, 0, {0}, {0}, 64, 0, 0},
        {0, "mhla_causal", 2, 1, 1000, 1, 64, 64, 1, NO, LA_FEATURE_RELU, LA_BF16, 1, 0, 0, {0}, {0}, 64, 0, 0},
        {0, "mhla_causal", 2, 1, 1000, 2, 128, 128, 1, NO, LA_FEATURE_RELU, LA_BF16, 0, 0, 0, {0}, {0}, 64, 1, 0},
        {0, "mhla_causal", 2, 1, 2100, 1, 128, 128, 1, NO, LA_FEATURE_RELU, LA_BF16, 1, 0, 0, {0}, {0}, 64, 0, 0},
        {0, "mhla_causal", 2, 1, 130, 2, 64, 64, 1, NO, LA_FEATURE_RELU_EPS, LA_BF16, 1, 0, 0, {0}, {0}, 64, 1, 0},
        {0, "mhla_causal", 2, 1, 65, 2, 64, 64, 1, PQ, LA_FEATURE_ELU1, LA_BF16, 0, 0, 0, {0}, {0}, 64, 1, 1},
        {0, "mhla_causal", 2, 1, 1000, 1, 128, 128, 1, PQ, LA_FEATURE_RELU_EPS, LA_BF16, 1, 0, 0, {0}, {0}, 64, 0, 1},
        {0, "mhla_causal", 2, 1, 200, 1, 128, 128, 1, NO, LA_FEATURE_ELU1, LA_BF16, 1, 0, 0, {0}, {0}, 64, 0, 1},
        /* chunks over 256 tokens: the one-thread-per-token kernels */
        {0, "mhla_causal", 2, 1, 700, 1, 16, 24, 1, PQ, LA_FEATURE_ELU1, LA_F32, 1, 0, 0, {0}, {0}, 300, 1, 0},
    };
    static const char *const ops[3] = {"linear_backward", "mhla_backward", "mhla_causal_backward"};
    static const char *const fams[3] = {"linear_bwd", "mhla_bwd", "mhla_causal_bwd"};
    const char *const *vars[3] = {lin_variants, mhla_variants, causal_variants};
    const int nvars[3] = {NV(lin_variants), NV(mhla_variants), NV(causal_variants)};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lf_case c = cases[i];
        char name[BO_NAME_MAX], st[16] = "";
        if (c.state) snprintf(st, sizeof st, c.state == LF_ALL ? " state" : " state%d", c.state);
        snprintf(name, sizeof name,
                 "%s B%lld N%lld H%lld D%lld Dv%lld%s norm%d feature%d %s%s%s grid%d {%lld,%lld,%lld} "
                 "blocks {%lld,%lld,%lld} chunk%lld%s%s",
                 c.name, (long long)c.B, (long long)c.N, (long long)c.H, (long long)c.D,
                 (long long)c.Dv, c.causal ? " causal" : "", c.norm, (int)c.f, dtn(c.dt),
                 c.perm ? " perm" : "", st, c.grid_ndim, (long long)c.grid[0],
                 (long long)c.grid[1], (long long)c.grid[2], (long long)c.blocks[0],
                 (long long)c.blocks[1], (long long)c.blocks[2], (long long)c.chunk,
                 c.per_head_w ? " per-head mixing" : "", c.no_dmix ? " no d_mixing" : "");
        /* a 1-D grid of 0 means N */
        bwd_add(L, ops[c.kind], fams[c.kind], vars[c.kind], nvars[c.kind], c.N <= 130, run_lin, &c,
                sizeof c, name);
    }
}
