/* Rows (see _core_rows.h): the gather and cast of one read, Rows objects over memory
 * or a file's mapping, the mapping itself, and next_into's buffer check. */
#include "_core_rows.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "_core_guard.h"
#include "_core_split.h"

/* ------------------------------------------------------------------ the copy loops */

/* One side (x or y) of rows ix[0..r) (ix NULL: start, start+1, ...): w values a
 * row, at base + row * stride, into out. x and y in arrays of their own (and
 * sorted batches) are copied in two passes, each a plain loop of independent
 * loads, which the CPU overlaps well; shuffled rows holding y just after x go
 * through both64 (below) instead. Looking for runs row by row made it slower,
 * so ``runs`` says whether the batch starts with one; wide rows are prefetched
 * a few rows ahead. A run of consecutive rows, where the layout holds them
 * back to back (x or y in memory), is one memcpy. */
#define DEFINE_SIDE(NAME, T)                                                              \
    WIDE static void NAME(const T *ix, Py_ssize_t start, Py_ssize_t r, const char *base,      \
                     Py_ssize_t stride, Py_ssize_t w, char *out, int f32, int runs)       \
    {                                                                                     \
        Py_ssize_t ob = w * (f32 ? 4 : 8);                                                \
        runs = runs && !f32 && stride == 8 * w;                                           \
        if (ix == NULL && runs) {                                                         \
            memcpy(out, base + start * stride, (size_t)(r * ob));                         \
            return;                                                                       \
        }                                                                                 \
        if (ix == NULL) {                                                                 \
            for (Py_ssize_t k = 0; k < r; k++)                                            \
                copy_row(out + k * ob, base + (start + k) * stride, w, f32);              \
            return;                                                                       \
        }                                                                                 \
        if (!runs && !f32 && w == 1) { /* a label: one 8-byte move a row, no switch */    \
            for (Py_ssize_t k = 0; k < r; k++)                                            \
                memcpy(out + 8 * k, base + (int64_t)ix[k] * stride, 8);                   \
            return;                                                                       \
        }                                                                                 \
        if (!runs) {                                                                      \
            /* Wide rows: ask for the row PREFETCH rows ahead as each is copied (a     */ \
            /* shuffled batch's rows miss the cache; measured 1.05x-1.3x faster).       */ \
            Py_ssize_t k = 0;                                                             \
            if (w > 4)                                                                    \
                for (; k + PREFETCH < r; k++) {                                           \
                    const char *ahead = base + (int64_t)ix[k + PREFETCH] * stride;        \
                    __builtin_prefetch(ahead);                                            \
                    __builtin_prefetch(ahead + 8 * w - 1); /* a row spans 2-3 lines */    \
                    copy_row(out + k * ob, base + (int64_t)ix[k] * stride, w, f32);       \
                }                                                                         \
            for (; k < r; k++)                                                            \
                copy_row(out + k * ob, base + (int64_t)ix[k] * stride, w, f32);           \
            return;                                                                       \
        }                                                                                 \
        for (Py_ssize_t k = 0; k < r;) {                                                  \
            int64_t i = (int64_t)ix[k];                                                   \
            Py_ssize_t m = 1;                                                             \
            while (k + m < r && (int64_t)ix[k + m] == i + m)                              \
                m++;                                                                      \
            memcpy(out + k * ob, base + i * stride, (size_t)(m * ob));                    \
            k += m;                                                                       \
        }                                                                                 \
    }                                                                                     \
                                                                                          \
    /* 1: every row in [0, n), and the batch starts with a run (sorted rows: look for */  \
    /* runs as it copies); -1: in range, and it does not (a shuffled batch: a plain   */  \
    /* loop); else 0, and *bad is the position of the first row out of range. The     */  \
    /* check alone is one vectorised pass (looking for runs in it cost ~10%).         */  \
    static int NAME##_scan(const T *ix, Py_ssize_t r, uint64_t n, Py_ssize_t *bad)        \
    {                                                                                     \
        uint64_t over = 0;                                                                \
        for (Py_ssize_t k = 0; k < r; k++)                                                \
            over |= (uint64_t)(int64_t)ix[k] >= n;                                        \
        if (over) {                                                                       \
            for (Py_ssize_t k = 0; k < r; k++)                                            \
                if ((uint64_t)(int64_t)ix[k] >= n) {                                      \
                    *bad = k;                                                             \
                    break;                                                                \
                }                                                                         \
            return 0;                                                                     \
        }                                                                                 \
        return r > 1 && (int64_t)ix[1] == (int64_t)ix[0] + 1 ? 1 : -1;                   \
    }

DEFINE_SIDE(side32, int32_t)
DEFINE_SIDE(side64, int64_t)

/* The features of rows ix[0..r) (ix NULL: start, start+1, ...) through the transform
 * t (see _core_transform.h) as they are copied: the one pass over the batch, each row
 * transformed while it is in the cache; *nan: the position of the first row that held
 * a NaN. Wide shuffled rows are prefetched as in DEFINE_SIDE. */
#define DEFINE_TRANSFORMED(NAME, T)                                                        \
    WIDE static void NAME(const T *ix, Py_ssize_t start, Py_ssize_t r, const char *base,      \
                          Py_ssize_t stride, Py_ssize_t w, char *out, int f32,             \
                          const TransformObject *t, Py_ssize_t *nan)                       \
    {                                                                                     \
        Py_ssize_t ob = w * (f32 ? 4 : 8);                                                \
        for (Py_ssize_t k = 0; k < r; k++) {                                              \
            int64_t i = ix == NULL ? start + k : (int64_t)ix[k];                          \
            if (ix != NULL && w > 4 && k + PREFETCH < r) { /* every line of the row: */  \
                const char *ahead = base + (int64_t)ix[k + PREFETCH] * stride;            \
                for (Py_ssize_t at = 0; at < 8 * w; at += 64) /* (the loop holds fewer */ \
                    __builtin_prefetch(ahead + at);           /* rows in flight than  */ \
                __builtin_prefetch(ahead + 8 * w - 1);        /* a memcpy's)          */ \
            }                                                                             \
            if (transform_row(out + k * ob, base + i * stride, w, f32, t) && *nan < 0)    \
                *nan = k;                                                                 \
        }                                                                                 \
    }
DEFINE_TRANSFORMED(transformed32, int32_t)
DEFINE_TRANSFORMED(transformed64, int64_t)

/* Both sides of rows ix[0..r) where y follows x in each row (an .ndf file, a
 * shuffle buffer's whole rows): one pass, each row's x then its y, so a row
 * missing the cache is fetched once, not once a side (measured 1.2x-1.4x
 * faster on shuffled rows than two passes). */
#define DEFINE_BOTH(NAME, T)                                                              \
    WIDE static void NAME(const T *ix, Py_ssize_t r, const char *base, Py_ssize_t stride,   \
                          Py_ssize_t d, Py_ssize_t l, char *ox, char *oy, int f32, int f32y) \
    {                                                                                     \
        Py_ssize_t bx = d * (f32 ? 4 : 8), by = l * (f32y ? 4 : 8), yoff = 8 * d;         \
        Py_ssize_t k = 0;                                                                 \
        if (d + l > 4)                                                                    \
            for (; k + PREFETCH < r; k++) {                                               \
                const char *ahead = base + (int64_t)ix[k + PREFETCH] * stride;            \
                __builtin_prefetch(ahead);                                                \
                __builtin_prefetch(ahead + 8 * (d + l) - 1);                              \
                const char *src = base + (int64_t)ix[k] * stride;                         \
                copy_row(ox + k * bx, src, d, f32);                                       \
                copy_row(oy + k * by, src + yoff, l, f32y);                               \
            }                                                                             \
        for (; k < r; k++) {                                                              \
            const char *src = base + (int64_t)ix[k] * stride;                             \
            copy_row(ox + k * bx, src, d, f32);                                           \
            copy_row(oy + k * by, src + yoff, l, f32y);                                   \
        }                                                                                 \
    }
DEFINE_BOTH(both32, int32_t)
DEFINE_BOTH(both64, int64_t)

static void copy_side(const Job *j, const char *base, Py_ssize_t stride, Py_ssize_t w, char *out,
                      int f32, int runs)
{
    if (j->isz == 4)
        side32(j->idx, j->start, j->r, base, stride, w, out, f32, runs);
    else
        side64(j->idx, j->start, j->r, base, stride, w, out, f32, runs);
}

/* Every row of j checked before any is copied (the copies then need no check): 1 when
 * the read starts with a run of consecutive rows (or is a slice), 0 when it does not,
 * -1 with j->bad set when a row is out of range. */
static int scan_rows(const RowsObject *s, Job *j)
{
    if (j->idx == NULL)
        return 1;
    int runs = j->isz == 4 ? side32_scan(j->idx, j->r, (uint64_t)s->n, &j->bad)
                           : side64_scan(j->idx, j->r, (uint64_t)s->n, &j->bad);
    return runs == 0 ? -1 : runs > 0;
}

/* The copy of j's rows, checked by scan_rows (runs: what it said). */
static void copy_scanned(const RowsObject *s, Job *j, int runs)
{
    if (j->tf != NULL) { /* x through the transform, y copied as it is */
        if (s->d && j->isz == 4)
            transformed32(j->idx, j->start, j->r, s->xbase, s->xstride, s->d, j->ox, j->f32,
                          j->tf, &j->nan);
        else if (s->d)
            transformed64(j->idx, j->start, j->r, s->xbase, s->xstride, s->d, j->ox, j->f32,
                          j->tf, &j->nan);
        if (s->l)
            copy_side(j, s->ybase, s->ystride, s->l, j->oy, j->f32y, runs);
        return;
    }
    if (j->idx != NULL && !runs && s->d && s->l && s->ybase == s->xbase + 8 * s->d &&
        s->ystride == s->xstride) { /* y follows x in each row */
        if (j->isz == 4)
            both32(j->idx, j->r, s->xbase, s->xstride, s->d, s->l, j->ox, j->oy, j->f32,
                   j->f32y);
        else
            both64(j->idx, j->r, s->xbase, s->xstride, s->d, s->l, j->ox, j->oy, j->f32,
                   j->f32y);
        return;
    }
    if (s->d)
        copy_side(j, s->xbase, s->xstride, s->d, j->ox, j->f32, runs);
    if (s->l)
        copy_side(j, s->ybase, s->ystride, s->l, j->oy, j->f32y, runs);
}

static void copy_rows(const RowsObject *s, Job *j)
{
    int runs = scan_rows(s, j);
    if (runs >= 0)
        copy_scanned(s, j, runs);
}

#ifdef __APPLE__
#define STAT_NS(st, which) ((long long)(st).st_##which##timespec.tv_sec * 1000000000LL + \
                            (st).st_##which##timespec.tv_nsec)
#else
#define STAT_NS(st, which) ((long long)(st).st_##which##tim.tv_sec * 1000000000LL + \
                            (st).st_##which##tim.tv_nsec)
#endif

/* Has the file of rows s (a file's: lo != NULL) lost bytes, or changed its modification
 * time or change time (ctime) since opened? One fstat. The rule is exactbatch.ndf.local's
 * LocalHandle.check_size (see there): a ctime moved by the last link going (the file
 * deleted, or replaced by a rename over its path) is no change. */
int file_changed(const RowsObject *s)
{
    struct stat st;
    if (fstat(s->fd, &st) != 0 || (long long)st.st_size < s->size)
        return 1;
    return (s->mtime_ns >= 0 && STAT_NS(st, m) != s->mtime_ns) ||
           (s->ctime_ns >= 0 && st.st_nlink > 0 && STAT_NS(st, c) != s->ctime_ns);
}

typedef struct {
    const RowsObject *s;
    Job *j;
} RowsCopy;

static void copy_rows_of(void *arg)
{
    RowsCopy *c = arg;
    copy_rows(c->s, c->j);
}

/* One part of a read split over threads (_core_split.h): the whole read, scanned, and
 * what each part's copy found. */
typedef struct {
    const RowsObject *s;
    const Job *j;
    Py_ssize_t nan[SPLIT_MAX]; /* the read's first row with a NaN in part k, or -1 */
    char faulted[SPLIT_MAX];
} SplitCopy;

typedef struct {
    const RowsObject *s;
    Job *j;
    int runs;
} ScannedCopy;

static void copy_scanned_of(void *arg)
{
    ScannedCopy *c = arg;
    copy_scanned(c->s, c->j, c->runs);
}

/* Rows [lo, hi) of the read, on this thread: a Job of their own (its rows and outputs
 * offset), under this thread's own guard. Each row is copied as a read of one thread
 * copies it (a part starting a run, or not, picks a loop, not the bytes). */
static void copy_part(void *ctx, int k, Py_ssize_t lo, Py_ssize_t hi)
{
    SplitCopy *c = ctx;
    const RowsObject *s = c->s;
    Job j = *c->j;
    j.r = hi - lo;
    if (j.idx != NULL)
        j.idx = (const char *)j.idx + lo * j.isz;
    else
        j.start += lo;
    j.ox += lo * s->d * (j.f32 ? 4 : 8);
    j.oy += lo * s->l * (j.f32y ? 4 : 8);
    j.nan = -1;
    ScannedCopy sc = {s, &j, j.idx == NULL || (j.r > 1 && row_at(&j, 1) == row_at(&j, 0) + 1)};
    if (s->lo == NULL) {
        copy_scanned_of(&sc);
    } else {
        GuardRange mapping = {s->lo, s->hi};
        c->faulted[k] = guard_run(&mapping, 1, copy_scanned_of, &sc, NULL) < 0;
    }
    c->nan[k] = j.nan < 0 ? -1 : lo + j.nan;
}

/* 0: copied; -1: the copy faulted (the guard caught it); -2: the file changed. On
 * `parts` threads (split_count), each copying a range of the rows. */
static int guarded_copy(const RowsObject *s, Job *j, int parts)
{
    if (parts > 1) {
        if (scan_rows(s, j) < 0)
            return 0; /* (j->bad set, nothing copied) */
        SplitCopy c = {s, j, {0}, {0}};
        split_run(parts, j->r, copy_part, &c);
        for (int k = 0; k < parts; k++)
            if (c.faulted[k])
                return -1;
        for (int k = 0; k < parts && j->nan < 0; k++)
            j->nan = c.nan[k];
        return s->lo != NULL && file_changed(s) ? -2 : 0;
    }
    if (s->lo == NULL) {
        copy_rows(s, j);
        return 0;
    }
    GuardRange mapping = {s->lo, s->hi};
    RowsCopy c = {s, j};
    if (guard_run(&mapping, 1, copy_rows_of, &c, NULL) < 0)
        return -1;
    return file_changed(s) ? -2 : 0;
}

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
    PyObject *res = NULL;

    if ((nargs >= 4 && parse_transform(args[3], self->d, &j.tf) < 0) ||
        (nargs == 5 && args[4] != Py_None && parse_threads(args[4], &threads) < 0) ||
        parse_rows(args[0], self->n, &j, &ib) < 0 ||
        parse_outs(args[1], args[2], self->d, self->l, &j, &bx, &by) < 0)
        goto done;
    if (self->lo != NULL)
        guard_install();
    int parts = split_count(threads, j.r, 8 * (self->d + self->l));
    Py_BEGIN_ALLOW_THREADS
    rc = guarded_copy(self, &j, parts);
    Py_END_ALLOW_THREADS
    if (rc == -1) {
        PyErr_SetString(FileChanged, "a copy from the file's mapping faulted (truncated?)");
    } else if (rc == -2) {
        PyErr_SetString(FileChanged, "the file's size, modification time or ctime changed");
    } else if (j.bad >= 0) {
        PyErr_Format(PyExc_IndexError, "row %lld out of range for n=%zd rows",
                     (long long)row_at(&j, j.bad), self->n);
    } else {
        res = read_result(&j);
    }
done:
    PyBuffer_Release(&ib);
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
    return res;
}

static void Rows_dealloc(RowsObject *self)
{
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

static PyGetSetDef Rows_getset[] = {
    {"threads", (getter)Rows_get_threads, (setter)Rows_set_threads,
     "Threads that copy one read when read() is not told: 0 (the default) picks one a\n"
     "256 KiB of rows, at most one fewer than the cores this process may run on;\n"
"n >= 1 fixes it (at\n"
     "most the rows, and 64). Setting None sets 0.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Rows_methods[] = {
    {"read", (PyCFunction)(void (*)(void))Rows_read, METH_FASTCALL, read_doc},
    {NULL, NULL, 0, NULL},
};

PyTypeObject RowsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exactbatch._core.Rows",
    .tp_basicsize = sizeof(RowsObject),
    .tp_dealloc = (destructor)Rows_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Where rows live: made by memory_rows() or file_rows().",
    .tp_methods = Rows_methods,
    .tp_getset = Rows_getset,
};

/* Zeroed (tp_alloc): no buffer held yet, and lo NULL, in memory, until file_rows sets
 * the file's fields. */
static RowsObject *new_rows(void)
{
    return (RowsObject *)RowsType.tp_alloc(&RowsType, 0);
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
    PyObject *m;
    Py_ssize_t off, n, d, l;
    int fd;
    long long size, mtime_ns, ctime_ns;
    if (!PyArg_ParseTuple(args, "OnnnniLLL:file_rows", &m, &off, &n, &d, &l, &fd, &size,
                          &mtime_ns, &ctime_ns))
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
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}

/* ------------------------------------------------------------------ a file's mapping */

/* A read-only shared mapping of a file, as a buffer: what mmap.mmap gives, without the
 * duplicate descriptor mmap.mmap keeps open for as long as it lives (so an open .ndf
 * holds one descriptor, not two). Unmapped when the last holder lets go. */
typedef struct {
    PyObject_HEAD
    void *addr;
    Py_ssize_t len;
} MappingObject;

static int Mapping_getbuffer(MappingObject *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->addr, self->len, 1, flags);
}

static void Mapping_dealloc(MappingObject *self)
{
    munmap(self->addr, (size_t)self->len);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs Mapping_as_buffer = {(getbufferproc)Mapping_getbuffer, NULL};

static PyTypeObject MappingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exactbatch._core.Mapping",
    .tp_basicsize = sizeof(MappingObject),
    .tp_dealloc = (destructor)Mapping_dealloc,
    .tp_as_buffer = &Mapping_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A read-only mapping of a file: made by map_file().",
};

PyObject *map_file(PyObject *mod, PyObject *args)
{
    int fd;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "in:map_file", &fd, &len))
        return NULL;
    if (len <= 0) {
        PyErr_Format(PyExc_ValueError, "map_file: length must be positive; got %zd", len);
        return NULL;
    }
    void *addr;
    Py_BEGIN_ALLOW_THREADS
    addr = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, fd, 0);
    Py_END_ALLOW_THREADS
    if (addr == MAP_FAILED)
        return PyErr_SetFromErrno(PyExc_OSError);
    MappingObject *m = PyObject_New(MappingObject, &MappingType);
    if (m == NULL) {
        munmap(addr, (size_t)len);
        return NULL;
    }
    m->addr = addr;
    m->len = len;
    return (PyObject *)m;
}

/* ---------------------------------------------------------- next_into's buffers */

static PyObject *ndarray_type; /* numpy.ndarray: pair_fits() accepts no other buffer */

/* Is o an ndarray (or subclass) that is writeable and C-contiguous, of shape (rows, w)
 * and format fmt ('d' or 'f')? Never an exception. */
static int fits_one(PyObject *o, Py_ssize_t rows, Py_ssize_t w, char fmt)
{
    if (!PyObject_TypeCheck(o, (PyTypeObject *)ndarray_type))
        return 0;
    Py_buffer v;
    if (PyObject_GetBuffer(o, &v, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyErr_Clear(); /* read-only, or not C-contiguous */
        return 0;
    }
    const char *f = plain_format(&v);
    int ok = v.ndim == 2 && v.shape[0] == rows && v.shape[1] == w && f[0] == fmt && !f[1];
    PyBuffer_Release(&v);
    return ok;
}

PyObject *pair_fits(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "pair_fits(bx, by, rows, d, l, itemsize) takes 6 "
                                         "arguments");
        return NULL;
    }
    Py_ssize_t v[4];
    for (int i = 0; i < 4; i++)
        if ((v[i] = PyLong_AsSsize_t(args[2 + i])) == -1 && PyErr_Occurred())
            return NULL;
    char fmt = v[3] == 8 ? 'd' : v[3] == 4 ? 'f' : 0;
    return PyBool_FromLong(fmt && fits_one(args[0], v[0], v[1], fmt) &&
                           fits_one(args[1], v[0], v[2], fmt));
}

int rows_ready(PyObject *module)
{
    if (PyType_Ready(&RowsType) < 0 || PyType_Ready(&MappingType) < 0)
        return -1;
    PyObject *np = PyImport_ImportModule("numpy");
    if (np == NULL)
        return -1;
    ndarray_type = PyObject_GetAttrString(np, "ndarray");
    Py_DECREF(np);
    if (ndarray_type == NULL)
        return -1;
    return PyModule_AddObjectRef(module, "Rows", (PyObject *)&RowsType);
}
