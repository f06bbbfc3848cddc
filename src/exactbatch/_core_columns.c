/* Columns into rows (see _core_columns.h). */
#include "_core_columns.h"

/* Rows copied a block at a time: each column's values of a block are written into
 * rows that stay in L1 (128 rows of up to 32 values) while the next column is. */
#define BLOCK 128

/* out[i, j] = cols[j][start + i] for i < k, j < w; out rows `stride` bytes apart, as
 * float32 when f32 (C's cast: round to nearest, as NumPy's). */
static void copy_columns(const double *const *cols, Py_ssize_t w, Py_ssize_t start,
                         Py_ssize_t k, char *out, Py_ssize_t stride, int f32)
{
    for (Py_ssize_t a = 0; a < k; a += BLOCK) {
        Py_ssize_t z = a + BLOCK < k ? a + BLOCK : k;
        for (Py_ssize_t j = 0; j < w; j++) {
            const double *restrict v = cols[j] + start;
            if (f32) {
                for (Py_ssize_t i = a; i < z; i++)
                    ((float *)(out + i * stride))[j] = (float)v[i];
            } else {
                for (Py_ssize_t i = a; i < z; i++)
                    ((double *)(out + i * stride))[j] = v[i];
            }
        }
    }
}

PyObject *columns_into(PyObject *mod, PyObject *args)
{
    PyObject *seq, *o;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "OnO:columns_into", &seq, &start, &o))
        return NULL;
    PyObject *fast = PySequence_Fast(seq, "columns_into: cols must be a sequence of arrays");
    if (fast == NULL)
        return NULL;
    Py_ssize_t w = PySequence_Fast_GET_SIZE(fast), got = 0;
    Py_buffer out, *bufs = PyMem_Calloc(w ? w : 1, sizeof(Py_buffer));
    const double **cols = PyMem_Calloc(w ? w : 1, sizeof(double *));
    PyObject *result = NULL;
    int have_out = 0;
    if (bufs == NULL || cols == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (PyObject_GetBuffer(o, &out, PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) != 0)
        goto done;
    have_out = 1;
    const char *f = plain_format(&out);
    int f32 = f[0] == 'f' && !f[1] && out.itemsize == 4;
    if (out.ndim != 2 || !(f32 || (f[0] == 'd' && !f[1] && out.itemsize == 8))) {
        PyErr_SetString(PyExc_TypeError, "columns_into: out must be a 2-D float64 or float32 array");
        goto done;
    }
    Py_ssize_t k = out.shape[0];
    if (out.shape[1] != w || (w > 1 && out.strides[1] != out.itemsize) ||
        (k > 1 && out.strides[0] < w * out.itemsize)) {
        PyErr_Format(PyExc_ValueError,
                     "columns_into: out must be (rows, %zd), each row's values side by side", w);
        goto done;
    }
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "columns_into: start must be >= 0");
        goto done;
    }
    for (; got < w; got++) {
        Py_buffer *b = &bufs[got];
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, got), b,
                               PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
            goto done;
        const char *cf = plain_format(b);
        if (b->ndim != 1 || cf[0] != 'd' || cf[1] || b->itemsize != 8) {
            PyBuffer_Release(b);
            PyErr_Format(PyExc_TypeError, "columns_into: column %zd must be 1-D float64", got);
            goto done;
        }
        if (b->shape[0] - start < k) {
            PyBuffer_Release(b);
            PyErr_Format(PyExc_ValueError,
                         "columns_into: column %zd has %zd values; rows %zd..%zd asked for",
                         got, b->shape[0], start, start + k - 1);
            goto done;
        }
        cols[got] = (const double *)b->buf;
    }
    Py_ssize_t stride = k > 1 ? out.strides[0] : w * out.itemsize;
    if (k && w) {
        Py_BEGIN_ALLOW_THREADS
        copy_columns(cols, w, start, k, (char *)out.buf, stride, f32);
        Py_END_ALLOW_THREADS
    }
    result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t j = 0; j < got; j++)
        PyBuffer_Release(&bufs[j]);
    if (have_out)
        PyBuffer_Release(&out);
    PyMem_Free(bufs);
    PyMem_Free(cols);
    Py_DECREF(fast);
    return result;
}
