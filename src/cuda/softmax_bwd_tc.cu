/* Tensor-core softmax attention backward (bf16 or f16, head dims D = Dv ∈
 * {32, 64, 128}; fp32 accumulation, gradients written in the input dtype),
 * FA2-style
 * without atomics: a dK/dV kernel (one CTA per 64 keys of a kv head, looping
 * over the query tiles of every query head of its GQA group, in order, the
 * tiles double-buffered with cp.async) and a
 * dQ kernel (one CTA per 64 queries of a head, looping over key tiles). Each
 * of the four warps owns 16 rows; per tile, with mma.sync m16n8k16 bf16 →
 * fp32 and ldmatrix from padded shared-memory rows (136 elements: conflict
 * free):
 *   dK/dV (rows = keys):  Sᵀ = K Qᵀ, dPᵀ = V dOᵀ, Pᵀ = 2^(Sᵀ·scale·log2e − lse2),
 *                         dSᵀ = Pᵀ∘(dPᵀ − D), dV += Pᵀ dO, dK += dSᵀ Q
 *   dQ (rows = queries):  S = Q Kᵀ, dP = dO Vᵀ, dS = P∘(dP − D), dQ += dS K
 * P and dS are packed to bf16 A fragments in registers (as FlashAttention-2
 * does); D = rowsum(dO∘O) and lse2 = lse·log2e (+inf for rows that see no
 * key, so their P is 0) come from a preprocessing pass. Causal is bottom-right
 * aligned; keys/queries past the end are zero-filled and masked. The same
 * kernel text runs on the host under LA_BWD_EMU (bwd_emu.cuh). */
#include <math.h>

#include <type_traits>

#include "cuda/bwd_common.cuh"

/* head dims D = Dv ∈ {32, 64, 128} (template BD); rows padded to BD + 8
 * elements (16 bytes: ldmatrix conflict free for rows of 80, 144 and 272
 * bytes alike) */
#define BT_T 64   /* rows per tile */
#define BT_THREADS 128
template <int BD> struct bt_dims {
    static constexpr int LD = BD + 8;
    /* six tiles (two of them double-buffered pairs) and two stages of row stats */
    static constexpr int SMEM = 6 * BT_T * LD * 2 + 4 * BT_T * 4;
};

#ifndef LA_BWD_EMU
static __device__ __forceinline__ int bt_tid(void) { return threadIdx.x; }
static __device__ __forceinline__ unsigned bt_bx(void) { return blockIdx.x; }
static __device__ __forceinline__ unsigned bt_by(void) { return blockIdx.y; }
static __device__ __forceinline__ void bt_sync(void) { __syncthreads(); }
static __device__ __forceinline__ void bt_ldsm4(uint32_t *r, const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
static __device__ __forceinline__ void bt_ldsm4t(uint32_t *r, const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
static __device__ __forceinline__ void bt_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
static __device__ __forceinline__ void bt_mma_f16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* 16-byte async copy; invalid: nothing read, 16 zero bytes written */
static __device__ __forceinline__ void bt_cp16z(void *dst, const void *src, bool valid) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
    const size_t ga = __cvta_generic_to_global(src);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(ga),
                 "r"(valid ? 16 : 0) : "memory");
}
static __device__ __forceinline__ void bt_cp_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int P> static __device__ __forceinline__ void bt_cp_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(P) : "memory");
}
#define BT_SMEM_DECL extern __shared__ __align__(16) unsigned char bt_sm[]
#define BWD_LAUNCH_CTA(kern, gx, gy, nth, smem, stream, ...)                                \
    do {                                                                                    \
        LA_CU(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,       \
                                   (int)(smem)));                                           \
        kern<<<dim3((unsigned)(gx), (unsigned)(gy)), (nth), (smem), (stream)>>>(__VA_ARGS__); \
        LA_CU_LAUNCH(#kern);                                                                \
    } while (0)
#else
/* host emulation: the copy is done at once (one legal schedule of it) */
static inline void bt_cp16z(void *dst, const void *src, bool valid) {
    if (valid) memcpy(dst, src, 16);
    else memset(dst, 0, 16);
}
static inline void bt_cp_commit(void) {}
template <int P> static inline void bt_cp_wait(void) {}
#define BT_SMEM_DECL unsigned char *bt_sm = bt_smem()
#endif

namespace {

/* T: __nv_bfloat16 or __half (all of q, k, v, d_out and the gradients) */
struct bt_args {
    const void *q, *k, *v, *g;
    void *dq, *dk, *dv;
    int64_t qs[3], ks[3], vs[3], gs[3], dqs[3], dks[3], dvs[3]; /* b, n, h strides */
    const float *lse2, *Dd;                                      /* [B*H][Nq] */
    int64_t H, Hk, Nq, Nk;
    int causal;
    float sl2, scale;
};

template <typename T> BWD_DEV inline uint32_t bt_pack(float lo, float hi);
template <> BWD_DEV inline uint32_t bt_pack<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}
template <> BWD_DEV inline uint32_t bt_pack<__half>(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}
template <typename T> BWD_DEV inline void bt_mma_t(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    if (sizeof(T) == 2 && std::is_same<T, __half>::value) bt_mma_f16(c, a, b0, b1);
    else bt_mma(c, a, b0, b1);
}

/* rows [r0, r0 + 64) of a [n, BD] panel (row stride rs) into smem
 * with cp.async; rows >= nrows are zero */
template <int BD, typename T>
BWD_DEV inline void bt_load_tile_async(T *dst, const T *src, int64_t rs, int64_t r0, int64_t nrows) {
    constexpr int LD = bt_dims<BD>::LD;
    for (int i = bt_tid(); i < BT_T * (BD / 8); i += BT_THREADS) {
        const int row = i / (BD / 8), ch = i % (BD / 8);
        const bool ok = r0 + row < nrows;
        bt_cp16z(dst + row * LD + ch * 8, ok ? src + (r0 + row) * rs + ch * 8 : src, ok);
    }
}
BWD_DEV inline void bt_load_rowstat(float *ls, float *ds, const float *lse2, const float *Dd,
                                    int64_t r0, int64_t nrows) {
    for (int i = bt_tid(); i < BT_T; i += BT_THREADS) {
        const bool ok = r0 + i < nrows;
        ls[i] = ok ? lse2[r0 + i] : INFINITY;
        ds[i] = ok ? Dd[r0 + i] : 0.f;
    }
}
/* acc[8][4] += A(16 rows of As at row m0) · B(64 rows of Bs)ᵀ over the BD columns */
template <int BD, typename T>
BWD_DEV inline void bt_gemm_abt(float (*acc)[4], const T *As, int m0, const T *Bs, int lane) {
    constexpr int LD = bt_dims<BD>::LD;
    for (int kk = 0; kk < BD / 16; kk++) {
        uint32_t a[4];
        bt_ldsm4(a, As + (m0 + (lane % 8) + 8 * ((lane / 8) & 1)) * LD + kk * 16 + 8 * (lane / 16));
        for (int n2 = 0; n2 < BT_T / 16; n2++) {
            uint32_t b[4];
            bt_ldsm4(b, Bs + (16 * n2 + (lane % 8) + 8 * (lane / 16)) * LD + kk * 16 + 8 * ((lane / 8) & 1));
            bt_mma_t<T>(acc[2 * n2], a, b[0], b[1]);
            bt_mma_t<T>(acc[2 * n2 + 1], a, b[2], b[3]);
        }
    }
}
/* acc[BD/8][4] += P (16 × 64, C fragments p[8][4]) · Bs (64 rows × BD) */
template <int BD, typename T>
BWD_DEV inline void bt_gemm_pb(float (*acc)[4], float (*p)[4], const T *Bs, int lane) {
    constexpr int LD = bt_dims<BD>::LD;
    for (int j = 0; j < BT_T / 16; j++) {
        uint32_t a[4] = {bt_pack<T>(p[2 * j][0], p[2 * j][1]), bt_pack<T>(p[2 * j][2], p[2 * j][3]),
                         bt_pack<T>(p[2 * j + 1][0], p[2 * j + 1][1]),
                         bt_pack<T>(p[2 * j + 1][2], p[2 * j + 1][3])};
        for (int n2 = 0; n2 < BD / 16; n2++) {
            uint32_t b[4];
            bt_ldsm4t(b, Bs + (16 * j + (lane % 8) + 8 * ((lane / 8) & 1)) * LD + 16 * n2 + 8 * (lane / 16));
            bt_mma_t<T>(acc[2 * n2], a, b[0], b[1]);
            bt_mma_t<T>(acc[2 * n2 + 1], a, b[2], b[3]);
        }
    }
}
/* rows of a warp's 16 × BD accumulator to a panel of T (row stride rs) */
template <int BD, typename T>
BWD_DEV inline void bt_store(T *dst, int64_t rs, int64_t r0, int64_t nrows, float (*acc)[4],
                             float mul, int lane) {
    const int g = lane / 4, c = lane % 4;
    for (int nt = 0; nt < BD / 8; nt++)
        for (int half = 0; half < 2; half++) {
            const int64_t r = r0 + g + 8 * half;
            if (r >= nrows) continue;
            const uint32_t u = bt_pack<T>(acc[nt][2 * half] * mul, acc[nt][2 * half + 1] * mul);
            memcpy(dst + r * rs + nt * 8 + 2 * c, &u, 4);
        }
}

/* Both kernels double-buffer the tiles they stream (cp.async): the copy of
 * tile n+1 is in flight while tile n is computed. */
template <typename T, int BD>
__global__ void __launch_bounds__(BT_THREADS) bt_dkv_kernel(bt_args a) {
    BT_SMEM_DECL;
    constexpr int BT_LD = bt_dims<BD>::LD;
    T *Ks = (T *)bt_sm, *Vs = Ks + BT_T * BT_LD, *Qs0 = Vs + BT_T * BT_LD;
    float *ls0 = (float *)(Qs0 + 4 * BT_T * BT_LD);
    const int tid = bt_tid(), w = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
    const int64_t k0 = (int64_t)bt_bx() * BT_T, bhk = bt_by(), b = bhk / a.Hk, hk = bhk % a.Hk;
    const int64_t rep = a.H / a.Hk, off = a.Nk - a.Nq;
    float dK[BD / 8][4], dV[BD / 8][4];
    for (int i = 0; i < BD / 8; i++)
        for (int e = 0; e < 4; e++) dK[i][e] = dV[i][e] = 0.f;
    int64_t t_start = 0;
    if (a.causal) {
        t_start = k0 - off;
        if (t_start < 0) t_start = 0;
        t_start = t_start / BT_T * BT_T;
    }
    const int64_t nqt = t_start < a.Nq ? (a.Nq - t_start + BT_T - 1) / BT_T : 0, total = rep * nqt;
    /* stage st: Q at Qs0 + 2·st tiles, dO right after; ls/ds at ls0 + 2·st·64 */
    auto issue = [&](int64_t n, int st) {
        const int64_t h = hk * rep + n / nqt, q0 = t_start + (n % nqt) * BT_T;
        T *Qs = Qs0 + 2 * st * BT_T * BT_LD;
        bt_load_tile_async<BD>(Qs, (const T *)a.q + b * a.qs[0] + h * a.qs[2], a.qs[1], q0, a.Nq);
        bt_load_tile_async<BD>(Qs + BT_T * BT_LD, (const T *)a.g + b * a.gs[0] + h * a.gs[2], a.gs[1], q0, a.Nq);
        const int64_t bh = b * a.H + h;
        bt_load_rowstat(ls0 + 2 * st * BT_T, ls0 + (2 * st + 1) * BT_T, a.lse2 + bh * a.Nq,
                        a.Dd + bh * a.Nq, q0, a.Nq);
    };
    bt_load_tile_async<BD>(Ks, (const T *)a.k + b * a.ks[0] + hk * a.ks[2], a.ks[1], k0, a.Nk);
    bt_load_tile_async<BD>(Vs, (const T *)a.v + b * a.vs[0] + hk * a.vs[2], a.vs[1], k0, a.Nk);
    if (total > 0) issue(0, 0);
    bt_cp_commit();
    for (int64_t n = 0; n < total; n++) {
        const int st = (int)(n & 1);
        if (n + 1 < total) {
            issue(n + 1, st ^ 1);
            bt_cp_commit();
            bt_cp_wait<1>();
        } else {
            bt_cp_wait<0>();
        }
        bt_sync();
        const T *Qs = Qs0 + 2 * st * BT_T * BT_LD, *Gs = Qs + BT_T * BT_LD;
        const float *ls = ls0 + 2 * st * BT_T, *ds = ls + BT_T;
        const int64_t q0 = t_start + (n % nqt) * BT_T;
        float sT[BT_T / 8][4], pT[BT_T / 8][4];
        for (int i = 0; i < BT_T / 8; i++)
            for (int e = 0; e < 4; e++) sT[i][e] = pT[i][e] = 0.f;
        bt_gemm_abt<BD>(sT, Ks, 16 * w, Qs, lane);
        bt_gemm_abt<BD>(pT, Vs, 16 * w, Gs, lane);
        for (int nt = 0; nt < BT_T / 8; nt++)
            for (int e = 0; e < 4; e++) {
                const int64_t key = k0 + 16 * w + g + 8 * (e >> 1);
                const int qi = nt * 8 + 2 * c + (e & 1);
                const int64_t t = q0 + qi;
                float p = exp2f(sT[nt][e] * a.sl2 - ls[qi]);
                if (key >= a.Nk || (a.causal && key > t + off)) p = 0.f;
                sT[nt][e] = p;
                pT[nt][e] = p * (pT[nt][e] - ds[qi]);
            }
        bt_gemm_pb<BD>(dV, sT, Gs, lane);
        bt_gemm_pb<BD>(dK, pT, Qs, lane);
        bt_sync(); /* stage st is refilled by the next iteration's copy */
    }
    bt_cp_wait<0>();
    const int64_t r0 = k0 + 16 * w;
    if (a.dk) bt_store<BD>((T *)a.dk + b * a.dks[0] + hk * a.dks[2], a.dks[1], r0, a.Nk, dK, a.scale, lane);
    if (a.dv) bt_store<BD>((T *)a.dv + b * a.dvs[0] + hk * a.dvs[2], a.dvs[1], r0, a.Nk, dV, 1.f, lane);
}

template <typename T, int BD>
__global__ void __launch_bounds__(BT_THREADS) bt_dq_kernel(bt_args a) {
    BT_SMEM_DECL;
    constexpr int BT_LD = bt_dims<BD>::LD;
    T *Qs = (T *)bt_sm, *Gs = Qs + BT_T * BT_LD, *Ks0 = Gs + BT_T * BT_LD;
    float *ls = (float *)(Ks0 + 4 * BT_T * BT_LD), *ds = ls + BT_T;
    const int tid = bt_tid(), w = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
    const int64_t q0 = (int64_t)bt_bx() * BT_T, bh = bt_by(), b = bh / a.H, h = bh % a.H;
    const int64_t hk = h / (a.H / a.Hk), off = a.Nk - a.Nq;
    int64_t k_end = a.Nk;
    if (a.causal && q0 + BT_T + off < k_end) k_end = q0 + BT_T + off;
    const int64_t total = k_end > 0 ? (k_end + BT_T - 1) / BT_T : 0;
    auto issue = [&](int64_t n, int st) {
        T *Ks = Ks0 + 2 * st * BT_T * BT_LD;
        bt_load_tile_async<BD>(Ks, (const T *)a.k + b * a.ks[0] + hk * a.ks[2], a.ks[1], n * BT_T, a.Nk);
        bt_load_tile_async<BD>(Ks + BT_T * BT_LD, (const T *)a.v + b * a.vs[0] + hk * a.vs[2], a.vs[1], n * BT_T, a.Nk);
    };
    bt_load_tile_async<BD>(Qs, (const T *)a.q + b * a.qs[0] + h * a.qs[2], a.qs[1], q0, a.Nq);
    bt_load_tile_async<BD>(Gs, (const T *)a.g + b * a.gs[0] + h * a.gs[2], a.gs[1], q0, a.Nq);
    bt_load_rowstat(ls, ds, a.lse2 + bh * a.Nq, a.Dd + bh * a.Nq, q0, a.Nq);
    if (total > 0) issue(0, 0);
    bt_cp_commit();
    float dQ[BD / 8][4];
    for (int i = 0; i < BD / 8; i++)
        for (int e = 0; e < 4; e++) dQ[i][e] = 0.f;
    for (int64_t n = 0; n < total; n++) {
        const int st = (int)(n & 1);
        if (n + 1 < total) {
            issue(n + 1, st ^ 1);
            bt_cp_commit();
            bt_cp_wait<1>();
        } else {
            bt_cp_wait<0>();
        }
        bt_sync();
        const T *Ks = Ks0 + 2 * st * BT_T * BT_LD, *Vs = Ks + BT_T * BT_LD;
        const int64_t k0 = n * BT_T;
        float S[BT_T / 8][4], dP[BT_T / 8][4];
        for (int i = 0; i < BT_T / 8; i++)
            for (int e = 0; e < 4; e++) S[i][e] = dP[i][e] = 0.f;
        bt_gemm_abt<BD>(S, Qs, 16 * w, Ks, lane);
        bt_gemm_abt<BD>(dP, Gs, 16 * w, Vs, lane);
        for (int nt = 0; nt < BT_T / 8; nt++)
            for (int e = 0; e < 4; e++) {
                const int qi = 16 * w + g + 8 * (e >> 1);
                const int64_t t = q0 + qi, key = k0 + nt * 8 + 2 * c + (e & 1);
                float p = exp2f(S[nt][e] * a.sl2 - ls[qi]);
                if (key >= a.Nk || (a.causal && key > t + off)) p = 0.f;
                dP[nt][e] = p * (dP[nt][e] - ds[qi]);
            }
        bt_gemm_pb<BD>(dQ, dP, Ks, lane);
        bt_sync();
    }
    bt_cp_wait<0>();
    bt_store<BD>((T *)a.dq + b * a.dqs[0] + h * a.dqs[2], a.dqs[1], q0 + 16 * w, a.Nq, dQ, a.scale, lane);
}

/* D = rowsum(dO∘O) and lse·log2e (+inf where lse = −inf) per (b, h, t) */
__global__ void bt_pre_kernel(int64_t total, bwd_view o, bwd_view g, bwd_view lse, int64_t H,
                              int64_t Nq, int64_t Dv, float *lse2, float *Dd) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t t = i % Nq, bh = i / Nq, b = bh / H, h = bh % H;
    float acc = 0.f;
    for (int64_t c = 0; c < Dv; c++) acc += bwd_ld(o, b, t, h, c) * bwd_ld(g, b, t, h, c);
    Dd[i] = acc;
    const float l = bwd_ld(lse, b, t, h, 0);
    lse2[i] = (isinf(l) && l < 0) ? INFINITY : l * 1.4426950408889634f;
}

bool bt_view_ok(const la_tensor *t, la_dtype dt, int64_t D) {
    if (!t) return true;
    if (t->dtype != dt || t->ndim != 4 || t->ne[3] != D || t->nb[3] != 1) return false;
    for (int i = 0; i < 3; i++)
        if (t->nb[i] % 8) return false;
    return ((uintptr_t)t->data & 15) == 0;
}

template <typename T, int BD>
la_status bt_launch(const bt_args &a, const la_tensor *dq, bool dkv, int64_t B, int64_t Nq,
                    int64_t Nk, cudaStream_t s) {
    constexpr int smem = bt_dims<BD>::SMEM;
    if (dkv) BWD_LAUNCH_CTA((bt_dkv_kernel<T, BD>), la_cu_cdiv(Nk, BT_T), B * a.Hk, BT_THREADS, smem, s, a);
    if (dq) BWD_LAUNCH_CTA((bt_dq_kernel<T, BD>), la_cu_cdiv(Nq, BT_T), B * a.H, BT_THREADS, smem, s, a);
    return LA_OK;
}
template <typename T>
la_status bt_launch_d(const bt_args &a, int64_t D, const la_tensor *dq, bool dkv, int64_t B,
                      int64_t Nq, int64_t Nk, cudaStream_t s) {
    if (D == 32) return bt_launch<T, 32>(a, dq, dkv, B, Nq, Nk, s);
    if (D == 64) return bt_launch<T, 64>(a, dq, dkv, B, Nq, Nk, s);
    return bt_launch<T, 128>(a, dq, dkv, B, Nq, Nk, s);
}

} // namespace

/* The selection of softmax_bwd: the tensor-core kernels for bf16 or f16
 * views (one dtype) with head dims D = Dv in {32, 64, 128}, unit inner
 * stride and 16-byte aligned rows; else portable. */
int la_softmax_bwd_tc_eligible(const la_tensor *q, const la_tensor *k, const la_tensor *v,
                               const la_tensor *d_out, const la_tensor *dq, const la_tensor *dk,
                               const la_tensor *dv) {
    if (!q || (q->dtype != LA_BF16 && q->dtype != LA_F16) || q->ndim != 4) return 0;
    const la_dtype dt = q->dtype;
    const int64_t D = q->ne[3];
    if (D != 32 && D != 64 && D != 128) return 0;
    return bt_view_ok(q, dt, D) && bt_view_ok(k, dt, D) && bt_view_ok(v, dt, D) &&
           bt_view_ok(d_out, dt, D) && bt_view_ok(dq, dt, D) && bt_view_ok(dk, dt, D) &&
           bt_view_ok(dv, dt, D);
}
la_status la_softmax_bwd_tc(const la_softmax_params *p, const la_tensor *q, const la_tensor *k,
                            const la_tensor *v, const la_tensor *out, const la_tensor *lse,
                            const la_tensor *d_out, la_tensor *dq, la_tensor *dk, la_tensor *dv,
                            la_context *ctx) {
    const int64_t B = q->ne[0], Nq = q->ne[1], H = q->ne[2], Nk = k->ne[1], Hk = k->ne[2];
    cudaStream_t s = bwd_stream(ctx);
    bwd_ws ws;
    float *lse2, *Dd;
    ws.want(&lse2, B * H, Nq);
    ws.want(&Dd, B * H, Nq);
    LA_TRY(ws.alloc(s, "softmax backward (tensor cores)"));
    const bwd_view lv = bwd_view_rows(lse); /* lse [B,Nq,H] as (b, n, h, 0) */
    const int64_t D = q->ne[3];
    BWD_LAUNCH(bt_pre_kernel, B * H * Nq, s, bwd_view4(out), bwd_view4(d_out), lv, H, Nq, D, lse2, Dd);
    bt_args a;
    memset(&a, 0, sizeof a);
    a.q = q->data;
    a.k = k->data;
    a.v = v->data;
    a.g = d_out->data;
    a.dq = dq ? dq->data : nullptr;
    a.dk = dk ? dk->data : nullptr;
    a.dv = dv ? dv->data : nullptr;
    const int ax[3] = {0, 1, 2};
    for (int i = 0; i < 3; i++) {
        a.qs[i] = q->nb[ax[i]];
        a.ks[i] = k->nb[ax[i]];
        a.vs[i] = v->nb[ax[i]];
        a.gs[i] = d_out->nb[ax[i]];
        a.dqs[i] = dq ? dq->nb[ax[i]] : 0;
        a.dks[i] = dk ? dk->nb[ax[i]] : 0;
        a.dvs[i] = dv ? dv->nb[ax[i]] : 0;
    }
    a.lse2 = lse2;
    a.Dd = Dd;
    a.H = H;
    a.Hk = Hk;
    a.Nq = Nq;
    a.Nk = Nk;
    a.causal = p->causal != 0;
    a.scale = p->scale != 0.f ? p->scale : (float)(1.0 / sqrt((double)D));
    a.sl2 = a.scale * 1.4426950408889634f;
    if (q->dtype == LA_F16) return bt_launch_d<__half>(a, D, dq, dk || dv, B, Nq, Nk, s);
    return bt_launch_d<__nv_bfloat16>(a, D, dq, dk || dv, B, Nq, Nk, s);
}
