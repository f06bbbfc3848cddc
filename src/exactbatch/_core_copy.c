/* The copy of one read of Rows (see _core_rows.h): the copy loops (gather and cast, a
 * transform fused in), the scan for runs of consecutive rows, the copy split over
 * threads (_core_split.h), each part under the fault guard (_core_guard.h), and the
 * file's check after a copy from its mapping. */
#include "_core_rows.h"

#include <sys/stat.h>

#include "_core_guard.h"
#include "_core_split.h"

/* ------------------------------------------------------------------ the copy loops */

/* One side (x or y) of rows ix[0..r) (ix NULL: start, start+1, ...): w values a
 * row, at base + row * stride, into out. x and y in arrays of their own (and
 * sorted batches) are copied in two passes, each a plain loop of independent
 * loads, which the CPU overlaps well; shuffled rows holding y just after x go
 * through both64 (below) instead. Looking for runs row by row made it slower,
 * so ``runs`` says whether the batch starts with one; wide rows are prefetched
 * a few rows ahead. A run of consecutive rows, where the layout holds them
 * back to back (x or y in memory), is one memcpy. */
#define DEFINE_SIDE(NAME, T)                                                              \
    WIDE static void NAME(const T *ix, Py_ssize_t start, Py_ssize_t r, const char *base,      \
                     Py_ssize_t stride, Py_ssize_t w, char *out, int f32, int runs)       \
    {                                                                                     \
        Py_ssize_t ob = w * (f32 ? 4 : 8);                                                \
        runs = runs && !f32 && stride == 8 * w;                                           \
        if (ix == NULL && runs) {                                                         \
            memcpy(out, base + start * stride, (size_t)(r * ob));                         \
            return;                                                                       \
        }                                                                                 \
        if (ix == NULL) {                                                                 \
            for (Py_ssize_t k = 0; k < r; k++)                                            \
                copy_row(out + k * ob, base + (start + k) * stride, w, f32);              \
            return;                                                                       \
        }                                                                                 \
        if (!runs && !f32 && w == 1) { /* a label: one 8-byte move a row, no switch */    \
            for (Py_ssize_t k = 0; k < r; k++)                                            \
                memcpy(out + 8 * k, base + (int64_t)ix[k] * stride, 8);                   \
            return;                                                                       \
        }                                                                                 \
        if (!runs) {                                                                      \
            /* Wide rows: ask for the row PREFETCH rows ahead as each is copied (a     */ \
            /* shuffled batch's rows miss the cache; measured 1.05x-1.3x faster).       */ \
            Py_ssize_t k = 0;                                                             \
            if (w > 4)                                                                    \
                for (; k + PREFETCH < r; k++) {                                           \
                    const char *ahead = base + (int64_t)ix[k + PREFETCH] * stride;        \
                    __builtin_prefetch(ahead);                                            \
                    __builtin_prefetch(ahead + 8 * w - 1); /* a row spans 2-3 lines */    \
                    copy_row(out + k * ob, base + (int64_t)ix[k] * stride, w, f32);       \
                }                                                                         \
            for (; k < r; k++)                                                            \
                copy_row(out + k * ob, base + (int64_t)ix[k] * stride, w, f32);           \
            return;                                                                       \
        }                                                                                 \
        for (Py_ssize_t k = 0; k < r;) {                                                  \
            int64_t i = (int64_t)ix[k];                                                   \
            Py_ssize_t m = 1;                                                             \
            while (k + m < r && (int64_t)ix[k + m] == i + m)                              \
                m++;                                                                      \
            memcpy(out + k * ob, base + i * stride, (size_t)(m * ob));                    \
            k += m;                                                                       \
        }                                                                                 \
    }                                                                                     \
                                                                                          \
    /* 1: every row in [0, n), and the batch starts with a run (sorted rows: look for */  \
    /* runs as it copies); -1: in range, and it does not (a shuffled batch: a plain   */  \
    /* loop); else 0, and *bad is the position of the first row out of range. The     */  \
    /* check alone is one vectorised pass (looking for runs in it cost ~10%).         */  \
    static int NAME##_scan(const T *ix, Py_ssize_t r, uint64_t n, Py_ssize_t *bad)        \
    {                                                                                     \
        uint64_t over = 0;                                                                \
        for (Py_ssize_t k = 0; k < r; k++)                                                \
            over |= (uint64_t)(int64_t)ix[k] >= n;                                        \
        if (over) {                                                                       \
            for (Py_ssize_t k = 0; k < r; k++)                                            \
                if ((uint64_t)(int64_t)ix[k] >= n) {                                      \
                    *bad = k;                                                             \
                    break;                                                                \
                }                                                                         \
            return 0;                                                                     \
        }                                                                                 \
        return r > 1 && (int64_t)ix[1] == (int64_t)ix[0] + 1 ? 1 : -1;                   \
    }

DEFINE_SIDE(side32, int32_t)
DEFINE_SIDE(side64, int64_t)

/* The features of rows ix[0..r) (ix NULL: start, start+1, ...) through the transform
 * t (see _core_transform.h) as they are copied: the one pass over the batch, each row
 * transformed while it is in the cache; *nan: the position of the first row that held
 * a NaN. Wide shuffled rows are prefetched as in DEFINE_SIDE. */
#define DEFINE_TRANSFORMED(NAME, T)                                                        \
    WIDE static void NAME(const T *ix, Py_ssize_t start, Py_ssize_t r, const char *base,      \
                          Py_ssize_t stride, Py_ssize_t w, char *out, int f32,             \
                          const TransformObject *t, Py_ssize_t *nan)                       \
    {                                                                                     \
        Py_ssize_t ob = w * (f32 ? 4 : 8);                                                \
        for (Py_ssize_t k = 0; k < r; k++) {                                              \
            int64_t i = ix == NULL ? start + k : (int64_t)ix[k];                          \
            if (ix != NULL && w > 4 && k + PREFETCH < r) { /* every line of the row: */  \
                const char *ahead = base + (int64_t)ix[k + PREFETCH] * stride;            \
                for (Py_ssize_t at = 0; at < 8 * w; at += 64) /* (the loop holds fewer */ \
                    __builtin_prefetch(ahead + at);           /* rows in flight than  */ \
                __builtin_prefetch(ahead + 8 * w - 1);        /* a memcpy's)          */ \
            }                                                                             \
            if (transform_row(out + k * ob, base + i * stride, w, f32, t) && *nan < 0)    \
                *nan = k;                                                                 \
        }                                                                                 \
    }
DEFINE_TRANSFORMED(transformed32, int32_t)
DEFINE_TRANSFORMED(transformed64, int64_t)

/* Both sides of rows ix[0..r) where y follows x in each row (an .ndf file, a
 * shuffle buffer's whole rows): one pass, each row's x then its y, so a row
 * missing the cache is fetched once, not once a side (measured 1.2x-1.4x
 * faster on shuffled rows than two passes). */
#define DEFINE_BOTH(NAME, T)                                                              \
    WIDE static void NAME(const T *ix, Py_ssize_t r, const char *base, Py_ssize_t stride,   \
                          Py_ssize_t d, Py_ssize_t l, char *ox, char *oy, int f32, int f32y) \
    {                                                                                     \
        Py_ssize_t bx = d * (f32 ? 4 : 8), by = l * (f32y ? 4 : 8), yoff = 8 * d;         \
        Py_ssize_t k = 0;                                                                 \
        if (d + l > 4)                                                                    \
            for (; k + PREFETCH < r; k++) {                                               \
                const char *ahead = base + (int64_t)ix[k + PREFETCH] * stride;            \
                __builtin_prefetch(ahead);                                                \
                __builtin_prefetch(ahead + 8 * (d + l) - 1);                              \
                const char *src = base + (int64_t)ix[k] * stride;                         \
                copy_row(ox + k * bx, src, d, f32);                                       \
                copy_row(oy + k * by, src + yoff, l, f32y);                               \
            }                                                                             \
        for (; k < r; k++) {                                                              \
            const char *src = base + (int64_t)ix[k] * stride;                             \
            copy_row(ox + k * bx, src, d, f32);                                           \
            copy_row(oy + k * by, src + yoff, l, f32y);                                   \
        }                                                                                 \
    }
DEFINE_BOTH(both32, int32_t)
DEFINE_BOTH(both64, int64_t)

static void copy_side(const Job *j, const char *base, Py_ssize_t stride, Py_ssize_t w, char *out,
                      int f32, int runs)
{
    if (j->isz == 4)
        side32(j->idx, j->start, j->r, base, stride, w, out, f32, runs);
    else
        side64(j->idx, j->start, j->r, base, stride, w, out, f32, runs);
}

/* Every row of j checked before any is copied (the copies then need no check): 1 when
 * the read starts with a run of consecutive rows (or is a slice), 0 when it does not,
 * -1 with j->bad set when a row is out of range. */
static int scan_rows(const RowsObject *s, Job *j)
{
    if (j->idx == NULL)
        return 1;
    int runs = j->isz == 4 ? side32_scan(j->idx, j->r, (uint64_t)s->n, &j->bad)
                           : side64_scan(j->idx, j->r, (uint64_t)s->n, &j->bad);
    return runs == 0 ? -1 : runs > 0;
}

/* The copy of j's rows, checked by scan_rows (runs: what it said). */
static void copy_scanned(const RowsObject *s, Job *j, int runs)
{
    if (j->tf != NULL) { /* x through the transform, y copied as it is */
        if (s->d && j->isz == 4)
            transformed32(j->idx, j->start, j->r, s->xbase, s->xstride, s->d, j->ox, j->f32,
                          j->tf, &j->nan);
        else if (s->d)
            transformed64(j->idx, j->start, j->r, s->xbase, s->xstride, s->d, j->ox, j->f32,
                          j->tf, &j->nan);
        if (s->l)
            copy_side(j, s->ybase, s->ystride, s->l, j->oy, j->f32y, runs);
        return;
    }
    if (j->idx != NULL && !runs && s->d && s->l && s->ybase == s->xbase + 8 * s->d &&
        s->ystride == s->xstride) { /* y follows x in each row */
        if (j->isz == 4)
            both32(j->idx, j->r, s->xbase, s->xstride, s->d, s->l, j->ox, j->oy, j->f32,
                   j->f32y);
        else
            both64(j->idx, j->r, s->xbase, s->xstride, s->d, s->l, j->ox, j->oy, j->f32,
                   j->f32y);
        return;
    }
    if (s->d)
        copy_side(j, s->xbase, s->xstride, s->d, j->ox, j->f32, runs);
    if (s->l)
        copy_side(j, s->ybase, s->ystride, s->l, j->oy, j->f32y, runs);
}

static void copy_rows(const RowsObject *s, Job *j)
{
    int runs = scan_rows(s, j);
    if (runs >= 0)
        copy_scanned(s, j, runs);
}

#ifdef __APPLE__
#define STAT_NS(st, which) ((long long)(st).st_##which##timespec.tv_sec * 1000000000LL + \
                            (st).st_##which##timespec.tv_nsec)
#else
#define STAT_NS(st, which) ((long long)(st).st_##which##tim.tv_sec * 1000000000LL + \
                            (st).st_##which##tim.tv_nsec)
#endif

/* Has the file of rows s (a file's: lo != NULL) lost bytes, or changed its modification
 * time or change time (ctime) since opened? One fstat. The rule is exactbatch.ndf.local's
 * LocalHandle.check_size (see there): a ctime moved by the last link going (the file
 * deleted, or replaced by a rename over its path) is no change. */
int file_changed(const RowsObject *s)
{
    struct stat st;
    if (fstat(s->fd, &st) != 0 || (long long)st.st_size < s->size)
        return 1;
    return (s->mtime_ns >= 0 && STAT_NS(st, m) != s->mtime_ns) ||
           (s->ctime_ns >= 0 && st.st_nlink > 0 && STAT_NS(st, c) != s->ctime_ns);
}

typedef struct {
    const RowsObject *s;
    Job *j;
} RowsCopy;

static void copy_rows_of(void *arg)
{
    RowsCopy *c = arg;
    copy_rows(c->s, c->j);
}

/* One part of a read split over threads (_core_split.h): the whole read, scanned, and
 * what each part's copy found. */
typedef struct {
    const RowsObject *s;
    const Job *j;
    Py_ssize_t nan[SPLIT_MAX]; /* the read's first row with a NaN in part k, or -1 */
    char faulted[SPLIT_MAX];
} SplitCopy;

typedef struct {
    const RowsObject *s;
    Job *j;
    int runs;
} ScannedCopy;

static void copy_scanned_of(void *arg)
{
    ScannedCopy *c = arg;
    copy_scanned(c->s, c->j, c->runs);
}

/* Rows [lo, hi) of the read, on this thread: a Job of their own (its rows and outputs
 * offset), under this thread's own guard. Each row is copied as a read of one thread
 * copies it (a part starting a run, or not, picks a loop, not the bytes). */
static void copy_part(void *ctx, int k, Py_ssize_t lo, Py_ssize_t hi)
{
    SplitCopy *c = ctx;
    const RowsObject *s = c->s;
    Job j = *c->j;
    j.r = hi - lo;
    if (j.idx != NULL)
        j.idx = (const char *)j.idx + lo * j.isz;
    else
        j.start += lo;
    j.ox += lo * s->d * (j.f32 ? 4 : 8);
    j.oy += lo * s->l * (j.f32y ? 4 : 8);
    j.nan = -1;
    ScannedCopy sc = {s, &j, j.idx == NULL || (j.r > 1 && row_at(&j, 1) == row_at(&j, 0) + 1)};
    if (s->lo == NULL) {
        copy_scanned_of(&sc);
    } else {
        GuardRange mapping = {s->lo, s->hi};
        c->faulted[k] = guard_run(&mapping, 1, copy_scanned_of, &sc, NULL) < 0;
    }
    c->nan[k] = j.nan < 0 ? -1 : lo + j.nan;
}

/* 0: copied; -1: the copy faulted (the guard caught it); -2: the file changed. On
 * `parts` threads (split_count), each copying a range of the rows. */
int guarded_copy(const RowsObject *s, Job *j, int parts)
{
    if (parts > 1) {
        if (scan_rows(s, j) < 0)
            return 0; /* (j->bad set, nothing copied) */
        SplitCopy c = {s, j, {0}, {0}};
        split_run(parts, j->r, copy_part, &c);
        for (int k = 0; k < parts; k++)
            if (c.faulted[k])
                return -1;
        for (int k = 0; k < parts && j->nan < 0; k++)
            j->nan = c.nan[k];
        return s->lo != NULL && file_changed(s) ? -2 : 0;
    }
    if (s->lo == NULL) {
        copy_rows(s, j);
        return 0;
    }
    GuardRange mapping = {s->lo, s->hi};
    RowsCopy c = {s, j};
    if (guard_run(&mapping, 1, copy_rows_of, &c, NULL) < 0)
        return -1;
    return file_changed(s) ? -2 : 0;
}
