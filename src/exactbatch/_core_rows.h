/*
 * Rows: where rows live (two float64 arrays in memory, or an .ndf file's mapping) and
 * one read's copy of them into a batch, cast as it goes. What the dataset's parts
 * (_core_parts.c) use of it is declared here.
 */
#ifndef EXACTBATCH_CORE_ROWS_H
#define EXACTBATCH_CORE_ROWS_H

#include "_core.h"
#include "_core_transform.h"

typedef struct {
    PyObject_HEAD
    Py_buffer xbuf, ybuf; /* held while the object lives: the rows cannot move (a file's:
                           * xbuf its mapping, ybuf none) */
    const char *xbase, *ybase;   /* row 0's x and y values */
    Py_ssize_t xstride, ystride; /* bytes from one row to the next */
    Py_ssize_t n, d, l;
    const char *lo, *hi; /* a mapping's range (guarded copies); NULL in memory */
    /* a file's only: its descriptor, checked after each copy, and what it had when
     * opened (a time < 0: unchecked) */
    int fd;
    long long size, mtime_ns, ctime_ns;
    int threads; /* a read's threads when it is not told (_core_split.h): 0 auto */
    /* a file's only, or NULL: called with the FileChanged of a copy that found the file
     * changed, to raise the error its reader names the file with (rows_changed) */
    PyObject *changed;
} RowsObject;

extern PyTypeObject RowsType;

/* One read: rows idx[0..r) (idx NULL: start .. start + r) into out_x/out_y. */
typedef struct {
    const void *idx;
    int isz; /* 4 or 8 */
    Py_ssize_t start, r;
    char *ox, *oy;
    int f32, f32y; /* out_x float32; out_y float32 (float64 labels under float32 x: 0) */
    Py_ssize_t bad; /* the position of an index out of range, or -1 */
    const TransformObject *tf; /* applied to x as it is copied, or NULL */
    Py_ssize_t nan; /* with tf: the position of the first row whose x held a NaN, or -1 */
} Job;

#define JOB_INIT {NULL, 8, 0, 0, NULL, NULL, 0, 0, -1, NULL, -1}

/* Row k of the read (for the message of a row out of range). */
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

#define PREFETCH 16 /* rows ahead: wide shuffled rows are asked for this far ahead */

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

/* 8 * (d + l), the bytes of a row of d features and l labels, in *row; -1 with an
 * OverflowError naming who and the widths when it does not fit (every size computed
 * from it uses checked arithmetic too: a wrapped size would let a read run past its
 * buffer). */
int row_size(const char *who, Py_ssize_t d, Py_ssize_t l, Py_ssize_t *row);

/* read()'s arguments: the rows (a slice of [0, n), or a 1-D int32/int64 buffer then
 * held in *ib: release it, also after an error) and out_x, out_y for them (held in *bx
 * and *by on success: release both). 0, or -1 with an exception set. */
int parse_rows(PyObject *o, Py_ssize_t n, Job *j, Py_buffer *ib);
int parse_outs(PyObject *ox, PyObject *oy, Py_ssize_t d, Py_ssize_t l, Job *j, Py_buffer *bx,
               Py_buffer *by);

/* read()'s result once copied: None, or with a transform the position of the first row
 * whose features held a NaN (an int), or -1 when none did. */
PyObject *read_result(const Job *j);

/* Has the file of rows s (a file's) lost bytes, or changed its modification time or
 * change time since opened? One fstat. (_core_copy.c) */
int file_changed(const RowsObject *s);

/* The error of a copy of rows that found their file changed (rc -1: the copy faulted;
 * -2: the fstat check after it): FileChanged, or what their changed hook raises instead
 * when they have one (FileChanged its context; a hook that returns leaves FileChanged).
 * NULL, always, with the error set. hook: the rows' changed (or NULL), a reference
 * taken before the copy and held across it (the hook holds the file's handle, and with
 * it the descriptor the copy's fstat checks: it outlives a reader closed meanwhile,
 * which lets go of the hook). */
PyObject *rows_changed(PyObject *hook, int rc);

/* rows_changed's call of the hook (NULL: none) with the FileChanged set now: the
 * hook's error raised instead, FileChanged its context, as rows_changed says. NULL. */
PyObject *changed_through(PyObject *hook);

/* The copy of read j of rows s, on `parts` threads (split_count), each copying a range
 * of the rows under its own fault guard: 0 copied; -1 the copy faulted (the guard
 * caught it); -2 the file changed. Runs without the GIL. (_core_copy.c) */
int guarded_copy(const RowsObject *s, Job *j, int parts);

/* The module's functions (see their docs in _core.c) and the Rows type made ready. */
PyObject *memory_rows(PyObject *mod, PyObject *args);
PyObject *file_rows(PyObject *mod, PyObject *args);
int rows_ready(PyObject *module);

#endif
