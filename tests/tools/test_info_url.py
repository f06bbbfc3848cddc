"""``exactbatch info`` on URLs, against the local S3 server (conftest.py's s3_server):
a sharded dataset (every part checked by ranged reads, a damaged one named, exit 1)
and a single .ndf, with ``--storage-options`` as JSON; what it cannot read there is a
usage error."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import make_data, write_ndf_dataset

from exactbatch import save_ndf
from exactbatch.cli import main

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

SIZES = [6, 0, 9]


@pytest.fixture(scope="module")
def s3(s3_server):
    return s3_server


def info_json(capsys, url, so, *more) -> tuple[int, dict | None, str]:
    code = main(["info", url, "--json", "-q", "--storage-options", json.dumps(so), *more])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_info_checks_every_part_of_a_dataset_at_a_url(s3, capsys):
    url = write_ndf_dataset(f"s3://{s3.bucket}/info/ds", SIZES, d=3, l=1, storage_options=s3.so)
    code, report, _ = info_json(capsys, url, s3.so, "--stats")
    assert code == 0
    assert report["format"] == "dataset" and report["valid"] is True
    assert (report["n"], report["d"], report["l"], report["parts"]) == (15, 3, 1, 3)
    x, y = make_data(15, 3, 1)
    means = [c["mean"] for c in report["stats"]]
    np.testing.assert_allclose(means, np.hstack([x, y]).mean(axis=0))
    name = json.loads(s3.fs.cat_file(f"{s3.bucket}/info/ds/manifest.json"))["parts"][2]["name"]
    s3.fs.rm(f"{s3.bucket}/info/ds/{name}")  # a part goes missing
    code, report, err = info_json(capsys, url, s3.so)
    assert code == 1 and report["valid"] is False and report["bad_parts"] == 1
    assert f"part 2 ({name})" in report["error"] and name in err


def test_info_of_an_ndf_at_a_url(s3, capsys, tmp_path):
    url = f"s3://{s3.bucket}/info/one.ndf"
    save_ndf(tmp_path / "one.ndf", make_data(4, 2, 1))
    s3.fs.put(str(tmp_path / "one.ndf"), f"{s3.bucket}/info/one.ndf")
    code, report, _ = info_json(capsys, url, s3.so)
    assert code == 0 and report["format"] == "ndf" and report["valid"] is True
    assert (report["n"], report["d"], report["l"]) == (4, 2, 1)
    assert report["size_bytes"] == report["expected_bytes"] == 28 + 8 * 4 * 3


def test_what_info_cannot_read_at_a_url_is_a_usage_error(s3, capsys, tmp_path):
    s3.fs.pipe(f"{s3.bucket}/info/notes.txt", b"hello")
    code, _, err = info_json(capsys, f"s3://{s3.bucket}/info/notes.txt", s3.so)
    assert code == 2 and "info reads .ndf files and sharded datasets" in err
    code, _, err = info_json(capsys, f"s3://{s3.bucket}/info/nothing-here", s3.so)
    assert code == 2 and "nothing-here" in err
    code, _, err = info_json(capsys, f"s3://{s3.bucket}/info/notes.txt", {**s3.so, "bogus": 1})
    assert code == 2 and "notes.txt: cannot read it" in err and "--storage-options" in err
    local = tmp_path / "a.ndf"
    save_ndf(local, make_data(2, 1, 0))
    code, _, err = info_json(capsys, str(local), s3.so)
    assert code == 2 and "storage options apply only to URLs" in err


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]"])
def test_storage_options_must_be_a_json_object(bad, capsys):
    assert main(["info", "s3://b/x", "--storage-options", bad]) == 2
    assert "argument --storage-options" in capsys.readouterr().err
