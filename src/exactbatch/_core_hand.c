/* A hand-out's steps in C (see _core_hand.h): a batch of an epoch's whole order read
 * into the caller's buffers or into new ones, and a wait counted in telemetry's slot. */
#include "_core_hand.h"

#include "_core_fits.h"
#include "_core_guard.h"
#include "_core_parts_run.h"
#include "_core_split.h"

#define NPY_INT_NUM 5
#define NPY_LONG_NUM 7
#define NPY_LONGLONG_NUM 9
#define ALIGN 64 /* a batch's x and y start on a cache line (exactbatch.arrays.ALIGN) */

static PyObject *np_empty, *uint8_dtype, *dtype_type; /* numpy.empty, its uint8, numpy.dtype */
static PyObject *perf_counter_ns;                      /* time.perf_counter_ns */

static int native(const descr_head *t)
{
#if PY_BIG_ENDIAN
    const char here = '>';
#else
    const char here = '<';
#endif
    return t->byteorder == '=' || t->byteorder == '|' || t->byteorder == here;
}

/* 8 or 4: the itemsize of a native float64 or float32 descr; 0 for any other. */
static int float_size(const descr_head *t)
{
    if (!native(t))
        return 0;
    return t->type_num == NPY_DOUBLE_NUM ? 8 : t->type_num == NPY_FLOAT_NUM ? 4 : 0;
}

int order_span(PyObject *o, PyObject *a_start, PyObject *a_size, Job *j)
{
    Py_ssize_t start = PyLong_AsSsize_t(a_start), size;
    if (start == -1 && PyErr_Occurred())
        return -1;
    if ((size = PyLong_AsSsize_t(a_size)) == -1 && PyErr_Occurred())
        return -1;
    if (!PyObject_TypeCheck(o, (PyTypeObject *)ndarray_type)) {
        PyErr_SetString(PyExc_TypeError, "order must be a 1-D int32 or int64 ndarray");
        return -1;
    }
    const array_head *a = (const array_head *)o;
    const descr_head *t = a->descr;
    int isz = t->type_num == NPY_INT_NUM        ? (int)sizeof(int)
              : t->type_num == NPY_LONG_NUM     ? (int)sizeof(long)
              : t->type_num == NPY_LONGLONG_NUM ? (int)sizeof(long long)
                                                : 0;
    if (a->nd != 1 || !(a->flags & NPY_C_CONTIGUOUS_FLAG) || !native(t) ||
        (isz != 4 && isz != 8)) {
        PyErr_SetString(PyExc_TypeError, "order must be a 1-D C-contiguous int32 or int64 "
                                         "ndarray");
        return -1;
    }
    if (start < 0 || size < 0 || start > a->dimensions[0] - size) {
        PyErr_Format(PyExc_IndexError, "order[%zd:%zd] is not within its %zd rows", start,
                     start + size, a->dimensions[0]);
        return -1;
    }
    j->idx = a->data + start * isz;
    j->isz = isz;
    j->r = size;
    return 0;
}

/* Is o a writeable C-contiguous native float ndarray of at least rows rows of w values?
 * Its itemsize (8 or 4), or 0. */
static int out_rows(PyObject *o, Py_ssize_t rows, Py_ssize_t w)
{
    if (!PyObject_TypeCheck(o, (PyTypeObject *)ndarray_type))
        return 0;
    const array_head *a = (const array_head *)o;
    const int need = NPY_C_CONTIGUOUS_FLAG | NPY_WRITEABLE_FLAG;
    if ((a->flags & need) != need || (a->flags & NPY_WARN_ON_WRITE_FLAG))
        return 0;
    if (a->nd != 2 || a->dimensions[0] < rows || a->dimensions[1] != w)
        return 0;
    return float_size(a->descr);
}

/* The copy of j (its outputs set) from s, as Rows.read makes it; the result None. A
 * small copy from memory (one thread, under HELD bytes: a few us at most, no page of a
 * file to wait for) keeps the GIL: letting it go and taking it back would cost a tenth
 * of the copy. */
#define HELD (64 << 10)
static PyObject *copy(RowsObject *s, Job *j)
{
    int rc;
    if (s->lo != NULL)
        guard_install();
    PyObject *hook = Py_XNewRef(s->changed); /* (see rows_changed) */
    int parts = split_count(s->threads, j->r, 8 * (s->d + s->l));
    if (s->lo == NULL && parts == 1 && j->r <= HELD / (8 * (s->d + s->l) + 1)) {
        rc = guarded_copy(s, j, parts);
    } else {
        Py_BEGIN_ALLOW_THREADS
        rc = guarded_copy(s, j, parts);
        Py_END_ALLOW_THREADS
    }
    PyObject *res = NULL;
    if (rc < 0) {
        rows_changed(hook, rc);
    } else if (j->bad >= 0) {
        PyErr_Format(PyExc_IndexError, "row %lld out of range for n=%zd rows",
                     (long long)row_at(j, j->bad), s->n);
    } else {
        res = Py_NewRef(Py_None);
    }
    Py_XDECREF(hook);
    return res;
}

int run_outs(PyObject *ox, PyObject *oy, Py_ssize_t d, Py_ssize_t l, Job *j)
{
    int xs = out_rows(ox, j->r, d), ys = out_rows(oy, j->r, l);
    if (!xs || !ys || (xs != ys && ys != 8)) {
        PyErr_Format(PyExc_TypeError, "out_x and out_y must be writeable C-contiguous float64 "
                     "or float32 ndarrays (out_y of x's dtype, or float64) of at least %zd "
                     "rows of %zd and %zd values", j->r, d, l);
        return -1;
    }
    j->ox = ((const array_head *)ox)->data;
    j->oy = ((const array_head *)oy)->data;
    j->f32 = xs == 4;
    j->f32y = ys == 4;
    return 0;
}

PyObject *Rows_read_run(RowsObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "read_run(order, start, size, out_x, out_y) takes 5 "
                                         "arguments");
        return NULL;
    }
    Job j = JOB_INIT;
    if (order_span(args[0], args[1], args[2], &j) < 0 ||
        run_outs(args[3], args[4], self->d, self->l, &j) < 0)
        return NULL;
    return copy(self, &j);
}

/* A new C-contiguous (rows, w) array of descr t over raw's bytes from offset at. */
static PyObject *view(PyObject *raw, Py_ssize_t rows, Py_ssize_t w, PyObject *t, Py_ssize_t at)
{
    PyObject *shape = Py_BuildValue("(nn)", rows, w), *off = PyLong_FromSsize_t(at), *out = NULL;
    if (shape != NULL && off != NULL) {
        PyObject *args[4] = {shape, t, raw, off};
        out = PyObject_Vectorcall(ndarray_type, args, 4, NULL);
    }
    Py_XDECREF(shape);
    Py_XDECREF(off);
    return out;
}

void error_keep(PyObject **t, PyObject **v, PyObject **tb)
{
    PyErr_Fetch(t, v, tb);
    PyErr_NormalizeException(t, v, tb);
    if (*tb != NULL && *v != NULL)
        PyException_SetTraceback(*v, *tb);
}

void error_back(int ok, PyObject *t, PyObject *v, PyObject *tb)
{
    if (ok) {
        PyErr_Restore(t, v, tb);
        return;
    }
    PyObject *t2, *v2, *tb2;
    PyErr_Fetch(&t2, &v2, &tb2);
    PyErr_NormalizeException(&t2, &v2, &tb2);
    if (v2 != NULL && v != NULL)
        PyException_SetContext(v2, v); /* (steals v) */
    else
        Py_XDECREF(v);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    PyErr_Restore(t2, v2, tb2);
}

RunFn run_method(PyObject *m, int take)
{
    if (!PyCFunction_Check(m) || PyCFunction_GET_SELF(m) == NULL)
        return NULL;
    PyTypeObject *t = Py_TYPE(PyCFunction_GET_SELF(m));
    void *fn = (void *)PyCFunction_GET_FUNCTION(m), *want = NULL;
    if (t == &RowsType)
        want = take ? (void *)Rows_take_run : (void *)Rows_read_run;
    else if (t == &PartsRunsType)
        want = take ? (void *)PartsRuns_take_run : (void *)PartsRuns_read_run;
    return want != NULL && fn == want ? (RunFn)(void (*)(void))fn : NULL;
}

int run_pair(PyObject *dt, PyObject *yt, Py_ssize_t d, Py_ssize_t l, Job *j, PyObject **x,
             PyObject **y)
{
    yt = yt == Py_None ? dt : yt;
    PyTypeObject *descr_type = (PyTypeObject *)dtype_type;
    int xs = PyObject_TypeCheck(dt, descr_type) ? float_size((const descr_head *)dt) : 0;
    int ys = PyObject_TypeCheck(yt, descr_type) ? float_size((const descr_head *)yt) : 0;
    if (!xs || !ys || (xs != ys && ys != 8)) {
        PyErr_SetString(PyExc_TypeError, "take_run: dtype must be float64 or float32, and "
                                         "ydtype None, the same, or float64");
        return -1;
    }
    /* as exactbatch.arrays.batch_pair: one allocation, x then y on whole lines */
    Py_ssize_t xb, yb, at_y, total;
    if (__builtin_mul_overflow(j->r, d * xs, &xb) || __builtin_mul_overflow(j->r, l * ys, &yb) ||
        __builtin_add_overflow(xb, ALIGN - 1, &at_y) ||
        __builtin_add_overflow((at_y / ALIGN) * ALIGN, yb + ALIGN, &total)) {
        PyErr_SetString(PyExc_OverflowError, "take_run: the batch is too large");
        return -1;
    }
    at_y = (at_y / ALIGN) * ALIGN;
    PyObject *n = PyLong_FromSsize_t(total), *raw = NULL;
    *x = *y = NULL;
    if (n != NULL) {
        PyObject *eargs[2] = {n, uint8_dtype};
        raw = PyObject_Vectorcall(np_empty, eargs, 2, NULL);
    }
    Py_XDECREF(n);
    if (raw == NULL || !PyObject_TypeCheck(raw, (PyTypeObject *)ndarray_type)) {
        Py_XDECREF(raw);
        return -1;
    }
    Py_ssize_t at = (Py_ssize_t)((ALIGN - (uintptr_t)((array_head *)raw)->data % ALIGN) % ALIGN);
    if ((*x = view(raw, j->r, d, dt, at)) == NULL || (*y = view(raw, j->r, l, yt, at + at_y)) == NULL) {
        Py_CLEAR(*x);
        Py_DECREF(raw);
        return -1;
    }
    Py_DECREF(raw);
    j->ox = ((const array_head *)*x)->data;
    j->oy = ((const array_head *)*y)->data;
    j->f32 = xs == 4;
    j->f32y = ys == 4;
    return 0;
}

PyObject *take_run_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t d,
                      Py_ssize_t l, TakeRead read)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "take_run(order, start, size, dtype, ydtype) takes 5 "
                                         "arguments");
        return NULL;
    }
    Job j = JOB_INIT;
    PyObject *x = NULL, *y = NULL, *res = NULL;
    if (order_span(args[0], args[1], args[2], &j) < 0 ||
        run_pair(args[3], args[4], d, l, &j, &x, &y) < 0)
        return NULL;
    PyObject *none = read(self, &j, args, x, y);
    if (none != NULL) {
        Py_DECREF(none);
        res = PyTuple_Pack(2, x, y);
    }
    Py_DECREF(x);
    Py_DECREF(y);
    return res;
}

static PyObject *rows_take_read(PyObject *self, Job *j, PyObject *const *args, PyObject *x,
                                PyObject *y)
{
    return copy((RowsObject *)self, j);
}

PyObject *Rows_take_run(RowsObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return take_run_of((PyObject *)self, args, nargs, self->d, self->l, rows_take_read);
}

/* job_type(run, k, size, digest, start): a tuple of the subclass job_type, made as
 * tuple.__new__(job_type, ...) makes it (the items made first, then the tuple). */
static PyObject *new_job(PyTypeObject *job_type, PyObject *run, Py_ssize_t k, Py_ssize_t size,
                         unsigned long long digest, Py_ssize_t start)
{
    PyObject *items[5] = {Py_NewRef(run), PyLong_FromSsize_t(k), PyLong_FromSsize_t(size),
                          PyLong_FromUnsignedLongLong(digest), PyLong_FromSsize_t(start)};
    PyObject *job = NULL;
    if (items[1] && items[2] && items[3] && items[4])
        job = job_type->tp_alloc(job_type, 5);
    if (job == NULL) {
        for (int i = 0; i < 5; i++)
            Py_XDECREF(items[i]);
        return NULL;
    }
    for (int i = 0; i < 5; i++)
        PyTuple_SET_ITEM(job, i, items[i]);
    return job;
}

PyObject *run_jobs(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "run_jobs(job_type, run, k0, k1, b, n, digests) takes "
                                         "7 arguments");
        return NULL;
    }
    PyTypeObject *job_type = (PyTypeObject *)args[0];
    if (!PyType_Check(args[0]) || !PyType_IsSubtype(job_type, &PyTuple_Type) ||
        job_type->tp_basicsize != PyTuple_Type.tp_basicsize ||
        job_type->tp_itemsize != PyTuple_Type.tp_itemsize) {
        PyErr_SetString(PyExc_TypeError, "run_jobs: job_type must be a subclass of tuple with "
                                         "no fields of its own (__slots__ = ())");
        return NULL;
    }
    Py_ssize_t v[4];
    for (int i = 0; i < 4; i++)
        if ((v[i] = PyLong_AsSsize_t(args[2 + i])) == -1 && PyErr_Occurred())
            return NULL;
    Py_ssize_t k0 = v[0], k1 = v[1], b = v[2], n = v[3];
    Py_buffer db;
    if (PyObject_GetBuffer(args[6], &db, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return NULL;
    PyObject *out = NULL;
    const char *f = plain_format(&db);
    if (db.itemsize != 8 || db.ndim != 1 || !strchr("QLK", f[0]) || f[1]) {
        PyErr_SetString(PyExc_TypeError, "run_jobs: digests must be a 1-D uint64 buffer");
    } else if (b < 1 || k0 < 0 || k1 < k0 || k1 > db.len / 8 ||
               (k1 > k0 && (n < 1 || (k1 - 1) > (n - 1) / b))) {
        PyErr_Format(PyExc_IndexError, "run_jobs: batches %zd .. %zd of %zd rows in batches "
                     "of %zd, with %zd digests", k0, k1, n, b, db.len / 8);
    } else if ((out = PyList_New(k1 - k0)) != NULL) {
        const unsigned long long *dg = db.buf;
        for (Py_ssize_t k = k0; k < k1; k++) {
            Py_ssize_t start = k * b, size = n - start < b ? n - start : b;
            PyObject *job = new_job(job_type, args[1], k, size, dg[k], start);
            if (job == NULL) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, k - k0, job);
        }
    }
    PyBuffer_Release(&db);
    return out;
}

/* ns's histogram bucket (exactbatch.loader.telemetry._bucket). */
static Py_ssize_t bucket(unsigned long long ns)
{
    int b = ns ? 64 - __builtin_clzll(ns) : 0;
    if (b <= 4)
        return (Py_ssize_t)ns;
    return ((Py_ssize_t)(b - 3) << 3) | (Py_ssize_t)((ns >> (b - 4)) & 7);
}

/* slot[i] += v, slot a list of ints. 0, or -1 with an exception set. */
static int add_to(PyObject *slot, Py_ssize_t i, long long v)
{
    if (!PyList_Check(slot) || i < 0 || i >= PyList_GET_SIZE(slot)) {
        PyErr_SetString(PyExc_IndexError, "waited: the slot is too short");
        return -1;
    }
    PyObject *old = PyList_GET_ITEM(slot, i), *inc = PyLong_FromLongLong(v), *sum = NULL;
    if (inc != NULL)
        sum = PyNumber_Add(old, inc);
    Py_XDECREF(inc);
    if (sum == NULL)
        return -1;
    PyList_SET_ITEM(slot, i, sum);
    Py_DECREF(old);
    return 0;
}

PyObject *waited(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "waited(slot, t0, at, hist) takes 4 arguments");
        return NULL;
    }
    long long t0 = PyLong_AsLongLong(args[1]);
    Py_ssize_t at = PyLong_AsSsize_t(args[2]), hist = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *now = PyObject_CallNoArgs(perf_counter_ns); /* t0's clock, whatever the OS */
    if (now == NULL)
        return NULL;
    long long end = PyLong_AsLongLong(now), ns = end - t0;
    if ((end == -1 && PyErr_Occurred()) || add_to(args[0], at, ns) < 0 ||
        (hist >= 0 && add_to(args[0], hist + bucket(ns < 0 ? 0 : (unsigned long long)ns), 1) < 0)) {
        Py_DECREF(now);
        return NULL;
    }
    return now;
}

/* waited_on(tel, t0, at, hist): waited() into the calling thread's slot of the
 * Telemetry tel (tel._local.slot, or tel._slot() at the thread's first record), then
 * tel._report_now(now) when a report is due (now >= tel._due); None. The pure twin is
 * exactbatch.loader.telemetry.waited_on: next_into records every call through it, and
 * its three attribute looks and two calls in Python cost a fifth of a small batch. */
static PyObject *s_local, *s_slot, *s__slot, *s_due, *s_report_now; /* interned names */

PyObject *telemetry_slot(PyObject *tel)
{
    PyObject *local = PyObject_GetAttr(tel, s_local), *slot = NULL;
    if (local == NULL)
        return NULL;
    slot = PyObject_GetAttr(local, s_slot);
    Py_DECREF(local);
    if (slot == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
        slot = PyObject_CallMethodNoArgs(tel, s__slot); /* (made and kept) */
    }
    return slot;
}

PyObject *waited_on(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "waited_on(tel, t0, at, hist) takes 4 arguments");
        return NULL;
    }
    PyObject *tel = args[0], *slot = telemetry_slot(tel);
    if (slot == NULL)
        return NULL;
    PyObject *wargs[4] = {slot, args[1], args[2], args[3]};
    PyObject *now = waited(mod, wargs, 4), *due = NULL, *res = NULL;
    Py_DECREF(slot);
    if (now == NULL || (due = PyObject_GetAttr(tel, s_due)) == NULL)
        goto done;
    int late = PyObject_RichCompareBool(now, due, Py_GE);
    if (late < 0)
        goto done;
    res = late ? PyObject_CallMethodOneArg(tel, s_report_now, now) : Py_NewRef(Py_None);
    if (res != NULL && res != Py_None) {
        Py_SETREF(res, Py_NewRef(Py_None));
    }
done:
    Py_XDECREF(now);
    Py_XDECREF(due);
    return res;
}

/* Cursor.hand(group, job), step for step; see _core_hand.h. */
static PyObject *s_last_rows, *s_phase, *s_done, *s_settle; /* interned names */

int cursor_hand(PyObject *cursor, PyObject *draining, PyObject *group, PyObject *handed,
                PyObject *job, PyObject *size)
{
    if (PyList_Append(handed, job) < 0 || PyObject_SetAttr(cursor, s_last_rows, size) < 0)
        return -1;
    PyObject *phase = PyObject_GetAttr(cursor, s_phase);
    if (phase == NULL)
        return -1;
    Py_DECREF(phase); /* (compared by identity only) */
    if (phase != draining)
        return 0;
    PyObject *done = PyObject_CallMethodNoArgs(group, s_done);
    if (done == NULL)
        return -1;
    int yes = PyObject_IsTrue(done);
    Py_DECREF(done);
    if (yes <= 0)
        return yes;
    PyObject *r = PyObject_CallMethodNoArgs(cursor, s_settle);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* waited_on(tel, t0, at, hist) with the calling thread's slot kept; see _core_hand.h. */
int wait_kept(PyObject *tel, PyObject **slot, unsigned long *tid, PyObject *t0, PyObject *at,
              PyObject *hist)
{
    unsigned long me = PyThread_get_thread_ident();
    if (*slot == NULL || me != *tid) {
        PyObject *s = telemetry_slot(tel);
        if (s == NULL)
            return -1;
        Py_XSETREF(*slot, s);
        *tid = me;
    }
    PyObject *wargs[4] = {*slot, t0, at, hist};
    PyObject *now = waited(NULL, wargs, 4), *due = NULL, *r = NULL;
    if (now == NULL || (due = PyObject_GetAttr(tel, s_due)) == NULL)
        goto done;
    int late = PyObject_RichCompareBool(now, due, Py_GE);
    if (late < 0)
        goto done;
    r = late ? PyObject_CallMethodOneArg(tel, s_report_now, now) : Py_NewRef(Py_None);
done:
    Py_XDECREF(now);
    Py_XDECREF(due);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

int hand_ready(void)
{
    s_last_rows = PyUnicode_InternFromString("_last_rows");
    s_phase = PyUnicode_InternFromString("phase");
    s_done = PyUnicode_InternFromString("done");
    s_settle = PyUnicode_InternFromString("settle");
    if (!s_last_rows || !s_phase || !s_done || !s_settle)
        return -1;
    s_local = PyUnicode_InternFromString("_local");
    s_slot = PyUnicode_InternFromString("slot");
    s__slot = PyUnicode_InternFromString("_slot");
    s_due = PyUnicode_InternFromString("_due");
    s_report_now = PyUnicode_InternFromString("_report_now");
    if (!s_local || !s_slot || !s__slot || !s_due || !s_report_now)
        return -1;
    PyObject *time = PyImport_ImportModule("time");
    if (time == NULL)
        return -1;
    perf_counter_ns = PyObject_GetAttrString(time, "perf_counter_ns");
    Py_DECREF(time);
    if (perf_counter_ns == NULL)
        return -1;
    PyObject *np = PyImport_ImportModule("numpy");
    if (np == NULL)
        return -1;
    np_empty = PyObject_GetAttrString(np, "empty");
    PyObject *dtype = np_empty ? PyObject_GetAttrString(np, "dtype") : NULL;
    Py_DECREF(np);
    if (dtype == NULL)
        return -1;
    if (!PyType_Check(dtype)) {
        Py_DECREF(dtype);
        PyErr_SetString(PyExc_TypeError, "numpy.dtype is not a type");
        return -1;
    }
    dtype_type = dtype; /* (held) */
    uint8_dtype = PyObject_CallFunction(dtype, "s", "uint8");
    return uint8_dtype == NULL ? -1 : 0;
}
