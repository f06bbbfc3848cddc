"""Class labels, standardisation and NaN, in the loader (DESIGN.md, "Real data").

Laws: ``label_dtype`` hands out the very labels as integers, or refuses a
batch whose label is not one, naming the row id; ``transform=Standardize``
gives what the transform applied after a plain gather gives (bit for bit in
float64; in float32, the float64 result rounded once), on both backends
alike and from every kind of source; ``nan="error"`` refuses the first batch
holding a NaN, naming its row id and column.
"""

from __future__ import annotations

import json

import backends
import numpy as np
import pytest

from exactbatch import (
    DataLoader,
    Standardize,
    open_ndf,
    open_ndf_dataset,
    save_ndf,
    save_ndf_dataset,
)
from exactbatch.tools.info import info

D, L = 6, 1


def _data(n=300, seed=0, nan=0.02):
    """Features with NaN sprinkled in, and integer class labels (stored as floats)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(3.0, 2.0, (n, D))
    x[rng.random(x.shape) < nan] = np.nan
    y = rng.integers(0, 7, (n, L)).astype(np.float64)
    return x, y


def _stats(x):
    return Standardize((np.nanmean(x, axis=0), np.nanstd(x, axis=0)), nan_fill=0.0)


def _standardized(px, x, fill=0.0):
    """The reference, by NumPy alone from the data (not from the Standardize under test):
    (v - mean) * (1 / sd) per column, NaN -> fill."""
    mean, sd = np.nanmean(x, axis=0), np.nanstd(x, axis=0)
    return np.where(np.isnan(px), fill, (px - mean) * (1.0 / sd))


def _source(kind, x, y, tmp_path):
    if kind == "pair":
        return (x, y)
    tmp_path.mkdir(parents=True, exist_ok=True)
    if kind == "ndf":
        save_ndf(tmp_path / "d.ndf", (x, y))
        return open_ndf(tmp_path / "d.ndf")
    if kind == "dataset":
        parts = [(x[a : a + 110], y[a : a + 110]) for a in range(0, len(x), 110)]
        save_ndf_dataset(tmp_path / "ds", parts)
        return open_ndf_dataset(tmp_path / "ds")
    if kind in ("stream", "elastic"):  # elastic: a list dealt by windows (elastic=True)
        return [(x[a : a + 70], y[a : a + 70]) for a in range(0, len(x), 70)]
    raise AssertionError(kind)


def _kw(kind, x, buffer_size=None) -> dict:
    """The loader settings a kind of source needs beyond the test's own."""
    buffer = {} if buffer_size is None else {"buffer_size": buffer_size}
    if kind == "stream":
        return {"total_size": len(x), **buffer}
    if kind == "elastic":
        return {"elastic": True, **buffer}
    return {}


def _batches(loader):
    return [(xb.copy(), yb.copy()) for xb, yb in loader]


# -- label_dtype ------------------------------------------------------------------------


@pytest.mark.parametrize("label_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("kind", ["pair", "ndf", "dataset", "stream", "elastic"])
def test_class_labels_come_as_the_same_values_in_integers(tmp_path, kind, label_dtype):
    x, y = _data(nan=0.0)
    kw = _kw(kind, x)
    for dtype in (np.float64, np.float32):
        plain = _batches(DataLoader(_source(kind, x, y, tmp_path), 32, dtype=dtype, **kw))
        got = _batches(
            DataLoader(
                _source(kind, x, y, tmp_path), 32, dtype=dtype, label_dtype=label_dtype, **kw
            )
        )
        assert len(got) == len(plain)
        for (px, py), (gx, gy) in zip(plain, got, strict=True):
            assert gx.dtype == dtype and gy.dtype == label_dtype
            np.testing.assert_array_equal(gx, px)
            np.testing.assert_array_equal(gy, py.astype(np.float64))


def test_label_dtype_none_or_the_loaders_dtype_is_the_plain_loader():
    x, y = _data()
    for ld in (None, np.float32):
        loader = DataLoader((x, y), 10, dtype=np.float32, label_dtype=ld)
        assert loader.label_dtype == np.float32
        assert next(iter(loader))[1].dtype == np.float32


@pytest.mark.parametrize(
    ("bad", "row"),
    [(2.5, 41), (np.nan, 7), (np.inf, 99), (2.0**31, 250), (-(2.0**31) - 1, 3)],
    ids=["fraction", "nan", "inf", "above-int32", "below-int32"],
)
@pytest.mark.parametrize("kind", ["pair", "stream", "elastic"])
def test_a_label_that_is_no_int32_is_a_value_error_naming_its_row(tmp_path, kind, bad, row):
    x, y = _data(nan=0.0)
    y[row, 0] = bad
    kw = _kw(kind, x)
    loader = DataLoader(_source(kind, x, y, tmp_path), 32, label_dtype=np.int32, **kw)
    with pytest.raises(ValueError, match=rf"label_dtype=int32: row {row} has label"):
        _batches(loader)


def test_int64_labels_are_exact_beyond_float32_and_refuse_beyond_int64():
    x = np.zeros((4, 1))
    y = np.array([[2.0**40 + 1], [0.0], [-(2.0**52)], [5.0]])
    loader = DataLoader((x, y), 4, shuffle=False, dtype=np.float32, label_dtype=np.int64)
    ((_, yb),) = list(loader)
    assert yb[:, 0].tolist() == [2**40 + 1, 0, -(2**52), 5]
    y[2, 0] = 2.0**63
    with pytest.raises(ValueError, match="row 2 has label"):
        list(DataLoader((x, y), 4, shuffle=False, label_dtype=np.int64))


@pytest.mark.parametrize("bad", [np.float16, np.uint8, np.int16, "complex128"])
def test_another_label_dtype_is_a_value_error_naming_it(bad):
    with pytest.raises(ValueError, match="label_dtype must be None"):
        DataLoader(_data(), 8, label_dtype=bad)
    with pytest.raises(TypeError, match="label_dtype"):
        DataLoader(_data(), 8, label_dtype=object())


def test_next_into_takes_labels_of_label_dtype_and_names_by_otherwise():
    x, y = _data(nan=0.0)
    loader = DataLoader((x, y), 32, label_dtype=np.int64, seed=3)
    ref = _batches(DataLoader((x, y), 32, label_dtype=np.int64, seed=3))
    bx, by = np.empty((32, D)), np.empty((32, L), dtype=np.int64)
    for rx, ry in ref:
        k = loader.next_into(bx, by)
        np.testing.assert_array_equal(bx[:k], rx)
        np.testing.assert_array_equal(by[:k], ry)
    assert loader.next_into(bx, by) == 0
    loader.reset()
    with pytest.raises(TypeError, match="by must have dtype int64"):
        loader.next_into(bx, np.empty((32, L)))
    with pytest.raises(TypeError, match="bx must have dtype float64"):
        loader.next_into(np.empty((32, D), dtype=np.float32), by)


def test_labels_survive_prefetch_and_resume():
    x, y = _data(nan=0.0)
    whole = _batches(DataLoader((x, y), 16, label_dtype=np.int32, prefetch=3, seed=1))
    first = DataLoader((x, y), 16, label_dtype=np.int32, seed=1)
    it = iter(first)
    head = [tuple(a.copy() for a in next(it)) for _ in range(5)]
    later = DataLoader((x, y), 16, label_dtype=np.int32, seed=1, prefetch=2)
    later.load_state_dict(first.state_dict())
    for (wx, wy), (gx, gy) in zip(whole, head + _batches(later), strict=True):
        np.testing.assert_array_equal(gx, wx)
        np.testing.assert_array_equal(gy, wy)
        assert gy.dtype == np.int32


# -- transform ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["pair", "ndf", "dataset", "stream", "elastic"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_the_fused_transform_is_the_transform_after_a_plain_gather(tmp_path, kind, shuffle):
    """float64: bit for bit the reference computed by NumPy from the data; float32: that
    result rounded once (so within half a float32 ulp of it)."""
    x, y = _data()
    st = _stats(x)
    kw = _kw(kind, x, 140)
    plain = _batches(DataLoader(_source(kind, x, y, tmp_path), 32, shuffle=shuffle, **kw))
    for dtype in (np.float64, np.float32):
        loader = DataLoader(
            _source(kind, x, y, tmp_path), 32, shuffle=shuffle, dtype=dtype, transform=st, **kw
        )
        got = _batches(loader)
        assert len(got) == len(plain)
        for (px, py), (gx, gy) in zip(plain, got, strict=True):
            np.testing.assert_array_equal(gx, _standardized(px, x).astype(dtype))
            np.testing.assert_array_equal(gy, py.astype(dtype))
            assert not np.isnan(gx).any()


@pytest.mark.parametrize("kind", ["pair", "ndf", "dataset", "stream", "elastic"])
def test_both_backends_give_bit_identical_transformed_batches(tmp_path, kind):
    if not backends.built():
        pytest.skip("the compiled core is not built")
    x, y = _data(seed=4)
    kw = _kw(kind, x, 140)
    for fill in (None, -3.5):
        st = Standardize((np.nanmean(x, 0), np.nanstd(x, 0)), nan_fill=fill)
        for dtype in (np.float64, np.float32):
            got = {}
            for name in ("compiled", "numpy"):
                with backends.on_backend(name):
                    loader = DataLoader(
                        _source(kind, x, y, tmp_path / name),
                        32,
                        dtype=dtype,
                        transform=st,
                        label_dtype=np.int64,
                        seed=9,
                        **kw,
                    )
                    got[name] = np.concatenate([xb for xb, _ in loader])
            assert got["compiled"].tobytes() == got["numpy"].tobytes()  # NaN too: the bits
            assert np.isnan(got["numpy"]).any() == (fill is None)


def test_transform_with_prefetch_threads_and_resume_gives_the_same_batches():
    x, y = _data(n=1000)
    st = _stats(x)
    kw = {"transform": st, "dtype": np.float32, "seed": 2}
    whole = _batches(DataLoader((x, y), 64, **kw))
    pre = _batches(DataLoader((x, y), 64, prefetch=4, **kw))
    first = DataLoader((x, y), 64, **kw)
    it = iter(first)
    head = [tuple(a.copy() for a in next(it)) for _ in range(3)]
    later = DataLoader((x, y), 64, **kw)
    later.load_state_dict(first.state_dict())
    for batches in (pre, head + _batches(later)):
        for (wx, _), (gx, _) in zip(whole, batches, strict=True):
            assert gx.tobytes() == wx.tobytes()


def test_a_zero_sd_divides_by_one_and_a_column_without_values_gets_mean_0_sd_1():
    x = np.array([[5.0, np.nan, 1.0], [5.0, np.nan, 3.0]])
    table = [
        {"name": "c", "mean": 5.0, "sd": 0.0},
        {"name": "e", "mean": None, "sd": None},
        {"name": "v", "mean": 2.0, "sd": 1.0},
    ]
    st = Standardize(table, nan_fill=7.0)
    np.testing.assert_array_equal(st.scale, [1.0, 1.0, 1.0])
    ((xb, _),) = list(DataLoader(x, 2, shuffle=False, transform=st))
    np.testing.assert_array_equal(xb, [[0.0, 7.0, -1.0], [0.0, 7.0, 1.0]])


def test_nan_fill_is_in_the_standardised_space_and_none_keeps_nan():
    x = np.array([[np.nan, 4.0], [2.0, np.nan]])
    stats = (np.array([2.0, 4.0]), np.array([2.0, 1.0]))
    ((xb, _),) = list(DataLoader(x, 2, shuffle=False, transform=Standardize(stats, nan_fill=0.0)))
    np.testing.assert_array_equal(xb, [[0.0, 0.0], [0.0, 0.0]])  # 0.0: the mean
    ((xb, _),) = list(DataLoader(x, 2, shuffle=False, transform=Standardize(stats)))
    assert np.isnan(xb[0, 0]) and np.isnan(xb[1, 1]) and xb[1, 0] == 0.0


def test_standardize_takes_info_stats_json_and_column_stats_lists(tmp_path):
    x, y = _data(nan=0.0)
    save_ndf(tmp_path / "d.ndf", (x, y))
    report = json.loads(json.dumps(info(tmp_path / "d.ndf", stats=True, bar=False)))
    st = Standardize(report)  # named: every column's statistics, taken by name
    assert st.width == D + L and st.names == (*report["features"], *report["labels"])
    np.testing.assert_allclose(st.mean[:D], x.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(st.sd[:D], x.std(axis=0), rtol=1e-12)
    whole = Standardize({"mean": st.mean, "sd": st.sd})  # by position: d + l is accepted
    assert whole.width == D + L and whole.names is None
    for s in (st, whole):
        loader = DataLoader(open_ndf(tmp_path / "d.ndf"), 50, shuffle=False, transform=s)
        xb = np.concatenate([b for b, _ in loader])
        np.testing.assert_allclose(xb.mean(axis=0), 0.0, atol=1e-12)
        np.testing.assert_allclose(xb.std(axis=0), 1.0, rtol=1e-12)
    same = Standardize({"mean": st.mean, "sd": st.sd, "names": st.names})
    np.testing.assert_array_equal(same.scale, st.scale)
    assert same.names == st.names


@pytest.mark.parametrize(
    ("stats", "error", "match"),
    [
        ("mean sd", TypeError, "stats must be"),
        (([0.0, np.nan], [1.0, 1.0]), ValueError, "column 1's mean"),
        (([0.0, 0.0], [1.0, -1.0]), ValueError, "column 1's sd"),
        (([0.0], [1e-320]), ValueError, "too small"),
        (([0.0, 0.0], [1.0]), ValueError, "2 means but 1 sds"),
        ([{"mean": 1.0}], ValueError, "column 0 has no 'mean' and 'sd'"),
    ],
)
def test_bad_statistics_are_refused_naming_the_column(stats, error, match):
    with pytest.raises(error, match=match):
        Standardize(stats)


@pytest.mark.parametrize(
    ("fill", "error"), [(True, TypeError), ("0", TypeError), (np.nan, ValueError)]
)
def test_a_bad_nan_fill_is_refused(fill, error):
    with pytest.raises(error, match="nan_fill"):
        Standardize(([0.0], [1.0]), nan_fill=fill)


def test_statistics_of_the_wrong_width_name_transform_at_construction_or_first_batch():
    x, y = _data()
    st = Standardize((np.zeros(D - 1), np.ones(D - 1)))
    with pytest.raises(ValueError, match=r"transform: .* 5 columns.* d = 6"):
        DataLoader((x, y), 16, transform=st)
    stream = [(x[:100], y[:100]), (x[100:], y[100:])]
    loader = DataLoader(stream, 16, transform=st, total_size=len(x))
    with pytest.raises(ValueError, match="transform: "):
        next(iter(loader))
    with pytest.raises(TypeError, match="transform must be an exactbatch.Standardize"):
        DataLoader((x, y), 16, transform=(np.zeros(D), np.ones(D)))


@pytest.mark.parametrize("l", [1, 2])
def test_statistics_neither_d_nor_d_plus_l_wide_are_refused(l):  # noqa: E741
    """Only d (the features') or d + l (features then labels) columns of statistics: wider
    ones are refused as narrower ones are (a loader never takes the first d of more)."""
    x, y = np.zeros((40, D)), np.zeros((40, l))
    for width in range(1, 2 * D + 3):
        st = Standardize((np.zeros(width), np.ones(width)))
        if width in (D, D + l):
            DataLoader((x, y), 8, transform=st)
            continue
        with pytest.raises(ValueError, match=rf"transform: .* {width} columns.* d = {D}"):
            DataLoader((x, y), 8, transform=st)


def test_standardize_called_on_rows_is_the_loaders_transform():
    x, _ = _data()
    st = _stats(x)
    out = st(x[:5])
    np.testing.assert_array_equal(out, np.where(np.isnan(x[:5]), 0.0, (x[:5] - st.mean) * st.scale))
    np.testing.assert_allclose(st(x[:5, :2]), out[:, :2])
    with pytest.raises(ValueError, match="at most 6 columns"):
        st(np.zeros((2, 7)))


# -- nan="error" ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["pair", "ndf", "dataset", "stream", "elastic"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_nan_error_names_the_row_id_and_column(tmp_path, kind, shuffle, each_backend):
    x, y = _data(nan=0.0)
    x[123, 4] = np.nan
    kw = _kw(kind, x, 140)
    for transform in (None, Standardize((np.zeros(D), np.ones(D)))):
        loader = DataLoader(
            _source(kind, x, y, tmp_path),
            16,
            shuffle=shuffle,
            nan="error",
            transform=transform,
            **kw,
        )
        with pytest.raises(ValueError, match=r"nan='error': row 123 has NaN in feature column 4"):
            _batches(loader)


def test_nan_error_names_a_label_column_too_and_keep_lets_nan_through():
    x, y = _data(nan=0.0)
    y[55, 0] = np.nan
    with pytest.raises(ValueError, match="row 55 has NaN in label column 0"):
        _batches(DataLoader((x, y), 16, nan="error"))
    assert len(_batches(DataLoader((x, y), 16))) == 19


def test_a_batch_refused_for_nan_is_read_again_by_a_retry():
    """The refusal is a read error: the cursor stays, the next call reads that batch."""
    x, y = _data(nan=0.0)
    x[5, 0] = np.nan
    loader = DataLoader((x, y), 16, shuffle=False, nan="error")
    bx, by = np.empty((16, D)), np.empty((16, L))
    for _ in range(2):
        with pytest.raises(ValueError, match="row 5"):
            loader.next_into(bx, by)
    assert loader.state_dict()["batches_done"] == 0


def test_nan_is_keep_or_error_and_error_with_a_fill_is_refused():
    x, y = _data()
    with pytest.raises(ValueError, match="nan must be 'keep' or 'error'"):
        DataLoader((x, y), 8, nan="raise")
    with pytest.raises(ValueError, match="nan_fill would never apply"):
        DataLoader((x, y), 8, nan="error", transform=_stats(x))


def test_a_reader_that_does_not_fuse_gets_the_same_batches_after_its_read():
    """A RowSource known only by the protocol (no ``fuses``): rows read as float64, then
    the same kernel; labels, the NaN check and the widths check as everywhere."""
    from doubles import RowsDouble

    x, y = _data()
    st = _stats(x)
    for dtype in (np.float64, np.float32):
        kw = {"dtype": dtype, "transform": st, "label_dtype": np.int32, "seed": 5}
        want = _batches(DataLoader((x, y), 32, **kw))
        got = _batches(DataLoader(RowsDouble(x, y), 32, **kw))
        for (wx, wy), (gx, gy) in zip(want, got, strict=True):
            assert gx.tobytes() == wx.tobytes() and gy.tobytes() == wy.tobytes()
        plain = _batches(DataLoader(RowsDouble(x, y), 32, dtype=dtype, label_dtype=np.int64))
        assert plain[0][0].dtype == dtype and plain[0][1].dtype == np.int64
    x, y = _data(nan=0.0)
    x[77, 2] = np.nan
    with pytest.raises(ValueError, match="row 77 has NaN in feature column 2"):
        _batches(DataLoader(RowsDouble(x, y), 32, nan="error"))
    with pytest.raises(ValueError, match="transform: "):
        DataLoader(RowsDouble(x, y), 32, transform=Standardize(([0.0], [1.0])))


def test_a_dataset_at_a_url_gets_the_transform_after_its_ranged_reads(s3_server):
    x, y = _data()
    path = f"s3://{s3_server.bucket}/real-data/ds"
    parts = [(x[a : a + 110], y[a : a + 110]) for a in range(0, len(x), 110)]
    save_ndf_dataset(path, parts, storage_options=s3_server.so)
    st = _stats(x)
    for shuffle in (True, False):
        kw = {"shuffle": shuffle, "transform": st, "label_dtype": np.int64, "seed": 2}
        want = _batches(DataLoader((x, y), 32, **kw))
        with open_ndf_dataset(path, storage_options=s3_server.so) as ds:
            got = _batches(DataLoader(ds, 32, **kw))
        for (wx, wy), (gx, gy) in zip(want, got, strict=True):
            assert gx.tobytes() == wx.tobytes()
            np.testing.assert_array_equal(gy, wy)


# -- the options together: row ids, subsets, class labels, the transform, nan='error' --------


COMPOSED = [
    (kind, shuffle, subset)
    for kind in ("memory", "ndf", "chunks", "blocks")
    for shuffle in (True, False)
    for subset in ((False, True) if kind in ("memory", "ndf") else (False,))  # rows=: random access
]


@pytest.mark.parametrize(("kind", "shuffle", "subset"), COMPOSED)
def test_row_ids_subsets_labels_and_the_transform_compose(tmp_path, kind, shuffle, subset):
    """Every batch's features are the transform of its rows' (by the ids it carries), its
    labels their integers, and the epoch's ids every row (of the subset) once: the
    options built apart meet in the same gathers and re-batching."""
    from exactbatch import ndf_blocks, open_ndf, save_ndf

    stream = kind in ("chunks", "blocks")
    rng = np.random.default_rng(0)
    n = 1000
    x = rng.normal(3, 2, (n, 3))
    y = rng.integers(0, 4, (n, 1)).astype(np.float64)
    mean, sd = x.mean(0), x.std(0)
    save_ndf(tmp_path / "a.ndf", (x, y))
    source = {
        "memory": lambda: (x, y),
        "ndf": lambda: open_ndf(tmp_path / "a.ndf"),
        "chunks": lambda: [(x[i : i + 100], y[i : i + 100]) for i in range(0, n, 100)],
        "blocks": lambda: ndf_blocks(open_ndf(tmp_path / "a.ndf"), 100),
    }[kind]()
    ids = np.arange(0, n, 3)[::-1] if subset else None
    kw = {"buffer_size": 300, "total_size": n} if stream else {"rows": ids}
    loader = DataLoader(
        source,
        64,
        shuffle=shuffle,
        with_rows=True,
        label_dtype=np.int64,
        transform=Standardize((mean, sd)),
        nan="error",
        **kw,
    )
    seen = []
    for xb, yb, rows in loader:
        np.testing.assert_allclose(xb, (x[rows] - mean) / sd, rtol=1e-12, atol=1e-12)
        assert yb.dtype == np.int64 and np.array_equal(yb[:, 0], y[rows, 0].astype(np.int64))
        seen.append(rows)
    want = np.arange(n) if ids is None else np.sort(ids)
    assert np.array_equal(np.sort(np.concatenate(seen)), want)
