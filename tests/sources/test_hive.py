"""Hive-partitioned Parquet folders and categorical columns in parquet_source (issue 30,
items 5 and 7).

Laws: the partition keys of ``year=2024/region=eu/part.parquet`` are columns (after the
files' own), numeric when their values are integers, else usable only as categories;
N still comes from the footers and chunks are still the row groups, so shuffles,
shards and the epoch law hold as for any folder. A categorical column's code ``j`` is
the ``j``-th value of its sorted vocabulary, learned in a first pass or given; a value
outside a given vocabulary is refused at the read that meets it. Column ``x0`` is the
row id (helpers.py).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle

import numpy as np
import pytest
from helpers import check_rows, write_parquet
from hypothesis import given, settings
from hypothesis import strategies as st
from laws import check_epoch

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from exactbatch import DataLoader, parquet_source  # noqa: E402

# relative path -> row group sizes; rows numbered in sorted path order
HIVE = {
    "year=2024/region=eu/part-0.parquet": [6, 4],
    "year=2024/region=us/part-0.parquet": [5],
    "year=2025/region=eu%2Fwest/part-0.parquet": [3, 3],  # URL-encoded: "eu/west"
    "year=2025/region=us/part-0.parquet": [7],
}
N = 28
REGIONS = ["eu", "eu/west", "us"]  # sorted: the codes 0, 1, 2
FEATS = ["x0", "x1", "x2"]


def _keys(rel: str) -> tuple[int, str]:
    year, region = rel.split("/")[:2]
    return int(year.split("=")[1]), region.split("=")[1].replace("%2F", "/")


@pytest.fixture(scope="module")
def hive(tmp_path_factory):
    root = tmp_path_factory.mktemp("hive")
    first, want = 0, {}
    for rel, groups in HIVE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        write_parquet(root / rel, groups, first)
        for i in range(first, first + sum(groups)):
            want[i] = _keys(rel)
        first += sum(groups)
    return root, want


def _check_keys(xb, want, year_col=3, region_col=4):
    for row in xb:
        year, region = want[int(row[0])]
        assert row[year_col] == year and REGIONS[int(row[region_col])] == region


def test_partition_keys_are_columns(hive):
    """year (integers) is numeric, region (strings) a category; both follow the files'
    columns; n_rows and the chunks come from the footers."""
    root, want = hive
    src = parquet_source(root, labels="y0", categorical=["region"])
    assert src.features == (*FEATS, "year", "region") and src.labels == ("y0",)
    assert src.n_rows == N and list(src.chunk_rows) == [6, 4, 5, 3, 3, 7]
    assert src.categories == {"region": REGIONS}
    for xb, yb in DataLoader(src, 8, shuffle=False):
        check_rows(xb[:, :3], yb, 3, 1)
        _check_keys(xb, want)


def test_a_string_key_must_be_coded_or_left_out(hive):
    """A string key among the features is refused, naming it and categorical=; naming the
    features leaves it out; a key may be a label, or categorical though numeric."""
    root, want = hive
    with pytest.raises(ValueError) as e:
        parquet_source(root, labels="y0")
    assert str(e.value) == (
        f"{root / 'year=2024' / 'region=eu' / 'part-0.parquet'}: the partition key 'region' "
        "holds string values; code it with categorical=['region'], or leave it out of "
        "features/labels"
    )
    assert parquet_source(root, features=[*FEATS, "year"], labels="y0").d == 4
    src = parquet_source(root, features=FEATS, labels=["year"], categorical=["year"])
    assert src.categories == {"year": [2024, 2025]}
    x, y = src.read_chunk(0)
    assert np.all(y[:, 0] == 0)  # 2024 is code 0


@settings(max_examples=15, deadline=None)
@given(
    shards=st.integers(1, 3),
    shuffle=st.booleans(),
    b=st.integers(1, 9),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_shards_and_shuffles_keep_the_epoch_law(hive, shards, shuffle, b, drop_last, seed):
    """Every row once across shards, each with its own partition keys."""
    root, want = hive
    src = parquet_source(root, labels="y0", categorical=["region"])
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
            buffer_size=6,
            total_size="auto",
        )
        got = []
        for xb, _ in loader:
            _check_keys(xb, want)
            got.append([int(i) for i in xb[:, 0]])
        per_shard.append(got)
    check_epoch(per_shard, n=N, batch_size=b, drop_last=drop_last, shuffle=shuffle)


def test_a_folder_without_keys_is_read_as_before(tmp_path):
    write_parquet(tmp_path / "a.parquet", [3])
    assert parquet_source(tmp_path, labels="y0").features == tuple(FEATS)


# -- categorical columns of the files ---------------------------------------------------------


def _table(cities, stores=None, path=None):
    cols = {"x0": np.arange(len(cities), dtype=float), "city": pa.array(cities, pa.string())}
    if stores is not None:
        cols["store"] = pa.array(stores, pa.int64())
    t = pa.table(cols)
    if path is not None:
        pq.write_table(t, path, row_group_size=2)
    return t


def test_codes_follow_the_sorted_vocabulary_whatever_the_file_order(tmp_path):
    """Learned over every file, sorted: the same codes from either order of files; nulls
    are NaN, never a code; an integer column may be categorical (sorted by value)."""
    _table(["b", None, "c"], [30, 4, 30], tmp_path / "1.parquet")
    _table(["a", "b"], [100, 4], tmp_path / "2.parquet")
    for files in (["1", "2"], ["2", "1"]):
        src = parquet_source(
            [tmp_path / f"{f}.parquet" for f in files], categorical=["city", "store"]
        )
        assert src.categories == {"city": ["a", "b", "c"], "store": [4, 30, 100]}
    x = np.concatenate([src.read_chunk(i)[0] for i in range(len(src))])
    assert np.array_equal(x[:, 1], [0, 1, 1, np.nan, 2], equal_nan=True)
    assert np.array_equal(x[:, 2], [2, 0, 1, 0, 1])


def test_a_given_vocabulary_codes_in_its_order_and_refuses_other_values(tmp_path):
    """categorical={col: values}: code j is values[j]; a value outside it is a ValueError
    naming the column, the value and its row, at the read that meets it."""
    _table(["b", "a", "z"], path=tmp_path / "t.parquet")
    src = parquet_source(tmp_path / "t.parquet", categorical={"city": ["b", "a"]})
    assert src.categories == {"city": ["b", "a"]}
    assert np.array_equal(src.read_chunk(0)[0][:, 1], [0, 1])
    with pytest.raises(ValueError, match=r"'city' holds 'z' \(row 2\).*not in its vocabulary"):
        src.read_chunk(1)


def test_a_column_of_two_types_across_files_is_refused_naming_it(tmp_path):
    """A vocabulary is learned over every file: integers in one and strings in another
    cannot be one vocabulary (sorted, each value one code)."""
    pq.write_table(pa.table({"x0": [0.0, 1.0], "store": [4, 30]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"x0": [2.0, 3.0], "store": ["p", "q"]}), tmp_path / "b.parquet")
    with pytest.raises(TypeError) as e:
        parquet_source(tmp_path, categorical=["store"])
    assert str(e.value) == (
        "column 'store': values of kinds ['int', 'str'] in one categorical column; give "
        "every file the same type"
    )


def test_a_value_outside_the_vocabulary_is_named_where_it_was_read(tmp_path):
    """The refusal starts with the file and row group a chunk's read names, or the file
    alone for a stream of record batches (what `exactbatch convert` reads)."""
    path = tmp_path / "t.parquet"
    _table(["b", "a", "z"], path=path)
    src = parquet_source(path, categorical={"city": ["b", "a"]})
    tail = (
        "column 'city' holds 'z' (row 2), which is not in its vocabulary of 2 value(s) (a "
        "value takes the code of the entry equal to it); add it to categorical={'city': "
        "[...]}, or let the vocabulary be learned (categorical=[...])"
    )
    with pytest.raises(ValueError) as e:
        src.read_chunk(1)
    assert str(e.value) == f"{path}: row group 1: {tail}"
    with pytest.raises(ValueError) as e:
        list(src.iter_batches(2))
    assert str(e.value) == f"{path}: {tail}"


def test_columns_that_cannot_be_read_are_refused_in_full(tmp_path):
    """A categorical column of a type no category has, and a string column not coded:
    each message names the file, the columns and their types, and the fix (the names
    alone in categorical=[...])."""
    t = _table(["a", "b"]).append_column("day", pa.array([1, 2], pa.date32()))
    t = t.append_column("the town", pa.array(["c", "d"]))  # (a name with a space)
    path = tmp_path / "t.parquet"
    pq.write_table(t, path)
    with pytest.raises(TypeError) as e:
        parquet_source(path, features=["x0", "city", "day"], categorical=["city", "day"])
    assert str(e.value) == (
        f"{path}: categorical column(s) ['day (date32[day])'] cannot be coded: a category "
        "is a string, an integer, a boolean or a float (cast the column first)"
    )
    with pytest.raises(ValueError) as e:
        parquet_source(path, features=["x0", "city", "the town"])
    assert str(e.value) == (
        f"{path}: non-numeric column(s) ['city (string)', 'the town (string)']; features "
        "and labels must be integer, floating or boolean columns: code them with "
        "categorical=['city', 'the town'], or leave them out of features=[...]"
    )


@pytest.mark.parametrize(
    ("kw", "error", "says"),
    [
        ({"features": ["x0", "nope"]}, ValueError, r"missing column\(s\) \['nope'\].*found"),
        ({"features": ["x0"], "categorical": ["city"]}, ValueError, "neither features nor"),
        ({"categorical": ["city", "city"]}, ValueError, "more than once"),
        ({"categorical": {"city": ["a", "a"]}}, ValueError, "more than once"),
        ({"categorical": 3}, TypeError, "categorical must be"),
        ({}, ValueError, r"non-numeric column\(s\) \['city \(string\)'\].*categorical="),
        ({"categorical": ["city", "day"]}, TypeError, r"day \(date32"),
    ],
    ids=["missing", "not-chosen", "twice", "repeated-value", "type", "string-not-coded", "date"],
)
def test_bad_columns_are_refused(tmp_path, kw, error, says):
    t = _table(["a", "b"]).append_column("day", pa.array([1, 2], pa.date32()))
    pq.write_table(t, tmp_path / "t.parquet")
    if "features" not in kw:
        kw = {"features": ["x0", "city", *(["day"] if "day" in str(kw) else [])], **kw}
    with pytest.raises(error, match=says):
        parquet_source(tmp_path / "t.parquet", **kw)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.one_of(st.none(), st.sampled_from(["x", "y", "é", "", "10", "9"])), min_size=1))
def test_codes_decode_to_the_values(tmp_path_factory, values):
    """Conservation: decoding every code through the vocabulary gives back the column
    (NaN where it was null), and the vocabulary is the sorted distinct values."""
    path = tmp_path_factory.mktemp("c") / "t.parquet"
    _table(values, path=path)
    src = parquet_source(path, categorical=["city"])
    vocab = src.categories["city"]
    assert vocab == sorted({v for v in values if v is not None})
    x = np.concatenate([src.read_chunk(i)[0] for i in range(len(src))])
    back = [None if np.isnan(c) else vocab[int(c)] for c in x[:, 1]]
    assert back == values


# -- pickling by path ------------------------------------------------------------------------


def _chunks(src):
    return [src.read_chunk(i) for i in range(len(src))]


def test_a_source_goes_to_a_spawned_process(hive):
    """Pickled by its files (keys and vocabularies travel): a spawned process reads the
    same chunks."""
    root, _ = hive
    src = parquet_source(root, labels="y0", categorical=["region"])
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        (got,) = pool.map(_chunks, [src])
    for (x, y), (gx, gy) in zip(_chunks(src), got, strict=True):
        assert np.array_equal(x, gx) and np.array_equal(y, gy)


def test_a_file_changed_since_pickling_is_refused(tmp_path):
    write_parquet(tmp_path / "a.parquet", [3])
    raw = pickle.dumps(parquet_source(tmp_path, labels="y0"))
    st_ = os.stat(tmp_path / "a.parquet")
    os.utime(tmp_path / "a.parquet", ns=(st_.st_atime_ns, st_.st_mtime_ns + 10**9))
    with pytest.raises(ValueError, match="changed between pickling and unpickling"):
        pickle.loads(raw)


def test_a_key_the_files_also_hold_is_read_from_the_files(tmp_path):
    """Some writers keep the partition column in the files too: it is read from the files,
    and not doubled (values other than the path's are refused: tests/test_issue39_small.py)."""
    for year in (2024, 2025):
        (tmp_path / f"year={year}").mkdir()
        t = pa.table({"x0": [1.0, 2.0], "year": [year, year]})
        pq.write_table(t, tmp_path / f"year={year}" / "p.parquet")
    src = parquet_source(tmp_path)
    assert src.features == ("x0", "year")
    assert src.read_chunk(1)[0][:, 1].tolist() == [2025.0, 2025.0]


@pytest.mark.parametrize("stats", [True, False], ids=["footer", "read"])
def test_a_key_held_with_another_value_is_refused_naming_file_key_and_values(tmp_path, stats):
    """From the footer's statistics, or (none written) a read of the column; a value equal
    to the path's, as a number or as text, and nulls are fine."""
    (tmp_path / "year=2024").mkdir()
    ok = tmp_path / "year=2024" / "a.parquet"
    pq.write_table(pa.table({"x0": [1.0, 2.0], "year": [2024, 2024]}), ok, write_statistics=stats)
    assert parquet_source(tmp_path).features == ("x0", "year")
    bad = tmp_path / "year=2024" / "b.parquet"
    t = pa.table({"x0": [1.0, 2.0, 3.0], "year": [2022, 2024, 2026]})
    pq.write_table(t, bad, write_statistics=stats)
    with pytest.raises(ValueError) as e:
        parquet_source(tmp_path)
    assert str(e.value) == (
        f"{bad}: the partition key 'year' is also a column of the file, holding 2022, 2026 "
        "where its path says year=2024: which is meant is ambiguous; drop the column from "
        "the files, or fix the folder's name"
    )


def test_a_key_held_with_nulls_is_checked_by_a_read(tmp_path):
    """Statistics that count nulls say nothing of the other values: the column is read (a
    null is not the path's value either)."""
    (tmp_path / "k=a").mkdir()
    path = tmp_path / "k=a" / "p.parquet"
    pq.write_table(pa.table({"x0": [1.0, 2.0, 3.0], "k": ["a", None, "b"]}), path)
    with pytest.raises(ValueError, match=r"holding 'b', None where its path says k=a"):
        parquet_source(tmp_path, categorical=["k"])


def test_integer_keys_past_int32_are_int64_and_other_text_stays_text(tmp_path):
    """pyarrow discovers keys past int32 as text: integers within int64 written as
    integers are int64; any other text ("007": not how 7 is written) stays text."""
    from exactbatch.sources.parquet_columns import hive_partitions

    files = []
    for key, t in (("3000000000", "3000000000"), ("-5", "007")):
        (tmp_path / f"id={key}" / f"t={t}").mkdir(parents=True)
        files.append(str(tmp_path / f"id={key}" / f"t={t}" / "p.parquet"))
        pq.write_table(pa.table({"a": [1.0]}), files[-1])
    found = hive_partitions(str(tmp_path), files)
    assert found.names == ("id", "t")
    assert str(found.types["id"]) == "int64" and str(found.types["t"]) == "string"
    assert found.values == [{"id": 3000000000, "t": "3000000000"}, {"id": -5, "t": "007"}]
    assert hive_partitions(str(tmp_path), [str(tmp_path / "p.parquet")]) is None


def test_keys_are_int64_up_to_its_bounds_exactly():
    """int64's least and greatest values are int64 keys; one past either is text."""
    from exactbatch.sources.parquet_columns import _all_int64

    least, most = -(2**63), 2**63 - 1
    assert _all_int64([str(least), None, str(most)])
    for past in (least - 1, most + 1, 2**64 - 1, -(2**64)):
        assert not _all_int64([str(past)]), past
    assert not _all_int64([None]) and not _all_int64(["1.5"])


def test_every_held_key_is_checked_past_keys_the_file_does_not_hold(tmp_path):
    """A key the file does not hold, or whose path value is missing, skips to the next."""
    from exactbatch.sources.parquet_columns import check_held_keys

    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"a": [1.0], "month": pa.array([2], pa.int32())}), path)
    pf = pq.ParquetFile(path)
    check_held_keys(str(path), pf, {"year": 2024, "month": 2})
    for keys in ({"year": 2024, "month": 1}, {"a": None, "month": 1}):
        with pytest.raises(ValueError, match=r"partition key 'month' is also a column"):
            check_held_keys(str(path), pf, keys)


def test_a_held_key_equal_to_its_path_by_value_or_by_text_is_accepted(tmp_path):
    """2024.0 under year=2024 (equal values), "2" under month=2 (the same text): each is
    the value its path says; six other values are named five at most."""
    from exactbatch.sources.parquet_columns import check_held_keys

    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"year": [2024.0, 2024.0], "month": ["2", "2"]}), path)
    check_held_keys(str(path), pq.ParquetFile(path), {"year": 2024, "month": 2})
    many = tmp_path / "many.parquet"
    pq.write_table(pa.table({"k": list(range(10, 16))}), many, write_statistics=False)
    with pytest.raises(ValueError) as e:
        check_held_keys(str(many), pq.ParquetFile(many), {"k": 9})
    assert "holding 10, 11, 12, 13, 14 where its path says k=9:" in str(e.value)


def test_a_file_named_like_a_key_at_the_top_is_no_partition(tmp_path):
    """Only folders are keys: a top-level file named k=v.parquet gives no partitions; a key
    folder below a plain one is a key."""
    from exactbatch.sources.parquet_columns import hive_partitions

    top = str(tmp_path / "k=v.parquet")
    assert hive_partitions(str(tmp_path), [top]) is None
    deep = str(tmp_path / "sub" / "year=2024" / "p.parquet")
    assert hive_partitions(str(tmp_path), [deep]) is not None


def test_a_file_outside_every_key_folder_has_its_keys_missing(tmp_path):
    write_parquet(tmp_path / "a.parquet", [2], 0)
    (tmp_path / "year=2024").mkdir()
    write_parquet(tmp_path / "year=2024" / "b.parquet", [2], 2)
    src = parquet_source(tmp_path, labels="y0")
    x = np.concatenate([src.read_chunk(i)[0] for i in range(len(src))])
    assert src.features == ("x0", "x1", "x2", "year")
    np.testing.assert_array_equal(x[:, 3], [np.nan, np.nan, 2024, 2024])


def test_keys_are_found_below_the_folder_given_only(tmp_path):
    """A key=value folder above the one given is no key: its name is no column."""
    base = tmp_path / "run=7"
    (base / "year=2024").mkdir(parents=True)
    write_parquet(base / "year=2024" / "a.parquet", [2], 0)
    src = parquet_source(base, labels="y0")
    assert src.features == ("x0", "x1", "x2", "year")
    np.testing.assert_array_equal(src.read_chunk(0)[0][:, 3], [2024, 2024])


def test_a_key_folder_not_text_after_decoding_is_refused_naming_the_folder(tmp_path):
    """year=%FF: a value that is no UTF-8 once URL-decoded."""
    (tmp_path / "year=%FF").mkdir()
    write_parquet(tmp_path / "year=%FF" / "a.parquet", [2], 0)
    with pytest.raises(ValueError) as e:
        parquet_source(tmp_path, labels="y0")
    assert str(e.value).startswith(f"{tmp_path}: cannot read its Hive partitions (")
    assert "%FF" in str(e.value)


def test_a_file_missing_a_column_names_the_columns_found_keys_included(tmp_path):
    """The refusal lists what the file and its path hold: its columns, then the keys."""
    for year in (2024, 2025):
        (tmp_path / f"year={year}").mkdir()
    write_parquet(tmp_path / "year=2024" / "a.parquet", [2], 0)
    bad = tmp_path / "year=2025" / "b.parquet"
    pq.write_table(pa.table({"x0": [3.0], "x1": [1.0], "y0": [0.0]}), bad)
    with pytest.raises(ValueError) as e:
        parquet_source(tmp_path, labels="y0")
    assert str(e.value) == (
        f"{bad}: missing column(s) ['x2']; expected columns ['x0', 'x1', 'x2', 'y0'], "
        "found ['x0', 'x1', 'y0', 'year']"
    )
