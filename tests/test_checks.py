"""Int and flag arguments across the public surface (DESIGN.md, "Arguments").

Int parameters take Python and NumPy integers, never a bool, a float (even
3.0) or a string; flags take ``bool`` and ``np.bool_`` only, so
``shuffle="False"`` is a TypeError rather than a true flag. One helper module
(exactbatch.checks) words every refusal alike: the argument and the value.
"""

from __future__ import annotations

import numpy as np
import pytest

from exactbatch import DataLoader, ndf_blocks, open_ndf, save_ndf
from exactbatch.checks import INT_MAX, check_dtype, check_flag, check_int
from exactbatch.order import check_shard

INTS = [3, np.int64(3), np.int32(3), np.uint8(3)]
NOT_INTS = [True, np.bool_(True), 3.0, np.float64(3.0), "3", None, [3]]
FLAGS = [True, False, np.bool_(True), np.bool_(False)]
NOT_FLAGS = ["False", "True", 0, 1, np.int64(1), None, 1.0]


@pytest.mark.parametrize("value", INTS, ids=repr)
def test_check_int_takes_python_and_numpy_integers_as_a_python_int(value):
    got = check_int("k", value, 1)
    assert got == 3 and type(got) is int


@pytest.mark.parametrize("value", NOT_INTS, ids=repr)
def test_check_int_refuses_bools_floats_and_strings_naming_the_argument(value):
    with pytest.raises(TypeError) as info:
        check_int("block_rows", value, 1)
    assert str(info.value) == f"block_rows must be an int; got {value!r}"


def test_check_int_below_the_minimum_is_a_value_error_naming_argument_and_value():
    with pytest.raises(ValueError) as info:
        check_int("seed", np.int64(-1), 0)
    assert str(info.value) == "seed must be >= 0; got seed=-1"
    assert check_int("i", -5) == -5  # no minimum: the kind only


def test_check_int_above_the_maximum_is_a_value_error_naming_the_limit():
    """Unless told, the ceiling is INT_MAX (2**63 - 1, written so); ``maximum=`` sets
    another, inclusive; ``maximum=None`` none at all (a seed)."""
    assert INT_MAX == 2**63 - 1
    assert check_int("n", INT_MAX) == INT_MAX
    assert check_int("n", np.uint64(INT_MAX)) == INT_MAX
    with pytest.raises(ValueError) as info:
        check_int("n", INT_MAX + 1, 0)
    assert str(info.value) == f"n must be <= 2**63 - 1; got n={INT_MAX + 1}"
    assert check_int("k", 10, 1, maximum=10) == 10
    with pytest.raises(ValueError) as info:
        check_int("k", np.int64(11), 1, maximum=10)
    assert str(info.value) == "k must be <= 10; got k=11"
    assert check_int("seed", 2**100, 0, maximum=None) == 2**100
    assert check_int("k", None, 1, optional=True, maximum=0) is None


def test_check_int_optional_lets_none_through_only():
    assert check_int("buffer_size", None, 1, optional=True) is None
    with pytest.raises(ValueError, match="buffer_size must be >= 1"):
        check_int("buffer_size", 0, 1, optional=True)
    with pytest.raises(TypeError, match="buffer_size must be an int"):
        check_int("buffer_size", None, 1)


def test_check_dtype_takes_float64_and_float32_in_any_spelling_and_nothing_else():
    """The batches' dtype (the loader's ``dtype=``): float64 or float32, as a NumPy dtype;
    another dtype is a ValueError, what is no dtype a TypeError, each naming it."""
    for spelling in (np.float32, "float32", "f4", np.dtype("<f4")):
        assert check_dtype(spelling) == np.dtype(np.float32)
    assert check_dtype(float) == np.dtype(np.float64)
    with pytest.raises(ValueError) as info:
        check_dtype(np.float16)
    assert str(info.value) == "dtype must be np.float64 or np.float32; got float16"
    with pytest.raises(TypeError, match="dtype must be np.float64 or np.float32; got 'nope'"):
        check_dtype("nope")


@pytest.mark.parametrize("value", FLAGS, ids=repr)
def test_check_flag_takes_bool_and_numpy_bool_as_a_python_bool(value):
    got = check_flag("shuffle", value)
    assert got == bool(value) and type(got) is bool


@pytest.mark.parametrize("value", NOT_FLAGS, ids=repr)
def test_check_flag_refuses_strings_and_numbers_naming_the_argument(value):
    with pytest.raises(TypeError) as info:
        check_flag("shuffle", value)
    assert str(info.value) == f"shuffle must be a bool; got {value!r}"


# -- call sites -------------------------------------------------------------------------------


@pytest.fixture
def ndf(tmp_path):
    x = np.arange(40.0).reshape(20, 2)
    save_ndf(tmp_path / "c.ndf", (x, None))
    with open_ndf(tmp_path / "c.ndf") as f:
        yield f


def test_ndf_blocks_block_rows(ndf):
    """A NumPy int is a block size; a bool, a float or a string is a TypeError."""
    assert ndf_blocks(ndf, np.int64(8)).block_rows == 8
    assert len(ndf_blocks(ndf, np.int64(8))) == 3
    for bad in (True, 8.0, "8"):
        with pytest.raises(TypeError, match="block_rows must be an int"):
            ndf_blocks(ndf, bad)
    with pytest.raises(ValueError, match="block_rows must be >= 1"):
        ndf_blocks(ndf, np.int64(0))


def test_ndf_read_row_and_shards_take_numpy_ints(ndf):
    assert ndf.read_row(np.int64(3))[0].tolist() == [6.0, 7.0]
    with pytest.raises(TypeError, match="row index must be an int"):
        ndf.read_row(3.0)
    check_shard(np.int64(2), np.int32(1))
    with pytest.raises(TypeError, match="shard_index must be an int; got True"):
        check_shard(2, True)


def test_as_torch_pin_memory_is_a_flag():
    pytest.importorskip("torch")
    from exactbatch.torch import as_torch

    loader = DataLoader(np.zeros((4, 2)), 2)
    assert as_torch(loader, pin_memory=np.bool_(False)).pin_memory is False
    with pytest.raises(TypeError, match="pin_memory must be a bool; got 'False'"):
        as_torch(loader, pin_memory="False")


@pytest.mark.parametrize(
    ("tool", "kwargs", "message"),
    [
        ("convert", {"dst": "o.ndf", "force": "False"}, "force must be a bool; got 'False'"),
        ("convert", {"dst": "o.parquet", "row_group_rows": 3.0}, "row_group_rows must be an int"),
        ("shuffle_file", {"dst": "s.ndf", "seed": True, "memory": 1 << 20}, "seed must be an int"),
        ("shuffle_file", {"dst": "s.ndf", "seed": 0, "memory": "1GB"}, "memory must be an int"),
        ("bench", {"batch_sizes": [64, 8.0]}, r"batch_sizes\[1\] must be an int; got 8.0"),
        ("bench", {"shuffle": "False"}, "shuffle must be a bool"),
        ("mixing", {"batch_size": 4, "shuffle_chunks": "no"}, "shuffle_chunks must be a bool"),
        ("mixing", {"batch_size": 4, "max_batches": 2.0}, "max_batches must be an int"),
        ("mixing", {"batch_size": 4, "replicates": 99.0}, "replicates must be an int"),
    ],
)
def test_the_tools_check_their_python_level_arguments(ndf, tmp_path, tool, kwargs, message):
    """Called from Python (not through argparse), the tools refuse a wrong kind at once."""
    from exactbatch.tools import bench, convert, mixing, shuffle

    fn = {
        "convert": convert.convert,
        "shuffle_file": shuffle.shuffle_file,
        "bench": bench.bench,
        "mixing": mixing.mixing,
    }[tool]
    if "dst" in kwargs:
        kwargs = {**kwargs, "dst": tmp_path / kwargs["dst"]}
    with pytest.raises(TypeError, match=message):
        fn(ndf.path, **kwargs)
    assert not (tmp_path / "o.ndf").exists() and not (tmp_path / "s.ndf").exists()


def test_the_tools_take_numpy_ints(ndf, tmp_path):
    """np.int64 and np.bool_ arguments work where ints and flags are asked for."""
    from exactbatch.tools.shuffle import shuffle_file

    out = shuffle_file(
        ndf.path,
        tmp_path / "s.ndf",
        seed=np.int64(1),
        memory=np.int64(1 << 20),
        force=np.bool_(False),
        bar=np.bool_(False),
    )
    assert out["seed"] == 1
    with open_ndf(tmp_path / "s.ndf") as f:
        assert sorted(f.read_rows(np.arange(20))[0][:, 0].tolist()) == list(range(0, 40, 2))
