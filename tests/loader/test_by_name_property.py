"""Columns by name, end to end (issue 39, item 6): random column orders, Hive layouts
and vocabularies of mixed dtypes go through ``info --stats`` -> ``Standardize`` /
``categorical=`` -> the loader, and every column the loader hands out is checked, BY
NAME, against a NumPy computation made from the data as generated (never from what
exactbatch reports).

Per example: a few Parquet files, each with the numeric columns in its own random
order (the same order in every file), a categorical column ``k`` that is int64 in
some files and float64 in others (its vocabulary learned across both, equal values
merged: 1 and 1.0 one category), under 0 to 2 levels of Hive folders (``year=`` an
integer key, ``part=`` a string key coded as a category). The loader picks a random
label and a random order of the features.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from exactbatch import DataLoader, Standardize, parquet_source  # noqa: E402
from exactbatch.tools.info import info  # noqa: E402

POOL = ["a", "b", "c", "d"]
K_VALUES = [-1.0, 0.0, 0.5, 1.0, 2.0]  # k's values; 0 and 1 written as ints in int files


@st.composite
def layouts(draw):
    cols = draw(st.permutations(POOL))[: draw(st.integers(2, 4))]
    depth = draw(st.integers(0, 2))
    files = draw(st.integers(1, 4))
    rows = draw(st.lists(st.integers(1, 9), min_size=files, max_size=files))
    int_k = draw(st.lists(st.booleans(), min_size=files, max_size=files))
    years = draw(st.lists(st.integers(2020, 2023), min_size=files, max_size=files))
    parts = draw(st.lists(st.sampled_from(["eu", "us", "x y"]), min_size=files, max_size=files))
    label = draw(st.sampled_from([*cols, None]))
    seed = draw(st.integers(0, 2**16))
    return cols, depth, rows, int_k, years, parts, label, seed


def _path(depth: int, i: int, year: int, part: str) -> str:
    folders = [f"year={year}", f"part={part.replace(' ', '%20')}"][:depth]
    return "/".join([*folders, f"f{i:02d}.parquet"])


@settings(max_examples=20, deadline=None)
@given(layout=layouts())
def test_every_column_by_name_against_numpy(tmp_path_factory, layout):
    cols, depth, rows, int_k, years, parts, label, seed = layout
    root = tmp_path_factory.mktemp("byname")
    rng = np.random.default_rng(seed)
    data: dict[str, list] = {c: [] for c in [*cols, "k", "year", "part"]}
    written = []
    for i, r in enumerate(rows):
        rel = _path(depth, i, years[i], parts[i])
        table = {c: rng.normal(10 * j, 1 + j, r) for j, c in enumerate(cols)}
        k = rng.choice([0.0, 1.0, 2.0] if int_k[i] else K_VALUES, r)
        table["k"] = k.astype(np.int64) if int_k[i] else k
        os.makedirs(root / os.path.dirname(rel) if "/" in rel else root, exist_ok=True)
        pq.write_table(pa.table(table), root / rel)
        written.append((rel, table, years[i], parts[i], r))
    for _rel, table, year, part, r in sorted(
        written, key=lambda w: w[0]
    ):  # the loader's order: sorted paths
        for c in cols:
            data[c].append(table[c])
        data["k"].append(table["k"].astype(np.float64))
        data["year"].append(np.full(r, year, dtype=np.float64))
        data["part"].append(np.full(r, part, dtype=object))
    want = {c: np.concatenate(v) for c, v in data.items()}
    keys = ["year", "part"][:depth]

    # info --stats -> Standardize (the report in JSON, as a user would keep it)
    path = root if len(rows) > 1 or depth else root / written[0][0]
    report = json.loads(json.dumps(info(path, stats=True, bar=False)))
    numeric = [*cols, *[c for c in keys if c == "year"]]
    assert {s["name"] for s in report["stats"]} == {*numeric, "k"}
    labels = [] if label is None else [label]
    features = [c for c in rng.permutation(numeric).tolist() if c not in labels]
    src = parquet_source(path, features=features, labels=labels)
    xs, ys = zip(*DataLoader(src, 7, shuffle=False, transform=Standardize(report)), strict=True)
    x, y = np.concatenate(xs), np.concatenate(ys)
    for j, c in enumerate(features):
        v = want[c]
        expect = v - v.mean() if v.std() == 0 else (v - v.mean()) / v.std()
        np.testing.assert_allclose(x[:, j], expect, rtol=1e-9, atol=1e-9, err_msg=c)
    for j, c in enumerate(labels):
        np.testing.assert_array_equal(y[:, j], want[c])  # labels are not standardised

    # categorical=: k (ints and floats across files) and the string key
    coded = ["k", *[c for c in keys if c == "part"]]
    src = parquet_source(path, features=coded, labels=(), categorical=coded)
    x = np.concatenate([b for b, _ in DataLoader(src, 5, shuffle=False)])
    for j, c in enumerate(coded):
        vocab = sorted(set(want[c].tolist()))  # equal values one entry (1 == 1.0)
        assert src.categories[c] == vocab
        np.testing.assert_array_equal(x[:, j], [vocab.index(v) for v in want[c]], err_msg=c)
