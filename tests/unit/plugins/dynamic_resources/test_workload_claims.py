"""DRAWorkloadResourceClaims: ResourceClaims of a PodGroup shared by its members, with the
default policy's pipeline from the production builder on a ClusterCache fed with watch
events (the gate in the Handle's features, as the engine builds it): the members of one
pod-group cycle share the claim's allocation, a claim reserved for the PodGroup counts as
reserved for its members and is reserved for the group (not the pod) when bound, and a
claim a template made for the PodGroup serves its members only with the gate on."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polsched.api import load_policy
from polsched.cluster.cache import ClusterCache
from polsched.framework import Snapshot
from polsched.framework import listers as ls
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import ExtensionPoint, Handle, PodGroupInfo
from polsched.framework.runtime import Pipeline
from polsched.framework.types import PodInfo
from polsched.objects import Json
from polsched.plugins import CATALOG
from polsched.plugins.dynamic_resources import workload
from polsched.plugins.dynamic_resources.plugin import DynamicResources
from polsched.scheduler.algorithm import schedule_pod
from polsched.scheduler.pipelines import build_pipeline
from polsched.scheduler.schedule_one_podgroup import pod_group_algorithm
from tests.builders import make_node, make_pod

pytestmark = pytest.mark.unit

DRIVER = "gpu.example.com"
GATES = frozenset({"GenericWorkload", workload.GATE})
GROUP_UID = "uid-group-g"


def node(name: str) -> Json:
    return (make_node().name(name).label("kubernetes.io/hostname", name)
            .allocatable({"cpu": "4", "memory": "8Gi", "pods": "110"}).obj())


def dra_objects(*devices_on: str) -> list[tuple[ls.Kind, Json]]:
    objs: list[tuple[ls.Kind, Json]] = [(ls.DEVICE_CLASS, {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})]
    for n in devices_on:
        objs.append((ls.RESOURCE_SLICE, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{n}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": n,
                     "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0"}]}}))
    return objs


def claim(name: str, *, owner_group: bool = False, allocated_on: str | None = None,
          reserved_for_group: bool = False) -> Json:
    obj: Json = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                     "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}}]}}}
    if owner_group:
        obj["metadata"]["ownerReferences"] = [{
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "name": "g",
            "uid": GROUP_UID, "controller": True}]
    if allocated_on is not None:
        obj["status"] = {"allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER,
                                     "pool": allocated_on, "device": "gpu-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [allocated_on]}]}]}}}
        if reserved_for_group:
            obj["status"]["reservedFor"] = [{"apiGroup": "scheduling.k8s.io",
                                             "resource": "podgroups", "name": "g",
                                             "uid": GROUP_UID}]
    return obj


def pod_group(min_count: int, claims: list[Json]) -> Json:
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns", "uid": GROUP_UID, "generation": 1},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}},
                     "resourceClaims": claims}}


def member(name: str, **source: str) -> Json:
    return (make_pod().name(name).namespace("ns").uid(f"uid-{name}").pod_group("g")
            .container(image="x", requests={"cpu": "1"}).resource_claim("gpu", **source).obj())


def cluster(nodes: list[str], objects: list[tuple[ls.Kind, Json]], group: Json,
            pods: list[Json], gates: frozenset[str] = GATES
            ) -> tuple[ClusterCache, Pipeline, DynamicResources]:
    cache = ClusterCache(None)
    cache.pod_groups.served = True
    for n in nodes:
        cache.on_node_event("ADDED", node(n))
    for kind, obj in objects:
        cache.on_object_event(kind, "ADDED", obj)
    cache.on_pod_group_event("ADDED", group)
    for p in pods:
        cache.on_pod_event("ADDED", p)
    pipeline = build_pipeline(load_policy({
        "apiVersion": "polsched.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "s"}, "spec": {}}, CATALOG),
        Handle(listers=cache.listers, pod_groups=cache.pod_groups, features=gates))
    dr = [p for p in pipeline.plugins.at(ExtensionPoint.PRE_BIND)
          if isinstance(p, DynamicResources)]
    assert len(dr) == 1
    return cache, pipeline, dr[0]


def prefilter_state(state: CycleState) -> Any:
    return state.get("PreFilter" + DynamicResources.NAME)


def test_the_members_of_one_cycle_share_their_pod_groups_claim() -> None:
    # One device, on node b: the first member allocates it, the second reuses that
    # allocation (and its node) instead of being told the claim is being allocated.
    group_claims = [{"name": "gpu", "resourceClaimName": "shared"}]
    cache, pipeline, dr = cluster(
        ["a", "b"], [*dra_objects("b"), (ls.RESOURCE_CLAIM, claim("shared"))],
        pod_group(2, group_claims),
        [member("m0", resourceClaimName="shared"), member("m1", resourceClaimName="shared")])
    group = PodGroupInfo("ns", "g", cache.pod_groups.get("ns", "g") or {})
    pods = [cache.pods["ns/m0"], cache.pods["ns/m1"]]
    out = asyncio.run(pod_group_algorithm(pipeline, cache, group, pods))
    assert out.status.ok, out.status.message
    assert [(m.status.ok, m.node) for m in out.members] == [(True, "b"), (True, "b")]
    first, second = (prefilter_state(m.state) for m in out.members)
    assert first.claims[0].pending is None
    assert second.claims[0].pending == first.by_node["b"][0]
    # Each member's claim is to be reserved for the PodGroup, not for the pod.
    assert dr.binding(first, 0, pods[0]) == workload.group_ref(group.pod_group)
    # The simulation is reverted: nothing stays in flight.
    assert not dr.tracker.in_flight


def test_without_the_gate_the_members_claim_is_reserved_for_the_pod() -> None:
    cache, pipeline, dr = cluster(
        ["b"], [*dra_objects("b"), (ls.RESOURCE_CLAIM, claim("shared"))],
        pod_group(1, [{"name": "gpu", "resourceClaimName": "shared"}]),
        [member("m0", resourceClaimName="shared")], gates=frozenset({"GenericWorkload"}))
    group = PodGroupInfo("ns", "g", cache.pod_groups.get("ns", "g") or {})
    out = asyncio.run(pod_group_algorithm(pipeline, cache, group, [cache.pods["ns/m0"]]))
    assert out.status.ok
    s = prefilter_state(out.members[0].state)
    assert dr.binding(s, 0, cache.pods["ns/m0"]) == workload.pod_ref(cache.pods["ns/m0"])


def schedule_one(cache: ClusterCache, pipeline: Pipeline, name: str) -> Any:
    return asyncio.run(schedule_pod(pipeline, cache.pods[f"ns/{name}"],
                                    Snapshot(list(cache.snapshot.nodes)), explain=True))


def templated_member() -> Json:
    p = member("m0", resourceClaimTemplateName="tmpl")
    p["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "g-gpu"}]}
    return p


@pytest.mark.parametrize("gates, node_name, message", [
    (GATES, "b", ""),
    (frozenset({"GenericWorkload"}), None,
     "0/2 nodes are available: ResourceClaim ns/g-gpu was not created for Pod ns/m0 "
     "(Pod is not owner)."),
])
def test_a_claim_made_for_the_pod_group_serves_its_members_with_the_gate(
        gates: frozenset[str], node_name: str | None, message: str) -> None:
    cache, pipeline, _ = cluster(
        ["a", "b"], [*dra_objects("b"), (ls.RESOURCE_CLAIM, claim("g-gpu", owner_group=True))],
        pod_group(1, [{"name": "gpu", "resourceClaimTemplateName": "tmpl"}]),
        [templated_member()], gates=gates)
    result = schedule_one(cache, pipeline, "m0")
    assert result.node == node_name
    if message:
        assert result.fit_error is not None
        assert result.fit_error.message.split(" preemption: ")[0] == message


def test_a_claim_reserved_for_the_pod_group_keeps_new_members_on_its_node() -> None:
    cache, pipeline, dr = cluster(
        ["a", "b"], [*dra_objects("a", "b"), (ls.RESOURCE_CLAIM, claim(
            "shared", allocated_on="a", reserved_for_group=True))],
        pod_group(1, [{"name": "gpu", "resourceClaimName": "shared"}]),
        [member("m0", resourceClaimName="shared")])
    result = schedule_one(cache, pipeline, "m0")
    assert result.node == "a"
    raw = cache.listers.get(ls.RESOURCE_CLAIM, "shared", "ns")
    assert raw is not None
    pod = cache.pods["ns/m0"]
    # PreBind has nothing to write: the PodGroup's reservation is the member's.
    assert workload.reserved_for_pod(pod, raw, dr.workload_claims)
    assert not workload.reserved_for_pod(pod, raw, False)


def pod_info(**source: str) -> PodInfo:
    return make_pod().name("m0").namespace("ns").uid("uid-m0").pod_group("g").container(
        image="x").resource_claim("gpu", **source).info()


def test_bind_to_matches_name_claim_and_template() -> None:
    group = pod_group(1, [{"name": "gpu", "resourceClaimName": "shared"}])
    ref, err = workload.bind_to(pod_info(resourceClaimName="shared"), group,
                                {"name": "gpu", "resourceClaimName": "shared"})
    assert (ref, err) == (workload.group_ref(group), "")
    # Same claim under another pod-claim name: the pod's own reservation.
    ref, _ = workload.bind_to(pod_info(resourceClaimName="shared"), group,
                              {"name": "other", "resourceClaimName": "shared"})
    assert ref == workload.pod_ref(pod_info())
    ref, err = workload.bind_to(pod_info(), group, {"name": "gpu"})
    assert ref is None and err == "Pod ns/m0 claim gpu: none of the supported fields are set"


def test_a_claim_of_another_pod_group_is_not_for_the_member() -> None:
    other = claim("g-gpu", owner_group=True)
    other["metadata"]["ownerReferences"][0]["name"] = "h"
    assert workload.is_for_pod(pod_info(), other, True) == (
        "ResourceClaim ns/g-gpu was not created for Pod ns/m0 (neither Pod nor PodGroup g "
        "is the owner)")
    assert workload.is_for_pod(pod_info(), claim("g-gpu", owner_group=True), True) == ""
