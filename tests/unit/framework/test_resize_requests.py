"""A pod resized in place counts the larger of its spec and status resources
(InPlacePodVerticalScaling, GA; InPlacePodLevelResourcesVerticalScaling, beta and on in
v1.37), as kube-scheduler's PodInfo.CalculateResource reads it. Cases ported from
k8s.io/component-helpers@v0.37.1 resource/helpers_test.go (TestPodResourceRequests,
TestAggregateContainerRequestsAndLimits, TestPodRequestsAndLimitsVerticalScalingWrappers);
then what a node and the default profile make of it."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from polsched.framework import NodeInfo, PodInfo, Snapshot
from polsched.framework import events as ev
from polsched.framework.resources import pod_requests, reads_status
from polsched.objects import Json
from polsched.scheduler.algorithm import schedule_pod
from tests.unit.pipelines import build

pytestmark = pytest.mark.unit

INFEASIBLE = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]
DEFERRED = [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}]


def ctr(name: str, cpu: str | None = None, restart: str | None = None,
        **requests: str) -> Json:
    req = dict(requests)
    if cpu is not None:
        req["cpu"] = cpu
    out: Json = {"name": name, "resources": {"requests": req}}
    if restart:
        out["restartPolicy"] = restart
    return out


def cstatus(name: str, allocated: dict[str, str] | None = None,
            actual: dict[str, str] | None = None) -> Json:
    out: Json = {"name": name}
    if allocated is not None:
        out["allocatedResources"] = allocated
    if actual is not None:
        out["resources"] = {"requests": actual}
    return out


# -- TestPodResourceRequests with UseStatusResources ------------------------------------------
@pytest.mark.parametrize(("spec", "status", "want"), [
    pytest.param({"containers": [ctr("container-1", "4")]},
                 {"conditions": INFEASIBLE,
                  "containerStatuses": [cstatus("container-1", actual={"cpu": "2"})]},
                 {"cpu": 2000}, id="resized, infeasible"),
    pytest.param({"containers": [ctr("container-1", "6")]},
                 {"conditions": INFEASIBLE,
                  "containerStatuses": [cstatus("container-1", {"cpu": "4"}, {"cpu": "2"})]},
                 {"cpu": 4000}, id="resized, infeasible & in-progress"),
    pytest.param({"containers": [ctr("container-1", "4")]},
                 {"containerStatuses": [cstatus("container-1", actual={"cpu": "2"})]},
                 {"cpu": 4000}, id="resized, no resize status"),
    pytest.param({"containers": [ctr("container-1", "30m", memory="20M",
                                     **{"ephemeral-storage": "10G"})]},
                 {"containerStatuses": [cstatus(
                     "container-1",
                     {"cpu": "20m", "memory": "10M", "ephemeral-storage": "30G"},
                     {"cpu": "10m", "memory": "30M", "ephemeral-storage": "20G"})]},
                 {"cpu": 30, "memory": 30 * 10**6, "ephemeral-storage": 30 * 10**9},
                 id="resized: per-resource 3-way maximum"),
    pytest.param({"initContainers": [ctr("restartable-init-1", "4", restart="Always")]},
                 {"conditions": INFEASIBLE,
                  "initContainerStatuses": [cstatus("restartable-init-1", actual={"cpu": "2"})]},
                 {"cpu": 2000}, id="resized, restartable init container, infeasible"),
    pytest.param({"initContainers": [ctr("restartable-init-1", "4", restart="Always")]},
                 {"initContainerStatuses": [cstatus("restartable-init-1", actual={"cpu": "2"})]},
                 {"cpu": 4000}, id="resized, restartable init container, no resize status"),
    pytest.param({"containers": [ctr("c1", "1"), ctr("c2", "2")]},
                 {"containerStatuses": [cstatus("c1", {"cpu": "2"}), cstatus("c2", {"cpu": "1"})]},
                 {"cpu": 3000},
                 id="aggregate request resolves max of sums instead of sum of maxes"),
    pytest.param({"containers": [ctr("container-1", "4")]},
                 {"conditions": DEFERRED,
                  "containerStatuses": [cstatus("container-1", {"cpu": "2"}, {"cpu": "2"})]},
                 {"cpu": 4000}, id="deferred resize counts the spec"),
    # TestAggregateContainerRequestsAndLimits: the pod-level status stands for the
    # containers' when both of its fields are set.
    pytest.param({"containers": [ctr("c1", "1")]},
                 {"allocatedResources": {"cpu": "4"}, "resources": {"requests": {"cpu": "3"}}},
                 {"cpu": 4000},
                 id="aggregate container request resolves directly from pod status"),
    pytest.param({"containers": [ctr("c1", "1")]},
                 {"resources": {"requests": {"cpu": "3"}},
                  "containerStatuses": [cstatus("c1", {"cpu": "6"}, {"cpu": "5"})]},
                 {"cpu": 6000}, id="falls back to container statuses: pod allocated unset"),
    pytest.param({"containers": [ctr("c1", "1")]},
                 {"allocatedResources": {"cpu": "6"},
                  "containerStatuses": [cstatus("c1", {"cpu": "6"}, {"cpu": "5"})]},
                 {"cpu": 6000}, id="falls back to container statuses: pod resources unset"),
    # TestPodRequestsAndLimitsVerticalScalingWrappers: pod-level resources.
    pytest.param({"resources": {"requests": {"cpu": "2"}}, "containers": [ctr("c1", "1")]},
                 {"allocatedResources": {"cpu": "3"}, "resources": {"requests": {"cpu": "3.5"}}},
                 {"cpu": 3500}, id="pod level requests with status populated"),
    pytest.param({"resources": {"requests": {"cpu": "10"}}, "containers": [ctr("c1", "1")]},
                 {"conditions": INFEASIBLE, "allocatedResources": {"cpu": "3"},
                  "resources": {"requests": {"cpu": "4"}}},
                 {"cpu": 4000}, id="pod level requests with infeasible resize"),
])
def test_pod_requests_use_status_resources(spec: Json, status: Json,
                                           want: dict[str, int]) -> None:
    assert reads_status(status)
    assert pod_requests(spec, status=status) == want


def test_without_the_status_the_spec_counts() -> None:
    """"resized, infeasible, but don't use status": the spec alone is what PreFilter
    reads."""
    spec = {"containers": [ctr("container-1", "4")]}
    assert pod_requests(spec) == {"cpu": 4000}
    assert not reads_status({"phase": "Running", "conditions": [{"type": "Ready"}]})


def test_non_zero_defaults_apply_to_each_status_list() -> None:
    """applyNonMissing runs on the spec, allocated and actuated lists alike."""
    spec = {"containers": [ctr("c1")]}
    status = {"containerStatuses": [cstatus("c1", {"cpu": "2"})]}
    got = pod_requests(spec, non_zero=True, status=status)
    assert got == {"cpu": 2000, "memory": 200 * 2**20}


# -- a node and the default profile ---------------------------------------------------------
def bound(name: str, cpu: str, status: Json, pod_level: str | None = None) -> PodInfo:
    spec: Json = {"nodeName": "node-1", "containers": [ctr("c", cpu)]}
    if pod_level is not None:
        spec["resources"] = {"requests": {"cpu": pod_level}}
    return PodInfo.from_json({"metadata": {"name": name, "namespace": "default", "uid": name},
                              "spec": spec, "status": {"phase": "Running", **status}})


def node_with(*pods: PodInfo) -> NodeInfo:
    info = NodeInfo.from_json({"metadata": {"name": "node-1"}, "status": {
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}})
    for p in pods:
        info.add_pod(p)
    return info


@pytest.mark.parametrize(("resizing", "counted"), [
    pytest.param(bound("up", "1", {"containerStatuses": [cstatus("c", {"cpu": "3"})]}),
                 3000, id="allocated above spec"),
    pytest.param(bound("down", "1", {"containerStatuses": [
        cstatus("c", {"cpu": "1"}, {"cpu": "3"})]}), 3000, id="still running above spec"),
    pytest.param(bound("infeasible", "8", {"conditions": INFEASIBLE, "containerStatuses": [
        cstatus("c", {"cpu": "1"}, {"cpu": "1"})]}), 1000, id="infeasible resize"),
    pytest.param(bound("plr", "1", {"allocatedResources": {"cpu": "3"},
                                    "resources": {"requests": {"cpu": "3"}}}, pod_level="2"),
                 3000, id="pod-level resources"),
])
def test_node_counts_a_resizing_pod(resizing: PodInfo, counted: int) -> None:
    assert node_with(resizing).requested["cpu"] == counted


def schedule(p: PodInfo, node: NodeInfo) -> Any:
    return asyncio.run(schedule_pod(build(rng=random.Random(1)), p, Snapshot([node]),
                                    explain=True))


def pending(cpu: str) -> PodInfo:
    return PodInfo.from_json({"metadata": {"name": "new", "namespace": "default", "uid": "n"},
                              "spec": {"containers": [ctr("c", cpu)]}})


def test_default_profile_sees_the_resize_in_flight() -> None:
    up = bound("up", "1", {"containerStatuses": [cstatus("c", {"cpu": "3"})]})
    result = schedule(pending("2"), node_with(up))
    assert result.node is None
    assert result.fit_error.message.startswith("0/1 nodes are available: 1 Insufficient cpu.")


def test_default_profile_does_not_count_an_infeasible_resize() -> None:
    stuck = bound("stuck", "8", {"conditions": INFEASIBLE,
                                 "containerStatuses": [cstatus("c", {"cpu": "1"}, {"cpu": "1"})]})
    assert schedule(pending("2"), node_with(stuck)).node == "node-1"


def test_a_finished_resize_down_is_a_scale_down_event() -> None:
    """extractPodScaleDown reads the status too: the resize ending frees resources."""
    during = bound("p", "1", {"containerStatuses": [cstatus("c", {"cpu": "1"}, {"cpu": "3"})]})
    after = bound("p", "1", {"containerStatuses": [cstatus("c", {"cpu": "1"}, {"cpu": "1"})]})
    actions = [e.action for e in ev.pod_update_events(after, during, target=False)]
    assert actions == [ev.ActionType.UPDATE_POD_SCALE_DOWN]
