/*
 * A transform fused into the gather: each feature value (v - mean) * scale as it is
 * copied, NaN replaced by its column's fill, and the first row holding a NaN noted. Python's side
 * and its pure NumPy twin are exactbatch.kernels.TransformKernel (same arithmetic, so
 * both backends give the same bits).
 */
#ifndef EXACTBATCH_CORE_TRANSFORM_H
#define EXACTBATCH_CORE_TRANSFORM_H

#include "_core.h"

typedef struct {
    PyObject_HEAD
    Py_ssize_t d;         /* features: the width of mean and scale */
    double *mean, *scale; /* d values each (scale = 1/sd, so a multiply, not a divide) */
    double *fill;         /* d values: what a NaN of each column becomes, when fill_on
                             (a NaN fill: that column keeps its NaN) */
    int fill_on;
} TransformObject;

extern PyTypeObject TransformType;

/* One row of w features from src (float64) into dst (float64, or float32 when f32) as
 * (v - mean) * scale, a NaN replaced by its column's fill when t has fills (a column
 * whose fill is NaN keeps the NaN the arithmetic made). 1 when the row held a
 * NaN (a NaN out is a NaN in: mean and scale are finite, scale > 0), else 0. No
 * multiply-add is formed ((v - m) * s has none), so the bits are NumPy's. */
/* a when flag (0 or 1), else b: a bitwise select, which vectorises where a ?: on
 * doubles followed by a cast does not. */
static inline double pick(int64_t flag, double a, double b)
{
    uint64_t ua, ub, mask = (uint64_t)0 - (uint64_t)flag;
    memcpy(&ua, &a, 8);
    memcpy(&ub, &b, 8);
    ub = (ua & mask) | (ub & ~mask);
    memcpy(&b, &ub, 8);
    return b;
}

static inline int transform_row(char *restrict dst, const char *restrict src, Py_ssize_t w,
                                int f32, const TransformObject *t)
{
    /* Branch-free loops, one per output type and fill, so that each vectorises (a
     * 64-bit NaN flag a lane; a NaN kept is the very NaN the arithmetic made, as
     * NumPy's is). */
    const double *restrict m = t->mean, *restrict s = t->scale, *restrict f = t->fill;
    int64_t nan = 0;
    if (f32 && t->fill_on) {
        float *restrict o = (float *)dst;
        for (Py_ssize_t c = 0; c < w; c++) {
            double v;
            memcpy(&v, src + 8 * c, 8);
            v = (v - m[c]) * s[c];
            int64_t isnan_ = v != v;
            nan |= isnan_;
            o[c] = (float)pick(isnan_ & (int64_t)(f[c] == f[c]), f[c], v);
        }
    } else if (f32) {
        float *restrict o = (float *)dst;
        for (Py_ssize_t c = 0; c < w; c++) {
            double v;
            memcpy(&v, src + 8 * c, 8);
            v = (v - m[c]) * s[c];
            nan |= v != v;
            o[c] = (float)v;
        }
    } else if (t->fill_on) {
        double *restrict o = (double *)dst;
        for (Py_ssize_t c = 0; c < w; c++) {
            double v;
            memcpy(&v, src + 8 * c, 8);
            v = (v - m[c]) * s[c];
            int64_t isnan_ = v != v;
            nan |= isnan_;
            o[c] = pick(isnan_ & (int64_t)(f[c] == f[c]), f[c], v);
        }
    } else {
        double *restrict o = (double *)dst;
        for (Py_ssize_t c = 0; c < w; c++) {
            double v;
            memcpy(&v, src + 8 * c, 8);
            v = (v - m[c]) * s[c];
            nan |= v != v;
            o[c] = v;
        }
    }
    return nan != 0;
}

/* read()'s optional fourth argument: None (*t = NULL), or a Transform of d features
 * (*t set). 0, or -1 with a TypeError/ValueError set. */
int parse_transform(PyObject *o, Py_ssize_t d, const TransformObject **t);

PyObject *transform_new(PyObject *mod, PyObject *args);
int transform_ready(PyObject *module);

#endif
