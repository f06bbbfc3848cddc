"""What the ``exactbatch`` command runs: :func:`exactbatch.cli.main`, quiet on an early Ctrl-C.

Importing :mod:`exactbatch.cli` imports the package, NumPy first: a good
fraction of a second in which a Ctrl-C would print a traceback of the import
machinery. This module lies outside the package, imports nothing but what
Python has loaded already (``_signal`` is built in), and takes SIGINT over as its
first statement, when it is imported (by the console script, before ``main`` is called): from then
until ``main`` hands the signals to the command, SIGINT ends the process at
once with one line on stderr and status 130 (nothing has been written yet).
A SIGINT that is ignored (a job started in the background) stays ignored.

Before this module runs, Python starts (``site``, the ``.pth`` files) and the
console script the installer wrote imports ``re``: no code of exactbatch's
runs yet, and a Ctrl-C there is Python's own (a traceback of its start-up).

``EXACTBATCH_PAUSE_AT`` (for the tests): ``launcher`` (before the command's
imports) or ``cli`` (after them, before the command runs): the launcher
writes ``exactbatch: paused at PHASE`` to stderr there and waits up to a
minute, so that a test's signal lands in a known phase.
"""

import _signal  # the C module: ``signal`` would first build its enums, milliseconds long
import os  # (loaded by Python's start-up already, as sys is)
import sys


def _quit(signum, frame):
    try:
        sys.stdout.flush()
        sys.stderr.write("exactbatch: interrupted\n")
        sys.stderr.flush()
    finally:
        os._exit(130)


def _take_sigint() -> None:
    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, _quit)


_take_sigint()  # as this module is imported: the earliest moment exactbatch's code runs


def _pause(phase: str) -> None:
    if os.environ.get("EXACTBATCH_PAUSE_AT") == phase:
        import time

        sys.stderr.write(f"exactbatch: paused at {phase}\n")
        sys.stderr.flush()
        # in short sleeps: a signal that lands between the write and a sleep's start
        # sets a flag the sleep does not see (it would wait out the whole minute); the
        # loop runs the handler within a tenth of a second
        for _ in range(600):
            time.sleep(0.1)


def main() -> int:
    """Run the command with ``sys.argv[1:]``; return the exit status."""
    _take_sigint()  # (run as ``python -m``, or imported where SIGINT was changed since)
    _pause("launcher")
    from exactbatch.cli import main as run

    _pause("cli")
    return run()


if __name__ == "__main__":
    sys.exit(main())
