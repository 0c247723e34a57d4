/* Device staging for `--device cuda`, through the CUDA runtime directly:
 * the library's device helpers are internal, the CLI keeps its own. A build
 * without the CUDA backend answers every call with a clear message. */
#include <stdio.h>

#include "cli.h"

#ifdef LA_WITH_CUDA
#include <cuda_runtime_api.h>

static la_status cu(cudaError_t e, const char *what, size_t bytes, char *msg, size_t n) {
    if (e == cudaSuccess) return LA_OK;
    cudaGetLastError();
    snprintf(msg, n, "%s of %zu bytes failed: %s", what, bytes, cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? LA_ERR_NOMEM : LA_ERR_DEVICE;
}

la_status cli_dev_malloc(void **ptr, size_t bytes, char *msg, size_t n) {
    *ptr = NULL;
    la_status s = cu(cudaMalloc(ptr, bytes ? bytes : 1), "cudaMalloc", bytes, msg, n);
    if (s != LA_OK) *ptr = NULL;
    return s;
}
void cli_dev_free(void *ptr) {
    if (ptr) cudaFree(ptr);
}
la_status cli_dev_upload(void *dst, const void *src, size_t bytes, char *msg, size_t n) {
    return bytes ? cu(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "upload", bytes, msg, n) : LA_OK;
}
la_status cli_dev_download(void *dst, const void *src, size_t bytes, char *msg, size_t n) {
    return bytes ? cu(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "download", bytes, msg, n) : LA_OK;
}
la_status cli_dev_memset(void *dst, int byte, size_t bytes, char *msg, size_t n) {
    return bytes ? cu(cudaMemset(dst, byte, bytes), "cudaMemset", bytes, msg, n) : LA_OK;
}
void cli_dev_why(char *msg, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(msg, n, "%s", cudaGetErrorString(e));
    } else {
        snprintf(msg, n, "the CUDA runtime sees %d device(s)", count);
    }
}

la_status cli_dev_synchronize(char *msg, size_t n) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) return LA_OK;
    cudaGetLastError();
    snprintf(msg, n, "%s", cudaGetErrorString(e));
    return LA_ERR_DEVICE;
}
#else
static la_status no_cuda(char *msg, size_t n) {
    snprintf(msg, n, "this build of longattn has no CUDA backend (nvcc was not found when it was built)");
    return LA_ERR_UNSUPPORTED;
}
la_status cli_dev_malloc(void **ptr, size_t bytes, char *msg, size_t n) {
    (void)bytes;
    *ptr = NULL;
    return no_cuda(msg, n);
}
void cli_dev_free(void *ptr) { (void)ptr; }
la_status cli_dev_upload(void *d, const void *s, size_t b, char *msg, size_t n) {
    (void)d, (void)s, (void)b;
    return no_cuda(msg, n);
}
la_status cli_dev_download(void *d, const void *s, size_t b, char *msg, size_t n) {
    (void)d, (void)s, (void)b;
    return no_cuda(msg, n);
}
la_status cli_dev_memset(void *d, int v, size_t b, char *msg, size_t n) {
    (void)d, (void)v, (void)b;
    return no_cuda(msg, n);
}
la_status cli_dev_synchronize(char *msg, size_t n) { return no_cuda(msg, n); }
void cli_dev_why(char *msg, size_t n) { no_cuda(msg, n); }
#endif
