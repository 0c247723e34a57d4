/* Host emulation of the CTA-level primitives used by the tensor-core
 * backward kernels (softmax_bwd_tc.cu), for testing without a GPU
 * (LA_BWD_EMU only; never part of the library build): one std::thread per
 * CUDA thread, std::barrier for __syncthreads, ldmatrix .x4 (.trans) and
 * mma.sync m16n8k16 bf16 by their PTX ISA fragment layouts, lanes
 * exchanging through per-warp slots between two warp barriers:
 *   ldmatrix: lane l addresses row l % 8 of matrix l / 8; lane t receives
 *     row t / 4, elements 2(t % 4), +1 (trans: rows 2(t % 4), +1 of column t / 4)
 *   mma (bf16 or f16): a0..a3 = (g, 2c..) (g+8, 2c..) (g, 2c+8..) (g+8, 2c+8..); b0, b1 =
 *     (k 2c.., n g) (k 2c+8.., n g); c0..c3 = (g, 2c) (g, 2c+1) (g+8, 2c)
 *     (g+8, 2c+1), g = lane / 4, c = lane % 4. */
#ifndef LA_CUDA_BWD_EMU_CUH
#define LA_CUDA_BWD_EMU_CUH
#include <barrier>
#include <thread>
#include <vector>
#undef __launch_bounds__
#define __launch_bounds__(...)

struct bwd_emu_cta {
    std::barrier<> *cta;
    std::barrier<> *warp[32];
    unsigned bx, by;
    unsigned char *smem;
    const void *addr[32][32];
    uint32_t fa[32][32][4], fb[32][32][2];
};
static thread_local int bwd_emu_tid;
static thread_local bwd_emu_cta *bwd_emu_b;

static inline int bt_tid(void) { return bwd_emu_tid; }
static inline unsigned bt_bx(void) { return bwd_emu_b->bx; }
static inline unsigned bt_by(void) { return bwd_emu_b->by; }
static inline void bt_sync(void) { bwd_emu_b->cta->arrive_and_wait(); }
static inline unsigned char *bt_smem(void) { return bwd_emu_b->smem; }
static inline void bt_syncwarp(void) { bwd_emu_b->warp[bwd_emu_tid / 32]->arrive_and_wait(); }
static inline float bt_bf(uint32_t v) {
    uint32_t u = (v & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline void bt_ldsm_emu(uint32_t *r, const void *p, bool trans) {
    const int w = bwd_emu_tid / 32, lane = bwd_emu_tid % 32;
    bwd_emu_b->addr[w][lane] = p;
    bt_syncwarp();
    const int g = lane / 4, c = lane % 4;
    for (int j = 0; j < 4; j++) {
        if (!trans) {
            const uint16_t *row = (const uint16_t *)bwd_emu_b->addr[w][8 * j + g];
            r[j] = (uint32_t)row[2 * c] | ((uint32_t)row[2 * c + 1] << 16);
        } else {
            const uint16_t *r0 = (const uint16_t *)bwd_emu_b->addr[w][8 * j + 2 * c],
                           *r1 = (const uint16_t *)bwd_emu_b->addr[w][8 * j + 2 * c + 1];
            r[j] = (uint32_t)r0[g] | ((uint32_t)r1[g] << 16);
        }
    }
    bt_syncwarp();
}
static inline void bt_ldsm4(uint32_t *r, const void *p) { bt_ldsm_emu(r, p, false); }
static inline void bt_ldsm4t(uint32_t *r, const void *p) { bt_ldsm_emu(r, p, true); }
static inline float bt_hf(uint32_t v) {
    __half_raw r;
    r.x = (unsigned short)(v & 0xffffu);
    return __half2float(__half(r));
}
/* mma m16n8k16, bf16 (f16 = false) or f16 inputs */
static inline void bt_mma_emu(float *c, const uint32_t *a, uint32_t b0, uint32_t b1, bool f16) {
    const int w = bwd_emu_tid / 32, lane = bwd_emu_tid % 32;
    for (int i = 0; i < 4; i++) bwd_emu_b->fa[w][lane][i] = a[i];
    bwd_emu_b->fb[w][lane][0] = b0;
    bwd_emu_b->fb[w][lane][1] = b1;
    bt_syncwarp();
    auto A = [&](int r, int k) {
        const uint32_t v = bwd_emu_b->fa[w][(r % 8) * 4 + (k % 8) / 2][(r >= 8) + 2 * (k >= 8)];
        return f16 ? bt_hf((k & 1) ? v >> 16 : v) : bt_bf((k & 1) ? v >> 16 : v);
    };
    auto B = [&](int k, int n) {
        const uint32_t v = bwd_emu_b->fb[w][n * 4 + (k % 8) / 2][k >= 8];
        return f16 ? bt_hf((k & 1) ? v >> 16 : v) : bt_bf((k & 1) ? v >> 16 : v);
    };
    const int g = lane / 4, cc = lane % 4;
    float out[4];
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e >> 1), col = 2 * cc + (e & 1);
        float sum = 0.f;
        for (int k = 0; k < 16; k++) sum += A(row, k) * B(k, col);
        out[e] = c[e] + sum;
    }
    bt_syncwarp();
    for (int e = 0; e < 4; e++) c[e] = out[e];
}
static inline void bt_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    bt_mma_emu(c, a, b0, b1, false);
}
static inline void bt_mma_f16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    bt_mma_emu(c, a, b0, b1, true);
}
/* run kern(args...) on a gx × gy grid of nth-thread CTAs, one CTA at a time */
template <class F> static void bt_emu_launch(unsigned gx, unsigned gy, int nth, size_t smem, F f) {
    for (unsigned by = 0; by < gy; by++)
        for (unsigned bx = 0; bx < gx; bx++) {
            bwd_emu_cta *blk = new bwd_emu_cta;
            std::barrier<> cta(nth);
            for (int w = 0; w < 32; w++) blk->warp[w] = new std::barrier<>(32);
            blk->cta = &cta;
            blk->bx = bx;
            blk->by = by;
            std::vector<unsigned char> sm(smem + 16, 0xAB); /* garbage, like real smem */
            blk->smem = sm.data();
            std::vector<std::thread> th;
            for (int t = 0; t < nth; t++)
                th.emplace_back([&, t] {
                    bwd_emu_tid = t;
                    bwd_emu_b = blk;
                    f();
                });
            for (auto &x : th) x.join();
            for (int w = 0; w < 32; w++) delete blk->warp[w];
            delete blk;
        }
}
#define BWD_LAUNCH_CTA(kern, gx, gy, nth, smem, stream, ...)                             \
    do {                                                                                 \
        (void)(stream);                                                                  \
        bt_emu_launch((unsigned)(gx), (unsigned)(gy), (nth), (smem),                     \
                      [&] { kern(__VA_ARGS__); });                                       \
    } while (0)
#endif
