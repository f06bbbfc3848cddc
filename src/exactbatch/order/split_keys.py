"""The per-row labels a split reads (``groups=``, ``key=``, ``stratify=``) and the keyed
hash that makes a split by ``key=`` survive growth.

:func:`row_labels` checks one label per row (an array, or :class:`Labels`:
an array with the name an error gives it, such as a source's column that
:mod:`exactbatch.sources.splitting` looked up) and refuses what cannot label
a row (a wrong length, NaN, None). :func:`label_codes` turns labels into
0 .. G-1 in their sorted order. Arrays only: the order never reads a source.

:func:`key_hashes` maps each key to a 64-bit value that depends only on the
key and the seed, never on the other rows: so a row keeps its hash, and its
side of a split, however many rows are added. The hash, stable by
specification (a change is a breaking change):

- integer keys (any int dtype, bools, and floats holding whole numbers, so
  the id ``17`` hashes alike from an int64 Parquet column and from a float64
  ``.ndf`` column): the int64 value ``v`` as a uint64, then
  ``mix(mix(v ^ k0) ^ k1)``, where ``mix`` is SplitMix64's finaliser (a
  bijection of 64-bit words) and ``k0, k1`` come from ``SeedSequence([tag,
  seed])``;
- any other key (strings, bytes, fractional floats): BLAKE2b with an 8-byte
  digest, keyed by ``k0, k1``, over a type tag and the value's bytes (UTF-8
  for strings, the float64's 8 little-endian bytes with -0.0 read as 0.0).

The key is not a secret (the seed is): the hash spreads ids evenly, it does
not hide them. Cost: vectorised for integer keys (about 10 ns a row); one
BLAKE2b call per distinct key otherwise (about 1 us each).
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import numpy as np

__all__ = ["Labels", "key_hashes", "label_codes", "row_labels"]

_TAG_KEY = 0x6578686B  # keys of split hashes, apart from split orders and epochs
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


class Labels(NamedTuple):
    """One label per row, and how an error names them (``column 'customer'``)."""

    values: np.ndarray
    where: str


def row_labels(spec: object, n: int, arg: str) -> tuple[np.ndarray, str]:
    """``(values, where)``: one label per row from ``spec`` (an array, or
    :class:`Labels`), and how to name it in an error. Wrong length, NaN or None is a
    ``ValueError`` naming ``arg``; a column name (a string) a ``TypeError``: columns
    are looked up above the order (:mod:`exactbatch.sources.splitting`)."""
    if isinstance(spec, Labels):
        values, where = np.asarray(spec.values), spec.where
    elif isinstance(spec, str):
        raise TypeError(
            f"{arg}={spec!r} names a column, but a split of row ids takes labels: "
            f"pass {arg} as an array of one label per row"
        )
    else:
        values, where = np.asarray(spec), arg
    if values.ndim != 1 or len(values) != n:
        raise ValueError(f"{arg} must hold one label per row: {n} labels; got shape {values.shape}")
    if values.dtype.kind in "fc":
        bad = np.flatnonzero(np.isnan(values))
    elif values.dtype.kind == "O":
        bad = np.flatnonzero([v is None or v != v for v in values])
    else:
        bad = np.zeros(0, dtype=np.int64)
    if bad.size:
        raise ValueError(
            f"{where} holds NaN (or None) at {bad.size} row(s), the first row {int(bad[0])}: "
            f"every row needs a {arg} label; fill or drop them first"
        )
    return values, where


def label_codes(values: np.ndarray, where: str) -> np.ndarray:
    """Each row's label as 0 .. G-1, the labels' sorted order (int64)."""
    try:
        _, codes = np.unique(values, return_inverse=True)
    except TypeError as e:
        raise TypeError(f"{where} must hold comparable labels (numbers or strings); {e}") from None
    return codes.reshape(-1).astype(np.int64)


def _seed_words(seed: int) -> tuple[int, int]:
    k = np.random.SeedSequence([_TAG_KEY, seed]).generate_state(2, np.uint64)
    return int(k[0]), int(k[1])


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    z = z ^ (z >> np.uint64(30))
    z = z * _M1
    z = z ^ (z >> np.uint64(27))
    z = z * _M2
    out: np.ndarray = z ^ (z >> np.uint64(31))
    return out


def _int_hashes(v: np.ndarray, k0: int, k1: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = v.astype(np.int64, copy=False).view(np.uint64)
        return _mix(_mix(z ^ np.uint64(k0)) ^ np.uint64(k1))


def _whole(values: np.ndarray) -> np.ndarray:
    """Which keys are whole numbers within int64 (hashed as the integers they are)."""
    if values.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            whole: np.ndarray = (
                (values == np.floor(values)) & (values >= -(2.0**63)) & (values < 2.0**63)
            )
            return whole
    return np.array(
        [
            isinstance(v, (int, np.integer))
            or (isinstance(v, (float, np.floating)) and float(v).is_integer() and abs(v) < 2.0**63)
            for v in values
        ],
        dtype=bool,
    )


def _value_bytes(v: object, where: str) -> bytes:
    if isinstance(v, str):
        return b"s" + v.encode("utf-8")
    if isinstance(v, (bytes, bytearray, np.bytes_)):
        return b"b" + bytes(v)
    if isinstance(v, (float, np.floating)):
        raw: bytes = np.float64(0.0 if v == 0 else v).astype("<f8").tobytes()
        return b"f" + raw
    raise TypeError(
        f"{where} must hold integers, strings, bytes or numbers as keys; got {type(v).__name__}"
    )


def key_hashes(values: np.ndarray, where: str, seed: int) -> np.ndarray:
    """One uint64 per row, a function of the row's key and ``seed`` alone (module docs)."""
    k0, k1 = _seed_words(seed)
    kind = values.dtype.kind
    if kind in "biu":
        return _int_hashes(values, k0, k1)
    if kind in "fO":
        whole = _whole(values)
    elif kind in "SU":
        whole = np.zeros(len(values), dtype=bool)
    else:
        raise TypeError(f"{where} must hold integers, strings or bytes as keys; got {values.dtype}")
    out = np.empty(len(values), dtype=np.uint64)
    try:
        out[whole] = _int_hashes(values[whole].astype(np.int64), k0, k1)
    except OverflowError:
        raise ValueError(f"{where} holds an integer key beyond int64") from None
    rest = values[~whole]
    if rest.size:
        key = k0.to_bytes(8, "little") + k1.to_bytes(8, "little")
        try:
            distinct, codes = np.unique(rest, return_inverse=True)
        except TypeError as e:
            raise TypeError(
                f"{where} must hold keys of one kind (numbers or strings); {e}"
            ) from None
        each = np.empty(len(distinct), dtype=np.uint64)
        for i, v in enumerate(distinct.tolist()):
            digest = hashlib.blake2b(_value_bytes(v, where), digest_size=8, key=key).digest()
            each[i] = int.from_bytes(digest, "little")
        out[~whole] = each[codes.reshape(-1)]
    return out
