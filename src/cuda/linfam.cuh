/* The linear-attention engine shared by linear.cu, mhla.cu and focused.cu.
 *
 * Every operator of the family is one instance of
 *     S_b = Σ_{j∈b} φk(k_j) v_jᵀ,  z_b = Σ_{j∈b} φk(k_j)      (block summaries, fp32)
 *     P_i = Σ_b W[i,b] S_b   (non-causal: all b; causal: b < i, plus the open chunk)
 *     o_t = φq(q_t)ᵀ P_i  [/ (φq(q_t)ᵀ z̃_i · a + eps)]
 * with linear attention as one block and W = 1 (non-causal) or a prefix sum
 * (causal, W = 1 below the diagonal, with an optional state (S, z) in/out).
 *
 * Passes (all on the context's stream, no synchronization):
 *   1. summary: per (head, block segment, 64×64 tile of d×dv) partial S and z;
 *   2. mix:     P = W · partials (a small batched GEMM; the sum of a block's
 *               segments is folded into it), or the causal prefix scan;
 *   3. output:  per (head, 64-token tile, 64-column tile of dv): φq(Q) P_i,
 *               plus the masked intra-chunk term in causal mode.
 * linfam_portable.cu runs them on CUDA cores in fp32 (any D, Dv, strides and
 * dtypes); linfam_tc.cu on tensor cores (non-causal, head dims of
 * lf_tc_dims, bf16 or fp16 rows contiguous). */
#ifndef LA_CUDA_LINFAM_CUH
#define LA_CUDA_LINFAM_CUH

#include "common.cuh"

/* LF_FEAT_FLATTEN: focused flatten's φ on the portable path */
enum { LF_FEAT_FLATTEN = 100 };

/* φ(x) = feature(pre·x)·post, or (kind LF_FEAT_FLATTEN) the focused map
 * (x'·tok_m[b·N+t])^p · tok_r[b·N+t] with x' = (relu(x)+1e-6)·inv_sp[c],
 * tok_m = 1/max_c x' and tok_r = ‖x'‖/‖(x'·tok_m)^p‖ (focused.cu computes them). */
struct lf_feat {
    int kind;
    float pre, post;
    float p;
    const float *inv_sp; /* [H*D], device */
    const float *tok_r;  /* [B*N], device */
    const float *tok_m;  /* [B*N], device */
};

enum { LF_NORM_PER_QUERY = 0, LF_NORM_NONE = 1, LF_NORM_RELEASED_VISION = 2 };

struct lf_problem {
    int64_t B, N, H, D, Dv;
    la_cu_view q, k, v, out; /* [B,N,H,D] views */
    lf_feat fq, fk;
    /* token grid, always 3 axes (1-D = {1,1,N}); blocks per axis */
    int64_t n[3], g[3];
    int64_t chunk;           /* > 0: causal, 1-D chunks of this many tokens */
    int use_w;               /* 0: every weight is 1 (linear attention)     */
    la_cu_view W;            /* nb[0] per head (0 if shared), nb[1] row, nb[2] col */
    int norm;                /* LF_NORM_*                                   */
    float eps, den_scale;    /* o = num·a/(den·a + eps), a = den_scale      */
    la_cu_view S_in, z_in, S_out, z_out; /* causal linear state; data NULL = absent */
    /* focused flatten: o += DWC(v), one [Dv,k,k] kernel (conv, nb[0..2]) shared
     * by the heads over the map_h × map_w map, plus bias [Dv]; data NULL = none */
    la_cu_view conv, bias;
    int64_t ksize, map_h, map_w;
};

/* Head dims the tensor-core path is instantiated for: D, Dv ∈ {32, 64, 128}
 * with D = Dv, or (D, Dv) = (64, 128), (128, 64). */
static inline bool lf_tc_dims(int64_t D, int64_t Dv) {
    return (D == Dv && (D == 32 || D == 64 || D == 128)) || (D == 64 && Dv == 128) ||
           (D == 128 && Dv == 64);
}
/* The engine's kernels for P: the bf16 tensor-core path (tf32 mix of fp32
 * partials), the portable fp32 engine, or the tensor-core path with bf16
 * block summaries and a bf16 mixing GEMM (MHLA; linfam_tc_bf16s.cu). */
enum lf_kernel { LF_TC = 0, LF_PORTABLE = 1, LF_TC_BF16S = 2 };
/* Selection (pure): `forced` is the context's variant for `family` ("linear",
 * "mhla", "focused"; NULL = the default); maxcnt: tokens per block. */
la_status lf_select(const lf_problem *P, int64_t maxcnt, const char *family, const char *forced,
                    lf_kernel *kern);
/* Selects (as lf_select), reports the choice when ctx is verbose, runs the
 * passes on st. */
la_status lf_run(const lf_problem *P, const la_context *ctx, const char *family,
                 const char *forced, cudaStream_t st);

/* Flatten's φ (SPEC §4a) for 8 channels of one token on the fast path
 * (focused.cu's φ pass, which materializes φ(Q), φ(K)) in the inputs' 16-bit
 * type T (bf16 or fp16): u = (relu(x) + 1e-6)·inv_sp·tok_m ∈ (0, 1],
 * φ = u^p·tok_r. lf_x8<T>: 8 values of T to fp32 (exact) and back (rounded
 * to nearest even). */
template <typename T> struct lf_x8;
template <> struct lf_x8<__nv_bfloat16> {
    static __device__ __forceinline__ void unpack(const uint4 &u, float *x) {
        const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&u;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 f = __bfloat1622float2(h2[i]);
            x[2 * i] = f.x;
            x[2 * i + 1] = f.y;
        }
    }
    static __device__ __forceinline__ uint4 pack(const float *x) {
        uint4 u;
        __nv_bfloat162 *h2 = (__nv_bfloat162 *)&u;
#pragma unroll
        for (int i = 0; i < 4; i++) h2[i] = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);
        return u;
    }
};
template <> struct lf_x8<__half> {
    static __device__ __forceinline__ void unpack(const uint4 &u, float *x) {
        const __half2 *h2 = (const __half2 *)&u;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 f = __half22float2(h2[i]);
            x[2 * i] = f.x;
            x[2 * i + 1] = f.y;
        }
    }
    static __device__ __forceinline__ uint4 pack(const float *x) {
        uint4 u;
        __half2 *h2 = (__half2 *)&u;
#pragma unroll
        for (int i = 0; i < 4; i++) h2[i] = __floats2half2_rn(x[2 * i], x[2 * i + 1]);
        return u;
    }
};
/* x' = (relu(x) + 1e-6)·inv_sp·scale for the 8 channels of a chunk (isp8:
 * 16-B aligned, shared or global memory). */
template <typename T>
static __device__ __forceinline__ void lf_flat_xprime8(const uint4 &raw, const float *isp8, float scale,
                                                       float *x) {
    lf_x8<T>::unpack(raw, x);
    const float4 s0 = *(const float4 *)isp8, s1 = *(const float4 *)(isp8 + 4);
    const float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
#pragma unroll
    for (int e = 0; e < 8; e++) x[e] = (la_relu_nan(x[e]) + 1e-6f) * s[e] * scale;
}
/* u^p for u in (0, 1]: integer p ≤ 8 by multiplication (ip > 0), else powf. */
static __device__ __forceinline__ float lf_flat_pow(float u, int ip, float p) {
    if (ip == 3) return u * u * u;
    if (ip > 0) {
        float r = u;
        for (int e = 1; e < ip; e++) r *= u;
        return r;
    }
    return powf(u, p);
}
/* ip of lf_flat_pow: p itself when it is an integer in [1, 8], else 0 */
static __device__ __forceinline__ int lf_flat_ip(float p) {
    return (p == floorf(p) && p >= 1.f && p <= 8.f) ? (int)p : 0;
}
/* φ of 8 raw values of T, rounded to T */
template <typename T>
static __device__ __forceinline__ uint4 lf_flat_phi8(const uint4 &raw, const float *isp8, float tok_m,
                                                     float tok_r, int ip, float p) {
    float v[8];
    lf_flat_xprime8<T>(raw, isp8, tok_m, v);
#pragma unroll
    for (int e = 0; e < 8; e++) v[e] = lf_flat_pow(v[e], ip, p) * tok_r;
    return lf_x8<T>::pack(v);
}

/* Extents and views of q, k [B,N,H,D], v and out [B,N,H,Dv] into P. */
static inline void lf_set_qkvo(lf_problem *P, const la_tensor *q, const la_tensor *k,
                               const la_tensor *v, const la_tensor *out) {
    P->B = q->ne[0];
    P->N = q->ne[1];
    P->H = q->ne[2];
    P->D = q->ne[3];
    P->Dv = v->ne[3];
    P->q = la_cu_view_of(q);
    P->k = la_cu_view_of(k);
    P->v = la_cu_view_of(v);
    P->out = la_cu_view_of(out);
}

#endif
