"""A model of the "ranges" elastic dealing (``elastic="ranges"``, docs/usage/streaming.md):
not the loader, the rule alone, written apart from it to check it (tests/order/
test_ranges_rule.py compares exactbatch.order.ranges with it, windows unmixed).

For a stream of chunks it deals each segment's agenda to S ranks as contiguous
shares, mixes each rank's rows not yet mixed in windows keyed by their first row,
hands out batches in lockstep for ``done`` steps, and re-deals the rest at the next
segment's world size. It prints, for the stream of bench/elastic_reads.py, the rows
all ranks read in an epoch as a multiple of N (the chunks of each window a rank
begins, less those its previous window held: the chunk cache keeps two windows') and
the batches a rank; then checks over random world-size histories that every row is
handed out exactly once and that every segment's ranks differ by at most one batch.

    .venv/bin/python bench/elastic_ranges_rule.py
"""

from __future__ import annotations

import numpy as np


def _mixed(rows: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """A window's rows permuted by a key of (seed, epoch, its first row, its length)."""
    key = [seed, epoch, int(rows[0]), len(rows)]
    return rows[np.random.default_rng(key).permutation(len(rows))]


def deal(agenda, ranks: int, window: int, seed: int, epoch: int):
    """Each rank's stream of one segment: a list of windows ``(mixed, rows)``, its share
    ``[r*M//S, (r+1)*M//S)`` of the agenda's M rows; a run not mixed yet is cut into
    windows from the start of the rank's part of it, a remainder already mixed kept."""
    bounds = np.cumsum([0] + [len(rows) for _, rows in agenda])
    total = int(bounds[-1])
    streams = []
    for r in range(ranks):
        a, z = r * total // ranks, (r + 1) * total // ranks
        stream = []
        for (mixed, rows), lo in zip(agenda, bounds[:-1], strict=True):
            part = rows[max(a - lo, 0) : max(0, min(z - lo, len(rows)))]
            if not len(part):
                continue
            if mixed:
                stream.append((True, part))
            else:
                for s in range(0, len(part), window):
                    stream.append((False, _mixed(part[s : s + window], seed, epoch)))
        streams.append(stream)
    return streams


def rest(stream, handed: int):
    """The agenda pieces of ``stream`` past its first ``handed`` rows: the rest of the
    window in progress (mixed), then the windows not begun (a run again, unmixed)."""
    out, at = [], 0
    for mixed, rows in stream:
        lo, at = at, at + len(rows)
        if at <= handed:
            continue
        if lo >= handed:
            out.append((mixed, rows if mixed else np.sort(rows)))
        else:
            out.append((True, rows[handed - lo :]))
    return out


def epoch_of(chunk_rows, window: int, batch: int, history, seed: int = 1, epoch: int = 0):
    """``(exactly_once, reads / N, batches a rank per segment)`` of one epoch under
    ``history``, a list of ``(S, steps)`` (steps None: to the end of the epoch)."""
    rows = np.asarray(chunk_rows, dtype=np.int64)
    firsts = np.cumsum(rows) - rows
    order = np.random.default_rng([seed, epoch]).permutation(len(rows))
    seq = np.concatenate([np.arange(firsts[c], firsts[c] + rows[c]) for c in order])
    chunk_of = np.searchsorted(firsts, np.arange(int(rows.sum())), side="right") - 1
    agenda = [(False, np.arange(len(seq)))]
    handed, reads, counts = [], 0, []
    for ranks, steps in history:
        streams = deal(agenda, ranks, window, seed, epoch)
        counts.append([-(-sum(len(x) for _, x in s) // batch) for s in streams])
        agenda = []
        for stream in streams:
            flat = np.concatenate([x for _, x in stream]) if stream else np.zeros(0, np.int64)
            k = len(flat) if steps is None else min(len(flat), steps * batch)
            handed.append(flat[:k])
            at, held = 0, set()
            for _, x in stream:
                if at < k:
                    need = set(np.unique(chunk_of[seq[x]]).tolist())
                    reads += int(rows[sorted(need - held)].sum()) if need - held else 0
                    held = need
                at += len(x)
            agenda += rest(stream, k)
    every = np.sort(seq[np.concatenate(handed)])
    return np.array_equal(every, np.arange(len(seq))), reads / len(seq), counts


def main() -> None:
    chunks, window, batch = [10_000] * 40, 40_000, 1024  # bench/elastic_reads.py's stream
    print("40 chunks of 10,000 rows, window 40,000, batch 1024")
    for ranks in (1, 2, 3, 4):
        once, reads, counts = epoch_of(chunks, window, batch, [(ranks, None)])
        print(f"S={ranks}: reads {reads:.2f}x N, batches a rank {counts[0]}, exactly once {once}")
    once, reads, _ = epoch_of(chunks, window, batch, [(4, 40), (3, None)])
    print(f"S=4 for 40 steps, resumed at S'=3: reads {reads:.2f}x N, exactly once {once}")
    rng, failed, trials = np.random.default_rng(0), 0, 300
    for trial in range(trials):
        sizes = rng.integers(0, 300, int(rng.integers(1, 30)))
        if not sizes.sum():
            continue
        steps = [(int(rng.integers(1, 6)), int(rng.integers(0, 12))) for _ in range(3)]
        history = steps[: int(rng.integers(0, 4))] + [(int(rng.integers(1, 6)), None)]
        window, batch = int(rng.integers(1, 200)), int(rng.integers(1, 50))
        once, _, counts = epoch_of(sizes, window, batch, history, seed=trial)
        failed += not once or any(max(c) - min(c) > 1 for c in counts)
    print(f"{trials} random world-size histories: {failed} not exactly once or unbalanced")


if __name__ == "__main__":
    main()
