"""What each subcommand of `exactbatch` hands its tool and prints, in this process: every
tool a stand-in that records its call (the tools' own work is tested in their own files),
and the one funnel's ends: Ctrl-C (tests/tools/test_interrupt.py sends real signals to a
real process) and a closed pipe."""

from __future__ import annotations

import importlib
import io
import json
import os
import signal
import sys

import pytest

from exactbatch.cli import main

INTERRUPTED = "interrupted; no partial output was left\n"


class Tool:
    """A stand-in for a tool's function: records each call, returns ``result``."""

    def __init__(self, name, result, order):
        self.name, self.result, self.order = name, result, order
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        self.order.append(self.name)
        return self.result


def stand_in(monkeypatch, module: str, name: str, result, order=None) -> Tool:
    tool = Tool(name, result, [] if order is None else order)
    monkeypatch.setattr(importlib.import_module(f"exactbatch.tools.{module}"), name, tool)
    return tool


def rendered(monkeypatch, module: str) -> Tool:
    return stand_in(monkeypatch, module, "render", f"{module} rendered")


def test_info_hands_its_options_and_prints_the_report(monkeypatch, capsys):
    report = {"format": "ndf", "valid": True}
    info = stand_in(monkeypatch, "info", "info", report)
    render = rendered(monkeypatch, "info")
    assert main(["info", "x.ndf"]) == 0
    assert info.calls == [(("x.ndf",), {"stats": False, "bar": True, "storage_options": None})]
    assert render.calls == [((report,), {})]
    assert capsys.readouterr() == ("info rendered\n", "")
    argv = ["info", "x.ndf", "--stats", "-q", "--storage-options", '{"anon": true}']
    assert main(argv) == 0
    assert info.calls[1] == (
        ("x.ndf",),
        {"stats": True, "bar": False, "storage_options": {"anon": True}},
    )
    capsys.readouterr()


def test_info_of_a_malformed_file_prints_the_report_then_its_error_and_exits_1(monkeypatch, capsys):
    stand_in(monkeypatch, "info", "info", {"valid": False, "error": "x.ndf: 8 bytes short"})
    rendered(monkeypatch, "info")
    assert main(["info", "x.ndf"]) == 1
    assert capsys.readouterr() == ("info rendered\n", "exactbatch info: x.ndf: 8 bytes short\n")
    assert main(["info", "x.ndf", "--json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out) == {"valid": False, "error": "x.ndf: 8 bytes short"}
    assert err == "exactbatch info: x.ndf: 8 bytes short\n"


def test_json_is_indented_by_two_and_writes_what_json_cannot_as_text(monkeypatch, capsys):
    """`--json` prints the report as JSON indented by 2, a value JSON has no type for
    (a path) as its text."""
    from pathlib import Path

    stand_in(monkeypatch, "info", "info", {"valid": True, "path": Path("x.ndf"), "n": [1]})
    assert main(["info", "x.ndf", "--json"]) == 0
    out = capsys.readouterr().out
    assert out == '{\n  "valid": true,\n  "path": "x.ndf",\n  "n": [\n    1\n  ]\n}\n'


def test_convert_hands_its_options(monkeypatch, capsys):
    convert = stand_in(monkeypatch, "convert", "convert", {"rows": 3})
    render = rendered(monkeypatch, "convert")
    assert main(["convert", "a.csv", "b.ndf"]) == 0
    assert convert.calls == [
        (
            ("a.csv", "b.ndf"),
            {
                "header": True,
                "features": None,
                "labels": None,
                "force": False,
                "delimiter": None,
                "row_group_rows": 65536,
                "names": None,
                "part_rows": None,
                "exclude": None,
                "categorical": None,
                "bar": True,
            },
        )
    ]
    assert render.calls == [(({"rows": 3},), {})]
    assert capsys.readouterr() == ("convert rendered\n", "")
    argv = ["convert", "a.csv", "b.csv", "c.ndf", "--no-header", "-q", "--force"]
    assert main([*argv, "--json"]) == 0
    args, kwargs = convert.calls[1]
    assert args == (["a.csv", "b.csv"], "c.ndf")  # several sources: a list
    assert (kwargs["header"], kwargs["bar"], kwargs["force"]) == (False, False, True)
    assert json.loads(capsys.readouterr().out) == {"rows": 3}


def test_shuffle_hands_its_options(monkeypatch, capsys):
    shuffle = stand_in(monkeypatch, "shuffle", "shuffle_file", {"rows": 3})
    render = rendered(monkeypatch, "shuffle")
    assert main(["shuffle", "a.ndf", "b.ndf", "--seed", "4", "--tmp-dir", "t"]) == 0
    kwargs = {"seed": 4, "memory": 2**30, "force": False, "tmp_dir": "t", "part_rows": None}
    assert shuffle.calls == [(("a.ndf", "b.ndf"), {**kwargs, "bar": True})]
    assert render.calls == [(({"rows": 3},), {})]
    assert capsys.readouterr() == ("shuffle rendered\n", "")
    assert main(["shuffle", "a.ndf", "b.ndf", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"rows": 3}


def test_mixing_hands_its_options_checks_the_plot_first_and_draws_it_last(monkeypatch, capsys):
    order = []
    check = stand_in(monkeypatch, "mixing_plot", "check_path", None, order)
    mixing = stand_in(monkeypatch, "mixing", "mixing", "the result", order)
    draw = stand_in(monkeypatch, "mixing_plot", "draw", None, order)
    public = stand_in(monkeypatch, "mixing_report", "public", {"verdict": "well mixed"})
    render = rendered(monkeypatch, "mixing_report")
    assert main(["mixing", "a.ndf", "--batch-size", "8", "--plot", "p.png"]) == 0
    assert order == ["check_path", "mixing", "draw"]
    assert check.calls == [(("p.png",), {})]
    assert draw.calls == [(("the result", "p.png"), {})]
    kwargs = {
        "batch_size": 8,
        "buffer_size": None,
        "chunk_rows": None,
        "shuffle_chunks": True,
        "seed": 0,
        "columns": None,
        "stratum": None,
        "max_batches": 500,
        "sample_rows": 20000,
        "replicates": 99,
        "storage_options": None,
        "bar": True,
    }
    assert mixing.calls == [(("a.ndf",), kwargs)]
    assert render.calls == [(("the result",), {})]
    assert capsys.readouterr() == ("mixing_report rendered\nwrote p.png\n", "")
    assert main(["mixing", "a.ndf", "--batch-size", "8", "--json", "-q"]) == 0
    assert mixing.calls[1][1]["bar"] is False
    assert len(check.calls) == len(draw.calls) == 1  # no plot, none checked or drawn
    assert json.loads(capsys.readouterr().out) == {"verdict": "well mixed", "plot": None}
    assert public.calls == [(("the result",), {})]
    assert main(["mixing", "a.ndf", "--batch-size", "8", "--json", "--plot", "q.png"]) == 0
    assert json.loads(capsys.readouterr().out) == {"verdict": "well mixed", "plot": "q.png"}


def test_mixing_refuses_a_bad_plot_before_the_pass_over_the_data(monkeypatch, capsys):
    from exactbatch.tools.common import CliError

    def refuse(path):
        raise CliError(f"{path}: no such folder")

    monkeypatch.setattr(
        importlib.import_module("exactbatch.tools.mixing_plot"), "check_path", refuse
    )
    mixing = stand_in(monkeypatch, "mixing", "mixing", "the result")
    assert main(["mixing", "a.ndf", "--batch-size", "8", "--plot", "no/p.png"]) == 2
    assert mixing.calls == []
    assert capsys.readouterr().err == "exactbatch mixing: error: no/p.png: no such folder\n"


def test_bench_hands_its_options(monkeypatch, capsys):
    bench = stand_in(monkeypatch, "bench", "bench", {"runs": []})
    render = rendered(monkeypatch, "bench")
    assert main(["bench", "a.ndf", "--batch-sizes", "2,4", "--labels", "y"]) == 0
    kwargs = {
        "batch_sizes": [2, 4],
        "shuffle": True,
        "seed": 0,
        "buffer_size": None,
        "max_rows": None,
        "features": None,
        "labels": "y",
        "storage_options": None,
        "bar": True,
    }
    assert bench.calls == [(("a.ndf",), kwargs)]
    assert render.calls == [(({"runs": []},), {})]
    assert capsys.readouterr() == ("bench rendered\n", "")
    assert main(["bench", "a.ndf", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"runs": []}


class _Verdict:
    def __init__(self, ok: bool) -> None:
        self.ok = ok

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return "certified" if self.ok else "not certified"


@pytest.mark.parametrize("ok", [True, False])
def test_certify_prints_its_verdict_and_exits_1_when_not(monkeypatch, capsys, ok):
    certify = stand_in(monkeypatch, "certify", "certify_files", _Verdict(ok))
    public = stand_in(monkeypatch, "certify", "public", {"certified": ok})
    assert main(["certify", "s.json", "t.json"]) == (0 if ok else 1)
    assert certify.calls == [((["s.json", "t.json"],), {})]
    assert capsys.readouterr() == (f"{certify.result}\n", "")
    assert main(["certify", "s.json", "--json"]) == (0 if ok else 1)
    assert public.calls == [((certify.result,), {})]
    assert json.loads(capsys.readouterr().out) == {"certified": ok}


# -- Ctrl-C ------------------------------------------------------------------------------


def test_ctrl_c_while_a_command_runs_is_one_line_and_130(monkeypatch, capsys):
    """A Ctrl-C while a command runs: exit status 130 and one line naming the command."""

    def interrupted(states):
        raise KeyboardInterrupt

    monkeypatch.setattr(
        importlib.import_module("exactbatch.tools.certify"), "certify_files", interrupted
    )
    assert main(["certify", "s.json"]) == 130
    assert capsys.readouterr() == ("", f"exactbatch certify: {INTERRUPTED}")


def test_ctrl_c_before_the_command_is_known_names_none(monkeypatch, capsys):
    import exactbatch.cli as cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_parser", interrupted)
    assert main(["certify", "s.json"]) == 130
    assert capsys.readouterr() == ("", f"exactbatch: {INTERRUPTED}")


def test_a_ctrl_c_a_library_swallowed_still_stops_the_command(monkeypatch, capsys):
    """A SIGINT some library caught and dropped is noted: once the command returns, it is
    exit status 130 all the same, with its one line; the next command starts afresh."""

    def swallowing(states):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs between two bytecodes
                pass
        except KeyboardInterrupt:
            pass
        return _Verdict(True)

    certify = importlib.import_module("exactbatch.tools.certify")
    monkeypatch.setattr(certify, "certify_files", swallowing)
    assert main(["certify", "s.json"]) == 130
    assert capsys.readouterr() == ("certified\n", f"exactbatch certify: {INTERRUPTED}")
    monkeypatch.setattr(certify, "certify_files", lambda states: _Verdict(True))
    assert main(["certify", "s.json"]) == 0
    assert capsys.readouterr() == ("certified\n", "")


# -- a closed pipe -----------------------------------------------------------------------


def test_a_closed_pipe_ends_quietly_with_141(monkeypatch, capsys):
    """`exactbatch info x | head -1`: the reader gone, the command stops with no message
    and exit status 141 (as a shell reports SIGPIPE), its output sent to /dev/null so that
    Python's last flush at exit fails no more."""
    read, write = os.pipe()
    os.close(read)
    out = os.fdopen(write, "w")
    before = set(os.listdir("/proc/self/fd"))
    try:
        monkeypatch.setattr(sys, "stdout", out)

        def closed(*args, **kwargs):
            raise BrokenPipeError(32, "Broken pipe")

        monkeypatch.setattr(importlib.import_module("exactbatch.tools.info"), "info", closed)
        assert main(["info", "x.ndf"]) == 141
        assert os.path.samestat(os.fstat(write), os.stat(os.devnull))
        assert capsys.readouterr().err == ""
        opened = set(os.listdir("/proc/self/fd")) - before
        links = [os.readlink(f"/proc/self/fd/{fd}") for fd in opened if fd != str(write)]
        assert os.devnull not in links  # the descriptor opened on /dev/null let go of
    finally:
        out.close()


def test_a_closed_pipe_with_no_dev_null_still_ends_quietly_with_141(monkeypatch, capsys):
    """The reader gone and /dev/null not to be opened (no descriptor left): still exit
    status 141 with no message, stdout left as it was."""
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)

    def closed(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    def no_descriptor(*args, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(importlib.import_module("exactbatch.tools.info"), "info", closed)
    monkeypatch.setattr(os, "open", no_descriptor)
    assert main(["info", "x.ndf"]) == 141
    monkeypatch.undo()
    assert capsys.readouterr().err == "" and out.getvalue() == ""


# -- an error: one line, naming the file ---------------------------------------------------


def failing(monkeypatch, error: BaseException) -> None:
    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(importlib.import_module("exactbatch.tools.shuffle"), "shuffle_file", fail)


@pytest.mark.parametrize(
    "error, line",
    [
        (
            FileNotFoundError(2, "No such file or directory", "a.ndf"),
            "a.ndf: No such file or directory",
        ),
        (OSError(5, "", "b.ndf"), "b.ndf: [Errno 5] : 'b.ndf'"),  # no strerror: its text
        (OSError("disk on fire"), "a.ndf: disk on fire"),  # no file named: the input
        (OSError("no space left in buckets"), "no space left in buckets"),  # the bucket folder
        (ValueError("b.ndf: bad\n  header"), "b.ndf: bad header"),  # names the output: as it is
        (ValueError(), "a.ndf: ValueError"),  # no text: its type
        (TypeError("odd"), "a.ndf: TypeError: odd"),  # unexpected: its type too
        (
            ImportError("No module named 'tqdm'"),
            "a.ndf: No module named 'tqdm' (pip install 'exactbatch[cli]' installs what the "
            "command needs)",
        ),
    ],
)
def test_an_error_is_one_line_naming_a_file(monkeypatch, capsys, error, line):
    failing(monkeypatch, error)
    assert main(["shuffle", "a.ndf", "b.ndf", "--tmp-dir", "buckets"]) == 2
    assert capsys.readouterr() == ("", f"exactbatch shuffle: error: {line}\n")


def test_an_error_naming_none_of_several_inputs_names_the_first(monkeypatch, capsys):
    def fail(*args, **kwargs):
        raise ValueError("columns differ")

    monkeypatch.setattr(importlib.import_module("exactbatch.tools.convert"), "convert", fail)
    assert main(["convert", "a.csv", "b.csv", "c.ndf"]) == 2
    assert capsys.readouterr().err == "exactbatch convert: error: a.csv: columns differ\n"

    def fail_b(*args, **kwargs):
        raise ValueError("b.csv: columns differ")

    monkeypatch.setattr(importlib.import_module("exactbatch.tools.convert"), "convert", fail_b)
    assert main(["convert", "a.csv", "b.csv", "c.ndf"]) == 2
    assert capsys.readouterr().err == "exactbatch convert: error: b.csv: columns differ\n"


@pytest.mark.parametrize("flag", ["--debug", "--traceback"])
def test_debug_prints_the_traceback_before_the_line(monkeypatch, capsys, flag):
    failing(monkeypatch, TypeError("odd"))
    assert main(["shuffle", "a.ndf", "b.ndf", flag]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n")
    assert err.endswith("TypeError: odd\nexactbatch shuffle: error: a.ndf: TypeError: odd\n")
    failing(monkeypatch, TypeError("odd"))
    assert main(["shuffle", "a.ndf", "b.ndf"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_short_path_inside_a_word_of_the_message_is_still_named(monkeypatch, capsys):
    """The error is prefixed with the input unless it names a path as a word of its own:
    a folder `d` is not named by "no data" (nor `t` by "tqdm")."""

    def fail(*args, **kwargs):
        raise ValueError("no data found")

    monkeypatch.setattr(importlib.import_module("exactbatch.tools.info"), "info", fail)
    assert main(["info", "d"]) == 2
    assert capsys.readouterr().err == "exactbatch info: error: d: no data found\n"
    assert main(["info", "data"]) == 2  # named, as a word
    assert capsys.readouterr().err == "exactbatch info: error: no data found\n"
    for path in ("/tmp/data", "./data", "data/"):  # named too: the same path, spelt another way

        def fail_in(*args, path=path, **kwargs):
            raise ValueError(f"{path}/part-0.ndf: bad")

        monkeypatch.setattr(importlib.import_module("exactbatch.tools.info"), "info", fail_in)
        assert main(["info", "data"]) == 2
        assert capsys.readouterr().err == f"exactbatch info: error: {path}/part-0.ndf: bad\n"
