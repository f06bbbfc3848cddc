"""The manifest of a sharded ``.ndf`` dataset: ``manifest.json``, written last.

The manifest lists a dataset's parts in order, each with its file name, n
and byte size, with the dataset's d and l (and, when known, its column
names), under a ``"format"`` and a ``"version"`` key; docs/format.md has
the layout. :func:`read_manifest` checks every rule a manifest must pass
(an :class:`~exactbatch.errors.NdfError` naming the manifest or the part
otherwise); :func:`write_manifest` writes one atomically. Paths are local
folders or URLs (any fsspec protocol) alike.
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from exactbatch.checks import check_int
from exactbatch.errors import NdfError
from exactbatch.hints import PathLike
from exactbatch.ndf.format import MAX_FILE_BYTES, MAX_ROWS, MAX_WIDTH, expected_size, shape_error
from exactbatch.ndf.jsondoc import check_kind, get_int, parse_doc
from exactbatch.ndf.names import check_categories, read_names, validate_names
from exactbatch.ndf.storage import location
from exactbatch.ndf.temps import WRITE_ID

__all__ = [
    "FORMAT",
    "MANIFEST",
    "VERSION",
    "Manifest",
    "PartInfo",
    "file_not_dataset",
    "no_manifest",
    "part_name",
    "read_manifest",
    "write_manifest",
]

MANIFEST = "manifest.json"
FORMAT = "exactbatch-ndf-dataset"  # the manifest's "format" value
VERSION = 1  # the manifest's "version": the one this code writes and reads


class PartInfo(NamedTuple):
    """One part of a dataset as the manifest lists it: its file name (in the
    dataset's folder), its rows ``n`` and its size in bytes ``nbytes``."""

    name: str
    n: int
    nbytes: int


class Manifest(NamedTuple):
    """A parsed, checked ``manifest.json`` (:func:`read_manifest`)."""

    parts: tuple[PartInfo, ...]
    d: int
    l: int  # noqa: E741
    features: tuple[str, ...] | None
    labels: tuple[str, ...] | None
    # the vocabularies of columns stored as integer codes (exactbatch.ndf.names); None: none
    categories: dict[str, list[Any]] | None = None

    @property
    def n(self) -> int:
        return sum(p.n for p in self.parts)


def part_name(index: int, write_id: str | None = None) -> str:
    """The file name of part ``index`` (0-based) of the dataset write ``write_id``:
    ``part-00042-<write id>.ndf`` (see :mod:`exactbatch.ndf.dataset_protocol`). Without a
    write id, ``part-00042.ndf``: how parts were named before write ids (such datasets
    read as any other)."""
    index = check_int("index", index, 0)
    if write_id is None:
        return f"part-{index:05d}.ndf"
    if not isinstance(write_id, str) or not re.fullmatch(WRITE_ID, write_id):
        raise ValueError(f"write_id must be a write id from start_dataset; got {write_id!r}")
    return f"part-{index:05d}-{write_id}.ndf"


# -- the manifest -------------------------------------------------------------------------


def _count(v: object) -> bool:
    """A count as a manifest's part may give it: an int (NumPy's too), never a bool."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _check_parts(parts: Iterable[Any], d: int, l: int, where: str) -> tuple[PartInfo, ...]:  # noqa: E741
    """The parts as PartInfo, each consistent with d and l, and their rows no more than
    :data:`MAX_ROWS` in all (Python ints: nothing wraps); NdfError naming the bad one."""
    out, seen, total = [], set(), 0
    for k, p in enumerate(parts):
        if isinstance(p, dict):
            p = (p.get("name"), p.get("n"), p.get("nbytes"))
        try:
            name, n, nbytes = p
        except (TypeError, ValueError):
            raise NdfError(f"{where}: part {k} must be (name, n, nbytes); got {p!r:.80}") from None
        if not isinstance(name, str) or not name or name in (".", "..") or "/" in name:
            raise NdfError(f"{where}: part {k} has no plain file name: {name!r:.80}")
        if "\\" in name or name == MANIFEST or "\0" in name or not _encodable(name):
            raise NdfError(f"{where}: part {k} has a file name a part cannot have: {name!r:.80}")
        if name in seen:
            raise NdfError(f"{where}: part {name} is listed twice")
        seen.add(name)
        for what, v, hi in (("n", n, MAX_ROWS), ("nbytes", nbytes, MAX_FILE_BYTES)):
            if not _count(v) or not 0 <= v <= hi:
                raise NdfError(
                    f"{where}: part {name}: {what} must be an integer >= 0 (at most {hi}); "
                    f"got {v!r:.60}"
                )
        n, nbytes = int(n), int(nbytes)
        why = shape_error(n, d, l)
        if why is not None:
            raise NdfError(f"{where}: part {name}: no part can have n={n}, d={d}, l={l}: {why}")
        want = expected_size(n, d, l)
        if nbytes != want:
            raise NdfError(
                f"{where}: part {name}: nbytes={nbytes} does not match n={n}, d={d}, l={l} "
                f"(a part of n rows is 28 + 8*n*(d+l) = {want} bytes)"
            )
        total += n
        if total > MAX_ROWS:
            raise NdfError(
                f"{where}: the parts up to {name} hold {total} rows in all; a dataset holds "
                f"at most {MAX_ROWS} (2**63 - 1)"
            )
        out.append(PartInfo(name, n, nbytes))
    return tuple(out)


def _encodable(name: str) -> bool:
    try:
        os.fsencode(name)
    except UnicodeError:
        return False
    return True


def _widths(d: int, l: int, where: str) -> None:  # noqa: E741
    if d + l > MAX_WIDTH:
        raise NdfError(
            f"{where}: d={d}, l={l}: at most {MAX_WIDTH} (2**31 - 1) values a row (d + l)"
        )


def _parse_manifest(raw: bytes, where: str) -> Manifest:
    m = parse_doc(raw, where, "a dataset manifest")
    hint = " (upgrade exactbatch, or write the dataset again)"
    check_kind(m, where, "a dataset manifest", FORMAT, VERSION, hint)
    d, l = get_int(m, "d", where, MAX_WIDTH), get_int(m, "l", where, MAX_WIDTH)  # noqa: E741
    _widths(d, l, where)
    if not isinstance(m.get("parts"), list):
        raise NdfError(f"{where}: 'parts' must be a list of parts; got {m.get('parts')!r:.80}")
    parts = _check_parts(m["parts"], d, l, where)
    total = sum(p.n for p in parts)
    if get_int(m, "n", where, MAX_ROWS, default=total) != total:
        raise NdfError(f"{where}: n={m['n']!r} but the parts' n add up to {total}")
    features, labels = m.get("features"), m.get("labels")
    names = read_names(features, labels, d, l, where)
    try:
        cats = check_categories(m.get("categories"), names, where)
    except (TypeError, ValueError) as e:
        raise NdfError(str(e)) from None
    return Manifest(
        parts,
        d,
        l,
        # names is None only when both are (the check's rule)
        None if features is None or names is None else tuple(names[0]),
        None if labels is None or names is None else tuple(names[1]),
        cats,
    )


def _manifest_bytes(man: Manifest) -> bytes:
    out = {"format": FORMAT, "version": VERSION, "n": man.n, "d": man.d, "l": man.l}
    if man.features is not None:
        out["features"] = list(man.features)
    if man.labels is not None:
        out["labels"] = list(man.labels)
    if man.categories:
        out["categories"] = man.categories
    # one part a line: a diff or a `head` of the manifest stays readable
    parts = ",\n".join("  " + json.dumps(p._asdict()) for p in man.parts)
    head = json.dumps(out, indent=1)[:-2]  # without the closing "\n}"
    return f'{head},\n "parts": [\n{parts}\n ]\n}}\n'.encode()


def read_manifest(path: PathLike, *, storage_options: dict[str, Any] | None = None) -> Manifest:
    """The checked manifest of the dataset at ``path`` (a folder or a URL).

    A folder without ``manifest.json`` is an :class:`NdfError` ("not a
    dataset"), and so is a file, a manifest that is not valid JSON (or not
    a regular file, or over 256 MiB: :mod:`exactbatch.ndf.jsondoc`), of
    another format or version, with a field of the wrong type or out of
    bounds (an integer is a JSON integer: not ``true``, not ``1.0``), whose
    parts disagree with its d and l or hold more than 2**63 - 1 rows in all,
    or whose names fail :func:`~exactbatch.ndf.names.validate_names`. A path
    that does not exist is ``FileNotFoundError``.
    """
    folder = location(path, storage_options)
    doc = folder.child(MANIFEST)
    try:
        raw = doc.read_doc("a dataset manifest")
    except (FileNotFoundError, NotADirectoryError):
        if folder.is_file():
            raise file_not_dataset(folder.path) from None
        if not folder.exists():
            raise FileNotFoundError(errno.ENOENT, "no such dataset folder", folder.path) from None
        raise no_manifest(folder.path) from None
    return _parse_manifest(raw, doc.path)


def file_not_dataset(path: str) -> NdfError:
    """The error for a file where a dataset folder was expected."""
    return NdfError(
        f"{path}: not a dataset: expected a folder holding {MANIFEST}, found a file "
        "(open a single .ndf file with open_ndf)"
    )


def no_manifest(path: str) -> NdfError:
    """The error for a folder that holds no manifest."""
    return NdfError(
        f"{path}: not a dataset: the folder holds no {MANIFEST} (a dataset's manifest is "
        "written last: was its write interrupted?)"
    )


def write_manifest(
    path: PathLike,
    parts: Iterable[Any],
    d: int,
    l: int,  # noqa: E741
    *,
    features: Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
    categories: Mapping[str, Sequence[Any]] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Manifest:
    """Write ``manifest.json`` for the parts ``parts`` (in order) of the dataset at ``path``,
    atomically: the step that makes the folder a dataset, so call it last.

    ``parts``: :class:`PartInfo` (or ``(name, n, nbytes)`` tuples, or dicts
    with those keys), as :func:`write_part` returns them. Each part's
    ``nbytes`` must be ``28 + 8*n*(d+l)`` and names must be plain file names
    listed once (else :class:`NdfError` naming the part); the part files
    themselves are not opened (``exactbatch info`` checks them).
    ``features``/``labels``: column names to keep with the data (``d`` and
    ``l`` of them), or None. ``categories``: the vocabularies of columns stored
    as codes, ``{column: [value, ...]}`` (:func:`~exactbatch.ndf.names.check_categories`:
    they need names). Nothing else is written or removed: a dataset
    write ends with :func:`~exactbatch.ndf.dataset_protocol.finish_dataset`,
    which calls this and then removes the parts of the dataset it replaced.
    """
    doc = location(path, storage_options).child(MANIFEST)
    d, l = check_int("d", d, 0), check_int("l", l, 0)  # noqa: E741
    where = doc.path
    _widths(d, l, where)
    names = validate_names(features, labels, d, l, where)
    feats = None if features is None or names is None else tuple(names[0])
    labs = None if labels is None or names is None else tuple(names[1])
    cats = check_categories(categories, names, where)
    man = Manifest(_check_parts(list(parts), d, l, where), d, l, feats, labs, cats)
    doc.write_doc(_manifest_bytes(man))
    return man
