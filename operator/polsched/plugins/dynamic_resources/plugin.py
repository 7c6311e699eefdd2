"""DynamicResources: allocate a pod's ResourceClaims, as kube-scheduler v1.37 does.

Upstream: pkg/scheduler/framework/plugins/dynamicresources (dynamicresources.go). The
claims, ResourceSlices and DeviceClasses come from the cache's listers (Handle.listers);
the devices come from the structured allocator (allocator.py).

- PreFilter: resolves the pod's claims (a claim from a template through
  status.resourceClaimStatuses, owned by the pod); a claim that does not exist yet, is
  being deleted, was not made for the pod, or is being allocated for another pod makes
  the pod UnschedulableAndUnresolvable, as upstream. An allocated claim only allows the
  nodes of its allocation's node selector. For the unallocated ones the DeviceClasses
  must exist, and an allocator is built over all slices with every device that allocated
  claims (and allocations in flight) use.
- Filter: runs the allocator for the node ("cannot allocate all claims" when the claims
  do not fit) and keeps its result for Reserve.
- Reserve: records the node's allocation in flight (ClaimTracker), so that no other pod,
  of this or another policy, gets the same devices before the claim's status says so.
  Unreserve drops it, and takes the pod out of the reservedFor of a claim PreBind had
  already reserved (a later step failed).
- PreBind: adds the finalizer, writes status.allocation (with allocationTimestamp) and
  the pod in status.reservedFor, retrying on conflicts; the allocation stays in flight
  until the cache has seen it.
- DeviceTaintRules: their taints are added to the devices they select before allocating.
- Score (weight 2 in the default profile): prefers the nodes where a firstAvailable
  request gets an earlier subrequest (computeScore).
- Events: claim, slice, class and taint rule changes and node changes requeue pods (queueing hints
  as upstream's isSchedulableAfterClaimChange).

- PreEnqueue: the same checks keep the pod out of the queue, untried, until its claims
  exist (a claim from a template comes with an update of the pod's status).

- Binding conditions: PreBind records a Normal BindingConditionsPending event and waits
  (bindingTimeout, 600 s) until the allocated devices' bindingConditions are True in the
  claim's status.devices (an error when a failure condition is True); Filter skips
  allocated claims that failed or timed out.

- DRAExtendedResource (extended.py): a container's request for an extended resource a
  DeviceClass serves gets devices through a special claim: PreFilter finds the one an
  earlier attempt created or makes one in memory; Filter gives each node its variant
  (requests for what the node's allocatable lacks); Reserve puts it in flight; PreBind
  creates it, allocates and reserves it, and writes the pod's
  status.extendedResourceClaimStatus; Unreserve and PostFilter delete a created one.

- PostFilter (before DefaultPreemption): deallocates an allocated claim that Filter found
  unusable and that no other pod uses, so the next attempt can allocate it anew.

NodeResourcesFit and BalancedAllocation score such resources from the node's devices
(extended_score.py).

- Pod groups (GenericWorkload): in one pod-group cycle a member reuses the allocation an
  earlier member's Reserve put in flight for a claim they share (upstream's
  pendingAllocations); the allocation leaves when its last sharer is unreserved.
- DRAWorkloadResourceClaims (beta, off; workload.py): a member's claim that is one of its
  PodGroup's spec.resourceClaims is reserved for the PodGroup; a claim reserved for the
  group counts as reserved for its members; a claim a template made for the group serves
  them; PodGroupPostFilter frees the group's claims when no member is placed.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polsched.dra import (
    AllocatedState,
    Allocator,
    AllocatorError,
    Features,
    MatchCache,
    NodeAllocationError,
    NodeRef,
    SliceIndex,
    model,
    node_matches,
)
from polsched.framework import device_classes as dc
from polsched.framework import events as ev
from polsched.framework import listers as ls
from polsched.framework import podgroups as pgs
from polsched.framework.cycle_state import CycleState
from polsched.framework.diagnosis import FitError, PostFilterResult
from polsched.framework.interfaces import (
    EVENT_RECORDER_KEY,
    ApiWriter,
    FilterPlugin,
    FrameworkHandle,
    Handle,
    PodEventRecorder,
    PodGroupInfo,
    PodGroupPostFilterPlugin,
    PodGroupPostFilterResult,
    PodGroupSchedulingFunc,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ReservePlugin,
    ScoreExtensions,
    ScorePlugin,
    SignFragment,
    SignPlugin,
    default_normalize,
)
from polsched.framework.registry import ArgsError
from polsched.framework.status import SKIP, SUCCESS, Code, Status
from polsched.framework.types import Json, NodeInfo, PodInfo, Snapshot
from polsched.plugins.dynamic_resources import extended, workload
from polsched.plugins.dynamic_resources.allocated import (
    AllocatedIndex,
    InFlight,
    add_allocation,
    tracker_for,
)
from polsched.plugins.dynamic_resources.device_state import (
    _has_binding_conditions,
    apply_taint_rules,
    claim_ready_for_binding,
)

log = logging.getLogger(__name__)

NAME = "DynamicResources"
_STATE_KEY = "PreFilter" + NAME
# The group CycleState's key (the same stateKey upstream): each member's PreFilter state,
# by pod key, for PodGroupPostFilter (podGroupStateData.podsStateData).
_GROUP_STATE_KEY = _STATE_KEY
# The group CycleState's pending allocations (podGroupStateData.pendingAllocations): claim
# uid -> the uids of the members whose Reserve put the allocation in flight in this cycle;
# a later member reuses the allocation instead of allocating the claim again.
_GROUP_PENDING_KEY = _STATE_KEY + "/pendingAllocations"
# fwk.ErrNotFound's text: what reading a state never written returns.
ERR_NOT_FOUND = "not found"
FINALIZER = "resource.kubernetes.io/delete-protection"
RESOURCE_API = "/apis/resource.k8s.io/v1"
CLAIM_NOT_CREATED = "ResourceClaim not created yet"
CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"
# PreBind's Normal event while it waits for devices' binding conditions.
BINDING_CONDITIONS_PENDING = "BindingConditionsPending"
# filterExtendedResources' reasons.
EXTENDED_STALE = "cannot schedule extended resource claim"
EXTENDED_NO_FIT = "cannot fit resource"
# DRASchedulerFilterTimeout's default (KubeSchedulerConfiguration DynamicResourcesArgs).
FILTER_TIMEOUT_SECONDS = 10.0
# DynamicResourcesArgs.bindingTimeout's default: how long PreBind waits for a device's
# binding conditions, and after which Filter gives up on an allocated claim.
BINDING_TIMEOUT_SECONDS = 600.0
# How often PreBind looks at the cache's copy of the claims while it waits.
BINDING_POLL_SECONDS = 0.2
_CONFLICT_RETRIES = 5
# resourceapi.FirstAvailableDeviceRequestMaxSize
_FIRST_AVAILABLE_MAX = 8
# v1.37's default feature gates.
DEFAULT_FEATURES = Features()


# --- the cycle's state --------------------------------------------------------------------

@dataclass
class _ClaimInfo:
    raw: Json
    claim: model.Claim
    uid: str
    allocated: bool
    node_filter: Json | None = None  # the allocation's node selector
    # The special claim for extended resources served by devices (DRAExtendedResource):
    # in memory (extended.SPECIAL_NAME) until PreBind creates it.
    extended: bool = False
    # An allocation an earlier member of the same pod-group cycle put in flight for this
    # (unallocated) claim: reused as it is, not allocated again.
    pending: dict[str, Any] | None = None


@dataclass(frozen=True)
class _NodeClaim:
    """The special claim's variant for a node, and the pod's requestMappings."""

    raw: Json
    claim: model.Claim
    mappings: list[dict[str, str]]


@dataclass
class _State:
    claims: list[_ClaimInfo] = field(default_factory=list)
    allocator: Allocator | None = None
    to_allocate: list[int] = field(default_factory=list)  # indexes into claims
    by_node: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    reserved: list[str] = field(default_factory=list)  # uids put in flight by Reserve
    # Claims PreBind reserved for the pod ((namespace, name, uid)): Unreserve takes the pod
    # out of their reservedFor again.
    written: list[tuple[str, str, str]] = field(default_factory=list)
    # Allocated claims that Filter found unusable on some node (upstream's
    # unavailableClaims): PostFilter may deallocate one.
    unavailable: set[int] = field(default_factory=set)
    # DRAExtendedResource: the pod's scalar requests, the index of the special claim in
    # `claims`, and per node the claim's variant for that node (None: the node's device
    # plugins serve them all) with the pod's requestMappings. The claims allocated on a
    # node are `to_allocate` without the special claim where its variant is None.
    pod_scalars: dict[str, int] = field(default_factory=dict)
    extended: int | None = None
    ext_by_node: dict[str, _NodeClaim | None] = field(default_factory=dict)
    ext_variants: dict[str, _NodeClaim] = field(default_factory=dict)  # by resources
    pod_spec: Json = field(default_factory=dict)
    # The claim PreBind created ((namespace, name)): Unreserve deletes it.
    ext_created: tuple[str, str] | None = None
    # DRAWorkloadResourceClaims: per pod claim (spec.resourceClaims order), the object its
    # claim is reserved for (the pod, or its PodGroup); None with the gate off.
    bindings: list[dict[str, str]] | None = None

    def allocating(self, node_name: str) -> list[int]:
        """The indexes into claims whose allocations by_node[node_name] holds."""
        if self.extended is None or self.extended not in self.to_allocate:
            return self.to_allocate
        if self.ext_by_node.get(node_name) is not None:
            return self.to_allocate
        return [i for i in self.to_allocate if i != self.extended]

    def user_claims(self) -> int:
        return len(self.claims) - (1 if self.extended is not None else 0)


def claim_name(pod: PodInfo, pod_claim: Mapping[str, Any]) -> tuple[str | None, bool, str]:
    """resourceclaim.Name: (name, must check the owner, error)."""
    if pod_claim.get("resourceClaimName"):
        return str(pod_claim["resourceClaimName"]), False, ""
    if pod_claim.get("resourceClaimTemplateName"):
        statuses = (pod.raw.get("status") or {}).get("resourceClaimStatuses") or []
        for s in statuses:
            if s.get("name") == pod_claim.get("name"):
                name = s.get("resourceClaimName")
                return (str(name) if name else None), True, ""
        return None, False, f'pod "{pod.namespace}/{pod.name}": {CLAIM_NOT_CREATED}'
    return None, False, (f'pod "{pod.namespace}/{pod.name}", spec.resourceClaim '
                         f'"{pod_claim.get("name")}": none of the supported fields are set')


class DynamicResources(SignPlugin,
                       PreEnqueuePlugin, PreFilterPlugin, FilterPlugin, PostFilterPlugin,
                       PodGroupPostFilterPlugin, PreScorePlugin, ScorePlugin, ScoreExtensions,
                       ReservePlugin, PreBindPlugin, ev.EnqueueExtensions):
    NAME = NAME

    def sign_pod(self, pod: PodInfo) -> Sequence[SignFragment] | None:
        """SignPod (OpportunisticBatching): what of the pod this plugin reads."""
        if pod.spec.get("resourceClaims"):
            return None  # pods with DRA resource claims are not signable
        return []

    def __init__(self, listers: ls.Listers, api: ApiWriter | None,
                 features: Features = DEFAULT_FEATURES, *,
                 timeouts: tuple[float, float] = (FILTER_TIMEOUT_SECONDS,
                                                  BINDING_TIMEOUT_SECONDS),
                 gates: Collection[str] = (), pod_groups: pgs.PodGroups | None = None) -> None:
        """`timeouts`: filterTimeout and bindingTimeout; `gates`: the feature gates on."""
        self.listers = listers
        # DRAWorkloadResourceClaims (fts.EnableDRAWorkloadResourceClaims): PodGroup claims
        # shared by the members (workload.py); `pod_groups` holds the PodGroup objects.
        self.workload_claims = workload.GATE in gates
        self.pod_groups = pod_groups
        # TopologyAwareWorkloadScheduling (fts.EnableTopologyAwareWorkloadScheduling).
        self.topology_aware = pgs.TOPOLOGY_AWARE_WORKLOAD_SCHEDULING in gates
        self.api = api
        self.features = features
        self.filter_timeout, self.binding_timeout = timeouts
        self.tracker = tracker_for(listers)
        # Parsed objects per object identity (the cache replaces a dict on every change).
        self._parsed: dict[int, tuple[Json, Any]] = {}
        # Unreserve's API calls in flight (kept referenced until done).
        self._tasks: set[asyncio.Task[Any]] = set()
        # Selector verdicts per device, across pods (valid while the slice is unchanged).
        self._matches: MatchCache = {}
        # Slices with the DeviceTaintRules' taints, per parsed slice, for one generation of
        # the rules.
        self._patched: dict[int, tuple[model.Slice, model.Slice]] = {}
        self._rules_gen = -1
        # The devices allocated claims use, kept in step with the cache's claims.
        self._allocated = AllocatedIndex()
        # (generations of classes, slices and taint rules) -> the parsed classes and the
        # indexed slices: rebuilt only when one of those kinds changed.
        self._inputs: tuple[tuple[int, int, int], dict[str, model.DeviceClass],
                            SliceIndex] | None = None

    # -- parsing, cached per object version ------------------------------------------------
    def _parse(self, raw: Json, parse: Any) -> Any:
        hit = self._parsed.get(id(raw))
        if hit is not None and hit[0] is raw:
            return hit[1]
        value = parse(raw)
        if len(self._parsed) > 100_000:
            self._parsed.clear()
        self._parsed[id(raw)] = (raw, value)
        return value

    # -- events ------------------------------------------------------------------------
    def events_to_register(self) -> list[ev.ClusterEventWithHint]:
        A = ev.ActionType
        return [
            ev.ClusterEventWithHint(ev.ClusterEvent(
                ev.Resource.NODE, A.ADD | A.UPDATE_NODE_LABEL | A.UPDATE_NODE_ALLOCATABLE)),
            ev.ClusterEventWithHint(ev.ClusterEvent(
                ev.Resource.RESOURCE_CLAIM, A.ADD | A.UPDATE | A.DELETE), self._claim_hint),
            ev.ClusterEventWithHint(ev.ClusterEvent(
                ev.Resource.TARGET_POD, A.UPDATE_POD_GENERATED_RESOURCE_CLAIM)),
            ev.ClusterEventWithHint(ev.ClusterEvent(ev.Resource.DEVICE_CLASS, A.ADD | A.UPDATE)),
            ev.ClusterEventWithHint(ev.ClusterEvent(ev.Resource.RESOURCE_SLICE,
                                                    A.ADD | A.UPDATE)),
            # A rule's change patches slices (an Update of them, upstream).
            ev.ClusterEventWithHint(ev.ClusterEvent(ev.Resource.DEVICE_TAINT_RULE,
                                                    A.ADD | A.UPDATE | A.DELETE)),
        ]

    def _claim_hint(self, pod: PodInfo, old: Any, new: Any) -> ev.QueueingHint:
        """isSchedulableAfterClaimChange."""
        if new is None:
            old_alloc = ((old or {}).get("status") or {}).get("allocation")
            return ev.QueueingHint.QUEUE if old_alloc else ev.QueueingHint.QUEUE_SKIP
        if old is not None and (old.get("status") or {}).get("allocation") and not (
                new.get("status") or {}).get("allocation"):
            return ev.QueueingHint.QUEUE
        uid = (new.get("metadata") or {}).get("uid")
        uses = False
        for pc in pod.spec.get("resourceClaims") or []:
            name, _, err = claim_name(pod, pc)
            if err:
                return ev.QueueingHint.QUEUE_SKIP
            if name is None:
                continue
            c = self.listers.get(ls.RESOURCE_CLAIM, name, pod.namespace)
            if c is None:
                return ev.QueueingHint.QUEUE_SKIP
            if (c.get("metadata") or {}).get("uid") == uid:
                uses = True
        if not uses:
            return ev.QueueingHint.QUEUE_SKIP
        if old is None:
            return ev.QueueingHint.QUEUE
        if (old.get("status") or {}) == (new.get("status") or {}):
            return ev.QueueingHint.QUEUE_SKIP
        return ev.QueueingHint.QUEUE

    # -- PreEnqueue -------------------------------------------------------------------------
    def pre_enqueue(self, pod: PodInfo) -> Status:
        """The pod waits, untried, until each of its claims exists, is not being deleted
        and (from a template) was made for it (foreachPodResourceClaim)."""
        for pc in pod.spec.get("resourceClaims") or []:
            _, why = self._resolve(pod, pc)
            if why:
                return Status.unresolvable(why)
        return SUCCESS

    def _resolve(self, pod: PodInfo, pc: Mapping[str, Any]) -> tuple[Json | None, str]:
        """One pod claim: (the claim or None when the pod needs none, why it cannot be
        used)."""
        name, check_owner, err = claim_name(pod, pc)
        if err:
            return None, err
        if name is None:
            return None, ""
        raw = self.listers.get(ls.RESOURCE_CLAIM, name, pod.namespace)
        if raw is None:
            return None, f'resourceclaim.resource.k8s.io "{name}" not found'
        raw = self.tracker.assumed(raw)
        if (raw.get("metadata") or {}).get("deletionTimestamp"):
            return None, f'resourceclaim "{name}" is being deleted'
        if check_owner:
            why = workload.is_for_pod(pod, raw, self.workload_claims)
            if why:
                return None, why
        return raw, ""

    # -- PreFilter --------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        s = _State()
        state.write(_STATE_KEY, s)
        if state.pod_group is not None:
            # getOrCreatePodGroupStateData: in a pod-group cycle the member's state is
            # also kept in the group's, for PodGroupPostFilter.
            members: dict[str, _State] | None = state.pod_group.get(_GROUP_STATE_KEY)
            if members is None:
                members = {}
                state.pod_group.write(_GROUP_STATE_KEY, members)
            members[pod.key] = s
        pod_claims = pod.spec.get("resourceClaims") or []
        ext_raw = self._pre_filter_extended(pod, s)
        if not pod_claims and ext_raw is None:
            return SKIP
        self.tracker.settle(self.listers)
        for pc in pod_claims:
            raw, why = self._resolve(pod, pc)
            if why:
                return Status.unresolvable(why)
            if raw is None:
                continue
            meta = raw.get("metadata") or {}
            try:
                claim = self._parse(raw, model.parse_claim)
            except model.ModelError as e:
                return Status.error(str(e))
            uid = str(meta.get("uid") or "")
            allocation = (raw.get("status") or {}).get("allocation")
            info = _ClaimInfo(raw, claim, uid, allocation is not None)
            if allocation is not None:
                info.node_filter = allocation.get("nodeSelector")
            s.claims.append(info)
        if ext_raw is not None:
            try:
                ext_claim = model.parse_claim(ext_raw)
            except model.ModelError as e:
                return Status.error(str(e))
            ext_alloc = (ext_raw.get("status") or {}).get("allocation")
            ext = _ClaimInfo(ext_raw, ext_claim,
                             str((ext_raw.get("metadata") or {}).get("uid") or ""),
                             ext_alloc is not None, extended=True)
            if ext_alloc is not None:
                ext.node_filter = ext_alloc.get("nodeSelector")
            s.extended = len(s.claims)
            s.claims.append(ext)
        if self.workload_claims:
            why = self._bindings(pod, pod_claims, s)
            if why:
                return Status.unresolvable(why)
        if not s.claims:
            return SKIP
        pending: dict[str, set[str]] | None = None
        if state.pod_group is not None:
            pending = state.pod_group.get(_GROUP_PENDING_KEY)
        for i, info in enumerate(s.claims):
            if info.allocated:
                continue
            entry = self.tracker.in_flight.get(info.uid)
            if pending is not None and pending.get(info.uid) and entry is not None:
                # Sharing is limited to one pod-group cycle: a claim an earlier member
                # reserved (a claim of their PodGroup, or one they all name) keeps that
                # allocation and its nodes.
                info.pending = entry.allocation
                info.node_filter = entry.allocation.get("nodeSelector")
                s.to_allocate.append(i)
                continue
            if entry is not None:
                return Status.unresolvable(
                    f"resource claim {info.claim.key} is in the process of being allocated")
            if info.extended:
                # Not validated here: the in-memory claim has no requests yet, and one
                # from an earlier attempt is Filter's to refuse.
                s.to_allocate.append(i)
                continue
            for req in info.claim.requests:
                if req.exactly is not None:
                    st = self._check_class(req.exactly.class_name, req.name)
                elif req.first_available:
                    if not self.features.prioritized_list:
                        return Status.unresolvable(
                            f"resource claim {info.claim.key}, request {req.name}: has "
                            "subrequests, but the DRAPrioritizedList feature is disabled")
                    st = SUCCESS
                    for sub in req.first_available:
                        st = self._check_class(sub.class_name, f"{req.name}/{sub.name}")
                        if not st.ok:
                            break
                else:
                    st = Status.unresolvable(f"resource claim {info.claim.key}, request "
                                             f"{req.name}: unknown request type")
                if not st.ok:
                    return st
            s.to_allocate.append(i)
        if s.to_allocate:
            s.allocator = self._allocator()
        return SUCCESS

    def pod_group(self, pod: PodInfo) -> tuple[Json | None, str]:
        """getPodGroupSnapshot: the pod's PodGroup with the gate on (None when the pod is
        in none), or why it cannot be read."""
        name = pgs.pod_group_name(pod)
        if not self.workload_claims or name is None:
            return None, ""
        group = self.pod_groups.get(pod.namespace, name) if self.pod_groups else None
        if group is None:
            return None, f'podgroup.scheduling.k8s.io "{name}" not found'
        return group, ""

    def _bindings(self, pod: PodInfo, pod_claims: Sequence[Any], s: _State) -> str:
        """podResourceClaimBindings: for each pod claim the object it is reserved for."""
        group, why = self.pod_group(pod)
        if why:
            return why
        s.bindings = []
        for pc in pod_claims:
            ref, why = workload.bind_to(pod, group, pc if isinstance(pc, Mapping) else {})
            if ref is None:
                return why
            s.bindings.append(ref)
        return ""

    def binding(self, s: _State, index: int, pod: PodInfo) -> dict[str, str]:
        """claimStore.getBinding: the pod for the extended-resources claim and whenever no
        binding is known."""
        if s.bindings is None or index >= len(s.bindings) or s.claims[index].extended:
            return workload.pod_ref(pod)
        return s.bindings[index]

    def _pre_filter_extended(self, pod: PodInfo, s: _State) -> Json | None:
        """preFilterExtendedResources: when a DeviceClass serves one of the pod's
        (non-zero) extended resource requests, the claim an earlier attempt created, or
        a new in-memory one."""
        classes = dc.resolver_for(self.listers)
        if not classes.any_class():
            return None
        if not any(q and dc.is_dra_extended_resource_name(n)
                   and classes.get_device_class(n) is not None
                   for n, q in pod.requests.items()):
            return None
        s.pod_scalars = {n: q for n, q in pod.requests.items()
                         if dc.is_dra_extended_resource_name(n)}
        s.pod_spec = pod.spec
        found = extended.find_claim(pod.name, pod.uid,
                                    self.listers.list(ls.RESOURCE_CLAIM, pod.namespace))
        if found is not None:
            return found
        return extended.special_claim(pod.namespace, pod.name, pod.uid)

    def filter_extended(self, s: _State, node: NodeInfo) -> Status | None:
        """filterExtendedResources: records the node's variant of the special claim (its
        requests for the resources the node's allocatable lacks) and the requestMappings."""
        if s.extended is None:
            return None
        info = s.claims[s.extended]
        if info.claim.requests:
            # From an earlier attempt: PostFilter deletes it, and the pod starts anew.
            return Status.unresolvable(EXTENDED_STALE)
        classes = dc.resolver_for(self.listers)
        needed: list[str] = []
        for name, qty in s.pod_scalars.items():
            if not qty:
                continue
            backed = classes.get_device_class(name) is not None
            if backed and node.allocatable.get(name, 0) == 0:
                needed.append(name)
            elif name not in node.allocatable:
                return Status.unresolvable(EXTENDED_NO_FIT)
        if not needed or info.allocated:
            # The node's device plugins serve them all. Upstream still gives the node a
            # request-less variant when the pod has claims of its own, and its PreBind
            # then fails ("nil or empty request mappings", docs/differences.md); it has
            # nothing to allocate, so it is left out here.
            s.ext_by_node[node.name] = None
            return None
        key = ",".join(sorted(needed))
        hit = s.ext_variants.get(key)
        if hit is None:
            requests, mappings = extended.requests_and_mappings(s.pod_spec, needed, classes)
            node_claim: dict[str, Any] = _copy(info.raw)
            node_claim["spec"] = {"devices": {"requests": requests}}
            try:
                hit = _NodeClaim(node_claim, model.parse_claim(node_claim), mappings)
            except model.ModelError as e:
                return Status.error(str(e))
            s.ext_variants[key] = hit
        s.ext_by_node[node.name] = hit
        return None

    def _check_class(self, class_name: str, request: str) -> Status:
        if not class_name:
            return Status.error(f"request {request}: unsupported request type")
        if self.listers.get(ls.DEVICE_CLASS, class_name) is None:
            return Status.unresolvable(
                f"request {request}: device class {class_name} does not exist")
        return SUCCESS

    def allocated_state(self) -> AllocatedState:
        """GatherAllocatedState: devices of allocated claims and of allocations in flight.
        The claims' part comes from an index kept across cycles (AllocatedIndex); the
        state is the index's set itself unless allocations in flight add to it."""
        idx = self._allocated
        idx.refresh(self.listers)
        state = idx.state()
        extra = [entry.allocation for uid, entry in self.tracker.in_flight.items()
                 if uid not in idx.uids]
        if extra:
            versions: dict[tuple[str, str], Any] = dict(state.pool_versions or {})
            state = AllocatedState(set(state.devices), set(state.shared),
                                   {d: dict(c) for d, c in state.capacity.items()},
                                   versions)
            added: dict[tuple[str, str], set[model.DeviceID]] = {}
            for alloc in extra:
                add_allocation(state, alloc)
                for r in ((alloc.get("devices") or {}).get("results") or ()):
                    did = (str(r.get("driver", "")), str(r.get("pool", "")),
                           str(r.get("device", "")))
                    devs = added.setdefault(did[:2], set())
                    if not r.get("adminAccess") and not r.get("shareID"):
                        devs.add(did)  # what add_allocation put into state.devices
            # A pool with devices in flight: its claims' version and the in-flight devices
            # name its allocated set (the allocator's memo keys on it; consecutive cycles
            # with the same allocations in flight share entries).
            for pid, devs in added.items():
                versions[pid] = (versions.get(pid, 0), frozenset(devs))
        return state

    def _allocator(self) -> Allocator:
        gens = self.listers.generations
        key = (gens[ls.DEVICE_CLASS.name], gens[ls.RESOURCE_SLICE.name],
               gens[ls.DEVICE_TAINT_RULE.name])
        if self._inputs is None or self._inputs[0] != key:
            classes, slices = self._classes_and_slices()
            self._inputs = (key, classes, SliceIndex(slices, self.features))
        _, classes, index = self._inputs
        return Allocator(self.features, self.allocated_state(), classes, index.all_slices,
                         match_cache=self._matches, index=index)

    def _classes_and_slices(self) -> tuple[dict[str, model.DeviceClass], list[model.Slice]]:
        """The parsed classes and slices (the DeviceTaintRules' taints applied)."""
        classes = {}
        for raw in self.listers.objects[ls.DEVICE_CLASS.name].values():
            c = self._parse(raw, model.parse_class)
            classes[c.name] = c
        rules = [r for r in self.listers.objects[ls.DEVICE_TAINT_RULE.name].values()
                 if isinstance((r.get("spec") or {}).get("deviceSelector"), Mapping)]
        rules_gen = self.listers.generations[ls.DEVICE_TAINT_RULE.name]
        if rules_gen != self._rules_gen:
            self._patched.clear()
            self._rules_gen = rules_gen
        slices = []
        for raw in self.listers.objects[ls.RESOURCE_SLICE.name].values():
            try:
                parsed = self._parse(raw, model.parse_slice)
            except model.ModelError:
                continue  # a slice we cannot read offers no devices
            if rules:
                hit = self._patched.get(id(parsed))
                if hit is None or hit[0] is not parsed:
                    hit = (parsed, apply_taint_rules(parsed, rules))
                    self._patched[id(parsed)] = hit
                parsed = hit[1]
            slices.append(parsed)
        return classes, slices

    # -- Filter --------------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        s: _State | None = state.get(_STATE_KEY)
        if s is None or not s.claims:
            return SUCCESS
        st = self.filter_extended(s, node)
        if st is not None:
            return st
        if s.extended is not None and s.user_claims() == 0 and \
                s.ext_by_node[node.name] is None:
            return SUCCESS  # device plugins serve it all, and the pod has no claims
        ref = NodeRef(node.name, node.labels)
        unavailable = []
        for i, info in enumerate(s.claims):
            if info.node_filter is not None:
                try:
                    ok = node_matches(ref, None, False, info.node_filter)
                except AllocatorError as e:
                    return Status.error(str(e))
                if not ok:
                    unavailable.append(i)
                    continue
            if info.allocated and self.features.device_binding_and_status:
                # A claim whose devices failed to bind, or did not bind in time, is
                # unavailable (PostFilter may deallocate it).
                ready, failed = claim_ready_for_binding(info.raw)
                if failed or (not ready and self.claim_timed_out(info.raw)):
                    unavailable.append(i)
        # As upstream, the allocator runs before the unusable claims are reported: when
        # the other claims do not fit either, that is what the node says.
        indexes = s.allocating(node.name) if s.allocator is not None else []
        if not indexes:
            return self._unavailable(s, unavailable)
        assert s.allocator is not None
        s.allocator.deadline = time.monotonic() + self.filter_timeout
        budget = state.budget
        if budget is not None:  # the attempt's time budget (framework.budget) ends it first
            budget.check("Filter %s, allocating devices on node %s", NAME, node.name)
            s.allocator.deadline = min(s.allocator.deadline, budget.deadline)
        # Allocations an earlier member of the pod-group cycle made are not allocated again:
        # they follow the new ones (upstream's pendingResult), in that order.
        fresh = [i for i in indexes if s.claims[i].pending is None]
        reused = [s.claims[i].pending for i in indexes if s.claims[i].pending is not None]
        claims = [s.claims[i].claim for i in fresh]
        if s.extended is not None and s.extended in fresh:
            variant = s.ext_by_node[node.name]
            assert variant is not None  # allocating() leaves the claim out otherwise
            claims[fresh.index(s.extended)] = variant.claim
        try:
            results = s.allocator.allocate(ref, claims) if claims else []
        except NodeAllocationError as e:
            return Status.unresolvable(str(e))
        except AllocatorError as e:
            if "took too long" in str(e):
                if budget is not None:
                    budget.check("Filter %s, allocating devices on node %s", NAME, node.name)
                return Status.error(f"node {node.name}: timed out trying to allocate devices")
            return Status.error(str(e))
        if results is None or len(results) != len(fresh):
            return Status.unresolvable(CANNOT_ALLOCATE)
        if unavailable:
            return self._unavailable(s, unavailable)
        s.by_node[node.name] = [*results, *(r for r in reused if r is not None)]
        return SUCCESS

    @staticmethod
    def _unavailable(s: _State, unavailable: list[int]) -> Status:
        """Remember the claims unusable on the node (PostFilter may deallocate one)."""
        if not unavailable:
            return SUCCESS
        s.unavailable.update(unavailable)
        return Status.unresolvable(NOT_AVAILABLE)

    # -- Score ---------------------------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo],
                  snapshot: Snapshot) -> Status:
        """Skip for a pod without claims: its Score would be 0 on every node, and a call
        per node per pod is what the plain workloads paid for it."""
        s: _State | None = state.get(_STATE_KEY)
        if s is None or not s.claims:
            return SKIP
        # Score counts only firstAvailable subrequests: without one it is 0 on every node.
        if not any(req.first_available for info in s.claims for req in info.claim.requests):
            return SKIP
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """computeScore: per firstAvailable request, FirstAvailableDeviceRequestMaxSize (8)
        minus the index of the subrequest that the node's allocation (or the claim's
        existing one) uses."""
        s: _State | None = state.get(_STATE_KEY)
        if s is None or not s.claims:
            return 0
        results = s.by_node.get(node.name)
        if results is None:
            return 0
        pending = dict(zip(s.allocating(node.name), results, strict=False))
        total = 0
        for i, info in enumerate(s.claims):
            alloc = ((info.raw.get("status") or {}).get("allocation") if info.allocated
                     else pending.get(i))
            if alloc is None:
                continue
            picked = {str(r.get("request", "")) for r in
                      (alloc.get("devices") or {}).get("results") or []}
            for req in info.claim.requests:
                for k, sub in enumerate(req.first_available):
                    if f"{req.name}/{sub.name}" in picked:
                        total += _FIRST_AVAILABLE_MAX - k
        return total

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> Status:
        """NormalizeScore: helper.DefaultNormalizeScore."""
        return default_normalize(scores)

    # -- PostFilter ------------------------------------------------------------------------
    async def post_filter(self, handle: FrameworkHandle, state: CycleState, pod: PodInfo,
                          snapshot: Snapshot, diagnosis: FitError
                          ) -> tuple[PostFilterResult | None, Status]:
        """PostFilter: reading the PreFilter's state fails with "not found" when an
        earlier PreFilter ended the phase (kube-scheduler v1.37's error, which ends the
        whole PostFilter phase); otherwise deallocateOrDeletePodClaims."""
        s: _State | None = state.get(_STATE_KEY)
        if s is None:
            return None, Status.error(ERR_NOT_FOUND)
        return None, (await self._deallocate(s, pod))[1]

    # -- PodGroupPostFilter ------------------------------------------------------------------
    async def pod_group_post_filter(self, handle: FrameworkHandle, state: CycleState,
                                    group: PodGroupInfo, pods: Sequence[PodInfo],
                                    snapshot: Snapshot, schedule: PodGroupSchedulingFunc
                                    ) -> tuple[PodGroupPostFilterResult | None, Status]:
        """DynamicResources.PodGroupPostFilter (v1.37): the group's state, written by its
        members' PreFilter, is read first; when no member ran this plugin's PreFilter
        (PlacementFeasible rejected the group before any member was tried, or an earlier
        PreFilter rejected every member) the read fails with "not found", an error that
        ends the phase: the group gets SchedulerError `error in "DynamicResources"
        PodGroupPostFilter plugins: not found`, as upstream (mirrored on purpose,
        docs/differences.md). Otherwise deallocateOrDeletePodClaims for each member that
        ran PreFilter, and Unschedulable "deallocation and deletion of ResourceClaims
        completed" whatever it did. With DRAWorkloadResourceClaims on, when a member freed
        nothing, the PodGroup's own claims are cleaned up (deallocate_group_claims). With
        TopologyAwareWorkloadScheduling on, a PodGroup with schedulingConstraints is left
        alone: Unschedulable without a reason ("not supporting topology-aware workloads")."""
        if self.topology_aware and \
                (group.pod_group.get("spec") or {}).get("schedulingConstraints") is not None:
            return None, Status.unschedulable()
        members: dict[str, _State] | None = state.get(_GROUP_STATE_KEY)
        if members is None:
            return None, Status.error(ERR_NOT_FOUND)
        unreserve_group = False
        for pod in pods:
            s = members.get(pod.key)
            if s is None:
                continue
            found, st = await self._deallocate(s, pod)
            if st.code is Code.ERROR:
                return None, st
            if not found:
                unreserve_group = True
        if unreserve_group and self.workload_claims and pods:
            group_st = await self.deallocate_group_claims(members, pods[0])
            if group_st is not None:
                return None, group_st
        return None, Status.unschedulable(
            "deallocation and deletion of ResourceClaims completed")

    async def deallocate_group_claims(self, members: Mapping[str, _State],
                                      pod: PodInfo) -> Status | None:
        """deallocatePodGroupClaims: when none of the group's members is assumed or bound,
        free what blocks the group: first an allocated claim Filter found unusable that is
        reserved for nobody or for this PodGroup alone (its allocation cleared), else the
        first allocated claim of the PodGroup's own that is reserved for it (the PodGroup
        taken out of reservedFor). None: nothing was done."""
        name = pgs.pod_group_name(pod)
        if name is None:
            return None
        if self.pod_groups is not None and \
                self.pod_groups.state(f"{pod.namespace}/{name}").scheduled_pods_count > 0:
            return None
        group, why = self.pod_group(pod)
        if group is None:
            return Status.error(why)
        gmeta = group.get("metadata") or {}
        # Upstream walks a map (a random order, on purpose); members in the cycle's order
        # here.
        for s in members.values():
            for i in sorted(s.unavailable):
                raw = s.claims[i].raw
                reserved = (raw.get("status") or {}).get("reservedFor") or []
                if reserved and not workload.reserved_only_for(raw, str(gmeta.get("uid"))):
                    continue
                st = await self._clear_allocation(raw)
                return st or Status.unschedulable(
                    "deallocation of PodGroup ResourceClaim completed")
        for gc in workload.group_claims(group):
            claim_name_, check_owner, err = workload.name_from_pod_group(group, gc)
            if err:
                return Status.error(err)
            if claim_name_ is None:
                continue
            got = self.listers.get(ls.RESOURCE_CLAIM, claim_name_, pod.namespace)
            if got is None:
                return Status.error(f'resourceclaim.resource.k8s.io "{claim_name_}" not found')
            raw = got
            if check_owner and workload.is_for_pod_group(group, raw):
                continue
            if (raw.get("status") or {}).get("allocation") is None or \
                    not workload.reserved_for_pod(pod, raw, True):
                continue
            meta = raw.get("metadata") or {}
            if await self._unreserve_claim(str(meta.get("namespace")), str(meta.get("name")),
                                           str(meta.get("uid")), str(gmeta.get("uid"))):
                return Status.unschedulable("ResourceClaim unreserved for PodGroup")
        return None

    async def _clear_allocation(self, raw: Json) -> Status | None:
        """The claim's status without reservedFor, allocation and devices (UpdateStatus);
        an error Status when the API refuses."""
        assert self.api is not None
        claim: dict[str, Any] = _copy(raw)
        status = claim.setdefault("status", {})
        for key in ("reservedFor", "allocation", "devices"):
            status.pop(key, None)
        meta = raw.get("metadata") or {}
        path = (f"{RESOURCE_API}/namespaces/{meta.get('namespace')}/resourceclaims/"
                f"{meta.get('name')}/status")
        try:
            await self.api.request("PUT", path, body=claim)
        except Exception as e:  # noqa: BLE001 - the client raises its own error types
            return Status.error(_api_message(e))
        return None

    async def _deallocate(self, s: _State, pod: PodInfo) -> tuple[bool, Status]:
        """deallocateOrDeletePodClaims: when a claim Filter found unusable is reserved for
        no pod but this one, clear its allocation (and reservations and device status) so
        that the next attempt can allocate it anew; Unschedulable either way. The flag:
        whether a claim was found to free."""
        if not s.claims or self.api is None:
            return False, Status.unschedulable()
        ext = s.claims[s.extended] if s.extended is not None else None
        for i in sorted(s.unavailable):
            if i == s.extended:
                continue  # deleted below when it exists
            raw = s.claims[i].raw
            reserved = (raw.get("status") or {}).get("reservedFor") or []
            if len(reserved) > 1 or (len(reserved) == 1 and reserved[0].get("uid") != pod.uid):
                continue
            st = await self._clear_allocation(raw)
            if st is not None:
                return True, st
            return True, Status.unschedulable("deallocation of ResourceClaim completed")
        if ext is not None and not extended.is_special(ext.raw):
            # The special claim of an earlier attempt: delete it, so the next attempt
            # starts anew.
            meta = ext.raw.get("metadata") or {}
            try:
                await self.delete_claim(str(meta.get("namespace")), str(meta.get("name")))
            except Exception as e:  # noqa: BLE001 - the client raises its own error types
                return True, Status.error(_api_message(e))
            return True, Status.unschedulable("deletion of ResourceClaim completed")
        return False, Status.unschedulable()

    # -- Reserve / Unreserve ------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        s: _State | None = state.get(_STATE_KEY)
        if s is None or not s.to_allocate:
            return SUCCESS
        indexes = s.allocating(node_name)
        if not indexes:
            return SUCCESS  # only the special claim, and the node's device plugins serve it
        results = s.by_node.get(node_name)
        if results is None or len(results) != len(indexes):
            return Status.error("claim allocation not found for node")
        # The allocator's results may be shared with other pods' cycles (its memo): the
        # pod's own copies go in flight and into the claims.
        results = s.by_node[node_name] = [_copy(r) for r in results]
        pending: dict[str, set[str]] | None = None
        if state.pod_group is not None:
            pending = state.pod_group.get(_GROUP_PENDING_KEY)
            if pending is None:
                pending = {}
                state.pod_group.write(_GROUP_PENDING_KEY, pending)
        for i, alloc in zip(indexes, results, strict=True):
            info = s.claims[i]
            uid = info.uid
            entry = self.tracker.in_flight.get(uid)
            if entry is not None and info.pending is not None:
                # SignalClaimPendingAllocation: one more member shares the allocation.
                entry.sharers += 1
            elif entry is not None:
                return Status.error(f"internal error, claim {info.claim.key} is "
                                    "already being allocated")
            else:
                meta = info.raw.get("metadata") or {}
                self.tracker.in_flight[uid] = InFlight(
                    alloc, key=f"{meta.get('namespace') or ''}/{meta.get('name') or ''}")
            s.reserved.append(uid)
            if pending is not None:
                pending.setdefault(uid, set()).add(pod.uid)
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        s: _State | None = state.get(_STATE_KEY)
        if s is None:
            return
        pending: dict[str, set[str]] | None = None
        if state.pod_group is not None:
            pending = state.pod_group.get(_GROUP_PENDING_KEY)
        for uid in s.reserved:
            entry = self.tracker.in_flight.get(uid)
            if entry is not None and entry.written_rv is None:
                # MaybeRemoveClaimPendingAllocation: the last sharer takes it out.
                if entry.sharers > 1:
                    entry.sharers -= 1
                    continue
                del self.tracker.in_flight[uid]
                if pending is not None:
                    pending.pop(uid, None)
        s.reserved.clear()
        created, s.ext_created = s.ext_created, None
        # A claim PreBind already reserved for the pod (a later step failed): take the pod
        # out of its reservedFor, as upstream's Unreserve does with a strategic merge patch
        # of the status. The allocation stays (PostFilter may free it later). Unreserve is
        # synchronous here, so the patch runs as a task of the engine's loop.
        if s.written and self.api is not None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            for ns, name, uid in s.written:
                task = loop.create_task(self._unreserve_claim(ns, name, uid, pod.uid))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            s.written.clear()
        if created is not None:
            # The claim PreBind created is being deleted: from now on its absence from
            # the cache means it is gone (ClaimTracker.settle), not "not seen yet".
            key = f"{created[0]}/{created[1]}"
            for entry in self.tracker.in_flight.values():
                if entry.key == key:
                    entry.seen = True
        if created is not None and self.api is not None:
            # unreserveExtendedResourceClaim: the claim PreBind created goes again.
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            deleting = loop.create_task(self._delete_extended_claim(*created))
            self._tasks.add(deleting)
            deleting.add_done_callback(self._tasks.discard)

    async def _delete_extended_claim(self, ns: str, name: str) -> None:
        try:
            await self.delete_claim(ns, name)
        except Exception:  # noqa: BLE001 - upstream logs and goes on; so do we
            log.warning("unreserve: could not delete extended resource claim %s/%s", ns, name,
                        exc_info=True)

    async def delete_claim(self, ns: str, name: str) -> None:
        """deleteClaim: drop the delete-protection finalizer (retrying on conflicts),
        then delete the claim; a claim already gone is fine."""
        assert self.api is not None
        path = f"{RESOURCE_API}/namespaces/{ns}/resourceclaims/{name}"
        for attempt in range(_CONFLICT_RETRIES):
            try:
                claim = await self.api.request("GET", path)
            except Exception as e:  # noqa: BLE001 - the client raises its own error types
                if getattr(e, "status", None) == 404:
                    return
                raise
            finalizers = (claim.get("metadata") or {}).get("finalizers") or []
            if FINALIZER not in finalizers:
                break
            claim["metadata"]["finalizers"] = [f for f in finalizers if f != FINALIZER]
            try:
                await self.api.request("PUT", path, body=claim)
                break
            except Exception as e:  # noqa: BLE001
                if not _is_conflict(e) or attempt == _CONFLICT_RETRIES - 1:
                    raise
        try:
            await self.api.request("DELETE", path)
        except Exception as e:  # noqa: BLE001
            if getattr(e, "status", None) != 404:
                raise

    async def _unreserve_claim(self, ns: str, name: str, uid: str, pod_uid: str) -> bool:
        """Take `pod_uid` (a pod's, or a PodGroup's) out of the claim's reservedFor (a
        strategic merge patch of the status); whether that worked."""
        assert self.api is not None
        patch = {"metadata": {"uid": uid},
                 "status": {"reservedFor": [{"$patch": "delete", "uid": pod_uid}]}}
        try:
            await self.api.request(
                "PATCH", f"{RESOURCE_API}/namespaces/{ns}/resourceclaims/{name}/status",
                body=patch, content_type="application/strategic-merge-patch+json")
        except Exception:  # noqa: BLE001 - upstream logs and goes on; so do we
            log.warning("unreserve: could not remove %s from claim %s/%s", pod_uid, ns,
                        name, exc_info=True)
            return False
        return True

    # -- PreBind --------------------------------------------------------------------------------
    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """PreBindPreFlight: PreBind has work when the pod has claims."""
        s: _State | None = state.get(_STATE_KEY)
        return SUCCESS if s is not None and s.claims else SKIP

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        s: _State | None = state.get(_STATE_KEY)
        if s is None or not s.claims:
            return SUCCESS
        if self.api is None:
            return Status.error("no API client to write ResourceClaim status with")
        results = dict(zip(s.allocating(node_name), s.by_node.get(node_name) or [],
                           strict=False))
        waits = False
        for i, info in enumerate(s.claims):
            if workload.reserved_for_pod(pod, info.raw, self.workload_claims):
                alloc = (info.raw.get("status") or {}).get("allocation")
            else:
                if info.extended and results.get(i) is None and not info.claim.requests:
                    continue  # the node's device plugins serve the extended resources
                try:
                    if info.extended and extended.is_special(info.raw):
                        await self._create_extended_claim(s, info, node_name)
                    binding = self.binding(s, i, pod)
                    written = await self._bind_claim(info, results.get(i), binding)
                    if info.extended:
                        await self._patch_extended_status(pod, s, written, node_name)
                except _BindError as e:
                    return Status.error(str(e))
                meta = written.get("metadata") or {}
                # Unreserve takes the pod out again; a claim reserved for the PodGroup
                # stays (the other members may need it; PodGroupPostFilter frees it).
                if not info.extended and binding.get("resource") == "pods":
                    s.written.append((str(meta.get("namespace")), str(meta.get("name")),
                                      str(meta.get("uid"))))
                alloc = (written.get("status") or {}).get("allocation")
            waits = waits or _has_binding_conditions(alloc)
        if waits and self.features.device_binding_and_status:
            recorder: PodEventRecorder | None = state.get(EVENT_RECORDER_KEY)
            if recorder is not None:
                recorder.event(pod, "Normal", BINDING_CONDITIONS_PENDING, "Scheduling",
                               f"waiting for binding conditions for device on node {node_name}")
            return await self._wait_for_binding_conditions(s)
        return SUCCESS

    async def _create_extended_claim(self, s: _State, info: _ClaimInfo,
                                     node_name: str) -> None:
        """createExtendedResourceClaimInAPI: the node's variant of the special claim,
        created under its generateName; the allocation in flight moves to its uid."""
        assert self.api is not None
        variant = s.ext_by_node.get(node_name)
        if variant is None:
            raise _BindError(f"extended resource claim not found for node {node_name}")
        body: dict[str, Any] = _copy(variant.raw)
        meta = body["metadata"]
        ns = str(meta.get("namespace") or "")
        for key in ("name", "uid"):
            meta.pop(key, None)
        body.pop("status", None)
        try:
            created = await self.api.request(
                "POST", f"{RESOURCE_API}/namespaces/{ns}/resourceclaims", body=body)
        except Exception as e:  # noqa: BLE001 - the client raises its own error types
            raise _BindError(f"create claim for extended resources {ns}/: "
                             f"{_api_message(e)}") from e
        cmeta = created.get("metadata") or {}
        s.ext_created = (ns, str(cmeta.get("name") or ""))
        new_uid = str(cmeta.get("uid") or "")
        entry = self.tracker.in_flight.pop(info.uid, None)
        if entry is not None:
            entry.key = f"{ns}/{cmeta.get('name') or ''}"  # settle finds it by key
            entry.seen, entry.created_at = False, time.monotonic()
            self.tracker.in_flight[new_uid] = entry
        s.reserved = [new_uid if u == info.uid else u for u in s.reserved]
        info.raw, info.uid = created, new_uid

    async def _patch_extended_status(self, pod: PodInfo, s: _State, claim: Json,
                                     node_name: str) -> None:
        """patchPodExtendedResourceClaimStatus: status.extendedResourceClaimStatus maps
        each container's extended resource to its request in the claim."""
        assert self.api is not None
        variant = s.ext_by_node.get(node_name)
        if variant is None or not variant.mappings:
            raise _BindError(f"nil or empty request mappings, no update of pod "
                             f"{pod.namespace}/{pod.name} ExtendedResourceClaimStatus")
        name = (claim.get("metadata") or {}).get("name")
        patch = {"status": {"extendedResourceClaimStatus": {
            "requestMappings": variant.mappings, "resourceClaimName": name}}}
        try:
            await self.api.request(
                "PATCH", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                body=patch, content_type="application/strategic-merge-patch+json")
        except Exception as e:  # noqa: BLE001 - the client raises its own error types
            raise _BindError(f"update pod {pod.namespace}/{pod.name} "
                             f"ExtendedResourceClaimStatus: {_api_message(e)}") from e

    def claim_timed_out(self, claim: Json) -> bool:
        """isClaimTimeout: allocated with binding conditions longer than bindingTimeout."""
        alloc = (claim.get("status") or {}).get("allocation") or {}
        stamp = alloc.get("allocationTimestamp")
        if not stamp or not _has_binding_conditions(alloc):
            return False
        try:
            at = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
        except ValueError:
            return False
        age = datetime.datetime.now(datetime.UTC) - at
        return age.total_seconds() > self.binding_timeout

    async def _wait_for_binding_conditions(self, s: _State) -> Status:
        """PreBind's wait (isPodReadyForBinding): until every device with binding
        conditions has them True in the claim's status.devices, one of its failure
        conditions is True (an error), or bindingTimeout passes."""
        deadline = time.monotonic() + self.binding_timeout
        while True:
            ready = True
            for info in s.claims:
                meta = info.raw.get("metadata") or {}
                claim = self.listers.get(ls.RESOURCE_CLAIM, str(meta.get("name")),
                                         str(meta.get("namespace")))
                if claim is None:
                    return Status.error(f'resourceclaim "{meta.get("name")}" not found')
                ok, failed = claim_ready_for_binding(claim)
                if failed:
                    return Status.error(f"device binding failed: {failed}")
                if not ok:
                    if self.claim_timed_out(claim):
                        return Status.error(
                            f"device binding timeout: claim={meta.get('name')}")
                    ready = False
            if ready:
                return SUCCESS
            if time.monotonic() >= deadline:
                return Status.error("device binding timeout: context deadline exceeded")
            await asyncio.sleep(BINDING_POLL_SECONDS)

    async def _bind_claim(self, info: _ClaimInfo, allocation: dict[str, Any] | None,
                          binding: dict[str, str]) -> dict[str, Any]:
        """bindClaim: finalizer, then status.allocation and `binding` (the pod or its
        PodGroup) in status.reservedFor."""
        assert self.api is not None
        meta = info.raw.get("metadata") or {}
        ns, name = meta.get("namespace"), meta.get("name")
        path = f"{RESOURCE_API}/namespaces/{ns}/resourceclaims/{name}"
        claim: dict[str, Any] = _copy(info.raw)
        refresh = False
        for _ in range(_CONFLICT_RETRIES):
            if refresh:
                claim = await self.api.request("GET", path)
            refresh = True
            cmeta = claim.setdefault("metadata", {})
            if cmeta.get("deletionTimestamp"):
                raise _BindError(f"claim {ns}/{name} got deleted in the meantime")
            status = claim.setdefault("status", {})
            try:
                if allocation is not None:
                    if status.get("allocation") is not None:
                        raise _BindError(f"claim {ns}/{name} got allocated elsewhere in the "
                                         "meantime")
                    if FINALIZER not in (cmeta.get("finalizers") or []):
                        cmeta["finalizers"] = [*(cmeta.get("finalizers") or []), FINALIZER]
                        try:
                            claim = await self.api.request("PUT", path, body=claim)
                        except Exception as e:  # noqa: BLE001 - the client's own types
                            if _is_conflict(e):
                                raise
                            raise _BindError(f"add finalizer to claim {ns}/{name}: "
                                             f"{_api_message(e)}") from e
                        status = claim.setdefault("status", {})
                    status["allocation"] = allocation
                if status.get("allocation") is None:
                    raise _BindError(f"claim {ns}/{name} got deallocated elsewhere in the "
                                     "meantime")
                if self.features.device_binding_and_status and not status["allocation"].get(
                        "allocationTimestamp"):
                    status["allocation"] = {**status["allocation"], "allocationTimestamp":
                                            _now()}
                status["reservedFor"] = [*(status.get("reservedFor") or []), dict(binding)]
                written = await self.api.request("PUT", f"{path}/status", body=claim)
            except _BindError:
                raise
            except Exception as e:  # noqa: BLE001 - the client raises its own error types
                if _is_conflict(e):
                    continue
                what = "add allocation and reservation to" if allocation is not None else \
                    "add reservation to"
                raise _BindError(f"{what} claim {ns}/{name}: {_api_message(e)}") from e
            entry = self.tracker.in_flight.get(info.uid)
            if entry is not None:
                entry.written_rv = str((written.get("metadata") or {}).get("resourceVersion")
                                       or "")
                entry.written = written
            return written
        raise _BindError(f"claim {ns}/{name}: still conflicting after {_CONFLICT_RETRIES} "
                         "attempts")


class _BindError(Exception):
    pass


def _api_message(e: BaseException) -> str:
    """An API error's text as client-go's StatusError gives it: the server's message,
    without the code and reason our client puts in front."""
    message = getattr(e, "message", None)
    return message if isinstance(message, str) and message else str(e)


def _is_conflict(e: BaseException) -> bool:
    return getattr(e, "status", None) == 409


def _copy(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy(v) for v in obj]
    return obj


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(args: Mapping[str, Any], key: str, default: float) -> float:
    raw = args.get(key)
    if raw is None:
        return default
    if not isinstance(raw, str) or not raw.endswith("s"):
        raise ArgsError(key, 'must be a duration in seconds such as "10s"')
    try:
        value = float(raw[:-1])
    except ValueError as e:
        raise ArgsError(key, 'must be a duration in seconds such as "10s"') from e
    if value < 0:
        raise ArgsError(key, "must not be negative")
    return value


def new(args: Mapping[str, Any] | None, handle: Handle) -> DynamicResources:
    """Args as DynamicResourcesArgs: filterTimeout (default 10s), bindingTimeout (600s)."""
    args = args or {}
    extra = sorted(set(args) - {"filterTimeout", "bindingTimeout"})
    if extra:
        raise ArgsError(extra[0], f"unknown field; {NAME} takes filterTimeout and "
                                  "bindingTimeout")
    timeouts = (_seconds(args, "filterTimeout", FILTER_TIMEOUT_SECONDS),
                _seconds(args, "bindingTimeout", BINDING_TIMEOUT_SECONDS))
    return DynamicResources(handle.listers, handle.api, timeouts=timeouts,
                            gates=handle.features, pod_groups=handle.pod_groups)

__all__ = ["NAME", "DynamicResources", "claim_name", "new"]
