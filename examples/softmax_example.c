/* The README's C example, compiled and run by the tests against an
 * installed copy of the library (make install + pkg-config). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <longattn.h>

int main(void) {
    const int64_t B = 1, N = 128, H = 2, D = 16;
    size_t n = (size_t)(B * N * H * D);
    float *qd = malloc(n * 4), *kd = malloc(n * 4), *vd = malloc(n * 4), *od = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        qd[i] = sinf((float)i * 0.37f);
        kd[i] = cosf((float)i * 0.11f);
        vd[i] = (float)(i % 7) - 3.f;
    }
    la_context *ctx;
    if (la_context_create(&ctx) != LA_OK) return 1;
    int64_t ne[4] = {B, N, H, D};
    la_tensor q, k, v, o;
    la_tensor_init(&q, qd, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&k, kd, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&v, vd, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&o, od, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = 1;
    la_status s = la_softmax_attention(&p, &q, &k, &v, &o, NULL, ctx);
    if (s != LA_OK) {
        fprintf(stderr, "longattn: %s\n", la_last_error());
        return 1;
    }
    /* token 0 attends only to itself under the causal mask: o[0] == v[0] */
    int ok = fabsf(od[0] - vd[0]) < 1e-6f;
    /* a wrong shape is refused with a message naming the argument */
    int64_t bad[4] = {B, N, H, D + 1};
    la_tensor_init(&v, vd, LA_F32, LA_DEVICE_CPU, 4, bad);
    ok = ok && la_softmax_attention(&p, &q, &k, &v, &o, NULL, ctx) == LA_ERR_SHAPE;
    printf("%s: %s\n", ok ? "ok" : "FAILED", la_last_error());
    la_context_destroy(ctx);
    free(qd); free(kd); free(vd); free(od);
    return ok ? 0 : 1;
}
