/* Dev driver: the linear family's tensor-core path at the head dims besides
 * 128 (D = Dv = 64, 32; (D, Dv) = (64, 128), (128, 64)), validate, then time.
 *
 *   make dev-cuda   (builds $(BUILD)/dev/cuda/linear_heads)
 *   build-gpu/dev/cuda/linear_heads [check|time|all|wan|wan1] [bf16|f16|both] [default]
 *
 * check: every shape forced to variant "tc" of families "linear" and "mhla"
 *   (a shape the path does not take fails), bf16 inputs, the output poisoned
 *   with NaN before the call, against the CPU path on the very same bf16
 *   values: rel = max|gpu - cpu| / max|cpu| ≤ 1e-2 and no NaN left. N = 1, 63,
 *   65, 1000; contiguous and permuted ([B,H,N,D] storage) views; linear
 *   attention (relu, elu1 with and without normalization), MHLA 1-D (M = 5;
 *   M = 70: the tf32 mix), per-head W, released_vision; causal linear
 *   attention at D = 128, 64, 32 (family "linear_causal" forced to "tc",
 *   "walk", "chunk256"), with the state in and out (S_out, z_out compared).
 * time: B = 1, N = 32K, H·D = 1536 (the same bytes at every D): linear
 *   (non-causal and causal),
 *   MHLA M = 16 and M = 150, focused flatten (map 128 × 256, without and
 *   with a 5×5 conv + bias), default path and "portable" ("default": the
 *   default path alone), median of 20 CUDA-event-timed calls, the byte floor
 *   (Q, K, V read, O written) and the variants the call takes (bench_pick);
 *   bf16 rows, f16 rows or both (the same values, converted on the device);
 *   a call the library refuses prints "refused: <message>".
 * wan: MHLA at the Wan-2.1 video shape, normalize per_query and none (median
 * per call and back to back), bf16 / f16 / both; wan1: one call (for ncu).
 * tests/cuda/gpu_shapes.sh runs `time both default` and `wan both`. */
#include "../bench_gpu_common.cuh"

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

xorshift_uniform urand{0x2545f4914f6cdd1dull}; /* urand(): uniform(-1, 1) */

using pair_t = bf16_pair;
void make_pair(pair_t &p, int64_t B, int64_t N, int64_t H, int64_t D, bool perm, bool poison) {
    make_bf16_pair(p, B, N, H, D, perm, poison, urand);
}
void free_pair(pair_t &p) { free_bf16_pair(p); }

int fails = 0, cases = 0;

/* compares the device output with the CPU one (the same storage layout) */
void compare(const pair_t &o, const char *what) {
    std::vector<uint16_t> g(o.h.size());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(g.data(), o.d, g.size() * 2, cudaMemcpyDeviceToHost));
    double mx = 0, md = 0;
    size_t nan = 0;
    for (size_t i = 0; i < g.size(); i++) {
        const double c = host_of_bf16(o.h[i]), x = host_of_bf16(g[i]);
        if (!std::isfinite(x)) nan++;
        mx = std::max(mx, std::fabs(c));
        md = std::max(md, std::fabs(x - c));
    }
    const double rel = md / std::max(mx, 1e-30);
    const bool ok = nan == 0 && rel <= 1e-2;
    cases++;
    fails += !ok;
    printf("%-4s %-58s rel %.2e%s\n", ok ? "ok" : "FAIL", what, rel, nan ? " (non-finite left)" : "");
}

void check_linear(int64_t B, int64_t N, int64_t H, int64_t D, int64_t Dv, la_feature f, int norm, bool perm) {
    pair_t q, k, v, o;
    make_pair(q, B, N, H, D, perm, false);
    make_pair(k, B, N, H, D, perm, false);
    make_pair(v, B, N, H, Dv, perm, false);
    make_pair(o, B, N, H, Dv, perm, true);
    la_linear_params p;
    la_linear_params_init(&p);
    p.feature = f;
    p.normalize = norm;
    p.scale_q = 0.7f;
    LK(la_linear_attention(&p, &q.th, &k.th, &v.th, &o.th, 0, 0, 0, 0, BCTX));
    const la_status s = la_linear_attention(&p, &q.td, &k.td, &v.td, &o.td, 0, 0, 0, 0, BCTX);
    char what[128];
    snprintf(what, sizeof what, "linear B%lld N%lld H%lld D%lld Dv%lld f%d norm%d perm%d", (long long)B,
             (long long)N, (long long)H, (long long)D, (long long)Dv, (int)f, norm, (int)perm);
    if (s != LA_OK) {
        printf("FAIL %s: %s\n", what, la_last_error());
        fails++;
        cases++;
    } else {
        compare(o, what);
    }
    free_pair(q); free_pair(k); free_pair(v); free_pair(o);
}

void check_mhla(int64_t N, int64_t M, int64_t H, int64_t D, int64_t Dv, la_mhla_normalize nm,
                bool per_head, bool perm) {
    pair_t q, k, v, o;
    make_pair(q, 1, N, H, D, perm, false);
    make_pair(k, 1, N, H, D, perm, false);
    make_pair(v, 1, N, H, Dv, perm, false);
    make_pair(o, 1, N, H, Dv, perm, true);
    const int64_t nw = (per_head ? H : 1) * M * M;
    std::vector<float> w(nw);
    for (auto &x : w) x = 0.05f + 0.5f * (urand() + 1.f);
    float *wd;
    CK(cudaMalloc(&wd, nw * 4));
    CK(cudaMemcpy(wd, w.data(), nw * 4, cudaMemcpyHostToDevice));
    la_tensor Wh, Wd;
    const int64_t ne3[3] = {H, M, M}, ne2[2] = {M, M};
    LK(la_tensor_init(&Wh, w.data(), LA_F32, LA_DEVICE_CPU, per_head ? 3 : 2, per_head ? ne3 : ne2));
    LK(la_tensor_init(&Wd, wd, LA_F32, LA_DEVICE_CUDA, per_head ? 3 : 2, per_head ? ne3 : ne2));
    la_mhla_params p;
    la_mhla_params_init(&p);
    p.grid_ndim = 1;
    p.grid[0] = N;
    p.blocks[0] = M;
    p.normalize = nm;
    LK(la_mhla_forward(&p, &q.th, &k.th, &v.th, &Wh, &o.th, BCTX));
    const la_status s = la_mhla_forward(&p, &q.td, &k.td, &v.td, &Wd, &o.td, BCTX);
    char what[128];
    snprintf(what, sizeof what, "mhla N%lld M%lld H%lld D%lld Dv%lld norm%d ph%d perm%d", (long long)N,
             (long long)M, (long long)H, (long long)D, (long long)Dv, (int)nm, (int)per_head, (int)perm);
    if (s != LA_OK) {
        printf("FAIL %s: %s\n", what, la_last_error());
        fails++;
        cases++;
    } else {
        compare(o, what);
    }
    CK(cudaFree(wd));
    free_pair(q); free_pair(k); free_pair(v); free_pair(o);
}

/* causal linear attention, variant `path` of family "linear_causal" forced,
 * with the state in and out (compared too, f32, rel ≤ 1e-2) when `state` */
void check_causal(int64_t B, int64_t N, int64_t H, int64_t D, la_feature f, int norm, int64_t chunk,
                  bool state, bool perm, const char *path) {
    pair_t q, k, v, o;
    make_pair(q, B, N, H, D, perm, false);
    make_pair(k, B, N, H, D, perm, false);
    make_pair(v, B, N, H, D, perm, false);
    make_pair(o, B, N, H, D, perm, true);
    const int64_t nS = B * H * D * D, nz = B * H * D;
    std::vector<float> Si(nS), zi(nz), So(nS, NAN), zo(nz, NAN), Sg(nS), zg(nz);
    for (auto &x : Si) x = urand();
    for (auto &x : zi) x = 5.f * std::fabs(urand()); /* keeps the denominators > 0 */
    float *dSi, *dzi, *dSo, *dzo;
    CK(cudaMalloc(&dSi, nS * 4)); CK(cudaMalloc(&dzi, nz * 4));
    CK(cudaMalloc(&dSo, nS * 4)); CK(cudaMalloc(&dzo, nz * 4));
    CK(cudaMemcpy(dSi, Si.data(), nS * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dzi, zi.data(), nz * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dSo, 0xff, nS * 4)); CK(cudaMemset(dzo, 0xff, nz * 4));
    la_tensor hSi, hzi, hSo, hzo, gSi, gzi, gSo, gzo;
    const int64_t neS[4] = {B, H, D, D}, nez[3] = {B, H, D};
    LK(la_tensor_init(&hSi, Si.data(), LA_F32, LA_DEVICE_CPU, 4, neS));
    LK(la_tensor_init(&hzi, zi.data(), LA_F32, LA_DEVICE_CPU, 3, nez));
    LK(la_tensor_init(&hSo, So.data(), LA_F32, LA_DEVICE_CPU, 4, neS));
    LK(la_tensor_init(&hzo, zo.data(), LA_F32, LA_DEVICE_CPU, 3, nez));
    LK(la_tensor_init(&gSi, dSi, LA_F32, LA_DEVICE_CUDA, 4, neS));
    LK(la_tensor_init(&gzi, dzi, LA_F32, LA_DEVICE_CUDA, 3, nez));
    LK(la_tensor_init(&gSo, dSo, LA_F32, LA_DEVICE_CUDA, 4, neS));
    LK(la_tensor_init(&gzo, dzo, LA_F32, LA_DEVICE_CUDA, 3, nez));
    la_linear_params p;
    la_linear_params_init(&p);
    p.feature = f;
    p.normalize = norm;
    p.causal = 1;
    p.chunk = chunk;
    p.scale_q = 0.7f;
    LK(la_linear_attention(&p, &q.th, &k.th, &v.th, &o.th, state ? &hSi : 0, state ? &hzi : 0,
                           state ? &hSo : 0, state ? &hzo : 0, BCTX));
    bench_variant("linear_causal", path);
    const la_status s = la_linear_attention(&p, &q.td, &k.td, &v.td, &o.td, state ? &gSi : 0,
                                            state ? &gzi : 0, state ? &gSo : 0, state ? &gzo : 0, BCTX);
    bench_variant("linear_causal", nullptr);
    char what[128];
    snprintf(what, sizeof what, "causal B%lld N%lld H%lld D%lld f%d norm%d C%lld s%d perm%d %s", (long long)B,
             (long long)N, (long long)H, (long long)D, (int)f, norm, (long long)chunk, (int)state, (int)perm, path);
    if (s != LA_OK) {
        printf("FAIL %s: %s\n", what, la_last_error());
        fails++;
        cases++;
    } else {
        compare(o, what);
        if (state) {
            CK(cudaMemcpy(Sg.data(), dSo, nS * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(zg.data(), dzo, nz * 4, cudaMemcpyDeviceToHost));
            double mx = 0, md = 0;
            size_t bad = 0;
            for (int64_t i = 0; i < nS + nz; i++) {
                const double c = i < nS ? So[i] : zo[i - nS], x = i < nS ? Sg[i] : zg[i - nS];
                bad += !std::isfinite(x);
                mx = std::max(mx, std::fabs(c));
                md = std::max(md, std::fabs(x - c));
            }
            const bool ok = bad == 0 && md <= 1e-2 * mx;
            cases++;
            fails += !ok;
            printf("%-4s %-58s rel %.2e\n", ok ? "ok" : "FAIL", "  (S_out, z_out)", md / std::max(mx, 1e-30));
        }
    }
    CK(cudaFree(dSi)); CK(cudaFree(dzi)); CK(cudaFree(dSo)); CK(cudaFree(dzo));
    free_pair(q); free_pair(k); free_pair(v); free_pair(o);
}

const int64_t dims[5][2] = {{128, 128}, {64, 64}, {32, 32}, {64, 128}, {128, 64}};

void check_all() {
    bench_variant("linear", "tc");
    bench_variant("mhla", "tc");
    for (auto &dd : dims) {
        const int64_t D = dd[0], Dv = dd[1];
        int i = 0;
        for (int64_t N : {1, 63, 65, 1000}) {
            check_linear(N == 1000 ? 2 : 1, N, 2, D, Dv, LA_FEATURE_RELU, 1, i & 1);
            check_linear(1, N, 3, D, Dv, LA_FEATURE_ELU1, N == 65 ? 0 : 1, !(i & 1));
            i++;
        }
        check_mhla(65, 5, 3, D, Dv, LA_MHLA_NORM_PER_QUERY, true, false);
        check_mhla(65, 5, 2, D, Dv, LA_MHLA_NORM_RELEASED_VISION, false, true);
        check_mhla(980, 70, 2, D, Dv, LA_MHLA_NORM_PER_QUERY, true, true);
        check_mhla(980, 70, 2, D, Dv, LA_MHLA_NORM_NONE, false, false);
        check_mhla(1024, 16, 2, D, Dv, LA_MHLA_NORM_RELEASED_VISION, false, false);
    }
    bench_variant("linear", nullptr);
    bench_variant("mhla", nullptr);
    for (int64_t D : {128, 64, 32}) {
        int i = 0;
        for (int64_t N : {1, 63, 65, 1000}) {
            check_causal(N == 1000 ? 2 : 1, N, 2, D, LA_FEATURE_RELU, 1, i == 2 ? 7 : 64, i & 1, i & 1, "tc");
            check_causal(1, N, 3, D, LA_FEATURE_ELU1, i & 1, 100, true, !(i & 1), "walk");
            check_causal(1, N, 1, D, LA_FEATURE_RELU_EPS, 1, 64, true, false, "tc");
            i++;
        }
        check_causal(1, 4095, 2, D, LA_FEATURE_RELU1, 1, 64, true, true, "chunk256");
    }
    printf("# check: %d cases, %d failed\n", cases, fails);
}

/* bf16 values rewritten in place as f16 (the same numbers: |x| <= 1 here) */
__global__ void bf16_to_f16(uint16_t *x, size_t n) {
    BENCH_GRID_STRIDE(i, n) x[i] = __half_as_ushort(__float2half_rn(__bfloat162float(__ushort_as_bfloat16(x[i]))));
}
void to_f16(void *p, size_t n) {
    bf16_to_f16<<<1024, 256>>>((uint16_t *)p, n);
    CK(cudaGetLastError());
}
const char *dt_name(la_dtype dt) { return dt == LA_F16 ? "f16" : "bf16"; }

/* One timed row: the variants one call takes (bench_pick), then the median of
 * `reps` CUDA-event-timed calls after 3 warm-ups; a call the library refuses
 * prints the row with its message instead of a time. */
void row(const char *op, int64_t D, int64_t Dv, int64_t H, la_dtype dt, const char *path, double bytes,
         const std::function<la_status()> &f, int reps = 20) {
    const std::string pick = bench_pick(f);
    printf("%-10s D%-3lld Dv%-3lld H%-3lld %-4s %-9s ", op, (long long)D, (long long)Dv, (long long)H,
           dt_name(dt), path);
    if (pick == "refused") {
        printf("refused: %s\n", la_last_error());
    } else {
        const double ms = time_ms(f, reps);
        printf("%8.4f ms  byte-floor %.4f ms  pick %s\n", ms, bytes / BW * 1e3, pick.c_str());
    }
    fflush(stdout);
}

/* dts: the element types of the rows (bf16 first: the buffers are turned into
 * f16 in place before the first f16 row); portable: also the "portable" rows */
void time_all(const std::vector<la_dtype> &dts, bool portable) {
    const int64_t N = 32768;
    const size_t nmax = (size_t)N * 1536 * 2; /* Dv up to 2·D at H·D = 1536 */
    void *q = make(nmax, 1), *k = make(nmax, 2), *v = make(nmax, 3), *o = make(nmax, 4);
    float *Wd;
    CK(cudaMalloc(&Wd, sizeof(float) * 150 * 150));
    {
        std::vector<float> w(150 * 150);
        for (size_t i = 0; i < w.size(); i++) w[i] = 0.01f + (float)((i * 7919) % 1000) / 1000.f;
        CK(cudaMemcpy(Wd, w.data(), sizeof(float) * w.size(), cudaMemcpyHostToDevice));
    }
    bool is_f16 = false;
    for (la_dtype dt : dts) {
        if (dt == LA_F16 && !is_f16) {
            for (void *p : {q, k, v, o}) to_f16(p, nmax);
            is_f16 = true;
        }
        for (auto &dd : dims) {
            const int64_t D = dd[0], Dv = dd[1], H = 1536 / D;
            la_tensor tq = view(q, dt, 4, 1, N, H, D), tk = view(k, dt, 4, 1, N, H, D),
                      tv = view(v, dt, 4, 1, N, H, Dv), to = view(o, dt, 4, 1, N, H, Dv);
            const double io = 2.0 * N * H * (2 * D + 2 * Dv);
            for (const char *path : {(const char *)nullptr, "portable"}) {
                if (path && !portable) continue;
                bench_variant("linear", path);
                bench_variant("mhla", path);
                bench_variant("focused", path);
                const char *pn = path ? path : "default";
                la_linear_params pl;
                la_linear_params_init(&pl);
                row("linear", D, Dv, H, dt, pn, io,
                    [&] { return la_linear_attention(&pl, &tq, &tk, &tv, &to, 0, 0, 0, 0, BCTX); });
                if (D == Dv) {
                    bench_variant("linear_causal", path);
                    pl.causal = 1;
                    row("causal", D, Dv, H, dt, pn, io,
                        [&] { return la_linear_attention(&pl, &tq, &tk, &tv, &to, 0, 0, 0, 0, BCTX); });
                    pl.causal = 0;
                    bench_variant("linear_causal", nullptr);
                }
                for (int64_t M : {16, 150}) {
                    la_mhla_params p;
                    la_mhla_params_init(&p);
                    p.grid_ndim = 1;
                    p.grid[0] = N;
                    p.blocks[0] = M;
                    la_tensor W;
                    const int64_t nw[2] = {M, M};
                    la_tensor_init(&W, Wd, LA_F32, LA_DEVICE_CUDA, 2, nw);
                    char op[32];
                    snprintf(op, sizeof op, "mhla M%lld", (long long)M);
                    row(op, D, Dv, H, dt, pn, io, [&] { return la_mhla_forward(&p, &tq, &tk, &tv, &W, &to, BCTX); });
                }
                if (D == Dv) { /* focused flatten, map 128 × 256, with and without a 5×5 conv + bias */
                    la_tensor conv, bias;
                    const int64_t nc[3] = {Dv, 5, 5}, nbv[1] = {Dv};
                    la_tensor_init(&conv, Wd, LA_F32, LA_DEVICE_CUDA, 3, nc);
                    la_tensor_init(&bias, Wd, LA_F32, LA_DEVICE_CUDA, 1, nbv);
                    la_focused_params p;
                    la_focused_params_init(&p);
                    p.map_h = 128;
                    p.map_w = 256;
                    row("focused", D, Dv, H, dt, pn, io, [&] {
                        return la_focused_attention(&p, &tq, &tk, &tv, nullptr, nullptr, nullptr, nullptr, &to, BCTX);
                    });
                    row("focused+cv", D, Dv, H, dt, pn, io + 4.0 * N * H * Dv, [&] {
                        return la_focused_attention(&p, &tq, &tk, &tv, &conv, &bias, nullptr, nullptr, &to, BCTX);
                    });
                }
            }
        }
    }
    bench_variant("linear", nullptr);
    bench_variant("mhla", nullptr);
    bench_variant("focused", nullptr);
    CK(cudaFree(q)); CK(cudaFree(k)); CK(cudaFree(v)); CK(cudaFree(o)); CK(cudaFree(Wd));
}

/* MHLA at the Wan-2.1 video shape: grid 21×30×50 (N = 31500), blocks 3×5×10
 * (M = 150), H = 12, D = Dv = 128, shared W; reps = 0: one call (bf16,
 * per_query; for ncu), else per element type of dts and per normalize mode
 * (per_query, none) the median of reps timed calls, the time per call back
 * to back, the byte floors and the variants taken. */
void wan(int reps, const std::vector<la_dtype> &dts) {
    const int64_t N = 21 * 30 * 50, H = 12, D = 128, M = 150;
    const size_t n = (size_t)N * H * D;
    void *q = make(n, 1), *k = make(n, 2), *v = make(n, 3), *o = make(n, 4);
    float *Wd;
    CK(cudaMalloc(&Wd, sizeof(float) * M * M));
    std::vector<float> w(M * M);
    for (size_t i = 0; i < w.size(); i++) w[i] = 0.01f + (float)((i * 7919) % 1000) / 1000.f;
    CK(cudaMemcpy(Wd, w.data(), sizeof(float) * w.size(), cudaMemcpyHostToDevice));
    la_tensor W;
    const int64_t nw[2] = {M, M};
    la_tensor_init(&W, Wd, LA_F32, LA_DEVICE_CUDA, 2, nw);
    la_mhla_params p;
    la_mhla_params_init(&p);
    p.grid_ndim = 3;
    p.grid[0] = 21; p.grid[1] = 30; p.grid[2] = 50;
    p.blocks[0] = 3; p.blocks[1] = 5; p.blocks[2] = 10;
    if (reps == 0) {
        la_tensor tq = view(q, 1, N, H, D), tk = view(k, 1, N, H, D), tv = view(v, 1, N, H, D),
                  to = view(o, 1, N, H, D);
        LK(la_mhla_forward(&p, &tq, &tk, &tv, &W, &to, BCTX));
        CK(cudaDeviceSynchronize());
        printf("wan: one call done\n");
    }
    bool is_f16 = false;
    for (la_dtype dt : reps ? dts : std::vector<la_dtype>{}) {
        if (dt == LA_F16 && !is_f16) {
            for (void *x : {q, k, v, o}) to_f16(x, n);
            is_f16 = true;
        }
        la_tensor tq = view(q, dt, 4, 1, N, H, D), tk = view(k, dt, 4, 1, N, H, D),
                  tv = view(v, dt, 4, 1, N, H, D), to = view(o, dt, 4, 1, N, H, D);
        for (la_mhla_normalize nm : {LA_MHLA_NORM_PER_QUERY, LA_MHLA_NORM_NONE}) {
            p.normalize = nm;
            auto call = [&] { return la_mhla_forward(&p, &tq, &tk, &tv, &W, &to, BCTX); };
            const char *nn = nm == LA_MHLA_NORM_NONE ? "none" : "per_query";
            const std::string pick = bench_pick(call);
            if (pick == "refused") {
                printf("mhla wan   21x30x50/3x5x10 M150 H12 D128 %-4s %-9s refused: %s\n", dt_name(dt), nn,
                       la_last_error());
                continue;
            }
            const double ms = time_ms(call, reps);
            const double io = 8.0 * n, summ = (double)H * M * (D * D + D);
            printf("mhla wan   21x30x50/3x5x10 M150 H12 D128 %-4s %-9s %.4f ms per call (%.4f ms back to back); "
                   "floor Q,K,V,O %.4f ms, + fp32 partials and bf16 S~ (write + read) %.4f ms  pick %s\n",
                   dt_name(dt), nn, ms, batch_ms([&] { LK(call()); }, reps), io / BW * 1e3,
                   (io + 2 * 4 * summ + 2 * 2 * summ) / BW * 1e3, pick.c_str());
            fflush(stdout);
        }
    }
    CK(cudaFree(q)); CK(cudaFree(k)); CK(cudaFree(v)); CK(cudaFree(o)); CK(cudaFree(Wd));
}

}  // namespace

/* linear_heads MODE [bf16|f16|both] [default]: the element types of the
 * time / wan rows (default bf16), "default": no "portable" rows in time */
int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "all";
    std::vector<la_dtype> dts = {LA_BF16};
    bool portable = true;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "f16")) dts = {LA_F16};
        else if (!strcmp(argv[i], "both")) dts = {LA_BF16, LA_F16};
        else if (!strcmp(argv[i], "bf16")) dts = {LA_BF16};
        else if (!strcmp(argv[i], "default")) portable = false;
        else {
            fprintf(stderr, "linear_heads: unknown option '%s' (bf16, f16, both, default)\n", argv[i]);
            return 2;
        }
    }
    if (!strcmp(what, "wan")) wan(50, dts);
    if (!strcmp(what, "wan1")) wan(0, dts);
    if (!strcmp(what, "check") || !strcmp(what, "all")) check_all();
    if (!strcmp(what, "time") || !strcmp(what, "all")) time_all(dts, portable);
    return fails ? 1 : 0;
}
