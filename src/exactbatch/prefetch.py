"""Prefetch: batches prepared ahead on a background thread.

While the training step runs, a thread claims and reads the next batches
(NumPy gathers, positional reads and Parquet decoding release the GIL, so
the two overlap), keeping at most ``depth`` ready. Batches prepared but
not handed out are not consumed: the loader counts a batch when the
consumer receives it. An exception raised while preparing reaches the
consumer at the batch where it happened; stopping early (``close()``, or
dropping the iterator) stops the thread.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Generic, Protocol, TypeVar

__all__ = ["MAX_DEPTH", "Hinter", "Prefetcher", "ReadAhead", "cores", "shut"]

# The most batches (or groups) a loader may prepare ahead: each place holds a batch, and
# more than this is memory exhausted, not speed (prefetch=2**40 is refused, not tried).
MAX_DEPTH = 1024

T = TypeVar("T")
K = TypeVar("K")

_POLL = 0.05  # seconds between checks of the stop flag while the queue is full


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _End:
    """The end of a Prefetcher's results (one, ``_END``)."""

    __slots__ = ()


_END = _End()


class Prefetcher(Generic[T]):
    """Runs ``produce()`` on a thread until it returns None; ``get()`` takes results in order.

    Two C-level queues make the hand-off: the results, and one token per free
    place (the producer takes one before it puts a result, the consumer gives
    one back as it takes a result), a third of ``queue.Queue``'s cost a result.
    """

    def __init__(self, produce: Callable[[], T | None], depth: int) -> None:
        self._depth = depth
        self._queue: queue.SimpleQueue[T | _Failure | _End] = queue.SimpleQueue()
        self._room: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(depth):
            self._room.put(None)
        self._stop = threading.Event()
        self._unsent: T | None = None  # a result made after close() began: close() returns it
        self._thread = threading.Thread(
            target=self._run, args=(produce,), name="exactbatch-prefetch", daemon=True
        )
        self._thread.start()

    def _put(self, item: T | _Failure | _End) -> bool:
        while not self._stop.is_set():
            try:
                self._room.get(timeout=_POLL)
            except queue.Empty:
                continue
            self._queue.put(item)
            return True
        return False

    def _run(self, produce: Callable[[], T | None]) -> None:
        try:
            while not self._stop.is_set():
                item = produce()
                if item is None:
                    self._put(_END)
                    return
                if not self._put(item):
                    self._unsent = item
                    return
        except BaseException as e:  # handed to the consumer, raised there
            self._put(_Failure(e))

    def get(self) -> T | None:
        """The next result; None at the end; re-raises what ``produce`` raised."""
        item = self._queue.get()
        if isinstance(item, _End):
            self._queue.put(_END)  # stay at the end for later calls
            return None
        self._room.put(None)
        if isinstance(item, _Failure):
            raise item.error
        return item

    def ready(self) -> int:
        """Results waiting to be taken now (the end counts as one)."""
        return self._queue.qsize()

    def full(self) -> bool:
        """Are ``depth`` results waiting (the thread then waits for room)?"""
        return self._queue.qsize() >= self._depth

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the thread to end; has it? (Not on the thread
        itself, where a finalizer of what it holds may run: False there.)"""
        if self._thread is threading.current_thread():
            return False
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def close(self) -> list[T]:
        """Stop the thread; return the results it prepared and nobody took, in order
        (all of them, once the thread has ended)."""
        self._stop.set()
        left: list[T | _Failure | _End] = []
        while True:
            try:
                left.append(self._queue.get_nowait())
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join()
            while True:  # put while we drained
                try:
                    left.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if self._unsent is not None:
                left.append(self._unsent)
                self._unsent = None
        return [item for item in left if not isinstance(item, (_End, _Failure))]

    def stop(self) -> None:
        """Ask the thread to stop, without waiting for it (safe in a finalizer)."""
        self._stop.set()

    def __del__(self) -> None:
        self._stop.set()


class Hinter(Generic[K]):
    """Calls ``hint(k)`` for each ``k`` of ``keys`` on a thread of its own, at most
    ``ahead`` keys past those the reader has taken (:meth:`taken`).

    Hints (``posix_fadvise(WILLNEED)``) can block while the kernel queues
    the reads they start; on a thread of their own they keep the disk busy
    without holding up the reads. A failed hint stops the hints, never the
    reads: hints only advise.
    """

    def __init__(self, hint: Callable[[K], object], keys: Iterable[K], ahead: int) -> None:
        self._room = threading.Semaphore(ahead)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(hint, keys), name="exactbatch-hints", daemon=True
        )
        self._thread.start()

    def _run(self, hint: Callable[[K], object], keys: Iterable[K]) -> None:
        for k in keys:
            while not self._room.acquire(timeout=_POLL):
                if self._stop.is_set():
                    return
            if self._stop.is_set():
                return
            try:
                hint(k)
            except (OSError, ValueError):  # the file closed, or hints unsupported
                return

    def taken(self) -> None:
        """The reader took one key: the hints may go one further."""
        self._room.release()

    def stop(self) -> None:
        """Ask the thread to stop, without waiting for it."""
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


class ReadAhead(Generic[K, T]):
    """``read(k)`` for each ``k`` of ``keys``, up to ``depth`` at once on threads of
    its own; :meth:`get` returns the results in the order of ``keys``.

    At most ``depth`` keys are being read or waiting to be taken at any time: a
    new read starts as the reader takes a result (:meth:`get`), so, with the
    result the reader holds, at most ``depth + 1`` results are alive. An
    exception raised by ``read(k)`` is raised by the :meth:`get` that would have
    returned its result; reads started past it are dropped. ``taken``, if given,
    is called (on the reader's thread) for each key as its read starts. The
    threads are daemons, as :class:`Prefetcher`'s: stopped, they end by
    themselves after the read under way, and the interpreter's exit waits for
    none of them.
    """

    def __init__(
        self,
        read: Callable[[K], T],
        keys: Iterable[K],
        depth: int,
        taken: Callable[[], object] | None = None,
    ) -> None:
        self._read, self._keys, self._taken = read, iter(keys), taken
        self._pending: deque[Future[T]] = deque()
        self._jobs: queue.SimpleQueue[tuple[K, Future[T]] | None] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, name="exactbatch-read", daemon=True)
            for _ in range(depth)
        ]
        for t in self._threads:
            t.start()
        for _ in range(depth):
            self._start()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None or self._stop.is_set():
                return
            key, done = job
            try:
                done.set_result(self._read(key))
            except BaseException as e:  # handed to the reader, raised there
                done.set_exception(e)
            del job, done  # a result held here would outlive its get()

    def _start(self) -> None:
        for k in self._keys:
            if self._taken is not None:
                self._taken()
            done: Future[T] = Future()
            self._pending.append(done)
            self._jobs.put((k, done))
            return

    def get(self) -> T | None:
        """The next result (raised: the exception of its read); None after the last."""
        if not self._pending:
            return None
        done = self._pending.popleft()
        self._start()  # before the wait: the reads keep ``depth`` keys busy
        return done.result()

    def stop(self) -> None:
        """Drop the reads not begun and let the threads end, without waiting for them."""
        self._stop.set()
        self._pending.clear()
        for _ in self._threads:
            self._jobs.put(None)

    def close(self) -> None:
        """Drop the reads not begun and wait for those under way to end."""
        self.stop()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()


def cores() -> int:
    """The cores this process may run on (its CPU affinity, where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


class Worker(Protocol):
    """What :func:`shut` stops: a :class:`Prefetcher`, :class:`Hinter` or :class:`ReadAhead`."""

    def stop(self) -> None: ...

    def close(self) -> object: ...


def shut(*workers: Worker | None, wait: bool) -> None:
    """Stop ``workers`` (:class:`Prefetcher` s, :class:`Hinter` s; None skipped), and
    wait for their threads only if ``wait``. A generator closed early (``GeneratorExit``)
    must not wait: the garbage collector closes it on whatever thread made the
    collection, which may be the very thread it would wait for, or one that thread
    waits for; stopped threads end by themselves at their next step."""
    for w in workers:
        if w is not None:
            if wait:
                w.close()
            else:
                w.stop()
