/* The 16-bit mixing GEMM of causal MHLA on sm_90a wgmma (variant
 * "mma_bf16s" with mixing "wgmma", and variant "mma_f16s";
 * mhla_causal_tc.cu includes this inside its anonymous namespace after
 * mhla_causal_mix2.cuh). The same product, grid and row-tile pairs as
 * mct_mix2_kernel:
 *   Hs[z][i][e] = Σ_{b<i} Wp[hw][i][b] S[z][b][e]
 * with 128 × 256 tiles, two warpgroups of 64 rows × 256 columns each (one
 * m64n256k16 accumulator, 128 floats a thread), k steps of 64. E = bf16
 * (mct_mixw_kernel) or fp16 (mct_mixw_f16_kernel: Wp is the scaled A' of
 * one head, hw = z, and row i of the output is written times 2^oexp[z·Mp +
 * i], mhla_causal_mix_f16s.cuh); one template, the instruction's type differs.
 *
 * Shared memory, per stage (1024-byte aligned), in the layouts of the
 * sparse-attention kernel's Q (K-major) and V (N-major) operands
 * (sparse_attn.cu, la_wg_desc_ptr / la_wg_desc_nmajor in ptx.cuh), 128-byte
 * swizzle: A = W rows, 128 rows of 64 k (128 bytes), 16-byte piece c of row
 * m at m·128 + ((c ^ m%8)·16); B = S rows, k-row b of 64-column block n at
 * n·8192 + b·128 + ((c ^ b%8)·16). A warpgroup's A is its 64 rows (8192
 * bytes on); k16 slice s: A + 32·s bytes, B + 2048·s bytes.
 *
 * Pipeline: MXW_S stages filled by cp.async (all 256 threads), one wgmma
 * group in flight: at step t, wait for step t's copies, proxy fence,
 * barrier (every warpgroup has finished step t − 2's products: it waited
 * for them in step t − 1), issue step t + MXW_S − 2 into step t − 2's
 * stage, four wgmma on stage t, commit, wait until only this group is
 * pending. Diagonal: a warpgroup skips the steps past its last row. */
#ifndef LA_CUDA_MHLA_CAUSAL_MIX_WG_CUH
#define LA_CUDA_MHLA_CAUSAL_MIX_WG_CUH

constexpr int MXW_BM = 128, MXW_BN = 256, MXW_BK = 64, MXW_S = 4;
constexpr int MXW_A = MXW_BM * MXW_BK, MXW_STAGE = MXW_A + MXW_BK * MXW_BN; /* elements */
constexpr size_t MXW_SMEM = sizeof(__nv_bfloat16) * MXW_STAGE * MXW_S + 1024; /* + alignment */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* wgmma m64n256k16 with fp16 operands (ptx.cuh's macro, which also makes the bf16 one) */
LA_WG_M64N256K16_SS(la_wg_m64n256k16_f16_ss, "f16")
#define MXW_HAVE_WGMMA 1
#else
#define MXW_HAVE_WGMMA 0
#endif

__device__ __forceinline__ int mct_mixw_nk(int i0, int M) {
    const int kend = i0 + MXW_BM < M - 1 ? i0 + MXW_BM : M - 1;
    return kend > 0 ? (kend + MXW_BK - 1) / MXW_BK : 0;
}

template <typename E>
__device__ __forceinline__ void mct_mixw_body(const E *Wp, int64_t Mp, int64_t H, int64_t Hw, const E *S, E *Hs,
                                              int64_t M, int64_t SE, const int *oexp) {
#if MXW_HAVE_WGMMA
    extern __shared__ __align__(1024) unsigned char mct_smw_raw[];
    E *sm = (E *)(mct_smw_raw + ((1024 - ((uint32_t)__cvta_generic_to_shared(mct_smw_raw) & 1023)) & 1023));
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, cq = lane % 4, wg = warp / 4;
    const int Mi = (int)M, SEi = (int)SE, Mpi = (int)Mp, R = Mpi / MXW_BM;
    const int e0 = (int)blockIdx.y * MXW_BN;
    const int64_t z = blockIdx.z;
    const E *A = Wp + (Hw == 1 ? 0 : z % H) * Mp * Mp;
    const E *Bm = S + z * M * SE;
    const int rx = (int)blockIdx.x, ntile = R - 1 - rx != rx ? 2 : 1;
    const int ia = (R - 1 - rx) * MXW_BM, ib = rx * MXW_BM;
    const int nk0 = mct_mixw_nk(ia, Mi), nk1 = ntile == 2 ? mct_mixw_nk(ib, Mi) : 0;
    const int nt = nk0 + nk1;

    /* the thread's pieces: A rows tid/8 + 32u (u < 4), piece tid%8; B rows
     * tid/32 + 8u (u < 8), column piece tid%32 (block (tid%32)/8) */
    const int ar = tid / 8, ac = tid % 8, br = tid / 32, bcn = tid % 32;
    const bool colok = e0 + 8 * bcn < SEi; /* SE % 8 == 0 */
    const E *pb = Bm + (colok ? br * SEi + e0 + 8 * bcn : 0);
    auto issue = [&](int t) { /* stream step t into stage t % MXW_S; always one group */
        if (t < nt) {
            const int tile = t >= nk0, kk = t - (tile ? nk0 : 0);
            E *sA = sm + (t % MXW_S) * MXW_STAGE, *sB = sA + MXW_A;
            const E *qa = A + ((tile ? ib : ia) + ar) * Mpi + kk * MXW_BK + 8 * ac;
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int m = ar + 32 * u;
                la_cp16z(&sA[m * 64 + ((ac ^ (m & 7)) << 3)], qa + 32 * u * Mpi, true);
            }
            const E *qb = pb + (colok ? kk * MXW_BK * SEi : 0);
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int b = br + 8 * u;
                const bool ok = colok && kk * MXW_BK + b < Mi; /* rows past M: zeros */
                la_cp16z(&sB[(bcn >> 3) * 4096 + b * 64 + (((bcn & 7) ^ (b & 7)) << 3)],
                         ok ? qb + 8 * u * SEi : Bm, ok);
            }
        }
        la_cp_commit();
    };
#pragma unroll
    for (int t = 0; t < MXW_S - 2; t++) issue(t);

    float acc[32][4];
    int t = 0;
    for (int tile = 0; tile < ntile; tile++) {
        const int i0 = tile ? ib : ia, nk = tile ? nk1 : nk0;
#pragma unroll
        for (int j = 0; j < 32; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[j][e] = 0.f;
        const int klim = i0 + 64 * wg < Mi ? i0 + 64 * wg + 63 : 0; /* b < the warpgroup's last row */
        for (int kk = 0; kk < nk; kk++, t++) {
            la_cp_wait<MXW_S - 3>(); /* this thread's pieces of step t have landed */
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            __syncthreads(); /* everyone's; every warpgroup is done with step t - 2 */
            issue(t + MXW_S - 2);
            if (kk * MXW_BK < klim) {
                const E *a_ = sm + (t % MXW_S) * MXW_STAGE + wg * 64 * 64, *b_ = sm + (t % MXW_S) * MXW_STAGE + MXW_A;
                asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    if constexpr (la_t16<E>::is_f16)
                        la_wg_m64n256k16_f16_ss(acc, la_wg_desc_ptr(a_ + 16 * s), la_wg_desc_nmajor(b_ + 16 * 64 * s));
                    else
                        la_wg_m64n256k16_bf16_ss(acc, la_wg_desc_ptr(a_ + 16 * s), la_wg_desc_nmajor(b_ + 16 * 64 * s));
                }
                asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            }
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
        for (int j = 0; j < 32; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) asm volatile("" : "+f"(acc[j][e])::"memory");
        E *C = Hs + z * M * SE;
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int i = i0 + 64 * wg + 16 * (warp % 4) + g + 8 * hr;
            if (i >= Mi) continue;
            /* fp16: the row's output scale 2^oexp (exact; |acc|·2^oexp < 2^15) */
            const float f = oexp ? la_pow2f(oexp[z * Mp + i]) : 1.f;
#pragma unroll
            for (int j = 0; j < 32; j++) {
                const int e = e0 + 8 * j + 2 * cq; /* even; SE % 8 == 0 */
                if (e < SEi)
                    *(typename la_t16<E>::T2 *)&C[i * SEi + e] = la_t16<E>::pack2(acc[j][2 * hr] * f, acc[j][2 * hr + 1] * f);
            }
        }
    }
    la_cp_wait<0>();
#endif
}
__global__ void __launch_bounds__(256, 1)
    mct_mixw_kernel(const __nv_bfloat16 *Wp, int64_t Mp, int64_t H, int64_t Hw,
                    const __nv_bfloat16 *S, __nv_bfloat16 *Hs, int64_t M, int64_t SE) {
    mct_mixw_body<__nv_bfloat16>(Wp, Mp, H, Hw, S, Hs, M, SE, nullptr);
}
/* fp16 (variant mma_f16s): A' [z][Mp][Mp] per head z (Hw = H = the heads of
 * the launch), rows scaled by 2^oexp[z·Mp + i] on output */
__global__ void __launch_bounds__(256, 1)
    mct_mixw_f16_kernel(const __half *Ap, int64_t Mp, int64_t BH, const __half *S, __half *Hs, int64_t M,
                        int64_t SE, const int *oexp) {
    mct_mixw_body<__half>(Ap, Mp, BH, BH, S, Hs, M, SE, oexp);
}

#endif
