"""What both shuffle buffers share (exactbatch.batching.gather): a buffer of whole
rows from the spare list only when it fits, with its row ids as uint64, and
chunks (arrays, or rows read straight into it) filled into it."""

from __future__ import annotations

import numpy as np
import pytest

from exactbatch.batching.gather import buffer_arrays, row_ids


def test_a_spare_buffer_is_reused_when_it_fits():
    old = buffer_arrays([], 100, 3, 1)
    spare = [old]
    got = buffer_arrays(spare, 80, 3, 1)
    assert spare == [] and all(a is b for a, b in zip(got, old, strict=True))


@pytest.mark.parametrize(("rows", "d", "l"), [(101, 3, 1), (100, 2, 1), (100, 3, 2)])
def test_a_spare_buffer_too_small_or_of_other_widths_is_not_reused(rows, d, l):  # noqa: E741
    old = buffer_arrays([], 100, 3, 1)
    spare = [old]
    bw, bh = buffer_arrays(spare, rows, d, l)
    assert spare == [] and bw is not old[0]
    assert bw.shape == (rows, d + l) and bh.shape == (rows,) and bw.flags.c_contiguous
    assert bw.dtype == np.float64 and bh.dtype == np.uint64


def test_row_ids_are_uint64_from_the_chunks_first_row():
    ids = row_ids(2**60, 5, 3)
    assert ids.dtype == np.uint64 and ids.tolist() == [2**60 + 5, 2**60 + 6, 2**60 + 7]
