"""exactbatch mixing's report (tools/mixing_report.py): the tables ``render`` prints for
a fixed result, line for line, in each of their variants (chunks or row groups, shuffled
or file order, halves, the formats' alternatives, columns skipped, the stratum's line,
either verdict), and what ``public`` leaves out."""

from __future__ import annotations

from typing import Any

from exactbatch.tools.mixing_report import _entropy_lines, public, render


def result(**over: Any) -> dict[str, Any]:
    """A result as mixing() gives it, with round figures."""
    r: dict[str, Any] = {
        "src": "data/sorted.ndf",
        "fmt": "ndf",
        "n": 20000,
        "batch_size": 100,
        "buffer_size": 2000,
        "mixing_window": 1000,
        "halves": True,
        "full_mix_buffer": 20000,
        "full_mix_bytes": 8 * 4 * 20000,
        "skipped_columns": [],
        "chunk_rows": 1000,
        "chunks": 20,
        "shuffle_chunks": True,
        "seed": 3,
        "names": ["x0", "y0"],
        "batches": 200,
        "examined": list(range(0, 200, 2)),
        "travel": {
            "median": 0.01234,
            "q90": 0.05,
            "q99": 0.09876,
            "mean": 0.02,
            "sample_rows": 20000,
            "batch_spread": 9.87,
            "slices": 100,
        },
        "travel_full_shuffle": {
            "median": 0.2929,
            "q90": 0.6838,
            "q99": 0.9,
            "mean": 1 / 3,
            "batch_spread": 63.4,
        },
        "ks": {
            "columns": [
                {
                    "name": "x0",
                    "loader": {"mean": 0.61, "p95": 0.7},
                    "random": {"mean": 0.1, "p95": 0.2},
                },
                {
                    "name": "a_very_long_column_name",
                    "loader": {"mean": None, "p95": None},
                    "random": {"mean": 0.123456, "p95": 0.25},
                },
            ],
            "all": {"loader": {"mean": 0.5, "p95": 0.6}, "random": {"mean": 0.11, "p95": 0.21}},
            "random_band": {"p05": 0.05, "median": 0.1, "p95": 0.2},
            "random_batches": 9900,
            "share_worse_than_random_p95": 0.934,
            "share_full_shuffle": {"p05": 0.02, "median": 0.05, "p95": 0.081},
            "threshold": 0.3,
            "p_value": 0.01,
            "replicates": 99,
        },
        "entropy": {"column": None},
        "well_mixed": False,
        "_plot": {"in": [1], "out": [2]},
    }
    r.update(over)
    return r


# the lines every report shares, between the header and the verdict
MIDDLE = """
What that does to this data: how representative batches are, as the KS distance of a batch
to the whole data (100 of 200 batches), against random batches (the same rows cut into
batches at random, 99 times: 9,900 batches)
  column           loader mean     p95  random mean     p95
  x0                     0.610   0.700        0.100   0.200
  a_very_long_colu           -       -        0.123   0.250
  (mean of cols)         0.500   0.600        0.110   0.210
  batches less representative than 95% of random batches: 93.4%
    (a full shuffle: 2.0% to 8.1% in 90% of 99 simulated ones, median 5.0%)
  class entropy per batch: no stratum (--stratum COLUMN names one)
"""

TRAVEL = """
What the loader does to the file's order (the same for any data laid out alike):
how far rows travel, |position in epoch - position in file| / n (20,000 sampled rows)
                 this loader  full shuffle
  median              0.0123        0.2929
  90%                 0.0500        0.6838
  99%                 0.0988        0.9000
  mean                0.0200        0.3333
"""

CALIBRATED = """\
  calibrated on 99 simulated full shuffles: p = 0.01 (NOT well mixed at p <= 0.05,
  which a full shuffle reaches in at most 5% of seeds)"""


def test_a_report_of_shuffled_chunks_in_halves_not_well_mixed():
    want = (
        "data/sorted.ndf: n=20,000 rows; batch 100; buffer 2,000 rows (mixing window 1,000 "
        "rows); 20 chunks of 1,000 rows in shuffled order; seed 3\n"
        "  this buffer reads ahead in two halves: rows mix within half of it (a window of W "
        "rows takes a buffer of about 2W)\n"
        "  a full mix needs --buffer-size 20,000, the whole data (about 0.6 MiB; a buffer "
        "that holds it is one piece)\n"
        "  or random access, a full shuffle whatever the file order: DataLoader(open_ndf(...))\n"
        + TRAVEL
        + "  batch spread           9.9          63.4   (how many of 100 slices of the file a "
        "batch draws from)\n"
        + MIDDLE
        + "\nverdict: NOT well mixed - batches are not representative of the whole data.\n"
        + CALIBRATED
        + "\n  Shuffle the file once on disk (exactbatch shuffle), or raise --buffer-size."
    )
    assert render(result()) == want


def test_a_report_of_row_groups_in_file_order_well_mixed():
    """Parquet: row groups, the .ndf convert writes named; no batch examined (no
    spread); columns skipped grouped by reason, six named and the rest counted."""
    skipped = [{"name": f"c{i}", "reason": "r1"} for i in range(7)]
    r = result(
        chunk_rows=None,
        chunks=7,
        shuffle_chunks=False,
        fmt="parquet",
        halves=False,
        well_mixed=True,
        travel={**result()["travel"], "batch_spread": None},
        skipped_columns=[*skipped, {"name": "s", "reason": "r2"}],
    )
    want = (
        "data/sorted.ndf: n=20,000 rows; batch 100; buffer 2,000 rows (mixing window 1,000 "
        "rows); 7 row groups in file order; seed 3\n"
        "  a full mix needs --buffer-size 20,000, the whole data (about 0.6 MiB; a buffer "
        "that holds it is one piece)\n"
        "  or random access, a full shuffle whatever the file order: DataLoader(open_ndf(...))\n"
        "    (exactbatch convert writes the .ndf)\n"
        "  columns skipped (r1): c0, c1, c2, c3, c4, c5 and 1 more\n"
        "  columns skipped (r2): s\n"
        + TRAVEL
        + MIDDLE
        + "\nverdict: well mixed - batches look like uniformly random batches\n"
        + CALIBRATED
    )
    assert render(r) == want


def test_a_dataset_report_names_random_access_over_the_dataset():
    """A sharded dataset is .ndf parts already: its alternative is open_ndf_dataset, and
    no conversion is suggested; six columns of one reason are all named."""
    skipped = [{"name": f"c{i}", "reason": "r"} for i in range(6)]
    lines = render(result(fmt="dataset", skipped_columns=skipped)).splitlines()
    assert lines[3] == (
        "  or random access, a full shuffle whatever the file order: "
        "DataLoader(open_ndf_dataset(...))"
    )
    assert lines[4] == "  columns skipped (r): c0, c1, c2, c3, c4, c5"
    assert lines[5] == ""


def test_the_stratum_line_in_each_case():
    assert _entropy_lines({"column": None}) == [
        "  class entropy per batch: no stratum (--stratum COLUMN names one)"
    ]
    skipped = {"column": "id", "classes": 5000, "skipped": "5,000 distinct values"}
    assert _entropy_lines(skipped) == [
        "  class entropy per batch of id: not measured, 5,000 distinct values"
    ]
    one = {"column": "y", "classes": 1, "loader": 0.0, "random": 0.0, "ratio": None}
    assert _entropy_lines(one) == ["  class entropy per batch of y: one class only, nothing to mix"]
    e = {
        "column": "y",
        "classes": 1200,
        "loader": 0.5,
        "random": 1.25,
        "ratio": 0.4,
        "full_shuffle": {"p05": 0.98765, "p95": 1.01234},
    }
    assert _entropy_lines(e) == [
        "  class entropy per batch of y (1,200 classes): 0.4000 of random batches' "
        "(0.500 against 1.250 nats)",
        "    (a full shuffle: 0.9877 to 1.0123; lower: batches cluster a class)",
    ]
    assert "  class entropy per batch of y (1,200 classes)" in render(result(entropy=e))


def test_public_leaves_out_the_plots_arrays():
    r = result()
    out = public(r)
    assert "_plot" not in out and out == {k: v for k, v in r.items() if k != "_plot"}
    assert "_plot" in r  # the result itself is kept whole
