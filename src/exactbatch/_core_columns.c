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

/* One column's rows a..z-1 into column j of the rows, by its type (COPY_COLUMN). */
static inline void copy_column(const void *const *cols, const int *types, Py_ssize_t j,
                               Py_ssize_t start, Py_ssize_t a, Py_ssize_t z, char *out,
                               Py_ssize_t stride, int f32)
{
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

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QUADS 1

/* Rows of 4 float columns at a time, in 4 x 4 tiles transposed in registers: a
 * store writes 4 values of a row (32 or 16 bytes) where the column loop writes one,
 * and the loads stay sequential. Measured 1.3x-1.7x faster than the column loop (16
 * and 17 float64 columns into 136-byte rows, batches of 4096 and buffers of 65,536
 * rows; a scratch C loop, thread CPU). The values are the column loop's bits: a
 * float64 copied, a float32 widened exactly, a float64 narrowed by cvtpd2ps under the
 * same rounding mode as C's cast. Rows 256 at a time (a block of rows stays in L1
 * while its columns' quads are written; 256 measured best of 64..4096). */
#define QUAD_BLOCK 256

/* 4 rows' values of 4 columns (types all C_F64 or all C_F32: t), as float64 lanes. */
__attribute__((target("avx"))) static inline __m256d quad_pd(const void *c, int t, Py_ssize_t i)
{
    if (t == C_F64)
        return _mm256_loadu_pd((const double *)c + i);
    return _mm256_cvtps_pd(_mm_loadu_ps((const float *)c + i));
}

__attribute__((target("avx"))) static inline __m128 quad_ps(const void *c, int t, Py_ssize_t i)
{
    if (t == C_F64)
        return _mm256_cvtpd_ps(_mm256_loadu_pd((const double *)c + i));
    return _mm_loadu_ps((const float *)c + i);
}

/* Columns j..j+3 (one type, C_F64 or C_F32, each from row `start`) of rows a..z-1. */
__attribute__((target("avx"))) static void copy_quad(const void *const *cols, const int *types,
                                                     Py_ssize_t j, Py_ssize_t start,
                                                     Py_ssize_t a, Py_ssize_t z, char *out,
                                                     Py_ssize_t stride, int f32)
{
    int t = types[j];
    Py_ssize_t sz = t == C_F64 ? 8 : 4;
    const char *c0 = (const char *)cols[j] + start * sz, *c1 = (const char *)cols[j + 1] + start * sz;
    const char *c2 = (const char *)cols[j + 2] + start * sz, *c3 = (const char *)cols[j + 3] + start * sz;
    Py_ssize_t i = a;
    if (f32) {
        for (; i + 4 <= z; i += 4) {
            __m128 r0 = quad_ps(c0, t, i), r1 = quad_ps(c1, t, i);
            __m128 r2 = quad_ps(c2, t, i), r3 = quad_ps(c3, t, i);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            _mm_storeu_ps((float *)(out + i * stride) + j, r0);
            _mm_storeu_ps((float *)(out + (i + 1) * stride) + j, r1);
            _mm_storeu_ps((float *)(out + (i + 2) * stride) + j, r2);
            _mm_storeu_ps((float *)(out + (i + 3) * stride) + j, r3);
        }
    } else {
        for (; i + 4 <= z; i += 4) {
            __m256d r0 = quad_pd(c0, t, i), r1 = quad_pd(c1, t, i);
            __m256d r2 = quad_pd(c2, t, i), r3 = quad_pd(c3, t, i);
            __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
            __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
            _mm256_storeu_pd((double *)(out + i * stride) + j, _mm256_permute2f128_pd(t0, t2, 0x20));
            _mm256_storeu_pd((double *)(out + (i + 1) * stride) + j,
                             _mm256_permute2f128_pd(t1, t3, 0x20));
            _mm256_storeu_pd((double *)(out + (i + 2) * stride) + j,
                             _mm256_permute2f128_pd(t0, t2, 0x31));
            _mm256_storeu_pd((double *)(out + (i + 3) * stride) + j,
                             _mm256_permute2f128_pd(t1, t3, 0x31));
        }
    }
    for (Py_ssize_t q = j; q < j + 4; q++) /* the last rows (fewer than 4) */
        copy_column(cols, types, q, start, i, z, out, stride, f32);
}
#else
#define QUADS 0
#endif

/* out[i, j] = cols[j][start + i] for i < k, j < w (column j of type types[j]); out rows
 * `stride` bytes apart, as float32 when f32. */
static void copy_columns(const void *const *cols, const int *types, Py_ssize_t w,
                         Py_ssize_t start, Py_ssize_t k, char *out, Py_ssize_t stride, int f32)
{
#if QUADS
    int quads = 0; /* (none: the column loop, its block of rows as before) */
    for (Py_ssize_t j = 0; j + 4 <= w && !quads; j++)
        quads = (types[j] == C_F64 || types[j] == C_F32) && types[j + 1] == types[j] &&
                types[j + 2] == types[j] && types[j + 3] == types[j];
    if (quads && __builtin_cpu_supports("avx")) {
        for (Py_ssize_t a = 0; a < k; a += QUAD_BLOCK) {
            Py_ssize_t z = a + QUAD_BLOCK < k ? a + QUAD_BLOCK : k;
            for (Py_ssize_t j = 0; j < w;) {
                int t = types[j];
                if (j + 4 <= w && (t == C_F64 || t == C_F32) && types[j + 1] == t &&
                    types[j + 2] == t && types[j + 3] == t) {
                    copy_quad(cols, types, j, start, a, z, out, stride, f32);
                    j += 4;
                } else {
                    copy_column(cols, types, j, start, a, z, out, stride, f32);
                    j++;
                }
            }
        }
        return;
    }
#endif
    for (Py_ssize_t a = 0; a < k; a += BLOCK) {
        Py_ssize_t z = a + BLOCK < k ? a + BLOCK : k;
        for (Py_ssize_t j = 0; j < w; j++)
            copy_column(cols, types, j, start, a, z, out, stride, f32);
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
