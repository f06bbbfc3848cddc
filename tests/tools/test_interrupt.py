"""Ctrl-C and SIGTERM during `exactbatch convert` and `exactbatch shuffle`, in real processes.

The law: a signal at any moment before the output is renamed into place gives
exit status 130 and one line on stderr (no traceback), leaves no output and no
temporary file, and an existing destination keeps its old bytes, even with
--force. Each trial chooses its moment by watching the child (its -X importtime
lines on stderr, its temporary file in the output folder), and stops it with
SIGSTOP to check that the moment is still before the end of writing before the
signal is sent; so no trial depends on how fast the machine is.
"""

from __future__ import annotations

import os
import pathlib
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from exactbatch import save_ndf, save_ndf_dataset
from exactbatch.cli import main
from exactbatch.ndf import HEADER_SIZE
from exactbatch.ndf.write import NdfWriter
from exactbatch.tools import convert_inputs

pa = pytest.importorskip("pyarrow")
pcsv = pytest.importorskip("pyarrow.csv")
pq = pytest.importorskip("pyarrow.parquet")

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="watches the child through Linux /proc"
)

N, D = 600_000, 4  # about 0.2 s of writing for each input: time to be interrupted
FULL = HEADER_SIZE + 8 * N * D  # the size of the .ndf once every row is written
PRECIOUS = b"the file the user meant to keep"
# What the `exactbatch` console script runs (pyproject.toml's [project.scripts]).
ENTRY = "import sys, _exactbatch_cli; sys.exit(_exactbatch_cli.main())"
# What the installer writes for it (pip's script: `re` first, then the entry point).
CONSOLE_SCRIPT = "import re, sys; from _exactbatch_cli import main; sys.exit(main())"
DEADLINE = 60.0


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    x = np.random.default_rng(0).random((N, D)).round(6)
    table = pa.table({f"c{j}": x[:, j] for j in range(D)})
    pcsv.write_csv(table, folder / "big.csv")
    pq.write_table(table, folder / "big.parquet", row_group_size=50_000)
    save_ndf(folder / "big.ndf", x)
    return folder


def start(args, importtime=False) -> subprocess.Popen:
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.Popen(
        [sys.executable, *flags, "-c", ENTRY, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # A test run started in the background by a shell inherits SIGINT ignored (and
        # the command then leaves it ignored): give the child the default, as a terminal does.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_until(cond, proc, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not cond():
        if proc.poll() is not None:
            pytest.fail(f"the command ended before {what}: {proc.communicate()}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {DEADLINE} s")
        time.sleep(0.001)


def wait_for_stderr(proc, needle: bytes) -> bytes:
    """Read the child's stderr until ``needle`` appears; what was read."""
    seen, deadline = b"", time.monotonic() + DEADLINE
    while needle not in seen:
        ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(proc.stderr.fileno(), 1 << 16) if ready else b""
        if not chunk:
            pytest.fail(f"no {needle!r} on stderr: {seen[-2000:]!r}")
        seen += chunk
    return seen


def stop(proc) -> None:
    """SIGSTOP the child and wait until the kernel has stopped it."""
    os.kill(proc.pid, signal.SIGSTOP)

    def stopped():
        with open(f"/proc/{proc.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"

    wait_until(stopped, proc, "the child stopped")


def temp_files(folder, dst) -> list:
    """Files other than ``dst`` in ``folder`` and in the folders there (a shuffle's buckets)."""
    return [
        os.path.join(root, name)
        for root, _, names in os.walk(folder)
        for name in names
        if os.path.join(root, name) != str(dst)
    ]


def size(path) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:  # renamed away between the listing and the stat
        return -1


def signal_and_finish(proc, sig, seen=b"") -> tuple[int, str]:
    proc.send_signal(sig)
    os.kill(proc.pid, signal.SIGCONT)  # a stopped child takes the signal as it resumes
    _, err = proc.communicate(timeout=DEADLINE)
    return proc.returncode, (seen + err).decode(errors="replace")


def check_interrupted(rc, err, folder, dst, old) -> None:
    assert rc == 130, err
    lines = [s for s in err.splitlines() if not s.startswith("import time:")]
    assert sum("interrupted" in s for s in lines) == 1, err
    assert "Traceback" not in err and "Exception" not in err, err
    assert os.listdir(folder) == ([dst.name] if old is not None else []), "left behind"
    if old is not None:
        assert dst.read_bytes() == old


def run_trial(args, folder, dst, moment, sig=signal.SIGINT, full=FULL, old=PRECIOUS):
    """Start ``exactbatch ARGS``, signal it at ``moment``; check the law."""
    if old is not None:
        dst.write_bytes(old)
    importtime = moment in ("starting", "importing pyarrow")
    proc = start([*args, "--force"], importtime=importtime)
    seen = b""
    try:
        if moment == "starting":  # importing NumPy: before the command's main() runs
            seen = wait_for_stderr(proc, b"numpy")
        elif moment == "importing pyarrow":  # in main(), before reading
            seen = wait_for_stderr(proc, b"pyarrow")
        else:
            at = {"file created": 0, "half written": full // 2}.get(moment, HEADER_SIZE + 1)
            # "scattering": a shuffle's bucket files, in a folder of their own in ``folder``
            inside = moment == "scattering"

            def reached():
                files = temp_files(folder, dst)
                return any(
                    (os.path.dirname(t) != str(folder)) == inside and size(t) >= at for t in files
                )

            wait_until(reached, proc, f"{moment} (a temporary file of {at} bytes)")
        stop(proc)
        # Still before the end of writing: no output renamed into place, none complete.
        if old is not None:
            assert dst.read_bytes() == old, "the output was renamed into place before the signal"
        sizes = [size(t) for t in temp_files(folder, dst) if os.path.dirname(t) == str(folder)]
        assert max(sizes, default=0) < full, "the output was complete before the signal"
        rc, err = signal_and_finish(proc, sig, seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    check_interrupted(rc, err, folder, dst, old)


CONVERSIONS = [
    ("csv", "starting"),
    ("csv", "importing pyarrow"),
    ("csv", "file created"),
    ("csv", "rows written"),
    ("csv", "half written"),
    ("parquet", "file created"),
    ("parquet", "rows written"),
]


@pytest.mark.parametrize("fmt, moment", CONVERSIONS, ids=[" ".join(c) for c in CONVERSIONS])
def test_interrupted_conversion_keeps_the_old_file(data, tmp_path, fmt, moment):
    """SIGINT at each moment of a conversion with --force: the old file stays, nothing else."""
    dst = tmp_path / "out.ndf"
    run_trial(["convert", data / f"big.{fmt}", dst], tmp_path, dst, moment)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_conversion_without_a_destination_leaves_nothing(data, tmp_path, sig):
    dst = tmp_path / "out.ndf"
    args = ["convert", data / "big.csv", dst, "-q"]
    run_trial(args, tmp_path, dst, "rows written", sig, old=None)


def test_interrupted_conversion_to_parquet(data, tmp_path):
    """.ndf -> Parquet: the temporary Parquet file is removed, the old file kept."""
    dst = tmp_path / "out.parquet"
    args = ["convert", data / "big.ndf", dst, "-q"]
    run_trial(args, tmp_path, dst, "rows written", full=1 << 62)


@pytest.mark.parametrize("moment", ["scattering", "rows written"])
def test_interrupted_shuffle_leaves_no_buckets(data, tmp_path, moment):
    """A shuffle through bucket files, interrupted while it scatters rows to buckets or
    while it writes the output: no bucket, no output, and the old file is kept."""
    dst = tmp_path / "out.ndf"
    args = ["shuffle", data / "big.ndf", dst, "--memory", "4MB"]
    run_trial(args, tmp_path, dst, moment)


DATASET_MOMENTS = [
    ("a part begun", signal.SIGINT),
    ("a part renamed", signal.SIGINT),
    ("all parts but one", signal.SIGINT),
    ("a part renamed", signal.SIGTERM),
]


@pytest.mark.parametrize(
    "moment, sig", DATASET_MOMENTS, ids=[f"{m} {s.name}" for m, s in DATASET_MOMENTS]
)
def test_interrupted_conversion_to_a_dataset_keeps_the_old_dataset(data, tmp_path, moment, sig):
    """convert --part-rows --force over an existing dataset, signalled while the first
    part is written, just after a part was renamed into place, or with all parts but one
    written: exit 130, one line, and the folder exactly as it was - the old dataset's
    manifest and parts, no new part, no temporary file."""
    dst = tmp_path / "ds"
    save_ndf_dataset(dst, [np.ones((5, D)), np.zeros((7, D))])
    before = {name: (dst / name).read_bytes() for name in os.listdir(dst)}
    proc = start(["convert", data / "big.ndf", dst, "--part-rows", N // 6, "--force", "-q"])

    def new(temps: bool) -> int:
        names = [e for e in os.listdir(dst) if e not in before]
        return sum(1 for e in names if e.endswith(".tmp") == temps)

    want = {"a part begun": (True, 1), "a part renamed": (False, 1)}.get(moment, (False, 5))
    try:
        wait_until(lambda: new(want[0]) >= want[1], proc, moment)
        stop(proc)
        assert (dst / "manifest.json").read_bytes() == before["manifest.json"]
        rc, err = signal_and_finish(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert rc == 130, err
    assert sum("interrupted" in s for s in err.splitlines()) == 1 and "Traceback" not in err
    assert {name: (dst / name).read_bytes() for name in os.listdir(dst)} == before


# -- a Ctrl-C that library code swallows ---------------------------------------------------


def _swallow_a_sigint():
    """What pyarrow did when its first conversion to NumPy imported pandas: the
    KeyboardInterrupt of a Ctrl-C raised inside library code is discarded."""
    try:
        signal.raise_signal(signal.SIGINT)
    except KeyboardInterrupt:
        pass


SWALLOWED = [
    ("csv", convert_inputs, "_fill_columns"),  # in the first block
    ("parquet", convert_inputs, "_fill_columns"),
    ("csv", NdfWriter, "commit"),  # after the last block
    ("ndf", pq.ParquetWriter, "close"),  # .ndf -> Parquet, after the last row group
    ("shuffle", NdfWriter, "commit"),
]


@pytest.mark.parametrize("src, owner, name", SWALLOWED, ids=[f"{c[0]} {c[2]}" for c in SWALLOWED])
def test_a_swallowed_ctrl_c_still_stops_the_write(tmp_path, monkeypatch, capsys, src, owner, name):
    """A Ctrl-C whose KeyboardInterrupt some library discards is still an interruption:
    exit 130, the old file kept, no temporary file (it is noted when it arrives, and
    raised again at the next progress step and before the rename)."""
    x = np.arange(3000.0).reshape(1000, 3)
    table = pa.table({f"c{j}": x[:, j] for j in range(3)})
    pcsv.write_csv(table, tmp_path / "in.csv")
    pq.write_table(table, tmp_path / "in.parquet")
    save_ndf(tmp_path / "in.ndf", x)
    original = getattr(owner, name)

    def swallowing(*args, **kwargs):
        _swallow_a_sigint()
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, swallowing)
    out = tmp_path / "out"
    out.mkdir()
    dst = out / ("out.parquet" if src == "ndf" else "out.ndf")
    dst.write_bytes(PRECIOUS)
    if src == "shuffle":
        argv = ["shuffle", str(tmp_path / "in.ndf"), str(dst)]
    else:
        argv = ["convert", str(tmp_path / f"in.{src}"), str(dst)]
    assert main([*argv, "--force", "-q"]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err
    assert os.listdir(out) == [dst.name] and dst.read_bytes() == PRECIOUS


def test_conversions_do_not_import_pandas(data, tmp_path):
    """pyarrow imports pandas on its first conversion between Arrow and NumPy, which
    costs a fraction of a second and swallowed Ctrl-C: the command converts through
    the Arrow buffers instead (CSV, Parquet, and .ndf -> Parquet)."""
    script = (
        "import sys; from exactbatch.cli import main\n"
        "for src, dst in zip(sys.argv[1::2], sys.argv[2::2]):\n"
        "    assert main(['convert', src, dst, '-q']) == 0\n"
        "print('pandas imported:', 'pandas' in sys.modules)\n"
    )
    pairs = [
        (data / "big.csv", tmp_path / "a.ndf"),
        (data / "big.parquet", tmp_path / "b.ndf"),
        (data / "big.ndf", tmp_path / "c.parquet"),
    ]
    args = [str(p) for pair in pairs for p in pair]
    p = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == "pandas imported: False"


def test_an_ignored_sigint_stays_ignored(tmp_path, monkeypatch):
    """A command started with SIGINT ignored (by a shell, in the background) keeps it
    ignored, as Python itself does: the conversion completes."""
    pcsv.write_csv(pa.table({"a": np.arange(10.0)}), tmp_path / "in.csv")
    original = convert_inputs._fill_columns

    def interrupted(*args):
        signal.raise_signal(signal.SIGINT)
        return original(*args)

    monkeypatch.setattr(convert_inputs, "_fill_columns", interrupted)
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert main(["convert", str(tmp_path / "in.csv"), str(tmp_path / "o.ndf"), "-q"]) == 0
    finally:
        signal.signal(signal.SIGINT, old)
    assert (tmp_path / "o.ndf").exists()


@pytest.mark.parametrize("delay", [0.0, 0.02])
@pytest.mark.parametrize("phase", ["launcher", "cli"])
def test_a_ctrl_c_as_the_command_starts_is_one_line_and_130(tmp_path, phase, delay):
    """Ctrl-C while the launcher imports the command (``launcher``), or just after
    (``cli``, before the command takes the signals): exit 130, one line, no traceback.
    EXACTBATCH_PAUSE_AT holds the child in the phase, so the signal lands there on any
    machine."""
    env = {**os.environ, "EXACTBATCH_PAUSE_AT": phase}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CONSOLE_SCRIPT,
            "info",
            str(tmp_path / "none.ndf"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen = wait_for_stderr(proc, f"paused at {phase}".encode())
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=DEADLINE)
    err = (seen + err).decode()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.rstrip().endswith("exactbatch: interrupted"), err
    assert out == b""


def test_the_console_script_is_the_quiet_launcher():
    """The `exactbatch` script runs _exactbatch_cli.main (what ENTRY runs above), which
    handles a Ctrl-C during the imports before exactbatch.cli.main takes over."""
    tomllib = pytest.importorskip("tomllib")
    pyproject = pathlib.Path(__file__).parents[2] / "pyproject.toml"
    with open(pyproject, "rb") as f:
        assert tomllib.load(f)["project"]["scripts"]["exactbatch"] == "_exactbatch_cli:main"


@pytest.mark.parametrize("where", ["abort", "message"])
def test_a_second_ctrl_c_does_not_cut_the_cleanup_short(tmp_path, monkeypatch, capsys, where):
    """Ctrl-C pressed again while the first one unwinds (the temporary file being
    removed, the message printed): still exit 130, one line, nothing left behind."""
    pcsv.write_csv(pa.table({"a": np.arange(10.0)}), tmp_path / "in.csv")
    out = tmp_path / "out"
    out.mkdir()
    (out / "o.ndf").write_bytes(PRECIOUS)
    monkeypatch.setattr(convert_inputs, "_fill_columns", lambda *a: signal.raise_signal(2))
    if where == "abort":
        original = NdfWriter.abort

        def abort(self):
            signal.raise_signal(signal.SIGINT)
            original(self)

        monkeypatch.setattr(NdfWriter, "abort", abort)
    else:
        import exactbatch.cli

        def print_twice(*args, **kwargs):
            signal.raise_signal(signal.SIGINT)
            print(*args, **kwargs)

        monkeypatch.setattr(exactbatch.cli, "print", print_twice, raising=False)
    argv = ["convert", str(tmp_path / "in.csv"), str(out / "o.ndf"), "-q", "--force"]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert err.count("interrupted") == 1 and "Traceback" not in err
    assert os.listdir(out) == ["o.ndf"] and (out / "o.ndf").read_bytes() == PRECIOUS


def test_the_launcher_takes_sigint_as_it_is_imported():
    """The console script imports _exactbatch_cli before it calls main: the handler is in
    place from the import on, not from the call."""
    code = "import signal, _exactbatch_cli; print(signal.getsignal(signal.SIGINT).__name__)"
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert run.stdout.strip() == "_quit", run.stderr
