"""Reliability, 6: input limits - absurd sizes, empty data, special values, wrong kinds.

* ``batch_size`` larger than n: one partial batch of all n rows (none with
  ``drop_last``). Larger than memory (10**15 rows): nothing of
  ``batch_size`` rows is allocated up front - a batch is at most n rows -
  on every kind of source; memory stays bounded by the data (tracemalloc).
  ``next_into`` needs buffers of ``batch_size`` rows: that allocation is the
  caller's, and a smaller buffer is a clear ``ValueError``.
* n = 0 (no rows), d = 0 (no features), l = 0 (no labels), and shards
  with no rows: legal, ``len(loader) == 0`` when there are no rows, no batch, no error.
* NaN (quiet, signalling, negative, with payloads), infinities, -0.0 and
  subnormals are data: passed through bit for bit, never an error.
* Bool and integer inputs are converted to float64; strings, bytes,
  objects, complex numbers, datetimes are a ``TypeError`` naming the
  argument (or the chunk).
* A huge ``buffer_size`` on a stream (10**12 rows) is not allocated up
  front: the shuffle buffer grows only as rows arrive (tracemalloc).
"""

from __future__ import annotations

import os
import tracemalloc
import warnings

import numpy as np
import pytest

from exactbatch import DataLoader, Dataset, open_ndf, parquet_source, save_ndf

HUGE = 10**15  # rows: 8 PB per feature column, if anything allocated it


def traced_peak(fn) -> tuple[object, int]:
    """``fn()`` and the peak bytes NumPy and Python allocated while it ran."""
    tracemalloc.start()
    try:
        out = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return out, peak


def rows_of(n: int, d: int = 3, l: int = 1):  # noqa: E741
    """x[i] = (i, i + 1/4, ...), y[i] = -(i + 1/2): row ids in x[:, 0]."""
    i = np.arange(n, dtype=np.float64)[:, None]
    return np.ascontiguousarray(i + np.arange(d) / 4 * (np.arange(d) > 0)), -(i + 0.5) * np.ones(
        (1, l)
    )


def sources(tmp_path, x, y, kinds=("pair", "dataset", "ndf", "chunks", "parquet")):
    """The same rows as each kind of source (streams in chunks of 1,000 rows)."""
    out = {}
    n = len(x)
    for kind in kinds:
        if kind == "pair":
            out[kind] = (x, y)
        elif kind == "dataset":
            out[kind] = Dataset(x, y)
        elif kind == "ndf":
            path = tmp_path / f"src-{n}-{x.shape[1]}-{y.shape[1]}.ndf"
            save_ndf(path, (x, y))
            out[kind] = open_ndf(path)
        elif kind == "chunks":
            out[kind] = [(x[a : a + 1000], y[a : a + 1000]) for a in range(0, n, 1000)]
        elif kind == "parquet":
            pa = pytest.importorskip("pyarrow")
            pq = pytest.importorskip("pyarrow.parquet")
            cols = {f"x{j}": x[:, j] for j in range(x.shape[1])}
            cols.update({f"y{k}": y[:, k] for k in range(y.shape[1])})
            path = tmp_path / f"src-{n}.parquet"
            pq.write_table(pa.table(cols), path, row_group_size=1000)
            out[kind] = parquet_source(path, labels=[f"y{k}" for k in range(y.shape[1])])
    return out


KINDS = ["pair", "dataset", "ndf", "chunks", "parquet"]


def loader_for(src, kind, batch_size, **kw):
    if kind == "chunks" and "total_size" not in kw:
        kw["total_size"] = sum(len(c[0]) for c in src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return DataLoader(src, batch_size, **kw)


def epoch(loader) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return list(loader)


# -- batch_size beyond n, and beyond memory -----------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_batch_larger_than_n_is_one_partial_batch_or_none_with_drop_last(tmp_path, kind, shuffle):
    x, y = rows_of(2500)
    src = sources(tmp_path, x, y, (kind,))[kind]
    loader = loader_for(src, kind, 2501, shuffle=shuffle)
    assert len(loader) == 1
    (xb, yb), *rest = epoch(loader)
    assert not rest and xb.shape == (2500, 3) and yb.shape == (2500, 1)
    assert np.array_equal(np.sort(xb[:, 0]), np.arange(2500.0))
    dropped = loader_for(src, kind, 2501, shuffle=shuffle, drop_last=True)
    assert len(dropped) == 0 and epoch(dropped) == []


@pytest.mark.parametrize(
    "kind, shuffle",
    [(k, s) for k in KINDS for s in (False, True) if s or k not in ("chunks", "parquet")],
)
@pytest.mark.parametrize("batch_size", [HUGE, 2**62, np.int64(HUGE)], ids=["1e15", "2^62", "np"])
def test_batch_size_beyond_memory_allocates_only_what_the_data_needs(
    tmp_path, kind, shuffle, batch_size
):
    """batch_size = 10**15 rows: one batch of the n rows, memory bounded by the data.

    (A stream without shuffle is left out here: see the next test.)
    """
    n = 20_000
    x, y = rows_of(n)
    src = sources(tmp_path, x, y, (kind,))[kind]
    data_bytes = x.nbytes + y.nbytes

    def run():
        loader = loader_for(src, kind, batch_size, shuffle=shuffle, buffer_size=None)
        assert len(loader) == 1
        batches = epoch(loader)
        state = loader.state_dict()
        return batches, state

    (batches, state), peak = traced_peak(run)
    assert len(batches) == 1 and batches[0][0].shape == (n, 3)
    assert np.array_equal(np.sort(batches[0][0][:, 0]), np.arange(float(n)))
    assert state["batch_size"] == int(batch_size)
    # the batch itself, a staging copy, the shuffle buffer growing by doubling, a chunk
    assert peak < 6 * data_bytes + (8 << 20), f"peak {peak / 2**20:.1f} MiB for a {n}-row epoch"
    fresh = loader_for(src, kind, batch_size, drop_last=True, shuffle=shuffle)
    assert len(fresh) == 0 and epoch(fresh) == []


@pytest.mark.parametrize("kind", ["chunks", "parquet"])
def test_stream_in_order_with_a_huge_batch_size_allocates_no_batch_up_front(tmp_path, kind):
    """BUG (batching/rebatch.py, not fixed here): a stream read in order (shuffle=False)
    with batch_size beyond memory fails - rebatch allocates the carry for a partial batch
    as ``np.empty((batch_size, d))`` - instead of handing out one batch of the n rows.

    Minimal repro::

        DataLoader([np.ones((10, 3))], batch_size=10**15, total_size=10, shuffle=False)
        list(_)  # MemoryError: Unable to allocate 21.3 PiB ... shape (10**15, 3)

    (2**62 gives ValueError "array is too big".) A fix: size the carry by what can still
    arrive, e.g. ``min(b, rows still to come)`` when N is known, or grow it like the
    shuffle buffer does.
    """
    n = 20_000
    x, y = rows_of(n)
    src = sources(tmp_path, x, y, (kind,))[kind]
    loader = loader_for(src, kind, HUGE, shuffle=False)
    (batches, _), peak = traced_peak(lambda: (epoch(loader), None))
    assert len(batches) == 1 and np.array_equal(batches[0][0], x)
    assert peak < 6 * (x.nbytes + y.nbytes) + (8 << 20)


def test_next_into_with_a_huge_batch_size_needs_the_callers_buffers(tmp_path):
    """next_into writes into buffers of batch_size rows - the caller's allocation. A
    smaller buffer is a clear ValueError naming the expected shape, before anything is read."""
    x, y = rows_of(100)
    loader = DataLoader((x, y), HUGE)
    with pytest.raises(ValueError, match=str(HUGE)):
        loader.next_into(np.empty((100, 3)), np.empty((100, 1)))
    # nothing was claimed: the epoch is still whole
    (xb, _), *rest = list(loader)
    assert not rest and len(xb) == 100


# -- no rows, no features, no labels ------------------------------------------------


@pytest.mark.parametrize("kind", ["pair", "dataset", "ndf", "chunks"])
@pytest.mark.parametrize("d, l", [(3, 1), (0, 2), (2, 0), (0, 0)])
def test_no_rows_is_an_empty_epoch(tmp_path, kind, d, l):  # noqa: E741
    x, y = np.empty((0, d)), np.empty((0, l))
    src = sources(tmp_path, x, y, (kind,))[kind] if kind != "chunks" else [(x, y)]
    loader = loader_for(src, kind, 8, total_size=0) if kind == "chunks" else DataLoader(src, 8)
    assert len(loader) == 0 and loader.n == 0 and loader.total_size == 0
    for _ in range(2):
        assert epoch(loader) == []
    bx, by = np.empty((8, d)), np.empty((8, l))
    loader.reset()
    assert loader.next_into(bx, by) == 0 and loader.next_into(bx, by) == 0
    again = loader_for(src, kind, 8, total_size=0) if kind == "chunks" else DataLoader(src, 8)
    again.load_state_dict(loader.state_dict())
    assert epoch(again) == []


def test_an_empty_stream_with_auto_total_size_is_a_clear_value_error():
    """Counting finds no rows: refused at construction (it may be a used-up iterator),
    rather than an epoch of zero batches; total_size=0 says it is really empty."""
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="total_size=0"):
        DataLoader(lambda: iter([np.empty((0, 3))]), 4)
    assert epoch(DataLoader(lambda: iter([np.empty((0, 3))]), 4, total_size=0)) == []


@pytest.mark.parametrize("n", [0, 1, 3])
def test_more_shards_than_rows_leaves_some_shards_empty(n):
    x, y = rows_of(n)
    seen = []
    for s in range(5):
        loader = DataLoader((x, y), 2, num_shards=5, shard_index=s)
        batches = epoch(loader)
        assert len(batches) == len(loader)
        seen += [v for xb, _ in batches for v in xb[:, 0]]
    assert sorted(seen) == list(range(n))


@pytest.mark.parametrize("kind", ["pair", "dataset", "ndf", "chunks"])
@pytest.mark.parametrize("d, l", [(0, 2), (2, 0), (0, 0)])
def test_no_features_or_no_labels_hands_out_every_row(tmp_path, kind, d, l):  # noqa: E741
    """d = 0 or l = 0 (even both: rows of no values) - every row is still counted once."""
    n = 50
    i = np.arange(n, dtype=np.float64)
    x, y = np.tile(i[:, None], (1, d)), np.tile(-i[:, None], (1, l))
    src = sources(tmp_path, x, y, (kind,))[kind]
    for shuffle in (False, True):
        loader = loader_for(src, kind, 8, shuffle=shuffle)
        batches = epoch(loader)
        assert len(batches) == len(loader) == 7
        assert sum(len(xb) for xb, _ in batches) == n
        for xb, yb in batches:
            assert xb.shape == (len(xb), d) and yb.shape == (len(xb), l)
            if d and l:
                assert np.array_equal(xb[:, 0], -yb[:, 0])
        ids = (
            np.concatenate([xb[:, 0] if d else -yb[:, 0] for xb, yb in batches]) if d + l else None
        )
        if ids is not None:
            assert np.array_equal(np.sort(ids), i)


# -- special values -----------------------------------------------------------------

SPECIAL_BITS = np.array(
    [
        0x7FF8000000000000,  # quiet NaN
        0x7FF8000000000001,  # quiet NaN with a payload
        0x7FF0000000000001,  # signalling NaN
        0xFFF8000000000000,  # negative NaN
        0x7FF0000000000000,  # +inf
        0xFFF0000000000000,  # -inf
        0x8000000000000000,  # -0.0
        0x0000000000000001,  # the smallest subnormal
        0x7FEFFFFFFFFFFFFF,  # the largest finite
    ],
    dtype=np.uint64,
)


def special_rows(n: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    """Column 0 is the row id; every other value is a special one (all of them occur)."""
    rng = np.random.default_rng(5)
    x = SPECIAL_BITS[rng.integers(0, len(SPECIAL_BITS), (n, 4))].view(np.float64)
    x[:, 0] = np.arange(n)
    y = SPECIAL_BITS[rng.integers(0, len(SPECIAL_BITS), (n, 2))].view(np.float64)
    return x, y


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("batch_size", [7, 512])
def test_nan_and_infinity_pass_through_bit_for_bit(tmp_path, kind, shuffle, batch_size):
    x, y = special_rows()
    src = sources(tmp_path, x, y, (kind,))[kind]
    loader = loader_for(src, kind, batch_size, shuffle=shuffle, buffer_size=1000)
    batches = epoch(loader)
    xb = np.concatenate([b[0] for b in batches])
    yb = np.concatenate([b[1] for b in batches])
    ids = xb[:, 0].astype(np.int64)
    assert np.array_equal(np.sort(ids), np.arange(len(x)))
    assert np.array_equal(xb.view(np.uint64), x[ids].view(np.uint64))
    assert np.array_equal(yb.view(np.uint64), y[ids].view(np.uint64))
    if kind in ("pair", "dataset", "ndf"):  # and through next_into
        loader.reset()
        bx, by = np.empty((batch_size, 4)), np.empty((batch_size, 2))
        while rows := loader.next_into(bx, by):
            ids = bx[:rows, 0].astype(np.int64)
            assert np.array_equal(bx[:rows].view(np.uint64), x[ids].view(np.uint64))
            assert np.array_equal(by[:rows].view(np.uint64), y[ids].view(np.uint64))


def test_special_values_survive_save_and_open_bit_for_bit(tmp_path):
    x, y = special_rows(200)
    save_ndf(tmp_path / "s.ndf", (x, y))
    raw = np.frombuffer((tmp_path / "s.ndf").read_bytes(), dtype="<u8", offset=28).reshape(200, 6)
    assert np.array_equal(raw, np.hstack([x, y]).view(np.uint64))
    with open_ndf(tmp_path / "s.ndf") as f:
        for idx in (np.arange(200), np.random.default_rng(0).permutation(200)[:150], [5, 4, 3]):
            xs, ys = f.read_rows(idx)
            assert np.array_equal(xs.view(np.uint64), x[idx].view(np.uint64))
            assert np.array_equal(ys.view(np.uint64), y[idx].view(np.uint64))


# -- kinds of input -----------------------------------------------------------------

CONVERTED = [
    np.array([[1, 0], [0, 1]], dtype=bool),
    np.array([[-128, 127], [0, 1]], dtype=np.int8),
    np.array([[0, 2**16 - 1], [7, 8]], dtype=np.uint16),
    np.array([[-(2**31), 2**31 - 1], [0, 1]], dtype=np.int32),
    np.array([[2**53, -(2**53)], [0, 1]], dtype=np.int64),
    np.array([[2**64 - 1, 0], [1, 2]], dtype=np.uint64),
    np.array([[0.5, -1.25], [65504, 1e-3]], dtype=np.float16),
    np.array([[0.1, 3e38], [1, 2]], dtype=np.float32),
    [[1, 2], [3, 4]],  # a nested list of ints
    [[True, 2.5], [0, -1]],  # mixed Python numbers
]


@pytest.mark.parametrize("data", CONVERTED, ids=lambda a: str(np.asarray(a).dtype))
def test_bools_and_integers_are_converted_to_float64(tmp_path, data):
    want = np.asarray(data).astype(np.float64)
    sources_ = [(data, np.asarray(data)[:, 0]), Dataset(data)]
    if isinstance(data, np.ndarray):  # (a bare list is a stream of chunks, not an array)
        sources_.append(data)
    for src in sources_:
        (xb, _), *rest = list(DataLoader(src, 10, shuffle=False))
        assert not rest and xb.dtype == np.float64 and np.array_equal(xb, want)
    save_ndf(tmp_path / "c.ndf", Dataset(data, np.asarray(data)[:, 1]))
    with open_ndf(tmp_path / "c.ndf") as f:
        xs, ys = f.read_rows([0, 1])
    assert np.array_equal(xs, want) and np.array_equal(ys[:, 0], want[:, 1])
    chunks = [np.asarray(data)]
    (xb, _), *rest = list(DataLoader(chunks, 10, shuffle=False, total_size=2))
    assert np.array_equal(xb, want)


REFUSED = {
    "str": np.array([["a", "b"], ["c", "d"]]),
    "bytes": np.array([[b"a", b"b"], [b"c", b"d"]]),
    "object-floats": np.array([[1.0, 2.0], [3.0, None]], dtype=object),
    "object-ints": np.array([[1, 2], [3, 4]], dtype=object),
    "complex": np.array([[1 + 2j, 0], [0, 1]]),
    "datetime": np.array([["2024-01-01", "2024-01-02"]] * 2, dtype="datetime64[D]"),
    "timedelta": np.array([[1, 2], [3, 4]], dtype="timedelta64[s]"),
    "list-with-str": [[1.0, "x"], [2.0, 3.0]],
    "list-with-none": [[1.0, None], [2.0, 3.0]],
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_strings_objects_and_complex_are_a_type_error(tmp_path, name):
    bad = REFUSED[name]
    good = np.zeros((2, 2))
    cases = [
        ("x", lambda: Dataset(bad)),
        ("y", lambda: Dataset(good, bad)),
        ("x", lambda: DataLoader(bad, 2)),
        ("x", lambda: DataLoader((bad, good), 2)),
        ("y", lambda: DataLoader((good, bad), 2)),
        ("x", lambda: save_ndf(tmp_path / "bad.ndf", bad)),
        ("y", lambda: save_ndf(tmp_path / "bad.ndf", (good, bad))),
        ("chunk 0", lambda: list(DataLoader([bad], 2, total_size=2))),
        ("chunk 1", lambda: list(DataLoader([good, (good, bad)], 2, total_size=4))),
    ]
    for what, make in cases:
        with pytest.raises(TypeError) as info:
            make()
        assert what in str(info.value), str(info.value)
    assert not os.path.exists(tmp_path / "bad.ndf")


# -- a huge shuffle buffer ----------------------------------------------------------


@pytest.mark.parametrize("total_size", ["given", None])
def test_huge_buffer_size_grows_only_as_rows_arrive(total_size):
    """buffer_size=10**12 rows (32 TB at d + l = 4): the buffer grows with the stream,
    so memory stays a small multiple of the data - and the epoch is a full shuffle."""
    n, d = 60_000, 3

    def chunks():  # made on the fly: the data exists only as it streams
        for a in range(0, n, 5000):
            i = np.arange(a, a + 5000, dtype=np.float64)
            yield np.column_stack([i, i, i]), -i

    data_bytes = n * (d + 1) * 8

    def run():
        loader = DataLoader(
            chunks, 1000, buffer_size=10**12, total_size=n if total_size else None, seed=1
        )
        return [xb[:, 0].copy() for xb, _ in loader]

    batches, peak = traced_peak(run)
    ids = np.concatenate(batches)
    assert np.array_equal(np.sort(ids), np.arange(float(n)))
    assert peak < 5 * data_bytes + (4 << 20), f"peak {peak / 2**20:.1f} MiB, data {data_bytes}"
    # a buffer larger than the data: the first batch draws from the whole stream
    assert batches[0].max() > n / 2


@pytest.mark.parametrize("buffer_size", [1, 10**12])
def test_huge_batch_and_buffer_sizes_together_on_a_stream(buffer_size):
    x, y = rows_of(5000)
    chunks = [(x[a : a + 700], y[a : a + 700]) for a in range(0, 5000, 700)]
    loader = DataLoader(chunks, HUGE, buffer_size=buffer_size, total_size=5000)
    (xb, yb), *rest = list(loader)
    assert not rest and np.array_equal(np.sort(xb[:, 0]), np.arange(5000.0))
