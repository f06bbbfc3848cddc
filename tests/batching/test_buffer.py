"""The shuffle buffer's plan (exactbatch.batching.buffer): its size in rows, one piece or
two halves, and the window of rows a row can be mixed with (the module docs' rule)."""

from __future__ import annotations

import numpy as np
import pytest

from exactbatch.batching.buffer import (
    DEFAULT_BUFFER_BYTES,
    full_mix_buffer,
    mixing_window,
    shuffle_buffer,
)
from exactbatch.order.digest import rows_digest


def test_the_default_buffer_holds_64_mib_of_rows():
    """buffer_size=None: as many rows of d + l float64 as fill 64 MiB (rows of no values
    count as one value each)."""
    assert mixing_window(10, None, (3, 1)) == DEFAULT_BUFFER_BYTES // 32
    assert mixing_window(10, None, (0, 0)) == DEFAULT_BUFFER_BYTES // 8
    window = mixing_window(10, None, (2, 1))
    assert window == DEFAULT_BUFFER_BYTES // 24 and isinstance(window, int)  # whole rows


def test_the_window_is_the_buffer_at_least_one_batch_and_never_past_the_stream():
    assert mixing_window(10, 100, (3, 1)) == 100
    assert mixing_window(100, 10, (3, 1)) == 100  # a buffer under one batch is one batch
    assert mixing_window(10, 100, (3, 1), size_hint=40) == 40
    assert mixing_window(10, 100, (3, 1), size_hint=1) == 1
    assert mixing_window(10, 100, (3, 1), size_hint=0) == 1


def test_halves_when_chunked_larger_than_the_buffer_and_16_chunks_fit():
    """Two halves (a window of half the buffer, at least a batch) only for a chunk-indexed
    source (``ahead``: its chunks' rows) of known size larger than the buffer, when the
    buffer holds at least 16 chunks."""
    assert mixing_window(10, 1001, (3, 1), size_hint=5000, ahead=10) == 500
    assert mixing_window(10, 160, (3, 1), size_hint=5000, ahead=10) == 80  # 16 chunks
    assert mixing_window(10, 159, (3, 1), size_hint=5000, ahead=10) == 159  # fewer: one piece
    assert mixing_window(100, 160, (3, 1), size_hint=5000, ahead=10) == 100  # half < a batch
    assert mixing_window(10, 160, (3, 1), size_hint=160, ahead=10) == 160  # the stream fits
    assert mixing_window(10, 160, (3, 1), size_hint=161, ahead=10) == 80
    assert mixing_window(10, 160, (3, 1), size_hint=None, ahead=10) == 160  # size unknown
    assert mixing_window(10, 160, (3, 1), size_hint=5000, ahead=None) == 160  # not chunked


def test_a_full_mix_needs_a_buffer_of_the_whole_stream_or_1_when_it_fits_in_a_batch():
    assert full_mix_buffer(10, 5) == 1
    assert full_mix_buffer(10, 10) == 1
    assert full_mix_buffer(10, 11) == 11
    assert mixing_window(10, full_mix_buffer(10, 11), (3, 1), size_hint=11, ahead=1) == 11


def shuffled_rows(n, chunk, b, buffer_size, size_hint, ahead, spare, seed=0):
    """One pass of ``shuffle_buffer`` over ``(x, y, id0)`` chunks of ``chunk`` rows (x = the
    row's id, y = minus it): its row ids, checked to be each row once and the digests
    those of the rows."""

    def chunks():
        for a in range(0, n, chunk):
            x = np.arange(a, min(n, a + chunk), dtype=np.float64)[:, None]
            yield x, -x, a

    rng = np.random.default_rng(seed)
    groups = shuffle_buffer(chunks(), b, buffer_size, rng, False, size_hint, spare, ahead)
    batches = [batch for group in groups for batch in group]
    rows = np.concatenate([x[:, 0] for x, _, _ in batches])
    assert np.array_equal(np.sort(rows), np.arange(n))
    assert all(np.array_equal(y, -x) for x, y, _ in batches)
    assert all(d == rows_digest(x[:, 0].astype(np.int64)) for x, _, d in batches)
    return rows


@pytest.mark.parametrize(
    ("n", "chunk", "buffer_size", "size_hint", "ahead"),
    [
        (3000, 25, 600, 3000, 25),  # two halves
        (3000, 25, 600, None, None),  # one piece, the stream's size unknown
        (20000, 100, 30000, 20000, None),  # one piece larger than the stream
    ],
    ids=["halves", "whole", "whole-larger-than-the-stream"],
)
def test_the_buffer_is_kept_for_the_next_epoch_and_holds_no_more_than_promised(
    n, chunk, buffer_size, size_hint, ahead
):
    """The buffer is left in ``spare`` and the next pass reuses it (no new allocation);
    it holds at most buffer_size rows (never past the stream's size) and, in halves,
    room for each half's batch of leftovers."""
    b = 32
    spare = []
    first = shuffled_rows(n, chunk, b, buffer_size, size_hint, ahead, spare)
    ((bw, bh),) = spare  # whole rows (x then y) and their ids
    assert len(bw) == len(bh) <= min(buffer_size, size_hint or n) + 2 * b
    again = shuffled_rows(n, chunk, b, buffer_size, size_hint, ahead, spare)
    assert spare[0][0] is bw and spare[0][1] is bh
    assert np.array_equal(first, again)  # the same seed: the same order, reused or not
    without = shuffled_rows(n, chunk, b, buffer_size, size_hint, ahead, None)  # no spare
    assert np.array_equal(first, without)


def reference_order(n, b, window, seed, whole=False):
    """What the buffer promises, in plain Python: windows of rows in stream order,
    each after the last window's leftovers (fewer than a batch, in the order they
    were drawn), permuted with one ``rng.permutation`` of the window's rows; full
    batches are handed out, and the stream's last window is handed out whole.
    Two halves: ``window`` new rows a window; one piece (``whole``): new rows up
    to ``window`` rows with the leftovers. A stream ending just at a window's end
    gives one last window of the leftovers alone."""
    rng = np.random.default_rng(seed)
    out, kept, at = [], np.zeros(0, dtype=np.int64), 0
    while True:
        room = window - len(kept) if whole else window
        take = min(room, n - at)
        rows = np.concatenate((kept, np.arange(at, at + take)))
        at += take
        if whole and not len(rows):
            return np.concatenate(out)
        drawn = rows[rng.permutation(len(rows))]
        if at == n and (take < room or not take):
            return np.concatenate(out + [drawn])
        full = len(drawn) // b * b
        out.append(drawn[:full])
        kept = drawn[full:]


@pytest.mark.parametrize("n", [3000, 2990, 2700, 2701, 2969])
@pytest.mark.parametrize("halves", [True, False])
def test_the_order_is_the_documented_one_for_any_end_of_the_stream(n, halves):
    """Both algorithms hand rows out in exactly the documented order, whether the
    stream ends inside a window, at its end, or just after it (a half's permutation
    is drawn while the half is read, for the half's size, and drawn again for what it
    holds where the stream ends in it: the order does not change)."""
    b, chunk = 32, 25
    # halves: a buffer of 600 rows, 300 new rows a window; one piece: 300 rows a window
    size, ahead = (600, 25) if halves else (300, None)
    got = shuffled_rows(n, chunk, b, size, n, ahead, None, seed=7)
    assert np.array_equal(got, reference_order(n, b, 300, seed=7, whole=not halves))
