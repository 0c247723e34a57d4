/* Bad input to every MHLA entry point: a status code and a message naming
 * the argument and the shape at fault, never a crash, nothing written. */
#include "test_mhla_common.h"

#define EXPECT(call, status, word)                                                        \
    do {                                                                                  \
        la_status s__ = (call);                                                           \
        CHECK(s__ == (status), "%s -> %s, want %s (%s)", #call, la_status_string(s__),   \
              la_status_string(status), la_last_error());                                 \
        CHECK(err_mentions(word), "%s: message \"%s\" does not mention \"%s\"", #call,   \
              la_last_error(), word);                                                     \
        if (verbose) printf("  %-16s %s\n", la_status_string(s__), la_last_error());      \
    } while (0)

static int verbose = 1;

int main(void) {
    printf("# test_mhla_errors: deterministic inputs\n");
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, 2);
    la_rng rng = {12345};
    /* valid base: B=1, N=12 on a 3x4 map, H=2, D=4, Dv=3, blocks 1x2 (M=2) */
    tview q, k, v, o, kbad, vbad, obad;
    tv_make(&q, 1, 12, 2, 4, LA_F32, 0, &rng, 1.0);
    tv_make(&k, 1, 12, 2, 4, LA_F32, 0, &rng, 1.0);
    tv_make(&v, 1, 12, 2, 3, LA_F32, 0, &rng, 1.0);
    tv_make(&o, 1, 12, 2, 3, LA_F32, 0, NULL, 0);
    tv_make(&kbad, 1, 11, 2, 4, LA_F32, 0, &rng, 1.0);
    tv_make(&vbad, 1, 12, 3, 3, LA_F32, 0, &rng, 1.0);
    tv_make(&obad, 1, 12, 2, 5, LA_F32, 0, NULL, 0);
    mixing_t w2, w3, wh, wbad;
    mix_make(&w2, 1, 2, 2, &rng, 0);
    mix_make(&w3, 1, 3, 2, &rng, 0);
    mix_make(&wh, 3, 2, 3, &rng, 0); /* [3,2,2] but H = 2 */
    mix_make(&wbad, 1, 2, 2, &rng, 0);
    la_mhla_params p;
    la_mhla_params_init(&p);
    p.grid_ndim = 2, p.grid[0] = 3, p.grid[1] = 4, p.blocks[0] = 1, p.blocks[1] = 2;
    CHECK_OK(la_mhla_forward(&p, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx));
    la_fill_nan(o.f32, 12 * 2 * 3);

    printf("la_mhla_forward\n");
    la_mhla_params b = p;
    EXPECT(la_mhla_forward(NULL, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_ARG, "p");
    EXPECT(la_mhla_forward(&p, NULL, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_ARG, "q");
    EXPECT(la_mhla_forward(&p, &q.t, &k.t, &v.t, NULL, &o.t, ctx), LA_ERR_ARG, "mixing");
    EXPECT(la_mhla_forward(&p, &q.t, &k.t, &v.t, &w3.t, &o.t, ctx), LA_ERR_SHAPE, "block grid has 2");
    EXPECT(la_mhla_forward(&p, &q.t, &k.t, &v.t, &wh.t, &o.t, ctx), LA_ERR_SHAPE, "[H,M,M]");
    b.grid[1] = 5;
    EXPECT(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_SHAPE, "grid 3x5");
    b = p, b.grid_ndim = 1, b.grid[0] = 10, b.blocks[0] = 2;
    EXPECT(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_SHAPE, "N = 12");
    b = p, b.grid_ndim = 3, b.grid[0] = 1, b.grid[1] = 3, b.grid[2] = 3, b.blocks[2] = 1;
    b.blocks[0] = 1, b.blocks[1] = 2;
    EXPECT(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_SHAPE, "grid 1x3x3");
    b = p, b.blocks[0] = 4, b.blocks[1] = 1; /* empty blocks are valid; M = 4 != 2 is not */
    EXPECT(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_SHAPE, "block grid has 4 blocks");
    b = p, b.blocks[1] = 0;
    EXPECT(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_ARG, "blocks[1]");
    b = p, b.blocks[0] = -2;
    EXPECT(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_ARG, "blocks[0]");
    b = p, b.grid[0] = -3;
    EXPECT(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_SHAPE, "grid[0]");
    b = p, b.grid_ndim = 4;
    EXPECT(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_ARG, "grid_ndim");
    b = p, b.grid_ndim = 0;
    EXPECT(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_ARG, "grid_ndim");
    /* released_vision: 3x4 map with 2x2 blocks has rows of 2 and 1 tokens */
    b = p, b.blocks[0] = 2, b.blocks[1] = 2, b.normalize = LA_MHLA_NORM_RELEASED_VISION;
    {
        mixing_t w4;
        mix_make(&w4, 1, 4, 2, &rng, 0);
        EXPECT(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w4.t, &o.t, ctx), LA_ERR_SHAPE,
               "equal block sizes");
        b.normalize = LA_MHLA_NORM_PER_QUERY;
        CHECK_OK(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w4.t, &o.t, ctx)); /* fine without rv */
        la_fill_nan(o.f32, 12 * 2 * 3);
        mix_free(&w4);
    }
    b = p, b.feature = (la_feature)9;
    EXPECT(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_ARG, "feature");
    b = p, b.normalize = (la_mhla_normalize)7;
    EXPECT(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_ARG, "normalize");
    b = p, b.eps = -1;
    EXPECT(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_ARG, "eps");
    b = p, b.eps = NAN;
    EXPECT(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_ARG, "eps");
    b = p, b.scale_q = INFINITY;
    EXPECT(la_mhla_forward(&b, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_ARG, "scale_q");
    /* shapes, ranks, dtypes, devices, aliasing */
    EXPECT(la_mhla_forward(&p, &q.t, &kbad.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_SHAPE, "k is");
    EXPECT(la_mhla_forward(&p, &q.t, &k.t, &vbad.t, &w2.t, &o.t, ctx), LA_ERR_SHAPE, "v [B,N,H,Dv]");
    EXPECT(la_mhla_forward(&p, &q.t, &k.t, &v.t, &w2.t, &obad.t, ctx), LA_ERR_SHAPE, "out");
    EXPECT(la_mhla_forward(&p, &q.t, &k.t, &v.t, &w2.t, &v.t, ctx), LA_ERR_ARG, "overlaps");
    {
        la_tensor t = q.t;
        t.ndim = 3;
        EXPECT(la_mhla_forward(&p, &t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_SHAPE, "q");
        t = q.t;
        t.dtype = LA_I32;
        EXPECT(la_mhla_forward(&p, &t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_DTYPE, "q");
        t = w2.t;
        t.dtype = LA_I32;
        EXPECT(la_mhla_forward(&p, &q.t, &k.t, &v.t, &t, &o.t, ctx), LA_ERR_DTYPE, "mixing");
        t = w2.t;
        t.ndim = 1;
        EXPECT(la_mhla_forward(&p, &q.t, &k.t, &v.t, &t, &o.t, ctx), LA_ERR_SHAPE, "mixing");
        t = w3.t;
        t.ne[1] = 2; /* [3,2] */
        EXPECT(la_mhla_forward(&p, &q.t, &k.t, &v.t, &t, &o.t, ctx), LA_ERR_SHAPE, "not square");
        t = k.t;
        t.device = LA_DEVICE_CUDA;
        EXPECT(la_mhla_forward(&p, &q.t, &t, &v.t, &w2.t, &o.t, ctx), LA_ERR_DEVICE, "k");
        /* All tensors on CUDA: only meaningful without a usable device (the
         * pointers are host memory). No CUDA build: LA_ERR_UNSUPPORTED; a
         * CUDA build on a machine without a device: LA_ERR_DEVICE. */
        int have_cuda = 0;
        la_cuda_available(&have_cuda);
        if (!have_cuda) {
            la_tensor qc = q.t, kc = k.t, vc = v.t, wc = w2.t, oc = o.t;
            qc.device = kc.device = vc.device = wc.device = oc.device = LA_DEVICE_CUDA;
            la_mhla_causal_params cp;
            la_mhla_causal_params_init(&cp);
            cp.chunk = 6;
            la_status s1 = la_mhla_forward(&p, &qc, &kc, &vc, &wc, &oc, ctx);
            CHECK((s1 == LA_ERR_UNSUPPORTED || s1 == LA_ERR_DEVICE) && strlen(la_last_error()) > 0,
                  "CUDA tensors without a device: %s (%s)", la_status_string(s1), la_last_error());
            printf("  %-16s %s\n", la_status_string(s1), la_last_error());
            la_status s2 = la_mhla_causal_forward(&cp, &qc, &kc, &vc, &wc, &oc, ctx);
            CHECK((s2 == LA_ERR_UNSUPPORTED || s2 == LA_ERR_DEVICE) && strlen(la_last_error()) > 0,
                  "causal, CUDA tensors without a device: %s (%s)", la_status_string(s2), la_last_error());
            la_mhla_state *st = NULL;
            EXPECT(la_mhla_state_create(&cp, 1, 2, 4, 3, &wc, &st), LA_ERR_UNSUPPORTED, "CUDA");
        }
    }
    int untouched = 1;
    for (int i = 0; i < 12 * 2 * 3; i++) untouched &= isnan(o.f32[i]);
    CHECK(untouched, "a refused call wrote to out");

    printf("size overflow (zero-stride views with huge extents)\n");
    {
        float one = 1;
        int64_t ne[4] = {1, (int64_t)1 << 31, 1, (int64_t)1 << 20}, nb[4] = {0, 0, 0, 0};
        int64_t nev[4] = {1, (int64_t)1 << 31, 1, (int64_t)1 << 20};
        float dummy_out[4];
        la_tensor hq, hv, ho, hw;
        la_tensor_init_strided(&hq, &one, LA_F32, LA_DEVICE_CPU, 4, ne, nb);
        la_tensor_init_strided(&hv, &one, LA_F32, LA_DEVICE_CPU, 4, nev, nb);
        la_tensor_init_strided(&ho, dummy_out, LA_F32, LA_DEVICE_CPU, 4, nev, nb);
        int64_t new2[2] = {(int64_t)1 << 31, (int64_t)1 << 31}, nbw[2] = {0, 0};
        la_tensor_init_strided(&hw, &one, LA_F32, LA_DEVICE_CPU, 2, new2, nbw);
        la_mhla_params hp;
        la_mhla_params_init(&hp);
        hp.blocks[0] = (int64_t)1 << 31;
        EXPECT(la_mhla_forward(&hp, &hq, &hq, &hv, &hw, &ho, ctx), LA_ERR_OVERFLOW, "mhla");
        la_mhla_causal_params cp;
        la_mhla_causal_params_init(&cp);
        cp.chunk = 1;
        EXPECT(la_mhla_causal_forward(&cp, &hq, &hq, &hv, &hw, &ho, ctx), LA_ERR_OVERFLOW, "mhla causal");
        la_mhla_state *st = NULL;
        EXPECT(la_mhla_state_create(&cp, 1, 1, (int64_t)1 << 20, (int64_t)1 << 20, &hw, &st),
               LA_ERR_OVERFLOW, "mhla state");
        CHECK(st == NULL, "state left non-NULL after a failure");
        int64_t nbig[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
        la_tensor_init_strided(&hw, &one, LA_F32, LA_DEVICE_CPU, 2, nbig, nbw);
        EXPECT(la_mhla_forward(&hp, &hq, &hq, &hv, &hw, &ho, ctx), LA_ERR_OVERFLOW, "mixing");
    }

    printf("la_mhla_causal_forward\n");
    {
        la_mhla_causal_params cp;
        la_mhla_causal_params_init(&cp);
        cp.chunk = 4; /* N = 12 -> 3 chunks */
        EXPECT(la_mhla_causal_forward(&cp, &q.t, &k.t, &v.t, &w2.t, &o.t, ctx), LA_ERR_SHAPE,
               "too small");
        CHECK_OK(la_mhla_causal_forward(&cp, &q.t, &k.t, &v.t, &w3.t, &o.t, ctx));
        la_mhla_causal_params c2 = cp;
        c2.chunk = 0;
        EXPECT(la_mhla_causal_forward(&c2, &q.t, &k.t, &v.t, &w3.t, &o.t, ctx), LA_ERR_ARG, "chunk");
        c2 = cp, c2.normalize = LA_MHLA_NORM_RELEASED_VISION;
        EXPECT(la_mhla_causal_forward(&c2, &q.t, &k.t, &v.t, &w3.t, &o.t, ctx), LA_ERR_ARG,
               "released_vision");
        c2 = cp, c2.scale_q = NAN;
        EXPECT(la_mhla_causal_forward(&c2, &q.t, &k.t, &v.t, &w3.t, &o.t, ctx), LA_ERR_ARG, "scale_q");
        EXPECT(la_mhla_causal_forward(NULL, &q.t, &k.t, &v.t, &w3.t, &o.t, ctx), LA_ERR_ARG, "p");
        EXPECT(la_mhla_causal_forward(&cp, &q.t, &k.t, &v.t, &wh.t, &o.t, ctx), LA_ERR_SHAPE, "H = 2");

        printf("decode state\n");
        la_mhla_state *st = NULL;
        EXPECT(la_mhla_state_create(&cp, 1, 2, 4, 3, &w3.t, NULL), LA_ERR_ARG, "state");
        EXPECT(la_mhla_state_create(&cp, 0, 2, 4, 3, &w3.t, &st), LA_ERR_SHAPE, "B=0");
        EXPECT(la_mhla_state_create(&cp, 1, 2, 4, 3, NULL, &st), LA_ERR_ARG, "mixing");
        EXPECT(la_mhla_state_create(&c2, 1, 2, 4, 3, &w3.t, &st), LA_ERR_ARG, "scale_q");
        EXPECT(la_mhla_state_create(&cp, 1, 2, 4, 3, &wh.t, &st), LA_ERR_SHAPE, "mixing");
        CHECK_OK(la_mhla_state_create(&cp, 1, 2, 4, 3, &w3.t, &st));
        EXPECT(la_mhla_state_append(st, &q.t, &k.t, &vbad.t, &o.t, ctx), LA_ERR_SHAPE, "v");
        {
            tview q3, k3, v3, o3, v5, o5;
            tv_make(&q3, 1, 2, 3, 4, LA_F32, 0, &rng, 1.0);
            tv_make(&k3, 1, 2, 3, 4, LA_F32, 0, &rng, 1.0);
            tv_make(&v3, 1, 2, 3, 3, LA_F32, 0, &rng, 1.0);
            tv_make(&o3, 1, 2, 3, 3, LA_F32, 0, NULL, 0);
            EXPECT(la_mhla_state_append(st, &q3.t, &k3.t, &v3.t, &o3.t, ctx), LA_ERR_SHAPE, "H=2");
            tv_make(&v5, 1, 12, 2, 5, LA_F32, 0, &rng, 1.0);
            tv_make(&o5, 1, 12, 2, 5, LA_F32, 0, NULL, 0);
            EXPECT(la_mhla_state_append(st, &q.t, &k.t, &v5.t, &o5.t, ctx), LA_ERR_SHAPE, "Dv=3");
            tv_free(&q3), tv_free(&k3), tv_free(&v3), tv_free(&o3), tv_free(&v5), tv_free(&o5);
        }
        EXPECT(la_mhla_state_append(NULL, &q.t, &k.t, &v.t, &o.t, ctx), LA_ERR_ARG, "state");
        int64_t len = -1;
        CHECK_OK(la_mhla_state_length(st, &len));
        CHECK(len == 0, "refused appends changed the length: %lld", (long long)len);
        CHECK_OK(la_mhla_state_append(st, &q.t, &k.t, &v.t, &o.t, ctx)); /* 12 = M*C */
        EXPECT(la_mhla_state_append(st, &q.t, &k.t, &v.t, &o.t, ctx), LA_ERR_SHAPE, "capacity");
        EXPECT(la_mhla_state_length(NULL, &len), LA_ERR_ARG, "state");
        CHECK_OK(la_mhla_state_destroy(st));
        CHECK_OK(la_mhla_state_destroy(NULL));
    }

    printf("la_mhla_init / la_mhla_project\n");
    {
        float wb[16];
        la_tensor t;
        int64_t ne33[2] = {3, 3}, ne34[2] = {3, 4}, b3[1] = {3}, b0[1] = {0}, b22[2] = {2, 2};
        la_tensor_init(&t, wb, LA_F32, LA_DEVICE_CPU, 2, ne33);
        EXPECT(la_mhla_init(LA_MHLA_INIT_LOCALITY, 1, b0, &t), LA_ERR_ARG, "blocks[0]");
        EXPECT(la_mhla_init(LA_MHLA_INIT_LOCALITY, 4, b3, &t), LA_ERR_ARG, "ndim");
        EXPECT(la_mhla_init(LA_MHLA_INIT_LOCALITY, 1, NULL, &t), LA_ERR_ARG, "blocks");
        EXPECT(la_mhla_init(LA_MHLA_INIT_LOCALITY, 1, b3, NULL), LA_ERR_ARG, "out");
        EXPECT(la_mhla_init((la_mhla_init_kind)5, 1, b3, &t), LA_ERR_ARG, "kind");
        EXPECT(la_mhla_init(LA_MHLA_INIT_UNIFORM_CAUSAL, 2, b22, &t), LA_ERR_ARG, "uniform_causal");
        EXPECT(la_mhla_init(LA_MHLA_INIT_LOCALITY, 2, b22, &t), LA_ERR_SHAPE, "[4, 4]");
        la_tensor_init(&t, wb, LA_F32, LA_DEVICE_CPU, 2, ne34);
        EXPECT(la_mhla_init(LA_MHLA_INIT_LOCALITY, 1, b3, &t), LA_ERR_SHAPE, "out");
        la_tensor_init(&t, wb, LA_I32, LA_DEVICE_CPU, 2, ne33);
        EXPECT(la_mhla_init(LA_MHLA_INIT_LOCALITY, 1, b3, &t), LA_ERR_DTYPE, "out");
        EXPECT(la_mhla_project(NULL, 0), LA_ERR_ARG, "mixing");
        la_tensor_init(&t, wb, LA_F32, LA_DEVICE_CPU, 2, ne34);
        EXPECT(la_mhla_project(&t, 1), LA_ERR_SHAPE, "not square");
        la_tensor_init(&t, wb, LA_F32, LA_DEVICE_CPU, 1, ne34);
        EXPECT(la_mhla_project(&t, 1), LA_ERR_SHAPE, "rank 1");
        la_tensor_init(&t, wb, LA_F32, LA_DEVICE_CUDA, 2, ne33);
        EXPECT(la_mhla_project(&t, 1), LA_ERR_UNSUPPORTED, "CUDA");
    }

    tv_free(&q), tv_free(&k), tv_free(&v), tv_free(&o), tv_free(&kbad), tv_free(&vbad), tv_free(&obad);
    mix_free(&w2), mix_free(&w3), mix_free(&wh), mix_free(&wbad);
    la_context_destroy(ctx);
    return la_test_finish();
}
