/* Sparse attention over selected keys, MQA mode of MLA (SPEC §8), on the GPU:
 *   o[t,h] = sum_{s in idx[t]} softmax_s(scale q[t,h].kv[s]) kv[s][:Dv],  lse[t,h]
 * Indices < 0 or >= L are skipped; a row with none gives o = 0, lse = -inf.
 *
 * smla_kernel (bf16, Dqk 576, Dv 512, one shared latent row per key): one CTA
 * per (query, 64 heads), 8 warps. The 64 heads' queries stay in shared
 * memory; the selected latent rows are gathered 64 at a time with cp.async
 * (double buffered, zero-filled when invalid). Warp w computes S for heads
 * 16(w%4).. and keys 32(w/4).. (K = 576), the row max and sum are combined
 * across the two warps of a row group through shared memory (online
 * softmax, fp32, exp2 domain), P goes to shared memory as bf16, and warp w
 * accumulates O for its 16 heads and Dv half 256(w/4).. (128 fp32 registers).
 * Tensor cores: mma.sync m16n8k16 bf16, fp32 accumulate.
 * smla_exact_kernel: any dtype, Dqk, Dv, kv heads; plain fp32 (the
 * reference-grade path). */
#include "cuda_ops.h"
#include "sparse_common.cuh"
#include "ops/sparse_validate.h"

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
        const float mn = fmaxf(m, x);
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
    for (int w = 0; w < SX_WARPS; w++) M = fmaxf(M, ms[w]);
    float f[SX_WARPS], Lsum = 0.f;
    for (int w = 0; w < SX_WARPS; w++) {
        f[w] = ms[w] == -INFINITY ? 0.f : expf(ms[w] - M);
        Lsum += ls[w] * f[w];
    }
    const float inv = Lsum > 0.f ? 1.f / Lsum : 0.f;
    for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) {
        float acc = 0.f;
        for (int w = 0; w < SX_WARPS; w++) acc += os[w * a.Dv + d] * f[w];
        la_cu_st(a.out, a.out_dt, t * a.out_nb0 + h * a.out_nb1 + d * a.out_nb2, acc * inv);
    }
    if (a.lse && threadIdx.x == 0)
        la_cu_st(a.lse, a.lse_dt, t * a.lse_nb0 + h * a.lse_nb1,
                 Lsum > 0.f ? M + logf(Lsum) : -INFINITY);
}

/* ------------------------------------------------------------------------ */
/* bf16 tensor-core kernel, Dqk 576 / Dv 512                                  */
/* ------------------------------------------------------------------------ */
#define SM_DQK 576
#define SM_DV 512
#define SM_HEADS 64
#define SM_KEYS 64
#define SM_CPR (SM_DQK / 8) /* 16-byte chunks per latent row */
#define SM_THREADS 256
#define SM_SMEM_Q (SM_HEADS * SM_DQK * 2)
#define SM_SMEM_KV (SM_KEYS * SM_DQK * 2)
#define SM_SMEM_P (SM_HEADS * SM_KEYS * 2)
#define SM_SMEM (SM_SMEM_Q + 2 * SM_SMEM_KV + SM_SMEM_P + 2 * 64 * 4 * 3)

__device__ __forceinline__ void sm_ldsm_x4_t(uint32_t *r, const void *p) {
    uint32_t sa = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(sa));
}
/* element offset of (row, 16-byte chunk c) in a swizzled tile */
__device__ __forceinline__ int sm_sw(int row, int c, int cpr) {
    return row * cpr * 8 + ((c ^ (row & 7)) * 8);
}

__device__ __forceinline__ void sm_load_kv(const smla_args &a, int64_t t, int64_t tile,
                                           __nv_bfloat16 *kvs, int *valid) {
    const int r = threadIdx.x >> 2, c0 = threadIdx.x & 3;
    const int64_t i = tile * SM_KEYS + r;
    int64_t s = i < a.K ? (int64_t)a.idx[t * a.idx_nb0 + i * a.idx_nb1] : -1;
    const bool ok = s >= 0 && s < a.L;
    if (!ok) s = 0;
    const __nv_bfloat16 *src = (const __nv_bfloat16 *)a.kv + s * a.kv_nb0;
    for (int c = c0; c < SM_CPR; c += 4) la_sp_cp16z(kvs + sm_sw(r, c, SM_CPR), src + c * 8, ok ? 16 : 0);
    if (c0 == 0) valid[r] = ok;
}

__global__ void __launch_bounds__(SM_THREADS, 1) smla_kernel(smla_args a, float scale_log2) {
    extern __shared__ __align__(128) unsigned char smem[];
    __nv_bfloat16 *qs = (__nv_bfloat16 *)smem;
    __nv_bfloat16 *kvs0 = (__nv_bfloat16 *)(smem + SM_SMEM_Q);
    __nv_bfloat16 *ps = (__nv_bfloat16 *)(smem + SM_SMEM_Q + 2 * SM_SMEM_KV);
    float *red_max = (float *)(smem + SM_SMEM_Q + 2 * SM_SMEM_KV + SM_SMEM_P); /* [2][64] */
    float *red_sum = red_max + 128;                                           /* [2][64] */
    int *valid = (int *)(red_sum + 128);                                      /* [2][64] */

    const int64_t t = blockIdx.y, h0 = (int64_t)blockIdx.x * SM_HEADS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, qd = lane & 3;
    const int rg = warp & 3, ch = warp >> 2;
    const int64_t ntiles = (a.K + SM_KEYS - 1) / SM_KEYS;

    {
        const __nv_bfloat16 *q = (const __nv_bfloat16 *)a.q + t * a.q_nb0 + h0 * a.q_nb1;
        for (int i = threadIdx.x; i < SM_HEADS * SM_CPR; i += SM_THREADS) {
            int r = i / SM_CPR, c = i % SM_CPR;
            la_sp_cp16z(qs + sm_sw(r, c, SM_CPR), q + r * a.q_nb1 + c * 8, 16);
        }
    }
    if (ntiles > 0) sm_load_kv(a, t, 0, kvs0, valid);
    asm volatile("cp.async.commit_group;\n" ::);

    float o[32][4];
#pragma unroll
    for (int j = 0; j < 32; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[j][e] = 0.f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
    const int row0 = 16 * rg + g; /* this thread's rows: row0, row0 + 8 */

    for (int64_t tile = 0; tile < ntiles; tile++) {
        const int buf = (int)(tile & 1);
        __nv_bfloat16 *kvs = kvs0 + buf * (SM_SMEM_KV / 2);
        asm volatile("cp.async.wait_group 0;\n" ::);
        __syncthreads(); /* A: tile ready; previous PV done everywhere */
        if (tile + 1 < ntiles)
            sm_load_kv(a, t, tile + 1, kvs0 + (buf ^ 1) * (SM_SMEM_KV / 2), valid + (buf ^ 1) * 64);
        asm volatile("cp.async.commit_group;\n" ::);

        /* S = Q K^T for rows 16rg.., keys 32ch.. */
        float s[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[j][e] = 0.f;
#pragma unroll 4
        for (int ks = 0; ks < SM_DQK / 16; ks++) {
            uint32_t af[4];
            {
                const int r = 16 * rg + (lane & 7) + ((lane >> 3) & 1) * 8;
                const int c = 2 * ks + (lane >> 4);
                la_sp_ldsm_x4(af, qs + sm_sw(r, c, SM_CPR));
            }
#pragma unroll
            for (int np = 0; np < 2; np++) {
                const int key = 32 * ch + 16 * np + (lane & 7) + (lane >> 4) * 8;
                const int c = 2 * ks + ((lane >> 3) & 1);
                uint32_t b[4];
                la_sp_ldsm_x4(b, kvs + sm_sw(key, c, SM_CPR));
                la_sp_mma_bf16(s[2 * np], af, b[0], b[1]);
                la_sp_mma_bf16(s[2 * np + 1], af, b[2], b[3]);
            }
        }
        /* scale, mask, partial row max */
        const int *vld = valid + buf * 64;
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
        __syncthreads(); /* B */
        float alpha[2], m_use[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = row0 + 8 * r;
            const float mt = fmaxf(red_max[row], red_max[64 + row]);
            const float mn = fmaxf(m_run[r], mt);
            m_use[r] = mn == -INFINITY ? 0.f : mn;
            alpha[r] = exp2f(m_run[r] - m_use[r]);
            m_run[r] = mn;
        }
        float sum[2] = {0.f, 0.f};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float p0 = exp2f(s[j][0] - m_use[0]), p1 = exp2f(s[j][1] - m_use[0]);
            const float p2 = exp2f(s[j][2] - m_use[1]), p3 = exp2f(s[j][3] - m_use[1]);
            sum[0] += p0 + p1;
            sum[1] += p2 + p3;
            const int c = 4 * ch + j; /* chunk of 8 keys */
            __nv_bfloat162 lo2 = __floats2bfloat162_rn(p0, p1), hi2 = __floats2bfloat162_rn(p2, p3);
            *(__nv_bfloat162 *)(ps + sm_sw(row0, c, 8) + 2 * qd) = lo2;
            *(__nv_bfloat162 *)(ps + sm_sw(row0 + 8, c, 8) + 2 * qd) = hi2;
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
            sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
        }
        if (qd == 0) {
            red_sum[ch * 64 + row0] = sum[0];
            red_sum[ch * 64 + row0 + 8] = sum[1];
        }
#pragma unroll
        for (int j = 0; j < 32; j++) {
            o[j][0] *= alpha[0];
            o[j][1] *= alpha[0];
            o[j][2] *= alpha[1];
            o[j][3] *= alpha[1];
        }
        __syncthreads(); /* C: P and the row sums are complete */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = row0 + 8 * r;
            l_run[r] = l_run[r] * alpha[r] + red_sum[row] + red_sum[64 + row];
        }
        /* O[rows, 256ch..] += P V */
#pragma unroll
        for (int kk = 0; kk < SM_KEYS / 16; kk++) {
            uint32_t pf[4];
            {
                const int r = 16 * rg + (lane & 7) + ((lane >> 3) & 1) * 8;
                const int c = 2 * kk + (lane >> 4);
                la_sp_ldsm_x4(pf, ps + sm_sw(r, c, 8));
            }
            const int key = 16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
            for (int jp = 0; jp < 16; jp++) {
                const int c = (256 * ch + 16 * jp) / 8 + (lane >> 4);
                uint32_t b[4];
                sm_ldsm_x4_t(b, kvs + sm_sw(key, c, SM_CPR));
                la_sp_mma_bf16(o[2 * jp], pf, b[0], b[1]);
                la_sp_mma_bf16(o[2 * jp + 1], pf, b[2], b[3]);
            }
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::);

    const float inv[2] = {l_run[0] > 0.f ? 1.f / l_run[0] : 0.f,
                          l_run[1] > 0.f ? 1.f / l_run[1] : 0.f};
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t h = h0 + row0 + 8 * r;
        const int64_t ob = t * a.out_nb0 + h * a.out_nb1;
        if (a.out_dt == LA_BF16 && a.out_nb2 == 1) {
            __nv_bfloat16 *op = (__nv_bfloat16 *)a.out + ob;
#pragma unroll
            for (int j = 0; j < 32; j++) {
                const int d = 256 * ch + 8 * j + 2 * qd;
                *(__nv_bfloat162 *)(op + d) =
                    __floats2bfloat162_rn(o[j][2 * r] * inv[r], o[j][2 * r + 1] * inv[r]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < 32; j++) {
                const int d = 256 * ch + 8 * j + 2 * qd;
                la_cu_st(a.out, a.out_dt, ob + d * a.out_nb2, o[j][2 * r] * inv[r]);
                la_cu_st(a.out, a.out_dt, ob + (d + 1) * a.out_nb2, o[j][2 * r + 1] * inv[r]);
            }
        }
        if (a.lse && ch == 0 && qd == 0)
            la_cu_st(a.lse, a.lse_dt, t * a.lse_nb0 + h * a.lse_nb1,
                     l_run[r] > 0.f ? (m_run[r] + log2f(l_run[r])) * 0.69314718055994531f
                                    : -INFINITY);
    }
}

extern "C" la_status la_sparse_attention_cuda(const la_sparse_attn_params *p, const la_tensor *q,
                                              const la_tensor *kv, const la_tensor *idx,
                                              la_tensor *out, la_tensor *lse, la_context *ctx) {
    /* la_sparse_attention checked that p, q, kv, idx and out are non-NULL */
    const unsigned fl = LA_DT(LA_F32) | LA_DT(LA_F64) | LA_DT(LA_BF16) | LA_DT(LA_F16);
    LA_TRY(la_sparse_attn_check_views(p, q, kv, idx, out, lse, LA_DEVICE_CUDA, fl));
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

    const bool fast = a.q_dt == LA_BF16 && a.kv_dt == LA_BF16 && a.Dqk == SM_DQK &&
                      a.Dv == SM_DV && a.Hkv == 1 && a.Hq % SM_HEADS == 0 && a.q_nb2 == 1 &&
                      a.q_nb1 % 8 == 0 && a.q_nb0 % 8 == 0 && ((uintptr_t)a.q & 15) == 0 &&
                      a.kv_nb2 == 1 && a.kv_nb0 % 8 == 0 && ((uintptr_t)a.kv & 15) == 0 &&
                      (a.out_dt == LA_BF16 || a.out_dt == LA_F32);
    if (fast) {
        LA_CU(cudaFuncSetAttribute(smla_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   SM_SMEM));
        dim3 grid((unsigned)(a.Hq / SM_HEADS), (unsigned)a.T);
        smla_kernel<<<grid, SM_THREADS, SM_SMEM, st>>>(a, a.scale * 1.4426950408889634f);
        LA_CU_LAUNCH("sparse MLA attention (bf16 mma)");
    } else {
        const size_t smem = ((size_t)a.Dqk + SX_WARPS * (size_t)a.Dv + 2 * SX_WARPS) * 4;
        if (smem > 200 * 1024)
            return la_err(LA_ERR_UNSUPPORTED,
                          "sparse attention: Dqk=%lld, dv=%lld too large for the CUDA kernel",
                          (long long)a.Dqk, (long long)a.Dv);
        LA_CU(cudaFuncSetAttribute(smla_exact_kernel,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        dim3 grid((unsigned)a.Hq, (unsigned)a.T);
        smla_exact_kernel<<<grid, SX_WARPS * 32, smem, st>>>(a);
        LA_CU_LAUNCH("sparse attention (exact)");
    }
    la_err_clear();
    return LA_OK;
}
