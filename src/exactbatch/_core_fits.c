/* next_into's check of the caller's buffers (pair_fits; see _core_fits.h). */
#include "_core_fits.h"

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

int fits_ready(void)
{
    PyObject *np = PyImport_ImportModule("numpy");
    if (np == NULL)
        return -1;
    ndarray_type = PyObject_GetAttrString(np, "ndarray");
    Py_DECREF(np);
    return ndarray_type == NULL ? -1 : 0;
}
