"""What ``categorical=`` costs in ``parquet_source``: the first pass that learns a
vocabulary, and an epoch of row groups with a string column coded against the same
epoch with a numeric column in its place (interleaved rounds, the median printed: this
machine's speed drifts).

    .venv/bin/python bench/bench_categorical.py [--rows 1000000] [--values 1000] [--rounds 5]
        [--clock cpu] [--stream plain|dictionary]

``--stream``: the same table read by ``arrow_source`` as a stream of record batches
(65,536 rows each) instead of a Parquet file, its string column plain or
dictionary-encoded; the vocabulary given as a list of Python strings (the numeric
epoch is the same stream's with the float column in its place). A plain stream also
prints Arrow's own C++ over the same strings: ``pyarrow.compute.index_in`` against
the vocabulary (a lookup a row), and ``dictionary_encode`` of each batch alone.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from exactbatch import arrow_source, parquet_source

_CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = time.perf_counter


def _epoch(src) -> float:
    t = _clock()
    for i in range(len(src)):
        src.read_chunk(i)
    return _clock() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--values", type=int, default=1000, help="distinct values of the column")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--clock",
        choices=sorted(_CLOCK),
        default="wall",
        help="time epochs by the wall clock, or by this process's CPU time (a shared machine)",
    )
    ap.add_argument("--stream", choices=["plain", "dictionary"], default=None)
    a = ap.parse_args()
    global _clock
    _clock = _CLOCK[a.clock]
    rng = np.random.default_rng(0)
    names = np.array([f"city{i:05d}" for i in range(a.values)])
    pick = rng.integers(0, a.values, a.rows)
    table = pa.table(
        {
            "a": rng.standard_normal(a.rows),
            "code": pick.astype(np.float64),
            "city": names[pick],
        }
    )
    if a.stream:
        _stream(a, table, names)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.parquet")
        pq.write_table(table, path, row_group_size=65536)
        learn, plain, coded = [], [], []
        for _ in range(a.rounds):
            t = _clock()
            src = parquet_source(path, features=["a", "city"], categorical=["city"])
            learn.append(_clock() - t)
            num = parquet_source(path, features=["a", "code"])
            plain.append(_epoch(num))
            coded.append(_epoch(src))
    m = np.median
    print(
        f"{a.rows:,} rows, {len(src)} row groups, {a.values} values: first pass "
        f"{m(learn):.3f} s; an epoch of row groups: numeric column {m(plain):.3f} s, "
        f"coded string column {m(coded):.3f} s ({m(coded) / m(plain):.2f}x numeric; the "
        f"first epoch {coded[0]:.3f} s, {coded[0] / plain[0]:.2f}x; "
        f"{a.rows / m(coded) / 1e6:.1f} M rows/s; {a.clock} clock)"
    )


def _stream(a, table: pa.Table, names) -> None:
    """The ``--stream`` epochs: ``arrow_source`` over a reader of the table's batches."""
    if a.stream == "dictionary":
        table = table.set_column(2, "city", table.column("city").dictionary_encode())
    batches = table.to_batches(max_chunksize=65536)

    def reader():
        return pa.RecordBatchReader.from_batches(table.schema, batches)

    vocab = {"city": names.tolist()}  # (Python strings, as a list of them is usually given)
    plain, coded = [], []
    num = arrow_source(reader, features=["a", "code"], labels=())
    t = _clock()
    src = arrow_source(reader, features=["a", "city"], labels=(), categorical=vocab)
    given = _clock() - t
    # Arrow's own C++ over the same string column, no loader: a lookup of each row in the
    # vocabulary (index_in), and the dictionary of each batch alone (dictionary_encode)
    arrow: dict[str, list[float]] = {"index_in": [], "dictionary_encode": []}
    value_set = pa.array(vocab["city"])
    column = [b.column(2) for b in batches]
    calls = {"index_in": lambda c: pc.index_in(c, value_set=value_set)}
    calls["dictionary_encode"] = pc.dictionary_encode
    for _ in range(a.rounds):
        for s_, out in ((num, plain), (src, coded)):
            t = _clock()
            for _chunk in s_:
                pass
            out.append(_clock() - t)
        if a.stream == "plain":
            for name, call in calls.items():
                t = _clock()
                for c in column:
                    call(c)
                arrow[name].append(_clock() - t)
    m = np.median
    print(
        f"{a.rows:,} rows, {len(batches)} batches of an Arrow stream ({a.stream} strings), "
        f"{a.values} values: numeric column {m(plain):.3f} s, coded string column "
        f"{m(coded):.3f} s ({m(coded) / m(plain):.2f}x numeric; the first epoch, its "
        f"vocabulary's index built, {coded[0]:.3f} s; the source built, its vocabulary "
        f"checked, {given:.3f} s; {a.clock} clock)"
    )
    if a.stream == "plain":
        print(
            f"  Arrow's C++ over the same strings: index_in {m(arrow['index_in']):.3f} s, "
            f"dictionary_encode alone {m(arrow['dictionary_encode']):.3f} s"
        )


if __name__ == "__main__":
    main()
