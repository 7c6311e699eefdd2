"""framework.pod_bounds: each bound holds at its value and refuses one past it, naming the
field, the count and the bound."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from polsched.framework import pod_bounds as b
from tests.builders import make_pod

pytestmark = pytest.mark.unit

Spec = dict[str, Any]


def term(values: int = 1, expressions: int = 1) -> dict[str, Any]:
    return {"labelSelector": {"matchExpressions": [
                {"key": f"k{j}", "operator": "In", "values": [f"v{i}" for i in range(values)]}
                for j in range(expressions)]},
            "topologyKey": "kubernetes.io/hostname"}


def node_term(values: int = 1, expressions: int = 1) -> dict[str, Any]:
    return {"matchExpressions": [
        {"key": f"k{j}", "operator": "In", "values": [f"v{i}" for i in range(values)]}
        for j in range(expressions)]}


R = "requiredDuringSchedulingIgnoredDuringExecution"
P = "preferredDuringSchedulingIgnoredDuringExecution"

# (the field as the message names it, its bound, a spec with n of it)
CASES: list[tuple[str, int, Callable[[int], Spec]]] = [
    ("spec.tolerations", b.MAX_TOLERATIONS,
     lambda n: {"tolerations": [{"key": f"t{i}", "operator": "Exists"} for i in range(n)]}),
    ("spec.nodeSelector", b.MAX_REQUIREMENTS,
     lambda n: {"nodeSelector": {f"k{i}": "v" for i in range(n)}}),
    ("spec.topologySpreadConstraints", b.MAX_TOPOLOGY_SPREAD_CONSTRAINTS,
     lambda n: {"topologySpreadConstraints": [
         {"maxSkew": 1, "topologyKey": f"k{i}", "whenUnsatisfiable": "DoNotSchedule"}
         for i in range(n)]}),
    (f"spec.affinity.podAntiAffinity.{R}", b.MAX_TERMS,
     lambda n: {"affinity": {"podAntiAffinity": {R: [term() for _ in range(n)]}}}),
    (f"spec.affinity.podAffinity.{P}", b.MAX_TERMS,
     lambda n: {"affinity": {"podAffinity": {P: [
         {"weight": 1, "podAffinityTerm": term()} for _ in range(n)]}}}),
    (f"spec.affinity.podAffinity.{R}[0].labelSelector.matchExpressions", b.MAX_REQUIREMENTS,
     lambda n: {"affinity": {"podAffinity": {R: [term(expressions=n)]}}}),
    (f"spec.affinity.podAntiAffinity.{P}[0].podAffinityTerm.labelSelector"
     ".matchExpressions[0].values", b.MAX_VALUES,
     lambda n: {"affinity": {"podAntiAffinity": {P: [
         {"weight": 1, "podAffinityTerm": term(values=n)}]}}}),
    (f"spec.affinity.nodeAffinity.{R}.nodeSelectorTerms", b.MAX_TERMS,
     lambda n: {"affinity": {"nodeAffinity": {R: {
         "nodeSelectorTerms": [node_term() for _ in range(n)]}}}}),
    (f"spec.affinity.nodeAffinity.{R}.nodeSelectorTerms[0].matchExpressions[0].values",
     b.MAX_VALUES,
     lambda n: {"affinity": {"nodeAffinity": {R: {
         "nodeSelectorTerms": [node_term(values=n)]}}}}),
    (f"spec.affinity.nodeAffinity.{P}[0].preference.matchExpressions", b.MAX_REQUIREMENTS,
     lambda n: {"affinity": {"nodeAffinity": {P: [
         {"weight": 1, "preference": node_term(expressions=n)}]}}}),
]


@pytest.mark.parametrize(("field", "bound", "spec"), CASES, ids=[c[0] for c in CASES])
def test_a_bound_holds_at_its_value_and_refuses_one_more(
        field: str, bound: int, spec: Callable[[int], Spec]) -> None:
    assert b.violation(spec(bound)) == ""
    message = b.violation(spec(bound + 1))
    assert message.startswith(f"{field} has {bound + 1} "), message
    assert f"over the bound of {bound} " in message
    assert "docs/security.md" in message


def test_an_ordinary_pod_is_within_bounds() -> None:
    pod = (make_pod().name("web").label("app", "web").req(cpu="100m")
           .node_selector({"zone": "a"})
           .tolerations([{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}])
           .affinity({"podAntiAffinity": {R: [term()]},
                      "nodeAffinity": {R: {"nodeSelectorTerms": [node_term(values=3)]}}})
           .info())
    assert b.violation(pod.spec) == ""


def test_the_api_servers_thousands_of_terms_are_refused_before_their_items_are_read() -> None:
    spec = {"affinity": {"podAntiAffinity": {R: [term() for _ in range(3000)]}}}
    assert b.violation(spec).startswith(
        f"spec.affinity.podAntiAffinity.{R} has 3000 terms, over the bound of 64 ")
