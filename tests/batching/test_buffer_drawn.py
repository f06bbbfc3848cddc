"""A one-piece shuffle buffer draws a large fill's permutation on a thread of its own
while the fill is read (buffer_whole.DRAW_AHEAD_ROWS, gather.Drawn): the very batches,
digests, row ids, dropped rows and final generator state of the draw made after the
fill, whether the stream's size_hint (or the size it was declared to have: expect) is
right, short, long or unknown."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactbatch.batching import buffer_whole
from exactbatch.batching.buffer_whole import shuffle_whole
from exactbatch.order.digest import Tally


def _run(chunks, b, size, hint, drop_last, with_rows, seed, ahead_rows, expect=None):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(buffer_whole, "DRAW_AHEAD_ROWS", ahead_rows)
        rng, dropped = np.random.default_rng(seed), Tally()
        groups = [
            [tuple(batch) for batch in group]
            for group in shuffle_whole(
                iter(chunks),
                b,
                size,
                rng,
                drop_last,
                hint,
                None,
                dropped,
                np.float64,
                with_rows,
                expect=expect,
            )
        ]
    return groups, (dropped.rows, dropped.digest), rng.bit_generator.state


def _flat(groups):
    return [
        (x.tobytes(), y.tobytes(), digest, *(r.tolist() for r in rest))
        for group in groups
        for x, y, digest, *rest in group
    ]


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_fill_drawn_ahead_gives_the_same_batches_and_generator_state(data):
    n = data.draw(st.integers(0, 800))
    b = data.draw(st.integers(1, 40))
    size = max(b, data.draw(st.integers(1, 300)))
    sizes, left = [], n
    while left:
        sizes.append(min(left, data.draw(st.integers(1, 150))))
        left -= sizes[-1]
    sizes_of = st.sampled_from([None, n, n - 1, n + 1, n + size, max(0, n - size), -1])
    hint = data.draw(sizes_of.filter(lambda v: v != -1))
    expect = data.draw(sizes_of)  # a declared size: only read where hint is None
    ahead_rows = data.draw(st.sampled_from([1, 2, size, size + 1]))
    drop_last, with_rows = data.draw(st.booleans()), data.draw(st.booleans())
    seed = data.draw(st.integers(0, 2**32 - 1))
    rows = np.arange(n * 3, dtype=np.float64).reshape(n, 3)
    chunks = []
    at = 0
    for k in sizes:
        chunks.append((rows[at : at + k, :2], rows[at : at + k, 2:], at))
        at += k
    args = (chunks, b, size, hint, drop_last, with_rows, seed)
    want = _run(*args, ahead_rows=1 << 62)  # never ahead: drawn after each fill
    got = _run(*args, ahead_rows=ahead_rows, expect=expect)
    assert [len(g) for g in got[0]] == [len(g) for g in want[0]]
    assert _flat(got[0]) == _flat(want[0])
    assert got[1:] == want[1:]


def test_a_large_fill_is_drawn_on_a_thread_of_its_own(monkeypatch):
    names = []
    real = np.random.Generator.permutation

    class Spy:
        def __init__(self, rng):
            self.rng, self.bit_generator = rng, rng.bit_generator

        def permutation(self, count):
            names.append(threading.current_thread().name)
            return real(self.rng, count)

    rows = np.zeros((1000, 1))
    chunks = [(rows[a : a + 100], rows[a : a + 100, :0], a) for a in range(0, 1000, 100)]
    monkeypatch.setattr(buffer_whole, "DRAW_AHEAD_ROWS", 300)
    rng = Spy(np.random.default_rng(0))
    for _ in shuffle_whole(iter(chunks), 10, 300, rng, False, 1000, None, None):
        pass
    # three fills of 300 drawn ahead; the last (100 rows: below the threshold) here
    assert names == ["exactbatch-permutation"] * 3 + [threading.current_thread().name]


def test_a_declared_size_draws_each_fill_once_and_never_sizes_the_buffer(monkeypatch):
    """A stream whose size its source does not vouch for (size_hint None) but which was
    declared (expect): the last fill is drawn ahead for its own rows, not for the whole
    buffer and again; the buffer still grows only as rows arrive."""
    counts = []
    real = np.random.Generator.permutation

    class Spy:
        def __init__(self, rng):
            self.rng, self.bit_generator = rng, rng.bit_generator

        def permutation(self, count):
            counts.append(count)
            return real(self.rng, count)

    rows = np.zeros((1000, 1))
    chunks = [(rows[a : a + 100], rows[a : a + 100, :0], a) for a in range(0, 1000, 100)]
    monkeypatch.setattr(buffer_whole, "DRAW_AHEAD_ROWS", 300)
    spare = [(np.zeros((400, 1)), np.zeros(400, dtype=np.uint64))]  # a full buffer, kept
    for _ in shuffle_whole(iter(chunks), 10, 400, Spy(np.random.default_rng(0)), False, None,
                           spare, None, expect=1000):  # fmt: skip
        pass
    assert counts == [400, 400, 200]  # (without expect: 400, 400, 400 and 200 again)
    grown = []
    for _ in shuffle_whole(iter(chunks[:2]), 10, 50_000, np.random.default_rng(0), False,
                           None, grown, None, expect=10**9):  # fmt: skip
        pass
    assert len(grown[0][0]) == 1 << 14  # the first allocation, not the buffer's 50,000
