/* Host emulation of the many-CTA top-k (src/cuda/topk_rows.cuh; no GPU
 * needed): the kernel text compiled with g++ -DLA_TR_EMU, one std::thread
 * per CUDA thread, std::barrier for __syncthreads, std::atomic_ref for the
 * atomics; built twice: with the CUDA block scan (-DLA_TR_EMU_SHFL: warp
 * shuffles through per-warp slots) and with the shared-memory scan. Rows
 * of continuous scores, few distinct values (ties), rounded scores (small
 * ties), NaN / +-inf / -inf columns, +-0, ranges of 0, 1, < k and the full
 * width, k 1 .. 2048, and rows whose threshold bin exceeds TR_CAP (the
 * whole-row path). The histograms come from tr_hist_kernel (checked
 * against a host count) with one chunk per row or the smallest (TR_HSTEP).
 * Each row's indices must equal a sort by (key descending) of its valid
 * columns, as la_topk orders them, as positions and as slots; the rows
 * that tr_final_kernel ordered by its bitonic fallback are counted.
 *   bash dev/emu_topk_rows.sh [BUILD_DIR] */
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <random>
#include <thread>
#include <vector>

static thread_local int emu_tid_v;
struct emu_cta {
    std::barrier<> *bar;
    int bx, by;
    unsigned char *smem;
    std::barrier<> *warp[32]; /* LA_TR_EMU_SHFL: the shuffles' exchange */
    uint32_t slot[32][32];
};
static thread_local emu_cta *emu_c;
static inline int tr_tid() { return emu_tid_v; }
static inline int tr_bx() { return emu_c->bx; }
static inline int tr_by() { return emu_c->by; }
static inline void tr_sync() { emu_c->bar->arrive_and_wait(); }
static inline unsigned char *tr_smem() { return emu_c->smem; }
static inline uint32_t tr_atomic_add(uint32_t *p, uint32_t v) { return std::atomic_ref<uint32_t>(*p).fetch_add(v); }
#ifdef LA_TR_EMU_SHFL
/* the CUDA scan's primitives: a full warp exchanges through its slots between two warp barriers */
static inline void __syncthreads() { tr_sync(); }
static inline uint32_t __shfl_up_sync(unsigned, uint32_t x, int o) {
    const int w = emu_tid_v / 32, lane = emu_tid_v % 32;
    emu_c->slot[w][lane] = x;
    emu_c->warp[w]->arrive_and_wait();
    const uint32_t y = lane >= o ? emu_c->slot[w][lane - o] : x;
    emu_c->warp[w]->arrive_and_wait();
    return y;
}
static inline uint32_t __shfl_sync(unsigned, uint32_t x, int src) {
    const int w = emu_tid_v / 32, lane = emu_tid_v % 32;
    emu_c->slot[w][lane] = x;
    emu_c->warp[w]->arrive_and_wait();
    const uint32_t y = emu_c->slot[w][src & 31];
    emu_c->warp[w]->arrive_and_wait();
    return y;
}
#endif

static std::atomic<int> emu_bitonic{0}; /* rows ordered by tr_final_kernel's bitonic fallback */
#define TR_NOTE_BITONIC() emu_bitonic++
#define LA_TR_EMU
#define LA_TR_KERNELS
#include "cuda/topk_rows.cuh"

template <typename K>
static void launch(K kern, int gx, int gy, int nt, size_t smem, const la_tr_args &a) {
    std::vector<unsigned char> sm(smem + 16);
    for (int by = 0; by < gy; by++)
        for (int bx = 0; bx < gx; bx++) {
            std::barrier<> bar(nt);
            emu_cta c{&bar, bx, by, sm.data(), {}, {}};
            for (int w = 0; w < nt / 32; w++) c.warp[w] = new std::barrier<>(32);
            std::fill(sm.begin(), sm.end(), (unsigned char)0xA5); /* shared memory starts undefined */
            std::vector<std::thread> th;
            th.reserve(nt);
            for (int i = 0; i < nt; i++)
                th.emplace_back([&, i]() {
                    emu_tid_v = i;
                    emu_c = &c;
                    kern(a);
                });
            for (auto &x : th) x.join();
            for (int w = 0; w < nt / 32; w++) delete c.warp[w];
        }
}

static uint64_t ref_key(float f, int64_t p) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t fk = f != f ? 0xFFFFFFFFu : (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (uint64_t)fk << 32 | (uint32_t)~(uint32_t)p;
}

static int fails = 0;

static void run(const char *name, int64_t T, int64_t W, int k, int kind, unsigned seed, int to_slots) {
    std::mt19937_64 g(seed);
    std::normal_distribution<float> nd(5.f, 0.7f);
    const int64_t ld = W + 3;
    std::vector<float> sc((size_t)(T * ld), NAN); /* poison past the rows */
    std::vector<int32_t> end(T);
    for (int64_t t = 0; t < T; t++) {
        const int64_t choices[6] = {0, 1, k > 1 ? k - 1 : 1, W, W / 2 + 1, W};
        int64_t e = choices[(t + seed) % 6];
        if (e > W) e = W;
        end[t] = (int32_t)e;
        for (int64_t p = 0; p < W; p++) {
            float v;
            if (p >= e) v = -INFINITY; /* the score kernels write -inf past the range */
            else if (kind == 0) v = nd(g);
            else if (kind == 1) v = (float)(g() % 7) * 0.5f - 1.f; /* ties, -1 .. 2 */
            else if (kind == 2) v = 1.f; /* one value: threshold bin > TR_CAP */
            else if (kind == 4) v = std::round(nd(g) * 4096.f) / 4096.f; /* a few equal scores per value */
            else if (kind == 5) { /* distinct scores, all in the bin of 1.0 (W <= 2^18): the whole-row path */
                const uint32_t u = 0x3F800000u + TR_LOW - (uint32_t)((p * 40503) & TR_LOW);
                memcpy(&v, &u, 4);
            }
            else {
                const unsigned r = (unsigned)(g() % 100);
                v = r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? -INFINITY : r == 3 ? 0.f : r == 4 ? -0.f : nd(g) - 5.f;
            }
            sc[(size_t)(t * ld + p)] = v;
        }
    }
    std::vector<uint32_t> hist((size_t)(T * TR_BINS), 0), coarse((size_t)(T * TR_CBINS), 0), cnt(T, 0);
    std::vector<uint64_t> cand((size_t)(T * TR_CAP), 0x5a5a5a5a5a5a5a5aull);
    const int64_t ps = 16, maxp = (W + ps - 1) / ps;
    std::vector<int32_t> table((size_t)(T * maxp)), rseq(T);
    for (int64_t t = 0; t < T; t++) rseq[t] = (int32_t)((t * 7 + 3) % T);
    for (size_t i = 0; i < table.size(); i++) table[i] = (int32_t)((i * 2654435761u) % 100000);
    const int64_t nb1 = 2, nb0 = (int64_t)k * nb1 + 5;
    std::vector<int32_t> idx((size_t)(T * nb0), 0x7f7f7f7f);
    la_tr_args a;
    memset(&a, 0, sizeof a);
    a.scores = sc.data();
    a.ld = ld;
    a.T = T;
    a.W = W;
    a.end = end.data();
    a.k = k;
    a.hist = hist.data();
    a.cnt = cnt.data();
    a.coarse = coarse.data();
    a.cand = cand.data();
    a.to_slots = to_slots;
    a.table = table.data();
    a.maxp = maxp;
    a.ps = ps;
    a.row_seq = rseq.data();
    a.idx = idx.data();
    a.nb0 = nb0;
    a.nb1 = nb1;
    /* la_tr_launch's chunk as on a GPU of T / 2 SMs (one CTA per row), or the smallest */
    a.hchunk = seed & 1 ? TR_HSTEP : (W + TR_HSTEP - 1) / TR_HSTEP * TR_HSTEP;
    launch(tr_hist_kernel, (int)((W + a.hchunk - 1) / a.hchunk), (int)T, TR_HNT, TR_HIST_SMEM, a);
    int64_t hbad = 0, inl = 0; /* the histograms: the valid keys of [0, end); n1 <= TR_CAP */
    for (int64_t t = 0; t < T; t++) {
        std::vector<uint32_t> h(TR_BINS, 0), hc(TR_CBINS, 0);
        for (int64_t p = 0; p < end[t]; p++) {
            const float v = sc[(size_t)(t * ld + p)];
            if (v != -INFINITY) h[tr_fkey(v) >> TR_SHIFT]++, hc[tr_fkey(v) >> TR_SHIFT >> 7]++;
        }
        hbad += !std::equal(h.begin(), h.end(), hist.begin() + t * TR_BINS);
        hbad += !std::equal(hc.begin(), hc.end(), coarse.begin() + t * TR_CBINS);
        uint32_t n1 = 0;
        for (int b = TR_BINS - 1; b >= 0 && n1 < (uint32_t)k; b--) n1 += h[b];
        inl += n1 <= TR_CAP;
    }
    launch(tr_collect_kernel, (int)((W + TR_CHUNK - 1) / TR_CHUNK), (int)T, TR_CNT, TR_COLLECT_SMEM, a);
    emu_bitonic = 0;
    launch(tr_final_kernel, (int)T, 1, TR_NT, TR_FINAL_SMEM, a);
    int64_t bad = 0;
    for (int64_t t = 0; t < T; t++) {
        std::vector<uint64_t> keys;
        for (int64_t p = 0; p < end[t]; p++) {
            const float v = sc[(size_t)(t * ld + p)];
            if (v != -INFINITY) keys.push_back(ref_key(v, p));
        }
        std::sort(keys.begin(), keys.end(), [](uint64_t x, uint64_t y) { return x > y; });
        int rb = 0;
        for (int i = 0; i < k; i++) {
            int64_t want = i < (int64_t)keys.size() ? (int64_t)(uint32_t)~(uint32_t)keys[i] : -1;
            if (want >= 0 && to_slots) want = (int64_t)table[(size_t)(rseq[t] * maxp + want / ps)] * ps + want % ps;
            if (idx[(size_t)(t * nb0 + i * nb1)] != (int32_t)want) rb = 1;
        }
        for (int64_t j = 0; j < nb0; j++) /* the view's gaps untouched */
            if (j % nb1 != 0 || j / nb1 >= k) rb |= idx[(size_t)(t * nb0 + j)] != 0x7f7f7f7f;
        bad += rb;
    }
    if (hbad) printf("%s: %lld histograms wrong\n", name, (long long)hbad);
    bad += hbad;
    printf("%-34s T %lld W %6lld k %4d: %lld rows wrong, %lld of %lld through candidates, %d bitonic\n", name,
           (long long)T, (long long)W, k, (long long)bad, (long long)inl, (long long)T, emu_bitonic.load());
    if (bad) fails++;
}

int main() {
    setvbuf(stdout, NULL, _IOLBF, 0);
    run("continuous", 6, 9000, 64, 0, 1, 0);
    run("continuous k 2048 slots", 6, 40000, 2048, 0, 2, 1);
    run("ties (7 values)", 6, 5000, 100, 1, 3, 0);
    run("one value (whole-row path)", 3, 20000, 2048, 2, 4, 1);
    run("NaN inf -inf +-0", 6, 12345, 333, 3, 5, 0);
    run("k 1", 6, 4097, 1, 0, 6, 1);
    run("short rows (W < k)", 6, 1000, 2048, 3, 7, 0);
    run("W 1", 2, 1, 5, 0, 8, 0);
    run("ties, bins over TR_CAP (whole row)", 3, 150000, 2048, 1, 9, 1);
    run("rounded scores k 2048", 4, 70000, 2048, 4, 10, 0);
    run("rounded scores k 700, chunks", 4, 30000, 700, 4, 11, 1);
    run("continuous k 2048, chunks", 3, 40000, 2048, 0, 13, 0);
    run("W = k", 3, 2048, 2048, 0, 14, 1);
    run("NaN inf -inf +-0 k 2048", 3, 20000, 2048, 3, 15, 1);
    run("one bin, distinct (whole row)", 2, 60000, 2048, 5, 16, 0);
    run("continuous 128K k 2048 slots", 2, 131072, 2048, 0, 21, 1);
    printf("%s\n", fails ? "FAILED" : "all passed");
    return fails != 0;
}
