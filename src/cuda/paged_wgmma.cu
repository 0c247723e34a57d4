/* Paged DSA decode scores on Hopper wgmma (variant "wgmma" of family
 * "paged"; paged_index_tc.cuh, docs/CUDA.md "DSA indexer").
 *
 * One CTA = one warpgroup (128 threads) scores one query row t over
 * PW_TILES consecutive tiles of 64 keys of its sequence (1024 positions):
 *   A (keys): a tile of 64 key rows (M = 64), each row 128 e4m3 bytes read
 *             through the block table (page table[seq][p / ps], row p % ps)
 *             by cp.async into a PW_STAGES ring, so a CTA streams 128 KB;
 *   B (q):    the row's 64 heads (N = 64) x 128 e4m3 bytes, loaded once.
 * Both are in the K-major 128-byte-swizzle layout of DSA v2 (dsa_v2.cu:
 * chunk c of row r at c ^ (r & 7), 8-row groups 1024 B apart), and one tile
 * is 4 wgmma m64n64k32 (32 bytes of k each), fp32 accumulators.
 * Epilogue: DSA v2's arithmetic on its m64n128 accumulators restricted to
 * one query (la_wg_relu_headsum_wr's FMA chains over the row's 8 column
 * blocks, the quad sum (V0 + V1) + (V2 + V3)), times the key's fp32 scale,
 * -inf outside [0, end[t]); so with the same tensor-core dot products a
 * score equals DSA v2's on the gathered keys. Every column < ncols of the
 * CTA's span is written. Keys only (bf16 caches stay on the mma.sync
 * kernel). pw2_kernel (variant "wgmma2", the e4m3 default
 * where it applies: paged_index.cu's kPagedWgmma2Default) is the same
 * computation with the key addresses and scales off the critical path;
 * pw2_kernel<true> (variant "wgmma" of family "paged_hisa_cand") runs it
 * on HISA's candidates instead of a span of positions: column p of row t is
 * token p % B of kept block blocks[t][p / B] (sc_key_of's map), so each
 * candidate's score is DSA v2's on that key, the bits of the dense HISA's
 * block-major wgmma stage 2 (hisa_stage2.cu), and a HISA call keeping every
 * block selects what the paged DSA default selects. */
#include "cuda/common.cuh"
#include "cuda/paged_index_tc.cuh"
#include "cuda/paged_wgmma.cuh"
#include "cuda/ptx.cuh"
#include "cuda/topk_common.cuh"

#define PW_THREADS 128
#define PW_STAGES 4
#define PW_TILES 16
#define PW_TILE_BYTES (64 * 128)
#define PW_SMEM (1024 + PW_TILE_BYTES * (1 + PW_STAGES) + 64 * 4)

namespace {

/* D(64x64) (+)= A(64x32) B(32x64), e4m3, both K-major from shared memory */
__device__ __forceinline__ void pw_wgmma(float *d, uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
                   "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
                   "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* the row of position p of sequence seq (p < its length) and its page */
__device__ __forceinline__ const uint8_t *pw_row(const sc_pages &pg, int64_t seq, int64_t p, const uint8_t **page) {
    const int64_t pid = pg.table[seq * pg.maxp + p / pg.ps];
    *page = pg.pages + pid * pg.page_bytes;
    return *page + (p % pg.ps) * 128;
}

__global__ void __launch_bounds__(PW_THREADS) pw_kernel(la_sp_score_args a, sc_pages pg) {
#if LA_CU_SM90_CODE
    extern __shared__ uint8_t pw_raw[];
    uint8_t *sm = (uint8_t *)(((uintptr_t)pw_raw + 1023) & ~(uintptr_t)1023);
    uint8_t *Qs = sm, *Ks = sm + PW_TILE_BYTES;
    float *ws = (float *)(Ks + PW_STAGES * PW_TILE_BYTES);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, qd = lane & 3;
    const int64_t t = blockIdx.y, seq = pg.row_seq[t];
    const int64_t end = a.range.end[t * a.range.end_nb]; /* <= the sequence's length */
    const int64_t key0 = (int64_t)blockIdx.x * (PW_TILES * 64);
    const int64_t colend = min(a.ncols, key0 + PW_TILES * 64), kend = min(end, colend);
    const int nt = kend > key0 ? (int)((kend - key0 + 63) / 64) : 0;
    float *orow = a.out + t * a.out_ld;
    for (int64_t p = key0 + (int64_t)nt * 64 + tid; p < colend; p += PW_THREADS) orow[p] = -INFINITY;
    if (nt == 0) return;

    const uint8_t *q = (const uint8_t *)a.q + t * a.q_nb0;
    for (int i = tid; i < 64 * 8; i += PW_THREADS) {
        const int h = i >> 3, c = i & 7;
        la_cp16(Qs + la_wg_off(64, h, c), q + h * a.q_nb1 + c * 16);
    }
    if (tid < 64) ws[tid] = la_cu_ld(a.w, a.w_dt, t * a.w_nb0 + tid * a.w_nb1);
    la_cp_commit_nc();
    /* tile k into stage k % PW_STAGES: thread tid copies column tid & 7 of rows tid / 8 + 16j */
    const int lc = tid & 7, lr = tid >> 3;
    auto load = [&](int k) {
        uint8_t *dst = Ks + (k % PW_STAGES) * PW_TILE_BYTES;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int r = lr + 16 * j;
            const int64_t p = key0 + (int64_t)k * 64 + r;
            const uint8_t *page, *src = pg.pages;
            const bool ok = p < kend;
            if (ok) src = pw_row(pg, seq, p, &page) + lc * 16;
            la_cp16z_n(dst + la_wg_off(64, r, lc), src, ok ? 16 : 0);
        }
    };
#pragma unroll
    for (int k = 0; k < PW_STAGES - 1; k++) {
        if (k < nt) load(k);
        la_cp_commit_nc();
    }
    constexpr uint64_t HI = (uint64_t)((1024 >> 4) | (1u << 30)) << 32; /* la_wg_desc's high word */
    const uint32_t q_lo = ((((uint32_t)__cvta_generic_to_shared(Qs)) & 0x3FFFFu) >> 4) | (1u << 16);
    const uint32_t k_lo = ((((uint32_t)__cvta_generic_to_shared(Ks)) & 0x3FFFFu) >> 4) | (1u << 16);
    /* this thread's key rows of a tile (16 warp + g, + 8) and the lane that stores each */
    const int r_out = 16 * warp + g + 8 * (qd & 1);
    float2 wr[8];
    float acc[32];
#pragma unroll
    for (int i = 0; i < 32; i++) acc[i] = 0.f;
    for (int k = 0; k < nt; k++) {
        la_cp_wait<PW_STAGES - 2>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); /* tile k (and q, w) visible; stage (k - 1) % PW_STAGES is free */
        if (k == 0) {
#pragma unroll
            for (int jj = 0; jj < 8; jj++) wr[jj] = *(const float2 *)(ws + 8 * jj + 2 * qd);
        }
        if (k + PW_STAGES - 1 < nt) load(k + PW_STAGES - 1);
        la_cp_commit_nc();
        const uint32_t kl = k_lo + (uint32_t)((k % PW_STAGES) * PW_TILE_BYTES >> 4);
        la_wg_fence_acc<32>(acc);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            pw_wgmma(acc, (HI | (uint64_t)kl) + (uint32_t)(kk * 2), (HI | (uint64_t)q_lo) + (uint32_t)(kk * 2),
                     kk > 0 ? 1 : 0);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        la_wg_fence_acc<32>(acc);
        /* la_wg_relu_headsum_wr for one query: rows g (s0) and g + 8 (s1) */
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int jj = 0; jj < 8; jj++) {
            const float2 wv = wr[jj];
            s0 = fmaf(wv.x, la_relu_nan(acc[4 * jj + 0]), s0);
            s0 = fmaf(wv.y, la_relu_nan(acc[4 * jj + 1]), s0);
            s1 = fmaf(wv.x, la_relu_nan(acc[4 * jj + 2]), s1);
            s1 = fmaf(wv.y, la_relu_nan(acc[4 * jj + 3]), s1);
        }
        s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
        s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
        const int64_t p = key0 + (int64_t)k * 64 + r_out;
        if (qd < 2 && p < colend) {
            float o = -INFINITY;
            if (p < kend) {
                const uint8_t *page;
                pw_row(pg, seq, p, &page);
                o = (qd & 1 ? s1 : s0) * *(const float *)(page + (int64_t)pg.ps * 128 + (p % pg.ps) * 4);
            }
            orow[p] = o;
        }
    }
#else
    __trap(); /* built without sm_90a: pw_ok never takes this kernel there */
#endif
}

/* Variant "wgmma2": pw_kernel's tiles, MMAs and arithmetic (so the same
 * bits), without its per-tile global round trips. In pw_kernel every tile
 * waits twice on global memory outside the cp.async pipeline: the block-table
 * reads that form the next tile's addresses (before its cp.async can issue)
 * and the key's fp32 scale read in the epilogue (a DRAM miss: nothing else
 * touches those 256 bytes of the page). Here the CTA's key rows are resolved
 * once, in the prologue, into a shared (page id, row) list (one table read
 * per position, all issued together), and each key's scale travels with its
 * tile: a 4-byte cp.async per key into a per-stage scale row in the same
 * commit group. The loop then touches global memory only through the
 * cp.async ring and the score stores. 32-bit position arithmetic (ncols <
 * 2^31). (A histogram of the scores for topk_rows.cuh made here with
 * global atomics slowed this kernel more than its own pass costs: the
 * "wgmma2r" default counts them in topk_rows.cuh.) */
#define PW2_KEYS (PW_TILES * 64)
#define PW2_SMEM (1024 + PW_TILE_BYTES * (1 + PW_STAGES) + PW_STAGES * 64 * 4 + 64 * 4 + PW2_KEYS * 8)

template <bool BLK>
__global__ void __launch_bounds__(PW_THREADS) pw2_kernel(la_sp_score_args a, sc_pages pg, la_pw_gmax gm) {
#if LA_CU_SM90_CODE
    extern __shared__ uint8_t pw_raw[];
    uint8_t *sm = (uint8_t *)(((uintptr_t)pw_raw + 1023) & ~(uintptr_t)1023);
    uint8_t *Qs = sm, *Ks = sm + PW_TILE_BYTES;
    float *scs = (float *)(Ks + PW_STAGES * PW_TILE_BYTES); /* [PW_STAGES][64] key scales */
    float *ws = scs + PW_STAGES * 64;
    /* [PW2_KEYS]: (page id, row in page) of column key0 + i; BLK: page id -1 for a
     * candidate without a key (no block in its slot, or outside the row's range) */
    int2 *rowat = (int2 *)(ws + 64);
    if constexpr (BLK) { /* after the block top-k, as a programmatic dependent (la_pdl_*) */
        la_pdl_launch_dependents();
        la_pdl_wait();
    }
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, qd = lane & 3;
    const int t = blockIdx.y, seq = pg.row_seq[t];
    const int key0 = blockIdx.x * PW2_KEYS;
    const int colend = (int)min(a.ncols, (int64_t)key0 + PW2_KEYS);
    int kend, lo = 0, hi = 0;
    if constexpr (BLK) {
        /* the candidates of the row's kept blocks (columns < m·B); each one's
         * validity is its own (pg_lookup's test, force_ends excluded by pwb_ok) */
        int64_t lo64, hi64;
        la_sp_row_range(a.range, t, &lo64, &hi64);
        lo = (int)lo64;
        hi = (int)min(hi64, a.Lk);
        kend = (int)min((int64_t)colend, a.m * a.B);
    } else {
        const int end = a.range.end[(int64_t)t * a.range.end_nb]; /* <= the sequence's length */
        kend = min(end, colend);
    }
    const int nt = kend > key0 ? (kend - key0 + 63) / 64 : 0;
    float *orow = a.out + (int64_t)t * a.out_ld;
    for (int p = key0 + nt * 64 + tid; p < colend; p += PW_THREADS) orow[p] = -INFINITY;
    if (nt == 0) return;

    const uint8_t *q = (const uint8_t *)a.q + (int64_t)t * a.q_nb0;
    for (int i = tid; i < 64 * 8; i += PW_THREADS) {
        const int h = i >> 3, c = i & 7;
        la_cp16(Qs + la_wg_off(64, h, c), q + h * a.q_nb1 + c * 16);
    }
    if (tid < 64) ws[tid] = la_cu_ld(a.w, a.w_dt, (int64_t)t * a.w_nb0 + tid * a.w_nb1);
    la_cp_commit_nc();
    {
        const unsigned ps = (unsigned)pg.ps;
        const int32_t *trow = pg.table + (int64_t)seq * pg.maxp;
        const int nk = kend - key0;
        if constexpr (BLK) {
            /* sc_key_of's map: candidate p = token p % B of kept block p / B.
             * Two rounds of independent loads (every kept-block entry, then
             * every table entry), not a chain of dependent pairs: a decode
             * call is one wave of these CTAs, so the prologue's latency is
             * not hidden behind other CTAs' tiles. */
            constexpr int J = PW2_KEYS / PW_THREADS;
            const unsigned Bu = (unsigned)a.B;
            const int32_t *brow = a.blocks + (int64_t)t * a.blocks_ld;
            int32_t b[J];
#pragma unroll
            for (int j = 0; j < J; j++) {
                const int i = tid + j * PW_THREADS;
                b[j] = i < nk ? brow[(unsigned)(key0 + i) / Bu] : -1;
            }
            int2 at[J];
#pragma unroll
            for (int j = 0; j < J; j++) {
                const unsigned p = (unsigned)(key0 + tid + j * PW_THREADS), bi = p / Bu;
                const int64_t s = (int64_t)b[j] * a.B + (p - bi * Bu);
                at[j] = make_int2(-1, 0);
                if (b[j] >= 0 && s >= lo && s < hi) {
                    const unsigned su = (unsigned)s, pi = su / ps;
                    at[j] = make_int2(trow[pi], (int)(su - pi * ps));
                }
            }
#pragma unroll
            for (int j = 0; j < J; j++)
                if (tid + j * PW_THREADS < nk) rowat[tid + j * PW_THREADS] = at[j];
        } else {
#pragma unroll
            for (int j = 0; j < PW2_KEYS / PW_THREADS; j++) {
                const int i = tid + j * PW_THREADS;
                if (i < nk) {
                    const unsigned p = (unsigned)(key0 + i), pi = p / ps;
                    rowat[i] = make_int2(trow[pi], (int)(p - pi * ps));
                }
            }
        }
    }
    __syncthreads(); /* rowat */
    const int64_t pb = pg.page_bytes, sc_off = (int64_t)pg.ps * 128;
    /* tile k into stage k % PW_STAGES: thread tid copies column tid & 7 of rows
     * tid / 8 + 16j, and threads < 64 the scale of row tid */
    const int lc = tid & 7, lr = tid >> 3;
    auto load = [&](int k) {
        const int st = k % PW_STAGES;
        uint8_t *dst = Ks + st * PW_TILE_BYTES;
        const int i0 = k * 64, nk = kend - key0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int r = lr + 16 * j;
            bool ok = i0 + r < nk;
            const uint8_t *src = pg.pages;
            if (ok) {
                const int2 at = rowat[i0 + r];
                if constexpr (BLK) ok = at.x >= 0;
                if (ok) src = pg.pages + (int64_t)at.x * pb + at.y * 128 + lc * 16;
            }
            la_cp16z_n(dst + la_wg_off(64, r, lc), src, ok ? 16 : 0);
        }
        if (tid < 64) {
            bool ok = i0 + tid < nk;
            const uint8_t *src = pg.pages;
            if (ok) {
                const int2 at = rowat[i0 + tid];
                if constexpr (BLK) ok = at.x >= 0;
                if (ok) src = pg.pages + (int64_t)at.x * pb + sc_off + at.y * 4;
            }
            la_cp4z_n(scs + st * 64 + tid, src, ok ? 4 : 0);
        }
    };
#pragma unroll
    for (int k = 0; k < PW_STAGES - 1; k++) {
        if (k < nt) load(k);
        la_cp_commit_nc();
    }
    constexpr uint64_t HI = (uint64_t)((1024 >> 4) | (1u << 30)) << 32; /* la_wg_desc's high word */
    const uint32_t q_lo = ((((uint32_t)__cvta_generic_to_shared(Qs)) & 0x3FFFFu) >> 4) | (1u << 16);
    const uint32_t k_lo = ((((uint32_t)__cvta_generic_to_shared(Ks)) & 0x3FFFFu) >> 4) | (1u << 16);
    const int r_out = 16 * warp + g + 8 * (qd & 1);
    float2 wr[8];
    float acc[32];
    /* !BLK with gm.p: the shared address of rowat[r_out] (tile 0's entry of this thread's key) */
    [[maybe_unused]] const uint32_t park = (uint32_t)__cvta_generic_to_shared(rowat + r_out);
#pragma unroll
    for (int i = 0; i < 32; i++) acc[i] = 0.f;
    for (int k = 0; k < nt; k++) {
        la_cp_wait<PW_STAGES - 2>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); /* tile k and its scales (and q, w) visible; stage (k - 1) % PW_STAGES is free */
        if (k == 0) {
#pragma unroll
            for (int jj = 0; jj < 8; jj++) wr[jj] = *(const float2 *)(ws + 8 * jj + 2 * qd);
        }
        if (k + PW_STAGES - 1 < nt) load(k + PW_STAGES - 1);
        la_cp_commit_nc();
        const int st = k % PW_STAGES;
        const uint32_t kl = k_lo + (uint32_t)(st * PW_TILE_BYTES >> 4);
        la_wg_fence_acc<32>(acc);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            pw_wgmma(acc, (HI | (uint64_t)kl) + (uint32_t)(kk * 2), (HI | (uint64_t)q_lo) + (uint32_t)(kk * 2),
                     kk > 0 ? 1 : 0);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        la_wg_fence_acc<32>(acc);
        /* pw_kernel's epilogue, the same operations in the same order */
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int jj = 0; jj < 8; jj++) {
            const float2 wv = wr[jj];
            s0 = fmaf(wv.x, la_relu_nan(acc[4 * jj + 0]), s0);
            s0 = fmaf(wv.y, la_relu_nan(acc[4 * jj + 1]), s0);
            s1 = fmaf(wv.x, la_relu_nan(acc[4 * jj + 2]), s1);
            s1 = fmaf(wv.y, la_relu_nan(acc[4 * jj + 3]), s1);
        }
        s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
        s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
        const int p = key0 + k * 64 + r_out;
        bool on = qd < 2 && p < kend; /* a valid key's score (kend <= colend) */
        if constexpr (BLK) on = on && rowat[p - key0].x >= 0;
        const float o = on ? __fmul_rn(qd & 1 ? s1 : s0, scs[st * 64 + r_out]) : -INFINITY;
        if (qd < 2 && p < colend) orow[p] = o;
        if constexpr (!BLK) {
            /* uniform: the group maxima of "wgmma2g" (topk_groups.cuh). The
             * key's fkey (0: not valid) parks in the first word of its rowat
             * entry, dead since load(k) read it (before the barrier at the top
             * of iteration k - PW_STAGES + 2); the maxima after the loop. One
             * shared store here, not shuffles and a global store per tile:
             * the serial tile loop paces this kernel. */
            if (gm.p && qd < 2 && p < kend) {
                const uint32_t u = o != -INFINITY ? tk_fkey(o) : 0u, sa = park + (uint32_t)(k * 64 * 8);
                asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(sa), "r"(u) : "memory");
            }
        }
    }
    if constexpr (!BLK) {
        if (gm.p) { /* uniform */
            __syncthreads(); /* every tile's parked fkeys */
            /* thread i: group i of the CTA's 1024 columns, for the groups of
             * its nt tiles (8 nt); columns >= kend were never parked: 0 */
            const int nk = kend - key0;
            if (tid < 8 * nt) {
                uint32_t u = 0;
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    const int c = 8 * tid + e;
                    uint32_t w = 0;
                    if (c < nk)
                        asm volatile("ld.shared.u32 %0, [%1];\n"
                                     : "=r"(w)
                                     : "r"((uint32_t)__cvta_generic_to_shared(rowat + c))
                                     : "memory");
                    u = max(u, w);
                }
                gm.p[(int64_t)t * gm.ld + (key0 >> 3) + tid] = u;
            }
        }
    }
#else
    __trap(); /* built without sm_90a: pw_ok never takes this kernel there */
#endif
}

} // namespace

bool la_sp_paged_wgmma_ok(const la_sp_score_args &a, const sc_pages &pg) {
    return a.hopper && pg.fp8 && a.HI == 64 && a.dI == 128 && !a.blocks && a.q_dt == LA_FP8_E4M3 && a.q_nb2 == 1 &&
           a.q_nb1 % 16 == 0 && a.q_nb0 % 16 == 0 && ((uintptr_t)a.q & 15) == 0 && pg.page_bytes % 16 == 0 &&
           ((uintptr_t)pg.pages & 15) == 0 && a.T <= 65535 && a.range.end && a.ncols <= (int64_t)INT32_MAX;
}

la_status la_sp_scores_paged_wgmma(const la_sp_score_args &a, const sc_pages &pg, cudaStream_t s) {
    if (a.T == 0 || a.ncols == 0) return LA_OK;
    dim3 grid((unsigned)la_cu_cdiv(a.ncols, PW_TILES * 64), (unsigned)a.T);
    pw_kernel<<<grid, PW_THREADS, PW_SMEM, s>>>(a, pg);
    LA_CU_LAUNCH("paged indexer scores (fp8 e4m3 wgmma)");
    return LA_OK;
}

la_status la_sp_scores_paged_wgmma2(const la_sp_score_args &a, const sc_pages &pg, cudaStream_t s, la_pw_gmax gm) {
    if (a.T == 0 || a.ncols == 0) return LA_OK;
    static_assert(PW2_SMEM <= 227 * 1024, "one CTA's shared memory");
    LA_TRY(la_cu_func_smem(a.ctx, (const void *)pw2_kernel<false>, PW2_SMEM, PW2_SMEM, true));
    dim3 grid((unsigned)la_cu_cdiv(a.ncols, PW2_KEYS), (unsigned)a.T);
    pw2_kernel<false><<<grid, PW_THREADS, PW2_SMEM, s>>>(a, pg, gm);
    LA_CU_LAUNCH("paged indexer scores (fp8 e4m3 wgmma, pipelined)");
    return LA_OK;
}

bool la_sp_paged_wgmma_blocks_ok(const la_sp_score_args &a, const sc_pages &pg) {
    return a.hopper && pg.fp8 && a.HI == 64 && a.dI == 128 && a.blocks && !a.force_ends && a.B > 0 &&
           a.q_dt == LA_FP8_E4M3 && a.q_nb2 == 1 && a.q_nb1 % 16 == 0 && a.q_nb0 % 16 == 0 &&
           ((uintptr_t)a.q & 15) == 0 && pg.page_bytes % 16 == 0 && ((uintptr_t)pg.pages & 15) == 0 &&
           a.T <= 65535 && a.ncols <= (int64_t)INT32_MAX && a.m * a.B <= (int64_t)INT32_MAX;
}

la_status la_sp_scores_paged_wgmma_blocks(const la_sp_score_args &a, const sc_pages &pg, bool pdl, cudaStream_t s) {
    if (a.T == 0 || a.ncols == 0) return LA_OK;
    LA_TRY(la_cu_func_smem(a.ctx, (const void *)pw2_kernel<true>, PW2_SMEM, PW2_SMEM, true));
    dim3 grid((unsigned)la_cu_cdiv(a.ncols, PW2_KEYS), (unsigned)a.T);
    LA_CU(la_cu_launch_pdl(pdl, pw2_kernel<true>, grid, dim3(PW_THREADS), PW2_SMEM, s, a, pg, la_pw_gmax{}));
    LA_CU_LAUNCH("paged hisa candidates (fp8 e4m3 wgmma)");
    return LA_OK;
}
