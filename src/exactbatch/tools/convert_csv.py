"""CSV inputs of ``exactbatch convert``: one file, or several (a folder, a glob pattern,
a list) read one after the other as one table, block by block with pyarrow's
streaming reader (memory: one block of about 1 MiB of text, and its float64 rows).
See :mod:`exactbatch.tools.convert` for what is promised.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from exactbatch.hints import Foreign, PathLike
from exactbatch.ndf.regular import check_regular
from exactbatch.sources.categorical import Vocabulary, learn
from exactbatch.tools.column_args import shown_names, split_columns
from exactbatch.tools.common import (
    CliError,
    csv_delimiter,
    detect_format,
)
from exactbatch.tools.convert_inputs import (
    Blocks,
    arrow,
    categorical_columns,
    read_errors,
    refuse_non_numeric,
)
from exactbatch.urls import FOLDER_PATTERN, find_files, for_arrow, once_each

__all__ = ["CsvInput", "csv_inputs", "csv_schema"]

# one input, or several (a list or a tuple) read as one
_Paths = PathLike | list[str] | list[PathLike] | tuple[PathLike, ...]

_CSV_BLOCK_BYTES = 1 << 20

_CSV_NAMES = (".csv", ".tsv", ".tab")
_GLOB = set("*?[")


# A compressed CSV's codec, by its name's last extension in any case: pyarrow's own
# detection knows only lower case, and read "a.CSV.GZ" as plain text (an empty CSV).
_CODECS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}


def _codec(path: str) -> str | None:
    """The compression of the CSV at ``path`` by its name (None: plain text)."""
    low = path.lower()
    return next((c for ext, c in _CODECS.items() if low.endswith(ext)), None)


def _is_csv_name(name: str) -> bool:
    low = name.lower()
    for ext in _CODECS:
        if low.endswith(ext):
            low = low[: -len(ext)]
    return low.endswith(_CSV_NAMES)


def _folder_csvs(folder: str) -> list[str]:
    """The CSV files under ``folder`` at any depth (hidden names skipped), sorted by path."""
    out: list[str] = []
    for top, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        out += [os.path.join(top, n) for n in names if not n.startswith(".") and _is_csv_name(n)]
    return once_each(sorted(out, key=lambda f: os.path.relpath(f, folder).split(os.sep)))


def csv_inputs(src: _Paths) -> tuple[str, list[str] | None]:
    """``(src as shown, CSV files)`` when ``src`` names several CSV files to convert into
    one: a list of files, a glob pattern, or a folder of CSV files (and no Parquet or
    .ndf); the files sorted by path. ``(src, None)`` for one path, to be read by its
    format. A pattern matching nothing, a folder holding neither CSV nor Parquet files,
    or a list of files not all CSV is a :class:`CliError`."""
    if isinstance(src, (list, tuple)):
        paths = [os.fspath(p) for p in src]
        if not paths:
            raise CliError("no input files given")
        if len(paths) == 1:
            return paths[0], None
        shown, files = " ".join(paths), once_each(sorted(paths))
    else:
        shown = os.fspath(src)
        if os.path.isdir(shown):
            if detect_format(shown) != "parquet" or find_files(shown, FOLDER_PATTERN):
                return shown, None
            files = _folder_csvs(shown)
            if not files:
                raise CliError(
                    f"{shown}: the folder holds no CSV files (.csv, .tsv, .tab, compressed "
                    "too, at any depth), no Parquet files and no .ndf dataset"
                )
            return shown, files
        if os.path.exists(shown) or not _GLOB & set(shown):
            return shown, None
        files = once_each(sorted(glob.glob(shown, recursive=True)))
        if not files:
            raise CliError(f"{shown}: no files match this pattern")
    odd = [f for f in files if os.path.isdir(f) or detect_format(f) != "csv"]
    if odd:
        raise CliError(
            f"{odd[0]}: not a CSV file; several inputs are converted together only as CSV "
            f"files (got {len(files)} inputs)"
        )
    return shown, files


def csv_schema(path: PathLike, delimiter: str | None = None, header: bool = True) -> Foreign:
    """The columns of a CSV file and the types pyarrow infers from its first block;
    ``delimiter`` None: :func:`~exactbatch.tools.common.csv_delimiter` (tabs for .tsv)."""
    pa = arrow()
    import pyarrow.csv as pcsv

    check_regular(path, "a CSV file")  # pyarrow would wait on a FIFO
    sep = csv_delimiter(path, delimiter)
    codec = _codec(os.fspath(path))
    stream = None if codec is None else pa.input_stream(for_arrow(path), codec)
    try:
        reader = pcsv.open_csv(
            for_arrow(path) if stream is None else stream, **_csv_options(sep, header)
        )
        schema = reader.schema
        reader.close()
    except pa.ArrowException as e:
        raise CliError(f"{path}: cannot read as CSV ({e})") from e
    finally:
        if stream is not None:
            stream.close()
    return schema


def _csv_options(delimiter: str, header: bool, **convert: Any) -> dict[str, Foreign]:
    import pyarrow.csv as pcsv

    return {
        "read_options": pcsv.ReadOptions(
            block_size=_CSV_BLOCK_BYTES, autogenerate_column_names=not header
        ),
        "parse_options": pcsv.ParseOptions(delimiter=delimiter),
        "convert_options": pcsv.ConvertOptions(**convert),
    }


class CsvInput:
    """One CSV file, or several read one after the other (in the order given: sorted by
    :func:`csv_inputs`) as one table, block by block; every chosen column parsed as
    float64, or, if categorical, coded. Every file must have the first one's columns
    (a CliError naming the file otherwise). ``delimiter`` None: a tab for
    ``.tsv``/``.tab``, else a comma (each file by its own name)."""

    def __init__(
        self,
        path: _Paths,
        features: object,
        labels: object,
        delimiter: str | None,
        header: bool,
        exclude: object = None,
        categorical: object = None,
    ) -> None:
        pa = arrow()
        paths = [os.fspath(p) for p in path] if isinstance(path, (list, tuple)) else [path]
        self.paths, self.header, self.given = [os.fspath(p) for p in paths], header, delimiter
        self.path = self.paths[0]
        schema = csv_schema(self.path, delimiter, header)
        names = schema.names
        for p in self.paths[1:]:
            found = csv_schema(p, delimiter, header).names
            if found != names:
                raise CliError(
                    f"{p}: its columns {shown_names(found)} differ from those of {self.path} "
                    f"{shown_names(names)}; every file converted together must have the same "
                    "columns, in the same order"
                )
        feat, lab = split_columns(features, labels, names, self.path, exclude)
        self.columns = [names[j] for j in feat + lab]
        self.cats = categorical_columns(categorical, self.columns, self.path)
        refuse_non_numeric(self.path, {c: schema.field(c).type for c in self.columns}, self.cats)
        # a categorical column keeps the type inferred from the first file's first block
        # (strings stay strings: "01234" is not 1234); the others are read as numbers
        self.types = {
            c: schema.field(c).type
            if c in self.cats
            else pa.bool_()
            if pa.types.is_boolean(schema.field(c).type)
            else pa.float64()
            for c in self.columns
        }
        self.d, self.l = len(feat), len(lab)
        self.n: int | None = None
        self.names = True
        self.compressed = any(_codec(p) is not None for p in self.paths)
        self.total = None if self.compressed else sum(os.path.getsize(p) for p in self.paths)
        self.unit = "rows" if self.compressed else "B"
        self.vocab: dict[str, Vocabulary] = {}
        if self.cats:
            import pyarrow.compute as pc

            cats = self.cats
            seen: dict[str, list[Foreign]] = {c: [] for c in cats}
            for _, batch, _ in self._batches(cats):
                for c in cats:
                    seen[c].append(pc.unique(batch.column(c)))  # not the column: memory
            for c in cats:
                try:
                    self.vocab[c] = Vocabulary(c, learn(seen[c]))
                except TypeError as e:  # pragma: no cover - one type per column in a CSV read
                    raise CliError(f"{self.path}: column {c!r}: {e}") from e
        self.categories = {c: list(v.values) for c, v in self.vocab.items()}

    def _batches(self, columns: list[str]) -> Iterator[tuple[str, Foreign, int | None]]:
        """``(file, record batch, bytes read so far in it)`` of ``columns`` of every file."""
        pa = arrow()
        import pyarrow.csv as pcsv

        types = {c: self.types[c] for c in columns}
        for path in self.paths:
            opts = _csv_options(
                csv_delimiter(path, self.given),
                self.header,
                column_types=types,
                include_columns=columns,
            )
            codec = _codec(path)
            compressed = codec is not None
            local = for_arrow(path)
            source = pa.input_stream(local, codec) if compressed else pa.OSFile(local)
            try:
                reader = pcsv.open_csv(source, **opts)
                try:
                    for batch in reader:
                        yield path, batch, None if compressed else source.tell()
                finally:
                    reader.close()
            except read_errors() as e:
                if len(self.paths) == 1:
                    raise
                raise ValueError(f"{path}: {' '.join(str(e).split())}") from e
            finally:
                source.close()

    def blocks(self) -> Iterator[tuple[np.ndarray, int]]:
        to_block = Blocks(len(self.columns))
        last: str | None = None
        pos, first = 0, 0
        for path, batch, at in self._batches(self.columns):
            if path != last:  # a value's row in an error is its row in its own file
                last, pos, first = path, 0, 0
            columns: list[Foreign] = []
            for c in self.columns:
                col = batch.column(c)
                v = self.vocab.get(c)
                columns.append(col if v is None else v.encode(col, path, first))
            block = to_block(columns)
            first += block.shape[0]
            if self.compressed:
                yield block, block.shape[0]
            else:
                assert at is not None  # (a plain file says how far it was read)
                now = min(at, os.path.getsize(path))
                yield block, now - pos
                pos = now
