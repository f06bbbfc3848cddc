/*
 * next_into's check of the caller's buffers: pair_fits(); knows nothing else.
 */
#ifndef EXACTBATCH_CORE_FITS_H
#define EXACTBATCH_CORE_FITS_H

#include "_core.h"

/* pair_fits(bx, by, rows, d, l, itemsize): the module's function (its doc in _core.c). */
PyObject *pair_fits(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);

/* numpy.ndarray looked up (pair_fits accepts no other buffer): 0, or -1 with an
 * exception set. */
int fits_ready(void);

#endif
