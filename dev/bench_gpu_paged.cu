/* Paged DSA decode: the "paged" family's variants side by side (issue 18).
 * 64 sequences, next_n 1, HI 64, dI 128, k 2048, an e4m3 paged cache (132 B
 * per token, shuffled pages), e4m3 queries; la_dsa_topk_paged per call (CUDA
 * events, median of 10) under the default (paged_index.cu's switches:
 * "wgmma2r") and forced "mma" (the mma.sync kernel in its paged mode),
 * "wgmma", "wgmma2" (paged_wgmma.cu: pw_kernel, pw2_kernel + la_topk) and
 * "wgmma2r" (pw2_kernel + topk_rows.cuh), against the byte floor (every
 * cached key read once at BW), and the query rows whose indices differ from
 * "wgmma" (must be 0 for the pw2 variants: the same scores, an exact top-k)
 * and from "mma" (near-ties of the two MMA roundings).
 *   make BUILD=build-gpu CUDA_ARCH=sm90a build-gpu/dev/bench_gpu_paged
 *   build-gpu/dev/bench_gpu_paged [--quick] */
#include "bench_gpu_common.cuh"
#include "bench_gpu_paged_common.cuh"
#include "cpu/paged_index_cpu.h"

static const int64_t PS = 64, DI = 128, HI = 64, TOPK = 2048;
static int mismatches = 0; /* rows of a pw2 variant or the default differing from "wgmma": exit status 1 */

static void run_row(const char *name, const std::vector<int64_t> &lens) {
    const int64_t nseq = (int64_t)lens.size();
    pgb_cache PC;
    pgb_cache_make(PC, lens, PS, DI, false);
    la_paged_index_cache *cache = PC.cache;
    const std::vector<int32_t> &table = PC.table;
    const int64_t maxp = PC.maxp, tokens = PC.tokens;
    uint64_t r = PC.r;
    const int64_t T = nseq;
    pgb_queries Q;
    pgb_queries_make(Q, r, T, HI, DI, TOPK, table, nseq, maxp, lens);
    la_tensor &tq = Q.tq, &tw = Q.tw, &ti = Q.ti;
    la_index_params &ip = Q.ip;
    la_paged_query &pq = Q.pq;
    int32_t *di = Q.di;
    auto call = [&]() { return la_dsa_topk_paged(&ip, &tq, &tw, cache, &pq, &ti, BCTX); };
    const double floor_ms = (double)tokens * (DI + 4) / BW * 1e3;
    /* the default, then each variant forced; rows compared with "wgmma"
     * (equal to the dense default, DSA v2, on the gathered keys: the pw2
     * variants and the default must equal it) and with "mma" (near-ties) */
    const int NV = 5;
    const char *vs[NV] = {nullptr, "mma", "wgmma", "wgmma2", "wgmma2r"};
    std::vector<int32_t> res[NV];
    double ms[NV];
    for (int v = 0; v < NV; v++) {
        bench_variant("paged", vs[v]);
        ms[v] = time_ms(call, 10);
        res[v].resize(T * TOPK);
        CK(cudaMemcpy(res[v].data(), di, 4 * T * TOPK, cudaMemcpyDeviceToHost));
    }
    bench_variant("paged", nullptr);
    LK(la_paged_index_cache_check(cache, BCTX));
    auto differ = [&](int x, int y) {
        int64_t d = 0;
        for (int64_t t = 0; t < T; t++) d += memcmp(res[x].data() + t * TOPK, res[y].data() + t * TOPK, 4 * TOPK) != 0;
        return (long long)d;
    };
    printf("%-9s %lld seqs ctx %lld..%lld: floor %.3f ms\n", name, (long long)nseq, (long long)lens.front(),
           (long long)lens.back(), floor_ms);
    for (int v = 0; v < NV; v++) {
        if (v != 1 && differ(v, 2)) mismatches++;
        printf("  %-8s %.3f ms (%.2fx floor) | rows differing from wgmma %lld, from mma %lld%s\n",
               vs[v] ? vs[v] : "default", ms[v], ms[v] / floor_ms, differ(v, 2), differ(v, 1),
               v != 1 && differ(v, 2) ? "  <-- MISMATCH: must equal wgmma" : "");
    }
    fflush(stdout);
    pgb_queries_free(Q);
    la_paged_index_cache_destroy(cache);
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "--quick");
    const int64_t nseq = quick ? 8 : 64;
    std::vector<int64_t> spread(nseq);
    for (int64_t i = 0; i < nseq; i++) spread[i] = 32768 + (131072 - 32768) * i / (nseq > 1 ? nseq - 1 : 1);
    run_row("spread", spread);
    for (int64_t L : {32768, 65536, 131072}) {
        char nm[16];
        snprintf(nm, sizeof nm, "all%lldK", (long long)(L / 1024));
        run_row(nm, std::vector<int64_t>(nseq, L));
    }
    if (mismatches) printf("FAILED: %d variant rows differ from wgmma\n", mismatches);
    return mismatches != 0;
}
