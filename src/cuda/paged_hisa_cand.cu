/* HISA's candidate scores on the paged cache, block-major (variant
 * "blockmajor" of family "paged_hisa_cand"; paged_hisa.cuh), SPEC §7 step 3.
 *
 * Why: the gather mode of the paged mma.sync kernel (paged_index_tc.cuh)
 * runs one CTA per (query row, 256 candidates): every CTA loads its keys'
 * fragments for a single query, so a prefill (4096 rows x 64 kept blocks)
 * reads each kept block's keys once per query that keeps it and runs at the
 * decode kernel's ~120 TFLOP/s. Here the (query, kept block) pairs are
 * bucketed by (sequence, block) on the device, and one CTA scores one block
 * of 128 keys for up to PC_QPC of the queries that kept it: the keys'
 * fragments stay in registers while the queries stream through shared
 * memory (the dense mode's structure, K fragments reused across queries).
 *
 * Bits: per (query, key) the instruction sequence is the gather kernel's
 * (sc_mma_kernel in dsa.cu): the same A fragments (keys: bytes 4qd.. and
 * 16+4qd.. of each 32-byte k-step, rows g and g+8), the same B fragments
 * (the query block in shared memory, 16-byte chunk c of head h at
 * c ^ (h & 7), read by ldmatrix), k-steps ascending into zeroed fp32
 * accumulators, the same epilogue (per lane heads 8j+2qd, +1 folded with
 * fmaf over j ascending, two xor shuffles over the quad, times the key's
 * fp8 scale). An mma's output element depends only on its own row, column
 * and accumulator, so which queries or keys share a CTA changes nothing.
 * Keys past the query's range get -inf, as in the gather mode; the kernel
 * writes only kept slots, pc_fill_kernel the other columns (-1 slots and
 * columns past m·B).
 *
 * Bucketing (deterministic output; the order inside a bucket does not
 * matter): pc_count_kernel counts the pairs per (sequence, block),
 * pc_scan_kernel (one CTA) forms the bucket offsets and the work list
 * (bucket and its list rows of one chunk of up to PC_QPC queries), pc_scatter_kernel fills the buckets.
 * The score grid is the host's bound on the work items; CTAs past the
 * device's count return. */
#include "cuda/dsa_mma.cuh"
#include "cuda/paged_hisa.cuh"
#include "cuda/ptx.cuh"
#include "cuda/select.cuh"

/* The default of family "paged_hisa_cand": true runs "blockmajor" where it
 * applies and pays (rows per sequence >= PC_MIN_ROWS); false: "gather". */
constexpr bool kPagedHisaBlockMajor = true;
/* Where the block-major kernel is not taken (decode): true runs "wgmma"
 * (paged_wgmma.cu's pw2 kernel on the candidates: DSA v2's bits, a quarter
 * of the emulated e4m3 mma.sync's tensor instructions) where it applies;
 * false: "gather". */
constexpr bool kPagedHisaWgmma = true;

namespace {

__device__ __forceinline__ unsigned char *pc_smem() {
    extern __shared__ __align__(128) unsigned char pc_sm[];
    return pc_sm;
}

/* PC_KERNELS_BEGIN */
enum { PC_THREADS = 128, PC_WARPS = 4, PC_MT = 2, PC_KEYS = PC_WARPS * 16 * PC_MT, PC_QPC = 64, PC_SCAN = 1024 };

/* pairs (t, slot) of kept[t][slot] >= 0, counted per bucket seq·nbmax + block */
__global__ void pc_count_kernel(pc_args a, int32_t *cnt) {
    const int64_t n = a.T * a.m;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / a.m;
        const int32_t b = a.kept[i];
        if (b >= 0) atomicAdd(&cnt[(int64_t)a.row_seq[t] * a.nbmax + b], 1);
    }
}

/* One CTA of PC_SCAN threads: boff[i] = pairs of buckets before i (and the
 * scatter cursors), the work list (bucket, list rows i0 .. i1) of every
 * bucket's ceil(cnt / PC_QPC) chunks in bucket order, *nwork their count. */
__global__ void __launch_bounds__(PC_SCAN) pc_scan_kernel(const int32_t *cnt, int64_t n, int32_t *boff,
                                                           int32_t *cur, int4 *work, int32_t *nwork) {
    int32_t *sp = (int32_t *)pc_smem(), *sw = sp + PC_SCAN;
    const int tid = threadIdx.x;
    const int64_t per = (n + PC_SCAN - 1) / PC_SCAN;
    const int64_t i0 = (int64_t)tid * per < n ? (int64_t)tid * per : n, i1 = i0 + per < n ? i0 + per : n;
    int32_t np = 0, nw = 0;
    for (int64_t i = i0; i < i1; i++) {
        np += cnt[i];
        nw += (cnt[i] + PC_QPC - 1) / PC_QPC;
    }
    sp[tid] = np;
    sw[tid] = nw;
    __syncthreads();
    for (int o = 1; o < PC_SCAN; o <<= 1) { /* inclusive scans of both */
        const int32_t xp = tid >= o ? sp[tid - o] : 0, xw = tid >= o ? sw[tid - o] : 0;
        __syncthreads();
        sp[tid] += xp;
        sw[tid] += xw;
        __syncthreads();
    }
    int32_t p = sp[tid] - np, wk = sw[tid] - nw;
    for (int64_t i = i0; i < i1; i++) {
        const int32_t base = p, end = p + cnt[i];
        boff[i] = base;
        cur[i] = base;
        p = end;
        for (int32_t r0 = base; r0 < end; r0 += PC_QPC) /* (bucket, its list rows r0 .. r1) */
            work[wk++] = make_int4((int)i, r0, end < r0 + PC_QPC ? end : r0 + PC_QPC, 0);
    }
    if (tid == PC_SCAN - 1) {
        boff[n] = sp[tid];
        *nwork = sw[tid];
    }
}

__global__ void pc_scatter_kernel(pc_args a, int32_t *cur, int32_t *list) {
    const int64_t n = a.T * a.m;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / a.m;
        const int32_t b = a.kept[i];
        if (b >= 0) list[atomicAdd(&cur[(int64_t)a.row_seq[t] * a.nbmax + b], 1)] = (int32_t)i; /* t·m + slot */
    }
}

/* -inf in the columns no score CTA writes: slots without a block, columns past m·B */
__global__ void pc_fill_kernel(pc_args a) {
    const int64_t t = blockIdx.x;
    float *o = a.out + t * a.out_ld;
    for (int64_t p = threadIdx.x; p < a.ncols; p += blockDim.x)
        if (p >= a.m * PC_KEYS || a.kept[t * a.m + p / PC_KEYS] < 0) o[p] = -INFINITY;
}

/* q block of row t ([HI][dI·EB] bytes, swizzled as sc_load_q) and its head weights */
template <int HI, int EB>
__device__ __forceinline__ void pc_load_q(const pc_args &a, int64_t t, uint8_t *qs, float *ws) {
    constexpr int RB = 128 * EB, CPR = RB / 16, SWZ = (CPR < 8 ? CPR : 8) - 1;
    const uint8_t *q = (const uint8_t *)a.q + t * a.q_nb0 * EB;
    for (int i = threadIdx.x; i < HI * CPR; i += PC_THREADS) {
        const int h = i / CPR, c = i % CPR;
        la_cp16(qs + h * RB + ((c ^ (h & SWZ)) * 16), q + h * a.q_nb1 * EB + c * 16);
    }
    for (int h = threadIdx.x; h < HI; h += PC_THREADS) ws[h] = la_cu_ld(a.w, a.w_dt, t * a.w_nb0 + h * a.w_nb1);
    la_cp_commit_nc();
}

/* The page row of token tok (< the sequence's length) and its fp8 scale. */
__device__ __forceinline__ const uint8_t *pc_row(const pc_args &a, int64_t seq, int64_t tok, int RB, float *scale) {
    const int64_t page = a.table[seq * a.maxp + tok / a.ps], off = tok % a.ps;
    const uint8_t *base = a.pages + page * a.page_bytes;
    *scale = a.fp8 ? *(const float *)(base + (int64_t)a.ps * RB + off * 4) : 1.f;
    return base + off * RB;
}

template <int HI, int EB>
__global__ void __launch_bounds__(PC_THREADS, 3) pc_score_kernel(pc_args a) {
    constexpr int NT = HI / 8, RB = 128 * EB, KS = RB / 32, CPR = RB / 16, SWZ = (CPR < 8 ? CPR : 8) - 1;
    uint8_t *qs0 = (uint8_t *)pc_smem();
    float *ws0 = (float *)(qs0 + 2 * HI * RB);
    const int wi = blockIdx.x;
    if (wi >= *a.nwork) return;
    const int4 wk = a.work[wi]; /* the rows come with the item: no dependent load of the offsets */
    const int64_t bucket = wk.x, seq = bucket / a.nbmax, blk = bucket % a.nbmax, i0 = wk.y, i1 = wk.z;
    const int64_t klen = a.lens[seq];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, qd = lane & 3;
    pc_load_q<HI, EB>(a, a.list[i0] / a.m, qs0, ws0);
    /* this warp's 32 keys of the block, all of dI, in registers (zero past the sequence) */
    uint32_t af[PC_MT][KS][4];
    float ksv[PC_MT];
#pragma unroll
    for (int mt = 0; mt < PC_MT; mt++) {
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int64_t tok = blk * PC_KEYS + warp * 16 * PC_MT + mt * 16 + g + 8 * half;
            float sc = 1.f;
            const uint8_t *kr = tok < klen ? pc_row(a, seq, tok, RB, &sc) : a.pages;
#pragma unroll
            for (int ks = 0; ks < KS; ks++) {
                uint32_t lo2 = 0, hi2 = 0;
                if (tok < klen) {
                    lo2 = *(const uint32_t *)(kr + ks * 32 + 4 * qd);
                    hi2 = *(const uint32_t *)(kr + ks * 32 + 16 + 4 * qd);
                }
                af[mt][ks][half] = lo2;
                af[mt][ks][2 + half] = hi2;
            }
            if (half == (qd & 1)) ksv[mt] = sc; /* the scale of the key this lane stores */
        }
    }
    for (int64_t i = i0; i < i1; i++) {
        const int buf = (int)((i - i0) & 1);
        const int64_t pair = a.list[i], t = pair / a.m, slot = pair % a.m;
        la_cp_wait_all_nc();
        __syncthreads(); /* q(t) visible; everyone is done with the other buffer */
        if (i + 1 < i1) pc_load_q<HI, EB>(a, a.list[i + 1] / a.m, qs0 + (buf ^ 1) * HI * RB, ws0 + (buf ^ 1) * HI);
        float acc[PC_MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < PC_MT; mt++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[mt][j][e] = 0.f;
        const uint8_t *qb = qs0 + buf * HI * RB;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
#pragma unroll
            for (int jp = 0; jp < NT / 2; jp++) {
                const int h = 16 * jp + (lane & 7) + ((lane >> 4) << 3);
                const int c = 2 * ks + ((lane >> 3) & 1);
                uint32_t b[4];
                la_ldsm4(b, qb + h * RB + ((c ^ (h & SWZ)) * 16));
#pragma unroll
                for (int mt = 0; mt < PC_MT; mt++) {
                    sc_mma<EB>(acc[mt][2 * jp], af[mt][ks], b[0], b[1]);
                    sc_mma<EB>(acc[mt][2 * jp + 1], af[mt][ks], b[2], b[3]);
                }
            }
        }
        const float *wb = ws0 + buf * HI;
        float part[PC_MT][2];
        sc_head_sum<PC_MT, NT>(acc, wb, qd, part);
        /* lane qd stores key (mt = qd / 2, row g + 8 (qd & 1)) */
        const int mt = qd >> 1, hh = qd & 1;
        const float v = hh ? (mt ? part[1][1] : part[0][1]) : (mt ? part[1][0] : part[0][0]); /* no local memory */
        const float kv = mt ? ksv[1] : ksv[0];
        const int j = warp * 16 * PC_MT + mt * 16 + g + 8 * hh;
        const int64_t tok = blk * PC_KEYS + j;
        int64_t hi = a.row_end[t]; /* la_sp_row_range of [0, end) clamped to the score rows' L */
        if (hi > a.Lk) hi = a.Lk;
        float o = a.fp8 ? v * kv : v;
        if (!(tok < hi)) o = -INFINITY;
        a.out[t * a.out_ld + slot * PC_KEYS + j] = o;
    }
    la_cp_wait_all_nc();
}
/* PC_KERNELS_END */

} // namespace

la_status la_ph_cand_select(la_context *ctx, int eb, int64_t HI, int64_t B, int64_t T, int64_t nseq, bool wg_ok,
                            int *blockmajor, int *ring, int *wg) {
    static const char *const names[] = {"blockmajor", "gather", "direct", "wgmma"};
    const char *forced = la_context_variant(ctx, "paged_hisa_cand");
    const int v = forced ? la_cu_variant_index(forced, names, 4) : (kPagedHisaBlockMajor ? 0 : 1);
    *blockmajor = 0;
    *ring = v != 2;
    *wg = 0;
    if (v < 0) return la_cu_unknown_variant("paged_hisa_cand", forced, "blockmajor, gather, direct, wgmma");
    const bool ok = eb && (HI == 64 || HI == 32) && B == PC_KEYS;
    if (v == 0 && forced && !ok)
        return la_cu_variant_unsupported("paged_hisa_cand", "blockmajor",
                                         "the paged tensor-core path (variant mma), HI 32 or 64, block 128");
    if (v == 3 && !wg_ok)
        return la_cu_variant_unsupported("paged_hisa_cand", "wgmma",
                                         "an e4m3 cache with e4m3 q (sm_90), HI 64, dI 128, q rows contiguous");
    /* by default only where a block is shared by several queries (prefill
     * chunks): a decode row's blocks are its own, and the gather kernels
     * serve one query as well */
    *blockmajor = v == 0 && ok && (forced || T >= PC_MIN_ROWS * nseq);
    /* decode's default on Hopper with e4m3: the wgmma gather (kPagedHisaWgmma) */
    *wg = v == 3 || (!forced && !*blockmajor && wg_ok && kPagedHisaWgmma);
    la_cu_report(ctx, "paged_hisa_cand", *blockmajor ? "blockmajor" : *wg ? "wgmma" : names[v == 2 ? 2 : 1],
                 "T=%lld nseq=%lld", (long long)T, (long long)nseq);
    return LA_OK;
}

template <int HI, int EB>
static la_status pc_launch_score(const pc_args &a, int64_t nw_bound, cudaStream_t s) {
    const size_t smem = 2 * (size_t)HI * 128 * EB + 2 * HI * sizeof(float);
    LA_CU(cudaFuncSetAttribute(pc_score_kernel<HI, EB>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    pc_score_kernel<HI, EB><<<(unsigned)nw_bound, PC_THREADS, smem, s>>>(a);
    LA_CU_LAUNCH(EB == 1 ? "paged hisa candidates (fp8 e4m3 mma, block-major)"
                         : "paged hisa candidates (bf16 mma, block-major)");
    return LA_OK;
}

la_status la_ph_cand_scores(pc_args a, int EB, int HI, int64_t nseq, cudaStream_t s) {
    if (a.T <= 0) return LA_OK;
    const int64_t nb = nseq * a.nbmax, npairs = a.T * a.m;
    if (nb + 1 > INT32_MAX || npairs > INT32_MAX || a.T > INT32_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "paged hisa: %lld (query, block) pairs exceed the block-major lists",
                      (long long)npairs);
    /* work items: at most one partial chunk per non-empty bucket */
    const int64_t nw_bound = npairs / PC_QPC + (nb < npairs ? nb : npairs) + 1;
    la_cu_ws dcnt, dboff, dcur, dlist, dwork, dnw;
    LA_TRY(la_cu_ws_alloc(&dcnt, (size_t)nb * 4, s, "paged hisa bucket counts"));
    LA_TRY(la_cu_ws_alloc(&dboff, (size_t)(nb + 1) * 4, s, "paged hisa bucket offsets"));
    LA_TRY(la_cu_ws_alloc(&dcur, (size_t)nb * 4, s, "paged hisa bucket cursors"));
    LA_TRY(la_cu_ws_alloc(&dlist, (size_t)(npairs > 0 ? npairs : 1) * 4, s, "paged hisa buckets"));
    LA_TRY(la_cu_ws_alloc(&dwork, (size_t)nw_bound * sizeof(int4), s, "paged hisa work list"));
    LA_TRY(la_cu_ws_alloc(&dnw, 4, s, "paged hisa work count"));
    LA_CU(cudaMemsetAsync(dcnt.p, 0, (size_t)nb * 4, s));
    int64_t g = la_cu_cdiv(npairs, 256);
    if (g > 4096) g = 4096;
    if (g < 1) g = 1;
    pc_count_kernel<<<(unsigned)g, 256, 0, s>>>(a, (int32_t *)dcnt.p);
    LA_CU_LAUNCH("paged hisa bucket counts");
    pc_scan_kernel<<<1, PC_SCAN, 2 * PC_SCAN * sizeof(int32_t), s>>>((const int32_t *)dcnt.p, nb, (int32_t *)dboff.p,
                                                                     (int32_t *)dcur.p, (int4 *)dwork.p,
                                                                     (int32_t *)dnw.p);
    LA_CU_LAUNCH("paged hisa bucket scan");
    pc_scatter_kernel<<<(unsigned)g, 256, 0, s>>>(a, (int32_t *)dcur.p, (int32_t *)dlist.p);
    LA_CU_LAUNCH("paged hisa buckets");
    pc_fill_kernel<<<(unsigned)a.T, 256, 0, s>>>(a);
    LA_CU_LAUNCH("paged hisa candidate fill");
    a.list = (const int32_t *)dlist.p;
    a.boff = (const int32_t *)dboff.p;
    a.work = (const int4 *)dwork.p;
    a.nwork = (const int32_t *)dnw.p;
    if (nw_bound > INT32_MAX) return la_err(LA_ERR_UNSUPPORTED, "paged hisa: too many block-major work items");
    if (EB == 1) return HI == 64 ? pc_launch_score<64, 1>(a, nw_bound, s) : pc_launch_score<32, 1>(a, nw_bound, s);
    return HI == 64 ? pc_launch_score<64, 2>(a, nw_bound, s) : pc_launch_score<32, 2>(a, nw_bound, s);
}
