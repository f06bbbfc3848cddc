"""The scores and verdict of exactbatch mixing (mixing_score.py), against references
computed independently: each replicate's batches as ks_distance of a seeded permutation's
rows, entropies by hand, the verdict's threshold, share, ranks and p-value on sets small
enough to work out on paper."""

from __future__ import annotations

import math

import numpy as np
import pytest

from exactbatch import mixing_score
from exactbatch.mixing_score import (
    LEVEL,
    Scores,
    _ranks,
    entropy_codes,
    entropy_ratio,
    score,
    verdict,
)
from exactbatch.tools.mixing import ks_distance


def _data(s=120, c=2, seed=5):
    rng = np.random.default_rng(seed)
    values = np.round(rng.standard_normal((s, c)) * 2)
    values[rng.random((s, c)) < 0.1] = np.nan
    refs = [np.sort(np.round(rng.standard_normal(50) * 2)) for _ in range(c)]
    return values, refs


def _want_ks(values, refs, perm, b):
    """(K, c): ks_distance of each batch of ``values[perm]``, column by column."""
    rows = values[perm]
    k = len(rows) // b
    return np.array(
        [[ks_distance(rows[i * b : (i + 1) * b, j], refs[j]) for j in range(len(refs))]
         for i in range(k)]
    )  # fmt: skip


def _want_entropy(codes, b):
    out = []
    for i in range(len(codes) // b):
        _, counts = np.unique(codes[i * b : (i + 1) * b], return_counts=True)
        p = counts / b
        out.append(-sum(q * math.log(q) for q in p))
    return np.array(out)


def test_each_replicate_is_a_seeded_permutation_of_the_rows_cut_into_batches():
    """Replicate r is row r of ``rng.permuted`` of the rows tiled (one group here), its
    batches scored as ks_distance is; the entropy of each batch by its class counts."""
    values, refs = _data()
    codes = np.arange(120) % 3
    codes[:10] = 4  # classes 0..4, class 3 never present
    sc = score(values, refs, 20, codes, replicates=5, rng=np.random.default_rng(9))
    perms = np.random.default_rng(9).permuted(np.tile(np.arange(120), (5, 1)), axis=1)
    assert sc.ks.shape == (6, 2) and sc.ks_sim.shape == (5, 6, 2)
    np.testing.assert_allclose(sc.ks, _want_ks(values, refs, np.arange(120), 20), atol=1e-12)
    for r in range(5):
        want = _want_ks(values, refs, perms[r], 20)
        np.testing.assert_allclose(sc.ks_sim[r], want, atol=1e-12)
        np.testing.assert_allclose(sc.entropy_sim[r], _want_entropy(codes[perms[r]], 20))
    np.testing.assert_allclose(sc.entropy, _want_entropy(codes, 20))
    assert sc.entropy.shape == (6,) and sc.entropy_sim.shape == (5, 6)
    plain = score(values, refs, 20, replicates=5, rng=np.random.default_rng(9))
    assert plain.entropy is None and plain.entropy_sim is None
    np.testing.assert_array_equal(plain.ks_sim, sc.ks_sim)


def test_replicates_are_scored_in_groups_with_progress(monkeypatch):
    """Groups of _GROUP_ROWS // S replicates (here 2 of 100 rows), each group's
    permutations drawn in turn; done(r) after each group."""
    monkeypatch.setattr(mixing_score, "_GROUP_ROWS", 250)
    values, refs = _data(s=100, c=1)
    codes = (np.arange(100) // 30).astype(np.int64)
    seen = []
    sc = score(
        values, refs, 10, codes, replicates=5, rng=np.random.default_rng(2), done=seen.append
    )
    assert seen == [2, 2, 1]
    rng = np.random.default_rng(2)
    perms = np.concatenate(
        [rng.permuted(np.tile(np.arange(100), (g, 1)), axis=1) for g in (2, 2, 1)]
    )
    for r in range(5):
        np.testing.assert_allclose(sc.ks_sim[r], _want_ks(values, refs, perms[r], 10), atol=1e-12)
        np.testing.assert_allclose(sc.entropy_sim[r], _want_entropy(codes[perms[r]], 10))
    monkeypatch.setattr(mixing_score, "_GROUP_ROWS", 50)  # fewer rows than S: one at a time
    seen.clear()
    score(values, refs, 10, replicates=3, rng=np.random.default_rng(2), done=seen.append)
    assert seen == [1, 1, 1]


def test_scores_of_nans_and_of_an_empty_reference_are_nan():
    values = np.column_stack([np.arange(40.0), np.arange(40.0), np.arange(40.0)])
    values[:10, 0] = np.nan  # batch 0 of column 0: no value
    values[10:15, 0] = np.nan  # batch 1: 5 of 10 values
    refs = [np.arange(40.0), np.empty(0), np.arange(40.0)]
    sc = score(values, refs, 10, replicates=2, rng=np.random.default_rng(0))
    assert np.isnan(sc.ks[0, 0]) and np.all(np.isnan(sc.ks[:, 1]))
    assert np.all(np.isnan(sc.ks_sim[:, :, 1])) and not np.isnan(sc.ks_sim[:, :, 2]).any()
    assert sc.ks[1, 0] == ks_distance(values[10:20, 0], refs[0]) == 0.5  # 15..19 of 0..39
    np.testing.assert_array_equal(sc.ks[:, 2], [0.75, 0.5, 0.5, 0.75])  # 10k..10k+9 of 0..39
    assert ks_distance(np.array([1.0]), np.empty(0)) != ks_distance(np.array([1.0]), np.empty(0))
    assert np.isnan(ks_distance(np.array([np.nan]), np.array([1.0])))


def test_entropy_codes_count_nan_as_a_class_and_refuse_measurements():
    codes, classes = entropy_codes(np.array([2.0, np.nan, 1.0, 2.0, np.nan]), 3)
    np.testing.assert_array_equal(codes, [1, 2, 0, 1, 2])
    np.testing.assert_array_equal(classes, [1.0, 2.0, np.nan])
    assert entropy_codes(np.array([1.0, 2.0, 3.0]), 3)[0] is not None
    none, classes = entropy_codes(np.array([1.0, 2.0, 3.0, 4.0]), 3)
    assert none is None and len(classes) == 4


def _sets(real, sims, entropy=None, entropy_sim=None):
    """Scores of one column from each set's per-batch scores."""
    ks = np.asarray(real, dtype=float)[:, None]
    ks_sim = np.asarray(sims, dtype=float)[:, :, None]
    return Scores(ks, ks_sim, entropy, entropy_sim)


def test_the_verdict_on_a_set_worked_out_by_hand():
    """Pooled scores 0.1 x3, 0.2 x3, 0.3, 0.4, 0.8, 0.9: the 95th percentile (linear)
    0.855; the real share 1/2, every replicate's 0; the real set ranks last of 5."""
    sc = _sets([0.9, 0.8], [[0.1, 0.2], [0.3, 0.1], [0.2, 0.2], [0.4, 0.1]])
    v = verdict(sc)
    assert v["threshold"] == pytest.approx(0.855)
    assert v["share"] == 0.5 and v["p_value"] == 0.2 and v["replicates"] == 4
    assert v["full_shuffle"] == {"p05": 0.0, "median": 0.0, "p95": 0.0}
    assert v["well_mixed"] is True  # p = 0.2 > 0.05: 4 replicates cannot reject
    assert set(v) == {"threshold", "share", "full_shuffle", "p_value", "replicates", "well_mixed"}


def test_the_verdict_rejects_at_exactly_the_level():
    """Real worst of 20 sets: p = 1/20 = LEVEL, not well mixed; one replicate as bad
    (a tie counts against the real set): p = 2/20, well mixed."""
    sims = [[0.1 + 0.01 * r, 0.1] for r in range(19)]
    v = verdict(_sets([0.9, 0.9], sims))
    assert v["p_value"] == LEVEL == 0.05 and v["well_mixed"] is False
    tied = verdict(_sets([0.9, 0.9], [*sims[:18], [0.9, 0.9]]))
    assert tied["p_value"] == 0.1 and tied["well_mixed"] is True
    assert tied["share"] == 0.0  # the threshold is 0.9: nothing above it


def test_the_share_above_the_threshold_ranks_before_the_mean():
    """Replicate shares 0, 0.5, 0.5, 1 and the real 0.5: ties broken by the mean score."""
    sims = [[0.1, 0.1, 0.1, 0.1], [9.0, 0.0, 0.0, 0.0], [9.0, 0.5, 0.1, 0.1], [9.0] * 4]
    v = verdict(_sets([9.0, 0.2, 0.1, 0.1], sims))
    # pooled: 20 values, 9.0 x7: the 95th percentile 9.0, so no share is above it
    assert v["threshold"] == 9.0 and v["share"] == 0.0
    assert v["full_shuffle"] == {"p05": 0.0, "median": 0.0, "p95": 0.0}  # none above it either
    v = verdict(
        _sets([5.0, 0.2, 0.1, 0.1], [[0.1] * 4, [0.2] * 4, [6.0, 0.1, 0.1, 0.3], [0.3] * 4])
    )
    # pooled 95th percentile: between 5.0 and 6.0 (5.05); real share 0, replicate 2's 1/4
    assert v["threshold"] == pytest.approx(5.05) and v["share"] == 0.0
    assert v["full_shuffle"]["p95"] == pytest.approx(0.25 * 0.85)  # 3 zeros, one 0.25
    # real (0, mean 1.35) is worse than every replicate of share 0 (means 0.1, 0.2, 0.3)
    assert v["p_value"] == 0.4


def test_the_class_entropy_makes_a_set_worse_and_only_with_classes():
    """KS: the real set the best of 20 (p = 1). Entropy: the real set the lowest, its
    worse rank the last, shared with the replicate last by KS: p = 2/20. With every
    replicate's entropy 0 (one class), the entropy is not counted."""
    sims = [[0.5 + 0.01 * r, 0.5] for r in range(19)]
    ent_sim = np.tile(np.linspace(1.0, 2.0, 19)[:, None], (1, 2))
    assert verdict(_sets([0.1, 0.1], sims))["p_value"] == 1.0
    v = verdict(_sets([0.1, 0.1], sims, np.array([0.5, 0.5]), ent_sim))
    assert v["p_value"] == pytest.approx(2 / 20)
    high = verdict(_sets([0.1, 0.1], sims, np.array([2.5, 2.5]), ent_sim))
    assert high["p_value"] == 1.0
    one_class = verdict(_sets([0.1, 0.1], sims, np.zeros(2), np.zeros((19, 2))))
    assert one_class["p_value"] == 1.0
    # one class: the real set, worst by KS, is not made to tie with every other set
    one_class = verdict(_sets([0.9, 0.9], sims, np.zeros(2), np.zeros((19, 2))))
    assert one_class["p_value"] == pytest.approx(1 / 20)
    # entropies under one nat (two classes at most ln 2) count as much
    low = verdict(_sets([0.1, 0.1], sims, np.array([0.25, 0.25]), ent_sim / 2))
    assert low["p_value"] == pytest.approx(2 / 20)
    # the real set worst by KS and by entropy: the only one at the last rank
    worst = verdict(_sets([0.9, 0.9], sims, np.array([0.5, 0.5]), ent_sim))
    assert worst["p_value"] == pytest.approx(1 / 20) and not worst["well_mixed"]


def test_the_verdict_of_nan_scores_and_of_no_batch():
    """Every score NaN: no threshold, no share, every set alike (p = 1); a batch of NaN
    left out of its set's mean; no batch at all: the same."""
    nan = verdict(_sets([np.nan, np.nan], [[np.nan, np.nan]] * 3))
    assert nan["threshold"] is None and nan["share"] == 0.0 and nan["p_value"] == 1.0
    part = verdict(_sets([np.nan, 0.9], [[0.1, np.nan], [0.2, 0.1], [0.1, 0.1]]))
    # the pooled scores less NaN: 0.1 x4, 0.2, 0.9: the 95th percentile 0.725
    assert part["threshold"] == pytest.approx(0.725) and part["share"] == 0.5
    assert part["p_value"] == 0.25
    empty = verdict(Scores(np.empty((0, 2)), np.empty((3, 0, 2))))
    assert empty["share"] == 0.0 and empty["threshold"] is None and empty["p_value"] == 1.0
    assert empty["full_shuffle"] == {"p05": 0.0, "median": 0.0, "p95": 0.0}


def test_the_entropy_ratio_and_its_full_shuffle_range():
    sc = Scores(
        np.zeros((2, 1)),
        np.zeros((2, 2, 1)),
        np.array([0.5, 0.5]),
        np.array([[1.0, 1.0], [2.0, 2.0]]),
    )
    e = entropy_ratio(sc)
    assert e["loader"] == 0.5 and e["random"] == 1.5 and e["ratio"] == pytest.approx(1 / 3)
    assert e["full_shuffle"]["p05"] == pytest.approx(0.7)  # of 2/3 and 4/3
    assert e["full_shuffle"]["p95"] == pytest.approx(1.3)
    two = entropy_ratio(
        Scores(np.zeros((2, 1)), np.zeros((2, 2, 1)), np.full(2, 0.1), np.full((2, 2), 0.4))
    )
    assert two["ratio"] == pytest.approx(0.25) and two["random"] == pytest.approx(0.4)
    one = entropy_ratio(
        Scores(np.zeros((2, 1)), np.zeros((2, 2, 1)), np.zeros(2), np.zeros((2, 2)))
    )
    assert one == {"loader": 0.0, "random": 0.0, "ratio": None}
    with pytest.raises(
        TypeError, match=r"^entropy_ratio: scores without a stratum have no entropy$"
    ):
        entropy_ratio(Scores(np.zeros((2, 1)), np.zeros((2, 2, 1))))
    with pytest.raises(TypeError, match=r"^entropy_ratio: scores without a stratum"):
        entropy_ratio(Scores(np.zeros((2, 1)), np.zeros((2, 2, 1)), np.zeros(2)))


def test_sets_rank_by_the_first_key_then_the_second_ties_sharing_the_highest_rank():
    got = _ranks(np.array([0.0, 0.5, 0.5, 0.5]), np.array([9.0, 1.0, 2.0, 1.0]))
    assert got.tolist() == [0, 2, 3, 2]
    # NaN is the best of either key (a set with no score ranks first)
    assert _ranks(np.array([np.nan, 0.0]), np.array([0.0, 0.0])).tolist() == [0, 1]
    assert _ranks(np.array([0.0, 0.0]), np.array([np.nan, -5.0])).tolist() == [0, 1]


def test_a_reference_of_one_value():
    values = np.array([[-1.0], [0.0], [1.0], [2.0], [0.0], [0.0]])
    sc = score(values, [np.array([0.0])], 2, replicates=1, rng=np.random.default_rng(0))
    want = [ks_distance(values[i : i + 2, 0], np.array([0.0])) for i in (0, 2, 4)]
    np.testing.assert_array_equal(sc.ks[:, 0], want)
    assert want == [0.5, 1.0, 0.0]
