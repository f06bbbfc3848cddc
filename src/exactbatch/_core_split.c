/* One copy on several threads (see _core_split.h). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "_core_split.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

int parse_threads(PyObject *o, int *threads)
{
    if (o == NULL || o == Py_None) {
        *threads = 0;
        return 0;
    }
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "threads must be an int >= 1 or None; got %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "threads must be an int >= 1 or None (0: auto); got %ld",
                     v);
        return -1;
    }
    *threads = (int)v;
    return 0;
}

/* The cores this process may run on (at least 1). */
static int cores(void)
{
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n < INT32_MAX ? n : INT32_MAX) : 1;
}

int split_count(int want, Py_ssize_t r, Py_ssize_t row_bytes)
{
    Py_ssize_t k = want;
    if (want <= 0) { /* auto */
        Py_ssize_t bytes;
        if (__builtin_mul_overflow(r, row_bytes, &bytes))
            bytes = PY_SSIZE_T_MAX;
        k = bytes / SPLIT_BYTES;
        if (k < 2)
            return 1; /* (no system call for the many small reads) */
        /* One core left to the rest (the caller's step, the order's and the
         * prefetch's threads): on 2 cores the loader's order thread took half the
         * second one (docs/benchmarks.md, issue 32), so auto stays on one thread. */
        int c = cores() - 1;
        if (k > c)
            k = c;
        if (k < 2)
            return 1;
    }
    if (k > r)
        k = r;
    if (k > SPLIT_MAX)
        k = SPLIT_MAX;
    return k < 1 ? 1 : (int)k;
}

/* The pool: up to SPLIT_MAX - 1 threads, made as reads first need them and kept, each
 * asleep until a read hands it a part (a thread made per read cost as much as a batch
 * of a few thousand rows). Worker w is handed part w + 1 of a read, and only the
 * workers a read needs are woken, each on a condition of its own; the read, once its
 * own part is copied, takes back each part whose worker has not started it (see
 * claim), and waits only for those being copied. One read uses the pool at a
 * time; a read that finds it taken copies on its own thread (the cores are busy
 * anyway). The threads are joined at interpreter exit (Py_AtExit), and a forked child
 * starts with none (the pool is reset by pthread_atfork: the parent's threads do not
 * exist there). */
typedef struct {
    void (*work)(void *, int, Py_ssize_t, Py_ssize_t);
    void *ctx;
    Py_ssize_t lo, hi;
} Part;

typedef struct {
    pthread_t tid;
    pthread_cond_t wake;  /* a part, or stop */
    unsigned long go;     /* parts handed to this worker so far (polled unlocked) */
    unsigned long claim;  /* go while its part is not claimed yet, else 0 */
    unsigned long done;   /* go once its part, claimed by the worker, is copied */
    Part part;            /* the last part handed (a copy: the read's lives on its stack) */
} Worker;

static pthread_mutex_t pool_use = PTHREAD_MUTEX_INITIALIZER;  /* held by the read using it */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER; /* the fields below */
static pthread_cond_t pool_done = PTHREAD_COND_INITIALIZER;   /* a worker's part copied */
static Worker workers[SPLIT_MAX];
static int nworkers;
static int stopping; /* (read unlocked while polling: atomic loads) */

/* Claim part `go` of worker w: 1 for the first to ask (the worker, or the read that
 * handed it and found it not started: a part is never waited for before a thread
 * runs it, so a read on a busy host is never slower than its own copy), 0 after. */
static inline int claim(Worker *w, unsigned long go)
{
    unsigned long want = go;
    return __atomic_compare_exchange_n(&w->claim, &want, 0, 0, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
}

/* A worker, or the read waiting for its workers, polls for up to SPIN_NS before it
 * sleeps on a condition: reads come back to back (a loop over batches), and waking a
 * sleeping thread costs tens of microseconds on some hosts (a virtual machine's), as
 * much as a batch of a thousand rows. Only the workers a read woke poll after it. */
#define SPIN_NS 20000

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Poll while *word is (same) or is not (!same) v, and stop is not set, for up to
 * SPIN_NS. */
static void spin_while(const unsigned long *word, unsigned long v, int same)
{
    long long until = 0;
    for (int k = 0;; k++) {
        if ((__atomic_load_n(word, __ATOMIC_ACQUIRE) == v) != same ||
            __atomic_load_n(&stopping, __ATOMIC_ACQUIRE))
            return;
        if ((k & 63) == 0) {
            long long t = now_ns();
            if (until == 0)
                until = t + SPIN_NS;
            else if (t > until)
                return;
        }
        relax();
    }
}

static void *worker(void *arg)
{
    int w = (int)(intptr_t)arg;
    Worker *me = &workers[w];
    unsigned long seen = 0;
    pthread_mutex_lock(&pool_lock);
    for (;;) {
        if (!stopping && me->go == seen) { /* poll a while, unlocked, before sleeping */
            pthread_mutex_unlock(&pool_lock);
            spin_while(&me->go, seen, 1);
            pthread_mutex_lock(&pool_lock);
        }
        while (!stopping && me->go == seen)
            pthread_cond_wait(&me->wake, &pool_lock);
        if (me->go == seen) /* told to stop, no part pending */
            break;
        seen = me->go;
        Part p = me->part;
        pthread_mutex_unlock(&pool_lock);
        /* (a part the read took back is left: its read may have returned) */
        int mine = claim(me, seen);
        if (mine)
            p.work(p.ctx, w + 1, p.lo, p.hi);
        pthread_mutex_lock(&pool_lock);
        if (mine) {
            __atomic_store_n(&me->done, seen, __ATOMIC_RELEASE);
            pthread_cond_broadcast(&pool_done);
        }
    }
    pthread_mutex_unlock(&pool_lock);
    return NULL;
}

/* At interpreter exit: every worker woken, told to stop, and joined (one busy with a
 * part of a read still running, on a daemon thread, finishes it first). */
static void pool_stop(void)
{
    pthread_mutex_lock(&pool_lock);
    __atomic_store_n(&stopping, 1, __ATOMIC_RELEASE);
    int n = nworkers;
    for (int w = 0; w < n; w++)
        pthread_cond_signal(&workers[w].wake);
    pthread_mutex_unlock(&pool_lock);
    for (int w = 0; w < n; w++)
        pthread_join(workers[w].tid, NULL);
}

/* In a forked child: none of the parent's workers exist; the locks and conditions are
 * made anew (another parent thread may have held one at the fork). */
static void pool_forked(void)
{
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    pool_use = pool_lock = m;
    pool_done = c;
    nworkers = 0;
}

/* Workers up to `want` (with pool_lock held): fewer when a thread cannot be made. They
 * take no asynchronous signal (SIGINT and the like stay with the threads Python
 * knows); the faults a copy raises (SIGBUS, SIGSEGV) are synchronous, delivered to the
 * faulting thread whatever its mask, and reach the guard's handler there. */
static void pool_grow(int want)
{
    sigset_t all, before;
    sigfillset(&all);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    int masked = pthread_sigmask(SIG_BLOCK, &all, &before) == 0;
    while (nworkers < want) {
        Worker *w = &workers[nworkers];
        pthread_cond_t c = PTHREAD_COND_INITIALIZER;
        w->wake = c;
        w->go = w->claim = w->done = 0;
        if (pthread_create(&w->tid, NULL, worker, (void *)(intptr_t)nworkers) != 0)
            break;
        nworkers++;
    }
    if (masked)
        pthread_sigmask(SIG_SETMASK, &before, NULL);
}

void split_run(int parts, Py_ssize_t r, void (*work)(void *ctx, int k, Py_ssize_t lo, Py_ssize_t hi),
               void *ctx)
{
    Part part[SPLIT_MAX];
    if (parts > SPLIT_MAX)
        parts = SPLIT_MAX;
    Py_ssize_t each = r / parts, more = r % parts; /* the first `more` take one row more */
    for (int k = 0; k < parts; k++) {
        Py_ssize_t lo = each * k + (k < more ? k : more);
        part[k] = (Part){work, ctx, lo, lo + each + (k < more)};
    }
    int helped = 0; /* parts 1 .. helped handed to the pool's workers */
    int pooled = parts > 1 && pthread_mutex_trylock(&pool_use) == 0;
    if (pooled) {
        pthread_mutex_lock(&pool_lock);
        if (!stopping) {
            pool_grow(parts - 1);
            helped = nworkers < parts - 1 ? nworkers : parts - 1;
        }
        for (int w = 0; w < helped; w++) {
            Worker *wk = &workers[w];
            wk->part = part[w + 1];
            /* atomic: a worker may still be claiming its last part, one the read took back */
            __atomic_store_n(&wk->claim, wk->go + 1, __ATOMIC_RELEASE);
            __atomic_store_n(&wk->go, wk->go + 1, __ATOMIC_RELEASE); /* (polled unlocked) */
            pthread_cond_signal(&wk->wake);
        }
        pthread_mutex_unlock(&pool_lock);
    }
    for (int k = 0; k < parts; k++) /* part 0, and those no worker was handed */
        if (k == 0 || k > helped)
            work(ctx, k, part[k].lo, part[k].hi);
    if (pooled) {
        int waits = 0;
        char theirs[SPLIT_MAX];
        for (int w = 0; w < helped; w++) { /* parts not started yet: copied here */
            theirs[w] = !claim(&workers[w], workers[w].go);
            if (!theirs[w])
                work(ctx, w + 1, part[w + 1].lo, part[w + 1].hi);
            waits |= theirs[w];
        }
        for (int w = 0; waits && w < helped; w++) { /* the parts the workers claimed */
            if (!theirs[w])
                continue;
            unsigned long go = workers[w].go;
            spin_while(&workers[w].done, go, 0); /* polled a while, then slept on */
            pthread_mutex_lock(&pool_lock);
            while (__atomic_load_n(&workers[w].done, __ATOMIC_ACQUIRE) != go)
                pthread_cond_wait(&pool_done, &pool_lock);
            pthread_mutex_unlock(&pool_lock);
        }
        pthread_mutex_unlock(&pool_use);
    }
}

int split_ready(void)
{
    if (pthread_atfork(NULL, NULL, pool_forked) != 0 || Py_AtExit(pool_stop) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "exactbatch._core: could not register the "
                                            "copy threads' fork and exit hooks");
        return -1;
    }
    return 0;
}
