/* next_into's check of the caller's buffers (pair_fits; see _core_fits.h). */
#include "_core_fits.h"

static PyObject *ndarray_type; /* numpy.ndarray: pair_fits() accepts no other buffer */

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

/* Is o an ndarray (or subclass) that is writeable and C-contiguous, of shape (rows, w)
 * and native dtype type_num (float64 or float32)? Never an exception. What a writeable
 * C-contiguous buffer export of format 'd' or 'f' accepts; where in doubt, False (the
 * caller then makes the full checks, which say what is wrong or accept). */
static int fits_one(PyObject *o, Py_ssize_t rows, Py_ssize_t w, int type_num)
{
    if (!PyObject_TypeCheck(o, (PyTypeObject *)ndarray_type))
        return 0;
    const array_head *a = (const array_head *)o;
    const int need = NPY_C_CONTIGUOUS_FLAG | NPY_WRITEABLE_FLAG;
    if ((a->flags & need) != need || (a->flags & NPY_WARN_ON_WRITE_FLAG))
        return 0;
    if (a->nd != 2 || a->dimensions[0] != rows || a->dimensions[1] != w)
        return 0;
    const descr_head *t = a->descr;
#if PY_BIG_ENDIAN
    const char native = '>';
#else
    const char native = '<';
#endif
    char order = t->byteorder;
    return t->type_num == type_num && (order == '=' || order == '|' || order == native);
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
    int num = v[3] == 8 ? NPY_DOUBLE_NUM : v[3] == 4 ? NPY_FLOAT_NUM : 0;
    return PyBool_FromLong(num && fits_one(args[0], v[0], v[1], num) &&
                           fits_one(args[1], v[0], v[2], num));
}

int fits_ready(void)
{
    PyObject *np = PyImport_ImportModule("numpy");
    if (np == NULL)
        return -1;
    ndarray_type = PyObject_GetAttrString(np, "ndarray");
    Py_DECREF(np);
    return ndarray_type == NULL ? -1 : 0;
}
