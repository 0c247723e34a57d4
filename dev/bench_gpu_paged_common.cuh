/* The query side shared by the paged benches (dev/bench_gpu_paged.cu,
 * dev/bench_gpu_paged_hisa.cu): T rows of e4m3 queries and weights (the q
 * scale folded in, drawn from the benches' LCG r), the block table and the
 * context lengths on the device, the index output [T, topk], and the paged
 * call's parameters (pq points at this struct's tensors: do not copy it). */
#ifndef LA_DEV_BENCH_GPU_PAGED_COMMON_CUH
#define LA_DEV_BENCH_GPU_PAGED_COMMON_CUH

#include "bench_gpu_common.cuh"
#include "cpu/paged_index_cpu.h"

struct pgb_queries {
    uint8_t *dq = nullptr;
    float *dw = nullptr;
    int32_t *dbt = nullptr, *dcl = nullptr, *di = nullptr;
    la_tensor tq, tw, tbt, tcl, ti;
    la_index_params ip;
    la_paged_query pq;
};

static void pgb_queries_make(pgb_queries &b, uint64_t &r, int64_t T, int64_t HI, int64_t DI, int64_t topk,
                             const std::vector<int32_t> &table, int64_t nseq, int64_t maxp,
                             const std::vector<int64_t> &lens) {
    std::vector<uint8_t> hq(T * HI * DI);
    std::vector<float> hw(T * HI);
    for (size_t i = 0; i < hq.size(); i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        hq[i] = la_f32_to_e4m3((float)((int64_t)(r >> 40) % 2001 - 1000) * 0.4f);
    }
    for (size_t i = 0; i < hw.size(); i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        hw[i] = (float)((r >> 40) % 1000 + 1) * 1e-5f;
    }
    std::vector<int32_t> hcl(lens.begin(), lens.end());
    CK(cudaMalloc(&b.dq, hq.size()));
    CK(cudaMalloc(&b.dw, 4 * hw.size()));
    CK(cudaMalloc(&b.dbt, 4 * table.size()));
    CK(cudaMalloc(&b.dcl, 4 * nseq));
    CK(cudaMalloc(&b.di, 4 * T * topk));
    CK(cudaMemcpy(b.dq, hq.data(), hq.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.dw, hw.data(), 4 * hw.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.dbt, table.data(), 4 * table.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.dcl, hcl.data(), 4 * nseq, cudaMemcpyHostToDevice));
    b.tq = view(b.dq, LA_FP8_E4M3, 3, T, HI, DI, 1);
    b.tw = view(b.dw, LA_F32, 2, T, HI, 1, 1);
    b.tbt = view(b.dbt, LA_I32, 2, nseq, maxp, 1, 1);
    b.tcl = view(b.dcl, LA_I32, 1, nseq, 1, 1, 1);
    b.ti = view(b.di, LA_I32, 2, T, topk, 1, 1);
    la_index_params_init(&b.ip);
    b.ip.topk = topk;
    la_paged_query_init(&b.pq);
    b.pq.block_table = &b.tbt;
    b.pq.context_lens = &b.tcl;
}

static void pgb_queries_free(pgb_queries &b) {
    CK(cudaFree(b.dq));
    CK(cudaFree(b.dw));
    CK(cudaFree(b.dbt));
    CK(cudaFree(b.dcl));
    CK(cudaFree(b.di));
}

#endif
