/* Part of dev/emu_causal_tc.cpp (included there, before the kernels): the
 * host's wgmma for the causal MHLA mixing kernel mct_mixw_kernel. */
/* wgmma m64n256k16 bf16 / fp16, both operands from shared memory (the
 * mixing's mct_mixw_kernel, mct_mixw_f16_kernel): the descriptors hold the host address, and each thread
 * computes its own accumulators (rows 16(warp % 4) + g, + 8; columns 8j +
 * 2c, + 1) from the operand layouts of ptx.cuh's descriptors: A K-major,
 * B N-major (64-column blocks 8192 bytes apart), 8-row groups 1024 bytes
 * apart, rows of 128 bytes, the 128-byte swizzle (address bits 4-6 XOR bits
 * 7-9, so the atoms must be 1024-byte aligned). */
static inline uint64_t la_wg_desc_ptr(const void *p) { return (uint64_t)(uintptr_t)p; }
static inline uint64_t la_wg_desc_nmajor(const void *p) { return (uint64_t)(uintptr_t)p; }
template <float (*CV)(uint32_t)> static inline void emu_wg_m64n256k16_ss(float (*o)[4], uint64_t da, uint64_t db) {
    const int w = (t_tid / 32) % 4, lane = t_tid % 32, g = lane / 4, c = lane % 4;
    auto at = [](uint64_t a) {
        a ^= ((a >> 7) & 7) << 4;
        if ((const unsigned char *)a < emu_sm_lo || (const unsigned char *)a + 2 > emu_sm_hi) emu_errors++;
        return CV(*(const uint16_t *)a);
    };
    if ((da | db) & 15) emu_errors++;
    for (int j = 0; j < 32; j++)
        for (int e = 0; e < 4; e++) {
            const int m = 16 * w + g + 8 * (e >> 1), n = 8 * j + 2 * c + (e & 1);
            float sum = 0.f;
            for (int k = 0; k < 16; k++)
                sum += at(da + (m / 8) * 1024 + (m % 8) * 128 + 2 * k) *
                       at(db + (n / 64) * 8192 + (k / 8) * 1024 + (k % 8) * 128 + 2 * (n % 64));
            o[j][e] += sum;
        }
}
static inline void la_wg_m64n256k16_bf16_ss(float (*o)[4], uint64_t da, uint64_t db) { emu_wg_m64n256k16_ss<emu_bf>(o, da, db); }
/* the same with fp16 operands (variant mma_f16s: mct_mixw_f16_kernel) */
static inline void la_wg_m64n256k16_f16_ss(float (*o)[4], uint64_t da, uint64_t db) { emu_wg_m64n256k16_ss<emu_h>(o, da, db); }
