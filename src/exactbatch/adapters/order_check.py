"""Before a fit over a stream: are the loader's batches mixed well enough to fit on?

A stream mixes rows only within its mixing window (``loader.mixing_window``).
When that window is smaller than the data, a source sorted on disk - by the
label, by time, by a feature - gives batches that each hold a narrow slice
of the data, and a minibatch fit on them is biased without moving: rows of
diabetes sorted by the target through a 64-row buffer, 6 posterior sds off;
20,000 rows sorted by a continuous label, 25 sd at a 64-row buffer and 7 sd
at 10,000 rows. The convergence verdict cannot see it (the fit is still).

:func:`check_order` examines the loader's own order before the first step:
the batches it would hand out next, ``check_batches`` of them spread over the
rest of its epoch (at most :data:`READ_ROWS` rows read), scored by
:func:`exactbatch.mixing_score.score` and judged by its
:func:`~exactbatch.mixing_score.verdict` - the test of ``exactbatch
mixing``: each batch's Kolmogorov-Smirnov distance per column (the label
columns and up to :data:`COLUMNS` features) to the rows examined, and the
first label's class entropy per batch when it has at most
:data:`MAX_CLASSES` classes, against :data:`REPLICATES` random cuts of the
same rows into batches. The rows examined are the reference: under a full
shuffle the batches are a random cut of them, exchangeable with the
replicates, so the test stays calibrated; it warns only when no replicate
is as bad as the loader's batches (p = 0.01: a well-shuffled stream is
warned about in at most 1% of seeds).

Cost: reading the rest of the epoch up to :data:`READ_ROWS` rows through the
loader (its cursor is put back: the fit's first step is the batch it would
have been), memory for at most :data:`CHECK_ROWS` rows, and scoring them
:data:`REPLICATES` times (well under a second). Skipped when the loader
mixes the whole data (random access with ``shuffle``: a full shuffle).

No optional package is imported here.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from exactbatch.errors import MixingWarning
from exactbatch.mixing_score import entropy_codes, entropy_ratio, score, verdict

if TYPE_CHECKING:
    from exactbatch.loader.dataloader import DataLoader

__all__ = ["CHECK_ROWS", "COLUMNS", "READ_ROWS", "REPLICATES", "check_order", "examine"]

CHECK_BATCHES = 32  # batches examined at most ...
CHECK_ROWS = 8192  # ... and rows in them at most (at least 2 batches)
READ_ROWS = 1 << 18  # rows read through the loader at most, the batches spread over them
COLUMNS = 8  # features examined besides the labels (spread over the columns)
MAX_CLASSES = 100  # a first label of more distinct values is a measurement (KS only)
REPLICATES = 99  # random cuts; the warning needs all of them better: p = 1 / 100


def _sample(loader: DataLoader) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """``(xb, yb)`` of batches spread over the rest of the loader's epoch (at most
    READ_ROWS rows read); the loader is left where it stood."""
    b = loader.batch_size
    keep = max(2, min(CHECK_BATCHES, CHECK_ROWS // b))
    ahead = READ_ROWS // b
    try:
        ahead = min(ahead, len(loader))
    except TypeError:  # a stream of unknown size
        pass
    stride = max(1, math.ceil(ahead / keep))
    state = loader.state_dict()
    out: list[tuple[np.ndarray, np.ndarray | None]] = []
    try:
        loader.load_state_dict(state)  # the same cursor, not yet begun
        for k, batch in enumerate(loader):
            if k >= max(ahead, 1) or len(out) >= keep:
                break
            if k % stride == 0 and batch[0].shape[0] == b:
                out.append((np.asarray(batch[0]), batch[1]))
    finally:
        loader.load_state_dict(state)
    return out


def examine(loader: DataLoader, *, seed: int = 0) -> dict[str, Any] | None:
    """The verdict of :func:`exactbatch.mixing_score.verdict` on the loader's next
    batches (with ``batches``, ``columns`` and, for a class label, ``entropy``), or None
    when it mixes the whole data or fewer than 2 full batches are ahead."""
    n, window = loader.total_size, loader.mixing_window
    if n is not None and window is not None and window >= n:
        return None
    batches = _sample(loader)
    if len(batches) < 2:
        return None
    d = batches[0][0].shape[1]
    k = min(d, COLUMNS)  # every feature when there are at most COLUMNS, else spread
    picked = sorted({round(j * (d - 1) / max(1, k - 1)) for j in range(k)})
    parts = [np.asarray(x[:, picked], dtype=np.float64) for x, _ in batches]
    y0 = batches[0][1]
    labels = y0 is not None and np.ndim(y0) == 2 and np.shape(y0)[1] > 0
    if labels:
        parts = [
            np.c_[p, np.asarray(y, dtype=np.float64)]
            for p, (_, y) in zip(parts, batches, strict=True)
        ]
    values = np.concatenate(parts)
    refs = [np.sort(col[~np.isnan(col)]) for col in values.T]
    codes = None
    if labels:
        codes, _ = entropy_codes(values[:, len(picked)], MAX_CLASSES)
    rng = np.random.default_rng([0x6F72646572, seed])
    with warnings.catch_warnings():  # a column of NaNs only scores NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        sc = score(values, refs, loader.batch_size, codes, replicates=REPLICATES, rng=rng)
        v = verdict(sc)
    v["batches"], v["columns"] = len(batches), values.shape[1]
    if codes is not None:
        v["entropy"] = entropy_ratio(sc)
    return v


def check_order(loader: DataLoader, caller: str) -> dict[str, Any] | None:
    """Warn (:class:`exactbatch.MixingWarning`) when the loader's next batches are not
    well mixed: p = 1 / (REPLICATES + 1), no random cut of the same rows as bad. Returns
    :func:`examine`'s verdict (None when not examined)."""
    v = examine(loader)
    if v is None or v["p_value"] > 1 / (v["replicates"] + 1):
        return v
    ent = v.get("entropy") or {}
    figure = f"{v['share']:.0%} of them less representative than 95% of random batches"
    if ent.get("ratio") is not None:
        figure += f", the label's class entropy {ent['ratio']:.2f} of random batches'"
    window = loader.mixing_window
    warnings.warn(
        MixingWarning(
            f"{caller}: the loader's batches are not well mixed: of {v['batches']} batches "
            f"examined ahead of the first step, {figure} (against {v['replicates']} random "
            f"cuts of the same rows, none as bad: p = {v['p_value']:.2f}). Its rows mix only "
            f"within a window of {window if window is not None else 'unknown'} rows of "
            f"{loader.total_size}, so each batch holds a slice of the data and the fit is "
            f"biased without moving (its convergence verdict cannot see it). Shuffle the "
            f"data once on disk (exactbatch shuffle SRC DST), or give the loader a "
            f"buffer_size that holds the data; exactbatch mixing measures a setting"
        ),
        stacklevel=3,
    )
    return v
