/* CPU softmax attention (SPEC §1): online softmax over key tiles. */
#ifndef LA_SOFTMAX_CPU_H
#define LA_SOFTMAX_CPU_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tile sizes: a task owns LA_SOFTMAX_BQ query rows of one head and walks the
 * keys LA_SOFTMAX_BK at a time (a multiple of LA_SOFTMAX_KT, the width of
 * the packed transposed key tiles). The score tile BQ×BK stays in L2. */
#ifndef LA_SOFTMAX_BQ
#define LA_SOFTMAX_BQ 192
#endif
#ifndef LA_SOFTMAX_BK
#define LA_SOFTMAX_BK 256
#endif
#define LA_SOFTMAX_KT 128
#if LA_SOFTMAX_BK % LA_SOFTMAX_KT != 0
#error "LA_SOFTMAX_BK must be a multiple of LA_SOFTMAX_KT"
#endif

/* Views already validated by la_softmax_attention (src/ops/softmax.c):
 * q [B,Nq,H,D], k [B,Nk,Hk,D], v [B,Nk,Hk,Dv], out [B,Nq,H,Dv], lse [B,Nq,H]
 * or NULL; all on the CPU, any float dtype, any strides; scale resolved. */
la_status la_softmax_cpu(int causal, float scale, const la_tensor *q, const la_tensor *k,
                         const la_tensor *v, la_tensor *out, la_tensor *lse, la_context *ctx);

/* exp(x) for x <= 0 in float, vectorizable (Cephes polynomial, ~1 ulp);
 * exactly 0 below -87.3 (so exp(-inf) = 0), NaN stays NaN. Exposed for the
 * tests. */
static inline float la_expf_nonpos(float x) {
    const float LOG2E = 1.44269504088896341f, MAGIC = 12582912.f; /* 1.5·2^23 */
    float xc = x < -87.3f ? -87.3f : x;     /* NaN compares false: stays NaN */
    xc = xc > 88.f ? 88.f : xc;
    /* n = round(x / ln 2) without a float->int conversion: the low mantissa
     * bits of t hold n in two's complement. */
    float t = xc * LOG2E + MAGIC;
    float n = t - MAGIC;
    uint32_t tb;
    memcpy(&tb, &t, 4);
    float r = xc - n * 0.693359375f;       /* Cody–Waite: ln2 = hi + lo */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.f;
    uint32_t eb = (tb - 0x4B400000u + 127u) << 23; /* 2^n as float bits */
    float s;
    memcpy(&s, &eb, 4);
    float y = p * s;
    return x < -87.3f ? 0.f : y;
}

#ifdef __cplusplus
}
#endif
#endif
