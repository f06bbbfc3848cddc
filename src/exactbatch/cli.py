"""The ``exactbatch`` command: from your data (Parquet, CSV, .npy) to batches you can trust.

    exactbatch info PATH                      what a file holds; is an .ndf (or dataset) intact?
                                              (PATH may be a URL of an .ndf or a dataset)
    exactbatch convert SRC DST                Parquet/CSV/.npy -> .ndf, .ndf -> Parquet
                                              (SRC may be several CSVs, a folder or a glob)
    exactbatch convert SRC DIR --part-rows R  ... -> a sharded dataset of R-row parts
    exactbatch shuffle SRC DST --memory 1GB   the one-time shuffle on disk, for sorted data
    exactbatch mixing SRC --batch-size B      how well a streaming loader mixes this data
    exactbatch bench SRC                      loader rows/s and memory against a bare read
    exactbatch certify STATE...               did a run hand out every row exactly once?

A thin front end: arguments are parsed (by :mod:`exactbatch.cli_parser`, which
holds every option and its help) and results printed here; the work is in
:mod:`exactbatch.tools`, one module per subcommand, imported only when that
subcommand runs (so is pyarrow, matplotlib or tqdm).

Exit status: 0 success; 1 ``info`` found a malformed .ndf, or ``certify``
found an epoch not exact (their verdicts); 2 a usage error, or any error
while the command ran - every one goes through one funnel (:func:`_run`)
and becomes one line on stderr naming the file (``--debug`` adds the
traceback); 130 interrupted (Ctrl-C or SIGTERM), leaving no partial output
behind.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

__all__ = ["main"]


def _print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, default=str))


def _opts(a: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The parsed options ``names`` as keyword arguments, plus ``bar`` from ``--quiet``."""
    return {**{k: getattr(a, k) for k in names}, "bar": not a.quiet}


# -- subcommands: each calls one tool and prints what it returns -------------------------


def _info(a: argparse.Namespace) -> int:
    from exactbatch.tools.info import info, render

    report = info(a.path, stats=a.stats, bar=not a.quiet, storage_options=a.storage_options)
    _print_json(report) if a.json else print(render(report))
    if report.get("valid") is False:
        print(f"exactbatch info: {report['error']}", file=sys.stderr)
        return 1
    return 0


def _convert(a: argparse.Namespace) -> int:
    from exactbatch.tools.convert import convert, render

    names = ("features", "labels", "force", "delimiter", "row_group_rows", "names", "part_rows")
    more = ("exclude", "categorical")
    src = a.src[0] if len(a.src) == 1 else a.src
    out = convert(src, a.dst, header=not a.no_header, **_opts(a, *names, *more))
    _print_json(out) if a.json else print(render(out))
    return 0


def _shuffle(a: argparse.Namespace) -> int:
    from exactbatch.tools.shuffle import render, shuffle_file

    out = shuffle_file(a.src, a.dst, **_opts(a, "seed", "memory", "force", "tmp_dir", "part_rows"))
    _print_json(out) if a.json else print(render(out))
    return 0


def _mixing(a: argparse.Namespace) -> int:
    from exactbatch.tools.mixing import mixing
    from exactbatch.tools.mixing_report import public, render

    if a.plot is not None:
        from exactbatch.tools.mixing_plot import check_path

        check_path(a.plot)  # before the pass over the data, not after
    names = ("batch_size", "buffer_size", "chunk_rows", "shuffle_chunks", "seed", "columns")
    more = ("stratum", "max_batches", "sample_rows", "replicates", "storage_options")
    r = mixing(a.src, **_opts(a, *names, *more))
    if a.plot is not None:
        from exactbatch.tools.mixing_plot import draw

        draw(r, a.plot)
    _print_json({**public(r), "plot": a.plot}) if a.json else print(render(r))
    if a.plot is not None and not a.json:
        print(f"wrote {a.plot}")
    return 0


def _bench(a: argparse.Namespace) -> int:
    from exactbatch.tools.bench import bench, render

    names = ("batch_sizes", "shuffle", "seed", "buffer_size", "max_rows", "features", "labels")
    r = bench(a.src, **_opts(a, *names, "storage_options"))
    _print_json(r) if a.json else print(render(r))
    return 0


def _certify(a: argparse.Namespace) -> int:
    from exactbatch.tools.certify import certify_files, public

    cert = certify_files(a.states)
    _print_json(public(cert)) if a.json else print(cert)
    return 0 if cert else 1


# -- the parser (exactbatch.cli_parser) ------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    from exactbatch.cli_parser import build_parser

    return build_parser(
        {
            "info": _info,
            "convert": _convert,
            "shuffle": _shuffle,
            "mixing": _mixing,
            "bench": _bench,
            "certify": _certify,
        }
    )


# -- errors --------------------------------------------------------------------------


def _message(e: BaseException, args: argparse.Namespace) -> str:
    """One line for the error ``e``: naming a file (the command's input if ``e`` names
    none), with the error's type where it is not one bad input is expected to raise."""
    from exactbatch.tools.common import CliError

    if isinstance(e, OSError) and e.filename:
        text = f"{e.filename}: {e.strerror or e}"
    elif isinstance(e, ImportError):
        text = f"{e} (pip install 'exactbatch[cli]' installs what the command needs)"
    else:
        text = str(e) or type(e).__name__
    if not isinstance(e, (CliError, OSError, ValueError, ImportError)):
        text = f"{type(e).__name__}: {text}"  # unexpected: the type helps a bug report
    named = [getattr(args, k, None) for k in ("path", "src", "dst", "plot", "tmp_dir")]
    # convert's src is a list (several CSV files): each is a path an error may name
    flat = [q for p in named for q in (p if isinstance(p, list) else [p])]
    paths = [str(p) for p in flat if p is not None]
    if paths and not any(_names(text, p) for p in paths):
        text = f"{paths[0]}: {text}"
    return " ".join(text.split())  # one line


def _names(text: str, path: str) -> bool:
    """Whether ``text`` names ``path`` as a word of its own, not inside another (a folder
    ``d`` is not named by "no data"); a path around it (``/tmp/d/x.ndf``) names it."""
    import re

    return re.search(rf"(?<![\w.-]){re.escape(path)}(?![\w-])", text) is not None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    Ctrl-C or SIGTERM at any moment returns 130 with one line on stderr; a
    command that writes then leaves no output and no temporary file, and a
    file that was at the destination keeps its old bytes.
    """
    from exactbatch.tools.common import catch_signals, check_interrupt

    command = None
    with catch_signals():
        try:
            parser = _parser()
            try:
                args = parser.parse_args(argv)
            except SystemExit as e:  # --help, --version (0), or a usage error (2; printed)
                return int(e.code or 0)  # argparse exits with an int status only
            if args.command is None:
                parser.print_help(sys.stderr)
                return 2
            command = args.command
            status = _run(args)
            check_interrupt()  # a Ctrl-C that some library swallowed is still one
            return status
        except KeyboardInterrupt:
            where = f"exactbatch {command}" if command else "exactbatch"
            print(f"{where}: interrupted; no partial output was left", file=sys.stderr)
            return 130


def _run(args: argparse.Namespace) -> int:
    """Run the subcommand: the one funnel of its errors. Every exception (a Ctrl-C
    aside) is one line on stderr naming the file, and exit status 2; ``--debug``
    prints the traceback first."""
    try:
        status: int = args.run(args)
        return status
    except BrokenPipeError:  # e.g. `exactbatch info x | head -1`: stop quietly
        try:
            null = os.open(os.devnull, os.O_WRONLY)
        except OSError:
            return 141
        try:  # stdout's descriptor now writes to /dev/null; the one opened is let go of
            os.dup2(null, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        finally:
            os.close(null)
        return 141
    except Exception as e:
        if args.debug:
            traceback.print_exc()
        print(f"exactbatch {args.command}: error: {_message(e, args)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
