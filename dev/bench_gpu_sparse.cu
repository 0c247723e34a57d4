/* Benchmark of the CUDA sparse family through the public API (device
 * tensors, cudaEvents, medians of N timed calls after warm-up).
 *   bench_gpu_sparse [quick]
 * Shapes (issue 7): HI=64, dI=128, k=2048, B=128, m=64, Tq=1024 queries at
 * the end of an L-token context (causal default ranges), bf16 q/k, f32 w;
 * top-k alone over 1024 x 64K f32; sparse MLA attention Tq=4096, Hq=128,
 * k=2048, Dqk=576, Dv=512, bf16.
 * Floors: bytes / 4.2 TB/s and FLOPs / 760 TFLOP/s (measured ceilings). */
#define BENCH_CK_WHERE /* "CUDA <call> at file:line" and "<call> -> status" messages */
#include "bench_gpu_common.cuh"

#include <cuda_fp8.h>

static void *dmalloc(size_t n) {
    void *p;
    CK(cudaMalloc(&p, n));
    return p;
}

/* fp8 / DSA v2 cases (issue 7, DSA engineer): defined at the end of the file */
static void bench_dsa_v2(const cudaDeviceProp &prop);

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    /* "one": each op once at L = 64K (for ncu kernel timings) */
    const bool one = argc > 1 && !strcmp(argv[1], "one");
    /* "topkhisa": top-k new vs old (+ agreement), DSA and HISA new vs old at
     * L = 64K and 128K (tests/cuda/gpu_topk_hisa.sh); no sparse MLA */
    const bool th = argc > 1 && !strcmp(argv[1], "topkhisa");
    /* "topk3": only the top-k block below, at L = 64K, 8K, 128K, with the
     * default kernel's prefetch distances (tests/cuda/gpu_topk3.sh) */
    const bool t3 = argc > 1 && !strcmp(argv[1], "topk3");
    /* "topk3 one": two default calls at 1024 x 64K (for ncu) */
    if (t3 && argc > 2 && !strcmp(argv[2], "one")) {
        const int64_t R = 1024, L = 65536, K = 2048;
        float *sc = (float *)dmalloc(R * L * 4);
        int32_t *ix = (int32_t *)dmalloc(R * K * 4);
        fill_f32<<<1024, 256>>>(sc, R * L, 7, 1.f);
        la_tensor ts, ti;
        int64_t ne[2] = {R, L}, ni[2] = {R, K};
        la_tensor_init(&ts, sc, LA_F32, LA_DEVICE_CUDA, 2, ne);
        la_tensor_init(&ti, ix, LA_I32, LA_DEVICE_CUDA, 2, ni);
        LK(la_topk(&ts, &ti, BCTX));
        LK(la_topk(&ts, &ti, BCTX));
        CK(cudaDeviceSynchronize());
        printf("topk3 one: done\n");
        return 0;
    }
    /* keep the stream-ordered pool's memory between calls (the library's
     * workspace comes from cudaMallocAsync) */
    cudaMemPool_t pool;
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    uint64_t thr = UINT64_MAX;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# device %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    if (argc > 1 && !strcmp(argv[1], "dsa")) { /* bench_gpu_sparse dsa: only the fp8 / DSA v2 block */
        bench_dsa_v2(prop);
        return 0;
    }
    /* ---- top-k alone: 1024 x 64K f32 (and HISA's 1024 x 8K candidate rows,
     * and 1024 x 128K); the default kernel (t3_kernel, no L2 prefetch), the
     * radix-select kernel (variant "portable" of family "topk"), with the
     * number of indices that differ from the default's ---- */
    for (int64_t L : {(int64_t)65536, (int64_t)8192, (int64_t)131072}) {
        if (L != 65536 && !th && !t3) continue;
        const int64_t R = 1024, K = 2048;
        float *sc = (float *)dmalloc(R * L * 4);
        int32_t *ix = (int32_t *)dmalloc(R * K * 4), *ix2 = (int32_t *)dmalloc(R * K * 4);
        fill_f32<<<1024, 256>>>(sc, R * L, 7, 1.f);
        la_tensor ts, ti, ti2;
        int64_t ne[2] = {R, L}, ni[2] = {R, K};
        la_tensor_init(&ts, sc, LA_F32, LA_DEVICE_CUDA, 2, ne);
        la_tensor_init(&ti, ix, LA_I32, LA_DEVICE_CUDA, 2, ni);
        la_tensor_init(&ti2, ix2, LA_I32, LA_DEVICE_CUDA, 2, ni);
        double ms = median_ms([&] { LK(la_topk(&ts, &ti, BCTX)); }, one ? 0 : 3, one ? 1 : 20);
        double floor_ms = R * L * 4.0 / BW * 1e3;
        printf("topk     R=%lld L=%lld k=%lld: %.3f ms (read-once floor %.3f ms, %.0f GB/s effective)\n",
               (long long)R, (long long)L, (long long)K, ms, floor_ms, R * L * 4.0 / ms / 1e6);
        if (!one) {
            bench_variant("topk", "portable");
            double mo = median_ms([&] { LK(la_topk(&ts, &ti2, BCTX)); }, 3, 20);
            bench_variant("topk", nullptr);
            std::vector<int32_t> a(R * K), b(R * K);
            CK(cudaMemcpy(a.data(), ix, R * K * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(b.data(), ix2, R * K * 4, cudaMemcpyDeviceToHost));
            int64_t diff = 0;
            for (int64_t i = 0; i < R * K; i++) diff += a[i] != b[i];
            printf("topk_old R=%lld L=%lld k=%lld: %.3f ms (new/old %.2fx faster; %lld indices differ)\n",
                   (long long)R, (long long)L, (long long)K, mo, mo / ms, (long long)diff);
        }
        CK(cudaFree(sc));
        CK(cudaFree(ix));
        CK(cudaFree(ix2));
    }
    if (t3) return 0;

    /* ---- indexers ---- */
    const int64_t T = 1024, HI = 64, dI = 128, K = 2048;
    std::vector<int64_t> Ls = {8192, 16384, 32768, 65536, 131072, 262144};
    if (quick) Ls = {8192, 65536};
    if (one) Ls = {65536};
    if (th) Ls = {65536, 131072};
    printf("%-8s %8s %10s %10s %10s %10s %8s\n", "op", "L", "ms", "TFLOP/s", "floor_ms", "hisa_x", "");
    for (int64_t L : Ls) {
        uint16_t *q = (uint16_t *)dmalloc(T * HI * dI * 2), *k = (uint16_t *)dmalloc(L * dI * 2);
        float *w = (float *)dmalloc(T * HI * 4);
        int32_t *ix = (int32_t *)dmalloc(T * K * 4);
        fill_bf16<<<1024, 256>>>(q, T * HI * dI, 1, 1.f);
        fill_bf16<<<1024, 256>>>(k, L * dI, 2, 1.f);
        fill_f32<<<64, 256>>>(w, T * HI, 3, 1.f / sqrtf((float)(HI * dI)));
        la_tensor tq, tk, tw, ti;
        int64_t nq[3] = {T, HI, dI}, nk[2] = {L, dI}, nw[2] = {T, HI}, ni[2] = {T, K};
        la_tensor_init(&tq, q, LA_BF16, LA_DEVICE_CUDA, 3, nq);
        la_tensor_init(&tk, k, LA_BF16, LA_DEVICE_CUDA, 2, nk);
        la_tensor_init(&tw, w, LA_F32, LA_DEVICE_CUDA, 2, nw);
        la_tensor_init(&ti, ix, LA_I32, LA_DEVICE_CUDA, 2, ni);
        la_index_params p;
        la_index_params_init(&p);
        const int it = one ? 1 : (L >= 131072 ? 5 : 10);
        double dsa = median_ms([&] { LK(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL, BCTX)); }, one ? 0 : 2, it);
        /* causal: query t sees L - T + t + 1 keys */
        double keys = (double)T * (L - T) + (double)T * (T + 1) / 2;
        double fl = 2.0 * HI * dI * keys;
        double floor_ms = std::max(fl / FL, (L * dI * 2.0 + T * HI * dI * 2.0 + T * (double)L * 8) / BW) * 1e3;
        printf("%-8s %8lld %10.3f %10.1f %10.3f %10s\n", "dsa", (long long)L, dsa, fl / dsa / 1e9, floor_ms, "");
        double hisa = median_ms([&] { LK(la_hisa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, BCTX)); }, one ? 0 : 2, it);
        const int64_t nb = (L + 127) / 128, mk = std::min<int64_t>(64, nb);
        double hfl = 2.0 * HI * dI * T * (double)(nb + mk * 128);
        printf("%-8s %8lld %10.3f %10.1f %10s %10.2f\n", "hisa", (long long)L, hisa, hfl / hisa / 1e9, "", dsa / hisa);
        if (th) {
            /* HISA per stage-2 variant (family "hisa": the default =
             * the block-major hb2_kernel, "gather" = sc_gather_kernel), side by side
             * with the DSA, and the indices each path selects vs the
             * default's (same arithmetic: must be 0); 20 timed calls each,
             * then 20 back-to-back calls of the default between two events
             * (the host's launch and workspace overhead overlaps the GPU
             * there, while the per-call medians count the host time before
             * the first kernel of each call). */
            std::vector<int32_t> a(T * K), b(T * K);
            CK(cudaMemcpy(a.data(), ix, T * K * 4, cudaMemcpyDeviceToHost));
            const char *paths[2] = {"gather", nullptr};
            for (const char *path : paths) {
                bench_variant("hisa", path);
                CK(cudaMemset(ix, 0xff, T * K * 4));
                double hp = median_ms([&] { LK(la_hisa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, BCTX)); }, 2, 20);
                CK(cudaMemcpy(b.data(), ix, T * K * 4, cudaMemcpyDeviceToHost));
                bench_variant("hisa", nullptr);
                int64_t diff = 0;
                for (int64_t i = 0; i < T * K; i++) diff += a[i] != b[i];
                printf("hisa_%-9s %6lld %10.3f %10.1f %10s %10.2f  (dsa %.3f ms; %.2fx of the default's time; %lld indices differ)\n",
                       path ? path : "default", (long long)L, hp, hfl / hp / 1e9, "", dsa / hp, dsa, hp / hisa,
                       (long long)diff);
            }
            {
                LK(la_hisa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, BCTX));
                const double bms = batch_ms([&] { LK(la_hisa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, BCTX)); }, 20);
                printf("hisa_batch %lld %8.3f ms per call (20 back to back; dsa/this %.2fx)\n", (long long)L, bms,
                       dsa / bms);
            }
            fflush(stdout);
            fflush(stderr);
        }
        double bs = median_ms([&] { LK(la_blocksparse_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, BCTX)); }, one ? 0 : 2, it);
        printf("%-8s %8lld %10.3f\n", "blocksp", (long long)L, bs);
        CK(cudaFree(q));
        CK(cudaFree(k));
        CK(cudaFree(w));
        CK(cudaFree(ix));
    }

    /* ---- sparse MLA attention ---- */
    if (!th) {
        const int64_t Tq = (quick || one) ? 1024 : 4096, Hq = 128, Dqk = 576, Dv = 512, KK = 2048, L = 65536;
        uint16_t *q = (uint16_t *)dmalloc(Tq * Hq * Dqk * 2), *kv = (uint16_t *)dmalloc(L * Dqk * 2);
        uint16_t *o = (uint16_t *)dmalloc(Tq * Hq * Dv * 2);
        float *lse = (float *)dmalloc(Tq * Hq * 4);
        int32_t *ix = (int32_t *)dmalloc(Tq * KK * 4);
        fill_bf16<<<1024, 256>>>(q, Tq * Hq * Dqk, 11, 1.f);
        fill_bf16<<<1024, 256>>>(kv, L * Dqk, 12, 1.f);
        fill_idx<<<1024, 256>>>(ix, Tq * KK, L, 13, false);
        la_tensor tq, tkv, ti, to, tl;
        int64_t nq[3] = {Tq, Hq, Dqk}, nkv[2] = {L, Dqk}, ni[2] = {Tq, KK}, no[3] = {Tq, Hq, Dv}, nl[2] = {Tq, Hq};
        la_tensor_init(&tq, q, LA_BF16, LA_DEVICE_CUDA, 3, nq);
        la_tensor_init(&tkv, kv, LA_BF16, LA_DEVICE_CUDA, 2, nkv);
        la_tensor_init(&ti, ix, LA_I32, LA_DEVICE_CUDA, 2, ni);
        la_tensor_init(&to, o, LA_BF16, LA_DEVICE_CUDA, 3, no);
        la_tensor_init(&tl, lse, LA_F32, LA_DEVICE_CUDA, 2, nl);
        la_sparse_attn_params p;
        la_sparse_attn_params_init(&p);
        double ms = median_ms([&] { LK(la_sparse_attention(&p, &tq, &tkv, &ti, &to, &tl, BCTX)); }, one ? 0 : 2, one ? 1 : 10);
        double fl = 2.0 * Tq * Hq * KK * (double)(Dqk + Dv);
        printf("sparse_mla Tq=%lld Hq=%lld k=%lld L=%lld: %.3f ms, %.1f TFLOP/s (floor %.3f ms)\n",
               (long long)Tq, (long long)Hq, (long long)KK, (long long)L, ms, fl / ms / 1e9, fl / FL * 1e3);
        CK(cudaFree(q));
        CK(cudaFree(kv));
        CK(cudaFree(o));
        CK(cudaFree(lse));
        CK(cudaFree(ix));
    }
    return 0;
}

/* ======================================================================== */
/* fp8 / DSA v2 block (DSA engineer; `bench_gpu_sparse dsa` runs only this)  */
/* ======================================================================== */
/* Flat DSA indexer incl. top-k, T=1024 queries at the end of L tokens
 * (causal), HI=64, dI=128, k=2048: bf16 on the wgmma v2 kernel (default) and
 * on the mma.sync kernel (variant "mma" of family "dsa"), fp8 e4m3 (k_scale [L],
 * q_scale [T,HI]) on both. Each: median of 10 CUDA-event timings of the
 * public call; the row top-k alone (la_topk over the returned score rows)
 * is timed too, so "scores" = total - top-k. Goals: 2.0 ms bf16, 1.2 ms
 * fp8 at L = 64K. */
__global__ void fill_e4m3(uint8_t *p, size_t n, uint64_t seed) {
    BENCH_GRID_STRIDE(i, n) {
        const float u = bench_unit(bench_mix(i, seed)) * 2.f - 1.f; /* as amax-scaled data: |x| <= 448 */
        p[i] = (uint8_t)__nv_cvt_float_to_fp8(u * 448.f, __NV_SATFINITE, __NV_E4M3);
    }
}
__global__ void fill_pos(float *p, size_t n, uint64_t seed, float scale) { /* scale * [0.5, 1.5) */
    BENCH_GRID_STRIDE(i, n) p[i] = scale * (0.5f + bench_unit(bench_mix(i, seed, false)));
}
static void bench_dsa_v2(const cudaDeviceProp &prop) {
    const int64_t T = 1024, HI = 64, dI = 128, K = 2048;
    const int64_t Ls[3] = {8192, 65536, 131072};
    printf("# DSA v2 / fp8: T=%lld HI=%lld dI=%lld k=%lld causal; %d SMs; median of 10 CUDA-event timings\n",
           (long long)T, (long long)HI, (long long)dI, (long long)K, prop.multiProcessorCount);
    printf("%-10s %7s %9s %9s %9s %9s %9s %8s %8s\n", "dsa", "L", "total_ms", "TFLOP/s", "topk_ms", "score_ms",
           "sc_TF/s", "goal_x", "vs_old");
    for (int64_t L : Ls) {
        uint16_t *q = (uint16_t *)dmalloc(T * HI * dI * 2), *k = (uint16_t *)dmalloc(L * dI * 2);
        uint8_t *q8 = (uint8_t *)dmalloc(T * HI * dI), *k8 = (uint8_t *)dmalloc(L * dI);
        float *w = (float *)dmalloc(T * HI * 4), *ks = (float *)dmalloc(L * 4), *qs = (float *)dmalloc(T * HI * 4);
        float *sc = (float *)dmalloc(T * L * 4);
        int32_t *ix = (int32_t *)dmalloc(T * K * 4);
        fill_bf16<<<1024, 256>>>(q, T * HI * dI, 21, 1.f);
        fill_bf16<<<1024, 256>>>(k, L * dI, 22, 1.f);
        fill_e4m3<<<1024, 256>>>(q8, T * HI * dI, 23);
        fill_e4m3<<<1024, 256>>>(k8, L * dI, 24);
        fill_f32<<<64, 256>>>(w, T * HI, 25, 1.f / sqrtf((float)(HI * dI)));
        fill_pos<<<256, 256>>>(ks, L, 26, 1.f / 448.f);
        fill_pos<<<64, 256>>>(qs, T * HI, 27, 1.f / 448.f);
        CK(cudaGetLastError());
        la_tensor tq, tk, tq8, tk8, tw, tks, tqs, tsc, ti;
        int64_t nq[3] = {T, HI, dI}, nk[2] = {L, dI}, nw[2] = {T, HI}, nks[1] = {L}, ns[2] = {T, L}, ni[2] = {T, K};
        la_tensor_init(&tq, q, LA_BF16, LA_DEVICE_CUDA, 3, nq);
        la_tensor_init(&tk, k, LA_BF16, LA_DEVICE_CUDA, 2, nk);
        la_tensor_init(&tq8, q8, LA_FP8_E4M3, LA_DEVICE_CUDA, 3, nq);
        la_tensor_init(&tk8, k8, LA_FP8_E4M3, LA_DEVICE_CUDA, 2, nk);
        la_tensor_init(&tw, w, LA_F32, LA_DEVICE_CUDA, 2, nw);
        la_tensor_init(&tks, ks, LA_F32, LA_DEVICE_CUDA, 1, nks);
        la_tensor_init(&tqs, qs, LA_F32, LA_DEVICE_CUDA, 2, nw);
        la_tensor_init(&tsc, sc, LA_F32, LA_DEVICE_CUDA, 2, ns);
        la_tensor_init(&ti, ix, LA_I32, LA_DEVICE_CUDA, 2, ni);
        la_index_params pb, p8;
        la_index_params_init(&pb);
        la_index_params_init(&p8);
        p8.k_scale = &tks;
        p8.q_scale = &tqs;
        const double keys = (double)T * (L - T) + (double)T * (T + 1) / 2;
        const double fl = 2.0 * HI * dI * keys;
        double old_ms[2] = {0, 0};
        /* order: old first so "vs_old" of the new rows has its reference */
        const char *names[4] = {"bf16/old", "bf16/v2", "fp8/old", "fp8/v2"};
        for (int v = 0; v < 4; v++) {
            const bool f8 = v >= 2, old = (v & 1) == 0;
            bench_variant("dsa", old ? "mma" : nullptr);
            la_index_params *prm = f8 ? &p8 : &pb;
            la_tensor *qq = f8 ? &tq8 : &tq, *kk = f8 ? &tk8 : &tk;
            const double ms = median_ms([&] { LK(la_dsa_indexer(prm, qq, kk, &tw, NULL, NULL, &ti, NULL, BCTX)); }, 2, 10);
            /* top-k alone over this variant's score rows */
            LK(la_dsa_indexer(prm, qq, kk, &tw, NULL, NULL, &ti, &tsc, BCTX));
            const double tk_ms = median_ms([&] { LK(la_topk(&tsc, &ti, BCTX)); }, 1, 10);
            const double sms = ms - tk_ms;
            const double goal = f8 ? 1.2 : 2.0;
            if (old) old_ms[f8] = ms;
            char vs[16] = "";
            if (!old && old_ms[f8] > 0) snprintf(vs, sizeof vs, "%.2fx", old_ms[f8] / ms);
            printf("%-10s %7lld %9.3f %9.1f %9.3f %9.3f %9.1f %8.2f %8s\n", names[v], (long long)L, ms, fl / ms / 1e9,
                   tk_ms, sms, sms > 0 ? fl / sms / 1e9 : 0.0, goal / ms, vs);
        }
        bench_variant("dsa", nullptr);
        /* HISA (B = 128, m = 64) on the same inputs: bf16, and fp8 with the
         * scales (dequantized f32 copies through the exact kernels) */
        {
            la_index_params hb = pb, h8 = p8;
            hb.block = h8.block = 128;
            hb.block_topk = h8.block_topk = 64;
            const double mb = median_ms([&] { LK(la_hisa_indexer(&hb, &tq, &tk, &tw, NULL, NULL, &ti, BCTX)); }, 2, 10);
            bench_variant("hisa", "portable"); /* the dequantized f32 route */
            const double m8 = median_ms([&] { LK(la_hisa_indexer(&h8, &tq8, &tk8, &tw, NULL, NULL, &ti, BCTX)); }, 1, 5);
            printf("%-10s %7lld %9.3f\n%-10s %7lld %9.3f   (hisa portable: dequantized f32 copies, exact kernels)\n", "hisa/bf16",
                   (long long)L, mb, "hisa/fp8", (long long)L, m8);
            /* fp8 on e4m3 wgmma (the default: bf16 stage 1, hb2_kernel<1> stage 2):
             * time, and its rows against the portable fp8 rows (the CPU's indices
             * on the dequantized inputs): recall of those sets. Where every block
             * is kept (8K) the default is the DSA route; "hisa/fp8wgf" (variant
             * "hb2") runs the new stage 2 there, whose indices must equal the DSA
             * fp8 indices (printed: positions differing). */
            std::vector<int32_t> ref((size_t)(T * K)), got((size_t)(T * K));
            LK(la_hisa_indexer(&h8, &tq8, &tk8, &tw, NULL, NULL, &ti, BCTX));
            bench_variant("hisa", nullptr);
            CK(cudaMemcpy(ref.data(), ix, (size_t)(T * K) * 4, cudaMemcpyDeviceToHost));
            const bool all_kept = (L + 127) / 128 <= 64;
            for (int f = 0; f < (all_kept ? 2 : 1); f++) {
                bench_variant("hisa", f ? "hb2" : nullptr);
                const double mw = median_ms([&] { LK(la_hisa_indexer(&h8, &tq8, &tk8, &tw, NULL, NULL, &ti, BCTX)); }, 2, 10);
                LK(la_hisa_indexer(&h8, &tq8, &tk8, &tw, NULL, NULL, &ti, BCTX));
                CK(cudaDeviceSynchronize());
                bench_variant("hisa", nullptr);
                CK(cudaMemcpy(got.data(), ix, (size_t)(T * K) * 4, cudaMemcpyDeviceToHost));
                int64_t hits = 0, tot = 0, npos = 0;
                for (int64_t t = 0; t < T; t++) {
                    std::vector<int32_t> a(ref.begin() + t * K, ref.begin() + (t + 1) * K),
                        b(got.begin() + t * K, got.begin() + (t + 1) * K);
                    for (int64_t j = 0; j < K; j++) npos += a[j] != b[j];
                    std::sort(a.begin(), a.end());
                    std::sort(b.begin(), b.end());
                    for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
                        if (a[i] < 0) { i++; continue; }
                        if (a[i] == b[j]) hits++, i++, j++;
                        else if (a[i] < b[j]) i++;
                        else j++;
                    }
                    for (int32_t v : a) tot += v >= 0;
                }
                printf("%-10s %7lld %9.3f   (%s; %.2fx hisa/fp8, %.2fx hisa/bf16; vs hisa/fp8: recall %.5f, "
                       "%lld positions differ)\n", f ? "hisa/fp8wgf" : "hisa/fp8wg", (long long)L, mw,
                       f ? "variant hb2: hb2_kernel<1> with every block kept; hisa/fp8 is the DSA route here"
                         : "the default",
                       m8 / mw, mb / mw, tot ? (double)hits / (double)tot : 1.0, (long long)npos);
            }
        }
        printf("%-10s %7lld floor: %.3f ms at %.0f TFLOP/s bf16, %.3f ms at 2x for fp8 (scores only)\n", "", (long long)L,
               fl / FL * 1e3, FL / 1e12, fl / (2 * FL) * 1e3);
        CK(cudaFree(q)); CK(cudaFree(k)); CK(cudaFree(q8)); CK(cudaFree(k8)); CK(cudaFree(w));
        CK(cudaFree(ks)); CK(cudaFree(qs)); CK(cudaFree(sc)); CK(cudaFree(ix));
    }
}
