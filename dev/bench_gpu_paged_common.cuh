/* What the paged benches (dev/bench_gpu_paged.cu, dev/bench_gpu_paged_hisa.cu)
 * share: the e4m3 cache of a batch of sequences on shuffled pages, and the
 * query side (T rows of e4m3 queries and weights, the q scale folded in, the
 * block table and context lengths on the device, the index output [T, topk],
 * the paged call's parameters; pq points at that struct's tensors: do not
 * copy it). Both draw from one LCG state r. */
#ifndef LA_DEV_BENCH_GPU_PAGED_COMMON_CUH
#define LA_DEV_BENCH_GPU_PAGED_COMMON_CUH

#include "bench_gpu_common.cuh"
#include "cpu/paged_index_cpu.h"

/* The e4m3 cache (page size ps, dI) of sequences of the given lengths: pages
 * shuffled into the block table [nseq][maxp], every key uniform f32 appended
 * at its slot; pooled: with its sequence and position too (the pooled sums
 * HISA reads; the cache then has max_seqs, max_seq_len). */
struct pgb_cache {
    la_paged_index_cache *cache = nullptr;
    std::vector<int32_t> table;
    int64_t maxp = 0, tokens = 0;
    uint64_t r = 12345;
};

static void pgb_cache_make(pgb_cache &b, const std::vector<int64_t> &lens, int64_t ps, int64_t DI, bool pooled) {
    const int64_t nseq = (int64_t)lens.size();
    int64_t npages = 1;
    for (int64_t L : lens) {
        b.maxp = std::max(b.maxp, (L + ps - 1) / ps);
        npages += (L + ps - 1) / ps;
        b.tokens += L;
    }
    std::vector<int32_t> perm(npages);
    b.table.assign(nseq * b.maxp, 0);
    for (int64_t i = 0; i < npages; i++) perm[i] = (int32_t)i;
    for (int64_t i = npages - 1; i > 0; i--) {
        b.r = b.r * 6364136223846793005ull + 1442695040888963407ull;
        std::swap(perm[i], perm[(int64_t)((b.r >> 33) % (uint64_t)(i + 1))]);
    }
    int64_t at = 0;
    for (int64_t s = 0; s < nseq; s++)
        for (int64_t j = 0; j < (lens[s] + ps - 1) / ps; j++) b.table[s * b.maxp + j] = perm[at++];
    const int64_t Lmax = *std::max_element(lens.begin(), lens.end());
    la_paged_cache_params cp;
    la_paged_cache_params_init(&cp);
    cp.num_pages = npages;
    cp.page_size = ps;
    cp.head_dim = DI;
    cp.dtype = LA_FP8_E4M3;
    cp.device = LA_DEVICE_CUDA;
    if (pooled) {
        cp.max_seqs = nseq;
        cp.max_seq_len = Lmax;
    }
    LK(la_paged_index_cache_create(&cp, &b.cache));
    float *dk = nullptr;
    int32_t *dslot = nullptr, *dseq = nullptr, *dpos = nullptr;
    CK(cudaMalloc(&dk, sizeof(float) * Lmax * DI));
    CK(cudaMalloc(&dslot, 4 * Lmax));
    CK(cudaMalloc(&dseq, 4 * Lmax));
    CK(cudaMalloc(&dpos, 4 * Lmax));
    std::vector<int32_t> slots(Lmax), seqs(Lmax), pos(Lmax);
    for (int64_t s = 0; s < nseq; s++) {
        const int64_t L = lens[s];
        fill_f32<<<1024, 256>>>(dk, (size_t)(L * DI), 1000 + s, 1.f);
        for (int64_t p = 0; p < L; p++) {
            slots[p] = b.table[s * b.maxp + p / ps] * (int32_t)ps + (int32_t)(p % ps);
            seqs[p] = (int32_t)s;
            pos[p] = (int32_t)p;
        }
        CK(cudaMemcpy(dslot, slots.data(), 4 * L, cudaMemcpyHostToDevice));
        la_tensor tk = view(dk, LA_F32, 2, L, DI, 1, 1), ts = view(dslot, LA_I32, 1, L, 1, 1, 1);
        if (pooled) {
            CK(cudaMemcpy(dseq, seqs.data(), 4 * L, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dpos, pos.data(), 4 * L, cudaMemcpyHostToDevice));
            la_tensor tsq = view(dseq, LA_I32, 1, L, 1, 1, 1), tp = view(dpos, LA_I32, 1, L, 1, 1, 1);
            LK(la_paged_index_cache_append(b.cache, &tk, &ts, &tsq, &tp, BCTX));
        } else {
            LK(la_paged_index_cache_append(b.cache, &tk, &ts, nullptr, nullptr, BCTX));
        }
    }
    CK(cudaFree(dk));
    CK(cudaFree(dslot));
    CK(cudaFree(dseq));
    CK(cudaFree(dpos));
}

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
