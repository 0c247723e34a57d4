/* Memory-availability check before large host allocations (internal; the
 * availability itself is the public la_memory_available). */
#ifndef LA_CORE_MEMCHECK_H
#define LA_CORE_MEMCHECK_H
#include <stddef.h>

#include "longattn.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Allocations from this size up are checked by la_ws_alloc: reading the
 * /proc and cgroup files costs tens of microseconds, nothing beside an
 * allocation this large, and smaller ones cannot exhaust a machine alone. */
#define LA_MEMCHECK_MIN_BYTES ((size_t)64 << 20)

/* Host memory this process can still allocate, in bytes: the least of
 * MemAvailable (/proc/meminfo), the memory cgroup's limit minus its usage
 * (v2 or v1; inactive file cache counted as free) and the address-space
 * limit (RLIMIT_AS, `ulimit -v`) minus the address space in use. SIZE_MAX
 * when none of them can be read. Stateless: reads the files on each call. */

/* LA_OK when `bytes` fit in la_memory_available; else LA_ERR_NOMEM with
 * "WHAT: needs X GiB, Y GiB available". */
la_status la_mem_check(size_t bytes, const char *what);

#ifdef __cplusplus
}
#endif
#endif
