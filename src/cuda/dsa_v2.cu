/* DSA v2: the producer-warpgroup wgmma score kernel (sc_wgmma_kernel), HI =
 * 64, dI = 128, bf16 or e4m3; see dsa.cu's file comment and the design notes
 * in docs/CUDA.md. */
#include "sparse_prep.cuh"
#include "ptx.cuh"

#include <cuda_fp8.h>

/* ------------------------------------------------------------------------ */
/* DSA v2: Hopper warpgroup MMA (wgmma), HI = 64, dI = 128, bf16 or e4m3     */
/* ------------------------------------------------------------------------ */
/* CTA = 2 consumer warpgroups (256 threads) over 256 consecutive keys and a
 * group of queries taken two at a time ("chunks"), plus a producer
 * warpgroup that streams the chunks.
 *   A (keys) : [256 keys x dI], loaded once per CTA; warpgroup wg owns rows
 *              128*wg .. 128*wg+127 as two m64 tiles (mt = 0, 1).
 *   B (q)    : one chunk = 2 queries x 64 heads = 128 rows x dI (N = 128),
 *              4 stages of cp.async.
 * Both live in shared memory in the canonical K-major, 128-byte-swizzle
 * layout of wgmma: 128-byte row segments ("atoms" of 64 bf16 / 128 e4m3
 * along k), 8-row groups 1024 bytes apart (SBO), 16-byte chunk c of row r
 * stored at chunk c ^ (r & 7); for bf16 the two 128-byte halves of a row
 * are two separate [rows x 128 B] blocks. One wgmma consumes 32 bytes of k
 * (k16 bf16, k32 e4m3): its descriptor starts 32*kk bytes into the atom
 * (the hardware applies the XOR on absolute address bits, hence the
 * 1024-byte aligned tiles).
 * Accumulators (per thread, per m-tile, 64 fp32): warp wi of a warpgroup
 * holds rows 16*wi + g and + 8, columns 8j + 2qd (+1), j = 0..15, i.e.
 * exactly the mma.sync m16n8 layout repeated over n: column 64*qi + h is
 * head h of the chunk's query qi. The epilogue is the mma.sync kernel's
 * (same FMA order, same shuffles), so with equal tensor-core dot products
 * the two kernels give identical scores.
 * Pipeline: 4 stages of q chunks; per chunk both m-tiles' wgmma are issued
 * at once and the first m-tile's epilogue overlaps the second's MMAs. The
 * producer warpgroup (384 threads in all, setmaxnreg 56 / 224) does all
 * the chunk loading and the consumers only wait full -> wgmma -> epilogue
 * -> arrive empty; the stages are handed over with mbarriers (protocol
 * above v2_prod_run), so the two consumer warpgroups can drift apart by up
 * to the whole ring and one's exposed epilogue overlaps the other's MMAs
 * (faster than the consumers loading the chunks themselves, and than a
 * single loader warp, which starved the consumers: docs/CUDA.md).
 * Instructions per wgmma, cut to about half of the first version's:
 *  - descriptors: the 16 wgmma of a chunk take (tile descriptor + constant),
 *    valid because a shared-window address is < 2^18, so la_wg_desc(x + o) =
 *    la_wg_desc(x) + o/16 for 16-byte multiples o with x + o < 2^18 (no carry
 *    out of the 14-bit address field); the warpgroup index is broadcast from
 *    lane 0 so the A tile base is warp-uniform (uniform datapath);
 *  - chunk copies: each producer thread copies the same 16-byte column c of
 *    rows r0 + RP·j (RP = 128 / CPR) of every chunk, so its shared offsets
 *    (the swizzle only depends on r0 & 7) and global offsets are computed
 *    once; per chunk a 64-bit base and one add per copy, no divisions;
 *  - the head weights of the chunk are read from shared memory once into
 *    registers for both m-tiles, and the quad reduction takes 3 shuffles
 *    (la_wg_relu_headsum_wr);
 *  - the score store uses per-thread precomputed key predicates and a
 *    running row pointer; the valid range of a row is computed without the
 *    blk division (v2 runs only with range.blk == 1). */
#define V2_WG 2
#define V2_THREADS (V2_WG * 128)          /* the consumers */
#define V2_CTA_THREADS (V2_THREADS + 128) /* + the producer warpgroup */
#define V2_KEYS (V2_WG * 128)
#define V2_NQ 2
#define V2_HI 64
#define V2_DI 128
#define V2_STAGES 4
#define V2_BROWS (V2_NQ * V2_HI)

template <int EB> struct v2_cfg {
    static constexpr int RB = V2_DI * EB;      /* bytes per row */
    static constexpr int CPR = RB / 16;        /* 16-byte chunks per row */
    static constexpr int KSTEPS = RB / 32;     /* wgmma per m-tile and chunk */
    static constexpr int A_BYTES = V2_KEYS * RB;
    static constexpr int B_BYTES = V2_BROWS * RB;
    /* + 1024 for aligning the dynamic shared memory base */
    static constexpr int SMEM = 1024 + A_BYTES + V2_STAGES * B_BYTES +
                                V2_STAGES * V2_BROWS * 4 + V2_STAGES * V2_NQ * 2 * 4 +
                                2 * V2_STAGES * 8; /* mbarriers */
};

template <int EB>
__device__ __forceinline__ void v2_wgmma(float *d, uint64_t da, uint64_t db, int scale_d) {
    if constexpr (EB == 2) la_wg_m64n128k16_bf16(d, da, db, scale_d);
    else la_wg_m64n128k32_e4m3(d, da, db, scale_d);
}

template <int EB>
__device__ __forceinline__ void v2_issue(float *acc, uint32_t a_lo, uint32_t b_lo) {
    using C = v2_cfg<EB>;
    constexpr uint64_t HI = (uint64_t)((1024 >> 4) | (1u << 30)) << 32; /* la_wg_desc's high word */
    la_wg_fence_acc64(acc);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < C::KSTEPS; kk++) {
        const uint32_t kb = (kk * 32) / 128, inner = (kk * 32) % 128;
        const uint32_t oa = (kb * V2_KEYS * 128 + inner) >> 4, ob = (kb * V2_BROWS * 128 + inner) >> 4;
        v2_wgmma<EB>(acc, (HI | (uint64_t)a_lo) + oa, (HI | (uint64_t)b_lo) + ob, kk > 0 ? 1 : 0);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* SPEC §6 valid range of row t when range.blk == 1 (la_sp_row_range without
 * the block division, which v2 never needs) */
__device__ __forceinline__ void v2_row_range(const la_sp_range &r, int64_t t, int64_t *lo, int64_t *hi) {
    int64_t s = r.start ? (int64_t)r.start[t * r.start_nb] : 0;
    int64_t e = r.end ? (int64_t)r.end[t * r.end_nb] : r.L - r.T + t + 1;
    s = s < 0 ? 0 : (s > r.L ? r.L : s);
    e = e > r.L ? r.L : e;
    if (e < s) e = s;
    *lo = s;
    *hi = e;
}

/* per-thread constants of the chunk copies */
struct v2_ld {
    const uint8_t *q;   /* a.q + this thread's (row r0, column c) offset */
    int64_t tstride;    /* bytes between queries */
    int64_t hstride;    /* bytes between rows r0 + RP·j and r0 + RP·(j+1) */
    uint32_t dst;       /* shared address of (row r0, column c) in stage 0 */
};

/* A chunk's values from global memory other than the q rows: a head
 * weight w·qs and the valid range [lo, hi) of a query (v2_prod_meta) */
struct v2_meta {
    float w;
    int lo, hi;
};

/* ---- producer warpgroup ---------------------------------------------------
 * The third warpgroup (threads 256..383) does all the chunk loading (q rows,
 * zero fill of query tc + 1 past t1; the weights w·qs and the ranges read one
 * chunk ahead: layout above v2_prod); warps 0-7 only wait full -> wgmma ->
 * epilogue / stores -> arrive empty. */
/* registers: 384 threads at 1 CTA / SM compile to 168 per thread (an SM
 * sub-partition holds 3 warps: 3 x 32 x 168 <= 16384); the producer
 * warpgroup gives back 4 x 32 x (168 - 56) and the 8 consumer warps take
 * 8 x 32 x (224 - 168) of them (setmaxnreg; 2 x 224 + 56 = 512 per
 * sub-partition lane) */
#define V2_PROD_REGS 56
#define V2_CONS_REGS 224
/* the producer warpgroup's thread pt (0..127) copies 16-byte column
 * c = pt % CPR of rows r0 + RP·j (r0 = pt / CPR, RP = 128 / CPR: 8 bf16 /
 * 16 e4m3, a multiple of 8, so the swizzle offset is fixed per thread),
 * stores weight row pt of ws and (pt < 2)
 * the ranges; it reads them one chunk ahead */
struct v2_prod {
    v2_ld L;
    v2_meta m; /* the next chunk's weight and ranges */
};
__device__ __forceinline__ v2_meta v2_prod_meta(const la_sp_score_args &a, const sc_scales &sc,
                                                int64_t tc, int64_t t1, int pt) {
    v2_meta m = {0.f, 0, 0};
    const int64_t t = tc + (pt >> 6);
    if (t < t1) m.w = sc_wq(a, sc, t, pt & (V2_HI - 1));
    if (pt < V2_NQ && tc + pt < t1) {
        int64_t lo = 0, hi = 0;
        v2_row_range(a.range, tc + pt, &lo, &hi);
        m.lo = (int)lo;
        m.hi = (int)hi;
    }
    return m;
}
template <int EB>
__device__ __forceinline__ v2_prod v2_prod_make(const la_sp_score_args &a, const sc_scales &sc,
                                                uint32_t Bs_a, int64_t t0, int64_t t1, int pt) {
    using C = v2_cfg<EB>;
    constexpr int RP = 128 / C::CPR;
    const int r0 = pt / C::CPR, c = pt % C::CPR;
    v2_prod P;
    P.L.q = (const uint8_t *)a.q + ((int64_t)r0 * a.q_nb1) * EB + c * 16;
    P.L.tstride = a.q_nb0 * EB;
    P.L.hstride = (int64_t)RP * a.q_nb1 * EB;
    P.L.dst = Bs_a + la_wg_off(V2_BROWS, r0, c);
    P.m = v2_prod_meta(a, sc, t0, t1, pt);
    return P;
}
/* chunk c (queries tc, tc + 1 < t1 or not) into stage c % V2_STAGES: the
 * q-row copies as one cp.async group, the weights / ranges read ahead
 * stored, then the next chunk's read (its latency overlaps the wait for the
 * next empty stage) */
template <int EB>
__device__ __forceinline__ void v2_prod_chunk(const la_sp_score_args &a, const sc_scales &sc, v2_prod &P,
                                              int c, int64_t t0, int64_t t1, int nchunks, float *ws,
                                              int *rng, int pt) {
    using C = v2_cfg<EB>;
    constexpr int RP = 128 / C::CPR, JQ = V2_HI / RP;
    static_assert(128 % C::CPR == 0 && RP % 8 == 0 && V2_HI % RP == 0, "producer copy layout");
    const int st = c % V2_STAGES;
    const int64_t tc = t0 + (int64_t)c * V2_NQ;
    const bool ok1 = tc + 1 < t1;
    const uint8_t *p0 = P.L.q + tc * P.L.tstride;
    const uint8_t *p1 = ok1 ? p0 + P.L.tstride : p0;
    const uint32_t d = P.L.dst + (uint32_t)st * C::B_BYTES;
#pragma unroll
    for (int j = 0; j < JQ; j++) la_cp16z_sa(d + j * RP * 128, p0 + j * P.L.hstride, 16);
#pragma unroll
    for (int j = 0; j < JQ; j++) la_cp16z_sa(d + (JQ + j) * RP * 128, p1 + j * P.L.hstride, ok1 ? 16 : 0);
    la_cp_commit_nc();
    ws[st * V2_BROWS + pt] = P.m.w;
    if (pt < V2_NQ) {
        rng[(st * V2_NQ + pt) * 2] = P.m.lo;
        rng[(st * V2_NQ + pt) * 2 + 1] = P.m.hi;
    }
    if (c + 1 < nchunks) P.m = v2_prod_meta(a, sc, tc + V2_NQ, t1, pt);
}
/* Producer protocol (each of its 128 threads; full(st) is initialized with
 * count 128, empty(st) with 256 = the consumers):
 *   before the kernel's __syncthreads: chunk 0 (and 1) issued, no arrival
 *   (stages 0, 1 are free; the barrier inits become visible at the sync);
 *   then for c = 1 .. nchunks-1:
 *     [c >= 2] [c >= V2_STAGES: wait empty(c % S), parity (c / S - 1) & 1,
 *              the (c/S - 1)-th completion = consumers done with chunk
 *              c - S] issue chunk c (one cp.async group) + its ws / rng;
 *     cp.async.wait_group 1 (this thread's copies of chunks <= c-1 landed);
 *     fence.proxy.async.shared::cta (its generic-proxy writes -> visible to
 *     the consumers' wgmma, async proxy); mbarrier.arrive full((c-1) % S)
 *     (release: covers the copies and the thread's st.shared of ws / rng);
 *   at the end: wait_group 0, fence, arrive full((nchunks-1) % S).
 * So full((c) % S) completes its (c / S)-th phase when all 128 producer
 * threads' copies of chunk c landed, the consumers wait parity (c / S) & 1
 * (every loader: wait_group, fence, plain arrive), rather than
 * cp.async.mbarrier.arrive.noinc:
 * that arrival fires when the copies land but no fence.proxy.async can run
 * after it on the producer side. The arrival of chunk c-1 lags one issue
 * behind so the producer never stalls on a chunk it has just issued; with
 * the producer blocked on empty(chunk c - S), chunks c-S+1 .. c-2 are
 * signalled (2 ready stages ahead of the consumers) and c-1 is in flight.
 * Tail: nchunks = 1: the loop is empty, the end arrives full(0); nchunks <
 * S: no empty waits at all; every chunk's full arrival happens exactly
 * once, and the producer exits without waiting for the consumers (it
 * never waits on a phase the consumers cannot complete: empty(chunk c - S)
 * needs only full(<= c - S), already signalled). */
template <int EB>
__device__ __forceinline__ void v2_prod_run(const la_sp_score_args &a, const sc_scales &sc, v2_prod &P,
                                            int64_t t0, int64_t t1, int nchunks, float *ws, int *rng,
                                            uint32_t full_a, uint32_t empty_a, int pt) {
    for (int c = 1; c < nchunks; c++) {
        if (c >= 2) {
            if (c >= V2_STAGES)
                la_mbar_wait(empty_a + 8 * (c % V2_STAGES), (uint32_t)(c / V2_STAGES - 1) & 1);
            v2_prod_chunk<EB>(a, sc, P, c, t0, t1, nchunks, ws, rng, pt);
        }
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        la_mbar_arrive(full_a + 8 * ((c - 1) % V2_STAGES));
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    la_mbar_arrive(full_a + 8 * ((nchunks - 1) % V2_STAGES));
}

template <int EB>
__global__ void __launch_bounds__(V2_CTA_THREADS, 1)
    sc_wgmma_kernel(la_sp_score_args a, sc_scales sc, int qgroup) {
#if LA_CU_SM90_CODE
    using C = v2_cfg<EB>;
    extern __shared__ uint8_t v2_raw[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(v2_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    uint8_t *As = v2_raw + (base - raw);
    uint8_t *Bs = As + C::A_BYTES;
    float *ws = (float *)(Bs + V2_STAGES * C::B_BYTES);
    int *rng = (int *)(ws + V2_STAGES * V2_BROWS);
    const uint32_t As_a = base, Bs_a = base + C::A_BYTES;
    const uint32_t full_a = Bs_a + V2_STAGES * C::B_BYTES + V2_STAGES * V2_BROWS * 4 +
                            V2_STAGES * V2_NQ * 2 * 4;
    const uint32_t empty_a = full_a + V2_STAGES * 8;

    const int tid = threadIdx.x, wi = (tid >> 5) & 3, lane = tid & 31;
    /* warp-uniform for ptxas (CUTLASS's canonical_warp_group_idx) */
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    const int g = lane >> 2, qd = lane & 3;
    const int64_t key0 = (int64_t)blockIdx.x * V2_KEYS;
    const int64_t t0 = (int64_t)blockIdx.y * qgroup, t1 = min(a.T, t0 + (int64_t)qgroup);
    const int nchunks = (int)((t1 - t0 + V2_NQ - 1) / V2_NQ);

    if (tid == 0)
        for (int st = 0; st < V2_STAGES; st++) {
            la_mbar_init(full_a + 8 * st, V2_CTA_THREADS - V2_THREADS); /* the producers */
            la_mbar_init(empty_a + 8 * st, V2_THREADS);
        }
    /* the producer warpgroup issues chunks 0 and 1 while the consumers load
     * the A tile; the A tile is complete and fenced to the async proxy
     * (each consumer: wait_group 0, fence) at the __syncthreads */
    v2_prod P;
    if (tid >= V2_THREADS) {
        P = v2_prod_make<EB>(a, sc, Bs_a, t0, t1, tid - V2_THREADS);
        v2_prod_chunk<EB>(a, sc, P, 0, t0, t1, nchunks, ws, rng, tid - V2_THREADS);
        if (nchunks > 1) v2_prod_chunk<EB>(a, sc, P, 1, t0, t1, nchunks, ws, rng, tid - V2_THREADS);
    } else {
        for (int i = tid; i < V2_KEYS * C::CPR; i += V2_THREADS) {
            const int r = i / C::CPR, c = i % C::CPR;
            const int64_t s = key0 + r;
            const bool ok = s < a.Lk;
            const uint8_t *src = (const uint8_t *)a.k + (ok ? s : 0) * a.k_nb0 * EB + c * 16;
            la_cp16z_n(As + la_wg_off(V2_KEYS, r, c), src, ok ? 16 : 0);
        }
        la_cp_commit_nc();
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();
    if (tid >= V2_THREADS) { /* the producer warpgroup: 56 registers */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(V2_PROD_REGS));
        v2_prod_run<EB>(a, sc, P, t0, t1, nchunks, ws, rng, full_a, empty_a, tid - V2_THREADS);
        return;
    }
    /* the consumers: 224 registers (their 168 + the producers' 4 x 32 x
     * 112 freed registers spread over 8 warps) */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(V2_CONS_REGS));
    /* this thread's key in each m-tile, its k_scale, whether it is stored
     * (pin) and whether it is a key of k (kin); a stored key is < ncols <=
     * INT32_MAX (dsa_scores checks), so its range test runs in 32 bits */
    int64_t pk[2];
    int pk32[2];
    float ksv[2];
    bool pin[2], kin[2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
        pk[mt] = key0 + (wg * 2 + mt) * 64 + 16 * wi + g + 8 * (qd & 1);
        ksv[mt] = (sc.ks && pk[mt] < a.Lk) ? sc.ks[pk[mt] * sc.ks_nb] : 1.f;
        pin[mt] = pk[mt] < a.ncols;
        kin[mt] = pk[mt] < a.Lk;
        pk32[mt] = (int)pk[mt]; /* used only where pin */
    }
    const int qi = qd >> 1;
    /* la_wg_desc(x) = (x >> 4) | 1 << 16 in the low word (x < 2^18) */
    const uint32_t a_lo0 = (((As_a + (uint32_t)(wg * 2) * 64 * 128) & 0x3FFFFu) >> 4) | (1u << 16);
    const uint32_t a_lo1 = a_lo0 + ((64 * 128) >> 4);
    const uint32_t b_lo = ((Bs_a & 0x3FFFFu) >> 4) | (1u << 16);
    /* row tc + qi of the scores, advanced by V2_NQ rows per chunk */
    float *orow = a.out + (t0 + qi) * a.out_ld;
    const int64_t ostep = (int64_t)V2_NQ * a.out_ld;

    float acc0[64], acc1[64];
#pragma unroll
    for (int i = 0; i < 64; i++) acc0[i] = acc1[i] = 0.f;
    for (int i = 0; i < nchunks; i++, orow += ostep) {
        const int st = i % V2_STAGES;
        la_mbar_wait(full_a + 8 * st, (uint32_t)(i / V2_STAGES) & 1);
        const uint32_t bl = b_lo + (uint32_t)st * (C::B_BYTES >> 4);
        v2_issue<EB>(acc0, a_lo0, bl);
        v2_issue<EB>(acc1, a_lo1, bl);
        const int64_t t = t0 + (int64_t)i * V2_NQ + qi;
        float2 wr[16];
        la_wg_headsum_w(wr, ws + st * V2_BROWS, qd);
        const int2 rg = *(const int2 *)(rng + (st * V2_NQ + qi) * 2);
        const bool trow = t < t1;
        /* m-tile mt's head sums and this lane's store (k_scale, -inf outside
         * the row's range) */
        auto epilogue = [&](const float *acc, int mt) {
            const float v = la_wg_relu_headsum_wr(acc, wr, qd);
            if (trow && pin[mt]) {
                float o = sc.ks ? v * ksv[mt] : v;
                if (!(kin[mt] && pk32[mt] >= rg.x && pk32[mt] < rg.y)) o = -INFINITY;
                orow[pk[mt]] = o;
            }
        };
        la_wg_wait<1>(acc0);
        epilogue(acc0, 0);
        la_wg_wait<0>(acc1);
        epilogue(acc1, 1);
        la_mbar_arrive(empty_a + 8 * st);
    }
#else
    __trap(); /* built without sm_90a: selection never picks this kernel there */
#endif
}

/* Whether the v2 kernel takes these views: an sm_90 device, HI = 64, dI =
 * 128, q rows and k rows 16-byte aligned and contiguous along dI, dense DSA
 * mode. */
static bool v2_ok(const la_sp_score_args &a, int EB) {
    if (!a.hopper) return false;
    if (a.HI != V2_HI || a.dI != V2_DI || a.blocks || a.force_ends || a.range.blk != 1) return false;
    if (a.q_nb2 != 1 || a.k_nb1 != 1) return false;
    if ((a.q_nb0 * EB) % 16 || (a.q_nb1 * EB) % 16 || (a.k_nb0 * EB) % 16) return false;
    return ((uintptr_t)a.q & 15) == 0 && ((uintptr_t)a.k & 15) == 0;
}

template <int EB>
static la_status v2_launch(const la_sp_score_args &a, const sc_scales &sc, int qg_forced,
                           cudaStream_t s) {
    using C = v2_cfg<EB>;
    const int64_t ntiles = la_cu_cdiv(a.ncols, V2_KEYS);
    /* queries per CTA: long groups amortize the A-tile load (~2 chunks'
     * worth of time, not overlapped with 1 CTA per SM); pick the group size
     * with the fewest (waves x (chunks + 2)) */
    const int nsm = la_cu_device_attr(cudaDevAttrMultiProcessorCount, 132);
    static const int cand[] = {128, 96, 64, 48, 32, 24, 16, 8, 4, 2};
    int qg = 2;
    double best = 1e300;
    for (int qc : cand) {
        if (la_cu_cdiv(a.T, qc) > 65535) continue; /* grid y limit */
        const int64_t ctas = ntiles * la_cu_cdiv(a.T, qc);
        const double waves = (double)la_cu_cdiv(ctas, nsm);
        const double cost = waves * (double)(la_cu_cdiv(qc < a.T ? qc : a.T, V2_NQ) + 2);
        if (cost < best - 1e-9) {
            best = cost;
            qg = qc;
        }
    }
    /* variant qg<N>: N queries per CTA (tests: many chunks per CTA so every
     * pipeline stage is reused) */
    if (qg_forced >= 1 && la_cu_cdiv(a.T, qg_forced) <= 65535) qg = qg_forced;
    dim3 grid((unsigned)ntiles, (unsigned)la_cu_cdiv(a.T, qg));
    LA_TRY(la_cu_func_smem(a.ctx, (const void *)sc_wgmma_kernel<EB>, C::SMEM, C::SMEM, false));
    sc_wgmma_kernel<EB><<<grid, V2_CTA_THREADS, C::SMEM, s>>>(a, sc, qg);
    LA_CU_LAUNCH(EB == 2 ? "indexer scores (bf16 wgmma)" : "indexer scores (fp8 e4m3 wgmma)");
    return LA_OK;
}


bool dsa_v2_ok(const la_sp_score_args &a, int EB) { return v2_ok(a, EB); }
la_status dsa_v2_launch(const la_sp_score_args &a, const sc_scales &sc, int EB, int qg,
                        cudaStream_t s) {
    return EB == 1 ? v2_launch<1>(a, sc, qg, s) : v2_launch<2>(a, sc, qg, s);
}
