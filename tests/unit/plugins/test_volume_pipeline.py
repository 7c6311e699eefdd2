"""The volume plugins in the default profile, built by the production builder: the
FailedScheduling texts kube-scheduler v1.37 writes for pods that cannot get their volumes
(checked against the real kube-scheduler in tests/e2e/test_volumes.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polsched.framework import NodeInfo, PodInfo, ScheduleResult, Snapshot
from polsched.scheduler.algorithm import schedule_pod
from tests.unit.pipelines import build
from tests.unit.plugins.volumes import IMMEDIATE, WAIT, node, pod, pv, pvc, storage_class

pytestmark = pytest.mark.unit

OBJECTS: list[dict[str, Any]] = [
    storage_class(WAIT), storage_class(IMMEDIATE, mode="Immediate"),
    pvc("never", sc=IMMEDIATE),
    pvc("on-a", sc=IMMEDIATE, volume="pv-a", bound=True), pv("pv-a", node="a", phase="Bound"),
]


def schedule(p: PodInfo, nodes: list[NodeInfo]) -> ScheduleResult:
    pl = build(objects=OBJECTS)
    return asyncio.run(schedule_pod(pl, p, Snapshot(nodes)))


@pytest.mark.parametrize(("claim", "prefilter"), [
    ("nope", 'persistentvolumeclaim "nope" not found'),
    ("never", "pod has unbound immediate PersistentVolumeClaims"),
])
def test_a_prefilter_rejection_ends_with_upstreams_dynamicresources_not_found(
        claim: str, prefilter: str) -> None:
    """kube-scheduler v1.37 writes "... <PreFilter message>. not found": DynamicResources'
    PostFilter runs first and cannot read the state its skipped PreFilter never wrote."""
    result = schedule(pod("p", claim), [node("a"), node("b")])
    assert result.node is None and result.fit_error is not None
    assert result.fit_error.message == f"0/2 nodes are available: {prefilter}. not found"


def test_a_pod_whose_pv_is_on_a_node_it_cannot_use_waits() -> None:
    p = pod("p", "on-a")
    p.raw["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "b"}
    p = PodInfo.from_json(p.raw)
    result = schedule(p, [node("a"), node("b")])
    assert result.node is None and result.fit_error is not None
    assert result.fit_error.message == (
        "0/2 nodes are available: 1 node(s) didn't match PersistentVolume's node affinity, "
        "1 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are "
        "available: 2 Preemption is not helpful for scheduling.")


def test_a_pod_with_its_pv_node_available_lands_there() -> None:
    result = schedule(pod("p", "on-a"), [node("a"), node("b")])
    assert result.node == "a"


def test_any_unresolvable_prefilter_before_dynamic_resources_ends_in_not_found() -> None:
    """Not only the volume plugins: conflicting matchFields (NodeAffinity's PreFilter) read
    "... pod affinity terms conflict. not found" from the real kube-scheduler too."""
    terms = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["a"]},
            {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}}
    p = pod("p")
    p.raw["spec"]["affinity"] = terms
    result = schedule(PodInfo.from_json(p.raw), [node("a"), node("b")])
    assert result.fit_error is not None
    assert result.fit_error.message == (
        "0/2 nodes are available: pod affinity terms conflict. not found")
