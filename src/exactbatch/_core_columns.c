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

/* Rows of columns scattered to rows of batches (scatter_columns). */
typedef struct {
    const char *const *cols;   /* each column's first value */
    const Py_ssize_t *strides; /* bytes between a column's values */
    const int *types;
    Py_ssize_t w;
    const int64_t *dest;       /* row i's position among the batches' rows */
    Py_ssize_t k;
    char *const *outs;         /* group g: positions g * group .. */
    const Py_ssize_t *ostrides;
    Py_ssize_t group, full;    /* positions >= full: rows of left */
    char *left;
    Py_ssize_t lstride;
} Scatter;

#define SCATTER_COLUMN(T)                                                               \
    do {                                                                                \
        const char *v = s->cols[j] + a * s->strides[j];                                 \
        Py_ssize_t step = s->strides[j];                                                \
        for (Py_ssize_t i = 0; i < z - a; i++)                                          \
            ((double *)rows[i])[j] = (double)*(const T *)(v + i * step);                \
    } while (0)

/* Row i of the columns (each value as float64, exact) into the row at position dest[i]:
 * a block of rows at a time, each column's values written into rows that stay in L1. */
static void scatter_rows(const Scatter *s)
{
    char *rows[BLOCK];
    for (Py_ssize_t a = 0; a < s->k; a += BLOCK) {
        Py_ssize_t z = a + BLOCK < s->k ? a + BLOCK : s->k;
        for (Py_ssize_t i = a; i < z; i++) {
            Py_ssize_t q = (Py_ssize_t)s->dest[i];
            rows[i - a] = q < s->full ? s->outs[q / s->group] + (q % s->group) * s->ostrides[q / s->group]
                                      : s->left + (q - s->full) * s->lstride;
        }
        for (Py_ssize_t j = 0; j < s->w; j++) {
            switch (s->types[j]) {
            case C_F64: SCATTER_COLUMN(double); break;
            case C_F32: SCATTER_COLUMN(float); break;
            case C_I8: SCATTER_COLUMN(int8_t); break;
            case C_U8: SCATTER_COLUMN(uint8_t); break;
            case C_I16: SCATTER_COLUMN(int16_t); break;
            case C_U16: SCATTER_COLUMN(uint16_t); break;
            case C_I32: SCATTER_COLUMN(int32_t); break;
            default: SCATTER_COLUMN(uint32_t); break;
            }
        }
    }
}

/* A 2-D float64 array of w values a row, side by side (its rows any stride apart). */
static int rows_of_doubles(PyObject *o, Py_buffer *b, Py_ssize_t w, const char *what)
{
    if (PyObject_GetBuffer(o, b, PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) != 0)
        return -1;
    const char *f = plain_format(b);
    if (b->ndim != 2 || f[0] != 'd' || f[1] || b->itemsize != 8 || b->shape[1] != w ||
        (w > 1 && b->strides[1] != 8) || (b->shape[0] > 1 && b->strides[0] < w * 8)) {
        PyBuffer_Release(b);
        PyErr_Format(PyExc_ValueError,
                     "scatter_columns: %s must be a 2-D float64 array of %zd values a row, "
                     "side by side", what, w);
        return -1;
    }
    return 0;
}

PyObject *scatter_columns(PyObject *mod, PyObject *args)
{
    PyObject *cseq, *dobj, *oseq, *lobj;
    Py_ssize_t group;
    if (!PyArg_ParseTuple(args, "OOOOn:scatter_columns", &cseq, &dobj, &oseq, &lobj, &group))
        return NULL;
    PyObject *cfast = PySequence_Fast(cseq, "scatter_columns: cols must be a sequence of arrays");
    if (cfast == NULL)
        return NULL;
    PyObject *ofast = PySequence_Fast(oseq, "scatter_columns: outs must be a sequence of arrays");
    if (ofast == NULL) {
        Py_DECREF(cfast);
        return NULL;
    }
    Py_ssize_t w = PySequence_Fast_GET_SIZE(cfast), m = PySequence_Fast_GET_SIZE(ofast);
    Py_ssize_t gotc = 0, goto_ = 0;
    Py_buffer dest, left, *cbufs = PyMem_Calloc(w + 1, sizeof(Py_buffer));
    Py_buffer *obufs = PyMem_Calloc(m + 1, sizeof(Py_buffer));
    const char **cols = PyMem_Calloc(w + 1, sizeof(char *));
    Py_ssize_t *strides = PyMem_Calloc(w + 1, sizeof(Py_ssize_t));
    int *types = PyMem_Calloc(w + 1, sizeof(int));
    char **outs = PyMem_Calloc(m + 1, sizeof(char *));
    Py_ssize_t *ostrides = PyMem_Calloc(m + 1, sizeof(Py_ssize_t));
    PyObject *result = NULL;
    int have_dest = 0, have_left = 0;
    if (!cbufs || !obufs || !cols || !strides || !types || !outs || !ostrides) {
        PyErr_NoMemory();
        goto done;
    }
    if (group < 1) {
        PyErr_SetString(PyExc_ValueError, "scatter_columns: group must be >= 1");
        goto done;
    }
    if (PyObject_GetBuffer(dobj, &dest, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        goto done;
    have_dest = 1;
    const char *df = plain_format(&dest);
    if (dest.ndim != 1 || dest.itemsize != 8 || !((df[0] == 'q' || df[0] == 'l') && !df[1])) {
        PyErr_SetString(PyExc_TypeError, "scatter_columns: dest must be a 1-D int64 array");
        goto done;
    }
    Py_ssize_t k = dest.shape[0];
    if (rows_of_doubles(lobj, &left, w, "left") != 0)
        goto done;
    have_left = 1;
    Py_ssize_t full = 0;
    for (; goto_ < m; goto_++) {
        Py_buffer *b = &obufs[goto_];
        if (rows_of_doubles(PySequence_Fast_GET_ITEM(ofast, goto_), b, w, "each out") != 0)
            goto done;
        outs[goto_] = b->buf;
        ostrides[goto_] = b->strides[0];
        if (b->shape[0] != group && !(goto_ == m - 1 && b->shape[0] > 0 && b->shape[0] < group)) {
            goto_++;
            PyErr_Format(PyExc_ValueError,
                         "scatter_columns: every out but the last must have group=%zd rows, "
                         "the last 1 to group", group);
            goto done;
        }
        full += b->shape[0];
    }
    for (; gotc < w; gotc++) {
        Py_buffer *b = &cbufs[gotc];
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(cfast, gotc), b,
                               PyBUF_STRIDES | PyBUF_FORMAT) != 0)
            goto done;
        types[gotc] = column_type(plain_format(b), b->itemsize);
        if (b->ndim != 1 || types[gotc] < 0) {
            PyBuffer_Release(b);
            PyErr_Format(PyExc_TypeError,
                         "scatter_columns: column %zd must be 1-D float64, float32, or an "
                         "integer of at most 32 bits", gotc);
            goto done;
        }
        if (b->shape[0] < k) {
            PyBuffer_Release(b);
            PyErr_Format(PyExc_ValueError,
                         "scatter_columns: column %zd has %zd values; dest has %zd", gotc,
                         b->shape[0], k);
            goto done;
        }
        cols[gotc] = b->buf;
        strides[gotc] = b->strides[0];
    }
    const int64_t *d = dest.buf;
    Py_ssize_t end = full + left.shape[0], bad = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < k; i++)
        if (d[i] < 0 || d[i] >= end) {
            bad = i;
            break;
        }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_IndexError,
                     "scatter_columns: dest[%zd] = %lld is outside 0..%zd", bad,
                     (long long)d[bad], end - 1);
        goto done;
    }
    Scatter s = {cols, strides, types, w, d, k, outs, ostrides, group, full,
                 left.buf, left.shape[0] > 1 ? left.strides[0] : w * 8};
    if (k && w) {
        Py_BEGIN_ALLOW_THREADS
        scatter_rows(&s);
        Py_END_ALLOW_THREADS
    }
    result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t j = 0; j < gotc; j++)
        PyBuffer_Release(&cbufs[j]);
    for (Py_ssize_t j = 0; j < goto_; j++)
        PyBuffer_Release(&obufs[j]);
    if (have_dest)
        PyBuffer_Release(&dest);
    if (have_left)
        PyBuffer_Release(&left);
    PyMem_Free(cbufs);
    PyMem_Free(obufs);
    PyMem_Free(cols);
    PyMem_Free(strides);
    PyMem_Free(types);
    PyMem_Free(outs);
    PyMem_Free(ostrides);
    Py_DECREF(cfast);
    Py_DECREF(ofast);
    return result;
}
