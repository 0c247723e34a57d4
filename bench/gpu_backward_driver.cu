/* Timing driver of the CUDA backward passes for bench/gpu_backward.py: builds
 * bf16 inputs on the device, runs the library's forward (public API) and the
 * CUDA backward entry point (src/cuda/cuda_bwd.h: the ops layer that will
 * dispatch la_<op>_backward to it lives on another branch), and prints one
 * JSON line per workload: forward and backward medians (CUDA events around
 * the call) and the backward's peak workspace (the library pool's high-water
 * mark).
 *   build-gpu/gpu_backward_driver WORKLOAD [reps]
 * WORKLOAD: softmax8k softmax8k_causal softmax32k softmax32k_causal linear_causal32k
 *           linear_causal32k_norm (elu1, normalize) mhla_causal32k (relu, chunk 64,
 *           M = 512, normalize none) mhla_wan mhla_1d64k
 *           focused128 sparse256 sparse4k sparse4k_portable sparse4k_atomic */
#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "cuda/common.cuh"
#include "core/variant.h"
#include "cuda/cuda_bwd.h"

static std::vector<void *> g_bufs;
static la_tensor dev_tensor(int ndim, const int64_t *ne, la_dtype dt, float scale, unsigned seed,
                            bool random = true) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= ne[i];
    const size_t es = la_dtype_size(dt);
    void *d = nullptr;
    cudaMalloc(&d, (size_t)n * es);
    g_bufs.push_back(d);
    if (random) {
        std::vector<unsigned char> h((size_t)n * es);
        unsigned s = seed * 2654435761u + 12345u;
        for (int64_t i = 0; i < n; i++) {
            s = s * 1664525u + 1013904223u;
            float f = ((float)(s >> 8) / 16777216.f * 2.f - 1.f) * scale;
            if (dt == LA_BF16) {
                __nv_bfloat16 b = __float2bfloat16(f);
                memcpy(&h[(size_t)i * 2], &b, 2);
            } else {
                memcpy(&h[(size_t)i * 4], &f, 4);
            }
        }
        cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice);
    } else {
        cudaMemset(d, 0, (size_t)n * es);
    }
    la_tensor t;
    la_tensor_init(&t, d, dt, LA_DEVICE_CUDA, ndim, ne);
    return t;
}

template <class F> static double time_ms(F f, int reps, la_status *st) {
    std::vector<float> ms;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    *st = f(); /* warm-up */
    cudaDeviceSynchronize();
    for (int r = 0; r < reps && *st == LA_OK; r++) {
        cudaEventRecord(a);
        *st = f();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float x;
        cudaEventElapsedTime(&x, a, b);
        ms.push_back(x);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (ms.empty()) return -1;
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}
static void pool_reset() {
    cudaMemPool_t p = la_cu_pool();
    if (!p) return;
    unsigned long long z = 0;
    cudaMemPoolSetAttribute(p, cudaMemPoolAttrUsedMemHigh, &z);
}
static double pool_peak_mb() {
    cudaMemPool_t p = la_cu_pool();
    if (!p) return -1;
    unsigned long long v = 0;
    cudaMemPoolGetAttribute(p, cudaMemPoolAttrUsedMemHigh, &v);
    return (double)v / 1048576.0;
}
static void report(const char *name, double fwd, double bwd, double peak, double flop_bwd,
                   la_status st) {
    printf("{\"name\": \"%s\", \"status\": \"%s\", \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, "
           "\"peak_ws_mb\": %.1f, \"bwd_tflops\": %.2f, \"error\": \"%s\"}\n",
           name, la_status_string(st), fwd, bwd, peak,
           (flop_bwd > 0 && bwd > 0) ? flop_bwd / (bwd * 1e9) : 0.0,
           st == LA_OK ? "" : la_last_error());
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *w = argv[1];
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    la_context *ctx;
    la_context_create(&ctx);
    la_status st = LA_OK, st2 = LA_OK;
    double fwd = -1, bwd = -1, peak = -1, flop = 0;
    const int64_t B = 1, H = 12, D = 128;
    if (!strncmp(w, "softmax", 7)) {
        const int64_t N = strstr(w, "32k") ? 32768 : 8192;
        const int causal = strstr(w, "causal") != nullptr;
        int64_t ne[4] = {B, N, H, D}, nl[3] = {B, N, H};
        la_tensor q = dev_tensor(4, ne, LA_BF16, 1, 1), k = dev_tensor(4, ne, LA_BF16, 1, 2),
                  v = dev_tensor(4, ne, LA_BF16, 1, 3), go = dev_tensor(4, ne, LA_BF16, 1, 4);
        la_tensor o = dev_tensor(4, ne, LA_BF16, 0, 0, false), l = dev_tensor(3, nl, LA_F32, 0, 0, false);
        la_tensor dq = dev_tensor(4, ne, LA_BF16, 0, 0, false), dk = dev_tensor(4, ne, LA_BF16, 0, 0, false),
                  dv = dev_tensor(4, ne, LA_BF16, 0, 0, false);
        la_softmax_params p;
        la_softmax_params_init(&p);
        p.causal = causal;
        fwd = time_ms([&] { return la_softmax_attention(&p, &q, &k, &v, &o, &l, ctx); }, reps, &st);
        pool_reset();
        bwd = time_ms([&] { return la_softmax_backward_cuda(&p, &q, &k, &v, &o, &l, &go, &dq, &dk, &dv, ctx); },
                      reps, &st2);
        peak = pool_peak_mb();
        flop = 2.5 * 4.0 * B * H * (double)N * N * D * (causal ? 0.5 : 1.0);
    } else if (!strcmp(w, "linear_causal32k") || !strcmp(w, "linear_causal32k_norm")) {
        const int norm = !strcmp(w, "linear_causal32k_norm");
        const int64_t N = 32768;
        int64_t ne[4] = {B, N, H, D};
        la_tensor q = dev_tensor(4, ne, LA_BF16, 1, 1), k = dev_tensor(4, ne, LA_BF16, 1, 2),
                  v = dev_tensor(4, ne, LA_BF16, 1, 3), go = dev_tensor(4, ne, LA_BF16, 1, 4);
        la_tensor o = dev_tensor(4, ne, LA_BF16, 0, 0, false);
        la_tensor dq = dev_tensor(4, ne, LA_BF16, 0, 0, false), dk = dev_tensor(4, ne, LA_BF16, 0, 0, false),
                  dv = dev_tensor(4, ne, LA_BF16, 0, 0, false);
        la_linear_params p;
        la_linear_params_init(&p);
        p.causal = 1;
        p.normalize = norm;
        p.feature = norm ? LA_FEATURE_ELU1 : LA_FEATURE_IDENTITY;
        p.scale_q = 1.f / sqrtf((float)D);
        fwd = time_ms([&] { return la_linear_attention(&p, &q, &k, &v, &o, NULL, NULL, NULL, NULL, ctx); }, reps, &st);
        pool_reset();
        bwd = time_ms([&] {
            return la_linear_backward_cuda(&p, &q, &k, &v, &o, NULL, NULL, &go, NULL, NULL, &dq, &dk, &dv, NULL, NULL, ctx);
        }, reps, &st2);
        peak = pool_peak_mb();
        /* the tensor-core path's mma work (linear_causal_bwd_tc.cu): 14 N·D·Dv-sized
         * products and 12 with the 64-token tiles, per (b, h) */
        flop = 2.0 * B * H * (7.0 * N * D * D + 6.0 * 64 * N * D);
    } else if (!strcmp(w, "mhla_causal32k")) {
        const int64_t N = 32768, C = 64, M = N / C;
        int64_t ne[4] = {B, N, H, D}, nw[2] = {M, M};
        la_tensor q = dev_tensor(4, ne, LA_BF16, 1, 1), k = dev_tensor(4, ne, LA_BF16, 1, 2),
                  v = dev_tensor(4, ne, LA_BF16, 1, 3), go = dev_tensor(4, ne, LA_BF16, 1, 4);
        la_tensor W = dev_tensor(2, nw, LA_F32, 1.f / (float)M, 5), dW = dev_tensor(2, nw, LA_F32, 0, 0, false);
        la_tensor o = dev_tensor(4, ne, LA_BF16, 0, 0, false);
        la_tensor dq = dev_tensor(4, ne, LA_BF16, 0, 0, false), dk = dev_tensor(4, ne, LA_BF16, 0, 0, false),
                  dv = dev_tensor(4, ne, LA_BF16, 0, 0, false);
        la_mhla_causal_params p;
        la_mhla_causal_params_init(&p);
        p.chunk = C; /* relu, normalize none, scale D^-1/2: the defaults */
        fwd = time_ms([&] { return la_mhla_causal_forward(&p, &q, &k, &v, &W, &o, ctx); }, reps, &st);
        pool_reset();
        bwd = time_ms([&] {
            return la_mhla_causal_backward_cuda(&p, &q, &k, &v, &W, &o, &go, &dq, &dk, &dv, &dW, ctx);
        }, reps, &st2);
        peak = pool_peak_mb();
        /* the walks' mma work as linear_causal32k, plus the mixing GEMMs (split
         * operands: three passes each) H = W S, dS = Wᵀ G and dW over M² (D² + D) */
        flop = 2.0 * B * H * (7.0 * N * D * D + 6.0 * 64 * N * D) +
               3.0 * 3.0 * 2.0 * B * H * (double)M * M * (D * D + D);
    } else if (!strcmp(w, "mhla_wan") || !strcmp(w, "mhla_1d64k")) {
        const int wan = !strcmp(w, "mhla_wan");
        const int64_t N = wan ? 21 * 30 * 50 : 65536, M = wan ? 150 : 16;
        int64_t ne[4] = {B, N, H, D}, nw[2] = {M, M};
        la_tensor q = dev_tensor(4, ne, LA_BF16, 1, 1), k = dev_tensor(4, ne, LA_BF16, 1, 2),
                  v = dev_tensor(4, ne, LA_BF16, 1, 3), go = dev_tensor(4, ne, LA_BF16, 1, 4);
        la_tensor W = dev_tensor(2, nw, LA_F32, 1, 5), dW = dev_tensor(2, nw, LA_F32, 0, 0, false);
        la_tensor o = dev_tensor(4, ne, LA_BF16, 0, 0, false);
        la_tensor dq = dev_tensor(4, ne, LA_BF16, 0, 0, false), dk = dev_tensor(4, ne, LA_BF16, 0, 0, false),
                  dv = dev_tensor(4, ne, LA_BF16, 0, 0, false);
        la_mhla_params p;
        la_mhla_params_init(&p);
        if (wan) {
            p.grid_ndim = 3;
            p.grid[0] = 21, p.grid[1] = 30, p.grid[2] = 50;
            p.blocks[0] = 3, p.blocks[1] = 5, p.blocks[2] = 10;
        } else {
            p.grid_ndim = 1;
            p.grid[0] = N;
            p.blocks[0] = M;
        }
        p.normalize = LA_MHLA_NORM_NONE; /* released video code; W may be signed here */
        fwd = time_ms([&] { return la_mhla_forward(&p, &q, &k, &v, &W, &o, ctx); }, reps, &st);
        pool_reset();
        bwd = time_ms([&] { return la_mhla_backward_cuda(&p, &q, &k, &v, &W, &o, &go, &dq, &dk, &dv, &dW, ctx); },
                      reps, &st2);
        peak = pool_peak_mb();
    } else if (!strcmp(w, "focused128")) {
        const int64_t N = 128 * 128, ks = 5;
        int64_t ne[4] = {B, N, H, D}, nc[3] = {D, ks, ks}, nd[1] = {D}, ns[1] = {H * D};
        la_tensor q = dev_tensor(4, ne, LA_BF16, 1, 1), k = dev_tensor(4, ne, LA_BF16, 1, 2),
                  v = dev_tensor(4, ne, LA_BF16, 1, 3), go = dev_tensor(4, ne, LA_BF16, 1, 4);
        la_tensor cv = dev_tensor(3, nc, LA_F32, 0.2f, 5), cb = dev_tensor(1, nd, LA_F32, 0.2f, 6),
                  sp = dev_tensor(1, ns, LA_F32, 0.5f, 7);
        la_tensor dcv = dev_tensor(3, nc, LA_F32, 0, 0, false), dcb = dev_tensor(1, nd, LA_F32, 0, 0, false),
                  dsp = dev_tensor(1, ns, LA_F32, 0, 0, false);
        la_tensor o = dev_tensor(4, ne, LA_BF16, 0, 0, false);
        la_tensor dq = dev_tensor(4, ne, LA_BF16, 0, 0, false), dk = dev_tensor(4, ne, LA_BF16, 0, 0, false),
                  dv = dev_tensor(4, ne, LA_BF16, 0, 0, false);
        la_focused_params p;
        la_focused_params_init(&p);
        p.map_h = 128, p.map_w = 128;
        fwd = time_ms([&] { return la_focused_attention(&p, &q, &k, &v, &cv, &cb, &sp, NULL, &o, ctx); }, reps, &st);
        pool_reset();
        bwd = time_ms([&] {
            return la_focused_backward_cuda(&p, &q, &k, &v, &cv, &cb, &sp, NULL, &o, &go, &dq, &dk, &dv, &dcv, &dcb,
                                            &dsp, NULL, ctx);
        }, reps, &st2);
        peak = pool_peak_mb();
    } else if (!strncmp(w, "sparse", 6)) {
        /* sparse256: T 256; sparse4k[_portable|_atomic]: T 4096 (the issue's
         * shape); variant mma of sparse_attn_bwd (the default) forced, or
         * portable / mma_atomic */
        const int64_t T = !strncmp(w, "sparse4k", 8) ? 4096 : 256, Hq = 128, L = 4096, K = 2048,
                      Dqk = 576, Dv = 512;
        la_context_set_variant(ctx, "sparse_attn_bwd", strstr(w, "_portable") ? "portable"
                                                       : strstr(w, "_atomic")  ? "mma_atomic"
                                                                               : "mma");
        int64_t nq[3] = {T, Hq, Dqk}, nkv[2] = {L, Dqk}, no[3] = {T, Hq, Dv}, nl[2] = {T, Hq}, ni[2] = {T, K};
        la_tensor q = dev_tensor(3, nq, LA_BF16, 1, 1), kv = dev_tensor(2, nkv, LA_BF16, 1, 2),
                  go = dev_tensor(3, no, LA_BF16, 1, 4);
        la_tensor o = dev_tensor(3, no, LA_BF16, 0, 0, false), l = dev_tensor(2, nl, LA_F32, 0, 0, false);
        la_tensor dq = dev_tensor(3, nq, LA_BF16, 0, 0, false), dkv = dev_tensor(2, nkv, LA_BF16, 0, 0, false);
        std::vector<int> ih((size_t)(T * K));
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < K; j++) ih[t * K + j] = (int)((t * 7919 + j * 2) % L);
        la_tensor idx = dev_tensor(2, ni, LA_I32, 0, 0, false);
        cudaMemcpy(idx.data, ih.data(), ih.size() * 4, cudaMemcpyHostToDevice);
        la_sparse_attn_params p;
        la_sparse_attn_params_init(&p);
        fwd = time_ms([&] { return la_sparse_attention(&p, &q, &kv, &idx, &o, &l, ctx); }, reps, &st);
        pool_reset();
        bwd = time_ms([&] { return la_sparse_attention_backward_cuda(&p, &q, &kv, &idx, &o, &l, &go, &dq, &dkv, ctx); },
                      reps, &st2);
        peak = pool_peak_mb();
        /* S recomputed 576, dP 512, dq 576, dkv 576 + 512 (2 FLOP per MAC) */
        flop = 2.0 * T * Hq * K * (2.0 * Dqk + Dv + Dqk + Dv);
    } else {
        fprintf(stderr, "unknown workload %s\n", w);
        return 2;
    }
    report(w, fwd, bwd, peak, flop, st != LA_OK ? st : st2);
    for (void *p : g_bufs) cudaFree(p);
    la_context_destroy(ctx);
    return 0;
}
