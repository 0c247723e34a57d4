/* HISA indexer and the block-sparse baseline on the CPU (SPEC §7).
 *
 *   1. block means k̄_b over absolute blocks of B tokens (ragged tail: true count);
 *   2. block scores I_blk(t,b) with the DSA kernel on the packed k̄, over the
 *      blocks meeting [start_t, end_t); the first and last of them are forced
 *      by giving them +inf before the row top-k, whose tie rule then keeps the
 *      lower one when only one may be kept;
 *   3. HISA: token scores of the kept blocks ∩ range with the same kernel, top-k.
 *      Block-sparse: the kept blocks' valid tokens, no token scoring.
 *
 * Stage 3 is organised by key block, not by query: the kept (query, block)
 * pairs of a query chunk are bucketed per block, each block's keys are packed
 * once per work item (≤ 16 queries) and every query that kept it runs over
 * the packed block while it sits in L1/L2. The sink block, kept by every
 * query, is split over several work items.
 *
 * Query t's candidates live in a row of m·B slots: slot p holds the block of
 * t's p-th kept block in ascending block order, so candidate order equals
 * token order and the row top-k's tie rule (lower position) is the token tie
 * rule. Positions outside the range or past L hold −inf (masked). */
#include <stdint.h>
#include <stdlib.h>

#include "cpu/sparse_cpu.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define HISA_QG 16                          /* queries per stage-3 work item */
#define HISA_CHUNK_BYTES ((size_t)64 << 20) /* per query chunk               */

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}


typedef struct stage3_item {
    int64_t b;      /* key block                         */
    int64_t p0, p1; /* range in the block's pair list    */
} stage3_item;

la_status la_hisa_cpu(const la_idx_problem *P, const float *kbar_pre, int64_t B, int64_t m,
                      int64_t topk, la_blk_mode mode, la_tensor *idx, la_context *ctx) {
    const int64_t T = P->T, HI = P->HI, dI = P->dI, L = P->L;
    const int64_t HIp = la_idx_hip(HI);
    const int64_t nb = (L + B - 1) / B;
    const int64_t ntb = la_idx_ntiles(nb);
    const int64_t nbpad = ntb * LA_IDX_VW;
    const int nth = la_ctx_threads(ctx);
    /* blocks kept per query */
    const int64_t mk = m < nb ? m : (nb > 0 ? nb : 1);
    const int64_t ncand = mode == LA_BLK_HISA ? mk * B : 0; /* candidate slots per query */
    const int64_t ntile_blk = la_idx_ntiles(B);
    la_status st = LA_OK;

    const size_t per_q = (size_t)(nbpad + ncand + mk + (dI + 1) * HIp) * 4u;
    int64_t Tc = (int64_t)(HISA_CHUNK_BYTES / per_q);
    if (Tc < HISA_QG) Tc = HISA_QG;
    if (Tc > T) Tc = T;

    const int64_t topk_n = nb > ncand ? nb : ncand; /* longest row given to the top-k */
    size_t kbar_b, kbt_b, bsc_b, cand_b, q_b, w_b, kept_b, tk_b, o_b, pack_b;
    LA_TRY(la_mul_size((size_t)(nb > 0 ? nb : 1), (size_t)dI * 4u, &kbar_b, "hisa: block means"));
    LA_TRY(la_mul_size((size_t)(nbpad > 0 ? nbpad : 1), (size_t)dI * 4u, &kbt_b, "hisa: packed block means"));
    LA_TRY(la_mul_size((size_t)Tc, (size_t)(nbpad > 0 ? nbpad : 1) * 4u, &bsc_b, "hisa: block scores"));
    LA_TRY(la_mul_size((size_t)Tc, (size_t)(ncand > 0 ? ncand : 1) * 4u, &cand_b, "hisa: candidate scores"));
    LA_TRY(la_mul_size((size_t)Tc, (size_t)dI * (size_t)HIp * 4u, &q_b, "hisa: packed queries"));
    LA_TRY(la_mul_size((size_t)Tc, (size_t)HIp * 4u, &w_b, "hisa: packed weights"));
    LA_TRY(la_mul_size((size_t)Tc, (size_t)mk * 4u, &kept_b, "hisa: kept blocks"));
    LA_TRY(la_mul_size((size_t)nth, la_topk_row_ws_bytes(topk_n > 0 ? topk_n : 1), &tk_b, "hisa: top-k workspace"));
    LA_TRY(la_mul_size((size_t)nth, (size_t)(topk > mk ? topk : mk) * 4u, &o_b, "hisa: top-k rows"));
    LA_TRY(la_mul_size((size_t)nth, (size_t)ntile_blk * (size_t)LA_IDX_VW * (size_t)(dI + 1) * 4u, &pack_b,
                       "hisa: block panels"));

    float *kbar_own = kbar_pre ? NULL : la_ws_alloc(ctx, kbar_b);
    float *kbT = la_ws_alloc(ctx, kbt_b);
    float *bsc = la_ws_alloc(ctx, bsc_b);
    float *cand = la_ws_alloc(ctx, cand_b);
    float *qT = la_ws_alloc(ctx, q_b);
    float *wp = la_ws_alloc(ctx, w_b);
    int32_t *kept = la_ws_alloc(ctx, kept_b);
    int64_t *nkept = la_ws_alloc(ctx, (size_t)Tc * sizeof(int64_t));
    int64_t *br0 = la_ws_alloc(ctx, (size_t)Tc * sizeof(int64_t) * 2);
    char *tkws = la_ws_alloc(ctx, tk_b);
    int32_t *orow = la_ws_alloc(ctx, o_b);
    float *packs = la_ws_alloc(ctx, pack_b);
    int64_t *bcount = la_ws_alloc(ctx, (size_t)(nb + 1) * sizeof(int64_t));
    int32_t *pairs = mode == LA_BLK_HISA ? la_ws_alloc(ctx, kept_b * 2) : NULL;
    stage3_item *items = mode == LA_BLK_HISA
                             ? la_ws_alloc(ctx, ((size_t)Tc * (size_t)mk / HISA_QG + (size_t)nb + 1) *
                                                    sizeof(stage3_item))
                             : NULL;
    if ((!kbar_pre && !kbar_own) || !kbT || !bsc || !cand || !qT || !wp || !kept || !nkept || !br0 ||
        !tkws || !orow || !packs || !bcount || (mode == LA_BLK_HISA && (!pairs || !items))) {
        st = LA_ERR_NOMEM;
        goto done;
    }
    int64_t *br1 = br0 + Tc;
    const float *kbar = kbar_pre;
    if (!kbar_pre && nb > 0) {
        la_idx_pool_blocks(P->k, B, kbar_own, nth);
        kbar = kbar_own;
    }
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int64_t j = 0; j < ntb; j++) {
        const int64_t b0 = j * LA_IDX_VW, n = nb - b0 < LA_IDX_VW ? nb - b0 : LA_IDX_VW;
        la_idx_pack_rows(kbar + b0 * dI, dI, n, dI, kbT + j * dI * LA_IDX_VW);
    }

    for (int64_t c0 = 0; c0 < T; c0 += Tc) {
        const int64_t nq = T - c0 < Tc ? T - c0 : Tc;
        for (int64_t i = 0; i < nq; i++) {
            const int64_t s0 = P->start[c0 + i], s1 = P->end[c0 + i];
            br0[i] = s0 < s1 ? s0 / B : 0;
            br1[i] = s0 < s1 ? (s1 + B - 1) / B : 0;
        }
#pragma omp parallel for num_threads(nth) schedule(static)
        for (int64_t i = 0; i < nq; i++)
            la_idx_pack_queries(P->q, P->w, c0 + i, 1, HIp, qT + i * dI * HIp, wp + i * HIp);

        /* stage 2: block scores, forced blocks, top-m */
        la_idx_score_rows(qT, wp, HI, HIp, dI, nq, br0, br1, kbT, ntb, bsc, nbpad, nth);
#pragma omp parallel for num_threads(nth) schedule(dynamic, 4)
        for (int64_t i = 0; i < nq; i++) {
            const int tid = la_thread_id();
            const int64_t nblk = br1[i] - br0[i];
            int32_t *kr = kept + i * mk;
            nkept[i] = 0;
            if (nblk <= 0) continue;
            float *row = bsc + i * nbpad + br0[i];
            row[0] = INFINITY;        /* attention sink: first block meeting the range */
            row[nblk - 1] = INFINITY; /* local block: last one */
            const int64_t want = mk < nblk ? mk : nblk;
            int32_t *o = orow + (int64_t)tid * (topk > mk ? topk : mk);
            la_topk_row(row, nblk, want, o, tkws + (size_t)tid * la_topk_row_ws_bytes(topk_n));
            int64_t n = 0;
            for (int64_t j = 0; j < want && o[j] >= 0; j++) kr[n++] = (int32_t)(o[j] + br0[i]);
            nkept[i] = n;
            if (mode == LA_BLK_HISA) qsort(kr, (size_t)n, sizeof(int32_t), cmp_i32);
        }

        if (mode == LA_BLK_SPARSE) {
            /* kept blocks in rank order (forced first, then by block score, ties to
             * the lower block), each block's valid tokens ascending, −1 padding */
#pragma omp parallel for num_threads(nth) schedule(static)
            for (int64_t i = 0; i < nq; i++) {
                const int64_t t = c0 + i, s0 = P->start[t], s1 = P->end[t];
                int32_t *dst = (int32_t *)idx->data;
                int64_t j = 0;
                for (int64_t p = 0; p < nkept[i]; p++) {
                    const int64_t b = kept[i * mk + p];
                    const int64_t a = b * B > s0 ? b * B : s0;
                    const int64_t e = (b + 1) * B < s1 ? (b + 1) * B : s1;
                    for (int64_t s = a; s < e && j < topk; s++) dst[la_off2(idx, t, j++)] = (int32_t)s;
                }
                for (; j < topk; j++) dst[la_off2(idx, t, j)] = -1;
            }
            continue;
        }

        /* stage 3: bucket the kept (query, slot) pairs by block */
        for (int64_t b = 0; b <= nb; b++) bcount[b] = 0;
        for (int64_t i = 0; i < nq; i++)
            for (int64_t p = 0; p < nkept[i]; p++) bcount[kept[i * mk + p] + 1]++;
        for (int64_t b = 0; b < nb; b++) bcount[b + 1] += bcount[b];
        int64_t nitems = 0;
        for (int64_t b = 0; b < nb; b++)
            for (int64_t p = bcount[b]; p < bcount[b + 1]; p += HISA_QG) {
                items[nitems].b = b;
                items[nitems].p0 = p;
                items[nitems].p1 = p + HISA_QG < bcount[b + 1] ? p + HISA_QG : bcount[b + 1];
                nitems++;
            }
        for (int64_t i = 0; i < nq; i++)
            for (int64_t p = 0; p < nkept[i]; p++) {
                const int64_t b = kept[i * mk + p];
                const int64_t at = bcount[b]++; /* fill; bcount[b] ends at the old bcount[b+1] */
                pairs[2 * at] = (int32_t)i;
                pairs[2 * at + 1] = (int32_t)p;
            }

#pragma omp parallel for num_threads(nth) schedule(dynamic, 1)
        for (int64_t it = 0; it < nitems; it++) {
            const int tid = la_thread_id();
            const int64_t b = items[it].b, kb0 = b * B;
            const int64_t cnt = L - kb0 < B ? L - kb0 : B;
            float *panel = packs + (size_t)tid * (size_t)ntile_blk * LA_IDX_VW * (size_t)(dI + 1);
            float *tmp = panel + ntile_blk * LA_IDX_VW * dI;
            la_idx_pack_keys(P->k, kb0, cnt, panel);
            for (int64_t p = items[it].p0; p < items[it].p1; p++) {
                const int64_t i = pairs[2 * p], slot = pairs[2 * p + 1];
                const int64_t s0 = P->start[c0 + i], s1 = P->end[c0 + i];
                la_idx_score_tiles(qT + i * dI * HIp, wp + i * HIp, HI, HIp, dI, panel, la_idx_ntiles(cnt), tmp);
                float *cr = cand + i * ncand + slot * B;
                for (int64_t j = 0; j < B; j++) {
                    const int64_t s = kb0 + j;
                    cr[j] = (j < cnt && s >= s0 && s < s1) ? tmp[j] : -INFINITY;
                }
            }
        }

        /* token top-k over each query's candidate row */
#pragma omp parallel for num_threads(nth) schedule(dynamic, 4)
        for (int64_t i = 0; i < nq; i++) {
            const int tid = la_thread_id();
            const int64_t t = c0 + i;
            int32_t *o = orow + (int64_t)tid * (topk > mk ? topk : mk);
            la_topk_row(cand + i * ncand, nkept[i] * B, topk, o,
                        tkws + (size_t)tid * la_topk_row_ws_bytes(topk_n));
            int32_t *dst = (int32_t *)idx->data;
            for (int64_t j = 0; j < topk; j++) {
                const int32_t c = o[j];
                dst[la_off2(idx, t, j)] = c >= 0 ? (int32_t)(kept[i * mk + c / B] * B + c % B) : -1;
            }
        }
    }

done:
    la_ws_free(ctx, kbar_own);
    la_ws_free(ctx, kbT);
    la_ws_free(ctx, bsc);
    la_ws_free(ctx, cand);
    la_ws_free(ctx, qT);
    la_ws_free(ctx, wp);
    la_ws_free(ctx, kept);
    la_ws_free(ctx, nkept);
    la_ws_free(ctx, br0);
    la_ws_free(ctx, tkws);
    la_ws_free(ctx, orow);
    la_ws_free(ctx, packs);
    la_ws_free(ctx, bcount);
    la_ws_free(ctx, pairs);
    la_ws_free(ctx, items);
    return st;
}
