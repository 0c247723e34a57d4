/* Tensor views: construction, validation, strided gather/scatter. */
#include <stdio.h>

#include "internal.h"

size_t la_dtype_size(la_dtype dt) {
    switch (dt) {
    case LA_F32: return 4;
    case LA_F64: return 8;
    case LA_BF16: return 2;
    case LA_I32: return 4;
    case LA_F16: return 2;
    case LA_FP8_E4M3: return 1;
    }
    return 0;
}

const char *la_dtype_name(la_dtype dt) {
    switch (dt) {
    case LA_F32: return "f32";
    case LA_F64: return "f64";
    case LA_BF16: return "bf16";
    case LA_I32: return "i32";
    case LA_F16: return "f16";
    case LA_FP8_E4M3: return "fp8_e4m3";
    }
    return "unknown";
}

la_status la_tensor_init_strided(la_tensor *t, void *data, la_dtype dtype, la_device dev,
                                 int ndim, const int64_t *ne, const int64_t *nb) {
    if (!t) return la_err(LA_ERR_ARG, "la_tensor_init: t is NULL");
    if (ndim < 1 || ndim > LA_MAX_DIMS)
        return la_err(LA_ERR_SHAPE, "la_tensor_init: ndim %d not in 1..%d", ndim, LA_MAX_DIMS);
    if (!ne) return la_err(LA_ERR_ARG, "la_tensor_init: ne is NULL");
    if (la_dtype_size(dtype) == 0) return la_err(LA_ERR_DTYPE, "la_tensor_init: unknown dtype %d", (int)dtype);
    memset(t, 0, sizeof *t);
    t->data = data;
    t->dtype = dtype;
    t->device = dev;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (ne[i] < 0) return la_err(LA_ERR_SHAPE, "la_tensor_init: extent %d is negative (%lld)", i, (long long)ne[i]);
        t->ne[i] = ne[i];
    }
    if (nb) {
        for (int i = 0; i < ndim; i++) t->nb[i] = nb[i];
    } else {
        int64_t s = 1;
        for (int i = ndim - 1; i >= 0; i--) {
            t->nb[i] = s;
            if (ne[i] > 0 && __builtin_mul_overflow(s, ne[i], &s))
                return la_err(LA_ERR_OVERFLOW, "la_tensor_init: element count overflows");
        }
    }
    return LA_OK;
}

la_status la_tensor_init(la_tensor *t, void *data, la_dtype dtype, la_device dev, int ndim,
                         const int64_t *ne) {
    return la_tensor_init_strided(t, data, dtype, dev, ndim, ne, NULL);
}

const char *la_shape_str(const la_tensor *t, char *buf, size_t n) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < t->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)t->ne[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

int64_t la_numel(const la_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->ne[i];
    return n;
}

static const char *dev_name(la_device d) { return d == LA_DEVICE_CUDA ? "cuda" : "cpu"; }

la_status la_check_tensor(const la_tensor *t, const char *name, int ndim, unsigned dtype_mask,
                          la_device dev, bool allow_empty) {
    char sb[96];
    if (!t) return la_err(LA_ERR_ARG, "%s: tensor is NULL", name);
    if (t->ndim != ndim) {
        if (t->ndim < 1 || t->ndim > LA_MAX_DIMS)
            return la_err(LA_ERR_SHAPE, "%s: rank %d, expected %d", name, t->ndim, ndim);
        return la_err(LA_ERR_SHAPE, "%s: rank %d %s, expected rank %d", name, t->ndim,
                      la_shape_str(t, sb, sizeof sb), ndim);
    }
    if ((unsigned)t->dtype >= 32 || !(dtype_mask & LA_DT(t->dtype)))
        return la_err(LA_ERR_DTYPE, "%s: dtype %s not supported here", name, la_dtype_name(t->dtype));
    if (t->device != dev)
        return la_err(LA_ERR_DEVICE, "%s: on %s, expected %s (all tensors of one call share a device)",
                      name, dev_name(t->device), dev_name(dev));
    int64_t span = 0, count = 1;
    for (int i = 0; i < ndim; i++) {
        if (t->ne[i] < 0 || (t->ne[i] == 0 && !allow_empty))
            return la_err(LA_ERR_SHAPE, "%s: extent %d is %lld in %s (must be > 0)", name, i,
                          (long long)t->ne[i], la_shape_str(t, sb, sizeof sb));
        if (t->nb[i] < 0)
            return la_err(LA_ERR_SHAPE, "%s: negative stride %lld on dim %d", name, (long long)t->nb[i], i);
        int64_t term;
        if (t->ne[i] > 0 && (__builtin_mul_overflow(t->ne[i] - 1, t->nb[i], &term) ||
                             __builtin_add_overflow(span, term, &span)))
            return la_err(LA_ERR_OVERFLOW, "%s: addressed span of %s overflows", name,
                          la_shape_str(t, sb, sizeof sb));
        if (__builtin_mul_overflow(count, t->ne[i], &count))
            return la_err(LA_ERR_OVERFLOW, "%s: element count of %s overflows", name,
                          la_shape_str(t, sb, sizeof sb));
    }
    int64_t bytes;
    if (__builtin_mul_overflow(span + 1, (int64_t)la_dtype_size(t->dtype), &bytes))
        return la_err(LA_ERR_OVERFLOW, "%s: byte span of %s overflows", name, la_shape_str(t, sb, sizeof sb));
    if (!t->data && count > 0) return la_err(LA_ERR_ARG, "%s: data pointer is NULL", name);
    return LA_OK;
}

la_status la_check_dim(const la_tensor *t, const char *name, int axis, int64_t want,
                       const char *why) {
    char sb[96];
    if (t->ne[axis] != want)
        return la_err(LA_ERR_SHAPE, "%s: dim %d is %lld in %s, expected %lld%s%s", name, axis,
                      (long long)t->ne[axis], la_shape_str(t, sb, sizeof sb), (long long)want,
                      why ? " " : "", why ? why : "");
    return LA_OK;
}

static void span_bytes(const la_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    int64_t span = 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->ne[i] > 0) span += (t->ne[i] - 1) * t->nb[i];
    *lo = (uintptr_t)t->data;
    *hi = *lo + (uintptr_t)((span + 1) * (int64_t)la_dtype_size(t->dtype));
}

bool la_tensors_overlap(const la_tensor *a, const la_tensor *b) {
    if (!a || !b || !a->data || !b->data) return false;
    if (la_numel(a) == 0 || la_numel(b) == 0) return false;
    uintptr_t alo, ahi, blo, bhi;
    span_bytes(a, &alo, &ahi);
    span_bytes(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}

void la_gather_bnhd_rows(const la_tensor *t, int64_t b, int64_t h, int64_t n0, int64_t n,
                         float *dst, int64_t ld) {
    const int64_t D = t->ne[3];
    if (t->dtype == LA_F32 && t->nb[3] == 1) {
        const float *src = (const float *)t->data;
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + i * ld, src + la_off4(t, b, n0 + i, h, 0), (size_t)D * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t base = la_off4(t, b, n0 + i, h, 0);
        for (int64_t d = 0; d < D; d++) dst[i * ld + d] = la_load_f32(t, base + d * t->nb[3]);
    }
}

void la_scatter_bnhd_rows(la_tensor *t, int64_t b, int64_t h, int64_t n0, int64_t n,
                          const float *src, int64_t ld) {
    const int64_t D = t->ne[3];
    if (t->dtype == LA_F32 && t->nb[3] == 1) {
        float *d = (float *)t->data;
        for (int64_t i = 0; i < n; i++)
            memcpy(d + la_off4(t, b, n0 + i, h, 0), src + i * ld, (size_t)D * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t base = la_off4(t, b, n0 + i, h, 0);
        for (int64_t d = 0; d < D; d++) la_store_f32(t, base + d * t->nb[3], src[i * ld + d]);
    }
}

void la_gather_bnhd(const la_tensor *t, int64_t b, int64_t h, float *dst, int64_t ld) {
    la_gather_bnhd_rows(t, b, h, 0, t->ne[1], dst, ld);
}

void la_scatter_bnhd(la_tensor *t, int64_t b, int64_t h, const float *src, int64_t ld) {
    la_scatter_bnhd_rows(t, b, h, 0, t->ne[1], src, ld);
}

static const char *const feature_names[] = {"identity", "relu", "relu_eps", "relu1", "elu1"};

la_status la_feature_from_name(const char *name, la_feature *out) {
    if (!name || !out) return la_err(LA_ERR_ARG, "la_feature_from_name: NULL argument");
    for (int i = 0; i < 5; i++)
        if (strcmp(name, feature_names[i]) == 0) {
            *out = (la_feature)i;
            return LA_OK;
        }
    return la_err(LA_ERR_ARG, "feature: unknown feature map '%s' (identity, relu, relu_eps, relu1, elu1)", name);
}

const char *la_feature_name(la_feature f) {
    return ((unsigned)f < 5) ? feature_names[f] : "unknown";
}

la_status la_check_feature(la_feature f, const char *name) {
    if ((unsigned)f >= 5) return la_err(LA_ERR_ARG, "%s: unknown feature map %d", name, (int)f);
    return LA_OK;
}
