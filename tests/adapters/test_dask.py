"""exactbatch.dask (DESIGN.md, "Sharded datasets and a distributed engine"; issue 15):
``to_ndf_dataset`` on a LocalCluster of worker processes writes one part per partition
and the manifest last (locally and to the S3 server), a failing partition leaves no
manifest; ``dask_source`` reads partitions as a stream that obeys the loader's laws,
with N from the collection when its partition lengths are known; ``column_stats``.

One LocalCluster (2 worker processes, 1 thread each) serves the whole module; its
client is the default scheduler while the module runs.
"""

from __future__ import annotations

import json
import os
import threading
import warnings

import numpy as np
import pytest
from helpers import collect, make_data
from laws import check_deterministic, check_epoch, check_epochs_differ, check_reshard, check_resume

from exactbatch import DataLoader, Standardize, open_ndf_dataset

dd = pytest.importorskip("dask.dataframe")
da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
pd = pytest.importorskip("pandas")

from exactbatch.dask import (  # noqa: E402
    DaskPartitions,
    DaskStream,
    column_stats,
    dask_source,
    to_ndf_dataset,
)

D, L = 3, 2
SIZES = [37, 0, 50, 13, 41]  # uneven partitions, one empty
N = sum(SIZES)


@pytest.fixture(scope="module")
def client():
    """The module's cluster: worker processes, as a real deployment has (threads of this
    process with ``EXACTBATCH_DASK_THREADS=1``: a mutation run by hand,
    tests/mutants_by_hand.py, starts one cluster a mutant, in about a second so, not ten
    under load; a mutant's code reaches the threads as the processes)."""
    processes = os.environ.get("EXACTBATCH_DASK_THREADS") != "1"
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


def frame(n_or_sizes=SIZES):
    """Traceable rows (x0 is the row id) as a pandas frame: x0..x2 features, t0, t1 labels."""
    sizes = n_or_sizes if isinstance(n_or_sizes, list) else [n_or_sizes]
    x, y = make_data(sum(sizes), D, L)
    df = pd.DataFrame(np.concatenate((x, y), axis=1), columns=["x0", "x1", "x2", "t0", "t1"])
    return df, sizes


def dask_frame(sizes=SIZES):
    """A Dask DataFrame of the traceable rows, partitioned exactly as ``sizes`` says."""
    df, sizes = frame(sizes)
    bounds = np.cumsum([0, *sizes])
    parts = [df.iloc[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return (
        dd.from_pandas(df, npartitions=1)
        if len(parts) == 1
        else dd.concat([dd.from_pandas(p, npartitions=1) for p in parts])
    )


def manifest(path) -> dict:
    with open(os.path.join(path, "manifest.json")) as f:
        return json.load(f)


def test_a_dataframe_written_by_the_workers_reads_back_the_same_rows(client, tmp_path):
    """One part per partition, each partition's rows, the names in the manifest; a loader
    over the dataset gives the batches of the same rows in memory."""
    ddf = dask_frame()
    assert ddf.npartitions == len(SIZES)
    to_ndf_dataset(ddf, tmp_path / "ds", labels=["t0", "t1"])
    m = manifest(tmp_path / "ds")
    assert [p["n"] for p in m["parts"]] == SIZES
    assert (m["features"], m["labels"]) == (["x0", "x1", "x2"], ["t0", "t1"])
    x, y = make_data(N, D, L)
    with open_ndf_dataset(tmp_path / "ds") as ds:
        assert (ds.n, ds.d, ds.l) == (N, D, L)
        gx, gy = ds.read_rows(np.arange(N))
        np.testing.assert_array_equal(gx, x)
        np.testing.assert_array_equal(gy, y)
        want = collect(DataLoader((x, y), 16, seed=3))
        assert collect(DataLoader(ds, 16, seed=3), D, L) == want


def test_features_choose_and_order_the_columns(client, tmp_path):
    to_ndf_dataset(dask_frame(), tmp_path / "ds", features=["x2", "x0"], labels="t1")
    m = manifest(tmp_path / "ds")
    assert (m["features"], m["labels"]) == (["x2", "x0"], ["t1"])
    x, y = make_data(N, D, L)
    with open_ndf_dataset(tmp_path / "ds") as ds:
        gx, gy = ds.read_rows(np.arange(N))
    np.testing.assert_array_equal(gx, x[:, [2, 0]])
    np.testing.assert_array_equal(gy, y[:, [1]])


def test_an_array_with_labels_by_position(client, tmp_path):
    """A 2-D Dask Array chunked along both axes: parts are row blocks, no names."""
    x, y = make_data(N, D, L)
    arr = da.from_array(np.concatenate((x, y), axis=1), chunks=(30, 2))
    to_ndf_dataset(arr, tmp_path / "arr", labels=[-2, -1])
    m = manifest(tmp_path / "arr")
    assert [p["n"] for p in m["parts"]] == [30, 30, 30, 30, 21]
    assert "features" not in m
    with open_ndf_dataset(tmp_path / "arr") as ds:
        gx, gy = ds.read_rows(np.arange(N))
    np.testing.assert_array_equal(gx, x)
    np.testing.assert_array_equal(gy, y)


def test_a_failing_partition_keeps_the_old_dataset(client, tmp_path):
    """A partition that raises fails the write once every task has stopped: the dataset
    that was at the path is as it was, and no part or temporary file of the write is
    left."""
    to_ndf_dataset(dask_frame(), tmp_path / "ds", labels=["t0", "t1"])
    before = sorted(os.listdir(tmp_path / "ds"))

    def fail_on_row_87(part):  # nested: pickled by value, for the workers
        if (part["x0"] == 87).any():
            raise RuntimeError("partition with row 87 failed")
        return part

    bad = dask_frame().map_partitions(fail_on_row_87)
    with pytest.raises(RuntimeError, match="row 87 failed"):
        to_ndf_dataset(bad, tmp_path / "ds", labels=["t0", "t1"])
    assert sorted(os.listdir(tmp_path / "ds")) == before
    assert open_ndf_dataset(tmp_path / "ds").n == N


def test_on_the_threaded_scheduler_a_failure_waits_for_the_other_writes(tmp_path, monkeypatch):
    """Dask's default (threaded) scheduler: when one partition fails while another is
    still being written, to_ndf_dataset cleans up only once that write has ended, so
    no part of it appears afterwards."""
    import dask

    import exactbatch.adapters.dask as daskmod

    monkeypatch.setattr(daskmod, "_client", lambda: None)  # this module's cluster aside
    started, release, written = threading.Event(), threading.Event(), threading.Event()
    write_part = daskmod.write_part

    def slow_or_failing(path, index, data, **kwargs):
        if index == 1:
            started.wait(30)
            raise RuntimeError("partition 1 failed")
        started.set()  # partition 0: in flight when partition 1 fails, ends once released
        release.wait(0.5)
        out = write_part(path, index, data, **kwargs)
        written.set()
        return out

    monkeypatch.setattr(daskmod, "write_part", slow_or_failing)
    arr = da.from_array(np.zeros((8, 3)), chunks=(4, 3))
    with dask.config.set(scheduler="threads", num_workers=4):
        with pytest.raises(RuntimeError, match="partition 1 failed"):
            to_ndf_dataset(arr, tmp_path / "ds")
    release.set()  # had the write gone on past the clean-up, it would end now
    assert written.wait(30)
    assert not os.path.exists(tmp_path / "ds")  # no part, and the folder it made is gone


def test_written_to_the_s3_server_by_the_workers(client, s3_server):
    url = f"s3://{s3_server.bucket}/test_dask/ds"
    to_ndf_dataset(dask_frame(), url, labels=["t0", "t1"], storage_options=s3_server.so)
    s3_server.fs.invalidate_cache()
    keys = sorted(k.rsplit("/", 1)[-1] for k in s3_server.fs.ls(url, detail=False))
    names = [p["name"] for p in json.loads(s3_server.fs.cat_file(f"{url}/manifest.json"))["parts"]]
    assert keys == ["manifest.json", *names] and len(names) == len(SIZES)
    x, y = make_data(N, D, L)
    with open_ndf_dataset(url, storage_options=s3_server.so) as ds:
        assert (ds.features, ds.labels) == (("x0", "x1", "x2"), ("t0", "t1"))
        gx, gy = ds.read_rows(np.arange(N))
    np.testing.assert_array_equal(gx, x)
    np.testing.assert_array_equal(gy, y)


# -- dask_source ------------------------------------------------------------------------------


def test_n_from_a_dataframe_of_known_length(client):
    """from_pandas knows its partitions' lengths: N at once, no counting pass."""
    df, _ = frame(N)
    src = dask_source(dd.from_pandas(df, npartitions=4), labels=["t0", "t1"])
    assert isinstance(src, DaskPartitions)
    assert (src.n_rows, src.d, src.l, src.features) == (N, D, L, ("x0", "x1", "x2"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a counting pass would warn
        loader = DataLoader(src, 16)
    assert (loader.total_size, len(loader)) == (N, -(-N // 16))


def test_unknown_lengths_are_counted_by_the_loader(client):
    """A filtered frame's lengths are unknown until computed: partitions in order, and the
    loader's counting pass (with its warning) gives N."""
    df, _ = frame(N)
    ddf = dd.from_pandas(df, npartitions=4)
    src = dask_source(ddf[ddf["x0"] >= 0], labels=["t0", "t1"])
    assert isinstance(src, DaskStream) and not hasattr(src, "n_rows")
    with pytest.warns(UserWarning, match="counted"):
        loader = DataLoader(src, 16, shuffle=False)
    assert loader.total_size == N
    assert [r for b in collect(loader, D, L) for r in b] == list(range(N))


def _loaders(kind):
    """A loader factory over a dask_source of ``kind``: "array" (uneven chunks, one empty:
    lengths known), "frame" (from_pandas: known) or "filtered" (lengths unknown)."""
    if kind == "array":
        x, y = make_data(N, D, L)
        rows = da.from_array(np.concatenate((x, y), axis=1), chunks=(tuple(SIZES), D + L))
        source = dask_source(rows, labels=[-2, -1])
    else:
        ddf = dd.from_pandas(frame(N)[0], npartitions=4)
        if kind == "filtered":
            ddf = ddf[ddf["x0"] >= 0]
        source = dask_source(ddf, labels=["t0", "t1"])
    assert isinstance(source, DaskStream if kind == "filtered" else DaskPartitions)

    def make(**kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the counting pass of "filtered"
            return DataLoader(source, 16, **kw)

    return make


@pytest.mark.parametrize(
    "kind, shuffle, drop_last",
    [
        ("array", True, True),
        ("frame", False, False),
        ("filtered", True, False),
        ("filtered", False, True),
    ],
    ids=["array-shuffled-drop-last", "frame-ordered", "filtered-shuffled", "filtered-ordered-drop"],
)
def test_the_stream_laws_hold_over_shards(client, kind, shuffle, drop_last):
    """The epoch law over 1 and 3 shards, determinism, and epochs that differ."""
    make = _loaders(kind)
    for shards in (1, 3):
        per = [
            collect(
                make(
                    shuffle=shuffle, drop_last=drop_last, num_shards=shards, shard_index=s, seed=5
                ),
                D,
                L,
            )
            for s in range(shards)
        ]
        check_epoch(per, n=N, batch_size=16, drop_last=drop_last, shuffle=shuffle)
    again = make(shuffle=shuffle, drop_last=drop_last, num_shards=3, shard_index=2, seed=5)
    check_deterministic(collect(again, D, L), per[2])
    loader = make(shuffle=shuffle, drop_last=drop_last, seed=5)
    check_epochs_differ(collect(loader, D, L), collect(loader, D, L), shuffle)


def test_a_shard_computes_only_its_partitions(client, monkeypatch):
    """Known lengths: shard 2 of 3 owns rows [94, 141), in partitions 3 and 4 only."""
    read = []
    real = DaskPartitions.read_chunk
    monkeypatch.setattr(DaskPartitions, "read_chunk", lambda s, i: read.append(i) or real(s, i))
    loader = _loaders("array")(num_shards=3, shard_index=2, seed=1)
    rows = [r for b in collect(loader, D, L) for r in b]
    assert sorted(rows) == list(range(94, N))
    assert sorted(read) == [3, 4]


def test_partitions_are_computed_ahead_on_the_cluster(client):
    """will_need starts at most ``ahead`` partitions, in the order asked; a read takes
    its result and starts the next one asked for. Without a client nothing runs ahead."""
    x, y = make_data(N, D, L)
    rows = da.from_array(np.concatenate((x, y), axis=1), chunks=(tuple(SIZES), D + L))
    src = dask_source(rows, labels=[-2, -1], ahead=2)
    for i in (4, 2, 0):
        src.will_need(i)
    assert src.computing == (2, 4)
    gx, gy = src.read_chunk(4)
    np.testing.assert_array_equal(gx, x[100:])
    np.testing.assert_array_equal(gy, y[100:])
    assert src.computing == (0, 2)
    gx, _ = src.read_chunk(3)  # not asked for: computed there and then
    np.testing.assert_array_equal(gx, x[87:100])
    assert [len(c[0]) for c in src] == SIZES  # a pass runs ahead too, and takes them all
    assert src.computing == ()
    with pytest.raises(ValueError, match="ahead must be >= 0"):
        dask_source(rows, ahead=-1)


@pytest.mark.parametrize("kind", ["array", "filtered"])
def test_the_resume_law(client, kind):
    make = _loaders(kind)
    check_resume(lambda: make(seed=9, num_shards=2, shard_index=1), D, L, cuts=[0, 5, 99])


@pytest.mark.parametrize("shards,after", [(3, 2), (1, 4)])
def test_elastic_partitions_resume_at_another_shard_count(client, shards, after):
    """Partitions of known length are an indexed stream: elastic, a state of S ranks
    resumes at S' through the buffer (laws.check_reshard); unknown lengths are refused."""
    make = _loaders("array")

    def rank(num_shards, shard_index, resumed):
        return make(seed=4, buffer_size=40, num_shards=num_shards, shard_index=shard_index,
                    elastic=True)  # fmt: skip

    check_reshard(rank, shards, after, D, L, cut=2)
    with pytest.raises(ValueError, match="read front to back"):
        _loaders("filtered")(elastic=True)


def test_column_stats_match_numpy(client):
    df, _ = frame(N)
    df.loc[5, "x1"] = np.nan
    ddf = dd.from_pandas(df, npartitions=4)
    got = column_stats(ddf, labels=["t0", "t1"])
    assert [s["name"] for s in got] == ["x0", "x1", "x2", "t0", "t1"]
    vals = df.to_numpy()
    np.testing.assert_allclose([s["mean"] for s in got], np.nanmean(vals, 0), rtol=1e-12)
    np.testing.assert_allclose([s["sd"] for s in got], np.nanstd(vals, 0), rtol=1e-12)
    assert [s["min"] for s in got] == list(np.nanmin(vals, 0))
    assert (got[1]["count"], got[1]["nan"]) == (N - 1, 1)
    arr = da.from_array(vals, chunks=(50, 5))
    by_array = column_stats(arr, labels=[-2, -1])
    assert [s["name"] for s in by_array] == ["x0", "x1", "x2", "y0", "y1"]
    assert [s["max"] for s in by_array] == [s["max"] for s in got]


def test_column_stats_standardise_a_loader_as_they_are(client):
    """Standardize takes column_stats' list as it is (features then labels: d + l)."""
    df, _ = frame(N)
    df.loc[5, "x1"] = np.nan
    stats = column_stats(dd.from_pandas(df, npartitions=4), labels=["t0", "t1"])
    vals = df.to_numpy()
    x, y = vals[:, :3], vals[:, 3:]
    loader = DataLoader((x, y), 50, shuffle=False, transform=Standardize(stats, nan_fill=0.0))
    xb = np.concatenate([b for b, _ in loader])
    want = (x - np.nanmean(x, 0)) * (1 / np.nanstd(x, 0))
    np.testing.assert_allclose(xb, np.where(np.isnan(want), 0.0, want), rtol=1e-12, atol=1e-12)
    assert xb[5, 1] == 0.0


def test_column_stats_of_a_subset_are_its_rows_on_the_cluster(client):
    """rows=: each partition summarises its own ids (a partition with none is left out),
    lengths known or counted first (a filtered frame), the ids in any order; an id past
    the rows is refused naming rows."""
    df, _ = frame(N)
    vals = df.to_numpy()
    ids = np.array([140, 3, 36, 87, 100, 101, 0, 139, 50, 99])  # partitions 0, 2, 3, 4; not 1
    for coll in (dask_frame(), dask_frame()[dask_frame()["x0"] >= 0]):
        got = column_stats(coll, labels=["t0", "t1"], rows=ids)
        assert [s["name"] for s in got] == ["x0", "x1", "x2", "t0", "t1"]
        assert [s["count"] for s in got] == [len(ids)] * 5
        np.testing.assert_allclose([s["mean"] for s in got], vals[ids].mean(0), rtol=1e-12)
        np.testing.assert_allclose([s["sd"] for s in got], vals[ids].std(0), rtol=1e-12)
        assert [s["min"] for s in got] == list(vals[ids].min(0))
        assert [s["max"] for s in got] == list(vals[ids].max(0))
    with pytest.raises(IndexError, match="rows"):
        column_stats(dask_frame(), rows=[N])


# -- bad input (no cluster needed: refused before anything runs) -------------------------------


@pytest.mark.parametrize(
    "make, kwargs, error, match",
    [
        (lambda: np.zeros((3, 2)), {}, TypeError, "needs a Dask DataFrame or a 2-D Dask Array"),
        (lambda: da.zeros(5, chunks=2), {}, ValueError, "expected a 2-D Dask Array"),
        (lambda: da.zeros((4, 2), dtype="U3", chunks=2), {}, TypeError, "real numbers"),
        (
            lambda: da.zeros((4, 2), chunks=2),
            {"labels": "a"},
            TypeError,
            ": a Dask Array has no column names: labels are column positions",
        ),
        (
            lambda: da.zeros((4, 2), chunks=2),
            {"labels": 5},
            ValueError,
            ": labels position 5 out of range for 2 columns$",
        ),
        (
            lambda: da.zeros((4, 2), chunks=2),
            {"features": [-3]},
            ValueError,
            ": features position -3 out of range for 2 columns$",
        ),
        (
            lambda: da.zeros((4, 2), chunks=2),
            {"features": [0], "labels": [0]},
            ValueError,
            "both features and labels",
        ),
        (lambda: dask_frame(), {"labels": "nope"}, ValueError, r"does not have.*'x0'"),
        (
            lambda: dask_frame(),
            {"features": ["x0", "t0"], "labels": "t0"},
            ValueError,
            "both features and labels",
        ),
        (lambda: dask_frame(), {"labels": ["t0", "t0"]}, ValueError, "more than once"),
        (lambda: dask_frame().assign(s="a"), {}, TypeError, r"non-numeric column\(s\) 's'"),
        # names the manifest could not keep: refused by validate_names, as save_ndf does
        (lambda: dask_frame().rename(columns={"x0": ""}), {}, ValueError, "non-empty text"),
        (lambda: dask_frame().rename(columns={"x0": "a\0"}), {}, ValueError, "without NUL"),
    ],
    ids=[
        "numpy",
        "1-D",
        "strings",
        "array-label-name",
        "array-label-range",
        "array-feature-range",
        "array-overlap",
        "missing-column",
        "frame-overlap",
        "twice",
        "non-numeric",
        "empty-name",
        "nul-in-name",
    ],
)
def test_bad_input_is_refused_before_anything_is_written(tmp_path, make, kwargs, error, match):
    """Each refusal names the function called (its message begins with it)."""
    for name, call in (
        ("to_ndf_dataset", lambda: to_ndf_dataset(make(), tmp_path / "ds", **kwargs)),
        ("dask_source", lambda: dask_source(make(), **kwargs)),
        ("column_stats", lambda: column_stats(make(), **kwargs)),
    ):
        with pytest.raises(error, match=match) as e:
            call()
        assert str(e.value).startswith(f"{name}"), str(e.value)
    assert os.listdir(tmp_path) == []


def test_a_dask_collection_given_to_the_loader_is_refused_pointing_at_dask_source():
    """DataLoader(collection) would compute it whole into memory: a TypeError names the way."""
    x, _ = make_data(40, 3, 0)
    for collection in (da.from_array(x, chunks=10), dd.from_array(x, chunksize=10)):
        with pytest.raises(TypeError, match="Dask collection.*dask_source"):
            DataLoader(collection, 8)


def test_inside_dask_tasks_auto_shards_by_the_worker(client):
    """num_shards="auto" in a task on a Dask worker: the worker's place among the
    scheduler's workers, sorted by address; one task per worker reads every row once.
    On the driver (distributed imported, no worker) it is one shard."""
    from exactbatch.distributed import distributed_shard

    def read():
        import numpy as np

        from exactbatch import DataLoader
        from exactbatch.distributed import distributed_shard

        x = np.arange(30.0).reshape(30, 1)
        loader = DataLoader(x, 4, shuffle=True, seed=5, num_shards="auto", shard_index="auto")
        rows = [int(v) for xb, _ in loader for v in xb[:, 0]]
        return distributed_shard(), rows

    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    got = client.gather([client.submit(read, workers=[w], pure=False) for w in workers])
    assert [shard for shard, _ in got] == [(len(workers), i) for i in range(len(workers))]
    rows = [r for _, rs in got for r in rs]
    assert sorted(rows) == list(range(30))
    assert distributed_shard() == (1, 0)


def test_a_partitions_summary_is_its_chosen_columns_features_then_labels():
    """_partition_stats, as each Dask task runs it (in a worker process, where no mutant
    of `make mutants` reaches): the chosen columns in order, of all rows or some."""
    from exactbatch.adapters.dask import _partition_stats
    from exactbatch.adapters.dask_plan import frame_columns

    df, _ = frame(20)
    columns, _, _ = frame_columns(list(df.columns), df.dtypes, ["x2", "x0"], ["t1"], "column_stats")
    want = df[["x2", "x0", "t1"]].to_numpy()
    every = _partition_stats(df, columns).table(["x2", "x0", "t1"])
    np.testing.assert_allclose([s["mean"] for s in every], want.mean(0), rtol=1e-12)
    assert [s["count"] for s in every] == [20, 20, 20]
    rows = np.array([3, 7, 19])
    some = _partition_stats(df, columns, rows).table(["x2", "x0", "t1"])
    assert [s["count"] for s in some] == [3, 3, 3]
    assert [s["max"] for s in some] == list(want[rows].max(0))
    assert [s["min"] for s in some] == list(want[rows].min(0))
