/* Causal MHLA forward on bf16 tensor cores (SPEC §5.4; family "mhla_causal",
 * variants "mma", "mma_split", "mma_bf16s" and "mma_f16s"): the causal linear passes of
 * linear_causal_tc.cu with one 64-token chunk per block and the prefix scan
 * replaced by the mixing (lct_mixing):
 *   1. S_b = K̃_bᵀ V_b, z_b = Σ k̃ per block (lct_state_mma_kernel, fp32);
 *   2. H_i = Σ_{b<i} W[i,b] S_b over the flattened [S | z] states (SE =
 *      D·Dv + D per block), one batched GEMM per head:
 *        mma:       mct_mix_kernel below, bf16 operands (W and S rounded
 *                   once), fp32 accumulation, the strict triangle only;
 *        mma_split: mcb_combine (mhla_causal_mix.cuh, the backward's
 *                   split-bf16 products: fp32 to about 16 bits, the full
 *                   square, three passes);
 *        mma_bf16s: mct_mix_bf16_kernel, the block states in bf16 all the
 *                   way (pass 1 writes bf16 S_b, the GEMM reads them and
 *                   writes bf16 H_i, pass 3 reads those): half the state
 *                   bytes, one more bf16 rounding (of H_i before pass 3's
 *                   own, of S_b and z_b after pass 1);
 *        mma_f16s:  the same bytes for fp16 inputs (sm_90): fp16 block states
 *                   each scaled by its own power of two, the scales folded
 *                   into W's rows, the wgmma GEMM in fp16
 *                   (mhla_causal_mix_f16s.cuh);
 *   3. per block: o = q̃ H_i + W[i,i]·tril(q̃ k̃ᵀ) v, den = q̃·z̃_i +
 *      W[i,i]·rowsum(tril(q̃ k̃ᵀ)) (lct_output_mma_kernel with lct_args.mixw).
 * Rounding: as the causal linear path (φ(q), φ(k), V, A and a bf16 copy of
 * H_i in the products, the rest fp32); "mma" adds one bf16 rounding of W
 * and S in the mixing, the size of the one of H_i in pass 3. Cost per head
 * (M blocks): 2·N·D·Dv (pass 1), 2·(M²/2)·SE (the mixing, M² with
 * mma_split ×3), 4·N·D·Dv + 2·N·64·D (pass 3); bytes: q, k, v, out and the
 * fp32 states (4·M·SE) written by pass 1, read and written by the mixing,
 * read by pass 3 (docs/PERF.md).
 *
 * fp16 inputs (while mct_f16_tc): passes 1 and 3 in their fp16
 * instantiations (linear_causal_tc.cu: S̃ and A scaled by powers of two in
 * pass 3) and, on sm_90 by default (mct_f16s_default), "mma_f16s": fp16
 * block states with a scale per block, which the GEMM's B operand cannot
 * take but its A operand can (A'_ib = W_ib 2^(ρ_i - σ_b): a column scale of
 * W, the row's own exponent ρ_i, an output exponent from a bound on H_i;
 * mhla_causal_mix_f16s.cuh); elsewhere the "mma" structure with fp32 block
 * states and mct_mix_f16_kernel: fp16 operands, each scaled by a power of two into
 * [2^14, 2^15) at its max (exact; undone in fp32 on the output H_i): row i
 * of W by 2^wexp[i] (mct_wrow_exp_kernel, one warp per row of the padded
 * triangle), the states of head bh by one 2^es from max |[S_b | z_b]| over
 * its blocks (pass 1 raises lct_args.smax with one atomicMax per CTA and
 * per z warp). Values more than 2^28 below their scale's max become fp16
 * subnormals; the same formula in plain fp16 would overflow instead (S_b
 * passes 65504 at inputs ×10). Not "mma_bf16s": bf16 states would cost
 * fp16's precision (2^-9 per state against 2^-12); fp32 states move twice
 * the state bytes of mma_bf16s (on bf16, "mma" took 1.4-1.8x the time of
 * "mma_bf16s": docs/PERF.md), which mma_f16s avoids. */
#include "cuda/bwd_common.cuh"
#include "cuda/linear_causal_tc.cuh"
#include "cuda/mhla_causal_mix.cuh"
#include "cuda/mhla_causal_tc.cuh"
#include "cuda/ptx.cuh"
#include "cuda/tc16.cuh"

namespace {

/* fp16 q, k, v, out on the tensor-core path (fp32 block states, the fp16
 * mixing GEMM mct_mix_f16_kernel); false sends them to the portable engine.
 * On since the device harness's fp16 causal MHLA rows passed (the host
 * emulator dev/emu_causal_tc.sh has the same cases). */
constexpr bool mct_f16_tc = true;

bool mct_view_ok(const la_tensor *t, int64_t D, la_dtype dt) {
    return t->dtype == dt && t->ndim == 4 && t->ne[3] == D && t->nb[3] == 1 &&
           t->nb[0] % 8 == 0 && t->nb[1] % 8 == 0 && t->nb[2] % 8 == 0 &&
           ((uintptr_t)t->data % 16) == 0;
}

/* Wp[hw][r][c] = W[hw][r][c] for c < r < M, else 0 (r, c < Mp: the GEMM's
 * A operand, padded to whole 128-row tiles) */
__global__ void mct_strict_pad_kernel(int64_t total, const float *W, int64_t WM, int64_t M,
                                      int64_t Mp, float *Wp) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t hw = i / (Mp * Mp), r = (i / Mp) % Mp, c = i % Mp;
    Wp[i] = (r < M && c < r) ? W[(hw * WM + r) * WM + c] : 0.f;
}
/* the same in bf16 (variant mma_bf16s: W rounded once, as in "mma") */
__global__ void mct_strict_pad_bf16_kernel(int64_t total, const float *W, int64_t WM, int64_t M,
                                           int64_t Mp, __nv_bfloat16 *Wp) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t hw = i / (Mp * Mp), r = (i / Mp) % Mp, c = i % Mp;
    Wp[i] = __float2bfloat16_rn((r < M && c < r) ? W[(hw * WM + r) * WM + c] : 0.f);
}

/* ---- the mixing GEMM: Hs[z][i][e] = Σ_{b<i} Wp[hw][i][b] S[z][b][e] ------
 * grid (Mp/128 row tiles, ⌈SE/128⌉ column tiles, B·H), 256 threads. Row
 * tiles vary fastest, so that the CTAs in flight share a 128-column slice of
 * S (read about once from memory). A CTA takes rows i0 + [0, 128) over
 * b < i0 + 128 (the strict triangle; Wp is zero on and above the
 * diagonal), in steps of 32: fp32 loads of the next step into registers
 * while the products of this one run, bf16 into one of two shared buffers,
 * one barrier per step. Warp w: rows 64(w/4) + [0, 64), columns 32(w%4) +
 * [0, 32) (4 × 4 m16n8 tiles); A by ldmatrix, B by ldmatrix.trans from
 * row-major tiles (rows 80 and 272 bytes: conflict-free). Two CTAs per SM
 * (at most 128 registers). */
constexpr int MX_BM = 128, MX_BN = 128, MX_BK = 32, MX_LA = MX_BK + 8, MX_LB = MX_BN + 8;

template <typename E = __nv_bfloat16> __device__ __forceinline__ uint2 mct_pack4(float4 x) {
    typename la_t16<E>::T2 lo = la_t16<E>::pack2(x.x, x.y), hi = la_t16<E>::pack2(x.z, x.w);
    uint2 u;
    u.x = *(const uint32_t *)&lo;
    u.y = *(const uint32_t *)&hi;
    return u;
}

/* One MX_BK step of a warp's 64x32 tile of the mixing GEMM (both mixing
 * kernels): A fragments of four 16-row slices by ldmatrix, B fragments
 * transposed, 4x4 m16n8k16 products into acc. */
template <typename E>
__device__ __forceinline__ void mct_mix_step(float (&acc)[4][4][4], const E *a_, const E *b_, int wr,
                                             int wc, int li, int lj) {
#pragma unroll
    for (int kk = 0; kk < MX_BK / 16; kk++) {
        uint32_t af[4][4];
#pragma unroll
        for (int mi = 0; mi < 4; mi++)
            la_ldsm4(af[mi], &a_[(wr + 16 * mi + 8 * (lj & 1) + li) * MX_LA + 16 * kk + 8 * (lj >> 1)]);
#pragma unroll
        for (int jp = 0; jp < 2; jp++) {
            uint32_t bf[4];
            la_ldsm4t(bf, &b_[(16 * kk + 8 * (lj & 1) + li) * MX_LB + wc + 16 * jp + 8 * (lj >> 1)]);
#pragma unroll
            for (int mi = 0; mi < 4; mi++) {
                la_t16<E>::mma(acc[mi][2 * jp], af[mi], bf[0], bf[1]);
                la_t16<E>::mma(acc[mi][2 * jp + 1], af[mi], bf[2], bf[3]);
            }
        }
    }
}

/* E = fp16 (mct_mix_f16_kernel): both operands scaled by powers of two into
 * fp16's range (exact, undone in fp32 on the output): row i of Wp arrives
 * multiplied by 2^wexp[hw·Mp + i] (mct_wrow_exp_kernel: its max |W| in
 * [2^14, 2^15)), S is multiplied by 2^es at the conversion, es from smax[z]
 * (pass 1: max |[S_b | z_b]| over the head's blocks); E = bf16: wexp, smax
 * unused (NULL). */
template <typename E>
__device__ __forceinline__ void mct_mix_body(const float *Wp, int64_t Mp, int64_t H, int64_t Hw,
                                             const float *S, float *Hs, int64_t M, int64_t SE,
                                             const int *wexp, const float *smax) {
    constexpr bool F16 = la_t16<E>::is_f16;
    __shared__ __align__(16) E sA[2][MX_BM * MX_LA];
    __shared__ __align__(16) E sB[2][MX_BK * MX_LB];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int li = lane % 8, lj = lane / 8, g = lane / 4, cq = lane % 4;
    const int64_t i0 = (int64_t)blockIdx.x * MX_BM, e0 = (int64_t)blockIdx.y * MX_BN,
                  z = blockIdx.z;
    const float *A = Wp + (Hw == 1 ? 0 : z % H) * Mp * Mp;
    const float *Bm = S + z * M * SE;
    /* b < i <= min(i0 + 127, M - 1): the steps past b = M - 2 multiply zeros
     * (none at M = 1); <= Mp */
    const int64_t kend = i0 + MX_BM < M - 1 ? i0 + MX_BM : M - 1;
    const int wr = 64 * (warp / 4), wc = 32 * (warp % 4);
    const bool rows = i0 + wr < M; /* the warp's 64 rows hold a block (else its products are 0) */
    /* fp16: S's scale (Wp's rows arrive scaled: mct_wrow_exp_kernel) */
    float ssc = 1.f;
    if constexpr (F16) ssc = la_pow2f(la_exp16(smax[z], -126, 126));

    float4 ra[4], rb[4];
    uint2 pa16[4], pb16[4]; /* fp16: the fetched step, converted */
    auto fetch = [&](int64_t k0) {
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int idx = tid + 256 * u;
            const int row = idx / 8, c4 = idx % 8; /* A: 128 rows × 8 float4 */
            ra[u] = *(const float4 *)&A[(i0 + row) * Mp + k0 + 4 * c4];
            const int br = idx / 32, bc = idx % 32; /* B: 32 rows × 32 float4 */
            const int64_t b = k0 + br, e = e0 + 4 * bc;
            rb[u] = b < M && e < SE ? *(const float4 *)&Bm[b * SE + e] : make_float4(0.f, 0.f, 0.f, 0.f);
            if constexpr (F16) { /* to fp16 here: half the staging registers until stash */
                pa16[u] = mct_pack4<E>(ra[u]);
                pb16[u] = mct_pack4<E>(make_float4(rb[u].x * ssc, rb[u].y * ssc, rb[u].z * ssc, rb[u].w * ssc));
            }
        }
    };
    auto stash = [&](int buf) {
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int idx = tid + 256 * u;
            if constexpr (F16) {
                *(uint2 *)&sA[buf][(idx / 8) * MX_LA + 4 * (idx % 8)] = pa16[u];
                *(uint2 *)&sB[buf][(idx / 32) * MX_LB + 4 * (idx % 32)] = pb16[u];
            } else {
                *(uint2 *)&sA[buf][(idx / 8) * MX_LA + 4 * (idx % 8)] = mct_pack4<E>(ra[u]);
                *(uint2 *)&sB[buf][(idx / 32) * MX_LB + 4 * (idx % 32)] = mct_pack4<E>(rb[u]);
            }
        }
    };
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

    fetch(0);
    stash(0);
    __syncthreads();
    int buf = 0;
    for (int64_t k0 = 0; k0 < kend; k0 += MX_BK) {
        const bool more = k0 + MX_BK < kend;
        if (more) fetch(k0 + MX_BK);
        const E *a_ = sA[buf], *b_ = sB[buf];
        if (rows) mct_mix_step<E>(acc, a_, b_, wr, wc, li, lj);
        if (more) stash(buf ^ 1);
        __syncthreads();
        buf ^= 1;
    }
    float *C = Hs + z * M * SE;
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int64_t i = i0 + wr + 16 * mi + g + 8 * hr;
            if (i >= M) continue;
            float f = 1.f, fs = 1.f; /* fp16: 2^-wexp[i], 2^-es (two factors: each in range) */
            if constexpr (F16) {
                f = la_pow2f(-wexp[(Hw == 1 ? 0 : z % H) * Mp + i]);
                fs = la_pow2f(-la_exp16(smax[z], -126, 126));
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int64_t e = e0 + wc + 8 * j + 2 * cq; /* even; SE % 4 == 0 */
                if constexpr (F16) {
                    if (e < SE)
                        *(float2 *)&C[i * SE + e] =
                            make_float2(acc[mi][j][2 * hr] * f * fs, acc[mi][j][2 * hr + 1] * f * fs);
                } else {
                    if (e < SE) *(float2 *)&C[i * SE + e] = make_float2(acc[mi][j][2 * hr], acc[mi][j][2 * hr + 1]);
                }
            }
        }
}
__global__ void __launch_bounds__(256, 2) mct_mix_kernel(const float *Wp, int64_t Mp, int64_t H,
                                                      int64_t Hw, const float *S, float *Hs,
                                                      int64_t M, int64_t SE) {
    mct_mix_body<__nv_bfloat16>(Wp, Mp, H, Hw, S, Hs, M, SE, nullptr, nullptr);
}
/* the fp16 mixing (fp16 inputs: mct_forward's default) */
__global__ void __launch_bounds__(256, 2) mct_mix_f16_kernel(const float *Wp, int64_t Mp, int64_t H,
                                                          int64_t Hw, const float *S, float *Hs,
                                                          int64_t M, int64_t SE, const int *wexp,
                                                          const float *smax) {
    mct_mix_body<__half>(Wp, Mp, H, Hw, S, Hs, M, SE, wexp, smax);
}
/* wexp[r] = the exponent putting max_c |Wp[r][c]| in [2^14, 2^15) (0 for a
 * zero row), and row r of Wp multiplied by 2^wexp[r] in place (exact); one
 * warp per row of the [Hw·Mp][Mp] padded strict triangle */
__global__ void mct_wrow_exp_kernel(float *Wp, int64_t rows, int64_t Mp, int *wexp) {
    const int64_t r = (int64_t)blockIdx.x * 8 + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return; /* whole warps */
    float m = 0.f;
    for (int64_t c = lane; c < Mp; c += 32) m = fmaxf(m, fabsf(Wp[r * Mp + c]));
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const int e = la_exp16(m, -126, 126);
    const float sc = la_pow2f(e);
    for (int64_t c = lane; c < Mp; c += 32) Wp[r * Mp + c] *= sc;
    if (lane == 0) wexp[r] = e;
}

/* ---- the bf16 mixing GEMM (variant mma_bf16s): Hs = Wp·S with bf16 Wp, S
 * and Hs (the block states in bf16 from pass 1 to pass 3), fp32
 * accumulation. grid (Mp/128 row tiles, ⌈SE/128⌉ column tiles, B·H), 256
 * threads, two CTAs per SM. Row tiles are taken from the last (the longest:
 * b < i0 + 128) to the first, so that the short ones fill the tail of the
 * wave. Both operands arrive by cp.async straight into shared memory
 * (16-byte pieces, zero-filled past row M and column SE), MXB_S stages of
 * 32 b, one barrier per step: no register staging, no conversion. Warp
 * tiles, fragments and row strides as mct_mix_kernel. */
constexpr int MXB_S = 4;
constexpr size_t MXB_STAGE = MX_BM * MX_LA + MX_BK * MX_LB; /* bf16 elements */
constexpr size_t MXB_SMEM = sizeof(__nv_bfloat16) * MXB_S * MXB_STAGE;

__global__ void __launch_bounds__(256, 2)
    mct_mix_bf16_kernel(const __nv_bfloat16 *Wp, int64_t Mp, int64_t H, int64_t Hw,
                        const __nv_bfloat16 *S, __nv_bfloat16 *Hs, int64_t M, int64_t SE) {
    extern __shared__ __align__(128) unsigned char mct_sm[];
    __nv_bfloat16 *sm = (__nv_bfloat16 *)mct_sm;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int li = lane % 8, lj = lane / 8, g = lane / 4, cq = lane % 4;
    /* 32-bit indices inside a head (mct_combine_bf16: Mp·Mp, M·SE < 2^31) */
    const int i0 = (int)(gridDim.x - 1 - blockIdx.x) * MX_BM, e0 = (int)blockIdx.y * MX_BN;
    const int64_t z = blockIdx.z;
    const int Mi = (int)M, SEi = (int)SE, Mpi = (int)Mp;
    const __nv_bfloat16 *A = Wp + (Hw == 1 ? 0 : z % H) * Mp * Mp;
    const __nv_bfloat16 *Bm = S + z * M * SE;
    /* b < i <= min(i0 + 127, M - 1): no step past b = M - 2 (none at M = 1) */
    const int nk = ((MX_BM + i0 < Mi - 1 ? MX_BM + i0 : Mi - 1) + MX_BK - 1) / MX_BK;
    const int wr = 64 * (warp / 4), wc = 32 * (warp % 4);
    const bool rows = i0 + wr < Mi; /* the warp's 64 rows hold a block (else its products are 0) */

    /* the thread's pieces: A rows tid/4 + 64u, columns 8(tid%4) (128 rows × 4
     * pieces); B rows tid/16 + 16u, columns 8(tid%16) (32 rows × 16 pieces),
     * u < 2; per step the A pointers move 32 columns, the B ones 32 rows */
    const int ar = tid / 4, ac = 8 * (tid % 4), br = tid / 16, bc = 8 * (tid % 16);
    const __nv_bfloat16 *pa = A + (i0 + ar) * Mpi + ac;
    const bool colok = e0 + bc < SEi; /* SE % 8 == 0: a piece is in or out */
    const __nv_bfloat16 *pb = Bm + (colok ? br * SEi + e0 + bc : 0);
    const int bstep = colok ? MX_BK * SEi : 0;
    const int soa = ar * MX_LA + ac, sob = br * MX_LB + bc;
    auto issue = [&](int t) { /* step t into stage t % MXB_S; always one group */
        if (t < nk) {
            __nv_bfloat16 *sA = sm + (t % MXB_S) * MXB_STAGE, *sB = sA + MX_BM * MX_LA;
            const __nv_bfloat16 *qa = pa + t * MX_BK, *qb = pb + t * bstep;
            la_cp16z(&sA[soa], qa, true);
            la_cp16z(&sA[soa + 64 * MX_LA], qa + 64 * Mpi, true);
            const int b = t * MX_BK + br; /* rows past M: zero-filled, nothing read */
            const bool ok0 = colok && b < Mi, ok1 = colok && b + 16 < Mi;
            la_cp16z(&sB[sob], ok0 ? qb : Bm, ok0);
            la_cp16z(&sB[sob + 16 * MX_LB], ok1 ? qb + 16 * SEi : Bm, ok1);
        }
        la_cp_commit();
    };
#pragma unroll
    for (int t = 0; t < MXB_S - 1; t++) issue(t);

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

    for (int t = 0; t < nk; t++) {
        la_cp_wait<MXB_S - 2>(); /* this thread's pieces of step t have landed */
        __syncthreads();         /* everyone's; every warp is done with step t - 1 */
        issue(t + MXB_S - 1);    /* into the stage of step t - 1 */
        const __nv_bfloat16 *a_ = sm + (t % MXB_S) * MXB_STAGE, *b_ = a_ + MX_BM * MX_LA;
        if (rows) mct_mix_step<__nv_bfloat16>(acc, a_, b_, wr, wc, li, lj);
    }
    la_cp_wait<0>(); /* no copy in flight at exit (the empty tail groups) */
    __nv_bfloat16 *C = Hs + z * M * SE;
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int i = i0 + wr + 16 * mi + g + 8 * hr;
            if (i >= Mi) continue;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int e = e0 + wc + 8 * j + 2 * cq; /* even; SE % 8 == 0 */
                if (e < SEi)
                    *(__nv_bfloat162 *)&C[i * SEi + e] =
                        __floats2bfloat162_rn(acc[mi][j][2 * hr], acc[mi][j][2 * hr + 1]);
            }
        }
}

#include "cuda/mhla_causal_mix2.cuh"
#include "cuda/mhla_causal_mix_wg.cuh"

/* The default bf16 mixing GEMM of variant "mma_bf16s" (family
 * "mhla_causal_mix" forces one: "v1" mct_mix_bf16_kernel, "v2"
 * mct_mix2_kernel, "wgmma" mct_mixw_kernel on sm_90): "wgmma" on sm_90
 * while mct_mix_wgmma (the H200: 479 TFLOP/s on the strict triangle at
 * M = 2048 against v2's 277 and v1's 285, the same bits as v1; docs/PERF.md),
 * else v2 while mct_mix_v2 (faster than v1 at M = 512, equal at 2048), else
 * v1. Both passed the device harness's mhla_causal_mix rows. */
constexpr bool mct_mix_v2 = true;
constexpr bool mct_mix_wgmma = true;
enum { MCT_MIXK_V1 = 0, MCT_MIXK_V2 = 1, MCT_MIXK_WG = 2 };

/* dev/bench_gpu_mhla_causal --passes: events recorded around the mixing
 * (mct_dev_pass_events; NULL: none) */
cudaEvent_t mct_ev_prep = nullptr, mct_ev_mix0 = nullptr, mct_ev_mix1 = nullptr, mct_ev_aprep = nullptr;

#include "cuda/mhla_causal_mix_f16s.cuh"

struct mct_mix_ctx {
    const float *Wp; /* [Hw][Mp][Mp] (mma) */
    const int *wexp;   /* fp16: [Hw][Mp] row exponents of Wp (NULL: bf16) */
    const float *smax; /* fp16: [B·H] max |[S_b | z_b]| (lct_mixing.smax) */
    const __nv_bfloat16 *Wph; /* the same in bf16 (mma_bf16s) */
    int64_t Mp, Hw;
    const lcb_mixing *split; /* mma_split: mcb_combine */
    int mixk;                /* mma_bf16s: MCT_MIXK_* */
    /* mma_f16s (mct_combine_f16s): the packed fp32 W (head stride whs), A'
     * for G heads at a time ([G][Mp][Mp] fp16), their output exponents
     * ([G][Mp]), pass 1's σ and pass 3's τ ([B·H][M]) */
    const float *W;
    int64_t WM, whs, G;
    __half *Ap;
    int *oexp;
    const int *sexp;
    int *hexp;
};

la_status mct_launch_bf16(int mixk, const __nv_bfloat16 *Wph, int64_t Mp, int64_t Hw,
                          const __nv_bfloat16 *S, __nv_bfloat16 *Hs, int64_t BH, int64_t H, int64_t M,
                          int64_t SE, cudaStream_t s) {
    static_assert(MX2_BM == MX_BM, "both bf16 mixing GEMMs take W padded to whole 128-row tiles");
    if (SE % 8 || Mp % MX_BM || BH > 65535 || la_cu_cdiv(SE, MX_BN) > 65535 || Mp * Mp >= INT32_MAX ||
        (Mp + MXW_BK) * SE >= INT32_MAX) /* 32-bit offsets in a head, past the widest k step */
        return la_err(LA_ERR_UNSUPPORTED, "causal mhla bf16 mixing: SE = %lld, B*H = %lld",
                      (long long)SE, (long long)BH);
    if (mixk == MCT_MIXK_WG) {
        static_assert(MXW_BM == MX_BM, "the wgmma mixing takes the same padded W");
        LA_CU(cudaFuncSetAttribute(mct_mixw_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)MXW_SMEM));
        const int64_t R = Mp / MXW_BM;
        const dim3 grid((unsigned)((R + 1) / 2), (unsigned)la_cu_cdiv(SE, MXW_BN), (unsigned)BH);
        mct_mixw_kernel<<<grid, 256, MXW_SMEM, s>>>(Wph, Mp, H, Hw, S, Hs, M, SE);
        LA_CU_LAUNCH("mct_mixw_kernel");
        return LA_OK;
    }
    if (mixk == MCT_MIXK_V2) {
        LA_CU(cudaFuncSetAttribute(mct_mix2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)MX2_SMEM));
        const int64_t R = Mp / MX2_BM;
        const dim3 grid((unsigned)((R + 1) / 2), (unsigned)la_cu_cdiv(SE, MX2_BN), (unsigned)BH);
        mct_mix2_kernel<<<grid, 256, MX2_SMEM, s>>>(Wph, Mp, H, Hw, S, Hs, M, SE);
        LA_CU_LAUNCH("mct_mix2_kernel");
        return LA_OK;
    }
    LA_CU(cudaFuncSetAttribute(mct_mix_bf16_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)MXB_SMEM));
    const dim3 grid((unsigned)(Mp / MX_BM), (unsigned)la_cu_cdiv(SE, MX_BN), (unsigned)BH);
    mct_mix_bf16_kernel<<<grid, 256, MXB_SMEM, s>>>(Wph, Mp, H, Hw, S, Hs, M, SE);
    LA_CU_LAUNCH("mct_mix_bf16_kernel");
    return LA_OK;
}

la_status mct_combine_bf16(const void *ctx, const __nv_bfloat16 *S, __nv_bfloat16 *Hs, int64_t BH,
                           int64_t H, int64_t M, int64_t SE, cudaStream_t s) {
    const mct_mix_ctx *c = (const mct_mix_ctx *)ctx;
    if (mct_ev_mix0) LA_CU(cudaEventRecord(mct_ev_mix0, s));
    LA_TRY(mct_launch_bf16(c->mixk, c->Wph, c->Mp, c->Hw, S, Hs, BH, H, M, SE, s));
    if (mct_ev_mix1) LA_CU(cudaEventRecord(mct_ev_mix1, s));
    return LA_OK;
}

la_status mct_combine(const void *ctx, const float *S, float *Hs, int64_t BH, int64_t H,
                      int64_t M, int64_t SE, cudaStream_t s) {
    const mct_mix_ctx *c = (const mct_mix_ctx *)ctx;
    if (c->split) return mcb_combine(c->split, S, Hs, BH, H, M, SE, s);
    if (SE % 4 || c->Mp % MX_BM || BH > 65535 || la_cu_cdiv(SE, MX_BN) > 65535)
        return la_err(LA_ERR_UNSUPPORTED, "causal mhla mixing: SE = %lld, B*H = %lld", (long long)SE,
                      (long long)BH);
    const dim3 grid((unsigned)(c->Mp / MX_BM), (unsigned)la_cu_cdiv(SE, MX_BN), (unsigned)BH);
    if (c->wexp) {
        mct_mix_f16_kernel<<<grid, 256, 0, s>>>(c->Wp, c->Mp, H, c->Hw, S, Hs, M, SE, c->wexp, c->smax);
        LA_CU_LAUNCH("mct_mix_f16_kernel");
        return LA_OK;
    }
    mct_mix_kernel<<<grid, 256, 0, s>>>(c->Wp, c->Mp, H, c->Hw, S, Hs, M, SE);
    LA_CU_LAUNCH("mct_mix_kernel");
    return LA_OK;
}

/* mma_f16s: A' and the GEMM for G heads at a time (mhla_causal_mix_f16s.cuh) */
la_status mct_combine_f16s(const void *ctx, const __half *S, __half *Hs, int64_t BH, int64_t H, int64_t M,
                           int64_t SE, cudaStream_t s) {
    const mct_mix_ctx *c = (const mct_mix_ctx *)ctx;
    const int64_t Mp = c->Mp;
    if (SE % 8 || Mp % MXW_BM || c->G > 65535 || la_cu_cdiv(SE, MXW_BN) > 65535 || Mp * Mp >= INT32_MAX ||
        (Mp + MXW_BK) * SE >= INT32_MAX) /* as mct_launch_bf16 */
        return la_err(LA_ERR_UNSUPPORTED, "causal mhla fp16 mixing: SE = %lld, M = %lld", (long long)SE,
                      (long long)M);
    if (mct_ev_mix0) LA_CU(cudaEventRecord(mct_ev_mix0, s));
    LA_CU(cudaFuncSetAttribute(mct_mixw_f16_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)MXW_SMEM));
    for (int64_t z0 = 0; z0 < BH; z0 += c->G) {
        const int64_t g = BH - z0 < c->G ? BH - z0 : c->G;
        mct_f16s_prep_kernel<<<(unsigned)la_cu_cdiv(g * Mp, 8), 256, 0, s>>>(
            c->W, c->WM, c->whs, H, z0, M, Mp, g * Mp, c->sexp, c->Ap, c->oexp, c->hexp);
        LA_CU_LAUNCH("mct_f16s_prep_kernel");
        if (mct_ev_aprep && z0 == 0) LA_CU(cudaEventRecord(mct_ev_aprep, s));
        const dim3 grid((unsigned)((Mp / MXW_BM + 1) / 2), (unsigned)la_cu_cdiv(SE, MXW_BN), (unsigned)g);
        mct_mixw_f16_kernel<<<grid, 256, MXW_SMEM, s>>>(c->Ap, Mp, g, S + z0 * M * SE, Hs + z0 * M * SE, M, SE,
                                                        c->oexp);
        LA_CU_LAUNCH("mct_mixw_f16_kernel");
    }
    if (mct_ev_mix1) LA_CU(cudaEventRecord(mct_ev_mix1, s));
    return LA_OK;
}

/* mma_f16s: the heads of one A' batch, so that A' ([G][Mp][Mp] fp16) stays
 * within 256 MB or one head's */
int64_t mct_f16s_heads(int64_t BH, int64_t Mp) {
    const int64_t per = Mp * Mp * 2, g = ((int64_t)256 << 20) / per;
    return g < 1 ? 1 : g > BH ? BH : g;
}

} // namespace

void mct_dev_pass_events(cudaEvent_t prep, cudaEvent_t mix0, cudaEvent_t mix1, cudaEvent_t aprep) {
    mct_ev_prep = prep, mct_ev_mix0 = mix0, mct_ev_mix1 = mix1, mct_ev_aprep = aprep;
}

la_status mct_dev_mix_bf16(const char *impl, const __nv_bfloat16 *Wph, int64_t Mp, int64_t Hw,
                           const __nv_bfloat16 *S, __nv_bfloat16 *Hs, int64_t BH, int64_t H, int64_t M,
                           int64_t SE, cudaStream_t s) {
    const int k = !strcmp(impl, "v1") ? MCT_MIXK_V1 : !strcmp(impl, "v2") ? MCT_MIXK_V2
                  : !strcmp(impl, "wgmma") ? MCT_MIXK_WG : -1;
    if (k < 0) return la_err(LA_ERR_ARG, "mct_dev_mix_bf16: impl '%s' (v1, v2, wgmma)", impl);
    if (k == MCT_MIXK_WG && !la_cu_hopper(nullptr))
        return la_err(LA_ERR_UNSUPPORTED, "mct_dev_mix_bf16: wgmma needs an sm_90 GPU");
    if (Mp % MX_BM || Mp < M) return la_err(LA_ERR_ARG, "mct_dev_mix_bf16: Mp = %lld", (long long)Mp);
    return mct_launch_bf16(k, Wph, Mp, Hw, S, Hs, BH, H, M, SE, s);
}

/* fp16 inputs take mma_f16s by default on sm_90 where its GEMM's limits
 * hold (mct_combine_f16s); false keeps them on "mma" (fp32 block states) */
constexpr bool mct_f16s_default = true;

int mct_default_kind(const la_tensor *q, const la_context *ctx) {
    if (q->dtype != LA_F16) return MCT_MIX_BF16S;
    const int64_t D = q->ne[3], SE = D * D + D, Mp = la_cu_cdiv(la_cu_cdiv(q->ne[1], 64), MX_BM) * MX_BM;
    const bool fits = SE % 8 == 0 && Mp * Mp < INT32_MAX && (Mp + MXW_BK) * SE < INT32_MAX;
    return mct_f16s_default && fits && la_cu_hopper(ctx) ? MCT_MIX_F16S : MCT_MIX_MMA;
}

int mct_eligible(const la_mhla_causal_params *p, const la_tensor *q, const la_tensor *k,
                 const la_tensor *v, const la_tensor *out) {
    if (p->chunk != 64) return 0;
    if (p->normalize != LA_MHLA_NORM_NONE && p->normalize != LA_MHLA_NORM_PER_QUERY) return 0;
    const int64_t D = q->ne[3];
    if (D != 32 && D != 64 && D != 128) return 0;
    if (q->ne[1] < 1 || q->ne[0] * q->ne[2] > 65535) return 0;
    const la_dtype dt = q->dtype;
    if (dt != LA_BF16 && !(mct_f16_tc && dt == LA_F16)) return 0;
    return mct_view_ok(q, D, dt) && mct_view_ok(k, D, dt) && mct_view_ok(v, D, dt) && mct_view_ok(out, D, dt);
}

la_status mct_forward(const la_mhla_causal_params *p, float scale_q, const la_tensor *q,
                      const la_tensor *k, const la_tensor *v, const la_tensor *mixing,
                      la_tensor *out, int kind, const la_context *ctx, cudaStream_t s) {
    const int64_t N = q->ne[1], H = q->ne[2], M = la_cu_cdiv(N, 64);
    const int64_t Mp = la_cu_cdiv(M, MX_BM) * MX_BM;
    const int64_t WM = mixing->ne[mixing->ndim - 1], Hw = mixing->ndim == 3 ? mixing->ne[0] : 1;
    const bool split = kind == MCT_MIX_SPLIT, bs = kind == MCT_MIX_BF16S, fs = kind == MCT_MIX_F16S;
    const bool f16 = q->dtype == LA_F16, f16mix = f16 && kind == MCT_MIX_MMA;
    if (f16 && bs)
        return la_err(LA_ERR_UNSUPPORTED, "causal mhla: variant mma_bf16s (bf16 block states) needs bf16 "
                                          "inputs, q is f16");
    if (fs && (!f16 || !la_cu_hopper(ctx)))
        return la_err(LA_ERR_UNSUPPORTED, "causal mhla: variant mma_f16s (fp16 block states) needs f16 "
                                          "inputs on an sm_90 GPU");
    /* the bf16 mixing GEMM (family "mhla_causal_mix"; the name checked before any work, and
     * used by mma_bf16s only) */
    const char *mv = la_context_variant(ctx, "mhla_causal_mix");
    int mixk = mct_mix_v2 ? MCT_MIXK_V2 : MCT_MIXK_V1;
    if (!mv && bs && mct_mix_wgmma && la_cu_hopper(ctx)) mixk = MCT_MIXK_WG;
    if (mv && !strcmp(mv, "v1")) mixk = MCT_MIXK_V1;
    else if (mv && !strcmp(mv, "v2")) mixk = MCT_MIXK_V2;
    else if (mv && !strcmp(mv, "wgmma")) mixk = MCT_MIXK_WG;
    else if (mv) return la_cu_unknown_variant("mhla_causal_mix", mv, "v1, v2, wgmma");
    if (bs && mixk == MCT_MIXK_WG && !la_cu_hopper(ctx))
        return la_cu_variant_unsupported("mhla_causal_mix", mv, "an sm_90 GPU (wgmma)");
    const int64_t BH = q->ne[0] * H;
    bwd_ws ws;
    float *W, *Ws, *Wp = nullptr, *Wph = nullptr; /* Wph: bf16 [Hw][Mp][Mp], half of the floats */
    float *wexp = nullptr, *smax = nullptr; /* fp16 mixing: [Hw][Mp] ints, [B·H] floats */
    ws.want(&W, Hw, WM, WM);
    ws.want(&Ws, Hw, M, M);
    if (kind == MCT_MIX_MMA) ws.want(&Wp, Hw, Mp, Mp);
    if (bs) ws.want(&Wph, Hw, Mp, Mp / 2);
    if (f16mix) {
        ws.want(&wexp, Hw, Mp);
        ws.want(&smax, BH);
    }
    const int64_t G = fs ? mct_f16s_heads(BH, Mp) : 0; /* mma_f16s: heads per A' batch */
    float *Ap = nullptr, *oexp = nullptr, *sexp = nullptr, *hexp = nullptr;
    if (fs) {
        ws.want(&Ap, G, Mp, Mp / 2); /* fp16 */
        ws.want(&oexp, G, Mp);       /* ints */
        ws.want(&sexp, BH, M);
        ws.want(&hexp, BH, M);
    }
    LA_TRY(ws.alloc(s, "causal mhla mixing"));
    lcb_mixing mx;
    LA_TRY(mcb_mixing_prepare(mixing, M, W, Ws, &mx, s));
    if (Wp) BWD_LAUNCH(mct_strict_pad_kernel, Hw * Mp * Mp, s, W, WM, M, Mp, Wp);
    if (bs) BWD_LAUNCH(mct_strict_pad_bf16_kernel, Hw * Mp * Mp, s, W, WM, M, Mp, (__nv_bfloat16 *)Wph);
    if (f16mix) {
        mct_wrow_exp_kernel<<<(unsigned)la_cu_cdiv(Hw * Mp, 8), 256, 0, s>>>(Wp, Hw * Mp, Mp, (int *)wexp);
        LA_CU_LAUNCH("mct_wrow_exp_kernel");
        LA_CU(cudaMemsetAsync(smax, 0, sizeof(float) * (size_t)BH, s));
    }
    if (mct_ev_prep) LA_CU(cudaEventRecord(mct_ev_prep, s));
    const mct_mix_ctx mc = {Wp,     (const int *)wexp,       smax, (const __nv_bfloat16 *)Wph, Mp, Hw,
                            split ? &mx : nullptr, mixk, W, WM, Hw == 1 ? 0 : WM * WM, G,
                            (__half *)Ap, (int *)oexp, (const int *)sexp, (int *)hexp};
    lct_mixing lm;
    lm.W = W, lm.hs = Hw == 1 ? 0 : WM * WM, lm.ld = WM;
    lm.combine = mct_combine, lm.ctx = &mc;
    lm.combine_bf16 = bs ? mct_combine_bf16 : nullptr;
    lm.smax = smax;
    lm.combine_f16s = fs ? mct_combine_f16s : nullptr;
    lm.sexp = (int *)sexp, lm.hexp = (int *)hexp;
    la_linear_params lp;
    la_linear_params_init(&lp);
    lp.causal = 1;
    lp.feature = p->feature;
    lp.normalize = p->normalize == LA_MHLA_NORM_PER_QUERY;
    lp.scale_q = scale_q;
    lp.eps = p->eps;
    lp.chunk = 64;
    la_cu_report(ctx, "mhla_causal", split ? "mma_split" : bs ? "mma_bf16s" : fs ? "mma_f16s" : "mma",
                 "%s B*H=%lld N=%lld blocks=%lld per-head W=%d%s", f16 ? "f16" : "bf16", (long long)BH,
                 (long long)N, (long long)M, Hw != 1,
                 !bs ? "" : mixk == MCT_MIXK_WG ? " mixing=wgmma" : mixk == MCT_MIXK_V2 ? " mixing=v2" : " mixing=v1");
    lct_choice c;
    c.kernel = LCT_TC, c.walk = false, c.L = 64;
    return lct_run(c, &lp, q, k, v, out, nullptr, nullptr, nullptr, nullptr, ctx, s, &lm);
}
