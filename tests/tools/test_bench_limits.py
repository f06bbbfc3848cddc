"""bench/'s limits: the order a limit computes in its timed epoch (baselines.order_draw,
shared by ab_against.py and compare.py) and compare.py's issue-42 table of both limits."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import exactbatch

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        import baselines
        import compare

        yield baselines, compare
    finally:
        sys.path.remove(str(BENCH))


def test_order_draw_held_is_none(bench):
    baselines, _ = bench
    assert baselines.order_draw("none", 100, 8, np.random.default_rng(0), exactbatch) is None


def test_order_draw_keyed_is_each_epochs_keyed_order(bench):
    baselines, _ = bench
    draw = baselines.order_draw("keyed", 1000, 64, np.random.default_rng(0), exactbatch, seed=3)
    first, second = draw(), draw()
    for k, perm in ((1, first), (2, second)):
        assert perm.dtype == np.int32
        want = exactbatch.order.EpochBijection(1000, seed=3, epoch=k).rows(0, 1000)
        np.testing.assert_array_equal(perm, want)
    assert not np.array_equal(first, second)


def test_order_draw_numpy_is_a_permutation(bench):
    baselines, _ = bench
    perm = baselines.order_draw("numpy", 500, 64, np.random.default_rng(0))()
    assert perm.dtype == np.int32
    np.testing.assert_array_equal(np.sort(perm), np.arange(500))


def test_order_draw_refusals(bench):
    baselines, _ = bench
    with pytest.raises(ValueError, match="kind must be one of"):
        baselines.order_draw("sorted", 10, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="needs eb"):
        baselines.order_draw("keyed", 10, 2, np.random.default_rng(0))


def _run(tool, b, rate):
    return {"tool": tool, "batch": b, "rows_per_s": rate}


def test_handout_table_gives_both_limits_side_by_side(bench):
    _, compare = bench
    n = 6400  # 100 batches of 64
    results = [
        _run("c_limit", 64, n / 100e-6),  # 1 us a batch
        _run("c_limit_order", 64, n / 200e-6),  # 2 us a batch
        _run("eb_mem_next_into", 64, n / 250e-6),  # 2.5 us a batch
    ]
    table = compare.handout_table_42(results, n, [64])
    assert len(table) == 3
    row = table[2]
    assert row.startswith("| 64 | `next_into` | 1.00 µs | 2.00 µs | 2.50 µs | 0.40× | 0.80× |")
    assert row.endswith("| +1.50 µs | +0.50 µs |")
    lines = compare.checks_42(results, n, [64])
    assert any("c_limit_order at batch 64: 0.80×" in t and t.startswith("PASS") for t in lines)
    assert any("+0.50 µs a batch above the C limit+order" in t for t in lines)
    # without the charged limit, no table
    assert compare.handout_table_42(results[:1] + results[2:], n, [64]) == []


@pytest.mark.parametrize(("rows", "b", "size"), [(1000, 64, 300), (1000, 64, 1000), (130, 50, 64)])
def test_buffer_shuffled_hands_out_every_row_once_in_batches_of_b(bench, rows, b, size):
    """compare.buffer_shuffled, a shuffled stream's baseline: every row of the batches
    once, in batches of b (the last partial), mixed, the buffer's leftovers kept."""
    pa = pytest.importorskip("pyarrow")
    from exactbatch.sources.arrow import fill_columns

    _, compare = bench
    ids = np.arange(rows, dtype=np.float64)
    table = pa.table({f"c{j}": ids + 0.25 * j for j in range(compare.D + compare.L)})
    seen = []

    def make():  # record batches of 70 rows, as a library's
        return table.to_batches(max_chunksize=70)

    run = compare.buffer_shuffled(make, table.column_names, b, size, fill_columns, seen)
    assert run(0) == rows
    assert [len(s) for s in seen[:-1]] == [b] * (len(seen) - 1) and 0 < len(seen[-1]) <= b
    got = np.concatenate(seen)
    np.testing.assert_array_equal(np.sort(got[:, 0]), ids)  # each row once
    np.testing.assert_array_equal(got[:, 3] - got[:, 0], 0.75)  # whole rows
    assert not np.array_equal(got[:, 0], ids)  # mixed


def test_the_proposed_reading_is_checked_apart(bench):
    _, compare = bench
    results = [
        _run("arrow_stream_lib", 4096, 20e6),
        _run("arrow_stream_lib_shuf", 4096, 8e6),
        _run("eb_arrow_stream_shuf", 4096, 7e6),
    ]
    issue = compare.checks_42(results, 4096, [4096])
    assert issue == [
        "FAIL  eb_arrow_stream_shuf / arrow_stream_lib at batch 4096: 0.35× "
        "(7.00 M / 20.00 M rows/s; target ≥ 0.8×)"
    ]
    proposed = compare.checks_42(results, 4096, [4096], compare.TARGETS_42_PROPOSED)
    assert proposed == [
        "PASS  eb_arrow_stream_shuf / arrow_stream_lib_shuf at batch 4096: 0.88× "
        "(7.00 M / 8.00 M rows/s; target ≥ 0.8×)"
    ]
