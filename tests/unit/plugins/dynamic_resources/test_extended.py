"""DRAExtendedResource: which class serves an extended resource, the special claim's
requests and mappings (upstream's Test_createRequestsAndMappings_* cases), and pods that
ask for an extended resource scheduled by the default profile over listers holding the
classes and slices: NodeResourcesFit leaves the resource to DynamicResources on a node
that does not advertise it, and DynamicResources allocates devices for it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polsched.framework import NodeInfo, PodInfo, Snapshot
from polsched.framework import events as ev
from polsched.framework.cycle_state import CycleState
from polsched.framework.device_classes import resolver_for
from polsched.framework.interfaces import Handle
from polsched.framework.listers import Listers
from polsched.plugins.dynamic_resources import extended
from polsched.plugins.dynamic_resources.plugin import DynamicResources
from polsched.plugins.node_resources_fit import DEFAULT_ARGS, NodeResourcesFit
from polsched.plugins.node_resources_fit import new as new_fit
from polsched.scheduler.algorithm import schedule_pod
from tests.builders import make_node, make_pod
from tests.unit.pipelines import build, listers_of

pytestmark = pytest.mark.unit

DRIVER = "gpu.example.com"
GPU = "example.com/gpu"


def device_class(name: str, resource: str | None = None,
                 created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {
        "expression": f'device.driver == "{DRIVER}"'}}]}
    if resource is not None:
        spec["extendedResourceName"] = resource
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


def slice_(node_name: str, *devices: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node_name,
                     "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": d} for d in devices]}}


def node(name: str, **extra: str) -> NodeInfo:
    return (make_node().name(name).labels({})
            .allocatable({"cpu": "4", "memory": "8Gi", "pods": "110", **extra}).info())


def container(name: str, requests: dict[str, str], sidecar: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "x", "resources": {"requests": requests}}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def gpu_pod(count: int = 1, resource: str = GPU, name: str = "trainer") -> PodInfo:
    return (make_pod().name(name).namespace("default").uid(f"uid-{name}")
            .containers([container("c", {resource: str(count)})]).info())


def schedule(p: PodInfo, nodes: list[NodeInfo], listers: Listers) -> Any:
    return asyncio.run(schedule_pod(build(defaults=True, listers=listers), p, Snapshot(nodes),
                                    explain=True))


# -- the resolver ---------------------------------------------------------------------
def test_a_class_serves_its_extended_resource_name_and_its_implicit_name() -> None:
    listers = listers_of([device_class("gpu", GPU)])
    r = resolver_for(listers)
    assert r.get_device_class(GPU)["metadata"]["name"] == "gpu"  # type: ignore[index]
    assert r.get_device_class(
        "deviceclass.resource.kubernetes.io/gpu")["metadata"]["name"] == "gpu"  # type: ignore[index]
    assert r.get_device_class("example.com/other") is None


def test_the_newest_class_serves_a_shared_name_then_the_smaller_name() -> None:
    listers = listers_of([device_class("old", GPU, "2026-01-01T00:00:00Z"),
                          device_class("new", GPU, "2026-02-01T00:00:00Z")])
    assert resolver_for(listers).get_device_class(GPU)["metadata"]["name"] == "new"  # type: ignore[index]
    listers = listers_of([device_class("b", GPU), device_class("a", GPU)])
    assert resolver_for(listers).get_device_class(GPU)["metadata"]["name"] == "a"  # type: ignore[index]


# -- createRequestsAndMappings (upstream's cases) --------------------------------------
def upstream_classes() -> Listers:
    return listers_of([device_class("class", GPU), device_class("class1", GPU + "1"),
                       device_class("classInit", GPU + "init")])


def requests_of(spec: dict[str, Any], resources: list[str]) -> tuple[list[tuple[str, str, int]],
                                                                     list[tuple[str, str, str]]]:
    reqs, mappings = extended.requests_and_mappings(spec, resources,
                                                    resolver_for(upstream_classes()))
    return ([(r["name"], r["exactly"]["deviceClassName"], r["exactly"]["count"]) for r in reqs],
            [(m["containerName"], m["resourceName"], m["requestName"]) for m in mappings])


def test_two_resources_of_one_container_get_a_request_each() -> None:
    spec = {"containers": [container("con0", {GPU: "1", GPU + "1": "2"})]}
    assert requests_of(spec, [GPU, GPU + "1"]) == (
        [("container-0-request-0", "class", 1), ("container-0-request-1", "class1", 2)],
        [("con0", GPU, "container-0-request-0"), ("con0", GPU + "1", "container-0-request-1")])
    # A resource that no class serves gets no request.
    assert requests_of({"containers": [container("con0", {GPU: "1", "x.io/y": "2"})]},
                       [GPU, "x.io/y"])[0] == [("container-0-request-0", "class", 1)]


def test_two_containers_get_a_request_each() -> None:
    spec = {"containers": [container("con0", {GPU: "1"}), container("con1", {GPU + "1": "2"})]}
    assert requests_of(spec, [GPU, GPU + "1"]) == (
        [("container-0-request-0", "class", 1), ("container-1-request-0", "class1", 2)],
        [("con0", GPU, "container-0-request-0"), ("con1", GPU + "1", "container-1-request-0")])


def test_one_init_container_and_one_regular_container() -> None:
    spec = {"initContainers": [container("init-con0", {GPU + "init": "2"})],
            "containers": [container("con0", {GPU: "1"})]}
    assert requests_of(spec, [GPU, GPU + "init"])[0] == [
        ("container-0-request-0", "classInit", 2), ("container-1-request-0", "class", 1)]


def test_init_containers_share_the_largest_request_among_them() -> None:
    spec = {"initContainers": [container("init-con0", {GPU + "init": "1"}),
                               container("init-con1", {GPU + "init": "2"})],
            "containers": [container("con0", {GPU: "1"})]}
    reqs, mappings = requests_of(spec, [GPU, GPU + "init"])
    assert reqs == [("container-1-request-0", "classInit", 2),
                    ("container-2-request-0", "class", 1)]
    assert ("init-con0", GPU + "init", "container-1-request-0") in mappings
    assert ("init-con1", GPU + "init", "container-1-request-0") in mappings


def test_an_init_container_reuses_a_later_sidecars_request() -> None:
    spec = {"initContainers": [container("init-con0", {GPU + "init": "1"}),
                               container("sidecar", {GPU + "init": "1"}, sidecar=True),
                               container("init-con2", {GPU + "init": "2"})],
            "containers": [container("con0", {GPU: "1"})]}
    assert requests_of(spec, [GPU, GPU + "init"])[0] == [
        ("container-1-request-0", "classInit", 1), ("container-2-request-0", "classInit", 2),
        ("container-3-request-0", "class", 1)]


# -- scheduling --------------------------------------------------------------------------
def test_the_pod_goes_to_the_node_with_enough_devices() -> None:
    listers = listers_of([device_class("gpu", GPU), slice_("a", "gpu-0"),
                          slice_("b", "gpu-0", "gpu-1")])
    result = schedule(gpu_pod(2), [node("a"), node("b")], listers)
    assert result.node == "b"


def test_the_implicit_name_asks_the_class_for_devices() -> None:
    listers = listers_of([device_class("gpu"), slice_("b", "gpu-0")])
    result = schedule(gpu_pod(1, "deviceclass.resource.kubernetes.io/gpu"),
                      [node("a"), node("b")], listers)
    assert result.node == "b"


def test_too_few_devices_anywhere_cannot_allocate() -> None:
    listers = listers_of([device_class("gpu", GPU), slice_("a", "gpu-0"),
                          slice_("b", "gpu-0")])
    result = schedule(gpu_pod(2), [node("a"), node("b")], listers)
    assert result.fit_error is not None
    assert result.fit_error.message.split(" preemption: ")[0] == (
        "0/2 nodes are available: 2 cannot allocate all claims.")


def test_without_a_class_the_resource_is_the_nodes_allocatable() -> None:
    listers = listers_of([slice_("a", "gpu-0")])
    result = schedule(gpu_pod(1), [node("a")], listers)
    assert result.fit_error is not None
    assert result.fit_error.message.split(" preemption: ")[0] == (
        "0/1 nodes are available: 1 Insufficient example.com/gpu.")


def test_a_node_that_advertises_the_resource_serves_it_from_its_device_plugin() -> None:
    # Node a advertises the resource (a device plugin) and has no devices; b has devices.
    listers = listers_of([device_class("gpu", GPU), slice_("b", "gpu-0")])
    result = schedule(gpu_pod(1), [node("a", **{GPU: "1"}), node("c")], listers)
    assert result.node == "a"
    # Too few on the device plugin's node is NodeResourcesFit's Insufficient, as upstream:
    # a node that advertises the resource never asks the devices.
    result = schedule(gpu_pod(2), [node("a", **{GPU: "1"})], listers)
    assert result.fit_error is not None
    assert "1 Insufficient example.com/gpu" in result.fit_error.message


def test_reserve_puts_the_special_claim_in_flight_for_the_next_pod() -> None:
    listers = listers_of([device_class("gpu", GPU), slice_("a", "gpu-0")])
    plugin = DynamicResources(listers, None)
    snapshot = Snapshot([node("a")])
    first, second = CycleState(), CycleState()
    p1, p2 = gpu_pod(name="p1"), gpu_pod(name="p2")
    assert plugin.pre_filter(first, p1, snapshot).ok
    assert plugin.filter(first, p1, snapshot.nodes[0]).ok
    assert plugin.reserve(first, p1, "a").ok
    assert plugin.pre_filter(second, p2, snapshot).ok
    assert plugin.filter(second, p2, snapshot.nodes[0]).reasons == (
        "cannot allocate all claims",)
    plugin.unreserve(first, p1, "a")
    third = CycleState()
    assert plugin.pre_filter(third, p2, snapshot).ok
    assert plugin.filter(third, p2, snapshot.nodes[0]).ok


def test_a_claim_left_by_an_earlier_attempt_is_refused_for_postfilter_to_delete() -> None:
    left = extended.special_claim("default", "trainer", "uid-trainer")
    left["metadata"]["name"] = "trainer-extended-resources-abcde"
    left["spec"] = {"devices": {"requests": [{"name": "container-0-request-0", "exactly": {
        "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}}]}}
    listers = listers_of([device_class("gpu", GPU), slice_("a", "gpu-0"), left])
    plugin = DynamicResources(listers, None)
    state = CycleState()
    p = gpu_pod()
    assert plugin.pre_filter(state, p, Snapshot([node("a")])).ok
    assert plugin.filter(state, p, node("a")).reasons == (
        "cannot schedule extended resource claim",)


def test_fit_requeues_the_pod_when_a_class_for_its_resource_appears() -> None:
    fit = new_fit(DEFAULT_ARGS, Handle(listers=listers_of([])))
    assert isinstance(fit, NodeResourcesFit)
    hint = next(e.hint for e in fit.events_to_register()
                if e.event.resource is ev.Resource.DEVICE_CLASS)
    assert hint is not None
    p = gpu_pod(1, "deviceclass.resource.kubernetes.io/gpu")
    assert hint(p, None, device_class("gpu")) is ev.QUEUE
    assert hint(p, None, device_class("other")) is ev.QUEUE_SKIP
    q = gpu_pod(1)
    assert hint(q, device_class("gpu"), device_class("gpu", GPU)) is ev.QUEUE
    assert hint(q, device_class("gpu", GPU), device_class("gpu", GPU)) is ev.QUEUE_SKIP


def test_scoring_an_extended_resource_counts_the_nodes_devices() -> None:
    """calculateDRAExtendedResourceAllocatableRequest: a scoring resource served by a
    DeviceClass, on nodes that do not advertise it, has the class's devices on the node
    as allocatable and those allocated claims use as allocated (LeastAllocated: a has
    4 - 3 in use - 1 asked = 0 left of 4, b 3 of 4)."""
    from polsched.plugins.node_resources_balanced_allocation import new as new_balanced
    allocation = {"devices": {"results": [
        {"request": "r", "driver": DRIVER, "pool": "a", "device": f"gpu-{i}"}
        for i in range(3)]}}
    used = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "used", "namespace": "default", "uid": "u1"},
            "spec": {"devices": {"requests": []}}, "status": {"allocation": allocation}}
    devices = [f"gpu-{i}" for i in range(4)]
    listers = listers_of([device_class("gpu", GPU), slice_("a", *devices),
                          slice_("b", *devices), used])
    args = {"scoringStrategy": {"type": "LeastAllocated",
                                "resources": [{"name": GPU, "weight": 1}]}}
    fit = new_fit(args, Handle(listers=listers))
    p = gpu_pod(1)
    nodes = [node("a"), node("b")]
    state = CycleState()
    assert fit.pre_score(state, p, nodes, Snapshot(nodes)).ok
    assert fit.score_nodes(state, p, nodes) == [0, 75]
    assert [fit.score(state, p, n) for n in nodes] == [0, 75]
    # Without the class, the resource is left out of the score.
    bare = new_fit(args, Handle(listers=listers_of([slice_("a", *devices)])))
    state = CycleState()
    assert bare.pre_score(state, p, nodes, Snapshot(nodes)).ok
    assert bare.score_nodes(state, p, nodes) == [0, 0]
    # BalancedAllocation over cpu and the GPUs (v1.37: how much the pod improves the
    # node's balance): on a the GPU share goes 3/4 -> 4/4 and cpu 0 -> 1/2, balance 62
    # -> 75, score 50 + (50 + 75 - 62) // 2 = 81; on b 0 -> 1/4 and 0 -> 1/2, balance
    # 100 -> 87, score 50 + (50 + 87 - 100) // 2 = 68.
    balanced = new_balanced({"resources": [{"name": "cpu", "weight": 1},
                                           {"name": GPU, "weight": 1}]},
                            Handle(listers=listers))
    q = (make_pod().name("q").namespace("default").uid("q")
         .containers([container("c", {"cpu": "2", GPU: "1"})]).info())
    state = CycleState()
    assert balanced.pre_score(state, q, nodes, Snapshot(nodes)).ok
    assert balanced.score_nodes(state, q, nodes) == [81, 68]
