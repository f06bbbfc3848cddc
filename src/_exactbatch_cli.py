"""What the ``exactbatch`` command runs: :func:`exactbatch.cli.main`, quiet on an early Ctrl-C.

Importing :mod:`exactbatch.cli` imports the package, NumPy first: a good
fraction of a second in which a Ctrl-C would print a traceback of the import
machinery. This module lies outside the package so that it runs before that
import: until ``main`` takes the signals over, SIGINT ends the process at
once with one line on stderr and status 130 (nothing has been written yet).
A SIGINT that is ignored (a job started in the background) stays ignored.
"""

import os
import signal
import sys


def _quit(signum, frame):
    try:
        sys.stdout.flush()
        sys.stderr.write("exactbatch: interrupted\n")
        sys.stderr.flush()
    finally:
        os._exit(130)


def main() -> int:
    """Run the command with ``sys.argv[1:]``; return the exit status."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _quit)
    from exactbatch.cli import main as run

    return run()


if __name__ == "__main__":
    sys.exit(main())
