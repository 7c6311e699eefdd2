"""Hierarchical gangs (CompositePodGroup, scheduling.k8s.io/v1alpha3), as kube-scheduler
v1.37.1 places them with its gates CompositePodGroup and TopologyAwareWorkloadScheduling
on: the forest of groups in the cache (workload_forest.go), the queue popping a tree from
its root as one entity, GangScheduling's PreEnqueue over the tree (isCPGTreeReady), and the
recursive placement algorithm of schedule_one_podgroup.go
(compositePodGroupSchedulingPlacementAlgorithm). Pipelines come from the production
builder for the default policy, their Handle carrying the gates as the engine's does; the
cache is fed with watch events. The example throughout: an inference service whose
prefill and decode gangs must both fit in one rack."""

from __future__ import annotations

import asyncio

from polsched.api import load_policy
from polsched.cluster.cache import ClusterCache
from polsched.cluster.featuregates import TOPOLOGY_AWARE_WORKLOAD_SCHEDULING
from polsched.framework import events as ev
from polsched.framework import podgroups as pgs
from polsched.framework.interfaces import Handle
from polsched.framework.runtime import Pipeline
from polsched.framework.status import Code
from polsched.framework.types import PodInfo
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.scheduler.pipelines import build_pipeline, pod_group_key_fn, pod_group_lookup_fn
from polsched.scheduler.queue.scheduling_queue import SchedulingQueue
from polsched.scheduler.schedule_one_podgroup import (
    PodGroupResult,
    build_tree,
    complete_tree,
    pod_group_algorithm,
)
from tests.builders import make_node, make_pod

RACK = "example.com/rack"
GATES = frozenset({TOPOLOGY_AWARE_WORKLOAD_SCHEDULING, pgs.COMPOSITE_POD_GROUP})
ROOT = pgs.composite_key("ns", "infer")


def node(name: str, rack: str, cpu: str = "4") -> Json:
    return (make_node().name(name).label("kubernetes.io/hostname", name).label(RACK, rack)
            .allocatable({"cpu": cpu, "memory": "8Gi", "pods": "110"}).obj())


def composite(name: str = "infer", min_groups: int | None = 2, key: str | None = RACK,
              parent: str | None = None, created: str = "2026-01-01T00:00:00Z") -> Json:
    policy: Json = {"gang": {"minGroupCount": min_groups}} if min_groups is not None \
        else {"basic": {}}
    spec: Json = {"schedulingPolicy": policy}
    if key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    if parent is not None:
        spec["parentCompositePodGroupName"] = parent
    return {"apiVersion": pgs.COMPOSITE_API_VERSION, "kind": pgs.COMPOSITE_KIND,
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "creationTimestamp": created}, "spec": spec}


def pod_group(name: str, min_count: int, parent: str | None = "infer",
              created: str = "2026-01-01T00:00:01Z") -> Json:
    spec: Json = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if parent is not None:
        spec["parentCompositePodGroupName"] = parent
    return {"apiVersion": pgs.API_VERSION, "kind": pgs.KIND,
            "metadata": {"name": name, "namespace": "ns", "generation": 1,
                         "creationTimestamp": created}, "spec": spec}


def member(name: str, group: str, cpu: str) -> Json:
    return (make_pod().name(name).namespace("ns").uid(f"uid-{name}").resource_version("1")
            .scheduler("s").pod_group(group)
            .container(image="x", requests={"cpu": cpu, "memory": "1Gi"}).obj())


def cache_with(nodes: list[Json], composites: list[Json], groups: list[Json],
               members: list[Json]) -> ClusterCache:
    cache = ClusterCache(None)
    cache.pod_groups.served = True
    cache.pod_groups.set_composite(True)
    for n in nodes:
        cache.on_node_event("ADDED", n)
    for c in composites:
        cache.on_composite_pod_group_event("ADDED", c)
    for g in groups:
        cache.on_pod_group_event("ADDED", g)
    for m in members:
        cache.on_pod_event("ADDED", m)
    return cache


def pipeline_for(cache: ClusterCache, features: frozenset[str] = GATES) -> Pipeline:
    return build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": {}}, CATALOG),
        Handle(listers=cache.listers, pod_groups=cache.pod_groups, waiting_pods={},
               features=features))


def run(cache: ClusterCache, members: list[Json]) -> PodGroupResult:
    tree = build_tree(cache.pod_groups, ROOT)
    assert tree is not None
    pods = [cache.pods[f"ns/{m['metadata']['name']}"] for m in members]
    return asyncio.run(pod_group_algorithm(pipeline_for(cache), cache, tree, pods))


def prefill_decode(prefill_cpu: str, decode_cpu: str, min_groups: int = 2
                   ) -> tuple[list[Json], list[Json], list[Json]]:
    composites = [composite(min_groups=min_groups)]
    groups = [pod_group("prefill", 2, created="2026-01-01T00:00:01Z"),
              pod_group("decode", 2, created="2026-01-01T00:00:02Z")]
    members = [member(f"prefill-{i}", "prefill", prefill_cpu) for i in range(2)] + \
        [member(f"decode-{i}", "decode", decode_cpu) for i in range(2)]
    return composites, groups, members


def placed(out: PodGroupResult, group: str) -> list[str]:
    assert out.subtree is not None
    return [m.node for m in out.subtree[f"ns/{group}"].members if m.status.ok]


# -- the forest --------------------------------------------------------------------------
def test_a_podgroups_members_are_keyed_by_their_trees_root_once_it_is_observed() -> None:
    cache = ClusterCache(None)
    groups = cache.pod_groups
    groups.served = True
    groups.set_composite(True)
    cache.on_pod_group_event("ADDED", pod_group("prefill", 2))
    # The parent is not observed: the PodGroup's own key, and no complete root.
    assert groups.entity_key("ns", "prefill") == "ns/prefill"
    assert groups.lookup("ns/prefill") is None
    cache.on_composite_pod_group_event("ADDED", composite("sub", parent="infer"))
    assert groups.lookup("ns/prefill") is None  # the root is still missing
    cache.on_composite_pod_group_event("ADDED", composite("infer"))
    assert groups.entity_key("ns", "prefill") == ROOT
    assert groups.lookup(ROOT) is not None
    # Deleting the root breaks the tree again.
    cache.on_composite_pod_group_event("DELETED", composite("infer"))
    assert groups.entity_key("ns", "prefill") == "ns/prefill"
    assert groups.lookup(ROOT) is None


def test_the_gate_off_ignores_a_podgroups_parent() -> None:
    cache = ClusterCache(None)
    cache.pod_groups.served = True
    cache.on_pod_group_event("ADDED", pod_group("prefill", 2))
    assert cache.pod_groups.entity_key("ns", "prefill") == "ns/prefill"
    assert cache.pod_groups.lookup("ns/prefill") is not None


def test_children_come_in_creation_then_name_order() -> None:
    cache = cache_with([], [composite(), composite("b-sub", parent="infer",
                                                   created="2026-01-01T00:00:05Z")],
                       [pod_group("z", 1, created="2026-01-01T00:00:01Z"),
                        pod_group("a", 1, created="2026-01-01T00:00:05Z")], [])
    assert cache.pod_groups.children(ROOT) == [
        "ns/z", "ns/a", pgs.composite_key("ns", "b-sub")]


def test_a_cycle_of_parents_has_no_root() -> None:
    cache = cache_with([], [composite("x", parent="y"), composite("y", parent="x")],
                       [pod_group("g", 1, parent="x")], [])
    assert cache.pod_groups.root_of("ns", "g") is None


# -- GangScheduling over the tree --------------------------------------------------------
def test_preenqueue_waits_until_the_tree_meets_its_quorum() -> None:
    composites, groups, members = prefill_decode("1", "1")
    cache = cache_with([], composites, groups, members[:3])  # decode has 1 of 2
    gang = next(p for p in pipeline_for(cache).pre_enqueue_plugins
                if p.name == "GangScheduling")
    prefill = cache.pods["ns/prefill-0"]
    st = gang.pre_enqueue(prefill)
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message == 'waiting for composite pod group "infer" tree to meet quorum'
    cache.on_pod_event("ADDED", members[3])
    assert gang.pre_enqueue(prefill).ok


def test_preenqueue_with_min_group_count_one_needs_one_ready_child() -> None:
    composites, groups, members = prefill_decode("1", "1", min_groups=1)
    cache = cache_with([], composites, groups, members[:2])  # prefill complete only
    gang = next(p for p in pipeline_for(cache).pre_enqueue_plugins
                if p.name == "GangScheduling")
    assert gang.pre_enqueue(cache.pods["ns/prefill-0"]).ok


# -- the queue ---------------------------------------------------------------------------
def test_the_members_of_every_podgroup_of_a_tree_pop_as_one_group() -> None:
    composites, groups, members = prefill_decode("1", "1")
    cache = cache_with([], [], groups, [])
    pipeline = pipeline_for(cache)
    queue = SchedulingQueue()
    queue.configure(pipeline.pre_enqueue_plugins, pipeline.queueing_hints(),
                    pod_group_key_fn(pipeline), pod_group_lookup_fn(pipeline))
    for m in members:
        cache.on_pod_event("ADDED", m)
        p = PodInfo.from_json(m)
        queue.add(p)
        queue.move(ev.UNSCHEDULED_POD_ADD, None, p)
    assert queue.pop_nowait() is None  # the root is not observed yet
    cache.on_composite_pod_group_event("ADDED", composites[0])
    queue.regroup_trees()
    queue.move(ev.COMPOSITE_POD_GROUP_ADD, None, composites[0])
    first = queue.pop_nowait()
    assert first is not None
    group = queue.pop_group(first)
    assert group is not None and group.key == ROOT and group.composite
    assert (group.namespace, group.name) == ("ns", "infer")
    assert sorted(m.pod.name for m in group.members) == sorted(
        m["metadata"]["name"] for m in members)


# -- the recursive placement algorithm ---------------------------------------------------
def test_prefill_and_decode_land_together_in_the_only_rack_that_holds_both() -> None:
    # Rack a holds prefill (2 x 2 CPUs) but not decode too; rack b holds all four.
    nodes = [node("a1", "a"), node("b1", "b"), node("b2", "b")]
    composites, groups, members = prefill_decode("2", "2")
    cache = cache_with(nodes, composites, groups, members)
    out = run(cache, members)
    assert out.status.ok and out.chosen == "b"
    assert out.placements is not None
    assert [(p.placement.name, p.status.ok) for p in out.placements] == [
        ("a", False), ("b", True)]
    assert set(placed(out, "prefill")) | set(placed(out, "decode")) <= {"b1", "b2"}
    assert len(placed(out, "prefill")) == len(placed(out, "decode")) == 2
    # Rack a: prefill fit, decode did not, so the parent's gang of 2 groups failed.
    assert out.placements[0].status.message == (
        "minCount (2) cannot be satisfied: 1 scheduled, 0 remaining")
    assert not cache.assumed_keys_by_scheduler()  # everything reverted


def test_no_rack_holds_both_and_every_group_gets_the_parents_status() -> None:
    nodes = [node("a1", "a"), node("b1", "b")]
    composites, groups, members = prefill_decode("2", "2")
    cache = cache_with(nodes, composites, groups, members)
    out = run(cache, members)
    assert out.status.code is Code.UNSCHEDULABLE
    assert out.status.message == (
        "pod group is unschedulable, 0/2 placements are available, first placement "
        "status: minCount (2) cannot be satisfied: 1 scheduled, 0 remaining")
    tree = build_tree(cache.pod_groups, ROOT)
    assert tree is not None
    results = complete_tree(tree, out)
    # prefill fit in the first rack: replaced by the parent's status (the same Status);
    # decode failed on its own and keeps its own.
    assert results["ns/prefill"].status is out.status
    assert results["ns/decode"].status.code is Code.UNSCHEDULABLE
    assert results["ns/decode"].status is not out.status
    assert not cache.assumed_keys_by_scheduler()


def test_min_group_count_one_places_the_group_that_fits_and_fails_the_other() -> None:
    nodes = [node("a1", "a"), node("a2", "a")]
    composites, groups, members = prefill_decode("2", "6", min_groups=1)
    cache = cache_with(nodes, composites, groups, members)
    out = run(cache, members)
    assert out.status.ok
    assert len(placed(out, "prefill")) == 2
    assert out.subtree is not None
    decode = out.subtree["ns/decode"]
    assert decode.status.code is Code.UNSCHEDULABLE
    assert decode.members[0].fit_error is not None
    assert decode.members[0].fit_error.message == \
        "0/2 nodes are available: 2 Insufficient cpu."


def test_a_child_with_its_own_constraint_is_placed_inside_its_parents_domain() -> None:
    # The parent wants one rack; prefill wants one host (kubernetes.io/hostname) in it.
    nodes = [node("a1", "a", "2"), node("b1", "b"), node("b2", "b")]
    composites = [composite()]
    prefill = pod_group("prefill", 2)
    prefill["spec"]["schedulingConstraints"] = {
        "topology": [{"key": "kubernetes.io/hostname"}]}
    groups = [prefill, pod_group("decode", 2, created="2026-01-01T00:00:02Z")]
    members = [member(f"prefill-{i}", "prefill", "1") for i in range(2)] + \
        [member(f"decode-{i}", "decode", "1") for i in range(2)]
    cache = cache_with(nodes, composites, groups, members)
    out = run(cache, members)
    assert out.status.ok and out.chosen == "b"
    hosts = placed(out, "prefill")
    assert len(hosts) == 2 and len(set(hosts)) == 1 and hosts[0] in {"b1", "b2"}
    assert set(placed(out, "decode")) <= {"b1", "b2"}


def test_the_decode_group_sees_the_prefill_group_already_placed() -> None:
    # One rack of one 4-CPU node: prefill takes 2 x 1.5 CPUs, decode's 2 x 1.5 no longer
    # fit beside them (the chosen child stays assumed for its siblings).
    nodes = [node("a1", "a")]
    composites, groups, members = prefill_decode("1500m", "1500m")
    cache = cache_with(nodes, composites, groups, members)
    out = run(cache, members)
    assert out.status.code is Code.UNSCHEDULABLE
    assert out.subtree is not None
    assert out.subtree["ns/prefill"].status.ok
    assert not out.subtree["ns/decode"].status.ok
    assert not cache.assumed_keys_by_scheduler()


def test_a_deleted_root_sends_the_trees_members_back_to_wait_for_it() -> None:
    composites, groups, members = prefill_decode("1", "1")
    cache = cache_with([], composites, groups, [])
    pipeline = pipeline_for(cache)
    queue = SchedulingQueue()
    queue.configure(pipeline.pre_enqueue_plugins, pipeline.queueing_hints(),
                    pod_group_key_fn(pipeline), pod_group_lookup_fn(pipeline))
    for m in members:
        cache.on_pod_event("ADDED", m)
        queue.add(PodInfo.from_json(m))
    cache.on_composite_pod_group_event("DELETED", composites[0])
    queue.regroup_trees()
    assert queue.pop_nowait() is None
    # Back again: the tree goes as one.
    cache.on_composite_pod_group_event("ADDED", composites[0])
    queue.regroup_trees()
    queue.move(ev.COMPOSITE_POD_GROUP_ADD, None, composites[0])
    first = queue.pop_nowait()
    assert first is not None
    group = queue.pop_group(first)
    assert group is not None and group.key == ROOT and len(group.members) == 4
