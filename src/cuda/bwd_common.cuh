/* Shared pieces of the portable CUDA backward engine (src/cuda/*_bwd.cu).
 *
 * Every portable backward kernel is written as "one thread per output item":
 * a 1-D launch over `total` items, each thread reads what earlier kernels
 * wrote and writes only its own item, looping over its reduction in a fixed
 * order. No shared memory, no barriers, no floating-point atomics, so the
 * results are deterministic (bit-identical across calls) and the same code
 * runs on the host for testing without a GPU (LA_BWD_EMU: the launch is a
 * loop over the items, workspace is malloc'ed; tests/cuda/emu_backward.sh).
 *
 * Inputs are gathered once into fp32 [B,H,N,D] buffers (any dtype, any
 * strides; feature maps applied on the way), the engines work on those, and
 * the gradients are scattered back to the caller's views in their dtype.
 *
 * Helpers duplicated here rather than added to common.cuh (which another
 * change is splitting): the view of a tensor as (b, n, h, d), the feature
 * map derivative, the workspace bundle. */
#ifndef LA_CUDA_BWD_COMMON_CUH
#define LA_CUDA_BWD_COMMON_CUH

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LA_BWD_EMU
/* host build for testing: the one device intrinsic common.cuh uses */
#include <cuda_runtime.h>
static inline float __int_as_float(int x) {
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}
/* ptx.cuh (included by common.cuh) does not compile on the host: kept out,
 * with host forms of the NaN-propagating max that common.cuh uses */
#define LA_CUDA_PTX_CUH
static inline float la_relu_nan(float x) { return x != x ? x : (x > 0.f ? x : 0.f); }
static inline float la_fmax_nan(float a, float b) { return a != a ? a : b != b ? b : (a > b ? a : b); }
#endif
#include "cuda/common.cuh"
#include "cuda/cuda_bwd.h"
#include "core/variant.h"
#include "cuda/select.cuh"

/* ---- launch: one thread per item ---------------------------------------- */
#ifdef LA_BWD_EMU
static thread_local int64_t bwd_emu_gid;
static inline int64_t bwd_gid(void) { return bwd_emu_gid; }
#define BWD_LAUNCH(kern, total, stream, ...)                                 \
    do {                                                                     \
        const int64_t bwd_total_ = (total);                                  \
        (void)(stream);                                                      \
        for (int64_t bwd_i_ = 0; bwd_i_ < bwd_total_; bwd_i_++) {            \
            bwd_emu_gid = bwd_i_;                                            \
            kern(bwd_total_, __VA_ARGS__);                                   \
        }                                                                    \
    } while (0)
#define BWD_DEV
#include "cuda/bwd_emu.cuh"
static inline int bwd_atomic_inc(int *p) { return (*p)++; }
#else
static __device__ __forceinline__ int64_t bwd_gid(void) {
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
#define BWD_LAUNCH(kern, total, stream, ...)                                          \
    do {                                                                              \
        const int64_t bwd_total_ = (total);                                           \
        if (bwd_total_ > 0) {                                                         \
            kern<<<(unsigned)((bwd_total_ + 127) / 128), 128, 0, (stream)>>>(bwd_total_, \
                                                                        __VA_ARGS__); \
            LA_CU_LAUNCH(#kern);                                                      \
        }                                                                             \
    } while (0)
#define BWD_DEV __device__
/* integer counter (exact, so the counts do not depend on the order) */
static __device__ __forceinline__ int bwd_atomic_inc(int *p) { return atomicAdd(p, 1); }
#endif

/* ---- views as (b, n, h, d) ------------------------------------------------ */
struct bwd_view {
    const void *data;
    int dt;
    int64_t s[4]; /* strides of b, n, h, d in elements */
};
/* [B,N,H,D] */
static inline bwd_view bwd_view4(const la_tensor *t) {
    bwd_view v;
    v.data = t ? t->data : nullptr;
    v.dt = t ? (int)t->dtype : 0;
    for (int i = 0; i < 4; i++) v.s[i] = t ? t->nb[i] : 0;
    return v;
}
/* [T,H,D] as b = 0, n = t */
static inline bwd_view bwd_view3(const la_tensor *t) {
    bwd_view v;
    v.data = t->data;
    v.dt = (int)t->dtype;
    v.s[0] = 0;
    v.s[1] = t->nb[0];
    v.s[2] = t->nb[1];
    v.s[3] = t->nb[2];
    return v;
}
/* One value per row, the last index 0: [B,N,H] as (b, n, h, 0) (softmax's lse,
 * linear attention's z [B,H,D] as (b, h, d, 0)), [T,H] as (0, t, h, 0)
 * (sparse attention's lse); NULL gives an empty view. */
static inline bwd_view bwd_view_rows(const la_tensor *t) {
    bwd_view v = {nullptr, 0, {0, 0, 0, 0}};
    if (!t) return v;
    v.data = t->data;
    v.dt = (int)t->dtype;
    for (int i = 0; i < t->ndim; i++) v.s[3 - t->ndim + i] = t->nb[i];
    return v;
}
/* [L,D] as b = 0, n = l, h = 0 */
static inline bwd_view bwd_view2(const la_tensor *t) {
    bwd_view v;
    v.data = t->data;
    v.dt = (int)t->dtype;
    v.s[0] = 0;
    v.s[1] = t->nb[0];
    v.s[2] = 0;
    v.s[3] = t->nb[1];
    return v;
}
static BWD_DEV inline int64_t bwd_off(const bwd_view &v, int64_t b, int64_t n, int64_t h,
                                      int64_t d) {
    return b * v.s[0] + n * v.s[1] + h * v.s[2] + d * v.s[3];
}
static BWD_DEV inline float bwd_ld(const bwd_view &v, int64_t b, int64_t n, int64_t h,
                                   int64_t d) {
    return la_cu_ld(v.data, v.dt, bwd_off(v, b, n, h, d));
}
static BWD_DEV inline void bwd_st(const bwd_view &v, int64_t b, int64_t n, int64_t h, int64_t d,
                                  float x) {
    la_cu_st((void *)v.data, v.dt, bwd_off(v, b, n, h, d), x);
}

/* Derivative of the feature maps of SPEC §2 (TRAINING.md §1: ReLU has 0 at
 * x <= 0; elu1 exp(x) for x < 0, 1 otherwise). */
static BWD_DEV inline float bwd_feature_grad(int f, float x) {
    switch (f) {
    case LA_FEATURE_IDENTITY: return 1.f;
    case LA_FEATURE_RELU:
    case LA_FEATURE_RELU_EPS:
    case LA_FEATURE_RELU1: return x > 0.f ? 1.f : 0.f;
    case LA_FEATURE_ELU1: return x >= 0.f ? 1.f : expf(x);
    }
    return 1.f;
}
static BWD_DEV inline float bwd_feature(int f, float x) {
    switch (f) {
    case LA_FEATURE_IDENTITY: return x;
    case LA_FEATURE_RELU: return fmaxf(x, 0.f);
    case LA_FEATURE_RELU_EPS: return fmaxf(x, 0.f) + 1e-6f;
    case LA_FEATURE_RELU1: return fmaxf(x, 0.f) + 1.f;
    case LA_FEATURE_ELU1: return x >= 0.f ? x + 1.f : expf(x);
    }
    return x;
}
#define BWD_NO_FEATURE (-1)

/* dst[((b*H + h)*N + n)*D + d] = post · φ(pre · src[b,n,h,d]) (f < 0: no φ). */
static __global__ void bwd_gather_kernel(int64_t total, bwd_view src, float *dst, int64_t N,
                                         int64_t H, int64_t D, int f, float pre, float post) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t d = i % D, n = (i / D) % N, h = (i / (D * N)) % H, b = i / (D * N * H);
    float x = bwd_ld(src, b, n, h, d) * pre;
    if (f >= 0) x = bwd_feature(f, x);
    dst[i] = post * x;
}
/* dst[b,n,h,d] = src[((b*H + h)*N + n)*D + d] · post · pre · φ'(pre · x[b,n,h,d])
 * (f < 0: dst = src · post). */
static __global__ void bwd_scatter_kernel(int64_t total, bwd_view dst, const float *src,
                                          bwd_view x, int64_t N, int64_t H, int64_t D, int f,
                                          float pre, float post) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t d = i % D, n = (i / D) % N, h = (i / (D * N)) % H, b = i / (D * N * H);
    float g = src[i] * post;
    if (f >= 0) g *= pre * bwd_feature_grad(f, pre * bwd_ld(x, b, n, h, d));
    bwd_st(dst, b, n, h, d, g);
}

/* ---- host side ------------------------------------------------------------ */
static inline cudaStream_t bwd_stream(const la_context *ctx) {
#ifdef LA_BWD_EMU
    (void)ctx;
    return (cudaStream_t)0;
#else
    return la_cu_stream(ctx);
#endif
}

/* Workspace: a list of fp32 buffers carved out of one pool allocation. */
#define BWD_MAX_BUFS 24
struct bwd_ws {
    size_t off[BWD_MAX_BUFS];
    float **dst[BWD_MAX_BUFS];
    int n = 0;
    size_t total = 0; /* floats */
    bool overflow = false;
#ifdef LA_BWD_EMU
    void *p = nullptr;
    ~bwd_ws() { free(p); }
#else
    la_cu_ws w;
#endif
    /* ask for a*b*c floats (rounded up to 64 floats) */
    void want(float **ptr, int64_t a, int64_t b = 1, int64_t c = 1) {
        if (n >= BWD_MAX_BUFS || a < 0 || b < 0 || c < 0) {
            overflow = true;
            return;
        }
        size_t ab, abc;
        if (la_mul_size((size_t)a, (size_t)b, &ab, "backward workspace") != LA_OK ||
            la_mul_size(ab, (size_t)c, &abc, "backward workspace") != LA_OK ||
            abc > ((size_t)1 << 50)) {
            overflow = true;
            return;
        }
        abc = (abc + 63) & ~(size_t)63;
        off[n] = total;
        dst[n] = ptr;
        n++;
        total += abc;
    }
    la_status alloc(cudaStream_t s, const char *what) {
        if (overflow)
            return la_err(LA_ERR_OVERFLOW, "%s: workspace size overflows", what);
        size_t bytes;
        LA_TRY(la_mul_size(total, sizeof(float), &bytes, what));
#ifdef LA_BWD_EMU
        (void)s;
        p = malloc(bytes ? bytes : 16);
        if (!p) return la_err(LA_ERR_NOMEM, "%s: workspace of %zu bytes", what, bytes);
        /* poison: a kernel that reads what nobody wrote shows up in the tests */
        for (size_t i = 0; i < total; i++) ((float *)p)[i] = __int_as_float(0x7fc00000);
        float *base = (float *)p;
#else
        LA_TRY(la_cu_ws_alloc(&w, bytes, s, what));
        float *base = (float *)w.p;
#endif
        for (int i = 0; i < n; i++) *dst[i] = base + off[i];
        return LA_OK;
    }
};

/* Copy a small host array of floats to a device buffer (stream ordered). */
static inline la_status bwd_upload(float *dst, const float *src, size_t n, cudaStream_t s) {
#ifdef LA_BWD_EMU
    (void)s;
    memcpy(dst, src, n * sizeof(float));
#else
    LA_CU(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, s));
#endif
    return LA_OK;
}
static inline la_status bwd_sync(cudaStream_t s) {
#ifdef LA_BWD_EMU
    (void)s;
#else
    LA_CU(cudaStreamSynchronize(s));
#endif
    return LA_OK;
}

/* Gather a [B,N,H,D] view into fp32 [B,H,N,D] with post·φ(pre·x). */
static inline la_status bwd_gather(cudaStream_t s, const bwd_view &src, float *dst, int64_t B,
                                   int64_t N, int64_t H, int64_t D, int f, float pre,
                                   float post) {
    BWD_LAUNCH(bwd_gather_kernel, B * N * H * D, s, src, dst, N, H, D, f, pre, post);
    return LA_OK;
}
static inline la_status bwd_scatter(cudaStream_t s, const bwd_view &dst, const float *src,
                                    const bwd_view &x, int64_t B, int64_t N, int64_t H,
                                    int64_t D, int f, float pre, float post) {
    BWD_LAUNCH(bwd_scatter_kernel, B * N * H * D, s, dst, src, x, N, H, D, f, pre, post);
    return LA_OK;
}

/* Any tensor of rank <= 4 as a padded 4-D view (leading extents 1). */
struct bwd_pad {
    bwd_view v;
    int64_t ne[4];
    int64_t count;
};
static inline bwd_pad bwd_pad_of(const la_tensor *t) {
    bwd_pad p;
    p.v.data = t->data;
    p.v.dt = (int)t->dtype;
    const int off = 4 - t->ndim;
    p.count = 1;
    for (int i = 0; i < 4; i++) {
        p.ne[i] = i < off ? 1 : t->ne[i - off];
        p.v.s[i] = i < off ? 0 : t->nb[i - off];
        p.count *= p.ne[i];
    }
    return p;
}
/* contiguous fp32 copy of a padded view, and back */
static __global__ void bwd_pack_kernel(int64_t total, bwd_view v, int64_t n1, int64_t n2,
                                       int64_t n3, float *dst) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t a3 = i % n3, a2 = (i / n3) % n2, a1 = (i / (n3 * n2)) % n1,
                  a0 = i / (n3 * n2 * n1);
    dst[i] = bwd_ld(v, a0, a1, a2, a3);
}
static __global__ void bwd_unpack_kernel(int64_t total, bwd_view v, int64_t n1, int64_t n2,
                                         int64_t n3, const float *src) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t a3 = i % n3, a2 = (i / n3) % n2, a1 = (i / (n3 * n2)) % n1,
                  a0 = i / (n3 * n2 * n1);
    bwd_st(v, a0, a1, a2, a3, src[i]);
}
static inline la_status bwd_pack(cudaStream_t s, const la_tensor *t, float *dst) {
    const bwd_pad p = bwd_pad_of(t);
    BWD_LAUNCH(bwd_pack_kernel, p.count, s, p.v, p.ne[1], p.ne[2], p.ne[3], dst);
    return LA_OK;
}
static inline la_status bwd_unpack(cudaStream_t s, const la_tensor *t, const float *src) {
    const bwd_pad p = bwd_pad_of(t);
    BWD_LAUNCH(bwd_unpack_kernel, p.count, s, p.v, p.ne[1], p.ne[2], p.ne[3], src);
    return LA_OK;
}

/* The family's forced variant: NULL/"portable" are the portable engine;
 * anything else is an unknown variant (select.cuh's LA_ERR_ARG). */
static inline la_status bwd_variant_portable(const la_context *ctx, const char *family) {
    const char *v = la_context_variant(ctx, family);
    if (!v || !strcmp(v, "portable")) return LA_OK;
    return la_cu_unknown_variant(family, v, "portable");
}

/* Block geometry of the linear / block engines: chunks of `chunk` tokens
 * (chunk > 0) or the boxes of a 3-D token grid n split into g blocks per
 * axis (SPEC §5.1: block beta covers [ceil(beta·n/g), ceil((beta+1)·n/g)),
 * tokens in raster order inside the box). */
struct lbk_geo {
    int64_t chunk, N;
    int64_t n[3], g[3];
};
struct lbk_box {
    int64_t lo[3], len[3], size;
};

static BWD_DEV inline lbk_box geo_box(const lbk_geo &G, int64_t b) {
    lbk_box x;
    if (G.chunk > 0) {
        x.lo[0] = x.lo[1] = 0;
        x.len[0] = x.len[1] = 1;
        x.lo[2] = b * G.chunk;
        x.len[2] = G.N - x.lo[2] < G.chunk ? G.N - x.lo[2] : G.chunk;
        x.size = x.len[2];
        return x;
    }
    int64_t beta[3];
    beta[2] = b % G.g[2];
    beta[1] = (b / G.g[2]) % G.g[1];
    beta[0] = b / (G.g[2] * G.g[1]);
    x.size = 1;
    for (int a = 0; a < 3; a++) {
        const int64_t lo = (beta[a] * G.n[a] + G.g[a] - 1) / G.g[a];
        const int64_t hi = ((beta[a] + 1) * G.n[a] + G.g[a] - 1) / G.g[a];
        x.lo[a] = lo;
        x.len[a] = hi - lo;
        x.size *= hi - lo;
    }
    return x;
}
/* token index of position w (raster order inside the box) */
static BWD_DEV inline int64_t geo_tok(const lbk_geo &G, const lbk_box &x, int64_t w) {
    const int64_t iw = w % x.len[2], ih = (w / x.len[2]) % x.len[1], it = w / (x.len[2] * x.len[1]);
    return ((x.lo[0] + it) * G.n[1] + x.lo[1] + ih) * G.n[2] + x.lo[2] + iw;
}
/* block of token t and its position inside the block */
static BWD_DEV inline int64_t geo_block(const lbk_geo &G, int64_t t, int64_t *pos, lbk_box *box) {
    if (G.chunk > 0) {
        const int64_t b = t / G.chunk;
        *pos = t % G.chunk;
        *box = geo_box(G, b);
        return b;
    }
    int64_t c[3];
    c[2] = t % G.n[2];
    c[1] = (t / G.n[2]) % G.n[1];
    c[0] = t / (G.n[2] * G.n[1]);
    int64_t beta[3];
    for (int a = 0; a < 3; a++) beta[a] = c[a] * G.g[a] / G.n[a];
    const int64_t b = (beta[0] * G.g[1] + beta[1]) * G.g[2] + beta[2];
    *box = geo_box(G, b);
    *pos = ((c[0] - box->lo[0]) * box->len[1] + (c[1] - box->lo[1])) * box->len[2] +
           (c[2] - box->lo[2]);
    return b;
}

/* ---- the linear / block engine (linblock_bwd.cu) ---------------------------
 * One engine for every linear-attention family: per (batch, head) the tokens
 * fall into M blocks; block summaries S_b = Σ k̃ vᵀ, z_b = Σ k̃ are mixed into
 * what block i's queries read:
 *   mixing W given:   Σ_b W[i,b] S_b over b (non-causal) or b < i (causal,
 *                     plus W[i,i] times the masked intra-block product);
 *   W NULL ("ones"):  non-causal Σ_b S_b; causal S_in + Σ_{b<i} S_b plus the
 *                     masked intra-block product (chunkwise linear attention).
 * Blocks are boxes of a 1-/2-/3-D grid (SPEC §5.1, raster order inside) or,
 * with chunk > 0, consecutive chunks of `chunk` tokens. */
struct lbk_problem {
    int64_t B, H, N, D, Dv;
    /* geometry */
    int64_t chunk;          /* > 0: blocks are chunks of this many tokens */
    int64_t n[3], g[3];     /* grid mode: token grid and block grid (3-D, leading 1s) */
    int64_t M;              /* number of blocks */
    int causal;
    /* mixing (device, fp32): W[h][i][b] at W + h*W_hs + i*W_ld + b; NULL = ones */
    const float *W;
    int64_t W_hs, W_ld, W_M; /* head stride (0 = shared), row stride, extent */
    int norm;               /* LA_MHLA_NORM_* (linear: PER_QUERY or NONE) */
    float eps;
    /* causal "ones" only: initial state [B*H][D*Dv + D] and final-state grad */
    const float *S_in;
    const float *dS_out;
    /* inputs: fp32 [B,H,N,D] / [B,H,N,Dv] */
    const float *qt, *kt, *v, *dO;
};
struct lbk_grads {
    float *dqt, *dkt, *dv;  /* fp32 [B,H,N,D] / [B,H,N,Dv] (required) */
    float *dW;              /* fp32, [W_h][W_M][W_M] contiguous (NULL = skip) */
    int64_t dW_heads;       /* 1 (shared) or H */
    float *dS_in;           /* causal ones: [B*H][D*Dv + D] (NULL = skip) */
};
la_status lbk_backward(const lbk_problem *p, const lbk_grads *g, cudaStream_t s);

/* ---- tensor-core path of the non-causal linear / MHLA backward --------------
 * (linblock_bwd_tc.cu) bf16 views with D = Dv in {64, 128}, unit inner
 * stride, 16-byte aligned rows; norm none or per_query. The same sums as
 * lbk_backward with the token-side products on mma.sync (bf16 operands,
 * fp32 accumulation) and the mixing products in fp32; every reduction in a
 * fixed order (no atomics). */
struct lbt_problem {
    const la_tensor *q, *k, *v, *d_out;
    la_tensor *dq, *dk, *dv;  /* NULL = skip */
    const la_tensor *mixing;  /* NULL: one block, ones (non-causal linear) */
    la_tensor *d_mixing;      /* NULL = skip */
    int64_t n[3], g[3], M;    /* grid geometry (3-D, leading 1s) */
    int feature, norm;
    float scale_q, eps;
    int variant; /* 0 or 1: `mma`; 2: `mma2` (the mixing products of linblock_bwd_mix2.cu) */
};
int lbt_eligible(const lbt_problem *p);
la_status lbt_backward(const lbt_problem *p, cudaStream_t s);

/* Variant choice of a family with a fast path and the portable engine:
 * *fast = 1 for the fast path (the default where `eligible`, or forced
 * "mma"), 0 for the portable engine; select.cuh's LA_ERR_ARG for an unknown
 * name and LA_ERR_UNSUPPORTED for "mma" forced where it does not apply
 * (`need` says what it needs; verbose names it when the portable engine runs). */
static inline la_status bwd_variant_pick(const la_context *ctx, const char *family,
                                         int eligible, const char *need, int *fast) {
    const char *v = la_context_variant(ctx, family);
    *fast = 0;
    if (v && strcmp(v, "portable") && strcmp(v, "mma"))
        return la_cu_unknown_variant(family, v, "mma, portable");
    if (v && !strcmp(v, "mma") && !eligible) return la_cu_variant_unsupported(family, "mma", need);
    *fast = eligible && !(v && !strcmp(v, "portable"));
    la_cu_report(ctx, family, *fast ? "mma" : "portable", "%s", *fast ? "fast path" : need);
    return LA_OK;
}

/* The default of the non-causal linear family's tensor-core paths: 1 `mma`,
 * 2 `mma2` */
#define LBT_DEFAULT_VARIANT 2
/* Variant choice of the non-causal linear family (linear_bwd, mhla_bwd):
 * *which = 0 portable, 1 mma, 2 mma2; the default is LBT_DEFAULT_VARIANT
 * where `eligible` (both tensor-core variants take the same problems), else
 * portable; errors and the verbose line as bwd_variant_pick. */
static inline la_status bwd_variant_pick_lbt(const la_context *ctx, const char *family,
                                             int eligible, const char *need, int *which) {
    static const char *const names[3] = {"portable", "mma", "mma2"};
    const char *v = la_context_variant(ctx, family);
    *which = 0;
    const int forced = v ? la_cu_variant_index(v, names, 3) : -1;
    if (v && forced < 0) return la_cu_unknown_variant(family, v, "mma, mma2, portable");
    if (forced > 0 && !eligible) return la_cu_variant_unsupported(family, v, need);
    *which = forced >= 0 ? forced : eligible ? LBT_DEFAULT_VARIANT : 0;
    la_cu_report(ctx, family, names[*which], "%s", *which ? "fast path" : need);
    return LA_OK;
}

/* ---- softmax tensor-core path (softmax_bwd_tc.cu) ------------------------ */
int la_softmax_bwd_tc_eligible(const la_tensor *q, const la_tensor *k, const la_tensor *v,
                               const la_tensor *d_out, const la_tensor *dq, const la_tensor *dk,
                               const la_tensor *dv);
la_status la_softmax_bwd_tc(const la_softmax_params *p, const la_tensor *q, const la_tensor *k,
                            const la_tensor *v, const la_tensor *out, const la_tensor *lse,
                            const la_tensor *d_out, la_tensor *dq, la_tensor *dk, la_tensor *dv,
                            la_context *ctx);

#endif
