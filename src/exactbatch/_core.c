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
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

PyDoc_STRVAR(DOC,
"The compiled kernels behind exactbatch.kernels (use that module, not this one).\n"
"\n"
"``memory_rows(x, y)`` and\n"
"``file_rows(mapping, offset, n, d, l, fd, size, mtime_ns, ctime_ns)``\n"
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
"the file. Any other fault goes to the handler this one displaced. Before every\n"
"guarded read the guard checks that it is still installed and, where another\n"
"handler took its place (faulthandler, signal.signal, a library's sigaction),\n"
"puts itself back, chaining to that handler.\n"
"After every copy from a file one ``fstat`` (with the GIL still released)\n"
"checks that the file kept its size, modification time and change time\n"
"(ctime), so a truncation inside the last page (read as zeros, no fault) or a\n"
"rewrite in place (even one whose modification time was put back) is caught\n"
"too. So the compiled path takes no read lease: the lease\n"
"(exactbatch.ndf.guard) is kept only for the pure NumPy path, which cannot\n"
"catch a fault.\n");

static PyObject *FileChanged; /* raised by read(): the caller names the file */

/* ------------------------------------------------------------------ the guard */

/* Set by a thread while it copies out of a mapping; read by the handler on the
 * same thread (the kernel delivers a fault to the thread that faulted). */
static _Thread_local sigjmp_buf *guard_jump;
static _Thread_local const char *guard_lo, *guard_hi;
/* A dataset's copy (Parts_read): the fault may lie in the range of any part it pinned
 * (guard_seen[k] == 1); the handler leaves the part's number in guard_hit. */
static _Thread_local const struct PartsObject *guard_parts;
static _Thread_local const char *guard_seen;
static _Thread_local Py_ssize_t guard_hit;
static Py_ssize_t in_parts(const struct PartsObject *p, const char *seen, const char *a);
static struct sigaction guard_action; /* on_fault, as installed */
/* The handler each of ours displaced, chained to for faults not ours: [0] SIGBUS, [1] SIGSEGV. */
static struct sigaction chained[2];
/* Set while this thread runs the chained handler (it may send the signal back to us). */
static _Thread_local int chaining;

/* End the process as the signal's default action does: reinstate it and raise again. */
static void default_action(int sig)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

static void on_fault(int sig, siginfo_t *info, void *ctx)
{
    const char *a = (const char *)info->si_addr;
    sigjmp_buf *jb = guard_jump;
    /* si_code > 0: raised by the kernel for a memory access (not kill/raise). */
    if (jb != NULL && info->si_code > 0 &&
        ((a >= guard_lo && a < guard_hi) ||
         (guard_parts != NULL && (guard_hit = in_parts(guard_parts, guard_seen, a)) >= 0))) {
        guard_jump = NULL;
        siglongjmp(*jb, 1);
    }
    /* Not ours. Raised again from inside the handler we chained to (faulthandler does,
     * after its report, and reaches us when it was installed after us): the default. */
    if (chaining && info->si_code <= 0) {
        chaining = 0;
        default_action(sig);
        return;
    }
    const struct sigaction *old = &chained[sig == SIGBUS ? 0 : 1];
    if (old->sa_flags & SA_SIGINFO) {
        chaining = 1;
        old->sa_sigaction(sig, info, ctx);
        chaining = 0;
    } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        chaining = 1;
        old->sa_handler(sig);
        chaining = 0;
        /* Told no address, it cannot have repaired a real fault (CPython's handler only
         * sets a flag for Python code to see later): returning would fault again,
         * forever. */
        if (info->si_code > 0)
            default_action(sig);
    } else if (old->sa_handler == SIG_DFL || info->si_code > 0) {
        default_action(sig); /* a fault cannot be ignored */
    }
}

/* Make on_fault the handler of SIGBUS and SIGSEGV, keeping the handler it displaces
 * as the one to chain to. Called when a mapping is first read and before every
 * guarded copy, with the GIL held (so never on two threads at once): a handler
 * installed after ours (faulthandler.enable(), signal.signal, another library's
 * sigaction) would otherwise receive our copies' faults and end the process, or
 * return into the faulting copy forever. When nothing changed it costs one query
 * (a system call): of SIGBUS, the signal a truncated file raises, and of SIGSEGV
 * too when SIGBUS was displaced (handlers come in pairs; a copy from a mapping it
 * holds cannot raise SIGSEGV, so that one is defence only). SA_NODEFER: the signal
 * stays unblocked inside the handler, so after siglongjmp the mask is as before and
 * sigsetjmp need not save it (a system call). */
static int ensure_guard(void)
{
    static const int sigs[2] = {SIGBUS, SIGSEGV};
    if (guard_action.sa_sigaction == NULL) { /* the first call: both are checked */
        guard_action.sa_sigaction = on_fault;
        guard_action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
        sigemptyset(&guard_action.sa_mask);
    } else {
        struct sigaction cur;
        if (sigaction(SIGBUS, NULL, &cur) != 0)
            goto fail;
        if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_fault)
            return 0;
    }
    for (int i = 0; i < 2; i++) {
        struct sigaction cur;
        if (sigaction(sigs[i], NULL, &cur) != 0)
            goto fail;
        if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_fault)
            continue;
        chained[i] = cur; /* on_fault is not installed: no handler reads it now */
        if (sigaction(sigs[i], &guard_action, NULL) != 0)
            goto fail;
    }
    return 0;
fail:
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
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
    long long size, mtime_ns, ctime_ns; /* what the file had when opened (< 0: unchecked) */
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

/* The copy loops are also built for AVX2, chosen at load time where the CPU has it
 * (gcc's function multiversioning, on x86-64 with glibc): the float32 cast then converts
 * four values an instruction instead of two. */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__clang__)
#define WIDE __attribute__((target_clones("avx2", "default")))
#else
#define WIDE
#endif

/* One row of w values from src to dst, as float64 (libc's memcpy: as fast as
 * any loop for a row, and values in an .ndf sit at offset 28, not 8-aligned)
 * or float32 (each value loaded with memcpy, which the compiler makes an
 * unaligned load). */
static inline void copy_row(char *restrict dst, const char *restrict src, Py_ssize_t w, int f32)
{
    if (!f32) {
        /* A narrow row (a label) in a few moves: a call to memcpy costs more than the
         * copy (a loop of 8-byte copies, gcc makes into a call to memmove). */
        switch (w) {
        case 1:
            memcpy(dst, src, 8);
            return;
        case 2:
            memcpy(dst, src, 16);
            return;
        case 3:
            memcpy(dst, src, 24);
            return;
        case 4:
            memcpy(dst, src, 32);
            return;
        default:
            memcpy(dst, src, (size_t)(8 * w));
            return;
        }
    }
    /* restrict: the stores cannot change the source, so the loop vectorises */
    float *restrict o = (float *)dst;
    if (w == 1) { /* a label: no loop to set up */
        double v;
        memcpy(&v, src, 8);
        o[0] = (float)v;
        return;
    }
    for (Py_ssize_t c = 0; c < w; c++) {
        double v;
        memcpy(&v, src + 8 * c, 8);
        o[c] = (float)v;
    }
}

/* One side (x or y) of rows ix[0..r) (ix NULL: start, start+1, ...): w values a
 * row, at base + row * stride, into out. x and y in arrays of their own (and
 * sorted batches) are copied in two passes, each a plain loop of independent
 * loads, which the CPU overlaps well; shuffled rows holding y just after x go
 * through both64 (below) instead. Looking for runs row by row made it slower,
 * so ``runs`` says whether the batch starts with one; wide rows are prefetched
 * a few rows ahead. A run of consecutive rows, where the layout holds them
 * back to back (x or y in memory), is one memcpy. */
#define PREFETCH 16 /* rows ahead */
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

/* Both sides of rows ix[0..r) where y follows x in each row (an .ndf file, a
 * shuffle buffer's whole rows): one pass, each row's x then its y, so a row
 * missing the cache is fetched once, not once a side (measured 1.2x-1.4x
 * faster on shuffled rows than two passes). */
#define DEFINE_BOTH(NAME, T)                                                              \
    WIDE static void NAME(const T *ix, Py_ssize_t r, const char *base, Py_ssize_t stride,   \
                          Py_ssize_t d, Py_ssize_t l, char *ox, char *oy, int f32)         \
    {                                                                                     \
        Py_ssize_t bx = d * (f32 ? 4 : 8), by = l * (f32 ? 4 : 8), yoff = 8 * d;          \
        Py_ssize_t k = 0;                                                                 \
        if (d + l > 4)                                                                    \
            for (; k + PREFETCH < r; k++) {                                               \
                const char *ahead = base + (int64_t)ix[k + PREFETCH] * stride;            \
                __builtin_prefetch(ahead);                                                \
                __builtin_prefetch(ahead + 8 * (d + l) - 1);                              \
                const char *src = base + (int64_t)ix[k] * stride;                         \
                copy_row(ox + k * bx, src, d, f32);                                       \
                copy_row(oy + k * by, src + yoff, l, f32);                                \
            }                                                                             \
        for (; k < r; k++) {                                                              \
            const char *src = base + (int64_t)ix[k] * stride;                             \
            copy_row(ox + k * bx, src, d, f32);                                           \
            copy_row(oy + k * by, src + yoff, l, f32);                                    \
        }                                                                                 \
    }
DEFINE_BOTH(both32, int32_t)
DEFINE_BOTH(both64, int64_t)

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
    if (j->idx != NULL && !runs && s->d && s->l && s->ybase == s->xbase + 8 * s->d &&
        s->ystride == s->xstride) { /* y follows x in each row */
        if (j->isz == 4)
            both32(j->idx, j->r, s->xbase, s->xstride, s->d, s->l, j->ox, j->oy, j->f32);
        else
            both64(j->idx, j->r, s->xbase, s->xstride, s->d, s->l, j->ox, j->oy, j->f32);
        return;
    }
    if (s->d)
        copy_side(j, s->xbase, s->xstride, s->d, j->ox, runs);
    if (s->l)
        copy_side(j, s->ybase, s->ystride, s->l, j->oy, runs);
}

#ifdef __APPLE__
#define STAT_NS(st, which) ((long long)(st).st_##which##timespec.tv_sec * 1000000000LL + \
                            (st).st_##which##timespec.tv_nsec)
#else
#define STAT_NS(st, which) ((long long)(st).st_##which##tim.tv_sec * 1000000000LL + \
                            (st).st_##which##tim.tv_nsec)
#endif

/* Has the file of rows s lost bytes, or changed its modification time or change time
 * (ctime) since opened? One fstat; 0 in memory. The rule is exactbatch.ndf.local's
 * LocalHandle.check_size (see there): a ctime moved by the last link going (the file
 * deleted, or replaced by a rename over its path) is no change. */
static int file_changed(const RowsObject *s)
{
    if (s->fd < 0)
        return 0;
    struct stat st;
    if (fstat(s->fd, &st) != 0 || (long long)st.st_size < s->size)
        return 1;
    return (s->mtime_ns >= 0 && STAT_NS(st, m) != s->mtime_ns) ||
           (s->ctime_ns >= 0 && st.st_nlink > 0 && STAT_NS(st, c) != s->ctime_ns);
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
    return file_changed(s) ? -2 : 0;
}

/* 8 * (d + l), the bytes of a row of d features and l labels, in *row; -1 with an
 * OverflowError naming who and the widths when it does not fit (every size below is
 * computed from it with checked arithmetic too: a wrapped size would let a read run
 * past its buffer). */
static int row_size(const char *who, Py_ssize_t d, Py_ssize_t l, Py_ssize_t *row)
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

/* The rows argument of read(): a slice of [0, n) or a 1-D int32/int64 buffer (then
 * held in *ib, *have_i = 1: release it). 0, or -1 with an exception set. */
static int parse_rows(PyObject *o, Py_ssize_t n, Job *j, Py_buffer *ib, int *have_i)
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
    *have_i = 1;
    const char *f = ib->format ? ib->format : "B";
    if (*f == '=' || *f == '<' || *f == '@')
        f++;
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
static int parse_outs(PyObject *ox, PyObject *oy, Py_ssize_t d, Py_ssize_t l, Job *j,
                      Py_buffer *bx, Py_buffer *by)
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
    if (bx->itemsize != by->itemsize) {
        PyErr_SetString(PyExc_TypeError, "out_x and out_y must have the same dtype");
    } else if (over || bx->len != want_x || by->len != want_y) {
        PyErr_Format(PyExc_ValueError, "out_x and out_y must hold (%zd, %zd) and (%zd, %zd) "
                     "values", j->r, d, j->r, l);
    } else {
        j->ox = bx->buf;
        j->oy = by->buf;
        j->f32 = bx->itemsize == 4;
        return 0;
    }
    PyBuffer_Release(bx);
    PyBuffer_Release(by);
    return -1;
}

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

    if (parse_rows(args[0], self->n, &j, &ib, &have_i) < 0 ||
        parse_outs(args[1], args[2], self->d, self->l, &j, &bx, &by) < 0)
        goto done;
    if (self->lo != NULL && ensure_guard() < 0)
        goto release;
    Py_BEGIN_ALLOW_THREADS
    rc = guarded_copy(self, &j);
    Py_END_ALLOW_THREADS
    if (rc == -1) {
        PyErr_SetString(FileChanged, "a copy from the file's mapping faulted (truncated?)");
    } else if (rc == -2) {
        PyErr_SetString(FileChanged, "the file's size, modification time or ctime changed");
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
    s->mtime_ns = s->ctime_ns = -1;
    return s;
}

/* A float64 2-D array's buffer whose rows are each contiguous, one stride apart
 * (a C-contiguous array, or the columns [a:b] of one: a shuffle buffer's x and y
 * are views of its whole rows); *stride: bytes from one row to the next. */
static int matrix(PyObject *o, Py_buffer *b, const char *name, Py_ssize_t *stride)
{
    if (PyObject_GetBuffer(o, b, PyBUF_STRIDES | PyBUF_FORMAT) != 0)
        return -1;
    const char *f = b->format ? b->format : "B";
    if (*f == '=' || *f == '<' || *f == '@')
        f++;
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

static PyObject *memory_rows(PyObject *mod, PyObject *args)
{
    PyObject *x, *y;
    if (!PyArg_ParseTuple(args, "OO:memory_rows", &x, &y))
        return NULL;
    RowsObject *s = new_rows();
    if (s == NULL)
        return NULL;
    if (matrix(x, &s->xbuf, "x", &s->xstride) < 0)
        goto fail;
    s->nbufs = 1;
    if (matrix(y, &s->ybuf, "y", &s->ystride) < 0)
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
    if (ensure_guard() < 0)
        return NULL;
    RowsObject *s = new_rows();
    if (s == NULL)
        return NULL;
    if (PyObject_GetBuffer(m, &s->xbuf, PyBUF_SIMPLE) != 0)
        goto fail;
    s->nbufs = 1;
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

static PyObject *map_file(PyObject *mod, PyObject *args)
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

/* ------------------------------------------------------------------ a dataset's parts */

/* The rows of a sharded dataset: part k, a file_rows object set while the part is
 * open (a dataset keeps a bounded number open: set, then unset to close one), holds
 * global rows [starts[k], starts[k + 1]). */
typedef struct PartsObject {
    PyObject_HEAD
    Py_ssize_t nparts, n, d, l;
    int64_t *starts; /* nparts + 1 */
    int32_t *table;  /* table[b]: the part of row b << shift (a row's part in a step or two) */
    Py_ssize_t buckets;
    int shift;
    RowsObject **parts;
    /* where global row i of part k lies: origin[k] + i * stride (0: part k not set) */
    uintptr_t *origin;
    Py_ssize_t stride;
    /* pins[k]: reads copying from part k now (without the GIL); unset(k) adds CLOSING
     * while it takes the part away, which it does only when no read holds it */
    int64_t *pins;
} PartsObject;

#define CLOSING ((int64_t)1 << 40)

/* Hold part q for one read: 1 when it is set (then unpin it after the copy; until
 * then unset() leaves it, so its mapping and origin stay), else 0 (nothing held). */
static inline int pin(const PartsObject *p, Py_ssize_t q)
{
    if (__atomic_fetch_add(&p->pins[q], 1, __ATOMIC_ACQ_REL) < CLOSING &&
        __atomic_load_n(&p->parts[q], __ATOMIC_ACQUIRE) != NULL)
        return 1;
    __atomic_fetch_sub(&p->pins[q], 1, __ATOMIC_RELEASE);
    return 0;
}

/* Let go of the parts a read pinned (seen[q] == 1). */
static void unpin(const PartsObject *p, const char *seen)
{
    for (Py_ssize_t q = 0; q < p->nparts; q++)
        if (seen[q] == 1)
            __atomic_fetch_sub(&p->pins[q], 1, __ATOMIC_RELEASE);
}

/* The part (pinned by this read: seen[k] == 1) whose mapping holds address a, or -1.
 * (The fault handler's test: reads only, and a pinned part cannot go meanwhile.) */
static Py_ssize_t in_parts(const PartsObject *p, const char *seen, const char *a)
{
    for (Py_ssize_t k = 0; k < p->nparts; k++) {
        const RowsObject *s = seen[k] == 1 ? p->parts[k] : NULL;
        if (s != NULL && a >= s->lo && a < s->hi)
            return k;
    }
    return -1;
}

/* The part that holds global row i (0 <= i < n): the last part whose first row is
 * at most i (an empty part never is: the part after it starts at the same row).
 * A binary search (to build the table) and the table's lookup (per row: a branch
 * mispredicted per step of a search costs more than the copy of a row). */
static Py_ssize_t part_search(const PartsObject *p, int64_t i, Py_ssize_t lo, Py_ssize_t hi)
{
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi + 1) / 2;
        if (p->starts[mid] <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static inline Py_ssize_t part_of(const PartsObject *p, int64_t i)
{
    int64_t b = i >> p->shift;
    Py_ssize_t q = p->table[b], last = b + 1 < p->buckets ? p->table[b + 1] : p->nparts - 1;
    if (last - q > 4) /* many small parts in one bucket: search them */
        return part_search(p, i, q, last);
    while (p->starts[q + 1] <= i)
        q++;
    return q;
}

/* Check and place rows ix[0..r) (ix NULL: start, start+1, ...): src[k] is where row
 * k lies in its part's mapping, and seen[q] is 1 for a part touched and pinned (set:
 * unpin it after), 2 for one touched and not set (src then unusable). The first row
 * out of range: *bad (and 0 is returned); else 1 if a part is not set, or 2. */
#define DEFINE_PLACE(NAME, T)                                                               \
    static int NAME(const PartsObject *p, const T *ix, Py_ssize_t start, Py_ssize_t r,      \
                    const char **src, char *seen, Py_ssize_t *bad)                          \
    {                                                                                       \
        int missing = 0;                                                                    \
        if (ix != NULL && p->nparts <= 64) { /* the parts touched as a bitmask: no branch */ \
            /* Rows are placed by a copy of the origins, then the parts touched pinned:  */ \
            /* a part closed and opened again in between (moved) means once more.       */ \
            uintptr_t org[64];                                                              \
            for (int pinned = 0;; pinned = 1) {                                             \
                uint64_t touched = 0, over = 0, moved = 0;                                  \
                for (Py_ssize_t q = 0; q < p->nparts; q++)                                  \
                    org[q] = __atomic_load_n(&p->origin[q], __ATOMIC_RELAXED);              \
                for (Py_ssize_t k = 0; k < r; k++) {                                        \
                    int64_t i = (int64_t)ix[k];                                             \
                    over |= (uint64_t)i >= (uint64_t)p->n;                                  \
                    Py_ssize_t q = part_of(p, over ? 0 : i);                                \
                    touched |= (uint64_t)1 << q;                                            \
                    src[k] = (const char *)(org[q] + (uintptr_t)i * (uintptr_t)p->stride);  \
                }                                                                           \
                if (over) {                                                                 \
                    for (Py_ssize_t k = 0; k < r; k++)                                      \
                        if ((uint64_t)(int64_t)ix[k] >= (uint64_t)p->n) {                   \
                            *bad = k;                                                       \
                            break;                                                          \
                        }                                                                   \
                    return 0;                                                               \
                }                                                                           \
                for (Py_ssize_t q = 0; q < p->nparts; q++)                                  \
                    if (touched >> q & 1) {                                                 \
                        if (!pinned) {                                                      \
                            seen[q] = pin(p, q) ? 1 : 2;                                    \
                            missing |= seen[q] == 2;                                        \
                        }                                                                   \
                        moved |= org[q] != __atomic_load_n(&p->origin[q], __ATOMIC_RELAXED); \
                    }                                                                       \
                if (missing)                                                                \
                    return 1;                                                               \
                if (!moved)                                                                 \
                    return 2;                                                               \
            }                                                                               \
        }                                                                                   \
        for (Py_ssize_t k = 0; k < r; k++) {                                                \
            int64_t i = ix == NULL ? start + k : (int64_t)ix[k];                            \
            if ((uint64_t)i >= (uint64_t)p->n) {                                            \
                *bad = k;                                                                   \
                return 0;                                                                   \
            }                                                                               \
            Py_ssize_t q = part_of(p, i);                                                   \
            if (!seen[q]) { /* pinned before its origin is read: it stays */                \
                seen[q] = pin(p, q) ? 1 : 2;                                                \
                missing |= seen[q] == 2;                                                    \
            }                                                                               \
            src[k] = (const char *)(p->origin[q] + (uintptr_t)i * (uintptr_t)p->stride);    \
        }                                                                                   \
        return missing ? 1 : 2;                                                             \
    }
DEFINE_PLACE(place32, int32_t)
DEFINE_PLACE(place64, int64_t)

/* Rows of j, by global row number, straight from their parts' mappings into the
 * outputs. Every row is checked and placed first, pinning the parts touched (see
 * place32), then copied under the guard (each row's x then its y, as in both64),
 * then each part touched is checked with one fstat, then unpinned. 0: copied (or
 * j->bad >= 0: a row out of range, nothing copied); 1: parts not set (seen == 2),
 * nothing copied; -1: a copy faulted (in part *which, or -1 if unknown); -2: part
 * *which changed. */
static int parts_copy(const PartsObject *p, Job *j, const char **src, char *seen,
                      Py_ssize_t *which);
WIDE static int parts_copy_pinned(const PartsObject *p, Job *j, const char **src,
                                  char *seen, Py_ssize_t *which)
{
    int placed = j->isz == 4 ? place32(p, j->idx, j->start, j->r, src, seen, &j->bad)
                             : place64(p, j->idx, j->start, j->r, src, seen, &j->bad);
    if (placed != 2)
        return placed;
    Py_ssize_t ox = p->d * (j->f32 ? 4 : 8), oy = p->l * (j->f32 ? 4 : 8), yoff = 8 * p->d;
    sigjmp_buf jb;
    if (sigsetjmp(jb, 0)) {
        guard_jump = NULL;
        guard_parts = NULL;
        *which = guard_hit;
        return -1;
    }
    guard_lo = guard_hi = NULL; /* a fault counts only in this read's parts */
    guard_hit = -1;
    guard_parts = p;
    guard_seen = seen;
    guard_jump = &jb;
    /* One pass, as in both64: y follows x in a part's row */
    for (Py_ssize_t k = 0; k < j->r; k++) {
        if (k + PREFETCH < j->r) { /* as in copy_side: the row PREFETCH rows ahead */
            __builtin_prefetch(src[k + PREFETCH]);
            __builtin_prefetch(src[k + PREFETCH] + 8 * (p->d + p->l) - 1);
        }
        if (p->d)
            copy_row(j->ox + k * ox, src[k], p->d, j->f32);
        if (p->l)
            copy_row(j->oy + k * oy, src[k] + yoff, p->l, j->f32);
    }
    guard_jump = NULL;
    guard_parts = NULL;
    for (Py_ssize_t q = 0; q < p->nparts; q++)
        if (seen[q] == 1 && file_changed(p->parts[q])) {
            *which = q;
            return -2;
        }
    return 0;
}

static int parts_copy(const PartsObject *p, Job *j, const char **src, char *seen,
                      Py_ssize_t *which)
{
    int rc = parts_copy_pinned(p, j, src, seen, which);
    unpin(p, seen);
    return rc;
}

PyDoc_STRVAR(parts_read_doc,
"read(rows, out_x, out_y)\n--\n\n"
"As Rows.read, over the dataset's global rows [0, n). Returns None when copied,\n"
"or, copying nothing, the list of the parts the rows lie in that are not set\n"
"(set them, then read again). IndexError for a row outside [0, n); FileChanged\n"
"(with the part's number as its ``part`` attribute, None where a fault cannot\n"
"say) when a part changed.");

static PyObject *Parts_read(PartsObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "read(rows, out_x, out_y) takes 3 arguments");
        return NULL;
    }
    Job j = {NULL, 8, 0, 0, NULL, NULL, 0, -1};
    Py_buffer ib = {0}, bx = {0}, by = {0};
    int have_i = 0, rc = 0;
    Py_ssize_t which = -1;
    PyObject *res = NULL;
    const char **src = NULL;
    char *seen = NULL;

    if (parse_rows(args[0], self->n, &j, &ib, &have_i) < 0 ||
        parse_outs(args[1], args[2], self->d, self->l, &j, &bx, &by) < 0)
        goto done;
    size_t cells;
    if (!__builtin_mul_overflow((size_t)(j.r ? j.r : 1), sizeof(const char *), &cells))
        src = PyMem_RawMalloc(cells);
    seen = PyMem_RawCalloc((size_t)self->nparts, 1);
    if (src == NULL || seen == NULL) {
        PyErr_NoMemory();
        goto release;
    }
    if (ensure_guard() < 0)
        goto release;
    Py_BEGIN_ALLOW_THREADS
    rc = parts_copy(self, &j, src, seen, &which);
    Py_END_ALLOW_THREADS
    if (rc == 1) {
        res = PyList_New(0);
        for (Py_ssize_t q = 0; res != NULL && q < self->nparts; q++) {
            if (seen[q] != 2)
                continue;
            PyObject *k = PyLong_FromSsize_t(q);
            if (k == NULL || PyList_Append(res, k) < 0)
                Py_CLEAR(res);
            Py_XDECREF(k);
        }
    } else if (rc < 0) {
        PyObject *exc = PyObject_CallFunction(
            FileChanged, "s",
            rc == -1 ? "a copy from a part's mapping faulted (truncated?)"
                     : "a part's size, modification time or ctime changed");
        PyObject *part = which >= 0 ? PyLong_FromSsize_t(which) : Py_NewRef(Py_None);
        if (exc != NULL && part != NULL && PyObject_SetAttrString(exc, "part", part) == 0)
            PyErr_SetObject(FileChanged, exc);
        Py_XDECREF(part);
        Py_XDECREF(exc);
    } else if (j.bad >= 0) {
        PyErr_Format(PyExc_IndexError, "row %lld out of range for n=%zd rows",
                     (long long)row_at(&j, j.bad), self->n);
    } else {
        res = Py_NewRef(Py_None);
    }
release:
    PyMem_RawFree(src);
    PyMem_RawFree(seen);
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
done:
    if (have_i)
        PyBuffer_Release(&ib);
    return res;
}

static PyObject *Parts_set(PartsObject *self, PyObject *args)
{
    Py_ssize_t k;
    PyObject *o;
    if (!PyArg_ParseTuple(args, "nO:set", &k, &o))
        return NULL;
    if (k < 0 || k >= self->nparts) {
        PyErr_Format(PyExc_IndexError, "part %zd out of range for %zd parts", k, self->nparts);
        return NULL;
    }
    if (!PyObject_TypeCheck(o, &RowsType) || ((RowsObject *)o)->lo == NULL) {
        PyErr_SetString(PyExc_TypeError, "set(k, rows): rows must come from file_rows()");
        return NULL;
    }
    RowsObject *s = (RowsObject *)o;
    if (s->d != self->d || s->l != self->l || s->n != self->starts[k + 1] - self->starts[k]) {
        PyErr_Format(PyExc_ValueError, "part %zd must hold (%lld, %zd, %zd) rows; got (%zd, "
                     "%zd, %zd)", k, (long long)(self->starts[k + 1] - self->starts[k]),
                     self->d, self->l, s->n, s->d, s->l);
        return NULL;
    }
    /* Only where not set: a read on another thread (without the GIL) may be using it. */
    if (self->parts[k] == NULL) {
        /* global row i lies at xbase + (i - starts[k]) * stride: one origin a part
         * (unsigned, wrapping: it may lie below the mapping) saves a load a row */
        self->origin[k] = (uintptr_t)s->xbase - (uintptr_t)self->starts[k] * (uintptr_t)s->xstride;
        __atomic_store_n(&self->parts[k], (RowsObject *)Py_NewRef(o), __ATOMIC_RELEASE);
    }
    else if (self->parts[k] != s) {
        PyErr_Format(PyExc_ValueError, "part %zd is set already", k);
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(parts_unset_doc,
"unset(k)\n--\n\n"
"Let go of part k's rows (the part is being closed): True when done (or it was not\n"
"set), False while a read on another thread is copying from it (try again later).");

static PyObject *Parts_unset(PartsObject *self, PyObject *arg)
{
    Py_ssize_t k = PyLong_AsSsize_t(arg);
    if (k == -1 && PyErr_Occurred())
        return NULL;
    if (k < 0 || k >= self->nparts) {
        PyErr_Format(PyExc_IndexError, "part %zd out of range for %zd parts", k, self->nparts);
        return NULL;
    }
    int64_t idle = 0;
    if (!__atomic_compare_exchange_n(&self->pins[k], &idle, CLOSING, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        Py_RETURN_FALSE;
    RowsObject *old = self->parts[k];
    __atomic_store_n(&self->parts[k], NULL, __ATOMIC_RELEASE);
    __atomic_fetch_sub(&self->pins[k], CLOSING, __ATOMIC_RELEASE);
    Py_XDECREF(old);
    Py_RETURN_TRUE;
}

static void Parts_dealloc(PartsObject *self)
{
    for (Py_ssize_t k = 0; self->parts != NULL && k < self->nparts; k++)
        Py_XDECREF(self->parts[k]);
    PyMem_Free(self->parts);
    PyMem_Free(self->starts);
    PyMem_Free(self->table);
    PyMem_Free(self->origin);
    PyMem_Free(self->pins);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Parts_methods[] = {
    {"read", (PyCFunction)(void (*)(void))Parts_read, METH_FASTCALL, parts_read_doc},
    {"set", (PyCFunction)Parts_set, METH_VARARGS,
     "set(k, rows)\n--\n\nPart k's rows (a file_rows object), once the part is open; keep\n"
     "the file open (its descriptor is checked after each copy) until unset(k)."},
    {"unset", (PyCFunction)Parts_unset, METH_O, parts_unset_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PartsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exactbatch._core.Parts",
    .tp_basicsize = sizeof(PartsObject),
    .tp_dealloc = (destructor)Parts_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A sharded dataset's rows: made by parts_rows().",
    .tp_methods = Parts_methods,
};

static PyObject *parts_rows(PyObject *mod, PyObject *args)
{
    PyObject *o;
    Py_ssize_t d, l;
    if (!PyArg_ParseTuple(args, "Onn:parts_rows", &o, &d, &l))
        return NULL;
    Py_ssize_t row;
    if (d < 0 || l < 0) {
        PyErr_SetString(PyExc_ValueError, "parts_rows: negative widths");
        return NULL;
    }
    if (row_size("parts_rows", d, l, &row) < 0)
        return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(o, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return NULL;
    const char *f = b.format ? b.format : "B";
    if (*f == '=' || *f == '<' || *f == '@')
        f++;
    Py_ssize_t m = b.len / (b.itemsize ? b.itemsize : 1);
    if (b.ndim != 1 || !strchr("lq", f[0]) || f[1] || b.itemsize != 8 || m < 2) {
        PyErr_SetString(PyExc_TypeError, "parts_rows: starts must be a 1-D int64 array of the "
                         "parts' first rows and n last (at least one part)");
        PyBuffer_Release(&b);
        return NULL;
    }
    if (m - 1 > INT32_MAX) { /* the table holds parts as int32 */
        PyErr_Format(PyExc_ValueError, "parts_rows: at most %d parts; got %zd", INT32_MAX, m - 1);
        PyBuffer_Release(&b);
        return NULL;
    }
    const int64_t *st = b.buf;
    for (Py_ssize_t k = 0; k < m; k++)
        if ((k == 0 && st[0] != 0) || (k > 0 && st[k] < st[k - 1])) {
            PyErr_SetString(PyExc_ValueError, "parts_rows: starts must rise from 0");
            PyBuffer_Release(&b);
            return NULL;
        }
    if (ensure_guard() < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    PartsObject *p = PyObject_New(PartsObject, &PartsType);
    if (p == NULL) {
        PyBuffer_Release(&b);
        return NULL;
    }
    p->starts = NULL;
    p->table = NULL;
    p->parts = NULL;
    p->origin = NULL;
    p->pins = NULL;
    p->stride = row;
    p->nparts = m - 1;
    p->n = (Py_ssize_t)st[m - 1];
    p->d = d;
    p->l = l;
    /* Buckets of 2**shift rows: about 4 per part, so a row's part is the bucket's
     * first part or one of the few after it. */
    int shift = 0;
    while ((((int64_t)st[m - 1] - 1) >> shift) + 1 > 4 * (int64_t)m + 64)
        shift++;
    Py_ssize_t buckets = st[m - 1] > 0 ? (Py_ssize_t)(((int64_t)st[m - 1] - 1) >> shift) + 1 : 1;
    p->shift = shift;
    p->buckets = buckets;
    p->starts = PyMem_Malloc((size_t)m * sizeof(int64_t));
    p->table = PyMem_Malloc((size_t)buckets * sizeof(int32_t));
    p->parts = PyMem_Calloc((size_t)(m - 1), sizeof(RowsObject *));
    p->origin = PyMem_Calloc((size_t)(m - 1), sizeof(uintptr_t));
    p->pins = PyMem_Calloc((size_t)(m - 1), sizeof(int64_t));
    if (p->starts == NULL || p->table == NULL || p->parts == NULL || p->origin == NULL ||
        p->pins == NULL) {
        PyBuffer_Release(&b);
        Py_DECREF(p);
        return PyErr_NoMemory();
    }
    memcpy(p->starts, st, (size_t)m * sizeof(int64_t));
    PyBuffer_Release(&b);
    for (Py_ssize_t k = 0; k < buckets; k++)
        p->table[k] = (int32_t)part_search(p, (int64_t)k << shift, 0, p->nparts - 1);
    return (PyObject *)p;
}

/* ------------------------------------------------------------------ the keyed bijection */

/* Division of uint64 by an invariant divisor as a multiply and shifts (libdivide's
 * unsigned 64-bit algorithm): exactly t / d, as NumPy's floor_divide gives it (which
 * itself divides by a scalar this way), at a fraction of a hardware division's cost. */
typedef struct {
    uint64_t magic; /* 0: d is a power of two, shift only */
    uint8_t shift;
    uint8_t add;    /* the 65-bit magic's case: one more add and shift */
} Divisor;

static Divisor divisor_of(uint64_t d)
{
    Divisor v = {0, 0, 0};
    int l = 63 - __builtin_clzll(d); /* floor(log2 d) */
    if ((d & (d - 1)) == 0) {
        v.shift = (uint8_t)l;
        return v;
    }
    unsigned __int128 num = (unsigned __int128)((uint64_t)1 << l) << 64;
    uint64_t m = (uint64_t)(num / d), rem = (uint64_t)(num % d);
    if (d - rem < ((uint64_t)1 << l)) {
        v.shift = (uint8_t)l;
    } else {
        m += m;
        uint64_t twice = rem + rem;
        if (twice >= d || twice < rem)
            m += 1;
        v.shift = (uint8_t)l;
        v.add = 1;
    }
    v.magic = m + 1;
    return v;
}

static inline uint64_t divide(uint64_t t, const Divisor *v)
{
    if (v->magic == 0)
        return t >> v->shift;
    uint64_t h = (uint64_t)(((unsigned __int128)v->magic * t) >> 64);
    if (v->add)
        return ((((t - h) >> 1) + h) >> v->shift);
    return h >> v->shift;
}

#define MAX_ROUNDS 16

/* exactbatch.order.bijection's EpochBijection, position by position (see there for
 * what it is and promises): the rectangle p x q, a Feistel network of keyed
 * rounds, and cycle walking down to [0, n). Gives exactly the NumPy path's rows. */
typedef struct {
    PyObject_HEAD
    uint64_t n, q;
    int swap01, rounds;
    Divisor byq;
    int into_high[MAX_ROUNDS];
    uint64_t key[MAX_ROUNDS], mult[MAX_ROUNDS], mod[MAX_ROUNDS];
    Divisor div[MAX_ROUNDS];
} BijectionObject;

static inline uint64_t bij_permute(const BijectionObject *b, uint64_t x)
{
    uint64_t high = divide(x, &b->byq), low = x - high * b->q;
    for (int r = 0; r < b->rounds; r++) { /* selects, not pointers: all in registers */
        int up = b->into_high[r];
        uint64_t src = up ? low : high, dst = up ? high : low;
        uint64_t t = (src ^ b->key[r]) * b->mult[r];
        t = divide(t * t, &b->div[r]) + dst; /* dst + F, F in [0, mod) */
        uint64_t u = t - b->mod[r];
        dst = u < t ? u : t; /* (dst + F) mod `mod` */
        high = up ? dst : high;
        low = up ? low : dst;
    }
    return high * b->q + low;
}

static inline uint64_t bij_row(const BijectionObject *b, uint64_t x)
{
    if (b->swap01 && x < 2)
        x ^= 1;
    uint64_t y = bij_permute(b, x);
    while (y >= b->n) /* cycle walking: the few cells past n */
        y = bij_permute(b, y);
    return y;
}

/* Rows of the LANES positions x[0..LANES) in place: the rounds of LANES positions
 * side by side, so the CPU overlaps their chains of multiplies (one position's
 * rounds depend on each other; different positions' do not). */
#define LANES 8
static void bij_lanes(const BijectionObject *b, uint64_t *x)
{
    uint64_t high[LANES], low[LANES];
    for (int j = 0; j < LANES; j++) {
        uint64_t v = b->swap01 && x[j] < 2 ? x[j] ^ 1 : x[j];
        high[j] = divide(v, &b->byq);
        low[j] = v - high[j] * b->q;
    }
    for (int r = 0; r < b->rounds; r++) {
        const uint64_t key = b->key[r], mult = b->mult[r], mod = b->mod[r];
        const Divisor div = b->div[r];
        uint64_t *src = b->into_high[r] ? low : high, *dst = b->into_high[r] ? high : low;
        for (int j = 0; j < LANES; j++) {
            uint64_t t = (src[j] ^ key) * mult;
            t = divide(t * t, &div) + dst[j];
            uint64_t u = t - mod;
            dst[j] = u < t ? u : t;
        }
    }
    for (int j = 0; j < LANES; j++) {
        uint64_t y = high[j] * b->q + low[j];
        while (y >= b->n)
            y = bij_permute(b, y);
        x[j] = y;
    }
}

/* Rows of positions x[0..r) in place. */
static void bij_map(const BijectionObject *b, uint64_t *x, Py_ssize_t r)
{
    Py_ssize_t k = 0;
    for (; k + LANES <= r; k += LANES)
        bij_lanes(b, x + k);
    for (; k < r; k++)
        x[k] = bij_row(b, x[k]);
}

/* A writable 1-D array of 64-bit integers, held in *b (release it); -1 with a
 * TypeError naming ``what`` otherwise. */
static int u64_buffer(PyObject *o, Py_buffer *b, const char *what)
{
    if (PyObject_GetBuffer(o, b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return -1;
    const char *f = b->format ? b->format : "B";
    if (*f == '=' || *f == '<' || *f == '@')
        f++;
    if (b->ndim != 1 || !strchr("lqLQ", f[0]) || f[1] || b->itemsize != 8) {
        PyBuffer_Release(b);
        PyErr_Format(PyExc_TypeError, "%s must be a 1-D int64 or uint64 array", what);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(bij_rows_doc,
"rows(start, out)\n--\n\n"
"Fill ``out`` (a 1-D int64 array of r values) with the rows of positions\n"
"start .. start + r - 1 (all in [0, n): checked by the caller).");

static PyObject *Bijection_rows(BijectionObject *self, PyObject *args)
{
    unsigned long long start;
    PyObject *o;
    if (!PyArg_ParseTuple(args, "KO:rows", &start, &o))
        return NULL;
    Py_buffer b;
    if (u64_buffer(o, &b, "rows(start, out): out") < 0)
        return NULL;
    Py_ssize_t r = b.len / 8;
    uint64_t *out = b.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < r; k++)
        out[k] = (uint64_t)start + (uint64_t)k;
    bij_map(self, out, r);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(bij_map_doc,
"map(positions)\n--\n\n"
"Replace each value of ``positions`` (a 1-D uint64 or int64 array, each in [0, n):\n"
"checked by the caller) by its row.");

static PyObject *Bijection_map(BijectionObject *self, PyObject *o)
{
    Py_buffer b;
    if (u64_buffer(o, &b, "map(positions): positions") < 0)
        return NULL;
    Py_ssize_t r = b.len / 8;
    uint64_t *x = b.buf;
    Py_BEGIN_ALLOW_THREADS
    bij_map(self, x, r);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    Py_RETURN_NONE;
}

static PyMethodDef Bijection_methods[] = {
    {"rows", (PyCFunction)Bijection_rows, METH_VARARGS, bij_rows_doc},
    {"map", (PyCFunction)Bijection_map, METH_O, bij_map_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BijectionType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exactbatch._core.Bijection",
    .tp_basicsize = sizeof(BijectionObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An epoch's keyed bijection: made by bijection().",
    .tp_methods = Bijection_methods,
};

/* bijection(n, q, swap01, plan): plan a sequence of (into_high, key, mult, mod,
 * divisor) as EpochBijection builds it (its divisor is checked against mod). */
static PyObject *bijection(PyObject *mod, PyObject *args)
{
    unsigned long long n, q;
    int swap01;
    PyObject *plan;
    if (!PyArg_ParseTuple(args, "KKpO:bijection", &n, &q, &swap01, &plan))
        return NULL;
    PyObject *seq = PySequence_Fast(plan, "bijection: plan must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t rounds = PySequence_Fast_GET_SIZE(seq);
    if (q == 0 || n == 0 || rounds > MAX_ROUNDS) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "bijection: n and q must be >= 1, at most 16 rounds");
        return NULL;
    }
    BijectionObject *b = PyObject_New(BijectionObject, &BijectionType);
    if (b == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    b->n = n;
    b->q = q;
    b->swap01 = swap01;
    b->rounds = (int)rounds;
    b->byq = divisor_of(q);
    for (Py_ssize_t r = 0; r < rounds; r++) {
        int high;
        unsigned long long key, mult, m, div;
        PyObject *step = PySequence_Fast_GET_ITEM(seq, r);
        if (!PyArg_ParseTuple(step, "pKKKK:bijection plan", &high, &key, &mult, &m, &div))
            goto fail;
        if (m < 2 || div == 0) {
            PyErr_SetString(PyExc_ValueError, "bijection: a round's mod must be >= 2");
            goto fail;
        }
        b->into_high[r] = high;
        b->key[r] = key;
        b->mult[r] = mult;
        b->mod[r] = m;
        b->div[r] = divisor_of(div);
    }
    Py_DECREF(seq);
    return (PyObject *)b;
fail:
    Py_DECREF(seq);
    Py_DECREF(b);
    return NULL;
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
    const char *f = v.format ? v.format : "B";
    if (*f == '=' || *f == '<' || *f == '@')
        f++;
    int ok = v.ndim == 2 && v.shape[0] == rows && v.shape[1] == w && f[0] == fmt && !f[1];
    PyBuffer_Release(&v);
    return ok;
}

static PyObject *pair_fits(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
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

static PyMethodDef core_methods[] = {
    {"memory_rows", memory_rows, METH_VARARGS,
     "memory_rows(x, y)\n--\n\nRows of two float64 2-D arrays (x (n, d), y (n, l)), each row's values "
     "side by side (C-contiguous, or columns of a C-contiguous array)."},
    {"file_rows", file_rows, METH_VARARGS,
     "file_rows(mapping, offset, n, d, l, fd, size, mtime_ns, ctime_ns)\n--\n\n"
     "Rows of an .ndf file's read-only mapping (x then y per row, from byte offset);\n"
     "after each copy fd must still have at least size bytes and (each when >= 0) that\n"
     "modification time and change time. Installs the fault guard on first use."},
    {"map_file", map_file, METH_VARARGS,
     "map_file(fd, length)\n--\n\n"
     "A read-only shared mapping of the first length bytes of file fd, as a buffer (as\n"
     "mmap.mmap's, but holding no descriptor of its own; unmapped when freed)."},
    {"parts_rows", parts_rows, METH_VARARGS,
     "parts_rows(starts, d, l)\n--\n\n"
     "Rows of a sharded dataset: part k holds global rows starts[k] .. starts[k + 1] - 1\n"
     "(starts: int64, from 0, n last); give each part's file_rows with set(k, rows)\n"
     "once it is open. Installs the fault guard on first use."},
    {"pair_fits", (PyCFunction)(void (*)(void))pair_fits, METH_FASTCALL,
     "pair_fits(bx, by, rows, d, l, itemsize)\n--\n\n"
     "Whether bx and by are writeable C-contiguous NumPy arrays of shapes (rows, d) and\n"
     "(rows, l), both float64 (itemsize 8) or both float32 (4): next_into's check."},
    {"bijection", bijection, METH_VARARGS,
     "bijection(n, q, swap01, plan)\n--\n\n"
     "An epoch's keyed bijection (exactbatch.order.bijection), for rows() and map()."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "exactbatch._core", DOC, -1, core_methods,
};

PyMODINIT_FUNC PyInit__core(void)
{
    if (PyType_Ready(&RowsType) < 0 || PyType_Ready(&PartsType) < 0 ||
        PyType_Ready(&BijectionType) < 0 || PyType_Ready(&MappingType) < 0)
        return NULL;
    PyObject *np = PyImport_ImportModule("numpy");
    if (np == NULL)
        return NULL;
    ndarray_type = PyObject_GetAttrString(np, "ndarray");
    Py_DECREF(np);
    if (ndarray_type == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&core_module);
    if (m == NULL)
        return NULL;
    FileChanged = PyErr_NewExceptionWithDoc(
        "exactbatch._core.FileChanged",
        "A file's rows could not be copied: it was truncated or rewritten while open.",
        PyExc_OSError, NULL);
    if (FileChanged == NULL || PyModule_AddObjectRef(m, "FileChanged", FileChanged) < 0 ||
        PyModule_AddObjectRef(m, "Rows", (PyObject *)&RowsType) < 0 ||
        PyModule_AddObjectRef(m, "Parts", (PyObject *)&PartsType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
