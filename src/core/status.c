/* Status codes, the thread-local error message, build information. */
#include <stdio.h>

#include "internal.h"

/* One message buffer per thread: no global mutable state shared between
 * threads, and a caller reads the message of its own last failed call. */
static _Thread_local char la_errbuf[1024];

la_status la_err(la_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(la_errbuf, sizeof la_errbuf, fmt, ap);
    va_end(ap);
    return s;
}

void la_err_clear(void) { la_errbuf[0] = '\0'; }

const char *la_last_error(void) { return la_errbuf; }

const char *la_status_string(la_status s) {
    switch (s) {
    case LA_OK: return "LA_OK";
    case LA_ERR_ARG: return "LA_ERR_ARG";
    case LA_ERR_SHAPE: return "LA_ERR_SHAPE";
    case LA_ERR_DTYPE: return "LA_ERR_DTYPE";
    case LA_ERR_NOMEM: return "LA_ERR_NOMEM";
    case LA_ERR_OVERFLOW: return "LA_ERR_OVERFLOW";
    case LA_ERR_UNSUPPORTED: return "LA_ERR_UNSUPPORTED";
    case LA_ERR_DEVICE: return "LA_ERR_DEVICE";
    case LA_ERR_IO: return "LA_ERR_IO";
    case LA_ERR_FORMAT: return "LA_ERR_FORMAT";
    case LA_ERR_INTERNAL: return "LA_ERR_INTERNAL";
    }
    return "LA_ERR_UNKNOWN";
}

#ifndef LA_BLAS_NAME
#define LA_BLAS_NAME "builtin"
#endif
#define LA_STR2(x) #x
#define LA_STR(x) LA_STR2(x)

const char *la_version(void) {
    return LA_STR(LONGATTN_VERSION_MAJOR) "." LA_STR(LONGATTN_VERSION_MINOR) "." LA_STR(
        LONGATTN_VERSION_PATCH);
}

const char *la_build_info(void) {
    return LA_STR(LONGATTN_VERSION_MAJOR) "." LA_STR(LONGATTN_VERSION_MINOR) "." LA_STR(
        LONGATTN_VERSION_PATCH) " blas=" LA_BLAS_NAME
#ifdef _OPENMP
                                " openmp=yes"
#else
                                " openmp=no"
#endif
#ifdef LA_WITH_CUDA
                                " cuda=yes"
#else
                                " cuda=no"
#endif
#ifdef LA_HAVE_LAPACK
                                " lapack=yes"
#else
                                " lapack=no"
#endif
        ;
}

#ifdef LA_WITH_CUDA
la_status la_cuda_probe(int *available); /* src/cuda/devmem.cu */
#endif

la_status la_cuda_available(int *available) {
    if (!available) return la_err(LA_ERR_ARG, "la_cuda_available: available is NULL");
    *available = 0;
#ifdef LA_WITH_CUDA
    return la_cuda_probe(available);
#else
    return LA_OK;
#endif
}
