/* Sparse MLA attention backward on tensor cores (TRAINING.md §1): bf16 q
 * [T,Hq,576], one latent kv row [L,576] per key (its first 512 columns are
 * the value), d_out [T,Hq,512]; fp32 accumulation, gradients written in bf16.
 *
 * One CTA (8 warps) per (token t, group of 64 heads); it loops over the
 * token's selected keys 32 at a time, the rows gathered with cp.async
 * (double-buffered; indices < 0 or >= L and slots past k zero-filled and
 * masked). Per tile, with mma.sync m16n8k16 bf16 → fp32 and ldmatrix from
 * padded shared rows (conflict free):
 *   S = Q Kᵀ, dP = dO Vᵀ               warp: 16 heads × 16 keys
 *   P = 2^(S·scale·log2e − lse2), dS = scale·P∘(dP − D)   (bf16 to shared)
 *   dQ += dS K                           warp: 16 heads × 288 columns, registers
 *   dKV_part = dSᵀ Q + Pᵀ dO            warp: 16 keys × 144 columns
 * D = rowsum(dO∘O) and lse2 = lse·log2e (+inf where lse = −inf: P = 0) come
 * from a preprocessing pass. dKV without float atomics: every (head group,
 * token, slot) writes its 576-float contribution to a workspace (a chunk of
 * tokens at a time, at most max(2·T·Hq·576, 2^27) floats), and one thread per
 * (key, 4 columns) sums its entries in entry order through the transposed
 * index (sparse_attn_bwd.cuh), so the result is bit-identical on every call.
 * The chunking does not change the order of the sums (entries are numbered
 * token-major; variant mma_rowchunk, one token per chunk, is bit-identical).
 * Variant mma_atomic instead adds the contributions into an fp32 dKV with
 * atomics (not deterministic). The same kernel text runs on the host under
 * LA_BWD_EMU (bwd_emu.cuh; dev/emu_sparse_bwd.sh). */
#include <math.h>

#include <algorithm>
#ifdef LA_BWD_EMU
#include <atomic>
#endif

#include "cuda/sparse_attn_bwd.cuh"

#define SA_DQK 576
#define SA_DV 512
#define SA_NH 64 /* heads per CTA */
#define SA_NK 32 /* keys per tile */
#define SA_THREADS 256
#define SA_LDQ (SA_DQK + 8) /* padded shared rows (16 bytes): ldmatrix conflict free */
#define SA_LDG (SA_DV + 8)
#define SA_LDP (SA_NK + 8)
/* Q, dO, two stages of K, P, dS (bf16), lse2 and D per head, two stages of key ids */
#define SA_SMEM                                                                           \
    (2 * (SA_NH * SA_LDQ + SA_NH * SA_LDG + 2 * SA_NK * SA_LDQ + 2 * SA_NH * SA_LDP) + \
     4 * (2 * SA_NH + 2 * SA_NK))

typedef __nv_bfloat16 sa_bf;

#ifndef LA_BWD_EMU
static __device__ __forceinline__ int sa_tid(void) { return threadIdx.x; }
static __device__ __forceinline__ unsigned sa_bx(void) { return blockIdx.x; }
static __device__ __forceinline__ unsigned sa_by(void) { return blockIdx.y; }
static __device__ __forceinline__ void sa_sync(void) { __syncthreads(); }
static __device__ __forceinline__ void sa_ldsm4(uint32_t *r, const sa_bf *p) { la_ldsm4(r, p); }
static __device__ __forceinline__ void sa_ldsm4t(uint32_t *r, const sa_bf *p) { la_ldsm4t(r, p); }
static __device__ __forceinline__ void sa_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    la_mma_bf16(c, a, b0, b1);
}
static __device__ __forceinline__ void sa_cp16(sa_bf *sm, const sa_bf *g, bool ok) {
    la_cp16z(sm, g, ok);
}
static __device__ __forceinline__ void sa_commit(void) { la_cp_commit(); }
template <int P> static __device__ __forceinline__ void sa_wait(void) { la_cp_wait<P>(); }
/* p[0] += x, p[1] += y (one vector atomic on sm_90) */
static __device__ __forceinline__ void sa_atomic_add2(float *p, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd((float2 *)p, make_float2(x, y));
#else
    atomicAdd(p, x);
    atomicAdd(p + 1, y);
#endif
}
#define SA_SMEM_DECL extern __shared__ __align__(16) unsigned char sa_sm[]
#define SA_LAUNCH(kern, gx, gy, stream, ...)                                                  \
    do {                                                                                      \
        LA_CU(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, SA_SMEM)); \
        kern<<<dim3((unsigned)(gx), (unsigned)(gy)), SA_THREADS, SA_SMEM, (stream)>>>(__VA_ARGS__); \
        LA_CU_LAUNCH(#kern);                                                                  \
    } while (0)
#else /* the emulator: copies done at once, CTAs one after the other */
static inline int sa_tid(void) { return bt_tid(); }
static inline unsigned sa_bx(void) { return bt_bx(); }
static inline unsigned sa_by(void) { return bt_by(); }
static inline void sa_sync(void) { bt_sync(); }
static inline void sa_ldsm4(uint32_t *r, const sa_bf *p) { bt_ldsm4(r, p); }
static inline void sa_ldsm4t(uint32_t *r, const sa_bf *p) { bt_ldsm4t(r, p); }
static inline void sa_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) { bt_mma(c, a, b0, b1); }
static inline void sa_cp16(sa_bf *sm, const sa_bf *g, bool ok) {
    if (ok) memcpy(sm, g, 16);
    else memset(sm, 0, 16);
}
static inline void sa_commit(void) {}
template <int P> static inline void sa_wait(void) {}
static inline void sa_atomic_add2(float *p, float x, float y) {
    std::atomic_ref<float>(p[0]).fetch_add(x);
    std::atomic_ref<float>(p[1]).fetch_add(y);
}
#define SA_SMEM_DECL unsigned char *sa_sm = bt_smem()
#define SA_LAUNCH(kern, gx, gy, stream, ...) \
    BWD_LAUNCH_CTA(kern, gx, gy, SA_THREADS, SA_SMEM, stream, __VA_ARGS__)
#endif

namespace {

struct sa_args {
    const sa_bf *q, *kv, *g; /* q [T,Hq,576], kv rows, d_out [T,Hq,512] */
    sa_bf *dq;               /* [T,Hq,576] or NULL */
    int64_t qs_t, qs_h, kvs, gs_t, gs_h, dqs_t, dqs_h; /* strides in elements */
    const int *idx;          /* [T,K] int32, −1 where skipped */
    const float *lse2, *Dd;  /* [T*Hq] */
    float *part;             /* [nhg][Tc][K][576]: per-entry dKV contributions */
    float *dkv32;            /* [L][576]: mma_atomic's target */
    int64_t T, Hq, K, t0, Tc;
    int want_dkv, atomic;
    float sl2, scale;
};

BWD_DEV inline uint32_t sa_pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

/* acc += A·B for one warp: rows m0..m0+15, columns n0..n0+8·NT−1 (column
 * pairs of 16 at or past nlim skipped), reduction k < K (a multiple of 16),
 * fragments by ldmatrix from bf16 shared tiles: A(m, k) at sA[m·la + k] or,
 * AT, sA[k·la + m]; B(k, n) at sB[n·lb + k] or, BT, sB[k·lb + n]. */
template <int NT, bool AT, bool BT>
BWD_DEV inline void sa_gemm(float (*acc)[4], const sa_bf *sA, int la, const sa_bf *sB, int lb,
                            int m0, int n0, int K, int nlim, int lane) {
    static_assert(NT % 2 == 0, "n-tiles in pairs");
    const int li = lane & 7, lj = lane >> 3;
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t a[4];
        if (!AT) sa_ldsm4(a, sA + (m0 + 8 * (lj & 1) + li) * la + k0 + 8 * (lj >> 1));
        else sa_ldsm4t(a, sA + (k0 + 8 * (lj >> 1) + li) * la + m0 + 8 * (lj & 1));
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            const int nb = n0 + 16 * np;
            if (nb >= nlim) continue;
            uint32_t b[4];
            if (!BT) sa_ldsm4(b, sB + (nb + 8 * (lj >> 1) + li) * lb + k0 + 8 * (lj & 1));
            else sa_ldsm4t(b, sB + (k0 + 8 * (lj & 1) + li) * lb + nb + 8 * (lj >> 1));
            sa_mma(acc[2 * np], a, b[0], b[1]);
            sa_mma(acc[2 * np + 1], a, b[2], b[3]);
        }
    }
}

__global__ void __launch_bounds__(SA_THREADS, 1) sa_bwd_kernel(sa_args a) {
    SA_SMEM_DECL;
    sa_bf *Qs = (sa_bf *)sa_sm, *Gs = Qs + SA_NH * SA_LDQ, *Ks0 = Gs + SA_NH * SA_LDG;
    sa_bf *Ps = Ks0 + 2 * SA_NK * SA_LDQ, *dSs = Ps + SA_NH * SA_LDP;
    float *ls = (float *)(dSs + SA_NH * SA_LDP), *ds = ls + SA_NH;
    int *keys0 = (int *)(ds + SA_NH); /* [2][SA_NK]: key of each slot, −1 = none */
    const int tid = sa_tid(), w = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
    const int64_t tl = sa_bx(), t = a.t0 + tl, hg = sa_by(), h0 = hg * SA_NH;
    for (int i = tid; i < SA_NH * (SA_DQK / 8); i += SA_THREADS) {
        const int r = i / (SA_DQK / 8), ch = i % (SA_DQK / 8);
        const bool ok = h0 + r < a.Hq;
        sa_cp16(Qs + r * SA_LDQ + ch * 8, ok ? a.q + t * a.qs_t + (h0 + r) * a.qs_h + ch * 8 : a.q, ok);
    }
    for (int i = tid; i < SA_NH * (SA_DV / 8); i += SA_THREADS) {
        const int r = i / (SA_DV / 8), ch = i % (SA_DV / 8);
        const bool ok = h0 + r < a.Hq;
        sa_cp16(Gs + r * SA_LDG + ch * 8, ok ? a.g + t * a.gs_t + (h0 + r) * a.gs_h + ch * 8 : a.g, ok);
    }
    for (int i = tid; i < SA_NH; i += SA_THREADS) {
        const bool ok = h0 + i < a.Hq;
        ls[i] = ok ? a.lse2[t * a.Hq + h0 + i] : INFINITY;
        ds[i] = ok ? a.Dd[t * a.Hq + h0 + i] : 0.f;
    }
    /* tile n's key rows into stage st (the slot ids read straight from idx) */
    auto issue = [&](int64_t n, int st) {
        sa_bf *Ks = Ks0 + st * SA_NK * SA_LDQ;
        for (int i = tid; i < SA_NK * (SA_DQK / 8); i += SA_THREADS) {
            const int r = i / (SA_DQK / 8), ch = i % (SA_DQK / 8);
            const int64_t j = n * SA_NK + r;
            const int s = j < a.K ? a.idx[t * a.K + j] : -1;
            sa_cp16(Ks + r * SA_LDQ + ch * 8, s >= 0 ? a.kv + s * a.kvs + ch * 8 : a.kv, s >= 0);
        }
        for (int i = tid; i < SA_NK; i += SA_THREADS) {
            const int64_t j = n * SA_NK + i;
            keys0[st * SA_NK + i] = j < a.K ? a.idx[t * a.K + j] : -1;
        }
    };
    const int64_t ntiles = (a.K + SA_NK - 1) / SA_NK;
    issue(0, 0);
    sa_commit();
    const int mq = w % 4, kh = w / 4; /* phase 1/2: head tile; keys 16·kh / columns 288·kh */
    const int mk = w % 2, cq = w / 2; /* phase 3: key tile, columns 144·cq */
    float dQ[36][4];
    for (int i = 0; i < 36; i++)
        for (int e = 0; e < 4; e++) dQ[i][e] = 0.f;
    for (int64_t n = 0; n < ntiles; n++) {
        const int st = (int)(n & 1);
        if (n + 1 < ntiles) {
            issue(n + 1, st ^ 1);
            sa_commit();
            sa_wait<1>();
        } else {
            sa_wait<0>();
        }
        sa_sync();
        const sa_bf *Ks = Ks0 + st * SA_NK * SA_LDQ;
        const int *keys = keys0 + st * SA_NK;
        float S[2][4], dP[2][4];
        for (int i = 0; i < 2; i++)
            for (int e = 0; e < 4; e++) S[i][e] = dP[i][e] = 0.f;
        sa_gemm<2, false, false>(S, Qs, SA_LDQ, Ks, SA_LDQ, 16 * mq, 16 * kh, SA_DQK, SA_NK, lane);
        sa_gemm<2, false, false>(dP, Gs, SA_LDG, Ks, SA_LDQ, 16 * mq, 16 * kh, SA_DV, SA_NK, lane);
        for (int nt = 0; nt < 2; nt++)
            for (int e = 0; e < 4; e++) {
                const int row = 16 * mq + g + 8 * (e >> 1), col = 16 * kh + 8 * nt + 2 * c + (e & 1);
                float p = exp2f(S[nt][e] * a.sl2 - ls[row]);
                if (keys[col] < 0) p = 0.f;
                S[nt][e] = p;
                dP[nt][e] = p * (dP[nt][e] - ds[row]) * a.scale;
            }
        for (int nt = 0; nt < 2; nt++)
            for (int half = 0; half < 2; half++) {
                const int row = 16 * mq + g + 8 * half, col = 16 * kh + 8 * nt + 2 * c;
                const uint32_t up = sa_pack(S[nt][2 * half], S[nt][2 * half + 1]);
                const uint32_t ud = sa_pack(dP[nt][2 * half], dP[nt][2 * half + 1]);
                memcpy(Ps + row * SA_LDP + col, &up, 4);
                memcpy(dSs + row * SA_LDP + col, &ud, 4);
            }
        sa_sync();
        if (a.dq) sa_gemm<36, false, true>(dQ, dSs, SA_LDP, Ks, SA_LDQ, 16 * mq, 288 * kh, SA_NK, SA_DQK, lane);
        if (a.want_dkv) {
            for (int ci = 0; ci < 3; ci++) {
                const int n0 = 144 * cq + 48 * ci;
                float acc[6][4];
                for (int i = 0; i < 6; i++)
                    for (int e = 0; e < 4; e++) acc[i][e] = 0.f;
                sa_gemm<6, true, true>(acc, dSs, SA_LDP, Qs, SA_LDQ, 16 * mk, n0, SA_NH, SA_DQK, lane);
                sa_gemm<6, true, true>(acc, Ps, SA_LDP, Gs, SA_LDG, 16 * mk, n0, SA_NH, SA_DV, lane);
                for (int half = 0; half < 2; half++) {
                    const int r = 16 * mk + g + 8 * half;
                    const int key = keys[r];
                    if (key < 0) continue;
                    const int64_t j = n * SA_NK + r;
                    float *dst = a.atomic ? a.dkv32 + (int64_t)key * SA_DQK
                                          : a.part + ((hg * a.Tc + tl) * a.K + j) * SA_DQK;
                    for (int nt = 0; nt < 6; nt++) {
                        const int col = n0 + 8 * nt + 2 * c;
                        if (a.atomic) {
                            sa_atomic_add2(dst + col, acc[nt][2 * half], acc[nt][2 * half + 1]);
                        } else {
                            dst[col] = acc[nt][2 * half];
                            dst[col + 1] = acc[nt][2 * half + 1];
                        }
                    }
                }
            }
        }
        sa_sync(); /* P, dS and stage st are rewritten by the next tile */
    }
    sa_wait<0>();
    if (a.dq)
        for (int nt = 0; nt < 36; nt++)
            for (int half = 0; half < 2; half++) {
                const int64_t h = h0 + 16 * mq + g + 8 * half;
                if (h >= a.Hq) continue;
                const int col = 288 * kh + 8 * nt + 2 * c;
                const uint32_t u = sa_pack(dQ[nt][2 * half], dQ[nt][2 * half + 1]);
                memcpy(a.dq + t * a.dqs_t + h * a.dqs_h + col, &u, 4);
            }
}

/* D = rowsum(dO∘O) and lse·log2e (+inf where lse = −inf) per (t, h) */
__global__ void sa_pre_kernel(int64_t total, bwd_view o, bwd_view g, bwd_view lse, int64_t Hq,
                              float *lse2, float *Dd) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t h = i % Hq, t = i / Hq;
    float acc = 0.f;
    for (int64_t c = 0; c < SA_DV; c++) acc += bwd_ld(o, 0, t, h, c) * bwd_ld(g, 0, t, h, c);
    Dd[i] = acc;
    const float l = bwd_ld(lse, 0, t, h, 0);
    lse2[i] = (isinf(l) && l < 0) ? INFINITY : l * 1.4426950408889634f;
}
__global__ void sa_zero_kernel(int64_t total, float *x) {
    const int64_t i = bwd_gid();
    if (i < total) x[i] = 0.f;
}
/* dkv32[s][4·c4 ..] (+)= the contributions of key s's entries, in entry
 * order, each summed over the head groups in order; one thread per
 * (key, 4 columns) */
__global__ void sa_reduce_kernel(int64_t total, const float *part, int64_t per_group, int nhg,
                                 const int *off, const int *ent, int first, float *dkv32) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t c4 = i % (SA_DQK / 4), s = i / (SA_DQK / 4);
    float4 acc = first ? make_float4(0.f, 0.f, 0.f, 0.f) : ((const float4 *)dkv32)[i];
    for (int e = off[s]; e < off[s + 1]; e++)
        for (int hg = 0; hg < nhg; hg++) {
            const float4 v = ((const float4 *)(part + (hg * per_group + ent[e]) * SA_DQK))[c4];
            acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
        }
    ((float4 *)dkv32)[i] = acc;
}

/* a bf16 view with unit inner stride, 16-byte aligned rows (align 8
 * elements; 2 for the gradient dq, written in pairs) */
bool sa_rows_ok(const la_tensor *t, int64_t inner, int align) {
    if (t->dtype != LA_BF16 || t->ne[t->ndim - 1] != inner || t->nb[t->ndim - 1] != 1) return false;
    for (int i = 0; i + 1 < t->ndim; i++)
        if (t->nb[i] % align) return false;
    return ((uintptr_t)t->data % (2 * align)) == 0;
}

} // namespace

int la_sparse_bwd_tc_eligible(const la_sparse_attn_params *p, const la_tensor *q,
                              const la_tensor *kv, const la_tensor *d_out, const la_tensor *dq,
                              const la_tensor *dkv) {
    if (!q || !kv || !d_out || q->ndim != 3 || d_out->ndim != 3 || p->dv != SA_DV) return false;
    if (!(kv->ndim == 2 || (kv->ndim == 3 && kv->ne[1] == 1))) return false;
    if (!sa_rows_ok(q, SA_DQK, 8) || !sa_rows_ok(kv, SA_DQK, 8) || !sa_rows_ok(d_out, SA_DV, 8))
        return false;
    if (dq && !sa_rows_ok(dq, SA_DQK, 2)) return false;
    if (dkv && dkv->dtype != LA_BF16) return false;
#ifndef LA_BWD_EMU
    /* the CTA's shared memory (227 KB: sm_90; not on sm_80's 163 KB) */
    int dev = 0, smem = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return false;
    if (smem < SA_SMEM) return false;
#endif
    return true;
}

la_status la_sparse_bwd_tc(const la_sparse_attn_params *p, const la_tensor *q, const la_tensor *kv,
                           const la_tensor *idx, const la_tensor *out, const la_tensor *lse,
                           const la_tensor *d_out, la_tensor *dq, la_tensor *dkv, int mode,
                           la_context *ctx) {
    const int atomic = mode == LA_SPARSE_BWD_TC_ATOMIC;
    sp_dev P;
    memset(&P, 0, sizeof P);
    P.T = q->ne[0];
    P.Hq = q->ne[1];
    P.Dqk = SA_DQK;
    P.dv = SA_DV;
    P.L = kv->ne[0];
    P.Hkv = 1;
    P.K = idx->ne[1];
    if (P.T * P.K > INT32_MAX || P.L >= INT32_MAX)
        return la_err(LA_ERR_OVERFLOW, "sparse attention backward: T*k = %lld entries (int32 index)",
                      (long long)(P.T * P.K));
    const float scale = p->scale != 0.f ? p->scale : (float)(1.0 / sqrt((double)SA_DQK));
    const int64_t nhg = (P.Hq + SA_NH - 1) / SA_NH;
    /* tokens per chunk of the per-entry workspace */
    int64_t Tc = P.T;
    if (dkv && !atomic) {
        const int64_t cap = std::max<int64_t>(2 * P.T * P.Hq * SA_DQK, (int64_t)1 << 27);
        const int64_t per_token = nhg * P.K * SA_DQK;
        Tc = std::min<int64_t>(P.T, std::max<int64_t>(1, cap / std::max<int64_t>(per_token, 1)));
        if (mode == LA_SPARSE_BWD_TC_ROWCHUNK) Tc = 1;
    }
    cudaStream_t s = bwd_stream(ctx);
    bwd_ws ws;
    float *lse2, *Dd, *ix, *dkv32 = nullptr, *part = nullptr, *cnt = nullptr, *off = nullptr,
                          *ent = nullptr;
    ws.want(&lse2, P.T, P.Hq);
    ws.want(&Dd, P.T, P.Hq);
    ws.want(&ix, P.T, P.K);
    if (dkv) {
        ws.want(&dkv32, P.L, SA_DQK);
        if (!atomic) {
            ws.want(&part, nhg * Tc, P.K, SA_DQK);
            ws.want(&cnt, sp_cnt_size(P.L));
            ws.want(&off, P.L + 1);
            ws.want(&ent, Tc, P.K);
        }
    }
    LA_TRY(ws.alloc(s, "sparse attention backward (tensor cores)"));
    const bwd_view lv = bwd_view_rows(lse); /* lse [T,Hq] as (0, t, h, 0) */
    P.idx = (const int *)ix;
    BWD_LAUNCH(sp_prep_kernel, P.T * P.K, s, P, (const int *)idx->data, idx->nb[0], idx->nb[1],
               (int *)ix);
    BWD_LAUNCH(sa_pre_kernel, P.T * P.Hq, s, bwd_view3(out), bwd_view3(d_out), lv, P.Hq, lse2, Dd);
    if (dkv && atomic) BWD_LAUNCH(sa_zero_kernel, P.L * SA_DQK, s, dkv32);
    sa_args a;
    memset(&a, 0, sizeof a);
    a.q = (const sa_bf *)q->data;
    a.kv = (const sa_bf *)kv->data;
    a.g = (const sa_bf *)d_out->data;
    a.dq = dq ? (sa_bf *)dq->data : nullptr;
    a.qs_t = q->nb[0], a.qs_h = q->nb[1];
    a.kvs = kv->nb[0];
    a.gs_t = d_out->nb[0], a.gs_h = d_out->nb[1];
    a.dqs_t = dq ? dq->nb[0] : 0, a.dqs_h = dq ? dq->nb[1] : 0;
    a.idx = (const int *)ix;
    a.lse2 = lse2, a.Dd = Dd;
    a.part = part, a.dkv32 = dkv32;
    a.T = P.T, a.Hq = P.Hq, a.K = P.K, a.Tc = Tc;
    a.want_dkv = dkv != nullptr;
    a.atomic = atomic;
    a.scale = scale;
    a.sl2 = scale * 1.4426950408889634f;
    for (int64_t t0 = 0; t0 < P.T; t0 += Tc) {
        const int64_t tc = std::min<int64_t>(Tc, P.T - t0);
        a.t0 = t0;
        if (nhg > 0) SA_LAUNCH(sa_bwd_kernel, tc, nhg, s, a); /* k = 0: dq = 0 */
        if (dkv && !atomic) {
            int *c = (int *)cnt, *o = (int *)off, *e = (int *)ent;
            LA_TRY(sp_transpose_index(s, P, t0 * P.K, tc * P.K, c, o, e));
            BWD_LAUNCH(sa_reduce_kernel, P.L * (SA_DQK / 4), s, part, Tc * P.K, (int)nhg, o, e,
                       t0 == 0 ? 1 : 0, dkv32);
        }
    }
    if (dkv) {
        const bwd_view dv_ = dkv->ndim == 3 ? bwd_view3(dkv) : bwd_view2(dkv);
        const bwd_view kvv = kv->ndim == 3 ? bwd_view3(kv) : bwd_view2(kv);
        LA_TRY(bwd_scatter(s, dv_, dkv32, kvv, 1, P.L, 1, SA_DQK, BWD_NO_FEATURE, 1.f, 1.f));
    }
    return LA_OK;
}
