"""Issue 27: a function that takes many loose values is asking for the record it belongs
to (upstream passes a QueuedPodInfo and a ScheduleResult). No function or method in
operator/polsched takes more than MAX_PARAMETERS parameters besides self/cls; *args and
**kwargs count as one each."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import polsched

pytestmark = pytest.mark.unit

PACKAGE = Path(polsched.__file__).parent
MAX_PARAMETERS = 7


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> list[str]:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    if in_class and names and names[0] in ("self", "cls") and not any(
            isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list):
        names = names[1:]
    return names


def functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef,
                                              bool]]:
    out: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, bool]] = []

    def visit(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", True)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                out.append((f"{prefix}{child.name}", child, in_class))
                visit(child, f"{prefix}{child.name}.", False)
            else:
                visit(child, prefix, in_class)

    visit(tree, "", False)
    return out


def offenders(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, fn, in_class in functions(tree):
            params = parameters(fn, in_class)
            if len(params) > MAX_PARAMETERS:
                out.append(f"{path.relative_to(root.parent)}:{fn.lineno} {name} takes "
                           f"{len(params)}: {', '.join(params)}")
    return out


def test_no_function_takes_more_than_seven_parameters_besides_self() -> None:
    found = offenders(PACKAGE)
    assert not found, "\n".join(found)


def test_the_check_counts_what_it_should(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "def ok(a, b, c, d, e, f, g): ...\n"
        "def wide(a, b, c, d, e, f, g, h): ...\n"
        "def star(a, b, c, d, e, f, *args, **kwargs): ...\n"
        "class C:\n"
        "    def method(self, a, b, c, d, e, f, g): ...\n"
        "    async def wide(self, a, b, c, d, e, f, *, g, h): ...\n"
        "    @staticmethod\n"
        "    def static(self, a, b, c, d, e, f, g): ...\n"
        "    def outer(self):\n"
        "        def inner(a, b, c, d, e, f, g, h): ...\n")
    found = {line.split()[1] for line in offenders(pkg)}
    assert found == {"wide", "star", "C.wide", "C.static", "C.outer.inner"}
