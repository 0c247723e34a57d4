/* The mix pass of the linear family's tensor-core path (linfam_tc.cu):
 * S̃_i = Σ_kk w(i, kk)·partial_kk over the summary partials [BH][K][L],
 * L = D·Dv + D, written as S̃ in bf16 [BH][M][D·Dv] (the precision the output
 * product uses; fp32 for fp16 inputs, ST = float: the output pass scales it
 * into fp16's range) and z̃ in fp32 [BH][M][D]. M = 1 (linear attention): a sum of
 * the segments on CUDA cores; M ≥ 2: a tf32 GEMM over expanded weights. Any
 * D, Dv of the tensor-core path (the layout only depends on L); the kernels
 * take FD = D = Dv as a compile-time constant for the default head dim 128
 * (the code they were validated and measured as), FD = 0 reads D and Dv
 * from the problem. */
#include "linfam_engine.cuh"
#include "ptx.cuh"

namespace {

/* D·Dv and D: constants for FD = D = Dv > 0, else the problem's */
template <int FD> __device__ __forceinline__ int64_t lf_mix_dd(const lf_problem &P) {
    return FD ? (int64_t)FD * FD : P.D * P.Dv;
}
template <int FD> __device__ __forceinline__ int64_t lf_mix_d(const lf_problem &P) {
    return FD ? (int64_t)FD : P.D;
}

/* S̃ stores: two values rounded to bf16, or kept in fp32 */
__device__ __forceinline__ void lf_st2(__nv_bfloat16 *p, float x0, float x1) {
    *(__nv_bfloat162 *)p = __floats2bfloat162_rn(x0, x1);
}
__device__ __forceinline__ void lf_st2(float *p, float x0, float x1) { *(float2 *)p = make_float2(x0, x1); }

/* grid (ceil(M/RI), ceil(L/4/NT), BH): S̃_i = Σ_kk w(i, kk) partial_kk over
 * the K = M·segs partials (w = W[i, kk/segs], or 1 without W); a thread owns
 * one float4 column group and RI rows. The row groups of one column slice
 * are neighbours in launch order, so they share its partials through L2. */
constexpr int MK = 32;
template <int RI, int U, int FD, typename ST>
__global__ void __launch_bounds__(NT, RI > 8 ? 1 : 2) lf_tc_mix_kernel(lf_args a, ST *Pb, float *Pz) {
    const lf_problem &P = a.P;
    const int64_t bh = blockIdx.z, h = bh % P.H;
    const int64_t i0 = (int64_t)blockIdx.x * RI;
    const int64_t L4 = a.L / 4, x4 = (int64_t)blockIdx.y * NT + threadIdx.x;
    __shared__ float ws[MK][RI];
    float4 acc[RI];
#pragma unroll
    for (int r = 0; r < RI; r++) acc[r] = make_float4(0.f, 0.f, 0.f, 0.f);
    const float4 *src = (const float4 *)(a.sum + (size_t)bh * a.K * a.L) + x4;
    for (int64_t k0 = 0; k0 < a.K; k0 += MK) {
        for (int e = threadIdx.x; e < MK * RI; e += NT) {
            const int kk = e / RI, r = e % RI;
            const int64_t i = i0 + r, k = k0 + kk;
            float w = 0.f;
            if (i < a.M && k < a.K) w = P.use_w ? lf_w(P.W, h, i, k / a.segs) : 1.f;
            ws[kk][r] = w;
        }
        __syncthreads();
        if (x4 < L4) {
            const int kn = (int)min((int64_t)MK, a.K - k0);
            int kk = 0;
            for (; kk + U <= kn; kk += U) { /* U loads in flight */
                float4 sv[U];
#pragma unroll
                for (int u = 0; u < U; u++) sv[u] = __ldg(src + (size_t)(k0 + kk + u) * L4);
#pragma unroll
                for (int u = 0; u < U; u++)
#pragma unroll
                    for (int r = 0; r < RI; r++) {
                        const float w = ws[kk + u][r];
                        acc[r].x = fmaf(w, sv[u].x, acc[r].x);
                        acc[r].y = fmaf(w, sv[u].y, acc[r].y);
                        acc[r].z = fmaf(w, sv[u].z, acc[r].z);
                        acc[r].w = fmaf(w, sv[u].w, acc[r].w);
                    }
            }
            for (; kk < kn; kk++) {
                const float4 sv = __ldg(src + (size_t)(k0 + kk) * L4);
#pragma unroll
                for (int r = 0; r < RI; r++) {
                    const float w = ws[kk][r];
                    acc[r].x = fmaf(w, sv.x, acc[r].x);
                    acc[r].y = fmaf(w, sv.y, acc[r].y);
                    acc[r].z = fmaf(w, sv.z, acc[r].z);
                    acc[r].w = fmaf(w, sv.w, acc[r].w);
                }
            }
        }
        __syncthreads();
    }
    if (x4 >= L4) return;
    const int64_t DD = lf_mix_dd<FD>(P);
#pragma unroll
    for (int r = 0; r < RI; r++) {
        const int64_t i = i0 + r;
        if (i >= a.M) break;
        if (x4 * 4 < DD) {
            if constexpr (sizeof(ST) == 4) {
                *(float4 *)(Pb + ((size_t)bh * a.M + i) * DD + x4 * 4) = acc[r];
            } else { /* the bf16 form as validated */
                uint2 u;
                *(__nv_bfloat162 *)&u.x = __floats2bfloat162_rn(acc[r].x, acc[r].y);
                *(__nv_bfloat162 *)&u.y = __floats2bfloat162_rn(acc[r].z, acc[r].w);
                *(uint2 *)(Pb + ((size_t)bh * a.M + i) * DD + x4 * 4) = u;
            }
        } else {
            *(float4 *)(Pz + ((size_t)bh * a.M + i) * lf_mix_d<FD>(P) + (x4 * 4 - DD)) = acc[r];
        }
    }
}

/* M ≥ 2: the mix as a tensor-core GEMM per head, C[M × L] =
 * Wx[M × K] · partials[K × L] with Wx(i, kk) = W[i, kk/segs] (1 without W),
 * in tf32 (m16n8k8, fp32 accumulation). A CUDA-core mix does 2·M·K·L FLOPs
 * (9 GFLOP at M = K = 150, N = 32K); on tensor cores the partials' read
 * (M·L·4 B per head) is the bound. tf32 keeps 10 mantissa bits of W and of the partials (rel.
 * 2^-11), below the bf16 rounding of S̃ (2^-9) that follows; z̃ (fp32 out)
 * gets rel. ~5e-4. grid (ceil(M/64), L/128, BH): the M-tiles of one column
 * slice run next to each other, so they share its partials through L2.
 * Warp w: rows 32(w%2) + [0,32), columns 32(w/2) + [0,32) of the CTA tile. */
/* GK = 32, GS = 4 (106 KB dynamic smem, 2 CTAs/SM): with GK = 16, GS = 3 the
 * ~10 chunks of a CTA at M = 150 ran latency-bound; now a CTA's whole K
 * range is in flight after the prologue. */
constexpr int GM = LF_GM, GN = 128, GK = LF_GK, GS = 4; /* tile rows, columns, k; stages */
constexpr int GLA = GK + 4;  /* W tile row stride (floats): a-fragment loads conflict-free */
constexpr int GLB = GN + 8;  /* partial tile row stride: b-fragment loads conflict-free    */
__device__ __forceinline__ uint32_t lf_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}
/* Wx [hw][Mp][Kp] fp32, zero past M and K (Mp, Kp multiples of GM, GK): the
 * expanded weights, one copy per head when W is per head, else one. */
__global__ void lf_wexp_kernel(lf_args a, float *Wx, int64_t Mp, int64_t Kp) {
    const lf_problem &P = a.P;
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, hw = blockIdx.y;
    if (e >= Mp * Kp) return;
    const int64_t i = e / Kp, k = e % Kp;
    float w = 0.f;
    if (i < a.M && k < a.K) w = P.use_w ? lf_w(P.W, hw, i, k / a.segs) : 1.f;
    Wx[hw * Mp * Kp + e] = w;
}
template <int FD, typename ST>
__global__ void __launch_bounds__(NT, 2) lf_mix_mma_kernel(lf_args a, ST *Pb, float *Pz,
                                                          const float *Wx, int64_t Mp, int64_t Kp,
                                                          int w_per_head) {
    extern __shared__ __align__(16) float lf_mix_sm[];
    float (*Ws)[GM * GLA] = (float (*)[GM * GLA])lf_mix_sm;             /* [GS][GM·GLA] */
    float (*Bs)[GK * GLB] = (float (*)[GK * GLB])(lf_mix_sm + GS * GM * GLA); /* [GS][GK·GLB] */
    const int64_t bh = blockIdx.z, h = bh % a.P.H;
    const int64_t i0 = (int64_t)blockIdx.x * GM, l0 = (int64_t)blockIdx.y * GN;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int wr = 32 * (warp % 2), wc = 32 * (warp / 2);
    const float *src = a.sum + (size_t)bh * a.K * a.L + l0;
    const float *wsrc = Wx + (w_per_head ? h : 0) * Mp * Kp + i0 * Kp;
    const int nk = (int)(Kp / GK);

    auto load = [&](int kc) { /* chunk kc into stage kc % GS; always one group */
        if (kc < nk) {
            const int st = kc % GS;
            const int64_t k0 = (int64_t)kc * GK;
            /* partials: GK rows × GN floats = GK·GN/4 chunks of 16 B */
#pragma unroll
            for (int u = 0; u < GK * GN / 4 / NT; u++) {
                const int e = tid + u * NT, r = e / (GN / 4), c = (e % (GN / 4)) * 4;
                const bool ok = k0 + r < a.K && l0 + c < a.L;
                la_cp16z(&Bs[st][r * GLB + c], ok ? src + (size_t)(k0 + r) * a.L + c : src, ok);
            }
            /* weights: GM rows × GK floats = GM·GK/4 chunks of 16 B */
#pragma unroll
            for (int u = 0; u < GM * GK / 4 / NT; u++) {
                const int e = tid + u * NT, r = e / (GK / 4), c = (e % (GK / 4)) * 4;
                la_cp16z(&Ws[st][r * GLA + c], wsrc + (size_t)r * Kp + k0 + c, true);
            }
        }
        la_cp_commit();
    };
    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;
#pragma unroll
    for (int kc = 0; kc < GS - 1; kc++) load(kc);
    for (int kc = 0; kc < nk; kc++) {
        la_cp_wait<GS - 2>(); /* this thread's copies of chunk kc have landed */
        __syncthreads();      /* everyone's have; chunk kc - 1 is consumed   */
        load(kc + GS - 1);    /* into the stage of chunk kc - 1              */
        const int buf = kc % GS;
        const float *A = Ws[buf], *B = Bs[buf];
#pragma unroll
        for (int k8 = 0; k8 < GK; k8 += 8) {
            uint32_t af[2][4], bf[4][2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const float *ap = A + (wr + 16 * i + g) * GLA + k8 + t;
                af[i][0] = lf_tf32(ap[0]);
                af[i][1] = lf_tf32(ap[8 * GLA]);
                af[i][2] = lf_tf32(ap[4]);
                af[i][3] = lf_tf32(ap[8 * GLA + 4]);
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float *bp = B + (k8 + t) * GLB + wc + 8 * j + g;
                bf[j][0] = lf_tf32(bp[0]);
                bf[j][1] = lf_tf32(bp[4 * GLB]);
            }
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                                 : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]),
                                   "+f"(acc[i][j][3])
                                 : "r"(af[i][0]), "r"(af[i][1]), "r"(af[i][2]), "r"(af[i][3]),
                                   "r"(bf[j][0]), "r"(bf[j][1]));
        }
    }
    la_cp_wait<0>();
    /* c0,c1: row g, columns 2t, 2t+1; c2,c3: row g + 8 */
    const int64_t DD = lf_mix_dd<FD>(a.P);
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int64_t row = i0 + wr + 16 * i + g + 8 * hr;
            if (row >= a.M) continue;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int64_t col = l0 + wc + 8 * j + 2 * t;
                const float x0 = acc[i][j][2 * hr], x1 = acc[i][j][2 * hr + 1];
                if (col < DD) /* D·Dv is even: a column pair never straddles */
                    lf_st2(Pb + ((size_t)bh * a.M + row) * DD + col, x0, x1);
                else if (col < a.L)
                    *(float2 *)(Pz + ((size_t)bh * a.M + row) * lf_mix_d<FD>(a.P) + (col - DD)) =
                        make_float2(x0, x1);
            }
        }
}

/* The launches for FD (see the top of the file). */
template <int FD, typename ST>
la_status lf_tc_mix_fd(const lf_args &a, ST *Pb, float *Pz, float *Wx, int64_t Mp,
                       int64_t Kp, int64_t hw, cudaStream_t st) {
    const int64_t BH = a.P.B * a.P.H;
    if (a.M >= 2) { /* tensor-core GEMM (tf32) over the expanded weights */
        lf_wexp_kernel<<<dim3((unsigned)la_cu_cdiv(Mp * Kp, NT), (unsigned)hw), NT, 0, st>>>(a, Wx, Mp, Kp);
        LA_CU_LAUNCH("lf_wexp_kernel");
        constexpr size_t smem = sizeof(float) * GS * (GM * GLA + GK * GLB);
        LA_CU(cudaFuncSetAttribute(lf_mix_mma_kernel<FD, ST>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem));
        lf_mix_mma_kernel<FD, ST><<<dim3((unsigned)(Mp / GM), (unsigned)la_cu_cdiv(a.L, GN), (unsigned)BH), NT,
                                smem, st>>>(a, Pb, Pz, Wx, Mp, Kp, hw > 1);
    } else { /* M = 1, linear attention: a sum of the segments */
        const unsigned xs = (unsigned)la_cu_cdiv(a.L / 4, NT);
        lf_tc_mix_kernel<1, 8, FD, ST><<<dim3(1, xs, (unsigned)BH), NT, 0, st>>>(a, Pb, Pz);
    }
    LA_CU_LAUNCH("lf_tc_mix_kernel");
    return LA_OK;
}

}  // namespace

la_status lf_tc_mix(const lf_args &a, void *Pb, bool pb_f32, float *Pz, float *Wx, int64_t Mp,
                    int64_t Kp, int64_t hw, cudaStream_t st) {
    if (pb_f32) {
        if (a.P.D == 128 && a.P.Dv == 128) return lf_tc_mix_fd<128>(a, (float *)Pb, Pz, Wx, Mp, Kp, hw, st);
        return lf_tc_mix_fd<0>(a, (float *)Pb, Pz, Wx, Mp, Kp, hw, st);
    }
    __nv_bfloat16 *Pb16 = (__nv_bfloat16 *)Pb;
    if (a.P.D == 128 && a.P.Dv == 128) return lf_tc_mix_fd<128>(a, Pb16, Pz, Wx, Mp, Kp, hw, st);
    return lf_tc_mix_fd<0>(a, Pb16, Pz, Wx, Mp, Kp, hw, st);
}
