/* The Transform object (see _core_transform.h): made once per loader by
 * exactbatch.kernels.TransformKernel, passed to every read. */
#include "_core_transform.h"

static void Transform_dealloc(TransformObject *self)
{
    PyMem_Free(self->mean); /* (scale lives in the same block) */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyTypeObject TransformType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exactbatch._core.Transform",
    .tp_basicsize = sizeof(TransformObject),
    .tp_dealloc = (destructor)Transform_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A transform fused into the gather: made by transform().",
};

/* A 1-D float64 buffer's d values, copied into out. */
static int vector(PyObject *o, const char *name, Py_ssize_t *d, double **out)
{
    Py_buffer b;
    if (PyObject_GetBuffer(o, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return -1;
    const char *f = plain_format(&b);
    int ok = b.ndim == 1 && f[0] == 'd' && !f[1] && (*d < 0 || b.shape[0] == *d);
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "transform: %s must be a 1-D float64 array%s", name,
                     *d < 0 ? "" : " as long as mean");
    } else {
        *d = b.shape[0];
        memcpy(*out, b.buf, (size_t)b.len);
    }
    PyBuffer_Release(&b);
    return ok ? 0 : -1;
}

PyObject *transform_new(PyObject *mod, PyObject *args)
{
    PyObject *mean, *scale, *fill;
    if (!PyArg_ParseTuple(args, "OOO:transform", &mean, &scale, &fill))
        return NULL;
    Py_buffer probe; /* the width first, to size the block */
    if (PyObject_GetBuffer(mean, &probe, PyBUF_ND) != 0)
        return NULL;
    Py_ssize_t d = probe.ndim == 1 ? probe.shape[0] : 0;
    PyBuffer_Release(&probe);
    TransformObject *t = (TransformObject *)TransformType.tp_alloc(&TransformType, 0);
    if (t == NULL)
        return NULL;
    t->mean = PyMem_Calloc((size_t)(2 * d + 1), sizeof(double));
    if (t->mean == NULL) {
        Py_DECREF(t);
        return PyErr_NoMemory();
    }
    t->scale = t->mean + d;
    Py_ssize_t w = -1;
    if (vector(mean, "mean", &w, &t->mean) < 0 || vector(scale, "scale", &w, &t->scale) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    t->d = w;
    if (fill != Py_None) {
        t->fill = PyFloat_AsDouble(fill);
        if (t->fill == -1.0 && PyErr_Occurred()) {
            Py_DECREF(t);
            return NULL;
        }
        t->fill_on = 1;
    }
    return (PyObject *)t;
}

int parse_transform(PyObject *o, Py_ssize_t d, const TransformObject **t)
{
    *t = NULL;
    if (o == Py_None)
        return 0;
    PyObject *c = NULL; /* a kernels.TransformKernel: its compiled twin, in its .c */
    if (!PyObject_TypeCheck(o, &TransformType)) {
        c = PyObject_GetAttrString(o, "c");
        if (c == NULL)
            PyErr_Clear();
        if (c == NULL || !PyObject_TypeCheck(c, &TransformType)) {
            PyErr_Format(PyExc_TypeError, "read's transform must be a Transform (or hold "
                         "one as .c) or None; got %s", Py_TYPE(o)->tp_name);
            Py_XDECREF(c);
            return -1;
        }
        o = c;
        Py_DECREF(c); /* (the kernel holds it for as long as the read runs) */
    }
    const TransformObject *tf = (const TransformObject *)o;
    if (tf->d != d) {
        PyErr_Format(PyExc_ValueError, "a transform of %zd features for rows of %zd", tf->d, d);
        return -1;
    }
    *t = tf;
    return 0;
}

int transform_ready(PyObject *module)
{
    if (PyType_Ready(&TransformType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "Transform", (PyObject *)&TransformType);
}
