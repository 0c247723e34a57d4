/* Part of dev/emu_causal_tc.cpp (included there, after the kernels): the
 * causal MHLA bf16 mixing GEMMs alone, "mhla_mix" (bash dev/emu_causal_tc.sh
 * DIR mhla_mix). */
/* The bf16 mixing GEMMs alone (bash dev/emu_causal_tc.sh DIR mhla_mix):
 * mct_mix2_kernel (v2) and mct_mix_bf16_kernel (v1) on random bf16 W (the
 * padded strict triangle, as mct_strict_pad_bf16_kernel writes it) and S
 * [BH][M][SE], outputs poisoned with NaN and followed by canaries, against
 * the float64 product of the same bf16 values: every element within one
 * bf16 rounding (2^-8 relative) plus fp32 summation slack, row 0 exactly
 * zero, nothing past the end written, v1 and v2 within one bf16 step of each
 * other. defer: the cp.async schedule (see g_cp_defer). */
static int run_mix_case(int64_t M, int64_t SE, int64_t BH, int64_t H, int64_t Hw, unsigned seed, bool defer,
                        bool wg) {
    std::mt19937 g(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::uniform_real_distribution<float> ud(-1.f, 1.f);
    const int64_t Mp = (M + MX_BM - 1) / MX_BM * MX_BM, n = BH * M * SE, canary = 4096;
    std::vector<__nv_bfloat16> Wp(Hw * Mp * Mp), S(n), H1(n + canary), H2(n + canary), H3(wg ? n + canary : 0);
    for (int64_t hw = 0; hw < Hw; hw++)
        for (int64_t r = 0; r < Mp; r++)
            for (int64_t c = 0; c < Mp; c++)
                Wp[(hw * Mp + r) * Mp + c] = __float2bfloat16_rn(r < M && c < r ? ud(g) : 0.f);
    for (auto &x : S) x = __float2bfloat16_rn(nd(g));
    for (auto &x : H1) x = __float2bfloat16_rn(NAN);
    for (auto &x : H2) x = __float2bfloat16_rn(NAN);
    for (auto &x : H3) x = __float2bfloat16_rn(NAN);
    for (int64_t i = n; i < n + canary; i++) H1[i] = H2[i] = __float2bfloat16_rn(12288.f);
    for (int64_t i = n; wg && i < n + canary; i++) H3[i] = __float2bfloat16_rn(12288.f);
    g_cp_defer = defer;
    for (int64_t z = 0; z < BH; z++) {
        g_bz = (unsigned)z;
        launch((unsigned)((Mp / MX2_BM + 1) / 2), (unsigned)((SE + MX2_BN - 1) / MX2_BN), MX2_SMEM,
               [&] { mct_mix2_kernel(Wp.data(), Mp, H, Hw, S.data(), H2.data(), M, SE); });
        g_gdx = (unsigned)(Mp / MX_BM);
        launch(g_gdx, (unsigned)((SE + MX_BN - 1) / MX_BN), MXB_SMEM,
               [&] { mct_mix_bf16_kernel(Wp.data(), Mp, H, Hw, S.data(), H1.data(), M, SE); });
        if (wg) /* the wgmma kernel into H2 after v2's output was checked below: see the caller */
            launch((unsigned)((Mp / MXW_BM + 1) / 2), (unsigned)((SE + MXW_BN - 1) / MXW_BN), MXW_SMEM,
                   [&] { mct_mixw_kernel(Wp.data(), Mp, H, Hw, S.data(), H3.data(), M, SE); });
    }
    g_cp_defer = false;
    int64_t bad = emu_errors.exchange(0), nonfin = 0, row0 = 0, canb = 0, far12 = 0;
    double mrel = 0, mabs = 0;
    for (int64_t i = n; i < n + canary; i++)
        canb += __bfloat162float(H1[i]) != 12288.f || __bfloat162float(H2[i]) != 12288.f ||
                (wg && __bfloat162float(H3[i]) != 12288.f);
    int64_t far13 = 0, nonfin3 = 0; /* wgmma against v1 */
    std::vector<double> ref(SE);
    for (int64_t z = 0; z < BH; z++) {
        const int64_t hw = Hw == 1 ? 0 : z % H;
        for (int64_t i = 0; i < M; i++) {
            std::fill(ref.begin(), ref.end(), 0.0);
            double sabs = 0; /* Σ |W S|: the fp32 sum's error scale */
            for (int64_t b = 0; b < i; b++) {
                const double w = __bfloat162float(Wp[(hw * Mp + i) * Mp + b]);
                for (int64_t e = 0; e < SE; e++) ref[e] += w * __bfloat162float(S[(z * M + b) * SE + e]);
                sabs += fabs(w) * 4.0;
            }
            for (int64_t e = 0; e < SE; e++) {
                const int64_t o = (z * M + i) * SE + e;
                const double h2 = __bfloat162float(H2[o]), h1 = __bfloat162float(H1[o]);
                if (!std::isfinite(h2) || !std::isfinite(h1)) { nonfin++; continue; }
                if (i == 0 && (h2 != 0.0 || h1 != 0.0)) row0++;
                const double err = fabs(h2 - ref[e]), tol = 0x1p-8 * fabs(ref[e]) + 1e-6 * sabs + 1e-30;
                if (err > tol) bad++;
                mrel = std::max(mrel, err / std::max(fabs(ref[e]), 1e-3));
                mabs = std::max(mabs, err);
                /* v1 and v2: the same sums in other orders, so one bf16 step apart at most */
                if (fabs(h2 - h1) > 0x1p-7 * std::max(fabs(h1), fabs(h2)) + 1e-6 * sabs) far12++;
                if (wg) {
                    const double h3 = __bfloat162float(H3[o]);
                    if (!std::isfinite(h3)) nonfin3++;
                    else if (fabs(h3 - h1) > 0x1p-7 * std::max(fabs(h1), fabs(h3)) + 1e-6 * sabs ||
                             (i == 0 && h3 != 0.0))
                        far13++;
                }
            }
        }
    }
    const bool ok = bad == 0 && nonfin == 0 && row0 == 0 && canb == 0 && far12 == 0 && far13 == 0 && nonfin3 == 0;
    printf("mix M%lld SE%lld BH%lld H%lld Hw%lld %s: max abs err %.2e, max rel %.2e  bad %lld nonfinite %lld "
           "row0 %lld canary %lld v1-v2 %lld",
           (long long)M, (long long)SE, (long long)BH, (long long)H, (long long)Hw, defer ? "deferred" : "sync",
           mabs, mrel, (long long)bad, (long long)nonfin, (long long)row0, (long long)canb, (long long)far12);
    if (wg) printf(" v1-wgmma %lld nonfinite %lld", (long long)far13, (long long)nonfin3);
    printf("  %s\n", ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}
static int run_mix_cases() {
    struct { int64_t M, SE, BH, H, Hw; } c[] = {
        {1, 1056, 1, 1, 1},   /* one block: no k step, H = 0 */
        {2, 520, 1, 1, 1},    /* one step; a column tile holding one 8-wide piece */
        {33, 264, 2, 2, 2},   /* per-head W */
        {64, 1056, 1, 1, 1},  /* D = 32's SE */
        {129, 1056, 2, 1, 1}, /* two row tiles in one CTA */
        {300, 520, 4, 2, 2},  /* three row tiles: a pair and the middle alone; per head */
        {512, 264, 1, 1, 1},  /* N = 32K's M: two pairs */
        {1000, 256, 1, 1, 1}, /* eight row tiles (N = 128K: sixteen), the last one partial */
    };
    int fails = 0;
    for (bool defer : {false, true})
        for (auto &x : c)
            if (!defer || x.M <= 300) /* (the emulator takes ~0.1 s a CTA step) */
                fails += run_mix_case(x.M, x.SE, x.BH, x.H, x.Hw, (unsigned)(x.M * 7 + x.SE), defer, !defer);
    printf("mhla mix: %d failed\n", fails);
    return fails;
}

