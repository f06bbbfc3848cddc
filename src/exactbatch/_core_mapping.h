/*
 * A file's read-only shared mapping, as a buffer: made by map_file(); knows nothing else.
 */
#ifndef EXACTBATCH_CORE_MAPPING_H
#define EXACTBATCH_CORE_MAPPING_H

#include "_core.h"

/* map_file(fd, length): the module's function (its doc in _core.c). */
PyObject *map_file(PyObject *mod, PyObject *args);

/* The Mapping type made ready: 0, or -1 with an exception set. */
int mapping_ready(void);

#endif
