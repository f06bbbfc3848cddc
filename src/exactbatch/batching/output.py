"""What a loader's batches are made into: dtype, label dtype, transform and NaN rule.

One :class:`Output` per loader, applied wherever rows are gathered into a
batch (a random-access reader's read, a shuffle buffer's gather, a
re-batched stream's batch). Plain (no label dtype, no transform, NaN kept):
the readers run as they always have. Otherwise:

* the transform, or the NaN check of ``nan="error"`` (a transform that
  changes nothing: ``(v - 0) * 1`` is ``v``, bit for bit), goes into the
  gather itself where the reader can fuse it (in memory, and the shuffle
  buffer: both backends); other readers read float64 rows, then the same
  NumPy kernel maps them (a second pass over the batch, in cache);
* class labels (``label_dtype`` int64/int32) are read as float64 and
  converted after, checked exact: a non-integer label, NaN, or one out of
  range is a ``ValueError`` naming the row id and the column (labels are a
  few values a row: the check is a small share of a read).

Errors name the row by its id: its row number in the source (random
access), or its position in the stream's unshuffled order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from exactbatch.arrays import batch_pair
from exactbatch.checks import check_dtype
from exactbatch.kernels import TransformKernel
from exactbatch.sources.protocols import RowReader
from exactbatch.sources.random_access import WrappedReader
from exactbatch.transform import Standardize

__all__ = ["LABEL_DTYPES", "Output", "OutputReader", "check_label_dtype"]

LABEL_DTYPES = (np.dtype(np.int64), np.dtype(np.int32))  # class labels


def check_label_dtype(label_dtype: DTypeLike | None, dtype: np.dtype) -> np.dtype:
    """``label_dtype`` as a dtype: None is ``dtype`` (the loader's); int64 and int32
    are class labels; anything else a ``ValueError`` (``TypeError`` for no dtype)
    naming ``label_dtype``."""
    if label_dtype is None:
        return dtype
    try:
        dt: np.dtype = np.dtype(label_dtype)
    except TypeError as e:
        raise TypeError(
            f"label_dtype must be None, np.int64 or np.int32; got {label_dtype!r}"
        ) from e
    if dt != dtype and dt not in LABEL_DTYPES:
        raise ValueError(
            f"label_dtype must be None (the loader's dtype, {dtype}), np.int64 or np.int32; "
            f"got {dt}"
        )
    return dt


def _row_id(rows: np.ndarray | slice, ids: np.ndarray | None, k: int) -> int:
    """The id of the batch's row ``k``: ``ids[k]`` when given, else its row number."""
    if ids is not None:
        return int(ids[k])
    if isinstance(rows, slice):
        start: int = rows.start
        return start + k
    return int(rows[k])


class Output:
    """A loader's batch rules (module docs). ``fused(reader)`` says whether a
    reader's ``read`` takes a :class:`~exactbatch.kernels.TransformKernel`."""

    __slots__ = (
        "_kernels",
        "dtype",
        "int_labels",
        "nan_error",
        "names",
        "plain",
        "transform",
        "ydtype",
    )

    def __init__(
        self,
        dtype: DTypeLike = np.float64,
        label_dtype: DTypeLike | None = None,
        transform: Standardize | None = None,
        nan: str = "keep",
    ) -> None:
        self.dtype = check_dtype(dtype)
        self.ydtype = check_label_dtype(label_dtype, self.dtype)
        if transform is not None and not isinstance(transform, Standardize):
            raise TypeError(
                f"transform must be an exactbatch.Standardize or None; got {transform!r}"
            )
        if nan not in ("keep", "error"):
            raise ValueError(f"nan must be 'keep' or 'error'; got {nan!r}")
        if nan == "error" and transform is not None and transform.nan_fill is not None:
            raise ValueError(
                "nan='error' refuses every NaN, so transform's nan_fill would never apply: "
                "pass nan='keep' to fill NaN, or Standardize(..., nan_fill=None)"
            )
        self.transform, self.nan_error = transform, nan == "error"
        self.int_labels = self.ydtype in LABEL_DTYPES
        self.plain = transform is None and not self.nan_error and not self.int_labels
        self._kernels: dict[int, TransformKernel | None] = {}
        self.names: list[str] | None = None  # the source's features, once named

    def name_columns(self, names: tuple[list[str], list[str]] | None) -> None:
        """The source's ``(features, labels)`` names (None: it has none): a transform
        whose statistics name their columns takes them by name (``ValueError`` naming
        ``transform`` and the features it lacks)."""
        if names is not None:
            self.names = list(names[0])
            if self.transform is not None:
                self.transform = self.transform.for_columns(*names)

    def check_widths(self, d: int | None, l: int | None) -> None:  # noqa: E741
        """Refuse a transform of the wrong width (``ValueError`` naming ``transform``);
        nothing while the widths are unknown (a stream not read yet)."""
        if d is not None and self.transform is not None:
            self.transform.features(d, l, self.names)

    def kernel(self, d: int, l: int) -> TransformKernel | None:  # noqa: E741
        """The gather's kernel for d features (None: x is copied as it is)."""
        try:
            return self._kernels[d]
        except KeyError:
            pass
        if self.transform is not None:
            used = self.transform.features(d, l, self.names)
            kern: TransformKernel | None = self.transform.kernel(used)
        elif self.nan_error:  # the check alone: (v - 0) * 1 is v
            kern = TransformKernel(np.zeros(d), np.ones(d))
        else:
            kern = None
        self._kernels[d] = kern
        return kern

    def pair(self, rows: int, d: int, l: int) -> tuple[np.ndarray, np.ndarray]:  # noqa: E741
        """New ``(rows, d)`` and ``(rows, l)`` arrays of the batch's dtypes."""
        return batch_pair(rows, d, l, self.dtype, self.ydtype)

    def fill(
        self,
        read: Callable[..., Any],
        fuses: bool,
        rows: np.ndarray | slice,
        out_x: np.ndarray,
        out_y: np.ndarray,
        ids: np.ndarray | None = None,
    ) -> None:
        """Rows ``rows`` through ``read(rows, x, y[, kernel])`` into ``out_x`` and
        ``out_y`` by these rules; ``fuses``: ``read`` takes a kernel; ``ids``: the
        rows' ids (else their row numbers)."""
        r, d = out_x.shape
        l = out_y.shape[1]  # noqa: E741
        kern = self.kernel(d, l)
        y = np.empty((r, l)) if self.int_labels else out_y
        if fuses or (kern is None and y.dtype == out_x.dtype):
            first = -1 if kern is None else read(rows, out_x, y, kern)
            if kern is None:
                read(rows, out_x, y)
        else:  # float64 rows, then the kernel (or the cast) in NumPy
            x, y64 = np.empty((r, d)), y if y.dtype == np.float64 else np.empty((r, l))
            read(rows, x, y64)
            first = -1
            if kern is None:
                out_x[...] = x
            else:
                first = kern.apply(x, out_x)
            if y64 is not y:
                y[...] = y64
        if self.nan_error:
            self._refuse_nan(out_x, y, first, rows, ids, self.names)
        if self.int_labels:
            self.labels_into(y, out_y, rows, ids)

    def finish(
        self, x: np.ndarray, y: np.ndarray, ids: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """A batch built as float64 ``x``/``y`` (a re-batched stream's), made by these
        rules into new arrays (a second pass: such batches are copied from chunks)."""

        def read(rows: np.ndarray | slice, bx: np.ndarray, by: np.ndarray) -> None:
            bx[...], by[...] = x, y

        ox, oy = self.pair(x.shape[0], x.shape[1], y.shape[1])
        self.fill(read, False, slice(0, len(x)), ox, oy, ids)
        return ox, oy

    @staticmethod
    def _refuse_nan(
        x: np.ndarray,
        y: np.ndarray,
        first: int,
        rows: np.ndarray | slice,
        ids: np.ndarray | None,
        names: list[str] | None = None,
    ) -> None:
        if first >= 0:
            c = int(np.isnan(x[first]).argmax())
            named = f" ({names[c]!r})" if names is not None and c < len(names) else ""
            raise ValueError(
                f"nan='error': row {_row_id(rows, ids, first)} has NaN in feature column {c}{named}"
            )
        if y.shape[1] and y.dtype.kind == "f":
            bad = np.isnan(y)
            if bad.any():
                k, c = divmod(int(bad.argmax()), y.shape[1])
                raise ValueError(
                    f"nan='error': row {_row_id(rows, ids, k)} has NaN in label column {c}"
                )

    def labels_into(
        self,
        y: np.ndarray,
        out: np.ndarray,
        rows: np.ndarray | slice,
        ids: np.ndarray | None = None,
    ) -> None:
        """float64 labels ``y`` into the int array ``out``, checked exact."""
        with np.errstate(invalid="ignore"):  # (NaN and out of range are found below)
            np.copyto(out, y, casting="unsafe")
        bad = out != y
        if bad.any():
            k, c = divmod(int(bad.argmax()), y.shape[1])
            raise ValueError(
                f"label_dtype={self.ydtype}: row {_row_id(rows, ids, k)} has label "
                f"{float(y[k, c])!r} in column {c}, not an integer in {self.ydtype}'s range"
            )


class OutputReader(WrappedReader):
    """A random-access reader whose reads follow an :class:`Output`'s rules: what a
    feed reads through when the output is not plain. ``ydtype``: the labels' dtype,
    for the batches made for it. A transform of the wrong width is refused here
    (``ValueError`` naming ``transform``)."""

    def __init__(self, reader: RowReader, output: Output) -> None:
        output.check_widths(reader.d, reader.l)
        self.inner, self.output = reader, output
        self.n, self.d, self.l = reader.n, reader.d, reader.l
        self.ydtype = output.ydtype

    def read(self, rows: np.ndarray | slice, out_x: np.ndarray, out_y: np.ndarray) -> None:
        inner = self.inner
        self.output.fill(inner.read, getattr(inner, "fuses", False), rows, out_x, out_y)
