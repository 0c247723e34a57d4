/* Timing driver for causal linear attention on CUDA through the public C API:
 * the tensor-core path (src/cuda/linear_causal_tc.cu; variants of family
 * "linear_causal": "new" = the default (wide scan), "walk" = the walking
 * scan, "L512" = state chunks of 512 tokens at every N (twice the output CTAs
 * of the default choice at 32K, for the L trade-off); with "all" also the
 * portable fp32 path "old"). B = 1, H = 12, D = Dv = 128,
 * bf16 [B,N,H,D] contiguous, random inputs, φ = relu (the default), scale 1.
 * Each case: 3 warm-up calls, then `reps` calls each timed with CUDA events;
 * prints the median, the byte floor (Q, K, V read once + O written once over
 * 4.2 TB/s) and the ratio to it, and one "RESULT" line per case for scripts.
 *
 *   nvcc -O2 -std=c++17 -Iinclude -Isrc dev/bench_gpu_causal.cu build-gpu/liblongattn.a \
 *        -Xcompiler -fopenmp -o build-gpu/bench_gpu_causal
 *   build-gpu/bench_gpu_causal            N = 4K, 32K, 128K; new, v3, v3k3, v3L512; normalize 0/1
 *   build-gpu/bench_gpu_causal all        the same + old
 *   build-gpu/bench_gpu_causal new        new path only (+ identity φ, + with S_out)
 *   build-gpu/bench_gpu_causal profile N  one call of each normalize mode (for ncu)
 */
#include "bench_gpu_common.cuh"

int main(int argc, char **argv) {
    const int64_t B = 1, H = 12, D = 128;
    const int64_t Nmax = 131072;
    const size_t n = (size_t)B * Nmax * H * D;
    void *q = make(n, 1), *k = make(n, 2), *v = make(n, 3), *o = make(n, 4);
    float *S, *z;
    CK(cudaMalloc(&S, sizeof(float) * B * H * D * D));
    CK(cudaMalloc(&z, sizeof(float) * B * H * D));
    CK(cudaMemset(S, 0, sizeof(float) * B * H * D * D));
    CK(cudaMemset(z, 0, sizeof(float) * B * H * D));
    la_tensor tS, tz;
    const int64_t nS[4] = {B, H, D, D}, nz[3] = {B, H, D};
    la_tensor_init(&tS, S, LA_F32, LA_DEVICE_CUDA, 4, nS);
    la_tensor_init(&tz, z, LA_F32, LA_DEVICE_CUDA, 3, nz);

    if (argc > 2 && !strcmp(argv[1], "profile")) { /* one call per normalize mode, for ncu */
        const int64_t N = atoll(argv[2]);
        la_tensor tq = view(q, B, N, H, D), tk = view(k, B, N, H, D), tv = view(v, B, N, H, D),
                  to = view(o, B, N, H, D);
        la_linear_params p;
        la_linear_params_init(&p);
        p.causal = 1;
        la_status st = LA_OK;
        for (int nm = 0; nm < 2 && st == LA_OK; nm++) {
            p.normalize = nm;
            st = la_linear_attention(&p, &tq, &tk, &tv, &to, 0, 0, 0, 0, BCTX);
        }
        CK(cudaDeviceSynchronize());
        printf("profile N=%lld: %s\n", (long long)N, st == LA_OK ? "ok" : la_last_error());
        return st == LA_OK ? 0 : 1;
    }
    const bool new_only = argc > 1 && !strcmp(argv[1], "new");
    const bool all = argc > 1 && !strcmp(argv[1], "all");
    /* name, variant of family "linear_causal" (nullptr: the default) */
    struct { const char *name, *variant; } paths[] = {
        {"new", nullptr}, {"walk", "walk"}, {"L512", "chunk512"}, {"old", "portable"}};
    const int npaths = new_only ? 1 : all ? 4 : 3;
    printf("# causal linear attention, B=1 H=12 D=Dv=128 bf16, relu, medians of event-timed calls\n");
    printf("%-34s %-9s %9s   %-10s %s\n", "case", "N", "ms", "byte-floor", "x floor");
    for (int64_t N : {4096, 32768, 131072}) {
        la_tensor tq = view(q, B, N, H, D), tk = view(k, B, N, H, D), tv = view(v, B, N, H, D),
                  to = view(o, B, N, H, D);
        const double fb = 2.0 * B * N * H * D * 4 / BW * 1e3;
        for (int path = 0; path < npaths; path++) {
            const char *pn = paths[path].name;
            const bool old = !strcmp(pn, "old");
            bench_variant("linear_causal", paths[path].variant);
            for (int nm = 0; nm < 2; nm++) {
                la_linear_params p;
                la_linear_params_init(&p);
                p.causal = 1;
                p.normalize = nm;
                const int reps = old ? (N > 32768 ? 3 : 5) : 20;
                const double ms = time_ms([&] { return la_linear_attention(&p, &tq, &tk, &tv, &to, 0, 0, 0, 0, BCTX); }, reps);
                char name[64];
                snprintf(name, sizeof name, "linear-causal %s norm=%d", pn, nm);
                printf("%-34s N=%-7lld %9.4f   %10.4f %6.2f\n", name, (long long)N, ms, fb, ms / fb);
                printf("RESULT path=%s feat=relu norm=%d N=%lld ms=%.5f floor=%.5f\n", pn, nm,
                       (long long)N, ms, fb);
                fflush(stdout);
            }
            if (path <= 1 && N == 32768) { /* other feature maps, state i/o */
                la_linear_params p;
                la_linear_params_init(&p);
                p.causal = 1;
                p.normalize = 0;
                p.feature = LA_FEATURE_IDENTITY;
                double ms = time_ms([&] { return la_linear_attention(&p, &tq, &tk, &tv, &to, 0, 0, 0, 0, BCTX); }, 20);
                char name[64];
                snprintf(name, sizeof name, "linear-causal %s identity norm=0", pn);
                printf("%-34s N=%-7lld %9.4f   %10.4f %6.2f\n", name, (long long)N, ms, fb, ms / fb);
                p.feature = LA_FEATURE_RELU1; /* state out with hi/lo k̃ (inexact φ) */
                p.normalize = 1;
                ms = time_ms([&] { return la_linear_attention(&p, &tq, &tk, &tv, &to, &tS, &tz, &tS, &tz, BCTX); }, 20);
                snprintf(name, sizeof name, "linear-causal %s relu1 state i/o", pn);
                printf("%-34s N=%-7lld %9.4f   %10.4f %6.2f\n", name, (long long)N, ms, fb, ms / fb);
                fflush(stdout);
            }
        }
        bench_variant("linear_causal", nullptr);
    }
    return 0;
}
