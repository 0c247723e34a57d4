/* HISA's block stage on the paged index-key cache (paged_hisa.cuh), SPEC §7
 * steps 1-2 for la_paged_topk_cuda (paged_index.cu).
 *
 * Why: the classic chain (means kernel, generic fp32 score kernel with one
 * thread per block reading q from shared memory for every FMA, la_topk over
 * rows of ~1K blocks, a one-thread-per-row insertion sort) spent most of a
 * decode call on these short rows. Here:
 *
 * ph_block_scores_kernel: CTA (x, t) scores blocks [64·tiles·x, +64·tiles)
 *   of query row t. q [dI][64 heads] and w sit in shared memory for all its
 *   tiles; per tile the 64 block means are formed from the pooled sums
 *   (sum / count, the division of pg_means_kernel) into [dI][64], then each
 *   of the 128 threads accumulates 4 heads x 8 blocks over d ascending
 *   (fmaf from 0: the CPU kernel's per-head dot product, bit for bit), the
 *   ReLU'd sums go to shared memory and one thread per block folds the heads
 *   in ascending order (fmaf from 0). First / last block of the row's range
 *   +inf, blocks past it -inf, as pg_score_kernel's PG_BLOCKS mode.
 * ph_block_topk_kernel: one CTA per row, each thread a contiguous chunk of
 *   the row: an exact radix select of the m-th key (4 passes of 8 bits over
 *   the 32-bit sortable score: NaN above +inf, -inf never), the keys equal to
 *   it taken from the lowest block up (ties to the lower block), and the
 *   kept blocks written in ascending order with -1 after them: la_topk's set
 *   followed by pg_sort_kept_kernel's order. Only __syncthreads and shared
 *   atomics (no warp intrinsics), so dev/emu_paged_hisa.sh runs the kernel
 *   text on the CPU. */
#include "cuda/paged_hisa.cuh"
#include "cuda/select.cuh"

/* The default of family "paged_hisa": true runs "fused" where it applies.
 * (false: "classic", the chain before it; "fused" stays forceable.) */
constexpr bool kPagedHisaFused = true;

namespace {

__device__ __forceinline__ float *ph_smem() {
    extern __shared__ __align__(16) float ph_sm[];
    return ph_sm;
}

/* ---- kernel text (dev/emu_paged_hisa.sh cuts it between the markers) ---- */
/* PH_KERNELS_BEGIN */
enum { PH_HI = 64, PH_DI = 128, PH_NB = 64, PH_THREADS = 128, PH_RLD = PH_NB + 1, PH_TK = 256 };
/* shared floats of the score kernel: q [PH_DI][PH_HI], w [PH_HI], means [PH_DI][PH_NB] (then [PH_HI][PH_RLD]) */
enum { PH_SMEM_FLOATS = PH_DI * PH_HI + PH_HI + PH_DI * PH_NB };

__device__ __forceinline__ float ph_e4m3(unsigned b) {
    const unsigned e = (b >> 3) & 15u, m = b & 7u;
    float v;
    if (e == 0) v = (float)m * 0.001953125f; /* m·2^-9 */
    else if (e == 15 && m == 7) v = __int_as_float(0x7fc00000);
    else v = __int_as_float((int)(((e + 120u) << 23) | (m << 20)));
    return (b & 0x80u) ? -v : v;
}

/* q element: e4m3 decoded exactly, other floats as la_cu_ld (as pg_ldq) */
__device__ __forceinline__ float ph_ldq(const la_cu_view &q, int64_t off) {
    if (q.dt == LA_FP8_E4M3) return ph_e4m3(((const unsigned char *)q.data)[off]);
    return la_cu_ld(q.data, q.dt, off);
}

__global__ void __launch_bounds__(PH_THREADS) ph_block_scores_kernel(ph_blk_args a) {
    float *qs = ph_smem(), *ws = qs + PH_DI * PH_HI, *ks = ws + PH_HI;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t t = blockIdx.y;
    const int64_t s = a.row_seq[t], e = a.row_end[t], L = a.lens[s];
    const int64_t nblk = e > 0 ? (e + a.B - 1) / a.B : 0; /* blocks meeting [0, e) */
    const int64_t c0 = (int64_t)blockIdx.x * a.tiles * PH_NB;
    const int64_t c1 = c0 + (int64_t)a.tiles * PH_NB < a.nbmax ? c0 + (int64_t)a.tiles * PH_NB : a.nbmax;
    float *out = a.out + t * a.nbmax;
    if (c0 >= nblk) { /* nothing of the range here */
        for (int64_t b = c0 + tid; b < c1; b += PH_THREADS) out[b] = -INFINITY;
        return;
    }
    const int HI = a.HI, dI = a.dI;
    /* q: thread i loads 4 consecutive d of head i % 64 (heads fastest in shared memory: conflict-free stores) */
    for (int i = tid; i < (PH_DI / 4) * PH_HI; i += PH_THREADS) {
        const int h = i % PH_HI, d0 = i / PH_HI * 4;
        for (int c = 0; c < 4; c++) {
            const int d = d0 + c;
            qs[d * PH_HI + h] = h < HI && d < dI ? ph_ldq(a.q, t * a.q.nb[0] + h * a.q.nb[1] + d * a.q.nb[2]) : 0.f;
        }
    }
    for (int h = tid; h < PH_HI; h += PH_THREADS) ws[h] = h < HI ? la_cu_ld(a.w.data, a.w.dt, t * a.w.nb[0] + h * a.w.nb[1]) : 0.f;
    const int h0 = 4 * (lane & 15), j0 = warp * 16 + 8 * (lane >> 4); /* this thread's heads and blocks of a tile */
    for (int64_t b0 = c0; b0 < c1; b0 += PH_NB) {
        if (b0 >= nblk) { /* past the range: the rest of the CTA's columns (uniform branch) */
            for (int64_t b = b0 + tid; b < c1; b += PH_THREADS) out[b] = -INFINITY;
            break;
        }
        __syncthreads(); /* the previous tile's fold has read ks */
        /* means of blocks b0 .. b0+63: thread i forms 4 consecutive d of block b0 + i % 64 */
        for (int i = tid; i < (PH_DI / 4) * PH_NB; i += PH_THREADS) {
            const int j = i % PH_NB, d0 = i / PH_NB * 4;
            const int64_t b = b0 + j;
            float v[4] = {0.f, 0.f, 0.f, 0.f};
            if (b < nblk && d0 < dI) { /* b < nblk: b·B < e <= L, a block of at least one token */
                if (a.psum) {
                    const float cnt = (float)(L - b * a.B < a.B ? L - b * a.B : a.B);
                    const float *p = a.psum + ((s * a.max_blocks + b) * dI + d0);
                    for (int c = 0; c < 4; c++)
                        if (d0 + c < dI) v[c] = p[c] / cnt;
                } else {
                    const float *p = a.kbar + ((s * a.nbmax + b) * dI + d0);
                    for (int c = 0; c < 4; c++)
                        if (d0 + c < dI) v[c] = p[c];
                }
            }
            for (int c = 0; c < 4; c++) ks[(d0 + c) * PH_NB + j] = v[c];
        }
        __syncthreads();
        float acc[4][8];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 8; j++) acc[i][j] = 0.f;
#pragma unroll 4
        for (int d = 0; d < dI; d++) {
            const float4 qv = *(const float4 *)(qs + d * PH_HI + h0);
            const float4 k0 = *(const float4 *)(ks + d * PH_NB + j0), k1 = *(const float4 *)(ks + d * PH_NB + j0 + 4);
            const float qa[4] = {qv.x, qv.y, qv.z, qv.w};
            const float ka[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(qa[i], ka[j], acc[i][j]);
        }
        __syncthreads(); /* ks becomes the ReLU'd sums [PH_HI][PH_RLD] */
        float *red = ks;
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 8; j++) {
                const float x = acc[i][j];
                red[(h0 + i) * PH_RLD + j0 + j] = x < 0.f ? 0.f : x; /* NaN kept, as torch.relu */
            }
        __syncthreads();
        if (tid < PH_NB && b0 + tid < c1) {
            const int64_t b = b0 + tid;
            float res = -INFINITY;
            if (b < nblk) {
                float sc = 0.f;
                for (int h = 0; h < HI; h++) sc = fmaf(ws[h], red[h * PH_RLD + tid], sc);
                res = b == 0 || b == nblk - 1 ? INFINITY : sc; /* sink and local blocks are always kept */
            }
            out[b] = res;
        }
    }
}

/* sortable key (topk_common.cuh's tk_fkey): order-preserving, NaN largest */
__device__ __forceinline__ uint32_t ph_fkey(float f) {
    const uint32_t u = __float_as_uint(f);
    return f != f ? 0xFFFFFFFFu : (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Exclusive scan of one value per thread over the CTA (PH_TK threads); the
 * total in *tot. Ends with a barrier. */
__device__ __forceinline__ uint32_t ph_excl_scan(uint32_t v, uint32_t *buf, uint32_t *tot) {
    const int tid = threadIdx.x;
    buf[tid] = v;
    __syncthreads();
    for (int o = 1; o < PH_TK; o <<= 1) {
        const uint32_t x = tid >= o ? buf[tid - o] : 0u;
        __syncthreads();
        buf[tid] += x;
        __syncthreads();
    }
    const uint32_t incl = buf[tid];
    *tot = buf[PH_TK - 1];
    __syncthreads();
    return incl - v;
}

__global__ void __launch_bounds__(PH_TK) ph_block_topk_kernel(const float *sc, int64_t n, int64_t m, int32_t *kept) {
    uint32_t *hist = (uint32_t *)ph_smem(), *buf = hist + 256, *found = buf + PH_TK;
    const int tid = threadIdx.x;
    const int64_t t = blockIdx.x;
    const float *row = sc + t * n;
    int32_t *out = kept + t * m;
    const int64_t per = (n + PH_TK - 1) / PH_TK;
    const int64_t i0 = (int64_t)tid * per < n ? (int64_t)tid * per : n, i1 = i0 + per < n ? i0 + per : n;
    uint32_t nv = 0, tot;
    for (int64_t i = i0; i < i1; i++) nv += row[i] != -INFINITY;
    ph_excl_scan(nv, buf, &tot);
    const bool all = tot <= (uint32_t)m; /* every valid block is kept */
    uint32_t key = 0, mask = 0, need = (uint32_t)m; /* the m-th key's bits found so far; keys equal to it to take */
    if (!all)
        for (int shift = 24; shift >= 0; shift -= 8) {
            hist[tid] = 0; /* PH_TK == 256 bins */
            __syncthreads();
            for (int64_t i = i0; i < i1; i++) {
                const float f = row[i];
                if (f == -INFINITY) continue;
                const uint32_t k = ph_fkey(f);
                if ((k & mask) == key) atomicAdd(&hist[(k >> shift) & 255u], 1u);
            }
            __syncthreads();
            /* digit 255 - tid: above = keys with a larger digit */
            const uint32_t dg = 255u - (uint32_t)tid, c = hist[dg];
            const uint32_t above = ph_excl_scan(c, buf, &tot);
            if (above < need && above + c >= need) {
                found[0] = dg;
                found[1] = above;
            }
            __syncthreads();
            key |= found[0] << shift;
            mask |= 255u << shift;
            need -= found[1];
            __syncthreads(); /* found is rewritten by the next pass */
        }
    /* keys above the m-th all kept; equal ones from the lowest block up */
    uint32_t eq = 0;
    if (!all)
        for (int64_t i = i0; i < i1; i++) {
            const float f = row[i];
            eq += f != -INFINITY && ph_fkey(f) == key;
        }
    uint32_t r = ph_excl_scan(eq, buf, &tot), cnt = 0;
    for (int64_t i = i0; i < i1; i++) {
        const float f = row[i];
        if (f == -INFINITY) continue;
        const uint32_t k = ph_fkey(f);
        if (all || k > key) cnt++;
        else if (k == key) cnt += r++ < need;
    }
    uint32_t pos = ph_excl_scan(cnt, buf, &tot);
    r -= eq;
    for (int64_t i = i0; i < i1; i++) {
        const float f = row[i];
        if (f == -INFINITY) continue;
        const uint32_t k = ph_fkey(f);
        bool take = all || k > key;
        if (!take && k == key) take = r++ < need;
        if (take) out[pos++] = (int32_t)i;
    }
    for (int64_t j = tot + tid; j < m; j += PH_TK) out[j] = -1;
}
/* PH_KERNELS_END */

} // namespace

la_status la_ph_select(la_context *ctx, int64_t HI, int64_t dI, int *fused) {
    static const char *const names[] = {"fused", "classic"};
    const char *forced = la_context_variant(ctx, "paged_hisa");
    const int v = forced ? la_cu_variant_index(forced, names, 2) : (kPagedHisaFused ? 0 : 1);
    if (v < 0) return la_cu_unknown_variant("paged_hisa", forced, "fused, classic");
    const bool ok = HI >= 1 && HI <= PH_HI && dI >= 1 && dI <= PH_DI;
    if (v == 0 && forced && !ok) return la_cu_variant_unsupported("paged_hisa", "fused", "HI <= 64, dI <= 128");
    *fused = v == 0 && ok;
    la_cu_report(ctx, "paged_hisa", *fused ? "fused" : "classic", "HI=%lld dI=%lld", (long long)HI, (long long)dI);
    return LA_OK;
}

la_status la_ph_block_scores(ph_blk_args a, int64_t T, cudaStream_t s) {
    if (T <= 0 || a.nbmax <= 0) return LA_OK;
    const int64_t ntiles = (a.nbmax + PH_NB - 1) / PH_NB;
    /* tiles per CTA: one while the grid holds ~12 CTAs per SM (decode: q is
     * re-read per tile, cheap next to its 64 x 64 x dI FMAs), more for long
     * prefills so that q and w are loaded once for several tiles */
    const int64_t target = 132 * 12;
    int64_t tiles = (T * ntiles + target - 1) / target;
    if (tiles < 1) tiles = 1;
    if (tiles > ntiles) tiles = ntiles;
    a.tiles = (int)tiles;
    const int64_t gx = (ntiles + tiles - 1) / tiles;
    if (T > 65535) return la_err(LA_ERR_UNSUPPORTED, "paged hisa: %lld query rows exceed the grid", (long long)T);
    const size_t smem = PH_SMEM_FLOATS * sizeof(float);
    LA_CU(cudaFuncSetAttribute(ph_block_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    ph_block_scores_kernel<<<dim3((unsigned)gx, (unsigned)T), PH_THREADS, smem, s>>>(a);
    LA_CU_LAUNCH("paged hisa block scores");
    return LA_OK;
}

la_status la_ph_block_topk(const float *sc, int64_t T, int64_t n, int64_t m, int32_t *kept, cudaStream_t s) {
    if (T <= 0 || m <= 0) return LA_OK;
    if (T > 0x7fffffffLL) return la_err(LA_ERR_UNSUPPORTED, "paged hisa: %lld query rows exceed the grid", (long long)T);
    ph_block_topk_kernel<<<(unsigned)T, PH_TK, (256 + PH_TK + 2) * sizeof(uint32_t), s>>>(sc, n, m, kept);
    LA_CU_LAUNCH("paged hisa block top-k");
    return LA_OK;
}
