/* Host emulation of paged_hisa_cand.cu (variant "blockmajor" of family
 * "paged_hisa_cand"), run by dev/emu_paged_hisa.sh: the kernel text cut from
 * the .cu file (bucket counts, scan, scatter, fill, block-major scores) runs
 * with one std::thread per CUDA thread; ldmatrix .x4, mma.sync (e4m3
 * m16n8k32 and bf16 m16n8k16) and the xor shuffles by their PTX ISA
 * fragment layouts, lanes exchanging through per-warp slots between two
 * warp barriers. The emulated mma adds a k-step's 32 bytes of products in
 * double to the fp32 accumulator (one rounding): not the hardware's
 * rounding, but a fixed function of the element's row, column and
 * accumulator, which the reference below applies per (query, key) in the
 * gather kernel's order (k-steps ascending; per lane heads 8j+2qd, +1 folded
 * with fmaf; the quad's butterfly sum; times the key's fp8 scale). So the
 * comparison checks every index of the block-major path (fragments, bucket
 * lists, chunks, columns, ranges, -inf fill) bit for bit. Cases: e4m3 and
 * bf16 pages, HI 64 / 32, buckets of 1 ... 150 queries (several chunks),
 * -1 slots, rows ending inside a block, a partial last block, topk > m·B. */
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "longattn.h"

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(x)
#define LA_CU_SM90_CODE 1
#define __trap() abort()
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) int4 {
    int x, y, z, w;
};
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
struct emu_idx {
    unsigned x, y, z;
};
static thread_local emu_idx threadIdx, blockIdx, blockDim, gridDim;
static thread_local unsigned char *emu_sm;
static thread_local std::barrier<> *emu_bar;
static thread_local std::barrier<> *emu_wbar;
static thread_local uint32_t (*emu_slot)[8]; /* this warp's exchange slots [32][8] */
static inline void __syncthreads() { emu_bar->arrive_and_wait(); }
static inline int atomicAdd(int32_t *p, int v) { return std::atomic_ref<int32_t>(*p).fetch_add(v); }
static inline unsigned char *pc_smem() { return emu_sm; }
static inline float la_cu_ld(const void *p, int dt, int64_t off) { return dt == LA_F32 ? ((const float *)p)[off] : NAN; }
static inline float la_relu_nan(float x) { return x != x ? x : (x > 0.f ? x : 0.f); }
static inline void la_cp16(void *d, const void *s) { memcpy(d, s, 16); }
static inline void la_cp_commit_nc() {}
static inline void la_cp_wait_all_nc() {}
static inline int lane_of() { return (int)threadIdx.x % 32; }
static inline void wsync() { emu_wbar->arrive_and_wait(); }
static float __shfl_xor_sync(unsigned, float v, int o) {
    uint32_t u;
    memcpy(&u, &v, 4);
    emu_slot[lane_of()][0] = u;
    wsync();
    u = emu_slot[lane_of() ^ o][0];
    wsync();
    memcpy(&v, &u, 4);
    return v;
}
static const void *emu_addr[1024];
static void la_ldsm4(uint32_t *r, const void *p) {
    const int w = (int)threadIdx.x / 32, lane = lane_of();
    emu_addr[w * 32 + lane] = p;
    wsync();
    for (int j = 0; j < 4; j++) {
        const uint8_t *row = (const uint8_t *)emu_addr[w * 32 + 8 * j + lane / 4];
        memcpy(&r[j], row + 4 * (lane % 4), 4);
    }
    wsync();
}
static int emu_eb = 1; /* element bytes of the mma being emulated */
static float e4m3f(unsigned b) {
    const unsigned e = (b >> 3) & 15u, m = b & 7u;
    float v;
    if (e == 0) v = (float)m * 0.001953125f;
    else if (e == 15 && m == 7) v = NAN;
    else v = ldexpf(1.f + m / 8.f, (int)e - 7);
    return (b & 0x80u) ? -v : v;
}
static float bf16f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* Σ over one k-step of 32 bytes (a, b: the row's / column's bytes in k order), added to c in double */
static float kstep(float c, const uint8_t *a, const uint8_t *b, int eb) {
    double s = 0;
    if (eb == 1)
        for (int k = 0; k < 32; k++) s += (double)e4m3f(a[k]) * e4m3f(b[k]);
    else
        for (int k = 0; k < 16; k++) {
            uint16_t x, y;
            memcpy(&x, a + 2 * k, 2);
            memcpy(&y, b + 2 * k, 2);
            s += (double)bf16f(x) * bf16f(y);
        }
    return (float)((double)c + s);
}
/* m16n8k32 e4m3 / m16n8k16 bf16 on fragments: A row r bytes = a regs of lanes 4(r%8)+c, B col n of lanes 4n+c */
static void emu_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    const int lane = lane_of();
    for (int i = 0; i < 4; i++) emu_slot[lane][i] = a[i];
    emu_slot[lane][4] = b0;
    emu_slot[lane][5] = b1;
    wsync();
    auto arow = [&](int r, uint8_t *out) { /* the 32 bytes of A row r in k order */
        for (int cc = 0; cc < 4; cc++) {
            const uint32_t *s = emu_slot[4 * (r % 8) + cc];
            memcpy(out + 4 * cc, &s[r >= 8 ? 1 : 0], 4);
            memcpy(out + 16 + 4 * cc, &s[r >= 8 ? 3 : 2], 4);
        }
    };
    auto bcol = [&](int n, uint8_t *out) {
        for (int cc = 0; cc < 4; cc++) {
            memcpy(out + 4 * cc, &emu_slot[4 * n + cc][4], 4);
            memcpy(out + 16 + 4 * cc, &emu_slot[4 * n + cc][5], 4);
        }
    };
    const int g = lane / 4, cq = lane % 4;
    uint8_t ra[32], rb[32], bc0[32], bc1[32];
    bcol(2 * cq, bc0);
    bcol(2 * cq + 1, bc1);
    float d[4];
    arow(g, ra);
    arow(g + 8, rb);
    d[0] = kstep(c[0], ra, bc0, emu_eb);
    d[1] = kstep(c[1], ra, bc1, emu_eb);
    d[2] = kstep(c[2], rb, bc0, emu_eb);
    d[3] = kstep(c[3], rb, bc1, emu_eb);
    wsync();
    for (int i = 0; i < 4; i++) c[i] = d[i];
}
static inline void la_mma_e4m3(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) { emu_mma(c, a, b0, b1); }
static inline void la_mma_bf16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) { emu_mma(c, a, b0, b1); }

enum { PC_MIN_ROWS = 8 };
#include "emu_pc_args.inc"
#include "emu_pc_kern.inc"

template <class F> static void launch(unsigned gx, int nt, size_t smem, F f) {
    std::vector<unsigned char> sm(smem + 16);
    static uint32_t slots[32][32][8];
    for (unsigned bx = 0; bx < gx; bx++) {
        std::barrier<> bar(nt);
        std::vector<std::unique_ptr<std::barrier<>>> wb;
        for (int i = 0; i < (nt + 31) / 32; i++) wb.push_back(std::make_unique<std::barrier<>>(32));
        std::vector<std::thread> th;
        for (int i = 0; i < nt; i++)
            th.emplace_back([&, i] {
                threadIdx = {(unsigned)i, 0, 0};
                blockIdx = {bx, 0, 0};
                blockDim = {(unsigned)nt, 1, 1};
                gridDim = {gx, 1, 1};
                emu_sm = sm.data();
                emu_bar = &bar;
                emu_wbar = wb[i / 32].get();
                emu_slot = slots[i / 32];
                f();
            });
        for (auto &x : th) x.join();
    }
}

static uint64_t rs = 88172645463325252ull;
static double ur() {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (double)(rs >> 11) * (1.0 / 9007199254740992.0);
}

struct ccase {
    int eb, HI, m, topk;
    std::vector<int> lens, rows; /* per sequence: cached tokens, query rows */
};

static int run(const ccase &C) {
    const int EB = C.eb, HI = C.HI, dI = 128, RB = dI * EB, PS = 64;
    const int nseq = (int)C.lens.size();
    int64_t T = 0, maxlen = 1;
    for (int s = 0; s < nseq; s++) T += C.rows[s], maxlen = std::max<int64_t>(maxlen, C.lens[s]);
    const int64_t maxp = (maxlen + PS - 1) / PS + 1, Lk = maxp * PS, nbmax = (Lk + 127) / 128;
    const int64_t m = std::min<int64_t>(C.m, nbmax), W = std::max<int64_t>(m * 128, C.topk);
    /* pages: shuffled over the sequences */
    int64_t npages = 0;
    for (int s = 0; s < nseq; s++) npages += (C.lens[s] + PS - 1) / PS;
    npages += 1;
    const int64_t page_bytes = (int64_t)PS * RB + (EB == 1 ? PS * 4 : 0);
    std::vector<uint8_t> pages((size_t)(npages * page_bytes));
    for (int64_t pg = 0; pg < npages; pg++) {
        uint8_t *b = &pages[(size_t)(pg * page_bytes)];
        for (int64_t i = 0; i < (int64_t)PS * RB; i++) {
            uint8_t x = (uint8_t)(ur() * 256);
            if (EB == 1 && (x & 0x7f) == 0x7f) x ^= 1;
            if (EB == 2 && (i & 1)) x = (uint8_t)((x & 0x80) | (0x3c + (x & 3))); /* bf16 high byte: |v| ~ 0.01..1 */
            b[i] = x;
        }
        if (EB == 1)
            for (int j = 0; j < PS; j++) {
                const float sc = (float)(0.01 + ur());
                memcpy(b + PS * RB + 4 * j, &sc, 4);
            }
    }
    std::vector<int32_t> perm(npages);
    for (int64_t i = 0; i < npages; i++) perm[i] = (int32_t)i;
    for (int64_t i = npages - 1; i > 0; i--) std::swap(perm[i], perm[(int64_t)(ur() * (i + 1))]);
    std::vector<int32_t> table((size_t)(nseq * maxp), 0);
    int64_t at = 0;
    for (int s = 0; s < nseq; s++)
        for (int64_t j = 0; j < (C.lens[s] + PS - 1) / PS; j++) table[s * maxp + j] = perm[at++];
    /* rows: sequence s's rows interleaved with the others', ends L - nq + j + 1 */
    std::vector<int32_t> row_seq(T), row_end(T), lens(C.lens.begin(), C.lens.end());
    {
        std::vector<int> done(nseq, 0);
        int64_t t = 0;
        while (t < T)
            for (int s = 0; s < nseq && t < T; s++)
                if (done[s] < C.rows[s]) {
                    row_seq[t] = s;
                    row_end[t] = std::max(0, C.lens[s] - C.rows[s] + done[s] + 1);
                    done[s]++, t++;
                }
    }
    /* kept blocks: block 0 and the last always (shared by many rows), others random, ascending, -1 last */
    std::vector<int32_t> kept((size_t)(T * m), -1);
    for (int64_t t = 0; t < T; t++) {
        const int64_t e = row_end[t], nblk = (e + 127) / 128;
        std::vector<int32_t> ks;
        for (int64_t b = 0; b < nblk; b++)
            if (b == 0 || b == nblk - 1 || ur() < 0.5) ks.push_back((int32_t)b);
        if ((int64_t)ks.size() > m) ks.resize((size_t)m); /* (not a top-k: any ascending set will do) */
        if (t % 5 == 3 && ks.size() > 1) ks.pop_back();  /* a row with fewer blocks than m */
        for (size_t i = 0; i < ks.size(); i++) kept[(size_t)(t * m) + i] = ks[i];
    }
    std::vector<uint8_t> q((size_t)(T * HI * RB));
    for (size_t i = 0; i < q.size(); i++) {
        uint8_t x = (uint8_t)(ur() * 256);
        if (EB == 1 && (x & 0x7f) == 0x7f) x ^= 1;
        if (EB == 2 && (i & 1)) x = (uint8_t)((x & 0x80) | (0x3c + (x & 3)));
        q[i] = x;
    }
    std::vector<float> w((size_t)(T * HI));
    for (auto &x : w) x = (float)(ur() * 1.2 - 0.2);
    /* reference */
    std::vector<float> ref((size_t)(T * W), -INFINITY);
    for (int64_t t = 0; t < T; t++) {
        const int s = row_seq[t];
        const int64_t hi = std::min<int64_t>(row_end[t], Lk);
        for (int64_t slot = 0; slot < m; slot++) {
            const int32_t b = kept[(size_t)(t * m + slot)];
            if (b < 0) continue;
            for (int j = 0; j < 128; j++) {
                const int64_t tok = (int64_t)b * 128 + j;
                if (tok >= hi) continue;
                const uint8_t *pg = &pages[(size_t)(table[s * maxp + tok / PS] * page_bytes)];
                const uint8_t *kr = pg + (tok % PS) * RB;
                float scale = 1.f;
                if (EB == 1) memcpy(&scale, pg + PS * RB + (tok % PS) * 4, 4);
                std::vector<float> acc(HI);
                for (int h = 0; h < HI; h++) {
                    float a = 0.f;
                    for (int ks = 0; ks < RB / 32; ks++) a = kstep(a, kr + 32 * ks, &q[(size_t)((t * HI + h) * RB + 32 * ks)], EB);
                    acc[h] = a;
                }
                float x[4];
                for (int qd = 0; qd < 4; qd++) {
                    float v = 0.f;
                    for (int jj = 0; jj < HI / 8; jj++) {
                        v = fmaf(w[t * HI + 8 * jj + 2 * qd], la_relu_nan(acc[8 * jj + 2 * qd]), v);
                        v = fmaf(w[t * HI + 8 * jj + 2 * qd + 1], la_relu_nan(acc[8 * jj + 2 * qd + 1]), v);
                    }
                    x[qd] = v;
                }
                const float v = (x[0] + x[1]) + (x[2] + x[3]);
                ref[(size_t)(t * W + slot * 128 + j)] = EB == 1 ? v * scale : v;
            }
        }
    }
    /* the block-major path (la_ph_cand_scores' host part, then the kernels) */
    std::vector<float> out((size_t)(T * W), 4321.f);
    pc_args a = {};
    a.T = T, a.m = m, a.nbmax = nbmax, a.kept = kept.data(), a.row_seq = row_seq.data(), a.row_end = row_end.data();
    a.lens = lens.data(), a.table = table.data(), a.maxp = maxp, a.pages = pages.data(), a.page_bytes = page_bytes;
    a.ps = PS, a.fp8 = EB == 1, a.q = q.data(), a.q_nb0 = (int64_t)HI * dI, a.q_nb1 = dI, a.w = w.data();
    a.w_dt = LA_F32, a.w_nb0 = HI, a.w_nb1 = 1, a.Lk = Lk, a.out = out.data(), a.out_ld = W, a.ncols = W;
    const int64_t nb = nseq * nbmax, npairs = T * m, nw_bound = npairs / PC_QPC + std::min(nb, npairs) + 1;
    std::vector<int32_t> cnt(nb, 0), boff(nb + 1, -7), cur(nb), list(npairs, -7), nwork(1, -7);
    std::vector<int4> work(nw_bound, int4{-7, -7, -7, -7});
    const unsigned g = (unsigned)std::max<int64_t>(1, std::min<int64_t>((npairs + 255) / 256, 4096));
    launch(std::min(g, 3u), 256, 0, [&] { pc_count_kernel(a, cnt.data()); });
    launch(1, PC_SCAN, 2 * PC_SCAN * 4, [&] { pc_scan_kernel(cnt.data(), nb, boff.data(), cur.data(), work.data(), nwork.data()); });
    launch(std::min(g, 2u), 256, 0, [&] { pc_scatter_kernel(a, cur.data(), list.data()); });
    launch((unsigned)T, 256, 0, [&] { pc_fill_kernel(a); });
    a.list = list.data(), a.boff = boff.data(), a.work = work.data(), a.nwork = nwork.data();
    emu_eb = EB;
    const size_t smem = 2 * (size_t)HI * RB + 2 * HI * 4;
    if (EB == 1 && HI == 64) launch((unsigned)nw_bound, PC_THREADS, smem, [&] { pc_score_kernel<64, 1>(a); });
    if (EB == 1 && HI == 32) launch((unsigned)nw_bound, PC_THREADS, smem, [&] { pc_score_kernel<32, 1>(a); });
    if (EB == 2 && HI == 64) launch((unsigned)nw_bound, PC_THREADS, smem, [&] { pc_score_kernel<64, 2>(a); });
    if (EB == 2 && HI == 32) launch((unsigned)nw_bound, PC_THREADS, smem, [&] { pc_score_kernel<32, 2>(a); });
    int64_t bad = 0, nvalid = 0, maxb = 0;
    for (size_t i = 0; i < out.size(); i++) {
        nvalid += ref[i] != -INFINITY;
        if (memcmp(&out[i], &ref[i], 4)) {
            if (bad < 4) printf("    row %zu col %zu: %.9g vs %.9g\n", i / W, i % W, out[i], ref[i]);
            bad++;
        }
    }
    for (int64_t i = 0; i < nb; i++) maxb = std::max<int64_t>(maxb, cnt[i]);
    printf("%s %s HI %d m %lld topk %d: rows %lld, work items %d (bound %lld), largest bucket %lld, valid scores %lld: "
           "differing %lld\n", bad ? "FAIL" : "ok  ", EB == 1 ? "e4m3" : "bf16", HI, (long long)m, C.topk,
           (long long)T, nwork[0], (long long)nw_bound, (long long)maxb, (long long)nvalid, (long long)bad);
    return bad != 0;
}

int main() {
    setvbuf(stdout, NULL, _IONBF, 0);
    const ccase cases[] = {
        {1, 64, 2, 300, {700, 300, 65}, {70, 2, 1}},
        {2, 64, 3, 512, {500, 129}, {6, 2}},
        {1, 32, 2, 200, {400, 1}, {3, 2}},
        {2, 32, 64, 100, {300}, {2}},
    };
    int fails = 0;
    for (const ccase &c : cases) fails += run(c);
    printf("%s: %d of %zu block-major cases failed\n", fails ? "FAIL" : "ok", fails, sizeof cases / sizeof cases[0]);
    return fails != 0;
}
