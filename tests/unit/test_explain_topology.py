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


# -- a composite tree (CompositePodGroup on): the root's domains, each PodGroup's result --
COMPOSITE_GATES = GATES + ",CompositePodGroup=true"


def composite_objects() -> list[Json]:
    root = {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "CompositePodGroup",
            "metadata": {"name": "infer", "namespace": "ns",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulingPolicy": {"gang": {"minGroupCount": 2}},
                     "schedulingConstraints": {"topology": [{"key": RACK}]}}}
    children = []
    for i, name in enumerate(("prefill", "decode")):
        children.append({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                         "metadata": {"name": name, "namespace": "ns", "generation": 1,
                                      "creationTimestamp": f"2026-01-01T00:00:0{i + 1}Z"},
                         "spec": {"parentCompositePodGroupName": "infer",
                                  "schedulingPolicy": {"gang": {"minCount": 2}}}})
    return [root, *children]


def tree_member(name: str, group_name: str, cpu: str) -> Json:
    return (make_pod().name(name).namespace("ns").uid(f"uid-{name}").pod_group(group_name)
            .container(image="x", requests={"cpu": cpu, "memory": "1Gi"}).obj())


def test_a_pending_tree_is_told_which_rack_came_closest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(featuregates.ENV, COMPOSITE_GATES)
    # Each rack (one 4-CPU node) holds prefill's 2 x 1500m but not decode's too.
    members = [tree_member(f"prefill-{i}", "prefill", "1500m") for i in range(2)] + \
        [tree_member(f"decode-{i}", "decode", "1500m") for i in range(2)]
    report = asyncio.run(explain(load_policy(POLICY, CATALOG), members[0],
                                 [node("a1", "a"), node("b1", "b")], members[1:],
                                 objects=composite_objects()))
    gang = report.gang
    assert gang is not None and gang.group == "composite:ns/infer" and not gang.fits
    assert gang.min_count == 2
    t = gang.topology
    assert t is not None and t.chosen is None
    assert [(d.domain, d.holds, d.feasible) for d in t.domains] == [
        ("a", 1, False), ("b", 1, False)]
    assert t.why == f"no {RACK} domain can hold 2 groups; the closest (a) holds 1"
    by_group = {c.group: c for c in gang.children}
    assert not by_group["ns/prefill"].fits and not by_group["ns/decode"].fits
    # prefill fit on its own, so it gets its parent's status, as the engine submits it.
    assert by_group["ns/prefill"].message == gang.message.split(", pod group preemption")[0]
    why = {m.pod: m.reason for m in gang.members}
    assert why["ns/prefill-0"].startswith("its group fit, its parent did not: ")
    assert why["ns/decode-0"] == "0/1 nodes are available: 1 Insufficient cpu."
    assert why["ns/decode-1"].startswith("not tried: ")
    text = format_report(report)
    assert "CompositePodGroup ns/infer (gang of groups, minGroupCount 2)" in text
    assert t.why in text


def test_a_tree_that_fits_names_each_members_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(featuregates.ENV, COMPOSITE_GATES)
    members = [tree_member(f"prefill-{i}", "prefill", "1") for i in range(2)] + \
        [tree_member(f"decode-{i}", "decode", "1") for i in range(2)]
    report = asyncio.run(explain(load_policy(POLICY, CATALOG), members[0],
                                 [node("a1", "a"), node("b1", "b", "2")], members[1:],
                                 objects=composite_objects()))
    gang = report.gang
    assert gang is not None and gang.fits
    assert gang.topology is not None and gang.topology.chosen == "a"
    assert {m.pod: m.node for m in gang.members} == {
        f"ns/{p}-{i}": "a1" for p in ("prefill", "decode") for i in range(2)}
