/* Host emulation of paged_hisa.cu's kernels (variant "fused" of family
 * "paged_hisa"), run by dev/emu_paged_hisa.sh: the kernel text cut from the
 * .cu file runs with one std::thread per CUDA thread (std::barrier for
 * __syncthreads, std::atomic_ref for the shared atomics), and its outputs are
 * compared bit for bit with the classic chain written out plainly here:
 * pg_means_kernel's means (sum / count), pg_score_kernel's PG_BLOCKS scores
 * (per head fmaf over d ascending from 0, ReLU, heads folded with fmaf in
 * ascending order; first / last block +inf, blocks past the range -inf),
 * la_topk's order (descending key, ties to the lower block, NaN first, -inf
 * never) and the ascending sort of the kept lists (-1 last).
 * Kernels: one row per CTA at 4 and 3 CTAs per SM (1, 2 and 3 tiles a CTA;
 * at 4 also the guarded d loop of variant "fused_guarded"; the branch-free
 * e4m3 q decode also checked on its own for every byte)
 * and two rows per CTA, forming the means or after the transposed-means
 * pass (pairs across sequence boundaries included: next_n 1 and 3, rows of
 * the later sequences first). Cases: HI 1/5/32/64, dI
 * 16/63/68/128, f32 and e4m3 q, lengths 1, 63, 65, 128, 1000, 5000, 40000,
 * next_n 1-4 (ranges ending before the length), the pooled sums (the score
 * kernel divides: B 128 / 64 / 32 by the exact reciprocal, B 96 and partial
 * last blocks by division) or the means precomputed, ties (repeated blocks,
 * zero queries), every block equal, NaN means, m 1 ... every block.
 * Poisoned: the outputs, shared memory (NaN at every CTA's start), the
 * pooled sums past each sequence's blocks (NaN). The pooled sums sized to
 * the longest sequence's blocks (max_blocks < nbmax: dev/emu_paged_hisa.sh
 * also runs an AddressSanitizer build) or one float off 16-byte alignment
 * (the plain-load path). */
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <thread>
#include <vector>

#include "longattn.h"

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(x)
struct alignas(16) float4 {
    float x, y, z, w;
};
struct emu_idx {
    unsigned x, y, z;
};
static thread_local emu_idx threadIdx, blockIdx;
static thread_local float *emu_sm;
static thread_local std::barrier<> *emu_bar;
static inline void __syncthreads() { emu_bar->arrive_and_wait(); }
static inline unsigned atomicAdd(uint32_t *p, uint32_t v) { return std::atomic_ref<uint32_t>(*p).fetch_add(v); }
static inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
static inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
struct la_cu_view {
    const void *data;
    int dt;
    int64_t nb[4];
};
static inline float __frcp_rn(float x) { return 1.f / x; }
static inline float la_cu_ld(const void *p, int dt, int64_t off) {
    return dt == LA_F32 ? ((const float *)p)[off] : NAN;
}
static inline float *ph_smem() { return emu_sm; }
static inline void ph_cp16(float *dst, const float *src) { memcpy(dst, src, 16); }
static inline void ph_pdl_launch() {}
static inline void ph_pdl_wait() {}
static inline uint32_t *ph_tk_smem() { return (uint32_t *)emu_sm; }
static inline void ph_tk_pdl_begin() {}
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline void ph_cp_commit() {}
template <int N> static inline void ph_cp_wait() {}
#include "emu_ph_args.inc"
#include "emu_ph_kern.inc"

/* Run kernel f over grid (gx, gy) of nt threads with smem bytes of shared memory. */
template <class F> static void launch(unsigned gx, unsigned gy, int nt, size_t smem, F f) {
    std::vector<float> sm((smem + 3) / 4 + 4);
    for (unsigned by = 0; by < gy; by++)
        for (unsigned bx = 0; bx < gx; bx++) {
            std::fill(sm.begin(), sm.end(), NAN); /* poisoned: nothing read before written */
            std::barrier<> bar(nt);
            std::vector<std::thread> th;
            for (int i = 0; i < nt; i++)
                th.emplace_back([&, i] {
                    threadIdx = {(unsigned)i, 0, 0};
                    blockIdx = {bx, by, 0};
                    emu_sm = sm.data();
                    emu_bar = &bar;
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
static float e4m3_of(unsigned b) { return ph_e4m3(b); }
static uint32_t key_of(float f) { return ph_fkey(f); }

struct tcase {
    int HI, dI, nn, m, B, e4m3, pooled, ties, nan;
    std::vector<int> lens;
    int tight = 0, misalign = 0; /* max_blocks = the longest sequence's blocks; psum one float off 16-byte alignment */
};

/* derived: 0 the rows from the metadata arrays (rows of the later
 * sequences first); 1 derived from context_lens (family
 * "paged_meta_overlap": rows next_n consecutive ones a sequence, the
 * metadata arrays NULL; context_lens strided, garbage between); 2 the same
 * with garbage lengths: the first sequence's negative (clamped to 0), the
 * last one's INT32_MAX (clamped to cap, then lenmax: the pooled sums' rows
 * when tight) */
static int run(const tcase &C, int R, int W, bool tk, int64_t tpc, bool topk_plain, bool guarded, int derived) {
    const int nseq = (int)C.lens.size(), T = nseq * C.nn, HI = C.HI, dI = C.dI;
    const int64_t B = C.B;
    int64_t Lmax = 1, maxlen = 1;
    for (int L : C.lens) Lmax = std::max<int64_t>(Lmax, L + 5), maxlen = std::max<int64_t>(maxlen, L);
    const int64_t nbmax = (Lmax + B - 1) / B;
    int64_t max_blocks = nbmax + 1;
    if (C.tight) {
        max_blocks = 1;
        for (int L : C.lens) max_blocks = std::max<int64_t>(max_blocks, (L + B - 1) / B);
    }
    /* the cap (the table's capacity: Lmax, nbmax = its blocks) and lenmax
     * (the pooled max_seq_len when tight, whose blocks are max_blocks) of
     * paged_index.cu; context_lens as the caller passes it (stride 2) and
     * the lengths pg_meta_kernel makes of it */
    const int64_t cap = Lmax, lenmax = C.tight ? std::min(cap, maxlen) : cap;
    std::vector<int32_t> cl(2 * (size_t)nseq, -123456);
    std::vector<int> Ls(C.lens.begin(), C.lens.end());
    for (int s = 0; s < nseq; s++) cl[2 * (size_t)s] = Ls[s];
    if (derived == 2) {
        cl[0] = -9, Ls[0] = 0;
        cl[2 * (size_t)(nseq - 1)] = 0x7fffffff, Ls[nseq - 1] = (int)lenmax;
    }
    const int64_t m = std::min<int64_t>(C.m, nbmax);
    /* pooled sums (NaN past each sequence's blocks), and the means the classic chain forms from them */
    std::vector<float> psum_buf((size_t)(nseq * max_blocks * dI) + 4), kbar((size_t)(nseq * nbmax * dI), 0.f);
    float *psum = psum_buf.data() + (C.misalign ? 1 : 0);
    for (size_t i = 0; i < (size_t)(nseq * max_blocks * dI); i++) psum[i] = (float)(ur() * 2 - 1) * 40.f;
    for (int s = 0; s < nseq; s++)
        for (int64_t b = (Ls[s] + B - 1) / B; b < max_blocks; b++)
            for (int d = 0; d < dI; d++) psum[(s * max_blocks + b) * dI + d] = NAN;
    for (int s = 0; s < nseq; s++)
        for (int64_t b = 0; b * B < Ls[s]; b++) {
            if ((C.ties == 1 && b % 3 == 2) || (C.ties == 2 && b > 0)) /* a block equal to the one before it: tied scores */
                memcpy(&psum[(s * max_blocks + b) * dI], &psum[(s * max_blocks + b - 1) * dI], sizeof(float) * dI);
            if (C.nan && b == 5) psum[(s * max_blocks + b) * dI + 1] = NAN;
            const int64_t cnt = std::min<int64_t>(B, Ls[s] - b * B);
            for (int d = 0; d < dI; d++)
                kbar[(s * nbmax + b) * dI + d] = psum[(s * max_blocks + b) * dI + d] / (float)cnt;
        }
    /* q (f32 values or e4m3 bytes), w, the row metadata */
    std::vector<float> q((size_t)T * HI * dI), w((size_t)T * HI);
    std::vector<uint8_t> q8((size_t)T * HI * dI);
    for (size_t i = 0; i < q.size(); i++) {
        q8[i] = (uint8_t)(ur() * 256);
        if ((q8[i] & 0x7f) == 0x7f) q8[i] ^= 1; /* no NaN bytes */
        q[i] = C.e4m3 ? e4m3_of(q8[i]) : (float)(ur() * 2 - 1);
        if (C.ties && i / dI % HI == 0 && i / (HI * dI) == 1) q[i] = 0.f, q8[i] = 0; /* head 0 of row 1: zero */
    }
    for (auto &x : w) x = (float)(ur() * 1.2 - 0.2);
    std::vector<int32_t> row_seq(T), row_end(T), lens(Ls.begin(), Ls.end());
    for (int s = 0; s < nseq; s++)
        for (int j = 0; j < C.nn; j++) {
            const int t = derived ? s * C.nn + j : (nseq - 1 - s) * C.nn + j; /* metadata: rows of the later sequences first */
            row_seq[t] = s;
            row_end[t] = std::max(0, Ls[s] - C.nn + j + 1);
        }
    /* reference: the classic chain */
    std::vector<float> ref((size_t)T * nbmax);
    std::vector<int32_t> kref((size_t)T * m);
    for (int t = 0; t < T; t++) {
        const int s = row_seq[t];
        const int64_t e = row_end[t], nblk = e > 0 ? (e + B - 1) / B : 0;
        for (int64_t b = 0; b < nbmax; b++) {
            float res = -INFINITY;
            if (b < nblk) {
                float sc = 0.f;
                for (int h = 0; h < HI; h++) {
                    float acc = 0.f;
                    for (int d = 0; d < dI; d++)
                        acc = fmaf(q[((size_t)t * HI + h) * dI + d], kbar[(s * nbmax + b) * dI + d], acc);
                    const float a = acc < 0.f ? 0.f : acc;
                    sc = fmaf(w[(size_t)t * HI + h], a, sc);
                }
                res = b == 0 || b == nblk - 1 ? INFINITY : sc;
            }
            ref[(size_t)t * nbmax + b] = res;
        }
        std::vector<int64_t> ord;
        for (int64_t b = 0; b < nbmax; b++)
            if (ref[(size_t)t * nbmax + b] != -INFINITY) ord.push_back(b);
        std::stable_sort(ord.begin(), ord.end(), [&](int64_t x, int64_t y) {
            return key_of(ref[(size_t)t * nbmax + x]) > key_of(ref[(size_t)t * nbmax + y]);
        });
        if ((int64_t)ord.size() > m) ord.resize((size_t)m);
        std::sort(ord.begin(), ord.end());
        for (int64_t i = 0; i < m; i++) kref[(size_t)t * m + i] = i < (int64_t)ord.size() ? (int32_t)ord[i] : -1;
    }
    /* the fused kernels */
    std::vector<float> out((size_t)T * nbmax, 12345.f);
    std::vector<int32_t> kept((size_t)T * m, 777);
    ph_blk_args a = {};
    a.psum = C.pooled ? psum : nullptr;
    a.max_blocks = max_blocks;
    std::vector<float> kbar_buf(kbar.size() + 4);
    std::copy(kbar.begin(), kbar.end(), kbar_buf.begin() + (C.misalign ? 1 : 0));
    a.kbar = kbar_buf.data() + (C.misalign ? 1 : 0);
    a.nbmax = nbmax;
    a.row_seq = derived ? nullptr : row_seq.data();
    a.row_end = derived ? nullptr : row_end.data();
    a.lens = derived ? nullptr : lens.data();
    if (derived) {
        a.cl = cl.data();
        a.cl0 = 2;
        a.next_n = C.nn;
        a.cap = cap;
        a.lenmax = lenmax;
    }
    a.q = {C.e4m3 ? (const void *)q8.data() : (const void *)q.data(), C.e4m3 ? LA_FP8_E4M3 : LA_F32,
           {(int64_t)HI * dI, dI, 1, 0}};
    a.w = {w.data(), LA_F32, {HI, 1, 0, 0}};
    a.HI = HI;
    a.dI = dI;
    a.B = B;
    a.T = T;
    a.out = out.data();
    const int64_t ntiles = (nbmax + PH_NB - 1) / PH_NB;
    a.tpc = tpc;
    const unsigned gy = (unsigned)((ntiles + tpc - 1) / tpc);
    if (R == 1 && W == 4 && guarded)
        launch((unsigned)T, gy, 128, ph_tile<1, 4, false>::SMEM_FLOATS * 4, [&] { ph_block_scores_kernel<1, 4, false, true>(a); });
    else if (R == 1 && W == 4)
        launch((unsigned)T, gy, 128, ph_tile<1, 4, false>::SMEM_FLOATS * 4, [&] { ph_block_scores_kernel<1, 4, false, false>(a); });
    else if (R == 1)
        launch((unsigned)T, gy, 128, ph_tile<1, 3, false>::SMEM_FLOATS * 4, [&] { ph_block_scores_kernel<1, 3, false, false>(a); });
    std::vector<float> kt;
    if (R == 2 && !tk)
        launch((unsigned)(T + 1) / 2, gy, 256, ph_tile<2, 2, false>::SMEM_FLOATS * 4, [&] { ph_block_scores_kernel<2, 2, false, true>(a); });
    if (R == 2 && tk) { /* the means pass first (la_ph_block_scores' order) */
        a.ldk = ph_ldk(nbmax);
        kt.assign((size_t)(nseq * dI * a.ldk), 54321.f); /* poisoned: tiles past a sequence stay unwritten */
        a.kt = kt.data();
        launch((unsigned)(a.ldk / PH_MB), (unsigned)nseq, PH_MT, PH_MEANS_SMEM_FLOATS * 4, [&] { ph_means_t_kernel(a); });
        launch((unsigned)(T + 1) / 2, gy, 256, ph_tile<2, 2, true>::SMEM_FLOATS * 4, [&] { ph_block_scores_kernel<2, 2, true, true>(a); });
    }
    int64_t bad = 0;
    for (size_t i = 0; i < out.size(); i++)
        if (memcmp(&out[i], &ref[i], 4)) {
            if (bad < 3)
                printf("    score row %zu block %zu: %.9g vs %.9g\n", i / nbmax, i % nbmax, out[i], ref[i]);
            bad++;
        }
    /* the top-k on the reference scores (so that a score bug does not hide a selection bug) */
    /* the launch's choice (a thread's chunk in registers) and the plain one */
    const int64_t per = (nbmax + PH_TK - 1) / PH_TK;
    const int topk_per = topk_plain ? 0 : per <= 4 ? 4 : per <= 8 ? 8 : 0;
    launch((unsigned)T, 1, PH_TK, (256 + PH_TK + 3) * 4, [&] {
        if (topk_per == 4) ph_block_topk_kernel<4>(ref.data(), nbmax, m, kept.data());
        else if (topk_per == 8) ph_block_topk_kernel<8>(ref.data(), nbmax, m, kept.data());
        else ph_block_topk_kernel<0>(ref.data(), nbmax, m, kept.data());
    });
    int64_t kbad = 0;
    for (int t = 0; t < T; t++)
        if (memcmp(&kept[(size_t)t * m], &kref[(size_t)t * m], (size_t)m * 4)) {
            if (kbad < 3) {
                printf("    kept row %d:", t);
                for (int64_t i = 0; i < std::min<int64_t>(m, 8); i++)
                    printf(" %d/%d", kept[(size_t)t * m + i], kref[(size_t)t * m + i]);
                printf("\n");
            }
            kbad++;
        }
    int64_t ninf = 0, nnan = 0;
    for (float x : ref) ninf += x == INFINITY, nnan += x != x;
    printf("%s HI %d dI %d q %s next_n %d m %lld B %d rows/CTA %d CTAs/SM %d%s%s%s tiles/CTA %lld top-k regs %d %s%s%s%s%s rows %d blocks %lld (+inf %lld, NaN %lld): "
           "scores differing %lld, kept rows differing %lld\n",
           bad || kbad ? "FAIL" : "ok  ", HI, dI, C.e4m3 ? "e4m3" : "f32", C.nn, (long long)m, C.B, R, W, tk ? " (means pass)" : "", guarded ? " (guarded d loop)" : "",
           derived == 2 ? " (rows from garbage context_lens)" : derived ? " (rows from context_lens)" : "", (long long)tpc, topk_per,
           C.pooled ? "pooled" : "means", C.ties ? " ties" : "", C.nan ? " nan" : "", C.tight ? " tight" : "",
           C.misalign ? " misaligned" : "", T, (long long)nbmax,
           (long long)ninf, (long long)nnan, (long long)bad, (long long)kbad);
    return bad || kbad;
}

int main() {
    /* the branch-free e4m3 decode of the one-row kernel's q load (ph_e4m3x4
     * below sm_89: the emulator's), every byte in every position of a word:
     * ph_e4m3's float (NaN for NaN) */
    int dbad = 0;
    for (unsigned b = 0; b < 256; b++)
        for (int c = 0; c < 4; c++) {
            float o[4];
            ph_e4m3x4(b << (8 * c) | (0x5au << (8 * ((c + 1) % 4))), o);
            const float x = o[c], y = ph_e4m3(b);
            dbad += x != x ? y == y : memcmp(&x, &y, 4) != 0;
        }
    printf("%s e4m3 word decode: %d of 1024 differ from ph_e4m3\n", dbad ? "FAIL" : "ok  ", dbad);
    const tcase cases[] = {
        {64, 128, 1, 64, 128, 1, 1, 0, 0, {40000, 1000, 65, 0}},
        {64, 128, 2, 8, 128, 1, 1, 1, 0, {5000, 129, 1}},
        {64, 128, 1, 3, 128, 0, 1, 1, 1, {1000, 700}},
        {32, 128, 3, 4, 128, 1, 0, 0, 0, {3000, 63, 128}},
        {5, 63, 4, 4, 128, 1, 1, 1, 0, {700, 5}}, /* e4m3 q rows not 4-byte aligned: the generic q load */
        {1, 16, 1, 2, 64, 0, 1, 0, 0, {1, 63, 65, 1000}},
        {64, 128, 1, 1, 128, 1, 1, 1, 0, {9000, 300}},
        {64, 128, 2, 1000, 128, 1, 1, 0, 1, {12000, 257}},
        {8, 64, 1, 64, 32, 0, 0, 1, 0, {20000}},
        {64, 128, 2, 7, 128, 1, 1, 2, 0, {6400, 3000}}, /* every full block the same: all tied */
        {64, 128, 1, 16, 96, 1, 1, 0, 0, {9000, 4000}}, /* B 96: the mean's division is not a scaling */
        {64, 128, 1, 8, 128, 1, 1, 0, 1, {16385, 300, 129, 1}, 1, 0}, /* decode, max_blocks < nbmax */
        {64, 128, 2, 8, 128, 1, 1, 0, 0, {4096, 300, 700}, 1, 0},    /* tight, lenmax a block short of the cap's */
        {64, 128, 3, 8, 128, 1, 1, 1, 0, {2000, 1111}, 0, 1},       /* misaligned sums: plain loads */
        {16, 68, 3, 5, 128, 0, 1, 0, 0, {3000, 250}, 1, 0},         /* dI 68: a chunk of one quarter */
        {16, 68, 2, 5, 96, 0, 0, 0, 0, {3000, 250}, 0, 0},
        {64, 128, 1, 32, 128, 1, 0, 0, 1, {7000, 128, 256, 1}, 0, 1}, /* means, misaligned */
        {4, 16, 1, 200, 32, 0, 1, 1, 0, {50000}},      /* > 1024 blocks: the top-k's 8 registers a thread */
        {4, 16, 2, 100, 32, 0, 1, 0, 1, {70000, 3000}}, /* > 2048 blocks: the top-k from global memory */
        {4, 16, 1, 300, 32, 0, 1, 2, 0, {45000}},      /* every full block the same, 8 registers */
    };
    /* (rows per CTA, CTAs per SM, transposed-means pass, tiles per CTA,
     * guarded d loop): the decode kernel ("fused", "fused_guarded" and
     * "fused3", one and several tiles a CTA), the two-row one of MTP and that
     * of prefill (guarded, as launched); the top-k from global memory with
     * "fused3", else the launch's choice */
    const int cfg[][5] = {{1, 4, 0, 1, 0}, {1, 4, 0, 3, 0}, {1, 4, 0, 2, 1}, {1, 3, 0, 2, 0}, {2, 2, 0, 2, 1}, {2, 2, 1, 2, 1}};
    int fails = 0, runs = 0;
    for (const tcase &c : cases)
        for (const auto &k : cfg) fails += run(c, k[0], k[1], k[2] != 0, k[3], k[1] == 3, k[4] != 0, 0), runs++;
    /* the rows derived from context_lens (family "paged_meta_overlap"): every
     * kernel without the means pass (that pass runs after the metadata
     * kernel), garbage lengths in one case in three and where the pooled
     * sums are tight (lenmax's clamp) */
    int ci = 0;
    for (const tcase &c : cases) {
        for (const auto &k : cfg)
            if (!k[2]) fails += run(c, k[0], k[1], false, k[3], k[1] == 3, k[4] != 0, ci % 3 == 0 || c.tight ? 2 : 1), runs++;
        ci++;
    }
    printf("%s: %d of %d runs failed\n", fails || dbad ? "FAIL" : "ok", fails, runs);
    return fails != 0 || dbad != 0;
}
