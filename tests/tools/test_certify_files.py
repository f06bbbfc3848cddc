"""``exactbatch certify``'s reading of state files (exactbatch.tools.certify) called
directly: the layouts of a file, what is refused and how an error names its file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from exactbatch import DataLoader
from exactbatch.tools.certify import certify_files, public
from exactbatch.tools.common import CliError


def states(num_shards: int = 2) -> list[dict]:
    out = []
    for s in range(num_shards):
        loader = DataLoader(np.arange(100.0)[:, None], 16, num_shards=num_shards, shard_index=s)
        for _ in loader:
            pass
        out.append(json.loads(json.dumps(loader.state_dict())))
    return out


def write(path, doc) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def refusal(paths, from_none: bool = False) -> str:
    with pytest.raises(CliError) as e:
        certify_files(paths)
    assert e.value.__suppress_context__ is from_none  # raised from None: one line
    return str(e.value)


def test_each_layout_of_a_file_is_read(tmp_path):
    a, b = states()
    one = write(tmp_path / "a.json", a)
    both = write(tmp_path / "both.json", [a, b])
    ckpt = write(tmp_path / "ckpt.json", {"loader": b, "step": 3})
    assert certify_files([both])
    assert certify_files([one, ckpt])
    assert not certify_files([one])  # half the rows
    assert not certify_files([ckpt])


def test_public_is_the_certificate_as_json(tmp_path):
    a, b = states()
    cert = certify_files([write(tmp_path / "a.json", a)])
    out = public(cert)
    assert out["certified"] is False and out["set_aside"] == list(cert.set_aside)
    assert len(out["epochs"]) == 1 and out["epochs"][0]["missing"] == 50
    assert json.loads(json.dumps(out)) == out
    out = public(certify_files([write(tmp_path / "both.json", [a, b])]))
    assert out["certified"] is True and out["epochs"][0]["missing"] == 0


def test_what_is_not_json_is_refused_with_its_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n"version": 2,\n oops}')
    assert refusal([str(path)], from_none=True) == (
        f"{path}: not JSON (Expecting property name enclosed in double quotes at line 3)"
    )


@pytest.mark.parametrize(
    "doc",
    [
        {"weights": [1]},
        [],
        [{"version": 2}, 3],
        [{"version": 2}, {"history": []}],
        {"loader": [{"version": 2}]},  # a list under "loader" is no state
        7,
    ],
)
def test_what_holds_no_state_is_refused(tmp_path, doc):
    path = write(tmp_path / "x.json", doc)
    assert refusal([path]) == (
        f"{path}: expected a DataLoader state (a JSON object from state_dict()), a list "
        'of them, or an object holding one under "loader"'
    )


def test_an_error_about_one_state_names_its_file_and_place(tmp_path):
    a, b = states()
    good = write(tmp_path / "good.json", a)
    broken = dict(b)
    del broken["history"]
    single = write(tmp_path / "one.json", broken)
    several = write(tmp_path / "several.json", [a, broken])
    why = "it was taken by an exactbatch before certify, or is not a DataLoader state"
    assert refusal([good, single], True) == f"{single}: the state has no 'history': {why}"
    assert refusal([several], True) == (
        f"{several} (its state 1): the state has no 'history': {why}"
    )


def test_a_folder_or_a_fifo_is_refused_as_no_state(tmp_path):
    from helpers import fifo

    from exactbatch.errors import NdfError

    with pytest.raises(IsADirectoryError) as e:
        certify_files([str(tmp_path)])
    assert "expected a DataLoader state (JSON), found a folder" in str(e.value)
    with fifo(tmp_path / "pipe.json") as p, pytest.raises(NdfError) as e:
        certify_files([str(p)])
    assert "a DataLoader state (JSON)" in str(e.value) and "FIFO" in str(e.value)
