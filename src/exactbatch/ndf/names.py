"""Column names of ``.ndf`` data: checked against d and l, and the sidecar of a single file.

The ``.ndf`` byte format carries no names. A single file's names live in a
small JSON sidecar next to it, ``PATH + ".json"`` (``data.ndf.json`` for
``data.ndf``)::

    {"format": "exactbatch.ndf.names", "version": 1,
     "n": 1000, "d": 3, "l": 1,
     "features": ["age", "income", "tenure"], "labels": ["churned"]}

n, d and l are those of the file the names were written with: a sidecar
whose numbers differ from its file's header describes other data (left by
an older write) and is an :class:`NdfError` naming both, never names
silently attached to the wrong columns. A sharded dataset's manifest
carries the same ``"features"`` and ``"labels"`` lists. Without names, the
columns are called ``x0..x{d-1}`` and ``y0..y{l-1}`` (:func:`default_names`).

What it costs: nothing when names are not asked for; reading them is one
small read (a local file, or one GET for a URL).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from exactbatch.errors import NdfError

__all__ = [
    "SIDECAR_FORMAT",
    "SIDECAR_SUFFIX",
    "SIDECAR_VERSION",
    "check_names",
    "default_names",
    "read_sidecar",
    "sidecar_bytes",
    "sidecar_path",
]

SIDECAR_SUFFIX = ".json"
SIDECAR_FORMAT = "exactbatch.ndf.names"
SIDECAR_VERSION = 1


def default_names(d: int, l: int) -> tuple[tuple[str, ...], tuple[str, ...]]:  # noqa: E741
    """``(("x0", ..., "x{d-1}"), ("y0", ..., "y{l-1}"))``: the names of unnamed columns."""
    return tuple(f"x{j}" for j in range(d)), tuple(f"y{k}" for k in range(l))


def _name_list(what: str, names, count: int, where: str) -> tuple[str, ...]:
    if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
        raise TypeError(f"{where}: {what} must be a list of column names; got {names!r}")
    names = tuple(names)
    bad = [c for c in names if not isinstance(c, str) or not c.strip()]
    if bad:
        raise TypeError(f"{where}: {what} names must be non-empty strings; got {bad[:5]!r}")
    if len(names) != count:
        raise ValueError(
            f"{where}: {what} names {len(names)} columns {list(names)[:8]}; the data has "
            f"{count} {what} columns"
        )
    return names


def check_names(features, labels, d: int, l: int, where: str):  # noqa: E741
    """``(features, labels)`` as tuples of names checked against ``d`` and ``l``.

    None for both means no names (returns None); None for one side gives
    that side the default names. A name that is not a non-empty string is a
    ``TypeError``; a count other than d (or l), or a name used twice across
    both lists, a ``ValueError``. Errors start with ``where``.
    """
    if features is None and labels is None:
        return None
    dx, dy = default_names(d, l)
    fx = dx if features is None else _name_list("features", features, d, where)
    fy = dy if labels is None else _name_list("labels", labels, l, where)
    both = [*fx, *fy]
    twice = list(dict.fromkeys(c for c in both if both.count(c) > 1))
    if twice:
        raise ValueError(f"{where}: column name(s) {twice} are used more than once; name each once")
    return fx, fy


def sidecar_path(path) -> str:
    """Where the names of the ``.ndf`` at ``path`` (a path or a URL) live: ``path + ".json"``."""
    return os.fspath(path) + SIDECAR_SUFFIX


def sidecar_bytes(features, labels, n: int, d: int, l: int) -> bytes:  # noqa: E741
    """The sidecar's content for names already checked by :func:`check_names`."""
    doc = {
        "format": SIDECAR_FORMAT,
        "version": SIDECAR_VERSION,
        "n": int(n),
        "d": int(d),
        "l": int(l),
        "features": list(features),
        "labels": list(labels),
    }
    return (json.dumps(doc) + "\n").encode()


def read_sidecar(path, n: int, d: int, l: int, *, fs=None, key=None):  # noqa: E741
    """``(features, labels)`` from the sidecar of the ``.ndf`` at ``path``; None if it has none.

    ``n``, ``d`` and ``l`` are the file's own (its header): a sidecar for
    other data, or one that is not a names sidecar of a known version, is an
    :class:`NdfError` naming it. For a URL, ``fs`` and ``key`` are the
    filesystem and the object's key (one GET of the sidecar).
    """
    where = sidecar_path(path)
    try:
        if fs is None:
            with open(where, "rb") as f:
                raw = f.read()
        else:
            raw = fs.cat_file(sidecar_path(key))
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NdfError(f"{where}: the names sidecar is not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != SIDECAR_FORMAT:
        raise NdfError(
            f"{where}: expected an exactbatch names sidecar (format {SIDECAR_FORMAT!r}); "
            f"found {str(doc)[:80]}"
        )
    if doc.get("version") != SIDECAR_VERSION:
        raise NdfError(
            f"{where}: names sidecar version {doc.get('version')!r}; this exactbatch reads "
            f"version {SIDECAR_VERSION}"
        )
    found = tuple(doc.get(k) for k in ("n", "d", "l"))
    if found != (n, d, l):
        raise NdfError(
            f"{where}: the names sidecar describes other data (n, d, l = {found}) than "
            f"{os.fspath(path)} (n, d, l = {(n, d, l)}): it was left by an earlier write; "
            "remove it, or write the file again with its names"
        )
    try:
        return check_names(doc.get("features"), doc.get("labels"), d, l, where)
    except (TypeError, ValueError) as e:
        raise NdfError(str(e)) from None
