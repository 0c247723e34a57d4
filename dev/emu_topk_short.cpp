/* Host emulation of the short-row top-k (src/cuda/topk_short.cuh; no GPU
 * needed): the kernel text compiled with g++ -DLA_TS_EMU, one std::thread
 * per CUDA thread (TS_NT of them, kept for all rows of a launch),
 * std::barrier for __syncthreads, a per-warp barrier and exchange slots for
 * the warp collectives (shuffles, ballot, match_any), std::atomic_ref for
 * the shared atomics; shared memory filled with 0xA5 before each row (it
 * starts undefined on the GPU).
 * Each row's k indices must equal a plain CPU top-k (sort of the valid
 * columns by key = sortable(score) << 32 | ~token, descending; -1 padding),
 * the output's gaps untouched. Rows: continuous scores, few distinct values
 * (heavy ties), all equal, NaN / +-inf / -inf / +-0 mixed, all -inf, mostly
 * -inf (fewer valid than k), rounded scores (small ties), far outliers;
 * lengths 1 .. 16384 (+ unaligned head and tail), k 1 .. 2048 and k > L;
 * contiguous rows at every alignment, a column stride of 3, column ranges,
 * gather mode (tokens through shuffled blocks). The rows whose ordering fell
 * back to the bitonic sort, the radix passes and the rows of the direct
 * order are counted.
 *   bash dev/emu_topk_short.sh [BUILD_DIR] */
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

/* ---- the CUDA primitives the kernel text uses ---------------------------- */
struct float4 {
    float x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline int __popc(uint32_t x) { return __builtin_popcount(x); }
static inline int __ffs(uint32_t x) { return __builtin_ffs((int)x); }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
using std::isfinite;

/* topk_common.cuh's keys and token map (that header needs CUDA): its text
 * between the TK_KEYS markers, cut by emu_topk_short.sh */
#define __device__
#define __forceinline__ inline
#include "emu_tk_keys.inc"
#undef __device__
#undef __forceinline__

struct emu_cta {
    std::barrier<> *bar;
    std::barrier<> *warp[32];
    uint64_t slot[32][32];
};
static emu_cta *emu_c;
static thread_local int emu_tid_v;

#define LA_TS_EMU
#define LA_TS_KERNELS
#define TS_DEV static inline
#define TS_MEMBER inline
static inline int ts_tid() { return emu_tid_v; }
static inline void ts_sync() { emu_c->bar->arrive_and_wait(); }
static inline uint32_t ts_atomic_add(uint32_t *p, uint32_t v) { return std::atomic_ref<uint32_t>(*p).fetch_add(v); }
/* every lane posts x; f(slots, lane) after the warp's barrier; a second
 * barrier before the slots are reused */
template <typename F> static inline uint64_t emu_warp(uint64_t x, F f) {
    const int w = emu_tid_v / 32, lane = emu_tid_v % 32;
    emu_c->slot[w][lane] = x;
    emu_c->warp[w]->arrive_and_wait();
    const uint64_t y = f(emu_c->slot[w], lane);
    emu_c->warp[w]->arrive_and_wait();
    return y;
}
static inline uint32_t ts_shfl_up(uint32_t x, int o) {
    return (uint32_t)emu_warp(x, [&](const uint64_t *s, int l) { return l >= o ? s[l - o] : s[l]; });
}
static inline uint32_t ts_shfl(uint32_t x, int src) {
    return (uint32_t)emu_warp(x, [&](const uint64_t *s, int) { return s[src]; });
}
static inline uint32_t ts_shfl_xor(uint32_t x, int o) {
    return (uint32_t)emu_warp(x, [&](const uint64_t *s, int l) { return s[l ^ o]; });
}
static inline uint64_t ts_shfl_xor64(uint64_t x, int o) {
    return emu_warp(x, [&](const uint64_t *s, int l) { return s[l ^ o]; });
}
static inline uint32_t ts_ballot(bool p) {
    return (uint32_t)emu_warp(p, [&](const uint64_t *s, int) {
        uint32_t m = 0;
        for (int i = 0; i < 32; i++) m |= (uint32_t)(s[i] != 0) << i;
        return (uint64_t)m;
    });
}
static inline uint32_t ts_match_any(uint32_t x) {
    return (uint32_t)emu_warp(x, [&](const uint64_t *s, int l) {
        uint32_t m = 0;
        for (int i = 0; i < 32; i++) m |= (uint32_t)(s[i] == s[l]) << i;
        return (uint64_t)m;
    });
}
static inline uint32_t ts_atomic_max(uint32_t *p, uint32_t v) {
    std::atomic_ref<uint32_t> a(*p);
    uint32_t o = a.load();
    while (o < v && !a.compare_exchange_weak(o, v)) {
    }
    return o;
}
static inline void ts_add_if(bool c, uint32_t *h, uint32_t i, uint32_t v) {
    if (c) ts_atomic_add(&h[i], v);
}
static inline void ts_push_if(bool c, uint32_t *h, uint32_t i, uint64_t *dst, uint64_t x) {
    if (c) dst[ts_atomic_add(&h[i], 1u) & 0xFFFFu] = x;
}
static inline uint32_t ts_reduce_max(uint32_t x) {
    return (uint32_t)emu_warp(x, [&](const uint64_t *s, int) {
        uint64_t m = 0;
        for (int i = 0; i < 32; i++) m = std::max(m, s[i]);
        return m;
    });
}
static inline uint32_t ts_reduce_min(uint32_t x) {
    return (uint32_t)emu_warp(x, [&](const uint64_t *s, int) {
        uint64_t m = ~0ull;
        for (int i = 0; i < 32; i++) m = std::min(m, s[i]);
        return m;
    });
}
static inline float4 ts_ldg4(const float4 *p) {
    if (((uintptr_t)p) & 15) {
        fprintf(stderr, "unaligned float4 load\n");
        abort();
    }
    return *p;
}
static inline float ts_ldg(const float *p) { return *p; }

static std::atomic<int> emu_bitonic{0}, emu_pass[7], emu_direct{0};
#define TS_NOTE_BITONIC() emu_bitonic++
#define TS_NOTE_PASSES(n) emu_pass[n]++
#define TS_NOTE_DIRECT() emu_direct++
#include "cuda/topk_short.cuh"

/* ---- the test --------------------------------------------------------------- */
static uint64_t ref_key(float f, uint32_t tok) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t fk = f != f ? 0xFFFFFFFFu : (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (uint64_t)fk << 32 | (uint32_t)~tok;
}

/* one launch: R rows, every thread kept for all of them */
template <bool G> static void launch(const std::vector<ts_row> &rows) {
    std::vector<unsigned char> sm(sizeof(ts_smem) + 16);
    ts_smem *S = (ts_smem *)(((uintptr_t)sm.data() + 15) & ~(uintptr_t)15);
    std::barrier<> bar(TS_NT);
    emu_cta c;
    c.bar = &bar;
    for (int w = 0; w < TS_NW; w++) c.warp[w] = new std::barrier<>(32);
    emu_c = &c;
    std::vector<std::thread> th;
    th.reserve(TS_NT);
    for (int i = 0; i < TS_NT; i++)
        th.emplace_back([&, i]() {
            emu_tid_v = i;
            for (const ts_row &r : rows) {
                if (i == 0) memset(S, 0xA5, sizeof(ts_smem));
                ts_sync();
                ts_topk_row<G>(r, *S);
                ts_sync();
            }
        });
    for (auto &x : th) x.join();
    for (int w = 0; w < TS_NW; w++) delete c.warp[w];
}

static int fails = 0;
static int64_t nrows_total = 0;

/* kind: 0 normal, 1 seven values (heavy ties), 2 all equal, 3 NaN / +-inf /
 * -inf / +-0 mixed, 4 all -inf, 5 mostly -inf (fewer valid than k), 6
 * rounded (small ties), 7 far outliers, 8 NaN only and -inf, 9 distinct
 * scores in one bin of the first radix pass (the second pass resolves), 10
 * in one bin of the second (the third resolves; L > 1024: ties, the token
 * passes), 11 the last 30% of the row -1e30 (masked by a large negative),
 * 12 a few +-3e38 (a score range past FLT_MAX)
 * layout: 0 contiguous (rows at every alignment), 1 column stride 3,
 * 2 column ranges, 3 gather mode (tokens through shuffled blocks of 16) */
static void run(int R, int64_t L, int k, int kind, int layout, unsigned seed) {
    std::mt19937_64 g(seed * 7919 + L * 31 + k);
    std::normal_distribution<float> nd(0.f, 1.f);
    const int64_t cs = layout == 1 ? 3 : 1, ld = L * cs + 1; /* odd ld: every row alignment */
    std::vector<float> sc((size_t)(R * ld + 8), NAN);
    float *base = sc.data() + 1;
    const int B = 16;
    const int64_t nbk = (L + B - 1) / B;
    std::vector<int32_t> blocks((size_t)(R * nbk));
    for (int rw = 0; rw < R; rw++) {
        std::vector<int32_t> perm(nbk);
        for (int64_t i = 0; i < nbk; i++) perm[i] = (int32_t)i * 3 + 1;
        std::shuffle(perm.begin(), perm.end(), g);
        for (int64_t i = 0; i < nbk; i++) blocks[(size_t)(rw * nbk + i)] = perm[i];
    }
    for (int rw = 0; rw < R; rw++)
        for (int64_t p = 0; p < L; p++) {
            float v = nd(g);
            const unsigned x = (unsigned)(g() % 1000);
            if (kind == 1) v = (float)(g() % 7) * 0.5f - 1.f;
            else if (kind == 2) v = 1.5f;
            else if (kind == 3) v = x < 20 ? NAN : x < 30 ? INFINITY : x < 130 ? -INFINITY : x < 140 ? 0.f : x < 150 ? -0.f : v;
            else if (kind == 4) v = -INFINITY;
            else if (kind == 5) v = x < 985 ? -INFINITY : v;
            else if (kind == 6) v = std::round(v * 256.f) / 256.f;
            else if (kind == 7) v = x == 0 ? 1e30f * (1.f + (float)(g() % 100)) : v;
            else if (kind == 8) v = x < 300 ? NAN : -INFINITY;
            else if (kind == 11) v = p >= L * 7 / 10 ? -1e30f : v; /* masked by a large negative: the low tail */
            else if (kind == 12) v = x < 3 ? (x & 1 ? 3e38f : -3e38f) : v; /* a score range past FLT_MAX */
            else if (kind == 9 || kind == 10) { /* one bin of the first pass (9) or of the second (10) */
                const uint32_t m = kind == 9 ? 0x1FFFFFu : 0x3FFu;
                v = __uint_as_float(0x3F800000u + (uint32_t)((p * 40503 + rw * 977) & m));
            }
            base[rw * ld + p * cs] = v;
        }
    const int64_t ob = (int64_t)k * 2 + 3; /* out row stride; out_cs 2: gaps stay untouched */
    std::vector<int32_t> out((size_t)(R * ob), 0x7f7f7f7f);
    std::vector<ts_row> rows(R);
    std::vector<int64_t> los(R), his(R);
    for (int rw = 0; rw < R; rw++) {
        int64_t lo = 0, hi = L;
        if (layout == 2) {
            lo = (int64_t)(g() % (uint64_t)(L + 1));
            hi = lo + (int64_t)(g() % (uint64_t)(L - lo + 1));
            if (rw == 0) lo = 0, hi = L;
        }
        los[rw] = lo, his[rw] = hi;
        ts_row &r = rows[rw];
        r.row = base + rw * ld;
        r.cs = cs;
        r.lo = lo;
        r.hi = hi;
        r.blocks = layout == 3 ? blocks.data() + rw * nbk : nullptr;
        r.B = B;
        r.k = (uint32_t)k;
        r.out = out.data() + rw * ob;
        r.out_cs = 2;
    }
    const int b0 = emu_bitonic;
    if (layout == 3) launch<true>(rows);
    else launch<false>(rows);
    int64_t bad = 0;
    for (int rw = 0; rw < R; rw++) {
        std::vector<uint64_t> keys;
        for (int64_t p = los[rw]; p < his[rw]; p++) {
            const float v = base[rw * ld + p * cs];
            const uint32_t tok = layout == 3 ? tk_token<true>(rows[rw].blocks, B, p) : (uint32_t)p;
            if (v != -INFINITY) keys.push_back(ref_key(v, tok));
        }
        std::sort(keys.begin(), keys.end(), [](uint64_t x, uint64_t y) { return x > y; });
        int rb = 0;
        for (int i = 0; i < k; i++) {
            const int32_t want = i < (int)keys.size() ? (int32_t)~(uint32_t)keys[i] : -1;
            rb |= out[(size_t)(rw * ob + 2 * i)] != want;
        }
        for (int64_t j = 0; j < ob; j++)
            if (j % 2 || j / 2 >= k) rb |= out[(size_t)(rw * ob + j)] != 0x7f7f7f7f;
        bad += rb;
    }
    nrows_total += R;
    static const char *kinds[] = {"normal", "7 values", "all equal", "NaN/inf/-inf/0", "all -inf",
                                  "mostly -inf", "rounded", "outliers", "NaN and -inf", "one bin 1",
                                  "one bin 2", "-1e30 tail", "past FLT_MAX"};
    static const char *lays[] = {"contiguous", "stride 3", "ranges", "gather"};
    printf("L %5lld k %4d %-15s %-10s: %lld of %d rows wrong%s\n", (long long)L, k, kinds[kind], lays[layout],
           (long long)bad, R, emu_bitonic - b0 ? " (bitonic order)" : "");
    if (bad) fails++;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    const int64_t Ls[] = {1, 63, 65, 1000, 2048, 8192, 8193, 16384};
    const int ks[] = {1, 64, 2048, 0}; /* 0: k = min(L + 5, 2048) (k > L where L < 2043) */
    unsigned seed = 1;
    for (int64_t L : Ls)
        for (int k0 : ks) {
            const int k = k0 ? k0 : (int)std::min<int64_t>(L + 5, 2048);
            run(2, L, k, 0, (int)(seed % 4), seed), seed++;
            if (quick) continue;
            run(2, L, k, 1, (int)(seed % 4), seed), seed++;
            run(2, L, k, 3, (int)(seed % 4), seed), seed++;
        }
    /* the other kinds at a few sizes, every layout */
    const int64_t Ls2[] = {65, 8192, 16384};
    for (int64_t L : Ls2)
        for (int kind = 2; kind <= 12; kind++) {
            if (kind == 3) continue;
            run(2, L, 2048, kind, (int)(seed % 4), seed), seed++;
            if (!quick) run(1, L, 100, kind, (int)((seed + 1) % 4), seed), seed++;
        }
    run(2, 1000, 64, 10, 0, seed++); /* distinct: the third pass resolves */
    for (int k : {1023, 1024, 1025}) /* the direct order's lower bound: the lanes' 1st or 2nd largest key */
        run(2, 8192, k, 0, (int)(seed % 4), seed), seed++;
    run(2, 4096, 2048, 0, 0, seed++); /* the k-th key near 0: a range across the sign */
    run(2, 1024, 2048, 10, 1, seed++);
    for (int layout = 0; layout < 4; layout++) {
        run(3, 8192, 2048, 0, layout, seed++); /* HISA's candidate rows */
        run(2, 16384, 2048, 1, layout, seed++);
    }
    printf("rows: %lld; radix passes (rows):", (long long)nrows_total);
    for (int i = 1; i < 7; i++) printf(" %d:%d", i, emu_pass[i].load());
    printf("; bitonic order: %d; direct order: %d\n", emu_bitonic.load(), emu_direct.load());
    printf("%s\n", fails ? "FAILED" : "all passed");
    return fails != 0;
}
