"""A file reached twice by its real path is read once (issue 39, item 6).

Links are followed (a folder of links to shards is a common layout), but a
file reached through a link to a folder it is in, a link to a folder beside
it, a link to the file, or named twice in a list, is read once, at its first
path in sorted order: never its rows twice.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import write_parquet

from exactbatch import open_ndf, parquet_source
from exactbatch.cli import main
from exactbatch.urls import find_files

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")


def test_find_files_lists_a_file_reached_through_a_sibling_link_once(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f.parquet").write_bytes(b"")
    os.symlink(tmp_path / "a", tmp_path / "b")  # a link to a folder beside it
    os.symlink(tmp_path / "a" / "f.parquet", tmp_path / "a" / "g.parquet")  # to the file
    assert find_files(str(tmp_path), "**/*.parquet") == [str(tmp_path / "a" / "f.parquet")]


def test_a_parquet_folder_with_a_sibling_link_reads_its_rows_once(tmp_path):
    pytest.importorskip("pyarrow")
    (tmp_path / "data" / "a").mkdir(parents=True)
    write_parquet(tmp_path / "data" / "a" / "p.parquet", [5, 5])
    os.symlink(tmp_path / "data" / "a", tmp_path / "data" / "b")
    source = parquet_source(tmp_path / "data")
    assert source.n_rows == 10 and len(source.files) == 1
    same = tmp_path / "data" / "a" / "p.parquet"
    assert parquet_source([same, tmp_path / "data" / "b" / "p.parquet"]).n_rows == 10


def test_a_quoted_csv_glob_does_not_follow_a_link_to_its_parent_into_more_files(tmp_path):
    pytest.importorskip("pyarrow")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("u,v\n1,2\n3,4\n")
    os.symlink(tmp_path / "in", tmp_path / "in" / "up")  # a link to its own folder
    out = tmp_path / "out.ndf"
    assert main(["convert", str(tmp_path / "in" / "**" / "*.csv"), str(out), "-q"]) == 0
    f = open_ndf(out)
    assert f.n == 2
    assert np.array_equal(f.read_rows(np.arange(2))[0], [[1, 2], [3, 4]])
