/* DSA indexer on the CPU (SPEC §6): the fused scoring kernel shared by every
 * indexer, query/key packing, block pooling, and the flat-scan driver.
 *
 *   I(t,s) = Σ_h w[t,h] · ReLU(q[t,h]·k[s])
 *
 * is a GEMM (queries·heads × keys, contracted over dI) followed by a
 * ReLU-weighted reduction over heads. Materialising the T·HI·L head scores
 * would cost 64x the memory of the scores themselves (HI = 64); instead the
 * kernel holds an (8 heads x 32 keys) block of dot products in registers and
 * folds it into the 32 running scores as soon as the dI loop ends.
 *
 * Blocking of the flat scan: queries are processed in chunks whose score rows
 * fit a memory budget; inside a chunk, work items are (8 queries x 512 keys)
 * so the key panel (256 KB at dI = 128) stays in L2 while the 8 queries run
 * over it, and one query's packed heads (32 KB) stay in L1 across the panel. */
#include <stdint.h>
#include <stdlib.h>

#include "cpu/sparse_cpu.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- the kernel ---------------------------------------------------------- */
typedef float vf __attribute__((vector_size(LA_IDX_VW * 4)));
typedef float vf_u __attribute__((vector_size(LA_IDX_VW * 4), aligned(4))); /* unaligned access */
typedef int32_t vi __attribute__((vector_size(LA_IDX_VW * 4)));

/* max(a, 0) per lane with NaN propagated, as torch.relu (a < 0 is false for
 * NaN, so a NaN lane is kept). */
static inline __attribute__((always_inline)) vf relu_v(vf a) {
    const vf zero = {0};
    const vi neg = a < zero; /* all ones where a < 0 */
    return (vf)((vi)a & ~neg);
}

/* NV tiles (NV*VW keys) of one query. The lane computing key s does, in this
 * order: acc = Σ_d q[h][d]·k[s][d] (one FMA per d) for each head group, then
 * score += w[h]·relu(acc) for h ascending: the same for every NV. The padded
 * heads h >= HI are skipped, not added as w = 0 times their (zero) dot
 * product: with an infinite k that product is 0·inf = NaN. */
#define LA_IDX_KERNEL(NAME, NV)                                                             \
    static void NAME(const float *qT, const float *wp, int64_t HI, int64_t HIp, int64_t dI, \
                     const float *kT, float *out) {                                         \
        vf sc[NV];                                                                          \
        for (int v = 0; v < NV; v++) sc[v] = (vf){0};                                       \
        for (int64_t g = 0; g < HIp; g += LA_IDX_HR) {                                      \
            vf acc[LA_IDX_HR][NV];                                                          \
            for (int r = 0; r < LA_IDX_HR; r++)                                             \
                for (int v = 0; v < NV; v++) acc[r][v] = (vf){0};                           \
            const float *qp = qT + g;                                                       \
            for (int64_t d = 0; d < dI; d++) {                                              \
                vf kv[NV];                                                                  \
                for (int v = 0; v < NV; v++)                                                \
                    kv[v] = *(const vf_u *)(kT + ((int64_t)v * dI + d) * LA_IDX_VW);        \
                for (int r = 0; r < LA_IDX_HR; r++) {                                       \
                    const float qs = qp[d * HIp + r];                                       \
                    for (int v = 0; v < NV; v++) acc[r][v] += qs * kv[v];                   \
                }                                                                           \
            }                                                                               \
            for (int r = 0; r < LA_IDX_HR && g + r < HI; r++) {                             \
                const float wr = wp[g + r];                                                 \
                for (int v = 0; v < NV; v++) sc[v] += wr * relu_v(acc[r][v]);               \
            }                                                                               \
        }                                                                                   \
        for (int v = 0; v < NV; v++) *(vf_u *)(out + v * LA_IDX_VW) = sc[v];                \
    }

LA_IDX_KERNEL(idx_kernel_2, 2)
LA_IDX_KERNEL(idx_kernel_1, 1)

void la_idx_score_tiles(const float *qT, const float *wp, int64_t HI, int64_t HIp, int64_t dI,
                        const float *kT, int64_t ntiles, float *out) {
    const int64_t tile = dI * LA_IDX_VW;
    int64_t j = 0;
    for (; j + 2 <= ntiles; j += 2) idx_kernel_2(qT, wp, HI, HIp, dI, kT + j * tile, out + j * LA_IDX_VW);
    if (j < ntiles) idx_kernel_1(qT, wp, HI, HIp, dI, kT + j * tile, out + j * LA_IDX_VW);
}

/* ---- packing ----------------------------------------------------------------- */
void la_idx_pack_queries(const la_tensor *q, const la_tensor *w, int64_t t0, int64_t n,
                         int64_t HIp, float *qT, float *wp) {
    const int64_t HI = q->ne[1], dI = q->ne[2];
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = t0 + i;
        float *dst = qT + i * dI * HIp;
        float *wd = wp + i * HIp;
        for (int64_t h = 0; h < HIp; h++) {
            if (h < HI) {
                for (int64_t d = 0; d < dI; d++) dst[d * HIp + h] = la_load_f32(q, la_off3(q, t, h, d));
                wd[h] = la_load_f32(w, la_off2(w, t, h));
            } else {
                for (int64_t d = 0; d < dI; d++) dst[d * HIp + h] = 0.f;
                wd[h] = 0.f; /* padded heads: never read (the kernel stops at HI) */
            }
        }
    }
}

void la_idx_pack_keys(const la_tensor *k, int64_t s0, int64_t n, float *dst) {
    const int64_t dI = k->ne[1];
    if (k->dtype == LA_F32 && k->nb[1] == 1) {
        la_idx_pack_rows((const float *)k->data + s0 * k->nb[0], k->nb[0], n, dI, dst);
        return;
    }
    const int64_t nt = la_idx_ntiles(n);
    for (int64_t j = 0; j < nt; j++) {
        float *tile = dst + j * dI * LA_IDX_VW;
        for (int64_t l = 0; l < LA_IDX_VW; l++) {
            const int64_t s = j * LA_IDX_VW + l;
            for (int64_t d = 0; d < dI; d++)
                tile[d * LA_IDX_VW + l] = s < n ? la_load_f32(k, la_off2(k, s0 + s, d)) : 0.f;
        }
    }
}

void la_idx_pack_rows(const float *rows, int64_t ld, int64_t n, int64_t dI, float *dst) {
    const int64_t nt = la_idx_ntiles(n);
    for (int64_t j = 0; j < nt; j++) {
        float *tile = dst + j * dI * LA_IDX_VW;
        const int64_t cnt = n - j * LA_IDX_VW < LA_IDX_VW ? n - j * LA_IDX_VW : LA_IDX_VW;
        for (int64_t l = 0; l < cnt; l++) {
            const float *r = rows + (j * LA_IDX_VW + l) * ld;
            for (int64_t d = 0; d < dI; d++) tile[d * LA_IDX_VW + l] = r[d];
        }
        for (int64_t l = cnt; l < LA_IDX_VW; l++)
            for (int64_t d = 0; d < dI; d++) tile[d * LA_IDX_VW + l] = 0.f;
    }
}

void la_idx_pool_blocks(const la_tensor *k, int64_t B, float *kbar, int nthreads) {
    const int64_t L = k->ne[0], dI = k->ne[1], nb = (L + B - 1) / B;
    (void)nthreads;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t b = 0; b < nb; b++) {
        float *dst = kbar + b * dI;
        const int64_t s0 = b * B, s1 = s0 + B < L ? s0 + B : L;
        for (int64_t d = 0; d < dI; d++) dst[d] = 0.f;
        if (k->dtype == LA_F32 && k->nb[1] == 1) {
            for (int64_t s = s0; s < s1; s++) { /* token order, as the decode cache adds them */
                const float *r = (const float *)k->data + s * k->nb[0];
                for (int64_t d = 0; d < dI; d++) dst[d] += r[d];
            }
        } else {
            for (int64_t s = s0; s < s1; s++)
                for (int64_t d = 0; d < dI; d++) dst[d] += la_load_f32(k, la_off2(k, s, d));
        }
        for (int64_t d = 0; d < dI; d++) dst[d] = la_idx_block_mean(dst[d], s1 - s0);
    }
}

/* ---- score rows of a chunk of queries ---------------------------------------- */
#define DSA_QG 8            /* queries per work item                      */
#define DSA_KC_TILES 32     /* key tiles per work item (512 keys at VW 16) */

void la_idx_score_rows(const float *qT, const float *wp, int64_t HI, int64_t HIp, int64_t dI,
                       int64_t nq, const int64_t *r0, const int64_t *r1, const float *kT,
                       int64_t ntk, float *sc, int64_t ldsc, int nth) {
    const int64_t ngq = (nq + DSA_QG - 1) / DSA_QG;
    const int64_t ngk = (ntk + DSA_KC_TILES - 1) / DSA_KC_TILES;
#pragma omp parallel for num_threads(nth) schedule(dynamic, 1) collapse(2)
    for (int64_t gq = 0; gq < ngq; gq++) {
        for (int64_t gk = 0; gk < ngk; gk++) {
            const int64_t j0 = gk * DSA_KC_TILES;
            const int64_t j1 = j0 + DSA_KC_TILES < ntk ? j0 + DSA_KC_TILES : ntk;
            const int64_t i1 = (gq + 1) * DSA_QG < nq ? (gq + 1) * DSA_QG : nq;
            for (int64_t i = gq * DSA_QG; i < i1; i++) {
                if (r0[i] >= r1[i]) continue;
                int64_t a = r0[i] / LA_IDX_VW, b = la_idx_ntiles(r1[i]); /* tiles meeting the range */
                if (a < j0) a = j0;
                if (b > j1) b = j1;
                if (a >= b) continue;
                la_idx_score_tiles(qT + i * dI * HIp, wp + i * HIp, HI, HIp, dI, kT + a * dI * LA_IDX_VW,
                                   b - a, sc + i * ldsc + a * LA_IDX_VW);
            }
        }
    }
}

/* Few queries (decode, T <= DSA_QG): every key panel serves one query group
 * only, so pack it where it is used, into a per-thread buffer that stays in
 * L2, instead of writing and re-reading a packed copy of all of k. Only the
 * tiles some query's range meets are packed. Same kernel, same scores. */
static void score_rows_local(const float *qT, const float *wp, int64_t HI, int64_t HIp,
                             int64_t dI, int64_t nq, const int64_t *r0, const int64_t *r1,
                             const la_tensor *k, int64_t ntk, float *sc, int64_t ldsc,
                             float *panels, int nth) {
    const int64_t L = k->ne[0];
    const int64_t ngk = (ntk + DSA_KC_TILES - 1) / DSA_KC_TILES;
    const int64_t tile = dI * LA_IDX_VW;
#pragma omp parallel for num_threads(nth) schedule(dynamic, 1)
    for (int64_t gk = 0; gk < ngk; gk++) {
        const int tid = la_thread_id();
        float *panel = panels + (size_t)tid * (size_t)(DSA_KC_TILES * tile);
        const int64_t j0 = gk * DSA_KC_TILES, j1 = j0 + DSA_KC_TILES < ntk ? j0 + DSA_KC_TILES : ntk;
        int64_t lo = j1, hi = j0; /* tiles of this panel that some query needs */
        for (int64_t i = 0; i < nq; i++) {
            if (r0[i] >= r1[i]) continue;
            const int64_t a = r0[i] / LA_IDX_VW > j0 ? r0[i] / LA_IDX_VW : j0;
            const int64_t b = la_idx_ntiles(r1[i]) < j1 ? la_idx_ntiles(r1[i]) : j1;
            if (a < b) {
                lo = a < lo ? a : lo;
                hi = b > hi ? b : hi;
            }
        }
        if (lo >= hi) continue;
        const int64_t s0 = lo * LA_IDX_VW, n = (hi * LA_IDX_VW < L ? hi * LA_IDX_VW : L) - s0;
        la_idx_pack_keys(k, s0, n, panel);
        for (int64_t i = 0; i < nq; i++) {
            if (r0[i] >= r1[i]) continue;
            int64_t a = r0[i] / LA_IDX_VW, b = la_idx_ntiles(r1[i]);
            if (a < lo) a = lo;
            if (b > hi) b = hi;
            if (a >= b) continue;
            la_idx_score_tiles(qT + i * dI * HIp, wp + i * HIp, HI, HIp, dI, panel + (a - lo) * tile, b - a,
                               sc + i * ldsc + a * LA_IDX_VW);
        }
    }
}

/* ---- the flat scan -------------------------------------------------------------- */
#define DSA_CHUNK_BYTES ((size_t)64 << 20) /* score rows per query chunk   */

la_status la_dsa_cpu(const la_idx_problem *P, int64_t topk, la_tensor *idx, la_tensor *scores,
                     la_context *ctx) {
    const int64_t T = P->T, HI = P->HI, dI = P->dI, L = P->L;
    const int64_t HIp = la_idx_hip(HI);
    const int64_t ntk = la_idx_ntiles(L);
    const int64_t Lpad = ntk * LA_IDX_VW;
    const int nth = la_ctx_threads(ctx);
    la_status st = LA_OK;

    /* query chunk: score rows + packed heads within the budget */
    const size_t per_q = (size_t)Lpad * 4u + (size_t)(dI + 1) * (size_t)HIp * 4u;
    int64_t Tc = (int64_t)(DSA_CHUNK_BYTES / per_q);
    if (Tc < DSA_QG) Tc = DSA_QG;
    if (Tc > T) Tc = T;

    /* decode-sized batches pack key panels where they are used (see score_rows_local) */
    const int local = T <= DSA_QG;
    size_t kt_bytes, sc_bytes, q_bytes, w_bytes, tk_bytes, o_bytes;
    if (local)
        LA_TRY(la_mul_size((size_t)nth, (size_t)(DSA_KC_TILES * LA_IDX_VW) * (size_t)dI * 4u, &kt_bytes,
                           "dsa: key panels"));
    else
        LA_TRY(la_mul_size((size_t)Lpad, (size_t)dI * 4u, &kt_bytes, "dsa: packed keys"));
    LA_TRY(la_mul_size((size_t)Tc, (size_t)Lpad * 4u, &sc_bytes, "dsa: score rows"));
    LA_TRY(la_mul_size((size_t)Tc, (size_t)dI * (size_t)HIp * 4u, &q_bytes, "dsa: packed queries"));
    LA_TRY(la_mul_size((size_t)Tc, (size_t)HIp * 4u, &w_bytes, "dsa: packed weights"));
    LA_TRY(la_mul_size((size_t)nth, la_topk_row_ws_bytes(L), &tk_bytes, "dsa: top-k workspace"));
    LA_TRY(la_mul_size((size_t)nth, (size_t)topk * 4u, &o_bytes, "dsa: top-k rows"));

    float *kT = la_ws_alloc(ctx, kt_bytes);
    float *sc = la_ws_alloc(ctx, sc_bytes);
    float *qT = la_ws_alloc(ctx, q_bytes);
    float *wp = la_ws_alloc(ctx, w_bytes);
    char *tkws = la_ws_alloc(ctx, tk_bytes);
    int32_t *orow = la_ws_alloc(ctx, o_bytes);
    if (!kT || !sc || !qT || !wp || !tkws || !orow) {
        st = LA_ERR_NOMEM;
        goto done;
    }

#pragma omp parallel for num_threads(nth) schedule(static)
    for (int64_t j = 0; j < (local ? 0 : ntk); j++) {
        const int64_t s0 = j * LA_IDX_VW;
        la_idx_pack_keys(P->k, s0, L - s0 < LA_IDX_VW ? L - s0 : LA_IDX_VW, kT + j * dI * LA_IDX_VW);
    }

    for (int64_t c0 = 0; c0 < T; c0 += Tc) {
        const int64_t nq = T - c0 < Tc ? T - c0 : Tc;
#pragma omp parallel for num_threads(nth) schedule(static)
        for (int64_t i = 0; i < nq; i++)
            la_idx_pack_queries(P->q, P->w, c0 + i, 1, HIp, qT + i * dI * HIp, wp + i * HIp);

        if (local)
            score_rows_local(qT, wp, HI, HIp, dI, nq, P->start + c0, P->end + c0, P->k, ntk, sc, Lpad, kT, nth);
        else
            la_idx_score_rows(qT, wp, HI, HIp, dI, nq, P->start + c0, P->end + c0, kT, ntk, sc, Lpad, nth);

        /* top-k of each row over its valid range, then the optional score rows */
#pragma omp parallel for num_threads(nth) schedule(dynamic, 1)
        for (int64_t i = 0; i < nq; i++) {
            const int tid = la_thread_id();
            const int64_t t = c0 + i, s0 = P->start[t], s1 = P->end[t];
            const float *row = sc + i * Lpad;
            int32_t *o = orow + (int64_t)tid * topk;
            la_topk_row(row + s0, s1 - s0, topk, o, tkws + (size_t)tid * la_topk_row_ws_bytes(L));
            int32_t *dst = (int32_t *)idx->data;
            for (int64_t j = 0; j < topk; j++)
                dst[la_off2(idx, t, j)] = o[j] >= 0 ? (int32_t)(o[j] + s0) : -1;
            if (scores && scores->dtype == LA_F32 && scores->nb[1] == 1) {
                float *srow = (float *)scores->data + t * scores->nb[0];
                for (int64_t s = 0; s < s0; s++) srow[s] = -INFINITY;
                memcpy(srow + s0, row + s0, sizeof(float) * (size_t)(s1 - s0));
                for (int64_t s = s1; s < L; s++) srow[s] = -INFINITY;
            } else if (scores) {
                for (int64_t s = 0; s < L; s++)
                    la_store_f32(scores, la_off2(scores, t, s), (s >= s0 && s < s1) ? row[s] : -INFINITY);
            }
        }
    }

done:
    la_ws_free(ctx, kT);
    la_ws_free(ctx, sc);
    la_ws_free(ctx, qT);
    la_ws_free(ctx, wp);
    la_ws_free(ctx, tkws);
    la_ws_free(ctx, orow);
    return st;
}
