"""Cluster events and queueing hints: what may make an unschedulable pod schedulable.

As kube-scheduler's fwk.ClusterEvent / fwk.QueueingHint (k8s.io/kube-scheduler/framework
types.go) and pkg/scheduler/framework/events.go. A plugin that rejects pods says, through
EnqueueExtensions.events_to_register, which cluster events may help a pod it rejected and,
per event, a hint function that looks at the changed object and answers Queue or
QueueSkip. The scheduling queue moves an unschedulable pod back only when one of the
plugins that rejected it answers Queue for the event.

A plugin that does not implement EnqueueExtensions is registered for every event (upstream
framework.go fillEventToPluginMap): it never leaves a pod stuck, it only retries it more
often than needed.

Objects passed to hint functions are JSON dicts as the API server sends them (a pod's
PodInfo for pod events); `old` is None for an Add, `new` is None for a Delete. Pure: no I/O.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polsched.framework import listers as ls
from polsched.framework.types import PodInfo
from polsched.objects import Json

log = logging.getLogger(__name__)


class ActionType(enum.IntFlag):
    """fwk.ActionType: what happened to the object; the UpdateXYZ values narrow Update."""

    NONE = 0
    ADD = 1 << 0
    DELETE = 1 << 1
    UPDATE_NODE_ALLOCATABLE = 1 << 2
    UPDATE_NODE_LABEL = 1 << 3
    # taints or spec.unschedulable
    UPDATE_NODE_TAINT = 1 << 4
    UPDATE_NODE_CONDITION = 1 << 5
    UPDATE_NODE_ANNOTATION = 1 << 6
    UPDATE_NODE_DECLARED_FEATURE = 1 << 7
    UPDATE_NODE_PREEMPTION_POLICY = 1 << 8
    UPDATE_POD_LABEL = 1 << 9
    UPDATE_POD_SCALE_DOWN = 1 << 10
    UPDATE_POD_SCALE_UP = 1 << 11
    UPDATE_POD_TOLERATION = 1 << 12
    UPDATE_POD_SCHEDULING_GATES_ELIMINATED = 1 << 13
    UPDATE_POD_GENERATED_RESOURCE_CLAIM = 1 << 14
    ALL = (1 << 15) - 1
    UPDATE = ALL & ~(ADD | DELETE)

    def go_name(self) -> str:
        """ActionType.String() of upstream, for event labels."""
        names = {ActionType.ALL: "All", ActionType.UPDATE: "Update", ActionType.NONE: ""}
        if self in names:
            return names[self]
        return "".join(p.capitalize() for p in (self.name or "").split("_"))


class Resource(enum.StrEnum):
    """fwk.EventResource, plus the kinds polsched's listers watch that upstream has no
    resource for (Namespace, Service, workload controllers, PDBs, PriorityClasses)."""

    POD = "Pod"                  # matches the three below
    ASSIGNED_POD = "AssignedPod"
    UNSCHEDULED_POD = "UnscheduledPod"
    TARGET_POD = "TargetPod"     # the queued pod itself was updated
    NODE = "Node"
    PERSISTENT_VOLUME = "PersistentVolume"
    PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
    CSI_NODE = "storage.k8s.io/CSINode"
    CSI_DRIVER = "storage.k8s.io/CSIDriver"
    VOLUME_ATTACHMENT = "storage.k8s.io/VolumeAttachment"
    CSI_STORAGE_CAPACITY = "storage.k8s.io/CSIStorageCapacity"
    STORAGE_CLASS = "storage.k8s.io/StorageClass"
    RESOURCE_CLAIM = "resource.k8s.io/ResourceClaim"
    RESOURCE_SLICE = "resource.k8s.io/ResourceSlice"
    DEVICE_CLASS = "resource.k8s.io/DeviceClass"
    # Upstream sees a rule's change as an update of the slices it patches (the
    # ResourceSlice tracker); here the rule is its own event resource.
    DEVICE_TAINT_RULE = "resource.k8s.io/DeviceTaintRule"
    NAMESPACE = "Namespace"
    SERVICE = "Service"
    REPLICATION_CONTROLLER = "ReplicationController"
    REPLICA_SET = "apps/ReplicaSet"
    STATEFUL_SET = "apps/StatefulSet"
    POD_DISRUPTION_BUDGET = "policy/PodDisruptionBudget"
    PRIORITY_CLASS = "scheduling.k8s.io/PriorityClass"
    POD_GROUP = "scheduling.k8s.io/PodGroup"
    COMPOSITE_POD_GROUP = "scheduling.k8s.io/CompositePodGroup"
    WILDCARD = "*"


# The listers' kinds as event resources.
LISTER_RESOURCES: Mapping[str, Resource] = {
    ls.NAMESPACE.name: Resource.NAMESPACE,
    ls.PERSISTENT_VOLUME.name: Resource.PERSISTENT_VOLUME,
    ls.PERSISTENT_VOLUME_CLAIM.name: Resource.PERSISTENT_VOLUME_CLAIM,
    ls.STORAGE_CLASS.name: Resource.STORAGE_CLASS,
    ls.CSI_NODE.name: Resource.CSI_NODE,
    ls.SERVICE.name: Resource.SERVICE,
    ls.REPLICATION_CONTROLLER.name: Resource.REPLICATION_CONTROLLER,
    ls.REPLICA_SET.name: Resource.REPLICA_SET,
    ls.STATEFUL_SET.name: Resource.STATEFUL_SET,
    ls.POD_DISRUPTION_BUDGET.name: Resource.POD_DISRUPTION_BUDGET,
    ls.PRIORITY_CLASS.name: Resource.PRIORITY_CLASS,
    ls.RESOURCE_CLAIM.name: Resource.RESOURCE_CLAIM,
    ls.RESOURCE_SLICE.name: Resource.RESOURCE_SLICE,
    ls.DEVICE_CLASS.name: Resource.DEVICE_CLASS,
    ls.DEVICE_TAINT_RULE.name: Resource.DEVICE_TAINT_RULE,
}

_POD_RESOURCES = frozenset({Resource.ASSIGNED_POD, Resource.UNSCHEDULED_POD,
                            Resource.TARGET_POD})


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    resource: Resource
    action: ActionType
    # Only for the special events (UnschedulableTimeout, ForceActivate...).
    custom_label: str = ""

    @property
    def label(self) -> str:
        return self.custom_label or f"{self.resource.value}{self.action.go_name()}"

    @property
    def is_wildcard(self) -> bool:
        """ClusterEventIsWildCard: moves every unschedulable pod."""
        return self.resource is Resource.WILDCARD and self.action == ActionType.ALL

    def matches(self, incoming: ClusterEvent) -> bool:
        """MatchClusterEvents: `incoming` is this registered event or a more specific one."""
        if self.is_wildcard:
            return True
        r = self.resource
        resource_ok = (r is Resource.WILDCARD or r is incoming.resource
                       or (r is Resource.POD and incoming.resource in _POD_RESOURCES))
        return bool(resource_ok and self.action & incoming.action
                    and incoming.action <= self.action)


class QueueingHint(enum.Enum):
    QUEUE_SKIP = 0
    QUEUE = 1


QUEUE = QueueingHint.QUEUE
QUEUE_SKIP = QueueingHint.QUEUE_SKIP

# (the queued pod, the old object, the new object) -> hint; raising counts as Queue.
QueueingHintFn = Callable[[PodInfo, Any, Any], QueueingHint]


@dataclass(frozen=True, slots=True)
class ClusterEventWithHint:
    event: ClusterEvent
    # None: Queue on every matching event.
    hint: QueueingHintFn | None = None


class EnqueueExtensions:
    """Optional on any plugin that rejects pods (fwk.EnqueueExtensions)."""

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        raise NotImplementedError


# Special event labels (framework/events.go).
SCHEDULE_ATTEMPT_FAILURE = "ScheduleAttemptFailure"
BACKOFF_COMPLETE = "BackoffComplete"
POP_FROM_BACKOFF_Q = "PopFromBackoffQ"
FORCE_ACTIVATE = "ForceActivate"
UNSCHEDULABLE_TIMEOUT = "UnschedulableTimeout"

ASSIGNED_POD_ADD = ClusterEvent(Resource.ASSIGNED_POD, ActionType.ADD)
ASSIGNED_POD_UPDATE = ClusterEvent(Resource.ASSIGNED_POD, ActionType.UPDATE)
ASSIGNED_POD_DELETE = ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE)
UNSCHEDULED_POD_ADD = ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.ADD)
UNSCHEDULED_POD_UPDATE = ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.UPDATE)
UNSCHEDULED_POD_DELETE = ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.DELETE)
NODE_ADD = ClusterEvent(Resource.NODE, ActionType.ADD)
NODE_DELETE = ClusterEvent(Resource.NODE, ActionType.DELETE)
POD_GROUP_ADD = ClusterEvent(Resource.POD_GROUP, ActionType.ADD)
POD_GROUP_UPDATE = ClusterEvent(Resource.POD_GROUP, ActionType.UPDATE)
POD_GROUP_DELETE = ClusterEvent(Resource.POD_GROUP, ActionType.DELETE)
COMPOSITE_POD_GROUP_ADD = ClusterEvent(Resource.COMPOSITE_POD_GROUP, ActionType.ADD)
COMPOSITE_POD_GROUP_UPDATE = ClusterEvent(Resource.COMPOSITE_POD_GROUP, ActionType.UPDATE)
COMPOSITE_POD_GROUP_DELETE = ClusterEvent(Resource.COMPOSITE_POD_GROUP, ActionType.DELETE)
EVENT_UNSCHEDULABLE_TIMEOUT = ClusterEvent(Resource.WILDCARD, ActionType.ALL,
                                           UNSCHEDULABLE_TIMEOUT)
EVENT_FORCE_ACTIVATE = ClusterEvent(Resource.WILDCARD, ActionType.ALL, FORCE_ACTIVATE)
# A policy was applied again (hot reload): its plugins changed, every pod may fit now.
EVENT_POLICY_CHANGE = ClusterEvent(Resource.WILDCARD, ActionType.ALL, "PolicyChange")

# What a plugin without EnqueueExtensions is registered for (UnrollWildCardResource): every
# resource, every action.
ALL_EVENTS: tuple[ClusterEventWithHint, ...] = (
    ClusterEventWithHint(ClusterEvent(Resource.WILDCARD, ActionType.ALL)),
)


# -- what changed (PodSchedulingPropertiesChange / NodeSchedulingPropertiesChange) ---------
def pod_update_events(new: PodInfo, old: PodInfo, target: bool) -> list[ClusterEvent]:
    """The UpdatePodXYZ events of a pod update; `target` when the pod is the queued pod
    itself (TargetPod), else AssignedPod or UnscheduledPod by its node."""
    if new.node_name:
        r = Resource.ASSIGNED_POD
    elif target:
        r = Resource.TARGET_POD
    else:
        r = Resource.UNSCHEDULED_POD
    actions: list[ActionType] = []
    if new.labels != old.labels:
        actions.append(ActionType.UPDATE_POD_LABEL)
    new_req, old_req = _requests(new), _requests(old)
    if any(k not in new_req or old_req[k] > new_req[k] for k in old_req):
        actions.append(ActionType.UPDATE_POD_SCALE_DOWN)
    if any(k not in old_req or new_req[k] > old_req[k] for k in new_req):
        actions.append(ActionType.UPDATE_POD_SCALE_UP)
    if not new.spec.get("schedulingGates") and old.spec.get("schedulingGates"):
        actions.append(ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)
    if len(new.spec.get("tolerations") or ()) != len(old.spec.get("tolerations") or ()):
        actions.append(ActionType.UPDATE_POD_TOLERATION)
    if _claim_statuses(new) != _claim_statuses(old):
        # extractPodGeneratedResourceClaimChange: the resourceclaim controller recorded
        # the claim it made from a template.
        actions.append(ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM)
    if not actions:
        actions.append(ActionType.UPDATE)
    return [ClusterEvent(r, a) for a in actions]


def _claim_statuses(pod: PodInfo) -> Any:
    return (pod.raw.get("status") or {}).get("resourceClaimStatuses") or []


def _requests(pod: PodInfo) -> Mapping[str, int]:
    req: Mapping[str, int] = pod.requests
    return req


def node_update_events(new: Json, old: Json) -> list[ClusterEvent]:
    """NodeSchedulingPropertiesChange: the UpdateNodeXYZ events of a node update (none when
    nothing a plugin reads changed, e.g. a heartbeat)."""
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    ospec, nspec = old.get("spec") or {}, new.get("spec") or {}
    ost, nst = old.get("status") or {}, new.get("status") or {}
    actions: list[ActionType] = []
    if bool(ospec.get("unschedulable")) != bool(nspec.get("unschedulable")):
        actions.append(ActionType.UPDATE_NODE_TAINT)
    if (ost.get("allocatable") or {}) != (nst.get("allocatable") or {}):
        actions.append(ActionType.UPDATE_NODE_ALLOCATABLE)
    if (om.get("labels") or {}) != (nm.get("labels") or {}):
        actions.append(ActionType.UPDATE_NODE_LABEL)
    if (ospec.get("taints") or []) != (nspec.get("taints") or []):
        actions.append(ActionType.UPDATE_NODE_TAINT)
    if _conditions(ost) != _conditions(nst):
        actions.append(ActionType.UPDATE_NODE_CONDITION)
    if (om.get("annotations") or {}) != (nm.get("annotations") or {}):
        actions.append(ActionType.UPDATE_NODE_ANNOTATION)
    # extractNodeFeaturesChange (NodeDeclaredFeatures is GA in v1.37): the list is sorted.
    if (ost.get("declaredFeatures") or []) != (nst.get("declaredFeatures") or []):
        actions.append(ActionType.UPDATE_NODE_DECLARED_FEATURE)
    # Deduplicated in order: unschedulable and taints are the same action.
    return [ClusterEvent(Resource.NODE, a) for a in dict.fromkeys(actions)]


def _conditions(status: Json) -> dict[str, str]:
    """extractNodeConditionsChange: condition types and statuses, without heartbeats."""
    return {str(c.get("type")): str(c.get("status")) for c in status.get("conditions") or ()
            if isinstance(c, Mapping)}


def object_events(kind: str, old: Json | None, new: Json | None) -> list[ClusterEvent]:
    """The event of a lister object's change (Add / Update / Delete)."""
    resource = LISTER_RESOURCES.get(kind)
    if resource is None:
        return []
    if old is None:
        action = ActionType.ADD
    elif new is None:
        action = ActionType.DELETE
    else:
        action = ActionType.UPDATE
    return [ClusterEvent(resource, action)]


def run_hint(plugin: str, fn: QueueingHintFn | None, pod: PodInfo, old: Any,
             new: Any) -> QueueingHint:
    """Call a hint function; an error counts as Queue so that no pod gets stuck."""
    if fn is None:
        return QUEUE
    try:
        return fn(pod, old, new)
    except Exception:  # noqa: BLE001 - a hint bug must not strand the pod
        log.exception("queueing hint of %s failed for %s", plugin, pod.key)
        return QUEUE


def hint_map(plugins: Mapping[str, object]) -> dict[str, tuple[ClusterEventWithHint, ...]]:
    """Plugin label -> its registered events (every event for a plugin without
    EnqueueExtensions)."""
    out: dict[str, tuple[ClusterEventWithHint, ...]] = {}
    for label, plugin in plugins.items():
        if isinstance(plugin, EnqueueExtensions):
            try:
                out[label] = tuple(plugin.events_to_register())
            except NotImplementedError:
                out[label] = ALL_EVENTS
        else:
            out[label] = ALL_EVENTS
    return out


__all__ = [
    "ALL_EVENTS", "ActionType", "ClusterEvent", "ClusterEventWithHint", "EnqueueExtensions",
    "QUEUE", "QUEUE_SKIP", "QueueingHint", "QueueingHintFn", "Resource", "hint_map",
    "node_update_events", "object_events", "pod_update_events", "run_hint",
]


def queue_always(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A hint that always says Queue (for events registered without a function)."""
    return QUEUE


_last_node: list[Any] = [None, None]  # (object, its NodeInfo)


def node_of(obj: Any) -> Any:
    """A node event's object as a NodeInfo without pods (None for None). One event's
    object is converted once for all the pods whose hints read it."""
    from polsched.framework.types import NodeInfo

    if obj is None or isinstance(obj, NodeInfo):
        return obj
    if _last_node[0] is obj:
        return _last_node[1]
    info = NodeInfo.from_json(obj)
    _last_node[0], _last_node[1] = obj, info
    return info


def event(resource: Resource, action: ActionType,
          hint: QueueingHintFn | None = None) -> ClusterEventWithHint:
    """Shorthand for plugins' events_to_register."""
    return ClusterEventWithHint(ClusterEvent(resource, action), hint)
