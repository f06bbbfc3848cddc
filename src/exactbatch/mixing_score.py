"""How representative the batches ``exactbatch mixing`` examined are, and what a
full shuffle would give: the scores and their calibration by simulation.

The examined batches are ``K`` full batches of ``B`` rows, ``S = K * B``
rows in all. Each batch is scored per column by its Kolmogorov-Smirnov
distance to a uniform sample of the whole data (the reference), and, for a
stratum column, by the entropy of its classes. A *replicate* is the same
rows cut into ``K`` batches uniformly at random (a random permutation of
the ``S`` rows, ``B`` at a time) and scored exactly as the real batches
are. Under a full shuffle the loader's batches are such a random cut of the
rows they hold, so the real batches and the replicates are exchangeable:
any statistic computed alike from each has the same distribution, and the
real one ranks among the replicates uniformly at random. That is what
makes the verdict's false-alarm rate at most 5% by construction (see
:func:`verdict`). On sorted data the rows examined, spread over the epoch,
still cover the data, so the replicates are what random batches look like
while the loader's batches cluster.

Cost: sorting each column of the ``S`` rows once, then per replicate and
column a gather and a sort within batches (``O(S log B)``); memory a few
arrays of ``S`` values per column. The caller keeps ``S`` bounded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["LEVEL", "Scores", "entropy_codes", "entropy_ratio", "score", "verdict"]

LEVEL = 0.05  # the false-alarm rate the verdict allows under a full shuffle
_GROUP_ROWS = 1 << 19  # rows of the replicates scored in one go (memory: a few such arrays)


class Scores:
    """The real batches' scores and ``replicates`` simulated full shuffles'.

    ``ks``: (K, c) KS distances of the real batches; ``ks_sim``: (R, K, c) the
    replicates'. ``entropy``/``entropy_sim``: (K,) and (R, K) batch entropies of
    the stratum (nats), None without one.
    """

    def __init__(
        self,
        ks: np.ndarray,
        ks_sim: np.ndarray,
        entropy: np.ndarray | None = None,
        entropy_sim: np.ndarray | None = None,
    ) -> None:
        self.ks, self.ks_sim = ks, ks_sim
        self.entropy, self.entropy_sim = entropy, entropy_sim


def score(
    values: np.ndarray,
    refs: Sequence[np.ndarray],
    batch_size: int,
    codes: np.ndarray | None = None,
    *,
    replicates: int,
    rng: np.random.Generator,
    done: Callable[[int], object] | None = None,
) -> Scores:
    """Score the ``K = len(values) // batch_size`` batches of ``values`` (rows in
    batch order, ``(S, c)``) and ``replicates`` random cuts of the same rows.

    ``refs[j]``: the reference sample of column ``j``, sorted, NaN-free. NaNs in
    a batch are left out of its distance (a batch of NaNs only scores NaN).
    ``codes``: the stratum's class of each row (ints ``0..C-1``), or None.
    ``done(r)``, if given, is called as each group of ``r`` replicates is scored.
    """
    s, c = values.shape
    k = s // batch_size
    cols = _Columns(values, refs, batch_size)
    ncls = int(codes.max()) + 1 if codes is not None and len(codes) else 1
    step = max(1, _GROUP_ROWS // max(1, s))  # replicates scored together
    ks_parts: list[np.ndarray] = []
    ent_sim: list[np.ndarray] = []
    for a in range(0, replicates, step):
        # each row a uniformly random permutation of the rows: (G, S)
        perms = rng.permuted(np.tile(np.arange(s), (min(step, replicates - a), 1)), axis=1)
        ks_parts.append(cols.ks(perms))
        if codes is not None:
            ent_sim.append(_entropy(codes[perms], batch_size, ncls))
        if done is not None:
            done(len(perms))
    ks = cols.ks(np.arange(s)[None])[0]
    ks_sim = np.concatenate(ks_parts).reshape(replicates, k, c)
    if codes is None:
        return Scores(ks, ks_sim)
    ent = _entropy(codes[None], batch_size, ncls)[0]
    return Scores(ks, ks_sim, ent, np.concatenate(ent_sim))


class _Columns:
    """Each column's rows ranked once, with the reference's ECDF at each rank."""

    def __init__(self, values: np.ndarray, refs: Sequence[np.ndarray], batch_size: int) -> None:
        s, c = values.shape
        self.b = batch_size
        self.rank = np.empty((c, s), dtype=np.int64)
        self.hi, self.lo = np.empty((c, s)), np.empty((c, s))  # F_ref(v), F_ref(v-)
        self.nan = np.empty((c, s), dtype=bool)
        for j in range(c):
            col = values[:, j]
            order = np.argsort(col, kind="stable")  # NaN last
            v = col[order]
            self.rank[j, order] = np.arange(s)
            m = max(1, len(refs[j]))
            self.hi[j] = np.searchsorted(refs[j], v, side="right") / m
            self.lo[j] = np.searchsorted(refs[j], v, side="left") / m
            self.nan[j] = np.isnan(v)
        self.empty_ref = [not len(r) for r in refs]

    def ks(self, perms: np.ndarray) -> np.ndarray:
        """(G, K, c): the KS distance to the reference of each batch, column by column,
        for each row of ``perms`` (G, S): its rows cut ``B`` at a time."""
        c, s = self.hi.shape
        g, b, k = len(perms), self.b, s // self.b
        i = np.arange(1, b + 1)
        out = np.empty((g * k, c))
        for j in range(c):
            r = np.sort(self.rank[j][perms].reshape(g * k, b), axis=1)  # ranks, NaN last
            hi, lo = self.hi[j][r], self.lo[j][r]
            nan = self.nan[j][r]
            m = b - nan.sum(axis=1, keepdims=True)  # values per batch
            # between two sorted batch values the batch's ECDF is flat and the
            # reference's rises: the sup is at a batch value or just below one
            with np.errstate(divide="ignore", invalid="ignore"):
                d = np.maximum(i / m - hi, lo - (i - 1) / m)
            d[nan] = -np.inf
            out[:, j] = d.max(axis=1) if b else np.nan
            out[m[:, 0] == 0, j] = np.nan
            if self.empty_ref[j]:
                out[:, j] = np.nan
        return out.reshape(g, k, c)


def _entropy(codes: np.ndarray, batch_size: int, ncls: int) -> np.ndarray:
    """(G, K): the entropy (nats) of the classes in each batch of each row of ``codes``
    (G, S), cut ``batch_size`` at a time."""
    g, k = len(codes), codes.shape[1] // batch_size
    rows = np.repeat(np.arange(g * k), batch_size)
    flat = codes[:, : k * batch_size].reshape(-1)
    counts = np.bincount(rows * ncls + flat, minlength=g * k * ncls).reshape(g * k, ncls)
    p = counts / batch_size
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=1)
    out: np.ndarray = ent.reshape(g, k)
    return out


def entropy_codes(values: np.ndarray, max_classes: int) -> tuple[np.ndarray | None, np.ndarray]:
    """The class of each value (NaN one class of its own), and the classes; None
    when there are more than ``max_classes`` (not a stratum, but a measurement)."""
    classes, codes = np.unique(values, return_inverse=True, equal_nan=True)
    if len(classes) > max_classes:
        return None, classes
    return codes.reshape(-1), classes


def verdict(sc: Scores) -> dict[str, Any]:
    """The headline share and the calibrated verdict.

    A batch's score is its KS distance averaged over the columns. The
    threshold is the 95th percentile of all batches' scores, the real ones and
    the replicates' pooled (a symmetric function of them all, so every set is
    judged alike). Each set's statistic is its share of batches above the
    threshold, ties broken by its mean score. With a stratum (by default the
    label column) a set's rank by that is combined with its rank by the mean
    class entropy of its batches (lower is worse): the worse of the two, so
    label-sorted batches of representative features are caught. The real
    batches are *not well mixed* when at most ``LEVEL * (R + 1) - 1``
    replicates reach theirs: the Monte Carlo p-value ``(1 + #{replicates >=
    real}) / (R + 1)`` is at most ``LEVEL``. Under a full shuffle the sets
    are exchangeable and the statistic a symmetric function of them all, so
    the real one's rank among the ``R + 1`` is uniform: this happens with
    probability at most ``LEVEL``.
    """
    per = np.nanmean(sc.ks, axis=1)  # (K,)
    per_sim = np.nanmean(sc.ks_sim, axis=2)  # (R, K)
    pooled = np.concatenate((per, per_sim.ravel()))
    tau = float(np.nanquantile(pooled, 0.95)) if np.any(~np.isnan(pooled)) else np.inf
    share = float(np.mean(per > tau)) if len(per) else 0.0
    shares = np.mean(per_sim > tau, axis=1) if per_sim.shape[1] else np.zeros(len(per_sim))
    mean = _mean(per)
    means = np.array([_mean(p) for p in per_sim])
    r = len(per_sim)
    # each set's badness by KS (share, then mean score), real first
    worse = _ranks(np.r_[share, shares], np.r_[mean, means])
    sim = sc.entropy_sim  # (set with sc.entropy: both or neither)
    if sc.entropy is not None and sim is not None and float(np.mean(sim)) > 0:
        # and by the stratum's (the labels') class entropy: lower is worse. The set's
        # statistic is the worse of its two ranks, a symmetric function of all the
        # sets, so the real one's rank stays uniform under a full shuffle
        ent = np.r_[np.mean(sc.entropy), np.mean(sim, axis=1)]
        worse = np.maximum(worse, _ranks(-ent, np.zeros(r + 1)))
    p_value = int(np.sum(worse >= worse[0])) / (r + 1)
    lo, mid, hi = (float(v) for v in np.quantile(shares, [0.05, 0.5, 0.95]))
    return {
        "threshold": tau if np.isfinite(tau) else None,  # None: every score NaN
        "share": share,
        "full_shuffle": {"p05": lo, "median": mid, "p95": hi},
        "p_value": p_value,
        "replicates": r,
        "well_mixed": p_value > LEVEL,
    }


def _ranks(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Each set's rank (0 the best) by ``first``, ties by ``second``; equal sets share
    their highest rank (a tie counts against the real set, as ``>=`` does)."""
    keys = np.stack([np.nan_to_num(first, nan=-np.inf), np.nan_to_num(second, nan=-np.inf)], 1)
    return np.array([int(np.sum((keys[:, 0] < a) | ((keys[:, 0] == a) & (keys[:, 1] <= b)))) - 1
                     for a, b in keys])  # fmt: skip


def _mean(a: np.ndarray) -> float:
    a = a[~np.isnan(a)]
    return float(np.mean(a)) if len(a) else -np.inf


def entropy_ratio(sc: Scores) -> dict[str, Any]:
    """Mean batch entropy over the mean of the replicates' batches (1.0 for i.i.d.
    batches, lower when batches cluster a class), and the 90% range of the same
    ratio for a simulated full shuffle."""
    entropy, sim = sc.entropy, sc.entropy_sim
    if entropy is None or sim is None:  # (as np.mean(None) did)
        raise TypeError("entropy_ratio: scores without a stratum have no entropy")
    ref = float(np.mean(sim))
    if ref <= 0:  # one class in every batch: nothing to mix
        return {"loader": float(np.mean(entropy)), "random": ref, "ratio": None}
    sims = np.mean(sim, axis=1) / ref
    lo, hi = (float(v) for v in np.quantile(sims, [0.05, 0.95]))
    return {
        "loader": float(np.mean(entropy)),
        "random": ref,
        "ratio": float(np.mean(entropy)) / ref,
        "full_shuffle": {"p05": lo, "p95": hi},
    }
