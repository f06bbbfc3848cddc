/*
 * One copy on several threads: a read's rows split into consecutive ranges, each
 * copied by a thread of its own (the calling thread takes the first, a small pool of
 * C threads the others; see _core_split.c for its lifetime: joined at exit, none in a
 * forked child). It knows row ranges only, not what a range holds (rows, parts).
 */
#ifndef EXACTBATCH_CORE_SPLIT_H
#define EXACTBATCH_CORE_SPLIT_H

#include "_core.h"

#define SPLIT_MAX 64               /* threads one read uses at most */
#define SPLIT_BYTES (256 << 10)    /* auto: a thread for each this many bytes of rows */

/* A read's threads setting, from read()'s argument or a rows object's attribute:
 * 0 (auto) or a count >= 1. -1 with an exception naming threads when o is not one
 * (None: 0). */
int parse_threads(PyObject *o, int *threads);

/* How many threads copy r rows of row_bytes bytes each under the setting want:
 * want >= 1 fixes it (at most r and SPLIT_MAX); 0 picks one a SPLIT_BYTES of rows, at
 * most one fewer than the cores this process may run on (sched_getaffinity), 1 below
 * 2 * SPLIT_BYTES. */
int split_count(int want, Py_ssize_t r, Py_ssize_t row_bytes);

/* work(ctx, k, lo, hi) for k in [0, parts), rows [lo, hi) the k-th of parts nearly
 * equal ranges of [0, r): part 0 on the calling thread, the others on the pool's
 * threads (a part no thread takes - the pool is busy with another read, or a thread
 * cannot be made - runs on the calling thread), all done before it returns. Call it
 * with the GIL released; work must not touch Python objects. */
void split_run(int parts, Py_ssize_t r, void (*work)(void *ctx, int k, Py_ssize_t lo, Py_ssize_t hi),
               void *ctx);

/* The pool's fork and exit hooks, registered once at module init (GIL held). */
int split_ready(void);

#endif
