/* Columns into rows (see _core_columns.h). */
#include "_core_columns.h"

/* Rows copied a block at a time: each column's values of a block are written into
 * rows that stay in L1 (128 rows of up to 32 values) while the next column is. */
#define BLOCK 128

/* A column's value type: the numbers every value of which float64 holds exactly (a
 * wider integer goes through the caller's float64 copy: Arrow's checked cast). */
enum { C_F64, C_F32, C_I8, C_U8, C_I16, C_U16, C_I32, C_U32 };

/* The type of a column's buffer format, or -1. */
static int column_type(const char *f, Py_ssize_t itemsize)
{
    if (!f[0] || f[1])
        return -1;
    switch (f[0]) {
    case 'd': return itemsize == 8 ? C_F64 : -1;
    case 'f': return itemsize == 4 ? C_F32 : -1;
    case 'b': return itemsize == 1 ? C_I8 : -1;
    case 'B': return itemsize == 1 ? C_U8 : -1;
    case 'h': return itemsize == 2 ? C_I16 : -1;
    case 'H': return itemsize == 2 ? C_U16 : -1;
    case 'i': case 'l': return itemsize == 4 ? C_I32 : -1;
    case 'I': case 'L': return itemsize == 4 ? C_U32 : -1;
    default: return -1;
    }
}

/* Rows a..z-1 of one column (values of C type T, from row `start`) into column j of
 * rows `stride` bytes apart: each value as float64 (exact), then as float32 when f32
 * (C's cast: round to nearest, as NumPy's). */
#define COPY_COLUMN(T)                                                                  \
    do {                                                                                \
        const T *restrict v = (const T *)cols[j] + start;                               \
        if (f32) {                                                                      \
            for (Py_ssize_t i = a; i < z; i++)                                          \
                ((float *)(out + i * stride))[j] = (float)(double)v[i];                 \
        } else {                                                                        \
            for (Py_ssize_t i = a; i < z; i++)                                          \
                ((double *)(out + i * stride))[j] = (double)v[i];                       \
        }                                                                               \
    } while (0)

/* out[i, j] = cols[j][start + i] for i < k, j < w (column j of type types[j]); out rows
 * `stride` bytes apart, as float32 when f32. */
static void copy_columns(const void *const *cols, const int *types, Py_ssize_t w,
                         Py_ssize_t start, Py_ssize_t k, char *out, Py_ssize_t stride, int f32)
{
    for (Py_ssize_t a = 0; a < k; a += BLOCK) {
        Py_ssize_t z = a + BLOCK < k ? a + BLOCK : k;
        for (Py_ssize_t j = 0; j < w; j++) {
            switch (types[j]) {
            case C_F64: COPY_COLUMN(double); break;
            case C_F32: COPY_COLUMN(float); break;
            case C_I8: COPY_COLUMN(int8_t); break;
            case C_U8: COPY_COLUMN(uint8_t); break;
            case C_I16: COPY_COLUMN(int16_t); break;
            case C_U16: COPY_COLUMN(uint16_t); break;
            case C_I32: COPY_COLUMN(int32_t); break;
            default: COPY_COLUMN(uint32_t); break;
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
    const void **cols = PyMem_Calloc(w ? w : 1, sizeof(void *));
    int *types = PyMem_Calloc(w ? w : 1, sizeof(int));
    PyObject *result = NULL;
    int have_out = 0;
    if (bufs == NULL || cols == NULL || types == NULL) {
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
        types[got] = column_type(plain_format(b), b->itemsize);
        if (b->ndim != 1 || types[got] < 0) {
            PyBuffer_Release(b);
            PyErr_Format(PyExc_TypeError,
                         "columns_into: column %zd must be 1-D float64, float32, or an "
                         "integer of at most 32 bits", got);
            goto done;
        }
        if (b->shape[0] - start < k) {
            PyBuffer_Release(b);
            PyErr_Format(PyExc_ValueError,
                         "columns_into: column %zd has %zd values; rows %zd..%zd asked for",
                         got, b->shape[0], start, start + k - 1);
            goto done;
        }
        cols[got] = b->buf;
    }
    Py_ssize_t stride = k > 1 ? out.strides[0] : w * out.itemsize;
    if (k && w) {
        Py_BEGIN_ALLOW_THREADS
        copy_columns(cols, types, w, start, k, (char *)out.buf, stride, f32);
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
    PyMem_Free(types);
    Py_DECREF(fast);
    return result;
}
