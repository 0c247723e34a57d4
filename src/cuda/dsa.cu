/* DSA indexer on the GPU (SPEC §6): scores I(t,s) = sum_h w[t,h] ReLU(q[t,h].k[s])
 * over the valid range, then the exact row top-k (topk.cu).
 *
 * Score kernels:
 *  - sc_exact_kernel: plain fp32 FMAs, any float dtype and strides (the
 *    reference-grade path; f32/f64 inputs use it, so fp32 index sets match
 *    the CPU's).
 *  - sc_mma_kernel: tensor cores through mma.sync (bf16 m16n8k16, or fp8
 *    e4m3 m16n8k32), fp32 accumulate. The GEMM is laid out with keys as M
 *    and heads as N: a warp keeps the A fragments of its 16*MT keys in
 *    registers for the whole CTA and streams each query's [HI, dI] block
 *    through shared memory (B operand). In that layout a thread's
 *    accumulators hold, for one key, heads 8j+2q(+1), so the ReLU-weighted
 *    head sum is 2*HI/8 FMAs in registers plus two shuffles over the quad:
 *    the T*HI*L intermediate never leaves registers. An m16n8k32 e4m3
 *    fragment holds, byte for byte, what an m16n8k16 bf16 fragment holds (4
 *    bytes per register at the same row/byte offsets, k doubled), so the
 *    same ldmatrix addressing serves both; on sm_90 ptxas runs the e4m3
 *    mma.sync through the f16 tensor-core path (no rate gain over bf16).
 *  - sc_wgmma_kernel ("DSA v2", HI = 64, dI = 128, bf16 or e4m3): Hopper
 *    warpgroup MMA, keys (A, m64 per instruction) and two queries' 64 heads
 *    (B, n128) both from 128-byte-swizzled shared memory; 2 consumer
 *    warpgroups x 2 m-tiles = 256 keys per CTA; each warpgroup runs its two
 *    m-tiles as a software pipeline (the head-sum epilogue of one overlaps
 *    the MMAs of the other); a third, producer warpgroup streams the query
 *    chunks into a 4-stage ring. Same epilogue arithmetic as sc_mma_kernel.
 *    LA_CUDA_DSA_PATH=old keeps the mma.sync kernels for A/B timing.
 * fp8 e4m3 inputs carry fp32 scales per key row (ks) and per (query, head)
 * (qs); both are positive, so
 *   I(t,s) = sum_h w·ReLU(qs·ks·(q8·k8)) = ks[s] · sum_h (w·qs)[t,h]·ReLU(q8·k8):
 * w·qs is formed when the query block is staged, ks multiplies the head sum.
 * The same kernel, in gather mode, scores HISA's candidate tokens; per key
 * the arithmetic is identical, so HISA == DSA bit for bit when every block
 * is kept (bf16 mma.sync path). */
#include "cuda_ops.h"
#include "select.cuh"
#include "sparse_common.cuh"
#include "wgmma.cuh"
#include "ops/sparse_validate.h"

#include <cuda_fp8.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* exact fp32 kernel                                                          */
/* ------------------------------------------------------------------------ */
#define SC_EX_THREADS 128

/* Key row of output column p for query t; -1 if the column is not valid. */
__device__ __forceinline__ int64_t sc_key_of(const la_sp_score_args &a, int64_t t, int64_t p,
                                             int64_t lo, int64_t hi) {
    if (a.blocks) {
        if (p >= a.m * a.B) return -1;
        /* candidate slots are < 2^31 (checked by the launcher): 32-bit division */
        const uint32_t pu = (uint32_t)p, Bu = (uint32_t)a.B, bi = pu / Bu;
        int32_t b = a.blocks[t * a.blocks_ld + bi];
        if (b < 0) return -1;
        int64_t s = (int64_t)b * a.B + (pu - bi * Bu);
        return (s >= lo && s < hi && s < a.Lk) ? s : -1;
    }
    return (p >= lo && p < hi && p < a.Lk) ? p : -1;
}

__global__ void __launch_bounds__(SC_EX_THREADS) sc_exact_kernel(la_sp_score_args a) {
    __shared__ float qs[SC_EX_THREADS];
    const int64_t t = blockIdx.y;
    const int64_t p = (int64_t)blockIdx.x * SC_EX_THREADS + threadIdx.x;
    int64_t lo, hi;
    la_sp_row_range(a.range, t, &lo, &hi);
    const int64_t s = p < a.ncols ? sc_key_of(a, t, p, lo, hi) : -1;
    float score = 0.f;
    for (int64_t h = 0; h < a.HI; h++) {
        float dot = 0.f;
        for (int64_t d0 = 0; d0 < a.dI; d0 += SC_EX_THREADS) {
            __syncthreads();
            if (d0 + threadIdx.x < a.dI)
                qs[threadIdx.x] =
                    la_cu_ld(a.q, a.q_dt, t * a.q_nb0 + h * a.q_nb1 + (d0 + threadIdx.x) * a.q_nb2);
            __syncthreads();
            if (s >= 0) {
                const int64_t dn = min((int64_t)SC_EX_THREADS, a.dI - d0);
                for (int64_t d = 0; d < dn; d++)
                    dot = fmaf(qs[d], la_cu_ld(a.k, a.k_dt, s * a.k_nb0 + (d0 + d) * a.k_nb1), dot);
            }
        }
        const float wv = la_cu_ld(a.w, a.w_dt, t * a.w_nb0 + h * a.w_nb1);
        score = fmaf(wv, fmaxf(dot, 0.f), score);
    }
    if (p >= a.ncols) return;
    if (s < 0) score = -INFINITY;
    else if (a.force_ends && (s == lo || s == hi - 1)) score = INFINITY;
    a.out[t * a.out_ld + p] = score;
}

/* ------------------------------------------------------------------------ */
/* mma.sync tensor-core kernel (bf16, or fp8 e4m3)                            */
/* ------------------------------------------------------------------------ */
#define SC_WARPS 8
#define SC_THREADS (SC_WARPS * 32)
#define SC_QGROUP 64 /* queries per CTA in dense mode (K fragments reused) */

/* fp8 scales of one call (NULL = 1): k_scale [L] (element stride ks_nb),
 * q_scale [T,HI] (strides qs_nb0, qs_nb1). */
struct sc_scales {
    const float *ks;
    int64_t ks_nb;
    const float *qs;
    int64_t qs_nb0, qs_nb1;
};

/* The head weight the score kernels use: w[t,h], times q_scale[t,h] for fp8. */
__device__ __forceinline__ float sc_wq(const la_sp_score_args &a, const sc_scales &sc, int64_t t,
                                       int64_t h) {
    float wv = la_cu_ld(a.w, a.w_dt, t * a.w_nb0 + h * a.w_nb1);
    if (sc.qs) wv *= sc.qs[t * sc.qs_nb0 + h * sc.qs_nb1];
    return wv;
}

__device__ __forceinline__ void sc_cp16(void *sdst, const void *gsrc) {
    uint32_t sa = (uint32_t)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gsrc));
}
__device__ __forceinline__ void sc_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void sc_cp_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

/* c += a·b over 32 bytes of k: bf16 m16n8k16 (EB = 2) or e4m3 m16n8k32 (EB = 1) */
template <int EB>
__device__ __forceinline__ void sc_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    if constexpr (EB == 2) {
        la_sp_mma_bf16(c, a, b0, b1);
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

/* One query's [HI, dI] block (EB bytes per element) into shared memory;
 * 16-byte chunk c of row h lands at chunk c ^ (h & SWZ) so ldmatrix reads 8
 * rows conflict-free (SWZ = 7 when a row has >= 8 chunks). */
template <int HI, int DI, int EB>
__device__ __forceinline__ void sc_load_q(const la_sp_score_args &a, const sc_scales &sc, int64_t t,
                                          uint8_t *qs, float *ws) {
    constexpr int RB = DI * EB, CPR = RB / 16, SWZ = (CPR < 8 ? CPR : 8) - 1;
    const uint8_t *q = (const uint8_t *)a.q + t * a.q_nb0 * EB;
    for (int i = threadIdx.x; i < HI * CPR; i += SC_THREADS) {
        int h = i / CPR, c = i % CPR;
        sc_cp16(qs + h * RB + ((c ^ (h & SWZ)) * 16), q + h * a.q_nb1 * EB + c * 16);
    }
    for (int h = threadIdx.x; h < HI; h += SC_THREADS) ws[h] = sc_wq(a, sc, t, h);
    sc_cp_commit();
}

template <int HI, int DI, int MT, bool GATHER, int EB>
__global__ void __launch_bounds__(SC_THREADS, 1)
    sc_mma_kernel(la_sp_score_args a, sc_scales sc, int qgroup) {
    constexpr int NT = HI / 8, RB = DI * EB, KS = RB / 32, CPR = RB / 16;
    constexpr int SWZ = (CPR < 8 ? CPR : 8) - 1;
    constexpr int KEYS = SC_WARPS * 16 * MT;
    __shared__ __align__(128) uint8_t qs[2][HI * RB];
    __shared__ float ws[2][HI];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, qd = lane & 3;
    const int64_t p0 = (int64_t)blockIdx.x * KEYS + warp * 16 * MT; /* first column of the warp */
    int64_t t0, t1;
    if (GATHER) {
        t0 = blockIdx.y;
        t1 = t0 + 1;
    } else {
        t0 = (int64_t)blockIdx.y * qgroup;
        t1 = min(a.T, t0 + qgroup);
    }

    sc_load_q<HI, DI, EB>(a, sc, t0, qs[0], ws[0]);

    /* A fragments: this warp's keys, all of dI, kept in registers (bytes
     * [4qd, 4qd+4) and [16+4qd, 20+4qd) of each 32-byte k-step of rows g and
     * g+8). In gather mode the keys are the query's candidates (range
     * checked in the epilogue; here only "is there a row to read"). */
    uint32_t af[MT][KS][4];
    {
        int64_t lo = 0, hi = a.Lk;
        if (GATHER) la_sp_row_range(a.range, t0, &lo, &hi);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int64_t p = p0 + mt * 16 + g + 8 * half;
                int64_t s;
                if (GATHER) s = p < a.ncols ? sc_key_of(a, t0, p, lo, hi) : -1;
                else s = p < a.Lk ? p : -1;
                const uint8_t *kr = (const uint8_t *)a.k + (s >= 0 ? s : 0) * a.k_nb0 * EB;
#pragma unroll
                for (int ks = 0; ks < KS; ks++) {
                    uint32_t lo2 = 0, hi2 = 0;
                    if (s >= 0) {
                        lo2 = *(const uint32_t *)(kr + ks * 32 + 4 * qd);
                        hi2 = *(const uint32_t *)(kr + ks * 32 + 16 + 4 * qd);
                    }
                    af[mt][ks][half] = lo2;
                    af[mt][ks][2 + half] = hi2;
                }
            }
        }
    }
    /* fp8: k_scale of the key this lane stores (see the epilogue) */
    float ksv[MT];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int64_t p = p0 + mt * 16 + g + 8 * (qd & 1);
        ksv[mt] = (sc.ks && !GATHER && p < a.Lk) ? sc.ks[p * sc.ks_nb] : 1.f;
    }

    for (int64_t t = t0; t < t1; t++) {
        const int buf = (int)((t - t0) & 1);
        sc_cp_wait_all();
        __syncthreads(); /* q(t) visible; everyone is done with the other buffer */
        if (t + 1 < t1) sc_load_q<HI, DI, EB>(a, sc, t + 1, qs[buf ^ 1], ws[buf ^ 1]);

        float acc[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[mt][j][e] = 0.f;

        const uint8_t *qb = qs[buf];
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
#pragma unroll
            for (int jp = 0; jp < NT / 2; jp++) {
                const int h = 16 * jp + (lane & 7) + ((lane >> 4) << 3);
                const int c = 2 * ks + ((lane >> 3) & 1);
                uint32_t b[4];
                la_sp_ldsm_x4(b, qb + h * RB + ((c ^ (h & SWZ)) * 16));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    sc_mma<EB>(acc[mt][2 * jp], af[mt][ks], b[0], b[1]);
                    sc_mma<EB>(acc[mt][2 * jp + 1], af[mt][ks], b[2], b[3]);
                }
            }
        }
        /* ReLU-weighted head sum: this thread has heads 8j+2qd, 8j+2qd+1 of
         * keys g and g+8 of each m-tile */
        const float *wb = ws[buf];
        float part[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            float s0 = 0.f, s1 = 0.f;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const float2 wv = *(const float2 *)(wb + 8 * j + 2 * qd);
                s0 = fmaf(wv.x, fmaxf(acc[mt][j][0], 0.f), s0);
                s0 = fmaf(wv.y, fmaxf(acc[mt][j][1], 0.f), s0);
                s1 = fmaf(wv.x, fmaxf(acc[mt][j][2], 0.f), s1);
                s1 = fmaf(wv.y, fmaxf(acc[mt][j][3], 0.f), s1);
            }
            s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
            s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
            s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
            s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
            part[mt][0] = s0;
            part[mt][1] = s1;
        }
        /* lane qd of the quad stores key (mt = qd/2, row g + 8*(qd&1)) */
        if (qd / 2 < MT) {
            const int mt = qd / 2, hh = qd & 1;
            const float v = MT == 2 ? (mt == 0 ? part[0][hh] : part[MT - 1][hh]) : part[0][hh];
            const float kv = MT == 2 ? (mt == 0 ? ksv[0] : ksv[MT - 1]) : ksv[0];
            const int64_t p = p0 + mt * 16 + g + 8 * hh;
            if (p < a.ncols) {
                int64_t lo, hi;
                la_sp_row_range(a.range, t, &lo, &hi);
                const int64_t s = sc_key_of(a, t, p, lo, hi);
                float o = sc.ks ? v * kv : v;
                if (s < 0) o = -INFINITY;
                else if (a.force_ends && (s == lo || s == hi - 1)) o = INFINITY;
                a.out[t * a.out_ld + p] = o;
            }
        }
    }
}

/* HISA stage 2: one CTA per (query, slice of the m*B candidates). The
 * candidate key rows are gathered into shared memory with cp.async, three
 * 128-row stages deep (zero-filled when invalid), and read as A fragments
 * with ldmatrix; the query block stays in shared memory. Per key the
 * arithmetic is the dense kernel's (same k-step order, same epilogue). */
#define SG_STAGES 3
#define SG_ROWS (SC_WARPS * 16)
template <int DI>
__device__ __forceinline__ void sg_load_chunk(const la_sp_score_args &a, int64_t t, int64_t c,
                                              int64_t lo, int64_t hi, __nv_bfloat16 *ks) {
    constexpr int CPR = DI / 8;                   /* 16-byte chunks per row */
    constexpr int TPR = SC_THREADS / SG_ROWS;     /* threads per row (2) */
    const int r = threadIdx.x / TPR, part = threadIdx.x % TPR;
    const int64_t p = c * SG_ROWS + r;
    const int64_t s = p < a.ncols ? sc_key_of(a, t, p, lo, hi) : -1;
    const bool ok = s >= 0;
    const __nv_bfloat16 *src = (const __nv_bfloat16 *)a.k + (ok ? s : 0) * a.k_nb0;
#pragma unroll
    for (int ch = part; ch < CPR; ch += TPR)
        la_sp_cp16z(ks + r * DI + ((ch ^ (r & 7)) * 8), src + ch * 8, ok ? 16 : 0);
}

template <int HI, int DI>
__global__ void __launch_bounds__(SC_THREADS, 2) sc_gather_kernel(la_sp_score_args a, int64_t chunks_per_cta) {
    constexpr int NT = HI / 8, KS = DI / 16;
    extern __shared__ __align__(128) unsigned char sg_smem[];
    __nv_bfloat16 *qs = (__nv_bfloat16 *)sg_smem;
    __nv_bfloat16 *kst = qs + HI * DI;
    __shared__ float ws[HI];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, qd = lane & 3;
    const int64_t t = blockIdx.y;
    const int64_t nchunks = (a.ncols + SG_ROWS - 1) / SG_ROWS;
    const int64_t c0 = (int64_t)blockIdx.x * chunks_per_cta;
    const int64_t c1 = min(nchunks, c0 + chunks_per_cta);
    if (c0 >= c1) return;
    int64_t lo, hi;
    la_sp_row_range(a.range, t, &lo, &hi);
    sc_load_q<HI, DI, 2>(a, sc_scales{}, t, (uint8_t *)qs, ws); /* commits group 0 */
    for (int st = 0; st < SG_STAGES - 1; st++) {
        if (c0 + st < c1) sg_load_chunk<DI>(a, t, c0 + st, lo, hi, kst + st * SG_ROWS * DI);
        sc_cp_commit();
    }
    for (int64_t c = c0; c < c1; c++) {
        const int stage = (int)((c - c0) % SG_STAGES);
        asm volatile("cp.async.wait_group %0;\n" ::"n"(SG_STAGES - 2));
        __syncthreads();
        {
            const int64_t cn = c + SG_STAGES - 1;
            if (cn < c1)
                sg_load_chunk<DI>(a, t, cn, lo, hi, kst + ((cn - c0) % SG_STAGES) * SG_ROWS * DI);
            sc_cp_commit();
        }
        const __nv_bfloat16 *kb = kst + stage * SG_ROWS * DI;
        float acc[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[j][e] = 0.f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            uint32_t af[4];
            {
                const int r = 16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8;
                const int ch = 2 * ks + (lane >> 4);
                la_sp_ldsm_x4(af, kb + r * DI + ((ch ^ (r & 7)) * 8));
            }
#pragma unroll
            for (int jp = 0; jp < NT / 2; jp++) {
                const int h = 16 * jp + (lane & 7) + ((lane >> 4) << 3);
                const int ch = 2 * ks + ((lane >> 3) & 1);
                uint32_t b[4];
                la_sp_ldsm_x4(b, qs + h * DI + ((ch ^ (h & 7)) * 8));
                la_sp_mma_bf16(acc[2 * jp], af, b[0], b[1]);
                la_sp_mma_bf16(acc[2 * jp + 1], af, b[2], b[3]);
            }
        }
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const float2 wv = *(const float2 *)(ws + 8 * j + 2 * qd);
            s0 = fmaf(wv.x, fmaxf(acc[j][0], 0.f), s0);
            s0 = fmaf(wv.y, fmaxf(acc[j][1], 0.f), s0);
            s1 = fmaf(wv.x, fmaxf(acc[j][2], 0.f), s1);
            s1 = fmaf(wv.y, fmaxf(acc[j][3], 0.f), s1);
        }
        s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
        s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
        if (qd < 2) {
            const int64_t p = c * SG_ROWS + 16 * warp + g + 8 * qd;
            if (p < a.ncols) {
                const int64_t s = sc_key_of(a, t, p, lo, hi);
                a.out[t * a.out_ld + p] = s < 0 ? -INFINITY : (qd == 0 ? s0 : s1);
            }
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
}

bool la_sp_scores_fast_shape(int64_t HI, int64_t dI) {
    return (HI == 64 || HI == 32 || HI == 16) && (dI == 128 || dI == 64);
}

/* Dense mode of the mma.sync kernel (EB = 2 bf16, 1 fp8 e4m3). */
template <int HI, int DI, int EB>
static la_status sc_launch_mma_dense(const la_sp_score_args &a, const sc_scales &sc,
                                     cudaStream_t s) {
    constexpr int KEYS = SC_WARPS * 16 * 2;
    /* up to SC_QGROUP queries per CTA (K fragments reused), fewer when
     * there are few key tiles (HISA's block scores) so the grid fills
     * the GPU */
    const int64_t ntiles = la_cu_cdiv(a.ncols, KEYS);
    int64_t qg = ntiles * a.T / (132 * 4);
    qg = qg < 1 ? 1 : (qg > SC_QGROUP ? SC_QGROUP : qg);
    dim3 grid((unsigned)ntiles, (unsigned)la_cu_cdiv(a.T, qg));
    sc_mma_kernel<HI, DI, 2, false, EB><<<grid, SC_THREADS, 0, s>>>(a, sc, (int)qg);
    LA_CU_LAUNCH(EB == 2 ? "indexer scores (bf16 mma)" : "indexer scores (fp8 e4m3 mma)");
    return LA_OK;
}

template <int HI, int DI>
static la_status sc_launch_mma(const la_sp_score_args &a, cudaStream_t s) {
    if (a.blocks) {
        /* ~4 CTAs' worth of work per SM slot: slices of the candidate row */
        const int64_t nchunks = la_cu_cdiv(a.ncols, SG_ROWS);
        int64_t split = la_cu_cdiv(132 * 2 * 4, a.T);
        if (split > nchunks) split = nchunks;
        if (split < 1) split = 1;
        const int64_t per = la_cu_cdiv(nchunks, split);
        const size_t smem = (size_t)(HI * DI + SG_STAGES * SG_ROWS * DI) * 2;
        LA_CU(cudaFuncSetAttribute(sc_gather_kernel<HI, DI>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        dim3 grid((unsigned)la_cu_cdiv(nchunks, per), (unsigned)a.T);
        sc_gather_kernel<HI, DI><<<grid, SC_THREADS, smem, s>>>(a, per);
    } else {
        return sc_launch_mma_dense<HI, DI, 2>(a, sc_scales{}, s);
    }
    LA_CU_LAUNCH("indexer scores (bf16 mma)");
    return LA_OK;
}

bool la_sp_scores_mma_ok(const la_sp_score_args &a) {
    return a.q_dt == LA_BF16 && a.k_dt == LA_BF16 && la_sp_scores_fast_shape(a.HI, a.dI) &&
           a.q_nb2 == 1 && a.q_nb1 % 8 == 0 && a.q_nb0 % 8 == 0 && ((uintptr_t)a.q & 15) == 0 &&
           a.k_nb1 == 1 && a.k_nb0 % 2 == 0 && ((uintptr_t)a.k & 3) == 0 &&
           (a.blocks ? a.T <= 65535 : true);
}

la_status la_sp_scores(const la_sp_score_args &a, bool exact, cudaStream_t s) {
    if (a.T == 0 || a.ncols == 0) return LA_OK;
    if (a.T > 65535 || a.ncols > (int64_t)INT32_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "indexer: T=%lld, columns=%lld exceed the CUDA grid",
                      (long long)a.T, (long long)a.ncols);
    if (!exact && la_sp_scores_mma_ok(a)) {
        if (a.HI == 64 && a.dI == 128) return sc_launch_mma<64, 128>(a, s);
        if (a.HI == 64 && a.dI == 64) return sc_launch_mma<64, 64>(a, s);
        if (a.HI == 32 && a.dI == 128) return sc_launch_mma<32, 128>(a, s);
        if (a.HI == 32 && a.dI == 64) return sc_launch_mma<32, 64>(a, s);
        if (a.HI == 16 && a.dI == 128) return sc_launch_mma<16, 128>(a, s);
        if (a.HI == 16 && a.dI == 64) return sc_launch_mma<16, 64>(a, s);
    }
    if (a.T > 65535)
        return la_err(LA_ERR_UNSUPPORTED, "indexer: T=%lld exceeds the exact kernel's grid",
                      (long long)a.T);
    dim3 grid((unsigned)la_cu_cdiv(a.ncols, SC_EX_THREADS), (unsigned)a.T);
    sc_exact_kernel<<<grid, SC_EX_THREADS, 0, s>>>(a);
    LA_CU_LAUNCH("indexer scores (exact fp32)");
    return LA_OK;
}

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
 * above v2_prod_run; dev/NOTES_dsa_epilogue.md), so the two consumer
 * warpgroups can drift apart by up to the whole ring and one's exposed
 * epilogue overlaps the other's MMAs. H200, L = 64K, incl. top-k: bf16
 * 1.95 -> 1.70 ms, fp8 1.72 -> 1.39 ms against the consumers loading the
 * chunks themselves (removed; in the history), same scores bit for bit (a
 * single loader warp was 1.2-1.5x slower: it starved the consumers).
 * Instructions per wgmma (dev/NOTES_dsa_epilogue.md: 67 -> 35 for bf16,
 * ncu on the H200; the kernel went from 3.15 to 1.82 ms at L = 64K):
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

/* mbarriers (CTA scope): arrive = release, try_wait = acquire */
__device__ __forceinline__ void v2_mbar_init(uint32_t addr, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(count) : "memory");
}
__device__ __forceinline__ void v2_mbar_arrive(uint32_t addr) {
    asm volatile("{\n.reg .b64 mbst;\nmbarrier.arrive.shared::cta.b64 mbst, [%0];\n}\n" ::"r"(addr)
                 : "memory");
}
__device__ __forceinline__ void v2_mbar_wait(uint32_t addr, uint32_t parity) {
    uint32_t ok;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(ok)
            : "r"(addr), "r"(parity)
            : "memory");
    } while (!ok);
    __syncwarp(); /* lanes may leave the poll at different times; wgmma needs a converged warp */
}

__device__ __forceinline__ void v2_cp16z(uint32_t sa, const void *gsrc, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gsrc),
                 "r"(src_bytes));
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
    for (int j = 0; j < JQ; j++) v2_cp16z(d + j * RP * 128, p0 + j * P.L.hstride, 16);
#pragma unroll
    for (int j = 0; j < JQ; j++) v2_cp16z(d + (JQ + j) * RP * 128, p1 + j * P.L.hstride, ok1 ? 16 : 0);
    sc_cp_commit();
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
                v2_mbar_wait(empty_a + 8 * (c % V2_STAGES), (uint32_t)(c / V2_STAGES - 1) & 1);
            v2_prod_chunk<EB>(a, sc, P, c, t0, t1, nchunks, ws, rng, pt);
        }
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        v2_mbar_arrive(full_a + 8 * ((c - 1) % V2_STAGES));
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    v2_mbar_arrive(full_a + 8 * ((nchunks - 1) % V2_STAGES));
}

template <int EB>
__global__ void __launch_bounds__(V2_CTA_THREADS, 1)
    sc_wgmma_kernel(la_sp_score_args a, sc_scales sc, int qgroup) {
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
            v2_mbar_init(full_a + 8 * st, V2_CTA_THREADS - V2_THREADS); /* the producers */
            v2_mbar_init(empty_a + 8 * st, V2_THREADS);
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
            la_sp_cp16z(As + la_wg_off(V2_KEYS, r, c), src, ok ? 16 : 0);
        }
        sc_cp_commit();
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
        v2_mbar_wait(full_a + 8 * st, (uint32_t)(i / V2_STAGES) & 1);
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
        v2_mbar_arrive(empty_a + 8 * st);
    }
}

/* SM count of the current device, asked every call (cudaDeviceGetAttribute
 * is a cheap host-side query): a cached static was a data race between first
 * calls and answered the first device's count for every device. */
static int la_sp_num_sms() {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && n > 0)
        return n;
    cudaGetLastError();
    return 132;
}

/* Whether the v2 kernel takes these views: HI = 64, dI = 128, q rows and k
 * rows 16-byte aligned and contiguous along dI, dense DSA mode. */
static bool v2_ok(const la_sp_score_args &a, int EB) {
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
    const int nsm = la_sp_num_sms();
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
    LA_CU(cudaFuncSetAttribute(sc_wgmma_kernel<EB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               C::SMEM));
    sc_wgmma_kernel<EB><<<grid, V2_CTA_THREADS, C::SMEM, s>>>(a, sc, qg);
    LA_CU_LAUNCH(EB == 2 ? "indexer scores (bf16 wgmma)" : "indexer scores (fp8 e4m3 wgmma)");
    return LA_OK;
}

/* ---- strided -> contiguous bf16 ------------------------------------------ */
__global__ void sp_pack_kernel(const void *src, int dt, int64_t n1, int64_t n2, int64_t nb0,
                               int64_t nb1, int64_t nb2, __nv_bfloat16 *dst, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t i2 = i % n2, r = i / n2, i1 = r % n1, i0 = r / n1;
        dst[i] = __float2bfloat16_rn(la_cu_ld(src, dt, i0 * nb0 + i1 * nb1 + i2 * nb2));
    }
}
la_status la_sp_pack_bf16(const void *src, int dt, int64_t n0, int64_t n1, int64_t n2,
                          int64_t nb0, int64_t nb1, int64_t nb2, __nv_bfloat16 *dst,
                          cudaStream_t s) {
    const int64_t total = n0 * n1 * n2;
    if (total == 0) return LA_OK;
    int64_t blocks = la_cu_cdiv(total, 256);
    if (blocks > 65535 * 16) blocks = 65535 * 16;
    sp_pack_kernel<<<(unsigned)blocks, 256, 0, s>>>(src, dt, n1, n2, nb0, nb1, nb2, dst, total);
    LA_CU_LAUNCH("pack bf16");
    return LA_OK;
}

/* ---- la_dsa_indexer on CUDA ---------------------------------------------- */
/* Fill the score args from the public views (q, k, w, start, end). */
void la_sp_fill_score_args(la_sp_score_args *a, const la_tensor *q, const la_tensor *k,
                           const la_tensor *w, const la_tensor *start, const la_tensor *end) {
    memset(a, 0, sizeof *a);
    a->q = q->data;
    a->q_dt = q->dtype;
    a->q_nb0 = q->nb[0];
    a->q_nb1 = q->nb[1];
    a->q_nb2 = q->nb[2];
    a->k = k->data;
    a->k_dt = k->dtype;
    a->k_nb0 = k->nb[0];
    a->k_nb1 = k->nb[1];
    a->w = w->data;
    a->w_dt = w->dtype;
    a->w_nb0 = w->nb[0];
    a->w_nb1 = w->nb[1];
    a->T = q->ne[0];
    a->HI = q->ne[1];
    a->dI = q->ne[2];
    a->Lk = k->ne[0];
    a->range.start = start ? (const int32_t *)start->data : nullptr;
    a->range.start_nb = start ? start->nb[0] : 0;
    a->range.end = end ? (const int32_t *)end->data : nullptr;
    a->range.end_nb = end ? end->nb[0] : 0;
    a->range.T = q->ne[0];
    a->range.L = k->ne[0];
    a->range.blk = 1;
}

/* bf16 inputs whose rows the tensor-core kernel can't read directly are
 * packed into contiguous workspace copies. */
la_status la_sp_prepare_bf16(la_sp_score_args *a, la_cu_ws *qw, la_cu_ws *kw, cudaStream_t s) {
    if (a->q_dt != LA_BF16 || a->k_dt != LA_BF16 || !la_sp_scores_fast_shape(a->HI, a->dI))
        return LA_OK;
    const bool q_ok = a->q_nb2 == 1 && a->q_nb1 % 8 == 0 && a->q_nb0 % 8 == 0 &&
                      ((uintptr_t)a->q & 15) == 0;
    const bool k_ok = a->k_nb1 == 1 && a->k_nb0 % 2 == 0 && ((uintptr_t)a->k & 3) == 0;
    if (!q_ok) {
        size_t bytes;
        LA_TRY(la_mul_size((size_t)(a->T * a->HI), (size_t)a->dI * 2, &bytes, "q copy"));
        LA_TRY(la_cu_ws_alloc(qw, bytes, s, "bf16 copy of q"));
        LA_TRY(la_sp_pack_bf16(a->q, a->q_dt, a->T, a->HI, a->dI, a->q_nb0, a->q_nb1, a->q_nb2,
                               (__nv_bfloat16 *)qw->p, s));
        a->q = qw->p;
        a->q_nb0 = a->HI * a->dI;
        a->q_nb1 = a->dI;
        a->q_nb2 = 1;
    }
    if (!k_ok) {
        size_t bytes;
        LA_TRY(la_mul_size((size_t)a->Lk, (size_t)a->dI * 2, &bytes, "k copy"));
        LA_TRY(la_cu_ws_alloc(kw, bytes, s, "bf16 copy of k"));
        LA_TRY(la_sp_pack_bf16(a->k, a->k_dt, 1, a->Lk, a->dI, 0, a->k_nb0, a->k_nb1,
                               (__nv_bfloat16 *)kw->p, s));
        a->k = kw->p;
        a->k_nb0 = a->dI;
        a->k_nb1 = 1;
    }
    return LA_OK;
}

/* ---- validation of CUDA views: the checks of src/ops/sparse_validate.h on
 * LA_DEVICE_CUDA (the range values live on the device, so they are clamped
 * by the kernels instead of checked). fp8 e4m3 q/k (with k_scale/q_scale)
 * are validated by dsa_validate_fp8 (la_sp_fp8_to_f32 for HISA and the
 * block-sparse indexer); this one refuses them. ---- */
la_status la_sp_validate_idx_cuda(const char *op, const la_index_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *w, const la_tensor *start,
                                  const la_tensor *end, const la_tensor *idx) {
    LA_TRY(la_idx_check_args(op, p, q, k, w, idx));
    if (p->k_scale || p->q_scale || q->dtype == LA_FP8_E4M3 || k->dtype == LA_FP8_E4M3)
        return la_err(LA_ERR_UNSUPPORTED,
                      "%s: fp8 e4m3 q/k (k_scale/q_scale) are implemented on CUDA for the flat DSA "
                      "indexer only; %s takes f32/f64/bf16/f16 q and k",
                      op, op);
    const unsigned fl = LA_DT(LA_F32) | LA_DT(LA_F64) | LA_DT(LA_BF16) | LA_DT(LA_F16);
    return la_idx_check_views(p, q, k, w, start, end, idx, LA_DEVICE_CUDA, fl);
}

/* fp8 DSA views: q and k both e4m3, w a float dtype, optional f32 scales
 * k_scale [L] and q_scale [T,HI] on CUDA (NULL = 1). Scale values are
 * checked on the device afterwards (dsa_check_scale_values). */
static la_status dsa_validate_fp8(const char *op, const la_index_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *w, const la_tensor *start,
                                  const la_tensor *end, const la_tensor *idx) {
    const bool q8 = q->dtype == LA_FP8_E4M3, k8 = k->dtype == LA_FP8_E4M3;
    if (!q8 || !k8) {
        if (q8 || k8)
            return la_err(LA_ERR_DTYPE,
                          "%s: q is %s and k is %s; the fp8 indexer takes both q and k in fp8_e4m3",
                          op, la_dtype_name(q->dtype), la_dtype_name(k->dtype));
        return la_err(LA_ERR_ARG,
                      "%s: %s given but q and k are %s/%s; k_scale/q_scale apply to fp8_e4m3 q/k "
                      "only (fold other scales into w)",
                      op, p->k_scale && p->q_scale ? "k_scale and q_scale" : p->k_scale ? "k_scale" : "q_scale",
                      la_dtype_name(q->dtype), la_dtype_name(k->dtype));
    }
    if (w->dtype == LA_FP8_E4M3)
        return la_err(LA_ERR_DTYPE, "w: dtype fp8_e4m3 not supported here (w is f32/f64/bf16/f16)");
    const unsigned fl = LA_DT(LA_F32) | LA_DT(LA_F64) | LA_DT(LA_BF16) | LA_DT(LA_F16) |
                        LA_DT(LA_FP8_E4M3);
    LA_TRY(la_idx_check_views(p, q, k, w, start, end, idx, LA_DEVICE_CUDA, fl));
    if (p->k_scale) {
        LA_TRY(la_check_tensor(p->k_scale, "k_scale", 1, LA_DT(LA_F32), LA_DEVICE_CUDA, false));
        LA_TRY(la_check_dim(p->k_scale, "k_scale", 0, k->ne[0], "(keys of k)"));
        if (la_tensors_overlap(idx, p->k_scale))
            return la_err(LA_ERR_ARG, "idx: overlaps input k_scale in memory (outputs must not alias inputs)");
    }
    if (p->q_scale) {
        LA_TRY(la_check_tensor(p->q_scale, "q_scale", 2, LA_DT(LA_F32), LA_DEVICE_CUDA, false));
        LA_TRY(la_check_dim(p->q_scale, "q_scale", 0, q->ne[0], "(queries of q)"));
        LA_TRY(la_check_dim(p->q_scale, "q_scale", 1, q->ne[1], "(heads of q)"));
        if (la_tensors_overlap(idx, p->q_scale))
            return la_err(LA_ERR_ARG, "idx: overlaps input q_scale in memory (outputs must not alias inputs)");
    }
    return LA_OK;
}

/* First scale that is not a positive finite number: (0 << 62 | s) for
 * k_scale[s], (1 << 62 | t*HI + h) for q_scale[t,h]; atomicMin keeps the
 * lowest (k_scale first). */
__global__ void dsa_scale_check_kernel(sc_scales sc, int64_t L, int64_t T, int64_t HI,
                                       unsigned long long *bad) {
    const int64_t nk = sc.ks ? L : 0, nq = sc.qs ? T * HI : 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nk + nq;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v;
        unsigned long long code;
        if (i < nk) {
            v = sc.ks[i * sc.ks_nb];
            code = (unsigned long long)i;
        } else {
            const int64_t j = i - nk, t = j / HI, h = j % HI;
            v = sc.qs[t * sc.qs_nb0 + h * sc.qs_nb1];
            code = (1ull << 62) | (unsigned long long)j;
        }
        if (!(v > 0.f) || isinf(v)) atomicMin(bad, code);
    }
}

/* Rejects a zero, negative, infinite or NaN scale with a message naming it.
 * The values live on the device: one small kernel plus a 8-byte read back
 * (a stream synchronization, ~10-20 us). Skipped while the stream is being
 * captured into a CUDA graph (no synchronization allowed there). */
static la_status dsa_check_scale_values(const sc_scales &sc, int64_t L, int64_t T, int64_t HI,
                                        cudaStream_t s) {
    if (!sc.ks && !sc.qs) return LA_OK;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    LA_CU(cudaStreamIsCapturing(s, &cap));
    if (cap != cudaStreamCaptureStatusNone) return LA_OK;
    la_cu_ws flag;
    LA_TRY(la_cu_ws_alloc(&flag, 8, s, "fp8 scale check"));
    LA_CU(cudaMemsetAsync(flag.p, 0xff, 8, s));
    const int64_t n = (sc.ks ? L : 0) + (sc.qs ? T * HI : 0);
    int64_t blocks = la_cu_cdiv(n, 256);
    if (blocks > 1024) blocks = 1024;
    if (blocks < 1) blocks = 1;
    dsa_scale_check_kernel<<<(unsigned)blocks, 256, 0, s>>>(sc, L, T, HI,
                                                            (unsigned long long *)flag.p);
    LA_CU_LAUNCH("fp8 scale check");
    unsigned long long h = 0;
    LA_CU(cudaMemcpyAsync(&h, flag.p, 8, cudaMemcpyDeviceToHost, s));
    LA_CU(cudaStreamSynchronize(s));
    if (h == ~0ull) return LA_OK;
    const bool is_q = (h >> 62) != 0;
    const int64_t i = (int64_t)(h & ((1ull << 62) - 1));
    float v = 0.f;
    const float *src = is_q ? sc.qs + (i / HI) * sc.qs_nb0 + (i % HI) * sc.qs_nb1 : sc.ks + i * sc.ks_nb;
    LA_CU(cudaMemcpy(&v, src, 4, cudaMemcpyDeviceToHost));
    if (is_q)
        return la_err(LA_ERR_ARG,
                      "q_scale: q_scale[%lld, %lld] = %g; fp8 scales must be finite and > 0 "
                      "(amax/448 with amax clamped away from 0)",
                      (long long)(i / HI), (long long)(i % HI), (double)v);
    return la_err(LA_ERR_ARG,
                  "k_scale: k_scale[%lld] = %g; fp8 scales must be finite and > 0 (amax/448 with "
                  "amax clamped away from 0)",
                  (long long)i, (double)v);
}

/* fp8 [n0, n1, n2] view -> contiguous f32 with the row scale folded in
 * (scale offset i0*s0 + i1*s1; no scale = 1): the generic fallback feeds
 * the exact fp32 kernel with dequantized inputs. */
__global__ void dsa_dequant_kernel(const uint8_t *src, int64_t n1, int64_t n2, int64_t nb0,
                                   int64_t nb1, int64_t nb2, const float *scale, int64_t s0,
                                   int64_t s1, float *dst, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i2 = i % n2, r = i / n2, i1 = r % n1, i0 = r / n1;
        __nv_fp8_e4m3 v;
        v.__x = src[i0 * nb0 + i1 * nb1 + i2 * nb2];
        float f = (float)v;
        if (scale) f *= scale[i0 * s0 + i1 * s1];
        dst[i] = f;
    }
}
static la_status dsa_dequant(const void *src, int64_t n0, int64_t n1, int64_t n2, int64_t nb0,
                             int64_t nb1, int64_t nb2, const float *scale, int64_t s0, int64_t s1,
                             la_cu_ws *ws, cudaStream_t s, const char *what) {
    size_t bytes;
    LA_TRY(la_mul_size((size_t)(n0 * n1), (size_t)n2 * 4, &bytes, what));
    LA_TRY(la_cu_ws_alloc(ws, bytes, s, what));
    const int64_t total = n0 * n1 * n2;
    if (total == 0) return LA_OK;
    int64_t blocks = la_cu_cdiv(total, 256);
    if (blocks > 65535 * 16) blocks = 65535 * 16;
    dsa_dequant_kernel<<<(unsigned)blocks, 256, 0, s>>>((const uint8_t *)src, n1, n2, nb0, nb1, nb2,
                                                        scale, s0, s1, (float *)ws->p, total);
    LA_CU_LAUNCH("fp8 dequantize");
    return LA_OK;
}

/* fp8 inputs of HISA and the block-sparse indexer (hisa.cu): the views are
 * validated as the DSA indexer's (la_sp_validate_fp8_cuda), then
 * la_sp_fp8_to_f32 checks the scale values and dequantizes q and k into
 * contiguous f32 copies with the scales folded in (x8·scale, one correctly
 * rounded fp32 product, as a caller dequantizing on the host gets),
 * described by tq, tk. The workspaces live in the caller's qf, kf (freed in
 * stream order). */
la_status la_sp_validate_fp8_cuda(const char *op, const la_index_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *w, const la_tensor *start,
                                  const la_tensor *end, const la_tensor *idx) {
    LA_TRY(la_idx_check_args(op, p, q, k, w, idx));
    return dsa_validate_fp8(op, p, q, k, w, start, end, idx);
}
static sc_scales sc_scales_of(const la_index_params *p) {
    sc_scales sc;
    memset(&sc, 0, sizeof sc);
    if (p->k_scale) {
        sc.ks = (const float *)p->k_scale->data;
        sc.ks_nb = p->k_scale->nb[0];
    }
    if (p->q_scale) {
        sc.qs = (const float *)p->q_scale->data;
        sc.qs_nb0 = p->q_scale->nb[0];
        sc.qs_nb1 = p->q_scale->nb[1];
    }
    return sc;
}
/* The scale values of validated fp8 views: finite and > 0 (the DSA's
 * messages; one stream synchronization). */
la_status la_sp_fp8_check_scales(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                                 cudaStream_t s) {
    return dsa_check_scale_values(sc_scales_of(p), k->ne[0], q->ne[0], q->ne[1], s);
}
la_status la_sp_fp8_to_f32(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                           la_cu_ws *qf, la_cu_ws *kf, la_tensor *tq, la_tensor *tk, cudaStream_t s) {
    const sc_scales sc = sc_scales_of(p);
    const int64_t T = q->ne[0], HI = q->ne[1], dI = q->ne[2], L = k->ne[0];
    LA_TRY(dsa_check_scale_values(sc, L, T, HI, s));
    LA_TRY(dsa_dequant(q->data, T, HI, dI, q->nb[0], q->nb[1], q->nb[2], sc.qs, sc.qs_nb0, sc.qs_nb1,
                       qf, s, "dequantized fp8 q"));
    LA_TRY(dsa_dequant(k->data, 1, L, dI, 0, k->nb[0], k->nb[1], sc.ks, 0, sc.ks_nb, kf, s,
                       "dequantized fp8 k"));
    const int64_t nq[3] = {T, HI, dI}, nk[2] = {L, dI};
    LA_TRY(la_tensor_init(tq, qf->p, LA_F32, LA_DEVICE_CUDA, 3, nq));
    return la_tensor_init(tk, kf->p, LA_F32, LA_DEVICE_CUDA, 2, nk);
}

/* The DSA score kernels (family "dsa"): by default the wgmma kernel where it
 * takes the views, else the mma.sync kernels, else the exact fp32 kernel
 * (fp8: on dequantized copies); a forced variant runs its kernel only. */
enum dsa_kernel { DSA_DEFAULT = -1, DSA_WGMMA = 0, DSA_MMA = 1, DSA_PORTABLE = 2 };
static const char *const dsa_names[] = {"wgmma", "mma", "portable"};
struct dsa_choice {
    dsa_kernel kernel; /* DSA_DEFAULT: the chain above */
    int qg;            /* > 0: queries per CTA of the wgmma kernel */
};
static la_status dsa_select(const char *forced, dsa_choice *c) {
    c->kernel = DSA_DEFAULT;
    c->qg = 0;
    if (!forced) return LA_OK;
    long n = 0;
    const int i = la_cu_variant_index(forced, dsa_names, 3);
    if (i >= 0) c->kernel = (dsa_kernel)i;
    else if (la_cu_variant_number(forced, "qg", 1, 4096, &n)) {
        c->kernel = DSA_WGMMA;
        c->qg = (int)n;
    } else
        return la_cu_unknown_variant("dsa", forced, "wgmma, qg<N>, mma, portable");
    return LA_OK;
}

/* The mma.sync fp8 kernel reads q rows with 16-byte cp.async and k rows
 * with 4-byte loads. */
static bool dsa_fp8_mma_ok(const la_sp_score_args &a) {
    return la_sp_scores_fast_shape(a.HI, a.dI) && a.q_nb2 == 1 && a.q_nb1 % 16 == 0 &&
           a.q_nb0 % 16 == 0 && ((uintptr_t)a.q & 15) == 0 && a.k_nb1 == 1 && a.k_nb0 % 4 == 0 &&
           ((uintptr_t)a.k & 3) == 0;
}

/* Dense DSA scores (ncols = Lk) on the kernel of c (see dsa_select). */
static la_status dsa_scores(la_sp_score_args a, const sc_scales &sc, bool fp8, const dsa_choice &c,
                            cudaStream_t s) {
    if (a.T == 0 || a.ncols == 0) return LA_OK;
    if (a.T > 65535 * 2 || a.ncols > (int64_t)INT32_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "indexer: T=%lld, columns=%lld exceed the CUDA grid",
                      (long long)a.T, (long long)a.ncols);
    const bool any = c.kernel == DSA_DEFAULT;
    const int eb = fp8 ? 1 : 2;
    const bool wg_ok = (fp8 || (a.q_dt == LA_BF16 && a.k_dt == LA_BF16)) && v2_ok(a, eb);
    const bool mma_ok = fp8 ? dsa_fp8_mma_ok(a) && a.T <= 65535 : la_sp_scores_mma_ok(a) && a.T <= 65535;
    if (c.kernel == DSA_WGMMA && !wg_ok)
        return la_cu_variant_unsupported("dsa", c.qg ? "qg<N>" : "wgmma",
                                         "HI = 64, dI = 128, bf16 or e4m3 rows contiguous");
    if (c.kernel == DSA_MMA && !mma_ok)
        return la_cu_variant_unsupported("dsa", "mma", "HI in {16, 32, 64}, dI in {64, 128}, aligned rows");
    if ((any || c.kernel == DSA_WGMMA) && wg_ok)
        return fp8 ? v2_launch<1>(a, sc, c.qg, s) : v2_launch<2>(a, sc, c.qg, s);
    if (!fp8) {
        if (c.kernel == DSA_PORTABLE) {
            if (a.T > 65535)
                return la_err(LA_ERR_UNSUPPORTED, "indexer: T=%lld exceeds the exact kernel's grid",
                              (long long)a.T);
            dim3 grid((unsigned)la_cu_cdiv(a.ncols, SC_EX_THREADS), (unsigned)a.T);
            sc_exact_kernel<<<grid, SC_EX_THREADS, 0, s>>>(a);
            LA_CU_LAUNCH("indexer scores (exact fp32)");
            return LA_OK;
        }
        return la_sp_scores(a, false, s);
    }
    if (c.kernel != DSA_PORTABLE && mma_ok) {
        if (a.HI == 64 && a.dI == 128) return sc_launch_mma_dense<64, 128, 1>(a, sc, s);
        if (a.HI == 64 && a.dI == 64) return sc_launch_mma_dense<64, 64, 1>(a, sc, s);
        if (a.HI == 32 && a.dI == 128) return sc_launch_mma_dense<32, 128, 1>(a, sc, s);
        if (a.HI == 32 && a.dI == 64) return sc_launch_mma_dense<32, 64, 1>(a, sc, s);
        if (a.HI == 16 && a.dI == 128) return sc_launch_mma_dense<16, 128, 1>(a, sc, s);
        if (a.HI == 16 && a.dI == 64) return sc_launch_mma_dense<16, 64, 1>(a, sc, s);
    }
    /* any other fp8 shape/stride: dequantized f32 copies (scales folded in)
     * through the exact kernel */
    la_cu_ws qf, kf;
    LA_TRY(dsa_dequant(a.q, a.T, a.HI, a.dI, a.q_nb0, a.q_nb1, a.q_nb2, sc.qs, sc.qs_nb0,
                       sc.qs_nb1, &qf, s, "dequantized fp8 q"));
    LA_TRY(dsa_dequant(a.k, 1, a.Lk, a.dI, 0, a.k_nb0, a.k_nb1, sc.ks, 0, sc.ks_nb, &kf, s,
                       "dequantized fp8 k"));
    a.q = qf.p;
    a.q_dt = LA_F32;
    a.q_nb0 = a.HI * a.dI;
    a.q_nb1 = a.dI;
    a.q_nb2 = 1;
    a.k = kf.p;
    a.k_dt = LA_F32;
    a.k_nb0 = a.dI;
    a.k_nb1 = 1;
    return la_sp_scores(a, true, s); /* f32: the exact kernel; kf/qf are freed in stream order */
}

extern "C" la_status la_dsa_indexer_cuda(const la_index_params *p, const la_tensor *q,
                                         const la_tensor *k, const la_tensor *w,
                                         const la_tensor *start, const la_tensor *end,
                                         la_tensor *idx, la_tensor *scores, la_context *ctx) {
    LA_TRY(la_idx_check_args("dsa", p, q, k, w, idx));
    const bool fp8 = p->k_scale || p->q_scale || q->dtype == LA_FP8_E4M3 || k->dtype == LA_FP8_E4M3;
    if (fp8) LA_TRY(dsa_validate_fp8("dsa", p, q, k, w, start, end, idx));
    else LA_TRY(la_sp_validate_idx_cuda("dsa", p, q, k, w, start, end, idx));
    if (scores) {
        LA_TRY(la_check_tensor(scores, "scores", 2, LA_DT(LA_F32), LA_DEVICE_CUDA, false));
        LA_TRY(la_check_dim(scores, "scores", 0, q->ne[0], "(queries of q)"));
        LA_TRY(la_check_dim(scores, "scores", 1, k->ne[0], "(keys of k)"));
        const la_tensor *ins[8] = {q, k, w, start, end, idx, p->k_scale, p->q_scale};
        const char *names[8] = {"q", "k", "w", "start", "end", "idx", "k_scale", "q_scale"};
        for (int i = 0; i < 8; i++)
            if (ins[i] && la_tensors_overlap(scores, ins[i]))
                return la_err(LA_ERR_ARG, "scores: overlaps %s in memory (outputs must not alias)", names[i]);
    }
    if (p->topk > LA_SP_TOPK_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "topk: %lld exceeds the CUDA top-k maximum %d",
                      (long long)p->topk, LA_SP_TOPK_MAX);
    if (scores && scores->nb[1] != 1)
        return la_err(LA_ERR_UNSUPPORTED,
                      "scores: the CUDA indexer writes f32 rows with unit column stride; got %s "
                      "with column stride %lld",
                      la_dtype_name(scores->dtype), (long long)scores->nb[1]);
    cudaStream_t s = la_cu_stream(ctx);
    la_sp_score_args a;
    la_sp_fill_score_args(&a, q, k, w, start, end);
    const sc_scales sc = sc_scales_of(p);
    LA_TRY(dsa_check_scale_values(sc, a.Lk, a.T, a.HI, s));
    la_cu_ws qw, kw, sw;
    if (!fp8) LA_TRY(la_sp_prepare_bf16(&a, &qw, &kw, s));
    const int64_t T = a.T, L = a.Lk;
    float *sc_rows;
    int64_t ld;
    if (scores) {
        sc_rows = (float *)scores->data;
        ld = scores->nb[0];
    } else {
        size_t bytes;
        LA_TRY(la_mul_size((size_t)T, (size_t)L * 4, &bytes, "score rows"));
        LA_TRY(la_cu_ws_alloc(&sw, bytes, s, "indexer score rows"));
        sc_rows = (float *)sw.p;
        ld = L;
    }
    a.ncols = L;
    a.out = sc_rows;
    a.out_ld = ld;
    dsa_choice ch;
    LA_TRY(dsa_select(la_context_variant(ctx, "dsa"), &ch));
    la_cu_report(ctx, "dsa", ch.kernel == DSA_DEFAULT ? "default" : ch.qg ? "qg<N>" : dsa_names[ch.kernel],
                 "T=%lld L=%lld HI=%lld dI=%lld %s", (long long)a.T, (long long)a.Lk, (long long)a.HI,
                 (long long)a.dI, fp8 ? "fp8" : la_dtype_name((la_dtype)a.q_dt));
    LA_TRY(dsa_scores(a, sc, fp8, ch, s));
    la_sp_topk_args t;
    memset(&t, 0, sizeof t);
    t.scores = sc_rows;
    t.ld = ld;
    t.cs = 1;
    t.R = T;
    t.L = L;
    t.use_range = 1;
    t.range = a.range;
    t.k = idx->ne[1];
    t.out = (int32_t *)idx->data;
    t.out_ld = idx->nb[0];
    t.out_cs = idx->nb[1];
    LA_TRY(la_sp_topk(t, ctx, s));
    la_err_clear();
    return LA_OK;
}
