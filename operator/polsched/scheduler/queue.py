"""SchedulingQueue: the pending pods of one scheduler, as kube-scheduler's PriorityQueue
(pkg/scheduler/backend/queue/scheduling_queue.go) with queueing hints, PreEnqueue and
PopFromBackoffQ.

Where a pod waits (at most one place, or in flight):
- activeQ: ready to schedule; highest priority first, then the earliest time it last
  entered the queue (PrioritySort on QueuedPodInfo.Timestamp);
- backoffQ: failed recently; leaves for activeQ when its backoff expires (1 s after the
  first failure, doubling up to 10 s, then rounded up to the next whole-second ordering
  window, KEP-5142). When activeQ is empty, a pod that was rejected by
  plugins (not one that failed with an error) is popped from backoffQ at once
  (PopFromBackoffQ);
- unschedulable: rejected by plugins, or gated by a PreEnqueue plugin. It moves back only
  on a cluster event for which one of the plugins that rejected it (its gating plugin for
  a gated pod) gives the hint Queue; a pod with no recorded plugin moves on any event. Every
  pod is flushed back after 5 minutes there (podMaxInUnschedulablePodsDuration), gated ones
  through PreEnqueue again.
Events that happen while a pod is in flight are kept and checked against its rejecting
plugins when it fails (determineSchedulingHintForInFlightPod), so no wake-up is lost.

A pod is identified by "namespace/name" in the queues and by uid in flight: a pod deleted
and recreated under the same name while its predecessor is in flight (a StatefulSet pod)
is a new pod and is queued at once.

Single-threaded asyncio: no locks, nothing awaits. The engine's scheduling loop pops with
pop_nowait(), is told by on_wake when a pod may have become poppable, and asks next_due()
when a queue found empty has one again. The clock is injectable for tests.
"""

from __future__ import annotations

import bisect
import enum
import functools
import heapq
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from polsched.framework import events as ev
from polsched.framework.interfaces import PreEnqueuePlugin
from polsched.framework.types import PodInfo
from polsched.objects import Json

DEFAULT_POD_INITIAL_BACKOFF = 1.0
DEFAULT_POD_MAX_BACKOFF = 10.0
DEFAULT_POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION = 300.0
# backoff_queue.go backoffQOrderingWindowDuration (KEP-5142, with PopFromBackoffQ): backoff
# ends on whole-second windows.
BACKOFF_ORDERING_WINDOW = 1.0
# How often the unschedulable pool is checked for pods that waited too long (Run:
# flushUnschedulableEntitiesLeftover every 30 s).
UNSCHEDULABLE_FLUSH_PERIOD = 30.0

# Plugin label -> the events it registered, with hints (framework.events.hint_map).
HintMap = Mapping[str, Sequence[ev.ClusterEventWithHint]]

_Method = TypeVar("_Method", bound=Callable[..., Any])


def _changes_sizes(method: _Method) -> _Method:
    """A method that may change the queue's sizes: `on_sizes` is called after it, so the
    queue reports scheduler_pending_pods itself instead of each of its callers."""

    @functools.wraps(method)
    def changing(self: SchedulingQueue, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        finally:
            if self.on_sizes is not None:
                self.on_sizes()

    return cast(_Method, changing)


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
    _seq: int = field(default=0, repr=False)
    # In flight: the in-flight event counter when it was popped.
    _events_from: int = field(default=0, repr=False)
    # In flight: deleted (or bound elsewhere) meanwhile; never requeued.
    _gone: bool = field(default=False, repr=False)
    # "namespace/name": the same for every version of the pod this entry holds.
    key: str = field(default="", init=False)
    # The unschedulable pool's index entries of this pod (SchedulingQueue._index_add).
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
_GROUP_PREFIX = "podgroup:"


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

    key: str  # "namespace/podGroupName"
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
        self._qkey = _GROUP_PREFIX + self.key

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def name(self) -> str:
        return self.key.partition("/")[2]

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


_Entry = QueuedPod | QueuedPodGroup


@dataclass(frozen=True, slots=True)
class _InFlightEvent:
    n: int
    event: ev.ClusterEvent
    old: Any
    new: Any
    # A TargetPod update: only for the pod with this uid.
    uid: str = ""


class EventJournal:
    """The cluster events kept for pods in flight (inFlightEvents), shared by the queues
    of one engine. kube-scheduler has one queue for all its profiles, so an event is kept
    once; with a queue per policy, keeping it in each queue cost O(policies) per event
    (every bind's watch event, with 50 policies 8% of the operator's CPU: issue 15,
    many-policies). A queue numbers its own events (policy changes, updates of a pod in
    flight) from the same counter, and reads the journal's events after its pod's pop
    through its own plugins' interest, as if it had kept them itself."""

    TRIM_AT = 256

    def __init__(self) -> None:
        self.n = 0
        self._events: list[_InFlightEvent] = []
        self._queues: list[SchedulingQueue] = []
        self._trim_at = self.TRIM_AT

    def next(self) -> int:
        self.n += 1
        return self.n

    def append(self, event: ev.ClusterEvent, old: Any, new: Any) -> None:
        self.n += 1
        self._events.append(_InFlightEvent(self.n, event, old, new))
        if len(self._events) >= self._trim_at:
            self._trim()

    def since(self, n: int) -> list[_InFlightEvent]:
        """The events after number `n`, oldest first."""
        events = self._events
        return events[bisect.bisect_right(events, n, key=lambda e: e.n):]

    def __len__(self) -> int:
        return len(self._events)

    def _trim(self) -> None:
        """Forget the events that no pod in flight in any queue can still need; then
        trim again when the journal has doubled (amortised O(1) per event)."""
        froms = [n for n in (q.oldest_in_flight() for q in self._queues) if n is not None]
        if not froms:
            self._events.clear()
        else:
            del self._events[:bisect.bisect_right(self._events, min(froms),
                                                  key=lambda e: e.n)]
        self._trim_at = max(self.TRIM_AT, 2 * len(self._events))


class SchedulingQueue:
    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        initial_backoff: float = DEFAULT_POD_INITIAL_BACKOFF,
        max_backoff: float = DEFAULT_POD_MAX_BACKOFF,
        max_in_unschedulable: float = DEFAULT_POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION,
        pop_from_backoff: bool = True,
        backoff_window: float = BACKOFF_ORDERING_WINDOW,
        journal: EventJournal | None = None,
    ) -> None:
        self._clock = clock
        # Shared with the engine's other queues (EventJournal): move(journaled=True) then
        # keeps nothing itself.
        self._journal = journal
        if journal is not None:
            journal._queues.append(self)
        self._backoff_window = backoff_window if pop_from_backoff else 0.0
        # Upstream truncates backoff times to windows of the wall clock (time.Truncate),
        # and flushes backoffQ on the wall clock's second boundaries: with the monotonic
        # clock, the windows are aligned the same way (time.time() - time.monotonic() is
        # where monotonic time 0 falls on the wall clock). Another clock (tests): none.
        self._wall_offset: Callable[[], float] = (
            _monotonic_to_wall if clock is time.monotonic else _no_offset)
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._max_in_unschedulable = max_in_unschedulable
        self._pop_from_backoff = pop_from_backoff
        self._seq = 0
        # heap of (-priority, timestamp, order, seq, key); stale entries skipped on pop. A
        # pod's order is its seq; a group's is fixed when its timestamp is set, so that a
        # member joining it does not send it behind entities of the same timestamp.
        self._active_heap: list[tuple[int, float, int, int, str]] = []
        # Entities by queue key: a pod ("namespace/name") or a pod group ("podgroup:...").
        self._active: dict[str, _Entry] = {}
        # heap of (expiry, -priority, timestamp, seq, key)
        self._backoff_heap: list[tuple[float, int, float, int, str]] = []
        self._backoff: dict[str, _Entry] = {}
        self._unschedulable: dict[str, _Entry] = {}
        # The same dict, read-only for the engine: a queue with no unschedulable pod has
        # nothing for a journaled move() to do, and the engine skips the call (every
        # bind's event visits every policy's queue: 250 000 calls with 50 policies).
        self.unschedulable_pods: Mapping[str, _Entry] = self._unschedulable
        self._gated = 0
        # A group's members beyond its first, per queue (sizes() in O(1)): a group's
        # members only change while it is out of the queues.
        self._extra = {Location.ACTIVE: 0, Location.BACKOFF: 0, Location.UNSCHEDULABLE: 0,
                       Location.GATED: 0}
        # In flight, by uid; and the uid in flight per key.
        self._in_flight: dict[str, QueuedPod] = {}
        self._in_flight_keys: dict[str, str] = {}
        # Events seen while pods were in flight (inFlightEvents), oldest first.
        self._events: list[_InFlightEvent] = []
        self._event_n = 0
        self.scheduling_cycle = 0
        self._next_leftover_flush = 0.0
        self._pre_enqueue: tuple[PreEnqueuePlugin, ...] = ()
        # None until configured: every plugin is registered for every event.
        self._hints: HintMap | None = None
        # event -> the plugins that registered a matching event (memo, per configuration)
        self._interest: dict[ev.ClusterEvent, frozenset[str]] = {}
        # rejecting plugin (or "*") -> keys of the parked pods it rejected
        self._index: dict[str, set[str]] = {}
        # Called whenever a pod may have become poppable: the engine's scheduling loop
        # gives the policy a turn (a queue found empty is polled again at next_due()).
        self.on_wake: Callable[[], None] | None = None
        # Called after each method that may change sizes() or group_sizes() (the owner
        # sets its pending-pods gauges from them, when they changed).
        self.on_sizes: Callable[[], None] | None = None
        # The pod group a pod belongs to ("namespace/name"), None for a plain pod (set by
        # configure when the pipeline runs GangScheduling on a cluster serving PodGroups).
        self._group_of: Callable[[PodInfo], str | None] | None = None
        # The PodGroup object of a group key (None: not observed yet); None: every group
        # exists, with its first member's priority (tests without a cache).
        self._pod_group: Callable[[str], Json | None] | None = None
        # Groups queued in activeQ, backoffQ or the unschedulable pool, by group key; and
        # the group of each of their members, by pod key.
        self._groups: dict[str, QueuedPodGroup] = {}
        self._member_of: dict[str, QueuedPodGroup] = {}
        # The groups in their pod-group cycle, and the members that arrived or came back
        # meanwhile (pendingPodGroupPods), merged back by group_done.
        self._groups_in_flight: dict[str, QueuedPodGroup] = {}
        self._group_pending: dict[str, dict[str, QueuedPod]] = {}
        # Members whose PodGroup is not observed yet (incompletePodGroupPods).
        self._incomplete: dict[str, dict[str, QueuedPod]] = {}
        # The group pop_nowait popped last, until pop_group claims it.
        self._popped_group: QueuedPodGroup | None = None

    # -- the policy's plugins -------------------------------------------------------------
    def configure(self, pre_enqueue: Sequence[PreEnqueuePlugin] = (),
                  hints: HintMap | None = None,
                  group_of: Callable[[PodInfo], str | None] | None = None,
                  pod_group: Callable[[str], Json | None] | None = None) -> None:
        """The pipeline's PreEnqueue plugins and queueing hints (on every apply), how to
        tell a pod group's members (None: every pod is scheduled alone) and how to find a
        group's PodGroup object by its key (None: every group counts as observed)."""
        self._group_of = group_of
        self._pod_group = pod_group
        self._pre_enqueue = tuple(pre_enqueue)
        self._hints = dict(hints) if hints is not None else None
        self._interest.clear()
        self._reindex()
        if group_of is None:
            self._dissolve_groups()
        else:
            self._regroup()

    def _regroup(self) -> None:
        """Pods queued alone that are pod group members now (the pipeline runs
        GangScheduling since this configure) join their groups."""
        assert self._group_of is not None
        now = self._clock()
        for d in (self._active, self._backoff, self._unschedulable):
            for qp in [e for e in d.values() if isinstance(e, QueuedPod)]:
                if self._group_of(qp.pod) is not None:
                    self._take(qp)
                    self._add_member(qp, now)

    def _dissolve_groups(self) -> None:
        """The pipeline no longer schedules pod groups (GangScheduling switched off): the
        members of queued groups, and those held for a PodGroup, are queued as pods (a
        group in its cycle ends it first; its members then come back as pods)."""
        members: list[QueuedPod] = []
        for g in list(self._groups.values()):
            self._take(g)
            members.extend(g.members)
        self._groups.clear()
        self._member_of.clear()
        for held in self._incomplete.values():
            members.extend(held.values())
        self._incomplete.clear()
        for qp in members:
            if qp.key not in self._in_flight_keys:
                self._move_to_active(qp)

    # -- introspection ----------------------------------------------------------------
    def __len__(self) -> int:
        """How many pods wait in activeQ, backoffQ and the unschedulable pool (a group
        counts its members)."""
        return sum(self.sizes())

    def __contains__(self, key: object) -> bool:
        """A pod of that key waits in activeQ, backoffQ or the unschedulable pool (alone or
        in its queued group), or waits for its group's cycle or PodGroup."""
        if key in self._active or key in self._backoff or key in self._unschedulable:
            return True
        if not isinstance(key, str):
            return False
        return key in self._member_of or self._held(key) is not None

    def _held(self, key: str) -> tuple[Location, QueuedPod] | None:
        """A member waiting for its group's cycle to end, or for its PodGroup."""
        for loc, area in ((Location.PENDING, self._group_pending),
                          (Location.INCOMPLETE, self._incomplete)):
            for held in area.values():
                qp = held.get(key)
                if qp is not None:
                    return loc, qp
        return None

    def _location(self, entry: _Entry) -> Location | None:
        k = entry._qkey
        if k in self._unschedulable:
            return Location.GATED if entry.gated else Location.UNSCHEDULABLE
        if k in self._active:
            return Location.ACTIVE
        if k in self._backoff:
            return Location.BACKOFF
        return None

    def where(self, key: str) -> Location | None:
        """Where the pod of that key waits (a group member: where its group waits); None:
        not queued."""
        g = self._member_of.get(key)
        if g is not None:
            return self._location(g)
        qp = self._unschedulable.get(key)
        if qp is not None:
            return Location.GATED if qp.gated else Location.UNSCHEDULABLE
        for name, d in ((Location.ACTIVE, self._active), (Location.BACKOFF, self._backoff),
                        (Location.IN_FLIGHT, self._in_flight_keys)):
            if key in d:
                return name
        held = self._held(key)
        return held[0] if held is not None else None

    def get(self, key: str) -> QueuedPod | None:
        """The queued (or in-flight) pod of that key."""
        g = self._member_of.get(key)
        if g is not None:
            return g.member(key)
        for d in (self._active, self._backoff, self._unschedulable):
            qp = d.get(key)
            if isinstance(qp, QueuedPod):
                return qp
        uid = self._in_flight_keys.get(key)
        if uid is not None:
            return self._in_flight.get(uid)
        held = self._held(key)
        return held[1] if held is not None else None

    def gated_by(self, key: str) -> str:
        """The PreEnqueue plugin keeping the pod of that key out of activeQ: a member's is
        its group's (the group is gated when any member is); "" when not gated."""
        entry: _Entry | None = self._member_of.get(key) or self.get(key)
        return entry.gating_plugin if entry is not None else ""

    def group(self, key: str) -> QueuedPodGroup | None:
        """The pod group entity of that group key ("namespace/name"), queued or in its
        cycle."""
        return self._groups.get(key) or self._groups_in_flight.get(key)

    def sizes(self) -> tuple[int, int, int, int]:
        """How many pods wait in activeQ, backoffQ, unschedulable and gated, a group
        counting its members as upstream's QueuedEntitiesRecorder does (O(1), for the
        scheduler_pending_pods gauge)."""
        x = self._extra
        return (len(self._active) + x[Location.ACTIVE],
                len(self._backoff) + x[Location.BACKOFF],
                len(self._unschedulable) - self._gated + x[Location.UNSCHEDULABLE],
                self._gated + x[Location.GATED])

    def group_sizes(self) -> tuple[int, int]:
        """How many members wait for their group's cycle to end (pending) and for their
        PodGroup (incomplete): scheduler_pending_pods{queue="pending"|"incomplete"}."""
        return (sum(len(h) for h in self._group_pending.values()),
                sum(len(h) for h in self._incomplete.values()))

    def keys(self) -> set[str]:
        """Every pod waiting or in flight."""
        keys = {k for d in (self._active, self._backoff, self._unschedulable) for k in d
                if not k.startswith(_GROUP_PREFIX)}
        keys.update(self._member_of, self._in_flight_keys)
        for area in (self._group_pending, self._incomplete):
            for held in area.values():
                keys.update(held)
        return keys

    def in_flight_events(self) -> int:
        return len(self._events)

    def oldest_in_flight(self) -> int | None:
        """The event number at the earliest pop of the pods in flight (None: none)."""
        if not self._in_flight:
            return None
        return min(p._events_from for p in self._in_flight.values())

    # -- backoff --------------------------------------------------------------------------
    def backoff_duration(self, qp: _Entry) -> float:
        """backoff_queue.go calculateBackoffDuration: 1 s, 2 s, 4 s, ... up to 10 s; for a
        pod group the maximum grows with the square root of its queued members."""
        count = qp.consecutive_errors or qp.unschedulable_count
        if count == 0:
            return 0.0
        max_backoff = self._max_backoff
        if isinstance(qp, QueuedPodGroup) and len(qp.members) > 1:
            max_backoff *= math.sqrt(len(qp.members))
        d: float = self._initial_backoff * float(2 ** min(count - 1, 62))
        return min(d, max_backoff)

    def backoff_expiry(self, qp: _Entry) -> float:
        """When the pod stops backing off. With PopFromBackoffQ, upstream truncates the
        expiry to its ordering window and the pod backs off while that window has not
        passed (alignToWindow, isEntityBackingoff): it leaves at the start of the window
        after the one its backoff ends in, 1-2 s after a first failure. A group's expiry
        is computed once and kept until its counters change (BackoffExpiration)."""
        if isinstance(qp, QueuedPodGroup) and qp._expiry is not None:
            return qp._expiry
        duration = self.backoff_duration(qp)
        t = qp.timestamp + duration
        w = self._backoff_window
        if duration and w > 0:
            off = self._wall_offset()
            t = (math.floor((t + off) / w) + 1) * w - off
        if isinstance(qp, QueuedPodGroup) and duration:
            qp._expiry = t
        return t

    def _backing_off(self, qp: _Entry, now: float) -> bool:
        return self.backoff_expiry(qp) > now

    # -- PreEnqueue ---------------------------------------------------------------------
    def gating_plugin(self, pod: PodInfo, first: str = "") -> str:
        """runPreEnqueuePlugins (scheduling_queue.go), the queue's one PreEnqueue runner:
        the name of the first plugin that does not let `pod` in ("" when all do), trying
        `first` (the plugin that gated it last time) before the others. The engine asks it
        too, for a pod it keeps out of the queue (a namespace the policy's
        namespaceSelector does not select), to leave a gated pod without a warning."""
        plugins = self._pre_enqueue
        if first:
            plugins = (*(p for p in plugins if p.name == first),
                       *(p for p in plugins if p.name != first))
        for p in plugins:
            if not p.pre_enqueue(pod).ok:
                return p.name
        return ""

    def _run_pre_enqueue(self, qp: _Entry) -> None:
        """PreEnqueue for a queued pod: the first plugin that does not succeed gates it
        (and counts as a rejecting plugin). For a group, every member runs it and the
        group is gated when any member is (runPreEnqueuePlugins: the last gated member's
        plugin)."""
        if isinstance(qp, QueuedPodGroup):
            gate = ""
            for m in qp.members:
                self._run_pre_enqueue(m)
                gate = m.gating_plugin or gate
            qp.gating_plugin = gate
            return
        gate = qp.gating_plugin = self.gating_plugin(qp.pod, qp.gating_plugin)
        if gate:
            qp.rejected_by = qp.rejected_by | {gate}

    # -- moving between the queues --------------------------------------------------------
    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _park(self, qp: _Entry) -> None:
        """Into the unschedulable pool (gated or not)."""
        if qp._qkey in self._unschedulable:
            self._unpark(qp._qkey)
        self._unschedulable[qp._qkey] = qp
        self._extra[Location.GATED if qp.gated else Location.UNSCHEDULABLE] += _extra(qp)
        if qp.gated:
            self._gated += 1
        self._index_add(qp)

    def _unpark(self, key: str) -> _Entry | None:
        qp = self._unschedulable.pop(key, None)
        if qp is not None:
            self._extra[Location.GATED if qp.gated else Location.UNSCHEDULABLE] -= _extra(qp)
            if qp.gated:
                self._gated -= 1
            for plugin in qp._indexed:
                keys = self._index.get(plugin)
                if keys is not None:
                    keys.discard(key)
            qp._indexed = ()
        return qp

    def _index_add(self, qp: _Entry) -> None:
        """Index the parked pod by its rejecting plugins, so that an event visits only
        the pods one of whose plugins registered it; a pod with no rejecting plugin, or one
        this pipeline does not know (an extender), is visited by every event ("*"). A
        group is indexed by every member's plugins (isEntityWorthRequeuing asks each)."""
        hints = self._hints
        if isinstance(qp, QueuedPodGroup):
            rejections = [m.rejected_by for m in qp.members]
        else:
            rejections = [qp.rejected_by]
        if hints is None or any(not r or any(p not in hints for p in r)
                                for r in rejections):
            qp._indexed = ("*",)
        else:
            qp._indexed = tuple(frozenset().union(*rejections))
        for plugin in qp._indexed:
            self._index.setdefault(plugin, set()).add(qp._qkey)

    def _reindex(self) -> None:
        self._index.clear()
        for qp in self._unschedulable.values():
            self._index_add(qp)

    def _take(self, qp: _Entry) -> Location | None:
        """Take a waiting entity out of its queue (deleteFromAnyQueue); where it was."""
        loc = self._location(qp)
        k = qp._qkey
        if loc is Location.ACTIVE:
            del self._active[k]  # its heap entry goes stale
            self._extra[Location.ACTIVE] -= _extra(qp)
        elif loc is Location.BACKOFF:
            del self._backoff[k]
            self._extra[Location.BACKOFF] -= _extra(qp)
        elif loc is not None:
            self._unpark(k)
        qp._seq = self._next_seq()
        return loc

    def _move_to_active(self, qp: _Entry, from_backoff: bool = False) -> bool:
        """moveToActiveQ: PreEnqueue first (not again for a pod leaving backoffQ, which ran
        it on entering); a gated pod goes to the unschedulable pool instead."""
        if not from_backoff:
            self._run_pre_enqueue(qp)
        if qp.gated:
            self._park(qp)
            return False
        self._unpark(qp._qkey)
        qp._seq = self._next_seq()
        self._active[qp._qkey] = qp
        self._extra[Location.ACTIVE] += _extra(qp)
        order = qp._order if isinstance(qp, QueuedPodGroup) else qp._seq
        heapq.heappush(self._active_heap,
                       (-qp.priority, qp.timestamp, order, qp._seq, qp._qkey))
        self._wake()
        return True

    def _move_to_backoff(self, qp: _Entry) -> bool:
        """moveToBackoffQ: with PopFromBackoffQ, PreEnqueue runs on entering backoffQ."""
        if self._pop_from_backoff:
            self._run_pre_enqueue(qp)
            if qp.gated:
                self._park(qp)
                return False
        self._unpark(qp._qkey)
        qp._seq = self._next_seq()
        self._backoff[qp._qkey] = qp
        self._extra[Location.BACKOFF] += _extra(qp)
        heapq.heappush(self._backoff_heap, (self.backoff_expiry(qp), -qp.priority,
                                            qp.timestamp, qp._seq, qp._qkey))
        self._wake()
        return True

    def _requeue(self, qp: _Entry, strategy: Strategy, now: float) -> Location:
        """requeueEntityWithQueueingStrategy; returns where the pod went."""
        if strategy is Strategy.SKIP:
            self._park(qp)
            return Location.UNSCHEDULABLE
        if strategy is Strategy.AFTER_BACKOFF and self._backing_off(qp, now):
            return Location.BACKOFF if self._move_to_backoff(qp) else Location.UNSCHEDULABLE
        return Location.ACTIVE if self._move_to_active(qp) else Location.UNSCHEDULABLE

    def _wake(self) -> None:
        if self.on_wake is not None:
            self.on_wake()

    # -- queueing hints -------------------------------------------------------------------
    def worth_requeuing(self, qp: _Entry, event: ev.ClusterEvent, old: Any,
                        new: Any) -> Strategy:
        """isPodWorthRequeuing: Queue from one of the pod's rejecting plugins for this
        event; a pod with no rejecting plugin (an error, or only extenders rejected it)
        moves on any event. A group moves when any member would
        (isEntityWorthRequeuing)."""
        if isinstance(qp, QueuedPodGroup):
            for m in qp.members:
                if self.worth_requeuing(m, event, old, new) is not Strategy.SKIP:
                    return Strategy.AFTER_BACKOFF
            return Strategy.SKIP
        rejected = qp.rejected_by
        if not rejected:
            return Strategy.AFTER_BACKOFF
        if event.is_wildcard:
            if isinstance(new, PodInfo) and new.uid != qp.uid:
                return Strategy.SKIP  # a wildcard event for another pod
            return Strategy.AFTER_BACKOFF
        for plugin in rejected:
            registered = self._registered(plugin)
            if registered is None:
                # Not a plugin of this pipeline (any more): do not strand the pod.
                return Strategy.AFTER_BACKOFF
            for eh in registered:
                if not eh.event.matches(event):
                    continue
                if ev.run_hint(plugin, eh.hint, qp.pod, old, new) is ev.QUEUE:
                    return Strategy.AFTER_BACKOFF
        return Strategy.SKIP

    def _registered(self, plugin: str) -> Sequence[ev.ClusterEventWithHint] | None:
        if self._hints is None:
            return ev.ALL_EVENTS
        return self._hints.get(plugin)

    def _interested(self, event: ev.ClusterEvent) -> frozenset[str] | None:
        """The plugins that registered an event matching `event`; None: every plugin
        (unconfigured, or a wildcard event)."""
        if event.is_wildcard or self._hints is None:
            return None
        got = self._interest.get(event)
        if got is None:
            got = frozenset(p for p, registered in self._hints.items()
                            if any(eh.event.matches(event) for eh in registered))
            self._interest[event] = got
        return got

    # -- what the cache's events do -------------------------------------------------------
    @_changes_sizes
    def add(self, pod: PodInfo) -> None:
        """A pending pod was added or updated (Add / Update)."""
        key = pod.key
        now = self._clock()
        uid = self._in_flight_keys.get(key)
        if uid is not None:
            flying = self._in_flight[uid]
            if uid == pod.uid:
                # Kept for when it fails: the update may be what it needed.
                prev = flying.pod
                if _pod_updated(prev.raw, pod.raw):
                    for e in ev.pod_update_events(pod, prev, target=True):
                        self._record(e, prev, pod, uid)
                flying.pod = pod
                return
            # Its predecessor is in flight: that one is gone, this one is new.
            flying._gone = True
        group = self._group_of(pod) if self._group_of is not None else None
        if group is not None:
            self._add_group_pod(group, pod, now)
            return
        for d in (self._active, self._backoff):
            qp = _pod_entry(d, key)
            if qp is None:
                continue
            if qp.uid != pod.uid:
                del d[key]
                break
            prev_priority = qp.pod.priority
            qp.pod = pod
            if d is self._active and prev_priority != pod.priority:
                self._move_to_active(qp, from_backoff=True)  # the old heap entry goes stale
            return
        qp = _pod_entry(self._unschedulable, key)
        if qp is not None:
            if qp.uid != pod.uid:
                self._unpark(key)
            else:
                self._updated_parked(qp, qp, pod, now)
                return
        self._move_to_active(QueuedPod(pod, timestamp=now))

    def _updated_parked(self, entry: _Entry, qp: QueuedPod, pod: PodInfo,
                        now: float) -> None:
        """A pod of a parked entity (itself, or a member of a parked group) was updated:
        its update events may move the entity (Update: isEntityWorthRequeuing)."""
        prev = qp.pod
        qp.pod = pod
        if not _pod_updated(prev.raw, pod.raw):
            return  # status only (our own condition patch): nothing new
        for e in ev.pod_update_events(pod, prev, target=True):
            strategy = self.worth_requeuing(entry, e, prev, pod)
            if strategy is Strategy.SKIP:
                continue
            self._unpark(entry._qkey)
            if self._requeue(entry, strategy, now) is not Location.UNSCHEDULABLE:
                break

    def _add_group_pod(self, group: str, pod: PodInfo, now: float) -> None:
        """Add / Update of a pod group member that is not in flight."""
        key = pod.key
        for area in (self._group_pending, self._incomplete):
            held = area.get(group)
            qp = held.get(key) if held is not None else None
            if qp is None:
                continue
            assert held is not None
            if qp.uid == pod.uid:
                qp.pod = pod
                return
            del held[key]  # a predecessor of the same name: this one is new
            break
        g = self._member_of.get(key)
        if g is not None:
            qp = g.member(key)
            if qp is not None and qp.uid == pod.uid:
                if self._location(g) in (Location.UNSCHEDULABLE, Location.GATED):
                    self._updated_parked(g, qp, pod, now)
                else:
                    qp.pod = pod  # activeQ / backoffQ: updated in place
                return
            self._remove_member(g, key)
        self._add_member(QueuedPod(pod, timestamp=now), now)

    def _add_member(self, qp: QueuedPod, now: float) -> None:
        """addPodGroupMember: a member (new, or back from its attempt) joins its group: to
        incompletePodGroupPods while the PodGroup is not observed; into the queued group
        wherever it waits, requeued with that queue's strategy; to pendingPodGroupPods
        while the group is in its cycle; else a new group entity in activeQ."""
        assert self._group_of is not None
        key = self._group_of(qp.pod)
        assert key is not None
        if self._pod_group is not None and self._pod_group(key) is None:
            self._incomplete.setdefault(key, {})[qp.key] = qp
            return
        g = self._groups.get(key)
        if g is not None:
            loc = self._take(g)
            g.members.append(qp)
            self._member_of[qp.key] = g
            strategy = (Strategy.IMMEDIATELY if loc is Location.ACTIVE
                        else Strategy.AFTER_BACKOFF if loc is Location.BACKOFF
                        else Strategy.SKIP)
            self._requeue(g, strategy, now)
            return
        if key in self._groups_in_flight:
            self._group_pending.setdefault(key, {})[qp.key] = qp
            return
        g = QueuedPodGroup(key, [qp], timestamp=qp.timestamp,
                           priority=self._group_priority(key, qp), _order=self._next_seq())
        self._groups[key] = g
        self._member_of[qp.key] = g
        self._move_to_active(g)

    def _group_priority(self, key: str, first: QueuedPod) -> int:
        """PodGroupPriority: the PodGroup's spec.priority (0 when unset)."""
        if self._pod_group is None:
            return first.pod.priority
        obj = self._pod_group(key) or {}
        priority = (obj.get("spec") or {}).get("priority")
        return priority if isinstance(priority, int) else 0

    def _remove_member(self, g: QueuedPodGroup, key: str) -> None:
        """deletePodGroupMember: the member leaves its queued group; the group is requeued
        with the strategy of the queue it was in, or dropped when empty."""
        loc = self._take(g)
        g.members = [m for m in g.members if m.key != key]
        self._member_of.pop(key, None)
        if not g.members:
            self._groups.pop(g.key, None)
            return
        strategy = (Strategy.IMMEDIATELY if loc is Location.ACTIVE
                    else Strategy.AFTER_BACKOFF if loc is Location.BACKOFF
                    else Strategy.SKIP)
        self._requeue(g, strategy, self._clock())

    @_changes_sizes
    def pod_group_added(self, key: str) -> None:
        """AddPodGroup: the PodGroup of that key is observed; its members waiting for it
        (incompletePodGroupPods) join the queue."""
        held = self._incomplete.pop(key, None)
        if not held:
            return
        now = self._clock()
        for qp in held.values():
            self._add_member(qp, now)

    @_changes_sizes
    def pod_group_deleted(self, key: str) -> None:
        """DeletePodGroup: the members of that group, queued or held for its cycle, wait
        for a PodGroup again (incompletePodGroupPods)."""
        moved: list[QueuedPod] = list(self._group_pending.pop(key, {}).values())
        g = self._groups.pop(key, None)
        if g is not None:
            self._take(g)
            for m in g.members:
                self._member_of.pop(m.key, None)
            moved.extend(g.members)
        if moved:
            held = self._incomplete.setdefault(key, {})
            for qp in moved:
                held[qp.key] = qp

    @_changes_sizes
    def delete(self, key: str, uid: str | None = None) -> None:
        """The pod was deleted, bound (by us or elsewhere) or finished: it leaves. With
        `uid`, only that pod (not a successor under the same name)."""
        for area in (self._group_pending, self._incomplete):
            for held in area.values():
                qp = held.get(key)
                if qp is not None and (uid is None or qp.uid == uid):
                    del held[key]
        g = self._member_of.get(key)
        if g is not None:
            member = g.member(key)
            if member is not None and (uid is None or member.uid == uid):
                self._remove_member(g, key)
        for d in (self._active, self._backoff):
            qp = _pod_entry(d, key)
            if qp is not None and (uid is None or qp.uid == uid):
                del d[key]
        qp = _pod_entry(self._unschedulable, key)
        if qp is not None and (uid is None or qp.uid == uid):
            self._unpark(key)
        flying_uid = self._in_flight_keys.get(key)
        if flying_uid is not None and (uid is None or flying_uid == uid):
            self._in_flight[flying_uid]._gone = True

    @_changes_sizes
    def move(self, event: ev.ClusterEvent, old: Any = None, new: Any = None,
             pre_check: Callable[[PodInfo], bool] | None = None,
             journaled: bool = False) -> int:
        """MoveAllToActiveOrBackoffQueue: the unschedulable pods this event may help go back
        (to backoffQ while backing off). Returns how many moved. `journaled`: the event is
        in the shared EventJournal already, so it is not kept here for the pods in flight."""
        if not self._unschedulable:
            if journaled:
                return 0
            # Nothing to move: only keep the event for the pods in flight, if a plugin cares.
            # The engine calls this for every cluster event on every policy's queue, so
            # with many policies this is the common case (issue 15, many-policies).
            if self._in_flight:
                interested = self._interested(event)
                if interested is None or interested:
                    self._record(event, old, new)
            return 0
        interested = self._interested(event)
        if interested is not None and not interested:
            return 0  # no plugin cares (isEventOfInterest): not even kept for in-flight pods
        now = self._clock()
        moved = 0
        if interested is None:
            candidates = list(self._unschedulable.values())
        else:
            keys = set(self._index.get("*", ()))
            for plugin in interested:
                keys.update(self._index.get(plugin, ()))
            candidates = [self._unschedulable[k] for k in keys]
        for qp in candidates:
            if pre_check is not None and not any(
                    pre_check(m.pod) for m in _pods_of(qp)):
                continue
            if qp.gated and not event.is_wildcard and not any(
                    eh.event.matches(event)
                    for eh in self._registered(qp.gating_plugin) or ()):
                continue
            strategy = self.worth_requeuing(qp, event, old, new)
            if strategy is Strategy.SKIP:
                continue
            self._unpark(qp._qkey)
            if self._requeue(qp, strategy, now) is not Location.UNSCHEDULABLE:
                moved += 1
        if not journaled:
            self._record(event, old, new)
        return moved

    def _record(self, event: ev.ClusterEvent, old: Any, new: Any, uid: str = "") -> None:
        """Keep the event for the pods in flight (addEventIfAnyInFlight)."""
        if not self._in_flight:
            return
        self._event_n = self._journal.next() if self._journal is not None \
            else self._event_n + 1
        self._events.append(_InFlightEvent(self._event_n, event, old, new, uid))

    # -- what the scheduling loop does ----------------------------------------------------
    @_changes_sizes
    def flush(self) -> None:
        """Backoff-completed pods to activeQ; pods unschedulable for longer than 5 minutes
        back (flushBackoffQCompleted, flushUnschedulableEntitiesLeftover)."""
        now = self._clock()
        heap = self._backoff_heap
        while heap and heap[0][0] <= now:
            *_, seq, key = heapq.heappop(heap)
            qp = self._backoff.get(key)
            if qp is None or qp._seq != seq:
                continue
            del self._backoff[key]
            self._extra[Location.BACKOFF] -= _extra(qp)
            self._move_to_active(qp, from_backoff=self._pop_from_backoff)
        if now < self._next_leftover_flush:
            return
        self._next_leftover_flush = now + UNSCHEDULABLE_FLUSH_PERIOD
        limit = now - self._max_in_unschedulable
        stale = [qp for qp in self._unschedulable.values()
                 if max(qp.timestamp, qp.flush_timestamp) <= limit]
        for qp in stale:
            qp.flush_timestamp = now
            event = ev.EVENT_UNSCHEDULABLE_TIMEOUT
            strategy = self.worth_requeuing(qp, event, None, None)
            self._unpark(qp._qkey)
            self._requeue(qp, strategy, now)

    def _pop_backoff(self) -> _Entry | None:
        """PopFromBackoffQ: activeQ is empty; the first pod of backoffQ that plugins
        rejected (not one that failed with an error) goes now."""
        best: tuple[float, int, float, int, str] | None = None
        for entry in self._backoff_heap:
            qp = self._backoff.get(entry[4])
            if qp is None or qp._seq != entry[3] or not qp.rejected_by:
                continue
            if best is None or entry < best:
                best = entry
        if best is None:
            return None
        qp = self._backoff.pop(best[4])
        self._extra[Location.BACKOFF] -= _extra(qp)
        qp._seq = self._next_seq()  # its heap entry goes stale
        return qp

    @_changes_sizes
    def pop_nowait(self) -> QueuedPod | None:
        """The next entity to schedule, now in flight; None when nothing can go now. A pod
        group is popped as one unit: every queued member is in flight and the first in
        upstream's order is returned; pop_group then gives the group."""
        self.flush()
        heap = self._active_heap
        qp: _Entry | None = None
        while heap:
            *_, seq, key = heapq.heappop(heap)
            cand = self._active.get(key)
            if cand is None or cand._seq != seq:
                continue
            del self._active[key]
            self._extra[Location.ACTIVE] -= _extra(cand)
            qp = cand
            break
        if qp is None and self._pop_from_backoff and self._backoff:
            qp = self._pop_backoff()
        if qp is None:
            return None
        self.scheduling_cycle += 1
        events_from = self._journal.n if self._journal is not None else self._event_n
        qp.attempts += 1
        if isinstance(qp, QueuedPodGroup):
            # IncAttempts of the group and of every member; all in flight.
            self._groups.pop(qp.key, None)
            self._groups_in_flight[qp.key] = qp
            for m in qp.members:
                m.attempts += 1
                self._fly(m, events_from)
                self._member_of.pop(m.key, None)
            qp.sort()
            self._popped_group = qp
            return qp.members[0]
        self._fly(qp, events_from)
        return qp

    def _fly(self, qp: QueuedPod, events_from: int) -> None:
        qp._gone = False
        qp._events_from = events_from
        self._in_flight[qp.uid] = qp
        self._in_flight_keys[qp.key] = qp.uid

    @_changes_sizes
    def pop_group(self, qp: QueuedPod) -> QueuedPodGroup | None:
        """After pop_nowait: the pod group popped as one unit when `qp` is the first of its
        members (every queued member now in flight, in upstream's order); None for a plain
        pod. The group stays in its cycle until group_done."""
        g = self._popped_group
        if g is None or not g.members or g.members[0] is not qp:
            return None
        self._popped_group = None
        return g

    @_changes_sizes
    def group_done(self, key: str, outcome: GroupOutcome = GroupOutcome.SUCCESS) -> None:
        """AddAttemptedPodGroupIfNeeded: the group's cycle ended with `outcome`, each
        member's attempt ended already (a member that failed came back to
        pendingPodGroupPods, with the members that arrived meanwhile). With none there the
        group leaves the queue. Otherwise it is queued again as one entity: after a
        success straight to activeQ with its counters reset (its timestamp kept when a
        member of this cycle is among them, so that preemption is tried at once); after a
        rejection UnschedulableCount++ and after an error ConsecutiveErrorsCount++, then
        backoffQ while backing off, else activeQ."""
        g = self._groups_in_flight.pop(key, None)
        pending = self._group_pending.pop(key, {})
        if self._popped_group is g:
            self._popped_group = None
        if g is None or self._group_of is None:
            # Not popped as a group, or the pipeline no longer schedules groups: the
            # members that came back are queued as pods.
            for qp in pending.values():
                self._move_to_active(qp)
            return
        if not pending:
            return
        if self._pod_group is not None and self._pod_group(key) is None:
            self._incomplete.setdefault(key, {}).update(pending)
            return
        tried = {m.uid for m in g.members}
        had_unschedulable = any(qp.uid in tried for qp in pending.values())
        g.members = list(pending.values())
        for qp in g.members:
            self._member_of[qp.key] = g
        self._groups[key] = g
        g.priority = self._group_priority(key, g.members[0])
        now = self._clock()
        if outcome is GroupOutcome.RESTORED:
            g.attempts -= 1
            self._move_to_active(g, from_backoff=True)
            return
        g._expiry = None
        if outcome is GroupOutcome.SUCCESS:
            g.consecutive_errors = g.unschedulable_count = 0
            if not had_unschedulable:
                g.timestamp, g._order = now, self._next_seq()
        elif outcome is GroupOutcome.REJECTED:
            g.unschedulable_count += 1
            g.consecutive_errors = 0
            g.timestamp, g._order = now, self._next_seq()
        else:
            g.consecutive_errors += 1
            g.timestamp, g._order = now, self._next_seq()
        g.flush_timestamp = 0.0
        if outcome is not GroupOutcome.SUCCESS and self._backing_off(g, now):
            self._move_to_backoff(g)
        else:
            self._move_to_active(g)

    @_changes_sizes
    def activate(self, keys: Iterable[str]) -> int:
        """Activate: these pods go to activeQ from backoffQ or the unschedulable pool
        (PreEnqueue runs again for a gated one); a group member activates its whole group.
        Returns how many moved."""
        moved = 0
        for key in keys:
            g = self._member_of.get(key)
            entry: _Entry | None = g
            if entry is None:
                entry = _pod_entry(self._unschedulable, key) or _pod_entry(self._backoff, key)
            if entry is None:
                continue
            loc = self._location(entry)
            if loc in (Location.UNSCHEDULABLE, Location.GATED):
                self._unpark(entry._qkey)
                if self._move_to_active(entry):
                    moved += 1
            elif loc is Location.BACKOFF:
                del self._backoff[entry._qkey]
                self._extra[Location.BACKOFF] -= _extra(entry)
                if self._move_to_active(entry, from_backoff=True):
                    moved += 1
        return moved

    def next_due(self) -> float | None:
        """Seconds until a backoff expires or an unschedulable pod is flushed."""
        due: float | None = None
        heap = self._backoff_heap
        while heap and (self._backoff.get(heap[0][4]) is None
                        or self._backoff[heap[0][4]]._seq != heap[0][3]):
            heapq.heappop(heap)
        if heap:
            due = heap[0][0]
        if self._unschedulable:
            flush_at = self._next_leftover_flush
            due = flush_at if due is None else min(due, flush_at)
        if due is None:
            return None
        return max(due - self._clock(), 0.001)

    def _finish(self, qp: QueuedPod) -> bool:
        """Leave flight (Done); False when the pod is gone meanwhile (do not requeue)."""
        self._land(qp)
        if qp._gone:
            return False
        return self._in_flight_keys.get(qp.key) is None and qp.key not in self

    def _land(self, qp: QueuedPod) -> None:
        if self._in_flight.pop(qp.uid, None) is not None \
                and self._in_flight_keys.get(qp.key) == qp.uid:
            del self._in_flight_keys[qp.key]
        if not self._in_flight:
            self._events.clear()
        elif self._events and self._events[0].n <= qp._events_from:
            oldest = min(p._events_from for p in self._in_flight.values())
            i = 0
            while i < len(self._events) and self._events[i].n <= oldest:
                i += 1
            del self._events[:i]

    @_changes_sizes
    def done(self, qp: QueuedPod) -> None:
        """The pod's cycle ended with a bind, or it needs nothing more (Done)."""
        self._land(qp)

    def _in_flight_strategy(self, qp: QueuedPod) -> Strategy:
        """determineSchedulingHintForInFlightPod."""
        if not qp.rejected_by:
            return Strategy.AFTER_BACKOFF
        for e in self._events:
            if e.n <= qp._events_from or (e.uid and e.uid != qp.uid):
                continue
            if self.worth_requeuing(qp, e.event, e.old, e.new) is not Strategy.SKIP:
                return Strategy.AFTER_BACKOFF
        if self._journal is not None:
            for e in self._journal.since(qp._events_from):
                interested = self._interested(e.event)
                if interested is not None and not interested:
                    continue  # not kept by move() when no plugin of ours cares
                if self.worth_requeuing(qp, e.event, e.old, e.new) is not Strategy.SKIP:
                    return Strategy.AFTER_BACKOFF
        return Strategy.SKIP

    @_changes_sizes
    def add_unschedulable(self, qp: QueuedPod, rejected_by: Iterable[str] = ()) -> None:
        """Rejected by plugins, or failed (AddUnschedulablePodIfNotPresent): no rejecting
        plugin means an error (counts a consecutive error; retried after backoff on any
        event). A pod group member goes back into its group (addUnschedulablePodGroupMember:
        while the group is in its cycle, to pendingPodGroupPods), which group_done requeues
        as a whole."""
        qp.rejected_by = frozenset(rejected_by)
        member = self._group_of is not None and self._group_of(qp.pod) is not None
        strategy = Strategy.SKIP if member else self._in_flight_strategy(qp)
        if not self._finish(qp):
            return
        now = self._clock()
        if qp.rejected_by:
            qp.unschedulable_count += 1
            qp.consecutive_errors = 0
        else:
            qp.consecutive_errors += 1
        qp.timestamp = now
        qp.flush_timestamp = 0.0
        if member:
            self._add_member(qp, now)
            return
        self._requeue(qp, strategy, now)

    @_changes_sizes
    def activate_gated(self, plugin: str) -> int:
        """Activate: the pods `plugin`'s PreEnqueue keeps out run their PreEnqueue again,
        and go to activeQ when it lets them in (upstream's Handle.Activate, which async
        preemption calls once a preemptor's victims are evicted). Returns how many moved."""
        if not self._gated:
            return 0
        keys = self._index.get(plugin, set()) | self._index.get("*", set())
        moved = 0
        for key in list(keys):
            qp = self._unschedulable.get(key)
            if qp is None or qp.gating_plugin != plugin:
                continue
            self._unpark(key)
            if self._move_to_active(qp):
                moved += 1
        return moved

    @_changes_sizes
    def add_backoff(self, qp: QueuedPod) -> None:
        """The cycle or the binding failed with an error: retry after backoff."""
        self.add_unschedulable(qp, ())

    @_changes_sizes
    def restore(self, qp: QueuedPod) -> None:
        """Put a popped pod back as it was, uncounted (the scheduler is paused). A group
        member waits for its group (group_done with GroupOutcome.RESTORED)."""
        if not self._finish(qp):
            return
        qp.attempts -= 1
        if self._group_of is not None and self._group_of(qp.pod) is not None:
            self._add_member(qp, self._clock())
            return
        self._move_to_active(qp, from_backoff=True)

    @_changes_sizes
    def close(self) -> None:
        """The policy is gone: its queue no longer takes the journal's events."""
        self.on_wake = None
        if self._journal is not None and self in self._journal._queues:
            self._journal._queues.remove(self)


def _monotonic_to_wall() -> float:
    return time.time() - time.monotonic()


def _no_offset() -> float:
    return 0.0


def _pod_entry(d: Mapping[str, _Entry], key: str) -> QueuedPod | None:
    """The pod entry of that pod key in one of the queue's dicts (never a group's)."""
    qp = d.get(key)
    return qp if isinstance(qp, QueuedPod) else None


def _extra(entry: _Entry) -> int:
    """The pods an entity counts beyond one (a group's other members)."""
    return len(entry.members) - 1 if isinstance(entry, QueuedPodGroup) else 0


def _pods_of(entry: _Entry) -> Sequence[QueuedPod]:
    return entry.members if isinstance(entry, QueuedPodGroup) else (entry,)


_IGNORED_META = ("resourceVersion", "generation", "managedFields", "finalizers")


def _pod_updated(old: Json, new: Json) -> bool:
    """isPodUpdated (scheduling_queue.go before queueing hints took over): a change other
    than status, resourceVersion, generation, managedFields or finalizers. Our own
    PodScheduled condition patch is not one, so it never retries the pod it reports on."""
    if old.get("spec") != new.get("spec"):
        return True
    # The one status change a plugin waits for (DynamicResources' claims from templates,
    # UpdatePodGeneratedResourceClaim).
    if ((old.get("status") or {}).get("resourceClaimStatuses")
            != (new.get("status") or {}).get("resourceClaimStatuses")):
        return True
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    keys = (om.keys() | nm.keys()).difference(_IGNORED_META)
    return any(om.get(k) != nm.get(k) for k in keys)
