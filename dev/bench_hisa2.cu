/* HISA speed switches, A/B in one process (tests/cuda/gpu_hisa2.sh):
 *   bench_hisa2 [L ...]          (default L = 65536 131072)
 * Shape of bench_gpu_sparse's indexer rows (issue 7): T = 1024 queries at the
 * end of L tokens (causal default ranges), HI = 64, dI = 128, k = 2048,
 * B = 128, m = 64, bf16 q/k, f32 w; fp8: e4m3 q/k with k_scale [L] and
 * q_scale [T, HI] (bench_gpu_sparse's dsa block). Per L:
 *   dsa            the flat DSA indexer (bf16), for the ratio;
 *   per variant    (family "hisa" forced on the driver's context)
 *     default      stage 2 hb2_kernel<2, false>, stage 1 hs_pool2_kernel +
 *                  block scores on hb2_kernel<2, true>
 *     gather       stage 2 on the DSA gather kernels
 *     mma          also stage 1 on hs_pool_bf16_kernel + the mma.sync
 *                  block scores
 *   the median of 20 event-timed calls, the time per call of 20 calls back to
 *   back between two events (host overhead overlapped), and the positions
 *   of idx that differ from the default's (same scores bit for bit: must be
 *   0); default and mma are run twice, interleaved (drift);
 *   fp8 default vs "mma", with the positions differing. */
#define BENCH_CK_WHERE
#include "bench_gpu_common.cuh"

#include <cuda_fp8.h>
#include <stdlib.h>

static void *dmalloc(size_t n) {
    void *p;
    CK(cudaMalloc(&p, n));
    return p;
}
__global__ void h2_fill_e4m3(uint8_t *p, size_t n, uint64_t seed) {
    BENCH_GRID_STRIDE(i, n) {
        const float u = bench_unit(bench_mix(i, seed)) * 2.f - 1.f;
        p[i] = (uint8_t)__nv_cvt_float_to_fp8(u * 448.f, __NV_SATFINITE, __NV_E4M3);
    }
}
__global__ void h2_fill_pos(float *p, size_t n, uint64_t seed, float scale) {
    BENCH_GRID_STRIDE(i, n) p[i] = scale * (0.5f + bench_unit(bench_mix(i, seed, false)));
}

struct variant {
    const char *name, *hisa; /* the variant of family "hisa" (nullptr: the default) */
};
static void set_variant(const variant &v) { bench_variant("hisa", v.hisa); }

int main(int argc, char **argv) {
    std::vector<int64_t> Ls;
    for (int i = 1; i < argc; i++) Ls.push_back(atoll(argv[i]));
    if (Ls.empty()) Ls = {65536, 131072};
    const int64_t T = 1024, HI = 64, dI = 128, K = 2048;
    const variant V[] = {{"default", nullptr}, {"mma", "mma"}, {"gather", "gather"}, {"default", nullptr},
                         {"mma", "mma"}};
    for (int64_t L : Ls) {
        uint16_t *q = (uint16_t *)dmalloc(T * HI * dI * 2), *k = (uint16_t *)dmalloc(L * dI * 2);
        uint8_t *q8 = (uint8_t *)dmalloc(T * HI * dI), *k8 = (uint8_t *)dmalloc(L * dI);
        float *w = (float *)dmalloc(T * HI * 4), *ks = (float *)dmalloc(L * 4), *qs = (float *)dmalloc(T * HI * 4);
        int32_t *ix = (int32_t *)dmalloc(T * K * 4);
        fill_bf16<<<1024, 256>>>(q, T * HI * dI, 1, 1.f);
        fill_bf16<<<1024, 256>>>(k, L * dI, 2, 1.f);
        fill_f32<<<64, 256>>>(w, T * HI, 3, 1.f / sqrtf((float)(HI * dI)));
        h2_fill_e4m3<<<1024, 256>>>(q8, T * HI * dI, 23);
        h2_fill_e4m3<<<1024, 256>>>(k8, L * dI, 24);
        h2_fill_pos<<<256, 256>>>(ks, L, 26, 1.f / 448.f);
        h2_fill_pos<<<64, 256>>>(qs, T * HI, 27, 1.f / 448.f);
        CK(cudaGetLastError());
        la_tensor tq, tk, tw, ti, tq8, tk8, tks, tqs;
        int64_t nq[3] = {T, HI, dI}, nk[2] = {L, dI}, nw[2] = {T, HI}, ni[2] = {T, K}, nks[1] = {L};
        la_tensor_init(&tq, q, LA_BF16, LA_DEVICE_CUDA, 3, nq);
        la_tensor_init(&tk, k, LA_BF16, LA_DEVICE_CUDA, 2, nk);
        la_tensor_init(&tw, w, LA_F32, LA_DEVICE_CUDA, 2, nw);
        la_tensor_init(&ti, ix, LA_I32, LA_DEVICE_CUDA, 2, ni);
        la_tensor_init(&tq8, q8, LA_FP8_E4M3, LA_DEVICE_CUDA, 3, nq);
        la_tensor_init(&tk8, k8, LA_FP8_E4M3, LA_DEVICE_CUDA, 2, nk);
        la_tensor_init(&tks, ks, LA_F32, LA_DEVICE_CUDA, 1, nks);
        la_tensor_init(&tqs, qs, LA_F32, LA_DEVICE_CUDA, 2, nw);
        la_index_params p, p8;
        la_index_params_init(&p);
        p.topk = K;
        p.block = 128;
        p.block_topk = 64;
        p8 = p;
        p8.k_scale = &tks;
        p8.q_scale = &tqs;
        const double dsa = median_ms([&] { LK(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL, BCTX)); }, 2, 10);
        printf("dsa        L=%-7lld %8.3f ms\n", (long long)L, dsa);
        std::vector<int32_t> a(T * K), b(T * K);
        double t_def = 0;
        for (int vi = 0; vi < (int)(sizeof V / sizeof V[0]); vi++) {
            const variant &v = V[vi];
            set_variant(v);
            CK(cudaMemset(ix, 0xff, T * K * 4));
            const double ms = median_ms([&] { LK(la_hisa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, BCTX)); }, 2, 20);
            CK(cudaMemcpy(b.data(), ix, T * K * 4, cudaMemcpyDeviceToHost));
            const double bms = batch_ms([&] { LK(la_hisa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, BCTX)); }, 20);
            if (vi == 0) {
                a = b;
                t_def = ms;
            }
            int64_t diff = 0;
            for (int64_t i = 0; i < T * K; i++) diff += a[i] != b[i];
            printf("hisa2 %-11s L=%-7lld %8.3f ms  batch %8.3f ms/call  dsa/this %.2fx  this/default %.3f  "
                   "%lld positions differ from default\n",
                   v.name, (long long)L, ms, bms, dsa / ms, ms / t_def, (long long)diff);
        }
        /* fp8 */
        const variant V8[] = {{"fp8", nullptr}, {"fp8 mma", "mma"}};
        for (int vi = 0; vi < 2; vi++) {
            set_variant(V8[vi]);
            CK(cudaMemset(ix, 0xff, T * K * 4));
            const double ms = median_ms([&] { LK(la_hisa_indexer(&p8, &tq8, &tk8, &tw, NULL, NULL, &ti, BCTX)); }, 2, 20);
            CK(cudaMemcpy(b.data(), ix, T * K * 4, cudaMemcpyDeviceToHost));
            if (vi == 0) {
                a = b;
                t_def = ms;
            }
            int64_t diff = 0;
            for (int64_t i = 0; i < T * K; i++) diff += a[i] != b[i];
            printf("hisa2 %-14s L=%-7lld %8.3f ms  this/fp8 default %.3f  %lld positions differ from the fp8 default\n",
                   V8[vi].name, (long long)L, ms, ms / t_def, (long long)diff);
        }
        set_variant(V[0]);
        for (void *ptr : {(void *)q, (void *)k, (void *)q8, (void *)k8, (void *)w, (void *)ks, (void *)qs, (void *)ix})
            CK(cudaFree(ptr));
    }
    return 0;
}
