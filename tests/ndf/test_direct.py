"""Block reads past the page cache (ndf/direct.py): an implementation detail. With
O_DIRECT or without it, or falling back from it, the same bytes, the same batches and
the same errors (a truncated file is still an NdfError)."""

from __future__ import annotations

import ctypes
import errno
import gc
import mmap
import os
import threading

import numpy as np
import pytest
from helpers import make_x, make_y

from exactbatch import DataLoader, NdfError, ndf_blocks, open_ndf, save_ndf
from exactbatch.ndf import direct, local
from exactbatch.sources import passes

N, D, L = 1001, 4, 1  # 40 bytes a row: the file's end and most blocks are not 4 KiB-aligned


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "a.ndf"
    rows = np.arange(N)
    save_ndf(p, (make_x(rows, D), make_y(rows, L)))
    return p


@pytest.fixture
def on(monkeypatch):
    """Direct reads on, for blocks of any size, every block taken for cold; ``on.reads``
    counts the reads that went past the cache."""
    monkeypatch.setattr(direct, "ENABLED", True)
    monkeypatch.setattr(local, "MIN_DIRECT_BYTES", 1)
    monkeypatch.setattr(direct, "CACHED_SHARE", 2.0)  # no block counts as cached
    real, reads = direct.DirectReads.read, []

    def read(self, offset, out):
        reads.append(offset)
        return real(self, offset, out)

    monkeypatch.setattr(direct.DirectReads, "read", read)
    on.reads = reads
    return on


def _batches(path, **kw):
    with open_ndf(path) as f:
        loader = DataLoader(ndf_blocks(f, 37), 16, seed=7, **kw)
        out = []
        for e in range(2):
            loader.set_epoch(e)
            out += [(xb.copy(), yb.copy()) for xb, yb in loader]
        loader.close()
        return out


def _same(a, b):
    assert len(a) == len(b) > 0
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        assert np.array_equal(xa, xb) and np.array_equal(ya, yb)


def _direct_ok(path) -> bool:
    """Does this file system take O_DIRECT? Asked of the OS itself, not of open_direct
    (which a bug could make refuse, skipping the tests that would show it)."""
    try:
        os.close(os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0)))
    except OSError:
        return False
    return hasattr(os, "O_DIRECT")


@pytest.mark.parametrize("depth", [1, 3])
@pytest.mark.parametrize("shuffle", [False, True])
def test_blocks_read_past_the_cache_give_the_same_batches(
    path, on, monkeypatch, each_backend, shuffle, depth
):
    """Both backends, straight into the buffer (depth 1) and several blocks at once:
    the batches of buffered reads, every block read directly."""
    if not _direct_ok(path):
        pytest.skip("this file system refuses O_DIRECT")
    monkeypatch.setattr(passes, "read_depth", lambda *args: depth)
    monkeypatch.setattr("exactbatch.feeds.streamed.read_depth", lambda *args: depth)
    got = _batches(path, shuffle=shuffle, buffer_size=300)
    assert len(on.reads) == 2 * -(-N // 37)  # every block, each epoch
    monkeypatch.setattr(direct, "ENABLED", False)
    _same(got, _batches(path, shuffle=shuffle, buffer_size=300))


def test_a_cached_block_is_read_buffered(path, on, monkeypatch):
    monkeypatch.setattr(direct, "CACHED_SHARE", 0.0)  # every block counts as cached
    _batches(path)
    assert on.reads == []


def test_einval_at_the_o_direct_open_falls_back_to_buffered_reads(path, on, monkeypatch):
    """tmpfs before Linux 6.6 and some FUSE file systems refuse the open with EINVAL."""
    want = _batches(path)
    on.reads.clear()
    real = os.open

    def refusing(file, flags, *args, **kwargs):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(file, flags, *args, **kwargs)

    monkeypatch.setattr(direct.os, "open", refusing)
    with open_ndf(path) as f:
        x = np.empty((37, D + L))
        f.read_block_into(100, x)
        assert f._handle().direct is None
        assert np.array_equal(x[:, 0], np.arange(100, 137))
    assert on.reads == []
    _same(want, _batches(path))


def test_einval_at_a_direct_read_falls_back_for_good(path, on, monkeypatch):
    if not _direct_ok(path):
        pytest.skip("this file system refuses O_DIRECT")
    want = _batches(path)
    real, refused = os.preadv, []

    def refusing(fd, buffers, offset, *flags):
        if fd not in (h.fd for h in handles):  # the O_DIRECT descriptor
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, buffers, offset, *flags)

    with open_ndf(path) as f:
        handles = [f._handle()]
        monkeypatch.setattr(direct.os, "preadv", refusing)
        x = np.empty((37, D + L))
        f.read_block_into(500, x)
        assert np.array_equal(x[:, 0], np.arange(500, 537))
        assert len(refused) == 1 and f._handle().direct is None
        f.read_block_into(0, x)  # buffered from now on
        assert len(refused) == 1 and np.array_equal(x[:, 0], np.arange(37))
    monkeypatch.undo()
    _same(want, _batches(path))


@pytest.mark.parametrize("read_directly", [False, True])
def test_a_truncated_file_is_the_same_error_with_or_without_o_direct(
    path, on, monkeypatch, read_directly
):
    if read_directly and not _direct_ok(path):
        pytest.skip("this file system refuses O_DIRECT")
    monkeypatch.setattr(direct, "ENABLED", read_directly)
    with open_ndf(path) as f:
        x = np.empty((37, D + L))
        f.read_block_into(0, x)
        os.truncate(path, 28 + 40 * (N - 10))  # the last 10 rows gone
        with pytest.raises(NdfError, match="changed while open: expected"):
            f.read_block_into(N - 37, x)  # past the new end
        with pytest.raises(NdfError, match="changed while open: expected"):
            f.read_block_into(0, x)  # within it: the size check after the read
    assert bool(on.reads) == read_directly


def test_a_direct_read_ending_early_is_the_buffered_read_s_error(path, on, monkeypatch):
    """The file ends inside the block but its size still looks right (the race the check
    after a read exists for): the same NdfError as a buffered read's."""
    if not _direct_ok(path):
        pytest.skip("this file system refuses O_DIRECT")
    monkeypatch.setattr(direct.DirectReads, "read", lambda self, offset, out: len(out) - 40)
    monkeypatch.setattr(local.LocalHandle, "check_size", lambda self: None)
    with open_ndf(path) as f:
        with pytest.raises(
            NdfError, match=r"expected 1480 bytes at offset \d+, the file ended after 1440"
        ):
            f.read_block_into(0, np.empty((37, D + L)))


def _held(address: int, size: int) -> int:
    """How many pages of ``size`` bytes from the page-aligned ``address`` of a mapping
    are in memory (libc's ``mincore``, called here)."""
    libc = ctypes.CDLL(None, use_errno=True)
    pages = -(-size // mmap.PAGESIZE)
    vec = ctypes.create_string_buffer(pages)
    got = libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vec)
    assert got == 0, os.strerror(ctypes.get_errno())
    return sum(b & 1 for b in vec.raw[:pages])


def test_cached_counts_the_pages_of_the_range_held_in_memory(tmp_path, monkeypatch):
    """``mincore`` on the file's mapping: a block is read buffered when at least
    ``CACHED_SHARE`` of the pages it touches are in the page cache. The file's pages are
    let go of, then pages 8 to 39 alone read back through a map of its own."""
    monkeypatch.setattr(direct, "ENABLED", True)
    monkeypatch.setattr(direct, "_MINCORE", direct._mincore())  # made again, here
    pg, path = mmap.PAGESIZE, tmp_path / "c.ndf"
    save_ndf(path, np.zeros(((64 * pg - 28) // 64, 8)))
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        with open_ndf(path) as f, mmap.mmap(fd, size, prot=mmap.PROT_READ) as mm:
            reads = f._handle()._direct()
            if reads is None:
                pytest.skip("this file system refuses O_DIRECT")
            # asked of libc here, not of `cached`, which a bug could make skip this test
            if _held(reads.base + 40 * pg, 24 * pg - 28):
                pytest.skip("the page cache kept the file")
            mm.madvise(mmap.MADV_RANDOM)  # each page read alone, no read-ahead
            for k in range(8, 40):
                mm[k * pg]
            assert reads.cached(8 * pg, 32 * pg)  # every page
            assert not reads.cached(40 * pg, 24 * pg - 28)  # none, to the file's end
            assert reads.cached(24 * pg, 32 * pg)  # 16 of 32: the share, exactly
            assert reads.cached(24 * pg + 100, 32 * pg - 200)  # the same pages
            assert not reads.cached(24 * pg + 100, 32 * pg)  # 16 of 33
            assert not reads.cached(24 * pg, 32 * pg + 1)
            assert reads.cached(40 * pg - 1, 2) and not reads.cached(40 * pg, 2)  # 1 of 2, 0 of 1
            assert reads.cached(39 * pg, 1) and not reads.cached(40 * pg, 1)  # a byte
            assert not reads.cached(8 * pg, 0) and not reads.cached(8 * pg, -1)
            assert not direct.DirectReads(os.dup(fd), None).cached(8 * pg, pg)  # no mapping
    finally:
        os.close(fd)


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of this process's mapping that holds ``address`` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    return []


def test_a_buffer_is_aligned_to_a_huge_page_and_asked_to_be_backed_by_them():
    size = 4 << 20
    buf = direct._aligned(size)
    at = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert len(buf) == size and at % direct._HUGE == 0
    buf[:] = b"\1" * size  # all of it writable
    thp = os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled")
    if hasattr(mmap, "MADV_HUGEPAGE") and thp and os.path.exists("/proc/self/smaps"):
        assert "hg" in _vm_flags(at) and "hg" in _vm_flags(at + size - 1)


def test_each_thread_keeps_one_buffer_grown_only_when_too_small(path):
    fd = os.open(path, os.O_RDONLY)
    reads = direct.DirectReads(fd, None)
    first = reads._buffer(2 * direct.ALIGN)
    assert len(first) == 2 * direct.ALIGN
    assert reads._buffer(2 * direct.ALIGN) is first and reads._buffer(direct.ALIGN) is first
    other = []
    t = threading.Thread(target=lambda: other.append(reads._buffer(direct.ALIGN)))
    t.start()
    t.join()
    assert len(other[0]) == direct.ALIGN  # that thread's own
    grown = reads._buffer(3 * direct.ALIGN)
    assert grown is not first and len(grown) == 3 * direct.ALIGN


def test_the_descriptor_closes_with_its_reads_and_no_mincore_means_no_mapping(path, monkeypatch):
    fd = os.open(path, os.O_RDONLY)
    same = os.fstat(fd)
    reads = direct.DirectReads(fd, 4096)
    assert (reads.dfd, reads.base) == (fd, 4096)
    del reads
    gc.collect()
    try:  # closed (its number may be another file's by now)
        now = os.fstat(fd)
    except OSError:
        now = None
    assert now is None or not os.path.samestat(now, same)
    monkeypatch.setattr(direct, "_MINCORE", None)  # no libc's mincore: never asked
    reads = direct.DirectReads(os.open(path, os.O_RDONLY), 4096)
    assert reads.base is None and reads.cached(0, 4096) is False


def test_a_range_the_kernel_cannot_answer_for_is_read_directly(path):
    """mincore fails (ENOMEM) for addresses no mapping holds: not cached."""
    gone = mmap.mmap(-1, 64 << 20)
    address = ctypes.addressof(ctypes.c_char.from_buffer(gone))
    gone.close()
    reads = direct.DirectReads(os.open(path, os.O_RDONLY), address)
    assert reads.cached(0, 16 * mmap.PAGESIZE) is False


def test_a_direct_read_at_the_end_of_the_file_says_how_many_bytes_it_read(path):
    """Fewer bytes than asked only where the file ends first; none past its end."""
    if not _direct_ok(path):
        pytest.skip("this file system refuses O_DIRECT")
    size, raw = os.path.getsize(path), path.read_bytes()
    fd = os.open(path, os.O_RDONLY)
    reads = direct.open_direct(fd, None) if direct.ENABLED else None
    if reads is None:
        reads = direct.DirectReads(os.open(path, os.O_RDONLY | os.O_DIRECT), None)
    try:
        for offset, want in ((size - 1000, 1000), (100, 5000), (size - 40, 40), (size, 0)):
            out = memoryview(bytearray(b"\xff" * 6000))
            assert reads.read(offset, out[: want + 500 if offset > 100 else want]) == want
            assert bytes(out[:want]) == raw[offset : offset + want]
        out = memoryview(bytearray(100))
        assert reads.read(size + 4096, out) == 0
    finally:
        os.close(fd)


def test_a_direct_read_cut_short_goes_on_where_it_stopped(path, monkeypatch):
    """A direct read may return fewer bytes than asked, aligned, before the file ends
    (Linux gives at most 2 GiB - 4 KiB a call): the read goes on from where it stopped,
    one call after another, to the range's end or the file's, and no further."""
    if not _direct_ok(path):
        pytest.skip("this file system refuses O_DIRECT")
    size, raw, align = os.path.getsize(path), path.read_bytes(), direct.ALIGN
    reads = direct.DirectReads(os.open(path, os.O_RDONLY | os.O_DIRECT), None)
    real, calls = os.preadv, []

    def one_block_a_call(fd, buffers, offset, *flags):
        calls.append(offset)
        assert len(calls) < 50, "the read does not end"
        (buf,) = buffers
        return real(fd, [buf[:align]], offset, *flags)

    monkeypatch.setattr(direct.os, "preadv", one_block_a_call)
    blocks = lambda n: -(-n // align) * align  # noqa: E731 - n rounded up to a block
    # from the file's first block, from a later one, past the file's end
    for offset, length in ((100, 10000), (5000, 5000), (size - 5000, 5500)):
        calls.clear()
        out = memoryview(bytearray(b"\xff" * length))
        have = min(length, size - offset)
        assert reads.read(offset, out) == have
        assert bytes(out[:have]) == raw[offset : offset + have]
        first, stop = offset // align * align, min(blocks(offset + length), blocks(size))
        assert calls == list(range(first, stop, align))


def test_a_direct_read_refused_is_unsupported_naming_why(path, monkeypatch):
    """EINVAL from a direct read (the file system's alignment rules) is ``Unsupported``,
    an OSError with its errno and what was refused; any other error is raised as is."""
    if not _direct_ok(path):
        pytest.skip("this file system refuses O_DIRECT")
    reads = direct.DirectReads(os.open(path, os.O_RDONLY | os.O_DIRECT), None)
    code = [errno.EINVAL]

    def refusing(fd, buffers, offset, *flags):
        raise OSError(code[0], os.strerror(code[0]))

    monkeypatch.setattr(direct.os, "preadv", refusing)
    with pytest.raises(direct.Unsupported) as refused:
        reads.read(0, memoryview(bytearray(100)))
    assert refused.value.errno == errno.EINVAL
    assert refused.value.strerror == f"O_DIRECT read refused: {os.strerror(errno.EINVAL)}"
    assert str(refused.value) == f"[Errno {errno.EINVAL}] {refused.value.strerror}"
    code[0] = errno.EIO
    with pytest.raises(OSError) as failed:
        reads.read(0, memoryview(bytearray(100)))
    assert type(failed.value) is OSError and failed.value.errno == errno.EIO
