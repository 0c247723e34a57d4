/* MHLA on the CPU (SPEC §5), the non-causal forward: block summaries, the
 * mixing GEMM and the outputs, through sgemm (the AVX-512 phases of
 * mhla_avx512_cpu.c take over when la_mhla_nc_fast_ok). The design of the
 * whole CPU implementation is in mhla_cpu_impl.h. */
#include "cpu/mhla_cpu_impl.h"

#include <stdlib.h>
#include <string.h>

/* released_vision: r_b[w] = q̃_{b,w}·z_b for the positions w of block task. */
void la_mhla_nc_rv_terms(const nc_job *j, int64_t task, const blk_box *bx, const float *zb,
                         tiles *w) {
    const int64_t D = j->D, tile = j->tile, bh = task / j->M, b = bh / j->H, h = bh % j->H;
    float *Rb = j->R + task * j->L;
    for (int64_t p0 = 0; p0 < bx->size; p0 += tile) {
        int64_t n = bx->size - p0 < tile ? bx->size - p0 : tile;
        la_mhla_block_tokens(j->geom, bx, p0, n, w->idx);
        la_mhla_gather_rows(j->q, b, h, w->idx, 0, n, w->q, D, 1, j->p->feature, j->p->scale_q);
        for (int64_t r = 0; r < n; r++) Rb[p0 + r] = dot8(w->q + r * D, zb, D);
    }
}

/* Phase 1 for task = (b·H + h)·M + blk: S_b = K̃ᵀV (GEMM), z_b = Σ k̃ and, for
 * released_vision, r_b[w] = q̃_{b,w}·z_b. (z is kept out of the GEMM: an
 * extra ones column makes OpenBLAS take its slower edge path.) */
static void nc_summary(const nc_job *j, int64_t task, tiles *w) {
    const int64_t D = j->D, Dv = j->Dv, M = j->M, tile = j->tile;
    const int64_t bh = task / M, b = bh / j->H, h = bh % j->H;
    float *Sb = j->S + task * j->SE, *zb = Sb + D * Dv;
    blk_box bx;
    la_mhla_block_box(j->geom, task % M, &bx);
    memset(zb, 0, (size_t)D * sizeof(float));
    /* an empty block (more blocks than tokens on an axis) has S_b = 0; the
     * first tile's GEMM (beta 0) initializes S_b otherwise */
    if (bx.size == 0) memset(Sb, 0, (size_t)(D * Dv) * sizeof(float));
    for (int64_t p0 = 0; p0 < bx.size; p0 += tile) {
        int64_t n = bx.size - p0 < tile ? bx.size - p0 : tile;
        la_mhla_block_tokens(j->geom, &bx, p0, n, w->idx);
        la_mhla_gather_rows(j->k, b, h, w->idx, 0, n, w->k, D, 1, j->p->feature, 1.0f);
        const float *vr = runs_are_blocks(j->geom) ? direct_rows(j->v, b, h, w->idx[0]) : NULL;
        int64_t ldv = vr ? j->v->nb[1] : Dv;
        if (!vr) {
            la_mhla_gather_rows(j->v, b, h, w->idx, 0, n, w->v, Dv, 0, LA_FEATURE_IDENTITY, 1.0f);
            vr = w->v;
        }
        la_sgemm(true, false, D, Dv, n, 1.0f, w->k, D, vr, ldv, p0 ? 1.0f : 0.0f, Sb, Dv);
        for (int64_t r = 0; r < n; r++)
            for (int64_t d = 0; d < D; d++) zb[d] += w->k[r * D + d];
    }
    if (j->rv) la_mhla_nc_rv_terms(j, task, &bx, zb, w);
}

/* Phase 2 for head bh, columns [c0, c0+cw) of the rows [S_b z_b]:
 * [S̃ z̃] = W·[S z] (and, with rv_too, the released_vision denominators
 * R̃ = W·R). */
static void nc_mix(const nc_job *j, int64_t bh, int64_t c0, int64_t cw, int rv_too) {
    const int64_t M = j->M, SE = j->SE;
    const float *Wh = j->W + (j->Hw == 1 ? 0 : bh % j->H) * M * M;
    la_sgemm(false, false, M, cw, M, 1.0f, Wh, M, j->S + bh * M * SE + c0, SE, 0.0f,
             j->St + bh * M * SE + c0, SE);
    if (rv_too)
        la_sgemm(false, false, M, j->L, M, 1.0f, Wh, M, j->R + bh * M * j->L, j->L, 0.0f,
                 j->Rt + bh * M * j->L, j->L);
}

/* Phase 3 for task = (b·H + h)·M + blk: outputs q̃_t·S̃_i, divided by
 * q̃_t·z̃_i + eps (per_query) or the released_vision denominator. */
static void nc_output(const nc_job *j, int64_t task, tiles *w) {
    const int64_t D = j->D, Dv = j->Dv, M = j->M, tile = j->tile;
    const int64_t bh = task / M, b = bh / j->H, h = bh % j->H;
    const float *Sti = j->St + task * j->SE, *zti = Sti + D * Dv;
    blk_box bx;
    la_mhla_block_box(j->geom, task % M, &bx);
    for (int64_t p0 = 0; p0 < bx.size; p0 += tile) {
        int64_t n = bx.size - p0 < tile ? bx.size - p0 : tile;
        la_mhla_block_tokens(j->geom, &bx, p0, n, w->idx);
        la_mhla_gather_rows(j->q, b, h, w->idx, 0, n, w->q, D, 1, j->p->feature, j->p->scale_q);
        /* 1-D grid, f32 output: the GEMM writes the output rows in place */
        float *orow = runs_are_blocks(j->geom) ? direct_rows(j->out, b, h, w->idx[0]) : NULL;
        const int64_t ldo = orow ? j->out->nb[1] : Dv;
        la_sgemm(false, false, n, Dv, D, 1.0f, w->q, D, Sti, Dv, 0.0f, orow ? orow : w->o, ldo);
        const float *den = NULL;
        if (j->rv) {
            den = j->Rt + task * j->L + p0;
        } else if (j->mode == NORM_GIVEN) {
            for (int64_t r = 0; r < n; r++) w->den[r] = dot8(w->q + r * D, zti, D);
            den = w->den;
        }
        if (!orow) {
            la_mhla_store_rows(j->out, b, h, w->idx, 0, n, w->o, Dv, j->mode, den, j->p->eps);
        } else if (den) {
            for (int64_t r = 0; r < n; r++) {
                const float inv = 1.0f / (den[r] + j->p->eps);
                for (int64_t e = 0; e < Dv; e++) orow[r * ldo + e] *= inv;
            }
        }
    }
}

la_status la_mhla_forward_cpu(const la_mhla_params *p, const la_mhla_geom *geom,
                              const la_tensor *q, const la_tensor *k, const la_tensor *v,
                              const la_tensor *mixing, la_tensor *out, la_context *ctx) {
    nc_job j = {.p = p, .geom = geom, .q = q, .k = k, .v = v, .out = out};
    const int64_t B = q->ne[0];
    j.H = q->ne[2], j.D = q->ne[3], j.Dv = v->ne[3], j.SE = j.D * j.Dv + j.D;
    j.M = geom->M, j.Hw = mixing->ndim == 3 ? j.H : 1, j.tile = NC_TILE;
    j.rv = p->normalize == LA_MHLA_NORM_RELEASED_VISION;
    j.L = j.rv ? geom->max_block : 0; /* block size (all equal in rv) */
    j.mode = p->normalize == LA_MHLA_NORM_NONE ? NORM_NONE : NORM_GIVEN;
    const int64_t H = j.H, M = j.M, SE = j.SE, BH = B * H, tile = j.tile;
    const int nt = la_ctx_threads(ctx);

    ws_plan pl = {0, LA_OK};
    size_t nS = la_mhla_ws_count(&pl, B, H, M, SE, "mhla: block summaries [B,H,M,D·Dv+D]");
    size_t oS = la_mhla_ws_take(&pl, nS, sizeof(float), "mhla: block summaries");
    size_t oSt = la_mhla_ws_take(&pl, nS, sizeof(float), "mhla: mixed summaries");
    size_t oW = la_mhla_ws_take(&pl, la_mhla_ws_count(&pl, j.Hw, M, M, 1, "mhla: mixing"), sizeof(float),
                        "mhla: mixing");
    size_t nR = j.rv ? la_mhla_ws_count(&pl, B, H, M, j.L, "mhla: released_vision denominators") : 1;
    size_t oR = la_mhla_ws_take(&pl, nR, sizeof(float), "mhla: denominators");
    size_t oRt = la_mhla_ws_take(&pl, nR, sizeof(float), "mhla: mixed denominators");
    const int64_t qsz = rup16(tile * j.D), vsz = rup16(tile * j.Dv);
    size_t per = la_mhla_ws_count(&pl, 2 * qsz + 2 * vsz + 3 * tile, (int64_t)sizeof(float), 1, 1,
                          "mhla: per-thread tiles");
    size_t oT = la_mhla_ws_take(&pl, (size_t)nt, per, "mhla: per-thread tiles");
    if (pl.st != LA_OK) return pl.st;
    char *ws = (char *)la_ws_alloc(ctx, pl.total);
    if (!ws) return la_err(LA_ERR_NOMEM, "mhla: cannot allocate %zu bytes of workspace", pl.total);
    j.S = (float *)(ws + oS), j.St = (float *)(ws + oSt), j.W = (float *)(ws + oW);
    j.R = (float *)(ws + oR), j.Rt = (float *)(ws + oRt);
    la_mhla_load_mixing(mixing, M, 0, j.W, NULL);
#ifdef NC_FAST
    j.fast = la_mhla_nc_fast_ok(p->feature, q, k, v);
#endif

    const int per_head = whole_heads(BH, nt);
    const int64_t ncol = (SE + MIX_COLS - 1) / MIX_COLS;
    /* fast path: tasks (b, block, group of hg heads); all heads of a token
     * in one task when that still gives every thread several tasks */
    int64_t hg = H < NC_HG ? H : NC_HG;
    while (hg > 1 && B * M * ((H + hg - 1) / hg) < 4 * (int64_t)nt) hg = (hg + 1) / 2;
    const int64_t ng = (H + hg - 1) / hg;
    (void)ng; /* used by the AVX-512 path only */
#pragma omp parallel num_threads(nt)
    {
        tiles w;
        w.q = (float *)(ws + oT + (size_t)la_thread_id() * per);
        w.k = w.q + qsz, w.v = w.k + qsz, w.o = w.v + vsz, w.a = NULL;
        w.idx = (int64_t *)(w.o + vsz);
        w.den = (float *)(w.idx + tile);
        if (j.fast) {
#ifdef NC_FAST
            /* 1: summaries per (b, block, head group); 2: mixing in column
             * tiles; 3: outputs per (b, block, head group) */
#pragma omp for schedule(dynamic, 1)
            for (int64_t task = 0; task < B * M * ng; task++) {
                const int64_t g = task % ng, blk = (task / ng) % M, b = task / (ng * M);
                la_mhla_nc_summary_fast(&j, b, blk, g * hg, (g + 1) * hg < H ? (g + 1) * hg : H, &w);
            }
#pragma omp for schedule(dynamic, 1)
            for (int64_t task = 0; task < BH * ncol; task++) {
                const int64_t c0 = (task % ncol) * MIX_COLS;
                nc_mix(&j, task / ncol, c0, SE - c0 < MIX_COLS ? SE - c0 : MIX_COLS,
                       j.rv && c0 == 0);
            }
#pragma omp for schedule(dynamic, 1)
            for (int64_t task = 0; task < B * M * ng; task++) {
                const int64_t g = task % ng, blk = (task / ng) % M, b = task / (ng * M);
                la_mhla_nc_output_fast(&j, b, blk, g * hg, (g + 1) * hg < H ? (g + 1) * hg : H, &w);
            }
#endif
        } else if (per_head) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t bh = 0; bh < BH; bh++) {
                for (int64_t blk = 0; blk < M; blk++) nc_summary(&j, bh * M + blk, &w);
                nc_mix(&j, bh, 0, SE, j.rv);
                for (int64_t blk = 0; blk < M; blk++) nc_output(&j, bh * M + blk, &w);
            }
        } else {
            /* 1: summaries per block; 2: mixing in column tiles (few heads
             * still keep every thread busy); 3: outputs per block */
#pragma omp for schedule(dynamic, 1)
            for (int64_t task = 0; task < BH * M; task++) nc_summary(&j, task, &w);
#pragma omp for schedule(dynamic, 1)
            for (int64_t task = 0; task < BH * ncol; task++) {
                const int64_t c0 = (task % ncol) * MIX_COLS;
                nc_mix(&j, task / ncol, c0, SE - c0 < MIX_COLS ? SE - c0 : MIX_COLS,
                       j.rv && c0 == 0);
            }
#pragma omp for schedule(dynamic, 1)
            for (int64_t task = 0; task < BH * M; task++) nc_output(&j, task, &w);
        }
    }
    la_ws_free(ctx, ws);
    return LA_OK;
}
