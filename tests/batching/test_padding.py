"""even_batches="pad"'s pieces (exactbatch.batching.padding): the argument's check, the
padding job, and the batches made full with a mask. (The laws over shards, resume and
certify: tests/loader/test_pad.py and the law matrix.)"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_data

from exactbatch import DataLoader
from exactbatch.batching.padding import PAD, PadJob, check_even_batches, masked, masked_group


def shape():
    return 3, 1, np.float32, np.int64, True


def test_check_even_batches_takes_false_true_and_pad_only():
    assert check_even_batches(False) is False and check_even_batches(np.bool_(True)) is True
    assert check_even_batches("pad") == PAD == "pad"
    with pytest.raises(ValueError, match=r"even_batches must be False, True or 'pad'; got 'Pad'"):
        check_even_batches("Pad")
    for bad in (None, 1, 0.0, b"pad"):
        with pytest.raises(TypeError, match="even_batches must be"):
            check_even_batches(bad)


def test_a_pad_job_holds_no_row_and_digests_as_the_empty_set():
    job = PadJob(4)
    assert (job.k, job.size, job.digest, job.rows, job.take()) == (4, 0, 0, None, None)
    x, y = np.ones((2, 2)), np.ones((2, 1))
    job.fill(x, y)
    job.fill_rows(x[:, 0])
    assert (x == 1).all() and (y == 1).all()


def test_a_padding_batch_is_zeros_ids_minus_one_and_an_all_false_mask():
    x, y, ids, mask = masked(None, 4, shape)
    assert x.shape == (4, 3) and x.dtype == np.float32 and (x == 0).all()
    assert y.shape == (4, 1) and y.dtype == np.int64 and (y == 0).all()
    assert ids.tolist() == [-1] * 4 and mask.dtype == bool and not mask.any()
    x, y, mask = masked(None, 2, lambda: (2, 0, np.float64, np.float64, False))
    assert x.shape == (2, 2) and y.shape == (2, 0) and mask.tolist() == [False, False]


def test_a_short_batch_is_copied_its_rows_first_then_zeros():
    x, y = np.arange(6.0).reshape(2, 3) + 1, np.array([[5], [6]])
    px, py, ids, mask = masked((x, y, np.array([8, 9])), 3, shape)
    assert px.tolist() == [[1, 2, 3], [4, 5, 6], [0, 0, 0]] and py.tolist() == [[5], [6], [0]]
    assert ids.tolist() == [8, 9, -1] and mask.tolist() == [True, True, False]
    px, py, mask = masked((x, y), 4, shape)
    assert px.shape == (4, 3) and mask.tolist() == [True, True, False, False]
    assert px.dtype == x.dtype and py.dtype == y.dtype


def test_a_short_batch_keeps_its_own_dtypes():
    """The padded copy of a short float32 batch is float32 (not NumPy's default float64),
    its labels keep theirs: the padded batch has the dtype of every other batch."""
    x = np.array([[1.5, 2.5]], dtype=np.float32)
    y = np.array([[7]], dtype=np.int32)
    px, py, mask = masked((x, y), 3, shape)
    assert px.dtype == np.float32 and py.dtype == np.int32
    assert px.tolist() == [[1.5, 2.5], [0, 0], [0, 0]] and py.tolist() == [[7], [0], [0]]
    px, py, ids, mask = masked((x.astype(np.float16), y, np.array([4])), 2, shape)
    assert px.dtype == np.float16 and ids.tolist() == [4, -1] and mask.tolist() == [True, False]


def test_every_mask_is_a_writable_array_of_its_own():
    """A caller may change a mask in place (``mask &= valid``): no mask is shared with
    another batch nor read-only, full batches' included (their ones are a copy)."""
    x, y = np.zeros((3, 3)), np.zeros((3, 1))
    singles = [masked((x, y), 3, shape)[-1] for _ in range(2)]
    group = [b[-1] for b in masked_group([(x, y), (x, y), None, (x[:1], y[:1])], 3, shape)]
    masks = singles + group
    assert [m.tolist() for m in masks] == [[True] * 3] * 4 + [[False] * 3, [True, False, False]]
    for m in masks:
        assert m.flags.writeable
        m[:] = False
    assert [
        m.tolist()
        for m in (masked((x, y), 3, shape)[-1], *[b[-1] for b in masked_group([(x, y)], 3, shape)])
    ] == [[True] * 3] * 2


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_loaders_masks_can_be_changed_in_place(prefetch):
    x, y = make_data(10)
    loader = DataLoader((x, y), 4, even_batches="pad", shuffle=False, prefetch=prefetch)
    got = []
    for *_, mask in loader:
        got.append(mask.tolist())
        mask[:] = False  # the next batch's mask is its own
    assert got == [[True] * 4, [True] * 4, [True, True, False, False]]
