/* CPU softmax attention backward (TRAINING.md §1), FlashAttention-2 style.
 *
 * With the forward's lse, per (batch, head), P = exp(scale·QKᵀ − lse) is
 * recomputed tile by tile, never stored whole:
 *
 *     Δ_i  = Σ_e dO[i,e]·O[i,e]                  (rowsum(dO∘O))
 *     dP   = dO Vᵀ,   dS = P∘(dP − Δ)
 *     dQ   = scale · dS K,   dK = scale · dSᵀ Q,   dV = Pᵀ dO
 *
 * Every gradient row is owned by one task or summed in a fixed order
 * (deterministic, no atomics). One pass where it needs at most SB_MAX_SEG key
 * segments per (b, kv head) for 8 tasks per thread: a task per (b, kv head,
 * key segment) walks its key tiles, sums dK, dV of each over the query heads
 * of its group (GQA) and the query tiles that see it, and adds dQ into the
 * segment's own dQ panel of the group (O(N·D) per segment); the panels are
 * then summed in segment order. Else two passes: pass A, one
 * task per (b, h, query tile), sums dQ over the key tiles; pass B, one task
 * per (b, kv head, key tile), sums dK and dV. The one-pass order does 5 tile
 * products per tile pair instead of 7. Inputs are
 * first packed into contiguous f32 panels (Q pre-scaled; K and V also
 * transposed per key tile, so that all 5 products run on la_bwd_acc without
 * packing copies per call), O(N·H·D) memory.
 * Causal masking is bottom-right aligned like the forward (row i sees keys
 * s <= i + Nk − Nq); a row that sees no key (lse = −inf) has zero gradient. */
#include "cpu/backward_cpu.h"
#include "cpu/softmax_cpu.h"
#include "cpu/bwd_gemm.h"

#include <stdlib.h>

#ifndef SB_BQ
#define SB_BQ 128
#endif
#ifndef SB_BK
#define SB_BK 128
#endif
#define SB_MAX_SEG 8 /* key segments per (batch, kv head) in the one-pass order */

typedef struct sb_job {
    int causal;
    int64_t B, Nq, Nk, H, Hk, D, Dv, off;
    float *qs;   /* [B,H,Nq,D]  scale·q  */
    float *dO;   /* [B,H,Nq,Dv]          */
    float *kk;   /* [B,Hk,Nk,D]          */
    float *vv;   /* [B,Hk,Nk,Dv]         */
    float *kt;   /* [B,Hk,nkt,D,SB_BK]  key tiles transposed, zero-padded */
    float *vt;   /* [B,Hk,nkt,Dv,SB_BK] value tiles transposed, zero-padded */
    int64_t nkt; /* key tiles per head */
    float *dl;   /* [B,H,Nq]   Δ         */
    float *ls;   /* [B,H,Nq]   lse       */
} sb_job;

static const float *qs_at(const sb_job *j, int64_t b, int64_t h, int64_t i) {
    return j->qs + ((b * j->H + h) * j->Nq + i) * j->D;
}
static const float *do_at(const sb_job *j, int64_t b, int64_t h, int64_t i) {
    return j->dO + ((b * j->H + h) * j->Nq + i) * j->Dv;
}
static const float *k_at(const sb_job *j, int64_t b, int64_t hk, int64_t s) {
    return j->kk + ((b * j->Hk + hk) * j->Nk + s) * j->D;
}

/* P and dS of query rows [i0, i0+bq) of head h against keys [j0, j0+bk):
 * p, ds are bq×bk with row stride SB_BK. */
LA_VEC512 static void tile_p_ds(const sb_job *j, int64_t b, int64_t h, int64_t i0, int64_t bq, int64_t j0,
                      int64_t bk, float *p, float *ds) {
    const int64_t hk = h / (j->H / j->Hk);
    /* S = Q·Kᵀ and dP = dO·Vᵀ against the transposed tiles (all SB_BK
     * columns: the padding is zero), read in place. */
    const int64_t tile = (b * j->Hk + hk) * j->nkt + j0 / SB_BK;
    la_bwd_acc(bq, SB_BK, j->D, 1.f, qs_at(j, b, h, i0), j->D, 1, j->kt + tile * j->D * SB_BK,
               SB_BK, p, SB_BK, 0.f);
    la_bwd_acc(bq, SB_BK, j->Dv, 1.f, do_at(j, b, h, i0), j->Dv, 1, j->vt + tile * j->Dv * SB_BK,
               SB_BK, ds, SB_BK, 0.f);
    const float *lrow = j->ls + (b * j->H + h) * j->Nq;
    const float *drow = j->dl + (b * j->H + h) * j->Nq;
    for (int64_t r = 0; r < bq; r++) {
        const int64_t i = i0 + r;
        float *restrict pr = p + r * SB_BK, *restrict dr = ds + r * SB_BK;
        const float L = lrow[i], dd = drow[i];
        int64_t lim = bk; /* visible columns [0, lim) */
        if (j->causal) {
            int64_t last = i + j->off - j0;
            lim = last < 0 ? 0 : (last + 1 < bk ? last + 1 : bk);
        }
        if (L == -INFINITY) lim = 0;
        for (int64_t c = 0; c < lim; c++) {
            const float e = la_expf_nonpos(pr[c] - L);
            pr[c] = e;
            dr[c] = e * (dr[c] - dd);
        }
        for (int64_t c = lim; c < bk; c++) pr[c] = dr[c] = 0.f;
    }
}

/* Pack the inputs (f32, contiguous per head) and the row statistics. */
static void pack_inputs(sb_job *j, float scale, const la_tensor *q, const la_tensor *k,
                        const la_tensor *v, const la_tensor *out, const la_tensor *lse,
                        const la_tensor *d_out, int threads) {
    const int64_t nqh = j->B * j->H, nkh = j->B * j->Hk;
#pragma omp parallel for num_threads(threads) schedule(dynamic)
    for (int64_t x = 0; x < nqh + nkh; x++) {
        if (x < nqh) {
            const int64_t b = x / j->H, h = x % j->H;
            float *qp = j->qs + x * j->Nq * j->D, *dp = j->dO + x * j->Nq * j->Dv;
            la_gather_bnhd(q, b, h, qp, j->D);
            for (int64_t t = 0; t < j->Nq * j->D; t++) qp[t] *= scale;
            la_gather_bnhd(d_out, b, h, dp, j->Dv);
            for (int64_t i = 0; i < j->Nq; i++) {
                const int64_t ob = la_off4(out, b, i, h, 0);
                double acc = 0;
                for (int64_t e = 0; e < j->Dv; e++)
                    acc += (double)dp[i * j->Dv + e] * la_load_f32(out, ob + e * out->nb[3]);
                j->dl[x * j->Nq + i] = (float)acc;
                j->ls[x * j->Nq + i] = la_load_f32(lse, la_off3(lse, b, i, h));
            }
        } else {
            const int64_t y = x - nqh, b = y / j->Hk, hk = y % j->Hk;
            const float *kp = j->kk + y * j->Nk * j->D, *vp = j->vv + y * j->Nk * j->Dv;
            la_gather_bnhd(k, b, hk, (float *)kp, j->D);
            la_gather_bnhd(v, b, hk, (float *)vp, j->Dv);
            for (int64_t t = 0; t < j->nkt; t++) {
                float *kt = j->kt + (y * j->nkt + t) * j->D * SB_BK;
                float *vt = j->vt + (y * j->nkt + t) * j->Dv * SB_BK;
                const int64_t s0 = t * SB_BK, bk = j->Nk - s0 < SB_BK ? j->Nk - s0 : SB_BK;
                memset(kt, 0, (size_t)(j->D * SB_BK) * sizeof(float));
                memset(vt, 0, (size_t)(j->Dv * SB_BK) * sizeof(float));
                for (int64_t c = 0; c < bk; c++) {
                    for (int64_t d = 0; d < j->D; d++) kt[d * SB_BK + c] = kp[(s0 + c) * j->D + d];
                    for (int64_t e = 0; e < j->Dv; e++) vt[e * SB_BK + c] = vp[(s0 + c) * j->Dv + e];
                }
            }
        }
    }
}

/* One key tile [j0, j0 + SB_BK) of kv head hk: dK and dV of the tile summed
 * over the group's query heads and query tiles (in a fixed order), written
 * out; with dqp, also each query tile's dQ contribution added to the task's
 * dQ panel dqp [group][Nq][D]. acc holds SB_BK * (D + Dv) floats. */
static void key_tile(const sb_job *j, int64_t b, int64_t hk, int64_t j0, int64_t group,
                     float scale, float *p, float *ds, float *acc, la_tensor *dk, la_tensor *dv,
                     float *dqp) {
    const int64_t D = j->D, Dv = j->Dv;
    const int64_t bk = j->Nk - j0 < SB_BK ? j->Nk - j0 : SB_BK;
    float *dka = acc, *dva = acc + SB_BK * D;
    memset(acc, 0, (size_t)(SB_BK * (D + Dv)) * sizeof(float));
    int64_t istart = j->causal ? j0 - j->off : 0;
    if (istart < 0) istart = 0;
    for (int64_t h = hk * group; h < (hk + 1) * group; h++)
        for (int64_t i0 = istart; i0 < j->Nq; i0 += SB_BQ) {
            const int64_t bq = j->Nq - i0 < SB_BQ ? j->Nq - i0 : SB_BQ;
            tile_p_ds(j, b, h, i0, bq, j0, bk, p, ds);
            if (dv)
                la_bwd_acc(bk, Dv, bq, 1.f, p, 1, SB_BK, do_at(j, b, h, i0), Dv, dva, Dv, 1.f);
            if (dk)
                la_bwd_acc(bk, D, bq, 1.f, ds, 1, SB_BK, qs_at(j, b, h, i0), D, dka, D, 1.f);
            if (dqp)
                la_bwd_acc(bq, D, bk, scale, ds, SB_BK, 1, k_at(j, b, hk, j0), D,
                           dqp + ((h - hk * group) * j->Nq + i0) * D, D, 1.f);
        }
    if (dk) la_scatter_bnhd_rows(dk, b, hk, j0, bk, dka, D);
    if (dv) la_scatter_bnhd_rows(dv, b, hk, j0, bk, dva, Dv);
}

la_status la_softmax_backward_cpu(int causal, float scale, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *v, const la_tensor *out,
                                  const la_tensor *lse, const la_tensor *d_out, la_tensor *dq,
                                  la_tensor *dk, la_tensor *dv, la_context *ctx) {
    sb_job j = {0};
    j.causal = causal;
    j.B = q->ne[0], j.Nq = q->ne[1], j.H = q->ne[2], j.D = q->ne[3];
    j.Nk = k->ne[1], j.Hk = k->ne[2], j.Dv = v->ne[3], j.off = j.Nk - j.Nq;
    const int threads = la_ctx_threads(ctx);
    const int64_t D = j.D, Dv = j.Dv;

    /* Workspace: packed panels + per-thread tiles. */
    size_t nq_el, nk_el, tmp, total = 0, rows;
    LA_TRY(la_mul_size((size_t)(j.B * j.H), (size_t)j.Nq, &rows, "softmax backward rows"));
    LA_TRY(la_mul_size(rows, (size_t)(D + Dv + 2), &nq_el, "softmax backward q/dO panels"));
    LA_TRY(la_mul_size((size_t)(j.B * j.Hk), (size_t)j.Nk, &tmp, "softmax backward keys"));
    LA_TRY(la_mul_size(tmp, (size_t)(D + Dv), &nk_el, "softmax backward k/v panels"));
    /* and the transposed key / value tiles, zero-padded to whole tiles */
    j.nkt = (j.Nk + SB_BK - 1) / SB_BK;
    size_t nkt_el;
    LA_TRY(la_mul_size((size_t)(j.B * j.Hk * j.nkt) * SB_BK, (size_t)(D + Dv), &nkt_el,
                       "softmax backward k/v tiles"));
    if (nk_el + nkt_el < nk_el) return la_err(LA_ERR_OVERFLOW, "softmax backward: workspace size overflows");
    nk_el += nkt_el;
    /* One pass (FlashAttention-2's loop order): a task per (batch, kv head,
     * key segment) sums dK, dV of its key tiles and adds dQ of the whole
     * head group into the segment's own dQ panel; the panels are summed
     * afterwards in segment order. The segments (≥ 8 tasks per thread, so
     * that a thread preempted on a shared machine delays little) cost
     * nseg × (dQ size) of workspace: beyond SB_MAX_SEG, two passes instead. */
    const int64_t nkv = j.B * j.Hk, nkt = j.nkt;
    int64_t nseg = (8 * (int64_t)threads + nkv - 1) / (nkv > 0 ? nkv : 1);
    if (nseg > nkt) nseg = nkt;
    if (nseg < 1) nseg = 1;
    const int one_pass = nseg <= SB_MAX_SEG;
    const int64_t seg_tiles = (nkt + nseg - 1) / nseg;
    size_t per_thread = 2 * SB_BQ * SB_BK + (size_t)SB_BK * (D + Dv) + (size_t)SB_BQ * D;
    size_t dq_el = 0;
    if (one_pass && dq) {
        LA_TRY(la_mul_size(rows * (size_t)nseg, (size_t)D, &dq_el, "softmax backward dQ panels"));
        if (nk_el + dq_el < nk_el) return la_err(LA_ERR_OVERFLOW, "softmax backward: workspace size overflows");
        nk_el += dq_el;
    }
    LA_TRY(la_mul_size(per_thread, (size_t)threads, &tmp, "softmax backward tiles"));
    total = nq_el + nk_el + tmp;
    if (total < nq_el) return la_err(LA_ERR_OVERFLOW, "softmax backward: workspace size overflows");
    LA_TRY(la_mul_size(total, sizeof(float), &tmp, "softmax backward workspace"));
    float *ws = la_ws_alloc(ctx, tmp);
    if (!ws) return LA_ERR_NOMEM;
    j.qs = ws;
    j.dO = j.qs + rows * D;
    j.dl = j.dO + rows * Dv;
    j.ls = j.dl + rows;
    j.kk = j.ls + rows;
    j.vv = j.kk + (size_t)(j.B * j.Hk * j.Nk) * D;
    j.kt = j.vv + (size_t)(j.B * j.Hk * j.Nk) * Dv;
    j.vt = j.kt + (size_t)(j.B * j.Hk * j.nkt * SB_BK) * D;
    float *dqs = j.vt + (size_t)(j.B * j.Hk * j.nkt * SB_BK) * Dv; /* [nseg][B][H][Nq][D] */
    float *tiles = dqs + dq_el;

    pack_inputs(&j, scale, q, k, v, out, lse, d_out, threads);

    const int64_t nqt = (j.Nq + SB_BQ - 1) / SB_BQ;
    const int64_t group = j.H / j.Hk;
#pragma omp parallel num_threads(threads)
    {
        float *p = tiles + (size_t)la_thread_id() * per_thread;
        float *ds = p + SB_BQ * SB_BK;
        float *acc = ds + SB_BQ * SB_BK; /* pass A: bq×D; pass B: bk×D then bk×Dv */
        if (one_pass) {
#pragma omp for schedule(dynamic)
            for (int64_t x = 0; x < nkv * nseg; x++) {
                const int64_t b = x / (j.Hk * nseg), hk = (x / nseg) % j.Hk, sg = x % nseg;
                float *dqp = dq ? dqs + ((sg * j.B + b) * j.H + hk * group) * j.Nq * D : NULL;
                if (dqp) memset(dqp, 0, (size_t)(group * j.Nq * D) * sizeof(float));
                const int64_t t1 = (sg + 1) * seg_tiles < nkt ? (sg + 1) * seg_tiles : nkt;
                for (int64_t t = sg * seg_tiles; t < t1; t++)
                    key_tile(&j, b, hk, t * SB_BK, group, scale, p, ds, acc, dk, dv, dqp);
            }
            if (dq) {
#pragma omp for schedule(dynamic)
                for (int64_t x = 0; x < j.B * j.H; x++) {
                    float *d0 = dqs + x * j.Nq * D;
                    for (int64_t sg = 1; sg < nseg; sg++) {
                        const float *dsg = dqs + (sg * j.B * j.H + x) * j.Nq * D;
                        for (int64_t e = 0; e < j.Nq * D; e++) d0[e] += dsg[e];
                    }
                    la_scatter_bnhd_rows(dq, x / j.H, x % j.H, 0, j.Nq, d0, D);
                }
            }
        }
        if (dq && !one_pass) {
#pragma omp for schedule(dynamic)
            for (int64_t x = 0; x < j.B * j.H * nqt; x++) {
                const int64_t b = x / (j.H * nqt), h = (x / nqt) % j.H, i0 = (x % nqt) * SB_BQ;
                const int64_t bq = j.Nq - i0 < SB_BQ ? j.Nq - i0 : SB_BQ;
                const int64_t hk = h / group;
                int64_t kend = j.Nk;
                if (causal) {
                    int64_t last = i0 + bq - 1 + j.off + 1;
                    kend = last < j.Nk ? (last > 0 ? last : 0) : j.Nk;
                }
                memset(acc, 0, (size_t)(bq * D) * sizeof(float));
                for (int64_t j0 = 0; j0 < kend; j0 += SB_BK) {
                    const int64_t bk = kend - j0 < SB_BK ? kend - j0 : SB_BK;
                    tile_p_ds(&j, b, h, i0, bq, j0, bk, p, ds);
                    la_bwd_acc(bq, D, bk, scale, ds, SB_BK, 1, k_at(&j, b, hk, j0), D, acc, D, 1.f);
                }
                la_scatter_bnhd_rows(dq, b, h, i0, bq, acc, D);
            }
        }
        if ((dk || dv) && !one_pass) {
#pragma omp for schedule(dynamic)
            for (int64_t x = 0; x < j.B * j.Hk * nkt; x++) {
                const int64_t b = x / (j.Hk * nkt), hk = (x / nkt) % j.Hk, j0 = (x % nkt) * SB_BK;
                key_tile(&j, b, hk, j0, group, scale, p, ds, acc, dk, dv, NULL);
            }
        }
    }
    la_ws_free(ctx, ws);
    return LA_OK;
}
