"""NdfFile and NdfDataset pickle by path (issue 30, item 7): a spawned process reopens them
and reads the same rows; data changed between pickling and unpickling is an NdfError,
never other rows read silently."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import re

import numpy as np
import pytest
from helpers import make_data, write_ndf_dataset

from exactbatch import NdfError, open_ndf, open_ndf_dataset, save_ndf

ROWS = np.array([7, 0, 3, 3, 11], dtype=np.int64)


def _read(source):
    """In a spawned process: rows ROWS of the unpickled source."""
    return source.read_rows(ROWS)


@pytest.fixture
def sources(tmp_path):
    x, y = make_data(12, 3, 1)
    save_ndf(tmp_path / "f.ndf", (x, y), features=["a", "b", "c"], labels=["y"])
    ds = write_ndf_dataset(tmp_path / "ds", [5, 0, 7])
    with open_ndf(tmp_path / "f.ndf") as f, open_ndf_dataset(ds) as d:
        yield f, d


def test_they_go_to_a_spawned_process_and_read_the_same_rows(sources):
    """multiprocessing's spawn start method pickles the arguments: the child reopens each
    by its path and reads the rows the parent reads."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        got = pool.map(_read, sources)
    for src, (x, y) in zip(sources, got, strict=True):
        want_x, want_y = src.read_rows(ROWS)
        assert np.array_equal(x, want_x) and np.array_equal(y, want_y)


def test_unpickled_they_keep_names_and_shape(sources):
    f, d = sources
    g, e = pickle.loads(pickle.dumps(f)), pickle.loads(pickle.dumps(d))
    assert (g.path, g.n, g.d, g.l, g.features) == (f.path, f.n, f.d, f.l, f.features)
    assert (e.path, e.n, e.parts, e.max_open_parts) == (d.path, d.n, d.parts, d.max_open_parts)


def test_a_file_changed_since_pickling_is_refused(sources):
    """Rewritten (another size, or only another modification time): NdfError at unpickle."""
    f, _ = sources
    raw = pickle.dumps(f)
    st = os.stat(f.path)
    os.utime(f.path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(NdfError, match="changed between pickling and unpickling"):
        pickle.loads(raw)


def test_a_dataset_rewritten_since_pickling_is_refused(sources, tmp_path):
    _, d = sources
    raw = pickle.dumps(d)
    write_ndf_dataset(tmp_path / "ds", [4, 4])
    with pytest.raises(NdfError, match="changed between pickling and unpickling"):
        pickle.loads(raw)


def test_unpickled_a_dataset_keeps_its_bound_on_open_parts(tmp_path):
    with open_ndf_dataset(write_ndf_dataset(tmp_path / "ds", [2, 2, 2]), max_open_parts=2) as d:
        e = pickle.loads(pickle.dumps(d))
    assert e.max_open_parts == 2
    assert e.read_rows([0, 2, 4])[0][:, 0].tolist() == [0, 2, 4]
    assert len(e.open_parts) == 2


def test_the_refusal_says_what_changed_and_what_to_do(sources, tmp_path):
    _, d = sources
    raw = pickle.dumps(d)
    write_ndf_dataset(tmp_path / "ds", [4, 4])
    want = (
        f"{d.path}: the dataset changed between pickling and unpickling (its manifest "
        "lists other parts, sizes or names now); open it again"
    )
    with pytest.raises(NdfError, match=f"^{re.escape(want)}$"):
        pickle.loads(raw)


def test_a_closed_one_is_not_pickled(sources):
    for src in sources:
        src.close()
        with pytest.raises(ValueError, match="closed"):
            pickle.dumps(src)


def test_a_dataset_opened_by_a_relative_path_unpickles_from_another_folder(tmp_path, monkeypatch):
    """Pickled by its absolute path: a worker started elsewhere finds it."""
    write_ndf_dataset(tmp_path / "ds", [3, 4])
    monkeypatch.chdir(tmp_path)
    with open_ndf_dataset("ds") as d:
        raw = pickle.dumps(d)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    with pickle.loads(raw) as e:
        assert e.path == str(tmp_path / "ds") and e.read_rows([6])[0][0, 0] == 6
