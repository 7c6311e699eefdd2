"""DynamicResources in the default profile, built by the production builder over listers
holding the claims, slices and classes: which node a pod with claims gets, the messages
of the pods that fit nowhere, and the in-flight allocation Reserve keeps."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polsched.framework import NodeInfo, PodInfo, Snapshot
from polsched.framework import listers as listers_mod
from polsched.framework.cycle_state import CycleState
from polsched.framework.listers import Listers
from polsched.plugins.dynamic_resources.plugin import DynamicResources
from polsched.scheduler.algorithm import schedule_pod
from tests.builders import make_node, make_pod
from tests.unit.pipelines import build, listers_of

pytestmark = pytest.mark.unit

DRIVER = "gpu.example.com"


def node(name: str) -> NodeInfo:
    return (make_node().name(name).labels({})
            .allocatable({"cpu": "4", "memory": "8Gi", "pods": "110"}).info())


def device_class(name: str = "gpu") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def slice_(node_name: str, *devices: str, memory: str = "40Gi") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node_name,
                     "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": d, "capacity": {"memory": {"value": memory}}}
                                 for d in devices]}}


def claim(name: str, count: int = 1, selector: str = "",
          allocation: dict[str, Any] | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu", "allocationMode": "ExactCount",
                               "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                     "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}
    if allocation is not None:
        obj["status"] = {"allocation": allocation}
    return obj


def pod(*claims: str, name: str = "trainer") -> PodInfo:
    p = make_pod().name(name).namespace("default").uid(f"uid-{name}").container(image="x")
    p.spec(resourceClaims=[])
    for c in claims:
        p.resource_claim(c, resourceClaimName=c)
    return p.info()


def schedule(p: PodInfo, nodes: list[NodeInfo], listers: Listers) -> Any:
    return asyncio.run(schedule_pod(build(defaults=True, listers=listers), p, Snapshot(nodes),
                                                                       explain=True))


def test_the_pod_goes_to_the_node_with_the_devices() -> None:
    listers = listers_of([device_class(), slice_("b", "gpu-0"), claim("one")])
    result = schedule(pod("one"), [node("a"), node("b")], listers)
    assert result.node == "b"


def test_claims_that_fit_nowhere_say_so_per_node() -> None:
    listers = listers_of([device_class(), slice_("a", "gpu-0"), slice_("b", "gpu-0"),
                          claim("two", count=2)])
    result = schedule(pod("two"), [node("a"), node("b")], listers)
    assert result.fit_error is not None
    assert result.fit_error.message.split(" preemption: ")[0] == (
        "0/2 nodes are available: 2 cannot allocate all claims.")


def test_a_selector_picks_the_device() -> None:
    listers = listers_of([
        device_class(), slice_("a", "gpu-0", memory="16Gi"), slice_("b", "gpu-0"),
        claim("big", selector=f'device.capacity["{DRIVER}"].memory.compareTo('
                              'quantity("32Gi")) >= 0')])
    assert schedule(pod("big"), [node("a"), node("b")], listers).node == "b"


def test_a_missing_class_is_unresolvable() -> None:
    listers = listers_of([slice_("a", "gpu-0"), claim("one")])
    result = schedule(pod("one"), [node("a")], listers)
    assert result.fit_error is not None
    assert result.fit_error.message.split(" preemption: ")[0] == (
        "0/1 nodes are available: request gpu: device class gpu does not exist.")


def test_an_allocated_claim_keeps_the_pod_on_its_node() -> None:
    allocation = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "b",
                                           "device": "gpu-0"}]},
                  "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                      {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}
    listers = listers_of([device_class(), slice_("a", "gpu-0"), slice_("b", "gpu-0"),
                          claim("shared", allocation=allocation)])
    assert schedule(pod("shared"), [node("a"), node("b")], listers).node == "b"


def test_reserve_keeps_the_devices_from_the_next_pod_until_unreserve() -> None:
    listers = listers_of([device_class(), slice_("a", "gpu-0"), claim("c1"), claim("c2")])
    plugin = DynamicResources(listers, None)
    snapshot = Snapshot([node("a")])
    first, second = CycleState(), CycleState()
    assert plugin.pre_filter(first, pod("c1", name="p1"), snapshot).ok
    assert plugin.filter(first, pod("c1", name="p1"), snapshot.nodes[0]).ok
    assert plugin.reserve(first, pod("c1", name="p1"), "a").ok
    # The other pod's claim cannot get gpu-0 while it is in flight...
    assert plugin.pre_filter(second, pod("c2", name="p2"), snapshot).ok
    st = plugin.filter(second, pod("c2", name="p2"), snapshot.nodes[0])
    assert st.reasons == ("cannot allocate all claims",)
    # ... and can once the first pod's allocation is dropped.
    plugin.unreserve(first, pod("c1", name="p1"), "a")
    third = CycleState()
    assert plugin.pre_filter(third, pod("c2", name="p2"), snapshot).ok
    assert plugin.filter(third, pod("c2", name="p2"), snapshot.nodes[0]).ok


def bound_claim(name: str, conditions: list[dict[str, str]] | None,
                stamp: str = "2099-01-01T00:00:00Z") -> dict[str, Any]:
    """A claim allocated on a device with binding conditions, and the device's status."""
    allocation = {"devices": {"results": [{
        "request": "gpu", "driver": DRIVER, "pool": "a", "device": "gpu-0",
        "bindingConditions": ["attached"], "bindingFailureConditions": ["failed"]}]},
        "allocationTimestamp": stamp}
    c = claim(name, allocation=allocation)
    if conditions is not None:
        c["status"]["devices"] = [{"driver": DRIVER, "pool": "a", "device": "gpu-0",
                                   "conditions": conditions}]
    return c


@pytest.mark.parametrize("conditions, stamp, fits", [
    (None, "2099-01-01T00:00:00Z", True),  # still binding, in time
    ([{"type": "attached", "status": "True"}], "2000-01-01T00:00:00Z", True),  # bound
    ([{"type": "failed", "status": "True", "reason": "X"}], "2099-01-01T00:00:00Z", False),
    (None, "2000-01-01T00:00:00Z", False),  # timed out
])
def test_filter_skips_allocated_claims_whose_devices_failed_to_bind_or_timed_out(
        conditions: list[dict[str, str]] | None, stamp: str, fits: bool) -> None:
    listers = listers_of([device_class(), slice_("a", "gpu-0"),
                          bound_claim("c", conditions, stamp)])
    plugin = DynamicResources(listers, None)
    state = CycleState()
    assert plugin.pre_filter(state, pod("c"), Snapshot([node("a")])).ok
    st = plugin.filter(state, pod("c"), node("a"))
    assert st.ok is fits
    if not fits:
        assert st.reasons == ("resourceclaim not available on the node",)


def test_binding_timeout_is_an_arg() -> None:
    from polsched.framework.registry import ArgsError
    from tests.unit.pipelines import build_plugin

    plugin = build_plugin("DynamicResources", {"bindingTimeout": "30s"})
    assert plugin.binding_timeout == 30.0
    with pytest.raises(ArgsError, match="bindingTimeout"):
        build_plugin("DynamicResources", {"bindingTimeout": 30})


def taint_rule(name: str, taint: dict[str, str], **selector: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": name},
            "spec": {"deviceSelector": {"driver": DRIVER, **selector}, "taint": taint}}


def test_device_taint_rules_taint_the_devices_they_select() -> None:
    """A DeviceTaintRule's NoSchedule taint keeps a device from claims that do not
    tolerate it: on node a the only GPU is tainted by the rule, so the pod goes to b."""
    rule = taint_rule("maintenance", {"key": "maint", "value": "yes", "effect": "NoSchedule"},
                      pool="a", device="gpu-0")
    listers = listers_of([device_class(), slice_("a", "gpu-0"), slice_("b", "gpu-0"),
                          claim("one"), rule])
    plugin = DynamicResources(listers, None)
    snapshot = Snapshot([node("a"), node("b")])
    state = CycleState()
    assert plugin.pre_filter(state, pod("one"), snapshot).ok
    assert plugin.filter(state, pod("one"), node("a")).reasons == ("cannot allocate all claims",)
    assert plugin.filter(state, pod("one"), node("b")).ok
    # Deleting the rule frees the device.
    listers.apply(listers_mod.DEVICE_TAINT_RULE, "DELETED", rule)
    state = CycleState()
    assert plugin.pre_filter(state, pod("one"), snapshot).ok
    assert plugin.filter(state, pod("one"), node("a")).ok


def test_score_prefers_the_node_where_the_first_choice_of_a_prioritized_list_fits() -> None:
    """computeScore: 8 minus the index of the subrequest picked; weight 2 in the default
    profile. a has only an a100 (second choice), b an h100 (first choice)."""
    def gpu_slice(n: str, model: str) -> dict[str, Any]:
        s = slice_(n, "gpu-0")
        s["spec"]["devices"][0]["attributes"] = {"model": {"string": model}}
        return s

    first_available = [
        {"name": model, "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1,
         "selectors": [{"cel": {"expression":
                                f'device.attributes["{DRIVER}"].model == "{model}"'}}]}
        for model in ("h100", "a100")]
    c = claim("choice")
    c["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": first_available}]
    listers = listers_of([device_class(), gpu_slice("a", "a100"), gpu_slice("b", "h100"), c])
    result = schedule(pod("choice"), [node("a"), node("b")], listers)
    assert result.node == "b"
    scores = {ns.node: (ps.raw, ps.normalized, ps.weighted)
              for ns in result.explanation.scores
              for ps in (ns.plugins["DynamicResources"],)}
    # (raw, normalized, weighted)
    assert scores == {"a": (7, 87, 174), "b": (8, 100, 200)}


def test_the_allocator_speaks_before_an_unusable_allocated_claim() -> None:
    """Filter as upstream: the unallocated claims are allocated first; only when they fit
    does a node say that an allocated claim is not available there (and only then may
    PostFilter deallocate it)."""
    allocation = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "b",
                                           "device": "gpu-0"}]},
                  "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                      {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}
    listers = listers_of([device_class(), slice_("a", "gpu-0"), slice_("b", "gpu-0"),
                          claim("pinned", allocation=allocation), claim("two", count=2),
                          claim("one")])
    plugin = DynamicResources(listers, None)
    snapshot = Snapshot([node("a")])
    state = CycleState()
    p = pod("pinned", "two")
    assert plugin.pre_filter(state, p, snapshot).ok
    assert plugin.filter(state, p, snapshot.nodes[0]).reasons == ("cannot allocate all claims",)
    state = CycleState()
    p = pod("pinned", "one")
    assert plugin.pre_filter(state, p, snapshot).ok
    assert plugin.filter(state, p, snapshot.nodes[0]).reasons == (
        "resourceclaim not available on the node",)


def test_a_failed_binding_reads_as_upstreams_error() -> None:
    """isClaimReadyForBinding's text: the message quoted as Go's %q (double quotes)."""
    from polsched.plugins.dynamic_resources.device_state import claim_ready_for_binding
    c = bound_claim("c", [{"type": "failed", "status": "True", "reason": "Detached",
                           "message": "it's gone"}])
    assert claim_ready_for_binding(c) == (
        False, 'claim=c, reason=Detached, message="it\'s gone"')
