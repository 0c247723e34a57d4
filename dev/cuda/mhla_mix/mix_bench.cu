/* The mixing kernel of MHLA variant tc_bf16s alone (lfb_mix_kernel and the
 * weight expansion, src/cuda/linfam_tc_bf16s.cu, cut out by run.sh): at the
 * Wan-2.1 configuration (H 12, M = K = 150, D = Dv = 128, shared W) on
 * random bf16 summaries and fp32 z partials, validated against a float64
 * host product (S̃: rel ≤ 1e-2, z̃: rel ≤ 1e-5, heads 0 and 11, outputs
 * NaN-filled first), then timed with CUDA events (median of 30): the whole
 * launch, the GEMM CTAs alone (no z CTAs), the z CTAs alone.
 *   bash dev/cuda/mhla_mix/run.sh   (GPU machine) */
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda/linfam_engine.cuh"
#include "cuda/ptx.cuh"

namespace {
#include "kern_b16.inc"
}  // namespace

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static uint64_t rs = 88172645463325252ull;
static float ur() {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.f - 1.f;
}

int main() {
    const int64_t H = 12, M = 150, D = 128, DD = D * D, K = M;
    lf_problem P = {};
    P.B = 1; P.H = H; P.D = D; P.Dv = D; P.use_w = 1;
    lf_args a = {};
    a.P = P;
    a.M = M; a.K = K; a.segs = 1; a.L = DD + D;
    std::vector<__nv_bfloat16> S(H * K * DD);
    std::vector<float> z(H * K * D), W(M * M);
    for (auto &x : S) x = __float2bfloat16(ur());
    for (auto &x : z) x = ur();
    for (auto &x : W) x = 0.5f * (ur() + 1.f) / M;
    const int64_t Mp = la_cu_cdiv(M, XM) * XM, Kp = la_cu_cdiv(K, 16) * 16;
    __nv_bfloat16 *dS, *dPb, *dWx;
    float *dz, *dPz, *dW;
    CK(cudaMalloc(&dS, S.size() * 2));
    CK(cudaMalloc(&dz, z.size() * 4));
    CK(cudaMalloc(&dW, W.size() * 4));
    CK(cudaMalloc(&dPb, H * M * DD * 2));
    CK(cudaMalloc(&dPz, H * M * D * 4));
    CK(cudaMalloc(&dWx, Mp * Kp * 2));
    CK(cudaMemcpy(dS, S.data(), S.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dz, z.data(), z.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dW, W.data(), W.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dPb, 0xff, H * M * DD * 2));
    CK(cudaMemset(dPz, 0xff, H * M * D * 4));
    a.P.W.data = dW; a.P.W.dt = LA_F32; a.P.W.nb[0] = 0; a.P.W.nb[1] = M; a.P.W.nb[2] = 1;
    a.sum = (float *)dS;
    a.mix = dz;
    const size_t smem = lfb_smem(K, Kp);
    CK(cudaFuncSetAttribute(lfb_mix_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    auto wprep = [&] { lfb_wprep_kernel<<<dim3((unsigned)la_cu_cdiv(Mp * Kp, NT), 1), NT>>>(a, dWx, Mp, Kp); };
    auto mix = [&](int nzc, int ncol) {
        lfb_mix_kernel<<<dim3((unsigned)(nzc + ncol), (unsigned)(Mp / XM), (unsigned)H), NT, smem>>>(
            a, dWx, Mp, Kp, 0, nzc, dPb, dPz);
    };
    wprep();
    mix(XNZ, (int)(DD / XN));
    CK(cudaDeviceSynchronize());
    std::vector<__nv_bfloat16> Pb(H * M * DD);
    std::vector<float> Pz(H * M * D);
    CK(cudaMemcpy(Pb.data(), dPb, Pb.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(Pz.data(), dPz, Pz.size() * 4, cudaMemcpyDeviceToHost));
    int fails = 0;
    for (int64_t h : {(int64_t)0, H - 1}) {
        double es = 0, ms = 0, ez = 0, mz = 0;
        size_t bad = 0;
        for (int64_t i = 0; i < M; i++) {
            for (int64_t c = 0; c < DD; c++) {
                double r = 0;
                for (int64_t k = 0; k < K; k++) r += (double)W[i * M + k] * __bfloat162float(S[(h * K + k) * DD + c]);
                const double g = __bfloat162float(Pb[(h * M + i) * DD + c]);
                bad += !std::isfinite(g);
                es = std::max(es, std::fabs(g - r));
                ms = std::max(ms, std::fabs(r));
            }
            for (int64_t d = 0; d < D; d++) {
                double r = 0;
                for (int64_t k = 0; k < K; k++) r += (double)W[i * M + k] * z[(h * K + k) * D + d];
                const double g = Pz[(h * M + i) * D + d];
                bad += !std::isfinite(g);
                ez = std::max(ez, std::fabs(g - r));
                mz = std::max(mz, std::fabs(r));
            }
        }
        const bool ok = bad == 0 && es <= 1e-2 * ms && ez <= 1e-5 * mz;
        fails += !ok;
        printf("%s head %lld: S~ rel %.2e, z~ rel %.2e%s\n", ok ? "ok  " : "FAIL", (long long)h, es / ms, ez / mz,
               bad ? " (non-finite left)" : "");
    }
    auto time = [&](auto f) {
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        std::vector<float> t;
        for (int r = 0; r < 33; r++) {
            CK(cudaEventRecord(e0));
            f();
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float x;
            CK(cudaEventElapsedTime(&x, e0, e1));
            if (r >= 3) t.push_back(x * 1e3f);
        }
        std::sort(t.begin(), t.end());
        return t[t.size() / 2];
    };
    const int ncol = (int)(DD / XN);
    printf("wprep + mix %.1f us; mix %.1f us; GEMM CTAs alone %.1f us; z CTAs alone %.1f us; wprep %.1f us "
           "(bytes: S read %.1f MB, S~ written %.1f MB: %.2f TB/s over the mix)\n",
           time([&] { wprep(); mix(XNZ, ncol); }), time([&] { mix(XNZ, ncol); }), time([&] { mix(0, ncol); }),
           time([&] { mix(XNZ, 0); }), time([&] { wprep(); }), H * K * DD * 2 / 1e6, H * M * DD * 2 / 1e6,
           (H * K * DD * 2.0 + H * M * DD * 2.0) / (time([&] { mix(XNZ, ncol); }) * 1e-6) / 1e12);
    printf("%d failed\n", fails);
    return fails ? 1 : 0;
}
