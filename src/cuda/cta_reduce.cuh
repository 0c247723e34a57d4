/* Reductions of one float over a CTA of NW warps: every thread passes its
 * own value and its thread index, every thread gets the result. red: NW
 * floats of shared memory that no thread touches meanwhile; it is written
 * before and read after the one barrier, so a second call needs other words
 * (or a barrier between). Included by the tensor-core kernels and their host
 * emulators (which define __syncthreads and the shuffles before it). */
#ifndef LA_CUDA_CTA_REDUCE_CUH
#define LA_CUDA_CTA_REDUCE_CUH

/* the largest value (fmaxf: a NaN is skipped) */
template <int NW> __device__ __forceinline__ float la_cta_max(float v, float *red, int tid) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (tid % 32 == 0) red[tid / 32] = v;
    __syncthreads();
    v = red[0];
#pragma unroll
    for (int w = 1; w < NW; w++) v = fmaxf(v, red[w]);
    return v;
}

/* the sum (the same order on every thread: one result) */
template <int NW> __device__ __forceinline__ float la_cta_sum(float v, float *red, int tid) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (tid % 32 == 0) red[tid / 32] = v;
    __syncthreads();
    v = red[0];
#pragma unroll
    for (int w = 1; w < NW; w++) v += red[w];
    return v;
}

#endif
