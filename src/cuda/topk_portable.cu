/* The first top-k kernel, tk_kernel_old: one CTA per row, a radix select
 * over 64-bit composite keys, then a bitonic sort (described in topk.cu's
 * file comment). Variant "portable" of family "topk": simple and exact, an
 * independent cross-check of t3_kernel. */
#include "topk_common.cuh"

template <bool GATHER>
__global__ void __launch_bounds__(TK_THREADS) tk_kernel_old(la_sp_topk_args a) {
    extern __shared__ uint64_t tk_buf[];
    __shared__ uint32_t hist[2048];
    __shared__ uint32_t warp_tot[TK_THREADS / 32];
    __shared__ uint32_t s_total, s_above, s_bin, s_nA, s_nC;

    const int64_t r = blockIdx.x;
    const int tid = threadIdx.x;
    int64_t lo = 0, hi = a.L;
    if (a.use_range) la_sp_row_range(a.range, r, &lo, &hi);
    const float *row = a.scores + r * a.ld;
    const int32_t *blocks = GATHER ? a.blocks + r * a.blocks_ld : nullptr;
    int32_t *out = a.out + r * a.out_ld;

    auto token_of = [&](int64_t p) { return tk_token<GATHER>(blocks, a.B, p); };

    uint64_t prefix = 0, mask = 0;
    uint32_t need = 0, kk = 0, cnt = 0;
    const int shifts[6] = {53, 42, 31, 20, 9, 0};
    const int widths[6] = {11, 11, 11, 11, 11, 9};
    int pass = 0;
    uint64_t *cand = tk_buf + LA_SP_TOPK_MAX;
    bool fast_ok = false;
    /* Sampled threshold (long rows): the score of sample rank r, chosen so
     * that about 1.5k + 256 keys of the row lie above it, filters the row in
     * ONE pass into shared memory; the exact selection then runs there. If
     * the guess misses (fewer than k above, or more than TK_CAP), fall back
     * to the radix passes over the row. */
    const int64_t nrow = hi - lo;
    if (nrow >= 4 * TK_SAMPLE && a.k * 2 <= nrow) {
        uint32_t *samp = (uint32_t *)cand;
        for (int i = tid; i < TK_SAMPLE; i += TK_THREADS) {
            const int64_t p = lo + ((int64_t)i * nrow) / TK_SAMPLE;
            const float f = row[p * a.cs];
            samp[i] = tk_valid(f) ? tk_fkey(f) : 0u;
        }
        for (int i = tid; i < 2048; i += TK_THREADS) hist[i] = 0;
        __syncthreads();
        for (int i = tid; i < TK_SAMPLE; i += TK_THREADS)
            if (samp[i]) atomicAdd(&hist[samp[i] >> 21], 1u);
        __syncthreads();
        uint32_t vs = 0;
        for (int i = tid; i < 2048; i += TK_THREADS) vs += hist[i];
        vs = __reduce_add_sync(0xffffffffu, vs);
        if ((tid & 31) == 0) warp_tot[tid >> 5] = vs;
        __syncthreads();
        vs = 0;
        for (int w = 0; w < TK_THREADS / 32; w++) vs += warp_tot[w];
        __syncthreads();
        const uint32_t r = (uint32_t)(((double)a.k * 1.5 + 256.0) * TK_SAMPLE / (double)nrow) + 1;
        if (r < vs) {
            tk_find_bin(hist, 2048, r, warp_tot, &s_total, &s_bin, &s_above);
            const uint32_t b1 = s_bin, r2 = r - s_above;
            for (int i = tid; i < 2048; i += TK_THREADS) hist[i] = 0;
            __syncthreads();
            for (int i = tid; i < TK_SAMPLE; i += TK_THREADS)
                if (samp[i] && (samp[i] >> 21) == b1) atomicAdd(&hist[(samp[i] >> 10) & 2047u], 1u);
            __syncthreads();
            tk_find_bin(hist, 2048, r2, warp_tot, &s_total, &s_bin, &s_above);
            const uint32_t tau = (b1 << 21) | (s_bin << 10);
            if (tid == 0) {
                s_nA = 0;
                s_nC = 0;
            }
            __syncthreads();
            uint32_t nvalid = 0;
            const int lane = tid & 31;
            tk_scan(row, a.cs, lo, hi, [&](int64_t p, float f) {
                bool in = false;
                uint32_t u = 0;
                if (tk_valid(f)) {
                    nvalid++;
                    u = tk_fkey(f);
                    in = u >= tau;
                }
                const unsigned am = __activemask();
                const unsigned bi = __ballot_sync(am, in);
                if (!bi) return;
                const int leader = __ffs(am) - 1;
                uint32_t b0 = 0;
                if (lane == leader) b0 = atomicAdd(&s_nC, (uint32_t)__popc(bi));
                b0 = __shfl_sync(am, b0, leader) + __popc(bi & ((1u << lane) - 1u));
                if (in && b0 < TK_CAP) cand[b0] = ((uint64_t)u << 32) | (uint32_t)~token_of(p);
            });
            nvalid = __reduce_add_sync(0xffffffffu, nvalid);
            if (lane == 0) warp_tot[tid >> 5] = nvalid;
            __syncthreads();
            nvalid = 0;
            for (int w = 0; w < TK_THREADS / 32; w++) nvalid += warp_tot[w];
            kk = (uint32_t)min((int64_t)nvalid, a.k);
            const uint32_t nin = s_nC;
            __syncthreads();
            if (kk == 0) {
                for (int64_t i = tid; i < a.k; i += TK_THREADS) out[i * a.out_cs] = -1;
                return;
            }
            if (nin >= kk && nin <= TK_CAP) {
                fast_ok = true;
                need = kk;
                cnt = nin;
            }
        }
    }
    if (!fast_ok) {
    /* global passes: narrow the k-th key's bin until it fits in shared memory */
    for (; pass < 6; pass++) {
        const int sh = shifts[pass], nbins = 1 << widths[pass];
        for (int i = tid; i < 2048; i += TK_THREADS) hist[i] = 0;
        __syncthreads();
        const uint64_t pm = mask, pp = prefix;
        const bool score_digit = sh >= 32; /* digit and prefix within the score bits */
        const uint32_t pm32 = (uint32_t)(pm >> 32), pp32 = (uint32_t)(pp >> 32);
        tk_scan(row, a.cs, lo, hi, [&](int64_t p, float f) {
            if (!tk_valid(f)) return;
            uint32_t bin;
            if (score_digit) {
                const uint32_t u = tk_fkey(f);
                if ((u & pm32) != pp32) return;
                bin = (u >> (sh - 32)) & (uint32_t)(nbins - 1);
            } else {
                uint64_t key = ((uint64_t)tk_fkey(f) << 32) | (uint32_t)~token_of(p);
                if ((key & pm) != pp) return;
                bin = (uint32_t)(key >> sh) & (uint32_t)(nbins - 1);
            }
            /* many scores share the first digit: aggregate equal bins of a warp */
            uint32_t peers = __match_any_sync(__activemask(), bin);
            if ((threadIdx.x & 31) == (__ffs(peers) - 1)) atomicAdd(&hist[bin], __popc(peers));
        });
        __syncthreads();
        if (pass == 0) {
            uint32_t tot = 0;
            for (int i = tid; i < 2048; i += TK_THREADS) tot += hist[i];
            tot = __reduce_add_sync(0xffffffffu, tot);
            if ((tid & 31) == 0) warp_tot[tid >> 5] = tot;
            __syncthreads();
            if (tid == 0) {
                uint32_t t = 0;
                for (int w = 0; w < TK_THREADS / 32; w++) t += warp_tot[w];
                s_total = t;
            }
            __syncthreads();
            kk = (uint32_t)min((int64_t)s_total, a.k);
            need = kk;
            if (kk == 0) break;
        }
        tk_find_bin(hist, nbins, need, warp_tot, &s_total, &s_bin, &s_above);
        const uint32_t bin = s_bin;
        need -= s_above;
        prefix |= (uint64_t)bin << sh;
        mask |= (uint64_t)(nbins - 1) << sh;
        cnt = hist[bin];
        __syncthreads(); /* hist is cleared at the next pass */
        if (cnt <= TK_CAP) {
            pass++;
            break;
        }
    }
    if (kk == 0) {
        for (int64_t i = tid; i < a.k; i += TK_THREADS) out[i * a.out_cs] = -1;
        return;
    }
    /* collect: keys above the bin (exactly kk - need of them) to buf[0..),
     * the bin's members to cand[0..cnt) */
    if (tid == 0) {
        s_nA = 0;
        s_nC = 0;
    }
    __syncthreads();
    {
        const uint64_t pm = mask, pp = prefix;
        const int lane = tid & 31;
        tk_scan(row, a.cs, lo, hi, [&](int64_t p, float f) {
            bool ab = false, cd = false;
            uint64_t key = 0;
            if (tk_valid(f)) {
                key = ((uint64_t)tk_fkey(f) << 32) | (uint32_t)~token_of(p);
                const uint64_t mk = key & pm;
                ab = mk > pp;
                cd = mk == pp;
            }
            const unsigned am = __activemask();
            const unsigned ba = __ballot_sync(am, ab), bc = __ballot_sync(am, cd);
            if (!(ba | bc)) return;
            const int leader = __ffs(am) - 1;
            uint32_t b0 = 0, b1 = 0;
            if (lane == leader) {
                if (ba) b0 = atomicAdd(&s_nA, (uint32_t)__popc(ba));
                if (bc) b1 = atomicAdd(&s_nC, (uint32_t)__popc(bc));
            }
            b0 = __shfl_sync(am, b0, leader);
            b1 = __shfl_sync(am, b1, leader);
            const unsigned lt = (1u << lane) - 1u;
            if (ab) tk_buf[b0 + __popc(ba & lt)] = key;
            if (cd) cand[b1 + __popc(bc & lt)] = key;
        });
    }
    __syncthreads();
    } /* !fast_ok */
    /* refine inside shared memory until every remaining candidate is taken */
    uint32_t nc = cnt;
    for (; need < nc && pass < 6; pass++) {
        const int sh = shifts[pass], nbins = 1 << widths[pass];
        for (int i = tid; i < 2048; i += TK_THREADS) hist[i] = 0;
        __syncthreads();
        for (uint32_t i = tid; i < nc; i += TK_THREADS)
            atomicAdd(&hist[(uint32_t)(cand[i] >> sh) & (uint32_t)(nbins - 1)], 1u);
        __syncthreads();
        tk_find_bin(hist, nbins, need, warp_tot, &s_total, &s_bin, &s_above);
        const uint32_t bin = s_bin;
        need -= s_above;
        uint64_t r[TK_CAP / TK_THREADS];
#pragma unroll
        for (int j = 0; j < TK_CAP / TK_THREADS; j++) {
            const uint32_t i = tid + j * TK_THREADS;
            r[j] = i < nc ? cand[i] : 0;
        }
        if (tid == 0) s_nC = 0;
        __syncthreads();
#pragma unroll
        for (int j = 0; j < TK_CAP / TK_THREADS; j++) {
            const uint32_t i = tid + j * TK_THREADS;
            if (i >= nc) continue;
            const uint32_t d = (uint32_t)(r[j] >> sh) & (uint32_t)(nbins - 1);
            if (d > bin) tk_buf[atomicAdd(&s_nA, 1u)] = r[j];
            else if (d == bin) cand[atomicAdd(&s_nC, 1u)] = r[j];
        }
        __syncthreads();
        nc = s_nC;
    }
    /* all nc remaining candidates are selected: append them */
    const uint32_t nA = s_nA;
    for (uint32_t i = tid; i < nc; i += TK_THREADS) tk_buf[nA + i] = cand[i];
    const uint32_t n = kk;
    uint32_t n2 = 1;
    while (n2 < n) n2 <<= 1;
    for (uint32_t i = n + tid; i < n2; i += TK_THREADS) tk_buf[i] = 0;
    __syncthreads();
    /* bitonic sort of the kk selected keys, descending */
    for (uint32_t size = 2; size <= n2; size <<= 1) {
        for (uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
            for (uint32_t i = tid; i < n2 / 2; i += TK_THREADS) {
                uint32_t pos = 2 * i - (i & (stride - 1));
                uint64_t x = tk_buf[pos], y = tk_buf[pos + stride];
                bool desc = (pos & size) == 0;
                if ((x < y) == desc) {
                    tk_buf[pos] = y;
                    tk_buf[pos + stride] = x;
                }
            }
            __syncthreads();
        }
    }
    for (int64_t i = tid; i < a.k; i += TK_THREADS)
        out[i * a.out_cs] = i < (int64_t)kk ? (int32_t)~(uint32_t)tk_buf[i] : -1;
}

la_status la_sp_topk_portable(const la_sp_topk_args &a, const la_context *ctx, cudaStream_t s) {
    const size_t smem = TK_BUF * sizeof(uint64_t);
    if (a.blocks) {
        LA_TRY(la_cu_func_smem(ctx, (const void *)tk_kernel_old<true>, smem, smem, false));
        tk_kernel_old<true><<<(unsigned)a.R, TK_THREADS, smem, s>>>(a);
    } else {
        LA_TRY(la_cu_func_smem(ctx, (const void *)tk_kernel_old<false>, smem, smem, false));
        tk_kernel_old<false><<<(unsigned)a.R, TK_THREADS, smem, s>>>(a);
    }
    LA_CU_LAUNCH("topk (portable)");
    return LA_OK;
}
