"""NodeVolumeLimits: a node's CSI drivers attach at most CSINode's allocatable.count volumes.

Copies kube-scheduler v1.37's CSI limits plugin (pkg/scheduler/framework/plugins/
nodevolumelimits/csi.go): PreFilter skips pods without claims (persistentVolumeClaim or
generic ephemeral volumes). Filter finds each claim's CSI driver and volume handle (from
the bound PV's spec.csi, or for an unbound claim from its StorageClass's provisioner and a
handle unique to the claim), counts the distinct volumes the node's pods already use per
driver, and rejects the node when the new ones would exceed the driver's limit in the
node's CSINode. A claim the new pod names but that does not exist makes the node
UnschedulableAndUnresolvable.

Not copied (docs/differences.md): in-tree volumes migrated to CSI (translation of inline
and in-tree PVs), VolumeAttachments not held by a pod (not watched), and CSIDriver
preventPodSchedulingIfMissing (CSIDrivers are not watched: a driver is taken as installed).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from polsched.framework import events as ev
from polsched.framework import listers as ls
from polsched.framework import signers
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    FilterPlugin,
    Handle,
    PreFilterPlugin,
    SignFragment,
    SignPlugin,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.status import SKIP, SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.plugins import volume_claims as vc

NAME = "NodeVolumeLimits"

ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED = "node(s) exceed max volume count"

_EXCEEDED = Status.unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED)


class _NotFound(Exception):
    pass


class NodeVolumeLimits(SignPlugin, PreFilterPlugin, FilterPlugin, ev.EnqueueExtensions):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        return [(signers.VOLUMES, signers.volumes(pod))]

    def events_to_register(self) -> list[ev.ClusterEventWithHint]:
        """EventsToRegister, without VolumeAttachment deletes (not watched)."""
        A, R = ev.ActionType, ev.Resource
        return [
            ev.ClusterEventWithHint(ev.ClusterEvent(R.CSI_NODE, A.ADD)),
            ev.ClusterEventWithHint(ev.ClusterEvent(R.CSI_NODE, A.UPDATE),
                                    _after_csi_node_updated),
            ev.ClusterEventWithHint(ev.ClusterEvent(R.ASSIGNED_POD, A.DELETE),
                                    _after_assigned_pod_deleted),
            ev.ClusterEventWithHint(ev.ClusterEvent(R.PERSISTENT_VOLUME_CLAIM, A.ADD),
                                    _after_claim_added),
        ]

    def __init__(self, listers: ls.Listers) -> None:
        self.listers = listers
        # randomVolumeIDPrefix: unbound claims get handles no real volume has.
        self.random_prefix = secrets.token_hex(16)

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        return SUCCESS if vc.has_claims(pod.raw) else SKIP

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if not pod.spec.get("volumes"):
            return SUCCESS
        csi_node = self.listers.csi_node(node.name)
        new: dict[str, str] = {}
        try:
            self._attachable(pod, True, new)
        except _NotFound as e:
            return Status.unresolvable(str(e))
        except ValueError as e:
            return Status.error(str(e))
        if not new:
            return SUCCESS
        limits = volume_limits(csi_node)
        if not limits:
            return SUCCESS
        attached: dict[str, str] = {}
        for other in node.pods.values():
            if other.spec.get("volumes"):
                try:
                    self._attachable(other, False, attached)
                except (_NotFound, ValueError) as e:
                    return Status.error(str(e))
        attached_count: dict[str, int] = {}
        for unique, driver in attached.items():
            new.pop(unique, None)
            attached_count[driver] = attached_count.get(driver, 0) + 1
        new_count: dict[str, int] = {}
        for driver in new.values():
            new_count[driver] = new_count.get(driver, 0) + 1
        for driver, count in new_count.items():
            limit = limits.get(driver)
            if limit is not None and attached_count.get(driver, 0) + count > limit:
                return _EXCEEDED
        return SUCCESS

    def _attachable(self, pod: PodInfo, new_pod: bool, result: dict[str, str]) -> None:
        """filterAttachableVolumes: volume unique name -> CSI driver, into `result`."""
        for name, ephemeral in vc.pod_claims(pod.raw):
            if not name:
                raise ValueError("PersistentVolumeClaim had no name")
            pvc = self.listers.pvc(pod.namespace, name)
            if pvc is None:
                if new_pod:
                    raise _NotFound(f"looking up PVC {pod.namespace}/{name}: "
                                    + vc.not_found(vc.PVC_RESOURCE, name))
                continue
            if ephemeral:
                err = vc.volume_is_for_pod(pod.raw, pvc)
                if err:
                    raise ValueError(err)
            driver, handle = self._driver_info(pvc)
            if driver and handle:
                result[f"{driver}/{handle}"] = driver

    def _driver_info(self, pvc: Mapping[str, Any]) -> tuple[str, str]:
        """getCSIDriverInfo, without in-tree migration."""
        pv_name = vc.spec(pvc).get("volumeName") or ""
        pv = self.listers.pv(pv_name) if pv_name else None
        if pv is None:
            return self._driver_info_from_class(pvc)
        csi = vc.spec(pv).get("csi")
        if not csi:
            return "", ""
        return csi.get("driver") or "", csi.get("volumeHandle") or ""

    def _driver_info_from_class(self, pvc: Mapping[str, Any]) -> tuple[str, str]:
        class_name = vc.claim_class(pvc)
        if not class_name:
            return "", ""
        sc = self.listers.storage_class(class_name)
        if sc is None:
            return "", ""
        m = vc.meta(pvc)
        return sc.get("provisioner") or "", \
            f"{self.random_prefix}-{m.get('namespace')}/{m.get('name')}"


def _after_csi_node_updated(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
    """isSchedulableAfterCSINodeUpdated: some driver's limit went up."""
    before, after = volume_limits(old), volume_limits(new)
    for d in vc.spec(new or {}).get("drivers") or ():
        name = d.get("name") or ""
        if after.get(name, 0) > before.get(name, 0):
            return ev.QUEUE
    return ev.QUEUE_SKIP


def _after_assigned_pod_deleted(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
    """isSchedulableAfterAssignedPodDeleted: the deleted pod, on or nominated to a node,
    had claims (in-tree migratable inline volumes are not counted here)."""
    deleted: PodInfo | None = old if isinstance(old, PodInfo) else None
    if deleted is None:
        return ev.QUEUE
    if not deleted.node_name and not deleted.nominated_node:
        return ev.QUEUE_SKIP
    return ev.QUEUE if vc.has_claims(deleted.raw) else ev.QUEUE_SKIP


def _after_claim_added(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
    """isSchedulableAfterPVCAdded: one of the pod's claims, ephemeral ones included."""
    return ev.QUEUE if vc.pod_uses_claim(pod.raw, new) else ev.QUEUE_SKIP


def volume_limits(csi_node: Mapping[str, Any] | None) -> dict[str, int]:
    """getVolumeLimits: driver -> allocatable.count, for drivers that set one."""
    out: dict[str, int] = {}
    for d in vc.spec(csi_node or {}).get("drivers") or ():
        count = (d.get("allocatable") or {}).get("count")
        if count is not None:
            out[d.get("name") or ""] = int(count)
    return out


def new(args: Mapping[str, Any] | None, handle: Handle) -> NodeVolumeLimits:
    if args:
        raise ArgsError("", f"{NAME} takes no args; remove them")
    return NodeVolumeLimits(handle.listers)


SPEC = PluginSpec(name=NAME, filter=new)
