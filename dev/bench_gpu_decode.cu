/* Timing driver for the CUDA MHLA decoding state (src/cuda/mhla_decode.cu)
 * through the public C API: H = 12, D = Dv = 128, bf16, chunk C = 64,
 * normalize none, B = 1 and B = 32 sequences, context L = 4K and 64K tokens.
 *
 * Each case: create the state on the device, prefill L tokens by appending
 * chunks of 4096 tokens (the same random chunk again; rows 0 .. L/64-1 of the
 * mixing are uniform-causal, so their block starts take the O(d·dv) path),
 * then time on the context's stream with CUDA events:
 *   start   the token that opens block L/64, whose mixing row is general
 *           (random): the O(M·d·dv) reduction over the L/64 finished blocks
 *           plus one token;
 *   token   the median over 9 runs of (63 single-token appends inside that
 *           block)/63 — the steady decode step, host launch included;
 *   startT  the token that opens block L/64+1 (a uniform row: mix = c·T);
 *   amort   (start + 63·token)/64 with the general row — every row general.
 * Bytes per token: the token kernel reads P and mix and writes P, 3·D·Dv·4
 * bytes per (sequence, head); the general start reads the blk finished
 * summaries and touches P, S, T, mix: (blk + 5)·D·Dv·4. Floors at 4.2 TB/s.
 *
 *   nvcc -O2 -std=c++17 -Iinclude -Isrc dev/bench_gpu_decode.cu build-gpu/liblongattn.a \
 *        -Xcompiler -fopenmp -lopenblas -ldl -o build-gpu/bench_gpu_decode
 *   build-gpu/bench_gpu_decode [quick]     (quick: L = 4K only)
 */
#include "bench_gpu_common.cuh"

static void run_case(int64_t B, int64_t L, cudaStream_t stream, la_context *ctx) {
    const int64_t H = 12, D = 128, Dv = 128, C = 64, CH = 4096;
    const int64_t M = L / C + 2;
    /* mixing [M,M] f32: uniform-causal rows, row L/C general */
    std::vector<float> w((size_t)(M * M), 0.f);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j <= i; j++) w[(size_t)(i * M + j)] = 1.f / (float)(i + 1);
    srand(1);
    for (int64_t j = 0; j <= L / C; j++)
        w[(size_t)((L / C) * M + j)] = 0.5f * (float)rand() / (float)RAND_MAX / (float)(L / C + 1);
    float *dw = nullptr;
    CK(cudaMalloc(&dw, w.size() * 4));
    CK(cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
    la_tensor W;
    int64_t wne[2] = {M, M};
    la_tensor_init(&W, dw, LA_F32, LA_DEVICE_CUDA, 2, wne);

    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    p.chunk = C;
    la_mhla_state *st = nullptr;
    la_status s = la_mhla_state_create(&p, B, H, D, Dv, &W, &st);
    const double gb = (double)B * H * M * D * Dv * 4 / 1e9;
    if (s != LA_OK) {
        printf("B=%-3lld L=%-6lld create failed (%.1f GB of summaries): %s\n", (long long)B,
               (long long)L, gb, la_last_error());
        cudaFree(dw);
        return;
    }
    /* prefill */
    const int64_t ch = std::min(CH, L);
    void *q = make((size_t)(B * ch * H * D), 1), *k = make((size_t)(B * ch * H * D), 2),
         *v = make((size_t)(B * ch * H * Dv), 3), *o = make((size_t)(B * ch * H * Dv), 4);
    la_tensor tq = view(q, B, ch, H, D), tk = view(k, B, ch, H, D), tv = view(v, B, ch, H, Dv),
              to = view(o, B, ch, H, Dv);
    CK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, stream));
    for (int64_t r = 0; r < L; r += ch) LK(la_mhla_state_append(st, &tq, &tk, &tv, &to, ctx));
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    float ms_pre = 0;
    CK(cudaEventElapsedTime(&ms_pre, e0, e1));

    /* single tokens: views of the first token of the chunk */
    la_tensor q1 = view(q, B, 1, H, D), k1 = view(k, B, 1, H, D), v1 = view(v, B, 1, H, Dv),
              o1 = view(o, B, 1, H, Dv);
    q1.nb[0] = k1.nb[0] = tq.nb[0];
    v1.nb[0] = o1.nb[0] = tv.nb[0];
    float ms_start = 0, ms_startT = 0;
    CK(cudaEventRecord(e0, stream));
    LK(la_mhla_state_append(st, &q1, &k1, &v1, &o1, ctx)); /* opens block L/C: general row */
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms_start, e0, e1));
    std::vector<float> tok;
    int64_t left = C - 1; /* tokens left in block L/C */
    for (int rep = 0; rep < 9; rep++) {
        /* 7 tokens per rep, 63 in all, stays inside the block */
        const int per = 7;
        CK(cudaEventRecord(e0, stream));
        for (int i = 0; i < per; i++) LK(la_mhla_state_append(st, &q1, &k1, &v1, &o1, ctx));
        CK(cudaEventRecord(e1, stream));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        tok.push_back(ms / per);
        left -= per;
    }
    (void)left;
    CK(cudaEventRecord(e0, stream));
    LK(la_mhla_state_append(st, &q1, &k1, &v1, &o1, ctx)); /* opens block L/C+1: uniform row */
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms_startT, e0, e1));
    std::sort(tok.begin(), tok.end());
    const double us_tok = tok[tok.size() / 2] * 1e3, us_start = ms_start * 1e3,
                 us_startT = ms_startT * 1e3;
    const double SE4 = (double)D * Dv * 4, BHd = (double)B * H;
    const double by_tok = BHd * 3 * SE4, by_start = BHd * ((double)(L / C) + 5) * SE4 + by_tok;
    const double amort = (us_start + (C - 1) * us_tok) / C;
    printf("B=%-3lld L=%-6lld | token %8.2f us (floor %7.2f, %5.2f MB) | start %9.1f us "
           "(floor %8.1f, %7.1f MB) | startT %7.2f us | amort %8.2f us/tok | prefill %.2f "
           "us/tok | %.1f GB\n",
           (long long)B, (long long)L, us_tok, by_tok / BW * 1e6, by_tok / 1e6, us_start,
           by_start / BW * 1e6, by_start / 1e6, us_startT, amort, ms_pre * 1e3 / (double)L, gb);
    fflush(stdout);
    LK(la_mhla_state_destroy(st));
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(o);
    cudaFree(dw);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "quick");
    int avail = 0;
    la_cuda_available(&avail);
    if (!avail) {
        printf("no CUDA device\n");
        return 0;
    }
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    la_context *ctx = nullptr;
    LK(la_context_create(&ctx));
    LK(la_context_set_cuda_stream(ctx, stream));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# MHLA decode on %s: H=12 D=Dv=128 bf16 C=64 normalize=none; floors at %.1f TB/s\n",
           prop.name, BW / 1e12);
    const int64_t Ls[2] = {4096, 65536};
    for (int li = 0; li < (quick ? 1 : 2); li++)
        for (int64_t B : {1, 32}) run_case(B, Ls[li], stream, ctx);
    la_context_destroy(ctx);
    cudaStreamDestroy(stream);
    return 0;
}
