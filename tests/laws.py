"""The loader's laws, one helper per law (DESIGN.md, "Exactness across every combination").

Every source built here holds traceable rows (see :mod:`helpers`):
``x[i, 0] == i`` and every other value of row i is a known function of i,
so the collectors below check each batch's values belong to its row ids and
the laws then reason about row ids alone.

Laws:

* :func:`check_epoch` - the epoch law over all shards of one epoch: each
  shard hands out exactly the batch sizes it promises (full batches, the
  partial last one unless ``drop_last``; ``even_batches``: the smallest
  shard's count; ``elastic``: its share of the dealt global batches), no row
  twice, only rows it owns; shards disjoint and together complete less
  exactly those leave-outs; unshuffled, rows come in source order.
* :func:`check_deterministic` - the same seed and epoch give the same
  batches in a fresh loader (as a set of batches when threads share it).
* :func:`check_epochs_differ` - shuffled epochs differ; unshuffled ones are equal.
* :func:`check_same_bytes` - loaders differing only in ``threads`` (the gather's)
  hand out batches equal byte for byte, through ``iter()`` and ``next_into``.
* :func:`check_resume` - cut an epoch at every batch k, ``state_dict`` through
  JSON into a fresh loader: the rest of the epoch, then the next epoch,
  equal the uninterrupted run; :func:`check_resume_in_process` does it in a
  fresh Python process.
* :func:`check_certified` - the final states of every shard of a run, merged by
  :func:`exactbatch.certify`, certify each epoch run, with the rows handed out.
* :func:`check_retry` - a read that raises ``OSError`` once, the caller
  catching it and going on: the same batches as an unfaulted run, and
  ``state_dict`` counts only the batches handed out.

Sources are described by a JSON-safe *spec* (:func:`loader_from_spec`), so
a child process can rebuild exactly the loader the test built.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
import warnings
import weakref
from collections import Counter

import numpy as np
import pytest
from doubles import ChunksDouble, RowsDouble
from helpers import (
    check_rows,
    chunks_of,
    coded_ids,
    collect,
    ids_of,
    into_buffers,
    make_x,
    make_y,
    next_into_ids,
    unpad,
)

import exactbatch
from exactbatch import (
    DataLoader,
    Dataset,
    certify,
    kernels,
    ndf_blocks,
    open_ndf,
    open_ndf_dataset,
    parquet_source,
)

__all__ = [
    "ARROW_KINDS",
    "ARROW_STREAM_KINDS",
    "ELASTIC_KINDS",
    "INDEXED_STREAM_KINDS",
    "DOUBLE_KINDS",
    "FlakyChunks",
    "FlakyFactory",
    "FlakyReader",
    "GateReader",
    "RANDOM_ACCESS_KINDS",
    "STREAM_KINDS",
    "check_abandoned_iterator",
    "check_deterministic",
    "check_epoch",
    "check_epochs_differ",
    "check_reshard",
    "check_reshard_ranges",
    "check_resume",
    "check_resume_in_process",
    "check_retry",
    "check_same_bytes",
    "check_shared_iterator",
    "check_state_mid_read",
    "drain",
    "drain_threads",
    "loader_from_spec",
    "promised_sizes",
    "reader_of",
    "reads_through_read",
    "roundtrip",
    "arrow_table_of",
    "run_python",
    "source_from_spec",
    "source_widths",
    "subset_positions",
    "wrap_reader",
]

# rows_double and chunks_double: a new kind of source each, known to exactbatch only
# through its protocol (RowSource, ChunkSource with no optional hook: tests/doubles.py).
RANDOM_ACCESS_KINDS = ("dataset", "array", "pair", "tensor", "dataframe", "ndf", "s3", "sharded")
RANDOM_ACCESS_KINDS += ("rows_double",)
STREAM_KINDS = ("list", "factory", "parquet", "ndf_blocks", "sharded_blocks", "chunks_double")
DOUBLE_KINDS = ("rows_double", "chunks_double")
# The Arrow-native kinds (exactbatch.sources.arrow_*, polars_frames, hf_datasets,
# duckdb_relations): random access, then streams whose query or reader runs again each pass.
ARROW_RANDOM_KINDS = ("arrow_file", "arrow_table", "polars", "hf")
ARROW_STREAM_KINDS = ("arrow_stream", "lazyframe", "duckdb")
ARROW_KINDS = ARROW_RANDOM_KINDS + ARROW_STREAM_KINDS
RANDOM_ACCESS_KINDS += ARROW_RANDOM_KINDS
STREAM_KINDS += ARROW_STREAM_KINDS
# The streams whose chunks are indexed: elastic=True deals them as one global order.
INDEXED_STREAM_KINDS = ("list", "parquet", "ndf_blocks", "sharded_blocks", "chunks_double")
ELASTIC_KINDS = RANDOM_ACCESS_KINDS + INDEXED_STREAM_KINDS
THREAD_TIMEOUT = 60  # seconds: a hang fails the test instead of blocking the run


# -- what an epoch promises ----------------------------------------------------------------


def full_sizes(rows: int, batch_size: int, drop_last: bool) -> list[int]:
    """Batch sizes of ``rows`` rows cut into batches: full ones, then the rest unless dropped."""
    k, rest = divmod(rows, batch_size)
    return [batch_size] * k + ([rest] if rest and not drop_last else [])


def shard_bounds(n: int, num_shards: int, shard_index: int) -> tuple[int, int]:
    """Rows [lo, hi) that shard ``shard_index`` of ``num_shards`` owns (DESIGN.md)."""
    return shard_index * n // num_shards, (shard_index + 1) * n // num_shards


def promised_sizes(
    n, batch_size, drop_last, num_shards=1, shard_index=0, even_batches=False, elastic=False
) -> list[int]:
    """The batch sizes shard ``shard_index`` hands out in one epoch, in order.

    Contiguous shards: its own rows cut into batches; ``even_batches``: only
    as many as the smallest shard (n // S rows) has. ``elastic``: every S-th
    batch of the whole epoch's batches from the shard's index on;
    ``even_batches``: each shard the same count, len(global) // S.
    ``even_batches="pad"``: as many as the largest shard has (ceil(n / S)
    rows; elastic: ceil(len(global) / S)), the shard's own batches then
    padding batches of 0 real rows.
    """
    pad = even_batches == "pad"
    if elastic:
        every = full_sizes(n, batch_size, drop_last)
        mine = every[shard_index::num_shards]
        if pad:
            return mine + [0] * (-(-len(every) // num_shards) - len(mine))
        return mine[: len(every) // num_shards] if even_batches else mine
    lo, hi = shard_bounds(n, num_shards, shard_index)
    mine = full_sizes(hi - lo, batch_size, drop_last)
    if pad:
        largest = len(full_sizes(-(-n // num_shards), batch_size, False))
        return mine + [0] * (largest - len(mine))
    if even_batches:
        mine = mine[: len(full_sizes(n // num_shards, batch_size, drop_last))]
    return mine


def _cut(rows, sizes) -> list[list[int]]:
    out, at = [], 0
    for s in sizes:
        out.append(list(rows[at : at + s]))
        at += s
    return out


def unshuffled_batches(n, batch_size, drop_last, num_shards, shard_index, even, elastic):
    """The exact batches of an unshuffled epoch: the source's order, cut as promised."""
    sizes = promised_sizes(n, batch_size, drop_last, num_shards, shard_index, even, elastic)
    if elastic:
        return [
            list(range(g * batch_size, g * batch_size + size))
            for g, size in zip(range(shard_index, n, num_shards), sizes, strict=False)
        ]
    lo, _ = shard_bounds(n, num_shards, shard_index)
    return _cut(range(lo, lo + sum(sizes)), sizes)


# -- the laws --------------------------------------------------------------------------------


def check_epoch(
    per_shard,
    *,
    n: int,
    batch_size: int,
    drop_last: bool,
    shuffle: bool,
    even_batches: bool = False,
    elastic: bool = False,
    ordered: bool = True,
    owned: bool = True,
) -> None:
    """The epoch law, over one epoch of every shard.

    ``per_shard[s]`` is shard s's batches (row-id lists) of the epoch;
    ``ordered=False`` when threads shared a loader (the order in which their
    batches were collected is not the claim order). Asserts, per shard: the
    promised batch sizes (:func:`promised_sizes`), no row twice, only rows
    of its own range (contiguous shards); across shards: disjoint, and
    together every row of ``range(n)`` less exactly the promised leave-outs
    (none without drop_last and even_batches=True; none under "pad", whose
    padding batches are empty lists here); unshuffled: the exact batches of
    the source's order. ``owned=False``: a contiguous shard of the epoch's chunk
    order, not of the source's rows (``elastic="ranges"`` on a shuffled stream): its
    rows are not checked against its range of the source.
    """
    num_shards = len(per_shard)
    everything = []
    for s, batches in enumerate(per_shard):
        where = f"shard {s} of {num_shards}"
        sizes = [len(b) for b in batches]
        want = promised_sizes(n, batch_size, drop_last, num_shards, s, even_batches, elastic)
        if ordered:
            assert sizes == want, f"{where}: batch sizes {sizes}, promised {want}"
        else:
            assert sorted(sizes) == sorted(want), f"{where}: batch sizes {sizes}, promised {want}"
        rows = [r for b in batches for r in b]
        dup = sorted(r for r, times in Counter(rows).items() if times > 1)
        assert not dup, f"{where}: rows handed out twice: {dup[:20]}"
        lo, hi = (0, n) if elastic or not owned else shard_bounds(n, num_shards, s)
        bad = [r for r in rows if not lo <= r < hi]
        assert not bad, f"{where}: rows it does not own: {bad[:20]}"
        if not shuffle:
            exact = unshuffled_batches(
                n, batch_size, drop_last, num_shards, s, even_batches, elastic
            )
            if ordered:
                assert batches == exact, f"{where}: unshuffled batches are not the source order"
            else:
                assert sorted(batches) == sorted(exact), f"{where}: not the source order's batches"
        everything += rows
    twice = len(everything) - len(set(everything))
    assert twice == 0, f"{twice} rows handed out by two shards"
    if not drop_last and even_batches in (False, "pad"):
        missing = sorted(set(range(n)) - set(everything))
        assert not missing, f"rows never handed out: {missing[:20]}"


def check_certified(states, per_epoch_rows: list[int]) -> None:
    """The certificate law: ``states`` (every shard's last state, through JSON) certify
    exactly the epochs run, the i-th with ``per_epoch_rows[i]`` rows handed out across
    the shards; any one shard's states left out, the run is not certified."""
    cert = certify([roundtrip(s) for s in states])
    assert cert, f"an exact run was not certified:\n{cert}"
    got = [(e.epoch, e.handed) for e in cert.epochs]
    first = cert.epochs[0].epoch
    assert got == [(first + i, r) for i, r in enumerate(per_epoch_rows)], got
    if len(states) > 1 and per_epoch_rows[0]:
        assert not certify([roundtrip(s) for s in states[1:]]), "certified without shard 0"


def check_lineage(
    seed: int,
    elastic: bool | str,
    n: int = 120,
    batch: int = 16,
    epochs: int = 2,
    habits: bool = False,
    drop_last: bool = False,
) -> bool:
    """The lineage law: a random tree of processes - each resumed from a checkpoint of
    the current lineage (the latest, or an earlier one: a rollback that abandons the
    later ones; a checkpoint may be resumed twice), stepping every rank in lockstep,
    saving every rank's state now and then, sometimes beginning its epoch again
    (``set_epoch``), killed at random (its batches after its last checkpoint lost with
    the model) - over 1 to 4 shards (under elastic, True or "ranges", another count at
    each restart).
    ``habits`` adds a user's habits, drawn apart (the tree of a seed without them is
    unchanged): ``set_epoch`` on the epoch just restored (torch's: the position is
    kept), a stop by ``close()`` then a last save, and, under elastic, a checkpoint
    resumed again at another count than the first time. ``drop_last``: each epoch's
    promise is its full batches (under elastic, the global order's; under "ranges", the
    full batches of each rank's share of the epoch's last segment, so the rows it
    leaves out depend on the world-size history: the truth is then a run that nothing
    interrupts through the final lineage's history, :func:`_ranges_rows`). A restart may save
    at once, before any batch (before or after ``iter()``), and may stop there (killed,
    or the last process: its final states stand where the checkpoint it loaded stood);
    drawn apart too, so a tree without it is unchanged. The last process runs to
    the end of ``epochs`` epochs or stops at random. Every state saved, in any order,
    certifies exactly when the truth computed from the row ids of the final lineage
    says every epoch begun handed out each row once. Returns that truth (for the
    caller's tally)."""
    rng = np.random.default_rng(seed)
    extra = np.random.default_rng([seed, 38])  # (the habits' draws)
    quick = np.random.default_rng([seed, 38, 1])  # (the saves at once after a load)
    x = make_x(np.arange(n), 1)
    shards = int(rng.integers(1, 5))
    saved: list[dict] = []  # every state any process saved
    path: list[dict] = []  # the checkpoints of the current lineage, oldest first
    processes = int(rng.integers(1, 6))
    truth: dict[int, list[int]] = {}
    history: dict[int, list[list[int]]] = {}  # the final lineage's world sizes an epoch
    for p in range(processes):
        last = p == processes - 1
        back = None
        if path:
            j = len(path) - 1 if rng.random() < 0.6 else int(rng.integers(0, len(path)))
            back, path = path[j], path[: j + 1]
        count = shards
        if back is not None:
            count = back["count"]
            if elastic:  # (without habits, a checkpoint resumed again: at the same count)
                count = int(rng.integers(1, 5))
                count = count if habits else back.setdefault("resumed_at", count)
        loaders = [_lineage_loader(x, batch, count, s, elastic, drop_last) for s in range(count)]
        rows = {e: list(v) for e, v in back["rows"].items()} if back else {}
        # each epoch's world-size history along the lineage: [count, steps] segments
        segs = {e: [list(g) for g in v] for e, v in back["segs"].items()} if back else {}
        if back is not None:
            for s, loader in enumerate(loaders):
                loader.load_state_dict(back["states"][s % len(back["states"])])
            if habits and extra.random() < 0.3:  # torch's habit: set_epoch after a load
                for loader in loaders:
                    loader.set_epoch(loader.epoch)

        now = [ld.epoch for ld in loaders]  # the epochs begun (or loaded): see ended

        def begin(loaders=loaders, now=now):
            eps = now[:] = [ld.epoch for ld in loaders]
            return eps, [iter(ld) for ld in loaders]

        def ended(count=count, segs=segs, now=now, states=()) -> None:
            """The epochs in progress ended here, at ``count`` (all ranks out of batches,
            or ``states`` taken past them): under "ranges" with drop_last, the rows its
            last segment leaves out are the tails of this count's shares."""
            for e in set(now):
                if not states or any(st["epoch"] > e for st in states):
                    hist = segs.setdefault(e, [])
                    if not hist or hist[-1][0] != count:
                        hist.append([count, 0])

        def save(
            loaders=loaders, count=count, rows=rows, segs=segs, saved=saved, path=path
        ) -> None:
            states = [roundtrip(ld.state_dict()) for ld in loaders]
            saved.extend(states)
            ended(states=states)
            path.append(
                {
                    "states": states,
                    "rows": {e: list(v) for e, v in rows.items()},
                    "segs": {e: [list(g) for g in v] for e, v in segs.items()},
                    "count": count,
                }
            )

        at_once = back is not None and quick.random() < 0.25  # saved before any batch
        after_iter, stop_now = quick.random() < 0.5, quick.random() < 0.5
        if at_once and not after_iter:
            save()
        eps, its = begin()
        if at_once and after_iter:
            save()
        steps = int(rng.integers(1, 40))
        for _ in range(0 if at_once and stop_now else steps):
            u = rng.random()
            if u < 0.12:
                stop = habits and extra.random() < 0.15
                if stop:  # a graceful stop: closed, then saved (then killed)
                    for ld in loaders:
                        ld.close()
                save()
                if stop:
                    break
                continue
            if u < 0.15:  # the epoch in progress begun again, on every rank
                for ld, e in zip(loaders, eps, strict=True):
                    ld.set_epoch(e)
                    segs.pop(e, None)  # (its history begins again too)
                eps, its = begin()
                continue
            got = [next(it, None) for it in its]
            if all(b is None for b in got):
                ended()
                if max(eps) >= epochs - 1:
                    break  # every epoch run
                eps, its = begin()
                continue
            for e, b in zip(eps, got, strict=True):
                if b is not None:
                    rows.setdefault(e, []).extend(int(i) for i in b[-1])
            for e in {e for e, b in zip(eps, got, strict=True) if b is not None}:
                hist = segs.setdefault(e, [])  # a step at this count (at the last one's: on)
                if hist and hist[-1][0] == count:
                    hist[-1][1] += 1
                else:
                    hist.append([count, 1])
        if last:
            final = [roundtrip(ld.state_dict()) for ld in loaders]
            saved += final
            ended(states=final)
            truth, history = rows, segs
        # (else killed: what it handed out after its last checkpoint is lost)
    exact = bool(truth) and all(
        sorted(ids) == _promised_rows(x, batch, shards, elastic, drop_last, e, history.get(e))
        for e, ids in truth.items()
    )
    order = rng.permutation(len(saved))
    cert = certify([saved[i] for i in order])
    assert bool(cert) == exact, (
        f"seed {seed}, elastic={elastic}: certify says {bool(cert)}, the row ids say {exact}"
        f"\n{cert}\ntruth: { {e: len(v) for e, v in truth.items()} }"
    )
    if exact:
        assert [e.epoch for e in cert.epochs] == sorted(truth)
    return exact


def _lineage_loader(x, batch, count, s, elastic, drop_last) -> DataLoader:
    """Shard ``s`` of ``count`` of the lineage law's loaders (seed 7, row ids out)."""
    return DataLoader(
        x,
        batch,
        num_shards=count,
        shard_index=s,
        seed=7,
        elastic=elastic,
        with_rows=True,
        drop_last=drop_last,
    )


def _promised_rows(x, batch, shards, elastic, drop_last, epoch, history=None) -> list[int]:
    """The rows epoch ``epoch`` promises (all of them, less drop_last's: under elastic, the
    global order's last batch; under "ranges", the tails of the ranks' shares of the last
    segment of its world-size ``history``; else each shard's), from a run that nothing
    interrupts."""
    if not drop_last:
        return list(range(len(x)))
    if elastic == "ranges":
        return _ranges_rows(x, batch, epoch, history or [[shards, 0]])
    count = 1 if elastic else shards
    rows = []
    for s in range(count):
        loader = _lineage_loader(x, batch, count, s, elastic, True)
        loader.set_epoch(epoch)
        rows += [int(i) for b in loader for i in b[-1]]
    return sorted(rows)


def _ranges_rows(x, batch, epoch, history) -> list[int]:
    """The rows epoch ``epoch`` of ``elastic="ranges"`` with drop_last hands out through
    the world-size ``history`` (``[count, steps]`` segments, the last one run to the
    end), from a run that nothing interrupts: each segment's ranks stepped in lockstep
    as the lineage law steps them, the next segment's rank s resumed from the state of
    rank s mod count."""
    rows: list[int] = []
    states: list[dict] = []
    for j, (count, steps) in enumerate(history):
        loaders = [_lineage_loader(x, batch, count, s, "ranges", True) for s in range(count)]
        for s, loader in enumerate(loaders):
            if states:
                loader.load_state_dict(states[s % len(states)])
            else:
                loader.set_epoch(epoch)
        its = [iter(loader) for loader in loaders]
        k = 0
        while j == len(history) - 1 or k < steps:  # (the last segment: to the end)
            got = [b for b in (next(it, None) for it in its) if b is not None]
            if not got:
                break
            rows += [int(i) for b in got for i in b[-1]]
            k += 1
        states = [loader.state_dict() for loader in loaders]
    return sorted(rows)


def check_deterministic(got, want, ordered: bool = True) -> None:
    """Two runs of the same (seed, epoch, shard) hand out the same batches.

    ``ordered=False``: threads collected ``got``; the set of batches must agree.
    """
    if ordered:
        assert got == want, "a fresh loader with the same seed and epoch gave other batches"
    else:
        assert sorted(got) == sorted(want), "threads handed out other batches than one reader"


def check_same_bytes(make_loader, counts) -> None:
    """``make_loader(threads)`` for each of ``counts``: two epochs (one through
    ``iter()``, one through ``next_into``) of the same batches, byte for byte."""
    runs = []
    for t in counts:
        loader = make_loader(t)
        got = [bytes(np.ascontiguousarray(a).data) for batch in loader for a in batch[:2]]
        bx = np.empty((loader.batch_size, loader.d), dtype=loader.dtype)
        by = np.empty((loader.batch_size, loader.l), dtype=loader.label_dtype)
        while k := loader.next_into(bx, by, *_brows(loader)):
            got += [bytes(bx[:k].data), bytes(by[:k].data)]
        loader.close()
        runs.append(got)
    for t, got in zip(counts[1:], runs[1:], strict=True):
        assert got == runs[0], f"threads={t} gave other bytes than threads={counts[0]}"


def _brows(loader) -> tuple:
    return (np.empty(loader.batch_size, dtype=np.int64),) if loader.with_rows else ()


def check_epochs_differ(first, second, shuffle: bool) -> None:
    """Shuffled, two epochs (all shards' batches together) differ; unshuffled, they are equal.

    Use it on epochs of some 20 rows or more, where two equal shuffles are
    too unlikely to happen by chance.
    """
    if shuffle:
        assert first != second, "two shuffled epochs handed out the same batches"
    else:
        assert first == second, "two unshuffled epochs differ"


# -- collecting batches -------------------------------------------------------------------


def drain(loader, via: str, d: int, l: int, threads: int = 4):  # noqa: E741
    """One epoch's batches (row ids, every value checked) through ``via``.

    ``"iter"``: a new ``iter()`` (which begins the next epoch); ``"peek"``: the
    same, reading 3 batches ahead with ``peek`` before each ``next``; ``"next_into"``:
    ``next_into`` until it returns 0; ``"threads"``: ``threads`` threads calling
    ``next_into`` on the loader at once (the batches in no particular order).
    The next_into paths end the epoch on a 0; call ``loader.reset()`` before
    the next one.
    """
    if via == "iter":
        return collect(loader, d, l)
    if via == "peek":
        return collect_peeking(loader, d, l)
    if via == "next_into":
        return next_into_ids(loader, d, l)
    if via == "threads":
        return drain_threads(loader, d, l, threads)
    raise AssertionError(f"unknown way {via!r}")


def next_peeking(it, loader, handed: int, ahead: int = 3):
    """``next(it)`` after ``it.peek(ahead)``: the batch handed out is the first one
    peeked (the same arrays), and the loader counts only the ``handed`` batches
    handed out before it while the others wait."""
    peeked = it.peek(ahead)
    state = loader.state_dict()
    assert state["batches_done"] == handed, (
        f"after {handed} batches handed out and {len(peeked)} peeked, the state counts "
        f"{state['batches_done']}"
    )
    batch = next(it)
    assert peeked and len(batch) == len(peeked[0]), "next() is not the peeked batch"
    same = all(a is b for a, b in zip(batch, peeked[0], strict=True))
    assert same, "next() is not the peeked batch"
    return batch


def collect_peeking(loader, d: int, l: int) -> list[list[int]]:  # noqa: E741
    """One epoch through ``iter()``, peeking 3 batches ahead of each ``next``."""
    it, out = iter(loader), []
    while it.peek(1):
        batch = unpad(next_peeking(it, loader, len(out)), loader.batch_size)
        check_rows(batch[0], batch[1], d, l, loader.dtype)
        out.append(ids_of(batch))
    assert next(it, None) is None, "peek() found no batch, next() did"
    return out


def run_threads(target, n_threads: int) -> None:
    """Run ``target(i)`` on ``n_threads`` threads; re-raise the first error; fail on a hang."""
    errors = []

    def wrap(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported to the main thread
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i,), daemon=True) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(THREAD_TIMEOUT)
    assert not any(t.is_alive() for t in threads), "threads hung"
    if errors:
        raise errors[0]


def drain_threads(loader, d: int, l: int, n_threads: int = 4):  # noqa: E741
    """Threads calling ``next_into`` on one loader until each sees 0; their batches, in one list.

    Once a thread has seen 0 the epoch is over for every thread.
    """
    per_thread = [[] for _ in range(n_threads)]

    def work(i):
        per_thread[i] = next_into_ids(loader, d, l)
        assert loader.next_into(*into_buffers(loader, d, l)) == 0

    run_threads(work, n_threads)
    return [b for batches in per_thread for b in batches]


def roundtrip(state):
    """A state as it comes back from a JSON file (it must survive one)."""
    return json.loads(json.dumps(state))


# -- sources from a spec ---------------------------------------------------------------------


def source_from_spec(spec: dict):
    """The source a spec describes; every kind holds rows 0..n-1 of width (d, l).

    ``spec``: ``kind`` (one of RANDOM_ACCESS_KINDS + STREAM_KINDS), ``n``,
    ``d``, ``l``; ``chunks`` (list, factory, chunks_double: chunk sizes); ``path`` (ndf: the
    file; parquet, sharded, sharded_blocks: the folder; ndf_blocks: the file);
    ``block_rows`` (ndf_blocks, sharded_blocks);
    ``url`` and ``storage_options`` (s3); ``source_n``, the source's rows when the
    loader serves a subset of them (``spec["loader"]["rows"]``, ``n`` of them);
    ``source_d``, ``source_l``: its widths when the loader chooses its columns
    (:func:`source_widths`); ``categorical`` (parquet, arrow_table, arrow_stream,
    polars): ``x0`` held as strings and coded back to the ids by this vocabulary
    (``["x0"]``: learned), ``coded`` (the Arrow kinds): those strings ``"plain"`` or
    ``"dictionary"``-encoded.
    Files are written by the test.
    The Arrow kinds (:data:`ARROW_KINDS`) read columns ``x0..`` and ``y0..`` in
    record batches of ``chunks`` rows (arrow_file: the file at ``path``).
    """
    kind, n, d, l = spec["kind"], spec.get("source_n", spec["n"]), *source_widths(spec)  # noqa: E741
    if kind in ARROW_KINDS:
        return arrow_source_of(spec)
    rows = np.arange(n)
    x, y = make_x(rows, d), make_y(rows, l)
    if kind == "dataset":
        return Dataset(x, y)
    if kind == "rows_double":
        return RowsDouble(x, y)
    if kind == "chunks_double":
        return ChunksDouble(x, y, spec["chunks"])
    if kind == "pair":
        return (x, y)
    if kind in ("array", "tensor", "dataframe"):
        assert l == 0, f"a {kind} source has no labels"
        if kind == "tensor":
            import torch

            return torch.from_numpy(x)
        if kind == "dataframe":
            import pandas as pd

            return pd.DataFrame(x, columns=[f"x{j}" for j in range(d)])
        return x
    if kind == "ndf":
        return open_ndf(spec["path"])
    if kind == "s3":
        return open_ndf(spec["url"], storage_options=spec["storage_options"])
    if kind == "sharded":
        return open_ndf_dataset(spec["path"])
    if kind == "list":
        return chunks_of(spec["chunks"], d, l)
    if kind == "factory":
        return FlakyFactory(chunks_of(spec["chunks"], d, l))
    if kind == "parquet":
        labels = [f"y{k}" for k in range(l)]
        return parquet_source(spec["path"], labels=labels, categorical=spec.get("categorical"))
    if kind in ("ndf_blocks", "sharded_blocks"):
        f = open_ndf(spec["path"]) if kind == "ndf_blocks" else open_ndf_dataset(spec["path"])
        try:
            return ndf_blocks(f, spec["block_rows"])
        finally:
            f.close()  # the blocks hold their own share of the file
    raise AssertionError(f"unknown source kind {kind!r}")


def source_widths(spec: dict) -> tuple[int, int]:
    """The widths the spec's source holds: ``(d, l)``, or wider (``source_d``,
    ``source_l``) when the loader chooses its columns (``features=``/``labels=``):
    the source's first d features and first l labels are the loader's traceable ones,
    and its extra columns (a last feature, a last label) are left out."""
    return spec.get("source_d", spec["d"]), spec.get("source_l", spec["l"])


def subset_positions(spec: dict, batches):
    """Batches of source row ids as positions in the spec's subset (``rows=``), so that
    the laws over ``range(n)`` apply to it as to a whole source; unchanged without a
    subset. An id outside the subset becomes -1 (a row no shard owns)."""
    rows = spec["loader"].get("rows")
    if rows is None:
        return batches
    where = {r: p for p, r in enumerate(rows)}
    return [[where.get(r, -1) for r in b] for b in batches]


def arrow_table_of(n: int, d: int, l: int, chunks=None, coded=None):  # noqa: E741
    """Rows 0..n-1 as a pyarrow Table of columns ``x0..x{d-1}``, ``y0..y{l-1}``, in
    record batches of ``chunks`` rows (one batch when None). ``coded``: ``x0`` as
    strings (:func:`~helpers.coded_ids`), ``"plain"`` or ``"dictionary"``-encoded."""
    import pyarrow as pa

    rows = np.arange(n)
    x, y = make_x(rows, d), make_y(rows, l)
    names = [f"x{j}" for j in range(d)] + [f"y{k}" for k in range(l)]
    cols = [*x.T, *y.T]
    if coded:
        cols[0] = pa.array(coded_ids(rows))
        cols[0] = cols[0].dictionary_encode() if coded == "dictionary" else cols[0]
    table = pa.table(dict(zip(names, cols, strict=True)))
    bounds = np.cumsum([0, *(chunks or [n])])
    batches = [
        b
        for a, z in zip(bounds[:-1], bounds[1:], strict=True)
        for b in table.slice(int(a), int(z - a)).to_batches()
    ] or table.to_batches()
    return pa.Table.from_batches(batches, table.schema)


def arrow_source_of(spec: dict):
    """The source of an Arrow kind's spec (see :func:`source_from_spec`)."""
    kind, n, d, l = spec["kind"], spec.get("source_n", spec["n"]), *source_widths(spec)  # noqa: E741
    cols = {"features": [f"x{j}" for j in range(d)], "labels": [f"y{k}" for k in range(l)]}
    table = arrow_table_of(n, d, l, spec.get("chunks"), spec.get("coded"))
    if "categorical" in spec:  # x0 coded back to the ids (kinds that take categorical=)
        cols["categorical"] = spec["categorical"]
    if kind == "arrow_file":
        return exactbatch.arrow_file(spec["path"], **cols)
    if kind == "arrow_table":
        return exactbatch.arrow_source(table, **cols)
    if kind == "arrow_stream":
        import pyarrow as pa

        batches = table.to_batches()
        return exactbatch.arrow_source(
            lambda: pa.RecordBatchReader.from_batches(table.schema, batches), **cols
        )
    if kind in ("polars", "lazyframe"):
        import polars as pl

        frame = pl.from_arrow(table, rechunk=False)
        if kind == "lazyframe":
            return exactbatch.polars_source(frame.lazy(), batch_rows=7, **cols)
        return exactbatch.polars_source(frame, **cols)
    if kind == "hf":  # rows stored backwards, put in order by an index mapping
        import datasets

        ds = datasets.Dataset(table.take(np.arange(n)[::-1]))
        return exactbatch.hf_source(ds.select(range(n - 1, -1, -1)), **cols)
    if kind == "duckdb":
        import duckdb

        con = duckdb.connect()
        con.register("rows", table)
        con.execute("CREATE TABLE t AS SELECT * FROM rows ORDER BY x0")
        return exactbatch.duckdb_source(con.table("t"), batch_rows=6, **cols)
    raise AssertionError(f"unknown Arrow kind {kind!r}")


def loader_from_spec(spec: dict, wrap=None, **overrides) -> DataLoader:
    """A DataLoader over ``source_from_spec(spec)`` with ``spec["loader"]`` settings.

    ``wrap(source)``, if given, is the source the loader gets (a fault
    injector, say); ``overrides`` replace loader settings (``shard_index=1``). The
    user's own NdfFile handle is closed once the loader holds its share.
    Warnings at construction (a counting pass) are silenced.
    """
    source = source_from_spec(spec)
    kwargs = {**spec["loader"], **overrides}
    given = source if wrap is None else wrap(source)
    batch_size = kwargs.pop("batch_size")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return DataLoader(given, batch_size, **kwargs)
    finally:
        if spec["kind"] in ("ndf", "s3", "sharded"):
            source.close()


# -- faults ------------------------------------------------------------------------------------


class FlakyFactory:
    """A zero-argument callable returning a generator of ``chunks``.

    After :meth:`arm` (``at=k``), the next pass raises ``OSError`` once,
    instead of yielding its chunk k; every later pass is whole.
    """

    def __init__(self, chunks):
        self.chunks, self.at, self.raised = chunks, None, 0

    def arm(self, at: int) -> None:
        self.at = at

    def __call__(self):
        at, self.at = self.at, None

        def gen():
            for k, c in enumerate(self.chunks):
                if k == at:
                    self.raised += 1
                    raise OSError(f"injected: chunk {k} could not be read")
                yield c

        return gen()


class FlakyReader:
    """Wraps a random-access reader: after :meth:`arm` ``(at)``, the read of the batch
    ``at`` batches on raises OSError once. ``batch`` (the loader's batch size, when
    set) counts batches by rows, so a read of several batches at once (small
    batches read a group at a time) fails when it holds that batch; else each
    read is one batch."""

    def __init__(self, inner):
        self.inner = inner
        self.n, self.d, self.l = inner.n, inner.d, inner.l
        self.left, self.raised, self.batch = None, 0, None
        self._lock = threading.Lock()

    def arm(self, at: int) -> None:
        self.left = at

    def _fails(self, rows: int = 0) -> bool:
        with self._lock:
            if self.left is None:
                return False
            covers = 1 if not self.batch else -(-rows // self.batch)  # batches in the read
            if self.left < covers:
                self.left = None
                self.raised += 1
                return True
            self.left -= covers
            return False

    def read(self, rows, out_x, out_y):
        if self._fails(out_x.shape[0]):
            raise OSError("injected: rows could not be read")
        self.inner.read(rows, out_x, out_y)

    def close(self):
        self.inner.close()


class FlakyChunks(FlakyReader):
    """Wraps a chunk-indexed source (Parquet, ndf_blocks): its ``at``-th read of a
    chunk after :meth:`arm` raises OSError once, whether the chunk is read into
    arrays of its own (``read_chunk``), straight into a shuffle buffer
    (``read_rows_into``, where the source has it), decoded for the buffer to
    copy (``open_chunk``, where the source has it) or held column by column
    (``read_columns``, where the source has it). Everything else is the
    source's own."""

    def __init__(self, inner):
        self.inner = inner
        self.left, self.raised, self.batch = None, 0, None
        self._lock = threading.Lock()
        if hasattr(inner, "read_rows_into"):
            self.read_rows_into = self._read_rows_into
        if hasattr(inner, "open_chunk"):
            self.open_chunk = self._open_chunk
        if hasattr(inner, "read_columns"):
            self.read_columns = self._read_columns

    def __getattr__(self, name):
        if name in ("read_rows_into", "open_chunk", "read_columns"):  # where the source has it
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _fails(self, rows: int = 0) -> bool:
        failed = super()._fails(rows)
        if failed:  # where: absorbed() says whether an elastic read ahead took it
            self.raised_on = threading.current_thread().name
        return failed

    def _open_chunk(self, i: int):
        if self._fails():
            raise OSError(f"injected: chunk {i} could not be read")
        return self.inner.open_chunk(i)

    def read_chunk(self, i: int):
        if self._fails():
            raise OSError(f"injected: chunk {i} could not be read")
        return self.inner.read_chunk(i)

    def _read_columns(self, i: int):
        if self._fails():
            raise OSError(f"injected: chunk {i} could not be read")
        return self.inner.read_columns(i)

    def absorbed(self) -> bool:
        """Did the fault hit an elastic stream's read ahead (let go: the read that needs
        the chunk reads it again, so the caller never sees it)?"""
        return self.raised == 1 and getattr(self, "raised_on", "") == "exactbatch-chunks"

    def _read_rows_into(self, row: int, out) -> None:
        if self._fails():
            raise OSError(f"injected: the rows from {row} could not be read")
        self.inner.read_rows_into(row, out)


def reader_of(loader):
    """The random-access reader a loader reads every batch through: its feed's (the one
    place the tests reach into a loader for it; the loader keeps no reference of its own)."""
    reader = getattr(loader._feed, "reader", None)
    assert reader is not None and hasattr(reader, "read"), "not a random-access loader"
    return reader


def reads_through_read(reader):
    """Make every batch ``reader`` reads go through its ``read`` (a test double set there
    sees each): its reads of a whole order's batches too (``read_run``, ``take_run``,
    compiled for a memory reader and a local .ndf file's), by way of their twins over
    ``read``."""
    twin = kernels.RunReads(reader)
    reader.read_run, reader.take_run = twin.read_run, twin.take_run
    return reader


def wrap_reader(loader, wrap):
    """Replace the loader's random-access reader by ``wrap(reader)`` before any epoch
    begins, so that every batch read goes through the wrapper."""
    wrapped = wrap(reader_of(loader))
    loader._feed.reader = wrapped
    return wrapped


def check_retry(loader, arm, want, via: str, d: int, l: int, make_loader, absorbed=None):  # noqa: E741
    """The read-error law: an OSError raised once while reading, the caller going on.

    ``arm()`` makes the loader's next reads fail once; ``want`` is the
    epoch's batches from an unfaulted run. Takes the epoch through ``via``
    (``"iter"``, ``"peek"`` or ``"next_into"``) catching OSError: exactly one is raised,
    the batches handed out are ``want`` exactly (the failed batch read again
    by the next call), and a state taken right after the error, restored
    into ``make_loader()``, hands out ``want[k:]`` where k batches had been
    handed out.
    """
    faults = []  # the batches handed out before each error

    def on_fault(handed: int) -> None:
        faults.append(handed)
        state = roundtrip(loader.state_dict())
        assert state["epoch"] == 0 and state["batches_done"] == handed, (
            f"after {handed} batches and a failed read, the state counts "
            f"epoch {state['epoch']}, batch {state['batches_done']}"
        )
        fresh = make_loader()
        fresh.load_state_dict(state)
        assert collect(fresh, d, l) == want[handed:], "resumed after the error: other rows"
        fresh.close()

    arm()
    got = [ids_of(batch) for batch in retrying(loader, via, d, l, on_fault)]
    if not (absorbed is not None and not faults and absorbed()):  # (a read ahead's: let go)
        assert faults, "the injected read error was never raised (the test did not test)"
    assert got == want, "after a failed read the caller did not get the epoch's batches"


def retrying(loader, via: str, d: int, l: int, on_fault=None):  # noqa: E741
    """The batches of one epoch through ``via`` (``"iter"``, ``"peek"`` or ``"next_into"``),
    every row checked, as a caller that retries takes them: an ``OSError`` (at most one)
    caught and the next call made, ``on_fault(handed)`` called there with the batches
    handed out before it."""
    handed, faults = 0, 0
    it = iter(loader) if via in ("iter", "peek") else None
    buffers = into_buffers(loader, d, l)
    while True:
        try:
            if via == "peek":
                if not it.peek(1):
                    return
                batch = next_peeking(it, loader, handed)
            elif it is not None:
                batch = next(it)
            else:
                r = loader.next_into(*buffers)
                if r == 0:
                    return
                batch = [b[:r] for b in buffers]
        except StopIteration:
            return
        except OSError:
            faults += 1
            assert faults == 1, "the injected error was raised twice"
            if on_fault is not None:
                on_fault(handed)
            continue
        check_rows(batch[0], batch[1], d, l)
        handed += 1
        yield batch


# -- resume ---------------------------------------------------------------------------------


def _take(loader, via, k, d, l):  # noqa: E741
    """Begin an epoch and take k batches through ``via``; returns a function giving the rest."""
    if via == "iter":
        it = iter(loader)
        taken = []
        for _ in range(k):
            taken.append(ids_of(next(it)))
        return taken, lambda: [ids_of(batch) for batch in it]
    taken = next_into_ids(loader, d, l, limit=k)
    return taken, lambda: next_into_ids(loader, d, l)


def check_resume(
    make_loader,
    d: int,
    l: int,  # noqa: E741
    *,
    epoch: int = 0,
    via: str = "iter",
    resume_via: str = "iter",
    cuts=None,
    set_epoch: bool = False,
):
    """The resume law, cut at every batch k of epoch ``epoch`` (or at ``cuts``).

    A loader takes k batches through ``via`` (``"iter"``, with the loader's
    prefetch, or ``"next_into"``) and its ``state_dict()`` goes through JSON
    into a fresh ``make_loader()``: that one's next epoch (through
    ``resume_via``, ``reset()`` between epochs for next_into) is the rest of the
    uninterrupted epoch (batches k..), and the one after is the next epoch;
    a state taken once all batches are out (k = len) resumes at the start of
    the next epoch - but under ``elastic``, where every rank's state says the
    same and other ranks may still hold a batch of the epoch: its state then
    stays in the epoch, and the resumed shard's rest of it is empty. Taking
    the state disturbs nothing: the cut loader goes on with batches k.. too.
    With ``set_epoch``, the resumed loader is first set to the state's epoch (the
    torch habit), which keeps the restored position. Returns the uninterrupted epochs.
    """
    ref = make_loader()
    ref.set_epoch(epoch)
    want = [collect(ref, d, l) for _ in range(3)]
    ref.close()
    last = len(want[0])
    for k in range(last + 1) if cuts is None else sorted({min(c, last) for c in cuts}):
        cut = make_loader()
        cut.set_epoch(epoch)
        taken, rest = _take(cut, via, k, d, l)
        assert taken == want[0][:k]
        state = roundtrip(cut.state_dict())
        assert rest() == want[0][k:], f"taking a state after {k} batches changed the rest"
        cut.close()
        resumed = make_loader()
        resumed.load_state_dict(state)
        if set_epoch:  # the torch habit: set_epoch(e) after load, on the state's epoch
            resumed.set_epoch(state["epoch"])
        got = [drain(resumed, resume_via, d, l)]
        if resume_via != "iter":
            resumed.reset()
        got.append(drain(resumed, resume_via, d, l))
        final = resumed.state_dict()
        resumed.close()
        rolled = state["epoch"] > epoch
        assert rolled == (k == last) or (k == last and state.get("elastic")), (
            f"a state after {k} of {last} batches says epoch {state['epoch']}"
        )
        expect = [want[1], want[2]] if rolled else [want[0][k:], want[1]]
        assert got[0] == expect[0], f"resumed after {k} of {last} batches: other batches"
        assert got[1] == expect[1], f"resumed after {k} of {last} batches: next epoch differs"
        if resumed.num_shards == 1:  # the cut epoch whole (its first k batches on record)
            check_certified([final], [len(_flat(w)) for w in want[: 3 if rolled else 2]])
    return want


def check_reshard(make_loader, shards: int, shards_after: int, d, l, *, cut, via="iter"):  # noqa: E741
    """The elastic resume law across shard counts: ``shards`` ranks in lockstep take
    ``cut`` batches each of epoch 0 and their states go through JSON; ``shards_after``
    ranks each load one of them (rank s the state of rank s % shards) and take the rest
    of the epoch through ``via``, then the next epoch. Global batch g of a resumed
    epoch is the new rank (g - first) % S' 's, so putting every rank's batches back in
    global order gives one rank's uninterrupted epochs exactly: no row lost, repeated
    or moved. ``make_loader(num_shards, shard_index, resumed)`` builds a rank; a resumed
    one's source may fail once (a fault injected), which the caller catches and goes
    on (:func:`drain_retrying`). The
    last states certify both epochs (with the states no later rank resumed from).
    """
    ref = make_loader(1, 0, False)
    want = [collect(ref, d, l) for _ in range(2)]
    ref.close()
    total = len(want[0])
    cut = min(cut, max(0, total - 1) // shards)  # in lockstep, the epoch not over
    before, states = {}, []
    for s in range(shards):
        loader = make_loader(shards, s, False)
        it = iter(loader)
        for j in range(cut):
            g = s + j * shards
            if g >= total:
                break
            before[g] = ids_of(next(it))
        states.append(roundtrip(loader.state_dict()))
        loader.close()
    first = states[0]["global_batches_done"]
    assert all(st["global_batches_done"] == first for st in states), "ranks not in lockstep"
    assert sorted(before) == list(range(min(first, total))), f"a state at {first} after {before}"
    after, following, finals = {}, {}, []
    for s in range(shards_after):
        loader = make_loader(shards_after, s, True)
        loader.load_state_dict(states[s % shards])
        for j, batch in enumerate(drain_retrying(loader, via, d, l)):
            after[first + s + j * shards_after] = batch
        if via != "iter":
            loader.reset()
        for j, batch in enumerate(drain_retrying(loader, via, d, l)):
            following[s + j * shards_after] = batch
        finals.append(loader.state_dict())
        loader.close()
    assert not set(before) & set(after), "a global batch handed out before and after"
    got = {**before, **after}
    assert sorted(got) == list(range(total)), f"global batches {sorted(got)} of {total}"
    where = f"{shards} -> {shards_after} shards after {first} global batches"
    assert [got[g] for g in range(total)] == want[0], f"{where}: the epoch's rows differ"
    assert [following[g] for g in sorted(following)] == want[1], f"{where}: the next epoch"
    unresumed = states[shards_after:]  # no later rank loaded them: their records count
    check_certified(finals + unresumed, [len(_flat(w)) for w in want])


def check_reshard_ranges(make_loader, shards: int, shards_after: int, d, l, *, cut, via="iter"):  # noqa: E741
    """The resume law of ``elastic="ranges"`` across shard counts: ``shards`` ranks in
    lockstep take ``cut`` batches each of epoch 0 and their states go through JSON;
    ``shards_after`` ranks each load one (rank s the state of rank s % shards) and take
    the rest of the epoch through ``via``, then the next epoch. Every row of epoch 0 is
    handed out once (less, with drop_last, fewer than a batch a rank of the last
    segment); the resumed ranks' batches are a pure function of the history (a second
    set of loaders resumed from the same states hands out the same batches); the next
    epoch is a fresh ``shards_after``-rank epoch exactly; the last states certify both
    epochs. ``make_loader(num_shards, shard_index, resumed)`` builds a rank (a resumed
    one's source may fail once, the caller going on)."""
    n = len(_flat(collect(make_loader(1, 0, False), d, l)))
    drop = make_loader(1, 0, False).drop_last
    counts = [len(make_loader(shards, s, False)) for s in range(shards)]
    # in lockstep, the epoch not over and no rank past its end (a rank done early stands
    # at its own count: a checkpoint then is every rank's only under even_batches)
    cut = max(0, min(cut, min(counts), max(counts) - 1))
    before, states = [], []
    for s in range(shards):
        loader = make_loader(shards, s, False)
        it = iter(loader)
        for _ in range(cut):
            batch = next(it, None)
            if batch is not None:
                before += ids_of(batch)
        states.append(roundtrip(loader.state_dict()))
        loader.close()
    segments = {json.dumps(st["segments"]) for st in states if st["epoch"] == 0}
    assert len(segments) <= 1, f"ranks not in lockstep: {segments}"
    runs = []
    for again in range(2):
        after, following, finals = [], [], []
        for s in range(shards_after):
            loader = make_loader(shards_after, s, again == 0)
            loader.load_state_dict(states[s % shards])
            after.append(drain_retrying(loader, via, d, l))
            if via != "iter":
                loader.reset()
            following.append(drain_retrying(loader, via, d, l))
            finals.append(loader.state_dict())
            loader.close()
        runs.append((after, following, finals))
    (after, following, finals), (again_after, again_following, _) = runs
    assert after == again_after and following == again_following, "not a function of history"
    rows = before + [r for batches in after for r in _flat(batches)]
    where = f"{shards} -> {shards_after} shards after {cut} steps"
    assert len(rows) == len(set(rows)), f"{where}: a row handed out twice"
    left = set(range(n)) - set(rows)
    if drop:  # the last segment's partial batches: fewer than a batch a rank
        assert len(left) < shards_after * make_loader(1, 0, False).batch_size, where
    else:
        assert not left, f"{where}: rows {sorted(left)[:10]} never handed out"
    for s in range(shards_after):  # the next epoch: a fresh shards_after-rank epoch
        fresh = make_loader(shards_after, s, False)
        fresh.set_epoch(1)
        assert following[s] == collect(fresh, d, l), f"{where}: rank {s}'s next epoch"
    unresumed = states[shards_after:]
    want = [len(rows), len(_flat([b for batches in following for b in batches]))]
    check_certified(finals + unresumed, want)


def drain_retrying(loader, via: str, d: int, l: int):  # noqa: E741
    """One epoch's row ids through ``via``, an ``OSError`` caught and the next call made
    (:func:`retrying`): a source may fail once."""
    return [ids_of(batch) for batch in retrying(loader, via, d, l)]


def _flat(batches) -> list[int]:
    return [r for b in batches for r in b]


def run_python(code: str, *args, timeout: float = 120) -> str:
    """Run ``python -c code args...`` with this exactbatch and the tests folder importable;
    returns its stdout."""
    src = os.path.dirname(os.path.dirname(os.path.abspath(exactbatch.__file__)))
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ)
    paths = [src, here] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        env=env,
        timeout=timeout,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"the child process failed:\n{done.stderr}"
    return done.stdout


_RESUME_CHILD = """
import json, sys
import laws
spec, state = json.loads(sys.argv[1]), json.loads(sys.argv[2])
loader = laws.loader_from_spec(spec)
loader.load_state_dict(state)
print(json.dumps([laws.collect(loader, spec["d"], spec["l"]) for _ in range(2)]))
"""


def check_resume_in_process(spec: dict, k: int, *, epoch: int = 0) -> None:
    """The resume law across processes: a state taken after k batches of epoch ``epoch``
    here (0 <= k < its batches), restored in a fresh Python process that rebuilds the
    loader from ``spec``, hands out the rest of the epoch, then the next epoch, as this
    process does."""
    here = loader_from_spec(spec)
    here.set_epoch(epoch)
    it = iter(here)
    for _ in range(k):
        next(it)
    state = roundtrip(here.state_dict())
    want = [[ids_of(batch) for batch in it], collect(here, spec["d"], spec["l"])]
    assert want[0], "cut the epoch before its last batch"
    here.close()
    got = json.loads(run_python(_RESUME_CHILD, json.dumps(spec), json.dumps(state)))
    assert got == want, f"a fresh process resumed after {k} batches with other batches"


# -- threads and lifetimes (DESIGN: "Threads and lifetimes") -------------------------------


class GateReader:
    """Wraps a random-access reader: after :meth:`arm`, the next read waits at a gate
    (``entered`` is set meanwhile) until :meth:`release`, then raises OSError (``fail``)
    or reads."""

    def __init__(self, inner):
        self.inner = inner
        self.n, self.d, self.l = inner.n, inner.d, inner.l
        self.entered, self._gate = threading.Event(), threading.Event()
        self.armed, self.fail = False, False
        self._lock = threading.Lock()

    def arm(self) -> None:
        self.armed = True

    def release(self, fail: bool) -> None:
        self.fail = fail
        self._gate.set()

    def read(self, rows, out_x, out_y):
        with self._lock:
            mine, self.armed = self.armed, False
        if mine:
            self.entered.set()
            assert self._gate.wait(60), "the gate was never released"
            if self.fail:
                raise OSError("injected: rows could not be read")
        self.inner.read(rows, out_x, out_y)

    def close(self):
        self.inner.close()


def check_state_mid_read(make_loader, want, via: str, fail: bool, d: int, l: int):  # noqa: E741
    """A state taken while a batch's read is in flight (on another thread, or the
    prefetch thread) counts exactly the batches handed out by then: not the one being
    read, whether its read then succeeds or raises. The live loader then hands out
    the rest of ``want`` (the failed batch read again by the next call), and the
    state, restored, hands out ``want`` less the batches handed out before it."""
    loader = make_loader()
    gate = wrap_reader(loader, GateReader)
    gate.arm()
    it = iter(loader) if via == "iter" else None
    got, errors = [], []

    def take():
        try:
            got.extend(_next_batches(loader, it, via, d, l, 1))
        except OSError as e:
            errors.append(e)

    worker = threading.Thread(target=take)
    worker.start()
    assert gate.entered.wait(60), "no read began (the test did not test)"
    state = roundtrip(loader.state_dict())
    gate.release(fail)
    worker.join(60)
    assert not worker.is_alive()
    assert state["epoch"] == 0 and state["batches_done"] == 0 and not state.get("pending")
    assert len(errors) == fail, errors
    got.extend(_next_batches(loader, it, via, d, l, None))
    assert got == want, "the live loader after a read in flight: other batches"
    fresh = make_loader()
    fresh.load_state_dict(state)
    assert collect(fresh, d, l) == want, "resumed from a state taken mid-read: other batches"
    loader.close()
    fresh.close()


def _next_batches(loader, it, via: str, d: int, l: int, limit):  # noqa: E741
    """Up to ``limit`` (None: all) next batches' ids, from ``it`` or by next_into."""
    if it is None:
        return next_into_ids(loader, d, l, limit=limit)
    out = []
    for batch in it:
        out.append(ids_of(batch))
        if limit is not None and len(out) >= limit:
            break
    return out


def check_abandoned_iterator(make_loader, want, k: int, keep: bool, d: int, l: int):  # noqa: E741
    """An iterator left after ``k`` batches - still referenced (``keep``) or dropped -
    never ends the epoch early for ``next_into``: the batches it claimed or read ahead
    are handed out first, every batch of ``want`` once and in order, and the ledger
    passes. A state taken after it was left resumes exactly."""
    loader = make_loader()
    it = iter(loader)
    got = [ids_of(next(it)) for _ in range(k)]
    if not keep:
        gone = weakref.ref(it)
        del it
        if gone() is not None:  # (held in a cycle: the collector frees it)
            gc.collect()
        assert gone() is None, "the iterator dropped is still alive"
    state = roundtrip(loader.state_dict())
    got += next_into_ids(loader, d, l)
    assert got == want, "next_into after an iterator left mid-epoch: other batches"
    assert loader.state_dict()["epoch"] == 1  # over, and the ledger passed
    fresh = make_loader()
    fresh.load_state_dict(state)
    assert got[:k] + collect(fresh, d, l) == want, "resumed after an iterator was left"
    loader.close()
    fresh.close()


def check_shared_iterator(make_loader, want, threads: int, d: int, l: int):  # noqa: E741
    """One iterator shared by ``threads`` threads calling ``next()``: every batch of
    ``want`` handed out once, as a whole, and no hang."""
    loader = make_loader()
    it = iter(loader)
    per_thread = [[] for _ in range(threads)]

    def work(i):
        for batch in it:
            per_thread[i].append(ids_of(batch))

    run_threads(work, threads)
    got = [b for batches in per_thread for b in batches]
    assert sorted(got) == sorted(want)
    assert loader.state_dict()["epoch"] == 1
    loader.close()


# -- the lifecycle (DESIGN: "One lifecycle") -----------------------------------------------


def _resumed_rest(state, make_loader, d: int, l: int):  # noqa: E741
    """The batches a fresh loader hands out from ``state`` (the rest of its epoch)."""
    fresh = make_loader()
    fresh.load_state_dict(state)
    rest = collect(fresh, d, l)
    fresh.close()
    return rest


def check_close(make_loader, want, via: str, k: int, d: int, l: int):  # noqa: E741
    """close() from another thread after ``k`` batches through ``via`` (``"iter"``, with
    the loader's prefetch, or ``"next_into"``), while a third thread takes a state:
    nothing more is handed out (the next call raises ValueError, or the iterator
    has ended), the states before, during and after close are one, and it resumes
    at batch k. Returns 1 (a schedule tried)."""
    loader = make_loader()
    it = iter(loader) if via == "iter" else None
    got = _next_batches(loader, it, via, d, l, k) if k else []
    before = roundtrip(loader.state_dict())
    during = []
    closer = threading.Thread(target=loader.close)
    taker = threading.Thread(target=lambda: during.append(roundtrip(loader.state_dict())))
    closer.start()
    taker.start()
    closer.join(THREAD_TIMEOUT)
    taker.join(THREAD_TIMEOUT)
    try:
        more = _next_batches(loader, it, via, d, l, 1)
    except ValueError as e:
        assert "closed" in str(e), e
    else:
        assert via == "iter" and k == len(want) and not more, f"handed out after close: {more}"
    after = roundtrip(loader.state_dict())
    assert during == [before] and after == before, "a state moved with close()"
    if after["epoch"] == 0:
        assert got + _resumed_rest(after, make_loader, d, l) == want, "resumed after close"
    else:
        assert k == len(want)
    return 1


def check_reset_seed(make_loader, fresh, k: int, via: str, d: int, l: int, seed: int):  # noqa: E741
    """reset(seed=seed) after ``k`` batches of epoch 0 through ``via`` (an iterator left
    behind): what follows is ``fresh``, epoch 0 of ``seed``, exactly; a state taken after
    one batch of it says (seed, 0, 1) and resumes in a loader of that seed."""
    loader = make_loader()
    it = iter(loader) if via == "iter" else None
    _next_batches(loader, it, via, d, l, k)
    loader.reset(seed=seed)
    got = next_into_ids(loader, d, l, limit=1)
    state = roundtrip(loader.state_dict())
    assert (state["seed"], state["epoch"], state["batches_done"]) == (seed, 0, len(got))
    rest = _resumed_rest(state, lambda: make_loader(seed=seed), d, l)
    assert got + rest == fresh, "resumed after reset(seed): other batches"
    assert got + next_into_ids(loader, d, l) == fresh, "after reset(seed): other batches"
    loader.close()


def check_errors_near_the_end(make_loader, want, threads: int, at: int, d: int, l: int):  # noqa: E741
    """``threads`` threads calling next_into, the read of the ``at``-th batch (near the
    epoch's end) raising OSError once and that thread going on, each thread taking
    a state after every batch: every batch handed out once, no ExactnessError, and
    every state resumes its epoch's rest exactly (elastic: at 1, 2 and 3 shards;
    a state with a failed batch pending is refused there, naming the failed read).
    Returns the states resumed."""
    loader = make_loader()
    flaky = wrap_reader(loader, FlakyReader)
    flaky.batch = loader.batch_size
    flaky.arm(at)
    per_thread, states = [[] for _ in range(threads)], []

    def work(i):
        while True:
            try:
                batch = next_into_ids(loader, d, l, limit=1)
            except OSError:
                continue
            states.append(roundtrip(loader.state_dict()))
            if not batch:
                return
            per_thread[i] += batch

    run_threads(work, threads)
    assert flaky.raised == 1, "the injected error was never raised (the test did not test)"
    assert sorted(b for t in per_thread for b in t) == sorted(want)
    assert loader.epoch == 1
    resumed = 0
    for state in states:
        if state["epoch"] > 0:
            continue
        if state.get("elastic"):
            resumed += _resume_elastic(state, make_loader, want, d, l)
            continue
        done, pending = state["batches_done"], state.get("pending", [])
        rest = [want[k] for k in pending] + want[done + len(pending) :]
        assert _resumed_rest(state, make_loader, d, l) == rest, f"resumed from {state}"
        resumed += 1
    return resumed


def _resume_elastic(state, make_loader, want, d: int, l: int) -> int:  # noqa: E741
    """An elastic state of a one-rank run resumed at 1, 2 and 3 ranks: together they
    hand out the global batches from its ``global_batches_done`` on, each once."""
    if state.get("pending"):
        with pytest.raises(ValueError, match="failed"):
            make_loader().load_state_dict(state)
        return 0
    g = state["global_batches_done"]
    for shards in (1, 2, 3):
        rest = []
        for s in range(shards):
            rank = make_loader(num_shards=shards, shard_index=s)
            rank.load_state_dict(state)
            rest += collect(rank, d, l)
            rank.close()
        assert sorted(rest) == sorted(want[g:]), f"{shards} ranks resumed at {g}: other rows"
    return 3


def check_stats_counts(stats: dict, epoch_batches, run_batches, epochs: int) -> None:
    """The telemetry law: ``loader.stats()`` counts exactly the rows and batches handed
    out (``epoch_batches``: the epoch's, ``run_batches``: every epoch's since the loader
    was built, as row-id lists, padding batches empty), whatever the threads, and its
    read latencies are ordered."""
    for part, batches in (("epoch", epoch_batches), ("run", run_batches)):
        got = stats[part]
        assert got["rows"] == sum(len(b) for b in batches), (part, got)
        assert got["batches"] == len(batches), (part, got)
        lat = got["read_latency_s"]
        assert set(lat) == {"p50", "p90", "p99"}
        if got["reads"]:
            assert 0 <= lat["p50"] <= lat["p90"] <= lat["p99"], lat
    assert stats["run"]["epochs"] == epochs
