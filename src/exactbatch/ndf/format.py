"""The .ndf byte layout: a 28-byte header, then n rows of (d + l) float64.

Byte layout (little-endian)::

    bytes 0..3    b"NDF1"
    bytes 4..27   u64 n, u64 d, u64 l
    then n rows, each d feature values then l label values, float64

A valid file is exactly ``28 + 8*n*(d+l)`` bytes (:func:`expected_size`);
:func:`check_header` holds every rule a header must pass, for local files
and URLs alike.
"""

from __future__ import annotations

import struct

from exactbatch.errors import NdfError

__all__ = [
    "HEADER",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_FILE_BYTES",
    "check_header",
    "expected_size",
    "pack_header",
]

MAGIC = b"NDF1"
HEADER = struct.Struct("<4sQQQ")  # magic, n, d, l
HEADER_SIZE = HEADER.size  # 28
MAX_FILE_BYTES = (1 << 63) - 1  # the largest offset the OS can address


def expected_size(n: int, d: int, l: int) -> int:  # noqa: E741
    """Bytes of a valid file with this header (Python ints: never overflows)."""
    return HEADER_SIZE + 8 * n * (d + l)


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
    want = expected_size(n, d, l)
    # pragmas: no header gives a size of exactly MAX_FILE_BYTES (sizes are 4 mod 8, the bound
    # 7 mod 8), so > and >= cannot differ there
    if want > MAX_FILE_BYTES:  # pragma: no mutate
        raise NdfError(
            f"{path}: impossible header n={n}, d={d}, l={l}: 28 + 8*n*(d+l) = {want} bytes "
            f"exceeds the largest possible file ({MAX_FILE_BYTES} bytes); found {size} bytes"
        )
    if (
        n > MAX_FILE_BYTES
        or expected_size(1, d, l) > MAX_FILE_BYTES  # pragma: no mutate
    ):
        # With no rows (n = 0) or no values per row (d + l = 0) any n, d, l give a
        # 28-byte file; still, rows are numbered by int64 and a row must fit in a file.
        raise NdfError(
            f"{path}: impossible header n={n}, d={d}, l={l}: at most 2**63 - 1 rows, and one "
            f"row of 8*(d+l) bytes after the 28-byte header must fit in the largest possible "
            f"file ({MAX_FILE_BYTES} bytes); found {size} bytes"
        )
    if size != want:
        how = "short" if size < want else "long"  # pragma: no mutate (size != want here)
        raise NdfError(
            f"{path}: file too {how}: header n={n}, d={d}, l={l} needs 28 + 8*n*(d+l) = "
            f"{want} bytes, found {size} bytes"
        )
    return n, d, l
