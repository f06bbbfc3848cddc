"""The package is typed: it ships ``py.typed``, and every public function and
method says the types of its arguments and of what it returns."""

from __future__ import annotations

import importlib
import inspect
import pathlib

import pytest

import exactbatch

# the modules whose __all__ is the public API (the adapters: their extras installed)
PUBLIC = [
    "exactbatch",
    "exactbatch.torch",
    "exactbatch.jax",
    "exactbatch.numpyro",
    "exactbatch.pymc",
    "exactbatch.dask",
    "exactbatch.sources.protocols",
]
_SPECIAL = {"__init__", "__iter__", "__len__", "__next__", "__enter__", "__exit__"}


def _functions(module):
    """``(qualified name, function)`` for every public function and method of ``module``."""
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isfunction(obj):
            yield f"{module.__name__}.{name}", obj
        elif inspect.isclass(obj) and not issubclass(obj, BaseException):
            for attr, value in vars(obj).items():
                if attr.startswith("_") and attr not in _SPECIAL:
                    continue
                if attr == "__init__" and getattr(obj, "_is_protocol", False):
                    continue  # a Protocol's __init__ is typing's
                fn = value.fget if isinstance(value, property) else value
                if inspect.isfunction(fn):
                    yield f"{module.__name__}.{name}.{attr}", fn


def _gaps(fn) -> list[str]:
    sig = inspect.signature(fn)
    gaps = [
        p.name
        for p in sig.parameters.values()
        if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty
    ]
    if sig.return_annotation is inspect.Signature.empty:
        gaps.append("return")
    return gaps


def test_the_package_ships_py_typed():
    root = pathlib.Path(exactbatch.__file__).parent
    assert (root / "py.typed").is_file()


@pytest.mark.parametrize("module", PUBLIC)
def test_every_public_function_is_annotated(module):
    mod = importlib.import_module(module)
    missing = {name: gaps for name, fn in _functions(mod) if (gaps := _gaps(fn))}
    assert not missing, f"not annotated: {missing}"
