/* HISA stage 2 on the block-major wgmma kernel: see hisa.cuh. */
#include "hisa.cuh"
#include "ptx.cuh"

#include <string.h>

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
 * (The first block-major kernels, hb_kernel / hb8_kernel, were slower for
 * the same scores; removed: docs/CUDA.md.) */
#define HB_THREADS 128
#define HB_ROWS 128 /* keys per A tile */
#define HB_NQ 2     /* queries per chunk */
#define HB_HI 64
#define HB_DI 128
#define HB_BROWS (HB_NQ * HB_HI)
#define HB_STAGES 2
#define HB_QS 64 /* queries per slice (CTA) */

/* swizzled layout, descriptor, wgmma and fences: src/cuda/ptx.cuh (as DSA v2) */
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
#if LA_CU_SM90_CODE
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
            la_cp16z_sa(As_a + soff + j * RP * 128, kp + (ok ? s : 0) * a.k_nb0 * EB, ok ? 16 : 0);
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
            for (int j = 0; j < JQ; j++) la_cp16z_sa(d + j * RP * 128, p0 + j * hs, 16);
#pragma unroll
            for (int j = 0; j < JQ; j++)
                la_cp16z_sa(d + (JQ + j) * RP * 128, p1 + j * hs, ok1 ? 16 : 0);
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
            la_cp4z_n(ws + st * HB_BROWS + tid, (const float *)a.w + off, okw ? 4 : 0);
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
#else
    __trap(); /* built without sm_90a: selection never picks this kernel there */
#endif
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
bool hb_ok(const la_sp_score_args &a) {
    if (!a.hopper) return false; /* wgmma: sm_90a only */
    if (a.q_dt != LA_BF16 || a.k_dt != LA_BF16 || a.HI != HB_HI || a.dI != HB_DI) return false;
    if (a.q_nb2 != 1 || a.q_nb1 % 8 || a.q_nb0 % 8 || ((uintptr_t)a.q & 15)) return false;
    if (a.k_nb1 != 1 || a.k_nb0 % 8 || ((uintptr_t)a.k & 15)) return false;
    const int64_t nb = (a.Lk + a.B - 1) / a.B;
    const int64_t npairs = a.T * a.m, nsl = npairs / HB_QS + (nb < npairs ? nb : npairs);
    return a.m >= 1 && a.blocks_ld == a.m && nb <= 65535 && npairs <= (int64_t)INT32_MAX && nsl <= (int64_t)INT32_MAX &&
           la_cu_cdiv(a.B, HB_ROWS) <= 65535;
}

/* The block-major candidate scores: bucketing, then hb2_kernel (bf16, or
 * e4m3 with fp8: a.w = w·q_scale, ks = k_scale). (A one-launch bucketing,
 * one CTA for memset + count + scan + fill, was slower than these four
 * launches: removed.) */
la_status hb_launch(const la_sp_score_args &a, cudaStream_t s, bool fp8, const float *ks,
                    int64_t ks_nb) {
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
        LA_TRY(la_cu_func_smem(a.ctx, (const void *)hb2_kernel<1, false>, hb2_cfg<1>::SMEM,
                               hb2_cfg<1>::SMEM, false));
        hb2_kernel<1, false><<<grid, HB_THREADS, hb2_cfg<1>::SMEM, s>>>(a, h, ks, ks_nb, 0);
    } else {
        LA_TRY(la_cu_func_smem(a.ctx, (const void *)hb2_kernel<2, false>, hb2_cfg<2>::SMEM,
                               hb2_cfg<2>::SMEM, false));
        hb2_kernel<2, false><<<grid, HB_THREADS, hb2_cfg<2>::SMEM, s>>>(a, h, nullptr, 0, 0);
    }
    LA_CU_LAUNCH(fp8 ? "hisa candidate scores (block-major wgmma, fp8 e4m3)"
                     : "hisa candidate scores (block-major wgmma)");
    return LA_OK;
}

/* Whether hb2_kernel<2, true> takes the block-score views: bf16 q (16-byte
 * aligned rows, contiguous along dI) and block means (contiguous rows), HI =
 * 64, dI = 128, dense (no gather), nb <= INT32_MAX. */
bool hb2_dense_ok(const la_sp_score_args &a) {
    if (!a.hopper) return false; /* wgmma: sm_90a only */
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
la_status hb2_dense_launch(la_sp_score_args a, cudaStream_t s) {
    a.B = (int)a.Lk;
    const int nsm = la_cu_device_attr(cudaDevAttrMultiProcessorCount, 132);
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
    LA_TRY(la_cu_func_smem(a.ctx, (const void *)hb2_kernel<2, true>, hb2_cfg<2>::SMEM,
                           hb2_cfg<2>::SMEM, false));
    hb2_kernel<2, true><<<grid, HB_THREADS, hb2_cfg<2>::SMEM, s>>>(a, h, nullptr, 0, qs);
    LA_CU_LAUNCH("hisa block scores (wgmma)");
    return LA_OK;
}

/* Whether hb2_kernel<1> takes these views (HI = 64, dI = 128, e4m3 rows
 * 16-byte aligned and contiguous along dI; the list sizes of hb_ok). */
bool hb8_ok(const la_sp_score_args &a) {
    if (!a.hopper) return false; /* wgmma: sm_90a only */
    if (a.q_dt != LA_FP8_E4M3 || a.k_dt != LA_FP8_E4M3 || a.HI != HB_HI || a.dI != HB_DI)
        return false;
    if (a.q_nb2 != 1 || a.q_nb1 % 16 || a.q_nb0 % 16 || ((uintptr_t)a.q & 15)) return false;
    if (a.k_nb1 != 1 || a.k_nb0 % 16 || ((uintptr_t)a.k & 15)) return false;
    const int64_t nb = (a.Lk + a.B - 1) / a.B;
    const int64_t npairs = a.T * a.m, nsl = npairs / HB_QS + (nb < npairs ? nb : npairs);
    return a.m >= 1 && a.blocks_ld == a.m && nb <= 65535 && npairs <= (int64_t)INT32_MAX &&
           nsl <= (int64_t)INT32_MAX && la_cu_cdiv(a.B, HB_ROWS) <= 65535;
}
