"""A plain (not dictionary-encoded) string chunk coded row by row against a vocabulary
of strings (StringIndex.coded; Vocabulary.encode's string path, an Arrow stream's
batches), on both backends (the compiled core's ``_core_codes.c`` and the NumPy twin).

Pinned against a plain Python dict vocabulary (``{value: code}``) and against the
same chunk dictionary-encoded. Laws: each row gets the code of its EQUAL entry,
bit for bit the dictionary path's, whatever the array (string or large_string,
sliced, nulls, a null slot whose bytes spell a value); no dictionary is made
(Arrow's ``dictionary_encode`` is never called); a row outside the vocabulary is
refused naming the column, the value and its row exactly as the dictionary path
does, a null never; an Arrow stream of plain strings codes as the same stream of
dictionary strings, with a vocabulary given (a list, a tuple or a NumPy array) or
learned; the compiled key, which reads eight bytes a word, is the documented hash for
every length, whatever follows a string in its buffer.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import reference_string_key
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pc = pytest.importorskip("pyarrow.compute")

from exactbatch import arrow_source  # noqa: E402
from exactbatch.sources.categorical import Vocabulary, check_categorical  # noqa: E402
from exactbatch.sources.string_keys import StringIndex, string_keys  # noqa: E402

VOCAB = ["", "a", "b", "ab", "é", "日本", "a\0", "x" * 40, "city0000001", "sixteen_bytes_16"]


def _want(values: list) -> np.ndarray:
    table = {v: j for j, v in enumerate(VOCAB)}
    return np.array([np.nan if v is None else table[v] for v in values], dtype=np.float64)


def _coded(vocab: Vocabulary, col, first_row: int = 0) -> np.ndarray:
    out = vocab.encode(col, "chunk", first_row)
    assert out.type == pa.float64() and out.null_count == 0  # NaN: missing
    return out.to_numpy(zero_copy_only=False)


@pytest.fixture
def no_dictionary(monkeypatch):
    """Arrow's dictionary_encode refused: a plain chunk must be coded without it."""

    def refused(*args, **kwargs):
        raise AssertionError("dictionary_encode called on a plain chunk")

    monkeypatch.setattr(pc, "dictionary_encode", refused)


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_each_row_gets_its_equal_entrys_code_with_no_dictionary(each_backend, kind, no_dictionary):
    values = ["b", None, "日本", "", "a\0", "x" * 40, "sixteen_bytes_16", None, "a", "b"]
    col = pa.array(values, type=kind)
    np.testing.assert_array_equal(_coded(Vocabulary("c", VOCAB), col), _want(values))
    sliced = col.slice(2, 5)  # an offset into the buffers
    np.testing.assert_array_equal(_coded(Vocabulary("c", VOCAB), sliced), _want(values[2:7]))


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_plain_codes_are_the_dictionary_paths_bit_for_bit(each_backend, kind):
    values = [
        VOCAB[i] if i < len(VOCAB) else None for i in np.random.default_rng(3).integers(0, 12, 500)
    ]
    plain = pa.array(values, type=kind)
    got = _coded(Vocabulary("c", VOCAB), plain)
    via = _coded(Vocabulary("c", VOCAB), pc.dictionary_encode(plain))
    assert got.tobytes() == via.tobytes()  # the same bits, NaN included
    np.testing.assert_array_equal(got, _want(values))


def test_a_row_outside_the_vocabulary_is_refused_as_the_dictionary_path_does(each_backend):
    col = pa.array(["a", None, "b", "zz", "q"])
    said = []
    for chunk in (col, pc.dictionary_encode(col)):
        with pytest.raises(ValueError) as e:
            Vocabulary("city", VOCAB).encode(chunk, "chunk", first_row=10)
        said.append(str(e.value))
    assert said[0] == said[1]
    assert said[0].startswith("chunk: column 'city' holds 'zz' (row 13), which is not in its")


def test_a_null_is_missing_never_refused_whatever_its_bytes(each_backend, no_dictionary):
    plain = pa.array(["zz", "a", "zz"])  # the null slots' bytes spell a value outside
    validity = pa.array([False, True, False]).buffers()[1]
    masked = pa.Array.from_buffers(pa.string(), 3, [validity, *plain.buffers()[1:]])
    assert masked.to_pylist() == [None, "a", None]
    np.testing.assert_array_equal(_coded(Vocabulary("c", VOCAB), masked), [np.nan, 1, np.nan])
    spelled = pa.Array.from_buffers(pa.string(), 2, [validity, *pa.array(["a", "b"]).buffers()[1:]])
    np.testing.assert_array_equal(_coded(Vocabulary("c", VOCAB), spelled), [np.nan, 2])


def test_every_row_null_an_empty_chunk_and_an_empty_vocabulary(each_backend, no_dictionary):
    vocab = Vocabulary("c", VOCAB)
    assert np.isnan(_coded(vocab, pa.array([None, None], type=pa.string()))).all()
    assert len(_coded(vocab, pa.array([], type=pa.string()))) == 0
    index = StringIndex.of([])
    codes, first = index.coded(pa.array(["a", None]))
    assert np.isnan(codes.to_numpy(zero_copy_only=False)).all() and first == 0
    codes, first = index.coded(pa.array([None], type=pa.string()))
    assert first == -1


@settings(max_examples=30, deadline=None)
@given(
    vocabulary=st.lists(st.text(max_size=20), min_size=1, max_size=30, unique=True),
    data=st.data(),
)
def test_plain_codes_agree_with_a_dict_on_both_backends(vocabulary, data):
    import backends

    pick = st.one_of(st.none(), st.sampled_from(vocabulary))
    values = data.draw(st.lists(pick, max_size=60))
    table = {v: j for j, v in enumerate(vocabulary)}
    want = np.array([np.nan if v is None else table[v] for v in values], dtype=np.float64)
    for backend in ("compiled", "numpy") if backends.built() else ("numpy",):
        with backends.on_backend(backend):
            out = Vocabulary("c", vocabulary).encode(pa.array(values, type=pa.string()), "c")
            np.testing.assert_array_equal(out.to_numpy(zero_copy_only=False), want)


def test_the_key_is_the_documented_hash_for_every_length(each_backend):
    # eight bytes a word in the compiled key: every length around a word's edges
    values = [
        "".join(chr(0x21 + (7 * i + j) % 200) for j in range(n)) for i, n in enumerate(range(41))
    ]
    values += ["\xff" * 17, "é" * 9]
    for order in (values, values[::-1]):
        arr = pa.array(order)
        assert string_keys(arr).tolist() == [reference_string_key(v) for v in order]
        # one string alone: others' bytes after it (a last part word read whole, masked),
        # or none (the buffer's last: a byte at a time)
        for k, value in enumerate(order):
            assert string_keys(arr.slice(k, 1)).tolist() == [reference_string_key(value)]


def test_a_vocabulary_given_as_a_list_or_an_array_codes_alike(each_backend, no_dictionary):
    # (a fixed-width NumPy string array drops trailing NULs: it is given no "a\0")
    short = VOCAB[:6]
    cases = [(VOCAB, VOCAB), (tuple(VOCAB), VOCAB), (np.array(VOCAB, dtype=object), VOCAB)]
    for as_given, vocabulary in [*cases, (np.array(short), short)]:
        vocab = check_categorical({"c": as_given}, "w")["c"]
        assert vocab == vocabulary and {type(v) for v in vocab} == {str}
        values = [*vocabulary[::-1], None, vocabulary[1]]
        got = _coded(Vocabulary("c", vocab), pa.array(values))
        np.testing.assert_array_equal(got, _want(values))


# -- an Arrow stream of plain strings ------------------------------------------------------


def _stream(cities: list, dictionary: bool):
    col = pa.array(cities)
    col = pc.dictionary_encode(col) if dictionary else col
    table = pa.table({"city": col, "y": np.arange(len(cities), dtype=np.float64)})
    batches = table.to_batches(max_chunksize=4)
    return lambda: pa.RecordBatchReader.from_batches(table.schema, batches)


def _epoch(src) -> np.ndarray:
    return np.concatenate([x for x, _ in src])


@pytest.mark.parametrize("learned", [False, True])
def test_a_stream_of_plain_strings_codes_as_its_dictionary_twin(each_backend, learned):
    cities = ["b", "a", None, "日本", "b", "", "a\0", "é", "b", None, "ab"]
    vocab = ["city"] if learned else {"city": VOCAB}
    srcs = [
        arrow_source(_stream(cities, d), features=["city"], labels=["y"], categorical=vocab)
        for d in (False, True)
    ]
    assert srcs[0].categories == srcs[1].categories
    if learned:  # the first pass's vocabulary: sorted, nulls left out
        assert srcs[0].categories["city"] == sorted({c for c in cities if c is not None})
    plain, dictionary = _epoch(srcs[0]), _epoch(srcs[1])
    assert plain.tobytes() == dictionary.tobytes()
    table = {v: j for j, v in enumerate(srcs[0].categories["city"])}
    np.testing.assert_array_equal(plain[:, 0], [np.nan if c is None else table[c] for c in cities])


def test_a_stream_row_outside_the_vocabulary_is_refused_naming_its_row(each_backend):
    cities = ["a", "b", "a", "b", "b", "zz", "a"]  # row 5: the second batch's second
    src = arrow_source(
        _stream(cities, False), features=["city"], labels=["y"], categorical={"city": VOCAB}
    )
    with pytest.raises(ValueError, match=r"a batch: column 'city' holds 'zz' \(row 5\)"):
        _epoch(src)


# -- a learned vocabulary of strings, kept as Arrow ----------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.one_of(st.none(), st.text(max_size=6)), max_size=12), max_size=4))
def test_sorted_strings_is_pythons_sorted_set(parts):
    from exactbatch.sources.string_keys import sorted_strings

    cols = [pa.array(p, type=pa.string()) for p in parts]
    cols = [c.dictionary_encode() if i % 2 else c for i, c in enumerate(cols)]  # both kinds
    got = sorted_strings(cols)
    assert got.type == pa.large_string()
    assert got.to_pylist() == sorted({v for p in parts for v in p if v is not None})


def test_a_learned_string_vocabulary_indexes_its_arrow_array(each_backend, monkeypatch):
    from exactbatch.sources.categorical import learn, learned

    given = []
    real = StringIndex.of.__func__
    monkeypatch.setattr(
        StringIndex, "of", classmethod(lambda cls, v, a=None: given.append(a) or real(cls, v, a))
    )
    cols = [
        pa.array(["b", None, "é"]),
        pa.chunked_array([pa.array(["a\0", "b", ""], pa.large_string())]),
    ]
    vocab = learned("c", cols)
    assert vocab.values == learn(cols) == ["", "a\0", "b", "é"]
    np.testing.assert_array_equal(_coded(vocab, pa.array(["é", None, "", "b"])), [3, np.nan, 0, 2])
    assert len(given) == 1 and given[0] is not None  # built from the Arrow array, not the list
    with pytest.raises(ValueError, match="column 'c' holds 'q'"):
        vocab.encode(pa.array(["q"]), "chunk")


def test_a_learned_vocabulary_of_other_kinds_is_learned_as_before():
    from exactbatch.sources.categorical import learned

    assert learned("n", [pa.array([3, None, 1]), pa.array([1.0, -0.0])]).values == [0.0, 1, 3]
    with pytest.raises(TypeError, match="column 'm'.*kinds"):
        learned("m", [pa.array(["a"]), pa.array([1])])
