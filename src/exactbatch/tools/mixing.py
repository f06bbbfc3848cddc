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
  against the same for batches drawn uniformly at random. On data sorted on
  disk a small buffer gives batches far less representative than random.

Under the header it says what a full mix takes: the smallest buffer whose
mixing window covers the data (the data's rows: a buffer that holds the
data is one piece, while a smaller one that reads ahead in two halves mixes
within half of itself), and the alternative of random access (an ``.ndf``
read with ``DataLoader(open_ndf(...))`` is a full shuffle whatever the file
order); and which columns it skipped, and why (non-numeric, not chosen, or
over the 8 examined when none are chosen).

The order is the one a loader built with the same settings (and seed) hands
out in epoch 0. Cost: one pass over the chosen columns (``.ndf`` reads whole
rows), with memory for the buffer, a sample of ``sample_rows`` rows and the
values of the batches examined (at most about a million rows).
"""

from __future__ import annotations

import math
import os

import numpy as np

from exactbatch.checks import check_flag, check_int
from exactbatch.tools.common import CliError, detect_format, progress
from exactbatch.tools.mixing_inputs import ndf_input, parquet_input

__all__ = ["ks_distance", "mixing", "public", "render"]

_STORED_ROWS = 1 << 20  # rows of examined batches kept for the KS statistics
_SLICES = 100  # the file cut into this many equal slices, for the batch spread
_VERDICT_SHARE = 0.15  # above this share of "worse than random p95" batches: not mixed
# |U - V| for two uniform positions
FULL_SHUFFLE = {
    "median": 1 - math.sqrt(0.5),
    "q90": 1 - math.sqrt(0.1),
    "q99": 1 - math.sqrt(0.01),
    "mean": 1 / 3,
}


def _spread_full_shuffle(b: int, n: int) -> float:
    """Expected slices (of _SLICES) that b rows drawn uniformly without replacement touch."""
    b = min(b, n)
    edges = [-(-k * n // _SLICES) for k in range(_SLICES + 1)]  # slice k: rows [e_k, e_k+1)
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
    """Two-sample Kolmogorov-Smirnov distance; NaNs dropped; ``ref_sorted`` sorted, NaN-free."""
    a = np.sort(values[~np.isnan(values)])
    if not len(a) or not len(ref_sorted):
        return float("nan")
    at = np.concatenate((a, ref_sorted))
    fa = np.searchsorted(a, at, side="right") / len(a)
    fr = np.searchsorted(ref_sorted, at, side="right") / len(ref_sorted)
    return float(np.max(np.abs(fa - fr)))


def mixing(
    src,
    *,
    batch_size: int,
    buffer_size=None,
    chunk_rows=None,
    shuffle_chunks=True,
    seed=0,
    columns=None,
    max_batches=500,
    sample_rows=20000,
    bar=True,
) -> dict:
    """Simulate epoch 0 of a streaming loader over ``src``; the measurements as a dict."""
    batch_size, seed = check_int("batch_size", batch_size, 1), check_int("seed", seed, 0)
    buffer_size = check_int("buffer_size", buffer_size, 1, optional=True)
    chunk_rows = check_int("chunk_rows", chunk_rows, 1, optional=True)
    max_batches = check_int("max_batches", max_batches, 1)
    sample_rows = check_int("sample_rows", sample_rows, 1)
    shuffle_chunks, bar = check_flag("shuffle_chunks", shuffle_chunks), check_flag("bar", bar)
    from exactbatch import DataLoader
    from exactbatch.batching.buffer import DEFAULT_BUFFER_BYTES, full_mix_buffer

    src = os.fspath(src)
    fmt = detect_format(src)
    if fmt not in ("ndf", "parquet"):
        raise CliError(f"{src}: mixing reads .ndf or Parquet; convert {fmt} first")
    build = ndf_input if fmt == "ndf" else parquet_input
    tagged, names, width, chunk_rows, skipped = build(src, columns, chunk_rows)
    n, c = tagged.n_rows, len(names)
    if n == 0:
        raise CliError(f"{src}: no rows")
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
    b = min(batch_size, n)
    rand_ids = [
        rng.choice(n, size=b, replace=False) for _ in range(max(50, min(200, (256 << 10) // b)))
    ]
    needed = np.unique(np.concatenate([ref_ids, *rand_ids]))
    needed_vals = np.full((len(needed), c), np.nan)
    ref_out = np.zeros(len(ref_ids), dtype=np.int64)  # epoch position of each sampled row

    full = n // batch_size
    keep = max(1, min(max_batches, _STORED_ROWS // batch_size))
    stride = max(1, math.ceil(full / keep))
    examined, stored, spread = [], [], []
    pos = 0
    with progress(n, f"mixing {os.path.basename(src)}", "rows", bar) as pb:
        for k, (xb, _) in enumerate(loader):
            ids = xb[:, -1].astype(np.int64)
            j = np.minimum(np.searchsorted(needed, ids), len(needed) - 1)
            hit = needed[j] == ids
            needed_vals[j[hit]] = xb[hit, :-1]
            j = np.minimum(np.searchsorted(ref_ids, ids), len(ref_ids) - 1)
            hit = ref_ids[j] == ids
            ref_out[j[hit]] = pos + np.flatnonzero(hit)
            if k % stride == 0 and len(xb) == batch_size:
                examined.append(k)
                stored.append(xb[:, :-1].copy())
                spread.append(len(np.unique(ids * _SLICES // n)))
            pos += len(xb)
            pb.update(len(xb))

    ref_vals = needed_vals[np.searchsorted(needed, ref_ids)]
    ref_sorted = [np.sort(col[~np.isnan(col)]) for col in ref_vals.T]
    ks_loader = np.array(
        [[ks_distance(v[:, j], ref_sorted[j]) for j in range(c)] for v in stored]
    ).reshape(len(stored), c)
    ks_random = np.array(
        [
            [
                ks_distance(needed_vals[np.searchsorted(needed, r), j], ref_sorted[j])
                for j in range(c)
            ]
            for r in rand_ids
        ]
    )
    travel = np.abs(ref_out - ref_ids) / n
    return _summarize(
        src=src,
        fmt=fmt,
        n=n,
        batch_size=batch_size,
        buffer_size=int(buffer_size),
        mixing_window=loader.mixing_window,
        halves=loader.mixing_window < min(max(buffer_size, batch_size), n),
        full_mix_buffer=full_mix_buffer(batch_size, n),
        full_mix_bytes=8 * (width + 1) * full_mix_buffer(batch_size, n),  # rows and ids
        skipped_columns=skipped,
        chunk_rows=chunk_rows,
        chunks=len(tagged),
        shuffle_chunks=shuffle_chunks,
        seed=seed,
        names=names,
        batches=len(loader),
        examined=examined,
        ks_loader=ks_loader,
        ks_random=ks_random,
        travel=travel,
        spread=np.array(spread),
        ref_ids=ref_ids,
        ref_out=ref_out,
        rng=rng,
    )


def _summarize(
    *, ks_loader, ks_random, travel, spread, ref_ids, ref_out, rng, names, **info
) -> dict:
    def stats(a):
        a = a[~np.isnan(a)]
        if not len(a):
            return {"mean": None, "p95": None}
        return {"mean": float(np.mean(a)), "p95": float(np.quantile(a, 0.95))}

    per_batch = np.nanmean(ks_loader, axis=1) if ks_loader.size else np.zeros(0)
    per_random = np.nanmean(ks_random, axis=1)
    p05, p50, p95 = (float(v) for v in np.nanquantile(per_random, [0.05, 0.5, 0.95]))
    worse = float(np.mean(per_batch > p95)) if len(per_batch) else 0.0
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
            "slices": _SLICES,
        },
        "travel_full_shuffle": {
            **FULL_SHUFFLE,
            "batch_spread": _spread_full_shuffle(info["batch_size"], info["n"]),
        },
        "ks": {
            "columns": [
                {"name": name, "loader": stats(ks_loader[:, j]), "random": stats(ks_random[:, j])}
                for j, name in enumerate(names)
            ],
            "all": {"loader": stats(per_batch), "random": stats(per_random)},
            "random_band": {"p05": p05, "median": p50, "p95": p95},
            "random_batches": len(ks_random),
            "share_worse_than_random_p95": worse,
        },
        "well_mixed": worse <= _VERDICT_SHARE,
        "_plot": {"in": ref_ids[show], "out": ref_out[show], "per_batch": per_batch},
    }


def render(r: dict) -> str:
    """The measurements as tables for a person."""
    chunks = (
        f"{r['chunks']:,} chunks of {r['chunk_rows']:,} rows"
        if r["chunk_rows"]
        else f"{r['chunks']:,} row groups"
    )
    order = "in shuffled order" if r["shuffle_chunks"] else "in file order"
    t, f = r["travel"], r["travel_full_shuffle"]
    ks = r["ks"]
    lines = [
        f"{r['src']}: n={r['n']:,} rows; batch {r['batch_size']:,}; buffer "
        f"{r['buffer_size']:,} rows (mixing window {r['mixing_window']:,} rows); "
        f"{chunks} {order}; seed {r['seed']}",
        *_what_it_takes(r),
        "",
        "What the loader does to the file's order (the same for any data laid out alike):",
        f"how far rows travel, |position in epoch - position in file| / n "
        f"({t['sample_rows']:,} sampled rows)",
        f"  {'':<14}{'this loader':>12}{'full shuffle':>14}",
    ]
    for key, label in (("median", "median"), ("q90", "90%"), ("q99", "99%"), ("mean", "mean")):
        lines.append(f"  {label:<14}{t[key]:>12.4f}{f[key]:>14.4f}")
    if t["batch_spread"] is not None:
        lines.append(
            f"  {'batch spread':<14}{t['batch_spread']:>12.1f}{f['batch_spread']:>14.1f}"
            f"   (how many of {_SLICES} slices of the file a batch draws from)"
        )
    lines += [
        "",
        "What that does to this data: how representative batches are, as the KS distance "
        "of a batch",
        f"to the whole data ({len(r['examined']):,} of {r['batches']:,} batches, against "
        f"{ks['random_batches']} uniformly random batches of the same size)",
        f"  {'column':<16}{'loader mean':>12}{'p95':>8}{'random mean':>13}{'p95':>8}",
    ]
    rows = [(c["name"], c) for c in ks["columns"]] + [("(mean of cols)", ks["all"])]
    for name, c in rows:
        lo, ra = c["loader"], c["random"]
        cells = [lo["mean"], lo["p95"], ra["mean"], ra["p95"]]
        txt = ["-" if v is None else f"{v:.3f}" for v in cells]
        lines.append(f"  {name[:16]:<16}{txt[0]:>12}{txt[1]:>8}{txt[2]:>13}{txt[3]:>8}")
    share = ks["share_worse_than_random_p95"]
    lines += [
        f"  batches less representative than 95% of random batches: {share:.1%} "
        "(about 5% for a full shuffle)",
        "",
    ]
    if r["well_mixed"]:
        lines.append("verdict: well mixed - batches look like uniformly random batches")
    else:
        lines.append(
            "verdict: NOT well mixed - batches are not representative of the whole data.\n"
            "  Shuffle the file once on disk (exactbatch shuffle), or raise --buffer-size."
        )
    return "\n".join(lines)


def _what_it_takes(r: dict) -> list[str]:
    """The buffer a full mix needs, the random-access alternative, the columns skipped."""
    lines = []
    if r["halves"]:
        lines.append(
            "  this buffer reads ahead in two halves: rows mix within half of it "
            "(a window of W rows takes a buffer of about 2W)"
        )
    lines += [
        f"  a full mix needs --buffer-size {r['full_mix_buffer']:,}, the whole data "
        f"(about {r['full_mix_bytes'] / 2**20:,.1f} MiB; a buffer that holds it is one piece)",
        "  or random access, a full shuffle whatever the file order: DataLoader(open_ndf(...))",
    ]
    if r["fmt"] != "ndf":
        lines.append("    (exactbatch convert writes the .ndf)")
    by_reason: dict[str, list[str]] = {}
    for c in r["skipped_columns"]:
        by_reason.setdefault(c["reason"], []).append(c["name"])
    for reason, names in by_reason.items():
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        lines.append(f"  columns skipped ({reason}): {shown}")
    return lines


def public(r: dict) -> dict:
    """The result without the arrays kept for the plot (what --json prints)."""
    return {k: v for k, v in r.items() if not k.startswith("_")}
