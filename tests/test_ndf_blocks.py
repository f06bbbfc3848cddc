"""ndf_blocks: an .ndf read as shuffled contiguous blocks mixed in a buffer."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactbatch import DataLoader, ndf_blocks, open_ndf, save_ndf


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


def test_blocks_cover_the_file_in_order_unshuffled(ndf):
    """Unshuffled, a block source streams the file's rows in file order."""
    loader = DataLoader(ndf_blocks(ndf, 64), 100, shuffle=False)
    assert loader.total_size == 1000 and len(loader) == 10
    assert np.array_equal(row_ids(loader), np.arange(1000))


@settings(max_examples=40, deadline=None)
@given(block=st.integers(1, 1200), batch=st.integers(1, 300), buffer=st.integers(1, 2000),
       shards=st.integers(1, 4), seed=st.integers(0, 99))
def test_block_shuffle_hands_out_every_row_once(tmp_path_factory, block, batch, buffer,
                                                shards, seed):
    """Shuffled blocks through a buffer: across shards every row exactly once."""
    path = tmp_path_factory.getbasetemp() / "prop.ndf"
    if not path.exists():
        x = np.zeros((1000, 2))
        x[:, 0] = np.arange(1000)
        save_ndf(path, x)
    with open_ndf(path) as f:
        got = np.concatenate([
            row_ids(DataLoader(ndf_blocks(f, block), batch, buffer_size=buffer, seed=seed,
                               num_shards=shards, shard_index=s))
            for s in range(shards)
        ])
    assert np.array_equal(np.sort(got), np.arange(1000))


def test_block_order_changes_per_epoch(ndf):
    """The block order is reshuffled every epoch (a small buffer shows it)."""
    loader = DataLoader(ndf_blocks(ndf, 50), 50, buffer_size=50, seed=2)
    first = [row_ids(loader)[0] // 50 for _ in range(4)]
    assert len(set(first)) > 1


def test_one_read_per_block(ndf, monkeypatch):
    """Each block is one positional read."""
    import os

    calls = []
    real = os.preadv
    monkeypatch.setattr(os, "preadv", lambda *a: calls.append(1) or real(*a))
    list(DataLoader(ndf_blocks(ndf, 100), 64, buffer_size=500))
    assert len(calls) == 10


def test_bad_arguments(ndf):
    """A non-NdfFile or a bad block size is refused, naming the argument."""
    with pytest.raises(TypeError, match="NdfFile"):
        ndf_blocks("b.ndf")
    with pytest.raises(ValueError, match="block_rows"):
        ndf_blocks(ndf, 0)
