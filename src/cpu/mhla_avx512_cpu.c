/* MHLA on the CPU: the non-causal AVX-512 kernels and the two phases built
 * on them (block summaries and outputs); mhla_cpu.c runs the phases.
 * Without AVX-512 only la_mhla_fast_ok is compiled (it returns 0). */
#include "cpu/mhla_cpu_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- non-causal AVX-512 kernels ---------------------------------------------
 * The two hot products, S_b += φ(K)ᵀV over a block's tokens and O = q̃·S̃_i,
 * as register-blocked FMA kernels instead of sgemm calls: OpenBLAS runs its
 * AVX2 (Haswell) kernels on AVX-512 CPUs, well below the FMA peak. Both
 * kernels hold a 6×64 tile of accumulators (24 zmm) and per step load one
 * 64-float row (4 zmm) and broadcast 6 scalars: 24 FMAs per 10 loads, all
 * from L1, which keeps the FMA units busy (measurements: docs/MHLA.md,
 * "CPU design").
 *
 * φ is applied on the fly to the broadcast scalars, φ0(x) = max(x, lo) with
 * lo = 0 (relu family) or −inf (identity): tiles are packed as they are
 * (pack_rows), no φ(K) or φ(Q) copy. φ0 is _mm512_max_ps(lo, x), in that
 * order: vmaxps returns its second operand when either is NaN, so a NaN x
 * propagates as torch.relu and la_relu do. The additive
 * constant c of relu_eps and relu1, φ(x) = φ0(x) + c, is folded into
 * per-block corrections rather than added per element:
 *   S_b = Σ φ0(k) vᵀ + c·1·(Σ v)ᵀ,         z_b = Σ φ0(k) + c·n_b,
 *   q̃ S̃ = scale·(φ0(q) S̃ + c·1ᵀS̃),       q̃·z̃ = scale·(φ0(q)·z̃ + c·Σ z̃).
 * Token rows are reached through row pointers, so any block shape (2-D, 3-D
 * grids) and any row stride works; rows must be unit-stride f32 (else the
 * GEMM path of mhla_cpu.c runs, which is also the path without AVX-512). */
#if defined(__AVX512F__)
#include <immintrin.h>
#include <math.h>
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
 * poorly: well under the bandwidth of a plain stream. So the cache lines of
 * the next tile's rows (all heads of the task; continuing into the next
 * block) are listed, and the kernels issue one of them per inner iteration,
 * spread over the passes of a tile, into L1 (prefetcht0, one tile ahead: the
 * best of the variants in docs/MHLA.md, "CPU design"). */
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
            const __m512 kb = _mm512_max_ps(lo, _mm512_set1_ps(kp[r]));
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
            const __m512 qb = _mm512_max_ps(lo, _mm512_set1_ps(qr[r][d]));
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
        const __m512 a = _mm512_max_ps(lo, _mm512_maskz_loadu_ps(m, x + i));
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

/* acc[0..len) += Σ_r max(lo, rows[r][..]) (NaN propagated), 16 columns at a
 * time in registers. */
static void col_sums(const float *const *rows, int64_t n, int64_t len, __m512 lo, float *acc) {
    for (int64_t i = 0; i < len; i += 16) {
        const __mmask16 m = tail_mask(len - i);
        __m512 s0 = _mm512_maskz_loadu_ps(m, acc + i), s1 = _mm512_setzero_ps();
        int64_t r = 0;
        for (; r + 2 <= n; r += 2) {
            s0 = _mm512_add_ps(s0, _mm512_max_ps(lo, _mm512_maskz_loadu_ps(m, rows[r] + i)));
            s1 = _mm512_add_ps(s1, _mm512_max_ps(lo, _mm512_maskz_loadu_ps(m, rows[r + 1] + i)));
        }
        if (r < n) s0 = _mm512_add_ps(s0, _mm512_max_ps(lo, _mm512_maskz_loadu_ps(m, rows[r] + i)));
        _mm512_mask_storeu_ps(acc + i, m, _mm512_add_ps(s0, s1));
    }
}

/* Whether the fast kernels apply: f32 q, k, v with unit-stride rows and a
 * relu-family or identity feature. (out may be anything: rows that cannot be
 * written in place go through the tile buffer and la_mhla_store_rows.) */
int la_mhla_nc_fast_ok(la_feature f, const la_tensor *q, const la_tensor *k, const la_tensor *v) {
    float lo, c;
    return fast_feature(f, &lo, &c) && q->dtype == LA_F32 && k->dtype == LA_F32 &&
           v->dtype == LA_F32 && q->nb[3] == 1 && k->nb[3] == 1 && v->nb[3] == 1;
}

/* Token indices of the tile that starts p positions into block blk,
 * continuing into the following blocks when p runs past the end: the
 * prefetch target. Returns its length (0 past the last block). */
static int64_t tile_ahead(const la_mhla_geom *g, int64_t blk, int64_t p, int64_t *idx) {
    blk_box bx;
    la_mhla_block_box(g, blk, &bx);
    while (p >= bx.size) {
        p -= bx.size;
        if (++blk >= g->M) return 0;
        la_mhla_block_box(g, blk, &bx);
    }
    const int64_t n = bx.size - p < FT ? bx.size - p : FT;
    la_mhla_block_tokens(g, &bx, p, n, idx);
    return n;
}

/* Start of head h of batch b in a [B,N,H,·] view (token rows nb[1] apart). */
static inline const float *head_base(const la_tensor *t, int64_t b, int64_t h) {
    return (const float *)t->data + b * t->nb[0] + h * t->nb[2];
}

/* Phase 1, fast path (see "non-causal AVX-512 kernels" above): S_b and z_b of
 * block blk of batch b for heads [h0, h1). Each tile of FT tokens is done
 * for all these heads before the next (the heads' rows lie side by side in
 * memory), one head at a time from a packed copy in L1 (pack_rows); the
 * next tile's lines are prefetched meanwhile. The constant c of φ is added
 * once per block at the end. (w->k, w->v: packed tiles; w->o: Σv per
 * head.) */
void la_mhla_nc_summary_fast(const nc_job *j, int64_t b, int64_t blk, int64_t h0, int64_t h1,
                             tiles *w) {
    const int64_t D = j->D, Dv = j->Dv, M = j->M, H = j->H;
    const la_tensor *k = j->k, *v = j->v;
    float lo, c;
    fast_feature(j->p->feature, &lo, &c);
    const __m512 lov = _mm512_set1_ps(lo);
    const float *kr[FT], *vr[FT];
    pf_list pf;
    blk_box bx;
    la_mhla_block_box(j->geom, blk, &bx);
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
        la_mhla_block_tokens(j->geom, &bx, p0, n, w->idx);
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
        if (j->rv) la_mhla_nc_rv_terms(j, task, &bx, zb, w);
    }
}

/* Phase 3, fast path: outputs of block blk of batch b for heads [h0, h1),
 * tile by tile as in phase 1 (q packed into w->q); written in place
 * when out is f32 with unit-stride rows (streaming stores when every row is
 * 64-byte aligned and Dv a multiple of 16), else through w->o and
 * la_mhla_store_rows. Row r gets fac = scale/(q̃·z̃ + eps) (per_query),
 * scale/(r̃ + eps) (released_vision) or scale (none). (w->v holds c·1ᵀS̃
 * per head, w->den the factors.) */
void la_mhla_nc_output_fast(const nc_job *j, int64_t b, int64_t blk, int64_t h0, int64_t h1,
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
    la_mhla_block_box(j->geom, blk, &bx);
    for (int64_t p0 = 0; p0 < bx.size; p0 += FT) {
        const int64_t n = bx.size - p0 < FT ? bx.size - p0 : FT;
        pf.n = 0;
        const int64_t na = tile_ahead(j->geom, blk, p0 + FT, w->idx);
        for (int64_t r = 0; r < na; r++)
            for (int64_t h = h0; h < h1; h++)
                pf_add_row(&pf, head_base(q, b, h) + w->idx[r] * q->nb[1], D * (int64_t)sizeof(float));
        la_mhla_block_tokens(j->geom, &bx, p0, n, w->idx);
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
            if (!direct) la_mhla_store_rows(out, b, h, w->idx, 0, n, w->o, Dv, NORM_NONE, NULL, eps);
        }
    }
    if (nt) _mm_sfence(); /* streaming stores visible before the caller reads out */
}
#endif /* __AVX512F__ */

int la_mhla_fast_ok(la_feature f, const la_tensor *q, const la_tensor *k, const la_tensor *v) {
#ifdef NC_FAST
    return la_mhla_nc_fast_ok(f, q, k, v);
#else
    (void)f, (void)q, (void)k, (void)v;
    return 0;
#endif
}
