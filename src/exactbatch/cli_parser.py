"""The ``exactbatch`` command's argument parser: every subcommand's options and help,
apart from what each subcommand does (:mod:`exactbatch.cli`), which hands in the
functions that run them."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from exactbatch import cli_args

__all__ = ["build_parser"]


def build_parser(
    commands: dict[str, Callable[[argparse.Namespace], int]],
) -> argparse.ArgumentParser:
    """The command's parser; ``commands`` maps each subcommand's name to the function
    that runs it (set as the parsed arguments' ``run``)."""
    from exactbatch import __version__

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    common.add_argument("--json", action="store_true", help="print the result as JSON")
    common.add_argument(
        "--debug",
        "--traceback",
        dest="debug",
        action="store_true",
        help="on an error, show its traceback too (for bug reports)",
    )
    cols = argparse.ArgumentParser(add_help=False)
    cols.add_argument(
        "--features",
        metavar="COLS",
        help="feature columns: comma-separated names, or positions (0, -1, ...); "
        "default: every column not a label",
    )
    cols.add_argument(
        "--labels",
        metavar="COLS",
        help="label columns, the same way (e.g. --labels y or --labels -1)",
    )

    remote = argparse.ArgumentParser(add_help=False)
    remote.add_argument(
        "--storage-options",
        type=cli_args.json_object,
        default=None,
        metavar="JSON",
        help="for a URL (s3://bucket/ds, an .ndf or a sharded dataset): fsspec storage "
        'options as a JSON object, e.g. \'{"client_kwargs": {"endpoint_url": "http://..."}}\'',
    )

    p = argparse.ArgumentParser(
        prog="exactbatch",
        description="From your data (Parquet, CSV, .npy) to exact, well-mixed batches.",
        epilog="Run 'exactbatch COMMAND --help' for each command's options. Exit status: "
        "0 ok, 1 info found a malformed .ndf or certify an epoch not exact, 2 an error "
        "(one line naming the file; --debug shows the traceback), 130 interrupted.",
    )
    p.add_argument("--version", action="version", version=f"exactbatch {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser(
        "info",
        parents=[common, remote],
        help="what a file holds; is an .ndf (or a sharded dataset) intact?",
        description="For an .ndf: n, d, l, the column names, the size and whether it matches the "
        "header (exit 1 if not). For a sharded dataset (a folder with "
        "manifest.json): n, d, l, the parts, and every part checked against the "
        "manifest (exit 1 if one fails). For Parquet (a file or folder): rows, "
        "files, row groups, columns and types, from the footers. Also .npy and CSV.",
    )
    s.add_argument("path", help="an .ndf, a sharded dataset, Parquet file or folder, .npy or .csv")
    s.add_argument(
        "--stats",
        action="store_true",
        help="also per-column mean, sd, min and max, in one pass over the rows "
        "(.ndf, a sharded dataset, Parquet), to standardise with",
    )
    s.set_defaults(run=commands["info"])

    s = sub.add_parser(
        "convert",
        parents=[common, cols],
        help="Parquet/CSV/.npy -> .ndf, and .ndf -> Parquet",
        description="Convert in bounded memory (chunk by chunk), atomically: "
        "the output appears only when complete. Formats come from the files "
        "(SRC by its magic or extension, DST by its extension, .ndf or "
        ".parquet). Values are stored as float64.",
    )
    s.add_argument(
        "src",
        nargs="+",
        help="Parquet file or folder (Hive partition keys become columns), .csv (or "
        ".csv.gz), .npy, .ndf or a sharded dataset; or several CSV files (a folder of them, "
        "a quoted glob such as 'data/*.csv', or a list) made into one .ndf, rows in sorted "
        "path order",
    )
    s.add_argument(
        "dst",
        help="the file to write: NAME.ndf, or NAME.parquet from an .ndf; with "
        "--part-rows, the folder of a sharded dataset",
    )
    s.add_argument(
        "--exclude",
        metavar="COLS",
        help="columns to leave out of the default features (names or positions), e.g. "
        "an id or a free-text column",
    )
    s.add_argument(
        "--categorical",
        metavar="COLS",
        help="Parquet and CSV: store these columns (strings, or numbers) as integer codes, "
        "0.. in the sorted order of their values; the vocabularies are kept beside the "
        "names (exactbatch.categories(DST))",
    )
    s.add_argument(
        "--part-rows",
        type=cli_args.positive_int,
        metavar="R",
        help="write a sharded dataset into the folder DST: a new part every R rows, "
        "the manifest last",
    )
    s.add_argument("--force", action="store_true", help="replace DST if it exists")
    s.add_argument(
        "--delimiter",
        type=cli_args.delimiter,
        help="CSV field delimiter: one character, or \\t for a tab (default: a tab for "
        ".tsv and .tab, else ',')",
    )
    s.add_argument(
        "--no-header",
        action="store_true",
        help="the CSV has no header row: columns are f0, f1, ... or positions",
    )
    s.add_argument(
        "--row-group-rows",
        type=cli_args.positive_int,
        default=65536,
        metavar="ROWS",
        help=".ndf -> Parquet: rows per row group (default 65536); a row group "
        "is one chunk of a streaming loader",
    )
    s.add_argument(
        "--names",
        metavar="NAMES",
        help=".ndf -> Parquet: names for the columns written (default x0.., y0..)",
    )
    s.set_defaults(run=commands["convert"])

    s = sub.add_parser(
        "shuffle",
        parents=[common],
        help="shuffle an .ndf on disk once, in bounded memory",
        description="Write the rows of SRC to DST in a uniformly random order, "
        "using at most --memory of memory above the interpreter's baseline "
        "(an external-memory shuffle through bucket files when the data is "
        "larger). The cure for data sorted on disk before streaming it.",
    )
    s.add_argument("src", help="the .ndf file or sharded dataset to shuffle")
    s.add_argument(
        "dst",
        help="the .ndf file to write; a sharded dataset (a folder) when SRC is one "
        "or --part-rows is given",
    )
    s.add_argument(
        "--part-rows",
        type=cli_args.positive_int,
        metavar="R",
        help="write a sharded dataset, a new part every R rows (default for a "
        "dataset SRC: its largest part's rows)",
    )
    s.add_argument("--seed", type=cli_args.seed, default=0, help="the shuffle's seed (default 0)")
    s.add_argument(
        "--memory",
        type=cli_args.size,
        default="1GB",
        metavar="SIZE",
        help="memory budget, e.g. 512MB, 4GB (binary units: 1GB = 2**30 bytes; default 1GB)",
    )
    s.add_argument(
        "--tmp-dir",
        metavar="DIR",
        help="folder for the bucket files (default: DST's folder); needs as much "
        "free space as the data",
    )
    s.add_argument("--force", action="store_true", help="replace DST if it exists")
    s.set_defaults(run=commands["shuffle"])

    s = sub.add_parser(
        "mixing",
        parents=[common, remote],
        help="how well a streaming loader setting mixes this data",
        description="Run epoch 0 of a streaming DataLoader over SRC with these "
        "settings and report how far rows travel from their place on disk and "
        "how representative batches are (KS distance to the whole data, and the "
        "class entropy of a stratum, against random batches); --plot draws both. "
        "The verdict is calibrated on simulated full shuffles: a full shuffle is "
        "called NOT well mixed in at most 5% of seeds.",
    )
    s.add_argument(
        "src", help="an .ndf, a sharded dataset, a Parquet file or folder, or an .ndf/dataset URL"
    )
    s.add_argument(
        "--batch-size",
        type=cli_args.positive_int,
        required=True,
        metavar="B",
        help="rows per batch",
    )
    s.add_argument(
        "--buffer-size",
        type=cli_args.positive_int,
        metavar="ROWS",
        help="shuffle buffer rows (default: the loader's, 64 MiB worth of rows)",
    )
    s.add_argument(
        "--chunk-rows",
        type=cli_args.positive_int,
        metavar="ROWS",
        help=".ndf: rows per chunk of the stream (default 65536); Parquet streams by row group",
    )
    _switch(
        s,
        "--shuffle-chunks",
        "shuffle the chunk order each epoch, as the loader does (default: yes)",
    )
    s.add_argument("--seed", type=cli_args.seed, default=0, help="loader seed (default 0)")
    s.add_argument(
        "--columns",
        metavar="COLS",
        help="columns to examine, names or positions (default: the first 8)",
    )
    s.add_argument(
        "--stratum",
        metavar="COLUMN",
        help="a class column (a label, a stratum) whose entropy per batch is compared "
        "with random batches' (default: the label column, when there is exactly one)",
    )
    s.add_argument("--plot", metavar="FILE.png", help="draw the picture into this file")
    s.add_argument(
        "--max-batches",
        type=cli_args.positive_int,
        default=500,
        metavar="K",
        help="examine at most K batches, spread over the epoch (default 500)",
    )
    s.add_argument(
        "--sample-rows",
        type=cli_args.positive_int,
        default=20000,
        metavar="M",
        help="rows in the uniform sample of the whole data (default 20000)",
    )
    s.add_argument(
        "--replicates",
        type=cli_args.positive_int,
        default=99,
        metavar="R",
        help="simulated full shuffles the verdict is calibrated on (default 99, at least 19)",
    )
    s.set_defaults(run=commands["mixing"])

    s = sub.add_parser(
        "bench",
        parents=[common, cols, remote],
        help="loader rows/s and peak memory against a bare read",
        description="Time one epoch of the DataLoader on SRC at each batch size "
        "against a bare read of the same file in the same run, with each "
        "run's peak resident memory.",
    )
    s.add_argument(
        "src", help="an .ndf, a sharded dataset, a Parquet file or folder, or an .ndf/dataset URL"
    )
    s.add_argument(
        "--batch-sizes",
        type=cli_args.int_list,
        default=[64, 1024, 4096],
        metavar="B,B,..",
        help="batch sizes to time (default 64,1024,4096)",
    )
    _switch(s, "--shuffle", "shuffled epochs (default: yes)")
    s.add_argument("--seed", type=cli_args.seed, default=0, help="loader seed (default 0)")
    s.add_argument(
        "--buffer-size",
        type=cli_args.positive_int,
        metavar="ROWS",
        help="Parquet: shuffle buffer rows (default: the loader's)",
    )
    s.add_argument(
        "--max-rows",
        type=cli_args.positive_int,
        metavar="N",
        help="time only the first N rows of each epoch (default: all)",
    )
    s.set_defaults(run=commands["bench"])

    s = sub.add_parser(
        "certify",
        parents=[common],
        help="did a run hand out every row of every epoch exactly once?",
        description="Merge the ledgers of saved DataLoader states (every rank's, "
        "across resumes and elastic changes) and say, epoch by epoch, whether "
        "every row was handed out exactly once. Exit status 1 when not.",
    )
    s.add_argument("states", nargs="+", metavar="STATE", help="JSON files of states (state_dict())")
    s.set_defaults(run=commands["certify"])
    return p


def _switch(parser: argparse.ArgumentParser, name: str, help: str) -> None:
    """A ``--NAME``/``--no-NAME`` switch, on by default, whose help reads as written on
    every Python (3.10's ``BooleanOptionalAction`` appends "(default: True)" to it)."""
    action = parser.add_argument(name, action=argparse.BooleanOptionalAction, default=True)
    action.help = help  # set after: given to add_argument, 3.10 appends to it
