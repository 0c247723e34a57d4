/* Timing driver for the causal MHLA forward (SPEC §5.4; family "mhla_causal",
 * src/cuda/mhla_causal_tc.cu) against causal linear attention, through the
 * public C API: B = 1, bf16 [B,N,H,D] contiguous, random inputs, a random
 * lower-triangular W (shared), chunk 64, normalize none, φ = relu. Per row:
 * the median of `reps` CUDA-event-timed calls after 3 warm-ups, and the
 * floors: bytes (q, k, v read, out written, plus the fp32 block states
 * written by pass 1, read and written by the mixing, read by pass 3) over
 * 4.2 TB/s and FLOPs (2·N·D·Dv pass 1, 4·N·D·Dv + 2·N·64·(D+Dv)/2 pass 3,
 * 2·(M²/2)·(D·Dv + D) the strict-triangle mixing) over 760 TFLOP/s.
 * Variants: the family's default pick ("default"), mma, mma_bf16s (bf16
 * block states: half the state bytes in its floor), mma_f16s (fp16 inputs:
 * scaled fp16 block states, the same bytes as mma_bf16s), mma_split and
 * portable (N <= 32K); each row ends with the variants the call takes
 * (bench_pick), a call the library refuses prints "refused: <message>"
 * (mma_bf16s on f16, mma_f16s on bf16). First a check: mma, mma_split,
 * mma_bf16s and mma_f16s against the portable engine at N = 4097 (max rel).
 *   build-gpu/dev/bench_gpu_mhla_causal [--dtype bf16|f16] [--variants LIST] [--no-check] [H D Ns...]
 *   (default bf16, default,mma,mma_bf16s,mma_f16s,mma_split,portable, 12 128 32768 131072; f16:
 *   the same values converted on the device, every row in f16)
 *   --passes: instead, where the time of mma_bf16s goes, with each bf16 mixing GEMM ("v1"
 *   mct_mix_bf16_kernel, "v2" mct_mix2_kernel, "wgmma" mct_mixw_kernel: family
 *   mhla_causal_mix; with --dtype f16: mma_f16s, its mixing split into the A' preparation
 *   and the fp16 wgmma GEMM, no GEMM-alone part): CUDA events on the
 *   stream after the W preparation and around the mixing (mct_dev_pass_events), medians of 10
 *   calls of W prep (with the workspace), pass 1, the mixing, pass 3, each against its byte
 *   floor (the mixing also in TFLOP/s on the strict triangle); then the mixing GEMM alone on
 *   random bf16 S and W (mct_dev_mix_bf16) at the same M, v2 and wgmma against v1 (max rel).
 */
#include "bench_gpu_common.cuh"
#include "cuda/mhla_causal_tc.cuh"

#include <cuda_fp16.h>

#include <string>

static void report(const char *op, const char *shape, la_dtype dt, const std::string &pick, double ms,
                   double bytes, double flops, double ref_ms) {
    const double fb = bytes / BW * 1e3, ff = flops / FL * 1e3;
    const char *dn = dt == LA_F16 ? "f16" : "bf16";
    if (pick == "refused")
        printf("%-24s %-22s %-4s refused: %s\n", op, shape, dn, la_last_error());
    else
        printf("%-24s %-22s %-4s %9.4f ms  byte-floor %7.4f  flop-floor %7.4f  x%.2f of floor  x%.2f of causal "
               "linear  pick %s\n",
               op, shape, dn, ms, fb, ff, ms / std::max(fb, ff), ref_ms > 0 ? ms / ref_ms : 1.0, pick.c_str());
    fflush(stdout);
}

/* bf16 values rewritten in place as f16 (the same numbers: |x| <= 1 here) */
__global__ void bf16_to_f16(__nv_bfloat16 *x, size_t n) {
    BENCH_GRID_STRIDE(i, n) ((__half *)x)[i] = __float2half_rn(__bfloat162float(x[i]));
}

__global__ void tril_fill(float *W, int64_t M) {
    BENCH_GRID_STRIDE(i, M * M) {
        const int64_t r = i / M, c = i % M;
        const uint32_t h = (uint32_t)(i * 2654435761u) ^ 0x9e3779b9u;
        W[i] = c <= r ? (0.05f + (h >> 8) * (1.f / 16777216.f)) / (float)(r + 1) : 0.f;
    }
}

/* the strict triangle of W (random, rows ~1/(i+1)) padded to [Mp][Mp] in bf16 */
__global__ void tril_pad_bf16(__nv_bfloat16 *W, int64_t M, int64_t Mp) {
    BENCH_GRID_STRIDE(i, Mp * Mp) {
        const int64_t r = i / Mp, c = i % Mp;
        const uint32_t h = (uint32_t)(i * 2654435761u) ^ 0x9e3779b9u;
        W[i] = __float2bfloat16_rn(r < M && c < r ? (0.05f + (h >> 8) * (1.f / 16777216.f)) / (float)(r + 1) : 0.f);
    }
}

static double med(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* --passes (see the head): bf16 (mma_bf16s) or f16 (mma_f16s), B = 1, the N's of the command line */
static int run_passes(la_dtype dt, int64_t H, int64_t D, const std::vector<int64_t> &Ns, __nv_bfloat16 *q,
                      __nv_bfloat16 *k, __nv_bfloat16 *v, __nv_bfloat16 *o, float *Wd) {
    const bool f16 = dt == LA_F16;
    cudaEvent_t ev[6];
    for (auto &e : ev) CK(cudaEventCreate(&e));
    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    const double SE = (double)D * D + D;
    for (int64_t N : Ns) {
        const int64_t M = (N + 63) / 64, Mp = (M + 127) / 128 * 128;
        tril_fill<<<256, 256>>>(Wd, M);
        CK(cudaDeviceSynchronize());
        la_tensor tq = view(q, dt, 4, 1, N, H, D), tk = view(k, dt, 4, 1, N, H, D), tv = view(v, dt, 4, 1, N, H, D),
                  to = view(o, dt, 4, 1, N, H, D), W;
        int64_t nw[2] = {M, M};
        la_tensor_init(&W, Wd, LA_F32, LA_DEVICE_CUDA, 2, nw);
        const double st = 2.0 * H * M * SE;           /* one bf16 state array */
        const double qkv = 2.0 * N * H * D;          /* one bf16 [N, H, D] tensor */
        const double fl_mix = 2.0 * H * (M * (M - 1) / 2.0) * SE;
        printf("# passes, H%lld D%lld N=%lld M=%lld (%s)\n", (long long)H, (long long)D, (long long)N,
               (long long)M, f16 ? "f16 states, mma_f16s" : "bf16 states, mma_bf16s");
        bench_variant("mhla_causal", f16 ? "mma_f16s" : "mma_bf16s");
        for (const char *mix : {"v1", "v2", "wgmma"}) {
            if (f16 && strcmp(mix, "wgmma")) continue; /* mma_f16s: its fp16 wgmma GEMM only */
            bench_variant("mhla_causal_mix", f16 ? nullptr : mix);
            const auto call = [&] { return la_mhla_causal_forward(&p, &tq, &tk, &tv, &W, &to, BCTX); };
            bool ok = true;
            for (int i = 0; i < 3 && ok; i++) ok = call() == LA_OK;
            if (!ok) {
                printf("passes mixing %s: refused: %s\n", mix, la_last_error());
                continue;
            }
            std::vector<float> tp, t1, tm, t3, tt, ta;
            mct_dev_pass_events(ev[1], ev[2], ev[3], f16 ? ev[5] : nullptr);
            for (int r = 0; r < 10; r++) {
                CK(cudaEventRecord(ev[0]));
                LK(call());
                CK(cudaEventRecord(ev[4]));
                CK(cudaEventSynchronize(ev[4]));
                float a, b, c, d, e;
                CK(cudaEventElapsedTime(&a, ev[0], ev[1]));
                CK(cudaEventElapsedTime(&b, ev[1], ev[2]));
                CK(cudaEventElapsedTime(&c, ev[2], ev[3]));
                CK(cudaEventElapsedTime(&d, ev[3], ev[4]));
                CK(cudaEventElapsedTime(&e, ev[0], ev[4]));
                tp.push_back(a), t1.push_back(b), tm.push_back(c), t3.push_back(d), tt.push_back(e);
                if (f16) {
                    CK(cudaEventElapsedTime(&a, ev[2], ev[5]));
                    ta.push_back(a);
                }
            }
            mct_dev_pass_events(nullptr, nullptr, nullptr);
            /* floors: pass 1 reads k, v and writes the states; the mixing reads
             * and writes a state array (W is small); pass 3 reads q, k, v and H,
             * writes out */
            const double f1 = (2 * qkv + st) / BW * 1e3, fm = 2 * st / BW * 1e3, f3 = (4 * qkv + st) / BW * 1e3;
            printf("passes mixing %s  total %.4f ms  W prep %.4f  pass 1 %.4f (floor %.4f)  mixing %.4f (floor %.4f, "
                   "%.0f TFLOP/s strict)  pass 3 %.4f (floor %.4f)\n",
                   mix, med(tt), med(tp), med(t1), f1, med(tm), std::max(fm, fl_mix / FL * 1e3),
                   fl_mix / (med(tm) * 1e-3) / 1e12, med(t3), f3);
            if (f16) /* A' (B·H·M²/2 fp16 written, W and σ read) */
                printf("passes mma_f16s  A' preparation %.4f ms (floor %.4f), fp16 GEMM %.4f ms (%.0f TFLOP/s strict)\n",
                       med(ta), (double)H * Mp * Mp / BW * 1e3, med(tm) - med(ta),
                       fl_mix / ((med(tm) - med(ta)) * 1e-3) / 1e12);
            fflush(stdout);
        }
        bench_variant("mhla_causal_mix", nullptr);
        bench_variant("mhla_causal", nullptr);
        if (f16) continue; /* the GEMM alone: bf16 (mct_dev_mix_bf16) */
        /* the GEMM alone on random states: v1 against v2 */
        const size_t ns = (size_t)H * M * (size_t)SE;
        __nv_bfloat16 *S = make(ns, 11, 0.1f), *H1, *H2, *Wp;
        CK(cudaMalloc(&H1, ns * 2));
        CK(cudaMalloc(&H2, ns * 2));
        CK(cudaMalloc(&Wp, (size_t)Mp * Mp * 2));
        tril_pad_bf16<<<1024, 256>>>(Wp, M, Mp);
        CK(cudaGetLastError());
        std::vector<uint16_t> a(ns), b(ns);
        for (const char *impl : {"v1", "v2", "wgmma"}) {
            const bool v1 = !strcmp(impl, "v1");
            __nv_bfloat16 *Ho = v1 ? H1 : H2;
            CK(cudaMemset(Ho, 0xff, ns * 2));
            if (mct_dev_mix_bf16(impl, Wp, Mp, 1, S, Ho, H, H, M, (int64_t)SE, 0) != LA_OK) {
                printf("mixing alone %s: refused: %s\n", impl, la_last_error());
                continue;
            }
            const auto g = [&] { LK(mct_dev_mix_bf16(impl, Wp, Mp, 1, S, Ho, H, H, M, (int64_t)SE, 0)); };
            const double ms = median_ms(g, 2, 10);
            CK(cudaMemcpy(v1 ? a.data() : b.data(), Ho, ns * 2, cudaMemcpyDeviceToHost));
            double md = 0, mr = 0;
            int64_t bad = 0;
            for (size_t i = 0; !v1 && i < ns; i++) {
                const double x = host_of_bf16(a[i]), y = host_of_bf16(b[i]);
                if (!std::isfinite(x) || !std::isfinite(y)) bad++;
                else md = std::max(md, fabs(x - y)), mr = std::max(mr, fabs(x));
            }
            printf("mixing alone %-5s M=%lld SE=%.0f B*H=%lld: %.4f ms, %.0f TFLOP/s on the strict triangle", impl,
                   (long long)M, SE, (long long)H, ms, fl_mix / (ms * 1e-3) / 1e12);
            if (v1) printf("\n");
            else printf("  vs v1: max rel %.3e, nonfinite %lld %s\n", mr > 0 ? md / mr : 0.0, (long long)bad,
                        bad == 0 && md <= 1e-2 * mr ? "ok" : "FAIL");
            fflush(stdout);
        }
        CK(cudaFree(S));
        CK(cudaFree(H1));
        CK(cudaFree(H2));
        CK(cudaFree(Wp));
    }
    for (auto &e : ev) CK(cudaEventDestroy(e));
    return 0;
}

int main(int argc, char **argv) {
    la_dtype dt = LA_BF16;
    bool check = true, passes = false;
    std::string vlist = "default,mma,mma_bf16s,mma_f16s,mma_split,portable";
    std::vector<const char *> pos;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dtype") && i + 1 < argc && (!strcmp(argv[i + 1], "bf16") || !strcmp(argv[i + 1], "f16")))
            dt = !strcmp(argv[++i], "f16") ? LA_F16 : LA_BF16;
        else if (!strcmp(argv[i], "--variants") && i + 1 < argc)
            vlist = argv[++i];
        else if (!strcmp(argv[i], "--no-check"))
            check = false;
        else if (!strcmp(argv[i], "--passes"))
            passes = true;
        else if (argv[i][0] >= '0' && argv[i][0] <= '9')
            pos.push_back(argv[i]);
        else {
            fprintf(stderr, "bench_gpu_mhla_causal: unknown argument '%s' (--dtype bf16|f16, --variants LIST, "
                            "--no-check, --passes, H D Ns...)\n", argv[i]);
            return 2;
        }
    }
    std::vector<std::string> variants;
    for (size_t b = 0; b <= vlist.size();) {
        const size_t e = std::min(vlist.find(',', b), vlist.size());
        if (e > b) variants.push_back(vlist.substr(b, e - b));
        b = e + 1;
    }
    const int64_t B = 1, H = pos.size() >= 2 ? atoll(pos[0]) : 12, D = pos.size() >= 2 ? atoll(pos[1]) : 128;
    std::vector<int64_t> Ns;
    for (size_t i = 2; i < pos.size(); i++) Ns.push_back(atoll(pos[i]));
    if (Ns.empty()) Ns = {32768, 131072};
    int64_t Nmax = 4097;
    for (int64_t n : Ns) Nmax = std::max(Nmax, n);
    const size_t ne = (size_t)B * Nmax * H * D;
    __nv_bfloat16 *q = make(ne, 1), *k = make(ne, 2), *v = make(ne, 3), *o = make(ne, 4), *o2 = make(ne, 5);
    if (dt == LA_F16)
        for (__nv_bfloat16 *x : {q, k, v}) {
            bf16_to_f16<<<1024, 256>>>(x, ne);
            CK(cudaGetLastError());
        }
    auto tview = [&](void *x, int64_t N) { return view(x, dt, 4, B, N, H, D); };
    const int64_t Mmax = (Nmax + 63) / 64;
    float *Wd;
    CK(cudaMalloc(&Wd, sizeof(float) * Mmax * Mmax));
    if (passes) return run_passes(dt, H, D, Ns, q, k, v, o, Wd);
    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    if (check) { /* mma, mma_split, mma_bf16s and mma_f16s against the portable engine at N = 4097 */
        const int64_t N = 4097, M = (N + 63) / 64;
        tril_fill<<<256, 256>>>(Wd, M);
        la_tensor tq = tview(q, N), tk = tview(k, N), tv = tview(v, N), to = tview(o, N), t2 = tview(o2, N), W;
        int64_t nw[2] = {M, M};
        la_tensor_init(&W, Wd, LA_F32, LA_DEVICE_CUDA, 2, nw);
        const size_t n = (size_t)B * N * H * D;
        std::vector<uint16_t> a(n), b(n);
        auto val = [&](uint16_t x) {
            return dt == LA_F16 ? (double)__half2float(__ushort_as_half(x))
                                : (double)__bfloat162float(__ushort_as_bfloat16(x));
        };
        bench_variant("mhla_causal", "portable");
        if (la_mhla_causal_forward(&p, &tq, &tk, &tv, &W, &to, BCTX) != LA_OK) {
            printf("# check: portable refused: %s\n", la_last_error());
        } else {
            CK(cudaMemcpy(a.data(), o, n * 2, cudaMemcpyDeviceToHost));
            for (const char *var : {"mma", "mma_split", "mma_bf16s", "mma_f16s"}) {
                bench_variant("mhla_causal", var);
                CK(cudaMemset(o2, 0xff, n * 2));
                if (la_mhla_causal_forward(&p, &tq, &tk, &tv, &W, &t2, BCTX) != LA_OK) {
                    printf("# check %s: refused: %s\n", var, la_last_error());
                    continue;
                }
                CK(cudaMemcpy(b.data(), o2, n * 2, cudaMemcpyDeviceToHost));
                double md = 0, mr = 0;
                int64_t bad = 0;
                for (size_t i = 0; i < n; i++) {
                    const double x = val(a[i]), y = val(b[i]);
                    if (!std::isfinite(y)) bad++;
                    md = std::max(md, fabs(x - y));
                    mr = std::max(mr, fabs(x));
                }
                printf("# check %s vs portable, %s H%lld D%lld N%lld: max rel %.3e, nonfinite %lld %s\n", var,
                       dt == LA_F16 ? "f16" : "bf16", (long long)H, (long long)D, (long long)N, md / mr,
                       (long long)bad, bad == 0 && md / mr < 2e-2 ? "ok" : "FAIL");
            }
        }
        bench_variant("mhla_causal", nullptr);
    }
    for (int64_t N : Ns) {
        const int64_t M = (N + 63) / 64;
        tril_fill<<<256, 256>>>(Wd, M);
        CK(cudaDeviceSynchronize());
        la_tensor tq = tview(q, N), tk = tview(k, N), tv = tview(v, N), to = tview(o, N), W;
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
        const std::function<la_status()> lcall = [&] {
            return la_linear_attention(&pl, &tq, &tk, &tv, &to, 0, 0, 0, 0, BCTX);
        };
        const std::string lpick = bench_pick(lcall);
        const double lin = lpick == "refused" ? NAN : time_ms(lcall, 20);
        report("linear-causal nonorm", shape, dt, lpick, lin, io + 2.0 * B * N * H * 2 * D, fl_lin, lin);
        const double st_bytes = 4.0 * 4.0 * B * H * M * SE; /* fp32 states: 4 passes over them */
        const double fl_m = fl_lin + 2.0 * B * N * H * D * D + 2.0 * B * H * (M * (M - 1) / 2.0) * SE;
        for (const std::string &vs : variants) {
            const char *var = vs.c_str();
            if (!strcmp(var, "portable") && N > 32768) continue; /* minutes of device time */
            const bool dflt = !strcmp(var, "default");
            bench_variant("mhla_causal", dflt ? nullptr : var);
            const std::function<la_status()> call = [&] {
                return la_mhla_causal_forward(&p, &tq, &tk, &tv, &W, &to, BCTX);
            };
            const std::string pick = bench_pick(call);
            /* 16-bit block states (mma_bf16s, mma_f16s, or the default when it picks one): half
             * the state bytes */
            const double sb = pick.find("mma_bf16s") != std::string::npos || pick.find("mma_f16s") != std::string::npos
                                  ? st_bytes / 2 : st_bytes;
            const double ms = pick == "refused" ? NAN
                              : time_ms(call, !strcmp(var, "portable") ? 3 : 10, !strcmp(var, "portable") ? 1 : 3);
            char name[48];
            snprintf(name, sizeof name, "mhla-causal %s", var);
            report(name, shape, dt, pick, ms, io + 2.0 * B * N * H * 2 * D + sb, fl_m, lin);
        }
        bench_variant("mhla_causal", nullptr);
    }
    return 0;
}
