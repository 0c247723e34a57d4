/* CPU kernels of the sparse family (SPEC §6–§8): the fused indexer scoring
 * kernel, row top-k, DSA / HISA / block-sparse drivers, sparse attention.
 * The public entry points (src/ops/{dsa,hisa,topk,index_cache,sparse_attn}.c)
 * validate every view (src/ops/sparse_validate.c), then call these.
 * Internal, not installed. */
#ifndef LA_SPARSE_CPU_H
#define LA_SPARSE_CPU_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- fused indexer scoring kernel ------------------------------------------
 * Keys are packed in tiles of LA_IDX_VW consecutive keys, each tile laid out
 * [dI][LA_IDX_VW] (key fastest), so one vector load gives one feature of
 * LA_IDX_VW keys. Queries are packed per query as qT [dI][HIp] (head fastest,
 * zero-padded to HIp = a multiple of LA_IDX_HR heads) and weights wp [HIp]
 * (zero-padded). The kernel keeps an LA_IDX_HR-heads x 2-tiles block of dot
 * products in registers, then folds it straight into the score vector with
 * w[h]·ReLU(.) (NaN propagated, as torch.relu), so the T·HI·L head scores
 * never exist in memory.
 * Every score I(t,s) is computed by the same instruction sequence whatever
 * the tile, block or range around it (dot product over d in order, then the
 * head sum in order h = 0..HIp-1), so DSA, HISA and the decode cache give
 * bit-identical scores for the same (t, s). */
#if defined(__AVX512F__)
#define LA_IDX_VW 16
#define LA_IDX_HR 8
#else
#define LA_IDX_VW 8
#define LA_IDX_HR 4
#endif

/* out[0 .. ntiles*VW) = scores of one packed query (HI heads, padded to
 * HIp) against ntiles consecutive packed key tiles starting at kT. */
void la_idx_score_tiles(const float *qT, const float *wp, int64_t HI, int64_t HIp, int64_t dI,
                        const float *kT, int64_t ntiles, float *out);

/* Score rows of nq packed queries (query i at qT + i·dI·HIp, wp + i·HIp)
 * against packed keys kT (ntk tiles): row i gets, at sc + i·ldsc + s, the
 * score of every key s of the tiles meeting [r0[i], r1[i]) (lanes outside
 * the range but inside those tiles are written too; nothing else is).
 * Parallel over (8 queries x 512 keys) work items. */
void la_idx_score_rows(const float *qT, const float *wp, int64_t HI, int64_t HIp, int64_t dI,
                       int64_t nq, const int64_t *r0, const int64_t *r1, const float *kT,
                       int64_t ntk, float *sc, int64_t ldsc, int nth);

/* Heads padded to the kernel's head group. */
static inline int64_t la_idx_hip(int64_t HI) {
    return (HI + LA_IDX_HR - 1) / LA_IDX_HR * LA_IDX_HR;
}
static inline int64_t la_idx_ntiles(int64_t n) { return (n + LA_IDX_VW - 1) / LA_IDX_VW; }

/* Pack queries [t0, t0+n) of q [T,HI,dI] and w [T,HI] (any float dtype and
 * strides) into qT (n x dI x HIp floats) and wp (n x HIp floats). */
void la_idx_pack_queries(const la_tensor *q, const la_tensor *w, int64_t t0, int64_t n,
                         int64_t HIp, float *qT, float *wp);
/* Pack key rows [s0, s0+n) of a [L,dI] view into la_idx_ntiles(n) tiles at
 * dst, zero-filling the lanes past n. */
void la_idx_pack_keys(const la_tensor *k, int64_t s0, int64_t n, float *dst);
/* Same from contiguous f32 rows (row stride ld). */
void la_idx_pack_rows(const float *rows, int64_t ld, int64_t n, int64_t dI, float *dst);

/* Block means (SPEC §7 step 1): kbar[b][d] = (Σ_{s in block b} k[s][d]) / count_b,
 * the sum taken in float in token order, so that a running sum kept by the
 * decode cache gives the same bits. kbar is [ceil(L/B)][dI]. */
void la_idx_pool_blocks(const la_tensor *k, int64_t B, float *kbar, int nthreads);
/* The one place the mean of a block is formed from its running sum. */
static inline float la_idx_block_mean(float sum, int64_t count) { return sum / (float)count; }

/* ---- row top-k ---------------------------------------------------------------
 * Top-k positions of x[0..n): descending score, ties to the lower position,
 * −inf and NaN are masked (never selected); writes min(k, #valid) positions to
 * out and −1 after them (out has k entries). Linear time: a sampled threshold
 * filters the row to ~1.3k candidates, which a stable LSD radix sort orders. */
size_t la_topk_row_ws_bytes(int64_t n);
void la_topk_row(const float *x, int64_t n, int64_t k, int32_t *out, void *ws);

/* ---- indexer drivers ---------------------------------------------------------- */
typedef struct la_idx_problem {
    const la_tensor *q, *k, *w; /* validated CPU views: q [T,HI,dI], k [L,dI], w [T,HI] */
    int64_t T, HI, dI, L;
    const int64_t *start, *end; /* resolved ranges [T] (0 <= start <= end <= L) */
} la_idx_problem;

/* idx int32 [T,topk] (any strides); scores float [T,L] or NULL. */
la_status la_dsa_cpu(const la_idx_problem *P, int64_t topk, la_tensor *idx, la_tensor *scores,
                     la_context *ctx);

typedef enum la_blk_mode { LA_BLK_HISA = 0, LA_BLK_SPARSE = 1 } la_blk_mode;
/* HISA (mode HISA: keep m blocks, refine to topk tokens) or the block-sparse
 * baseline (mode SPARSE: keep m = topk/B blocks, return their valid tokens).
 * kbar: precomputed block means [ceil(L/B)][dI] (decode cache) or NULL.
 * B <= max(L,1) (a larger B names the same single block: callers clamp). */
la_status la_hisa_cpu(const la_idx_problem *P, const float *kbar, int64_t B, int64_t m,
                      int64_t topk, la_blk_mode mode, la_tensor *idx, la_context *ctx);

/* ---- sparse attention ------------------------------------------------------- */
la_status la_sparse_attn_cpu(const la_tensor *q, const la_tensor *kv, const la_tensor *idx,
                             int64_t dv, float scale, la_tensor *out, la_tensor *lse,
                             la_context *ctx);

#ifdef __cplusplus
}
#endif
#endif
