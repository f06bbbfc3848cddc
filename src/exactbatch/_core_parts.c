/* A sharded dataset's rows (see _core_parts.h): Parts objects, which gather global rows
 * straight from their parts' mappings under the guard. */
#include "_core_parts.h"

#include "_core_guard.h"
#include "_core_parts_run.h"
#include "_core_split.h"
#include "_core_rows.h"

/* Where a part's rows lie: global row i's x values at x + i * xs, its y values at
 * y + i * ys (unsigned, wrapping: an origin may lie below the rows). Two bases a part:
 * a file's rows (y just after x in a row, one stride) and rows in memory whose x and y
 * are separate arrays (a list's chunk, each side its own stride) alike. */
typedef struct {
    uintptr_t x, y, xs, ys;
} Place;

static inline Place place_load(const Place *a)
{
    return (Place){__atomic_load_n(&a->x, __ATOMIC_RELAXED),
                   __atomic_load_n(&a->y, __ATOMIC_RELAXED),
                   __atomic_load_n(&a->xs, __ATOMIC_RELAXED),
                   __atomic_load_n(&a->ys, __ATOMIC_RELAXED)};
}

static inline int place_same(const Place *a, const Place *b)
{
    return a->x == b->x && a->y == b->y && a->xs == b->xs && a->ys == b->ys;
}

/* The rows of a sharded dataset: part k, a file_rows object set while the part is
 * open (a dataset keeps a bounded number open: set, then unset to close one), holds
 * global rows [starts[k], starts[k + 1]). */
typedef struct {
    PyObject_HEAD
    Py_ssize_t nparts, n, d, l;
    int64_t *starts; /* nparts + 1 */
    int32_t *table;  /* table[b]: the part of row b << shift (a row's part in a step or two) */
    Py_ssize_t buckets;
    int shift;
    RowsObject **parts;
    /* where global row i of part k lies: at[k] (0s: part k not set) */
    Place *at;
    /* pins[k]: reads copying from part k now (without the GIL); unset(k) adds CLOSING
     * while it takes the part away, which it does only when no read holds it */
    int64_t *pins;
    /* stamp_into()'s array, if given (stamps.buf NULL: none): nparts + 1 int64, the
     * last a clock; each read ticks it and stamps the parts it touched with it */
    Py_buffer stamps;
} PartsObject;

#define CLOSING ((int64_t)1 << 40)

/* Hold part q for one read: 1 when it is set (then unpin it after the copy; until
 * then unset() leaves it, so its mapping and origin stay), else 0 (nothing held). */
static inline int pin(const PartsObject *p, Py_ssize_t q)
{
    if (__atomic_fetch_add(&p->pins[q], 1, __ATOMIC_ACQ_REL) < CLOSING &&
        __atomic_load_n(&p->parts[q], __ATOMIC_ACQUIRE) != NULL)
        return 1;
    __atomic_fetch_sub(&p->pins[q], 1, __ATOMIC_RELEASE);
    return 0;
}

/* Let go of the parts a read pinned (seen[q] == 1). */
static void unpin(const PartsObject *p, const char *seen)
{
    for (Py_ssize_t q = 0; q < p->nparts; q++)
        if (seen[q] == 1)
            __atomic_fetch_sub(&p->pins[q], 1, __ATOMIC_RELEASE);
}

/* The part that holds global row i (0 <= i < n): the last part whose first row is
 * at most i (an empty part never is: the part after it starts at the same row).
 * A binary search (to build the table) and the table's lookup (per row: a branch
 * mispredicted per step of a search costs more than the copy of a row). */
static Py_ssize_t part_search(const PartsObject *p, int64_t i, Py_ssize_t lo, Py_ssize_t hi)
{
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi + 1) / 2;
        if (p->starts[mid] <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static inline Py_ssize_t part_of(const PartsObject *p, int64_t i)
{
    int64_t b = i >> p->shift;
    Py_ssize_t q = p->table[b], last = b + 1 < p->buckets ? p->table[b + 1] : p->nparts - 1;
    if (last - q > 4) /* many small parts in one bucket: search them */
        return part_search(p, i, q, last);
    while (p->starts[q + 1] <= i)
        q++;
    return q;
}

/* Check and place rows ix[0..r) (ix NULL: start, start+1, ...): src[2k] is where row
 * k's x values lie in its part, src[2k + 1] its y values, and seen[q] is 1 for a part
 * touched and pinned (set: unpin it after), 2 for one touched and not set (src then
 * unusable). The first row out of range: *bad (and 0 is returned); else 1 if a part is
 * not set, or 2. */
#define DEFINE_PLACE(NAME, T)                                                               \
    static int NAME(const PartsObject *p, const T *ix, Py_ssize_t start, Py_ssize_t r,      \
                    const char **src, char *seen, Py_ssize_t *bad)                          \
    {                                                                                       \
        int missing = 0;                                                                    \
        if (ix != NULL && p->nparts <= 64) { /* the parts touched as a bitmask: no branch */ \
            /* Rows are placed by a copy of the places, then the parts touched pinned:   */ \
            /* a part closed and opened again in between (moved) means once more.       */ \
            Place org[64];                                                                  \
            for (int pinned = 0;; pinned = 1) {                                             \
                uint64_t touched = 0, over = 0, moved = 0;                                  \
                for (Py_ssize_t q = 0; q < p->nparts; q++)                                  \
                    org[q] = place_load(&p->at[q]);                                         \
                for (Py_ssize_t k = 0; k < r; k++) {                                        \
                    int64_t i = (int64_t)ix[k];                                             \
                    over |= (uint64_t)i >= (uint64_t)p->n;                                  \
                    Py_ssize_t q = part_of(p, over ? 0 : i);                                \
                    touched |= (uint64_t)1 << q;                                            \
                    src[2 * k] = (const char *)(org[q].x + (uintptr_t)i * org[q].xs);       \
                    src[2 * k + 1] = (const char *)(org[q].y + (uintptr_t)i * org[q].ys);   \
                }                                                                           \
                if (over) {                                                                 \
                    for (Py_ssize_t k = 0; k < r; k++)                                      \
                        if ((uint64_t)(int64_t)ix[k] >= (uint64_t)p->n) {                   \
                            *bad = k;                                                       \
                            break;                                                          \
                        }                                                                   \
                    return 0;                                                               \
                }                                                                           \
                for (Py_ssize_t q = 0; q < p->nparts; q++)                                  \
                    if (touched >> q & 1) {                                                 \
                        if (!pinned) {                                                      \
                            seen[q] = pin(p, q) ? 1 : 2;                                    \
                            missing |= seen[q] == 2;                                        \
                        }                                                                   \
                        Place now = place_load(&p->at[q]);                                  \
                        moved |= !place_same(&org[q], &now);                                \
                    }                                                                       \
                if (missing)                                                                \
                    return 1;                                                               \
                if (!moved)                                                                 \
                    return 2;                                                               \
            }                                                                               \
        }                                                                                   \
        for (Py_ssize_t k = 0; k < r; k++) {                                                \
            int64_t i = ix == NULL ? start + k : (int64_t)ix[k];                            \
            if ((uint64_t)i >= (uint64_t)p->n) {                                            \
                *bad = k;                                                                   \
                return 0;                                                                   \
            }                                                                               \
            Py_ssize_t q = part_of(p, i);                                                   \
            if (!seen[q]) { /* pinned before its place is read: it stays */                 \
                seen[q] = pin(p, q) ? 1 : 2;                                                \
                missing |= seen[q] == 2;                                                    \
            }                                                                               \
            const Place *a = &p->at[q];                                                     \
            src[2 * k] = (const char *)(a->x + (uintptr_t)i * a->xs);                       \
            src[2 * k + 1] = (const char *)(a->y + (uintptr_t)i * a->ys);                   \
        }                                                                                   \
        return missing ? 1 : 2;                                                             \
    }
DEFINE_PLACE(place32, int32_t)
DEFINE_PLACE(place64, int64_t)

/* One read's copy from the parts' mappings: rows src[0..r) into out_x/out_y. */
typedef struct {
    const PartsObject *p;
    Job *j; /* (its nan is set by the copy) */
    const char **src;
} PartsCopy;

/* One pass, as in both64 (_core_rows.c): a row's x, then its y (from the same row
 * of a file's part, or from a part's separate y array). */
WIDE static void copy_placed(void *arg)
{
    const PartsCopy *c = arg;
    const PartsObject *p = c->p;
    Job *j = c->j;
    const char **src = c->src;
    Py_ssize_t ox = p->d * (j->f32 ? 4 : 8), oy = p->l * (j->f32y ? 4 : 8);
    for (Py_ssize_t k = 0; k < j->r; k++) {
        const char *sx = src[2 * k], *sy = src[2 * k + 1];
        if (k + PREFETCH < j->r) { /* as in copy_side: the row PREFETCH rows ahead */
            const char *fx = src[2 * (k + PREFETCH)], *fy = src[2 * (k + PREFETCH) + 1];
            __builtin_prefetch(fx); /* (a prefetch never faults: a side of no values too) */
            __builtin_prefetch(fx + 8 * p->d - 1);
            __builtin_prefetch(fy + 8 * p->l - 1);
        }
        if (p->d && j->tf != NULL) {
            if (transform_row(j->ox + k * ox, sx, p->d, j->f32, j->tf) && j->nan < 0)
                j->nan = k;
        } else if (p->d)
            copy_row(j->ox + k * ox, sx, p->d, j->f32);
        if (p->l)
            copy_row(j->oy + k * oy, sy, p->l, j->f32y);
    }
}

#define NO_FAULT (-2) /* (guard_run's hit: the range a fault read, -1 if it cannot say) */

/* A read split over threads (_core_split.h): each part copies its rows under a guard
 * of its own over the same ranges; what each found. */
typedef struct {
    const PartsObject *p;
    const Job *j;
    const char **src;
    const GuardRange *ranges;
    Py_ssize_t nan[SPLIT_MAX]; /* the read's first row with a NaN in part k, or -1 */
    Py_ssize_t hit[SPLIT_MAX]; /* the part a fault read (-1: unknown), or NO_FAULT */
} PartsSplit;

static void copy_part(void *ctx, int k, Py_ssize_t lo, Py_ssize_t hi)
{
    PartsSplit *c = ctx;
    const PartsObject *p = c->p;
    Job j = *c->j;
    j.r = hi - lo;
    j.ox += lo * p->d * (j.f32 ? 4 : 8);
    j.oy += lo * p->l * (j.f32y ? 4 : 8);
    j.nan = -1;
    PartsCopy pc = {p, &j, c->src + 2 * lo};
    Py_ssize_t hit = -1;
    c->hit[k] = guard_run(c->ranges, p->nparts, copy_placed, &pc, &hit) < 0 ? hit : NO_FAULT;
    c->nan[k] = j.nan < 0 ? -1 : lo + j.nan;
}

/* Rows of j, by global row number, straight from their parts' mappings into the
 * outputs. Every row is checked and placed first, pinning the parts touched (see
 * place32), then copied under the guard over the pinned parts' mappings (ranges[k]:
 * part k's, empty for a part not pinned: zeroed by the caller), then each part touched is checked with one
 * fstat, then unpinned. 0: copied (or j->bad >= 0: a row out of range, nothing
 * copied); 1: parts not set (seen == 2), nothing copied; -1: a copy faulted (in part
 * *which); -2: part *which changed. */
static int parts_copy_pinned(const PartsObject *p, Job *j, const char **src, char *seen,
                             GuardRange *ranges, Py_ssize_t *which, int parts)
{
    int placed = j->isz == 4 ? place32(p, j->idx, j->start, j->r, src, seen, &j->bad)
                             : place64(p, j->idx, j->start, j->r, src, seen, &j->bad);
    if (placed != 2)
        return placed;
    for (Py_ssize_t q = 0; q < p->nparts; q++) /* a fault counts only in this read's parts */
        if (seen[q] == 1) /* (the others' ranges stay empty: ranges comes zeroed) */
            ranges[q] = (GuardRange){p->parts[q]->lo, p->parts[q]->hi};
    PartsSplit c = {p, j, src, ranges, {0}, {0}};
    split_run(parts, j->r, copy_part, &c);
    for (int k = 0; k < parts; k++)
        if (c.hit[k] != NO_FAULT) {
            *which = c.hit[k];
            return -1;
        }
    for (int k = 0; k < parts && j->nan < 0; k++)
        j->nan = c.nan[k];
    for (Py_ssize_t q = 0; q < p->nparts; q++)
        if (seen[q] == 1 && p->parts[q]->lo != NULL && file_changed(p->parts[q])) {
            *which = q;
            return -2;
        }
    return 0;
}

static int parts_copy(const PartsObject *p, Job *j, const char **src, char *seen,
                      GuardRange *ranges, Py_ssize_t *which, int parts)
{
    int rc = parts_copy_pinned(p, j, src, seen, ranges, which, parts);
    unpin(p, seen);
    return rc;
}

int parts_gather(PyObject *o, Job *j, int threads, Py_ssize_t *which, char **seen_out)
{
    PartsObject *p = (PartsObject *)o;
    int rc = -3;
    const char **src = NULL;
    char *seen = NULL;
    GuardRange *ranges = NULL;
    size_t cells;
    if (!__builtin_mul_overflow((size_t)(j->r ? j->r : 1), 2 * sizeof(const char *), &cells))
        src = PyMem_RawMalloc(cells);
    seen = PyMem_RawCalloc((size_t)p->nparts, 1);
    ranges = PyMem_RawCalloc((size_t)p->nparts, sizeof(GuardRange));
    if (src == NULL || seen == NULL || ranges == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    guard_install();
    int parts = split_count(threads, j->r, 8 * (p->d + p->l));
    Py_BEGIN_ALLOW_THREADS
    rc = parts_copy(p, j, src, seen, ranges, which, parts);
    Py_END_ALLOW_THREADS
    if (rc >= 0 && j->bad < 0 && p->stamps.buf != NULL) { /* (the GIL held: no race) */
        int64_t *t = p->stamps.buf, tick = ++t[p->nparts];
        for (Py_ssize_t q = 0; q < p->nparts; q++)
            if (seen[q])
                t[q] = tick;
    }
done:
    PyMem_RawFree(src);
    PyMem_RawFree(ranges);
    if (seen_out != NULL && rc != -3)
        *seen_out = seen;
    else
        PyMem_RawFree(seen);
    return rc;
}

Py_ssize_t parts_shape(PyObject *o, Py_ssize_t *n, Py_ssize_t *d, Py_ssize_t *l)
{
    const PartsObject *p = (const PartsObject *)o;
    *n = p->n;
    *d = p->d;
    *l = p->l;
    return p->nparts;
}

static PyObject *Parts_set(PartsObject *self, PyObject *args)
{
    Py_ssize_t k;
    PyObject *o;
    if (!PyArg_ParseTuple(args, "nO:set", &k, &o))
        return NULL;
    if (k < 0 || k >= self->nparts) {
        PyErr_Format(PyExc_IndexError, "part %zd out of range for %zd parts", k, self->nparts);
        return NULL;
    }
    RowsObject *s = PyObject_TypeCheck(o, &RowsType) ? (RowsObject *)o : NULL;
    /* A file's rows, or rows in memory (memory_rows: x and y each its own array, or
     * views of one array of whole rows; each side its own stride): a chunk held in
     * memory as it came. */
    if (s == NULL) {
        PyErr_SetString(PyExc_TypeError, "set(k, rows): rows must come from file_rows() or "
                                         "memory_rows()");
        return NULL;
    }
    if (s->d != self->d || s->l != self->l || s->n != self->starts[k + 1] - self->starts[k]) {
        PyErr_Format(PyExc_ValueError, "part %zd must hold (%lld, %zd, %zd) rows; got (%zd, "
                     "%zd, %zd)", k, (long long)(self->starts[k + 1] - self->starts[k]),
                     self->d, self->l, s->n, s->d, s->l);
        return NULL;
    }
    /* Only where not set: a read on another thread (without the GIL) may be using it. */
    if (self->parts[k] == NULL) {
        /* global row i's x lies at xbase + (i - starts[k]) * xstride: one origin a
         * side (unsigned, wrapping: it may lie below the rows) saves a load a row;
         * written before the part is published (the release store below) */
        uintptr_t at = (uintptr_t)self->starts[k];
        Place *a = &self->at[k];
        __atomic_store_n(&a->xs, (uintptr_t)s->xstride, __ATOMIC_RELAXED);
        __atomic_store_n(&a->ys, (uintptr_t)s->ystride, __ATOMIC_RELAXED);
        __atomic_store_n(&a->x, (uintptr_t)s->xbase - at * (uintptr_t)s->xstride,
                         __ATOMIC_RELAXED);
        __atomic_store_n(&a->y, (uintptr_t)s->ybase - at * (uintptr_t)s->ystride,
                         __ATOMIC_RELAXED);
        __atomic_store_n(&self->parts[k], (RowsObject *)Py_NewRef(o), __ATOMIC_RELEASE);
    }
    else if (self->parts[k] != s) {
        PyErr_Format(PyExc_ValueError, "part %zd is set already", k);
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(parts_unset_doc,
"unset(k)\n--\n\n"
"Let go of part k's rows (the part is being closed): True when done (or it was not\n"
"set), False while a read on another thread is copying from it (try again later).");

static PyObject *Parts_unset(PartsObject *self, PyObject *arg)
{
    Py_ssize_t k = PyLong_AsSsize_t(arg);
    if (k == -1 && PyErr_Occurred())
        return NULL;
    if (k < 0 || k >= self->nparts) {
        PyErr_Format(PyExc_IndexError, "part %zd out of range for %zd parts", k, self->nparts);
        return NULL;
    }
    int64_t idle = 0;
    if (!__atomic_compare_exchange_n(&self->pins[k], &idle, CLOSING, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        Py_RETURN_FALSE;
    RowsObject *old = self->parts[k];
    __atomic_store_n(&self->parts[k], NULL, __ATOMIC_RELEASE);
    __atomic_fetch_sub(&self->pins[k], CLOSING, __ATOMIC_RELEASE);
    Py_XDECREF(old);
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(parts_stamp_into_doc,
"stamp_into(stamps)\n--\n\n"
"From now on, each read (copied, or finding parts not set) adds 1 to stamps[-1] and\n"
"writes it to stamps[k] of each part k its rows lie in: which parts were read\n"
"last, with no pass over the rows. ``stamps``: a writable 1-D int64 array of the\n"
"parts' count plus one entries, held until another is given.");

static PyObject *Parts_stamp_into(PartsObject *self, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) != 0)
        return NULL;
    const char *f = plain_format(&b);
    if (b.ndim != 1 || !strchr("lq", f[0]) || f[1] || b.itemsize != 8 ||
        b.len != (self->nparts + 1) * 8) {
        PyErr_Format(PyExc_TypeError, "stamp_into: stamps must be a writable 1-D int64 "
                     "array of %zd entries (a part's each, then the clock)", self->nparts + 1);
        PyBuffer_Release(&b);
        return NULL;
    }
    PyBuffer_Release(&self->stamps); /* (the one given before, if any) */
    self->stamps = b;
    Py_RETURN_NONE;
}

static void Parts_dealloc(PartsObject *self)
{
    PyBuffer_Release(&self->stamps);
    for (Py_ssize_t k = 0; self->parts != NULL && k < self->nparts; k++)
        Py_XDECREF(self->parts[k]);
    PyMem_Free(self->parts);
    PyMem_Free(self->starts);
    PyMem_Free(self->table);
    PyMem_Free(self->at);
    PyMem_Free(self->pins);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(parts_read_doc,
"read(rows, out_x, out_y, transform=None, threads=None)\n--\n\n"
"As Rows.read, over the dataset's global rows [0, n). Returns None when copied,\n"
"or, copying nothing, the list of the parts the rows lie in that are not set\n"
"(set them, then read again). IndexError for a row outside [0, n); FileChanged\n"
"(with the part's number as its ``part`` attribute, None where a fault cannot\n"
"say) when a part changed.");

static PyMethodDef Parts_methods[] = {
    {"read", (PyCFunction)(void (*)(void))Parts_read, METH_FASTCALL, parts_read_doc},
    {"set", (PyCFunction)Parts_set, METH_VARARGS,
     "set(k, rows)\n--\n\nPart k's rows (a file_rows object), once the part is open; keep\n"
     "the file open (its descriptor is checked after each copy) until unset(k). Or a\n"
     "memory_rows object: rows held in memory (x and y separate arrays, or one's views)."},
    {"unset", (PyCFunction)Parts_unset, METH_O, parts_unset_doc},
    {"stamp_into", (PyCFunction)Parts_stamp_into, METH_O, parts_stamp_into_doc},
    {"runs", (PyCFunction)parts_runs, METH_VARARGS,
     "runs(changed=None, missing=None)\n--\n\nA reader's own read_run and take_run over these\n"
     "parts, with its hooks (a PartsRuns: see its attributes)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PartsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exactbatch._core.Parts",
    .tp_basicsize = sizeof(PartsObject),
    .tp_dealloc = (destructor)Parts_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A sharded dataset's rows: made by parts_rows().",
    .tp_methods = Parts_methods,
};

PyObject *parts_rows(PyObject *mod, PyObject *args)
{
    PyObject *o;
    Py_ssize_t d, l;
    if (!PyArg_ParseTuple(args, "Onn:parts_rows", &o, &d, &l))
        return NULL;
    Py_ssize_t row;
    if (d < 0 || l < 0) {
        PyErr_SetString(PyExc_ValueError, "parts_rows: negative widths");
        return NULL;
    }
    if (row_size("parts_rows", d, l, &row) < 0)
        return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(o, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return NULL;
    const char *f = plain_format(&b);
    Py_ssize_t m = b.len / (b.itemsize ? b.itemsize : 1);
    if (b.ndim != 1 || !strchr("lq", f[0]) || f[1] || b.itemsize != 8 || m < 2) {
        PyErr_SetString(PyExc_TypeError, "parts_rows: starts must be a 1-D int64 array of the "
                         "parts' first rows and n last (at least one part)");
        PyBuffer_Release(&b);
        return NULL;
    }
    if (m - 1 > INT32_MAX) { /* the table holds parts as int32 */
        PyErr_Format(PyExc_ValueError, "parts_rows: at most %d parts; got %zd", INT32_MAX, m - 1);
        PyBuffer_Release(&b);
        return NULL;
    }
    const int64_t *st = b.buf;
    for (Py_ssize_t k = 0; k < m; k++)
        if ((k == 0 && st[0] != 0) || (k > 0 && st[k] < st[k - 1])) {
            PyErr_SetString(PyExc_ValueError, "parts_rows: starts must rise from 0");
            PyBuffer_Release(&b);
            return NULL;
        }
    /* (no guard to install yet: each read installs it, and each part's file_rows did) */
    PartsObject *p = (PartsObject *)PartsType.tp_alloc(&PartsType, 0); /* zeroed */
    if (p == NULL) {
        PyBuffer_Release(&b);
        return NULL;
    }
    p->nparts = m - 1;
    p->n = (Py_ssize_t)st[m - 1];
    p->d = d;
    p->l = l;
    /* Buckets of 2**shift rows: about 4 per part, so a row's part is the bucket's
     * first part or one of the few after it. */
    int shift = 0;
    while ((((int64_t)st[m - 1] - 1) >> shift) + 1 > 4 * (int64_t)m + 64)
        shift++;
    Py_ssize_t buckets = st[m - 1] > 0 ? (Py_ssize_t)(((int64_t)st[m - 1] - 1) >> shift) + 1 : 1;
    p->shift = shift;
    p->buckets = buckets;
    p->starts = PyMem_Malloc((size_t)m * sizeof(int64_t));
    p->table = PyMem_Malloc((size_t)buckets * sizeof(int32_t));
    p->parts = PyMem_Calloc((size_t)(m - 1), sizeof(RowsObject *));
    p->at = PyMem_Calloc((size_t)(m - 1), sizeof(Place));
    p->pins = PyMem_Calloc((size_t)(m - 1), sizeof(int64_t));
    if (p->starts == NULL || p->table == NULL || p->parts == NULL || p->at == NULL ||
        p->pins == NULL) {
        PyBuffer_Release(&b);
        Py_DECREF(p);
        return PyErr_NoMemory();
    }
    memcpy(p->starts, st, (size_t)m * sizeof(int64_t));
    PyBuffer_Release(&b);
    for (Py_ssize_t k = 0; k < buckets; k++)
        p->table[k] = (int32_t)part_search(p, (int64_t)k << shift, 0, p->nparts - 1);
    return (PyObject *)p;
}

int parts_ready(PyObject *module)
{
    if (PyType_Ready(&PartsType) < 0 || parts_runs_ready(module) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "Parts", (PyObject *)&PartsType);
}
