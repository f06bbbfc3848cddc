/*
 * A sharded dataset's rows: part k of a Parts object is a file's Rows (_core_rows.h),
 * set while the part is open; a read gathers global rows straight from the parts'
 * mappings, under the guard (_core_guard.h) over the mappings of the parts it reads.
 */
#ifndef EXACTBATCH_CORE_PARTS_H
#define EXACTBATCH_CORE_PARTS_H

#include "_core.h"

/* The module's function (see its doc in _core.c) and its type made ready. */
PyObject *parts_rows(PyObject *mod, PyObject *args);
int parts_ready(PyObject *module);

#endif
