/* The 16-bit element types of the tensor-core kernels (bf16, fp16): one
 * trait per type with what differs between them, so that one kernel body
 * serves both (instantiated per type):
 *   mma      c += a·b, m16n8k16 fragments of T, fp32 accumulators
 *            (mma.sync ... f32.bf16.bf16.f32 / f32.f16.f16.f32);
 *   pack2    two floats rounded to a T pair (cvt.rn.bf16x2.f32 / cvt.rn.f16x2.f32);
 *   unpack2  a T pair to two floats (exact);
 *   ONES2    the packed pair (1.0, 1.0): 0x3f803f80 (bf16), 0x3c003c00 (fp16);
 *   round    a float rounded to T and back (the value the products see).
 * fp16 keeps 11 significant bits where bf16 keeps 8, but its largest finite
 * value is 65504: a value past it rounds to Inf (torch does the same), so the
 * kernels keep sums that can grow past it in fp32 or scale them (linfam_tc.cu).
 * The mma helpers are ptx.cuh's la_mma_bf16 / la_mma_f16 (which the host
 * emulators define themselves). */
#ifndef LA_CUDA_TC16_CUH
#define LA_CUDA_TC16_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "ptx.cuh"

template <typename T> struct la_t16;

template <> struct la_t16<__nv_bfloat16> {
    using T2 = __nv_bfloat162;
    static constexpr bool is_f16 = false;
    static constexpr uint32_t ONES2 = 0x3f803f80u;
    static __device__ __forceinline__ void mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
        la_mma_bf16(c, a, b0, b1);
    }
    static __device__ __forceinline__ T2 pack2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
    static __device__ __forceinline__ float2 unpack2(T2 x) { return __bfloat1622float2(x); }
    static __device__ __forceinline__ T2 splat(float x) { return __float2bfloat162_rn(x); }
    static __device__ __forceinline__ float round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
};

template <> struct la_t16<__half> {
    using T2 = __half2;
    static constexpr bool is_f16 = true;
    static constexpr uint32_t ONES2 = 0x3c003c00u;
    static __device__ __forceinline__ void mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
        la_mma_f16(c, a, b0, b1);
    }
    static __device__ __forceinline__ T2 pack2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
    static __device__ __forceinline__ float2 unpack2(T2 x) { return __half22float2(x); }
    static __device__ __forceinline__ T2 splat(float x) { return __float2half2_rn(x); }
    static __device__ __forceinline__ float round(float x) { return __half2float(__float2half_rn(x)); }
};

/* fp16's power-of-two scales (exact; the kernels undo them in fp32): the
 * exponent sh that puts mx·2^sh in [2^14, 2^15) (from mx's float exponent:
 * mx = m·2^ex, m in [0.5, 1) when normal), clamped to [lo, hi]; 0 for mx =
 * 0, Inf or NaN (the scale stays 1). la_pow2f(e) = 2^e, e in [-126, 127]. */
__device__ __forceinline__ int la_exp16(float mx, int lo, int hi) {
    if (!(mx > 0.f && mx <= 3.402823466e38f)) return 0;
    const int sh = 15 - (((__float_as_int(mx) >> 23) & 0xff) - 126);
    return sh < lo ? lo : sh > hi ? hi : sh;
}
__device__ __forceinline__ float la_pow2f(int e) { return __int_as_float((127 + e) << 23); }

#endif
