"""What the scheduling queue holds (upstream's framework.QueuedPodInfo and
QueuedPodGroupInfo, and the queue's enums): a pod with its scheduling history, a pod group
as one queue entity, where each waits, and how a cluster event requeues it. Plain data:
the parts of the queue (active, backoff, unschedulable, pod groups) share these."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from polsched.framework import events as ev
from polsched.framework.podgroups import split_key
from polsched.framework.types import PodInfo

# Plugin label -> the events it registered, with hints (framework.events.hint_map).
HintMap = Mapping[str, Sequence[ev.ClusterEventWithHint]]


class Location(enum.StrEnum):
    """Where a pod waits in the queue (SchedulingQueue.where)."""

    ACTIVE = "active"
    BACKOFF = "backoff"
    UNSCHEDULABLE = "unschedulable"
    # Among the unschedulable pods, kept out by a PreEnqueue plugin (SchedulingGates).
    GATED = "gated"
    # Popped: its attempt is under way.
    IN_FLIGHT = "in-flight"
    # A pod group member waiting for its group's cycle to end (pendingPodGroupPods).
    PENDING = "pending"
    # A pod group member whose PodGroup object is not observed yet (incompletePodGroupPods).
    INCOMPLETE = "incomplete"


class GroupOutcome(enum.Enum):
    """How a pod group's cycle ended, for SchedulingQueue.group_done
    (AddAttemptedPodGroupIfNeeded's status)."""

    SUCCESS = "success"
    REJECTED = "rejected"
    ERROR = "error"
    # The scheduler was paused: the group goes back as it was, uncounted.
    RESTORED = "restored"


class Strategy(enum.IntEnum):
    """queueingStrategy: what an event does for an unschedulable pod."""

    SKIP = 0
    AFTER_BACKOFF = 1
    IMMEDIATELY = 2


@dataclass(eq=False)
class QueuedPod:
    """framework.QueuedPodInfo: a pod and its scheduling history."""

    pod: PodInfo
    # When it last entered the queue (or failed); orders activeQ, backoff counts from it.
    timestamp: float
    attempts: int = 0
    unschedulable_count: int = 0
    consecutive_errors: int = 0
    # Plugins that rejected it in its last attempt (or gate it); empty after an error.
    rejected_by: frozenset[str] = frozenset()
    # The PreEnqueue plugin that keeps it out of activeQ ("" when not gated).
    gating_plugin: str = ""
    # When it was moved back by the 5-minute flush last.
    flush_timestamp: float = 0.0
    # perf_counter() when its first attempt began (InitialAttemptTimestamp; 0: none yet).
    initial_attempt: float = 0.0
    _seq: int = field(default=0, repr=False)
    # In flight: the in-flight event counter when it was popped.
    _events_from: int = field(default=0, repr=False)
    # In flight: deleted (or bound elsewhere) meanwhile; never requeued.
    _gone: bool = field(default=False, repr=False)
    # "namespace/name": the same for every version of the pod this entry holds.
    key: str = field(default="", init=False)
    # The unschedulable pool's index entries of this pod (UnschedulablePods.park).
    _indexed: tuple[str, ...] = field(default=(), repr=False)
    # Its key in the queue's dicts: the pod's key (a group's is prefixed).
    _qkey: str = field(default="", init=False, repr=False)

    def __post_init__(self) -> None:
        self.key = self._qkey = self.pod.key

    @property
    def uid(self) -> str:
        return self.pod.uid

    @property
    def priority(self) -> int:
        return self.pod.priority

    @property
    def gated(self) -> bool:
        return bool(self.gating_plugin)


# The queue's key of a pod group entity: never a pod's "namespace/name" (a namespace has
# no ":").
GROUP_PREFIX = "podgroup:"


@dataclass(eq=False)
class QueuedPodGroup:
    """framework.QueuedPodGroupInfo: one pod group as one queue entity. It waits in activeQ,
    backoffQ or the unschedulable pool as a whole, with its own history (attempts,
    unschedulable count, consecutive errors, timestamp, backoff), and holds its queued
    members, each an ordinary QueuedPod. Popped, its members are in flight in upstream's
    order (PodGroupMemberPodsOrderingFunc: higher priority, then more attempts, then the
    earlier timestamp, then the name); the cycle ends each member's attempt (done,
    add_unschedulable, add_backoff, restore) and then calls
    SchedulingQueue.group_done(key, outcome) (AddAttemptedPodGroupIfNeeded)."""

    key: str  # "namespace/podGroupName", or a CompositePodGroup root's "composite:ns/name"
    members: list[QueuedPod]
    timestamp: float = 0.0
    # The PodGroup's priority (PodGroupPriority): orders the group in activeQ.
    priority: int = 0
    attempts: int = 0
    unschedulable_count: int = 0
    consecutive_errors: int = 0
    # The group is gated when any member is (runPreEnqueuePlugins): that member's plugin.
    gating_plugin: str = ""
    flush_timestamp: float = 0.0
    _seq: int = field(default=0, repr=False)
    _indexed: tuple[str, ...] = field(default=(), repr=False)
    # BackoffExpiration: computed once from the counters, reset when they change.
    _expiry: float | None = field(default=None, repr=False)
    # Its tie-break in activeQ among equal priorities and timestamps (SchedulingQueue).
    _order: int = field(default=0, repr=False)
    _qkey: str = field(default="", init=False, repr=False)

    def __post_init__(self) -> None:
        self._qkey = GROUP_PREFIX + self.key

    @property
    def namespace(self) -> str:
        return split_key(self.key)[1]

    @property
    def name(self) -> str:
        return split_key(self.key)[2]

    @property
    def composite(self) -> bool:
        """Whether the group is a tree rooted at a CompositePodGroup."""
        return split_key(self.key)[0]

    @property
    def gated(self) -> bool:
        return bool(self.gating_plugin)

    @property
    def rejected_by(self) -> frozenset[str]:
        """Upstream never sets a group's own UnschedulablePlugins: a group in backoffQ
        waits in the error backoff heap, never popped early by PopFromBackoffQ."""
        return frozenset()

    def member(self, pod_key: str) -> QueuedPod | None:
        return next((m for m in self.members if m.key == pod_key), None)

    def sort(self) -> None:
        """PodGroupMemberPodsOrderingFunc."""
        self.members.sort(key=lambda m: (-m.pod.priority, -m.attempts, m.timestamp,
                                         m.pod.name))


Entry = QueuedPod | QueuedPodGroup


def pod_entry(d: Mapping[str, Entry], key: str) -> QueuedPod | None:
    """The pod entry of that pod key in one of the queue's dicts (never a group's)."""
    qp = d.get(key)
    return qp if isinstance(qp, QueuedPod) else None


def extra(entry: Entry) -> int:
    """The pods an entity counts beyond one (a group's other members)."""
    return len(entry.members) - 1 if isinstance(entry, QueuedPodGroup) else 0


def pods_of(entry: Entry) -> Sequence[QueuedPod]:
    return entry.members if isinstance(entry, QueuedPodGroup) else (entry,)
