/*
 * Columns into rows: rows of numeric columns (an Arrow chunk's, as NumPy views of its
 * buffers: float64, float32, integers of at most 32 bits) copied straight into a batch's
 * or a buffer's whole rows, cast as they are copied. The pure NumPy twin is
 * exactbatch.kernels.columns_into (same bits).
 */
#ifndef EXACTBATCH_CORE_COLUMNS_H
#define EXACTBATCH_CORE_COLUMNS_H

#include "_core.h"

PyObject *columns_into(PyObject *mod, PyObject *args);

#endif
