/* Host-side helpers shared by the backward host emulators (dev/emu_*.cpp):
 * the xorshift generator of their random inputs (uniform in [-1, 1), a fixed
 * seed so every run draws the same cases) and round-to-nearest-even bf16
 * conversion, as the kernels' bf16 inputs and outputs are. */
#pragma once
#include <cstdint>
#include <cstring>

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
