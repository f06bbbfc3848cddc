/* next_into's hand-out in one call (see _core_into.h; the pure twin, step for step, is
 * exactbatch.loader.handout.HandOut: what each step here does is said there). */
#include "_core_into.h"

#include "_core_fits.h"
#include "_core_hand.h"
#include "_core_rows.h"

typedef struct {
    PyObject_HEAD
    PyObject *checks, *holder, *cursor, *tel; /* IntoChecks, Holder, Cursor, Telemetry */
    PyObject *at, *hist;                      /* the slot's place of a wait that read */
    PyObject *job_type;                       /* RunJob: the only job handed out here */
    PyObject *draining;                       /* Phase.DRAINING */
    PyObject *plain;                          /* checks.plain last parsed, and its values */
    Py_ssize_t b, d, l;
    int num; /* NPY_DOUBLE_NUM or NPY_FLOAT_NUM; 0: not plain */
    /* Kept from the last call, each looked up again only when it changes: the group
     * and its epoch, queue and handed (a Group's, never reassigned); the run (an
     * OrderRun: its via and rows, never reassigned) and via's read_run then (checked
     * at every call: a reader closed, or a test's double, changes it); the calling
     * thread's telemetry slot (threading.local's: one list a thread, for its life). */
    PyObject *g, *g_epoch, *g_queue, *g_handed;
    PyObject *run, *run_via, *run_rows, *run_read; /* run_read NULL: not compiled */
    unsigned long tid;
    PyObject *slot;
} IntoObject;

static PyObject *s_plain, *s_group, *s_epoch, *s_current, *s_queue, *s_popleft, *s_via;
static PyObject *s_rows, *s_read_run, *s_handed, *s_unpop;
static PyObject *perf_ns; /* time.perf_counter_ns: telemetry's clock */

/* Is checks.plain the (b, d, l, itemsize) of plain buffers? Parsed when it changes. */
static int plain_now(IntoObject *self)
{
    PyObject *plain = PyObject_GetAttr(self->checks, s_plain);
    if (plain == NULL)
        return -1;
    if (plain != self->plain) {
        Py_XSETREF(self->plain, Py_NewRef(plain));
        self->num = 0;
        if (PyTuple_Check(plain) && PyTuple_GET_SIZE(plain) == 4) {
            Py_ssize_t v[4];
            for (int i = 0; i < 4; i++)
                if ((v[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(plain, i))) == -1 &&
                    PyErr_Occurred()) {
                    Py_DECREF(plain);
                    return -1;
                }
            self->b = v[0], self->d = v[1], self->l = v[2];
            self->num = v[3] == 8 ? NPY_DOUBLE_NUM : v[3] == 4 ? NPY_FLOAT_NUM : 0;
        }
    }
    Py_DECREF(plain);
    return self->num != 0;
}

/* group.unpop(item) after a read raised: the read's error stays the one raised (an
 * error of unpop's is raised instead, the read's its context). */
static void unpop(PyObject *group, PyObject *item)
{
    PyObject *t, *v, *tb;
    error_keep(&t, &v, &tb);
    PyObject *r = PyObject_CallMethodOneArg(group, s_unpop, item);
    Py_XDECREF(r);
    error_back(r != NULL, t, v, tb);
}

/* The popped item's job, and the compiled rows that read it and its order (new
 * references: a read of many rows lets the GIL go, and another thread's call may
 * replace what is kept meanwhile) and the read's function, when this path hands it out
 * (its run's via a reader whose read_run is compiled: run_method's): 1, else 0 (or -1
 * with an exception set). */
static int ours(IntoObject *self, PyObject *item, PyObject **job, PyObject **rowsobj,
                PyObject **order, RunFn *fn)
{
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
        PyTuple_GET_ITEM(item, 1) != Py_None)
        return 0;
    *job = PyTuple_GET_ITEM(item, 0);
    if ((PyObject *)Py_TYPE(*job) != self->job_type || PyTuple_GET_SIZE(*job) != 5)
        return 0;
    Py_ssize_t size = PyLong_AsSsize_t(PyTuple_GET_ITEM(*job, 2));
    if (size == -1 && PyErr_Occurred())
        return -1;
    if (size != self->b)
        return 0;
    PyObject *run = PyTuple_GET_ITEM(*job, 0);
    if (run != self->run) { /* a new run: its via and rows */
        PyObject *via = PyObject_GetAttr(run, s_via), *rows = NULL;
        if (via == NULL || (rows = PyObject_GetAttr(run, s_rows)) == NULL) {
            Py_XDECREF(via);
            return -1;
        }
        Py_XSETREF(self->run, Py_NewRef(run));
        Py_XSETREF(self->run_via, via);
        Py_XSETREF(self->run_rows, rows);
        Py_CLEAR(self->run_read);
    }
    PyObject *m = PyObject_GetAttr(self->run_via, s_read_run);
    if (m == NULL)
        return -1;
    if (m != self->run_read) { /* (a bound method kept by the reader: the same object) */
        Py_XSETREF(self->run_read, run_method(m, 0) != NULL ? Py_NewRef(m) : NULL);
    }
    Py_DECREF(m);
    if (self->run_read == NULL)
        return 0;
    *rowsobj = Py_NewRef(PyCFunction_GET_SELF(self->run_read));
    *fn = run_method(self->run_read, 0);
    *order = Py_NewRef(self->run_rows);
    return 1;
}

/* waited_on(tel, t0, at, hist) with the thread's slot kept: 0, or -1. */
static int record(IntoObject *self, PyObject *t0)
{
    return wait_kept(self->tel, &self->slot, &self->tid, t0, self->at, self->hist);
}

/* The group in holder now, and its fields kept (self->g ...): 1; 0 when there is none
 * (None); -1 with an exception set. */
static int group_now(IntoObject *self)
{
    PyObject *group = PyObject_GetAttr(self->holder, s_group);
    if (group == NULL)
        return -1;
    if (group == self->g) {
        Py_DECREF(group);
        return 1;
    }
    if (group == Py_None) {
        Py_DECREF(group);
        return 0;
    }
    PyObject *epoch = PyObject_GetAttr(group, s_epoch), *queue = NULL, *handed = NULL;
    if (epoch == NULL || (queue = PyObject_GetAttr(group, s_queue)) == NULL ||
        (handed = PyObject_GetAttr(group, s_handed)) == NULL) {
        Py_DECREF(group);
        Py_XDECREF(epoch);
        Py_XDECREF(queue);
        return -1;
    }
    if (!PyList_Check(handed)) {
        PyErr_SetString(PyExc_TypeError, "a group's handed must be a list");
        Py_DECREF(group);
        Py_DECREF(epoch);
        Py_DECREF(queue);
        Py_DECREF(handed);
        return -1;
    }
    Py_XSETREF(self->g, group);
    Py_XSETREF(self->g_epoch, epoch);
    Py_XSETREF(self->g_queue, queue);
    Py_XSETREF(self->g_handed, handed);
    return 1;
}

/* Let go of the group kept (found empty: the loader claims the next, and a group of a
 * stream's batches holds their arrays until it is swept, so a kept one would hold them
 * past the next claim's read: issue 42). */
static void forget_group(IntoObject *self)
{
    Py_CLEAR(self->g);
    Py_CLEAR(self->g_epoch);
    Py_CLEAR(self->g_queue);
    Py_CLEAR(self->g_handed);
}

/* Let go of the group and run kept (the cursor moved on, or was closed): nothing of a
 * past epoch (its order, its reader) stays held by the loader's next_into. */
static void forget(IntoObject *self)
{
    forget_group(self);
    Py_CLEAR(self->run);
    Py_CLEAR(self->run_via);
    Py_CLEAR(self->run_rows);
    Py_CLEAR(self->run_read);
}

static PyObject *Into_hand(IntoObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "hand(bx, by) takes 2 arguments");
        return NULL;
    }
    PyObject *t0 = PyObject_CallNoArgs(perf_ns), *group = NULL, *item = NULL, *res = NULL;
    PyObject *handed = NULL, *rowsobj = NULL, *order = NULL;
    if (t0 == NULL)
        return NULL;
    int plain = plain_now(self);
    if (plain <= 0 || !fits_one(args[0], self->b, self->d, self->num) ||
        !fits_one(args[1], self->b, self->l, self->num)) {
        res = plain < 0 ? NULL : Py_NewRef(Py_None);
        goto done;
    }
    int held = group_now(self);
    if (held <= 0) {
        if (held == 0)
            forget(self);
        res = held < 0 ? NULL : Py_NewRef(Py_None);
        goto done;
    }
    /* (held here: a read that lets the GIL go lets another thread's call replace them) */
    group = Py_NewRef(self->g);
    handed = Py_NewRef(self->g_handed);
    PyObject *current = PyObject_GetAttr(self->cursor, s_current), *queue = self->g_queue;
    if (current == NULL)
        goto done;
    Py_DECREF(current);
    if (self->g_epoch != current) { /* (compared by identity only) */
        forget(self);
        res = Py_NewRef(Py_None);
        goto done;
    }
    item = PyObject_CallMethodNoArgs(queue, s_popleft);
    if (item == NULL) {
        if (PyErr_ExceptionMatches(PyExc_IndexError)) { /* empty: the loader claims */
            PyErr_Clear();
            forget_group(self);
            res = Py_NewRef(Py_None);
        }
        goto done;
    }
    PyObject *job = NULL;
    RunFn fn = NULL;
    int mine = ours(self, item, &job, &rowsobj, &order, &fn);
    if (mine <= 0) { /* another kind of batch: the loader goes on with it */
        PyErr_Clear(); /* (its own path says what is wrong, if anything) */
        res = PyTuple_Pack(3, group, item, t0);
        goto done;
    }
    PyObject *size = PyTuple_GET_ITEM(job, 2);
    PyObject *rargs[5] = {order, PyTuple_GET_ITEM(job, 4), size, args[0], args[1]};
    PyObject *none = fn(rowsobj, rargs, 5);
    if (none == NULL) {
        unpop(group, item);
        goto done;
    }
    Py_DECREF(none);
    if (cursor_hand(self->cursor, self->draining, group, handed, job, size) < 0 || record(self, t0) < 0)
        goto done;
    res = Py_NewRef(size);
done:
    Py_DECREF(t0);
    Py_XDECREF(group);
    Py_XDECREF(item);
    Py_XDECREF(handed);
    Py_XDECREF(rowsobj);
    Py_XDECREF(order);
    return res;
}

static int Into_traverse(IntoObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->checks);
    Py_VISIT(self->holder);
    Py_VISIT(self->cursor);
    Py_VISIT(self->tel);
    Py_VISIT(self->job_type);
    Py_VISIT(self->draining);
    Py_VISIT(self->plain);
    Py_VISIT(self->g);
    Py_VISIT(self->g_epoch);
    Py_VISIT(self->g_queue);
    Py_VISIT(self->g_handed);
    Py_VISIT(self->run);
    Py_VISIT(self->run_via);
    Py_VISIT(self->run_rows);
    Py_VISIT(self->run_read);
    Py_VISIT(self->slot);
    return 0;
}

static int Into_clear(IntoObject *self)
{
    Py_CLEAR(self->checks);
    Py_CLEAR(self->holder);
    Py_CLEAR(self->cursor);
    Py_CLEAR(self->tel);
    Py_CLEAR(self->at);
    Py_CLEAR(self->hist);
    Py_CLEAR(self->job_type);
    Py_CLEAR(self->draining);
    Py_CLEAR(self->plain);
    Py_CLEAR(self->g);
    Py_CLEAR(self->g_epoch);
    Py_CLEAR(self->g_queue);
    Py_CLEAR(self->g_handed);
    Py_CLEAR(self->run);
    Py_CLEAR(self->run_via);
    Py_CLEAR(self->run_rows);
    Py_CLEAR(self->run_read);
    Py_CLEAR(self->slot);
    return 0;
}

static void Into_dealloc(IntoObject *self)
{
    PyObject_GC_UnTrack(self);
    Into_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Into_methods[] = {
    {"hand", (PyCFunction)(void (*)(void))Into_hand, METH_FASTCALL,
     "hand(bx, by)\n--\n\nThe next batch into bx and by: the rows written; None (nothing "
     "popped: the loader's own path runs); or (group, item, t0), popped but not for "
     "this path."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject IntoType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exactbatch._core.Into",
    .tp_basicsize = sizeof(IntoObject),
    .tp_dealloc = (destructor)Into_dealloc,
    .tp_traverse = (traverseproc)Into_traverse,
    .tp_clear = (inquiry)Into_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "next_into's hand-out in one call: made by into().",
    .tp_methods = Into_methods,
};

PyObject *into_new(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "into(checks, holder, cursor, telemetry, waits, "
                                         "job_type, draining) takes 7 arguments");
        return NULL;
    }
    PyObject *waits = args[4];
    if (!PyTuple_Check(waits) || PyTuple_GET_SIZE(waits) != 2 ||
        !PyLong_Check(PyTuple_GET_ITEM(waits, 0)) || !PyLong_Check(PyTuple_GET_ITEM(waits, 1))) {
        PyErr_SetString(PyExc_TypeError, "into: waits must be a pair of ints (at, hist)");
        return NULL;
    }
    if (!PyType_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "into: job_type must be a type");
        return NULL;
    }
    IntoObject *self = PyObject_GC_New(IntoObject, &IntoType);
    if (self == NULL)
        return NULL;
    self->checks = Py_NewRef(args[0]);
    self->holder = Py_NewRef(args[1]);
    self->cursor = Py_NewRef(args[2]);
    self->tel = Py_NewRef(args[3]);
    self->at = Py_NewRef(PyTuple_GET_ITEM(waits, 0));
    self->hist = Py_NewRef(PyTuple_GET_ITEM(waits, 1));
    self->job_type = Py_NewRef(args[5]);
    self->draining = Py_NewRef(args[6]);
    self->plain = NULL;
    self->g = self->g_epoch = self->g_queue = self->g_handed = NULL;
    self->run = self->run_via = self->run_rows = self->run_read = NULL;
    self->tid = 0;
    self->slot = NULL;
    self->b = self->d = self->l = 0;
    self->num = 0;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

int into_ready(void)
{
    struct {
        PyObject **s;
        const char *name;
    } names[] = {
        {&s_plain, "plain"},     {&s_group, "group"},       {&s_epoch, "epoch"},
        {&s_current, "current"}, {&s_queue, "queue"},       {&s_popleft, "popleft"},
        {&s_via, "via"},         {&s_rows, "rows"},         {&s_read_run, "read_run"},
        {&s_handed, "handed"},   {&s_unpop, "unpop"},
    };

    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((*names[i].s = PyUnicode_InternFromString(names[i].name)) == NULL)
            return -1;
    PyObject *time = PyImport_ImportModule("time");
    if (time == NULL)
        return -1;
    perf_ns = PyObject_GetAttrString(time, "perf_counter_ns");
    Py_DECREF(time);
    if (perf_ns == NULL)
        return -1;
    return PyType_Ready(&IntoType);
}
