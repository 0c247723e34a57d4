/* la_memory_available: what this process may still allocate, from the
 * kernel's own accounting (MemAvailable, the memory cgroup, RLIMIT_AS), so
 * that a request the machine cannot hold fails with a message instead of
 * an OOM kill or a crawl through swap or allocator retries. Stateless:
 * every call reads the files afresh. */
#include "memcheck.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "internal.h"

/* First number after `key` in a "key value" text file; 0 if absent. */
static int read_keyed(const char *path, const char *key, unsigned long long *out) {
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    char line[256];
    size_t kl = strlen(key);
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl) == 0 && (line[kl] == ' ' || line[kl] == ':' || line[kl] == '\t')) {
            char *p = line + kl;
            while (*p == ' ' || *p == ':' || *p == '\t') p++;
            char *end;
            unsigned long long v = strtoull(p, &end, 10);
            if (end != p) {
                *out = v;
                found = 1;
            }
            break;
        }
    }
    fclose(f);
    return found;
}

/* A file holding one number ("max" = unlimited: returns 0). */
static int read_number(const char *path, unsigned long long *out) {
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    char buf[64] = {0};
    int ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok) return 0;
    char *end;
    unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf) return 0;
    *out = v;
    return 1;
}

static size_t min_size(size_t a, unsigned long long b) {
    return (unsigned long long)a < b ? a : (size_t)b;
}

/* The memory cgroup of this process: its path under the hierarchy for
 * v2 ("0::/path") or for the v1 memory controller ("N:memory:/path"). */
static int cgroup_path(int v2, char *out, size_t n) {
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f) return 0;
    char line[1024];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        const char *ctrl = c1 + 1;
        int match = v2 ? (strncmp(line, "0", 1) == 0 && line + 1 == c1 && *ctrl == '\0')
                       : (strstr(ctrl, "memory") != NULL);
        if (match && strlen(c2 + 1) < n) {
            snprintf(out, n, "%s", c2 + 1);
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* Limit minus usage plus inactive file cache, for the cgroup at `dir` and
 * each of its ancestors up to the mount point (the tightest wins). */
static size_t cgroup_avail(const char *mount, const char *cg, int v2, size_t avail) {
    char rel[1024];
    snprintf(rel, sizeof rel, "%s", cg);
    for (;;) {
        char dir[1200], path[1300];
        snprintf(dir, sizeof dir, "%s%s", mount, strcmp(rel, "/") == 0 ? "" : rel);
        unsigned long long lim = 0, use = 0, inact = 0;
        snprintf(path, sizeof path, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
        int have_lim = read_number(path, &lim);
        snprintf(path, sizeof path, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
        int have_use = read_number(path, &use);
        snprintf(path, sizeof path, "%s/memory.stat", dir);
        read_keyed(path, v2 ? "inactive_file" : "total_inactive_file", &inact);
        /* v1 reports "no limit" as a huge page-aligned number */
        if (have_lim && have_use && lim > 0 && lim < (1ull << 60)) {
            unsigned long long free_b = lim > use ? lim - use : 0;
            free_b += inact < use ? inact : use;
            if (free_b > lim) free_b = lim;
            avail = min_size(avail, free_b);
        }
        char *slash = strrchr(rel, '/');
        if (!slash || slash == rel) {
            if (strcmp(rel, "/") == 0 || !slash) break;
            snprintf(rel, sizeof rel, "/");
            continue;
        }
        *slash = '\0';
    }
    return avail;
}

la_status la_memory_available(size_t *bytes) {
    if (!bytes) return la_err(LA_ERR_ARG, "la_memory_available: bytes is NULL");
    size_t avail = SIZE_MAX;
    unsigned long long kb = 0;
    if (read_keyed("/proc/meminfo", "MemAvailable", &kb)) avail = min_size(avail, kb * 1024ull);
    char cg[1024];
    if (cgroup_path(1, cg, sizeof cg)) avail = cgroup_avail("/sys/fs/cgroup", cg, 1, avail);
    if (cgroup_path(0, cg, sizeof cg)) avail = cgroup_avail("/sys/fs/cgroup/memory", cg, 0, avail);
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        unsigned long long vm_pages = 0;
        FILE *f = fopen("/proc/self/statm", "re");
        if (f) {
            if (fscanf(f, "%llu", &vm_pages) != 1) vm_pages = 0;
            fclose(f);
        }
        const unsigned long long used = vm_pages * (unsigned long long)sysconf(_SC_PAGESIZE);
        avail = min_size(avail, rl.rlim_cur > used ? rl.rlim_cur - used : 0);
    }
    *bytes = avail;
    return LA_OK;
}

la_status la_mem_check(size_t bytes, const char *what) {
    size_t avail = SIZE_MAX;
    la_memory_available(&avail);
    if (bytes <= avail) return LA_OK;
    return la_err(LA_ERR_NOMEM, "%s: needs %.2f GiB, %.2f GiB available", what ? what : "allocation",
                  (double)bytes / 1073741824.0, (double)avail / 1073741824.0);
}
