"""Which backend really serves the readers: the checks behind the backend fixtures.

``kernels.use_backend`` and ``EXACTBATCH_PURE`` choose the backend; every
reader then gets its kernel from one of the factories of
:mod:`exactbatch.kernels`. A switch that a factory ignored would go unseen by
tests that compare the two backends' batches (both sides would run the same
kernel), so each switch made by the fixtures in ``conftest.py`` is followed by
:func:`check_readers`, which asks every factory, and an ``.ndf`` file opened
for real, which kernel it hands out.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import tempfile

import numpy as np

from exactbatch import backend, kernels, open_ndf, save_ndf
from exactbatch.loader.telemetry import Telemetry
from exactbatch.order import EpochBijection
from exactbatch.parts import memory_parts, parts_rows

_PURE_WORDS = ("1", "true", "yes", "on")  # EXACTBATCH_PURE's words for the pure path
_PROBE = (np.zeros((3, 2)), np.zeros((3, 1)))  # the rows of the probe .ndf file


def built() -> bool:
    """Is the compiled core built (importable), whichever backend runs?"""
    return importlib.util.find_spec("exactbatch._core") is not None


def expected_backend() -> str:
    """The backend this process must run on: the pure path when ``EXACTBATCH_PURE``
    asks for it or the core is not built, else the compiled core."""
    pure = os.environ.get("EXACTBATCH_PURE", "").strip().lower() in _PURE_WORDS
    return "compiled" if built() and not pure else "numpy"


def _ndf_path() -> str:
    """One probe file a user, shared by every test process: a folder made per process
    was left behind by each process that exits without its atexit hooks (mutmut's
    forked runs made thousands). save_ndf renames a whole file into place, so a
    process writing it never shows another a part of it."""
    path = os.path.join(tempfile.gettempdir(), f"exactbatch-backend-probe-{os.getuid()}.ndf")
    try:
        with open_ndf(path) as f:
            if f.n == len(_PROBE[0]):
                return path
    except (OSError, ValueError):
        pass  # absent or not the probe: written below
    save_ndf(path, _PROBE)
    return path


def _columns_compiled() -> bool:
    """Does the compiled core copy columns into rows now (``kernels.columns_into``, which
    picks its backend at each call)? The compiled copy refuses an int64 column (only
    types float64 holds exactly); the NumPy twin casts it."""
    try:
        kernels.columns_into([np.zeros(1, dtype=np.int64)], 0, np.empty((1, 1)))
    except TypeError:
        return True
    return False


def readers() -> dict[str, bool]:
    """For each kernel a reader can get, whether the compiled core serves it now (a C
    function reads, or the factory returns a compiled object rather than None)."""
    x, y = np.zeros((3, 2)), np.zeros((3, 1))
    path = _ndf_path()
    fd = os.open(path, os.O_RDONLY)
    try:
        mapped = kernels.map_file(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    with open_ndf(path) as f:
        file_kernel = f.kernel_rows()
    return {
        "memory_rows": inspect.isbuiltin(kernels.memory_rows(x, y).read),
        "pair_check": inspect.isbuiltin(kernels.pair_check()),
        "map_file": mapped is not None,
        "file_rows (an open .ndf file's)": file_kernel is not None,
        "parts_rows": parts_rows(np.array([0, 3], dtype=np.int64), 2, 1) is not None,
        "memory_parts (an elastic stream's chunks)": inspect.isbuiltin(
            memory_parts(np.array([0, 3], dtype=np.int64), 2, 1).read
        ),
        # the order's keyed bijection takes the core's kernel when it is made
        "bijection (EpochBijection's)": EpochBijection(10, seed=0, epoch=0)._c is not None,
        "columns_into (streams' and Parquet's column chunks)": _columns_compiled(),
        # a wait counted (the loader's telemetry takes the core's when it is made)
        "Telemetry's wait count": inspect.isbuiltin(Telemetry()._count),
    }


def check_readers(name: str) -> None:
    """``backend()`` says ``name``, and every kernel a reader gets is that backend's:
    an AssertionError naming those that are not."""
    assert backend() == name, f"backend() is {backend()!r}, expected {name!r}"
    wrong = [k for k, compiled in readers().items() if compiled != (name == "compiled")]
    assert not wrong, f"on the {name} backend, the other backend serves: {', '.join(wrong)}"


@contextlib.contextmanager
def on_backend(name: str):
    """Readers made inside use backend ``name`` (checked: :func:`check_readers`); the
    backend before is put back after. ``ValueError`` where ``name`` is not built."""
    before = kernels.use_backend(name)
    try:
        check_readers(name)
        yield name
    finally:
        kernels.use_backend(before)
