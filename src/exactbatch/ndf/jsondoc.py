"""The JSON documents kept next to ``.ndf`` data, read strictly: a dataset's
``manifest.json`` and a file's names sidecar.

Whatever the bytes, reading one gives the document or an :class:`NdfError`
naming it and what was expected - never another exception. Refused: more
than :data:`MAX_DOC_BYTES` bytes; anything but UTF-8 JSON whose top level
is an object; nesting too deep for the parser; an integer of more than 20
digits (Python would otherwise parse one of 4,300 and then fail without
naming the file); ``NaN`` and ``Infinity`` (not JSON); a key given twice in
one object. Fields are typed strictly (:func:`get_int`): an integer is a
JSON integer - ``true`` and ``1.0`` are not - within its bounds.

Cost: the document is read whole and parsed once (a million-part manifest
is about 65 MB).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, TypeGuard, TypeVar, overload

from exactbatch.errors import NdfError
from exactbatch.hints import Foreign

__all__ = ["MAX_DOC_BYTES", "check_kind", "fetch_doc", "get_int", "parse_doc", "strict_int"]

MAX_DOC_BYTES = 256 << 20  # about 4 million parts in a manifest
_MAX_DIGITS = 20  # 2**64 - 1 has 20: every count and width fits


def _int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits (at most {_MAX_DIGITS})")
    return int(text)


def _constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        uses = Counter(k for k, _ in pairs)
        twice = sorted(k for k, n in uses.items() if n > 1)
        raise ValueError(f"key(s) {twice[:8]!r:.200} given more than once in one object")
    return out


def fetch_doc(fs: Foreign, key: str) -> bytes:
    """The bytes of the document at ``key`` on the fsspec filesystem ``fs`` (one GET), at
    most one byte more than :data:`MAX_DOC_BYTES` (:func:`parse_doc` refuses those); an
    empty object's are none (then :func:`parse_doc` names it)."""
    try:
        raw: bytes = fs.cat_file(key, start=0, end=MAX_DOC_BYTES + 1)
    except FileNotFoundError:
        raise
    except OSError:
        # S3 refuses every range of an empty object (416, InvalidRange: an OSError from
        # s3fs), where a local read gives no bytes: asked its size only then
        if fs.size(key) == 0:
            return b""
        raise
    return raw


def parse_doc(raw: bytes, where: str, what: str) -> dict[str, Any]:
    """The JSON object in ``raw``, or an :class:`NdfError` naming ``where`` (``what``: the
    kind of document, for the message)."""
    if len(raw) > MAX_DOC_BYTES:
        raise NdfError(
            f"{where}: {len(raw)} bytes is too large for {what} (at most {MAX_DOC_BYTES})"
        )
    try:
        doc = json.loads(raw, parse_int=_int, parse_constant=_constant, object_pairs_hook=_object)
    except RecursionError:
        raise NdfError(f"{where}: not {what}: its JSON is nested too deep") from None
    except ValueError as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise NdfError(f"{where}: not {what}: not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise NdfError(
            f"{where}: not {what}: expected a JSON object, found {type(doc).__name__} "
            f"{str(doc)[:60]}"
        )
    return doc


def check_kind(
    doc: dict[str, Any], where: str, what: str, fmt: str, version: int, hint: str
) -> None:
    """``doc`` must say ``"format": fmt`` and ``"version": version`` (an integer): else an
    :class:`NdfError` naming ``where`` and what it found (``hint``: what to do about a
    version this exactbatch does not read)."""
    if doc.get("format") != fmt:
        found = doc.get("format")
        raise NdfError(f"{where}: not {what}: expected format {fmt!r}, found format {found!r:.80}")
    found = doc.get("version")
    if not strict_int(found) or found != version:
        raise NdfError(
            f"{where}: {what} version {found!r:.40}; this exactbatch reads version "
            f"{version} only, an integer{hint}"
        )


def strict_int(value: object) -> TypeGuard[int]:
    """Is ``value`` an integer as a document may hold one (not a bool, not a float)?"""
    return isinstance(value, int) and not isinstance(value, bool)


_MISSING = object()
_T = TypeVar("_T")


@overload
def get_int(doc: dict[str, Any], key: str, where: str, hi: int) -> int: ...
@overload
def get_int(doc: dict[str, Any], key: str, where: str, hi: int, default: _T) -> int | _T: ...
def get_int(
    doc: dict[str, Any], key: str, where: str, hi: int, default: object = _MISSING
) -> object:
    """``doc[key]``: an integer in ``[0, hi]``, or an :class:`NdfError` naming ``where``,
    the key, what was expected and what was found. A missing key gives ``default``
    (when given) or the error."""
    value = doc.get(key, _MISSING)
    if value is _MISSING and default is not _MISSING:
        return default
    if not strict_int(value) or not 0 <= value <= hi:
        found = "nothing" if value is _MISSING else f"{value!r}"[:60]
        raise NdfError(f"{where}: {key!r} must be an integer in [0, {hi}]; found {found}")
    return value
