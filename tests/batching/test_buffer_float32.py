"""A shuffle buffer for float32 batches holds float32 rows (gather.buffer_dtype): the
very batches, bit for bit, of the float64 buffer whose gather narrows them (the path
before it: ``gather.NARROW = False``), with the same digests, row ids, dropped rows
and generator state, whatever the chunks (arrays, columns of any numeric type, rows
read into the buffer, narrowing or not), the algorithm (one piece, two halves) and
the values (NaN payloads, signalling NaNs, subnormals, ties, float32 overflow), on
both backends; and the compiled gather of float32 rows, against its NumPy twin."""

from __future__ import annotations

import numpy as np
import pytest
from backends import built, on_backend
from hypothesis import given, settings
from hypothesis import strategies as st

from exactbatch import kernels
from exactbatch.batching import buffer_halves, buffer_whole, gather
from exactbatch.batching.buffer import shuffle_buffer
from exactbatch.batching.output import Output
from exactbatch.order.digest import Tally
from exactbatch.sources.chunks import ChunkRead, WholeRows
from exactbatch.sources.column_chunk import Columns

needs_core = pytest.mark.skipif(not built(), reason="the compiled core is not built")
BACKENDS = ["numpy", pytest.param("compiled", marks=needs_core)]

_TYPES = ["float64", "float64", "float32", "int8", "uint8", "int16", "uint16", "int32", "uint32"]

# float64 values float32 rounds in every way: ties either way, subnormals of both,
# past its range (inf), -0.0, NaN with a payload, a signalling NaN
_EDGES = np.frombuffer(
    np.array(
        [
            0x3FF0000010000000,  # 1 + 2**-24: a tie, to even (down)
            0x3FF0000030000000,  # 1 + 3 * 2**-24: a tie, to even (up)
            0x3FF0000010000001,  # just past a tie: up
            0x0000000000000001,  # the smallest float64 subnormal: 0 as float32
            0x36A0000000000000,  # 2**-149: float32's smallest subnormal
            0x47EFFFFFF0000000,  # float32's largest, rounded up: inf
            0x7FE0000000000000,  # far past float32's range: inf
            0x8000000000000000,  # -0.0
            0x7FF8000000000123,  # a quiet NaN with a payload
            0x7FF0000000000001,  # a signalling NaN
            0xFFF4000000000000,  # a negative signalling NaN with high payload bits
        ],
        dtype=np.uint64,
    ).tobytes(),
    dtype=np.float64,
)


def _table(n, d, l, types, seed):  # noqa: E741
    """Columns of n values, x's d then y's l, column j of type types[j] (float64 ones
    salted with _EDGES), and the float64 rows they are."""
    rng = np.random.default_rng(seed)
    cols = []
    for t in map(np.dtype, types):
        if t.kind == "f":
            with np.errstate(over="ignore"):
                c = (rng.standard_normal(n) * 10.0 ** rng.integers(-40, 40, n)).astype(t)
            if t == np.float64 and n:
                at = rng.integers(0, n, min(n, len(_EDGES)))
                c[at] = _EDGES[: len(at)]
        else:
            info = np.iinfo(t)
            c = rng.integers(info.min, info.max, n, endpoint=True, dtype=t)
        cols.append(c)
    rows = np.stack([c.astype(np.float64) for c in cols], axis=1) if cols else np.empty((n, 0))
    return cols, rows.reshape(n, d + l)


def _f64_only(whole):
    """A read of float64 rows only (a source's open_chunk without ``narrows``)."""

    def read(row, out):
        assert out.dtype == np.float64
        whole.read_rows_into(row, out)

    return read


def _chunks(kinds, cols, rows, d, l, sizes):  # noqa: E741
    """The stream's chunks of ``sizes`` rows, chunk k as ``kinds[k % len(kinds)]``."""
    at = 0
    for k, size in enumerate(sizes):
        lo, hi, kind = at, at + size, kinds[k % len(kinds)]
        whole = WholeRows(rows[lo:hi].copy(), lo)
        if kind == "arrays":
            yield rows[lo:hi, :d].copy(), rows[lo:hi, d:].copy(), lo
        elif kind == "columns":
            yield Columns(cols[:d], size, lo), Columns(cols[d:], size, lo), lo
        elif kind == "held":  # a decoded chunk (Parquet's open_chunk): narrows
            yield ChunkRead(whole.read_rows_into, lo, size, d, l, True, True)
        elif kind == "held64":  # a decoded chunk whose read takes float64 only
            yield ChunkRead(_f64_only(whole), lo, size, d, l, True)
        else:  # rows read from the source into the buffer (ndf_blocks)
            yield ChunkRead(_f64_only(whole), lo, size, d, l)
        at = hi


def _run(make, chunks, seed, narrow, seen=None):
    # (the pure gather from a float64 buffer warns of values past float32's range)
    with pytest.MonkeyPatch.context() as mp, np.errstate(over="ignore", invalid="ignore"):
        mp.setattr(gather, "NARROW", narrow)
        if seen is not None:  # the buffers' dtypes
            real = gather.buffer_arrays

            def spy(*args):
                got = real(*args)
                seen.append(got[0].dtype)
                return got

            mp.setattr(buffer_whole, "buffer_arrays", spy)
            mp.setattr(buffer_halves, "buffer_arrays", spy)
        rng, dropped = np.random.default_rng(seed), Tally()
        groups = [[tuple(batch) for batch in group] for group in make(chunks, rng, dropped)]
    return groups, dropped, rng.bit_generator.state


def _same(a, b, state=True):
    """Two runs' groups (each batch x, y, digest, maybe rows), dropped tallies and final
    generator states (``state``), bit for bit."""
    (ga, da, sa), (gb, db, sb) = a, b
    assert [len(g) for g in ga] == [len(g) for g in gb]  # the same batches a group
    for p, q in zip((x for g in ga for x in g), (x for g in gb for x in g), strict=True):
        assert len(p) == len(q)
        assert p[0].dtype == q[0].dtype == p[1].dtype == q[1].dtype == np.float32
        assert p[0].shape == q[0].shape and p[1].shape == q[1].shape
        assert p[0].tobytes() == q[0].tobytes() and p[1].tobytes() == q[1].tobytes()
        assert p[2] == q[2]
        if len(p) == 4:
            assert p[3].dtype == q[3].dtype and np.array_equal(p[3], q[3])
    assert (da.rows, da.digest) == (db.rows, db.digest)
    assert sa == sb or not state


@pytest.mark.parametrize("name", BACKENDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_float32_buffer_gives_the_float64_buffers_batches_bit_for_bit(name, data):
    n = data.draw(st.integers(0, 900))
    d, l = data.draw(st.integers(0, 5)), data.draw(st.integers(0, 2))  # noqa: E741
    if d + l == 0:
        d = 1
    types = [data.draw(st.sampled_from(_TYPES)) for _ in range(d + l)]
    kinds = data.draw(
        st.lists(
            st.sampled_from(["arrays", "columns", "held", "held64", "read"]), min_size=1, max_size=3
        )
    )
    b = data.draw(st.integers(1, 40))
    size = max(b, data.draw(st.integers(1, 400)))
    sizes, left = [], n
    while left:
        sizes.append(min(left, data.draw(st.integers(1, 120))))
        left -= sizes[-1]
    hint = data.draw(st.sampled_from([None, n, n - 1, n + 1, n + size]))
    ahead = data.draw(st.sampled_from([None, 1, 10]))  # 1: two halves where n > size
    drop_last, with_rows = data.draw(st.booleans()), data.draw(st.booleans())
    seed = data.draw(st.integers(0, 2**32 - 1))
    cols, rows = _table(n, d, l, types, seed)

    def make(chunks, rng, dropped):
        return shuffle_buffer(
            chunks, b, size, rng, drop_last, hint, None, ahead, dropped, np.float32, with_rows
        )

    seen: list[np.dtype] = []
    with on_backend(name):
        want = _run(make, _chunks(kinds, cols, rows, d, l, sizes), seed, False)
        got = _run(make, _chunks(kinds, cols, rows, d, l, sizes), seed, True, seen)
    # (two halves draw a half's permutation ahead, on the reading thread, maybe once
    # past the stream's end: the generator's last state is theirs, not the batches')
    halves = bool(ahead and hint is not None and hint > size and size >= 16 * ahead)
    _same(got, want, state=not halves)
    if n:  # the buffer is float32 unless the first chunk reads float64 rows only
        narrows = kinds[0] in ("arrays", "columns", "held")
        assert seen == [np.dtype(np.float32 if narrows else np.float64)]
        assert sum(len(x[0]) for g in got[0] for x in g) + got[1].rows == n


@pytest.mark.parametrize("name", BACKENDS)
def test_a_float64_or_transformed_loader_keeps_a_float64_buffer(name):
    cols, rows = _table(300, 3, 1, ["float32", "uint8", "int16", "int8"], 4)  # (no NaN)
    for shaped in [np.float64, Output(np.float32, np.int64), Output(np.float32, nan="error")]:
        seen: list[np.dtype] = []

        def make(chunks, rng, dropped, shaped=shaped):
            return shuffle_buffer(chunks, 16, 100, rng, False, 300, None, None, dropped, shaped)

        with on_backend(name):
            _run(make, _chunks(["columns"], cols, rows, 3, 1, [50] * 6), 1, True, seen)
        assert seen == [np.dtype(np.float64)]


@pytest.mark.parametrize("name", BACKENDS)
def test_a_float32_buffer_is_reused_and_a_float64_one_is_not_taken_for_it(name):
    spare: list[tuple[np.ndarray, np.ndarray]] = []
    cols, rows = _table(400, 2, 1, ["float64", "float64", "float64"], 2)
    with on_backend(name):
        for dtype, held in [(np.float64, np.float64), (np.float32, np.float32)] * 2:
            rng = np.random.default_rng(0)
            chunks = _chunks(["arrays"], cols, rows, 2, 1, [100] * 4)
            before = [a.__array_interface__["data"][0] for a, _ in spare]
            for _ in shuffle_buffer(chunks, 10, 200, rng, False, 400, spare, None, None, dtype):
                pass
            ((bw, bh),) = spare
            assert bw.dtype == held
            if before:  # a spare of the other dtype is not reused
                assert bw.__array_interface__["data"][0] != before[0]


@needs_core
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_the_compiled_gather_of_float32_rows_is_numpys_take(data):
    n, r = data.draw(st.integers(1, 300)), data.draw(st.integers(0, 400))
    d, l = data.draw(st.integers(0, 20)), data.draw(st.integers(0, 3))  # noqa: E741
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, (n, d + l + data.draw(st.integers(0, 2))), dtype=np.uint32)
    whole = bits.view(np.float32)  # every bit pattern, NaNs and all: copied as they are
    rows = rng.integers(0, n, r)
    got = []
    for name in ("compiled", "numpy"):
        with on_backend(name):
            gx, gy = kernels.gather(whole[:, :d], whole[:, d : d + l], rows, np.float32)
        assert gx.dtype == gy.dtype == np.float32
        got.append((gx.view(np.uint32).copy(), gy.view(np.uint32).copy()))
    assert np.array_equal(got[0][0], bits[rows, :d]) and np.array_equal(got[1][0], bits[rows, :d])
    assert np.array_equal(got[0][1], bits[rows, d : d + l])
    assert np.array_equal(got[1][1], bits[rows, d : d + l])


@needs_core
def test_the_compiled_gather_of_float32_rows_refuses_wrong_arguments():
    core = kernels._BUILT
    w = np.zeros((4, 3), dtype=np.float32)
    x, y = w[:, :2], w[:, 2:]
    ox, oy = np.empty((2, 2), np.float32), np.empty((2, 1), np.float32)
    with pytest.raises(IndexError, match="row 4 out of range for n=4"):
        core.take_rows32(x, y, np.array([0, 4]), ox, oy)
    with pytest.raises(IndexError, match="row -1"):
        core.take_rows32(x, y, np.array([-1, 0]), ox, oy)
    with pytest.raises(TypeError, match="int64"):
        core.take_rows32(x, y, np.array([0, 1], dtype=np.int32), ox, oy)
    with pytest.raises(TypeError, match="x must be a 2-D float32"):
        core.take_rows32(x.astype(np.float64), y, np.array([0, 1]), ox, oy)
    with pytest.raises(ValueError, match=r"out_x must be a float32 array of \(2, 2\)"):
        core.take_rows32(x, y, np.array([0, 1]), np.empty((2, 2)), oy)
    with pytest.raises(ValueError, match=r"out_y must be a float32 array of \(3, 1\)"):
        core.take_rows32(x, y, np.array([0, 1, 2]), np.empty((3, 2), np.float32), oy)
    with pytest.raises(ValueError, match="same number of rows"):
        core.take_rows32(x, y[:3], np.array([0]), ox[:1], oy[:1])
    with pytest.raises(ValueError, match="side by side"):
        core.take_rows32(w.T.copy()[:, :2].T, y, np.array([0]), ox[:1], oy[:1])
