"""Strings coded a chunk at once by their 64-bit keys (exactbatch.sources.string_keys).

Pinned against independent references: each key against the documented
polynomial hash computed with Python integers, and each code against a plain
Python dict vocabulary (``{value: code}``). Laws: every value gets the code of
its EQUAL entry, whatever the array (string or large_string, sliced, plain or
dictionary-encoded, read from Parquet); a null, an unknown value, or a value
whose key collides with an entry's (forced here by monkeypatching the key
function) is never coded; a vocabulary whose entries share a key is not
indexed, and the loader's vocabulary then codes it by its hash table, with
the same codes.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from helpers import reference_string_key
from hypothesis import given, settings
from hypothesis import strategies as st
from laws import run_threads

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from exactbatch.sources import string_keys as sk  # noqa: E402
from exactbatch.sources.categorical import Vocabulary  # noqa: E402
from exactbatch.sources.string_keys import StringIndex, string_keys  # noqa: E402


def _reference_codes(vocabulary: list[str], values: list) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, found)`` by a plain dict: code ``j`` is ``vocabulary[j]``; NaN elsewhere."""
    table = {v: j for j, v in enumerate(vocabulary)}
    codes = np.array([table.get(v, np.nan) if v is not None else np.nan for v in values])
    return codes, ~np.isnan(codes)


def _assert_codes(index, vocabulary, col):
    codes, found = index.codes(col)
    want, want_found = _reference_codes(vocabulary, col.to_pylist())
    np.testing.assert_array_equal(codes, want)
    np.testing.assert_array_equal(found, want_found)
    assert codes.dtype == np.float64 and found.dtype == bool


VOCAB = ["", "a", "b", "ab", "ba", "a\0", "\0", "é", "日本", "a" * 300, "aa", "b" * 7]
VALUES = [*VOCAB[::-1], None, "c", "abc", "\0\0", "a" * 299, "A", None, "ab"]


# -- the keys ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_each_key_is_the_documented_hash(kind):
    arr = pa.array(VALUES, type=kind)
    keys = string_keys(arr)
    assert keys.dtype == np.uint64 and len(keys) == len(VALUES)
    assert keys.tolist() == [reference_string_key(v) for v in VALUES]


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_a_sliced_array_keys_its_own_strings(kind):
    arr = pa.array(VALUES, type=kind)
    for start, stop in [(0, 1), (3, 9), (len(VALUES) - 2, len(VALUES)), (5, 5)]:
        part = arr.slice(start, stop - start)
        assert string_keys(part).tolist() == [reference_string_key(v) for v in VALUES[start:stop]]


def test_empty_arrays_and_empty_strings_have_keys():
    assert string_keys(pa.array([], type=pa.string())).tolist() == []
    only_empty = pa.array(["", "", None], type=pa.large_string())
    assert string_keys(only_empty).tolist() == [reference_string_key("")] * 3
    # an empty string last (after a long one) and first: its key is its length's alone
    assert string_keys(pa.array(["abc", ""])).tolist() == [
        reference_string_key(s) for s in ["abc", ""]
    ]


def test_the_length_counts_and_so_do_zero_bytes():
    keys = string_keys(pa.array(["", "\0", "\0\0", "a", "a\0", "\0a"]))
    assert len(set(keys.tolist())) == 6


# -- the index, against a dict ----------------------------------------------------------


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_every_value_gets_the_code_of_its_equal_entry(kind):
    index = StringIndex.of(VOCAB)
    assert index is not None
    _assert_codes(index, VOCAB, pa.array(VALUES, type=kind))
    _assert_codes(index, VOCAB, pa.array(VALUES, type=kind).slice(4, 9))


@settings(max_examples=40)
@given(
    vocabulary=st.lists(st.text(max_size=6), unique=True, max_size=40),
    extra=st.lists(st.text(max_size=6), max_size=20),
    data=st.data(),
)
def test_codes_agree_with_a_dict_vocabulary(vocabulary, extra, data):
    pool = vocabulary + extra + [None]
    values = data.draw(st.lists(st.sampled_from(pool), max_size=60))
    index = StringIndex.of(vocabulary)
    assert index is not None  # (distinct 64-bit keys: a collision is never seen by chance)
    _assert_codes(index, vocabulary, pa.array(values, type=pa.string()))


def test_nothing_is_found_in_an_empty_vocabulary_or_an_empty_chunk():
    index = StringIndex.of([])
    assert index is not None
    codes, found = index.codes(pa.array(["a", "", None]))
    assert np.isnan(codes).all() and not found.any() and len(codes) == 3
    codes, found = StringIndex.of(["a"]).codes(pa.array([], type=pa.string()))
    assert codes.shape == found.shape == (0,)


def test_a_null_is_never_coded_whatever_its_bytes():
    index = StringIndex.of(["", "a"])
    _assert_codes(index, ["", "a"], pa.array([None, "", None, "a"]))
    # a null slot whose bytes spell an entry (Arrow leaves them unspecified)
    plain = pa.array(["a", "a"])
    validity = pa.array([False, True]).buffers()[1]
    masked = pa.Array.from_buffers(pa.string(), 2, [validity, *plain.buffers()[1:]])
    assert masked.to_pylist() == [None, "a"]
    codes, found = index.codes(masked)
    assert np.isnan(codes[0]) and not found[0]
    assert codes[1] == 1 and found[1]


def test_a_chunk_of_one_value_is_coded():
    index = StringIndex.of(VOCAB)
    for value in ("ab", "", "zz", None):
        _assert_codes(index, VOCAB, pa.array([value], type=pa.string()))


def test_each_entry_sits_in_the_bucket_of_its_keys_top_bits():
    vocabulary = [f"w{i}" for i in range(300)]
    index = StringIndex.of(vocabulary)
    bits = (len(index._starts) - 1).bit_length() - 1
    keys = [reference_string_key(v) for v in vocabulary]
    for at, code in enumerate(index._codes.astype(int)):
        top = keys[code] >> (64 - bits)
        assert index._starts[top] <= at < index._starts[top + 1]


def test_buckets_are_four_to_eight_an_entry():
    for n in (1, 2, 3, 100, 1000, 4097):
        index = StringIndex.of([str(i) for i in range(n)])
        buckets = len(index._starts) - 1
        assert 4 * n <= buckets <= 8 * n or (n == 1 and buckets == 4)


# -- collisions, forced -----------------------------------------------------------------


def _small_keys(arr):
    """Keys below 2**32 (CRC-32): every one in bucket 0, the worst the buckets can be."""
    return np.array([zlib.crc32((s or "").encode()) for s in arr.to_pylist()], dtype=np.uint64)


def _first_letter_keys(arr):
    """Keys that collide for every two strings with the same first character and length 1+:
    a value and an entry can share a key and differ."""
    return np.array(
        [((ord(s[0]) if s else 0) << 40) for s in (v or "" for v in arr.to_pylist())],
        dtype=np.uint64,
    )


def test_entries_in_one_bucket_are_all_found(monkeypatch):
    monkeypatch.setattr(sk, "string_keys", _small_keys)
    vocabulary = [f"v{i}" for i in range(64)]
    index = StringIndex.of(vocabulary)
    assert index is not None
    values = [*vocabulary[::-1], "w", None, "v64", *vocabulary[::3]]
    _assert_codes(index, vocabulary, pa.array(values))


def test_a_value_whose_key_collides_with_an_entrys_is_unknown(monkeypatch):
    monkeypatch.setattr(sk, "string_keys", _first_letter_keys)
    vocabulary = ["apple", "banana", ""]
    index = StringIndex.of(vocabulary)
    assert index is not None
    values = ["apple", "avocado", "banana", "b", "", None, "cherry", "a"]
    codes, found = index.codes(pa.array(values))
    np.testing.assert_array_equal(found, [1, 0, 1, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(codes[found], [0, 1, 2])
    assert np.isnan(codes[~found]).all()


def test_a_value_in_the_last_bucket_past_its_entries_is_unknown(monkeypatch):
    # keys by hand: "a" and "b" share bucket 0 (two rounds of search), "c" is alone in
    # the last bucket, and "z" falls there too: its search ends at the last entry
    keys = {"a": 0, "b": 1, "c": 2**63, "z": 2**63 + 1, "": 2**64 - 1}
    monkeypatch.setattr(
        sk, "string_keys", lambda arr: np.array([keys[v or ""] for v in arr.to_pylist()], np.uint64)
    )
    index = StringIndex.of(["c", "a", "b"])
    _assert_codes(index, ["c", "a", "b"], pa.array(["z", "c", "a", "b", "", None, "z"]))


def test_a_vocabulary_whose_entries_share_a_key_is_not_indexed(monkeypatch):
    monkeypatch.setattr(sk, "string_keys", lambda arr: np.zeros(len(arr), dtype=np.uint64))
    assert StringIndex.of(["a", "b"]) is None
    index = StringIndex.of(["a"])  # (one entry: nothing to collide with)
    _assert_codes(index, ["a"], pa.array(["a", "b", None]))
    # the loader's vocabulary then codes by its hash table: the same codes, the same refusal
    vocab = Vocabulary("c", ["x", "y", "z"])
    codes = vocab.encode(pa.array(["z", None, "x", "y"]), "here").to_numpy(zero_copy_only=False)
    np.testing.assert_array_equal(codes, [2, np.nan, 0, 1])
    with pytest.raises(ValueError, match=r"here: column 'c' holds 'w' \(row 1\)"):
        vocab.encode(pa.array(["x", "w"]), "here")


# -- through the loader's vocabulary: chunks plain and dictionary-encoded ----------------


def _coded(vocab: Vocabulary, col) -> np.ndarray:
    return vocab.encode(col, "chunk").to_numpy(zero_copy_only=False)


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_plain_and_dictionary_chunks_code_alike(kind):
    values = [v for v in VALUES if v is None or v in VOCAB]
    want, _ = _reference_codes(VOCAB, values)
    vocab = Vocabulary("c", VOCAB)
    plain = pa.array(values, type=kind)
    np.testing.assert_array_equal(_coded(vocab, plain), want)
    np.testing.assert_array_equal(_coded(vocab, plain.dictionary_encode()), want)
    np.testing.assert_array_equal(_coded(vocab, pa.chunked_array([plain])), want)


def test_one_vocabulary_codes_chunks_on_several_threads_at_once():
    """The compiled keys, lookups and dictionary takes release the GIL: four threads
    coding chunks of their own against one vocabulary at once (its index shared, read
    only) each get their own chunk's codes. (`make tsan` runs this for _core_codes.c.)"""
    rng = np.random.default_rng(8)
    vocabulary = [f"value {i}" for i in range(3000)]
    vocab = Vocabulary("c", vocabulary)
    chunks, wants = [], []
    for i in range(4):
        values = [None if j % 97 == 0 else vocabulary[j] for j in rng.integers(0, 3000, 40_000)]
        col = pa.array(values, type=pa.large_string() if i % 2 else pa.string())
        chunks.append(col.dictionary_encode() if i >= 2 else col)
        wants.append(_reference_codes(vocabulary, values)[0])

    def work(i):
        for _ in range(5):
            np.testing.assert_array_equal(_coded(vocab, chunks[i]), wants[i])

    run_threads(work, 4)


def test_dictionary_encoded_parquet_chunks_code_as_the_dict_does(tmp_path):
    rng = np.random.default_rng(7)
    vocabulary = [f"s{i:03d}" for i in range(200)]
    picks = rng.integers(0, 200, 900)
    values = [None if i % 17 == 0 else vocabulary[j] for i, j in enumerate(picks)]
    pq.write_table(pa.table({"c": values}), tmp_path / "c.parquet", row_group_size=250)
    vocab = Vocabulary("c", vocabulary[::-1])
    f = pq.ParquetFile(tmp_path / "c.parquet", read_dictionary=["c"])
    seen = 0
    for g in range(f.num_row_groups):
        col = f.read_row_group(g, columns=["c"]).column("c")
        assert pa.types.is_dictionary(col.type)
        want, _ = _reference_codes(vocabulary[::-1], col.to_pylist())
        np.testing.assert_array_equal(_coded(vocab, col), want)
        seen += len(col)
    assert seen == 900


def test_an_unknown_value_is_refused_naming_it_and_its_row():
    vocab = Vocabulary("c", ["x", "y"])
    for col in (pa.array(["x", None, "q"]), pa.array(["x", None, "q"]).dictionary_encode()):
        with pytest.raises(ValueError, match=r"chunk: column 'c' holds 'q' \(row 12\)"):
            vocab.encode(col, "chunk", first_row=10)


@pytest.mark.parametrize(
    ("values", "vocabulary", "says"),
    [
        (["1", "2"], [1, 2], "holds '1'"),  # a string is never a number
        ([1, 2], ["1", "2"], "holds 1 "),  # nor a number a string
        (["True"], [True, False], "holds 'True'"),
        (["a", "1"], ["a", 1], "holds '1'"),  # a mixed vocabulary: its hash, the same rule
    ],
)
def test_a_type_mismatch_is_refused(values, vocabulary, says):
    vocab = Vocabulary("c", vocabulary)
    for col in (pa.array(values), pa.array(values).dictionary_encode()):
        with pytest.raises(ValueError, match=says):
            vocab.encode(col, "chunk")


def test_a_mixed_vocabulary_codes_its_strings_by_equality():
    vocab = Vocabulary("c", ["a", 1, "b"])
    np.testing.assert_array_equal(_coded(vocab, pa.array(["b", "a", None])), [2, 0, np.nan])
    np.testing.assert_array_equal(_coded(vocab, pa.array([1, None])), [1, np.nan])
