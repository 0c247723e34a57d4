/* The feature maps of the linear family's tensor-core forward (linfam_tc.cu)
 * on 8 values of a 16-bit type T (bf16 or fp16, tc16.cuh) at a time: φ in
 * fp32 rounded back to T, or the relu family directly on T pairs. Included
 * by linfam_tc.cu and its host emulator (dev/emu_mhla_fwd.cpp). */
#ifndef LA_CUDA_LINFAM_TC_PHI_CUH
#define LA_CUDA_LINFAM_TC_PHI_CUH

#include "linfam.cuh"
#include "tc16.cuh"

namespace {

/* The five feature maps of SPEC §2 in one branch-light form (x = pre·input):
 *   x ≥ 0: x + c;   x < 0: x (identity), c (relu, relu_eps, relu1), e^x (elu1)
 * with c = 0, 0, 1e-6, 1, 1. la_cu_feature's switch per element compiled to
 * ~10 instructions and a branch per value, most of the summary kernel's
 * issued instructions. The mode is uniform, so one branch per 8 values
 * remains. */
struct lf_phimap {
    int mode; /* 0 identity, 1 relu family, 2 elu1 */
    float c, pre, post;
};
__device__ __forceinline__ lf_phimap lf_phi_of(const lf_feat &f) {
    lf_phimap r;
    r.pre = f.pre;
    r.post = f.post;
    switch (f.kind) {
    case LA_FEATURE_RELU: r.mode = 1; r.c = 0.f; break;
    case LA_FEATURE_RELU_EPS: r.mode = 1; r.c = 1e-6f; break;
    case LA_FEATURE_RELU1: r.mode = 1; r.c = 1.f; break;
    case LA_FEATURE_ELU1: r.mode = 2; r.c = 1.f; break;
    default: r.mode = 0; r.c = 0.f; break;
    }
    return r;
}
__device__ __forceinline__ void lf_phi8(float *x, const lf_phimap &f) {
    if (f.mode == 1) {
#pragma unroll
        for (int i = 0; i < 8; i++) x[i] = (la_relu_nan(x[i] * f.pre) + f.c) * f.post;
    } else if (f.mode == 2) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float y = x[i] * f.pre;
            x[i] = (y >= 0.f ? y + 1.f : expf(y)) * f.post;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) x[i] = x[i] * f.pre * f.post;
    }
}
/* The relu family with pre = post = 1 (the default feature map) directly on
 * bf16 (or fp16) pairs: max(x, 0) is exact in either type, and adding c to
 * such a value is one correctly rounded addition either way (fp16 adds keep
 * subnormals); 1 instruction per 2 values instead of ~6 per value through
 * fp32. The other maps (elu1, pre or post != 1) go through fp32. */
__device__ __forceinline__ bool lf_phi_bf16_ok(const lf_phimap &f) {
    return f.mode == 1 && f.pre == 1.f && f.post == 1.f;
}
template <typename T> __device__ __forceinline__ void lf_phi8_bf16(T *p, const lf_phimap &f) {
    using T2 = typename la_t16<T>::T2;
    uint4 u = *(const uint4 *)p;
    T2 *h2 = (T2 *)&u;
    const T2 z2 = la_t16<T>::splat(0.f), c2 = la_t16<T>::splat(f.c);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        h2[i] = __hmax2_nan(h2[i], z2); /* NaN propagates (torch.relu) */
        if (f.c != 0.f) h2[i] = __hadd2(h2[i], c2);
    }
    *(uint4 *)p = u;
}
/* φ applied in place to 8 values of T (fp32 math, rounded back to T). */
template <typename T> __device__ __forceinline__ void lf_phi8_inplace(T *p, const lf_phimap &f) {
    using T2 = typename la_t16<T>::T2;
    uint4 u = *(const uint4 *)p;
    const T2 *h2 = (const T2 *)&u;
    float x[8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 ff = la_t16<T>::unpack2(h2[i]);
        x[2 * i] = ff.x;
        x[2 * i + 1] = ff.y;
    }
    lf_phi8(x, f);
    *(uint4 *)p = lf_x8<T>::pack(x); /* linfam.cuh */
}

}  // namespace

#endif
