/* Host emulation of the group-maxima top-k (src/cuda/topk_groups.cuh,
 * variant "wgmma2g"; no GPU needed): tg_kernel's text compiled with g++
 * -DLA_TR_EMU as dev/emu_topk_rows.cpp does (one std::thread per CUDA
 * thread, std::barrier for __syncthreads, std::atomic_ref for the atomics;
 * built with the CUDA block scan, -DLA_TR_EMU_SHFL, and with the
 * shared-memory scan). The group maxima come from a host model of
 * pw2_kernel's epilogue (paged_wgmma.cu: per CTA of 1024 columns its tiles
 * of 64 keys, per warp and lane qd < 2 the group (key0 + 64 k + 16 warp +
 * 8 qd) / 8 of keys g = 0..7), the groups it never writes poisoned. Rows of
 * 1 .. 131072 columns, end < W, k 1, 5, 2048 and k above the valid keys,
 * continuous scores, few distinct values, one value, NaN / +-inf / -inf /
 * +-0, negative scores, ascending and descending rows, unaligned rows. Each
 * row's indices must equal a sort by key (descending) of its valid columns,
 * as la_topk orders them, as positions and as slots.
 *   bash dev/emu_topk_groups.sh [BUILD_DIR] */
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
/* per phase (TR_PHASE): barriers (thread 0's) and loop trips (every thread's) */
static thread_local int emu_phase;
static std::atomic<long long> emu_bars[9], emu_trips[9];
#define TR_PHASE(p) (emu_phase = (p))
#define TR_TRIP() (emu_trips[emu_phase]++)
static inline void tr_sync() {
    if (emu_tid_v == 0) emu_bars[emu_phase]++;
    emu_c->bar->arrive_and_wait();
}
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

/* tg_reduce's butterfly (both builds): a full warp exchanges through its slots */
static inline uint32_t __shfl_xor_sync(unsigned, uint32_t x, int o) {
    const int w = emu_tid_v / 32, lane = emu_tid_v % 32;
    emu_c->slot[w][lane] = x;
    emu_c->warp[w]->arrive_and_wait();
    const uint32_t y = emu_c->slot[w][lane ^ o];
    emu_c->warp[w]->arrive_and_wait();
    return y;
}

static std::atomic<int> emu_bitonic{0}; /* rows ordered by tr_final_row's bitonic fallback */
#define TR_NOTE_BITONIC() emu_bitonic++
#define LA_TR_EMU
#define LA_TR_HELPERS
#include "cuda/topk_groups.cuh"

template <typename K>
static void launch(K kern, int gx, int gy, int nt, size_t smem, const la_tg_args &a) {
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

/* pw2_kernel<false>'s group maxima: the tiles of each CTA's span (PW2_KEYS =
 * 1024 columns) up to the row's valid end, each lane pair's 8 keys */
static void model_gmax(const float *row, int64_t W, int64_t end, uint32_t *g, int64_t gld) {
    for (int64_t j = 0; j < gld; j++) g[j] = 0xDEADBEEFu; /* never written: must never be read */
    for (int64_t key0 = 0; key0 < W; key0 += 1024) {
        const int64_t colend = std::min(W, key0 + 1024), kend = std::min(end, colend);
        const int64_t nt = kend > key0 ? (kend - key0 + 63) / 64 : 0;
        for (int64_t k = 0; k < nt; k++)
            for (int w = 0; w < 4; w++)
                for (int qd = 0; qd < 2; qd++) {
                    uint32_t u = 0;
                    for (int gg = 0; gg < 8; gg++) {
                        const int64_t p = key0 + k * 64 + 16 * w + gg + 8 * qd; /* r_out of lane (gg, qd) */
                        const bool on = p < kend;
                        const float o = on ? row[p] : -INFINITY;
                        const uint32_t x = on && o != -INFINITY ? tr_fkey(o) : 0u;
                        u = std::max(u, x);
                    }
                    const int64_t j = (key0 + k * 64 + 16 * w + 8 * qd) >> 3;
                    if (j >= gld) { printf("group %lld past ld %lld\n", (long long)j, (long long)gld); fails++; continue; }
                    g[j] = u;
                }
    }
}

enum { K_CONT, K_TIES, K_ONE, K_SPECIAL, K_NEG, K_ASC, K_DESC, K_ROUND };

static void run(const char *name, int64_t T, int64_t W, int k, int kind, unsigned seed, int to_slots, int pad) {
    std::mt19937_64 g(seed);
    std::normal_distribution<float> nd(5.f, 0.7f);
    const int64_t ld = W + pad; /* pad 0: paged_index.cu's rows (unaligned when W % 4) */
    std::vector<float> sc((size_t)(T * ld + 8), NAN); /* poison past the rows */
    std::vector<int32_t> end(T);
    for (int64_t t = 0; t < T; t++) {
        const int64_t choices[7] = {W, W - 1, W / 2 + 1, k > 1 ? k - 1 : 1, 0, W, W - 9};
        int64_t e = choices[(t + seed) % 7];
        if (e > W) e = W;
        if (e < 0) e = 0;
        end[t] = (int32_t)e;
        for (int64_t p = 0; p < W; p++) {
            float v;
            if (p >= e) v = -INFINITY; /* the score kernels write -inf past the range */
            else if (kind == K_CONT) v = nd(g);
            else if (kind == K_TIES) v = (float)(g() % 7) * 0.5f - 1.f;
            else if (kind == K_ONE) v = 1.f;
            else if (kind == K_NEG) v = -nd(g) * (float)(1 + g() % 3);
            else if (kind == K_ASC) v = (float)p * 0.25f - 100.f;
            else if (kind == K_DESC) v = 1000.f - (float)(p / 3);
            else if (kind == K_ROUND) v = std::round(nd(g) * 64.f) / 64.f;
            else {
                const unsigned r = (unsigned)(g() % 50);
                v = r == 0 ? NAN : r == 1 ? INFINITY : r < 10 ? -INFINITY : r == 10 ? 0.f : r == 11 ? -0.f
                  : r == 12 ? -NAN : nd(g) - 5.f;
            }
            sc[(size_t)(t * ld + p)] = v;
        }
    }
    const int64_t gld = (W + 63) / 64 * 8;
    std::vector<uint32_t> gm((size_t)(T * gld + 16), 0xDEADBEEFu);
    for (int64_t t = 0; t < T; t++) model_gmax(sc.data() + t * ld, W, end[t], gm.data() + t * gld, gld);
    const int64_t ps = 16, maxp = (W + ps - 1) / ps;
    std::vector<int32_t> table((size_t)(T * maxp)), rseq(T);
    for (int64_t t = 0; t < T; t++) rseq[t] = (int32_t)((t * 7 + 3) % T);
    for (size_t i = 0; i < table.size(); i++) table[i] = (int32_t)((i * 2654435761u) % 100000);
    const int64_t nb1 = 2, nb0 = (int64_t)k * nb1 + 5;
    std::vector<int32_t> idx((size_t)(T * nb0), 0x7f7f7f7f);
    la_tg_args A;
    memset(&A, 0, sizeof A);
    la_tr_args &a = A.r;
    a.scores = sc.data();
    a.ld = ld;
    a.T = T;
    a.W = W;
    a.end = end.data();
    a.k = k;
    a.to_slots = to_slots;
    a.table = table.data();
    a.maxp = maxp;
    a.ps = ps;
    a.row_seq = rseq.data();
    a.idx = idx.data();
    a.nb0 = nb0;
    a.nb1 = nb1;
    A.gmax = gm.data();
    A.gmax_ld = gld;
    emu_bitonic = 0;
    launch(tg_kernel, (int)T, 1, TR_NT, TG_SMEM, A);
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
        if (rb && bad < 3) printf("  row %lld (end %d, %zu valid) wrong\n", (long long)t, end[t], keys.size());
        bad += rb;
    }
    printf("%-30s T %lld W %6lld ld %6lld k %4d: %lld rows wrong, %d bitonic\n", name, (long long)T, (long long)W,
           (long long)ld, k, (long long)bad, emu_bitonic.load());
    if (bad) fails++;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1) { /* "profile": the bench's shape, one row of 131072 continuous scores, k 2048 */
        for (int i = 0; i < 9; i++) emu_bars[i] = emu_trips[i] = 0;
        run("profile (continuous)", 1, 131072, 2048, K_CONT, 7, 0, 0);
        static const char *const ph[9] = {"a load maxima", "a reduce", "b group select", "b mask, list",
                                          "c gather, compact", "d hist scan", "d radix in b1",
                                          "d bucket count, scatter", "d rank, output"};
        for (int i = 0; i < 9; i++)
            printf("  phase %-24s barriers %3lld  trips/thread %8.2f\n", ph[i], emu_bars[i].load(),
                   emu_trips[i].load() / (double)TR_NT);
        return fails != 0;
    }
    static const int64_t Ws[8] = {1, 7, 8, 9, 63, 1000, 4096, 131072};
    static const int ks[4] = {1, 5, 2048, 700};
    unsigned seed = 1;
    for (int wi = 0; wi < 8; wi++)
        for (int ki = 0; ki < 4; ki++) {
            const int64_t W = Ws[wi];
            if (W == 131072 && ki == 3) continue;
            const int kinds = W >= 4096 ? 3 : 8; /* every kind on the short rows, a rotation on the long */
            for (int c = 0; c < kinds; c++) {
                const int kind = W < 4096 ? c : c == 0 ? (int)K_CONT : (int)((seed + c) % 8);
                static const char *const kn[8] = {"continuous", "ties (7 values)", "one value", "NaN inf -inf +-0",
                                                  "negative", "ascending", "descending", "rounded"};
                char name[64];
                snprintf(name, sizeof name, "%s", kn[kind]);
                run(name, W >= 131072 ? 2 : 3, W, ks[ki], kind, seed, (int)(seed & 1), (int)(seed % 3 == 0 ? 3 : 0));
                seed++;
            }
        }
    printf("%s\n", fails ? "FAILED" : "all passed");
    return fails != 0;
}
