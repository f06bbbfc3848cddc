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
* A missing value (null, or NaN in a float column) is stored as NaN, never
  coded. A value not in the vocabulary (possible only with a vocabulary
  given) is refused: a ``ValueError`` naming the column, the value and
  where it is, never an "other" code a model would learn as a category.

What it costs: the first pass reads the categorical columns once (in
Parquet, only their column chunks); coding a batch is one hash lookup a
value (``pyarrow.compute.index_in``), and the vocabulary's memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["Vocabulary", "check_categorical", "is_categorical_type", "learn"]


def check_categorical(categorical, where: str) -> dict[str, list | None]:
    """``categorical`` as ``{column: vocabulary or None}`` (None: learn it).

    ``categorical``: None, a column name, a list of names, or a mapping from
    names to their vocabularies (lists of distinct values). Anything else is
    a ``TypeError`` naming the argument; a name given twice, or a vocabulary
    with a repeated value, a ``ValueError``.
    """
    if categorical is None:
        return {}
    if isinstance(categorical, str):
        categorical = [categorical]
    if isinstance(categorical, Mapping):
        out: dict[str, list | None] = {}
        for col, values in categorical.items():
            if not isinstance(col, str):
                raise TypeError(f"{where}: categorical names columns by name; got {col!r}")
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                raise TypeError(
                    f"{where}: categorical[{col!r}] must be a list of values (the vocabulary); "
                    f"got {values!r:.80}"
                )
            vocab = list(values)
            keys = [(type(v) is bool, v) for v in vocab]  # True is not the category 1
            if len(set(keys)) != len(keys):
                twice = [v for k, v in zip(keys, vocab, strict=True) if keys.count(k) > 1]
                raise ValueError(
                    f"{where}: categorical[{col!r}] lists {twice[:5]!r:.120} more than once; "
                    "each value has one code"
                )
            out[col] = vocab
        return out
    if not isinstance(categorical, Sequence) or not all(isinstance(c, str) for c in categorical):
        raise TypeError(
            f"{where}: categorical must be a list of column names or a dict {{column: "
            f"[values]}}; got {categorical!r:.80}"
        )
    twice = list(dict.fromkeys(c for c in categorical if list(categorical).count(c) > 1))
    if twice:
        raise ValueError(f"{where}: categorical names column(s) {twice} more than once")
    return dict.fromkeys(categorical)


def is_categorical_type(arrow_type) -> bool:
    """Can a column of this Arrow type be coded (strings, integers, booleans, floats, or a
    dictionary of those)?"""
    import pyarrow.types as pat

    t = arrow_type.value_type if pat.is_dictionary(arrow_type) else arrow_type
    return (
        pat.is_string(t)
        or pat.is_large_string(t)
        or pat.is_integer(t)
        or pat.is_boolean(t)
        or pat.is_floating(t)
        or pat.is_null(t)
    )


def _plain(col):
    """``col`` (an Arrow array or chunked array) with a dictionary decoded to its values."""
    import pyarrow as pa

    if pa.types.is_dictionary(col.type):
        return col.cast(col.type.value_type)
    return col


def _present(values) -> list:
    """The values that stand for a category: not null, not NaN."""
    return [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]


def learn(columns: Iterable) -> list:
    """The sorted distinct values (nulls and NaN left out) of ``columns``, Arrow arrays of
    one column (a file's, a batch's each): a learned vocabulary. Values of different
    kinds (strings in one file, numbers in another) are a ``TypeError``."""
    import pyarrow.compute as pc

    seen: set = set()
    for col in columns:
        seen.update(_present(pc.unique(_plain(col)).to_pylist()))
    try:
        return sorted(seen, key=lambda v: (type(v) is not bool, v))
    except TypeError:
        kinds = sorted({type(v).__name__ for v in seen})
        raise TypeError(
            f"values of kinds {kinds} in one categorical column; give every file the same type"
        ) from None


class Vocabulary:
    """One column's vocabulary: :meth:`encode` turns its values into float64 codes."""

    __slots__ = ("_sets", "column", "values")

    def __init__(self, column: str, values: Sequence):
        self.column, self.values = column, list(values)
        self._sets: dict = {}  # Arrow type -> the vocabulary as an array of that type

    def _value_set(self, arrow_type, where: str):
        vs = self._sets.get(arrow_type)
        if vs is None:
            import pyarrow as pa

            try:
                vs = pa.array(self.values, type=arrow_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
                raise ValueError(
                    f"{where}: the vocabulary of {self.column!r} ({self.values[:5]!r:.80}...) "
                    f"does not fit the column's type {arrow_type} ({e})"
                ) from None
            self._sets[arrow_type] = vs
        return vs

    def encode(self, col, where: str, first_row: int = 0):
        """``col`` (an Arrow array or chunked array of this column) as a float64 Arrow
        array of codes, missing values null (NaN once read). A value outside the
        vocabulary is a ``ValueError`` naming the column, the value and its row
        (``first_row`` + its position in ``col``), starting with ``where``."""
        import pyarrow as pa
        import pyarrow.compute as pc

        col = _plain(col)
        if pa.types.is_null(col.type):
            return pa.nulls(len(col), pa.float64())
        codes = pc.index_in(col, value_set=self._value_set(col.type, where))
        floating = pa.types.is_floating(col.type)
        if not floating and codes.null_count == col.null_count:
            return codes.cast(pa.float64())  # every value found: the common case, no masks
        present = pc.is_valid(col)
        if floating:
            present = pc.and_(present, pc.invert(pc.is_nan(col)))
        unknown = pc.and_(present, pc.is_null(codes))
        if pc.any(unknown).as_py():
            at = pc.index(unknown, True).as_py()
            raise ValueError(
                f"{where}: column {self.column!r} holds {col[at].as_py()!r} (row "
                f"{first_row + at}), which is not in its vocabulary of {len(self.values)} "
                f"value(s); add it to categorical={{{self.column!r}: [...]}}, or let the "
                "vocabulary be learned (categorical=[...])"
            )
        if floating:
            codes = pc.if_else(present, codes, pa.scalar(None, codes.type))  # NaN: missing
        return codes.cast(pa.float64())
