"""Array-likes as random-access sources (DESIGN.md, "Exactness across every combination").

Anything NumPy views as a 2-D (or 1-D, for labels) real array - a CPU torch
tensor, a pandas or polars DataFrame of numeric columns, a Series as labels -
is a random-access source exactly like ``np.asarray`` of it: the same batches
for the same settings, alone or inside an ``(x, y)`` pair, with no counting
pass. A list stays a sequence of chunks.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
from helpers import make_data

from exactbatch import DataLoader, Dataset

torch = pytest.importorskip("torch")
pd = pytest.importorskip("pandas")

N, D = 53, 3
X, Y = make_data(N, D, 1)  # x[:, 0] is the row id
SETTINGS = [
    {"shuffle": True, "seed": 7},
    {"shuffle": False},
    {"shuffle": True, "seed": 1, "drop_last": True, "num_shards": 3, "shard_index": 2},
]


def epochs(source, batch_size=8, n_epochs=2, **kw):
    """Every batch of ``n_epochs`` epochs, copied; no warning allowed (no counting pass)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = DataLoader(source, batch_size, **kw)
        return [(xb.copy(), yb.copy()) for _ in range(n_epochs) for xb, yb in loader]


def assert_same(got, want):
    assert len(got) == len(want)
    for (gx, gy), (wx, wy) in zip(got, want, strict=True):
        np.testing.assert_array_equal(gx, wx)
        np.testing.assert_array_equal(gy, wy)


def _polars():
    return pytest.importorskip("polars")


ALONE = {
    "torch-float64": lambda x: torch.from_numpy(x.copy()),
    "torch-float32": lambda x: torch.from_numpy(x.astype(np.float32)),
    "torch-int64": lambda x: torch.from_numpy(x.astype(np.int64)),
    "torch-requires-grad": lambda x: torch.tensor(x, requires_grad=True),
    "torch-transposed-view": lambda x: torch.from_numpy(np.asfortranarray(x)).T.T,
    "pandas": lambda x: pd.DataFrame(x, columns=[f"c{j}" for j in range(x.shape[1])]),
    "polars": lambda x: _polars().DataFrame(x, schema=[f"c{j}" for j in range(x.shape[1])]),
}


@pytest.mark.parametrize("settings", SETTINGS, ids=["shuffled", "in-order", "shard-drop-last"])
@pytest.mark.parametrize("kind", list(ALONE))
def test_an_array_like_alone_gives_the_batches_of_its_numpy_array(kind, settings):
    """DataLoader(a) == DataLoader(np.asarray(a)) batch for batch, for every kind and setting."""
    a = ALONE[kind](X)
    want = epochs(np.asarray(a.detach() if kind == "torch-requires-grad" else a), **settings)
    assert_same(epochs(a, **settings), want)
    assert len(DataLoader(a, 8, **settings)) == len(DataLoader(X, 8, **settings))


LABELS = {
    "numpy-1d": lambda y: y[:, 0],
    "torch-1d": lambda y: torch.from_numpy(y[:, 0].copy()),
    "torch-2d": lambda y: torch.from_numpy(y.copy()),
    "pandas-series": lambda y: pd.Series(y[:, 0], name="target"),
    "pandas-frame": lambda y: pd.DataFrame({"target": y[:, 0]}),
    "polars-series": lambda y: _polars().Series("target", y[:, 0]),
}


@pytest.mark.parametrize("y_kind", list(LABELS))
@pytest.mark.parametrize("x_kind", ["torch-float64", "pandas", "polars"])
def test_a_pair_of_array_likes_gives_the_batches_of_the_numpy_pair(x_kind, y_kind):
    """(x, y) of tensors, DataFrames and Series == the NumPy pair, batch for batch."""
    source = (ALONE[x_kind](X), LABELS[y_kind](Y))
    assert_same(epochs(source, seed=3), epochs((X, Y), seed=3))
    ds = Dataset(*source)
    np.testing.assert_array_equal(ds.x, X)
    np.testing.assert_array_equal(ds.y, Y)


def test_a_dataframe_of_mixed_bool_int_and_float_columns_converts_column_by_column():
    """np.asarray of such a pandas frame is an object array; each column converts on its own."""
    df = pd.DataFrame({"n": [3, 1, 2], "flag": [True, False, True], "v": [0.5, 1.5, -2.0]})
    assert np.asarray(df).dtype == object  # why the frame is read by columns
    want = np.array([[3, 1, 0.5], [1, 0, 1.5], [2, 1, -2.0]])
    np.testing.assert_array_equal(Dataset(df).x, want)
    assert_same(epochs(df, batch_size=2), epochs(want, batch_size=2))


def test_a_dataframe_with_non_numeric_columns_is_a_type_error_naming_them():
    """String and datetime columns are refused, each named; numeric ones are not named."""
    df = pd.DataFrame(
        {
            "n": [1, 2],
            "city": ["Oslo", "Lima"],
            "day": pd.to_datetime(["2020-01-01", "2021-01-01"]),
        }
    )
    with pytest.raises(TypeError, match="non-numeric") as info:
        DataLoader(df, 1)
    msg = str(info.value)
    assert "'city'" in msg and "'day'" in msg and "'n'" not in msg
    with pytest.raises(TypeError, match="'city'"):
        Dataset(X[:2], df)  # as labels too
    with pytest.raises(TypeError) as info:  # each column named with its own dtype
        DataLoader(_polars().DataFrame({"n": [1, 2], "city": ["Oslo", "Lima"], "b": ["", ""]}), 1)
    assert str(info.value) == (
        "x is a DataFrame with non-numeric column(s) 'city' (String), 'b' (String); every "
        "column must hold real numbers (bool, int or float): select or encode them first"
    )


def test_a_tensor_off_the_cpu_is_a_type_error_asking_for_cpu():
    """A tensor on another device (the meta device stands in for a GPU) is refused."""
    t = torch.zeros((4, 2), device="meta")
    with pytest.raises(TypeError, match=r"\.cpu\(\)"):
        DataLoader(t, 2)
    with pytest.raises(TypeError, match=r"y is a torch tensor on meta"):
        Dataset(np.zeros((4, 2)), t[:, 0])


def test_a_tensor_numpy_cannot_read_is_a_type_error_naming_the_argument():
    """A bfloat16 tensor (no NumPy dtype) is a TypeError naming x, not torch's own error."""
    with pytest.raises(TypeError, match="^x cannot be read as a NumPy array"):
        DataLoader(torch.zeros((4, 2), dtype=torch.bfloat16), 2)


def test_a_float64_tensor_is_used_without_a_copy():
    """Like a float64 C-contiguous array: a CPU float64 tensor's memory is shared."""
    t = torch.from_numpy(X.copy())
    ds = Dataset(t)
    assert np.shares_memory(ds.x, t.numpy())


def test_lists_stay_streams():
    """A list is a sequence of chunks, never an array: a list of tensors is 3 chunks, and a
    2-D list of floats a stream of 1-row chunks (its order comes from the shuffle buffer)."""
    chunks = [torch.from_numpy(X[i : i + 20].copy()) for i in range(0, N, 20)]
    loader = DataLoader(chunks, 8, shuffle=False, total_size=N)
    np.testing.assert_array_equal(np.concatenate([xb for xb, _ in loader]), X)
    rows = X.tolist()
    with pytest.warns(UserWarning, match="counting pass"):
        loader = DataLoader(rows, 8, seed=0)  # total_size="auto": a stream counts its rows
    got = np.concatenate([xb for xb, _ in loader])
    assert sorted(got[:, 0].tolist()) == list(range(N))


def test_a_stream_of_dataframe_chunks_reads_them_as_arrays():
    """Chunks may be array-likes too: pandas frames of mixed numeric columns, as in
    pd.read_csv(..., chunksize=...); a non-numeric chunk names its position and column."""
    frames = [pd.DataFrame({"a": [i, i + 1], "b": [True, False]}) for i in (0, 2)]
    loader = DataLoader(frames, 3, shuffle=False, total_size=4)
    got = np.concatenate([xb for xb, _ in loader])
    np.testing.assert_array_equal(got, [[0, 1], [1, 0], [2, 1], [3, 0]])
    bad = [frames[0], pd.DataFrame({"a": [1.0], "s": ["x"]})]
    with pytest.raises(TypeError, match=r"chunk 1: .*'s'"):
        list(DataLoader(bad, 3, shuffle=False, total_size=3))


def test_no_optional_library_is_imported_by_exactbatch():
    """Duck typing only: importing exactbatch and reading an array imports none of them."""
    import subprocess

    code = (
        "import sys, numpy as np, exactbatch\n"
        "list(exactbatch.DataLoader(np.zeros((4, 2)), 2))\n"
        "print([m for m in ('torch', 'pandas', 'polars') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
