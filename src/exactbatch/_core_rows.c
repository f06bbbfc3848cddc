/* Rows (see _core_rows.h): Rows objects over memory or a file's mapping, a read's
 * arguments and result; the copy itself is _core_copy.c's. */
#include "_core_rows.h"

#include "_core_guard.h"
#include "_core_hand.h"
#include "_core_split.h"

/* ------------------------------------------------------------------ Rows objects */

int row_size(const char *who, Py_ssize_t d, Py_ssize_t l, Py_ssize_t *row)
{
    Py_ssize_t w;
    if (__builtin_add_overflow(d, l, &w) || __builtin_mul_overflow(w, (Py_ssize_t)8, row)) {
        PyErr_Format(PyExc_OverflowError, "%s: a row of d=%zd features and l=%zd labels is "
                     "more than %zd bytes", who, d, l, PY_SSIZE_T_MAX);
        return -1;
    }
    return 0;
}

static int out_buffer(PyObject *o, Py_buffer *b, const char *name)
{
    if (PyObject_GetBuffer(o, b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return -1;
    const char *f = plain_format(b);
    if (!((f[0] == 'd' && b->itemsize == 8) || (f[0] == 'f' && b->itemsize == 4)) || f[1]) {
        PyErr_Format(PyExc_TypeError, "%s must hold float64 or float32; got format '%s'",
                     name, b->format ? b->format : "B");
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(read_doc,
"read(rows, out_x, out_y, transform=None, threads=None)\n--\n\n"
"Copy rows ``rows`` (a slice, or a 1-D int32/int64 array, any order, repeats\n"
"allowed) into ``out_x`` (r, d) and ``out_y`` (r, l), both float64 or both\n"
"float32 (or out_y float64), C-contiguous. With a ``transform`` (a Transform),\n"
"x goes through it as it is copied, and the result is the position of the first\n"
"row whose features held a NaN, or -1 (else None). IndexError for a row outside\n"
"[0, n); FileChanged when the file changed (or the copy faulted). ``threads``:\n"
"how many threads copy the rows, each a range of them (None: the object's\n"
"``threads``); the batch is the same bytes whatever the count.");

PyObject *read_result(const Job *j)
{
    return j->tf == NULL ? Py_NewRef(Py_None) : PyLong_FromSsize_t(j->nan);
}

/* The rows argument of read(): a slice of [0, n) or a 1-D int32/int64 buffer (then
 * held in *ib: release it, also after an error). 0, or -1 with an exception set. */
int parse_rows(PyObject *o, Py_ssize_t n, Job *j, Py_buffer *ib)
{
    if (PySlice_Check(o)) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(o, &start, &stop, &step) < 0)
            return -1;
        if (step != 1 || start < 0 || stop > n || start > stop) {
            PyErr_Format(PyExc_IndexError, "rows %zd:%zd out of range for n=%zd rows", start,
                         stop, n);
            return -1;
        }
        j->start = start;
        j->r = stop - start;
        return 0;
    }
    if (PyObject_GetBuffer(o, ib, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return -1;
    const char *f = plain_format(ib);
    if (ib->ndim != 1 || !f[0] || !strchr("ilq", f[0]) || f[1] ||
        (ib->itemsize != 4 && ib->itemsize != 8)) {
        PyErr_Format(PyExc_TypeError, "rows must be a 1-D int32 or int64 array; got format "
                     "'%s' with %d dimensions", ib->format ? ib->format : "B", ib->ndim);
        return -1;
    }
    j->idx = ib->buf;
    j->isz = (int)ib->itemsize;
    j->r = ib->len / ib->itemsize;
    return 0;
}

/* read()'s out_x and out_y for j->r rows of d and l values: held in *bx and *by
 * (release both) on success. 0, or -1 with an exception set (nothing held). */
int parse_outs(PyObject *ox, PyObject *oy, Py_ssize_t d, Py_ssize_t l, Job *j, Py_buffer *bx,
               Py_buffer *by)
{
    if (out_buffer(ox, bx, "out_x") < 0)
        return -1;
    if (out_buffer(oy, by, "out_y") < 0) {
        PyBuffer_Release(bx);
        return -1;
    }
    Py_ssize_t want_x, want_y; /* bytes; an overflow is a size no buffer has */
    int over = __builtin_mul_overflow(j->r, d, &want_x) ||
               __builtin_mul_overflow(want_x, bx->itemsize, &want_x) ||
               __builtin_mul_overflow(j->r, l, &want_y) ||
               __builtin_mul_overflow(want_y, by->itemsize, &want_y);
    if (bx->itemsize != by->itemsize && by->itemsize != 8) {
        /* (float64 labels under float32 features: class labels converted exactly after) */
        PyErr_SetString(PyExc_TypeError, "out_x and out_y must have the same dtype (or out_y "
                                         "float64)");
    } else if (over || bx->len != want_x || by->len != want_y) {
        PyErr_Format(PyExc_ValueError, "out_x and out_y must hold (%zd, %zd) and (%zd, %zd) "
                     "values", j->r, d, j->r, l);
    } else {
        j->ox = bx->buf;
        j->oy = by->buf;
        j->f32 = bx->itemsize == 4;
        j->f32y = by->itemsize == 4;
        return 0;
    }
    PyBuffer_Release(bx);
    PyBuffer_Release(by);
    return -1;
}

PyObject *rows_changed(PyObject *hook, int rc)
{
    PyErr_SetString(FileChanged, rc == -1 ? "a copy from the file's mapping faulted (truncated?)"
                                          : "the file's size, modification time or ctime "
                                            "changed");
    return changed_through(hook);
}

PyObject *changed_through(PyObject *hook)
{
    if (hook == NULL)
        return NULL;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb != NULL && v != NULL)
        PyException_SetTraceback(v, tb);
    PyObject *r = v == NULL ? NULL : PyObject_CallOneArg(hook, v);
    if (r != NULL || v == NULL) { /* (returned: FileChanged stands) */
        Py_XDECREF(r);
        PyErr_Restore(t, v, tb);
        return NULL;
    }
    /* What the hook raised, FileChanged its context, as a raise in an `except
     * FileChanged:` block chains them (an exception being handled where the call was
     * made, the hook's error's context so far, becomes FileChanged's). */
    PyObject *t2, *v2, *tb2;
    PyErr_Fetch(&t2, &v2, &tb2);
    PyErr_NormalizeException(&t2, &v2, &tb2);
    if (v2 != NULL && v2 != v) {
        PyObject *had = PyException_GetContext(v2);
        if (had != NULL && had != v)
            PyException_SetContext(v, had); /* (each SetContext steals) */
        else
            Py_XDECREF(had);
        PyException_SetContext(v2, Py_NewRef(v));
    }
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    PyErr_Restore(t2, v2, tb2);
    return NULL;
}

static PyObject *Rows_read(RowsObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 3 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError, "read(rows, out_x, out_y) takes 3 arguments "
                                         "(and a transform, and threads)");
        return NULL;
    }
    Job j = JOB_INIT;
    Py_buffer ib = {0}, bx = {0}, by = {0}; /* (releasing one not held does nothing) */
    int rc = 0, threads = self->threads;
    PyObject *res = NULL, *hook = NULL;

    if ((nargs >= 4 && parse_transform(args[3], self->d, &j.tf) < 0) ||
        (nargs == 5 && args[4] != Py_None && parse_threads(args[4], &threads) < 0) ||
        parse_rows(args[0], self->n, &j, &ib) < 0 ||
        parse_outs(args[1], args[2], self->d, self->l, &j, &bx, &by) < 0)
        goto done;
    if (self->lo != NULL)
        guard_install();
    hook = Py_XNewRef(self->changed); /* (see rows_changed) */
    int parts = split_count(threads, j.r, 8 * (self->d + self->l));
    Py_BEGIN_ALLOW_THREADS
    rc = guarded_copy(self, &j, parts);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        rows_changed(hook, rc);
    } else if (j.bad >= 0) {
        PyErr_Format(PyExc_IndexError, "row %lld out of range for n=%zd rows",
                     (long long)row_at(&j, j.bad), self->n);
    } else {
        res = read_result(&j);
    }
done:
    Py_XDECREF(hook);
    PyBuffer_Release(&ib);
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
    return res;
}

static int Rows_traverse(RowsObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->changed);
    return 0;
}

static int Rows_clear(RowsObject *self)
{
    Py_CLEAR(self->changed);
    return 0;
}

static void Rows_dealloc(RowsObject *self)
{
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->changed);
    PyBuffer_Release(&self->xbuf); /* (one not held, zeroed, is let go of as a no-op) */
    PyBuffer_Release(&self->ybuf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Rows_get_threads(RowsObject *self, void *closure)
{
    return PyLong_FromLong(self->threads);
}

static int Rows_set_threads(RowsObject *self, PyObject *v, void *closure)
{
    return parse_threads(v, &self->threads);
}

static PyObject *Rows_get_changed(RowsObject *self, void *closure)
{
    return hook_get(self->changed);
}

/* changed set to v: a callable, or None (or deleted) for none. 0, or -1. */
static int set_changed(RowsObject *self, PyObject *v)
{
    if (hook_set(&self->changed, v, "changed") < 0)
        return -1;
    if (self->changed != NULL && !PyObject_GC_IsTracked((PyObject *)self))
        PyObject_GC_Track(self); /* (holding one, it may be in a cycle) */
    return 0;
}

static int Rows_set_changed(RowsObject *self, PyObject *v, void *closure)
{
    return set_changed(self, v);
}

static PyGetSetDef Rows_getset[] = {
    {"threads", (getter)Rows_get_threads, (setter)Rows_set_threads,
     "Threads that copy one read when read() is not told: 0 (the default) picks one a\n"
     "256 KiB of rows, at most one fewer than the cores this process may run on;\n"
"n >= 1 fixes it (at\n"
     "most the rows, and 64). Setting None sets 0.",
     NULL},
    {"changed", (getter)Rows_get_changed, (setter)Rows_set_changed,
     "A file's rows: called with the FileChanged of a copy that found the file changed,\n"
     "to raise the error that names the file instead (FileChanged its context); None\n"
     "(the default): FileChanged. Setting None lets go of it (a reader's close: the hook\n"
     "holds the file's handle; a copy running meanwhile holds it until it is done).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Rows_methods[] = {
    {"read", (PyCFunction)(void (*)(void))Rows_read, METH_FASTCALL, read_doc},
    {"read_run", (PyCFunction)(void (*)(void))Rows_read_run, METH_FASTCALL,
     "read_run(order, start, size, out_x, out_y)\n--\n\n"
     "read(order[start:start + size], out_x[:size], out_y[:size]) without the views: order\n"
     "a 1-D C-contiguous int32/int64 ndarray, out_x and out_y writeable C-contiguous\n"
     "float64 or float32 ndarrays of at least size rows (a batch's hand-out)."},
    {"take_run", (PyCFunction)(void (*)(void))Rows_take_run, METH_FASTCALL,
     "take_run(order, start, size, dtype, ydtype)\n--\n\n"
     "Rows order[start:start + size] as a new (x, y) pair of dtype (float64 or float32;\n"
     "y of ydtype when not None), laid out as exactbatch.arrays.batch_pair's."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject RowsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exactbatch._core.Rows",
    .tp_basicsize = sizeof(RowsObject),
    .tp_dealloc = (destructor)Rows_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)Rows_traverse,
    .tp_clear = (inquiry)Rows_clear,
    .tp_doc = "Where rows live: made by memory_rows() or file_rows().",
    .tp_methods = Rows_methods,
    .tp_getset = Rows_getset,
};

/* Zeroed (tp_alloc): no buffer held yet, and lo NULL, in memory, until file_rows sets
 * the file's fields. */
static RowsObject *new_rows(void)
{
    RowsObject *s = (RowsObject *)RowsType.tp_alloc(&RowsType, 0);
    if (s != NULL) /* untracked by the collector until it holds a changed hook: a batch's */
        PyObject_GC_UnTrack(s); /* gather makes one (kernels.gather), at no collector's cost */
    return s;
}

/* A float64 2-D array's buffer whose rows are each contiguous, one stride apart
 * (a C-contiguous array, or the columns [a:b] of one: a shuffle buffer's x and y
 * are views of its whole rows); *stride: bytes from one row to the next. */
static int matrix(PyObject *o, Py_buffer *b, const char *name, Py_ssize_t *stride)
{
    if (PyObject_GetBuffer(o, b, PyBUF_STRIDES | PyBUF_FORMAT) != 0)
        return -1;
    const char *f = plain_format(b);
    if (b->ndim != 2 || f[0] != 'd' || f[1] || b->itemsize != 8) {
        PyErr_Format(PyExc_TypeError, "%s must be a 2-D float64 array", name);
        PyBuffer_Release(b);
        return -1;
    }
    Py_ssize_t n = b->shape[0], w = b->shape[1], row;
    if (row_size(name, w, 0, &row) < 0) {
        PyBuffer_Release(b);
        return -1;
    }
    *stride = n > 1 ? b->strides[0] : row;
    if ((w > 1 && b->strides[1] != 8) || *stride < row) {
        PyErr_Format(PyExc_ValueError,
                     "%s must hold each row's values side by side, rows apart in order "
                     "(C-contiguous, or columns of a C-contiguous array)",
                     name);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

PyObject *memory_rows(PyObject *mod, PyObject *args)
{
    PyObject *x, *y;
    if (!PyArg_ParseTuple(args, "OO:memory_rows", &x, &y))
        return NULL;
    RowsObject *s = new_rows();
    if (s == NULL)
        return NULL;
    if (matrix(x, &s->xbuf, "x", &s->xstride) < 0 || matrix(y, &s->ybuf, "y", &s->ystride) < 0)
        goto fail;
    s->n = s->xbuf.shape[0];
    s->d = s->xbuf.shape[1];
    s->l = s->ybuf.shape[1];
    if (s->ybuf.shape[0] != s->n) {
        PyErr_SetString(PyExc_ValueError, "x and y must have the same number of rows");
        goto fail;
    }
    s->xbase = s->xbuf.buf;
    s->ybase = s->ybuf.buf;
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}

PyObject *file_rows(PyObject *mod, PyObject *args)
{
    PyObject *m, *changed = Py_None;
    Py_ssize_t off, n, d, l;
    int fd;
    long long size, mtime_ns, ctime_ns;
    if (!PyArg_ParseTuple(args, "OnnnniLLL|O:file_rows", &m, &off, &n, &d, &l, &fd, &size,
                          &mtime_ns, &ctime_ns, &changed))
        return NULL;
    if (off < 0 || n < 0 || d < 0 || l < 0) {
        PyErr_SetString(PyExc_ValueError, "file_rows: negative offset or shape");
        return NULL;
    }
    Py_ssize_t row, end; /* offset + n * row: where the rows end in the mapping */
    if (row_size("file_rows", d, l, &row) < 0)
        return NULL;
    if (__builtin_mul_overflow(n, row, &end) || __builtin_add_overflow(end, off, &end)) {
        PyErr_Format(PyExc_OverflowError, "file_rows: offset=%zd plus n=%zd rows of %zd bytes "
                     "is more than %zd bytes", off, n, row, PY_SSIZE_T_MAX);
        return NULL;
    }
    guard_install();
    RowsObject *s = new_rows();
    if (s == NULL)
        return NULL;
    if (PyObject_GetBuffer(m, &s->xbuf, PyBUF_SIMPLE) != 0)
        goto fail;
    if (s->xbuf.len < end) {
        PyErr_SetString(PyExc_ValueError, "file_rows: the mapping is shorter than its rows");
        goto fail;
    }
    s->n = n;
    s->d = d;
    s->l = l;
    s->xbase = (const char *)s->xbuf.buf + off;
    s->ybase = s->xbase + 8 * d;
    s->xstride = s->ystride = row;
    s->lo = s->xbuf.buf;
    s->hi = (const char *)s->xbuf.buf + s->xbuf.len;
    s->fd = fd;
    s->size = size;
    s->mtime_ns = mtime_ns;
    s->ctime_ns = ctime_ns;
    if (set_changed(s, changed) < 0)
        goto fail;
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}

int rows_ready(PyObject *module)
{
    if (PyType_Ready(&RowsType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "Rows", (PyObject *)&RowsType);
}
