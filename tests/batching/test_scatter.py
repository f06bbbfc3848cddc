"""A one-piece shuffle buffer's fills scattered straight to their batches
(exactbatch.batching.scatter): the very batches, digests, row ids, dropped rows and
generator state of the buffer that copies rows in and gathers them out, whatever the
chunks (arrays, columns of any numeric type, rows read into the buffer) and whether
the stream's size_hint is right, short or long; and the kernel that scatters, bit for
bit the same on both backends."""

from __future__ import annotations

import numpy as np
import pytest
from backends import built, on_backend
from hypothesis import given, settings
from hypothesis import strategies as st

from exactbatch import kernels
from exactbatch.batching import scatter
from exactbatch.batching.buffer import shuffle_buffer
from exactbatch.batching.buffer_whole import shuffle_whole
from exactbatch.order.digest import Tally
from exactbatch.sources.chunks import ChunkRead, WholeRows
from exactbatch.sources.column_chunk import Columns

needs_core = pytest.mark.skipif(not built(), reason="the compiled core is not built")

_NARROW = ["float64", "float32", "int8", "uint8", "int16", "uint16", "int32", "uint32"]


def _table(n, d, l, types, seed):  # noqa: E741
    """Columns of n values: x's d then y's l, column j of type types[j] (a NaN in
    a float64 one), and the float64 rows they are."""
    rng = np.random.default_rng(seed)
    cols = []
    for t in map(np.dtype, types):
        if t.kind == "f":
            c = (rng.standard_normal(n) * 1e3).astype(t)
        else:
            info = np.iinfo(t)
            c = rng.integers(info.min, info.max, n, endpoint=True, dtype=t)
        cols.append(c)
    if n and types and types[0] == "float64":
        cols[0][n // 2] = np.nan
    rows = np.stack([c.astype(np.float64) for c in cols], axis=1) if cols else np.empty((n, 0))
    return cols, rows.reshape(n, d + l)


def _chunks(kind, cols, rows, d, l, sizes):  # noqa: E741
    """The stream's chunks of ``sizes`` rows, each as ``kind`` makes them."""
    at = 0
    for k in sizes:
        lo, hi = at, at + k
        if kind == "arrays":
            yield rows[lo:hi, :d].copy(), rows[lo:hi, d:].copy(), lo
        elif kind == "columns":
            yield Columns(cols[:d], k, lo), Columns(cols[d:], k, lo), lo
        elif kind == "held":  # a decoded chunk's columns (Parquet's open_chunk)
            whole = WholeRows(rows[lo:hi].copy(), lo)
            views = (lambda lo=lo, hi=hi: ([c[lo:hi] for c in cols], lo)) if k % 2 else None
            yield ChunkRead(whole.read_rows_into, lo, k, d, l, held=True, views=views)
        else:  # rows read from the source into the buffer (ndf_blocks)
            whole = WholeRows(rows[lo:hi].copy(), lo)
            yield ChunkRead(whole.read_rows_into, lo, k, d, l)
        at = hi


def _run(make, chunks, seed):
    rng, dropped = np.random.default_rng(seed), Tally()
    groups = [[tuple(batch) for batch in group] for group in make(chunks, rng, dropped)]
    return groups, dropped, rng.bit_generator.state


def _same(a, b):
    """Two runs' groups (each batch x, y, digest, maybe rows), dropped tallies and final
    generator states, bit for bit."""
    (ga, da, sa), (gb, db, sb) = a, b
    assert [len(g) for g in ga] == [len(g) for g in gb]  # the same batches a group
    for p, q in zip((x for g in ga for x in g), (x for g in gb for x in g), strict=True):
        assert len(p) == len(q)
        assert p[0].dtype == q[0].dtype == np.float64
        assert p[0].tobytes() == q[0].tobytes() and p[1].tobytes() == q[1].tobytes()
        assert p[0].shape == q[0].shape and p[1].shape == q[1].shape
        assert p[2] == q[2]
        if len(p) == 4:
            assert np.array_equal(p[3], q[3])
    assert (da.rows, da.digest) == (db.rows, db.digest)
    assert sa == sb


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_scattered_fills_make_the_buffers_batches_bit_for_bit(data):
    n = data.draw(st.integers(0, 700))
    d, l = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 2))  # noqa: E741
    if d + l == 0:
        d = 1
    types = [data.draw(st.sampled_from(_NARROW)) for _ in range(d + l)]
    kind = data.draw(st.sampled_from(["arrays", "columns", "held", "read"]))
    b = data.draw(st.integers(1, 40))
    size = max(b, data.draw(st.integers(1, 300)))
    sizes, left = [], n
    while left:
        sizes.append(min(left, data.draw(st.integers(1, 120))))
        left -= sizes[-1]
    hint = n + data.draw(st.sampled_from([0, 0, -1, 1, -size, size, -n]))
    drop_last, with_rows = data.draw(st.booleans()), data.draw(st.booleans())
    seed = data.draw(st.integers(0, 2**32 - 1))
    cols, rows = _table(n, d, l, types, seed)

    def fused(chunks, rng, dropped):
        return scatter.shuffle_scattered(
            iter(chunks), (d, l), b, size, rng, drop_last, hint, None, dropped, with_rows
        )

    def buffered(chunks, rng, dropped):
        return shuffle_whole(
            chunks, b, size, rng, drop_last, None, None, dropped, np.float64, with_rows
        )

    want = _run(buffered, _chunks(kind, cols, rows, d, l, sizes), seed)
    got = _run(fused, _chunks(kind, cols, rows, d, l, sizes), seed)
    _same(got, want)
    if n:  # and every row once (less those dropped), as read
        batches = [x for g in got[0] for x in g]
        assert sum(len(x[0]) for x in batches) + got[1].rows == n


@pytest.mark.parametrize("hint", [2000, 1990, 2500])
def test_the_buffer_scatters_float64_fills_where_the_size_is_known(monkeypatch, hint):
    """shuffle_buffer scatters (float64, size_hint known: right, or wrong either way) and
    gives the batches it gives without scattering."""
    calls = []
    real = kernels.scatter_columns
    monkeypatch.setattr(scatter, "scatter_columns", lambda *a: calls.append(1) or real(*a))
    cols, rows = _table(2000, 3, 1, ["float64", "float32", "int16", "float64"], 5)
    sizes = [100] * 20

    def run(size_hint, dtype=np.float64):
        return _run(
            lambda chunks, rng, dropped: shuffle_buffer(
                chunks, 32, 300, rng, False, size_hint, None, None, dropped, dtype
            ),
            _chunks("columns", cols, rows, 3, 1, sizes),
            9,
        )

    got = run(hint)
    assert calls
    calls.clear()
    _same(got, run(None))  # the size unknown: the buffer copies rows in
    assert not calls
    run(hint, np.float32)  # float32 batches: not scattered
    assert not calls


@needs_core
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_the_backends_scatter_rows_bit_for_bit(data):
    k, w = data.draw(st.integers(0, 300)), data.draw(st.integers(0, 5))
    group = data.draw(st.integers(1, 80))
    full = data.draw(st.integers(0, k)) if k else 0
    if full == 0:
        group = max(group, 1)
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    types = [data.draw(st.sampled_from(_NARROW)) for _ in range(w)]
    cols, _ = _table(k, w, 0, types, seed)
    if data.draw(st.booleans()) and w:  # columns of whole rows: strided
        wide = np.stack([c.astype(np.float64) for c in cols], axis=1)
        cols = [wide[:, j] for j in range(w)]
    dest = rng.permutation(k).astype(np.int64)
    got = []
    for name in ("compiled", "numpy"):
        with on_backend(name):
            outs = [np.full((min(group, full - a), w), -1.0) for a in range(0, full, group)]
            left = np.full((k - full, w + 2), -1.0)
            kernels.scatter_columns(cols, dest, outs, left[:, :w], group)
            got.append((outs, left))
    src = np.stack([c.astype(np.float64) for c in cols], axis=1) if w else np.empty((k, 0))
    placed = np.empty((k, w))
    placed[dest] = src
    whole = np.concatenate([*got[0][0], got[0][1][:, :w]]) if k else np.empty((0, w))
    assert whole.tobytes() == placed.tobytes()
    assert (got[0][1][:, w:] == -1).all()  # nothing written past a row's values
    for (oa, la), (ob, lb) in [tuple(got)]:
        assert all(a.tobytes() == b.tobytes() for a, b in zip(oa, ob, strict=True))
        assert la.tobytes() == lb.tobytes()


@pytest.mark.parametrize("name", ["compiled", "numpy"])
def test_a_scatter_outside_the_rows_is_refused(name):
    if name == "compiled" and not built():
        pytest.skip("the compiled core is not built")
    cols = [np.arange(4.0)]
    with on_backend(name):
        outs, left = [np.empty((2, 1)), np.empty((1, 1))], np.empty((1, 1))
        with pytest.raises(IndexError, match="outside"):
            kernels.scatter_columns(cols, np.array([0, 1, 2, 4]), outs, left, 2)
        with pytest.raises(IndexError, match="outside"):
            kernels.scatter_columns(cols, np.array([0, -1, 2, 3]), outs, left, 2)


@needs_core
def test_the_compiled_scatter_refuses_wrong_arguments():
    cols = [np.arange(4.0)]
    left = np.empty((0, 1))
    with on_backend("compiled"):
        with pytest.raises(ValueError, match="group=2 rows"):
            kernels.scatter_columns(
                cols, np.arange(4), [np.empty((1, 1)), np.empty((3, 1))], left, 2
            )
        with pytest.raises(ValueError, match="has 4 values; dest has 5"):
            kernels.scatter_columns(cols, np.arange(5), [np.empty((5, 1))], left, 5)
        with pytest.raises(TypeError, match="int64"):
            kernels.scatter_columns(cols, np.arange(4, dtype=np.int32), [np.empty((4, 1))], left, 4)
        with pytest.raises(ValueError, match="float64 array of 1 values"):
            kernels.scatter_columns(cols, np.arange(4), [np.empty((4, 2))], left, 4)
        with pytest.raises(TypeError, match="column 0 must be"):
            kernels.scatter_columns([np.arange(4)], np.arange(4), [np.empty((4, 1))], left, 4)
