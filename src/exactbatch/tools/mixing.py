"""``exactbatch mixing``: how well a streaming loader setting mixes this data.

It runs a real :class:`~exactbatch.DataLoader` over the data with the
settings given - the data read as a stream of chunks (an ``.ndf`` in chunks
of ``chunk_rows`` rows, Parquet by row group), the chunk order shuffled or
not, rows mixed in a shuffle buffer of ``buffer_size`` rows - with each
row's position in the file carried along as an extra column, and measures
two things over one epoch:

* how far rows travel: ``|position in the epoch - position in the file| / n``
  over a uniform sample of rows (for a full shuffle, ``|U - V|`` of two
  uniforms: median 0.293, mean 1/3), and how spread out on disk the rows of
  one batch are: of the file cut into 100 equal slices, how many a batch
  draws from (a full shuffle: ``100 * (1 - 0.99**B)`` or so). Shuffled
  chunk order moves rows far while batches stay local: the spread shows it;
* how representative batches are: for each column, the Kolmogorov-Smirnov
  distance between a batch's values and a uniform sample of the whole data,
  against the same for random batches: the rows of the batches examined,
  cut into batches uniformly at random, ``replicates`` times (simulated full
  shuffles, scored exactly as the loader's batches are). On data sorted on
  disk a small buffer gives batches far less representative than random.
  The headline is the share of batches less representative than 95% of
  random ones, with the range it takes in 90% of the simulated full
  shuffles; and for a stratum column (``stratum``: a label, a class), the
  mean class entropy of a batch over that of random batches (1.0 for a full
  shuffle, lower when batches cluster a class).

The verdict is calibrated by that simulation
(:func:`~exactbatch.mixing_score.verdict`): under a full shuffle the
loader's batches and the simulated ones are exchangeable, so a full
shuffle is called not well mixed in at most 5% of seeds, whatever the data,
the batch size or the number of batches.

Under the header it says what a full mix takes: the smallest buffer whose
mixing window covers the data (the data's rows: a buffer that holds the
data is one piece, while a smaller one that reads ahead in two halves mixes
within half of itself), and the alternative of random access (an ``.ndf``
read with ``DataLoader(open_ndf(...))`` is a full shuffle whatever the file
order); and which columns it skipped, and why (non-numeric, not chosen, or
over the 8 examined when none are chosen).

It reads what ``exactbatch info`` reads: an ``.ndf`` or a sharded dataset
(streamed in blocks as :func:`~exactbatch.ndf_blocks` cuts them, never across
a part), local or at a URL, and Parquet by row group. The order is the one a
loader built with the same settings (and seed) hands out in epoch 0. Cost:
one pass over the chosen columns (``.ndf`` reads whole rows), with memory
for the buffer, a sample of ``sample_rows`` rows and the values of the
batches examined (at most 131,072 rows); then the simulation, which sorts
those rows within batches once per replicate and column.
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from typing import Any

import numpy as np

from exactbatch.checks import check_flag, check_int
from exactbatch.hints import PathLike
from exactbatch.mixing_score import Scores, entropy_codes, entropy_ratio, score, verdict
from exactbatch.tools.common import CliError, input_format, open_ndf_input, progress
from exactbatch.tools.mixing_inputs import Input, ndf_input, parquet_input

__all__ = ["REPLICATES", "SLICES", "ks_distance", "mixing"]

# Rows of the examined batches, each scored again in every simulated full shuffle: the
# simulation's cost is rows x replicates x columns (131,072 x 99 x 8: about 5 s).
_STORED_ROWS = 1 << 17
REPLICATES = 99  # simulated full shuffles: a Monte Carlo test at exactly 5% (5 of 100)
SLICES = 100  # the file cut into this many equal slices, for the batch spread
_MAX_STRATA = 1000  # a stratum column with more distinct values is a measurement
# |U - V| for two uniform positions
FULL_SHUFFLE = {
    "median": 1 - math.sqrt(0.5),
    "q90": 1 - math.sqrt(0.1),
    "q99": 1 - math.sqrt(0.01),
    "mean": 1 / 3,
}


def _spread_full_shuffle(b: int, n: int) -> float:
    """Expected slices (of SLICES) that b rows drawn uniformly without replacement touch."""
    b = min(b, n)
    edges = [-(-k * n // SLICES) for k in range(SLICES + 1)]  # slice k: rows [e_k, e_k+1)
    total = 0.0
    for m in (hi - lo for lo, hi in zip(edges, edges[1:], strict=False)):
        if m and n - m >= b:  # P(no row of the slice drawn) = C(n - m, b) / C(n, b)
            empty = math.exp(
                math.lgamma(n - m + 1)
                - math.lgamma(n - m - b + 1)
                - math.lgamma(n + 1)
                + math.lgamma(n - b + 1)
            )
            total += 1 - empty
        elif m:
            total += 1
    return total


def ks_distance(values: np.ndarray, ref_sorted: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov distance; NaNs dropped; ``ref_sorted`` sorted, NaN-free.

    The definition: :mod:`~exactbatch.mixing_score` computes the same for
    every batch and replicate at once."""
    a = np.sort(values[~np.isnan(values)])
    if not len(a) or not len(ref_sorted):
        return float("nan")
    at = np.concatenate((a, ref_sorted))
    fa = np.searchsorted(a, at, side="right") / len(a)
    fr = np.searchsorted(ref_sorted, at, side="right") / len(ref_sorted)
    return float(np.max(np.abs(fa - fr)))


def mixing(
    src: PathLike,
    *,
    batch_size: int,
    buffer_size: int | None = None,
    chunk_rows: int | None = None,
    shuffle_chunks: bool = True,
    seed: int = 0,
    columns: str | None = None,
    stratum: str | None = None,
    max_batches: int = 500,
    sample_rows: int = 20000,
    replicates: int = REPLICATES,
    storage_options: dict[str, Any] | None = None,
    bar: bool = True,
) -> dict[str, Any]:
    """Simulate epoch 0 of a streaming loader over ``src``; the measurements as a dict.

    ``src``: an ``.ndf``, a sharded dataset (a folder with ``manifest.json``),
    Parquet (a file or a folder), or the URL of an ``.ndf`` or a dataset (with
    ``storage_options``), as ``exactbatch info`` reads it. ``stratum``: the
    column whose per-batch entropy is measured (default: the label column
    when there is exactly one). ``replicates``: simulated full shuffles the
    verdict is calibrated on (at least 19). ``result["well_mixed"]`` is False
    for a full shuffle in at most 5% of seeds (see
    :func:`~exactbatch.mixing_score.verdict`).
    """
    batch_size, seed = (
        check_int("batch_size", batch_size, 1),
        check_int("seed", seed, 0, maximum=None),
    )
    buffer_size = check_int("buffer_size", buffer_size, 1, optional=True)
    chunk_rows = check_int("chunk_rows", chunk_rows, 1, optional=True)
    max_batches = check_int("max_batches", max_batches, 1)
    sample_rows = check_int("sample_rows", sample_rows, 1)
    replicates = check_int("replicates", replicates, 19)
    shuffle_chunks, bar = check_flag("shuffle_chunks", shuffle_chunks), check_flag("bar", bar)
    path = os.fspath(src)
    fmt = input_format(path, storage_options, "mixing")
    run = functools.partial(
        _mixing,
        src=path,
        fmt=fmt,
        batch_size=batch_size,
        buffer_size=buffer_size,
        shuffle_chunks=shuffle_chunks,
        seed=seed,
        max_batches=max_batches,
        sample_rows=sample_rows,
        replicates=replicates,
        bar=bar,
    )
    if fmt == "parquet":
        return run(parquet_input(path, columns, chunk_rows, stratum))
    if fmt not in ("ndf", "dataset"):
        raise CliError(
            f"{path}: mixing reads an .ndf, a sharded dataset or Parquet; convert {fmt} first"
        )
    with open_ndf_input(path, fmt, storage_options) as f:
        return run(ndf_input(f, path, columns, chunk_rows, stratum))


def _mixing(
    inp: Input,
    *,
    src: str,
    fmt: str,
    batch_size: int,
    buffer_size: int | None,
    shuffle_chunks: bool,
    seed: int,
    max_batches: int,
    sample_rows: int,
    replicates: int,
    bar: bool,
) -> dict[str, Any]:
    from exactbatch import DataLoader
    from exactbatch.batching.buffer import DEFAULT_BUFFER_BYTES, full_mix_buffer

    tagged, names, width = inp.tagged, inp.names, inp.width
    n, c = tagged.n_rows, len(names)
    if n == 0:
        raise CliError(f"{src}: no rows")
    if n < batch_size:
        raise CliError(
            f"{src}: {n:,} rows are fewer than one batch of --batch-size {batch_size:,}: "
            "no batch to examine"
        )
    if buffer_size is None:  # the loader's default for the user's data (not our c + 1)
        buffer_size = DEFAULT_BUFFER_BYTES // (8 * max(1, width))
    source = (
        tagged if shuffle_chunks else (lambda: (tagged.read_chunk(i) for i in range(len(tagged))))
    )
    loader = DataLoader(
        source, batch_size, shuffle=True, seed=seed, buffer_size=buffer_size, total_size=n
    )

    rng = np.random.default_rng([0x6D6978, seed])
    ref_ids = np.sort(rng.choice(n, size=min(n, sample_rows), replace=False))
    ref_vals = np.full((len(ref_ids), c), np.nan)
    ref_out = np.zeros(len(ref_ids), dtype=np.int64)  # epoch position of each sampled row

    full = n // batch_size
    keep = max(1, min(max_batches, _STORED_ROWS // batch_size))
    stride = max(1, math.ceil(full / keep))
    examined: list[int] = []
    stored: list[np.ndarray] = []
    spread: list[int] = []
    pos = 0
    with progress(n, f"mixing {os.path.basename(src)}", "rows", bar) as pb:
        for k, (xb, _) in enumerate(loader):
            ids = xb[:, -1].astype(np.int64)
            j = np.minimum(np.searchsorted(ref_ids, ids), len(ref_ids) - 1)
            hit = ref_ids[j] == ids
            ref_vals[j[hit]] = xb[hit, :c]
            ref_out[j[hit]] = pos + np.flatnonzero(hit)
            if k % stride == 0 and len(xb) == batch_size:
                examined.append(k)
                stored.append(xb[:, :-1].copy())
                spread.append(len(np.unique(ids * SLICES // n)))
            pos += len(xb)
            pb.update(len(xb))

    refs = [np.sort(col[~np.isnan(col)]) for col in ref_vals.T]
    rows = np.concatenate(stored)  # batch 0 is full and examined: n >= batch_size
    codes, strata = _codes(rows, inp)
    with progress(replicates, "simulated full shuffles", "", bar, unit_scale=False) as pb:
        scores = score(
            rows[:, :c], refs, batch_size, codes, replicates=replicates, rng=rng, done=pb.update
        )
    travel = np.abs(ref_out - ref_ids) / n
    window = loader.mixing_window
    assert window is not None  # (shuffled: it has one)
    return _summarize(
        src=src,
        fmt=fmt,
        n=n,
        batch_size=batch_size,
        buffer_size=int(buffer_size),
        mixing_window=window,
        halves=window < min(max(buffer_size, batch_size), n),
        full_mix_buffer=full_mix_buffer(batch_size, n),
        full_mix_bytes=8 * (width + 1) * full_mix_buffer(batch_size, n),  # rows and ids
        skipped_columns=inp.skipped,
        chunk_rows=inp.chunk_rows,
        chunks=len(tagged),
        shuffle_chunks=shuffle_chunks,
        seed=seed,
        names=names,
        batches=len(loader),
        examined=examined,
        scores=scores,
        strata=strata,
        travel=travel,
        spread=np.array(spread),
        ref_ids=ref_ids,
        ref_out=ref_out,
        rng=rng,
    )


def _codes(rows: np.ndarray, inp: Input) -> tuple[np.ndarray | None, dict[str, Any]]:
    """The stratum's class of each examined row, and what the report says of it."""
    if inp.stratum is None:
        return None, {"column": None}
    codes, classes = entropy_codes(rows[:, inp.stratum_at], _MAX_STRATA)
    if codes is None:
        note = (
            f"{len(classes):,} distinct values in the batches examined, over the "
            f"{_MAX_STRATA:,} a stratum may have"
        )
        return None, {"column": inp.stratum, "classes": len(classes), "skipped": note}
    return codes, {"column": inp.stratum, "classes": len(classes)}


def _summarize(
    *,
    scores: Scores,
    strata: dict[str, Any],
    travel: np.ndarray,
    spread: np.ndarray,
    ref_ids: np.ndarray,
    ref_out: np.ndarray,
    rng: np.random.Generator,
    names: list[str],
    **info: Any,
) -> dict[str, Any]:
    def stats(a: np.ndarray) -> dict[str, float | None]:
        a = a[~np.isnan(a)]
        if not len(a):
            return {"mean": None, "p95": None}
        return {"mean": float(np.mean(a)), "p95": float(np.quantile(a, 0.95))}

    ks, ks_sim = scores.ks, scores.ks_sim.reshape(-1, len(names))  # replicates' batches pooled
    with warnings.catch_warnings():  # a batch of NaNs only: its score is NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        per_batch = np.nanmean(ks, axis=1) if ks.size else np.zeros(0)
        per_random = np.nanmean(ks_sim, axis=1)
        v = verdict(scores)
    band = np.nanquantile(per_random, [0.05, 0.5, 0.95]) if per_random.size else [np.nan] * 3
    p05, p50, p95 = (float(x) for x in band)
    if scores.entropy is not None:
        strata = {**strata, **entropy_ratio(scores)}
    show = rng.choice(len(ref_ids), size=min(5000, len(ref_ids)), replace=False)
    return {
        **info,
        "travel": {
            "median": float(np.median(travel)),
            "q90": float(np.quantile(travel, 0.9)),
            "q99": float(np.quantile(travel, 0.99)),
            "mean": float(np.mean(travel)),
            "sample_rows": len(travel),
            "batch_spread": float(np.mean(spread)) if len(spread) else None,
            "slices": SLICES,
        },
        "travel_full_shuffle": {
            **FULL_SHUFFLE,
            "batch_spread": _spread_full_shuffle(info["batch_size"], info["n"]),
        },
        "ks": {
            "columns": [
                {"name": name, "loader": stats(ks[:, j]), "random": stats(ks_sim[:, j])}
                for j, name in enumerate(names)
            ],
            "all": {"loader": stats(per_batch), "random": stats(per_random)},
            "random_band": {"p05": p05, "median": p50, "p95": p95},
            "random_batches": len(ks_sim),
            "share_worse_than_random_p95": v["share"],
            "share_full_shuffle": v["full_shuffle"],
            "threshold": v["threshold"],
            "p_value": v["p_value"],
            "replicates": v["replicates"],
        },
        "entropy": strata,
        "well_mixed": v["well_mixed"],
        "_plot": {"in": ref_ids[show], "out": ref_out[show], "per_batch": per_batch},
    }
