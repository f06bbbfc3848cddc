/*
 * A sharded dataset's rows: part k of a Parts object is a file's Rows (_core_rows.h),
 * set while the part is open; a read gathers global rows straight from the parts'
 * mappings, under the guard (_core_guard.h) over the mappings of the parts it reads.
 */
#ifndef EXACTBATCH_CORE_PARTS_H
#define EXACTBATCH_CORE_PARTS_H

#include "_core.h"
#include "_core_rows.h"

/* Rows j (global rows of the Parts object o, parsed: rows, outputs, transform) copied
 * from the parts' mappings as Parts.read copies them (the GIL let go during the copy,
 * the stamps ticked): 0 copied (or j->bad >= 0, a row out of range: nothing copied);
 * 1 parts not set, nothing copied (with seen: *seen[q] == 2 for each; free it with
 * PyMem_RawFree, whatever the result but -3); -1 a copy faulted, in part *which (-1:
 * it cannot say); -2 part *which changed; -3 no memory (MemoryError set). threads:
 * the copy's (_core_split.h; 0 auto). */
int parts_gather(PyObject *o, Job *j, int threads, Py_ssize_t *which, char **seen);

/* The FileChanged of parts_gather's result rc (-1 or -2) in part which (its ``part``
 * attribute; None for -1 where it cannot say), set as the error; NULL.
 * (_core_parts_run.c) */
PyObject *parts_changed(int rc, Py_ssize_t which);

/* The rows of the Parts object o: n, and the widths d and l; returns its parts' count. */
Py_ssize_t parts_shape(PyObject *o, Py_ssize_t *n, Py_ssize_t *d, Py_ssize_t *l);

/* The module's function (see its doc in _core.c) and its type made ready. */
PyObject *parts_rows(PyObject *mod, PyObject *args);
int parts_ready(PyObject *module);

#endif
