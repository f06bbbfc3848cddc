"""The optional dependencies (exactbatch.extras): one guard, the same message everywhere.

Law: where an optional package is missing, the feature that needs it raises
one error (an ImportError, a CliError in the command line) that names the
feature, the package and what to install; and every such guard in the package
is :func:`exactbatch.extras.need` (none is written out again).
"""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest

from exactbatch.adapters import dask_plan, numpyro, numpyro_adam, pymc, torch
from exactbatch.adapters import jax as jax_adapter
from exactbatch.adapters import ray as ray_adapter
from exactbatch.extras import need
from exactbatch.sources import (
    arrow_ipc,
    arrow_table,
    duckdb_relations,
    hf_datasets,
    parquet,
    polars_frames,
)
from exactbatch.tools import bench, convert_inputs, info, mixing_inputs, mixing_plot
from exactbatch.tools.common import CliError
from exactbatch.urls import import_fsspec

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "exactbatch"


def _enter(cm):
    with cm:
        pass


# (what fails, the package hidden, the error, its message)
CASES = [
    (
        lambda p: parquet.parquet_source(p / "a.parquet"),
        "pyarrow",
        ImportError,
        "parquet_source needs pyarrow: pip install 'exactbatch[parquet]'",
    ),
    (
        lambda p: arrow_ipc.arrow_file(p / "a.arrow"),
        "pyarrow",
        ImportError,
        "arrow_file needs pyarrow: pip install 'exactbatch[arrow]'",
    ),
    (
        lambda p: arrow_table.arrow_source(None),
        "pyarrow",
        ImportError,
        "arrow_source needs pyarrow: pip install 'exactbatch[arrow]'",
    ),
    (
        lambda p: polars_frames.polars_source(None),
        "polars",
        ImportError,
        "polars_source needs polars: pip install 'exactbatch[polars]'",
    ),
    (
        lambda p: hf_datasets.hf_source(None),
        "datasets",
        ImportError,
        "hf_source needs datasets: pip install 'exactbatch[hf]'",
    ),
    (
        lambda p: duckdb_relations.duckdb_source(None),
        "duckdb",
        ImportError,
        "duckdb_source needs duckdb: pip install 'exactbatch[duckdb]'",
    ),
    (
        lambda p: import_fsspec(),
        "fsspec",
        ImportError,
        "reading URLs needs fsspec (and s3fs for s3://): pip install 'exactbatch[remote]'",
    ),
    (
        lambda p: jax_adapter._jax(),
        "jax",
        ImportError,
        "exactbatch.jax needs JAX: pip install 'exactbatch[jax]'",
    ),
    (
        lambda p: numpyro._svi(),
        "numpyro",
        ImportError,
        "exactbatch.numpyro needs NumPyro: pip install 'exactbatch[numpyro]'",
    ),
    (
        lambda p: numpyro_adam.default_optim(),
        "optax",
        ImportError,
        "exactbatch.numpyro.fit's default schedule (optim=None) needs optax: "
        "pip install 'exactbatch[numpyro]'",
    ),
    (
        lambda p: _enter(numpyro._bar(True, 3)),
        "tqdm",
        ImportError,
        "progress_bar=True needs tqdm: pip install tqdm",
    ),
    (
        lambda p: pymc._pm(),
        "pymc",
        ImportError,
        "exactbatch.pymc needs PyMC: pip install 'exactbatch[pymc]'",
    ),
    (
        lambda p: torch._torch(),
        "torch",
        ImportError,
        "exactbatch.torch needs PyTorch: pip install 'exactbatch[torch]'",
    ),
    (
        lambda p: dask_plan.import_dask(),
        "dask",
        ImportError,
        "exactbatch.dask needs Dask: pip install 'exactbatch[dask]'",
    ),
    (
        lambda p: ray_adapter.import_ray(),
        "ray",
        ImportError,
        "exactbatch.ray needs Ray Data: pip install 'exactbatch[ray]'",
    ),
    (
        lambda p: convert_inputs.arrow(),
        "pyarrow",
        CliError,
        "reading Parquet and CSV needs pyarrow: pip install pyarrow",
    ),
    (
        lambda p: info._parquet("a.parquet"),
        "pyarrow",
        CliError,
        "a.parquet: reading Parquet needs pyarrow: pip install pyarrow",
    ),
    (
        lambda p: mixing_inputs.parquet_input("a.parquet", None, 0, None),
        "pyarrow",
        CliError,
        "reading Parquet needs pyarrow: pip install pyarrow",
    ),
    (
        lambda p: bench.bench(p / "a.parquet", bar=False),
        "pyarrow",
        CliError,
        "reading Parquet needs pyarrow: pip install pyarrow",
    ),
    (
        lambda p: mixing_plot.draw({}, p / "a.png"),
        "matplotlib",
        CliError,
        "--plot needs matplotlib: pip install matplotlib",
    ),
]


@pytest.mark.parametrize(
    "call, package, error, message", CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)]
)
def test_a_missing_optional_package_is_one_error_saying_what_to_install(
    tmp_path, monkeypatch, call, package, error, message
):
    (tmp_path / "a.parquet").write_bytes(b"")
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        monkeypatch.setitem(sys.modules, name, None)  # `import name` now fails
    monkeypatch.setitem(sys.modules, package, None)
    with pytest.raises(error) as e:
        call(tmp_path)
    assert str(e.value) == message
    assert isinstance(e.value.__cause__, ImportError)


def test_need_returns_the_module_and_names_the_extra_or_the_package():
    import json

    assert need("json", by="x", package="json") is json
    with pytest.raises(ImportError, match=r"^f needs P: pip install 'exactbatch\[e\]'$"):
        need("exactbatch_no_such_module", by="f", package="P", extra="e")
    with pytest.raises(ValueError, match=r"^f needs P: pip install P$") as e:
        need("exactbatch_no_such_module", by="f", package="P", error=ValueError)
    assert isinstance(e.value.__cause__, ModuleNotFoundError)


def _raising_import_guards(path: pathlib.Path) -> list[int]:
    """Lines of ``except ImportError`` (or ModuleNotFoundError) handlers that raise an
    error of their own (a bare ``raise`` lets the ImportError through)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ExceptHandler) or node.type is None:
            continue
        caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
        names = {c.id for c in caught if isinstance(c, ast.Name)}
        raises = any(
            isinstance(n, ast.Raise) and n.exc is not None for b in node.body for n in ast.walk(b)
        )
        if names & {"ImportError", "ModuleNotFoundError"} and raises:
            out.append(node.lineno)
    return out


def test_every_guard_of_an_optional_import_is_need():
    """No module but exactbatch/extras.py turns a failed import into an error of its own:
    each goes through need(), so the message is written once."""
    found = {
        str(p.relative_to(SRC)): lines
        for p in sorted(SRC.rglob("*.py"))
        if p.name != "extras.py" and (lines := _raising_import_guards(p))
    }
    assert found == {}
