"""DataLoader: the one front door - epochs, the cursor, threads and resume.

The loader owns the cursor (which epoch, how many batches handed out);
everything else is delegated: the order to :mod:`exactbatch.order`, fetching
rows to a reader in :mod:`exactbatch.sources`, cutting an epoch into batches
to :mod:`exactbatch.batching`.

Concurrency: a lock guards only the claim of the next batch; the rows are
then read outside it, so threads that share a loader read in parallel.
"""

from __future__ import annotations

import threading

import numpy as np

from exactbatch.arrays import check_out_array
from exactbatch.audit import check_ledger, resolve_random_access_total
from exactbatch.batching.indexed import IndexedFeed
from exactbatch.checks import check_flag, check_int
from exactbatch.distributed import resolve_shard
from exactbatch.ndf import NdfFile
from exactbatch.order import check_shard
from exactbatch.order.digest import Tally
from exactbatch.prefetch import Prefetcher
from exactbatch.sources.random_access import random_access_reader
from exactbatch.streamed import StreamFeed
from exactbatch.urls import is_url

__all__ = ["DataLoader"]

STATE_VERSION = 2  # 2: the ledger, pending batches and the source's shape; 1 still loads
_PREFETCH_MIN_BYTES = 256 << 10  # default prefetch only for batches of at least this size


class DataLoader:
    """Exact minibatches of a source, with seeded shuffles, epochs and shards.

    ``source`` is random-access - a :class:`Dataset`, an :class:`NdfFile`, an
    array ``x`` (or an array-like: a CPU torch tensor, a pandas or polars
    DataFrame of numeric columns) or a pair ``(x, y)`` - and every epoch is a full permutation
    of this shard's rows (or file order with ``shuffle=False``); or streamed
    - a :func:`parquet_source`, :func:`ndf_blocks`, a zero-argument callable
    returning an iterator of chunks, or a re-iterable of chunks - and rows
    are re-batched and, with ``shuffle``, mixed in a bounded buffer of
    ``buffer_size`` rows (see :mod:`exactbatch.batching.buffer` for what a
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
      ``(x, y)`` float64 arrays of shapes (rows, d) and (rows, l) that belong
      to the caller. Only the newest iterator may advance; an older one
      raises ``RuntimeError``.
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
    (torch.distributed, else ``RANK``/``WORLD_SIZE``); ``even_batches`` gives
    every shard the smallest shard's batch count; ``elastic`` (random access
    only) deals one global order per epoch out to the shards batch by batch,
    so a checkpoint resumes at another shard count. ``prefetch=k`` prepares
    k batches on a background thread (default: 2 for .ndf batches of 256 KiB
    or more, else 0).
    """

    def __init__(
        self,
        source,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        num_shards: int | str = 1,
        shard_index: int | str = 0,
        total_size="auto",
        buffer_size: int | None = None,
        even_batches: bool = False,
        elastic: bool = False,
        prefetch: int | None = None,
    ):
        self.batch_size = check_int("batch_size", batch_size, 1)
        self._seed = check_int("seed", seed, 0)
        num_shards, shard_index = resolve_shard(num_shards, shard_index)
        check_shard(num_shards, shard_index)
        if buffer_size is not None:
            buffer_size = check_int("buffer_size", buffer_size, 1)
        self.shuffle = check_flag("shuffle", shuffle)
        self.drop_last = check_flag("drop_last", drop_last)
        self.num_shards, self.shard_index = int(num_shards), int(shard_index)
        self.even_batches = check_flag("even_batches", even_batches)
        self.elastic = check_flag("elastic", elastic)
        if isinstance(total_size, np.integer):
            total_size = int(total_size)
        self.buffer_size = buffer_size
        if prefetch is not None:
            check_int("prefetch", prefetch, 0)

        reader = random_access_reader(source)
        common = {
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "num_shards": self.num_shards,
            "shard_index": self.shard_index,
            "even_batches": self.even_batches,
        }
        if reader is not None:
            self.total_size = resolve_random_access_total(total_size, reader.n)
            self._feed = IndexedFeed(reader, **common, elastic=self.elastic)
        else:
            if self.elastic:
                raise ValueError(
                    "elastic=True needs a random-access source (a Dataset, an NdfFile, an "
                    "array or a pair); a stream cannot be re-dealt across shards mid-epoch"
                )
            self._feed = StreamFeed(
                source, **common, total_size=total_size, buffer_size=buffer_size
            )
            self.total_size = self._feed.total_size
        self._reader = reader  # the random-access reader, None for streams
        self.prefetch = int(prefetch) if prefetch is not None else self._default_prefetch(source)
        self.n = self._feed.n
        self._nbatches = self._feed.nbatches

        self._lock = threading.Lock()
        self._epoch = 0  # the epoch in progress, or the pending one
        self._skip = 0  # batches of the pending epoch claimed before (a restored state)...
        self._pending = ()  # ...of which these were not handed out: they come first
        self._first = 0  # elastic: the global batch the pending epoch starts at
        self._begun = False  # has the epoch begun (an iter() or a claimed batch)?
        self._current = None  # the epoch being handed out
        self._gen = 0  # bumped when the cursor is moved; stale iterators stop
        self._last_rows = 0
        self._closed = False
        self._handed = Tally()  # the ledger: rows handed out this epoch (resumes included)
        self._verified = True  # False for an epoch resumed from a state without a ledger
        self._ended = False  # has the end of the epoch been reached (and the ledger checked)?
        self._out = {}  # batch -> job: claimed for a prefetch, not handed out yet
        self._orphans = []  # (epoch, jobs) given back by iterators dropped without the lock

    def _default_prefetch(self, source) -> int:
        """Prefetch where it pays: reads from an .ndf file (page faults and I/O wait
        overlap the consumer's work) in batches large enough that handing them
        between threads costs little, and from URLs always. In memory a gather is as cheap as the
        hand-over; streams keep to two batches in memory unless asked."""
        if not isinstance(source, NdfFile):
            return 0
        if is_url(source.path):  # every batch is a network round trip: always overlap it
            return 2
        return 2 if self.batch_size * 8 * (self.d + self.l) >= _PREFETCH_MIN_BYTES else 0

    # -- sizes -----------------------------------------------------------------

    def __len__(self) -> int:
        """Batches per epoch of this shard: ceil(n / batch_size), floor with drop_last.

        A stream of unknown size (``total_size=None``) has no length: ``TypeError``.
        """
        if self._nbatches is None:
            raise TypeError("len() of a DataLoader over a stream with total_size=None is unknown")
        return self._nbatches

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
        """The epoch in progress, or the one the next ``iter()`` begins."""
        return self._epoch

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def last_rows(self) -> int:
        """Rows in the last batch handed out (0 before the first)."""
        return self._last_rows

    @property
    def mixing_window(self) -> int | None:
        """How many consecutive rows of the source a row can be mixed with.

        Random access with ``shuffle``: the shard's rows (a full shuffle). A
        shuffled stream: its shuffle buffer, or half of it when the buffer
        reads ahead in halves, never more than the shard's rows when known
        (None for a stream with the default ``buffer_size``, sized by the
        widths, until it is read). Without ``shuffle``: 1.
        """
        if self._reader is not None:
            return max(1, self.n) if self.shuffle else 1
        return self._feed.mixing_window()

    def __repr__(self) -> str:
        return (
            f"DataLoader(n={self.n}, d={self.d}, l={self.l}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, seed={self._seed}, drop_last={self.drop_last}, "
            f"shard={self.shard_index}/{self.num_shards}, total_size={self.total_size}, "
            f"epoch={self._epoch})"
        )

    # -- the cursor (every method below that touches it holds the lock) -----------

    def _begin(self) -> None:
        if self._closed:
            raise ValueError("read from a closed DataLoader")
        self._current = self._feed.open_epoch(
            self._seed, self._epoch, self._skip, self._first, self._pending
        )
        self._begun, self._ended = True, False

    def _move(self, epoch: int) -> None:
        if self._current is not None:
            self._current.close()
        self._epoch, self._begun, self._current = epoch, False, None
        self._skip, self._pending, self._first = 0, (), 0
        self._handed, self._verified, self._ended = Tally(), True, False
        self._out = {}
        self._orphans.clear()
        self._gen += 1

    def _check_gen(self, gen: int | None) -> None:
        if gen is not None and gen != self._gen:
            raise RuntimeError(
                "this iterator is stale: a later iter(), reset(), set_epoch() or "
                "load_state_dict() moved the loader on"
            )

    def _adopt_orphans(self) -> None:
        """Take back the batches of iterators dropped without the lock (see _give_back)."""
        while self._orphans:
            owner, jobs = self._orphans.pop()
            self._give_back_locked(owner, jobs, counted=False)

    def _claim(self, gen: int | None, hand_out: bool = True):
        """``(job, epoch)``: the next batch's job (None at the end) and the epoch it
        belongs to. Counted as handed out unless ``hand_out`` is false (a prefetched
        batch is counted by :meth:`_hand_out`)."""
        with self._lock:
            self._check_gen(gen)
            if self._orphans:
                self._adopt_orphans()
            if not self._begun:
                self._begin()
            owner = self._current
            job = owner.claim()
            if job is None:
                if hand_out:
                    self._end()
            elif hand_out:
                self._handed.add(job.size, job.digest)
                self._last_rows = job.size
            else:
                self._out[job.k] = job
            return job, owner

    def _hand_out(self, gen: int, job) -> None:
        """A prefetched batch reaches the consumer: now it counts."""
        with self._lock:
            self._check_gen(gen)
            self._out.pop(job.k, None)
            self._handed.add(job.size, job.digest)
            self._last_rows = job.size

    def _give_back(self, owner, jobs, counted: bool, locked: bool = True) -> None:
        """Jobs of epoch ``owner`` claimed but not handed out after all (a failed read,
        or prefetched and dropped): claimed again first. ``counted``: they had been
        counted as handed out. Without ``locked`` (a finalizer, which may run while
        this thread holds the lock) they are queued for the next holder of the lock."""
        if not jobs:
            return
        if not locked:
            self._orphans.append((owner, jobs))
            return
        with self._lock:
            self._give_back_locked(owner, jobs, counted)

    def _give_back_locked(self, owner, jobs, counted: bool) -> None:
        if owner is not self._current:  # the cursor moved on: nothing to give back to
            return
        for job in jobs:
            if counted:
                self._handed.add(-job.size, -job.digest)
            else:
                self._out.pop(job.k, None)
        owner.give_back(jobs)
        self._ended = False

    def _finish(self, gen: int) -> None:
        """A consumer of prefetched batches reached the end of the epoch."""
        with self._lock:
            if gen == self._gen and self._current is not None:
                self._end()

    def _end(self) -> None:
        """The epoch has ended: check the ledger (once) against the epoch's promise."""
        if self._ended or self._out:  # batches on their way: the last one's consumer checks
            return
        self._ended = True
        if not self._verified:
            return
        check_ledger(
            self._handed,
            self._current.promise(),
            epoch=self._epoch,
            shard_index=self.shard_index,
            num_shards=self.num_shards,
        )

    # -- iteration -------------------------------------------------------------

    def __iter__(self):
        with self._lock:
            if self._begun:
                self._move(self._epoch + 1)
            else:
                self._gen += 1
            self._begin()
            return _EpochIterator(self, self._gen, self.prefetch)

    def next_into(self, bx: np.ndarray, by: np.ndarray | None = None) -> int:
        """Write the next batch into ``bx`` (batch_size, d) and ``by`` (batch_size, l).

        Both must be float64 C-contiguous; ``by`` may be None when l = 0.
        Returns the rows written (the first rows of each buffer): 0 at the end
        of the epoch, and 0 again on every call until :meth:`reset` or a new
        ``iter()``. Safe to call from several threads at once. A read that
        raises leaves the batch to the next call.
        """
        if self.d is None:  # a stream not read yet: read ahead to learn its widths
            with self._lock:
                if not self._begun:
                    self._begin()
                self._current.peek()
            if self.d is None:  # no chunk at all: the epoch is over before it began
                return 0
        if bx is None or (by is None and self.l):
            raise TypeError(
                f"next_into needs float64 buffers bx of shape {(self.batch_size, self.d)} and "
                f"by of shape {(self.batch_size, self.l)} (by may be None only when l = 0)"
            )
        check_out_array(bx, (self.batch_size, self.d), "bx")
        if by is None:
            by = np.empty((self.batch_size, 0), dtype=np.float64)
        check_out_array(by, (self.batch_size, self.l), "by")
        job, owner = self._claim(None)
        if job is None:
            return 0
        try:
            job.fill(bx[: job.size], by[: job.size])
        except BaseException:
            self._give_back(owner, [job], counted=True)
            raise
        return job.size

    # -- moving the cursor -----------------------------------------------------------

    def reset(self, seed: int | None = None) -> None:
        """Rewind.

        With ``seed``: reseed; what follows is epoch 0 of that seed, a pure
        function of it whatever happened before. Without: rewind to the start
        of the next epoch (of the pending one if the current epoch has not
        begun).
        """
        with self._lock:
            if seed is not None:
                self._seed = check_int("seed", seed, 0)
                self._move(0)
            else:  # an epoch restored mid-way has begun too
                self._move(self._epoch + 1 if self._begun or self._skip else self._epoch)

    def set_epoch(self, epoch: int) -> None:
        """Make ``epoch`` the one the next ``iter()`` or ``next_into`` begins."""
        epoch = check_int("epoch", epoch, 0)
        with self._lock:
            self._move(epoch)

    # -- resume ---------------------------------------------------------------

    def _config(self) -> dict:
        """Every setting that fixes the order, and the source's shape."""
        config = {
            "source": "random access" if self._reader is not None else "stream",
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "even_batches": self.even_batches,
            "elastic": self.elastic,
            "total_size": self.total_size,
            "d": self.d,
            "l": self.l,
        }
        if not self.elastic:  # elastic states resume at any shard count
            config.update(num_shards=self.num_shards, shard_index=self.shard_index, n=self.n)
        if self._reader is None:  # a stream: its buffer and what it knows of its size
            source = self._feed.source
            config["buffer_size"] = self.buffer_size
            config["n_rows"] = getattr(source, "n_rows", None)
            config["block_rows"] = getattr(source, "block_rows", None)
        return config

    def _cursor(self):
        """``(epoch, batches_done, pending, ledger)``, with the epoch rolled over
        when it has ended (under the lock)."""
        cur = self._current
        if self._begun and cur is not None:
            claimed = cur.claimed
            holes = set(cur.given_back()) | set(self._out)
        else:
            claimed, holes = self._skip, set(self._pending)
        while claimed and claimed - 1 in holes:  # batches claimed last and not handed out
            holes.discard(claimed - 1)  # are simply not claimed yet
            claimed -= 1
        done = claimed - len(holes)
        if self._begun and cur is not None and not holes and self._rolled(cur, done):
            return self._epoch + 1, 0, [], Tally()
        return self._epoch, done, sorted(holes), self._handed

    def _rolled(self, cur, done: int) -> bool:
        """Is the epoch over, for a state taken now?"""
        if self._out:  # batches prepared ahead and not handed out: not over yet
            return False
        if not self.elastic:
            return self._ended or cur.exhausted()
        # Under elastic sharding every rank's state must say the same: the epoch is
        # over when all ranks (in lockstep) have handed out every global batch, or
        # when this rank has seen the end (then so have the others).
        if self._ended or (self.even_batches and cur.exhausted()):
            return True
        return self._first + done * self.num_shards >= self._feed.total_batches

    def state_dict(self) -> dict:
        """Where the loader stands, as small plain data (JSON-safe).

        Batches handed out count as consumed; batches prepared ahead (prefetch)
        or whose read failed do not. A state taken at the end of an epoch
        resumes at the start of the next. The state records every setting that
        fixes the order and the source's shape (:meth:`load_state_dict`
        refuses another), and the epoch's ledger: the count and digest of the
        rows handed out so far, checked when the epoch ends. Under
        ``elastic=True`` the state holds ``global_batches_done``, the batches
        of the epoch's global order handed out by all shards together,
        assuming they step in lockstep (as data-parallel training does); any
        shard count may resume from it, and every rank's state says the same.
        """
        with self._lock:
            if self._orphans:
                self._adopt_orphans()
            epoch, done, pending, ledger = self._cursor()
            state = {
                "version": STATE_VERSION,
                "seed": self._seed,
                "epoch": epoch,
                "batches_done": done,
                **self._config(),
            }
            if pending:
                state["pending"] = pending
            if self.elastic:
                first = self._first if epoch == self._epoch else 0
                state["global_batches_done"] = first + done * self.num_shards
            elif self._verified or epoch != self._epoch:
                state["ledger"] = {"rows": ledger.rows, "digest": f"{ledger.digest:016x}"}
            else:  # resumed from a state without one: this epoch cannot be checked
                state["ledger"] = None
            return state

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`: the next batches are those not yet handed out.

        The state must come from a loader with the same settings and source
        shape (under ``elastic``, any shard count); a mismatch is a
        ``ValueError`` naming the setting and both values. The seed is the
        state's (a state taken after ``reset(seed=...)`` resumes that seed).
        """
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from state_dict(); got {type(state).__name__}")
        version = state.get("version")
        if version not in (1, STATE_VERSION):
            raise ValueError(
                f"state has version {version!r}; this exactbatch reads versions 1 and "
                f"{STATE_VERSION}"
            )
        for key, mine in self._config().items():
            theirs = state.get(key)
            if key not in state and version == 1:
                continue  # not recorded by version 1
            if key in ("d", "l") and (theirs is None or mine is None):
                continue  # a stream not read yet
            if theirs != mine:
                raise ValueError(
                    f"state was taken with {key}={theirs!r}, this loader has {key}={mine!r}"
                )
        seed = check_int("state['seed']", state.get("seed"), 0)
        epoch = check_int("state['epoch']", state.get("epoch"), 0)
        done = check_int("state['batches_done']", state.get("batches_done"), 0)
        pending = state.get("pending", [])
        if not isinstance(pending, list):
            raise TypeError(f"state['pending'] must be a list of ints; got {pending!r}")
        pending = [check_int("state['pending'][i]", k, 0) for k in pending]
        claimed = done + len(pending)
        if len(set(pending)) != len(pending) or any(k >= claimed for k in pending):
            raise ValueError(
                f"state['pending']={pending} must be distinct batches below "
                f"batches_done + len(pending) = {claimed}"
            )
        first, ledger, verified = 0, Tally(), True
        if self.elastic:
            first = check_int("state['global_batches_done']", state.get("global_batches_done"), 0)
            if first > self._feed.total_batches:
                raise ValueError(
                    f"state['global_batches_done']={first} exceeds the "
                    f"{self._feed.total_batches} batches of an epoch"
                )
            if pending:
                raise ValueError(
                    "this elastic state was taken while a batch whose read had failed waited "
                    "to be read again; take the state after that batch is handed out"
                )
            claimed = done = 0
        else:
            if self._nbatches is not None and claimed > self._nbatches:
                raise ValueError(
                    f"state['batches_done']={done} exceeds the {self._nbatches} batches of "
                    "an epoch"
                )
            ledger, verified = _ledger_of(state, done)
        with self._lock:
            self._seed = seed
            self._move(epoch)
            self._skip, self._pending, self._first = claimed, tuple(pending), first
            self._handed, self._verified = ledger, verified

    # -- lifetime ---------------------------------------------------------------

    def close(self) -> None:
        """Let go of the source (an .ndf file closes when its last holder lets go)."""
        with self._lock:
            if self._closed:
                return
            if self._current is not None:
                self._current.close()
            self._closed, self._current, self._begun = True, None, False
        self._feed.close()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _ledger_of(state: dict, done: int) -> tuple[Tally, bool]:
    """The ledger a state carries, and whether the epoch can be checked (a state of
    version 1 has none: its epoch is not checked)."""
    if "ledger" not in state and state.get("version") != 1:
        raise ValueError("state has no 'ledger' (every version-2 state has one)")
    ledger = state.get("ledger")
    if ledger is None:  # version 1, or resumed from it: the epoch is not checked
        return Tally(), done == 0
    if not isinstance(ledger, dict):
        raise TypeError(f"state['ledger'] must be a dict; got {ledger!r}")
    rows = check_int("state['ledger']['rows']", ledger.get("rows"), 0)
    digest = ledger.get("digest")
    try:
        value = int(digest, 16)
    except (TypeError, ValueError):
        raise ValueError(
            f"state['ledger']['digest'] must be a hexadecimal string; got {digest!r}"
        ) from None
    return Tally(rows, value), True


class _EpochIterator:
    """Iterates one epoch of a loader; an error from the source stays an error.

    (A generator would end silently after raising once; this asks the loader
    again, which reads the same batch again.) With prefetch, a background
    thread prepares the next batches; it stops when the epoch ends, when the
    iterator is closed or dropped, or after an error, and gives back to the
    loader the batches it prepared and did not hand out, so that a later
    ``next_into`` or iterator hands them out.
    """

    __slots__ = ("__weakref__", "_gen", "_loader", "_prefetcher")

    def __init__(self, loader: DataLoader, gen: int, prefetch: int):
        self._loader, self._gen = loader, gen
        self._prefetcher = None
        if prefetch:

            def produce():  # must not hold the iterator: dropping it stops the thread
                job, owner = loader._claim(gen, hand_out=False)
                if job is None:
                    return None
                try:
                    batch = job.take()
                except BaseException:
                    loader._give_back(owner, [job], counted=False)
                    raise
                return job, owner, batch

            self._prefetcher = Prefetcher(produce, prefetch)

    def __iter__(self) -> _EpochIterator:
        return self

    def __next__(self) -> tuple[np.ndarray, np.ndarray]:
        if self._prefetcher is not None:
            try:
                item = self._prefetcher.get()
            except BaseException:
                self.close()  # later calls ask the loader directly
                raise
            if item is None:
                self.close()
                self._loader._finish(self._gen)
                raise StopIteration
            job, _, batch = item
            self._loader._hand_out(self._gen, job)
            return batch
        job, owner = self._loader._claim(self._gen)
        if job is None:
            raise StopIteration
        try:
            return job.take()
        except BaseException:
            self._loader._give_back(owner, [job], counted=True)
            raise

    def close(self, locked: bool = True) -> None:
        """Stop preparing batches; batches prepared but not taken go back to the loader."""
        if self._prefetcher is not None:
            left = self._prefetcher.close()
            self._prefetcher = None
            for owner in {id(o): o for _, o, _ in left}.values():
                jobs = [job for job, o, _ in left if o is owner]
                self._loader._give_back(owner, jobs, counted=False, locked=locked)

    def __del__(self):
        self.close(locked=False)
