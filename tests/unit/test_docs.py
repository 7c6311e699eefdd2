"""docs/api-reference.md and crds/ agree: every field of the CRD schema is documented,
and every documented field exists in the schema."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
# LabelSelector fields are documented as one type, not field by field.
SELECTORS = ("spec.namespaceSelector", ".when.podSelector")


def crd_paths() -> set[str]:
    crd = yaml.safe_load((ROOT / "crds/schedulingpolicy.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    out: set[str] = set()

    def walk(node: dict[str, Any], path: str) -> None:
        for key, sub in (node.get("properties") or {}).items():
            if not path and key in ("apiVersion", "kind", "metadata"):
                continue
            p = f"{path}.{key}" if path else key
            out.add(p)
            walk(sub, p)
        items = node.get("items")
        if isinstance(items, dict):
            walk(items, path + "[]")

    walk(version["schema"]["openAPIV3Schema"], "")
    normalized = set()
    for p in out:
        if p in ("spec", "status"):
            continue
        if any(s + "." in p for s in SELECTORS):
            continue
        # Plugin args are one set of keys for filters and scorers, documented once.
        p = re.sub(r"^spec\.(filters|scorers)\[\]\.args\.", "args.", p)
        normalized.add(p)
    return normalized


def doc_paths() -> set[str]:
    text = (ROOT / "docs/api-reference.md").read_text()
    return set(re.findall(r"^\| `([^`]+)` \|", text, flags=re.M))


def test_every_crd_field_is_documented() -> None:
    missing = crd_paths() - doc_paths()
    assert not missing, f"docs/api-reference.md lacks: {sorted(missing)}"


def test_every_documented_field_is_in_the_crd() -> None:
    extra = doc_paths() - crd_paths()
    assert not extra, f"docs/api-reference.md documents fields the CRD lacks: {sorted(extra)}"
