"""VolumeRestrictions: disks that cannot be shared, and ReadWriteOncePod claims in use.

Copies kube-scheduler v1.37's volumerestrictions plugin (pkg/scheduler/framework/plugins/
volumerestrictions/volume_restrictions.go):

- PreFilter reads every persistentVolumeClaim volume's claim (a missing one makes the pod
  UnschedulableAndUnresolvable with the lister's `persistentvolumeclaim "x" not found`) and
  counts the pod's ReadWriteOncePod claims that a pod already on a node uses. It skips pods
  with neither such a claim in use nor a GCE PD / AWS EBS / RBD / iSCSI volume.
- Filter rejects every node while such a claim is in use (ReadWriteOncePod is
  cluster-wide), and a node where a pod already mounts the same disk (a GCE PD unless both
  are read-only, the same EBS volume, an RBD image of an overlapping monitor set unless both
  are read-only, an iSCSI IQN unless both are read-only).
- AddPod/RemovePod keep the in-use count right for preemption's what-ifs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polsched.framework import events as ev
from polsched.framework import listers as ls
from polsched.framework import signers
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    FilterPlugin,
    Handle,
    PreFilterExtensions,
    PreFilterPlugin,
    SignFragment,
    SignPlugin,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.status import SKIP, SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.plugins import volume_claims as vc

NAME = "VolumeRestrictions"

ERR_REASON_DISK_CONFLICT = "node(s) had no available disk"
ERR_REASON_RWOP_CONFLICT = ("node(s) unavailable due to PersistentVolumeClaim with "
                            "ReadWriteOncePod access mode already in-use by another pod")

_STATE_KEY = "PreFilter" + NAME
_DISK_CONFLICT = Status.unschedulable(ERR_REASON_DISK_CONFLICT)
_RWOP_CONFLICT = Status.unschedulable(ERR_REASON_RWOP_CONFLICT)
_RESTRICTED = ("gcePersistentDisk", "awsElasticBlockStore", "rbd", "iscsi")


@dataclass
class _State:
    # names of the pod's claims with the ReadWriteOncePod access mode
    rwop_claims: frozenset[str]
    # how many references to them pods on nodes hold
    conflicting: int

    def count(self, pod: PodInfo) -> int:
        n = 0
        for vol in pod.spec.get("volumes") or ():
            ref = vol.get("persistentVolumeClaim")
            if ref is not None and (ref.get("claimName") or "") in self.rwop_claims:
                n += 1
        return n


def needs_restrictions_check(vol: Mapping[str, Any]) -> bool:
    return any(vol.get(k) is not None for k in _RESTRICTED)


def _overlap(a: Any, b: Any) -> bool:
    return bool(set(a or ()) & set(b or ()))


def is_volume_conflict(vol: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """isVolumeConflict: `vol` cannot be mounted next to `pod`'s volumes."""
    for other in (pod.get("spec") or {}).get("volumes") or ():
        d, e = vol.get("gcePersistentDisk"), other.get("gcePersistentDisk")
        if d is not None and e is not None and d.get("pdName") == e.get("pdName") \
                and not (d.get("readOnly") and e.get("readOnly")):
            return True
        d, e = vol.get("awsElasticBlockStore"), other.get("awsElasticBlockStore")
        if d is not None and e is not None and d.get("volumeID") == e.get("volumeID"):
            return True
        d, e = vol.get("iscsi"), other.get("iscsi")
        if d is not None and e is not None and d.get("iqn") == e.get("iqn") \
                and not (d.get("readOnly") and e.get("readOnly")):
            return True
        d, e = vol.get("rbd"), other.get("rbd")
        if d is not None and e is not None and _overlap(d.get("monitors"), e.get("monitors")) \
                and (d.get("pool") or "rbd") == (e.get("pool") or "rbd") \
                and d.get("image") == e.get("image") \
                and not (d.get("readOnly") and e.get("readOnly")):
            return True
    return False


class VolumeRestrictions(SignPlugin, PreFilterPlugin, PreFilterExtensions, FilterPlugin,
                         ev.EnqueueExtensions):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        return [(signers.VOLUMES, signers.volumes(pod))]

    def events_to_register(self) -> list[ev.ClusterEventWithHint]:
        A, R = ev.ActionType, ev.Resource
        return [
            ev.ClusterEventWithHint(ev.ClusterEvent(R.ASSIGNED_POD, A.DELETE),
                                    _after_assigned_pod_deleted),
            ev.ClusterEventWithHint(ev.ClusterEvent(R.NODE, A.ADD)),
            ev.ClusterEventWithHint(ev.ClusterEvent(R.PERSISTENT_VOLUME_CLAIM, A.ADD),
                                    _after_claim_added),
        ]

    def __init__(self, listers: ls.Listers) -> None:
        self.listers = listers

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        volumes = pod.spec.get("volumes")
        if not volumes:
            return SKIP
        needs_check = False
        rwop: set[str] = set()
        for vol in volumes:
            if needs_restrictions_check(vol):
                needs_check = True
            ref = vol.get("persistentVolumeClaim")
            if ref is None:
                continue
            name = ref.get("claimName") or ""
            pvc = self.listers.pvc(pod.namespace, name)
            if pvc is None:
                return Status.unresolvable(vc.not_found(vc.PVC_RESOURCE, name))
            if vc.contains_access_mode(pvc, vc.READ_WRITE_ONCE_POD):
                rwop.add(name)
        conflicting = 0
        if rwop:
            # Snapshot.IsPVCUsedByPods: some pod on a node references the claim.
            used = _claims_in_use(snapshot, pod.namespace, rwop)
            conflicting = len(used)
        if not needs_check and conflicting == 0:
            return SKIP
        state.write(_STATE_KEY, _State(frozenset(rwop), conflicting))
        return SUCCESS

    def add_pod(self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo,
                node: NodeInfo) -> Status:
        s: _State | None = state.get(_STATE_KEY)
        if s is None:
            return Status.error(f'cannot read "{_STATE_KEY}" from cycleState')
        if pod_to_add.namespace == pod.namespace:
            s.conflicting += s.count(pod_to_add)
        return SUCCESS

    def remove_pod(self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo,
                   node: NodeInfo) -> Status:
        s: _State | None = state.get(_STATE_KEY)
        if s is None:
            return Status.error(f'cannot read "{_STATE_KEY}" from cycleState')
        if pod_to_remove.namespace == pod.namespace:
            s.conflicting -= s.count(pod_to_remove)
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        for vol in pod.spec.get("volumes") or ():
            if not needs_restrictions_check(vol):
                continue
            for other in node.pods.values():
                if is_volume_conflict(vol, other.raw):
                    return _DISK_CONFLICT
        s: _State | None = state.get(_STATE_KEY)
        if s is None:
            return Status.error(f'cannot read "{_STATE_KEY}" from cycleState')
        return _RWOP_CONFLICT if s.conflicting > 0 else SUCCESS


def _after_claim_added(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
    """isSchedulableAfterPersistentVolumeClaimAdded: one of the pod's claims."""
    return ev.QUEUE if vc.pod_uses_claim(pod.raw, new, ephemeral=False) else ev.QUEUE_SKIP


def _after_assigned_pod_deleted(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
    """isSchedulableAfterAssignedPodDeleted: the deleted pod (same namespace) held a disk
    the pod conflicts with, or one of the pod's claims."""
    deleted: PodInfo | None = old if isinstance(old, PodInfo) else None
    if deleted is None:
        return ev.QUEUE
    if deleted.namespace != pod.namespace:
        return ev.QUEUE_SKIP
    for vol in pod.spec.get("volumes") or ():
        if needs_restrictions_check(vol) and is_volume_conflict(vol, deleted.raw):
            return ev.QUEUE
    claims = {(v.get("persistentVolumeClaim") or {}).get("claimName")
              for v in pod.spec.get("volumes") or () if v.get("persistentVolumeClaim")}
    for vol in deleted.spec.get("volumes") or ():
        ref = vol.get("persistentVolumeClaim")
        if ref is not None and ref.get("claimName") in claims:
            return ev.QUEUE
    return ev.QUEUE_SKIP


def _claims_in_use(snapshot: Snapshot, namespace: str, names: set[str]) -> set[str]:
    used: set[str] = set()
    for node in snapshot.nodes:
        for p in node.pods.values():
            if p.namespace != namespace or p.terminal:
                continue
            for vol in p.spec.get("volumes") or ():
                ref = vol.get("persistentVolumeClaim")
                if ref is not None and ref.get("claimName") in names:
                    used.add(ref["claimName"])
    return used


def new(args: Mapping[str, Any] | None, handle: Handle) -> VolumeRestrictions:
    if args:
        raise ArgsError("", f"{NAME} takes no args; remove them")
    return VolumeRestrictions(handle.listers)


SPEC = PluginSpec(name=NAME, filter=new)
