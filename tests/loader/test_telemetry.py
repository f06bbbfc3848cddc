"""``DataLoader.stats()``, ``step()`` and ``progress=``: where a loader's time goes.

Counts are exact (rows, batches and bytes are what was handed out, whatever the
threads); timings are only checked for presence and order, never for values.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import chunks_of, make_data, make_source
from laws import run_threads

from exactbatch import DataLoader, ndf_blocks, open_ndf, save_ndf
from exactbatch.loader.telemetry import percentile_ns

N, D, L, B = 1000, 3, 1, 64


def _nbytes(batch) -> int:
    return sum(a.nbytes for a in batch)


def _source(kind, tmp_path):
    x, y = make_data(N, D, L)
    if kind == "stream":
        chunks = chunks_of([100] * 10, D, L)
        return lambda: iter(chunks)
    if kind == "blocks":
        path = str(tmp_path / "blocks.ndf")
        save_ndf(path, (x, y))
        return ndf_blocks(open_ndf(path), 128)
    return make_source(kind, x, y, tmp_path)


KINDS = ["pair", "ndf", "stream", "blocks"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("with_rows", [False, True])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_iter_counts_exactly_the_rows_and_bytes_handed_out(kind, with_rows, prefetch, tmp_path):
    """Over two epochs, stats() counts the rows, batches and bytes of the batches
    iter() handed out (the epoch's and the run's), and the reads of the source."""
    loader = DataLoader(
        _source(kind, tmp_path), B, seed=1, with_rows=with_rows, prefetch=prefetch,
        total_size=N,
    )  # fmt: skip
    run_rows = run_bytes = run_batches = 0
    for e in range(2):
        batches = list(loader)
        rows, nbytes = sum(len(b[0]) for b in batches), sum(_nbytes(b) for b in batches)
        run_rows, run_bytes = run_rows + rows, run_bytes + nbytes
        run_batches += len(batches)
        s = loader.stats()
        assert (s["epoch"]["epoch"], s["epoch"]["rows"], s["epoch"]["bytes"]) == (e, N, nbytes)
        assert s["epoch"]["batches"] == len(batches) == -(-N // B)
        assert (s["run"]["rows"], s["run"]["bytes"]) == (run_rows, run_bytes)
        assert (s["run"]["batches"], s["run"]["epochs"]) == (run_batches, e + 1)
        assert 1 <= s["epoch"]["reads"] <= s["run"]["reads"]
        assert s["run"]["reads"] > s["epoch"]["reads"] or e == 0
        assert s["prefetch"] == prefetch
        if prefetch:
            assert s["epoch"]["prefetch_asked"] >= 1
    if kind == "blocks":  # a chunk source: one read a chunk (8 chunks of 128 rows), no more
        assert s["epoch"]["reads"] == 8 and s["run"]["reads"] == 16
    json.dumps(s)  # plain data
    loader.close()


@pytest.mark.parametrize("kind", KINDS)
def test_next_into_from_threads_counts_exactly(kind, tmp_path):
    """Four threads draining one loader with next_into: the rows and bytes counted are
    those written, and every batch's read is counted once (random access)."""
    loader = DataLoader(_source(kind, tmp_path), B, seed=2, total_size=N)
    written = [[0, 0] for _ in range(4)]

    def work(i):
        bx, by = np.empty((B, D)), np.empty((B, L))
        while k := loader.next_into(bx, by):
            written[i][0] += k
            written[i][1] += 1

    run_threads(work, 4)
    s = loader.stats()["epoch"]
    assert s["rows"] == sum(w[0] for w in written) == N
    assert s["batches"] == sum(w[1] for w in written)
    assert s["bytes"] == N * 8 * (D + L)
    if kind in ("pair", "ndf"):
        assert s["reads"] == s["batches"]  # each next_into reads its batch
        assert 0 < s["read_s"] <= s["wait_s"]  # each read a wait (the last 0's wait not)
    assert s["wait_s"] > 0


def test_a_resumed_loader_counts_only_its_own_hand_outs():
    """A loader restored mid-epoch counts the batches it handed out, not the state's."""
    x, y = make_data(N, D, L)
    first = DataLoader((x, y), B, seed=3)
    it = iter(first)
    for _ in range(5):
        next(it)
    assert first.stats()["epoch"]["rows"] == 5 * B
    state = first.state_dict()
    assert "stats" not in json.dumps(state)  # not part of a state
    second = DataLoader((x, y), B, seed=3)
    second.load_state_dict(state)
    rest = list(second)
    s = second.stats()
    assert s["epoch"]["rows"] == N - 5 * B == sum(len(b[0]) for b in rest)
    assert s["run"]["rows"] == N - 5 * B and s["run"]["epochs"] == 1


def test_a_fresh_loader_reports_zeros_and_no_percentiles():
    s = DataLoader(make_data(10, 2, 1), 4).stats()
    for part in ("epoch", "run"):
        assert (s[part]["rows"], s[part]["batches"], s[part]["bytes"]) == (0, 0, 0)
        assert s[part]["read_latency_s"] == {"p50": None, "p90": None, "p99": None}
        assert s[part]["stall_fraction"] is None and s[part]["steps"] == 0
    assert s["run"]["epochs"] == 0


def test_label_dtype_and_float32_bytes():
    """Bytes are a row's x, y and (with_rows) ids at the batches' own dtypes."""
    x, y = make_data(100, 4, 1)
    y = np.floor(y) % 3
    loader = DataLoader((x, y), 8, dtype=np.float32, label_dtype=np.int64)
    batches = list(loader)
    assert loader.stats()["epoch"]["bytes"] == sum(_nbytes(b) for b in batches) == 100 * 24


def test_steps_give_a_stall_fraction_per_epoch_and_run():
    """step() between batches: steps count the intervals between marks; the stall
    fraction is a share of their time."""
    loader = DataLoader(make_data(N, D, L), B, prefetch=0)
    for _ in range(2):
        loader.step()
        for _ in loader:
            loader.step()
    s = loader.stats()
    assert s["epoch"]["steps"] == -(-N // B)  # (the step between epochs: the first's)
    assert s["run"]["steps"] == 2 * -(-N // B) + 1
    for part in ("epoch", "run"):
        assert 0 <= s[part]["stall_fraction"] and s[part]["step_s"] > 0


def test_progress_is_called_at_each_epochs_end_with_the_stats():
    seen = []
    loader = DataLoader(make_data(N, D, L), B, progress=seen.append, progress_every=3600)
    for _ in range(2):
        for _ in loader:
            pass
    assert [s["epoch"]["rows"] for s in seen] == [N, N]
    assert [s["run"]["rows"] for s in seen] == [N, 2 * N]
    bx, by = np.empty((B, D)), np.empty((B, L))
    loader.reset()
    while loader.next_into(bx, by):
        pass
    assert len(seen) == 3 and seen[-1]["epoch"]["rows"] == N


def test_progress_every_tiny_reports_during_the_epoch():
    seen = []
    loader = DataLoader(make_data(N, D, L), 8, progress=seen.append, progress_every=1e-9)
    bx, by = np.empty((8, D)), np.empty((8, L))
    while loader.next_into(bx, by):
        pass
    assert len(seen) > 2 and seen[-1]["epoch"]["rows"] == N


@pytest.mark.parametrize("bad", [1, "log", [print]])
def test_progress_must_be_callable(bad):
    with pytest.raises(TypeError, match="progress"):
        DataLoader(make_data(10, 2, 1), 4, progress=bad)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "1", True, None])
def test_progress_every_must_be_seconds_above_zero(bad):
    with pytest.raises(ValueError, match="progress_every"):
        DataLoader(make_data(10, 2, 1), 4, progress=print, progress_every=bad)


@pytest.mark.parametrize("ns", [0, 1, 15, 16, 17, 1000, 123_456, 10**9 + 7, 2**40 + 3])
def test_a_percentile_is_within_its_bucket_of_the_true_value(ns):
    """A histogram of one latency gives it back within 1/16 (its bucket's half-width)."""
    from exactbatch.loader.telemetry import _bucket

    hist = np.zeros(64 * 8, dtype=np.int64)
    hist[_bucket(ns)] += 1
    got = percentile_ns(hist, 50)
    assert got is not None and abs(got - ns) <= ns / 16 + 0.5


def test_percentiles_of_a_known_spread():
    from exactbatch.loader.telemetry import _bucket

    hist = np.zeros(64 * 8, dtype=np.int64)
    for v in range(1, 101):  # 1..100 us
        hist[_bucket(v * 1000)] += 1
    p50, p90, p99 = (percentile_ns(hist, q) for q in (50, 90, 99))
    assert p50 is not None and p90 is not None and p99 is not None
    assert p50 <= p90 <= p99
    assert abs(p50 - 50_000) <= 50_000 / 16 and abs(p99 - 99_000) <= 99_000 / 16
    assert percentile_ns(np.zeros(8, dtype=np.int64), 50) is None


def test_a_running_torch_profiler_sees_the_waits_as_ranges():
    """Under torch.profiler, each wait of iter() is an ``exactbatch.wait`` range; with
    no profiler running, no range is made."""
    torch = pytest.importorskip("torch")
    from exactbatch.loader.telemetry import profiled

    assert profiled() is None
    loader = DataLoader(make_data(N, D, L), B)
    with torch.profiler.profile() as prof:
        batches = list(loader)
    waits = [e for e in prof.events() if e.name == "exactbatch.wait"]
    assert len(batches) == 16 and len(waits) >= 1


def test_the_bucket_table_is_the_bucket_of_every_ns_below_it():
    """next_into's reads index a table (not the formula): the same bucket for every ns."""
    from exactbatch.loader.telemetry import _BUCKET_OF, _TABLE, _bucket

    assert len(_BUCKET_OF) == _TABLE
    assert list(_BUCKET_OF) == [_bucket(ns) for ns in range(_TABLE)]


def test_a_wait_that_reads_counts_as_a_wait_and_a_read_a_plain_wait_as_a_wait():
    """waited(t0, True), a gather's wait, is in wait_s and read_s alike, one read of
    the histogram; waited(t0) in wait_s only; read(t0) in read_s only."""
    from time import perf_counter_ns

    from exactbatch.loader.telemetry import Telemetry

    def report(tel):
        return tel.report({"rows": 0, "batches": 0}, {"rows": 0, "batches": 0}, 8, 0)["run"]

    tel = Telemetry(gathers=True)
    for _ in range(3):
        tel.waited(perf_counter_ns() - 200_000, True)  # 200 us and more: past the table
        tel.waited(perf_counter_ns() - 5_000, True)
    r = report(tel)
    assert r["reads"] == 6 and r["wait_s"] == r["read_s"] >= 3 * 205e-6
    assert r["read_latency_s"]["p50"] is not None
    tel.waited(perf_counter_ns() - 1_000_000)  # a plain wait: 1 ms more waited, no read
    tel.read(perf_counter_ns() - 10**12)  # a stream's read: 1000 s more read, no wait
    r2 = report(tel)
    assert r2["reads"] == 7
    assert 1e-3 <= r2["wait_s"] - r["wait_s"] < 100  # (not the read's 1000 s)
    assert r2["read_s"] - r["read_s"] >= 1000
    assert r2["read_latency_s"]["p99"] >= 1000 * (1 - 1 / 16)
    streamed = Telemetry(gathers=False)  # a stream's waits are not its reads
    streamed.waited(perf_counter_ns() - 5_000, True)
    r3 = report(streamed)
    assert r3["reads"] == 0 and r3["read_s"] == 0 and r3["wait_s"] >= 5e-6
