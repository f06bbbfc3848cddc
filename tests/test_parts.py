"""Rows held in parts (exactbatch.parts): a sharded dataset's files and an elastic
stream's chunks held in memory.

Laws: a read gathers global rows from whichever parts hold them, the same bits on
both backends and as the rows read whole; a read that needs a part not set copies
nothing and names the parts it needs; a row out of range is refused before any copy;
each read stamps the parts it touched; rows made on the other backend are refused.
"""

from __future__ import annotations

import numpy as np
import pytest
from backends import built, on_backend
from helpers import make_data

import exactbatch
from exactbatch import kernels
from exactbatch import parts as kparts

COMPILED = kernels.backend() == "compiled"
needs_core = pytest.mark.skipif(
    not COMPILED, reason="the compiled core is not in use (not built, or EXACTBATCH_PURE=1)"
)


@needs_core
def test_the_parts_kernel_gathers_global_rows_and_asks_for_parts_not_set(tmp_path):
    """parts_rows: global row i is read from the part that holds it; a read that needs
    a part not set copies nothing and names it; set() checks what it is given; unset()
    lets a part go (a dataset closing it) and set() may give it again."""
    x, y = make_data(12, 3, 1)
    starts = np.array([0, 5, 5, 12], dtype=np.int64)  # uneven, an empty part between
    files = []
    for k, (a, b) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
        exactbatch.save_ndf(tmp_path / f"p{k}.ndf", (x[a:b], y[a:b]))
        files.append(exactbatch.open_ndf(tmp_path / f"p{k}.ndf"))
    parts = kparts.parts_rows(starts, 3, 1)
    rows = np.array([11, 0, 5, 4, 4], dtype=np.int32)
    ox, oy = np.full((5, 3), -1.0), np.full((5, 1), -1.0)
    assert parts.read(rows, ox, oy) == [0, 2]
    assert (ox == -1).all()  # nothing copied
    parts.set(0, files[0].kernel_rows())
    assert parts.read(rows, ox, oy) == [2]
    parts.set(2, files[2].kernel_rows())
    parts.set(2, files[2].kernel_rows())  # the same again: no-op
    for idx in (rows, rows.astype(np.int64)):
        assert parts.read(idx, ox, oy) is None
        np.testing.assert_array_equal(ox, x[rows])
        np.testing.assert_array_equal(oy, y[rows])
    sx, sy = np.empty((6, 3), dtype=np.float32), np.empty((6, 1), dtype=np.float32)
    assert parts.read(slice(2, 8), sx, sy) is None
    np.testing.assert_array_equal(sx, x[2:8].astype(np.float32))
    with pytest.raises(IndexError, match="row 12 out of range for n=12"):
        parts.read(np.array([1, 12]), ox[:2], oy[:2])
    with pytest.raises(ValueError, match="part 0 must hold"):
        kparts.parts_rows(starts, 3, 1).set(0, files[2].kernel_rows())
    with (
        pytest.raises(ValueError, match="set already"),
        exactbatch.open_ndf(tmp_path / "p0.ndf") as again,
    ):  # the same part, opened again: another object
        parts.set(0, again.kernel_rows())
    with pytest.raises(TypeError, match="file_rows"):  # (rows in memory are taken too)
        parts.set(1, object())
    with pytest.raises(IndexError, match="part 3 out of range"):
        parts.set(3, files[0].kernel_rows())
    # unset: the part is let go of (closed), read asks for it again, set takes another
    assert parts.unset(0) is True and parts.unset(0) is True and parts.unset(1) is True
    assert parts.read(rows, ox, oy) == [0]
    with exactbatch.open_ndf(tmp_path / "p0.ndf") as again:  # open while set (its fd is fstat'd)
        parts.set(0, again.kernel_rows())
        assert parts.read(rows, ox, oy) is None
        np.testing.assert_array_equal(ox, x[rows])
        assert parts.unset(0) is True
    with pytest.raises(IndexError, match="part 3 out of range"):
        parts.unset(3)
    with pytest.raises(ValueError, match="rise from 0"):
        kparts.parts_rows(np.array([0, 5, 4], dtype=np.int64), 3, 1)
    for starts in (np.array([0], dtype=np.int64), np.array([0.0, 5.0]), np.array([0, 5])[None]):
        with pytest.raises(TypeError, match="starts must be a 1-D int64 array"):
            kparts.parts_rows(starts, 3, 1)


@needs_core
@pytest.mark.parametrize("nparts", [3, 65])  # 65: past the 64 parts of the read's bitmask
def test_the_parts_kernel_reads_every_part_and_copies_nothing_for_a_row_out_of_range(
    tmp_path, nparts
):
    """Over as many parts as a read tracks in one 64-bit mask and over more: the parts a
    read needs are named (the last too), then every row comes from its part; a row out of
    range (just past n, far past it, negative) is an IndexError with nothing copied."""
    x, y = make_data(2 * nparts, 2, 1)
    starts = np.arange(0, 2 * nparts + 1, 2, dtype=np.int64)  # two rows a part
    parts, files = kparts.parts_rows(starts, 2, 1), []
    for k in range(nparts):
        exactbatch.save_ndf(tmp_path / f"p{k}.ndf", (x[2 * k : 2 * k + 2], y[2 * k : 2 * k + 2]))
        files.append(exactbatch.open_ndf(tmp_path / f"p{k}.ndf"))
    rows = np.array([2 * nparts - 1, 0, 3, 2 * nparts - 2])
    ox, oy = np.full((4, 2), -1.0), np.full((4, 1), -1.0)
    assert parts.read(rows[[0, 3]], ox[:2], oy[:2]) == [nparts - 1]  # the last part alone
    assert parts.read(rows, ox, oy) == [0, 1, nparts - 1]
    for k in (0, 1, nparts - 1):
        parts.set(k, files[k].kernel_rows())
    assert parts.read(rows, ox, oy) is None
    np.testing.assert_array_equal(ox, x[rows])
    np.testing.assert_array_equal(oy, y[rows])
    for bad in (2 * nparts, 1 << 40, -1):
        for dt in (np.int32, np.int64):
            if dt is np.int32 and bad == 1 << 40:
                continue
            ox[...], oy[...] = -1.0, -1.0
            with pytest.raises(IndexError, match=f"row {bad} out of range for n={2 * nparts}"):
                parts.read(np.array([0, bad, 3], dtype=dt), ox[:3], oy[:3])
            assert (ox == -1).all() and (oy == -1).all()  # nothing copied
    for f in files:
        f.close()


@needs_core
def test_parts_with_many_small_parts_in_one_bucket(tmp_path):
    """A row's part is searched for when many parts share one bucket of the table
    (here 300 one-row parts, then one large part): every row comes from its part."""
    sizes = [1] * 300 + [5000]
    x, y = make_data(sum(sizes), 2, 1)
    ds = tmp_path / "ds"
    starts = np.concatenate([[0], np.cumsum(sizes)])
    exactbatch.save_ndf_dataset(
        ds, ((x[a:b], y[a:b]) for a, b in zip(starts[:-1], starts[1:], strict=True))
    )
    rows = np.random.default_rng(3).permutation(sum(sizes))
    with exactbatch.open_ndf_dataset(ds) as d:
        gx, gy = d.read_rows(rows)
    np.testing.assert_array_equal(gx, x[rows])
    np.testing.assert_array_equal(gy, y[rows])


# -- the guard ------------------------------------------------------------------------------


@pytest.mark.parametrize("l", [1, 0])
def test_memory_parts_gather_stream_rows_from_chunks_held_in_memory(each_backend, l):  # noqa: E741
    """memory_parts (an elastic stream's chunk cache): chunks set as parts (memory_rows
    of one array of whole rows, or of two arrays: a list's chunk as it came, each side
    its own stride); a read by stream row gathers from every chunk it touches in one
    call, the same bits on both backends (float32 cast too), or names the chunks not
    set and copies nothing; unset lets one go."""
    x, y = make_data(12, 3, l)
    xy = np.concatenate((x, y), axis=1)
    starts = np.array([0, 5, 5, 12], dtype=np.int64)  # an empty chunk between
    parts = kparts.memory_parts(starts, 3, l)
    rows = np.array([11, 0, 5, 4, 4, 7], dtype=np.int64)
    ox, oy = np.full((6, 3), -1.0), np.full((6, l), -1.0)
    assert parts.read(rows, ox, oy) == [0, 2] and (ox == -1).all()
    chunks = [xy[a:b].copy() for a, b in zip(starts[:-1], starts[1:], strict=True)]
    parts.set(0, kernels.memory_rows(chunks[0][:, :3], chunks[0][:, 3:]))
    assert parts.read(rows, ox, oy) == [2]
    parts.set(2, kernels.memory_rows(chunks[2][:, :3], chunks[2][:, 3:]))
    assert parts.read(rows, ox, oy) is None
    np.testing.assert_array_equal(ox, x[rows])
    np.testing.assert_array_equal(oy, y[rows])
    sx, sy = np.empty((6, 3), dtype=np.float32), np.empty((6, l), dtype=np.float32)
    assert parts.read(rows, sx, sy) is None
    np.testing.assert_array_equal(sx, x[rows].astype(np.float32))
    assert parts.unset(2) is True
    assert parts.read(rows[:2], ox[:2], oy[:2]) == [2]
    assert parts.read(rows[1:2], ox[:1], oy[:1]) is None  # chunk 0 only: still held
    # Chunk 2 again as two arrays of their own, x's rows 6 values apart (columns of a
    # wider array), y's 1: the same bits as from one array of whole rows.
    wide = np.zeros((7, 6))
    wide[:, :3] = x[5:]
    parts.set(2, kernels.memory_rows(wide[:, :3], y[5:].copy()))
    assert parts.read(rows, ox, oy) is None
    np.testing.assert_array_equal(ox, x[rows])
    np.testing.assert_array_equal(oy, y[rows])
    assert parts.read(rows, sx, sy) is None
    np.testing.assert_array_equal(sx, x[rows].astype(np.float32))
    np.testing.assert_array_equal(sy, y[rows].astype(np.float32))


def test_memory_parts_stamp_the_chunks_each_read_touches(each_backend):
    """stamp_into (how the chunk cache knows which chunks were read last, with no pass
    over the rows): each read, copied or naming chunks not set, ticks the clock (the
    last entry) and stamps the chunks its rows lie in with it, on both backends alike;
    a read of a row out of range stamps nothing; a stamps array of another length or
    dtype is refused."""
    x, y = make_data(12, 3, 1)
    xy = np.concatenate((x, y), axis=1)
    starts = np.array([0, 5, 5, 12], dtype=np.int64)
    parts = kparts.memory_parts(starts, 3, 1)
    for bad in (np.zeros(3, dtype=np.int64), np.zeros(4, dtype=np.int32)):
        with pytest.raises(TypeError, match="stamps must be"):
            parts.stamp_into(bad)
    stamps = np.zeros(4, dtype=np.int64)
    parts.stamp_into(stamps)
    ox, oy = np.empty((3, 3)), np.empty((3, 1))
    assert parts.read(np.array([11, 0, 4], dtype=np.int32), ox, oy) == [0, 2]
    assert stamps.tolist() == [1, 0, 1, 1]
    for k, (a, z) in enumerate([(0, 5), (5, 12)]):
        chunk = xy[a:z].copy()  # one array of whole rows
        parts.set(2 * k, kernels.memory_rows(chunk[:, :3], chunk[:, 3:]))
    assert parts.read(np.array([1, 2, 3]), ox, oy) is None
    assert stamps.tolist() == [2, 0, 1, 2]
    assert parts.read(slice(6, 9), ox, oy) is None
    np.testing.assert_array_equal(ox, x[6:9])
    assert stamps.tolist() == [2, 0, 3, 3]
    with pytest.raises(IndexError, match="out of range"):
        parts.read(np.array([0, 12, 1]), ox, oy)
    assert stamps.tolist() == [2, 0, 3, 3]


def test_memory_parts_refuse_rows_made_on_the_other_backend(each_backend):
    """A chunk's rows are memory_rows of the backend the parts were made on: rows made
    on the other (the backend switched between the two) or anything else are a
    TypeError from ``set``, on either backend, never a failure of a later read."""
    x, y = make_data(4, 2, 1)
    xy = np.concatenate((x, y), axis=1)
    parts = kparts.memory_parts(np.array([0, 4]), 2, 1)
    others = [object()]
    if built():
        with on_backend("numpy" if each_backend == "compiled" else "compiled"):
            others.append(kernels.memory_rows(xy[:, :2], xy[:, 2:]))
    for other in others:
        with pytest.raises(TypeError, match=r"^set\(k, rows\): rows must come from"):
            parts.set(0, other)
    parts.set(0, kernels.memory_rows(xy[:, :2], xy[:, 2:]))  # (its own: taken)
    ox, oy = np.empty((2, 2)), np.empty((2, 1))
    assert parts.read(np.array([3, 1]), ox, oy) is None
    np.testing.assert_array_equal(ox, x[[3, 1]])


def test_memory_parts_read_a_slice_fuse_a_transform_and_keep_a_part_once_set(each_backend):
    """memory_parts' reads also take a slice of stream rows (across chunks) and a
    TransformKernel (applied as rows are copied: the bits of the memory reader's fused
    read); a chunk set again to the same rows object is no change, to another one a
    ValueError naming it."""
    x, y = make_data(12, 3, 2)
    xy = np.concatenate((x, y), axis=1)
    starts = np.array([0, 4, 12], dtype=np.int64)
    parts = kparts.memory_parts(starts, 3, 2)
    held = [kernels.memory_rows(xy[a:b, :3], xy[a:b, 3:]) for a, b in ((0, 4), (4, 12))]
    for k, rows in enumerate(held):
        parts.set(k, rows)
    parts.set(1, held[1])  # the same rows again: kept
    with pytest.raises(ValueError, match="part 1 is set already"):
        parts.set(1, kernels.memory_rows(xy[4:, :3], xy[4:, 3:]))
    ox, oy = np.full((6, 3), -1.0), np.full((6, 2), -1.0)
    assert parts.read(slice(2, 8), ox, oy) is None  # chunks 0 and 1
    np.testing.assert_array_equal(ox, x[2:8])
    np.testing.assert_array_equal(oy, y[2:8])
    tf = kernels.TransformKernel(np.arange(3.0), np.array([0.5, 2.0, 4.0]))
    want_x, want_y = np.empty((6, 3), dtype=np.float32), np.empty((6, 2), dtype=np.float32)
    first = kernels.memory_rows(x, y).read(np.arange(2, 8), want_x, want_y, tf)
    assert first == -1  # (no row held a NaN)
    sx, sy = np.empty((6, 3), dtype=np.float32), np.empty((6, 2), dtype=np.float32)
    order = np.array([7, 2, 3, 4, 5, 6], dtype=np.int32)
    assert parts.read(order[[1, 2, 3, 4, 5, 0]], sx, sy, tf) == first
    assert sx.tobytes() == want_x.tobytes() and sy.tobytes() == want_y.tobytes()
    assert not np.array_equal(sx, x[2:8].astype(np.float32))  # (the map did something)


def test_memory_parts_of_one_chunk_of_none_and_of_int32_or_listed_starts(each_backend):
    """``starts`` as any integer sequence (int32, a list): read as int64; one chunk is
    one part; no chunk at all (``[]`` or ``[0]``) is one part of no rows, whose reads
    of no rows copy nothing and need nothing set."""
    x, y = make_data(5, 2, 1)
    xy = np.concatenate((x, y), axis=1)
    for starts in (np.array([0, 5], dtype=np.int32), [0, 5]):
        parts = kparts.memory_parts(starts, 2, 1)
        ox, oy = np.empty((3, 2)), np.empty((3, 1))
        assert parts.read(np.array([4, 0, 2]), ox, oy) == [0]
        parts.set(0, kernels.memory_rows(xy[:, :2], xy[:, 2:]))
        assert parts.read(np.array([4, 0, 2]), ox, oy) is None
        np.testing.assert_array_equal(ox, x[[4, 0, 2]])
        np.testing.assert_array_equal(oy, y[[4, 0, 2]])
    for starts in ([], [0], np.zeros(0, dtype=np.int64)):
        parts = kparts.memory_parts(starts, 2, 1)
        none = np.zeros(0, dtype=np.int64)
        assert parts.read(none, np.empty((0, 2)), np.empty((0, 1))) is None
