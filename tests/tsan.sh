#!/usr/bin/env bash
# `make tsan`: the compiled core built with -fsanitize=thread in build/tsan/ (this
# checkout's own build is not touched), and the tests of its threads run on it under
# ThreadSanitizer: a data race or a lock misuse in the C sources fails the run, printing
# the report. Not part of `make test` (a few minutes: TSan slows the copies 5-15x).
# Needs gcc's TSan runtime (Debian, Ubuntu: `apt-get install libtsan2`, which
# build-essential's gcc pulls in). PY: the Python to use (default: python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
W=build/tsan
LIB=$(gcc -print-file-name=libtsan.so)
if [ ! -e "$LIB" ]; then
    echo "make tsan: gcc's ThreadSanitizer runtime (libtsan.so) is missing:" \
        "apt-get install libtsan2 (Debian, Ubuntu)" >&2
    exit 2
fi
rm -rf "$W"
mkdir -p "$W"
cp -r src setup.py pyproject.toml README.md "$W"/
rm -f "$W"/src/exactbatch/_core*.so
(cd "$W" && CFLAGS="-fsanitize=thread -g -O1" LDFLAGS="-fsanitize=thread" \
    "$PY" setup.py --quiet build_ext --inplace >build.log 2>&1) ||
    { cat "$W/build.log" >&2; exit 1; }
# The interpreter is not instrumented: TSan is preloaded so that it sees every thread
# and lock from the start. halt_on_error: the first report fails the run. die_after_fork=0:
# the test of a forked child starts threads there (the core resets its pool at a fork;
# TSan cannot follow a multi-threaded fork, and would end the child).
# (Not tests/ndf/test_guard.py: its faults, SIGBUS in a copy left by siglongjmp from the
# handler, end a process under TSan without a report: TSan defers signals it intercepts.)
# The pool (_core_split.c) over arrays, a file's mapping and a dataset's parts (_core_copy.c,
# _core_parts.c), the loader's threads, and the categorical codes' GIL-free lookups run
# on several threads at once (_core_codes.c).
TESTS=${TSAN_TESTS:-"tests/test_core_split.py tests/loader/test_threads.py
    tests/sources/test_string_keys.py::test_one_vocabulary_codes_chunks_on_several_threads_at_once"}
# shellcheck disable=SC2086
LD_PRELOAD="$LIB" \
    TSAN_OPTIONS="halt_on_error=1 exitcode=66 report_signal_unsafe=0 die_after_fork=0 ${TSAN_OPTIONS:-}" \
    PYTHONPATH="$W/src" EXACTBATCH_PURE=0 \
    "$PY" -m pytest -p no:cacheprovider -n 0 -q -p no:randomly $TESTS "$@"
