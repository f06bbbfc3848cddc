"""The .ndf format: a 28-byte header, then n rows of (d + l) float64.

- :mod:`~exactbatch.ndf.format`: the byte layout and the header's rules.
- :mod:`~exactbatch.ndf.file`: :class:`NdfFile` and :func:`open_ndf`.
- :mod:`~exactbatch.ndf.local`: how a local file is read (the guarded gather,
  positional reads).
- :mod:`~exactbatch.ndf.guard`: safe copies from a file's memory map.
- :mod:`~exactbatch.ndf.write`: :func:`save_ndf` and the streaming
  :class:`~exactbatch.ndf.write.NdfWriter`, atomic both.
- :mod:`~exactbatch.ndf.remote`: ``.ndf`` over URLs, by ranged reads.
- :mod:`~exactbatch.ndf.dataset`: sharded datasets, a folder of parts:
  :class:`NdfDataset`, :func:`open_ndf_dataset`; written by
  :mod:`~exactbatch.ndf.dataset_write` (:func:`save_ndf_dataset`,
  :class:`~exactbatch.ndf.dataset_write.NdfDatasetWriter`) by the steps of
  :mod:`~exactbatch.ndf.dataset_protocol` (a write id, the manifest last),
  and listed by their ``manifest.json`` (:mod:`~exactbatch.ndf.manifest`).

The names below are importable from ``exactbatch.ndf`` itself.
"""

from exactbatch.ndf.dataset import NdfDataset, open_ndf_dataset, save_ndf_dataset
from exactbatch.ndf.file import NdfFile, open_ndf
from exactbatch.ndf.format import HEADER_SIZE, MAGIC, check_header, expected_size
from exactbatch.ndf.write import NdfWriter, atomic_path, save_ndf

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "NdfDataset",
    "NdfFile",
    "NdfWriter",
    "atomic_path",
    "check_header",
    "expected_size",
    "open_ndf",
    "open_ndf_dataset",
    "save_ndf",
    "save_ndf_dataset",
]
