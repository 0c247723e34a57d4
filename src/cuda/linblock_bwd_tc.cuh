/* Shared pieces of the tensor-core backward of the non-causal linear family
 * (linblock_bwd_tc.cu: the token side; linblock_bwd_mix.cu: the mixing
 * products): the CTA primitives (CUDA, or bwd_emu.cuh's host emulation under
 * LA_BWD_EMU), bf16 bits, the warp-level mma.sync products over shared
 * memory, and the batched split-operand GEMM. */
#ifndef LA_CUDA_LINBLOCK_BWD_TC_CUH
#define LA_CUDA_LINBLOCK_BWD_TC_CUH

#include "cuda/bwd_common.cuh"
#ifndef LA_BWD_EMU
#include "cuda/ptx.cuh"
#endif

#define LT_T 64          /* tokens per tile */
#define LT_THREADS 256   /* 8 warps */

#ifndef LA_BWD_EMU
static __device__ __forceinline__ int lt_tid(void) { return threadIdx.x; }
static __device__ __forceinline__ unsigned lt_bx(void) { return blockIdx.x; }
static __device__ __forceinline__ unsigned lt_by(void) { return blockIdx.y; }
static __device__ __forceinline__ void lt_sync(void) { __syncthreads(); }
static __device__ __forceinline__ void lt_mma(float *c, const uint32_t *a, uint32_t b0,
                                              uint32_t b1) {
    la_mma_bf16(c, a, b0, b1);
}
static __device__ __forceinline__ float lt_u2f(uint32_t u) { return __uint_as_float(u); }
static __device__ __forceinline__ uint32_t lt_f2u(float f) { return __float_as_uint(f); }
#define LT_SMEM_DECL extern __shared__ __align__(16) unsigned char lt_sm[]
static __device__ __forceinline__ unsigned char *lt_smem_base(void) {
    extern __shared__ __align__(16) unsigned char lt_sm[];
    return lt_sm;
}
#define LT_LAUNCH(kern, gx, gy, smem, stream, ...)                                          \
    do {                                                                                    \
        LA_CU(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,       \
                                   (int)(smem)));                                           \
        kern<<<dim3((unsigned)(gx), (unsigned)(gy)), LT_THREADS, (smem), (stream)>>>(       \
            __VA_ARGS__);                                                                   \
        LA_CU_LAUNCH(#kern);                                                                \
    } while (0)
#else
static inline int lt_tid(void) { return bt_tid(); }
static inline unsigned lt_bx(void) { return bt_bx(); }
static inline unsigned lt_by(void) { return bt_by(); }
static inline void lt_sync(void) { bt_sync(); }
static inline void lt_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    bt_mma(c, a, b0, b1);
}
static inline float lt_u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t lt_f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
#define LT_SMEM_DECL unsigned char *lt_sm = bt_smem()
static inline unsigned char *lt_smem_base(void) { return bt_smem(); }
#define LT_LAUNCH(kern, gx, gy, smem, stream, ...) \
    BWD_LAUNCH_CTA(kern, gx, gy, LT_THREADS, smem, stream, __VA_ARGS__)
#endif

typedef uint16_t lt_bf; /* bf16 bits */

static BWD_DEV inline float lt_f(lt_bf h) { return lt_u2f((uint32_t)h << 16); }
/* round to nearest even (NaN stays NaN): one cvt on the device, the same
 * rounding in integer steps on the host emulator */
static BWD_DEV inline lt_bf lt_h(float f) {
#ifndef LA_BWD_EMU
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
    uint32_t u = lt_f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (lt_bf)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (lt_bf)(u >> 16);
#endif
}
static BWD_DEV inline uint32_t lt_ld32(const lt_bf *p) { return *reinterpret_cast<const uint32_t *>(p); }
static BWD_DEV inline void lt_st2(lt_bf *p, float a, float b) {
    *reinterpret_cast<uint32_t *>(p) = (uint32_t)lt_h(a) | ((uint32_t)lt_h(b) << 16);
}
static BWD_DEV inline int64_t lt_min(int64_t a, int64_t b) { return a < b ? a : b; }

static inline int64_t lt_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* acc += A · Bᵀ for one warp: A rows m0..m0+15 of sA, B rows n0..n0+8·NT−1
 * of sB, both contiguous along the reduction k < K (a multiple of 16). */
template <int NT>
static BWD_DEV inline void lt_mma_rows(float (&acc)[NT][4], const lt_bf *sA, int la, const lt_bf *sB,
                                int lb, int m0, int n0, int K) {
    const int lane = lt_tid() & 31, g = lane >> 2, c = lane & 3;
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t a[4];
        const lt_bf *pa = sA + (m0 + g) * la + k0 + 2 * c;
        a[0] = lt_ld32(pa);
        a[1] = lt_ld32(pa + 8 * la);
        a[2] = lt_ld32(pa + 8);
        a[3] = lt_ld32(pa + 8 * la + 8);
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const lt_bf *pb = sB + (n0 + nt * 8 + g) * lb + k0 + 2 * c;
            lt_mma(acc[nt], a, lt_ld32(pb), lt_ld32(pb + 8));
        }
    }
}
/* the same with split operands: (A + A_lo)(B + B_lo)ᵀ less the lo·lo term
 * (a NULL lo part is zero) */
template <int NT>
static BWD_DEV inline void lt_mma3(float (&acc)[NT][4], const lt_bf *sA, const lt_bf *sA_lo, int la,
                            const lt_bf *sB, const lt_bf *sB_lo, int lb, int m0, int n0, int K) {
    lt_mma_rows<NT>(acc, sA, la, sB, lb, m0, n0, K);
    if (sA_lo) lt_mma_rows<NT>(acc, sA_lo, la, sB, lb, m0, n0, K);
    if (sB_lo) lt_mma_rows<NT>(acc, sA, la, sB_lo, lb, m0, n0, K);
}
#ifndef LA_BWD_EMU
static __device__ __forceinline__ void lt_ldsm4(uint32_t *r, const lt_bf *p) { la_ldsm4(r, p); }
static __device__ __forceinline__ void lt_ldsm4t(uint32_t *r, const lt_bf *p) { la_ldsm4t(r, p); }
#else
static inline void lt_ldsm4(uint32_t *r, const lt_bf *p) { bt_ldsm4(r, p); }
static inline void lt_ldsm4t(uint32_t *r, const lt_bf *p) { bt_ldsm4t(r, p); }
#endif
/* acc += A·B for one warp as lt_mma_rows, fragments by ldmatrix (rows of
 * 16-byte aligned addresses; NT even): A(m, k) at sA[m·la + k] or, AT,
 * sA[k·la + m]; B(k, n) at sB[n·lb + k] or, BT, sB[k·lb + n] (.trans for
 * the transposed reads) */
template <int NT, bool AT, bool BT>
static BWD_DEV inline void lt_mma_ld(float (&acc)[NT][4], const lt_bf *sA, int la, const lt_bf *sB,
                                     int lb, int m0, int n0, int K) {
    static_assert(NT % 2 == 0, "n-tiles in pairs");
    const int lane = lt_tid() & 31, li = lane & 7, lj = lane >> 3;
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t a[4];
        if (!AT) lt_ldsm4(a, sA + (m0 + 8 * (lj & 1) + li) * la + k0 + 8 * (lj >> 1));
        else lt_ldsm4t(a, sA + (k0 + 8 * (lj >> 1) + li) * la + m0 + 8 * (lj & 1));
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            const int nb = n0 + 16 * np;
            if (!BT) lt_ldsm4(b, sB + (nb + 8 * (lj >> 1) + li) * lb + k0 + 8 * (lj & 1));
            else lt_ldsm4t(b, sB + (k0 + 8 * (lj & 1) + li) * lb + nb + 8 * (lj >> 1));
            lt_mma(acc[2 * np], a, b[0], b[1]);
            lt_mma(acc[2 * np + 1], a, b[2], b[3]);
        }
    }
}
/* the split product (A + A_lo)(B + B_lo) less lo·lo on lt_mma_ld */
template <int NT, bool AT, bool BT>
static BWD_DEV inline void lt_mma3t(float (&acc)[NT][4], const lt_bf *sA, const lt_bf *sA_lo, int la,
                                    const lt_bf *sB, const lt_bf *sB_lo, int lb, int m0, int n0,
                                    int K) {
    lt_mma_ld<NT, AT, BT>(acc, sA, la, sB, lb, m0, n0, K);
    if (sA_lo) lt_mma_ld<NT, AT, BT>(acc, sA_lo, la, sB, lb, m0, n0, K);
    if (sB_lo) lt_mma_ld<NT, AT, BT>(acc, sA, la, sB_lo, lb, m0, n0, K);
}
/* lt_mma3 with the fragments of lt_mma_ld (LD) or lt_mma_rows */
template <int NT, bool LD>
static BWD_DEV inline void lt_mma3v(float (&acc)[NT][4], const lt_bf *sA, const lt_bf *sA_lo, int la,
                                    const lt_bf *sB, const lt_bf *sB_lo, int lb, int m0, int n0,
                                    int K) {
    if (!LD) {
        lt_mma3<NT>(acc, sA, sA_lo, la, sB, sB_lo, lb, m0, n0, K);
        return;
    }
    lt_mma_ld<NT, false, false>(acc, sA, la, sB, lb, m0, n0, K);
    if (sA_lo) lt_mma_ld<NT, false, false>(acc, sA_lo, la, sB, lb, m0, n0, K);
    if (sB_lo) lt_mma_ld<NT, false, false>(acc, sA, la, sB_lo, lb, m0, n0, K);
}
template <int NT> static BWD_DEV inline void lt_zero(float (&acc)[NT][4]) {
#pragma unroll
    for (int i = 0; i < NT; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
}
/* Batched product on mma.sync with split operands (hi + lo, three passes):
 *   C[y][i][j] = Σ_{k in split} A(z, i, k) B(z, k, j),  y = z·splits + split,
 * A(z,i,k) at A + (aMod ? z % aMod : z)·aZ + i·aI + k·aK, B(z,k,j) at
 * B + z·bZ + k·bK + j·bJ, C[y] at C + y·cZ + i·cI + j (fp32 in and out; an
 * empty split writes zeros). 64 × 128 tiles, K in steps of 32; 8 warps of
 * 16 rows × 64 columns. */
struct lt_gemm {
    const float *A;
    int64_t aZ, aMod, aI, aK;
    const float *B;
    int64_t bZ, bK, bJ;
    float *C;
    int64_t cZ, cI;
    int64_t rows, cols, K, splits, kper, tilesN;
};
/* C = A·B as above (a set kper must be a multiple of LT_MG_K = 32) */
la_status lt_gemm_run(const lt_gemm &m, int64_t batches, cudaStream_t s);
/* dW[hw][e] = Σ_batch Σ_head Σ_split part[(b·H + h)·splits + split][e] (e < MM), in order */
la_status lt_dw_reduce(int64_t B, int64_t H, int64_t Hw, int64_t splits, int64_t MM,
                       const float *part, float *dW, cudaStream_t s);
#define LT_MG_K 32

/* The `mma2` mixing GEMM (linblock_bwd_mix2.cu): the same product with
 * A(z,i,k) at A + (aMod ? z % aMod : z)·aZ + (aT ? k·lda + i : i·lda + k),
 * B(z,k,j) at B + z·bZ + (bT ? j·ldb + k : k·ldb + j), C[y] at C + y·cZ +
 * i·ldc + j; splitA / splitB: that operand as hi + lo (else bf16 once).
 * lda, ldb, aZ, bZ multiples of 4, 16-byte aligned bases, an operand read
 * along k zero past K up to a multiple of 4, kper a multiple of 32. */
struct lt2_gemm {
    const float *A;
    int64_t aZ, aMod, lda;
    int aT, splitA;
    const float *B;
    int64_t bZ, ldb;
    int bT, splitB;
    float *C;
    int64_t cZ, ldc;
    int64_t rows, cols, K, splits, kper, tilesM;
};
la_status lt2_gemm_run(const lt2_gemm &m, int64_t batches, cudaStream_t s);
/* dst [Hw][Mp][Mp] = the packed mixing W [Hw][M][M], zero-padded */
la_status lt2_pad_mixing(int64_t Hw, int64_t M, int64_t Mp, const float *W, float *dst,
                         cudaStream_t s);

#endif
