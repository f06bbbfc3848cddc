"""Column names of ``.ndf`` data: checked against d and l, and the sidecar of a single file.

The ``.ndf`` byte format carries no names. A single file's names live in a
small JSON sidecar next to it, ``PATH + ".json"`` (``data.ndf.json`` for
``data.ndf``)::

    {"format": "exactbatch.ndf.names", "version": 1,
     "n": 1000, "d": 3, "l": 1,
     "features": ["age", "income", "tenure"], "labels": ["churned"]}

Columns stored as integer codes (``categorical=`` in ``exactbatch convert``,
``parquet_source``, ``to_ndf_dataset``) add their vocabularies under
``"categories"``: ``{"city": ["Lyon", "Paris"]}`` (code ``k`` is the
column's ``k``-th value; :func:`check_categories`). The key is optional:
files written before it, or without categorical columns, have none, and a
reader that does not know it ignores it.

n, d and l are those of the file the names were written with: a sidecar
whose numbers differ from its file's header describes other data (left by
an older write) and is an :class:`NdfError` naming both, never names
silently attached to the wrong columns. A sharded dataset's manifest
carries the same ``"features"`` and ``"labels"`` lists. Without names, the
columns are called ``x0..x{d-1}`` and ``y0..y{l-1}`` (:func:`default_names`,
made one by one when used: a header may claim 2**31 columns of no rows).

Names are checked by one function, :func:`validate_names`, wherever they are
written (``save_ndf``, ``NdfWriter``, ``save_ndf_dataset``, ``write_manifest``,
``exactbatch.dask.to_ndf_dataset``, ``exactbatch convert``) or read (a
sidecar, a manifest: :func:`read_names`, the same check as an ``NdfError``):
d and l distinct, non-empty strings without NUL characters.

What it costs: nothing when names are not asked for; reading them is one
small read (a local file, or one GET for a URL).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

from exactbatch.errors import NdfError
from exactbatch.hints import Foreign, PathLike
from exactbatch.ndf.format import MAX_ROWS, MAX_WIDTH
from exactbatch.ndf.jsondoc import MAX_DOC_BYTES, check_kind, fetch_doc, get_int, parse_doc
from exactbatch.ndf.regular import read_regular

__all__ = [
    "SIDECAR_FORMAT",
    "SIDECAR_SUFFIX",
    "SIDECAR_VERSION",
    "DefaultNames",
    "check_categories",
    "default_names",
    "read_names",
    "read_sidecar",
    "read_sidecar_doc",
    "sidecar_bytes",
    "sidecar_path",
    "validate_names",
]

SIDECAR_SUFFIX = ".json"
SIDECAR_FORMAT = "exactbatch.ndf.names"
SIDECAR_VERSION = 1
_SIDES = {"features": "x", "labels": "y"}  # the prefix of each side's default names
# checked names: (features, labels), each a tuple of str or DefaultNames
Names = tuple[Sequence[str], Sequence[str]]
# checked vocabularies: {column: [value, ...]}, values as JSON keeps them (str, int,
# finite float, bool)
Categories = dict[str, list[Any]]


class DefaultNames(Sequence[str]):
    """The names ``prefix + "0"`` .. ``prefix + str(size - 1)``, each made when asked for.

    A sequence of str that compares equal to the tuple (or list) of the same
    names; ``len``, indexing, ``in``, ``index`` and ``count`` cost O(1), so a file that
    claims 2**31 columns and holds no rows costs nothing to name.
    """

    __slots__ = ("prefix", "size")

    def __init__(self, prefix: str, size: int):
        self.prefix, self.size = prefix, int(size)

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...
    def __getitem__(self, i: int | slice) -> str | tuple[str, ...]:
        if isinstance(i, slice):
            return tuple(f"{self.prefix}{j}" for j in range(self.size)[i])
        return f"{self.prefix}{range(self.size)[i]}"

    def __iter__(self) -> Iterator[str]:
        return (f"{self.prefix}{j}" for j in range(self.size))

    def _position(self, name: object) -> int | None:
        """The index of ``name`` here, or None."""
        if not isinstance(name, str) or not name.startswith(self.prefix):
            return None
        digits = name[len(self.prefix) :]
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 19:
            return None
        if digits[0] == "0" and digits != "0":  # "x01" is not a default name
            return None
        j = int(digits)
        return j if j < self.size else None

    def __contains__(self, name: object) -> bool:
        return self._position(name) is not None

    def index(self, name: object, start: int = 0, stop: int | None = None) -> int:
        j = self._position(name)
        if j is None or j not in range(self.size)[start:stop]:
            raise ValueError(f"{name!r} is not in the names {self!r}")
        return j

    def count(self, name: object) -> int:
        return int(name in self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DefaultNames):
            return self.size == other.size and (self.prefix == other.prefix or not self.size)
        if isinstance(other, (tuple, list)):
            return len(other) == self.size and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))  # as the tuple it equals (only made when asked for)

    def __repr__(self) -> str:
        if self.size <= 6:
            return repr(tuple(self))
        return f"('{self.prefix}0', '{self.prefix}1', ..., '{self.prefix}{self.size - 1}')"


def default_names(d: int, l: int) -> tuple[DefaultNames, DefaultNames]:  # noqa: E741
    """``(("x0", ..., "x{d-1}"), ("y0", ..., "y{l-1}"))``: the names of unnamed columns,
    as :class:`DefaultNames` (made when used)."""
    return DefaultNames("x", d), DefaultNames("y", l)


def _name_list(what: str, names: object, count: int, where: str) -> Sequence[str]:
    if isinstance(names, DefaultNames) and names.prefix == _SIDES[what]:
        bad = []  # the defaults, valid by construction: never made one by one
    elif isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
        raise TypeError(f"{where}: {what} must be a list of column names; got {names!r:.80}")
    else:
        names = tuple(names)
        bad = [c for c in names if not isinstance(c, str)]
    if bad:
        raise TypeError(f"{where}: {what} names must be strings; got {bad[:5]!r:.200}")
    if len(names) != count:
        raise ValueError(
            f"{where}: {what} names {len(names)} columns {list(names[:8])!r:.200}; the data has "
            f"{count} {what} columns"
        )
    if not isinstance(names, DefaultNames):
        bad = [c for c in names if not c.strip() or "\0" in c or not _encodable(c)]
        if bad:
            raise ValueError(
                f"{where}: {what} names must be non-empty text without NUL characters; "
                f"got {bad[:5]!r:.200}"
            )
    return names


def _encodable(name: str) -> bool:
    try:
        name.encode("utf-8")  # a lone surrogate (JSON "\ud800") cannot be written anywhere
    except UnicodeEncodeError:
        return False
    return True


def validate_names(
    features: object,
    labels: object,
    d: int,
    l: int,  # noqa: E741
    where: str,
) -> Names | None:
    """``(features, labels)`` as sequences of names checked against ``d`` and ``l``: the
    one check of column names, for every writer and reader of them.

    None for both means no names (returns None); None for one side gives
    that side the default names. A side that is not a list of str is a
    ``TypeError``; a count other than d (or l), an empty name (or one of
    spaces), a NUL character or a lone surrogate in a name, or a name used
    twice across both lists (a feature named like a label, default names
    included), a ``ValueError``. Errors start with ``where``. Readers call
    :func:`read_names`, which makes them an :class:`NdfError`.
    """
    if features is None and labels is None:
        return None
    dx, dy = default_names(d, l)
    fx = dx if features is None else _name_list("features", features, d, where)
    fy = dy if labels is None else _name_list("labels", labels, l, where)
    given = [side for side in (fx, fy) if not isinstance(side, DefaultNames)]
    defaults = [side for side in (fx, fy) if isinstance(side, DefaultNames)]
    uses = Counter(c for side in given for c in side)
    twice = [c for c, k in uses.items() if k > 1 or any(c in side for side in defaults)]
    if twice:
        raise ValueError(
            f"{where}: column name(s) {twice[:8]!r:.200} are used more than once; name each once"
        )
    return fx, fy


def read_names(
    features: object,
    labels: object,
    d: int,
    l: int,  # noqa: E741
    where: str,
) -> Names | None:
    """:func:`validate_names` for names read from a file: its errors as an
    :class:`NdfError` naming ``where``."""
    try:
        return validate_names(features, labels, d, l, where)
    except (TypeError, ValueError) as e:
        raise NdfError(str(e)) from None


def sidecar_path(path: PathLike) -> str:
    """Where the names of the ``.ndf`` at ``path`` (a path or a URL) live: ``path + ".json"``."""
    return os.fspath(path) + SIDECAR_SUFFIX


def check_categories(categories: object, names: Names | None, where: str) -> Categories | None:
    """``categories`` (``{column: [value, ...]}``) checked against the columns' names: the
    one check of stored vocabularies, for writers (``ValueError``/``TypeError``) and
    readers (:func:`read_sidecar_doc`, :func:`~exactbatch.ndf.manifest.read_manifest`
    make them an :class:`NdfError`).

    ``names``: ``(features, labels)``, as :func:`validate_names` returns them
    (None: the data has no names). None or ``{}``: no categorical column
    (returns None). Each key must name a feature or a label, so categories
    need named columns; each vocabulary is a
    list of distinct values, each a string, an integer, a finite float or a
    boolean (what JSON keeps exactly), all strings or all not.
    """
    if categories is None or (isinstance(categories, dict) and not categories):
        return None
    if not isinstance(categories, dict):
        raise TypeError(
            f"{where}: categories must be a dict {{column: [values]}}; got {categories!r:.80}"
        )
    features, labels = names or ((), ())
    unknown = [c for c in categories if c not in features and c not in labels]
    if unknown:
        raise ValueError(
            f"{where}: categories name column(s) {unknown[:8]!r:.200} that the data does not "
            f"have; its columns are {[*features[:20], *labels[:20]][:20]!r:.400}"
        )
    out = {}
    for col, values in categories.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
            raise TypeError(
                f"{where}: the categories of {col!r} must be a list; got {values!r:.80}"
            )
        bad = [v for v in values if not _category_value(v)]
        kinds = {isinstance(v, str) for v in values}
        if bad or len(kinds) > 1:
            why = f"got {bad[:3]!r:.120}" if bad else "got strings and numbers mixed"
            raise ValueError(
                f"{where}: the categories of {col!r} must be strings, integers, finite floats "
                f"or booleans, all strings or none; {why}"
            )
        if len({(type(v) is bool, v) for v in values}) != len(values):  # True is not 1
            twice = [v for v in dict.fromkeys(values) if list(values).count(v) > 1]
            raise ValueError(
                f"{where}: the categories of {col!r} list value(s) {twice[:5]!r:.120} more than "
                "once; each value has one code"
            )
        out[col] = list(values)
    return out


def _category_value(v: object) -> bool:
    if isinstance(v, float):
        return v == v and v not in (float("inf"), float("-inf"))
    return isinstance(v, (str, int)) and (not isinstance(v, str) or _encodable(v))


def sidecar_bytes(
    features: Sequence[str],
    labels: Sequence[str],
    n: int,
    d: int,
    l: int,  # noqa: E741
    categories: Mapping[str, Sequence[Any]] | None = None,
) -> bytes:
    """The sidecar's content for names already checked by :func:`validate_names` (and
    vocabularies by :func:`check_categories`: None or ``{}`` writes no key)."""
    doc = {
        "format": SIDECAR_FORMAT,
        "version": SIDECAR_VERSION,
        "n": int(n),
        "d": int(d),
        "l": int(l),
        "features": list(features),
        "labels": list(labels),
    }
    if categories:
        doc["categories"] = {c: list(v) for c, v in categories.items()}
    return (json.dumps(doc) + "\n").encode()


def read_sidecar(
    path: PathLike,
    n: int,
    d: int,
    l: int,  # noqa: E741
    *,
    fs: Foreign = None,
    key: str | None = None,
) -> Names | None:
    """``(features, labels)`` from the sidecar of the ``.ndf`` at ``path``; None if it has
    none. See :func:`read_sidecar_doc`, which gives its categories too."""
    doc = read_sidecar_doc(path, n, d, l, fs=fs, key=key)
    return None if doc is None else doc[:2]


def read_sidecar_doc(
    path: PathLike,
    n: int,
    d: int,
    l: int,  # noqa: E741
    *,
    fs: Foreign = None,
    key: str | None = None,
) -> tuple[Sequence[str], Sequence[str], Categories] | None:
    """``(features, labels, categories)`` from the sidecar of the ``.ndf`` at ``path``
    (``categories`` a dict, ``{}`` when it stores none); None if it has none.

    ``n``, ``d`` and ``l`` are the file's own (its header): a sidecar for
    other data, or one that is not a names sidecar of a known version
    (malformed JSON, a field of the wrong type, bad names: see
    :mod:`exactbatch.ndf.jsondoc` and :func:`validate_names`), is an
    :class:`NdfError` naming it. For a URL, ``fs`` and ``key`` are the
    filesystem and the object's key (one GET of the sidecar).
    """
    where = sidecar_path(path)
    what = "a names sidecar"
    try:
        if fs is None:
            raw = read_regular(where, MAX_DOC_BYTES, what)
        elif key is None:  # as os.fspath(None) did
            raise TypeError("read_sidecar_doc: fs= needs the object's key=")
        else:
            raw = fetch_doc(fs, sidecar_path(key))
    except FileNotFoundError:
        return None
    doc = parse_doc(raw, where, what)
    check_kind(doc, where, what, SIDECAR_FORMAT, SIDECAR_VERSION, "")
    limits = (("n", MAX_ROWS), ("d", MAX_WIDTH), ("l", MAX_WIDTH))
    found = tuple(get_int(doc, k, where, hi) for k, hi in limits)
    if found != (n, d, l):
        raise NdfError(
            f"{where}: the names sidecar describes other data (n, d, l = {found}) than "
            f"{os.fspath(path)} (n, d, l = {(n, d, l)}): it was left by an earlier write; "
            "remove it, or write the file again with its names"
        )
    names = read_names(doc.get("features"), doc.get("labels"), d, l, where)
    if names is None:  # as before categories: a sidecar naming nothing names nothing
        return None
    try:
        cats = check_categories(doc.get("categories"), names, where)
    except (TypeError, ValueError) as e:
        raise NdfError(str(e)) from None
    return (*names, cats or {})
