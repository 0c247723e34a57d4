/* Device memory helpers (src/core/devmem.h) for the CLI and tests, plus the
 * device probe behind la_cuda_available. Every CUDA error becomes
 * LA_ERR_DEVICE with the CUDA error string. */
#include "common.cuh"
#include "core/devmem.h"

extern "C" {

la_status la_dev_malloc(void **ptr, size_t bytes) {
    if (!ptr) return la_err(LA_ERR_ARG, "la_dev_malloc: ptr is NULL");
    *ptr = nullptr;
    cudaError_t e = cudaMalloc(ptr, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        *ptr = nullptr;
        return la_err(e == cudaErrorMemoryAllocation ? LA_ERR_NOMEM : LA_ERR_DEVICE,
                      "cudaMalloc of %zu bytes failed: %s", bytes, cudaGetErrorString(e));
    }
    return LA_OK;
}

la_status la_dev_free(void *ptr) {
    if (!ptr) return LA_OK;
    LA_CU(cudaFree(ptr));
    return LA_OK;
}

la_status la_dev_upload(void *dst_dev, const void *src_host, size_t bytes) {
    if (bytes == 0) return LA_OK;
    LA_CU(cudaMemcpy(dst_dev, src_host, bytes, cudaMemcpyHostToDevice));
    return LA_OK;
}

la_status la_dev_download(void *dst_host, const void *src_dev, size_t bytes) {
    if (bytes == 0) return LA_OK;
    LA_CU(cudaMemcpy(dst_host, src_dev, bytes, cudaMemcpyDeviceToHost));
    return LA_OK;
}

la_status la_dev_memset(void *dst_dev, int byte, size_t bytes) {
    if (bytes == 0) return LA_OK;
    LA_CU(cudaMemset(dst_dev, byte, bytes));
    return LA_OK;
}

la_status la_dev_synchronize(void) {
    LA_CU(cudaDeviceSynchronize());
    return LA_OK;
}

/* 1 if at least one CUDA device is usable. No device (or no driver) is not an
 * error: it answers 0. */
la_status la_cuda_probe(int *available) {
    if (!available) return la_err(LA_ERR_ARG, "la_cuda_probe: available is NULL");
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    *available = n > 0;
    return LA_OK;
}

}  // extern "C"
