"""crds/schedulingpolicy.yaml: the identity the contract fixes, a structural schema, and
CEL rules whose plugin names agree with polsched.plugins.REGISTRY."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from polsched import plugins
from polsched.api import crd

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = crd.openapi_schema()
SPEC = SCHEMA["properties"]["spec"]["properties"]


def _rules(list_name: str) -> list[dict[str, Any]]:
    return list(SPEC[list_name]["items"]["x-kubernetes-validations"])


def _quoted(text: str) -> list[str]:
    return re.findall(r"'([A-Za-z*]+)'", text)


def _name_rule(list_name: str) -> dict[str, Any]:
    [rule] = [r for r in _rules(list_name) if r["rule"].startswith("self.name in [")]
    return rule


def _wrong_point_names(rule: dict[str, Any]) -> list[str]:
    # messageExpression: "self.name in [<other point only>] ? '...' : 'unknown ... are A, B'"
    head = rule["messageExpression"].split("?")[0]
    return _quoted(head)


def _listed_in_message(rule: dict[str, Any]) -> list[str]:
    tail = rule["messageExpression"].split(" are ")[-1].rstrip("'")
    return [n.strip() for n in tail.split(",")]


def test_the_package_reads_the_repository_crd() -> None:
    # operator/polsched/crds is a symlink to crds/: one source of truth.
    assert crd.crd_manifest() == yaml.safe_load((ROOT / "crds" / crd.CRD_FILE).read_text())


def test_identity_follows_the_contract() -> None:
    m = crd.crd_manifest()
    assert m["apiVersion"] == "apiextensions.k8s.io/v1"
    assert m["metadata"]["name"] == "schedulingpolicies.polsched.io"
    spec = m["spec"]
    assert spec["group"] == "polsched.io" and spec["scope"] == "Cluster"
    assert spec["names"] == {"kind": "SchedulingPolicy", "listKind": "SchedulingPolicyList",
                             "plural": "schedulingpolicies", "singular": "schedulingpolicy",
                             "shortNames": ["spol"]}
    [v] = spec["versions"]
    assert (v["name"], v["served"], v["storage"]) == ("v1alpha1", True, True)
    assert v["subresources"] == {"status": {}}
    cols = {c["name"]: c["jsonPath"] for c in v["additionalPrinterColumns"]}
    assert cols == {
        "Scheduler": ".status.schedulerName",
        "Ready": '.status.conditions[?(@.type=="Ready")].status',
        "Bound": ".status.boundPods",
        "Pending": ".status.pendingPods",
        "Age": ".metadata.creationTimestamp",
    }


@pytest.mark.parametrize(("list_name", "point", "other"), [
    ("filters", "filter", "score"), ("scorers", "score", "filter")])
def test_plugin_names_in_cel_rules_match_the_registry(list_name: str, point: str,
                                                      other: str) -> None:
    rule = _name_rule(list_name)
    known = plugins.REGISTRY.names(point)
    assert _quoted(rule["rule"]) == known
    assert _listed_in_message(rule) == known
    only_other = sorted(set(plugins.REGISTRY.names(other)) - set(known))
    assert sorted(_wrong_point_names(rule)) == only_other
    assert rule["fieldPath"] == ".name"


def test_disabled_plugins_rule_lists_the_default_plugins() -> None:
    [rule] = SPEC["disabledPlugins"]["x-kubernetes-validations"]
    defaults = {*plugins.DEFAULT_FILTERS, *(n for n, _ in plugins.DEFAULT_SCORERS),
                "DefaultPreemption"}  # the PostFilter (api.loader DEFAULT_PREEMPTION)
    assert set(_quoted(rule["rule"])) == defaults | {"*"}


def _walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for k, child in (node.get("properties") or {}).items():
        yield from _walk(child, f"{path}.{k}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def test_schema_is_structural() -> None:
    # apiextensions' structural schema rules that a hand-written schema most easily breaks:
    # every node has a type (or is int-or-string / preserve-unknown), properties and
    # additionalProperties never together.
    for path, node in _walk(SCHEMA):
        assert "type" in node or node.get("x-kubernetes-int-or-string") or node.get(
            "x-kubernetes-preserve-unknown-fields"), path
        assert not ("properties" in node and "additionalProperties" in node), path


def test_lists_and_strings_read_by_cel_are_bounded() -> None:
    # The apiserver refuses CEL rules whose worst-case cost it cannot bound.
    for name in ("filters", "scorers", "extenders", "disabledPlugins"):
        assert SPEC[name]["maxItems"] <= 64, name
    args = SPEC["filters"]["items"]["properties"]["args"]["properties"]
    assert args["requirements"]["maxItems"] <= 64 and args["preferred"]["maxItems"] <= 64
    assert SPEC["filters"]["items"]["properties"]["name"]["maxLength"] == 63


def test_scorer_weight_bounds_match_the_loader() -> None:
    from polsched.api import loader

    weight = SPEC["scorers"]["items"]["properties"]["weight"]
    assert (weight["minimum"], weight["maximum"]) == (loader.MIN_WEIGHT, loader.MAX_WEIGHT)


def test_expression_length_limit_matches_the_plugin() -> None:
    from polsched.plugins import expression

    args = SPEC["scorers"]["items"]["properties"]["args"]["properties"]
    assert args["expression"]["maxLength"] == expression.MAX_EXPRESSION_LENGTH


def test_schema_accepts_the_contract_example_and_refuses_a_bad_weight() -> None:
    doc = yaml.safe_load((ROOT / "tests/unit/data/policies/contract-example.yaml").read_text())
    v = jsonschema.Draft4Validator(SCHEMA)
    assert list(v.iter_errors(doc)) == []
    doc["spec"]["scorers"][0]["weight"] = 0
    [err] = list(v.iter_errors(doc))
    assert list(err.absolute_path) == ["spec", "scorers", 0, "weight"]
