/* Analysis tools (SPEC §9): explicit attention maps of every variant against
 * float64 references written plainly below; rank on matrices of known rank;
 * entropy against a plain loop; the paper's rank bounds on generic inputs. */
#include "core/internal.h" /* bf16 helpers */
#include "test_util.h"

/* f_p of one token over its D channels, straight from the formula */
static void flatten_ref(const double *x, const double *sp, int64_t D, double p, double *y) {
    double n2 = 0, np2 = 0;
    for (int64_t j = 0; j < D; j++) {
        double xp = ((x[j] > 0 ? x[j] : 0) + 1e-6) / log(1 + exp(sp ? sp[j] : 0));
        n2 += xp * xp;
        y[j] = pow(xp, p);
        np2 += y[j] * y[j];
    }
    for (int64_t j = 0; j < D; j++) y[j] *= sqrt(n2) / sqrt(np2);
}

typedef struct map_case {
    la_map_variant var;
    la_feature feature;
    double scale;           /* softmax scale / linear scale_q, 0 = default */
    int gnd;                /* mhla grid rank */
    int64_t grid[3], blocks[3];
    const double *W;        /* [M,M] */
    double p;               /* flatten */
    int random_sp;          /* flatten: random softplus parameters */
    const double *sp;       /* set by run_map */
} map_case;

static void ref_map(const map_case *c, const double *q, const double *k, int64_t N, int64_t D,
                    double *A) {
    double *qt = malloc(sizeof(double) * N * D), *kt = malloc(sizeof(double) * N * D);
    int64_t *blk = calloc(N, sizeof(int64_t)), M = 1;
    for (int64_t n = 0; n < N; n++) {
        const double *qr = q + n * D, *kr = k + n * D;
        for (int64_t j = 0; j < D; j++) {
            switch (c->var) {
            case LA_MAP_SOFTMAX:
                qt[n * D + j] = qr[j] * (c->scale > 0 ? (double)(float)c->scale : 1 / sqrt((double)D));
                kt[n * D + j] = kr[j];
                break;
            case LA_MAP_LINEAR:
            case LA_MAP_MHLA:
                qt[n * D + j] = (c->scale > 0 ? (double)(float)c->scale : 1) * la_ref_feature(c->feature, qr[j]);
                kt[n * D + j] = la_ref_feature(c->feature, kr[j]);
                break;
            case LA_MAP_FOCUSED_BLOG:
                qt[n * D + j] = la_ref_feature(LA_FEATURE_RELU1, qr[j] / sqrt((double)D));
                kt[n * D + j] = la_ref_feature(LA_FEATURE_RELU1, kr[j]);
                break;
            default: break;
            }
        }
        if (c->var == LA_MAP_FOCUSED_FLATTEN) {
            flatten_ref(qr, c->sp, D, c->p, qt + n * D);
            flatten_ref(kr, c->sp, D, c->p, kt + n * D);
        }
    }
    if (c->var == LA_MAP_MHLA) {
        /* raster order (t, y, x); block coordinate floor(c * g / n) per axis */
        int64_t T = 1, Hh = 1, Ww = N, gt = 1, gh = 1, gw = 1;
        if (c->gnd == 1) { Ww = c->grid[0] ? c->grid[0] : N; gw = c->blocks[0]; }
        if (c->gnd == 2) { Hh = c->grid[0]; Ww = c->grid[1]; gh = c->blocks[0]; gw = c->blocks[1]; }
        if (c->gnd == 3) {
            T = c->grid[0]; Hh = c->grid[1]; Ww = c->grid[2];
            gt = c->blocks[0]; gh = c->blocks[1]; gw = c->blocks[2];
        }
        M = gt * gh * gw;
        for (int64_t t = 0; t < T; t++)
            for (int64_t y = 0; y < Hh; y++)
                for (int64_t x = 0; x < Ww; x++)
                    blk[(t * Hh + y) * Ww + x] =
                        ((t * gt / T) * gh + y * gh / Hh) * gw + x * gw / Ww;
    }
    for (int64_t t = 0; t < N; t++) {
        double sum = 0, mx = -INFINITY;
        for (int64_t s = 0; s < N; s++) {
            double dot = 0;
            for (int64_t j = 0; j < D; j++) dot += qt[t * D + j] * kt[s * D + j];
            if (c->var == LA_MAP_MHLA) dot *= c->W[blk[t] * M + blk[s]];
            A[t * N + s] = dot;
            if (dot > mx) mx = dot;
        }
        for (int64_t s = 0; s < N; s++) {
            if (c->var == LA_MAP_SOFTMAX) A[t * N + s] = exp(A[t * N + s] - mx);
            sum += A[t * N + s];
        }
        for (int64_t s = 0; s < N; s++) A[t * N + s] = sum != 0 ? A[t * N + s] / sum : 0;
    }
    free(qt); free(kt); free(blk);
}

static double entropy_ref(const double *A, int64_t R, int64_t C) {
    double acc = 0;
    for (int64_t i = 0; i < R; i++) {
        double sum = 0, h = 0;
        for (int64_t j = 0; j < C; j++) sum += A[i * C + j];
        for (int64_t j = 0; j < C; j++) {
            double p = sum > 0 ? A[i * C + j] / sum : 0;
            if (p > 0) h -= p * log(p);
        }
        acc += h;
    }
    return acc / R;
}

/* ------------------------------------------------------------------------ */
enum { L_CONTIG, L_TRANSPOSED, L_BF16 };

static void run_map(la_rng *rng, const map_case *c, int64_t N, int64_t D, int layout,
                    la_dtype out_dt, la_context *ctx) {
    const int64_t nq = N * D;
    double *q = malloc(sizeof(double) * nq), *k = malloc(sizeof(double) * nq);
    for (int64_t i = 0; i < nq; i++) { q[i] = la_rng_normal(rng); k[i] = la_rng_normal(rng); }
    void *qb, *kb;
    la_tensor tq, tk, tout, tmix, tsp;
    int64_t ne2[2] = {N, D};
    if (layout == L_BF16) {
        uint16_t *a = malloc(sizeof(uint16_t) * (size_t)nq), *b = malloc(sizeof(uint16_t) * (size_t)nq);
        for (int64_t i = 0; i < nq; i++) {
            a[i] = la_f32_to_bf16((float)q[i]); q[i] = la_bf16_to_f32(a[i]);
            b[i] = la_f32_to_bf16((float)k[i]); k[i] = la_bf16_to_f32(b[i]);
        }
        qb = a; kb = b;
        la_tensor_init(&tq, qb, LA_BF16, LA_DEVICE_CPU, 2, ne2);
        la_tensor_init(&tk, kb, LA_BF16, LA_DEVICE_CPU, 2, ne2);
    } else {
        float *a = malloc(sizeof(float) * (size_t)nq), *b = malloc(sizeof(float) * (size_t)nq);
        for (int64_t i = 0; i < nq; i++) {
            q[i] = (float)q[i]; k[i] = (float)k[i];
            if (layout == L_TRANSPOSED) { /* stored [D,N], viewed [N,D] */
                int64_t n = i / D, j = i % D;
                a[j * N + n] = (float)q[i]; b[j * N + n] = (float)k[i];
            } else {
                a[i] = (float)q[i]; b[i] = (float)k[i];
            }
        }
        qb = a; kb = b;
        int64_t nb[2] = {1, N};
        if (layout == L_TRANSPOSED) {
            la_tensor_init_strided(&tq, qb, LA_F32, LA_DEVICE_CPU, 2, ne2, nb);
            la_tensor_init_strided(&tk, kb, LA_F32, LA_DEVICE_CPU, 2, ne2, nb);
        } else {
            la_tensor_init(&tq, qb, LA_F32, LA_DEVICE_CPU, 2, ne2);
            la_tensor_init(&tk, kb, LA_F32, LA_DEVICE_CPU, 2, ne2);
        }
    }
    int64_t M = 1;
    for (int a = 0; a < c->gnd; a++) M *= c->blocks[a];
    float *Wf = NULL, *spf = NULL;
    double *Wd = NULL, *spd = NULL;
    if (c->var == LA_MAP_MHLA) {
        Wf = malloc(sizeof(float) * M * M);
        Wd = malloc(sizeof(double) * M * M);
        for (int64_t i = 0; i < M * M; i++) Wd[i] = Wf[i] = (float)(0.05 + la_rng_uniform(rng));
        int64_t nem[2] = {M, M};
        la_tensor_init(&tmix, Wf, LA_F32, LA_DEVICE_CPU, 2, nem);
    }
    if (c->var == LA_MAP_FOCUSED_FLATTEN && c->random_sp) {
        spf = malloc(sizeof(float) * D);
        spd = malloc(sizeof(double) * D);
        for (int64_t j = 0; j < D; j++) spd[j] = spf[j] = (float)la_rng_normal(rng);
        la_tensor_init(&tsp, spf, LA_F32, LA_DEVICE_CPU, 1, &D);
    }
    map_case cc = *c;
    cc.W = Wd;
    cc.sp = spd;

    void *ob = malloc(la_dtype_size(out_dt) * N * N);
    for (int64_t i = 0; i < N * N; i++) {
        if (out_dt == LA_F64) ((double *)ob)[i] = NAN;
        else ((float *)ob)[i] = NAN;
    }
    int64_t neo[2] = {N, N};
    la_tensor_init(&tout, ob, out_dt, LA_DEVICE_CPU, 2, neo);

    la_attn_map_params p;
    la_attn_map_params_init(&p);
    p.variant = c->var;
    p.feature = c->feature;
    p.scale = (float)c->scale;
    p.mhla.grid_ndim = c->gnd ? c->gnd : 1;
    for (int a = 0; a < 3; a++) { p.mhla.grid[a] = c->grid[a]; p.mhla.blocks[a] = c->blocks[a]; }
    p.focused.p = (float)c->p;

    la_status st = la_attention_map(&p, &tq, &tk, Wf ? &tmix : NULL, spf ? &tsp : NULL, &tout, ctx);
    CHECK(st == LA_OK, "variant %d N=%lld D=%lld: %s %s", (int)c->var, (long long)N, (long long)D,
          la_status_string(st), la_last_error());
    if (st == LA_OK) {
        double *ref = malloc(sizeof(double) * N * N), *got = malloc(sizeof(double) * N * N);
        ref_map(&cc, q, k, N, D, ref);
        for (int64_t i = 0; i < N * N; i++)
            got[i] = out_dt == LA_F64 ? ((double *)ob)[i] : ((float *)ob)[i];
        double md = 0, mr = 0;
        for (int64_t i = 0; i < N * N; i++) {
            if (isnan(got[i])) { md = INFINITY; break; }
            md = fmax(md, fabs(got[i] - ref[i]));
            mr = fmax(mr, fabs(ref[i]));
        }
        double err = mr > 0 ? md / mr : md, tol = out_dt == LA_F64 ? 1e-10 : 1e-5;
        CHECK(err <= tol, "variant %d N=%lld D=%lld layout %d out %s: rel err %.3g > %g",
              (int)c->var, (long long)N, (long long)D, layout, la_dtype_name(out_dt), err, tol);
        /* rows sum to 1 (rows with no weight at all, e.g. relu features
         * that miss every key, stay zero in the reference too) */
        double worst = 0;
        for (int64_t t = 0; t < N; t++) {
            double s = 0, sr = 0;
            for (int64_t j = 0; j < N; j++) { s += got[t * N + j]; sr += ref[t * N + j]; }
            if (sr != 0) worst = fmax(worst, fabs(s - 1));
        }
        CHECK(worst < (out_dt == LA_F64 ? 1e-12 : 1e-4), "variant %d: a row sums to 1%+.3g",
              (int)c->var, worst);
        /* entropy against the plain loop */
        double e = 0;
        CHECK_OK(la_map_rank_entropy(&tout, 1e-6, NULL, &e));
        double eref = entropy_ref(got, N, N);
        CHECK(fabs(e - eref) <= 1e-9 * fmax(1, eref), "entropy %.12g vs %.12g", e, eref);
        free(ref); free(got);
    }
    free(q); free(k); free(qb); free(kb); free(Wf); free(Wd); free(spf); free(spd); free(ob);
}

/* ------------------------------------------------------------------------ */
static void test_rank_entropy(la_rng *rng) {
    /* known ranks: U [R,r] V [r,C] */
    const int64_t R = 70, C = 50;
    double *A = malloc(sizeof(double) * R * C);
    int64_t ne[2] = {R, C};
    la_tensor t;
    la_tensor_init(&t, A, LA_F64, LA_DEVICE_CPU, 2, ne);
    const int64_t ranks[5] = {0, 1, 7, 49, 50};
    for (int ri = 0; ri < 5; ri++) {
        int64_t r = ranks[ri];
        double *U = malloc(sizeof(double) * R * (r + 1)), *V = malloc(sizeof(double) * (r + 1) * C);
        for (int64_t i = 0; i < R * r; i++) U[i] = la_rng_normal(rng);
        for (int64_t i = 0; i < r * C; i++) V[i] = la_rng_normal(rng);
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) {
                double s = 0;
                for (int64_t l = 0; l < r; l++) s += U[i * r + l] * V[l * C + j];
                A[i * C + j] = s;
            }
        int64_t got = -1;
        CHECK_OK(la_map_rank_entropy(&t, 1e-6, &got, NULL));
        CHECK(got == r, "rank of a product of rank %lld: got %lld", (long long)r, (long long)got);
        free(U); free(V);
    }
    /* rtol: singular values 1, 1e-3, 1e-7 on a diagonal */
    {
        double Dg[9] = {1, 0, 0, 0, 1e-3, 0, 0, 0, 1e-7};
        int64_t ne3[2] = {3, 3}, r = -1;
        la_tensor d;
        la_tensor_init(&d, Dg, LA_F64, LA_DEVICE_CPU, 2, ne3);
        CHECK_OK(la_map_rank_entropy(&d, 1e-6, &r, NULL));
        CHECK(r == 2, "rtol 1e-6 on (1,1e-3,1e-7): rank %lld, want 2", (long long)r);
        CHECK_OK(la_map_rank_entropy(&d, 1e-8, &r, NULL));
        CHECK(r == 3, "rtol 1e-8: rank %lld, want 3", (long long)r);
        CHECK_OK(la_map_rank_entropy(&d, 1e-2, &r, NULL));
        CHECK(r == 1, "rtol 1e-2: rank %lld, want 1", (long long)r);
    }
    /* entropy: uniform rows ln C, one-hot rows 0, zero rows 0, unnormalized
     * rows renormalized; strided f32 view */
    {
        const int64_t n = 33;
        float *B = malloc(sizeof(float) * n * n * 2);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) B[2 * (i * n + j)] = 3.0f; /* every other float */
        int64_t ne2[2] = {n, n}, nb[2] = {2 * n, 2};
        la_tensor b;
        la_tensor_init_strided(&b, B, LA_F32, LA_DEVICE_CPU, 2, ne2, nb);
        double e = -1;
        int64_t r = -1;
        CHECK_OK(la_map_rank_entropy(&b, 1e-6, &r, &e));
        CHECK(fabs(e - log((double)n)) < 1e-12, "uniform rows: entropy %.15g, want ln %lld",
              e, (long long)n);
        CHECK(r == 1, "constant matrix: rank %lld", (long long)r);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) B[2 * (i * n + j)] = (i == j) ? 1.0f : 0.0f;
        CHECK_OK(la_map_rank_entropy(&b, 1e-6, &r, &e));
        CHECK(e == 0.0 && r == n, "identity: entropy %g rank %lld", e, (long long)r);
        /* random positive, some zero rows */
        double *Rm = malloc(sizeof(double) * n * n);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                double x = (i % 5 == 0) ? 0.0 : la_rng_uniform(rng) * (la_rng_uniform(rng) < 0.3 ? 0 : 1);
                B[2 * (i * n + j)] = (float)x;
                Rm[i * n + j] = (float)x;
            }
        CHECK_OK(la_map_rank_entropy(&b, 1e-6, NULL, &e));
        double er = entropy_ref(Rm, n, n);
        CHECK(fabs(e - er) < 1e-12, "entropy %.15g vs ref %.15g", e, er);
        /* a negative weight has no entropy */
        B[2] = -0.5f;
        CHECK_OK(la_map_rank_entropy(&b, 1e-6, NULL, &e));
        CHECK(isnan(e), "negative weight: entropy %g, want NaN", e);
        free(B); free(Rm);
    }
    free(A);
}

/* The paper's bounds on generic inputs: rank(linear) <= d, MHLA above d,
 * MHLA with all-ones mixing equals linear attention, and flatten with p=3
 * is sharper (lower entropy) than p=1. */
static void test_bounds(la_rng *rng) {
    const int64_t Hm = 16, Wm = 16, N = Hm * Wm, D = 8;
    float *q = malloc(4 * N * D), *k = malloc(4 * N * D);
    la_fill_normal(rng, q, N * D, 1);
    la_fill_normal(rng, k, N * D, 1);
    double *A = malloc(sizeof(double) * N * N), *B = malloc(sizeof(double) * N * N);
    int64_t ne[2] = {N, D}, neo[2] = {N, N}, nem[2] = {16, 16};
    la_tensor tq, tk, ta, tb, tw;
    la_tensor_init(&tq, q, LA_F32, LA_DEVICE_CPU, 2, ne);
    la_tensor_init(&tk, k, LA_F32, LA_DEVICE_CPU, 2, ne);
    la_tensor_init(&ta, A, LA_F64, LA_DEVICE_CPU, 2, neo);
    la_tensor_init(&tb, B, LA_F64, LA_DEVICE_CPU, 2, neo);
    float W1[256], Wl[256];
    for (int i = 0; i < 256; i++) W1[i] = 1.0f;
    for (int i = 0; i < 16; i++) /* locality (paper) init, written out */
        for (int j = 0; j < 16; j++) {
            double yi = i / 4 + 0.5, xi = i % 4 + 0.5, yj = j / 4 + 0.5, xj = j % 4 + 0.5;
            Wl[i * 16 + j] = (float)hypot(yi - yj, xi - xj);
        }
    for (int i = 0; i < 16; i++) {
        double mx = 0, s = 0;
        for (int j = 0; j < 16; j++) mx = fmax(mx, Wl[i * 16 + j]);
        for (int j = 0; j < 16; j++) { Wl[i * 16 + j] = (float)(1 - Wl[i * 16 + j] / mx); s += Wl[i * 16 + j]; }
        for (int j = 0; j < 16; j++) Wl[i * 16 + j] = (float)(Wl[i * 16 + j] / s);
    }
    la_attn_map_params p;
    la_attn_map_params_init(&p);
    int64_t r_lin = -1, r_mhla = -1;
    double e_lin = 0, e_mhla = 0;
    p.variant = LA_MAP_LINEAR;
    p.feature = LA_FEATURE_RELU_EPS;
    CHECK_OK(la_attention_map(&p, &tq, &tk, NULL, NULL, &ta, NULL));
    CHECK_OK(la_map_rank_entropy(&ta, 1e-6, &r_lin, &e_lin));
    p.variant = LA_MAP_MHLA;
    p.mhla.grid_ndim = 2;
    p.mhla.grid[0] = Hm; p.mhla.grid[1] = Wm;
    p.mhla.blocks[0] = 4; p.mhla.blocks[1] = 4;
    la_tensor_init(&tw, W1, LA_F32, LA_DEVICE_CPU, 2, nem);
    CHECK_OK(la_attention_map(&p, &tq, &tk, &tw, NULL, &tb, NULL));
    double md = 0;
    for (int64_t i = 0; i < N * N; i++) md = fmax(md, fabs(A[i] - B[i]));
    CHECK(md < 1e-14, "MHLA with all-ones mixing should equal linear: %.3g", md);
    la_tensor_init(&tw, Wl, LA_F32, LA_DEVICE_CPU, 2, nem);
    CHECK_OK(la_attention_map(&p, &tq, &tk, &tw, NULL, &tb, NULL));
    CHECK_OK(la_map_rank_entropy(&tb, 1e-6, &r_mhla, &e_mhla));
    printf("# N=%lld D=%lld: linear rank %lld entropy %.4f; MHLA(M=16, locality) rank %lld "
           "entropy %.4f (bound sum min(n_b,d) = %lld)\n", (long long)N, (long long)D,
           (long long)r_lin, e_lin, (long long)r_mhla, e_mhla, (long long)(16 * D));
    CHECK(r_lin == D, "linear rank %lld, want d=%lld (bound, attained generically)",
          (long long)r_lin, (long long)D);
    CHECK(r_mhla > D && r_mhla <= 16 * D, "MHLA rank %lld should lie in (d, M*d]",
          (long long)r_mhla);
    CHECK(e_mhla < e_lin, "MHLA entropy %.4f should be below linear %.4f", e_mhla, e_lin);

    /* flatten: p=3 sharpens relative to p=1 */
    double e1 = 0, e3 = 0;
    int64_t r3 = 0;
    p.variant = LA_MAP_FOCUSED_FLATTEN;
    p.focused.p = 1;
    CHECK_OK(la_attention_map(&p, &tq, &tk, NULL, NULL, &ta, NULL));
    CHECK_OK(la_map_rank_entropy(&ta, 1e-6, NULL, &e1));
    p.focused.p = 3;
    CHECK_OK(la_attention_map(&p, &tq, &tk, NULL, NULL, &ta, NULL));
    CHECK_OK(la_map_rank_entropy(&ta, 1e-6, &r3, &e3));
    printf("# flatten entropy p=1 %.4f, p=3 %.4f; rank p=3 %lld\n", e1, e3, (long long)r3);
    CHECK(e3 < e1, "flatten p=3 entropy %.4f should be below p=1 %.4f", e3, e1);
    CHECK(r3 <= D, "flatten map rank %lld exceeds d (no DWC term)", (long long)r3);
    free(q); free(k); free(A); free(B);
}

static void test_bad_input(void) {
    const int64_t N = 12, D = 4;
    float q[48] = {0}, k[48] = {0}, o[144], W[16] = {0}, sp[5] = {0};
    la_tensor tq, tk, to, tw, tsp, tbad;
    int64_t ne[2] = {N, D}, neo[2] = {N, N}, nem[2] = {4, 4}, nsp = 5;
    la_tensor_init(&tq, q, LA_F32, LA_DEVICE_CPU, 2, ne);
    la_tensor_init(&tk, k, LA_F32, LA_DEVICE_CPU, 2, ne);
    la_tensor_init(&to, o, LA_F32, LA_DEVICE_CPU, 2, neo);
    la_tensor_init(&tw, W, LA_F32, LA_DEVICE_CPU, 2, nem);
    la_tensor_init(&tsp, sp, LA_F32, LA_DEVICE_CPU, 1, &nsp);
    la_attn_map_params p;
    CHECK_STATUS(la_attn_map_params_init(NULL), LA_ERR_ARG);
    la_attn_map_params_init(&p);
    CHECK_OK(la_attention_map(&p, &tq, &tk, NULL, NULL, &to, NULL));
    CHECK_STATUS(la_attention_map(NULL, &tq, &tk, NULL, NULL, &to, NULL), LA_ERR_ARG);
    CHECK_STATUS(la_attention_map(&p, &tq, NULL, NULL, NULL, &to, NULL), LA_ERR_ARG);
    int64_t ne3[3] = {1, N, D}, nek[2] = {N - 1, D}, neo2[2] = {N, N - 1};
    la_tensor_init(&tbad, q, LA_F32, LA_DEVICE_CPU, 3, ne3);
    CHECK_STATUS(la_attention_map(&p, &tbad, &tk, NULL, NULL, &to, NULL), LA_ERR_SHAPE);
    la_tensor_init(&tbad, k, LA_F32, LA_DEVICE_CPU, 2, nek);
    CHECK_STATUS(la_attention_map(&p, &tq, &tbad, NULL, NULL, &to, NULL), LA_ERR_SHAPE);
    la_tensor_init(&tbad, o, LA_F32, LA_DEVICE_CPU, 2, neo2);
    CHECK_STATUS(la_attention_map(&p, &tq, &tk, NULL, NULL, &tbad, NULL), LA_ERR_SHAPE);
    la_tensor_init(&tbad, o, LA_BF16, LA_DEVICE_CPU, 2, neo);
    CHECK_STATUS(la_attention_map(&p, &tq, &tk, NULL, NULL, &tbad, NULL), LA_ERR_DTYPE);
    CHECK_STATUS(la_attention_map(&p, &tq, &tk, NULL, NULL, &tq, NULL), LA_ERR_SHAPE);
    p.scale = -1;
    CHECK_STATUS(la_attention_map(&p, &tq, &tk, NULL, NULL, &to, NULL), LA_ERR_ARG);
    p.scale = 0;
    p.variant = (la_map_variant)9;
    CHECK_STATUS(la_attention_map(&p, &tq, &tk, NULL, NULL, &to, NULL), LA_ERR_ARG);
    /* mhla: missing mixing, wrong M, grid not holding N, blocks > grid, rank 4 grid */
    p.variant = LA_MAP_MHLA;
    p.mhla.grid_ndim = 2;
    p.mhla.grid[0] = 3; p.mhla.grid[1] = 4;
    p.mhla.blocks[0] = 2; p.mhla.blocks[1] = 2;
    CHECK_OK(la_attention_map(&p, &tq, &tk, &tw, NULL, &to, NULL));
    CHECK_STATUS(la_attention_map(&p, &tq, &tk, NULL, NULL, &to, NULL), LA_ERR_ARG);
    CHECK(strstr(la_last_error(), "mixing") != NULL, "%s", la_last_error());
    p.mhla.blocks[1] = 1;
    CHECK_STATUS(la_attention_map(&p, &tq, &tk, &tw, NULL, &to, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "mixing") != NULL, "%s", la_last_error());
    p.mhla.blocks[1] = 2;
    p.mhla.grid[1] = 5;
    CHECK_STATUS(la_attention_map(&p, &tq, &tk, &tw, NULL, &to, NULL), LA_ERR_SHAPE);
    p.mhla.grid[1] = 4;
    p.mhla.blocks[0] = 4; /* more blocks than rows is valid (empty blocks), but M = 8 != 4 */
    CHECK_STATUS(la_attention_map(&p, &tq, &tk, &tw, NULL, &to, NULL), LA_ERR_SHAPE);
    p.mhla.blocks[0] = 0;
    CHECK_STATUS(la_attention_map(&p, &tq, &tk, &tw, NULL, &to, NULL), LA_ERR_ARG);
    p.mhla.blocks[0] = 2;
    p.mhla.grid_ndim = 4;
    CHECK_STATUS(la_attention_map(&p, &tq, &tk, &tw, NULL, &to, NULL), LA_ERR_ARG);
    /* focused: softplus size, p, map */
    la_attn_map_params_init(&p);
    p.variant = LA_MAP_FOCUSED_FLATTEN;
    CHECK_STATUS(la_attention_map(&p, &tq, &tk, NULL, &tsp, &to, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "softplus") != NULL, "%s", la_last_error());
    p.focused.p = 0;
    CHECK_STATUS(la_attention_map(&p, &tq, &tk, NULL, NULL, &to, NULL), LA_ERR_ARG);
    p.focused.p = 3;
    p.focused.map_h = 5; p.focused.map_w = 5;
    CHECK_STATUS(la_attention_map(&p, &tq, &tk, NULL, NULL, &to, NULL), LA_ERR_SHAPE);
    p.focused.map_h = 3; p.focused.map_w = 4;
    CHECK_OK(la_attention_map(&p, &tq, &tk, NULL, NULL, &to, NULL));
    /* CUDA tensors: host-only analysis */
    {
        la_tensor cq = tq;
        cq.device = LA_DEVICE_CUDA;
        CHECK_STATUS(la_attention_map(&p, &cq, &tk, NULL, NULL, &to, NULL), LA_ERR_UNSUPPORTED);
        la_tensor co = to;
        co.device = LA_DEVICE_CUDA;
        CHECK_STATUS(la_map_rank_entropy(&co, 1e-6, NULL, &(double){0}), LA_ERR_UNSUPPORTED);
    }
    /* rank/entropy: NULL outputs, rtol, non-finite entries, rank-3 map */
    int64_t r;
    double e;
    CHECK_STATUS(la_map_rank_entropy(NULL, 1e-6, &r, &e), LA_ERR_ARG);
    CHECK_STATUS(la_map_rank_entropy(&to, 1e-6, NULL, NULL), LA_ERR_ARG);
    CHECK_STATUS(la_map_rank_entropy(&to, -1, &r, &e), LA_ERR_ARG);
    CHECK_STATUS(la_map_rank_entropy(&to, NAN, &r, &e), LA_ERR_ARG);
    o[17] = NAN;
    CHECK_STATUS(la_map_rank_entropy(&to, 1e-6, &r, &e), LA_ERR_ARG);
    CHECK(strstr(la_last_error(), "[1, 5]") != NULL, "message names the element: %s", la_last_error());
    o[17] = INFINITY;
    CHECK_STATUS(la_map_rank_entropy(&to, 1e-6, &r, &e), LA_ERR_ARG);
    la_tensor_init(&tbad, o, LA_F32, LA_DEVICE_CPU, 3, ne3);
    CHECK_STATUS(la_map_rank_entropy(&tbad, 1e-6, &r, &e), LA_ERR_SHAPE);
}

int main(void) {
    la_rng rng = la_test_rng("test_attn_map");
    la_context *ctx = NULL;
    la_context_create(&ctx);
    map_case c;
    const int64_t Ns[4] = {1, 63, 65, 200}, Dsz[4] = {1, 16, 63, 64};
    const la_feature feats[5] = {LA_FEATURE_RELU, LA_FEATURE_RELU_EPS, LA_FEATURE_RELU1,
                                 LA_FEATURE_ELU1, LA_FEATURE_RELU};
    for (int ni = 0; ni < 4; ni++)
        for (int di = 0; di < 4; di++) {
            int64_t N = Ns[ni], D = Dsz[di];
            la_dtype odt = ((ni + di) & 1) ? LA_F64 : LA_F32;
            int layout = (ni + 2 * di) % 3;
            memset(&c, 0, sizeof c);
            c.var = LA_MAP_SOFTMAX;
            c.scale = (di & 1) ? 0.3 : 0;
            run_map(&rng, &c, N, D, layout, odt, ctx);
            c.var = LA_MAP_LINEAR;
            c.feature = feats[(ni + di) % 5];
            run_map(&rng, &c, N, D, layout, odt, ctx);
            c.var = LA_MAP_FOCUSED_FLATTEN;
            c.p = (di == 2) ? 2.5 : 3;
            c.random_sp = di & 1;
            run_map(&rng, &c, N, D, layout, odt, ctx);
            c.random_sp = 0;
            c.var = LA_MAP_FOCUSED_BLOG;
            run_map(&rng, &c, N, D, layout, odt, ctx);
        }
    /* MHLA on 1-, 2-, 3-D grids with uneven blocks */
    memset(&c, 0, sizeof c);
    c.var = LA_MAP_MHLA;
    c.feature = LA_FEATURE_RELU_EPS;
    c.gnd = 1; c.grid[0] = 0; c.blocks[0] = 7;
    run_map(&rng, &c, 65, 16, L_CONTIG, LA_F64, ctx);
    c.gnd = 1; c.grid[0] = 1; c.blocks[0] = 1;
    run_map(&rng, &c, 1, 1, L_CONTIG, LA_F32, ctx);
    c.gnd = 2; c.grid[0] = 7; c.grid[1] = 9; c.blocks[0] = 3; c.blocks[1] = 4;
    run_map(&rng, &c, 63, 63, L_TRANSPOSED, LA_F64, ctx);
    c.feature = LA_FEATURE_ELU1;
    c.scale = 0.5;
    c.gnd = 3; c.grid[0] = 3; c.grid[1] = 5; c.grid[2] = 7; c.blocks[0] = 2; c.blocks[1] = 2; c.blocks[2] = 3;
    run_map(&rng, &c, 105, 64, L_BF16, LA_F32, ctx);
    c.gnd = 2; c.grid[0] = 16; c.grid[1] = 16; c.blocks[0] = 8; c.blocks[1] = 8; c.scale = 0;
    c.feature = LA_FEATURE_RELU;
    run_map(&rng, &c, 256, 16, L_CONTIG, LA_F64, ctx);

    test_rank_entropy(&rng);
    test_bounds(&rng);
    test_bad_input();
    la_context_destroy(ctx);
    return la_test_finish();
}
