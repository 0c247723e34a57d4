/* libFuzzer target: la_npy_parse must accept or reject any byte string
 * without crashing, leaking or reading out of bounds. (make fuzz) */
#include <stddef.h>
#include <stdint.h>

#include "core/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    la_npy_array a;
    if (la_npy_parse(data, size, "fuzz.npy", &a) == LA_OK) {
        /* touch every byte so ASan checks the allocation size */
        volatile uint8_t acc = 0;
        for (size_t i = 0; i < a.nbytes; i++) acc ^= ((const uint8_t *)a.data)[i];
        (void)acc;
        la_npy_free(&a);
    }
    return 0;
}
