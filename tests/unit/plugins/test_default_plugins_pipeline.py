"""The default kube-scheduler plugins run together in a framework.Pipeline: filters in
upstream order, then weighted scorers, as kube-scheduler's default profile
(pkg/scheduler/apis/config/v1/default_plugins.go); the FitError text follows upstream's
FitError.Error (pkg/scheduler/framework/types.go), checked by schedule_one_test.go."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from polsched.framework import NodeInfo, Pipeline, PodInfo, ScheduleResult, Snapshot
from polsched.framework.diagnosis import PluginScore
from polsched.scheduler.algorithm import schedule_pod
from tests.builders import make_node, make_pod
from tests.unit.pipelines import build

pytestmark = pytest.mark.unit

FILTERS = ["NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity", "NodePorts",
           "NodeResourcesFit"]
SCORERS = [("TaintToleration", 3), ("NodeAffinity", 2), ("NodeResourcesFit", 1),
           ("NodeResourcesBalancedAllocation", 1), ("ImageLocality", 1)]


def pipeline() -> Pipeline:
    """The default profile's node-local plugins, loaded and built as the engine does."""
    return build(defaults=False, filters=[{"name": n} for n in FILTERS],
                 scorers=[{"name": n, "weight": w} for n, w in SCORERS],
                 rng=random.Random(1))


def filters_part(message: str) -> str:
    return message.split(" preemption: ")[0]


def node(name: str, cpu: str = "4", labels: dict[str, str] | None = None,
         taints: list[dict[str, str]] | None = None, unschedulable: bool = False) -> NodeInfo:
    return (make_node().name(name).labels(labels or {}).taints(taints or [])
            .unschedulable(unschedulable)
            .allocatable({"cpu": cpu, "memory": "8Gi", "pods": "110"}).info())


def pod(cpu: str, name: str = "web", **spec: Any) -> PodInfo:
    return (make_pod().name(name).namespace("default")
            .container(image="nginx", requests={"cpu": cpu, "memory": "1Gi"}).spec(**spec)
            .info())


def schedule(p: PodInfo, nodes: list[NodeInfo]) -> ScheduleResult:
    return asyncio.run(schedule_pod(pipeline(), p, Snapshot(nodes), explain=True))


DEDICATED = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]


def test_no_node_fits_reports_the_sorted_reason_histogram() -> None:
    nodes = [node("small", cpu="1"),
             node("gpu-1", taints=DEDICATED), node("gpu-2", taints=DEDICATED)]
    result = schedule(pod("2"), nodes)
    assert result.node is None
    assert result.fit_error is not None
    # The filters' part (DefaultPreemption's sentence follows it).
    assert filters_part(result.fit_error.message) == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint(s).")
    statuses = result.fit_error.node_statuses
    assert statuses["small"].plugin == "NodeResourcesFit"
    assert statuses["gpu-1"].plugin == "TaintToleration"


def test_every_filter_reason_shows_in_the_histogram() -> None:
    busy = node("ports", labels={"zone": "a"})
    busy.add_pod(make_pod().name("old").namespace("default")
                 .container(ports=[{"containerPort": 80, "hostPort": 80}]).info())
    nodes = [node("cordoned", unschedulable=True, labels={"zone": "a"}),
             node("tainted", taints=DEDICATED, labels={"zone": "a"}),
             node("zone-b", labels={"zone": "b"}),
             busy,
             node("small", cpu="500m", labels={"zone": "a"})]
    p = (make_pod().name("web").namespace("default").node_selector({"zone": "a"})
         .container(ports=[{"containerPort": 80, "hostPort": 80}], requests={"cpu": "1"})
         .info())
    result = schedule(p, nodes)
    assert result.fit_error is not None
    assert filters_part(result.fit_error.message) == (
        "0/5 nodes are available: 1 Insufficient cpu, "
        "1 node(s) didn't have free ports for the requested pod ports, "
        "1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint(s), 1 node(s) were unschedulable.")


def test_scores_pick_the_preferred_lightly_loaded_node() -> None:
    loaded = node("zone-a-loaded", labels={"zone": "a"})
    loaded.add_pod(pod("3", name="existing"))
    nodes = [
        node("zone-a", labels={"zone": "a"}),
        node("zone-b", labels={"zone": "b"}),
        loaded,
        node("soft-tainted", labels={"zone": "a"},
             taints=[{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]),
        node("cordoned", labels={"zone": "a"}, unschedulable=True),
    ]
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a"]}]}}]}}
    result = schedule(pod("1", affinity=affinity), nodes)
    assert result.node == "zone-a"
    assert result.feasible_nodes == 4
    assert result.explanation is not None
    by_node = {s.node: s for s in result.explanation.scores}
    # TaintToleration (weight 3) marks the PreferNoSchedule node down.
    assert by_node["soft-tainted"].plugins["TaintToleration"] == PluginScore(1, 0, 0)
    assert by_node["zone-a"].plugins["TaintToleration"] == PluginScore(0, 100, 300)
    # NodeAffinity (weight 2) prefers zone a.
    assert by_node["zone-b"].plugins["NodeAffinity"] == PluginScore(0, 0, 0)
    assert by_node["zone-a"].plugins["NodeAffinity"] == PluginScore(10, 100, 200)
    # LeastAllocated prefers the empty zone-a node over the loaded one.
    assert (by_node["zone-a"].plugins["NodeResourcesFit"].weighted
            > by_node["zone-a-loaded"].plugins["NodeResourcesFit"].weighted)
    assert result.explanation.filters["cordoned"].reasons == ("node(s) were unschedulable",)


# -- PreFilterResult (findNodesThatFitPod / RunPreFilterPlugins) ------------------------

def match_fields(*names: str) -> dict[str, Any]:
    """One term per node name (ORed); a field requirement takes exactly one value."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [n]}]} for n in names]}}}


def test_match_fields_pod_is_filtered_only_on_its_nodes() -> None:
    """NodeAffinity's PreFilterResult: the other nodes are UnschedulableAndUnresolvable
    "didn't satisfy plugin(s) [NodeAffinity]" without their filters running."""
    nodes = [node("a", cpu="1"), node("b"), node("c"), node("d", cpu="1")]
    result = schedule(pod("2", affinity=match_fields("a", "d", "gone")), nodes)
    assert result.node is None and result.fit_error is not None
    assert filters_part(result.fit_error.message) == (
        "0/4 nodes are available: 2 Insufficient cpu, "
        "2 node(s) didn't satisfy plugin(s) [NodeAffinity].")
    # Only a and d were filtered; b and c count under the absent status.
    assert sorted(result.fit_error.node_statuses) == ["a", "d"]
    assert result.fit_error.status_of("b") == result.fit_error.absent_status
    assert result.evaluated_nodes == 2
    assert schedule(pod("1", affinity=match_fields("a", "b")), nodes).node in ("a", "b")


def test_conflicting_match_fields_are_rejected_at_prefilter() -> None:
    terms = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["a"]},
            {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}}
    result = schedule(pod("1", affinity=terms), [node("a"), node("b")])
    assert result.fit_error is not None
    assert filters_part(result.fit_error.message) == (
        "0/2 nodes are available: pod affinity terms conflict.")


def test_node_name_and_match_fields_intersect_to_nothing() -> None:
    """Two PreFilterResults with no node in common: upstream's message names both."""
    result = schedule(pod("1", nodeName="a", affinity=match_fields("b")),
                      [node("a"), node("b")])
    assert result.fit_error is not None
    assert filters_part(result.fit_error.message) == (
        "0/2 nodes are available: node(s) didn't satisfy plugin(s) [NodeAffinity NodeName] "
        "simultaneously.")


def test_a_pod_whose_resource_claim_does_not_exist_is_unresolvable() -> None:
    """DynamicResources' PreFilter, with the lister's NotFound text as upstream's; a pod
    without claims skips the plugin."""
    pl = build(defaults=True)
    claims = [{"name": "gpu", "resourceClaimName": "gpu-claim"}]
    result = asyncio.run(schedule_pod(pl, pod("1", resourceClaims=claims),
                                     Snapshot([node("a"), node("b")])))
    assert result.fit_error is not None
    assert result.fit_error.message == (
        '0/2 nodes are available: resourceclaim.resource.k8s.io "gpu-claim" not found. '
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
    assert asyncio.run(schedule_pod(pl, pod("1"), Snapshot([node("a")]))).node == "a"
