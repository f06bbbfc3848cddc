"""exactbatch.sources.kinds and .random_access on their own: what open_source makes of
each kind of source, its refusals, and the random-access readers' own methods.
(Every kind through a loader: tests/sources/test_random_access.py,
tests/sources/test_protocols.py, tests/loader/test_loader.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_data, write_ndf_dataset

from exactbatch import Dataset, ndf_blocks, open_ndf, open_ndf_dataset, save_ndf
from exactbatch.sources.chunks import ChunkIndexedStream, FactoryStream, IterableStream
from exactbatch.sources.kinds import KINDS, open_source
from exactbatch.sources.random_access import (
    PREFETCH_MIN_BYTES,
    MemoryReader,
    NdfReader,
    WrappedReader,
)

X, Y = make_data(9, 3, 2)


def _read(reader, rows):
    ox, oy = np.empty((len(rows), reader.d)), np.empty((len(rows), reader.l))
    reader.read(np.asarray(rows, dtype=np.int64), ox, oy)
    return ox, oy


def test_each_kind_opens_as_its_reader_or_stream(tmp_path):
    save_ndf(tmp_path / "a.ndf", (X, Y))
    f = open_ndf(tmp_path / "a.ndf")
    cases = [
        (Dataset(X, Y), MemoryReader, 2),
        (f, NdfReader, 2),
        (X, MemoryReader, 0),
        ((X, Y), MemoryReader, 2),
        (ndf_blocks(f, 4), ChunkIndexedStream, None),
        (lambda: iter([X]), FactoryStream, None),
        ([X[:4], X[4:]], IterableStream, None),
    ]
    for source, kind, l in cases:  # noqa: E741
        opened = open_source(source)
        assert type(opened) is kind, source
        if l is not None:
            assert (opened.n, opened.d, opened.l) == (9, 3, l)
            gx, gy = _read(opened, [8, 0, 3])
            np.testing.assert_array_equal(gx, X[[8, 0, 3]])
            np.testing.assert_array_equal(gy, Y[[8, 0, 3]][:, :l])
            opened.close()


def test_a_tuple_of_another_length_is_refused_pointing_at_a_list():
    with pytest.raises(TypeError) as info:
        open_source((X, Y, X))
    assert str(info.value) == (
        "a tuple source must be an (x, y) pair; got a 3-tuple (pass a list for a sequence "
        "of chunks)"
    )


def test_a_dask_collection_and_a_bare_iterator_are_refused_saying_what_to_pass():
    class Collection:
        def __dask_graph__(self):
            return {}

        def __array__(self, dtype=None, copy=None):  # (an array-like too: refused first)
            return np.zeros((2, 2))

    with pytest.raises(TypeError) as info:
        open_source(Collection())
    assert str(info.value) == (
        "a Dask collection (Collection) is not an in-memory array: stream it by partitions "
        "with DataLoader(exactbatch.dask.dask_source(collection), ...), or write it once "
        "with exactbatch.dask.to_ndf_dataset and open that"
    )
    with pytest.raises(TypeError) as info:
        open_source(iter([X]))
    assert str(info.value) == (
        "a bare iterator or generator (list_iterator) can be read only once, but every "
        "epoch must restart the stream: pass a zero-argument function that returns a "
        "fresh iterator, e.g. DataLoader(lambda: make_chunks(), ...)"
    )


def test_strings_and_unknown_objects_are_refused_listing_the_named_kinds():
    names = [k.name for k in KINDS if k.name is not None]
    want = f"source must be {', '.join(names[:-1])} or {names[-1]}; got "
    for bad, type_name in (("rows.ndf", "str"), (b"xy", "bytes"), (3.5, "float")):
        with pytest.raises(TypeError) as info:
            open_source(bad)
        assert str(info.value) == want + type_name


def test_a_memory_reader_sets_its_threads_and_refuses_reads_once_closed():
    ds = Dataset(X, Y)
    r = MemoryReader(ds)
    assert r.x is ds.x and r.y is ds.y
    assert r.fuses is True and r.prefetch_default(1 << 30) == 0
    r.use_threads(3)
    assert r._rows.threads == 3
    gx, _ = _read(r, [1, 2])
    np.testing.assert_array_equal(gx, X[[1, 2]])
    ox, oy = np.empty((2, 3)), np.empty((2, 2))
    r.read_run(np.arange(9), 4, 2, ox, oy)
    np.testing.assert_array_equal(ox, X[4:6])
    tx, ty = r.take_run(np.arange(9), 7, 2, np.dtype(np.float64), None)
    np.testing.assert_array_equal(ty, Y[7:9])
    r.close()
    assert r.x is None and r.y is None
    for call in (
        lambda: r.read(np.arange(2), ox, oy),
        lambda: r.read_run(np.arange(9), 0, 2, ox, oy),
        lambda: r.take_run(np.arange(9), 0, 2, np.dtype(np.float64), None),
        lambda: r.use_threads(2),  # (its rows are let go of: the same refusal)
    ):
        with pytest.raises(ValueError, match="^read from a closed DataLoader$"):
            call()


def test_an_ndf_reader_prefetches_from_256_kib_a_batch_and_refuses_reads_once_closed(tmp_path):
    save_ndf(tmp_path / "a.ndf", (X, Y))
    f = open_ndf(tmp_path / "a.ndf")
    r = NdfReader(f)
    assert (r.n, r.d, r.l) == (9, 3, 2)
    assert PREFETCH_MIN_BYTES == 256 << 10
    assert r.prefetch_default(PREFETCH_MIN_BYTES - 1) == 0
    assert r.prefetch_default(PREFETCH_MIN_BYTES) == 2
    r.use_threads(2)
    gx, gy = _read(r, [5, 5, 0])
    np.testing.assert_array_equal(gx, X[[5, 5, 0]])
    np.testing.assert_array_equal(gy, Y[[5, 5, 0]])
    r.close()
    with pytest.raises(ValueError, match="^read from a closed DataLoader$"):
        _read(r, [0])
    gx, _ = _read(NdfReader(f), [4])  # the file itself stays open: the reader had a share
    np.testing.assert_array_equal(gx, X[[4]])


def _check_own_runs(r, backend: str, hooks: tuple[str, ...], y_dtype) -> object:
    """Law: reader ``r`` on the compiled path reads a whole order's batches through
    run reads of its own (``r._rows``: their ``read_run`` and ``take_run``; ``take_run``
    of labels as ``y_dtype``, None: the features'), with the reader's threads and its
    ``hooks`` set, let go of at close (a closed reader's runs refuse); on the pure path
    it has none. Returns the runs (None on the pure path)."""
    if backend == "numpy":
        assert not hasattr(r, "read_run") and not hasattr(r, "take_run")
        r.close()
        return None
    runs = r._rows
    assert r.read_run.__self__ is runs and r.take_run.__self__ is runs
    assert all(getattr(runs, h) is not None for h in hooks)
    r.use_threads(3)
    assert runs.threads == 3
    order = np.array([8, 0, 5, 5, 2, 7], dtype=np.int32)
    ox, oy = np.full((4, 3), -1.0), np.full((4, 2), -1.0)
    r.read_run(order, 1, 3, ox, oy)
    np.testing.assert_array_equal(ox[:3], X[[0, 5, 5]])
    np.testing.assert_array_equal(oy[:3], Y[[0, 5, 5]])
    assert (ox[3] == -1).all()  # only the run's rows written
    tx, ty = r.take_run(order, 3, 3, np.dtype(np.float32), y_dtype)
    y_dtype = np.dtype(np.float32) if y_dtype is None else y_dtype
    assert tx.dtype == np.float32 and ty.dtype == y_dtype
    np.testing.assert_array_equal(tx, X[[5, 2, 7]].astype(np.float32))
    np.testing.assert_array_equal(ty, Y[[5, 2, 7]].astype(y_dtype))
    r.close()
    assert all(getattr(runs, h) is None for h in hooks)  # (no longer holding the source)
    for call in (
        lambda: r.read_run(order, 0, 2, ox, oy),
        lambda: r.take_run(order, 0, 2, np.dtype(np.float64), None),
    ):
        with pytest.raises(ValueError, match="^read from a closed DataLoader$"):
            call()
    return runs


def test_an_ndf_reader_hands_out_its_own_compiled_rows_runs(tmp_path, each_backend):
    """A local .ndf reader on the compiled path reads a whole order's batches through
    compiled rows of its own (their ``read_run`` and ``take_run``: next_into's one call
    reads through them), of the reader's threads, the file's errors as their hook, let
    go of at close; on the pure path it has none, and the loader reads through their
    twins over ``read``."""
    save_ndf(tmp_path / "a.ndf", (X, Y))
    with open_ndf(tmp_path / "a.ndf") as f:
        r = NdfReader(f)
        compiled = getattr(f._h, "compiled", None)
    runs = _check_own_runs(r, each_backend, ("changed",), np.dtype(np.float64))
    assert runs is None or runs is not compiled  # (rows of the reader's own)


def test_a_dataset_reader_hands_out_its_own_runs_over_the_parts(tmp_path, each_backend):
    """A local sharded dataset's reader on the compiled path reads a whole order's
    batches through run reads of its own over the dataset's parts (the core's
    PartsRuns: their ``read_run`` and ``take_run``, the reader's threads, the dataset's
    errors and its read of parts not open as hooks), let go of at close; on the pure
    path it has none, and the loader reads through their twins over ``read``."""
    write_ndf_dataset(tmp_path / "ds", [4, 0, 5], d=3, l=2)
    with open_ndf_dataset(tmp_path / "ds") as ds:
        r = NdfReader(ds)
    runs = _check_own_runs(r, each_backend, ("changed", "missing"), None)
    assert runs is None or type(runs).__name__ == "PartsRuns"


def test_a_wrapped_reader_leaves_threads_prefetch_and_close_to_its_inner_reader():
    calls = []

    class Inner:
        def prefetch_default(self, batch_bytes):
            calls.append(("prefetch", batch_bytes))
            return 7

        def use_threads(self, threads):
            calls.append(("threads", threads))

        def close(self):
            calls.append(("close",))

    w = WrappedReader()
    w.inner = Inner()
    assert w.prefetch_default(123) == 7
    w.use_threads(4)
    w.close()
    assert calls == [("prefetch", 123), ("threads", 4), ("close",)]
    w.inner = object()  # an inner reader without use_threads: nothing to set
    w.use_threads(2)
