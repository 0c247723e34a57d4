/* Device helpers of the mma.sync indexer score kernels, shared by dsa.cu
 * (sc_mma_kernel, sc_gather_kernel), paged_gather.cu (the paged gather
 * kernel) and paged_hisa_cand.cu (block-major candidates): one definition
 * of the candidate-to-key map, the MMA, the head-sum epilogue and the query
 * staging, so the kernels that must agree bit for bit run the same code. Internal; included by src/cuda/*.cu only. */
#ifndef LA_CUDA_DSA_MMA_CUH
#define LA_CUDA_DSA_MMA_CUH

#include "ptx.cuh"
#include "sparse_prep.cuh"

#define SC_WARPS 8
#define SC_THREADS (SC_WARPS * 32)

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

/* SC_MMA_BEGIN (dev/emu_paged_hisa.sh cuts sc_mma and sc_head_sum for the host emulation) */
/* c += a·b over 32 bytes of k: bf16 m16n8k16 (EB = 2) or e4m3 m16n8k32 (EB = 1) */
template <int EB>
__device__ __forceinline__ void sc_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    if constexpr (EB == 2) {
        la_mma_bf16(c, a, b0, b1);
    } else {
#if LA_CU_SM90_CODE
        la_mma_e4m3(c, a, b0, b1);
#else
        __trap(); /* fp8 mma.sync: built for sm_90a only (dsa_fp8_mma_ok) */
#endif
    }
}

/* The epilogue's ReLU-weighted head sum: this thread holds heads 8j + 2qd,
 * 8j + 2qd + 1 of keys g and g + 8 of each m-tile; part[mt] = the folds over
 * j ascending with fmaf from 0 (ws: the head weights), summed over the quad
 * (xor 1, then xor 2). */
template <int MT, int NT>
__device__ __forceinline__ void sc_head_sum(const float (&acc)[MT][NT][4], const float *ws, int qd,
                                            float (&part)[MT][2]) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const float2 wv = *(const float2 *)(ws + 8 * j + 2 * qd);
            s0 = fmaf(wv.x, la_relu_nan(acc[mt][j][0]), s0);
            s0 = fmaf(wv.y, la_relu_nan(acc[mt][j][1]), s0);
            s1 = fmaf(wv.x, la_relu_nan(acc[mt][j][2]), s1);
            s1 = fmaf(wv.y, la_relu_nan(acc[mt][j][3]), s1);
        }
        s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
        s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
        part[mt][0] = s0;
        part[mt][1] = s1;
    }
}
/* SC_MMA_END */

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
        la_cp16(qs + h * RB + ((c ^ (h & SWZ)) * 16), q + h * a.q_nb1 * EB + c * 16);
    }
    for (int h = threadIdx.x; h < HI; h += SC_THREADS) ws[h] = sc_wq(a, sc, t, h);
    la_cp_commit_nc();
}

#endif
