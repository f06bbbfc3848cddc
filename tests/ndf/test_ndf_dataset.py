"""Sharded .ndf datasets on local folders (ndf/dataset.py, dataset_parts.py, manifest.py).

A dataset is the concatenation of its parts: every read equals the same read
of one array holding rows 0..n (helpers.make_data); parts open lazily and
only when a row of theirs is read; each way a dataset can be damaged is an
NdfError naming the part; a failed write leaves no manifest.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import re
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from helpers import (
    check_rows,
    make_data,
    make_x,
    make_y,
    part_file,
    rewrite_in_place,
    until_ctime_moves,
    write_ndf_dataset,
)
from hypothesis import given
from hypothesis import strategies as st

import exactbatch
from exactbatch import NdfDataset, NdfError, open_ndf_dataset, save_ndf, save_ndf_dataset
from exactbatch.ndf import dataset as dsmod
from exactbatch.ndf import dataset_parts
from exactbatch.ndf import manifest as manmod

SIZES = [5, 0, 12, 1, 7]  # uneven, an empty part among them
N = sum(SIZES)


@pytest.fixture
def ds_path(tmp_path):
    return write_ndf_dataset(tmp_path / "ds", SIZES, d=3, l=2)


def manifest_of(path) -> dict:
    with open(os.path.join(path, "manifest.json")) as f:
        return json.load(f)


def rewrite_manifest(path, m: dict) -> None:
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump(m, f)


# -- the API and the manifest ------------------------------------------------------------


def test_exported_from_the_package_and_ndf():
    for name in ("NdfDataset", "open_ndf_dataset", "save_ndf_dataset"):
        assert name in exactbatch.__all__ and name in exactbatch.ndf.__all__
        assert getattr(exactbatch, name) is getattr(exactbatch.ndf, name)


def test_manifest_lists_the_parts_in_order(ds_path):
    """The manifest: format, version, n, d, l, and every part's name, n and byte size."""
    m = manifest_of(ds_path)
    assert m["format"] == "exactbatch-ndf-dataset" and m["version"] == 1
    assert (m["n"], m["d"], m["l"]) == (N, 3, 2)
    names = [p["name"] for p in m["parts"]]
    write = names[0][len("part-00000-") : -len(".ndf")]  # one write id, this write's
    assert names == [f"part-{k:05d}-{write}.ndf" for k in range(len(SIZES))]
    assert [p["n"] for p in m["parts"]] == SIZES
    for p in m["parts"]:
        assert p["nbytes"] == os.path.getsize(os.path.join(ds_path, p["name"]))
    assert "features" not in m and "labels" not in m


def test_open_reads_the_manifest_only(ds_path):
    """n, d, l, len and the parts come from the manifest; no part is opened."""
    with open_ndf_dataset(ds_path) as ds:
        assert isinstance(ds, NdfDataset)
        assert (ds.n, ds.d, ds.l, len(ds)) == (N, 3, 2, N)
        assert [p.n for p in ds.parts] == SIZES
        assert ds.starts.tolist() == [0, 5, 5, 17, 18, 25]
        assert ds.open_parts == ()
        assert "parts=5" in repr(ds) and "open" in repr(ds)
    assert ds.closed and "closed" in repr(ds)


@given(st.lists(st.integers(-N, N - 1), max_size=40))
def test_read_rows_equals_the_concatenation(tmp_path_factory, rows):
    """Any request (scattered, repeated, negative, sorted or not) gives the rows of one
    array holding the parts' rows concatenated, in the request's order."""
    path = _shared_dataset(tmp_path_factory)
    x, y = make_data(N, 3, 2)
    with open_ndf_dataset(path) as ds:
        gx, gy = ds.read_rows(rows)
        np.testing.assert_array_equal(gx, x[rows])
        np.testing.assert_array_equal(gy, y[rows])
        sx, sy = ds.read_rows(sorted(rows))
        np.testing.assert_array_equal(sx, x[sorted(rows)])
        np.testing.assert_array_equal(sy, y[sorted(rows)])


_SHARED: dict = {}


def _shared_dataset(factory) -> str:
    if "path" not in _SHARED:
        _SHARED["path"] = write_ndf_dataset(factory.mktemp("hyp") / "ds", SIZES, d=3, l=2)
    return _SHARED["path"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_each_backend_reads_the_concatenation(ds_path, each_backend, dtype):
    """The compiled gather over every part's mapping and the pure path's sort, read
    and put-back give the same rows: scattered, sorted, in one part, runs across
    parts, with repeats, in either dtype."""
    x, y = make_data(N, 3, 2)
    rng = np.random.default_rng(7)
    requests = [
        rng.integers(0, N, 40),
        np.sort(rng.integers(0, N, 40)),
        np.array([6, 7, 5, 8]),  # one part
        np.array([N - 1, 0, N - 1]),
        np.arange(N).astype(np.int32),
        slice(3, 20),  # a run across parts
        slice(6, 9),  # a run in one part
        slice(4, 4),
    ]
    with open_ndf_dataset(ds_path) as ds:
        for rows in requests:
            want = np.arange(N)[rows]
            ox = np.empty((len(want), 3), dtype=dtype)
            oy = np.empty((len(want), 2), dtype=dtype)
            ds.read_rows_into(rows, ox, oy)
            np.testing.assert_array_equal(ox, x[want].astype(dtype))
            np.testing.assert_array_equal(oy, y[want].astype(dtype))


def test_a_part_truncated_while_open_is_an_error_naming_it(ds_path, each_backend):
    """A part that shrinks after it was opened (and read) is an NdfError naming its
    file at the next read, never rows of zeros or a crash."""
    ds = open_ndf_dataset(ds_path)
    ds.read_rows([0, 10, 24])  # parts 0, 2 and 4 are open
    p = part_file(ds_path, 2)
    os.truncate(p, os.path.getsize(p) - 8)
    ds.read_rows([0, 24])  # parts 0 and 4 are fine
    with pytest.raises(NdfError, match=f"{re.escape(p)}: the file changed while open"):
        ds.read_rows([24, 10])


@pytest.mark.parametrize("how", ["truncate", "rewrite"])
def test_a_part_changed_with_its_mtime_put_back_is_an_error_naming_it(ds_path, each_backend, how):
    """A part truncated, or rewritten in place, and its modification time then put back
    (``touch -r``): the size check, or the change time (ctime), sees it, and the next
    read of its rows is an NdfError naming that part's file, on both backends."""
    ds = open_ndf_dataset(ds_path)
    ds.read_rows([0, 10, 24])  # parts 0, 2 and 4 are open
    p = part_file(ds_path, 2)
    change = {
        "truncate": lambda: os.truncate(p, os.path.getsize(p) - 8),
        "rewrite": lambda: rewrite_in_place(p, values=2),
    }
    until_ctime_moves(p, os.stat(p).st_ctime_ns, change[how])
    ds.read_rows([0, 24])  # parts 0 and 4 are fine
    for rows in ([24, 10], [10, 11], np.arange(N)):  # scattered, a run in the part, all
        with pytest.raises(NdfError, match=f"{re.escape(p)}: the file changed while open"):
            ds.read_rows(rows)


@pytest.mark.parametrize("unlinked", [False, True])
def test_a_part_truncated_with_its_mtime_put_back_is_caught_by_the_size_check(
    ds_path, each_backend, unlinked
):
    """A part truncated by a few bytes (its pages still mapped: no fault), its
    modification time then put back (``os.utime``): every read of the part's rows, on
    the compiled gather over the parts' mappings and on the pure path, is an NdfError
    naming the part's file and both sizes. ``unlinked``: the part's last link gone as
    well (a dataset written anew over it removes the old parts), which leaves its change
    time uncounted (the rule of ``LocalHandle.check_size``): only the size tells."""
    ds = open_ndf_dataset(ds_path)
    ds.read_rows([0, 10, 24])  # parts 0, 2 and 4 are open
    p = part_file(ds_path, 2)
    st = os.stat(p)
    os.truncate(p, st.st_size - 8)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    if unlinked:
        os.unlink(p)
    ds.read_rows([0, 24])  # parts 0 and 4 are fine
    want = f"{p}: the file changed while open: expected {st.st_size} bytes, found {st.st_size - 8}"
    for rows in ([24, 10], [10, 11], np.arange(N)):  # rows still whole in the part, and all
        with pytest.raises(NdfError, match=re.escape(want)):
            ds.read_rows(rows)


def test_a_fault_in_some_part_names_the_part_that_changed(ds_path):
    """When a copy faults the core cannot say in which part: the open parts are
    checked and the one that changed is named (else the dataset is)."""
    ds = open_ndf_dataset(ds_path)
    ds.read_rows([0, 10, 24])
    parts = ds._handle()
    with pytest.raises(NdfError, match=f"{ds_path}: a part of the dataset changed"):
        parts._changed(None)
    p = part_file(ds_path, 4)
    os.truncate(p, 28)
    with pytest.raises(NdfError, match=f"{re.escape(p)}: the file changed while open"):
        parts._changed(None)
    with pytest.raises(NdfError, match=f"{re.escape(p)}: the file changed while open"):
        parts._changed(4)


def test_a_fault_the_core_places_in_a_part_names_that_part(ds_path):
    """The core says in which part a copy faulted: that part is named (with its file),
    and what changed in it if that can still be seen; the other parts are not asked."""
    ds = open_ndf_dataset(ds_path)
    ds.read_rows([0, 10, 24])
    parts = ds._handle()
    os.truncate(part_file(ds_path, 0), 28)  # another part changed, not the core's
    with pytest.raises(NdfError) as fault:
        parts._changed(4)
    assert str(fault.value) == (
        f"{ds_path}: part 4 ({ds.parts[4].name}) of the dataset changed while open: a copy"
        " from it failed (truncated, or rewritten in place, during the read?)"
    )


def test_a_read_opens_the_parts_holding_its_rows_and_no_other(ds_path, each_backend):
    """The parts a request touches (a run across parts, a run in one, scattered rows)
    are those holding its rows, never an empty one; a read opens those alone."""
    # SIZES [5, 0, 12, 1, 7]: parts start at rows 0, 5, 5, 17, 18 (part 1 is empty)
    for rows, want in (
        (slice(3, 20), [0, 2, 3, 4]),
        (slice(6, 17), [2]),
        (slice(4, 6), [0, 2]),
        (slice(17, 18), [3]),
        (slice(16, 18), [2, 3]),
        (np.array([24, 0, 5, 24]), [0, 2, 4]),
    ):
        ds = open_ndf_dataset(ds_path)
        assert ds._handle().touched(rows) == want, rows
        n = len(np.arange(N)[rows])
        ox, oy = np.empty((n, 3)), np.empty((n, 2))
        ds.read_rows_into(rows, ox, oy)
        assert ox[:, 0].tolist() == np.arange(N)[rows].tolist()
        assert ds.open_parts == tuple(want), rows
        ds.close()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_transform_is_applied_as_the_rows_are_read(ds_path, each_backend, dtype):
    """A loader's transform (a kernel) reaches every read of a dataset: scattered rows,
    a run across parts, a run in one part, with the gather's threads given or not; x
    mapped, y as is, and the first row that held a NaN returned (-1: none)."""
    from exactbatch.kernels import TransformKernel

    x, y = make_data(N, 3, 2)
    mean, scale = np.array([1.0, 2.0, 3.0]), np.array([0.5, 2.0, 0.25])
    kernel = TransformKernel(mean, scale)
    with open_ndf_dataset(ds_path) as ds:
        for read in (ds.read_rows_into, ds.rows_reader(threads=2)):
            for rows in (np.array([24, 0, 17, 5, 5]), slice(3, 20), slice(6, 9)):
                want = np.arange(N)[rows]
                ox = np.full((len(want), 3), np.nan, dtype=dtype)
                oy = np.full((len(want), 2), np.nan, dtype=dtype)
                assert read(rows, ox, oy, kernel) == -1
                np.testing.assert_array_equal(ox, ((x[want] - mean) * scale).astype(dtype))
                np.testing.assert_array_equal(oy, y[want].astype(dtype))


def test_an_empty_run_of_rows_reads_nothing_wherever_it_is(ds_path, each_backend):
    """An empty run of rows (a slice), at the first row, inside, or past the last row (the
    end of an epoch): nothing read, None back, or -1 (no row held a NaN) through a
    transform."""
    from exactbatch.kernels import TransformKernel

    kernel = TransformKernel(np.zeros(3), np.ones(3))
    with open_ndf_dataset(ds_path) as ds:
        for at in (0, 7, N):
            ox, oy = np.empty((0, 3)), np.empty((0, 2))
            assert ds.read_rows_into(slice(at, at), ox, oy) is None
            assert ds.read_rows_into(slice(at, at), ox, oy, kernel) == -1
        assert ds.open_parts == ()


@pytest.mark.parametrize(
    ("sizes", "d", "l"),
    [([6], 2, 1), ([3, 4], 1, 0), ([3, 4], 0, 1), ([2, 0, 3], 1, 1), ([2, 5], 0, 2)],
)
def test_a_local_dataset_gathers_in_one_compiled_call_whatever_its_widths(
    tmp_path,
    sizes,
    d,
    l,  # noqa: E741
):
    """One part, one column, labels only, as many labels as features: a local dataset
    with rows reads through the compiled gather (one call a batch), the same rows."""
    from exactbatch import kernels

    if not kernels.backend() == "compiled":
        pytest.skip("the compiled core is not built or not used")
    path = write_ndf_dataset(tmp_path / "ds", sizes, d=d, l=l)
    x, y = make_data(sum(sizes), d, l)
    rows = np.array([sum(sizes) - 1, 0, 2, 2])
    with open_ndf_dataset(path) as ds:
        assert ds._handle().compiled is not None
        gx, gy = ds.read_rows(rows)
        np.testing.assert_array_equal(gx, x[rows])
        np.testing.assert_array_equal(gy, y[rows])


@pytest.mark.parametrize("why", ["max_open_parts", "parts on the pure path"])
def test_a_gather_that_cannot_be_had_reads_part_by_part(tmp_path, why):
    """The compiled gather gives up when the rows lie in more parts than may be open at
    once, or in parts opened on the pure path (``kernels.use_backend``: no mapping to
    gather from): the rows are read part by part instead, the same rows, through a
    transform too."""
    from exactbatch import kernels
    from exactbatch.kernels import TransformKernel

    if not kernels.backend() == "compiled":
        pytest.skip("the compiled core is not built or not used")
    path = write_ndf_dataset(tmp_path / "ds", SIZES, d=3, l=2)
    x, y = make_data(N, 3, 2)
    mean, scale = np.array([1.0, 2.0, 3.0]), np.array([0.5, 2.0, 0.25])
    rows = np.array([24, 0, 17, 5, 5])
    with open_ndf_dataset(path, max_open_parts=1 if why == "max_open_parts" else None) as ds:
        assert ds._handle().compiled is not None
        before = kernels.use_backend("numpy" if why != "max_open_parts" else "compiled")
        try:
            for kernel in (None, TransformKernel(mean, scale)):
                ox, oy = np.full((5, 3), np.nan), np.full((5, 2), np.nan)
                got = ds.read_rows_into(rows, ox, oy, kernel)
                assert got == (None if kernel is None else -1)
                want = x[rows] if kernel is None else (x[rows] - mean) * scale
                np.testing.assert_array_equal(ox, want)
                np.testing.assert_array_equal(oy, y[rows])
        finally:
            kernels.use_backend(before)


def test_read_rows_into_and_read_row(ds_path):
    ds = open_ndf_dataset(ds_path)
    rows = np.array([24, 0, 17, 5, 6, 4, 4], dtype=np.int64)
    ox, oy = np.full((7, 3), np.nan), np.full((7, 2), np.nan)
    ds.read_rows_into(rows, ox, oy)
    check_rows(ox, oy, 3, 2)
    assert ox[:, 0].tolist() == rows.tolist()
    xr, yr = ds.read_row(-1)
    np.testing.assert_array_equal(xr, make_x([N - 1], 3)[0])
    np.testing.assert_array_equal(yr, make_y([N - 1], 2)[0])
    got_x, _ = ds.read_rows(np.array([3, 1]), out_x=ox[:2], out_y=oy[:2])
    assert got_x is not None and ox[:2, 0].tolist() == [3, 1]


def test_bad_row_requests(ds_path):
    ds = open_ndf_dataset(ds_path)
    with pytest.raises(IndexError, match=f"row {N} out of range"):
        ds.read_rows([0, N])
    with pytest.raises(IndexError, match=f"row {-N - 1} out of range"):
        ds.read_row(-N - 1)
    with pytest.raises(TypeError, match="integers"):
        ds.read_rows([0.5])
    with pytest.raises(ValueError, match="1-D"):
        ds.read_rows([[0, 1]])
    assert ds.read_rows([])[0].shape == (0, 3)


def test_parts_open_lazily_and_only_where_rows_are_read(ds_path):
    """A read opens only the parts its rows lie in; empty parts are never opened."""
    ds = open_ndf_dataset(ds_path)
    ds.read_rows([17])
    assert ds.open_parts == (3,)
    ds.read_rows([6, 1])
    assert ds.open_parts == (0, 2, 3)
    ds.read_rows(np.arange(N))
    assert ds.open_parts == (0, 2, 3, 4)


def test_read_block_into_crosses_parts(ds_path):
    """A block of consecutive rows spanning parts is read from each part in turn."""
    ds = open_ndf_dataset(ds_path)
    out = np.full((16, 5), np.nan)
    ds.read_block_into(3, out)
    check_rows(out[:, :3], out[:, 3:], 3, 2)
    assert out[:, 0].tolist() == list(range(3, 19))
    ds.will_need(3, 16)  # a hint only: must not fail


def test_share_close_and_closed_reads(ds_path):
    """close() lets go of one share; another share keeps reading."""
    ds = open_ndf_dataset(ds_path)
    other = ds.share()
    ds.close()
    ds.close()  # idempotent
    with pytest.raises(ValueError, match="closed NdfDataset"):
        ds.read_rows([0])
    with pytest.raises(ValueError, match="closed NdfDataset"):
        ds.read_rows_into(np.array([0]), np.empty((1, 3)), np.empty((1, 2)))
    assert other.read_rows([20])[0][0, 0] == 20


def test_threads_opening_parts_at_once(ds_path):
    """Threads reading a fresh dataset at once each get their rows (a part opens once)."""
    ds = open_ndf_dataset(ds_path)
    errors, opened = [], []
    real_open = dataset_parts.open_ndf

    def counting_open(*a, **kw):
        opened.append(a[0])
        return real_open(*a, **kw)

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(20):
                rows = rng.integers(0, N, 9)
                x, y = ds.read_rows(rows)
                check_rows(x, y, 3, 2)
                assert x[:, 0].tolist() == rows.tolist()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    dataset_parts.open_ndf = counting_open
    try:
        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        dataset_parts.open_ndf = real_open
    assert not errors
    assert sorted(opened) == sorted(set(opened)) and len(opened) == 4


# -- a bounded number of parts open -------------------------------------------------------


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


needs_proc_fd = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="counts open descriptors in /proc/self/fd"
)


@needs_proc_fd
def test_parts_open_are_bounded_and_the_least_recently_used_closes(tmp_path, each_backend):
    """With max_open_parts=3, reading a fourth part closes the least recently used one
    (its descriptor too: one a part with the compiled core, two on the pure path),
    and a part closed and read again opens again; part(k)'s share keeps its own."""
    path = write_ndf_dataset(tmp_path / "ds", [4] * 6, d=2, l=1)
    per = 1 if each_backend == "compiled" else 2
    gc.collect()
    base = _fds()
    with open_ndf_dataset(path, max_open_parts=3) as ds:
        assert ds.max_open_parts == 3
        for rows, want in [
            ([0], (0,)),
            ([4, 8], (0, 1, 2)),
            (slice(0, 2), (0, 1, 2)),  # part 0 read again: 1 is the least recently used
            ([12], (0, 2, 3)),  # by last use: 2, 0, 3
            (slice(17, 23), (3, 4, 5)),  # a run over parts 4 and 5: 2, then 0 close
            ([1, 13, 22, 9], (2, 3, 5)),  # 4 parts (> 3): read part by part, in order
        ]:
            want_rows = np.arange(24)[rows]
            x, y = np.empty((len(want_rows), 2)), np.empty((len(want_rows), 1))
            ds.read_rows_into(rows if isinstance(rows, slice) else np.array(rows), x, y)
            check_rows(x, y, 2, 1)
            np.testing.assert_array_equal(x[:, 0], want_rows)
            assert ds.open_parts == want and _fds() == base + per * len(want)
        held = ds.part(1)
    assert _fds() == base + per  # the share of part 1 still holds its descriptor
    np.testing.assert_array_equal(held.read_rows([2])[0][:, 0], [6])
    held.close()
    assert _fds() == base


def test_max_open_parts_is_checked_and_defaults_from_the_descriptor_limit(ds_path):
    with pytest.raises(ValueError, match="max_open_parts must be >= 1; got max_open_parts=0"):
        open_ndf_dataset(ds_path, max_open_parts=0)
    with pytest.raises(TypeError, match="max_open_parts must be an int"):
        open_ndf_dataset(ds_path, max_open_parts=2.5)
    assert open_ndf_dataset(ds_path).max_open_parts == dsmod.default_max_open_parts()
    assert 1 <= dsmod.default_max_open_parts() <= 1024


@needs_proc_fd
def test_threads_reading_many_parts_keep_the_open_parts_bounded(tmp_path, each_backend):
    """Threads reading shuffled rows of 60 parts with at most 3 open: every row is right,
    the descriptors open stay bounded (parts closed under a read in flight wait for it:
    the compiled gather pins its parts, a read through a part holds its file), and at
    the end at most 3 parts are open."""
    sizes = [3] * 60
    path = write_ndf_dataset(tmp_path / "ds", sizes, d=2, l=1)
    n = sum(sizes)
    gc.collect()
    base, peak, errors = _fds(), [], []
    ds = open_ndf_dataset(path, max_open_parts=3)

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for k in range(60):
                # a few rows (in at most 3 parts: one gather) or many (part by part)
                part = rng.integers(0, 60, 3)
                rows = (part * 3 + rng.integers(0, 3, 3)) if k % 3 else rng.integers(0, n, 20)
                x, y = ds.read_rows(rows)
                check_rows(x, y, 2, 1)
                assert x[:, 0].tolist() == rows.tolist()
                peak.append(_fds())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    per, t = (1 if each_backend == "compiled" else 2), len(threads)
    # Beyond the bound: the parts each thread's gather pins (3) or its read holds (1), and
    # each thread's listdir of /proc/self/fd: far below 60 parts' worth.
    assert max(peak) <= base + per * (3 + 3 * t + t) + t
    assert len(ds.open_parts) <= 3 and _fds() == base + per * len(ds.open_parts)
    ds.close()


# A loader over many small parts under a low limit on open descriptors: every part
# held open (two descriptors each, before the bound) ended in EMFILE.
LOW_LIMIT = textwrap.dedent(
    """
    import os, resource, sys
    import numpy as np
    from exactbatch import DataLoader, open_ndf_dataset
    path, limit = sys.argv[1], int(sys.argv[2])
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    ds = open_ndf_dataset(path)
    most, seen = 0, []
    for prefetch in (0, 2):
        loader = DataLoader(ds, batch_size=16, shuffle=True, seed=prefetch, prefetch=prefetch)
        for xb, yb in loader:
            seen.append(xb[:, 0].astype(np.int64))
            most = max(most, len(os.listdir("/proc/self/fd")))
        loader.close()
    rows = np.sort(np.concatenate(seen))
    assert np.array_equal(rows, np.tile(np.arange(ds.n), (2, 1)).T.ravel()), "not each row twice"
    print(ds.max_open_parts, len(ds.open_parts), most)
    """
)


@needs_proc_fd
@pytest.mark.parametrize("pure", ["0", "1"], ids=["compiled", "numpy"])
def test_a_shuffled_loader_over_many_parts_runs_under_a_low_descriptor_limit(tmp_path, pure):
    """100 parts under a soft limit of 64 open descriptors: each epoch (with and without
    prefetch) hands out every row exactly once, never an OSError EMFILE; the bound is
    a quarter of the limit's worth of parts."""
    path = write_ndf_dataset(tmp_path / "ds", [3] * 100, d=2, l=1)
    r = subprocess.run(
        [sys.executable, "-c", LOW_LIMIT, path, "64"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "EXACTBATCH_PURE": pure},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    bound, still_open, most = map(int, r.stdout.split())
    assert bound == (16 if pure == "0" else 8) and still_open <= bound and most < 64


def test_features_and_labels_names_are_kept(tmp_path):
    path = write_ndf_dataset(
        tmp_path / "named", [2, 3], d=2, l=1, features=["a", "b"], labels=["t"]
    )
    m = manifest_of(path)
    assert m["features"] == ["a", "b"] and m["labels"] == ["t"]
    ds = open_ndf_dataset(path)
    assert ds.features == ("a", "b") and ds.labels == ("t",)
    assert ds.categories == {}
    coded = tmp_path / "coded"  # the manifest's categories: the label coded 0 "no", 1 "yes"
    write = dsmod.start_dataset(coded)
    part = dsmod.write_part(
        coded, 0, (np.ones((3, 2)), np.array([[0.0], [1.0], [1.0]])), write_id=write
    )
    dsmod.finish_dataset(coded, write, [part], 2, 1, labels=["t"], categories={"t": ["no", "yes"]})
    with open_ndf_dataset(coded) as ds:
        assert ds.categories == {"t": ["no", "yes"]}
        assert (ds.features, ds.labels) == (("x0", "x1"), ("t",))
    # checked as save_ndf checks them (validate_names), before the first part is written
    with pytest.raises(ValueError, match="features names 1 columns .*; the data has 2"):
        write_ndf_dataset(tmp_path / "bad", [2], d=2, l=1, features=["a"])
    with pytest.raises(TypeError, match="must be a list of column names"):
        write_ndf_dataset(tmp_path / "bad2", [2], d=2, l=1, labels="t")
    assert not (tmp_path / "bad").exists() and not (tmp_path / "bad2").exists()


def test_accepts_datasets_pairs_and_arrays(tmp_path):
    x, y = make_data(6, 2, 1)
    save_ndf_dataset(tmp_path / "a", [exactbatch.Dataset(x[:2], y[:2]), (x[2:], y[2:])])
    np.testing.assert_array_equal(open_ndf_dataset(tmp_path / "a").read_rows(range(6))[1], y)
    save_ndf_dataset(tmp_path / "b", iter([x[:4], x[4:]]))  # any iterable, arrays x: l = 0
    b = open_ndf_dataset(f"file://{tmp_path / 'b'}")
    assert (b.n, b.d, b.l) == (6, 2, 0)


# -- writing: atomic, the manifest last ----------------------------------------------------


def folder_state(path) -> dict:
    """Every file in the folder ``path`` and its bytes."""
    return {name: (path / name).read_bytes() for name in sorted(os.listdir(path))}


def test_a_failed_write_keeps_the_old_dataset(tmp_path, ds_path):
    """A part that fails midway (here: another d) leaves the folder as it was: the old
    dataset, its manifest and parts untouched, and no part or temporary file of the
    failed write."""
    before = folder_state(tmp_path / "ds")
    x, y = make_data(4, 3, 2)

    def parts():
        yield x[:2], y[:2]
        yield x[2:, :2], y[2:]

    with pytest.raises(ValueError, match="part 1 has d=2, l=2; part 0 had d=3, l=2"):
        save_ndf_dataset(ds_path, parts())
    assert folder_state(tmp_path / "ds") == before
    assert open_ndf_dataset(ds_path).n == N


def test_an_exception_from_the_parts_leaves_no_manifest(tmp_path):
    def parts():
        yield make_data(3, 2, 1)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        save_ndf_dataset(tmp_path / "ds", parts())
    assert not os.path.exists(tmp_path / "ds")  # the folder it made is gone too
    (tmp_path / "ds").mkdir()
    with pytest.raises(KeyboardInterrupt):
        save_ndf_dataset(tmp_path / "ds", parts())
    assert os.listdir(tmp_path / "ds") == []


def test_no_parts_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no parts to write"):
        save_ndf_dataset(tmp_path / "ds", [])
    assert not os.path.exists(tmp_path / "ds")


def test_rewriting_removes_the_old_parts(tmp_path, ds_path):
    """A dataset written over another: the old parts are removed once the new manifest
    is in place; other files are left alone."""
    (tmp_path / "ds" / "notes.txt").write_text("mine")
    write_ndf_dataset(ds_path, [4, 4])
    new = [os.path.basename(part_file(ds_path, k)) for k in range(2)]
    assert sorted(os.listdir(ds_path)) == ["manifest.json", "notes.txt", *new]
    assert open_ndf_dataset(ds_path).n == 8


def test_parent_folder_is_not_made(tmp_path):
    with pytest.raises(FileNotFoundError):
        save_ndf_dataset(tmp_path / "no" / "ds", [make_data(2)])


def test_write_manifest_checks_the_parts(tmp_path):
    """write_manifest, the last step of a distributed write, refuses parts that cannot be."""
    write = dsmod.start_dataset(tmp_path / "ds")
    good = dsmod.write_part(tmp_path / "ds", 0, make_data(3, 2, 1), write_id=write)
    assert good == dsmod.PartInfo(f"part-00000-{write}.ndf", 3, 28 + 8 * 3 * 3)
    assert dsmod.describe_part(tmp_path / "ds", good.name) == (good, 2, 1)
    cases = [
        ([("p.ndf", 3, 101)], "part p.ndf: nbytes=101 does not match n=3, d=2, l=1"),
        ([good, good], f"part {good.name} is listed twice"),
        ([("../x.ndf", 0, 28)], "no plain file name"),
        ([("manifest.json", 0, 28)], "a part cannot have"),
        ([("p.ndf", -1, 28)], "n must be an integer >= 0"),
        ([("p.ndf", 1)], "must be \\(name, n, nbytes\\)"),
    ]
    for parts, message in cases:
        with pytest.raises(NdfError, match=message):
            dsmod.write_manifest(tmp_path / "ds", parts, 2, 1)
        assert not os.path.exists(tmp_path / "ds" / "manifest.json")
    dsmod.write_manifest(tmp_path / "ds", [{"name": good.name, "n": 3, "nbytes": 100}], 2, 1)
    assert open_ndf_dataset(tmp_path / "ds").read_rows([2])[0][0, 0] == 2


def test_finish_lists_only_the_writes_own_parts(tmp_path, ds_path):
    """finish_dataset refuses a part of another write (or none) and a part not there,
    and aborts the write: the old dataset stays, nothing of the write is left."""
    before = folder_state(tmp_path / "ds")
    old = manifest_of(ds_path)["parts"][0]
    for parts, error in [
        (lambda w, p: [p, (old["name"], old["n"], old["nbytes"])], "is not a part of this write"),
        (lambda w, p: [p, (f"part-00001-{w}.ndf", 0, 28 + 0)], "part 1 of the write .* not there"),
        (lambda w, p: [p, dict(old)], "part 1 is not a part of this write"),  # a dict too
        (lambda w, p: [p._asdict(), {**old, "name": f"part-00001-{w}.ndf"}], "1 of .* not there"),
        # what is no part at all is the manifest's to name
        (lambda w, p: [p, "bogus"], "part 1 must be \\(name, n, nbytes\\); got 'bogus'"),
        (lambda w, p: [p, ()], "part 1 must be \\(name, n, nbytes\\); got \\(\\)"),
    ]:
        write = dsmod.start_dataset(ds_path)
        mine = dsmod.write_part(ds_path, 0, make_data(2, 3, 2), write_id=write)
        with pytest.raises((ValueError, FileNotFoundError, NdfError), match=error):
            dsmod.finish_dataset(ds_path, write, parts(write, mine), 3, 2)
        assert folder_state(tmp_path / "ds") == before


def test_finish_names_the_part_it_refuses_and_why(ds_path):
    """Each refusal in words: the part's file, its place in the list, the write; a part
    no manifest could list (left to the manifest's checks) is looked past, not stopped
    at."""
    old = manifest_of(ds_path)["parts"][0]
    write = dsmod.start_dataset(ds_path)
    mine = dsmod.write_part(ds_path, 0, make_data(2, 3, 2), write_id=write)
    want = (
        f"{os.path.join(ds_path, old['name'])}: part 2 is not a part of this write ({write}): "
        "a manifest lists only its own write's parts, as write_part(..., write_id=...) "
        "names them"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(want)}$"):
        dsmod.finish_dataset(ds_path, write, [mine, "bogus", dict(old)], 3, 2)
    write = dsmod.start_dataset(ds_path)
    mine = dsmod.write_part(ds_path, 0, make_data(2, 3, 2), write_id=write)
    missing = f"part-00001-{write}.ndf"
    with pytest.raises(FileNotFoundError) as got:
        dsmod.finish_dataset(ds_path, write, [mine, (missing, 0, 28)], 3, 2)
    e = got.value
    assert (e.errno, e.strerror, e.filename) == (
        errno.ENOENT,
        f"part 1 of the write {write} is not there",
        os.path.join(ds_path, missing),
    )


def test_a_write_of_another_live_process_on_this_host_is_left_alone(tmp_path):
    """A write still running in another process of this host (its marker there, its
    process alive): the next write here removes none of its files."""
    path = tmp_path / "ds"
    write_ndf_dataset(path, [2])
    begin = textwrap.dedent(
        f"""
        import sys, numpy as np
        from exactbatch.ndf import dataset as dsmod
        w = dsmod.start_dataset({str(path)!r})
        dsmod.write_part({str(path)!r}, 0, (np.ones((2, 3)), np.ones((2, 1))), write_id=w)
        print(w, flush=True)
        sys.stdin.read()  # alive until the test closes its stdin
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", begin], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        other = child.stdout.readline().strip()
        theirs = {f".exactbatch-write-{other}", dsmod.part_name(0, other)}
        assert theirs <= set(os.listdir(path))
        write_ndf_dataset(path, [3])
        assert theirs <= set(os.listdir(path))
    finally:
        child.stdin.close()
        child.wait(30)


def test_a_part_of_an_impossible_shape_is_refused_naming_its_file(tmp_path):
    """write_part checks the shape first: an NdfError naming the part's file, nothing
    written."""
    from exactbatch.dataset import Dataset

    class Huge(Dataset):  # a dataset that claims more rows than any file holds
        @property
        def n(self):
            return 2**63

        @n.setter
        def n(self, value):
            pass

    path = tmp_path / "ds"
    write = dsmod.start_dataset(path)
    where = re.escape(os.path.join(path, dsmod.part_name(0, write)))
    with pytest.raises(NdfError, match=f"^{where}: impossible shape n={2**63}, d=1, l=1"):
        dsmod.write_part(path, 0, Huge(np.ones((2, 1)), np.ones((2, 1))), write_id=write)
    assert os.listdir(path) == [f".exactbatch-write-{write}"]
    dsmod.abort_dataset(path, write)


def test_leftovers_are_judged_only_where_the_manifest_can_be_read(tmp_path):
    """No manifest: a part of a write that is over (here named before write ids) is a
    leftover, removed as the next write starts; a manifest that cannot be read (it may
    list that part): nothing is judged a leftover."""
    path = tmp_path / "ds"
    path.mkdir()
    (path / "part-00000.ndf").write_bytes(b"")
    write = dsmod.start_dataset(path)
    assert os.listdir(path) == [f".exactbatch-write-{write}"]
    dsmod.abort_dataset(path, write)
    (path / "part-00000.ndf").write_bytes(b"")
    (path / "manifest.json").write_bytes(b"{not json")
    write = dsmod.start_dataset(path)
    assert sorted(os.listdir(path)) == sorted(
        [f".exactbatch-write-{write}", "manifest.json", "part-00000.ndf"]
    )
    dsmod.abort_dataset(path, write)
    assert sorted(os.listdir(path)) == ["manifest.json", "part-00000.ndf"]


def test_a_sweep_of_leftovers_that_fails_stops_no_write(tmp_path, monkeypatch):
    """The sweep of leftovers is best effort: one that fails (here: this host cannot be
    named) removes nothing, and the write goes on."""
    from exactbatch.ndf import dataset_protocol

    def unnamed():
        raise OSError("no host tag")

    monkeypatch.setattr(dataset_protocol, "host_tag", unnamed)
    write_ndf_dataset(tmp_path / "ds", [2, 3])
    assert open_ndf_dataset(tmp_path / "ds").n == 5


def test_temporary_files_go_only_when_their_writer_is_gone(tmp_path):
    """A temporary file of this host (a part's or a manifest's) goes as the next write
    starts when the process that made it is gone, and stays while that process runs;
    the sweep looks at every file of a folder of many."""
    from exactbatch.ndf.temps import host_tag

    path = write_ndf_dataset(tmp_path / "ds", [1] * 12)
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead, alive, host = int(ended.stdout), os.getppid(), host_tag()

    def temp(name, pid):
        return f".{name}.{host}.{pid}.0123456789ab.tmp"

    gone = [temp(dsmod.part_name(k, f"{host}-{dead}-0badf00d"), dead) for k in range(3)]
    gone.append(temp("manifest.json", dead))
    running = temp(dsmod.part_name(0, f"{host}-{alive}-0badf00d"), alive)
    for name in [*gone, running]:
        with open(os.path.join(path, name), "wb"):
            pass
    write = dsmod.start_dataset(path)
    left = set(os.listdir(path))
    assert not left & set(gone)
    assert running in left
    dsmod.abort_dataset(path, write)


def test_our_own_temporary_files_go_once_their_write_is_over(tmp_path):
    """This process's temporary file of a part goes as a write starts once the part's
    write is over (a Ctrl-C between the file's creation and its use); one of a write in
    progress, or of a manifest (which a write of ours may be writing), stays."""
    from exactbatch.ndf.temps import host_tag

    path = write_ndf_dataset(tmp_path / "ds", [2])
    host, me = host_tag(), os.getpid()
    running = dsmod.start_dataset(path)

    def temp(name):
        return f".{name}.{host}.{me}.0123456789ab.tmp"

    over = temp(dsmod.part_name(0, f"{host}-{me}-0badf00d"))  # no marker: over
    kept = [temp(dsmod.part_name(0, running)), temp("manifest.json")]
    for name in [over, *kept]:
        with open(os.path.join(path, name), "wb"):
            pass
    write = dsmod.start_dataset(path)
    left = set(os.listdir(path))
    assert over not in left
    assert set(kept) <= left
    for w in (write, running):
        dsmod.abort_dataset(path, w)


def test_a_start_whose_marker_cannot_be_made_raises_its_error_and_leaves_nothing(
    tmp_path, monkeypatch
):
    """start_dataset's marker refused (a read-only folder, a full disk): that error, and
    the write undone (the folder it made is gone)."""
    from exactbatch.ndf.storage import LocalLocation

    def refused(self, name):
        raise OSError(errno.EROFS, "read-only file system")

    monkeypatch.setattr(LocalLocation, "create", refused)
    with pytest.raises(OSError, match="read-only file system"):
        dsmod.start_dataset(tmp_path / "ds")
    assert not (tmp_path / "ds").exists()


def test_a_write_where_a_file_is_names_the_file(tmp_path):
    (tmp_path / "ds").write_bytes(b"x")
    want = (
        f"{tmp_path / 'ds'}: not a dataset: expected a folder holding manifest.json, found a "
        "file (open a single .ndf file with open_ndf)"
    )
    with pytest.raises(NdfError, match=f"^{re.escape(want)}$"):
        dsmod.start_dataset(tmp_path / "ds")
    assert os.listdir(tmp_path) == ["ds"]


def test_the_parts_a_write_replaces_go_even_where_no_sweep_would_take_them(tmp_path):
    """A dataset whose write was killed on another host after its manifest was in place
    (its marker left: no sweep from this host judges its files leftovers): a new
    dataset there replaces it, and the parts its manifest listed go with it (the other
    host's marker stays, for a write from there)."""
    from exactbatch.ndf.temps import host_tag

    path = tmp_path / "ds"
    elsewhere = f"{int(host_tag(), 16) ^ 1:08x}-7-0badf00d"  # another host's write id
    path.mkdir()
    old = [dsmod.write_part(path, k, make_data(3, 3, 1), write_id=elsewhere) for k in range(2)]
    dsmod.finish_dataset(path, elsewhere, old, 3, 1)
    marker = f".exactbatch-write-{elsewhere}"
    (path / marker).write_bytes(b"")  # killed before it removed its marker
    write_ndf_dataset(path, [4])
    with open_ndf_dataset(path) as ds:
        assert ds.n == 4
        new = [p.name for p in ds.parts]
    assert sorted(os.listdir(path)) == sorted(["manifest.json", marker, *new])


def test_a_write_begun_by_another_process_is_finished_here(tmp_path):
    """The steps of a write may run in several processes (a distributed writer): one that
    did not begin the write (here: a process that has ended since) finishes it all the
    same, and its marker goes."""
    path = tmp_path / "ds"
    begin = f"from exactbatch.ndf.dataset import start_dataset; print(start_dataset({str(path)!r}))"
    write = subprocess.run(
        [sys.executable, "-c", begin], capture_output=True, text=True, check=True
    ).stdout.strip()
    parts = [dsmod.write_part(path, k, make_data(3, 3, 1), write_id=write) for k in range(2)]
    dsmod.finish_dataset(path, write, parts, 3, 1)
    assert open_ndf_dataset(path).n == 6
    assert sorted(os.listdir(path)) == sorted(["manifest.json", *(p.name for p in parts)])


def test_start_dataset_keeps_the_old_dataset(tmp_path, ds_path):
    """A write begun, with a part written, changes nothing a reader sees; aborted, it
    leaves the folder as it was."""
    before = folder_state(tmp_path / "ds")
    write = dsmod.start_dataset(ds_path)
    dsmod.write_part(ds_path, 0, make_data(3, 3, 2), write_id=write)
    assert open_ndf_dataset(ds_path).read_rows(np.arange(N))[0][:, 0].tolist() == list(range(N))
    dsmod.abort_dataset(ds_path, write)
    assert folder_state(tmp_path / "ds") == before


@pytest.mark.parametrize("how", ["save_ndf_dataset", "NdfDatasetWriter"])
def test_a_part_renamed_just_before_a_ctrl_c_is_removed(tmp_path, ds_path, monkeypatch, how):
    """A Ctrl-C that lands after a part's rename, before the writer has recorded the
    part: the abort still finds and removes it (by its write id), and the old dataset
    is as it was."""
    import exactbatch.ndf.write as writemod

    before = folder_state(tmp_path / "ds")
    fsync_folder = writemod.fsync_folder

    def interrupted(folder):  # runs just after a part's rename
        fsync_folder(folder)
        raise KeyboardInterrupt

    monkeypatch.setattr(writemod, "fsync_folder", interrupted)
    _interrupted_write(ds_path, how)
    assert folder_state(tmp_path / "ds") == before


def _interrupted_write(ds_path, how: str) -> None:
    """A two-part write by ``how``, which the test has made raise KeyboardInterrupt."""
    x, y = make_data(6, 3, 2)
    with pytest.raises(KeyboardInterrupt):
        if how == "save_ndf_dataset":
            save_ndf_dataset(ds_path, [(x[:3], y[:3]), (x[3:], y[3:])])
        else:
            with dsmod.NdfDatasetWriter(ds_path, 3, 2, part_rows=3) as w:
                w.write(np.hstack([x, y]))


@pytest.mark.parametrize("how", ["save_ndf_dataset", "NdfDatasetWriter"])
def test_a_ctrl_c_as_the_last_step_begins_is_undone(tmp_path, ds_path, monkeypatch, how):
    """A Ctrl-C that strikes as finish_dataset is called, before it holds signals: the
    writer still aborts, so every part is there and none is left."""
    from exactbatch.ndf import dataset_write

    before = folder_state(tmp_path / "ds")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(dataset_write, "finish_dataset", interrupted)
    _interrupted_write(ds_path, how)
    assert folder_state(tmp_path / "ds") == before


def test_a_ctrl_c_during_the_manifests_rename_waits_for_its_end(tmp_path, ds_path, monkeypatch):
    """SIGINT while the manifest is written is held until the write's last step: the
    Ctrl-C is raised, and the new dataset is whole, the old one's parts removed."""
    import signal

    from exactbatch.ndf import dataset_protocol

    write_manifest = dataset_protocol.write_manifest

    def interrupted(*args, **kwargs):
        man = write_manifest(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # just after the rename
        return man

    monkeypatch.setattr(dataset_protocol, "write_manifest", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_ndf_dataset(ds_path, [4, 4], d=3, l=2)
    ds = open_ndf_dataset(ds_path)
    assert ds.read_rows(np.arange(8))[0][:, 0].tolist() == list(range(8))
    listed = {p.name for p in ds.parts}
    assert sorted(os.listdir(ds_path)) == sorted({"manifest.json", *listed})


def test_two_writers_at_once_end_as_one_writers_dataset(tmp_path):
    """A second writer that runs entirely while the first is between two parts: the
    first's manifest, written last, wins and lists its own parts only; the second's
    parts are removed. Never a dataset of parts from both."""
    path = tmp_path / "ds"
    first, second = make_data(10, 2, 1), make_data(10, 2, 1)
    second = (second[0] + 1000, second[1])

    def parts():
        yield first[0][:5], first[1][:5]
        save_ndf_dataset(path, [(second[0][:5], second[1][:5]), (second[0][5:], second[1][5:])])
        assert open_ndf_dataset(path).read_rows([0])[0][0, 0] == 1000  # the second's, whole
        yield first[0][5:], first[1][5:]

    save_ndf_dataset(path, parts())
    ds = open_ndf_dataset(path)
    np.testing.assert_array_equal(ds.read_rows(np.arange(10))[0], first[0])
    assert sorted(os.listdir(path)) == sorted({"manifest.json", *(p.name for p in ds.parts)})


def test_leftovers_of_writes_that_are_over_are_removed_by_the_next_write(tmp_path, ds_path):
    """The next write removes, of the files no manifest lists: parts of writes that ended
    (no marker), parts and the marker of a write killed on this host (its process is
    gone), parts named before write ids, and temporary files of writers gone. A write
    on another host that still has its marker keeps its files, and so do other files."""
    import subprocess
    import sys

    from exactbatch.ndf.temps import host_tag

    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead, host = int(child.stdout), host_tag()
    killed, ended = f"{host}-{dead}-0123abcd", f"{host}-{dead}-4567cdef"
    other = f"{'0' if host[0] != '0' else '1'}{host[1:]}"
    running, done = f"{other}-{dead}-0123abcd", f"{other}-{dead}-89abcdef"
    left = [
        f".exactbatch-write-{killed}",
        f"part-00000-{killed}.ndf",
        f"part-00000-{ended}.ndf",
        f"part-00003-{done}.ndf",
        f".part-00001-{killed}.ndf.{host}.{dead}.0123456789ab.tmp",
        f".manifest.json.{host}.{dead}.0123456789ab.tmp",
        "part-00007.ndf",
    ]
    kept = [f".exactbatch-write-{running}", f"part-00000-{running}.ndf", "notes.txt", ".o.tmp"]
    for name in left + kept:
        (tmp_path / "ds" / name).write_bytes(b"")
    write_ndf_dataset(ds_path, [3], d=3, l=2)
    listed = os.path.basename(part_file(ds_path, 0))
    assert sorted(os.listdir(ds_path)) == sorted(["manifest.json", listed, *kept])


def test_a_write_marks_the_folder_while_it_runs(tmp_path):
    """.exactbatch-write-<write id> is there from start_dataset to finish (or abort)."""
    write = dsmod.start_dataset(tmp_path / "ds")
    assert os.listdir(tmp_path / "ds") == [f".exactbatch-write-{write}"]
    info = dsmod.write_part(tmp_path / "ds", 0, make_data(2), write_id=write)
    dsmod.finish_dataset(tmp_path / "ds", write, [info], 3, 1)
    assert sorted(os.listdir(tmp_path / "ds")) == ["manifest.json", info.name]


# -- bad datasets: each an NdfError naming the part ----------------------------------------


def test_a_missing_part(ds_path):
    p = part_file(ds_path, 2)
    os.unlink(p)
    ds = open_ndf_dataset(ds_path)  # the manifest alone is fine
    ds.read_rows([0, 4])  # part 0 is there
    size = os.path.getsize(part_file(ds_path, 0)) - 5 * 40 + 12 * 40  # (28 + 12 rows of 40)
    want = (
        f"{p}: part 2 ({os.path.basename(p)}) of the dataset is missing; "
        f"the manifest lists it with n=12, {size} bytes"
    )
    with pytest.raises(NdfError, match=f"^{re.escape(want)}$"):
        ds.read_rows([6])


def test_a_truncated_part(ds_path):
    p = part_file(ds_path, 4)
    os.truncate(p, os.path.getsize(p) - 8)
    ds = open_ndf_dataset(ds_path)
    name = re.escape(os.path.basename(p))
    with pytest.raises(NdfError, match=f"part 4 \\({name}\\).*file too short"):
        ds.read_rows([N - 1])


@pytest.mark.parametrize("d,l", [(2, 2), (3, 1), (4, 0)])
def test_a_part_with_another_d_or_l(ds_path, d, l):  # noqa: E741
    """A part of other widths (here of the manifest's byte size even where that can be)."""
    rows = 12 * 5 // (d + l)
    save_ndf(part_file(ds_path, 2), make_data(rows, d, l))
    ds = open_ndf_dataset(ds_path)
    with pytest.raises(NdfError, match=f"part-00002-.*has d={d}, l={l}; the dataset has d=3"):
        ds.read_rows([5])


def test_a_part_of_another_n_than_the_manifest(ds_path):
    save_ndf(part_file(ds_path, 0), make_data(4, 3, 2))
    ds = open_ndf_dataset(ds_path)
    with pytest.raises(NdfError, match="part-00000-.*does not match the manifest: it holds n=4"):
        ds.read_rows([0])


def test_a_manifest_whose_sizes_do_not_add_up(ds_path):
    m = manifest_of(ds_path)
    m["parts"][3]["nbytes"] += 8
    rewrite_manifest(ds_path, m)
    with pytest.raises(NdfError, match="part part-00003-.*: nbytes=.* does not match n=1"):
        open_ndf_dataset(ds_path)
    m["parts"][3]["nbytes"] -= 8
    m["n"] += 1
    rewrite_manifest(ds_path, m)
    with pytest.raises(NdfError, match=f"n={N + 1} but the parts' n add up to {N}"):
        open_ndf_dataset(ds_path)


def test_a_folder_without_a_manifest_is_not_a_dataset(tmp_path):
    save_ndf(tmp_path / "part-00000.ndf", make_data(3))
    with pytest.raises(NdfError, match="not a dataset: the folder holds no manifest.json"):
        open_ndf_dataset(tmp_path)
    with pytest.raises(NdfError, match="not a dataset: expected a folder .* found a file"):
        open_ndf_dataset(tmp_path / "part-00000.ndf")
    with pytest.raises(FileNotFoundError):
        open_ndf_dataset(tmp_path / "nothing")


@pytest.mark.parametrize(
    "change,message",
    [
        ({"version": 2}, "manifest version 2; this exactbatch reads version 1"),
        ({"version": None}, "manifest version None"),
        ({"format": "other"}, "not a dataset manifest: expected format"),
        ({"d": -1}, "'d' must be an integer in \\[0, 2147483647\\]; found -1"),
        ({"parts": {}}, "'parts' must be a list"),
        ({"labels": ["a", "b", "c"]}, "labels names 3 columns .*; the data has 2"),
    ],
)
def test_a_manifest_of_another_version_or_malformed(ds_path, change, message):
    rewrite_manifest(ds_path, {**manifest_of(ds_path), **change})
    with pytest.raises(NdfError, match=message):
        open_ndf_dataset(ds_path)


def test_a_manifest_that_is_not_json(ds_path):
    with open(os.path.join(ds_path, "manifest.json"), "wb") as f:
        f.write(b"{not json")
    with pytest.raises(NdfError, match="manifest.json: not a dataset manifest: not valid JSON"):
        open_ndf_dataset(ds_path)
    # a write over it replaces it (no part of it is known to be replaced), and the old
    # parts then go as leftovers
    write_ndf_dataset(ds_path, [2, 3])
    with open_ndf_dataset(ds_path) as ds:
        assert ds.n == 5
        names = [p.name for p in ds.parts]
    assert sorted(os.listdir(ds_path)) == sorted(["manifest.json", *names])


def test_check_part_and_part(ds_path):
    ds = open_ndf_dataset(ds_path)
    for k in range(len(SIZES)):
        ds.check_part(k)
    with ds.part(2) as f:
        assert f.n == 12 and f.read_row(0)[0][0] == 5
    with pytest.raises(IndexError, match="part 5 out of range"):
        ds.check_part(5)
    os.unlink(part_file(ds_path, 1))
    with pytest.raises(NdfError, match="part-00001-"):
        ds.check_part(1)


def test_part_and_check_part_refuse_what_is_not_a_part(ds_path):
    """Both name the argument and the range; the first and the last part are parts."""
    ds = open_ndf_dataset(ds_path)
    for method in (ds.part, ds.check_part):
        with pytest.raises(TypeError, match=r"^part must be an int; got 1\.5$"):
            method(1.5)
        for k in (-1, len(SIZES)):
            want = f"part {k} out of range for {ds.path} with {len(SIZES)} parts"
            with pytest.raises(IndexError, match=f"^{re.escape(want)}$"):
                method(k)
    for k in (0, len(SIZES) - 1):
        ds.check_part(k)
        with ds.part(k) as f:
            assert f.n == SIZES[k]


def test_repr_says_what_it_is_and_whether_it_is_open(ds_path):
    ds = open_ndf_dataset(ds_path)
    assert repr(ds) == f"NdfDataset({ds.path!r}, n={N}, d=3, l=2, parts=5, open)"
    ds.close()
    assert repr(ds) == f"NdfDataset({ds.path!r}, n={N}, d=3, l=2, parts=5, closed)"


def test_a_failed_gather_names_the_part_the_core_named(ds_path):
    """The core says which part a copy failed in: that part alone is checked (another
    part's change is not what failed), and, unchanged on disk, it is named."""
    ds = open_ndf_dataset(ds_path)
    ds.read_rows([0, 10, 24])
    parts = ds._handle()
    os.truncate(part_file(ds_path, 4), 28)
    name = ds.parts[2].name
    want = (
        f"{ds.path}: part 2 ({name}) of the dataset changed while open: a copy from it "
        "failed (truncated, or rewritten in place, during the read?)"
    )
    with pytest.raises(NdfError, match=f"^{re.escape(want)}$"):
        parts._changed(2)


def test_blocks_and_hints_never_open_an_empty_part(ds_path):
    """Rows read across the empty part 1 (and hinted at) open the parts holding them."""
    ds = open_ndf_dataset(ds_path)
    out = np.full((8, 5), np.nan)
    ds.read_block_into(2, out)
    assert out[:, 0].tolist() == list(range(2, 10))
    assert ds.open_parts == (0, 2)
    ds.will_need(0, N)
    assert ds.open_parts == (0, 2, 3, 4)
    assert [s[:2] for s in ds._handle().spans(0, N)] == [(0, 0), (2, 0), (3, 0), (4, 0)]


def test_remove_parts_removes_the_files_named_and_ignores_the_rest(ds_path):
    names = [p.name for p in open_ndf_dataset(ds_path).parts]
    dsmod.remove_parts(ds_path, [names[1], names[3], "part-00009.ndf"])
    assert sorted(os.listdir(ds_path)) == sorted(["manifest.json", names[0], names[2], names[4]])


def test_an_abort_removes_its_own_temporary_files_and_only_the_folder_it_made(tmp_path):
    """A part's temporary file (a writer interrupted mid-part) goes with its write;
    another write's stays, so the folder the write made is left, not empty, and no
    error escapes. A folder the write did not make is never removed."""
    from exactbatch.ndf.temps import host_tag

    path = tmp_path / "new"
    write = dsmod.start_dataset(path)
    other = f"{host_tag()}-1-0badf00d"
    temps = [
        f".{dsmod.part_name(k, w)}.{host_tag()}.{os.getpid()}.0123456789ab.tmp"
        for k, w in ((0, write), (1, other))
    ]
    for name in temps:
        (path / name).write_bytes(b"")
    dsmod.abort_dataset(path, write)
    assert os.listdir(path) == [temps[1]]
    (path / temps[1]).unlink()
    dsmod.abort_dataset(path, other)  # a write this process never began: not its folder
    assert path.is_dir()


def test_an_abort_whose_listing_fails_still_ends_the_write(tmp_path, monkeypatch):
    """The folder cannot be listed (a store refusing, a network error): no error escapes
    the abort, and what it can still do is done: its marker is removed, and so the
    folder it made, now empty."""
    from exactbatch.ndf import dataset_protocol

    path = tmp_path / "new"
    write = dsmod.start_dataset(path)
    assert any(name.endswith(write) for name in os.listdir(path))  # its marker

    def refused(self):
        raise PermissionError("listing refused")

    monkeypatch.setattr(dataset_protocol._Folder, "names", refused)
    dsmod.abort_dataset(path, write)
    assert not path.exists()


def test_manifest_module_names(tmp_path):
    assert manmod.part_name(7) == "part-00007.ndf"  # as parts were named before write ids
    assert manmod.part_name(123456) == "part-123456.ndf"
    assert manmod.part_name(7, "0a1b2c3d-42-89abcdef") == "part-00007-0a1b2c3d-42-89abcdef.ndf"
    with pytest.raises(ValueError):
        manmod.part_name(-1)
    with pytest.raises(ValueError, match="write_id must be a write id"):
        manmod.part_name(7, "../x")
    with pytest.raises(ValueError, match="storage_options applies only to URLs"):
        open_ndf_dataset(tmp_path, storage_options={})


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d,l", [(3, 0), (0, 2), (0, 0), (1, 2), (2, 2)])
def test_reads_with_an_empty_side(tmp_path, each_backend, d, l, dtype):  # noqa: E741
    """No labels, no features, or neither (and one feature, or as many labels as
    features): scattered, sorted and one-part reads alike, on both backends, in either
    dtype (the pure path puts scattered rows back whole, straight into a float64 side
    that is alone)."""
    path = write_ndf_dataset(tmp_path / "ds", SIZES, d=d, l=l)
    x, y = make_data(N, d, l)
    ds = open_ndf_dataset(path)
    for rows in ([24, 0, 17, 5, 5], [0, 6, 24], [7, 8]):
        gx, gy = ds.read_rows(rows)
        assert gx.shape == (len(rows), d) and gy.shape == (len(rows), l)
        np.testing.assert_array_equal(gx, x[rows])
        np.testing.assert_array_equal(gy, y[rows])
        ox = np.full((len(rows), d), np.nan, dtype=dtype)
        oy = np.full((len(rows), l), np.nan, dtype=dtype)
        ds.read_rows_into(np.array(rows), ox, oy)
        np.testing.assert_array_equal(ox, x[rows].astype(dtype))
        np.testing.assert_array_equal(oy, y[rows].astype(dtype))


# -- NdfDatasetWriter: slab by slab, a new part every part_rows rows -------------------------


def test_writer_cuts_parts_at_part_rows(tmp_path):
    """Slabs of any size (empty ones too) become parts of part_rows rows, the last one
    shorter; write and write_raw alike; the manifest keeps the names."""
    x, y = make_data(23, 2, 1)
    whole = np.concatenate([x, y], axis=1)
    with dsmod.NdfDatasetWriter(tmp_path / "w", 2, 1, 5, n=23, features=["a", "b"]) as w:
        w.write(whole[:7])
        w.write(whole[7:7])
        w.write_raw(np.ascontiguousarray(whole[7:19]).tobytes())
        w.write(whole[19:])
    ds = open_ndf_dataset(tmp_path / "w")
    assert [p.n for p in ds.parts] == [5, 5, 5, 5, 3]
    assert ds.features == ("a", "b") and ds.manifest.labels is None and ds.labels == ("y0",)
    np.testing.assert_array_equal(ds.read_rows(np.arange(23))[0], x)


def test_writer_that_fails_leaves_no_manifest_and_no_part(tmp_path):
    x, _ = make_data(12, 2, 0)
    with pytest.raises(RuntimeError, match="boom"):
        with dsmod.NdfDatasetWriter(tmp_path / "w", 2, 0, 5) as w:
            w.write(x)
            raise RuntimeError("boom")
    assert not os.path.exists(tmp_path / "w")
    with pytest.raises(ValueError, match="promised 13 rows but 12 were written"):
        with dsmod.NdfDatasetWriter(tmp_path / "w", 2, 0, 5, n=13) as w:
            w.write(x)
    assert not os.path.exists(tmp_path / "w")
    with pytest.raises(ValueError, match="not a whole number of rows"):
        dsmod.NdfDatasetWriter(tmp_path / "w", 2, 0, 5).write_raw(b"123")


def test_writer_of_no_rows_is_an_empty_dataset(tmp_path):
    with dsmod.NdfDatasetWriter(tmp_path / "e", 3, 1, 5):
        pass
    ds = open_ndf_dataset(tmp_path / "e")
    assert (ds.n, ds.d, ds.l, ds.parts) == (0, 3, 1, ())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_reads_in_a_forked_child(ds_path):
    """Parts opened before a fork read in the child too (its own locks, pool and leases)."""
    ds = open_ndf_dataset(ds_path)
    ds.read_rows([0, 6, 24])  # parts 0, 2, 4 open in the parent
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report the ids it read, then leave at once
        try:
            x, _ = ds.read_rows([24, 17, 3, 6])
            os.write(w, json.dumps(x[:, 0].tolist()).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        got = json.loads(f.read())
    os.waitpid(pid, 0)
    assert got == [24, 17, 3, 6]


def _open_files_under(folder) -> list[str]:
    """The files under ``folder`` this process holds open (deleted ones too)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder)):
            held.append(target)
    return held


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("how", ["abort", "error"])
def test_an_aborted_write_closes_the_part_it_was_writing(tmp_path, how):
    """A write aborted mid-part (abort(), or an error in its with block) closes that
    part's file, not only removes it: an open descriptor of a removed file keeps its
    disk space until the process ends."""
    x, y = make_data(7, 3, 2)
    w = dsmod.NdfDatasetWriter(tmp_path / "ds", 3, 2, part_rows=5)
    if how == "abort":
        w.write(np.hstack([x, y]))  # one part whole, the second begun
        assert _open_files_under(tmp_path)
        w.abort()
    else:
        with pytest.raises(RuntimeError), w:
            w.write(np.hstack([x, y]))
            raise RuntimeError("the caller's own error")
    assert _open_files_under(tmp_path) == []
    assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").iterdir())


def test_the_default_bound_on_open_parts_follows_the_descriptor_limit(monkeypatch):
    """A quarter of the soft limit over the descriptors a part holds (1 compiled, 2 on
    the NumPy path), an int from 1 to 1,024; no limit (RLIM_INFINITY) is 1,024."""
    import resource

    soft = [0]
    monkeypatch.setattr(resource, "getrlimit", lambda which: (soft[0], 1 << 20))
    for name, per in (("compiled", 1), ("numpy", 2)):
        monkeypatch.setattr(dataset_parts, "backend", lambda name=name: name)
        for limit, want in ((1 << 20, 1024), (-1, 1024), (401, 100 // per), (8, 2 // per)):
            soft[0] = limit
            got = dataset_parts.default_max_open_parts()
            assert type(got) is int and got == max(1, want), (name, limit)
        for limit in (0, 3):
            soft[0] = limit
            assert dataset_parts.default_max_open_parts() == 1


def test_rows_too_large_to_pack_are_sorted_by_argsort():
    idx = np.array([2**61, 5, 2**61 - 1, 5], dtype=np.int64)
    order, rows = dataset_parts._sort_rows(idx, 2**62)
    assert rows.tolist() == [5, 5, 2**61 - 1, 2**61] and sorted(order.tolist()[:2]) == [1, 3]
    assert order.tolist()[2:] == [2, 0]
    order, rows = dataset_parts._sort_rows(np.array([7, 2, 9]), 10)  # packed
    assert (order.tolist(), rows.tolist()) == ([1, 0, 2], [2, 7, 9])
