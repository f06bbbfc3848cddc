/*
 * A hand-out's steps in C: the read of batch k of an epoch's whole order (positions
 * start .. start + size of its rows) into the caller's buffers (Rows.read_run, what
 * next_into's RunJob.fill calls) or into a new aligned pair (Rows.take_run, iter()'s
 * batch read as it is handed out), with no view of the order and no buffer export;
 * and a wait counted in a telemetry slot (waited; waited_on, a Telemetry's). Their pure
 * twins are exactbatch.batching.random_access_epoch's read_run/take_run and
 * exactbatch.loader.telemetry's _count and waited_on.
 */
#ifndef EXACTBATCH_CORE_HAND_H
#define EXACTBATCH_CORE_HAND_H

#include "_core.h"
#include "_core_rows.h"

/* Rows.read_run(order, start, size, out_x, out_y): rows order[start:start + size]
 * into the first size rows of out_x and out_y (writeable C-contiguous float64/float32
 * ndarrays of d and l columns, at least size rows; out_y of x's dtype, or float64). */
PyObject *Rows_read_run(RowsObject *self, PyObject *const *args, Py_ssize_t nargs);

/* Rows.take_run(order, start, size, dtype, ydtype): those rows as a new (x, y) pair
 * (exactbatch.arrays.batch_pair's layout: one allocation, each on a 64-byte line);
 * dtype float64 or float32, ydtype None (dtype's), the same or float64. */
PyObject *Rows_take_run(RowsObject *self, PyObject *const *args, Py_ssize_t nargs);

/* A run read's C function: Rows' or PartsRuns' read_run or take_run (METH_FASTCALL). */
typedef PyObject *(*RunFn)(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* m's function when m is a compiled run read bound to its object - a Rows' or a
 * dataset's PartsRuns' (_core_parts_run.h) read_run (take 0) or take_run (take 1) -
 * that the one-call hand-outs may call in C, with m's self; else NULL. */
RunFn run_method(PyObject *m, int take);

/* The order's rows [start, start + size) into j (idx, isz, r): order a 1-D C-contiguous
 * native int32/int64 ndarray. 0, or -1 with an exception naming the argument. */
int order_span(PyObject *o, PyObject *a_start, PyObject *a_size, Job *j);

/* read_run's outputs for j->r rows of d and l values: writeable C-contiguous native
 * float ndarrays of at least j->r rows (out_y of x's dtype, or float64), set in j. 0,
 * or -1 with a TypeError. */
int run_outs(PyObject *ox, PyObject *oy, Py_ssize_t d, Py_ssize_t l, Job *j);

/* take_run's new pair for j->r rows of d and l values, of dtype dt (ydtype yt, None:
 * dt's), as batch_pair lays it out, set in j: 0 with *x and *y new references, or -1
 * with an exception set (a dtype not float64/float32: TypeError). */
int run_pair(PyObject *dt, PyObject *yt, Py_ssize_t d, Py_ssize_t l, Job *j, PyObject **x,
             PyObject **y);

/* A take_run's read of the run j into its new pair x, y (set in j; args: the call's
 * arguments) by self: None, or NULL with an exception set. */
typedef PyObject *(*TakeRead)(PyObject *self, Job *j, PyObject *const *args, PyObject *x,
                              PyObject *y);

/* take_run(order, start, size, dtype, ydtype) (args, nargs) over rows of d and l values:
 * the span checked (order_span), the pair made (run_pair), read(self, ...) into it, and
 * (x, y) returned; NULL with an exception set. Rows' and PartsRuns' take_run. */
PyObject *take_run_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t d,
                      Py_ssize_t l, TakeRead read);

/* A clean-up after an error: error_keep() takes the error raised (normalised, its
 * traceback on it) out of the way; error_back(ok, ...) raises it again when the clean-up
 * succeeded (ok != 0), else leaves the clean-up's error raised, the kept one its context
 * (each kept reference consumed). */
void error_keep(PyObject **t, PyObject **v, PyObject **tb);
void error_back(int ok, PyObject *t, PyObject *v, PyObject *tb);

/* run_jobs(job_type, run, k0, k1, b, n, digests): [job_type(run, k, size, digests[k],
 * k*b) for k in k0 .. k1-1] (size b, or what is left of n rows), made in one loop: a
 * claim's jobs of an epoch's whole order (OrderRun.jobs). job_type a tuple subclass
 * with no fields of its own; digests a 1-D uint64 buffer. */
PyObject *run_jobs(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);

/* waited(slot, t0, at, hist): now (perf_counter_ns's clock); slot[at] += now - t0, and
 * with hist >= 0 slot[hist + bucket(now - t0)] += 1 (telemetry's histogram). */
PyObject *waited(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);

/* waited_on(tel, t0, at, hist): waited() into the calling thread's slot of the
 * Telemetry tel, then tel._report_now(now) when a report is due; None (the pure twin:
 * exactbatch.loader.telemetry.waited_on). */
PyObject *waited_on(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);

/* The calling thread's slot of the Telemetry tel: tel._local.slot, or tel._slot() at
 * the thread's first record (which makes and keeps it). A new reference, or NULL with
 * an exception set. */
PyObject *telemetry_slot(PyObject *tel);

/* Cursor.hand(group, job) for a job of size rows (exactbatch.loader.cursor's, step for
 * step): job appended to handed (the group's), cursor._last_rows = size, and when the
 * cursor's phase is draining (Phase.DRAINING, by identity) and group.done(),
 * cursor.settle(). 0, or -1 with an exception set. */
int cursor_hand(PyObject *cursor, PyObject *draining, PyObject *group, PyObject *handed,
                PyObject *job, PyObject *size);

/* waited_on(tel, t0, at, hist) with the calling thread's slot kept in *slot (a new
 * reference, looked up again when the thread, *tid, is another): the wait counted, then
 * tel._report_now(now) when a report is due. 0, or -1 with an exception set. */
int wait_kept(PyObject *tel, PyObject **slot, unsigned long *tid, PyObject *t0, PyObject *at,
              PyObject *hist);

/* numpy.empty and the dtypes looked up: 0, or -1 with an exception set. */
int hand_ready(void);

#endif
