/* Validation and timing driver of the non-causal linear-family CUDA backward
 * (llm.c style), for the GPU machine:
 *   nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc \
 *        dev/cuda/linear_bwd.cu build-gpu/liblongattn.a -o linear_bwd ... (tests/cuda/gpu_linear_bwd.sh)
 *   linear_bwd [VARIANT] [reps] [small | bench]   (small: the N <= 130 cases; bench: timing only)
 * VARIANT (forced on the families linear_bwd and mhla_bwd through the context):
 *   0  portable   one thread per output item (linblock_bwd.cu)
 *   1  mma        tensor cores (linblock_bwd_tc.cu; the default where it applies)
 *   2  mma2       tensor cores, ldmatrix fragments, the mixing of linblock_bwd_mix2.cu
 * Validation (every variant): bf16 inputs at odd sizes (N = 1, 63, 65, 120,
 * 700, 1000; D = Dv = 64 and 128; 1-/2-/3-D grids with uneven blocks; shared
 * and per-head mixing; normalize none / per_query; dense and permuted
 * [B,H,N,D] views), gradients poisoned with NaN bytes, through the public
 * la_linear_backward / la_mhla_backward, against the CPU backward of the same
 * bf16 values in fp32 (bf16 gradients within 1e-2 relative Frobenius, fp32
 * d_mixing within 1e-4), a second call bit-identical. Then the timing of the
 * issue's shapes (bf16, B1 H12 D128): forward and backward medians. */
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

static const char *const VARIANTS[] = {"portable", "mma", "mma2"};

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float urand() { /* uniform [-1, 1) */
    g_rng += 0x9e3779b97f4a7c15ull;
    uint64_t z = g_rng;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((z >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f;
}
static uint16_t f2bf(float f) {
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

/* A [B,N,H,D] bf16 tensor: logical values h (row-major [B,N,H,D]) and a
 * device copy, dense or permuted ([B,H,N,D] memory). */
struct dt4 {
    int64_t ne[4], nb[4], n;
    std::vector<float> h;
    uint16_t *d = nullptr;
    la_tensor t;
};
static int64_t phys(const dt4 &x, int64_t i) {
    const int64_t dd = i % x.ne[3], hh = (i / x.ne[3]) % x.ne[2], nn = (i / (x.ne[3] * x.ne[2])) % x.ne[1],
                  bb = i / (x.ne[3] * x.ne[2] * x.ne[1]);
    return bb * x.nb[0] + nn * x.nb[1] + hh * x.nb[2] + dd * x.nb[3];
}
static dt4 dt_new(int64_t B, int64_t N, int64_t H, int64_t D, int perm, bool random) {
    dt4 x;
    x.ne[0] = B, x.ne[1] = N, x.ne[2] = H, x.ne[3] = D;
    x.n = B * N * H * D;
    if (perm) x.nb[0] = H * N * D, x.nb[1] = D, x.nb[2] = N * D, x.nb[3] = 1;
    else x.nb[0] = N * H * D, x.nb[1] = H * D, x.nb[2] = D, x.nb[3] = 1;
    x.h.assign((size_t)x.n, 0.f);
    std::vector<uint16_t> buf((size_t)x.n, 0xffff); /* NaN bytes */
    for (int64_t i = 0; i < x.n && random; i++) {
        const uint16_t b = f2bf(urand());
        x.h[i] = bf2f(b);
        buf[phys(x, i)] = b;
    }
    CK(cudaMalloc(&x.d, (size_t)x.n * 2 + 16));
    CK(cudaMemcpy(x.d, buf.data(), (size_t)x.n * 2, cudaMemcpyHostToDevice));
    la_tensor_init_strided(&x.t, x.d, LA_BF16, LA_DEVICE_CUDA, 4, x.ne, x.nb);
    return x;
}
static void dt_poison(dt4 &x) { CK(cudaMemset(x.d, 0xff, (size_t)x.n * 2)); }
static std::vector<float> dt_down(const dt4 &x) {
    std::vector<uint16_t> buf((size_t)x.n);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(buf.data(), x.d, (size_t)x.n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> r((size_t)x.n);
    for (int64_t i = 0; i < x.n; i++) r[i] = bf2f(buf[phys(x, i)]);
    return r;
}

static double rel_frob(const float *a, const float *ref, int64_t n, bool *nan) {
    double e = 0, r = 0;
    *nan = false;
    for (int64_t i = 0; i < n; i++) {
        if (a[i] != a[i]) *nan = true;
        e += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        r += (double)ref[i] * ref[i];
    }
    return r > 0 ? sqrt(e / r) : sqrt(e);
}

struct vcase {
    const char *name;
    int mhla; /* 0 linear, 1 mhla */
    int64_t B, N, H, D;
    int norm; /* LA_MHLA_NORM_* */
    la_feature f;
    int perm, ndim;
    int64_t grid[3], blocks[3];
    int per_head_w;
    int grads; /* bit 0 dq, 1 dk, 2 dv, 3 d_mixing */
};

static int g_fail = 0, g_pass = 0;
static void check(const char *what, const char *g, double e, bool nan, double bound) {
    const bool ok = !nan && e <= bound;
    printf("  %-44s %-9s err %.3g (bound %.0e)%s\n", what, g, e, bound, ok ? "" : (nan ? "  NaN FAIL" : "  FAIL"));
    (ok ? g_pass : g_fail)++;
}

static void run_case(la_context *ctx, const vcase &c) {
    const int64_t B = c.B, N = c.N, H = c.H, D = c.D;
    char what[128];
    snprintf(what, sizeof what, "%s B%lld N%lld H%lld D%lld %s%s", c.name, (long long)B, (long long)N,
             (long long)H, (long long)D, c.norm == LA_MHLA_NORM_NONE ? "none" : "pq", c.perm ? " perm" : "");
    dt4 q = dt_new(B, N, H, D, c.perm, true), k = dt_new(B, N, H, D, c.perm, true);
    dt4 v = dt_new(B, N, H, D, c.perm, true), go = dt_new(B, N, H, D, c.perm, true);
    dt4 dq = dt_new(B, N, H, D, c.perm, false), dk = dt_new(B, N, H, D, c.perm, false);
    dt4 dv = dt_new(B, N, H, D, c.perm, false);
    int64_t M = 1;
    for (int a = 0; a < c.ndim; a++) M *= c.blocks[a];
    const int64_t Hw = c.per_head_w ? H : 1;
    std::vector<float> Wh((size_t)(Hw * M * M));
    for (auto &x : Wh) x = 0.55f + 0.45f * urand();
    float *Wd = nullptr, *dWd = nullptr;
    int64_t nw[3] = {Hw, M, M};
    la_tensor W, dW;
    if (c.mhla) {
        CK(cudaMalloc(&Wd, Wh.size() * 4));
        CK(cudaMalloc(&dWd, Wh.size() * 4));
        CK(cudaMemcpy(Wd, Wh.data(), Wh.size() * 4, cudaMemcpyHostToDevice));
        la_tensor_init(&W, Wd, LA_F32, LA_DEVICE_CUDA, c.per_head_w ? 3 : 2, c.per_head_w ? nw : nw + 1);
        la_tensor_init(&dW, dWd, LA_F32, LA_DEVICE_CUDA, c.per_head_w ? 3 : 2, c.per_head_w ? nw : nw + 1);
    }
    la_linear_params lp;
    la_linear_params_init(&lp);
    lp.feature = c.f;
    lp.normalize = c.norm != LA_MHLA_NORM_NONE;
    lp.scale_q = 0.7f;
    la_mhla_params mp;
    la_mhla_params_init(&mp);
    mp.grid_ndim = c.ndim;
    for (int a = 0; a < c.ndim; a++) mp.grid[a] = c.grid[a], mp.blocks[a] = c.blocks[a];
    mp.feature = c.f;
    mp.normalize = (la_mhla_normalize)c.norm;
    mp.scale_q = 1.3f;

    auto call = [&](la_context *cx, la_tensor *gq, la_tensor *gk, la_tensor *gv, la_tensor *gw,
                    const la_tensor *tq, const la_tensor *tk, const la_tensor *tv, const la_tensor *tg,
                    const la_tensor *tw) {
        if (c.mhla) return la_mhla_backward(&mp, tq, tk, tv, tw, nullptr, tg, gq, gk, gv, gw, cx);
        return la_linear_backward(&lp, tq, tk, tv, nullptr, nullptr, nullptr, tg, nullptr, nullptr, gq, gk,
                                  gv, nullptr, nullptr, cx);
    };
    la_tensor *pq = c.grads & 1 ? &dq.t : nullptr, *pk = c.grads & 2 ? &dk.t : nullptr;
    la_tensor *pv = c.grads & 4 ? &dv.t : nullptr, *pw = c.mhla && (c.grads & 8) ? &dW : nullptr;
    dt_poison(dq), dt_poison(dk), dt_poison(dv);
    if (c.mhla) CK(cudaMemset(dWd, 0xff, Wh.size() * 4));
    la_status st = call(ctx, pq, pk, pv, pw, &q.t, &k.t, &v.t, &go.t, c.mhla ? &W : nullptr);
    if (st != LA_OK) {
        printf("  %-44s call failed: %s: %s  FAIL\n", what, la_status_string(st), la_last_error());
        g_fail++;
        return;
    }
    std::vector<float> gq = dt_down(dq), gk = dt_down(dk), gv = dt_down(dv), gw(Wh.size());
    if (c.mhla) CK(cudaMemcpy(gw.data(), dWd, gw.size() * 4, cudaMemcpyDeviceToHost));
    /* second call: bit-identical */
    st = call(ctx, pq, pk, pv, pw, &q.t, &k.t, &v.t, &go.t, c.mhla ? &W : nullptr);
    std::vector<float> gq2 = dt_down(dq), gk2 = dt_down(dk), gv2 = dt_down(dv), gw2(Wh.size());
    if (c.mhla) CK(cudaMemcpy(gw2.data(), dWd, gw2.size() * 4, cudaMemcpyDeviceToHost));
    const bool same = st == LA_OK && !memcmp(gq.data(), gq2.data(), gq.size() * 4) &&
                      !memcmp(gk.data(), gk2.data(), gk.size() * 4) &&
                      !memcmp(gv.data(), gv2.data(), gv.size() * 4) &&
                      !memcmp(gw.data(), gw2.data(), gw.size() * 4);
    printf("  %-44s second call %s\n", what, same ? "bit-identical" : "DIFFERS  FAIL");
    (same ? g_pass : g_fail)++;

    /* the CPU backward of the same bf16 values in fp32 */
    la_tensor cq, ck, cv, cg, cW, cdq, cdk, cdv, cdW;
    std::vector<float> rq((size_t)q.n), rk((size_t)q.n), rv((size_t)q.n), rw(Wh.size());
    la_tensor_init(&cq, q.h.data(), LA_F32, LA_DEVICE_CPU, 4, q.ne);
    la_tensor_init(&ck, k.h.data(), LA_F32, LA_DEVICE_CPU, 4, k.ne);
    la_tensor_init(&cv, v.h.data(), LA_F32, LA_DEVICE_CPU, 4, v.ne);
    la_tensor_init(&cg, go.h.data(), LA_F32, LA_DEVICE_CPU, 4, go.ne);
    la_tensor_init(&cdq, rq.data(), LA_F32, LA_DEVICE_CPU, 4, q.ne);
    la_tensor_init(&cdk, rk.data(), LA_F32, LA_DEVICE_CPU, 4, q.ne);
    la_tensor_init(&cdv, rv.data(), LA_F32, LA_DEVICE_CPU, 4, q.ne);
    la_tensor_init(&cW, Wh.data(), LA_F32, LA_DEVICE_CPU, c.per_head_w ? 3 : 2, c.per_head_w ? nw : nw + 1);
    la_tensor_init(&cdW, rw.data(), LA_F32, LA_DEVICE_CPU, c.per_head_w ? 3 : 2, c.per_head_w ? nw : nw + 1);
    st = call(nullptr, &cdq, &cdk, &cdv, c.mhla ? &cdW : nullptr, &cq, &ck, &cv, &cg, c.mhla ? &cW : nullptr);
    if (st != LA_OK) {
        printf("  %-44s CPU backward failed: %s  FAIL\n", what, la_last_error());
        g_fail++;
        return;
    }
    bool nan;
    double e;
    if (pq) e = rel_frob(gq.data(), rq.data(), q.n, &nan), check(what, "dq", e, nan, 1e-2);
    if (pk) e = rel_frob(gk.data(), rk.data(), q.n, &nan), check(what, "dk", e, nan, 1e-2);
    if (pv) e = rel_frob(gv.data(), rv.data(), q.n, &nan), check(what, "dv", e, nan, 1e-2);
    if (pw) e = rel_frob(gw.data(), rw.data(), (int64_t)rw.size(), &nan), check(what, "d_mixing", e, nan, 1e-4);
    /* skipped gradients stay untouched (NaN bytes) */
    if (!pq) {
        bool all_nan = true;
        for (float x : gq) all_nan &= x != x;
        printf("  %-44s dq skipped: %s\n", what, all_nan ? "untouched" : "WRITTEN  FAIL");
        (all_nan ? g_pass : g_fail)++;
    }
    for (dt4 *x : {&q, &k, &v, &go, &dq, &dk, &dv}) cudaFree(x->d);
    if (Wd) cudaFree(Wd), cudaFree(dWd);
}

template <class F> static double median_ms(F f, int reps) {
    std::vector<float> ms;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < 2; i++)
        if (f() != LA_OK) {
            printf("    call failed: %s\n", la_last_error());
            return -1;
        }
    CK(cudaDeviceSynchronize());
    for (int r = 0; r < reps; r++) {
        cudaEventRecord(a);
        f();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float x;
        cudaEventElapsedTime(&x, a, b);
        ms.push_back(x);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

static void bench(la_context *ctx, const char *name, int mhla, int ndim, const int64_t *grid, const int64_t *blocks,
                  int64_t N, int reps) {
    const int64_t B = 1, H = 12, D = 128;
    dt4 q = dt_new(B, N, H, D, 0, true), k = dt_new(B, N, H, D, 0, true), v = dt_new(B, N, H, D, 0, true);
    dt4 go = dt_new(B, N, H, D, 0, true), o = dt_new(B, N, H, D, 0, false);
    dt4 dq = dt_new(B, N, H, D, 0, false), dk = dt_new(B, N, H, D, 0, false), dv = dt_new(B, N, H, D, 0, false);
    int64_t M = 1;
    for (int a = 0; a < ndim; a++) M *= blocks[a];
    std::vector<float> Wh((size_t)(M * M));
    for (auto &x : Wh) x = urand();
    float *Wd, *dWd;
    CK(cudaMalloc(&Wd, Wh.size() * 4));
    CK(cudaMalloc(&dWd, Wh.size() * 4));
    CK(cudaMemcpy(Wd, Wh.data(), Wh.size() * 4, cudaMemcpyHostToDevice));
    int64_t nw[2] = {M, M};
    la_tensor W, dW;
    la_tensor_init(&W, Wd, LA_F32, LA_DEVICE_CUDA, 2, nw);
    la_tensor_init(&dW, dWd, LA_F32, LA_DEVICE_CUDA, 2, nw);
    double fwd, bwd;
    if (mhla) {
        la_mhla_params p;
        la_mhla_params_init(&p);
        p.grid_ndim = ndim;
        for (int a = 0; a < ndim; a++) p.grid[a] = grid[a], p.blocks[a] = blocks[a];
        p.normalize = LA_MHLA_NORM_NONE; /* as bench/gpu_backward_driver: W signed here */
        fwd = median_ms([&] { return la_mhla_forward(&p, &q.t, &k.t, &v.t, &W, &o.t, ctx); }, reps);
        bwd = median_ms([&] {
            return la_mhla_backward(&p, &q.t, &k.t, &v.t, &W, &o.t, &go.t, &dq.t, &dk.t, &dv.t, &dW, ctx);
        }, reps);
    } else {
        la_linear_params p;
        la_linear_params_init(&p);
        fwd = median_ms([&] { return la_linear_attention(&p, &q.t, &k.t, &v.t, &o.t, nullptr, nullptr, nullptr, nullptr, ctx); }, reps);
        bwd = median_ms([&] {
            return la_linear_backward(&p, &q.t, &k.t, &v.t, &o.t, nullptr, nullptr, &go.t, nullptr, nullptr, &dq.t,
                                      &dk.t, &dv.t, nullptr, nullptr, ctx);
        }, reps);
    }
    /* backward floor: read q, k, v, dO, write dq, dk, dv (bf16) at 4.8 TB/s;
     * six N·D·Dv GEMM passes (S, u, dA, dk, dv + num folded in u) at bf16 dense peak */
    const double bytes = 7.0 * B * N * H * D * 2, flops = 2.0 * 5 * B * H * (double)N * D * D;
    printf("BENCH %-12s N %6lld M %4lld  fwd %.3f ms  bwd %.3f ms  fwd+bwd %.3f ms  (bwd floor: bytes %.3f ms, "
           "flop %.3f ms)\n",
           name, (long long)N, (long long)M, fwd, bwd, fwd + bwd, bytes / 4.8e9, flops / 989e9);
    for (dt4 *x : {&q, &k, &v, &go, &o, &dq, &dk, &dv}) cudaFree(x->d);
    cudaFree(Wd), cudaFree(dWd);
}

int main(int argc, char **argv) {
    const int var = argc > 1 ? atoi(argv[1]) : 1;
    const int reps = argc > 2 ? atoi(argv[2]) : 10;
    const bool small = argc > 3 && !strcmp(argv[3], "small"); /* N <= 130 only (compute-sanitizer) */
    const bool bench_only = argc > 3 && !strcmp(argv[3], "bench"); /* no validation (profiler) */
    if (var < 0 || var > 2) {
        fprintf(stderr, "variant %d: have 0 portable, 1 mma, 2 mma2\n", var);
        return 2;
    }
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_variant(ctx, "linear_bwd", VARIANTS[var]);
    la_context_set_variant(ctx, "mhla_bwd", VARIANTS[var]);
    printf("# variant %d (%s)\n", var, VARIANTS[var]);
    const int NO = LA_MHLA_NORM_NONE, PQ = LA_MHLA_NORM_PER_QUERY;
    const vcase cases[] = {
        {"linear", 0, 1, 1, 1, 64, NO, LA_FEATURE_RELU, 0, 1, {0}, {1}, 0, 15},
        {"linear", 0, 2, 63, 3, 128, PQ, LA_FEATURE_ELU1, 1, 1, {0}, {1}, 0, 15},
        {"linear", 0, 1, 65, 2, 64, PQ, LA_FEATURE_RELU_EPS, 0, 1, {0}, {1}, 0, 15},
        {"linear", 0, 1, 1000, 2, 128, NO, LA_FEATURE_IDENTITY, 1, 1, {0}, {1}, 0, 15},
        {"linear", 0, 1, 1000, 1, 128, PQ, LA_FEATURE_ELU1, 0, 1, {0}, {1}, 0, 2}, /* dk only */
        {"mhla", 1, 1, 1000, 2, 128, PQ, LA_FEATURE_RELU_EPS, 1, 1, {1000}, {10}, 1, 15},
        {"mhla", 1, 1, 65, 1, 64, NO, LA_FEATURE_ELU1, 0, 1, {65}, {4}, 0, 15},
        {"mhla", 1, 2, 63, 2, 128, PQ, LA_FEATURE_RELU, 1, 2, {9, 7}, {3, 2}, 0, 15},
        {"mhla", 1, 1, 120, 2, 64, NO, LA_FEATURE_RELU_EPS, 0, 3, {4, 6, 5}, {2, 3, 5}, 1, 15},
        {"mhla", 1, 1, 700, 1, 128, PQ, LA_FEATURE_RELU_EPS, 1, 3, {7, 10, 10}, {3, 5, 10}, 0, 15},
        {"mhla", 1, 1, 1, 1, 128, NO, LA_FEATURE_ELU1, 0, 1, {1}, {1}, 0, 15}, /* N = 1 normalized: o = v up to eps */
        {"mhla", 1, 1, 1000, 1, 64, NO, LA_FEATURE_RELU, 1, 1, {1000}, {3}, 0, 14}, /* no dq */
    };
    for (const vcase &c : cases)
        if (!bench_only && (!small || c.N <= 130)) run_case(ctx, c);
    /* a view the mma path does not take: forced it is refused, by default portable */
    {
        int64_t ne[4] = {1, 65, 1, 128}, nb[4] = {65 * 131, 131, 131, 1};
        uint16_t *d;
        CK(cudaMalloc(&d, 65 * 131 * 2 * 8));
        CK(cudaMemset(d, 0, 65 * 131 * 2 * 8));
        la_tensor t[7];
        for (int i = 0; i < 7; i++) la_tensor_init_strided(&t[i], d + i * 65 * 131, LA_BF16, LA_DEVICE_CUDA, 4, ne, nb);
        la_linear_params p;
        la_linear_params_init(&p);
        const la_status st = la_linear_backward(&p, &t[0], &t[1], &t[2], nullptr, nullptr, nullptr, &t[3], nullptr,
                                                nullptr, &t[4], &t[5], &t[6], nullptr, nullptr, ctx);
        const bool ok = var >= 1 ? st == LA_ERR_UNSUPPORTED : st == LA_OK;
        printf("  padded rows (stride 131), variant %s: %s%s\n", VARIANTS[var], la_status_string(st),
               ok ? "" : "  FAIL");
        (ok ? g_pass : g_fail)++;
        cudaFree(d);
    }
    printf("VALIDATE variant %s: %d passed, %d failed\n", VARIANTS[var], g_pass, g_fail);
    if (reps > 0) {
        /* timed under the forced variant (the default is one of them) */
        const int64_t gw[3] = {21, 30, 50}, bw[3] = {3, 5, 10}, g1[1] = {65536}, b1[1] = {16}, gl[1] = {0},
                      bl[1] = {1};
        bench(ctx, "mhla_wan", 1, 3, gw, bw, 21 * 30 * 50, reps);
        bench(ctx, "mhla_1d64k", 1, 1, g1, b1, 65536, reps);
        bench(ctx, "linear_nc32k", 0, 1, gl, bl, 32768, reps);
    }
    la_context_destroy(ctx);
    return g_fail ? 1 : 0;
}
