"""VolumeZone: a bound PV labelled with a zone or region fits only nodes in it.

Copies kube-scheduler v1.37's volumezone plugin (pkg/scheduler/framework/plugins/
volumezone/volume_zone.go): PreFilter collects the topology labels (beta and GA zone and
region) of the PVs bound to the pod's claims, skipping WaitForFirstConsumer claims not
bound yet; a missing claim, PV or StorageClass, or an unbound Immediate claim, makes the
pod UnschedulableAndUnresolvable with upstream's text. Filter passes nodes without any
topology label and otherwise wants, for every PV label, the node's value (beta or GA key)
among the PV's values ("a__b" lists several zones).
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
    PreFilterPlugin,
    SignFragment,
    SignPlugin,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.status import SKIP, SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.plugins import volume_claims as vc

NAME = "VolumeZone"

ERR_REASON_CONFLICT = "node(s) had no available volume zone"

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
TOPOLOGY_LABELS = (BETA_ZONE, BETA_REGION, ZONE, REGION)
_GA = {BETA_ZONE: ZONE, BETA_REGION: REGION}
# cloud-provider volume.LabelMultiZoneDelimiter
MULTI_ZONE_DELIMITER = "__"

_STATE_KEY = "PreFilter" + NAME
_CONFLICT = Status.unresolvable(ERR_REASON_CONFLICT)


@dataclass(frozen=True)
class PVTopology:
    pv_name: str
    key: str
    values: frozenset[str]


def pv_topologies(pv: Mapping[str, Any]) -> list[PVTopology]:
    """getPVTopologies: one entry per topology label on the PV (LabelZonesToSet; a value
    with an empty zone in it is ignored)."""
    labels = vc.meta(pv).get("labels") or {}
    out = []
    for key in TOPOLOGY_LABELS:
        value = labels.get(key)
        if value is None:
            continue
        zones = [z.strip() for z in value.split(MULTI_ZONE_DELIMITER)]
        if any(not z for z in zones):
            continue
        out.append(PVTopology(vc.meta(pv).get("name") or "", key, frozenset(zones)))
    return out


class VolumeZone(SignPlugin, PreFilterPlugin, FilterPlugin, ev.EnqueueExtensions):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        return [(signers.VOLUMES, signers.volumes(pod))]

    def events_to_register(self) -> list[ev.ClusterEventWithHint]:
        A, R = ev.ActionType, ev.Resource
        return [
            ev.ClusterEventWithHint(ev.ClusterEvent(R.STORAGE_CLASS, A.ADD),
                                    _after_storage_class_added),
            ev.ClusterEventWithHint(ev.ClusterEvent(R.NODE, A.ADD | A.UPDATE_NODE_LABEL)),
            ev.ClusterEventWithHint(ev.ClusterEvent(R.PERSISTENT_VOLUME_CLAIM, A.ADD | A.UPDATE),
                                    _after_claim_change),
            ev.ClusterEventWithHint(ev.ClusterEvent(R.PERSISTENT_VOLUME, A.ADD | A.UPDATE),
                                    _after_volume_change),
        ]

    def __init__(self, listers: ls.Listers) -> None:
        self.listers = listers

    def topologies(self, pod: PodInfo) -> list[PVTopology] | Status:
        """getPVbyPod."""
        out: list[PVTopology] = []
        for vol in pod.spec.get("volumes") or ():
            ref = vol.get("persistentVolumeClaim")
            if ref is None:
                continue
            name = ref.get("claimName") or ""
            if not name:
                return Status.unresolvable("PersistentVolumeClaim had no name")
            pvc = self.listers.pvc(pod.namespace, name)
            if pvc is None:
                return Status.unresolvable(vc.not_found(vc.PVC_RESOURCE, name))
            pv_name = vc.spec(pvc).get("volumeName") or ""
            if not pv_name:
                class_name = vc.claim_class(pvc)
                if not class_name:
                    return Status.unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name")
                sc = self.listers.storage_class(class_name)
                if sc is None:
                    return Status.unresolvable(
                        vc.not_found(vc.STORAGE_CLASS_RESOURCE, class_name))
                mode = sc.get("volumeBindingMode")
                if mode is None:
                    return Status.unresolvable(
                        f'VolumeBindingMode not set for StorageClass "{class_name}"')
                if mode == vc.WAIT_FOR_FIRST_CONSUMER:
                    continue
                return Status.unresolvable("PersistentVolume had no name")
            pv = self.listers.pv(pv_name)
            if pv is None:
                return Status.unresolvable(vc.not_found(vc.PV_RESOURCE, pv_name))
            out.extend(pv_topologies(pv))
        return out

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        if not pod.spec.get("volumes"):
            return SKIP
        topologies = self.topologies(pod)
        if isinstance(topologies, Status):
            return topologies
        if not topologies:
            return SKIP
        state.write(_STATE_KEY, topologies)
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        topologies: list[PVTopology] | None = state.get(_STATE_KEY)
        if topologies is None:
            found = self.topologies(pod)
            if isinstance(found, Status):
                return found
            topologies = found
        labels = node.labels
        if not any(k in labels for k in TOPOLOGY_LABELS):
            return SUCCESS
        for t in topologies:
            value = labels.get(t.key)
            if value is None:
                value = labels.get(_GA.get(t.key, t.key))
            if value is None or value not in t.values:
                return _CONFLICT
        return SUCCESS


def _after_storage_class_added(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
    """isSchedulableAfterStorageClassAdded: only a WaitForFirstConsumer class helps."""
    mode = (new or {}).get("volumeBindingMode")
    return ev.QUEUE if mode == vc.WAIT_FOR_FIRST_CONSUMER else ev.QUEUE_SKIP


def _after_claim_change(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
    """isSchedulableAfterPersistentVolumeClaimChange: one of the pod's claims."""
    return ev.QUEUE if vc.pod_uses_claim(pod.raw, new, ephemeral=False) else ev.QUEUE_SKIP


def _after_volume_change(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
    """isSchedulableAfterPersistentVolumeChange: a new PV, or its topology changed."""
    if old is None or pv_topologies(old) != pv_topologies(new or {}):
        return ev.QUEUE
    return ev.QUEUE_SKIP


def new(args: Mapping[str, Any] | None, handle: Handle) -> VolumeZone:
    if args:
        raise ArgsError("", f"{NAME} takes no args; remove them")
    return VolumeZone(handle.listers)


SPEC = PluginSpec(name=NAME, filter=new)
