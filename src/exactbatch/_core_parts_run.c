/* A sharded dataset's reads called from Python (see _core_parts_run.h): Parts.read, and
 * PartsRuns objects, a reader's own read_run and take_run over the Parts, with hooks. */
#include "_core_parts_run.h"

#include "_core_hand.h"
#include "_core_parts.h"
#include "_core_split.h"

PyObject *parts_changed(int rc, Py_ssize_t which)
{
    PyObject *exc = PyObject_CallFunction(
        FileChanged, "s",
        rc == -1 ? "a copy from a part's mapping faulted (truncated?)"
                 : "a part's size, modification time or ctime changed");
    PyObject *part = which >= 0 ? PyLong_FromSsize_t(which) : Py_NewRef(Py_None);
    if (exc != NULL && part != NULL && PyObject_SetAttrString(exc, "part", part) == 0)
        PyErr_SetObject(FileChanged, exc);
    Py_XDECREF(part);
    Py_XDECREF(exc);
    return NULL;
}

/* A row out of range (j->bad) in the Parts o: the IndexError; NULL. */
static PyObject *out_of_range(PyObject *o, const Job *j)
{
    Py_ssize_t n, d, l;
    parts_shape(o, &n, &d, &l);
    return PyErr_Format(PyExc_IndexError, "row %lld out of range for n=%zd rows",
                        (long long)row_at(j, j->bad), n);
}

PyObject *Parts_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 3 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError, "read(rows, out_x, out_y) takes 3 arguments "
                                         "(and a transform, and threads)");
        return NULL;
    }
    Job j = JOB_INIT;
    Py_buffer ib = {0}, bx = {0}, by = {0}; /* (releasing one not held does nothing) */
    int rc = 0, threads = 0;
    Py_ssize_t which = -1, n, d, l, nparts = parts_shape(self, &n, &d, &l);
    PyObject *res = NULL;
    char *seen = NULL;

    if ((nargs >= 4 && parse_transform(args[3], d, &j.tf) < 0) ||
        (nargs == 5 && parse_threads(args[4], &threads) < 0) ||
        parse_rows(args[0], n, &j, &ib) < 0 || parse_outs(args[1], args[2], d, l, &j, &bx, &by) < 0)
        goto done;
    rc = parts_gather(self, &j, threads, &which, &seen);
    if (rc == 1) {
        res = PyList_New(0);
        for (Py_ssize_t q = 0; res != NULL && q < nparts; q++) {
            if (seen[q] != 2)
                continue;
            PyObject *k = PyLong_FromSsize_t(q);
            if (k == NULL || PyList_Append(res, k) < 0)
                Py_CLEAR(res);
            Py_XDECREF(k);
        }
    } else if (rc == -1 || rc == -2) {
        parts_changed(rc, which);
    } else if (rc == 0 && j.bad >= 0) {
        out_of_range(self, &j);
    } else if (rc == 0) {
        res = read_result(&j);
    }
done:
    PyMem_RawFree(seen);
    PyBuffer_Release(&ib);
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
    return res;
}

typedef struct {
    PyObject_HEAD
    PyObject *parts; /* the dataset's Parts, shared by every holder (never NULL) */
    /* the reader's, or NULL (let go of at its close): called with a part's FileChanged
     * to raise the dataset's error instead; called as missing(order, start, size, out_x,
     * out_y, threads) to read a run whose parts are not all open (in Python) */
    PyObject *changed, *missing;
    int threads; /* a read's threads (_core_split.h): 0 auto */
} PartsRunsObject;

/* The copy of j (its order's span, its outputs ox and oy set) from the open parts,
 * else as the hooks say (span: the call's order, start and size, for missing): None,
 * or NULL with an exception set. The hooks are held across the copy (changed holds
 * the dataset, and with it the parts' descriptors the copy's fstat checks: they outlive
 * a reader closed meanwhile). */
static PyObject *run(PartsRunsObject *self, Job *j, PyObject *const *span, PyObject *ox,
                     PyObject *oy)
{
    PyObject *changed = Py_XNewRef(self->changed), *missing = Py_XNewRef(self->missing);
    PyObject *res = NULL;
    Py_ssize_t which = -1;
    int rc = parts_gather(self->parts, j, self->threads, &which, NULL);
    if (rc == 0 && j->bad >= 0) {
        out_of_range(self->parts, j);
    } else if (rc == 0) {
        res = Py_NewRef(Py_None);
    } else if (rc == 1 && missing != NULL) { /* (nothing copied) */
        PyObject *t = self->threads ? PyLong_FromLong(self->threads) : Py_NewRef(Py_None);
        if (t != NULL) {
            PyObject *margs[6] = {span[0], span[1], span[2], ox, oy, t};
            res = PyObject_Vectorcall(missing, margs, 6, NULL);
            Py_DECREF(t);
        }
        if (res != NULL)
            Py_SETREF(res, Py_NewRef(Py_None));
    } else if (rc == 1) {
        PyErr_SetString(PyExc_ValueError, "read_run: the rows' parts are not open, and these "
                                          "runs have no missing hook to open them (their "
                                          "reader was closed)");
    } else if (rc == -1 || rc == -2) {
        parts_changed(rc, which);
        changed_through(changed);
    } /* (-3: MemoryError set) */
    Py_XDECREF(changed);
    Py_XDECREF(missing);
    return res;
}

PyObject *PartsRuns_read_run(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    PartsRunsObject *self = (PartsRunsObject *)op;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "read_run(order, start, size, out_x, out_y) takes 5 "
                                         "arguments");
        return NULL;
    }
    Job j = JOB_INIT;
    Py_ssize_t n, d, l;
    parts_shape(self->parts, &n, &d, &l);
    if (order_span(args[0], args[1], args[2], &j) < 0 || run_outs(args[3], args[4], d, l, &j) < 0)
        return NULL;
    return run(self, &j, args, args[3], args[4]);
}

static PyObject *take_read(PyObject *op, Job *j, PyObject *const *args, PyObject *x,
                           PyObject *y)
{
    return run((PartsRunsObject *)op, j, args, x, y);
}

PyObject *PartsRuns_take_run(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t n, d, l;
    parts_shape(((PartsRunsObject *)op)->parts, &n, &d, &l);
    return take_run_of(op, args, nargs, d, l, take_read);
}

static PyObject *PartsRuns_get_changed(PartsRunsObject *self, void *closure)
{
    return hook_get(self->changed);
}

static int PartsRuns_set_changed(PartsRunsObject *self, PyObject *v, void *closure)
{
    return hook_set(&self->changed, v, "changed");
}

static PyObject *PartsRuns_get_missing(PartsRunsObject *self, void *closure)
{
    return hook_get(self->missing);
}

static int PartsRuns_set_missing(PartsRunsObject *self, PyObject *v, void *closure)
{
    return hook_set(&self->missing, v, "missing");
}

static PyObject *PartsRuns_get_threads(PartsRunsObject *self, void *closure)
{
    return PyLong_FromLong(self->threads);
}

static int PartsRuns_set_threads(PartsRunsObject *self, PyObject *v, void *closure)
{
    return parse_threads(v, &self->threads);
}

static int PartsRuns_traverse(PartsRunsObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->parts);
    Py_VISIT(self->changed);
    Py_VISIT(self->missing);
    return 0;
}

static int PartsRuns_clear(PartsRunsObject *self)
{
    Py_CLEAR(self->changed);
    Py_CLEAR(self->missing);
    return 0;
}

static void PartsRuns_dealloc(PartsRunsObject *self)
{
    PyObject_GC_UnTrack(self);
    PartsRuns_clear(self);
    Py_CLEAR(self->parts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyGetSetDef PartsRuns_getset[] = {
    {"threads", (getter)PartsRuns_get_threads, (setter)PartsRuns_set_threads,
     "Threads that copy one read (as Rows.threads): 0 (the default) picks them from the\n"
     "batch's bytes. Setting None sets 0.",
     NULL},
    {"changed", (getter)PartsRuns_get_changed, (setter)PartsRuns_set_changed,
     "Called with the FileChanged (its ``part`` attribute the part, None where a fault\n"
     "cannot say) of a copy that found a part changed, to raise the dataset's error\n"
     "instead (FileChanged its context); None: FileChanged.",
     NULL},
    {"missing", (getter)PartsRuns_get_missing, (setter)PartsRuns_set_missing,
     "Called as missing(order, start, size, out_x, out_y, threads) (threads None: auto)\n"
     "to read a run some of whose parts are not open (nothing copied yet): the dataset's\n"
     "own read, which opens them. None: such a run is a ValueError (a closed reader's).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef PartsRuns_methods[] = {
    {"read_run", (PyCFunction)(void (*)(void))PartsRuns_read_run, METH_FASTCALL,
     "read_run(order, start, size, out_x, out_y)\n--\n\n"
     "As Rows.read_run, over the dataset's global rows: one guarded call when the rows'\n"
     "parts are open, else missing's read."},
    {"take_run", (PyCFunction)(void (*)(void))PartsRuns_take_run, METH_FASTCALL,
     "take_run(order, start, size, dtype, ydtype)\n--\n\n"
     "As Rows.take_run, over the dataset's global rows (a run whose parts are not all\n"
     "open: read by missing into the new pair)."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject PartsRunsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exactbatch._core.PartsRuns",
    .tp_basicsize = sizeof(PartsRunsObject),
    .tp_dealloc = (destructor)PartsRuns_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)PartsRuns_traverse,
    .tp_clear = (inquiry)PartsRuns_clear,
    .tp_doc = "A dataset reader's run reads over its Parts: made by Parts.runs().",
    .tp_methods = PartsRuns_methods,
    .tp_getset = PartsRuns_getset,
};

PyObject *parts_runs(PyObject *parts, PyObject *args)
{
    PyObject *changed = Py_None, *missing = Py_None;
    if (!PyArg_ParseTuple(args, "|OO:runs", &changed, &missing))
        return NULL;
    PartsRunsObject *r = PyObject_GC_New(PartsRunsObject, &PartsRunsType);
    if (r == NULL)
        return NULL;
    r->parts = Py_NewRef(parts);
    r->changed = r->missing = NULL;
    r->threads = 0;
    PyObject_GC_Track(r);
    if (hook_set(&r->changed, changed, "changed") < 0 ||
        hook_set(&r->missing, missing, "missing") < 0) {
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

int parts_runs_ready(PyObject *module)
{
    if (PyType_Ready(&PartsRunsType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "PartsRuns", (PyObject *)&PartsRunsType);
}
