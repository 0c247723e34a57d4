/* Shared helpers of the CUDA backend: error checking, element loads/stores on
 * strided views of any float dtype, the stream of a context, stream-ordered
 * workspace. Internal; included by src/cuda/*.cu only. */
#ifndef LA_CUDA_COMMON_CUH
#define LA_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "core/internal.h"
#include "ptx.cuh"

/* Turn a CUDA error into LA_ERR_DEVICE with the CUDA error string and the
 * call site; returns from the enclosing function (which returns la_status). */
#define LA_CU(call)                                                                  \
    do {                                                                             \
        cudaError_t la_cu_e_ = (call);                                               \
        if (la_cu_e_ != cudaSuccess)                                                 \
            return la_err(LA_ERR_DEVICE, "CUDA: %s (%s) at %s:%d", #call,            \
                          cudaGetErrorString(la_cu_e_), __FILE__, __LINE__);         \
    } while (0)

/* After a kernel launch: catch launch-configuration errors (no sync). */
#define LA_CU_LAUNCH(what)                                                           \
    do {                                                                             \
        cudaError_t la_cu_e_ = cudaGetLastError();                                   \
        if (la_cu_e_ != cudaSuccess)                                                 \
            return la_err(LA_ERR_DEVICE, "CUDA: launch of %s failed (%s)", what,     \
                          cudaGetErrorString(la_cu_e_));                             \
    } while (0)

static inline cudaStream_t la_cu_stream(const la_context *ctx) {
    return ctx ? (cudaStream_t)ctx->cuda_stream : (cudaStream_t)0;
}

/* Compute capability of the current device as 10 * major + minor (0 when it
 * cannot be read), cached in the context per device (cuda_arch_cache); with
 * ctx NULL it is asked every time (two cheap host-side queries). */
static inline int la_cu_cc(const la_context *ctx) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (ctx) {
        const int c = __atomic_load_n(&ctx->cuda_arch_cache, __ATOMIC_RELAXED);
        if (c && (c >> 10) == dev + 1) return c & 1023;
    }
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    const int cc = 10 * major + minor;
    if (ctx)
        __atomic_store_n(&((la_context *)ctx)->cuda_arch_cache, ((dev + 1) << 10) | cc,
                         __ATOMIC_RELAXED);
    return cc;
}
/* Whether the Hopper-only kernels (ptx.cuh, LA_CU_SM90_CODE) may run: the
 * library has their sm_90a build (the Makefile defines LA_CUDA_HAVE_SM90A
 * unless CUDA_ARCH=ptx80) and the device is sm_90, the one that loads it. */
static inline bool la_cu_hopper(const la_context *ctx) {
#if defined(LA_CUDA_HAVE_SM90A)
    return la_cu_cc(ctx) == 90;
#else
    (void)ctx;
    return false;
#endif
}

/* The dynamic shared-memory limit of kernel `fn` (cudaFuncAttributeMax-
 * DynamicSharedMemorySize), raised before its launch with `need` bytes. The
 * attribute is set to `cap` (the kernel's largest requirement: a constant
 * per kernel, so no call ever lowers what another one set; cap = need for
 * a kernel of fixed size), with carveout_max also its preferred carveout to
 * the most shared memory, once per context and device: the context
 * remembers it (la_context.cuda_attr_*) and later calls skip the driver
 * calls. Where cap does not fit the device, `need` is set on every call, as
 * with ctx NULL. (A cudaDeviceReset forgets the attributes but not the
 * context's record: use a new context after one.) */
la_status la_cu_func_smem(const la_context *ctx, const void *fn, size_t need, size_t cap,
                          bool carveout_max);

/* ---- element access on device -------------------------------------------
 * A view as the kernels see it: base pointer, dtype, strides in elements. */
struct la_cu_view {
    const void *data;
    int dt;           /* la_dtype */
    int64_t nb[4];
};

static inline la_cu_view la_cu_view_of(const la_tensor *t) {
    la_cu_view v;
    v.data = t ? t->data : nullptr;
    v.dt = t ? (int)t->dtype : 0;
    for (int i = 0; i < 4; i++) v.nb[i] = (t && i < t->ndim) ? t->nb[i] : 0;
    return v;
}

__device__ __forceinline__ float la_cu_ld(const void *p, int dt, int64_t off) {
    switch (dt) {
    case LA_F32: return ((const float *)p)[off];
    case LA_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[off]);
    case LA_F64: return (float)((const double *)p)[off];
    case LA_F16: return __half2float(((const __half *)p)[off]);
    default: return __int_as_float(0x7fc00000);
    }
}
__device__ __forceinline__ void la_cu_st(void *p, int dt, int64_t off, float x) {
    switch (dt) {
    case LA_F32: ((float *)p)[off] = x; break;
    case LA_BF16: ((__nv_bfloat16 *)p)[off] = __float2bfloat16_rn(x); break;
    case LA_F64: ((double *)p)[off] = (double)x; break;
    case LA_F16: ((__half *)p)[off] = __float2half_rn(x); break;
    default: break;
    }
}
__device__ __forceinline__ float la_cu_ld4(const la_cu_view &v, int64_t i0, int64_t i1,
                                           int64_t i2, int64_t i3) {
    return la_cu_ld(v.data, v.dt, i0 * v.nb[0] + i1 * v.nb[1] + i2 * v.nb[2] + i3 * v.nb[3]);
}

/* Feature maps of SPEC §2 (same formulas as la_feature_apply; NaN
 * propagates, as torch.relu does). */
__device__ __forceinline__ float la_cu_feature(int f, float x) {
    switch (f) {
    case LA_FEATURE_IDENTITY: return x;
    case LA_FEATURE_RELU: return la_relu_nan(x);
    case LA_FEATURE_RELU_EPS: return la_relu_nan(x) + 1e-6f;
    case LA_FEATURE_RELU1: return la_relu_nan(x) + 1.f;
    case LA_FEATURE_ELU1: return x >= 0.f ? x + 1.f : expf(x);
    }
    return x;
}

static inline int64_t la_cu_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Stream-ordered device workspace (cudaMallocAsync: no synchronization). */
struct la_cu_ws {
    void *p = nullptr;
    cudaStream_t s = 0;
    ~la_cu_ws() {
        if (p) cudaFreeAsync(p, s);
    }
};
/* The library's stream-ordered pool of the current device (devmem.cu):
 * created once per device, keeps up to LA_CUDA_POOL_KEEP_MB (default 1024)
 * MiB mapped across synchronizations. With the default pool's release
 * threshold of 0, every synchronization hands the workspace back to the OS
 * and the next call maps it again (a gap between a call and its kernels:
 * docs/CUDA.md, Memory). NULL: use the
 * device's current pool (also with LA_CUDA_POOL=default). */
cudaMemPool_t la_cu_pool(void);
/* Attribute attr of the current device (the SM count, the opt-in shared
 * memory per CTA, ...), or fallback when the query fails or answers <= 0.
 * A cheap host-side query, asked per call: a cached value would answer the
 * first device's for every device. */
int la_cu_device_attr(cudaDeviceAttr attr, int fallback);
static inline la_status la_cu_ws_alloc(la_cu_ws *w, size_t bytes, cudaStream_t s,
                                       const char *what) {
    w->s = s;
    if (bytes == 0) bytes = 16;
    cudaMemPool_t pool = la_cu_pool();
    cudaError_t e = pool ? cudaMallocFromPoolAsync(&w->p, bytes, pool, s)
                         : cudaMallocAsync(&w->p, bytes, s);
    if (e != cudaSuccess) {
        w->p = nullptr;
        cudaGetLastError();
        return la_err(e == cudaErrorMemoryAllocation ? LA_ERR_NOMEM : LA_ERR_DEVICE,
                      "CUDA workspace for %s (%zu bytes): %s", what, bytes,
                      cudaGetErrorString(e));
    }
    return LA_OK;
}

/* Programmatic dependent launch (sm_90): a kernel launched with
 * la_cu_launch_pdl may be scheduled while the previous kernel of its stream
 * is finishing; la_pdl_wait, first in its body, returns once that kernel has
 * completed and its memory is visible (a no-op for a normal launch and
 * before sm_90), and la_pdl_launch_dependents lets the next such kernel be
 * scheduled once every CTA of this one has run it. The saving is the
 * launch latency between the short kernels of one call. */
__device__ __forceinline__ void la_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void la_pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
#ifdef __CUDACC__ /* host-compiled emulators (dev/emu_*.cpp) include this header */
template <typename... KArgs, typename... Args>
static inline cudaError_t la_cu_launch_pdl(bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                           cudaStream_t s, Args... args) {
    if (!pdl) {
        kernel<<<grid, block, smem, s>>>(args...);
        return cudaSuccess;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kernel, (KArgs)args...);
}
#endif

#endif
