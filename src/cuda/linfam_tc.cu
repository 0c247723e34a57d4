/* The bf16 tensor-core path of the linear-family engine: non-causal, D = Dv
 * = 128, bf16 rows contiguous (linear attention, MHLA, focused flatten on
 * materialized φ). The passes of linfam.cuh with the two products on tensor
 * cores (ldmatrix + mma.sync bf16, fp32 accumulation): φ(K)ᵀV per segment
 * and φ(Q)·S̃ per token tile; the mix of M ≥ 2 blocks a tf32 GEMM over
 * expanded weights. φ is applied in fp32 at load time and rounded to bf16
 * for the product (the inputs are bf16 already); summaries, mixing and
 * denominators stay fp32. */
#include "linfam_engine.cuh"
#include "ptx.cuh"

#include <algorithm>

namespace {

__device__ __forceinline__ uint4 lf_pack8(const float f[8]) {
    uint4 u;
    __nv_bfloat162 *h2 = (__nv_bfloat162 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) h2[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return u;
}

constexpr int FD = 128;       /* D = Dv                         */
constexpr int FT = 64;        /* tokens per tile                */
constexpr int FLD = FD + 8;   /* bf16 smem row stride (16 B pad) */

/* ==== pipelined passes ======================================================
 *   summary: K and V tiles land in shared memory by cp.async, TS stages deep
 *            (two tiles in flight while the tensor cores work on the third);
 *            each thread applies φ to the K chunks it copied itself (rows
 *            past the segment end become 0), z = φ(K)ᵀ·1 is one more MMA;
 *   mix:     float4 rows of the partials, 4 loads in flight per thread, the
 *            weights of 32 summaries at a time in shared memory; writes S̃ in
 *            bf16 (the precision the output product uses) and z̃ in fp32;
 *            M ≥ 2: a tf32 GEMM over expanded weights instead;
 *   output:  S̃ (bf16) and the Q tiles by cp.async, TS stages; each warp
 *            computes its own rows' denominators (2 lanes per row, the lanes
 *            that later write that row) and writes O from a 1 KB per-warp
 *            staging tile with 16-byte stores.
 * (Loading each tile through registers and waiting for it before the product
 * was latency-bound; WMMA fragments compiled to plain LDS, ~5x
 * more instructions per MMA: both removed, docs/CUDA.md.) */
constexpr int TS = 3; /* pipeline stages */

/* Raw tensor-core fragments: ldmatrix from the padded rows (FLD = 136
 * bf16 = 68 words: the 8 row addresses of one 8×8 matrix fall on 8 distinct
 * 4-bank groups, no conflicts) and mma.sync m16n8k16. Helpers: ptx.cuh. */

/* Sum over 16 neighbouring lanes: the threads that share one row of a
 * 64-token tile in the output kernels (chunk tid % 16 of row tid / 16). */
__device__ __forceinline__ float lf_sum16(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 8);
    x += __shfl_xor_sync(0xffffffffu, x, 4);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x;
}

/* released_vision: this thread's part (blocks b ≡ tid mod 16) of
 * Σ_b W[blk, b]·(q̃ at in-box position wpos of block b)·z_b; 0 past the box. */
__device__ __forceinline__ float lf_rv_part(const lf_args &a, int64_t bh, int64_t h, int64_t blk,
                                            int64_t wpos, int64_t wend, int tid) {
    float sacc = 0.f;
    if (wpos < wend) {
        const float *rr = a.r + (size_t)bh * a.M * a.maxcnt + wpos;
        for (int64_t bb = tid & 15; bb < a.M; bb += 16)
            sacc = fmaf(lf_w(a.P.W, h, blk, bb), rr[bb * a.maxcnt], sacc);
    }
    return sacc;
}

/* Token of in-box position w, with 32-bit divisions (positions < 2^31). */
struct lf_boxi {
    int64_t base;    /* token of position 0        */
    int64_t s0, s1;  /* token strides of axes 0, 1 */
    unsigned c1, c2; /* box extents of axes 1, 2   */
    bool flat;       /* one row: consecutive tokens */
};
__device__ __forceinline__ lf_boxi lf_boxi_of(const lf_geom &G, const int64_t lo[3],
                                              const int64_t cnt[3]) {
    lf_boxi x;
    x.s1 = G.n[2];
    x.s0 = G.n[1] * G.n[2];
    x.base = lo[0] * x.s0 + lo[1] * x.s1 + lo[2];
    x.c1 = (unsigned)cnt[1];
    x.c2 = (unsigned)cnt[2];
    x.flat = cnt[0] * cnt[1] == 1;
    return x;
}
__device__ __forceinline__ int64_t lf_tok(const lf_boxi &x, unsigned w) {
    if (x.flat) return x.base + w;
    const unsigned i2 = w % x.c2, r = w / x.c2, i1 = r % x.c1, i0 = r / x.c1;
    return x.base + i0 * x.s0 + i1 * x.s1 + i2;
}

/* The five feature maps of SPEC §2 in one branch-light form (x = pre·input):
 *   x ≥ 0: x + c;   x < 0: x (identity), c (relu, relu_eps, relu1), e^x (elu1)
 * with c = 0, 0, 1e-6, 1, 1. la_cu_feature's switch per element compiled to
 * ~10 instructions and a branch per value, most of the summary kernel's
 * issued instructions. The mode is uniform, so one branch per 8 values
 * remains. */
struct lf_phimap {
    int mode; /* 0 identity, 1 relu family, 2 elu1 */
    float c, pre, post;
};
__device__ __forceinline__ lf_phimap lf_phi_of(const lf_feat &f) {
    lf_phimap r;
    r.pre = f.pre;
    r.post = f.post;
    switch (f.kind) {
    case LA_FEATURE_RELU: r.mode = 1; r.c = 0.f; break;
    case LA_FEATURE_RELU_EPS: r.mode = 1; r.c = 1e-6f; break;
    case LA_FEATURE_RELU1: r.mode = 1; r.c = 1.f; break;
    case LA_FEATURE_ELU1: r.mode = 2; r.c = 1.f; break;
    default: r.mode = 0; r.c = 0.f; break;
    }
    return r;
}
__device__ __forceinline__ void lf_phi8(float *x, const lf_phimap &f) {
    if (f.mode == 1) {
#pragma unroll
        for (int i = 0; i < 8; i++) x[i] = (la_relu_nan(x[i] * f.pre) + f.c) * f.post;
    } else if (f.mode == 2) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float y = x[i] * f.pre;
            x[i] = (y >= 0.f ? y + 1.f : expf(y)) * f.post;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) x[i] = x[i] * f.pre * f.post;
    }
}
/* The relu family with pre = post = 1 (the default feature map) directly on
 * bf16 pairs: max(x, 0) is exact in bf16, and adding c to a bf16 value is one
 * correctly rounded addition either way; 1 instruction per 2 values instead
 * of ~6 per value through fp32. */
__device__ __forceinline__ bool lf_phi_bf16_ok(const lf_phimap &f) {
    return f.mode == 1 && f.pre == 1.f && f.post == 1.f;
}
__device__ __forceinline__ void lf_phi8_bf16(__nv_bfloat16 *p, const lf_phimap &f) {
    uint4 u = *(const uint4 *)p;
    __nv_bfloat162 *h2 = (__nv_bfloat162 *)&u;
    const __nv_bfloat162 z2 = __float2bfloat162_rn(0.f), c2 = __float2bfloat162_rn(f.c);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        h2[i] = __hmax2_nan(h2[i], z2); /* NaN propagates (torch.relu) */
        if (f.c != 0.f) h2[i] = __hadd2(h2[i], c2);
    }
    *(uint4 *)p = u;
}
/* φ applied in place to 8 bf16 values (fp32 math, rounded back to bf16). */
__device__ __forceinline__ void lf_phi8_inplace(__nv_bfloat16 *p, const lf_phimap &f) {
    uint4 u = *(const uint4 *)p;
    const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&u;
    float x[8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 ff = __bfloat1622float2(h2[i]);
        x[2 * i] = ff.x;
        x[2 * i + 1] = ff.y;
    }
    lf_phi8(x, f);
    *(uint4 *)p = lf_pack8(x);
}

constexpr int LF_TC_STAGE = 2 * FT * FLD; /* bf16 elements of one summary stage (K, V) */
constexpr size_t LF_TC_SUM_SMEM = sizeof(__nv_bfloat16) * TS * LF_TC_STAGE;
constexpr size_t LF_TC_OUT_SMEM =
    sizeof(__nv_bfloat16) * (FD * FLD + TS * FT * FLD) + sizeof(float) * (8 * 320 + TS * FT) +
  sizeof(__nv_bfloat16) * FD * 8; /* Zs: z̃ as a B tile (RAW, per_query) */

/* grid (K, BH), 256 threads, 2 CTAs per SM: warp w owns rows d ∈ 32(w%4) + [0, 32)
 * and columns 64(w/4) + [0, 64) of the segment's S (2×4 fragments: 6 fragment
 * loads per 8 MMAs) and rows 32(w%4) + 16(w/4) + [0, 16) of z (one fragment,
 * every column = z). A thread copies chunk (tid % 16) of rows tid/16 + 16u,
 * u < 4, of each tile. */
__global__ void __launch_bounds__(NT, 2) lf_tc_summary_kernel(lf_args a) {
    const lf_problem &P = a.P;
    extern __shared__ __align__(128) unsigned char lf_tc_sm[];
    __nv_bfloat16 *sm = (__nv_bfloat16 *)lf_tc_sm;
    const int64_t bh = blockIdx.y, b = bh / P.H, h = bh % P.H;
    const int64_t kseg = blockIdx.x, blk = kseg / a.segs, s = kseg % a.segs;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    int64_t lo[3], cnt[3];
    lf_box(a.G, blk, lo, cnt);
    const lf_boxi bx = lf_boxi_of(a.G, lo, cnt);
    const int64_t total = cnt[0] * cnt[1] * cnt[2];
    const int64_t w0 = min(total, s * a.seg), w1 = min(total, w0 + a.seg);
    const int nt = (int)((w1 - w0 + FT - 1) / FT);
    const int c8 = (tid % 16) * 8, r0 = tid / 16;
    const __nv_bfloat16 *kb = (const __nv_bfloat16 *)P.k.data + b * P.k.nb[0] + h * P.k.nb[2] + c8;
    const __nv_bfloat16 *vb = (const __nv_bfloat16 *)P.v.data + b * P.v.nb[0] + h * P.v.nb[2] + c8;

    auto issue = [&](int t) { /* tile t into stage t % TS; always one group */
        if (t < nt) {
            __nv_bfloat16 *Ks = sm + (t % TS) * LF_TC_STAGE, *Vs = Ks + FT * FLD;
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int r = r0 + 16 * u;
                const int64_t w = w0 + (int64_t)t * FT + r;
                const bool ok = w < w1;
                const int64_t tk = ok ? lf_tok(bx, (unsigned)w) : 0;
                la_cp16z(&Ks[r * FLD + c8], kb + tk * P.k.nb[1], ok);
                la_cp16z(&Vs[r * FLD + c8], vb + tk * P.v.nb[1], ok);
            }
        }
        la_cp_commit();
    };
#pragma unroll
    for (int t = 0; t < TS - 1; t++) issue(t);

    const int rb = 32 * (warp % 4), cb = 64 * (warp / 4), zhalf = warp / 4;
    float racc[2][8][4], raccz[4]; /* rows rb + 16i + {g, g+8}, columns cb + 8j + 2t + {0,1} */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) racc[i][j][e] = 0.f;
#pragma unroll
    for (int e = 0; e < 4; e++) raccz[e] = 0.f;

    /* ldmatrix: lane l gives the address of row l % 8 of matrix l / 8 */
    const int lr = lane % 8, lm = lane / 8;
    const uint32_t ONES2 = 0x3f803f80u; /* two bf16 1.0: the B operand of z = φ(K)ᵀ·1 */
    const bool phi_id = P.fk.kind == LA_FEATURE_IDENTITY && P.fk.pre == 1.f && P.fk.post == 1.f;
    const lf_phimap phk = lf_phi_of(P.fk);
    /* `true &&`: the form the validated kernel was compiled from (a plain
     * call gives the same logic in another block layout) */
    const bool phk_bf16 = true && lf_phi_bf16_ok(phk);

    for (int t = 0; t < nt; t++) {
        la_cp_wait<TS - 2>(); /* this thread's copies of tile t have landed */
        __nv_bfloat16 *Ks = sm + (t % TS) * LF_TC_STAGE, *Vs = Ks + FT * FLD;
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int r = r0 + 16 * u;
            __nv_bfloat16 *p = &Ks[r * FLD + c8];
            if (w0 + (int64_t)t * FT + r >= w1) *(uint4 *)p = make_uint4(0, 0, 0, 0);
            else if (phk_bf16) lf_phi8_bf16(p, phk);
            else if (!phi_id) lf_phi8_inplace(p, phk);
        }
        __syncthreads(); /* tile t complete; every warp is done with tile t-1 */
        issue(t + TS - 1); /* into the stage of tile t-1 */
#pragma unroll
        for (int kk = 0; kk < FT; kk += 16) {
            /* A = φ(K)ᵀ (m = d, k = token) from [token][d] rows: .trans; matrices
             * (m+0,k+0) (m+8,k+0) (m+0,k+8) (m+8,k+8) = a0..a3 */
            uint32_t af[2][4];
#pragma unroll
            for (int i = 0; i < 2; i++)
                la_ldsm4t(af[i], &Ks[(kk + lr + 8 * (lm >> 1)) * FLD + rb + 16 * i + 8 * (lm & 1)]);
            if (zhalf == 0) la_mma_bf16(raccz, af[0], ONES2, ONES2);
            else la_mma_bf16(raccz, af[1], ONES2, ONES2);
#pragma unroll
            for (int jp = 0; jp < 4; jp++) {
                /* B = V (k = token, n = dv), [token][dv] rows: .trans; matrices
                 * (k+0,n+0) (k+8,n+0) (k+0,n+8) (k+8,n+8) = b0,b1 of n-tiles 2jp, 2jp+1 */
                uint32_t bf[4];
                la_ldsm4t(bf, &Vs[(kk + lr + 8 * (lm & 1)) * FLD + cb + 16 * jp + 8 * (lm >> 1)]);
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    la_mma_bf16(racc[i][2 * jp], af[i], bf[0], bf[1]);
                    la_mma_bf16(racc[i][2 * jp + 1], af[i], bf[2], bf[3]);
                }
            }
        }
    
    }
    float *dst = a.sum + ((size_t)bh * a.K + kseg) * a.L;
    const int g = lane / 4, t2 = 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float *d0 = dst + (rb + 16 * i + g) * FD + cb + 8 * j + t2;
            *(float2 *)d0 = make_float2(racc[i][j][0], racc[i][j][1]);
            *(float2 *)(d0 + 8 * FD) = make_float2(racc[i][j][2], racc[i][j][3]);
        }
    /* every column of the z product holds z: column 0 (t = 0) is written */
    if (lane % 4 == 0) {
        dst[FD * FD + rb + 16 * zhalf + g] = raccz[0];
        dst[FD * FD + rb + 16 * zhalf + g + 8] = raccz[2];
    }
    la_cp_wait<0>();
}

/* grid (ceil(M/RI), ceil(L/4/NT), BH): S̃_i = Σ_kk w(i, kk) partial_kk over
 * the K = M·segs partials (w = W[i, kk/segs], or 1 without W); a thread owns
 * one float4 column group and RI rows. The row groups of one column slice
 * are neighbours in launch order, so they share its partials through L2. */
constexpr int MK = 32;
template <int RI, int U>
__global__ void __launch_bounds__(NT, RI > 8 ? 1 : 2) lf_tc_mix_kernel(lf_args a, __nv_bfloat16 *Pb, float *Pz) {
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
    const int64_t DD = (int64_t)FD * FD;
#pragma unroll
    for (int r = 0; r < RI; r++) {
        const int64_t i = i0 + r;
        if (i >= a.M) break;
        if (x4 * 4 < DD) {
            uint2 u;
            *(__nv_bfloat162 *)&u.x = __floats2bfloat162_rn(acc[r].x, acc[r].y);
            *(__nv_bfloat162 *)&u.y = __floats2bfloat162_rn(acc[r].z, acc[r].w);
            *(uint2 *)(Pb + ((size_t)bh * a.M + i) * DD + x4 * 4) = u;
        } else {
            *(float4 *)(Pz + ((size_t)bh * a.M + i) * FD + (x4 * 4 - DD)) = acc[r];
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
constexpr int GM = 64, GN = 128, GK = 32, GS = 4; /* tile rows, columns, k; stages */
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
__global__ void __launch_bounds__(NT, 2) lf_mix_mma_kernel(lf_args a, __nv_bfloat16 *Pb, float *Pz,
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
    const int64_t DD = (int64_t)FD * FD;
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
                if (col < DD) /* D·Dv is a multiple of 128: a column pair never straddles */
                    *(__nv_bfloat162 *)(Pb + ((size_t)bh * a.M + row) * DD + col) =
                        __floats2bfloat162_rn(x0, x1);
                else if (col < a.L)
                    *(float2 *)(Pz + ((size_t)bh * a.M + row) * FD + (col - DD)) = make_float2(x0, x1);
            }
        }
}

/* grid (M·groups, BH), 256 threads, 2 CTAs per SM: a CTA copies its block's S̃
 * (bf16) once, then runs up to `tpc` tiles of 64 tokens through TS stages.
 * A thread copies chunk (tid % 16) of rows tid/16 + 16u of each Q tile, applies
 * φ to it in place and forms its part of the row's φ(q)·z̃ (z̃ of its 8
 * columns stays in registers; the 16 threads of a row are 16 neighbouring
 * lanes, a 4-step shuffle sums them). Warp w: rows 32(w%2).., columns
 * 32(w/2)..: 4 fragment loads per 4 MMAs; lane l finishes row l/2, columns
 * 8(l%2).. of each 16×16 fragment through a per-warp staging tile. */
__global__ void __launch_bounds__(NT, 2) lf_tc_output_kernel(lf_args a, const __nv_bfloat16 *Pb,
                                                             const float *Pz, int64_t groups,
                                                             int64_t tpc) {
    const lf_problem &P = a.P;
    extern __shared__ __align__(128) unsigned char lf_tc_sm[];
    __nv_bfloat16 *Ss = (__nv_bfloat16 *)lf_tc_sm;   /* [FD][FLD]      */
    __nv_bfloat16 *Qst = Ss + FD * FLD;                /* TS × [FT][FLD] */
    float *wbufs = (float *)(Qst + TS * FT * FLD);     /* 8 × [16][16] fp32 (RAW: [16][SLD] bf16) */
    float *dens = wbufs + 8 * 320;                     /* TS × [FT]      */
    __nv_bfloat16 *Zs = (__nv_bfloat16 *)(dens + TS * FT); /* [FD][8]: hi(z̃), lo(z̃), 0… */

    const int64_t bh = blockIdx.y, b = bh / P.H, h = bh % P.H;
    const int64_t blk = blockIdx.x / groups, g = blockIdx.x % groups;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    int64_t lo[3], cnt[3];
    lf_box(a.G, blk, lo, cnt);
    const lf_boxi bx = lf_boxi_of(a.G, lo, cnt);
    const int64_t total = cnt[0] * cnt[1] * cnt[2];
    const int64_t wbeg = g * tpc * FT;
    if (wbeg >= total) return; /* whole CTA */
    const int64_t wend = min(total, wbeg + tpc * FT);
    const int nt = (int)((wend - wbeg + FT - 1) / FT);
    const int c8 = (tid % 16) * 8, r0 = tid / 16;
    const __nv_bfloat16 *qb = (const __nv_bfloat16 *)P.q.data + b * P.q.nb[0] + h * P.q.nb[2] + c8;

    {   /* S̃ joins the first copy group */
        const __nv_bfloat16 *src = Pb + ((size_t)bh * a.M + blk) * FD * FD;
#pragma unroll
        for (int u = 0; u < FD * FD / 8 / NT; u++) {
            const int e = tid + u * NT, r = e / 16, c = (e % 16) * 8;
            la_cp16z(&Ss[r * FLD + c], src + r * FD + c, true);
        }
    }
    auto issue = [&](int t) {
        if (t < nt) {
            __nv_bfloat16 *Qs = Qst + (t % TS) * FT * FLD;
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int r = r0 + 16 * u;
                const int64_t w = wbeg + (int64_t)t * FT + r;
                const bool ok = w < wend;
                const int64_t tk = ok ? lf_tok(bx, (unsigned)w) : 0;
                la_cp16z(&Qs[r * FLD + c8], qb + tk * P.q.nb[1], ok);
            }
        }
        la_cp_commit();
    };
#pragma unroll
    for (int t = 0; t < TS - 1; t++) issue(t);

    const bool phi_id = P.fq.kind == LA_FEATURE_IDENTITY && P.fq.pre == 1.f && P.fq.post == 1.f;
    const lf_phimap phq = lf_phi_of(P.fq);
    /* `true &&`: as in lf_tc_summary_kernel */
    const bool phq_bf16 = true && lf_phi_bf16_ok(phq);
    const bool per_query = P.norm == LF_NORM_PER_QUERY, rv = P.norm == LF_NORM_RELEASED_VISION;
    float zr[8]; /* z̃ of this thread's 8 columns */
    {
        const float4 *zp = (const float4 *)(Pz + ((size_t)bh * a.M + blk) * FD + c8);
        const float4 z0 = zp[0], z1 = zp[1];
        zr[0] = z0.x; zr[1] = z0.y; zr[2] = z0.z; zr[3] = z0.w;
        zr[4] = z1.x; zr[5] = z1.y; zr[6] = z1.z; zr[7] = z1.w;
    }
    /* RAW, per_query: the denominators come out of the tensor cores as one
     * more n-tile, φ(Q)·[hi(z̃) lo(z̃) 0 …] (z̃ split into two bf16 parts: rel.
     * 2^-16), with the same bf16 φ(Q) the numerator uses; written here, visible
     * after the first barrier of the loop. */
    const bool mma_den = true && per_query;
    if (mma_den && tid < FD) {
        const float zv = Pz[((size_t)bh * a.M + blk) * FD + tid];
        const __nv_bfloat16 hi = __float2bfloat16_rn(zv);
        const __nv_bfloat16 lo = __float2bfloat16_rn(zv - __bfloat162float(hi));
        uint4 row = make_uint4(0, 0, 0, 0);
        __nv_bfloat162 hl;
        hl.x = hi;
        hl.y = lo;
        row.x = *(const uint32_t *)&hl;
        *(uint4 *)&Zs[tid * 8] = row;
    }
    const int rw = 32 * (warp % 2), cw = 32 * (warp / 2), half = lane % 2;
    float *wbuf = wbufs + warp * 320;
    __nv_bfloat16 *out = (__nv_bfloat16 *)P.out.data + b * P.out.nb[0] + h * P.out.nb[2];

    for (int t = 0; t < nt; t++) {
        la_cp_wait<TS - 2>(); /* this thread's copies of tile t (and of S̃) have landed */
        __nv_bfloat16 *Qs = Qst + (t % TS) * FT * FLD;
        float *den = dens + (t % TS) * FT; /* output scale per row */
        const int64_t wt = wbeg + (int64_t)t * FT;
        if (phq_bf16) { /* implies RAW: per_query denominators come from the MMA */
#pragma unroll
            for (int u = 0; u < 4; u++) lf_phi8_bf16(&Qs[(r0 + 16 * u) * FLD + c8], phq);
        } else if ((per_query && !mma_den) || !phi_id) {
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int r = r0 + 16 * u;
                __nv_bfloat16 *p = &Qs[r * FLD + c8];
                uint4 uq = *(const uint4 *)p;
                const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&uq;
                float x[8];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float2 ff = __bfloat1622float2(h2[i]);
                    x[2 * i] = ff.x;
                    x[2 * i + 1] = ff.y;
                }
                if (!phi_id) {
                    lf_phi8(x, phq);
                    *(uint4 *)p = lf_pack8(x);
                }
                if (per_query && !mma_den) {
                    float d = 0.f;
#pragma unroll
                    for (int i = 0; i < 8; i++) d = fmaf(x[i], zr[i], d);
                    d = lf_sum16(d);
                    if ((tid & 15) == 0) den[r] = P.den_scale / (d * P.den_scale + P.eps);
                }
            }
        }
        if (rv) { /* Σ_b W[i,b] (q̃ at this position of block b)·z_b, 16 lanes per row */
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int r = r0 + 16 * u;
                const float sacc = lf_sum16(lf_rv_part(a, bh, h, blk, wt + r, wend, tid));
                if ((tid & 15) == 0) den[r] = 1.f / (sacc + P.eps);
            }
        }
        __syncthreads(); /* tile t, its scales (and S̃) complete; tile t-1 consumed */
        issue(t + TS - 1); /* into the stage of tile t-1 */

        /* warp tile: tokens rw + [0,32) × columns cw + [0,32); A = φ(Q) rows
         * (plain ldmatrix), B = S̃ [d][dv] rows (.trans) */
        const int lr = lane % 8, lm = lane / 8, g = lane / 4, t2 = 2 * (lane % 4);
        float acc[2][4][4], dacc[2][4];
#pragma unroll
        for (int i = 0; i < 2; i++) {
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;
#pragma unroll
            for (int e = 0; e < 4; e++) dacc[i][e] = 0.f;
        }
#pragma unroll
        for (int kk = 0; kk < FD; kk += 16) {
            uint32_t af[2][4], bf[2][4];
#pragma unroll
            for (int i = 0; i < 2; i++)
                la_ldsm4(af[i], &Qs[(rw + 16 * i + lr + 8 * (lm & 1)) * FLD + kk + 8 * (lm >> 1)]);
#pragma unroll
            for (int jp = 0; jp < 2; jp++)
                la_ldsm4t(bf[jp], &Ss[(kk + lr + 8 * (lm & 1)) * FLD + cw + 16 * jp + 8 * (lm >> 1)]);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int jp = 0; jp < 2; jp++) {
                    la_mma_bf16(acc[i][2 * jp], af[i], bf[jp][0], bf[jp][1]);
                    la_mma_bf16(acc[i][2 * jp + 1], af[i], bf[jp][2], bf[jp][3]);
                }
            if (mma_den) { /* rows kk + [0,16) of Zs: lanes 0-15 give the addresses */
                uint32_t zb[2];
                la_ldsm2t(zb, &Zs[(kk + (lane & 15)) * 8]);
#pragma unroll
                for (int i = 0; i < 2; i++) la_mma_bf16(dacc[i], af[i], zb[0], zb[1]);
            }
        }
        /* scale, round to bf16 into the warp's staging tile [16][SLD], then
         * 16-byte stores: lane → row lane/2, columns 16(lane%2) + [0,16) */
        constexpr int SLD = 40; /* 80-B rows: conflict-free bf16x2 writes, 16-B aligned reads */
        __nv_bfloat16 *stg = (__nv_bfloat16 *)wbuf;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int rr = rw + 16 * i;
            float d0, d1;
            if (mma_den) { /* columns 0, 1 of the den tile sit in lane 4g (t = 0) */
                const float s0 = __shfl_sync(0xffffffffu, dacc[i][0] + dacc[i][1], lane & ~3);
                const float s1 = __shfl_sync(0xffffffffu, dacc[i][2] + dacc[i][3], lane & ~3);
                d0 = P.den_scale / (s0 * P.den_scale + P.eps);
                d1 = P.den_scale / (s1 * P.den_scale + P.eps);
            } else {
                d0 = (per_query || rv) ? den[rr + g] : 1.f;
                d1 = (per_query || rv) ? den[rr + g + 8] : 1.f;
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                *(__nv_bfloat162 *)&stg[g * SLD + 8 * j + t2] =
                    __floats2bfloat162_rn(acc[i][j][0] * d0, acc[i][j][1] * d0);
                *(__nv_bfloat162 *)&stg[(g + 8) * SLD + 8 * j + t2] =
                    __floats2bfloat162_rn(acc[i][j][2] * d1, acc[i][j][3] * d1);
            }
            __syncwarp();
            const int row = rr + lane / 2;
            const int64_t wpos = wt + row;
            if (wpos < wend) {
                const int64_t tk = lf_tok(bx, (unsigned)wpos);
                __nv_bfloat16 *orow = out + tk * P.out.nb[1] + cw + half * 16;
                const uint4 *sp = (const uint4 *)&stg[(lane / 2) * SLD + half * 16];
                ((uint4 *)orow)[0] = sp[0];
                ((uint4 *)orow)[1] = sp[1];
            }
            __syncwarp();
        }
    
    }
}

}  // namespace

/* Host side: workspace = partials [BH][K][L] fp32, S̃ [BH][M][D·Dv] bf16,
 * z̃ [BH][M][D] fp32, released_vision r [BH][M][maxcnt] fp32, the expanded
 * weights of the mix GEMM (M ≥ 2). */
la_status lf_run_tc(lf_args &a, cudaStream_t st) {
    const lf_problem &P = a.P;
    const int64_t BH = P.B * P.H;
    int dev = 0, nsm = 132;
    LA_CU(cudaGetDevice(&dev));
    LA_CU(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
    const int64_t slots = 2 * (int64_t)nsm; /* 2 CTAs per SM */
    /* summary: about two waves of CTAs, segments of a multiple of 64 tokens, ≥ 256 */
    {
        const int64_t segs = std::max<int64_t>(1, la_cu_cdiv(2 * slots, a.M * BH));
        a.seg = std::max<int64_t>(256, la_cu_cdiv(la_cu_cdiv(a.maxcnt, segs), 64) * 64);
        a.segs = la_cu_cdiv(a.maxcnt, a.seg);
    }
    a.K = a.M * a.segs;
    a.L = P.D * P.Dv + P.D;
    const int64_t tpb = la_cu_cdiv(a.maxcnt, FT);
    const int64_t tpc = std::min<int64_t>(tpb, std::min<int64_t>(16, std::max<int64_t>(
                                                       2, la_cu_cdiv(tpb * a.M * BH, 2 * slots))));
    const int64_t groups = la_cu_cdiv(tpb, tpc);
    /* grid limits of every launch below, checked before allocating: y and z
     * extents ≤ 65535 (B·H; M for lf_rv_kernel), x ≤ 2^31-1 (partials, output
     * tiles, the expanded-weight fill of at most M·K entries padded) */
    if (BH > 65535 || a.K > INT32_MAX || a.M * groups > INT32_MAX ||
        (P.norm == LF_NORM_RELEASED_VISION && a.M > 65535) ||
        la_cu_cdiv(la_cu_cdiv(a.M, GM) * GM * (la_cu_cdiv(a.K, GK) * GK), NT) > INT32_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "CUDA linear family: grid too large (B*H = %lld, M = %lld)",
                      (long long)BH, (long long)a.M);
    size_t nsum, nP, nz, nr, bytes;
    LA_TRY(la_mul_size((size_t)BH, (size_t)a.K, &nsum, "CUDA summaries"));
    LA_TRY(la_mul_size(nsum, (size_t)a.L, &nsum, "CUDA summaries"));
    LA_TRY(la_mul_size((size_t)BH * a.M, (size_t)(P.D * P.Dv), &nP, "CUDA mixed summaries"));
    LA_TRY(la_mul_size((size_t)BH * a.M, (size_t)P.D, &nz, "CUDA mixed summaries"));
    nr = 0;
    if (P.norm == LF_NORM_RELEASED_VISION)
        LA_TRY(la_mul_size((size_t)BH * a.M, (size_t)a.maxcnt, &nr, "CUDA released_vision"));
    nr = (nr + 3) / 4 * 4;
    /* fp32 units; S̃ takes nP/2 of them (nP is even: D·Dv = 16384) */
    /* M >= 2: the mix runs as a GEMM over expanded weights Wx [hw][Mp][Kp] */
    const bool mix_mma = a.M >= 2;
    const int64_t Mp = la_cu_cdiv(a.M, GM) * GM, Kp = la_cu_cdiv(a.K, GK) * GK;
    const int64_t hw = (P.use_w && P.W.nb[0] != 0) ? P.H : 1;
    size_t nwx = 0;
    if (mix_mma) {
        LA_TRY(la_mul_size((size_t)hw * Mp, (size_t)Kp, &nwx, "CUDA expanded weights"));
        if (hw > 65535) return la_err(LA_ERR_UNSUPPORTED, "CUDA MHLA: H = %lld exceeds 65535", (long long)hw);
    }
    LA_TRY(la_mul_size(nsum + nP / 2 + nz + nr + nwx, sizeof(float), &bytes, "CUDA workspace"));
    la_cu_ws ws;
    LA_TRY(la_cu_ws_alloc(&ws, bytes, st, "linear-family summaries"));
    a.sum = (float *)ws.p;
    __nv_bfloat16 *Pb = (__nv_bfloat16 *)(a.sum + nsum);
    float *Pz = a.sum + nsum + nP / 2;
    a.mix = nullptr;
    a.r = nr ? Pz + nz : nullptr;
    float *Wx = Pz + nz + nr; /* nwx floats (mix_mma only); nr is rounded to 4: 16-B aligned */
    LA_CU(cudaFuncSetAttribute(lf_tc_summary_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)LF_TC_SUM_SMEM));
    lf_tc_summary_kernel<<<dim3((unsigned)a.K, (unsigned)BH), NT, LF_TC_SUM_SMEM, st>>>(a);
    LA_CU_LAUNCH("lf_tc_summary_kernel");
    const unsigned xs = (unsigned)la_cu_cdiv(a.L / 4, NT);
    if (mix_mma) { /* tensor-core GEMM (tf32) over the expanded weights */
        lf_wexp_kernel<<<dim3((unsigned)la_cu_cdiv(Mp * Kp, NT), (unsigned)hw), NT, 0, st>>>(a, Wx, Mp, Kp);
        LA_CU_LAUNCH("lf_wexp_kernel");
        constexpr size_t smem = sizeof(float) * GS * (GM * GLA + GK * GLB);
        LA_CU(cudaFuncSetAttribute(lf_mix_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        lf_mix_mma_kernel<<<dim3((unsigned)(Mp / GM), (unsigned)la_cu_cdiv(a.L, GN), (unsigned)BH), NT, smem,
                            st>>>(a, Pb, Pz, Wx, Mp, Kp, hw > 1);
    } else { /* M = 1, linear attention: a sum of the segments */
        lf_tc_mix_kernel<1, 8><<<dim3(1, xs, (unsigned)BH), NT, 0, st>>>(a, Pb, Pz);
    }
    LA_CU_LAUNCH("lf_tc_mix_kernel");
    if (nr) LA_TRY(lf_launch_rv(a, st));
    LA_CU(cudaFuncSetAttribute(lf_tc_output_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)LF_TC_OUT_SMEM));
    lf_tc_output_kernel<<<dim3((unsigned)(a.M * groups), (unsigned)BH), NT, LF_TC_OUT_SMEM, st>>>(
        a, Pb, Pz, groups, tpc);
    LA_CU_LAUNCH("lf_tc_output_kernel");
    return LA_OK;
}

