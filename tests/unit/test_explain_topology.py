"""`polsched explain` on a member of a topology-constrained gang, with the gates the
operator has (POLSCHED_FEATURE_GATES): every domain the placement algorithm tried, which
held the group, how each scored, why the winner won, or for a pending gang how close the
best domain came; all from the engine's own functions (pod_group_algorithm,
placement_capacity)."""

from __future__ import annotations

import asyncio

import pytest

from polsched.api import load_policy
from polsched.cluster import featuregates
from polsched.commands.explain import Report, explain, format_report
from polsched.objects import Json
from polsched.plugins import CATALOG
from tests.builders import make_node, make_pod

RACK = "example.com/rack"
GATES = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
POLICY = {"apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
          "metadata": {"name": "s"}, "spec": {}}


def node(name: str, rack: str, cpu: str = "4") -> Json:
    return (make_node().name(name).label("kubernetes.io/hostname", name).label(RACK, rack)
            .allocatable({"cpu": cpu, "memory": "8Gi", "pods": "110"}).obj())


def group(min_count: int, key: str = RACK) -> Json:
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns", "generation": 1},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}},
                     "schedulingConstraints": {"topology": [{"key": key}]}}}


def member(name: str, cpu: str) -> Json:
    return (make_pod().name(name).namespace("ns").uid(f"uid-{name}").pod_group("g")
            .container(image="x", requests={"cpu": cpu, "memory": "1Gi"}).obj())


def run(nodes: list[Json], min_count: int, count: int, cpu: str) -> Report:
    members = [member(f"m{i}", cpu) for i in range(count)]
    return asyncio.run(explain(load_policy(POLICY, CATALOG), members[0], nodes, members[1:],
                               objects=[group(min_count)]))


def test_a_pending_gang_is_told_how_close_the_best_domain_came(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(featuregates.ENV, GATES)
    # 5 members of 1500m, minCount 5: rack a holds 4 (2 nodes), rack b 2.
    report = run([node("a1", "a"), node("a2", "a"), node("b1", "b")], 5, 5, "1500m")
    gang = report.gang
    assert gang is not None and not gang.fits and gang.topology is not None
    t = gang.topology
    assert t.chosen is None
    assert [(d.domain, d.nodes, d.holds, d.feasible) for d in t.domains] == [
        ("a", 2, 4, False), ("b", 1, 2, False)]
    assert t.why == f"no {RACK} domain can hold 5 members; the closest (a) holds 4"
    assert gang.message.startswith(
        "pod group is unschedulable, 0/2 placements are available, first placement status: "
        "minCount (5) cannot be satisfied: 4 scheduled, 0 remaining")
    text = format_report(report)
    assert f"Topology: one domain of {RACK} (spec.schedulingConstraints.topology): " \
           "2 placement(s) tried, 0 feasible" in text
    assert t.why in text


def test_the_winner_is_explained_by_its_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(featuregates.ENV, GATES)
    # minCount 2 of 4: rack a holds all 4, rack b 2; PodGroupPodsCount decides.
    report = run([node("b1", "b"), node("a1", "a"), node("a2", "a")], 2, 4, "1500m")
    gang = report.gang
    assert gang is not None and gang.fits and gang.topology is not None
    t = gang.topology
    assert t.chosen == "a"
    # NodeResourcesFit (MostAllocated): a: 6 of 8 CPUs (75), 4Gi of 16Gi (25) -> 50;
    # b: 3 of 4 CPUs (75), 2Gi of 8Gi (25) -> 50.
    assert {d.domain: (d.holds, d.scores, d.total) for d in t.domains} == {
        "a": (4, {"NodeResourcesFit": 50, "PodGroupPodsCount": 100}, 150),
        "b": (2, {"NodeResourcesFit": 50, "PodGroupPodsCount": 50}, 100)}
    assert t.why == ("a has the highest total score, 150 (NodeResourcesFit 50, "
                     "PodGroupPodsCount 100); next: b with 100")
    assert {m.node for m in gang.members} == {"a1", "a2"}
    text = format_report(report)
    assert "Chosen: a: a has the highest total score" in text


def test_the_only_domain_that_holds_the_gang(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(featuregates.ENV, GATES)
    report = run([node("a1", "a"), node("b1", "b"), node("b2", "b")], 3, 3, "1500m")
    assert report.gang is not None and report.gang.topology is not None
    t = report.gang.topology
    assert (t.chosen, t.why) == ("b", f"b is the only {RACK} domain that holds the group")
    assert report.gang.to_json()["topology"]["chosen"] == "b"


def test_no_node_with_the_label(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(featuregates.ENV, GATES)
    plain = (make_node().name("n1").allocatable({"cpu": "4", "memory": "8Gi", "pods": "110"})
             .obj())
    report = run([plain], 1, 1, "1")
    assert report.gang is not None and report.gang.topology is not None
    assert report.gang.topology.why == f"no node has the label {RACK}"
    assert report.gang.topology.domains == []


def test_with_the_gate_off_explain_says_the_constraint_is_not_applied(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(featuregates.ENV, "GenericWorkload=true")
    report = run([node("a1", "a"), node("b1", "b")], 2, 2, "3")
    assert report.gang is not None and report.gang.fits
    t = report.gang.topology
    assert t is not None and not t.domains
    assert "TopologyAwareWorkloadScheduling is off here" in t.why
    # The default algorithm spreads the gang over both racks.
    assert {m.node for m in report.gang.members} == {"a1", "b1"}
