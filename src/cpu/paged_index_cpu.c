/* Paged indexer key cache on the CPU: row storage (fp8 e4m3 with a per-token
 * scale, bf16, f32) and the batched paged DSA / HISA drivers.
 *
 * The drivers gather each sequence's keys through its block-table row into a
 * contiguous f32 panel (the dequantized values the cache holds) and run the
 * dense kernels (la_dsa_cpu, la_hisa_cpu) on it, so a paged call equals the
 * dense indexers on the gathered keys bit for bit. HISA takes the cache's
 * pooled sums as its block means when the cache keeps them: the sums were
 * added in position order in fp32, as la_idx_pool_blocks adds them, and the
 * mean is formed by la_idx_block_mean in both, so the bits agree. */
#include <stdlib.h>
#include <string.h>

#include "cpu/paged_index_cpu.h"

void la_paged_store_row(struct la_paged_index_cache *c, int64_t slot, const float *row,
                        float *stored) {
    const int64_t ps = c->p.page_size, dI = c->p.head_dim;
    const int64_t page = slot / ps, off = slot % ps;
    unsigned char *pg = c->pages + page * c->page_bytes;
    switch (c->p.dtype) {
    case LA_FP8_E4M3: {
        float amax = 0.f;
        for (int64_t d = 0; d < dI; d++) amax = fmaxf(amax, fabsf(row[d]));
        const float scale = amax > 0.f ? amax / 448.f : 1.f;
        uint8_t *v = pg + off * dI;
        for (int64_t d = 0; d < dI; d++) {
            v[d] = la_f32_to_e4m3(row[d] / scale);
            stored[d] = la_e4m3_to_f32(v[d]) * scale;
        }
        memcpy(pg + ps * dI + off * 4, &scale, 4);
        break;
    }
    case LA_BF16: {
        uint16_t *v = (uint16_t *)pg + off * dI;
        for (int64_t d = 0; d < dI; d++) {
            v[d] = la_f32_to_bf16(row[d]);
            stored[d] = la_bf16_to_f32(v[d]);
        }
        break;
    }
    default: {
        float *v = (float *)pg + off * dI;
        for (int64_t d = 0; d < dI; d++) stored[d] = v[d] = row[d];
        break;
    }
    }
}

void la_paged_load_row(const struct la_paged_index_cache *c, int64_t slot, float *dst) {
    const int64_t ps = c->p.page_size, dI = c->p.head_dim;
    const int64_t page = slot / ps, off = slot % ps;
    const unsigned char *pg = c->pages + page * c->page_bytes;
    switch (c->p.dtype) {
    case LA_FP8_E4M3: {
        float scale;
        memcpy(&scale, pg + ps * dI + off * 4, 4);
        const uint8_t *v = pg + off * dI;
        for (int64_t d = 0; d < dI; d++) dst[d] = c->e4m3[v[d]] * scale;
        break;
    }
    case LA_BF16: {
        const uint16_t *v = (const uint16_t *)pg + off * dI;
        for (int64_t d = 0; d < dI; d++) dst[d] = la_bf16_to_f32(v[d]);
        break;
    }
    default: memcpy(dst, (const float *)pg + off * dI, sizeof(float) * (size_t)dI); break;
    }
}

/* One sequence: gather, run the dense driver into a private [nq,topk] block,
 * scatter its rows to idx. */
static la_status run_seq(const struct la_paged_index_cache *c, const la_index_params *p, int hisa,
                         const la_tensor *q, const la_tensor *w, const la_paged_seq *S, int64_t s,
                         int return_slots, la_tensor *idx, la_context *ctx) {
    const int64_t ps = c->p.page_size, dI = c->p.head_dim, HI = q->ne[1], topk = p->topk;
    const int64_t L = S->len, nq = S->nq;
    int32_t *dst = (int32_t *)idx->data;
    if (nq == 0) return LA_OK;
    if (L == 0) { /* nothing cached: every query gets padding */
        for (int64_t j = 0; j < nq; j++)
            for (int64_t i = 0; i < topk; i++) dst[la_off2(idx, S->rows[j], i)] = -1;
        return LA_OK;
    }
    size_t kb, qb, ib;
    LA_TRY(la_mul_size((size_t)L, (size_t)dI * 4u, &kb, "paged: gathered keys"));
    LA_TRY(la_mul_size((size_t)nq, (size_t)(HI * dI + HI) * 4u, &qb, "paged: gathered queries"));
    LA_TRY(la_mul_size((size_t)nq, (size_t)topk * 4u, &ib, "paged: selection rows"));
    float *keys = la_ws_alloc(ctx, kb);
    float *qw = la_ws_alloc(ctx, qb);
    int32_t *sel = la_ws_alloc(ctx, ib);
    int64_t *rng = la_ws_alloc(ctx, (size_t)nq * 2 * sizeof(int64_t));
    float *kbar = NULL;
    la_status st = LA_OK;
    if (!keys || !qw || !sel || !rng) {
        st = la_err(LA_ERR_NOMEM, "paged: out of memory gathering sequence %lld (%lld keys)", (long long)s,
                    (long long)L);
        goto done;
    }
    const int nth = la_ctx_threads(ctx);
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int64_t t = 0; t < L; t++)
        la_paged_load_row(c, (int64_t)S->pages[t / ps] * ps + t % ps, keys + t * dI);
    float *qg = qw, *wg = qw + nq * HI * dI;
    for (int64_t j = 0; j < nq; j++)
        for (int64_t h = 0; h < HI; h++) {
            for (int64_t d = 0; d < dI; d++)
                qg[(j * HI + h) * dI + d] = q->dtype == LA_FP8_E4M3
                                                ? c->e4m3[((const uint8_t *)q->data)[la_off3(q, S->rows[j], h, d)]]
                                                : la_load_f32(q, la_off3(q, S->rows[j], h, d));
            wg[j * HI + h] = la_load_f32(w, la_off2(w, S->rows[j], h));
        }
    for (int64_t j = 0; j < nq; j++) {
        int64_t e = L - nq + j + 1;
        rng[j] = 0;
        rng[nq + j] = e < 0 ? 0 : e;
    }
    la_tensor kt, qt, wt, it;
    const int64_t kne[2] = {L, dI}, qne[3] = {nq, HI, dI}, wne[2] = {nq, HI}, ine[2] = {nq, topk};
    la_tensor_init(&kt, keys, LA_F32, LA_DEVICE_CPU, 2, kne);
    la_tensor_init(&qt, qg, LA_F32, LA_DEVICE_CPU, 3, qne);
    la_tensor_init(&wt, wg, LA_F32, LA_DEVICE_CPU, 2, wne);
    la_tensor_init(&it, sel, LA_I32, LA_DEVICE_CPU, 2, ine);
    la_idx_problem P = {&qt, &kt, &wt, nq, HI, dI, L, rng, rng + nq};
    if (!hisa) {
        st = la_dsa_cpu(&P, topk, &it, NULL, ctx);
    } else {
        const int64_t B = p->block < L ? p->block : L; /* as la_hisa_indexer clamps it */
        if (c->psum) {
            const int64_t nb = (L + B - 1) / B;
            kbar = la_ws_alloc(ctx, (size_t)nb * (size_t)dI * 4u);
            if (!kbar) {
                st = la_err(LA_ERR_NOMEM, "paged: out of memory for the block means of sequence %lld",
                            (long long)s);
                goto done;
            }
            const float *sum = c->psum + s * c->max_blocks * dI;
            const int32_t *cnt = c->pcount + s * c->max_blocks;
            for (int64_t b = 0; b < nb; b++)
                for (int64_t d = 0; d < dI; d++)
                    kbar[b * dI + d] = la_idx_block_mean(sum[b * dI + d], cnt[b]);
        }
        st = la_hisa_cpu(&P, kbar, B, p->block_topk, topk, LA_BLK_HISA, &it, ctx);
    }
    if (st != LA_OK) goto done;
    for (int64_t j = 0; j < nq; j++)
        for (int64_t i = 0; i < topk; i++) {
            const int32_t pos = sel[j * topk + i];
            int32_t v = pos;
            if (pos >= 0 && return_slots) v = (int32_t)((int64_t)S->pages[pos / ps] * ps + pos % ps);
            dst[la_off2(idx, S->rows[j], i)] = v;
        }
done:
    la_ws_free(ctx, keys);
    la_ws_free(ctx, qw);
    la_ws_free(ctx, sel);
    la_ws_free(ctx, rng);
    la_ws_free(ctx, kbar);
    return st;
}

la_status la_paged_topk_cpu(const struct la_paged_index_cache *c, const la_index_params *p,
                            int hisa, const la_tensor *q, const la_tensor *w,
                            const la_paged_seq *seqs, int64_t nseq, int return_slots,
                            la_tensor *idx, la_context *ctx) {
    for (int64_t s = 0; s < nseq; s++)
        LA_TRY(run_seq(c, p, hisa, q, w, &seqs[s], s, return_slots, idx, ctx));
    return LA_OK;
}
