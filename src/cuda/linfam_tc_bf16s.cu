/* Variant tc_bf16s of the linear family's tensor-core path: non-causal MHLA
 * with bf16 block summaries (D = Dv in {64, 128}, 2 <= M <= 256 blocks, the
 * per_query and none normalize modes, shared or per-head W).
 *
 * The tf32 path (linfam_tc.cu + linfam_tc_mix.cu) writes fp32 partials
 * [BH][K][D·Dv + D] and mixes them with a tf32 GEMM over 64-row tiles: at the
 * Wan-2.1 shape (M = 150, H 12, D 128) the partials are 119 MB written and
 * read again, and the mix ran at 0.8 TB/s. Here:
 *   1. summary (lf_tc_summary_kernel<D, Dv, true>): S_kk in bf16 [BH][K][D·Dv]
 *      (the rows of the GEMM's B operand), z_kk in fp32 [BH][K][D];
 *   2. mix (lfb_mix_kernel): per head S̃ = Wx · S as one bf16 tensor-core GEMM
 *      (mma.sync m16n8k16, fp32 accumulation) with every row of W (160 per
 *      CTA) and all of K (≤ 256) in shared memory, so each summary byte is
 *      read once; z̃ = W · z in fp32 on CUDA cores by extra CTAs of the same
 *      launch (the denominators keep fp32 weights);
 *   3. output (lf_tc_output_kernel, unchanged) over S̃ (bf16) and z̃ (fp32).
 * The weights Wx(i, kk) = W[i, kk / segs] are expanded to bf16 [hw][Mp][Kp]
 * by lfb_wprep_kernel first. Precision: S_b, W and S̃ are each rounded to
 * bf16 once, the roundings of the same formula in plain PyTorch at bf16; z̃ and
 * the denominators stay fp32.
 * fp16 inputs take the same three passes in fp16, under powers of two (a sum
 * over a block's tokens can pass 65504): the summary pass scales each partial
 * S into [2^14, 2^15) (a.ssc: the inverse); lfb_wprep16_kernel, run after
 * it, folds those scales into the weights of each (b, h) and scales each row
 * so that the sum of its |weights| is below 1, which keeps every S̃ value
 * under 2^15 (a.rsc: the row's inverse scale); the output pass copies S̃ as it
 * is and undoes a.rsc in fp32, with z̃ under its own power of two. Each of S_b,
 * W·scale and S̃ is rounded to fp16 once (the plain fp16 formula's roundings). */
#include "cta_reduce.cuh"
#include "linfam_engine.cuh"
#include "ptx.cuh"
#include "tc16.cuh"

#include <algorithm>

namespace {

constexpr int XM = 160;     /* rows of S̃ per CTA: two warp rows of five m16 tiles */
constexpr int XN = 128;     /* columns per CTA: four warp columns of 32 (four n8 tiles) */
constexpr int XKMAX = 256;  /* K = blocks × segments held in shared memory at once */
static_assert(XKMAX <= NT, "lfb_wprep16_kernel: one thread per weight of a row");
constexpr int XZR = 16;     /* rows of z̃ per z CTA (two thread halves of 8 rows) */
constexpr int XNZ = XM / XZR; /* z CTAs per row tile */
constexpr int XLB = XN + 8; /* S tile row stride (bf16): ldmatrix conflict-free */

/* Wx [hw][Mp][Kp] bf16: Wx(i, kk) = W[i, kk / segs] of head hw; 0 past M, K. */
__global__ void lfb_wprep_kernel(lf_args a, __nv_bfloat16 *Wx, int64_t Mp, int64_t Kp) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, hw = blockIdx.y;
    if (e >= Mp * Kp) return;
    const int64_t i = e / Kp, k = e % Kp;
    float w = 0.f;
    if (i < a.M && k < a.K) w = lf_w(a.P.W, hw, i, k / a.segs);
    Wx[hw * Mp * Kp + e] = __float2bfloat16_rn(w);
}

/* fp16: Wx [BH][Mp][Kp] fp16, grid (Mp, BH), NT ≥ Kp threads (thread k,
 * one row i per CTA): t_k = W[i, k / segs]·ssc_k / max_k ssc_k (powers of two:
 * exact, or 0 past fp32's range, a partial 2^149 below the largest; 0 for an
 * all-zero partial, ssc_k = 0), so that |t_k| is block k's share of the row's
 * Σ_k |W|·max|S_k| within 2× (every stored partial's largest |value| is in
 * [2^14, 2^15)): the terms that matter keep normal fp16 weights; then
 * the row times F = 2^-e with Σ_k |t_k| = f·2^e, f in [0.5, 1): Σ_k |Wx| < 1,
 * so each S̃ value, a sum of Wx times fp16 values below 2^15, stays below
 * 2^15. rsc[bh][i] = max ssc / F undoes it. */
__global__ void lfb_wprep16_kernel(lf_args a, __half *Wx, int64_t Mp, int64_t Kp) {
    extern __shared__ __align__(128) unsigned char lfb_sm[];
    float *red = (float *)lfb_sm; /* NT / 32 floats, twice */
    const int64_t i = blockIdx.x, bh = blockIdx.y, h = bh % a.P.H;
    const int k = threadIdx.x;
    const float sk = k < a.K ? a.ssc[bh * a.K + k] : 0.f;
    const float smax = la_cta_max<NT / 32>(sk, red, k);
    float t = 0.f;
    /* smax = 0: every partial is zero (ssc 0), and so is S̃ (rsc 0) */
    if (i < a.M && k < a.K && smax > 0.f) t = lf_w(a.P.W, h, i, k / a.segs) * (sk / smax);
    const float n = la_cta_sum<NT / 32>(fabsf(t), red + NT / 32, k);
    int e = 0;
    if (n > 0.f && n <= 3.402823466e38f) e = ((__float_as_int(n) >> 23) & 0xff) - 126; /* n = f·2^e */
    e = e < -126 ? -126 : e > 126 ? 126 : e;
    if (k < Kp) Wx[(bh * Mp + i) * Kp + k] = __float2half_rn(t * la_pow2f(-e));
    if (k == 0 && i < a.M) a.rsc[bh * a.M + i] = smax * la_pow2f(e);
}

/* grid (nzc + D·Dv/XN, Mp/XM, BH), 256 threads, dynamic shared memory
 * lfb_smem(Kp) bytes (97 KB at Kp = 160: 2 CTAs per SM); nzc = XNZ (0: the
 * GEMM alone, for timing).
 * x < nzc: z̃ rows r0 = i0 + XZR·x + [0, XZR) in fp32: their weights in
 *   shared memory; thread (d = tid % D, part = tid / D) sums the k ≡ part
 *   (mod NT/D) for the XZR rows of column d, XZB loads in flight (the chain
 *   of dependent L2 round trips is K / (NT/D·XZB) long: one load at a time
 *   made these CTAs the mix kernel's critical path), then the parts meet in
 *   shared memory.
 * else: S̃ rows i0 + [0, XM), columns c0 = XN·(x - nzc) + [0, XN). The W tile
 *   [XM][Kp] and the S tile [Kp][XN] land by cp.async in two groups (k below
 *   and above kh; S rows past K zero-filled: 0·NaN would poison the sum).
 *   Warp w: rows 80(w / 4) + [0, 80) (the m16 tiles past M skipped), columns
 *   32(w % 4) + [0, 32); A = W rows (ldmatrix), B = S [k][n] rows (.trans). */
constexpr int XZB = 16;
/* T: bf16, or fp16 (Wx per (b, h): w_mode 2; 1: per head, 0: shared) */
template <typename T>
__global__ void __launch_bounds__(NT, 2) lfb_mix_kernel(lf_args a, const T *Wx, int64_t Mp,
                                                        int64_t Kp, int w_mode, int nzc,
                                                        T *Pb, float *Pz) {
    using X = la_t16<T>;
    extern __shared__ __align__(128) unsigned char lfb_sm[];
    const lf_problem &P = a.P;
    const int64_t bh = blockIdx.z, h = bh % P.H;
    const int64_t i0 = (int64_t)blockIdx.y * XM;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int64_t DD = P.D * P.Dv;
    if ((int)blockIdx.x < nzc) { /* z̃ = W · z, fp32 */
        const int D = (int)P.D, K = (int)a.K, parts = NT / D;
        float *ws = (float *)lfb_sm;  /* [XZR][K]         */
        float *red = ws + XZR * K;    /* [parts][XZR][D]  */
        const int64_t r0 = i0 + (int64_t)blockIdx.x * XZR;
        for (int e = tid; e < XZR * K; e += NT) {
            const int r = e / K, k = e % K;
            ws[e] = r0 + r < a.M ? lf_w(P.W, h, r0 + r, k / a.segs) : 0.f;
        }
        __syncthreads();
        const int d = tid % D, part = tid / D;
        float acc[XZR];
#pragma unroll
        for (int r = 0; r < XZR; r++) acc[r] = 0.f;
        const float *zp = a.mix + (size_t)bh * K * D + d;
        for (int k0 = part; k0 < K; k0 += parts * XZB) {
            float z[XZB];
#pragma unroll
            for (int j = 0; j < XZB; j++) {
                const int k = k0 + parts * j;
                z[j] = k < K ? zp[(size_t)k * D] : 0.f;
            }
#pragma unroll
            for (int j = 0; j < XZB; j++) {
                const int k = min(k0 + parts * j, K - 1); /* z[j] = 0 past K */
#pragma unroll
                for (int r = 0; r < XZR; r++) acc[r] = fmaf(ws[r * K + k], z[j], acc[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < XZR; r++) red[(part * XZR + r) * D + d] = acc[r];
        __syncthreads();
        for (int e = tid; e < XZR * D; e += NT) {
            const int r = e / D;
            float sum = 0.f;
            for (int p = 0; p < parts; p++) sum += red[p * XZR * D + e];
            if (r0 + r < a.M) Pz[((size_t)bh * a.M + r0 + r) * D + e % D] = sum;
        }
        return;
    }
    const int64_t c0 = (int64_t)(blockIdx.x - nzc) * XN;
    const int LA = (int)Kp + 8; /* W tile row stride (bf16): ≡ 4 words mod 8, conflict-free */
    T *As = (T *)lfb_sm;    /* [XM][LA]  */
    T *Bs = As + XM * LA;   /* [Kp][XLB] */
    const T *wsrc = Wx + ((w_mode == 2 ? bh : w_mode == 1 ? h : 0) * Mp + i0) * Kp;
    const T *ssrc = (const T *)a.sum + (size_t)bh * a.K * DD + c0;
    const int kp = (int)Kp, kh = 16 * ((kp / 16 + 1) / 2); /* the first copy group: k < kh */
    auto load = [&](int k0, int k1) { /* columns [k0, k1) of the W tile, rows [k0, k1) of S */
        const int ca = (k1 - k0) / 8;
        for (int e = tid; e < XM * ca; e += NT) {
            const int r = e / ca, c = k0 + 8 * (e % ca);
            la_cp16z(&As[r * LA + c], wsrc + (size_t)r * Kp + c, true);
        }
        for (int e = tid; e < (k1 - k0) * (XN / 8); e += NT) {
            const int r = k0 + e / (XN / 8), c = 8 * (e % (XN / 8));
            const bool ok = r < a.K;
            la_cp16z(&Bs[r * XLB + c], ok ? ssrc + (size_t)r * DD + c : ssrc, ok);
        }
        la_cp_commit();
    };
    load(0, kh);
    load(kh, kp);

    const int wr = 80 * (warp / 4), wc = 32 * (warp % 4);
    const int lr = lane % 8, lm = lane / 8, g = lane / 4, t2 = 2 * (lane % 4);
    int nmt = 0; /* m16 tiles of this warp with a row below M (warp-uniform) */
#pragma unroll
    for (int mt = 0; mt < 5; mt++)
        if (i0 + wr + 16 * mt < a.M) nmt = mt + 1;
    float acc[5][4][4];
#pragma unroll
    for (int mt = 0; mt < 5; mt++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][j][e] = 0.f;
    auto run = [&](int k0, int k1) {
        for (int kk = k0; kk < k1; kk += 16) {
            uint32_t bf[2][4];
#pragma unroll
            for (int jp = 0; jp < 2; jp++)
                la_ldsm4t(bf[jp], &Bs[(kk + lr + 8 * (lm & 1)) * XLB + wc + 16 * jp + 8 * (lm >> 1)]);
#pragma unroll
            for (int mt = 0; mt < 5; mt++)
                if (mt < nmt) {
                    uint32_t af[4];
                    la_ldsm4(af, &As[(wr + 16 * mt + lr + 8 * (lm & 1)) * LA + kk + 8 * (lm >> 1)]);
#pragma unroll
                    for (int jp = 0; jp < 2; jp++) {
                        X::mma(acc[mt][2 * jp], af, bf[jp][0], bf[jp][1]);
                        X::mma(acc[mt][2 * jp + 1], af, bf[jp][2], bf[jp][3]);
                    }
                }
        }
    };
    la_cp_wait<1>();
    __syncthreads(); /* the first half of both tiles has landed */
    run(0, kh);
    la_cp_wait<0>();
    __syncthreads();
    run(kh, kp);
    /* c0, c1: row g, columns 2t, 2t + 1; c2, c3: row g + 8 */
#pragma unroll
    for (int mt = 0; mt < 5; mt++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int64_t row = i0 + wr + 16 * mt + g + 8 * hr;
            if (row >= a.M) continue;
            T *dst = Pb + ((size_t)bh * a.M + row) * DD + c0 + wc + t2;
#pragma unroll
            for (int j = 0; j < 4; j++)
                *(typename X::T2 *)(dst + 8 * j) = X::pack2(acc[mt][j][2 * hr], acc[mt][j][2 * hr + 1]);
        }
}

/* Why tc_bf16s does not take P with M blocks (NULL: it does); the
 * tensor-core path's own conditions (lf_tc_why, linfam.cu) come first. */
const char *lfb_why(const lf_problem *P, int64_t M) {
    if (!P->use_w) return "one block (linear attention)";
    if (P->chunk != 0) return "causal";
    if (!(P->D == P->Dv && (P->D == 64 || P->D == 128))) return "head dims: D = Dv in {64, 128}";
    if (P->norm == LF_NORM_RELEASED_VISION) return "normalize=released_vision";
    if (M < 2 || M > XKMAX) return "blocks: 2 <= M <= 256";
    return nullptr;
}

/* The launch geometry (pure; the host emulator dev/emu_mhla_fwd.cpp runs it
 * too): segments of a block (about two waves of summary CTAs on nsm SMs, as
 * the tf32 path, at most XKMAX partials per head), K = M·segs padded to Kp,
 * rows padded to Mp, output tiles per CTA (tpc) and CTAs per block (groups). */
struct lfb_plan {
    int64_t seg, segs, K, Mp, Kp, tpc, groups, hw;
};
lfb_plan lfb_plan_of(const lf_args &a, int nsm, int ft, int fo) {
    const lf_problem &P = a.P;
    const int64_t BH = P.B * P.H, slots = 2 * (int64_t)nsm; /* 2 CTAs per SM */
    lfb_plan x;
    const int64_t want = std::max<int64_t>(1, la_cu_cdiv(2 * slots, a.M * BH));
    const int64_t segs = std::min<int64_t>(want, std::max<int64_t>(1, XKMAX / a.M));
    x.seg = std::max<int64_t>(256, la_cu_cdiv(la_cu_cdiv(a.maxcnt, segs), ft) * ft);
    x.segs = la_cu_cdiv(a.maxcnt, x.seg);
    x.K = a.M * x.segs;
    x.Mp = la_cu_cdiv(a.M, XM) * XM;
    x.Kp = la_cu_cdiv(x.K, 16) * 16;
    const int64_t tpb = la_cu_cdiv(a.maxcnt, fo);
    x.tpc = std::min<int64_t>(tpb, std::min<int64_t>(16, std::max<int64_t>(
                                        2, la_cu_cdiv(tpb * a.M * BH, 2 * slots))));
    x.groups = la_cu_cdiv(tpb, x.tpc);
    x.hw = P.W.nb[0] != 0 ? P.H : 1;
    return x;
}
/* a's segmentation from plan x (the launches read a.seg, segs, K, L) */
void lfb_apply_plan(lf_args &a, const lfb_plan &x) {
    a.seg = x.seg;
    a.segs = x.segs;
    a.K = x.K;
    a.L = a.P.D * a.P.Dv + a.P.D;
}
/* dynamic shared memory of lfb_mix_kernel: the GEMM's tiles, or the z CTAs'
 * weights and partial sums (at most 4·XZR·(256 + 256) bytes), the larger */
size_t lfb_smem(int64_t K, int64_t Kp) {
    const size_t gemm = sizeof(__nv_bfloat16) * (size_t)(XM * (Kp + 8) + Kp * XLB);
    const size_t z = sizeof(float) * (size_t)XZR * (size_t)(K + NT);
    return gemm > z ? gemm : z;
}

/* 16-byte aligned bytes of n elements of sz bytes (overflow-checked) */
la_status lfb_bytes(size_t n, size_t sz, size_t *out, const char *what) {
    LA_TRY(la_mul_size(n, sz, out, what));
    if (*out > SIZE_MAX - 15) return la_err(LA_ERR_NOMEM, "%s: size overflows", what);
    *out = (*out + 15) / 16 * 16;
    return LA_OK;
}

}  // namespace

const char *lf_tc_bf16s_why(const lf_problem *P, int64_t M) { return lfb_why(P, M); }

/* Workspace: S partials 16-bit [BH][K][D·Dv], z partials fp32 [BH][K][D],
 * S̃ 16-bit [BH][M][D·Dv], z̃ fp32 [BH][M][D], Wx 16-bit [hw][Mp][Kp] (fp16:
 * [BH][Mp][Kp], then the scales ssc [BH][K] and rsc [BH][M], fp32). */
la_status lf_run_tc_bf16s(lf_args &a, cudaStream_t st) {
    const lf_problem &P = a.P;
    if (lf_tc_bf16s_why(&P, a.M)) /* lf_select keeps this from happening */
        return la_err(LA_ERR_UNSUPPORTED, "CUDA MHLA tc_bf16s: %s", lf_tc_bf16s_why(&P, a.M));
    const bool f16 = P.q.dt == LA_F16;
    int ft, fo;
    lf_tc_tiles(P.D, P.Dv, &ft, &fo);
    const int64_t BH = P.B * P.H;
    int dev = 0, nsm = 132;
    LA_CU(cudaGetDevice(&dev));
    LA_CU(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
    const lfb_plan x = lfb_plan_of(a, nsm, ft, fo);
    lfb_apply_plan(a, x);
    const int64_t Mp = x.Mp, Kp = x.Kp, hw = f16 ? BH : x.hw, groups = x.groups, tpc = x.tpc;
    const int64_t DD = P.D * P.Dv;
    if (BH > 65535 || hw > 65535 || a.M * groups > INT32_MAX || a.K > INT32_MAX ||
        la_cu_cdiv(Mp * Kp, NT) > INT32_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "CUDA MHLA tc_bf16s: grid too large (B*H = %lld, M = %lld)",
                      (long long)BH, (long long)a.M);
    size_t nS, nZ, nPb, nPz, nW, nSs = 0, nRs = 0, tot;
    LA_TRY(la_mul_size((size_t)BH * a.K, (size_t)DD, &nS, "CUDA 16-bit summaries"));
    LA_TRY(lfb_bytes(nS, 2, &nS, "CUDA 16-bit summaries"));
    LA_TRY(lfb_bytes((size_t)BH * a.K * P.D, 4, &nZ, "CUDA summary z"));
    LA_TRY(la_mul_size((size_t)BH * a.M, (size_t)DD, &nPb, "CUDA mixed summaries"));
    LA_TRY(lfb_bytes(nPb, 2, &nPb, "CUDA mixed summaries"));
    LA_TRY(lfb_bytes((size_t)BH * a.M * P.D, 4, &nPz, "CUDA mixed z"));
    LA_TRY(la_mul_size((size_t)hw * Mp, (size_t)Kp, &nW, "CUDA expanded weights"));
    LA_TRY(lfb_bytes(nW, 2, &nW, "CUDA expanded weights"));
    if (f16) {
        LA_TRY(lfb_bytes((size_t)BH * a.K, 4, &nSs, "CUDA summary scales"));
        LA_TRY(lfb_bytes((size_t)BH * a.M, 4, &nRs, "CUDA mixed-row scales"));
    }
    tot = nS;
    const size_t parts[6] = {nZ, nPb, nPz, nW, nSs, nRs};
    for (size_t x : parts) {
        if (tot > SIZE_MAX - x) return la_err(LA_ERR_NOMEM, "CUDA MHLA tc_bf16s: workspace size overflows");
        tot += x;
    }
    la_cu_ws ws;
    LA_TRY(la_cu_ws_alloc(&ws, tot, st, "MHLA 16-bit summaries"));
    unsigned char *base = (unsigned char *)ws.p;
    a.sum = (float *)base;                        /* 16-bit S partials */
    a.mix = (float *)(base + nS);                 /* fp32 z partials */
    void *Pb = base + nS + nZ;
    float *Pz = (float *)(base + nS + nZ + nPb);
    void *Wx = base + nS + nZ + nPb + nPz;
    a.r = nullptr;
    const size_t smem = lfb_smem(a.K, Kp);
    const dim3 mix_grid((unsigned)(XNZ + DD / XN), (unsigned)(Mp / XM), (unsigned)BH);
    if (f16) {
        a.ssc = (float *)(base + nS + nZ + nPb + nPz + nW);
        a.rsc = (float *)(base + nS + nZ + nPb + nPz + nW + nSs);
        LA_TRY(lf_tc_summary_f16s(a, st));
        /* Kp <= XKMAX = NT: one thread per weight of a row */
        lfb_wprep16_kernel<<<dim3((unsigned)Mp, (unsigned)BH), NT, 2 * sizeof(float) * NT / 32, st>>>(
            a, (__half *)Wx, Mp, Kp);
        LA_CU_LAUNCH("lfb_wprep16_kernel");
        LA_CU(cudaFuncSetAttribute(lfb_mix_kernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        lfb_mix_kernel<__half><<<mix_grid, NT, smem, st>>>(a, (const __half *)Wx, Mp, Kp, 2, XNZ, (__half *)Pb, Pz);
        LA_CU_LAUNCH("lfb_mix_kernel");
        return lf_tc_output_f16s(a, (const __half *)Pb, Pz, groups, tpc, st);
    }
    lfb_wprep_kernel<<<dim3((unsigned)la_cu_cdiv(Mp * Kp, NT), (unsigned)hw), NT, 0, st>>>(
        a, (__nv_bfloat16 *)Wx, Mp, Kp);
    LA_CU_LAUNCH("lfb_wprep_kernel");
    LA_TRY(lf_tc_summary_bf16(a, st));
    LA_CU(cudaFuncSetAttribute(lfb_mix_kernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)smem));
    lfb_mix_kernel<__nv_bfloat16><<<mix_grid, NT, smem, st>>>(a, (const __nv_bfloat16 *)Wx, Mp, Kp, hw > 1 ? 1 : 0,
                                                            XNZ, (__nv_bfloat16 *)Pb, Pz);
    LA_CU_LAUNCH("lfb_mix_kernel");
    return lf_tc_output_run(a, (const __nv_bfloat16 *)Pb, Pz, groups, tpc, st);
}
