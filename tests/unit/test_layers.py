"""The arrows between packages that the design relies on (docs/concepts.md): plugins and
the framework never import the API layer (the loaded policy carries plugin specs and
scheduler.pipelines builds them), so no plugin can depend on how a policy is written."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import polsched

pytestmark = pytest.mark.unit

PACKAGE = Path(polsched.__file__).parent


def imported_modules(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


@pytest.mark.parametrize("layer", ["plugins", "framework"])
def test_layer_does_not_import_the_api_package(layer: str) -> None:
    offenders = {f"{f.name}: {m}" for f in sorted((PACKAGE / layer).glob("*.py"))
                 for m in imported_modules(f)
                 if m == "polsched.api" or m.startswith("polsched.api.")}
    assert not offenders, offenders
