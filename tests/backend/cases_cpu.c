/* Case table of the CPU path against float64 references (backend BO_CPU):
 * softmax, linear (non-causal and causal, with state), MHLA (non-causal on
 * 1-D/2-D/3-D grids, causal) and focused attention (flatten) -- top-k, the
 * DSA indexer and sparse attention are in cases_cpu_sparse.c --, on fresh random inputs at odd sizes (N = 1,
 * 63, 65, 1000; D = 16, 32, 63, 64, 128; Dv != D), in every layout of
 * tests/cpu/dense_views.h (contiguous, a permuted [B,H,N,D] buffer, strided
 * rows whose gaps hold NaN), f32 / f64 / bf16 / f16 views, outputs poisoned with
 * NaN before the call.
 *
 * The error bound is relative to a same-precision reference: each reference
 * is written once as a macro and instantiated in double (the reference) and
 * in float (a plain fp32 implementation of the same formula, its result
 * rounded to the output dtype). A case passes when
 *   err(op) <= max(floor, 2 err(fp32 formula))
 * with err = max|x - ref64| / max|ref64| and floor 1e-5 for f32/f64 outputs
 * (the CPU computes in fp32), 0 for bf16 / f16 outputs (whose rounding dominates).
 * Outputs are checked in full (a NaN left is an unwritten entry) and, for the
 * strided layout, nothing outside the view may be written (gaps stay NaN).
 * MHLA's released_vision normalization and the blog variant of focused
 * attention have their references in tests/cpu/test_mhla.c and
 * test_focused.c only. Kept short: the whole table
 * runs in a few seconds on 2 cores (it is part of `make test`). */
#include "cpu_check.h"

/* ---- softmax ------------------------------------------------------------------ */
/* SOFTMAX_REF(T, name): o [B,Nq,H,Dv], lse [B,Nq,H] in T from q, k, v (logical
 * [B,N,H,D] order); causal bottom-right aligned, GQA h -> h / (H / Hk). */
#define SOFTMAX_REF(T, NAME)                                                                    \
    static void NAME(int causal, T scale, int64_t B, int64_t Nq, int64_t Nk, int64_t H,        \
                     int64_t Hk, int64_t D, int64_t Dv, const float *q, const float *k,         \
                     const float *v, double *o, double *lse) {                                  \
        T *s = malloc(sizeof(T) * (size_t)Nk), *acc = malloc(sizeof(T) * (size_t)Dv);           \
        for (int64_t b = 0; b < B; b++)                                                         \
            for (int64_t i = 0; i < Nq; i++)                                                    \
                for (int64_t h = 0; h < H; h++) {                                               \
                    const int64_t hk = h / (H / Hk), row = (b * Nq + i) * H + h;                \
                    const int64_t last = causal ? i + Nk - Nq : Nk - 1;                         \
                    const int64_t nvis = last + 1 < Nk ? last + 1 : Nk;                         \
                    for (int64_t e = 0; e < Dv; e++) acc[e] = 0;                                \
                    T m = -INFINITY, sum = 0;                                                   \
                    for (int64_t j = 0; j < nvis; j++) {                                        \
                        T dot = 0;                                                              \
                        for (int64_t d = 0; d < D; d++)                                         \
                            dot += (T)q[row * D + d] * (T)k[((b * Nk + j) * Hk + hk) * D + d];  \
                        s[j] = scale * dot;                                                     \
                        if (s[j] > m) m = s[j];                                                 \
                    }                                                                           \
                    for (int64_t j = 0; j < nvis; j++) {                                        \
                        const T pj = (T)exp((double)(s[j] - m));                                \
                        sum += pj;                                                              \
                        for (int64_t e = 0; e < Dv; e++)                                        \
                            acc[e] += pj * (T)v[((b * Nk + j) * Hk + hk) * Dv + e];             \
                    }                                                                           \
                    for (int64_t e = 0; e < Dv; e++) o[row * Dv + e] = nvis > 0 ? acc[e] / sum : 0; \
                    lse[row] = nvis > 0 ? (double)m + log((double)sum) : -INFINITY;             \
                }                                                                               \
        free(s);                                                                                \
        free(acc);                                                                              \
    }
SOFTMAX_REF(double, ref_softmax64)
SOFTMAX_REF(float, ref_softmax32)

typedef struct sm_args {
    int64_t B, Nq, Nk, H, Hk, D, Dv;
    int causal;
    la_dtype dt;
    int layout;
    float scale;
} sm_args;

static void cpu_softmax(const void *arg) {
    const sm_args *a = arg;
    int64_t nq[4] = {a->B, a->Nq, a->H, a->D}, nk[4] = {a->B, a->Nk, a->Hk, a->D},
            nv[4] = {a->B, a->Nk, a->Hk, a->Dv}, no[4] = {a->B, a->Nq, a->H, a->Dv},
            nl[3] = {a->B, a->Nq, a->H};
    const int64_t Eq = a->B * a->Nq * a->H * a->D, Ek = a->B * a->Nk * a->Hk * a->D,
                  Ev = a->B * a->Nk * a->Hk * a->Dv, Eo = a->B * a->Nq * a->H * a->Dv,
                  El = a->B * a->Nq * a->H;
    float *q = rand_rounded(Eq, 1.0, a->dt), *k = rand_rounded(Ek, 1.0, a->dt),
          *v = rand_rounded(Ev, 1.0, a->dt);
    hview hq = make_view(q, 4, nq, a->dt, a->layout), hk = make_view(k, 4, nk, a->dt, a->layout),
          hv = make_view(v, 4, nv, a->dt, a->layout), ho = make_view(NULL, 4, no, a->dt, a->layout),
          hl = make_view(NULL, 3, nl, LA_F32, 0);
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = a->causal;
    p.scale = a->scale;
    CHECK_OK(la_softmax_attention(&p, &hq.t, &hk.t, &hv.t, &ho.t, &hl.t, bo_ctx()));
    const double scale = a->scale != 0.f ? a->scale : 1.0 / sqrt((double)a->D);
    double *o64 = malloc(8 * (size_t)Eo), *l64 = malloc(8 * (size_t)El), *o32 = malloc(8 * (size_t)Eo),
           *l32 = malloc(8 * (size_t)El);
    ref_softmax64(a->causal, scale, a->B, a->Nq, a->Nk, a->H, a->Hk, a->D, a->Dv, q, k, v, o64, l64);
    ref_softmax32(a->causal, (float)scale, a->B, a->Nq, a->Nk, a->H, a->Hk, a->D, a->Dv, q, k, v,
                  o32, l32);
    float *go = malloc(4 * (size_t)Eo), *gl = malloc(4 * (size_t)El);
    read_view(&ho, go);
    read_view(&hl, gl);
    check_out("out", go, o64, o32, Eo, a->dt);
    int64_t lbad = 0;
    double lerr = 0;
    for (int64_t i = 0; i < El; i++) {
        if (isinf(l64[i])) {
            lbad += !(isinf(gl[i]) && gl[i] < 0);
            continue;
        }
        if (!isfinite(gl[i])) lbad++;
        else lerr = fmax(lerr, fabs(gl[i] - l64[i]) / fmax(1.0, fabs(l64[i])));
    }
    CHECK(lbad == 0 && lerr <= 1e-5, "lse: %lld mismatched, max err %.3g", (long long)lbad, lerr);
    if (a->layout == L_GAPS) check_guard("out", &ho);
    free(q); free(k); free(v); free(o64); free(l64); free(o32); free(l32); free(go); free(gl);
    free(hq.buf); free(hk.buf); free(hv.buf); free(ho.buf); free(hl.buf);
}

/* ---- linear -------------------------------------------------------------------- */
/* LINEAR_REF(T, name): o [B,N,H,Dv] (and the final state S [B,H,D,Dv], z
 * [B,H,D]) of linear attention in T; non-causal: the summary of every
 * token; causal: the running one (initial state S0, z0 or zero). */
#define LINEAR_REF(T, NAME)                                                                     \
    static void NAME(const la_linear_params *p, int64_t B, int64_t N, int64_t H, int64_t D,    \
                     int64_t Dv, const float *q, const float *k, const float *v,               \
                     const float *S0, const float *z0, double *o, double *Sf, double *zf) {    \
        T *S = malloc(sizeof(T) * (size_t)(D * Dv)), *z = malloc(sizeof(T) * (size_t)D),        \
          *qt = malloc(sizeof(T) * (size_t)D);                                                 \
        for (int64_t b = 0; b < B; b++)                                                         \
            for (int64_t h = 0; h < H; h++) {                                                   \
                for (int64_t d = 0; d < D; d++) {                                               \
                    z[d] = z0 ? z0[(b * H + h) * D + d] : 0;                                    \
                    for (int64_t e = 0; e < Dv; e++)                                            \
                        S[d * Dv + e] = S0 ? S0[((b * H + h) * D + d) * Dv + e] : 0;            \
                }                                                                               \
                for (int pass = p->causal ? 1 : 0; pass < 2; pass++)                            \
                    for (int64_t t = 0; t < N; t++) {                                           \
                        const int64_t r = (b * N + t) * H + h;                                  \
                        if (pass == 0 || p->causal)                                             \
                            for (int64_t d = 0; d < D; d++) {                                   \
                                const T kd = (T)la_ref_feature(p->feature, k[r * D + d]);       \
                                z[d] += kd;                                                     \
                                for (int64_t e = 0; e < Dv; e++) S[d * Dv + e] += kd * (T)v[r * Dv + e]; \
                            }                                                                   \
                        if (pass == 1) {                                                        \
                            T den = 0;                                                          \
                            for (int64_t d = 0; d < D; d++) {                                   \
                                qt[d] = (T)p->scale_q * (T)la_ref_feature(p->feature, q[r * D + d]); \
                                den += qt[d] * z[d];                                            \
                            }                                                                   \
                            for (int64_t e = 0; e < Dv; e++) {                                  \
                                T num = 0;                                                      \
                                for (int64_t d = 0; d < D; d++) num += qt[d] * S[d * Dv + e];   \
                                o[r * Dv + e] = p->normalize ? num / (den + (T)p->eps) : num;   \
                            }                                                                   \
                        }                                                                       \
                    }                                                                           \
                if (Sf)                                                                         \
                    for (int64_t x = 0; x < D * Dv; x++) Sf[(b * H + h) * D * Dv + x] = S[x];   \
                if (zf)                                                                         \
                    for (int64_t d = 0; d < D; d++) zf[(b * H + h) * D + d] = z[d];             \
            }                                                                                   \
        free(S);                                                                                \
        free(z);                                                                                \
        free(qt);                                                                               \
    }
LINEAR_REF(double, ref_linear64)
LINEAR_REF(float, ref_linear32)

typedef struct lin_args {
    int64_t B, N, H, D, Dv;
    la_feature f;
    int causal, normalize;
    int64_t chunk;
    int state;
    la_dtype dt;
    int layout;
} lin_args;

static void cpu_linear(const void *arg) {
    const lin_args *a = arg;
    const int64_t B = a->B, N = a->N, H = a->H, D = a->D, Dv = a->Dv;
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv}, nS[4] = {B, H, D, Dv}, nz[3] = {B, H, D};
    const int64_t Eq = B * N * H * D, Ev = B * N * H * Dv, ES = B * H * D * Dv, Ez = B * H * D;
    float *q = rand_rounded(Eq, 1.0, a->dt), *k = rand_rounded(Eq, 1.0, a->dt),
          *v = rand_rounded(Ev, 1.0, a->dt);
    float *S0 = NULL, *z0 = NULL;
    hview hq = make_view(q, 4, nq, a->dt, a->layout), hk = make_view(k, 4, nq, a->dt, a->layout),
          hv = make_view(v, 4, nv, a->dt, a->layout), ho = make_view(NULL, 4, nv, a->dt, a->layout);
    hview hS0 = {0}, hz0 = {0}, hS = {0}, hz = {0};
    if (a->state) {
        S0 = rand_rounded(ES, 1.0, LA_F32);
        z0 = rand_rounded(Ez, 1.0, LA_F32);
        for (int64_t i = 0; i < Ez; i++) z0[i] = fabsf(z0[i]) * 5.f; /* den > 0 */
        hS0 = make_view(S0, 4, nS, LA_F32, 0);
        hz0 = make_view(z0, 3, nz, LA_F32, 0);
        hS = make_view(NULL, 4, nS, LA_F32, 0);
        hz = make_view(NULL, 3, nz, LA_F32, 0);
    }
    la_linear_params p;
    la_linear_params_init(&p);
    p.feature = a->f;
    p.causal = a->causal;
    p.normalize = a->normalize;
    p.chunk = a->chunk;
    p.scale_q = 0.7f;
    CHECK_OK(la_linear_attention(&p, &hq.t, &hk.t, &hv.t, &ho.t, a->state ? &hS0.t : NULL,
                                 a->state ? &hz0.t : NULL, a->state ? &hS.t : NULL,
                                 a->state ? &hz.t : NULL, bo_ctx()));
    double *o64 = malloc(8 * (size_t)Ev), *o32 = malloc(8 * (size_t)Ev);
    double *S64 = malloc(8 * (size_t)ES), *S32 = malloc(8 * (size_t)ES), *z64 = malloc(8 * (size_t)Ez),
           *z32 = malloc(8 * (size_t)Ez);
    ref_linear64(&p, B, N, H, D, Dv, q, k, v, S0, z0, o64, S64, z64);
    ref_linear32(&p, B, N, H, D, Dv, q, k, v, S0, z0, o32, S32, z32);
    float *g = malloc(4 * (size_t)(Ev > ES ? Ev : ES));
    read_view(&ho, g);
    check_out("out", g, o64, o32, Ev, a->dt);
    if (a->layout == L_GAPS) check_guard("out", &ho);
    if (a->state) {
        read_view(&hS, g);
        check_out("S_out", g, S64, S32, ES, LA_F32);
        read_view(&hz, g);
        check_out("z_out", g, z64, z32, Ez, LA_F32);
        free(hS0.buf); free(hz0.buf); free(hS.buf); free(hz.buf);
    }
    free(q); free(k); free(v); free(S0); free(z0); free(g);
    free(o64); free(o32); free(S64); free(S32); free(z64); free(z32);
    free(hq.buf); free(hk.buf); free(hv.buf); free(ho.buf);
}

/* ---- MHLA, non-causal and causal ----------------------------------------------------------- */
/* Block of token t on an nd-dimensional grid split into blocks (SPEC §5). */
static int64_t block_of(int nd, const int64_t *grid, const int64_t *blocks, int64_t t) {
    int64_t c[3], id = 0;
    for (int a = nd - 1; a >= 0; a--) {
        c[a] = t % grid[a];
        t /= grid[a];
    }
    for (int a = 0; a < nd; a++) id = id * blocks[a] + (c[a] * blocks[a]) / grid[a];
    return id;
}
/* MHLA_REF(T, name), the pairwise form of SPEC §5 / §9 in T:
 *   o_t = sum_s W[b(t), b(s)] (q~_t . k~_s) v_s  /  (sum_s W[..] (q~_t . k~_s) + eps)
 * (no division for normalize none), q~ = scale phi(q), k~ = phi(k); s runs
 * over every token (non-causal, blk = the grid's blocks) or s <= t (causal,
 * blk = t / chunk). W [Hw, M, M]. */
#define MHLA_REF(T, NAME)                                                                        \
    static void NAME(int64_t B, int64_t N, int64_t H, int64_t D, int64_t Dv, const float *q,     \
                     const float *k, const float *v, const float *W, int64_t Hw, int64_t M,      \
                     const int64_t *blk, int causal, la_feature f, int per_query, T eps, T scale, \
                     double *o) {                                                                \
        T *kf = malloc(sizeof(T) * (size_t)(N * D)), *qf = malloc(sizeof(T) * (size_t)D),        \
          *num = malloc(sizeof(T) * (size_t)Dv);                                                 \
        for (int64_t b = 0; b < B; b++)                                                          \
            for (int64_t h = 0; h < H; h++) {                                                    \
                const float *Wh = W + (Hw == 1 ? 0 : h) * M * M;                                 \
                for (int64_t s = 0; s < N; s++)                                                  \
                    for (int64_t d = 0; d < D; d++)                                              \
                        kf[s * D + d] = (T)la_ref_feature(f, k[((b * N + s) * H + h) * D + d]);  \
                for (int64_t t = 0; t < N; t++) {                                                \
                    for (int64_t d = 0; d < D; d++)                                              \
                        qf[d] = scale * (T)la_ref_feature(f, q[((b * N + t) * H + h) * D + d]);  \
                    T den = 0;                                                                   \
                    for (int64_t e = 0; e < Dv; e++) num[e] = 0;                                 \
                    for (int64_t s = 0; s < (causal ? t + 1 : N); s++) {                         \
                        T a = 0;                                                                 \
                        for (int64_t d = 0; d < D; d++) a += qf[d] * kf[s * D + d];              \
                        a *= (T)Wh[blk[t] * M + blk[s]];                                         \
                        den += a;                                                                \
                        for (int64_t e = 0; e < Dv; e++) num[e] += a * (T)v[((b * N + s) * H + h) * Dv + e]; \
                    }                                                                            \
                    for (int64_t e = 0; e < Dv; e++)                                             \
                        o[((b * N + t) * H + h) * Dv + e] = per_query ? num[e] / (den + eps) : num[e]; \
                }                                                                                \
            }                                                                                    \
        free(kf);                                                                                \
        free(qf);                                                                                \
        free(num);                                                                               \
    }
MHLA_REF(double, ref_mhla64)
MHLA_REF(float, ref_mhla32)

typedef struct mhla_args {
    int64_t B; int nd; int64_t grid[3], blocks[3]; /* causal: grid[0] = N, blocks[0] = chunk */
    int64_t H, D, Dv;
    int causal, per_query, per_head;
    la_dtype dt;
    int layout;
} mhla_args;

static void cpu_mhla(const void *arg) {
    const mhla_args *a = arg;
    int64_t N = 1, M = 1;
    for (int i = 0; i < a->nd; i++) N *= a->grid[i];
    const int64_t chunk = a->blocks[0];
    if (a->causal) M = (N + chunk - 1) / chunk + 1; /* one spare row and column: ignored */
    else
        for (int i = 0; i < a->nd; i++) M *= a->blocks[i];
    const int64_t B = a->B, H = a->H, D = a->D, Dv = a->Dv, Hw = a->per_head ? H : 1;
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv};
    float *q = rand_rounded(B * N * H * D, 1.0, a->dt), *k = rand_rounded(B * N * H * D, 1.0, a->dt),
          *v = rand_rounded(B * N * H * Dv, 1.0, a->dt), *W = malloc(4 * (size_t)(Hw * M * M));
    for (int64_t i = 0; i < Hw * M * M; i++) W[i] = (float)(0.05 + la_rng_uniform(&bo_rng));
    hview hq = make_view(q, 4, nq, a->dt, a->layout), hk = make_view(k, 4, nq, a->dt, a->layout),
          hv = make_view(v, 4, nv, a->dt, a->layout), ho = make_view(NULL, 4, nv, a->dt, a->layout);
    la_tensor tw;
    if (a->per_head) la_tensor_init(&tw, W, LA_F32, LA_DEVICE_CPU, 3, (int64_t[]){H, M, M});
    else la_tensor_init(&tw, W, LA_F32, LA_DEVICE_CPU, 2, (int64_t[]){M, M});
    int64_t *blk = malloc(sizeof(int64_t) * (size_t)N);
    double eps, scale;
    la_feature f;
    if (a->causal) {
        la_mhla_causal_params p;
        la_mhla_causal_params_init(&p);
        p.chunk = chunk;
        p.normalize = a->per_query ? LA_MHLA_NORM_PER_QUERY : LA_MHLA_NORM_NONE;
        if (a->per_query) p.feature = LA_FEATURE_RELU_EPS;
        CHECK_OK(la_mhla_causal_forward(&p, &hq.t, &hk.t, &hv.t, &tw, &ho.t, bo_ctx()));
        for (int64_t t = 0; t < N; t++) blk[t] = t / chunk;
        eps = p.eps;
        scale = p.scale_q != 0.f ? p.scale_q : 1.0 / sqrt((double)D);
        f = p.feature;
    } else {
        la_mhla_params p;
        la_mhla_params_init(&p);
        p.grid_ndim = a->nd;
        for (int i = 0; i < a->nd; i++) {
            p.grid[i] = a->grid[i];
            p.blocks[i] = a->blocks[i];
        }
        p.normalize = a->per_query ? LA_MHLA_NORM_PER_QUERY : LA_MHLA_NORM_NONE;
        p.scale_q = 0.9f;
        CHECK_OK(la_mhla_forward(&p, &hq.t, &hk.t, &hv.t, &tw, &ho.t, bo_ctx()));
        for (int64_t t = 0; t < N; t++) blk[t] = block_of(a->nd, a->grid, a->blocks, t);
        eps = p.eps;
        scale = p.scale_q;
        f = p.feature;
    }
    const int64_t Eo = B * N * H * Dv;
    double *o64 = malloc(8 * (size_t)Eo), *o32 = malloc(8 * (size_t)Eo);
    ref_mhla64(B, N, H, D, Dv, q, k, v, W, Hw, M, blk, a->causal, f, a->per_query, eps, scale, o64);
    ref_mhla32(B, N, H, D, Dv, q, k, v, W, Hw, M, blk, a->causal, f, a->per_query, (float)eps,
               (float)scale, o32);
    float *g = malloc(4 * (size_t)Eo);
    read_view(&ho, g);
    check_out("out", g, o64, o32, Eo, a->dt);
    if (a->layout == L_GAPS) check_guard("out", &ho);
    free(q); free(k); free(v); free(W); free(blk); free(o64); free(o32); free(g);
    free(hq.buf); free(hk.buf); free(hv.buf); free(ho.buf);
}

/* ---- focused linear attention, flatten (SPEC §4a) ------------------------------------------ */
/* FOCUSED_REF(T, name) in T: per token, x' = (relu(x) + 1e-6) / softplus(sp),
 * phi(x) = x'^p ||x'|| / ||x'^p|| over the H*D channels; then per head the
 * mean form o = (q~ S / N) / (q~ z / N + eps) with S = sum k~ v^T, z = sum
 * k~, plus the depthwise ks x ks conv of v (bias optional, zero padding on
 * the Hm x Wm map) when conv is given. */
#define FOCUSED_REF(T, NAME)                                                                     \
    static void NAME(int64_t B, int64_t Hm, int64_t Wm, int64_t H, int64_t D, int64_t Dv,       \
                     int64_t ks, const float *q, const float *k, const float *v,                \
                     const float *conv, const float *bias, const float *sp, T pf, T eps,        \
                     double *o) {                                                               \
        const int64_t N = Hm * Wm, C = H * D;                                                   \
        T *qt = malloc(sizeof(T) * (size_t)(N * C)), *kt = malloc(sizeof(T) * (size_t)(N * C)); \
        T *S = malloc(sizeof(T) * (size_t)(D * Dv)), *z = malloc(sizeof(T) * (size_t)D);        \
        for (int64_t b = 0; b < B; b++) {                                                       \
            for (int w = 0; w < 2; w++) {                                                       \
                const float *x = (w ? k : q) + b * N * C;                                       \
                T *y = w ? kt : qt;                                                             \
                for (int64_t n = 0; n < N; n++) {                                               \
                    T n2 = 0, np2 = 0;                                                          \
                    for (int64_t c = 0; c < C; c++) {                                           \
                        const T xv = (T)x[n * C + c], spv = sp ? (T)sp[c] : (T)0;               \
                        const T xp = ((xv > 0 ? xv : 0) + (T)1e-6) / (T)log1p(exp((double)spv)); \
                        y[n * C + c] = xp;                                                      \
                        n2 += xp * xp;                                                          \
                    }                                                                           \
                    for (int64_t c = 0; c < C; c++) {                                           \
                        const T t = (T)pow((double)y[n * C + c], (double)pf);                   \
                        y[n * C + c] = t;                                                       \
                        np2 += t * t;                                                           \
                    }                                                                           \
                    const T f = (T)sqrt((double)n2) / (T)sqrt((double)np2);                     \
                    for (int64_t c = 0; c < C; c++) y[n * C + c] *= f;                          \
                }                                                                               \
            }                                                                                   \
            const float *vb = v + b * N * H * Dv;                                               \
            for (int64_t h = 0; h < H; h++) {                                                   \
                for (int64_t j = 0; j < D; j++) {                                               \
                    z[j] = 0;                                                                   \
                    for (int64_t e = 0; e < Dv; e++) S[j * Dv + e] = 0;                         \
                    for (int64_t n = 0; n < N; n++) {                                           \
                        const T kv = kt[n * C + h * D + j];                                     \
                        z[j] += kv;                                                             \
                        for (int64_t e = 0; e < Dv; e++) S[j * Dv + e] += kv * (T)vb[(n * H + h) * Dv + e]; \
                    }                                                                           \
                }                                                                               \
                for (int64_t n = 0; n < N; n++) {                                               \
                    T den = 0;                                                                  \
                    for (int64_t j = 0; j < D; j++) den += qt[n * C + h * D + j] * z[j];        \
                    for (int64_t e = 0; e < Dv; e++) {                                          \
                        T num = 0;                                                              \
                        for (int64_t j = 0; j < D; j++) num += qt[n * C + h * D + j] * S[j * Dv + e]; \
                        T val = (num / (T)N) / (den / (T)N + eps);                              \
                        if (conv) {                                                             \
                            const int64_t yy0 = n / Wm, xx0 = n % Wm, r = ks / 2;               \
                            T acc = bias ? (T)bias[e] : 0;                                      \
                            for (int64_t u = 0; u < ks; u++)                                    \
                                for (int64_t w2 = 0; w2 < ks; w2++) {                           \
                                    const int64_t yy = yy0 + u - r, xx = xx0 + w2 - r;          \
                                    if (yy < 0 || yy >= Hm || xx < 0 || xx >= Wm) continue;     \
                                    acc += (T)conv[(e * ks + u) * ks + w2] *                    \
                                           (T)vb[((yy * Wm + xx) * H + h) * Dv + e];            \
                                }                                                               \
                            val += acc;                                                         \
                        }                                                                       \
                        o[((b * N + n) * H + h) * Dv + e] = val;                                \
                    }                                                                           \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
        free(qt);                                                                               \
        free(kt);                                                                               \
        free(S);                                                                                \
        free(z);                                                                                \
    }
FOCUSED_REF(double, ref_focused64)
FOCUSED_REF(float, ref_focused32)

typedef struct focused_args {
    int64_t B, Hm, Wm, H, D, Dv, ks;
    int with_bias, with_sp;
    float pf;
    la_dtype dt;
    int layout;
} focused_args;

static void cpu_focused(const void *arg) {
    const focused_args *a = arg;
    const int64_t B = a->B, N = a->Hm * a->Wm, H = a->H, D = a->D, Dv = a->Dv, ks = a->ks;
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv};
    float *q = rand_rounded(B * N * H * D, 1.0, a->dt), *k = rand_rounded(B * N * H * D, 1.0, a->dt),
          *v = rand_rounded(B * N * H * Dv, 1.0, a->dt);
    float *conv = ks ? rand_rounded(Dv * ks * ks, 0.3, LA_F32) : NULL;
    float *bias = ks && a->with_bias ? rand_rounded(Dv, 0.3, LA_F32) : NULL;
    float *sp = a->with_sp ? rand_rounded(H * D, 1.0, LA_F32) : NULL;
    hview hq = make_view(q, 4, nq, a->dt, a->layout), hk = make_view(k, 4, nq, a->dt, a->layout),
          hv = make_view(v, 4, nv, a->dt, a->layout), ho = make_view(NULL, 4, nv, a->dt, a->layout);
    la_tensor tc, tb, ts;
    if (conv) la_tensor_init(&tc, conv, LA_F32, LA_DEVICE_CPU, 3, (int64_t[]){Dv, ks, ks});
    if (bias) la_tensor_init(&tb, bias, LA_F32, LA_DEVICE_CPU, 1, (int64_t[]){Dv});
    if (sp) la_tensor_init(&ts, sp, LA_F32, LA_DEVICE_CPU, 1, (int64_t[]){H * D});
    la_focused_params p;
    la_focused_params_init(&p);
    p.variant = LA_FOCUSED_FLATTEN;
    p.map_h = a->Hm;
    p.map_w = a->Wm;
    p.p = a->pf;
    CHECK_OK(la_focused_attention(&p, &hq.t, &hk.t, &hv.t, conv ? &tc : NULL, bias ? &tb : NULL,
                                  sp ? &ts : NULL, NULL, &ho.t, bo_ctx()));
    const int64_t Eo = B * N * H * Dv;
    double *o64 = malloc(8 * (size_t)Eo), *o32 = malloc(8 * (size_t)Eo);
    ref_focused64(B, a->Hm, a->Wm, H, D, Dv, ks, q, k, v, conv, bias, sp, p.p, p.eps, o64);
    ref_focused32(B, a->Hm, a->Wm, H, D, Dv, ks, q, k, v, conv, bias, sp, p.p, p.eps, o32);
    float *g = malloc(4 * (size_t)Eo);
    read_view(&ho, g);
    check_out("out", g, o64, o32, Eo, a->dt);
    if (a->layout == L_GAPS) check_guard("out", &ho);
    free(q); free(k); free(v); free(conv); free(bias); free(sp); free(o64); free(o32); free(g);
    free(hq.buf); free(hk.buf); free(hv.buf); free(ho.buf);
}

/* ---- the table ---------------------------------------------------------------------------- */
void cases_cpu(bo_list *L) {
    /* softmax: B, Nq, Nk, H, Hk, D, Dv, causal, dtype, layout, scale */
    CPU_CASE("softmax", cpu_softmax, sm_args, 1, 1, 1, 1, 1, 16, 16, 0, LA_F32, L_CONTIG, 0.f);
    CPU_CASE("softmax", cpu_softmax, sm_args, 2, 63, 63, 2, 1, 16, 17, 1, LA_F32, L_BHND, 0.f);
    CPU_CASE("softmax", cpu_softmax, sm_args, 1, 65, 130, 4, 2, 63, 64, 1, LA_F32, L_GAPS, 0.f);
    CPU_CASE("softmax", cpu_softmax, sm_args, 1, 130, 65, 2, 2, 64, 32, 1, LA_F64, L_BHND, 0.3f);
    CPU_CASE("softmax", cpu_softmax, sm_args, 1, 1000, 1000, 2, 1, 32, 48, 1, LA_F32, L_CONTIG, 0.f);
    CPU_CASE("softmax", cpu_softmax, sm_args, 1, 65, 1000, 2, 2, 128, 128, 0, LA_BF16, L_GAPS, 0.f);
    CPU_CASE("softmax", cpu_softmax, sm_args, 1, 65, 1000, 2, 2, 128, 128, 0, LA_F16, L_GAPS, 0.f);
    CPU_CASE("softmax", cpu_softmax, sm_args, 1, 63, 65, 2, 2, 128, 64, 1, LA_BF16, L_BHND, -0.2f);
    CPU_CASE("softmax", cpu_softmax, sm_args, 1, 63, 65, 2, 2, 128, 64, 1, LA_F16, L_BHND, -0.2f);
    /* linear: B, N, H, D, Dv, feature, causal, normalize, chunk, state, dtype, layout */
    CPU_CASE("linear", cpu_linear, lin_args, 1, 1, 1, 16, 16, LA_FEATURE_RELU, 0, 1, 64, 0, LA_F32, L_CONTIG);
    CPU_CASE("linear", cpu_linear, lin_args, 2, 63, 3, 63, 64, LA_FEATURE_ELU1, 0, 1, 64, 0, LA_F32, L_BHND);
    CPU_CASE("linear", cpu_linear, lin_args, 1, 65, 2, 16, 17, LA_FEATURE_RELU1, 0, 0, 64, 0, LA_F64, L_GAPS);
    CPU_CASE("linear", cpu_linear, lin_args, 1, 1000, 2, 64, 32, LA_FEATURE_RELU_EPS, 0, 1, 64, 0, LA_BF16, L_BHND);
    CPU_CASE("linear", cpu_linear, lin_args, 1, 1000, 2, 64, 32, LA_FEATURE_RELU_EPS, 0, 1, 64, 0, LA_F16, L_BHND);
    CPU_CASE("linear", cpu_linear, lin_args, 1, 1, 1, 32, 32, LA_FEATURE_RELU, 1, 1, 64, 1, LA_F32, L_CONTIG);
    CPU_CASE("linear", cpu_linear, lin_args, 2, 63, 2, 16, 17, LA_FEATURE_ELU1, 1, 1, 7, 1, LA_F32, L_BHND);
    CPU_CASE("linear", cpu_linear, lin_args, 1, 65, 3, 63, 64, LA_FEATURE_RELU, 1, 0, 64, 1, LA_F32, L_GAPS);
    CPU_CASE("linear", cpu_linear, lin_args, 1, 1000, 2, 128, 128, LA_FEATURE_RELU1, 1, 1, 100, 1, LA_F32, L_CONTIG);
    CPU_CASE("linear", cpu_linear, lin_args, 1, 1000, 2, 64, 32, LA_FEATURE_ELU1, 1, 1, 64, 0, LA_BF16, L_BHND);
    CPU_CASE("linear", cpu_linear, lin_args, 1, 1000, 2, 64, 32, LA_FEATURE_ELU1, 1, 1, 64, 0, LA_F16, L_BHND);
    /* mhla: B, nd, grid, blocks (causal: {N}, {chunk}), H, D, Dv, causal, per_query,
     * per_head, dtype, layout */
    CPU_CASE("mhla", cpu_mhla, mhla_args, 1, 1, {1}, {1}, 1, 16, 16, 0, 1, 0, LA_F32, L_CONTIG);
    CPU_CASE("mhla", cpu_mhla, mhla_args, 2, 1, {65}, {5}, 3, 63, 64, 0, 1, 1, LA_F32, L_BHND);
    CPU_CASE("mhla", cpu_mhla, mhla_args, 1, 2, {15, 17}, {4, 3}, 2, 16, 17, 0, 0, 0, LA_F32, L_GAPS);
    CPU_CASE("mhla", cpu_mhla, mhla_args, 1, 3, {5, 6, 7}, {2, 3, 2}, 2, 32, 32, 0, 1, 1, LA_F64, L_CONTIG);
    CPU_CASE("mhla", cpu_mhla, mhla_args, 1, 1, {1000}, {16}, 2, 64, 32, 0, 1, 0, LA_BF16, L_BHND);
    CPU_CASE("mhla", cpu_mhla, mhla_args, 1, 1, {1000}, {16}, 2, 64, 32, 0, 1, 0, LA_F16, L_BHND);
    CPU_CASE("mhla_causal", cpu_mhla, mhla_args, 1, 1, {1}, {64}, 1, 16, 16, 1, 0, 0, LA_F32, L_CONTIG);
    CPU_CASE("mhla_causal", cpu_mhla, mhla_args, 2, 1, {63}, {7}, 2, 16, 17, 1, 1, 1, LA_F32, L_BHND);
    CPU_CASE("mhla_causal", cpu_mhla, mhla_args, 1, 1, {300}, {64}, 2, 63, 32, 1, 0, 1, LA_F32, L_GAPS);
    CPU_CASE("mhla_causal", cpu_mhla, mhla_args, 1, 1, {1000}, {100}, 1, 128, 128, 1, 1, 0, LA_BF16, L_CONTIG);
    CPU_CASE("mhla_causal", cpu_mhla, mhla_args, 1, 1, {1000}, {100}, 1, 128, 128, 1, 1, 0, LA_F16, L_CONTIG);
    /* focused (flatten): B, Hm, Wm, H, D, Dv, conv k, bias, softplus, p, dtype, layout */
    CPU_CASE("focused", cpu_focused, focused_args, 1, 1, 1, 1, 16, 16, 0, 0, 0, 3.f, LA_F32, L_CONTIG);
    CPU_CASE("focused", cpu_focused, focused_args, 2, 7, 9, 2, 16, 16, 5, 1, 1, 3.f, LA_F32, L_BHND);
    CPU_CASE("focused", cpu_focused, focused_args, 1, 13, 5, 3, 63, 40, 0, 0, 1, 2.5f, LA_F32, L_GAPS);
    CPU_CASE("focused", cpu_focused, focused_args, 1, 5, 13, 2, 32, 32, 3, 0, 0, 4.f, LA_F64, L_CONTIG);
    CPU_CASE("focused", cpu_focused, focused_args, 1, 25, 40, 2, 64, 64, 3, 1, 1, 3.f, LA_BF16, L_BHND);
    CPU_CASE("focused", cpu_focused, focused_args, 1, 25, 40, 2, 64, 64, 3, 1, 1, 3.f, LA_F16, L_BHND);
}
