"""total_size on streamed sources: "auto", None, an int, and the audit of an int.

DESIGN.md, "total_size and its audit": "auto" reads n_rows when the source
has it (no warning), else counts with one pass (a UserWarning naming the
fix) and probes that the source restarts; None has no length; an int is
trusted and audited after each full pass - a TotalSizeWarning, once, naming
both numbers, exactly when 10*N < 9*seen or 10*N >= 11*(seen + batch_size),
``seen`` being the rows handed out in full batches (per shard, against
``loader.n``). Every window test computes its expectation in integers.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from helpers import ClosableChunks, chunk_bounds, chunks_of, collect, make_x, make_y, next_into_ids
from hypothesis import given, settings
from hypothesis import strategies as st

from exactbatch import DataLoader, TotalSizeWarning


def flat(batches):
    return [i for b in batches for i in b]


def outside(n: int, seen: int, b: int) -> bool:
    """The audit's window, in exact integer arithmetic (DESIGN.md)."""
    return 10 * n < 9 * seen or 10 * n >= 11 * (seen + b)


def size_warnings(records):
    return [r for r in records if issubclass(r.category, TotalSizeWarning)]


def run_epochs(loader, epochs=1):
    """Run ``epochs`` full epochs recording every warning; return (batches, records)."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")  # no de-duplication: the loader must warn once itself
        out = [collect(loader) for _ in range(epochs)]
    return out, rec


def sized_chunks(rows, chunk=7):
    sizes = [chunk] * (rows // chunk) + ([rows % chunk] if rows % chunk else [])
    return chunks_of(sizes, d=2, l=1)


# -- "auto" -------------------------------------------------------------------------------


class Counted:
    """A re-iterable of chunks that counts its passes; optionally has ``n_rows``."""

    def __init__(self, sizes, n_rows=None):
        self.sizes, self.passes = list(sizes), 0
        if n_rows is not None:
            self.n_rows = n_rows

    def __iter__(self):
        self.passes += 1
        return iter(chunks_of(self.sizes, d=2, l=1))


def test_auto_uses_n_rows_without_a_pass_or_a_warning():
    """total_size="auto" takes N from the source's n_rows: no counting pass, no warning."""
    src = Counted([5, 5, 3], n_rows=13)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        loader = DataLoader(src, 4, shuffle=False)
    assert rec == []
    assert src.passes == 0
    assert loader.total_size == 13 and loader.n == 13 and len(loader) == 4
    assert flat(collect(loader)) == list(range(13))


def test_auto_without_n_rows_counts_with_a_user_warning_naming_the_fix():
    """total_size="auto" on a source without n_rows counts in one pass and warns how to avoid it."""
    src = Counted([5, 0, 5, 3])
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        loader = DataLoader(src, 4, shuffle=False)
    assert len(rec) == 1
    w = rec[0]
    assert issubclass(w.category, UserWarning)
    assert not issubclass(w.category, TotalSizeWarning)
    msg = str(w.message)
    assert "count" in msg.lower()
    assert "total_size=" in msg
    assert "13" in msg  # the count, so the user can paste total_size=13
    assert w.filename == __file__  # points at the line that built the loader
    assert loader.total_size == 13 and loader.n == 13 and len(loader) == 4
    assert loader.d == 2 and loader.l == 1  # widths known from the counting pass


def test_auto_counted_source_streams_every_row_without_further_warnings():
    """After the counting pass, epochs stream every row and warn nothing more."""
    with pytest.warns(UserWarning, match="total_size="):
        loader = DataLoader(Counted([5, 0, 5, 3]), 4, shuffle=True, seed=2)
    epochs, rec = run_epochs(loader, 3)
    assert rec == []
    for got in epochs:
        assert sorted(flat(got)) == list(range(13))


def test_auto_probe_refuses_a_factory_returning_the_same_iterator():
    """A factory that hands back one (now exhausted) iterator is a ValueError naming the fix."""
    it = iter(chunks_of([4, 4]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="zero-argument function"):
            DataLoader(lambda: it, 4)


def test_auto_probe_refuses_a_factory_returning_the_same_generator():
    """A factory that hands back one generator object is refused at construction too."""

    def gen():
        yield from chunks_of([4, 4])

    g = gen()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="fresh iterator"):
            DataLoader(lambda: g, 4)


def test_auto_probe_refuses_a_source_empty_on_its_second_pass():
    """A re-iterable that comes back empty on its second pass is a ValueError at construction."""

    class OnePass:
        def __init__(self):
            self.passes = 0

        def __iter__(self):
            self.passes += 1
            return iter(chunks_of([4, 4]) if self.passes == 1 else [])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="restart|fresh"):
            DataLoader(OnePass(), 4)


def test_auto_probe_refuses_a_factory_whose_second_pass_has_only_empty_chunks():
    """A second pass of nothing but empty chunks is refused like an empty one."""
    calls = []

    def factory():
        calls.append(1)
        return iter(chunks_of([4, 4] if len(calls) == 1 else [0, 0]))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError):
            DataLoader(factory, 4)


def test_auto_probe_names_a_bad_chunk_of_the_second_pass_by_its_index():
    """The restart probe checks the second pass's chunks like any: a bad one is named by index."""
    calls = []

    def factory():
        calls.append(1)
        return iter(chunks_of([4, 4]) if len(calls) == 1 else [np.ones((0, 2)), np.ones((2, 2, 2))])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="^chunk 1: x must be 2-D"):
            DataLoader(factory, 4)


def test_auto_probe_closes_the_iterator_of_its_second_pass():
    """The probe reads only the start of a second pass, then closes that iterator (a file
    or a connection behind it is released now, not when the garbage collector gets to it)."""
    opened = []
    with pytest.warns(UserWarning, match="counted"):
        DataLoader(lambda: ClosableChunks([4, 4], made=opened), 4)
    assert len(opened) == 2 and all(it.closed for it in opened)


def test_auto_a_first_epoch_empty_after_the_counting_pass_is_a_value_error():
    """The counting pass (and the restart probe) saw rows; an epoch's pass with none
    is an error that names restarting, not an epoch of no batches."""
    calls = []

    def factory():
        calls.append(1)
        return iter(chunks_of([4, 4] if len(calls) <= 2 else []))

    with pytest.warns(UserWarning, match="counted"):
        loader = DataLoader(factory, 4)
    with pytest.raises(ValueError, match="no rows in this pass after an earlier pass"):
        list(loader)


def test_auto_on_an_empty_stream_is_a_value_error_not_an_empty_epoch():
    """total_size="auto" on a stream with no rows is a ValueError, not an empty epoch."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="total_size=0"):
            DataLoader(lambda: iter([]), 4)


def test_total_size_zero_on_an_empty_stream_is_legal():
    """A declared total_size=0 on an empty stream gives len 0 and empty epochs, no warning."""
    loader = DataLoader(chunks_of([0, 0], d=2, l=1), 4, total_size=0)
    epochs, rec = run_epochs(loader, 2)
    assert len(loader) == 0 and epochs == [[], []]
    assert rec == []


# -- None -----------------------------------------------------------------------------------


@pytest.mark.parametrize("shuffle", [False, True])
def test_total_size_none_has_no_length_but_iterates(shuffle):
    """total_size=None: no counting pass, len() raises TypeError, iteration hands out every row."""
    src = Counted([5, 0, 5, 3])
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        loader = DataLoader(src, 4, shuffle=shuffle, total_size=None)
        assert src.passes == 0
        with pytest.raises(TypeError):
            len(loader)
        assert loader.total_size is None and loader.n is None
        for _ in range(2):
            got = collect(loader, 2, 1)
            assert sorted(flat(got)) == list(range(13))
            assert all(len(b) == 4 for b in got[:-1])
    assert rec == []


def test_total_size_none_streams_next_into():
    """total_size=None streams work through next_into too, learning widths from the stream."""
    loader = DataLoader(Counted([5, 0, 5, 3]), 4, shuffle=False, total_size=None)
    assert next_into_ids(loader, 2, 1) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12]]


# -- an int: trusted, audited -----------------------------------------------------------------


@pytest.mark.parametrize("declared", [10, 50, 90])
def test_declared_total_size_is_trusted_for_sizes(declared):
    """An int total_size sets total_size, n and len() whatever the stream holds."""
    loader = DataLoader(sized_chunks(50), 8, total_size=declared)
    assert loader.total_size == declared and loader.n == declared
    assert len(loader) == math.ceil(declared / 8)


BOUNDARIES = [
    # rows=100, b=10: seen=100; warn iff N < 90 or N >= 121
    (100, 10, 89),
    (100, 10, 90),
    (100, 10, 100),
    (100, 10, 120),
    (100, 10, 121),
    # rows=37, b=5: seen=35; warn iff 10N < 315 or 10N >= 440
    (37, 5, 31),
    (37, 5, 32),
    (37, 5, 43),
    (37, 5, 44),
    # rows=3, b=8: one partial batch, seen=0; warn iff 10N >= 88
    (3, 8, 8),
    (3, 8, 9),
]


@pytest.mark.parametrize(
    ("rows", "b", "declared", "drop_last"),
    # drop_last with rows < b hands out no batch: test_audit_runs_after_a_pass_with_no_batches
    [(r, b, n, dl) for r, b, n in BOUNDARIES for dl in (False, True) if not (dl and r < b)],
)
@pytest.mark.parametrize("shuffle", [False, True])
def test_audit_window_boundaries_exactly(rows, b, declared, drop_last, shuffle):
    """TotalSizeWarning fires exactly when 10N < 9*seen or 10N >= 11*(seen + b)."""
    seen = (rows // b) * b
    loader = DataLoader(
        sized_chunks(rows),
        b,
        shuffle=shuffle,
        drop_last=drop_last,
        total_size=declared,
        seed=1,
        buffer_size=16,
    )
    epochs, rec = run_epochs(loader)
    kept = flat(epochs[0])
    assert len(kept) == len(set(kept)) == (seen if drop_last else rows)
    assert set(kept) <= set(range(rows))
    got = size_warnings(rec)
    if outside(declared, seen, b):
        assert len(got) == 1
        msg = str(got[0].message)
        assert str(declared) in msg and str(seen) in msg
        assert issubclass(got[0].category, UserWarning)
    else:
        assert got == []
    assert len(rec) == len(got)  # nothing else is warned


def test_audit_warns_once_not_every_epoch():
    """A wrong N is warned about once per loader, not again on later epochs."""
    loader = DataLoader(sized_chunks(100), 10, total_size=60, shuffle=True)
    _, rec = run_epochs(loader, 4)
    assert len(size_warnings(rec)) == 1


def test_audit_message_names_both_numbers():
    """The warning names the declared N and the rows seen."""
    loader = DataLoader(sized_chunks(100), 10, total_size=57, shuffle=False)
    _, rec = run_epochs(loader)
    (w,) = size_warnings(rec)
    msg = str(w.message)
    assert "57" in msg and "100" in msg


def test_audit_warning_points_at_the_users_loop():
    """The TotalSizeWarning points at the user's line that drew the pass's last batch."""
    loader = DataLoader(sized_chunks(100), 10, total_size=57, shuffle=False)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for _ in loader:
            pass
    (w,) = size_warnings(rec)
    assert w.filename == __file__


def test_audit_counts_only_full_batches_as_seen():
    """seen counts rows in full batches only: 99 rows in batches of 10 give seen = 90."""
    # N = 99 is right; with seen = 90 the window is 81 <= N < 110, so no warning
    loader = DataLoader(sized_chunks(99), 10, total_size=99, shuffle=False)
    _, rec = run_epochs(loader)
    assert rec == []
    # N = 80: 10*80 = 800 < 9*90 = 810 -> warn, naming seen=90
    loader = DataLoader(sized_chunks(99), 10, total_size=80, shuffle=False)
    _, rec = run_epochs(loader)
    (w,) = size_warnings(rec)
    assert "90" in str(w.message)


@pytest.mark.parametrize(
    ("rows", "b", "declared", "take"),
    [
        (50, 10, 41, 5),  # N too small, and len(loader) == 5 == batches of the stream
        (50, 10, 44, 5),
        (50, 10, 100, 5),  # N too large: take only the 5 batches the stream has
        (47, 10, 30, 5),
    ],
)
@pytest.mark.parametrize("shuffle", [False, True])
def test_audit_has_fired_when_the_last_batch_is_yielded(rows, b, declared, take, shuffle):
    """Iteration runs one batch ahead: the warning is recorded once the last batch is out."""
    loader = DataLoader(sized_chunks(rows), b, total_size=declared, shuffle=shuffle, seed=3)
    if declared in (41, 44):  # a wrong N that still gives len(loader) == batches streamed
        assert len(loader) == take
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        it = iter(loader)
        next(it)
        assert size_warnings(rec) == []  # not before the pass is (nearly) done
        for _ in range(take - 1):
            next(it)
        # never called next() past the last batch, never saw StopIteration
        assert len(size_warnings(rec)) == 1


def test_audit_fires_with_next_into_before_it_returns_zero():
    """With next_into, the warning is recorded by the time the last batch is written."""
    loader = DataLoader(sized_chunks(50), 10, total_size=41, shuffle=False)
    bx, by = np.empty((10, 2)), np.empty((10, 1))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for _ in range(len(loader)):
            assert loader.next_into(bx, by) == 10
        assert len(size_warnings(rec)) == 1


def test_audit_not_run_on_a_partial_pass():
    """An epoch left after its first batch is no full pass: no audit yet."""
    loader = DataLoader(sized_chunks(200), 10, total_size=50, shuffle=False)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        it = iter(loader)
        next(it)
        next(it)
        loader.reset()
    assert rec == []


@pytest.mark.parametrize("shuffle", [False, True])
def test_audit_after_resume_counts_the_whole_pass(shuffle):
    """A pass resumed from state_dict is audited as a whole: a correct N never warns."""
    a = DataLoader(sized_chunks(100), 10, total_size=100, shuffle=shuffle, seed=4)
    it = iter(a)
    for _ in range(6):
        next(it)
    b = DataLoader(sized_chunks(100), 10, total_size=100, shuffle=shuffle, seed=4)
    b.load_state_dict(a.state_dict())
    got, rec = run_epochs(b)
    assert len(got[0]) == 4
    assert rec == []


# -- shards ----------------------------------------------------------------------------------


def shard_expectations(rows, declared, shards, b, drop_last):
    """Per shard: (n, rows it streams, seen) from DESIGN.md's rules, in integers."""
    out = []
    for s in range(shards):
        start, stop = s * declared // shards, (s + 1) * declared // shards
        end = rows if s == shards - 1 else min(stop, rows)  # the last takes rows past N
        got = max(0, end - start)
        out.append((stop - start, got, (got // b) * b))
    return out


@pytest.mark.parametrize(
    ("rows", "declared", "shards", "b"),
    [
        (100, 100, 3, 5),  # right: nobody warns
        (100, 80, 2, 10),  # shard 1 takes rows 40..99: 60 seen vs n=40
        (100, 180, 2, 10),  # shard 1 holds 10 rows vs n=90
        (60, 45, 3, 5),  # only the last shard is off
        (97, 100, 4, 6),  # small shortfall: inside every window
    ],
)
@pytest.mark.parametrize("shuffle", [False, True])
def test_each_shard_audits_its_own_share(rows, declared, shards, b, shuffle):
    """With several shards each compares its own seen with loader.n by the same margins."""
    all_rows = []
    for s, (n, got, seen) in enumerate(
        shard_expectations(rows, declared, shards, b, drop_last=False)
    ):
        assert got > 0
        loader = DataLoader(
            sized_chunks(rows),
            b,
            shuffle=shuffle,
            seed=2,
            total_size=declared,
            num_shards=shards,
            shard_index=s,
            buffer_size=12,
        )
        assert loader.n == n
        epochs, rec = run_epochs(loader, 2)
        assert len(epochs[0]) and sorted(flat(epochs[0])) == sorted(flat(epochs[1]))
        all_rows += flat(epochs[0])
        warned = size_warnings(rec)
        if outside(n, seen, b):
            assert len(warned) == 1, (s, n, seen)
            msg = str(warned[0].message)
            assert str(n) in msg and str(seen) in msg
        else:
            assert warned == [], (s, n, seen)
    assert sorted(all_rows) == list(range(rows))  # every row once, even with N wrong


@pytest.mark.parametrize(
    ("rows", "declared", "shards", "b", "drop_last"),
    [
        (3, 100, 1, 8, True),  # the only partial batch is dropped: seen = 0, N = 100
        (0, 50, 1, 4, False),  # the stream is empty, N = 50
        (20, 40, 2, 4, False),  # shard 1 owns rows [20, 40): it gets none, n = 20
    ],
)
def test_audit_runs_after_a_pass_with_no_batches(rows, declared, shards, b, drop_last):
    """A full pass handing out no batch is still audited: seen = 0 warns when 10N >= 11b."""
    s = shards - 1
    loader = DataLoader(
        chunks_of([rows, 0], d=2, l=1),
        b,
        shuffle=False,
        drop_last=drop_last,
        total_size=declared,
        num_shards=shards,
        shard_index=s,
    )
    n = loader.n
    assert outside(n, 0, b)
    epochs, rec = run_epochs(loader)
    assert epochs == [[]]
    assert len(size_warnings(rec)) == 1


@settings(max_examples=60)
@given(
    rows=st.integers(1, 60),
    declared=st.integers(1, 90),
    shards=st.integers(1, 4),
    b=st.integers(1, 9),
    drop_last=st.booleans(),
    chunk=st.integers(1, 13),
)
def test_audit_matches_the_window_for_any_sizes(rows, declared, shards, b, drop_last, chunk):
    """For any stream, N, shard count and batch size, each shard warns iff outside its window."""
    exp = shard_expectations(rows, declared, shards, b, drop_last)
    for s, (n, got, seen) in enumerate(exp):
        batches = (got // b) if drop_last else -(-got // b)
        if batches == 0:
            continue  # covered by test_audit_runs_after_a_pass_with_no_batches
        loader = DataLoader(
            sized_chunks(rows, chunk),
            b,
            shuffle=False,
            drop_last=drop_last,
            total_size=declared,
            num_shards=shards,
            shard_index=s,
        )
        _, rec = run_epochs(loader, 1)
        assert len(size_warnings(rec)) == int(outside(n, seen, b)), (s, n, got, seen)


def test_auto_counted_total_is_never_flagged_by_the_audit():
    """N found by the counting pass agrees with the stream: the audit stays quiet, per shard too."""
    sizes = [7, 0, 13, 1, 9]
    for s in range(3):
        with pytest.warns(UserWarning, match="count"):
            loader = DataLoader(
                chunks_of(sizes, d=2, l=1), 4, num_shards=3, shard_index=s, drop_last=True
            )
        _, rec = run_epochs(loader, 2)
        assert rec == []


def test_single_row_chunks_counted_by_auto():
    """The counting pass counts 1-D single-row chunks as one row each."""

    def gen():
        for i in range(9):
            yield make_x([i], 2)[0], make_y([i], 1)[0]

    with pytest.warns(UserWarning, match="total_size="):
        loader = DataLoader(gen, 4, shuffle=False)
    assert loader.total_size == 9 and len(loader) == 3
    assert flat(collect(loader, 2, 1)) == list(range(9))


def test_chunk_bounds_helper():
    """(helper) chunk_bounds gives consecutive id ranges."""
    assert chunk_bounds([2, 0, 3]) == [(0, 2), (2, 2), (2, 5)]
