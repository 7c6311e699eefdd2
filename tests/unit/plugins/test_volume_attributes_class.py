"""VolumeAttributesClass (GA and locked on in v1.37): VolumeBinding's FindMatchingVolume
binds a claim only to a volume of the same volumeAttributesClassName (none matches none),
as pkg/volume/util FindMatchingVolume checks it with the gate on."""

from __future__ import annotations

from typing import Any

import pytest

from polsched.framework import Code, CycleState, Snapshot
from polsched.plugins import volume_binding as vb
from tests.unit.plugins.volumes import WAIT, make, node, pod, pv, pvc, storage_class

pytestmark = pytest.mark.unit


def with_vac(obj: dict[str, Any], name: str) -> dict[str, Any]:
    obj["spec"]["volumeAttributesClassName"] = name
    return obj


@pytest.mark.parametrize(("claim_vac", "volume_vac", "fits"), [
    pytest.param("", "", True, id="neither names a class"),
    pytest.param("gold", "gold", True, id="same class"),
    pytest.param("gold", "silver", False, id="another class"),
    pytest.param("gold", "", False, id="volume without a class"),
    pytest.param("", "gold", False, id="claim without a class"),
])
def test_a_claim_binds_only_a_volume_of_its_attributes_class(claim_vac: str, volume_vac: str,
                                                             fits: bool) -> None:
    claim, volume = pvc("pvc-a"), pv("pv-a", node="node-a")
    if claim_vac:
        with_vac(claim, claim_vac)
    if volume_vac:
        with_vac(volume, volume_vac)
    plugin = make(vb.NAME, storage_class(WAIT), claim, volume)
    p, n = pod("p", "pvc-a"), node("node-a")
    state = CycleState()
    assert plugin.pre_filter(state, p, Snapshot([n])).ok
    st = plugin.filter(state, p, n)
    assert st.ok is fits
    if not fits:
        assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert st.reasons == (vb.ERR_REASON_BIND_CONFLICT,)
