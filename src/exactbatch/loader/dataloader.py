"""DataLoader: the one front door - epochs, the cursor, threads and resume.

The loader checks its arguments and delegates: the source's kind picks a
feed (:mod:`exactbatch.feeds`), which composes the order, the reader and
the batching; the position and the ledger are the cursor's
(:mod:`exactbatch.loader.cursor`), ``iter()``'s epochs an iterator's over it
(:mod:`exactbatch.loader.epoch_iterator`); states are packed by
:mod:`exactbatch.loader.state`.
"""

from __future__ import annotations

from typing import Any, Literal, NoReturn, SupportsIndex

import numpy as np

from exactbatch.batching.output import Output
from exactbatch.checks import check_flag, check_int
from exactbatch.distributed import resolve_shard
from exactbatch.feeds import BatchSpec, open_feed
from exactbatch.hints import ArrayLike, ColumnSelection, DTypeLike, Source, TotalSize
from exactbatch.loader.cursor import Cursor
from exactbatch.loader.epoch_iterator import EpochIterator, group_sizes
from exactbatch.loader.handout import NextInto
from exactbatch.loader.state import check_fingerprint, pack_state, unpack_state
from exactbatch.loader.telemetry import Progress, Reports, check_progress
from exactbatch.order import Shard
from exactbatch.prefetch import MAX_DEPTH
from exactbatch.transform import Standardize

__all__ = ["DataLoader"]


class DataLoader(Reports):
    """Exact minibatches of a source, with seeded shuffles, epochs and shards.

    ``source`` is random-access - a :class:`Dataset`, an :class:`NdfFile`, an
    array ``x`` (or an array-like: a CPU torch tensor, a pandas or polars
    DataFrame of numeric columns) or a pair ``(x, y)`` - and every epoch is a
    full permutation of this shard's rows (or file order with
    ``shuffle=False``); or streamed - a :func:`parquet_source`,
    :func:`ndf_blocks`, a zero-argument callable returning an iterator of
    chunks, or a re-iterable of chunks - and rows are re-batched and, with
    ``shuffle``, mixed in a bounded buffer of ``buffer_size`` rows. A buffer
    smaller than a chunk-indexed source (Parquet, ``ndf_blocks``) that holds
    at least 16 of its chunks reads ahead in two halves and mixes rows within
    half of itself; :attr:`mixing_window` says the window a setting gives
    (see :mod:`exactbatch.batching.buffer` for the rule, and for what a
    bounded buffer can and cannot do on sorted data).

    Guarantees:

    * Shard ``s`` of ``S`` owns rows ``[s*n//S, (s+1)*n//S)``; across shards
      each row is handed out exactly once per epoch (less the dropped tail
      with ``drop_last``).
    * Epoch ``e``'s order is a pure function of ``(seed, e, shard_index)``:
      the same for every loader built alike, whatever happened before and
      whatever the kind of source.
    * ``iter(loader)`` begins a new epoch - the first ``iter`` epoch 0 (or
      the one set by :meth:`set_epoch`, :meth:`reset` or
      :meth:`load_state_dict`), each later one the next - and yields
      ``(x, y)`` arrays of shapes (rows, d) and (rows, l) and dtype ``dtype``
      (float64, or float32: cast in the gather, with no second pass) that
      belong to the caller (nothing else writes them; small batches of a
      random-access source are read up to 64 at a time, at most 512 KiB -
      with prefetch, up to 64 at a time, at most 4 MiB, by the prefetch
      thread: such a batch is a view of its group's arrays).
      Where ``batch_size`` is a multiple of 16, a batch's x and y start on a
      64-byte boundary (a cache line; a CPU JAX device aliases such memory
      rather than copy it). Only the newest iterator may advance; an older
      one raises ``RuntimeError``. Batches read ahead in a group count as
      handed out only when they are, as prefetched ones do. The iterator's
      ``peek(k)`` reads the next k batches without handing them out:
      ``next()`` then hands them out, the same arrays, each counted only then.
    * :meth:`next_into` is the allocation-free path and may be called from
      several threads at once.
    * :meth:`state_dict` counts batches handed out, so a restored loader hands
      out exactly the batches that were left; it refuses a state taken under
      other settings. A read that raises leaves its batch to the next call.
    * When an epoch ends, the row ids handed out (an order-independent digest,
      carried across resumes) are checked against those the epoch promised:
      :class:`ExactnessError` if they differ.
    * ``total_size`` is N, the whole dataset's row count: exact for
      random-access sources; for streams ``"auto"`` (from ``n_rows``, or a
      counting pass with a warning), an int (audited after every pass:
      :class:`TotalSizeWarning`) or None (unknown; ``len()`` raises).

    Distributed options: ``num_shards``/``shard_index`` may be ``"auto"``
    (torch.distributed, else Ray Train, else ``RANK``/``WORLD_SIZE``); ``even_batches=True``
    gives every shard the smallest shard's batch count; ``"pad"`` (evaluation; not with
    ``drop_last``) the largest's, every row once: each batch ``batch_size`` rows, real
    ones first, then zeros, and a bool mask last, ``(x, y, mask)`` (``(x, y, rows,
    mask)``, padded ids -1), whole padding batches on a shard with fewer (no rows to
    the ledger; ``next_into`` refuses it); ``elastic`` (random access, or a stream whose
    chunks are indexed - Parquet, ``ndf_blocks``, Dask partitions of known length, a
    list of arrays - whose rows it mixes within windows of :attr:`mixing_window` rows;
    a stream read front to back only is a ``ValueError``) deals one global order per
    epoch out to the shards batch by batch, so a checkpoint resumes at another shard
    count (``"ranges"``: contiguous shares, the rest re-dealt at a resume; batches a
    function of the world-size history). ``prefetch=k`` prepares k batches on a
    background thread - k groups of small batches, of up to 64 batches and 4 MiB
    each, from random access or a stream (default: the reader's own - 2 for .ndf
    batches of 256 KiB or more and for .ndf URLs, else 0).

    ``dtype`` (``np.float64`` or ``np.float32``): the batches' dtype, cast as
    rows are gathered (no second pass).

    ``with_rows=True`` (a ``bool``): every batch is ``(x, y, rows)``, ``rows`` a
    new int64 array of the batch's global row ids, in its row order - for
    random access the row's index in the source (a sharded dataset's global
    row), for a stream the row's position in its unshuffled order (Parquet:
    across the files, in file order): the ids the epoch ledger digests.
    :meth:`next_into` then takes a third buffer. It changes neither the
    order nor a state.

    ``rows`` (random access only; a stream is a ``TypeError``): an int array
    of distinct row ids of the source, e.g. one part of
    :func:`exactbatch.split`. The loader then serves that subset as if it were
    the whole source (``n`` and ``total_size`` are its length), and every
    guarantee above holds over it. Batches gather the source's rows through
    the ids (no copy of the data); a state records a hash of the ids.
    Ids out of range are an ``IndexError``, an id given twice a
    ``ValueError``, a non-integer dtype a ``TypeError``, each naming ``rows``.

    Real data (docs/usage/in-memory.md, "Class labels, NaN and
    standardisation"): ``label_dtype`` (None: the loader's
    ``dtype``; ``np.int64`` or ``np.int32`` for class labels, converted checked
    exact: a non-integer label, NaN or one out of range is a ``ValueError``
    naming the row id; another dtype a ``ValueError`` naming ``label_dtype``).
    ``transform``: a :class:`~exactbatch.Standardize`, applied to the features
    as rows are gathered (statistics of the wrong width: ``ValueError`` naming
    ``transform``, at construction, or at the first batch of a stream whose
    widths are unknown). ``nan``: ``"keep"`` (default) or ``"error"``, which
    refuses a batch holding a NaN with a ``ValueError`` naming the row id and
    the column. Row ids are row numbers in the source (random access) or
    positions in the stream's unshuffled order.

    ``features``/``labels`` (None, or lists of column names or positions): the
    source's columns a loader reads, in each role, on every kind of source
    (:mod:`exactbatch.sources.selection`): ``features=None`` is the source's
    features not chosen as labels, ``labels=None`` its labels. A state
    records the choice and refuses another's.

    ``threads`` (None, or an int >= 1: else ``TypeError``/``ValueError``
    naming ``threads``; the :attr:`threads` attribute): the threads that
    gather one batch (or one group of small batches) on the compiled path,
    each copying a range of its rows with the GIL released. None picks one a
    256 KiB of rows, at most ``len(os.sched_getaffinity(0)) - 1`` (a core
    left to the step, the order's and prefetch's threads), so small batches,
    and every batch on 2 cores, stay on one thread; an int fixes it (at most the batch's rows,
    and 64). Batches are the same bytes whatever it is, so it is not part
    of a state. It applies to random-access sources read by the compiled
    gather (arrays, ``.ndf`` files and datasets); a stream's buffer, and the
    pure NumPy path, pick their own.

    :meth:`stats` says where the time goes (rows and bytes handed out, read latency,
    waits, prefetch, the stall share of steps marked by :meth:`step`); ``progress``, a
    callable, gets it at each epoch's end and every ``progress_every`` seconds
    (docs/usage/telemetry.md).
    """

    def __init__(
        self,
        source: Source,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        num_shards: int | str = 1,
        shard_index: int | str = 0,
        total_size: TotalSize = "auto",
        buffer_size: int | None = None,
        even_batches: bool | Literal["pad"] = False,
        elastic: bool | str = False,
        prefetch: int | None = None,
        dtype: DTypeLike = np.float64,
        with_rows: bool = False,
        rows: ArrayLike | None = None,
        label_dtype: DTypeLike | None = None,
        transform: Standardize | None = None,
        nan: str = "keep",
        threads: int | None = None,
        progress: Progress | None = None,
        progress_every: float = 10.0,
        features: ColumnSelection = None,
        labels: ColumnSelection = None,
    ) -> None:
        batch_size = check_int("batch_size", batch_size, 1)
        seed = check_int("seed", seed, 0, maximum=None)
        num_shards, shard_index = resolve_shard(num_shards, shard_index)
        shard = Shard(shard_index, num_shards)
        self.buffer_size = check_int("buffer_size", buffer_size, 1, optional=True)
        output = Output(dtype, label_dtype, transform, nan)
        spec = BatchSpec(  # (checked there: with_rows a bool, else TypeError)
            batch_size,
            shuffle,
            drop_last,
            even_batches,
            elastic,
            shard,
            output.dtype,
            with_rows,
            output,
        )
        prefetch = check_int("prefetch", prefetch, 0, optional=True, maximum=MAX_DEPTH)
        if isinstance(total_size, np.integer):
            total_size = int(total_size)
        # The spec's settings as plain attributes: read on every batch, so no properties.
        self.batch_size, self.shuffle, self.drop_last = batch_size, spec.shuffle, spec.drop_last
        self.even_batches, self.elastic = spec.even_batches, spec.elastic
        self.num_shards, self.shard_index = shard.count, shard.index
        self.dtype, self.label_dtype = spec.dtype, output.ydtype
        self.transform, self.nan, self.with_rows = transform, nan, spec.with_rows
        threads = check_int("threads", threads, 1, optional=True)
        columns = (features, labels)
        self._feed = open_feed(source, spec, total_size, self.buffer_size, rows, columns)
        self.threads = threads  # not in a state: it does not change a batch's bytes
        self._feed.use_threads(threads)
        self.total_size = self._feed.total_size
        self.n = self._feed.n
        self.prefetch = prefetch if prefetch is not None else self._feed.prefetch_default()
        self._cursor: Cursor = Cursor(self._feed, seed)
        self._telemetry = self._watch(progress, check_progress(progress, progress_every))
        # next_into's record of its wait (a read too, or not): Telemetry.waiter's, kept
        self._groups = group_sizes(self._feed)  # None while a stream's widths are unknown
        # next_into: its common call in one (in C where compiled), the rest in Python
        nx = self._next_into = NextInto(self._feed, self._cursor, self._group_sizes)
        self._checks, self._holder = nx.checks, nx.holder  # its checks, and its group
        self._hand = nx.hand

    # -- sizes -----------------------------------------------------------------

    def __len__(self) -> int:
        """Batches per epoch of this shard: ceil(n / batch_size), floor with drop_last
        (``even_batches``: the smallest shard's count; ``"pad"``: the largest's).

        A stream of unknown size (``total_size=None``) has no length: ``TypeError``.
        """
        if self._feed.nbatches is None:
            raise TypeError("len() of a DataLoader over a stream with total_size=None is unknown")
        return self._feed.nbatches

    @property
    def d(self) -> int | None:
        """Features per row (None for a stream not read yet)."""
        return self._feed.d

    @property
    def l(self) -> int | None:  # noqa: E743
        """Labels per row (None for a stream not read yet)."""
        return self._feed.l

    @property
    def epoch(self) -> int:
        """The epoch in progress, or the one the next ``iter()`` begins: once every
        batch of an epoch has been handed out, the next one (as ``state_dict()``
        says)."""
        return self._cursor.epoch_now()

    @property
    def seed(self) -> int:
        return self._cursor.seed

    @property
    def last_rows(self) -> int:
        """Rows in the last batch handed out (0 before the first)."""
        return self._cursor.last_rows

    @property
    def mixing_window(self) -> int | None:
        """How many consecutive rows of the source a row can be mixed with.

        Random access with ``shuffle``: the shard's rows (a full shuffle). A
        shuffled stream: its shuffle buffer, or half of it when the buffer
        reads ahead in halves, never more than the shard's rows when known
        (None for a stream with the default ``buffer_size``, sized by the
        widths, until it is read). Without ``shuffle``: 1.
        """
        return self._feed.mixing_window()

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:  # a state moves, not threads
        raise TypeError("a DataLoader cannot be pickled: send state_dict(), use load_state_dict")

    def __repr__(self) -> str:
        return (
            f"DataLoader(n={self.n}, d={self.d}, l={self.l}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, seed={self.seed}, drop_last={self.drop_last}, "
            f"shard={self.shard_index}/{self.num_shards}, total_size={self.total_size}, "
            f"epoch={self.epoch})"
        )

    # -- iteration -------------------------------------------------------------

    def __iter__(self) -> EpochIterator:
        groups = self._group_sizes()
        group = groups[self.prefetch > 0] if groups else 0  # 0: size it later
        return EpochIterator(self._cursor, self._cursor.next_epoch(), self.prefetch, group)

    def next_into(
        self, bx: np.ndarray, by: np.ndarray | None = None, brows: np.ndarray | None = None
    ) -> int:
        """Write the next batch into ``bx`` (batch_size, d) and ``by`` (batch_size, l).

        Both must be C-contiguous arrays of the loader's :attr:`dtype` (``by``: of
        its :attr:`label_dtype`), a ``TypeError`` naming the buffer otherwise; ``by``
        may be None when l = 0. With ``with_rows=True``, ``brows`` (an int64 array
        of shape (batch_size,)) is required and receives the rows' global ids;
        without it, passing ``brows`` is a ``TypeError`` (build the loader with
        ``with_rows=True``).
        Returns the rows written (the first rows of each buffer): 0 at the end
        of the epoch, and 0 again on every call until :meth:`reset` or a new
        ``iter()``. Safe to call from several threads at once: each call takes
        the next batch, whichever thread makes it (small batches are claimed a
        group at a time, counted in a state only once handed out). A read that
        raises leaves the batch to the next call.
        """
        # The common call (plain buffers, a batch of the epoch's whole order in the
        # group) is one call, in C where the core is compiled (loader.handout); the
        # rest goes on here, with the batch it popped if it did.
        got = self._hand(bx, by) if brows is None else None
        if got.__class__ is int:
            return got
        assert not isinstance(got, int)  # (for mypy: the class test above, which is faster)
        return self._next_into(bx, by, brows, got)

    def _group_sizes(self) -> tuple[int, int] | None:
        """:func:`group_sizes` of the feed, kept once known (None while a stream's
        widths are unknown)."""
        if self._groups is None:
            self._groups = group_sizes(self._feed)
        return self._groups

    # -- moving the cursor -----------------------------------------------------------

    def reset(self, seed: int | None = None) -> None:
        """Rewind.

        With ``seed``: reseed; what follows is epoch 0 of that seed, a pure
        function of it whatever happened before. Without: rewind to the start
        of the next epoch (of the pending one if the current epoch has not
        begun).
        """
        self._cursor.rewind(check_int("seed", seed, 0, optional=True, maximum=None))

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the one the next ``iter()`` or ``next_into`` begins."""
        self._cursor.set_epoch(check_int("epoch", epoch, 0))

    # -- resume ---------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands, as small plain data (JSON-safe).

        Batches handed out count as consumed; batches prepared ahead (prefetch)
        or whose read failed do not. A state taken at the end of an epoch
        resumes at the start of the next. The state records every setting that
        fixes the order and the source's shape (:meth:`load_state_dict`
        refuses another), and the epoch's ledger: the count and digest of the
        rows handed out so far, checked when the epoch ends; and ``history``, a
        record of each epoch begun (this loader's own hand-outs, and the
        promise once the epoch ended), which :func:`exactbatch.certify` merges
        across ranks. Under ``elastic=True`` the state holds ``global_batches_done``, the batches
        of the epoch's global order handed out by all shards together,
        assuming they step in lockstep (as data-parallel training does); any
        shard count may resume from it, and every rank's state says the same
        (``"ranges"``: ``segments``, the world-size history ``[[S, steps], ...]``).

        The state's ``fingerprint`` says which data it was taken on (n, d, l,
        column names, the file's or manifest's identity, a hash of a fixed
        sample of up to 64 rows, and the ``rows`` subset's hash: see
        :mod:`exactbatch.sources.identity`); it is made at the first state
        and costs no full read.
        """
        return pack_state(self._cursor.snapshot(), self._feed)

    def load_state_dict(self, state: dict[str, Any], *, allow_other_data: bool = False) -> None:
        """Resume from :meth:`state_dict`: the next batches are those not yet handed out.

        The state must come from a loader with the same settings, seed and
        source shape (under ``elastic``, any shard count); a mismatch is a
        ``ValueError`` naming the setting and both values, and leaves the loader
        as it was. The seed is the loader's current one: a state taken after
        ``reset(seed=s)`` resumes in a loader built with ``seed=s`` or reset to
        it. A stream not read yet reads its first chunk here to learn its widths
        (d, l), so that a state of other widths is refused now, not mid-epoch.

        A state taken on other data (its ``fingerprint`` differs from this
        loader's source: other rows, names, files or subset) is a ``ValueError``
        naming both, unless ``allow_other_data=True``; the same data at another
        path, or with another mtime, is not other data. A state without a
        fingerprint (from an exactbatch before them) loads unchecked.
        """
        allow_other_data = check_flag("allow_other_data", allow_other_data)
        feed = self._feed
        if isinstance(state, dict) and state.get("d") is not None:
            feed.learn_widths()  # a stream not read yet reads its first chunk
        position, claimed = unpack_state(state, feed, self._cursor.seed)
        if not allow_other_data:  # (after the settings and the shape: their errors first)
            check_fingerprint(state, feed)
        self._cursor.restore(position, claimed)

    # -- lifetime ---------------------------------------------------------------

    def close(self) -> None:
        """Let go of the source (an .ndf file closes when its last holder lets go)."""
        if self._cursor.close():
            self._feed.close()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
