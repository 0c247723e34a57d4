/* Timing and agreement driver of the causal linear attention backward on
 * CUDA (issue 14's row: bf16, B1 H12 D128, N = 32K), for the GPU machine:
 *   make BUILD=build-gpu build-gpu/dev/cuda/linear_causal_bwd
 *   build-gpu/dev/cuda/linear_causal_bwd [reps] [N] [D]
 * For (identity, no normalize, scale 1/sqrt(D)) and (elu1, normalize): the
 * forward (la_linear_attention), the backward through la_linear_backward
 * with the family "linear_bwd" forced to "mma" (medians of reps, CUDA
 * events) and to "portable" (one call); the mma gradients against the
 * portable engine's (relative Frobenius; the bf16 outputs of two different
 * summation orders), a second mma call bit-identical. Exit status 1 when a
 * call fails, the agreement is worse than 1e-2 or the repeat differs. */
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "longattn.h"
#include "core/variant.h"

#define CK(x)                                                                        \
    do {                                                                             \
        cudaError_t e_ = (x);                                                        \
        if (e_ != cudaSuccess) {                                                     \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                 \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint16_t rand_bf16(void) { /* uniform [-1, 1), rounded to bf16 */
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    float f = (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f;
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static la_tensor dev_bf16(int64_t B, int64_t N, int64_t H, int64_t D, bool random) {
    const size_t n = (size_t)(B * N * H * D);
    void *d = nullptr;
    CK(cudaMalloc(&d, n * 2));
    if (random) {
        std::vector<uint16_t> h(n);
        for (auto &x : h) x = rand_bf16();
        CK(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice));
    } else {
        CK(cudaMemset(d, 0xff, n * 2)); /* NaN bytes */
    }
    la_tensor t;
    const int64_t ne[4] = {B, N, H, D};
    la_tensor_init(&t, d, LA_BF16, LA_DEVICE_CUDA, 4, ne);
    return t;
}
static std::vector<uint16_t> down(const la_tensor &t) {
    size_t n = 1;
    for (int i = 0; i < 4; i++) n *= (size_t)t.ne[i];
    std::vector<uint16_t> h(n);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h.data(), t.data, n * 2, cudaMemcpyDeviceToHost));
    return h;
}
static double rel(const std::vector<uint16_t> &a, const std::vector<uint16_t> &r) {
    double e = 0, s = 0;
    for (size_t i = 0; i < a.size(); i++) {
        const double x = bf2f(a[i]), y = bf2f(r[i]);
        e += (x - y) * (x - y);
        s += y * y;
    }
    return (e == e) ? sqrt(e / (s > 0 ? s : 1)) : INFINITY;
}
template <class F> static double time_ms(F f, int reps) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> ts;
    for (int r = 0; r < reps + 1; r++) { /* the first call warms up */
        CK(cudaEventRecord(a));
        if (f() != LA_OK) {
            fprintf(stderr, "call failed: %s\n", la_last_error());
            exit(1);
        }
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (r) ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 20;
    const int64_t N = argc > 2 ? atoll(argv[2]) : 32768, D = argc > 3 ? atoll(argv[3]) : 128;
    const int64_t B = 1, H = 12;
    la_tensor q = dev_bf16(B, N, H, D, true), k = dev_bf16(B, N, H, D, true);
    la_tensor v = dev_bf16(B, N, H, D, true), g = dev_bf16(B, N, H, D, true);
    la_tensor o = dev_bf16(B, N, H, D, false);
    la_tensor dq = dev_bf16(B, N, H, D, false), dk = dev_bf16(B, N, H, D, false),
              dv = dev_bf16(B, N, H, D, false);
    la_context *mma = nullptr, *port = nullptr;
    la_context_create(&mma);
    la_context_create(&port);
    la_context_set_variant(mma, "linear_bwd", "mma");
    la_context_set_variant(port, "linear_bwd", "portable");
    int bad = 0;
    for (int mode = 0; mode < 2; mode++) {
        la_linear_params p;
        la_linear_params_init(&p);
        p.causal = 1;
        p.feature = mode ? LA_FEATURE_ELU1 : LA_FEATURE_IDENTITY;
        p.normalize = mode;
        p.scale_q = 1.f / sqrtf((float)D);
        const double fwd = time_ms([&] { return la_linear_attention(&p, &q, &k, &v, &o, NULL, NULL, NULL, NULL, mma); }, reps);
        auto bwd = [&](la_context *c) {
            return la_linear_backward(&p, &q, &k, &v, &o, NULL, NULL, &g, NULL, NULL, &dq, &dk, &dv,
                                      NULL, NULL, c);
        };
        const double tb = time_ms([&] { return bwd(mma); }, reps);
        std::vector<uint16_t> m[3] = {down(dq), down(dk), down(dv)};
        CK(cudaMemset(dq.data, 0xff, (size_t)(B * N * H * D) * 2));
        if (bwd(mma) != LA_OK) bad++;
        const bool same = down(dq) == m[0];
        const double tp = time_ms([&] { return bwd(port); }, 1);
        std::vector<uint16_t> r[3] = {down(dq), down(dk), down(dv)};
        double e[3];
        for (int i = 0; i < 3; i++) e[i] = rel(m[i], r[i]);
        const bool ok = same && e[0] < 1e-2 && e[1] < 1e-2 && e[2] < 1e-2;
        bad += !ok;
        printf("linear causal B%lld N%lld H%lld D%lld %s: fwd %.3f ms, bwd mma %.3f ms "
               "(fwd+bwd %.3f), portable %.1f ms; mma vs portable dq %.2g dk %.2g dv %.2g, "
               "repeat %s %s\n",
               (long long)B, (long long)N, (long long)H, (long long)D,
               mode ? "elu1 normalize" : "identity", fwd, tb, fwd + tb, tp, e[0], e[1], e[2],
               same ? "bit-identical" : "DIFFERS", ok ? "ok" : "FAIL");
        fflush(stdout);
    }
    la_context_destroy(mma);
    la_context_destroy(port);
    return bad != 0;
}
