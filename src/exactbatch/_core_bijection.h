/*
 * An epoch's keyed bijection (exactbatch.order.bijection's EpochBijection), position
 * by position in C: exactly the NumPy path's rows.
 */
#ifndef EXACTBATCH_CORE_BIJECTION_H
#define EXACTBATCH_CORE_BIJECTION_H

#include "_core.h"

/* The module's function (see its doc in _core.c) and its type made ready. */
PyObject *bijection(PyObject *mod, PyObject *args);
int bijection_ready(PyObject *module);

#endif
