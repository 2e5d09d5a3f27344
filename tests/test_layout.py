"""The layout of the code: one package per stage of the pipeline, imports that point down it only, no
import cycles, and modules short enough to read in one sitting (issue 29).

A query flows SQL → `frontend` → calculus expressions → `compiler` (with the `rules`) → plan → `runtime`.
The calculus is the language every later stage speaks, so it is the lowest layer: the front end is
built on it, not the other way round. LAYERS lists the layers lowest first; a module may import modules
of its own layer and of earlier layers, never of a later one (so nothing imports `bench`).

Imports are read with `ast` from every module of spark_ivm/, rules/ and udfs/ (installed as
spark_ivm.rules and spark_ivm.udfs), at module level and inside functions alike. Imports under
`if TYPE_CHECKING:` only name types for annotations and never run, so they are left out. A package's
`__init__` that Python runs before any of its modules is not counted as imported by them.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Folder of the repository → the package it is installed as (pyproject.toml, [tool.setuptools]).
FOLDERS = {"spark_ivm": "spark_ivm", "rules": "spark_ivm.rules", "udfs": "spark_ivm.udfs"}

# Lowest first. A name stands for that module or package and everything in it, except `spark_ivm`,
# which stands for the package's own __init__ only (the public API).
LAYERS = [
    # what every stage may use: the errors raised to users, the spark.ivm.* settings, and the policy
    # thresholds (consulted by the rules, the compiler and the runtime)
    ("shared", ["spark_ivm.errors", "spark_ivm.config", "spark_ivm.heuristics"]),
    ("calculus", ["spark_ivm.calculus"]),
    ("rules", ["spark_ivm.rules"]),
    ("udfs", ["spark_ivm.udfs"]),  # Python functions are calculus functions; the front end looks them up
    ("frontend", ["spark_ivm.frontend"]),
    ("compiler", ["spark_ivm.compiler"]),
    ("runtime", ["spark_ivm.runtime"]),
    ("api", ["spark_ivm", "spark_ivm.session"]),
    ("bench", ["spark_ivm.bench"]),
]

MAX_LINES = 650

# Import cycles between modules that are there on purpose, each with its reason.
ALLOWED_CYCLES = {
    frozenset({"spark_ivm.calculus.expressions", "spark_ivm.calculus.printer"}):
        "Expr.__str__ prints an expression with the printer, which reads the node classes; "
        "the printer is imported when an expression is first printed",
}


def modules() -> dict[str, Path]:
    """Every module by its dotted name (a package by the name of its __init__)."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


MODULES = modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST):
    """The import statements of a module, wherever they stand, but those under `if TYPE_CHECKING:`."""
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        children = list(ast.iter_child_nodes(node))
        if isinstance(node, ast.If) and _is_type_checking(node):
            children = node.orelse
        pending.extend(children)


def imports_of(name: str) -> set[str]:
    """The spark_ivm modules the module imports (by `from package import module`, the module)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in _import_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        for alias in node.names:
            targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {t for t in targets if t == "spark_ivm" or t.startswith("spark_ivm.")}


IMPORTS = {name: imports_of(name) for name in MODULES}


def layer_of(name: str) -> int | None:
    best = None  # (length of the matching name, layer)
    for index, (_, members) in enumerate(LAYERS):
        for member in members:
            matches = name == member or (member != "spark_ivm" and name.startswith(member + "."))
            if matches and (best is None or len(member) > best[0]):
                best = (len(member), index)
    return None if best is None else best[1]


def package_of(name: str) -> str:
    """The stage package a module is in (spark_ivm.frontend, spark_ivm.rules …), or the module itself
    when it stands at the top of spark_ivm."""
    return ".".join(name.split(".")[:2])


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in graph:
                    continue
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(component)
    return found


def test_the_stages_are_packages():
    for package in ("calculus", "frontend", "compiler", "runtime", "bench"):
        assert (ROOT / "spark_ivm" / package / "__init__.py").is_file(), package
    assert "spark_ivm.frontend.translate" in MODULES and "spark_ivm.calculus.expressions" in MODULES


def test_every_package_is_in_the_wheel():
    """pyproject.toml lists the packages explicitly (rules/ and udfs/ are installed under other names)."""
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    packages = [name for name, path in MODULES.items() if path.name == "__init__.py"]
    assert sorted(packages) == sorted(listed)


def test_every_module_has_a_layer():
    assert [name for name in MODULES if layer_of(name) is None] == [], "add the new module to LAYERS"


def test_every_import_names_an_existing_module():
    missing = sorted(f"{name} imports {target}" for name, targets in IMPORTS.items() for target in targets
                     if target not in MODULES)
    assert missing == []


def test_imports_point_down_the_pipeline():
    upward = sorted(
        f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for name, targets in IMPORTS.items() for target in targets
        if target in MODULES and layer_of(target) > layer_of(name))
    assert upward == []


def test_rules_import_only_the_calculus_and_shared_modules():
    allowed = {"shared", "calculus", "rules"}
    others = sorted(f"{name} imports {target}" for name, targets in IMPORTS.items()
                    if name.startswith("spark_ivm.rules")
                    for target in targets if LAYERS[layer_of(target)][0] not in allowed)
    assert others == []


def test_no_import_cycle_between_packages():
    graph: dict[str, set[str]] = {}
    for name, targets in IMPORTS.items():
        edges = graph.setdefault(package_of(name), set())
        edges |= {package_of(t) for t in targets if t in MODULES and package_of(t) != package_of(name)}
    assert cycles(graph) == []


def test_no_import_cycle_between_modules():
    graph = {name: {t for t in targets if t != name} for name, targets in IMPORTS.items()}
    assert [c for c in cycles(graph) if frozenset(c) not in ALLOWED_CYCLES] == []


def test_the_allowed_cycles_still_exist():
    """An allowed cycle that went away is taken off the list."""
    graph = {name: {t for t in targets if t != name} for name, targets in IMPORTS.items()}
    assert {frozenset(c) for c in cycles(graph)} >= set(ALLOWED_CYCLES)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_is_short(name):
    lines = MODULES[name].read_text().count("\n")
    assert lines <= MAX_LINES, f"{MODULES[name].relative_to(ROOT)} has {lines} lines; split it along its sections"


def test_the_checker_sees_imports():
    """The checker itself: a function-level import counts, a TYPE_CHECKING one does not, relative
    imports resolve, and `from package import module` is the module."""
    assert "spark_ivm.frontend.translate" in IMPORTS["spark_ivm.compiler.viewlet"]  # inside compile_view
    assert "spark_ivm.frontend.select" not in IMPORTS["spark_ivm.frontend.nested"]  # TYPE_CHECKING only
    assert "spark_ivm.rules.factorize" in IMPORTS["spark_ivm.rules.extract"]  # from .factorize import …
    assert "spark_ivm.calculus.functions" in IMPORTS["spark_ivm.calculus.evaluator"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
