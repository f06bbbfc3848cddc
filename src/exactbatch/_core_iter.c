/* iter()'s hand-out in one call (see _core_iter.h; the pure twin, step for step, is
 * exactbatch.loader.iter_step.IterStep: what each step here does is said there). */
#include "_core_iter.h"

#include <structmember.h>

#include "_core_hand.h"
#include "_core_rows.h"

typedef struct {
    PyObject_HEAD
    /* EpochIterator's fields (members: its Python code reads and sets them) */
    PyObject *current, *cursor, *gen, *peeked; /* _current, _cursor, _gen, _peeked */
    /* set by __init__ (members, read only: the twin's step reads them from an instance) */
    PyObject *job_type, *plain, *tel, *waits; /* _job_type, _plain, _tel, _waits */
    PyObject *draining;                       /* Phase.DRAINING */
    PyObject *at[2], *hist[2];                /* waits[read]: a wait's (at, hist) */
    /* Kept from the last call, each looked up again only when it changes: the group (its
     * queue, the queue's popleft and its handed: a Group's, never reassigned); the run
     * (an OrderRun: its via, rows and dtypes, never reassigned) and via's take_run then
     * (checked at every lazy read: a reader closed, or a test's double, changes it); the
     * calling thread's telemetry slot. */
    PyObject *g, *g_queue, *g_pop, *g_handed;
    PyObject *run, *run_via, *run_rows, *run_dt, *run_yt, *run_take; /* run_take NULL: not ours */
    unsigned long tid;
    PyObject *slot;
} IterObject;

static PyObject *s_telemetry, *s_spec, *s_pad, *s_waiter, *s_queue, *s_popleft, *s_handed;
static PyObject *s_gen, *s_size, *s_via, *s_rows, *s_dtypes, *s_take_run, *s_unpop;
static PyObject *s__waited, *s__hand;
static PyObject *perf_ns; /* time.perf_counter_ns: telemetry's clock */

/* tel.waiter(read): a pair of ints (at, hist), kept in *at and *hist; the pair itself,
 * a new reference (NULL with an exception set). */
static PyObject *waiter(PyObject *tel, int read, PyObject **at, PyObject **hist)
{
    PyObject *w = PyObject_CallMethodOneArg(tel, s_waiter, read ? Py_True : Py_False);
    if (w == NULL)
        return NULL;
    if (!PyTuple_Check(w) || PyTuple_GET_SIZE(w) != 2 || !PyLong_Check(PyTuple_GET_ITEM(w, 0)) ||
        !PyLong_Check(PyTuple_GET_ITEM(w, 1))) {
        Py_DECREF(w);
        PyErr_SetString(PyExc_TypeError, "IterStep: telemetry.waiter() must give a pair of ints");
        return NULL;
    }
    Py_XSETREF(*at, Py_NewRef(PyTuple_GET_ITEM(w, 0)));
    Py_XSETREF(*hist, Py_NewRef(PyTuple_GET_ITEM(w, 1)));
    return w;
}

/* Let go of the group and run kept. */
static void forget(IterObject *self)
{
    Py_CLEAR(self->g);
    Py_CLEAR(self->g_queue);
    Py_CLEAR(self->g_pop);
    Py_CLEAR(self->g_handed);
    Py_CLEAR(self->run);
    Py_CLEAR(self->run_via);
    Py_CLEAR(self->run_rows);
    Py_CLEAR(self->run_dt);
    Py_CLEAR(self->run_yt);
    Py_CLEAR(self->run_take);
}

static int Iter_init(IterObject *self, PyObject *args, PyObject *kwargs)
{
    PyObject *cursor, *gen, *current, *job_type, *draining;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "IterStep() takes no keyword arguments");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "OOOOO:IterStep", &cursor, &gen, &current, &job_type, &draining))
        return -1;
    if (!PyType_Check(job_type)) {
        PyErr_SetString(PyExc_TypeError, "IterStep: job_type must be a type");
        return -1;
    }
    PyObject *tel = PyObject_GetAttr(cursor, s_telemetry), *spec = NULL, *pad = NULL;
    PyObject *w0 = NULL, *w1 = NULL, *waits = NULL, *peeked = NULL;
    int padded = -1;
    if (tel == NULL || (spec = PyObject_GetAttr(cursor, s_spec)) == NULL ||
        (pad = PyObject_GetAttr(spec, s_pad)) == NULL || (padded = PyObject_IsTrue(pad)) < 0 ||
        (w0 = waiter(tel, 0, &self->at[0], &self->hist[0])) == NULL ||
        (w1 = waiter(tel, 1, &self->at[1], &self->hist[1])) == NULL ||
        (waits = PyTuple_Pack(2, w0, w1)) == NULL || (peeked = PyDict_New()) == NULL) {
        Py_XDECREF(tel);
        Py_XDECREF(spec);
        Py_XDECREF(pad);
        Py_XDECREF(w0);
        Py_XDECREF(w1);
        Py_XDECREF(waits);
        return -1;
    }
    Py_DECREF(spec);
    Py_DECREF(pad);
    Py_DECREF(w0);
    Py_DECREF(w1);
    Py_XSETREF(self->cursor, Py_NewRef(cursor));
    Py_XSETREF(self->gen, Py_NewRef(gen));
    Py_XSETREF(self->current, Py_NewRef(current));
    Py_XSETREF(self->peeked, peeked);
    Py_XSETREF(self->job_type, Py_NewRef(job_type));
    Py_XSETREF(self->draining, Py_NewRef(draining));
    Py_XSETREF(self->plain, Py_NewRef(padded ? Py_False : Py_True));
    Py_XSETREF(self->tel, tel);
    Py_XSETREF(self->waits, waits);
    Py_CLEAR(self->slot);
    forget(self);
    return 0;
}

/* group's queue, popleft and handed kept (self->g ...): 0, or -1. */
static int keep_group(IterObject *self, PyObject *group)
{
    PyObject *queue = PyObject_GetAttr(group, s_queue), *pop = NULL, *handed = NULL;
    if (queue == NULL || (pop = PyObject_GetAttr(queue, s_popleft)) == NULL ||
        (handed = PyObject_GetAttr(group, s_handed)) == NULL) {
        Py_XDECREF(queue);
        Py_XDECREF(pop);
        return -1;
    }
    if (!PyList_Check(handed)) {
        PyErr_SetString(PyExc_TypeError, "a group's handed must be a list");
        Py_DECREF(queue);
        Py_DECREF(pop);
        Py_DECREF(handed);
        return -1;
    }
    Py_XSETREF(self->g, Py_NewRef(group));
    Py_XSETREF(self->g_queue, queue);
    Py_XSETREF(self->g_pop, pop);
    Py_XSETREF(self->g_handed, handed);
    return 0;
}

/* Is job, claimed unread, this step's to read (the iterator's reads plain, none read by
 * peek, a job of job_type - an epoch's whole order's, no row ids - whose run's via has
 * a compiled take_run: run_method's)? 1 with the rows object, the order and the dtypes
 * (new references: a read of many rows lets the GIL go, and another thread's call may
 * replace what is kept meanwhile) and the take_run's function; 0; -1 with an exception
 * set. */
static int ours(IterObject *self, PyObject *job, PyObject **rowsobj, PyObject **order,
                PyObject **dt, PyObject **yt, RunFn *fn)
{
    if (self->plain != Py_True || self->peeked == NULL) /* (none: its own path raises) */
        return 0;
    int peeked = PyObject_IsTrue(self->peeked);
    if (peeked != 0)
        return peeked < 0 ? -1 : 0;
    if ((PyObject *)Py_TYPE(job) != self->job_type || PyTuple_GET_SIZE(job) != 5)
        return 0;
    PyObject *run = PyTuple_GET_ITEM(job, 0);
    if (run != self->run) { /* a new run: its via, rows and dtypes */
        PyObject *via = PyObject_GetAttr(run, s_via), *rows = NULL, *dtypes = NULL;
        if (via == NULL || (rows = PyObject_GetAttr(run, s_rows)) == NULL ||
            (dtypes = PyObject_GetAttr(run, s_dtypes)) == NULL) {
            Py_XDECREF(via);
            Py_XDECREF(rows);
            return -1;
        }
        if (!PyTuple_Check(dtypes) || PyTuple_GET_SIZE(dtypes) != 2) {
            PyErr_SetString(PyExc_TypeError, "a run's dtypes must be a pair");
            Py_DECREF(via);
            Py_DECREF(rows);
            Py_DECREF(dtypes);
            return -1;
        }
        Py_XSETREF(self->run, Py_NewRef(run));
        Py_XSETREF(self->run_via, via);
        Py_XSETREF(self->run_rows, rows);
        Py_XSETREF(self->run_dt, Py_NewRef(PyTuple_GET_ITEM(dtypes, 0)));
        Py_XSETREF(self->run_yt, Py_NewRef(PyTuple_GET_ITEM(dtypes, 1)));
        Py_CLEAR(self->run_take);
        Py_DECREF(dtypes);
    }
    PyObject *m = PyObject_GetAttr(self->run_via, s_take_run);
    if (m == NULL)
        return -1;
    if (m != self->run_take) { /* (a bound method kept by the reader: the same object) */
        Py_XSETREF(self->run_take, run_method(m, 1) != NULL ? Py_NewRef(m) : NULL);
    }
    Py_DECREF(m);
    if (self->run_take == NULL)
        return 0;
    *rowsobj = Py_NewRef(PyCFunction_GET_SELF(self->run_take));
    *fn = run_method(self->run_take, 1);
    *order = Py_NewRef(self->run_rows);
    *dt = Py_NewRef(self->run_dt);
    *yt = Py_NewRef(self->run_yt);
    return 1;
}

/* After a read raised: the wait recorded (a wait, not a read) and group.unpop(item),
 * the read's error the one raised (an error of theirs is raised instead, the read's its
 * context). */
static void read_failed(IterObject *self, PyObject *group, PyObject *item, PyObject *t0)
{
    PyObject *t, *v, *tb, *r = NULL;
    error_keep(&t, &v, &tb);
    if (wait_kept(self->tel, &self->slot, &self->tid, t0, self->at[0], self->hist[0]) == 0)
        r = PyObject_CallMethodOneArg(group, s_unpop, item);
    Py_XDECREF(r);
    error_back(r != NULL, t, v, tb);
}

static PyObject *Iter_next(IterObject *self)
{
    if (self->cursor == NULL || self->current == NULL) {
        PyErr_SetString(PyExc_TypeError, "IterStep.__init__ was not called");
        return NULL;
    }
    if (self->current != self->g && keep_group(self, self->current) < 0)
        return NULL;
    /* (held here: a read that lets the GIL go lets another thread replace them) */
    PyObject *group = Py_NewRef(self->g), *handed = Py_NewRef(self->g_handed), *item = NULL;
    PyObject *size = NULL, *res = NULL, *rowsobj = NULL, *order = NULL, *dt = NULL, *yt = NULL;
    PyObject *t0 = NULL;
    Py_ssize_t left = PyObject_Size(self->g_queue);
    if (left < 0)
        goto done;
    if (left > 0)
        item = PyObject_CallNoArgs(self->g_pop);
    if (item == NULL) {
        if (left > 0 && !PyErr_ExceptionMatches(PyExc_IndexError))
            goto done;
        PyErr_Clear(); /* empty, or emptied by another thread: the next group */
        forget(self);  /* (an emptied group kept would hold its arrays past the next one's read) */
        res = PyObject_CallMethodNoArgs((PyObject *)self, s__waited);
        goto done;
    }
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2)
        goto python;
    PyObject *job = PyTuple_GET_ITEM(item, 0), *batch = PyTuple_GET_ITEM(item, 1);
    PyObject *gen = PyObject_GetAttr(self->cursor, s_gen);
    if (gen == NULL)
        goto done;
    int same = gen == self->gen ? 1 : PyObject_RichCompareBool(gen, self->gen, Py_EQ);
    Py_DECREF(gen);
    if (same <= 0) {
        if (same < 0)
            goto done;
        goto python; /* a stale iterator: its own path raises */
    }
    if (batch != Py_None) { /* read with its group: handed out as it is */
        int run_job = (PyObject *)Py_TYPE(job) == self->job_type && PyTuple_GET_SIZE(job) == 5;
        size = run_job ? Py_NewRef(PyTuple_GET_ITEM(job, 2)) : PyObject_GetAttr(job, s_size);
        if (size == NULL ||
            cursor_hand(self->cursor, self->draining, group, handed, job, size) < 0)
            goto done;
        res = Py_NewRef(batch);
        goto done;
    }
    RunFn fn = NULL;
    int mine = ours(self, job, &rowsobj, &order, &dt, &yt, &fn);
    if (mine <= 0) {
        if (mine < 0)
            goto done;
        goto python;
    }
    if ((t0 = PyObject_CallNoArgs(perf_ns)) == NULL)
        goto done;
    size = Py_NewRef(PyTuple_GET_ITEM(job, 2));
    PyObject *rargs[5] = {order, PyTuple_GET_ITEM(job, 4), size, dt, yt};
    PyObject *got = fn(rowsobj, rargs, 5);
    if (got == NULL) {
        read_failed(self, group, item, t0);
        goto done;
    }
    if (wait_kept(self->tel, &self->slot, &self->tid, t0, self->at[1], self->hist[1]) < 0 ||
        cursor_hand(self->cursor, self->draining, group, handed, job, size) < 0) {
        Py_DECREF(got);
        goto done;
    }
    res = got;
    goto done;
python: /* popped, but not for this step: the iterator's own path goes on with it */
    res = PyObject_CallMethodObjArgs((PyObject *)self, s__hand, group, item, NULL);
done:
    Py_DECREF(group);
    Py_DECREF(handed);
    Py_XDECREF(item);
    Py_XDECREF(size);
    Py_XDECREF(rowsobj);
    Py_XDECREF(order);
    Py_XDECREF(dt);
    Py_XDECREF(yt);
    Py_XDECREF(t0);
    return res;
}

static int Iter_traverse(IterObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->current);
    Py_VISIT(self->cursor);
    Py_VISIT(self->gen);
    Py_VISIT(self->peeked);
    Py_VISIT(self->job_type);
    Py_VISIT(self->plain);
    Py_VISIT(self->tel);
    Py_VISIT(self->waits);
    Py_VISIT(self->draining);
    Py_VISIT(self->g);
    Py_VISIT(self->g_queue);
    Py_VISIT(self->g_pop);
    Py_VISIT(self->g_handed);
    Py_VISIT(self->run);
    Py_VISIT(self->run_via);
    Py_VISIT(self->run_rows);
    Py_VISIT(self->run_dt);
    Py_VISIT(self->run_yt);
    Py_VISIT(self->run_take);
    Py_VISIT(self->slot);
    return 0;
}

static int Iter_clear(IterObject *self)
{
    Py_CLEAR(self->current);
    Py_CLEAR(self->cursor);
    Py_CLEAR(self->gen);
    Py_CLEAR(self->peeked);
    Py_CLEAR(self->job_type);
    Py_CLEAR(self->plain);
    Py_CLEAR(self->tel);
    Py_CLEAR(self->waits);
    Py_CLEAR(self->draining);
    for (int i = 0; i < 2; i++) {
        Py_CLEAR(self->at[i]);
        Py_CLEAR(self->hist[i]);
    }
    forget(self);
    Py_CLEAR(self->slot);
    return 0;
}

static void Iter_dealloc(IterObject *self)
{
    PyObject_GC_UnTrack(self);
    Iter_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef Iter_members[] = {
    {"_current", T_OBJECT_EX, offsetof(IterObject, current), 0, "the group handed out from"},
    {"_cursor", T_OBJECT_EX, offsetof(IterObject, cursor), READONLY, "the loader's cursor"},
    {"_gen", T_OBJECT_EX, offsetof(IterObject, gen), READONLY, "the cursor's generation"},
    {"_peeked", T_OBJECT_EX, offsetof(IterObject, peeked), 0, "batches read by peek"},
    {"_job_type", T_OBJECT_EX, offsetof(IterObject, job_type), READONLY, "RunJob"},
    {"_plain", T_OBJECT_EX, offsetof(IterObject, plain), READONLY, "reads not padded"},
    {"_tel", T_OBJECT_EX, offsetof(IterObject, tel), READONLY, "the cursor's telemetry"},
    {"_waits", T_OBJECT_EX, offsetof(IterObject, waits), READONLY,
     "telemetry.waiter(False), waiter(True)"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject IterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exactbatch._core.IterStep",
    .tp_basicsize = sizeof(IterObject),
    .tp_dealloc = (destructor)Iter_dealloc,
    .tp_traverse = (traverseproc)Iter_traverse,
    .tp_clear = (inquiry)Iter_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "IterStep(cursor, gen, current, job_type, draining)\n--\n\n"
              "iter()'s hand-out in one call: the base of EpochIterator, its __next__ in C "
              "(exactbatch.loader.iter_step.IterStep's twin).",
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)Iter_next,
    .tp_members = Iter_members,
    .tp_init = (initproc)Iter_init,
    .tp_new = PyType_GenericNew,
};

int iter_ready(PyObject *module)
{
    struct {
        PyObject **s;
        const char *name;
    } names[] = {
        {&s_telemetry, "telemetry"}, {&s_spec, "spec"},       {&s_pad, "pad"},
        {&s_waiter, "waiter"},       {&s_queue, "queue"},     {&s_popleft, "popleft"},
        {&s_handed, "handed"},       {&s_gen, "gen"},         {&s_size, "size"},
        {&s_via, "via"},             {&s_rows, "rows"},       {&s_dtypes, "dtypes"},
        {&s_take_run, "take_run"},   {&s_unpop, "unpop"},     {&s__waited, "_waited"},
        {&s__hand, "_hand"},
    };

    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].s = PyUnicode_InternFromString(names[i].name)) == NULL)
            return -1;
    PyObject *time = PyImport_ImportModule("time");
    if (time == NULL)
        return -1;
    perf_ns = PyObject_GetAttrString(time, "perf_counter_ns");
    Py_DECREF(time);
    if (perf_ns == NULL || PyType_Ready(&IterType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "IterStep", (PyObject *)&IterType);
}
