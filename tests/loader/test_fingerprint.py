"""The data identity in a state (DESIGN.md, "Real data"): ``state_dict()["fingerprint"]``
and ``load_state_dict(state, *, allow_other_data=False)``.

Laws: a state loads into a loader over the same data - the same file at
another path or with another mtime, the same rows in memory - and is refused,
with a ValueError naming both fingerprints, on other data of the same shape
(other values, other column names, another subset, another dataset write,
other Parquet files), unless allow_other_data=True. A state without a
fingerprint (from before) loads unchecked. The fingerprint costs at most 64
rows read, once per loader.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from helpers import collect, make_data, write_parquet
from laws import roundtrip

from exactbatch import (
    DataLoader,
    open_ndf,
    open_ndf_dataset,
    parquet_source,
    save_ndf,
    save_ndf_dataset,
)
from exactbatch.sources import identity
from exactbatch.sources.identity import SAMPLE_ROWS, differences

X, Y = make_data(300, d=3, l=1)
RX, RY = X[::-1].copy(), Y[::-1].copy()  # other data of the same shape (rows reversed)


def state_after(loader, k: int = 2) -> dict:
    it = iter(loader)
    for _ in range(k):
        next(it)
    return roundtrip(loader.state_dict())


def rest(loader, state) -> list:
    loader.load_state_dict(state)
    return collect(loader)


def test_a_state_carries_the_fingerprint_of_memory_data():
    fp = state_after(DataLoader((X, Y), 10))["fingerprint"]
    assert fp["kind"] == "memory"
    assert (fp["n"], fp["d"], fp["l"], fp["names"], fp["rows"]) == (300, 3, 1, None, None)
    assert isinstance(fp["sample"], str) and len(fp["sample"]) == 32


def test_other_memory_data_of_the_same_shape_is_refused_naming_both():
    state = state_after(DataLoader((X, Y), 10, seed=1))
    other = DataLoader((RX, RY), 10, seed=1)
    with pytest.raises(
        ValueError,
        match=r"(?s)other data.*sample.*state's data is \[memory.*"
        r"this loader reads \[memory.*allow_other_data=True",
    ):
        other.load_state_dict(state)
    assert collect(other) == collect(DataLoader((RX, RY), 10, seed=1)), "refused: untouched"
    # the caller may say the data is what they mean
    other.load_state_dict(state, allow_other_data=True)
    assert other.state_dict()["batches_done"] == 2
    with pytest.raises(TypeError, match="allow_other_data must be a bool"):
        other.load_state_dict(state, allow_other_data=1)


def test_a_state_from_before_fingerprints_loads_unchecked():
    state = state_after(DataLoader((X, Y), 10, seed=1))
    del state["fingerprint"]
    want = collect(_resumed(DataLoader((X, Y), 10, seed=1), state))
    got = rest(DataLoader((RX, RY), 10, seed=1), state)  # the same positions, of RX
    assert [[299 - r for r in b] for b in got] == want


def _resumed(loader, state):
    loader.load_state_dict(state)
    return loader


def test_the_same_file_at_another_path_or_in_memory_is_the_same_data(tmp_path):
    a, b = tmp_path / "a.ndf", tmp_path / "copy" / "b.ndf"
    save_ndf(a, (X, Y))
    os.makedirs(b.parent)
    shutil.copy(a, b)  # another path, another mtime
    os.utime(b, ns=(1, 1))
    state = state_after(DataLoader(open_ndf(a), 10, seed=2))
    fp = state["fingerprint"]
    assert fp["kind"] == "ndf" and fp["path"] == str(a)
    assert fp["size"] == os.path.getsize(a) and fp["mtime"] == os.stat(a).st_mtime_ns
    want = rest(DataLoader(open_ndf(a), 10, seed=2), state)
    assert rest(DataLoader(open_ndf(b), 10, seed=2), state) == want
    assert rest(DataLoader((X, Y), 10, seed=2), state) == want  # the rows, in memory


def test_another_file_of_the_same_shape_is_refused(tmp_path):
    a, b = tmp_path / "a.ndf", tmp_path / "b.ndf"
    save_ndf(a, (X, Y))
    save_ndf(b, (RX, RY))
    state = state_after(DataLoader(open_ndf(a), 10))
    with pytest.raises(ValueError, match=rf"(?s)sample.*\[ndf {a}.*\[ndf {b}"):
        DataLoader(open_ndf(b), 10).load_state_dict(state)


def test_other_column_names_are_other_data(tmp_path):
    a, b = tmp_path / "a.ndf", tmp_path / "b.ndf"
    save_ndf(a, (X, Y), features=["p", "q", "r"], labels=["t"])
    save_ndf(b, (X, Y), features=["p", "q", "s"], labels=["t"])
    state = state_after(DataLoader(open_ndf(a), 10))
    assert state["fingerprint"]["names"] == {"features": ["p", "q", "r"], "labels": ["t"]}
    with pytest.raises(ValueError, match="differ in names"):
        DataLoader(open_ndf(b), 10).load_state_dict(state)


def test_another_subset_is_other_data():
    rows = np.arange(0, 300, 3)
    state = state_after(DataLoader((X, Y), 10, rows=rows))
    assert state["fingerprint"]["rows"]["count"] == 100
    with pytest.raises(ValueError, match="differ in rows"):
        DataLoader((X, Y), 10, rows=rows[::-1]).load_state_dict(state)
    whole = state_after(DataLoader((X, Y), 10, rows=np.arange(300)))
    with pytest.raises(ValueError, match="differ in rows"):  # a subset of all rows is not all
        DataLoader((X, Y), 10).load_state_dict(whole)
    assert rest(DataLoader((X, Y), 10, rows=rows.copy()), state)


def test_a_dataset_is_known_by_its_manifest_wherever_it_lies(tmp_path):
    parts = [(X[:100], Y[:100]), (X[100:], Y[100:])]
    first, again = tmp_path / "ds", tmp_path / "again"
    save_ndf_dataset(first, parts)
    save_ndf_dataset(again, parts)  # the same rows, another write (other write ids)
    moved = tmp_path / "moved"
    shutil.copytree(first, moved)
    state = state_after(DataLoader(open_ndf_dataset(first), 10))
    fp = state["fingerprint"]
    assert fp["kind"] == "ndf dataset" and fp["parts"] == 2 and fp["path"] == str(first)
    assert "sample" not in fp, "a dataset's fingerprint opens no part"
    assert rest(DataLoader(open_ndf_dataset(moved), 10), state)
    with pytest.raises(ValueError, match="differ in manifest"):
        DataLoader(open_ndf_dataset(again), 10).load_state_dict(state)


def test_parquet_files_are_known_by_name_size_and_footer(tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    folder, moved, other = tmp_path / "pq", tmp_path / "moved", tmp_path / "other"
    for f, sizes in ((folder, [40, 60]), (other, [50, 50])):
        os.makedirs(f)
        write_parquet(f / "a.parquet", sizes, 0)
        write_parquet(f / "b.parquet", [30], 100)
    shutil.copytree(folder, moved)

    def make(path):
        return DataLoader(parquet_source(path, labels=["y0"]), 10, buffer_size=20)

    state = state_after(make(folder))
    fp = state["fingerprint"]
    assert fp["kind"] == "parquet" and fp["parts"] == 2
    assert fp["names"] == {"features": ["x0", "x1", "x2"], "labels": ["y0"]}
    assert rest(make(moved), state)
    with pytest.raises(ValueError, match="differ in files"):
        make(other).load_state_dict(state)
    # the same names and row groups, other values, sizes unknown (as for URLs): told
    # apart by the footers' statistics
    monkeypatch.setattr(identity, "_size", lambda path: None)
    blind = state_after(make(folder))
    shifted = tmp_path / "shifted"
    os.makedirs(shifted)
    write_parquet(shifted / "a.parquet", [40, 60], 1)
    write_parquet(shifted / "b.parquet", [30], 101)
    with pytest.raises(ValueError, match="differ in files"):
        make(shifted).load_state_dict(blind)
    assert rest(make(moved), blind)


class CountingRows:
    """A RowSource whose reader counts the rows it reads."""

    def __init__(self, n: int):
        self.x, self.y, self.read = np.zeros((n, 2)), np.zeros((n, 1)), []

    def open_reader(self):
        owner = self

        class Reader:
            n, d, l = owner.x.shape[0], 2, 1  # noqa: E741

            def read(self, rows, out_x, out_y):
                owner.read.append(out_x.shape[0])
                out_x[...], out_y[...] = owner.x[rows], owner.y[rows]

            def prefetch_default(self, batch_bytes):
                return 0

            def close(self):
                pass

        return Reader()


def test_a_fingerprint_reads_at_most_64_rows_once():
    source = CountingRows(100_000)
    loader = DataLoader(source, 10)
    loader.state_dict()
    loader.state_dict()
    assert source.read == [SAMPLE_ROWS]
    assert loader.state_dict()["fingerprint"]["kind"] == "CountingRows"  # the RowSource


def test_differences_compare_content_not_where_it_lies():
    fp = {
        "n": 5,
        "d": 1,
        "l": 0,
        "names": None,
        "sample": "ab",
        "rows": None,
        "path": "/a",
        "size": 68,
        "mtime": 1,
    }
    moved = {**fp, "path": "/b", "mtime": 2}
    assert differences(fp, moved) == []
    assert differences(fp, {**fp, "sample": "cd", "n": 6}) == ["n", "sample"]
    unread = {**fp, "d": None, "l": None}  # a stream not read yet: its widths unknown
    assert differences(fp, unread) == []


def test_a_row_source_adds_its_names_and_file(tmp_path):
    """A RowSource (an Arrow IPC file) adds its column names and its file's path, size and
    mtime to the sample; other names are other data."""
    pa = pytest.importorskip("pyarrow")
    from pyarrow import feather

    from exactbatch import arrow_file

    table = pa.table({"a": X[:, 0], "b": X[:, 1], "t": Y[:, 0]})
    path = tmp_path / "a.arrow"
    feather.write_feather(table, path, compression="uncompressed")
    fp = state_after(DataLoader(arrow_file(path, labels=["t"]), 10))["fingerprint"]
    assert fp["names"] == {"features": ["a", "b"], "labels": ["t"]}
    assert fp["path"] == str(path) and fp["size"] == os.path.getsize(path)
    renamed = tmp_path / "b.arrow"
    feather.write_feather(
        table.rename_columns(["a", "c", "t"]), renamed, compression="uncompressed"
    )
    state = state_after(DataLoader(arrow_file(path, labels=["t"]), 10))
    with pytest.raises(ValueError, match="differ in names"):
        DataLoader(arrow_file(renamed, labels=["t"]), 10).load_state_dict(state)


# -- every source kind names itself: identity() (issue 39, item 5) --------------------


def test_a_lazyframe_state_is_refused_over_other_columns_and_loads_over_the_same():
    """A LazyFrame names its columns in its identity(): a state over columns x, y does not
    load into a loader over columns p, q of the same shape."""
    pl = pytest.importorskip("polars")
    pytest.importorskip("pyarrow")
    a = pl.LazyFrame({"x": X[:, 0], "y": X[:, 1]})
    state = state_after(DataLoader(a, 10, total_size=300))
    assert state["fingerprint"]["names"] == {"features": ["x", "y"], "labels": []}
    other = pl.LazyFrame({"p": X[:, 0], "q": X[:, 1]})
    with pytest.raises(ValueError, match="differ in names"):
        DataLoader(other, 10, total_size=300).load_state_dict(state)
    DataLoader(pl.LazyFrame({"x": X[:, 0], "y": X[:, 1]}), 10, total_size=300).load_state_dict(
        state
    )


@pytest.mark.parametrize("elastic", [False, True], ids=["stream", "elastic"])
def test_a_list_of_chunks_is_fingerprinted_by_a_sample_of_its_rows(elastic):
    """A list of chunks has the sample an array of its rows has, however it is cut: other
    rows of the same shape are other data."""
    chunks = [(X[a : a + 60], Y[a : a + 60]) for a in range(0, 300, 60)]
    state = state_after(DataLoader(chunks, 10, total_size=300, elastic=elastic))
    fp = state["fingerprint"]
    whole = state_after(DataLoader((X, Y), 10))["fingerprint"]
    assert fp["kind"] == "chunks" and fp["sample"] == whole["sample"]
    recut = [(X[a : a + 100], Y[a : a + 100]) for a in range(0, 300, 100)]
    DataLoader(recut, 10, total_size=300, elastic=elastic).load_state_dict(state)
    other = [(RX[a : a + 60], RY[a : a + 60]) for a in range(0, 300, 60)]
    with pytest.raises(ValueError, match="differ in sample"):
        DataLoader(other, 10, total_size=300, elastic=elastic).load_state_dict(state)


def test_a_state_from_before_identity_loads():
    """A state taken before identity() (a stream's fingerprint without names or sample)
    still loads: a key it lacks is not compared."""
    pl = pytest.importorskip("polars")
    pytest.importorskip("pyarrow")
    frame = pl.LazyFrame({"x": X[:, 0], "y": X[:, 1]})
    state = state_after(DataLoader(frame, 10, total_size=300))
    state["fingerprint"] = {"kind": "stream", "names": None, "rows": None, "n": 300, "d": 2, "l": 0}
    loader = DataLoader(frame, 10, total_size=300)
    loader.load_state_dict(state)
    assert len(collect(loader)) == 28


class _Named:
    """A user's stream with an identity() hook (and a wrong one)."""

    def __init__(self, data, identity):
        self.data, self._identity, self.n_rows = data, identity, len(data)

    def __iter__(self):
        return iter([self.data])

    def identity(self):
        return self._identity


def test_a_user_source_identity_is_recorded_and_checked():
    state = state_after(DataLoader(_Named(X, {"kind": "mine", "names": "v1"}), 10), 1)
    assert state["fingerprint"]["kind"] == "mine"
    with pytest.raises(ValueError, match="differ in names"):
        DataLoader(_Named(X, {"kind": "mine", "names": "v2"}), 10).load_state_dict(state)
    with pytest.raises(TypeError, match=r"_Named.identity\(\) must return a dict"):
        DataLoader(_Named(X, ["v1"]), 10).state_dict()


def test_every_source_kind_of_the_library_has_an_identity(tmp_path):
    """Each kind names itself (no attribute of it guessed at)."""
    pa = pytest.importorskip("pyarrow")
    import exactbatch

    table = pa.table({"a": X[:, 0], "t": Y[:, 0]})
    path = tmp_path / "a.arrow"
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    write_parquet(tmp_path / "p.parquet", [100])
    save_ndf(tmp_path / "d.ndf", (X, Y))
    sources = [
        exactbatch.arrow_file(path, labels="t"),
        exactbatch.arrow_source(table, labels="t"),
        exactbatch.arrow_source(lambda: table.to_batches(), labels="t"),
        parquet_source(tmp_path / "p.parquet"),
        exactbatch.ndf_blocks(open_ndf(tmp_path / "d.ndf")),
    ]
    for source in sources:
        got = source.identity()
        assert isinstance(got, dict) and got["kind"], source
