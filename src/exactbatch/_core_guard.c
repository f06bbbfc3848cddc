/* The fault guard (see _core_guard.h): one handler for SIGBUS and SIGSEGV, and one
 * sigsetjmp, over whatever set of ranges the copy names. */
#include "_core_guard.h"

#include <setjmp.h>
#include <signal.h>

/* Set by a thread while it runs a guarded copy; read by the handler on the same thread
 * (the kernel delivers a fault to the thread that faulted). */
static _Thread_local sigjmp_buf *guard_jump;
static _Thread_local const GuardRange *guard_ranges;
static _Thread_local Py_ssize_t guard_nranges;
static _Thread_local Py_ssize_t guard_hit; /* the range a fault read, for guard_run */
static struct sigaction guard_action;      /* on_fault, as installed */
/* The handler each of ours displaced, chained to for faults not ours: [0] SIGBUS, [1] SIGSEGV. */
static struct sigaction chained[2];
/* Set while this thread runs the chained handler (it may send the signal back to us). */
static _Thread_local int chaining;

/* End the process as the signal's default action does: reinstate it and raise again. */
static void default_action(int sig)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

/* The range of this thread's guarded copy that holds address a, or -1 (reads only:
 * the ranges stay while the copy runs). */
static Py_ssize_t range_of(const char *a)
{
    for (Py_ssize_t k = 0; k < guard_nranges; k++)
        if (a >= guard_ranges[k].lo && a < guard_ranges[k].hi)
            return k;
    return -1;
}

static void on_fault(int sig, siginfo_t *info, void *ctx)
{
    sigjmp_buf *jb = guard_jump;
    /* si_code > 0: raised by the kernel for a memory access (not kill/raise). */
    if (jb != NULL && info->si_code > 0 &&
        (guard_hit = range_of((const char *)info->si_addr)) >= 0) {
        guard_jump = NULL;
        siglongjmp(*jb, 1);
    }
    /* Not ours. Raised again from inside the handler we chained to (faulthandler does,
     * after its report, and reaches us when it was installed after us): the default. */
    if (chaining && info->si_code <= 0) {
        chaining = 0;
        default_action(sig);
        return;
    }
    const struct sigaction *old = &chained[sig == SIGBUS ? 0 : 1];
    if (old->sa_flags & SA_SIGINFO) {
        chaining = 1;
        old->sa_sigaction(sig, info, ctx);
        chaining = 0;
    } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        chaining = 1;
        old->sa_handler(sig);
        chaining = 0;
        /* Told no address, it cannot have repaired a real fault (CPython's handler only
         * sets a flag for Python code to see later): returning would fault again,
         * forever. */
        if (info->si_code > 0)
            default_action(sig);
    } else if (old->sa_handler == SIG_DFL || info->si_code > 0) {
        default_action(sig); /* a fault cannot be ignored */
    }
}

/* Make on_fault the handler of SIGBUS and SIGSEGV, keeping the handler it displaces
 * as the one to chain to. Called with the GIL held (so never on two threads at once):
 * a handler installed after ours (faulthandler.enable(), signal.signal, another
 * library's sigaction) would otherwise receive our copies' faults and end the
 * process, or return into the faulting copy forever. When nothing changed it costs one
 * query (a system call): of SIGBUS, the signal a truncated file raises, and of SIGSEGV
 * too when SIGBUS was displaced (handlers come in pairs; a copy from a mapping it
 * holds cannot raise SIGSEGV, so that one is defence only). SA_NODEFER: the signal
 * stays unblocked inside the handler, so after siglongjmp the mask is as before and
 * sigsetjmp need not save it (a system call). sigaction cannot fail here: it fails
 * only for a signal number it does not know, SIGKILL or SIGSTOP, or a bad address. */
void guard_install(void)
{
    static const int sigs[2] = {SIGBUS, SIGSEGV};
    struct sigaction cur;
    if (guard_action.sa_sigaction == NULL) { /* the first call: both are checked */
        guard_action.sa_sigaction = on_fault;
        guard_action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
        sigemptyset(&guard_action.sa_mask);
    } else {
        sigaction(SIGBUS, NULL, &cur);
        if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_fault)
            return;
    }
    for (int i = 0; i < 2; i++) {
        sigaction(sigs[i], NULL, &cur);
        if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_fault)
            continue;
        chained[i] = cur; /* on_fault is not installed: no handler reads it now */
        sigaction(sigs[i], &guard_action, NULL);
    }
}

int guard_run(const GuardRange *ranges, Py_ssize_t n, void (*copy)(void *), void *arg,
              Py_ssize_t *hit)
{
    sigjmp_buf jb;
    if (sigsetjmp(jb, 0)) { /* on_fault jumped here (it cleared guard_jump) */
        guard_nranges = 0;
        if (hit != NULL)
            *hit = guard_hit;
        return -1;
    }
    guard_ranges = ranges;
    guard_nranges = n;
    guard_jump = &jb;
    copy(arg);
    guard_jump = NULL;
    guard_nranges = 0;
    return 0;
}
