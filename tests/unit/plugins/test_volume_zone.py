"""VolumeZone, shaped after upstream pkg/scheduler/framework/plugins/volumezone/
volume_zone_test.go (TestSingleZone, TestMultiZone, TestWithBinding)."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework import Code, CycleState, PodInfo, Snapshot, Status
from polsched.plugins import volume_zone as vz
from tests.unit.plugins.volumes import IMMEDIATE, WAIT, make, node, pod, pv, pvc, storage_class

pytestmark = pytest.mark.unit

ZONE, REGION = vz.ZONE, vz.REGION
OBJECTS = (
    pv("pv-z1", phase="Bound", labels={vz.BETA_ZONE: "us-west1-a"}),
    pv("pv-r1", phase="Bound", labels={vz.BETA_REGION: "us-west1"}),
    pv("pv-multi", phase="Bound", labels={ZONE: "us-west1-b__us-west1-c"}),
    pvc("c-z1", volume="pv-z1", bound=True), pvc("c-r1", volume="pv-r1", bound=True),
    pvc("c-multi", volume="pv-multi", bound=True),
    pvc("c-missing-pv", volume="pv-gone", bound=True),
    pvc("c-wait", sc=WAIT), pvc("c-imm", sc=IMMEDIATE), pvc("c-nosc", sc=None),
    pvc("c-unknown-sc", sc="nope"),
    storage_class(WAIT), storage_class(IMMEDIATE, mode="Immediate"),
)


def run(p: PodInfo, labels: dict[str, str], *extra: dict[str, Any]) -> Status:
    plugin = make(vz.NAME, *OBJECTS, *extra)
    state = CycleState()
    n = node("n", labels)
    pre: Status = plugin.pre_filter(state, p, Snapshot([n]))
    if pre.code is Code.SKIP:
        return Status()
    if not pre.ok:
        return pre
    st: Status = plugin.filter(state, p, n)
    return st


@pytest.mark.parametrize(("claim", "labels", "fits"), [
    ("c-z1", {}, True),
    ("c-z1", {vz.BETA_ZONE: "us-west1-a"}, True),
    ("c-z1", {ZONE: "us-west1-a"}, True),  # beta PV label, GA node label
    ("c-z1", {vz.BETA_ZONE: "us-west1-b"}, False),
    ("c-z1", {REGION: "us-west1"}, False),  # node has topology, not the PV's key
    ("c-r1", {vz.BETA_REGION: "us-west1"}, True),
    ("c-r1", {vz.BETA_REGION: "us-east1"}, False),
    ("c-multi", {ZONE: "us-west1-c"}, True),
    ("c-multi", {ZONE: "us-west1-a"}, False),
    ("c-wait", {ZONE: "anything"}, True),
])
def test_zones(claim: str, labels: dict[str, str], fits: bool) -> None:
    st = run(pod("p", claim), labels)
    if fits:
        assert st.ok
    else:
        assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert st.reasons == (vz.ERR_REASON_CONFLICT,)


@pytest.mark.parametrize(("claim", "message"), [
    ("c-absent", 'persistentvolumeclaim "c-absent" not found'),
    ("c-missing-pv", 'persistentvolume "pv-gone" not found'),
    ("c-imm", "PersistentVolume had no name"),
    ("c-nosc", "PersistentVolumeClaim had no pv name and storageClass name"),
    ("c-unknown-sc", 'storageclass.storage.k8s.io "nope" not found'),
])
def test_pre_filter_errors(claim: str, message: str) -> None:
    st = run(pod("p", claim), {ZONE: "z"})
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == (message,)
