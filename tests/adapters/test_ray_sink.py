"""NdfDatasink's methods called in this process, as Ray's driver and write tasks call them:
no Ray cluster, so each write task's conversion and part (which a real write runs in
Ray's worker processes, where no mutant of ``make mutants`` reaches) is seen here.

The writes through a Ray cluster are tests/adapters/test_ray.py's."""

from __future__ import annotations

import os
import types
import warnings

import numpy as np
import pytest

from exactbatch import open_ndf_dataset
from exactbatch.errors import NdfOrderWarning

pd = pytest.importorskip("pandas")
pytest.importorskip("ray.data")
pa = pytest.importorskip("pyarrow")

from exactbatch.adapters.ray_sink import NdfDatasink, block_frame, schema_dtypes  # noqa: E402


def frame(start, n):
    rows = np.arange(start, start + n)
    return pd.DataFrame(
        {"row": rows.astype(np.int64), "price": rows * 0.5, "clicked": (rows % 2).astype(np.int32)}
    )


def ctx(index):
    return types.SimpleNamespace(task_idx=index)


def result(*returns):
    return types.SimpleNamespace(write_returns=list(returns))


def started(path, **kwargs):
    sink = NdfDatasink(path, **kwargs)
    sink.ordered = True  # (as to_ndf_dataset sets it: no warning)
    sink.on_write_start()
    return sink


def files(path):
    return sorted(os.listdir(path)) if os.path.exists(path) else []


def test_block_frame_joins_a_tasks_blocks_in_order_with_a_fresh_index():
    assert block_frame([]) is None
    one = frame(0, 3)
    assert block_frame([one]).equals(one)
    joined = block_frame([frame(0, 3), pa.Table.from_pandas(frame(3, 2)), frame(5, 4)])
    assert joined["row"].tolist() == list(range(9))
    assert joined.index.tolist() == list(range(9))  # (ignore_index: not 0, 1, 2, 0, 1, ...)
    assert list(joined.columns) == ["row", "price", "clicked"]


def test_schema_dtypes_names_each_column_and_objects_for_what_numpy_lacks():
    table = pa.table(
        {"a": pa.array([1, 2], pa.int32()), "b": [0.5, 1.5], "s": ["x", "y"], "l": [[1], [2]]}
    )
    names, dtypes = schema_dtypes(table.schema)
    assert names == ["a", "b", "s", "l"]
    assert dtypes == {
        "a": np.dtype(np.int32),
        "b": np.dtype(np.float64),
        "s": np.dtype(object),
        "l": np.dtype(object),
    }


def test_each_task_writes_its_blocks_as_a_part_and_the_manifest_lists_them_by_index(tmp_path):
    """Tasks finishing out of order, one of them given no block: the dataset holds the
    tasks' rows in the order of their indices, with the names each task chose."""
    path = tmp_path / "ds"
    sink = started(path, features=["price", "row"], labels=["clicked"])
    r1 = sink.write([frame(4, 3), frame(7, 2)], ctx(1))
    r0 = sink.write([frame(0, 4)], ctx(0))
    empty = sink.write([], ctx(2))  # the widths known: an empty part
    assert r0[0] == 0 and r1[0] == 1 and empty[0] == 2
    assert (r0[2], r1[2], empty[2]) == (4, 5, 0)  # the parts' rows
    assert r0[4:] == (["price", "row"], ["clicked"])
    assert empty[4:] == (["price", "row"], ["clicked"])
    sink.on_write_complete(result(r1, None, empty, r0))
    assert sink.manifest is not None
    with open_ndf_dataset(path) as ds:
        assert (ds.n, ds.d, ds.l) == (9, 2, 1)
        assert ds.features == ("price", "row") and ds.labels == ("clicked",)
        assert [p.n for p in ds.parts] == [4, 5, 0]
        x, y = ds.read_rows(np.arange(9))
    np.testing.assert_array_equal(x[:, 1], np.arange(9.0))
    np.testing.assert_array_equal(x[:, 0], np.arange(9.0) * 0.5)
    np.testing.assert_array_equal(y[:, 0], np.arange(9.0) % 2)


def test_a_task_given_no_block_before_any_columns_are_known_writes_nothing(tmp_path):
    path = tmp_path / "ds"
    sink = started(path, labels="clicked")
    assert sink.write([], ctx(3)) == (3, None, 0, 0, None, None)
    assert not [f for f in files(path) if f.startswith("part-")]
    # a write whose every task had no block: no rows, nothing left behind
    with pytest.raises(ValueError, match=r"ds: no parts to write \(the Dataset has no rows\)"):
        sink.on_write_complete(result((3, None, 0, 0, None, None), None))
    assert not [f for f in files(path) if f.startswith("part-")]
    assert "manifest.json" not in files(path)


def test_tasks_that_chose_different_columns_abort_the_write(tmp_path):
    path = tmp_path / "ds"
    sink = started(path, labels="clicked")
    a = sink.write([frame(0, 3)], ctx(0))
    b = sink.write([frame(3, 3).drop(columns="price")], ctx(1))
    assert any(f.startswith("part-") for f in files(path))
    with pytest.raises(ValueError, match=r"ds: the Dataset's blocks have different columns: "):
        sink.on_write_complete(result(a, b))
    assert "manifest.json" not in files(path)
    assert not [f for f in files(path) if f.startswith("part-")]


def test_a_bad_column_is_refused_by_the_task_naming_it(tmp_path):
    sink = started(tmp_path / "ds", labels="clicked")
    bad = frame(0, 3).assign(price=["a", "b", "c"])
    with pytest.raises(TypeError, match="price"):
        sink.write([bad], ctx(0))


def test_a_write_before_its_start_or_with_no_blocks_is_refused(tmp_path):
    sink = NdfDatasink(tmp_path / "ds")
    with pytest.raises(RuntimeError, match="NdfDatasink: a write task ran before on_write_start"):
        sink.write([frame(0, 2)], ctx(0))
    with pytest.raises(ValueError, match=r"ds: no parts to write \(the Dataset has no blocks\)"):
        sink.on_write_complete(result())
    sink.on_write_failed(RuntimeError("never started"))  # nothing to abort: no error
    assert not (tmp_path / "ds").exists()


def test_a_failed_write_removes_the_parts_its_tasks_wrote(tmp_path):
    path = tmp_path / "ds"
    sink = started(path, labels="clicked")
    sink.write([frame(0, 3)], ctx(0))
    sink.write([frame(3, 3)], ctx(1))
    assert len([f for f in files(path) if f.startswith("part-")]) == 2
    sink.on_write_failed(RuntimeError("a task failed"))
    assert not [f for f in files(path) if f.startswith("part-")]
    assert "manifest.json" not in files(path)


def test_the_write_starts_once_and_warns_only_when_the_order_is_rays(tmp_path):
    from ray.data import DataContext

    options = DataContext.get_current().execution_options
    before = options.preserve_order
    try:
        options.preserve_order = False
        sink = NdfDatasink(tmp_path / "a")
        with pytest.warns(NdfOrderWarning, match=r"NdfDatasink\('.*a'\): Ray's preserve_order"):
            sink.on_write_start()
        first = sink.write_id
        assert first is not None
        with warnings.catch_warnings():
            warnings.simplefilter("error", NdfOrderWarning)
            sink.on_write_start()  # (a second call changes nothing, and warns no more)
            assert sink.write_id == first
            started(tmp_path / "b")  # ordered (to_ndf_dataset's): no warning
            options.preserve_order = True
            NdfDatasink(tmp_path / "c").on_write_start()  # Ray's order is the Dataset's
    finally:
        options.preserve_order = before


def test_its_name_repr_and_rows_per_write(tmp_path):
    sink = NdfDatasink(tmp_path / "ds", rows_per_part=7)
    assert sink.get_name() == "NdfDataset"
    assert repr(sink) == f"NdfDatasink({os.fspath(tmp_path / 'ds')!r})"
    assert sink.min_rows_per_write == 7
    assert (sink.columns, sink.names, sink.write_id, sink.manifest) == (None, ((), ()), None, None)
    assert sink.ordered is False


def test_each_task_writes_its_part_with_the_sinks_storage_options(s3_server):
    """A URL whose store needs options (the endpoint, the keys): each task's part is
    written with them, as the start and the manifest are."""
    url = f"s3://{s3_server.bucket}/test_ray_sink/ds"
    sink = started(url, labels="clicked", storage_options=s3_server.so)
    done = sink.write([frame(0, 5)], ctx(0))
    sink.on_write_complete(result(done))
    with open_ndf_dataset(url, storage_options=s3_server.so) as ds:
        assert (ds.n, ds.d, ds.l) == (5, 2, 1)
        x, _ = ds.read_rows(np.arange(5))
    np.testing.assert_array_equal(x[:, 0], np.arange(5.0))
