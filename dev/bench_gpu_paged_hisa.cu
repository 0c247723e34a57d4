/* Paged HISA (issue 18): the variants of its block stage (family
 * "paged_hisa": classic, fused, fused3, fused_guarded) and candidate scores ("paged_hisa_cand":
 * gather, blockmajor, direct, wgmma) side by side, against paged DSA (default and
 * "wgmma" of family "paged"). e4m3 paged cache with pooled sums (132 B per
 * token, shuffled pages), e4m3 queries, HI 64, dI 128, B 128, m 64, k 2048.
 * Rows: decode (64 sequences, next_n 1) at all 32K, all 128K and the
 * 32K-128K spread; prefill (one sequence, 4096 query rows at 128K).
 * la_*_topk_paged per call from C (CUDA events, median), so it includes the
 * metadata kernel, the top-k passes and the finish. Every mma.sync HISA
 * variant must give the same indices as "classic + gather" (rows differing
 * printed; 0 expected: same arithmetic); "wgmma" candidates (DSA v2's bits)
 * differ at near-ties only, and the decode default is them (0 expected).
 *   make BUILD=build-gpu CUDA_ARCH=sm90a build-gpu/dev/bench_gpu_paged_hisa
 *   build-gpu/dev/bench_gpu_paged_hisa [--quick] [--prefill-only | --decode-only] */
#include "bench_gpu_common.cuh"
#include "bench_gpu_paged_common.cuh"
#include "cpu/paged_index_cpu.h"

#include <string>
#include <utility>
#include <vector>

static bool g_pdl = false; /* --pdl: the extra column times family paged_pdl "on", else "off" */
static std::vector<std::pair<std::string, std::string>> g_ab; /* --ab FAMILY=VARIANT */

static const int64_t PS = 64, DI = 128, HI = 64, TOPK = 2048;

static void run_row(const char *name, const std::vector<int64_t> &lens, int64_t nq, int reps) {
    const int64_t nseq = (int64_t)lens.size();
    pgb_cache PC;
    pgb_cache_make(PC, lens, PS, DI, true);
    la_paged_index_cache *cache = PC.cache;
    const std::vector<int32_t> &table = PC.table;
    const int64_t maxp = PC.maxp;
    uint64_t r = PC.r;
    const int64_t T = nseq * nq;
    pgb_queries Q;
    pgb_queries_make(Q, r, T, HI, DI, TOPK, table, nseq, maxp, lens);
    la_tensor &tq = Q.tq, &tw = Q.tw, &ti = Q.ti;
    la_index_params &ip = Q.ip;
    la_paged_query &pq = Q.pq;
    int32_t *di = Q.di;
    pq.next_n = nq;
    auto dsa = [&]() { return la_dsa_topk_paged(&ip, &tq, &tw, cache, &pq, &ti, BCTX); };
    auto hisa = [&]() { return la_hisa_topk_paged(&ip, &tq, &tw, cache, &pq, &ti, BCTX); };
    /* HISA variants: (block stage, candidates); the first is the chain before this session;
     * "wgmma" candidates score with DSA v2's bits (not the mma.sync ones): compared with the default */
    constexpr int NV = 8;
    const char *hv[NV][2] = {{"classic", "gather"}, {"fused", "gather"}, {"fused", "blockmajor"}, {"fused", "direct"},
                             {"fused3", "gather"},  {"fused", "wgmma"}, {"fused_guarded", "gather"}, {nullptr, nullptr}};
    double hms[NV];
    std::vector<int32_t> res[NV];
    for (int v = 0; v < NV; v++) {
        bench_variant("paged_hisa", hv[v][0]);
        bench_variant("paged_hisa_cand", hv[v][1]);
        hms[v] = time_ms(hisa, reps);
        res[v].resize(T * TOPK);
        CK(cudaMemcpy(res[v].data(), di, 4 * T * TOPK, cudaMemcpyDeviceToHost));
    }
    bench_variant("paged_hisa", nullptr);
    bench_variant("paged_hisa_cand", nullptr);
    int64_t differ[NV + 1] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (int v = 1; v < NV; v++)
        for (int64_t t = 0; t < T; t++)
            differ[v] += memcmp(res[0].data() + t * TOPK, res[v].data() + t * TOPK, 4 * TOPK) != 0;
    for (int64_t t = 0; t < T; t++) /* the default against the wgmma candidates */
        differ[NV] += memcmp(res[5].data() + t * TOPK, res[NV - 1].data() + t * TOPK, 4 * TOPK) != 0;
    /* the default's chain with the other launch mode (family paged_pdl; --pdl: on) */
    bench_variant("paged_pdl", g_pdl ? "on" : "off");
    const double noplms = time_ms(hisa, reps);
    bench_variant("paged_pdl", nullptr);
    const double dms = time_ms(dsa, reps);
    std::vector<int32_t> dres(T * TOPK);
    CK(cudaMemcpy(dres.data(), di, 4 * T * TOPK, cudaMemcpyDeviceToHost));
    bench_variant("paged", "wgmma");
    const double wms = nq == 1 ? time_ms(dsa, reps) : NAN; /* wgmma: the decode kernel (next_n rows per CTA: 1) */
    bench_variant("paged", nullptr);
    LK(la_paged_index_cache_check(cache, BCTX));
    printf("%-9s %lld seqs x %lld rows, ctx %lld..%lld: DSA default %.3f ms, wgmma %.3f ms | HISA classic+gather %.3f | "
           "fused+gather %.3f | fused+blockmajor %.3f | fused+direct %.3f | fused3+gather %.3f | fused+wgmma %.3f | "
           "fused_guarded+gather %.3f | default %.3f ms | DSA(default)/HISA(default) %.2fx, DSA(wgmma)/HISA %.2fx | "
           "rows differing from classic: %lld %lld %lld %lld %lld (wgmma %lld, default %lld); default vs fused+wgmma: "
           "%lld | default with paged_pdl %s %.3f ms\n",
           name, (long long)nseq, (long long)nq, (long long)lens.front(), (long long)lens.back(), dms, wms, hms[0],
           hms[1], hms[2], hms[3], hms[4], hms[5], hms[6], hms[7], dms / hms[7], wms / hms[7], (long long)differ[1],
           (long long)differ[2], (long long)differ[3], (long long)differ[4], (long long)differ[6], (long long)differ[5],
           (long long)differ[7], (long long)differ[8], g_pdl ? "on" : "off", noplms);
    /* --ab FAMILY=VARIANT: both calls with that variant forced, against the defaults' indices */
    for (const auto &fv : g_ab) {
        bench_variant(fv.first.c_str(), fv.second.c_str());
        std::vector<int32_t> o(T * TOPK);
        int64_t dd = -1, hd = -1;
        double d2 = NAN, h2 = NAN;
        if (dsa() == LA_OK) {
            d2 = time_ms(dsa, reps);
            CK(cudaMemcpy(o.data(), di, 4 * T * TOPK, cudaMemcpyDeviceToHost));
            dd = 0;
            for (int64_t t = 0; t < T; t++) dd += memcmp(o.data() + t * TOPK, dres.data() + t * TOPK, 4 * TOPK) != 0;
        }
        if (hisa() == LA_OK) {
            h2 = time_ms(hisa, reps);
            CK(cudaMemcpy(o.data(), di, 4 * T * TOPK, cudaMemcpyDeviceToHost));
            hd = 0;
            for (int64_t t = 0; t < T; t++) hd += memcmp(o.data() + t * TOPK, res[NV - 1].data() + t * TOPK, 4 * TOPK) != 0;
        }
        bench_variant(fv.first.c_str(), nullptr);
        printf("%-9s   %s=%s: DSA %.3f ms (default %.3f; rows differing %lld) | HISA %.3f ms (default %.3f; rows "
               "differing %lld) | DSA/HISA %.2fx (%s forced), %.2fx (defaults)\n",
               name, fv.first.c_str(), fv.second.c_str(), d2, dms, (long long)dd, h2, hms[NV - 1], (long long)hd,
               d2 / h2, fv.first.c_str(), dms / hms[NV - 1]);
    }
    fflush(stdout);
    pgb_queries_free(Q);
    la_paged_index_cache_destroy(cache);
}

int main(int argc, char **argv) {
    bool quick = false, pre = true, dec = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = true;
        if (!strcmp(argv[i], "--prefill-only")) dec = false;
        if (!strcmp(argv[i], "--decode-only")) pre = false;
        if (!strcmp(argv[i], "--pdl")) g_pdl = true; /* time the chain with paged_pdl on too */
        if (!strcmp(argv[i], "--ab") && i + 1 < argc) { /* FAMILY=VARIANT, repeatable */
            const std::string fv = argv[++i];
            const size_t e = fv.find('=');
            if (e != std::string::npos) g_ab.emplace_back(fv.substr(0, e), fv.substr(e + 1));
        }
    }
    const int64_t nseq = quick ? 8 : 64;
    if (dec) {
        run_row("all128K", std::vector<int64_t>(nseq, 131072), 1, 10);
        run_row("all32K", std::vector<int64_t>(nseq, 32768), 1, 10);
        std::vector<int64_t> spread(nseq);
        for (int64_t i = 0; i < nseq; i++) spread[i] = 32768 + (131072 - 32768) * i / (nseq > 1 ? nseq - 1 : 1);
        run_row("spread", spread, 1, 10);
    }
    if (pre) run_row("prefill", std::vector<int64_t>(1, 131072), quick ? 512 : 4096, 3);
    return 0;
}
