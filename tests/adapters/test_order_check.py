"""Before a fit over a stream, the loader's own order is examined (issue 40, item 5): a
label-sorted stream through a small buffer is warned about with the figures and the
fix; a well-shuffled stream, or random access with shuffle, is not."""

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
