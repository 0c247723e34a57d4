/* The mixing of causal MHLA variant "mma_f16s" (fp16 inputs, fp16 block
 * states at every point; mhla_causal_tc.cu includes this inside its
 * anonymous namespace after mct_combine). With σ_b from pass 1 (S'_b =
 * fp16(S_b·2^σ_b), the block's max |[S_b | z_b]| in [2^14, 2^15), so
 * |S'_b| <= 2^15), H_i = Σ_{b<i} W_ib S_b = Σ_b (W_ib 2^-σ_b) S'_b:
 *   1. mct_f16s_prep_kernel, per head z and row i: ρ_i putting
 *      max_b |W_ib 2^-σ_b| in [2^14, 2^15), A'_ib = fp16(W_ib 2^(ρ_i - σ_b))
 *      (the strict triangle of the row's 128-row tile, zeros elsewhere),
 *      β_i = 2^15 Σ_b |A'_ib| >= |2^ρ_i H_i| (exactly: |S'_b| <= 2^15), and
 *      u_i putting β_i in [2^14, 2^15) (0 for β_i = 0: the row is zero);
 *      oexp[i] = u_i, hexp[i] = τ_i = ρ_i + u_i;
 *   2. mct_mixw_f16_kernel (mhla_causal_mix_wg.cuh, fp16 wgmma, fp32
 *      accumulation): acc_i = Σ_b A'_ib S'_b = 2^ρ_i H_i, written as
 *      fp16(acc_i·2^u_i) = fp16(H_i·2^τ_i). No overflow: |acc_i| <= β_i
 *      and β_i·2^u_i < 2^15, so |acc_i 2^u_i| < 2^15·(1 + the fp32 sum's
 *      relative error, < 2^-8 for any k) < 65504;
 *   3. pass 3 reads H_i·2^τ_i and multiplies by 2^-τ_i in fp32 (exact).
 * Subnormals: A'_ib below 2^-14 (2^28 under the row's max) and outputs
 * below 2^-14 (2^28 under β_i·2^u_i >= 2^14, the bound of Σ |terms|) keep
 * an absolute error <= 2^-25, 2^-39 of that scale: far below the relative
 * 2^-11 of the fp16 roundings of the terms themselves. ρ and σ arithmetic
 * in double (range 2^±1022, exact power-of-two scaling of an fp32 W, so the
 * double-to-float step is exact wherever the fp16 result is not zero).
 * Bytes: A' is [G][Mp][Mp] fp16 for G heads at a time (mct_f16s_heads),
 * written for the columns the GEMM reads (< the tile's last row + 1). */
#ifndef LA_CUDA_MHLA_CAUSAL_MIX_F16S_CUH
#define LA_CUDA_MHLA_CAUSAL_MIX_F16S_CUH

/* one warp per row: rows z·Mp + i of the launch's heads z < G (global head
 * z0 + z; W head hw = (z0 + z) % H with whs = WM·WM, shared with whs = 0);
 * W packed [Hw][WM][WM] fp32 (only b < i < M read), sexp [BH][M] */
__global__ void mct_f16s_prep_kernel(const float *W, int64_t WM, int64_t whs, int64_t H, int64_t z0,
                                     int64_t M, int64_t Mp, int64_t rows, const int *sexp, __half *Ap,
                                     int *oexp, int *hexp) {
    const int64_t r = (int64_t)blockIdx.x * 8 + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return; /* whole warps */
    const int64_t z = r / Mp, i = r % Mp, zg = z0 + z;
    const float *w = W + (zg % H) * whs + (i < M ? i : 0) * WM;
    const int *sg = sexp + zg * M;
    const int64_t nb = i < M ? i : 0;                  /* b < i: the strict triangle */
    const int64_t cend = (i / MXW_BM + 1) * MXW_BM;    /* columns the GEMM reads: < the tile's end */
    double m = 0.0;
    for (int64_t b = lane; b < nb; b += 32) m = fmax(m, fabs(ldexp((double)w[b], -sg[b])));
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) m = fmax(m, __shfl_xor_sync(0xffffffffu, m, o));
    int e = 0;
    const int rho = m > 0.0 && m <= 1.7976931348623157e308 ? (frexp(m, &e), 15 - e) : 0;
    double beta = 0.0;
    __half *arow = Ap + r * Mp;
    for (int64_t b = 2 * lane; b < cend; b += 64) { /* cend % 64 == 0: pairs */
        float v[2];
#pragma unroll
        for (int u = 0; u < 2; u++)
            v[u] = b + u < nb ? (float)ldexp((double)w[b + u], rho - sg[b + u]) : 0.f;
        const __half2 h = __floats2half2_rn(v[0], v[1]);
        *(__half2 *)&arow[b] = h;
        beta += fabs((double)__low2float(h)) + fabs((double)__high2float(h));
    }
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) beta += __shfl_xor_sync(0xffffffffu, beta, o);
    beta *= 32768.0;
    const int uo = beta > 0.0 && beta <= 1.7976931348623157e308 ? (frexp(beta, &e), 15 - e) : 0;
    if (lane == 0) {
        oexp[r] = uo;
        if (i < M) hexp[zg * M + i] = rho + uo;
    }
}

#endif
