/* Hopper warpgroup MMA (wgmma) helpers shared by the indexer kernels
 * (dsa.cu's DSA v2 score kernel, hisa.cu's block-major stage 2): the
 * 128-byte-swizzled K-major shared-memory layout, its descriptor, the
 * m64n128 bf16 (k16) and e4m3 (k32) instructions with fp32 accumulators,
 * and the register fence / wait that keep the compiler from moving
 * accumulator accesses across an in-flight wgmma. Internal (sm_90a). */
#ifndef LA_CUDA_WGMMA_CUH
#define LA_CUDA_WGMMA_CUH

#include <stdint.h>

/* byte offset of 16-byte chunk c of row r in a swizzled [R rows x RB] tile */
__device__ __forceinline__ uint32_t la_wg_off(int R, int r, int c) {
    return (uint32_t)((c >> 3) * R * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* wgmma shared-memory descriptor: K-major, 128-byte swizzle, SBO = 1024 B
 * (8 rows x 128 B), LBO unused for swizzled K-major (set to 16 B). */
__device__ __forceinline__ uint64_t la_wg_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) |
           ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

/* The 64 fp32 accumulators of an m64n128 wgmma: register list and operands. */
#define LA_WG_D64_REGS                                                                     \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "             \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "    \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "    \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
#define LA_WG_D64_OPS(d)                                                                   \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),      \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
    "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),          \
    "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),          \
    "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),          \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),          \
    "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),          \
    "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),          \
    "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),          \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),          \
    "+f"(d[62]), "+f"(d[63])

/* D(64x128) (+)= A(64x16) B(16x128), bf16, both from shared memory; TA/TB:
 * 0 = K-major, 1 = transposed (M-/N-major); scale_d = 0 overwrites D. */
template <int TA, int TB>
__device__ __forceinline__ void la_wg_m64n128k16_bf16_t(float *d, uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " LA_WG_D64_REGS
                 "%64, %65, p, 1, 1, %67, %68;\n}\n"
                 : LA_WG_D64_OPS(d)
                 : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
}
__device__ __forceinline__ void la_wg_m64n128k16_bf16(float *d, uint64_t da, uint64_t db, int scale_d) {
    la_wg_m64n128k16_bf16_t<0, 0>(d, da, db, scale_d);
}
__device__ __forceinline__ void la_wg_m64n128k32_e4m3(float *d, uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " LA_WG_D64_REGS
                 "%64, %65, p, 1, 1;\n}\n"
                 : LA_WG_D64_OPS(d)
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* keep the compiler from moving accumulator accesses across wgmma issue/wait */
template <int N> __device__ __forceinline__ void la_wg_fence_acc(float *d) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void la_wg_fence_acc64(float *d) { la_wg_fence_acc<64>(d); }
template <int N> __device__ __forceinline__ void la_wg_wait(float *acc) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
    la_wg_fence_acc64(acc);
}

/* ---- additions for the linear family's output kernel (linfam.cu, "wg") ----
 * MN-major operand (B read "transposed": N contiguous in shared memory),
 * 128-byte swizzle, the layout smla_v3's V uses (sparse_attn.cu): atoms of
 * [8 k-rows][64 bf16 along N] = 1024 B, chunk c of k-row r at c ^ (r & 7);
 * LBO = bytes between consecutive 64-wide N blocks, SBO = 1024 B between
 * consecutive 8-row k groups; base offset 0 (atoms 1024-byte aligned). */
__device__ __forceinline__ uint64_t la_wg_desc_mn(uint32_t saddr, uint32_t lbo) {
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
           ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
/* D(64x128) (+)= A(64x16, K-major smem) B(16x128, MN-major smem: trans-b = 1) */
__device__ __forceinline__ void la_wg_m64n128k16_bf16_tb(float *d, uint64_t da, uint64_t db, int scale_d) {
    la_wg_m64n128k16_bf16_t<0, 1>(d, da, db, scale_d);
}
/* D(64x8) (+)= A(64x16) B(16x8), both K-major smem; d = 4 fp32 per thread:
 * rows 16*warp + g (d[0], d[1]: columns 2c, 2c+1) and + 8 (d[2], d[3]) */
__device__ __forceinline__ void la_wg_m64n8k16_bf16(float *d, uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "l"(da), "l"(db), "r"(scale_d));
}


/* ---- additions for the linear family's summary kernel (linfam.cu,
 * LA_CUDA_LINFAM_SUMMARY=wg) ----
 * A read "transposed" too (trans-a = 1, M-major: M contiguous in shared
 * memory; allowed for bf16/f16 only). The M-major A uses the same SW128
 * atoms as the MN-major B above ([8 k-rows][64 bf16 along M] = 1024 B,
 * la_wg_desc_mn: LBO = next 64-wide M block, SBO = 1024 B = next 8 k-rows).
 * D(64x128) (+)= A(64x16, M-major smem) B(16x128, N-major smem) */
__device__ __forceinline__ void la_wg_m64n128k16_bf16_tab(float *d, uint64_t da, uint64_t db, int scale_d) {
    la_wg_m64n128k16_bf16_t<1, 1>(d, da, db, scale_d);
}
/* D(64x8) (+)= A(64x16, M-major smem) B(16x8, K-major smem); d as in
 * la_wg_m64n8k16_bf16 */
__device__ __forceinline__ void la_wg_m64n8k16_bf16_ta(float *d, uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3}, %4, %5, p, 1, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* The indexer's ReLU-weighted head sum over one m64n128 accumulator holding
 * 2 queries × 64 heads (columns 64q + h) for this thread's two key rows:
 * Σ_h w[q,h]·ReLU(acc), reduced over the 4 lanes of a quad. Lane qd of the
 * quad returns query qd >> 1, key row g + 8·(qd & 1). Written once for the
 * DSA v2 kernel and HISA's block-major stage 2 (bf16 and e4m3), so that
 * their scores are the same bit for bit (HISA == DSA when every block is
 * kept).
 * la_wg_headsum_w loads this thread's weights from wst (the 2 × 64 weights
 * in shared memory) into registers, once per chunk for both m-tiles:
 * wr[8 qi + jj] = the float2 at wst + 64 qi + 8 jj + 2 qd.
 * la_wg_relu_headsum_wr: 4 FMA chains (2 key rows × 2 queries), then the
 * quad reduction in 3 shuffles: each lane sums only what it returns, lane
 * qd returning V[qd] of V = {s0, s1 of query 0, s0, s1 of query 1} as
 * (V(qd) + V(qd^1)) + (V(qd^2) + V(qd^3)), V(l) = lane l's partial. */
__device__ __forceinline__ void la_wg_headsum_w(float2 *wr, const float *wst, int qd) {
#pragma unroll
    for (int j = 0; j < 16; j++) wr[j] = *(const float2 *)(wst + 64 * (j >> 3) + 8 * (j & 7) + 2 * qd);
}
__device__ __forceinline__ float la_wg_relu_headsum_wr(const float *acc, const float2 *wr, int qd) {
    constexpr int NQ = 2, HI = 64;
    float v[2 * NQ]; /* v[2 qi + row]: this lane's partial sums */
#pragma unroll
    for (int qi = 0; qi < NQ; qi++) {
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int jj = 0; jj < HI / 8; jj++) {
            const int j = (HI / 8) * qi + jj;
            const float2 wv = wr[j];
            s0 = fmaf(wv.x, fmaxf(acc[4 * j + 0], 0.f), s0);
            s0 = fmaf(wv.y, fmaxf(acc[4 * j + 1], 0.f), s0);
            s1 = fmaf(wv.x, fmaxf(acc[4 * j + 2], 0.f), s1);
            s1 = fmaf(wv.y, fmaxf(acc[4 * j + 3], 0.f), s1);
        }
        v[2 * qi] = s0;
        v[2 * qi + 1] = s1;
    }
    /* over lane ^ 1: keep the values of this lane's row parity (v[odd],
     * v[2 + odd]), send the other parity's */
    const bool odd = qd & 1, upper = qd & 2;
    float k0 = odd ? v[1] : v[0], k1 = odd ? v[3] : v[2];
    const float x0 = odd ? v[0] : v[1], x1 = odd ? v[2] : v[3];
    k0 += __shfl_xor_sync(0xffffffffu, x0, 1);
    k1 += __shfl_xor_sync(0xffffffffu, x1, 1);
    /* over lane ^ 2: keep this lane's query (k0: query 0, k1: query 1) */
    float keep = upper ? k1 : k0;
    const float send = upper ? k0 : k1;
    keep += __shfl_xor_sync(0xffffffffu, send, 2);
    return keep;
}

#endif
