/*
 * exactbatch._core, the compiled core: what its parts share.
 *
 * One extension module from several files, one concern each:
 *
 *   _core.c            the module table: the docstring, the functions (includes every unit;
 *                      no unit includes it)
 *   _core_errors.c     the exceptions the units raise (FileChanged; declared here)
 *   _core_guard.c/.h   the fault guard over a set of address ranges (knows nothing else)
 *   _core_rows.c/.h    rows in memory or in a file's mapping: Rows objects, a read's
 *                      arguments and result
 *   _core_copy.c       a read's copy (declared in _core_rows.h): the gather and cast loops,
 *                      split over threads, guarded, the file checked after
 *   _core_mapping.c/.h a file's read-only mapping as a buffer (map_file)
 *   _core_fits.c/.h    next_into's check of the caller's buffers (pair_fits)
 *   _core_hand.c/.h    a hand-out's read of a whole order's batch, into the caller's
 *                      buffers or a new pair (Rows.read_run, take_run); a wait counted
 *                      in a telemetry slot (waited)
 *   _core_into.c/.h    next_into's common call in one: the check, the group's pop, the
 *                      read, the hand-out and the wait (into; twin: loader/handout.py)
 *   _core_iter.c/.h    iter()'s hand-out in one call: EpochIterator's base, its __next__ in
 *                      C (IterStep; twin: loader/iter_step.py)
 *   _core_transform.c/.h  a transform fused into the gather (standardise, NaN fill)
 *   _core_parts.c/.h   a sharded dataset's rows, straight from its parts' mappings
 *   _core_parts_run.c/.h  a dataset reader's run reads over them (PartsRuns.read_run,
 *                      take_run), the parts not open left to Python by a hook
 *   _core_bijection.c/.h  an epoch's keyed bijection
 *   _core_columns.c/.h  rows of float64 columns (an Arrow chunk's) into whole rows, cast
 *   _core_rows32.c/.h  a float32 shuffle buffer's rows gathered into float32 batches
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

/* Raised by the reads when a file changed (made in _core_errors.c, by errors_ready: 0,
 * or -1 with an exception set). */
extern PyObject *FileChanged;
int errors_ready(PyObject *module);

/* A buffer's struct format without its byte-order prefix ('=', '<', '@'), "B" when
 * it gives none: "d", "f", "q", ... */
static inline const char *plain_format(const Py_buffer *b)
{
    const char *f = b->format ? b->format : "B";
    if (*f == '=' || *f == '<' || *f == '@')
        f++;
    return f;
}

/* A hook attribute (a run read's ``changed``, a dataset's ``missing``) set to v: a
 * callable, or None (or deleted, NULL) for none, held in *slot (NULL for none). 0, or -1
 * with a TypeError naming the attribute, ``name``. */
static inline int hook_set(PyObject **slot, PyObject *v, const char *name)
{
    if (v != NULL && v != Py_None && !PyCallable_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be a callable or None; got %s", name,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    Py_XSETREF(*slot, v == NULL || v == Py_None ? NULL : Py_NewRef(v));
    return 0;
}

/* A hook attribute's value: the hook held, or None (a new reference). */
static inline PyObject *hook_get(PyObject *hook)
{
    return Py_NewRef(hook != NULL ? hook : Py_None);
}

#endif
