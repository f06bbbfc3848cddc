/*
 * A sharded dataset's reads called from Python: Parts.read (a request's rows, or the
 * list of the parts not set), and its hand-out reads: a PartsRuns object is a loader's
 * reader's own
 * read_run and take_run over the dataset's shared Parts (_core_parts.h), as a file's
 * Rows has them (_core_hand.h): a batch of an epoch's whole order in one guarded call
 * when its parts are open. Its hooks, the reader's, keep the Python path's answers: a
 * part that changed raises the dataset's error (changed), and a batch whose parts are
 * not all open is read by the dataset's own read (missing), which opens them (or reads
 * part by part) - the compiled call never opens a file.
 */
#ifndef EXACTBATCH_CORE_PARTS_RUN_H
#define EXACTBATCH_CORE_PARTS_RUN_H

#include "_core.h"

extern PyTypeObject PartsRunsType;

/* Parts.read(rows, out_x, out_y, transform=None, threads=None) (its doc: parts_read_doc,
 * in _core_parts.c's method table). */
PyObject *Parts_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* PartsRuns.read_run(order, start, size, out_x, out_y) and take_run(order, start, size,
 * dtype, ydtype): as Rows' (_core_hand.h), over the dataset's global rows. */
PyObject *PartsRuns_read_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *PartsRuns_take_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* Parts.runs(changed, missing): a new PartsRuns over the Parts object parts. */
PyObject *parts_runs(PyObject *parts, PyObject *args);

/* The type made ready: 0, or -1 with an exception set. */
int parts_runs_ready(PyObject *module);

#endif
