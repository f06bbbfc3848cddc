"""Before a fit over a stream, the loader's own order is examined (issue 40, item 5): a
label-sorted stream through a small buffer is warned about with the figures and the
fix; a well-shuffled stream, or random access with shuffle, is not."""

import sys
import warnings

import numpy as np
import pytest

from exactbatch import DataLoader, MixingWarning
from exactbatch.adapters.order_check import READ_ROWS, check_order, examine

N, B = 1024, 32


def _stream(order, labels, buffer_size=64, seed=0, rows=N):
    """Chunks of 32 rows in ``order``, through a shuffle buffer of ``buffer_size`` rows."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((rows, 3))
    y = labels(x, rng)
    xs, ys = x[order], y[order]
    chunks = [(xs[i : i + 32], ys[i : i + 32]) for i in range(0, rows, 32)]
    return DataLoader(
        chunks, B, seed=seed, drop_last=True, total_size=rows, buffer_size=buffer_size
    )


def _continuous(x, rng):
    return x @ np.array([1.0, -2.0, 0.5]) + rng.standard_normal(len(x))


def _classes(x, rng):
    return (x[:, 0] > 0).astype(np.float64)


def _by_label(labels):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((N, 3))
    return np.argsort(labels(x, rng), kind="stable")


@pytest.mark.parametrize("labels", [_continuous, _classes])
def test_a_label_sorted_stream_through_a_small_buffer_warns(labels):
    """Rows sorted by the label (a continuous one: the KS distance of the label column;
    two classes: their entropy too), a buffer of 64 rows: every batch holds a slice of
    the labels, and the warning names the figures, the window and the fix."""
    loader = _stream(_by_label(labels), labels)
    with pytest.warns(MixingWarning, match=r"not well mixed: of 32 batches .* 100% of them") as w:
        v = check_order(loader, "fit")
    text = str(w[0].message)
    assert "window of 64 rows of 1024" in text and "exactbatch shuffle" in text
    assert "buffer_size" in text and v["p_value"] == pytest.approx(0.01)
    if labels is _classes:
        assert v["entropy"]["ratio"] < 0.2 and "class entropy" in text
    # the fit's first batch is the one it would have been
    fresh = _stream(_by_label(labels), labels)
    np.testing.assert_array_equal(next(iter(loader))[0], next(iter(fresh))[0])


def test_a_buffer_of_half_the_rows_sorted_by_a_continuous_label_warns():
    """A window of half the data is still a slice of it per batch (20,000 rows sorted
    by a continuous label through a buffer of 10,000 fitted 6.8 sd off, silently): the
    same at 1,024 rows and a buffer of 512, warned with its window."""
    loader = _stream(_by_label(_continuous), _continuous, buffer_size=N // 2)
    assert loader.mixing_window < N
    with pytest.warns(MixingWarning, match=r"window of 512 rows of 1024"):
        v = check_order(loader, "fit")
    assert v["p_value"] == pytest.approx(0.01)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_well_shuffled_stream_does_not_warn(seed):
    """The same rows in a random order, the same small buffer: quiet (fixed seeds; a
    well-shuffled stream is warned about in at most 1% of seeds by construction)."""
    order = np.random.default_rng(seed).permutation(N)
    for labels in (_continuous, _classes):
        with warnings.catch_warnings():
            warnings.simplefilter("error", MixingWarning)
            v = check_order(_stream(order, labels, seed=seed), "fit")
        assert v is not None and v["p_value"] > 0.01


def test_a_full_shuffle_is_not_examined():
    """Random access with shuffle (or a buffer that holds the data) mixes the whole data:
    nothing to examine, nothing read."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, 3))
    assert examine(DataLoader((x, np.sort(x[:, 0])), B, seed=0, drop_last=True)) is None
    whole = _stream(_by_label(_continuous), _continuous, buffer_size=2 * N)
    assert whole.mixing_window >= N and examine(whole) is None


def test_unsorted_random_access_without_shuffle_is_examined():
    """shuffle=False reads in file order (window 1): sorted rows are caught there too."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, 3))
    loader = DataLoader((x, np.sort(x[:, 0])), B, shuffle=False, drop_last=True)
    with pytest.warns(MixingWarning):
        check_order(loader, "fit")


def test_the_cost_is_bounded():
    """At most READ_ROWS rows are read and 32 batches kept, spread over what is read."""
    rows = 1 << 14
    loader = _stream(np.arange(rows), _continuous, rows=rows)
    v = examine(loader)
    assert v["batches"] == 32 and READ_ROWS >= rows


def test_fit_examines_the_stream_before_its_first_step():
    """numpyro.fit over the label-sorted stream warns before stepping (it fitted 6 sd off,
    silently); over the shuffled one it does not."""
    jax = pytest.importorskip("jax")
    numpyro = pytest.importorskip("numpyro")
    import numpyro.distributions as dist
    from numpyro.infer.autoguide import AutoNormal

    from exactbatch.numpyro import fit

    def model(xb, yb, N):  # noqa: N803
        w = numpyro.sample("w", dist.Normal(0, 1).expand([xb.shape[1]]).to_event(1))
        with numpyro.plate("data", N, subsample_size=xb.shape[0]):
            numpyro.sample("obs", dist.Normal(xb @ w, 1), obs=yb[:, 0])

    def run(loader):
        return fit(model, AutoNormal(model), loader, 3, optim=numpyro.optim.Adam(0.01),
                   rng_key=jax.random.key(0), N=N)  # fmt: skip

    with pytest.warns(MixingWarning, match="not well mixed"):
        run(_stream(_by_label(_continuous), _continuous))
    with warnings.catch_warnings():
        warnings.simplefilter("error", MixingWarning)
        run(_stream(np.random.default_rng(0).permutation(N), _continuous))


class _Batches:
    """A loader's stand-in for the examination: ``count`` batches of ``b`` rows (or
    ``rows`` rows each), batch k's features k plus their column's number (``nans``: the
    second all NaN), labels -k-1 (or ``labels``: None, or a width); it counts the batches
    read."""

    def __init__(self, b, count, d=3, rows=None, labels=1, window=64, nans=False):
        self.batch_size, self.count, self.d, self.nans = b, count, d, nans
        self.rows, self.labels, self.reads = rows or b, labels, 0
        self.total_size, self.mixing_window = b * count, window

    def __len__(self):
        return self.count

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass

    def __iter__(self):
        for k in range(self.count):
            self.reads += 1
            x = k + np.zeros((self.rows, self.d)) + np.arange(self.d)
            if self.nans:
                x[:, 1] = np.nan
            y = None if self.labels is None else np.full((self.rows, self.labels), -k - 1.0)
            yield x, y


def _examined(monkeypatch, loader):
    """examine's verdict, and the rows it scored."""
    from exactbatch.adapters import order_check

    seen = []
    score = order_check.score

    def spy(values, *args, **kwargs):
        seen.append(values.copy())
        return score(values, *args, **kwargs)

    monkeypatch.setattr(order_check, "score", spy)
    return examine(loader), (seen[0] if seen else None)


def test_the_batches_examined_are_spread_over_what_is_read(monkeypatch):
    """8192 rows kept at most: 2 batches of 3000 of the 10 ahead, the first and the
    sixth (spread), their features and their labels; no further batch read."""
    loader = _Batches(3000, 10)
    v, values = _examined(monkeypatch, loader)
    assert v["batches"] == 2 and v["columns"] == 4 and "entropy" in v  # 3 features, 1 class
    np.testing.assert_array_equal(np.unique(values[:, 0]), [0, 5])
    np.testing.assert_array_equal(np.unique(values[:, 3]), [-6, -1])
    assert loader.reads == 7
    many = _Batches(256, 1000)  # 32 batches kept of the 1000 ahead (1 in 32)
    v, values = _examined(monkeypatch, many)
    assert v["batches"] == 32 and many.reads == 31 * 32 + 2
    np.testing.assert_array_equal(np.unique(values[:, 0]), np.arange(0, 1000, 32))


def test_short_batches_are_not_examined_and_reading_stops_at_its_bound():
    for b in (1 << 16, 1 << 19):  # READ_ROWS // b batches ahead (at least one)
        loader = _Batches(b, 100, rows=5)
        assert examine(loader) is None
        assert loader.reads == max(READ_ROWS // b, 1) + 1  # the one past the bound, unused


def test_the_features_examined_are_spread_over_the_columns(monkeypatch):
    v, values = _examined(monkeypatch, _Batches(100, 4, d=20))
    assert values[0, :8].tolist() == [0, 3, 5, 8, 11, 14, 16, 19]  # first and last kept
    assert v["columns"] == 9
    v, values = _examined(monkeypatch, _Batches(100, 4, d=2))
    assert values[0, :2].tolist() == [0, 1] and v["columns"] == 3  # every feature of 2


def test_a_feature_of_nans_only_is_examined_quietly():
    """A column of NaNs scores NaN: no warning of NumPy's reaches the fit."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v = examine(_Batches(100, 4, nans=True))
    assert v is not None and v["columns"] == 4


@pytest.mark.parametrize("labels", [None, 0])
def test_a_loader_without_labels_is_examined_on_its_features(monkeypatch, labels):
    v, values = _examined(monkeypatch, _Batches(100, 4, labels=labels))
    assert v["columns"] == 3 and values.shape == (400, 3) and "entropy" not in v


def test_the_examination_is_the_same_every_time():
    order = np.random.default_rng(7).permutation(N)
    first = examine(_stream(order, _continuous))
    assert examine(_stream(order, _continuous)) == first


def test_the_warning_needs_every_random_cut_better_and_points_at_the_fit(monkeypatch):
    from exactbatch.adapters import order_check

    loader = _Batches(100, 4, window=None)
    verdict = {"p_value": 0.02, "replicates": 99, "share": 1.0, "batches": 2}
    monkeypatch.setattr(order_check, "examine", lambda loader: dict(verdict))
    with warnings.catch_warnings():
        warnings.simplefilter("error", MixingWarning)
        check_order(loader, "fit")  # 2 of 100 cuts as bad: no warning

    def fit():
        check_order(loader, "fit")  # the warning points at fit's caller

    verdict["p_value"] = 0.01
    with pytest.warns(MixingWarning, match="within a window of unknown rows of 400") as got:
        fit()
    if "mutmut" not in sys.modules:  # (under make mutants, trampolines add frames)
        assert got[0].filename == __file__
