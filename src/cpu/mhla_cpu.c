/* MHLA on the CPU (SPEC §5). Views and options arrive validated from
 * src/ops/mhla.c. Plain float64 references live in tests/cpu/test_mhla*.c.
 *
 * Non-causal, per (batch, head), three phases:
 *   1. block summaries   S_b = Σ_{j∈b} k̃_j v_jᵀ, z_b = Σ_{j∈b} k̃_j     (GEMM per tile)
 *   2. mixing            [S̃ z̃] = W · [S z]        (one GEMM, M×M by M×(d·dv+d))
 *   3. outputs           q̃_t S̃_i, divided by q̃_t·z̃_i + eps         (GEMM per tile)
 * Cost O(N·d·dv + M²·d·dv), memory O(M·d·dv) per (batch, head); no N×N.
 * With f32 rows, a relu-family or identity φ and AVX-512, phases 1 and 3 run
 * as register-blocked kernels instead of GEMMs ("non-causal AVX-512
 * kernels" below); non-causal linear attention uses them too (W = ones).
 *
 * Causal (1-D chunks of C tokens): phase 1 as above per chunk, phase 2 a
 * strictly lower triangular mixing GEMM (row blocks skip the zero upper
 * part), phase 3 adds W[i,i] times the masked intra-chunk product.
 *
 * Decoding keeps the finished summaries and the open block (see
 * mhla_cpu.h), stored augmented as [S | z] (d×(dv+1)); a block's inter-block
 * mixture is formed once when it starts. */
#include "cpu/mhla_cpu.h"

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define NC_TILE 512  /* token rows gathered per GEMM, non-causal               */
#define C_TILE 64    /* token rows per tile in the causal and decode paths     */
#define MIX_ROWS 64  /* rows of the causal mixing GEMM per task                */
#define MIX_COLS 1040 /* columns of the mixing GEMMs per task (multiple of 16) */


/* ---- geometry ------------------------------------------------------------ */
void la_mhla_geom_init(la_mhla_geom *geom, int ndim, const int64_t *grid,
                       const int64_t *blocks) {
    int off = 3 - ndim;
    geom->M = 1;
    geom->N = 1;
    geom->max_block = 1;
    geom->equal_blocks = 1;
    for (int a = 0; a < 3; a++) {
        geom->n[a] = a < off ? 1 : grid[a - off];
        geom->g[a] = a < off ? 1 : blocks[a - off];
        geom->M *= geom->g[a];
        geom->N *= geom->n[a];
        /* largest run along an axis: ceil(n/g) */
        geom->max_block *= (geom->n[a] + geom->g[a] - 1) / geom->g[a];
        if (geom->n[a] % geom->g[a]) geom->equal_blocks = 0;
    }
}

/* Extent of one block: first coordinate and length on each axis. */
typedef struct blk_box {
    int64_t lo[3], len[3], size;
} blk_box;

static void block_box(const la_mhla_geom *g, int64_t blk, blk_box *bx) {
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
static void block_tokens(const la_mhla_geom *g, const blk_box *bx, int64_t p0, int64_t n,
                         int64_t *idx) {
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

/* ---- gather / scatter ------------------------------------------------------ */
/* x[0..n) = scale·φ(x), one loop per map so that each vectorizes (a switch
 * inside the loop would not). Same arithmetic as la_feature_apply. */
static void feature_row(float *x, int64_t n, la_feature f, float scale) {
    switch (f) {
    case LA_FEATURE_IDENTITY: break;
    case LA_FEATURE_RELU:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] > 0.f ? x[i] : 0.f;
        break;
    case LA_FEATURE_RELU_EPS:
        for (int64_t i = 0; i < n; i++) x[i] = (x[i] > 0.f ? x[i] : 0.f) + 1e-6f;
        break;
    case LA_FEATURE_RELU1:
        for (int64_t i = 0; i < n; i++) x[i] = (x[i] > 0.f ? x[i] : 0.f) + 1.f;
        break;
    case LA_FEATURE_ELU1:
        for (int64_t i = 0; i < n; i++) x[i] = la_feature_apply(LA_FEATURE_ELU1, x[i]);
        break;
    }
    if (scale != 1.0f)
        for (int64_t i = 0; i < n; i++) x[i] *= scale;
}

/* Rows of head (b,h) of a [B,N,H,D] view into dst (row stride ld): row r is
 * token idx[r] (or n0 + r when idx is NULL). With feat, applies φ and then
 * the scale. */
static void gather_rows(const la_tensor *t, int64_t b, int64_t h, const int64_t *idx,
                        int64_t n0, int64_t n, float *dst, int64_t ld, int feat,
                        la_feature f, float scale) {
    const int64_t D = t->ne[3];
    if (t->dtype == LA_F32 && t->nb[3] == 1 && feat && scale == 1.0f &&
        (f == LA_FEATURE_RELU || f == LA_FEATURE_RELU_EPS)) {
        /* the common case in one pass: load, φ, store */
        const float *base = (const float *)t->data + b * t->nb[0] + h * t->nb[2];
        const float add = f == LA_FEATURE_RELU_EPS ? 1e-6f : 0.0f;
        for (int64_t r = 0; r < n; r++) {
            const float *src = base + (idx ? idx[r] : n0 + r) * t->nb[1];
            float *d = dst + r * ld;
            for (int64_t j = 0; j < D; j++) d[j] = (src[j] > 0.f ? src[j] : 0.f) + add;
        }
        return;
    }
    if (t->dtype == LA_F32) {
        const float *base = (const float *)t->data + b * t->nb[0] + h * t->nb[2];
        const int64_t s1 = t->nb[1], s3 = t->nb[3];
        for (int64_t r = 0; r < n; r++) {
            const float *src = base + (idx ? idx[r] : n0 + r) * s1;
            float *d = dst + r * ld;
            if (s3 == 1)
                memcpy(d, src, (size_t)D * sizeof(float));
            else
                for (int64_t j = 0; j < D; j++) d[j] = src[j * s3];
        }
    } else {
        for (int64_t r = 0; r < n; r++) {
            int64_t tok = idx ? idx[r] : n0 + r;
            float *d = dst + r * ld;
            for (int64_t j = 0; j < D; j++) d[j] = la_load_f32(t, la_off4(t, b, tok, h, j));
        }
    }
    if (feat)
        for (int64_t r = 0; r < n; r++) feature_row(dst + r * ld, D, f, scale);
}

/* Values augmented with a column of ones: [v | 1], row stride Dv+1. */
static void gather_values(const la_tensor *v, int64_t b, int64_t h, const int64_t *idx,
                          int64_t n0, int64_t n, float *dst) {
    const int64_t Dv = v->ne[3], E = Dv + 1;
    gather_rows(v, b, h, idx, n0, n, dst, E, 0, LA_FEATURE_IDENTITY, 1.0f);
    for (int64_t r = 0; r < n; r++) dst[r * E + Dv] = 1.0f;
}

enum { NORM_NONE = 0, NORM_COLUMN = 1, NORM_GIVEN = 2 };

/* Write output rows of head (b,h) from o (row stride ld), numerator in
 * columns [0, Dv). NORM_COLUMN divides by (o[Dv] + eps) (the augmented form
 * of the decoder, q̃·z̃ in column Dv), NORM_GIVEN by (den[r] + eps),
 * NORM_NONE writes the numerator. */
static void store_rows(la_tensor *out, int64_t b, int64_t h, const int64_t *idx, int64_t n0,
                       int64_t n, const float *o, int64_t ld, int mode, const float *den,
                       float eps) {
    const int64_t Dv = out->ne[3];
    for (int64_t r = 0; r < n; r++) {
        const float *src = o + r * ld;
        int64_t tok = idx ? idx[r] : n0 + r;
        float inv = 1.0f;
        if (mode == NORM_COLUMN) inv = 1.0f / (src[Dv] + eps);
        if (mode == NORM_GIVEN) inv = 1.0f / (den[r] + eps);
        if (out->dtype == LA_F32) {
            float *dst = (float *)out->data + la_off4(out, b, tok, h, 0);
            const int64_t s3 = out->nb[3];
            if (s3 == 1)
                for (int64_t j = 0; j < Dv; j++) dst[j] = src[j] * inv;
            else
                for (int64_t j = 0; j < Dv; j++) dst[j * s3] = src[j] * inv;
        } else {
            for (int64_t j = 0; j < Dv; j++)
                la_store_f32(out, la_off4(out, b, tok, h, j), src[j] * inv);
        }
    }
}

/* Mixing [Hw, M, M] (any float dtype, any strides) into f32. When tril,
 * keep only the strictly lower part (b < i) of the leading m×m corner, and
 * put the diagonal in diag[Hw, m]. */
static void load_mixing(const la_tensor *w, int64_t m, int tril, float *dst, float *diag) {
    int64_t Hw = w->ndim == 3 ? w->ne[0] : 1;
    for (int64_t hw = 0; hw < Hw; hw++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < m; j++) {
                int64_t off = w->ndim == 3 ? la_off3(w, hw, i, j) : la_off2(w, i, j);
                float x = la_load_f32(w, off);
                if (tril && j == i) diag[hw * m + i] = x;
                dst[(hw * m + i) * m + j] = (!tril || j < i) ? x : 0.0f;
            }
}

/* ---- workspace ------------------------------------------------------------- */
/* Round an element count up to 16 floats (64 bytes). */
static inline int64_t rup16(int64_t x) { return (x + 15) & ~(int64_t)15; }

/* A list of sub-buffers carved out of one allocation, each 64-byte aligned;
 * sizes are overflow-checked. */
typedef struct ws_plan {
    size_t total;
    la_status st;
} ws_plan;

static size_t ws_take(ws_plan *pl, size_t count, size_t elem, const char *what) {
    size_t bytes = 0, off;
    if (pl->st != LA_OK) return 0;
    if ((pl->st = la_mul_size(count, elem, &bytes, what)) != LA_OK) return 0;
    bytes = (bytes + 63) & ~(size_t)63;
    off = pl->total;
    if (pl->total > SIZE_MAX - bytes) {
        pl->st = la_err(LA_ERR_OVERFLOW, "mhla: workspace size overflows (%s)", what);
        return 0;
    }
    pl->total += bytes;
    return off;
}

/* count = a·b·c·d elements, overflow-checked. */
static size_t ws_count(ws_plan *pl, int64_t a, int64_t b, int64_t c, int64_t d,
                       const char *what) {
    size_t x = 1;
    const int64_t f[4] = {a, b, c, d};
    for (int i = 0; i < 4 && pl->st == LA_OK; i++) pl->st = la_mul_size(x, (size_t)f[i], &x, what);
    return pl->st == LA_OK ? x : 0;
}

/* ---- scheduling ------------------------------------------------------------ */
/* Every phase of a head depends only on that head's own summaries. When the
 * heads alone balance the threads, one task per head runs all its phases:
 * no barrier between phases (a barrier costs a whole time slice when another
 * process holds the other core). Otherwise each phase is spread over blocks
 * and column tiles, with a barrier between phases. */
static int whole_heads(int64_t BH, int nt) { return BH % nt == 0 || BH >= 4 * (int64_t)nt; }

/* ---- non-causal AVX-512 kernels ---------------------------------------------
 * The two hot products, S_b += φ(K)ᵀV over a block's tokens and O = q̃·S̃_i,
 * as register-blocked FMA kernels instead of sgemm calls: the installed
 * OpenBLAS runs its AVX2 (Haswell) kernels on this AVX-512 CPU at about half
 * of its FMA peak. Both kernels hold a 6×64 tile of accumulators (24 zmm) and
 * per step load one 64-float row (4 zmm) and broadcast 6 scalars: 24 FMAs per
 * 10 loads, all from L1 (~230 GFLOP/s on one core here, the FMA peak).
 *
 * φ is applied on the fly to the broadcast scalars, φ0(x) = max(x, lo) with
 * lo = 0 (relu family) or −inf (identity): tiles are packed as they are
 * (pack_rows), no φ(K) or φ(Q) copy. (vmaxps returns lo for a NaN x: relu
 * maps NaN to 0 as the GEMM path's x > 0 ? x : 0 does.) The additive
 * constant c of relu_eps and relu1, φ(x) = φ0(x) + c, is folded into
 * per-block corrections rather than added per element:
 *   S_b = Σ φ0(k) vᵀ + c·1·(Σ v)ᵀ,         z_b = Σ φ0(k) + c·n_b,
 *   q̃ S̃ = scale·(φ0(q) S̃ + c·1ᵀS̃),       q̃·z̃ = scale·(φ0(q)·z̃ + c·Σ z̃).
 * Token rows are reached through row pointers, so any block shape (2-D, 3-D
 * grids) and any row stride works; rows must be unit-stride f32 (else the
 * GEMM path below runs, which is also the path without AVX-512). */
#define NC_HG 8 /* heads per fast task at most (per-thread scratch: NC_HG·Dv floats) */
#if defined(__AVX512F__)
#include <immintrin.h>
#include <math.h>
#define NC_FAST 1
#define FT 64 /* tokens per tile: packed k and v tiles (2×16 KB at d = 64) stay in L1 */

/* Which features the fast kernels take: φ(x) = max(x, lo) + c. (elu1 needs
 * an exp per element: the GEMM path.) */
static int fast_feature(la_feature f, float *lo, float *c) {
    *lo = 0.0f, *c = 0.0f;
    switch (f) {
    case LA_FEATURE_IDENTITY: *lo = -INFINITY; return 1;
    case LA_FEATURE_RELU: return 1;
    case LA_FEATURE_RELU_EPS: *c = 1e-6f; return 1;
    case LA_FEATURE_RELU1: *c = 1.0f; return 1;
    default: return 0;
    }
}

static inline __mmask16 tail_mask(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

/* Software prefetch. A head's rows are 4·D-byte pieces of longer token rows
 * (the other heads' data in between), which the hardware prefetchers follow
 * poorly: ~14 GB/s per core here against ~39 GB/s for a plain stream. So the
 * cache lines of the next tile's rows (all heads of the task; continuing
 * into the next block) are listed, and the kernels issue one of them per
 * inner iteration, spread over the passes of a tile, into L1 (prefetcht0:
 * N = 16K, one thread, before tiles were packed: 12.1 ms without, 8.4 with;
 * into L2 9.6, two tiles ahead 8.7; after packing L1 and L2 within noise). */
#define PF_CAP 2048
typedef struct pf_list {
    const char *line[PF_CAP];
    int64_t n;
} pf_list;

static void pf_add_row(pf_list *pl, const void *row, int64_t bytes) {
    uintptr_t a = (uintptr_t)row & ~(uintptr_t)63, end = (uintptr_t)row + (uintptr_t)bytes;
    for (; a < end && pl->n < PF_CAP; a += 64) pl->line[pl->n++] = (const char *)a;
}

/* Lines [from, from+count) of the list, clipped. */
static inline int64_t pf_take(const pf_list *pl, int64_t from, int64_t count) {
    return from >= pl->n ? 0 : (pl->n - from < count ? pl->n - from : count);
}

/* S rows d0..d0+R, columns e0..e0+16·NV (the last vector masked by `last`),
 * row stride ldS: S (+)= Σ_t φ0(k_t[d0+r]) v_t[e0..] over n tokens (row
 * pointers kr, vr). load: accumulate onto S, else start from zero. */
static inline __attribute__((always_inline)) void
sum_kernel(const int R, const int NV, const float *const *kr, const float *const *vr, int64_t n,
           int64_t d0, int64_t e0, __mmask16 last, __m512 lo, float *S, int64_t ldS, int load,
           const char *const *pf, int64_t npf) {
    __m512 acc[6][4];
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 8") for (int x = 0; x < NV; x++) {
            const __mmask16 m = x == NV - 1 ? last : (__mmask16)0xFFFF;
            acc[r][x] = load ? _mm512_maskz_loadu_ps(m, S + (d0 + r) * ldS + e0 + 16 * x)
                             : _mm512_setzero_ps();
        }
    for (int64_t t = 0; t < n; t++) {
        if (t < npf) _mm_prefetch(pf[t], _MM_HINT_T0);
        const float *kp = kr[t] + d0, *vp = vr[t] + e0;
        __m512 vv[4];
        _Pragma("GCC unroll 8") for (int x = 0; x < NV; x++)
            vv[x] = x == NV - 1 ? _mm512_maskz_loadu_ps(last, vp + 16 * x)
                                : _mm512_loadu_ps(vp + 16 * x);
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
            const __m512 kb = _mm512_max_ps(_mm512_set1_ps(kp[r]), lo);
            _Pragma("GCC unroll 8") for (int x = 0; x < NV; x++) acc[r][x] = _mm512_fmadd_ps(kb, vv[x], acc[r][x]);
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 8") for (int x = 0; x < NV; x++) {
            const __mmask16 m = x == NV - 1 ? last : (__mmask16)0xFFFF;
            _mm512_mask_storeu_ps(S + (d0 + r) * ldS + e0 + 16 * x, m, acc[r][x]);
        }
}

/* R query rows, columns e0..e0+16·NV: orow[r][e0..] = fac[r]·(φ0(q_r) S̃ +
 * init). nt: streaming stores (rows 64-byte aligned, no partial vector). */
static inline __attribute__((always_inline)) void
out_kernel(const int R, const int NV, const float *const *qr, int64_t D, const float *St,
           int64_t ldS, int64_t e0, __mmask16 last, __m512 lo, const float *init,
           const float *fac, float *const *orow, int nt, const char *const *pf, int64_t npf) {
    __m512 acc[6][4];
    _Pragma("GCC unroll 8") for (int x = 0; x < NV; x++) {
        const __mmask16 m = x == NV - 1 ? last : (__mmask16)0xFFFF;
        const __m512 iv = _mm512_maskz_loadu_ps(m, init + e0 + 16 * x);
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) acc[r][x] = iv;
    }
    for (int64_t d = 0; d < D; d++) {
        if (d < npf) _mm_prefetch(pf[d], _MM_HINT_T0);
        const float *sp = St + d * ldS + e0;
        __m512 sv[4];
        _Pragma("GCC unroll 8") for (int x = 0; x < NV; x++)
            sv[x] = x == NV - 1 ? _mm512_maskz_loadu_ps(last, sp + 16 * x)
                                : _mm512_loadu_ps(sp + 16 * x);
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
            const __m512 qb = _mm512_max_ps(_mm512_set1_ps(qr[r][d]), lo);
            _Pragma("GCC unroll 8") for (int x = 0; x < NV; x++) acc[r][x] = _mm512_fmadd_ps(qb, sv[x], acc[r][x]);
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
        const __m512 f = _mm512_set1_ps(fac[r]);
        _Pragma("GCC unroll 8") for (int x = 0; x < NV; x++) {
            const __m512 o = _mm512_mul_ps(acc[r][x], f);
            if (nt) {
                _mm512_stream_ps(orow[r] + e0 + 16 * x, o);
            } else {
                const __mmask16 m = x == NV - 1 ? last : (__mmask16)0xFFFF;
                _mm512_mask_storeu_ps(orow[r] + e0 + 16 * x, m, o);
            }
        }
    }
}

/* One case per (R, NV), so that each kernel is compiled with its loops
 * unrolled and its accumulators in registers. */
#define FAST_CASES(CALL)                                                                     \
    CALL(1, 1) CALL(1, 2) CALL(1, 3) CALL(1, 4) CALL(2, 1) CALL(2, 2) CALL(2, 3) CALL(2, 4)  \
    CALL(3, 1) CALL(3, 2) CALL(3, 3) CALL(3, 4) CALL(4, 1) CALL(4, 2) CALL(4, 3) CALL(4, 4)  \
    CALL(5, 1) CALL(5, 2) CALL(5, 3) CALL(5, 4) CALL(6, 1) CALL(6, 2) CALL(6, 3) CALL(6, 4)

/* S [D, Dv] (+)= φ0(K)ᵀ V over n <= FT tokens, issuing pf's prefetches from
 * pos on; returns the next position. */
static __attribute__((noinline)) int64_t sum_tile(const float *const *kr, const float *const *vr,
                                                 int64_t n, int64_t D, int64_t Dv, __m512 lo,
                                                 float *S, int load, const pf_list *pf,
                                                 int64_t pos) {
    for (int64_t e0 = 0; e0 < Dv; e0 += 64) {
        const int nv = (int)(((Dv - e0 < 64 ? Dv - e0 : 64) + 15) / 16);
        const __mmask16 last = tail_mask(Dv - e0 - 16 * (nv - 1));
        for (int64_t d0 = 0; d0 < D; d0 += 6) {
            const int R = (int)(D - d0 < 6 ? D - d0 : 6);
            const int64_t npf = pf_take(pf, pos, n);
            const char *const *pl = pf->line + pos;
            pos += npf;
            switch (R * 8 + nv) {
#define SUM_CALL(r_, nv_)                                                                     \
    case r_ * 8 + nv_:                                                                        \
        sum_kernel(r_, nv_, kr, vr, n, d0, e0, last, lo, S, Dv, load, pl, npf);               \
        break;
                FAST_CASES(SUM_CALL)
#undef SUM_CALL
            }
        }
    }
    return pos;
}

/* orow[r][0..Dv) = fac[r]·(φ0(q_r) S̃ + init) for n <= FT query rows, issuing
 * pf's prefetches from pos on; returns the next position. */
static __attribute__((noinline)) int64_t out_tile(const float *const *qr, int64_t n, int64_t D,
                                                 int64_t Dv, __m512 lo, const float *St,
                                                 const float *init, const float *fac,
                                                 float *const *orow, int nt, const pf_list *pf,
                                                 int64_t pos) {
    for (int64_t r0 = 0; r0 < n; r0 += 6) {
        const int R = (int)(n - r0 < 6 ? n - r0 : 6);
        for (int64_t e0 = 0; e0 < Dv; e0 += 64) {
            const int nv = (int)(((Dv - e0 < 64 ? Dv - e0 : 64) + 15) / 16);
            const __mmask16 last = tail_mask(Dv - e0 - 16 * (nv - 1));
            const int64_t npf = pf_take(pf, pos, D);
            const char *const *pl = pf->line + pos;
            pos += npf;
            switch (R * 8 + nv) {
#define OUT_CALL(r_, nv_)                                                                     \
    case r_ * 8 + nv_:                                                                        \
        out_kernel(r_, nv_, qr + r0, D, St, Dv, e0, last, lo, init, fac + r0, orow + r0, nt,  \
                   pl, npf);                                                                  \
        break;
                FAST_CASES(OUT_CALL)
#undef OUT_CALL
            }
        }
    }
    return pos;
}

/* Σ_d φ0(x[d])·y[d], 16 lanes at a time. */
static inline float dot_phi(const float *x, const float *y, int64_t n, __m512 lo) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 a = _mm512_max_ps(_mm512_maskz_loadu_ps(m, x + i), lo);
        acc = _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(m, y + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* Pack n rows of len floats (row pointers src) into dst with row stride len,
 * and point src at the packed rows. Token rows of one head lie H·D floats
 * apart: at H·D·4 = 1 KB (H = 4, D = 64) a 64-row tile of k maps onto 16 of
 * the 64 L1 sets (16 lines per set against 12 ways), so every pass of the
 * kernels over an unpacked tile would come from L2. Packed, a tile is one
 * stretch of 16 KB. (A copy per tile, not a pass over the tensor: 1 load and
 * 1 store per element against 2·Dv FMAs.) */
static void pack_rows(const float **src, int64_t n, int64_t len, float *dst) {
    for (int64_t r = 0; r < n; r++) {
        const float *s = src[r];
        float *d = dst + r * len;
        for (int64_t i = 0; i < len; i += 16) {
            const __mmask16 m = tail_mask(len - i);
            _mm512_mask_storeu_ps(d + i, m, _mm512_maskz_loadu_ps(m, s + i));
        }
        src[r] = d;
    }
}

/* acc[0..len) += Σ_r max(rows[r][..], lo), 16 columns at a time in registers. */
static void col_sums(const float *const *rows, int64_t n, int64_t len, __m512 lo, float *acc) {
    for (int64_t i = 0; i < len; i += 16) {
        const __mmask16 m = tail_mask(len - i);
        __m512 s0 = _mm512_maskz_loadu_ps(m, acc + i), s1 = _mm512_setzero_ps();
        int64_t r = 0;
        for (; r + 2 <= n; r += 2) {
            s0 = _mm512_add_ps(s0, _mm512_max_ps(_mm512_maskz_loadu_ps(m, rows[r] + i), lo));
            s1 = _mm512_add_ps(s1, _mm512_max_ps(_mm512_maskz_loadu_ps(m, rows[r + 1] + i), lo));
        }
        if (r < n) s0 = _mm512_add_ps(s0, _mm512_max_ps(_mm512_maskz_loadu_ps(m, rows[r] + i), lo));
        _mm512_mask_storeu_ps(acc + i, m, _mm512_add_ps(s0, s1));
    }
}

/* Whether the fast kernels apply: f32 q, k, v with unit-stride rows and a
 * relu-family or identity feature. (out may be anything: rows that cannot be
 * written in place go through the tile buffer and store_rows.) */
static int nc_fast_ok(la_feature f, const la_tensor *q, const la_tensor *k, const la_tensor *v) {
    float lo, c;
    return fast_feature(f, &lo, &c) && q->dtype == LA_F32 && k->dtype == LA_F32 &&
           v->dtype == LA_F32 && q->nb[3] == 1 && k->nb[3] == 1 && v->nb[3] == 1;
}
#endif /* __AVX512F__ */

/* ---- non-causal forward -------------------------------------------------- */
typedef struct nc_job {
    const la_mhla_params *p;
    const la_mhla_geom *geom;
    const la_tensor *q, *k, *v;
    la_tensor *out;
    int64_t H, D, Dv, SE, M, Hw, L, tile;
    int rv, mode;
    int fast; /* the AVX-512 kernels apply (nc_fast_ok) */
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
static float *direct_rows(const la_tensor *t, int64_t b, int64_t h, int64_t n0) {
    if (t->dtype != LA_F32 || t->nb[3] != 1) return NULL;
    return (float *)t->data + b * t->nb[0] + n0 * t->nb[1] + h * t->nb[2];
}

/* Whether every block is one contiguous run of tokens (a 1-D grid). */
static int runs_are_blocks(const la_mhla_geom *g) { return g->n[0] == 1 && g->n[1] == 1; }

#ifdef NC_FAST
#endif

/* released_vision: r_b[w] = q̃_{b,w}·z_b for the positions w of block task. */
static void nc_rv_terms(const nc_job *j, int64_t task, const blk_box *bx, const float *zb,
                        tiles *w) {
    const int64_t D = j->D, tile = j->tile, bh = task / j->M, b = bh / j->H, h = bh % j->H;
    float *Rb = j->R + task * j->L;
    for (int64_t p0 = 0; p0 < bx->size; p0 += tile) {
        int64_t n = bx->size - p0 < tile ? bx->size - p0 : tile;
        block_tokens(j->geom, bx, p0, n, w->idx);
        gather_rows(j->q, b, h, w->idx, 0, n, w->q, D, 1, j->p->feature, j->p->scale_q);
        for (int64_t r = 0; r < n; r++) Rb[p0 + r] = dot8(w->q + r * D, zb, D);
    }
}

/* Phase 1 for task = (b·H + h)·M + blk: S_b = K̃ᵀV (GEMM), z_b = Σ k̃ and, for
 * released_vision, r_b[w] = q̃_{b,w}·z_b. (z is kept out of the GEMM: an
 * extra ones column makes OpenBLAS take its slow edge path, ~30% here.) */
static void nc_summary(const nc_job *j, int64_t task, tiles *w) {
    const int64_t D = j->D, Dv = j->Dv, M = j->M, tile = j->tile;
    const int64_t bh = task / M, b = bh / j->H, h = bh % j->H;
    float *Sb = j->S + task * j->SE, *zb = Sb + D * Dv;
    blk_box bx;
    block_box(j->geom, task % M, &bx);
    memset(zb, 0, (size_t)D * sizeof(float));
    /* an empty block (more blocks than tokens on an axis) has S_b = 0; the
     * first tile's GEMM (beta 0) initializes S_b otherwise */
    if (bx.size == 0) memset(Sb, 0, (size_t)(D * Dv) * sizeof(float));
    for (int64_t p0 = 0; p0 < bx.size; p0 += tile) {
        int64_t n = bx.size - p0 < tile ? bx.size - p0 : tile;
        block_tokens(j->geom, &bx, p0, n, w->idx);
        gather_rows(j->k, b, h, w->idx, 0, n, w->k, D, 1, j->p->feature, 1.0f);
        const float *vr = runs_are_blocks(j->geom) ? direct_rows(j->v, b, h, w->idx[0]) : NULL;
        int64_t ldv = vr ? j->v->nb[1] : Dv;
        if (!vr) {
            gather_rows(j->v, b, h, w->idx, 0, n, w->v, Dv, 0, LA_FEATURE_IDENTITY, 1.0f);
            vr = w->v;
        }
        la_sgemm(true, false, D, Dv, n, 1.0f, w->k, D, vr, ldv, p0 ? 1.0f : 0.0f, Sb, Dv);
        for (int64_t r = 0; r < n; r++)
            for (int64_t d = 0; d < D; d++) zb[d] += w->k[r * D + d];
    }
    if (j->rv) nc_rv_terms(j, task, &bx, zb, w);
}

#ifdef NC_FAST
/* Token indices of the tile that starts p positions into block blk,
 * continuing into the following blocks when p runs past the end: the
 * prefetch target. Returns its length (0 past the last block). */
static int64_t tile_ahead(const la_mhla_geom *g, int64_t blk, int64_t p, int64_t *idx) {
    blk_box bx;
    block_box(g, blk, &bx);
    while (p >= bx.size) {
        p -= bx.size;
        if (++blk >= g->M) return 0;
        block_box(g, blk, &bx);
    }
    const int64_t n = bx.size - p < FT ? bx.size - p : FT;
    block_tokens(g, &bx, p, n, idx);
    return n;
}

/* Start of head h of batch b in a [B,N,H,·] view (token rows nb[1] apart). */
static inline const float *head_base(const la_tensor *t, int64_t b, int64_t h) {
    return (const float *)t->data + b * t->nb[0] + h * t->nb[2];
}

/* Phase 1, fast path (see "non-causal AVX-512 kernels"): S_b and z_b of
 * block blk of batch b for heads [h0, h1). Each tile of FT tokens is done
 * for all these heads before the next (the heads' rows lie side by side in
 * memory), one head at a time from a packed copy in L1 (pack_rows); the
 * next tile's lines are prefetched meanwhile. N = 16K, H = 4, one thread:
 * 8.6 ms head by head from the rows in place, 7.8 ms like this, 6.0 ms with
 * every input row in L1. The constant c of φ is added once per block at the
 * end. (w->k, w->v: packed tiles; w->o: Σv per head.) */
static void nc_summary_fast(const nc_job *j, int64_t b, int64_t blk, int64_t h0, int64_t h1,
                            tiles *w) {
    const int64_t D = j->D, Dv = j->Dv, M = j->M, H = j->H;
    const la_tensor *k = j->k, *v = j->v;
    float lo, c;
    fast_feature(j->p->feature, &lo, &c);
    const __m512 lov = _mm512_set1_ps(lo);
    const float *kr[FT], *vr[FT];
    pf_list pf;
    blk_box bx;
    block_box(j->geom, blk, &bx);
    for (int64_t h = h0; h < h1; h++) {
        float *Sb = j->S + ((b * H + h) * M + blk) * j->SE;
        memset(Sb + D * Dv, 0, (size_t)D * sizeof(float));
        memset(w->o + (h - h0) * Dv, 0, (size_t)Dv * sizeof(float));
        /* empty block: S_b = 0 (else the first tile initializes it) */
        if (bx.size == 0) memset(Sb, 0, (size_t)(D * Dv) * sizeof(float));
    }
    for (int64_t p0 = 0; p0 < bx.size; p0 += FT) {
        const int64_t n = bx.size - p0 < FT ? bx.size - p0 : FT;
        pf.n = 0;
        const int64_t na = tile_ahead(j->geom, blk, p0 + FT, w->idx);
        for (int64_t r = 0; r < na; r++)
            for (int64_t h = h0; h < h1; h++) {
                pf_add_row(&pf, head_base(k, b, h) + w->idx[r] * k->nb[1], D * (int64_t)sizeof(float));
                pf_add_row(&pf, head_base(v, b, h) + w->idx[r] * v->nb[1], Dv * (int64_t)sizeof(float));
            }
        block_tokens(j->geom, &bx, p0, n, w->idx);
        int64_t pos = 0;
        for (int64_t h = h0; h < h1; h++) {
            const float *kb = head_base(k, b, h), *vb = head_base(v, b, h);
            float *Sb = j->S + ((b * H + h) * M + blk) * j->SE;
            for (int64_t r = 0; r < n; r++) {
                kr[r] = kb + w->idx[r] * k->nb[1];
                vr[r] = vb + w->idx[r] * v->nb[1];
            }
            pack_rows(kr, n, D, w->k);
            pack_rows(vr, n, Dv, w->v);
            pos = sum_tile(kr, vr, n, D, Dv, lov, Sb, p0 > 0, &pf, pos);
            col_sums(kr, n, D, lov, Sb + D * Dv); /* rows still in L1 */
            if (c != 0.0f) col_sums(vr, n, Dv, _mm512_set1_ps(-INFINITY), w->o + (h - h0) * Dv);
        }
    }
    for (int64_t h = h0; h < h1; h++) {
        const int64_t task = (b * H + h) * M + blk;
        float *Sb = j->S + task * j->SE, *zb = Sb + D * Dv;
        if (c != 0.0f) {
            const float *vsum = w->o + (h - h0) * Dv;
            for (int64_t d = 0; d < D; d++)
                for (int64_t e = 0; e < Dv; e++) Sb[d * Dv + e] += c * vsum[e];
            for (int64_t d = 0; d < D; d++) zb[d] += c * (float)bx.size;
        }
        if (j->rv) nc_rv_terms(j, task, &bx, zb, w);
    }
}

/* Phase 3, fast path: outputs of block blk of batch b for heads [h0, h1),
 * tile by tile as in phase 1 (q packed into w->q); written in place
 * when out is f32 with unit-stride rows (streaming stores when every row is
 * 64-byte aligned and Dv a multiple of 16), else through w->o and
 * store_rows. Row r gets fac = scale/(q̃·z̃ + eps) (per_query),
 * scale/(r̃ + eps) (released_vision) or scale (none). (w->v holds c·1ᵀS̃
 * per head, w->den the factors.) */
static void nc_output_fast(const nc_job *j, int64_t b, int64_t blk, int64_t h0, int64_t h1,
                           tiles *w) {
    const int64_t D = j->D, Dv = j->Dv, M = j->M, H = j->H;
    const la_tensor *q = j->q;
    la_tensor *out = j->out;
    const float scale = j->p->scale_q, eps = j->p->eps;
    float lo, c;
    fast_feature(j->p->feature, &lo, &c);
    const __m512 lov = _mm512_set1_ps(lo);
    float zsum[NC_HG];
    for (int64_t h = h0; h < h1; h++) {
        const float *Sti = j->St + ((b * H + h) * M + blk) * j->SE, *zti = Sti + D * Dv;
        float *init = w->v + (h - h0) * Dv;
        for (int64_t e = 0; e < Dv; e++) init[e] = 0.0f;
        zsum[h - h0] = 0.0f;
        if (c != 0.0f) {
            for (int64_t d = 0; d < D; d++)
                for (int64_t e = 0; e < Dv; e++) init[e] += Sti[d * Dv + e];
            for (int64_t e = 0; e < Dv; e++) init[e] *= c;
            for (int64_t d = 0; d < D; d++) zsum[h - h0] += zti[d];
            zsum[h - h0] *= c;
        }
    }
    const int direct = out->dtype == LA_F32 && out->nb[3] == 1;
    const int nt = direct && Dv % 16 == 0 && ((uintptr_t)out->data & 63) == 0 &&
                   (out->nb[0] * (int64_t)sizeof(float)) % 64 == 0 &&
                   (out->nb[1] * (int64_t)sizeof(float)) % 64 == 0 &&
                   (out->nb[2] * (int64_t)sizeof(float)) % 64 == 0;
    const float *qr[FT];
    float *orow[FT], *fac = w->den;
    pf_list pf;
    blk_box bx;
    block_box(j->geom, blk, &bx);
    for (int64_t p0 = 0; p0 < bx.size; p0 += FT) {
        const int64_t n = bx.size - p0 < FT ? bx.size - p0 : FT;
        pf.n = 0;
        const int64_t na = tile_ahead(j->geom, blk, p0 + FT, w->idx);
        for (int64_t r = 0; r < na; r++)
            for (int64_t h = h0; h < h1; h++)
                pf_add_row(&pf, head_base(q, b, h) + w->idx[r] * q->nb[1], D * (int64_t)sizeof(float));
        block_tokens(j->geom, &bx, p0, n, w->idx);
        int64_t pos = 0;
        for (int64_t h = h0; h < h1; h++) {
            const int64_t task = (b * H + h) * M + blk;
            const float *Sti = j->St + task * j->SE, *zti = Sti + D * Dv;
            const float *qb = head_base(q, b, h);
            float *ob = direct ? (float *)out->data + b * out->nb[0] + h * out->nb[2] : NULL;
            for (int64_t r = 0; r < n; r++) {
                qr[r] = qb + w->idx[r] * q->nb[1];
                orow[r] = direct ? ob + w->idx[r] * out->nb[1] : w->o + r * Dv;
            }
            pack_rows(qr, n, D, w->q);
            for (int64_t r = 0; r < n; r++) {
                if (j->rv)
                    fac[r] = scale / (j->Rt[task * j->L + p0 + r] + eps);
                else if (j->mode == NORM_GIVEN)
                    fac[r] = scale / (scale * (dot_phi(qr[r], zti, D, lov) + zsum[h - h0]) + eps);
                else
                    fac[r] = scale;
            }
            pos = out_tile(qr, n, D, Dv, lov, Sti, w->v + (h - h0) * Dv, fac, orow, nt, &pf, pos);
            if (!direct) store_rows(out, b, h, w->idx, 0, n, w->o, Dv, NORM_NONE, NULL, eps);
        }
    }
    if (nt) _mm_sfence(); /* streaming stores visible before the caller reads out */
}
#endif

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
    block_box(j->geom, task % M, &bx);
    for (int64_t p0 = 0; p0 < bx.size; p0 += tile) {
        int64_t n = bx.size - p0 < tile ? bx.size - p0 : tile;
        block_tokens(j->geom, &bx, p0, n, w->idx);
        gather_rows(j->q, b, h, w->idx, 0, n, w->q, D, 1, j->p->feature, j->p->scale_q);
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
            store_rows(j->out, b, h, w->idx, 0, n, w->o, Dv, j->mode, den, j->p->eps);
        } else if (den) {
            for (int64_t r = 0; r < n; r++) {
                const float inv = 1.0f / (den[r] + j->p->eps);
                for (int64_t e = 0; e < Dv; e++) orow[r * ldo + e] *= inv;
            }
        }
    }
}

int la_mhla_fast_ok(la_feature f, const la_tensor *q, const la_tensor *k, const la_tensor *v) {
#ifdef NC_FAST
    return nc_fast_ok(f, q, k, v);
#else
    (void)f, (void)q, (void)k, (void)v;
    return 0;
#endif
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
    size_t nS = ws_count(&pl, B, H, M, SE, "mhla: block summaries [B,H,M,D·Dv+D]");
    size_t oS = ws_take(&pl, nS, sizeof(float), "mhla: block summaries");
    size_t oSt = ws_take(&pl, nS, sizeof(float), "mhla: mixed summaries");
    size_t oW = ws_take(&pl, ws_count(&pl, j.Hw, M, M, 1, "mhla: mixing"), sizeof(float),
                        "mhla: mixing");
    size_t nR = j.rv ? ws_count(&pl, B, H, M, j.L, "mhla: released_vision denominators") : 1;
    size_t oR = ws_take(&pl, nR, sizeof(float), "mhla: denominators");
    size_t oRt = ws_take(&pl, nR, sizeof(float), "mhla: mixed denominators");
    const int64_t qsz = rup16(tile * j.D), vsz = rup16(tile * j.Dv);
    size_t per = ws_count(&pl, 2 * qsz + 2 * vsz + 3 * tile, (int64_t)sizeof(float), 1, 1,
                          "mhla: per-thread tiles");
    size_t oT = ws_take(&pl, (size_t)nt, per, "mhla: per-thread tiles");
    if (pl.st != LA_OK) return pl.st;
    char *ws = (char *)la_ws_alloc(ctx, pl.total);
    if (!ws) return la_err(LA_ERR_NOMEM, "mhla: cannot allocate %zu bytes of workspace", pl.total);
    j.S = (float *)(ws + oS), j.St = (float *)(ws + oSt), j.W = (float *)(ws + oW);
    j.R = (float *)(ws + oR), j.Rt = (float *)(ws + oRt);
    load_mixing(mixing, M, 0, j.W, NULL);
#ifdef NC_FAST
    j.fast = nc_fast_ok(p->feature, q, k, v);
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
                nc_summary_fast(&j, b, blk, g * hg, (g + 1) * hg < H ? (g + 1) * hg : H, &w);
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
                nc_output_fast(&j, b, blk, g * hg, (g + 1) * hg < H ? (g + 1) * hg : H, &w);
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

/* ---- causal: one tile of queries against its own open block ---------------
 * ot[na, E] += w_ii · mask(q̃ k̃ᵀ) [v | 1] over the key rows of the block that
 * precede or equal each query, given as tiles [k0, k0+nk) of the same rows
 * source. Shared by the chunkwise forward and the decode state. */
static void masked_tile(const float *qt, int64_t na, const float *kt, int64_t nk,
                        const float *vt, int64_t D, int64_t E, int diag, float wii, float *A,
                        float *ot) {
    la_sgemm(false, true, na, nk, D, 1.0f, qt, D, kt, D, 0.0f, A, nk);
    if (diag) /* same first row: key s is visible to query r iff s <= r */
        for (int64_t r = 0; r < na; r++)
            for (int64_t s = r + 1; s < nk; s++) A[r * nk + s] = 0.0f;
    la_sgemm(false, false, na, E, nk, wii, A, nk, vt, E, 1.0f, ot, E);
}

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
        gather_rows(j->k, b, h, NULL, a0, n, w->k, D, 1, j->p->feature, 1.0f);
        const float *vr = direct_rows(j->v, b, h, a0);
        const int64_t ldv = vr ? j->v->nb[1] : Dv;
        if (!vr) {
            gather_rows(j->v, b, h, NULL, a0, n, w->v, Dv, 0, LA_FEATURE_IDENTITY, 1.0f);
            vr = w->v;
        }
        la_sgemm(true, false, D, Dv, n, 1.0f, w->k, D, vr, ldv, a0 > s0 ? 1.0f : 0.0f, Sc, Dv);
        for (int64_t r = 0; r < n; r++)
            for (int64_t d = 0; d < D; d++) zc[d] += w->k[r * D + d];
    }
}

/* Phase 2: Hm[i] = Σ_{b<i} W[i,b] [S_b z_b] for rows [r0, r1), columns
 * [c0, c0+cw), from the head's summaries Sh into dst (row r0, column c0, row
 * stride SE). Row i needs only b < i, so the block needs b < r1 − 1: the upper
 * triangle is skipped at block granularity. */
static void c_mix(const c_job *j, int64_t bh, int64_t r0, int64_t r1, int64_t c0, int64_t cw,
                  const float *Sh, float *dst) {
    const int64_t nc = j->nc, SE = j->SE;
    const float *Wh = j->Wl + (j->Hw == 1 ? 0 : bh % j->H) * nc * nc;
    la_sgemm(false, false, r1 - r0, cw, r1 - 1, 1.0f, Wh + r0 * nc, nc, Sh + c0, SE, 0.0f, dst,
             SE); /* K = 0 (the first row alone) writes zeros */
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
        gather_rows(j->q, b, h, NULL, a0, na, w->q, D, 1, j->p->feature, j->p->scale_q);
        float *orow = direct_rows(j->out, b, h, a0);
        const int64_t ldo = orow ? j->out->nb[1] : Dv;
        float *o = orow ? orow : w->o;
        la_sgemm(false, false, na, Dv, D, 1.0f, w->q, D, Hc, Dv, 0.0f, o, ldo);
        if (j->per_query)
            for (int64_t r = 0; r < na; r++) w->den[r] = dot8(w->q + r * D, zc, D);
        for (int64_t k0 = s0; k0 <= a0; k0 += tile) {
            const int64_t nk = k0 == a0 ? na : tile;
            gather_rows(j->k, b, h, NULL, k0, nk, w->k, D, 1, j->p->feature, 1.0f);
            la_sgemm(false, true, na, nk, D, 1.0f, w->q, D, w->k, D, 0.0f, w->a, nk);
            if (k0 == a0) /* same first row: key s is visible to query r iff s <= r */
                for (int64_t r = 0; r < na; r++)
                    for (int64_t s2 = r + 1; s2 < nk; s2++) w->a[r * nk + s2] = 0.0f;
            const float *vr = direct_rows(j->v, b, h, k0);
            const int64_t ldv = vr ? j->v->nb[1] : Dv;
            if (!vr) {
                gather_rows(j->v, b, h, NULL, k0, nk, w->v, Dv, 0, LA_FEATURE_IDENTITY, 1.0f);
                vr = w->v;
            }
            la_sgemm(false, false, na, Dv, nk, wii, w->a, nk, vr, ldv, 1.0f, o, ldo);
            if (j->per_query)
                for (int64_t r = 0; r < na; r++) w->den[r] += wii * sum8(w->a + r * nk, nk);
        }
        if (!orow) {
            store_rows(j->out, b, h, NULL, a0, na, w->o, Dv,
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
    size_t nS = per_head ? ws_count(&pl, nt, nc + MIX_ROWS, SE, 1, "mhla causal: chunk summaries")
                         : ws_count(&pl, BH, nc, SE, 1, "mhla causal: chunk summaries [B,H,N/C,D·Dv+D]");
    size_t oS = ws_take(&pl, nS, sizeof(float), "mhla causal: chunk summaries");
    size_t oHm = ws_take(&pl, per_head ? 1 : nS, sizeof(float), "mhla causal: mixtures");
    size_t oW = ws_take(&pl, ws_count(&pl, j.Hw, nc, nc, 1, "mhla causal: mixing"),
                        sizeof(float), "mhla causal: mixing");
    size_t oWd = ws_take(&pl, ws_count(&pl, j.Hw, nc, 1, 1, "mhla causal: mixing diagonal"),
                         sizeof(float), "mhla causal: mixing diagonal");
    const int64_t qsz = rup16(tile * j.D), vsz = rup16(tile * j.Dv), asz = rup16(tile * tile);
    size_t per = ws_count(&pl, 2 * qsz + 2 * vsz + asz + rup16(tile), (int64_t)sizeof(float), 1,
                          1, "mhla causal: per-thread tiles");
    size_t oT = ws_take(&pl, (size_t)nt, per, "mhla causal: per-thread tiles");
    if (pl.st != LA_OK) return pl.st;
    char *ws = (char *)la_ws_alloc(ctx, pl.total);
    if (!ws) return la_err(LA_ERR_NOMEM, "mhla causal: cannot allocate %zu bytes of workspace",
                           pl.total);
    float *S = (float *)(ws + oS), *Hm = (float *)(ws + oHm);
    j.Wl = (float *)(ws + oW), j.Wd = (float *)(ws + oWd);
    load_mixing(mixing, nc, 1, j.Wl, j.Wd);
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
            gather_rows(q, b, h, NULL, row, na, qt, D, 1, st->p.feature, st->p.scale_q);
            gather_rows(k, b, h, NULL, row, na, kt, D, 1, st->p.feature, 1.0f);
            gather_values(v, b, h, NULL, row, na, vt);
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
            store_rows(out, b, h, NULL, row, na, ot, E, mode, NULL, st->p.eps);
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
    size_t per = ws_count(&pl, tile, 2 * D + 2 * E + tile, (int64_t)sizeof(float), 1,
                          "mhla state: tiles");
    size_t oT = ws_take(&pl, (size_t)nt, per, "mhla state: per-thread tiles");
    if (pl.st != LA_OK) return pl.st;
    char *ws = (char *)la_ws_alloc(ctx, pl.total);
    if (!ws) return la_err(LA_ERR_NOMEM, "mhla state: cannot allocate %zu bytes", pl.total);

    /* Threads only for many heads or tokens: ~4·d·(dv+1) flops per token and
     * head above ~2 ms of work. Below that, waking a thread team costs more
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
