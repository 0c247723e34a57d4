/* HISA's block selection on the paged index-key cache (paged_hisa.cuh):
 * the kept blocks of each row of block scores (paged_hisa.cu's
 * ph_block_scores_kernel), for la_paged_topk_cuda's HISA branch
 * (paged_index.cu).
 *
 * ph_block_topk_kernel<PER>: one CTA per row, each thread a contiguous
 *   chunk of the row (in registers up to PER = 8 blocks a thread): an exact
 *   radix select of the m-th key (up to 4 passes of 8 bits over the 32-bit
 *   sortable score: NaN above +inf, -inf never; the search ends at the
 *   first digit whose keys are all kept), the keys equal to it taken from
 *   the lowest block up (ties to the lower block), and the kept blocks
 *   written in ascending order with -1 after them: la_topk's set followed
 *   by pg_sort_kept_kernel's order. Only __syncthreads and shared atomics
 *   (no warp intrinsics), so dev/emu_paged_hisa.sh runs the kernel text on
 *   the CPU. */
#include "cuda/paged_hisa.cuh"

namespace {

__device__ __forceinline__ uint32_t *ph_tk_smem() {
    extern __shared__ __align__(16) uint32_t ph_tk_sm[];
    return ph_tk_sm;
}
/* the kernel's first step: let the call's next kernel be scheduled, then
 * wait for the previous one (la_pdl_*; no-ops in the emulator) */
__device__ __forceinline__ void ph_tk_pdl_begin() {
    la_pdl_launch_dependents();
    la_pdl_wait();
}

/* ---- kernel text (dev/emu_paged_hisa.sh cuts it between the markers) ---- */
/* PH_TOPK_BEGIN */
enum { PH_TK = 256 /* threads of the block top-k (one per histogram bin) */ };

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

/* f(i, row[i]) for this thread's chunk [i0, i1): from PER registers
 * loaded once (-inf past i1: skipped like the row's own -inf), or from the
 * row (PER 0: rows of more than PH_TK x 8 blocks) */
template <int PER, class F>
__device__ __forceinline__ void ph_each(const float *row, const float *v, int64_t i0, int64_t i1, F f) {
    if (PER) {
#pragma unroll
        for (int u = 0; u < (PER ? PER : 1); u++) f(i0 + u, v[u]);
    } else {
        for (int64_t i = i0; i < i1; i++) f(i, row[i]);
    }
}

template <int PER>
__global__ void __launch_bounds__(PH_TK) ph_block_topk_kernel(const float *sc, int64_t n, int64_t m, int32_t *kept) {
    ph_tk_pdl_begin();
    uint32_t *hist = ph_tk_smem(), *buf = hist + 256, *found = buf + PH_TK;
    const int tid = threadIdx.x;
    const int64_t t = blockIdx.x;
    const float *row = sc + t * n;
    int32_t *out = kept + t * m;
    const int64_t per = (n + PH_TK - 1) / PH_TK;
    const int64_t i0 = (int64_t)tid * per < n ? (int64_t)tid * per : n, i1 = i0 + per < n ? i0 + per : n;
    float v[PER ? PER : 1];
#pragma unroll
    for (int u = 0; u < (PER ? PER : 1); u++) v[u] = PER && i0 + u < i1 ? row[i0 + u] : -INFINITY;
    uint32_t nv = 0, tot;
    ph_each<PER>(row, v, i0, i1, [&](int64_t, float f) { nv += f != -INFINITY; });
    ph_excl_scan(nv, buf, &tot);
    const bool all = tot <= (uint32_t)m; /* every valid block is kept */
    /* the m-th key's high bits found so far (key, under mask); keys with
     * those bits to take. A digit whose keys are all taken ends the search
     * early: the keys above it and all of its own are then the same set. */
    uint32_t key = 0, mask = 0, need = (uint32_t)m;
    if (!all)
        for (int shift = 24; shift >= 0; shift -= 8) {
            hist[tid] = 0; /* PH_TK == 256 bins */
            __syncthreads();
            ph_each<PER>(row, v, i0, i1, [&](int64_t, float f) {
                if (f == -INFINITY) return;
                const uint32_t k = ph_fkey(f);
                if ((k & mask) == key) atomicAdd(&hist[(k >> shift) & 255u], 1u);
            });
            __syncthreads();
            /* digit 255 - tid: above = keys with a larger digit */
            const uint32_t dg = 255u - (uint32_t)tid, c = hist[dg];
            const uint32_t above = ph_excl_scan(c, buf, &tot);
            if (above < need && above + c >= need) {
                found[0] = dg;
                found[1] = above;
                found[2] = above + c == need;
            }
            __syncthreads();
            key |= found[0] << shift;
            mask |= 255u << shift;
            need -= found[1];
            const bool whole = found[2] != 0;
            __syncthreads(); /* found is rewritten by the next pass */
            if (whole) break; /* uniform */
        }
    /* keys above the m-th (under mask) all kept; equal ones from the lowest block up */
    uint32_t eq = 0;
    if (!all)
        ph_each<PER>(row, v, i0, i1, [&](int64_t, float f) { eq += f != -INFINITY && (ph_fkey(f) & mask) == key; });
    uint32_t r = ph_excl_scan(eq, buf, &tot), cnt = 0;
    ph_each<PER>(row, v, i0, i1, [&](int64_t, float f) {
        if (f == -INFINITY) return;
        const uint32_t k = ph_fkey(f) & mask;
        if (all || k > key) cnt++;
        else if (k == key) cnt += r++ < need;
    });
    uint32_t pos = ph_excl_scan(cnt, buf, &tot);
    r -= eq;
    ph_each<PER>(row, v, i0, i1, [&](int64_t i, float f) {
        if (f == -INFINITY) return;
        const uint32_t k = ph_fkey(f) & mask;
        bool take = all || k > key;
        if (!take && k == key) take = r++ < need;
        if (take) out[pos++] = (int32_t)i;
    });
    for (int64_t j = tot + tid; j < m; j += PH_TK) out[j] = -1;
}
/* PH_TOPK_END */

} // namespace

la_status la_ph_block_topk(const float *sc, int64_t T, int64_t n, int64_t m, int32_t *kept, bool pdl,
                           cudaStream_t s) {
    if (T <= 0 || m <= 0) return LA_OK;
    if (T > 0x7fffffffLL) return la_err(LA_ERR_UNSUPPORTED, "paged hisa: %lld query rows exceed the grid", (long long)T);
    /* a row's scores in registers where a thread's chunk is at most 8 */
    const size_t smem = (256 + PH_TK + 3) * sizeof(uint32_t);
    const int64_t per = (n + PH_TK - 1) / PH_TK;
    auto *k = per <= 4 ? ph_block_topk_kernel<4> : per <= 8 ? ph_block_topk_kernel<8> : ph_block_topk_kernel<0>;
    LA_CU(la_cu_launch_pdl(pdl, k, dim3((unsigned)T), dim3(PH_TK), smem, s, sc, n, m, kept));
    LA_CU_LAUNCH("paged hisa block top-k");
    return LA_OK;
}
