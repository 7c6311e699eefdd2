"""The placement plugins of TopologyAwareWorkloadScheduling, as the production builder
makes them with the gate on: PodGroupPodsCount's score and normalization and
NodeResourcesFit's placement score (upstream's podgroup_pods_count_test.go and
fit.go ScorePlacement cases), TopologyPlacementGenerator's placements."""

from __future__ import annotations

from polsched.api import load_policy
from polsched.cluster.featuregates import TOPOLOGY_AWARE_WORKLOAD_SCHEDULING
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    Handle,
    Placement,
    PlacementScorePlugin,
    PodGroupAssignments,
    PodGroupInfo,
    ProposedAssignment,
)
from polsched.framework.podgroups import PodGroups
from polsched.framework.runtime import Pipeline
from polsched.framework.status import Code
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.scheduler.pipelines import build_pipeline
from tests.builders import make_node, make_pod

GROUP = PodGroupInfo("ns", "g", {"metadata": {"name": "g", "namespace": "ns"},
                                 "spec": {"schedulingPolicy": {"gang": {"minCount": 1}},
                                          "schedulingConstraints": {
                                              "topology": [{"key": "rack"}]}}})


def pipeline(spec: Json | None = None, groups: PodGroups | None = None) -> Pipeline:
    return build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": spec or {}}, CATALOG),
        Handle(pod_groups=groups or PodGroups(served=True),
               features=frozenset({TOPOLOGY_AWARE_WORKLOAD_SCHEDULING})))


def scorer(pl: Pipeline, name: str) -> PlacementScorePlugin:
    return next(p for p, _ in pl.placement_score if p.name == name)


def assignments(placement: Placement, *pods: tuple[str, str]) -> PodGroupAssignments:
    return PodGroupAssignments(placement, tuple(
        ProposedAssignment(make_pod().name(n).namespace("ns").pod_group("g")
                           .container(image="x", requests={"cpu": cpu, "memory": "1Gi"})
                           .info(), "n", CycleState()) for n, cpu in pods))


def node(name: str, rack: str | None, cpu: str = "4") -> Json:
    n = make_node().name(name)
    if rack:
        n.label("rack", rack)
    return n.allocatable({"cpu": cpu, "memory": "8Gi", "pods": "110"}).obj()


def test_pod_group_pods_count_counts_scheduled_and_proposed_members() -> None:
    groups = PodGroups(served=True)
    groups.pod_added(make_pod().name("bound").namespace("ns").uid("u-bound")
                     .pod_group("g").node("n1").info())
    pl = pipeline(groups=groups)
    p = scorer(pl, "PodGroupPodsCount")
    empty = Placement("a", ())
    score, st = p.score_placement(CycleState(), GROUP, assignments(empty, ("m0", "1"),
                                                                   ("m1", "1")))
    assert st.ok and score == 3


def test_pod_group_pods_count_normalizes_by_the_highest_count() -> None:
    p = scorer(pipeline(), "PodGroupPodsCount")
    scores = [3, 2, 1]
    st = p.normalize_placement_scores(CycleState(), GROUP, scores)
    assert st is not None and st.ok
    assert scores == [100, 66, 33]
    zero = [0, 0]
    st = p.normalize_placement_scores(CycleState(), GROUP, zero)
    assert st is not None and st.code is Code.ERROR
    assert st.message == ("no pods from pod group are assigned to any of the candidate "
                          "placements")


def test_node_resources_fit_scores_the_placement_most_allocated() -> None:
    p = scorer(pipeline(), "NodeResourcesFit")
    nodes = [make_node().name(f"n{i}").allocatable({"cpu": "4", "memory": "8Gi",
                                                    "pods": "110"}).info()
             for i in range(2)]
    placement = Placement("a", tuple(nodes))
    # cpu 3 of 8 (37), memory 3Gi of 16Gi (18): (37 + 18) / 2 = 27, whatever the policy's
    # own strategy for node scores (LeastAllocated by default).
    score, st = p.score_placement(CycleState(), GROUP, assignments(
        placement, ("m0", "1"), ("m1", "1"), ("m2", "1")))
    assert st.ok and score == 27
    # NodeResourcesFit has no NormalizePlacementScore.
    assert p.normalize_placement_scores(CycleState(), GROUP, [27]) is None


def test_node_resources_fit_placement_score_follows_the_strategys_resources() -> None:
    pl = pipeline({"scorers": [{"name": "NodeResourcesFit", "weight": 3, "args": {
        "scoringStrategy": {"type": "LeastAllocated",
                            "resources": [{"name": "cpu", "weight": 1}]}}}]})
    assert [(p.name, w) for p, w in pl.placement_score] == [("NodeResourcesFit", 3),
                                                            ("PodGroupPodsCount", 1)]
    p = scorer(pl, "NodeResourcesFit")
    placement = Placement("a", (make_node().name("n").allocatable(
        {"cpu": "4", "memory": "8Gi", "pods": "110"}).info(),))
    score, _ = p.score_placement(CycleState(), GROUP, assignments(placement, ("m0", "1")))
    assert score == 25  # cpu only: 1 of 4


def test_topology_placement_generates_one_placement_per_domain_in_name_order() -> None:
    pl = pipeline()
    gen = pl.placement_generate[0]
    nodes = [make_node().name(n).label("rack", r).info() for n, r in
             (("x1", "b"), ("x2", "a"), ("x3", "b"))] + [make_node().name("x4").info()]
    placements, st = gen.generate_placements(CycleState(), GROUP, Placement("", tuple(nodes)))
    assert st.ok
    assert [(p.name, [n.name for n in p.nodes]) for p in placements] == [
        ("a", ["x2"]), ("b", ["x1", "x3"])]


def test_the_runtime_reports_no_feasible_placements_and_invalid_scores() -> None:
    pl = pipeline()
    nodes = [make_node().name("x").info()]
    placements, st = pl.run_placement_generate_plugins(CycleState(), GROUP, nodes)
    assert not placements and st.code is Code.UNSCHEDULABLE
    assert (st.message, st.plugin) == ("no feasible placements found",
                                       "TopologyPlacementGenerator")
    empty = Placement("a", ())
    scores, st = pl.run_placement_score_plugins([CycleState()], GROUP, [
        assignments(empty)])
    assert not scores and st.code is Code.ERROR
    assert st.message == (
        'running NormalizePlacementScore on PlacementScore plugins: plugin '
        '"PodGroupPodsCount" failed with: no pods from pod group are assigned to any of '
        'the candidate placements')
