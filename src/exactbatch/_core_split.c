/* One copy on several threads (see _core_split.h). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "_core_split.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
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
        int c = cores();
        if (k > c)
            k = c;
    }
    if (k > r)
        k = r;
    if (k > SPLIT_MAX)
        k = SPLIT_MAX;
    return k < 1 ? 1 : (int)k;
}

/* The pool: up to SPLIT_MAX - 1 threads, made as reads first need them and kept, each
 * asleep until a read hands it its part (a thread made per read cost as much as a
 * batch of a few thousand rows). One read uses the pool at a time; a read that finds
 * it taken copies on its own thread (the cores are busy anyway). The threads are
 * joined at interpreter exit (Py_AtExit), and a forked child starts with none (the
 * pool is reset by pthread_atfork: the parent's threads do not exist there). */
typedef struct {
    void (*work)(void *, int, Py_ssize_t, Py_ssize_t);
    void *ctx;
    Py_ssize_t lo, hi;
} Part;

static pthread_mutex_t pool_use = PTHREAD_MUTEX_INITIALIZER;  /* held by the read using it */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER; /* the fields below */
static pthread_cond_t pool_wake = PTHREAD_COND_INITIALIZER;   /* a job, or stop */
static pthread_cond_t pool_done = PTHREAD_COND_INITIALIZER;   /* remaining reached 0 */
static pthread_t workers[SPLIT_MAX];
static unsigned long seen_at_start[SPLIT_MAX]; /* the job count when worker w was made */
static int nworkers, stopping;
static unsigned long jobs;        /* jobs handed out so far: a worker waits for the next */
static const Part *job_parts;     /* the job's parts: worker w runs part w + 1 */
static int job_count, remaining;  /* its parts; those not finished by the workers */

static void *worker(void *arg)
{
    int w = (int)(intptr_t)arg;
    pthread_mutex_lock(&pool_lock);
    unsigned long seen = seen_at_start[w];
    for (;;) {
        while (!stopping && jobs == seen)
            pthread_cond_wait(&pool_wake, &pool_lock);
        if (stopping)
            break;
        seen = jobs;
        if (w + 1 >= job_count)
            continue; /* (a job of fewer parts: nothing for this one) */
        const Part *p = &job_parts[w + 1];
        pthread_mutex_unlock(&pool_lock);
        p->work(p->ctx, w + 1, p->lo, p->hi);
        pthread_mutex_lock(&pool_lock);
        if (--remaining == 0)
            pthread_cond_signal(&pool_done);
    }
    pthread_mutex_unlock(&pool_lock);
    return NULL;
}

/* At interpreter exit: every worker woken, told to stop, and joined (one busy with a
 * part of a read still running, on a daemon thread, finishes it first). */
static void pool_stop(void)
{
    pthread_mutex_lock(&pool_lock);
    stopping = 1;
    pthread_cond_broadcast(&pool_wake);
    int n = nworkers;
    pthread_mutex_unlock(&pool_lock);
    for (int w = 0; w < n; w++)
        pthread_join(workers[w], NULL);
}

/* In a forked child: none of the parent's workers exist; the locks and conditions are
 * made anew (another parent thread may have held one at the fork). */
static void pool_forked(void)
{
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    pool_use = pool_lock = m;
    pool_wake = pool_done = c;
    nworkers = job_count = remaining = 0;
    job_parts = NULL;
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
        seen_at_start[nworkers] = jobs;
        if (pthread_create(&workers[nworkers], NULL, worker, (void *)(intptr_t)nworkers) != 0)
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
    int helped = 0; /* parts 1 .. helped run on the pool's workers */
    int pooled = parts > 1 && pthread_mutex_trylock(&pool_use) == 0;
    if (pooled) {
        pthread_mutex_lock(&pool_lock);
        if (!stopping) {
            pool_grow(parts - 1);
            helped = nworkers < parts - 1 ? nworkers : parts - 1;
        }
        if (helped > 0) {
            job_parts = part;
            job_count = helped + 1;
            remaining = helped;
            jobs++;
            pthread_cond_broadcast(&pool_wake);
        }
        pthread_mutex_unlock(&pool_lock);
    }
    for (int k = 0; k < parts; k++) /* part 0, and those no worker took */
        if (k == 0 || k > helped)
            work(ctx, k, part[k].lo, part[k].hi);
    if (pooled) {
        pthread_mutex_lock(&pool_lock);
        while (remaining > 0)
            pthread_cond_wait(&pool_done, &pool_lock);
        job_parts = NULL;
        pthread_mutex_unlock(&pool_lock);
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
