"""ndf_blocks: an .ndf read as shuffled contiguous blocks mixed in a buffer."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from laws import check_epoch

from exactbatch import DataLoader, ndf_blocks, open_ndf, save_ndf
from exactbatch.order import chunk_order


@pytest.fixture
def ndf(tmp_path):
    n = 1000
    x = np.zeros((n, 2))
    x[:, 0] = np.arange(n)
    save_ndf(tmp_path / "b.ndf", (x, np.arange(n) % 3))
    with open_ndf(tmp_path / "b.ndf") as f:
        yield f


def row_ids(loader):
    return np.concatenate([xb[:, 0] for xb, _ in loader]).astype(np.int64)


@settings(max_examples=40, deadline=None)
@given(
    block=st.integers(1, 1200),
    batch=st.integers(1, 300),
    buffer=st.integers(1, 2000),
    shards=st.integers(1, 4),
    seed=st.integers(0, 99),
)
def test_block_shuffle_hands_out_every_row_once(
    tmp_path_factory, block, batch, buffer, shards, seed
):
    """Shuffled blocks through a buffer: the epoch law (laws.check_epoch), across shards
    every row exactly once."""
    path = tmp_path_factory.getbasetemp() / "prop.ndf"
    if not path.exists():
        x = np.zeros((1000, 2))
        x[:, 0] = np.arange(1000)
        save_ndf(path, x)
    with open_ndf(path) as f:
        got = [
            [
                xb[:, 0].astype(np.int64).tolist()
                for xb, _ in DataLoader(
                    ndf_blocks(f, block),
                    batch,
                    buffer_size=buffer,
                    seed=seed,
                    num_shards=shards,
                    shard_index=s,
                )
            ]
            for s in range(shards)
        ]
    check_epoch(got, n=1000, batch_size=batch, drop_last=False, shuffle=True)


def test_block_order_changes_per_epoch(ndf):
    """The block order is reshuffled every epoch (a small buffer shows it)."""
    loader = DataLoader(ndf_blocks(ndf, 50), 50, buffer_size=50, seed=2)
    first = [row_ids(loader)[0] // 50 for _ in range(4)]
    assert len(set(first)) > 1


@pytest.mark.parametrize("s", [0, 1])
def test_each_shards_block_order_is_keyed_by_its_shard(ndf, s):
    """Shard s of 2 reads its 10 blocks in chunk_order(10, seed, epoch, shard=s) (a
    buffer and batches of one block show the order)."""
    loader = DataLoader(
        ndf_blocks(ndf, 50), 50, buffer_size=50, seed=2, num_shards=2, shard_index=s
    )
    for epoch in range(2):
        got = [int(xb[:, 0].min()) // 50 for xb, _ in loader]
        want = chunk_order(10, seed=2, epoch=epoch, shard=s) + 10 * s
        assert got == want.tolist()


@pytest.mark.parametrize("shuffle", [False, True])
def test_one_read_per_block_and_every_row_read_once(ndf, shuffle, monkeypatch):
    """Each block is one positional read, also where a shuffle buffer's room ends
    inside it (500 rows a fill, the first 52 of them (500 % 64) kept from the last)."""
    import os

    calls = []
    real = os.preadv
    monkeypatch.setattr(os, "preadv", lambda *a: calls.append(real(*a)) or calls[-1])
    list(DataLoader(ndf_blocks(ndf, 100), 64, shuffle=shuffle, buffer_size=500))
    assert len(calls) == 10 and sum(calls) == 1000 * 24  # every row's 24 bytes, once


def test_bad_arguments(ndf):
    """A non-NdfFile or a bad block size is refused, naming the argument."""
    with pytest.raises(TypeError, match="NdfFile"):
        ndf_blocks("b.ndf")
    with pytest.raises(ValueError, match="block_rows"):
        ndf_blocks(ndf, 0)


def test_the_kernel_is_told_of_the_blocks_coming_next_in_epoch_order(ndf, monkeypatch):
    """Shuffled block reads keep the disk busy: each block is announced (POSIX_FADV_WILLNEED
    over exactly its bytes), in the epoch's block order, at most 16 blocks before it is
    read (hints come from a thread of their own)."""
    import os
    import threading

    import exactbatch.ndf.local as file_module  # where the hint is given
    from exactbatch.feeds import streamed
    from exactbatch.feeds.streamed import HINT_AHEAD

    src = ndf_blocks(ndf, 10)  # 100 blocks of 10 rows (24-byte rows)
    hinted, read = [], []  # hinted: (block, blocks read when it was hinted)
    announced = [threading.Event() for _ in range(100)]

    def fadvise(fd, offset, length, advice):
        assert advice == os.POSIX_FADV_WILLNEED and length == 240
        block = (offset - 28) // 240
        hinted.append((block, len(read)))
        announced[block].set()

    monkeypatch.setattr(file_module.os, "posix_fadvise", fadvise)
    real = src.read_rows_into  # how a shuffle buffer reads a block, straight into itself

    def read_rows_into(row, out):
        i = row // 10
        assert row % 10 == 0 and len(out) == 10  # 200-row fills: blocks are not cut
        if file_module._FADVISE is not None:  # wait for the hint thread to announce it
            assert announced[i].wait(10), f"block {i} read before it was announced"
        read.append(i)
        return real(row, out)

    monkeypatch.setattr(src, "read_rows_into", read_rows_into)
    # one block at a time, straight into the buffer (several at once: test_read_ahead.py)
    monkeypatch.setattr(streamed, "read_depth", lambda *args: 1)
    loader = DataLoader(src, 50, shuffle=True, seed=4, buffer_size=200)
    got = row_ids(loader)
    assert np.array_equal(np.sort(got), np.arange(1000))
    assert sorted(read) == list(range(100)) and read != list(range(100))  # shuffled order
    if file_module._FADVISE is None:
        assert hinted == []
        return
    assert [b for b, _ in hinted] == read  # every block, in the same order
    assert all(j < done + HINT_AHEAD + 1 for j, (_, done) in enumerate(hinted))
    assert HINT_AHEAD == 16


def test_a_loader_keeps_its_shuffle_buffer_across_epochs_and_the_order_is_unchanged(ndf):
    """The buffer is allocated once per loader (not per epoch); reusing it changes
    nothing: each epoch's batches equal a fresh loader's for that epoch."""
    import exactbatch.batching.gather as buffer_module

    made = []
    real = buffer_module.np.empty

    def spy(shape, *a, **k):
        out = real(shape, *a, **k)
        if isinstance(shape, tuple) and shape[0] >= 300:  # the buffer, not a batch
            made.append(shape)
        return out

    loader = DataLoader(ndf_blocks(ndf, 25), 32, shuffle=True, seed=9, buffer_size=300)
    buffer_module.np.empty = spy
    try:
        epochs = []
        for e in range(3):
            loader.set_epoch(e)
            epochs.append([xb[:, 0].copy() for xb, _ in loader])
    finally:
        buffer_module.np.empty = real
    assert [shape[1] for shape in made] == [3]  # the buffer of whole rows, once
    for e, batches in enumerate(epochs):
        fresh = DataLoader(ndf_blocks(ndf, 25), 32, shuffle=True, seed=9, buffer_size=300)
        fresh.set_epoch(e)
        want = [xb[:, 0] for xb, _ in fresh]
        assert len(batches) == len(want)
        assert all(np.array_equal(a, b) for a, b in zip(batches, want, strict=True))


# -- over a sharded dataset: blocks never cross a part boundary ------------------------------

PART_SIZES = [13, 0, 30, 1, 21, 9]


@pytest.fixture
def sharded(tmp_path):
    from helpers import write_ndf_dataset

    from exactbatch import open_ndf_dataset

    with open_ndf_dataset(write_ndf_dataset(tmp_path / "ds", PART_SIZES, d=2, l=1)) as ds:
        yield ds


def test_blocks_of_a_dataset_stop_at_part_boundaries(sharded):
    """Each part is cut into blocks from its first row; a part's last block is short."""
    blocks = ndf_blocks(sharded, 8)
    # parts: [0, 13), [13, 13), [13, 43), [43, 44), [44, 65), [65, 74)
    assert blocks.chunk_starts.tolist() == [0, 8, 13, 21, 29, 37, 43, 44, 52, 60, 65, 73]
    assert blocks.chunk_rows.tolist() == [8, 5, 8, 8, 8, 6, 1, 8, 8, 5, 8, 1]
    assert blocks.n_rows == sum(PART_SIZES) == int(blocks.chunk_rows.sum())
    for i in range(len(blocks)):
        x, y = blocks.read_chunk(i)
        a = int(blocks.chunk_starts[i])
        assert x[:, 0].tolist() == list(range(a, a + int(blocks.chunk_rows[i])))
        assert y.shape == (len(x), 1)


def test_block_shuffle_over_a_dataset(sharded):
    """The epoch law across shards; a shard opens only the parts its blocks lie in."""
    n = sum(PART_SIZES)
    got = []
    for s in range(2):
        loader = DataLoader(ndf_blocks(sharded, 6), 7, buffer_size=20, num_shards=2, shard_index=s)
        got.append([xb[:, 0].astype(np.int64).tolist() for xb, _ in loader])
        if s == 0:
            assert sharded.open_parts == (0, 2)  # shard 0 owns rows [0, 37): parts 0 and 2
    check_epoch(got, n=n, batch_size=7, drop_last=False, shuffle=True)


def test_ndf_blocks_refuses_other_sources():
    with pytest.raises(TypeError, match="NdfFile from open_ndf or an NdfDataset"):
        ndf_blocks(np.zeros((3, 2)))


def test_read_rows_into_reads_rows_straight_into_out_and_refuses_another_out(ndf):
    """What a shuffle buffer reads blocks with: rows into a whole-row array; an array
    of another width, dtype or layout, or rows past the end, is a clear error naming
    it, never rows read into the wrong places."""
    src = ndf_blocks(ndf, 100)
    out = np.full((5, 3), np.nan)
    src.read_rows_into(995, out)
    np.testing.assert_array_equal(out[:, 0], np.arange(995, 1000))
    with pytest.raises(ValueError, match=r"out must have shape \(5, 3\)"):
        src.read_rows_into(0, np.empty((5, 2)))
    with pytest.raises(TypeError, match="out must have dtype float64"):
        src.read_rows_into(0, np.empty((5, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="out must be a writeable C-contiguous array"):
        src.read_rows_into(0, np.empty((3, 5)).T[:, :3].copy(order="F"))
    with pytest.raises(IndexError, match=r"rows 996\.\.1000 are past the last row"):
        src.read_rows_into(996, out)
    with pytest.raises(ValueError, match="row must be >= 0"):
        src.read_rows_into(-1, out)


def test_read_block_and_iteration_give_each_block_s_rows(tmp_path):
    """read_block(i): block i as whole rows of its own (x then y a row) from its first
    row on; iterating gives every block's (x, y) in order."""
    x = np.arange(22.0).reshape(11, 2)
    y = -np.arange(11.0).reshape(11, 1)
    save_ndf(tmp_path / "b.ndf", (x, y))
    blocks = ndf_blocks(open_ndf(tmp_path / "b.ndf"), 4)
    for i, a in enumerate((0, 4, 8)):
        b = min(11, a + 4)
        held = blocks.read_block(i)
        assert held.first == a
        assert held.whole.dtype == np.float64 and held.whole.flags.c_contiguous
        np.testing.assert_array_equal(held.whole, np.concatenate((x[a:b], y[a:b]), axis=1))
    got = list(blocks)
    assert len(got) == 3
    np.testing.assert_array_equal(np.concatenate([gx for gx, _ in got]), x)
    np.testing.assert_array_equal(np.concatenate([gy for _, gy in got]), y)


def test_read_rows_into_a_list_is_a_type_error_naming_out(tmp_path):
    save_ndf(tmp_path / "b.ndf", np.zeros((4, 2)))
    blocks = ndf_blocks(open_ndf(tmp_path / "b.ndf"), 2)
    with pytest.raises(TypeError, match="^out must be a float64 NumPy array of shape"):
        blocks.read_rows_into(0, [[0.0, 0.0]])


def test_read_rows_into_anything_but_a_2d_array_names_the_shape_of_no_rows(tmp_path):
    """Without a row count of its own (a list, a 1-D array), ``out`` is checked against
    no rows: the message shows (0, d + l)."""
    save_ndf(tmp_path / "b.ndf", np.zeros((4, 2)))
    blocks = ndf_blocks(open_ndf(tmp_path / "b.ndf"), 2)
    with pytest.raises(TypeError) as info:
        blocks.read_rows_into(0, [[0.0, 0.0]])
    assert str(info.value) == "out must be a float64 NumPy array of shape (0, 2); got list"
    with pytest.raises(ValueError) as info:
        blocks.read_rows_into(0, np.empty(2))
    assert str(info.value) == "out must have shape (0, 2); got (2,)"


def test_the_default_block_is_about_4_mib_of_rows_and_never_empty(tmp_path):
    """block_rows=None: 4 MiB // the row's bytes (8 a column), at least one row."""
    save_ndf(tmp_path / "b.ndf", (np.zeros((10, 3)), np.zeros((10, 2))))
    with open_ndf(tmp_path / "b.ndf") as f:
        blocks = ndf_blocks(f)
        assert blocks.block_rows == (4 << 20) // 40 == 104857
        assert blocks.chunk_rows.tolist() == [10] and blocks.chunk_starts.tolist() == [0]
        assert blocks.chunk_rows.dtype == blocks.chunk_starts.dtype == np.int64
    save_ndf(tmp_path / "one.ndf", np.zeros((10, 1)))  # 8 bytes a row
    with open_ndf(tmp_path / "one.ndf") as f:
        assert ndf_blocks(f).block_rows == 1 << 19
    wide = (4 << 20) // 8 + 1  # a row of more than 4 MiB: blocks of one row
    save_ndf(tmp_path / "wide.ndf", np.zeros((2, wide)))
    with open_ndf(tmp_path / "wide.ndf") as f:
        blocks = ndf_blocks(f)
        assert blocks.block_rows == 1 and blocks.chunk_rows.tolist() == [1, 1]


def test_ndf_blocks_refusals_name_what_was_given(ndf):
    with pytest.raises(TypeError) as info:
        ndf_blocks(np.zeros((3, 2)))
    assert str(info.value) == (
        "ndf_blocks needs an NdfFile from open_ndf or an NdfDataset from open_ndf_dataset; "
        "got ndarray"
    )
    with pytest.raises(ValueError, match="^block_rows must be >= 1"):
        ndf_blocks(ndf, 0)
    with pytest.raises(TypeError, match="^block_rows must be"):
        ndf_blocks(ndf, 2.5)
