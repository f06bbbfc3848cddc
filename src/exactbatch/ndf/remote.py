""".ndf files over URLs (``s3://``, any fsspec protocol): ranged reads of the rows a batch needs.

Reached through ``open_ndf(url)`` (:func:`open_url` makes the handle): the
header and the object's size are checked by :mod:`exactbatch.ndf.format`'s
own rules, then each batch fetches only its rows. The batch's distinct rows
are sorted and cut into byte ranges - adjacent rows, and rows separated by
gaps under ``MAX_GAP_BYTES`` (64 KiB), share one range; a range longer than
``MAX_RANGE_BYTES`` (16 MiB) is split so its parts download in parallel -
and the ranges are fetched with one ``fs.cat_ranges`` call, which async
filesystems (s3, gcs, abfs, http) run concurrently. The rows are then put
back in the caller's order, x then y. There is no memory map
(``RemoteHandle.rows`` is None).

Changes under a reader: S3 keeps no open file. On a bucket with versioning
the handle pins the version it opened (``VersionId``), so it keeps reading
those bytes whatever is written to the key later, as a local file renamed
over keeps being read. Without versioning every read checks that the object
is still the one opened, and an object replaced by any other (shorter,
longer, or of the same size) is an :class:`NdfError` naming the URL at the
next read, before any of its bytes reach a batch. On S3 the check rides on
the ranged GETs themselves (no extra request): each asks for the opened
ETag (``If-Match``) and the ETag each response carries is compared too, for
servers that ignore ``If-Match``. On other protocols the object's size and
ETag (or modification time) are asked for once per read, after its ranges
have arrived: one metadata request per batch; a store that reports neither
an ETag nor a modification time is checked by size only. A deleted object
is a ``FileNotFoundError`` at the next read (unless its version is pinned).
Writing ``.ndf`` to a URL is not supported: write locally with ``save_ndf``
and upload. A handle opened before a fork reads in the child too
(:class:`exactbatch.urls.ForkSafeFs`).
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from exactbatch.errors import NdfError
from exactbatch.hints import Foreign
from exactbatch.kernels import RowIndex
from exactbatch.ndf.format import HEADER_SIZE, check_header, expected_size
from exactbatch.urls import (
    ForkSafeFs,
    import_fsspec,
    object_info,
    protocols,
    url_to_fs,
    version_tag,
)

__all__ = [
    "MAX_GAP_BYTES",
    "MAX_RANGE_BYTES",
    "RemoteHandle",
    "open_url",
    "plan_ranges",
    "read_remote_rows",
]

MAX_GAP_BYTES = 64 << 10  # rows this close (bytes skipped between them) share one range
MAX_RANGE_BYTES = 16 << 20  # longer ranges are split, so their parts download in parallel


# -- ranged reads that say which object they read ----------------------------------------


def _is_s3(fs: Foreign) -> bool:
    """s3fs, whose GETs can carry the ETag they expect and return the one they read."""
    return "s3" in protocols(fs) and hasattr(fs, "_call_s3")


async def _s3_get(
    fs: Foreign, bucket: str, key: str, start: int, end: int, etag: str, version: dict[str, str]
) -> tuple[bytes, str | None]:
    """``(bytes [start, end), the ETag sent with them)``: one GET. ``If-Match`` makes S3
    refuse (412) to send another object's bytes; retried as s3fs's own ``_cat_file``."""
    if end <= start:
        return b"", etag
    from s3fs.core import _error_wrapper

    async def once() -> tuple[bytes, str | None]:
        resp = await fs._call_s3(
            "get_object",
            Bucket=bucket,
            Key=key,
            Range=f"bytes={start}-{end - 1}",
            IfMatch=etag,
            **version,
        )
        try:
            return await resp["Body"].read(), resp.get("ETag")
        finally:
            resp["Body"].close()

    got: tuple[bytes, str | None] = await _error_wrapper(once, retries=fs.retries)
    return got


def _get_ranges(
    fs: Foreign,
    key: str,
    starts: Iterable[int],
    ends: Iterable[int],
    etag: str | None,
    pin: dict[str, Any],
) -> tuple[list[bytes | BaseException], list[str | None] | None]:
    """``(blobs, tags)``: bytes ``[starts[i], ends[i])`` of the object (or the exception
    that range raised), all at once; and the ETag the store sent with each range, or
    None where the protocol's reads do not say (only a metadata request can tell then)."""
    starts, ends = list(starts), list(ends)
    if etag is None or not _is_s3(fs):
        blobs: list[bytes | BaseException] = fs.cat_ranges(
            [key] * len(starts), starts, ends, on_error="return", **pin
        )
        return blobs, None
    asyn = import_fsspec().asyn
    bucket, path, vers = fs.split_path(key)
    version = pin.get("version_id") or vers
    version = {"VersionId": version} if version else {}

    async def gather() -> list[tuple[bytes, str | None] | BaseException]:
        spans = zip(starts, ends, strict=True)
        coros = [_s3_get(fs, bucket, path, a, b, etag, version) for a, b in spans]
        # fsspec's own batching, as cat_ranges: at most fs.batch_size requests in flight
        done: list[tuple[bytes, str | None] | BaseException]
        done = await asyn._run_coros_in_chunks(
            coros, batch_size=fs.batch_size, nofiles=True, return_exceptions=True
        )
        return done

    got: list[tuple[bytes, str | None] | BaseException] = asyn.sync(fs.loop, gather)
    blobs = [g if isinstance(g, BaseException) else g[0] for g in got]
    return blobs, [None if isinstance(g, BaseException) else g[1] for g in got]


# -- .ndf over a URL -------------------------------------------------------------------------


class RemoteHandle:
    """An ``.ndf`` object on a remote filesystem: the handle of an NdfFile over a URL.

    The read methods of :class:`~exactbatch.ndf.local.LocalHandle`, by ranged
    reads: :meth:`read_rows_into` and :meth:`read_raw_into` (coalesced),
    :meth:`read_block_into`,
    :meth:`will_need` (a no-op), with :meth:`check_size` and :meth:`fetch`
    under them. Attributes: ``path`` (the URL), ``n``, ``d``, ``l``,
    ``row_bytes``, ``size`` (bytes of a valid file), ``rows`` and ``lease``
    (None: no memory map). Immutable after construction, so any number of
    threads may read at once.
    """

    __slots__ = (
        "__weakref__",
        "d",
        "etag",
        "fs",
        "key",
        "l",
        "n",
        "path",
        "pin",
        "row_bytes",
        "size",
    )
    rows = lease = None  # no memory map: nothing to copy from, nothing to guard

    def __init__(
        self,
        path: str,
        fs: Foreign,
        key: str,
        n: int,
        d: int,
        l: int,  # noqa: E741
        *,
        etag: str | None = None,
        pin: dict[str, Any] | None = None,
    ):
        self.path, self.key = path, key
        self.fs = ForkSafeFs(fs)  # made anew in a forked child
        self.n, self.d, self.l = n, d, l
        self.row_bytes = 8 * (d + l)
        self.size = expected_size(n, d, l)
        self.etag = etag  # the object's ETag (or mtime) when opened
        self.pin = dict(pin or {})  # extra arguments of every read: {"version_id": ...} on S3

    def __repr__(self) -> str:
        return f"RemoteHandle({self.path!r}, n={self.n}, d={self.d}, l={self.l})"

    def check_size(self) -> None:
        """Ask the store (one metadata request) whether the object is still the one opened.

        A pinned version cannot change. Otherwise a size other than the
        opened one, or another ETag, is an :class:`NdfError` naming the URL.
        """
        if self.pin:
            return
        try:
            info = object_info(self.fs.get(), self.key, self.path)
        except FileNotFoundError:
            raise FileNotFoundError(
                errno.ENOENT, "the object was deleted after open_ndf opened it", self.path
            ) from None
        found = info.get("size")
        if found is not None and found != self.size:
            how = "truncated?" if found < self.size else "overwritten?"
            raise NdfError(
                f"{self.path}: the object changed while open: expected {self.size} bytes, "
                f"found {found} ({how})"
            )
        tag = version_tag(info)
        if self.etag is not None and tag is not None and tag != self.etag:
            raise self._overwritten(tag)

    def _overwritten(self, tag: str | None) -> NdfError:
        return NdfError(
            f"{self.path}: the object changed while open: it was overwritten after it "
            f"was opened (ETag {self.etag} then {tag}); open it again to read the new "
            "contents, and write new keys (or turn on versioning) instead"
        )

    def fetch(self, starts: list[int], ends: list[int]) -> list[bytes]:
        """Bytes ``[starts[i], ends[i])`` of the object opened, all ranges at once.

        Bytes of any other object under the key (replaced, shorter or not)
        are never returned: :class:`NdfError` naming the URL instead.
        """
        gone = "the object was deleted after open_ndf opened it"
        try:
            got, tags = _get_ranges(self.fs.get(), self.key, starts, ends, self.etag, self.pin)
        except FileNotFoundError as e:
            raise FileNotFoundError(errno.ENOENT, gone, self.path) from e
        blobs: list[bytes] = []
        for blob, a, b in zip(got, starts, ends, strict=True):
            if isinstance(blob, FileNotFoundError):
                raise FileNotFoundError(errno.ENOENT, gone, self.path) from blob
            if isinstance(blob, BaseException):
                self.check_size()  # a changed object explains the failure best
                raise blob
            if len(blob) != b - a:
                self.check_size()
                raise NdfError(
                    f"{self.path}: the object changed while open: expected {b - a} bytes at "
                    f"offset {a}, got {len(blob)}"
                )
            blobs.append(blob)
        if tags is None or None in tags:
            self.check_size()  # the reads did not say which object they read: ask, after them
        else:
            for tag in tags:
                if tag != self.etag:
                    raise self._overwritten(tag)
        return blobs

    def pread_into(self, buf: memoryview, first_row: int) -> None:
        """Fill ``buf`` with the bytes of rows from ``first_row`` on (one range request)."""
        a = HEADER_SIZE + first_row * self.row_bytes
        (blob,) = self.fetch([a], [a + len(buf)])
        buf[:] = blob

    def read_block_into(self, start_row: int, buf: memoryview) -> None:
        self.pread_into(buf, start_row)  # the read itself checks the object

    def will_need(self, start_row: int, rows: int) -> None:
        """No page cache to warm: nothing to do."""

    def read_rows_into(self, idx: RowIndex, out_x: np.ndarray, out_y: np.ndarray) -> None:
        if isinstance(idx, slice):  # consecutive rows (an unshuffled loader)
            idx = np.arange(idx.start, idx.stop, dtype=np.int64)
        read_remote_rows(self, idx, out_x, out_y)

    def read_raw_into(self, idx: np.ndarray, stage: np.ndarray, scattered: bool = False) -> None:
        """Rows ``idx`` into ``stage`` ((r, d + l), x then y per row)."""
        read_remote_rows(self, idx, stage[:, : self.d], stage[:, self.d :])


def open_url(url: str, storage_options: dict[str, Any] | None = None) -> RemoteHandle:
    """The handle of the ``.ndf`` object at ``url`` (``open_ndf(url)`` wraps it in an NdfFile).

    One metadata request and one 28-byte range; the header and the exact
    size are checked as for a local file (:class:`NdfError` naming the URL).
    A missing object is ``FileNotFoundError``; a folder (prefix) is
    ``IsADirectoryError``; both name the URL, as does the :class:`NdfError` of an
    object replaced between the metadata request and the header's read.
    """
    fs, key = url_to_fs(url, storage_options)
    info = object_info(fs, key, url)
    if info.get("type") == "directory":
        raise IsADirectoryError(errno.EISDIR, "expected an .ndf file, found a folder", url)
    if info.get("size") is None:
        raise NdfError(f"{url}: the store does not report the object's size, which an .ndf needs")
    size = int(info["size"])
    pin: dict[str, Any] = {}
    version = info.get("VersionId")
    if version not in (None, "null") and "s3" in protocols(fs):
        pin = {"version_id": version}
    head, etag = b"", version_tag(info)
    if size:
        replaced = f"{url}: the object was replaced while it was being opened"
        try:
            (got,), tags = _get_ranges(fs, key, [0], [min(size, HEADER_SIZE)], etag, pin)
        except FileNotFoundError as e:
            got, tags = e, None
        if isinstance(got, FileNotFoundError):  # deleted since: the request's or the range's
            raise FileNotFoundError(errno.ENOENT, "no such file or object", url) from got
        if isinstance(got, BaseException):  # S3 refuses (412) another ETag's bytes
            if etag is not None and not pin and version_tag(object_info(fs, key, url)) != etag:
                raise NdfError(replaced) from got
            raise got
        head = got
        if tags is not None and tags[0] not in (None, etag):
            raise NdfError(replaced)
    n, d, l = check_header(head, size, url)  # noqa: E741
    return RemoteHandle(url, fs, key, n, d, l, etag=etag, pin=pin)


def plan_ranges(
    rows: np.ndarray, row_bytes: int, max_gap: int = MAX_GAP_BYTES, max_range: int = MAX_RANGE_BYTES
) -> list[tuple[int, int, int, int]]:
    """Cut sorted distinct ``rows`` into ranges to fetch: ``[(first, stop, a, b), ...]``.

    Range k covers file rows ``[first, stop)`` and holds ``rows[a:b]``. Rows
    whose bytes are less than ``max_gap`` apart share a range; a range over
    ``max_range`` bytes is split (at rows it holds) into near-equal parts.
    Every row is in exactly one range; ranges come in file order.
    """
    r = rows.shape[0]
    if r == 0:
        return []
    gap_bytes = (np.diff(rows) - 1) * row_bytes  # bytes skipped between neighbours
    cuts = [0, *(np.flatnonzero(gap_bytes >= max_gap) + 1).tolist(), r]
    per_part = max(1, max_range // row_bytes)  # rows a part may span
    out = []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        first, stop = int(rows[a]), int(rows[b - 1]) + 1
        parts = -(-(stop - first) // per_part)
        if parts == 1:
            out.append((first, stop, a, b))
            continue
        bounds = first + (np.arange(1, parts) * (stop - first)) // parts
        splits = [a, *(a + np.searchsorted(rows[a:b], bounds)).tolist(), b]
        for p, q in zip(splits[:-1], splits[1:], strict=True):
            if q > p:
                out.append((int(rows[p]), int(rows[q - 1]) + 1, p, q))
    return out


def read_remote_rows(
    h: RemoteHandle, idx: np.ndarray, out_x: np.ndarray, out_y: np.ndarray
) -> None:
    """Fill ``out_x``/``out_y`` with rows ``idx`` of ``h``, in ``idx``'s order.

    ``idx``: int64 row numbers in ``[0, n)``, any order, repeats allowed.
    Each distinct row is fetched once, in coalesced ranges (see
    :func:`plan_ranges`), all in one ``cat_ranges`` call.
    """
    idx = np.asarray(idx, dtype=np.int64)
    r = idx.shape[0]
    if r == 0 or h.row_bytes == 0:
        return
    lo, hi = int(idx.min()), int(idx.max())
    if lo < 0 or hi >= h.n:
        raise IndexError(f"row {lo if lo < 0 else hi} out of range for {h.path} with n={h.n} rows")
    if r == 1 or bool(np.all(idx[1:] > idx[:-1])):
        rows, inverse = idx, None
    else:
        rows, inverse = np.unique(idx, return_inverse=True)
        inverse = inverse.reshape(r)
    plan = plan_ranges(rows, h.row_bytes, MAX_GAP_BYTES, MAX_RANGE_BYTES)  # tunable at run time
    rb, base = h.row_bytes, HEADER_SIZE
    blobs = h.fetch([base + f * rb for f, _, _, _ in plan], [base + s * rb for _, s, _, _ in plan])
    d, width = h.d, h.d + h.l
    # distinct rows in file order; the caller's arrays directly when idx was increasing
    dist = None if inverse is None else np.empty((rows.shape[0], width), dtype=np.float64)
    le = np.dtype("<f8")
    for (first, stop, a, b), blob in zip(plan, blobs, strict=True):
        block = np.frombuffer(blob, dtype=le).reshape(stop - first, width)
        if b - a != stop - first:  # gaps in this range: keep only the wanted rows
            block = block[rows[a:b] - first]
        if dist is not None:
            dist[a:b] = block
        else:
            out_x[a:b] = block[:, :d]
            out_y[a:b] = block[:, d:]
    if dist is not None:
        whole = dist[inverse]
        out_x[...] = whole[:, :d]
        out_y[...] = whole[:, d:]


# -- uploads a killed writer left open ------------------------------------------------------


def abort_uploads(fs: Foreign, folder_key: str, doomed: Callable[[str], bool]) -> int:
    """Abort the S3 multipart uploads still open under ``folder_key/`` whose file name
    ``doomed(name)`` says will never be committed (a writer killed mid-upload leaves
    one open: billed, and in no listing); the number aborted. Other stores, and any
    error (no permission to list uploads), abort nothing: best effort."""
    if not _is_s3(fs):
        return 0
    bucket, _, prefix = folder_key.rstrip("/").partition("/")
    prefix += "/"
    aborted, marks = 0, dict[str, str]()
    with contextlib.suppress(Exception):
        while True:
            page = fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=prefix, **marks)
            for up in page.get("Uploads", []):
                name = up["Key"][len(prefix) :]
                if "/" not in name and doomed(name):
                    fs.call_s3(
                        "abort_multipart_upload",
                        Bucket=bucket,
                        Key=up["Key"],
                        UploadId=up["UploadId"],
                    )
                    aborted += 1
            if not page.get("IsTruncated"):
                return aborted
            marks = {
                "KeyMarker": page.get("NextKeyMarker", ""),
                "UploadIdMarker": page.get("NextUploadIdMarker", ""),
            }
    return aborted
