"""Shared builders for the loader tests: data whose rows can be traced.

Row ``i`` of the data built here is a known function of ``i``:

    x[i, 0] = i,  x[i, j] = i * (j + 1) + j / 4   (j >= 1)
    y[i, k] = -(i + 1) * (k + 1) - 1 / 8

so a batch's row ids are ``xb[:, 0]`` and :func:`check_rows` proves every
value in a batch (features and labels) came from those very rows - no
garbage, no mixing of one row's x with another row's y. All values are exact
in float64 for the sizes used in the tests.
"""

from __future__ import annotations

import os

import numpy as np

from exactbatch import DataLoader, Dataset, open_ndf, save_ndf

__all__ = [
    "SOURCE_KINDS",
    "batches_of",
    "check_rows",
    "epoch_batches",
    "ids",
    "make_data",
    "make_source",
    "make_x",
    "make_y",
    "next_into_batches",
    "rows_of",
]

SOURCE_KINDS = ("pair", "dataset", "array", "ndf")


def make_x(row_ids, d: int) -> np.ndarray:
    """Features of rows ``row_ids``: shape (len(row_ids), d), float64."""
    i = np.asarray(row_ids, dtype=np.float64).reshape(-1, 1)
    j = np.arange(d, dtype=np.float64).reshape(1, -1)
    x = i * (j + 1) + j / 4
    return np.ascontiguousarray(x)


def make_y(row_ids, l: int) -> np.ndarray:  # noqa: E741
    """Labels of rows ``row_ids``: shape (len(row_ids), l), float64."""
    i = np.asarray(row_ids, dtype=np.float64).reshape(-1, 1)
    k = np.arange(l, dtype=np.float64).reshape(1, -1)
    return np.ascontiguousarray(-(i + 1) * (k + 1) - 0.125)


def make_data(n: int, d: int = 3, l: int = 1) -> tuple[np.ndarray, np.ndarray]:  # noqa: E741
    """``(x, y)`` of n traceable rows (x[i, 0] == i); y has shape (n, l)."""
    rows = np.arange(n)
    return make_x(rows, d), make_y(rows, l)


def make_source(kind: str, x: np.ndarray, y: np.ndarray, folder=None):
    """The same rows as a random-access source of kind ``kind``.

    ``"pair"``: ``(x, y)``; ``"dataset"``: ``Dataset(x, y)``; ``"array"``:
    bare ``x`` (only when y has no columns); ``"ndf"``: an open NdfFile of
    a file written into ``folder``.
    """
    if kind == "pair":
        return (x.copy(), y.copy())
    if kind == "dataset":
        return Dataset(x.copy(), y.copy())
    if kind == "array":
        assert y.shape[1] == 0, "a bare array source has no labels"
        return x.copy()
    if kind == "ndf":
        assert folder is not None
        path = os.path.join(os.fspath(folder), f"data-{x.shape[0]}-{x.shape[1]}-{y.shape[1]}.ndf")
        save_ndf(path, (x, y))
        return open_ndf(path)
    raise AssertionError(f"unknown source kind {kind!r}")


def ids(xb: np.ndarray) -> np.ndarray:
    """Row ids of one batch (column 0 holds the row number)."""
    return xb[:, 0].astype(np.int64)


def rows_of(batches) -> list[list[int]]:
    """Row ids of each batch of ``batches`` (an iterable of ``(xb, yb)``)."""
    return [ids(xb).tolist() for xb, _ in batches]


def check_rows(xb: np.ndarray, yb: np.ndarray, d: int, l: int) -> None:  # noqa: E741
    """Assert a batch is well-formed and each of its rows is an intact source row."""
    assert isinstance(xb, np.ndarray) and isinstance(yb, np.ndarray)
    assert xb.dtype == np.float64 and yb.dtype == np.float64
    assert xb.ndim == 2 and yb.ndim == 2
    assert xb.shape[1] == d and yb.shape[1] == l
    assert xb.shape[0] == yb.shape[0]
    r = ids(xb)
    np.testing.assert_array_equal(xb, make_x(r, d))
    np.testing.assert_array_equal(yb, make_y(r, l))


def batches_of(loader: DataLoader) -> list[list[int]]:
    """Row ids of every batch of one epoch through ``iter(loader)``."""
    return rows_of(loader)


def epoch_batches(make_loader, epoch: int) -> list[list[int]]:
    """Row ids of epoch ``epoch``'s batches from a fresh loader (``make_loader()``)."""
    loader = make_loader()
    loader.set_epoch(epoch)
    return batches_of(loader)


def next_into_batches(loader: DataLoader, limit: int | None = None) -> list[list[int]]:
    """Row ids of the batches ``next_into`` hands out until it returns 0 (or ``limit``)."""
    bx = np.empty((loader.batch_size, loader.d), dtype=np.float64)
    by = np.empty((loader.batch_size, loader.l), dtype=np.float64)
    out = []
    while limit is None or len(out) < limit:
        got = loader.next_into(bx, by)
        if got == 0:
            break
        check_rows(bx[:got], by[:got], loader.d, loader.l)
        out.append(ids(bx[:got]).tolist())
    return out
