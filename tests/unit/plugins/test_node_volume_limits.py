"""NodeVolumeLimits, shaped after upstream pkg/scheduler/framework/plugins/nodevolumelimits/
csi_test.go (TestCSILimits)."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework import Code, CycleState, NodeInfo, PodInfo, Snapshot, Status
from polsched.plugins import node_volume_limits as nvl
from tests.unit.plugins.volumes import csi_node, make, node, pod, pv, pvc, storage_class

pytestmark = pytest.mark.unit

EBS = "ebs.csi.aws.com"
OBJECTS = (
    pv("pv-1", sc="csi", csi=(EBS, "vol-1"), phase="Bound"),
    pv("pv-2", sc="csi", csi=(EBS, "vol-2"), phase="Bound"),
    pv("pv-3", sc="csi", csi=(EBS, "vol-3"), phase="Bound"),
    pvc("c1", sc="csi", volume="pv-1", bound=True), pvc("c2", sc="csi", volume="pv-2", bound=True),
    pvc("c3", sc="csi", volume="pv-3", bound=True), pvc("unbound", sc="csi"),
    storage_class("csi", provisioner=EBS),
)


def run(p: PodInfo, n: NodeInfo, *extra: dict[str, Any]) -> Status:
    plugin = make(nvl.NAME, *OBJECTS, *extra)
    state = CycleState()
    pre: Status = plugin.pre_filter(state, p, Snapshot([n]))
    if pre.code is Code.SKIP:
        return Status()
    st: Status = plugin.filter(state, p, n)
    return st


def test_under_the_limit_fits() -> None:
    n = node("a", None, pod("old", "c1", node="a"))
    assert run(pod("p", "c2"), n, csi_node("a", {EBS: 2})).ok


def test_over_the_limit_is_rejected() -> None:
    n = node("a", None, pod("old", "c1", "c2", node="a"))
    st = run(pod("p", "c3"), n, csi_node("a", {EBS: 2}))
    assert st.code is Code.UNSCHEDULABLE
    assert st.reasons == (nvl.ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,)


def test_a_volume_already_attached_counts_once() -> None:
    n = node("a", None, pod("old", "c1", "c2", node="a"))
    assert run(pod("p", "c1"), n, csi_node("a", {EBS: 2})).ok


def test_unbound_claims_count_through_their_class() -> None:
    n = node("a", None, pod("old", "c1", node="a"))
    st = run(pod("p", "unbound"), n, csi_node("a", {EBS: 1}))
    assert st.reasons == (nvl.ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,)


def test_no_csinode_or_no_limit_fits() -> None:
    n = node("a", None, pod("old", "c1", "c2", node="a"))
    assert run(pod("p", "c3"), n).ok
    assert run(pod("p", "c3"), n, csi_node("a", {"other.csi": 0})).ok


def test_pods_without_claims_are_skipped_and_missing_claims_unresolvable() -> None:
    plugin = make(nvl.NAME)
    assert plugin.pre_filter(CycleState(), pod("p"), Snapshot([])).code is Code.SKIP
    st = run(pod("p", "nope"), node("a"))
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == ('looking up PVC ns/nope: persistentvolumeclaim "nope" not found',)
