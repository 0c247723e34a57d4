/* MHLA on the CPU: what the files of the CPU implementation share. Views
 * and options arrive validated from src/ops/mhla.c; plain float64 references
 * live in tests/cpu/test_mhla*.c. Internal: src/ops sees only mhla_cpu.h.
 *
 * Non-causal, per (batch, head), three phases:
 *   1. block summaries   S_b = Σ_{j∈b} k̃_j v_jᵀ, z_b = Σ_{j∈b} k̃_j     (GEMM per tile)
 *   2. mixing            [S̃ z̃] = W · [S z]        (one GEMM, M×M by M×(d·dv+d))
 *   3. outputs           q̃_t S̃_i, divided by q̃_t·z̃_i + eps         (GEMM per tile)
 * Cost O(N·d·dv + M²·d·dv), memory O(M·d·dv) per (batch, head); no N×N.
 * With f32 rows, a relu-family or identity φ and AVX-512, phases 1 and 3 run
 * as register-blocked kernels instead of GEMMs (mhla_avx512_cpu.c);
 * non-causal linear attention uses them too (W = ones).
 *
 * Causal (1-D chunks of C tokens): phase 1 as above per chunk, phase 2 a
 * strictly lower triangular mixing GEMM (row blocks skip the zero upper
 * part), phase 3 adds W[i,i] times the masked intra-chunk product.
 *
 * Decoding keeps the finished summaries and the open block (see
 * mhla_cpu.h), stored augmented as [S | z] (d×(dv+1)); a block's inter-block
 * mixture is formed once when it starts.
 *
 * Files: mhla_geom_cpu.c (block geometry, gathering rows with φ, storing
 * outputs, mixing, workspace plan), mhla_avx512_cpu.c (the AVX-512 kernels
 * and the fast phases 1 and 3), mhla_cpu.c (the non-causal forward),
 * mhla_causal_cpu.c (causal chunkwise), mhla_decode_cpu.c (decoding). */
#ifndef LA_MHLA_CPU_IMPL_H
#define LA_MHLA_CPU_IMPL_H

#include "cpu/mhla_cpu.h"

#include <stdint.h>
#include <string.h>

#define NC_TILE 512  /* token rows gathered per GEMM, non-causal               */
#define C_TILE 64    /* token rows per tile in the causal and decode paths     */
#define MIX_ROWS 64  /* rows of the causal mixing GEMM per task                */
#define MIX_COLS 1040 /* columns of the mixing GEMMs per task (multiple of 16) */
#define NC_HG 8 /* heads per fast task at most (per-thread scratch: NC_HG·Dv floats) */
#if defined(__AVX512F__)
#define NC_FAST 1 /* the AVX-512 kernels are built (mhla_avx512_cpu.c) */
#endif

/* Extent of one block: first coordinate and length on each axis. */
typedef struct blk_box {
    int64_t lo[3], len[3], size;
} blk_box;

/* Extent of block blk. */
static inline void la_mhla_block_box(const la_mhla_geom *g, int64_t blk, blk_box *bx) {
    int64_t beta[3];
    beta[2] = blk % g->g[2];
    beta[1] = (blk / g->g[2]) % g->g[1];
    beta[0] = blk / (g->g[2] * g->g[1]);
    bx->size = 1;
    for (int a = 0; a < 3; a++) {
        bx->lo[a] = la_mhla_block_lo(beta[a], g->n[a], g->g[a]);
        bx->len[a] = la_mhla_block_lo(beta[a] + 1, g->n[a], g->g[a]) - bx->lo[a];
        bx->size *= bx->len[a];
    }
}

/* Token indices (raster order of the whole grid) of positions [p0, p0+n) of
 * a block, positions counted in raster order inside the block. */
static inline void la_mhla_block_tokens(const la_mhla_geom *g, const blk_box *bx, int64_t p0,
                                        int64_t n, int64_t *idx) {
    /* coordinates of p0 once, then counters (no divisions per token) */
    int64_t iw = p0 % bx->len[2];
    int64_t ih = (p0 / bx->len[2]) % bx->len[1];
    int64_t it = p0 / (bx->len[2] * bx->len[1]);
    for (int64_t r = 0; r < n; r++) {
        idx[r] = ((bx->lo[0] + it) * g->n[1] + bx->lo[1] + ih) * g->n[2] + bx->lo[2] + iw;
        if (++iw == bx->len[2]) {
            iw = 0;
            if (++ih == bx->len[1]) ih = 0, it++;
        }
    }
}

/* Rows of head (b,h) of a [B,N,H,D] view into dst (row stride ld): row r is
 * token idx[r] (or n0 + r when idx is NULL). With feat, applies φ and then
 * the scale. */
void la_mhla_gather_rows(const la_tensor *t, int64_t b, int64_t h, const int64_t *idx,
                         int64_t n0, int64_t n, float *dst, int64_t ld, int feat,
                         la_feature f, float scale);
/* Values augmented with a column of ones: [v | 1], row stride Dv+1. */
void la_mhla_gather_values(const la_tensor *v, int64_t b, int64_t h, const int64_t *idx,
                           int64_t n0, int64_t n, float *dst);

enum { NORM_NONE = 0, NORM_COLUMN = 1, NORM_GIVEN = 2 };

/* Write output rows of head (b,h) from o (row stride ld), numerator in
 * columns [0, Dv). NORM_COLUMN divides by (o[Dv] + eps) (the augmented form
 * of the decoder, q̃·z̃ in column Dv), NORM_GIVEN by (den[r] + eps),
 * NORM_NONE writes the numerator. */
void la_mhla_store_rows(la_tensor *out, int64_t b, int64_t h, const int64_t *idx, int64_t n0,
                        int64_t n, const float *o, int64_t ld, int mode, const float *den,
                        float eps);

/* Mixing [Hw, M, M] (any float dtype, any strides) into f32. When tril,
 * keep only the strictly lower part (b < i) of the leading m×m corner, and
 * put the diagonal in diag[Hw, m]. */
void la_mhla_load_mixing(const la_tensor *w, int64_t m, int tril, float *dst, float *diag);

/* Round an element count up to 16 floats (64 bytes). */
static inline int64_t rup16(int64_t x) { return (x + 15) & ~(int64_t)15; }

/* A list of sub-buffers carved out of one allocation, each 64-byte aligned;
 * sizes are overflow-checked. */
typedef struct ws_plan {
    size_t total;
    la_status st;
} ws_plan;

/* Reserve count·elem bytes (64-byte aligned) and return their offset. */
size_t la_mhla_ws_take(ws_plan *pl, size_t count, size_t elem, const char *what);
/* count = a·b·c·d elements, overflow-checked. */
size_t la_mhla_ws_count(ws_plan *pl, int64_t a, int64_t b, int64_t c, int64_t d,
                        const char *what);

/* Every phase of a head depends only on that head's own summaries. When the
 * heads alone balance the threads, one task per head runs all its phases:
 * no barrier between phases (a barrier costs a whole time slice when another
 * process holds the other core). Otherwise each phase is spread over blocks
 * and column tiles, with a barrier between phases. */
static inline int whole_heads(int64_t BH, int nt) {
    return BH % nt == 0 || BH >= 4 * (int64_t)nt;
}

typedef struct nc_job {
    const la_mhla_params *p;
    const la_mhla_geom *geom;
    const la_tensor *q, *k, *v;
    la_tensor *out;
    int64_t H, D, Dv, SE, M, Hw, L, tile;
    int rv, mode;
    int fast; /* the AVX-512 kernels apply (la_mhla_nc_fast_ok) */
    /* per block, S_b [D,Dv] followed by z_b [D] (SE = D·Dv + D floats), so
     * that the mixing is one GEMM over whole rows [S_b z_b] */
    float *S, *St, *W, *R, *Rt; /* [B,H,M,SE] ×2, [Hw,M,M], [B,H,M,L] ×2 */
} nc_job;

/* Per-thread tiles: q̃, k̃ [tile, D], values and outputs [tile, Dv] (causal:
 * [tile, Dv+1]), the masked product [tile, tile] (causal), denominators,
 * token indices. */
typedef struct tiles {
    float *q, *k, *v, *o, *a, *den;
    int64_t *idx;
} tiles;

/* Dot product with 8 independent partial sums: a plain float reduction is
 * one dependent chain (the compiler may not reorder it without -ffast-math). */
static inline float dot8(const float *a, const float *b, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static inline float sum8(const float *a, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i];
    return s;
}

/* Rows n0.. of head (b,h) as a plain f32 matrix with row stride nb[1], when
 * the view allows (f32, unit last stride): GEMMs then read or write the
 * tensor in place instead of through a packed copy. NULL otherwise. */
static inline float *direct_rows(const la_tensor *t, int64_t b, int64_t h, int64_t n0) {
    if (t->dtype != LA_F32 || t->nb[3] != 1) return NULL;
    return (float *)t->data + b * t->nb[0] + n0 * t->nb[1] + h * t->nb[2];
}

/* Whether every block is one contiguous run of tokens (a 1-D grid). */
static inline int runs_are_blocks(const la_mhla_geom *g) { return g->n[0] == 1 && g->n[1] == 1; }

/* released_vision: r_b[w] = q̃_{b,w}·z_b for the positions w of block task. */
void la_mhla_nc_rv_terms(const nc_job *j, int64_t task, const blk_box *bx, const float *zb,
                         tiles *w);

#ifdef NC_FAST
/* Phases 1 and 3 of the non-causal forward through the AVX-512 kernels, for
 * block blk of batch b and heads [h0, h1) (mhla_avx512_cpu.c). */
int la_mhla_nc_fast_ok(la_feature f, const la_tensor *q, const la_tensor *k,
                       const la_tensor *v);
void la_mhla_nc_summary_fast(const nc_job *j, int64_t b, int64_t blk, int64_t h0, int64_t h1,
                             tiles *w);
void la_mhla_nc_output_fast(const nc_job *j, int64_t b, int64_t blk, int64_t h0, int64_t h1,
                            tiles *w);
#endif

#endif
