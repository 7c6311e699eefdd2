"""The volume plugins' queueing hints, shaped after upstream's
Test_isSchedulableAfter* cases in volume_binding_test.go, volume_restrictions_test.go,
volume_zone_test.go and csi_test.go: which cluster events move a pod they rejected back
to the active queue."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from polsched.framework import events as ev
from polsched.framework import listers as ls
from polsched.framework.types import PodInfo
from polsched.plugins import node_volume_limits, volume_binding, volume_restrictions, volume_zone
from tests.unit.plugins.volumes import csi_node, make, pod, pv, pvc, storage_class

pytestmark = pytest.mark.unit

Hint = Callable[[PodInfo, Any, Any], ev.QueueingHint]


def hint(plugin: Any, resource: ev.Resource, action: ev.ActionType) -> Hint:
    """The hint `plugin` registered for the event; Queue-always when it gave none."""
    incoming = ev.ClusterEvent(resource, action)
    for e in plugin.events_to_register():
        if e.event.matches(incoming):
            return e.hint or (lambda p, o, n: ev.QUEUE)
    raise AssertionError(f"{plugin.name} does not register {incoming.label}")


A, R = ev.ActionType, ev.Resource
Q, SKIP = ev.QUEUE, ev.QUEUE_SKIP


def test_volume_binding_claims_classes_and_csinodes() -> None:
    plugin = make(volume_binding.NAME)
    p = pod("p", "data")
    claim_hint = hint(plugin, R.PERSISTENT_VOLUME_CLAIM, A.UPDATE)
    assert claim_hint(p, None, pvc("data")) is Q
    assert claim_hint(p, None, pvc("other")) is SKIP
    assert claim_hint(p, None, pvc("data", namespace="elsewhere")) is SKIP
    eph = pod("p", volumes=[{"name": "scratch", "ephemeral": {}}])
    assert claim_hint(eph, None, pvc("p-scratch")) is Q

    sc_hint = hint(plugin, R.STORAGE_CLASS, A.UPDATE)
    old = storage_class("sc")
    assert sc_hint(p, None, old) is Q
    assert sc_hint(p, old, dict(old)) is SKIP
    assert sc_hint(p, old, {**old, "allowedTopologies": [{}]}) is Q

    csi_hint = hint(plugin, R.CSI_NODE, A.UPDATE)
    n = csi_node("n", {})
    assert csi_hint(p, None, n) is Q
    assert csi_hint(p, n, dict(n)) is SKIP
    migrated = {**n, "metadata": {**n["metadata"], "annotations": {
        volume_binding.MIGRATED_PLUGINS_ANNOTATION: "kubernetes.io/aws-ebs"}}}
    assert csi_hint(p, n, migrated) is Q
    # PVs and node labels always requeue.
    assert hint(plugin, R.PERSISTENT_VOLUME, A.ADD)(p, None, pv("x")) is Q
    assert hint(plugin, R.NODE, A.UPDATE_NODE_LABEL)(p, None, None) is Q


def test_volume_binding_ignores_node_taint_changes() -> None:
    plugin = make(volume_binding.NAME)
    incoming = ev.ClusterEvent(R.NODE, A.UPDATE_NODE_TAINT)
    assert not any(e.event.matches(incoming) for e in plugin.events_to_register())


def test_volume_restrictions_deleted_pods_and_new_claims() -> None:
    plugin = make(volume_restrictions.NAME)
    gce = [{"name": "d", "gcePersistentDisk": {"pdName": "disk"}}]
    p = pod("p", "data", volumes=gce)
    deleted = hint(plugin, R.ASSIGNED_POD, A.DELETE)
    assert deleted(p, pod("old", volumes=gce, node="n"), None) is Q
    assert deleted(p, pod("old", "data", node="n"), None) is Q
    assert deleted(p, pod("old", "other", node="n"), None) is SKIP
    assert deleted(p, pod("old", "data", node="n", namespace="x"), None) is SKIP
    added = hint(plugin, R.PERSISTENT_VOLUME_CLAIM, A.ADD)
    assert added(p, None, pvc("data")) is Q
    assert added(p, None, pvc("other")) is SKIP


def test_volume_zone_classes_claims_and_volumes() -> None:
    plugin = make(volume_zone.NAME)
    p = pod("p", "data")
    sc = hint(plugin, R.STORAGE_CLASS, A.ADD)
    assert sc(p, None, storage_class("w")) is Q
    assert sc(p, None, storage_class("i", mode="Immediate")) is SKIP
    claims = hint(plugin, R.PERSISTENT_VOLUME_CLAIM, A.UPDATE)
    assert claims(p, None, pvc("data")) is Q
    assert claims(p, None, pvc("other")) is SKIP
    vols = hint(plugin, R.PERSISTENT_VOLUME, A.UPDATE)
    old = pv("v", labels={volume_zone.ZONE: "a"})
    assert vols(p, None, old) is Q
    assert vols(p, old, pv("v", labels={volume_zone.ZONE: "a"})) is SKIP
    assert vols(p, old, pv("v", labels={volume_zone.ZONE: "b"})) is Q


def test_node_volume_limits_csinode_raises_and_deleted_pods() -> None:
    plugin = make(node_volume_limits.NAME)
    p = pod("p", "data")
    upd = hint(plugin, R.CSI_NODE, A.UPDATE)
    assert upd(p, csi_node("n", {"d": 1}), csi_node("n", {"d": 2})) is Q
    assert upd(p, csi_node("n", {"d": 2}), csi_node("n", {"d": 1})) is SKIP
    assert upd(p, csi_node("n", {}), csi_node("n", {"d": 1})) is Q
    deleted = hint(plugin, R.ASSIGNED_POD, A.DELETE)
    assert deleted(p, pod("old", "x", node="n"), None) is Q
    assert deleted(p, pod("old", node="n"), None) is SKIP
    assert hint(plugin, R.PERSISTENT_VOLUME_CLAIM, A.ADD)(p, None, pvc("data")) is Q
    assert hint(plugin, R.CSI_NODE, A.ADD)(p, None, csi_node("n", {})) is Q


def test_every_registered_resource_is_one_the_cache_watches() -> None:
    """No plugin waits on an event polsched can never deliver."""
    watched = set(ev.LISTER_RESOURCES.values()) | {R.NODE, R.ASSIGNED_POD, R.POD,
                                                   R.UNSCHEDULED_POD}
    for mod in (volume_binding, volume_restrictions, volume_zone, node_volume_limits):
        plugin: Any = make(mod.NAME)
        for e in plugin.events_to_register():
            assert e.event.resource in watched, (mod.NAME, e.event.label)
    assert ls.CSI_NODE.name in ev.LISTER_RESOURCES
