"""Strings coded against a vocabulary, a whole Arrow array at a time (no Python per row).

A vocabulary of strings is indexed once (:class:`StringIndex`): each entry's
64-bit key - a polynomial hash of its UTF-8 bytes read eight at a time and its
length, computed from the Arrow array's offsets and bytes (:func:`string_keys`) -
sorted, with
the entry's code and bytes beside it (the entries kept in their keys' order).
A chunk is then coded without Python per value: its keys, their buckets among
the sorted keys, and a check that the entry found is EQUAL to the value, byte
for byte, so two strings whose keys collide can never share a code: a value
whose key matches no entry, or matches an entry that is another string, is
unknown. A vocabulary in which two entries share a key (never seen; possible
only for strings built to collide) is not indexed: :meth:`StringIndex.of`
returns None, and the caller codes by its hash table.

A dictionary-encoded chunk (Parquet's pages read with ``read_dictionary``, an
Arrow stream's dictionary column, or a chunk Arrow's ``dictionary_encode``
made) is coded as its dictionary (each distinct value once) and then taken by
its indices (:func:`take_codes`): one read of a small table a row.

Two backends, the same keys and codes (:mod:`exactbatch.kernels` picks): the
compiled core (``string_keys``, ``index_codes``, ``take_codes`` in
``_core_codes.c``: one pass each with the GIL released; a large index's
buckets, entries and bytes fetched for the values ahead while one is
compared) and the NumPy code here (a few passes over the bytes, rounds over
the buckets, Arrow's ``take`` and ``equal`` for the check). Both take the keys
from :func:`string_keys` as this module holds it, so a test that replaces it
(to force collisions) tests both.

Memory: the keys and codes (16 bytes an entry), the bucket starts (32 to 64
bytes an entry) and the vocabulary as one Arrow array.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from exactbatch.hints import Foreign
from exactbatch.kernels import core

__all__ = ["StringIndex", "sorted_strings", "string_keys", "take_codes"]

_P = np.uint64(0x100000001B3)  # the FNV prime: odd, so every power is too
_LENGTH = np.uint64(0x9E3779B97F4A7C15)  # mixes the length in (a zero byte still counts)


def _powers(k: int) -> np.ndarray:
    """``P**0 .. P**(k-1)`` modulo 2**64."""
    out = np.full(max(k, 1), _P, dtype=np.uint64)
    out[0] = 1
    return np.cumprod(out, dtype=np.uint64)


def string_keys(arr: Foreign) -> np.ndarray:
    """The uint64 key of each string of ``arr`` (a pyarrow ``string`` or
    ``large_string`` Array, not chunked): its UTF-8 bytes as little-endian 64-bit words
    ``w_0 .. w_{m-1}`` (eight bytes a word, the last one's missing bytes zero),
    ``sum(w_q * P**(m - 1 - q))`` plus the length times a constant, modulo 2**64, then
    mixed (:func:`_mixed`); a null's key is its bytes' (callers mask nulls)."""
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    offs, buf = _strings(arr)
    c = core()
    if c is not None:
        out = np.empty(n, dtype=np.uint64)
        c.string_keys(offs, buf, out)
        return out
    offs = offs.astype(np.int64)
    lens = np.diff(offs)
    keys = lens.astype(np.uint64) * _LENGTH
    if offs[-1] == offs[0]:
        return _mixed(keys)
    data = np.frombuffer(buf, dtype=np.uint8)[offs[0] : offs[-1]]
    # each byte's place in its string: its word's distance from the last word, its shift
    at = np.arange(len(data), dtype=np.int64) - np.repeat(offs[:-1] - offs[0], lens)
    words = (lens + 7) // 8
    from_end = np.repeat(words, lens) - 1 - at // 8
    shift = (at % 8 * 8).astype(np.uint64)
    terms = np.zeros(len(data) + 1, dtype=np.uint64)  # (+1: a last empty string's start)
    terms[:-1] = (data.astype(np.uint64) << shift) * _powers(int(words.max()))[from_end]
    sums = np.add.reduceat(terms, offs[:-1] - offs[0])  # (an empty string's: dropped)
    keys += np.where(lens > 0, sums, np.uint64(0))
    return _mixed(keys)


def sorted_strings(columns: Iterable[Foreign]) -> Foreign | None:
    """The distinct strings of ``columns`` (Arrow arrays or chunked arrays, plain or
    dictionary-encoded), nulls left out, sorted by code point (UTF-8's byte order: what
    Python's ``sorted`` gives), as one ``large_string`` Array; None when a column is of
    another type (its values are learned in Python)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks: list[Foreign] = []
    for col in columns:
        t = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            return None
        col = col.cast(t) if t != col.type else col  # a dictionary decoded to its values
        col = col.cast(pa.large_string())
        chunks += col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    values = pc.drop_null(pc.unique(pa.chunked_array(chunks, type=pa.large_string())))
    return values.take(pc.sort_indices(values))


def _strings(arr: Foreign) -> tuple[np.ndarray, Foreign]:
    """``(offsets, data)`` of a string or large_string Array: its ``len + 1`` offsets
    (int32 or int64, a view) into ``data``, its bytes (an Arrow buffer, or None)."""
    import pyarrow as pa

    bufs = arr.buffers()
    wide = pa.types.is_large_string(arr.type)
    dt = np.int64 if wide else np.int32
    if bufs[1] is None:  # (an empty array may have no offsets)
        return np.zeros(len(arr) + 1, dtype=dt), bufs[2]
    offs = np.frombuffer(bufs[1], dtype=dt)
    return offs[arr.offset : arr.offset + len(arr) + 1], bufs[2]


def _mixed(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: every bit of a key moves its top bits (the buckets')."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


class StringIndex:
    """A string vocabulary's sorted keys and codes (module docs); made by :meth:`of`."""

    __slots__ = ("_codes", "_keys", "_most", "_shift", "_starts", "_values", "_voffs")

    def __init__(self, values: Foreign, keys: np.ndarray, order: np.ndarray) -> None:
        import pyarrow as pa

        # the entries in their keys' order: an entry's key, code and bytes at one position
        self._values, self._keys = values.take(pa.array(order)), keys[order]
        self._codes = order.astype(np.float64)
        # buckets by a key's top bits, most with one entry or none: a key's candidates are the
        # sorted keys from its bucket's start (no binary search: one read, rarely more)
        bits = int(len(keys)).bit_length() + 2  # 4 to 8 buckets an entry
        self._shift = np.uint64(64 - bits)
        tops = (self._keys >> self._shift).astype(np.int64)
        counts = np.bincount(tops, minlength=1 << bits)  # (tops sorted: each bucket's run)
        self._starts = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self._most = int(np.diff(self._starts).max())  # (never empty: 4 buckets at least)
        self._voffs = _strings(self._values)[0]  # (int64: a large_string array)

    @classmethod
    def of(cls, values: list[str], arrow: Foreign = None) -> StringIndex | None:
        """The index of the vocabulary ``values`` (code ``j`` is ``values[j]``), or None
        when two of its entries share a key. ``arrow``: the same values as an Arrow
        string array, when there is one (no conversion from Python's)."""
        import pyarrow as pa

        if arrow is None:
            arr = pa.array(values, type=pa.large_string())
        else:
            arr = arrow.cast(pa.large_string())
        keys = string_keys(arr)
        order = np.argsort(keys)  # (two equal keys: no index, so no order among them)
        if (np.diff(keys[order]) == 0).any():
            return None
        return cls(arr, keys, order)

    def coded(self, col: Foreign) -> tuple[Foreign, int]:
        """``(codes, first)`` of a plain string Array ``col``, each row looked up (no
        dictionary made): a float64 Arrow array (NaN where null) in Arrow's memory pool,
        and the first row whose value is not in the vocabulary (-1: none)."""
        import pyarrow as pa

        n = len(col)
        buf = pa.allocate_buffer(8 * n)
        codes, found = self.codes(col, np.frombuffer(buf, dtype=np.float64))
        unknown = ~found
        if col.null_count:  # a null is missing, never unknown
            unknown &= col.is_valid().to_numpy(zero_copy_only=False)
        first = int(unknown.argmax()) if n and unknown.any() else -1
        return pa.Array.from_buffers(pa.float64(), n, [None, buf]), first

    def codes(self, col: Foreign, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(codes, found)`` of ``col`` (a string Array, not chunked): float64 codes
        (NaN where no entry is equal: null, or not in the vocabulary; written into
        ``out`` when given) and whether an entry equal to the value was found."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(col)
        if out is None:
            out = np.empty(n)
        if n == 0 or len(self._keys) == 0:
            out[:] = np.nan
            return out, np.zeros(n, dtype=bool)
        keys = string_keys(col)
        c = core()
        if c is not None:
            offs, data = _strings(col)
            found = np.empty(n, dtype=bool)
            vdata = self._values.buffers()[2]
            args = (self._codes, self._starts, int(self._shift), self._voffs, vdata)
            c.index_codes(keys, offs, data, self._keys, *args, out, found)
            if col.null_count:  # (a null's bytes may spell an entry)
                null = ~col.is_valid().to_numpy(zero_copy_only=False)
                out[null], found[null] = np.nan, False
            return out, found
        tops = (keys >> self._shift).astype(np.int64)
        at, ends = self._starts[tops], self._starts[tops + 1]
        found = np.zeros(n, dtype=bool)
        look = np.flatnonzero(at < ends)  # the keys whose bucket is not empty
        for _ in range(self._most):  # the bucket's entries, one round each
            hit = self._keys[at[look]] == keys[look]
            found[look[hit]] = True
            look = look[~hit]
            at[look] += 1
            look = look[at[look] < ends[look]]
            if not len(look):
                break
        at = np.minimum(at, len(self._keys) - 1)
        codes = self._codes[at]
        entries = self._values.take(pa.array(at))
        same = pc.equal(entries, col.cast(pa.large_string()))  # (a collision: False)
        found &= same.fill_null(False).to_numpy(zero_copy_only=False)
        np.copyto(out, np.where(found, codes, np.nan))
        return out, found


def take_codes(indices: Foreign, table: np.ndarray, found: np.ndarray) -> tuple[Foreign, int]:
    """``(codes, first)``: ``table[indices]`` as a float64 Arrow array (NaN where an index
    is null), and the first row whose index's entry was not ``found`` (-1: none).
    ``indices``: a dictionary array's indices (an integer Array); ``table``, ``found``:
    its dictionary's codes (:meth:`StringIndex.codes`). An index outside the table is a
    ``ValueError``. The output lives in Arrow's memory pool (reused chunk after chunk)."""
    import pyarrow as pa

    n = len(indices)
    if n == 0:
        return pa.array([], type=pa.float64()), -1
    buf = pa.allocate_buffer(8 * n)
    out = np.frombuffer(buf, dtype=np.float64)
    c = core()
    if c is not None:
        validity, data = indices.buffers()
        ix = np.frombuffer(data, dtype=indices.type.to_pandas_dtype())
        ix = ix[indices.offset : indices.offset + n]
        bits = validity if indices.null_count else None
        first = c.take_codes(ix, bits, indices.offset, table, found, out)
        return pa.Array.from_buffers(pa.float64(), n, [None, buf]), first
    ix = indices.fill_null(0).to_numpy(zero_copy_only=False)
    valid = indices.is_valid().to_numpy(zero_copy_only=False) if indices.null_count else None
    inside = (ix >= 0) & (ix < len(table))
    if not (inside if valid is None else inside | ~valid).all():
        raise ValueError("take_codes: a dictionary index outside its dictionary")
    if len(table):
        np.take(table, ix, out=out)
        unknown = ~found[ix]
    else:  # (every row null)
        out[:], unknown = np.nan, np.zeros(n, dtype=bool)
    if valid is not None:
        out[~valid] = np.nan
        unknown &= valid
    first = int(unknown.argmax()) if unknown.any() else -1
    return pa.Array.from_buffers(pa.float64(), n, [None, buf]), first
