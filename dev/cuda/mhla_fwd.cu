/* Dev driver: MHLA forward, variant tc_bf16s (bf16 block summaries and a
 * bf16 mixing GEMM, src/cuda/linfam_tc_bf16s.cu) beside variant tc (fp32
 * partials, tf32 mix): validate, then time.
 *
 *   make dev-cuda   (builds $(BUILD)/dev/cuda/mhla_fwd)
 *   build-gpu/dev/cuda/mhla_fwd [check|wan|all]   |   mhla_fwd wan1 VARIANT
 *
 * check: bf16 inputs, the output NaN-filled before each call, every shape run
 *   with the variant forced to tc_bf16s and to tc, against the CPU path on
 *   the very same bf16 values: rel = max|gpu - cpu| / max|cpu| ≤ 1e-2, no NaN
 *   left, and tc_bf16s within 2× tc's error + 1e-3. 1-D (N = 2 in two blocks:
 *   the CUDA backend refuses empty blocks; 63, 65, 1000 with two blocks:
 *   several segments), 2-D and 3-D
 *   grids with uneven blocks, M = 170 (two row tiles of the GEMM), shared and
 *   per-head W, per_query and none, contiguous and permuted ([B,H,N,D])
 *   storage, D = Dv = 64 and 128.
 * wan: the Wan-2.1 video shape (grid 21×30×50, blocks 3×5×10: M = 150,
 *   H 12, D 128, shared W, per_query), each variant and the default: median
 *   of 50 CUDA-event-timed calls, back to back, and the byte floors.
 * wan1 VARIANT: one call (for ncu / nsys). */
#include "../bench_gpu_common.cuh"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

xorshift_uniform urand{0x9e3779b97f4a7c15ull}; /* urand(): uniform(-1, 1) */

using pair_t = bf16_pair;
void make_pair(pair_t &p, int64_t B, int64_t N, int64_t H, int64_t D, bool perm, bool poison) {
    make_bf16_pair(p, B, N, H, D, perm, poison, urand);
}

int fails = 0, cases = 0;

/* rel error of the device output against the CPU one; -1: non-finite left */
double rel_err(const pair_t &o, const std::vector<uint16_t> &cpu) {
    std::vector<uint16_t> g(cpu.size());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(g.data(), o.d, g.size() * 2, cudaMemcpyDeviceToHost));
    double mx = 0, md = 0;
    for (size_t i = 0; i < g.size(); i++) {
        const double c = host_of_bf16(cpu[i]), x = host_of_bf16(g[i]);
        if (!std::isfinite(x)) return -1;
        mx = std::max(mx, std::fabs(c));
        md = std::max(md, std::fabs(x - c));
    }
    return md / std::max(mx, 1e-30);
}

void check_mhla(int nd, const int64_t *grid, const int64_t *blocks, int64_t B, int64_t H, int64_t D,
                la_mhla_normalize nm, bool per_head, bool perm) {
    int64_t N = 1, M = 1;
    for (int a = 0; a < nd; a++) N *= grid[a], M *= blocks[a];
    pair_t q, k, v, o;
    make_pair(q, B, N, H, D, perm, false);
    make_pair(k, B, N, H, D, perm, false);
    make_pair(v, B, N, H, D, perm, false);
    make_pair(o, B, N, H, D, perm, true);
    const int64_t nw = (per_head ? H : 1) * M * M;
    std::vector<float> w(nw);
    for (auto &x : w) x = nm == LA_MHLA_NORM_PER_QUERY ? 0.05f + 0.5f * (urand() + 1.f) : urand();
    float *wd;
    CK(cudaMalloc(&wd, nw * 4));
    CK(cudaMemcpy(wd, w.data(), nw * 4, cudaMemcpyHostToDevice));
    la_tensor Wh, Wd;
    const int64_t ne3[3] = {H, M, M}, ne2[2] = {M, M};
    LK(la_tensor_init(&Wh, w.data(), LA_F32, LA_DEVICE_CPU, per_head ? 3 : 2, per_head ? ne3 : ne2));
    LK(la_tensor_init(&Wd, wd, LA_F32, LA_DEVICE_CUDA, per_head ? 3 : 2, per_head ? ne3 : ne2));
    la_mhla_params p;
    la_mhla_params_init(&p);
    p.grid_ndim = nd;
    for (int a = 0; a < nd; a++) p.grid[a] = grid[a], p.blocks[a] = blocks[a];
    p.normalize = nm;
    p.scale_q = 0.7f;
    LK(la_mhla_forward(&p, &q.th, &k.th, &v.th, &Wh, &o.th, BCTX));
    const std::vector<uint16_t> cpu = o.h;
    double rel[2];
    const char *vars[2] = {"tc_bf16s", "tc"};
    const size_t bytes = o.h.size() * 2;
    for (int i = 0; i < 2; i++) {
        CK(cudaMemset(o.d, 0xff, bytes));
        bench_variant("mhla", vars[i]);
        const la_status s = la_mhla_forward(&p, &q.td, &k.td, &v.td, &Wd, &o.td, BCTX);
        bench_variant("mhla", nullptr);
        rel[i] = s == LA_OK ? rel_err(o, cpu) : -2;
        if (s != LA_OK) printf("  %s: %s\n", vars[i], la_last_error());
    }
    char what[160], gs[48] = "", bs[48] = "";
    for (int a = 0; a < nd; a++) {
        snprintf(gs + strlen(gs), sizeof gs - strlen(gs), "%s%lld", a ? "x" : "", (long long)grid[a]);
        snprintf(bs + strlen(bs), sizeof bs - strlen(bs), "%s%lld", a ? "x" : "", (long long)blocks[a]);
    }
    snprintf(what, sizeof what, "mhla B%lld %s/%s M%lld H%lld D%lld norm%d ph%d perm%d", (long long)B, gs, bs,
             (long long)M, (long long)H, (long long)D, (int)nm, (int)per_head, (int)perm);
    const bool ok = rel[0] >= 0 && rel[1] >= 0 && rel[0] <= 1e-2 && rel[0] <= 2 * rel[1] + 1e-3;
    cases++;
    fails += !ok;
    printf("%-4s %-62s tc_bf16s %.2e  tc %.2e\n", ok ? "ok" : "FAIL", what, rel[0], rel[1]);
    CK(cudaFree(wd));
    CK(cudaFree(q.d)); CK(cudaFree(k.d)); CK(cudaFree(v.d)); CK(cudaFree(o.d));
}

void check_all() {
    const la_mhla_normalize PQ = LA_MHLA_NORM_PER_QUERY, NO = LA_MHLA_NORM_NONE;
    const int64_t g1a[1] = {2}, b1a[1] = {2}, g1b[1] = {63}, b1b[1] = {7}, g1c[1] = {65}, b1c[1] = {6};
    const int64_t g1d[1] = {1000}, b1d[1] = {2}, g1e[1] = {340}, b1e[1] = {170};
    const int64_t g2[2] = {20, 50}, b2[2] = {3, 7}, g3[3] = {5, 6, 7}, b3[3] = {2, 3, 2};
    const int64_t gw[3] = {21, 30, 50}, bw[3] = {3, 5, 10};
    for (int di = 0; di < 2; di++) {
        const int64_t D = di ? 64 : 128;
        check_mhla(1, g1a, b1a, 1, 2, D, PQ, false, false);
        check_mhla(1, g1b, b1b, 1, 3, D, NO, true, true);
        check_mhla(1, g1c, b1c, 2, 1, D, PQ, di, di);
        check_mhla(1, g1d, b1d, 1, 2, D, NO, false, false);
        check_mhla(2, g2, b2, 1, 2, D, PQ, true, true);
        check_mhla(3, g3, b3, 1, 2, D, NO, false, di);
        check_mhla(1, g1e, b1e, 1, 1, D, PQ, true, !di);
        check_mhla(3, gw, bw, 1, 2, D, PQ, false, false);
    }
    printf("# check: %d cases, %d failed\n", cases, fails);
}

/* MHLA at the Wan-2.1 video shape; reps = 0: one call of `variant` */
void wan(int reps, const char *variant) {
    const int64_t N = 21 * 30 * 50, H = 12, D = 128, M = 150;
    const size_t n = (size_t)N * H * D;
    void *q = make(n, 1), *k = make(n, 2), *v = make(n, 3), *o = make(n, 4);
    float *Wd;
    CK(cudaMalloc(&Wd, sizeof(float) * M * M));
    std::vector<float> w(M * M);
    for (size_t i = 0; i < w.size(); i++) w[i] = 0.01f + (float)((i * 7919) % 1000) / 1000.f;
    CK(cudaMemcpy(Wd, w.data(), sizeof(float) * w.size(), cudaMemcpyHostToDevice));
    la_tensor tq = view(q, 1, N, H, D), tk = view(k, 1, N, H, D), tv = view(v, 1, N, H, D),
              to = view(o, 1, N, H, D), W;
    const int64_t nw[2] = {M, M};
    la_tensor_init(&W, Wd, LA_F32, LA_DEVICE_CUDA, 2, nw);
    la_mhla_params p;
    la_mhla_params_init(&p);
    p.grid_ndim = 3;
    p.grid[0] = 21; p.grid[1] = 30; p.grid[2] = 50;
    p.blocks[0] = 3; p.blocks[1] = 5; p.blocks[2] = 10;
    auto call = [&] { return la_mhla_forward(&p, &tq, &tk, &tv, &W, &to, BCTX); };
    const double io = 8.0 * n, summ = (double)H * M * (D * D + D);
    if (reps == 0) {
        bench_variant("mhla", variant);
        LK(call());
        CK(cudaDeviceSynchronize());
        printf("wan: one call of %s done\n", variant ? variant : "the default");
    } else {
        const char *vars[3] = {"tc", "tc_bf16s", nullptr};
        for (const char *var : vars) {
            bench_variant("mhla", var);
            const double ms = time_ms(call, reps);
            const double bb = batch_ms([&] { LK(call()); }, reps);
            printf("mhla wan 21x30x50/3x5x10 M150 H12 D128 %-9s: %.4f ms per call (%.4f back to back); "
                   "floors: Q,K,V,O %.4f ms; + bf16 summaries (S, S~ written and read) %.4f ms: x%.2f\n",
                   var ? var : "default", ms, bb, io / BW * 1e3, (io + 4 * 2 * summ) / BW * 1e3,
                   ms / ((io + 4 * 2 * summ) / BW * 1e3));
        }
    }
    bench_variant("mhla", nullptr);
    CK(cudaFree(q)); CK(cudaFree(k)); CK(cudaFree(v)); CK(cudaFree(o)); CK(cudaFree(Wd));
}

}  // namespace

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "all";
    if (!strcmp(what, "wan1")) wan(0, argc > 2 ? argv[2] : nullptr);
    if (!strcmp(what, "check") || !strcmp(what, "all")) check_all();
    if (!strcmp(what, "wan") || !strcmp(what, "all")) wan(50, nullptr);
    return fails ? 1 : 0;
}
