/* A float32 shuffle buffer's gather (see _core_rows32.h). */
#include "_core_rows32.h"

#include "_core_rows.h" /* WIDE, PREFETCH */
#include "_core_split.h"

/* A float32 2-D array whose rows are each contiguous, one stride apart (a buffer's x
 * or y: columns of its C-contiguous whole rows); *stride: bytes from one row to the
 * next. 0, or -1 with an exception naming it (nothing held). */
static int rows_of(PyObject *o, Py_buffer *b, const char *name, Py_ssize_t *stride)
{
    if (PyObject_GetBuffer(o, b, PyBUF_STRIDES | PyBUF_FORMAT) != 0)
        return -1;
    const char *f = plain_format(b);
    if (b->ndim != 2 || f[0] != 'f' || f[1] || b->itemsize != 4) {
        PyErr_Format(PyExc_TypeError, "%s must be a 2-D float32 array", name);
        PyBuffer_Release(b);
        return -1;
    }
    Py_ssize_t n = b->shape[0], w = b->shape[1];
    *stride = n > 1 ? b->strides[0] : 4 * w;
    if ((w > 1 && b->strides[1] != 4) || *stride < 4 * w) {
        PyErr_Format(PyExc_ValueError, "%s must hold each row's values side by side, rows "
                     "apart in order (C-contiguous, or columns of a C-contiguous array)", name);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

/* A writeable C-contiguous float32 (r, w) array. */
static int out_of(PyObject *o, Py_buffer *b, const char *name, Py_ssize_t r, Py_ssize_t w)
{
    if (PyObject_GetBuffer(o, b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return -1;
    const char *f = plain_format(b);
    if (f[0] != 'f' || f[1] || b->itemsize != 4 || b->len != 4 * r * w) {
        PyErr_Format(PyExc_ValueError, "%s must be a float32 array of (%zd, %zd) values", name,
                     r, w);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

typedef struct {
    const char *xb, *yb;
    Py_ssize_t xs, ys, d, l;
    const int64_t *ix;
    char *ox, *oy;
} Take32;

/* Rows ix[lo..hi) into the outputs' rows lo..hi: each row's x then its y (a buffer's
 * row is one fetch for both), wide rows prefetched PREFETCH rows ahead (a shuffled
 * batch's rows miss the cache). */
WIDE static void take_part(void *ctx, int k, Py_ssize_t lo, Py_ssize_t hi)
{
    (void)k;
    const Take32 *t = ctx;
    Py_ssize_t bx = 4 * t->d, by = 4 * t->l;
    int wide = t->d + t->l > 8;
    for (Py_ssize_t i = lo; i < hi; i++) {
        if (wide && i + PREFETCH < hi) {
            const char *ahead = t->xb + t->ix[i + PREFETCH] * t->xs;
            __builtin_prefetch(ahead);
            __builtin_prefetch(ahead + bx + by - 1); /* (y follows x in a buffer's row) */
        }
        if (bx)
            memcpy(t->ox + i * bx, t->xb + t->ix[i] * t->xs, (size_t)bx);
        if (by == 4)
            memcpy(t->oy + i * 4, t->yb + t->ix[i] * t->ys, 4);
        else if (by)
            memcpy(t->oy + i * by, t->yb + t->ix[i] * t->ys, (size_t)by);
    }
}

PyObject *take_rows32(PyObject *mod, PyObject *args)
{
    PyObject *x, *y, *rows, *ox, *oy;
    if (!PyArg_ParseTuple(args, "OOOOO:take_rows32", &x, &y, &rows, &ox, &oy))
        return NULL;
    Py_buffer xb = {0}, yb = {0}, ib = {0}, bx = {0}, by = {0};
    PyObject *res = NULL;
    Take32 t;
    if (rows_of(x, &xb, "x", &t.xs) < 0)
        return NULL;
    if (rows_of(y, &yb, "y", &t.ys) < 0)
        goto done;
    Py_ssize_t n = xb.shape[0];
    t.d = xb.shape[1];
    t.l = yb.shape[1];
    if (yb.shape[0] != n) {
        PyErr_SetString(PyExc_ValueError, "x and y must have the same number of rows");
        goto done;
    }
    if (PyObject_GetBuffer(rows, &ib, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        goto done;
    const char *f = plain_format(&ib);
    if (ib.ndim != 1 || !f[0] || !strchr("lq", f[0]) || f[1] || ib.itemsize != 8) {
        PyErr_SetString(PyExc_TypeError, "rows must be a 1-D int64 array");
        goto done;
    }
    Py_ssize_t r = ib.len / 8;
    if (out_of(ox, &bx, "out_x", r, t.d) < 0 || out_of(oy, &by, "out_y", r, t.l) < 0)
        goto done;
    t.ix = ib.buf;
    for (Py_ssize_t i = 0; i < r; i++) /* every row checked before any is copied */
        if ((uint64_t)t.ix[i] >= (uint64_t)n) {
            PyErr_Format(PyExc_IndexError, "row %lld out of range for n=%zd rows",
                         (long long)t.ix[i], n);
            goto done;
        }
    t.xb = xb.buf;
    t.yb = yb.buf;
    t.ox = bx.buf;
    t.oy = by.buf;
    int parts = split_count(0, r, 4 * (t.d + t.l));
    Py_BEGIN_ALLOW_THREADS
    if (parts > 1)
        split_run(parts, r, take_part, &t);
    else
        take_part(&t, 0, 0, r);
    Py_END_ALLOW_THREADS
    res = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&xb);
    PyBuffer_Release(&yb);
    PyBuffer_Release(&ib);
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
    return res;
}
