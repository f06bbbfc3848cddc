"""What ``categorical=`` accepts (:func:`check_categorical`): column names, or each
column's vocabulary given; the rule it states is in :mod:`exactbatch.sources.categorical`.

A vocabulary of strings given as a Python list (or a NumPy array) of a million
entries is checked by loops in C (its types, its repeats: a tenth of a second),
never by Python code a value; its index is then built from one Arrow array
(:meth:`exactbatch.sources.string_keys.StringIndex.of`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["check_categorical"]


def check_categorical(categorical: object, where: str) -> dict[str, list[Any] | None]:
    """``categorical`` as ``{column: vocabulary or None}`` (None: learn it).

    ``categorical``: None, a column name, a list of names, or a mapping from
    names to their vocabularies (lists of distinct values; a NumPy array's scalars are
    taken as Python's: np.str_ as str, np.bool_ as bool). Anything else is
    a ``TypeError`` naming the argument; a name given twice, or a vocabulary
    with a repeated value, a ``ValueError``.
    """
    if categorical is None:
        return {}
    if isinstance(categorical, str):
        categorical = [categorical]
    if isinstance(categorical, Mapping):
        out: dict[str, list[Any] | None] = {}
        for col, values in categorical.items():
            if not isinstance(col, str):
                raise TypeError(f"{where}: categorical names columns by name; got {col!r}")
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                raise TypeError(
                    f"{where}: categorical[{col!r}] must be a list of values (the vocabulary); "
                    f"got {values!r:.80}"
                )
            vocab = _given(values)
            # True is not the category 1; strings only: themselves (no tuple a value)
            strs = set(map(type, vocab)) == {str}
            keys = vocab if strs else [(type(v) is bool, v) for v in vocab]
            if len(set(keys)) != len(keys):
                times = Counter(keys)  # (not keys.count a value: a large vocabulary's)
                twice = [v for k, v in zip(keys, vocab, strict=True) if times[k] > 1]
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


def _given(values: Iterable[Any]) -> list[Any]:
    """A vocabulary given, as a list: a NumPy array's scalars as Python's (np.str_ is not
    str, np.bool_ not bool), converted in C where none is left (a list of strings is
    copied, never looped over in Python: a million strings in milliseconds)."""
    import numpy as np

    flat = isinstance(values, np.ndarray) and values.ndim == 1
    vocab = values.tolist() if flat and isinstance(values, np.ndarray) else list(values)
    if any(issubclass(t, np.generic) for t in set(map(type, vocab))):
        vocab = [v.item() if isinstance(v, np.generic) else v for v in vocab]
    return vocab
