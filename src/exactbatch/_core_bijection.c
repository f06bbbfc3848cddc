/* The keyed bijection (see _core_bijection.h). */
#include "_core_bijection.h"

/* Division of uint64 by an invariant divisor as a multiply and shifts (libdivide's
 * unsigned 64-bit algorithm): exactly t / d, as NumPy's floor_divide gives it (which
 * itself divides by a scalar this way), at a fraction of a hardware division's cost. */
typedef struct {
    uint64_t magic; /* 0: d is a power of two, shift only */
    uint8_t shift;
    uint8_t add;    /* the 65-bit magic's case: one more add and shift */
} Divisor;

static Divisor divisor_of(uint64_t d)
{
    Divisor v = {0, 0, 0};
    int l = 63 - __builtin_clzll(d); /* floor(log2 d) */
    if ((d & (d - 1)) == 0) {
        v.shift = (uint8_t)l;
        return v;
    }
    unsigned __int128 num = (unsigned __int128)((uint64_t)1 << l) << 64;
    uint64_t m = (uint64_t)(num / d), rem = (uint64_t)(num % d);
    if (d - rem < ((uint64_t)1 << l)) {
        v.shift = (uint8_t)l;
    } else {
        m += m;
        uint64_t twice = rem + rem;
        if (twice >= d || twice < rem)
            m += 1;
        v.shift = (uint8_t)l;
        v.add = 1;
    }
    v.magic = m + 1;
    return v;
}

static inline uint64_t divide(uint64_t t, const Divisor *v)
{
    if (v->magic == 0)
        return t >> v->shift;
    uint64_t h = (uint64_t)(((unsigned __int128)v->magic * t) >> 64);
    if (v->add)
        return ((((t - h) >> 1) + h) >> v->shift);
    return h >> v->shift;
}

#define MAX_ROUNDS 16

/* exactbatch.order.bijection's EpochBijection, position by position (see there for
 * what it is and promises): the rectangle p x q, a Feistel network of keyed
 * rounds, and cycle walking down to [0, n). Gives exactly the NumPy path's rows. */
typedef struct {
    PyObject_HEAD
    uint64_t n, q;
    int swap01, rounds;
    Divisor byq;
    int into_high[MAX_ROUNDS];
    uint64_t key[MAX_ROUNDS], mult[MAX_ROUNDS], mod[MAX_ROUNDS];
    Divisor div[MAX_ROUNDS];
} BijectionObject;

static inline uint64_t bij_permute(const BijectionObject *b, uint64_t x)
{
    uint64_t high = divide(x, &b->byq), low = x - high * b->q;
    for (int r = 0; r < b->rounds; r++) { /* selects, not pointers: all in registers */
        int up = b->into_high[r];
        uint64_t src = up ? low : high, dst = up ? high : low;
        uint64_t t = (src ^ b->key[r]) * b->mult[r];
        t = divide(t * t, &b->div[r]) + dst; /* dst + F, F in [0, mod) */
        uint64_t u = t - b->mod[r];
        dst = u < t ? u : t; /* (dst + F) mod `mod` */
        high = up ? dst : high;
        low = up ? low : dst;
    }
    return high * b->q + low;
}

static inline uint64_t bij_row(const BijectionObject *b, uint64_t x)
{
    if (b->swap01 && x < 2)
        x ^= 1;
    uint64_t y = bij_permute(b, x);
    while (y >= b->n) /* cycle walking: the few cells past n */
        y = bij_permute(b, y);
    return y;
}

/* Rows of the LANES positions x[0..LANES) in place: the rounds of LANES positions
 * side by side, so the CPU overlaps their chains of multiplies (one position's
 * rounds depend on each other; different positions' do not). */
#define LANES 8
static void bij_lanes(const BijectionObject *b, uint64_t *x)
{
    uint64_t high[LANES], low[LANES];
    for (int j = 0; j < LANES; j++) {
        uint64_t v = b->swap01 && x[j] < 2 ? x[j] ^ 1 : x[j];
        high[j] = divide(v, &b->byq);
        low[j] = v - high[j] * b->q;
    }
    for (int r = 0; r < b->rounds; r++) {
        const uint64_t key = b->key[r], mult = b->mult[r], mod = b->mod[r];
        const Divisor div = b->div[r];
        uint64_t *src = b->into_high[r] ? low : high, *dst = b->into_high[r] ? high : low;
        for (int j = 0; j < LANES; j++) {
            uint64_t t = (src[j] ^ key) * mult;
            t = divide(t * t, &div) + dst[j];
            uint64_t u = t - mod;
            dst[j] = u < t ? u : t;
        }
    }
    for (int j = 0; j < LANES; j++) {
        uint64_t y = high[j] * b->q + low[j];
        while (y >= b->n)
            y = bij_permute(b, y);
        x[j] = y;
    }
}

/* Rows of positions x[0..r) in place. */
static void bij_map(const BijectionObject *b, uint64_t *x, Py_ssize_t r)
{
    Py_ssize_t k = 0;
    for (; k + LANES <= r; k += LANES)
        bij_lanes(b, x + k);
    for (; k < r; k++)
        x[k] = bij_row(b, x[k]);
}

/* A writable 1-D array of 64-bit integers, held in *b (release it); -1 with a
 * TypeError naming ``what`` otherwise. */
static int u64_buffer(PyObject *o, Py_buffer *b, const char *what)
{
    if (PyObject_GetBuffer(o, b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return -1;
    const char *f = plain_format(b);
    if (b->ndim != 1 || !strchr("lqLQ", f[0]) || f[1] || b->itemsize != 8) {
        PyBuffer_Release(b);
        PyErr_Format(PyExc_TypeError, "%s must be a 1-D int64 or uint64 array", what);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(bij_rows_doc,
"rows(start, out)\n--\n\n"
"Fill ``out`` (a 1-D int64 array of r values) with the rows of positions\n"
"start .. start + r - 1 (all in [0, n): checked by the caller).");

static PyObject *Bijection_rows(BijectionObject *self, PyObject *args)
{
    unsigned long long start;
    PyObject *o;
    if (!PyArg_ParseTuple(args, "KO:rows", &start, &o))
        return NULL;
    Py_buffer b;
    if (u64_buffer(o, &b, "rows(start, out): out") < 0)
        return NULL;
    Py_ssize_t r = b.len / 8;
    uint64_t *out = b.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < r; k++)
        out[k] = (uint64_t)start + (uint64_t)k;
    bij_map(self, out, r);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(bij_map_doc,
"map(positions)\n--\n\n"
"Replace each value of ``positions`` (a 1-D uint64 or int64 array, each in [0, n):\n"
"checked by the caller) by its row.");

static PyObject *Bijection_map(BijectionObject *self, PyObject *o)
{
    Py_buffer b;
    if (u64_buffer(o, &b, "map(positions): positions") < 0)
        return NULL;
    Py_ssize_t r = b.len / 8;
    uint64_t *x = b.buf;
    Py_BEGIN_ALLOW_THREADS
    bij_map(self, x, r);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(bij_whole_doc,
"whole(out, digests, batch, offset, a, b, c)\n--\n\n"
"An epoch's whole order and its batches' ledger digests in one pass: ``out`` (a 1-D\n"
"int32 or int64 array of r <= n values) gets offset + the rows of positions 0 .. r-1,\n"
"and ``digests`` (a 1-D uint64 array of ceil(r / batch) values) the digest of each\n"
"batch of ``batch`` consecutive values of ``out`` (the last may be shorter):\n"
"a * sum(v * v) + b * sum(v) + c * count, mod 2**64 (exactbatch.order.digest's\n"
"batch_digests, which the values must fit in out's dtype for: the caller's to know).");

/* A writable 1-D C-contiguous array of 4- or 8-byte integers ("fmts"), held in *b
 * (release it); -1 with a TypeError naming ``what`` otherwise. */
static int int_buffer(PyObject *o, Py_buffer *b, const char *fmts, const char *what)
{
    if (PyObject_GetBuffer(o, b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return -1;
    const char *f = plain_format(b);
    if (b->ndim != 1 || !f[0] || !strchr(fmts, f[0]) || f[1] ||
        (b->itemsize != 4 && b->itemsize != 8)) {
        PyBuffer_Release(b);
        PyErr_Format(PyExc_TypeError, "whole(): %s", what);
        return -1;
    }
    return 0;
}

#define WHOLE_BLOCK 4096 /* positions mapped at a time: in cache while they are written */

static PyObject *Bijection_whole(BijectionObject *self, PyObject *args)
{
    PyObject *o_out, *o_dig;
    Py_ssize_t batch;
    unsigned long long offset, a, b, c;
    if (!PyArg_ParseTuple(args, "OOnKKKK:whole", &o_out, &o_dig, &batch, &offset, &a, &b, &c))
        return NULL;
    Py_buffer ob, db;
    if (int_buffer(o_out, &ob, "iqlIQL", "out must be a 1-D C-contiguous int32 or int64 "
                   "array") < 0)
        return NULL;
    if (int_buffer(o_dig, &db, "QL", "digests must be a 1-D C-contiguous uint64 array") < 0) {
        PyBuffer_Release(&ob);
        return NULL;
    }
    Py_ssize_t r = ob.len / ob.itemsize;
    if (batch < 1 || db.itemsize != 8 || (uint64_t)r > self->n ||
        db.len / 8 != (r + batch - 1) / batch) {
        PyErr_Format(PyExc_ValueError, "whole(): %zd values of an order of %llu in batches "
                     "of %zd need that many digests, one a batch (got %zd)", r,
                     (unsigned long long)self->n, batch, db.len / 8);
        PyBuffer_Release(&ob);
        PyBuffer_Release(&db);
        return NULL;
    }
    const int wide = ob.itemsize == 8;
    char *out = ob.buf;
    uint64_t *dig = db.buf;
    Py_BEGIN_ALLOW_THREADS
    uint64_t x[WHOLE_BLOCK], s1 = 0, s2 = 0;
    Py_ssize_t in_batch = 0, k = 0;
    for (Py_ssize_t at = 0; at < r; at += WHOLE_BLOCK) {
        Py_ssize_t m = r - at < WHOLE_BLOCK ? r - at : WHOLE_BLOCK;
        for (Py_ssize_t i = 0; i < m; i++)
            x[i] = (uint64_t)(at + i);
        bij_map(self, x, m);
        for (Py_ssize_t i = 0; i < m; i++) {
            /* the value as stored, then read back as the digest reads it (uint64) */
            uint64_t v = x[i] + offset;
            if (wide) {
                ((int64_t *)out)[at + i] = (int64_t)v;
            } else {
                int32_t w = (int32_t)(uint32_t)v;
                ((int32_t *)out)[at + i] = w;
                v = (uint64_t)(int64_t)w;
            }
            s1 += v;
            s2 += v * v;
            if (++in_batch == batch) {
                dig[k++] = a * s2 + b * s1 + c * (uint64_t)batch;
                s1 = s2 = 0;
                in_batch = 0;
            }
        }
    }
    if (in_batch)
        dig[k] = a * s2 + b * s1 + c * (uint64_t)in_batch;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ob);
    PyBuffer_Release(&db);
    Py_RETURN_NONE;
}

static PyMethodDef Bijection_methods[] = {
    {"rows", (PyCFunction)Bijection_rows, METH_VARARGS, bij_rows_doc},
    {"whole", (PyCFunction)Bijection_whole, METH_VARARGS, bij_whole_doc},
    {"map", (PyCFunction)Bijection_map, METH_O, bij_map_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BijectionType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exactbatch._core.Bijection",
    .tp_basicsize = sizeof(BijectionObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An epoch's keyed bijection: made by bijection().",
    .tp_methods = Bijection_methods,
};

/* bijection(n, q, swap01, plan): plan a sequence of (into_high, key, mult, mod,
 * divisor) as EpochBijection builds it (its divisor is checked against mod). */
PyObject *bijection(PyObject *mod, PyObject *args)
{
    unsigned long long n, q;
    int swap01;
    PyObject *plan;
    if (!PyArg_ParseTuple(args, "KKpO:bijection", &n, &q, &swap01, &plan))
        return NULL;
    PyObject *seq = PySequence_Fast(plan, "bijection: plan must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t rounds = PySequence_Fast_GET_SIZE(seq);
    if (q == 0 || n == 0 || rounds > MAX_ROUNDS) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "bijection: n and q must be >= 1, at most 16 rounds");
        return NULL;
    }
    BijectionObject *b = PyObject_New(BijectionObject, &BijectionType);
    if (b == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    b->n = n;
    b->q = q;
    b->swap01 = swap01;
    b->rounds = (int)rounds;
    b->byq = divisor_of(q);
    for (Py_ssize_t r = 0; r < rounds; r++) {
        int high;
        unsigned long long key, mult, m, div;
        PyObject *step = PySequence_Fast_GET_ITEM(seq, r);
        if (!PyArg_ParseTuple(step, "pKKKK:bijection plan", &high, &key, &mult, &m, &div))
            goto fail;
        if (m < 2 || div == 0) {
            PyErr_SetString(PyExc_ValueError, "bijection: a round's mod must be >= 2");
            goto fail;
        }
        b->into_high[r] = high;
        b->key[r] = key;
        b->mult[r] = mult;
        b->mod[r] = m;
        b->div[r] = divisor_of(div);
    }
    Py_DECREF(seq);
    return (PyObject *)b;
fail:
    Py_DECREF(seq);
    Py_DECREF(b);
    return NULL;
}

int bijection_ready(PyObject *module)
{
    (void)module; /* made by bijection() only: not a name of the module */
    return PyType_Ready(&BijectionType);
}
