"""What guards copies from an .ndf file's memory map: the read lease (the pure NumPy
path, Linux) and the compiled core's fault guard.

A file truncated while rows are copied from its mapping would end the
reader with SIGBUS. On the pure path copies are made under a read lease: a
truncating or writing process waits until the copy is done, and the next
read is a clear ``NdfError``. These tests check the lease's rules directly
(held by the first copier, released by the last, never held off a waiting
writer, a fallback to positional reads while the file is open for writing)
and, in child processes, that truncations at random instants of a tight
shuffled read loop are always an ``NdfError``, never a SIGBUS. The compiled
core's guard is a signal handler: it must hold even when another handler is
installed after it (faulthandler, ``signal.signal``, a C library's
``sigaction``), and faults that are not its own must still end the process.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from helpers import TRUNCATE_LOOP, run_compiled

import exactbatch.ndf.guard as guard
from exactbatch import NdfError, kernels, open_ndf, save_ndf

needs_lease = pytest.mark.skipif(
    guard.F_SETLEASE is None, reason="read leases are Linux-only (elsewhere the copy is unguarded)"
)
needs_core = pytest.mark.skipif(
    kernels.backend() != "compiled", reason="the compiled core is not in use"
)

F_RDLCK = getattr(guard.fcntl, "F_RDLCK", 0)
F_UNLCK = getattr(guard.fcntl, "F_UNLCK", 2)


def _lease_type(f) -> int:
    """What this open file's lease is now: F_RDLCK held, F_UNLCK none (or being broken)."""
    return guard.fcntl.fcntl(f._handle().fd, guard.fcntl.F_GETLEASE)


def _traceable(path, n: int = 5000):
    i = np.arange(n, dtype=np.float64)
    save_ndf(path, (np.column_stack([i, 3 * i + 0.5]), -i))


def _check_rows(x, y, idx):
    assert np.array_equal(x[:, 0], idx) and np.array_equal(x[:, 1], 3 * idx + 0.5)
    assert np.array_equal(y[:, 0], -idx)


@pytest.fixture
def f(tmp_path, numpy_backend):
    """A file read on the pure NumPy path, the one that copies under the lease."""
    _traceable(tmp_path / "a.ndf")
    with open_ndf(tmp_path / "a.ndf") as f:
        yield f


@needs_lease
def test_a_local_file_is_guarded_and_the_lease_is_held_only_during_a_copy(f):
    assert f.guarded is True
    assert _lease_type(f) == F_UNLCK  # not held between reads: writers never wait on an idle loader
    idx = np.random.default_rng(0).permutation(f.n)[:1000]  # scattered: copied from the map
    x, y = f.read_rows(idx)
    _check_rows(x, y, idx)
    assert _lease_type(f) == F_UNLCK


@pytest.mark.parametrize(
    "read",
    [
        pytest.param(lambda f: f.read_rows(np.arange(100, 300)), id="a run of rows"),
        pytest.param(lambda f: f.read_rows(np.array([4000, 7, 3000, 9])), id="few runs"),
        pytest.param(lambda f: f.read_block_into(100, np.empty((200, 3))), id="a block"),
        pytest.param(
            lambda f: f.read_rows(np.random.default_rng(0).permutation(f.n)[:1000]),
            id="scattered, no lease",
        ),
    ],
)
def test_a_read_racing_a_truncation_is_an_error_never_the_pages_zeroed_tail(f, monkeypatch, read):
    """The kernel shrinks a truncated file's size, then zeroes the tail of its last page:
    a positional read (or, unleased, a copy from the map) caught between the two hands
    back zeros for rows that were there. The check after the read must see the shrink.
    Simulated: the truncation lands during the read, which returns zeros."""
    # unleased: what happens while a writer holds the file open
    monkeypatch.setattr(guard.Lease, "acquire", lambda self: None)
    real = os.preadv

    def racing(fd, buffers, offset):
        got = real(fd, buffers, offset)
        os.truncate(f.path, 28 + 24 * (f.n - 1))  # the last row is gone: reads go on
        for buf in buffers:
            np.frombuffer(buf, dtype=np.uint8)[:got] = 0  # what the racing read returned
        return got

    monkeypatch.setattr(os, "preadv", racing)
    with pytest.raises(NdfError, match="changed while open"):
        read(f)


@needs_lease
def test_the_first_copier_takes_the_lease_and_the_last_releases_it(f):
    lease = f._handle().lease
    assert lease.acquire() is True
    assert _lease_type(f) == F_RDLCK
    assert lease.acquire() is True  # a second thread's copy shares it
    lease.release()
    assert _lease_type(f) == F_RDLCK, "released while a copy still runs"
    lease.release()
    assert _lease_type(f) == F_UNLCK


@needs_lease
def test_a_truncation_waits_for_the_copy_then_the_next_read_is_an_error(tmp_path, f):
    lease = f._handle().lease
    assert lease.acquire() is True  # a copy is running
    done = threading.Event()
    t = threading.Thread(target=lambda: (os.truncate(f.path, 28), done.set()), daemon=True)
    t.start()
    # The truncation waits in the kernel for the lease (up to lease-break-time, 45 s by
    # default); the lease now reports the break it waits for.
    deadline = time.monotonic() + 10
    while _lease_type(f) != F_UNLCK and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _lease_type(f) == F_UNLCK, "the truncation did not ask for the lease"
    assert not done.is_set(), "the truncation did not wait for the copy"
    assert os.path.getsize(f.path) > 28
    # A copy starting now must not hold the writer off: it reads positionally instead.
    assert lease.acquire() is None
    lease.release()
    t.join(timeout=30)
    assert done.is_set() and os.path.getsize(f.path) == 28
    idx = np.random.default_rng(1).permutation(f.n)[:500]
    with pytest.raises(NdfError, match="changed while open"):
        f.read_rows(idx)
    assert _lease_type(f) == F_UNLCK  # the failed read let its lease go


@needs_lease
def test_a_file_open_for_writing_is_read_with_positional_reads(f):
    """No lease while a writer has the file open: scattered rows come by positional
    reads (which cannot fault), and they are right."""
    with open(f.path, "r+b"):
        assert f._handle().lease.acquire() is None
        assert f.guarded is True
        idx = np.random.default_rng(2).permutation(f.n)[:700]
        x, y = f.read_rows(np.concatenate([idx, idx[:5]]))  # repeats too
        _check_rows(x, y, np.concatenate([idx, idx[:5]]))
    idx = np.random.default_rng(3).permutation(f.n)[:700]
    _check_rows(*f.read_rows(idx), idx)  # writer gone: the map (and the lease) again


@needs_lease
def test_where_the_os_gives_no_lease_the_copy_is_unguarded_and_right(f, monkeypatch):
    lease = f._handle().lease
    monkeypatch.setattr(lease, "works", False)
    assert f.guarded is False
    idx = np.random.default_rng(4).permutation(f.n)[:900]
    _check_rows(*f.read_rows(idx), idx)


@needs_lease
def test_a_lease_refused_for_another_reason_is_never_asked_again(f, monkeypatch):
    """EACCES (not the owner), EINVAL (a filesystem without leases): unguarded from then on."""
    lease = f._handle().lease
    calls = []

    def refuse(fd, cmd, arg=0):
        if cmd == guard.F_SETLEASE:
            calls.append(arg)
            raise PermissionError(13, "not the owner")
        return 0

    monkeypatch.setattr(guard.fcntl, "fcntl", refuse)
    assert lease.acquire() is False
    assert lease.acquire() is False
    assert calls == [F_RDLCK]
    monkeypatch.undo()
    idx = np.random.default_rng(5).permutation(f.n)[:300]
    _check_rows(*f.read_rows(idx), idx)


def _child(script: str, args: list, meanwhile, pure: bool = True):
    """Run ``script`` in a child Python (on the pure NumPy path unless told); once it
    prints "ready", run ``meanwhile()``; return the finished process, its stdout and
    stderr (a child left over is killed)."""
    p = subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "EXACTBATCH_PURE": "1" if pure else "0"},
    )
    try:
        assert p.stdout.readline().strip() == "ready"
        meanwhile()
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    return p, out, err


RACER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from exactbatch import DataLoader, NdfError, open_ndf
    path, prefetch = sys.argv[1], int(sys.argv[2])
    loader = DataLoader(open_ndf(path), batch_size=2048, shuffle=True, seed=1, prefetch=prefetch)
    print("ready", flush=True)
    try:
        while True:
            for xb, yb in loader:  # x = (i, 3i + 1/2), y = -i: any other value is garbage
                i = xb[:, 0]
                if not (np.array_equal(xb[:, 1], 3 * i + 0.5) and np.array_equal(yb[:, 0], -i)):
                    sys.exit(3)
    except NdfError as e:
        assert path in str(e)
        print("ndferror", flush=True)
    """
)


@pytest.mark.parametrize("backend", ["numpy", "compiled"])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_truncations_at_random_instants_of_shuffled_reads_are_errors_never_sigbus(
    tmp_path, prefetch, backend
):
    """Unguarded, about 4 in 10 of these trials end in SIGBUS (bench/reliability.py
    changes measures it); under the lease (the pure NumPy path) or the compiled
    core's fault guard every one is an NdfError."""
    if backend == "compiled" and kernels.backend() != "compiled":
        pytest.skip("the compiled core is not built")
    if backend == "numpy" and guard.F_SETLEASE is None:
        pytest.skip("read leases are Linux-only")
    pristine = tmp_path / "pristine.ndf"
    _traceable(pristine, n=100_000)
    data = pristine.read_bytes()
    rng = np.random.default_rng(11)
    outcomes = []
    for _ in range(6):
        live = tmp_path / "live.ndf"
        live.write_bytes(data)

        def truncate(live=live):
            time.sleep(float(rng.uniform(0.0, 0.05)))
            os.truncate(live, int(rng.integers(28, len(data))))

        p, out, err = _child(RACER, [live, prefetch], truncate, pure=backend == "numpy")
        assert p.returncode != -signal.SIGBUS, "the reader was killed by SIGBUS"
        assert p.returncode == 0 and out.strip() == "ndferror", (p.returncode, out, err[-2000:])
        outcomes.append(out.strip())
    assert outcomes == ["ndferror"] * 6


READER = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from exactbatch import open_ndf
    f = open_ndf(sys.argv[1])
    rng = np.random.default_rng(0)
    print("ready", flush=True)
    reads = 0
    while not os.path.exists(sys.argv[2]):
        idx = rng.integers(0, f.n, 256)
        x, y = f.read_rows(idx)
        assert np.array_equal(y[:, 0], -idx)
        reads += 1
    print("ok", reads, flush=True)
    """
)


@needs_lease
def test_writers_waiting_for_the_lease_never_signal_the_reader_to_death(tmp_path):
    """A writer opening the file during a copy makes the kernel signal the lease's holder:
    SIGIO by default, which would kill the reader. Each lease asks for SIGURG instead
    (ignored by default; a release resets it, so every acquire sets it again)."""
    path, stop = tmp_path / "a.ndf", tmp_path / "stop"
    _traceable(path, n=50_000)

    def write_opens():
        for _ in range(2000):  # each open waits for any copy in flight, then goes on
            os.close(os.open(path, os.O_WRONLY))
        stop.touch()

    p, out, err = _child(READER, [path, stop], write_opens)
    assert p.returncode != -signal.SIGIO, "the reader was killed by SIGIO"
    assert p.returncode == 0 and out.startswith("ok"), (p.returncode, out, err[-2000:])


@needs_lease
def test_a_forked_child_holds_a_lease_of_its_own(f):
    """Parent and child share the inherited open file; the child's copies take their
    lease on a new open file of the same inode, so neither ends the other's lease."""
    lease = f._handle().lease
    assert lease.acquire() is True  # the parent is mid-copy when it forks
    parent_fd = lease.fd
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running pytest's teardown
        try:
            child = f._handle().lease
            ok = child.fd != parent_fd and child.holders == 0
            ok = ok and child.acquire() is True
            child.release()
            idx = np.arange(0, f.n, 7)[::-1].copy()
            x, y = f.read_rows(idx)
            ok = ok and np.array_equal(y[:, 0], -idx)
            os.write(w, b"ok" if ok else b"bad")
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 10) == b"ok"
    os.waitpid(pid, 0)
    assert _lease_type(f) == F_RDLCK, "the child's release ended the parent's lease"
    lease.release()
    assert _lease_type(f) == F_UNLCK


@needs_lease
def test_the_fork_hook_gives_each_lease_a_new_open_file_of_its_own(f, monkeypatch):
    """What a forked child runs first (``os.register_at_fork``), run here in-process
    (the forked test above reports only ok or bad): every lease of the process gets a
    fresh lock, no holders, and a new read-only descriptor of the same file, closed on
    exec and closed with the lease; it works on its own. Without /proc (the new open
    fails) the lease stops working: copies are unguarded, never sharing the parent's."""
    lease = f._handle().lease
    assert lease.acquire() is True  # the parent was mid-copy
    old_fd, old_lock = lease.fd, lease.lock
    monkeypatch.setattr(guard, "_LEASES", guard.weakref.WeakSet([lease]))
    guard._leases_after_fork()
    new_fd = lease.fd
    assert new_fd != old_fd and lease.holders == 0 and lease.works
    assert lease.lock is not old_lock and not lease.lock.locked()
    assert os.path.samestat(os.fstat(new_fd), os.fstat(old_fd))
    assert guard.fcntl.fcntl(new_fd, guard.fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    assert not os.get_inheritable(new_fd)
    assert lease.acquire() is True and lease.holders == 1
    assert guard.fcntl.fcntl(new_fd, guard.fcntl.F_GETLEASE) == F_RDLCK
    lease.release()
    guard.fcntl.fcntl(old_fd, guard.F_SETLEASE, F_UNLCK)  # the parent's copy ends
    monkeypatch.setattr(guard.os, "open", lambda *a, **k: (_ for _ in ()).throw(OSError()))
    lease._after_fork()
    assert (lease.fd, lease.holders, lease.works) == (new_fd, 0, False)
    assert lease.acquire() is False
    monkeypatch.undo()
    same = os.fstat(new_fd)
    del lease
    f.close()
    gc.collect()
    try:  # closed with its lease (its number may be another file's by now)
        now = os.fstat(new_fd)
    except OSError:
        now = None
    assert now is None or not os.path.samestat(now, same)


# -- the compiled core's fault guard, displaced -----------------------------------------------


@needs_core
@pytest.mark.parametrize(
    "how, ends",
    [
        ("faulthandler", -signal.SIGSEGV),  # it reports the fault, then the default ends it
        ("signal", -signal.SIGSEGV),  # CPython's handler only sets a flag: the default
        ("sigaction", signal.SIGSEGV),  # libc's _exit(SIGSEGV) received the fault
    ],
)
def test_the_guard_holds_when_a_handler_is_installed_after_it(tmp_path, how, ends):
    """A handler installed after the first open (faulthandler.enable(), signal.signal, a
    C library's sigaction) displaced the guard: a truncation during a copy then ended the
    process ("Fatal Python error: Bus error"), hung it (a Python handler returns into the
    faulting copy), or went to the other handler. The guard is put back at every guarded
    read, chaining to that handler: every truncation is an NdfError naming the file (or
    the part), and a fault outside a copy still ends the process as that handler (or the
    default) does, never a hang (helpers.TRUNCATE_LOOP, in a child process)."""
    r = run_compiled(TRUNCATE_LOOP, tmp_path, "8", "file,dataset", how, timeout=60)
    want = ["file 8", "dataset 8"] + ([f"sent [{int(signal.SIGBUS)}]"] * (how == "signal"))
    assert r.stdout.splitlines() == want, (r.returncode, r.stdout, r.stderr[-2000:])
    assert r.returncode == ends, (r.returncode, r.stderr[-2000:])
    if how == "faulthandler":
        assert "Fatal Python error: Segmentation fault" in r.stderr
        assert r.stderr.count("Fatal Python error") == 1  # reported once, not in a loop


_KEPT_PER_SIGNAL = textwrap.dedent(
    """
    import ctypes, os, signal, sys
    from exactbatch import open_ndf, save_ndf
    sent = []
    signal.signal(signal.SIGBUS, lambda s, frame: sent.append(s))
    signal.signal(signal.SIGSEGV, signal.SIG_IGN)
    save_ndf(sys.argv[1], [[1.0]])
    f = open_ndf(sys.argv[1])  # installs the guard over both
    os.kill(os.getpid(), signal.SIGBUS)  # sent, not a fault: to SIGBUS's handler
    os.kill(os.getpid(), signal.SIGSEGV)  # sent, and SIGSEGV was ignored: still ignored
    print("sent", sent, flush=True)
    ctypes.string_at(16)  # a fault cannot be ignored: returning would fault forever
    print("survived", flush=True)
    """
)


@needs_core
def test_the_handlers_the_guard_displaced_are_kept_per_signal(tmp_path):
    """SIGBUS's handler (CPython's, for a Python function) and SIGSEGV's (ignored) differ:
    a signal sent, not a fault, goes to its own signal's handler, an ignored one stays
    ignored, and a real fault whose handler was SIG_IGN ends the process by the default
    action instead of faulting again forever."""
    r = run_compiled(_KEPT_PER_SIGNAL, tmp_path / "one.ndf")
    assert r.stdout.splitlines() == [f"sent [{int(signal.SIGBUS)}]"], (r.stdout, r.stderr)
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stderr[-2000:])


_FAULT_OR_CHANGE = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from exactbatch import kernels, open_ndf, save_ndf
    from exactbatch.parts import parts_rows
    path, threads = sys.argv[1], int(sys.argv[2])  # threads 2: row 4000 on a pool thread
    save_ndf(path, np.arange(4096 * 16, dtype=np.float64).reshape(4096, 16))  # 32 rows a page
    f = open_ndf(path)
    rows = f.kernel_rows()
    parts = parts_rows(np.array([0, 4096], dtype=np.int64), 16, 0)
    parts.set(0, rows)
    ox, oy = np.empty((2, 16)), np.empty((2, 0))
    for reader in (rows, parts):
        reader.read(np.array([0, 4000]), ox, oy)  # the pages are mapped and read
    os.truncate(path, 28 + 128 * 2000)  # row 4000's page is gone, row 1's is not
    for idx in ([0, 4000], [0, 1]):
        for name, reader in (("file", rows), ("parts", parts)):
            try:
                reader.read(np.array(idx), ox, oy, None, threads)
            except kernels.FileChanged as e:
                print(name, idx[1], e, getattr(e, "part", "-"), flush=True)
    """
)


@needs_core
@pytest.mark.parametrize("threads", [1, 2])
def test_the_core_says_whether_a_copy_faulted_or_the_file_changed(tmp_path, threads):
    """After a truncation, a read of a row whose page is gone faults: the guard catches it
    and the read says so (a part's with the part's number); a read of rows still in the
    file copies them, and the fstat after it sees the change. On 2 threads the fault is
    raised on the pool's thread, whose own guard catches it."""
    r = run_compiled(_FAULT_OR_CHANGE, tmp_path / "f.ndf", threads)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.splitlines() == [
        "file 4000 a copy from the file's mapping faulted (truncated?) -",
        "parts 4000 a copy from a part's mapping faulted (truncated?) 0",
        "file 1 the file's size, modification time or ctime changed -",
        "parts 1 a part's size, modification time or ctime changed 0",
    ]


_RAISED_AGAIN = textwrap.dedent(
    """
    import ctypes, signal, sys
    from exactbatch import open_ndf, save_ndf
    libc = ctypes.CDLL(None)

    class Sigaction(ctypes.Structure):  # glibc's struct sigaction
        _fields_ = [
            ("handler", ctypes.c_void_p),
            ("mask", ctypes.c_ulong * (128 // ctypes.sizeof(ctypes.c_ulong))),
            ("flags", ctypes.c_int),
            ("restorer", ctypes.c_void_p),
        ]

    save_ndf(sys.argv[1], [[1.0]])
    f = open_ndf(sys.argv[1])  # the guard
    act = Sigaction(handler=ctypes.cast(getattr(libc, "raise"), ctypes.c_void_p).value)
    act.flags = 4  # SA_SIGINFO: a handler told the address, which raises the signal again
    for sig in (signal.SIGBUS, signal.SIGSEGV):
        assert libc.sigaction(sig, ctypes.byref(act), None) == 0
    f.read_rows([0])  # the guard is put back, chaining to it
    print("faulting", flush=True)
    ctypes.string_at(16)  # a fault outside any copy
    print("survived", flush=True)
    """
)


@needs_core
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's struct sigaction")
def test_a_fault_raised_again_by_the_handler_it_chains_to_ends_the_process(tmp_path):
    """A handler that gets the signal's address (SA_SIGINFO) and raises it again, with the
    guard put back over it (as a crash reporter might): the signal raised from inside it
    takes the default action at once - the process ends by the fault's signal, never
    returning into the fault to loop through both handlers."""
    r = run_compiled(_RAISED_AGAIN, tmp_path / "one.ndf", timeout=30)
    assert r.stdout.splitlines() == ["faulting"], (r.stdout, r.stderr[-2000:])
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stderr[-2000:])
