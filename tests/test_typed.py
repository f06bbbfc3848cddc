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


# -- mypy strict at the seams (issue 41) -------------------------------------------------

ROOT = pathlib.Path(__file__).resolve().parents[1]

# The modules under every flag of `mypy --strict` (pyproject.toml's [tool.mypy]): this
# list may grow, never shrink.
STRICT = (
    "exactbatch.loader.*",
    "exactbatch.feeds.*",
    "exactbatch.batching.*",
    "exactbatch.order.*",
    "exactbatch.arrays",
    "exactbatch.checks",
    "exactbatch.dataset",
    "exactbatch.extras",
    "exactbatch.prefetch",
    "exactbatch.certificate",
    "exactbatch.kernels",
    "exactbatch.parts",
    "exactbatch.sources.*",
    "exactbatch.audit",
    "exactbatch.ndf.*",  # (format, guard, direct, temps, regular, categories, jsondoc,
    "exactbatch.urls",  # manifest and dataset_write were strict before the whole package)
    "exactbatch.tools.*",
    "exactbatch.mixing_score",
    "exactbatch.stats",
    "exactbatch.transform",
    "exactbatch.distributed",
    "exactbatch.cli",
    "exactbatch.cli_args",
    "exactbatch.cli_parser",
    "exactbatch",
    "exactbatch.errors",
    "exactbatch.hints",
    "exactbatch.torch",
    "exactbatch.jax",
    "exactbatch.numpyro",
    "exactbatch.pymc",
    "exactbatch.dask",
    "exactbatch.ray",
    "exactbatch.rank_states",
    "exactbatch.adapters.convergence",
    "exactbatch.adapters.schedule",
    "exactbatch.adapters.minibatch",
    "exactbatch.adapters.order_check",
    "exactbatch.adapters.dask",
    "exactbatch.adapters.dask_plan",
    "exactbatch.adapters.ray",
    "exactbatch.adapters.ray_sink",
    "exactbatch.adapters.ray_train",
    "exactbatch.adapters.torch",
    "exactbatch.adapters.torch_checkpoint",
    "exactbatch.adapters.torch_pinned",
    "exactbatch.adapters.jax",
    "exactbatch.adapters.jax_put",
    "exactbatch.adapters.numpyro_adam",
    "exactbatch.adapters.numpyro_run",
    "exactbatch.adapters.numpyro_terms",
    "exactbatch.adapters.pymc_schedule",
    "exactbatch.adapters.pymc_terms",
    "exactbatch.adapters.numpyro",
    "exactbatch.adapters.pymc",
    "exactbatch.adapters.*",  # (every adapter: a new one too)
)
# `mypy --strict`'s flags that can be set per module, and those only set for all
_PER_MODULE = (
    "check_untyped_defs",
    "strict_equality",
    "no_implicit_reexport",
    "disallow_subclassing_any",
    "disallow_untyped_decorators",
    "extra_checks",
    "disallow_untyped_defs",
    "disallow_incomplete_defs",
    "disallow_untyped_calls",
    "disallow_any_generics",
    "warn_return_any",
)
_GLOBAL = ("warn_unused_ignores", "warn_redundant_casts")
# the untyped functions strict code may call, by name (untyped_calls_exclude): none
_UNTYPED_CALLS: set[str] = set()
# the protocols the loader knows the feeds by: no Any in what they take or give, but a
# state's JSON (dict[str, Any], checked where it is read)
_SEAMS = ("Epoch", "Exhaustible", "Feed", "Job", "Ordered", "Place", "StateRule", "Timer")


def _mypy_config() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]


def _modules(override: dict) -> list[str]:
    mods = override["module"]
    return [mods] if isinstance(mods, str) else list(mods)


def _inside(module: str, pattern: str) -> bool:
    """Is ``module`` (a name or a pattern) one that ``pattern`` covers?"""
    if pattern.endswith(".*"):
        base = pattern[:-2]
        return module == pattern or module == base or module.startswith(base + ".")
    return module == pattern


def test_the_strict_modules_keep_every_strict_flag():
    cfg = _mypy_config()
    assert all(cfg.get(flag) is True for flag in _GLOBAL), _GLOBAL
    strict = set()
    for override in cfg["overrides"]:
        if all(override.get(flag) is True for flag in _PER_MODULE):
            strict.update(_modules(override))
    assert not set(STRICT) - strict, f"no longer strict: {sorted(set(STRICT) - strict)}"
    for override in cfg["overrides"]:  # (a narrower pattern wins over a wider one)
        within = [m for m in _modules(override) if any(_inside(m, p) for p in STRICT)]
        loosened = [
            key
            for key, value in override.items()
            if (key in _PER_MODULE and value is not True)
            or key in ("ignore_errors", "follow_imports", "disable_error_code")
        ]
        assert not (within and loosened), f"{within} loosened: {loosened}"


def test_strict_code_calls_no_more_untyped_functions():
    assert set(_mypy_config().get("untyped_calls_exclude", [])) <= _UNTYPED_CALLS


def test_no_type_ignore_in_the_strict_packages():
    root = pathlib.Path(exactbatch.__file__).parent
    found = [
        f"{path.relative_to(root)}:{i}"
        for package in ("loader", "feeds", "batching", "order", "sources", "ndf", "tools")
        for path in sorted((root / package).glob("*.py"))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if "type: ignore" in line
    ]
    assert not found, found


@pytest.mark.parametrize("name", _SEAMS)
def test_the_seam_protocols_name_no_any(name):
    from exactbatch.feeds import base

    protocol = getattr(base, name)
    assert getattr(protocol, "_is_protocol", False)
    typed = {
        f"{attr}.{param}": annotation
        for attr, value in vars(protocol).items()
        for fn in [value.fget if isinstance(value, property) else value]
        if inspect.isfunction(fn)
        for param, annotation in fn.__annotations__.items()
    }
    typed.update(vars(protocol).get("__annotations__", {}))
    assert typed, f"{name} declares nothing"
    anys = {k: a for k, a in typed.items() if "Any" in str(a).replace("dict[str, Any]", "")}
    assert not anys, f"{name}: {anys}"
