/* MHLA public entry points (SPEC §5): validate every view and option, then
 * dispatch to the CPU backend (src/cpu/mhla_*_cpu.c) or, for tensors on CUDA
 * in a CUDA build, to src/cuda/mhla.cu (forward passes) and
 * src/cuda/mhla_decode.cu (the decoding state, when its mixing is a CUDA
 * tensor). init and project on CUDA, or any CUDA call in a build without
 * CUDA, are answered LA_ERR_UNSUPPORTED with a message. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "cpu/mhla_cpu.h"
#ifdef LA_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

/* ---- params ---------------------------------------------------------------- */
la_status la_mhla_params_init(la_mhla_params *p) {
    if (!p) return la_err(LA_ERR_ARG, "la_mhla_params_init: p is NULL");
    memset(p, 0, sizeof(*p));
    p->grid_ndim = 1;
    p->grid[0] = 0;   /* = N */
    p->blocks[0] = 0; /* must be set: the block grid has no natural default */
    p->feature = LA_FEATURE_RELU_EPS;
    p->normalize = LA_MHLA_NORM_PER_QUERY;
    p->eps = 1e-6f;
    p->scale_q = 1.0f;
    return LA_OK;
}

la_status la_mhla_causal_params_init(la_mhla_causal_params *p) {
    if (!p) return la_err(LA_ERR_ARG, "la_mhla_causal_params_init: p is NULL");
    memset(p, 0, sizeof(*p));
    p->chunk = 64;
    p->feature = LA_FEATURE_RELU;
    p->normalize = LA_MHLA_NORM_NONE;
    p->eps = 1e-6f;
    p->scale_q = 0.0f; /* = D^-1/2 */
    return LA_OK;
}

static const char *norm_name(la_mhla_normalize n) {
    switch (n) {
    case LA_MHLA_NORM_PER_QUERY: return "per_query";
    case LA_MHLA_NORM_NONE: return "none";
    case LA_MHLA_NORM_RELEASED_VISION: return "released_vision";
    }
    return "?";
}

/* ---- shared checks ----------------------------------------------------------- */
/* q,k [B,N,H,D], v [B,N,H,Dv], out [B,N,H,Dv], all float, all on q's device,
 * out overlapping no input. */
static la_status check_qkvo(const char *op, const la_tensor *q, const la_tensor *k,
                            const la_tensor *v, const la_tensor *out) {
    char s1[96], s2[96];
    if (!q || !k || !v || !out)
        return la_err(LA_ERR_ARG, "%s: %s is NULL", op,
                      !q ? "q" : !k ? "k" : !v ? "v" : "out");
    la_device dev = q->device;
    if (dev != LA_DEVICE_CPU && dev != LA_DEVICE_CUDA)
        return la_err(LA_ERR_DEVICE, "%s: q has an unknown device %d", op, (int)dev);
    LA_TRY(la_check_tensor(q, "q", 4, LA_DT_FLOAT, dev, false));
    LA_TRY(la_check_tensor(k, "k", 4, LA_DT_FLOAT, dev, false));
    LA_TRY(la_check_tensor(v, "v", 4, LA_DT_FLOAT, dev, false));
    LA_TRY(la_check_tensor(out, "out", 4, LA_DT_FLOAT, dev, false));
    for (int a = 0; a < 4; a++)
        if (k->ne[a] != q->ne[a])
            return la_err(LA_ERR_SHAPE, "%s: k is %s but q [B,N,H,D] is %s (dim %d differs)", op,
                          la_shape_str(k, s1, sizeof s1), la_shape_str(q, s2, sizeof s2), a);
    for (int a = 0; a < 3; a++)
        if (v->ne[a] != q->ne[a])
            return la_err(LA_ERR_SHAPE, "%s: v [B,N,H,Dv] is %s but q is %s (dim %d differs)", op,
                          la_shape_str(v, s1, sizeof s1), la_shape_str(q, s2, sizeof s2), a);
    for (int a = 0; a < 4; a++)
        if (out->ne[a] != v->ne[a])
            return la_err(LA_ERR_SHAPE, "%s: out is %s, expected [B,N,H,Dv] = %s like v", op,
                          la_shape_str(out, s1, sizeof s1), la_shape_str(v, s2, sizeof s2));
    if (la_tensors_overlap(out, q) || la_tensors_overlap(out, k) || la_tensors_overlap(out, v))
        return la_err(LA_ERR_ARG, "%s: out %s overlaps an input (q, k or v); outputs must not alias inputs",
                      op, la_shape_str(out, s1, sizeof s1));
    return LA_OK;
}

/* mixing [M,M] or [H,M,M]; sets *M. */
static la_status check_mixing(const char *op, const la_tensor *w, int64_t H, la_device dev,
                              int64_t *M) {
    char s1[96];
    if (!w) return la_err(LA_ERR_ARG, "%s: mixing is NULL", op);
    if (w->ndim != 2 && w->ndim != 3)
        return la_err(LA_ERR_SHAPE, "%s: mixing must be [M,M] or [H,M,M], got rank %d", op,
                      w->ndim);
    LA_TRY(la_check_tensor(w, "mixing", w->ndim, LA_DT_FLOAT, dev, false));
    int64_t m0 = w->ne[w->ndim - 2], m1 = w->ne[w->ndim - 1];
    if (m0 != m1)
        return la_err(LA_ERR_SHAPE, "%s: mixing %s is not square in its last two dims", op,
                      la_shape_str(w, s1, sizeof s1));
    if (w->ndim == 3 && w->ne[0] != H)
        return la_err(LA_ERR_SHAPE, "%s: per-head mixing %s must be [H,M,M] with H = %lld", op,
                      la_shape_str(w, s1, sizeof s1), (long long)H);
    *M = m0;
    return LA_OK;
}

static la_status check_scalars(const char *op, la_feature f, float eps, float scale) {
    LA_TRY(la_check_feature(f, "feature"));
    if (!isfinite(eps) || eps < 0.0f)
        return la_err(LA_ERR_ARG, "%s: eps = %g must be finite and >= 0", op, (double)eps);
    if (!isfinite(scale))
        return la_err(LA_ERR_ARG, "%s: scale_q = %g must be finite", op, (double)scale);
    return LA_OK;
}

static la_status cuda_unsupported(const char *op) {
#ifdef LA_WITH_CUDA
    return la_err(LA_ERR_UNSUPPORTED, "%s: tensors on CUDA are not supported here (MHLA init "
                  "and project run on the CPU; pass CPU tensors)", op);
#else
    return la_err(LA_ERR_UNSUPPORTED, "%s: tensors are on CUDA but this build has no CUDA "
                  "backend (rebuild with nvcc, or pass CPU tensors)", op);
#endif
}

/* ---- non-causal -------------------------------------------------------------- */
la_status la_mhla_forward(const la_mhla_params *p, const la_tensor *q, const la_tensor *k,
                          const la_tensor *v, const la_tensor *mixing, la_tensor *out,
                          la_context *ctx) {
    static const char *op = "la_mhla_forward";
    char s1[96];
    if (!p) return la_err(LA_ERR_ARG, "%s: params p is NULL", op);
    LA_TRY(check_qkvo(op, q, k, v, out));
    const int64_t N = q->ne[1], H = q->ne[2];
    int64_t M = 0;
    LA_TRY(check_mixing(op, mixing, H, q->device, &M));
    if (la_tensors_overlap(out, mixing))
        return la_err(LA_ERR_ARG, "%s: out overlaps mixing", op);
    LA_TRY(check_scalars(op, p->feature, p->eps, p->scale_q));
    if (p->normalize != LA_MHLA_NORM_PER_QUERY && p->normalize != LA_MHLA_NORM_NONE &&
        p->normalize != LA_MHLA_NORM_RELEASED_VISION)
        return la_err(LA_ERR_ARG, "%s: normalize = %d is not per_query (0), none (1) or "
                      "released_vision (2)", op, (int)p->normalize);

    /* token grid and block grid */
    const int nd = p->grid_ndim;
    if (nd < 1 || nd > 3)
        return la_err(LA_ERR_ARG, "%s: grid_ndim = %d, expected 1, 2 or 3", op, nd);
    int64_t grid[3], blocks[3], prod = 1, Mg = 1;
    for (int a = 0; a < nd; a++) {
        grid[a] = (nd == 1 && p->grid[0] == 0) ? N : p->grid[a];
        blocks[a] = p->blocks[a];
        if (grid[a] <= 0)
            return la_err(LA_ERR_SHAPE, "%s: grid[%d] = %lld must be > 0", op, a,
                          (long long)grid[a]);
        if (prod > N / grid[a] + 1) prod = N + 1; /* saturate: only equality with N matters */
        else prod *= grid[a];
    }
    if (prod != N) {
        if (nd == 1)
            return la_err(LA_ERR_SHAPE, "%s: grid (%lld) does not match N = %lld of q %s", op,
                          (long long)grid[0], (long long)N, la_shape_str(q, s1, sizeof s1));
        if (nd == 2)
            return la_err(LA_ERR_SHAPE, "%s: grid %lldx%lld has %s tokens but q %s has N = %lld",
                          op, (long long)grid[0], (long long)grid[1],
                          prod > N ? "more" : "fewer", la_shape_str(q, s1, sizeof s1),
                          (long long)N);
        return la_err(LA_ERR_SHAPE, "%s: grid %lldx%lldx%lld has %s tokens but q %s has N = %lld",
                      op, (long long)grid[0], (long long)grid[1], (long long)grid[2],
                      prod > N ? "more" : "fewer", la_shape_str(q, s1, sizeof s1), (long long)N);
    }
    for (int a = 0; a < nd; a++) {
        if (blocks[a] <= 0)
            return la_err(LA_ERR_ARG, "%s: blocks[%d] = %lld must be >= 1 (set the block grid)",
                          op, a, (long long)blocks[a]);
        /* more blocks than tokens on an axis is valid (SPEC §5.1 assigns
         * tokens by floor(c*g/n): some blocks are empty, S_b = 0), but the
         * block count must stay addressable */
        if (blocks[a] > ((int64_t)1 << 31))
            return la_err(LA_ERR_SHAPE, "%s: blocks[%d] = %lld is too large", op, a,
                          (long long)blocks[a]);
        if (Mg > ((int64_t)1 << 31) / blocks[a])
            return la_err(LA_ERR_OVERFLOW, "%s: the block grid has more than 2^31 blocks", op);
        Mg *= blocks[a];
    }
    if (Mg != M)
        return la_err(LA_ERR_SHAPE, "%s: mixing %s has M = %lld but the block grid has %lld blocks",
                      op, la_shape_str(mixing, s1, sizeof s1), (long long)M, (long long)Mg);
    la_mhla_geom geom;
    la_mhla_geom_init(&geom, nd, grid, blocks);
    if (p->normalize == LA_MHLA_NORM_RELEASED_VISION && !geom.equal_blocks) {
        for (int a = 0; a < nd; a++)
            if (grid[a] % blocks[a])
                return la_err(LA_ERR_SHAPE, "%s: normalize released_vision needs equal block "
                              "sizes, but grid[%d] = %lld is not divisible by blocks[%d] = %lld",
                              op, a, (long long)grid[a], a, (long long)blocks[a]);
    }
    if (q->device == LA_DEVICE_CUDA) {
#ifdef LA_WITH_CUDA
        for (int a = 0; a < nd; a++)
            if (blocks[a] > grid[a])
                return la_err(LA_ERR_UNSUPPORTED, "%s: the CUDA backend needs a token in every "
                              "block (blocks <= grid on each axis); empty blocks work on the CPU", op);
        la_mhla_params pc = *p;
        for (int a = 0; a < nd; a++) pc.grid[a] = grid[a];
        LA_TRY(la_mhla_forward_cuda(&pc, q, k, v, mixing, out, ctx));
        la_err_clear();
        return LA_OK;
#else
        return cuda_unsupported(op);
#endif
    }
    LA_TRY(la_mhla_forward_cpu(p, &geom, q, k, v, mixing, out, ctx));
    la_err_clear();
    return LA_OK;
}

/* ---- causal ------------------------------------------------------------------ */
static la_status check_causal_params(const char *op, const la_mhla_causal_params *p) {
    if (!p) return la_err(LA_ERR_ARG, "%s: params p is NULL", op);
    if (p->chunk < 1)
        return la_err(LA_ERR_ARG, "%s: chunk = %lld must be >= 1", op, (long long)p->chunk);
    if (p->normalize != LA_MHLA_NORM_NONE && p->normalize != LA_MHLA_NORM_PER_QUERY)
        return la_err(LA_ERR_ARG, "%s: normalize = %s (%d) is not defined for causal MHLA "
                      "(none or per_query)", op, norm_name(p->normalize), (int)p->normalize);
    return check_scalars(op, p->feature, p->eps, p->scale_q);
}

/* scale_q 0 means D^-1/2. */
static float resolve_scale(float s, int64_t D) { return s != 0.0f ? s : 1.0f / sqrtf((float)D); }

la_status la_mhla_causal_forward(const la_mhla_causal_params *p, const la_tensor *q,
                                 const la_tensor *k, const la_tensor *v,
                                 const la_tensor *mixing, la_tensor *out, la_context *ctx) {
    static const char *op = "la_mhla_causal_forward";
    char s1[96];
    LA_TRY(check_causal_params(op, p));
    LA_TRY(check_qkvo(op, q, k, v, out));
    const int64_t N = q->ne[1], H = q->ne[2], D = q->ne[3];
    int64_t M = 0;
    LA_TRY(check_mixing(op, mixing, H, q->device, &M));
    if (la_tensors_overlap(out, mixing))
        return la_err(LA_ERR_ARG, "%s: out overlaps mixing", op);
    /* the backends count chunks as (N + chunk - 1) / chunk: refuse a chunk
     * whose arithmetic leaves int64 (a chunk over N is one chunk anyway) */
    if (p->chunk > INT64_MAX - N)
        return la_err(LA_ERR_ARG, "%s: chunk = %lld: N + chunk - 1 overflows int64 (N = %lld); "
                      "any chunk >= N gives one chunk", op, (long long)p->chunk, (long long)N);
    const int64_t nc = N / p->chunk + (N % p->chunk != 0);
    if (M < nc)
        return la_err(LA_ERR_SHAPE, "%s: mixing %s is too small: N = %lld tokens in chunks of "
                      "%lld need at least %lld x %lld", op, la_shape_str(mixing, s1, sizeof s1),
                      (long long)N, (long long)p->chunk, (long long)nc, (long long)nc);
    if (q->device == LA_DEVICE_CUDA) {
#ifdef LA_WITH_CUDA
        LA_TRY(la_mhla_causal_forward_cuda(p, q, k, v, mixing, out, ctx));
        la_err_clear();
        return LA_OK;
#else
        return cuda_unsupported(op);
#endif
    }
    la_mhla_causal_params pr = *p;
    pr.scale_q = resolve_scale(p->scale_q, D);
    LA_TRY(la_mhla_causal_forward_cpu(&pr, q, k, v, mixing, out, ctx));
    la_err_clear();
    return LA_OK;
}

/* ---- decoding state ------------------------------------------------------------ */
/* The public handle points at the CPU struct (src/cpu/mhla_cpu.h); a box
 * around it adds the device-side state. A CUDA state (mixing on CUDA) keeps
 * only p, B, H, D, Dv, M, Hw and len in the CPU struct, its arrays NULL. */
typedef struct mhla_state_box {
    struct la_mhla_state s; /* first: &box->s == (la_mhla_state *)box */
    void *dev;              /* la_mhla_state_create_cuda's state, or NULL */
} mhla_state_box;

static void *state_dev(const la_mhla_state *st) { return ((const mhla_state_box *)st)->dev; }

la_status la_mhla_state_create(const la_mhla_causal_params *p, int64_t B, int64_t H,
                               int64_t D, int64_t Dv, const la_tensor *mixing,
                               la_mhla_state **state) {
    static const char *op = "la_mhla_state_create";
    if (!state) return la_err(LA_ERR_ARG, "%s: state is NULL", op);
    *state = NULL;
    LA_TRY(check_causal_params(op, p));
    if (B <= 0 || H <= 0 || D <= 0 || Dv <= 0)
        return la_err(LA_ERR_SHAPE, "%s: B=%lld H=%lld D=%lld Dv=%lld must all be > 0", op,
                      (long long)B, (long long)H, (long long)D, (long long)Dv);
    if (mixing && mixing->device == LA_DEVICE_CUDA) {
#ifdef LA_WITH_CUDA
        int64_t Mc = 0;
        LA_TRY(check_mixing(op, mixing, H, LA_DEVICE_CUDA, &Mc));
        int avail = 0;
        if (la_cuda_available(&avail) != LA_OK || !avail)
            return la_err(LA_ERR_UNSUPPORTED, "%s: mixing is on CUDA but no CUDA device is "
                          "available (pass a CPU mixing for a CPU state)", op);
        if (Mc > INT64_MAX / p->chunk)
            return la_err(LA_ERR_OVERFLOW, "%s: capacity M·chunk = %lld·%lld overflows", op,
                          (long long)Mc, (long long)p->chunk);
        mhla_state_box *bx = (mhla_state_box *)calloc(1, sizeof(*bx));
        if (!bx) return la_err(LA_ERR_NOMEM, "%s: out of memory", op);
        bx->s.p = *p;
        bx->s.p.scale_q = resolve_scale(p->scale_q, D);
        bx->s.B = B, bx->s.H = H, bx->s.D = D, bx->s.Dv = Dv, bx->s.M = Mc;
        bx->s.Hw = mixing->ndim == 3 ? H : 1;
        la_status sc = la_mhla_state_create_cuda(&bx->s.p, B, H, D, Dv, mixing, &bx->dev);
        if (sc != LA_OK) {
            free(bx);
            return sc;
        }
        *state = &bx->s;
        la_err_clear();
        return LA_OK;
#else
        return cuda_unsupported(op);
#endif
    }
    int64_t M = 0;
    LA_TRY(check_mixing(op, mixing, H, LA_DEVICE_CPU, &M));
    if (M > INT64_MAX / p->chunk)
        return la_err(LA_ERR_OVERFLOW, "%s: capacity M·chunk = %lld·%lld overflows", op,
                      (long long)M, (long long)p->chunk);
    const int64_t Hw = mixing->ndim == 3 ? H : 1;
    size_t nS = 1, nP = 1, nW = 1;
    const int64_t fS[5] = {B, H, M, D, Dv + 1};
    for (int i = 0; i < 5; i++) LA_TRY(la_mul_size(nS, (size_t)fS[i], &nS, "mhla state: summaries [B,H,M,D,Dv+1]"));
    for (int i = 0; i < 5; i++)
        if (i != 2) LA_TRY(la_mul_size(nP, (size_t)fS[i], &nP, "mhla state: open block"));
    LA_TRY(la_mul_size(nW, (size_t)Hw, &nW, "mhla state: mixing"));
    LA_TRY(la_mul_size(nW, (size_t)M, &nW, "mhla state: mixing"));
    LA_TRY(la_mul_size(nW, (size_t)M, &nW, "mhla state: mixing"));
    size_t bS, bP, bW;
    LA_TRY(la_mul_size(nS, sizeof(float), &bS, "mhla state: summaries"));
    LA_TRY(la_mul_size(nP, sizeof(float), &bP, "mhla state: open block"));
    LA_TRY(la_mul_size(nW, sizeof(float), &bW, "mhla state: mixing"));

    mhla_state_box *box = (mhla_state_box *)calloc(1, sizeof(*box));
    if (!box) return la_err(LA_ERR_NOMEM, "%s: out of memory", op);
    la_mhla_state *st = &box->s;
    st->p = *p;
    st->p.scale_q = resolve_scale(p->scale_q, D);
    st->B = B, st->H = H, st->D = D, st->Dv = Dv, st->M = M, st->Hw = Hw;
    st->W = (float *)malloc(bW);
    st->S = (float *)malloc(bS);
    st->P = (float *)calloc(1, bP);
    st->mix = (float *)calloc(1, bP);
    st->T = (float *)calloc(1, bP);
    st->row_const = (unsigned char *)malloc((size_t)(Hw * M));
    if (!st->W || !st->S || !st->P || !st->mix || !st->T || !st->row_const) {
        la_mhla_state_destroy(st);
        return la_err(LA_ERR_NOMEM, "%s: cannot allocate %zu bytes of block summaries "
                      "(B=%lld H=%lld M=%lld D=%lld Dv=%lld)", op, bS, (long long)B,
                      (long long)H, (long long)M, (long long)D, (long long)Dv);
    }
    for (int64_t hw = 0; hw < Hw; hw++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < M; j++)
                st->W[(hw * M + i) * M + j] = la_load_f32(
                    mixing, mixing->ndim == 3 ? la_off3(mixing, hw, i, j) : la_off2(mixing, i, j));
    /* Touch every page of the summaries now: a first touch while decoding
     * (zeroing a fresh, possibly huge, page) would be a latency spike of a
     * block start. */
    memset(st->S, 0, bS);
    for (int64_t hw = 0; hw < Hw; hw++)
        for (int64_t i = 0; i < M; i++) {
            const float *row = st->W + (hw * M + i) * M;
            unsigned char c = 1;
            for (int64_t j = 1; j < i && c; j++) c = row[j] == row[0];
            st->row_const[hw * M + i] = c;
        }
    *state = st;
    la_err_clear();
    return LA_OK;
}

la_status la_mhla_state_append(la_mhla_state *st, const la_tensor *q, const la_tensor *k,
                               const la_tensor *v, la_tensor *out, la_context *ctx) {
    static const char *op = "la_mhla_state_append";
    char s1[96];
    if (!st) return la_err(LA_ERR_ARG, "%s: state is NULL", op);
    LA_TRY(check_qkvo(op, q, k, v, out));
    void *dev = state_dev(st);
    if (dev && q->device != LA_DEVICE_CUDA)
        return la_err(LA_ERR_DEVICE, "%s: q, k, v and out are on the CPU but this decoding state "
                      "lives on CUDA (its mixing was a CUDA tensor); pass CUDA tensors", op);
    if (!dev && q->device == LA_DEVICE_CUDA) {
#ifdef LA_WITH_CUDA
        return la_err(LA_ERR_DEVICE, "%s: q is on CUDA but this decoding state lives on the CPU "
                      "(create it with a CUDA mixing tensor for a device state)", op);
#else
        return cuda_unsupported(op);
#endif
    }
    if (q->ne[0] != st->B || q->ne[2] != st->H || q->ne[3] != st->D)
        return la_err(LA_ERR_SHAPE, "%s: q is %s but the state holds B=%lld H=%lld D=%lld", op,
                      la_shape_str(q, s1, sizeof s1), (long long)st->B, (long long)st->H,
                      (long long)st->D);
    if (v->ne[3] != st->Dv)
        return la_err(LA_ERR_SHAPE, "%s: v is %s but the state holds Dv=%lld", op,
                      la_shape_str(v, s1, sizeof s1), (long long)st->Dv);
    const int64_t n = q->ne[1], cap = st->M * st->p.chunk;
    if (n > cap - st->len)
        return la_err(LA_ERR_SHAPE, "%s: appending %lld tokens after %lld exceeds the state's "
                      "capacity M*chunk = %lld*%lld = %lld (mixing too small)", op, (long long)n,
                      (long long)st->len, (long long)st->M, (long long)st->p.chunk,
                      (long long)cap);
#ifdef LA_WITH_CUDA
    if (dev) {
        LA_TRY(la_mhla_state_append_cuda(dev, st->len, q, k, v, out, ctx));
        st->len += n;
        la_err_clear();
        return LA_OK;
    }
#endif
    LA_TRY(la_mhla_state_append_cpu(st, q, k, v, out, ctx));
    la_err_clear();
    return LA_OK;
}

la_status la_mhla_state_length(const la_mhla_state *st, int64_t *tokens) {
    if (!st || !tokens)
        return la_err(LA_ERR_ARG, "la_mhla_state_length: %s is NULL", !st ? "state" : "tokens");
    *tokens = st->len;
    return LA_OK;
}

la_status la_mhla_state_destroy(la_mhla_state *st) {
    if (!st) return LA_OK;
    free(st->W);
    free(st->S);
    free(st->P);
    free(st->mix);
    free(st->T);
    free(st->row_const);
#ifdef LA_WITH_CUDA
    if (state_dev(st)) la_mhla_state_destroy_cuda(state_dev(st));
#endif
    free((mhla_state_box *)st);
    return LA_OK;
}

/* ---- initializers (SPEC §5.3) ------------------------------------------------ */
la_status la_mhla_init(la_mhla_init_kind kind, int ndim, const int64_t *blocks, la_tensor *out) {
    static const char *op = "la_mhla_init";
    char s1[96];
    if (!blocks) return la_err(LA_ERR_ARG, "%s: blocks is NULL", op);
    if (ndim < 1 || ndim > 3)
        return la_err(LA_ERR_ARG, "%s: ndim = %d, expected 1, 2 or 3", op, ndim);
    if (kind != LA_MHLA_INIT_LOCALITY && kind != LA_MHLA_INIT_LOCALITY_GLOBAL &&
        kind != LA_MHLA_INIT_UNIFORM_CAUSAL)
        return la_err(LA_ERR_ARG, "%s: kind = %d is not locality (0), locality_global (1) or "
                      "uniform_causal (2)", op, (int)kind);
    if (kind == LA_MHLA_INIT_UNIFORM_CAUSAL && ndim != 1)
        return la_err(LA_ERR_ARG, "%s: uniform_causal takes a 1-D block count (chunks), got a "
                      "rank-%d block grid", op, ndim);
    int64_t M = 1;
    for (int a = 0; a < ndim; a++) {
        if (blocks[a] <= 0)
            return la_err(LA_ERR_ARG, "%s: blocks[%d] = %lld must be >= 1", op, a,
                          (long long)blocks[a]);
        if (blocks[a] > INT32_MAX / M)
            return la_err(LA_ERR_OVERFLOW, "%s: the block grid has too many blocks", op);
        M *= blocks[a];
    }
    if (!out) return la_err(LA_ERR_ARG, "%s: out is NULL", op);
    LA_TRY(la_check_tensor(out, "out", 2, LA_DT_FLOAT, LA_DEVICE_CPU, false));
    if (out->ne[0] != M || out->ne[1] != M)
        return la_err(LA_ERR_SHAPE, "%s: out is %s, expected [M,M] = [%lld, %lld] for the block "
                      "grid", op, la_shape_str(out, s1, sizeof s1), (long long)M, (long long)M);
    size_t bytes;
    LA_TRY(la_mul_size((size_t)M * (size_t)M, sizeof(double), &bytes, "mhla init: [M,M]"));
    double *w = (double *)malloc(bytes);
    double *cen = (double *)malloc((size_t)M * 3 * sizeof(double));
    if (!w || !cen) {
        free(w);
        free(cen);
        return la_err(LA_ERR_NOMEM, "%s: cannot allocate %zu bytes", op, bytes);
    }
    if (kind == LA_MHLA_INIT_UNIFORM_CAUSAL) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < M; j++) w[i * M + j] = j <= i ? 1.0 / (double)(i + 1) : 0.0;
    } else {
        /* block centres (coordinates + 0.5, block units), raster order */
        for (int64_t i = 0; i < M; i++) {
            int64_t r = i;
            for (int a = ndim - 1; a >= 0; a--) {
                cen[i * 3 + a] = (double)(r % blocks[a]) + 0.5;
                r /= blocks[a];
            }
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < M; j++) {
                double s = 0;
                for (int a = 0; a < ndim; a++) {
                    double d = cen[i * 3 + a] - cen[j * 3 + a];
                    s += d * d;
                }
                w[i * M + j] = sqrt(s);
            }
        if (kind == LA_MHLA_INIT_LOCALITY) {
            /* W[i,j] ∝ 1 − dist(i,j)/max_k dist(i,k), rows sum to 1 */
            for (int64_t i = 0; i < M; i++) {
                double mx = 0, sum = 0;
                for (int64_t j = 0; j < M; j++) mx = w[i * M + j] > mx ? w[i * M + j] : mx;
                for (int64_t j = 0; j < M; j++) {
                    w[i * M + j] = mx > 0 ? 1.0 - w[i * M + j] / mx : 1.0; /* M = 1: [[1]] */
                    sum += w[i * M + j];
                }
                for (int64_t j = 0; j < M; j++) w[i * M + j] /= sum; /* sum >= 1 (j = i) */
            }
        } else {
            /* W[i,j] = 1 − dist(i,j)/max_{a,b} dist(a,b), columns sum to 1 */
            double mx = 0;
            for (int64_t i = 0; i < M * M; i++) mx = w[i] > mx ? w[i] : mx;
            for (int64_t i = 0; i < M * M; i++) w[i] = mx > 0 ? 1.0 - w[i] / mx : 1.0;
            for (int64_t j = 0; j < M; j++) {
                double sum = 0;
                for (int64_t i = 0; i < M; i++) sum += w[i * M + j];
                for (int64_t i = 0; i < M; i++) w[i * M + j] /= sum;
            }
        }
    }
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < M; j++) {
            int64_t off = la_off2(out, i, j);
            if (out->dtype == LA_F64)
                ((double *)out->data)[off] = w[i * M + j];
            else
                la_store_f32(out, off, (float)w[i * M + j]);
        }
    free(w);
    free(cen);
    la_err_clear();
    return LA_OK;
}

la_status la_mhla_project(la_tensor *mixing, int causal) {
    static const char *op = "la_mhla_project";
    char s1[96];
    if (!mixing) return la_err(LA_ERR_ARG, "%s: mixing is NULL", op);
    if (mixing->ndim != 2 && mixing->ndim != 3)
        return la_err(LA_ERR_SHAPE, "%s: mixing must be [M,M] or [H,M,M], got rank %d", op,
                      mixing->ndim);
    if (mixing->device == LA_DEVICE_CUDA) return cuda_unsupported(op);
    LA_TRY(la_check_tensor(mixing, "mixing", mixing->ndim, LA_DT_FLOAT, LA_DEVICE_CPU, false));
    const int r = mixing->ndim;
    const int64_t Hw = r == 3 ? mixing->ne[0] : 1, M = mixing->ne[r - 2];
    if (mixing->ne[r - 1] != M)
        return la_err(LA_ERR_SHAPE, "%s: mixing %s is not square in its last two dims", op,
                      la_shape_str(mixing, s1, sizeof s1));
    for (int64_t h = 0; h < Hw; h++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < M; j++) {
                int64_t off = r == 3 ? la_off3(mixing, h, i, j) : la_off2(mixing, i, j);
                double x = mixing->dtype == LA_F64 ? ((double *)mixing->data)[off]
                                                   : (double)la_load_f32(mixing, off);
                /* clamp like torch.clamp: NaN stays NaN */
                if (x < 1e-5) x = 1e-5;
                if (x > 1.0) x = 1.0;
                if (causal && j > i) x = 0.0;
                if (mixing->dtype == LA_F64)
                    ((double *)mixing->data)[off] = x;
                else
                    la_store_f32(mixing, off, (float)x);
            }
    la_err_clear();
    return LA_OK;
}
