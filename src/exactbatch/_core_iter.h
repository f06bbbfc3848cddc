/*
 * iter()'s hand-out in one call: the base of EpochIterator whose __next__ (tp_iternext)
 * is C (see exactbatch.loader.iter_step, whose IterStep is its pure twin, step for
 * step): the pop of the next batch of the iterator's group, its read where it was
 * claimed unread (Rows.take_run, into a new pair), its hand-out as the cursor counts it
 * (Cursor.hand) and the wait recorded. A batch read already (a group's) is handed out
 * as it is; anything else (a stale iterator, a batch read by peek, padding, another
 * kind of job, rows read in Python) goes to the iterator's own _hand(group, item), and
 * an empty group to its _waited().
 */
#ifndef EXACTBATCH_CORE_ITER_H
#define EXACTBATCH_CORE_ITER_H

#include "_core.h"

/* The type, IterStep(cursor, gen, current, job_type, draining): its fields _current,
 * _cursor, _gen, _peeked (EpochIterator's), _job_type, _plain, _tel and _waits
 * (IterStep's: read only), made ready and added to the module. 0, or -1. */
int iter_ready(PyObject *module);

#endif
