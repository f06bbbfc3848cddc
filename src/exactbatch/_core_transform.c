/* The Transform object (see _core_transform.h): made once per loader by
 * exactbatch.kernels.TransformKernel, passed to every read. */
#include "_core_transform.h"

static void Transform_dealloc(TransformObject *self)
{
    PyMem_Free(self->mean); /* (scale and fill live in the same block) */
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

/* A 1-D float64 buffer (held in *b on success: release it). 0, or -1 with a ValueError
 * naming it (or the buffer protocol's error) set. */
static int vector(PyObject *o, const char *name, Py_buffer *b)
{
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return -1;
    const char *f = plain_format(b);
    if (b->ndim != 1 || f[0] != 'd' || f[1]) {
        PyErr_Format(PyExc_ValueError, "transform: %s must be a 1-D float64 array", name);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

PyObject *transform_new(PyObject *mod, PyObject *args)
{
    PyObject *mean, *scale, *fill;
    if (!PyArg_ParseTuple(args, "OOO:transform", &mean, &scale, &fill))
        return NULL;
    double value = 0.0;
    Py_buffer fb = {0};
    int fill_vector = fill != Py_None && !PyFloat_Check(fill) && !PyLong_Check(fill);
    if (fill_vector) {
        if (vector(fill, "fill", &fb) < 0)
            return NULL;
    } else if (fill != Py_None && (value = PyFloat_AsDouble(fill)) == -1.0 && PyErr_Occurred())
        return NULL;
    Py_buffer mb, sb;
    if (vector(mean, "mean", &mb) < 0) {
        if (fill_vector)
            PyBuffer_Release(&fb);
        return NULL;
    }
    if (vector(scale, "scale", &sb) < 0) {
        PyBuffer_Release(&mb);
        if (fill_vector)
            PyBuffer_Release(&fb);
        return NULL;
    }
    TransformObject *t = NULL;
    Py_ssize_t d = mb.shape[0];
    if (sb.shape[0] != d) {
        PyErr_Format(PyExc_ValueError, "transform: scale must be as long as mean (%zd); got "
                     "%zd", d, sb.shape[0]);
        goto done;
    }
    if (fill_vector && fb.shape[0] != d) {
        PyErr_Format(PyExc_ValueError, "transform: fill must be as long as mean (%zd); got "
                     "%zd", d, fb.shape[0]);
        goto done;
    }
    t = (TransformObject *)TransformType.tp_alloc(&TransformType, 0);
    if (t == NULL)
        goto done;
    t->mean = PyMem_Malloc((size_t)(3 * d + 1) * sizeof(double)); /* (+1: never 0 bytes) */
    if (t->mean == NULL) {
        Py_CLEAR(t);
        PyErr_NoMemory();
        goto done;
    }
    t->scale = t->mean + d;
    t->fill = t->mean + 2 * d; /* one fill a column: a scalar fill repeated */
    memcpy(t->mean, mb.buf, (size_t)mb.len);
    memcpy(t->scale, sb.buf, (size_t)sb.len);
    for (Py_ssize_t c = 0; c < d; c++)
        t->fill[c] = fill_vector ? ((const double *)fb.buf)[c] : value;
    t->d = d;
    t->fill_on = fill != Py_None;
done:
    PyBuffer_Release(&mb);
    PyBuffer_Release(&sb);
    if (fill_vector)
        PyBuffer_Release(&fb);
    return (PyObject *)t;
}

int parse_transform(PyObject *o, Py_ssize_t d, const TransformObject **t)
{
    *t = NULL;
    if (o == Py_None)
        return 0;
    PyObject *c = NULL; /* a kernels.TransformKernel: its compiled twin, in its .c */
    if (!PyObject_TypeCheck(o, &TransformType)) {
        c = PyObject_GetAttrString(o, "c"); /* (its AttributeError replaced below) */
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
