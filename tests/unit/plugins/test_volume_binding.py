"""VolumeBinding, shaped after upstream pkg/scheduler/framework/plugins/volumebinding/
volume_binding_test.go (TestVolumeBinding) and binder_test.go (FindPodVolumes,
AssumePodVolumes, BindPodVolumes)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polsched.framework import Code, CycleState, NodeInfo, PodInfo, Snapshot, Status
from polsched.framework.listers import PERSISTENT_VOLUME
from polsched.framework.registry import ArgsError
from polsched.plugins import volume_binding as vb
from tests.unit.plugins.volumes import (
    IMMEDIATE,
    WAIT,
    listers,
    make,
    node,
    pod,
    pv,
    pvc,
    storage_class,
)

pytestmark = pytest.mark.unit

SCS = (storage_class(WAIT), storage_class(IMMEDIATE, mode="Immediate"))


def cycle(plugin: vb.VolumeBinding, p: PodInfo, nodes: list[NodeInfo]
          ) -> tuple[CycleState, Status, list[Status], list[int]]:
    """PreFilter, Filter on every node, PreScore and Score on the feasible ones."""
    state = CycleState()
    pre = plugin.pre_filter(state, p, Snapshot(nodes))
    if not pre.ok:
        return state, pre, [], []
    statuses = [plugin.filter(state, p, n) for n in nodes]
    feasible = [n for n, st in zip(nodes, statuses, strict=True) if st.ok]
    scores: list[int] = []
    if plugin.pre_score(state, p, feasible, Snapshot(nodes)).ok:
        scores = [plugin.score(state, p, n) for n in feasible]
    return state, pre, statuses, scores


def test_pod_without_claims_is_skipped() -> None:
    plugin = make(vb.NAME, *SCS)
    state, pre, _, _ = cycle(plugin, pod("p"), [node("a")])
    assert pre.code is Code.SKIP
    # Reserve on a pod without claims leaves nothing to bind.
    assert plugin.reserve(state, pod("p"), "a").ok
    assert asyncio.run(plugin.pre_bind(state, pod("p"), "a")).ok


def test_all_bound_passes_nodes_its_pv_allows() -> None:
    plugin = make(vb.NAME, *SCS, pvc("pvc-a", volume="pv-a", bound=True),
                                 pv("pv-a", node="a", phase="Bound"))
    _, pre, statuses, _ = cycle(plugin, pod("p", "pvc-a"), [node("a"), node("b")])
    assert pre.ok
    assert statuses[0].ok
    assert statuses[1].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert statuses[1].reasons == (vb.ERR_REASON_NODE_CONFLICT,)


@pytest.mark.parametrize(("claims", "objects", "message"), [
    (["pvc-a"], [], 'persistentvolumeclaim "pvc-a" not found'),
    (["pvc-a", "pvc-b"], [pvc("pvc-a", volume="pv-a", bound=True)],
     'persistentvolumeclaim "pvc-b" not found'),
    (["pvc-a"], [pvc("pvc-a", sc=IMMEDIATE)], vb.ERR_UNBOUND_IMMEDIATE),
    # A pre-bound claim (volumeName set, not yet bound) counts as immediate.
    (["pvc-a"], [pvc("pvc-a", volume="pv-a")], vb.ERR_UNBOUND_IMMEDIATE),
    # No class at all: not delayed, so immediate.
    (["pvc-a"], [pvc("pvc-a", sc=None)], vb.ERR_UNBOUND_IMMEDIATE),
    (["pvc-a"], [pvc("pvc-a", volume="pv-a", bound=True, phase="Lost")],
     'persistentvolumeclaim "pvc-a" bound to non-existent persistentvolume "pv-a"'),
], ids=["PVC does not exist", "part of PVCs do not exist", "immediate claims not bound",
        "prebound claim", "no class", "claim lost"])
def test_pre_filter_rejects(claims: list[str], objects: list[dict[str, Any]],
                            message: str) -> None:
    plugin = make(vb.NAME, *SCS, *objects)
    _, pre, _, _ = cycle(plugin, pod("p", *claims), [node("a")])
    assert pre.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert pre.reasons == (message,)


def test_claim_being_deleted() -> None:
    claim = pvc("pvc-a")
    claim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    _, pre, _, _ = cycle(make(vb.NAME, *SCS, claim), pod("p", "pvc-a"), [node("a")])
    assert pre.reasons == ('persistentvolumeclaim "pvc-a" is being deleted',)


def test_ephemeral_volume_waits_for_its_claim_and_must_own_it() -> None:
    eph = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]
    p = pod("p", volumes=eph, uid="uid-p")
    _, pre, _, _ = cycle(make(vb.NAME, *SCS), p, [node("a")])
    assert pre.reasons == ('waiting for ephemeral volume controller to create the '
                           'persistentvolumeclaim "p-scratch"',)
    foreign = pvc("p-scratch", owner_uid="someone-else")
    _, pre, _, _ = cycle(make(vb.NAME, *SCS, foreign), p, [node("a")])
    assert pre.reasons == ("PVC ns/p-scratch was not created for pod ns/p (pod is not owner)",)
    owned = pvc("p-scratch", owner_uid="uid-p")
    plugin = make(vb.NAME, *SCS, owned, pv("pv-1", node="a"))
    _, pre, statuses, _ = cycle(plugin, p, [node("a")])
    assert pre.ok and statuses[0].ok


def test_unbound_claim_no_matches() -> None:
    plugin = make(vb.NAME, *SCS, pvc("pvc-a"))
    _, pre, statuses, _ = cycle(plugin, pod("p", "pvc-a"), [node("a")])
    assert pre.ok
    assert statuses[0].reasons == (vb.ERR_REASON_BIND_CONFLICT,)


def test_bound_and_unbound_unsatisfied_gives_both_reasons_in_upstream_order() -> None:
    plugin = make(vb.NAME, *SCS, pvc("pvc-a", volume="pv-a", bound=True), pvc("pvc-b"),
                                 pv("pv-a", affinity={"foo": ["bar"]}))
    _, _, statuses, _ = cycle(plugin, pod("p", "pvc-a", "pvc-b"),
                              [node("a", {"foo": "barbar"})])
    assert statuses[0].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert statuses[0].reasons == (vb.ERR_REASON_NODE_CONFLICT, vb.ERR_REASON_BIND_CONFLICT)


def test_bound_pv_not_found() -> None:
    plugin = make(vb.NAME, *SCS, pvc("pvc-a", volume="pv-a", bound=True))
    _, pre, statuses, _ = cycle(plugin, pod("p", "pvc-a"), [node("a")])
    assert pre.ok
    assert statuses[0].reasons == (vb.ERR_REASON_PV_NOT_EXIST,)


def test_local_volumes_with_close_capacity_are_preferred() -> None:
    """Upstream's case: 50Gi claim, 200Gi PVs on node-a, 100Gi PVs on node-b -> 75, 50."""
    plugin = make(vb.NAME,
        *SCS, pvc("pvc-a", request="50Gi"),
        pv("pv-a-0", capacity="200Gi", node="node-a"), pv("pv-a-1", capacity="200Gi",
                                                          node="node-a"),
        pv("pv-b-0", capacity="100Gi", node="node-b"), pv("pv-b-1", capacity="100Gi",
                                                          node="node-b"))
    _, _, statuses, scores = cycle(plugin, pod("p", "pvc-a"),
                                   [node("node-a"), node("node-b"), node("node-c")])
    assert [s.code for s in statuses] == [Code.SUCCESS, Code.SUCCESS,
                                          Code.UNSCHEDULABLE_AND_UNRESOLVABLE]
    assert statuses[2].reasons == (vb.ERR_REASON_BIND_CONFLICT,)
    assert scores == [75, 50]


def test_custom_shape_and_args_validation() -> None:
    shape = [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
    plugin = make(vb.NAME,
        *SCS, pvc("pvc-a", request="50Gi"), pv("pv-a", capacity="200Gi", node="a"),
        pv("pv-b", capacity="100Gi", node="b"), args={"shape": shape})
    _, _, _, scores = cycle(plugin, pod("p", "pvc-a"), [node("a"), node("b")])
    assert scores == [25, 50]
    with pytest.raises(ArgsError) as err:
        make(vb.NAME, args={"shape": [{"utilization": 50, "score": 1},
                                      {"utilization": 10, "score": 2}]})
    assert err.value.path == "shape[1].utilization"
    with pytest.raises(ArgsError) as err:
        make(vb.NAME, args={"bindTimeoutSeconds": -1})
    assert err.value.path == "bindTimeoutSeconds"


def test_smallest_fitting_pv_is_chosen_and_class_mode_and_selector_are_honoured() -> None:
    big = pv("pv-big", capacity="10Gi", node="a")
    small = pv("pv-small", capacity="2Gi", node="a")
    too_small = pv("pv-tiny", capacity="1Mi", node="a")
    other_class = pv("pv-other", sc="other", capacity="2Gi", node="a")
    block = pv("pv-block", capacity="2Gi", node="a")
    block["spec"]["volumeMode"] = "Block"
    claim = pvc("pvc-a", request="1Gi")
    plugin = make(vb.NAME, *SCS, claim, big, small, too_small, other_class, block)
    state, _, statuses, _ = cycle(plugin, pod("p", "pvc-a"), [node("a")])
    assert statuses[0].ok
    chosen = state.get(vb.NAME).by_node["a"].static_bindings
    assert [b.pv["metadata"]["name"] for b in chosen] == ["pv-small"]

    labelled = pv("pv-labelled", capacity="5Gi", node="a", labels={"tier": "gold"})
    claim = pvc("pvc-s", request="1Gi")
    claim["spec"]["selector"] = {"matchLabels": {"tier": "gold"}}
    plugin = make(vb.NAME, *SCS, claim, small, labelled)
    state, _, statuses, _ = cycle(plugin, pod("p", "pvc-s"), [node("a")])
    chosen = state.get(vb.NAME).by_node["a"].static_bindings
    assert [b.pv["metadata"]["name"] for b in chosen] == ["pv-labelled"]


def test_two_claims_do_not_share_one_pv() -> None:
    plugin = make(vb.NAME, *SCS, pvc("pvc-a"), pvc("pvc-b"), pv("pv-1", node="a"))
    _, _, statuses, _ = cycle(plugin, pod("p", "pvc-a", "pvc-b"), [node("a")])
    assert statuses[0].reasons == (vb.ERR_REASON_BIND_CONFLICT,)


def test_provisioning_honours_provisioner_and_allowed_topologies() -> None:
    topo = [{"matchLabelExpressions": [{"key": "zone", "values": ["z1"]}]}]
    sc = storage_class("csi", provisioner="csi.example.com", allowed_topologies=topo)
    plugin = make(vb.NAME, sc, pvc("pvc-a", sc="csi"))
    state, _, statuses, _ = cycle(plugin, pod("p", "pvc-a"),
                                  [node("a", {"zone": "z1"}), node("b", {"zone": "z2"})])
    assert statuses[0].ok
    assert statuses[1].reasons == (vb.ERR_REASON_BIND_CONFLICT,)
    assert [c["metadata"]["name"] for c in state.get(vb.NAME).by_node["a"].dynamic_provisions] \
        == ["pvc-a"]
    # A claim already being provisioned for node a fits only a.
    claim = pvc("pvc-b", sc="csi", annotations={"volume.kubernetes.io/selected-node": "a"})
    plugin = make(vb.NAME, sc, claim)
    _, _, statuses, _ = cycle(plugin, pod("p", "pvc-b"),
                              [node("a", {"zone": "z1"}), node("c", {"zone": "z1"})])
    assert statuses[0].ok
    assert statuses[1].reasons == (vb.ERR_REASON_BIND_CONFLICT,)


def test_storage_class_without_binding_mode_is_an_error() -> None:
    plugin = make(vb.NAME, storage_class("odd", mode=None), pvc("pvc-a", sc="odd"))
    _, pre, _, _ = cycle(plugin, pod("p", "pvc-a"), [node("a")])
    assert pre.code is Code.ERROR
    assert pre.reasons == ('VolumeBindingMode not set for StorageClass "odd"',)


def test_reserve_assumes_the_pv_so_the_next_pod_takes_another() -> None:
    """AssumePodVolumes: a reserved PV carries the claimRef in the assume cache, so the
    next cycle (another claim of the same class) cannot pick it; Unreserve gives it back."""
    plugin = make(vb.NAME, *SCS, pvc("pvc-0"), pvc("pvc-1"), pv("pv-a", node="a"),
                                 pv("pv-b", node="b"))
    nodes = [node("a"), node("b")]
    state0, _, statuses, _ = cycle(plugin, pod("p0", "pvc-0"), nodes)
    assert all(s.ok for s in statuses)
    assert plugin.reserve(state0, pod("p0", "pvc-0"), "a").ok
    assumed = plugin.pvs.get("pv-a")
    assert assumed is not None
    assert assumed["spec"]["claimRef"]["name"] == "pvc-0"
    assert assumed["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"

    _, _, statuses, _ = cycle(plugin, pod("p1", "pvc-1"), nodes)
    assert statuses[0].reasons == (vb.ERR_REASON_BIND_CONFLICT,)
    assert statuses[1].ok

    plugin.unreserve(state0, pod("p0", "pvc-0"), "a")
    _, _, statuses, _ = cycle(plugin, pod("p1", "pvc-1"), nodes)
    assert all(s.ok for s in statuses)


def test_assumed_pv_expires_when_the_watch_brings_a_newer_version() -> None:
    h = listers(*SCS, pvc("pvc-0"), pv("pv-a", node="a"))
    plugin = make(vb.NAME, listers=h)
    state, _, _, _ = cycle(plugin, pod("p0", "pvc-0"), [node("a")])
    assert plugin.reserve(state, pod("p0", "pvc-0"), "a").ok
    newer = pv("pv-a", node="a")  # another resourceVersion, no claimRef
    h.apply(PERSISTENT_VOLUME, "MODIFIED", newer)
    assert plugin.pvs.get("pv-a") is newer


def test_broken_linear_truncates_as_go() -> None:
    shape = ((0, 100), (100, 0))
    assert [vb.broken_linear(shape, p) for p in (0, 25, 33, 100, 150)] == [100, 75, 67, 0, 0]
    assert vb.broken_linear(((10, 0), (20, 100)), 5) == 0
