"""The shape of the package: every import points down the layers (DESIGN.md's
"Layering", docs/development.md's "The layout"), no import circle among
exactbatch's modules, and no private name (``_name``) of one module used by
another.

Read from the source with ``ast``, so every import counts, including those
made inside functions to defer them: a deferred import still ties two modules
into one. Importing a submodule (``exactbatch.ndf.file``) is an edge to it,
not to its package, as Python runs a package's ``__init__`` first but the
``__init__`` is not what the importer uses.
"""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
ROOT = "exactbatch"


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in sorted((SRC / ROOT).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


# The layers, lowest first: a module imports only from its own layer or those below.
# An entry ending in ".*" is a package and everything in it; any other names one module.
LAYERS = (
    (  # what every layer uses: errors, argument checks, arrays, the kernels (and parts), read-ahead
        "foundations",
        (
            *(
                f"exactbatch.{m}"
                for m in "errors hints extras checks arrays dataset kernels parts prefetch".split()
            ),
            *(f"exactbatch.{m}" for m in "urls stats mixing_score transform distributed".split()),
        ),
    ),
    ("order", ("exactbatch.order.*",)),  # pure functions of ids: arrays in, never a source
    ("ndf", ("exactbatch.ndf.*",)),  # the .ndf format
    ("sources", ("exactbatch.sources.*",)),  # the readers, over the format
    ("batching", ("exactbatch.batching.*",)),
    ("feeds", ("exactbatch.feeds.*", "exactbatch.audit")),  # (the audit a feed's pass runs)
    ("loader", ("exactbatch.loader.*", "exactbatch.certificate", "exactbatch.rank_states")),
    (  # the front door (the package's public names) and the adapters
        "adapters",
        (
            "exactbatch",
            "exactbatch.adapters.*",
            *(f"exactbatch.{m}" for m in "torch jax numpyro pymc dask ray".split()),
        ),
    ),
    (
        "command",
        ("exactbatch.cli", "exactbatch.cli_args", "exactbatch.cli_parser", "exactbatch.tools.*"),
    ),
)


def _layer_of(module: str, layers=LAYERS) -> int | None:
    """The rank of ``module``'s layer (0 the lowest), or None when no layer names it."""
    for rank, (_, entries) in enumerate(layers):
        for entry in entries:
            package = entry.removesuffix(".*")
            if module == package or (entry.endswith(".*") and module.startswith(package + ".")):
                return rank
    return None


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve(module: str, node: ast.ImportFrom) -> str | None:
    """The absolute module an ``ImportFrom`` names (relative imports resolved)."""
    if not node.level:
        return node.module
    base = module.split(".")
    is_package = MODULES[module].name == "__init__.py"
    base = base[: len(base) - node.level + is_package]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str):
    """``(target module, names imported from it or None, line)`` for every import of ours,
    and the local names bound to our modules (for ``module._name`` accesses)."""
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    found, bound = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == ROOT:
                    found.append((alias.name, None, node.lineno))
                    if alias.asname:
                        bound[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            if target is None or target.split(".")[0] != ROOT:
                continue
            names = []
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in MODULES:  # ``from exactbatch.ndf import remote``: the submodule
                    found.append((sub, None, node.lineno))
                    bound[alias.asname or alias.name] = sub
                else:
                    names.append(alias.name)
            if names:
                found.append((target, names, node.lineno))
    return tree, found, bound


def _defined_privates(tree: ast.AST) -> set[str]:
    """Private names a module defines: functions, classes, globals, attributes it sets on
    ``self`` or lists in ``__slots__``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.add(node.value)  # __slots__ entries, getattr names
    return {n for n in out if _private(n)}


def _graph() -> dict[str, set[str]]:
    graph = {m: set() for m in MODULES}
    for m in MODULES:
        for target, _, _ in _imports(m)[1]:
            if target != m and target in MODULES:
                graph[m].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def _upward(edges, layers=LAYERS) -> list[str]:
    """Each ``(module, target, where)`` import whose target lies in a layer above the
    module's, as a message."""
    names = [name for name, _ in layers]
    out = []
    for module, target, where in edges:
        a, b = _layer_of(module, layers), _layer_of(target, layers)
        if a is not None and b is not None and b > a:
            out.append(f"{where}: {module} ({names[a]}) imports {target} ({names[b]}), above it")
    return out


def _edges():
    """``(module, target, "path:line")`` for every import of one of our modules by another."""
    for m in MODULES:
        for target, _, line in _imports(m)[1]:
            if target != m and target in MODULES:
                yield m, target, f"{MODULES[m].relative_to(SRC)}:{line}"


def test_the_layer_checker_finds_an_upward_import():
    """The direction check itself: down and sideways pass, up fails, by package or name."""
    layers = (("low", ("p.low.*", "p.base")), ("high", ("p.high.*", "p")))
    assert _layer_of("p", layers) == 1 and _layer_of("p.low", layers) == 0
    assert _layer_of("p.low.x.y", layers) == 0 and _layer_of("p.other", layers) is None
    down = [("p.high.a", "p.low.b", "a:1"), ("p.low.b", "p.base", "b:1"), ("p", "p.high.a", "c:1")]
    assert _upward(down, layers) == []
    up = [("p.low.b", "p.high.a", "b:2"), ("p.base", "p", "d:3")]
    assert _upward(up, layers) == [
        "b:2: p.low.b (low) imports p.high.a (high), above it",
        "d:3: p.base (low) imports p (high), above it",
    ]


def test_every_module_has_a_layer():
    """A new module is placed in a layer (LAYERS above) before the direction is checked."""
    assert [m for m in MODULES if _layer_of(m) is None] == []


def test_imports_point_down_the_layers():
    """No module imports one from a layer above its own (deferred imports included):
    the order takes arrays, never a source; the sources never reach the batching; the
    loader never the adapters."""
    assert _upward(_edges()) == []


def test_the_checker_finds_a_circle():
    """The cycle finder itself: a circle of three, a self-contained tail, no false alarm."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_modules_are_found():
    assert {"exactbatch", "exactbatch.ndf", "exactbatch.ndf.file", "exactbatch.urls"} <= set(
        MODULES
    )
    graph = _graph()
    assert "exactbatch.ndf.format" in graph["exactbatch.ndf.file"]
    assert "exactbatch.urls" in graph["exactbatch.ndf.remote"]
    # the sharded datasets' split: the user-facing modules above the machinery
    assert "exactbatch.ndf.dataset_parts" in graph["exactbatch.ndf.dataset"]
    assert "exactbatch.ndf.dataset_protocol" in graph["exactbatch.ndf.dataset_write"]


def test_no_import_circle():
    assert _cycles(_graph()) == []


def test_no_private_name_used_across_modules():
    """No ``from exactbatch.x import _y``, no ``import exactbatch._x``, no ``x._y`` on a
    module of ours imported under the name ``x``, and no ``obj._y()`` where ``_y`` is
    defined by another of our modules only (a private method such as ``NdfFile._handle``
    called from outside its module). Private names of other libraries (fsspec's
    ``fs._strip_protocol``) are not ours to judge."""
    defined = {m: _defined_privates(ast.parse(p.read_text())) for m, p in MODULES.items()}
    bad = []
    for m in MODULES:
        elsewhere = set().union(*(d for k, d in defined.items() if k != m)) - defined[m]
        tree, found, bound = _imports(m)
        for target, names, line in found:
            where = f"{MODULES[m].relative_to(SRC)}:{line}"
            if target != m and any(_private(p) for p in target.split(".")):
                bad.append(f"{where} imports the private module {target}")
            for name in names or ():
                if target != m and _private(name):
                    bad.append(f"{where} imports {target}.{name}")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and bound.get(node.value.id, m) != m
                and _private(node.attr)
            ):
                target = bound[node.value.id]
                bad.append(f"{MODULES[m].relative_to(SRC)}:{node.lineno} uses {target}.{node.attr}")
            elif (
                isinstance(node, ast.Attribute)
                and node.attr in elsewhere
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                where = f"{MODULES[m].relative_to(SRC)}:{node.lineno}"
                bad.append(f"{where} uses .{node.attr}, private to another module")
    assert bad == []
