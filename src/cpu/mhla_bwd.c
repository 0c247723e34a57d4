/* CPU MHLA backward, non-causal (TRAINING.md §1, SPEC §5.2).
 *
 * Per (batch, head), with the block summaries kept "augmented" as one row
 * [S_b | z_b] of L = D·Dv + D floats (so one GEMM mixes both):
 *     Sa   = [S_b | z_b]_b                       (M×L, from k̃, v of each block)
 *     S̃a   = W Sa                                (the mixed summaries)
 *   token t of block i:  g_t = dO_t / den_t,  dden_t = −(dO_t·o_t) / den_t
 *     dq̃_t = S̃_i g_t + dden_t z̃_i
 *     dS̃a_i = [Σ_{t∈i} q̃_t g_tᵀ | Σ_{t∈i} dden_t q̃_t]
 *     dW   = dS̃a Saᵀ,      dSa = Wᵀ dS̃a
 *     dk̃_j = dS_b v_j + dz_b,  dv_j = dS_bᵀ k̃_j        (j in block b)
 * normalize none: den = 1, dden = 0. released_vision (equal blocks): the
 * denominator of position w of block i is Σ_b W[i,b] r_{b,w} + eps with
 * r_{b,w} = q̃_{b,w}·z_b, so with dr = Wᵀ dden (M×P, P tokens per block):
 *     dW += dden rᵀ,   dq̃_{b,w} += dr_{b,w} z_b,   dz_b += Σ_w dr_{b,w} q̃_{b,w}.
 * Token lists per block are in raster order, so the w-th entry of every
 * block is the same position inside the block.
 *
 * One task per (batch, head); the mixing gradient of each task goes to its
 * own M×M slot and the slots are summed in a fixed order afterwards (over
 * batch and heads for a shared W, over batch for per-head W): deterministic.
 * Memory per thread: 3·M·L for the summaries plus block-row tiles. */
#include "cpu/backward_cpu.h"
#include "cpu/mhla_cpu.h"

#include <stdlib.h>

typedef struct mb_job {
    const la_mhla_params *p;
    const la_mhla_geom *g;
    const la_tensor *q, *k, *v, *mixing, *d_out;
    const la_tensor *out; /* the forward's output (optional): read, not formed */
    la_tensor *dq, *dk, *dv;
    int64_t B, N, H, D, Dv, M, L, P; /* P: max tokens per block */
    int64_t Hw;                      /* heads of the mixing (1 = shared) */
    const int64_t *start, *tok;      /* block b's tokens: tok[start[b] .. start[b+1]) */
    const float *W;                  /* [Hw, M, M] f32 */
    float *dW;                       /* [B·H, M, M] per-task mixing gradients */
    bool rv, want_dw;
} mb_job;

typedef struct mb_ws {
    float *Sa, *Sm, *dSm;        /* M×L each (Sm becomes dSa)   */
    float *qr, *qt, *kr, *kt;    /* P×D                         */
    float *vv, *go, *o;          /* P×Dv                        */
    float *dqt, *dkt, *dvv;      /* P×D, P×D, P×Dv              */
    float *den, *dden;           /* P                           */
    float *r, *dd, *dr, *dzx;    /* rv: M×P, M×P, M×P, M×D      */
} mb_ws;

static size_t mb_ws_floats(const mb_job *j) {
    const size_t M = (size_t)j->M, P = (size_t)j->P, D = (size_t)j->D, Dv = (size_t)j->Dv;
    size_t n = 3 * M * (size_t)j->L + P * (6 * D + 4 * Dv) + 2 * P;
    if (j->rv) n += 3 * M * P + M * D;
    return n;
}

static void mb_carve(const mb_job *j, float *w, mb_ws *s) {
    const int64_t M = j->M, P = j->P, D = j->D, Dv = j->Dv;
    float **const mix[] = {&s->Sa, &s->Sm, &s->dSm};
    float **const rows_d[] = {&s->qr, &s->qt, &s->kr, &s->kt, &s->dqt, &s->dkt};
    float **const rows_dv[] = {&s->vv, &s->go, &s->o, &s->dvv}, **const rows_1[] = {&s->den, &s->dden};
    w = la_carve_blocks(w, M * j->L, mix, 3);
    w = la_carve_blocks(w, P * D, rows_d, 6);
    w = la_carve_blocks(w, P * Dv, rows_dv, 4);
    w = la_carve_blocks(w, P, rows_1, 2);
    if (j->rv) {
        float **const rv_mp[] = {&s->r, &s->dd, &s->dr};
        s->dzx = la_carve_blocks(w, M * P, rv_mp, 3);
    }
}

/* Rows of block blk of tensor x (any float view) into dst (row stride ld). */
static void gather_block(const mb_job *j, const la_tensor *x, int64_t b, int64_t h, int64_t blk,
                         float *dst, int64_t ld) {
    for (int64_t r = j->start[blk]; r < j->start[blk + 1]; r++)
        la_gather_bnhd_rows(x, b, h, j->tok[r], 1, dst + (r - j->start[blk]) * ld, ld);
}
static void scatter_block(const mb_job *j, la_tensor *x, int64_t b, int64_t h, int64_t blk,
                          const float *src, int64_t ld) {
    for (int64_t r = j->start[blk]; r < j->start[blk + 1]; r++)
        la_scatter_bnhd_rows(x, b, h, j->tok[r], 1, src + (r - j->start[blk]) * ld, ld);
}

static void load_q(const mb_job *j, int64_t b, int64_t h, int64_t blk, int64_t n, mb_ws *s) {
    gather_block(j, j->q, b, h, blk, s->qr, j->D);
    la_feature_map_n(j->p->feature, s->qr, s->qt, n * j->D, j->p->scale_q);
}
static void load_kv(const mb_job *j, int64_t b, int64_t h, int64_t blk, int64_t n, mb_ws *s) {
    gather_block(j, j->k, b, h, blk, s->kr, j->D);
    la_feature_map_n(j->p->feature, s->kr, s->kt, n * j->D, 1.f);
    gather_block(j, j->v, b, h, blk, s->vv, j->Dv);
}

/* Per block i: o, den, g, dden; with dq, dq̃ (+ the rv cross-block term
 * when dr is known) stored; with acc, dS̃a_i accumulated. */
static void mb_block_pass(const mb_job *j, int64_t b, int64_t h, int64_t i, bool want_dq,
                          bool acc, mb_ws *s) {
    const int64_t D = j->D, Dv = j->Dv, n = j->start[i + 1] - j->start[i], L = j->L;
    if (n == 0) return;
    const float *Si = s->Sm + i * L, *zi = Si + D * Dv;
    load_q(j, b, h, i, n, s);
    gather_block(j, j->d_out, b, h, i, s->go, Dv);
    const la_mhla_normalize nm = j->p->normalize;
    if (nm == LA_MHLA_NORM_PER_QUERY)
        for (int64_t r = 0; r < n; r++) {
            float acc_d = 0.f;
            for (int64_t d = 0; d < D; d++) acc_d += s->qt[r * D + d] * zi[d];
            s->den[r] = acc_d + j->p->eps;
        }
    /* released_vision: s->den filled by the caller; none: o is not needed */
    if (nm != LA_MHLA_NORM_NONE) {
        if (j->out) { /* numerator = the forward's out times den */
            gather_block(j, j->out, b, h, i, s->o, Dv);
            for (int64_t r = 0; r < n; r++)
                for (int64_t e = 0; e < Dv; e++) s->o[r * Dv + e] *= s->den[r];
        } else {
            la_sgemm(false, false, n, Dv, D, 1.f, s->qt, D, Si, Dv, 0.f, s->o, Dv);
        }
    }
    for (int64_t r = 0; r < n; r++) {
        const float den = nm == LA_MHLA_NORM_NONE ? 1.f : s->den[r];
        const float inv = 1.f / den;
        float go = 0.f;
        if (nm != LA_MHLA_NORM_NONE)
            for (int64_t e = 0; e < Dv; e++) go += s->go[r * Dv + e] * s->o[r * Dv + e];
        s->dden[r] = nm == LA_MHLA_NORM_NONE ? 0.f : -go * inv * inv;
        for (int64_t e = 0; e < Dv; e++) s->go[r * Dv + e] *= inv;
    }
    if (j->rv) memcpy(s->dd + i * j->P, s->dden, (size_t)n * sizeof(float));
    if (want_dq) {
        la_sgemm(false, true, n, D, Dv, 1.f, s->go, Dv, Si, Dv, 0.f, s->dqt, D);
        if (nm == LA_MHLA_NORM_PER_QUERY)
            for (int64_t r = 0; r < n; r++)
                for (int64_t d = 0; d < D; d++) s->dqt[r * D + d] += s->dden[r] * zi[d];
        if (j->rv) { /* dq̃_{i,w} += dr_{i,w} z_i (z_i the unmixed summary of block i) */
            const float *zb = s->Sa + i * L + D * Dv;
            for (int64_t r = 0; r < n; r++)
                for (int64_t d = 0; d < D; d++) s->dqt[r * D + d] += s->dr[i * j->P + r] * zb[d];
        }
        la_feature_grad_n(j->p->feature, s->qr, s->dqt, n * D, j->p->scale_q);
        scatter_block(j, j->dq, b, h, i, s->dqt, D);
    }
    if (acc) {
        float *dSi = s->dSm + i * L, *dzi = dSi + D * Dv;
        la_sgemm(true, false, D, Dv, n, 1.f, s->qt, D, s->go, Dv, 0.f, dSi, Dv);
        for (int64_t d = 0; d < D; d++) dzi[d] = 0.f;
        if (nm == LA_MHLA_NORM_PER_QUERY)
            for (int64_t r = 0; r < n; r++)
                for (int64_t d = 0; d < D; d++) dzi[d] += s->dden[r] * s->qt[r * D + d];
        if (j->rv) /* dz_i (unmixed) += Σ_w dr_{i,w} q̃_{i,w}: kept apart until dSa exists */
            for (int64_t d = 0; d < D; d++) {
                float a = 0.f;
                for (int64_t r = 0; r < n; r++) a += s->dr[i * j->P + r] * s->qt[r * D + d];
                s->dzx[i * D + d] = a;
            }
    }
}

static void mb_head(const mb_job *j, int64_t b, int64_t h, mb_ws *s) {
    const int64_t M = j->M, L = j->L, D = j->D, Dv = j->Dv, P = j->P;
    const float *W = j->W + (j->Hw == 1 ? 0 : h) * M * M;
    /* block summaries and their mixture */
    for (int64_t blk = 0; blk < M; blk++) {
        const int64_t n = j->start[blk + 1] - j->start[blk];
        float *Sb = s->Sa + blk * L, *zb = Sb + D * Dv;
        memset(Sb, 0, (size_t)L * sizeof(float));
        if (n == 0) continue;
        load_kv(j, b, h, blk, n, s);
        la_sgemm(true, false, D, Dv, n, 1.f, s->kt, D, s->vv, Dv, 0.f, Sb, Dv);
        for (int64_t r = 0; r < n; r++)
            for (int64_t d = 0; d < D; d++) zb[d] += s->kt[r * D + d];
    }
    la_sgemm(false, false, M, L, M, 1.f, W, M, s->Sa, L, 0.f, s->Sm, L);
    if (j->rv) {
        /* r_{b,w} = q̃_{b,w}·z_b; den = W r + eps; a first pass for dden, dr = Wᵀ dden */
        for (int64_t blk = 0; blk < M; blk++) {
            const int64_t n = j->start[blk + 1] - j->start[blk];
            load_q(j, b, h, blk, n, s);
            const float *zb = s->Sa + blk * L + D * Dv;
            for (int64_t r = 0; r < n; r++) {
                float a = 0.f;
                for (int64_t d = 0; d < D; d++) a += s->qt[r * D + d] * zb[d];
                s->r[blk * P + r] = a;
            }
        }
        float *denm = s->dr; /* W r, then overwritten by dr */
        la_sgemm(false, false, M, P, M, 1.f, W, M, s->r, P, 0.f, denm, P);
        for (int64_t i = 0; i < M; i++) {
            for (int64_t r = 0; r < P; r++) s->den[r] = denm[i * P + r] + j->p->eps;
            mb_block_pass(j, b, h, i, false, false, s);
        }
        la_sgemm(true, false, M, P, M, 1.f, W, M, s->dd, P, 0.f, s->dr, P);
        for (int64_t i = 0; i < M; i++) {
            /* den again (denm was overwritten): W r row i */
            for (int64_t r = 0; r < P; r++) {
                float a = 0.f;
                for (int64_t c = 0; c < M; c++) a += W[i * M + c] * s->r[c * P + r];
                s->den[r] = a + j->p->eps;
            }
            mb_block_pass(j, b, h, i, j->dq != NULL, true, s);
        }
    } else {
        for (int64_t i = 0; i < M; i++) {
            const int64_t n = j->start[i + 1] - j->start[i];
            if (n == 0) memset(s->dSm + i * L, 0, (size_t)L * sizeof(float));
            mb_block_pass(j, b, h, i, j->dq != NULL, true, s);
        }
    }
    if (j->rv)
        for (int64_t i = 0; i < M; i++)
            if (j->start[i + 1] == j->start[i]) memset(s->dSm + i * L, 0, (size_t)L * sizeof(float));
    if (j->want_dw) {
        float *dW = j->dW + (b * j->H + h) * M * M;
        la_sgemm(false, true, M, M, L, 1.f, s->dSm, L, s->Sa, L, 0.f, dW, M);
        if (j->rv) la_sgemm(false, true, M, M, P, 1.f, s->dd, P, s->r, P, 1.f, dW, M);
    }
    if (!j->dk && !j->dv) return;
    float *dSa = s->Sm; /* S̃a is no longer needed */
    la_sgemm(true, false, M, L, M, 1.f, W, M, s->dSm, L, 0.f, dSa, L);
    if (j->rv)
        for (int64_t blk = 0; blk < M; blk++)
            for (int64_t d = 0; d < D; d++) dSa[blk * L + D * Dv + d] += s->dzx[blk * D + d];
    for (int64_t blk = 0; blk < M; blk++) {
        const int64_t n = j->start[blk + 1] - j->start[blk];
        if (n == 0) continue;
        const float *dSb = dSa + blk * L, *dzb = dSb + D * Dv;
        load_kv(j, b, h, blk, n, s);
        if (j->dk) {
            la_sgemm(false, true, n, D, Dv, 1.f, s->vv, Dv, dSb, Dv, 0.f, s->dkt, D);
            for (int64_t r = 0; r < n; r++)
                for (int64_t d = 0; d < D; d++) s->dkt[r * D + d] += dzb[d];
            la_feature_grad_n(j->p->feature, s->kr, s->dkt, n * D, 1.f);
            scatter_block(j, j->dk, b, h, blk, s->dkt, D);
        }
        if (j->dv) {
            la_sgemm(false, false, n, Dv, D, 1.f, s->kt, D, dSb, Dv, 0.f, s->dvv, Dv);
            scatter_block(j, j->dv, b, h, blk, s->dvv, Dv);
        }
    }
}

la_status la_mhla_backward_cpu(const la_mhla_params *p, const la_mhla_geom *geom,
                               const la_tensor *q, const la_tensor *k, const la_tensor *v,
                               const la_tensor *mixing, const la_tensor *out,
                               const la_tensor *d_out, la_tensor *dq, la_tensor *dk,
                               la_tensor *dv, la_tensor *d_mixing, la_context *ctx) {
    mb_job j = {0};
    j.p = p, j.g = geom, j.q = q, j.k = k, j.v = v, j.mixing = mixing, j.d_out = d_out, j.out = out;
    j.dq = dq, j.dk = dk, j.dv = dv;
    j.B = q->ne[0], j.N = q->ne[1], j.H = q->ne[2], j.D = q->ne[3], j.Dv = v->ne[3];
    j.M = geom->M, j.L = j.D * j.Dv + j.D, j.Hw = mixing->ndim == 3 ? j.H : 1;
    j.rv = p->normalize == LA_MHLA_NORM_RELEASED_VISION;
    j.want_dw = d_mixing != NULL;
    if (!dq && !dk && !dv && !d_mixing) return LA_OK;
    const int threads = la_ctx_threads(ctx);
    const int64_t M = j.M;

    /* token lists per block (raster order inside each block) */
    int64_t *start = la_ws_alloc(ctx, (size_t)(M + 1 + j.N + j.N) * sizeof(int64_t));
    if (!start) return LA_ERR_NOMEM;
    int64_t *tok = start + M + 1, *blk_of = tok + j.N;
    for (int64_t b = 0; b <= M; b++) start[b] = 0;
    for (int64_t t = 0; t < j.N; t++) {
        const int64_t c2 = t % geom->n[2], c1 = (t / geom->n[2]) % geom->n[1];
        const int64_t c0 = t / (geom->n[2] * geom->n[1]);
        const int64_t b0 = c0 * geom->g[0] / geom->n[0], b1 = c1 * geom->g[1] / geom->n[1];
        const int64_t b2 = c2 * geom->g[2] / geom->n[2];
        blk_of[t] = (b0 * geom->g[1] + b1) * geom->g[2] + b2;
        start[blk_of[t] + 1]++;
    }
    for (int64_t b = 0; b < M; b++) {
        start[b + 1] += start[b];
        if (start[b + 1] - start[b] > j.P) j.P = start[b + 1] - start[b];
    }
    for (int64_t t = 0; t < j.N; t++) tok[start[blk_of[t]]++] = t;
    for (int64_t b = M; b > 0; b--) start[b] = start[b - 1];
    start[0] = 0;
    j.start = start, j.tok = tok;

    size_t per = mb_ws_floats(&j), wbytes, dwn = 0, bytes;
    la_status st = la_mul_size((size_t)j.Hw * (size_t)M, (size_t)M, &wbytes, "mhla backward mixing");
    if (st == LA_OK && j.want_dw) st = la_mul_size((size_t)(j.B * j.H) * (size_t)M, (size_t)M, &dwn, "mhla backward mixing gradients");
    if (st == LA_OK) st = la_mul_size(per, (size_t)threads, &bytes, "mhla backward workspace");
    if (st == LA_OK && bytes + wbytes + dwn < bytes) st = la_err(LA_ERR_OVERFLOW, "mhla backward: workspace size overflows");
    if (st == LA_OK) st = la_mul_size(bytes + wbytes + dwn, sizeof(float), &bytes, "mhla backward workspace");
    float *ws = st == LA_OK ? la_ws_alloc(ctx, bytes) : NULL;
    if (!ws) {
        la_ws_free(ctx, start);
        return st == LA_OK ? LA_ERR_NOMEM : st;
    }
    float *Wf = ws + per * (size_t)threads;
    j.dW = j.want_dw ? Wf + wbytes : NULL;
    for (int64_t hw = 0; hw < j.Hw; hw++)
        for (int64_t a = 0; a < M; a++)
            for (int64_t c = 0; c < M; c++) {
                const int64_t off = mixing->ndim == 3 ? la_off3(mixing, hw, a, c) : la_off2(mixing, a, c);
                Wf[(hw * M + a) * M + c] = la_load_f32(mixing, off);
            }
    j.W = Wf;
#pragma omp parallel num_threads(threads)
    {
        mb_ws s;
        mb_carve(&j, ws + (size_t)la_thread_id() * per, &s);
#pragma omp for schedule(dynamic)
        for (int64_t bh = 0; bh < j.B * j.H; bh++) mb_head(&j, bh / j.H, bh % j.H, &s);
    }
    if (d_mixing) {
        /* fixed-order sums of the per-task gradients */
        for (int64_t hw = 0; hw < j.Hw; hw++)
            for (int64_t a = 0; a < M; a++)
                for (int64_t c = 0; c < M; c++) {
                    double acc = 0;
                    for (int64_t b = 0; b < j.B; b++)
                        for (int64_t h = 0; h < j.H; h++)
                            if (j.Hw == 1 || h == hw) acc += j.dW[((b * j.H + h) * M + a) * M + c];
                    const int64_t off = d_mixing->ndim == 3 ? la_off3(d_mixing, hw, a, c)
                                                            : la_off2(d_mixing, a, c);
                    la_store_f32(d_mixing, off, (float)acc);
                }
    }
    la_ws_free(ctx, ws);
    la_ws_free(ctx, start);
    return LA_OK;
}
