/* MHLA mixing initializers and projection (SPEC §5.3): hand-computed
 * values on small grids, a plain float64 recomputation on a 3-D grid, row
 * and column sums, and the training-time projection. */
#include "test_mhla_common.h"

static void init_into(la_mhla_init_kind kind, int nd, const int64_t *blocks, int64_t M, float *w) {
    la_tensor t;
    int64_t ne[2] = {M, M};
    la_tensor_init(&t, w, LA_F32, LA_DEVICE_CPU, 2, ne);
    for (int64_t i = 0; i < M * M; i++) w[i] = NAN;
    CHECK_OK(la_mhla_init(kind, nd, blocks, &t));
}

static double max_diff(const float *a, const double *b, int64_t n) {
    double e = 0;
    for (int64_t i = 0; i < n; i++) e = fmax(e, isnan(a[i]) ? INFINITY : fabs(a[i] - b[i]));
    return e;
}

static void hand_values(void) {
    float w[16];
    const double r2 = sqrt(2.0);
    printf("hand-computed values\n");
    /* 1-D, 3 blocks: centres 0.5, 1.5, 2.5. Row 0: dist 0,1,2, max 2 -> 1, .5, 0 -> /1.5 */
    int64_t b3[1] = {3};
    const double loc3[9] = {2. / 3, 1. / 3, 0, 0, 1, 0, 0, 1. / 3, 2. / 3};
    init_into(LA_MHLA_INIT_LOCALITY, 1, b3, 3, w);
    CHECK(max_diff(w, loc3, 9) < 1e-7, "locality 1-D 3: %.3e", max_diff(w, loc3, 9));
    /* global max dist 2: 1 - d/2 = [[1,.5,0],[.5,1,.5],[0,.5,1]], columns / (1.5, 2, 1.5) */
    const double glo3[9] = {2. / 3, .25, 0, 1. / 3, .5, 1. / 3, 0, .25, 2. / 3};
    init_into(LA_MHLA_INIT_LOCALITY_GLOBAL, 1, b3, 3, w);
    CHECK(max_diff(w, glo3, 9) < 1e-7, "locality_global 1-D 3: %.3e", max_diff(w, glo3, 9));
    const double uc3[9] = {1, 0, 0, .5, .5, 0, 1. / 3, 1. / 3, 1. / 3};
    init_into(LA_MHLA_INIT_UNIFORM_CAUSAL, 1, b3, 3, w);
    CHECK(max_diff(w, uc3, 9) < 1e-7, "uniform_causal 3: %.3e", max_diff(w, uc3, 9));
    /* 2x2: from block 0, distances 0, 1, 1, sqrt2 (max) -> 1, 1-1/sqrt2, 1-1/sqrt2, 0,
     * sum 3 - sqrt2. Every row is a permutation of row 0. */
    int64_t b22[2] = {2, 2};
    const double a = 1 / (3 - r2), c = (1 - 1 / r2) / (3 - r2);
    const double loc22[16] = {a, c, c, 0, c, a, 0, c, c, 0, a, c, 0, c, c, a};
    init_into(LA_MHLA_INIT_LOCALITY, 2, b22, 4, w);
    CHECK(max_diff(w, loc22, 16) < 1e-7, "locality 2x2: %.3e", max_diff(w, loc22, 16));
    /* global max is also sqrt2 here and the matrix is symmetric: same values */
    init_into(LA_MHLA_INIT_LOCALITY_GLOBAL, 2, b22, 4, w);
    CHECK(max_diff(w, loc22, 16) < 1e-7, "locality_global 2x2: %.3e", max_diff(w, loc22, 16));
    /* 1x3 (2-D) rows: centres (0.5,0.5),(0.5,1.5),(0.5,2.5) = same as 1-D 3 */
    int64_t b13[2] = {1, 3};
    init_into(LA_MHLA_INIT_LOCALITY, 2, b13, 3, w);
    CHECK(max_diff(w, loc3, 9) < 1e-7, "locality 1x3: %.3e", max_diff(w, loc3, 9));
    /* M = 1 */
    int64_t b1[1] = {1};
    const double one[1] = {1};
    init_into(LA_MHLA_INIT_LOCALITY, 1, b1, 1, w);
    CHECK(max_diff(w, one, 1) < 1e-7, "locality M=1: %g", (double)w[0]);
    init_into(LA_MHLA_INIT_LOCALITY_GLOBAL, 1, b1, 1, w);
    CHECK(max_diff(w, one, 1) < 1e-7, "locality_global M=1: %g", (double)w[0]);
    /* 2 blocks: the other block is the farthest, so locality is the identity */
    int64_t b2[1] = {2};
    const double id2[4] = {1, 0, 0, 1};
    init_into(LA_MHLA_INIT_LOCALITY, 1, b2, 2, w);
    CHECK(max_diff(w, id2, 4) < 1e-7, "locality M=2 is the identity");
    printf("  1-D 3, 2x2, 1x3, M=1, M=2: checked\n");
}

/* Plain recomputation on a 3x5x2 grid plus row/column sums. */
static void grid_3d(void) {
    const int64_t bl[3] = {3, 5, 2}, M = 30;
    float *w = malloc(sizeof(float) * M * M);
    double *ref = malloc(sizeof(double) * M * M), dist[30][30], cen[30][3];
    for (int64_t i = 0; i < M; i++) {
        cen[i][0] = (double)(i / 10) + 0.5;
        cen[i][1] = (double)((i / 2) % 5) + 0.5;
        cen[i][2] = (double)(i % 2) + 0.5;
    }
    double gmax = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < M; j++) {
            dist[i][j] = sqrt(pow(cen[i][0] - cen[j][0], 2) + pow(cen[i][1] - cen[j][1], 2) +
                              pow(cen[i][2] - cen[j][2], 2));
            gmax = fmax(gmax, dist[i][j]);
        }
    printf("3-D block grid 3x5x2 (M=30)\n");
    /* locality: rows */
    for (int i = 0; i < M; i++) {
        double mx = 0, s = 0;
        for (int j = 0; j < M; j++) mx = fmax(mx, dist[i][j]);
        for (int j = 0; j < M; j++) s += ref[i * M + j] = 1 - dist[i][j] / mx;
        for (int j = 0; j < M; j++) ref[i * M + j] /= s;
    }
    init_into(LA_MHLA_INIT_LOCALITY, 3, bl, M, w);
    double e = max_diff(w, ref, M * M), rs = 0, mn = 1;
    int diag_max = 1;
    for (int i = 0; i < M; i++) {
        double s = 0;
        for (int j = 0; j < M; j++) {
            s += w[i * M + j];
            mn = fmin(mn, w[i * M + j]);
            if (w[i * M + j] > w[i * M + i]) diag_max = 0;
        }
        rs = fmax(rs, fabs(s - 1));
    }
    printf("  locality: max diff vs plain %.2e, max |row sum - 1| %.2e, min %.3g\n", e, rs, mn);
    CHECK(e < 1e-7 && rs < 1e-6 && mn >= 0 && diag_max, "locality 3x5x2: diff %.3e rowsum %.3e min %g diag_max %d",
          e, rs, mn, diag_max);
    /* locality_global: columns */
    for (int i = 0; i < M; i++)
        for (int j = 0; j < M; j++) ref[i * M + j] = 1 - dist[i][j] / gmax;
    for (int j = 0; j < M; j++) {
        double s = 0;
        for (int i = 0; i < M; i++) s += ref[i * M + j];
        for (int i = 0; i < M; i++) ref[i * M + j] /= s;
    }
    init_into(LA_MHLA_INIT_LOCALITY_GLOBAL, 3, bl, M, w);
    double cs = 0;
    mn = 1;
    for (int j = 0; j < M; j++) {
        double s = 0;
        for (int i = 0; i < M; i++) s += w[i * M + j], mn = fmin(mn, w[i * M + j]);
        cs = fmax(cs, fabs(s - 1));
    }
    e = max_diff(w, ref, M * M);
    printf("  locality_global: max diff vs plain %.2e, max |col sum - 1| %.2e, min %.3g\n", e, cs, mn);
    CHECK(e < 1e-7 && cs < 1e-6 && mn >= 0, "locality_global 3x5x2: diff %.3e colsum %.3e", e, cs);
    free(w), free(ref);

    /* uniform_causal, M = 32: rows sum to 1, upper triangle zero */
    const int64_t b32[1] = {32};
    float u[32 * 32];
    init_into(LA_MHLA_INIT_UNIFORM_CAUSAL, 1, b32, 32, u);
    double ur = 0;
    int upper0 = 1;
    for (int i = 0; i < 32; i++) {
        double s = 0;
        for (int j = 0; j < 32; j++) {
            s += u[i * 32 + j];
            if (j > i && u[i * 32 + j] != 0) upper0 = 0;
            if (j <= i && fabs(u[i * 32 + j] - 1.0 / (i + 1)) > 1e-7) upper0 = 0;
        }
        ur = fmax(ur, fabs(s - 1));
    }
    printf("  uniform_causal M=32: max |row sum - 1| %.2e\n", ur);
    CHECK(ur < 1e-6 && upper0, "uniform_causal 32");

    /* f64 output, strided (transposed) view */
    double wd[9];
    la_tensor td;
    int64_t ne[2] = {3, 3}, nb[2] = {1, 3};
    la_tensor_init_strided(&td, wd, LA_F64, LA_DEVICE_CPU, 2, ne, nb);
    const int64_t b3[1] = {3};
    CHECK_OK(la_mhla_init(LA_MHLA_INIT_UNIFORM_CAUSAL, 1, b3, &td));
    CHECK(fabs(wd[1 * 3 + 0]) < 1e-15 && fabs(wd[0 * 3 + 1] - 0.5) < 1e-15,
          "f64 transposed view: W[0,1] stored at [1][0] = %g, W[1,0] at [0][1] = %g", wd[3], wd[1]);
}

static void projection(void) {
    printf("projection\n");
    float w[9] = {-1, 0, 5e-6f, 0.3f, 1, 2, 1e-5f, 7, 0.5f};
    float w2[9];
    memcpy(w2, w, sizeof w);
    la_tensor t;
    int64_t ne[2] = {3, 3};
    la_tensor_init(&t, w, LA_F32, LA_DEVICE_CPU, 2, ne);
    CHECK_OK(la_mhla_project(&t, 0));
    const double want[9] = {1e-5, 1e-5, 1e-5, 0.3, 1, 1, 1e-5, 1, 0.5};
    CHECK(max_diff(w, want, 9) < 1e-7, "clamp [1e-5,1]: %.3e", max_diff(w, want, 9));
    la_tensor_init(&t, w2, LA_F32, LA_DEVICE_CPU, 2, ne);
    CHECK_OK(la_mhla_project(&t, 1));
    const double wantc[9] = {1e-5, 0, 0, 0.3, 1, 0, 1e-5, 1, 0.5};
    CHECK(max_diff(w2, wantc, 9) < 1e-7, "causal projection: %.3e", max_diff(w2, wantc, 9));
    /* per-head [2,2,2] */
    float w3[8] = {2, 2, 2, 2, -3, 0.25f, 0.75f, -0.0f};
    int64_t ne3[3] = {2, 2, 2};
    la_tensor_init(&t, w3, LA_F32, LA_DEVICE_CPU, 3, ne3);
    CHECK_OK(la_mhla_project(&t, 1));
    const double want3[8] = {1, 0, 1, 1, 1e-5, 0, 0.75, 1e-5};
    CHECK(max_diff(w3, want3, 8) < 1e-7, "per-head causal projection: %.3e", max_diff(w3, want3, 8));
    printf("  clamp, causal lower triangle, per-head: checked\n");
}

int main(void) {
    printf("# test_mhla_init: deterministic (no random inputs)\n");
    hand_values();
    grid_3d();
    projection();
    return la_test_finish();
}
