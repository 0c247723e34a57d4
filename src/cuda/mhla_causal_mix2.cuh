/* The bf16 mixing GEMM of causal MHLA, second version (variant "mma_bf16s",
 * mixing "v2"; mhla_causal_tc.cu includes this inside its anonymous
 * namespace, dev/emu_causal_tc.sh cuts it out for the host emulator):
 *   Hs[z][i][e] = Σ_{b<i} Wp[hw][i][b] S[z][b][e]   (bf16 in and out, fp32 sums)
 * over the strict triangle of the padded bf16 W (zero on and above the
 * diagonal, Mp = whole 128-row tiles) and the flattened bf16 block states
 * (SE = D·Dv + D columns).
 *
 * Why not mct_mix_bf16_kernel's shape (128 × 128 tiles, 8 warps of 64 × 32,
 * one tile per CTA): a 64 × 32 warp tile loads 192 bytes of fragments per
 * m16n8k16 from shared memory (here 128), a 128 × 128 tile does 64 FLOP per
 * byte moved from L2 (here 85), and at M = 512 a tile is 4 to 16 steps of 32,
 * so the pipeline's fill and the epilogue are a large part of every CTA.
 *
 * Shape: 128 (rows i) × 256 (columns e) output tiles, 8 warps as 2 × 4, warp
 * tile 64 × 64 (4 × 8 m16n8k16 accumulators: 128 floats a thread), one CTA
 * per SM. A CTA owns two row tiles of one column slice, r and R − 1 − r (R =
 * Mp/128 row tiles; the middle one alone when R is odd): every CTA gets R + 1
 * tiles' worth of 128-wide k blocks, so the triangle needs no longest-first
 * order, and the two tiles' k steps are one stream through the cp.async
 * pipeline: the second tile's first stages load while the first tile's
 * results are stored. Grid (⌈R/2⌉, ⌈SE/256⌉, B·H), x fastest, so the CTAs in
 * flight share column slices of S in L2.
 *
 * Pipeline: MX2_S stages of 32 k (A 128 × 32, B 32 × 256; 108,544 bytes,
 * plus 36,864 for the epilogue's staging rows), one barrier a step: wait
 * for step t, barrier (everyone is done with step t − 1), issue step
 * t + MX2_S − 1 into step t − 1's stage, multiply step t. Rows padded
 * to 80 and 528 bytes: ldmatrix (A) and ldmatrix.trans (B, row-major [k][e])
 * read 8 rows of 16 bytes at 20- and 132-word strides, conflict-free.
 *
 * Triangle: a tile of rows i0 + [0, 128) takes k < min(i0 + 128, M − 1)
 * (b < i ≤ M − 1; no step at M = 1), and in the diagonal block a warp skips
 * the steps past its last row (b ≥ i0 + wr + 63: W is zero there), so the
 * upper warps of a tile stop two steps early. Rows i ≥ M and columns e ≥ SE
 * are not stored; S rows b ≥ M are zero-filled, never read. */
#ifndef LA_CUDA_MHLA_CAUSAL_MIX2_CUH
#define LA_CUDA_MHLA_CAUSAL_MIX2_CUH

constexpr int MX2_BM = 128, MX2_BN = 256, MX2_BK = 32, MX2_S = 4;
constexpr int MX2_LA = MX2_BK + 8, MX2_LB = MX2_BN + 8; /* row pitches (elements) */
constexpr int MX2_STAGE = MX2_BM * MX2_LA + MX2_BK * MX2_LB; /* elements */
constexpr int MX2_LC = 64 + 8; /* a warp's output staging rows (elements): 144 bytes */
/* the pipeline and 8 warps' staging rows for 32 rows each: 145,408 bytes, within sm_80's 163 KB */
constexpr size_t MX2_SMEM = sizeof(__nv_bfloat16) * (MX2_STAGE * MX2_S + 8 * 32 * MX2_LC);

/* the number of 32-wide k steps of the row tile at i0 */
__device__ __forceinline__ int mct_mix2_nk(int i0, int M) {
    const int kend = i0 + MX2_BM < M - 1 ? i0 + MX2_BM : M - 1;
    return kend > 0 ? (kend + MX2_BK - 1) / MX2_BK : 0;
}

__global__ void __launch_bounds__(256, 1)
    mct_mix2_kernel(const __nv_bfloat16 *Wp, int64_t Mp, int64_t H, int64_t Hw,
                    const __nv_bfloat16 *S, __nv_bfloat16 *Hs, int64_t M, int64_t SE) {
    extern __shared__ __align__(128) unsigned char mct_sm2[];
    __nv_bfloat16 *sm = (__nv_bfloat16 *)mct_sm2;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int li = lane % 8, lj = lane / 8, g = lane / 4, cq = lane % 4;
    /* 32-bit indices inside a head (mct_launch_bf16 checks Mp·Mp, (Mp + 32)·SE < 2^31) */
    const int Mi = (int)M, SEi = (int)SE, Mpi = (int)Mp, R = Mpi / MX2_BM;
    const int e0 = (int)blockIdx.y * MX2_BN;
    const int64_t z = blockIdx.z;
    const __nv_bfloat16 *A = Wp + (Hw == 1 ? 0 : z % H) * Mp * Mp;
    const __nv_bfloat16 *Bm = S + z * M * SE;
    /* the CTA's row tiles: the long one first, then its partner (if any) */
    const int rx = (int)blockIdx.x, ntile = R - 1 - rx != rx ? 2 : 1;
    const int ia = (R - 1 - rx) * MX2_BM, ib = rx * MX2_BM;
    const int nk0 = mct_mix2_nk(ia, Mi), nk1 = ntile == 2 ? mct_mix2_nk(ib, Mi) : 0;
    const int nt = nk0 + nk1;
    const int wr = 64 * (warp / 4), wc = 64 * (warp % 4);

    /* the thread's pieces of a step: A rows tid/4 + 64u, columns 8(tid%4)
     * (u < 2); B rows tid/32 + 8u, columns 8(tid%32) (u < 4) */
    const int ar = tid / 4, ac = 8 * (tid % 4), br = tid / 32, bc = 8 * (tid % 32);
    const bool colok = e0 + bc < SEi; /* SE % 8 == 0: a piece is in or out */
    const __nv_bfloat16 *pb = Bm + (colok ? br * SEi + e0 + bc : 0);
    const int soa = ar * MX2_LA + ac, sob = br * MX2_LB + bc;
    auto issue = [&](int t) { /* stream step t into stage t % MX2_S; always one group */
        if (t < nt) {
            const int tile = t >= nk0, kk = t - (tile ? nk0 : 0);
            __nv_bfloat16 *sA = sm + (t % MX2_S) * MX2_STAGE, *sB = sA + MX2_BM * MX2_LA;
            const __nv_bfloat16 *qa = A + ((tile ? ib : ia) + ar) * Mpi + kk * MX2_BK + ac;
            la_cp16z(&sA[soa], qa, true);
            la_cp16z(&sA[soa + 64 * MX2_LA], qa + 64 * Mpi, true);
            const __nv_bfloat16 *qb = pb + (colok ? kk * MX2_BK * SEi : 0);
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const bool ok = colok && kk * MX2_BK + br + 8 * u < Mi; /* rows past M: zeros */
                la_cp16z(&sB[sob + 8 * u * MX2_LB], ok ? qb + 8 * u * SEi : Bm, ok);
            }
        }
        la_cp_commit();
    };
#pragma unroll
    for (int t = 0; t < MX2_S - 1; t++) issue(t);

    float acc[4][8][4];
    int t = 0;
    for (int tile = 0; tile < ntile; tile++) {
        const int i0 = tile ? ib : ia, nk = tile ? nk1 : nk0;
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;
        /* the warp's products: its 64 rows hold a block, and step kk has some b < its last row */
        const int klim = i0 + wr < Mi ? i0 + wr + 63 : 0;
        for (int kk = 0; kk < nk; kk++, t++) {
            la_cp_wait<MX2_S - 2>(); /* this thread's pieces of step t have landed */
            __syncthreads();         /* everyone's; every warp is done with step t - 1 */
            issue(t + MX2_S - 1);    /* into the stage of step t - 1 */
            if (kk * MX2_BK >= klim) continue;
            const __nv_bfloat16 *a_ = sm + (t % MX2_S) * MX2_STAGE, *b_ = a_ + MX2_BM * MX2_LA;
#pragma unroll
            for (int k16 = 0; k16 < MX2_BK / 16; k16++) {
                uint32_t af[4][4];
#pragma unroll
                for (int mi = 0; mi < 4; mi++)
                    la_ldsm4(af[mi], &a_[(wr + 16 * mi + 8 * (lj & 1) + li) * MX2_LA + 16 * k16 + 8 * (lj >> 1)]);
#pragma unroll
                for (int jp = 0; jp < 4; jp++) {
                    uint32_t bf[4];
                    la_ldsm4t(bf, &b_[(16 * k16 + 8 * (lj & 1) + li) * MX2_LB + wc + 16 * jp + 8 * (lj >> 1)]);
#pragma unroll
                    for (int mi = 0; mi < 4; mi++) {
                        la_mma_bf16(acc[mi][2 * jp], af[mi], bf[0], bf[1]);
                        la_mma_bf16(acc[mi][2 * jp + 1], af[mi], bf[2], bf[3]);
                    }
                }
            }
        }
        /* the warp's 64 × 64 results through its own staging rows, so that
         * each store is 16 bytes a lane and 128 a row (the accumulator
         * layout gives 4 bytes a lane); the next tile's first stages are in
         * flight meanwhile */
        __nv_bfloat16 *cs = sm + MX2_S * MX2_STAGE + warp * 32 * MX2_LC;
        __nv_bfloat16 *C = Hs + z * M * SE;
        const int e = e0 + wc + 8 * (lane % 8); /* SE % 8 == 0: a piece is in or out */
#pragma unroll
        for (int half = 0; half < 2; half++) { /* the warp's rows 32·half + [0, 32) */
#pragma unroll
            for (int m2 = 0; m2 < 2; m2++)
#pragma unroll
                for (int hr = 0; hr < 2; hr++)
#pragma unroll
                    for (int j = 0; j < 8; j++) /* row words 36 apart: the 32 lanes hit 32 banks */
                        *(__nv_bfloat162 *)&cs[(16 * m2 + g + 8 * hr) * MX2_LC + 8 * j + 2 * cq] =
                            __floats2bfloat162_rn(acc[2 * half + m2][j][2 * hr], acc[2 * half + m2][j][2 * hr + 1]);
            __syncwarp();
#pragma unroll
            for (int u = 0; u < 8; u++) { /* rows 4u + lane/8: 8 lanes a row, one 16-byte piece each */
                const int r = 4 * u + lane / 8, i = i0 + wr + 32 * half + r;
                if (i < Mi && e < SEi) *(uint4 *)&C[i * SEi + e] = *(const uint4 *)&cs[r * MX2_LC + 8 * (lane % 8)];
            }
            __syncwarp(); /* the staging rows are free again */
        }
    }
    la_cp_wait<0>(); /* no copy in flight at exit (the empty tail groups) */
}

#endif
