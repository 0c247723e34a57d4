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
 *    chunks into a 4-stage ring. Same epilogue arithmetic as sc_mma_kernel
 *    (dsa_v2.cu). Variant "mma" of family "dsa" forces the mma.sync kernels.
 * fp8 e4m3 inputs carry fp32 scales per key row (ks) and per (query, head)
 * (qs); both are positive, so
 *   I(t,s) = sum_h w·ReLU(qs·ks·(q8·k8)) = ks[s] · sum_h (w·qs)[t,h]·ReLU(q8·k8):
 * w·qs is formed when the query block is staged, ks multiplies the head sum.
 * The same kernel, in gather mode, scores HISA's candidate tokens; per key
 * the arithmetic is identical, so HISA == DSA bit for bit when every block
 * is kept (bf16 mma.sync path). */
#include "cuda_ops.h"
#include "select.cuh"
#include "sparse_prep.cuh"
#include "paged_index_tc.cuh"
#include "dsa_mma.cuh"

#include <cuda_fp8.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* exact fp32 kernel                                                          */
/* ------------------------------------------------------------------------ */
#define SC_EX_THREADS 128

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
        score = fmaf(wv, la_relu_nan(dot), score);
    }
    if (p >= a.ncols) return;
    if (s < 0) score = -INFINITY;
    else if (a.force_ends && (s == lo || s == hi - 1)) score = INFINITY;
    a.out[t * a.out_ld + p] = score;
}

/* ------------------------------------------------------------------------ */
/* mma.sync tensor-core kernel (bf16, or fp8 e4m3)                            */
/* ------------------------------------------------------------------------ */
#define SC_QGROUP 64 /* queries per CTA in dense mode (K fragments reused) */

/* PAGED: the row of position s (>= 0) of sequence seq through the block
 * table, and its fp8 scale (paged_index_tc.cuh). */
__device__ __forceinline__ const uint8_t *sc_page_row(const sc_pages &pg, int64_t seq, int64_t s, int RB,
                                                      float *scale) {
    if (s < 0) {
        *scale = 1.f;
        return pg.pages;
    }
    const int64_t page = pg.table[seq * pg.maxp + s / pg.ps], off = s % pg.ps;
    const uint8_t *base = pg.pages + page * pg.page_bytes;
    *scale = pg.fp8 ? *(const float *)(base + (int64_t)pg.ps * RB + off * 4) : 1.f;
    return base + off * RB;
}

/* PAGED: 2 CTAs per SM (<= 128 registers, a few spilled): a decode CTA
 * scores its 256 keys for one query, so a second CTA's loads hide the
 * first's MMAs and epilogue */
template <int HI, int DI, int MT, bool GATHER, int EB, bool PAGED = false>
__global__ void __launch_bounds__(SC_THREADS, PAGED ? 2 : 1)
    sc_mma_kernel(la_sp_score_args a, sc_scales sc, int qgroup, sc_pages pg) {
    constexpr int NT = HI / 8, RB = DI * EB, KS = RB / 32, CPR = RB / 16;
    constexpr int SWZ = (CPR < 8 ? CPR : 8) - 1;
    constexpr int KEYS = SC_WARPS * 16 * MT;
    __shared__ __align__(128) uint8_t qs[2][HI * RB];
    __shared__ float ws[2][HI];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, qd = lane & 3;
    const int64_t p0 = (int64_t)blockIdx.x * KEYS + warp * 16 * MT; /* first column of the warp */
    /* t0 .. t1: the CTA's query rows (PAGED dense mode: indices into pg.rows);
     * PAGED: seq is the rows' sequence and klen its cached tokens */
    int64_t t0, t1, seq = 0, klen = a.Lk;
    if (GATHER) {
        t0 = blockIdx.y;
        t1 = t0 + 1;
        if (PAGED) {
            seq = pg.row_seq[t0];
            klen = pg.lens[seq];
        }
    } else if (PAGED) {
        seq = blockIdx.y / pg.rsplit;
        const int64_t r1 = pg.row0[seq + 1];
        t0 = pg.row0[seq] + (int64_t)(blockIdx.y % pg.rsplit) * qgroup;
        t1 = min(r1, t0 + qgroup);
        klen = pg.lens[seq];
        if (t0 >= t1) return;
        if ((int64_t)blockIdx.x * KEYS >= klen) { /* past the sequence: every column is -inf */
            for (int64_t i = t0; i < t1; i++)
                for (int64_t p = (int64_t)blockIdx.x * KEYS + threadIdx.x;
                     p < min(a.ncols, (int64_t)(blockIdx.x + 1) * KEYS); p += SC_THREADS)
                    a.out[(int64_t)pg.rows[i] * a.out_ld + p] = -INFINITY;
            return;
        }
    } else {
        t0 = (int64_t)blockIdx.y * qgroup;
        t1 = min(a.T, t0 + qgroup);
    }
    auto row_of = [&](int64_t i) -> int64_t { return (PAGED && !GATHER) ? (int64_t)pg.rows[i] : i; };

    sc_load_q<HI, DI, EB>(a, sc, row_of(t0), qs[0], ws[0]);

    /* A fragments: this warp's keys, all of dI, kept in registers (bytes
     * [4qd, 4qd+4) and [16+4qd, 20+4qd) of each 32-byte k-step of rows g and
     * g+8). In gather mode the keys are the query's candidates (range
     * checked in the epilogue; here only "is there a row to read"). */
    uint32_t af[MT][KS][4];
    int64_t lo = 0, hi = a.Lk;
    if (GATHER) la_sp_row_range(a.range, t0, &lo, &hi);
    {
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int64_t p = p0 + mt * 16 + g + 8 * half;
                int64_t s;
                if (GATHER) s = p < a.ncols ? sc_key_of(a, t0, p, lo, hi) : -1;
                else s = p < klen ? p : -1;
                float unused;
                const uint8_t *kr = PAGED ? sc_page_row(pg, seq, s, RB, &unused)
                                          : (const uint8_t *)a.k + (s >= 0 ? s : 0) * a.k_nb0 * EB;
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
        if (PAGED) {
            int64_t s;
            if (GATHER) s = p < a.ncols ? sc_key_of(a, t0, p, lo, hi) : -1;
            else s = p < klen ? p : -1;
            sc_page_row(pg, seq, s, RB, &ksv[mt]);
        } else {
            ksv[mt] = (sc.ks && !GATHER && p < a.Lk) ? sc.ks[p * sc.ks_nb] : 1.f;
        }
    }
    const bool kscaled = sc.ks || (PAGED && pg.fp8);

    for (int64_t i = t0; i < t1; i++) {
        const int64_t t = row_of(i);
        const int buf = (int)((i - t0) & 1);
        la_cp_wait_all_nc();
        __syncthreads(); /* q(t) visible; everyone is done with the other buffer */
        if (i + 1 < t1) sc_load_q<HI, DI, EB>(a, sc, row_of(i + 1), qs[buf ^ 1], ws[buf ^ 1]);

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
                la_ldsm4(b, qb + h * RB + ((c ^ (h & SWZ)) * 16));
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
        sc_head_sum<MT, NT>(acc, wb, qd, part);
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
                float o = kscaled ? v * kv : v;
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
        la_cp16z_n(ks + r * DI + ((ch ^ (r & 7)) * 8), src + ch * 8, ok ? 16 : 0);
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
        la_cp_commit_nc();
    }
    for (int64_t c = c0; c < c1; c++) {
        const int stage = (int)((c - c0) % SG_STAGES);
        asm volatile("cp.async.wait_group %0;\n" ::"n"(SG_STAGES - 2));
        __syncthreads();
        {
            const int64_t cn = c + SG_STAGES - 1;
            if (cn < c1)
                sg_load_chunk<DI>(a, t, cn, lo, hi, kst + ((cn - c0) % SG_STAGES) * SG_ROWS * DI);
            la_cp_commit_nc();
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
                la_ldsm4(af, kb + r * DI + ((ch ^ (r & 7)) * 8));
            }
#pragma unroll
            for (int jp = 0; jp < NT / 2; jp++) {
                const int h = 16 * jp + (lane & 7) + ((lane >> 4) << 3);
                const int ch = 2 * ks + ((lane >> 3) & 1);
                uint32_t b[4];
                la_ldsm4(b, qs + h * DI + ((ch ^ (h & 7)) * 8));
                la_mma_bf16(acc[2 * jp], af, b[0], b[1]);
                la_mma_bf16(acc[2 * jp + 1], af, b[2], b[3]);
            }
        }
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const float2 wv = *(const float2 *)(ws + 8 * j + 2 * qd);
            s0 = fmaf(wv.x, la_relu_nan(acc[j][0]), s0);
            s0 = fmaf(wv.y, la_relu_nan(acc[j][1]), s0);
            s1 = fmaf(wv.x, la_relu_nan(acc[j][2]), s1);
            s1 = fmaf(wv.y, la_relu_nan(acc[j][3]), s1);
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
    sc_mma_kernel<HI, DI, 2, false, EB><<<grid, SC_THREADS, 0, s>>>(a, sc, (int)qg, sc_pages{});
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
        LA_TRY(la_cu_func_smem(a.ctx, (const void *)sc_gather_kernel<HI, DI>, smem, smem, false));
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

/* ---- paged keys (paged_index_tc.cuh): the same kernel, PAGED mode ---- */
/* Gather mode (HISA's candidates) on paged_gather.cu's stage-ring kernel
 * where it applies (the same bits); false: this file's kernel always (per
 * call: variant "direct" of family "paged_hisa_cand", ring false). */
constexpr bool kPagedGatherRing = true;

template <int HI, int DI, int EB>
static la_status sc_launch_mma_paged(const la_sp_score_args &a, const sc_pages &pg, int64_t nseq, bool ring,
                                     cudaStream_t s) {
    constexpr int KEYS = SC_WARPS * 16 * 2;
    const int64_t ntiles = la_cu_cdiv(a.ncols, KEYS);
    if (a.blocks && ring && kPagedGatherRing && la_sp_paged_gather_ok(a, pg, EB))
        return la_sp_scores_paged_gather(a, pg, EB, s);
    if (a.blocks) {
        dim3 grid((unsigned)ntiles, (unsigned)a.T);
        sc_mma_kernel<HI, DI, 2, true, EB, true><<<grid, SC_THREADS, 0, s>>>(a, sc_scales{}, 1, pg);
    } else {
        dim3 grid((unsigned)ntiles, (unsigned)(nseq * pg.rsplit));
        sc_mma_kernel<HI, DI, 2, false, EB, true><<<grid, SC_THREADS, 0, s>>>(a, sc_scales{}, SC_QGROUP, pg);
    }
    LA_CU_LAUNCH(EB == 2 ? "paged indexer scores (bf16 mma)" : "paged indexer scores (fp8 e4m3 mma)");
    return LA_OK;
}

bool la_sp_paged_tc_ok(const la_sp_score_args &a, int EB) {
    const bool shape = (a.HI == 64 || a.HI == 32) && a.dI == 128;
    const bool dt = EB == 2 ? a.q_dt == LA_BF16 : (a.q_dt == LA_FP8_E4M3 && a.hopper);
    const int64_t al = 16 / EB; /* elements per 16 bytes */
    return shape && dt && a.q_nb2 == 1 && a.q_nb1 % al == 0 && a.q_nb0 % al == 0 &&
           ((uintptr_t)a.q & 15) == 0 && a.T <= 65535 && a.ncols <= (int64_t)INT32_MAX;
}

la_status la_sp_scores_paged(const la_sp_score_args &a, const sc_pages &pg, int EB, int64_t nseq, bool ring,
                             cudaStream_t s) {
    if (a.T == 0 || a.ncols == 0) return LA_OK;
    if (!a.blocks && nseq * pg.rsplit > 65535)
        return la_err(LA_ERR_UNSUPPORTED, "paged indexer: %lld sequences x %d row slices exceed the CUDA grid",
                      (long long)nseq, pg.rsplit);
    if (EB == 2) {
        if (a.HI == 64) return sc_launch_mma_paged<64, 128, 2>(a, pg, nseq, ring, s);
        return sc_launch_mma_paged<32, 128, 2>(a, pg, nseq, ring, s);
    }
    if (a.HI == 64) return sc_launch_mma_paged<64, 128, 1>(a, pg, nseq, ring, s);
    return sc_launch_mma_paged<32, 128, 1>(a, pg, nseq, ring, s);
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
    return a.hopper && la_sp_scores_fast_shape(a.HI, a.dI) && a.q_nb2 == 1 && a.q_nb1 % 16 == 0 &&
           a.q_nb0 % 16 == 0 && ((uintptr_t)a.q & 15) == 0 && a.k_nb1 == 1 && a.k_nb0 % 4 == 0 &&
           ((uintptr_t)a.k & 3) == 0;
}

/* Dense DSA scores (ncols = Lk) on the kernel of c (see dsa_select). */
static la_status dsa_scores(la_sp_score_args a, const sc_scales &sc, bool fp8, const dsa_choice &c,
                            const la_context *ctx, cudaStream_t s) {
    if (a.T == 0 || a.ncols == 0) return LA_OK;
    if (a.T > 65535 * 2 || a.ncols > (int64_t)INT32_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "indexer: T=%lld, columns=%lld exceed the CUDA grid",
                      (long long)a.T, (long long)a.ncols);
    const bool any = c.kernel == DSA_DEFAULT;
    const int eb = fp8 ? 1 : 2;
    const bool wg_ok = (fp8 || (a.q_dt == LA_BF16 && a.k_dt == LA_BF16)) && dsa_v2_ok(a, eb);
    const bool mma_ok = fp8 ? dsa_fp8_mma_ok(a) && a.T <= 65535 : la_sp_scores_mma_ok(a) && a.T <= 65535;
    if (c.kernel == DSA_WGMMA && !wg_ok)
        return la_cu_variant_unsupported("dsa", c.qg ? "qg<N>" : "wgmma",
                                         "an sm_90 device, HI = 64, dI = 128, bf16 or e4m3 rows "
                                         "contiguous");
    if (c.kernel == DSA_MMA && !mma_ok)
        return la_cu_variant_unsupported("dsa", "mma", fp8 ? "an sm_90 device for fp8, HI in {16, 32, 64}, "
                                                            "dI in {64, 128}, aligned rows"
                                                          : "HI in {16, 32, 64}, dI in {64, 128}, aligned rows");
    auto report = [&](const char *kernel) {
        la_cu_report(ctx, "dsa", kernel, "T=%lld L=%lld HI=%lld dI=%lld %s%s", (long long)a.T,
                     (long long)a.Lk, (long long)a.HI, (long long)a.dI, fp8 ? "fp8" : "",
                     c.qg ? " (queries per CTA forced)" : "");
    };
    if ((any || c.kernel == DSA_WGMMA) && wg_ok) {
        report("wgmma");
        return dsa_v2_launch(a, sc, eb, c.qg, s);
    }
    if (!fp8) {
        report(c.kernel == DSA_PORTABLE || !la_sp_scores_mma_ok(a) ? "portable" : "mma");
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
    report(c.kernel != DSA_PORTABLE && mma_ok ? "mma" : "portable");
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
    la_sp_fill_score_args(&a, q, k, w, start, end, ctx);
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
    LA_TRY(dsa_scores(a, sc, fp8, ch, ctx, s));
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
