"""The command's shared pieces (exactbatch.tools.common) called directly: sizes and lists,
formats by magic and by name, the outputs' checks, URLs, Ctrl-C, progress bars."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
from helpers import make_data, write_ndf_dataset

from exactbatch import save_ndf
from exactbatch.errors import NdfError
from exactbatch.tools import common
from exactbatch.tools.common import CliError


@pytest.fixture(autouse=True)
def no_signal_left_noted():
    """A signal a test notes is forgotten after it: a later progress step would raise it."""
    yield
    common._noted.clear()


def test_a_cli_error_is_a_value_error():
    assert issubclass(CliError, ValueError)


# -- sizes, lists, bytes -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("512", 512),
        ("1", 1),  # the smallest size
        ("512b", 512),
        (" 2 k ", 2048),
        ("2KB", 2048),
        ("2kib", 2048),
        ("3M", 3 << 20),
        ("1.5GiB", 3 << 29),
        (".5g", 1 << 29),
        ("2.", 2),
        ("1T", 1 << 40),
    ],
)
def test_parse_size(text, want):
    assert common.parse_size(text) == want


@pytest.mark.parametrize("text", ["", "x", "1Ki", "1 XB", "-1", "1e3", "1KBB"])
def test_parse_size_refuses_what_is_no_size(text):
    with pytest.raises(ValueError) as e:
        common.parse_size(text)
    assert str(e.value) == f"expected a size such as 512MB, 1GB or 1.5GiB; got {text!r}"


@pytest.mark.parametrize("text", ["0", "0.4", "0KiB"])
def test_a_size_must_be_positive(text):
    with pytest.raises(ValueError) as e:
        common.parse_size(text)
    assert str(e.value) == f"a size must be positive; got {text!r}"


def test_parse_int_list():
    assert common.parse_int_list("64,1024, 4096") == [64, 1024, 4096]
    assert common.parse_int_list("1,,2,") == [1, 2]
    assert common.parse_int_list(7) == [7]
    for text in ("a", "1,2.5"):
        with pytest.raises(ValueError) as e:
            common.parse_int_list(text)
        assert str(e.value) == f"expected comma-separated integers (64,1024); got {text!r}"
        assert e.value.__suppress_context__
    for text in ("", ",", "0", "3,0", "-2"):
        with pytest.raises(ValueError) as e:
            common.parse_int_list(text)
        assert str(e.value) == f"expected comma-separated integers >= 1; got {text!r}"


@pytest.mark.parametrize(
    ("n", "want"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (5 << 20, "5.0 MiB"),
        (3 << 30, "3.0 GiB"),
        (2 << 40, "2.0 TiB"),
        (2048 << 40, "2048.0 TiB"),
        (-2048, "-2.0 KiB"),
    ],
)
def test_format_bytes(n, want):
    assert common.format_bytes(n) == want


# -- formats -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "want"),
    [
        ("a.csv", ","),
        ("a.tsv", "\t"),
        ("A.TAB", "\t"),
        ("a.tsv.gz", "\t"),
        ("a.tab.bz2", "\t"),
        ("a.tsv.zst", "\t"),
        ("a.TSV.LZ4", "\t"),
        ("a.csv.gz", ","),
        ("tsv", ","),
    ],
)
def test_csv_delimiter_by_name(path, want):
    assert common.csv_delimiter(path) == want
    assert common.csv_delimiter(path, ";") == ";"


@pytest.mark.parametrize(
    ("path", "want"),
    [
        ("a.ndf", "ndf"),
        ("a.parquet", "parquet"),
        ("a.PQ", "parquet"),
        ("a.npy", "npy"),
        ("a.csv.gz", "csv"),
        ("a.tsv", "csv"),
        ("a.tab", "csv"),
        ("a.txt", None),
        ("a.gz", None),
    ],
)
def test_named_format(path, want):
    assert common.named_format(path) == want


@pytest.mark.parametrize(
    ("name", "head", "want"),
    [
        ("data.csv", b"NDF1" + bytes(24), "ndf"),  # the magic wins over the name
        ("data.bin", b"PAR1rest", "parquet"),
        ("data", b"\x93NUMPY\x01\x00", "npy"),
        ("data.CSV", b"a,b\n1,2\n", "csv"),
        ("data.tsv.gz", b"\x1f\x8b", "csv"),
        ("data.ndf", b"", "ndf"),  # by the name: opening it says what is wrong
    ],
)
def test_detect_format_of_a_file(tmp_path, name, head, want):
    (tmp_path / name).write_bytes(head)
    assert common.detect_format(tmp_path / name) == want


def test_detect_format_of_an_unknown_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"hello there")
    with pytest.raises(CliError) as e:
        common.detect_format(path)
    assert str(e.value) == (
        f"{path}: unknown format (found first bytes b'hello '); expected an .ndf file, "
        "Parquet (a file or a folder), a .csv file or a .npy file"
    )


def test_detect_format_of_a_folder(tmp_path):
    assert common.detect_format(tmp_path) == "parquet"  # nothing in it: Parquet's message
    (tmp_path / "part-0.ndf").write_bytes(b"")
    assert common.detect_format(tmp_path) == "dataset"  # parts and no Parquet
    (tmp_path / "x.parquet").write_bytes(b"")
    assert common.detect_format(tmp_path) == "parquet"
    (tmp_path / "manifest.json").write_text("{}")
    assert common.detect_format(tmp_path) == "dataset"  # a manifest decides


def test_detect_format_of_what_is_missing_or_at_a_url(tmp_path):
    with pytest.raises(FileNotFoundError):
        common.detect_format(tmp_path / "missing.ndf")
    with pytest.raises(CliError, match="^reading URLs is not supported by this command"):
        common.detect_format("s3://bucket/data.ndf")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_detect_format_refuses_a_fifo_at_once(tmp_path):
    path = tmp_path / "data.ndf"
    os.mkfifo(path)  # never opened for writing: a read would wait forever
    with pytest.raises(NdfError) as e:
        common.detect_format(path)
    assert str(e.value) == (
        f"{path}: not a regular file: expected a data file, found a FIFO (named pipe)"
    )


def test_refuse_url():
    common.refuse_url("data/x.ndf")
    common.refuse_url("file:///tmp/x.ndf")
    with pytest.raises(CliError) as e:
        common.refuse_url("s3://b/x.ndf", "writing")
    assert str(e.value) == (
        "writing URLs is not supported by this command; got s3://b/x.ndf (exactbatch info "
        "reads an .ndf or a sharded dataset at a URL; copy the data to a local path "
        "for the rest)"
    )


@pytest.mark.parametrize(("path", "want"), [("o.ndf", "ndf"), ("O.PARQUET", "parquet")])
def test_output_format(path, want):
    assert common.output_format(path) == want


@pytest.mark.parametrize("path", ["o.csv", "o.npy", "o", "o.ndf.gz"])
def test_output_format_refuses_what_it_cannot_write(path):
    with pytest.raises(CliError) as e:
        common.output_format(path)
    assert str(e.value) == f"{path}: cannot tell what to write: name it .ndf or .parquet"


# -- outputs -----------------------------------------------------------------------


def test_check_output(tmp_path):
    dst = tmp_path / "out.ndf"
    assert common.check_output(dst, False) == str(dst)
    dst.write_bytes(b"old")
    with pytest.raises(CliError) as e:
        common.check_output(dst, False)
    assert str(e.value) == f"{dst}: already exists (pass --force to replace it)"
    assert common.check_output(dst, True) == str(dst)
    with pytest.raises(CliError) as e:
        common.check_output(tmp_path, True)
    assert str(e.value) == f"{tmp_path}: is a folder; give a file name to write"
    far = tmp_path / "no" / "out.ndf"
    with pytest.raises(CliError) as e:
        common.check_output(far, True)
    assert str(e.value) == f"{far}: folder {tmp_path / 'no'} does not exist"
    with pytest.raises(CliError, match="^writing URLs is not supported"):
        common.check_output("s3://b/out.ndf", True)


def test_check_dataset_output(tmp_path):
    dst = tmp_path / "ds"
    assert common.check_dataset_output(dst, False) == str(dst)  # made by the writer
    dst.mkdir()
    assert common.check_dataset_output(dst, False) == str(dst)  # empty
    (dst / "part-0.ndf").write_bytes(b"")
    with pytest.raises(CliError) as e:
        common.check_dataset_output(dst, False)
    assert str(e.value) == (
        f"{dst}: folder already exists and is not empty (pass --force to replace)"
    )
    assert common.check_dataset_output(dst, True) == str(dst)
    (tmp_path / "file").write_bytes(b"")
    for force in (False, True):
        with pytest.raises(CliError) as e:
            common.check_dataset_output(tmp_path / "file", force)
        assert str(e.value) == (
            f"{tmp_path / 'file'}: is a file; a sharded dataset is written into a folder"
        )
    far = tmp_path / "no" / "ds"
    with pytest.raises(CliError) as e:
        common.check_dataset_output(far, True)
    assert str(e.value) == f"{far}: folder {tmp_path / 'no'} does not exist"
    with pytest.raises(CliError, match="^writing URLs is not supported"):
        common.check_dataset_output("s3://b/ds", True)


# -- what info reads: local paths and URLs ---------------------------------------------


@pytest.fixture
def memory_fs():
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    fs.mkdir("/cm")
    yield fs
    fs.rm("/cm", recursive=True)


def test_input_format_of_a_local_path(tmp_path):
    path = tmp_path / "a.ndf"
    save_ndf(path, make_data(3, 2, 1))
    assert common.input_format(path) == "ndf"
    with pytest.raises(CliError) as e:
        common.input_format(path, {"anon": True})
    assert str(e.value) == f"{path}: storage options apply only to URLs (s3://..., gs://...)"
    assert common.input_format(path, None, "bench") == "ndf"


def test_input_format_at_a_url(tmp_path, memory_fs):
    save_ndf(tmp_path / "a.ndf", make_data(3, 2, 1))
    memory_fs.put(str(tmp_path / "a.ndf"), "/cm/a.ndf")
    assert common.input_format("memory://cm/a.ndf") == "ndf"
    assert common.input_format("memory://cm/a.ndf", {}) == "ndf"  # options reach the URL
    url = write_ndf_dataset("memory://cm/ds", [2, 3], d=2, l=1)
    assert common.input_format(url) == "dataset"
    assert common.input_format(url + "/") == "dataset"
    memory_fs.mkdir("/cm/empty")
    memory_fs.pipe("/cm/empty/x.bin", b"")
    assert common.input_format("memory://cm/empty") == "dataset"  # a prefix: reading says
    memory_fs.pipe("/cm/notes.txt", b"hello")
    with pytest.raises(CliError) as e:
        common.input_format("memory://cm/notes.txt", None, "bench")
    assert str(e.value) == (
        "memory://cm/notes.txt: at a URL bench reads .ndf files and sharded datasets; "
        "found first bytes b'hell'"
    )
    with pytest.raises(FileNotFoundError) as e:
        common.input_format("memory://cm/nothing.ndf")
    assert str(e.value) == "memory://cm/nothing.ndf: no such file or dataset"


def test_a_filesystem_that_fails_is_a_cli_error(monkeypatch):
    class Broken:
        def exists(self, where):
            raise RuntimeError("no endpoint")

    from exactbatch import urls

    monkeypatch.setattr(urls, "url_to_fs", lambda path, so: (Broken(), "b/x.ndf"))
    with pytest.raises(CliError) as e:
        common.input_format("s3://b/x.ndf", {"key": "k"})
    assert str(e.value) == (
        "s3://b/x.ndf: cannot read it: RuntimeError: no endpoint (check the URL and "
        "--storage-options)"
    )
    assert isinstance(e.value.__cause__, RuntimeError)
    for error in (OSError("gone"), ImportError("no s3fs"), ValueError("bad")):

        class Raising(Broken):
            def exists(self, where, error=error):
                raise error

        monkeypatch.setattr(urls, "url_to_fs", lambda path, so: (Raising(), "b/x.ndf"))
        with pytest.raises(type(error)) as e:
            common.input_format("s3://b/x.ndf")
        assert e.value is error  # as raised: the command's funnel words them


def test_open_ndf_input(tmp_path):
    x, y = make_data(5, 2, 1)
    save_ndf(tmp_path / "a.ndf", (x, y))
    with common.open_ndf_input(tmp_path / "a.ndf", "ndf") as f:
        assert (f.n, f.d, f.l) == (5, 2, 1) and not hasattr(f, "parts")
    url = write_ndf_dataset(str(tmp_path / "ds"), [2, 3], d=2, l=1)
    with common.open_ndf_input(url, "dataset") as ds:
        assert ds.n == 5 and len(ds.parts) == 2


def test_open_ndf_input_at_an_s3_url_uses_its_storage_options(tmp_path, s3_server):
    """A single .ndf and a dataset at a URL that needs storage options (the tests' S3
    server's endpoint and keys) open with them: the rows their local copies hold."""
    x, y = make_data(5, 2, 1)
    save_ndf(tmp_path / "a.ndf", (x, y))
    write_ndf_dataset(str(tmp_path / "ds"), [2, 3], d=2, l=1)
    root = f"s3://{s3_server.bucket}/open-input"
    s3_server.fs.put(str(tmp_path / "a.ndf"), f"{root}/a.ndf")
    s3_server.fs.put(str(tmp_path / "ds"), f"{root}/ds", recursive=True)
    with common.open_ndf_input(f"{root}/a.ndf", "ndf", s3_server.so) as f:
        assert (f.n, f.d, f.l) == (5, 2, 1)
        np.testing.assert_array_equal(f.read_rows(np.arange(5))[0], x)
    with common.open_ndf_input(f"{root}/ds", "dataset", s3_server.so) as ds:
        assert ds.n == 5 and len(ds.parts) == 2


def test_parquet_files_and_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    t = pa.table({"a": np.arange(3.0), "b": np.arange(3, dtype=np.int32), "year": [1, 2, 3]})
    pq.write_table(t, tmp_path / "one.parquet")
    names, types, keys = common.parquet_columns(tmp_path / "one.parquet")
    assert names == ["a", "b", "year"] and keys == set()
    assert types == {"a": pa.float64(), "b": pa.int32(), "year": pa.int64()}
    folder = tmp_path / "hive"
    for year in (2023, 2024):
        (folder / f"year={year}" / "region=eu").mkdir(parents=True)
        pq.write_table(t.drop(["year"]), folder / f"year={year}" / "region=eu" / "p.parquet")
    files = common.parquet_files(folder)
    assert len(files) == 2 and all(f.endswith("p.parquet") for f in files)
    assert files == sorted(files)
    names, types, keys = common.parquet_columns(folder)
    assert names == ["a", "b", "year", "region"] and keys == {"year", "region"}
    assert types["a"] == pa.float64() and types["year"] == pa.int32()
    # a key the files hold as a column too is the files' column, not a partition key
    both = tmp_path / "both" / "year=2024"
    both.mkdir(parents=True)
    pq.write_table(t, both / "p.parquet")
    names, types, keys = common.parquet_columns(tmp_path / "both")
    assert names == ["a", "b", "year"] and keys == set() and types["year"] == pa.int64()


# -- Ctrl-C and progress bars ------------------------------------------------------


def test_catch_signals_turns_a_signal_into_keyboard_interrupt_and_notes_it():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    common.check_interrupt()  # nothing noted
    with common.catch_signals():
        assert signal.getsignal(signal.SIGINT) is common._note
        assert signal.getsignal(signal.SIGTERM) is common._note
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs at the next check for signals
                time.sleep(0.001)
        with pytest.raises(KeyboardInterrupt):  # noted: raised again where checked
            common.check_interrupt()
        with pytest.raises(KeyboardInterrupt):
            common.progress(enabled=False).update()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    with pytest.raises(KeyboardInterrupt):  # still noted until the next command begins
        common.check_interrupt()
    with common.catch_signals():
        common.check_interrupt()  # cleared


def test_a_second_signal_while_the_first_unwinds_is_only_noted():
    with common.catch_signals():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            common._note(signal.SIGINT, None)  # no second KeyboardInterrupt
        assert common._noted == [signal.SIGINT]
        with pytest.raises(KeyboardInterrupt):
            common._note(signal.SIGINT, None)
        assert common._noted == [signal.SIGINT, signal.SIGINT]


def test_an_ignored_signal_stays_ignored():
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with common.catch_signals():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is common._note
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)


def test_catch_signals_off_the_main_thread_sets_no_handler():
    import threading

    seen = []

    def body():
        with common.catch_signals():
            seen.append(signal.getsignal(signal.SIGTERM))

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen and seen[0] is not common._note


def test_progress_bars(capsys):
    off = common.progress(10, "x", enabled=False)
    assert off._bar is None
    off.update(3)
    off.close()
    pytest.importorskip("tqdm")
    with common.progress(10, "reading", "parts") as pb:
        bar = pb._bar
        assert (bar.total, bar.desc, bar.unit) == (10, "reading", "parts")
        assert bar.unit_scale is True and bar.mininterval == 0.25 and bar.leave is True
        pb.update(4)
        pb.update()
        assert bar.n == 5
    with common.progress(3, unit_scale=False) as plain, common.progress(3) as rows:
        assert plain._bar.unit_scale is False and rows._bar.unit == "rows"
        assert rows._bar.desc == ""  # no label unless given
    err = capsys.readouterr().err  # on stderr, left on screen when done
    assert "reading:  50%" in err and "5.00/10.0" in err


def test_progress_without_tqdm(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tqdm", None)
    assert common.progress(10, "x")._bar is None
