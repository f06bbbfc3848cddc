/*
 * exactbatch._core: the compiled row gather (see the module docstring, DOC, below).
 *
 * Built by setuptools as an optional extension: when it fails to compile,
 * exactbatch installs and runs on its pure NumPy path (exactbatch.kernels),
 * which gives bit-identical batches. Only the buffer protocol is used (no
 * NumPy C API), so building needs no NumPy headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

PyDoc_STRVAR(DOC,
"The compiled kernels behind exactbatch.kernels (use that module, not this one).\n"
"\n"
"``memory_rows(x, y)`` and ``file_rows(mapping, offset, n, d, l, fd, size, mtime_ns)``\n"
"describe where rows live: two float64 C-contiguous arrays, or the rows of an\n"
"``.ndf`` file's read-only mapping (x then y per row, 8*(d+l) bytes from\n"
"``offset``). Their ``read(rows, out_x, out_y)`` gathers rows (a slice, or an\n"
"int32/int64 index array) into float64 or float32 batch buffers in one pass,\n"
"casting as it copies, with the GIL released; runs of consecutive rows are\n"
"found as it goes and copied with one memcpy where the layout allows.\n"
"\n"
"Copies out of a mapping run under a guard: a SIGBUS (or SIGSEGV) raised by a\n"
"read of the mapped range on the copying thread (the file was truncated\n"
"during the copy) jumps out of the copy (sigsetjmp/siglongjmp), and ``read``\n"
"raises ``FileChanged``, which the .ndf reader turns into ``NdfError`` naming\n"
"the file. Any other fault goes to the handler installed before this one.\n"
"After every copy from a file one ``fstat`` (with the GIL still released)\n"
"checks that the file kept its size and modification time, so a truncation\n"
"inside the last page (read as zeros, no fault) or a rewrite in place is\n"
"caught too. So the compiled path takes no read lease: the lease\n"
"(exactbatch.ndf.guard) is kept only for the pure NumPy path, which cannot\n"
"catch a fault.\n");

static PyObject *FileChanged; /* raised by read(): the caller names the file */

/* ------------------------------------------------------------------ the guard */

/* Set by a thread while it copies out of a mapping; read by the handler on the
 * same thread (the kernel delivers a fault to the thread that faulted). */
static _Thread_local sigjmp_buf *guard_jump;
static _Thread_local const char *guard_lo, *guard_hi;
static struct sigaction old_bus, old_segv; /* the handlers we displaced */
static int guard_installed;

static void on_fault(int sig, siginfo_t *info, void *ctx)
{
    const char *a = (const char *)info->si_addr;
    sigjmp_buf *jb = guard_jump;
    /* si_code > 0: raised by the kernel for a memory access (not kill/raise). */
    if (jb != NULL && info->si_code > 0 && a >= guard_lo && a < guard_hi) {
        guard_jump = NULL;
        siglongjmp(*jb, 1);
    }
    /* Not ours: chain to the handler installed before. */
    struct sigaction *old = sig == SIGBUS ? &old_bus : &old_segv;
    if (old->sa_flags & SA_SIGINFO) {
        old->sa_sigaction(sig, info, ctx);
    } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
    } else if (old->sa_handler == SIG_DFL || info->si_code > 0) {
        /* The default action (a fault cannot be ignored): reinstate it and raise
         * again, so the process ends as it would have without this handler. */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(sig, &dfl, NULL);
        raise(sig);
    }
}

/* Install the handler once per process (with the GIL held, so never twice at
 * once). SA_NODEFER: the signal stays unblocked inside the handler, so after
 * siglongjmp the mask is as before and sigsetjmp need not save it (a syscall). */
static int install_guard(void)
{
    if (guard_installed)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &old_bus) != 0 || sigaction(SIGSEGV, &sa, &old_segv) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    guard_installed = 1;
    return 0;
}

/* ------------------------------------------------------------------ the gather */

typedef struct {
    PyObject_HEAD
    Py_buffer xbuf, ybuf; /* held while the object lives: the rows cannot move */
    int nbufs;
    const char *xbase, *ybase;  /* row 0's x and y values */
    Py_ssize_t xstride, ystride; /* bytes from one row to the next */
    Py_ssize_t n, d, l;
    const char *lo, *hi; /* a mapping's range (guarded copies); NULL in memory */
    int fd;              /* a file's descriptor, checked after each copy; -1 in memory */
    long long size, mtime_ns; /* what the file had when opened (mtime_ns < 0: unchecked) */
} RowsObject;

/* One read: rows idx[0..r) (idx NULL: start .. start + r) into out_x/out_y. */
typedef struct {
    const void *idx;
    int isz; /* 4 or 8 */
    Py_ssize_t start, r;
    char *ox, *oy;
    int f32;
    Py_ssize_t bad; /* the position of an index out of range, or -1 */
} Job;

static inline int64_t row_at(const Job *j, Py_ssize_t k)
{
    if (j->idx == NULL)
        return j->start + k;
    return j->isz == 4 ? ((const int32_t *)j->idx)[k] : ((const int64_t *)j->idx)[k];
}

/* One row of w values from src to dst, as float64 (libc's memcpy: as fast as
 * any loop for a row, and values in an .ndf sit at offset 28, not 8-aligned)
 * or float32 (each value loaded with memcpy, which the compiler makes an
 * unaligned load). */
static inline void copy_row(char *restrict dst, const char *restrict src, Py_ssize_t w, int f32)
{
    if (!f32) {
        memcpy(dst, src, (size_t)(8 * w));
        return;
    }
    /* restrict: the stores cannot change the source, so the loop vectorises */
    float *restrict o = (float *)dst;
    for (Py_ssize_t c = 0; c < w; c++) {
        double v;
        memcpy(&v, src + 8 * c, 8);
        o[c] = (float)v;
    }
}

/* One side (x or y) of rows ix[0..r) (ix NULL: start, start+1, ...): w values a
 * row, at base + row * stride, into out. x and y are copied in two passes,
 * each a plain loop of independent loads, which the CPU overlaps well
 * (measured: software prefetch made it slower, and so did looking for runs
 * row by row, so ``runs`` says whether the batch has any). A run of
 * consecutive rows, where the layout holds them back to back (x or y in
 * memory), is one memcpy. */
#define DEFINE_SIDE(NAME, T)                                                              \
    static void NAME(const T *ix, Py_ssize_t start, Py_ssize_t r, const char *base,      \
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
        if (!runs) {                                                                      \
            for (Py_ssize_t k = 0; k < r; k++)                                            \
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
    /* -1: every row in [0, n), and no two consecutive; 1: in range, with a run;     */  \
    /* else 0, and *bad is the position of the first row out of range.               */  \
    static int NAME##_scan(const T *ix, Py_ssize_t r, uint64_t n, Py_ssize_t *bad)        \
    {                                                                                     \
        uint64_t over = 0;                                                                \
        Py_ssize_t next = 0;                                                              \
        for (Py_ssize_t k = 0; k < r; k++) {                                              \
            over |= (uint64_t)(int64_t)ix[k] >= n;                                        \
            next += k + 1 < r && (int64_t)ix[k + 1] == (int64_t)ix[k] + 1;                \
        }                                                                                 \
        if (over) {                                                                       \
            for (Py_ssize_t k = 0; k < r; k++)                                            \
                if ((uint64_t)(int64_t)ix[k] >= n) {                                      \
                    *bad = k;                                                             \
                    break;                                                                \
                }                                                                         \
            return 0;                                                                     \
        }                                                                                 \
        return next ? 1 : -1;                                                             \
    }

DEFINE_SIDE(side32, int32_t)
DEFINE_SIDE(side64, int64_t)

static void copy_side(const Job *j, const char *base, Py_ssize_t stride, Py_ssize_t w, char *out,
                      int runs)
{
    if (j->isz == 4)
        side32(j->idx, j->start, j->r, base, stride, w, out, j->f32, runs);
    else
        side64(j->idx, j->start, j->r, base, stride, w, out, j->f32, runs);
}

static void copy_rows(const RowsObject *s, Job *j)
{
    /* Every row is checked before any is copied (the copies then need no check). */
    int runs = 1;
    if (j->idx != NULL) {
        runs = j->isz == 4 ? side32_scan(j->idx, j->r, (uint64_t)s->n, &j->bad)
                           : side64_scan(j->idx, j->r, (uint64_t)s->n, &j->bad);
        if (runs == 0)
            return;
        runs = runs > 0;
    }
    if (s->d)
        copy_side(j, s->xbase, s->xstride, s->d, j->ox, runs);
    if (s->l)
        copy_side(j, s->ybase, s->ystride, s->l, j->oy, runs);
}

/* 0: copied; -1: the copy faulted (the guard caught it); -2: the file changed. */
static int guarded_copy(const RowsObject *s, Job *j)
{
    if (s->lo == NULL) {
        copy_rows(s, j);
        return 0;
    }
    sigjmp_buf jb;
    if (sigsetjmp(jb, 0)) {
        guard_jump = NULL;
        return -1;
    }
    guard_lo = s->lo;
    guard_hi = s->hi;
    guard_jump = &jb;
    copy_rows(s, j);
    guard_jump = NULL;
    if (s->fd >= 0) {
        struct stat st;
        if (fstat(s->fd, &st) != 0 || (long long)st.st_size < s->size)
            return -2;
#ifdef __APPLE__
        long long ns = (long long)st.st_mtimespec.tv_sec * 1000000000LL + st.st_mtimespec.tv_nsec;
#else
        long long ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
#endif
        if (s->mtime_ns >= 0 && ns != s->mtime_ns)
            return -2;
    }
    return 0;
}

static int out_buffer(PyObject *o, Py_buffer *b, const char *name)
{
    if (PyObject_GetBuffer(o, b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return -1;
    const char *f = b->format ? b->format : "B";
    if (*f == '=' || *f == '<' || *f == '@')
        f++;
    if (!((f[0] == 'd' && b->itemsize == 8) || (f[0] == 'f' && b->itemsize == 4)) || f[1]) {
        PyErr_Format(PyExc_TypeError, "%s must hold float64 or float32; got format '%s'",
                     name, b->format ? b->format : "B");
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(read_doc,
"read(rows, out_x, out_y)\n--\n\n"
"Copy rows ``rows`` (a slice, or a 1-D int32/int64 array, any order, repeats\n"
"allowed) into ``out_x`` (r, d) and ``out_y`` (r, l), both float64 or both\n"
"float32, C-contiguous. IndexError for a row outside [0, n); FileChanged when\n"
"the file changed (or the copy faulted).");

static PyObject *Rows_read(RowsObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "read(rows, out_x, out_y) takes 3 arguments");
        return NULL;
    }
    Job j = {NULL, 8, 0, 0, NULL, NULL, 0, -1};
    Py_buffer ib = {0}, bx = {0}, by = {0};
    int have_i = 0, rc = 0;
    PyObject *res = NULL;

    if (PySlice_Check(args[0])) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(args[0], &start, &stop, &step) < 0)
            return NULL;
        if (step != 1 || start < 0 || stop > self->n || start > stop) {
            PyErr_Format(PyExc_IndexError, "rows %zd:%zd out of range for n=%zd rows", start,
                         stop, self->n);
            return NULL;
        }
        j.start = start;
        j.r = stop - start;
    } else {
        if (PyObject_GetBuffer(args[0], &ib, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
            return NULL;
        have_i = 1;
        const char *f = ib.format ? ib.format : "B";
        if (*f == '=' || *f == '<' || *f == '@')
            f++;
        if (ib.ndim != 1 || !f[0] || !strchr("ilq", f[0]) || f[1] ||
            (ib.itemsize != 4 && ib.itemsize != 8)) {
            PyErr_Format(PyExc_TypeError, "rows must be a 1-D int32 or int64 array; got format "
                         "'%s' with %d dimensions", ib.format ? ib.format : "B", ib.ndim);
            goto done;
        }
        j.idx = ib.buf;
        j.isz = (int)ib.itemsize;
        j.r = ib.len / ib.itemsize;
    }
    if (out_buffer(args[1], &bx, "out_x") < 0)
        goto done;
    if (out_buffer(args[2], &by, "out_y") < 0) {
        PyBuffer_Release(&bx);
        goto done;
    }
    if (bx.itemsize != by.itemsize) {
        PyErr_SetString(PyExc_TypeError, "out_x and out_y must have the same dtype");
        goto release;
    }
    if (bx.len != j.r * self->d * bx.itemsize || by.len != j.r * self->l * by.itemsize) {
        PyErr_Format(PyExc_ValueError, "out_x and out_y must hold (%zd, %zd) and (%zd, %zd) "
                     "values", j.r, self->d, j.r, self->l);
        goto release;
    }
    j.ox = bx.buf;
    j.oy = by.buf;
    j.f32 = bx.itemsize == 4;
    Py_BEGIN_ALLOW_THREADS
    rc = guarded_copy(self, &j);
    Py_END_ALLOW_THREADS
    if (rc == -1) {
        PyErr_SetString(FileChanged, "a copy from the file's mapping faulted (truncated?)");
    } else if (rc == -2) {
        PyErr_SetString(FileChanged, "the file's size or modification time changed");
    } else if (j.bad >= 0) {
        PyErr_Format(PyExc_IndexError, "row %lld out of range for n=%zd rows",
                     (long long)row_at(&j, j.bad), self->n);
    } else {
        res = Py_NewRef(Py_None);
    }
release:
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
done:
    if (have_i)
        PyBuffer_Release(&ib);
    return res;
}

static void Rows_dealloc(RowsObject *self)
{
    if (self->nbufs > 0)
        PyBuffer_Release(&self->xbuf);
    if (self->nbufs > 1)
        PyBuffer_Release(&self->ybuf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Rows_methods[] = {
    {"read", (PyCFunction)(void (*)(void))Rows_read, METH_FASTCALL, read_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RowsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exactbatch._core.Rows",
    .tp_basicsize = sizeof(RowsObject),
    .tp_dealloc = (destructor)Rows_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Where rows live: made by memory_rows() or file_rows().",
    .tp_methods = Rows_methods,
};

static RowsObject *new_rows(void)
{
    RowsObject *s = PyObject_New(RowsObject, &RowsType);
    if (s == NULL)
        return NULL;
    s->nbufs = 0;
    s->lo = s->hi = NULL;
    s->fd = -1;
    s->size = 0;
    s->mtime_ns = -1;
    return s;
}

/* A float64 C-contiguous 2-D array's buffer (shape needed: PyBUF_ND). */
static int matrix(PyObject *o, Py_buffer *b, const char *name)
{
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return -1;
    const char *f = b->format ? b->format : "B";
    if (*f == '=' || *f == '<' || *f == '@')
        f++;
    if (b->ndim != 2 || f[0] != 'd' || f[1] || b->itemsize != 8) {
        PyErr_Format(PyExc_TypeError, "%s must be a 2-D float64 array", name);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

static PyObject *memory_rows(PyObject *mod, PyObject *args)
{
    PyObject *x, *y;
    if (!PyArg_ParseTuple(args, "OO:memory_rows", &x, &y))
        return NULL;
    RowsObject *s = new_rows();
    if (s == NULL)
        return NULL;
    if (matrix(x, &s->xbuf, "x") < 0)
        goto fail;
    s->nbufs = 1;
    if (matrix(y, &s->ybuf, "y") < 0)
        goto fail;
    s->nbufs = 2;
    s->n = s->xbuf.shape[0];
    s->d = s->xbuf.shape[1];
    s->l = s->ybuf.shape[1];
    if (s->ybuf.shape[0] != s->n) {
        PyErr_SetString(PyExc_ValueError, "x and y must have the same number of rows");
        goto fail;
    }
    s->xbase = s->xbuf.buf;
    s->ybase = s->ybuf.buf;
    s->xstride = 8 * s->d;
    s->ystride = 8 * s->l;
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}

static PyObject *file_rows(PyObject *mod, PyObject *args)
{
    PyObject *m;
    Py_ssize_t off, n, d, l;
    int fd;
    long long size, mtime_ns;
    if (!PyArg_ParseTuple(args, "OnnnniLL:file_rows", &m, &off, &n, &d, &l, &fd, &size,
                          &mtime_ns))
        return NULL;
    if (off < 0 || n < 0 || d < 0 || l < 0) {
        PyErr_SetString(PyExc_ValueError, "file_rows: negative offset or shape");
        return NULL;
    }
    if (install_guard() < 0)
        return NULL;
    RowsObject *s = new_rows();
    if (s == NULL)
        return NULL;
    if (PyObject_GetBuffer(m, &s->xbuf, PyBUF_SIMPLE) != 0)
        goto fail;
    s->nbufs = 1;
    if (s->xbuf.len < off + n * 8 * (d + l)) {
        PyErr_SetString(PyExc_ValueError, "file_rows: the mapping is shorter than its rows");
        goto fail;
    }
    s->n = n;
    s->d = d;
    s->l = l;
    s->xbase = (const char *)s->xbuf.buf + off;
    s->ybase = s->xbase + 8 * d;
    s->xstride = s->ystride = 8 * (d + l);
    s->lo = s->xbuf.buf;
    s->hi = (const char *)s->xbuf.buf + s->xbuf.len;
    s->fd = fd;
    s->size = size;
    s->mtime_ns = mtime_ns;
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}

static PyMethodDef core_methods[] = {
    {"memory_rows", memory_rows, METH_VARARGS,
     "memory_rows(x, y)\n--\n\nRows of two float64 C-contiguous 2-D arrays (x (n, d), y (n, l))."},
    {"file_rows", file_rows, METH_VARARGS,
     "file_rows(mapping, offset, n, d, l, fd, size, mtime_ns)\n--\n\n"
     "Rows of an .ndf file's read-only mapping (x then y per row, from byte offset);\n"
     "after each copy fd must still have at least size bytes and (mtime_ns >= 0) that\n"
     "modification time. Installs the fault guard on first use."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "exactbatch._core", DOC, -1, core_methods,
};

PyMODINIT_FUNC PyInit__core(void)
{
    if (PyType_Ready(&RowsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&core_module);
    if (m == NULL)
        return NULL;
    FileChanged = PyErr_NewExceptionWithDoc(
        "exactbatch._core.FileChanged",
        "A file's rows could not be copied: it was truncated or rewritten while open.",
        PyExc_OSError, NULL);
    if (FileChanged == NULL || PyModule_AddObjectRef(m, "FileChanged", FileChanged) < 0 ||
        PyModule_AddObjectRef(m, "Rows", (PyObject *)&RowsType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
