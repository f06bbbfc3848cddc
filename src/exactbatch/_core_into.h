/*
 * next_into's hand-out in one call (see exactbatch.loader.handout, whose HandOut is
 * its pure twin, step for step): the check of the caller's buffers, the pop of the next
 * batch of the loader's group, its read (Rows.read_run), its hand-out as the cursor
 * counts it (Cursor.hand) and the wait recorded (waited_on). Only a batch of an
 * epoch's whole order (a RunJob, batch_size rows, not read yet) read by compiled rows
 * is handed out here; anything else goes back to the loader's own path.
 */
#ifndef EXACTBATCH_CORE_INTO_H
#define EXACTBATCH_CORE_INTO_H

#include "_core.h"

/* into(checks, holder, cursor, telemetry, waits, job_type, draining): a hand-out
 * object (exactbatch.loader.handout.HandOut's twin) whose hand(bx, by) returns the
 * rows written, None (nothing popped: the loader's own path runs) or (group, item,
 * t0) (popped, but not for this path: the loader's path goes on with it). */
PyObject *into_new(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);

/* The type made ready and its names interned: 0, or -1 with an exception set. */
int into_ready(void);

#endif
