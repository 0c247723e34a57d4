/* Paged indexer key cache on CUDA (docs/SPARSE.md "Paged serving").
 *
 * Pages live in device memory in the CPU layout (fp8: e4m3 values then
 * per-token fp32 scales); appends, pooled sums and gathers are
 * paged_cache.cu, the device view and key loads paged_common.cuh. Kernels:
 *   - scoring: one block per (query row, tile of 128 keys). The tile's keys
 *     are read through the block table and dequantized into shared memory
 *     ([dI][129] f32), the query's heads sit in shared memory, and thread j
 *     forms I = Σ_h w_h·ReLU(Σ_d q_hd·k_jd) with fmaf in the CPU kernel's
 *     order (d ascending, then h ascending), NaN kept by the ReLU.
 * DSA: scores [T, Lmax] (−inf outside each query's range), then la_topk.
 * HISA: block means (pooled sums / count, or pooled from the pages), block
 * scores with the first and last block of the range forced (+inf), la_topk
 * to m blocks, kept blocks sorted ascending, candidate scores [T, m·B],
 * la_topk, candidate -> position (-> slot). The block stage and the
 * candidate scores have faster variants with the same bits in
 * paged_hisa.cu (family "paged_hisa": "fused" means + scores + kept
 * blocks) and paged_hisa_cand.cu ("paged_hisa_cand": "blockmajor"
 * candidate scores for prefill chunks).
 * Tensor cores (variant "mma" of family "paged", the default where it
 * applies): bf16 keys with bf16 q, or e4m3 keys with e4m3 q (the q scale
 * folded into w), HI 32 or 64, dI 128 (e4m3: sm_90). DSA's scores and
 * HISA's candidate scores then run on the dense DSA mma.sync kernel in its
 * paged mode (paged_index_tc.cuh: bf16 m16n8k16 / e4m3 m16n8k32, fp32
 * accumulation, the per-token scale on the head sum), so they equal the
 * dense mma.sync kernel's on the gathered keys bit for bit; HISA's block
 * scores (fp32 means) stay on the fp32 kernel. "portable" forces the fp32
 * kernel (q of any float dtype or e4m3, the CPU's order). "wgmma",
 * "wgmma2" and "wgmma2r" run DSA's scores of an e4m3 cache on paged_wgmma.cu
 * (equal to the dense DSA v2 kernel on the gathered keys; HISA as "mma");
 * "wgmma2r" selects with topk_rows.cuh instead of la_topk, and "wgmma2g",
 * the e4m3 default (pg_select's switches), with topk_groups.cuh (pw2's
 * group maxima, one CTA per row; rows over TG_WMAX columns: "wgmma2r").
 * Metadata: block_table / context_lens / q_seq stay on the device; their
 * values are checked and clamped by paged_meta.cu's kernel, which records a
 * bad one in the cache's status words (copied to a pinned mirror after each
 * call: la_paged_status_cuda). */
#include <stdlib.h>
#include <string.h>

#include "core/devmem.h"
#include "cuda/common.cuh"
#include "cuda/paged_index.cuh"
#include "cuda/paged_hisa.cuh"
#include "cuda/paged_index_tc.cuh"
#include "cuda/paged_meta.cuh"
#include "cuda/paged_wgmma.cuh"
#include "cuda/topk_rows.cuh"
#include "cuda/topk_groups.cuh"
#include "cuda/select.cuh"

#include "cuda/paged_common.cuh"

namespace {

__global__ void pg_means_kernel(pg_cache C, const float *psum, int64_t max_blocks, const int32_t *table, int64_t maxp,
                                const int32_t *lens, int64_t B, int64_t nbmax, float *kbar) {
    const int64_t b = blockIdx.x, s = blockIdx.y, L = lens[s];
    if (b * B >= L) return;
    const int64_t cnt = L - b * B < B ? L - b * B : B;
    for (int64_t d = threadIdx.x; d < C.dI; d += blockDim.x) {
        float sum = 0.f;
        if (psum) {
            sum = psum[(s * max_blocks + b) * C.dI + d];
        } else {
            for (int64_t p = b * B; p < b * B + cnt; p++)
                sum += pg_load(C, (int64_t)table[s * maxp + p / C.ps] * C.ps + p % C.ps, d);
        }
        kbar[(s * nbmax + b) * C.dI + d] = sum / (float)cnt;
    }
}

enum { PG_TILE = 128, PG_HG = 16, PG_KLD = PG_TILE + 1 }; /* PG_KLD: padded key-tile row (no bank conflicts) */
enum { PG_DSA = 0, PG_CAND = 1, PG_BLOCKS = 2 };

struct pg_rows {
    const int32_t *table; /* [nseq][maxp] */
    int64_t maxp;
    const int32_t *row_seq, *row_end, *lens;
    const float *kbar;    /* PG_BLOCKS: [nseq][nbmax][dI] */
    int64_t nbmax, B;
    const int32_t *kept;  /* PG_CAND: [T][m] ascending, -1 at the end */
    int64_t m;
};

/* Row t = blockIdx.y; tile = blockIdx.x. PG_DSA: keys tile·128 + j, out[t][p];
 * PG_BLOCKS: block means, out[t][b]; PG_CAND: block kept[t][tile / tpb],
 * tokens (tile % tpb)·128 + j of it, out[t][slot·B + j]. Every column of the
 * row's output tile is written (−inf where invalid). */
__global__ void pg_score_kernel(pg_cache C, pg_rows R, la_cu_view q, la_cu_view w, int HI, int mode, float *out,
                                int64_t ldo) {
    extern __shared__ __align__(16) float sm[];
    const int64_t dI = C.dI, t = blockIdx.y;
    const int HIp = (HI + PG_HG - 1) / PG_HG * PG_HG;
    float *qs = sm, *ws = qs + (int64_t)HIp * dI, *kt = ws + HIp; /* qs: [dI][HIp], head fastest */
    const int j = threadIdx.x;
    const int64_t s = R.row_seq[t], e = R.row_end[t], L = R.lens[s];
    int64_t col0, key0, blk = -1;
    int64_t nvalid; /* keys of this tile that count */
    if (mode == PG_DSA) {
        col0 = key0 = (int64_t)blockIdx.x * PG_TILE;
        nvalid = e - key0;
    } else if (mode == PG_BLOCKS) {
        col0 = key0 = (int64_t)blockIdx.x * PG_TILE;
        const int64_t nblk = e > 0 ? (e + R.B - 1) / R.B : 0;
        nvalid = nblk - key0;
    } else {
        const int64_t tpb = (R.B + PG_TILE - 1) / PG_TILE;
        const int64_t slot = blockIdx.x / tpb, sub = blockIdx.x % tpb;
        blk = R.kept[t * R.m + slot];
        key0 = blk * R.B + sub * PG_TILE;
        col0 = slot * R.B + sub * PG_TILE;
        const int64_t inblk = R.B - sub * PG_TILE; /* tokens of the block left in this tile */
        nvalid = blk < 0 ? 0 : (e - key0 < inblk ? e - key0 : inblk);
    }
    if (nvalid > PG_TILE) nvalid = PG_TILE;
    int64_t ncols = PG_TILE; /* output columns of this tile (a candidate tile stops at its block's end) */
    if (mode == PG_CAND && R.B - col0 % R.B < PG_TILE) ncols = R.B - col0 % R.B;
    if (nvalid <= 0) {
        if (j < ncols && col0 + j < ldo) out[t * ldo + col0 + j] = -INFINITY;
        return;
    }
    for (int64_t i = j; i < (int64_t)HIp * dI; i += PG_TILE) {
        const int64_t d = i / HIp, h = i % HIp;
        qs[i] = h < HI ? pg_ldq(q, t * q.nb[0] + h * q.nb[1] + d * q.nb[2]) : 0.f;
    }
    for (int64_t h = j; h < HIp; h += PG_TILE) ws[h] = h < HI ? la_cu_ld(w.data, w.dt, t * w.nb[0] + h * w.nb[1]) : 0.f;
    for (int64_t i = j; i < PG_TILE * dI; i += PG_TILE) {
        const int64_t r = i / dI, d = i % dI, p = key0 + r;
        float v = 0.f;
        if (r < nvalid && p < L) {
            if (mode == PG_BLOCKS) v = R.kbar[(s * R.nbmax + p) * dI + d];
            else v = pg_load(C, (int64_t)R.table[s * R.maxp + p / C.ps] * C.ps + p % C.ps, d);
        }
        kt[d * PG_KLD + r] = v;
    }
    __syncthreads();
    if (j >= ncols || col0 + j >= ldo) return;
    float res = -INFINITY;
    if (j < nvalid) {
        /* PG_HG heads at a time in registers: each head's dot product runs over
         * d ascending, then the heads fold into the score in ascending order
         * (padded heads skipped), as in the CPU kernel */
        float sc = 0.f;
        for (int g = 0; g < HIp; g += PG_HG) {
            float acc[PG_HG];
#pragma unroll
            for (int r = 0; r < PG_HG; r++) acc[r] = 0.f;
            for (int64_t d = 0; d < dI; d++) {
                const float kv = kt[d * PG_KLD + j];
                const float4 *q4 = (const float4 *)(qs + d * HIp + g);
#pragma unroll
                for (int r4 = 0; r4 < PG_HG / 4; r4++) {
                    const float4 v = q4[r4];
                    acc[4 * r4 + 0] = fmaf(v.x, kv, acc[4 * r4 + 0]);
                    acc[4 * r4 + 1] = fmaf(v.y, kv, acc[4 * r4 + 1]);
                    acc[4 * r4 + 2] = fmaf(v.z, kv, acc[4 * r4 + 2]);
                    acc[4 * r4 + 3] = fmaf(v.w, kv, acc[4 * r4 + 3]);
                }
            }
#pragma unroll
            for (int r = 0; r < PG_HG; r++)
                if (g + r < HI) {
                    const float a = acc[r] < 0.f ? 0.f : acc[r]; /* NaN kept, as torch.relu */
                    sc = fmaf(ws[g + r], a, sc);
                }
        }
        res = sc;
        if (mode == PG_BLOCKS) {
            const int64_t nblk = (e + R.B - 1) / R.B, b = key0 + j;
            if (b == 0 || b == nblk - 1) res = INFINITY; /* sink and local blocks are always kept */
        }
    }
    out[t * ldo + col0 + j] = res;
}

/* kept [T][m]: ascending, −1 last (insertion sort, m small). */
__global__ void pg_sort_kept_kernel(int32_t *kept, int64_t T, int64_t m) {
    const int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (t >= T) return;
    int32_t *r = kept + t * m;
    for (int64_t i = 1; i < m; i++) {
        const int32_t x = r[i];
        const uint32_t kx = (uint32_t)x; /* −1 sorts last as 0xffffffff */
        int64_t j = i - 1;
        while (j >= 0 && (uint32_t)r[j] > kx) {
            r[j + 1] = r[j];
            j--;
        }
        r[j + 1] = x;
    }
}

/* idx[t][i] (view) from sel [T][k] (contiguous): candidates -> positions (HISA)
 * and/or positions -> slots. */
__global__ void pg_finish_kernel(const int32_t *sel, int64_t k, int64_t T, const int32_t *kept, int64_t m, int64_t B,
                                 int to_slots, const int32_t *table, int64_t maxp, const int32_t *row_seq, int64_t ps,
                                 int32_t *idx, int64_t nb0, int64_t nb1) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= T * k) return;
    const int64_t t = i / k, c = i % k;
    int64_t v = sel[i];
    if (v >= 0 && kept) v = (int64_t)kept[t * m + v / B] * B + v % B;
    if (v >= 0 && to_slots) v = (int64_t)table[(int64_t)row_seq[t] * maxp + v / ps] * ps + v % ps;
    idx[t * nb0 + c * nb1] = (int32_t)v;
}


la_status pg_launch_score(const pg_cache &C, const pg_rows &R, const la_tensor *q, const la_tensor *w, int mode,
                          int64_t tiles, int64_t T, float *out, int64_t ldo, cudaStream_t s) {
    const int64_t HI = q->ne[1], HIp = (HI + PG_HG - 1) / PG_HG * PG_HG;
    const size_t smem = (size_t)(HIp * C.dI + HIp + PG_KLD * C.dI) * sizeof(float);
    int dev = 0, maxsm = 0;
    LA_CU(cudaGetDevice(&dev));
    LA_CU(cudaDeviceGetAttribute(&maxsm, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (smem > (size_t)maxsm)
        return la_err(LA_ERR_UNSUPPORTED, "paged (cuda): q [T,HI,dI] with HI=%lld, dI=%lld needs %zu bytes of shared "
                                          "memory, over the device's %d", (long long)HI, (long long)C.dI, smem, maxsm);
    LA_CU(cudaFuncSetAttribute(pg_score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if (tiles <= 0 || T <= 0) return LA_OK;
    dim3 grid((unsigned)tiles, (unsigned)T);
    pg_score_kernel<<<grid, PG_TILE, smem, s>>>(C, R, la_cu_view_of(q), la_cu_view_of(w), (int)HI, mode, out, ldo);
    LA_CU_LAUNCH("paged scoring");
    return LA_OK;
}

/* la_topk on a contiguous device f32 [R, L] into a contiguous device int32 [R, k]. */
la_status pg_topk(float *sc, int64_t R, int64_t L, int32_t *dst, int64_t k, la_context *ctx) {
    la_tensor ts, ti;
    const int64_t sne[2] = {R, L}, ine[2] = {R, k};
    LA_TRY(la_tensor_init(&ts, sc, LA_F32, LA_DEVICE_CUDA, 2, sne));
    LA_TRY(la_tensor_init(&ti, dst, LA_I32, LA_DEVICE_CUDA, 2, ine));
    return la_topk(&ts, &ti, ctx);
}

/* Switches of the paged DSA decode path (one line each to turn off; the
 * kernels passed the device harness; the H200's times in docs/PERF.md):
 * kPagedWgmma2Default: an e4m3 cache with e4m3 q at HI 64, dI 128 on sm_90
 * takes DSA's scores on paged_wgmma.cu's pw2_kernel (equal to the dense
 * default, DSA v2, on the gathered keys) unless a variant is forced, at up
 * to kPagedWgmmaRowsPerSeq query rows per sequence (decode; more: prefill,
 * mma.sync); false: "mma" (the mma.sync kernel, equal to the dense mma.sync
 * variant).
 * kPagedTopkRows: that default selects with topk_rows.cuh or
 * topk_groups.cuh (kPagedTopkGroups) at up to kPagedRowsMaxT query rows
 * ("wgmma2g" or "wgmma2r"; false: "wgmma2", la_topk).
 * kPagedTopkGroups: "wgmma2g", topk_groups.cuh: pw2_kernel's epilogue
 * also stores the largest key of every 8 columns (T x W / 2 bytes), and one
 * CTA per row takes the k largest groups and orders their keys, where
 * la_topk reads the whole row in one CTA. Rows over TG_WMAX columns take
 * "wgmma2r": topk_rows.cuh (many CTAs per row: a histogram pass over the
 * score rows, then the candidates of the k-th key's bin and a counting-sort
 * order; its workspace: T x 192 KB; its histogram made in pw2_kernel's
 * epilogue with global atomics slowed the score kernel more than the top-k
 * gained).
 * kPagedTopkRange: la_topk scans each row's range [0, end) only (the
 * columns past it are -inf, so the same indices), not the table's capacity. */
constexpr bool kPagedWgmma2Default = true;
/* kPagedHisaPdl: HISA decode's fused chain (block scores, block top-k,
 * wgmma candidates, the short top-k) launched as programmatic dependents,
 * each kernel scheduled while its predecessor finishes (la_cu_launch_pdl);
 * false: plain launches (the same results). Family "paged_pdl" forces it:
 * "on" or "off". Off: it bought no measurable time (docs/PERF.md), and a
 * build with it on together with an L2-policy change (reverted) faulted in
 * the device harness; with it on alone the bench ran clean under
 * compute-sanitizer, but the harness has not run it. */
constexpr bool kPagedHisaPdl = false;
constexpr bool kPagedTopkRows = true;
constexpr bool kPagedTopkGroups = true; /* false: the default is "wgmma2r" */
constexpr bool kPagedTopkRange = true;
constexpr int64_t kPagedRowsMaxT = 256;
constexpr int64_t kPagedWgmmaRowsPerSeq = 16; /* the default's pw2: at most this many query rows per sequence */

/* The paged tensor-core path (family "paged": "mma" where it applies, else
 * or forced "portable": the fp32 kernel); *eb = 2 bf16, 1 e4m3, 0 fp32.
 * *wg, DSA's scores (HISA runs as "mma"): bits 0-2 the kernel (0 mma.sync,
 * 1 "wgmma", 2 "wgmma2", 3 "wgmma2r": pw2_kernel + topk_rows, 4 "wgmma2g":
 * pw2_kernel with group maxima + topk_groups), bit 3 set
 * for the default (kPagedWgmma2Default), which falls back to mma.sync at
 * the launch where la_sp_paged_wgmma_ok fails; a forced one fails there. */
la_status pg_select(const la_paged_index_cache *c, const la_tensor *q, int64_t T, la_context *ctx, int *eb,
                    int *wg, la_sp_score_args *a) {
    static const char *const names[] = {"mma", "portable", "wgmma", "wgmma2", "wgmma2r", "wgmma2g"};
    const char *forced = la_context_variant(ctx, "paged");
    int v = forced ? la_cu_variant_index(forced, names, 6) : 0;
    if (v < 0) return la_cu_unknown_variant("paged", forced, "mma, portable, wgmma, wgmma2, wgmma2r, wgmma2g");
    const int fv = v;
    *wg = v >= 2 ? v - 1 : 0; /* checked at the launch; otherwise as "mma" */
    if (v >= 2) v = 0;
    memset(a, 0, sizeof *a);
    a->q = q->data;
    a->q_dt = (int)q->dtype;
    a->q_nb0 = q->nb[0];
    a->q_nb1 = q->nb[1];
    a->q_nb2 = q->nb[2];
    a->T = T;
    a->HI = q->ne[1];
    a->dI = q->ne[2];
    a->hopper = la_cu_hopper(ctx);
    a->ctx = ctx;
    const int want = c->p.dtype == LA_BF16 ? 2 : c->p.dtype == LA_FP8_E4M3 ? 1 : 0;
    const bool ok = want && la_sp_paged_tc_ok(*a, want);
    if (v == 0 && forced && !ok)
        return la_cu_variant_unsupported("paged", names[fv], "a bf16 cache with bf16 q or an e4m3 cache with e4m3 q "
                                                             "(sm_90), HI 32 or 64, dI 128, q rows contiguous");
    *eb = v == 0 && ok ? want : 0;
    /* the default's wgmma shape (la_sp_paged_wgmma_ok's conditions known here) */
    if (!forced && kPagedWgmma2Default && *eb == 1 && a->hopper && a->HI == 64 && a->dI == 128 && a->q_nb2 == 1 &&
        a->q_nb1 % 16 == 0 && a->q_nb0 % 16 == 0 && ((uintptr_t)a->q & 15) == 0 && c->page_bytes % 16 == 0 &&
        ((uintptr_t)c->pages & 15) == 0 && T <= 65535)
        *wg = 8 | (kPagedTopkRows && T <= kPagedRowsMaxT ? (kPagedTopkGroups ? 4 : 3) : 2);
    la_cu_report(ctx, "paged", *eb ? ((*wg & 7) ? names[(*wg & 7) + 1] : "mma") : "portable",
                 "T=%lld HI=%lld dI=%lld cache %s q %s%s", (long long)T, (long long)a->HI, (long long)a->dI,
                 la_dtype_name(c->p.dtype), la_dtype_name(q->dtype), (*wg & 7) ? " (DSA; HISA as mma)" : "");
    return LA_OK;
}

/* DSA's top-k of the score rows [T, W] into sel [T, k]: la_topk's kernel,
 * over [0, end[t]) of each row with kPagedTopkRange (same indices: the
 * columns past end[t] are -inf). */
/* la_sp_topk's args for k of each contiguous score row [T, W] into out
 * (row stride out_ld, column stride out_cs); the rest zero */
la_sp_topk_args pg_topk_args(const float *sc, int64_t T, int64_t W, int64_t k, int32_t *out, int64_t out_ld,
                             int64_t out_cs) {
    la_sp_topk_args t;
    memset(&t, 0, sizeof t);
    t.scores = sc;
    t.R = T;
    t.L = W;
    t.ld = W;
    t.cs = 1;
    t.k = k;
    t.out = out;
    t.out_ld = out_ld;
    t.out_cs = out_cs;
    return t;
}

la_status pg_topk_dsa(const float *sc, int64_t T, int64_t W, const int32_t *end, int32_t *sel, int64_t k,
                      la_context *ctx) {
    if (!kPagedTopkRange) return pg_topk((float *)sc, T, W, sel, k, ctx);
    la_sp_topk_args t = pg_topk_args(sc, T, W, k, sel, k, 1);
    t.use_range = 1;
    t.range.end = end;
    t.range.end_nb = 1;
    t.range.T = T;
    t.range.L = W;
    t.range.blk = 1;
    return la_sp_topk(t, ctx, la_cu_stream(ctx));
}

} // namespace


static la_status pg_topk_launch(const la_paged_index_cache *c, const la_index_params *p, int hisa,
                                const la_tensor *q, const la_tensor *w, const la_paged_query *pq, la_tensor *idx,
                                la_context *ctx) {
    cudaStream_t s = la_cu_stream(ctx);
    const pg_cache C = pg_of(c);
    const int64_t T = q->ne[0], topk = p->topk, ps = c->p.page_size;
    if (T == 0) return LA_OK;
    int eb = 0, wg = 0; /* tensor cores: 2 bf16, 1 e4m3; 0 the fp32 kernel; wg: DSA on wgmma */
    la_sp_score_args a;
    LA_TRY(pg_select(c, q, T, ctx, &eb, &wg, &a));
    const la_tensor *bt = pq->block_table;
    const int return_slots = pq->return_slots != 0;
    const int64_t nseq = bt->ne[0], maxp = bt->ne[1] > 0 ? bt->ne[1] : 1;
    /* score rows span the block table's capacity (the lengths stay on the device) */
    const int64_t Lmax = bt->ne[1] * ps > 0 ? bt->ne[1] * ps : 1;
    const int pooled = hisa && c->psum;
    /* query rows per sequence: next_n, or at most T (q_seq); with q_seq over
     * the grid's 65535 row slices, q_seq's largest count is read back */
    int64_t maxnq = pq->q_seq ? T : pq->next_n;
    if (pq->q_seq && nseq * la_cu_cdiv(maxnq, 64) > 65535) LA_TRY(la_pg_max_rows(pq->q_seq, nseq, &maxnq));
    /* device metadata: clamped page table, then the rows (paged_index_tc.cuh's sc_pages layout) */
    const int64_t nmeta = 3 * T + 2 * nseq + 1;
    /* one workspace for the page table, the row metadata and (HISA) the
     * block scores, kept blocks and candidate scores: each allocation is a
     * host call before or between the launches */
    const int64_t B = hisa ? p->block : 1, nbmax = la_cu_cdiv(Lmax, B);
    const int64_t m = p->block_topk < nbmax ? p->block_topk : nbmax;
    const int64_t W = m * B > topk ? m * B : topk; /* HISA's candidate columns */
    size_t off_row, off_bsc = 0, off_kept = 0, off_cand = 0, total;
    {
        size_t bytes;
        LA_TRY(la_mul_size((size_t)nseq, (size_t)maxp * 4u, &bytes, "paged (cuda): page table"));
        off_row = (bytes + 255) / 256 * 256;
        total = off_row + ((size_t)nmeta * 4 + 255) / 256 * 256;
        if (hisa) {
            off_bsc = total;
            LA_TRY(la_mul_size((size_t)T, (size_t)nbmax * 4u, &bytes, "paged (cuda): block scores"));
            off_kept = off_bsc + (bytes + 255) / 256 * 256;
            off_cand = off_kept + ((size_t)T * (size_t)m * 4u + 255) / 256 * 256;
            LA_TRY(la_mul_size((size_t)T, (size_t)W * 4u, &bytes, "paged (cuda): candidate scores"));
            total = off_cand + bytes;
        }
    }
    la_cu_ws dws;
    LA_TRY(la_cu_ws_alloc(&dws, total, s, "paged call workspace"));
    uint8_t *const ws0 = (uint8_t *)dws.p;
    pg_meta M;
    M.bt = (const int32_t *)bt->data;
    M.bt0 = bt->nb[0];
    M.bt1 = bt->nb[1];
    M.maxp = bt->ne[1];
    M.cl = (const int32_t *)pq->context_lens->data;
    M.cl0 = pq->context_lens->nb[0];
    M.qs = pq->q_seq ? (const int32_t *)pq->q_seq->data : nullptr;
    M.qs0 = pq->q_seq ? pq->q_seq->nb[0] : 0;
    M.next_n = pq->next_n;
    M.nseq = nseq;
    M.T = T;
    M.num_pages = c->p.num_pages;
    M.ps = ps;
    M.cap = bt->ne[1] * ps;
    M.lenmax = pooled && c->p.max_seq_len < M.cap ? c->p.max_seq_len : M.cap;
    M.pcount = pooled ? c->pcount_dev : nullptr;
    M.max_blocks = c->max_blocks;
    M.B = p->block;
    M.status = c->status_dev;
    M.mirror = c->status_mirror;
    M.tab = (int32_t *)ws0;
    M.row_seq = (int32_t *)(ws0 + off_row);
    M.row_end = M.row_seq + T;
    M.lens = M.row_end + T;
    M.rows = M.lens + nseq;
    M.row0 = M.rows + T;
    M.after_scores = 0;
    /* HISA's families first: with "paged_meta_overlap" the metadata kernel
     * is launched after the block scores (below) */
    int fused = 0;
    bool pdl = kPagedHisaPdl, overlap = kPagedMetaOverlap;
    if (hisa) {
        LA_TRY(la_ph_select(ctx, q->ne[1], C.dI, &fused));
        if (const char *pv = la_context_variant(ctx, "paged_pdl")) {
            if (strcmp(pv, "on") && strcmp(pv, "off")) return la_cu_unknown_variant("paged_pdl", pv, "on, off");
            pdl = !strcmp(pv, "on");
        }
        if (const char *ov = la_context_variant(ctx, "paged_meta_overlap")) {
            if (strcmp(ov, "on") && strcmp(ov, "off"))
                return la_cu_unknown_variant("paged_meta_overlap", ov, "on, off");
            overlap = !strcmp(ov, "on");
        }
    }
    /* the rows derived from context_lens in the block-score kernel (M's
     * values: the same clamps), the metadata kernel launched after it as
     * its programmatic dependent: the fused scores on the pooled sums
     * (no means kernel reading the metadata before them), without q_seq or
     * the means pass, which read its outputs; sm_90 (griddepcontrol) */
    const bool sm90 = la_cu_device_attr(cudaDevAttrComputeCapabilityMajor, 0) >= 9;
    const bool ov_ok = hisa && fused && pooled && !pq->q_seq && !la_ph_means_pass(T, nseq) && sm90;
    const bool meta_after = overlap && ov_ok;
    if (!meta_after) LA_TRY(la_pg_meta_launch(M, s));
    pg_rows R = {};
    R.table = M.tab;
    R.maxp = maxp;
    R.row_seq = M.row_seq;
    R.row_end = M.row_end;
    R.lens = M.lens;
    /* the tensor-core kernel's view of the batch (paged_index_tc.cuh) */
    sc_pages pg;
    pg.pages = c->pages;
    pg.page_bytes = c->page_bytes;
    pg.ps = (int32_t)ps;
    pg.fp8 = eb == 1;
    pg.table = R.table;
    pg.maxp = maxp;
    pg.lens = R.lens;
    pg.row_seq = R.row_seq;
    pg.rows = M.rows;
    pg.row0 = M.row0;
    pg.rsplit = (int32_t)la_cu_cdiv(maxnq, 64);
    a.w = w->data;
    a.w_dt = (int)w->dtype;
    a.w_nb0 = w->nb[0];
    a.w_nb1 = w->nb[1];
    a.k = c->pages;
    a.k_dt = eb == 1 ? LA_FP8_E4M3 : LA_BF16;
    a.Lk = Lmax;
    a.range.end = R.row_end;
    a.range.end_nb = 1;
    a.range.T = T;
    a.range.L = Lmax;
    a.range.blk = 1;
    const la_cu_view iv = la_cu_view_of(idx);
    la_cu_ws dsc, dsel;
    if (!hisa) {
        const int64_t W = Lmax > topk ? Lmax : topk; /* la_topk keeps k <= row length */
        size_t bytes;
        LA_TRY(la_mul_size((size_t)T, (size_t)W * 4u, &bytes, "paged (cuda): score rows"));
        LA_TRY(la_cu_ws_alloc(&dsc, bytes, s, "paged score rows"));
        const int wk = wg & 7; /* DSA's scores: 0 mma.sync, 1 wgmma, 2 wgmma2, 3 wgmma2 + topk_rows, 4 + topk_groups */
        static const char *const wkn[] = {"mma", "wgmma", "wgmma2", "wgmma2r", "wgmma2g"};
        int use = 0;
        if (eb) {
            a.ncols = W;
            a.out = (float *)dsc.p;
            a.out_ld = W;
            const bool wok = eb == 1 && la_sp_paged_wgmma_ok(a, pg);
            if (wk && !(wg & 8) && !wok)
                return la_cu_variant_unsupported("paged", wkn[wk],
                                                 "an e4m3 cache with e4m3 q (sm_90), HI 64, dI 128, q rows contiguous");
            use = wok ? wk : 0;
            /* the pw kernels read a sequence's keys once per query row (the
             * mma.sync kernel once per 64 of its rows): the default keeps
             * mma.sync where a sequence has many rows (prefill) */
            if ((wg & 8) && T > kPagedWgmmaRowsPerSeq * nseq) {
                use = 0;
                la_cu_report(ctx, "paged", "mma", "DSA scores: T=%lld rows over %lld sequences", (long long)T,
                             (long long)nseq);
            }
            /* topk_rows / topk_groups: k <= their maximum, la_topk's family not forced (then la_topk) */
            if ((use == 3 || use == 4) && (topk > TR_KMAX || la_context_variant(ctx, "topk"))) use = 2;
            /* topk_groups: rows of at most TG_WMAX columns (longer: topk_rows) */
            if (use == 4 && W > TG_WMAX) {
                use = 3;
                la_cu_report(ctx, "paged", "wgmma2r", "DSA top-k: rows of %lld columns (wgmma2g: at most %d)",
                             (long long)W, TG_WMAX);
            }
            if (use == 3 || use == 4) {
                la_tr_args tr;
                memset(&tr, 0, sizeof tr);
                tr.scores = (const float *)dsc.p;
                tr.ld = W;
                tr.T = T;
                tr.W = W;
                tr.end = R.row_end;
                tr.k = (int32_t)topk;
                tr.to_slots = return_slots;
                tr.table = R.table;
                tr.maxp = maxp;
                tr.ps = ps;
                tr.row_seq = R.row_seq;
                tr.idx = (int32_t *)iv.data;
                tr.nb0 = iv.nb[0];
                tr.nb1 = iv.nb[1];
                if (use == 4) { /* the group maxima of every row's tiles: no memset (only those are read) */
                    la_cu_ws dg;
                    const int64_t gld = la_cu_cdiv(W, 64) * 8;
                    LA_TRY(la_cu_ws_alloc(&dg, (size_t)T * (size_t)gld * 4u, s, "paged top-k group maxima"));
                    LA_TRY(la_sp_scores_paged_wgmma2(a, pg, s, la_pw_gmax{(uint32_t *)dg.p, gld}));
                    la_tg_args tg;
                    memset(&tg, 0, sizeof tg);
                    tg.r = tr;
                    tg.gmax = (const uint32_t *)dg.p;
                    tg.gmax_ld = gld;
                    return la_tg_launch(tg, ctx, s);
                }
                la_cu_ws dh, dcand;
                const size_t hb = (size_t)T * (TR_BINS + TR_CBINS + 1) * 4u; /* hist, coarse, cnt: zeroed together */
                /* the scores first: the host's allocations and memset then
                 * overlap them instead of delaying the GPU's largest kernel */
                LA_TRY(la_sp_scores_paged_wgmma2(a, pg, s)); /* the histograms: la_tr_launch's own pass */
                LA_TRY(la_cu_ws_alloc(&dh, hb, s, "paged top-k histograms"));
                LA_TRY(la_cu_ws_alloc(&dcand, (size_t)T * TR_CAP * 8u, s, "paged top-k candidates"));
                LA_CU(cudaMemsetAsync(dh.p, 0, hb, s));
                uint32_t *hist = (uint32_t *)dh.p;
                tr.hist = hist;
                tr.coarse = hist + (size_t)T * TR_BINS;
                tr.cnt = tr.coarse + (size_t)T * TR_CBINS;
                tr.cand = (uint64_t *)dcand.p;
                return la_tr_launch(tr, ctx, s);
            }
            if (use == 1) LA_TRY(la_sp_scores_paged_wgmma(a, pg, s));
            else if (use == 2) LA_TRY(la_sp_scores_paged_wgmma2(a, pg, s));
            else LA_TRY(la_sp_scores_paged(a, pg, eb, nseq, true, s));
        } else if (wk) {
            return la_cu_variant_unsupported("paged", wkn[wk], "an e4m3 cache with e4m3 q (sm_90), HI 64, dI 128");
        } else {
            LA_TRY(pg_launch_score(C, R, q, w, PG_DSA, la_cu_cdiv(W, PG_TILE), T, (float *)dsc.p, W, s));
        }
        LA_TRY(la_cu_ws_alloc(&dsel, (size_t)T * (size_t)topk * 4u, s, "paged selection"));
        LA_TRY(pg_topk_dsa((const float *)dsc.p, T, W, R.row_end, (int32_t *)dsel.p, topk, ctx));
        const int64_t n = T * topk;
        pg_finish_kernel<<<(unsigned)la_cu_cdiv(n, 256), 256, 0, s>>>(
            (const int32_t *)dsel.p, topk, T, nullptr, 0, 1, return_slots, R.table, maxp, R.row_seq, ps,
            (int32_t *)iv.data, iv.nb[0], iv.nb[1]);
        LA_CU_LAUNCH("paged finish");
        return LA_OK;
    }
    /* HISA: the block stage on family "paged_hisa" (paged_hisa.cu: "fused",
     * the default where it applies; "classic": the chain below) */
    la_cu_ws dkbar;
    size_t bytes;
    float *const bsc = (float *)(ws0 + off_bsc), *const cand = (float *)(ws0 + off_cand);
    int32_t *const kept = (int32_t *)(ws0 + off_kept);
    /* the fused path's score kernel forms the means from the pooled sums
     * itself (the same division), or reads pg_means_kernel's */
    const int own_means = fused && pooled;
    if (!own_means) {
        LA_TRY(la_mul_size((size_t)(nseq * nbmax), (size_t)C.dI * 4u, &bytes, "paged (cuda): block means"));
        LA_TRY(la_cu_ws_alloc(&dkbar, bytes, s, "paged block means"));
        pg_means_kernel<<<dim3((unsigned)nbmax, (unsigned)nseq), 128, 0, s>>>(C, c->psum, c->max_blocks, R.table, maxp,
                                                                              R.lens, B, nbmax, (float *)dkbar.p);
        LA_CU_LAUNCH("paged block means");
        R.kbar = (const float *)dkbar.p;
    }
    R.nbmax = nbmax;
    R.B = B;
    if (fused) {
        ph_blk_args ba = {};
        ba.psum = own_means ? c->psum : nullptr;
        ba.max_blocks = c->max_blocks;
        ba.kbar = R.kbar;
        ba.nbmax = nbmax;
        ba.row_seq = R.row_seq;
        ba.row_end = R.row_end;
        ba.lens = R.lens;
        ba.q = la_cu_view_of(q);
        ba.w = la_cu_view_of(w);
        ba.HI = (int)q->ne[1];
        ba.dI = (int)C.dI;
        ba.B = B;
        ba.T = T;
        ba.w3 = fused == 2;
        ba.pdl = pdl;
        ba.out = bsc;
        if (meta_after) {
            ba.cl = M.cl;
            ba.cl0 = M.cl0;
            ba.next_n = M.next_n;
            ba.cap = M.cap;
            ba.lenmax = M.lenmax;
        }
        la_cu_report(ctx, "paged_meta_overlap", ba.cl ? "on" : "off", "%s",
                     ba.cl ? "block scores from context_lens, beside the metadata kernel"
                     : !overlap ? "forced off"
                     : !own_means ? "no pooled sums (the means kernel reads the metadata)"
                     : pq->q_seq ? "q_seq rows"
                     : !sm90 ? "before sm_90" : "prefill: the means pass reads the metadata");
        LA_TRY(la_ph_block_scores(ba, nseq, ctx, s));
        if (meta_after) { /* beside the block scores; it completes after them */
            M.after_scores = 1;
            LA_TRY(la_pg_meta_launch(M, s));
        }
        LA_TRY(la_ph_block_topk(bsc, T, nbmax, m, kept, pdl, s));
    } else {
        LA_TRY(pg_launch_score(C, R, q, w, PG_BLOCKS, la_cu_cdiv(nbmax, PG_TILE), T, bsc, nbmax, s));
        LA_TRY(pg_topk(bsc, T, nbmax, kept, m, ctx));
        pg_sort_kept_kernel<<<(unsigned)la_cu_cdiv(T, 128), 128, 0, s>>>(kept, T, m);
        LA_CU_LAUNCH("paged kept sort");
    }
    R.kept = kept;
    R.m = m;
    /* family "paged_hisa_cand": block-major candidate scores (paged_hisa_cand.cu),
     * the wgmma gather (paged_wgmma.cu) or the mma.sync gather kernels */
    la_sp_score_args ag = a; /* the gather mode's args, as set below */
    ag.blocks = R.kept;
    ag.blocks_ld = m;
    ag.m = m;
    ag.B = (int)B;
    ag.ncols = W;
    ag.out = cand;
    ag.out_ld = W;
    const bool wg_ok = eb == 1 && la_sp_paged_wgmma_blocks_ok(ag, pg);
    int bm = 0, ring = 1, wgk = 0;
    LA_TRY(la_ph_cand_select(ctx, eb, q->ne[1], B, T, nseq, wg_ok, &bm, &ring, &wgk));
    if (bm) {
        pc_args pa = {};
        pa.T = T;
        pa.m = m;
        pa.nbmax = nbmax;
        pa.kept = R.kept;
        pa.row_seq = R.row_seq;
        pa.row_end = R.row_end;
        pa.lens = R.lens;
        pa.table = R.table;
        pa.maxp = maxp;
        pa.pages = c->pages;
        pa.page_bytes = c->page_bytes;
        pa.ps = (int32_t)ps;
        pa.fp8 = eb == 1;
        pa.q = q->data;
        pa.q_nb0 = q->nb[0];
        pa.q_nb1 = q->nb[1];
        pa.w = w->data;
        pa.w_dt = (int)w->dtype;
        pa.w_nb0 = w->nb[0];
        pa.w_nb1 = w->nb[1];
        pa.Lk = Lmax;
        pa.out = cand;
        pa.out_ld = W;
        pa.ncols = W;
        LA_TRY(la_ph_cand_scores(pa, eb, (int)q->ne[1], nseq, s));
    } else if (wgk) {
        LA_TRY(la_sp_scores_paged_wgmma_blocks(ag, pg, pdl, s));
    } else if (eb) {
        /* candidate p of row t: token p % B of block kept[t][p / B]; columns
         * past m·B (topk > m·B) are -inf */
        LA_TRY(la_sp_scores_paged(ag, pg, eb, nseq, ring != 0, s));
    } else if (W > m * B) {
        /* columns past m·B (topk > m·B): −inf, written as the tiles of empty DSA ranges */
        pg_rows E = R;
        LA_TRY(la_cu_ws_alloc(&dsel, (size_t)T * 4u, s, "paged zero ends"));
        LA_CU(cudaMemsetAsync(dsel.p, 0, (size_t)T * 4u, s));
        E.row_end = (const int32_t *)dsel.p; /* empty ranges: every DSA column −inf */
        LA_TRY(pg_launch_score(C, E, q, w, PG_DSA, la_cu_cdiv(W, PG_TILE), T, cand, W, s));
    }
    if (!eb) LA_TRY(pg_launch_score(C, R, q, w, PG_CAND, m * la_cu_cdiv(B, PG_TILE), T, cand, W, s));
    if (!return_slots && W == m * B) {
        /* positions: the top-k maps each candidate column through the kept
         * blocks itself (la_sp_topk's gather mode: ascending kept blocks map
         * columns to positions in the same order, so the same indices as
         * the finish kernel's mapping of its columns) and writes idx, so no
         * finish kernel follows. Not when k > m·B: the gather mode reads a
         * block for every column of a row. */
        la_sp_topk_args ta = pg_topk_args(cand, T, W, topk, (int32_t *)iv.data, iv.nb[0], iv.nb[1]);
        ta.blocks = R.kept;
        ta.blocks_ld = m;
        ta.B = (int)B;
        ta.pdl = pdl && wgk; /* right after the wgmma candidates */
        return la_sp_topk(ta, ctx, s);
    }
    la_cu_ws dsel2;
    LA_TRY(la_cu_ws_alloc(&dsel2, (size_t)T * (size_t)topk * 4u, s, "paged selection"));
    LA_TRY(pg_topk(cand, T, W, (int32_t *)dsel2.p, topk, ctx));
    const int64_t n = T * topk;
    pg_finish_kernel<<<(unsigned)la_cu_cdiv(n, 256), 256, 0, s>>>((const int32_t *)dsel2.p, topk, T, R.kept, m, B,
                                                                 return_slots, R.table, maxp, R.row_seq, ps,
                                                                 (int32_t *)iv.data, iv.nb[0], iv.nb[1]);
    LA_CU_LAUNCH("paged finish");
    return LA_OK;
}

/* No status copy follows the launches: the metadata kernel sets the
 * cache's mapped host word itself when it finds an error (pg_flag), so the
 * next call sees it without waiting and without a copy on the stream (an
 * error becomes visible once that kernel has run, never lost: the device
 * words stay set until la_paged_index_cache_check or a call that sees the
 * word reads and clears them). */
extern "C" la_status la_paged_topk_cuda(const la_paged_index_cache *c, const la_index_params *p, int hisa,
                                        const la_tensor *q, const la_tensor *w, const la_paged_query *pq,
                                        la_tensor *idx, la_context *ctx) {
    return pg_topk_launch(c, p, hisa, q, w, pq, idx, ctx);
}
