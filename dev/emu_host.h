/* Host-side helpers shared by the backward host emulators (dev/emu_*.cpp):
 * the xorshift generator of their random inputs (uniform in [-1, 1), a fixed
 * seed so every run draws the same cases) and round-to-nearest-even bf16
 * conversion, as the kernels' bf16 inputs and outputs are; the relative
 * Frobenius errors the emulators report. */
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

static uint64_t rs = 88172645463325252ull;
static float ur() {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.f - 1.f;
}
static uint16_t f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* relative Frobenius error of a bf16 tensor g (g.b its storage, g.tb its
 * strided [B,N,H,D] view) against ref in logical [B,N,H,D] order */
template <class Tt> static double err(const Tt &g, const std::vector<float> &ref) {
    double a = 0, r = 0;
    const auto &t = g.tb;
    for (int64_t b = 0; b < t.ne[0]; b++)
        for (int64_t x = 0; x < t.ne[1]; x++)
            for (int64_t h = 0; h < t.ne[2]; h++)
                for (int64_t d = 0; d < t.ne[3]; d++) {
                    const double y = bf2f(g.b[b * t.nb[0] + x * t.nb[1] + h * t.nb[2] + d]);
                    const double z = ref[((b * t.ne[1] + x) * t.ne[2] + h) * t.ne[3] + d];
                    a += (y - z) * (y - z), r += z * z;
                }
    return sqrt(a / (r + 1e-300));
}
/* relative Frobenius error of y against z (fp32 values, differences in double) */
static double errf(const std::vector<float> &y, const std::vector<float> &z) {
    double a = 0, r = 0;
    for (size_t i = 0; i < y.size(); i++)
        a += ((double)y[i] - z[i]) * ((double)y[i] - z[i]), r += (double)z[i] * z[i];
    return sqrt(a / (r + 1e-300));
}
