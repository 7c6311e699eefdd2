"""VolumeRestrictions, shaped after upstream pkg/scheduler/framework/plugins/
volumerestrictions/volume_restrictions_test.go (TestGCEDiskConflicts, TestAWSDiskConflicts,
TestRBDDiskConflicts, TestISCSIDiskConflicts, TestAccessModeConflicts)."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework import Code, CycleState, NodeInfo, PodInfo, Snapshot, Status
from polsched.plugins import volume_restrictions as vr
from tests.unit.plugins.volumes import make, node, pod, pvc

pytestmark = pytest.mark.unit


def run(p: PodInfo, n: NodeInfo, *objects: dict[str, Any], others: list[NodeInfo] | None = None
        ) -> Status:
    plugin = make(vr.NAME, *objects)
    state = CycleState()
    pre: Status = plugin.pre_filter(state, p, Snapshot([n, *(others or [])]))
    if not pre.ok:
        return pre
    st: Status = plugin.filter(state, p, n)
    return st


def vol(kind: str, **fields: Any) -> list[dict[str, Any]]:
    return [{"name": "d", kind: fields}]


@pytest.mark.parametrize(("new", "existing", "conflict"), [
    (vol("gcePersistentDisk", pdName="foo"), vol("gcePersistentDisk", pdName="foo"), True),
    (vol("gcePersistentDisk", pdName="foo"), vol("gcePersistentDisk", pdName="bar"), False),
    (vol("gcePersistentDisk", pdName="foo", readOnly=True),
     vol("gcePersistentDisk", pdName="foo", readOnly=True), False),
    (vol("awsElasticBlockStore", volumeID="foo"), vol("awsElasticBlockStore", volumeID="foo"),
     True),
    (vol("awsElasticBlockStore", volumeID="foo"), vol("awsElasticBlockStore", volumeID="bar"),
     False),
    (vol("rbd", monitors=["a", "b"], pool="foo", image="bar"),
     vol("rbd", monitors=["b", "c"], pool="foo", image="bar"), True),
    (vol("rbd", monitors=["a"], pool="foo", image="bar"),
     vol("rbd", monitors=["c"], pool="foo", image="bar"), False),
    (vol("iscsi", iqn="iqn.1"), vol("iscsi", iqn="iqn.1"), True),
    (vol("iscsi", iqn="iqn.1", readOnly=True), vol("iscsi", iqn="iqn.1", readOnly=True), False),
], ids=["gce same", "gce other", "gce both ro", "aws same", "aws other", "rbd overlap",
        "rbd disjoint", "iscsi same", "iscsi both ro"])
def test_disk_conflicts(new: list[dict[str, Any]], existing: list[dict[str, Any]],
                        conflict: bool) -> None:
    n = node("a", None, pod("old", volumes=existing, node="a"))
    st = run(pod("new", volumes=new), n)
    if conflict:
        assert st.code is Code.UNSCHEDULABLE
        assert st.reasons == (vr.ERR_REASON_DISK_CONFLICT,)
    else:
        assert st.ok


def test_pod_without_restricted_volumes_or_claims_in_use_is_skipped() -> None:
    plugin = make(vr.NAME, pvc("c"))
    state = CycleState()
    assert plugin.pre_filter(state, pod("p"), Snapshot([])).code is Code.SKIP
    assert plugin.pre_filter(state, pod("p", "c"), Snapshot([node("a")])).code is Code.SKIP


def test_missing_claim_is_unresolvable_with_the_listers_text() -> None:
    st = run(pod("p", "gone"), node("a"))
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == ('persistentvolumeclaim "gone" not found',)


def test_read_write_once_pod_claim_in_use_rejects_every_node() -> None:
    rwop = pvc("claim", modes=["ReadWriteOncePod"], volume="pv", bound=True)
    user = pod("user", "claim", node="b")
    st = run(pod("p", "claim"), node("a"), rwop, others=[node("b", None, user)])
    assert st.code is Code.UNSCHEDULABLE
    assert st.reasons == (vr.ERR_REASON_RWOP_CONFLICT,)
    # Same claim name in another namespace is not in use.
    other_ns = pod("user", "claim", node="b", namespace="other")
    assert run(pod("p", "claim"), node("a"), rwop, others=[node("b", None, other_ns)]).code \
        is not Code.UNSCHEDULABLE


def test_add_and_remove_pod_track_claims_in_use() -> None:
    rwop = pvc("claim", modes=["ReadWriteOncePod"], volume="pv", bound=True)
    user = pod("user", "claim", node="b")
    b = node("b", None, user)
    plugin = make(vr.NAME, rwop)
    state = CycleState()
    p = pod("p", "claim", volumes=vol("gcePersistentDisk", pdName="x"))
    assert plugin.pre_filter(state, p, Snapshot([node("a"), b])).ok
    assert plugin.filter(state, p, node("a")).code is Code.UNSCHEDULABLE
    assert plugin.remove_pod(state, p, user, b).ok
    assert plugin.filter(state, p, node("a")).ok
    assert plugin.add_pod(state, p, user, b).ok
    assert plugin.filter(state, p, node("a")).code is Code.UNSCHEDULABLE
