/* Host emulator of the tensor-core softmax kernel (src/cuda/softmax_tc.cu),
 * for checking its indexing where no GPU is at hand. The kernel body is
 * compiled for the host (LA_SMTC_EMU); a CTA's threads run as coroutines
 * (ucontext) in one OS thread and meet at every warp-collective primitive:
 *   ldmatrix .x4 (.trans): lane l addresses row l % 8 of matrix l / 8; lane
 *       t receives row t / 4, elements 2(t % 4), +1 (trans: rows 2(t % 4),
 *       +1 of column t / 4) — PTX ISA "ldmatrix"
 *   mma m16n8k16 row.col bf16: a0..a3 = (g, 2c..) (g+8, 2c..) (g, 2c+8..)
 *       (g+8, 2c+8..); b0, b1 = (k 2c.., n g) (k 2c+8.., n g); c0..c3 =
 *       (g, 2c) (g, 2c+1) (g+8, 2c) (g+8, 2c+1), g = lane / 4, c = lane % 4
 *   shfl.xor, __syncthreads, cp.async (lands at the issuing thread's
 *       wait_group in mode "late", at issue in mode "early": the first finds
 *       reads before the wait, the second overwrites of a stage still read)
 * Every cp.async source must lie inside q, k or v and every destination
 * inside the CTA's shared memory; out and lse carry NaN guard zones.
 * Outputs are compared with a float64 reference on the same bf16 inputs.
 *
 *   nvcc -O1 -std=c++17 -Iinclude -Isrc dev/emu_softmax_tc.cu build-gpu/liblongattn.a \
 *        -Xcompiler -fopenmp -o build-gpu/emu_softmax_tc && build-gpu/emu_softmax_tc
 * Prints one line per case and "N passed, N failed" last. */
#define LA_SMTC_EMU 1
#include "../src/cuda/softmax_tc.cu"

#include <ucontext.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

namespace emu {
struct Bar {
    int count = 0;
    unsigned gen = 0;
};
struct Slots {
    const void *addr[32];
    uint32_t a[32][4], b[32][2];
    float f[32];
};
struct Pending {
    void *dst;
    unsigned char data[16];
};
int NT, cur, mode; /* mode 0: cp.async lands at wait_group, 1: at issue */
std::vector<ucontext_t> ctx;
ucontext_t sched;
std::vector<std::vector<char>> stacks;
std::vector<int> done;
std::vector<std::vector<Pending>> pending;
Bar wbar[8], cbar;
Slots ws[8];
const unsigned char *smem_lo, *smem_hi;
std::vector<std::pair<const char *, const char *>> inputs;
long long progress;
std::function<void(int)> body;
int errors;

void fail(const char *what) {
    if (errors++ < 5) fprintf(stderr, "EMU ERROR (thread %d): %s\n", cur, what);
}
void yield() { swapcontext(&ctx[cur], &sched); }
void wait(Bar &b, int n) {
    const unsigned g = b.gen;
    if (++b.count == n) {
        b.count = 0;
        b.gen++;
        progress++;
        return;
    }
    while (b.gen == g) yield();
}
void warp_wait() { wait(wbar[cur / 32], 32); }
float bf(uint32_t h) {
    uint32_t u = (h & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* IEEE binary16 bits (low 16 of h) to float */
float hf(uint32_t h) {
    __half_raw r;
    r.x = (unsigned short)(h & 0xffffu);
    return __half2float(__half(r));
}
bool in_smem(const void *p, size_t n) {
    const unsigned char *c = (const unsigned char *)p;
    return c >= smem_lo && c + n <= smem_hi && ((uintptr_t)c & 15) == 0;
}
void entry() {
    const int me = cur;
    body(me);
    done[me] = 1;
    progress++;
}
/* runs one CTA of NT threads over the given body */
void run_cta(int nt, size_t smem_bytes, const std::function<void(int, unsigned char *)> &fn) {
    NT = nt;
    std::vector<unsigned char> smem(smem_bytes + 256);
    unsigned char *sm = (unsigned char *)(((uintptr_t)smem.data() + 127) & ~(uintptr_t)127);
    for (size_t i = 0; i < smem_bytes; i++) sm[i] = 0xA5; /* garbage, as on the GPU */
    smem_lo = sm;
    smem_hi = sm + smem_bytes;
    body = [&](int t) { fn(t, sm); };
    ctx.assign(nt, ucontext_t());
    stacks.assign(nt, std::vector<char>(1 << 18));
    done.assign(nt, 0);
    pending.assign(nt, std::vector<Pending>());
    for (auto &b : wbar) b = Bar();
    cbar = Bar();
    for (int i = 0; i < nt; i++) {
        getcontext(&ctx[i]);
        ctx[i].uc_stack.ss_sp = stacks[i].data();
        ctx[i].uc_stack.ss_size = stacks[i].size();
        ctx[i].uc_link = &sched;
        makecontext(&ctx[i], (void (*)())entry, 0);
    }
    int stalled = 0;
    for (;;) {
        int alive = 0;
        const long long p0 = progress;
        for (int i = 0; i < nt; i++) {
            if (done[i]) continue;
            alive++;
            cur = i;
            swapcontext(&sched, &ctx[i]);
        }
        if (!alive) break;
        if (progress == p0 && ++stalled > 3) {
            fail("deadlock: threads wait at different barriers");
            break;
        }
        if (progress != p0) stalled = 0;
    }
    for (int i = 0; i < nt; i++)
        if (!pending[i].empty()) fail("cp.async still pending at exit");
}
}  // namespace emu

void emu_ldsm_x4(uint32_t *r, const void *p, bool trans) {
    using namespace emu;
    const int w = cur / 32, lane = cur % 32;
    if (!in_smem(p, 16)) fail("ldmatrix address outside shared memory or unaligned");
    ws[w].addr[lane] = p;
    warp_wait();
    const int g = lane / 4, c = lane % 4;
    for (int j = 0; j < 4; j++) {
        if (!trans) {
            const uint16_t *row = (const uint16_t *)ws[w].addr[8 * j + g];
            r[j] = (uint32_t)row[2 * c] | ((uint32_t)row[2 * c + 1] << 16);
        } else {
            const uint16_t *r0 = (const uint16_t *)ws[w].addr[8 * j + 2 * c],
                           *r1 = (const uint16_t *)ws[w].addr[8 * j + 2 * c + 1];
            r[j] = (uint32_t)r0[g] | ((uint32_t)r1[g] << 16);
        }
    }
    warp_wait();
}
void emu_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1, bool f16) {
    using namespace emu;
    const int w = cur / 32, lane = cur % 32;
    for (int i = 0; i < 4; i++) ws[w].a[lane][i] = a[i];
    ws[w].b[lane][0] = b0;
    ws[w].b[lane][1] = b1;
    warp_wait();
    auto A = [&](int r, int k) {
        const uint32_t v = ws[w].a[(r % 8) * 4 + (k % 8) / 2][(r >= 8) + 2 * (k >= 8)];
        return f16 ? hf((k & 1) ? v >> 16 : v) : bf((k & 1) ? v >> 16 : v);
    };
    auto B = [&](int k, int n) {
        const uint32_t v = ws[w].b[n * 4 + (k % 8) / 2][k >= 8];
        return f16 ? hf((k & 1) ? v >> 16 : v) : bf((k & 1) ? v >> 16 : v);
    };
    const int g = lane / 4, cc = lane % 4;
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e >> 1), col = 2 * cc + (e & 1);
        float sum = 0.f;
        for (int k = 0; k < 16; k++) sum += A(row, k) * B(k, col);
        c[e] += sum;
    }
    warp_wait();
}
float emu_shfl_xor(float v, int mask) {
    using namespace emu;
    const int w = cur / 32, lane = cur % 32;
    ws[w].f[lane] = v;
    warp_wait();
    const float r = ws[w].f[lane ^ mask];
    warp_wait();
    return r;
}
void emu_cp16z(void *dst, const void *src, int bytes) {
    using namespace emu;
    if (!in_smem(dst, 16)) fail("cp.async destination outside shared memory or unaligned");
    Pending p;
    p.dst = dst;
    if (bytes == 16) {
        bool ok = ((uintptr_t)src & 15) == 0;
        bool inside = false;
        for (auto &r : inputs) inside |= (const char *)src >= r.first && (const char *)src + 16 <= r.second;
        if (!ok || !inside) {
            fail("cp.async source outside q/k/v or unaligned");
            memset(p.data, 0, 16);
        } else {
            memcpy(p.data, src, 16);
        }
    } else if (bytes == 0) {
        memset(p.data, 0, 16);
    } else {
        fail("cp.async with a partial size");
        memset(p.data, 0, 16);
    }
    if (mode == 1) memcpy(dst, p.data, 16);
    else pending[cur].push_back(p);
}
void emu_cp_wait_all() {
    using namespace emu;
    for (auto &p : pending[cur]) memcpy(p.dst, p.data, 16);
    pending[cur].clear();
}
void emu_syncthreads() {
    using namespace emu;
    wait(cbar, NT);
}

/* ---- cases -------------------------------------------------------------- */
static uint64_t rs = 12345;
static float rnd() {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return ((rs >> 40) / 16777216.0f - 0.5f) * 2.f;
}
static uint16_t f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) { return emu::bf(h); }
static uint16_t f2h(float f) {
    __half_raw r = __half_raw(__float2half_rn(f));
    return r.x;
}
/* the element type of a case: bf16 (false) or f16 (true) */
static bool g_f16;
static uint16_t to16(float f) { return g_f16 ? f2h(f) : f2bf(f); }
static float from16(uint16_t h) { return g_f16 ? emu::hf(h) : bf2f(h); }

static const int G = 64; /* guard elements at both ends of a buffer (a multiple of 8) */
struct view {
    std::vector<uint16_t> buf;
    int64_t nb[4];
    int64_t ne[4];
    uint16_t *at(int64_t a, int64_t b, int64_t c, int64_t d) {
        return &buf[G + a * nb[0] + b * nb[1] + c * nb[2] + d * nb[3]];
    }
};
/* [B,N,H,D] logical; layout 0 = contiguous, 1 = buffer [B,H,N,D]; data from element G on */
static view make_view(int64_t B, int64_t N, int64_t H, int64_t D, int layout, bool fill) {
    view v;
    v.ne[0] = B, v.ne[1] = N, v.ne[2] = H, v.ne[3] = D;
    v.nb[3] = 1;
    if (layout) {
        v.nb[1] = D, v.nb[2] = N * D, v.nb[0] = H * N * D;
    } else {
        v.nb[2] = D, v.nb[1] = H * D, v.nb[0] = N * H * D;
    }
    v.buf.assign(B * N * H * D + 2 * G, 0x7fc1); /* NaN */
    if (fill)
        for (int64_t i = 0; i < B * N * H * D; i++) v.buf[G + i] = to16(rnd());
    return v;
}

static int passed, failed;

template <typename T, int D, int DV, int MT, bool QREG, int NW, int BKV>
static void run(const char *name, int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t Hk, int causal,
                int layout, int mode, float scale) {
    constexpr int BQ = 16 * MT * NW;
    g_f16 = sizeof(T) == 2 && !std::is_same<T, __nv_bfloat16>::value;
    view q = make_view(B, Nq, H, D, layout, true), k = make_view(B, Nk, Hk, D, layout, true),
         v = make_view(B, Nk, Hk, DV, layout, true), o = make_view(B, Nq, H, DV, layout, false);
    std::vector<float> lse(B * Nq * H + 2 * G, NAN);
    tc_args a;
    a.q = &q.buf[G];
    a.k = &k.buf[G];
    a.v = &v.buf[G];
    a.o = &o.buf[G];
    a.qb = q.nb[0], a.qn = q.nb[1], a.qh = q.nb[2];
    a.kb = k.nb[0], a.kn = k.nb[1], a.kh = k.nb[2];
    a.vb = v.nb[0], a.vn = v.nb[1], a.vh = v.nb[2];
    a.ob = o.nb[0], a.on = o.nb[1], a.oh = o.nb[2];
    a.lse = &lse[G];
    a.lse_dt = LA_F32;
    a.lb = Nq * H, a.ln = H, a.lh = 1;
    a.Nq = (int)Nq, a.Nk = (int)Nk, a.group = (int)(H / Hk);
    a.sl2 = scale * 1.4426950408889634f;
    a.causal = causal;
    emu::inputs = {{(const char *)&q.buf[G], (const char *)(&q.buf[G] + B * Nq * H * D)},
                   {(const char *)&k.buf[G], (const char *)(&k.buf[G] + B * Nk * Hk * D)},
                   {(const char *)&v.buf[G], (const char *)(&v.buf[G] + B * Nk * Hk * DV)}};
    emu::mode = mode;
    emu::errors = 0;
    const int nqt = (int)((Nq + BQ - 1) / BQ);
    const size_t smem = tc_smem_bytes<D, DV, MT, QREG, NW, BKV>();
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int bx = 0; bx < nqt; bx++)
                emu::run_cta(NW * 32, smem, [&](int tid, unsigned char *sm) {
                    tc_fwd_body<T, D, DV, MT, QREG, NW, BKV>(a, sm, tid, bx, h, b, nqt);
                });
    /* float64 reference */
    double md = 0, mr = 0, ml = 0;
    int bad = 0;
    const int64_t shift = Nk - Nq;
    std::vector<double> s(Nk), acc(DV);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < Nq; t++) {
                const int64_t kh = h / (H / Hk);
                double mx = -INFINITY;
                for (int64_t j = 0; j < Nk; j++) {
                    if (causal && j > t + shift) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    double d = 0;
                    for (int c = 0; c < D; c++) d += (double)from16(*q.at(b, t, h, c)) * from16(*k.at(b, j, kh, c));
                    s[j] = d * scale;
                    mx = std::max(mx, s[j]);
                }
                double l = 0;
                for (int c = 0; c < DV; c++) acc[c] = 0;
                for (int64_t j = 0; j < Nk; j++) {
                    if (s[j] == -INFINITY) continue;
                    const double p = std::exp(s[j] - mx);
                    l += p;
                    for (int c = 0; c < DV; c++) acc[c] += p * from16(*v.at(b, j, kh, c));
                }
                for (int c = 0; c < DV; c++) {
                    const double ref = l > 0 ? acc[c] / l : 0.0;
                    const float got = from16(*o.at(b, t, h, c));
                    if (!std::isfinite(got)) {
                        bad++;
                        continue;
                    }
                    md = std::max(md, std::fabs(got - ref));
                    mr = std::max(mr, std::fabs(ref));
                }
                const double lref = l > 0 ? mx + std::log(l) : -INFINITY;
                const float lg = lse[G + b * Nq * H + t * H + h];
                if (std::isinf(lref)) bad += !(std::isinf(lg) && lg < 0);
                else if (!std::isfinite(lg)) bad++;
                else ml = std::max(ml, std::fabs(lg - lref) / std::max(1.0, std::fabs(lref)));
            }
    for (int i = 0; i < G; i++) {
        bad += o.buf[i] != 0x7fc1 || o.buf[o.buf.size() - 1 - i] != 0x7fc1;
        bad += !std::isnan(lse[i]) || !std::isnan(lse[lse.size() - 1 - i]);
    }
    const double rel = md / std::max(mr, 1e-30);
    const double tol = g_f16 ? 2e-3 : 1e-2; /* P and the output rounded to T */
    const bool ok = emu::errors == 0 && bad == 0 && rel <= tol && ml <= 1e-4;
    (ok ? passed : failed)++;
    printf("%-40s B%lld Nq%-4lld Nk%-4lld H%lld/%lld c%d L%d %s s%.3g  rel %.2e lse %.1e bad %d emu-errors %d  %s\n",
           name, (long long)B, (long long)Nq, (long long)Nk, (long long)H, (long long)Hk, causal, layout,
           mode ? "early" : "late ", scale, rel, ml, bad, emu::errors, ok ? "ok" : "FAIL");
    fflush(stdout);
}

template <typename T, int D, int DV, int MT, bool QREG, int NW, int BKV>
static void suite(const char *name, bool quick) {
    const float sc = 1.f / std::sqrt((float)D);
#define run run<T, D, DV, MT, QREG, NW, BKV>
    run(name, 1, 1, 1, 1, 1, 0, 0, 0, sc);
    run(name, 1, 1, 1, 1, 1, 1, 0, 1, sc);
    run(name, 2, 63, 63, 2, 1, 1, 1, 0, sc);
    run(name, 1, 65, 130, 2, 2, 1, 0, 1, sc);  /* Nq < Nk */
    run(name, 1, 130, 65, 2, 1, 1, 1, 0, sc);  /* Nq > Nk: rows with no key */
    run(name, 1, 130, 65, 2, 1, 0, 0, 1, -0.3f); /* negative scale */
    if (!quick) {
        run(name, 1, 200, 200, 1, 1, 1, 0, 1, sc);
        run(name, 1, 150, 300, 2, 1, 0, 1, 0, 4.f * sc); /* peaked */
    }
#undef run
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    typedef __nv_bfloat16 bf16;
    /* the library's tilings (launch_dims in softmax_tc.cu) */
    suite<bf16, 128, 128, 2, false, 4, 64>("bf16 D128 MT2 Qsmem NW4", quick);
    suite<bf16, 64, 64, 2, true, 4, 64>("bf16 D64 MT2 Qreg NW4", quick);
    suite<bf16, 32, 32, 2, true, 4, 64>("bf16 D32 MT2 Qreg NW4", quick);
    suite<bf16, 64, 128, 2, false, 4, 64>("bf16 D64/128 MT2 Qsmem NW4", quick);
    suite<bf16, 128, 64, 2, false, 4, 64>("bf16 D128/64 MT2 Qsmem NW4", true);
    suite<__half, 32, 32, 2, true, 4, 64>("f16 D32 MT2 Qreg NW4", quick);
    suite<__half, 64, 64, 2, true, 4, 64>("f16 D64 MT2 Qreg NW4", true);
    suite<__half, 128, 128, 2, false, 4, 64>("f16 D128 MT2 Qsmem NW4", true);
    /* other tilings the body takes */
    suite<bf16, 32, 32, 1, true, 8, 64>("bf16 D32 MT1 Qreg NW8", true);
    suite<bf16, 32, 32, 2, true, 8, 64>("bf16 D32 MT2 Qreg NW8 (BQ 256)", true);
    suite<bf16, 128, 128, 2, false, 4, 32>("bf16 D128 MT2 Qsmem NW4 BKV32", true);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
