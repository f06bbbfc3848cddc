"""``iter()``'s hand-out of a batch in one call: :class:`IterStep`, the base of
:class:`~exactbatch.loader.epoch_iterator.EpochIterator`, whose ``__next__`` is it.

The common call of ``next(it)`` (``for xb, yb in loader``) - the iterator's group
holds a batch, the iterator is not stale - is one step: the batch popped from the
group; where it was claimed unread (a batch too large to read with its group: one
of an epoch's whole order, :class:`~exactbatch.batching.random_access_epoch.RunJob`,
no row ids, none read by ``peek``, reads not padded), read into a new pair
(``take_run``) and the wait recorded (:func:`~exactbatch.loader.telemetry.waited_on`,
a wait that was a read too); then handed out as :meth:`Cursor.hand
<exactbatch.loader.cursor.Cursor.hand>` counts it. In C where the core is compiled
(``_core.IterStep``, a type: ``next()`` calls it with no Python frame), else
:class:`IterStep`, its twin step for step: the same pops, the same batches, the same
counts, so a state taken at any point is the same. Anything else goes to the
iterator's own path: an empty group to its ``_waited()`` (the next group, claimed,
prefetched or peeked, and the end of the epoch), a batch it popped and does not
hand out (a stale iterator's, one read by ``peek``, padded, another kind of job,
rows read in Python) to its ``_hand(group, item)``.
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import Any

from exactbatch.kernels import core
from exactbatch.loader.cursor import Cursor
from exactbatch.loader.groups import Batch, Group, Item

__all__ = ["IterStep", "step_base"]


class IterStep:
    """The pure twin of ``_core.IterStep``: ``__next__``, step for step.

    ``IterStep(cursor, gen, current, job_type, draining)``: the iterator of ``cursor``'s
    generation ``gen``, handing out from the group ``current``; ``job_type`` the
    whole order's job (``RunJob``); ``draining`` the phase at which a hand-out may end
    the epoch (``Phase.DRAINING``: the compiled step's ``Cursor.hand`` compares the
    cursor's phase with it, as the cursor does). Its subclass gives ``_waited()`` and
    ``_hand(group, item)``.
    """

    __slots__ = ("_current", "_cursor", "_gen", "_job_type", "_peeked", "_plain", "_tel", "_waits")

    def __init__(
        self, cursor: Cursor, gen: int, current: Group, job_type: type, draining: object
    ) -> None:
        self._cursor, self._gen, self._current = cursor, gen, current
        self._job_type: Any = job_type
        self._peeked: dict[int, Batch] = {}  # batches claimed unread, read by peek: by number
        self._plain = not cursor.spec.pad  # (padded reads are the iterator's own: _take)
        tel = self._tel = cursor.telemetry
        # the record of a wait (a read too, or not): Telemetry.waiter's, kept
        self._waits = (tel.waiter(False), tel.waiter(True))

    def __next__(self) -> Batch:
        group = self._current
        item: Any  # (a job of any kind: RunJob's fields once its type is checked)
        batch: Batch | None
        try:
            item = group.queue.popleft()
        except IndexError:
            item = None  # (not called in here: its errors would chain this one)
        if item is None:
            return self._waited()
        job, batch = item
        cursor = self._cursor
        if cursor.gen != self._gen:  # a stale iterator: its own path raises
            return self._hand(group, item)
        if batch is not None:  # read with its group: handed out as it is
            cursor.hand(group, job)
            return batch
        # claimed unread: read now, into a new pair
        if not self._plain or self._peeked or type(job) is not self._job_type:
            return self._hand(group, item)
        t0 = perf_counter_ns()
        run, tel = job.run, self._tel
        try:
            got: Batch = run.via.take_run(run.rows, job.start, job.size, *run.dtypes)
        except BaseException:
            tel.waited_on(tel, t0, *self._waits[False])
            group.unpop(item)
            raise
        tel.waited_on(tel, t0, *self._waits[True])
        cursor.hand(group, job)
        return got

    def _waited(self) -> Batch:  # pragma: no cover (EpochIterator's)
        raise NotImplementedError

    def _hand(self, group: Group, item: Item) -> Batch:  # pragma: no cover (EpochIterator's)
        raise NotImplementedError


def step_base() -> Any:
    """The base of ``EpochIterator``: the compiled core's ``IterStep`` where it is in use
    (when ``exactbatch.loader.epoch_iterator`` is first imported), else :class:`IterStep`."""
    compiled = core()
    return IterStep if compiled is None else compiled.IterStep
