"""The .ndf byte layout: a 28-byte header, then n rows of (d + l) float64.

Byte layout (little-endian)::

    bytes 0..3    b"NDF1"
    bytes 4..27   u64 n, u64 d, u64 l
    then n rows, each d feature values then l label values, float64

A valid file is exactly ``28 + 8*n*(d+l)`` bytes (:func:`expected_size`),
with at most :data:`MAX_ROWS` rows of at most :data:`MAX_WIDTH` values
(``d + l``), and no larger than :data:`MAX_FILE_BYTES`.
:func:`check_header` holds every rule a header must pass, for local files
and URLs alike; :func:`shape_error` the limits alone, which manifests,
names sidecars and writers check too.
"""

from __future__ import annotations

import struct

from exactbatch.errors import NdfError

__all__ = [
    "HEADER",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_FILE_BYTES",
    "MAX_ROWS",
    "MAX_WIDTH",
    "check_header",
    "check_shape",
    "expected_size",
    "pack_header",
    "shape_error",
]

MAGIC = b"NDF1"
HEADER = struct.Struct("<4sQQQ")  # magic, n, d, l
HEADER_SIZE = HEADER.size  # 28
MAX_FILE_BYTES = (1 << 63) - 1  # the largest offset the OS can address
MAX_ROWS = (1 << 63) - 1  # rows are numbered by int64
# Values a row (d + l): a column index fits a C int, and a row's bytes any size_t.
# Far above any real table, and it bounds what a header can claim for nothing: a
# file with no rows costs 28 bytes whatever its d.
MAX_WIDTH = (1 << 31) - 1


def expected_size(n: int, d: int, l: int) -> int:  # noqa: E741
    """Bytes of a valid file with this header (Python ints: never overflows)."""
    return HEADER_SIZE + 8 * n * (d + l)


def shape_error(n: int, d: int, l: int) -> str | None:  # noqa: E741
    """Why no ``.ndf`` of ``n`` rows, ``d`` features and ``l`` labels can exist (the
    limits above), or None. Python ints: nothing wraps."""
    if d + l > MAX_WIDTH:
        return f"at most {MAX_WIDTH} (2**31 - 1) values a row, but d + l = {d + l}"
    if n > MAX_ROWS:
        return f"at most {MAX_ROWS} (2**63 - 1) rows, but n = {n}"
    want = expected_size(n, d, l)
    if want > MAX_FILE_BYTES:
        return (
            f"28 + 8*n*(d+l) = {want} bytes exceeds the largest possible file "
            f"({MAX_FILE_BYTES} bytes)"
        )
    return None


def check_shape(n: int, d: int, l: int, where: str) -> None:  # noqa: E741
    """:class:`NdfError` naming ``where`` if no file of this shape can exist
    (:func:`shape_error`): what writers check before they write."""
    why = shape_error(n, d, l)
    if why is not None:
        raise NdfError(f"{where}: impossible shape n={n}, d={d}, l={l}: {why}")


def pack_header(n: int, d: int, l: int) -> bytes:  # noqa: E741
    """The 28 header bytes of a file of ``n`` rows, ``d`` features and ``l`` labels."""
    return HEADER.pack(MAGIC, n, d, l)


def check_header(head: bytes, size: int, path: str) -> tuple[int, int, int]:
    """``(n, d, l)`` from a file's first bytes (up to 28) and its size, or :class:`NdfError`.

    The one place the header rules live: local files and URLs alike. Each
    error names ``path``, what was expected and what was found.
    """
    if size == 0:
        raise NdfError(f"{path}: empty file; expected an .ndf file (a {HEADER_SIZE}-byte header)")
    head = bytes(head[:HEADER_SIZE])
    if head[:4] != MAGIC[: len(head[:4])]:
        raise NdfError(f"{path}: not an .ndf file: expected magic {MAGIC!r}, found {head[:4]!r}")
    if len(head) < HEADER_SIZE:
        raise NdfError(
            f"{path}: short header: expected {HEADER_SIZE} bytes "
            f"(magic, n, d, l), found only {len(head)}"
        )
    _, n, d, l = HEADER.unpack(head)  # noqa: E741
    why = shape_error(n, d, l)
    if why is not None:
        raise NdfError(f"{path}: impossible header n={n}, d={d}, l={l}: {why}; found {size} bytes")
    want = expected_size(n, d, l)
    if size != want:
        how = "short" if size < want else "long"  # pragma: no mutate (size != want here)
        raise NdfError(
            f"{path}: file too {how}: header n={n}, d={d}, l={l} needs 28 + 8*n*(d+l) = "
            f"{want} bytes, found {size} bytes"
        )
    return n, d, l
