"""Block reads past the page cache: ``O_DIRECT`` where the file system allows it.

A block read (``ndf_blocks``: a few MiB of consecutive rows) of a cold file is
read with ``O_DIRECT``: the request widened to 4 KiB boundaries, read into an
aligned buffer of the reading thread's own, then the rows copied out. The disk
gets the block as large requests, and no page of it is cached only to be
thrown away (a buffered read of a file larger than memory evicts pages as it
reads). A block whose pages are mostly in the page cache already (``mincore``
on the file's mapping) is read from there, buffered, so a warm file is read as
fast as before; only cold blocks go past the cache. (A buffered read that does
not wait, ``RWF_NOWAIT``, would tell the same, but starts the kernel's
read-ahead of the block into the cache: every cold byte read twice.)

Off unless asked for (``EXACTBATCH_O_DIRECT=1`` in the environment, read at
import; :data:`ENABLED`): on the disk it was measured on, buffered reads of
blocks announced ahead (``POSIX_FADV_WILLNEED``, ``ndf_blocks``' default) kept
the disk busier than direct reads, even several at once (docs/benchmarks.md,
``bench/cold_reads.py``). When on, a loader reading several blocks at once
(``sources.passes.read_depth``) reads them on threads of its own, since direct
reads have no read-ahead of the kernel's to overlap them with batching.

It is an implementation detail: the bytes read, the errors (a file that ends
early is the same ``NdfError``, after the same size check) and the batches are
those of a buffered read. Where ``O_DIRECT`` is not available - not Linux, no
``/proc`` to open the same file again, a file system that refuses it (the open
fails with ``EINVAL``), or a read refused for its alignment - block reads stay
buffered positional reads, for good (:class:`DirectReads` is then None).

Memory: one aligned buffer of a block a reading thread, kept for the next.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import threading
import weakref
from typing import Any

import numpy as np

__all__ = [
    "ALIGN",
    "CACHED_SHARE",
    "ENABLED",
    "MIN_DIRECT_BYTES",
    "DirectReads",
    "Unsupported",
    "open_direct",
]

ALIGN = 4096  # what O_DIRECT needs of offsets, lengths and buffers (every Linux disk)
MIN_DIRECT_BYTES = 1 << 20  # smaller reads stay buffered: a few rows are not worth a disk trip
ENABLED = os.environ.get("EXACTBATCH_O_DIRECT", "").strip().lower() in ("1", "true", "yes", "on")
CACHED_SHARE = 0.5  # a block with at least this share of its pages cached is read buffered
_O_DIRECT = getattr(os, "O_DIRECT", None)


def _mincore() -> Any:  # (a ctypes function: libc.mincore)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.mincore
    except (OSError, AttributeError):  # pragma: no cover - no libc, or no mincore
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    fn.restype = ctypes.c_int
    return fn


_MINCORE = _mincore()


class Unsupported(OSError):
    """The file system refused a direct read (its alignment): read buffered instead."""


def open_direct(fd: int, base: int | None) -> DirectReads | None:
    """Direct reads of the file open as ``fd`` (the same file, opened again through
    ``/proc/self/fd``, so a rename over its path does not matter), or None where
    ``O_DIRECT`` cannot be had (module docs). ``base``: the address of the file's
    byte 0 in a mapping of it (to ask which pages are cached), or None."""
    if _O_DIRECT is None or not ENABLED:
        return None
    try:
        dfd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC | _O_DIRECT)
    except OSError:  # EINVAL (tmpfs before Linux 6.6, some FUSE), ENOENT (no /proc), EACCES
        return None
    a, b = os.fstat(fd), os.fstat(dfd)
    if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):  # pragma: no cover - /proc lied
        os.close(dfd)
        return None
    return DirectReads(dfd, base)


_HUGE = 2 << 20  # a huge page (x86-64, arm64 with 4 KiB pages)


def _aligned(size: int) -> memoryview:
    """``size`` bytes at a huge page boundary, asked to be backed by huge pages
    (``MADV_HUGEPAGE``): a direct read into them is one segment a huge page, so the
    disk gets a block in larger requests than one segment a 4 KiB page allows
    (a virtio disk: 254 segments a request, 1 MiB of 4 KiB pages)."""
    raw = mmap.mmap(-1, size + _HUGE)
    at = -ctypes.addressof(ctypes.c_char.from_buffer(raw)) % _HUGE
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        try:
            raw.madvise(advice, at - at % mmap.PAGESIZE, size)
        except OSError:  # no transparent huge pages: 4 KiB pages, still aligned
            pass
    return memoryview(raw)[at : at + size]


class DirectReads:
    """Reads of one file past the page cache (module docs): ``dfd`` a descriptor opened
    with ``O_DIRECT`` (owned: closed with this object); ``base`` the address of the
    file's byte 0 in a mapping of it, or None."""

    def __init__(self, dfd: int, base: int | None):
        self.dfd, self.base = dfd, base if _MINCORE is not None else None
        self._local = threading.local()  # each reading thread's aligned buffer
        weakref.finalize(self, os.close, dfd)

    def cached(self, offset: int, size: int) -> bool:
        """Are most pages of bytes ``offset .. offset + size - 1`` in the page cache?"""
        if self.base is None or size <= 0:
            return False
        a = offset - offset % mmap.PAGESIZE
        pages = -(-(offset + size - a) // mmap.PAGESIZE)
        vec = ctypes.create_string_buffer(pages)
        assert _MINCORE is not None
        if _MINCORE(self.base + a, offset + size - a, vec) != 0:
            return False  # (ENOMEM: past the mapping) read it directly
        held = np.count_nonzero(np.frombuffer(vec.raw, dtype=np.uint8, count=pages) & 1)
        return bool(held >= CACHED_SHARE * pages)

    def _buffer(self, size: int) -> memoryview:
        buf = getattr(self._local, "buf", None)
        if buf is None or len(buf) < size:
            self._local.buf = buf = _aligned(size)
        return buf

    def read(self, offset: int, out: memoryview) -> int:
        """Fill ``out`` with the file's bytes from ``offset`` on, past the page cache;
        the bytes read (fewer than ``len(out)`` only where the file ends first).
        ``Unsupported`` if the file system refuses a direct read."""
        total = len(out)
        a = offset - offset % ALIGN
        z = -(-(offset + total) // ALIGN) * ALIGN
        buf = self._buffer(z - a)
        got = 0
        while got < z - a:
            try:
                k = os.preadv(self.dfd, [buf[got : z - a]], a + got)
            except OSError as e:
                if e.errno == errno.EINVAL:
                    raise Unsupported(e.errno, f"O_DIRECT read refused: {e.strerror}") from None
                raise
            got += k
            if k == 0 or got % ALIGN:  # the end of the file (a direct read ends aligned)
                break
        have = max(0, min(got - (offset - a), total))
        out[:have] = buf[offset - a : offset - a + have]
        return have
