/* Internal pieces shared by the linear-family engine's kernels
 * (linfam_portable.cu: the portable fp32 engine; linfam_tc.cu: the bf16
 * tensor-core path; linfam.cu: the selection): the block geometry, the
 * feature maps, the launch arguments, the released_vision pass both paths
 * run. See linfam.cuh for the math and the passes. */
#ifndef LA_CUDA_LINFAM_ENGINE_CUH
#define LA_CUDA_LINFAM_ENGINE_CUH

#include "linfam.cuh"

constexpr int LF_NT = 256; /* threads per CTA of every engine kernel */

/* ---- geometry ------------------------------------------------------------ */
struct lf_geom {
    int64_t n[3], g[3];
    int64_t chunk;
};

struct lf_args {
    lf_problem P;
    lf_geom G;
    int64_t M, maxcnt, seg, segs, K, L;
    float *sum;   /* [BH][K][L] partial summaries (variant tc_bf16s:
                     S in bf16, [BH][K][D·Dv])                       */
    float *mix;   /* [BH][M][L] mixed summaries (causal: prefix;
                     tc_bf16s: the partial z, fp32 [BH][K][D])       */
    float *r;     /* [BH][M][maxcnt] released_vision q̃·z_b (or NULL) */
    /* tc_bf16s on fp16 inputs (16-bit summaries in fp16, each under a power
     * of two): ssc [BH][K], a partial's true S = stored · ssc; rsc [BH][M],
     * a mixed row's true S̃ = stored · rsc (NULL otherwise) */
    float *ssc, *rsc;
};

/* The geometry of P: blocks M, tokens per block maxcnt (causal: chunks). */
static inline lf_args lf_args_of(const lf_problem *P) {
    lf_args a;
    a.P = *P;
    for (int i = 0; i < 3; i++) {
        a.G.n[i] = P->n[i];
        a.G.g[i] = P->g[i];
    }
    a.G.chunk = P->chunk;
    if (P->chunk > 0) {
        a.M = la_cu_cdiv(P->N, P->chunk);
        a.maxcnt = P->chunk;
        a.seg = P->chunk;
    } else {
        a.M = P->g[0] * P->g[1] * P->g[2];
        a.maxcnt = la_cu_cdiv(P->n[0], P->g[0]) * la_cu_cdiv(P->n[1], P->g[1]) *
                   la_cu_cdiv(P->n[2], P->g[2]);
        a.seg = 512;
    }
    a.segs = a.K = a.L = 0;
    a.sum = a.mix = a.r = a.ssc = a.rsc = nullptr;
    return a;
}

/* The two paths' kernels and launches (a: lf_args_of(P)). */
la_status lf_run_portable(lf_args &a, cudaStream_t st);
la_status lf_run_tc(lf_args &a, cudaStream_t st);
/* The tensor-core path's mix pass (linfam_tc_mix.cu): partials a.sum into S̃
 * (Pb: bf16, or fp32 when pb_f32, the fp16 inputs' path) and z̃ (fp32 Pz);
 * M ≥ 2 through the expanded weights Wx [hw][Mp][Kp] (Mp, Kp: M, K rounded
 * up to LF_GM, LF_GK). */
constexpr int LF_GM = 64, LF_GK = 32;
la_status lf_tc_mix(const lf_args &a, void *Pb, bool pb_f32, float *Pz, float *Wx, int64_t Mp,
                    int64_t Kp, int64_t hw, cudaStream_t st);
/* Variant tc_bf16s (linfam_tc_bf16s.cu): bf16 summaries straight out of the
 * summary pass, the mixing as one bf16 tensor-core GEMM per head, the
 * tensor-core output pass. lf_tc_bf16s_why: NULL when it takes P (maxcnt:
 * tokens per block), else the first condition that fails. */
const char *lf_tc_bf16s_why(const lf_problem *P, int64_t M);
la_status lf_run_tc_bf16s(lf_args &a, cudaStream_t st);
/* Pieces of linfam_tc.cu that lf_run_tc_bf16s runs: the summary and output
 * tile lengths of (D, Dv), the summary pass writing bf16 S and fp32 z (D = Dv
 * in {64, 128}), the output pass over S̃ (bf16 [BH][M][D·Dv]) and z̃ (fp32
 * [BH][M][D]). */
void lf_tc_tiles(int64_t D, int64_t Dv, int *ft, int *fo);
la_status lf_tc_summary_bf16(const lf_args &a, cudaStream_t st);
la_status lf_tc_output_run(const lf_args &a, const __nv_bfloat16 *Pb, const float *Pz, int64_t groups,
                           int64_t tpc, cudaStream_t st);
/* The same two for fp16 inputs: the summary pass writing fp16 S under a power
 * of two per partial (a.ssc) and fp32 z; the output pass over fp16 S̃ whose
 * rows carry a.rsc, and z̃ (fp32). */
la_status lf_tc_summary_f16s(const lf_args &a, cudaStream_t st);
la_status lf_tc_output_f16s(const lf_args &a, const __half *Pb, const float *Pz, int64_t groups, int64_t tpc,
                            cudaStream_t st);
/* r[bh][b][w] = q̃_{b,w} · z_b over the partials a.sum (both paths) */
la_status lf_launch_rv(const lf_args &a, cudaStream_t st);

namespace {
constexpr int NT = LF_NT;

/* Box of block b: first coordinate and extent on each axis. A token at
 * coordinate c on an axis of n tokens and g blocks is in block ⌊c·g/n⌋, so
 * block a covers [⌈a·n/g⌉, ⌈(a+1)·n/g⌉). */
__device__ __forceinline__ void lf_box(const lf_geom &G, int64_t b, int64_t lo[3],
                                       int64_t cnt[3]) {
    if (G.chunk > 0) {
        lo[0] = lo[1] = 0;
        cnt[0] = cnt[1] = 1;
        lo[2] = b * G.chunk;
        int64_t rest = G.n[2] - lo[2];
        cnt[2] = rest < G.chunk ? rest : G.chunk;
        return;
    }
    for (int a = 2; a >= 0; a--) {
        int64_t ba = b % G.g[a];
        b /= G.g[a];
        int64_t l = (ba * G.n[a] + G.g[a] - 1) / G.g[a];
        int64_t h = ((ba + 1) * G.n[a] + G.g[a] - 1) / G.g[a];
        lo[a] = l;
        cnt[a] = h - l;
    }
}
/* Token index of position w (raster order inside the box). */
__device__ __forceinline__ int64_t lf_token(const lf_geom &G, const int64_t lo[3],
                                            const int64_t cnt[3], int64_t w) {
    int64_t i2 = w % cnt[2];
    w /= cnt[2];
    int64_t i1 = w % cnt[1];
    int64_t i0 = w / cnt[1];
    return ((lo[0] + i0) * G.n[1] + lo[1] + i1) * G.n[2] + lo[2] + i2;
}

__device__ __forceinline__ float lf_phi(const lf_feat &f, float x, int64_t c, int64_t bt) {
    if (f.kind == LF_FEAT_FLATTEN) {
        float u = (la_relu_nan(x) + 1e-6f) * f.inv_sp[c] * f.tok_m[bt];
        return (f.p == 3.f ? u * u * u : powf(u, f.p)) * f.tok_r[bt];
    }
    return la_cu_feature(f.kind, x * f.pre) * f.post;
}

__device__ __forceinline__ float lf_w(const la_cu_view &W, int64_t h, int64_t i, int64_t j) {
    return la_cu_ld(W.data, W.dt, h * W.nb[0] + i * W.nb[1] + j * W.nb[2]);
}

/* Depthwise k×k conv of v at token t, channel dv, zero padding k/2, + bias. */
__device__ float lf_dwc(const lf_problem &P, int64_t b, int64_t t, int64_t h, int64_t dv) {
    const int64_t y = t / P.map_w, x = t % P.map_w, r = P.ksize / 2;
    float acc = P.bias.data ? la_cu_ld(P.bias.data, P.bias.dt, dv * P.bias.nb[0]) : 0.f;
    for (int64_t a = 0; a < P.ksize; a++) {
        const int64_t yy = y + a - r;
        if (yy < 0 || yy >= P.map_h) continue;
        for (int64_t c = 0; c < P.ksize; c++) {
            const int64_t xx = x + c - r;
            if (xx < 0 || xx >= P.map_w) continue;
            float w = la_cu_ld(P.conv.data, P.conv.dt,
                               dv * P.conv.nb[0] + a * P.conv.nb[1] + c * P.conv.nb[2]);
            acc = fmaf(w, la_cu_ld4(P.v, b, yy * P.map_w + xx, h, dv), acc);
        }
    }
    return acc;
}
}  // namespace

#endif
