/* Sparse attention over selected keys, MQA mode of MLA (SPEC §8), on the GPU:
 *   o[t,h] = sum_{s in idx[t]} softmax_s(scale q[t,h].kv[s]) kv[s][:Dv],  lse[t,h]
 * Indices < 0 or >= L are skipped; a row with none gives o = 0, lse = -inf;
 * a NaN in q (or in a selected kv row) gives NaN o and lse.
 *
 * Two kernels (family "sparse_attn", smla_select):
 * smla_v3_kernel ("wgmma", bf16, Dqk 576, Dv 512, one shared latent row per
 * key): one CTA per (query, 64 heads), 8 warps; the selected latent rows are
 * gathered 64 at a time with cp.async, S = QKᵀ and P·V on wgmma, online
 * softmax in fp32 (exp2 domain). It grew out of a mma.sync kernel (smla_kernel)
 * and a wgmma-S kernel (v2, below), both removed (in the history).
 * smla_exact_kernel ("portable"): any dtype, Dqk, Dv, kv heads; plain fp32
 * (the reference-grade path). */
#include "cuda_ops.h"
#include "select.cuh"
#include "sparse_common.cuh"

/* ------------------------------------------------------------------------ */
/* exact kernel: one CTA per (t, h), 4 warps each with its own online state  */
/* ------------------------------------------------------------------------ */
#define SX_WARPS 4
struct smla_args {
    const void *q;
    int q_dt;
    int64_t q_nb0, q_nb1, q_nb2;
    const void *kv;
    int kv_dt;
    int64_t kv_nb0, kv_nbh, kv_nb2; /* row, head, dim */
    const int32_t *idx;
    int64_t idx_nb0, idx_nb1;
    void *out;
    int out_dt;
    int64_t out_nb0, out_nb1, out_nb2;
    void *lse;
    int lse_dt;
    int64_t lse_nb0, lse_nb1;
    int64_t T, Hq, Hkv, Dqk, Dv, L, K;
    float scale;
};

__global__ void __launch_bounds__(SX_WARPS * 32) smla_exact_kernel(smla_args a) {
    extern __shared__ float sx[];
    float *qs = sx;                       /* Dqk */
    float *os = sx + a.Dqk;               /* SX_WARPS * Dv */
    float *ms = os + SX_WARPS * a.Dv;     /* SX_WARPS */
    float *ls = ms + SX_WARPS;            /* SX_WARPS */
    const int64_t t = blockIdx.y, h = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t hk = h * a.Hkv / a.Hq;
    for (int64_t d = threadIdx.x; d < a.Dqk; d += blockDim.x)
        qs[d] = la_cu_ld(a.q, a.q_dt, t * a.q_nb0 + h * a.q_nb1 + d * a.q_nb2);
    float *o = os + warp * a.Dv;
    for (int64_t d = lane; d < a.Dv; d += 32) o[d] = 0.f;
    __syncthreads();
    float m = -INFINITY, l = 0.f;
    for (int64_t i = warp; i < a.K; i += SX_WARPS) {
        const int64_t s = a.idx[t * a.idx_nb0 + i * a.idx_nb1];
        if (s < 0 || s >= a.L) continue;
        const int64_t base = s * a.kv_nb0 + hk * a.kv_nbh;
        float dot = 0.f;
        for (int64_t d = lane; d < a.Dqk; d += 32)
            dot = fmaf(qs[d], la_cu_ld(a.kv, a.kv_dt, base + d * a.kv_nb2), dot);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        const float x = dot * a.scale;
        const float mn = la_fmax_nan(m, x); /* a NaN score makes the row NaN */
        const float alpha = expf(m - mn), p = expf(x - mn);
        l = l * alpha + p;
        m = mn;
        for (int64_t d = lane; d < a.Dv; d += 32)
            o[d] = fmaf(p, la_cu_ld(a.kv, a.kv_dt, base + d * a.kv_nb2), o[d] * alpha);
    }
    if (lane == 0) {
        ms[warp] = m;
        ls[warp] = l;
    }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < SX_WARPS; w++) M = la_fmax_nan(M, ms[w]);
    float f[SX_WARPS], Lsum = 0.f;
    for (int w = 0; w < SX_WARPS; w++) {
        f[w] = ms[w] == -INFINITY ? 0.f : expf(ms[w] - M);
        Lsum += ls[w] * f[w];
    }
    /* no valid key: o = 0, lse = -inf; a NaN score (NaN q or kv): NaN, as
     * the softmax of a row holding NaN */
    const bool nan = Lsum != Lsum;
    const float inv = Lsum > 0.f ? 1.f / Lsum : nan ? Lsum : 0.f;
    for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) {
        float acc = 0.f;
        for (int w = 0; w < SX_WARPS; w++) acc += os[w * a.Dv + d] * f[w];
        la_cu_st(a.out, a.out_dt, t * a.out_nb0 + h * a.out_nb1 + d * a.out_nb2, acc * inv);
    }
    if (a.lse && threadIdx.x == 0)
        la_cu_st(a.lse, a.lse_dt, t * a.lse_nb0 + h * a.lse_nb1,
                 Lsum > 0.f ? M + logf(Lsum) : nan ? Lsum : -INFINITY);
}

/* ------------------------------------------------------------------------ */
/* bf16 tensor-core kernel, Dqk 576 / Dv 512: shapes and shared helpers      */
/* ------------------------------------------------------------------------ */
#define SM_DQK 576
#define SM_DV 512
#define SM_HEADS 64
#define SM_KEYS 64
#define SM_CPR (SM_DQK / 8) /* 16-byte chunks per latent row */

/* element offset of (row, 16-byte chunk c) in a swizzled tile */
__device__ __forceinline__ int sm_sw(int row, int c, int cpr) {
    return row * cpr * 8 + ((c ^ (row & 7)) * 8);
}


/* The S tile's scale and mask (a key that is not valid: -inf) and this
 * thread's part of the row maxima: a warp holds rows row0, row0 + 8 of its
 * 16 heads and keys 32·ch + 8j + 2qd (+1), j < 4 (the m16n8 accumulator
 * layout); the quad's maxima go to
 * red_max[ch·64 + row]. The caller synchronizes before reading them. */
__device__ __forceinline__ void sm_mask_rowmax(float (*s)[4], const int *vld, int ch, int qd, int row0,
                                               float scale_log2, float *red_max) {
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int col = 32 * ch + 8 * j + 2 * qd;
        const bool v0 = vld[col] != 0, v1 = vld[col + 1] != 0;
        s[j][0] = v0 ? s[j][0] * scale_log2 : -INFINITY;
        s[j][1] = v1 ? s[j][1] * scale_log2 : -INFINITY;
        s[j][2] = v0 ? s[j][2] * scale_log2 : -INFINITY;
        s[j][3] = v1 ? s[j][3] * scale_log2 : -INFINITY;
        mx[0] = fmaxf(mx[0], fmaxf(s[j][0], s[j][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[j][2], s[j][3]));
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    }
    if (qd == 0) {
        red_max[ch * 64 + row0] = mx[0];
        red_max[ch * 64 + row0 + 8] = mx[1];
    }
}


/* ------------------------------------------------------------------------ */
/* v2: S by wgmma (the layout v3 keeps; the v2 kernel itself is removed)     */
/* ------------------------------------------------------------------------ */
/* Why: the mma.sync kernel was shared-memory bound (per warp per 64-key tile 176
 * ldmatrix.x4: each K/V fragment feeds only the 16 heads of one warp).
 * v2 keeps the CTA = (query, 64 heads), 8 warps = 2 warpgroups, 64-key tiles,
 * 2-stage cp.async gather, but
 *  - S = Q K^T: warpgroup j computes all 64 heads x keys 32j..32j+31 with
 *    wgmma m64n32k16 (36 per tile), Q and K read by the tensor cores straight
 *    from shared memory (128-byte swizzle, K-major): per tile 2 x 36 x 3 KB =
 *    216 KB of smem reads instead of 8 x 108 ldmatrix.x4 = 442 KB. The
 *    accumulator layout (warp w%4: rows 16(w%4)+g, +8; per n8 block cols
 *    8n+2q, +1) is the mma.sync one, so the softmax code is unchanged.
 * *  - O: warp w owns all 64 heads x Dv columns 64w..64w+63 (4 x 8 m16n8
 *    tiles, 128 fp32 registers): per tile 16 ldmatrix.x4 of P + 16 of V per
 *    warp (was 4 + 64), i.e. 128 KB instead of 278 KB.
 * Shared layout of Q and each kv buffer: 9 blocks of 64 dims, each
 * [64 rows][128 B] with 16-byte chunk c of row r at c ^ (r & 7) (the SW128
 * pattern wgmma expects; blocks 1024-byte aligned). */
#define V2_HEADS 64
#define V2_KEYS 64
#define V2_THREADS 256
#define V2_TILE_B (64 * SM_DQK * 2)          /* 73728: Q, or one kv buffer */
#define V2_P_B (V2_HEADS * V2_KEYS * 2)     /* 8192 */
#define V2_RED_B ((128 + 128 + 64 + 128) * 4) /* red_max, red_sum, alpha, valid */
#define V2_SMEM (3 * V2_TILE_B + V2_P_B + V2_RED_B + 1024) /* + alignment slack */

/* element offset of (row, 16-byte chunk c of 72) in a v2 tile */
__device__ __forceinline__ int v2_off(int row, int c) {
    return (c >> 3) * (64 * 64) + row * 64 + (((c & 7) ^ (row & 7)) << 3);
}


#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define V2_HAVE_WGMMA 1
#else
#define V2_HAVE_WGMMA 0
#endif


/* ------------------------------------------------------------------------ */
/* v3 bf16 kernel ("wgmma", the default): v2's S, P.V also by wgmma         */
/* ------------------------------------------------------------------------ */
/* Same CTA = (query, 64 heads), 8 warps = 2 warpgroups, 64-key tiles, smem
 * layout and S = Q K^T (36 wgmma m64n32k16 per warpgroup) as v2. Changes:
 *  - P.V by wgmma m64n256k16: warpgroup j owns all 64 heads x Dv 256j..+255
 *    (the m64n256 accumulator: warp w%4 rows 16(w%4)+g, +8, the same rows as
 *    its S fragment, 128 fp32 registers). Its own keys 32j..+31 come from
 *    registers (the S accumulator converted to bf16 is the A fragment, as in
 *    FA3), the other warpgroup's keys from P in shared memory (K-major, the
 *    SW128 layout P already had). V is the kv tile read N-major (transpose
 *    flag): atoms [8 keys][64 dims] of 1024 B, LBO 8192 B (next 64-dim
 *    block), SBO 1024 B (next 8 keys). No ldmatrix, no mma.sync.
 *  - Row statistics stay with the thread (its rows are the same in S and O):
 *    no alpha / row-sum exchange through smem; the running sum is kept per
 *    thread over its own key columns and reduced once at the end.
 *  - Lazy rescale: the reference max moves only when the tile max exceeds it
 *    by more than 8 (log2 domain), so P <= 256 (exact in the final l, O
 *    normalisation); O is rescaled only when some row of the warp moved.
 *  - The next tile's gather is issued while the S wgmmas run, with its
 *    index loaded one tile earlier (no dependent global load at the top of
 *    the tile). */
__device__ __forceinline__ uint32_t v3_pack(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo)); /* lo in bits 0..15 */
    return r;
}
/* raw index of row threadIdx.x / 4 of a tile (-1 past k) */
__device__ __forceinline__ int32_t v3_idx(const smla_args &a, int64_t t, int64_t tile) {
    const int64_t i = tile * V2_KEYS + (threadIdx.x >> 2);
    return i < a.K ? a.idx[t * a.idx_nb0 + i * a.idx_nb1] : -1;
}
__device__ __forceinline__ void v3_gather(const smla_args &a, int32_t s, __nv_bfloat16 *kvs,
                                          int *valid) {
    const int r = threadIdx.x >> 2, c0 = threadIdx.x & 3;
    const bool ok = s >= 0 && s < a.L;
    const __nv_bfloat16 *src = (const __nv_bfloat16 *)a.kv + (ok ? (int64_t)s * a.kv_nb0 : 0);
#pragma unroll 6
    for (int c = c0; c < SM_CPR; c += 4) la_cp16z_n(kvs + v2_off(r, c), src + c * 8, ok ? 16 : 0);
    if (c0 == 0) valid[r] = ok;
}

__global__ void __launch_bounds__(V2_THREADS, 1) smla_v3_kernel(smla_args a, float scale_log2) {
#if V2_HAVE_WGMMA
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *smem =
        smem_raw + ((1024 - ((uint32_t)__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
    __nv_bfloat16 *qs = (__nv_bfloat16 *)smem;
    __nv_bfloat16 *kvs0 = (__nv_bfloat16 *)(smem + V2_TILE_B);
    __nv_bfloat16 *ps = (__nv_bfloat16 *)(smem + 3 * V2_TILE_B); /* 1024-B aligned */
    float *red_max = (float *)(smem + 3 * V2_TILE_B + V2_P_B); /* [2][64] */
    float *red_sum = red_max + 128;                            /* [2][64], at the end */
    int *valid = (int *)(red_sum + 128 + 64);                  /* [2][64] */

    const int64_t t = blockIdx.y, h0 = (int64_t)blockIdx.x * V2_HEADS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, qd = lane & 3;
    const int rg = warp & 3, ch = warp >> 2; /* rows 16rg+g, +8; S keys 32ch..; O dv 256ch.. */
    const int64_t ntiles = (a.K + V2_KEYS - 1) / V2_KEYS;

    {
        const __nv_bfloat16 *q = (const __nv_bfloat16 *)a.q + t * a.q_nb0;
        for (int i = threadIdx.x; i < V2_HEADS * SM_CPR; i += V2_THREADS) {
            const int r = i / SM_CPR, c = i % SM_CPR;
            const bool ok = h0 + r < a.Hq;
            la_cp16z_n(qs + v2_off(r, c), q + (ok ? (h0 + r) * a.q_nb1 + c * 8 : 0), ok ? 16 : 0);
        }
    }
    if (ntiles > 0) v3_gather(a, v3_idx(a, t, 0), kvs0, valid);
    asm volatile("cp.async.commit_group;\n" ::);
    int32_t nidx = v3_idx(a, t, 1); /* index for the gather issued in the next tile */

    float o[32][4]; /* [n8: dv 256ch + 8i..][frag] */
#pragma unroll
    for (int i = 0; i < 32; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[i][e] = 0.f;
    float m_ref[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
    const int row0 = 16 * rg + g;

    for (int64_t tile = 0; tile < ntiles; tile++) {
        const int buf = (int)(tile & 1);
        __nv_bfloat16 *kvs = kvs0 + buf * (V2_TILE_B / 2);
        asm volatile("cp.async.wait_group 0;\n" ::);
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); /* A: tile ready; previous P.V (wgmma waited) done everywhere */

        float s[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[j][e] = 0.f;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kb = 0; kb < SM_DQK / 64; kb++)
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                la_wg_m64n32k16_bf16_acc(s, la_wg_desc_ptr(qs + kb * 4096 + kk * 16),
                             la_wg_desc_ptr(kvs + kb * 4096 + ch * 32 * 64 + kk * 16));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        /* gather of the next tile while the tensor cores work */
        if (tile + 1 < ntiles)
            v3_gather(a, nidx, kvs0 + (buf ^ 1) * (V2_TILE_B / 2), valid + (buf ^ 1) * 64);
        asm volatile("cp.async.commit_group;\n" ::);
        nidx = v3_idx(a, t, tile + 2);
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) asm volatile("" : "+f"(s[j][e])::"memory");

        /* scale, mask, partial row max */
        sm_mask_rowmax(s, valid + buf * 64, ch, qd, row0, scale_log2, red_max);
        __syncthreads(); /* B */
        /* both warpgroups read the same maxima and so keep the same m_ref */
        float alpha[2], m_use[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = row0 + 8 * r;
            const float mt = fmaxf(red_max[row], red_max[64 + row]);
            alpha[r] = 1.f;
            if (mt > m_ref[r] + 8.f) { /* false while mt = -inf */
                alpha[r] = exp2f(m_ref[r] - mt); /* 0 from m_ref = -inf */
                m_ref[r] = mt;
            }
            m_use[r] = m_ref[r] == -INFINITY ? 0.f : m_ref[r];
        }
        uint32_t pa[2][4]; /* A fragments of this warpgroup's keys 32ch + 16u.. */
        float sum[2] = {0.f, 0.f};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float p0 = exp2f(s[j][0] - m_use[0]), p1 = exp2f(s[j][1] - m_use[0]);
            const float p2 = exp2f(s[j][2] - m_use[1]), p3 = exp2f(s[j][3] - m_use[1]);
            sum[0] += p0 + p1;
            sum[1] += p2 + p3;
            const uint32_t lo = v3_pack(p0, p1), hi = v3_pack(p2, p3);
            pa[j >> 1][2 * (j & 1)] = lo;
            pa[j >> 1][2 * (j & 1) + 1] = hi;
            const int c = 4 * ch + j; /* chunk of 8 keys */
            *(uint32_t *)(ps + sm_sw(row0, c, 8) + 2 * qd) = lo;
            *(uint32_t *)(ps + sm_sw(row0 + 8, c, 8) + 2 * qd) = hi;
        }
#pragma unroll
        for (int r = 0; r < 2; r++) l_run[r] = l_run[r] * alpha[r] + sum[r];
        if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
            for (int i = 0; i < 32; i++) {
                o[i][0] *= alpha[0];
                o[i][1] *= alpha[0];
                o[i][2] *= alpha[1];
                o[i][3] *= alpha[1];
            }
        }
        /* O[64 heads, dv 256ch..] += P V: own keys from registers first */
        __nv_bfloat16 *vb = kvs + ch * 4 * 4096; /* dv block 4ch, key 0 */
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        la_wg_m64n256k16_bf16_rs(o, pa[0], la_wg_desc_nmajor(vb + (2 * ch) * 16 * 64));
        la_wg_m64n256k16_bf16_rs(o, pa[1], la_wg_desc_nmajor(vb + (2 * ch + 1) * 16 * 64));
        /* P stores (generic proxy) must be visible to the other warpgroup's wgmma */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); /* C: P of both warpgroups in smem */
        {
            const int u0 = 2 * (ch ^ 1);
            la_wg_m64n256k16_bf16_ss(o, la_wg_desc_ptr(ps + u0 * 16), la_wg_desc_nmajor(vb + u0 * 16 * 64));
            la_wg_m64n256k16_bf16_ss(o, la_wg_desc_ptr(ps + (u0 + 1) * 16), la_wg_desc_nmajor(vb + (u0 + 1) * 16 * 64));
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
        for (int i = 0; i < 32; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) asm volatile("" : "+f"(o[i][e])::"memory");
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
    }
    if (qd == 0) {
        red_sum[ch * 64 + row0] = l_run[0];
        red_sum[ch * 64 + row0 + 8] = l_run[1];
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + 8 * r;
        const int64_t h = h0 + row;
        if (h >= a.Hq) continue;
        const float l = red_sum[row] + red_sum[64 + row];
        /* l = 0: no valid key (o = 0, lse = -inf); l NaN: a NaN score in
         * the row (P holds NaN, so does l): o and lse NaN */
        const bool nan = l != l;
        if (a.lse && ch == 0 && qd == 0)
            la_cu_st(a.lse, a.lse_dt, t * a.lse_nb0 + h * a.lse_nb1,
                     l > 0.f ? (m_ref[r] + log2f(l)) * 0.69314718055994531f : nan ? l : -INFINITY);
        const float inv = l > 0.f ? 1.f / l : nan ? l : 0.f;
        const int64_t ob = t * a.out_nb0 + h * a.out_nb1;
        if (a.out_dt == LA_BF16 && a.out_nb2 == 1) {
            __nv_bfloat16 *op = (__nv_bfloat16 *)a.out + ob;
#pragma unroll
            for (int i = 0; i < 32; i++) {
                const int d = 256 * ch + 8 * i + 2 * qd;
                *(__nv_bfloat162 *)(op + d) =
                    __floats2bfloat162_rn(o[i][2 * r] * inv, o[i][2 * r + 1] * inv);
            }
        } else {
#pragma unroll
            for (int i = 0; i < 32; i++) {
                const int d = 256 * ch + 8 * i + 2 * qd;
                la_cu_st(a.out, a.out_dt, ob + d * a.out_nb2, o[i][2 * r] * inv);
                la_cu_st(a.out, a.out_dt, ob + (d + 1) * a.out_nb2, o[i][2 * r + 1] * inv);
            }
        }
    }
#else
    __trap(); /* built without sm_90a: the host never selects this kernel */
    (void)a;
    (void)scale_log2;
#endif
}

enum smla_kernel_id { SMLA_WGMMA = 0, SMLA_PORTABLE = 1 };
static const char *const smla_names[] = {"wgmma", "portable"};

/* The kernel for these arguments (pure); forced: the context's variant. */
static la_status smla_select(const smla_args &a, const char *forced, bool hopper,
                             smla_kernel_id *kern) {
    const bool wg = hopper && a.q_dt == LA_BF16 && a.kv_dt == LA_BF16 && a.Dqk == SM_DQK && a.Dv == SM_DV &&
                    a.Hkv == 1 && a.q_nb2 == 1 && a.q_nb1 % 8 == 0 && a.q_nb0 % 8 == 0 &&
                    ((uintptr_t)a.q & 15) == 0 && a.kv_nb2 == 1 && a.kv_nb0 % 8 == 0 &&
                    ((uintptr_t)a.kv & 15) == 0 && (a.out_dt == LA_BF16 || a.out_dt == LA_F32) &&
                    a.Hq <= 65535 * (int64_t)V2_HEADS;
    if (!forced) {
        *kern = wg ? SMLA_WGMMA : SMLA_PORTABLE;
        return LA_OK;
    }
    const int i = la_cu_variant_index(forced, smla_names, 2);
    if (i < 0) return la_cu_unknown_variant("sparse_attn", forced, "wgmma, portable");
    if (i == SMLA_WGMMA && !wg)
        return la_cu_variant_unsupported("sparse_attn", forced,
                                         "an sm_90 device, bf16 q/kv, Dqk = 576, Dv = 512, one kv head, "
                                         "rows contiguous");
    *kern = (smla_kernel_id)i;
    return LA_OK;
}

extern "C" la_status la_sparse_attention_cuda(const la_sparse_attn_params *p, const la_tensor *q,
                                              const la_tensor *kv, const la_tensor *idx,
                                              la_tensor *out, la_tensor *lse, la_context *ctx) {
    /* la_sparse_attention checked that p, q, kv, idx and out are non-NULL */
    cudaStream_t st = la_cu_stream(ctx);
    smla_args a;
    memset(&a, 0, sizeof a);
    a.q = q->data;
    a.q_dt = q->dtype;
    a.q_nb0 = q->nb[0];
    a.q_nb1 = q->nb[1];
    a.q_nb2 = q->nb[2];
    a.kv = kv->data;
    a.kv_dt = kv->dtype;
    a.kv_nb0 = kv->nb[0];
    if (kv->ndim == 3) {
        a.Hkv = kv->ne[1];
        a.kv_nbh = kv->nb[1];
        a.kv_nb2 = kv->nb[2];
    } else {
        a.Hkv = 1;
        a.kv_nbh = 0;
        a.kv_nb2 = kv->nb[1];
    }
    a.idx = (const int32_t *)idx->data;
    a.idx_nb0 = idx->nb[0];
    a.idx_nb1 = idx->nb[1];
    a.out = out->data;
    a.out_dt = out->dtype;
    a.out_nb0 = out->nb[0];
    a.out_nb1 = out->nb[1];
    a.out_nb2 = out->nb[2];
    if (lse) {
        a.lse = lse->data;
        a.lse_dt = lse->dtype;
        a.lse_nb0 = lse->nb[0];
        a.lse_nb1 = lse->nb[1];
    }
    a.T = q->ne[0];
    a.Hq = q->ne[1];
    a.Dqk = q->ne[2];
    a.Dv = p->dv;
    a.L = kv->ne[0];
    a.K = idx->ne[1];
    a.scale = p->scale != 0.f ? p->scale : 1.f / sqrtf((float)a.Dqk);
    if (a.T == 0 || a.Hq == 0) return LA_OK;
    if (a.T > 65535 || a.Hq > INT32_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "sparse attention: T=%lld exceeds the CUDA grid (65535)",
                      (long long)a.T);

    smla_kernel_id kern;
    LA_TRY(smla_select(a, la_context_variant(ctx, "sparse_attn"), la_cu_hopper(ctx), &kern));
    la_cu_report(ctx, "sparse_attn", smla_names[kern], "T=%lld Hq=%lld Dqk=%lld Dv=%lld K=%lld",
                 (long long)a.T, (long long)a.Hq, (long long)a.Dqk, (long long)a.Dv, (long long)a.K);
    if (kern == SMLA_WGMMA) {
        LA_TRY(la_cu_func_smem(ctx, (const void *)smla_v3_kernel, V2_SMEM, V2_SMEM, false));
        dim3 grid((unsigned)((a.Hq + V2_HEADS - 1) / V2_HEADS), (unsigned)a.T);
        smla_v3_kernel<<<grid, V2_THREADS, V2_SMEM, st>>>(a, a.scale * 1.4426950408889634f);
        LA_CU_LAUNCH("sparse MLA attention v3 (bf16, wgmma P.V)");
    } else {
        const size_t smem = ((size_t)a.Dqk + SX_WARPS * (size_t)a.Dv + 2 * SX_WARPS) * 4;
        const size_t smem_max = 200 * 1024;
        if (smem > smem_max)
            return la_err(LA_ERR_UNSUPPORTED,
                          "sparse attention: Dqk=%lld, dv=%lld too large for the CUDA kernel",
                          (long long)a.Dqk, (long long)a.Dv);
        LA_TRY(la_cu_func_smem(ctx, (const void *)smla_exact_kernel, smem, smem_max, false));
        dim3 grid((unsigned)a.Hq, (unsigned)a.T);
        smla_exact_kernel<<<grid, SX_WARPS * 32, smem, st>>>(a);
        LA_CU_LAUNCH("sparse attention (exact)");
    }
    la_err_clear();
    return LA_OK;
}
