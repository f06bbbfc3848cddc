"""exactbatch.adapters.minibatch on its own: the checks the fit helpers (PyMC, NumPyro)
share, and the batch they read first. (Through each fit: tests/adapters/test_pymc.py,
test_numpyro.py; the refusal of even_batches='pad': tests/loader/test_pad.py.)"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import make_data

from exactbatch import DataLoader
from exactbatch.adapters.minibatch import (
    check_batch_rows,
    check_exact_batches,
    check_one_process,
    epoch_length,
    first_batch,
)


def pair(n):
    return make_data(n, 2, 1)


def _message(call, *args) -> str:
    with pytest.raises(ValueError) as info:
        call(*args)
    return str(info.value)


def test_exact_batches_let_through_full_batches_only():
    check_exact_batches(DataLoader(pair(12), 4), "fit")  # 12 rows in 3 full batches
    check_exact_batches(DataLoader(pair(13), 4, drop_last=True), "fit")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stream = DataLoader(lambda: iter([np.zeros((8, 3))]), 4, total_size=None, drop_last=True)
    check_exact_batches(stream, "fit")  # unknown size, but drop_last


def test_a_loader_like_object_without_the_newer_settings_passes():
    """Checked by what it has: one without ``even_batches`` or ``elastic`` is neither."""
    from types import SimpleNamespace

    class Plain(SimpleNamespace):
        def __len__(self):
            return 3

    plain = Plain(batch_size=4, n=12, drop_last=False, num_shards=1, total_size=12)
    check_exact_batches(plain, "fit")
    check_one_process(plain, "fit")


def test_a_padded_loader_is_refused_in_full():
    loader = DataLoader(pair(12), 4, even_batches="pad")
    assert _message(check_exact_batches, loader, "pm.fit") == (
        "pm.fit fits on training batches, but the loader has even_batches='pad', which is "
        "for evaluation: its padded rows (masked) would be fitted as data and its batches "
        "carry a mask. Build the loader with even_batches=False (or drop_last=True for "
        "batches of one shape)"
    )
    # an even_batches other than "pad" is not refused for it
    check_exact_batches(DataLoader(pair(12), 4, even_batches=True), "fit")


def test_a_partial_last_batch_is_refused_with_its_rows():
    assert "partial batch of 1 rows" in _message(check_exact_batches, DataLoader(pair(9), 4), "f")
    loader = DataLoader(pair(10), 4)
    assert _message(check_exact_batches, loader, "svi") == (
        "svi needs every batch to have exactly batch_size=4 rows (each batch is scaled by "
        "total_size / batch_size, and the shapes are fixed), but with drop_last=False the "
        "loader's 10 rows end in a partial batch of 2 rows: pass drop_last=True (or a "
        "batch_size that divides 10)"
    )


def test_a_stream_of_unknown_size_without_drop_last_is_refused():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = DataLoader(lambda: iter([np.zeros((8, 3))]), 4, total_size=None)
    assert _message(check_exact_batches, loader, "svi") == (
        "svi needs every batch to have exactly batch_size=4 rows (each batch is scaled by "
        "total_size / batch_size, and the shapes are fixed), but this stream has an "
        "unknown size (total_size=None) and drop_last=False, so its last batch may be "
        "partial: pass drop_last=True"
    )


def test_a_loader_with_no_full_batch_is_refused():
    loader = DataLoader(pair(3), 4, drop_last=True)
    assert _message(check_exact_batches, loader, "svi") == (
        "svi: the loader has no full batch (3 rows, batch_size=4, drop_last=True)"
    )
    empty = DataLoader(pair(0), 4)  # no rows: none partial, and none full
    assert _message(check_exact_batches, empty, "svi") == (
        "svi: the loader has no full batch (0 rows, batch_size=4, drop_last=False)"
    )


def test_one_process_refuses_shards_and_elastic_naming_which():
    check_one_process(DataLoader(pair(12), 4), "fit")
    sharded = DataLoader(pair(12), 4, num_shards=2, shard_index=1)
    elastic = DataLoader(pair(12), 4, elastic=True)
    tail = (
        " (num_shards='auto' gives each torchrun or Ray rank its shard): each rank would fit "
        "its own shard's rows scaled to total_size=12, as if they were all the data, and the "
        "ranks' posteriors would differ. Fit with one unsharded loader (num_shards=1, "
        "elastic=False) in one process, or write a data-parallel loop of your own that "
        "averages the gradients across ranks (an all-reduce) each step"
    )
    head = "fit runs in one process and averages no gradients across ranks, but the loader has "
    assert _message(check_one_process, sharded, "fit") == head + "num_shards=2" + tail
    assert _message(check_one_process, elastic, "fit") == head + "elastic=True" + tail


def test_batch_rows_must_be_the_batch_size():
    check_batch_rows(4, 4)
    assert _message(check_batch_rows, 3, 4) == (
        "the loader handed out a batch of 3 rows, not batch_size=4: pass drop_last=True (a "
        "stream's total_size may be wrong; see TotalSizeWarning)"
    )


def test_epoch_length_is_the_batches_or_none_for_a_stream_of_unknown_size():
    assert epoch_length(DataLoader(pair(10), 4)) == 3
    assert epoch_length(DataLoader(pair(10), 4, drop_last=True)) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stream = DataLoader(lambda: iter([np.zeros((8, 3))]), 4, total_size=None)
    assert epoch_length(stream) is None


def test_first_batch_is_the_next_one_and_leaves_the_cursor():
    def make():
        return DataLoader(pair(10), 4, seed=3, with_rows=True)

    want = [[tuple(b) for b in loader] for loader in [make()] for _ in range(2)]
    loader = make()
    xb, yb = first_batch(loader)  # a fresh epoch's first batch, without its rows
    assert np.array_equal(xb, want[0][0][0]) and np.array_equal(yb, want[0][0][1])
    it = iter(loader)
    assert np.array_equal(next(it)[0], want[0][0][0])  # the cursor stood where it was
    xb, yb = first_batch(loader)  # mid-epoch: the batch after the one taken
    assert np.array_equal(xb, want[0][1][0]) and np.array_equal(yb, want[0][1][1])
    rest = list(iter(loader))  # (first_batch's iter() left `it` stale) resumed where it stood
    assert [b[2].tolist() for b in rest] == [b[2].tolist() for b in want[0][1:]]
    xb, yb = first_batch(loader)  # the epoch at its end: the next epoch's first
    assert np.array_equal(xb, want[1][0][0]) and np.array_equal(yb, want[1][0][1])
    assert not np.array_equal(want[1][0][0], want[0][0][0])
    assert np.array_equal(next(iter(loader))[0], want[1][0][0])


def test_first_batch_after_an_epochs_last_batch_is_the_next_epochs_first():
    """Every batch of the epoch taken, its iterator not yet run out: the rest of the
    epoch is empty, so the next epoch's first batch."""
    loader = DataLoader(pair(8), 4, seed=3)
    twin = DataLoader(pair(8), 4, seed=3)
    list(twin)
    want = next(iter(twin))  # the second epoch's first batch
    it = iter(loader)
    next(it), next(it)  # both batches of the first epoch
    xb, yb = first_batch(loader)
    assert np.array_equal(xb, want[0]) and np.array_equal(yb, want[1])


def test_first_batch_of_a_loader_without_rows_is_an_error():
    assert _message(first_batch, DataLoader(pair(0), 4)) == (
        "the loader handed out no batch: it has no data to feed"
    )
