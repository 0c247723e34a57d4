/* HISA indexer and block-sparse baseline on the GPU (SPEC §7).
 *   1. block means k̄_b (fp32 sums in token order, / true count), stored in
 *      k's precision class (bf16 for bf16 keys so the tensor-core score
 *      kernel runs on them, f32 otherwise);
 *   2. block scores with the indexer score kernel over k̄ in block units,
 *      the first and last block meeting [start, end) forced to +inf, top-m
 *      with the exact top-k (ties -> lower block);
 *   3. HISA: candidate scores over the m*B tokens of the kept blocks
 *      (the block-major hb2_kernel; the DSA score kernels in
 *      gather mode for other shapes or with LA_CUDA_HISA_PATH=old, same
 *      per-key arithmetic), then the
 *      exact top-k with candidate -> token mapping.
 *      Block-sparse: the kept blocks in rank order, each block's valid
 *      tokens ascending, -1 padding (as src/cpu/hisa_cpu.c). */
#include "cuda_ops.h"
#include "select.cuh"
#include "sparse_common.cuh"
#include "wgmma.cuh"

#include <cuda_fp8.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

la_status la_sp_validate_fp8_cuda(const char *op, const la_index_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *w, const la_tensor *start,
                                  const la_tensor *end, const la_tensor *idx);
la_status la_sp_fp8_to_f32(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                           la_cu_ws *qf, la_cu_ws *kf, la_tensor *tq, la_tensor *tk, cudaStream_t s);
la_status la_sp_fp8_check_scales(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                                 cudaStream_t s);
la_status la_sp_validate_idx_cuda(const char *op, const la_index_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *w, const la_tensor *start,
                                  const la_tensor *end, const la_tensor *idx);

__global__ void hs_pool_kernel(const void *k, int dt, int64_t nb0, int64_t nb1, int64_t L,
                               int64_t dI, int64_t B, void *out, int out_dt) {
    const int64_t b = blockIdx.y;
    const int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= dI) return;
    const int64_t s0 = b * B, s1 = min(s0 + B, L);
    float acc = 0.f;
    for (int64_t s = s0; s < s1; s++) acc += la_cu_ld(k, dt, s * nb0 + d * nb1);
    la_cu_st(out, out_dt, b * dI + d, acc / (float)(s1 - s0));
}
/* The same sums for contiguous bf16 keys, two dimensions per thread (one
 * 4-byte load per token) and the token loop unrolled so that many loads
 * are in flight (the generic kernel above keeps about one per thread).
 * Per dimension the arithmetic is identical: fp32 sum in token order. */
__global__ void hs_pool_bf16_kernel(const __nv_bfloat16 *k, int64_t nb0, int64_t L, int64_t dI,
                                    int64_t B, __nv_bfloat16 *out) {
    const int64_t b = blockIdx.y;
    const int64_t d = 2 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (d >= dI) return;
    const int64_t s0 = b * B, s1 = min(s0 + B, L);
    float a0 = 0.f, a1 = 0.f;
#pragma unroll 16
    for (int64_t s = s0; s < s1; s++) {
        const float2 v = __bfloat1622float2(*(const __nv_bfloat162 *)(k + s * nb0 + d));
        a0 += v.x;
        a1 += v.y;
    }
    const float n = (float)(s1 - s0);
    *(__nv_bfloat162 *)(out + b * dI + d) = __floats2bfloat162_rn(a0 / n, a1 / n);
}

/* Block-sparse output: kept blocks in rank order, valid tokens ascending. */
__global__ void hs_blocksparse_kernel(const int32_t *kept, int64_t m, la_sp_range range, int64_t B,
                                      int64_t topk, int32_t *out, int64_t out_ld, int64_t out_cs) {
    const int64_t t = blockIdx.x;
    int64_t lo, hi;
    la_sp_row_range(range, t, &lo, &hi);
    /* a block's first slot = sum of the valid token counts of earlier ranks */
    __shared__ int64_t base;
    if (threadIdx.x == 0) base = 0;
    __syncthreads();
    for (int64_t r = 0; r < m; r++) {
        const int32_t b = kept[t * m + r];
        if (b < 0) break;
        const int64_t a = max((int64_t)b * B, lo), e = min(((int64_t)b + 1) * B, hi);
        const int64_t n0 = base;
        for (int64_t s = a + threadIdx.x; s < e; s += blockDim.x) {
            const int64_t j = n0 + (s - a);
            if (j < topk) out[t * out_ld + j * out_cs] = (int32_t)s;
        }
        __syncthreads();
        if (threadIdx.x == 0) base = n0 + (e > a ? e - a : 0);
        __syncthreads();
    }
    const int64_t n = base < topk ? base : topk;
    for (int64_t j = n + threadIdx.x; j < topk; j += blockDim.x) out[t * out_ld + j * out_cs] = -1;
}

/* ---- stage 2, block-major -----------------------------------------------
 * The gather kernels' loop inverted: per kept block b, its keys are loaded
 * once as the wgmma A tile (128 keys = two m64 tiles, keys = M as in DSA v2)
 * and the queries that kept b stream through as the B operand (2 queries x
 * 64 heads = n128 per chunk), so a (query, kept block) pair moves the 16 KB
 * query block instead of the 32 KB of gathered key rows.
 *   1. bucketing (counting sort of the T*m (query, rank) pairs by block):
 *      hb_count_kernel (counts; -inf rows for ranks with no block),
 *      hb_scan_lpt_kernel (list offsets, slices of <= HB_QS queries, longest
 *      first, slice -> block table), hb_fill_kernel (pair ids e = t*m + r);
 *   2. hb2_kernel (below): one CTA (one warpgroup, 2 CTAs per SM) per
 *      (slice, tile of 128 keys of the block).
 * The shared-memory layout, wgmma shape (8 k-steps in order) and the
 * head-sum epilogue are DSA v2's (sc_wgmma_kernel in dsa.cu), so every
 * (query, key) score is v2's bit for bit; each score lands at the candidate
 * column r*B + j of query t (the position the gather kernels write and the
 * token top-k maps back through kept[]). Taken for bf16 (and e4m3: the fp8
 * route) q/k with HI = 64, dI = 128 (any B: keys of a block are cut into
 * 128-key tiles, rows past B zero and not stored); other dtypes/shapes use
 * the gather kernels.
 * (The first block-major kernels, hb_kernel / hb8_kernel with the variants
 * "block", "pipe_grid", "block_lpt" and "pipe", measured 0.39-0.80 ms for
 * the candidate scores at 64K against hb2_kernel's 0.23 ms, same scores;
 * removed, they are in the history before this comment.) */
#define HB_THREADS 128
#define HB_ROWS 128 /* keys per A tile */
#define HB_NQ 2     /* queries per chunk */
#define HB_HI 64
#define HB_DI 128
#define HB_BROWS (HB_NQ * HB_HI)
#define HB_STAGES 2
#define HB_QS 64 /* queries per slice (CTA) */

/* swizzled layout, descriptor, wgmma and fences: src/cuda/wgmma.cuh (as DSA v2) */
/* Sizes for element width EB (2 = bf16; 1 = e4m3: 128-byte rows, one
 * swizzle atom, 4 k32 steps). */
template <int EB> struct hb_cfg {
    static constexpr int RB = HB_DI * EB, CPR = RB / 16;
    static constexpr int A_BYTES = HB_ROWS * RB, B_BYTES = HB_BROWS * RB;
};

/* Per-call bucketing state. */
struct hb_lists {
    const int32_t *list; /* pair ids e = t*m + r, grouped by block */
    const int32_t *boff, *cnt; /* per block: first list entry, number of pairs */
    const int32_t *sl_blk, *sl_idx; /* per slice: its block, its index in the block */
    const int32_t *nsl; /* number of slices */
    int32_t m;
};

/* 4-byte cp.async (zero fill past src_bytes = 0): f32 head weights */
__device__ __forceinline__ void hb_cp4z(void *sdst, const void *gsrc, int src_bytes) {
    const uint32_t sa = (uint32_t)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sa), "l"(gsrc),
                 "r"(src_bytes));
}

/* ---- stage 2: hb2_kernel; stage 1's block scores on the same kernel
 * (DENSE) ------------------------------------------------------------------
 * One warpgroup per CTA; per slice: the A tile (the block's 128 keys) once,
 * the slice's query table once, then chunks of 2 queries double-buffered by
 * cp.async behind __syncthreads, both m-tiles' wgmma issued together and the
 * next chunk's copies issued behind them, with DSA v2's instruction cuts
 * (dsa.cu, the comment above V2_WG):
 *  - descriptors: (tile descriptor + constant), la_wg_desc(x + o) =
 *    la_wg_desc(x) + o/16 for a shared-window address x + o < 2^18;
 *  - copies: thread tid always copies the 16-byte column c = tid % CPR of the
 *    rows r0 + RP·j (r0 = tid / CPR, RP = 128 / CPR = 8 bf16 / 16 e4m3, a
 *    multiple of 8, so the swizzle is fixed per thread): one shared offset,
 *    one global offset, per chunk a 64-bit base per query and one add per
 *    copy; the A tile the same way;
 *  - the slice's query table holds per query the q byte offset, the output
 *    row offset t·out_ld + r·B (-1 past nq), the w offset and the valid key
 *    range relative to the block's first token (clamped to [0, B], L folded
 *    in), so the store is a 32-bit range test and one pointer;
 *  - the chunk's weights go to registers once for both m-tiles
 *    (la_wg_headsum_w + la_wg_relu_headsum_wr, as DSA v2).
 * So every stored score is DSA v2's bit for bit.
 * DENSE: the same kernel over one "block" holding all Lk keys (stage 1: the
 * nb block means as keys, a.B = a.ncols = Lk), slices = runs of dqs
 * consecutive queries, out[t·out_ld + key]; the valid range in a.range's
 * units (block units: range.blk = B) with the first and last valid key
 * forced to +inf (force_ends), as the mma.sync score kernel's epilogue
 * (dsa.cu: -inf outside, +inf at lo and hi - 1). */
struct hb2_q {
    int64_t qoff;     /* t·q_nb0·EB (bytes) */
    int64_t orow;     /* t·out_ld + r·B, -1 past the slice's queries */
    int64_t woff;     /* t·w_nb0 */
    int32_t jlo, jhi; /* stored keys jb in [jlo, jhi) get the score, others -inf */
    int32_t jf0, jf1; /* DENSE with force_ends: keys forced to +inf (-1: none) */
};
template <int EB> struct hb2_cfg {
    using C = hb_cfg<EB>;
    static constexpr int RP = HB_THREADS / C::CPR; /* rows per pass */
    static constexpr int JQ = HB_HI / RP;          /* copies per query and chunk */
    static constexpr int JA = HB_ROWS / RP;        /* copies of the A tile */
    static constexpr int SMEM = 1024 + C::A_BYTES + HB_STAGES * C::B_BYTES +
                                HB_STAGES * HB_BROWS * 4 + HB_QS * (int)sizeof(hb2_q);
    static_assert(HB_THREADS % C::CPR == 0 && RP % 8 == 0 && HB_HI % RP == 0 &&
                      HB_ROWS == HB_BROWS, "hb2 copy layout");
};

__device__ __forceinline__ void hb2_cp16z(uint32_t sa, const void *gsrc, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gsrc),
                 "r"(src_bytes));
}

/* the KSTEPS wgmma of one m-tile (A rows at a_lo, B tile at b_lo: shared
 * descriptors' low words) as one commit group, each descriptor (tile
 * descriptor + constant); the first one overwrites the accumulators */
template <int EB>
__device__ __forceinline__ void hb2_issue(float *acc, uint32_t a_lo, uint32_t b_lo) {
    constexpr uint64_t DHI = (uint64_t)((1024 >> 4) | (1u << 30)) << 32; /* la_wg_desc's high word */
    la_wg_fence_acc64(acc);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < (HB_DI * EB) / 32; kk++) {
        const uint32_t kb = (kk * 32) / 128, inner = (kk * 32) % 128;
        const uint32_t oa = (kb * HB_ROWS * 128 + inner) >> 4, ob = (kb * HB_BROWS * 128 + inner) >> 4;
        const uint64_t da = (DHI | (uint64_t)a_lo) + oa, db = (DHI | (uint64_t)b_lo) + ob;
        if constexpr (EB == 2) la_wg_m64n128k16_bf16(acc, da, db, kk > 0 ? 1 : 0);
        else la_wg_m64n128k32_e4m3(acc, da, db, kk > 0 ? 1 : 0);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* one m-tile's scores: this lane's key jk (in-block, 32 bits; stored only
 * where pin) of its query (table entry e) */
template <int EB, bool DENSE>
__device__ __forceinline__ void hb2_store(float *op, bool st_ok, int jk, const hb2_q &e, float v) {
    if (st_ok) {
        const bool in = jk >= e.jlo && jk < e.jhi;
        float o = in ? v : -INFINITY;
        if (DENSE && in && (jk == e.jf0 || jk == e.jf1)) o = INFINITY;
        op[jk] = o;
    }
}

template <int EB, bool DENSE>
__global__ void __launch_bounds__(HB_THREADS, 2)
    hb2_kernel(la_sp_score_args a, hb_lists h, const float *ks, int64_t ks_nb, int dqs) {
    using C = hb_cfg<EB>;
    using C2 = hb2_cfg<EB>;
    constexpr int RP = C2::RP, JQ = C2::JQ, JA = C2::JA;
    const int x = blockIdx.x;
    int b, nq;
    const int32_t *qlist = nullptr;
    int64_t tq0 = 0;
    if (DENSE) {
        b = 0;
        tq0 = (int64_t)x * dqs;
        nq = (int)min((int64_t)dqs, a.T - tq0);
    } else {
        if (x >= *h.nsl) return;
        b = h.sl_blk[x];
        const int q0 = h.sl_idx[x] * HB_QS;
        nq = min(HB_QS, h.cnt[b] - q0);
        qlist = h.list + h.boff[b] + q0;
    }
    const int nchunks = (nq + HB_NQ - 1) / HB_NQ;
    const int64_t j0 = (int64_t)blockIdx.y * HB_ROWS; /* first in-block key of the tile */
    const int64_t sb = (int64_t)b * a.B;              /* first token of the block */

    extern __shared__ uint8_t hb_raw[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(hb_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    uint8_t *As = hb_raw + (base - raw);
    float *ws = (float *)(As + C::A_BYTES + HB_STAGES * C::B_BYTES); /* [stage][128] */
    hb2_q *qt = (hb2_q *)(ws + HB_STAGES * HB_BROWS);                 /* [query of slice] */
    const uint32_t As_a = base, Bs_a = base + C::A_BYTES;

    const int tid = threadIdx.x, lane = tid & 31;
    const int wi = __shfl_sync(0xffffffffu, tid >> 5, 0); /* warp-uniform */
    const int g = lane >> 2, qd = lane & 3, qi = qd >> 1;
    const int r0 = tid / C::CPR, cc = tid % C::CPR;
    const uint32_t soff = la_wg_off(HB_ROWS, r0, cc); /* = la_wg_off(HB_BROWS, r0, cc) */
    /* keys -> A tile (rows r0 + RP·j; zero past the block or past L) */
    {
        const uint8_t *kp = (const uint8_t *)a.k + cc * 16;
#pragma unroll
        for (int j = 0; j < JA; j++) {
            const int64_t jb = j0 + r0 + RP * j, s = sb + jb;
            const bool ok = jb < a.B && s < a.Lk;
            hb2_cp16z(As_a + soff + j * RP * 128, kp + (ok ? s : 0) * a.k_nb0 * EB, ok ? 16 : 0);
        }
    }
    const bool w_async = a.w_dt == LA_F32 && ((uintptr_t)a.w & 3) == 0;
    /* the slice's query table, while the A tile lands */
    if (tid < HB_QS) {
        hb2_q e;
        e.qoff = 0;
        e.orow = -1;
        e.woff = 0;
        e.jlo = e.jhi = 0;
        e.jf0 = e.jf1 = -1;
        if (tid < nq) {
            int64_t t, r;
            if (DENSE) {
                t = tq0 + tid;
                r = 0;
            } else {
                const uint32_t ee = (uint32_t)qlist[tid];
                t = (int64_t)(ee / (uint32_t)h.m);
                r = (int64_t)(ee % (uint32_t)h.m);
            }
            int64_t lo, hi;
            la_sp_row_range(a.range, t, &lo, &hi);
            e.qoff = t * a.q_nb0 * EB;
            e.orow = t * a.out_ld + r * a.B;
            e.woff = t * a.w_nb0;
            const int64_t Bv = a.B;
            int64_t x0 = lo - sb, x1 = (hi < a.Lk ? hi : a.Lk) - sb;
            x0 = x0 < 0 ? 0 : (x0 > Bv ? Bv : x0);
            x1 = x1 < 0 ? 0 : (x1 > Bv ? Bv : x1);
            e.jlo = (int32_t)x0;
            e.jhi = (int32_t)x1;
            if (DENSE && a.force_ends) {
                const int64_t f0 = lo - sb, f1 = hi - 1 - sb;
                e.jf0 = (f0 >= 0 && f0 < Bv) ? (int32_t)f0 : -1;
                e.jf1 = (f1 >= 0 && f1 < Bv) ? (int32_t)f1 : -1;
            }
        }
        qt[tid] = e;
    }
    __syncthreads();
    /* per-thread copy constants: q rows r0 + RP·j (query 0: j < JQ, query 1
     * the same heads 64 rows further), one weight (query tid >> 6, head tid & 63) */
    const uint8_t *qthr = (const uint8_t *)a.q + (int64_t)r0 * a.q_nb1 * EB + cc * 16;
    const int64_t hstride = (int64_t)RP * a.q_nb1 * EB;
    const bool q_heads_contig = a.q_nb1 == HB_DI;
    const uint32_t bdst = Bs_a + soff;
    const int wq = tid >> 6;
    const int64_t whoff = (int64_t)(tid & (HB_HI - 1)) * a.w_nb1;
    auto load_chunk = [&](int c, int st) {
        const hb2_q *e = qt + HB_NQ * c;
        const uint8_t *p0 = qthr + e[0].qoff;
        const bool ok1 = e[1].orow >= 0;
        const uint8_t *p1 = ok1 ? qthr + e[1].qoff : p0;
        const uint32_t d = bdst + (uint32_t)st * C::B_BYTES;
        auto copy_q = [&](int64_t hs) {
#pragma unroll
            for (int j = 0; j < JQ; j++) hb2_cp16z(d + j * RP * 128, p0 + j * hs, 16);
#pragma unroll
            for (int j = 0; j < JQ; j++)
                hb2_cp16z(d + (JQ + j) * RP * 128, p1 + j * hs, ok1 ? 16 : 0);
        };
        /* contiguous heads (the usual [T, HI, dI] layout): the row step is a
         * constant, so the copies take immediate offsets */
        if (q_heads_contig)
            copy_q((int64_t)RP * HB_DI * EB);
        else
            copy_q(hstride);
        const hb2_q &ew = e[wq];
        const bool okw = ew.orow >= 0;
        const int64_t off = ew.woff + whoff;
        if (w_async)
            hb_cp4z(ws + st * HB_BROWS + tid, (const float *)a.w + off, okw ? 4 : 0);
        else
            ws[st * HB_BROWS + tid] = okw ? la_cu_ld(a.w, a.w_dt, off) : 0.f;
    };
    load_chunk(0, 0);
    asm volatile("cp.async.commit_group;\n" ::: "memory");

    /* in-block key this lane stores in each m-tile, whether it is stored */
    const int64_t jk0l = j0 + 16 * wi + g + 8 * (qd & 1), jk1l = jk0l + 64;
    const bool pin0 = jk0l < a.B, pin1 = jk1l < a.B;
    const int jk0 = (int)jk0l, jk1 = (int)jk1l; /* used only where pin (B <= INT32_MAX) */
    float ksv0 = 1.f, ksv1 = 1.f;
    if (EB == 1 && ks) {
        if (pin0 && sb + jk0l < a.Lk) ksv0 = ks[(sb + jk0l) * ks_nb];
        if (pin1 && sb + jk1l < a.Lk) ksv1 = ks[(sb + jk1l) * ks_nb];
    }
    /* la_wg_desc(x) = (x >> 4) | 1 << 16 in the low word (x < 2^18) */
    const uint32_t a_lo0 = ((As_a & 0x3FFFFu) >> 4) | (1u << 16);
    const uint32_t a_lo1 = a_lo0 + ((64 * 128) >> 4);
    const uint32_t b_lo = ((Bs_a & 0x3FFFFu) >> 4) | (1u << 16);
    float acc0[64], acc1[64];
#pragma unroll
    for (int i = 0; i < 64; i++) acc0[i] = acc1[i] = 0.f;
    for (int c = 0; c < nchunks; c++) {
        const int st = c & 1;
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        const uint32_t bl = b_lo + (uint32_t)st * (C::B_BYTES >> 4);
        hb2_issue<EB>(acc0, a_lo0, bl);
        hb2_issue<EB>(acc1, a_lo1, bl);
        if (c + 1 < nchunks) load_chunk(c + 1, st ^ 1);
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        float2 wr[16];
        la_wg_headsum_w(wr, ws + st * HB_BROWS, qd);
        const hb2_q e = qt[HB_NQ * c + qi];
        float *op = a.out + e.orow;
        const bool ok = e.orow >= 0;
        la_wg_wait<1>(acc0);
        {
            float v = la_wg_relu_headsum_wr(acc0, wr, qd);
            if (EB == 1 && ks) v = v * ksv0;
            hb2_store<EB, DENSE>(op, ok && pin0, jk0, e, v);
        }
        la_wg_wait<0>(acc1);
        {
            float v = la_wg_relu_headsum_wr(acc1, wr, qd);
            if (EB == 1 && ks) v = v * ksv1;
            hb2_store<EB, DENSE>(op, ok && pin1, jk1, e, v);
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* Block means (the default; LA_CUDA_HISA_FAST1=0: hs_pool_bf16_kernel):
 * contiguous bf16 keys with 16-byte aligned rows and dI <= 128, one CTA of 128 threads per block. The block's
 * rows (HP_TOK tokens at a time) go to shared memory by cp.async, every
 * 16-byte load of the CTA in flight at once (hs_pool_bf16_kernel keeps ~16
 * 4-byte loads per thread in flight, 64 threads per block), then thread d
 * sums dimension d over the tokens in order: fp32 from 0, the bf16 values
 * widened exactly, / true count, rounded to bf16 once: hs_pool_bf16_kernel's
 * arithmetic, so the means are the same bit for bit. */
#define HP_TOK 128
__global__ void __launch_bounds__(128) hs_pool2_kernel(const __nv_bfloat16 *k, int64_t nb0,
                                                       int64_t L, int dI, int64_t B,
                                                       __nv_bfloat16 *out) {
    __shared__ __align__(16) __nv_bfloat16 tile[HP_TOK * 128];
    const int64_t b = blockIdx.x;
    const int64_t s0 = b * B, s1 = min(s0 + B, L);
    const int tid = threadIdx.x, cpr = dI / 8;
    float acc = 0.f;
    for (int64_t sa = s0; sa < s1; sa += HP_TOK) {
        const int n = (int)min((int64_t)HP_TOK, s1 - sa);
        __syncthreads(); /* the previous tile is summed */
        for (int i = tid; i < n * cpr; i += 128) {
            const int r = i / cpr, c = i - r * cpr;
            la_sp_cp16z(tile + r * dI + c * 8, k + (sa + r) * nb0 + c * 8, 16);
        }
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
        __syncthreads();
        if (tid < dI) {
#pragma unroll 16
            for (int r = 0; r < n; r++) acc += __bfloat162float(tile[r * dI + tid]);
        }
    }
    if (tid < dI) out[b * dI + tid] = __float2bfloat16_rn(acc / (float)(s1 - s0));
}


/* counts per block; ranks without a block (-1) get their B columns -inf */
__global__ void hb_count_kernel(const int32_t *kept, int64_t n, int64_t m, int64_t B, float *out,
                                int64_t out_ld, int32_t *cnt) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int32_t b = kept[e];
        if (b >= 0) {
            atomicAdd(cnt + b, 1);
        } else {
            float *o = out + (e / m) * out_ld + (e % m) * B;
            for (int64_t j = 0; j < B; j++) o[j] = -INFINITY;
        }
    }
}
/* One CTA: exclusive scans of the counts (list offsets) and the slices
 * (<= HB_QS queries each) in longest-first order: every full slice first, then each
 * block's remainder slice by size, largest first (counting sort on
 * cnt % HB_QS; order inside a size arbitrary). The hardware hands CTAs out
 * roughly in grid order as slots free up, so short slices last make a
 * shorter tail: in a greedy model of the bench's lists (1024 queries, m =
 * 64, random kept blocks, 264 CTA slots, per-CTA cost = chunks + 2 for the
 * A tile) the makespan drops from 1.14x the average load per slot to 1.01x
 * at 64K and from 1.14x to 1.01x at 128K. Which CTA computes a (query, key)
 * pair does not change its arithmetic, so the scores are the same. */
__global__ void __launch_bounds__(1024) hb_scan_lpt_kernel(const int32_t *cnt, int nb,
                                                           int32_t *boff, int32_t *cur,
                                                           int32_t *sl_blk, int32_t *sl_idx,
                                                           int32_t *nsl) {
    __shared__ int sa[1024], sn[1024];
    __shared__ int rpos[HB_QS]; /* remainder size -> count, then first slot */
    const int tid = threadIdx.x, per = (nb + 1023) / 1024;
    const int b0 = min(nb, tid * per), b1 = min(nb, b0 + per);
    if (tid < HB_QS) rpos[tid] = 0;
    __syncthreads();
    int c = 0, k = 0;
    for (int b = b0; b < b1; b++) {
        c += cnt[b];
        k += cnt[b] / HB_QS;
        if (cnt[b] % HB_QS) atomicAdd(&rpos[cnt[b] % HB_QS], 1);
    }
    sa[tid] = c;
    sn[tid] = k;
    __syncthreads();
    for (int off = 1; off < 1024; off <<= 1) {
        const int va = tid >= off ? sa[tid - off] : 0, vn = tid >= off ? sn[tid - off] : 0;
        __syncthreads();
        sa[tid] += va;
        sn[tid] += vn;
        __syncthreads();
    }
    if (tid == 0) { /* remainder slices after the sn[1023] full ones, largest first */
        int pos = sn[1023];
        for (int r = HB_QS - 1; r >= 1; r--) {
            const int n = rpos[r];
            rpos[r] = pos;
            pos += n;
        }
        *nsl = pos;
    }
    __syncthreads();
    int pc = sa[tid] - c, pn = sn[tid] - k;
    for (int b = b0; b < b1; b++) {
        boff[b] = pc;
        cur[b] = pc;
        const int nf = cnt[b] / HB_QS, r = cnt[b] % HB_QS;
        for (int i = 0; i < nf; i++) {
            sl_blk[pn + i] = b;
            sl_idx[pn + i] = i;
        }
        if (r) {
            const int p = atomicAdd(&rpos[r], 1);
            sl_blk[p] = b;
            sl_idx[p] = nf;
        }
        pc += cnt[b];
        pn += nf;
    }
}
__global__ void hb_fill_kernel(const int32_t *kept, int64_t n, int32_t *cur, int32_t *list) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int32_t b = kept[e];
        if (b >= 0) list[atomicAdd(cur + b, 1)] = (int32_t)e;
    }
}

/* Whether the block-major kernel takes these views. */
static bool hb_ok(const la_sp_score_args &a) {
    if (a.q_dt != LA_BF16 || a.k_dt != LA_BF16 || a.HI != HB_HI || a.dI != HB_DI) return false;
    if (a.q_nb2 != 1 || a.q_nb1 % 8 || a.q_nb0 % 8 || ((uintptr_t)a.q & 15)) return false;
    if (a.k_nb1 != 1 || a.k_nb0 % 8 || ((uintptr_t)a.k & 15)) return false;
    const int64_t nb = (a.Lk + a.B - 1) / a.B;
    const int64_t npairs = a.T * a.m, nsl = npairs / HB_QS + (nb < npairs ? nb : npairs);
    return a.m >= 1 && a.blocks_ld == a.m && nb <= 65535 && npairs <= (int64_t)INT32_MAX && nsl <= (int64_t)INT32_MAX &&
           la_cu_cdiv(a.B, HB_ROWS) <= 65535;
}

/* The kernels of a HISA / block-sparse call (family "hisa"): the default
 * (variant "wgmma"); "gather": stage 2 on the DSA score kernels in gather
 * mode; "mma": also stage 1 on hs_pool_bf16_kernel and the mma.sync block
 * scores; "hb2": fp8 through the e4m3 route even when every block is kept;
 * "portable": the exact fp32 score kernels (fp8: dequantized copies). */
struct hs_choice {
    bool gather; /* stage 2 on the DSA gather kernels instead of hb2_kernel  */
    bool fast1;  /* stage 1 on hs_pool2_kernel + hb2_kernel (dense)         */
    bool exact;  /* every score on the exact fp32 kernel                    */
    int fp8;     /* 0: dequantized f32 route, 1: e4m3 route, 2: also every block kept */
    const la_context *ctx;
};
static const char *const hs_names[] = {"wgmma", "gather", "mma", "hb2", "portable"};
static la_status hs_select(const la_context *ctx, hs_choice *c) {
    const char *forced = la_context_variant(ctx, "hisa");
    c->gather = false;
    c->fast1 = true;
    c->exact = false;
    c->fp8 = 1;
    c->ctx = ctx;
    if (!forced) return LA_OK;
    const int i = la_cu_variant_index(forced, hs_names, 5);
    if (i < 0) return la_cu_unknown_variant("hisa", forced, "wgmma, gather, mma, hb2, portable");
    c->gather = i == 1 || i == 2 || i == 4;
    c->fast1 = !(i == 2 || i == 4);
    c->exact = i == 4;
    c->fp8 = i == 3 ? 2 : i == 4 ? 0 : 1;
    return LA_OK;
}

/* The block-major candidate scores: bucketing, then hb2_kernel (bf16, or
 * e4m3 with fp8: a.w = w·q_scale, ks = k_scale). (A one-launch bucketing,
 * one CTA for memset + count + scan + fill, measured 79 us against 31 us for
 * these four launches at L = 64K: removed.) */
static la_status hb_launch(const la_sp_score_args &a, const hs_choice &ch, cudaStream_t s, bool fp8,
                           const float *ks = nullptr, int64_t ks_nb = 0) {
    const int64_t nb = (a.Lk + a.B - 1) / a.B, npairs = a.T * a.m;
    const int64_t slmax = npairs / HB_QS + (nb < npairs ? nb : npairs); /* sum of ceil(cnt/QS) */
    size_t bytes;
    LA_TRY(la_mul_size((size_t)(3 * nb + 1 + npairs + 2 * slmax), 4, &bytes, "block lists"));
    la_cu_ws lw;
    LA_TRY(la_cu_ws_alloc(&lw, bytes, s, "HISA block-major query lists"));
    int32_t *cnt = (int32_t *)lw.p, *boff = cnt + nb, *cur = boff + nb, *nsl = cur + nb;
    int32_t *list = nsl + 1, *sl_blk = list + npairs, *sl_idx = sl_blk + slmax;
    {
        LA_CU(cudaMemsetAsync(cnt, 0, (size_t)nb * 4, s));
        const int64_t eb = la_cu_cdiv(npairs, 256) < 4096 ? la_cu_cdiv(npairs, 256) : 4096;
        hb_count_kernel<<<(unsigned)eb, 256, 0, s>>>(a.blocks, npairs, a.m, a.B, a.out, a.out_ld, cnt);
        LA_CU_LAUNCH("hisa block lists (count)");
        hb_scan_lpt_kernel<<<1, 1024, 0, s>>>(cnt, (int)nb, boff, cur, sl_blk, sl_idx, nsl);
        LA_CU_LAUNCH("hisa block lists (scan)");
        hb_fill_kernel<<<(unsigned)eb, 256, 0, s>>>(a.blocks, npairs, cur, list);
        LA_CU_LAUNCH("hisa block lists (fill)");
    }
    hb_lists h;
    h.list = list;
    h.boff = boff;
    h.cnt = cnt;
    h.sl_blk = sl_blk;
    h.sl_idx = sl_idx;
    h.nsl = nsl;
    h.m = (int32_t)a.m;
    dim3 grid((unsigned)slmax, (unsigned)la_cu_cdiv(a.B, HB_ROWS));
    if (fp8) {
        LA_CU(cudaFuncSetAttribute(hb2_kernel<1, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   hb2_cfg<1>::SMEM));
        hb2_kernel<1, false><<<grid, HB_THREADS, hb2_cfg<1>::SMEM, s>>>(a, h, ks, ks_nb, 0);
    } else {
        LA_CU(cudaFuncSetAttribute(hb2_kernel<2, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   hb2_cfg<2>::SMEM));
        hb2_kernel<2, false><<<grid, HB_THREADS, hb2_cfg<2>::SMEM, s>>>(a, h, nullptr, 0, 0);
    }
    LA_CU_LAUNCH(fp8 ? "hisa candidate scores (block-major wgmma, fp8 e4m3)"
                     : "hisa candidate scores (block-major wgmma)");
    return LA_OK;
}


/* Candidate scores: hb2_kernel, or the DSA score kernels in gather mode
 * (fp32 exact kernel for other dtypes and shapes; all inputs with
 * LA_CUDA_HISA_PATH=old). */
static la_status hs_candidate_scores(const la_sp_score_args &a, const hs_choice &ch,
                                     cudaStream_t s) {
    if (a.T == 0 || a.ncols == 0) return LA_OK;
    if (!ch.gather && hb_ok(a)) return hb_launch(a, ch, s, false);
    return la_sp_scores(a, ch.exact, s);
}

/* Whether hb2_kernel<2, true> takes the block-score views: bf16 q (16-byte
 * aligned rows, contiguous along dI) and block means (contiguous rows), HI =
 * 64, dI = 128, dense (no gather), nb <= INT32_MAX. */
static bool hb2_dense_ok(const la_sp_score_args &a) {
    if (a.q_dt != LA_BF16 || a.k_dt != LA_BF16 || a.HI != HB_HI || a.dI != HB_DI || a.blocks)
        return false;
    if (a.q_nb2 != 1 || a.q_nb1 % 8 || a.q_nb0 % 8 || ((uintptr_t)a.q & 15)) return false;
    if (a.k_nb1 != 1 || a.k_nb0 % 8 || ((uintptr_t)a.k & 15)) return false;
    return a.ncols == a.Lk && a.Lk >= 1 && a.Lk <= (int64_t)INT32_MAX && a.T >= 1 &&
           la_cu_cdiv(a.Lk, HB_ROWS) <= 65535;
}
/* Block scores (stage 1) on hb2_kernel<2, true>: the nb block means as the
 * keys of one block (a.B = nb), out[t·out_ld + b]; queries per CTA chosen as
 * v2_launch does (fewest waves x (chunks + 2) over 2 CTAs per SM). */
static la_status hb2_dense_launch(la_sp_score_args a, cudaStream_t s) {
    a.B = (int)a.Lk;
    int dev = 0, nsm = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || nsm < 1) {
        cudaGetLastError();
        nsm = 132;
    }
    const int64_t ntiles = la_cu_cdiv(a.Lk, HB_ROWS);
    static const int cand[] = {64, 48, 32, 24, 16, 8, 4, 2};
    int qs = 2;
    double best = 1e300;
    for (int qc : cand) {
        if (la_cu_cdiv(a.T, qc) > (int64_t)INT32_MAX) continue;
        const int64_t ctas = ntiles * la_cu_cdiv(a.T, qc);
        const double waves = (double)la_cu_cdiv(ctas, 2 * (int64_t)nsm);
        const double cost = waves * (double)(la_cu_cdiv(qc < a.T ? qc : a.T, HB_NQ) + 2);
        if (cost < best - 1e-9) {
            best = cost;
            qs = qc;
        }
    }
    hb_lists h;
    memset(&h, 0, sizeof h);
    dim3 grid((unsigned)la_cu_cdiv(a.T, qs), (unsigned)ntiles);
    LA_CU(cudaFuncSetAttribute(hb2_kernel<2, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               hb2_cfg<2>::SMEM));
    hb2_kernel<2, true><<<grid, HB_THREADS, hb2_cfg<2>::SMEM, s>>>(a, h, nullptr, 0, qs);
    LA_CU_LAUNCH("hisa block scores (wgmma)");
    return LA_OK;
}

/* Stage 1 after pooling: block scores of ab's queries and weights over the
 * nb block means kbar ([nb, dI] rows of dtype kb_dt; block units, the first
 * and last block meeting each range forced), then the top mk blocks per
 * query into keptw ([T, mk] int32). Shared by the bf16/f32 pipeline and the
 * fp8 one. */
static la_status hs_keep_blocks(la_sp_score_args ab, const void *kbar, int kb_dt, int64_t nb,
                                int64_t B, int64_t mk, la_cu_ws *bsw, la_cu_ws *keptw,
                                const hs_choice &ch, cudaStream_t s) {
    const int64_t T = ab.T;
    size_t bytes;
    LA_TRY(la_mul_size((size_t)T, (size_t)nb * 4, &bytes, "block scores"));
    LA_TRY(la_cu_ws_alloc(bsw, bytes, s, "block scores"));
    ab.k = kbar;
    ab.k_dt = kb_dt;
    ab.k_nb0 = ab.dI;
    ab.k_nb1 = 1;
    ab.Lk = nb;
    ab.range.blk = (int)B;
    ab.force_ends = 1;
    ab.ncols = nb;
    ab.out = (float *)bsw->p;
    ab.out_ld = nb;
    if (ch.fast1 && !ch.exact && hb2_dense_ok(ab))
        LA_TRY(hb2_dense_launch(ab, s));
    else
        LA_TRY(la_sp_scores(ab, ch.exact, s));
    LA_TRY(la_mul_size((size_t)T, (size_t)mk * 4, &bytes, "kept blocks"));
    LA_TRY(la_cu_ws_alloc(keptw, bytes, s, "kept blocks"));
    la_sp_topk_args tb;
    memset(&tb, 0, sizeof tb);
    tb.scores = (const float *)bsw->p;
    tb.ld = nb;
    tb.cs = 1;
    tb.R = T;
    tb.L = nb;
    tb.use_range = 1;
    tb.range = ab.range;
    tb.k = mk;
    tb.out = (int32_t *)keptw->p;
    tb.out_ld = mk;
    tb.out_cs = 1;
    LA_TRY(la_sp_topk(tb, ch.ctx, s));
    return LA_OK;
}

/* Stage 2's selection: the top idx->ne[1] of the [T, nc = mk·B] candidate
 * scores cs, each column mapped back to its token through the kept blocks. */
static la_status hs_token_topk(const float *cs, int64_t T, int64_t nc, const int32_t *kept, int64_t mk,
                               int64_t B, la_tensor *idx, const hs_choice &ch, cudaStream_t s) {
    la_sp_topk_args tc;
    memset(&tc, 0, sizeof tc);
    tc.scores = cs;
    tc.ld = nc;
    tc.cs = 1;
    tc.R = T;
    tc.L = nc;
    tc.blocks = kept;
    tc.blocks_ld = mk;
    tc.B = (int)B;
    tc.k = idx->ne[1];
    tc.out = (int32_t *)idx->data;
    tc.out_ld = idx->nb[0];
    tc.out_cs = idx->nb[1];
    LA_TRY(la_sp_topk(tc, ch.ctx, s));
    return LA_OK;
}

/* The block parameters (after the views are validated). */
static la_status hs_check_params(const char *op, int blocksparse, const la_index_params *p) {
    if (p->block <= 0 || p->block > INT32_MAX)
        return la_err(LA_ERR_ARG, "block: block size %lld, must be in 1..2^31-1", (long long)p->block);
    if (!blocksparse && p->block_topk <= 0)
        return la_err(LA_ERR_ARG, "block_topk: m = %lld blocks kept, must be > 0",
                      (long long)p->block_topk);
    if (blocksparse && p->topk < p->block)
        return la_err(LA_ERR_ARG,
                      "%s: topk = %lld is smaller than the block size %lld, so topk/block = 0 "
                      "blocks would be kept",
                      op, (long long)p->topk, (long long)p->block);
    return LA_OK;
}

static la_status hs_run(const char *op, int blocksparse, const la_index_params *p,
                        const la_tensor *q, const la_tensor *k, const la_tensor *w,
                        const la_tensor *start, const la_tensor *end, la_tensor *idx,
                        la_context *ctx) {
    LA_TRY(la_sp_validate_idx_cuda(op, p, q, k, w, start, end, idx));
    LA_TRY(hs_check_params(op, blocksparse, p));
    cudaStream_t s = la_cu_stream(ctx);
    la_sp_score_args a;
    la_sp_fill_score_args(&a, q, k, w, start, end);
    la_cu_ws qw, kw, kbw, bsw, keptw, csw, kw16;
    LA_TRY(la_sp_prepare_bf16(&a, &qw, &kw, s));
    if (!blocksparse && a.q_dt == LA_BF16 && a.k_dt == LA_BF16 &&
        la_sp_scores_fast_shape(a.HI, a.dI) && a.T > 0 &&
        (a.k_nb1 != 1 || a.k_nb0 % 8 != 0 || ((uintptr_t)a.k & 15) != 0)) {
        /* the cp.async copies (hb2_kernel) need contiguous, 16-byte aligned k rows: copy */
        size_t kb16;
        LA_TRY(la_mul_size((size_t)a.Lk, (size_t)a.dI * 2, &kb16, "k copy"));
        LA_TRY(la_cu_ws_alloc(&kw16, kb16, s, "aligned bf16 copy of k"));
        LA_TRY(la_sp_pack_bf16(a.k, a.k_dt, 1, a.Lk, a.dI, 0, a.k_nb0, a.k_nb1,
                               (__nv_bfloat16 *)kw16.p, s));
        a.k = kw16.p;
        a.k_nb0 = a.dI;
        a.k_nb1 = 1;
    }
    const int64_t T = a.T, L = a.Lk, dI = a.dI;
    const int64_t B = p->block < L ? p->block : L; /* a block past L is the single block */
    const int64_t nb = (L + B - 1) / B;
    const int64_t m_req = blocksparse ? p->topk / p->block : p->block_topk;
    const int64_t mk = m_req < nb ? m_req : nb;
    if (mk > LA_SP_TOPK_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "%s: %lld blocks kept exceed the CUDA top-k maximum %d",
                      op, (long long)mk, LA_SP_TOPK_MAX);
    if (!blocksparse && p->topk > LA_SP_TOPK_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "topk: %lld exceeds the CUDA top-k maximum %d",
                      (long long)p->topk, LA_SP_TOPK_MAX);
    if (T == 0) return LA_OK;
    hs_choice ch;
    LA_TRY(hs_select(ctx, &ch));
    la_cu_report(ctx, "hisa", la_context_variant(ctx, "hisa") ? la_context_variant(ctx, "hisa") : "wgmma",
                 "%s T=%lld L=%lld HI=%lld dI=%lld block=%lld", op, (long long)T, (long long)L,
                 (long long)a.HI, (long long)dI, (long long)B);

    /* 1. block means */
    const bool bf = a.k_dt == LA_BF16 && a.q_dt == LA_BF16;
    const int kb_dt = bf ? LA_BF16 : LA_F32;
    size_t bytes;
    LA_TRY(la_mul_size((size_t)nb, (size_t)dI * (bf ? 2 : 4), &bytes, "block means"));
    LA_TRY(la_cu_ws_alloc(&kbw, bytes, s, "block means"));
    {
        dim3 grid((unsigned)la_cu_cdiv(dI, 128), (unsigned)nb);
        if (nb > 65535) return la_err(LA_ERR_UNSUPPORTED, "%s: %lld blocks exceed the grid", op, (long long)nb);
        if (ch.fast1 && bf && a.k_nb1 == 1 && a.k_nb0 % 8 == 0 && dI % 8 == 0 && dI <= 128 &&
            ((uintptr_t)a.k & 15) == 0) {
            hs_pool2_kernel<<<(unsigned)nb, 128, 0, s>>>((const __nv_bfloat16 *)a.k, a.k_nb0, L,
                                                          (int)dI, B, (__nv_bfloat16 *)kbw.p);
        } else if (bf && a.k_nb1 == 1 && a.k_nb0 % 2 == 0 && dI % 2 == 0 && ((uintptr_t)a.k & 3) == 0) {
            dim3 g2((unsigned)la_cu_cdiv(dI / 2, 64), (unsigned)nb);
            hs_pool_bf16_kernel<<<g2, 64, 0, s>>>((const __nv_bfloat16 *)a.k, a.k_nb0, L, dI, B,
                                                   (__nv_bfloat16 *)kbw.p);
        } else {
            hs_pool_kernel<<<grid, 128, 0, s>>>(a.k, a.k_dt, a.k_nb0, a.k_nb1, L, dI, B, kbw.p, kb_dt);
        }
        LA_CU_LAUNCH("block means");
    }
    /* 2. block scores (block units, forced ends), top-m */
    LA_TRY(hs_keep_blocks(a, kbw.p, kb_dt, nb, B, mk, &bsw, &keptw, ch, s));

    if (blocksparse) {
        hs_blocksparse_kernel<<<(unsigned)T, 128, 0, s>>>((const int32_t *)keptw.p, mk, a.range, B,
                                                          idx->ne[1], (int32_t *)idx->data,
                                                          idx->nb[0], idx->nb[1]);
        LA_CU_LAUNCH("block-sparse tokens");
        la_err_clear();
        return LA_OK;
    }
    /* 3. candidate token scores, top-k */
    const int64_t nc = mk * B;
    LA_TRY(la_mul_size((size_t)T, (size_t)nc * 4, &bytes, "candidate scores"));
    LA_TRY(la_cu_ws_alloc(&csw, bytes, s, "candidate scores"));
    la_sp_score_args ac = a;
    ac.blocks = (const int32_t *)keptw.p;
    ac.blocks_ld = mk;
    ac.m = mk;
    ac.B = (int)B;
    ac.ncols = nc;
    ac.out = (float *)csw.p;
    ac.out_ld = nc;
    LA_TRY(hs_candidate_scores(ac, ch, s));
    LA_TRY(hs_token_topk((const float *)csw.p, T, nc, (const int32_t *)keptw.p, mk, B, idx, ch, s));
    la_err_clear();
    return LA_OK;
}

/* ---- fp8 e4m3 HISA on wgmma (the default; LA_CUDA_HISA_FP8=f32 the other route) --
 * Stage 1 on bf16 copies, stage 2 on the fp8 rows:
 *  - w' = w·q_scale (f32 [T, HI], the product sc_wq forms in dsa.cu: the
 *    weight as f32 times q_scale[t,h], one rounding);
 *  - q8 -> bf16 (exact: every e4m3 value is a bf16 value);
 *  - block means of the dequantized keys k8·k_scale (the product rounded
 *    once, as la_sp_fp8_to_f32's dequantized copy; fp32 sums in token order,
 *    / true count: the f32 route's means bit for bit), rounded to bf16 once
 *    at the store: the bf16 path's rounding (hs_pool_bf16_kernel also stores
 *    bf16 means of fp32 sums);
 *  - block scores = the bf16 block-score path (la_sp_scores on q_bf16, k̄,
 *    w'): Σ_h w'·ReLU(q8·k̄) = Σ_h w·ReLU((q8·qs)·k̄) since qs > 0;
 *  - candidate scores: hb2_kernel<1> on the e4m3 q/k rows with w' and k_scale,
 *    per (query, key) the instruction sequence of DSA v2's fp8 kernel
 *    (sc_wgmma_kernel<1>), then the token top-k in gather mode.
 * Compared with the f32 route (the CPU's indices on dequantized inputs),
 * selections can differ where the bf16-rounded block means flip near-tied
 * blocks (stage 1) and where v2's fp8 accumulation (~14 bits) reorders
 * near-tied tokens (stage 2); with every block kept the candidate scores are
 * the DSA fp8 scores. */


/* e4m3 [T, HI, dI] view -> contiguous bf16 (exact) */
__global__ void hs_q8_bf16_kernel(const uint8_t *q, int64_t HI, int64_t dI, int64_t nb0,
                                  int64_t nb1, int64_t nb2, __nv_bfloat16 *out, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t d = i % dI, r = i / dI, h = r % HI, t = r / HI;
        __nv_fp8_e4m3 v;
        v.__x = q[t * nb0 + h * nb1 + d * nb2];
        out[i] = __float2bfloat16_rn((float)v);
    }
}
/* w' = w·q_scale as f32 [T, HI] (sc_wq's expression) */
__global__ void hs_wq_kernel(const void *w, int w_dt, int64_t w_nb0, int64_t w_nb1,
                             const float *qs, int64_t qs_nb0, int64_t qs_nb1, int64_t HI,
                             float *out, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / HI, h = i % HI;
        float wv = la_cu_ld(w, w_dt, t * w_nb0 + h * w_nb1);
        if (qs) wv *= qs[t * qs_nb0 + h * qs_nb1];
        out[i] = wv;
    }
}
/* block means of k8·k_scale (contiguous e4m3 rows), one dimension per
 * thread; the product is rounded once (__fmul_rn: not contracted into the
 * sum), fp32 sum in token order, / true count, stored bf16 */
__global__ void hs_pool_fp8_kernel(const uint8_t *k, int64_t nb0, int64_t L, int64_t dI,
                                   int64_t B, const float *ks, int64_t ks_nb,
                                   __nv_bfloat16 *out) {
    const int64_t b = blockIdx.y;
    const int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= dI) return;
    const int64_t s0 = b * B, s1 = min(s0 + B, L);
    float acc = 0.f;
#pragma unroll 16
    for (int64_t s = s0; s < s1; s++) {
        __nv_fp8_e4m3 v;
        v.__x = k[s * nb0 + d];
        const float x = (float)v;
        acc = __fadd_rn(acc, ks ? __fmul_rn(x, ks[s * ks_nb]) : x);
    }
    out[b * dI + d] = __float2bfloat16_rn(acc / (float)(s1 - s0));
}

/* Whether hb2_kernel<1> takes these views (HI = 64, dI = 128, e4m3 rows
 * 16-byte aligned and contiguous along dI; the list sizes of hb_ok). */
static bool hb8_ok(const la_sp_score_args &a) {
    if (a.q_dt != LA_FP8_E4M3 || a.k_dt != LA_FP8_E4M3 || a.HI != HB_HI || a.dI != HB_DI)
        return false;
    if (a.q_nb2 != 1 || a.q_nb1 % 16 || a.q_nb0 % 16 || ((uintptr_t)a.q & 15)) return false;
    if (a.k_nb1 != 1 || a.k_nb0 % 16 || ((uintptr_t)a.k & 15)) return false;
    const int64_t nb = (a.Lk + a.B - 1) / a.B;
    const int64_t npairs = a.T * a.m, nsl = npairs / HB_QS + (nb < npairs ? nb : npairs);
    return a.m >= 1 && a.blocks_ld == a.m && nb <= 65535 && npairs <= (int64_t)INT32_MAX &&
           nsl <= (int64_t)INT32_MAX && la_cu_cdiv(a.B, HB_ROWS) <= 65535;
}

/* HISA on fp8 q/k with the stages above. *taken = false (nothing launched,
 * nothing written) when the views or sizes are not the kernel's: the
 * caller then runs the f32 route. Views and block parameters are validated
 * by the caller. */
static la_status hs_run_fp8wg(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                              const la_tensor *w, const la_tensor *start, const la_tensor *end,
                              la_tensor *idx, la_context *ctx, bool *taken) {
    *taken = false;
    la_sp_score_args a;
    la_sp_fill_score_args(&a, q, k, w, start, end);
    const int64_t T = a.T, L = a.Lk, HI = a.HI, dI = a.dI;
    if (T < 1 || L < 1 || T > 65535 || p->topk > LA_SP_TOPK_MAX) return LA_OK;
    const int64_t B = p->block < L ? p->block : L;
    const int64_t nb = (L + B - 1) / B;
    const int64_t mk = p->block_topk < nb ? p->block_topk : nb;
    if (nb > 65535 || mk > LA_SP_TOPK_MAX) return LA_OK;
    la_sp_score_args ac = a; /* stage 2 on the e4m3 rows */
    ac.m = mk;
    ac.blocks_ld = mk;
    ac.B = (int)B;
    if (!hb8_ok(ac)) return LA_OK;
    *taken = true;

    cudaStream_t s = la_cu_stream(ctx);
    const float *ks = p->k_scale ? (const float *)p->k_scale->data : nullptr;
    const int64_t ks_nb = p->k_scale ? p->k_scale->nb[0] : 0;
    const float *qsc = p->q_scale ? (const float *)p->q_scale->data : nullptr;
    const int64_t qs_nb0 = p->q_scale ? p->q_scale->nb[0] : 0;
    const int64_t qs_nb1 = p->q_scale ? p->q_scale->nb[1] : 0;
    /* the scale values: finite, > 0 (dsa.cu's check and messages) */
    if (ks || qsc) LA_TRY(la_sp_fp8_check_scales(p, q, k, s));
    hs_choice ch;
    LA_TRY(hs_select(ctx, &ch));

    /* 1. bf16 q, f32 w' = w·qs, bf16 block means of k8·ks */
    la_cu_ws qbw, wqw, kbw, bsw, keptw, csw;
    size_t bytes;
    LA_TRY(la_mul_size((size_t)(T * HI), (size_t)dI * 2, &bytes, "bf16 q"));
    LA_TRY(la_cu_ws_alloc(&qbw, bytes, s, "bf16 copy of fp8 q"));
    LA_TRY(la_mul_size((size_t)T, (size_t)HI * 4, &bytes, "w*q_scale"));
    LA_TRY(la_cu_ws_alloc(&wqw, bytes, s, "w*q_scale"));
    LA_TRY(la_mul_size((size_t)nb, (size_t)dI * 2, &bytes, "block means"));
    LA_TRY(la_cu_ws_alloc(&kbw, bytes, s, "block means"));
    {
        const int64_t total = T * HI * dI;
        int64_t blocks = la_cu_cdiv(total, 256);
        if (blocks > 65535 * 16) blocks = 65535 * 16;
        hs_q8_bf16_kernel<<<(unsigned)blocks, 256, 0, s>>>((const uint8_t *)a.q, HI, dI, a.q_nb0,
                                                           a.q_nb1, a.q_nb2,
                                                           (__nv_bfloat16 *)qbw.p, total);
        LA_CU_LAUNCH("fp8 q -> bf16");
        const int64_t tw = T * HI;
        hs_wq_kernel<<<(unsigned)la_cu_cdiv(tw, 256), 256, 0, s>>>(a.w, a.w_dt, a.w_nb0, a.w_nb1,
                                                                   qsc, qs_nb0, qs_nb1, HI,
                                                                   (float *)wqw.p, tw);
        LA_CU_LAUNCH("w*q_scale");
        dim3 grid((unsigned)la_cu_cdiv(dI, 128), (unsigned)nb);
        hs_pool_fp8_kernel<<<grid, 128, 0, s>>>((const uint8_t *)a.k, a.k_nb0, L, dI, B, ks, ks_nb,
                                                (__nv_bfloat16 *)kbw.p);
        LA_CU_LAUNCH("block means (fp8)");
    }
    /* 2. block scores: the bf16 path on (q_bf16, k̄, w'), forced ends, top-m */
    la_sp_score_args ab = a;
    ab.q = qbw.p;
    ab.q_dt = LA_BF16;
    ab.q_nb0 = HI * dI;
    ab.q_nb1 = dI;
    ab.q_nb2 = 1;
    ab.w = wqw.p;
    ab.w_dt = LA_F32;
    ab.w_nb0 = HI;
    ab.w_nb1 = 1;
    LA_TRY(hs_keep_blocks(ab, kbw.p, LA_BF16, nb, B, mk, &bsw, &keptw, ch, s));
    /* 3. candidate scores on the e4m3 rows (hb2_kernel<1>), token top-k */
    const int64_t nc = mk * B;
    LA_TRY(la_mul_size((size_t)T, (size_t)nc * 4, &bytes, "candidate scores"));
    LA_TRY(la_cu_ws_alloc(&csw, bytes, s, "candidate scores"));
    ac.w = wqw.p;
    ac.w_dt = LA_F32;
    ac.w_nb0 = HI;
    ac.w_nb1 = 1;
    ac.blocks = (const int32_t *)keptw.p;
    ac.ncols = nc;
    ac.out = (float *)csw.p;
    ac.out_ld = nc;
    LA_TRY(hb_launch(ac, ch, s, true, ks, ks_nb));
    LA_TRY(hs_token_topk((const float *)csw.p, T, nc, (const int32_t *)keptw.p, mk, B, idx, ch, s));
    la_err_clear();
    return LA_OK;
}

/* Test hook (tests/cuda/test_cuda_dsa_fp8.c declares it; not in the public
 * header): hb2_kernel<1>'s candidate scores with every block kept in ascending
 * order, so column r*B + j is token r*B + j and `out` ([T, nb*B] f32 on the
 * device, nb = ⌈L/B⌉) compares column for column with the DSA indexer's
 * fp8 score rows (-inf outside the ranges, columns >= L -inf too). The
 * views are validated as HISA's (idx: any valid [T, topk] i32 view, not
 * written); LA_ERR_UNSUPPORTED when hb2_kernel<1> does not take them. */
__global__ void hs_iota_blocks_kernel(int32_t *kept, int64_t T, int64_t nb) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < T * nb;
         i += (int64_t)gridDim.x * blockDim.x)
        kept[i] = (int32_t)(i % nb);
}
extern "C" la_status la_hisa_fp8_stage2_scores_test(const la_index_params *p, const la_tensor *q,
                                                    const la_tensor *k, const la_tensor *w,
                                                    const la_tensor *start, const la_tensor *end,
                                                    const la_tensor *idx, float *out,
                                                    la_context *ctx) {
    LA_TRY(la_sp_validate_fp8_cuda("hisa", p, q, k, w, start, end, idx));
    LA_TRY(hs_check_params("hisa", 0, p));
    la_sp_score_args a;
    la_sp_fill_score_args(&a, q, k, w, start, end);
    const int64_t T = a.T, L = a.Lk, HI = a.HI;
    if (T < 1 || L < 1) return LA_OK;
    const int64_t B = p->block < L ? p->block : L, nb = (L + B - 1) / B;
    a.m = nb;
    a.blocks_ld = nb;
    a.B = (int)B;
    if (!hb8_ok(a) || nb > (int64_t)INT32_MAX / B)
        return la_err(LA_ERR_UNSUPPORTED, "hisa stage-2 test hook: views not hb2_kernel<1>'s");
    cudaStream_t s = la_cu_stream(ctx);
    const float *ks = p->k_scale ? (const float *)p->k_scale->data : nullptr;
    const int64_t ks_nb = p->k_scale ? p->k_scale->nb[0] : 0;
    const float *qsc = p->q_scale ? (const float *)p->q_scale->data : nullptr;
    hs_choice ch;
    LA_TRY(hs_select(ctx, &ch));
    la_cu_ws wqw, keptw;
    LA_TRY(la_cu_ws_alloc(&wqw, (size_t)(T * HI) * 4, s, "w*q_scale"));
    LA_TRY(la_cu_ws_alloc(&keptw, (size_t)(T * nb) * 4, s, "kept blocks"));
    hs_wq_kernel<<<(unsigned)la_cu_cdiv(T * HI, 256), 256, 0, s>>>(
        a.w, a.w_dt, a.w_nb0, a.w_nb1, qsc, qsc ? p->q_scale->nb[0] : 0,
        qsc ? p->q_scale->nb[1] : 0, HI, (float *)wqw.p, T * HI);
    LA_CU_LAUNCH("w*q_scale");
    int64_t g = la_cu_cdiv(T * nb, 256);
    hs_iota_blocks_kernel<<<(unsigned)(g < 65535 ? g : 65535), 256, 0, s>>>((int32_t *)keptw.p, T, nb);
    LA_CU_LAUNCH("iota blocks");
    a.w = wqw.p;
    a.w_dt = LA_F32;
    a.w_nb0 = HI;
    a.w_nb1 = 1;
    a.blocks = (const int32_t *)keptw.p;
    a.ncols = nb * B;
    a.out = out;
    a.out_ld = nb * B;
    LA_TRY(hb_launch(a, ch, s, true, ks, ks_nb));
    LA_CU(cudaStreamSynchronize(s));
    la_err_clear();
    return LA_OK;
}

/* fp8 e4m3 q/k (k_scale / q_scale as for the DSA indexer, SPEC §6):
 *  - HISA keeping every block (m ≥ ⌈L/B⌉): the candidates are all keys, and
 *    SPEC §7 says the result equals the DSA indexer's: it is the DSA
 *    indexer's fp8 path, so equal by construction;
 *  - otherwise HISA runs the e4m3 wgmma route above (hs_run_fp8wg) where it
 *    takes the views (HI = 64, dI = 128, 16-byte rows);
 *  - the block-sparse baseline, other views, and LA_CUDA_HISA_FP8=f32:
 *    dequantized f32 copies (scales folded in) through the f32 pipeline
 *    (exact fp32 kernels: the CPU's result on the same dequantized inputs).
 *    Correct, not fast: block means, block scores and candidate scores run
 *    on CUDA cores (docs/SPARSE.md). */
static la_status hs_run_fp8(const char *op, int blocksparse, const la_index_params *p,
                            const la_tensor *q, const la_tensor *k, const la_tensor *w,
                            const la_tensor *start, const la_tensor *end, la_tensor *idx,
                            la_context *ctx) {
    LA_TRY(la_sp_validate_fp8_cuda(op, p, q, k, w, start, end, idx));
    LA_TRY(hs_check_params(op, blocksparse, p));
    const int64_t L = k->ne[0];
    hs_choice ch;
    LA_TRY(hs_select(ctx, &ch));
    const int mode = blocksparse ? 0 : ch.fp8;
    if (!blocksparse && L > 0) {
        const int64_t B = p->block < L ? p->block : L, nb = (L + B - 1) / B;
        if (p->block_topk >= nb && mode != 2)
            return la_dsa_indexer_cuda(p, q, k, w, start, end, idx, NULL, ctx);
    }
    if (mode != 0) {
        bool taken = false;
        LA_TRY(hs_run_fp8wg(p, q, k, w, start, end, idx, ctx, &taken));
        if (taken) return LA_OK;
    }
    cudaStream_t s = la_cu_stream(ctx);
    la_cu_ws qf, kf;
    la_tensor tq, tk;
    LA_TRY(la_sp_fp8_to_f32(p, q, k, &qf, &kf, &tq, &tk, s));
    la_index_params pf = *p;
    pf.k_scale = NULL;
    pf.q_scale = NULL;
    return hs_run(op, blocksparse, &pf, &tq, &tk, w, start, end, idx, ctx);
}

static bool hs_is_fp8(const la_index_params *p, const la_tensor *q, const la_tensor *k) {
    return p && q && k &&
           (p->k_scale || p->q_scale || q->dtype == LA_FP8_E4M3 || k->dtype == LA_FP8_E4M3);
}

extern "C" la_status la_hisa_indexer_cuda(const la_index_params *p, const la_tensor *q,
                                          const la_tensor *k, const la_tensor *w,
                                          const la_tensor *start, const la_tensor *end,
                                          la_tensor *idx, la_context *ctx) {
    if (hs_is_fp8(p, q, k)) return hs_run_fp8("hisa", 0, p, q, k, w, start, end, idx, ctx);
    return hs_run("hisa", 0, p, q, k, w, start, end, idx, ctx);
}

extern "C" la_status la_blocksparse_indexer_cuda(const la_index_params *p, const la_tensor *q,
                                                 const la_tensor *k, const la_tensor *w,
                                                 const la_tensor *start, const la_tensor *end,
                                                 la_tensor *idx, la_context *ctx) {
    if (hs_is_fp8(p, q, k)) return hs_run_fp8("blocksparse", 1, p, q, k, w, start, end, idx, ctx);
    return hs_run("blocksparse", 1, p, q, k, w, start, end, idx, ctx);
}
