/* next_into's check of the caller's buffers (pair_fits; see _core_fits.h). */
#include "_core_fits.h"

PyObject *ndarray_type; /* numpy.ndarray: pair_fits() accepts no other buffer */

/* Is o an ndarray (or subclass) that is writeable and C-contiguous, of shape (rows, w)
 * and native dtype type_num (float64 or float32)? Never an exception. What a writeable
 * C-contiguous buffer export of format 'd' or 'f' accepts; where in doubt, False (the
 * caller then makes the full checks, which say what is wrong or accept). */
int fits_one(PyObject *o, Py_ssize_t rows, Py_ssize_t w, int type_num)
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
