/* The output pass of the linear family's tensor-core forward
 * (lf_tc_output_kernel): included by linfam_tc.cu inside its anonymous
 * namespace, after lf_tcg and the feature maps; dev/emu_mhla_fwd.sh inlines
 * it at the same place for the host emulator. */
/* grid (M·groups, BH), 256 threads, 2 CTAs per SM: a CTA copies its block's S̃
 * (bf16) once, then runs up to `tpc` tiles of FO tokens through TS stages.
 * A thread copies chunk tid % CK of rows tid/CK + (NT/CK)·u of each Q tile,
 * applies φ to it in place and forms its part of the row's φ(q)·z̃ (z̃ of its
 * 8 columns stays in registers; the CK threads of a row are neighbouring
 * lanes, a shuffle sums them). Warp w: rows 32(w % WRO).., columns
 * CW(w / WRO)..; lane l finishes row l/2, columns (CW/2)(l%2).. of each
 * 16-row fragment through a per-warp staging tile. */
/* The power of two 2^sh that puts a largest magnitude m into [2^14, 2^15):
 * sc = 2^sh, inv = 2^-sh; both 1 for m = 0, Inf or NaN (fp16 output pass). */
__device__ __forceinline__ void lf_f16_scale(float m, float &sc, float &inv) {
    sc = inv = 1.f;
    if (m > 0.f && m <= 3.402823466e38f) {
        int ex;
        (void)frexpf(m, &ex); /* m = f·2^ex, f ∈ [0.5, 1) */
        const int sh = min(126, max(-126, 15 - ex));
        sc = ldexpf(1.f, sh);
        inv = ldexpf(1.f, -sh);
    }
}
/* Row r of the denominators' B operand in fp16: [hi(zs) lo(zs) 0 …], hi + lo
 * (rel. 2^-22) of the scaled z̃ value zs. */
__device__ __forceinline__ void lf_zrow_f16(__half *Zs, int r, float zs) {
    const __half hi = __float2half_rn(zs), lo = __float2half_rn(zs - __half2float(hi));
    uint4 row = make_uint4(0, 0, 0, 0);
    __half2 hl;
    hl.x = hi;
    hl.y = lo;
    row.x = *(const uint32_t *)&hl;
    *(uint4 *)&Zs[r * 8] = row;
}

/* the element type of S̃ in the output pass: bf16, fp32 for fp16 inputs, or
 * fp16 for fp16 inputs with 16-bit summaries (S16: tc_bf16s, rows under a.rsc) */
template <typename T, bool S16 = false> struct lf_pbt { using type = __nv_bfloat16; };
template <> struct lf_pbt<__half, false> { using type = float; };
template <> struct lf_pbt<__half, true> { using type = __half; };
template <typename T, int DK, int DV, bool S16 = false>
__global__ void __launch_bounds__(NT, 2) lf_tc_output_kernel(lf_args a, const typename lf_pbt<T, S16>::type *Pb,
                                                             const float *Pz, int64_t groups,
                                                             int64_t tpc) {
    using G = lf_tcg<DK, DV>;
    using X = la_t16<T>;
    using T2 = typename X::T2;
    constexpr int FO = G::FO, LK = G::LK, LV = G::LV, CK = G::CK, NJ = G::NJO;
    const lf_problem &P = a.P;
    extern __shared__ __align__(128) unsigned char lf_tc_sm[];
    T *Ss = (T *)lf_tc_sm;                                /* [DK][LV]       */
    T *Qst = Ss + DK * LV;                                /* TS × [FO][LK]  */
    float *stgs = (float *)(Qst + TS * FO * LK);          /* 8 × [16][SLD] bf16 */
    float *dens = stgs + 8 * G::STG / 2;                  /* TS × [FO]      */
    T *Zs = (T *)(dens + TS * FO);                        /* [DK][8]: hi(z̃), lo(z̃), 0… */

    const int64_t bh = blockIdx.y, b = bh / P.H, h = bh % P.H;
    const int64_t blk = blockIdx.x / groups, g = blockIdx.x % groups;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    int64_t lo[3], cnt[3];
    lf_box(a.G, blk, lo, cnt);
    const lf_boxi bx = lf_boxi_of(a.G, lo, cnt);
    const int64_t total = cnt[0] * cnt[1] * cnt[2];
    const int64_t wbeg = g * tpc * FO;
    if (wbeg >= total) return; /* whole CTA */
    const int64_t wend = min(total, wbeg + tpc * FO);
    const int nt = (int)((wend - wbeg + FO - 1) / FO);
    const int c8 = (tid % CK) * 8, r0 = tid / CK;
    const T *qb = (const T *)P.q.data + b * P.q.nb[0] + h * P.q.nb[2] + c8;

    if constexpr (!X::is_f16 || S16) { /* S̃ (16-bit) joins the first copy group */
        const T *src = (const T *)Pb + ((size_t)bh * a.M + blk) * DK * DV;
        constexpr int NCH = DK * DV / 8; /* 16-B chunks of S̃ */
#pragma unroll
        for (int u = 0; u < (NCH + NT - 1) / NT; u++) {
            const int e = tid + u * NT, r = e / (DV / 8), c = (e % (DV / 8)) * 8;
            if (NCH % NT == 0 || e < NCH) la_cp16z(&Ss[r * LV + c], src + r * DV + c, true);
        }
    }
    auto issue = [&](int t) {
        if (t < nt) {
            T *Qs = Qst + (t % TS) * FO * LK;
#pragma unroll
            for (int u = 0; u < G::UQ; u++) {
                const int r = r0 + (NT / CK) * u;
                const int64_t w = wbeg + (int64_t)t * FO + r;
                const bool ok = w < wend;
                const int64_t tk = ok ? lf_tok(bx, (unsigned)w) : 0;
                la_cp16z(&Qs[r * LK + c8], qb + tk * P.q.nb[1], ok);
            }
        }
        la_cp_commit();
    };
#pragma unroll
    for (int t = 0; t < TS - 1; t++) issue(t);

    /* fp16: S̃ and z̃ are sums over up to N tokens and can pass 65504, so the
     * mix keeps them in fp32 and both enter their products scaled by one
     * power of two that puts the larger of their largest magnitudes in
     * [2^14, 2^15) (lf_f16_scale: exact; undone in fp32 on the output,
     * sinv; one scale for both: one live register, and fp16 keeps each
     * value's relative precision down to 2^-24 of the scaled maximum): S̃
     * rounded to fp16, z̃ (per_query) as the bf16 path's [hi lo 0 …] rows in
     * fp16 (hi + lo: rel. 2^-22). A NaN is kept (fmaxf skips it), an Inf
     * leaves the scale at 1. Plain stores: visible after the loop's first
     * barrier. The maxima meet in the staging tiles, first written after it. */
    /* sinv, read where it is used (fewer live registers); S16: sinvs[0] undoes
     * S̃'s scale (its row's a.rsc: S̃ is copied as it is), sinvs[1] z̃'s own */
    float *sinvs = (float *)(Zs + DK * 8);
    if constexpr (S16) {
        const bool pq = P.norm == LF_NORM_PER_QUERY;
        const float zv = pq && tid < DK ? Pz[((size_t)bh * a.M + blk) * DK + tid] : 0.f;
        const int sh = la_exp16(la_cta_max<NT / 32>(fabsf(zv), stgs, tid), -126, 126);
        if (tid == 0) {
            sinvs[0] = a.rsc[(size_t)bh * a.M + blk];
            sinvs[1] = la_pow2f(-sh);
        }
        if (pq && tid < DK) lf_zrow_f16((__half *)Zs, tid, zv * la_pow2f(sh));
    } else if constexpr (X::is_f16) {
        float sinv;
        const float *src = Pb + ((size_t)bh * a.M + blk) * DK * DV;
        const bool pq = P.norm == LF_NORM_PER_QUERY;
        const float zv = pq && tid < DK ? Pz[((size_t)bh * a.M + blk) * DK + tid] : 0.f;
        float mx = 0.f, mz = fabsf(zv);
        for (int e = tid; e < DK * DV / 4; e += NT) {
            const float4 x = __ldg((const float4 *)src + e);
            mx = fmaxf(mx, fmaxf(fmaxf(fabsf(x.x), fabsf(x.y)), fmaxf(fabsf(x.z), fabsf(x.w))));
        }
        mx = la_cta_max<NT / 32>(fmaxf(mx, mz), stgs, tid);
        float sc;
        lf_f16_scale(mx, sc, sinv);
        if (tid == 0) *sinvs = sinv;
        if (pq && tid < DK) lf_zrow_f16((__half *)Zs, tid, zv * sc);
        for (int e = tid; e < DK * DV / 8; e += NT) {
            const int r = e / (DV / 8), c = (e % (DV / 8)) * 8;
            const float4 x0 = __ldg((const float4 *)(src + r * DV + c));
            const float4 x1 = __ldg((const float4 *)(src + r * DV + c + 4));
            const float f[8] = {x0.x * sc, x0.y * sc, x0.z * sc, x0.w * sc,
                                x1.x * sc, x1.y * sc, x1.z * sc, x1.w * sc};
            *(uint4 *)&Ss[r * LV + c] = lf_x8<T>::pack(f);
        }
    }

    const bool phi_id = P.fq.kind == LA_FEATURE_IDENTITY && P.fq.pre == 1.f && P.fq.post == 1.f;
    const lf_phimap phq = lf_phi_of(P.fq);
    /* `true &&`: as in lf_tc_summary_kernel */
    const bool phq_bf16 = true && lf_phi_bf16_ok(phq);
    const bool per_query = P.norm == LF_NORM_PER_QUERY, rv = P.norm == LF_NORM_RELEASED_VISION;
    /* per_query: the denominators come out of the tensor cores as one more
     * n-tile, φ(Q)·[hi(z̃) lo(z̃) 0 …] (z̃ split into two bf16 parts: rel.
     * 2^-16), with the same bf16 φ(Q) the numerator uses; written here, visible
     * after the first barrier of the loop. */
    /* fp16: the same n-tile on fp16 rows of z̃ scaled into range (above).
     * `true &&`: the form the bf16 kernel was compiled from (the same PTX) */
    const bool mma_den = true && per_query;
    if constexpr (!X::is_f16) if (mma_den && tid < DK) {
        const float zv = Pz[((size_t)bh * a.M + blk) * DK + tid];
        const __nv_bfloat16 hi = __float2bfloat16_rn(zv);
        const __nv_bfloat16 lo = __float2bfloat16_rn(zv - __bfloat162float(hi));
        uint4 row = make_uint4(0, 0, 0, 0);
        __nv_bfloat162 hl;
        hl.x = hi;
        hl.y = lo;
        row.x = *(const uint32_t *)&hl;
        *(uint4 *)&Zs[tid * 8] = row;
    }
    const int rw = 32 * (warp % G::WRO), cw = G::CW * (warp / G::WRO), half = lane % 2;
    float *stgw = stgs + warp * (G::STG / 2); /* this warp's staging tile */
    T *out = (T *)P.out.data + b * P.out.nb[0] + h * P.out.nb[2];

    for (int t = 0; t < nt; t++) {
        la_cp_wait<TS - 2>(); /* this thread's copies of tile t (and of S̃) have landed */
        T *Qs = Qst + (t % TS) * FO * LK;
        float *den = dens + (t % TS) * FO; /* output scale per row */
        const int64_t wt = wbeg + (int64_t)t * FO;
        if (phq_bf16) {
#pragma unroll
            for (int u = 0; u < G::UQ; u++) lf_phi8_bf16(&Qs[(r0 + (NT / CK) * u) * LK + c8], phq);
        } else if (!phi_id) {
#pragma unroll
            for (int u = 0; u < G::UQ; u++) lf_phi8_inplace<T>(&Qs[(r0 + (NT / CK) * u) * LK + c8], phq);
        }
        if (rv) { /* Σ_b W[i,b] (q̃ at this position of block b)·z_b, CK lanes per row */
#pragma unroll
            for (int u = 0; u < G::UQ; u++) {
                const int r = r0 + (NT / CK) * u;
                const float sacc = lf_sumc<CK>(lf_rv_part<CK>(a, bh, h, blk, wt + r, wend, tid));
                if ((tid & (CK - 1)) == 0) den[r] = 1.f / (sacc + P.eps);
            }
        }
        __syncthreads(); /* tile t, its scales (and S̃) complete; tile t-1 consumed */
        issue(t + TS - 1); /* into the stage of tile t-1 */

        /* warp tile: tokens rw + [0,32) × columns cw + [0,CW); A = φ(Q) rows
         * (plain ldmatrix), B = S̃ [d][dv] rows (.trans) */
        const int lr = lane % 8, lm = lane / 8, g = lane / 4, t2 = 2 * (lane % 4);
        float acc[2][NJ][4], dacc[2][4];
#pragma unroll
        for (int i = 0; i < 2; i++) {
#pragma unroll
            for (int j = 0; j < NJ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;
#pragma unroll
            for (int e = 0; e < 4; e++) dacc[i][e] = 0.f;
        }
#pragma unroll
        for (int kk = 0; kk < DK; kk += 16) {
            uint32_t af[2][4], bf[NJ / 2][4];
#pragma unroll
            for (int i = 0; i < 2; i++)
                la_ldsm4(af[i], &Qs[(rw + 16 * i + lr + 8 * (lm & 1)) * LK + kk + 8 * (lm >> 1)]);
#pragma unroll
            for (int jp = 0; jp < NJ / 2; jp++)
                la_ldsm4t(bf[jp], &Ss[(kk + lr + 8 * (lm & 1)) * LV + cw + 16 * jp + 8 * (lm >> 1)]);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int jp = 0; jp < NJ / 2; jp++) {
                    X::mma(acc[i][2 * jp], af[i], bf[jp][0], bf[jp][1]);
                    X::mma(acc[i][2 * jp + 1], af[i], bf[jp][2], bf[jp][3]);
                }
            if (mma_den) { /* rows kk + [0,16) of Zs: lanes 0-15 give the addresses */
                uint32_t zb[2];
                la_ldsm2t(zb, &Zs[(kk + (lane & 15)) * 8]);
#pragma unroll
                for (int i = 0; i < 2; i++) X::mma(dacc[i], af[i], zb[0], zb[1]);
            }
        }
        /* scale, round to bf16 into the warp's staging tile [16][SLD], then
         * 16-byte stores: lane → row lane/2, columns (CW/2)(lane%2) + [0, CW/2) */
        constexpr int SLD = G::SLD, CH = G::CW / 16; /* 16-B chunks per lane */
        T *stg = (T *)stgw;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int rr = rw + 16 * i;
            float d0, d1;
            if (mma_den) { /* columns 0, 1 of the den tile sit in lane 4g (t = 0) */
                float s0 = __shfl_sync(0xffffffffu, dacc[i][0] + dacc[i][1], lane & ~3);
                float s1 = __shfl_sync(0xffffffffu, dacc[i][2] + dacc[i][3], lane & ~3);
                if constexpr (X::is_f16) { /* undo z̃'s scale */
                    s0 *= sinvs[S16 ? 1 : 0];
                    s1 *= sinvs[S16 ? 1 : 0];
                }
                d0 = P.den_scale / (s0 * P.den_scale + P.eps);
                d1 = P.den_scale / (s1 * P.den_scale + P.eps);
            } else {
                d0 = (per_query || rv) ? den[rr + g] : 1.f;
                d1 = (per_query || rv) ? den[rr + g + 8] : 1.f;
            }
            if constexpr (X::is_f16) { /* undo S̃'s scale */
                const float sinv = *sinvs;
                d0 *= sinv;
                d1 *= sinv;
            }
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                *(T2 *)&stg[g * SLD + 8 * j + t2] = X::pack2(acc[i][j][0] * d0, acc[i][j][1] * d0);
                *(T2 *)&stg[(g + 8) * SLD + 8 * j + t2] = X::pack2(acc[i][j][2] * d1, acc[i][j][3] * d1);
            }
            __syncwarp();
            const int row = rr + lane / 2;
            const int64_t wpos = wt + row;
            if (wpos < wend) {
                const int64_t tk = lf_tok(bx, (unsigned)wpos);
                T *orow = out + tk * P.out.nb[1] + cw + half * (G::CW / 2);
                const uint4 *sp = (const uint4 *)&stg[(lane / 2) * SLD + half * (G::CW / 2)];
#pragma unroll
                for (int c = 0; c < CH; c++) ((uint4 *)orow)[c] = sp[c];
            }
            __syncwarp();
        }
    }
}
