/* Diagnostics for the stage-2 top-k of HISA (dev/NOTES_topk_v3.md): dumps 16
 * HISA candidate score rows (LA_CUDA_HISA_TOPK_DUMP) and 16 DSA score rows at
 * L = 8192 (causal, T = 1024 at the end) as raw float32 files under argv[1],
 * and times la_topk on the DSA rows and on random normal rows of the same
 * shape. Same inputs as bench_hisa2.
 *   probe_topk_rows OUTDIR */
#define BENCH_CK_WHERE
#include "bench_gpu_common.cuh"
#include <stdlib.h>
#include <string>

int main(int argc, char **argv) {
    const std::string dir = argc > 1 ? argv[1] : ".";
    const int64_t T = 1024, HI = 64, dI = 128, K = 2048;
    for (int64_t L : {(int64_t)8192, (int64_t)65536}) {
        uint16_t *q, *k;
        float *w, *sc, *rn;
        int32_t *ix;
        CK(cudaMalloc(&q, T * HI * dI * 2));
        CK(cudaMalloc(&k, L * dI * 2));
        CK(cudaMalloc(&w, T * HI * 4));
        CK(cudaMalloc(&sc, T * L * 4));
        CK(cudaMalloc(&rn, T * L * 4));
        CK(cudaMalloc(&ix, T * K * 4));
        fill_bf16<<<1024, 256>>>(q, T * HI * dI, 1, 1.f);
        fill_bf16<<<1024, 256>>>(k, L * dI, 2, 1.f);
        fill_f32<<<64, 256>>>(w, T * HI, 3, 1.f / sqrtf((float)(HI * dI)));
        fill_f32<<<1024, 256>>>(rn, T * L, 4, 1.f);
        CK(cudaGetLastError());
        la_tensor tq, tk, tw, ti, ts, tr;
        int64_t nq[3] = {T, HI, dI}, nk[2] = {L, dI}, nw[2] = {T, HI}, ni[2] = {T, K}, ns[2] = {T, L};
        la_tensor_init(&tq, q, LA_BF16, LA_DEVICE_CUDA, 3, nq);
        la_tensor_init(&tk, k, LA_BF16, LA_DEVICE_CUDA, 2, nk);
        la_tensor_init(&tw, w, LA_F32, LA_DEVICE_CUDA, 2, nw);
        la_tensor_init(&ti, ix, LA_I32, LA_DEVICE_CUDA, 2, ni);
        la_tensor_init(&ts, sc, LA_F32, LA_DEVICE_CUDA, 2, ns);
        la_tensor_init(&tr, rn, LA_F32, LA_DEVICE_CUDA, 2, ns);
        la_index_params p;
        la_index_params_init(&p);
        p.topk = K;
        p.block = 128;
        p.block_topk = 64;
        LK(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, &ts, NULL));
        const double md = median_ms([&] { LK(la_topk(&ts, &ti, NULL)); }, 2, 10);
        const double mr = median_ms([&] { LK(la_topk(&tr, &ti, NULL)); }, 2, 10);
        printf("probe L=%lld: la_topk on the DSA score rows %.4f ms, on random rows %.4f ms\n", (long long)L, md, mr);
        std::vector<float> h(16 * L);
        CK(cudaMemcpy(h.data(), sc, 8 * L * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h.data() + 8 * L, sc + (T - 8) * L, 8 * L * 4, cudaMemcpyDeviceToHost));
        const std::string fn = dir + "/dsa_rows_" + std::to_string(L) + ".bin";
        FILE *f = fopen(fn.c_str(), "wb");
        const int64_t hd[2] = {16, L};
        fwrite(hd, 8, 2, f);
        fwrite(h.data(), 4, h.size(), f);
        fclose(f);
        if (L == 65536) {
            const std::string hf = dir + "/hisa_cand_rows.bin";
            setenv("LA_CUDA_HISA_TOPK_PROBE", "1", 1);
            setenv("LA_CUDA_HISA_TOPK_DUMP", hf.c_str(), 1);
            LK(la_hisa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL));
            CK(cudaDeviceSynchronize());
            unsetenv("LA_CUDA_HISA_TOPK_DUMP");
            unsetenv("LA_CUDA_HISA_TOPK_PROBE");
        }
        for (void *ptr : {(void *)q, (void *)k, (void *)w, (void *)sc, (void *)rn, (void *)ix}) CK(cudaFree(ptr));
    }
    return 0;
}
