/* Validate-then-time driver of the softmax tensor-core kernels (forward
 * softmax_tc.cu, backward softmax_bwd_tc.cu) in bf16 and f16, head dims
 * 32 / 64 / 128 and Dv != D, through the CUDA entry points
 * (la_softmax_attention_cuda, la_softmax_backward_cuda: the op layer's dtype
 * check is bypassed so that f16 is reached before src/ops accepts it).
 *
 * 1. Correctness: fresh random inputs rounded to the dtype, q/k/v/dO in
 *    [B,N,H,D] or permuted [B,H,N,D] buffers, out/lse/dq/dk/dv poisoned with
 *    NaN bytes. Against a float64 reference on the same rounded inputs:
 *    relative Frobenius error of out and each gradient must be at most
 *    twice the error of the plain formula evaluated with its intermediates
 *    rounded to the dtype (S = QKᵀ·scale, P = softmax(S), O = P V, dP, dS,
 *    dQ, dK, dV: what plain PyTorch at that precision does) plus 1e-5; lse
 *    within 1e-4·max(1, |lse|), −inf exactly for rows that see no key;
 *    every output finite; the dispatch takes the tensor-core kernel.
 * 2. Timing (CUDA events, medians): B = 1, 12×128 channels (D 128 H 12,
 *    D 64 H 24, D 32 H 48), bf16 and f16, causal and not, forward at
 *    N = 8K, 32K and backward at N = 8K, 32K; forward also at (D, Dv) =
 *    (64, 128) H 24 and (128, 64) H 12. Lines "softmax-fwd ..." and
 *    "softmax-bwd ...", each with the variants the call takes ("pick");
 *    dev/cuda/softmax_sdpa.py times SDPA on the same shapes.
 *
 *   make BUILD=build-gpu build-gpu/dev/cuda/softmax   (dev-cuda rule), or
 *   nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc -Idev \
 *        dev/cuda/softmax.cu build-gpu/liblongattn.a -Xcompiler -fopenmp -lcudart_static ...
 *   softmax [check] [time] [fwd]   (check and time when no argument; fwd: the
 *                                  forward timings alone)
 * Exit status 1 when a check fails. */
#include <cuda_fp16.h>
#include <omp.h>

#include "../bench_gpu_common.cuh"

extern "C" la_status la_softmax_attention_cuda(const la_softmax_params *p, const la_tensor *q,
                                               const la_tensor *k, const la_tensor *v,
                                               la_tensor *out, la_tensor *lse, la_context *ctx);
extern "C" la_status la_softmax_backward_cuda(const la_softmax_params *p, const la_tensor *q,
                                              const la_tensor *k, const la_tensor *v,
                                              const la_tensor *out, const la_tensor *lse,
                                              const la_tensor *d_out, la_tensor *dq, la_tensor *dk,
                                              la_tensor *dv, la_context *ctx);
extern "C" int la_softmax_cuda_tc_path(const la_tensor *q, const la_tensor *k, const la_tensor *v,
                                       const la_tensor *out);

/* ---- 16-bit values on the host ---- */
static float from16(uint16_t h, bool f16) {
    if (f16) {
        __half_raw r;
        r.x = h;
        return __half2float(__half(r));
    }
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t to16(float f, bool f16) {
    if (f16) return __half_raw(__float2half_rn(f)).x;
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static double rt(double x, bool f16) { return from16(to16((float)x, f16), f16); }

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double urand() {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0 - 1.0;
}

/* A [B,N,H,D] tensor: host values (rounded to the dtype, logical order),
 * device buffer in layout perm (0: [B,N,H,D], 1: [B,H,N,D]). */
struct dt4 {
    int64_t B, N, H, D;
    bool f16, perm;
    std::vector<double> x; /* logical [B][N][H][D] */
    void *dev = nullptr;
    la_tensor t;
    int64_t off(int64_t b, int64_t n, int64_t h, int64_t d) const {
        return perm ? ((b * H + h) * N + n) * D + d : ((b * N + n) * H + h) * D + d;
    }
    double &at(int64_t b, int64_t n, int64_t h, int64_t d) { return x[((b * N + n) * H + h) * D + d]; }
};
static void mk(dt4 &a, int64_t B, int64_t N, int64_t H, int64_t D, bool f16, bool perm, bool fill,
               double scale = 1.0) {
    a.B = B, a.N = N, a.H = H, a.D = D, a.f16 = f16, a.perm = perm;
    const int64_t n = B * N * H * D;
    a.x.assign((size_t)n, 0.0);
    std::vector<uint16_t> buf((size_t)n, 0xffff); /* NaN in both dtypes */
    if (fill)
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < N; t++)
                for (int64_t h = 0; h < H; h++)
                    for (int64_t d = 0; d < D; d++) {
                        const uint16_t v = to16((float)(urand() * scale), f16);
                        a.at(b, t, h, d) = from16(v, f16);
                        buf[a.off(b, t, h, d)] = v;
                    }
    CK(cudaMalloc(&a.dev, (size_t)n * 2 + 16));
    CK(cudaMemcpy(a.dev, buf.data(), (size_t)n * 2, cudaMemcpyHostToDevice));
    const int64_t ne[4] = {B, N, H, D};
    const int64_t nb[4] = {N * H * D, perm ? D : H * D, perm ? N * D : D, 1};
    LK(la_tensor_init_strided(&a.t, a.dev, f16 ? LA_F16 : LA_BF16, LA_DEVICE_CUDA, 4, ne, nb));
}
static std::vector<double> download(const dt4 &a) {
    const int64_t n = a.B * a.N * a.H * a.D;
    std::vector<uint16_t> buf((size_t)n);
    CK(cudaMemcpy(buf.data(), a.dev, (size_t)n * 2, cudaMemcpyDeviceToHost));
    std::vector<double> r((size_t)n);
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t t = 0; t < a.N; t++)
            for (int64_t h = 0; h < a.H; h++)
                for (int64_t d = 0; d < a.D; d++)
                    r[((b * a.N + t) * a.H + h) * a.D + d] = from16(buf[a.off(b, t, h, d)], a.f16);
    return r;
}

/* ‖x − ref‖ / ‖ref‖ (ref = 0: RMS of x); non-finite entries counted */
static double frob(const std::vector<double> &x, const std::vector<double> &ref, int64_t *bad) {
    double n = 0, r = 0;
    for (size_t i = 0; i < x.size(); i++) {
        if (!std::isfinite(x[i])) {
            if (bad) ++*bad;
            continue;
        }
        n += (x[i] - ref[i]) * (x[i] - ref[i]);
        r += ref[i] * ref[i];
    }
    return r > 0 ? std::sqrt(n / r) : std::sqrt(n / std::max<size_t>(1, x.size()));
}

static int g_pass, g_fail;

struct sm_case {
    int64_t B, Nq, Nk, H, Hk, D, Dv;
    int causal, perm;
    bool f16;
    const char *variant; /* of family "softmax" (NULL: the default choice) */
};

/* float64 reference and the dtype-rounded plain formula, for one case */
static void check(const sm_case &c) {
    const bool f = c.f16;
    const int64_t B = c.B, Nq = c.Nq, Nk = c.Nk, H = c.H, Hk = c.Hk, D = c.D, Dv = c.Dv;
    const bool bwd = D == Dv;
    dt4 q, k, v, o, g, dq, dk, dv;
    mk(q, B, Nq, H, D, f, c.perm, true);
    mk(k, B, Nk, Hk, D, f, c.perm, true);
    mk(v, B, Nk, Hk, Dv, f, c.perm, true);
    mk(o, B, Nq, H, Dv, f, c.perm, false);
    mk(g, B, Nq, H, Dv, f, c.perm, true);
    if (bwd) {
        mk(dq, B, Nq, H, D, f, c.perm, false);
        mk(dk, B, Nk, Hk, D, f, c.perm, false);
        mk(dv, B, Nk, Hk, Dv, f, c.perm, false);
    }
    float *lse_d;
    const int64_t nl = B * Nq * H;
    CK(cudaMalloc(&lse_d, (size_t)nl * 4));
    CK(cudaMemset(lse_d, 0xff, (size_t)nl * 4));
    la_tensor lt;
    const int64_t lne[3] = {B, Nq, H};
    LK(la_tensor_init(&lt, lse_d, LA_F32, LA_DEVICE_CUDA, 3, lne));
    const bool tc = la_softmax_cuda_tc_path(&q.t, &k.t, &v.t, &o.t) == 1;
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = c.causal;
    const double scale = 1.0 / std::sqrt((double)D);
    bench_variant("softmax", c.variant);
    la_status s1 = la_softmax_attention_cuda(&p, &q.t, &k.t, &v.t, &o.t, &lt, BCTX), s2 = LA_OK;
    if (bwd && s1 == LA_OK)
        s2 = la_softmax_backward_cuda(&p, &q.t, &k.t, &v.t, &o.t, &lt, &g.t, &dq.t, &dk.t, &dv.t, BCTX);
    CK(cudaDeviceSynchronize());
    bench_variant("softmax", nullptr);
    const std::vector<double> og = download(o);
    std::vector<float> lg((size_t)nl);
    CK(cudaMemcpy(lg.data(), lse_d, (size_t)nl * 4, cudaMemcpyDeviceToHost));

    /* reference: per (b, h) the P matrix in float64 (exact) and rounded (plain) */
    const int64_t shift = Nk - Nq, rep = H / Hk;
    std::vector<double> oe((size_t)(B * Nq * H * Dv)), op(oe.size()), le((size_t)nl);
    std::vector<double> dqe((size_t)(B * Nq * H * D)), dqp(dqe.size());
    std::vector<double> dke((size_t)(B * Nk * Hk * D), 0.0), dkp(dke.size(), 0.0);
    std::vector<double> dve((size_t)(B * Nk * Hk * Dv), 0.0), dvp(dve.size(), 0.0);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t kh = h / rep;
            std::vector<double> Pe((size_t)(Nq * Nk)), Pp(Pe.size()), dSe(Pe.size()), dSp(Pe.size());
#pragma omp parallel for schedule(dynamic, 4)
            for (int64_t t = 0; t < Nq; t++) {
                std::vector<double> se((size_t)Nk), sp((size_t)Nk);
                double me = -INFINITY, mp = -INFINITY;
                const int64_t last = c.causal ? std::min(Nk, t + shift + 1) : Nk;
                for (int64_t j = 0; j < Nk; j++) {
                    if (j >= last) {
                        se[j] = sp[j] = -INFINITY;
                        continue;
                    }
                    double d = 0;
                    for (int64_t x = 0; x < D; x++) d += q.at(b, t, h, x) * k.at(b, j, kh, x);
                    se[j] = d * scale;
                    sp[j] = rt(rt(d, f) * scale, f);
                    me = std::max(me, se[j]);
                    mp = std::max(mp, sp[j]);
                }
                double ze = 0, zp = 0;
                for (int64_t j = 0; j < last; j++) ze += std::exp(se[j] - me), zp += std::exp(sp[j] - mp);
                le[(b * Nq + t) * H + h] = last > 0 ? me + std::log(ze) : -INFINITY;
                for (int64_t j = 0; j < Nk; j++) {
                    Pe[t * Nk + j] = j < last ? std::exp(se[j] - me) / ze : 0.0;
                    Pp[t * Nk + j] = j < last ? rt(std::exp(sp[j] - mp) / zp, f) : 0.0;
                }
                double De = 0, Dp = 0;
                for (int64_t x = 0; x < Dv; x++) {
                    double ae = 0, ap = 0;
                    for (int64_t j = 0; j < last; j++)
                        ae += Pe[t * Nk + j] * v.at(b, j, kh, x), ap += Pp[t * Nk + j] * v.at(b, j, kh, x);
                    const int64_t i = ((b * Nq + t) * H + h) * Dv + x;
                    oe[i] = ae;
                    op[i] = rt(ap, f);
                    De += g.at(b, t, h, x) * ae;
                    Dp += g.at(b, t, h, x) * op[i];
                }
                if (!bwd) continue;
                /* dS = P ∘ (dP − D), dP = dO Vᵀ (plain: dP rounded, dS rounded) */
                for (int64_t j = 0; j < Nk; j++) {
                    if (j >= last) {
                        dSe[t * Nk + j] = dSp[t * Nk + j] = 0;
                        continue;
                    }
                    double dp = 0;
                    for (int64_t x = 0; x < Dv; x++) dp += g.at(b, t, h, x) * v.at(b, j, kh, x);
                    dSe[t * Nk + j] = Pe[t * Nk + j] * (dp - De);
                    dSp[t * Nk + j] = rt(Pp[t * Nk + j] * (rt(dp, f) - Dp), f);
                }
                for (int64_t x = 0; x < D; x++) {
                    double ae = 0, ap = 0;
                    for (int64_t j = 0; j < last; j++)
                        ae += dSe[t * Nk + j] * k.at(b, j, kh, x), ap += dSp[t * Nk + j] * k.at(b, j, kh, x);
                    const int64_t i = ((b * Nq + t) * H + h) * D + x;
                    dqe[i] = ae * scale;
                    dqp[i] = rt(rt(ap, f) * scale, f);
                }
            }
            if (!bwd) continue;
            /* dK, dV of this head's keys (summed over the heads of the group
             * in order; the plain formula rounds each head's product) */
#pragma omp parallel for schedule(dynamic, 4)
            for (int64_t j = 0; j < Nk; j++) {
                for (int64_t x = 0; x < D; x++) {
                    double ae = 0, ap = 0;
                    for (int64_t t = 0; t < Nq; t++)
                        ae += dSe[t * Nk + j] * q.at(b, t, h, x), ap += dSp[t * Nk + j] * q.at(b, t, h, x);
                    const int64_t i = ((b * Nk + j) * Hk + kh) * D + x;
                    dke[i] += ae * scale;
                    dkp[i] += rt(rt(ap, f) * scale, f);
                }
                for (int64_t x = 0; x < Dv; x++) {
                    double ae = 0, ap = 0;
                    for (int64_t t = 0; t < Nq; t++)
                        ae += Pe[t * Nk + j] * g.at(b, t, h, x), ap += Pp[t * Nk + j] * g.at(b, t, h, x);
                    const int64_t i = ((b * Nk + j) * Hk + kh) * Dv + x;
                    dve[i] += ae;
                    dvp[i] += rt(ap, f);
                }
            }
        }
    int64_t bad = 0;
    const double eo = frob(og, oe, &bad), po = frob(op, oe, nullptr);
    double el = 0;
    int64_t lbad = 0;
    for (int64_t i = 0; i < nl; i++) {
        if (std::isinf(le[i])) {
            lbad += !(std::isinf(lg[i]) && lg[i] < 0);
            continue;
        }
        if (!std::isfinite(lg[i])) {
            lbad++;
            continue;
        }
        el = std::max(el, std::fabs(lg[i] - le[i]) / std::max(1.0, std::fabs(le[i])));
    }
    bool ok = s1 == LA_OK && s2 == LA_OK && tc && bad == 0 && lbad == 0 && el <= 1e-4 &&
              eo <= 2 * po + 1e-5;
    char what[160];
    snprintf(what, sizeof what, "%s B%lld Nq%lld Nk%lld H%lld/%lld D%lld/%lld c%d %s %s", f ? "f16 " : "bf16",
             (long long)B, (long long)Nq, (long long)Nk, (long long)H, (long long)Hk, (long long)D,
             (long long)Dv, c.causal, c.perm ? "perm" : "cont", c.variant ? c.variant : "");
    char gtxt[200] = "";
    if (bwd) {
        int64_t gb = 0;
        const double eq = frob(download(dq), dqe, &gb), pq = frob(dqp, dqe, nullptr);
        const double ek = frob(download(dk), dke, &gb), pk = frob(dkp, dke, nullptr);
        const double ev = frob(download(dv), dve, &gb), pv = frob(dvp, dve, nullptr);
        ok = ok && gb == 0 && eq <= 2 * pq + 1e-5 && ek <= 2 * pk + 1e-5 && ev <= 2 * pv + 1e-5;
        snprintf(gtxt, sizeof gtxt, " dq %.2e (plain %.2e) dk %.2e (%.2e) dv %.2e (%.2e) nonfinite %lld", eq,
                 pq, ek, pk, ev, pv, (long long)gb);
    }
    printf("check %-44s tc %d out %.2e (plain %.2e) lse %.1e bad %lld/%lld%s  %s\n", what, tc, eo, po,
           el, (long long)bad, (long long)lbad, gtxt, ok ? "ok" : "FAIL");
    if (s1 != LA_OK || s2 != LA_OK) printf("  call failed: %s\n", la_last_error());
    fflush(stdout);
    (ok ? g_pass : g_fail)++;
    for (dt4 *a : {&q, &k, &v, &o, &g}) cudaFree(a->dev);
    if (bwd)
        for (dt4 *a : {&dq, &dk, &dv}) cudaFree(a->dev);
    cudaFree(lse_d);
}

static void checks() {
    const int64_t dims[5][2] = {{32, 32}, {64, 64}, {128, 128}, {64, 128}, {128, 64}};
    for (int fi = 0; fi < 2; fi++)
        for (auto &dd : dims) {
            const int64_t D = dd[0], Dv = dd[1];
            const bool f16 = fi == 1;
            check({1, 1, 1, 1, 1, D, Dv, 0, 0, f16, nullptr});
            check({2, 63, 63, 2, 1, D, Dv, 1, 1, f16, nullptr});
            check({1, 65, 130, 2, 2, D, Dv, 1, 0, f16, nullptr});  /* Nq < Nk */
            check({1, 130, 65, 4, 2, D, Dv, 1, 1, f16, nullptr});  /* Nq > Nk: rows with no key */
            if (D == Dv && D != 128) check({1, 1000, 1000, 2, 1, D, Dv, fi, 1 - fi, f16, nullptr});
        }
    check({1, 1000, 1000, 2, 2, 128, 128, 1, 1, false, nullptr});
    check({1, 1000, 1000, 2, 1, 128, 128, 0, 0, true, nullptr});
    /* the tensor-core kernel forced */
    check({1, 300, 200, 2, 2, 32, 32, 1, 1, false, "tc"});
    check({1, 130, 65, 4, 2, 64, 64, 0, 0, true, "tc"});
}

/* ---- timing ---- */
__global__ void fill16(uint16_t *x, size_t n, unsigned seed, int f16, float scale = 1.f) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    const float u = ((h & 0xffffff) / 16777216.f - 0.5f) * 2.f * scale;
    if (f16) x[i] = __half_as_ushort(__float2half_rn(u));
    else x[i] = __bfloat16_as_ushort(__float2bfloat16_rn(u));
}

/* fwd_only: no backward rows. Forward rows also for (D, Dv) = (64, 128) at
 * H 24 and (128, 64) at H 12 (same H·D as the D = Dv rows). Each row ends
 * with the variants the call takes (bench_pick). */
static void timings(bool fwd_only) {
    const int64_t B = 1, C = 12 * 128, Nmax = 32768;
    const size_t n = (size_t)B * Nmax * C * 2; /* Dv up to 2·D at H·D = C */
    uint16_t *buf[8];
    float *lse;
    for (int i = 0; i < 8; i++) {
        CK(cudaMalloc(&buf[i], n * 2));
        CK(cudaMemset(buf[i], 0, n * 2));
    }
    CK(cudaMalloc(&lse, (size_t)B * Nmax * 48 * 4));
    const int64_t Ns[2] = {8192, 32768};
    const int64_t dims[5][2] = {{128, 128}, {64, 64}, {32, 32}, {64, 128}, {128, 64}};
    for (int bw = 0; bw < (fwd_only ? 1 : 2); bw++)
        for (int fi = 0; fi < 2; fi++) {
            const bool f16 = fi;
            const la_dtype dt = f16 ? LA_F16 : LA_BF16;
            for (int i = 0; i < 4; i++)
                fill16<<<(unsigned)((n + 255) / 256), 256>>>(buf[i], n, 17u + i, f16);
            CK(cudaDeviceSynchronize());
            for (auto &dd : dims)
                for (int64_t N : Ns)
                    for (int causal = 0; causal < 2; causal++) {
                        const int64_t D = dd[0], Dv = dd[1];
                        if (bw && (D != Dv || (f16 && N == 8192))) continue;
                        const int64_t H = C / D;
                        la_tensor q = view(buf[0], dt, 4, B, N, H, D), k = view(buf[1], dt, 4, B, N, H, D),
                                  v = view(buf[2], dt, 4, B, N, H, Dv), g = view(buf[3], dt, 4, B, N, H, Dv),
                                  o = view(buf[4], dt, 4, B, N, H, Dv), dq = view(buf[5], dt, 4, B, N, H, D),
                                  dk = view(buf[6], dt, 4, B, N, H, D), dv = view(buf[7], dt, 4, B, N, H, Dv),
                                  l = view(lse, LA_F32, 3, B, N, H, 1);
                        la_softmax_params p;
                        la_softmax_params_init(&p);
                        p.causal = causal;
                        bench_variant("softmax", nullptr);
                        if (bw) LK(la_softmax_attention_cuda(&p, &q, &k, &v, &o, &l, BCTX)); /* out, lse */
                        const double fl = 2.0 * B * N * N * H * (D + Dv) * (causal ? 0.5 : 1.0);
                        const std::function<la_status()> fwd = [&] {
                            return la_softmax_attention_cuda(&p, &q, &k, &v, &o, &l, BCTX);
                        };
                        const std::function<la_status()> bwd = [&] {
                            return la_softmax_backward_cuda(&p, &q, &k, &v, &o, &l, &g, &dq, &dk, &dv, BCTX);
                        };
                        const std::string pick = bench_pick(bw ? bwd : fwd);
                        if (pick == "refused") {
                            printf("softmax-%s %s D=%lld Dv=%lld H=%lld N=%lld causal=%d refused: %s\n",
                                   bw ? "bwd" : "fwd", f16 ? "f16 " : "bf16", (long long)D, (long long)Dv,
                                   (long long)H, (long long)N, causal, la_last_error());
                            continue;
                        }
                        const double ms = bw ? time_ms(bwd, N > 8192 ? 5 : 10, 2) : time_ms(fwd, N > 8192 ? 10 : 20);
                        printf("softmax-%s %s D=%lld Dv=%lld H=%lld N=%lld causal=%d %9.3f ms %6.1f TFLOP/s  pick %s\n",
                               bw ? "bwd" : "fwd", f16 ? "f16 " : "bf16", (long long)D, (long long)Dv, (long long)H,
                               (long long)N, causal, ms, (bw ? 2.5 : 1.0) * fl / (ms * 1e-3) / 1e12, pick.c_str());
                        fflush(stdout);
                    }
        }
    for (int i = 0; i < 8; i++) cudaFree(buf[i]);
    cudaFree(lse);
}

/* f16 with inputs ×10 at long N (issue 15): forward and backward outputs
 * finite (no reference: the true results are finite, |o| ≤ 10). */
__global__ void count_nonfinite16(const uint16_t *x, size_t n, int f16, unsigned long long *bad) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float f = f16 ? __half2float(__ushort_as_half(x[i])) : __bfloat162float(__ushort_as_bfloat16(x[i]));
    if (!isfinite(f)) atomicAdd(bad, 1ull);
}
static void finite_check(int64_t N, int64_t H, int64_t D, int causal) {
    const size_t n = (size_t)N * H * D;
    uint16_t *b[8];
    float *lse;
    unsigned long long *bad;
    for (int i = 0; i < 8; i++) CK(cudaMalloc(&b[i], n * 2));
    CK(cudaMalloc(&lse, (size_t)N * H * 4));
    CK(cudaMalloc(&bad, 8));
    CK(cudaMemset(bad, 0, 8));
    for (int i = 0; i < 4; i++) fill16<<<(unsigned)((n + 255) / 256), 256>>>(b[i], n, 91u + i, 1, 10.f);
    la_tensor t[8];
    for (int i = 0; i < 8; i++) t[i] = view(b[i], LA_F16, 4, 1, N, H, D);
    la_tensor l = view(lse, LA_F32, 3, 1, N, H, 1);
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = causal;
    la_status s1 = la_softmax_attention_cuda(&p, &t[0], &t[1], &t[2], &t[4], &l, BCTX), s2 = LA_OK;
    if (s1 == LA_OK) s2 = la_softmax_backward_cuda(&p, &t[0], &t[1], &t[2], &t[4], &l, &t[3], &t[5], &t[6], &t[7], BCTX);
    for (int i = 4; i < 8; i++) count_nonfinite16<<<(unsigned)((n + 255) / 256), 256>>>(b[i], n, 1, bad);
    unsigned long long nb = 0;
    CK(cudaMemcpy(&nb, bad, 8, cudaMemcpyDeviceToHost));
    const bool ok = s1 == LA_OK && s2 == LA_OK && nb == 0;
    printf("check f16 x10 N%lld H%lld D%lld c%d: out, dq, dk, dv non-finite %llu  %s\n", (long long)N,
           (long long)H, (long long)D, causal, nb, ok ? "ok" : "FAIL");
    (ok ? g_pass : g_fail)++;
    for (int i = 0; i < 8; i++) cudaFree(b[i]);
    cudaFree(lse);
    cudaFree(bad);
}

int main(int argc, char **argv) {
    bool do_check = argc < 2, do_time = argc < 2, fwd_only = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "check")) do_check = true;
        else if (!strcmp(argv[i], "time")) do_time = true;
        else if (!strcmp(argv[i], "fwd")) fwd_only = do_time = true;
        else {
            fprintf(stderr, "softmax: unknown argument '%s' (check, time, fwd)\n", argv[i]);
            return 2;
        }
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# %s, %d SMs, %d host threads\n", prop.name, prop.multiProcessorCount, omp_get_max_threads());
    if (do_check) {
        checks();
        finite_check(262144, 1, 64, 1);
        finite_check(65536, 2, 128, 0);
        printf("# checks: %d passed, %d failed\n", g_pass, g_fail);
    }
    if (do_time) timings(fwd_only);
    return g_fail ? 1 : 0;
}
