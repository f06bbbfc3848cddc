/*
 * exactbatch._core, the compiled core: what its parts share.
 *
 * One extension module from several files, one concern each:
 *
 *   _core.c            the module table: the docstring, the functions, FileChanged
 *   _core_guard.c/.h   the fault guard over a set of address ranges (knows nothing else)
 *   _core_rows.c/.h    rows in memory or in a file's mapping: the gather and cast,
 *                      a file's mapping (map_file), next_into's buffer check
 *   _core_transform.c/.h  a transform fused into the gather (standardise, NaN fill)
 *   _core_parts.c/.h   a sharded dataset's rows, straight from its parts' mappings
 *   _core_bijection.c/.h  an epoch's keyed bijection
 *   _core_columns.c/.h  rows of float64 columns (an Arrow chunk's) into whole rows, cast
 *   _core_codes.c/.h   categorical strings: their keys, codes and a dictionary's take
 *   _core_split.c/.h   one read's copy split by row ranges over threads (knows ranges only)
 *
 * Built with -fvisibility=hidden (pyproject.toml): the functions the files share stay
 * inside the extension; only PyInit__core is exported. Only the buffer protocol is
 * used (no NumPy C API), so building needs no NumPy headers.
 */
#ifndef EXACTBATCH_CORE_H
#define EXACTBATCH_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

/* Raised by the reads when a file changed (made by the module, _core.c). */
extern PyObject *FileChanged;

/* A buffer's struct format without its byte-order prefix ('=', '<', '@'), "B" when
 * it gives none: "d", "f", "q", ... */
static inline const char *plain_format(const Py_buffer *b)
{
    const char *f = b->format ? b->format : "B";
    if (*f == '=' || *f == '<' || *f == '@')
        f++;
    return f;
}

#endif
