/* Softmax attention (SPEC §1) on CUDA: flash-style online softmax over key
 * tiles, fp32 CUDA cores (any D ≤ 512, any Dv, any dtype and strides).
 *
 * One CTA per (64 queries, batch·head, 128 columns of Dv); the Q tile lives
 * in shared memory, key tiles of 64 stream through:
 *     S = scale·Q Kᵀ (masked → −inf),  m' = max(m, rowmax S),
 *     P = exp(S − m'),  l = l·e^{m−m'} + rowsum P,  O = O·e^{m−m'} + P V,
 * and at the end o = O/l, lse = m + ln l. A row that sees no key gives o = 0
 * and lse = −inf (as the CPU path). This is the general path; it runs on
 * CUDA cores, not tensor cores (see docs/PERF.md for its speed).
 *
 * Selection (sm_select, family "softmax"): bf16 or f16 q/k/v/out (one
 * dtype) with head dims D = Dv ∈ {32, 64, 128} or (D, Dv) = (64, 128),
 * (128, 64) and rows of D contiguous and 16-byte aligned take the
 * tensor-core kernel of softmax_tc.cu ("tc"); the rest this kernel
 * ("portable"), and a verbose context says which and why. */
#include "cuda_ops.h"
#include "common.cuh"
#include "select.cuh"
#include "softmax_tc.cuh"

namespace {

constexpr int BQ = 64, BKV = 64, DVT = 128, KC = 32, NT = 256;
constexpr int MAX_D = 512;

struct sm_args {
    la_cu_view q, k, v, out, lse;
    int64_t B, Nq, Nk, H, Hk, D, Dv;
    float scale;
    int causal;
};

__global__ void __launch_bounds__(NT, 1) sm_fwd_kernel(sm_args a) {
    extern __shared__ float smem[];
    float *Qs = smem;                          /* [BQ][D+1]            */
    const int ldq = (int)a.D + 1;
    float *Ks = Qs + BQ * ldq;                 /* [KC][BKV]            */
    float *Ss = Ks + KC * BKV;                 /* [BQ][BKV+1]          */
    float *Vs = Ss + BQ * (BKV + 1);           /* [KC][DVT]            */
    float *alpha = Vs + KC * DVT;              /* [BQ]                 */
    float *lrow = alpha + BQ;                  /* [BQ]                 */
    float *mrow = lrow + BQ;                   /* [BQ]                 */

    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t q0 = (int64_t)blockIdx.x * BQ;
    const int64_t bh = blockIdx.y, b = bh / a.H, h = bh % a.H, kh = h / (a.H / a.Hk);
    const int64_t v0 = (int64_t)blockIdx.z * DVT;
    const int64_t nq = min((int64_t)BQ, a.Nq - q0);
    const int64_t shift = a.Nk - a.Nq; /* causal: key s visible to query t iff s <= t + shift */

    for (int e = tid; e < BQ * a.D; e += NT) {
        int r = e / (int)a.D, c = e % (int)a.D;
        Qs[r * ldq + c] = r < nq ? la_cu_ld4(a.q, b, q0 + r, h, c) : 0.f;
    }
    if (tid < BQ) {
        lrow[tid] = 0.f;
        mrow[tid] = -INFINITY;
    }
    float acc[4][8] = {};
    int64_t kend = a.Nk;
    if (a.causal) kend = max((int64_t)0, min(a.Nk, q0 + nq - 1 + shift + 1));
    __syncthreads();

    for (int64_t j0 = 0; j0 < kend; j0 += BKV) {
        float s[4][4] = {};
        for (int64_t dc = 0; dc < a.D; dc += KC) {
            for (int e = tid; e < KC * BKV; e += NT) {
                int key = e / KC, c = e % KC; /* consecutive threads: consecutive d */
                int64_t j = j0 + key, d = dc + c;
                Ks[c * BKV + key] = (j < a.Nk && d < a.D) ? la_cu_ld4(a.k, b, j, kh, d) : 0.f;
            }
            __syncthreads();
            const int cn = (int)min((int64_t)KC, a.D - dc);
            for (int c = 0; c < cn; c++) {
                float qr[4], kr[4];
#pragma unroll
                for (int i = 0; i < 4; i++) qr[i] = Qs[(ty + 16 * i) * ldq + dc + c];
#pragma unroll
                for (int j = 0; j < 4; j++) kr[j] = Ks[c * BKV + tx + 16 * j];
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) s[i][j] = fmaf(qr[i], kr[j], s[i][j]);
            }
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int r = ty + 16 * i, c = tx + 16 * j;
                int64_t t = q0 + r, key = j0 + c;
                bool ok = key < a.Nk && (!a.causal || key <= t + shift);
                Ss[r * (BKV + 1) + c] = ok ? s[i][j] * a.scale : -INFINITY;
            }
        __syncthreads();
        if (tid < BQ) { /* online softmax statistics of row tid */
            float *row = Ss + tid * (BKV + 1);
            float mx = mrow[tid];
            for (int c = 0; c < BKV; c++) mx = fmaxf(mx, row[c]);
            const float m_use = mx == -INFINITY ? 0.f : mx;
            float sum = 0.f;
            for (int c = 0; c < BKV; c++) {
                float pv = __expf(row[c] - m_use);
                row[c] = pv;
                sum += pv;
            }
            const float al = mrow[tid] == -INFINITY ? 0.f : __expf(mrow[tid] - m_use);
            alpha[tid] = al;
            lrow[tid] = lrow[tid] * al + sum;
            mrow[tid] = mx;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float al = alpha[ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 8; j++) acc[i][j] *= al;
        }
        for (int half = 0; half < BKV / KC; half++) {
            for (int e = tid; e < KC * DVT; e += NT) {
                int r = e / DVT, c = e % DVT;
                int64_t j = j0 + half * KC + r, dv = v0 + c;
                Vs[r * DVT + c] = (j < a.Nk && dv < a.Dv) ? la_cu_ld4(a.v, b, j, kh, dv) : 0.f;
            }
            __syncthreads();
            for (int r = 0; r < KC; r++) {
                float pr[4], vr[8];
#pragma unroll
                for (int i = 0; i < 4; i++) pr[i] = Ss[(ty + 16 * i) * (BKV + 1) + half * KC + r];
#pragma unroll
                for (int j = 0; j < 8; j++) vr[j] = Vs[r * DVT + tx + 16 * j];
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 8; j++) acc[i][j] = fmaf(pr[i], vr[j], acc[i][j]);
            }
            __syncthreads();
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int r = ty + 16 * i;
        if (r >= nq) continue;
        const float l = lrow[r];
        const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int64_t dv = v0 + tx + 16 * j;
            if (dv < a.Dv)
                la_cu_st((void *)a.out.data, a.out.dt,
                         b * a.out.nb[0] + (q0 + r) * a.out.nb[1] + h * a.out.nb[2] + dv * a.out.nb[3],
                         acc[i][j] * inv);
        }
    }
    if (a.lse.data && blockIdx.z == 0 && tid < nq) {
        const float l = lrow[tid], m = mrow[tid];
        const float lse = l > 0.f ? (m == -INFINITY ? 0.f : m) + logf(l) : -INFINITY;
        la_cu_st((void *)a.lse.data, a.lse.dt,
                 b * a.lse.nb[0] + (q0 + tid) * a.lse.nb[1] + h * a.lse.nb[2], lse);
    }
}

enum sm_kernel { SM_TC, SM_PORTABLE };
const char *const sm_names[] = {"tc", "portable"};

/* The kernel for these views; `forced`: the context's variant (NULL: the
 * default). */
la_status sm_select(const la_tensor *q, const la_tensor *k, const la_tensor *v,
                    const la_tensor *out, const char *forced, sm_kernel *kern) {
    const bool tc = la_softmax_tc_applies(q, k, v, out);
    if (!forced) {
        *kern = tc ? SM_TC : SM_PORTABLE;
        return LA_OK;
    }
    const int i = la_cu_variant_index(forced, sm_names, 2);
    if (i < 0) return la_cu_unknown_variant("softmax", forced, "tc, portable");
    if (i == SM_TC && !tc)
        return la_cu_variant_unsupported("softmax", forced,
                                         "bf16 or f16, D = Dv in {32, 64, 128} or D/Dv 64/128, "
                                         "128/64, rows contiguous and 16-byte aligned");
    *kern = (sm_kernel)i;
    return LA_OK;
}

}  // namespace

/* 1 when la_softmax_attention_cuda would take the tensor-core kernel for
 * these views (for the tests; declared there). */
extern "C" int la_softmax_cuda_tc_path(const la_tensor *q, const la_tensor *k, const la_tensor *v,
                                       const la_tensor *out) {
    sm_kernel kern = SM_PORTABLE;
    return sm_select(q, k, v, out, nullptr, &kern) == LA_OK && kern == SM_TC;
}

extern "C" la_status la_softmax_attention_cuda(const la_softmax_params *p, const la_tensor *q,
                                               const la_tensor *k, const la_tensor *v,
                                               la_tensor *out, la_tensor *lse, la_context *ctx) {
    sm_args a;
    a.q = la_cu_view_of(q);
    a.k = la_cu_view_of(k);
    a.v = la_cu_view_of(v);
    a.out = la_cu_view_of(out);
    a.lse = la_cu_view_of(lse);
    a.B = q->ne[0];
    a.Nq = q->ne[1];
    a.H = q->ne[2];
    a.D = q->ne[3];
    a.Nk = k->ne[1];
    a.Hk = k->ne[2];
    a.Dv = v->ne[3];
    a.scale = p->scale != 0.f ? p->scale : 1.f / sqrtf((float)a.D);
    a.causal = p->causal != 0;
    sm_kernel kern;
    LA_TRY(sm_select(q, k, v, out, la_context_variant(ctx, "softmax"), &kern));
    la_cu_report(ctx, "softmax", sm_names[kern],
                 "B=%lld Nq=%lld Nk=%lld H=%lld Hk=%lld D=%lld Dv=%lld causal=%d%s", (long long)a.B,
                 (long long)a.Nq, (long long)a.Nk, (long long)a.H, (long long)a.Hk, (long long)a.D,
                 (long long)a.Dv, a.causal,
                 kern == SM_TC ? ""
                 : la_softmax_tc_dims(a.D, a.Dv)
                     ? "; not tensor cores: needs bf16/f16 views, rows contiguous, 16-byte aligned"
                     : "; not tensor cores: no tiling for these head dims");
    if (kern == SM_TC) return la_softmax_tc_launch(q, k, v, out, lse, a.scale, a.causal, la_cu_stream(ctx));
    if (a.D > MAX_D)
        return la_err(LA_ERR_UNSUPPORTED, "softmax CUDA: head dim D=%lld exceeds %d",
                      (long long)a.D, MAX_D);
    if (a.B * a.H > 65535)
        return la_err(LA_ERR_UNSUPPORTED, "softmax CUDA: B*H=%lld exceeds 65535",
                      (long long)(a.B * a.H));
    const size_t smem = sizeof(float) * ((size_t)BQ * (a.D + 1) + KC * BKV + BQ * (BKV + 1) +
                                         KC * DVT + 3 * BQ);
    cudaStream_t st = la_cu_stream(ctx);
    /* the limit for the largest D, so that one setting serves every call */
    const size_t smem_max = sizeof(float) * ((size_t)BQ * (MAX_D + 1) + KC * BKV +
                                             BQ * (BKV + 1) + KC * DVT + 3 * BQ);
    LA_TRY(la_cu_func_smem(ctx, (const void *)sm_fwd_kernel, smem, smem_max, false));
    dim3 grid((unsigned)la_cu_cdiv(a.Nq, BQ), (unsigned)(a.B * a.H),
              (unsigned)la_cu_cdiv(a.Dv, DVT));
    sm_fwd_kernel<<<grid, NT, smem, st>>>(a);
    LA_CU_LAUNCH("sm_fwd_kernel");
    return LA_OK;
}
