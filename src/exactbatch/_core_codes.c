/* Categorical strings coded a chunk at once (see _core_codes.h). */
#include "_core_codes.h"

#include <math.h>

#define KEY_P 0x100000001B3ULL        /* the FNV prime: the polynomial's base (odd) */
#define KEY_LENGTH 0x9E3779B97F4A7C15ULL /* mixes the length in (a zero byte still counts) */

/* SplitMix64's finaliser: every bit of a key moves its top bits (the buckets'). */
static inline uint64_t mixed(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    x ^= x >> 31;
    return x;
}

/* The 8 bytes at p as a little-endian word (byte j at bits 8j), whatever the host's order. */
static inline uint64_t word8(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

/* string_keys's key of the len bytes at s: the little-endian words w_0 .. w_{m-1} of its
 * bytes (eight a word, the last one's missing bytes zero), sum(w_q * P**(m - 1 - q)) +
 * len * LENGTH modulo 2**64, mixed. One multiply in the chain a word. `room`: the bytes
 * readable from s (at least len): a last part word is read whole, its bytes past the
 * string dropped, when the string has eight bytes before it or the buffer eight after
 * its start; a byte at a time else (a short string at the buffer's end). */
static inline uint64_t key_of(const unsigned char *s, int64_t len, int64_t room)
{
    uint64_t h = 0;
    int64_t i = 0;
    for (; i + 8 <= len; i += 8)
        h = h * KEY_P + word8(s + i);
    int64_t r = len - i;
    if (r > 0) {
        uint64_t w = 0;
        if (len >= 8)
            w = word8(s + len - 8) >> (8 * (8 - r));
        else if (room >= 8)
            w = word8(s) & ((1ULL << (8 * r)) - 1);
        else
            for (int64_t j = 0; j < r; j++)
                w |= (uint64_t)s[j] << (8 * j);
        h = h * KEY_P + w;
    }
    return mixed(h + (uint64_t)len * KEY_LENGTH);
}

/* Are the len bytes at a and b the same? (8 to 16 bytes: two 8-byte reads each, inside.) */
static inline int same_bytes(const unsigned char *a, const unsigned char *b, int64_t len)
{
    if (len >= 8 && len <= 16) {
        uint64_t a0, a1, b0, b1;
        memcpy(&a0, a, 8);
        memcpy(&b0, b, 8);
        memcpy(&a1, a + len - 8, 8);
        memcpy(&b1, b + len - 8, 8);
        return a0 == b0 && a1 == b1;
    }
    return len == 0 || !memcmp(a, b, (size_t)len);
}

/* A buffer's kind: 'i' a signed integer, 'u' an unsigned one, 'f' a float, '?' a bool,
 * 0 anything else. */
static char kind_of(const Py_buffer *b)
{
    const char *f = plain_format(b);
    if (f[0] && f[1])
        return 0;
    switch (f[0]) {
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
        return 'i';
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N':
        return 'u';
    case 'd':
        return 'f';
    case '?':
        return '?';
    }
    return 0;
}

/* o as a 1-D C-contiguous buffer of `kind` (0: any, read as bytes) and itemsize `size` (0:
 * any), writable when asked; a TypeError naming `name` else. None: an empty buffer when
 * `none_ok`. 0 on success (release with PyBuffer_Release when b->obj or b->buf). */
static int get(PyObject *o, Py_buffer *b, const char *name, char kind, Py_ssize_t size,
               int writable, int none_ok)
{
    if (o == Py_None && none_ok) {
        memset(b, 0, sizeof *b);
        return 0;
    }
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, b, flags) != 0)
        return -1;
    int ok = b->ndim <= 1 && (kind == 0 || kind_of(b) == kind) && (size == 0 || b->itemsize == size);
    if (!ok) {
        PyBuffer_Release(b);
        memset(b, 0, sizeof *b);
        PyErr_Format(PyExc_TypeError, "%s: not a 1-D array of the expected type", name);
        return -1;
    }
    return 0;
}

static void release(Py_buffer *bufs, int k)
{
    for (int j = 0; j < k; j++)
        if (bufs[j].obj != NULL)
            PyBuffer_Release(&bufs[j]);
}

static Py_ssize_t count(const Py_buffer *b)
{
    return b->itemsize ? b->len / b->itemsize : 0;
}

/* Offset i of an int32 or int64 offsets buffer. */
static inline int64_t offset_at(const Py_buffer *b, Py_ssize_t i)
{
    return b->itemsize == 4 ? (int64_t)((const int32_t *)b->buf)[i] : ((const int64_t *)b->buf)[i];
}

/* Are offsets o (n + 1 of them) non-decreasing, from 0 or more, up to `size` bytes? */
static int offsets_ok(const Py_buffer *o, Py_ssize_t n, Py_ssize_t size)
{
    if (count(o) < n + 1 || offset_at(o, 0) < 0 || offset_at(o, n) > size)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (offset_at(o, i) > offset_at(o, i + 1))
            return 0;
    return 1;
}

/* string_keys(offsets, data, out): out[i] = the key of bytes offsets[i] .. offsets[i+1]-1
 * of data (offsets int32 or int64, len(out) + 1 of them). */
PyObject *string_keys(PyObject *mod, PyObject *args)
{
    PyObject *oo, *od, *ok;
    Py_buffer b[3] = {{0}};
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "OOO:string_keys", &oo, &od, &ok))
        return NULL;
    if (get(oo, &b[0], "string_keys: offsets", 'i', 0, 0, 0) || get(od, &b[1], "string_keys: data", 0, 0, 0, 1) ||
        get(ok, &b[2], "string_keys: out", 'u', 8, 1, 0))
        goto done;
    Py_ssize_t n = count(&b[2]);
    if ((b[0].itemsize != 4 && b[0].itemsize != 8) || !offsets_ok(&b[0], n, b[1].len)) {
        PyErr_SetString(PyExc_ValueError, "string_keys: offsets do not describe the data");
        goto done;
    }
    const unsigned char *data = (const unsigned char *)b[1].buf;
    uint64_t *out = (uint64_t *)b[2].buf;
    int64_t size = (int64_t)b[1].len;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t at = offset_at(&b[0], i);
        out[i] = key_of(data + at, offset_at(&b[0], i + 1) - at, size - at);
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    release(b, 3);
    return result;
}

/* index_codes(keys, offsets, data, index_keys, index_codes, starts, shift, vocab_offsets,
 * vocab_data, out, found): each string i (bytes offsets[i] .. of data, key keys[i]) looked
 * up among the vocabulary's sorted keys from the start of its bucket (starts[key >> shift])
 * to the next bucket's; the entry at position `at` with its key whose bytes (the entries
 * are in the keys' order: vocab_offsets[at] .. of vocab_data) equal the string's gives
 * out[i] = index_codes[at], found[i] = 1; else NaN, 0. A large vocabulary's index is far
 * out of the cache: the rows ahead have their bucket, then their entry, then its bytes
 * fetched while this row is looked up (three reads from memory at once, not one after
 * the other). The index is checked as it is read (never whole per call: that is its
 * size): a start or code out of range is a ValueError. */
#define AHEAD 8 /* rows between fetching a bucket and its entry, and the entry and its bytes */
#define FAR 8192 /* entries past which the index is fetched ahead (else in the cache) */
PyObject *index_codes(PyObject *mod, PyObject *args)
{
    PyObject *o[10];
    int shift;
    Py_buffer b[10] = {{0}};
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "OOOOOOiOOOO:index_codes", &o[0], &o[1], &o[2], &o[3], &o[4],
                          &o[5], &shift, &o[6], &o[7], &o[8], &o[9]))
        return NULL;
    if (get(o[0], &b[0], "index_codes: keys", 'u', 8, 0, 0) ||
        get(o[1], &b[1], "index_codes: offsets", 'i', 0, 0, 0) ||
        get(o[2], &b[2], "index_codes: data", 0, 0, 0, 1) ||
        get(o[3], &b[3], "index_codes: index_keys", 'u', 8, 0, 0) ||
        get(o[4], &b[4], "index_codes: index_codes", 'f', 8, 0, 0) ||
        get(o[5], &b[5], "index_codes: starts", 'i', 8, 0, 0) ||
        get(o[6], &b[6], "index_codes: vocab_offsets", 'i', 8, 0, 0) ||
        get(o[7], &b[7], "index_codes: vocab_data", 0, 0, 0, 1) ||
        get(o[8], &b[8], "index_codes: out", 'f', 8, 1, 0) ||
        get(o[9], &b[9], "index_codes: found", '?', 1, 1, 0))
        goto done;
    Py_ssize_t n = count(&b[0]), m = count(&b[3]), buckets = count(&b[5]) - 1;
    if (count(&b[8]) != n || count(&b[9]) != n || count(&b[4]) != m || buckets < 1 ||
        shift < 1 || shift > 63 || ((uint64_t)-1 >> shift) >= (uint64_t)buckets ||
        (b[1].itemsize != 4 && b[1].itemsize != 8) || !offsets_ok(&b[1], n, b[2].len) ||
        !offsets_ok(&b[6], m, b[7].len)) {
        PyErr_SetString(PyExc_ValueError, "index_codes: inconsistent index or strings");
        goto done;
    }
    const int64_t *starts = (const int64_t *)b[5].buf, *voffs = (const int64_t *)b[6].buf;
    const double *codes = (const double *)b[4].buf;
    const uint64_t *keys = (const uint64_t *)b[0].buf, *sorted = (const uint64_t *)b[3].buf;
    const unsigned char *data = (const unsigned char *)b[2].buf, *vdata = (const unsigned char *)b[7].buf;
    double *out = (double *)b[8].buf;
    char *found = (char *)b[9].buf;
    int bad = 0, far = m > FAR; /* a small index stays in the cache: nothing to fetch */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        /* (prefetches are hints: an address out of range is never read) */
        if (far && i + 2 * AHEAD < n)
            __builtin_prefetch(&starts[keys[i + 2 * AHEAD] >> shift]);
        if (far && i + AHEAD < n) {
            int64_t ahead = starts[keys[i + AHEAD] >> shift];
            __builtin_prefetch(&sorted[ahead]);
            __builtin_prefetch(&voffs[ahead]);
            __builtin_prefetch(&codes[ahead]);
        }
        if (far && i + AHEAD / 2 < n) {
            int64_t ahead = starts[keys[i + AHEAD / 2] >> shift];
            if (0 <= ahead && ahead < m)
                __builtin_prefetch(vdata + voffs[ahead]);
        }
        uint64_t k = keys[i];
        int64_t at = starts[k >> shift], end = starts[(k >> shift) + 1];
        if (!(0 <= at && at <= end && end <= m)) {
            bad = 1;
            break;
        }
        while (at < end && sorted[at] < k)
            at++;
        int hit = 0;
        double code = NAN;
        if (at < end && sorted[at] == k) {
            if (!(codes[at] >= 0 && codes[at] < (double)m)) {
                bad = 1;
                break;
            }
            int64_t from = offset_at(&b[1], i), len = offset_at(&b[1], i + 1) - from;
            hit = voffs[at + 1] - voffs[at] == len && same_bytes(vdata + voffs[at], data + from, len);
            if (hit)
                code = codes[at];
        }
        out[i] = code;
        found[i] = (char)hit;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "index_codes: the index's starts or codes out of range");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    release(b, 10);
    return result;
}

/* Rows i with the index of type T: out[i] = table[indices[i]] (NaN where the validity
 * bitmap says null); the first row whose index's entry was not found, or -1 (-2: an index
 * outside the table). */
#define TAKE(T)                                                                              \
    static Py_ssize_t take_##T(const T *ix, Py_ssize_t n, const unsigned char *bits,        \
                               Py_ssize_t bit0, const double *table, const char *found,     \
                               Py_ssize_t k, double *out)                                   \
    {                                                                                        \
        Py_ssize_t first = -1;                                                               \
        for (Py_ssize_t i = 0; i < n; i++) {                                                 \
            Py_ssize_t bit = bit0 + i;                                                       \
            if (bits != NULL && !((bits[bit >> 3] >> (bit & 7)) & 1)) {                      \
                out[i] = NAN;                                                                \
                continue;                                                                    \
            }                                                                                \
            T j = ix[i];                                                                     \
            if (!(j >= 0 && (uint64_t)j < (uint64_t)k))                                      \
                return -2;                                                                   \
            out[i] = table[j];                                                               \
            if (!found[j] && first < 0)                                                      \
                first = i;                                                                   \
        }                                                                                    \
        return first;                                                                        \
    }
TAKE(int8_t)
TAKE(int16_t)
TAKE(int32_t)
TAKE(int64_t)
TAKE(uint8_t)
TAKE(uint16_t)
TAKE(uint32_t)
TAKE(uint64_t)

/* take_codes(indices, validity, bit_offset, table, found, out) -> the first row whose
 * value is not in the vocabulary, or -1: out[i] = table[indices[i]], NaN where the
 * validity bitmap (bytes, or None: no nulls) has bit bit_offset + i clear. */
PyObject *take_codes(PyObject *mod, PyObject *args)
{
    PyObject *o[6];
    Py_ssize_t bit0, first = -1;
    Py_buffer b[5] = {{0}};
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "OOnOOO:take_codes", &o[0], &o[1], &bit0, &o[3], &o[4], &o[5]))
        return NULL;
    if (get(o[0], &b[0], "take_codes: indices", 0, 0, 0, 0) ||
        get(o[1], &b[1], "take_codes: validity", 0, 0, 0, 1) ||
        get(o[3], &b[2], "take_codes: table", 'f', 8, 0, 0) ||
        get(o[4], &b[3], "take_codes: found", '?', 1, 0, 0) ||
        get(o[5], &b[4], "take_codes: out", 'f', 8, 1, 0))
        goto done;
    char kind = kind_of(&b[0]);
    Py_ssize_t n = count(&b[4]), k = count(&b[2]), size = b[0].itemsize;
    int width_ok = size == 1 || size == 2 || size == 4 || size == 8;
    if ((kind != 'i' && kind != 'u') || !width_ok || count(&b[0]) != n || count(&b[3]) != k ||
        bit0 < 0 || (o[1] != Py_None && b[1].len * 8 < bit0 + n)) {
        PyErr_SetString(PyExc_ValueError, "take_codes: inconsistent indices, validity or table");
        goto done;
    }
    const unsigned char *bits = o[1] == Py_None ? NULL : (const unsigned char *)b[1].buf;
    const double *table = (const double *)b[2].buf;
    const char *found = (const char *)b[3].buf;
    double *out = (double *)b[4].buf;
    const void *ix = b[0].buf;
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'i')
        first = size == 1   ? take_int8_t(ix, n, bits, bit0, table, found, k, out)
                : size == 2 ? take_int16_t(ix, n, bits, bit0, table, found, k, out)
                : size == 4 ? take_int32_t(ix, n, bits, bit0, table, found, k, out)
                            : take_int64_t(ix, n, bits, bit0, table, found, k, out);
    else
        first = size == 1   ? take_uint8_t(ix, n, bits, bit0, table, found, k, out)
                : size == 2 ? take_uint16_t(ix, n, bits, bit0, table, found, k, out)
                : size == 4 ? take_uint32_t(ix, n, bits, bit0, table, found, k, out)
                            : take_uint64_t(ix, n, bits, bit0, table, found, k, out);
    Py_END_ALLOW_THREADS
    if (first == -2) {
        PyErr_SetString(PyExc_ValueError, "take_codes: a dictionary index outside its dictionary");
        goto done;
    }
    result = PyLong_FromSsize_t(first);
done:
    release(b, 5);
    return result;
}
