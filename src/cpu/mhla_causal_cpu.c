/* MHLA on the CPU, the causal chunkwise forward (SPEC §5.4): per chunk a
 * summary, a strictly lower triangular mixing (a GEMM by row blocks, or a
 * running sum when every row of W is constant below the diagonal), then
 * each query tile against its mixture and, masked, its own chunk. */
#include "cpu/mhla_cpu_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- causal chunkwise forward --------------------------------------------- */
typedef struct c_job {
    const la_mhla_causal_params *p;
    const la_tensor *q, *k, *v;
    la_tensor *out;
    int64_t N, H, D, Dv, SE, C, nc, Hw, tile;
    int per_query;
    float *Wl, *Wd; /* strictly lower W [Hw,nc,nc], its diagonal [Hw,nc] */
    int row_constant; /* every row's W[i,b], b < i, are equal (all heads) */
} c_job;
/* A head's chunk summaries are rows [S_c z_c] of SE = D·Dv + D floats
 * (S_c [D,Dv], z_c [D]); its mixtures Hm have the same layout. */

/* Phase 1: S_c = K̃ᵀV and z_c = Σ k̃ of chunk c of head bh, into row c of Sh. */
static void c_summary(const c_job *j, int64_t bh, int64_t c, float *Sh, tiles *w) {
    const int64_t D = j->D, Dv = j->Dv, C = j->C, tile = j->tile;
    const int64_t b = bh / j->H, h = bh % j->H;
    float *Sc = Sh + c * j->SE, *zc = Sc + D * Dv;
    const int64_t s0 = c * C, s1 = (s0 + C < j->N) ? s0 + C : j->N;
    memset(zc, 0, (size_t)D * sizeof(float));
    for (int64_t a0 = s0; a0 < s1; a0 += tile) {
        int64_t n = s1 - a0 < tile ? s1 - a0 : tile;
        la_mhla_gather_rows(j->k, b, h, NULL, a0, n, w->k, D, 1, j->p->feature, 1.0f);
        const float *vr = direct_rows(j->v, b, h, a0);
        const int64_t ldv = vr ? j->v->nb[1] : Dv;
        if (!vr) {
            la_mhla_gather_rows(j->v, b, h, NULL, a0, n, w->v, Dv, 0, LA_FEATURE_IDENTITY, 1.0f);
            vr = w->v;
        }
        la_sgemm(true, false, D, Dv, n, 1.0f, w->k, D, vr, ldv, a0 > s0 ? 1.0f : 0.0f, Sc, Dv);
        for (int64_t r = 0; r < n; r++)
            for (int64_t d = 0; d < D; d++) zc[d] += w->k[r * D + d];
    }
}

/* Phase 2: Hm[i] = Σ_{b<i} W[i,b] [S_b z_b] for rows [r0, r1), columns
 * [c0, c0+cw), from the head's summaries Sh into dst (row r0, column c0, row
 * stride SE). No row reads the summary of its own or a later chunk: a NaN
 * there times the zero weight would be NaN, a future token reaching a past
 * output. So the chunks b < r0 (before every row of the block) are one GEMM;
 * inside the block, rows go in groups of MIX_SUB: a GEMM over the chunks
 * before the group, then row by row over the group's own chunks (a triangle
 * of MIX_SUB² / 2 row products instead of the block's 64² / 2). Reads rows
 * < r1 − 1. */
#define MIX_SUB 8
static void c_mix(const c_job *j, int64_t bh, int64_t r0, int64_t r1, int64_t c0, int64_t cw,
                  const float *Sh, float *dst) {
    const int64_t nc = j->nc, SE = j->SE;
    const float *Wh = j->Wl + (j->Hw == 1 ? 0 : bh % j->H) * nc * nc;
    la_sgemm(false, false, r1 - r0, cw, r0, 1.0f, Wh + r0 * nc, nc, Sh + c0, SE, 0.0f, dst,
             SE); /* K = 0 (the first row block) writes zeros */
    for (int64_t a = r0; a < r1; a += MIX_SUB) {
        const int64_t a1 = a + MIX_SUB < r1 ? a + MIX_SUB : r1;
        la_sgemm(false, false, a1 - a, cw, a - r0, 1.0f, Wh + a * nc + r0, nc, Sh + r0 * SE + c0,
                 SE, 1.0f, dst + (a - r0) * SE, SE);
        for (int64_t i = a + 1; i < a1; i++)
            la_sgemm(false, false, 1, cw, i - a, 1.0f, Wh + i * nc + a, nc, Sh + a * SE + c0, SE,
                     1.0f, dst + (i - r0) * SE, SE);
    }
}

/* Whether, in every head's strictly lower W, each row i holds one value c_i
 * (W[i,b] equal for all b < i, exactly): uniform_causal, 1/(i+1), is. */
static int lower_rows_constant(const float *Wl, int64_t Hw, int64_t nc) {
    for (int64_t hw = 0; hw < Hw; hw++)
        for (int64_t i = 2; i < nc; i++) {
            const float *row = Wl + (hw * nc + i) * nc;
            for (int64_t b = 1; b < i; b++)
                if (row[b] != row[0]) return 0;
        }
    return 1;
}

/* Phase 2 for a row-constant W: Hm[i] = c_i · Σ_{b<i} [S_b z_b], a running
 * sum over the chunks, O(nc·SE) instead of the GEMM's O(nc²·SE); the same
 * numbers up to rounding. Columns [c0, c0+cw) of a head's rows; src and dst
 * may be the same rows (in place). run, cur: cw floats of scratch. */
static void c_mix_prefix(const c_job *j, int64_t bh, int64_t c0, int64_t cw, const float *src,
                         float *dst, float *run, float *cur) {
    const int64_t nc = j->nc, SE = j->SE;
    const float *Wh = j->Wl + (j->Hw == 1 ? 0 : bh % j->H) * nc * nc;
    memset(run, 0, (size_t)cw * sizeof(float));
    for (int64_t i = 0; i < nc; i++) {
        const float ci = i > 0 ? Wh[i * nc] : 0.0f;
        const int more = i + 1 < nc; /* the last chunk's summary is never formed */
        if (more) memcpy(cur, src + i * SE + c0, (size_t)cw * sizeof(float));
        float *d = dst + i * SE + c0;
        for (int64_t x = 0; x < cw; x++) d[x] = ci * run[x];
        if (more)
            for (int64_t x = 0; x < cw; x++) run[x] += cur[x];
    }
}

/* Phase 3: outputs of chunk c of head bh, query tiles against key tiles:
 *   o   = q̃·S̃_c + w_cc · mask(q̃ k̃ᵀ) V
 *   den = q̃·z̃_c + w_cc · rowsum(mask(q̃ k̃ᵀ))       (per_query)
 * With f32 unit-stride views the GEMMs read v and write out in place. */
static void c_output(const c_job *j, int64_t bh, int64_t c, const float *Hh, tiles *w) {
    const int64_t D = j->D, Dv = j->Dv, C = j->C, tile = j->tile;
    const int64_t b = bh / j->H, h = bh % j->H;
    const float wii = j->Wd[(j->Hw == 1 ? 0 : h) * j->nc + c];
    const float *Hc = Hh + c * j->SE, *zc = Hc + D * Dv;
    const int64_t s0 = c * C, s1 = (s0 + C < j->N) ? s0 + C : j->N;
    for (int64_t a0 = s0; a0 < s1; a0 += tile) {
        int64_t na = s1 - a0 < tile ? s1 - a0 : tile;
        la_mhla_gather_rows(j->q, b, h, NULL, a0, na, w->q, D, 1, j->p->feature, j->p->scale_q);
        float *orow = direct_rows(j->out, b, h, a0);
        const int64_t ldo = orow ? j->out->nb[1] : Dv;
        float *o = orow ? orow : w->o;
        la_sgemm(false, false, na, Dv, D, 1.0f, w->q, D, Hc, Dv, 0.0f, o, ldo);
        if (j->per_query)
            for (int64_t r = 0; r < na; r++) w->den[r] = dot8(w->q + r * D, zc, D);
        for (int64_t k0 = s0; k0 <= a0; k0 += tile) {
            const int64_t nk = k0 == a0 ? na : tile;
            la_mhla_gather_rows(j->k, b, h, NULL, k0, nk, w->k, D, 1, j->p->feature, 1.0f);
            la_sgemm(false, true, na, nk, D, 1.0f, w->q, D, w->k, D, 0.0f, w->a, nk);
            if (k0 == a0) /* same first row: key s is visible to query r iff s <= r */
                for (int64_t r = 0; r < na; r++)
                    for (int64_t s2 = r + 1; s2 < nk; s2++) w->a[r * nk + s2] = 0.0f;
            const float *vr = direct_rows(j->v, b, h, k0);
            const int64_t ldv = vr ? j->v->nb[1] : Dv;
            if (!vr) {
                la_mhla_gather_rows(j->v, b, h, NULL, k0, nk, w->v, Dv, 0, LA_FEATURE_IDENTITY, 1.0f);
                vr = w->v;
            }
            la_sgemm(false, false, na, Dv, nk, wii, w->a, nk, vr, ldv, 1.0f, o, ldo);
            if (j->per_query)
                for (int64_t r = 0; r < na; r++) w->den[r] += wii * sum8(w->a + r * nk, nk);
        }
        if (!orow) {
            la_mhla_store_rows(j->out, b, h, NULL, a0, na, w->o, Dv,
                       j->per_query ? NORM_GIVEN : NORM_NONE, w->den, j->p->eps);
        } else if (j->per_query) {
            for (int64_t r = 0; r < na; r++) {
                const float inv = 1.0f / (w->den[r] + j->p->eps);
                for (int64_t e = 0; e < Dv; e++) orow[r * ldo + e] *= inv;
            }
        }
    }
}

la_status la_mhla_causal_forward_cpu(const la_mhla_causal_params *p, const la_tensor *q,
                                     const la_tensor *k, const la_tensor *v,
                                     const la_tensor *mixing, la_tensor *out,
                                     la_context *ctx) {
    c_job j = {.p = p, .q = q, .k = k, .v = v, .out = out};
    const int64_t B = q->ne[0];
    j.N = q->ne[1], j.H = q->ne[2], j.D = q->ne[3], j.Dv = v->ne[3], j.SE = j.D * j.Dv + j.D;
    j.C = p->chunk, j.nc = (j.N + j.C - 1) / j.C, j.Hw = mixing->ndim == 3 ? j.H : 1;
    j.tile = j.C < C_TILE ? j.C : C_TILE;
    j.per_query = p->normalize == LA_MHLA_NORM_PER_QUERY;
    const int64_t H = j.H, nc = j.nc, SE = j.SE, BH = B * H, tile = j.tile;
    const int nt = la_ctx_threads(ctx);

    /* Whole-head tasks keep one head's summaries per thread and mix them in
     * place (bottom-up, through a row-block buffer): nt·(nc + 64) rows of
     * workspace instead of 2·B·H·nc, which at large N is the difference
     * between a reused heap block and tens of MB of fresh pages per call. */
    const int per_head = whole_heads(BH, nt);
    ws_plan pl = {0, LA_OK};
    size_t nS = per_head ? la_mhla_ws_count(&pl, nt, nc + MIX_ROWS, SE, 1, "mhla causal: chunk summaries")
                         : la_mhla_ws_count(&pl, BH, nc, SE, 1, "mhla causal: chunk summaries [B,H,N/C,D·Dv+D]");
    size_t oS = la_mhla_ws_take(&pl, nS, sizeof(float), "mhla causal: chunk summaries");
    size_t oHm = la_mhla_ws_take(&pl, per_head ? 1 : nS, sizeof(float), "mhla causal: mixtures");
    size_t oW = la_mhla_ws_take(&pl, la_mhla_ws_count(&pl, j.Hw, nc, nc, 1, "mhla causal: mixing"),
                        sizeof(float), "mhla causal: mixing");
    size_t oWd = la_mhla_ws_take(&pl, la_mhla_ws_count(&pl, j.Hw, nc, 1, 1, "mhla causal: mixing diagonal"),
                         sizeof(float), "mhla causal: mixing diagonal");
    const int64_t qsz = rup16(tile * j.D), vsz = rup16(tile * j.Dv), asz = rup16(tile * tile);
    size_t per = la_mhla_ws_count(&pl, 2 * qsz + 2 * vsz + asz + rup16(tile), (int64_t)sizeof(float), 1,
                          1, "mhla causal: per-thread tiles");
    size_t oT = la_mhla_ws_take(&pl, (size_t)nt, per, "mhla causal: per-thread tiles");
    if (pl.st != LA_OK) return pl.st;
    char *ws = (char *)la_ws_alloc(ctx, pl.total);
    if (!ws) return la_err(LA_ERR_NOMEM, "mhla causal: cannot allocate %zu bytes of workspace",
                           pl.total);
    float *S = (float *)(ws + oS), *Hm = (float *)(ws + oHm);
    j.Wl = (float *)(ws + oW), j.Wd = (float *)(ws + oWd);
    la_mhla_load_mixing(mixing, nc, 1, j.Wl, j.Wd);
    j.row_constant = lower_rows_constant(j.Wl, j.Hw, nc);

    const int64_t nrb = (nc + MIX_ROWS - 1) / MIX_ROWS, ncol = (SE + MIX_COLS - 1) / MIX_COLS;
#pragma omp parallel num_threads(nt)
    {
        tiles w;
        w.q = (float *)(ws + oT + (size_t)la_thread_id() * per);
        w.k = w.q + qsz, w.v = w.k + qsz, w.o = w.v + vsz, w.a = w.o + vsz, w.idx = NULL;
        w.den = w.a + asz;
        if (per_head) {
            float *Sh = S + (size_t)la_thread_id() * (size_t)((nc + MIX_ROWS) * SE);
            float *tmp = Sh + nc * SE;
#pragma omp for schedule(dynamic, 1)
            for (int64_t bh = 0; bh < BH; bh++) {
                /* the last chunk's summary is never mixed (b < i) */
                for (int64_t c = 0; c + 1 < nc; c++) c_summary(&j, bh, c, Sh, &w);
                /* in place, last row block first: block [r0, r1) reads rows
                 * < r1 − 1, which no later-written block has touched yet */
                if (j.row_constant) { /* tmp holds >= 2 rows (MIX_ROWS >= 2) */
                    c_mix_prefix(&j, bh, 0, SE, Sh, Sh, tmp, tmp + SE);
                } else {
                    for (int64_t rb = nrb - 1; rb >= 0; rb--) {
                        const int64_t r0 = rb * MIX_ROWS;
                        const int64_t r1 = r0 + MIX_ROWS < nc ? r0 + MIX_ROWS : nc;
                        c_mix(&j, bh, r0, r1, 0, SE, Sh, tmp);
                        memcpy(Sh + r0 * SE, tmp, (size_t)((r1 - r0) * SE) * sizeof(float));
                    }
                }
                for (int64_t c = 0; c < nc; c++) c_output(&j, bh, c, Sh, &w);
            }
        } else {
#pragma omp for schedule(dynamic, 1)
            for (int64_t task = 0; task < BH * (nc - 1); task++) {
                const int64_t bh = task / (nc - 1);
                c_summary(&j, bh, task % (nc - 1), S + bh * nc * SE, &w);
            }
            if (j.row_constant) {
                float run[MIX_COLS], cur[MIX_COLS];
#pragma omp for schedule(dynamic, 1)
                for (int64_t task = 0; task < BH * ncol; task++) {
                    const int64_t bh = task / ncol, c0 = (task % ncol) * MIX_COLS;
                    c_mix_prefix(&j, bh, c0, SE - c0 < MIX_COLS ? SE - c0 : MIX_COLS,
                                 S + bh * nc * SE, Hm + bh * nc * SE, run, cur);
                }
            } else {
#pragma omp for schedule(dynamic, 1)
                for (int64_t task = 0; task < BH * nrb * ncol; task++) {
                    const int64_t bh = task / (nrb * ncol), rb = (task / ncol) % nrb;
                    const int64_t c0 = (task % ncol) * MIX_COLS;
                    const int64_t r0 = rb * MIX_ROWS, r1 = r0 + MIX_ROWS < nc ? r0 + MIX_ROWS : nc;
                    c_mix(&j, bh, r0, r1, c0, SE - c0 < MIX_COLS ? SE - c0 : MIX_COLS,
                          S + bh * nc * SE, Hm + (bh * nc + r0) * SE + c0);
                }
            }
#pragma omp for schedule(dynamic, 1)
            for (int64_t task = 0; task < BH * nc; task++)
                c_output(&j, task / nc, task % nc, Hm + (task / nc) * nc * SE, &w);
        }
    }
    la_ws_free(ctx, ws);
    return LA_OK;
}
