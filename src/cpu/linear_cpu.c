/* CPU linear attention (SPEC §3).
 *
 * With q̃ = scale_q·φ(q), k̃ = φ(k), per (batch, head):
 *   non-causal:  S = K̃ᵀV (D×Dv), z = Σ k̃;  o_t = q̃_tᵀS / (q̃_t·z + eps)
 *   causal:      the same with sums over j <= t, computed chunkwise: for a
 *                chunk c of C tokens with state (S, z) of all tokens before it
 *                  A   = tril(Q̃_c K̃_cᵀ)                  C×C, j <= i kept
 *                  num = Q̃_c S + A V_c,  den = Q̃_c z + rowsum(A)
 *                  S  += K̃_cᵀ V_c,       z  += colsum(K̃_c)
 *                which equals the token-by-token recurrence
 *                  S_t = S_{t-1} + k̃_t v_tᵀ, o_t = q̃_tᵀ S_t / (q̃_t·z_t + eps).
 *
 * Parallelism: each head is cut into `nsplit` superblocks of T tokens so that
 * there are about 2× as many tasks as threads even for B·H = 1:
 *   phase 1  partial sums K̃ᵀV, Σk̃ per superblock   (causal: all but the last)
 *   phase 2  per head: total (non-causal) or exclusive prefix starting from
 *            the input state (causal)
 *   phase 3  per superblock: outputs (causal: walk its chunks from the
 *            prefix state; the head's last superblock also writes the
 *            final state).
 * When B·H alone gives enough tasks nsplit = 1: one task per head runs all
 * phases itself (a single pass for the causal form, no barriers between). Every product is a la_sgemm on packed f32
 * panels (la_gather_bnhd_rows: any dtype, any strides).
 *
 * Exception: non-causal with f32 unit-stride rows and a relu-family or
 * identity φ on an AVX-512 build goes to la_mhla_forward_cpu as MHLA with
 * W = all ones (its register-blocked kernels; see la_linear_cpu). */
#include "cpu/linear_cpu.h"
#include "cpu/mhla_cpu.h"

#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* dst[0..n) = scale·φ(src) (loops per map so that they vectorize; src may be dst). */
static void apply_feature(la_feature f, const float *src, float *dst, int64_t n, float scale) {
    switch (f) {
    case LA_FEATURE_IDENTITY:
        for (int64_t i = 0; i < n; i++) dst[i] = scale * src[i];
        break;
    case LA_FEATURE_RELU:
        for (int64_t i = 0; i < n; i++) dst[i] = scale * la_relu(src[i]);
        break;
    case LA_FEATURE_RELU_EPS:
        for (int64_t i = 0; i < n; i++) dst[i] = scale * (la_relu(src[i]) + 1e-6f);
        break;
    case LA_FEATURE_RELU1:
        for (int64_t i = 0; i < n; i++) dst[i] = scale * (la_relu(src[i]) + 1.f);
        break;
    case LA_FEATURE_ELU1:
        /* x+1 for x >= 0, exp(x) below: never 1+expm1 (rounds to 0 in bf16). */
        for (int64_t i = 0; i < n; i++) dst[i] = scale * la_feature_apply(LA_FEATURE_ELU1, src[i]);
        break;
    }
}

/* f32 rows with unit inner stride and an int-sized row stride >= the row
 * length: read in place (V) or in one pass with φ (Q, K). */
static bool rows_direct(const la_tensor *t) {
    return t->dtype == LA_F32 && t->nb[3] == 1 && t->nb[1] >= t->ne[3] && t->nb[1] <= INT32_MAX;
}

/* dst (n × D, packed) = scale·φ(rows [t0, t0+n) of head (b,h)). */
static void gather_feature(const la_tensor *t, int64_t b, int64_t h, int64_t t0, int64_t n,
                           la_feature f, float scale, float *dst) {
    const int64_t D = t->ne[3];
    if (rows_direct(t)) {
        const float *src = (const float *)t->data + la_off4(t, b, t0, h, 0);
        for (int64_t r = 0; r < n; r++) {
            /* one head's rows are short and a page apart in [B,N,H,D]: the
             * hardware prefetcher loses them at every page, so ask ahead */
            if (r + 8 < n)
                for (int64_t x = 0; x < D; x += 16) __builtin_prefetch(src + (r + 8) * t->nb[1] + x);
            apply_feature(f, src + r * t->nb[1], dst + r * D, D, scale);
        }
        return;
    }
    la_gather_bnhd_rows(t, b, h, t0, n, dst, D);
    apply_feature(f, dst, dst, n * D, scale);
}

/* Σ a[i]·b[i], vectorized (the reduction order differs from a plain loop;
 * fine in fp32 at these lengths). */
static inline float dot(const float *a, const float *b, int64_t n) {
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static inline float sum(const float *a, int64_t n) {
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += a[i];
    return s;
}

/* Per-thread scratch. */
typedef struct scratch {
    float *q, *k, *v; /* R×D, R×D, R×Dv packed rows */
    const float *vp;  /* the V rows in use: w->v, or the tensor itself */
    int64_t vld;      /* their row stride */
    float *o;         /* R×Dv                       */
    float *a;         /* C×C (causal)               */
    float *den;       /* R                          */
    float *S, *z;     /* D×Dv, D running state      */
} scratch;

typedef struct job {
    const la_linear_params *p;
    const la_tensor *q, *k, *v;
    la_tensor *out;
    int64_t B, N, H, D, Dv;
    int64_t C;       /* causal chunk (<= N)               */
    int64_t T;       /* superblock length                 */
    int64_t nsplit;  /* superblocks per head              */
    float *slots;    /* [B·H][nsplit] × (D·Dv + D) states */
} job;

static float *slot_S(const job *j, int64_t bh, int64_t s) {
    return j->slots + (size_t)(bh * j->nsplit + s) * (size_t)(j->D * j->Dv + j->D);
}
static float *slot_z(const job *j, int64_t bh, int64_t s) { return slot_S(j, bh, s) + j->D * j->Dv; }

/* Rows [t0, t0+n) of head (b,h): q̃ into w->q (if want_q), k̃ into w->k and
 * v at w->vp / w->vld (if want_kv; in place when possible). */
static void load_rows(const job *j, int64_t b, int64_t h, int64_t t0, int64_t n, bool want_q,
                      bool want_kv, scratch *w) {
    const la_feature f = j->p->feature;
    if (want_q) gather_feature(j->q, b, h, t0, n, f, j->p->scale_q, w->q);
    if (want_kv) {
        gather_feature(j->k, b, h, t0, n, f, 1.f, w->k);
        if (rows_direct(j->v)) {
            w->vp = (const float *)j->v->data + la_off4(j->v, b, t0, h, 0);
            w->vld = j->v->nb[1];
        } else {
            la_gather_bnhd_rows(j->v, b, h, t0, n, w->v, j->Dv);
            w->vp = w->v;
            w->vld = j->Dv;
        }
    }
}

/* S += K̃ᵀV, z += Σ k̃ over rows [t0, t1) of head (b,h). */
static void accumulate_sums(const job *j, int64_t b, int64_t h, int64_t t0, int64_t t1, float *S,
                            float *z, scratch *w) {
    const int64_t D = j->D, Dv = j->Dv;
    for (int64_t r0 = t0; r0 < t1; r0 += LA_LINEAR_BLOCK) {
        const int64_t n = t1 - r0 < LA_LINEAR_BLOCK ? t1 - r0 : LA_LINEAR_BLOCK;
        load_rows(j, b, h, r0, n, false, true, w);
        la_sgemm(true, false, D, Dv, n, 1.f, w->k, D, w->vp, w->vld, 1.f, S, Dv);
        for (int64_t r = 0; r < n; r++)
            for (int64_t d = 0; d < D; d++) z[d] += w->k[r * D + d];
    }
}

/* o = num / (den + eps) (or num), then store rows [t0, t0+n). */
static void finish_rows(const job *j, int64_t b, int64_t h, int64_t t0, int64_t n, scratch *w) {
    const int64_t Dv = j->Dv;
    if (j->p->normalize) {
        const float eps = j->p->eps;
        for (int64_t r = 0; r < n; r++) {
            const float inv = 1.f / (w->den[r] + eps);
            for (int64_t e = 0; e < Dv; e++) w->o[r * Dv + e] *= inv;
        }
    }
    la_scatter_bnhd_rows(j->out, b, h, t0, n, w->o, Dv);
}

/* Non-causal outputs for rows [t0, t1) with the head's totals S, z. */
static void apply_noncausal(const job *j, int64_t b, int64_t h, int64_t t0, int64_t t1,
                            const float *S, const float *z, scratch *w) {
    const int64_t D = j->D, Dv = j->Dv;
    for (int64_t r0 = t0; r0 < t1; r0 += LA_LINEAR_BLOCK) {
        const int64_t n = t1 - r0 < LA_LINEAR_BLOCK ? t1 - r0 : LA_LINEAR_BLOCK;
        load_rows(j, b, h, r0, n, true, false, w);
        la_sgemm(false, false, n, Dv, D, 1.f, w->q, D, S, Dv, 0.f, w->o, Dv);
        if (j->p->normalize)
            for (int64_t r = 0; r < n; r++) {
                w->den[r] = dot(w->q + r * D, z, D);
            }
        finish_rows(j, b, h, r0, n, w);
    }
}

/* Causal outputs for rows [t0, t1), starting from the state in w->S, w->z
 * (updated in place to include these rows). */
static void walk_causal(const job *j, int64_t b, int64_t h, int64_t t0, int64_t t1, scratch *w) {
    const int64_t D = j->D, Dv = j->Dv, C = j->C;
    for (int64_t c0 = t0; c0 < t1; c0 += C) {
        const int64_t n = t1 - c0 < C ? t1 - c0 : C;
        load_rows(j, b, h, c0, n, true, true, w);
        /* A = tril(Q̃ K̃ᵀ) */
        la_sgemm(false, true, n, n, D, 1.f, w->q, D, w->k, D, 0.f, w->a, C);
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = r + 1; c < n; c++) w->a[r * C + c] = 0.f;
        if (j->p->normalize)
            for (int64_t r = 0; r < n; r++) {
                w->den[r] = dot(w->q + r * D, w->z, D) + sum(w->a + r * C, r + 1);
            }
        /* num = A V + Q̃ S (state of the tokens before this chunk) */
        la_sgemm(false, false, n, Dv, n, 1.f, w->a, C, w->vp, w->vld, 0.f, w->o, Dv);
        la_sgemm(false, false, n, Dv, D, 1.f, w->q, D, w->S, Dv, 1.f, w->o, Dv);
        /* state += this chunk */
        la_sgemm(true, false, D, Dv, n, 1.f, w->k, D, w->vp, w->vld, 1.f, w->S, Dv);
        for (int64_t r = 0; r < n; r++)
            for (int64_t d = 0; d < D; d++) w->z[d] += w->k[r * D + d];
        finish_rows(j, b, h, c0, n, w);
    }
}

/* Load the input state of head (b,h) into S, z (zeros where not given). */
static void load_state(const job *j, int64_t b, int64_t h, const la_tensor *S_in,
                       const la_tensor *z_in, float *S, float *z) {
    for (int64_t d = 0; d < j->D; d++) {
        for (int64_t e = 0; e < j->Dv; e++)
            S[d * j->Dv + e] = S_in ? la_load_f32(S_in, la_off4(S_in, b, h, d, e)) : 0.f;
        z[d] = z_in ? la_load_f32(z_in, la_off3(z_in, b, h, d)) : 0.f;
    }
}

static void store_state(const job *j, int64_t b, int64_t h, const float *S, const float *z,
                        la_tensor *S_out, la_tensor *z_out) {
    if (S_out)
        for (int64_t d = 0; d < j->D; d++)
            for (int64_t e = 0; e < j->Dv; e++)
                la_store_f32(S_out, la_off4(S_out, b, h, d, e), S[d * j->Dv + e]);
    if (z_out)
        for (int64_t d = 0; d < j->D; d++) la_store_f32(z_out, la_off3(z_out, b, h, d), z[d]);
}

/* The whole head bh in one task (nsplit == 1). The input state is read
 * before the output state of the same head is written, so in/out may alias. */
static void head_single(const job *j, int64_t bh, const la_tensor *S_in, const la_tensor *z_in,
                        la_tensor *S_out, la_tensor *z_out, scratch *w) {
    const int64_t b = bh / j->H, h = bh % j->H;
    if (j->p->causal) {
        load_state(j, b, h, S_in, z_in, w->S, w->z);
        walk_causal(j, b, h, 0, j->N, w);
        store_state(j, b, h, w->S, w->z, S_out, z_out);
    } else {
        memset(w->S, 0, (size_t)(j->D * j->Dv + j->D) * sizeof(float));
        accumulate_sums(j, b, h, 0, j->N, w->S, w->z, w);
        apply_noncausal(j, b, h, 0, j->N, w->S, w->z, w);
    }
}

/* The three phases over superblocks (nsplit > 1); called by every thread of
 * the parallel region (orphaned worksharing loops, a barrier after each). */
static void split_phases(const job *jp, const la_tensor *S_in, const la_tensor *z_in,
                         la_tensor *S_out, la_tensor *z_out, scratch *w) {
    const job j = *jp;
    const bool causal = j.p->causal != 0;
    const int64_t BH = j.B * j.H, N = j.N, ntasks = BH * j.nsplit;
    const size_t state_f = (size_t)(j.D * j.Dv + j.D);
    /* Phase 1: partial sums. Causal: superblock s goes to slot s+1 (slot 0
     * will hold the input state), the last superblock needs none. */
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < ntasks; t++) {
        const int64_t bh = t / j.nsplit, s = t % j.nsplit;
        if (causal && s == j.nsplit - 1) continue;
        const int64_t slot = causal ? s + 1 : s;
        float *S = slot_S(&j, bh, slot), *z = slot_z(&j, bh, slot);
        memset(S, 0, state_f * sizeof(float));
        const int64_t t0 = s * j.T, t1 = t0 + j.T < N ? t0 + j.T : N;
        accumulate_sums(&j, bh / j.H, bh % j.H, t0, t1, S, z, w);
    }
    /* Phase 2: totals (non-causal) or prefix states from the input state. */
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < BH; bh++) {
        if (!causal) {
            float *dst = slot_S(&j, bh, 0);
            for (int64_t s = 1; s < j.nsplit; s++) {
                const float *src = slot_S(&j, bh, s);
                for (size_t x = 0; x < state_f; x++) dst[x] += src[x];
            }
            continue;
        }
        load_state(&j, bh / j.H, bh % j.H, S_in, z_in, slot_S(&j, bh, 0), slot_z(&j, bh, 0));
        for (int64_t s = 1; s < j.nsplit; s++) {
            const float *prev = slot_S(&j, bh, s - 1);
            float *cur = slot_S(&j, bh, s);
            for (size_t x = 0; x < state_f; x++) cur[x] += prev[x];
        }
    }
    /* Phase 3: outputs; the last superblock of a head writes its final state. */
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < ntasks; t++) {
        const int64_t bh = t / j.nsplit, s = t % j.nsplit;
        const int64_t b = bh / j.H, h = bh % j.H;
        const int64_t t0 = s * j.T, t1 = t0 + j.T < N ? t0 + j.T : N;
        if (!causal) {
            apply_noncausal(&j, b, h, t0, t1, slot_S(&j, bh, 0), slot_z(&j, bh, 0), w);
            continue;
        }
        memcpy(w->S, slot_S(&j, bh, s), state_f * sizeof(float));
        walk_causal(&j, b, h, t0, t1, w);
        if (s == j.nsplit - 1) store_state(&j, b, h, w->S, w->z, S_out, z_out);
    }
}

la_status la_linear_cpu(const la_linear_params *p, const la_tensor *q, const la_tensor *k,
                        const la_tensor *v, la_tensor *out, const la_tensor *S_in,
                        const la_tensor *z_in, la_tensor *S_out, la_tensor *z_out,
                        la_context *ctx) {
    /* Non-causal with f32 rows and a relu-family or identity φ on an AVX-512
     * build: global linear attention is MHLA with W = all ones for any block
     * count M (SPEC §5, tests/cpu/test_mhla.c "invariants"), so it runs
     * through MHLA's AVX-512 kernels, faster than the sgemm path
     * (docs/PERF.md "CPU: MHLA"). M blocks of >= 256 tokens give the threads
     * B·M tasks of all heads; the mixing is an M×M GEMM of ones. */
    if (!p->causal && q->ne[1] >= 1 && la_mhla_fast_ok(p->feature, q, k, v)) {
        const int64_t N = q->ne[1], B = q->ne[0];
        int64_t M = (4 * (int64_t)la_ctx_threads(ctx) + B - 1) / B;
        if (M > N / 256) M = N / 256;
        if (M > 64) M = 64;
        if (M < 1) M = 1;
        float ones[64 * 64];
        for (int64_t i = 0; i < M * M; i++) ones[i] = 1.0f;
        la_tensor W;
        const int64_t wne[2] = {M, M};
        LA_TRY(la_tensor_init(&W, ones, LA_F32, LA_DEVICE_CPU, 2, wne));
        la_mhla_params mp;
        LA_TRY(la_mhla_params_init(&mp));
        mp.grid_ndim = 1, mp.grid[0] = N, mp.blocks[0] = M;
        mp.feature = p->feature;
        mp.normalize = p->normalize ? LA_MHLA_NORM_PER_QUERY : LA_MHLA_NORM_NONE;
        mp.eps = p->eps;
        mp.scale_q = p->scale_q;
        la_mhla_geom geom;
        la_mhla_geom_init(&geom, 1, mp.grid, mp.blocks);
        return la_mhla_forward_cpu(&mp, &geom, q, k, v, &W, out, ctx);
    }

    job j = {0};
    j.p = p;
    j.q = q;
    j.k = k;
    j.v = v;
    j.out = out;
    j.B = q->ne[0];
    j.N = q->ne[1];
    j.H = q->ne[2];
    j.D = q->ne[3];
    j.Dv = v->ne[3];
    const int64_t BH = j.B * j.H, N = j.N, D = j.D, Dv = j.Dv;
    const bool causal = p->causal != 0;
    j.C = causal ? (p->chunk < N ? p->chunk : N) : 1;
    const int nthreads = la_ctx_threads(ctx);

    /* Superblocks: enough tasks for the threads, none shorter than min_T. */
    int64_t want = (2 * (int64_t)nthreads + BH - 1) / BH;
    int64_t min_T = causal ? (4 * j.C > 1024 ? 4 * j.C : 1024) : 1024;
    int64_t most = (N + min_T - 1) / min_T;
    j.nsplit = want < most ? want : most;
    if (j.nsplit < 1) j.nsplit = 1;
    j.T = (N + j.nsplit - 1) / j.nsplit;
    if (causal) j.T = (j.T + j.C - 1) / j.C * j.C;
    j.nsplit = (N + j.T - 1) / j.T;

    /* Workspace: state slots + per-thread scratch, sizes checked. */
    const int64_t R = j.C > LA_LINEAR_BLOCK ? j.C : LA_LINEAR_BLOCK;
    size_t state_f, slots_f, per_thread, a_f, all_threads, total, bytes;
    LA_TRY(la_mul_size((size_t)D, (size_t)Dv + 1, &state_f, "linear state"));
    LA_TRY(la_mul_size(state_f, (size_t)BH, &slots_f, "linear state slots"));
    LA_TRY(la_mul_size(slots_f, (size_t)j.nsplit, &slots_f, "linear state slots"));
    if (j.nsplit == 1) slots_f = 0; /* head_single keeps its state in the scratch */
    LA_TRY(la_mul_size((size_t)R, 2 * (size_t)D + 2 * (size_t)Dv + 1, &per_thread, "linear scratch"));
    LA_TRY(la_mul_size((size_t)j.C, (size_t)j.C, &a_f, "linear chunk matrix"));
    per_thread += a_f + state_f;
    per_thread = (per_thread + 15) & ~(size_t)15;
    LA_TRY(la_mul_size(per_thread, (size_t)nthreads, &all_threads, "linear scratch"));
    total = slots_f + all_threads;
    if (total < slots_f) return la_err(LA_ERR_OVERFLOW, "linear workspace size overflows");
    LA_TRY(la_mul_size(total, sizeof(float), &bytes, "linear workspace"));
    float *ws = (float *)la_ws_alloc(ctx, bytes);
    if (!ws) return LA_ERR_NOMEM;
    j.slots = ws;
    float *thread_ws = ws + slots_f;

#pragma omp parallel num_threads(nthreads)
    {
        const int tid = la_thread_id();
        float *base = thread_ws + (size_t)tid * per_thread;
        scratch w;
        w.q = base;
        w.k = w.q + R * D;
        w.v = w.k + R * D;
        w.o = w.v + R * Dv;
        w.den = w.o + R * Dv;
        w.a = w.den + R;
        w.S = w.a + j.C * j.C;
        w.z = w.S + D * Dv;

        if (j.nsplit == 1) {
            /* One superblock per head: each task does all phases for its head,
             * with no barrier in between (B·H alone gives enough tasks). */
#pragma omp for schedule(dynamic, 1)
            for (int64_t bh = 0; bh < BH; bh++)
                head_single(&j, bh, S_in, z_in, S_out, z_out, &w);
        } else {
            split_phases(&j, S_in, z_in, S_out, z_out, &w);
        }
    }
    la_ws_free(ctx, ws);
    return LA_OK;
}
