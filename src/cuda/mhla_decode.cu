/* The causal MHLA decoding state (SPEC §5.4) on CUDA: la_mhla_state_create
 * with a CUDA mixing tensor puts the whole state on the device; each
 * la_mhla_state_append then runs here, on the context's stream, with no host
 * synchronization. Same semantics as the CPU state (src/cpu/mhla_cpu.c,
 * state_append_head): q̃ = scale_q·φ(q), k̃ = φ(k), values augmented with a
 * column of ones when normalize = per_query (z̃ in column Dv), blocks of C
 * tokens; the block of token t is ⌊t/C⌋.
 *
 * Device memory (fp32), E = Dv (+1 with per_query), SE = D·E:
 *   S   [B·H][M][SE]  the summary of every finished block (S_b | z_b)
 *   P   [B·H][SE]     the open block (Σ k̃ [v|1]ᵀ of its tokens so far)
 *   mix [B·H][SE]     the open block's inter-block mixture Σ_{b<i} W[i,b] S_b
 *   T   [B·H][SE]     Σ of the finished S_b (rows of W constant below the
 *                     diagonal, e.g. uniform_causal: mix = W[i,0]·T, O(d·dv))
 *   W   [Hw][M][M]    copy of the mixing; rowc [Hw][M] the constant-row flags
 *
 * Appending n tokens walks them in segments that stay inside one block:
 *   - a segment that starts a block first launches dec_start (one thread per
 *     (b·h, entry of SE)): S[i-1] = P, T += P, mix = Σ_{b<i} W[i,b] S_b (or
 *     W[i,0]·T), P = 0 — a memory-bound stream over the finished summaries;
 *   - then dec_tokens (one CTA per b·h, all B·H sequences in one launch)
 *     takes the segment's tokens in order: P += k̃ [v|1]ᵀ,
 *     o = q̃ᵀ (mix + W[i,i]·P), out = o[:Dv] (/ (o[Dv] + eps)).
 * A single decode token per sequence is one launch (two at a block start). */
#include "common.cuh"
#include "cuda_ops.h"

#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr int DEC_THREADS = 512; /* 16 warps: rows of P split over warps, columns over lanes */
constexpr int DEC_WARPS = DEC_THREADS / 32;
constexpr int START_THREADS = 256;

struct dec_state {
    int64_t B, H, D, Dv, E, M, C, Hw;
    int feature, per_query;
    float scale_q, eps;
    int dev;
    float *W, *S, *P, *mix, *T;
    unsigned char *rowc;
    /* Appends may come on different streams (e.g. torch's current stream
     * changing between calls): each append waits for the previous one's
     * work through this event, then records it. */
    cudaEvent_t done;
    /* A launch failed in the middle of an append: the device state has moved
     * past `len`, so a retry would close a block twice; refuse further use. */
    int broken;
};

/* Close block blk-1 (when blk > 0) and form block blk's mixture. */
__global__ void dec_start(float *__restrict__ S, float *__restrict__ P, float *__restrict__ mix,
                          float *__restrict__ T, const float *__restrict__ W,
                          const unsigned char *__restrict__ rowc, int64_t SE, int64_t M,
                          int64_t H, int64_t Hw, int64_t blk) {
    const int64_t bh = blockIdx.x;
    const int64_t hw = Hw == 1 ? 0 : bh % H;
    const float *Wr = W + (hw * M + blk) * M;
    const bool rc = rowc[hw * M + blk] != 0;
    float *Sbh = S + bh * M * SE;
    for (int64_t x = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; x < SE;
         x += (int64_t)gridDim.y * blockDim.x) {
        const int64_t o = bh * SE + x;
        float m = 0.f;
        if (blk > 0) {
            const float p = P[o];
            Sbh[(blk - 1) * SE + x] = p;
            const float t = T[o] + p;
            T[o] = t;
            if (rc) {
                m = Wr[0] * t;
            } else {
                /* same order as the CPU: b = 0 .. blk-1 */
                const float *sp = Sbh + x;
                int64_t b = 0;
                for (; b + 4 <= blk - 1; b += 4) {
                    const float s0 = sp[b * SE], s1 = sp[(b + 1) * SE], s2 = sp[(b + 2) * SE],
                                s3 = sp[(b + 3) * SE];
                    m += Wr[b] * s0;
                    m += Wr[b + 1] * s1;
                    m += Wr[b + 2] * s2;
                    m += Wr[b + 3] * s3;
                }
                for (; b < blk - 1; b++) m += Wr[b] * sp[b * SE];
                m += Wr[blk - 1] * p;
            }
        }
        mix[o] = m;
        P[o] = 0.f;
    }
}

struct dec_args {
    la_cu_view q, k, v, out;
    int64_t r0, seg; /* rows [r0, r0+seg) of the views */
    int64_t H, D, Dv, E, M, Hw, blk;
    int feature, per_query;
    float scale_q, eps;
    const float *W;
    float *P;
    const float *mix;
};

/* One CTA per sequence and head (b·h = blockIdx.x); the segment's tokens in
 * order. Thread (warp w, lane l) owns the entries (d, j) with d ≡ w mod 16
 * and j ≡ l mod 32 of P: only it reads and writes them. */
__global__ void __launch_bounds__(DEC_THREADS) dec_tokens(const dec_args a) {
    extern __shared__ float sm[];
    float *qs = sm;                 /* [D] q̃            */
    float *ks = qs + a.D;           /* [D] k̃            */
    float *vs = ks + a.D;           /* [E] [v | 1]      */
    float *os = vs + a.E;           /* [E] q̃ᵀ(...)      */
    float *red = os + a.E;          /* [2][WARPS][32]   */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t bh = blockIdx.x, b = bh / a.H, h = bh % a.H;
    const int64_t hw = a.Hw == 1 ? 0 : h;
    const float wii = a.W[(hw * a.M + a.blk) * a.M + a.blk];
    const int64_t SE = a.D * a.E;
    float *P = a.P + bh * SE;
    const float *mix = a.mix + bh * SE;
    for (int64_t t = 0; t < a.seg; t++) {
        const int64_t row = a.r0 + t;
        for (int64_t d = tid; d < a.D; d += DEC_THREADS) {
            qs[d] = la_cu_feature(a.feature, la_cu_ld4(a.q, b, row, h, d)) * a.scale_q;
            ks[d] = la_cu_feature(a.feature, la_cu_ld4(a.k, b, row, h, d));
        }
        for (int64_t j = tid; j < a.E; j += DEC_THREADS)
            vs[j] = j < a.Dv ? la_cu_ld4(a.v, b, row, h, j) : 1.f;
        __syncthreads();
        int buf = 0;
        for (int64_t j0 = 0; j0 < a.E; j0 += 32, buf ^= 1) {
            const int64_t j = j0 + lane;
            float acc = 0.f;
            if (j < a.E) {
                const float vj = vs[j];
#pragma unroll 4
                for (int64_t d = warp; d < a.D; d += DEC_WARPS) {
                    const int64_t x = d * a.E + j;
                    const float p = P[x] + ks[d] * vj;
                    P[x] = p;
                    acc += qs[d] * (mix[x] + wii * p);
                }
            }
            red[(buf * DEC_WARPS + warp) * 32 + lane] = acc;
            __syncthreads();
            if (warp == 0) {
                float s = 0.f;
                for (int w = 0; w < DEC_WARPS; w++) s += red[(buf * DEC_WARPS + w) * 32 + lane];
                if (j < a.E) os[j] = s;
            }
        }
        __syncthreads();
        const float inv = a.per_query ? 1.f / (os[a.Dv] + a.eps) : 1.f;
        void *od = const_cast<void *>(a.out.data);
        for (int64_t j = tid; j < a.Dv; j += DEC_THREADS)
            la_cu_st(od, a.out.dt,
                     b * a.out.nb[0] + row * a.out.nb[1] + h * a.out.nb[2] + j * a.out.nb[3],
                     os[j] * inv);
        __syncthreads(); /* qs/ks/vs/os are rewritten by the next token */
    }
}

/* mixing [M,M] or [H,M,M], any float dtype and strides → f32 [Hw][M][M]. */
__global__ void dec_copy_w(float *__restrict__ dst, la_cu_view w, int ndim, int64_t Hw, int64_t M) {
    const int64_t n = Hw * M * M;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = e % M, i = (e / M) % M, hw = e / (M * M);
        const int64_t off = ndim == 3 ? hw * w.nb[0] + i * w.nb[1] + j * w.nb[2]
                                      : i * w.nb[0] + j * w.nb[1];
        dst[e] = la_cu_ld(w.data, w.dt, off);
    }
}

void dec_free(dec_state *s) {
    if (!s) return;
    cudaFree(s->W);
    cudaFree(s->S);
    cudaFree(s->P);
    cudaFree(s->mix);
    cudaFree(s->T);
    cudaFree(s->rowc);
    if (s->done) cudaEventDestroy(s->done);
    cudaGetLastError();
    free(s);
}

size_t tokens_smem(int64_t D, int64_t E) {
    return (size_t)(2 * D + 2 * E + 2 * DEC_WARPS * 32) * sizeof(float);
}

la_status dev_alloc(void **p, size_t bytes, const char *what, const dec_state *s) {
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        *p = nullptr;
        cudaGetLastError();
        return la_err(e == cudaErrorMemoryAllocation ? LA_ERR_NOMEM : LA_ERR_DEVICE,
                      "la_mhla_state_create: cannot allocate %zu bytes of device memory for %s "
                      "(B=%lld H=%lld M=%lld D=%lld Dv=%lld): %s",
                      bytes, what, (long long)s->B, (long long)s->H, (long long)s->M,
                      (long long)s->D, (long long)s->Dv, cudaGetErrorString(e));
    }
    return LA_OK;
}

} // namespace

extern "C" la_status la_mhla_state_create_cuda(const la_mhla_causal_params *p, int64_t B,
                                               int64_t H, int64_t D, int64_t Dv,
                                               const la_tensor *mixing, void **dev_state) {
    static const char *op = "la_mhla_state_create";
    *dev_state = nullptr;
    const int64_t M = mixing->ne[mixing->ndim - 1];
    const int64_t Hw = mixing->ndim == 3 ? H : 1;
    const int64_t E = Dv + (p->normalize == LA_MHLA_NORM_PER_QUERY ? 1 : 0);
    if (H > INT32_MAX / 2 || B > (INT32_MAX / 2) / H)
        return la_err(LA_ERR_SHAPE, "%s: B*H = %lld*%lld sequences exceed one launch's grid", op,
                      (long long)B, (long long)H);
    if (tokens_smem(D, E) > 48 * 1024)
        return la_err(LA_ERR_UNSUPPORTED, "%s: D = %lld, Dv = %lld are too large for the CUDA "
                      "decode kernel (it keeps q, k, v and one output row in 48 KiB of shared "
                      "memory); use the CPU state", op, (long long)D, (long long)Dv);

    /* sizes, checked for overflow before anything is allocated */
    size_t nSE = 1, nS, nP, nW, bS, bP, bW;
    LA_TRY(la_mul_size((size_t)D, (size_t)E, &nSE, "mhla cuda state: D*(Dv+1)"));
    LA_TRY(la_mul_size(nSE, (size_t)B, &nP, "mhla cuda state: open block [B,H,D,Dv+1]"));
    LA_TRY(la_mul_size(nP, (size_t)H, &nP, "mhla cuda state: open block [B,H,D,Dv+1]"));
    LA_TRY(la_mul_size(nP, (size_t)M, &nS, "mhla cuda state: summaries [B,H,M,D,Dv+1]"));
    LA_TRY(la_mul_size((size_t)Hw * (size_t)M, (size_t)M, &nW, "mhla cuda state: mixing"));
    LA_TRY(la_mul_size(nS, sizeof(float), &bS, "mhla cuda state: summaries"));
    LA_TRY(la_mul_size(nP, sizeof(float), &bP, "mhla cuda state: open block"));
    LA_TRY(la_mul_size(nW, sizeof(float), &bW, "mhla cuda state: mixing"));

    /* the mixing must be device memory of the current device */
    int dev = 0;
    LA_CU(cudaGetDevice(&dev));
    cudaPointerAttributes at;
    memset(&at, 0, sizeof at);
    if (cudaPointerGetAttributes(&at, mixing->data) != cudaSuccess ||
        (at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeManaged)) {
        cudaGetLastError();
        return la_err(LA_ERR_DEVICE, "%s: mixing is marked CUDA but its data is not device "
                      "memory", op);
    }
    if (at.type == cudaMemoryTypeDevice && at.device != dev)
        return la_err(LA_ERR_DEVICE, "%s: mixing lives on CUDA device %d but the current "
                      "device is %d (the state is created on the current device)", op,
                      at.device, dev);

    dec_state *s = (dec_state *)calloc(1, sizeof *s);
    if (!s) return la_err(LA_ERR_NOMEM, "%s: out of host memory", op);
    s->B = B, s->H = H, s->D = D, s->Dv = Dv, s->E = E, s->M = M, s->C = p->chunk, s->Hw = Hw;
    s->feature = (int)p->feature;
    s->per_query = p->normalize == LA_MHLA_NORM_PER_QUERY;
    s->scale_q = p->scale_q != 0.f ? p->scale_q : 1.f / sqrtf((float)D);
    s->eps = p->eps;
    s->dev = dev;
    la_status st = LA_OK;
    if ((st = dev_alloc((void **)&s->S, bS, "the block summaries", s)) != LA_OK ||
        (st = dev_alloc((void **)&s->P, bP, "the open block", s)) != LA_OK ||
        (st = dev_alloc((void **)&s->mix, bP, "the block mixture", s)) != LA_OK ||
        (st = dev_alloc((void **)&s->T, bP, "the summary total", s)) != LA_OK ||
        (st = dev_alloc((void **)&s->W, bW, "the mixing copy", s)) != LA_OK ||
        (st = dev_alloc((void **)&s->rowc, (size_t)(Hw * M), "the row flags", s)) != LA_OK) {
        dec_free(s);
        return st;
    }
    if (cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        dec_free(s);
        return la_err(LA_ERR_DEVICE, "%s: could not create the state's CUDA event", op);
    }
    std::vector<float> hw;
    std::vector<unsigned char> rc;
    try {
        hw.resize(nW);
        rc.resize((size_t)(Hw * M));
    } catch (...) {
        dec_free(s);
        return la_err(LA_ERR_NOMEM, "%s: out of host memory for the mixing copy", op);
    }
    /* Creation may synchronize (it is not on the decode path): the mixing may
     * have been written on any stream, and the first append may run on a
     * non-blocking stream. */
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) {
        const int64_t n = Hw * M * M;
        const int grid = (int)(n / 256 + 1 < 4096 ? n / 256 + 1 : 4096);
        dec_copy_w<<<grid, 256>>>(s->W, la_cu_view_of(mixing), mixing->ndim, Hw, M);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemset(s->P, 0, bP);
    if (e == cudaSuccess) e = cudaMemset(s->mix, 0, bP);
    if (e == cudaSuccess) e = cudaMemset(s->T, 0, bP);
    if (e == cudaSuccess) e = cudaMemcpy(hw.data(), s->W, bW, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) {
        /* rows with W[i,b] equal for all b < i: mix_i = W[i,0]·T (as the CPU) */
        for (int64_t w = 0; w < Hw; w++)
            for (int64_t i = 0; i < M; i++) {
                const float *row = hw.data() + (w * M + i) * M;
                unsigned char c = 1;
                for (int64_t j = 1; j < i && c; j++) c = row[j] == row[0];
                rc[(size_t)(w * M + i)] = c;
            }
        e = cudaMemcpy(s->rowc, rc.data(), (size_t)(Hw * M), cudaMemcpyHostToDevice);
    }
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        cudaGetLastError();
        dec_free(s);
        return la_err(LA_ERR_DEVICE, "%s: CUDA error while setting up the state: %s", op,
                      cudaGetErrorString(e));
    }
    *dev_state = s;
    return LA_OK;
}

extern "C" la_status la_mhla_state_append_cuda(void *dev_state, int64_t pos0, const la_tensor *q,
                                               const la_tensor *k, const la_tensor *v,
                                               la_tensor *out, la_context *ctx) {
    static const char *op = "la_mhla_state_append";
    dec_state *s = (dec_state *)dev_state;
    int dev = 0;
    LA_CU(cudaGetDevice(&dev));
    if (dev != s->dev)
        return la_err(LA_ERR_DEVICE, "%s: the state lives on CUDA device %d but the current "
                      "device is %d", op, s->dev, dev);
    if (s->broken)
        return la_err(LA_ERR_DEVICE, "%s: the state is unusable after an earlier append failed on "
                      "the device (its blocks moved past its length); destroy it", op);
    const cudaStream_t stream = la_cu_stream(ctx);
    /* an earlier, unrelated launch error is not this call's: clear it so the
     * launch checks below report this call's own */
    cudaGetLastError();
    LA_CU(cudaStreamWaitEvent(stream, s->done, 0));
    const int64_t n = q->ne[1], C = s->C, BH = s->B * s->H, SE = s->D * s->E;
    const size_t smem = tokens_smem(s->D, s->E);
    int64_t ytiles = (SE + START_THREADS - 1) / START_THREADS;
    if (ytiles > 1024) ytiles = 1024; /* dec_start strides over the rest */
    dec_args a;
    a.q = la_cu_view_of(q);
    a.k = la_cu_view_of(k);
    a.v = la_cu_view_of(v);
    a.out = la_cu_view_of(out);
    a.H = s->H, a.D = s->D, a.Dv = s->Dv, a.E = s->E, a.M = s->M, a.Hw = s->Hw;
    a.feature = s->feature, a.per_query = s->per_query;
    a.scale_q = s->scale_q, a.eps = s->eps;
    a.W = s->W, a.P = s->P, a.mix = s->mix;
    int64_t pos = pos0, r = 0;
    int launched = 0;
    while (r < n) {
        const int64_t blk = pos / C, off = pos % C;
        if (off == 0) {
            dec_start<<<dim3((unsigned)BH, (unsigned)ytiles), START_THREADS, 0, stream>>>(
                s->S, s->P, s->mix, s->T, s->W, s->rowc, SE, s->M, s->H, s->Hw, blk);
            if (cudaError_t e = cudaGetLastError()) {
                s->broken = launched > 0; /* a failed launch ran nothing; earlier ones did */
                return la_err(LA_ERR_DEVICE, "CUDA: launch of mhla decode block start failed (%s)%s",
                              cudaGetErrorString(e), s->broken ? "; the state is now unusable" : "");
            }
            launched++;
        }
        const int64_t seg = C - off < n - r ? C - off : n - r;
        a.r0 = r, a.seg = seg, a.blk = blk;
        dec_tokens<<<(unsigned)BH, DEC_THREADS, smem, stream>>>(a);
        if (cudaError_t e = cudaGetLastError()) {
            s->broken = launched > 0;
            return la_err(LA_ERR_DEVICE, "CUDA: launch of mhla decode tokens failed (%s)%s",
                          cudaGetErrorString(e), s->broken ? "; the state is now unusable" : "");
        }
        launched++;
        r += seg;
        pos += seg;
    }
    LA_CU(cudaEventRecord(s->done, stream));
    return LA_OK;
}

extern "C" void la_mhla_state_destroy_cuda(void *dev_state) {
    dec_free((dec_state *)dev_state);
}
