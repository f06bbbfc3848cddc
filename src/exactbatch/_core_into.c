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
} IntoObject;

static PyObject *s_plain, *s_group, *s_epoch, *s_current, *s_queue, *s_popleft, *s_via;
static PyObject *s_rows, *s_read_run, *s_handed, *s_last_rows, *s_phase, *s_done, *s_settle;
static PyObject *s_unpop;
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
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb != NULL && v != NULL)
        PyException_SetTraceback(v, tb);
    PyObject *r = PyObject_CallMethodOneArg(group, s_unpop, item);
    if (r != NULL) {
        Py_DECREF(r);
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

/* Cursor.hand(group, job) for a job of size rows: handed, last_rows, and the ledger
 * checked when the epoch is draining and the group is done. 0, or -1. */
static int hand(IntoObject *self, PyObject *group, PyObject *job, PyObject *size)
{
    PyObject *handed = PyObject_GetAttr(group, s_handed);
    if (handed == NULL)
        return -1;
    int rc = PyList_Check(handed) ? PyList_Append(handed, job) : -1;
    if (rc < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "a group's handed must be a list");
    Py_DECREF(handed);
    if (rc < 0 || PyObject_SetAttr(self->cursor, s_last_rows, size) < 0)
        return -1;
    PyObject *phase = PyObject_GetAttr(self->cursor, s_phase);
    if (phase == NULL)
        return -1;
    Py_DECREF(phase); /* (compared by identity only) */
    if (phase != self->draining)
        return 0;
    PyObject *done = PyObject_CallMethodNoArgs(group, s_done);
    if (done == NULL)
        return -1;
    int yes = PyObject_IsTrue(done);
    Py_DECREF(done);
    if (yes <= 0)
        return yes;
    PyObject *r = PyObject_CallMethodNoArgs(self->cursor, s_settle);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* The popped item's job, the compiled rows that read it and the order, when this path
 * hands it out (its run's via a reader whose read_run is Rows.read_run): 1, else 0
 * (or -1 with an exception set). */
static int ours(IntoObject *self, PyObject *item, PyObject **job, PyObject **rowsobj,
                PyObject **order)
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
    PyObject *run = PyTuple_GET_ITEM(*job, 0), *via = PyObject_GetAttr(run, s_via), *m = NULL;
    if (via == NULL)
        return -1;
    m = PyObject_GetAttr(via, s_read_run);
    Py_DECREF(via);
    if (m == NULL)
        return -1;
    int compiled = PyCFunction_Check(m) && PyCFunction_GET_SELF(m) != NULL &&
                   Py_TYPE(PyCFunction_GET_SELF(m)) == &RowsType &&
                   PyCFunction_GET_FUNCTION(m) == (PyCFunction)(void (*)(void))Rows_read_run;
    if (!compiled) {
        Py_DECREF(m);
        return 0;
    }
    *rowsobj = Py_NewRef(PyCFunction_GET_SELF(m));
    Py_DECREF(m);
    if ((*order = PyObject_GetAttr(run, s_rows)) == NULL) {
        Py_CLEAR(*rowsobj);
        return -1;
    }
    return 1;
}

static PyObject *Into_hand(IntoObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "hand(bx, by) takes 2 arguments");
        return NULL;
    }
    PyObject *t0 = PyObject_CallNoArgs(perf_ns), *group = NULL, *item = NULL, *res = NULL;
    if (t0 == NULL)
        return NULL;
    int plain = plain_now(self);
    if (plain <= 0 || !fits_one(args[0], self->b, self->d, self->num) ||
        !fits_one(args[1], self->b, self->l, self->num)) {
        res = plain < 0 ? NULL : Py_NewRef(Py_None);
        goto done;
    }
    if ((group = PyObject_GetAttr(self->holder, s_group)) == NULL)
        goto done;
    if (group == Py_None) {
        res = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *epoch = PyObject_GetAttr(group, s_epoch), *current = NULL, *queue = NULL;
    if (epoch != NULL)
        current = PyObject_GetAttr(self->cursor, s_current);
    Py_XDECREF(epoch);
    Py_XDECREF(current);
    if (current == NULL)
        goto done;
    if (epoch != current) { /* (compared by identity only) */
        res = Py_NewRef(Py_None);
        goto done;
    }
    if ((queue = PyObject_GetAttr(group, s_queue)) == NULL)
        goto done;
    item = PyObject_CallMethodNoArgs(queue, s_popleft);
    Py_DECREF(queue);
    if (item == NULL) {
        if (PyErr_ExceptionMatches(PyExc_IndexError)) { /* empty: the loader claims */
            PyErr_Clear();
            res = Py_NewRef(Py_None);
        }
        goto done;
    }
    PyObject *job = NULL, *via = NULL, *rows = NULL;
    int mine = ours(self, item, &job, &via, &rows);
    if (mine <= 0) { /* another kind of batch: the loader goes on with it */
        PyErr_Clear(); /* (its own path says what is wrong, if anything) */
        res = PyTuple_Pack(3, group, item, t0);
        goto done;
    }
    PyObject *size = PyTuple_GET_ITEM(job, 2);
    PyObject *rargs[5] = {rows, PyTuple_GET_ITEM(job, 4), size, args[0], args[1]};
    PyObject *none = Rows_read_run((RowsObject *)via, rargs, 5);
    Py_DECREF(via);
    Py_DECREF(rows);
    if (none == NULL) {
        unpop(group, item);
        goto done;
    }
    Py_DECREF(none);
    if (hand(self, group, job, size) < 0)
        goto done;
    PyObject *wargs[4] = {self->tel, t0, self->at, self->hist};
    PyObject *r = waited_on(NULL, wargs, 4);
    if (r != NULL) {
        Py_DECREF(r);
        res = Py_NewRef(size);
    }
done:
    Py_DECREF(t0);
    Py_XDECREF(group);
    Py_XDECREF(item);
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
        {&s_handed, "handed"},   {&s_last_rows, "_last_rows"}, {&s_phase, "phase"},
        {&s_done, "done"},       {&s_settle, "settle"},     {&s_unpop, "unpop"},
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
