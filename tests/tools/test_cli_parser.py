"""What the `exactbatch` command's parser makes of a command line: each subcommand's
defaults, each option's type and name, and the function that runs it. (What `--help`
shows is pinned by test_cli_help.py.)"""

from __future__ import annotations

import pytest

from exactbatch import __version__, cli
from exactbatch.cli import _parser, main

COMMON = {"quiet": False, "json": False, "debug": False}


def parsed(*argv: str) -> dict:
    return vars(_parser().parse_args(list(argv)))


def test_each_commands_defaults():
    """The namespace of each subcommand given only what it requires: every default."""
    assert parsed("info", "x.ndf") == {
        **COMMON,
        "command": "info",
        "run": cli._info,
        "path": "x.ndf",
        "stats": False,
        "storage_options": None,
    }
    assert parsed("convert", "a.csv", "b.ndf") == {
        **COMMON,
        "command": "convert",
        "run": cli._convert,
        "src": ["a.csv"],
        "dst": "b.ndf",
        "features": None,
        "labels": None,
        "exclude": None,
        "categorical": None,
        "part_rows": None,
        "force": False,
        "delimiter": None,
        "no_header": False,
        "row_group_rows": 65536,
        "names": None,
    }
    assert parsed("shuffle", "a.ndf", "b.ndf") == {
        **COMMON,
        "command": "shuffle",
        "run": cli._shuffle,
        "src": "a.ndf",
        "dst": "b.ndf",
        "part_rows": None,
        "seed": 0,
        "memory": 2**30,  # 1GB, binary
        "tmp_dir": None,
        "force": False,
    }
    assert parsed("mixing", "a.ndf", "--batch-size", "4") == {
        **COMMON,
        "command": "mixing",
        "run": cli._mixing,
        "src": "a.ndf",
        "storage_options": None,
        "batch_size": 4,
        "buffer_size": None,
        "chunk_rows": None,
        "shuffle_chunks": True,
        "seed": 0,
        "columns": None,
        "stratum": None,
        "plot": None,
        "max_batches": 500,
        "sample_rows": 20000,
        "replicates": 99,
    }
    assert parsed("bench", "a.ndf") == {
        **COMMON,
        "command": "bench",
        "run": cli._bench,
        "src": "a.ndf",
        "features": None,
        "labels": None,
        "storage_options": None,
        "batch_sizes": [64, 1024, 4096],
        "shuffle": True,
        "seed": 0,
        "buffer_size": None,
        "max_rows": None,
    }
    assert parsed("certify", "s.json") == {
        **COMMON,
        "command": "certify",
        "run": cli._certify,
        "states": ["s.json"],
    }


def test_each_option_given_is_parsed_to_its_type():
    """Every option of every subcommand given: its value, converted (sizes to bytes, lists
    to integers, JSON to a dict, `\\t` to a tab), under its name."""
    opts = {"storage_options": {"anon": True}, "quiet": True, "json": True, "debug": True}
    common = ["-q", "--json", "--traceback", "--storage-options", '{"anon": true}']
    assert parsed("info", "x.ndf", "--stats", *common) == {
        **opts,
        "command": "info",
        "run": cli._info,
        "path": "x.ndf",
        "stats": True,
    }
    argv = ["a.csv", "b.csv", "c.ndf", "--features", "f", "--labels", "y", "--exclude", "i"]
    argv += ["--categorical", "k", "--part-rows", "5", "--force", "--delimiter", "\\t"]
    argv += ["--no-header", "--row-group-rows", "7", "--names", "p,q", "--quiet", "--debug"]
    assert parsed("convert", *argv) == {
        **COMMON,
        "quiet": True,
        "debug": True,
        "command": "convert",
        "run": cli._convert,
        "src": ["a.csv", "b.csv"],
        "dst": "c.ndf",
        "features": "f",
        "labels": "y",
        "exclude": "i",
        "categorical": "k",
        "part_rows": 5,
        "force": True,
        "delimiter": "\t",
        "no_header": True,
        "row_group_rows": 7,
        "names": "p,q",
    }
    argv = ["a.ndf", "b", "--part-rows", "2", "--seed", "3", "--memory", "512MB"]
    argv += ["--tmp-dir", "t", "--force", "--json"]
    assert parsed("shuffle", *argv) == {
        **COMMON,
        "json": True,
        "command": "shuffle",
        "run": cli._shuffle,
        "src": "a.ndf",
        "dst": "b",
        "part_rows": 2,
        "seed": 3,
        "memory": 512 * 2**20,
        "tmp_dir": "t",
        "force": True,
    }
    argv = ["a.ndf", "--batch-size", "4", "--buffer-size", "5", "--chunk-rows", "6"]
    argv += ["--no-shuffle-chunks", "--seed", "7", "--columns", "a,b", "--stratum", "s"]
    argv += ["--plot", "p.png", "--max-batches", "8", "--sample-rows", "9", "--replicates", "19"]
    assert parsed("mixing", *argv, *common) == {
        **opts,
        "command": "mixing",
        "run": cli._mixing,
        "src": "a.ndf",
        "batch_size": 4,
        "buffer_size": 5,
        "chunk_rows": 6,
        "shuffle_chunks": False,
        "seed": 7,
        "columns": "a,b",
        "stratum": "s",
        "plot": "p.png",
        "max_batches": 8,
        "sample_rows": 9,
        "replicates": 19,
    }
    argv = ["a.ndf", "--batch-sizes", "1,2", "--no-shuffle", "--seed", "4", "--buffer-size"]
    argv += ["5", "--max-rows", "6", "--features", "f", "--labels", "y"]
    assert parsed("bench", *argv, *common) == {
        **opts,
        "command": "bench",
        "run": cli._bench,
        "src": "a.ndf",
        "features": "f",
        "labels": "y",
        "batch_sizes": [1, 2],
        "shuffle": False,
        "seed": 4,
        "buffer_size": 5,
        "max_rows": 6,
    }
    assert parsed("mixing", "a", "--batch-size", "1", "--shuffle-chunks")["shuffle_chunks"]
    assert parsed("bench", "a", "--shuffle")["shuffle"] is True
    assert parsed("certify", "s.json", "t.json")["states"] == ["s.json", "t.json"]


@pytest.mark.parametrize(
    "argv",
    [
        ["convert", "a.csv", "b.ndf", "--part-rows", "0"],
        ["convert", "a.csv", "b.ndf", "--row-group-rows", "0"],
        ["shuffle", "a", "b", "--part-rows", "0"],
        ["shuffle", "a", "b", "--seed", "x"],
        ["mixing", "a"],  # --batch-size is required
        ["mixing", "a", "--batch-size", "0"],
        ["mixing", "a", "--batch-size", "1", "--buffer-size", "0"],
        ["mixing", "a", "--batch-size", "1", "--chunk-rows", "0"],
        ["mixing", "a", "--batch-size", "1", "--seed", "x"],
        ["mixing", "a", "--batch-size", "1", "--max-batches", "0"],
        ["mixing", "a", "--batch-size", "1", "--sample-rows", "0"],
        ["mixing", "a", "--batch-size", "1", "--replicates", "0"],
        ["bench", "a", "--seed", "x"],
        ["bench", "a", "--buffer-size", "0"],
        ["bench", "a", "--max-rows", "0"],
        ["info", "a", "--storage-options", "[]"],
    ],
)
def test_a_bad_value_is_a_usage_error(argv, capsys):
    """Each typed option refuses a bad value: argparse's usage error, exit status 2."""
    assert main(argv) == 2
    flag = [a for a in argv if a.startswith("--")][-1] if len(argv) > 2 else "--batch-size"
    err = capsys.readouterr().err
    assert err.startswith(f"usage: exactbatch {argv[0]} ")
    assert f"error: {'argument ' if len(argv) > 2 else ''}" in err and flag in err


def test_version(capsys):
    """`exactbatch --version` prints the command's name and the package's version."""
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"exactbatch {__version__}\n"
