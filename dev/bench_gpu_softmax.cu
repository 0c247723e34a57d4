/* Timing driver for CUDA softmax attention (issue 6) through the public C API.
 *
 * 1. Validation: the tensor-core kernel (variant "tc" of family "softmax")
 *    against the general CUDA kernel ("portable") on B=1, H=4 (GQA Hk=2),
 *    N=2048, D=128 bf16, causal and not, with lse: max |tc − old| / max |old|
 *    must be ≤ 1e-2 and lse within 1e-3.
 *    Exit status 1 on a mismatch (the timings are still printed).
 * 2. Timing: B=1, H=12, D=Dv=128 bf16 [B,N,H,D] contiguous, N ∈ {4K, 8K,
 *    16K, 32K}, causal and not: 3 warm-up calls, then the median of `reps`
 *    calls each timed with CUDA events. TFLOP/s with FLOPs = 4·N²·H·D
 *    (half for causal). Lines start with "softmax" and are parsed by
 *    tests/cuda/gpu_softmax.sh.
 *
 *   nvcc -O2 -std=c++17 -Iinclude -Isrc dev/bench_gpu_softmax.cu build-gpu/liblongattn.a \
 *        -Xcompiler -fopenmp -lopenblas -llapack -o build-gpu/bench_gpu_softmax
 *   build-gpu/bench_gpu_softmax [old]
 * old: also time the portable kernel at N = 4K (it runs at ~8 TFLOP/s:
 * longer N would take seconds per call).
 */
#include "bench_gpu_common.cuh"

static void set_path(const char *variant) { bench_variant("softmax", variant); }

static std::vector<float> download_bf16(const __nv_bfloat16 *d, size_t n) {
    std::vector<__nv_bfloat16> h(n);
    CK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; i++) f[i] = __bfloat162float(h[i]);
    return f;
}

/* tc (cfg) vs old on one mid-size case; returns true when they agree */
static bool validate(int causal) {
    const char *cfg = nullptr;
    const int64_t B = 1, N = 2048, H = 4, Hk = 2, D = 128;
    __nv_bfloat16 *q = make(B * N * H * D, 11, 1.f), *k = make(B * N * Hk * D, 12, 1.f),
                  *v = make(B * N * Hk * D, 13, 1.f), *o1, *o2;
    float *l1, *l2;
    const size_t no = B * N * H * D, nl = B * N * H;
    CK(cudaMalloc(&o1, no * 2));
    CK(cudaMalloc(&o2, no * 2));
    CK(cudaMalloc(&l1, nl * 4));
    CK(cudaMalloc(&l2, nl * 4));
    CK(cudaMemset(o1, 0xff, no * 2));
    CK(cudaMemset(o2, 0xff, no * 2));
    CK(cudaMemset(l1, 0xff, nl * 4));
    CK(cudaMemset(l2, 0xff, nl * 4));
    la_tensor tq = view(q, LA_BF16, 4, B, N, H, D), tk = view(k, LA_BF16, 4, B, N, Hk, D),
              tv = view(v, LA_BF16, 4, B, N, Hk, D), to1 = view(o1, LA_BF16, 4, B, N, H, D),
              to2 = view(o2, LA_BF16, 4, B, N, H, D), tl1 = view(l1, LA_F32, 3, B, N, H, 1),
              tl2 = view(l2, LA_F32, 3, B, N, H, 1);
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = causal;
    set_path("portable");
    la_status s1 = la_softmax_attention(&p, &tq, &tk, &tv, &to1, &tl1, BCTX);
    set_path("tc");
    la_status s2 = la_softmax_attention(&p, &tq, &tk, &tv, &to2, &tl2, BCTX);
    set_path(nullptr);
    CK(cudaDeviceSynchronize());
    bool ok = s1 == LA_OK && s2 == LA_OK;
    if (!ok) printf("validate cfg=%s causal=%d: call failed: %s\n", cfg ? cfg : "0", causal, la_last_error());
    std::vector<float> a = download_bf16(o1, no), b = download_bf16(o2, no);
    std::vector<float> la(nl), lb(nl);
    CK(cudaMemcpy(la.data(), l1, nl * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lb.data(), l2, nl * 4, cudaMemcpyDeviceToHost));
    double md = 0, mr = 0, ml = 0;
    size_t bad = 0;
    for (size_t i = 0; i < no; i++) {
        if (!std::isfinite(b[i]) || !std::isfinite(a[i])) {
            bad++;
            continue;
        }
        md = std::max(md, (double)std::fabs(a[i] - b[i]));
        mr = std::max(mr, (double)std::fabs(a[i]));
    }
    for (size_t i = 0; i < nl; i++) {
        if (!std::isfinite(lb[i]) || !std::isfinite(la[i])) {
            bad++;
            continue;
        }
        ml = std::max(ml, std::fabs((double)la[i] - lb[i]) / std::max(1.0, std::fabs((double)la[i])));
    }
    const double rel = md / std::max(mr, 1e-30);
    ok = ok && bad == 0 && rel <= 1e-2 && ml <= 1e-3;
    printf("validate tc cfg=%s vs old: B1 N2048 H4/2 D128 causal=%d  out rel %.2e  lse err %.1e  "
           "non-finite %zu  %s\n",
           cfg ? cfg : "0", causal, rel, ml, bad, ok ? "ok" : "FAIL");
    cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o1); cudaFree(o2); cudaFree(l1); cudaFree(l2);
    return ok;
}

int main(int argc, char **argv) {
    bool with_old = false;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "old")) with_old = true;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# %s, %d SMs\n", prop.name, prop.multiProcessorCount);

    bool ok = true;
    const char *cfgs[1] = {nullptr};
    for (int causal = 0; causal < 2; causal++) ok = validate(causal) && ok;

    const int64_t B = 1, H = 12, D = 128, Nmax = 32768;
    __nv_bfloat16 *q = make(B * Nmax * H * D, 1, 1.f), *k = make(B * Nmax * H * D, 2, 1.f),
                  *v = make(B * Nmax * H * D, 3, 1.f), *o = make(B * Nmax * H * D, 4, 1.f);
    const int64_t Ns[4] = {4096, 8192, 16384, 32768};
    const int ncfg = 1;
    for (int c = 0; c < ncfg; c++) {
        for (int causal = 0; causal < 2; causal++)
            for (int64_t N : Ns) {
                la_tensor tq = view(q, LA_BF16, 4, B, N, H, D), tk = view(k, LA_BF16, 4, B, N, H, D),
                          tv = view(v, LA_BF16, 4, B, N, H, D), to = view(o, LA_BF16, 4, B, N, H, D);
                la_softmax_params p;
                la_softmax_params_init(&p);
                p.causal = causal;
                set_path(nullptr);
                const int reps = N >= 16384 ? 10 : 20;
                const double ms = time_ms([&] { return la_softmax_attention(&p, &tq, &tk, &tv, &to, nullptr, BCTX); }, reps);
                const double fl = 4.0 * B * N * N * H * D * (causal ? 0.5 : 1.0);
                printf("softmax tc cfg=%s N=%lld causal=%d %9.4f ms %7.1f TFLOP/s\n", cfgs[c] ? cfgs[c] : "0",
                       (long long)N, causal, ms, fl / (ms * 1e-3) / 1e12);
                fflush(stdout);
            }
    }
    if (with_old) {
        const int64_t N = 4096;
        for (int causal = 0; causal < 2; causal++) {
            la_tensor tq = view(q, LA_BF16, 4, B, N, H, D), tk = view(k, LA_BF16, 4, B, N, H, D),
                      tv = view(v, LA_BF16, 4, B, N, H, D), to = view(o, LA_BF16, 4, B, N, H, D);
            la_softmax_params p;
            la_softmax_params_init(&p);
            p.causal = causal;
            set_path("portable");
            const double ms = time_ms([&] { return la_softmax_attention(&p, &tq, &tk, &tv, &to, nullptr, BCTX); }, 3);
            const double fl = 4.0 * B * N * N * H * D * (causal ? 0.5 : 1.0);
            printf("softmax old N=%lld causal=%d %9.4f ms %7.1f TFLOP/s\n", (long long)N, causal, ms,
                   fl / (ms * 1e-3) / 1e12);
        }
        set_path(nullptr);
    }
    cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o);
    printf("# validation %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
