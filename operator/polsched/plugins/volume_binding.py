"""VolumeBinding: a pod's PersistentVolumeClaims must be bound, or bindable, on the node.

Copies kube-scheduler v1.37's volumebinding plugin (pkg/scheduler/framework/plugins/
volumebinding/volume_binding.go, binder.go, scorer.go, passive_assume_cache.go):

- PreFilter: every claim exists, is not Lost nor being deleted (an ephemeral one is owned
  by the pod); claims with Immediate binding must already be bound; otherwise the pod is
  UnschedulableAndUnresolvable with upstream's text. Pods without claims are skipped.
- Filter: a bound claim's PV must exist and its node affinity match the node; an unbound
  WaitForFirstConsumer claim needs an Available PV that fits the node (static binding,
  the smallest that fits), or a StorageClass that provisions there (allowedTopologies).
- PreScore/Score (StorageCapacityScoring, beta and on in v1.37, default shape 0%->10,
  100%->0): nodes whose chosen static PVs are least used by the claims score highest.
  CSIStorageCapacity is not watched, so dynamic provisions score 0 (as upstream does for
  drivers that do not publish capacity).
- Reserve: assume the chosen PVs bound to the claims (claimRef) and the claims to provision
  annotated with volume.kubernetes.io/selected-node, in this plugin's assume cache, so
  the next pods' cycles do not pick the same PVs. Unreserve reverts that.
- PreBind (binding cycle): PUT the PVs with their claimRef and the claims with the
  selected-node annotation, then wait (bindTimeoutSeconds) until kube-controller-manager's
  PV controller has bound every claim, as BindPodVolumes/checkBindings do.

Not copied: in-tree to CSI PV translation (tryTranslatePVToCSI) and CSIStorageCapacity
checks (CSIDrivers and capacities are not watched): see docs/differences.md.
"""

from __future__ import annotations

import asyncio
import copy
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polsched.framework import events as ev
from polsched.framework import listers as ls
from polsched.framework import signers
from polsched.framework.cycle_state import CycleState
from polsched.framework.interfaces import (
    ApiWriter,
    FilterPlugin,
    Handle,
    PreBindPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from polsched.framework.registry import ArgsError, PluginSpec
from polsched.framework.status import SKIP, SUCCESS, Status
from polsched.framework.types import NodeInfo, PodInfo, Snapshot
from polsched.plugins import volume_claims as vc

NAME = "VolumeBinding"

# binder.go ConflictReasons
ERR_REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ERR_REASON_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
ERR_REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
ERR_REASON_PV_NOT_EXIST = \
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
ERR_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"

DEFAULT_BIND_TIMEOUT_SECONDS = 600
# config.MaxCustomPriorityScore; shape scores are scaled by MaxNodeScore / this.
MAX_CUSTOM_PRIORITY_SCORE = 10
MAX_UTILIZATION = 100
# SetDefaults_VolumeBindingArgs with StorageCapacityScoring on.
DEFAULT_SHAPE = ({"utilization": 0, "score": MAX_CUSTOM_PRIORITY_SCORE},
                 {"utilization": 100, "score": 0})
# How often PreBind looks at the cache for the PV controller's answer (upstream polls its
# informers every second).
BIND_POLL_SECONDS = 0.2

_STATE_KEY = NAME


@dataclass
class StaticBinding:
    """BindingInfo: a PV chosen for a claim."""

    pvc: Mapping[str, Any]
    pv: Mapping[str, Any]


@dataclass
class PodVolumes:
    static_bindings: list[StaticBinding] = field(default_factory=list)
    # Claims to provision (DynamicProvision.PVC; capacity is never known here).
    dynamic_provisions: list[Mapping[str, Any]] = field(default_factory=list)
    # The node's labels when Filter ran, for PreBind's re-check of PV node affinity.
    node_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass
class _State:
    bound_claims: list[Mapping[str, Any]] = field(default_factory=list)
    unbound_delay: list[Mapping[str, Any]] = field(default_factory=list)
    # storage class -> PVs of that class (assumed versions included)
    volumes_by_class: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)
    by_node: dict[str, PodVolumes] = field(default_factory=dict)
    has_static_bindings: bool = False
    all_bound: bool = False


class BindingError(Exception):
    pass


class _AssumeCache:
    """passiveAssumeCache over a lister kind: objects updated in memory only (Assume) until
    the watch delivers a newer version, or until Restore. An assumed object is used only
    while the cache's object still has the resourceVersion it was assumed from."""

    def __init__(self, listers: ls.Listers, kind: ls.Kind, resource: str) -> None:
        self._listers = listers
        self._kind = kind
        self.resource = resource  # for NotFound texts: "persistentvolumes"
        self._assumed: dict[str, Mapping[str, Any]] = {}

    def api_obj(self, key: str) -> Mapping[str, Any] | None:
        return self._listers.objects[self._kind.name].get(key)

    def get(self, key: str) -> Mapping[str, Any] | None:
        obj = self.api_obj(key)
        if obj is None:
            self._assumed.pop(key, None)
            return None
        assumed = self._assumed.get(key)
        if assumed is None:
            return obj
        if _rv(assumed) != _rv(obj):
            del self._assumed[key]  # mayExpire: the watch brought a newer version
            return obj
        return assumed

    def list(self) -> list[Mapping[str, Any]]:
        store = self._listers.objects[self._kind.name]
        if not self._assumed:
            return list(store.values())
        return [self.get(k) or o for k, o in store.items()]

    def assume(self, key: str, obj: Mapping[str, Any]) -> None:
        stored = self.api_obj(key)
        if stored is None:
            raise BindingError(vc.not_found(self.resource, key))
        if _rv(stored) != _rv(obj):
            raise BindingError(f'"{key}" is out of sync (stored: {_rv(stored)}, assume: '
                               f'{_rv(obj)})')
        self._assumed[key] = obj

    def restore(self, key: str, obj: Mapping[str, Any]) -> None:
        assumed = self._assumed.get(key)
        if assumed is not None and _rv(assumed) == _rv(obj):
            del self._assumed[key]


def _rv(obj: Mapping[str, Any]) -> str:
    return vc.meta(obj).get("resourceVersion") or ""


def _rv_int(obj: Mapping[str, Any]) -> int:
    try:
        return int(_rv(obj))
    except ValueError:
        return 0


def _pv_key(pv: Mapping[str, Any]) -> str:
    return vc.meta(pv).get("name") or ""


def broken_linear(shape: Sequence[tuple[int, int]], p: int) -> int:
    """helper.BuildBrokenLinearFunction (integer arithmetic truncating as Go's)."""
    for i, (u, s) in enumerate(shape):
        if p <= u:
            if i == 0:
                return s
            pu, ps = shape[i - 1]
            num = (s - ps) * (p - pu)
            den = u - pu
            q = abs(num) // abs(den)
            return ps + (q if (num >= 0) == (den > 0) else -q)
    return shape[-1][1]


class VolumeBinding(SignPlugin, PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin,
                    ReservePlugin, PreBindPlugin, ev.EnqueueExtensions):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        return [(signers.VOLUMES, signers.volumes(pod))]

    def __init__(self, listers: ls.Listers, api: ApiWriter | None, bind_timeout: float,
                 shape: Sequence[tuple[int, int]]) -> None:
        self.listers = listers
        self.api = api
        self.bind_timeout = bind_timeout
        self.shape = tuple(shape)
        self.pvs = _AssumeCache(listers, ls.PERSISTENT_VOLUME, "persistentvolumes")
        self.pvcs = _AssumeCache(listers, ls.PERSISTENT_VOLUME_CLAIM, "persistentvolumeclaims")

    # -- EnqueueExtensions ------------------------------------------------------------------
    def events_to_register(self) -> list[ev.ClusterEventWithHint]:
        """EventsToRegister, without CSIDriver and CSIStorageCapacity (not watched)."""
        A, R = ev.ActionType, ev.Resource
        return [
            ev.ClusterEventWithHint(ev.ClusterEvent(R.STORAGE_CLASS, A.ADD | A.UPDATE),
                                    _after_storage_class_change),
            ev.ClusterEventWithHint(ev.ClusterEvent(R.PERSISTENT_VOLUME_CLAIM, A.ADD | A.UPDATE),
                                    _after_claim_change),
            ev.ClusterEventWithHint(ev.ClusterEvent(R.PERSISTENT_VOLUME, A.ADD | A.UPDATE)),
            ev.ClusterEventWithHint(ev.ClusterEvent(R.NODE, A.ADD | A.UPDATE_NODE_LABEL)),
            ev.ClusterEventWithHint(ev.ClusterEvent(R.CSI_NODE, A.ADD | A.UPDATE),
                                    _after_csi_node_change),
        ]

    # -- PreFilter ------------------------------------------------------------------------
    def _check_claims(self, pod: PodInfo) -> str:
        """podHasPVCs: the error text for a claim the pod cannot use yet, or ""."""
        for name, ephemeral in vc.pod_claims(pod.raw):
            pvc = self.listers.pvc(pod.namespace, name)
            if pvc is None:
                if ephemeral:
                    return ("waiting for ephemeral volume controller to create the "
                            f'persistentvolumeclaim "{name}"')
                return vc.not_found(vc.PVC_RESOURCE, name)
            if (pvc.get("status") or {}).get("phase") == "Lost":
                return (f'persistentvolumeclaim "{name}" bound to non-existent '
                        f'persistentvolume "{vc.spec(pvc).get("volumeName") or ""}"')
            if vc.meta(pvc).get("deletionTimestamp"):
                return f'persistentvolumeclaim "{name}" is being deleted'
            if ephemeral:
                err = vc.volume_is_for_pod(pod.raw, pvc)
                if err:
                    return err
        return ""

    def _delay_binding(self, pvc: Mapping[str, Any]) -> bool:
        """volume.IsDelayBindingMode; raises BindingError when the class has no mode."""
        class_name = vc.claim_class(pvc)
        if not class_name:
            return False
        sc = self.listers.storage_class(class_name)
        if sc is None:
            return False
        mode = sc.get("volumeBindingMode")
        if mode is None:
            raise BindingError(f'VolumeBindingMode not set for StorageClass "{class_name}"')
        return bool(mode == vc.WAIT_FOR_FIRST_CONSUMER)

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        if not vc.has_claims(pod.raw):
            state.write(_STATE_KEY, _State(all_bound=True))
            return SKIP
        err = self._check_claims(pod)
        if err:
            return Status.unresolvable(err)
        s = _State()
        immediate = 0
        try:
            for name, _ in vc.pod_claims(pod.raw):
                pvc = self.pvcs.get(f"{pod.namespace}/{name}")
                if pvc is None:
                    return Status.error(f'error getting PVC "{pod.namespace}/{name}"')
                if vc.is_fully_bound(pvc):
                    s.bound_claims.append(pvc)
                elif self._delay_binding(pvc) and not vc.spec(pvc).get("volumeName"):
                    s.unbound_delay.append(pvc)
                else:
                    immediate += 1
        except BindingError as e:
            return Status.error(str(e))
        if immediate:
            return Status.unresolvable(ERR_UNBOUND_IMMEDIATE)
        if s.unbound_delay:
            all_pvs = self.pvs.list()
            for pvc in s.unbound_delay:
                cls = vc.claim_class(pvc)
                if cls not in s.volumes_by_class:
                    s.volumes_by_class[cls] = [pv for pv in all_pvs if vc.volume_class(pv) == cls]
        state.write(_STATE_KEY, s)
        return SUCCESS

    # -- Filter ---------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        s: _State | None = state.get(_STATE_KEY)
        if s is None:
            return Status.error(f'reading "{_STATE_KEY}" from cycleState: not found')
        try:
            volumes, reasons = self.find_pod_volumes(s, node)
        except BindingError as e:
            return Status.error(str(e))
        if reasons:
            return Status.unresolvable(*reasons)
        s.by_node[node.name] = volumes
        if volumes.static_bindings:
            s.has_static_bindings = True
        return SUCCESS

    def find_pod_volumes(self, s: _State, node: NodeInfo) -> tuple[PodVolumes, list[str]]:
        """volumeBinder.FindPodVolumes: the node's PodVolumes, or the reasons it fails."""
        labels = node.labels
        volumes = PodVolumes(node_labels=labels)
        bound_ok = unbound_ok = storage_ok = pvs_found = True
        if s.bound_claims:
            bound_ok, pvs_found = self._check_bound_claims(s.bound_claims, labels)
        if s.unbound_delay:
            unbound_ok, storage_ok = self._find_unbound(s, node, volumes)
        reasons = []
        if not bound_ok:
            reasons.append(ERR_REASON_NODE_CONFLICT)
        if not unbound_ok:
            reasons.append(ERR_REASON_BIND_CONFLICT)
        if not storage_ok:
            reasons.append(ERR_REASON_NOT_ENOUGH_SPACE)
        if not pvs_found:
            reasons.append(ERR_REASON_PV_NOT_EXIST)
        return volumes, reasons

    def _check_bound_claims(self, claims: Sequence[Mapping[str, Any]],
                            labels: Mapping[str, str]) -> tuple[bool, bool]:
        """checkBoundClaims: (node affinity satisfied, every PV found)."""
        for pvc in claims:
            pv = self.pvs.get(vc.spec(pvc).get("volumeName") or "")
            if pv is None:
                return True, False
            if not vc.volume_node_affinity_matches(pv, labels):
                return False, True
        return True, True

    def _find_unbound(self, s: _State, node: NodeInfo,
                      volumes: PodVolumes) -> tuple[bool, bool]:
        """The unbound-claims half of FindPodVolumes: (every claim can be bound or
        provisioned on the node, enough storage)."""
        to_match: list[Mapping[str, Any]] = []
        to_provision: list[Mapping[str, Any]] = []
        for pvc in s.unbound_delay:
            selected = vc.annotations_of(pvc).get(vc.ANN_SELECTED_NODE)
            if selected is not None:
                if selected != node.name:
                    return False, True  # fast path: provisioning was already started elsewhere
                to_provision.append(pvc)
            else:
                to_match.append(pvc)
        satisfied = True
        if to_match:
            satisfied, bindings, unmatched = self._find_matching_volumes(s, to_match, node)
            volumes.static_bindings = bindings
            to_provision.extend(unmatched)
        if to_provision:
            return self._check_provisions(to_provision, node, volumes)
        return satisfied, True

    def _find_matching_volumes(self, s: _State, claims: list[Mapping[str, Any]],
                               node: NodeInfo) -> tuple[bool, list[StaticBinding],
                                                        list[Mapping[str, Any]]]:
        """findMatchingVolumes: the smallest claims first, each PV chosen once."""
        chosen: dict[str, Mapping[str, Any]] = {}
        bindings: list[StaticBinding] = []
        unmatched: list[Mapping[str, Any]] = []
        found = True
        for pvc in sorted(claims, key=vc.claim_request):
            try:
                pv = vc.find_matching_volume(pvc, s.volumes_by_class.get(vc.claim_class(pvc), ()),
                                             node.labels, chosen)
            except vc.MatchError as e:
                raise BindingError(str(e)) from e
            if pv is None:
                unmatched.append(pvc)
                found = False
                continue
            chosen[_pv_key(pv)] = pv
            bindings.append(StaticBinding(pvc, pv))
        return found, bindings, unmatched

    def _check_provisions(self, claims: list[Mapping[str, Any]], node: NodeInfo,
                          volumes: PodVolumes) -> tuple[bool, bool]:
        """checkVolumeProvisions: (provisioning possible on the node, enough storage)."""
        provisions: list[Mapping[str, Any]] = []
        for pvc in claims:
            class_name = vc.claim_class(pvc)
            if not class_name:
                raise BindingError(f'no class for claim "{vc.claim_key(pvc)}"')
            sc = self.listers.storage_class(class_name)
            if sc is None:
                raise BindingError(f'failed to find storage class "{class_name}"')
            provisioner = sc.get("provisioner") or ""
            if not provisioner or provisioner == vc.NOT_SUPPORTED_PROVISIONER:
                return False, True
            if not vc.topology_terms_match(sc.get("allowedTopologies"), node.labels):
                return False, True
            # hasEnoughCapacity: CSIDrivers are not watched, so no driver opts into
            # capacity tracking here: always enough.
            provisions.append(pvc)
        volumes.dynamic_provisions = provisions
        return True, True

    # -- PreScore / Score -------------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
                  snapshot: Snapshot) -> Status:
        # Upstream scores every node when StorageCapacityScoring is on, but without static
        # bindings every node scores 0 here (no CSIStorageCapacity): skipping is the same.
        s: _State | None = state.get(_STATE_KEY)
        if s is None or not s.has_static_bindings or not self.shape:
            return SKIP
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        s: _State | None = state.get(_STATE_KEY)
        volumes = s.by_node.get(node.name) if s is not None else None
        if volumes is None or not volumes.static_bindings:
            return 0
        classes: dict[str, list[int]] = {}
        for b in volumes.static_bindings:
            # BindingInfo.StorageClassName: the PV's spec.storageClassName
            acc = classes.setdefault(vc.spec(b.pv).get("storageClassName") or "", [0, 0])
            acc[0] += vc.quantity_value(vc.claim_request(b.pvc))
            acc[1] += vc.quantity_value(vc.volume_capacity(b.pv))
        total = 0
        for requested, capacity in classes.values():
            if capacity == 0 or requested > capacity:
                total += broken_linear(self.shape, MAX_UTILIZATION)
            else:
                total += broken_linear(self.shape, requested * MAX_UTILIZATION // capacity)
        return _round_half_away(total / len(classes))

    # -- Reserve / Unreserve ----------------------------------------------------------------
    def _all_bound(self, pod: PodInfo) -> bool:
        """arePodVolumesBound, on the assume cache."""
        for name, _ in vc.pod_claims(pod.raw):
            pvc = self.pvcs.get(f"{pod.namespace}/{name}")
            if pvc is None or not vc.is_fully_bound(pvc):
                return False
        return True

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        s: _State | None = state.get(_STATE_KEY)
        if s is None:
            return Status.error(f'reading "{_STATE_KEY}" from cycleState: not found')
        volumes = s.by_node.get(node_name)
        if volumes is None:
            s.all_bound = True  # the pod has no claims
            return SUCCESS
        try:
            s.all_bound = self._assume(pod, node_name, volumes)
        except BindingError as e:
            return Status.error(str(e))
        return SUCCESS

    def _assume(self, pod: PodInfo, node_name: str, volumes: PodVolumes) -> bool:
        """AssumePodVolumes: True when every claim is bound already."""
        if self._all_bound(pod):
            return True
        done: list[StaticBinding] = []
        try:
            for b in volumes.static_bindings:
                new_pv, dirty = bind_volume_to_claim(b.pv, b.pvc)
                if dirty:
                    self.pvs.assume(_pv_key(new_pv), new_pv)
                done.append(StaticBinding(b.pvc, new_pv))
        except BindingError:
            for d in done:
                self.pvs.restore(_pv_key(d.pv), d.pv)
            raise
        provisions: list[Mapping[str, Any]] = []
        try:
            for pvc in volumes.dynamic_provisions:
                clone = copy.deepcopy(dict(pvc))
                clone.setdefault("metadata", {}).setdefault("annotations", {})[
                    vc.ANN_SELECTED_NODE] = node_name
                self.pvcs.assume(vc.claim_key(clone), clone)
                provisions.append(clone)
        except BindingError:
            for d in done:
                self.pvs.restore(_pv_key(d.pv), d.pv)
            for p in provisions:
                self.pvcs.restore(vc.claim_key(p), p)
            raise
        volumes.static_bindings = done
        volumes.dynamic_provisions = provisions
        return False

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        s: _State | None = state.get(_STATE_KEY)
        volumes = s.by_node.get(node_name) if s is not None else None
        if volumes is None:
            return
        for b in volumes.static_bindings:
            self.pvs.restore(_pv_key(b.pv), b.pv)
        for pvc in volumes.dynamic_provisions:
            self.pvcs.restore(vc.claim_key(pvc), pvc)

    # -- PreBind ----------------------------------------------------------------------------
    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """PreBindPreFlight: PreBind has work unless every volume is bound already (Reserve
        says so). A missing state is left for PreBind to report."""
        s: _State | None = state.get(_STATE_KEY)
        return SUCCESS if s is not None and not s.all_bound else SKIP

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        s: _State | None = state.get(_STATE_KEY)
        if s is None:
            return Status.error(f'reading "{_STATE_KEY}" from cycleState: not found')
        if s.all_bound:
            return SUCCESS
        volumes = s.by_node.get(node_name)
        if volumes is None:
            return Status.error(f'no pod volume found for node "{node_name}"')
        try:
            await self.bind_pod_volumes(pod, node_name, volumes)
        except BindingError as e:
            return Status.error(str(e))
        return SUCCESS

    async def bind_pod_volumes(self, pod: PodInfo, node_name: str, volumes: PodVolumes) -> None:
        """BindPodVolumes: the API updates, then wait for the PV controller."""
        if self.api is None:
            raise BindingError("no API client to bind volumes with")
        await self._bind_api_update(volumes)
        deadline = time.monotonic() + self.bind_timeout
        seen = -1
        while True:
            gens = self.listers.generations
            now = gens[ls.PERSISTENT_VOLUME.name] + gens[ls.PERSISTENT_VOLUME_CLAIM.name]
            if now != seen:
                seen = now
                if self._check_bindings(node_name, volumes):
                    return
            if time.monotonic() >= deadline:
                raise BindingError("binding volumes: context deadline exceeded")
            await asyncio.sleep(BIND_POLL_SECONDS)

    async def _bind_api_update(self, volumes: PodVolumes) -> None:
        """bindAPIUpdate: PUT each PV with its claimRef, then each claim to provision with
        its selected-node annotation. Assumed objects not yet written are reverted on
        failure; the answers replace them for checkBindings."""
        assert self.api is not None
        bindings, claims = volumes.static_bindings, volumes.dynamic_provisions
        done_b = done_c = 0
        try:
            for b in bindings:
                name = _pv_key(b.pv)
                b.pv = await self.api.request(
                    "PUT", f"/api/v1/persistentvolumes/{name}",
                    body={**b.pv, "apiVersion": "v1", "kind": "PersistentVolume"})
                done_b += 1
            for i, pvc in enumerate(claims):
                m = vc.meta(pvc)
                claims[i] = await self.api.request(
                    "PUT", f"/api/v1/namespaces/{m.get('namespace')}/persistentvolumeclaims/"
                           f"{m.get('name')}",
                    body={**pvc, "apiVersion": "v1", "kind": "PersistentVolumeClaim"})
                done_c += 1
        except Exception as e:  # noqa: BLE001 - any API failure fails PreBind (retried)
            for b in bindings[done_b:]:
                self.pvs.restore(_pv_key(b.pv), b.pv)
            for pvc in claims[done_c:]:
                self.pvcs.restore(vc.claim_key(pvc), pvc)
            raise BindingError(str(e)) from e

    def _check_bindings(self, node_name: str, volumes: PodVolumes) -> bool:
        """checkBindings, on the watched objects: True when every claim is fully bound;
        BindingError when binding must be retried (a claimRef or a selected-node annotation
        was dropped, a PV no longer fits the node)."""
        labels = volumes.node_labels
        for b in volumes.static_bindings:
            name = _pv_key(b.pv)
            pv = self.pvs.api_obj(name)
            if pv is None:
                raise BindingError("failed to check binding: "
                                   + vc.not_found("persistentvolumes", name))
            pvc = self.pvcs.api_obj(vc.claim_key(b.pvc))
            if pvc is None:
                raise BindingError("failed to check binding: "
                                   + vc.not_found("persistentvolumeclaims", vc.claim_key(b.pvc)))
            if _rv_int(b.pv) > _rv_int(pv):
                return False  # the watch has not brought our write yet
            if not vc.volume_node_affinity_matches(pv, labels):
                raise BindingError(f'pv "{name}" node affinity doesn\'t match node '
                                   f'"{node_name}": no matching NodeSelectorTerms')
            ref = vc.spec(pv).get("claimRef")
            if not ref or not ref.get("uid"):
                raise BindingError(f'ClaimRef got reset for pv "{name}"')
            if not vc.is_fully_bound(pvc):
                return False
        for claim in volumes.dynamic_provisions:
            key = vc.claim_key(claim)
            pvc = self.pvcs.api_obj(key)
            if pvc is None:
                raise BindingError("failed to check provisioning pvc: "
                                   + vc.not_found("persistentvolumeclaims", key))
            if _rv_int(claim) > _rv_int(pvc):
                return False
            if not vc.meta(pvc).get("annotations"):
                raise BindingError(
                    f'selectedNode annotation reset for PVC "{vc.meta(pvc).get("name")}"')
            if vc.annotations_of(pvc).get(vc.ANN_SELECTED_NODE) != node_name:
                raise BindingError(f'provisioning failed for PVC "{vc.meta(pvc).get("name")}"')
            volume_name = vc.spec(pvc).get("volumeName")
            if volume_name:
                pv = self.pvs.api_obj(volume_name)
                if pv is None:
                    return False
                if not vc.volume_node_affinity_matches(pv, labels):
                    raise BindingError(f'pv "{volume_name}" node affinity doesn\'t match node '
                                       f'"{node_name}": no matching NodeSelectorTerms')
            if not vc.is_fully_bound(pvc):
                return False
        return True


MIGRATED_PLUGINS_ANNOTATION = "storage.alpha.kubernetes.io/migrated-plugins"


def _after_storage_class_change(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
    """isSchedulableAfterStorageClassChange: a new class, or new allowedTopologies."""
    if old is None or (old.get("allowedTopologies") != (new or {}).get("allowedTopologies")):
        return ev.QUEUE
    return ev.QUEUE_SKIP


def _after_claim_change(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
    """isSchedulableAfterPersistentVolumeClaimChange: one of the pod's claims."""
    return ev.QUEUE if vc.pod_uses_claim(pod.raw, new) else ev.QUEUE_SKIP


def _after_csi_node_change(pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
    """isSchedulableAfterCSINodeChange: a new CSINode, or its migrated plugins changed."""
    if old is None:
        return ev.QUEUE
    key = MIGRATED_PLUGINS_ANNOTATION
    if vc.annotations_of(old).get(key) != vc.annotations_of(new or {}).get(key):
        return ev.QUEUE
    return ev.QUEUE_SKIP


def _round_half_away(x: float) -> int:
    """math.Round: halves away from zero."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def bind_volume_to_claim(pv: Mapping[str, Any],
                         pvc: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """volume.GetBindVolumeToClaim: a copy of the PV with claimRef pointing at the claim
    (reference.GetReference) and pv.kubernetes.io/bound-by-controller set when the PV was
    not already bound to it; and whether anything changed."""
    new = copy.deepcopy(dict(pv))
    dirty = False
    should_set_bound_by_controller = not vc.is_volume_bound_to_claim(pv, pvc)
    ref = vc.spec(pv).get("claimRef") or {}
    m = vc.meta(pvc)
    if (not ref or ref.get("name") != m.get("name") or ref.get("namespace") != m.get("namespace")
            or ref.get("uid") != m.get("uid")):
        new.setdefault("spec", {})["claimRef"] = {
            "kind": "PersistentVolumeClaim", "namespace": m.get("namespace"),
            "name": m.get("name"), "uid": m.get("uid"), "apiVersion": "v1",
            "resourceVersion": m.get("resourceVersion"),
        }
        dirty = True
    new_meta = new.setdefault("metadata", {})
    anns = new_meta.get("annotations") or {}
    if should_set_bound_by_controller and vc.ANN_BOUND_BY_CONTROLLER not in anns:
        new_meta["annotations"] = {**anns, vc.ANN_BOUND_BY_CONTROLLER: "yes"}
        dirty = True
    return new, dirty


def _shape(args: Mapping[str, Any]) -> tuple[tuple[int, int], ...]:
    """VolumeBindingArgs.shape, validated as ValidateVolumeBindingArgs does, with scores
    scaled to 0..MaxNodeScore."""
    raw = args.get("shape")
    if raw is None:
        raw = DEFAULT_SHAPE
    if not isinstance(raw, list | tuple) or not raw:
        raise ArgsError("shape", "must be a non-empty list of {utilization, score} points")
    out: list[tuple[int, int]] = []
    for i, p in enumerate(raw):
        path = f"shape[{i}]"
        if not isinstance(p, Mapping):
            raise ArgsError(path, "must be an object with utilization and score")
        u, sc = p.get("utilization", 0), p.get("score", 0)
        if not isinstance(u, int) or isinstance(u, bool) or not 0 <= u <= 100:
            raise ArgsError(f"{path}.utilization", "must be an integer in 0..100")
        if out and u <= out[-1][0]:
            raise ArgsError(f"{path}.utilization", "values must be sorted in increasing order")
        if not isinstance(sc, int) or isinstance(sc, bool) or not 0 <= sc <= 10:
            raise ArgsError(f"{path}.score", "must be an integer in 0..10")
        out.append((u, sc * (100 // MAX_CUSTOM_PRIORITY_SCORE)))
    return tuple(out)


def new(args: Mapping[str, Any] | None, handle: Handle) -> VolumeBinding:
    args = args or {}
    unknown = set(args) - {"bindTimeoutSeconds", "shape"}
    if unknown:
        raise ArgsError(sorted(unknown)[0], "unknown field; VolumeBinding takes "
                                            "bindTimeoutSeconds and shape")
    timeout = args.get("bindTimeoutSeconds", DEFAULT_BIND_TIMEOUT_SECONDS)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 0:
        raise ArgsError("bindTimeoutSeconds", "must be a non-negative integer (seconds)")
    return VolumeBinding(handle.listers, handle.api, float(timeout), _shape(args))


SPEC = PluginSpec(name=NAME, filter=new, score=new)
