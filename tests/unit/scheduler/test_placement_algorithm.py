"""The placement algorithm (TopologyAwareWorkloadScheduling): scheduler.schedule_one_podgroup
.pod_group_algorithm with the default policy's pipeline from the production builder, its
Handle carrying the gate as the engine's does, on a ClusterCache fed with watch events.
A gang with a topology constraint lands whole in one domain of the label; the texts are
kube-scheduler v1.37.1's."""

from __future__ import annotations

import asyncio

from polsched.api import load_policy
from polsched.cluster.cache import ClusterCache
from polsched.cluster.featuregates import TOPOLOGY_AWARE_WORKLOAD_SCHEDULING
from polsched.framework.interfaces import Handle, PodGroupInfo
from polsched.framework.runtime import Pipeline
from polsched.framework.status import Code
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.scheduler.pipelines import build_pipeline
from polsched.scheduler.schedule_one_podgroup import (
    PodGroupResult,
    pod_group_algorithm,
    pod_group_post_filter,
)
from tests.builders import make_node, make_pod

RACK = "example.com/rack"
TAS = frozenset({TOPOLOGY_AWARE_WORKLOAD_SCHEDULING})


def node(name: str, rack: str | None, cpu: str = "4") -> Json:
    n = make_node().name(name).label("kubernetes.io/hostname", name)
    if rack is not None:
        n.label(RACK, rack)
    return n.allocatable({"cpu": cpu, "memory": "8Gi", "pods": "110"}).obj()


def pod_group(min_count: int, key: str | None = RACK) -> Json:
    spec: Json = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    return {"metadata": {"name": "g", "namespace": "ns", "generation": 1}, "spec": spec}


def member(name: str, cpu: str, node_name: str = "") -> Json:
    p = (make_pod().name(name).namespace("ns").uid(f"uid-{name}").pod_group("g")
         .container(image="x", requests={"cpu": cpu, "memory": "1Gi"}))
    if node_name:
        p.node(node_name).phase("Running")
    return p.obj()


def setup(nodes: list[Json], group: Json, members: list[Json],
          features: frozenset[str] = TAS) -> tuple[ClusterCache, Pipeline]:
    cache = ClusterCache(None)
    cache.pod_groups.served = True
    for n in nodes:
        cache.on_node_event("ADDED", n)
    cache.on_pod_group_event("ADDED", group)
    for m in members:
        cache.on_pod_event("ADDED", m)
    pipeline = build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": {}}, CATALOG),
        Handle(listers=cache.listers, pod_groups=cache.pod_groups, features=features))
    return cache, pipeline


def run(nodes: list[Json], group: Json, members: list[Json],
        features: frozenset[str] = TAS) -> tuple[ClusterCache, PodGroupResult]:
    cache, pipeline = setup(nodes, group, members, features)
    pending = [cache.pods[f"ns/{m['metadata']['name']}"] for m in members
               if not m["spec"].get("nodeName")]
    return cache, asyncio.run(pod_group_algorithm(
        pipeline, cache, PodGroupInfo("ns", "g", group), pending))


def racks(out: PodGroupResult) -> list[tuple[str, bool]]:
    assert out.placements is not None
    return [(p.placement.name, p.status.ok) for p in out.placements]


def test_the_gate_adds_the_placement_plugins_to_the_default_pipeline() -> None:
    _, on = setup([], pod_group(1), [])
    _, off = setup([], pod_group(1), [], features=frozenset())
    assert on.placement_algorithm and not off.placement_algorithm
    assert [p.name for p in on.placement_generate] == ["TopologyPlacementGenerator"]
    # NodeResourcesFit is a scorer of weight 1 in the default profile; PodGroupPodsCount 1.
    assert [(p.name, w) for p, w in on.placement_score] == [("NodeResourcesFit", 1),
                                                            ("PodGroupPodsCount", 1)]
    assert not off.placement_generate and not off.placement_score


def test_a_gang_goes_whole_into_the_only_domain_that_holds_it() -> None:
    # Rack a holds 2 members of 2 CPUs, rack b 4: the gang of 3 fits in b only.
    nodes = [node("a1", "a"), node("b1", "b"), node("b2", "b")]
    cache, out = run(nodes, pod_group(3), [member(f"m{i}", "2") for i in range(3)])
    assert out.status.ok
    assert racks(out) == [("a", False), ("b", True)]
    assert out.chosen == "b"
    assert {m.node for m in out.members} <= {"b1", "b2"}
    assert all(m.status.ok for m in out.members)
    # The infeasible placement: its members' messages count rack a's node only.
    a = out.placements[0] if out.placements else None
    assert a is not None and a.members[-1].fit_error is not None
    assert a.members[-1].fit_error.message == "0/1 nodes are available: 1 Insufficient cpu."
    assert not cache.assumed_keys_by_scheduler()


def test_without_the_gate_the_gang_spreads_over_every_node() -> None:
    nodes = [node("a1", "a"), node("b1", "b")]
    _, out = run(nodes, pod_group(4), [member(f"m{i}", "2") for i in range(4)],
                 features=frozenset())
    assert out.status.ok and out.placements is None
    assert {m.node for m in out.members} == {"a1", "b1"}


def test_more_members_win_when_several_domains_fit() -> None:
    # minCount 2 of 4 members: rack a (2 nodes) holds all 4, rack b (1 node) 2.
    nodes = [node("b1", "b"), node("a1", "a"), node("a2", "a")]
    _, out = run(nodes, pod_group(2), [member(f"m{i}", "2") for i in range(4)])
    assert out.status.ok and out.chosen == "a"
    assert out.placements is not None
    by_name = {p.placement.name: p for p in out.placements}
    # PodGroupPodsCount: 4 and 2 members, normalized by the highest: 100 and 50.
    assert by_name["a"].scores["PodGroupPodsCount"] == 100
    assert by_name["b"].scores["PodGroupPodsCount"] == 50
    # NodeResourcesFit's MostAllocated over the placement: a: 8 of 8 CPUs (100), 4Gi of
    # 16Gi (25) -> 62; b: 4 of 4 CPUs (100), 2Gi of 8Gi (25) -> 62.
    assert by_name["a"].scores["NodeResourcesFit"] == 62
    assert by_name["b"].scores["NodeResourcesFit"] == 62
    assert (by_name["a"].total, by_name["b"].total) == (162, 112)
    assert sorted(m.node for m in out.members) == ["a1", "a1", "a2", "a2"]


def test_no_domain_holds_the_gang_with_the_first_placements_status() -> None:
    nodes = [node("a1", "a"), node("b1", "b")]
    _, out = run(nodes, pod_group(3), [member(f"m{i}", "2") for i in range(3)])
    assert out.status.code is Code.UNSCHEDULABLE
    assert racks(out) == [("a", False), ("b", False)]
    assert out.chosen is None
    assert out.status.message == (
        "pod group is unschedulable, 0/2 placements are available, first placement "
        "status: minCount (3) cannot be satisfied: 2 scheduled, 0 remaining")
    # The members are those of the first placement tried.
    assert [m.node for m in out.members] == ["a1", "a1", ""]


def test_no_node_with_the_label_is_no_feasible_placement() -> None:
    _, out = run([node("n1", None)], pod_group(1), [member("m0", "1")])
    assert out.status.code is Code.UNSCHEDULABLE
    assert out.status.message == "no feasible placements found"
    assert out.status.plugin == "TopologyPlacementGenerator"
    assert not out.members and out.placements == []


def test_a_group_without_constraint_has_one_placement_of_every_node() -> None:
    nodes = [node("a1", "a"), node("b1", "b")]
    _, out = run(nodes, pod_group(3, key=None), [member(f"m{i}", "2") for i in range(3)])
    assert out.status.ok
    assert racks(out) == [("", True)]
    _, out = run(nodes, pod_group(5, key=None), [member(f"m{i}", "2") for i in range(5)])
    assert out.status.message == (
        "pod group is unschedulable, 0/1 placements are available, first placement "
        "status: minCount (5) cannot be satisfied: 4 scheduled, 0 remaining")


def test_members_already_scheduled_pin_the_domain() -> None:
    # m0 is bound in rack b: only rack b is generated, though rack a has more room.
    nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b", cpu="6")]
    group = pod_group(3)
    _, out = run(nodes, group, [member("m0", "2", node_name="b1"), member("m1", "2"),
                                member("m2", "2")])
    assert out.status.ok
    assert racks(out) == [("b", True)]
    assert [m.node for m in out.members] == ["b1", "b1"]


def test_members_scheduled_in_two_domains_are_an_error() -> None:
    nodes = [node("a1", "a"), node("b1", "b")]
    _, out = run(nodes, pod_group(3), [member("m0", "1", node_name="a1"),
                                       member("m1", "1", node_name="b1"),
                                       member("m2", "1")])
    assert out.status.code is Code.ERROR
    # The two domains in the order the group's members are listed (a set, as upstream's).
    assert out.status.message in (
        f"cannot determine domain for already scheduled pods: more than 1 domain found "
        f"for pod group: {first}, {second}" for first, second in (("a", "b"), ("b", "a")))
    assert out.status.plugin == "TopologyPlacementGenerator"


def test_the_simulation_leaves_nothing_assumed() -> None:
    nodes = [node("a1", "a"), node("b1", "b"), node("b2", "b")]
    cache, out = run(nodes, pod_group(3), [member(f"m{i}", "2") for i in range(3)])
    assert out.status.ok
    assert not cache.assumed_keys_by_scheduler()
    assert all(not n.pods for n in cache.snapshot.nodes)
    assert cache.pod_groups.state("ns/g").scheduled_pods_count == 0


def test_dynamic_resources_pod_group_post_filter_leaves_a_constrained_group_alone() -> None:
    # No placement at all, so no member ran DynamicResources' PreFilter: without the gate
    # its PodGroupPostFilter would fail with `not found`; with it, a group with
    # schedulingConstraints is skipped (Unschedulable, no reason) and DefaultPreemption
    # answers.
    cache, pipeline = setup([node("n1", None)], pod_group(1), [member("m0", "1")])
    group = PodGroupInfo("ns", "g", pod_group(1))
    pods = [cache.pods["ns/m0"]]
    outcome = asyncio.run(pod_group_algorithm(pipeline, cache, group, pods))
    ran: list[tuple[str, Code]] = []
    _, st = asyncio.run(pod_group_post_filter(pipeline, cache, group, pods, outcome, ran))
    assert ran[0] == ("DynamicResources", Code.UNSCHEDULABLE)
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message == ("pod group preemption: No preemption victims found for incoming "
                          "preemptor")
