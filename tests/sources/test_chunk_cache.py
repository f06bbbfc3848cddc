"""A chunk-indexed stream read as random access (exactbatch.sources.chunk_cache)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from backends import built, on_backend
from hypothesis import given, settings
from hypothesis import strategies as st

from exactbatch.sources.chunk_cache import ChunkCacheReader
from exactbatch.sources.chunks import ChunkError, ChunkIndexedStream, ChunkList, Widths


class Counting:
    """A chunk source of ``rows`` rows a chunk, counting its reads; ``fail`` chunk ids
    raise OSError once each; ``gate`` (an Event) holds every read until set."""

    def __init__(self, rows, fail=(), gate=None):
        self.chunk_rows = np.asarray(rows)
        firsts = np.cumsum(rows) - np.asarray(rows)
        pairs = zip(firsts, rows, strict=True)
        self.parts = [np.arange(f, f + r, dtype=float)[:, None] for f, r in pairs]
        self.reads, self.fail, self.gate = [], set(fail), gate

    def read_chunk(self, i):
        if self.gate is not None:
            self.gate.wait(10)
        self.reads.append(i)
        if i in self.fail:
            self.fail.discard(i)
            raise OSError(f"injected: chunk {i}")
        return self.parts[i]


def reader(source, budget=1000):
    return ChunkCacheReader(ChunkIndexedStream(source), Widths(), budget)


def read(r, rows):
    out_x, out_y = np.empty((len(rows), r.d)), np.empty((len(rows), r.l))
    r.read(np.asarray(rows), out_x, out_y)
    return out_x[:, 0].astype(int).tolist()


def test_rows_of_any_chunks_in_any_order_each_chunk_read_once():
    src = Counting([5, 0, 7, 3])
    r = reader(src)
    assert (r.n, r.d, r.l) == (15, 1, 0)
    assert read(r, [14, 0, 6, 5, 11, 12]) == [14, 0, 6, 5, 11, 12]
    assert read(r, [1, 13]) == [1, 13]
    assert sorted(src.reads) == [0, 2, 3]  # (chunk 0 read first, for the widths)
    assert r.rows_read == 15


def test_the_budget_lets_the_least_recently_used_chunk_go():
    src = Counting([4, 4, 4])
    r = reader(src, budget=8)
    read(r, [0])
    read(r, [4])
    read(r, [0])  # chunk 0 used last: chunk 1 goes when chunk 2 comes
    read(r, [8])
    src.reads.clear()
    read(r, [1, 9])
    assert src.reads == []
    read(r, [5])
    assert src.reads == [1]


def test_a_read_larger_than_the_budget_is_served_whole():
    r = reader(Counting([3, 3, 3]), budget=1)
    assert read(r, [8, 0, 4]) == [8, 0, 4]


def test_a_failed_chunk_read_raises_and_the_next_read_reads_it_again():
    src = Counting([4, 4], fail={1})
    r = reader(src)
    with pytest.raises(OSError, match="chunk 1"):
        read(r, [0, 5])
    assert read(r, [0, 5]) == [0, 5]


def test_a_read_ahead_that_fails_is_let_go_and_the_read_that_needs_the_chunk_reads_it():
    src = Counting([4, 4, 4], fail={2})
    r = reader(src)
    r.read_ahead(lambda: [1, 2])
    done = threading.Event()
    r.read_ahead(lambda: done.set() or [])  # one thread, in order: the first is handled
    assert done.wait(10)
    assert src.reads == [0, 1, 2]  # (0 for the widths) 2 failed
    assert read(r, [9, 5]) == [9, 5]  # chunk 1 as read ahead; 2 read again, here
    assert src.reads == [0, 1, 2, 2]


def test_a_read_waiting_on_a_read_ahead_that_fails_reads_the_chunk_itself(monkeypatch):
    """A read that needs a chunk while it is being read ahead waits for that read; when
    it fails, the read reads the chunk again (its error is the read ahead's, let go: it
    never reaches the read)."""
    src = Counting([4, 4], fail={1})
    r = reader(src)
    gate, waiting = threading.Event(), threading.Event()
    src.gate = gate  # the read ahead of chunk 1 held in read_chunk
    start = r._start

    def start_seen(c):  # the read found the read ahead under way: it waits on it
        load = start(c)
        if threading.current_thread().name == "needs-1" and not load[1]:
            waiting.set()
        return load

    monkeypatch.setattr(r, "_start", start_seen)
    r.read_ahead(lambda: [1])
    got = []
    t = threading.Thread(target=lambda: got.append(read(r, [5, 6])), name="needs-1")
    t.start()
    assert waiting.wait(10)
    gate.set()  # the read ahead fails now; the read reads chunk 1 itself
    t.join(10)
    assert got == [[5, 6]]
    assert src.reads == [0, 1, 1]


def test_a_fault_that_lasts_is_raised_by_the_read_that_needs_the_chunk():
    src = Counting([4, 4], fail={1})
    r = reader(src)
    r.read_ahead(lambda: [1])
    src.fail.add(1)  # (fails ahead, or here: either way this read fails once more)
    with pytest.raises(OSError, match="chunk 1"):
        for _ in range(2):
            read(r, [5])
            src.fail.add(1)


def test_two_threads_needing_one_chunk_wait_for_one_read():
    gate = threading.Event()
    src = Counting([4, 4])
    r = reader(src)
    src.gate = gate
    got = []
    threads = [threading.Thread(target=lambda: got.append(read(r, [6]))) for _ in range(3)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert got == [[6]] * 3 and src.reads.count(1) == 1


def test_a_chunk_of_other_rows_than_chunk_rows_says_is_a_chunk_error():
    src = Counting([4, 4])
    src.parts[1] = src.parts[1][:3]
    r = reader(src)
    with pytest.raises(ChunkError, match=r"read_chunk\(1\) returned 3 rows"):
        read(r, [5])


def test_a_closed_reader_refuses_reads():
    r = reader(Counting([2]))
    r.close()
    with pytest.raises(ValueError, match="closed"):
        read(r, [0])


def test_a_reader_closed_while_a_read_waits_on_its_chunk_says_it_is_closed():
    """close() from another thread while a read waits on a chunk's read: the read raises
    the closed loader's ValueError when the chunk comes, never an AssertionError."""
    gate = threading.Event()
    src = Counting([2, 2], gate=gate)
    gate.set()
    r = reader(src)  # (its widths learned from chunk 0)
    gate.clear()
    errors = []

    def work():
        try:
            read(r, [3])
        except Exception as e:  # noqa: BLE001 (the test looks at what was raised)
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    while not r._loading:  # the read has begun reading chunk 1
        threading.Event().wait(0.001)
    r.close()
    gate.set()
    t.join(10)
    assert len(errors) == 1 and isinstance(errors[0], ValueError), errors
    assert "closed" in str(errors[0])


def test_a_list_as_a_chunk_source_counts_its_chunks_rows():
    chunks = [(np.zeros((3, 2)), np.zeros(3)), (np.zeros(2), np.zeros(1)), np.zeros((0, 2))]
    with pytest.raises(ChunkError, match="chunk 2"):  # checked as a pass checks it
        ChunkList(chunks)
    src = ChunkList(chunks[:2])
    assert src.chunk_rows.tolist() == [3, 1] and src.n_rows == 4
    assert (src.d, src.l) == (2, 1)
    assert src.read_chunk(1) is chunks[1]


def test_holds_says_whether_every_chunk_named_is_held_or_being_read():
    src = Counting([4, 4, 4])
    r = reader(src, budget=8)
    read(r, [0, 4])
    assert r.holds([0, 1]) and r.holds([])
    assert not r.holds([1, 2])
    read(r, [9])
    assert r.holds([2])
    r.close()
    assert not r.holds([2])


def test_chunks_not_used_lately_are_kept_while_the_budget_has_room():
    """A chunk held costs no copy: one not used since the last chunk came in stays
    while the budget has room (a stream that fits in the budget is read once), and the
    least recently used goes first when it has not."""
    src = Counting([4, 4, 4, 4, 4])
    r = reader(src, budget=16)
    for row in (0, 4, 8, 12):  # chunk 0 not used since chunk 2 came in: kept
        assert read(r, [row]) == [row]
    assert read(r, [1, 5, 9, 13]) == [1, 5, 9, 13]
    assert sorted(src.reads) == [0, 1, 2, 3] and r.rows_read == 16
    read(r, [6, 10, 14])
    read(r, [16])  # a fifth chunk: no room, the least recently used (chunk 0) goes
    src.reads.clear()
    assert read(r, [7, 11, 15, 17]) == [7, 11, 15, 17] and src.reads == []
    read(r, [2])
    assert src.reads == [0]


class Hooked(Counting):
    """A chunk source of known widths (x one column, y the row id times 10) with one of
    the optional read hooks (``hook``): ``read_columns``, ``read_rows_into`` or
    ``open_chunk``; ``read_chunk`` refused (the hook must be what reads); ``short``: a
    chunk whose columns hold a row less."""

    d, l = 1, 1  # noqa: E741

    def __init__(self, rows, hook, short=None):
        super().__init__(rows)
        self.hook, self.short, self.calls = hook, short, []
        for other in {"read_columns", "read_rows_into", "open_chunk"} - {hook}:
            setattr(self, other, None)  # (no such hook: stream_hooks finds None)

    def read_chunk(self, i):
        raise AssertionError(f"read_chunk({i}) called; {self.hook} should read it")

    def _whole(self, first, k):
        ids = np.arange(first, first + k, dtype=float)
        return np.stack([ids, 10 * ids], axis=1)

    def read_columns(self, i):
        from exactbatch.sources.column_chunk import Columns

        self.calls.append(("columns", i))
        first = int(np.cumsum(self.chunk_rows)[i] - self.chunk_rows[i])
        k = int(self.chunk_rows[i]) - (i == self.short)
        whole = self._whole(first, k)
        if i % 2:  # held as arrays: laid out as they are
            return whole[:, :1], whole[:, 1:]
        x = np.ascontiguousarray(whole[:, 0])
        return Columns([x], k), Columns([10 * x], k)

    def read_rows_into(self, row, out):
        self.calls.append(("into", row, out.shape))
        out[...] = self._whole(row, out.shape[0])

    def open_chunk(self, i):
        self.calls.append(("open", i))
        source = self

        class Rows:
            def read_rows_into(self, row, out):
                source.calls.append(("opened into", row, out.shape))
                out[...] = source._whole(row, out.shape[0])

        return Rows()


def read_xy(r, rows):
    out_x, out_y = np.empty((len(rows), r.d)), np.empty((len(rows), r.l))
    r.read(np.asarray(rows), out_x, out_y)
    return out_x[:, 0].tolist(), out_y[:, 0].tolist()


@pytest.mark.parametrize("hook", ["read_columns", "read_rows_into", "open_chunk"])
def test_a_chunk_is_read_through_the_sources_read_hook_where_it_has_one(hook):
    """Known widths and a hook: the chunk is read by it, never by read_chunk (Parquet's
    columns copied once into whole rows; ndf_blocks' rows read straight into them), x then
    y a row, at the chunk's first row of the stream."""
    src = Hooked([3, 4, 0, 2], hook)
    r = ChunkCacheReader(ChunkIndexedStream(src), Widths(1, 1), 1000)
    assert (r.d, r.l) == (1, 1) and src.calls == []  # (widths known: nothing read yet)
    assert read_xy(r, [8, 0, 4, 3]) == ([8, 0, 4, 3], [80, 0, 40, 30])
    want = {
        "read_columns": [("columns", 0), ("columns", 1), ("columns", 3)],
        "read_rows_into": [("into", 0, (3, 2)), ("into", 3, (4, 2)), ("into", 7, (2, 2))],
        "open_chunk": [("open", 0), ("opened into", 0, (3, 2)), ("open", 1),
                       ("opened into", 3, (4, 2)), ("open", 3), ("opened into", 7, (2, 2))],
    }[hook]  # fmt: skip
    assert sorted(src.calls) == sorted(want)
    assert r.rows_read == 9


@pytest.mark.parametrize("short", [0, 1])
def test_columns_of_other_rows_than_chunk_rows_says_is_a_chunk_error(short):
    src = Hooked([3, 4], "read_columns", short=short)
    r = ChunkCacheReader(ChunkIndexedStream(src), Widths(1, 1), 1000)
    got, said = [2, 3][short], [3, 4][short]
    want = rf"^chunk {short}: read_columns\({short}\) returned {got} rows, but "
    with pytest.raises(ChunkError, match=want + rf"chunk_rows\[{short}\] says {said}$"):
        read_xy(r, [0, 3])


def test_the_widths_are_learned_from_the_first_chunk_with_rows():
    src = Counting([0, 0, 3, 2])
    r = reader(src)
    assert src.reads == [2] and (r.d, r.l) == (1, 0)
    assert read(r, [4, 0]) == [4, 0] and sorted(src.reads) == [2, 3]
    empty = reader(Counting([0, 0]))
    assert (empty.n, empty.d, empty.l) == (0, 0, 0)


def test_a_stream_of_labels_only_has_no_feature_columns():
    chunks = [(np.zeros((3, 0)), np.arange(3.0)), (np.zeros((2, 0)), np.arange(3.0, 5))]
    r = ChunkCacheReader(ChunkIndexedStream(ChunkList(chunks)), Widths(), 100)
    assert (r.d, r.l) == (0, 1)
    out_x, out_y = np.empty((3, 0)), np.empty((3, 1))
    r.read(np.array([4, 0, 2]), out_x, out_y)
    assert out_y[:, 0].tolist() == [4, 0, 2]


def test_a_budget_of_one_row_or_none_keeps_one_chunk_of_one_row():
    for budget in (0, 1):
        src = Counting([1, 1, 1])
        r = reader(src, budget=budget)
        assert r.budget == 1
        for row in (0, 1, 0, 2, 1):
            assert read(r, [row]) == [row]
        assert src.reads == [0, 1, 0, 2, 1]  # (0 first for the widths, kept for the read)


def test_read_ahead_hints_the_chunks_it_will_read_to_the_source():
    """will_need(i) (ndf_blocks: the kernel starts reading) for each chunk read ahead,
    before they are read."""
    src = Counting([4, 4, 4])
    hints = []
    src.will_need = lambda i: hints.append((i, list(src.reads)))
    r = reader(src)
    done = threading.Event()
    r.read_ahead(lambda: [2, 1])
    r.read_ahead(lambda: done.set() or [])
    assert done.wait(10)
    assert hints == [(2, [0]), (1, [0])] and src.reads == [0, 2, 1]


def test_a_chunk_of_other_widths_is_named_by_its_index():
    src = Counting([4, 4, 4])
    src.parts[2] = np.zeros((4, 2))
    r = reader(src)
    with pytest.raises(ChunkError, match=r"^chunk 2: expected x of shape \(rows, 1\)"):
        read(r, [9])


def test_the_budget_counts_rows_whatever_the_width():
    """Chunks of 2 rows and 5 columns, a budget of 4 rows: two chunks kept, a third lets
    the least recently used go (the budget is rows, never columns)."""
    src = Counting([2, 2, 2])
    src.parts = [np.repeat(p, 5, axis=1) for p in src.parts]
    r = reader(src, budget=4)
    for row in (0, 2, 0):
        assert read(r, [row]) == [row]
    assert src.reads == [0, 1]  # chunk 0 kept beside chunk 1
    read(r, [4])
    read(r, [0])
    read(r, [3])
    assert src.reads == [0, 1, 2, 1]  # chunk 1, the least recently used, went for 2


def test_a_read_of_a_chunk_held_and_a_chunk_not_reads_only_the_new_one():
    src = Counting([4, 4, 4])
    r = reader(src)
    assert read(r, [1]) == [1]
    assert read(r, [0, 5, 2, 9]) == [0, 5, 2, 9]
    assert src.reads == [0, 1, 2] and r.rows_read == 12


class KeepFor:
    """A reader's parts whose ``unset`` of the chunks in ``busy`` answers False once each
    (a read on another thread copying from them: they stay set until a later decision)."""

    def __init__(self, parts, busy):
        self.parts, self.busy, self.unset_asked = parts, set(busy), []

    def read(self, *args):
        return self.parts.read(*args)

    def set(self, c, rows):
        return self.parts.set(c, rows)

    def unset(self, c):
        self.unset_asked.append(c)
        if c in self.busy:
            self.busy.discard(c)
            return False
        return self.parts.unset(c)


def test_a_chunk_let_go_while_a_read_copied_from_it_is_held_again_without_a_read():
    """A chunk let go of while another thread's read still copies from it stays set; a
    read that needs it again with a chunk not held takes it as it is (never read again),
    and one let go of and no longer copied from is unset at the next decision."""
    src = Counting([4, 4, 4])
    r = reader(src, budget=4)
    r._parts = parts = KeepFor(r._parts, busy={0})
    assert read(r, [0]) == [0]
    assert read(r, [4]) == [4]  # chunk 0 let go of, but still set (busy)
    assert parts.unset_asked == [0] and read(r, [1]) == [1]  # (set still: no decision)
    assert read(r, [2, 9]) == [2, 9]  # chunk 0 again, with chunk 2: 0 is not read again
    assert src.reads == [0, 1, 2] and r.rows_read == 12
    assert parts.unset_asked == [0, 1]  # chunk 1 let go of; 0 held again, never unset
    assert r.holds([0, 2]) and not r.holds([1])


def _closed_while_reading(rows):
    """A read of ``rows`` (chunks of 2 rows, chunk 0 read for the widths) that is closed
    while it waits on its first chunk's read: what it raised."""
    gate = threading.Event()
    src = Counting([2, 2, 2], gate=gate)
    gate.set()
    r = reader(src)
    gate.clear()
    errors = []

    def work():
        try:
            read(r, rows)
        except Exception as e:  # noqa: BLE001 (the test looks at what was raised)
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    while not r._loading:  # the read has begun reading its first chunk
        threading.Event().wait(0.001)
    r.close()
    gate.set()
    t.join(10)
    assert len(errors) == 1 and type(errors[0]) is ValueError, errors
    return str(errors[0])


@pytest.mark.parametrize("rows", [[3], [3, 5]])
def test_a_read_closed_while_waiting_says_so_before_or_after_its_other_chunks(rows):
    """Closed while its first chunk is read: the read raises once that chunk comes, at
    its next chunk (two needed) or before deciding what is held (one)."""
    assert _closed_while_reading(rows) == "read from a closed DataLoader"


def test_a_closed_reader_refuses_reads_and_holds_nothing():
    r = reader(Counting([2]))
    assert r.holds([])
    r.close()
    with pytest.raises(ValueError, match="^read from a closed DataLoader$"):
        read(r, [0])
    assert not r.holds([]) and not r.holds([0])


def test_a_read_of_no_rows_copies_nothing_and_answers_as_the_kernel_would():
    """No rows: None, or with a transform kernel -1 (no row held a NaN)."""
    from exactbatch.kernels import TransformKernel

    src = Counting([2, 2])
    r = reader(src)
    x, y = np.empty((0, 1)), np.empty((0, 0))
    assert r.read(np.array([], dtype=np.int64), x, y) is None
    assert r.read(slice(3, 3), x, y) is None
    assert r.read(np.array([], dtype=np.int64), x, y, TransformKernel([0.0], [1.0])) == -1
    assert src.reads == [0]


def test_a_read_applies_the_transform_kernel_as_it_copies():
    """fuses: read() takes the transform's kernel, which maps each feature as its row is
    copied and answers the first row that held a NaN (-1: none); without a kernel the
    read answers None."""
    from exactbatch.kernels import TransformKernel

    src = Counting([3, 3])
    src.parts[1] = np.array([[3.0], [np.nan], [5.0]])
    r = reader(src)
    assert r.fuses is True
    kern = TransformKernel([1.0], [2.0])
    x, y = np.empty((3, 1)), np.empty((3, 0))
    assert r.read(np.array([2, 0, 1]), x, y, kern) == -1
    assert x[:, 0].tolist() == [2.0, -2.0, 0.0]
    assert r.read(np.array([0, 3, 4, 5]), np.empty((4, 1)), np.empty((4, 0)), kern) == 2
    assert r.read(slice(0, 3), x, y) is None and x[:, 0].tolist() == [0.0, 1.0, 2.0]


def test_a_chunk_read_ahead_or_held_is_held_and_not_read_again():
    """holds() counts a chunk read ahead (not set yet); the read-ahead skips a chunk held,
    read ahead or being read, and goes on to the next."""
    src = Counting([4, 4, 4, 4])
    r = reader(src)
    read(r, [5])  # chunk 1 held
    done = threading.Event()
    r.read_ahead(lambda: [2])
    r.read_ahead(lambda: done.set() or [])
    assert done.wait(10)
    assert r.holds([2]) and r.holds([0, 1, 2]) and not r.holds([3])
    done.clear()
    r.read_ahead(lambda: [1, 2, 3])
    r.read_ahead(lambda: done.set() or [])
    assert done.wait(10)
    assert src.reads == [0, 1, 2, 3]


def test_the_read_ahead_stops_where_its_chunks_would_pass_the_budget():
    """Chunks read ahead while their rows (those read ahead and not used yet) fit in the
    budget, to the row: chunks of 2 rows and 5 columns, a budget of 4 rows: two."""
    src = Counting([2, 2, 2, 2])
    src.parts = [np.repeat(p, 5, axis=1) for p in src.parts]
    r = ChunkCacheReader(ChunkIndexedStream(src), Widths(5, 0), 4)  # (nothing read yet)
    done = threading.Event()
    r.read_ahead(lambda: [1, 2, 3])
    r.read_ahead(lambda: done.set() or [])
    assert done.wait(10)
    assert src.reads == [1, 2]
    out_x = np.empty((2, 5))
    r.read(np.array([3, 5]), out_x, np.empty((2, 0)))  # both used: room again
    done.clear()
    r.read_ahead(lambda: [3])
    r.read_ahead(lambda: done.set() or [])
    assert done.wait(10)
    assert src.reads == [1, 2, 3]


def test_a_read_ahead_whose_list_fails_is_skipped_and_the_next_is_read():
    src = Counting([4, 4, 4])
    r = reader(src)
    done = threading.Event()

    def closed():
        raise ValueError("read from a closed DataLoader")

    r.read_ahead(closed)
    r.read_ahead(lambda: [2])
    r.read_ahead(lambda: done.set() or [])
    assert done.wait(10)
    assert src.reads == [0, 2]


def test_read_ahead_runs_on_one_named_daemon_thread_in_order():
    """One thread at a time ("exactbatch-chunks", a daemon: a loader dropped unclosed
    never holds the process): a list asked while another is read waits its turn."""
    src = Counting([4, 4, 4])
    r = reader(src)
    gate, second, done = threading.Event(), threading.Event(), threading.Event()
    events, threads = [], []

    def first():
        threads.append(threading.current_thread())
        gate.wait(10)
        events.append("first")
        return []

    r.read_ahead(first)
    r.read_ahead(lambda: second.set() or events.append("second") or [])
    second.wait(0.5)  # (a second thread would list it now; the one thread waits)
    gate.set()
    r.read_ahead(lambda: done.set() or [])
    assert done.wait(10)
    assert events == ["first", "second"]
    assert threads[0].name == "exactbatch-chunks" and threads[0].daemon


def _wait_on_a_failed_read_ahead(r, src, c, rows):
    """A read of ``rows`` that needs chunk ``c`` while it is read ahead, that read ahead
    failing: what the read got."""
    gate, waiting = threading.Event(), threading.Event()
    src.gate, src.fail = gate, {c}
    start = r._start

    def start_seen(k):
        load = start(k)
        if threading.current_thread().name == "needs" and not load[1]:
            waiting.set()
        return load

    r._start = start_seen
    r.read_ahead(lambda: [c])
    got = []
    t = threading.Thread(target=lambda: got.append(read(r, rows)), name="needs")
    t.start()
    assert waiting.wait(10)
    gate.set()
    t.join(10)
    del r._start
    return got


def test_reads_waiting_on_two_failed_read_aheads_each_get_their_own_chunk():
    """Two read-aheads abandoned in turn (chunks 1, then 2): each read that waited on one
    reads its own chunk again, never the other's."""
    src = Counting([4, 4, 4])
    r = reader(src)
    assert _wait_on_a_failed_read_ahead(r, src, 1, [5, 6]) == [[5, 6]]
    assert _wait_on_a_failed_read_ahead(r, src, 2, [9, 10]) == [[9, 10]]
    assert src.reads == [0, 1, 1, 2, 2]


def test_a_reader_prepares_no_batches_ahead():
    """prefetch_default: none (the next window's chunks are read ahead instead)."""
    assert reader(Counting([2])).prefetch_default(10**6) == 0


def _chunk_forms(rng, n, d, l, dtype, form):  # noqa: E741
    """Chunk sides holding ``n`` rows of ``d`` features and ``l`` labels (None: none),
    of ``dtype``, laid out as ``form`` says: C-contiguous arrays; x a slice of columns
    of a wider array and y a strided 1-D array; x in Fortran order (each row's values
    apart: copied); x and y columns of one array of whole rows."""
    x = rng.standard_normal((n, d)).astype(dtype)
    y = None if l is None else rng.standard_normal((n, l)).astype(dtype)
    if form == "strided":
        wide = np.zeros((n, d + 3), dtype=dtype)
        wide[:, 1 : 1 + d] = x
        x = wide[:, 1 : 1 + d]
        if y is not None and l == 1:
            y = np.repeat(y[:, 0], 2)[::2]
    elif form == "fortran":
        x = np.asfortranarray(x)
    elif form == "whole" and y is not None:
        whole = np.concatenate((x, y), axis=1)
        x, y = whole[:, :d], whole[:, d:]
    return x, y


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    l=st.sampled_from([None, 1, 2]),  # noqa: E741
    dtype=st.sampled_from([np.float32, np.float64]),
    form=st.sampled_from(["contiguous", "strided", "fortran", "whole"]),
    out32=st.booleans(),
)
def test_chunks_in_any_form_are_read_to_the_bits_of_their_rows(data, l, dtype, form, out32):  # noqa: E741
    """Whatever a chunk's form (labels or none, float32 or float64, strided, in Fortran
    order, or x and y columns of one array), held as it came or copied where its rows'
    values are not side by side: any read gives the bits of the chunks' rows (float64,
    or cast to float32), on both backends alike."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    d = data.draw(st.integers(1, 5))
    sizes = data.draw(st.lists(st.integers(0, 9), min_size=1, max_size=4).filter(sum))
    chunks = [_chunk_forms(rng, n, d, l, dtype, form) for n in sizes]
    want_x = np.concatenate([x for x, _ in chunks]).astype(np.float64)
    lw = 0 if l is None else l
    want_y = (
        np.zeros((len(want_x), 0)) if l is None else np.concatenate([y for _, y in chunks])
    ).astype(np.float64)
    want_y = want_y.reshape(len(want_x), lw)
    rows = data.draw(st.lists(st.integers(0, len(want_x) - 1), max_size=30))
    rows = np.asarray(rows, dtype=np.int64)
    out = np.float32 if out32 else np.float64
    got = {}
    for name in ("compiled", "numpy"):
        if name == "compiled" and not built():
            continue
        with on_backend(name):
            r = reader(_Listed([c if l is not None else c[0] for c in chunks]), budget=5)
            ox, oy = np.empty((len(rows), d), dtype=out), np.empty((len(rows), lw), dtype=out)
            r.read(rows, ox, oy)
            got[name] = (ox.tobytes(), oy.tobytes())
            np.testing.assert_array_equal(ox, want_x[rows].astype(out))
            np.testing.assert_array_equal(oy, want_y[rows].astype(out))
            r.close()
    assert len(set(got.values())) == 1


class _Listed:
    """A chunk source of the chunks given, as they are (no copy)."""

    def __init__(self, chunks):
        self.chunks = chunks
        self.chunk_rows = np.array(
            [np.shape(c[0] if isinstance(c, tuple) else c)[0] for c in chunks]
        )

    def read_chunk(self, i):
        return self.chunks[i]


def test_a_lists_chunk_of_float64_rows_is_held_without_a_copy():
    """A list's chunk whose x and y are float64 arrays of rows is held as it came: its
    arrays are the ones the parts read (no copy into whole rows)."""
    from exactbatch.sources.chunks import ChunkList

    x, y = np.arange(12.0).reshape(6, 2), np.arange(6.0)
    r = reader(ChunkList([(x, y)]))
    read(r, [5, 0])
    (hx, hy) = r._held[0]
    assert np.shares_memory(hx, x) and np.shares_memory(hy, y)


def test_a_chunk_source_that_fills_one_buffer_at_every_read_gives_each_chunks_rows():
    """A chunk source may hand out the same buffer at every read_chunk, filled anew (the
    protocol promises no fresh arrays): the chunks held are copies, so a chunk read
    later does not change the rows of one held before."""

    class Refilled:
        chunk_rows = np.array([3, 3, 3])

        def __init__(self):
            self.x, self.y = np.empty((3, 1)), np.empty(3)

        def read_chunk(self, i):
            self.x[:, 0] = np.arange(3 * i, 3 * i + 3)
            self.y[:] = 10 * self.x[:, 0]
            return self.x, self.y

    r = reader(Refilled())
    assert read(r, [0, 4, 8, 1, 5]) == [0, 4, 8, 1, 5]
    assert read(r, [2, 3, 7]) == [2, 3, 7]


@pytest.mark.parametrize("form", ["columns and array", "columns of two starts"])
def test_columns_of_one_side_or_of_two_starts_are_read_to_their_rows(form):
    """read_columns giving x as columns and y as an array, or both as columns from
    different starts: each side made rows on its own (no whole rows to share), read
    to the chunk's rows."""
    from exactbatch.sources.column_chunk import Columns

    class Mixed(Hooked):
        def read_columns(self, i):
            first = int(np.cumsum(self.chunk_rows)[i] - self.chunk_rows[i])
            ids = np.arange(first, first + int(self.chunk_rows[i]), dtype=float)
            if form == "columns and array":
                return Columns([ids], len(ids)), (10 * ids)[:, None]
            return Columns([ids], len(ids)), Columns([np.r_[0.0, 10 * ids]], len(ids), 1)

    r = ChunkCacheReader(ChunkIndexedStream(Mixed([3, 4], "read_columns")), Widths(1, 1), 100)
    assert read_xy(r, [6, 0, 3, 2]) == ([6, 0, 3, 2], [60, 0, 30, 20])
