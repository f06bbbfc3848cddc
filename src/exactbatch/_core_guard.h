/*
 * The fault guard: a copy out of file mappings that turns a SIGBUS (or SIGSEGV) raised
 * by a read of one of the ranges it was given (the file was truncated during the copy)
 * into a return code, instead of the end of the process. It knows address ranges only,
 * not what lives there (rows, parts).
 */
#ifndef EXACTBATCH_CORE_GUARD_H
#define EXACTBATCH_CORE_GUARD_H

#include "_core.h"

/* Addresses [lo, hi) a guarded copy may read; {NULL, NULL} is empty. */
typedef struct {
    const char *lo, *hi;
} GuardRange;

/* Install the guard's handler, or put it back where another took its place. With the
 * GIL held: call it when a mapping is first read and before every guarded copy. */
void guard_install(void);

/* Run copy(arg) on this thread, catching a fault raised by a read of an address in
 * ranges[0..n): 0 when the copy ran to its end; -1 when it faulted, with the index of
 * the range read in *hit (hit may be NULL). A fault elsewhere goes to the handler the
 * guard displaced. Needs no GIL (it is released around it); guard_install first. */
int guard_run(const GuardRange *ranges, Py_ssize_t n, void (*copy)(void *), void *arg,
              Py_ssize_t *hit);

#endif
