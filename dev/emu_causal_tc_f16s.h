/* Part of dev/emu_causal_tc.cpp (included there, after run_mhla_case_h):
 * the fp16 causal MHLA cases, the default "mma" structure (fp32 block
 * states) and variant "mma_f16s" (fp16 block states scaled per block:
 * pass 1's σ, mct_f16s_prep_kernel, mct_mixw_f16_kernel, pass 3's τ). */

/* causal MHLA on fp16 with fp32 block states (variant mma, fp16 mixing
 * GEMM, fp16 passes 1 and 3): odd N, D 128/64/32, shared and per-head W,
 * none and per_query, permuted storage, two row tiles (M = 129) and column
 * tails, inputs ×10 / ×100 (normalized). Returns the failures. */
static int run_mhla_f16_cases() {
    int fails = 0;
    struct { int64_t D, B, N, H; int feat, norm, ph; unsigned seed; int perm, gemm; float sc; } mc[] = {
        {128, 1, 1, 1, LA_FEATURE_RELU, 0, 0, 101, 0, 1, 1.f},
        {128, 2, 63, 2, LA_FEATURE_ELU1, 1, 1, 102, 1, 1, 1.f},
        {128, 1, 65, 1, LA_FEATURE_RELU_EPS, 1, 0, 103, 0, 0, 1.f},
        {128, 1, 1000, 2, LA_FEATURE_RELU, 0, 1, 104, 1, 1, 1.f},
        {64, 1, 1, 2, LA_FEATURE_RELU1, 1, 1, 111, 1, 1, 1.f},
        {64, 1, 63, 1, LA_FEATURE_IDENTITY, 0, 0, 112, 0, 1, 1.f},
        {64, 2, 65, 1, LA_FEATURE_ELU1, 1, 1, 113, 1, 1, 1.f},
        {64, 1, 1000, 1, LA_FEATURE_RELU_EPS, 1, 0, 114, 0, 1, 1.f},
        {32, 1, 65, 2, LA_FEATURE_RELU, 1, 0, 121, 0, 1, 1.f},
        {32, 1, 1000, 1, LA_FEATURE_ELU1, 0, 1, 122, 1, 1, 1.f},
        {32, 1, 8200, 1, LA_FEATURE_RELU_EPS, 1, 1, 123, 0, 1, 1.f},
        {64, 1, 2000, 1, LA_FEATURE_RELU, 1, 0, 131, 0, 1, 10.f},
        {128, 1, 700, 1, LA_FEATURE_ELU1, 1, 1, 132, 1, 1, 100.f},
        {32, 1, 1000, 2, LA_FEATURE_RELU_EPS, 1, 0, 133, 0, 1, 100.f},
    };
    for (auto &c : mc) {
        g_D = c.D;
        fails += run_mhla_case_h(c.B, c.N, c.H, c.feat, c.norm, c.ph, c.seed, c.perm, c.gemm, c.sc);
    }
    g_D = 128;
    printf("mhla f16: %d failed\n", fails);
    return fails;
}

/* As mct_combine_f16s, with A' batches of G = BH/2 heads (so that the head
 * offsets z0 > 0 are exercised; the device takes up to 256 MB of them):
 * A' poisoned with NaN before each preparation (a GEMM read of a column the
 * preparation does not write shows as NaN), the exponents with 999. */
static void emu_combine_f16s(const std::vector<float> &W, int64_t WM, int64_t whs, int64_t H, int64_t BH, int64_t M,
                             int64_t SE, const std::vector<int> &sexp, const __half *S, __half *Hs,
                             std::vector<int> &hexp) {
    const int64_t Mp = (M + MXW_BM - 1) / MXW_BM * MXW_BM, G = BH > 1 ? BH / 2 : 1;
    std::vector<__half> Ap(G * Mp * Mp);
    std::vector<int> oexp(G * Mp);
    for (int64_t z0 = 0; z0 < BH; z0 += G) {
        const int64_t g = BH - z0 < G ? BH - z0 : G;
        std::fill(Ap.begin(), Ap.end(), __float2half_rn(NAN));
        std::fill(oexp.begin(), oexp.end(), 999);
        launch((unsigned)((g * Mp + 7) / 8), 1, 0, [&] {
            mct_f16s_prep_kernel(W.data(), WM, whs, H, z0, M, Mp, g * Mp, sexp.data(), Ap.data(), oexp.data(),
                                 hexp.data());
        });
        for (int64_t z = 0; z < g; z++) {
            g_bz = (unsigned)z;
            launch((unsigned)((Mp / MXW_BM + 1) / 2), (unsigned)((SE + MXW_BN - 1) / MXW_BN), MXW_SMEM, [&] {
                mct_mixw_f16_kernel(Ap.data(), Mp, g, S + z0 * M * SE, Hs + z0 * M * SE, M, SE, oexp.data());
            });
        }
    }
}

/* The fp16 mixing alone (A' preparation + fp16 wgmma): fp16 block states
 * S'_b with σ_b spread over [-40, 80] (block magnitudes 2^-80 .. 2^40 apart,
 * as pass 1 writes them: max |S'_b| in [2^14, 2^15], some blocks all at
 * 2^15 with positive W, where β_i is reached exactly), W positive or
 * random-signed with garbage above the diagonal and in the spare row, H''
 * poisoned; every output finite, |H''| <= 65504, and H''·2^-τ within
 * (2^-11 + i·2^-24) Σ_b |W_ib S_b| + 2^-11 |H| + i·2^-38 max_b |W_ib|
 * 2^(15-σ_b) (the subnormal A' entries) of the float64 product. */
static int run_mix_f16s_case(int64_t M, int64_t SE, int64_t BH, int64_t H, bool per_head, bool pos, bool sat,
                             unsigned seed) {
    std::mt19937 g(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::uniform_real_distribution<float> ud(pos ? 0.05f : -1.f, 1.05f);
    std::uniform_int_distribution<int> sd(-40, 80);
    const int64_t WM = M + 1, Hw = per_head ? H : 1, n = BH * M * SE;
    std::vector<float> W(Hw * WM * WM);
    for (int64_t hw = 0; hw < Hw; hw++)
        for (int64_t i = 0; i < WM; i++)
            for (int64_t j = 0; j < WM; j++)
                W[(hw * WM + i) * WM + j] = (j < i && i < M) ? ud(g) : (j >= i ? NAN : 1e30f);
    std::vector<__half> S(n), Hs(n, __float2half_rn(NAN));
    std::vector<int> sexp(BH * M), hexp(BH * M, 999);
    for (int64_t zb = 0; zb < BH * M; zb++) {
        sexp[zb] = sd(g);
        float mx = 0.f;
        std::vector<float> x(SE);
        for (auto &v : x) {
            v = sat ? 32768.f : pos ? fabsf(nd(g)) : nd(g);
            mx = std::max(mx, fabsf(v));
        }
        const float sc = sat ? 1.f : ldexpf(1.f, 14) * 1.5f / mx; /* the max in [2^14, 2^15) */
        for (int64_t e = 0; e < SE; e++) S[zb * SE + e] = __float2half_rn(x[e] * sc);
    }
    emu_combine_f16s(W, WM, per_head ? WM * WM : 0, H, BH, M, SE, sexp, S.data(), Hs.data(), hexp);
    int64_t bad = emu_errors.exchange(0), nonfin = 0, big = 0, far = 0;
    double mrel = 0;
    for (int64_t z = 0; z < BH; z++) {
        const int64_t hw = per_head ? z % H : 0;
        for (int64_t i = 0; i < M; i++) {
            if (hexp[z * M + i] == 999) bad++;
            double tmax = 0; /* the row's largest possible term: max_b |W_ib| 2^-σ_b 2^15 */
            for (int64_t b = 0; b < i; b++)
                tmax = std::max(tmax, fabs((double)W[(hw * WM + i) * WM + b]) * ldexp(32768.0, -sexp[z * M + b]));
            for (int64_t e = 0; e < SE; e++) {
                double ref = 0, sabs = 0;
                for (int64_t b = 0; b < i; b++) {
                    const double t = (double)W[(hw * WM + i) * WM + b] *
                                     ldexp((double)__half2float(S[(z * M + b) * SE + e]), -sexp[z * M + b]);
                    ref += t;
                    sabs += fabs(t);
                }
                const double h2 = __half2float(Hs[(z * M + i) * SE + e]);
                if (!std::isfinite(h2)) { nonfin++; continue; }
                if (fabs(h2) > 65504.0) big++;
                const double got = ldexp(h2, -hexp[z * M + i]);
                const double err = fabs(got - ref);
                /* A' rounds each term by at most 2^-11 (fp16's unit roundoff), H''
                 * by 2^-11 of |H|, the fp32 sums by i·2^-24 of Σ|terms|; subnormal
                 * A' by 2^-25 absolute, 2^-39 of the row's largest term */
                if (err > (0x1p-11 + (double)i * 0x1p-24) * sabs + 0x1p-11 * fabs(ref) + (double)i * 0x1p-38 * tmax +
                              1e-300)
                    far++;
                mrel = std::max(mrel, err / std::max(sabs, 1e-300));
            }
        }
    }
    const bool ok = bad == 0 && nonfin == 0 && big == 0 && far == 0;
    printf("mix-f16s M%lld SE%lld BH%lld H%lld ph%d pos%d sat%d: max err/Σ|terms| %.2e  far %lld nonfinite %lld "
           "over65504 %lld bad %lld  %s\n",
           (long long)M, (long long)SE, (long long)BH, (long long)H, per_head, pos, sat, mrel, (long long)far,
           (long long)nonfin, (long long)big, (long long)bad, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

/* variant mma_f16s end to end (gemm 4: fp16 passes 1 and 3 with the fp16
 * block states, A' batches of BH/2 heads): odd N 1, 63, 65, 1000, 4097,
 * D 128/64/32, shared and per-head W, none and per_query, permuted
 * storage, two row tiles in one CTA (N = 8200), inputs ×10 / ×100
 * (normalized: S_b past 65504, rescaled per block); then the mixing alone.
 * Within 2e-3 of float64 and twice the plain-fp16 formula's error (+ one
 * output rounding), as the fp16 "mma" rows. Returns the failures. */
static int run_mhla_f16s_cases() {
    int fails = 0;
    struct { int64_t D, B, N, H; int feat, norm, ph; unsigned seed; int perm; float sc; } mc[] = {
        {128, 1, 1, 1, LA_FEATURE_RELU, 0, 0, 201, 0, 1.f},
        {128, 2, 63, 2, LA_FEATURE_ELU1, 1, 1, 202, 1, 1.f},
        {128, 1, 65, 2, LA_FEATURE_RELU_EPS, 1, 0, 203, 0, 1.f},
        {128, 1, 1000, 2, LA_FEATURE_RELU, 0, 1, 204, 1, 1.f},
        {64, 1, 1, 2, LA_FEATURE_RELU1, 1, 1, 211, 1, 1.f},
        {64, 1, 63, 1, LA_FEATURE_IDENTITY, 0, 0, 212, 0, 1.f},
        {64, 2, 65, 1, LA_FEATURE_ELU1, 1, 1, 213, 1, 1.f},
        {64, 1, 1000, 2, LA_FEATURE_RELU_EPS, 1, 0, 214, 0, 1.f},
        {64, 1, 4097, 1, LA_FEATURE_RELU_EPS, 1, 1, 215, 1, 1.f},
        {32, 1, 65, 2, LA_FEATURE_RELU, 1, 0, 221, 0, 1.f},
        {32, 1, 1000, 1, LA_FEATURE_ELU1, 0, 1, 222, 1, 1.f},
        {32, 1, 4097, 2, LA_FEATURE_RELU, 0, 0, 223, 0, 1.f},
        {32, 1, 8200, 1, LA_FEATURE_RELU_EPS, 1, 1, 224, 0, 1.f},
        {64, 1, 2000, 1, LA_FEATURE_RELU, 1, 0, 231, 0, 10.f},
        {128, 1, 700, 1, LA_FEATURE_ELU1, 1, 1, 232, 1, 100.f},
        {32, 1, 1000, 2, LA_FEATURE_RELU_EPS, 1, 0, 233, 0, 100.f},
    };
    for (auto &c : mc) {
        g_D = c.D;
        fails += run_mhla_case_h(c.B, c.N, c.H, c.feat, c.norm, c.ph, c.seed, c.perm, 4, c.sc);
    }
    g_D = 128;
    struct { int64_t M, SE, BH, H; bool ph, pos, sat; } xc[] = {
        {1, 264, 1, 1, false, true, false},    /* one block: H = 0 */
        {65, 264, 2, 2, true, false, false},   /* per head, two A' batches */
        {129, 520, 2, 1, false, true, true},   /* two row tiles; saturated: β reached */
        {300, 264, 4, 2, true, false, false},  /* three row tiles; batches of 2 heads */
        {1000, 256, 1, 1, false, true, true},  /* eight row tiles, saturated */
        {4096, 8, 1, 1, false, true, true},    /* N = 256K's blocks, saturated: the largest β */
    };
    for (auto &x : xc)
        fails += run_mix_f16s_case(x.M, x.SE, x.BH, x.H, x.ph, x.pos, x.sat, (unsigned)(x.M * 3 + x.SE));
    printf("mhla f16s: %d failed\n", fails);
    return fails;
}

/* mma (gemm 1: fp32 block states) and mma_f16s (gemm 4) on the same
 * inputs ("mhla_f16cmp"): what the fp16 roundings of S_b and H_i cost */
static int run_mhla_f16_compare() {
    int fails = 0;
    struct { int64_t D, N, H; int feat, ph; unsigned seed; int perm; float sc; } mc[] = {
        {128, 1000, 2, LA_FEATURE_RELU, 1, 204, 1, 1.f},
        {64, 4097, 1, LA_FEATURE_RELU_EPS, 1, 215, 1, 1.f},
        {32, 8200, 1, LA_FEATURE_RELU_EPS, 1, 224, 0, 1.f},
        {64, 2000, 1, LA_FEATURE_RELU, 0, 231, 0, 10.f},
        {128, 700, 1, LA_FEATURE_ELU1, 1, 232, 1, 100.f},
    };
    for (auto &c : mc) {
        g_D = c.D;
        for (int gemm : {1, 4}) fails += run_mhla_case_h(1, c.N, c.H, c.feat, 1, c.ph, c.seed, c.perm, gemm, c.sc);
    }
    g_D = 128;
    printf("mhla f16 mma vs mma_f16s: %d failed\n", fails);
    return fails;
}
