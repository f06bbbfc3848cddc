"""The optional dependencies, imported on first use.

exactbatch needs only NumPy; each optional package (pyarrow, fsspec, JAX,
NumPyro, PyMC, PyTorch, Dask, tqdm, matplotlib) is imported where it is
first needed, through :func:`need`, so that its absence is one error saying
what needs it and what to install (an extra of ``pyproject.toml``, or the
package itself).
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["need"]


def need(
    module: str,
    *,
    by: str,
    package: str,
    extra: str | None = None,
    error: type[Exception] = ImportError,
) -> ModuleType:
    """The module ``module`` (imported); where it cannot be imported, ``error`` (an
    ``ImportError`` unless told) reading ``"{by} needs {package}: pip install ..."``,
    naming the extra ``exactbatch[extra]`` or else ``package``, chained to the
    original ImportError."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        install = f"'exactbatch[{extra}]'" if extra else package
        raise error(f"{by} needs {package}: pip install {install}") from e
