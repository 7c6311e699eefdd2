"""The shape of the package (issue 35, "Must show"), checked from the source files: no
import cycle among polsched's modules, counting the imports inside functions and under
TYPE_CHECKING (a cycle hidden by a function-local import is still a cycle of the design);
no module over 1,300 lines; fewer than 12 modules directly in controller/ and at the
package root; one runner for the Filter point.

Nothing is imported to check this: every module is parsed with `ast`. Checks that other
branches make true are strict xfails naming who, so that they fail (and the marker is
taken out) once they hold.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

import polsched

pytestmark = pytest.mark.unit

PACKAGE = Path(polsched.__file__).parent
MAX_LINES = 1300
MAX_MODULES_PER_FOLDER = 11  # "fewer than 12"

# Import cycles other branches remove: the modules a cycle may span (the cycle is known if
# all of its modules are in the set), and who removes it. Strict: once no such cycle is
# left, its test fails until the entry is taken out.
KNOWN_CYCLES: Mapping[str, tuple[frozenset[str], str]] = {}

# Modules over MAX_LINES that another branch splits, and who.
TOO_LONG: Mapping[str, str] = {
}


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def tree(self) -> ast.Module:
        return _parse(self.path)


@cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


@cache
def modules() -> dict[str, Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        name = ".".join(parts)
        out[name] = Module(name, path, is_package)
    return out


def _imported(module: Module) -> Iterator[str]:
    """Every polsched module `module` imports, wherever the import statement is: at the
    top, in a function, under TYPE_CHECKING. `from a import b` imports a.b when that is
    a module, else a."""
    known = modules()
    for node in ast.walk(module.tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.name.split(".")
                if not module.is_package:
                    parts.pop()
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                     for a in node.names]
        for name in names:
            while name not in known and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in known and name != module.name:
                yield name


@cache
def import_graph() -> dict[str, frozenset[str]]:
    return {name: frozenset(_imported(m)) for name, m in modules().items()}


def cycles(graph: Mapping[str, frozenset[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative: the graph is a few hundred modules deep at most, but recursion limits
    are not worth the risk)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            for w in edges:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        out.append(frozenset(component))
    return out


def _known(cycle: frozenset[str]) -> str | None:
    return next((key for key, (members, _) in KNOWN_CYCLES.items() if cycle <= members),
                None)


def test_the_cycle_finder_finds_a_cycle_hidden_in_a_function() -> None:
    """The check can fail: a cycle closed only by a function-local import is found, and
    one module importing another is no cycle."""
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}),
             "d": frozenset({"a"}), "e": frozenset()}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
    tree = ast.parse("def f() -> None:\n    from polsched.objects import Json\n")
    assert any(isinstance(n, ast.ImportFrom) and n.module == "polsched.objects"
               for n in ast.walk(tree))


def test_no_import_cycle_among_polsched_modules() -> None:
    unknown = sorted(sorted(c) for c in cycles(import_graph()) if _known(c) is None)
    assert not unknown, f"import cycles (function-local imports included): {unknown}"


@pytest.mark.parametrize("key", [
    pytest.param(key, marks=pytest.mark.xfail(reason=reason, strict=True), id=key)
    for key, (_, reason) in KNOWN_CYCLES.items()])
def test_a_known_import_cycle_is_gone(key: str) -> None:
    left = [sorted(c) for c in cycles(import_graph()) if _known(c) == key]
    assert not left, f"still a cycle: {left}"


def _length_params() -> list[object]:
    out: list[object] = []
    for name, m in modules().items():
        marks = ([pytest.mark.xfail(reason=TOO_LONG[name], strict=True)]
                 if name in TOO_LONG else [])
        out.append(pytest.param(m.path, marks=marks, id=name))
    return out


@pytest.mark.parametrize("path", _length_params())
def test_no_module_is_over_1300_lines(path: Path) -> None:
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(PACKAGE)}: {n} lines (at most {MAX_LINES})"


def test_schedule_one_is_under_700_lines() -> None:
    n = len((PACKAGE / "scheduler" / "schedule_one.py").read_text().splitlines())
    assert n < 700, f"scheduler/schedule_one.py: {n} lines"


@pytest.mark.parametrize("folder", [PACKAGE, PACKAGE / "controller"],
                         ids=["polsched", "polsched.controller"])
def test_fewer_than_12_modules_directly_in_the_folder(folder: Path) -> None:
    direct = sorted(p.name for p in folder.glob("*.py"))
    assert len(direct) <= MAX_MODULES_PER_FOLDER, (
        f"{len(direct)} modules in {folder.relative_to(PACKAGE.parent)}: {direct}; "
        "group them in a subpackage")


# What runs a Filter plugin: its methods are called by the runtime only
# (framework.runtime.Pipeline.run_filter_plugins), as upstream's framework runs every
# point, not by the scheduling algorithm.
_FILTER_METHODS = frozenset({"filter", "filter_nodes", "bind_filter", "filter_rejection"})


def _filter_calls(module: Module) -> list[int]:
    """Lines where a Filter plugin's method is reached (`<...>plugin.filter`, and the
    NodeSetFilter methods on anything); an extender's `.filter` is not a plugin's."""
    lines = []
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Attribute) or node.attr not in _FILTER_METHODS:
            continue
        owner = ast.unparse(node.value)
        if node.attr != "filter" or owner == "plugin" or owner.endswith(".plugin"):
            lines.append(node.lineno)
    return lines


def test_filter_plugins_run_only_in_the_runtime() -> None:
    allowed = {"polsched.framework.runtime", "polsched.framework.interfaces"}
    found = {name: lines for name, m in modules().items()
             if name not in allowed and not name.startswith("polsched.plugins")
             and (lines := _filter_calls(m))}
    assert not found, f"Filter plugins run outside framework/runtime.py: {found}"


def _calls_to(module: Module, name: str) -> list[int]:
    """Lines where `name(...)` or `<...>.name(...)` is called."""
    return [n.lineno for n in ast.walk(module.tree)
            if isinstance(n, ast.Call)
            and ((isinstance(n.func, ast.Name) and n.func.id == name)
                 or (isinstance(n.func, ast.Attribute) and n.func.attr == name))]


def test_the_pending_pods_metric_is_reported_in_at_most_3_places() -> None:
    """The queue reports its own sizes (issue 35): the pending-pod metric is not re-synced
    by hand after each change of the queue."""
    found = {name: lines for name, m in modules().items()
             if (lines := _calls_to(m, "report_pending"))}
    assert sum(len(v) for v in found.values()) <= 3, found
