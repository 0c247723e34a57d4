/* Timing driver for focused linear attention, flatten variant (SPEC §4a), on
 * CUDA through the public C API: the bf16 fast path of src/cuda/focused.cu
 * against the portable path (variant "portable" of family "focused"), with and without the
 * 5x5 depthwise conv (+ bias) on v. B = 1, H = 12, D = Dv = 128, bf16
 * [B,N,H,D] contiguous, random inputs, p = 3, maps 64x64, 128x256, 256x512.
 * Each case: 2 warm-up calls, then reps calls timed one by one with CUDA
 * events; the median is printed with the byte floor (Q, K, V read once, O
 * written once, over 4.2 TB/s) and the ratio. Also linear attention with the
 * identity feature on the same shapes ("engine": what stage 2 of the fast
 * path costs alone), so that new − engine ≈ the φ pass and conv − noconv ≈
 * the conv kernel.
 *
 *   nvcc -O2 -std=c++17 -Iinclude -Isrc dev/bench_gpu_focused.cu build-gpu/liblongattn.a \
 *        -Xcompiler -fopenmp -o build-gpu/bench_gpu_focused
 *   build-gpu/bench_gpu_focused            all cases
 *   build-gpu/bench_gpu_focused profile N  one fast call without and one with conv (ncu)
 */
#include "bench_gpu_common.cuh"

int main(int argc, char **argv) {
    const int64_t B = 1, H = 12, D = 128, Nmax = 131072, ks = 5;
    const size_t n = (size_t)B * Nmax * H * D;
    void *q = make(n, 1), *k = make(n, 2), *v = make(n, 3), *o = make(n, 4);
    float *cw, *cb;
    CK(cudaMalloc(&cw, sizeof(float) * D * ks * ks));
    CK(cudaMalloc(&cb, sizeof(float) * D));
    {
        std::vector<float> w(D * ks * ks), bb(D);
        for (size_t i = 0; i < w.size(); i++) w[i] = 0.04f * (float)((i * 7919) % 11) - 0.2f;
        for (size_t i = 0; i < bb.size(); i++) bb[i] = 0.01f * (float)(i % 7);
        CK(cudaMemcpy(cw, w.data(), sizeof(float) * w.size(), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(cb, bb.data(), sizeof(float) * bb.size(), cudaMemcpyHostToDevice));
    }
    la_tensor conv, bias;
    int64_t nc[3] = {D, ks, ks}, nbv[1] = {D};
    la_tensor_init(&conv, cw, LA_F32, LA_DEVICE_CUDA, 3, nc);
    la_tensor_init(&bias, cb, LA_F32, LA_DEVICE_CUDA, 1, nbv);
    auto map_of = [](int64_t N, int64_t &mh, int64_t &mw) {
        mw = 1;
        while (mw * mw < N) mw *= 2;
        mh = N / mw; /* 4K: 64x64, 32K: 128x256, 128K: 256x512 */
    };
    auto flatten = [&](int64_t N, bool with_conv) {
        la_tensor tq = view(q, B, N, H, D), tk = view(k, B, N, H, D), tv = view(v, B, N, H, D),
                  to = view(o, B, N, H, D);
        la_focused_params p;
        la_focused_params_init(&p);
        map_of(N, p.map_h, p.map_w);
        return la_focused_attention(&p, &tq, &tk, &tv, with_conv ? &conv : nullptr,
                                    with_conv ? &bias : nullptr, nullptr, nullptr, &to, BCTX);
    };
    if (argc > 2 && !strcmp(argv[1], "profile")) {
        const int64_t N = atoll(argv[2]);
        la_status st = flatten(N, false);
        if (st == LA_OK) st = flatten(N, true);
        CK(cudaDeviceSynchronize());
        printf("profile N=%lld: %s\n", (long long)N, st == LA_OK ? "ok" : la_last_error());
        return st == LA_OK ? 0 : 1;
    }
    printf("# focused flatten, B=1 H=12 D=Dv=128 bf16, p=3; floor = 4 tensors of N*H*128*2 B / 4.2 TB/s\n");
    printf("%-8s %-9s %9s %9s %9s %9s %9s %9s %7s %7s %7s\n", "N", "map", "engine", "new", "new+conv", "old",
           "old+conv", "floor", "xfl", "xfl+cv", "old/new");
    for (int64_t N : {4096, 32768, 131072}) {
        const double floor_ms = 4.0 * N * H * D * 2 / BW * 1e3;
        la_tensor tq = view(q, B, N, H, D), tk = view(k, B, N, H, D), tv = view(v, B, N, H, D),
                  to = view(o, B, N, H, D);
        la_linear_params lp;
        la_linear_params_init(&lp);
        lp.feature = LA_FEATURE_IDENTITY;
        const int reps = 20, reps_old = N > 40000 ? 3 : 7;
        const double eng = time_ms([&] { return la_linear_attention(&lp, &tq, &tk, &tv, &to, 0, 0, 0, 0, BCTX); }, reps, 2);
        bench_variant("focused", nullptr);
        const double tn = time_ms([&] { return flatten(N, false); }, reps, 2);
        const double tnc = time_ms([&] { return flatten(N, true); }, reps, 2);
        bench_variant("focused", "portable");
        const double to_ = time_ms([&] { return flatten(N, false); }, reps_old, 2);
        const double toc = time_ms([&] { return flatten(N, true); }, reps_old, 2);
        bench_variant("focused", nullptr);
        int64_t mh, mw;
        map_of(N, mh, mw);
        char ms[32];
        snprintf(ms, sizeof ms, "%lldx%lld", (long long)mh, (long long)mw);
        printf("%-8lld %-9s %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %7.2f %7.2f %7.1f\n", (long long)N, ms, eng, tn, tnc,
               to_, toc, floor_ms, tn / floor_ms, tnc / floor_ms, toc / tnc);
        printf("#   N=%lld stages (by difference): phi pass ~ new - engine = %.4f ms, conv ~ new+conv - new = %.4f ms\n",
               (long long)N, tn - eng, tnc - tn);
        fflush(stdout);
    }
    return 0;
}
