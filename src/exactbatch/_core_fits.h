/*
 * next_into's check of the caller's buffers: pair_fits(); knows nothing else.
 */
#ifndef EXACTBATCH_CORE_FITS_H
#define EXACTBATCH_CORE_FITS_H

#include "_core.h"

/* The leading fields of numpy's PyArrayObject_fields and PyArray_Descr, as numpy's
 * headers declare them (ndarraytypes.h): part of its ABI, the same in numpy 1.x and
 * 2.x (compiled extensions read them through PyArray_NDIM, PyArray_DIMS, PyArray_FLAGS
 * and PyArray_DESCR(a)->type_num), read here without numpy's headers at build time.
 * Read directly, a check costs tens of ns where a buffer export costs hundreds (numpy
 * rebuilds the format string of each export). */
typedef struct {
    PyObject_HEAD
    PyTypeObject *typeobj;
    char kind, type, byteorder, flags_or_former;
    int type_num;
} descr_head;

typedef struct {
    PyObject_HEAD
    char *data;
    int nd;
    Py_ssize_t *dimensions;
    Py_ssize_t *strides;
    PyObject *base;
    descr_head *descr;
    int flags;
} array_head;

#define NPY_FLOAT_NUM 11
#define NPY_DOUBLE_NUM 12
#define NPY_C_CONTIGUOUS_FLAG 0x0001
#define NPY_WRITEABLE_FLAG 0x0400
#define NPY_WARN_ON_WRITE_FLAG ((int)(1u << 31)) /* numpy 1.x's: refused, to be safe */


/* pair_fits(bx, by, rows, d, l, itemsize): the module's function (its doc in _core.c). */
PyObject *pair_fits(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);

/* numpy.ndarray (looked up by fits_ready). */
extern PyObject *ndarray_type;

/* Is o an ndarray (or subclass) that is writeable and C-contiguous, of shape (rows, w)
 * and native dtype type_num (NPY_DOUBLE_NUM or NPY_FLOAT_NUM)? Never an exception. */
int fits_one(PyObject *o, Py_ssize_t rows, Py_ssize_t w, int type_num);

/* numpy.ndarray looked up (pair_fits accepts no other buffer): 0, or -1 with an
 * exception set. */
int fits_ready(void);

#endif
