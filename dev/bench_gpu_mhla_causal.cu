/* Timing driver for the causal MHLA forward (SPEC §5.4; family "mhla_causal",
 * src/cuda/mhla_causal_tc.cu) against causal linear attention, through the
 * public C API: B = 1, bf16 [B,N,H,D] contiguous, random inputs, a random
 * lower-triangular W (shared), chunk 64, normalize none, φ = relu. Per row:
 * the median of `reps` CUDA-event-timed calls after 3 warm-ups, and the
 * floors: bytes (q, k, v read, out written, plus the fp32 block states
 * written by pass 1, read and written by the mixing, read by pass 3) over
 * 4.2 TB/s and FLOPs (2·N·D·Dv pass 1, 4·N·D·Dv + 2·N·64·(D+Dv)/2 pass 3,
 * 2·(M²/2)·(D·Dv + D) the strict-triangle mixing) over 760 TFLOP/s.
 * Variants mma, mma_bf16s (bf16 block states: half the state bytes in its
 * floor), mma_split and portable (N <= 32K). First a check: mma, mma_split
 * and mma_bf16s against the portable engine at N = 4097 (max rel).
 *   build-gpu/dev/bench_gpu_mhla_causal [H D Ns...]   (default 12 128 32768 131072)
 */
#include "bench_gpu_common.cuh"

static void report(const char *op, const char *shape, double ms, double bytes, double flops,
                   double ref_ms) {
    const double fb = bytes / BW * 1e3, ff = flops / FL * 1e3;
    printf("%-24s %-22s %9.4f ms  byte-floor %7.4f  flop-floor %7.4f  x%.2f of floor  x%.2f of causal linear\n",
           op, shape, ms, fb, ff, ms / std::max(fb, ff), ref_ms > 0 ? ms / ref_ms : 1.0);
    fflush(stdout);
}

__global__ void tril_fill(float *W, int64_t M) {
    BENCH_GRID_STRIDE(i, M * M) {
        const int64_t r = i / M, c = i % M;
        const uint32_t h = (uint32_t)(i * 2654435761u) ^ 0x9e3779b9u;
        W[i] = c <= r ? (0.05f + (h >> 8) * (1.f / 16777216.f)) / (float)(r + 1) : 0.f;
    }
}

int main(int argc, char **argv) {
    const int64_t B = 1, H = argc > 2 ? atoll(argv[1]) : 12, D = argc > 2 ? atoll(argv[2]) : 128;
    std::vector<int64_t> Ns;
    for (int i = 3; i < argc; i++) Ns.push_back(atoll(argv[i]));
    if (Ns.empty()) Ns = {32768, 131072};
    int64_t Nmax = 4097;
    for (int64_t n : Ns) Nmax = std::max(Nmax, n);
    const size_t ne = (size_t)B * Nmax * H * D;
    __nv_bfloat16 *q = make(ne, 1), *k = make(ne, 2), *v = make(ne, 3), *o = make(ne, 4), *o2 = make(ne, 5);
    const int64_t Mmax = (Nmax + 63) / 64;
    float *Wd;
    CK(cudaMalloc(&Wd, sizeof(float) * Mmax * Mmax));
    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    { /* check: mma, mma_split and mma_bf16s against the portable engine at N = 4097 */
        const int64_t N = 4097, M = (N + 63) / 64;
        tril_fill<<<256, 256>>>(Wd, M);
        la_tensor tq = view(q, B, N, H, D), tk = view(k, B, N, H, D), tv = view(v, B, N, H, D),
                  to = view(o, B, N, H, D), t2 = view(o2, B, N, H, D), W;
        int64_t nw[2] = {M, M};
        la_tensor_init(&W, Wd, LA_F32, LA_DEVICE_CUDA, 2, nw);
        const size_t n = (size_t)B * N * H * D;
        std::vector<__nv_bfloat16> a(n), b(n);
        bench_variant("mhla_causal", "portable");
        LK(la_mhla_causal_forward(&p, &tq, &tk, &tv, &W, &to, BCTX));
        CK(cudaMemcpy(a.data(), o, n * 2, cudaMemcpyDeviceToHost));
        for (const char *var : {"mma", "mma_split", "mma_bf16s"}) {
            bench_variant("mhla_causal", var);
            CK(cudaMemset(o2, 0xff, n * 2));
            LK(la_mhla_causal_forward(&p, &tq, &tk, &tv, &W, &t2, BCTX));
            CK(cudaMemcpy(b.data(), o2, n * 2, cudaMemcpyDeviceToHost));
            double md = 0, mr = 0;
            int64_t bad = 0;
            for (size_t i = 0; i < n; i++) {
                const double x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
                if (!std::isfinite(y)) bad++;
                md = std::max(md, fabs(x - y));
                mr = std::max(mr, fabs(x));
            }
            printf("# check %s vs portable, H%lld D%lld N%lld: max rel %.3e, nonfinite %lld %s\n", var,
                   (long long)H, (long long)D, (long long)N, md / mr, (long long)bad,
                   bad == 0 && md / mr < 2e-2 ? "ok" : "FAIL");
        }
        bench_variant("mhla_causal", nullptr);
    }
    for (int64_t N : Ns) {
        const int64_t M = (N + 63) / 64;
        tril_fill<<<256, 256>>>(Wd, M);
        CK(cudaDeviceSynchronize());
        la_tensor tq = view(q, B, N, H, D), tk = view(k, B, N, H, D), tv = view(v, B, N, H, D),
                  to = view(o, B, N, H, D), W;
        int64_t nw[2] = {M, M};
        la_tensor_init(&W, Wd, LA_F32, LA_DEVICE_CUDA, 2, nw);
        char shape[64];
        snprintf(shape, sizeof shape, "H%lld D%lld N=%lld M=%lld", (long long)H, (long long)D,
                 (long long)N, (long long)M);
        const double io = 2.0 * B * N * H * 4 * D, SE = (double)D * D + D;
        const double fl_lin = 4.0 * B * N * H * D * D + 2.0 * B * N * H * 64 * D;
        la_linear_params pl;
        la_linear_params_init(&pl);
        pl.causal = 1;
        pl.normalize = 0;
        const double lin = time_ms([&] { return la_linear_attention(&pl, &tq, &tk, &tv, &to, 0, 0, 0, 0, BCTX); }, 20);
        report("linear-causal nonorm", shape, lin, io + 2.0 * B * N * H * 2 * D, fl_lin, lin);
        const double st_bytes = 4.0 * 4.0 * B * H * M * SE; /* fp32 states: 4 passes over them */
        const double fl_m = fl_lin + 2.0 * B * N * H * D * D + 2.0 * B * H * (M * (M - 1) / 2.0) * SE;
        for (const char *var : {"mma", "mma_bf16s", "mma_split", "portable"}) {
            if (!strcmp(var, "portable") && N > 32768) continue; /* minutes of device time */
            /* bf16 block states: half the state bytes */
            const double sb = !strcmp(var, "mma_bf16s") ? st_bytes / 2 : st_bytes;
            bench_variant("mhla_causal", var);
            const double ms = time_ms([&] { return la_mhla_causal_forward(&p, &tq, &tk, &tv, &W, &to, BCTX); },
                                      !strcmp(var, "portable") ? 3 : 10, !strcmp(var, "portable") ? 1 : 3);
            char name[48];
            snprintf(name, sizeof name, "mhla-causal %s", var);
            report(name, shape, ms, io + 2.0 * B * N * H * 2 * D + sb, fl_m, lin);
        }
        bench_variant("mhla_causal", nullptr);
    }
    return 0;
}
