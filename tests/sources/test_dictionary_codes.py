"""A dictionary-encoded chunk coded as its dictionary, then taken by its indices
(exactbatch.sources.string_keys.take_codes; Vocabulary.encode's string path), on
both backends (the compiled core's ``_core_codes.c`` and the NumPy twin).

Pinned against a plain Python dict vocabulary (``{value: code}``) over the
chunk's values as Arrow decodes them. Laws: each row gets the code of its
value's EQUAL entry whatever the dictionary holds (values unused by the rows,
its order, nulls in it), the index type, the slice; a null row is NaN; a row
whose value is outside the vocabulary is refused naming the column, the value
and its row, while an unused dictionary value outside it is not; a dictionary
equal to the last chunk's reuses its codes, and one that differs never does;
an index outside its dictionary is an error, never a read out of bounds.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from exactbatch import kernels, parquet_source  # noqa: E402
from exactbatch.sources.categorical import Vocabulary  # noqa: E402
from exactbatch.sources.string_keys import StringIndex, string_keys, take_codes  # noqa: E402

VOCAB = ["", "a", "b", "ab", "é", "日本", "a\0", "x" * 40]


def _want(vocabulary: list, values: list) -> np.ndarray:
    table = {v: j for j, v in enumerate(vocabulary)}
    return np.array([np.nan if v is None else table[v] for v in values], dtype=np.float64)


def _coded(vocab: Vocabulary, col) -> np.ndarray:
    out = vocab.encode(col, "chunk")
    assert out.type == pa.float64() and out.null_count == 0  # NaN: missing
    return out.to_numpy(zero_copy_only=False)


def _dict(indices: list, dictionary: list, index_type=None, kind=None):
    """A dictionary array: int32 indices into a string dictionary unless told."""
    return pa.DictionaryArray.from_arrays(
        pa.array(indices, type=index_type or pa.int32()),
        pa.array(dictionary, type=kind or pa.string()),
    )


@pytest.mark.parametrize(
    "index_type",
    [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32()],
)
@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_each_row_gets_its_values_code_whatever_the_index_type(each_backend, index_type, kind):
    dictionary = ["日本", "", "ab", "a"]
    col = _dict([0, 1, None, 3, 2, 2, None, 0], dictionary, index_type, kind)
    vocab = Vocabulary("c", VOCAB)
    np.testing.assert_array_equal(_coded(vocab, col), _want(VOCAB, col.to_pylist()))
    part = col.slice(3, 4)  # (offset into the indices and their validity)
    np.testing.assert_array_equal(_coded(vocab, part), _want(VOCAB, part.to_pylist()))


def test_a_dictionary_holding_values_the_rows_never_use_is_coded(each_backend):
    # "zz" and "q" are in the dictionary but no row points at them: nothing is refused
    col = _dict([1, 3, 1, None], ["zz", "a", "q", "b"])
    np.testing.assert_array_equal(_coded(Vocabulary("c", VOCAB), col), [1, 2, 1, np.nan])


def test_a_row_whose_value_is_outside_the_vocabulary_is_refused_naming_it(each_backend):
    col = _dict([1, 3, 0, 2], ["zz", "a", "q", "b"])  # row 2 points at "zz"
    with pytest.raises(ValueError, match=r"chunk: column 'city' holds 'zz' \(row 12\)"):
        Vocabulary("city", VOCAB).encode(col, "chunk", first_row=10)


def test_a_null_in_the_dictionary_is_missing_never_refused(each_backend):
    col = _dict([0, 1, 2, 1], ["a", None, "b"])
    assert col.to_pylist() == ["a", None, "b", None]
    np.testing.assert_array_equal(_coded(Vocabulary("c", VOCAB), col), [1, np.nan, 2, np.nan])


def test_every_row_null_or_an_empty_chunk(each_backend):
    vocab = Vocabulary("c", VOCAB)
    assert np.isnan(_coded(vocab, _dict([None, None], []))).all()
    assert len(_coded(vocab, _dict([], ["a"]))) == 0
    assert np.isnan(_coded(vocab, pa.array([None, None], type=pa.string()))).all()


@settings(max_examples=30, deadline=None)
@given(
    dictionary=st.lists(st.sampled_from([*VOCAB, "out", "é!"]), unique=True, max_size=10),
    data=st.data(),
)
def test_codes_agree_with_a_dict_on_both_backends(dictionary, data):
    picks = data.draw(st.lists(st.none() | st.integers(0, max(0, len(dictionary) - 1))))
    if not dictionary:
        picks = [None] * len(picks)
    col = _dict(picks, dictionary)
    values = col.to_pylist()
    outside = [i for i, v in enumerate(values) if v is not None and v not in VOCAB]
    seen = {}
    for name in ("compiled", "numpy") if kernels._BUILT is not None else ("numpy",):
        before = kernels.use_backend(name)
        try:
            vocab = Vocabulary("c", VOCAB)
            if outside:
                with pytest.raises(ValueError, match=rf"\(row {outside[0]}\)"):
                    vocab.encode(col, "chunk")
            else:
                seen[name] = _coded(vocab, col)
                np.testing.assert_array_equal(seen[name], _want(VOCAB, values))
        finally:
            kernels.use_backend(before)


def test_an_index_outside_its_dictionary_is_an_error(each_backend):
    table, found = np.array([0.0, 1.0]), np.array([True, True])
    bad = pa.array([0, 2, 1], type=pa.int32())
    with pytest.raises(ValueError, match="outside its dictionary"):
        take_codes(bad, table, found)
    with pytest.raises(ValueError, match="outside its dictionary"):
        take_codes(pa.array([0, -1], type=pa.int8()), table, found)
    # a null row's index is never read, whatever it holds
    valid = pa.array([True, False, True]).buffers()[1]
    masked = pa.Array.from_buffers(pa.int32(), 3, [valid, bad.buffers()[1]])
    codes, first = take_codes(masked, table, found)
    assert first == -1
    np.testing.assert_array_equal(codes.to_numpy(zero_copy_only=False), [0, np.nan, 1])


def test_take_codes_names_the_first_row_not_found(each_backend):
    table, found = np.array([0.0, np.nan, 2.0]), np.array([True, False, True])
    codes, first = take_codes(pa.array([0, 2, None, 1, 1], type=pa.int64()), table, found)
    assert first == 3
    codes, first = take_codes(pa.array([0, 2, None], type=pa.int64()), table, found)
    assert first == -1
    np.testing.assert_array_equal(codes.to_numpy(zero_copy_only=False), [0, 2, np.nan])


# -- the last chunk's dictionary, reused ------------------------------------------------


def test_an_equal_dictionary_reuses_its_codes_and_another_never(each_backend, monkeypatch):
    vocab = Vocabulary("c", VOCAB)
    calls = []
    real = StringIndex.codes
    monkeypatch.setattr(StringIndex, "codes", lambda self, col: calls.append(1) or real(self, col))
    first = _dict([0, 1, 2], ["a", "b", "ab"])
    again = _dict([2, 2, 0], ["a", "b", "ab"])  # an equal dictionary, another object
    moved = _dict([2, 2, 0], ["b", "a", "ab"])  # the same values in another order
    np.testing.assert_array_equal(_coded(vocab, first), [1, 2, 3])
    np.testing.assert_array_equal(_coded(vocab, again), [3, 3, 1])
    assert len(calls) == 1
    np.testing.assert_array_equal(_coded(vocab, moved), [3, 3, 2])
    assert len(calls) == 2
    longer = _dict([3], ["b", "a", "ab", "日本"])  # one more entry
    np.testing.assert_array_equal(_coded(vocab, longer), [5])
    assert len(calls) == 3


def test_a_row_group_read_again_reuses_its_dictionarys_codes(tmp_path, each_backend, monkeypatch):
    rng = np.random.default_rng(5)
    words = [f"v{i:03d}" for i in range(300)]
    values = [None if i % 11 == 0 else words[j] for i, j in enumerate(rng.integers(0, 300, 3000))]
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"w": values, "n": np.arange(3000.0)}), path, row_group_size=500)
    src = parquet_source(path, features=["w"], labels=["n"], categorical=["w"])
    want = _want(src.categories["w"], values)
    calls = []
    real = StringIndex.codes
    monkeypatch.setattr(StringIndex, "codes", lambda self, col: calls.append(1) or real(self, col))

    def epoch():
        return np.concatenate([src.read_chunk(i)[0][:, 0] for i in range(len(src))])

    np.testing.assert_array_equal(epoch(), want)
    assert len(calls) == 6  # six row groups, six dictionaries (each its own order)
    np.testing.assert_array_equal(epoch(), want)
    np.testing.assert_array_equal(src.read_chunk(3)[0][:, 0], want[1500:2000])
    assert len(calls) == 6  # read again: every dictionary's codes kept by its row group
    vocab = src._cols.vocab["w"]
    other = _dict([0, 1], ["v001", "v002"])  # another dictionary at a kept place: found again
    np.testing.assert_array_equal(vocab.encode(other, "here", place=(0, 3)).to_numpy(), [1, 2])
    assert len(calls) == 7


def test_places_hold_at_most_twice_the_vocabulary_and_a_margin(monkeypatch):
    from exactbatch.sources import categorical

    monkeypatch.setattr(categorical, "_PLACES_HOLD", 1)
    vocab = Vocabulary("c", ["a", "b"])  # holds up to 2 * 2 + 1 = 5 dictionary entries
    for place, dictionary in enumerate([["a", "b"], ["b", "a"], ["a", "b", None], ["b"]]):
        vocab.encode(_dict([0], dictionary), "here", place=place)
    assert sorted(vocab._places) == [0, 1, 3] and vocab._held == 5


def test_parquet_row_groups_sharing_a_dictionary_code_as_a_dict_does(tmp_path, each_backend):
    # written from a dictionary column: every row group keeps the one dictionary
    rng = np.random.default_rng(3)
    words = [f"w{i:02d}" for i in range(40)]
    picks = rng.integers(0, 40, 2000)
    values = [None if i % 13 == 0 else words[j] for i, j in enumerate(picks)]
    col = pa.array(values).dictionary_encode()
    pq.write_table(
        pa.table({"w": col, "n": np.arange(2000.0)}), tmp_path / "d.parquet", row_group_size=300
    )
    learned = parquet_source(
        tmp_path / "d.parquet", features=["w"], labels=["n"], categorical=["w"]
    )
    given_ = parquet_source(
        tmp_path / "d.parquet", features=["w"], labels=["n"], categorical={"w": words[::-1]}
    )
    for src, vocabulary in ((learned, sorted(set(words) & set(values))), (given_, words[::-1])):
        got = np.concatenate([src.read_chunk(i)[0][:, 0] for i in range(len(src))])
        np.testing.assert_array_equal(got, _want(vocabulary, values))


# -- the compiled kernels refuse what does not describe a chunk --------------------------


@pytest.mark.skipif(kernels._BUILT is None, reason="the compiled core is not built")
def test_the_compiled_kernels_refuse_inconsistent_buffers():
    c = kernels._BUILT
    offs, data = np.array([0, 2, 1], dtype=np.int32), b"abc"
    with pytest.raises(ValueError, match="offsets"):
        c.string_keys(offs, data, np.empty(2, dtype=np.uint64))  # decreasing
    with pytest.raises(ValueError, match="offsets"):
        c.string_keys(np.array([0, 4], dtype=np.int32), data, np.empty(1, dtype=np.uint64))
    with pytest.raises(TypeError, match="out"):
        c.string_keys(np.array([0, 1], dtype=np.int32), data, np.empty(1))
    ix, table, found = np.array([0, 1]), np.array([0.0, 1.0]), np.ones(2, dtype=bool)
    with pytest.raises(ValueError, match="inconsistent"):
        c.take_codes(ix, None, 0, table, found, np.empty(3))
    with pytest.raises(ValueError, match="inconsistent"):
        c.take_codes(ix, b"\x01", 7, table, found, np.empty(2))  # bits 7, 8: one byte
    with pytest.raises(ValueError, match="inconsistent"):  # float indices
        c.take_codes(np.array([0.0, 1.0]), None, 0, table, found, np.empty(2))
    index = StringIndex.of(["a", "b"])
    keys = string_keys(pa.array(["a", "b"]))
    args = [
        keys,
        np.array([0, 1, 2], dtype=np.int32),
        b"ab",
        index._keys,
        index._codes,
        index._starts,
        int(index._shift),
        index._voffs,
        index._values.buffers()[2],
    ]
    out, hit = np.empty(2), np.empty(2, dtype=bool)
    c.index_codes(*args, out, hit)
    np.testing.assert_array_equal(out, [0, 1])
    broken = index._codes + 5  # a code past the vocabulary
    with pytest.raises(ValueError, match="out of range"):
        c.index_codes(*args[:4], broken, *args[5:], out, hit)
    with pytest.raises(ValueError, match="inconsistent"):
        c.index_codes(*args, np.empty(3), hit)


def test_a_chunked_column_is_coded_chunk_by_chunk_rows_numbered_across(each_backend):
    vocab = Vocabulary("c", VOCAB)
    chunks = [pa.array(["a", None, "b"]), _dict([0, 0], ["ab"]), pa.array([], type=pa.string())]
    col = pa.chunked_array(chunks[:1] + [chunks[1].cast(pa.string())] + chunks[2:])
    out = vocab.encode(col, "chunk")
    assert isinstance(out, pa.Array) and out.type == pa.float64()
    np.testing.assert_array_equal(out.to_numpy(zero_copy_only=False), [1, np.nan, 2, 3, 3])
    bad = pa.chunked_array([pa.array(["a", "b"]), pa.array(["ab", "zz"])])
    with pytest.raises(ValueError, match=r"column 'c' holds 'zz' \(row 8\)"):
        vocab.encode(bad, "chunk", first_row=5)
