/* Internal entry points of the CUDA backend. Each has the signature of the
 * public operator it implements; src/ops/<op>.c calls it (under
 * LA_WITH_CUDA) after validating the views, when the tensors are on CUDA. */
#ifndef LA_CUDA_OPS_H
#define LA_CUDA_OPS_H
#include "longattn.h"
#ifdef __cplusplus
extern "C" {
#endif
/* Declarations are added here as kernels land (one .cu per op). */
#ifdef __cplusplus
}
#endif
#endif
