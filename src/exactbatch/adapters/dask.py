"""Dask collections in and out: write a sharded ``.ndf`` dataset in parallel, read
partitions as a stream, and column statistics.

* :func:`to_ndf_dataset` writes a Dask DataFrame or a 2-D Dask Array as a
  sharded dataset (:mod:`exactbatch.ndf.dataset_protocol`): one part per
  partition, each converted and written by the Dask worker that computed it,
  in parallel, each atomically (``write_part``: a temporary file renamed, or
  an upload committed only when whole), named with the write's id. The
  client writes the manifest last, from the parts' sizes the workers return,
  so the new dataset appears only when every part is written, replacing the
  old one at once. A failed write (a partition that raises) waits for every
  task still running, then removes the parts written. Costs: each worker
  holds one partition (and its float64 copy) at a time; the client holds one
  small record per part.
* :func:`dask_source` reads a collection as a streamed source whose chunks
  are its partitions: on a ``dask.distributed`` cluster the next few
  partitions of the epoch are computed ahead, side by side (the loader
  tells the source its order through ``will_need``); otherwise each when
  the loader reads it (the loader reads one chunk ahead on a thread of its
  own, so the next partition is computed while the current one is cut into
  batches). When the partitions'
  lengths are known without computing anything (a Dask Array's chunks, or a
  DataFrame whose expression knows them: ``from_pandas``, Parquet with row
  counts in its footers), N is known, the source is chunk-indexed (a loader
  shard computes only the partitions its rows are in, in a shuffled order)
  and no counting pass runs; otherwise the partitions are read in order and
  the loader counts the rows in one pass (with its warning).
* :func:`column_stats`: per-column count, mean, sd, min and max, each
  partition summarised on a worker and merged on the client
  (:class:`~exactbatch.stats.ColumnStats`).

Columns: a DataFrame's ``labels`` are column names (a name or a list), its
``features`` the columns to read as features (None: every column not a
label), and the names travel into the manifest. A Dask Array has no names:
``labels`` and ``features`` are column positions (negative from the end).
Every chosen column must hold real numbers (bool, int, float; pandas'
nullable types too, whose missing values become NaN), else ``TypeError``
naming them.

Where it runs: on the scheduler that ``dask.compute`` would use (a
``dask.distributed`` client when one is active). Local paths must be seen
by every worker (one machine, or a shared filesystem); URLs
(``s3://bucket/prefix``) are written by the workers directly, with
``storage_options``. dask is imported on first use, not by importing this
module.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from exactbatch.adapters.dask_plan import Columns, Plan, import_dask, plan_for
from exactbatch.checks import check_int
from exactbatch.hints import Foreign, PathLike
from exactbatch.ndf.dataset_protocol import abort_dataset, finish_dataset, start_dataset, write_part
from exactbatch.ndf.manifest import PartInfo
from exactbatch.ndf.storage import dataset_path
from exactbatch.order.subset import check_subset
from exactbatch.sources.identity import column_names
from exactbatch.stats import ColumnStats

__all__ = ["DaskPartitions", "DaskStream", "column_stats", "dask_source", "to_ndf_dataset"]


def _client() -> Foreign:
    """The active ``dask.distributed`` client, or None (then ``dask.compute``'s scheduler)."""
    try:
        from distributed import default_client
    except ImportError:
        return None
    find: Foreign = default_client  # (distributed's functions are not annotated)
    try:
        return find()
    except ValueError:  # no client
        return None


def _compute_all(tasks: list[Foreign]) -> list[Any]:
    """The results of ``tasks`` (Delayed), or the first error once no task still runs
    (what the tasks return: each caller names it).

    Every task started is waited for, failed or not, before an error is
    raised, so that nothing still writes when the caller cleans up: on a
    ``dask.distributed`` client, every task; on the local threaded scheduler
    (dask's default), the tasks already started run to their end in a pool of
    threads of this call's own (dask's shared pool is never waited for), and
    no new one starts. (The processes scheduler waits for its pool itself.)
    A Ctrl-C on a distributed client cancels the tasks; a task already
    running on a worker cannot be stopped, and what it writes is left behind.
    """
    client = _client()
    if client is None:
        dask = import_dask()
        from concurrent.futures import ThreadPoolExecutor

        from dask.base import get_scheduler
        from dask.system import CPU_COUNT
        from dask.threaded import get as threaded_get

        scheduler_of: Foreign = get_scheduler  # (dask's functions are not annotated)
        if (
            scheduler_of(collections=tasks) is not threaded_get
            or dask.config.get("pool", None) is not None
        ):
            return list(dask.compute(*tasks))
        workers = dask.config.get("num_workers", None) or CPU_COUNT
        pool = ThreadPoolExecutor(workers, thread_name_prefix="exactbatch-dask")
        try:
            return list(dask.compute(*tasks, scheduler=pool))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    from distributed import wait

    wait_for: Foreign = wait  # (distributed's functions are not annotated)
    futures = client.compute(tasks)
    try:
        wait_for(futures)
        for f in futures:
            if f.status == "error":
                f.result()  # raises the task's own exception
        results: list[Any] = client.gather(futures)
        return results
    finally:
        client.cancel(futures)


# -- writing ----------------------------------------------------------------------------------


def _write_partition(
    part: Foreign,
    index: int,
    path: str,
    write_id: str,
    columns: Columns,
    so: dict[str, Any] | None,
) -> PartInfo:
    """On a worker: partition ``index`` as part ``index`` of the write ``write_id`` (atomic)."""
    x, y = columns.to_xy(part)
    return write_part(path, index, (x, y), write_id=write_id, storage_options=so)


def to_ndf_dataset(
    collection: Any,
    path: PathLike,
    *,
    features: Any = None,
    labels: Any = (),
    categorical: Any = None,
    storage_options: dict[str, Any] | None = None,
) -> None:
    """Write a Dask DataFrame or a 2-D Dask Array as a sharded ``.ndf`` dataset at ``path``.

    One part per partition, in partition order, written by the Dask workers
    in parallel, each atomically; the manifest last, by the client. Read it
    back with :func:`~exactbatch.ndf.dataset.open_ndf_dataset`: row i of the
    dataset is row i of the collection.

    ``labels``: the label columns (DataFrame: names; Array: positions; ``()``
    none); ``features``: the feature columns, None for every column not a
    label. A DataFrame's column names go into the manifest (``features``,
    ``labels``). ``path``: a local folder (made if missing; every worker
    must see it) or a URL (``s3://bucket/prefix``) with ``storage_options``
    as for :func:`~exactbatch.ndf.dataset.open_ndf_dataset`.

    ``categorical`` (a DataFrame's): columns among the features and labels
    written as integer codes, by the rule of
    :mod:`exactbatch.sources.categorical`: a list of names learns each
    vocabulary, sorted, in a first pass (one ``compute`` of those columns'
    distinct values: the collection is computed twice, unless persisted);
    ``{column: [values]}`` gives it, and a partition holding another value
    fails the write (``ValueError`` naming the column and the value). The
    vocabularies go to the manifest: :func:`exactbatch.categories` reads them.
    Any other non-numeric column chosen is a ``TypeError`` naming it.

    A dataset already at ``path`` stays readable until the new manifest
    replaces it (its parts are removed then). If any partition fails (its
    computation raises, or a write does), the error is raised once every
    task started has ended (see :func:`_compute_all`), and the parts this
    write made are removed: the old dataset is as it was.
    """
    dask = import_dask()
    plan = plan_for(collection, features, labels, "to_ndf_dataset", categorical)
    path = dataset_path(path, storage_options)
    write_id = start_dataset(path, storage_options=storage_options)
    try:
        write = dask.delayed(_write_partition, pure=False)
        tasks = [
            write(part, k, path, write_id, plan.columns, storage_options)
            for k, part in enumerate(plan.parts)
        ]
        infos: list[PartInfo] = _compute_all(tasks)
        names: dict[str, Any] = {}
        if plan.columns.frame:
            names = {"features": plan.features, "labels": plan.labels}
            names["categories"] = {c: list(v) for c, v in plan.columns.categories} or None
        finish_dataset(
            path, write_id, infos, plan.d, plan.l, storage_options=storage_options, **names
        )
    except BaseException:  # (after a finish that a held Ctrl-C ended, this keeps all)
        abort_dataset(path, write_id, storage_options=storage_options)
        raise


# -- reading ----------------------------------------------------------------------------------


class _Ahead:
    """Partitions computed ahead on a ``dask.distributed`` cluster: at most ``ahead`` at
    once, in the order they were asked for (:meth:`want`); :meth:`get` takes one (its
    future's result, or computed there and then). Without a client nothing runs ahead:
    local schedulers compute in this process, where the loader's own read-ahead thread
    already overlaps one partition with the batches of the last."""

    def __init__(self, parts: list[Foreign], ahead: int) -> None:
        self.parts, self.ahead = parts, ahead
        self.lock = threading.Lock()
        self.wanted: deque[int] = deque(maxlen=64)  # asked for, not yet started
        self.running: dict[int, Foreign] = {}  # partition -> Future, at most ``ahead``

    def want(self, i: int) -> None:
        if self.ahead == 0:
            return
        client = _client()
        if client is None:
            return
        with self.lock:
            if i not in self.running and i not in self.wanted:
                self.wanted.append(i)
            self._start(client)

    def _start(self, client: Foreign) -> None:
        while len(self.running) < self.ahead and self.wanted:
            i = self.wanted.popleft()
            self.running[i] = client.compute(self.parts[i])

    def get(self, i: int) -> Foreign:
        """Partition ``i`` computed (a pandas DataFrame or a NumPy block)."""
        with self.lock:
            future = self.running.pop(i, None)
            if i in self.wanted:
                self.wanted.remove(i)
            client = _client() if self.wanted else None
            if client is not None:
                self._start(client)
        if future is not None:
            return future.result()
        (part,) = import_dask().compute(self.parts[i])
        return part


class _Source:
    """What both kinds of Dask source share: the plan, its widths and names, the
    partitions computed ahead."""

    def __init__(self, plan: Plan, ahead: int) -> None:
        self._plan = plan
        self._ahead = _Ahead(plan.parts, ahead)
        self.features, self.labels = plan.features, plan.labels
        self.d, self.l = plan.d, plan.l
        self.npartitions = len(plan.parts)

    def identity(self) -> dict[str, Any]:
        """Its kind and columns (:mod:`exactbatch.sources.identity`): no partition is
        computed to sample it."""
        return {"kind": "dask", "names": column_names(self.features, self.labels)}

    @property
    def computing(self) -> tuple[int, ...]:
        """The partitions being computed ahead now (on a distributed cluster)."""
        with self._ahead.lock:
            return tuple(sorted(self._ahead.running))

    def will_need(self, i: int) -> None:
        """Partition ``i`` is read soon: start computing it on the cluster, unless
        ``ahead`` partitions are being computed already (then it starts as one of them
        is read). The loader calls this for the partitions of its epoch, in order."""
        self._ahead.want(i)

    fresh_chunks = True  # each partition computed into arrays of its own

    def read_chunk(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Partition ``i`` (computed ahead, or now) as float64 ``(x, y)``."""
        return self._plan.columns.to_xy(self._ahead.get(i))

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        n, ahead = self.npartitions, self._ahead.ahead
        for i in range(min(ahead, n)):
            self.will_need(i)
        for i in range(n):
            if i + ahead < n:
                self.will_need(i + ahead)
            yield self.read_chunk(i)

    def __len__(self) -> int:
        return self.npartitions


class DaskPartitions(_Source):
    """A chunk-indexed source over a collection whose partition lengths are known: chunk
    ``i`` is partition ``i`` (``read_chunk(i)`` computes it). ``n_rows`` and
    ``chunk_rows`` come from the lengths, so N needs no counting pass and a loader shard
    computes only the partitions its rows are in. See :func:`dask_source`."""

    def __init__(self, plan: Plan, ahead: int) -> None:
        super().__init__(plan, ahead)
        self.chunk_rows = np.asarray(plan.lengths, dtype=np.int64)
        self.n_rows = int(self.chunk_rows.sum())

    def read_chunk(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        x, y = super().read_chunk(i)
        if x.shape[0] != self.chunk_rows[i]:
            raise ValueError(
                f"partition {i} of the Dask collection has {x.shape[0]} rows; its "
                f"expression said {int(self.chunk_rows[i])}"
            )
        return x, y

    def __repr__(self) -> str:
        return (
            f"DaskPartitions({self.npartitions} partitions, n_rows={self.n_rows}, d={self.d}, "
            f"l={self.l})"
        )


class DaskStream(_Source):
    """A re-iterable source over a collection whose partition lengths are unknown: each
    pass computes the partitions in order, one at a time; the loader counts N in one
    pass (see :func:`dask_source`)."""

    def __repr__(self) -> str:
        return f"DaskStream({self.npartitions} partitions, d={self.d}, l={self.l})"


def dask_source(
    collection: Any, *, features: Any = None, labels: Any = (), ahead: int = 2
) -> DaskPartitions | DaskStream:
    """A streamed source for ``DataLoader`` whose chunks are ``collection``'s partitions.

    ``collection``: a Dask DataFrame or a 2-D Dask Array; ``features`` and
    ``labels`` choose columns as in :func:`to_ndf_dataset`. Each partition
    is computed when the loader reads it (on the active scheduler); on a
    ``dask.distributed`` cluster the next ``ahead`` partitions of the epoch
    (in the loader's order) are computed ahead, side by side, while the
    loader works (``ahead=0``: one at a time). Memory: about ``ahead + 2``
    partitions plus the loader's shuffle buffer.

    With partition lengths known without computing (a Dask Array's chunks;
    a DataFrame from ``from_pandas`` or ``read_parquet`` of files with row
    counts, not one filtered or mapped since), it is a :class:`DaskPartitions`:
    ``n_rows`` (so ``total_size="auto"`` is exact at once) and ``chunk_rows``,
    and the loader may shuffle the partition order and reads only its shard's
    partitions. Otherwise a :class:`DaskStream`: partitions in order, and N
    from the loader's counting pass (or pass ``total_size``).
    """
    ahead = check_int("ahead", ahead, 0)
    plan = plan_for(collection, features, labels, "dask_source")
    return DaskStream(plan, ahead) if plan.lengths is None else DaskPartitions(plan, ahead)


# -- statistics -------------------------------------------------------------------------------


def _partition_stats(
    part: Foreign, columns: Columns, rows: np.ndarray | None = None
) -> ColumnStats:
    x, y = columns.to_xy(part)
    both = np.concatenate((x, y), axis=1)  # (rows, d + l)
    return ColumnStats.of(both if rows is None else both[rows])


def _length(part: Foreign) -> int:
    return len(part)


def column_stats(
    collection: Any, *, features: Any = None, labels: Any = (), rows: Any = None
) -> list[dict[str, Any]]:
    """Per-column ``count``, ``nan``, ``mean``, ``sd`` (divisor n), ``min`` and ``max``
    of ``collection``'s chosen columns (as :func:`to_ndf_dataset` chooses them), features
    then labels, each a dict with the column's ``name``: what ``exactbatch info --stats``
    reports for a file, and what :class:`~exactbatch.Standardize` matches to a loader's
    columns by name. Each partition is summarised where it is computed, in parallel,
    and the summaries are merged on the client (numerically stable at any offset).

    ``rows``: the statistics of these rows only (distinct ids into the collection's
    rows in order, ``DataLoader(rows=)``'s rule; a training fold of
    :func:`exactbatch.split` or :func:`exactbatch.kfold`), so a transform fitted on
    the training rows alone needs no merge by hand. Each partition summarises its own
    ids; partitions of unknown length are counted first (one more pass).
    """
    dask = import_dask()
    plan = plan_for(collection, features, labels, "column_stats")
    summarise = dask.delayed(_partition_stats, pure=True)
    if rows is None:
        tasks = [summarise(p, plan.columns) for p in plan.parts]
    else:
        lengths: Sequence[int] | None = plan.lengths
        if lengths is None:
            lengths = _compute_all([dask.delayed(_length, pure=True)(p) for p in plan.parts])
        bounds = np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64))])
        ids = np.sort(check_subset(rows, int(bounds[-1])))
        cut = np.searchsorted(ids, bounds)
        tasks = [
            summarise(p, plan.columns, ids[cut[i] : cut[i + 1]] - bounds[i])
            for i, p in enumerate(plan.parts)
            if cut[i + 1] > cut[i]
        ]
    parts: list[ColumnStats] = _compute_all(tasks)
    total = ColumnStats(plan.d + plan.l)
    for s in parts:
        total.merge(s)
    return total.table([*plan.features, *plan.labels])
