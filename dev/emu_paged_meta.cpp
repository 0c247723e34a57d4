/* Host emulation of paged_meta.cu's kernels, run by dev/emu_paged_meta.sh:
 * the kernel text cut from the .cu file runs with one std::thread per CUDA
 * thread (std::barrier for __syncthreads, std::atomic_ref for the global
 * atomics; CTAs one after another, so __shared__ is a static), and
 * pg_meta_packed_kernel (one warp a sequence) is compared with
 * pg_meta_kernel (one CTA a sequence) on rows without q_seq: the clamped
 * table, the lengths, the rows' metadata and the status words (the kinds
 * found and the host word; the first error's values where there is one
 * error). Cases: lengths 0, 1, a page, 63 ... 20000 pages of 64 and 16
 * tokens, next_n 1-40, strided tables and context_lens, bad pages, bad
 * lengths (negative, over the capacity, over lenmax), bad pooled counts,
 * without the pooled counts. Outputs poisoned. */
#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "longattn.h"

enum { LA_PG_BAD_PAGE = 1, LA_PG_BAD_LEN = 2, LA_PG_BAD_QSEQ = 4, LA_PG_BAD_POOL = 8 };
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
struct emu_idx {
    unsigned x, y, z;
};
static thread_local emu_idx threadIdx, blockIdx;
static thread_local std::barrier<> *emu_bar;
static inline void __syncthreads() { emu_bar->arrive_and_wait(); }
static inline int __syncthreads_count(int) { abort(); } /* q_seq only */
static inline unsigned __ballot_sync(unsigned, int) { abort(); }
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline int atomicOr(int32_t *p, int v) { return std::atomic_ref<int32_t>(*p).fetch_or(v); }
static inline int atomicCAS(int32_t *p, int cmp, int v) {
    std::atomic_ref<int32_t>(*p).compare_exchange_strong(cmp, v);
    return cmp;
}
static inline void la_pdl_launch_dependents() {}
static inline void la_pdl_wait() {}
#include "emu_pg_args.inc"
namespace {
#include "emu_pg_kern.inc"
}

template <class F> static void launch(unsigned gx, int nt, F f) {
    for (unsigned bx = 0; bx < gx; bx++) {
        std::barrier<> bar(nt);
        std::vector<std::thread> th;
        for (int i = 0; i < nt; i++)
            th.emplace_back([&, i] {
                threadIdx = {(unsigned)i, 0, 0};
                blockIdx = {bx, 0, 0};
                emu_bar = &bar;
                f();
            });
        for (auto &x : th) x.join();
    }
}

static uint64_t rs = 88172645463325252ull;
static uint32_t ur(uint32_t n) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (uint32_t)((rs >> 11) % n);
}

struct mcase {
    int64_t ps, maxp, next_n, B, bt1, cl0, pooled, lenmax_short;
    std::vector<int32_t> lens; /* as passed (bad ones included) */
    int bad_pages, bad_counts; /* the first at sequence 0's page 5 / block 3, the rest anywhere */
    int single;                /* exactly one error: its values compared too */
};

struct outs {
    std::vector<int32_t> tab, meta, st;
    int32_t mirror;
};

static int run(const mcase &C) {
    const int64_t nseq = (int64_t)C.lens.size(), T = nseq * C.next_n, cap = C.maxp * C.ps, num_pages = 5000;
    const int64_t lenmax = C.lenmax_short ? cap - C.ps - 3 : cap;
    const int64_t max_blocks = (lenmax + C.B - 1) / C.B;
    std::vector<int32_t> bt((size_t)(nseq * C.maxp * C.bt1)), cl((size_t)(nseq * C.cl0), -77), pc;
    for (auto &x : bt) x = (int32_t)ur((uint32_t)num_pages);
    for (int i = 0; i < C.bad_pages; i++)
        bt[i ? ur((uint32_t)bt.size()) : (size_t)(5 * C.bt1)] = i % 2 ? -1 - (int32_t)ur(9) : (int32_t)(num_pages + ur(9));
    for (int64_t s = 0; s < nseq; s++) cl[(size_t)(s * C.cl0)] = C.lens[(size_t)s];
    if (C.pooled) {
        pc.assign((size_t)(nseq * max_blocks), 0);
        for (int64_t s = 0; s < nseq; s++) {
            int64_t L = C.lens[(size_t)s];
            L = L < 0 ? 0 : L > cap ? cap : L;
            L = L > lenmax ? lenmax : L;
            for (int64_t b = 0; b * C.B < L; b++) pc[(size_t)(s * max_blocks + b)] = (int32_t)(L - b * C.B < C.B ? L - b * C.B : C.B);
        }
        for (int i = 0; i < C.bad_counts; i++) pc[i ? ur((uint32_t)pc.size()) : 3] += 1;
    }
    auto go = [&](bool packed) {
        outs o;
        o.tab.assign((size_t)(nseq * C.maxp), 0x5a5a5a5a);
        o.meta.assign((size_t)(3 * T + 2 * nseq + 1), 0x5a5a5a5a);
        o.st.assign(8, 0);
        o.mirror = 0;
        pg_meta M = {};
        M.bt = bt.data(), M.cl = cl.data(), M.qs = nullptr;
        M.bt0 = C.maxp * C.bt1, M.bt1 = C.bt1, M.maxp = C.maxp, M.cl0 = C.cl0, M.qs0 = 0;
        M.next_n = C.next_n, M.nseq = nseq, M.T = T, M.num_pages = num_pages, M.ps = C.ps;
        M.cap = cap, M.lenmax = lenmax, M.pcount = C.pooled ? pc.data() : nullptr, M.max_blocks = max_blocks, M.B = C.B;
        M.status = o.st.data(), M.mirror = &o.mirror;
        M.tab = o.tab.data();
        M.row_seq = o.meta.data(), M.row_end = M.row_seq + T, M.lens = M.row_end + T, M.rows = M.lens + nseq,
        M.row0 = M.rows + T;
        if (packed) launch((unsigned)((nseq + PG_PACK_SEQ - 1) / PG_PACK_SEQ), 32 * PG_PACK_SEQ, [&] { pg_meta_packed_kernel(M); });
        else launch((unsigned)nseq, PG_META_THREADS, [&] { pg_meta_kernel(M); });
        return o;
    };
    const outs a = go(false), b = go(true);
    int bad = (a.tab != b.tab) + 2 * (a.meta != b.meta) + 4 * (a.st[0] != b.st[0]) + 8 * ((a.mirror != 0) != (b.mirror != 0));
    if (C.single && (memcmp(a.st.data(), b.st.data(), 6 * 4) || a.st[0] == 0)) bad |= 16;
    printf("%s%s nseq %lld ps %lld maxp %lld next_n %lld B %lld%s%s%s bad pages %d counts %d: kinds %d / %d, differing %d\n",
           bad ? "FAIL" : "ok  ", C.single ? " (one error)" : "", (long long)nseq, (long long)C.ps, (long long)C.maxp, (long long)C.next_n, (long long)C.B,
           C.pooled ? " pooled" : "", C.bt1 > 1 ? " strided" : "", C.lenmax_short ? " lenmax<cap" : "", C.bad_pages,
           C.bad_counts, a.st[0], b.st[0], bad);
    return bad != 0;
}

int main() {
    const mcase cases[] = {
        {64, 2048, 1, 128, 1, 1, 1, 0, {131072, 131072, 100000, 1, 0, 64, 65, 127, 128, 129}, 0, 0},
        {64, 2048, 1, 128, 1, 1, 1, 1, {131072, 5000, 70000, 131000}, 0, 0},         /* over lenmax */
        {64, 300, 2, 128, 2, 3, 1, 0, {-5, 19200, 19201, 7, 1 << 30, 300}, 0, 0},
        {64, 300, 1, 128, 1, 1, 1, 1, {3000, 19200, 7}, 0, 0, 1},                  /* one over lenmax */
        {64, 300, 1, 128, 1, 1, 1, 0, {3000, -1, 7}, 0, 0, 1},                     /* one negative */    /* negative, over cap */
        {64, 2048, 1, 128, 1, 1, 1, 0, {131072, 4000}, 1, 0, 1},                        /* one bad page */
        {64, 2048, 1, 128, 1, 1, 1, 0, {131072, 4000, 9}, 0, 1, 1},                     /* one bad pooled count */
        {16, 1500, 3, 64, 1, 1, 1, 0, {24000, 1, 0, 333, 23999, 16, 17, 5000, 12000}, 6, 4},
        {64, 100, 40, 128, 1, 2, 0, 0, {6400, 39, 0, 41, 100}, 3, 0},                /* no pooled counts, next_n > 32 */
        {64, 1, 1, 128, 1, 1, 1, 0, {64, 0, 1, 65}, 0, 0},
    };
    int fails = 0, n = 0;
    for (const mcase &c : cases) fails += run(c), n++;
    printf("%s: %d of %d cases failed\n", fails ? "FAIL" : "ok", fails, n);
    return fails != 0;
}
