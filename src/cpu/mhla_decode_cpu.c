/* MHLA on the CPU, the decoding state (SPEC §5.5): appending tokens to the
 * finished summaries and the open block (struct la_mhla_state in
 * mhla_cpu.h), stored augmented as [S | z]. */
#include "cpu/mhla_cpu_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- one tile of queries against its own open block ------------------------
 * ot[na, E] += w_ii · mask(q̃ k̃ᵀ) [v | 1] over the key rows of the block that
 * precede or equal each query, given as tiles [k0, k0+nk) of the same rows
 * source. */
static void masked_tile(const float *qt, int64_t na, const float *kt, int64_t nk,
                        const float *vt, int64_t D, int64_t E, int diag, float wii, float *A,
                        float *ot) {
    la_sgemm(false, true, na, nk, D, 1.0f, qt, D, kt, D, 0.0f, A, nk);
    if (diag) /* same first row: key s is visible to query r iff s <= r */
        for (int64_t r = 0; r < na; r++)
            for (int64_t s = r + 1; s < nk; s++) A[r * nk + s] = 0.0f;
    la_sgemm(false, false, na, E, nk, wii, A, nk, vt, E, 1.0f, ot, E);
}

/* ---- decoding --------------------------------------------------------------
 * Append n tokens of head (b,h), starting at token position pos0. Tokens are
 * taken in segments that stay inside one block; a segment starting a block
 * first closes the previous block (P → S) and forms the new block's mixture
 * once. Inside a segment: out = q̃·(mix + w_ii P) + w_ii·mask(q̃k̃ᵀ)[v|1], then
 * P += k̃ᵀ[v|1]. One token at a time takes a plain-loop path. */
static void state_append_head(la_mhla_state *st, int64_t b, int64_t h, int64_t pos0,
                              const la_tensor *q, const la_tensor *k, const la_tensor *v,
                              la_tensor *out, float *ws) {
    const int64_t C = st->p.chunk, D = st->D, Dv = st->Dv, E = Dv + 1, SE = D * E, M = st->M;
    const int64_t bh = b * st->H + h;
    const int64_t n = q->ne[1];
    const int mode = st->p.normalize == LA_MHLA_NORM_PER_QUERY ? NORM_COLUMN : NORM_NONE;
    float *Sbh = st->S + bh * M * SE, *P = st->P + bh * SE, *mix = st->mix + bh * SE;
    float *T = st->T + bh * SE;
    const float *W = st->W + (st->Hw == 1 ? 0 : h) * M * M;
    const unsigned char *rowc = st->row_const + (st->Hw == 1 ? 0 : h) * M;
    const int64_t tile = C < C_TILE ? C : C_TILE;
    float *qt = ws, *kt = qt + tile * D, *vt = kt + tile * D, *ot = vt + tile * E;
    float *A = ot + tile * E;

    int64_t pos = pos0, r = 0;
    while (r < n) {
        const int64_t blk = pos / C, off = pos % C;
        if (off == 0) {
            /* close the previous block: keep its summary, add it to the total */
            if (blk > 0) {
                memcpy(Sbh + (blk - 1) * SE, P, (size_t)SE * sizeof(float));
                for (int64_t x = 0; x < SE; x++) T[x] += P[x];
            }
            /* the new block's mixture, formed once */
            if (blk == 0) {
                memset(mix, 0, (size_t)SE * sizeof(float));
            } else if (rowc[blk]) { /* W[blk,b] = c for all b < blk: c·Σ S_b, O(d·dv) */
                const float c = W[blk * M];
                for (int64_t x = 0; x < SE; x++) mix[x] = c * T[x];
            } else {
                /* O(blk·d·dv): a stream over the finished summaries (axpy per
                 * block keeps mix in L1; a 1-row GEMM would pack all of S) */
                memset(mix, 0, (size_t)SE * sizeof(float));
                for (int64_t b2 = 0; b2 < blk; b2++) {
                    const float wb = W[blk * M + b2];
                    const float *Sb = Sbh + b2 * SE;
                    for (int64_t x = 0; x < SE; x++) mix[x] += wb * Sb[x];
                }
            }
            memset(P, 0, (size_t)SE * sizeof(float));
        }
        const int64_t seg = C - off < n - r ? C - off : n - r;
        const float wii = W[blk * M + blk];
        for (int64_t a0 = 0; a0 < seg; a0 += tile) {
            const int64_t na = seg - a0 < tile ? seg - a0 : tile;
            const int64_t row = r + a0; /* row in the input/output views */
            la_mhla_gather_rows(q, b, h, NULL, row, na, qt, D, 1, st->p.feature, st->p.scale_q);
            la_mhla_gather_rows(k, b, h, NULL, row, na, kt, D, 1, st->p.feature, 1.0f);
            la_mhla_gather_values(v, b, h, NULL, row, na, vt);
            if (na == 1) {
                /* decode: P += k̃ [v|1]ᵀ, then o = q̃ (mix + w_ii P) */
                for (int64_t d = 0; d < D; d++) {
                    const float kd = kt[d];
                    float *Pd = P + d * E;
                    for (int64_t j = 0; j < E; j++) Pd[j] += kd * vt[j];
                }
                for (int64_t j = 0; j < E; j++) ot[j] = 0.0f;
                for (int64_t d = 0; d < D; d++) {
                    const float qd = qt[d];
                    const float *Md = mix + d * E, *Pd = P + d * E;
                    for (int64_t j = 0; j < E; j++) ot[j] += qd * (Md[j] + wii * Pd[j]);
                }
            } else {
                la_sgemm(false, false, na, E, D, 1.0f, qt, D, mix, E, 0.0f, ot, E);
                la_sgemm(false, false, na, E, D, wii, qt, D, P, E, 1.0f, ot, E);
                masked_tile(qt, na, kt, na, vt, D, E, 1, wii, A, ot);
                la_sgemm(true, false, D, E, na, 1.0f, kt, D, vt, E, 1.0f, P, E);
            }
            la_mhla_store_rows(out, b, h, NULL, row, na, ot, E, mode, NULL, st->p.eps);
        }
        r += seg;
        pos += seg;
    }
}

la_status la_mhla_state_append_cpu(la_mhla_state *st, const la_tensor *q, const la_tensor *k,
                                   const la_tensor *v, la_tensor *out, la_context *ctx) {
    const int64_t B = st->B, H = st->H, D = st->D, E = st->Dv + 1, C = st->p.chunk;
    const int64_t n = q->ne[1];
    const int64_t tile = C < C_TILE ? C : C_TILE;
    const int nt = la_ctx_threads(ctx);
    ws_plan pl = {0, LA_OK};
    size_t per = la_mhla_ws_count(&pl, tile, 2 * D + 2 * E + tile, (int64_t)sizeof(float), 1,
                          "mhla state: tiles");
    size_t oT = la_mhla_ws_take(&pl, (size_t)nt, per, "mhla state: per-thread tiles");
    if (pl.st != LA_OK) return pl.st;
    char *ws = (char *)la_ws_alloc(ctx, pl.total);
    if (!ws) return la_err(LA_ERR_NOMEM, "mhla state: cannot allocate %zu bytes", pl.total);

    /* Threads only for many heads or tokens: ~4·d·(dv+1) flops per token and
     * head, above 8e6 flops of work. Below that, waking a thread team costs more
     * than it saves (a whole time slice when another process shares the
     * cores). The block-start mixture is a memory-bound stream that a second
     * core speeds up little, so it does not count. */
    const int64_t pos0 = st->len;
    const double work = (double)B * H * D * E * 4.0 * (double)n;
    const int use = (B * H > 1 && work > 8e6) ? nt : 1;
#pragma omp parallel for num_threads(use) schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * H; bh++)
        state_append_head(st, bh / H, bh % H, pos0, q, k, v, out,
                          (float *)(ws + oT + (size_t)la_thread_id() * per));
    st->len += n;
    la_ws_free(ctx, ws);
    return LA_OK;
}
