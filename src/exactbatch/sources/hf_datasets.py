"""A Hugging Face ``datasets.Dataset`` as random access, read from its Arrow table.

A ``Dataset`` is an Arrow table (memory-mapped from its cache files when it
was loaded from disk) seen through an optional index mapping (what
``select``, ``shuffle``, ``filter`` and ``train_test_split`` leave). Each
batch is gathered from the table's columns, through the mapping, with no
copy of the table and no formatting of rows
(:class:`~exactbatch.sources.arrow_columns.ArrowColumnsReader`). Columns are
chosen by name; ``ClassLabel`` columns are integers, so they may be
labels; ``string``, ``Image``, ``Sequence`` and other non-numeric features
are left out (or, when named, refused).

A dataset loaded from disk lies in memory-mapped Arrow cache files
(``dataset.cache_files``): they are watched as an Arrow IPC file is
(:mod:`~exactbatch.sources.file_watch`), so a cache file rewritten in place
(``save_to_disk`` over the folder read) is an ``NdfError`` naming it at the
next batch, never rows of the new file read through the old layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from exactbatch.extras import need
from exactbatch.hints import Foreign
from exactbatch.sources.arrow_columns import ArrowColumnsReader, made_by, pick_columns
from exactbatch.sources.file_watch import FileWatch
from exactbatch.sources.identity import column_names

__all__ = ["HfDatasetSource", "hf_source", "is_hf_dataset"]


def is_hf_dataset(obj: object) -> bool:
    """A Hugging Face ``datasets.Dataset`` (not a ``DatasetDict``)?"""
    return made_by(obj, "datasets", "Dataset")


class HfDatasetSource:
    """A ``datasets.Dataset`` as :func:`hf_source` opens it: a
    :class:`~exactbatch.sources.protocols.RowSource`. Attributes: ``dataset``,
    ``features``, ``labels``, ``n``, ``d``, ``l``."""

    def __init__(
        self, dataset: Foreign, features: str | Sequence[str] | None, labels: str | Sequence[str]
    ) -> None:
        table = dataset.data.table  # a pyarrow Table (datasets.table.Table wraps one)
        self.features, self.labels = pick_columns(
            table.schema, features, labels, "the Hugging Face Dataset"
        )
        indices = dataset._indices  # the mapping select/shuffle/filter leave, or None
        self._map = None
        if indices is not None:
            self._map = np.asarray(indices.column(0).to_numpy(), dtype=np.int64)
        self.n = len(dataset)
        self.d, self.l = len(self.features), len(self.labels)
        self._columns = [table.column(c) for c in self.features + self.labels]
        self.dataset = dataset
        files = [f["filename"] for f in getattr(dataset, "cache_files", None) or ()]
        self._watch = FileWatch(files, "a Hugging Face dataset's Arrow cache file")

    def identity(self) -> dict[str, Any]:
        """Its kind and columns (:mod:`exactbatch.sources.identity`)."""
        return {"kind": "hf_dataset", "names": column_names(self.features, self.labels)}

    def open_reader(self) -> ArrowColumnsReader:
        """A new reader of the dataset's rows (the loader owns and closes it)."""
        check = self._watch.check if self._watch.paths else None
        return ArrowColumnsReader(self._columns, self.d, row_map=self._map, check=check)

    def __repr__(self) -> str:
        return f"HfDatasetSource(n={self.n}, d={self.d}, l={self.l})"


def hf_source(
    dataset: Any,
    *,
    features: str | Sequence[str] | None = None,
    labels: str | Sequence[str] = (),
) -> HfDatasetSource:
    """A random-access source over a Hugging Face ``datasets.Dataset``.

    Columns as in :func:`exactbatch.arrow_file`: ``features`` None is every
    numeric column not among ``labels`` (others left out with a warning); a
    named column missing or not numeric is a ``ValueError`` naming it; a
    null is NaN. The dataset's format (``set_format``) plays no part. A
    ``DatasetDict`` is a ``TypeError``: pass one split (``ds["train"]``).
    """
    need("datasets", by="hf_source", package="datasets", extra="hf")
    if made_by(dataset, "datasets", "DatasetDict", "IterableDatasetDict"):
        raise TypeError(
            f"dataset is a DatasetDict of splits {list(dataset)}; pass one split, "
            "e.g. hf_source(ds['train'])"
        )
    if not is_hf_dataset(dataset):
        raise TypeError(
            f"dataset must be a datasets.Dataset; got {type(dataset).__name__} (an "
            "IterableDataset is a stream: pass "
            "arrow_source(lambda: ds.with_format('arrow').iter(batch_size=4096)))"
        )
    return HfDatasetSource(dataset, features, labels)
