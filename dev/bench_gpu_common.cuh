/* Helpers shared by the GPU timing drivers dev/bench_gpu_*.cu (one translation
 * unit each; the device scripts tests/cuda/gpu_*.sh build them with
 *   nvcc -O2 -std=c++17 -Iinclude -Isrc dev/bench_gpu_X.cu build-gpu/liblongattn.a ...
 * and this header is found next to them by #include "bench_gpu_common.cuh").
 *
 *   CK(x) / LK(x)      exit(1) with a message on stderr when a CUDA call / a
 *                      library call fails. A driver that defines
 *                      BENCH_CK_WHERE before the include gets the
 *                      "CUDA <call> at file:line: <error>" / "<call> -> ..."
 *                      forms (bench_gpu_sparse, bench_gpu_smla).
 *   BW, FL             the byte and FLOP floors' ceilings: 4.2 TB/s, 760 TFLOP/s.
 *   fill_kernel        32-bit hash -> uniform bf16 in scale·[-1, 1) (linear,
 *                      causal, focused, softmax, decode); make() allocates n
 *                      bf16 and fills them with it.
 *   fill_bf16/f32/idx  splitmix64 hash -> uniform bf16 / f32 in
 *                      scale·√3·[-1, 1), row indices (sparse, smla).
 *   view()             la_tensor over device memory ([B,N,H,D] bf16, or any
 *                      dtype and rank ≤ 4).
 *   time_ms()          `warm` checked warm-up calls (default 3), then `reps`
 *                      calls each timed with CUDA events; the median.
 *   median_ms()        the same for a callable that checks itself (LK):
 *                      unchecked warm-ups + a device sync, then the median.
 *   event_times()      the timing loop under both: sorted per-call times.
 *   BCTX, bench_variant(family, variant)
 *                      the one context every library call of a driver uses,
 *                      and forcing a kernel variant on it (src/core/variant.h,
 *                      docs/CUDA.md's variant table; NULL: the default).
 *   host_to_bf16 / host_of_bf16
 *                      float <-> bf16 bits on the host (round to nearest even);
 *   xorshift_uniform   a seeded host generator of uniform(-1, 1) floats (the
 *                      drivers that fill host buffers to check against).
 *   bf16_pair          a [B,N,H,D] bf16 tensor on host and device (perm: stored
 *                      as [B,H,N,D]), filled from a generator or NaN-poisoned:
 *                      make_bf16_pair / free_bf16_pair.
 *   bench_pick(f)      the kernel variants one call of f takes, as the
 *                      selection functions report them on a verbose context
 *                      ("family:variant,..."): printed beside a timed row.
 */
#pragma once

#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include "longattn.h"
#include "core/variant.h"

/* The driver's context (created at first use, lives until exit). */
static la_context *bench_ctx() {
    static la_context *c = [] {
        la_context *x = nullptr;
        if (la_context_create(&x) != LA_OK) {
            fprintf(stderr, "la_context_create failed: %s\n", la_last_error());
            exit(1);
        }
        return x;
    }();
    return c;
}
#define BCTX bench_ctx()
/* Force `variant` of `family` on the driver's context (NULL: the default). */
static void bench_variant(const char *family, const char *variant) {
    if (la_context_set_variant(bench_ctx(), family, variant) != LA_OK) {
        fprintf(stderr, "la_context_set_variant(%s, %s): %s\n", family, variant ? variant : "NULL",
                la_last_error());
        exit(1);
    }
}

/* The variants one call of f takes: the driver's context is made verbose for
 * that call alone, and the selection functions' lines on stderr ("la: FAMILY:
 * VARIANT (...)", src/cuda/select.cuh) are caught in a temporary file.
 * Returns "family:variant" for each distinct pair, comma-separated, "-" when
 * none was reported, "refused" when the call failed (la_last_error() then
 * holds the library's message). Call it outside the timed loop. */
static inline uint16_t host_to_bf16(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
static inline float host_of_bf16(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}
struct xorshift_uniform {
    uint64_t s;
    float operator()() { /* uniform(-1, 1) */
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return (float)((s >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f;
    }
};

static inline std::string bench_pick(const std::function<la_status()> &f) {
    fflush(stderr);
    FILE *tmp = tmpfile();
    const int saved = tmp ? dup(2) : -1;
    if (saved < 0 || dup2(fileno(tmp), 2) < 0) {
        if (saved >= 0) close(saved);
        if (tmp) fclose(tmp);
        return "?";
    }
    la_context_set_verbose(bench_ctx(), 1);
    const la_status s = f();
    cudaDeviceSynchronize();
    la_context_set_verbose(bench_ctx(), 0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    std::string out;
    char line[512];
    while (fgets(line, sizeof line, tmp)) {
        char fam[64], var[64];
        if (strncmp(line, "la: ", 4) || sscanf(line + 4, "%63[^:]: %63s", fam, var) != 2) continue;
        const std::string one = std::string(fam) + ":" + var;
        if (("," + out + ",").find("," + one + ",") == std::string::npos) out += (out.empty() ? "" : ",") + one;
    }
    fclose(tmp);
    if (s != LA_OK) return "refused";
    return out.empty() ? "-" : out;
}

/* (the call's text is stringized by CK / LK themselves, before any macro in it expands) */
#ifdef BENCH_CK_WHERE
#define BENCH_CK_FAIL(xs, e_) \
    fprintf(stderr, "CUDA %s at %s:%d: %s\n", xs, __FILE__, __LINE__, cudaGetErrorString(e_))
#define BENCH_LK_FAIL(xs, s_) fprintf(stderr, "%s -> %s: %s\n", xs, la_status_string(s_), la_last_error())
#else
#define BENCH_CK_FAIL(xs, e_) fprintf(stderr, "%s: %s\n", xs, cudaGetErrorString(e_))
#define BENCH_LK_FAIL(xs, s_) fprintf(stderr, "%s: %s: %s\n", xs, la_status_string(s_), la_last_error())
#endif

#define CK(x)                          \
    do {                               \
        cudaError_t e_ = (x);          \
        if (e_ != cudaSuccess) {       \
            BENCH_CK_FAIL(#x, e_);     \
            exit(1);                   \
        }                              \
    } while (0)
#define LK(x)                          \
    do {                               \
        la_status s_ = (x);            \
        if (s_ != LA_OK) {             \
            BENCH_LK_FAIL(#x, s_);     \
            exit(1);                   \
        }                              \
    } while (0)

static constexpr double BW = 4.2e12, FL = 760e12;

/* ---- random inputs ---- */

__global__ void fill_kernel(__nv_bfloat16 *x, size_t n, unsigned seed, float scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    float u = (h & 0xffffff) / 16777216.f - 0.5f;
    x[i] = __float2bfloat16(u * 2.f * scale);
}

/* n bf16 on the device, filled by fill_kernel */

struct bf16_pair {
    std::vector<uint16_t> h;
    void *d = nullptr;
    la_tensor th, td;
};
static inline void make_bf16_pair(bf16_pair &p, int64_t B, int64_t N, int64_t H, int64_t D, bool perm,
                                  bool poison, xorshift_uniform &rng) {
    const size_t n = (size_t)(B * N * H * D);
    p.h.resize(n);
    for (size_t i = 0; i < n; i++) p.h[i] = poison ? 0xffffu : host_to_bf16(rng());
    CK(cudaMalloc(&p.d, n * 2 + 16));
    CK(cudaMemcpy(p.d, p.h.data(), n * 2, cudaMemcpyHostToDevice));
    const int64_t ne[4] = {B, N, H, D};
    int64_t nb[4] = {N * H * D, H * D, D, 1};
    if (perm) {
        nb[1] = D;
        nb[2] = N * D;
    }
    LK(la_tensor_init_strided(&p.th, p.h.data(), LA_BF16, LA_DEVICE_CPU, 4, ne, nb));
    LK(la_tensor_init_strided(&p.td, p.d, LA_BF16, LA_DEVICE_CUDA, 4, ne, nb));
}
static inline void free_bf16_pair(bf16_pair &p) { CK(cudaFree(p.d)); }

static inline __nv_bfloat16 *make(size_t n, unsigned seed, float scale = 1.f) {
    __nv_bfloat16 *p = nullptr;
    CK(cudaMalloc(&p, n * 2));
    fill_kernel<<<(unsigned)((n + 255) / 256), 256>>>(p, n, seed, scale);
    CK(cudaGetLastError());
    return p;
}

/* splitmix64 of element i; `full` = false stops after the first multiply
 * (fill_idx, fill_pos) */
__device__ __forceinline__ uint64_t bench_mix(size_t i, uint64_t seed, bool full = true) {
    uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    if (full) z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z;
}
/* the top 24 bits of z as a uniform float in [0, 1) (exact) */
__device__ __forceinline__ float bench_unit(uint64_t z) { return (z >> 40) * (1.0f / 16777216.0f); }

#define BENCH_GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)

/* bf16 (as raw uint16, round to nearest even) uniform in scale·√3·(-1, 1) */
__global__ void fill_bf16(uint16_t *p, size_t n, uint64_t seed, float scale) {
    BENCH_GRID_STRIDE(i, n) {
        float u = bench_unit(bench_mix(i, seed)) * 2.f - 1.f; /* uniform(-1,1) */
        float f = u * scale * 1.7320508f;
        uint32_t b = __float_as_uint(f);
        p[i] = (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    }
}
__global__ void fill_f32(float *p, size_t n, uint64_t seed, float scale) {
    BENCH_GRID_STRIDE(i, n) p[i] = (bench_unit(bench_mix(i, seed)) * 2.f - 1.f) * scale * 1.7320508f;
}
/* random rows of [0, L); holes: about 3% -1 and 1% = L (rows the kernels skip) */
__global__ void fill_idx(int32_t *p, size_t n, int64_t L, uint64_t seed, bool holes) {
    BENCH_GRID_STRIDE(i, n) {
        const uint64_t z = bench_mix(i, seed, false);
        const uint32_t u = (uint32_t)(z >> 40) % 100u;
        p[i] = holes && u < 3 ? -1 : holes && u < 4 ? (int32_t)L : (int32_t)(z % (uint64_t)L);
    }
}

/* ---- views ---- */

static inline la_tensor view(void *p, la_dtype dt, int nd, int64_t a, int64_t b, int64_t c, int64_t d) {
    la_tensor t;
    int64_t ne[4] = {a, b, c, d};
    la_tensor_init(&t, p, dt, LA_DEVICE_CUDA, nd, ne);
    return t;
}
/* [B,N,H,D] bf16, contiguous */
static inline la_tensor view(void *p, int64_t B, int64_t N, int64_t H, int64_t D) {
    return view(p, LA_BF16, 4, B, N, H, D);
}

/* ---- timing ---- */

/* `reps` calls of f (returns bool: false stops the loop after that call), each
 * between two CUDA events on the default stream; ts gets the times in ms,
 * sorted. Returns false when a call did. */
template <typename F>
static bool event_times(F &&f, int reps, std::vector<float> &ts) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    bool ok = true;
    for (int i = 0; i < reps && ok; i++) {
        CK(cudaEventRecord(a));
        ok = f();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return ok;
}

/* `warm` warm-up calls (NAN and a message if one fails), then the median of
 * `reps` event-timed calls */
static inline double time_ms(const std::function<la_status()> &f, int reps, int warm = 3) {
    for (int i = 0; i < warm; i++)
        if (f() != LA_OK) {
            fprintf(stderr, "call failed: %s\n", la_last_error());
            return NAN;
        }
    std::vector<float> ts;
    event_times([&] { f(); return true; }, reps, ts);
    CK(cudaDeviceSynchronize());
    return ts[ts.size() / 2];
}

/* f checks its own calls (LK): `warm` warm-ups, a device sync, then the
 * median of `iters` event-timed calls */
template <typename F>
static double median_ms(F &&f, int warm, int iters) {
    for (int i = 0; i < warm; i++) f();
    CK(cudaDeviceSynchronize());
    std::vector<float> t;
    event_times([&] { f(); return true; }, iters, t);
    return t[t.size() / 2];
}

/* f checks its own calls (LK): a device sync, then n calls back to back
 * between two events; the time per call (the host's launch and workspace
 * overhead overlaps the GPU here, while median_ms counts the host time
 * before the first kernel of each call) */
template <typename F>
static double batch_ms(F &&f, int n) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaDeviceSynchronize());
    CK(cudaEventRecord(e0));
    for (int r = 0; r < n; r++) f();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return ms / n;
}
