"""Sequential reads of file regions (tools/ndf_stream.py), the reads convert and shuffle
stream through: blocks that span regions, one reused buffer, a file that ends early
named, a dataset's parts checked in turn."""

from __future__ import annotations

import errno

import numpy as np
import pytest
from helpers import write_ndf_dataset

from exactbatch import save_ndf
from exactbatch.tools.ndf_stream import (
    ndf_regions,
    read_blocks,
    read_into,
    read_regions_into,
    region_blocks,
    row_dtype,
)

# no warning from a read (a file opened with buffering=1 in binary mode warns: a program
# run with -W error would stop on it)
pytestmark = pytest.mark.filterwarnings("error")


def file_of(path, values) -> str:
    """A file of little-endian int16 values (rows of 2 bytes a value)."""
    np.asarray(values, dtype="<i2").tofile(path)
    return str(path)


def as_ints(block) -> list[int]:
    return np.frombuffer(block.tobytes(), "<i2").tolist()


def test_row_dtype_is_one_opaque_item_of_a_row():
    assert row_dtype(24).itemsize == 24 and row_dtype(24).kind == "V"
    assert row_dtype(0).itemsize == 1  # a row of no bytes still makes an array
    assert row_dtype(3).alignment == 1


def test_region_blocks_span_regions_in_one_reused_buffer(tmp_path):
    """Blocks of ``block_rows`` rows over the regions in turn (a block may hold rows of
    two files), the last one shorter, empty regions skipped, each from its offset."""
    a = file_of(tmp_path / "a", [99, 0, 1, 2, 3, 4])  # rows of 2 values: skip the first value
    b = file_of(tmp_path / "b", [5, 6, 7, 8, 9, 10, 11, 12])
    regions = [(a, 2, 2), (b, 0, 0), (b, 4, 3)]  # a's rows (0,1),(2,3); b's (7,8),(9,10),(11,12)
    got, bufs = [], set()
    for block in region_blocks(regions, 4, 2):
        got.append(as_ints(block))
        bufs.add(block.__array_interface__["data"][0])
    assert got == [[0, 1, 2, 3], [7, 8, 9, 10], [11, 12]]
    assert len(bufs) == 1  # the same buffer each time
    assert [as_ints(b) for b in region_blocks(regions, 4, 10)] == [
        [0, 1, 2, 3, 7, 8, 9, 10, 11, 12]
    ]
    assert [len(b) for b in region_blocks(regions, 4, 1)] == [1] * 5
    assert [len(b) for b in region_blocks(regions, 4, 0)] == [1] * 5  # at least one row
    assert [as_ints(b) for b in region_blocks(regions, 4, 5)] == [[0, 1, 2, 3, 7, 8, 9, 10, 11, 12]]
    assert list(region_blocks([(a, 0, 0)], 4, 2)) == []
    assert list(region_blocks(regions, 0, 2)) == []  # rows of no bytes: nothing to read
    assert [as_ints(b) for b in read_blocks(b, 2, 3, 4, 2)] == [[6, 7, 8, 9], [10, 11]]


def test_a_file_that_ends_early_is_an_os_error_naming_it(tmp_path):
    a = file_of(tmp_path / "a", [0, 1, 2])
    with pytest.raises(OSError) as e:
        list(region_blocks([(a, 2, 2)], 4, 8))
    assert e.value.errno == errno.EIO and e.value.filename == a
    assert e.value.strerror == "file ended early: expected 8 bytes at offset 2"
    with pytest.raises(OSError, match="expected 4 bytes at offset 6"):
        list(region_blocks([(a, 2, 2)], 4, 1))  # the second row's own offset
    with pytest.raises(OSError, match="expected 8 bytes at offset 0"):
        read_into(a, 0, np.empty(4, dtype="<i2"))
    with pytest.raises(OSError, match="expected 4 bytes at offset 4"):
        read_regions_into([(a, 0, 1), (a, 4, 1)], 4, np.empty(2, dtype=row_dtype(4)))


def test_short_reads_are_read_on_until_the_view_is_full(tmp_path):
    """A read may return fewer bytes than asked (a pipe, a network file system, a signal):
    the next read goes on where it stopped."""
    import io

    from exactbatch.tools.ndf_stream import _fill

    class Trickle(io.BytesIO):
        def readinto(self, view):
            return super().readinto(memoryview(view)[:3])  # 3 bytes at most a read

    out = bytearray(10)
    _fill(Trickle(bytes(range(10))), memoryview(out), tmp_path / "f", 0)
    assert out == bytes(range(10))


def test_read_into_and_read_regions_into_fill_the_array_given(tmp_path):
    a = file_of(tmp_path / "a", np.arange(10))
    out = np.full(3, -1, dtype="<i2")
    assert read_into(a, 4, out) is out and out.tolist() == [2, 3, 4]
    assert read_into(tmp_path / "missing", 0, np.empty(0)).size == 0  # nothing to read
    out = np.empty(3, dtype=row_dtype(4))
    got = read_regions_into([(a, 0, 1), (a, 8, 0), (a, 12, 2)], 4, out)
    assert got is out and as_ints(out) == [0, 1, 6, 7, 8, 9]


def test_ndf_regions_of_a_file_and_of_a_dataset(tmp_path):
    x = np.arange(6.0).reshape(3, 2)
    save_ndf(tmp_path / "a.ndf", (x, x[:, :1]), features=["p", "q"], labels=["t"])
    r = ndf_regions(tmp_path / "a.ndf")
    assert r == ([(str(tmp_path / "a.ndf"), 28, 3)], 3, 2, 1, ("p", "q"), ("t",))
    save_ndf(tmp_path / "b.ndf", x)
    assert ndf_regions(tmp_path / "b.ndf")[1:] == (3, 2, 0, None, None)
    ds = write_ndf_dataset(tmp_path / "ds", [2, 0, 3], d=1, l=0)
    seen = []
    r = ndf_regions(ds, check=seen.append)
    assert seen == [0, 1, 2]
    assert [(n, rows) for _, n, rows in r.regions] == [(28, 2), (28, 0), (28, 3)]
    assert all(p.startswith(ds + "/") for p, _, _ in r.regions)
    assert (r.n, r.d, r.l) == (5, 1, 0)
    blocks = [np.frombuffer(b.tobytes(), "<f8") for b in region_blocks(r.regions, 8, 4)]
    assert np.concatenate(blocks).tolist() == [0, 1, 2, 3, 4]


def test_ndf_regions_of_a_dataset_keep_its_manifests_names(tmp_path):
    ds = write_ndf_dataset(tmp_path / "ds", [2, 1], d=2, l=1, features=["p", "q"], labels=["t"])
    r = ndf_regions(ds)
    assert (r.n, r.d, r.l, r.features, r.labels) == (3, 2, 1, ("p", "q"), ("t",))
