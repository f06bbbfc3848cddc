"""Categorical columns as integer codes: what ``categorical=`` does in ``parquet_source``,
``exactbatch convert`` and ``exactbatch.dask.to_ndf_dataset``.

The rule, one for every entry point:

* A column named in ``categorical`` holds strings, integers, booleans or
  floats (a dictionary-encoded column counts as its values); anything else
  (dates, binary, lists) is a ``TypeError`` naming it. A numeric column may
  be categorical too (a zip code, a store id): its values are coded like
  strings are.
* Codes are deterministic: ``categorical=[columns]`` learns each column's
  vocabulary in a first pass over that column only, and sorts it (strings
  by code point, numbers by value, ``False`` before ``True``), so code
  ``j`` is the ``j``-th smallest value whatever the order of rows, files or
  partitions. ``categorical={column: [values]}`` gives the vocabulary
  instead (no first pass): code ``j`` is ``values[j]``, in the order given.
* A value takes the code of the vocabulary entry EQUAL to it, whatever the
  two types: an integer column's 0 is coded as the entry 0 (or 0.0) of a
  vocabulary learned from a float file, never by a cast that truncates
  -0.5 to 0. Equal numbers are one category: 0, 0.0 and -0.0 are one
  value (a learned vocabulary keeps it as 0.0; a given one listing two of
  them is refused as a repeat), while a boolean is never a number
  (``True`` is not the category 1) and a string never a number (``"1"``
  is not 1).
* A missing value (null, or NaN in a float column) is stored as NaN, never
  coded. A value not in the vocabulary (possible only with a vocabulary
  given) is refused: a ``ValueError`` naming the column, the value and
  where it is, never an "other" code a model would learn as a category.

What it costs: the first pass reads the categorical columns once (in
Parquet, only their column chunks). The lookups are built once per
vocabulary, never per batch: numbers are coded by a table (integers in a
range a few times the vocabulary's size) or a binary search of the sorted
entries, in NumPy; strings against a vocabulary of strings by their 64-bit
keys (:mod:`exactbatch.sources.string_keys`, compiled or NumPy): a plain
chunk's rows each looked up, a dictionary chunk's distinct values (Parquet's
dictionary pages as read) coded once, then taken by its indices, and not coded
again for a dictionary equal to the last chunk's or a row group read before; other values (booleans,
mixed kinds) by one hash lookup per DISTINCT value of the batch. Memory: the
vocabulary, its hash and its float64 keys (strings: 16 bytes an entry and one
Arrow array of them; the row groups' dictionaries' codes, 9 bytes an entry,
at most twice the vocabulary's entries and 65,536). A loader whose dtype
cannot hold every code exactly (float32 past 2**24 categories' codes,
float16 past 2**11) refuses the source (:func:`~exactbatch.sources.code_dtype.check_code_dtype`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from exactbatch.hints import Foreign
from exactbatch.sources.categorical_args import check_categorical
from exactbatch.sources.code_dtype import check_code_dtype
from exactbatch.sources.string_keys import StringIndex, sorted_strings, take_codes

if TYPE_CHECKING:  # (numpy is imported where it is used)
    import numpy as np

__all__ = ["Vocabulary", "check_categorical", "check_code_dtype", "is_categorical_type", "learn"]
__all__ += ["code", "learned", "vocabularies"]


def is_categorical_type(arrow_type: Foreign) -> bool:
    """Can a column of this Arrow type be coded (strings, integers, booleans, floats, or a
    dictionary of those)?"""
    import pyarrow.types as pat

    t = arrow_type.value_type if pat.is_dictionary(arrow_type) else arrow_type
    codable: bool = (
        pat.is_string(t)
        or pat.is_large_string(t)
        or pat.is_integer(t)
        or pat.is_boolean(t)
        or pat.is_floating(t)
        or pat.is_null(t)
    )
    return codable


def _plain(col: Foreign) -> Foreign:
    """``col`` (an Arrow array or chunked array) with a dictionary decoded to its values."""
    import pyarrow as pa

    if pa.types.is_dictionary(col.type):
        return col.cast(col.type.value_type)
    return col


def _present(values: Iterable[Any]) -> list[Any]:
    """The values that stand for a category: not null, not NaN."""
    return [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]


def _zero(v: Any) -> Any:
    """``v`` with a float -0.0 made 0.0: the two are equal, so one category (module docs)."""
    return 0.0 if type(v) is float and v == 0 else v


def learn(columns: Iterable[Foreign]) -> list[Any]:
    """The sorted distinct values (nulls and NaN left out) of ``columns``, Arrow arrays of
    one column (a file's, a batch's each): a learned vocabulary. Equal values are one
    value (0 and 0.0 and -0.0; a float zero is kept as 0.0); values of different kinds
    (strings in one file, numbers in another) are a ``TypeError``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    seen: set[Any] = set()
    flags: set[Any] = set()  # a boolean file's: True is not 1 (a set would make them one)
    for col in columns:
        plain = _plain(col)
        (flags if pa.types.is_boolean(plain.type) else seen).update(pc.unique(plain).to_pylist())
    seen = {_zero(v) for v in _present(seen)}  # once, over the distinct values only
    try:
        if not flags:
            return sorted(seen)  # (a key of tuples would cost 20x on a large vocabulary)
        return sorted([*seen, *_present(flags)], key=lambda v: (type(v) is not bool, v))
    except TypeError:
        kinds = sorted({type(v).__name__ for v in seen})
        raise TypeError(
            f"values of kinds {kinds} in one categorical column; give every file the same type"
        ) from None


# a numeric vocabulary's float64 keys sorted, their codes, and (lowest, table) or None
_Numbers = tuple["np.ndarray", "np.ndarray", "tuple[float, np.ndarray] | None"]

_PLACES_HOLD = 1 << 16  # dictionary entries a vocabulary keeps by place, beyond twice its own
_EXACT = 2.0**53  # integers below this size are float64 exactly (and so is 2**53 + 1 not)


def _key(v: Any) -> Hashable:
    """A value's key in a vocabulary: equal values, equal keys, but for booleans (True is
    not the category 1); a string is its own key."""
    return v if type(v) is str else (type(v) is bool, _zero(v))


class Vocabulary:
    """One column's vocabulary: :meth:`encode` turns its values into float64 codes.

    The lookups are built once, when first needed, and kept: a hash of every
    entry (a value's code is the code of the entry EQUAL to it: 0, 0.0 and
    -0.0 are one value, ``True`` is not 1, ``"1"`` is not 1), and, for the
    numbers, their float64 values sorted, so that a numeric batch is coded by
    a binary search (no hash of the whole vocabulary per batch).
    """

    __slots__ = (
        "_all_str",
        "_arrow",
        "_codes",
        "_held",
        "_last",
        "_numbers",
        "_places",
        "_strings",
        "column",
        "values",
    )

    def __init__(self, column: str, values: Sequence[Any], arrow: Foreign = None) -> None:
        self.column, self.values = column, list(values)
        self._arrow = arrow  # the values as an Arrow string array (learned: sorted_strings)
        self._codes: dict[Hashable, int] | None = None  # _key(value) -> code
        # (sorted float64 keys, their codes, dense) or ()
        self._numbers: _Numbers | tuple[()] | None = None
        self._strings: StringIndex | None | bool = False  # False: not built yet
        self._all_str: bool | None = None
        # (a chunk's dictionary, its codes, found)
        self._last: tuple[Foreign, np.ndarray, np.ndarray] | None = None
        # a chunk's place -> ((its dictionary's size), codes, found)
        self._places: dict[Hashable, tuple[tuple[int, int], np.ndarray, np.ndarray]] = {}
        self._held = 0  # the dictionary entries _places holds

    @property
    def strings(self) -> bool:
        """Is every entry a string (and is there one)? (Found once.)"""
        if self._all_str is None:
            self._all_str = set(map(type, self.values)) == {str}  # (a loop in C)
        return self._all_str

    def _string_index(self) -> StringIndex | None:
        """The vectorised index of a vocabulary of strings only (None: another, or two
        entries whose keys collide: the hash codes them)."""
        if self._strings is False:
            self._strings = StringIndex.of(self.values, self._arrow) if self.strings else None
        assert self._strings is not True
        return self._strings

    def _lookup(self) -> dict[Hashable, int]:
        if self._codes is None:
            if all(type(v) is str for v in self.values):
                self._codes = dict(zip(self.values, range(len(self.values)), strict=True))
            else:
                self._codes = {_key(v): j for j, v in enumerate(self.values)}
        return self._codes

    def _sorted(self) -> _Numbers | tuple[()]:
        """The numeric entries as float64: ``(keys sorted, their codes, dense)``, where
        ``dense`` is ``(lowest, table)`` (``table[v - lowest]``: the code of the integer
        ``v``, NaN for none) when the entries are integers in a range at most a few
        times their count, else None; ``()`` when an entry is not a number (a boolean,
        a string) or not a float64 exactly (an integer past 2**53): such vocabularies
        go through the hash."""
        if self._numbers is None:
            import numpy as np

            self._numbers = ()
            if self.values and set(map(type, self.values)) <= {int, float}:
                keys = np.array(self.values, dtype=np.float64)
                if np.isfinite(keys).all() and np.abs(keys).max() < _EXACT:
                    order = np.argsort(keys, kind="stable")
                    keys, dense = keys[order], None
                    lo, span = keys[0], keys[-1] - keys[0] + 1
                    if (keys == np.floor(keys)).all() and span <= 4 * len(keys) + 1024:
                        table = np.full(int(span), np.nan)
                        table[(keys - lo).astype(np.int64)] = order
                        dense = (lo, table)
                    self._numbers = (keys, order.astype(np.float64), dense)
        return self._numbers

    def _numeric(self, x: np.ndarray) -> np.ndarray:
        """Codes of the float64 values ``x`` (NaN where no entry equals the value)."""
        import numpy as np

        numbers = self._sorted()
        assert numbers  # (called for a numeric vocabulary only)
        keys, codes, dense = numbers
        if dense is not None:  # integers in a range: a table, one read a value
            lo, table = dense
            i = x - lo
            ok = (i >= 0) & (i < len(table)) & (i == np.floor(i))  # (NaN: False)
            out = np.full(len(x), np.nan)
            out[ok] = table[i[ok].astype(np.int64)]
            return out
        at = np.minimum(np.searchsorted(keys, x), len(keys) - 1)
        return np.where(keys[at] == x, codes[at], np.nan)

    def encode(
        self, col: Foreign, where: str, first_row: int = 0, place: Hashable | None = None
    ) -> Foreign:
        """``col`` (an Arrow array or chunked array of this column) as a float64 Arrow
        array of codes, missing values NaN. A value outside the
        vocabulary (no entry equal to it) is a ``ValueError`` naming the column, the
        value and its row (``first_row`` + its position in ``col``), starting with
        ``where``. ``place``: where the chunk comes from (hashable; None: anywhere)
        when every read of it gives the same values (a Parquet file's row group,
        whose file is checked unchanged at each read): its dictionary's codes are
        kept for the next read (:meth:`_strings_coded`)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(col, pa.ChunkedArray) and col.num_chunks == 1:
            col = col.chunk(0)
        if isinstance(col, pa.ChunkedArray) and self.strings and col.num_chunks:
            parts = []  # chunk by chunk (a table's batches): each one's distinct values
            for chunk in col.chunks:
                parts.append(self.encode(chunk, where, first_row))
                first_row += len(chunk)
            return pa.concat_arrays(parts)
        coded = self._strings_coded(col, place)
        if coded is not None:  # strings against strings: vectorised
            if coded[1] >= 0:
                self._refuse(col, coded[1], where, first_row)
            return coded[0]
        col = _plain(col)
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        t = col.type
        if pa.types.is_null(t):
            return pa.nulls(len(col), pa.float64())
        numeric = pa.types.is_integer(t) or pa.types.is_floating(t)
        x = None
        numbers = self._sorted() if numeric else ()
        if numbers and numbers[2] is not None and not col.null_count:
            if pa.types.is_integer(t) and t != pa.uint64():
                out = self._dense(col.to_numpy())  # integers, no nulls: the table directly
                unknown = np.isnan(out)
                return self._checked(out, unknown, col, where, first_row)
        if numbers:
            x = col.to_numpy(zero_copy_only=False).astype(np.float64)  # nulls: NaN
            # (every value null: no maximum, and NumPy's all-NaN warning)
            big = len(x) > col.null_count and np.nanmax(np.abs(x)) >= _EXACT
            if pa.types.is_integer(t) and big:
                x = None  # past 2**53: float64 would merge neighbours; the hash is exact
        if x is not None:
            out = self._numeric(x)
            unknown = np.isnan(out) & ~np.isnan(x)
        else:  # each distinct value looked up once
            enc = pc.dictionary_encode(col)
            lookup, values = self._lookup(), enc.dictionary.to_pylist()  # (no null in it)
            if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                values = list(map(_key, values))
            table = np.fromiter(map(lookup.get, values, [-1.0] * len(values)), np.float64)
            idx = enc.indices.to_numpy(zero_copy_only=False)  # nulls: see below
            if enc.indices.null_count:
                idx = np.where(enc.indices.is_valid().to_numpy(zero_copy_only=False), idx, 0)
            valid = col.is_valid().to_numpy(zero_copy_only=False)
            out = np.where(valid, table[idx.astype(np.int64)] if len(table) else np.nan, np.nan)
            if pa.types.is_floating(t):
                valid &= ~np.isnan(col.to_numpy(zero_copy_only=False))
            unknown = valid & (out == -1.0)
            out[~valid] = np.nan  # null, NaN: missing, never coded
        return self._checked(out, unknown, col, where, first_row)

    def _strings_coded(
        self, col: Foreign, place: Hashable | None = None
    ) -> tuple[Foreign, int] | None:
        """``(codes, first)`` of a string column (an Array, plain or dictionary-encoded)
        against a vocabulary of strings: a float64 Arrow array and the first row whose
        value is not in the vocabulary (-1: none); None for anything else. A plain chunk's
        rows are looked up in the :class:`StringIndex`; a dictionary chunk's dictionary is
        coded by it, then taken by the indices (:func:`take_codes`), unless it equals the
        last chunk's (an Arrow stream's, a Parquet file written from a dictionary column)
        or the chunk's ``place`` was coded before (its dictionary's size checked; at most
        twice the vocabulary's entries and 65,536 kept)."""
        import pyarrow as pa

        t = getattr(col, "type", None)
        if isinstance(col, pa.ChunkedArray) or t is None:
            return None
        value = t.value_type if pa.types.is_dictionary(t) else t
        if not (pa.types.is_string(value) or pa.types.is_large_string(value)):
            return None
        index = self._string_index()
        if index is None:
            return None
        if not pa.types.is_dictionary(t):  # plain: each row looked up, no dictionary made
            return index.coded(col)
        dictionary, last = col.dictionary, self._last
        size = (len(dictionary), dictionary.nbytes)
        kept = self._places.get(place) if place is not None else None
        if kept is not None and kept[0] == size:
            table, found = kept[1], kept[2]
        elif last is not None and last[0].equals(dictionary):
            table, found = last[1], last[2]
        else:
            table, found = index.codes(dictionary)
            if dictionary.null_count:  # a null in the dictionary: missing (NaN), not unknown
                found |= ~dictionary.is_valid().to_numpy(zero_copy_only=False)
            self._last = (dictionary, table, found)
        if place is not None and kept is None:
            if self._held + size[0] <= 2 * len(self.values) + _PLACES_HOLD:
                self._places[place] = (size, table, found)
                self._held += size[0]
        return take_codes(col.indices, table, found)

    def _dense(self, xi: np.ndarray) -> np.ndarray:
        """Codes of the integers ``xi`` through the dense table (NaN: none equal)."""
        import numpy as np

        numbers = self._sorted()
        assert numbers and numbers[2] is not None  # (called when there is a table)
        lo, table = numbers[2]
        i = xi.astype(np.int64, copy=False) - np.int64(lo)
        ok = (i >= 0) & (i < len(table))
        if ok.all():
            codes: np.ndarray = table[i]
            return codes
        out = np.full(len(xi), np.nan)
        out[ok] = table[i[ok]]
        return out

    def _checked(
        self, out: np.ndarray, unknown: np.ndarray, col: Foreign, where: str, first_row: int
    ) -> Foreign:
        """``out`` as an Arrow float64 array (missing values NaN), or the ``ValueError``
        of the first value ``unknown`` marks."""
        import pyarrow as pa

        if unknown.any():
            self._refuse(col, int(unknown.argmax()), where, first_row)
        return pa.array(out, type=pa.float64())  # NaN: missing (a plain float64 column)

    def _refuse(self, col: Foreign, i: int, where: str, first_row: int) -> NoReturn:
        """The ``ValueError`` of row ``i`` of ``col``: a value not in the vocabulary."""
        raise ValueError(
            f"{where}: column {self.column!r} holds {col[i].as_py()!r} (row "
            f"{first_row + i}), which is not in its vocabulary of {len(self.values)} "
            f"value(s) (a value takes the code of the entry equal to it); add it to "
            f"categorical={{{self.column!r}: [...]}}, or let the vocabulary be learned "
            "(categorical=[...])"
        )


def vocabularies(
    categorical: dict[str, list[Any] | None], batches: Callable[[], Iterable[Foreign]]
) -> dict[str, Vocabulary]:
    """``{column: Vocabulary}`` for ``categorical`` (as :func:`check_categorical` gives
    it): the vocabularies given, and the others learned from ``batches()``, an iterable
    of Arrow tables or record batches holding those columns (called only when one is
    to be learned: a first pass)."""
    import pyarrow.compute as pc

    todo = [c for c, v in categorical.items() if v is None]
    seen: dict[str, list[Foreign]] = {c: [] for c in todo}
    if todo:
        for batch in batches():
            for c in todo:
                seen[c].append(pc.unique(_plain(batch.column(c))))  # not the column: memory
    out: dict[str, Vocabulary] = {}
    for c, given in categorical.items():
        out[c] = learned(c, seen[c]) if given is None else Vocabulary(c, given)
    return out


def learned(column: str, columns: list[Foreign]) -> Vocabulary:
    """The vocabulary :func:`learn` gives ``columns`` (Arrow arrays of the column
    ``column``: a ``TypeError`` naming it for values of two kinds). One of strings only
    is sorted by Arrow and kept as that Arrow array, its index built from it (no Python
    strings converted to Arrow again)."""
    arrow = sorted_strings(columns)
    try:
        values = learn(columns) if arrow is None else arrow.to_pylist()
    except TypeError as e:
        raise TypeError(f"column {column!r}: {e}") from None
    return Vocabulary(column, values, arrow)


def code(
    name: str, col: Foreign, vocab: dict[str, Vocabulary], where: str, first_row: int = 0
) -> Foreign:
    """``col`` (the column ``name``) coded when ``vocab`` has a vocabulary for it, else
    as it is."""
    v = vocab.get(name)
    return col if v is None else v.encode(col, where, first_row)
