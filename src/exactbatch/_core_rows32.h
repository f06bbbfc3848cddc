/*
 * A float32 shuffle buffer's gather: rows of float32 x and y (a buffer's whole rows,
 * held at the batches' dtype) copied into float32 batches, each row's bytes as they
 * are (no cast: the buffer narrowed each value once, as it was filled). The pure NumPy
 * twin is exactbatch.kernels.gather's take (same bytes).
 */
#ifndef EXACTBATCH_CORE_ROWS32_H
#define EXACTBATCH_CORE_ROWS32_H

#include "_core.h"

PyObject *take_rows32(PyObject *mod, PyObject *args);

#endif
