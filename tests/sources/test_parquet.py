"""parquet_source: files, folders, lists; metadata sizes; frozen columns; shard reads.

DESIGN.md, "Streamed sources": a chunk is one row group; columns are frozen
by name at construction and every file is checked (missing or non-numeric
columns are a ValueError naming the file and the columns); n_rows comes from
the footers with no data read; the loader reads only the row groups its
shard needs and shuffles their order per epoch. Rows are traceable:
column ``x0`` is the row id (see helpers.py).
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from helpers import check_rows, collect, ids, make_x, make_y, write_parquet
from hypothesis import given, settings
from hypothesis import strategies as st
from laws import check_epoch

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from exactbatch import DataLoader, ParquetSource, TotalSizeWarning, parquet_source  # noqa: E402

# Three files, row groups of these sizes (an empty row group included); file b
# stores its columns in reverse order.
GROUPS = {"a.parquet": [5, 0, 7], "b.parquet": [3, 9], "c.parquet": [6, 1, 4]}
N = sum(sum(g) for g in GROUPS.values())  # 35


def flat(batches):
    return [i for b in batches for i in b]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A folder of three Parquet files holding rows 0..34 in sorted-file order."""
    root = tmp_path_factory.mktemp("pq")
    first = 0
    bounds = []
    for name, groups in GROUPS.items():
        order = [3, 2, 1, 0] if name == "b.parquet" else None
        bounds += write_parquet(root / name, groups, first, d=3, l=1, order=order)
        first += sum(groups)
    (root / "notes.txt").write_text("not parquet")
    return root, bounds


def group_of(bounds):
    """Row id -> index of the row group (chunk) holding it."""
    out = {}
    for k, (lo, hi) in enumerate(bounds):
        for i in range(lo, hi):
            out[i] = k
    return out


# -- sources -------------------------------------------------------------------------------


def test_single_file_streams_its_row_groups_in_order(tmp_path):
    """A single file is a source; one chunk per row group; rows stream in file order."""
    path = tmp_path / "one.parquet"
    write_parquet(path, [4, 6, 3], d=2, l=2)
    src = parquet_source(path, labels=["y0", "y1"])
    assert src.n_rows == 13 and src.d == 2 and src.l == 2
    assert list(src.chunk_rows) == [4, 6, 3]
    loader = DataLoader(src, 5, shuffle=False)
    assert collect(loader, 2, 2) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12]]


def test_folder_reads_matching_files_in_sorted_order(folder):
    """A folder is its files matching the pattern, sorted; columns are matched by name."""
    root, bounds = folder
    src = parquet_source(root, labels="y0")
    assert [os.path.basename(f) for f in src.files] == sorted(GROUPS)
    assert src.n_rows == N and list(src.chunk_rows) == [g for v in GROUPS.values() for g in v]
    assert src.features == ("x0", "x1", "x2") and src.labels == ("y0",)
    loader = DataLoader(src, 4, shuffle=False)
    assert flat(collect(loader, 3, 1)) == list(range(N))


def test_list_of_files_is_read_in_the_given_order(folder):
    """A list of files is read in the order given."""
    root, _ = folder
    src = parquet_source([root / "c.parquet", root / "a.parquet"], labels="y0")
    loader = DataLoader(src, 100, shuffle=False)
    assert flat(collect(loader, 3, 1)) == list(range(24, 35)) + list(range(0, 12))


def test_pattern_selects_files_in_a_folder(folder):
    """pattern picks which files of a folder are read."""
    root, _ = folder
    src = parquet_source(root, labels="y0", pattern="[ab].parquet")
    assert src.n_rows == 24


def test_missing_path_is_file_not_found(tmp_path):
    """A path that does not exist is FileNotFoundError naming it."""
    with pytest.raises(FileNotFoundError, match="nope"):
        parquet_source(tmp_path / "nope.parquet")


def test_local_paths_refused_are_named_in_full(tmp_path):
    """An empty folder, a FIFO where a Parquet file should be (pyarrow would wait on it),
    an empty list, and a path of another type: each error says what was expected."""
    from exactbatch.errors import NdfError
    from exactbatch.sources.parquet import list_local_files

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError) as e:
        parquet_source(empty)
    assert str(e.value) == f"no files matching '**/*.parquet' in folder {empty}"
    pipes = tmp_path / "pipes"
    pipes.mkdir()
    os.mkfifo(pipes / "a.parquet")
    with pytest.raises(NdfError) as e:
        parquet_source(pipes)
    fifo = "not a regular file: expected a Parquet file, found a FIFO (named pipe)"
    assert str(e.value) == f"{pipes / 'a.parquet'}: {fifo}"
    with pytest.raises(ValueError) as e:
        parquet_source([])
    assert str(e.value) == "parquet_source got an empty list of files"
    for bad in (5, b"a.parquet"):  # list_local_files itself (parquet_source's local_path
        with pytest.raises(TypeError) as e:  # refuses them first)
            list_local_files(bad)
        assert str(e.value) == f"path must be a file, a folder or a list of files; got {bad!r}"


# -- folders: partitions, patterns, names with glob characters, local and over a URL ---------

# relative path -> row group sizes; rows are numbered in sorted path order
HIVE = {
    "a.parquet": [5, 5],
    "year=2024/month=01/part-0.parquet": [20],
    "year=2024/month=02/part-0.parquet": [15, 5],
    "year=2025/month=01/part-0.parquet": [20],
}
HIVE_N = 70


@pytest.fixture
def hive(tmp_path):
    """A Hive-style partitioned folder named ``run[1]``, locally and on memory://, with a
    hidden half-written file at its top (another writer's temporary) that no pattern reads."""
    fsspec = pytest.importorskip("fsspec")
    local = tmp_path / "run[1]"
    fs = fsspec.filesystem("memory")
    remote = f"/{tmp_path.name}/run[1]"
    first = 0
    for rel, groups in {**HIVE, ".a.parquet": [3]}.items():
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        write_parquet(local / rel, groups, first if rel in HIVE else -99)
        first += sum(groups) if rel in HIVE else 0
        fs.pipe(f"{remote}/{rel}", (local / rel).read_bytes())
    yield local, f"memory://{remote}"
    fs.rm(remote.rsplit("/", 1)[0], recursive=True)


def test_a_partitioned_folder_is_read_whole_alike_locally_and_over_a_url(hive):
    """The default pattern reads every .parquet at any depth (Hive partitions), in the
    order of their paths inside the folder: the same files and rows locally and over a
    URL; ``[1]`` in the folder's name is part of the name; hidden files are skipped.
    (The partition keys are columns too: tests/sources/test_hive.py.)"""
    local, url = hive
    feats = ["x0", "x1", "x2"]
    for pattern in ({}, {"pattern": "**/*.parquet"}):
        a = parquet_source(local, features=feats, labels="y0", **pattern)
        b = parquet_source(url, features=feats, labels="y0", **pattern)
        assert [os.path.relpath(f, local) for f in a.files] == list(HIVE)
        assert [f[len(url) + 1 :] for f in b.files] == list(HIVE)
        assert a.n_rows == b.n_rows == HIVE_N
        for src in (a, b):
            assert flat(collect(DataLoader(src, 16, shuffle=False), 3, 1)) == list(range(HIVE_N))
    # the top level only, when asked for
    assert parquet_source(local, pattern="*.parquet").n_rows == 10
    assert parquet_source(url, pattern="*.parquet").n_rows == 10
    assert parquet_source(url, pattern="year=2024/*/*.parquet").n_rows == 40


def test_a_partitioned_folder_over_a_url_has_the_keys_it_has_locally(hive):
    """Over a URL too, the keys are columns (a file outside every key folder has them
    missing), and may be categorical; a list of files has no keys."""
    local, url = hive
    got = []
    for root in (local, url):
        src = parquet_source(root, labels="y0", categorical=["year"])
        assert src.features == ("x0", "x1", "x2", "year", "month")
        assert src.categories == {"year": [2024, 2025]}
        got.append(np.concatenate([src.read_chunk(i)[0] for i in range(len(src))]))
    np.testing.assert_array_equal(got[1], got[0])
    keys = got[0][:, 3:]
    np.testing.assert_array_equal(keys[:10], np.nan)  # a.parquet: no key folder
    np.testing.assert_array_equal(keys[10:30], [[0, 1]] * 20)  # 2024 is code 0
    np.testing.assert_array_equal(keys[30:50], [[0, 2]] * 20)
    np.testing.assert_array_equal(keys[50:], [[1, 1]] * 20)
    files = parquet_source(url, labels="y0").files
    assert parquet_source(files, labels="y0").features == ("x0", "x1", "x2")


def test_a_url_folder_of_one_file_has_its_keys_below_the_folder_given(tmp_path):
    """One file in a key folder is partitioned; a key=value folder above the one given
    (here its parent, the folder given with a trailing slash) is no key."""
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    write_parquet(tmp_path / "a.parquet", [3])
    remote = f"/{tmp_path.name}/run=7/data"
    fs.pipe(f"{remote}/year=2024/a.parquet", (tmp_path / "a.parquet").read_bytes())
    try:
        for url in (f"memory://{remote}", f"memory://{remote}/"):
            src = parquet_source(url, labels="y0")
            assert src.features == ("x0", "x1", "x2", "year")
            np.testing.assert_array_equal(src.read_chunk(0)[0][:, 3], [2024] * 3)
    finally:
        fs.rm(f"/{tmp_path.name}", recursive=True)


def test_a_pattern_that_climbs_out_of_the_folder_is_refused(folder):
    root, _ = folder
    with pytest.raises(ValueError, match="pattern must be a path inside the folder"):
        parquet_source(root, pattern="../*.parquet")


# -- metadata, no data read -----------------------------------------------------------------


def _forbid_reads(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("data was read")

    for name in ("read_row_group", "read_row_groups", "read", "iter_batches"):
        monkeypatch.setattr(pq.ParquetFile, name, boom)
    monkeypatch.setattr(pq, "read_table", boom)


def test_n_rows_comes_from_metadata_without_reading_data(folder, monkeypatch):
    """parquet_source and DataLoader(total_size="auto") read only footers: no data, no warning."""
    root, _ = folder
    _forbid_reads(monkeypatch)
    reads = []
    orig = ParquetSource._columns  # what read_chunk and open_chunk decode with
    monkeypatch.setattr(ParquetSource, "_columns", lambda self, i: reads.append(i) or orig(self, i))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        src = parquet_source(root, labels="y0")
        loader = DataLoader(src, 4, total_size="auto")
        sharded = DataLoader(src, 4, total_size="auto", num_shards=3, shard_index=2)
    assert rec == []
    assert reads == []
    assert src.n_rows == N
    assert loader.total_size == N and loader.n == N and len(loader) == 9
    assert sharded.total_size == N and sharded.n == N - 2 * N // 3


def test_auto_total_size_is_never_flagged_by_the_audit(folder):
    """N from the footers agrees with the data: epochs warn nothing, per shard too."""
    root, _ = folder
    src = parquet_source(root, labels="y0")
    for s in range(3):
        loader = DataLoader(src, 4, num_shards=3, shard_index=s, drop_last=True)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            for _ in range(2):
                collect(loader, 3, 1)
        assert [r for r in rec if issubclass(r.category, TotalSizeWarning)] == []
        assert rec == []


# -- columns ----------------------------------------------------------------------------------


def test_columns_frozen_by_name_across_files_in_another_order(tmp_path):
    """A file storing its columns in another order still streams the right features."""
    write_parquet(tmp_path / "0.parquet", [4], 0, d=3, l=2)
    write_parquet(tmp_path / "1.parquet", [5], 4, d=3, l=2, order=[4, 2, 0, 3, 1])
    src = parquet_source(tmp_path, labels=["y0", "y1"])
    assert src.features == ("x0", "x1", "x2")
    batches = list(DataLoader(src, 9, shuffle=False))
    assert len(batches) == 1
    check_rows(*batches[0], 3, 2)
    assert ids(batches[0][0]) == list(range(9))


def test_explicit_features_pick_and_order_columns(tmp_path):
    """features names the feature columns, in the order given."""
    write_parquet(tmp_path / "f.parquet", [3, 3], d=3, l=1)
    src = parquet_source(tmp_path / "f.parquet", features=["x2", "x0"], labels="y0")
    ((xb, yb),) = list(DataLoader(src, 6, shuffle=False))
    full = make_x(np.arange(6), 3)
    np.testing.assert_array_equal(xb, full[:, [2, 0]])
    np.testing.assert_array_equal(yb, make_y(np.arange(6), 1))


def test_features_none_means_every_column_but_the_labels(tmp_path):
    """features=None: all columns not named in labels; with no labels, every column."""
    write_parquet(tmp_path / "f.parquet", [3], d=2, l=2)
    src = parquet_source(tmp_path / "f.parquet", labels="y1")
    assert src.features == ("x0", "x1", "y0") and src.labels == ("y1",)
    assert (src.d, src.l) == (3, 1)
    src = parquet_source(tmp_path / "f.parquet")
    assert src.features == ("x0", "x1", "y0", "y1") and (src.d, src.l) == (4, 0)
    ((xb, yb),) = list(DataLoader(src, 3, shuffle=False))
    assert xb.shape == (3, 4) and yb.shape == (3, 0)
    assert ids(xb) == [0, 1, 2]


def test_missing_column_is_a_value_error_naming_file_and_column(tmp_path):
    """A file lacking a frozen column is a ValueError naming that file and the column."""
    write_parquet(tmp_path / "a.parquet", [3], 0, d=3, l=1)
    bad = tmp_path / "b.parquet"
    pq.write_table(pa.table({"x0": [3.0], "x1": [1.0], "y0": [0.0]}), bad)
    with pytest.raises(ValueError) as info:
        parquet_source(tmp_path, labels="y0")
    msg = str(info.value)
    assert "b.parquet" in msg and "x2" in msg
    with pytest.raises(ValueError, match="zz") as info:
        parquet_source(tmp_path / "a.parquet", features=["x0", "zz"], labels="y0")
    assert "a.parquet" in str(info.value)


def test_non_numeric_column_is_a_value_error_naming_file_and_column(tmp_path):
    """A string column among the features is a ValueError naming the file and the column."""
    write_parquet(tmp_path / "a.parquet", [3], 0, d=2, l=1)
    bad = tmp_path / "b.parquet"
    pq.write_table(pa.table({"x0": [3.0], "x1": ["three"], "y0": [0.0]}), bad)
    with pytest.raises(ValueError) as info:
        parquet_source(tmp_path, labels="y0")
    msg = str(info.value)
    assert "b.parquet" in msg and "x1" in msg
    with pytest.raises(ValueError) as info:
        parquet_source(bad, features=["x0"], labels="x1")
    assert "b.parquet" in str(info.value) and "x1" in str(info.value)


@pytest.mark.parametrize(
    ("features", "labels", "named"),
    [
        (["x0", "x1", "y0"], ["y0"], "y0"),  # a label among the features: label leakage
        (["x0", "x1"], ["x1"], "x1"),
        (["x0", "x1", "x0"], ["y0"], "x0"),
        (["x0"], ["y0", "y0"], "y0"),
        ("x1", "x1", "x1"),  # single names (strings) too
    ],
    ids=["label-in-features", "feature-as-label", "feature-twice", "label-twice", "strings"],
)
def test_a_column_named_twice_is_a_value_error_naming_it(tmp_path, features, labels, named):
    """A column named both as feature and label, or twice in either, is a ValueError
    naming it."""
    write_parquet(tmp_path / "a.parquet", [3], 0, d=2, l=1)
    with pytest.raises(ValueError, match=f"'{named}'"):
        parquet_source(tmp_path / "a.parquet", features=features, labels=labels)


def test_a_name_twice_in_a_file_is_refused_in_full_where_chosen(tmp_path):
    """Two columns of one name: choosing it is ambiguous, naming the file and its
    columns; the other columns read as usual."""
    path = tmp_path / "dup.parquet"
    names = ["x0", "x0", "y0"]
    pq.write_table(pa.Table.from_arrays([pa.array([v]) for v in (1.0, 2.0, 3.0)], names), path)
    with pytest.raises(ValueError) as e:
        parquet_source(path, features=["x0"])
    assert str(e.value) == (
        f"{path}: column name(s) ['x0'] appear more than once in the file (found "
        "['x0', 'x0', 'y0']), so which column is meant is ambiguous"
    )
    assert parquet_source(path, features=["y0"]).read_chunk(0)[0].tolist() == [[3.0]]


def test_a_local_file_that_is_no_parquet_or_given_storage_options_is_refused_in_full(
    tmp_path,
):
    path = tmp_path / "a.parquet"
    path.write_bytes(b"not parquet at all")
    with pytest.raises(ValueError) as e:
        parquet_source(path)
    assert str(e.value).startswith(f"{path}: not a readable Parquet file (")
    with pytest.raises(ValueError) as e:
        parquet_source(path, storage_options={})
    assert str(e.value) == f"storage_options applies only to URLs; got the local path {path!r}"


class _Footer:
    """A file's footer with its row counts replaced (``rows``: a row group's, ``total``:
    the file's): a corrupt footer, or one that disagrees with the file's pages."""

    def __init__(self, md, rows, total):
        self.md, self.rows, self.num_rows = md, rows, total
        self.num_row_groups = md.num_row_groups

    def row_group(self, g):
        class Group:
            num_rows = self.rows[g]

            def __getattr__(_, name):
                return getattr(self.md.row_group(g), name)

        return Group()

    def __getattr__(self, name):
        return getattr(self.md, name)


def _lying_footers(monkeypatch, rows, total):
    class Lying(pq.ParquetFile):
        def __init__(self, source, *, metadata=None, **kw):
            super().__init__(source, metadata=getattr(metadata, "md", metadata), **kw)

        @property
        def metadata(self):
            return _Footer(super().metadata, rows, total)

    monkeypatch.setattr(pq, "ParquetFile", Lying)


def test_a_footer_whose_counts_disagree_is_refused_naming_the_file(tmp_path, monkeypatch):
    """Row groups of a negative count, or counts not adding up to the file's, are a
    corrupt footer; a row group read with other rows than its footer says is refused."""
    path = tmp_path / "a.parquet"
    write_parquet(path, [3, 2])
    for rows, total in (([-1, 6], 5), ([3, 3], 5)):
        with monkeypatch.context() as m:
            _lying_footers(m, rows, total)
            with pytest.raises(ValueError) as e:
                parquet_source(path, labels="y0")
        assert str(e.value) == (
            f"{path}: corrupt footer: row groups of {rows} rows, expected non-negative "
            f"counts that add up to its {total} rows"
        )
    with monkeypatch.context() as m:
        _lying_footers(m, [4, 2], 6)
        src = parquet_source(path, labels="y0")
        with pytest.raises(ValueError) as e:
            src.read_chunk(0)
    assert str(e.value) == f"{path}: row group 0 has 3 rows, its footer said 4"


def test_a_bad_categorical_is_refused_naming_parquet_source(tmp_path):
    write_parquet(tmp_path / "a.parquet", [3])
    with pytest.raises(TypeError) as e:
        parquet_source(tmp_path / "a.parquet", labels="y0", categorical=3)
    assert str(e.value) == (
        "parquet_source: categorical must be a list of column names or a dict {column: "
        "[values]}; got 3"
    )


def test_unselected_string_column_is_ignored(tmp_path):
    """Only the frozen columns are checked and read: a string column not selected is fine."""
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"note": ["a", "b"], "x0": [0.0, 1.0], "y0": [2.0, 3.0]}), path)
    src = parquet_source(path, features=["x0"], labels="y0")
    ((xb, yb),) = list(DataLoader(src, 2, shuffle=False))
    assert ids(xb) == [0, 1] and yb[:, 0].tolist() == [2.0, 3.0]
    with pytest.raises(ValueError, match="note"):
        parquet_source(path, labels="y0")  # features=None takes every other column


def test_integer_and_bool_columns_become_float64(tmp_path):
    """Integer and boolean columns are numeric: streamed as float64 values."""
    path = tmp_path / "i.parquet"
    pq.write_table(
        pa.table(
            {
                "x0": pa.array([0, 1, 2], pa.int32()),
                "b": [True, False, True],
                "y0": pa.array([5, 6, 7], pa.int64()),
            }
        ),
        path,
    )
    ((xb, yb),) = list(DataLoader(parquet_source(path, labels="y0"), 3, shuffle=False))
    assert xb.dtype == yb.dtype == np.float64
    np.testing.assert_array_equal(xb, [[0, 1], [1, 0], [2, 1]])
    np.testing.assert_array_equal(yb, [[5], [6], [7]])


# -- a row group decoded for a shuffle buffer ----------------------------------------------------


def test_a_row_group_opened_for_a_buffer_reads_what_read_chunk_gives(folder):
    """open_chunk(i) (decoded, copied into a buffer's whole rows on demand) gives the
    rows of read_chunk(i), read whole or from any row, x then y a row."""
    root, _ = folder
    src = parquet_source(root, labels="y0")
    first = 0
    for i, rows in enumerate(src.chunk_rows.tolist()):
        x, y = src.read_chunk(i)
        whole = np.hstack([x, y])
        opened = src.open_chunk(i)
        for a, k in {(0, rows), (1, rows - 1), (rows // 2, 1), (rows - 1, 1)}:
            if k < 1 or a < 0 or a + k > rows:
                continue
            out = np.full((k, src.d + src.l), -1.0)
            opened.read_rows_into(first + a, out)
            assert np.array_equal(out, whole[a : a + k]), (i, a, k)
        first += rows


def test_an_opened_row_group_refuses_a_bad_buffer_or_rows_outside_it(folder):
    """read_rows_into names what is wrong, as NdfBlocks.read_rows_into does: a buffer of
    another width, dtype or layout, a negative row, rows past the chunk's either end."""
    root, _ = folder
    src = parquet_source(root, labels="y0")
    first, rows = int(src.chunk_rows[:2].sum()), int(src.chunk_rows[2])  # a.parquet's 7
    opened = src.open_chunk(2)
    width = src.d + src.l
    with pytest.raises(ValueError, match="out"):
        opened.read_rows_into(first, np.empty((2, width + 1)))
    with pytest.raises(TypeError, match="out"):
        opened.read_rows_into(first, np.empty((2, width), dtype=np.float16))
    with pytest.raises(ValueError, match="out"):
        opened.read_rows_into(first, np.empty((width, 2)).T)
    with pytest.raises(ValueError, match="out"):
        opened.read_rows_into(first, np.empty((width, 2), dtype=np.float32).T)
    # float32 rows (a float32 shuffle buffer's: narrows): each float64 narrowed once
    assert opened.narrows
    wide, narrow = np.empty((rows, width)), np.empty((rows, width), dtype=np.float32)
    opened.read_rows_into(first, wide)
    opened.read_rows_into(first, narrow)
    assert narrow.tobytes() == wide.astype(np.float32).tobytes()
    with pytest.raises(ValueError, match="row"):
        opened.read_rows_into(-1, np.empty((1, width)))
    with pytest.raises(IndexError, match=f"{first - 1}..{first}"):
        opened.read_rows_into(first - 1, np.empty((2, width)))
    with pytest.raises(IndexError) as e:
        opened.read_rows_into(first + rows - 1, np.empty((2, width)))
    assert str(e.value) == (
        f"rows {first + rows - 1}..{first + rows} are outside this chunk's rows "
        f"{first}..{first + rows - 1}"
    )
    out = np.empty((rows, width))
    opened.read_rows_into(first, out)  # the whole chunk is fine
    assert np.array_equal(out, np.hstack(src.read_chunk(2)))


def test_nulls_and_other_types_reach_a_shuffled_epoch_as_in_file_order(tmp_path):
    """Nulls (NaN), integers and booleans read the same through the shuffle buffer
    (row groups decoded, then copied into its rows) as in file order (read_chunk)."""
    n = 40
    ids_ = np.arange(n, dtype=np.float64)
    table = pa.table({
        "id": ids_,
        "f": pa.array([None if k % 3 == 0 else k / 2 for k in range(n)], pa.float64()),
        "i": pa.array([k % 7 for k in range(n)], pa.int16()),
        "b": pa.array([None if k % 5 == 0 else k % 2 == 0 for k in range(n)]),
    })  # fmt: skip
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=9)
    src = parquet_source(tmp_path / "t.parquet", labels=["b"])

    def rows(loader):
        got = [np.hstack(pair) for pair in loader]
        out = np.vstack(got)
        return out[np.argsort(out[:, 0])]

    plain = rows(DataLoader(src, 4, shuffle=False))
    mixed = rows(DataLoader(src, 4, shuffle=True, seed=2, buffer_size=12))
    assert np.isnan(plain).any() and np.array_equal(plain, mixed, equal_nan=True)
    assert np.array_equal(plain[:, 0], ids_)
    assert np.isnan(plain[::3, 1]).all() and np.isnan(plain[::5, 3]).all()


# -- reading only what a shard needs ------------------------------------------------------------


@pytest.fixture
def count_reads(monkeypatch):
    """The row groups read (``read_columns``, which ``read_chunk`` reads through, or
    ``open_chunk`` for a shuffle buffer)."""
    reads = []
    for name in ("read_columns", "open_chunk"):
        orig = getattr(ParquetSource, name)

        def counting(self, i, orig=orig):
            reads.append(int(i))
            return orig(self, i)

        monkeypatch.setattr(ParquetSource, name, counting)
    return reads


@pytest.mark.parametrize("shards", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("shuffle", [False, True])
def test_each_shard_reads_only_the_row_groups_overlapping_its_rows(
    folder, count_reads, shards, shuffle
):
    """A sized shard reads just the row groups that hold rows of [s*N//S, (s+1)*N//S), once."""
    root, bounds = folder
    src = parquet_source(root, labels="y0")
    for s in range(shards):
        lo, hi = s * N // shards, (s + 1) * N // shards
        need = {k for k, (a, z) in enumerate(bounds) if a < hi and z > lo and z > a}
        loader = DataLoader(
            src, 4, shuffle=shuffle, seed=1, num_shards=shards, shard_index=s, buffer_size=6
        )
        count_reads.clear()
        got = flat(collect(loader, 3, 1))
        assert sorted(got) == list(range(lo, hi))
        assert sorted(count_reads) == sorted(need)  # each needed group read once, no other


@pytest.mark.parametrize("shards", [2, 3, 5])
@pytest.mark.parametrize("shuffle", [False, True])
def test_unsized_shard_reads_only_its_own_row_groups(folder, count_reads, shards, shuffle):
    """With total_size=None shard s reads row groups s, s+S, ... and no other."""
    root, bounds = folder
    src = parquet_source(root, labels="y0")
    for s in range(shards):
        mine = [k for k in range(len(bounds)) if k % shards == s]
        loader = DataLoader(
            src,
            4,
            shuffle=shuffle,
            seed=1,
            num_shards=shards,
            shard_index=s,
            total_size=None,
            buffer_size=6,
        )
        count_reads.clear()
        got = flat(collect(loader, 3, 1))
        assert set(count_reads) <= set(mine)
        assert {k for k in mine if bounds[k][1] > bounds[k][0]} <= set(count_reads)
        assert len(count_reads) == len(set(count_reads))
        expect = [i for k in mine for i in range(*bounds[k])]
        assert (got if not shuffle else sorted(got)) == (expect if not shuffle else sorted(expect))


# -- shuffle ----------------------------------------------------------------------------------


def test_row_group_order_is_shuffled_per_epoch(folder):
    """With a small buffer, the first batch comes from different row groups in different epochs."""
    root, bounds = folder
    where = group_of(bounds)
    loader = DataLoader(parquet_source(root, labels="y0"), 3, shuffle=True, seed=0, buffer_size=3)
    firsts = []
    for _ in range(8):
        epoch = collect(loader, 3, 1)
        assert sorted(flat(epoch)) == list(range(N))
        firsts.append(frozenset(where[i] for i in epoch[0]))
    assert len(set(firsts)) > 1
    plain = DataLoader(parquet_source(root, labels="y0"), 3, shuffle=False)
    for _ in range(2):
        assert {where[i] for i in collect(plain, 3, 1)[0]} == {0}


# -- sharding property ------------------------------------------------------------------------


@settings(max_examples=40)
@given(
    shards=st.integers(1, 7),
    shuffle=st.booleans(),
    sized=st.booleans(),
    b=st.integers(1, 12),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**16),
    buffer_size=st.integers(1, 40),
)
def test_parquet_shards_hand_out_every_row_once(
    folder, shards, shuffle, sized, b, drop_last, seed, buffer_size
):
    """Across the shards of a Parquet folder every row is handed out once (less < b per
    shard): the epoch law (laws.check_epoch) when sized; chunk s, s+S, ... when not."""
    root, bounds = folder
    src = parquet_source(root, labels="y0")
    per_shard = []
    for s in range(shards):
        loader = DataLoader(
            src,
            b,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            num_shards=shards,
            shard_index=s,
            buffer_size=buffer_size,
            total_size="auto" if sized else None,
        )
        got = collect(loader, 3, 1)
        per_shard.append(got)
        if sized:
            assert len(got) == len(loader)
            continue
        rows = flat(got)
        mine = [i for k, (a, z) in enumerate(bounds) if k % shards == s for i in range(a, z)]
        assert all(len(x) == b for x in got[:-1])
        if drop_last:
            assert all(len(x) == b for x in got)
            assert len(rows) == len(mine) // b * b
            assert len(set(rows)) == len(rows) and set(rows) <= set(mine)
            if not shuffle:
                assert rows == mine[: len(rows)]
        elif shuffle:
            assert sorted(rows) == mine
        else:
            assert rows == mine
    if sized:
        check_epoch(per_shard, n=N, batch_size=b, drop_last=drop_last, shuffle=shuffle)
    everything = flat(flat(per_shard))
    assert len(everything) == len(set(everything))
    if not drop_last:
        assert sorted(everything) == list(range(N))


def test_reading_parquet_does_not_import_pandas(tmp_path):
    """pyarrow's to_numpy() imports pandas on first use, and that import discards a
    Ctrl-C (the training loop would go on): row groups are read from Arrow buffers."""
    from laws import run_python

    write_parquet(tmp_path / "a.parquet", [5, 7])
    code = (
        "import sys\n"
        "from exactbatch import DataLoader, parquet_source\n"
        "src = parquet_source(sys.argv[1], labels=['y0'])\n"
        "rows = sum(len(xb) for xb, _ in DataLoader(src, 4))\n"
        "print(rows, 'pandas' in sys.modules)\n"
    )
    assert run_python(code, str(tmp_path / "a.parquet")).split() == ["12", "False"]


# -- in-process pickling, identity, iter_batches (what convert and a state's fingerprint use) --


def _coded_folder(root):
    """``region=eu/p.parquet`` (rows 0..4) and ``region=us/p.parquet`` (rows 5..8): columns
    x0 (the row id), x1 = 10 * x0, a string column c ("a" or "b"), y0 = -x0."""
    for region, ids_ in (("eu", range(5)), ("us", range(5, 9))):
        (root / f"region={region}").mkdir(parents=True)
        x0 = np.asarray(ids_, dtype=np.float64)
        t = pa.table({"x0": x0, "x1": 10 * x0, "c": ["a" if i % 2 else "b" for i in ids_]})
        t = t.append_column("y0", pa.array(-x0))
        pq.write_table(t, root / f"region={region}" / "p.parquet", row_group_size=3)
    return root


def test_a_source_unpickled_in_process_reads_what_it_read(tmp_path):
    """Pickled and loaded here (a spawned process: test_hive.py): the features, labels,
    partition keys and vocabularies (as given, in their order: not learned again) travel,
    and the loaded source reads the same chunks."""
    import pickle

    root = _coded_folder(tmp_path / "data")
    vocab = {"region": ["us", "eu"], "c": ["b", "a"]}  # not sorted: a second pass would sort
    src = parquet_source(root, features=["x1", "region", "c"], labels="y0", categorical=vocab)
    again = pickle.loads(pickle.dumps(src))
    assert (again.features, again.labels) == (("x1", "region", "c"), ("y0",))
    assert again.categories == src.categories == vocab
    assert again.files == src.files and list(again.chunk_rows) == [3, 2, 3, 1]
    for i in range(len(src)):
        (x, y), (gx, gy) = src.read_chunk(i), again.read_chunk(i)
        np.testing.assert_array_equal(gx, x)
        np.testing.assert_array_equal(gy, y)
    x = np.concatenate([src.read_chunk(i)[0] for i in range(len(src))])
    np.testing.assert_array_equal(x[:, 0], 10 * np.arange(9))
    np.testing.assert_array_equal(x[:, 1], [1] * 5 + [0] * 4)  # "us" is code 0
    np.testing.assert_array_equal(x[:, 2], [0, 1, 0, 1, 0, 1, 0, 1, 0])  # "b" is code 0
    # a file changed since: refused at unpickling, naming it
    raw = pickle.dumps(src)
    path = root / "region=us" / "p.parquet"
    st_ = os.stat(path)
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + 10**9))
    with pytest.raises(ValueError) as e:
        pickle.loads(raw)
    assert str(e.value) == (
        f"{path}: the file changed between pickling and unpickling the source (replaced, "
        "rewritten or touched); build the source again to read it"
    )


def test_a_source_of_a_relative_path_unpickled_in_another_folder_reads_its_file(
    tmp_path, monkeypatch
):
    """A local file given relative to the working folder travels by its absolute path:
    the receiver may run elsewhere."""
    import pickle

    (tmp_path / "here").mkdir()
    (tmp_path / "there").mkdir()
    write_parquet(tmp_path / "here" / "a.parquet", [3])
    monkeypatch.chdir(tmp_path / "here")
    raw = pickle.dumps(parquet_source("a.parquet", labels="y0"))
    monkeypatch.chdir(tmp_path / "there")
    again = pickle.loads(raw)
    assert again.files == [str(tmp_path / "here" / "a.parquet")]
    np.testing.assert_array_equal(again.read_chunk(0)[0][:, 0], [0, 1, 2])


def test_a_row_group_that_cannot_be_decoded_is_named_with_its_file(tmp_path):
    """A data page damaged (the footer intact, so the source is built): the read of its
    row group is a ValueError naming the file and the row group, with Arrow's reason."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"x0": np.arange(50.0)}), path, use_dictionary=False)
    at = pq.ParquetFile(path).metadata.row_group(0).column(0).data_page_offset
    data = bytearray(path.read_bytes())
    data[at : at + 8] = b"\xff" * 8  # the page header: no longer thrift
    path.write_bytes(bytes(data))
    src = parquet_source(path)
    with pytest.raises(ValueError) as e:
        src.read_chunk(0)
    assert str(e.value).startswith(f"{path}: cannot read row group 0 (")


def test_identity_names_the_columns_the_first_file_and_the_footers(tmp_path):
    """A state's fingerprint (exactbatch.sources.identity): kind, column names, the first
    file, how many files, and a hash of the files' names, sizes and footers."""
    root = _coded_folder(tmp_path / "data")
    src = parquet_source(root, features=["x0", "x1"], labels="y0")
    ident = src.identity()
    assert ident["kind"] == "parquet" and ident["parts"] == 2
    assert ident["names"] == {"features": ["x0", "x1"], "labels": ["y0"]}
    assert ident["path"] == str(root / "region=eu" / "p.parquet")
    assert ident == parquet_source(root, features=["x0", "x1"], labels="y0").identity()
    one = parquet_source(root / "region=eu" / "p.parquet", features=["x0", "x1"], labels="y0")
    assert one.identity()["parts"] == 1 and one.identity()["files"] != ident["files"]
    assert [f.num_rows for f in src.footers] == [5, 4]


def test_iter_batches_hands_out_every_row_in_order_a_batch_at_a_time(tmp_path, hive):
    """What ``exactbatch convert`` writes from: every row in order, features then labels
    as Arrow columns (coded), at most ``rows`` rows a batch; locally and over a URL."""
    root = _coded_folder(tmp_path / "data")
    cats = ["c", "region"]
    src = parquet_source(root, features=["x1", "region", "c"], labels="y0", categorical=cats)
    got = list(src.iter_batches(2))
    assert all(len(cols) == 4 for cols in got)
    assert max(len(cols[0]) for cols in got) == 2
    cols = [np.concatenate([np.asarray(b[j], dtype=np.float64) for b in got]) for j in range(4)]
    np.testing.assert_array_equal(cols[0], 10 * np.arange(9))
    np.testing.assert_array_equal(cols[1], [0] * 5 + [1] * 4)  # sorted: "eu" is 0
    np.testing.assert_array_equal(cols[2], [1, 0, 1, 0, 1, 0, 1, 0, 1])  # sorted: "a" is 0
    np.testing.assert_array_equal(cols[3], -np.arange(9))
    # over a URL, the same rows (the files opened through fsspec)
    local, url = hive
    a = parquet_source(local, features=["x0"], labels="y0")
    b = parquet_source(url, features=["x0"], labels="y0")
    rows = [
        np.concatenate([np.asarray(cols[0]) for cols in s.iter_batches(7)]).tolist() for s in (a, b)
    ]
    assert rows[0] == rows[1] == list(range(HIVE_N))


def test_iter_batches_names_the_row_of_a_value_outside_a_vocabulary(tmp_path):
    """Rows are numbered from the source's first across batches and files."""
    root = _coded_folder(tmp_path / "data")
    src = parquet_source(root, features=["x0", "region"], categorical={"region": ["eu"]})
    with pytest.raises(ValueError, match=r"holds 'us' \(row 5\)"):
        for _ in src.iter_batches(2):
            pass  # the second file's first row


def test_iter_batches_and_iteration_refuse_a_changed_file(tmp_path):
    write_parquet(tmp_path / "a.parquet", [3, 2])
    src = parquet_source(tmp_path, labels="y0")
    chunks = list(src)  # iterating: read_chunk of every row group, in order
    assert [c[0][:, 0].tolist() for c in chunks] == [[0, 1, 2], [3, 4]]
    assert [c[1][:, 0].tolist() for c in chunks] == [
        list(make_y(r, 1)[:, 0]) for r in ([0, 1, 2], [3, 4])
    ]
    st_ = os.stat(tmp_path / "a.parquet")
    os.utime(tmp_path / "a.parquet", ns=(st_.st_atime_ns, st_.st_mtime_ns + 10**9))
    with pytest.raises(ValueError) as e:
        next(src.iter_batches(2))
    assert str(e.value) == (
        f"{tmp_path / 'a.parquet'}: the file changed (replaced, rewritten or truncated) "
        "after parquet_source read its footer; build the source again to read it"
    )


def test_a_row_group_opened_names_its_buffer_and_row_in_its_refusals(folder):
    root, _ = folder
    src = parquet_source(root, labels="y0")
    opened, width = src.open_chunk(0), src.d + src.l
    for bad in ([[0.0] * width], np.empty(width)):  # not an array; one of one dimension
        with pytest.raises((TypeError, ValueError)) as e:
            opened.read_rows_into(0, bad)
        assert str(e.value).startswith("out must ") and f"(0, {width})" in str(e.value)
    with pytest.raises(ValueError) as e:
        opened.read_rows_into(-1, np.empty((1, width)))
    assert str(e.value).startswith("row must be")


def test_a_vocabulary_is_learned_from_its_columns_only(tmp_path, monkeypatch):
    """The first pass reads only the columns to code (with their footers as read), and a
    file that cannot be read then is a ValueError naming it and the columns."""
    root = _coded_folder(tmp_path / "data")
    asked = []
    iter_batches = pq.ParquetFile.iter_batches

    def spy(self, *a, **kw):
        asked.append(kw.get("columns"))
        return iter_batches(self, *a, **kw)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    opened = []
    init = pq.ParquetFile.__init__

    def footers(self, source, *a, **kw):
        opened.append(kw.get("metadata"))
        init(self, source, *a, **kw)

    monkeypatch.setattr(pq.ParquetFile, "__init__", footers)
    src = parquet_source(root, features=["x0", "c", "region"], categorical=["c", "region"])
    assert asked == [["c"], ["c"]] and src.categories["c"] == ["a", "b"]
    # each file's footer read once: at construction, then handed to the first pass
    assert opened[:2] == [None, None] and opened[2:] == src.footers

    def boom(self, *a, **kw):
        raise OSError("disk on fire")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", boom)
    with pytest.raises(ValueError) as e:
        parquet_source(root, features=["x0", "c"], categorical=["c"])
    assert str(e.value) == (
        f"{root / 'region=eu' / 'p.parquet'}: cannot read column(s) ['c'] (disk on fire)"
    )


def test_a_source_over_a_url_unpickled_reads_through_its_filesystem(hive):
    import pickle

    _, url = hive
    src = parquet_source(url, features=["x0"], labels="y0")
    again = pickle.loads(pickle.dumps(src))
    assert again.files == src.files
    got = np.concatenate([again.read_chunk(i)[0][:, 0] for i in range(len(again))])
    assert got.tolist() == list(range(HIVE_N))
